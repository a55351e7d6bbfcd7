/*
 * What a snapshot's files should hash to. Two documents share one file list format:
 *
 * - manifest.json inside every stored snapshot, written when the snapshot is committed (the
 *   memory file is hashed once, then) or imported: each file's name, size and SHA-256, and
 *   the SHA-256 of the kernel and initramfs it was taken from. `snapshot verify` and export
 *   check the files against it.
 * - manifest.json at the head of an exported archive: the same lists for the snapshot and its
 *   base, plus what a receiving host needs to judge it (format versions, config hash, kernel
 *   and initramfs identity, the CPU signature and the CPU features the guest was shown).
 *   Import checks every file against it before anything is published.
 *
 * A stored manifest also records the CPU features the guest was shown (cpu_features, the
 * archive's cpu.features at import): a restore refuses on a host that lacks one of them as it
 * does for those in the state file, so a feature list edited in a copy is honoured, never
 * widened (docs/snapshots.md).
 *
 * The SHA-256 here is an integrity check of bytes at rest and in transit; a restore checks
 * the state file's own SHA-256, which also gives the snapshot its id (docs/snapshots.md).
 * The archive manifest's parser is what an archive from anywhere reaches first, so it bounds
 * everything (names from a fixed set, sizes, counts) and is fuzzed (fuzz/snapshot_archive_fuzz.c).
 */
#ifndef VOIDBOX_STORE_SNAPSHOT_MANIFEST_H
#define VOIDBOX_STORE_SNAPSHOT_MANIFEST_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SNAPSHOT_MANIFEST_FILE "manifest.json"
#define SNAPSHOT_MANIFEST_VERSION 1
#define SNAPSHOT_MANIFEST_SHA256_HEX_LEN 64
#define SNAPSHOT_MANIFEST_ID_MAX 64
#define SNAPSHOT_MANIFEST_NAME_MAX 16
/* state, memory.mem or memory.diff, store.json */
#define SNAPSHOT_MANIFEST_MAX_FILES 4
/* A diff always counts from a base, so a chain is a base and at most one diff. */
#define SNAPSHOT_MANIFEST_CHAIN_MAX 2
#define SNAPSHOT_MANIFEST_CPU_REGS 5
#define SNAPSHOT_MANIFEST_CPU_SIGNATURE_MAX 64
#define SNAPSHOT_ARCHIVE_FORMAT "voidbox-snapshot-archive"
#define SNAPSHOT_ARCHIVE_VERSION 1
/* The archive's manifest is a few KiB; anything far larger is not one. */
#define SNAPSHOT_ARCHIVE_MANIFEST_MAX_BYTES (1u << 20)

struct snapshot_manifest_file {
	char name[SNAPSHOT_MANIFEST_NAME_MAX];
	uint64_t size;
	char sha256[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];
};

/* One snapshot's files. */
struct snapshot_manifest {
	char id[SNAPSHOT_MANIFEST_ID_MAX];
	bool diff;
	char parent_id[SNAPSHOT_MANIFEST_ID_MAX];	      /* a diff's base; "" for a base */
	char parent_state_sha256[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1]; /* a diff's base's state */
	char kernel_sha256[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];     /* "" when not known */
	char initramfs_sha256[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];  /* "" when none */
	/*
	 * The CPU features the guest was shown (as in the archive manifest's cpu.features);
	 * false for a manifest written before they were recorded. A restore requires them.
	 */
	bool has_cpu_features;
	uint32_t cpu_features[SNAPSHOT_MANIFEST_CPU_REGS];
	size_t file_count;
	struct snapshot_manifest_file files[SNAPSHOT_MANIFEST_MAX_FILES];
};

/* An exported archive's head: the snapshot (last in chain) and, unless omitted, its base. */
struct snapshot_archive_manifest {
	unsigned int state_format_version;
	char snapshot[SNAPSHOT_MANIFEST_ID_MAX];
	char config_hash[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1]; /* "" when not recorded */
	char kernel_path[PATH_MAX];				/* at export; informational */
	char initramfs_path[PATH_MAX];
	char cpu_signature[SNAPSHOT_MANIFEST_CPU_SIGNATURE_MAX];
	bool has_cpu_features;
	/* CPUID leaf 1 ECX, EDX, leaf 7.0 EBX, ECX, EDX (SNAPSHOT_MANIFEST_CPU_REG_NAMES order) */
	uint32_t cpu_features[SNAPSHOT_MANIFEST_CPU_REGS];
	size_t chain_count;
	struct snapshot_manifest chain[SNAPSHOT_MANIFEST_CHAIN_MAX]; /* base first */
};

/* Whether name is a file a snapshot is made of (and so hashed, exported, verified). */
bool snapshot_manifest_file_known(const char *name);
/* The largest size a file of that name may have in an archive. */
uint64_t snapshot_manifest_file_max(const char *name);
/* The entry for name, or NULL. */
const struct snapshot_manifest_file *snapshot_manifest_find(const struct snapshot_manifest *m,
							    const char *name);

/* Lowercase hex SHA-256 of a file and its size; err names the file on failure. */
int snapshot_sha256_file(const char *path, char hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1],
			 uint64_t *size, char *err, size_t errlen);

/*
 * Hashes every known file in dir into m->files (id, kind and the kernel/initramfs hashes are
 * the caller's). Returns 0 or -errno with err.
 */
int snapshot_manifest_hash_dir(const char *dir, struct snapshot_manifest *m, char *err,
			       size_t errlen);
/* Adds the features of from to into (into->has_cpu_features set when either has them). */
void snapshot_manifest_add_cpu_features(bool *into_has, uint32_t into[SNAPSHOT_MANIFEST_CPU_REGS],
					bool from_has,
					const uint32_t from[SNAPSHOT_MANIFEST_CPU_REGS]);
/* dir/manifest.json, written and fsync'd. */
int snapshot_manifest_write(const char *dir, const struct snapshot_manifest *m, char *err,
			    size_t errlen);
/* Reads dir/manifest.json; -ENOENT when the snapshot has none. */
int snapshot_manifest_read(const char *dir, struct snapshot_manifest *m, char *err,
			   size_t errlen);
/*
 * Checks every file m lists in dir (present, same size, same SHA-256) and that no known file
 * is there unlisted. Returns 0, or -EBADMSG/-ENOENT with err naming the first file that fails.
 */
int snapshot_manifest_verify(const char *dir, const struct snapshot_manifest *m, char *err,
			     size_t errlen);

/* The archive manifest as JSON text (malloc'ed), or NULL when out of memory. */
char *snapshot_archive_manifest_dump(const struct snapshot_archive_manifest *m);
/*
 * Parses and checks an archive manifest: format and version, ids, the chain's shape (a base,
 * or a diff, or a base then its diff), file names from the known set with sizes bounded and
 * well-formed hashes. Returns 0, or -EBADMSG with err saying what is wrong.
 */
int snapshot_archive_manifest_parse(const char *text, size_t len,
				    struct snapshot_archive_manifest *m, char *err, size_t errlen);

extern const char *const SNAPSHOT_MANIFEST_CPU_REG_NAMES[SNAPSHOT_MANIFEST_CPU_REGS];

#endif
