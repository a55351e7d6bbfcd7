/*
 * File RPCs confined to the allowed roots (/workspace, /home, /etc/voidbox). A request path is
 * normalised lexically, matched against the roots (longest wins), and the rest is resolved with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS) relative to the root's directory fd, so neither
 * ".." nor a planted symlink can reach outside. root_prefix relocates the roots for tests.
 * Every failure comes back as a heap error string meant for the host user.
 */
#ifndef VOIDBOX_AGENT_FILES_H
#define VOIDBOX_AGENT_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A ReadFile reply is base64 inside a 64 MiB frame, so the file must stay well below 48 MiB. */
#define FILES_READ_MAX (32u * 1024u * 1024u)

enum files_op {
	FILES_OP_WRITE,
	FILES_OP_READ,
	FILES_OP_MKDIR,
	FILES_OP_STAT,
};

struct files_roots {
	const char *prefix;      /* "" in the VM; a temp dir in tests */
	bool chown_to_sandbox;   /* give created files to uid/gid 1000 (only possible as root) */
};

/*
 * Lexically normalises an absolute path: collapses "//" and ".", applies ".." (never above
 * "/"). Returns 0, -EINVAL for a relative or empty path, -ENAMETOOLONG.
 */
int files_normalize(const char *path, char *out, size_t out_size);

/*
 * Maps a normalised path to (root index, relative rest). rest is "." for the root itself.
 * Returns the root's guest path, or NULL when the path is outside every root.
 */
const char *files_match_root(const char *normalized, const char **rest);

int files_write(const struct files_roots *roots, const char *path, const uint8_t *data,
		size_t len, bool create_parents, char **error);
int files_read(const struct files_roots *roots, const char *path, uint8_t **data, size_t *len,
	       char **error);
int files_mkdir_p(const struct files_roots *roots, const char *path, char **error);
/* A missing file is success with *exists = false and no error. */
int files_stat(const struct files_roots *roots, const char *path, bool *exists, uint64_t *size,
	       char **error);

#endif
