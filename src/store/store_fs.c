/*
 * Directory removal, no-replace renames, file digests, the test of whether a temporary's
 * writer is gone, and the error and path helpers of the stores (see store_fs.h). A tree to
 * remove may hold directories its owner cannot write or even read (an unpacked image layer
 * keeps its modes: a 0555 /usr/bin, a 0000 directory), so removal first gives the owner rwx
 * on every directory, pass after pass: a directory that could not be read is opened up by one
 * pass and walked by the next.
 */
#include "store/store_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define STORE_REMOVE_FD_LIMIT 32
/* Unreadable directories nest at most this deep in a path nftw can walk ("a/" per level). */
#define STORE_UNLOCK_PASSES_MAX (PATH_MAX / 2)
#define STORE_DIGEST_CHUNK 65536
#define STORE_TOOL_SINK 65536
#define STORE_TOOL_EXEC_FAILED 127
#define STORE_BYTES_PER_MIB (1024ull * 1024)

void store_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int store_join(char *out, size_t out_len, const char *dir, const char *name)
{
	int n = snprintf(out, out_len, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

/* Directories one unlocking pass opened up that it could not walk into; one walk per thread. */
static __thread unsigned long store_unlocked_unreadable;

static int store_unlock_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if ((type != FTW_D && type != FTW_DNR) || (st->st_mode & S_IRWXU) == S_IRWXU)
		return 0;
	if (chmod(path, (st->st_mode & ALLPERMS) | S_IRWXU) == 0 && type == FTW_DNR)
		store_unlocked_unreadable++;
	return 0;
}

static int store_remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int store_remove_tree(const char *path)
{
	unsigned passes = 0;

	do {
		store_unlocked_unreadable = 0;
		nftw(path, store_unlock_one, STORE_REMOVE_FD_LIMIT, FTW_PHYS);
	} while (store_unlocked_unreadable > 0 && ++passes < STORE_UNLOCK_PASSES_MAX);
	if (nftw(path, store_remove_one, STORE_REMOVE_FD_LIMIT, FTW_DEPTH | FTW_PHYS) < 0 &&
	    errno != ENOENT)
		return -errno;
	return 0;
}

int store_rename_noreplace(const char *from, const char *to)
{
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	if (rename(from, to) == 0)
		return 0;
	return errno == ENOTEMPTY || errno == EEXIST ? -EEXIST : -errno;
}

bool store_tmp_writer_gone(const char *name, const char *prefix)
{
	size_t prefix_len = strlen(prefix);
	char *end;
	long pid;

	if (strncmp(name, prefix, prefix_len) != 0)
		return false;
	errno = 0;
	pid = strtol(name + prefix_len, &end, 10);
	if (end == name + prefix_len || (*end != '-' && *end != '\0') || pid <= 0 || errno)
		return true;
	if (pid == (long)getpid())
		return false;
	return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

void store_sweep_gone_writers(const char *dir, const char *prefix)
{
	char path[PATH_MAX];
	struct dirent *entry;
	DIR *handle = opendir(dir);

	if (!handle)
		return;
	while ((entry = readdir(handle)) != NULL)
		if (store_tmp_writer_gone(entry->d_name, prefix) &&
		    store_join(path, sizeof(path), dir, entry->d_name) == 0)
			store_remove_tree(path);
	closedir(handle);
}

int store_file_digest(const char *path, const char *algorithm, unsigned char *digest,
		      unsigned int *digest_len)
{
	const EVP_MD *md = EVP_get_digestbyname(algorithm);
	unsigned char chunk[STORE_DIGEST_CHUNK];
	EVP_MD_CTX *ctx = NULL;
	int fd = -1, rc = 0;

	if (!md)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, md, NULL) != 1) {
		rc = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof(chunk));

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			goto out;
		}
		if (got == 0)
			break;
		if (EVP_DigestUpdate(ctx, chunk, (size_t)got) != 1) {
			rc = -EIO;
			goto out;
		}
	}
	if (EVP_DigestFinal_ex(ctx, digest, digest_len) != 1)
		rc = -EIO;
