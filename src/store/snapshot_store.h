/*
 * The snapshot store: where VM snapshots live on disk, how they are named, found, listed,
 * deleted and evicted. It knows nothing of what a snapshot contains (src/vmm/snapshot.h writes
 * state and the memory file); it owns the directory around them.
 *
 * Layout under $VOIDBOX_HOME/snapshots (VOIDBOX_HOME defaults to ~/.void-box):
 *   <id>/            a base snapshot; <id> is the first 16 hex digits of its config hash
 *   <id>-diff-<n>/   a diff snapshot taken on top of base <id>, n = 1, 2, ...
 *   .tmp-<name>-<pid>-<n>/   a snapshot being written; never listed, swept when its writer died
 * Each committed directory holds the VMM's state file, its memory file and store.json (ours:
 * id, kind, parent, full config hash and the config it was taken from).
 *
 * Writes are atomic: a snapshot is written into a temporary directory, every file and the
 * directory are fsync'd, and the directory is renamed into place, so a reader sees a whole
 * snapshot or none; a writer that crashes leaves only a .tmp- directory that the next writer
 * removes.
 *
 * The config hash is SHA-256 over, in this order (the layout docs/snapshots.md documents):
 *   "voidbox-snapshot-config-v1\0"
 *   u64 LE kernel byte count, the kernel bytes
 *   u64 LE initramfs byte count (0 when none), the initramfs bytes
 *   u32 LE memory_mb, u32 LE vcpus
 *   u32 LE device count, then per device (sorted bytewise): u32 LE name length, the name
 * Lengths in front of every variable field keep two different configs from hashing alike.
 */
#ifndef VOIDBOX_STORE_SNAPSHOT_STORE_H
#define VOIDBOX_STORE_SNAPSHOT_STORE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SNAPSHOT_STORE_DIR_NAME "snapshots"
#define SNAPSHOT_STORE_HASH_HEX_LEN 64
#define SNAPSHOT_STORE_ID_HEX_LEN 16
#define SNAPSHOT_STORE_ID_MAX 64
#define SNAPSHOT_STORE_STATE_FILE "state" /* the VMM's VM_SNAPSHOT_STATE_FILE */
#define SNAPSHOT_STORE_META_FILE "store.json"
#define SNAPSHOT_STORE_DIFF_INFIX "-diff-"
#define SNAPSHOT_STORE_TMP_PREFIX ".tmp-"
#define SNAPSHOT_STORE_CONFIG_MAGIC "voidbox-snapshot-config-v1"

enum snapshot_store_kind {
	SNAPSHOT_STORE_KIND_BASE,
	SNAPSHOT_STORE_KIND_DIFF,
};

/* What a snapshot's config hash covers. */
struct snapshot_store_config {
	const char *kernel_path;
	const char *initramfs_path; /* NULL: none */
	unsigned int memory_mb;
	unsigned int vcpus;
	const char *const *devices; /* device names, e.g. "vsock"; any order */
	size_t device_count;
};

struct snapshot_store_entry {
	char id[SNAPSHOT_STORE_ID_MAX];		 /* the directory name */
	char path[PATH_MAX];			 /* absolute directory */
	enum snapshot_store_kind kind;
	char parent_id[SNAPSHOT_STORE_ID_MAX];	 /* a diff's base; "" for a base */
	char config_hash[SNAPSHOT_STORE_HASH_HEX_LEN + 1]; /* "" when store.json is missing */
	char kernel_path[PATH_MAX];		 /* as recorded at create time; may be "" */
	char initramfs_path[PATH_MAX];
	unsigned int memory_mb;
	unsigned int vcpus;
	uint64_t size_bytes;			 /* all files in the directory (allocated bytes) */
	time_t last_used;			 /* mtime of the state file: create or last restore */
};

