/*
 * The path guard and the four file RPCs. Lexical normalisation decides which root a path
 * belongs to (exact, because no symlink is ever followed); the kernel then enforces it:
 * openat2 resolves the rest inside the root fd with symlinks refused, directories are created
 * one component at a time with mkdirat + re-resolution, and the leaf is opened O_NOFOLLOW.
 * Files are written without O_TRUNC until they are known to be single-link regular files, so a
 * hard link planted by the sandbox user cannot redirect a root-owned write.
 */
#include "files.h"

#include "sandbox_user.h"
#include "common/fd_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILES_DIR_MODE 0755
#define FILES_FILE_MODE 0644
#define FILES_READ_CHUNK (64 * 1024)
#define FILES_HOSTS_SOURCE "/etc/voidbox/hosts"
#define FILES_HOSTS_TARGET "/etc/hosts"
#define FILES_ROOTS_TEXT "[/workspace, /home, /etc/voidbox]"
#define FILES_RESOLVE_FLAGS (RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* Who owns what the host creates under a root (as a root agent; otherwise the agent). */
enum files_root_owner {
	FILES_OWNER_SANDBOX, /* the sandbox's own places: uid/gid 1000 */
	FILES_OWNER_ROOT,    /* agent configuration the sandbox may read but never change */
};

static const char *const files_root_paths[] = { "/workspace", "/home", "/etc/voidbox" };
static const enum files_root_owner files_root_owners[] = {
	FILES_OWNER_SANDBOX, FILES_OWNER_SANDBOX, FILES_OWNER_ROOT,
};

/*
 * Policy is never a file (docs/protocol.md §8): a write to where it used to live is refused
 * so a host that still provisions it that way fails loudly instead of running unconfined.
 */
static const char *const files_retired_policy_paths[] = {
	"/etc/voidbox/allowed_commands.json",
	"/etc/voidbox/resource_limits.json",
};

static const char *const files_op_verbs[] = {
	[FILES_OP_WRITE] = "write",
	[FILES_OP_READ] = "read",
	[FILES_OP_MKDIR] = "mkdir",
	[FILES_OP_STAT] = "stat",
};

static int files_fail(char **error, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int files_fail(char **error, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(error, fmt, ap) < 0)
		*error = NULL;
	va_end(ap);
	return err;
}

int files_normalize(const char *path, char *out, size_t out_size)
{
	size_t used = 0;
	const char *p = path;

	if (!path || path[0] != '/' || out_size < 2)
		return -EINVAL;
	while (*p) {
		const char *start, *end;
		size_t len;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		start = p;
		end = strchrnul(start, '/');
		len = (size_t)(end - start);
		p = end;
		if (len == 1 && start[0] == '.')
			continue;
		if (len == 2 && start[0] == '.' && start[1] == '.') {
			if (used > 0)
				used--;
			while (used > 0 && out[used] != '/')
				used--;
			out[used] = '\0';
			continue;
		}
		if (used + 1 + len + 1 > out_size)
			return -ENAMETOOLONG;
		out[used++] = '/';
		memcpy(out + used, start, len);
		used += len;
		out[used] = '\0';
	}
	if (used == 0) {
		out[0] = '/';
		out[1] = '\0';
		return 0;
	}
	out[used] = '\0';
	return 0;
}

const char *files_match_root(const char *normalized, const char **rest)
{
	const char *best = NULL;
	size_t best_len = 0;

	for (size_t i = 0; i < sizeof(files_root_paths) / sizeof(files_root_paths[0]); i++) {
		const char *root = files_root_paths[i];
		size_t len = strlen(root);

		if (strncmp(normalized, root, len) != 0)
			continue;
		if (normalized[len] != '\0' && normalized[len] != '/')
			continue;
		if (len > best_len) {
			best = root;
			best_len = len;
		}
	}
	if (best)
		*rest = normalized[best_len] ? normalized + best_len + 1 : ".";
	return best;
}

static enum files_root_owner files_root_owner_of(const char *root)
{
	for (size_t i = 0; i < sizeof(files_root_paths) / sizeof(files_root_paths[0]); i++)
		if (strcmp(files_root_paths[i], root) == 0)
			return files_root_owners[i];
	return FILES_OWNER_ROOT;
}

