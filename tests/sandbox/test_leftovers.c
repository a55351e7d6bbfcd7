/*
 * The owner locks of a sandbox's host directories and the sweep that removes what a process
 * that died without its teardown left. Owners here are child processes that claim a
 * directory and end (as a SIGKILL'ed CLI would) or stay alive; the sweep must remove exactly
 * the directories whose owner has ended, with their checked fork copies and cgroups (a plain
 * directory stands in for the cgroup root), and nothing else: no live owner's, no unlocked
 * one's (a serial log kept on purpose), no lock that is a symlink, no other user's, no name
 * that is not one of ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sandbox/leftovers.h"

#define TEST_PREFIX "voidbox-"
#define TEST_FORK_PREFIX "voidbox-fork-"
#define TEST_DIR_MODE 0700
#define TEST_OTHER_UID 65534
#define TEST_BACKLOG (LEFTOVERS_SWEEP_MAX + 8u)

static char root[] = "/tmp/voidbox-leftovers-test-XXXXXX";
static char base[PATH_MAX], cgroups[PATH_MAX];

static void path_of(char *out, const char *dir, const char *name)
{
	if ((size_t)snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX)
		harness_fail_setup("a test path is too long");
}

static void make_dir(const char *dir, const char *name)
{
	char path[PATH_MAX];

	path_of(path, dir, name);
	if (mkdir(path, TEST_DIR_MODE) < 0)
		harness_fail_setup("cannot make a test directory");
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	path_of(path, dir, name);
	return access(path, F_OK) == 0;
}

/* dir/name claimed by a child that then ends without releasing it (a killed CLI). */
static void claim_by_ended_owner_in(const char *dir, const char *name)
{
	char path[PATH_MAX];
	int status = -1;
	pid_t child;

	make_dir(dir, name);
	path_of(path, dir, name);
	child = fork();
	if (child == 0)
		_exit(leftovers_claim(path) >= 0 ? 0 : 1);
	CHECK(child > 0 && waitpid(child, &status, 0) == child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void claim_by_ended_owner(const char *name)
{
	claim_by_ended_owner_in(base, name);
}

/* A claimed directory's lock is a file in it; its release removes it. */
static void test_claim_and_release(void)
{
	char dir[PATH_MAX], lock[PATH_MAX];
	int fd;

	make_dir(base, TEST_PREFIX "claim1");
	path_of(dir, base, TEST_PREFIX "claim1");
	path_of(lock, dir, LEFTOVERS_OWNER_LOCK);
	fd = leftovers_claim(dir);
	CHECK(fd >= 0);
	CHECK(access(lock, F_OK) == 0);
	/* a second claim of the same directory is refused: the lock file exists */
	CHECK_INT_EQ(leftovers_claim(dir), -EEXIST);
	leftovers_release(dir, fd);
	CHECK(access(lock, F_OK) < 0 && errno == ENOENT);
	CHECK(rmdir(dir) == 0);
}

/* The sweep removes exactly the directories whose owner has ended. */
static void test_sweep_removes_only_abandoned(void)
{
	char path[PATH_MAX], lock[PATH_MAX], target[PATH_MAX], elsewhere_lock[PATH_MAX];
	int live_fd;

	claim_by_ended_owner(TEST_PREFIX "ended1");
	make_dir(cgroups, TEST_PREFIX "ended1");
	make_dir(base, TEST_PREFIX "alive1");
	path_of(path, base, TEST_PREFIX "alive1");
	live_fd = leftovers_claim(path);
	CHECK(live_fd >= 0);
	make_dir(cgroups, TEST_PREFIX "alive1");
	make_dir(base, TEST_PREFIX "nolock"); /* a kept serial log's directory */
	/* a lock that is a symlink to a lock nobody holds elsewhere decides nothing */
	claim_by_ended_owner_in(root, "elsewhere");
	path_of(target, root, "elsewhere");
	make_dir(base, TEST_PREFIX "symlnk");
	path_of(path, base, TEST_PREFIX "symlnk");
	path_of(lock, path, LEFTOVERS_OWNER_LOCK);
	path_of(elsewhere_lock, target, LEFTOVERS_OWNER_LOCK);
	CHECK(symlink(elsewhere_lock, lock) == 0);
	/* not one of our names: a longer suffix */
	claim_by_ended_owner(TEST_PREFIX "toolong1");

	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, cgroups), 1);
	CHECK(!exists(base, TEST_PREFIX "ended1"));
	CHECK(!exists(cgroups, TEST_PREFIX "ended1"));
	CHECK(exists(root, "elsewhere"));
	CHECK(exists(base, TEST_PREFIX "alive1"));
	CHECK(exists(cgroups, TEST_PREFIX "alive1"));
	CHECK(exists(base, TEST_PREFIX "nolock"));
	CHECK(exists(base, TEST_PREFIX "symlnk"));
	CHECK(exists(base, TEST_PREFIX "toolong1"));
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, cgroups), 0);
	/* once its owner ends, the live one goes too */
	close(live_fd);
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, cgroups), 1);
	CHECK(!exists(base, TEST_PREFIX "alive1"));
	CHECK(!exists(cgroups, TEST_PREFIX "alive1"));
}

