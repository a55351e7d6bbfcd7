/*
 * Root filesystem trees as ext4 images (see oci_rootfs.h). The image is sized from the tree:
 * every file's data and every directory in whole 4 KiB blocks, a quarter more for ext4's
 * own metadata and bitmaps, plus a fixed floor; inodes are counted the same way. mkfs.ext4 is
 * run directly (no shell), found in /usr/sbin or /sbin, where Debian keeps it and where a
 * user's PATH often does not reach; its stderr is kept for the error sentence.
 */
#include "store/oci_rootfs.h"
#include "store/store_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OCI_ROOTFS_BLOCK 4096ull
#define OCI_ROOTFS_BLOCK_ARG "4096" /* mkfs.ext4 -b, the same block size */
#define OCI_ROOTFS_NUMBER_MAX 32
#define OCI_ROOTFS_FLOOR_BYTES (16ull << 20)
/* Symlink targets up to this long live in the inode itself. */
#define OCI_ROOTFS_INLINE_SYMLINK 60
#define OCI_ROOTFS_SPARE_INODES 128ull
#define OCI_ROOTFS_FD_LIMIT 32
#define OCI_ROOTFS_STDERR_MAX 512
#define OCI_ROOTFS_ARG_MAX 32
#define OCI_ROOTFS_LABEL "voidbox-oci"
/*
 * No journal (the image is only ever mounted read-only) and no metadata checksums (the blobs
 * it is made from were checked against their digests; checksums would only cost the guest
 * CPU on every metadata read).
 */
#define OCI_ROOTFS_FEATURES_OFF "^has_journal,^metadata_csum"
#define OCI_ROOTFS_FILE_MODE 0644

extern char **environ;

static const char *const oci_rootfs_mkfs_paths[] = { "/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4" };

/* nftw has no context argument; measuring runs one walk at a time per process. */
static __thread struct oci_rootfs_size *oci_rootfs_walk_size;

static uint64_t oci_rootfs_blocks(uint64_t bytes)
{
	return (bytes + OCI_ROOTFS_BLOCK - 1) / OCI_ROOTFS_BLOCK * OCI_ROOTFS_BLOCK;
}

static int oci_rootfs_count(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type == FTW_NS || type == FTW_DNR)
		return -1;
	oci_rootfs_walk_size->inodes++;
	if (S_ISREG(st->st_mode))
		oci_rootfs_walk_size->data_bytes += oci_rootfs_blocks((uint64_t)st->st_size);
	else if (S_ISDIR(st->st_mode) ||
		 (S_ISLNK(st->st_mode) && st->st_size > OCI_ROOTFS_INLINE_SYMLINK))
		oci_rootfs_walk_size->data_bytes += OCI_ROOTFS_BLOCK;
	return 0;
}

int oci_rootfs_measure(const char *tree, struct oci_rootfs_size *size)
{
	int rc;

	memset(size, 0, sizeof(*size));
	oci_rootfs_walk_size = size;
	rc = nftw(tree, oci_rootfs_count, OCI_ROOTFS_FD_LIMIT, FTW_PHYS);
	oci_rootfs_walk_size = NULL;
	if (rc != 0)
		return errno ? -errno : -EIO;
	return 0;
}

static const char *oci_rootfs_mkfs(void)
{
	for (size_t i = 0; i < sizeof(oci_rootfs_mkfs_paths) / sizeof(oci_rootfs_mkfs_paths[0]);
	     i++)
		if (access(oci_rootfs_mkfs_paths[i], X_OK) == 0)
			return oci_rootfs_mkfs_paths[i];
	return NULL;
}

