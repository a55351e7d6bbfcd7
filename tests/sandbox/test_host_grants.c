/*
 * What a fork's snapshot is checked against before its children restore it: the host paths
 * its sandbox was granted. Snapshots written here name disks and shares in their device
 * sections, as a VMM process (or one a guest subverted) would write them; a path granted by
 * another spelling, with less access, or not at all is refused, and one granted passes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "sandbox/host_grants.h"
#include "test_snapshot_sections.h"
#include "vmm/snapshot.h"

#define TEST_DIR_TEMPLATE "/tmp/voidbox-grants-test-XXXXXX"
#define TEST_SECTIONS 2

static char root[] = TEST_DIR_TEMPLATE;

/* A base in root/name whose sections name disk (read-only or not) and share (likewise). */
static struct vm_snapshot_state *snapshot_naming(const char *name, const char *disk,
						 bool disk_ro, const char *share, bool share_ro)
{
	struct test_section sections[TEST_SECTIONS];
	struct vm_snapshot_state *state = NULL;
	char dir[PATH_MAX], err[SECTIONS_ERR_MAX];
	uint64_t id = 0;

	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	disk_section(&sections[0], disk, disk_ro);
	share_section(&sections[1], "work", share, share_ro);
	write_test_snapshot(dir, NULL, 0, sections, TEST_SECTIONS, &id);
	for (size_t i = 0; i < TEST_SECTIONS; i++)
		byte_writer_free(&sections[i].bytes);
	if (vm_snapshot_state_read(dir, &state, err, sizeof(err)) < 0)
		fprintf(stderr, "  cannot read %s: %s\n", dir, err);
	CHECK(state != NULL);
	return state;
}

static void make_in_root(char *out, const char *name, bool directory)
{
	snprintf(out, PATH_MAX, "%s/%s", root, name);
	if (directory) {
		CHECK_INT_EQ(mkdir(out, SECTIONS_DIR_MODE), 0);
	} else {
		int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SECTIONS_FILE_MODE);

		CHECK(fd >= 0);
		if (fd >= 0)
			close(fd);
	}
}

static void test_grants_decide(void)
{
	char disk[PATH_MAX], share[PATH_MAX], home[PATH_MAX], spelled[PATH_MAX];
	char err[SECTIONS_ERR_MAX] = "";
	struct host_grants grants = { 0 }, copy = { 0 };
	struct vm_snapshot_state *state;

	CHECK(mkdtemp(root) != NULL);
	make_in_root(disk, "disk.img", false);
	make_in_root(share, "share", true);
	make_in_root(home, "home", true);
	/* the share granted by a spelling that is not canonical: its canonical name counts too */
	snprintf(spelled, sizeof(spelled), "%s/home/../share", root);
	CHECK_INT_EQ(host_grants_add(&grants, disk, VM_HOST_PATH_READ_ONLY, err, sizeof(err)), 0);
	CHECK_INT_EQ(host_grants_add(&grants, spelled, VM_HOST_PATH_READ_WRITE, err, sizeof(err)),
		     0);

	state = snapshot_naming("granted", disk, true, share, false);
	CHECK_INT_EQ(host_grants_check_snapshot(&grants, state, err, sizeof(err)), 0);
	vm_snapshot_state_free(state);

	state = snapshot_naming("share-read-only", disk, true, share, true);
	CHECK_INT_EQ(host_grants_check_snapshot(&grants, state, err, sizeof(err)), 0);
	vm_snapshot_state_free(state);

	state = snapshot_naming("disk-writable", disk, false, share, false);
	CHECK_INT_EQ(host_grants_check_snapshot(&grants, state, err, sizeof(err)), -EPERM);
	CHECK(strstr(err, disk) != NULL && strstr(err, "read-write") != NULL);
	vm_snapshot_state_free(state);

	state = snapshot_naming("names-home", disk, true, home, false);
	CHECK_INT_EQ(host_grants_check_snapshot(&grants, state, err, sizeof(err)), -EPERM);
	CHECK(strstr(err, home) != NULL);
	vm_snapshot_state_free(state);

	/* the spelling granted passes; another that leads to the same directory is not its name */
	state = snapshot_naming("spelled", disk, true, spelled, false);
	CHECK_INT_EQ(host_grants_check_snapshot(&grants, state, err, sizeof(err)), 0);
	vm_snapshot_state_free(state);
	snprintf(spelled, sizeof(spelled), "%s/./share", root);
	state = snapshot_naming("other-spelling", disk, true, spelled, false);
	CHECK_INT_EQ(host_grants_check_snapshot(&grants, state, err, sizeof(err)), -EPERM);
	vm_snapshot_state_free(state);

	/* a restore grants what its snapshot names, and a copy grants the same */
	state = snapshot_naming("restored", disk, true, share, true);
	CHECK_INT_EQ(host_grants_add_snapshot(&copy, state, err, sizeof(err)), 0);
	CHECK_INT_EQ(copy.count, 2);
	CHECK_INT_EQ(host_grants_check_snapshot(&copy, state, err, sizeof(err)), 0);
	vm_snapshot_state_free(state);
	CHECK_INT_EQ(host_grants_copy(&copy, &grants, err, sizeof(err)), 0);
	CHECK_INT_EQ(copy.count, grants.count);
	host_grants_free(&copy);
	host_grants_free(&grants);
	CHECK_INT_EQ(grants.count, 0);
}

int main(void)
{
	char cmd[sizeof(root) + 16];

	RUN_TEST(test_grants_decide);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "  cannot remove %s\n", root);
	return harness_finish();
}
