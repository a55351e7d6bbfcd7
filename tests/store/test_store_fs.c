/*
 * store_fs: the tree removal and the no-replace rename both stores publish with. The rename's
 * EINVAL fallback (filesystems without RENAME_NOREPLACE) answers the same way, so what is
 * checked here holds for it too: a new name is taken, a populated one is refused as -EEXIST.
 * The removal also takes trees whose directories their owner may not write or read (an image
 * layer's 0555 /usr/bin, a 0000 directory nested in another), as an unpacked image leaves.
 */
#include "store/store_fs.h"
#include "harness.h"

#include <errno.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The capabilities that let root ignore a directory's permissions. */
#define TEST_DAC_CAPS ((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH))

static char root[] = "/tmp/voidbox-store-fs-XXXXXX";

static void make_dir_with_file(const char *dir, const char *content)
{
	char file[PATH_MAX + 8];
	FILE *f;

	CHECK_INT_EQ(mkdir(dir, 0700), 0);
	snprintf(file, sizeof(file), "%s/state", dir);
	f = fopen(file, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(content, f);
		fclose(f);
	}
}

static void test_rename_noreplace(void)
{
	char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], file[PATH_MAX + 8];

	snprintf(a, sizeof(a), "%s/a", root);
	snprintf(b, sizeof(b), "%s/b", root);
	snprintf(c, sizeof(c), "%s/c", root);
	make_dir_with_file(a, "first");
	CHECK_INT_EQ(store_rename_noreplace(a, b), 0);
	CHECK(access(a, F_OK) != 0);
	make_dir_with_file(a, "second");
	/* b is published and populated: it stays, and so does a */
	CHECK_INT_EQ(store_rename_noreplace(a, b), -EEXIST);
	snprintf(file, sizeof(file), "%s/state", a);
	CHECK(access(file, F_OK) == 0);
	CHECK_INT_EQ(store_rename_noreplace(c, b), -ENOENT);
}

static void test_remove_tree(void)
{
	char dir[PATH_MAX], sub[PATH_MAX + 8];

	snprintf(dir, sizeof(dir), "%s/tree", root);
	make_dir_with_file(dir, "x");
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	make_dir_with_file(sub, "y");
	CHECK_INT_EQ(store_remove_tree(dir), 0);
	CHECK(access(dir, F_OK) != 0);
	/* an absent tree is already removed */
	CHECK_INT_EQ(store_remove_tree(dir), 0);
}

/*
 * Makes permissions bind root too (the tests run as root in CI) by taking the override
 * capabilities out of, or back into, the effective set; true when the set changed.
 */
static bool set_dac_override(bool on)
{
	struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &header, data) < 0)
		return false;
	if (on)
		data[0].effective |= data[0].permitted & TEST_DAC_CAPS;
	else
		data[0].effective &= ~TEST_DAC_CAPS;
	return syscall(SYS_capset, &header, data) == 0;
}

/* Directories without write or read permission (nested, the outer one too) still go. */
static void test_remove_tree_without_permissions(void)
{
	char dir[PATH_MAX], locked[PATH_MAX + 8], sealed[PATH_MAX + 16];

	snprintf(dir, sizeof(dir), "%s/read-only", root);
	snprintf(locked, sizeof(locked), "%s/locked", dir);
	snprintf(sealed, sizeof(sealed), "%s/sealed", locked);
	make_dir_with_file(dir, "x");
	make_dir_with_file(locked, "y");
	make_dir_with_file(sealed, "z");
	CHECK_INT_EQ(chmod(sealed, 0), 0);
	CHECK_INT_EQ(chmod(locked, 0), 0);
	CHECK_INT_EQ(chmod(dir, S_IRUSR | S_IXUSR), 0);
	CHECK(set_dac_override(false));
	CHECK_INT_EQ(store_remove_tree(dir), 0);
	CHECK(access(dir, F_OK) != 0);
	CHECK(set_dac_override(true));
}

/* The whole scratch tree the tests above left behind goes too, files and subdirectories. */
/* A file's digest under a named algorithm; an unknown name and a missing file are errors. */
static void test_file_digest(void)
{
	/* sha256 of "hello\n" */
	static const unsigned char hello_sha256[] = {
		0x58, 0x91, 0xb5, 0xb5, 0x22, 0xd5, 0xdf, 0x08, 0x6d, 0x0f, 0xf0, 0xb1, 0x10, 0xfb,
		0xd9, 0xd2, 0x1b, 0xb4, 0xfc, 0x71, 0x63, 0xaf, 0x34, 0xd0, 0x82, 0x86, 0xa2, 0xe8,
		0x46, 0xf6, 0xbe, 0x03,
	};
	unsigned char digest[64];
	unsigned int len = 0;
	char dir[PATH_MAX], file[PATH_MAX + 8];

	snprintf(dir, sizeof(dir), "%s/digest", root);
	make_dir_with_file(dir, "hello\n");
	snprintf(file, sizeof(file), "%s/state", dir);
	CHECK_INT_EQ(store_file_digest(file, "sha256", digest, &len), 0);
	CHECK_INT_EQ(len, sizeof(hello_sha256));
	CHECK(memcmp(digest, hello_sha256, sizeof(hello_sha256)) == 0);
	CHECK_INT_EQ(store_file_digest(file, "sha512", digest, &len), 0);
	CHECK_INT_EQ(len, 64);
	CHECK_INT_EQ(store_file_digest(file, "no-such-digest", digest, &len), -EINVAL);
	CHECK_INT_EQ(store_file_digest("/nonexistent/file", "sha256", digest, &len), -ENOENT);
}

static void test_remove_scratch_root(void)
{
	CHECK_INT_EQ(store_remove_tree(root), 0);
	CHECK(access(root, F_OK) != 0);
}

int main(void)
{
	if (!mkdtemp(root))
		harness_fail_setup("cannot create a temporary directory (mkdtemp)");
	RUN_TEST(test_rename_noreplace);
	RUN_TEST(test_remove_tree);
	RUN_TEST(test_remove_tree_without_permissions);
	RUN_TEST(test_file_digest);
	RUN_TEST(test_remove_scratch_root);
	return harness_finish();
}
