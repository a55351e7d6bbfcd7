/*
 * The VMM's cgroup limits (src/sandbox/vmm_cgroup.c) against a directory laid out as a
 * delegated cgroup v2 root: with memory and cpu enabled for children, the VM's cgroup gets
 * memory.max (guest memory plus the allowance) and cpu.max (its vCPUs' worth) and takes a pid;
 * with either controller missing nothing is made and the sentence names the controller; a
 * process already listed in a cgroup that enters it writes nothing. What
 * this host itself offers is only reported: the writes are what is tested, and the host check
 * would pass or fail by the host's configuration, not by the code.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "sandbox/vmm_cgroup.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 512
#define TEST_VALUE_MAX 128
#define TEST_MEMORY_MB 512u
#define TEST_VCPUS 2u

static char test_root[TEST_PATH_MAX];

static void write_text(const char *dir, const char *file, const char *text)
{
	char path[TEST_PATH_MAX * 2];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void read_text(const char *dir, const char *file, char *out, size_t len)
{
	char path[TEST_PATH_MAX * 2];
	FILE *f;

	out[0] = '\0';
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "r");
	if (!f)
		return;
	if (!fgets(out, (int)len, f))
		out[0] = '\0';
	fclose(f);
}

/* A plain directory stands in for cgroupfs; its files are removed by hand. */
static void remove_fake_cgroup(const char *dir)
{
	static const char *const files[] = { "memory.max", "cpu.max", "memory.swap.max",
					     "cgroup.procs" };
	char path[TEST_PATH_MAX * 2];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

static void test_limits_written_where_controllers_enabled(void)
{
	struct vmm_cgroup_limits limits = { .memory_mb = TEST_MEMORY_MB, .vcpus = TEST_VCPUS };
	char dir[TEST_PATH_MAX], err[TEST_ERR_MAX], value[TEST_VALUE_MAX], expected[TEST_VALUE_MAX];

	write_text(test_root, "cgroup.subtree_control", "cpuset cpu io memory pids\n");
	CHECK_INT_EQ(vmm_cgroup_create(test_root, "vm-a", &limits, dir, sizeof(dir), err,
				       sizeof(err)), 0);
	read_text(dir, "memory.max", value, sizeof(value));
	snprintf(expected, sizeof(expected), "%llu",
		 (TEST_MEMORY_MB + VMM_CGROUP_OVERHEAD_MB) * 1024ull * 1024ull);
	CHECK_STR_EQ(value, expected);
	read_text(dir, "cpu.max", value, sizeof(value));
	snprintf(expected, sizeof(expected), "%u %u", TEST_VCPUS * VMM_CGROUP_CPU_PERIOD_US,
		 VMM_CGROUP_CPU_PERIOD_US);
	CHECK_STR_EQ(value, expected);
	read_text(dir, "memory.swap.max", value, sizeof(value));
	CHECK_STR_EQ(value, "0");
	/* before a snapshot onto tmpfs: room for a copy of the guest's memory, once */
	CHECK_INT_EQ(vmm_cgroup_allow_memory_copy(dir, TEST_MEMORY_MB), 0);
	read_text(dir, "memory.max", value, sizeof(value));
	snprintf(expected, sizeof(expected), "%llu",
		 (2 * TEST_MEMORY_MB + VMM_CGROUP_OVERHEAD_MB) * 1024ull * 1024ull);
	CHECK_STR_EQ(value, expected);
	CHECK_INT_EQ(vmm_cgroup_enter(dir, 4242), 0);
	read_text(dir, "cgroup.procs", value, sizeof(value));
	CHECK_STR_EQ(value, "4242");
	remove_fake_cgroup(dir);
}

static void test_nothing_made_without_a_controller(void)
{
	struct vmm_cgroup_limits limits = { .memory_mb = TEST_MEMORY_MB, .vcpus = TEST_VCPUS };
	char dir[TEST_PATH_MAX], err[TEST_ERR_MAX] = "", path[TEST_PATH_MAX * 2];
	struct stat st;

	write_text(test_root, "cgroup.subtree_control", "cpu pids\n"); /* no memory */
	CHECK_INT_EQ(vmm_cgroup_create(test_root, "vm-b", &limits, dir, sizeof(dir), err,
				       sizeof(err)), -EOPNOTSUPP);
	CHECK(strstr(err, "'memory'") != NULL);
	CHECK_STR_EQ(dir, "");
	snprintf(path, sizeof(path), "%s/vm-b", test_root);
	CHECK(stat(path, &st) < 0 && errno == ENOENT);
	write_text(test_root, "cgroup.subtree_control", "memory\n"); /* "cpuset" is not "cpu" */
	CHECK_INT_EQ(vmm_cgroup_create(test_root, "vm-b", &limits, dir, sizeof(dir), err,
				       sizeof(err)), -EOPNOTSUPP);
	CHECK(strstr(err, "'cpu'") != NULL);
}

/*
 * A process born in its cgroup (clone3 with CLONE_INTO_CGROUP) that enters it is left alone:
 * the file is not written. One that is not listed writes its "0" as before.
 */
static void test_enter_skips_a_process_already_in(void)
{
	char dir[TEST_PATH_MAX * 2], listed[TEST_VALUE_MAX], value[TEST_VALUE_MAX];

	snprintf(dir, sizeof(dir), "%s/born-in", test_root);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);
	snprintf(listed, sizeof(listed), "1\n%ld\n", (long)getpid());
	write_text(dir, "cgroup.procs", listed);
	CHECK_INT_EQ(vmm_cgroup_enter(dir, 0), 0);
	read_text(dir, "cgroup.procs", value, sizeof(value));
	CHECK_STR_EQ(value, "1\n"); /* the first line as it was: nothing written */

	write_text(dir, "cgroup.procs", "1\n");
	CHECK_INT_EQ(vmm_cgroup_enter(dir, 0), 0);
	read_text(dir, "cgroup.procs", value, sizeof(value));
	CHECK_STR_EQ(value, "0\n"); /* "0" written over the "1": this process moving in */
	remove_fake_cgroup(dir);
}

/* Reports what this host offers; either answer is right, a sentence is required for "no". */
static void test_host_root_answers(void)
{
	char root[TEST_PATH_MAX], why[TEST_ERR_MAX] = "";
	int rc = vmm_cgroup_root(root, sizeof(root), why, sizeof(why));

	if (rc == 0)
		fprintf(stderr, "  this host's delegated cgroup v2 root: %s\n", root);
	else
		fprintf(stderr, "  no VMM cgroups on this host: %s\n", why);
	CHECK(rc == 0 || why[0] != '\0');
}

int main(void)
{
	char path[TEST_PATH_MAX * 2];

	snprintf(test_root, sizeof(test_root), "%s/voidbox-cgroup-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(test_root)) {
		perror("mkdtemp");
		return 1;
	}
	RUN_TEST(test_limits_written_where_controllers_enabled);
	RUN_TEST(test_nothing_made_without_a_controller);
	RUN_TEST(test_enter_skips_a_process_already_in);
	RUN_TEST(test_host_root_answers);
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", test_root);
	unlink(path);
	rmdir(test_root);
	return harness_finish();
}
