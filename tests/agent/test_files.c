/*
 * The path guard against a real temp tree laid out like the guest (DIR/workspace, DIR/home,
 * DIR/etc/voidbox, DIR/etc/passwd outside the roots): lexical ".." escapes, planted symlinks
 * (directory and leaf), hard links, the longest-root rule and FileStat confinement.
 */
#include "files.h"
#include "sandbox_user.h"

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char tree[] = "/tmp/voidbox-files-XXXXXX";
static struct files_roots roots;

static void make_dir(const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s%s", tree, rel);
	CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static void make_file(const char *rel, const char *text)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s%s", tree, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

static char *read_tree_file(const char *rel)
{
	static char buf[256];
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s%s", tree, rel);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n < 0 ? 0 : n] = '\0';
	return buf;
}

static void setup_tree(void)
{
	char target[PATH_MAX], link_path[PATH_MAX];

	CHECK(mkdtemp(tree) != NULL);
	roots.prefix = tree;
	roots.chown_to_sandbox = false;
	make_dir("/workspace");
	make_dir("/home");
	make_dir("/home/sandbox");
	make_dir("/etc");
	make_dir("/etc/voidbox");
	make_file("/etc/passwd", "root:x:0:0\n");
	make_file("/workspace/hello.txt", "hello\n");
	snprintf(target, sizeof(target), "%s/etc", tree);
	snprintf(link_path, sizeof(link_path), "%s/workspace/evil", tree);
	CHECK(symlink(target, link_path) == 0);
	snprintf(target, sizeof(target), "%s/etc/passwd", tree);
	snprintf(link_path, sizeof(link_path), "%s/workspace/passwd-link", tree);
	CHECK(symlink(target, link_path) == 0);
	snprintf(link_path, sizeof(link_path), "%s/workspace/passwd-hard", tree);
	CHECK(link(target, link_path) == 0);
}

static void test_normalize(void)
{
	char out[PATH_MAX];

	CHECK_INT_EQ(files_normalize("/workspace/./a//b/", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/workspace/a/b");
	CHECK_INT_EQ(files_normalize("/workspace/a/../../etc/passwd", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/etc/passwd");
	CHECK_INT_EQ(files_normalize("/../../..", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/");
	CHECK_INT_EQ(files_normalize("/a/b/../..", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/");
	CHECK_INT_EQ(files_normalize("workspace/x", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(files_normalize("", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(files_normalize("/workspace/abcdef", out, 8), -ENAMETOOLONG);
}

static void test_match_root(void)
{
	const char *rest;

	CHECK_STR_EQ(files_match_root("/workspace/a/b", &rest), "/workspace");
	CHECK_STR_EQ(rest, "a/b");
	CHECK_STR_EQ(files_match_root("/workspace", &rest), "/workspace");
	CHECK_STR_EQ(rest, ".");
	CHECK_STR_EQ(files_match_root("/etc/voidbox/x.json", &rest), "/etc/voidbox");
	CHECK_STR_EQ(files_match_root("/home/sandbox/.bashrc", &rest), "/home");
	CHECK(files_match_root("/workspacex/a", &rest) == NULL);
	CHECK(files_match_root("/etc/passwd", &rest) == NULL);
	CHECK(files_match_root("/", &rest) == NULL);
}

static void test_write_and_read(void)
{
	uint8_t *data = NULL;
	size_t len = 0;
	char *error = NULL;

	CHECK_INT_EQ(files_write(&roots, "/workspace/new/dir/file.txt", (const uint8_t *)"abc", 3,
				 true, &error), 0);
	CHECK(error == NULL);
	CHECK_STR_EQ(read_tree_file("/workspace/new/dir/file.txt"), "abc");
	CHECK_INT_EQ(files_read(&roots, "/workspace/new/dir/file.txt", &data, &len, &error), 0);
	CHECK_INT_EQ(len, 3);
	CHECK(data && memcmp(data, "abc", 3) == 0);
	free(data);
	/* Overwrite shorter: old content must be gone. */
	CHECK_INT_EQ(files_write(&roots, "/workspace/hello.txt", (const uint8_t *)"yo", 2, false,
				 &error), 0);
	CHECK_STR_EQ(read_tree_file("/workspace/hello.txt"), "yo");
	/* Without create_parents a missing parent fails. */
	CHECK(files_write(&roots, "/workspace/missing/x", (const uint8_t *)"a", 1, false,
			  &error) < 0);
	CHECK(error != NULL);
	free(error);
}

static void test_dotdot_escape_refused(void)
{
	char *error = NULL;
	uint8_t *data = NULL;
	size_t len;

	CHECK(files_write(&roots, "/workspace/../etc/passwd", (const uint8_t *)"pwned", 5, true,
			  &error) < 0);
	CHECK(error && strstr(error, "Refusing write outside allowed roots") != NULL);
	free(error);
	CHECK_STR_EQ(read_tree_file("/etc/passwd"), "root:x:0:0\n");
	CHECK(files_read(&roots, "/workspace/../../etc/passwd", &data, &len, &error) < 0);
	CHECK(error && strstr(error, "Refusing read outside allowed roots") != NULL);
	free(error);
	CHECK(files_mkdir_p(&roots, "/tmp/x", &error) < 0);
	CHECK(error && strstr(error, "Refusing mkdir") != NULL);
	free(error);
}

static void test_symlinks_refused(void)
{
	char *error = NULL;
	uint8_t *data = NULL;
	size_t len;
	bool exists;
	uint64_t size;

	CHECK(files_write(&roots, "/workspace/evil/passwd", (const uint8_t *)"x", 1, true,
			  &error) < 0);
	CHECK(error && strstr(error, "symbolic link") != NULL);
	free(error);
	CHECK(files_write(&roots, "/workspace/passwd-link", (const uint8_t *)"x", 1, true,
			  &error) < 0);
	CHECK(error && strstr(error, "symbolic link") != NULL);
	free(error);
	CHECK(files_write(&roots, "/workspace/evil/new/file", (const uint8_t *)"x", 1, true,
			  &error) < 0);
	free(error);
	CHECK(files_read(&roots, "/workspace/passwd-link", &data, &len, &error) < 0);
	CHECK(error && strstr(error, "symbolic link") != NULL);
	free(error);
	CHECK(files_mkdir_p(&roots, "/workspace/evil/sub", &error) < 0);
	free(error);
	CHECK(files_stat(&roots, "/workspace/evil/passwd", &exists, &size, &error) < 0);
	CHECK(!exists);
	free(error);
	CHECK_STR_EQ(read_tree_file("/etc/passwd"), "root:x:0:0\n");
	{
		struct stat st;
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/etc/new", tree);
		CHECK(stat(path, &st) < 0);
	}
}

static void test_hard_link_refused(void)
{
	char *error = NULL;

	CHECK(files_write(&roots, "/workspace/passwd-hard", (const uint8_t *)"x", 1, false,
			  &error) < 0);
	CHECK(error && strstr(error, "hard links") != NULL);
	free(error);
	CHECK_STR_EQ(read_tree_file("/etc/passwd"), "root:x:0:0\n");
}

static void test_mkdir_and_stat(void)
{
	char *error = NULL;
	bool exists = true;
	uint64_t size = 7;

	CHECK_INT_EQ(files_mkdir_p(&roots, "/home/sandbox/a/b/c", &error), 0);
	CHECK_INT_EQ(files_mkdir_p(&roots, "/home/sandbox/a/b/c", &error), 0);
	CHECK_INT_EQ(files_stat(&roots, "/home/sandbox/a/b/c", &exists, &size, &error), 0);
	CHECK(exists);
	CHECK_INT_EQ(files_stat(&roots, "/workspace/hello.txt", &exists, &size, &error), 0);
	CHECK(exists);
	CHECK_INT_EQ(size, 2);
	CHECK_INT_EQ(files_stat(&roots, "/workspace/nope", &exists, &size, &error), 0);
	CHECK(!exists);
	CHECK(error == NULL);
	CHECK(files_stat(&roots, "/etc/passwd", &exists, &size, &error) < 0);
	CHECK(!exists);
	CHECK(error && strstr(error, "Refusing stat outside allowed roots") != NULL);
	free(error);
	error = NULL;
	CHECK(files_mkdir_p(&roots, "/workspace/hello.txt/sub", &error) < 0);
	free(error);
}

static void test_longest_root_and_hosts(void)
{
	char *error = NULL;

	CHECK_INT_EQ(files_write(&roots, "/etc/voidbox/hosts", (const uint8_t *)"1.2.3.4 x\n", 10,
				 true, &error), 0);
	CHECK_STR_EQ(read_tree_file("/etc/hosts"), "1.2.3.4 x\n");
	CHECK(files_write(&roots, "/workspace", (const uint8_t *)"x", 1, true, &error) < 0);
	free(error);
}

/* The exec policy is never a file: writing where it used to live is refused. */
static void test_retired_policy_files_refused(void)
{
	char *error = NULL;

	CHECK_INT_EQ(files_write(&roots, "/etc/voidbox/allowed_commands.json",
				 (const uint8_t *)"[]", 2, true, &error), -EPERM);
	CHECK(error && strstr(error, "SetPolicy") != NULL);
	free(error);
	error = NULL;
	CHECK_INT_EQ(files_write(&roots, "/etc/voidbox/../voidbox/resource_limits.json",
				 (const uint8_t *)"{}", 2, true, &error), -EPERM);
	free(error);
	CHECK(read_tree_file("/etc/voidbox/allowed_commands.json") == NULL);
}

static uid_t owner_of(const char *guest_path)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s%s", tree, guest_path);
	return stat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
}

/*
 * A root agent gives what it creates in the sandbox's places to uid 1000, but what it creates
 * in /etc/voidbox stays root's, so the sandbox user can read it and never change it.
 */
static void test_etc_voidbox_stays_root_owned(void)
{
	char *error = NULL;

	if (geteuid() != 0) {
		fprintf(stderr, "  (not root: ownership not exercised)\n");
		return;
	}
	roots.chown_to_sandbox = true;
	CHECK_INT_EQ(files_write(&roots, "/etc/voidbox/sub/hosts-extra", (const uint8_t *)"x", 1,
				 true, &error), 0);
	CHECK_INT_EQ(owner_of("/etc/voidbox/sub"), 0);
	CHECK_INT_EQ(owner_of("/etc/voidbox/sub/hosts-extra"), 0);
	CHECK_INT_EQ(files_mkdir_p(&roots, "/etc/voidbox/dir", &error), 0);
	CHECK_INT_EQ(owner_of("/etc/voidbox/dir"), 0);
	CHECK_INT_EQ(files_write(&roots, "/workspace/mine/file", (const uint8_t *)"x", 1, true,
				 &error), 0);
	CHECK_INT_EQ(owner_of("/workspace/mine"), AGENT_SANDBOX_UID);
	CHECK_INT_EQ(owner_of("/workspace/mine/file"), AGENT_SANDBOX_UID);
	roots.chown_to_sandbox = false;
}

int main(void)
{
	char cmd[PATH_MAX + 16];

	setup_tree();
	RUN_TEST(test_normalize);
	RUN_TEST(test_match_root);
	RUN_TEST(test_write_and_read);
	RUN_TEST(test_dotdot_escape_refused);
	RUN_TEST(test_symlinks_refused);
	RUN_TEST(test_hard_link_refused);
	RUN_TEST(test_mkdir_and_stat);
	RUN_TEST(test_longest_root_and_hosts);
	RUN_TEST(test_retired_policy_files_refused);
	RUN_TEST(test_etc_voidbox_stays_root_owned);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tree);
	return harness_finish();
}
