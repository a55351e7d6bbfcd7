/*
 * A writer for the "newc" cpio format, the only archive format the kernel unpacks as an
 * initramfs.
 *
 * Entries are emitted exactly in the order the caller adds them (the caller sorts, so archives
 * are reproducible); every entry is owned by root with a fixed mtime; inode numbers count up
 * from 1 and no two entries share one, so nothing is mistaken for a hard link. Output goes
 * through a write callback, which lets the caller choose plain or compressed files.
 */
#ifndef VOIDBOX_STORE_CPIO_NEWC_H
#define VOIDBOX_STORE_CPIO_NEWC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all of len bytes or returns -errno. */
typedef int (*cpio_sink_write_fn)(void *ctx, const void *data, size_t len);

struct cpio_writer {
	cpio_sink_write_fn write;
	void *ctx;
	uint64_t offset;
	uint32_t next_inode;
	uint32_t mtime;
	uint32_t entries;
};

void cpio_writer_init(struct cpio_writer *writer, cpio_sink_write_fn write, void *ctx,
		      uint32_t mtime);

/* Paths are archive paths without a leading '/' ("bin/busybox"). mode holds permissions only. */
int cpio_writer_add_directory(struct cpio_writer *writer, const char *path, mode_t mode);
int cpio_writer_add_file(struct cpio_writer *writer, const char *path, mode_t mode,
			 const void *data, size_t len);
/* Streams a host file's contents; the host file's own mode and owner are ignored. */
int cpio_writer_add_file_from_path(struct cpio_writer *writer, const char *path, mode_t mode,
				   const char *host_path);
int cpio_writer_add_symlink(struct cpio_writer *writer, const char *path, const char *target);
int cpio_writer_add_char_device(struct cpio_writer *writer, const char *path, mode_t mode,
				unsigned int major, unsigned int minor);
/* Writes the TRAILER!!! entry and pads the archive to a 512-byte multiple. */
int cpio_writer_finish(struct cpio_writer *writer);

#endif
