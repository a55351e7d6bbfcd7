/*
 * The VMM of a sandbox in a process of its own (docs/security.md, "What runs where").
 *
 * The sandbox starts it right before it would create the VM; the VMM process builds and runs
 * the VM and nothing else, and the parent keeps what only it may hold: the session's control
 * channel to the agent (it reaches the guest through the VM's vsock unix socket, as before),
 * the policy, and the user's environment and credentials. The two talk over a SOCK_SEQPACKET
 * socketpair in fixed-size messages (sandbox/vmm_msg.h) that each side checks as untrusted
 * input: the parent treats the child as being as hostile as the guest, since the guest may
 * have subverted it.
 *
 * The child is forked, confined, then executes the voidbox-vmm program afresh, so its memory
 * holds nothing of the caller's (no API key read into a spec, no other sandbox's secrets or
 * channels): what it needs arrives as its launch (sandbox/vmm_launch.h), encoded by the parent
 * into a sealed memfd. Before the execution the child is killed when its parent dies
 * (PR_SET_PDEATHSIG, checked against an early parent exit; kept across the execution), in a
 * session of its own (no terminal whose Ctrl-C would reach it), stdin and stdout on
 * /dev/null, stderr on the caller's log stream, the control socket on VMM_PROCESS_CONTROL_FD,
 * the launch on VMM_PROCESS_LAUNCH_FD, every other descriptor closed, PR_SET_NO_NEW_PRIVS;
 * the program runs with an empty environment and the one argument VMM_PROCESS_NAME, makes
 * itself not dumpable again first thing (an execution resets that), and does what
 * sandbox/vmm_serve.h says.
 *
 * The program is found, in this order: the path the entry point named (vmm_process_use_binary:
 * every entry point passes $VOIDBOX_VMM_BINARY, cli/host_env.h, which the meson test setup
 * sets for tests and benchmarks); voidbox-vmm beside the running executable (/proc/self/exe's
 * directory: the voidbox command, and the daemon it serves); the installed libexec path. A
 * missing program is an error that says where it was looked for and what to do.
 */
#ifndef VOIDBOX_SANDBOX_VMM_PROCESS_H
#define VOIDBOX_SANDBOX_VMM_PROCESS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/vmm_msg.h"
#include "vmm/snapshot.h"
#include "vmm/vm.h"

/* The variable entry points read the program's path from (cli/host_env.c). */
#define VMM_PROCESS_BINARY_ENV "VOIDBOX_VMM_BINARY"

/*
 * Names the voidbox-vmm program this process's sandboxes execute; NULL or "" looks beside the
 * running executable, then at the installed path. Call before any sandbox starts (the entry
 * points do, with $VOIDBOX_VMM_BINARY). 0, or -ENAMETOOLONG (nothing changed).
 */
int vmm_process_use_binary(const char *path);

/*
 * Forks a confined child (above) that runs body(VMM_PROCESS_CONTROL_FD, opaque) and exits with
 * its return value: the VM launches below give a body that executes voidbox-vmm, tests give
 * stand-ins (a forked body's memory is a copy of the caller's). The parent gets the child's
 * pid and its end of the control socket (close-on-exec). 0, or -errno with a sentence in err.
 */
int vmm_process_spawn(int (*body)(int control_fd, void *opaque), void *opaque, pid_t *pid,
		      int *control_fd, char *err, size_t errlen);

/*
 * The voidbox-vmm program into path (an executable file), found as the header says: 0, or
 * -ENOENT with a sentence in err that says where it was looked for and what to do.
 */
int vmm_process_binary(char *path, size_t len, char *err, size_t errlen);

/* A VM running in a child process, seen from the parent. */
struct vmm_process;

/*
 * Spawns a VMM process running voidbox-vmm, which moves itself into cgroup_dir (NULL: stays
 * where it is; sandbox/vmm_cgroup.h), then creates and starts the VM of cfg; returns once it
 * has (0 and *out) or has failed (-errno and its sentence in err). With snapshots the child's main
 * thread may write snapshot files when asked (VMM_THREAD_VMM_MAIN_SNAPSHOTS) beneath the
 * directories of snapshot_areas (NULL-terminated; each in its jail, read-write, at the same
 * path: vmm_process_snapshot's paths must be canonical and beneath one); without, it writes
 * no file at all and vmm_process_snapshot is refused.
 */
int vmm_process_start_vm(const struct vm_config *cfg, const char *cgroup_dir, bool snapshots,
			 const char *const *snapshot_areas, struct vmm_process **out, char *err,
			 size_t errlen);
/*
 * Spawns a VMM process (voidbox-vmm) that restores the VM from snapshot_dir (opts as
 * vm_create_from_snapshot, working-set prefetch included; it may write the working-set list
 * beside the snapshot, and snapshots beneath snapshot_areas as vmm_process_start_vm's) and
 * returns at once; vmm_process_await_started then waits for it and hands over the secret the
 * restored guest answers to until the parent rekeys it. The child's death signal follows the thread
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
/* Whether the child's restore prefetched its own snapshot's list (vm_working_set_known). */
bool vmm_process_working_set_known(const struct vmm_process *proc);
/* The pages its restore mapped into KVM ahead of the guest (vm_working_set_prefaulted_pages). */
uint64_t vmm_process_working_set_prefaulted(const struct vmm_process *proc);
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
