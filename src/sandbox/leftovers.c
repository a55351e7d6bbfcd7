/*
 * Owner locks on a sandbox's host directories, and the sweep that removes those whose owner
 * died (leftovers.h says why). The lock is flock(2) on a file inside the directory: the kernel
 * drops it when the last descriptor goes, however the process ended, and a descriptor is never
 * inherited across exec (close-on-exec), so only the owner and children it forked without
 * executing hold it. A sweep that finds the lock free holds it while it removes the directory,
 * so two sweeps never remove one directory at once, and it opens the lock without following a
 * symlink: a directory a VMM process could write into decides nothing about any other path.
 */
#include "sandbox/leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "store/store_fs.h"

#define LEFTOVERS_LOG "sandbox"
#define LEFTOVERS_LOCK_MODE 0600
/* what mkdtemp puts in place of XXXXXX */
#define LEFTOVERS_UNIQUE_LEN 6u
#define LEFTOVERS_CHECKED_INFIX "-checked-"

int leftovers_claim(const char *dir)
{
	char path[PATH_MAX];
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, LEFTOVERS_OWNER_LOCK) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, LEFTOVERS_LOCK_MODE);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int rc = -errno;

		close(fd);
		unlink(path);
		return rc;
	}
	return fd;
}

void leftovers_release(const char *dir, int lock_fd)
{
	char path[PATH_MAX];

	if (lock_fd < 0)
		return;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, LEFTOVERS_OWNER_LOCK) <
	    sizeof(path))
		unlink(path);
	close(lock_fd);
}

/* Whether name is prefix followed by exactly a mkdtemp suffix. */
static bool leftovers_is_claimable_name(const char *name, const char *prefix)
{
	size_t prefix_len = strlen(prefix);

	return strncmp(name, prefix, prefix_len) == 0 &&
	       strlen(name + prefix_len) == LEFTOVERS_UNIQUE_LEN &&
	       !strchr(name + prefix_len, '/');
}

/* Whether name is "<prefix>XXXXXX-checked-XXXXXX"; its owner's name (the first part) into owner. */
static bool leftovers_is_checked_name(const char *name, const char *prefix, char *owner,
				      size_t owner_len)
{
	size_t prefix_len = strlen(prefix), infix_len = strlen(LEFTOVERS_CHECKED_INFIX);
	size_t owner_name_len = prefix_len + LEFTOVERS_UNIQUE_LEN;

	if (strncmp(name, prefix, prefix_len) != 0 || strlen(name) <= owner_name_len ||
	    strncmp(name + owner_name_len, LEFTOVERS_CHECKED_INFIX, infix_len) != 0 ||
	    strlen(name + owner_name_len + infix_len) != LEFTOVERS_UNIQUE_LEN ||
	    owner_name_len >= owner_len)
		return false;
	memcpy(owner, name, owner_name_len);
	owner[owner_name_len] = '\0';
	return true;
}

/* A directory in base that this user owns (not a symlink to one). */
static bool leftovers_is_our_dir(int base_fd, const char *name)
{
	struct stat st;

	return fstatat(base_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == geteuid();
}

/* The owner lock of base/name taken, when nobody holds it: its descriptor, else -1. */
static int leftovers_take_abandoned(int base_fd, const char *name)
{
	char lock[PATH_MAX];
	int fd;

	if ((size_t)snprintf(lock, sizeof(lock), "%s/%s", name, LEFTOVERS_OWNER_LOCK) >=
	    sizeof(lock))
		return -1;
	fd = openat(base_fd, lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void leftovers_remove(const char *base, const char *name, const char *why)
{
	char path[PATH_MAX];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", base, name) >= sizeof(path))
		return;
	log_info(LEFTOVERS_LOG, "removing %s, %s", path, why);
	if (store_remove_tree(path) < 0)
		log_warn(LEFTOVERS_LOG, "cannot remove %s: %s", path, strerror(errno));
}

/* The checked copies beside the abandoned directory name, which go with it. */
static void leftovers_remove_checked_of(const char *base, const char *prefix, const char *name)
{
	char owner[NAME_MAX + 1];
	struct dirent *entry;
	DIR *dir = opendir(base);

	if (!dir)
		return;
	while ((entry = readdir(dir)))
		if (leftovers_is_checked_name(entry->d_name, prefix, owner, sizeof(owner)) &&
		    strcmp(owner, name) == 0 && leftovers_is_our_dir(dirfd(dir), entry->d_name))
			leftovers_remove(base, entry->d_name,
					 "a checked fork copy whose owner has ended");
	closedir(dir);
}

static void leftovers_remove_cgroup(const char *cgroup_root, const char *name)
{
	char path[PATH_MAX];

	if (!cgroup_root ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", cgroup_root, name) >= sizeof(path))
		return;
	if (rmdir(path) == 0)
		log_info(LEFTOVERS_LOG, "removed the cgroup %s, whose sandbox ended without "
			 "removing it", path);
}

unsigned int leftovers_sweep(const char *base, const char *prefix, const char *cgroup_root)
{
	char owner[NAME_MAX + 1];
	struct dirent *entry;
	unsigned int removed = 0;
	DIR *dir = opendir(base);

	if (!dir)
		return 0;
	while (removed < LEFTOVERS_SWEEP_MAX && (entry = readdir(dir))) {
		const char *name = entry->d_name;
		int lock_fd;

		if (leftovers_is_checked_name(name, prefix, owner, sizeof(owner))) {
			if (leftovers_is_our_dir(dirfd(dir), name) &&
			    faccessat(dirfd(dir), owner, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
			    errno == ENOENT) {
				leftovers_remove(base, name,
						 "a checked fork copy whose fork area is gone");
				removed++;
			}
			continue;
		}
		if (!leftovers_is_claimable_name(name, prefix) ||
		    !leftovers_is_our_dir(dirfd(dir), name))
			continue;
		lock_fd = leftovers_take_abandoned(dirfd(dir), name);
		if (lock_fd < 0)
			continue;
		leftovers_remove(base, name, "whose sandbox's process ended without removing it");
		leftovers_remove_checked_of(base, prefix, name);
		leftovers_remove_cgroup(cgroup_root, name);
		close(lock_fd);
		removed++;
	}
	closedir(dir);
	return removed;
}
