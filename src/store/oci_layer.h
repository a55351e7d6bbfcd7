/*
 * OCI image layers applied onto a directory tree, in order, the way an overlay filesystem
 * would stack them (OCI image spec, "layer.md"): each layer is a tar archive (plain, gzip or
 * zstd) whose entries are added or replace what lower layers left, whose `.wh.NAME` entries
 * delete NAME, and whose `.wh..wh..opq` entry empties its directory of everything lower
 * layers put there.
 *
 * A layer is hostile input. No entry may land outside the root: absolute paths and `..`
 * components (in names and in hard-link targets) refuse the whole layer, and no entry is
 * written, and nothing is deleted, through a symlink (a parent that is one refuses the
 * entry). Entries the host cannot create (device nodes without privilege, say) are skipped
 * with a warning and counted. What an image may unpack is bounded (struct oci_layer_budget),
 * so a small compressed layer cannot fill the disk, nor its names the memory.
 */
#ifndef VOIDBOX_STORE_OCI_LAYER_H
#define VOIDBOX_STORE_OCI_LAYER_H

#include <stddef.h>
#include <stdint.h>

#define OCI_WHITEOUT_PREFIX ".wh."
#define OCI_OPAQUE_MARKER ".wh..wh..opq"

/*
 * What one image's layers may unpack in all: the sum of the sizes entries declare (a bound
 * on the disk the scratch tree takes), the number of entries (inodes, and the time a layer
 * of millions of tiny entries takes), and the bytes of their names (the memory a layer's
 * opaque-directory bookkeeping keeps). Real images stay far below all three.
 */
#define OCI_IMAGE_DATA_BYTES_MAX (64ull << 30)
#define OCI_IMAGE_ENTRIES_MAX (4ull << 20)
#define OCI_IMAGE_NAME_BYTES_MAX (512ull << 20)

/* What is left for an image's remaining layers; each layer applied spends from it. */
struct oci_layer_budget {
	uint64_t data_bytes;
	uint64_t entries;
	uint64_t name_bytes;
};

struct oci_layer_stats {
	uint64_t entries;   /* written */
	uint64_t whiteouts; /* .wh.NAME deletions and opaque markers applied */
	uint64_t skipped;   /* entries the host could not create, each warned about */
};

/* A full budget for one image: the OCI_IMAGE_*_MAX bounds above. */
void oci_layer_budget_init(struct oci_layer_budget *budget);

/*
 * Applies the layer at archive_path onto root (an existing directory), spending from budget.
 * The calling thread works in root while it runs, with a working directory of its own, and
 * one layer is applied at a time per process, so other threads never see the change. 0 with
 * *stats, or -errno with a sentence in err naming the bad entry (-EFBIG past the budget);
 * after a failure root holds part of the layer and must be discarded.
 */
int oci_layer_apply(const char *archive_path, const char *root, struct oci_layer_budget *budget,
		    struct oci_layer_stats *stats, char *err, size_t errlen);

/*
 * Normalizes an entry name: "." components and repeated or trailing slashes go. 0 with the
 * relative path in out ("" for the root itself), or -EINVAL for an absolute path, a ".."
 * component or a name that does not fit in size.
 */
int oci_layer_normalize_path(const char *name, char *out, size_t size);

#endif
