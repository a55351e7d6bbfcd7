/*
 * What a VMM process is told to run (docs/security.md, "What runs where"): the whole
 * configuration of one VM, handed from the caller to the voidbox-vmm executable it starts.
 *
 * The VMM process is executed afresh, so nothing of the caller's memory reaches it but what
 * this encoding carries: a cold boot's struct vm_config (disks, shares, the network with its
 * egress policy and published ports, the secret, the host CPU), or a restore's snapshot
 * directory and struct vm_restore_options; the cgroup it joins, its main thread's filter role,
 * its jail mode, the directories snapshot requests write beneath, and the caller's log level.
 *
 * The encoding is versioned little-endian (common/byte_buffer.h) and decoded as untrusted
 * input, though only the caller writes it: every count is bounded, every enumeration and
 * boolean range-checked, every string bounded and free of NUL bytes, and an input with bytes
 * left over or missing is refused whole. Encoding a decoded launch gives back the same bytes,
 * which the unit test and the fuzz target (fuzz/vmm_launch_fuzz.c) both check.
 */
#ifndef VOIDBOX_SANDBOX_VMM_LAUNCH_H
#define VOIDBOX_SANDBOX_VMM_LAUNCH_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"
#include "devices/net.h"
#include "sandbox/vmm_jail.h"
#include "vmm/snapshot.h"
#include "vmm/thread_filter.h"
#include "vmm/vm.h"

/* "VMML" and the version a decoder accepts; any other is refused. */
#define VMM_LAUNCH_MAGIC 0x4c4d4d56u
#define VMM_LAUNCH_VERSION 4u
/* The most bytes an encoding may take (all strings at their longest fit well inside). */
#define VMM_LAUNCH_MAX_BYTES (1024u * 1024u)
/* A VM has at most one share per virtio-mmio slot. */
#define VMM_LAUNCH_MAX_SHARES VM_VIRTIO_MMIO_MAX_SLOTS
/* Directories a VMM that takes snapshot requests may write beneath. */
#define VMM_LAUNCH_MAX_AREAS 8
/* The longest string: a path (the kernel command line, CMDLINE_MAX, is shorter). */
#define VMM_LAUNCH_STRING_MAX PATH_MAX
/* Strings one launch holds at most: six of the VM's, its disks, two per share, the rest. */
#define VMM_LAUNCH_STRING_FIELDS_MAX                                                    \
	(6 + VM_MAX_DISKS + 2 * VMM_LAUNCH_MAX_SHARES + 4 + VMM_LAUNCH_MAX_AREAS)

enum vmm_launch_kind {
	VMM_LAUNCH_BOOT = 1, /* vm_create(cfg) */
	VMM_LAUNCH_RESTORE,  /* vm_create_from_snapshot(snapshot_dir, restore) */
};

struct vmm_launch {
	enum vmm_launch_kind kind;
	struct vm_config cfg;		   /* BOOT */
	const char *snapshot_dir;	   /* RESTORE */
	struct vm_restore_options restore; /* RESTORE */
	const char *cgroup_dir;		   /* NULL: stays in the caller's cgroup */
	enum vmm_thread_role main_role;	   /* VMM_THREAD_VMM_MAIN or _MAIN_SNAPSHOTS */
	enum vmm_jail_mode jail_mode;
	const char *const *snapshot_areas; /* NULL-terminated, at most VMM_LAUNCH_MAX_AREAS */
	enum log_level log_level;
};

/*
 * A decoded launch with everything it points to: launch's pointers lead into the fields below
 * and into strings it owns (vmm_launch_release frees them).
 */
struct vmm_launch_decoded {
	struct vmm_launch launch;
	struct vm_disk disks[VM_MAX_DISKS];
	struct vm_share shares[VMM_LAUNCH_MAX_SHARES];
	struct net_config network;
	const char *areas[VMM_LAUNCH_MAX_AREAS + 1];
	char *strings[VMM_LAUNCH_STRING_FIELDS_MAX];
	size_t string_count;
};

/* Encodes launch into a malloc'ed buffer: 0, or -EINVAL/-ENOMEM with a sentence in err. */
int vmm_launch_encode(const struct vmm_launch *launch, uint8_t **out, size_t *out_len, char *err,
		      size_t errlen);
/* Decodes and checks data: 0 and *out (release it), or -EBADMSG/-ENOMEM with a sentence. */
int vmm_launch_decode(const void *data, size_t len, struct vmm_launch_decoded *out, char *err,
		      size_t errlen);
/* Frees what a decode owns (wiping the secret); a zeroed or failed decode is fine too. */
void vmm_launch_release(struct vmm_launch_decoded *decoded);

#endif
