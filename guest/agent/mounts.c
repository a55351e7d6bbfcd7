/*
 * Each share is tried as virtiofs first (a single mount call that fails fast when the tag is
 * not a virtiofs device), then as 9p. Read-write 9p shares try access=any, access=1000 and the
 * server's default in turn, because which one lets uid 1000 write depends on the host side's
 * security model. A rw share is then probed by a child running as uid 1000; if it cannot
 * create, rename and remove a directory, the share root is opened up (0777) and probed again.
 *
 * A virtiofs share's read-ahead is raised from the kernel's 128 KiB to MOUNTS_READ_AHEAD_KB:
 * each FUSE READ is one round trip through the host, and the server answers reads of up to
 * 1 MiB (its max_pages), so a sequential read then costs an eighth of the round trips.
 *
 * A rw virtiofs share then has one file created, closed, opened and removed in it: voidbox's
 * server answers OPEN with ENOSYS, and only at that first OPEN does the guest kernel learn to
 * stop sending OPEN and RELEASE; without it every file the sandbox creates before it first
 * opens an existing one would still cost a synchronous RELEASE at its close.
 */
#include "mounts.h"

#include "agent_log.h"
#include "sandbox_user.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#define MOUNTS_KEY_PREFIX "voidbox.mount"
#define MOUNTS_9P_BASE_OPTIONS "trans=virtio,version=9p2000.L,msize=512000"
#define MOUNTS_DIR_MODE 0755
#define MOUNTS_OPEN_MODE 0777
#define MOUNTS_PROBE_FAILED 1
#define MOUNTS_MODE_RO ":ro"
#define MOUNTS_MODE_RW ":rw"
#define MOUNTS_MODE_SUFFIX_LEN 3
#define MOUNTS_DECIMAL_BASE 10
/* One of the server's largest reads (1 MiB) per read-ahead window. */
#define MOUNTS_READ_AHEAD_KB "1024"
#define MOUNTS_BDI_FORMAT "/sys/class/bdi/%u:%u/read_ahead_kb"
#define MOUNTS_OPEN_PROBE_NAME ".voidbox-open-probe"
#define MOUNTS_OPEN_PROBE_MODE 0600

static const char *const mounts_rw_access_options[] = { ",access=any", ",access=1000", "" };

/* Parses "<tag>:<path>[:ro|rw]" (the part after '='); returns false when malformed. */
static bool mounts_parse_value(const char *value, size_t len, struct mount_spec *spec)
{
	const char *colon = memchr(value, ':', len);
	const char *path, *last;
	size_t tag_len, path_len;

	if (!colon || colon == value)
		return false;
	tag_len = (size_t)(colon - value);
	path = colon + 1;
	path_len = len - tag_len - 1;
	spec->read_only = true;
	last = path_len > MOUNTS_MODE_SUFFIX_LEN ? path + path_len - MOUNTS_MODE_SUFFIX_LEN : NULL;
	if (last && (strncmp(last, MOUNTS_MODE_RO, MOUNTS_MODE_SUFFIX_LEN) == 0 ||
		     strncmp(last, MOUNTS_MODE_RW, MOUNTS_MODE_SUFFIX_LEN) == 0)) {
		spec->read_only = strncmp(last, MOUNTS_MODE_RO, MOUNTS_MODE_SUFFIX_LEN) == 0;
		path_len -= MOUNTS_MODE_SUFFIX_LEN;
	}
	if (tag_len >= sizeof(spec->tag) || path_len == 0 || path_len >= sizeof(spec->guest_path) ||
	    path[0] != '/' || memchr(path, ':', path_len))
		return false;
	memcpy(spec->tag, value, tag_len);
	spec->tag[tag_len] = '\0';
	memcpy(spec->guest_path, path, path_len);
	spec->guest_path[path_len] = '\0';
	return true;
}

size_t mounts_parse(const char *cmdline, struct mount_spec *specs, size_t max)
{
	size_t prefix_len = strlen(MOUNTS_KEY_PREFIX), found = 0;
	const char *p = cmdline ? cmdline : "";

	while (*p && found < max) {
		const char *start, *end, *digits;
		unsigned long index;
		char *after;

		while (*p && isspace((unsigned char)*p))
			p++;
		start = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		end = p;
		if ((size_t)(end - start) <= prefix_len ||
		    strncmp(start, MOUNTS_KEY_PREFIX, prefix_len) != 0)
			continue;
		digits = start + prefix_len;
		if (!isdigit((unsigned char)*digits))
			continue;
		index = strtoul(digits, &after, MOUNTS_DECIMAL_BASE);
		if (after >= end || *after != '=')
			continue;
		memset(&specs[found], 0, sizeof(specs[found]));
		specs[found].index = (unsigned int)index;
		if (mounts_parse_value(after + 1, (size_t)(end - after - 1), &specs[found]))
			found++;
	}
	return found;
}

static void mounts_mkdir_p(const char *path)
{
	char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(buf, MOUNTS_DIR_MODE);
		*p = '/';
	}
	mkdir(buf, MOUNTS_DIR_MODE);
}

