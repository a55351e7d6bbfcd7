/*
 * The VMM process's own side (docs/security.md, "What runs where"): what the voidbox-vmm
 * executable runs once the sandbox's vmm_process_* has forked, confined and executed it.
 *
 * It starts from a fresh image with an empty environment, its control socket on
 * VMM_PROCESS_CONTROL_FD and its launch (sandbox/vmm_launch.h) in a sealed memfd on
 * VMM_PROCESS_LAUNCH_FD, which it reads, checks and closes before anything else. Then, as the
 * launch says: it joins its cgroup, plans and enters its jail while still one thread, builds
 * the VM (a cold boot or a restore) and detaches what only creation needed, wipes its copy of
 * the launch (the VM holds what it needs), starts the VM, takes the main thread's seccomp
 * filter, answers "started" and serves the parent's requests (sandbox/vmm_msg.h) until the VM
 * ends.
 */
#ifndef VOIDBOX_SANDBOX_VMM_SERVE_H
#define VOIDBOX_SANDBOX_VMM_SERVE_H

#include <stddef.h>

#include "sandbox/vmm_launch.h"

/* Exit statuses of a VMM process: its VM could not be set up; it was started by hand. */
#define VMM_SERVE_EXIT_SETUP 71
#define VMM_SERVE_EXIT_USAGE 64

/*
 * Reads the launch from fd (a regular file or memfd of at most VMM_LAUNCH_MAX_BYTES), closes
 * fd and decodes it: 0 and *out (release it), or -errno with a sentence in err.
 */
int vmm_serve_read_launch(int fd, struct vmm_launch_decoded *out, char *err, size_t errlen);

/* Everything above; returns the process's exit status (0 once the VM has ended). */
int vmm_serve_main(int control_fd, int launch_fd);

#endif
