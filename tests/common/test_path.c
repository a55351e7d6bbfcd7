/*
 * path_mkdirs and path_name_valid: parents are created, existing directories are fine, a file
 * in the way is an error; names are one safe path component or nothing.
 */
#include "common/path.h"
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_PATH_MAX 512
#define TEST_DIR_MODE 0700
#define TEST_FILE_MODE_MASK 0777

static char temp_dir[] = "/tmp/voidbox-path-test-XXXXXX";

static void test_mkdirs(void)
{
	char deep[TEST_PATH_MAX], file[TEST_PATH_MAX], under_file[TEST_PATH_MAX];
	struct stat st;
	FILE *f;

	snprintf(deep, sizeof(deep), "%s/a/b/c", temp_dir);
	CHECK_INT_EQ(path_mkdirs(deep, TEST_DIR_MODE), 0);
	CHECK_INT_EQ(stat(deep, &st), 0);
	CHECK(S_ISDIR(st.st_mode));
	CHECK_INT_EQ(st.st_mode & TEST_FILE_MODE_MASK, TEST_DIR_MODE);
	CHECK_INT_EQ(path_mkdirs(deep, TEST_DIR_MODE), 0); /* already there */
	snprintf(file, sizeof(file), "%s/a/file", temp_dir);
	f = fopen(file, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	snprintf(under_file, sizeof(under_file), "%s/a/file/d", temp_dir);
	CHECK_INT_EQ(path_mkdirs(under_file, TEST_DIR_MODE), -ENOTDIR);
	CHECK_INT_EQ(path_mkdirs("", TEST_DIR_MODE), -ENAMETOOLONG);
	unlink(file);
	rmdir(deep);
	snprintf(deep, sizeof(deep), "%s/a/b", temp_dir);
	rmdir(deep);
	snprintf(deep, sizeof(deep), "%s/a", temp_dir);
	rmdir(deep);
}

static void test_name_valid(void)
{
	CHECK(path_name_valid("run-1.a_b", 16));
	CHECK(path_name_valid("abcd", 4));
	CHECK(!path_name_valid("abcde", 4));
	CHECK(!path_name_valid("", 4));
	CHECK(!path_name_valid(NULL, 4));
	CHECK(!path_name_valid(".", 4));
	CHECK(!path_name_valid("..", 4));
	CHECK(!path_name_valid(".hidden", 16));
	CHECK(!path_name_valid("a/b", 16));
	CHECK(!path_name_valid("a b", 16));
	CHECK(!path_name_valid("caf\xc3\xa9", 16));
}

int main(void)
{
	if (!mkdtemp(temp_dir))
		harness_fail_setup("cannot create a temporary directory");
	RUN_TEST(test_mkdirs);
	RUN_TEST(test_name_valid);
	rmdir(temp_dir);
	return harness_finish();
}
