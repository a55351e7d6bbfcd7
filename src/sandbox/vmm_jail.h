/*
 * The VMM process's jail (docs/security.md, "What runs where"): namespaces of its own and a
 * root that holds only what the VM reaches by path, as Firecracker's jailer builds for it.
 *
 * The child of src/sandbox/vmm_process.c enters it right after joining its cgroup, while it is
 * still one thread (a user namespace can only be entered then, and the threads the VM starts
 * must share the new mount namespace): a new mount and IPC namespace, a new network namespace
 * for a VM without networking, and, where the process lacks CAP_SYS_ADMIN, a user namespace
 * first that maps the user's uid and gid to themselves. The root becomes a read-only tmpfs
 * holding bind mounts of the plan's entries at the very paths the VM names them by (the
 * kernel, initramfs, /dev/kvm, the kernel cache, the disks, the shares, the runtime directory
 * with the vsock socket and the serial log, /etc/resolv.conf for libslirp) and the process's
 * own /proc/PID as /proc/self (the share's server reopens its descriptors through
 * /proc/self/fd); the old root is detached. A restore's plan holds the snapshot's directory
 * and its base's in place of the kernel and initramfs, and the disks and shares its device
 * sections name; a VMM that takes snapshot requests
 * also holds the directories they write beneath (vmm_jail_add). Binding at the same paths keeps every layer below
 * unchanged: the VM opens what it opens, the workers' Landlock rules name the same
 * directories. Once the VM is built, the entries only creation needed (kernel, initramfs,
 * /dev/kvm, the kernel cache, the disks, all held as descriptors by then) are detached too.
 *
 * Paths are made canonical first (a symlink in the host's path would not exist in the jail),
 * so the VM is built from a copy of its configuration whose paths point into the plan.
 * Where the host refuses the namespaces (unprivileged user namespaces disabled, a chroot), the
 * VMM runs without them: vmm_jail_host_mode finds that out once per process, in a throwaway
 * child, and logs one warning naming why.
 */
#ifndef VOIDBOX_SANDBOX_VMM_JAIL_H
#define VOIDBOX_SANDBOX_VMM_JAIL_H

#include <stdbool.h>
#include <stddef.h>

#include "vmm/snapshot.h"
#include "vmm/vm.h"

enum vmm_jail_mode {
	VMM_JAIL_OFF,	  /* the host refuses the namespaces: no jail */
	VMM_JAIL_PRIVILEGED, /* the process may unshare a mount namespace itself (root) */
	VMM_JAIL_USER_NS,    /* through a user namespace of its own first */
};

enum vmm_jail_access {
	VMM_JAIL_READ_ONLY,
	VMM_JAIL_READ_WRITE,
};

/* Whether an entry stays once the VM is built (vmm_jail_seal detaches the others). */
enum vmm_jail_lifetime {
	VMM_JAIL_FOR_CREATION,
	VMM_JAIL_WHILE_RUNNING,
};

struct vmm_jail;

/*
 * How this host lets VMM processes be jailed, found once per process by a child that tries
 * the unshare and exits; the first call that finds VMM_JAIL_OFF logs the warning. Call it in
 * the parent, before forking a VMM process.
 */
enum vmm_jail_mode vmm_jail_host_mode(void);
/* Why the last probe found VMM_JAIL_OFF ("" otherwise). */
const char *vmm_jail_off_reason(void);

/* An empty plan; own_network: the VM keeps the host's network namespace (libslirp needs it). */
struct vmm_jail *vmm_jail_new(bool own_network);
/*
 * Adds host path source, seen in the jail at target (NULL: the same path). A file or a
 * directory (with what is mounted beneath it). 0, or -errno with a sentence in err.
 */
int vmm_jail_add(struct vmm_jail *jail, const char *source, const char *target,
		 enum vmm_jail_access access, enum vmm_jail_lifetime lifetime, char *err,
		 size_t errlen);
/*
 * The plan for the VM of cfg: fills *jailed with a copy of cfg whose paths are canonical and
 * in the plan (the jail owns the strings and arrays; keep it until the VM is destroyed). A
 * path that does not exist stays as it is and out of the plan, so vm_create reports it.
 */
int vmm_jail_plan_vm(const struct vm_config *cfg, struct vmm_jail **out,
		     struct vm_config *jailed, char *err, size_t errlen);
/*
 * The plan for a restore of snapshot_dir with opts, from its state file, read once and kept
 * for the restore (vmm_jail_snapshot_state): the snapshot's directory (read-write for the
 * VM's life: the working set is recorded beside it; its state, memory and store files
 * read-only over it, so the next restore of it reads what this one did), a diff's base at
 * the path its state file names (read-only, for its life: a later diff is checked against
 * it), /dev/kvm, the runtime directory and the console's log, with a network in the
 * snapshot /etc/resolv.conf and /dev/urandom, and every host path its device sections name
 * (vm_snapshot_host_paths: the disks for creation, the shares for the VM's life, read-only
 * where they were), at the very paths the sections name. *jailed_dir and *jailed are what the restore is then given
 * (canonical paths the jail owns). 0, or -errno with a sentence in err (an unreadable
 * snapshot or device section, a relative path in a section, out of memory).
 */
int vmm_jail_plan_restore(const char *snapshot_dir, const struct vm_restore_options *opts,
			  struct vmm_jail **out, const char **jailed_dir,
			  struct vm_restore_options *jailed, char *err, size_t errlen);
/*
 * The state file vmm_jail_plan_restore read, for vm_create_from_snapshot_state, until
 * vmm_jail_seal; NULL for another plan (or jail NULL).
 */
const struct vm_snapshot_state *vmm_jail_snapshot_state(const struct vmm_jail *jail);
/*
 * Holds the calling thread's file calls (Landlock) beneath what a VMM process's
 * snapshot-writing main thread needs once its VM runs: the snapshot areas (NULL-terminated,
 * canonical; read-write), a restore's snapshot directory (read-write: the working set and
 * diffs against it) and a diff's base (read-only), and /proc/self/pagemap (read-only). Call
 * it after the VM's other threads have started (they keep their own rules) and before the
 * thread's seccomp filter, which forbids the Landlock calls. Where the kernel has no Landlock
 * 2, logs so and returns 0. 0, or -errno with a sentence in err.
 */
int vmm_jail_hold_snapshot_writer(const struct vmm_jail *jail, const char *const *areas,
				  char *err, size_t errlen);
/*
 * In the VMM process, single-threaded: unshares as mode says and pivots into the plan's root.
 * VMM_JAIL_OFF changes nothing. 0, or -errno with a sentence in err (the process is then in
 * no state to run a VM).
 */
int vmm_jail_enter(struct vmm_jail *jail, enum vmm_jail_mode mode, char *err, size_t errlen);
/*
 * Detaches the entries only creation needed and frees the snapshot state a restore's plan
 * read; a failure is logged, the VM runs on.
 */
void vmm_jail_seal(struct vmm_jail *jail);
void vmm_jail_free(struct vmm_jail *jail);

#endif
