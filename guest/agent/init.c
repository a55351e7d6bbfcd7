/*
 * The steps are separate functions called in order by main so each can be reasoned about (and
 * skipped outside PID 1) on its own. Mount failures with EBUSY are expected when the kernel or
 * an earlier stage already mounted the filesystem and are not errors.
 */
#include "init.h"

#include "agent_log.h"
#include "sandbox_user.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* An empty root-only file bound over /proc/cmdline once PID 1 has read it. */
#define INIT_KERNEL_CMDLINE "/proc/cmdline"
#define INIT_HIDDEN_CMDLINE "/run/voidbox-cmdline-hidden"
#define INIT_HIDDEN_CMDLINE_MODE 0400
#define INIT_DIR_MODE 0755
#define INIT_TMP_MODE 01777
#define INIT_PTMX_PATH "/dev/ptmx"
#define INIT_PTMX_TARGET "pts/ptmx"
#define INIT_CLAUDE_LINK AGENT_SANDBOX_HOME "/.local/bin/claude"
#define INIT_CLAUDE_TARGET "/usr/local/bin/claude-code"
/*
 * The agent's own configuration (host overrides such as /etc/voidbox/hosts): readable by the
 * sandbox, writable only by root, whatever the image shipped.
 */
#define INIT_AGENT_CONFIG_DIR "/etc/voidbox"
#define INIT_ROOT_UID 0
#define INIT_ROOT_GID 0

struct init_mount {
	const char *source;
	const char *target;
	const char *type;
	unsigned long flags;
	const char *options;
};

static const struct init_mount init_mounts[] = {
	{ "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL },
	{ "sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL },
	{ "devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755" },
	{ "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5" },
	{ "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777" },
};

/*
 * Where the sandbox user can write outside /tmp (mounted nosuid above): each is bind-mounted
 * onto itself nosuid,nodev, so a setuid file or a device node it plants there is inert.
 */
static const char *const init_sandbox_writable_trees[] = {
	"/workspace",
	"/home",
};

static const char *const init_sandbox_owned_dirs[] = {
	"/workspace",
	"/home/sandbox",
	"/home/sandbox/.local",
	"/home/sandbox/.local/bin",
};


/* Best-effort kernel knobs: path and the value written. */
static const char *const init_sysctls[][2] = {
	/* The default devkmsg rate limit would drop most of the agent's boot log (the kernel
	 * accepts this value only with its newline). */
	{ "/proc/sys/kernel/printk_devkmsg", "on\n" },
	{ "/proc/sys/fs/protected_hardlinks", "1" },
	{ "/proc/sys/fs/protected_symlinks", "1" },
	{ "/proc/sys/kernel/yama/ptrace_scope", "0" },
	/* the kernel log repeats the command line, secret included: root only */
	{ "/proc/sys/kernel/dmesg_restrict", "1" },
};

void init_environment(void)
{
	setenv("PATH", AGENT_DEFAULT_PATH, 1);
	setenv("HOME", "/root", 1);
	setenv("TERM", "linux", 1);
	umask(022);
}

static void init_mkdir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		agent_warn("mkdir %s: %s", path, strerror(errno));
}

static void init_mkdir_parents(const char *path)
{
	char buf[256];

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		init_mkdir(buf, INIT_DIR_MODE);
		*p = '/';
	}
	init_mkdir(buf, INIT_DIR_MODE);
}

static void init_open_std_fds(void)
{
	int fd;

	while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= STDERR_FILENO)
		;
	if (fd > STDERR_FILENO)
		close(fd);
}

