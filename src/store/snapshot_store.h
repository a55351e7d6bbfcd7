/*
 * The snapshot store: where VM snapshots live on disk, how they are named, found, listed,
 * deleted and evicted. It knows nothing of what a snapshot contains (src/vmm/snapshot.h writes
 * state and the memory file); it owns the directory around them.
 *
 * Layout under $VOIDBOX_HOME/snapshots (VOIDBOX_HOME defaults to ~/.void-box):
 *   <id>/            a base snapshot; <id> is the first 16 hex digits of its config hash
 *   <id>-diff-<n>/   a diff snapshot taken on top of base <id>, n = 1, 2, ...
 *   .tmp-<name>-<pid>-<n>/   a snapshot being written; never listed, swept when its writer died
 * Each committed directory holds the VMM's state file, its memory file, store.json (ours:
 * id, kind, parent, full config hash and the config it was taken from), manifest.json (every
 * file's SHA-256, store/snapshot_manifest.h) and, once something restored from it, `lock`:
 * the file every restoring process holds a shared flock on, so eviction, which needs an
 * exclusive one, leaves a snapshot in use alone.
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

#include "store/snapshot_manifest.h"

#define SNAPSHOT_STORE_DIR_NAME "snapshots"
#define SNAPSHOT_STORE_HASH_HEX_LEN 64
#define SNAPSHOT_STORE_ID_HEX_LEN 16
#define SNAPSHOT_STORE_ID_MAX 64
#define SNAPSHOT_STORE_STATE_FILE "state" /* the VMM's VM_SNAPSHOT_STATE_FILE */
#define SNAPSHOT_STORE_META_FILE "store.json"
#define SNAPSHOT_STORE_DIFF_INFIX "-diff-"
#define SNAPSHOT_STORE_TMP_PREFIX ".tmp-"
#define SNAPSHOT_STORE_CONFIG_MAGIC "voidbox-snapshot-config-v1"
/* Held (flock) by every process restoring from a snapshot; eviction skips a held one. */
#define SNAPSHOT_STORE_LOCK_FILE "lock"
/* The store's size cap ("20G"); past it, create and import evict least recently used. */
#define SNAPSHOT_STORE_CACHE_MAX_ENV "VOIDBOX_SNAPSHOT_CACHE_MAX"

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
	/* Hashes already known (an import verified them); NULL: commit hashes the files. */
	const struct snapshot_manifest *manifest;
	/*
	 * Without a manifest: the CPU features the guest was shown, from the state file (the
	 * caller reads them; the store does not decode states), recorded in manifest.json.
	 */
	bool has_cpu_features;
	uint32_t cpu_features[SNAPSHOT_MANIFEST_CPU_REGS];
};

/* The locks a process holds on a snapshot (and a diff's base) while a VM restores from it. */
struct snapshot_store_hold {
	int fds[SNAPSHOT_MANIFEST_CHAIN_MAX];
	unsigned int count;
};

/* What a garbage collection did. */
struct snapshot_store_gc_result {
	size_t evicted;		  /* snapshot directories removed */
	size_t spared_in_use;	  /* over the cap but held by a running VM */
	size_t spared_bases;	  /* over the cap but the base of a diff that stays */
	uint64_t remaining_bytes; /* the store's size afterwards */
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
 * Like snapshot_store_begin for a snapshot arriving whole (an import): a base keeps the id
 * it had (-EEXIST when taken), a diff becomes the next free <parent_id>-diff-<n> of a base
 * already stored. config_hash may be "" when the archive did not record one.
 */
int snapshot_store_begin_import(const char *id, const char *parent_id, const char *config_hash,
				struct snapshot_store_txn *txn, char *err, size_t errlen);

/*
 * Creates the store if needed, sweeps temporary directories whose writer is gone, and makes
 * a new temporary directory in it (.tmp-<pid>-<n>-<label>, never listed) into out: where an
 * import unpacks before anything is published. The caller removes it (store_remove_tree).
 */
int snapshot_store_scratch_dir(const char *label, char *out, size_t out_len, char *err,
			       size_t errlen);

/*
 * Writes store.json (config may be NULL; one the directory already holds is kept) and
 * manifest.json (txn->manifest, else every file hashed now, and the kernel and initramfs), fsyncs every file and the directory, renames it into
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
 * snapshot_store_gc(max_bytes, NULL, ...) with its counts: *evicted (may be NULL) counts
 * directories, *remaining_bytes (may be NULL) is the size left.
 */
int snapshot_store_evict_lru(uint64_t max_bytes, size_t *evicted, uint64_t *remaining_bytes,
			     char *err, size_t errlen);

/*
 * Evicts least recently used snapshots until the store holds at most max_bytes, never one a
 * running VM holds (snapshot_store_hold), never a base while a diff of it stays, and never
 * keep_id (may be NULL: the snapshot just written). Diffs go before their base. The result
 * says what was removed and what was spared.
 */
int snapshot_store_gc(uint64_t max_bytes, const char *keep_id,
		      struct snapshot_store_gc_result *result, char *err, size_t errlen);

/*
 * The cap store_settings carries from VOIDBOX_SNAPSHOT_CACHE_MAX: 0 and *set false when unset,
 * -EINVAL when malformed.
 */
int snapshot_store_cache_max(uint64_t *max_bytes, bool *set, char *err, size_t errlen);

/* Applies the configured cap (no-op without one), sparing keep_id. */
int snapshot_store_enforce_cap(const char *keep_id, char *err, size_t errlen);

/* "512", "64K", "300M", "2G", "1T" into bytes; false when malformed or too large. */
bool snapshot_store_parse_size(const char *text, uint64_t *out);

/*
 * Takes a shared lock on the snapshot in snapshot_dir (and, for a stored diff, on its base)
 * for as long as a VM restored from it runs. A directory where no lock file can be made (a
 * read-only snapshot kept elsewhere) is not held and is no error; a snapshot deleted while
 * being locked is -ENOENT.
 */
int snapshot_store_hold(const char *snapshot_dir, struct snapshot_store_hold *hold, char *err,
			size_t errlen);
void snapshot_store_release(struct snapshot_store_hold *hold);
/* Whether a process holds the snapshot in snapshot_dir (a non-blocking exclusive flock fails). */
bool snapshot_store_in_use(const char *snapshot_dir);

/*
 * Checks the stored snapshot prefix names against its manifest.json (every file's size and
 * SHA-256). Returns 0, or -errno with err naming the file that fails.
 */
int snapshot_store_verify(const char *prefix, struct snapshot_store_entry *entry, char *err,
			  size_t errlen);

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
/* A snapshot id or prefix: letters, digits, '-' and '_', not starting with '.' or '-'. */
bool snapshot_store_id_valid(const char *id);

#endif
