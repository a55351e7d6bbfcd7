/*
 * The OCI blob cache: digests are checked for form (only canonical sha256, so no digest can
 * name a path outside the cache), a blob whose bytes match its digest is published under it,
 * a tampered blob is refused with an error naming both digests and leaves nothing in the
 * cache (no blob, no temporary file), and a cached file is verified again on demand.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dir_entries.h"
#include "harness.h"
#include "store/oci_blobs.h"
#include "store/store_fs.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 1024
#define TEST_SCRATCH_MAX 64
/* sha256 of "hello\n" */
#define TEST_BLOB "hello\n"
#define TEST_BLOB_DIGEST "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
#define TEST_TAMPERED "hellO\n"
#define TEST_UPPERCASE \
	"sha256:5891B5B522D5DF086D0FF0B110FBD9D21BB4FC7163AF34D08286A2E846F6BE03"
#define TEST_OTHER_ALGORITHM \
	"sha512:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
#define TEST_TRAVERSAL "sha256:../../../../../../etc/passwd/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static char scratch[TEST_SCRATCH_MAX];

static void make_scratch(void)
{
	snprintf(scratch, sizeof(scratch), "/tmp/voidbox-test-blobs-XXXXXX");
	if (!mkdtemp(scratch))
		abort();
}

/* Entries in the cache's blob directory, not counting . and .. (-1 if it is missing). */
static int blob_dir_entries(void)
{
	char dir_path[TEST_PATH_MAX];

	snprintf(dir_path, sizeof(dir_path), "%s/blobs/sha256", scratch);
	return dir_entry_count(dir_path);
}

static void test_digest_forms(void)
{
	char path[TEST_PATH_MAX];

	CHECK_INT_EQ(oci_digest_check(TEST_BLOB_DIGEST), 0);
	CHECK_INT_EQ(oci_digest_check(TEST_UPPERCASE), -EINVAL);
	CHECK_INT_EQ(oci_digest_check("sha256:5891b5"), -EINVAL);
	CHECK_INT_EQ(oci_digest_check(TEST_OTHER_ALGORITHM), -EINVAL);
	CHECK_INT_EQ(oci_digest_check(TEST_TRAVERSAL), -EINVAL);
	CHECK_INT_EQ(oci_digest_check(NULL), -EINVAL);
	CHECK_INT_EQ(oci_blob_path("/cache", TEST_BLOB_DIGEST, path, sizeof(path)), 0);
	CHECK_STR_EQ(path, "/cache/blobs/sha256/"
			   "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
	CHECK_INT_EQ(oci_blob_path("/cache", "sha256:x", path, sizeof(path)), -EINVAL);
}

static void test_good_blob_cached(void)
{
	struct oci_blob_writer *writer = NULL;
	char err[TEST_ERR_MAX] = "", path[TEST_PATH_MAX];

	make_scratch();
	CHECK_INT_EQ(oci_blob_writer_open(scratch, TEST_BLOB_DIGEST, &writer, err, sizeof(err)), 0);
	CHECK_INT_EQ(oci_blob_writer_write(writer, "hel", 3), 0);
	CHECK_INT_EQ(oci_blob_writer_write(writer, "lo\n", 3), 0);
	CHECK_INT_EQ(oci_blob_writer_commit(writer, err, sizeof(err)), 0);
	CHECK_INT_EQ(blob_dir_entries(), 1);
	CHECK_INT_EQ(oci_blob_path(scratch, TEST_BLOB_DIGEST, path, sizeof(path)), 0);
	CHECK_INT_EQ(oci_blob_verify_file(path, TEST_BLOB_DIGEST, err, sizeof(err)), 0);
	store_remove_tree(scratch);
}

static void test_tampered_blob_refused(void)
{
	struct oci_blob_writer *writer = NULL;
	char err[TEST_ERR_MAX] = "", path[TEST_PATH_MAX];
	int fd;

	make_scratch();
	CHECK_INT_EQ(oci_blob_writer_open(scratch, TEST_BLOB_DIGEST, &writer, err, sizeof(err)), 0);
	CHECK_INT_EQ(oci_blob_writer_write(writer, TEST_TAMPERED, strlen(TEST_TAMPERED)), 0);
	CHECK_INT_EQ(oci_blob_writer_commit(writer, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "digest") != NULL);
	CHECK(strstr(err, TEST_BLOB_DIGEST) != NULL);
	CHECK_INT_EQ(blob_dir_entries(), 0);

	/* an aborted blob leaves nothing either */
	CHECK_INT_EQ(oci_blob_writer_open(scratch, TEST_BLOB_DIGEST, &writer, err, sizeof(err)), 0);
	CHECK_INT_EQ(oci_blob_writer_write(writer, "he", 2), 0);
	oci_blob_writer_abort(writer);
	CHECK_INT_EQ(blob_dir_entries(), 0);

	/* a cached file changed afterwards fails its check */
	CHECK_INT_EQ(oci_blob_path(scratch, TEST_BLOB_DIGEST, path, sizeof(path)), 0);
	fd = open(path, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0 && write(fd, TEST_TAMPERED, strlen(TEST_TAMPERED)) ==
			       (ssize_t)strlen(TEST_TAMPERED));
	close(fd);
	CHECK_INT_EQ(oci_blob_verify_file(path, TEST_BLOB_DIGEST, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, path) != NULL);

	/* a malformed digest never opens a writer */
	CHECK(oci_blob_writer_open(scratch, "sha256:../x", &writer, err, sizeof(err)) < 0);
	CHECK(writer == NULL);
	store_remove_tree(scratch);
}

int main(void)
{
	RUN_TEST(test_digest_forms);
	RUN_TEST(test_good_blob_cached);
	RUN_TEST(test_tampered_blob_refused);
	return harness_finish();
}