/* A fork area's checked copies go with it; one whose area is gone goes on its own. */
static void test_sweep_checked_copies(void)
{
	char path[PATH_MAX];
	int live_fd;

	claim_by_ended_owner(TEST_FORK_PREFIX "areaA1");
	make_dir(base, TEST_FORK_PREFIX "areaA1-checked-copy01");
	make_dir(base, TEST_FORK_PREFIX "areaB1");
	path_of(path, base, TEST_FORK_PREFIX "areaB1");
	live_fd = leftovers_claim(path);
	CHECK(live_fd >= 0);
	make_dir(base, TEST_FORK_PREFIX "areaB1-checked-copy02");
	make_dir(base, TEST_FORK_PREFIX "goneC1-checked-copy03");

	CHECK_INT_EQ(leftovers_sweep(base, TEST_FORK_PREFIX, NULL), 2); /* areaA1, goneC1's */
	CHECK(!exists(base, TEST_FORK_PREFIX "areaA1"));
	CHECK(!exists(base, TEST_FORK_PREFIX "areaA1-checked-copy01"));
	CHECK(!exists(base, TEST_FORK_PREFIX "goneC1-checked-copy03"));
	CHECK(exists(base, TEST_FORK_PREFIX "areaB1"));
	CHECK(exists(base, TEST_FORK_PREFIX "areaB1-checked-copy02"));
	leftovers_release(path, live_fd);
}

/* Another user's abandoned directory is not ours to remove (needs root to make one). */
static void test_sweep_spares_other_users(void)
{
	char path[PATH_MAX];

	if (geteuid() != 0) {
		fprintf(stderr, "  (not checked: making another user's directory needs root)\n");
		return;
	}
	claim_by_ended_owner(TEST_PREFIX "other1");
	path_of(path, base, TEST_PREFIX "other1");
	CHECK(chown(path, TEST_OTHER_UID, TEST_OTHER_UID) == 0);
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, NULL), 0);
	CHECK(exists(base, TEST_PREFIX "other1"));
	CHECK(chown(path, 0, 0) == 0);
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, NULL), 1);
}

/* One sweep removes at most LEFTOVERS_SWEEP_MAX; the next takes the rest. */
static void test_sweep_is_bounded(void)
{
	char name[NAME_MAX];

	for (unsigned int i = 0; i < TEST_BACKLOG; i++) {
		snprintf(name, sizeof(name), TEST_PREFIX "bl%04u", i);
		claim_by_ended_owner(name);
	}
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, NULL), LEFTOVERS_SWEEP_MAX);
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, NULL),
		     TEST_BACKLOG - LEFTOVERS_SWEEP_MAX);
	CHECK_INT_EQ(leftovers_sweep(base, TEST_PREFIX, NULL), 0);
}

int main(int argc, char **argv)
{
	char cmd[sizeof(root) + 16];

	harness_select(argc, argv);
	if (!mkdtemp(root))
		harness_fail_setup("cannot make a temporary directory");
	path_of(base, root, "base");
	path_of(cgroups, root, "cgroups");
	if (mkdir(base, TEST_DIR_MODE) < 0 || mkdir(cgroups, TEST_DIR_MODE) < 0)
		harness_fail_setup("cannot make the test's directories");
	RUN_TEST(test_claim_and_release);
	RUN_TEST(test_sweep_removes_only_abandoned);
	RUN_TEST(test_sweep_checked_copies);
	RUN_TEST(test_sweep_spares_other_users);
	RUN_TEST(test_sweep_is_bounded);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return harness_finish();
}
