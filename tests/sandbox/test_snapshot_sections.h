/*
 * Snapshots written as a VMM process would write them, with device sections that name host
 * paths (a disk's, a share's), for the tests of what confines or checks a restore: the jail's
 * plan (test_vmm_jail) and the grants a fork's snapshot is checked against (test_host_grants).
 * Only the heads of the sections are written: what vm_snapshot_host_paths reads.
 */
#ifndef VOIDBOX_TESTS_SANDBOX_TEST_SNAPSHOT_SECTIONS_H
#define VOIDBOX_TESTS_SANDBOX_TEST_SNAPSHOT_SECTIONS_H

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byte_buffer.h"
#include "devices/fuse_server.h"
#include "harness.h"
#include "vmm/snapshot_file.h"

#define SECTIONS_SNAPSHOT_MEMORY_MB 64
#define SECTIONS_MIB (1024 * 1024)
#define SECTIONS_DIR_MODE 0755
#define SECTIONS_FILE_MODE 0644
#define SECTIONS_ERR_MAX 512

/* A device section the test adds to a snapshot: its kind and its bytes. */
struct test_section {
	const char *device;
	struct byte_writer bytes;
};

/* The head of a disk's section, as src/devices/blk.c writes it (the rest is not read). */
static void disk_section(struct test_section *section, const char *path, bool read_only)
{
	section->device = "blk";
	byte_writer_init(&section->bytes);
	byte_writer_u8(&section->bytes, read_only);
	byte_writer_string(&section->bytes, path);
	byte_writer_u64(&section->bytes, 0); /* size */
	byte_writer_u64(&section->bytes, 0); /* inode */
	byte_writer_u64(&section->bytes, 0); /* mtime */
	byte_writer_u32(&section->bytes, 0);
}

/* The head of a share's section, as src/devices/fs.c writes it. */
static void share_section(struct test_section *section, const char *tag, const char *dir,
			  bool read_only)
{
	section->device = "fs";
	byte_writer_init(&section->bytes);
	byte_writer_string(&section->bytes, tag);
	byte_writer_string(&section->bytes, dir);
	byte_writer_u8(&section->bytes, read_only ? FUSE_SERVER_READ_ONLY : FUSE_SERVER_READ_WRITE);
}

/*
 * A base (memory_mb of sparse memory) or a diff of parent in dir, as the VMM would write,
 * with the extra device sections given.
 */
static void write_test_snapshot(const char *dir, const char *parent, uint64_t parent_id,
				const struct test_section *extra, size_t extra_count, uint64_t *id)
{
	static struct snapshot_image image;
	bool diff = parent != NULL;
	struct snapshot_diff_header header = { .magic = SNAPSHOT_DIFF_MAGIC };
	char path[PATH_MAX + sizeof(VM_SNAPSHOT_MEMORY_FILE) + 1], err[SECTIONS_ERR_MAX];
	int fd;

	memset(&image, 0, sizeof(image));
	image.meta.type = diff ? VM_SNAPSHOT_DIFF : VM_SNAPSHOT_BASE;
	image.meta.memory_mb = SECTIONS_SNAPSHOT_MEMORY_MB;
	image.meta.vcpus = 1;
	image.meta.memory_bytes = diff ? sizeof(header)
				       : (uint64_t)SECTIONS_SNAPSHOT_MEMORY_MB * SECTIONS_MIB;
	if (diff) {
		snprintf(image.meta.parent_dir, sizeof(image.meta.parent_dir), "%s", parent);
		image.meta.parent_id = parent_id;
	}
	snapshot_cpu_signature(image.meta.cpu_signature);
	CHECK_INT_EQ(snapshot_image_add_device(&image, "serial", 1, NULL, 0), 0);
	for (size_t i = 0; i < extra_count; i++)
		CHECK_INT_EQ(snapshot_image_add_device(&image, extra[i].device, 1,
						       extra[i].bytes.data, extra[i].bytes.len),
			     0);
	for (unsigned int i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++)
		image.irqchips[i].chip_id = i;
	CHECK_INT_EQ(mkdir(dir, SECTIONS_DIR_MODE), 0);
	CHECK_INT_EQ(snapshot_file_write(dir, &image, id, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, diff ? VM_SNAPSHOT_DIFF_FILE
						      : VM_SNAPSHOT_MEMORY_FILE);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, SECTIONS_FILE_MODE);
	CHECK(fd >= 0);
	if (diff)
		CHECK_INT_EQ(write(fd, &header, sizeof(header)), (long)sizeof(header));
	else
		CHECK_INT_EQ(ftruncate(fd, (off_t)image.meta.memory_bytes), 0);
	close(fd);
	snapshot_image_release(&image);
}

#endif
