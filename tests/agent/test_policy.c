/*
 * The in-memory exec policy: nothing runs before the host's SetPolicy, a policy is set once
 * per session, and commands are matched on the canonical path the agent execs. A bare entry
 * matches only in a root-owned system directory (so a same-named file in a writable place,
 * the way /workspace/x/sh would be, is refused); an absolute entry matches only itself.
 * Uses the host's own /usr/bin and a temporary directory standing in for /workspace.
 */
#include "policy.h"

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_EXEC_MODE 0755

static char writable_dir[] = "/tmp/voidbox-policy-XXXXXX";
static char usr_bin[PATH_MAX];
/* Room for usr_bin plus a command name. */
#define TEST_PATH_SIZE (PATH_MAX + NAME_MAX + 2)

/* The canonical path of a system command the way spawn resolves it. */
static void system_path(const char *name, char *out, size_t size)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "/usr/bin/%s", name);
	CHECK_INT_EQ(policy_canonical_path(path, NULL, out, size), 0);
}

static void set_policy(struct policy_store *store, bool allow_all, char *const *names,
		       size_t count, int expect)
{
	struct policy_limits limits;
	struct policy_allowlist list;
	const char *why = NULL;

	policy_limits_default(&limits);
	CHECK_INT_EQ(policy_allowlist_build(&list, allow_all, names, count, &why), 0);
	CHECK_INT_EQ(policy_store_set(store, &list, &limits, &why), expect);
}

static void test_no_policy_refuses_everything(void)
{
	struct policy_store *store = policy_store_new();
	struct policy_limits limits;
	char sh[PATH_MAX];

	system_path("sh", sh, sizeof(sh));
	CHECK_INT_EQ(policy_store_check(store, sh, &limits), -EACCES);
	CHECK_INT_EQ(limits.max_processes, POLICY_DEFAULT_MAX_PROCESSES);
	policy_store_free(store);
}

static void test_bare_entry_matches_only_trusted_dirs(void)
{
	char *names[] = { "sh" };
	struct policy_store *store = policy_store_new();
	struct policy_limits limits;
	char sh[PATH_MAX], planted[PATH_MAX], canonical[PATH_MAX], cat[PATH_MAX];
	int fd;

	set_policy(store, false, names, 1, 0);
	system_path("sh", sh, sizeof(sh));
	system_path("cat", cat, sizeof(cat));
	CHECK_INT_EQ(policy_store_check(store, sh, &limits), 0);
	CHECK_INT_EQ(policy_store_check(store, cat, &limits), -EACCES);
	/* a program named sh in a directory the sandbox can write, like /workspace/x/sh */
	snprintf(planted, sizeof(planted), "%s/sh", writable_dir);
	fd = open(planted, O_CREAT | O_WRONLY | O_CLOEXEC, TEST_EXEC_MODE);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK_INT_EQ(policy_canonical_path(planted, NULL, canonical, sizeof(canonical)), 0);
	CHECK_INT_EQ(policy_store_check(store, canonical, &limits), -EACCES);
	/* a relative spelling through the same directory is the same canonical path */
	CHECK_INT_EQ(policy_canonical_path("./sh", writable_dir, canonical, sizeof(canonical)), 0);
	CHECK_INT_EQ(policy_store_check(store, canonical, &limits), -EACCES);
	/* only canonical paths are matched: a bare name never is */
	CHECK_INT_EQ(policy_store_check(store, "sh", &limits), -EACCES);
	unlink(planted);
	policy_store_free(store);
}

static void test_absolute_entry_matches_exactly(void)
{
	char cat[PATH_MAX], sh[PATH_MAX], entry[TEST_PATH_SIZE], planted[PATH_MAX];
	char *names[] = { entry };
	struct policy_store *store = policy_store_new();
	struct policy_limits limits;

	snprintf(entry, sizeof(entry), "%s/cat", usr_bin);
	set_policy(store, false, names, 1, 0);
	system_path("cat", cat, sizeof(cat));
	system_path("sh", sh, sizeof(sh));
	CHECK_INT_EQ(policy_store_check(store, cat, &limits), 0);
	CHECK_INT_EQ(policy_store_check(store, sh, &limits), -EACCES);
	snprintf(planted, sizeof(planted), "%s/cat", writable_dir);
	CHECK_INT_EQ(policy_store_check(store, planted, &limits), -EACCES);
	policy_store_free(store);
}

