/*
 * The VMM of a sandbox in a process of its own (docs/security.md, "What runs where").
 *
 * The sandbox forks right before it would create the VM; the child builds and runs the VM and
 * nothing else, and the parent keeps what only it may hold: the session's control channel to
 * the agent (it reaches the guest through the VM's vsock unix socket, as before), the policy,
 * and the user's environment and credentials. The two talk over a SOCK_SEQPACKET socketpair in
 * fixed-size messages that each side checks as untrusted input: the parent treats the child as
 * being as hostile as the guest, since the guest may have subverted it.
 *
 * The child is confined before any guest instruction runs: killed when its parent dies
 * (PR_SET_PDEATHSIG, checked against an early parent exit), in a session of its own (no
 * terminal whose Ctrl-C would reach it), stdin and stdout on /dev/null,
 * stderr on the caller's log stream, every other descriptor but the control socket closed,
 * PR_SET_NO_NEW_PRIVS, not dumpable (other processes of the user can neither ptrace it nor
 * read its memory, environment or maps through /proc); the VM's child then enters its jail
 * (sandbox/vmm_jail.h: its own namespaces and a root holding only what the VM reaches by path)
 * before it builds the VM; once the VM is built its environment
 * block is wiped (so /proc/PID/environ shows none of the user's variables) and its main thread
 * takes the "VMM main" seccomp filter. The child is forked, not executed afresh: its memory starts as
 * a copy of the caller's, so anything the caller had read into memory before the fork is
 * still there (docs/security.md says what that leaves open).
 */
#ifndef VOIDBOX_SANDBOX_VMM_PROCESS_H
#define VOIDBOX_SANDBOX_VMM_PROCESS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm/snapshot.h"
#include "vmm/vm.h"

/*
 * The messages, one kind per SOCK_SEQPACKET record, all of one fixed size (a reader refuses
 * any other length). The child answers "started" once (a restore's carries the secret its
 * snapshot's guest answers to, for the parent's rekey), then "exited" once; in between it
 * takes "stop", and "snapshot" and "record working set", each answered by one "answer"
 * (status and sentence). Declared here so the unit test can play the child's part.
 */
#define VMM_PROCESS_TEXT_MAX PATH_MAX

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
	uint8_t secret[VM_SECRET_LEN];
	char text[VMM_PROCESS_TEXT_MAX];       /* a sentence, or SNAPSHOT's directory */
	char parent_dir[VMM_PROCESS_TEXT_MAX]; /* SNAPSHOT of a diff: its base */
};

/* The child's control socket; 0 and 1 are /dev/null, 2 the caller's log stream. */
#define VMM_PROCESS_CONTROL_FD 3
/* What /proc/PID/comm of a VMM process says. */
#define VMM_PROCESS_NAME "voidbox-vmm"

/*
 * Forks a confined child (above) that runs body(VMM_PROCESS_CONTROL_FD, opaque) and exits with
 * its return value. The parent gets the child's pid and its end of the control socket
 * (close-on-exec). 0, or -errno with a sentence in err.
 */
int vmm_process_spawn(int (*body)(int control_fd, void *opaque), void *opaque, pid_t *pid,
		      int *control_fd, char *err, size_t errlen);

/*
 * In a spawned child: wipes the environment block (what /proc/PID/environ reads), empties
 * environ, and names the process VMM_PROCESS_NAME (/proc/PID/comm). Pointers into the old
 * environment read zeros afterwards. 0 or -errno.
 */
int vmm_process_scrub_identity(void);

/* A VM running in a child process, seen from the parent. */
struct vmm_process;

/*
 * Spawns the child, which moves itself into cgroup_dir (NULL: stays where it is;
 * sandbox/vmm_cgroup.h), then creates and starts the VM of cfg; returns once it has (0 and
 * *out) or has failed (-errno and its sentence in err). With snapshots the child's main
 * thread may write snapshot files when asked (VMM_THREAD_VMM_MAIN_SNAPSHOTS) beneath the
 * directories of snapshot_areas (NULL-terminated; each in its jail, read-write, at the same
 * path: vmm_process_snapshot's paths must be canonical and beneath one); without, it writes
 * no file at all and vmm_process_snapshot is refused.
 */
int vmm_process_start_vm(const struct vm_config *cfg, const char *cgroup_dir, bool snapshots,
			 const char *const *snapshot_areas, struct vmm_process **out, char *err,
			 size_t errlen);
/*
 * Spawns a child that restores the VM from snapshot_dir (opts as vm_create_from_snapshot,
 * working-set prefetch included; it may write the working-set list beside the snapshot, and
 * snapshots beneath snapshot_areas as vmm_process_start_vm's) and returns at once; vmm_process_await_started then waits for it and hands over the secret the restored
 * guest answers to until the parent rekeys it. The child's death signal follows the thread
 * that spawned it (PR_SET_PDEATHSIG): spawn from a thread that outlives the VM.
 */
int vmm_process_launch_restore(const char *snapshot_dir, const struct vm_restore_options *opts,
			       const char *cgroup_dir, const char *const *snapshot_areas,
			       struct vmm_process **out, char *err, size_t errlen);
/*
 * Spawns body, which must answer VMM_MSG_STARTED first, without waiting (the launches above
 * with a body of their own; tests give a stand-in). 0 and *out, or -errno with err.
 */
int vmm_process_launch(int (*body)(int control_fd, void *opaque), void *opaque,
		       struct vmm_process **out, char *err, size_t errlen);
/*
 * Waits for a launched child's "started": 0, its secret into secret (may be NULL); or -errno
 * with the child's sentence in err, and the caller destroys proc.
 */
int vmm_process_await_started(struct vmm_process *proc, uint8_t secret[VM_SECRET_LEN],
			      char *err, size_t errlen);
/* Launch and await in one: on failure nothing is left (*out NULL). */
int vmm_process_start(int (*body)(int control_fd, void *opaque), void *opaque,
		      uint8_t secret[VM_SECRET_LEN], struct vmm_process **out, char *err,
		      size_t errlen);
/*
 * Asks the child to save its VM as vm_snapshot_save does into dir (which the caller made),
 * telling it the session secret the guest answers to now (snapshots store it). 0, or -errno
 * with the child's sentence in err; a child that answers anything malformed, or dies, has
 * ended the VM (vmm_process_wait then says VM_EXIT_INTERNAL_ERROR).
 */
int vmm_process_snapshot(struct vmm_process *proc, const char *dir,
			 const struct vm_snapshot_options *opts,
			 const uint8_t secret[VM_SECRET_LEN], char *err, size_t errlen);
/* Asks a restored VM's child for vm_working_set_record beside its snapshot; as above. */
int vmm_process_record_working_set(struct vmm_process *proc, char *err, size_t errlen);
/* As vm_wait: 0 and *reason once the VM has ended (or its process died), else -ETIMEDOUT. */
int vmm_process_wait(struct vmm_process *proc, int timeout_ms, enum vm_exit_reason *reason);
/* As vm_request_stop: asks the child to stop the VM; returns at once. */
void vmm_process_request_stop(struct vmm_process *proc);
/*
 * Stops the VM, gives the child a bounded time to exit, then kills it, and reaps it: bounded
 * whatever the guest did to the child. NULL is fine.
 */
void vmm_process_destroy(struct vmm_process *proc);
pid_t vmm_process_pid(const struct vmm_process *proc);

#endif
