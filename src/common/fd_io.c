/* The whole-transfer loops of fd_io.h. */
#include "common/fd_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <unistd.h>

/*
 * The one transfer loop: read or write len bytes, at offset when positioned. Returns the bytes
 * moved (less than len only when a read met end of file, or a write made no progress) or
 * -errno.
 */
static ssize_t fd_transfer(int fd, uint8_t *bytes, size_t len, bool writing, bool positioned,
			   uint64_t offset)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n;

		if (writing)
			n = positioned ? pwrite(fd, bytes + done, len - done, (off_t)(offset + done))
				       : write(fd, bytes + done, len - done);
		else
			n = positioned ? pread(fd, bytes + done, len - done, (off_t)(offset + done))
				       : read(fd, bytes + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int fd_write_full(int fd, const void *data, size_t len)
{
	ssize_t n = fd_transfer(fd, (uint8_t *)data, len, true, false, 0);

	return n < 0 ? (int)n : (size_t)n == len ? 0 : -EIO;
}

ssize_t fd_read_full(int fd, void *data, size_t len)
{
	return fd_transfer(fd, data, len, false, false, 0);
}

int fd_pwrite_full(int fd, const void *data, size_t len, uint64_t offset)
{
	ssize_t n = fd_transfer(fd, (uint8_t *)data, len, true, true, offset);

	return n < 0 ? (int)n : (size_t)n == len ? 0 : -EIO;
}

int fd_pread_full(int fd, void *data, size_t len, uint64_t offset)
{
	ssize_t n = fd_transfer(fd, data, len, false, true, offset);

	return n < 0 ? (int)n : (size_t)n == len ? 0 : -EBADMSG;
}

int fsync_path(const char *path, int open_flags)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | open_flags);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int fsync_dir(const char *path)
{
	return fsync_path(path, O_DIRECTORY);
}
