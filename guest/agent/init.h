/*
 * PID 1 system setup: environment, pseudo filesystems, sandbox directories, the clock from the
 * command line, and kernel modules. Each step logs and carries on when it fails, because a
 * partly set-up VM that still answers the host is far easier to diagnose than a silent one.
 */
#ifndef VOIDBOX_AGENT_INIT_H
#define VOIDBOX_AGENT_INIT_H

#include "cmdline.h"

/* Sets PATH, HOME and TERM for PID 1 and everything it starts. */
void init_environment(void);
/* Mounts /proc /sys /dev /dev/pts /tmp and makes sure fds 0-2 are open. */
void init_mount_filesystems(void);
/*
 * Creates /workspace and /home/sandbox(/.local/bin) owned by 1000:1000 and mounted
 * nosuid,nodev, and /etc/voidbox owned by root, mode 0755.
 */
void init_sandbox_dirs(void);
/* Hardens link following (protected_hardlinks/symlinks); best effort. */
void init_kernel_settings(void);
/* Sets CLOCK_REALTIME from voidbox.clock when present. */
void init_set_clock(const struct agent_cmdline *cmdline);
/*
 * The kernel command line carries the session secret: once PID 1 has read it, an empty
 * root-only file is bound over /proc/cmdline, so sandboxed programs cannot read it.
 */
void init_hide_kernel_cmdline(void);

#endif