/* Runs argv with stderr captured into out; returns the exit status, or -errno. */
static int oci_rootfs_run(const char *const argv[], char *out, size_t out_size)
{
	posix_spawn_file_actions_t actions;
	posix_spawnattr_t attributes;
	sigset_t no_signals;
	size_t used = 0;
	int pipe_fds[2], status = 0, rc;
	pid_t pid;
	ssize_t got;

	if (pipe2(pipe_fds, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
	posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	/* `voidbox run` blocks SIGINT and SIGTERM to read them itself; the tool takes them */
	sigemptyset(&no_signals);
	posix_spawnattr_init(&attributes);
	posix_spawnattr_setsigmask(&attributes, &no_signals);
	posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
	rc = posix_spawn(&pid, argv[0], &actions, &attributes, (char *const *)argv, environ);
	posix_spawnattr_destroy(&attributes);
	posix_spawn_file_actions_destroy(&actions);
	close(pipe_fds[1]);
	if (rc != 0) {
		close(pipe_fds[0]);
		return -rc;
	}
	while ((got = read(pipe_fds[0], out + used, out_size - 1 - used)) > 0 ||
	       (got < 0 && errno == EINTR))
		if (got > 0)
			used += (size_t)got;
	out[used] = '\0';
	while (used > 0 && (out[used - 1] == '\n' || out[used - 1] == ' '))
		out[--used] = '\0';
	close(pipe_fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -ECHILD;
}

int oci_rootfs_build_ext4(const char *tree, const char *image_path, char *err, size_t errlen)
{
	char tmp[PATH_MAX], inodes[OCI_ROOTFS_NUMBER_MAX], mkfs_err[OCI_ROOTFS_STDERR_MAX];
	struct oci_rootfs_size size;
	const char *mkfs = oci_rootfs_mkfs();
	uint64_t image_bytes;
	int fd, rc;

	if (!mkfs) {
		snprintf(err, errlen, "mkfs.ext4 is not installed: apt-get install e2fsprogs");
		return -ENOENT;
	}
	rc = oci_rootfs_measure(tree, &size);
	if (rc < 0) {
		snprintf(err, errlen, "cannot read the root filesystem tree %s: %s", tree,
			 strerror(-rc));
		return rc;
	}
	image_bytes = oci_rootfs_blocks(size.data_bytes + size.data_bytes / 4 +
					OCI_ROOTFS_FLOOR_BYTES);
	snprintf(inodes, sizeof(inodes), "%llu",
		 (unsigned long long)(size.inodes + size.inodes / 4 + OCI_ROOTFS_SPARE_INODES));
	if (snprintf(tmp, sizeof(tmp), "%s%s%d", image_path, OCI_ROOTFS_TMP_SUFFIX, (int)getpid()) >=
	    (int)sizeof(tmp)) {
		snprintf(err, errlen, "the image path %s is too long", image_path);
		return -ENAMETOOLONG;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, OCI_ROOTFS_FILE_MODE);
	if (fd < 0 || ftruncate(fd, (off_t)image_bytes) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(-rc));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		return rc;
	}
	close(fd);
	const char *const argv[OCI_ROOTFS_ARG_MAX] = {
		mkfs, "-q", "-F", "-t", "ext4", "-O", OCI_ROOTFS_FEATURES_OFF, "-b", OCI_ROOTFS_BLOCK_ARG,
		"-N", inodes, "-L", OCI_ROOTFS_LABEL, "-E", "root_owner=0:0", "-d", tree, tmp,
		NULL,
	};

	rc = oci_rootfs_run(argv, mkfs_err, sizeof(mkfs_err));
	if (rc != 0) {
		char image_dir[PATH_MAX];
		char *slash;

		snprintf(err, errlen, "mkfs.ext4 could not build an image of %s: %s", tree,
			 rc < 0 ? strerror(-rc) : mkfs_err[0] ? mkfs_err : "it failed");
		unlink(tmp);
		snprintf(image_dir, sizeof(image_dir), "%s", image_path);
		slash = strrchr(image_dir, '/');
		if (slash && slash != image_dir) {
			*slash = '\0';
			store_explain_low_space(image_dir, err, errlen);
		}
		return rc < 0 ? rc : -EIO;
	}
	if (rename(tmp, image_path) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot publish %s: %s", image_path, strerror(-rc));
		unlink(tmp);
		return rc;
	}
	return 0;
}
