/*
 * Portable snapshots: one file (tar, zstd-compressed, through libarchive) that carries a
 * stored snapshot, its base when it is a diff, and a manifest (store/snapshot_manifest.h) with
 * every file's size and SHA-256, to another machine's store.
 *
 * Import unpacks into a temporary directory inside the destination store, checks every file
 * against the manifest as it is unpacked, and publishes only when all of them match, by
 * renaming each snapshot directory into place; a refused archive leaves nothing. A diff's
 * state file names its base by absolute path, so an imported diff has that path rewritten to
 * its base in this store (a new state file through the VMM's own encoder; the base, and so
 * the id the diff checks its base against, is unchanged).
 *
 * This is apart from src/store because it reads and rewrites state files through the VMM's
 * codec (src/vmm/snapshot_file.h), which the store itself never needs.
 */
#ifndef VOIDBOX_PORTABLE_SNAPSHOT_ARCHIVE_H
#define VOIDBOX_PORTABLE_SNAPSHOT_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "store/snapshot_manifest.h"

/* What an export of a diff carries. */
enum snapshot_archive_scope {
	SNAPSHOT_ARCHIVE_WITH_BASE, /* the diff and its base: restorable anywhere */
	SNAPSHOT_ARCHIVE_DIFF_ONLY, /* the diff alone: for a store that has the base already */
};

struct snapshot_archive_import_result {
	char snapshot_id[SNAPSHOT_MANIFEST_ID_MAX]; /* the archive's snapshot, as stored here */
	char base_id[SNAPSHOT_MANIFEST_ID_MAX];	    /* a diff's base here; "" for a base */
	size_t published;			    /* snapshot directories added */
	size_t already_present;			    /* identical base already stored */
};

/*
 * Writes the stored snapshot prefix names (and its base, unless DIFF_ONLY) to out_path, via a
 * temporary file renamed into place. Each file is hashed again as it is written and must match
 * the hash its snapshot recorded. *manifest (may be NULL) receives what was written.
 */
int snapshot_archive_export(const char *prefix, const char *out_path,
			    enum snapshot_archive_scope scope,
			    struct snapshot_archive_manifest *manifest, char *err, size_t errlen);

/* Imports archive_path into the store. Returns 0, or -errno with err naming what failed. */
int snapshot_archive_import(const char *archive_path,
			    struct snapshot_archive_import_result *result, char *err,
			    size_t errlen);

#endif