static bool files_is_retired_policy_path(const char *normalized)
{
	for (size_t i = 0;
	     i < sizeof(files_retired_policy_paths) / sizeof(files_retired_policy_paths[0]); i++)
		if (strcmp(files_retired_policy_paths[i], normalized) == 0)
			return true;
	return false;
}

static long files_openat2(int dirfd, const char *path, uint64_t flags, mode_t mode)
{
	struct open_how how = { .flags = flags, .mode = mode, .resolve = FILES_RESOLVE_FLAGS };

	return syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* Turns a resolution errno into the user-facing refusal or failure text. */
static int files_resolve_error(enum files_op op, const char *path, int err, char **error)
{
	const char *verb = files_op_verbs[op];

	if (err == ELOOP)
		return files_fail(error, -ELOOP,
				  "Refusing %s of '%s': the path passes through a symbolic link",
				  verb, path);
	if (err == EXDEV)
		return files_fail(error, -EXDEV, "Refusing %s outside allowed roots %s: %s", verb,
				  FILES_ROOTS_TEXT, path);
	if (err == ENOSYS)
		return files_fail(error, -ENOSYS,
				  "Cannot %s '%s': the guest kernel lacks openat2 (needs Linux 5.6+)",
				  verb, path);
	return files_fail(error, -err, "Cannot %s '%s': %s", verb, path, strerror(err));
}

struct files_target {
	int root_fd;
	bool give_to_sandbox; /* chown what is created to uid/gid 1000 */
	char normalized[PATH_MAX];
	const char *rest;  /* points into normalized */
};

static int files_open_root(const struct files_roots *roots, enum files_op op, const char *path,
			   struct files_target *target, char **error)
{
	char root_path[PATH_MAX];
	const char *root;
	int err;

	target->root_fd = -1;
	err = files_normalize(path, target->normalized, sizeof(target->normalized));
	if (err)
		return files_fail(error, err, "Refusing %s of '%s': the path must be absolute",
				  files_op_verbs[op], path ? path : "");
	root = files_match_root(target->normalized, &target->rest);
	if (!root)
		return files_fail(error, -EPERM, "Refusing %s outside allowed roots %s: %s",
				  files_op_verbs[op], FILES_ROOTS_TEXT, path);
	target->give_to_sandbox = roots->chown_to_sandbox &&
				  files_root_owner_of(root) == FILES_OWNER_SANDBOX;
	if (snprintf(root_path, sizeof(root_path), "%s%s", roots->prefix, root) >=
	    (int)sizeof(root_path))
		return files_fail(error, -ENAMETOOLONG, "Cannot %s '%s': root path too long",
				  files_op_verbs[op], path);
	target->root_fd = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (target->root_fd < 0)
		return files_fail(error, -errno, "Cannot %s '%s': root %s unavailable: %s",
				  files_op_verbs[op], path, root, strerror(errno));
	return 0;
}

static void files_target_close(struct files_target *target)
{
	if (target->root_fd >= 0)
		close(target->root_fd);
	target->root_fd = -1;
}

/* Opens (creating if needed) each directory of rel below dirfd; returns an O_PATH fd. */
static int files_walk_mkdir(bool give_to_sandbox, int dirfd, const char *rel,
			    enum files_op op, const char *path, char **error)
{
	char component[NAME_MAX + 1];
	const char *p = rel;
	int cur = dup(dirfd);

	if (cur < 0)
		return files_fail(error, -errno, "Cannot %s '%s': %s", files_op_verbs[op], path,
				  strerror(errno));
	while (*p) {
		const char *end = strchrnul(p, '/');
		size_t len = (size_t)(end - p);
		bool created = false;
		long next;

		if (len == 0 || (len == 1 && p[0] == '.')) {
			p = *end ? end + 1 : end;
			continue;
		}
		if (len > NAME_MAX) {
			close(cur);
			return files_fail(error, -ENAMETOOLONG, "Cannot %s '%s': %s",
					  files_op_verbs[op], path, strerror(ENAMETOOLONG));
		}
		memcpy(component, p, len);
		component[len] = '\0';
		if (mkdirat(cur, component, FILES_DIR_MODE) == 0)
			created = true;
		else if (errno != EEXIST) {
			int saved = errno;

			close(cur);
			return files_fail(error, -saved, "Cannot %s '%s': creating '%s': %s",
					  files_op_verbs[op], path, component, strerror(saved));
		}
		next = files_openat2(cur, component, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
		close(cur);
		if (next < 0)
			return files_resolve_error(op, path, errno, error);
		cur = (int)next;
		if (created && give_to_sandbox)
			fchownat(cur, "", AGENT_SANDBOX_UID, AGENT_SANDBOX_GID, AT_EMPTY_PATH);
		p = *end ? end + 1 : end;
	}
	return cur;
}

/* Splits "a/b/c" into parent "a/b" (or ".") and leaf "c" in caller storage. */
static int files_split_leaf(const char *rest, char *parent, size_t parent_size, const char **leaf)
{
	const char *slash = strrchr(rest, '/');

	if (!slash) {
		strcpy(parent, ".");
		*leaf = rest;
		return 0;
	}
	if ((size_t)(slash - rest) + 1 > parent_size)
		return -ENAMETOOLONG;
	memcpy(parent, rest, (size_t)(slash - rest));
	parent[slash - rest] = '\0';
	*leaf = slash + 1;
	return 0;
}

/* Writes into an already opened leaf after checking it is a plain single-link file. */
static int files_write_leaf(bool give_to_sandbox, int fd, const uint8_t *data,
			    size_t len, const char *path, char **error)
{
	struct stat st;
	int err;

	if (fstat(fd, &st) < 0)
		return files_fail(error, -errno, "Cannot write '%s': %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return files_fail(error, -EINVAL, "Refusing write of '%s': not a regular file",
				  path);
	if (st.st_nlink > 1)
		return files_fail(error, -EPERM,
				  "Refusing write of '%s': the file has several hard links", path);
	if (ftruncate(fd, 0) < 0 || fcntl(fd, F_SETFL, 0) < 0)
		return files_fail(error, -errno, "Cannot write '%s': %s", path, strerror(errno));
	err = fd_write_full(fd, data, len);
	if (err)
		return files_fail(error, err, "Cannot write '%s': %s", path, strerror(-err));
	if (give_to_sandbox && fchown(fd, AGENT_SANDBOX_UID, AGENT_SANDBOX_GID) < 0)
		return files_fail(error, -errno, "Cannot chown '%s': %s", path, strerror(errno));
	if (fchmod(fd, FILES_FILE_MODE) < 0)
		return files_fail(error, -errno, "Cannot chmod '%s': %s", path, strerror(errno));
	return 0;
}

/* /etc/voidbox/hosts is mirrored to /etc/hosts so the guest resolver sees host overrides. */
static int files_mirror_hosts(const struct files_roots *roots, const uint8_t *data, size_t len,
			      char **error)
{
	char target[PATH_MAX];
	int fd, err;

	if (snprintf(target, sizeof(target), "%s%s", roots->prefix, FILES_HOSTS_TARGET) >=
	    (int)sizeof(target))
		return files_fail(error, -ENAMETOOLONG, "Cannot update /etc/hosts: path too long");
	fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, FILES_FILE_MODE);
	if (fd < 0)
		return files_fail(error, -errno, "Cannot update /etc/hosts: %s", strerror(errno));
	err = fd_write_full(fd, data, len);
	close(fd);
	if (err)
		return files_fail(error, err, "Cannot update /etc/hosts: %s", strerror(-err));
	return 0;
}

int files_write(const struct files_roots *roots, const char *path, const uint8_t *data,
		size_t len, bool create_parents, char **error)
{
	struct files_target target;
	char parent[PATH_MAX];
	const char *leaf;
	long parent_fd = -1;
	int fd, err;

	*error = NULL;
	err = files_open_root(roots, FILES_OP_WRITE, path, &target, error);
	if (err)
		goto out;
	if (files_is_retired_policy_path(target.normalized)) {
		err = files_fail(error, -EPERM, "Refusing write of '%s': the exec policy is set "
				 "with SetPolicy, never through a file", path);
		goto out;
	}
	if (strcmp(target.rest, ".") == 0 ||
	    files_split_leaf(target.rest, parent, sizeof(parent), &leaf) < 0) {
		err = files_fail(error, -EISDIR, "Refusing write of '%s': it names a root directory",
				 path);
		goto out;
	}
	if (create_parents)
		parent_fd = files_walk_mkdir(target.give_to_sandbox, target.root_fd, parent,
					     FILES_OP_WRITE, path,
					     error);
	else if ((parent_fd = files_openat2(target.root_fd, parent,
					    O_PATH | O_DIRECTORY | O_CLOEXEC, 0)) < 0)
		parent_fd = files_resolve_error(FILES_OP_WRITE, path, errno, error);
	if (parent_fd < 0) {
		err = (int)parent_fd;
		goto out;
	}
	fd = openat((int)parent_fd, leaf, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK |
		    O_NOCTTY, FILES_FILE_MODE);
	if (fd < 0) {
		err = files_resolve_error(FILES_OP_WRITE, path, errno, error);
		goto out_parent;
	}
	err = files_write_leaf(target.give_to_sandbox, fd, data, len, path, error);
	close(fd);
	if (!err && strcmp(target.normalized, FILES_HOSTS_SOURCE) == 0)
		err = files_mirror_hosts(roots, data, len, error);
out_parent:
	close((int)parent_fd);
out:
	files_target_close(&target);
	return err;
}

static int files_read_all(int fd, size_t expected, uint8_t **data, size_t *len)
{
	size_t capacity = expected + 1, used = 0;
	uint8_t *buf = malloc(capacity);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (used == capacity) {
			uint8_t *grown;

			if (capacity > FILES_READ_MAX) {
				free(buf);
				return -EFBIG;
			}
			grown = realloc(buf, capacity + FILES_READ_CHUNK);
			if (!grown) {
				free(buf);
				return -ENOMEM;
			}
			buf = grown;
			capacity += FILES_READ_CHUNK;
		}
		n = read(fd, buf + used, capacity - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;

			free(buf);
			return err;
		}
		if (n == 0)
			break;
		used += (size_t)n;
	}
	if (used > FILES_READ_MAX) {
		free(buf);
		return -EFBIG;
	}
	*data = buf;
	*len = used;
	return 0;
}