static void test_entries_validated(void)
{
	char *relative[] = { "x/sh" };
	char *empty[] = { "" };
	struct policy_allowlist list;
	const char *why = NULL;

	CHECK_INT_EQ(policy_allowlist_build(&list, false, relative, 1, &why), -EINVAL);
	CHECK(why != NULL);
	CHECK_INT_EQ(policy_allowlist_build(&list, false, empty, 1, &why), -EINVAL);
}

/*
 * A policy is set once per session: a second SetPolicy cannot widen it (an empty list with
 * allow_all false still refuses everything), and only a rekey opens the next session.
 */
static void test_set_once_per_session(void)
{
	char *names[] = { "cat" };
	struct policy_store *store = policy_store_new();
	struct policy_limits limits, zero = { 0 };
	struct policy_allowlist list;
	const char *why = NULL;
	char sh[PATH_MAX];

	system_path("sh", sh, sizeof(sh));
	set_policy(store, false, NULL, 0, 0);
	CHECK_INT_EQ(policy_store_check(store, sh, &limits), -EACCES);
	set_policy(store, true, NULL, 0, -EBUSY);
	CHECK_INT_EQ(policy_store_check(store, sh, &limits), -EACCES);
	policy_store_reopen(store);
	CHECK_INT_EQ(policy_allowlist_build(&list, false, names, 1, &why), 0);
	CHECK_INT_EQ(policy_store_set(store, &list, &zero, &why), -EINVAL);
	set_policy(store, true, NULL, 0, 0);
	CHECK_INT_EQ(policy_store_check(store, sh, &limits), 0);
	policy_store_free(store);
}

static void test_limits_applied(void)
{
	struct policy_store *store = policy_store_new();
	struct policy_limits limits = { .max_open_files = 7, .max_processes = 9,
					.max_file_size = 11 }, got;
	struct policy_allowlist list;
	const char *why = NULL;

	CHECK_INT_EQ(policy_allowlist_build(&list, true, NULL, 0, &why), 0);
	CHECK_INT_EQ(policy_store_set(store, &list, &limits, &why), 0);
	CHECK_INT_EQ(policy_store_check(store, "/usr/bin/true", &got), 0);
	CHECK_INT_EQ(got.max_open_files, 7);
	CHECK_INT_EQ(got.max_processes, 9);
	CHECK_INT_EQ(got.max_file_size, 11);
	policy_store_free(store);
}

static void test_canonical_path(void)
{
	char out[PATH_MAX], expect[TEST_PATH_SIZE];

	snprintf(expect, sizeof(expect), "%s/sh", usr_bin);
	CHECK_INT_EQ(policy_canonical_path("/usr/bin/../bin/sh", NULL, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, expect);
	CHECK_INT_EQ(policy_canonical_path("bin/sh", "/usr", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, expect);
	CHECK_INT_EQ(policy_canonical_path("/usr/bin/", NULL, out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(policy_canonical_path("/usr/bin/..", NULL, out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(policy_canonical_path("/no/such/dir/sh", NULL, out, sizeof(out)), -ENOENT);
	CHECK_INT_EQ(policy_canonical_path("/sh", NULL, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/sh");
}

int main(void)
{
	if (!mkdtemp(writable_dir))
		harness_skip_all("cannot create a temp dir");
	chmod(writable_dir, 0777);
	if (!realpath("/usr/bin", usr_bin))
		harness_skip_all("no /usr/bin on this host");
	RUN_TEST(test_no_policy_refuses_everything);
	RUN_TEST(test_bare_entry_matches_only_trusted_dirs);
	RUN_TEST(test_absolute_entry_matches_exactly);
	RUN_TEST(test_entries_validated);
	RUN_TEST(test_set_once_per_session);
	RUN_TEST(test_limits_applied);
	RUN_TEST(test_canonical_path);
	rmdir(writable_dir);
	return harness_finish();
}
