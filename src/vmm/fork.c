/*
 * Fork: a running VM becomes the shared copy-on-write base of n children. The parent is
 * paused once, saved as a base snapshot into a private directory on tmpfs (/dev/shm) and
 * remapped MAP_PRIVATE over that memory file before it resumes; each child is restored from
 * the same directory, so parent and children all read the one tmpfs copy and each writes to
 * its own private pages. The directory is removed once the children exist: their mappings
 * keep the memory file alive until the last of them is gone.
 *
 * Cost: one pass over the parent's non-zero pages into tmpfs (the only copy), then a restore
 * per child (no memory copied). A parent that was forked before is already a private
 * mapping of an older base; a new fork writes a new base (a copy of its current memory), and
 * the old one is freed when the VMs that map it end. docs/snapshot-format.md has measurements.
 */
#include "vmm/snapshot.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/snapshot_file.h"

#define FORK_DIR_TEMPLATE "voidbox-fork-XXXXXX"
#define FORK_SHM_DIR "/dev/shm"
#define FORK_FALLBACK_DIR "/tmp"
#define FORK_MSEC_PER_SEC 1000L
#define FORK_NSEC_PER_MSEC 1000000L

static long fork_now_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec * FORK_MSEC_PER_SEC + now.tv_nsec / FORK_NSEC_PER_MSEC;
}

static int fork_make_dir(char *dir, size_t len)
{
	const char *base = access(FORK_SHM_DIR, W_OK) == 0 ? FORK_SHM_DIR : FORK_FALLBACK_DIR;

	snprintf(dir, len, "%s/%s", base, FORK_DIR_TEMPLATE);
	return mkdtemp(dir) ? 0 : -errno;
}

static void fork_remove_dir(const char *dir)
{
	static const char *const names[] = { VM_SNAPSHOT_STATE_FILE, VM_SNAPSHOT_MEMORY_FILE };
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (snapshot_path(path, dir, names[i]) == 0)
			unlink(path);
	}
	rmdir(dir);
}

static int fork_children(const char *dir, unsigned int n,
			 const struct vm_restore_options *const child_opts[], struct vm *children[],
			 char *err, size_t errlen)
{
	unsigned int made = 0;
	int rc = 0;

	for (; made < n && rc == 0; made++) {
		rc = vm_create_from_snapshot(dir, child_opts[made], &children[made], err, errlen);
		if (rc < 0)
			break;
		rc = vm_start(children[made]);
		if (rc < 0)
			snprintf(err, errlen, "child %u did not start: %s", made, strerror(-rc));
	}
	if (rc == 0)
		return 0;
	for (unsigned int i = 0; i <= made && i < n; i++) {
		vm_destroy(children[i]);
		children[i] = NULL;
	}
	return rc;
}

int vm_fork(struct vm *parent, unsigned int n, const struct vm_restore_options *const child_opts[],
	    struct vm *children[], char *err, size_t errlen)
{
	const struct vm_snapshot_options save = { .type = VM_SNAPSHOT_BASE,
						  .after = VM_SNAPSHOT_RESUME };
	char dir[PATH_MAX];
	long started = fork_now_ms(), saved;
	int rc;

	if (n == 0) {
		snprintf(err, errlen, "fork needs at least one child");
		return -EINVAL;
	}
	for (unsigned int i = 0; i < n; i++)
		children[i] = NULL;
	rc = fork_make_dir(dir, sizeof(dir));
	if (rc < 0) {
		snprintf(err, errlen, "cannot create a fork directory under %s: %s", FORK_SHM_DIR,
			 strerror(-rc));
		return rc;
	}
	rc = vm_snapshot_save(parent, dir, &save, err, errlen);
	saved = fork_now_ms();
	if (rc == 0)
		rc = fork_children(dir, n, child_opts, children, err, errlen);
	fork_remove_dir(dir);
	if (rc == 0)
		log_info("fork", "forked %u child VM(s) in %ld ms (parent paused and base written "
			 "in %ld ms)", n, fork_now_ms() - started, saved - started);
	return rc;
}