int files_read(const struct files_roots *roots, const char *path, uint8_t **data, size_t *len,
	       char **error)
{
	struct files_target target;
	struct stat st;
	long fd;
	int err;

	*error = NULL;
	*data = NULL;
	*len = 0;
	err = files_open_root(roots, FILES_OP_READ, path, &target, error);
	if (err)
		goto out;
	fd = files_openat2(target.root_fd, target.rest,
			   O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
	if (fd < 0) {
		err = files_resolve_error(FILES_OP_READ, path, errno, error);
		goto out;
	}
	if (fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		err = files_fail(error, -EINVAL, "Cannot read '%s': not a regular file", path);
		goto out_fd;
	}
	if ((uint64_t)st.st_size > FILES_READ_MAX) {
		err = files_fail(error, -EFBIG,
				 "Cannot read '%s': %lld bytes exceeds the %u-byte limit; split "
				 "the file or copy it through a mount", path,
				 (long long)st.st_size, FILES_READ_MAX);
		goto out_fd;
	}
	err = files_read_all((int)fd, (size_t)st.st_size, data, len);
	if (err)
		err = files_fail(error, err, "Cannot read '%s': %s", path, strerror(-err));
out_fd:
	close((int)fd);
out:
	files_target_close(&target);
	return err;
}

int files_mkdir_p(const struct files_roots *roots, const char *path, char **error)
{
	struct files_target target;
	int fd, err;

	*error = NULL;
	err = files_open_root(roots, FILES_OP_MKDIR, path, &target, error);
	if (err)
		goto out;
	fd = files_walk_mkdir(target.give_to_sandbox, target.root_fd, target.rest, FILES_OP_MKDIR,
			      path, error);
	if (fd < 0)
		err = fd;
	else
		close(fd);
out:
	files_target_close(&target);
	return err;
}

int files_stat(const struct files_roots *roots, const char *path, bool *exists, uint64_t *size,
	       char **error)
{
	struct files_target target;
	struct stat st;
	long fd;
	int err;

	*error = NULL;
	*exists = false;
	*size = 0;
	err = files_open_root(roots, FILES_OP_STAT, path, &target, error);
	if (err)
		goto out;
	fd = files_openat2(target.root_fd, target.rest, O_PATH | O_CLOEXEC, 0);
	if (fd < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			err = files_resolve_error(FILES_OP_STAT, path, errno, error);
		goto out;
	}
	if (fstat((int)fd, &st) == 0) {
		*exists = true;
		*size = (uint64_t)st.st_size;
	} else {
		err = files_fail(error, -errno, "Cannot stat '%s': %s", path, strerror(errno));
	}
	close((int)fd);
out:
	files_target_close(&target);
	return err;
}
