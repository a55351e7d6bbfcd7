/*
 * A root filesystem tree as an ext4 image a VM attaches read-only (the guest agent overlays a
 * tmpfs on it and switches root: guest/agent/oci_root.c). Built with e2fsprogs' `mkfs.ext4
 * -d`, which copies a directory into a new filesystem without root and without mounting.
 */
#ifndef VOIDBOX_STORE_OCI_ROOTFS_H
#define VOIDBOX_STORE_OCI_ROOTFS_H

#include <stddef.h>
#include <stdint.h>

/* The image is written at image_path + this + the writer's pid, then renamed to image_path. */
#define OCI_ROOTFS_TMP_SUFFIX ".tmp-"

/* What the image must hold for tree: bytes (file data and directories, in blocks) and inodes. */
struct oci_rootfs_size {
	uint64_t data_bytes;
	uint64_t inodes;
};

/* Walks tree without following symlinks. 0 or -errno. */
int oci_rootfs_measure(const char *tree, struct oci_rootfs_size *size);

/*
 * Writes an ext4 image of tree to image_path: sized from the tree with room to spare, no
 * journal (it is only ever mounted read-only), written under a temporary name and renamed,
 * so image_path is whole or absent. 0, or -errno with a sentence in err (mkfs.ext4's own
 * words when it failed).
 */
int oci_rootfs_build_ext4(const char *tree, const char *image_path, char *err, size_t errlen);

#endif