out:
	EVP_MD_CTX_free(ctx);
	close(fd);
	return rc;
}

static void store_tool_child(const char *const argv[], const char *cwd, int capture_fd)
{
	int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	sigset_t no_signals;

	/* a caller may block SIGINT and SIGTERM to read them itself; the tool takes them */
	sigemptyset(&no_signals);
	sigprocmask(SIG_SETMASK, &no_signals, NULL);

	if (null_fd >= 0)
		dup2(null_fd, STDIN_FILENO);
	dup2(capture_fd >= 0 ? capture_fd : STDERR_FILENO, STDOUT_FILENO);
	if (cwd && chdir(cwd) < 0)
		_exit(STORE_TOOL_EXEC_FAILED);
	execvp(argv[0], (char *const *)argv);
	_exit(STORE_TOOL_EXEC_FAILED);
}

static void store_tool_capture(int fd, char *capture, size_t capture_len)
{
	size_t used = 0;

	for (;;) {
		char sink[STORE_TOOL_SINK];
		char *dest = used + 1 < capture_len ? capture + used : sink;
		size_t room = used + 1 < capture_len ? capture_len - used - 1 : sizeof(sink);
		ssize_t got = read(fd, dest, room);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		if (dest != sink)
			used += (size_t)got;
	}
	capture[used] = '\0';
}

int store_run_tool(const char *const argv[], const char *cwd, char *capture, size_t capture_len,
		   char *err, size_t errlen)
{
	int pipe_fds[2] = { -1, -1 }, status;
	pid_t pid;

	if (capture && (capture_len == 0 || pipe2(pipe_fds, O_CLOEXEC) < 0))
		return capture_len == 0 ? -EINVAL : -errno;
	pid = fork();
	if (pid < 0) {
		int saved = errno;

		if (capture) {
			close(pipe_fds[0]);
			close(pipe_fds[1]);
		}
		return -saved;
	}
	if (pid == 0)
		store_tool_child(argv, cwd, capture ? pipe_fds[1] : -1);
	if (capture) {
		close(pipe_fds[1]);
		store_tool_capture(pipe_fds[0], capture, capture_len);
		close(pipe_fds[0]);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	store_error(err, errlen, "`%s %s` failed (%s %d)", argv[0], argv[1] ? argv[1] : "",
		    WIFEXITED(status) ? "exit status" : "signal",
		    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	return -EIO;
}

bool store_explain_low_space(const char *dir, char *err, size_t errlen)
{
	struct statvfs fs;
	unsigned long long free_bytes, free_inodes;
	size_t used;

	if (!err || errlen == 0 || statvfs(dir, &fs) < 0)
		return false;
	/* root may use the blocks and inodes the file system reserves for it */
	free_bytes = (unsigned long long)(geteuid() == 0 ? fs.f_bfree : fs.f_bavail) * fs.f_frsize;
	free_inodes = geteuid() == 0 ? fs.f_ffree : fs.f_favail;
	/* a file system without inode accounting (f_files 0) never runs out of them */
	if (free_bytes >= STORE_LOW_SPACE_BYTES && (free_inodes > 0 || fs.f_files == 0))
		return false;
	used = strnlen(err, errlen - 1);
	if (free_bytes < STORE_LOW_SPACE_BYTES)
		snprintf(err + used, errlen - used,
			 ": the file system holding %s has only %llu MiB free: free space there, "
			 "or set VOIDBOX_HOME to a file system with room, and run it again", dir,
			 free_bytes / STORE_BYTES_PER_MIB);
	else
		snprintf(err + used, errlen - used,
			 ": the file system holding %s has no inode left: remove files there, or "
			 "set VOIDBOX_HOME to a file system with room, and run it again", dir);
	return true;
}
