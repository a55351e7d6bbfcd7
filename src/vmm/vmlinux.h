/*
 * Extracting the uncompressed vmlinux from a bzImage on the host. A bzImage decompresses
 * itself inside the guest on every boot; for Debian's XZ-compressed kernels that is the
 * largest single cost of a boot under nested virtualization. Doing it once on the host and
 * booting the ELF (boot_is_elf) skips it; the price is the decompressor's KASLR.
 */
#ifndef VOIDBOX_VMM_VMLINUX_H
#define VOIDBOX_VMM_VMLINUX_H

#include <stddef.h>
#include <stdint.h>

#define VMLINUX_MAX_BYTES (512ULL * 1024 * 1024)

/*
 * Decompresses the bzImage's payload (XZ, as Debian builds it) into a malloc'd buffer.
 * Returns 0, or -ENOEXEC (not a bzImage / not XZ), -EINVAL (corrupt), -ENOMEM.
 */
int vmlinux_extract(const uint8_t *bzimage, size_t size, uint8_t **out, size_t *out_len,
		    char *err, size_t errlen);
/* Reads bzimage_path and writes the vmlinux to out_path (atomically, via a temporary file). */
int vmlinux_extract_file(const char *bzimage_path, const char *out_path, char *err,
			 size_t errlen);

/*
 * The cache entry for a kernel: cache_dir/vmlinux-<size>-<mtime>, so a rebuilt kernel gets a
 * new entry. Returns 0, or -ENAMETOOLONG / -errno from stat(kernel_path).
 */
int vmlinux_cache_path(const char *cache_dir, const char *kernel_path, char *out, size_t len);
/*
 * Makes sure the cache holds the vmlinux of kernel_path (creating cache_dir when missing) and
 * puts its path in out. -ENOEXEC when the kernel is not an XZ bzImage (boot it as given).
 * A hit marks the entry used (its mtime); adding an entry removes all but the four most
 * recently used.
 */
int vmlinux_cache_prepare(const char *cache_dir, const char *kernel_path, char *out, size_t len,
			  char *err, size_t errlen);

#endif
