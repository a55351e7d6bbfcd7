/*
 * A small tmpfs on a directory, in a mount namespace of the calling process's own, for tests
 * of what a full file system does to a writer. Shared by the tests that fill one
 * (tests/portable/test_snapshot_archive.c, tests/store/test_store_fs.c). Root gets the mount
 * namespace directly; anyone else through a user namespace that maps their uid and gid to
 * themselves, so the files they make are owned as outside (an unmapped user can create
 * nothing). Call it in a child the test forks: the namespaces stay with that process.
 */
#ifndef VOIDBOX_TESTS_SMALL_TMPFS_H
#define VOIDBOX_TESTS_SMALL_TMPFS_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define SMALL_TMPFS_ID_MAP_MAX 64 /* one line of uid_map or gid_map: "ID ID 1" */

/* Writes text to the /proc/self file name: 0 or -errno. */
static inline int small_tmpfs_write_proc_self(const char *name, const char *text)
{
	char path[PATH_MAX];
	size_t len = strlen(text);
	int fd, rc = 0;

	snprintf(path, sizeof(path), "/proc/self/%s", name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		rc = -errno;
	close(fd);
	return rc;
}

/* A user namespace and a mount namespace of the caller's own: 0 or -errno. */
static inline int small_tmpfs_enter_user_namespace(void)
{
	char uid_map[SMALL_TMPFS_ID_MAP_MAX], gid_map[SMALL_TMPFS_ID_MAP_MAX];
	uid_t uid = getuid();
	gid_t gid = getgid();
	int rc;

	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		return -errno;
	snprintf(uid_map, sizeof(uid_map), "%u %u 1\n", (unsigned int)uid, (unsigned int)uid);
	snprintf(gid_map, sizeof(gid_map), "%u %u 1\n", (unsigned int)gid, (unsigned int)gid);
	rc = small_tmpfs_write_proc_self("setgroups", "deny");
	if (rc == 0)
		rc = small_tmpfs_write_proc_self("uid_map", uid_map);
	if (rc == 0)
		rc = small_tmpfs_write_proc_self("gid_map", gid_map);
	return rc;
}

/*
 * Mounts a tmpfs with the given options ("size=4k", "nr_inodes=4") on dir, in a mount
 * namespace of this process's own: 0, or -errno with what failed in why.
 */
static inline int small_tmpfs_mount(const char *dir, const char *options, char *why,
				    size_t why_len)
{
	int rc;

	if (unshare(CLONE_NEWNS) < 0 && (rc = small_tmpfs_enter_user_namespace()) < 0) {
		snprintf(why, why_len, "no mount namespace (%s)", strerror(-rc));
		return rc;
	}
	if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, options) < 0) {
		rc = -errno;
		snprintf(why, why_len, "cannot mount a small tmpfs (%s)", strerror(-rc));
		return rc;
	}
	return 0;
}

#endif