void init_mount_filesystems(void)
{
	for (size_t i = 0; i < sizeof(init_mounts) / sizeof(init_mounts[0]); i++) {
		const struct init_mount *m = &init_mounts[i];

		init_mkdir(m->target, INIT_DIR_MODE);
		if (mount(m->source, m->target, m->type, m->flags, m->options) < 0 &&
		    errno != EBUSY)
			agent_error("mount %s on %s: %s", m->type, m->target, strerror(errno));
		if (strcmp(m->target, "/dev") == 0) {
			agent_log_init(AGENT_LOG_SINK_KMSG);
			init_open_std_fds();
		}
	}
	chmod("/tmp", INIT_TMP_MODE);
	if (unlink(INIT_PTMX_PATH) < 0 && errno != ENOENT)
		agent_warn("remove %s: %s", INIT_PTMX_PATH, strerror(errno));
	if (symlink(INIT_PTMX_TARGET, INIT_PTMX_PATH) < 0)
		agent_error("symlink %s -> %s: %s", INIT_PTMX_PATH, INIT_PTMX_TARGET,
			    strerror(errno));
}

void init_sandbox_dirs(void)
{
	for (size_t i = 0; i < sizeof(init_sandbox_owned_dirs) / sizeof(init_sandbox_owned_dirs[0]);
	     i++) {
		const char *dir = init_sandbox_owned_dirs[i];

		init_mkdir_parents(dir);
		if (chown(dir, AGENT_SANDBOX_UID, AGENT_SANDBOX_GID) < 0)
			agent_warn("chown %s: %s", dir, strerror(errno));
	}
	init_mkdir_parents(INIT_AGENT_CONFIG_DIR);
	if (chown(INIT_AGENT_CONFIG_DIR, INIT_ROOT_UID, INIT_ROOT_GID) < 0 ||
	    chmod(INIT_AGENT_CONFIG_DIR, INIT_DIR_MODE) < 0)
		agent_warn("cannot make %s root-owned 0755: %s", INIT_AGENT_CONFIG_DIR,
			   strerror(errno));
	if (symlink(INIT_CLAUDE_TARGET, INIT_CLAUDE_LINK) < 0 && errno != EEXIST)
		agent_warn("symlink %s: %s", INIT_CLAUDE_LINK, strerror(errno));
	for (size_t i = 0;
	     i < sizeof(init_sandbox_writable_trees) / sizeof(init_sandbox_writable_trees[0]); i++) {
		const char *tree = init_sandbox_writable_trees[i];

		if (mount(tree, tree, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, tree, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
			agent_error("cannot make %s nosuid,nodev: %s; setuid files planted there "
				    "stay harmless only through no_new_privs", tree,
				    strerror(errno));
	}
}

void init_kernel_settings(void)
{
	for (size_t i = 0; i < sizeof(init_sysctls) / sizeof(init_sysctls[0]); i++) {
		int fd = open(init_sysctls[i][0], O_WRONLY | O_CLOEXEC);
		size_t len = strlen(init_sysctls[i][1]);

		if (fd < 0)
			continue;
		if (write(fd, init_sysctls[i][1], len) != (ssize_t)len)
			agent_debug("cannot set %s", init_sysctls[i][0]);
		close(fd);
	}
}

void init_hide_kernel_cmdline(void)
{
	int fd = open(INIT_HIDDEN_CMDLINE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		      INIT_HIDDEN_CMDLINE_MODE);

	if (fd < 0 || fchmod(fd, INIT_HIDDEN_CMDLINE_MODE) < 0 ||
	    mount(INIT_HIDDEN_CMDLINE, INIT_KERNEL_CMDLINE, NULL, MS_BIND, NULL) < 0)
		agent_error("cannot hide %s from the sandbox: %s; its programs can read the session "
			    "secret", INIT_KERNEL_CMDLINE, strerror(errno));
	if (fd >= 0)
		close(fd);
}

void init_set_clock(const struct agent_cmdline *cmdline)
{
	struct timespec ts = { 0 };

	if (!cmdline->has_clock) {
		agent_warn("no voidbox.clock on the command line: the clock may read 1970 and TLS "
			   "will fail");
		return;
	}
	ts.tv_sec = (time_t)cmdline->clock_epoch_secs;
	if (clock_settime(CLOCK_REALTIME, &ts) < 0)
		agent_error("clock_settime(%lld): %s", (long long)ts.tv_sec, strerror(errno));
	else
		agent_info("clock set to %lld", (long long)ts.tv_sec);
}
