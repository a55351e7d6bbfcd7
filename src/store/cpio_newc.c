/*
 * newc cpio writer. Each entry is a 110-byte ASCII header (magic "070701" and thirteen
 * 8-digit hex fields), the NUL-terminated name, padding to 4 bytes, the data, padding to 4
 * bytes. Headers are formatted into a fixed buffer; file data is streamed in chunks so large
 * binaries never sit in memory whole.
 */
#include "store/cpio_newc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CPIO_NEWC_MAGIC "070701"
#define CPIO_NEWC_HEADER_SIZE 110
#define CPIO_NEWC_ALIGN 4
#define CPIO_ARCHIVE_BLOCK 512
#define CPIO_TRAILER_NAME "TRAILER!!!"
#define CPIO_COPY_CHUNK 65536
#define CPIO_MAX_FIELD 0xffffffffu

struct cpio_entry_header {
	const char *name;
	uint32_t mode;
	uint32_t nlink;
	uint64_t file_size;
	unsigned int rdev_major;
	unsigned int rdev_minor;
};

void cpio_writer_init(struct cpio_writer *writer, cpio_sink_write_fn write, void *ctx,
		      uint32_t mtime)
{
	memset(writer, 0, sizeof(*writer));
	writer->write = write;
	writer->ctx = ctx;
	writer->next_inode = 1;
	writer->mtime = mtime;
}

static int cpio_emit(struct cpio_writer *writer, const void *data, size_t len)
{
	int rc = writer->write(writer->ctx, data, len);

	if (rc < 0)
		return rc;
	writer->offset += len;
	return 0;
}

static int cpio_pad_to(struct cpio_writer *writer, uint64_t alignment)
{
	static const char zeros[CPIO_ARCHIVE_BLOCK];
	size_t pad = (size_t)((alignment - writer->offset % alignment) % alignment);

	return pad ? cpio_emit(writer, zeros, pad) : 0;
}

static int cpio_emit_header(struct cpio_writer *writer, const struct cpio_entry_header *entry,
			    bool is_trailer)
{
	char header[CPIO_NEWC_HEADER_SIZE + 1];
	size_t name_size = strlen(entry->name) + 1;
	uint32_t inode = is_trailer ? 0 : writer->next_inode;
	int rc;

	if (entry->file_size > CPIO_MAX_FIELD || name_size > CPIO_MAX_FIELD)
		return -EFBIG;
	snprintf(header, sizeof(header),
		 "%s%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", CPIO_NEWC_MAGIC,
		 inode, entry->mode, 0u, 0u, entry->nlink, is_trailer ? 0u : writer->mtime,
		 (uint32_t)entry->file_size, 0u, 0u, entry->rdev_major, entry->rdev_minor,
		 (uint32_t)name_size, 0u);
	rc = cpio_emit(writer, header, CPIO_NEWC_HEADER_SIZE);
	if (rc == 0)
		rc = cpio_emit(writer, entry->name, name_size);
	if (rc == 0)
		rc = cpio_pad_to(writer, CPIO_NEWC_ALIGN);
	if (rc == 0 && !is_trailer) {
		writer->next_inode++;
		writer->entries++;
	}
	return rc;
}

static int cpio_check_path(const char *path)
{
	if (!path || !*path || path[0] == '/')
		return -EINVAL;
	return 0;
}

int cpio_writer_add_directory(struct cpio_writer *writer, const char *path, mode_t mode)
{
	struct cpio_entry_header entry = {
		.name = path, .mode = S_IFDIR | (mode & 07777), .nlink = 2,
	};

	if (cpio_check_path(path))
		return -EINVAL;
	return cpio_emit_header(writer, &entry, false);
}

int cpio_writer_add_file(struct cpio_writer *writer, const char *path, mode_t mode,
			 const void *data, size_t len)
{
	struct cpio_entry_header entry = {
		.name = path, .mode = S_IFREG | (mode & 07777), .nlink = 1, .file_size = len,
	};
	int rc;

	if (cpio_check_path(path))
		return -EINVAL;
	rc = cpio_emit_header(writer, &entry, false);
	if (rc == 0 && len)
		rc = cpio_emit(writer, data, len);
	if (rc == 0)
		rc = cpio_pad_to(writer, CPIO_NEWC_ALIGN);
	return rc;
}

static int cpio_copy_fd(struct cpio_writer *writer, int fd, uint64_t expected)
{
	char chunk[CPIO_COPY_CHUNK];
	uint64_t copied = 0;

	while (copied < expected) {
		ssize_t got = read(fd, chunk, sizeof(chunk));
		int rc;

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -EIO; /* the file shrank while being archived */
		if ((uint64_t)got > expected - copied)
			got = (ssize_t)(expected - copied);
		rc = cpio_emit(writer, chunk, (size_t)got);
		if (rc < 0)
			return rc;
		copied += (uint64_t)got;
	}
	return 0;
}

int cpio_writer_add_file_from_path(struct cpio_writer *writer, const char *path, mode_t mode,
				   const char *host_path)
{
	struct cpio_entry_header entry = {
		.name = path, .mode = S_IFREG | (mode & 07777), .nlink = 1,
	};
	struct stat st;
	int fd, rc;

	if (cpio_check_path(path))
		return -EINVAL;
	fd = open(host_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto out;
	}
	entry.file_size = (uint64_t)st.st_size;
	rc = cpio_emit_header(writer, &entry, false);
	if (rc == 0)
		rc = cpio_copy_fd(writer, fd, entry.file_size);
	if (rc == 0)
		rc = cpio_pad_to(writer, CPIO_NEWC_ALIGN);
out:
	close(fd);
	return rc;
}

int cpio_writer_add_symlink(struct cpio_writer *writer, const char *path, const char *target)
{
	size_t len = target ? strlen(target) : 0;
	struct cpio_entry_header entry = {
		.name = path, .mode = S_IFLNK | 0777, .nlink = 1, .file_size = len,
	};
	int rc;

	if (cpio_check_path(path) || len == 0)
		return -EINVAL;
	rc = cpio_emit_header(writer, &entry, false);
	if (rc == 0)
		rc = cpio_emit(writer, target, len);
	if (rc == 0)
		rc = cpio_pad_to(writer, CPIO_NEWC_ALIGN);
	return rc;
}

int cpio_writer_add_char_device(struct cpio_writer *writer, const char *path, mode_t mode,
				unsigned int major, unsigned int minor)
{
	struct cpio_entry_header entry = {
		.name = path, .mode = S_IFCHR | (mode & 07777), .nlink = 1,
		.rdev_major = major, .rdev_minor = minor,
	};

	if (cpio_check_path(path))
		return -EINVAL;
	return cpio_emit_header(writer, &entry, false);
}

int cpio_writer_finish(struct cpio_writer *writer)
{
	struct cpio_entry_header trailer = { .name = CPIO_TRAILER_NAME, .nlink = 1 };
	int rc = cpio_emit_header(writer, &trailer, true);

	return rc ? rc : cpio_pad_to(writer, CPIO_ARCHIVE_BLOCK);
}
