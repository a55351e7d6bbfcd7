/*
 * Filesystem steps the guest-image and snapshot stores both take to publish and remove
 * directories, and the two small helpers every store file uses (an error sentence into the
 * caller's buffer, a path joined without silent truncation), with the tool runner the image
 * builders share and what its failure gets on a full file system. They live here once so both
 * stores behave the same on filesystems that lack renameat2 flags (9p, some network
 * filesystems).
 */
#ifndef VOIDBOX_STORE_FS_H
#define VOIDBOX_STORE_FS_H

#include <stdbool.h>
#include <stddef.h>

/* Formats a sentence into err (nothing when err is NULL or errlen 0). */
void store_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* dir/name into out: 0, or -ENAMETOOLONG when it does not fit. */
int store_join(char *out, size_t out_len, const char *dir, const char *name);

/* Removes path and everything below it (symlinks are not followed); 0 also when absent. */
int store_remove_tree(const char *path);
/*
 * Renames the directory from to to unless to exists: 0, -EEXIST when it does, or -errno.
 * Where RENAME_NOREPLACE is unsupported (EINVAL) a plain rename does the same for the stores,
 * because rename(2) replaces only an empty directory and a published one never is: its
 * populated directory makes the rename fail, which is reported as -EEXIST.
 */
int store_rename_noreplace(const char *from, const char *to);

/*
 * Whether name is a temporary left by a writer that is gone: it starts with prefix, then the
 * writer's pid, then '-' or its end. A pid that no longer runs is gone; a name with the prefix
 * and no pid after it is treated as gone too; this process's own and a running one's are not.
 * A pid reused by a later process keeps its temporary until that process ends.
 */
bool store_tmp_writer_gone(const char *name, const char *prefix);
/* Removes every entry of dir (a file or a tree) that store_tmp_writer_gone calls gone. */
void store_sweep_gone_writers(const char *dir, const char *prefix);

/*
 * Runs a tool (argv[0] looked up in PATH, no shell) in cwd (NULL: ours) with stdin from
 * /dev/null. With capture, its stdout lands there NUL-terminated (the rest is read and
 * dropped, so the tool never blocks); without, it goes to our stderr, never our stdout.
 * 0 when it exits 0; -EIO with "`tool arg` failed (exit status N)" in err; -errno when it
 * cannot start.
 */
int store_run_tool(const char *const argv[], const char *cwd, char *capture, size_t capture_len,
		   char *err, size_t errlen);

/*
 * A tool that failed while writing into dir most often failed because its file system is
 * full, and says so only in a flood of per-file lines on stderr that name no file system.
 * When the file system holding dir has less than STORE_LOW_SPACE_BYTES or no inode left for
 * this process, appends to err how much is left, where, and what to do, and returns true;
 * otherwise (or when dir cannot be looked at) leaves err as it is and returns false.
 */
#define STORE_LOW_SPACE_BYTES (64ull * 1024 * 1024)
bool store_explain_low_space(const char *dir, char *err, size_t errlen);

/*
 * The digest of a whole file under the named OpenSSL algorithm ("sha256", "sha512") into
 * digest (at least EVP_MAX_MD_SIZE bytes), its length in *digest_len. 0, -errno, or -EINVAL
 * for an unknown algorithm.
 */
int store_file_digest(const char *path, const char *algorithm, unsigned char *digest,
		      unsigned int *digest_len);

#endif