/* A snapshot being written: fill tmp_path (e.g. with vm_snapshot_save), then commit or abort. */
struct snapshot_store_txn {
	char tmp_path[PATH_MAX];
	char final_path[PATH_MAX];
	char id[SNAPSHOT_STORE_ID_MAX];
	enum snapshot_store_kind kind;
	char parent_id[SNAPSHOT_STORE_ID_MAX];
	char config_hash[SNAPSHOT_STORE_HASH_HEX_LEN + 1];
	bool open;
};

/* $VOIDBOX_HOME/snapshots (else ~/.void-box/snapshots); not created. */
int snapshot_store_dir(char *out, size_t out_len);

/* Lowercase hex SHA-256 of the layout above; err names an unreadable file. */
int snapshot_store_config_hash(const struct snapshot_store_config *config,
			       char hex[SNAPSHOT_STORE_HASH_HEX_LEN + 1], char *err, size_t errlen);

/*
 * Starts writing a base snapshot (parent_id NULL: its id is the hash's first 16 hex digits;
 * -EEXIST when it is already stored) or a diff on top of the stored base parent_id (the next
 * free <parent>-diff-<n>). Creates the store and the temporary directory, sweeping temporary
 * directories whose writer is gone.
 */
int snapshot_store_begin(const char *config_hash, const char *parent_id,
			 struct snapshot_store_txn *txn, char *err, size_t errlen);

/*
 * Writes store.json (config may be NULL), fsyncs every file and the directory, renames it into
 * place and fsyncs the store. On failure the temporary directory is removed.
 */
int snapshot_store_commit(struct snapshot_store_txn *txn,
			  const struct snapshot_store_config *config, char *err, size_t errlen);

/* Removes the temporary directory of an uncommitted snapshot; a closed txn is fine. */
void snapshot_store_abort(struct snapshot_store_txn *txn);

/* Every committed snapshot, sorted by id; free *entries with free(). Empty when no store. */
int snapshot_store_list(struct snapshot_store_entry **entries, size_t *count, char *err,
			size_t errlen);

/*
 * The one snapshot whose id starts with prefix (an exact id wins over longer ones; a prefix
 * that matches one base and only its diffs names the base).
 * -ENOENT when none, -ENOTUNIQ when several (err lists them and asks for a longer prefix).
 */
int snapshot_store_find(const char *prefix, struct snapshot_store_entry *out, char *err,
			size_t errlen);

/*
 * Deletes the one snapshot prefix names (as snapshot_store_find); deleting a base also deletes
 * its diffs, which cannot be restored without it. *deleted (may be NULL) counts directories.
 */
int snapshot_store_delete(const char *prefix, size_t *deleted, char *err, size_t errlen);

/*
 * Deletes least recently used snapshots (oldest state-file mtime first; a base takes its diffs
 * with it) until the store holds at most max_bytes. *evicted (may be NULL) counts directories,
 * *remaining_bytes (may be NULL) is the size left.
 */
int snapshot_store_evict_lru(uint64_t max_bytes, size_t *evicted, uint64_t *remaining_bytes,
			     char *err, size_t errlen);

/* Marks a snapshot used now (its state file's mtime), so eviction keeps what runs restore from. */
int snapshot_store_touch(const char *snapshot_dir);

enum snapshot_store_source {
	SNAPSHOT_STORE_SOURCE_ID,   /* a stored snapshot's id prefix */
	SNAPSHOT_STORE_SOURCE_PATH, /* a directory holding a state file */
};

/*
 * Resolves a user's snapshot reference: first an id prefix in the store, then a directory path
 * that holds a state file. -ENOENT when neither (the caller warns and cold-boots), -ENOTUNIQ for
 * an ambiguous prefix; err says which and what to do.
 */
int snapshot_store_resolve(const char *reference, char *dir_out, size_t dir_len,
			   enum snapshot_store_source *source, char *err, size_t errlen);

const char *snapshot_store_kind_name(enum snapshot_store_kind kind);

#endif