/* Forks a uid-1000 child that creates, renames and removes a directory in the share. */
static bool mounts_probe_writable(const char *path)
{
	static const gid_t groups[] = { AGENT_SANDBOX_GID };
	char probe[PATH_MAX], renamed[PATH_MAX];
	int status;
	pid_t pid;

	snprintf(probe, sizeof(probe), "%s/.voidbox-write-probe", path);
	snprintf(renamed, sizeof(renamed), "%s/.voidbox-write-probe-renamed", path);
	pid = fork();
	if (pid == 0) {
		if (setgroups(1, groups) < 0 || setgid(AGENT_SANDBOX_GID) < 0 ||
		    setuid(AGENT_SANDBOX_UID) < 0 || mkdir(probe, MOUNTS_DIR_MODE) < 0)
			_exit(MOUNTS_PROBE_FAILED);
		if (rename(probe, renamed) < 0 || rmdir(renamed) < 0) {
			rmdir(probe);
			_exit(MOUNTS_PROBE_FAILED);
		}
		_exit(0);
	}
	if (pid < 0)
		return false;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void mounts_ensure_writable(const struct mount_spec *spec)
{
	if (chown(spec->guest_path, AGENT_SANDBOX_UID, AGENT_SANDBOX_GID) < 0)
		agent_debug("mount %s: chown to 1000 failed: %s", spec->guest_path,
			    strerror(errno));
	if (mounts_probe_writable(spec->guest_path))
		return;
	if (chmod(spec->guest_path, MOUNTS_OPEN_MODE) == 0 &&
	    mounts_probe_writable(spec->guest_path)) {
		agent_info("mount %s: made writable for the sandbox user (mode 0777)",
			   spec->guest_path);
		return;
	}
	agent_error("mount %s: the sandbox user cannot write to this rw share; check the host "
		    "directory's permissions", spec->guest_path);
}

/* Shares are the sandbox's to write or read: never a source of setuid files or devices. */
static unsigned long mounts_flags(const struct mount_spec *spec)
{
	return MS_NOSUID | MS_NODEV | (spec->read_only ? MS_RDONLY : 0);
}

static int mounts_try_9p(const struct mount_spec *spec)
{
	char options[sizeof(MOUNTS_9P_BASE_OPTIONS) + 32];
	size_t attempts = spec->read_only ? 1 : sizeof(mounts_rw_access_options) /
							 sizeof(mounts_rw_access_options[0]);
	int err = -EINVAL;

	for (size_t i = 0; i < attempts; i++) {
		snprintf(options, sizeof(options), "%s%s", MOUNTS_9P_BASE_OPTIONS,
			 spec->read_only ? "" : mounts_rw_access_options[i]);
		if (mount(spec->tag, spec->guest_path, "9p", mounts_flags(spec), options) == 0)
			return 0;
		err = -errno;
	}
	return err;
}

int mounts_read_ahead_path(dev_t dev, char *out, size_t len)
{
	int n = snprintf(out, len, MOUNTS_BDI_FORMAT, major(dev), minor(dev));

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* A slower mount is still a mount: a failure here is only logged. */
static void mounts_raise_read_ahead(const struct mount_spec *spec)
{
	char path[PATH_MAX];
	struct stat st;
	int fd = -1;

	if (stat(spec->guest_path, &st) == 0 &&
	    mounts_read_ahead_path(st.st_dev, path, sizeof(path)) == 0)
		fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, MOUNTS_READ_AHEAD_KB, strlen(MOUNTS_READ_AHEAD_KB)) < 0)
		agent_info("mount %d: read-ahead stays at the kernel's default: %s", spec->index,
			   strerror(errno));
	if (fd >= 0)
		close(fd);
}

int mounts_learn_no_open(const char *dir)
{
	char path[PATH_MAX];
	int fd, err = 0;

	if (snprintf(path, sizeof(path), "%s/" MOUNTS_OPEN_PROBE_NAME, dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, MOUNTS_OPEN_PROBE_MODE);
	if (fd < 0)
		return -errno;
	close(fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		err = -errno;
	else
		close(fd);
	if (unlink(path) < 0 && err == 0)
		err = -errno;
	return err;
}

static void mounts_setup_one(const struct mount_spec *spec)
{
	unsigned long flags = mounts_flags(spec);
	const char *kind = "virtiofs";
	int err = 0, virtiofs_err = 0;

	mounts_mkdir_p(spec->guest_path);
	if (mount(spec->tag, spec->guest_path, "virtiofs", flags, NULL) < 0) {
		virtiofs_err = errno;
		kind = "9p";
		err = mounts_try_9p(spec);
	}
	if (err) {
		agent_error("mount %d (%s on %s) failed: virtiofs: %s, 9p: %s; the share is missing "
			    "in the guest", spec->index, spec->tag, spec->guest_path,
			    strerror(virtiofs_err), strerror(-err));
		return;
	}
	agent_info("mounted %s on %s (%s, %s)", spec->tag, spec->guest_path, kind,
		   spec->read_only ? "ro" : "rw");
	if (!virtiofs_err)
		mounts_raise_read_ahead(spec);
	if (spec->read_only)
		return;
	mounts_ensure_writable(spec);
	if (!virtiofs_err) {
		err = mounts_learn_no_open(spec->guest_path);
		if (err)
			agent_debug("mount %d: the open probe failed (%s); the first files created "
				    "still send RELEASE", spec->index, strerror(-err));
	}
}

void mounts_setup(const struct mount_spec *specs, size_t count)
{
	for (size_t i = 0; i < count; i++)
		mounts_setup_one(&specs[i]);
}
