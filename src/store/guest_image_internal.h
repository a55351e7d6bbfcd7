/*
 * Names and helpers shared by the two halves of the guest image module (guest_image.c reads
 * images, guest_image_build.c writes them); not part of the public API.
 */
#ifndef VOIDBOX_STORE_GUEST_IMAGE_INTERNAL_H
#define VOIDBOX_STORE_GUEST_IMAGE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "store/store_fs.h" /* store_error */

#define GUEST_IMAGE_IMAGES_DIR "images"
#define GUEST_IMAGE_DEB_CACHE_DIR "cache/debs"
#define GUEST_IMAGE_KERNEL_FILE "vmlinuz"
#define GUEST_IMAGE_INITRAMFS_FILE "initramfs.cpio"
#define GUEST_IMAGE_INITRAMFS_GZ_FILE "initramfs.cpio.gz"
#define GUEST_IMAGE_MANIFEST_FILE "manifest.json"
/*
 * The temporaries beside the images, each named <prefix><pid>-... after the process that
 * made it, so one a killed process left is told from a running one's (store_tmp_writer_gone):
 * a build's staging directory, and an image being removed once it is renamed out of sight.
 * Both start with '.', which no image name does, so listing never shows them.
 */
#define GUEST_IMAGE_BUILD_PREFIX ".build-"
#define GUEST_IMAGE_REMOVE_PREFIX ".remove-"

/* snprintf that reports truncation as -ENAMETOOLONG. */
int guest_image_format(char *out, size_t out_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool guest_image_name_valid(const char *name);
/* Removes from images_dir the temporaries whose process is gone; a running one's stay. */
void guest_image_sweep(const char *images_dir);

#endif
