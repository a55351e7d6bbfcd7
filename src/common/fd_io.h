/*
 * Whole reads and writes on file descriptors: the loops every module needs around read(2),
 * write(2), pread(2) and pwrite(2) (short transfers, EINTR), written once, plus the directory
 * fsync that makes a rename durable. Errors are negative errno values; the caller decides.
 */
#ifndef VOIDBOX_COMMON_FD_IO_H
#define VOIDBOX_COMMON_FD_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all len bytes: 0, or -errno (-EIO if write made no progress). */
int fd_write_full(int fd, const void *data, size_t len);
/* Reads until len bytes or end of file: the count read (less than len only at EOF), or -errno. */
ssize_t fd_read_full(int fd, void *data, size_t len);
/* pwrite of all len bytes at offset: 0 or -errno. */
int fd_pwrite_full(int fd, const void *data, size_t len, uint64_t offset);
/* pread of exactly len bytes at offset: 0, -EBADMSG when the file ends first, or -errno. */
int fd_pread_full(int fd, void *data, size_t len, uint64_t offset);
/* fsync of path opened read-only with open_flags added (O_DIRECTORY, O_NOFOLLOW...). */
int fsync_path(const char *path, int open_flags);
/* fsync of the directory path, so entries renamed or created in it survive a crash. */
int fsync_dir(const char *path);

#endif
