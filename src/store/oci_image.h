/*
 * Pulled OCI images as root filesystems a VM boots (docs/images.md "OCI images"): a pull
 * fills the blob cache (oci_pull.h), applies the layers onto a fresh tree (oci_layer.h) and
 * makes the tree an ext4 image (oci_rootfs.h), kept once per manifest digest under
 * $VOIDBOX_HOME/oci/images/<hex>/rootfs.ext4. A reference (a tag) points at a manifest
 * through a small JSON file in oci/refs/, named by the sha256 of the canonical reference, so
 * any reference is a safe file name and two tags of one image share one rootfs.
 */
#ifndef VOIDBOX_STORE_OCI_IMAGE_H
#define VOIDBOX_STORE_OCI_IMAGE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/oci_pull.h"

#define OCI_IMAGE_ROOTFS_FILE "rootfs.ext4"
/* The kernel command line word that makes the agent boot the first disk as its root. */
#define OCI_IMAGE_ROOT_CMDLINE "voidbox.oci_rootfs_dev=/dev/vda"

struct oci_image_info {
	char reference[OCI_REF_TEXT_MAX];	  /* canonical */
	char manifest_digest[OCI_DIGEST_LEN + 1];
	char rootfs_path[PATH_MAX];
	uint64_t rootfs_bytes;
	unsigned int layer_count;
	char pulled_at[32];			  /* UTC, ISO 8601 */
};

/* $VOIDBOX_HOME/oci into out (home NULL: $VOIDBOX_HOME or ~/.void-box). 0 or -errno. */
int oci_image_dir(char *out, size_t size);

/*
 * The store lock: a flock on oci_dir/lock. Shared: a pull (for all of it), and a command that
 * has looked an image up and boots from its rootfs, until its VMs have opened the file; any
 * number hold it at once. Exclusive: `image rm` and `image prune`, which delete what no
 * reference names yet. The kernel drops it when its holder dies.
 */
#define OCI_IMAGE_LOCK_FILE "lock"

enum oci_image_lock_mode {
	OCI_IMAGE_LOCK_SHARED,
	OCI_IMAGE_LOCK_EXCLUSIVE,
};

/* A held store lock; zeroed: none. */
struct oci_image_lock {
	int fd;
	bool held;
};

/*
 * Takes the store lock of oci_dir (the directory made when absent), waiting as long as the
 * other kind is held and saying once, as a warning, what it waits for. A shared lock on a
 * store this user cannot write is not taken (nothing of this user's can delete from it
 * either): 0 with lock->held false. 0, or -errno with err.
 */
int oci_image_lock(const char *oci_dir, enum oci_image_lock_mode mode,
		   struct oci_image_lock *lock, char *err, size_t errlen);
/* Releases the lock; one not held (zeroed, or released already) is fine. */
void oci_image_unlock(struct oci_image_lock *lock);

/*
 * Pulls ref_text into options->oci_dir and makes (or reuses) its root filesystem image,
 * holding the store lock shared throughout (a caller may hold it shared too). 0 with *out, or
 * -errno with a sentence in err; a failed pull caches no rootfs and no ref.
 */
int oci_image_pull(const char *ref_text, const struct oci_pull_options *options,
		   struct oci_image_info *out, char *err, size_t errlen);

/*
 * The pulled image ref_text names: 0 with *out, -ENOENT (err says how to pull), -errno. A
 * caller that goes on to open out->rootfs_path holds the store lock shared from before this
 * call until it has opened the file, so no `image rm` deletes it in between.
 */
int oci_image_find(const char *oci_dir, const char *ref_text, struct oci_image_info *out,
		   char *err, size_t errlen);

/* Every pulled reference, sorted; free(*out). 0 or -errno with err. */
int oci_image_list(const char *oci_dir, struct oci_image_info **out, size_t *count, char *err,
		   size_t errlen);

/*
 * Forgets ref_text; its rootfs goes too when no other reference names the same manifest
 * (the blobs stay in the cache: oci_image_prune drops those nothing needs). Holds the store
 * lock exclusive, so it waits for running pulls and image lookups. 0, -ENOENT, or -errno
 * with err.
 */
int oci_image_remove(const char *oci_dir, const char *ref_text, char *err, size_t errlen);

struct oci_image_prune_result {
	size_t removed;		/* blobs deleted */
	size_t kept;		/* blobs a pulled reference still needs */
	size_t images_removed;	/* image directories (a rootfs each) no reference names */
	uint64_t freed_bytes;	/* the deleted blobs' and root filesystems' sizes */
};

/*
 * Deletes every cached blob no pulled reference needs: a reference needs its manifest, the
 * manifest's config and its layers (an index is needed only during a pull, so it goes; a
 * later pull fetches it again). Also deletes every image directory (its rootfs) that no
 * reference names, such as one an interrupted `image rm` left. Refuses, deleting nothing,
 * when a reference's manifest is not in the cache or cannot be read, since its layers could
 * not be told apart. Holds the store lock exclusive, so it waits (saying so) for pulls under
 * way to name what they wrote in a reference, and for commands booting from an image to open
 * its rootfs. Temporaries of pulls that were killed are removed. 0 or -errno with err.
 */
int oci_image_prune(const char *oci_dir, struct oci_image_prune_result *out, char *err,
		    size_t errlen);

#endif
