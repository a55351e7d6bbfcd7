/*
 * Policy parsing (allowlist, resource limits) and the cache's reload-on-change: the host writes
 * the files after boot, so a change must be seen by the next check without restarting.
 */
#include "policy.h"

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define PARSE_ALLOW(list, text) policy_parse_allowlist(text, strlen(text), list)
#define PARSE_LIMITS(limits, text) policy_parse_limits(text, strlen(text), limits)

static void test_allowlist_parse(void)
{
	struct policy_allowlist list;

	CHECK_INT_EQ(PARSE_ALLOW(&list, "[\"sh\", \"python3\"]"), 0);
	CHECK_INT_EQ(list.count, 2);
	CHECK(policy_allowlist_permits(&list, "sh"));
	CHECK(policy_allowlist_permits(&list, "/usr/bin/python3"));
	CHECK(!policy_allowlist_permits(&list, "bash"));
	CHECK(!policy_allowlist_permits(&list, "/bin/sh2"));
	CHECK(!policy_allowlist_permits(&list, "python3/"));
	policy_allowlist_free(&list);
}

static void test_allowlist_empty_allows_all(void)
{
	struct policy_allowlist list;

	CHECK_INT_EQ(PARSE_ALLOW(&list, "[]"), 0);
	CHECK(policy_allowlist_permits(&list, "anything"));
	policy_allowlist_free(&list);
}

static void test_allowlist_malformed(void)
{
	struct policy_allowlist list;

	CHECK_INT_EQ(PARSE_ALLOW(&list, "{\"sh\":1}"), -EINVAL);
	CHECK_INT_EQ(list.count, 0);
	CHECK_INT_EQ(PARSE_ALLOW(&list, "[\"sh\", 3]"), -EINVAL);
	CHECK_INT_EQ(list.count, 0);
	CHECK_INT_EQ(PARSE_ALLOW(&list, "[\"sh\""), -EINVAL);
	CHECK_INT_EQ(PARSE_ALLOW(&list, "[\"\"]"), -EINVAL);
}

static void test_limits_parse(void)
{
	struct policy_limits limits;

	CHECK_INT_EQ(PARSE_LIMITS(&limits, "{\"max_open_files\": 64, \"max_processes\": 10, "
					   "\"max_file_size\": 4096, \"max_virtual_memory\": 1}"), 0);
	CHECK_INT_EQ(limits.max_open_files, 64);
	CHECK_INT_EQ(limits.max_processes, 10);
	CHECK_INT_EQ(limits.max_file_size, 4096);
	CHECK_INT_EQ(PARSE_LIMITS(&limits, "{\"max_processes\": 7}"), 0);
	CHECK_INT_EQ(limits.max_open_files, POLICY_DEFAULT_MAX_OPEN_FILES);
	CHECK_INT_EQ(limits.max_processes, 7);
	CHECK_INT_EQ(limits.max_file_size, POLICY_DEFAULT_MAX_FILE_SIZE);
}

static void test_limits_malformed_keeps_defaults(void)
{
	struct policy_limits limits;

	CHECK_INT_EQ(PARSE_LIMITS(&limits, "{\"max_open_files\": -1, \"max_processes\": 3}"),
		     -EINVAL);
	CHECK_INT_EQ(limits.max_open_files, POLICY_DEFAULT_MAX_OPEN_FILES);
	CHECK_INT_EQ(limits.max_processes, POLICY_DEFAULT_MAX_PROCESSES);
	CHECK_INT_EQ(PARSE_LIMITS(&limits, "{\"max_open_files\": \"9\"}"), -EINVAL);
	CHECK_INT_EQ(PARSE_LIMITS(&limits, "[1,2]"), -EINVAL);
	CHECK_INT_EQ(PARSE_LIMITS(&limits, "not json"), -EINVAL);
	CHECK_INT_EQ(limits.max_file_size, POLICY_DEFAULT_MAX_FILE_SIZE);
}

static void write_text(const char *dir, const char *file, const char *text)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

static void test_cache_reloads_on_change(void)
{
	char dir[] = "/tmp/voidbox-policy-XXXXXX", cmd[600];
	struct policy_limits limits;
	struct policy_cache *cache;

	CHECK(mkdtemp(dir) != NULL);
	cache = policy_cache_new(dir);
	CHECK(cache != NULL);
	if (!cache)
		return;
	CHECK_INT_EQ(policy_cache_check(cache, "bash", &limits), 0);
	CHECK_INT_EQ(limits.max_open_files, POLICY_DEFAULT_MAX_OPEN_FILES);

	write_text(dir, POLICY_ALLOWLIST_FILE, "[\"sh\"]");
	write_text(dir, POLICY_LIMITS_FILE, "{\"max_open_files\": 32}");
	CHECK_INT_EQ(policy_cache_check(cache, "bash", &limits), -EACCES);
	CHECK_INT_EQ(policy_cache_check(cache, "/bin/sh", &limits), 0);
	CHECK_INT_EQ(limits.max_open_files, 32);

	/* A rewrite with different content (new inode and size) is picked up. */
	write_text(dir, POLICY_ALLOWLIST_FILE, "[\"sh\", \"bash\"]");
	CHECK_INT_EQ(policy_cache_check(cache, "bash", &limits), 0);

	/* Malformed allowlist fails closed. */
	write_text(dir, POLICY_ALLOWLIST_FILE, "[\"sh\",");
	CHECK_INT_EQ(policy_cache_check(cache, "sh", &limits), -EACCES);

	/* Removing the files goes back to allow-all and the defaults. */
	snprintf(cmd, sizeof(cmd), "%s/%s", dir, POLICY_ALLOWLIST_FILE);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/%s", dir, POLICY_LIMITS_FILE);
	unlink(cmd);
	CHECK_INT_EQ(policy_cache_check(cache, "anything", &limits), 0);
	CHECK_INT_EQ(limits.max_open_files, POLICY_DEFAULT_MAX_OPEN_FILES);
	policy_cache_free(cache);
	rmdir(dir);
}

int main(void)
{
	RUN_TEST(test_allowlist_parse);
	RUN_TEST(test_allowlist_empty_allows_all);
	RUN_TEST(test_allowlist_malformed);
	RUN_TEST(test_limits_parse);
	RUN_TEST(test_limits_malformed_keeps_defaults);
	RUN_TEST(test_cache_reloads_on_change);
	return harness_finish();
}
