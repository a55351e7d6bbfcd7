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

#include <stddef.h>
#include <sys/types.h>

#include "vmm/vm.h"

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
 * *out) or has failed (-errno and its sentence in err).
 */
int vmm_process_start_vm(const struct vm_config *cfg, const char *cgroup_dir,
			 struct vmm_process **out, char *err, size_t errlen);
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
