/*
 * Root filesystem trees as ext4 images: a small tree (a file, a directory, a short and a long
 * symlink) is measured, built into an image with mkfs.ext4, and read back out of the image
 * with e2fsprogs' debugfs (no mount, no root), without the features the guest cannot mount
 * as built (a journal, metadata checksums); a missing tree fails with a sentence naming
 * it and leaves no image behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "store/oci_rootfs.h"
#include "store/store_fs.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 1024
#define TEST_OUTPUT_MAX 4096
#define TEST_SCRATCH_MAX 64
#define TEST_DIR_MODE 0755
#define TEST_FILE_MODE 0644
#define TEST_OS_RELEASE "ID=voidbox-test\n"
#define TEST_LONG_TARGET "/a/symlink/target/longer/than/sixty/characters/so/it/needs/a/block"
#define TEST_DEBUGFS "/usr/sbin/debugfs"

static char scratch[TEST_SCRATCH_MAX];

static const char *path_in(const char *rel)
{
	static char path[TEST_PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", scratch, rel);
	return path;
}

static int write_file(const char *rel, const char *content)
{
	int fd = open(path_in(rel), O_WRONLY | O_CREAT | O_TRUNC, TEST_FILE_MODE);
	int rc = fd >= 0 && write(fd, content, strlen(content)) == (ssize_t)strlen(content) ? 0
													    : -1;

	if (fd >= 0)
		close(fd);
	return rc;
}

/* debugfs -R "REQUEST" IMAGE, its stdout into out. */
static int debugfs_request(const char *image, const char *request, char *out, size_t size)
{
	char cmd[TEST_PATH_MAX * 2];
	size_t got;
	FILE *pipe;

	snprintf(cmd, sizeof(cmd), "%s -R '%s' %s 2>/dev/null", TEST_DEBUGFS, request, image);
	pipe = popen(cmd, "r");
	if (!pipe)
		return -1;
	got = fread(out, 1, size - 1, pipe);
	out[got] = '\0';
	return pclose(pipe) == 0 ? 0 : -1;
}

static void test_tree_to_image(void)
{
	struct oci_rootfs_size size;
	char err[TEST_ERR_MAX] = "", out[TEST_OUTPUT_MAX], image[TEST_PATH_MAX];
	struct stat st;

	snprintf(scratch, sizeof(scratch), "/tmp/voidbox-test-rootfs-XXXXXX");
	CHECK(mkdtemp(scratch) != NULL);
	CHECK(mkdir(path_in("tree"), TEST_DIR_MODE) == 0);
	CHECK(mkdir(path_in("tree/etc"), TEST_DIR_MODE) == 0);
	CHECK_INT_EQ(write_file("tree/etc/os-release", TEST_OS_RELEASE), 0);
	CHECK(symlink("etc/os-release", path_in("tree/short-link")) == 0);
	CHECK(symlink(TEST_LONG_TARGET, path_in("tree/long-link")) == 0);

	CHECK_INT_EQ(oci_rootfs_measure(path_in("tree"), &size), 0);
	CHECK(size.inodes == 5); /* tree, etc, os-release, two links */
	/* two directories, one file, one long symlink: a block each */
	CHECK(size.data_bytes == 4 * 4096);

	snprintf(image, sizeof(image), "%s", path_in("root.ext4"));
	CHECK_INT_EQ(oci_rootfs_build_ext4(path_in("tree"), image, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "  %s\n", err);
	CHECK(stat(image, &st) == 0 && st.st_size > 0);
	CHECK_INT_EQ(debugfs_request(image, "cat /etc/os-release", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_OS_RELEASE);
	CHECK(access(path_in("root.ext4.tmp"), F_OK) != 0);
	/* the guest mounts it without a journal replay or the crc32c driver */
	CHECK_INT_EQ(debugfs_request(image, "features", out, sizeof(out)), 0);
	CHECK(strstr(out, "extent") != NULL);
	CHECK(strstr(out, "has_journal") == NULL);
	CHECK(strstr(out, "metadata_csum") == NULL);
	store_remove_tree(scratch);
}

static void test_missing_tree(void)
{
	char err[TEST_ERR_MAX] = "", image[TEST_PATH_MAX];

	snprintf(scratch, sizeof(scratch), "/tmp/voidbox-test-rootfs-XXXXXX");
	CHECK(mkdtemp(scratch) != NULL);
	snprintf(image, sizeof(image), "%s", path_in("root.ext4"));
	CHECK(oci_rootfs_build_ext4(path_in("no-such-tree"), image, err, sizeof(err)) < 0);
	CHECK(strstr(err, "no-such-tree") != NULL);
	CHECK(access(image, F_OK) != 0);
	store_remove_tree(scratch);
}

int main(void)
{
	RUN_TEST(test_tree_to_image);
	RUN_TEST(test_missing_tree);
	return harness_finish();
}
