/* The whole-transfer loops of fd_io.h. */
#include "common/fd_io.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int fd_write_full(int fd, const void *data, size_t len)
{
	const uint8_t *bytes = data;

	while (len > 0) {
		ssize_t n = write(fd, bytes, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		bytes += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t fd_read_full(int fd, void *data, size_t len)
{
	uint8_t *bytes = data;
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, bytes + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int fd_pwrite_full(int fd, const void *data, size_t len, uint64_t offset)
{
	const uint8_t *bytes = data;

	while (len > 0) {
		ssize_t n = pwrite(fd, bytes, len, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		bytes += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

int fd_pread_full(int fd, void *data, size_t len, uint64_t offset)
{
	uint8_t *bytes = data;

	while (len > 0) {
		ssize_t n = pread(fd, bytes, len, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EBADMSG;
		bytes += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}
