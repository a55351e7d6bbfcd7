/*
 * The messages between a sandbox and its VMM process (docs/security.md, "What runs where"),
 * one kind per SOCK_SEQPACKET record, all of one fixed size (a reader refuses any other
 * length), so each side takes exactly one recv() per message and checks it as untrusted input.
 * The VMM process answers "started" once (a restore's carries the secret its snapshot's guest
 * answers to, for the parent's rekey), then "exited" once; in between it takes "stop", and
 * "snapshot" and "record working set", each answered by one "answer" (status and sentence).
 * Declared apart from either side so voidbox-vmm, the sandbox layer and the unit tests that
 * play the VMM's part share them.
 */
#ifndef VOIDBOX_SANDBOX_VMM_MSG_H
#define VOIDBOX_SANDBOX_VMM_MSG_H

#include <limits.h>
#include <stdint.h>

#include "vmm/vm.h"

#define VMM_PROCESS_TEXT_MAX PATH_MAX

/* The VMM process's control socket; 0 and 1 are /dev/null, 2 the caller's log stream. */
#define VMM_PROCESS_CONTROL_FD 3
/* Where it finds its launch (sandbox/vmm_launch.h) when executed: a sealed memfd. */
#define VMM_PROCESS_LAUNCH_FD 4
/* The VMM executable's name, and so what /proc/PID/comm of a VMM process says. */
#define VMM_PROCESS_NAME "voidbox-vmm"

enum vmm_msg_kind {
	VMM_MSG_STARTED = 1,	     /* child: status (0 or -errno), its sentence; a restore's secret */
	VMM_MSG_EXITED,		     /* child: the VM ended, reason */
	VMM_MSG_STOP,		     /* parent: stop the VM */
	VMM_MSG_SNAPSHOT,	     /* parent: save to text (parent_dir: a diff's base), secret */
	VMM_MSG_RECORD_WORKING_SET, /* parent: record the working set beside the restored snapshot */
	VMM_MSG_ANSWER,		     /* child: status (0 or -errno) and sentence of a request */
};

struct vmm_msg {
	uint32_t kind;
	int32_t status;
	uint32_t reason;	 /* EXITED: enum vm_exit_reason */
	uint32_t snapshot_type;	 /* SNAPSHOT: enum vm_snapshot_type */
	uint32_t snapshot_after; /* SNAPSHOT: enum vm_snapshot_after */
	uint32_t working_set_known; /* STARTED of a restore: 1 when it prefetched its own list */
	uint64_t working_set_prefaulted; /* STARTED of a restore: pages mapped into KVM ahead */
	uint8_t secret[VM_SECRET_LEN];
	char text[VMM_PROCESS_TEXT_MAX];       /* a sentence, or SNAPSHOT's directory */
	char parent_dir[VMM_PROCESS_TEXT_MAX]; /* SNAPSHOT of a diff: its base */
};

/* Sends msg whole, then wipes its secret: 0 or -EIO. */
int vmm_msg_send_whole(int fd, struct vmm_msg *msg);
/*
 * The same without waiting for room: -EIO when the socket is full, so a peer that stopped
 * reading (a subverted VMM process) cannot hold the sender.
 */
int vmm_msg_send_nowait(int fd, struct vmm_msg *msg);
/* A message of kind with status, reason and text (may be NULL): 0 or -EIO. */
int vmm_msg_send(int fd, enum vmm_msg_kind kind, int status, uint32_t reason, const char *text);
/* One message, or -EIO for the socket's end or any malformed message. */
int vmm_msg_recv(int fd, struct vmm_msg *msg);
/* A status from the other side: 0, or a -errno in range (anything else is -EIO). */
int vmm_msg_status(int32_t status);

#endif
