/*
 * store_fs: the tree removal and the no-replace rename both stores publish with. The rename's
 * EINVAL fallback (filesystems without RENAME_NOREPLACE) answers the same way, so what is
 * checked here holds for it too: a new name is taken, a populated one is refused as -EEXIST.
 * The removal also takes trees whose directories their owner may not write or read (an image
 * layer's 0555 /usr/bin, a 0000 directory nested in another), as an unpacked image leaves.
 * A tool that fails on a full file system (a small tmpfs of the test's own) gets its error
 * completed with where space ran out and what to do.
 */
#include "store/store_fs.h"
#include "harness.h"
#include "small_tmpfs.h"

#include <errno.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The capabilities that let root ignore a directory's permissions. */
#define TEST_DAC_CAPS ((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH))
#define TEST_ERR_MAX 1024
#define TEST_FULL_NOT_RUN 77 /* the child could not make a small file system to fill */
/* A file bigger than the small tmpfs it is copied onto. */
#define TEST_BIG_FILE_BYTES (1u << 20)
#define TEST_SMALL_TMPFS "size=64k"
/* A tmpfs with room for bytes but for few files: the root directory and three more. */
#define TEST_FEW_INODES_TMPFS "size=128m,nr_inodes=4"
#define TEST_INODE_FILES_MAX 16

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

/*
 * In a child: `cp` of a file bigger than a small tmpfs fails, and the explanation says where
 * space ran out and what to do; a tmpfs with bytes to spare but no inode left is explained as
 * such. Returns the child's exit status.
 */
static int explain_on_full_tmpfs(const char *big_file)
{
	char full[PATH_MAX], few_inodes[PATH_MAX], file[PATH_MAX + 16], why[TEST_ERR_MAX];
	char err[TEST_ERR_MAX] = "";
	const char *cp[] = { "cp", big_file, full, NULL };
	int fd, open_errno = 0;

	snprintf(full, sizeof(full), "%s/full", root);
	snprintf(few_inodes, sizeof(few_inodes), "%s/few-inodes", root);
	if (small_tmpfs_mount(full, TEST_SMALL_TMPFS, why, sizeof(why)) < 0 ||
	    small_tmpfs_mount(few_inodes, TEST_FEW_INODES_TMPFS, why, sizeof(why)) < 0) {
		printf("  not run: %s\n", why);
		fflush(stdout); /* the child ends with _exit */
		return TEST_FULL_NOT_RUN;
	}
	CHECK(store_run_tool(cp, NULL, NULL, 0, err, sizeof(err)) < 0);
	CHECK(store_explain_low_space(full, err, sizeof(err)));
	fprintf(stderr, "  explained: %s\n", err);
	CHECK(strncmp(err, "`cp ", 4) == 0);
	CHECK(strstr(err, "failed (exit status 1): the file system holding ") != NULL);
	CHECK(strstr(err, full) != NULL);
	CHECK(strstr(err, "has only 0 MiB free: free space there, or set VOIDBOX_HOME") != NULL);

	for (int i = 0; i < TEST_INODE_FILES_MAX; i++) {
		snprintf(file, sizeof(file), "%s/file-%d", few_inodes, i);
		fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			open_errno = errno;
			break;
		}
		close(fd);
	}
	CHECK_INT_EQ(open_errno, ENOSPC);
	snprintf(err, sizeof(err), "`touch` failed (exit status 1)");
	CHECK(store_explain_low_space(few_inodes, err, sizeof(err)));
	fprintf(stderr, "  explained: %s\n", err);
	CHECK(strstr(err, "has no inode left: remove files there") != NULL);
	return harness_checks_failed_in_test == 0 ? 0 : 1;
}

/* Needs a mount namespace and a tmpfs of its own, so it is a meson test of its own. */
static void test_low_space_explained(void)
{
	char big_file[PATH_MAX], err[TEST_ERR_MAX];
	static char zeros[TEST_BIG_FILE_BYTES];
	struct statvfs fs;
	int status = -1;
	pid_t child;
	FILE *f;

	snprintf(big_file, sizeof(big_file), "%s/big", root);
	snprintf(err, sizeof(err), "%s/full", root);
	CHECK_INT_EQ(mkdir(err, 0700), 0);
	snprintf(err, sizeof(err), "%s/few-inodes", root);
	CHECK_INT_EQ(mkdir(err, 0700), 0);
	f = fopen(big_file, "w");
	CHECK(f != NULL);
	if (f) {
		CHECK_INT_EQ(fwrite(zeros, 1, sizeof(zeros), f), sizeof(zeros));
		fclose(f);
	}
	/* a file system with room: a failed tool keeps its own error, whatever it was */
	CHECK_INT_EQ(statvfs(root, &fs), 0);
	if ((unsigned long long)fs.f_bavail * fs.f_frsize > 2 * STORE_LOW_SPACE_BYTES) {
		snprintf(err, sizeof(err), "`tar -x` failed (exit status 2)");
		CHECK(!store_explain_low_space(root, err, sizeof(err)));
		CHECK_STR_EQ(err, "`tar -x` failed (exit status 2)");
	} else {
		fprintf(stderr, "  %s itself is nearly full: its no-explanation case not judged\n",
			root);
	}
	snprintf(err, sizeof(err), "`tar -x` failed (exit status 2)");
	CHECK(!store_explain_low_space("/nonexistent/dir", err, sizeof(err)));
	CHECK_STR_EQ(err, "`tar -x` failed (exit status 2)");

	fflush(NULL);
	child = fork();
	CHECK(child >= 0);
	if (child == 0)
		_exit(explain_on_full_tmpfs(big_file));
	CHECK_INT_EQ(waitpid(child, &status, 0), child);
	unlink(big_file);
	if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_FULL_NOT_RUN) {
		store_remove_tree(root);
		harness_skip_all("no mount namespace with a small tmpfs to fill (the line above "
				 "says why)");
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* run alone (--only), so the scratch root is this test's to remove */
	CHECK_INT_EQ(store_remove_tree(root), 0);
}

static void test_remove_scratch_root(void)
{
	CHECK_INT_EQ(store_remove_tree(root), 0);
	CHECK(access(root, F_OK) != 0);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (!mkdtemp(root))
		harness_fail_setup("cannot create a temporary directory (mkdtemp)");
	RUN_TEST(test_rename_noreplace);
	RUN_TEST(test_remove_tree);
	RUN_TEST(test_remove_tree_without_permissions);
	RUN_TEST(test_file_digest);
	RUN_SEPARATE_TEST(test_low_space_explained);
	RUN_TEST(test_remove_scratch_root);
	return harness_finish();
}
