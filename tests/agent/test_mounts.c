/*
 * Command line parsing for the boot-time devices: host shares (voidbox.mountN=tag:path[:ro|rw]),
 * the network switch (voidbox.network=1 as a whole token), the OCI root device and the count of
 * host disks (voidbox.disks=N).
 */
#include "disks.h"
#include "mounts.h"
#include "netcfg.h"
#include "oci_root.h"

#include "dir_entries.h"
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define TEST_DIR_TEMPLATE "/tmp/voidbox-mounts-test-XXXXXX"
#define TEST_PROBE_NAME ".voidbox-open-probe"

static void test_mounts_read_ahead_path(void)
{
	char path[64];

	CHECK_INT_EQ(mounts_read_ahead_path(makedev(0, 45), path, sizeof(path)), 0);
	CHECK_STR_EQ(path, "/sys/class/bdi/0:45/read_ahead_kb");
	CHECK_INT_EQ(mounts_read_ahead_path(makedev(259, 3), path, sizeof(path)), 0);
	CHECK_STR_EQ(path, "/sys/class/bdi/259:3/read_ahead_kb");
	CHECK_INT_EQ(mounts_read_ahead_path(makedev(0, 45), path, 8), -ENAMETOOLONG);
}

/* The open probe leaves the share as it found it, and never replaces a file of that name. */
static void test_mounts_learn_no_open(void)
{
	char dir[] = TEST_DIR_TEMPLATE, path[sizeof(dir) + sizeof(TEST_PROBE_NAME) + 1];
	int fd;

	CHECK(mkdtemp(dir) != NULL);
	CHECK_INT_EQ(mounts_learn_no_open(dir), 0);
	CHECK_INT_EQ(dir_entry_count(dir), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, TEST_PROBE_NAME);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECK(fd >= 0 && write(fd, "mine", 4) == 4);
	close(fd);
	CHECK_INT_EQ(mounts_learn_no_open(dir), -EEXIST);
	CHECK_INT_EQ(dir_entry_count(dir), 1);
	CHECK_INT_EQ(unlink(path), 0);
	CHECK_INT_EQ(rmdir(dir), 0);
	CHECK_INT_EQ(mounts_learn_no_open(dir), -ENOENT);
}

static void test_mounts_parse(void)
{
	struct mount_spec specs[MOUNTS_MAX];
	size_t count = mounts_parse("console=ttyS0 voidbox.mount0=mount0:/workspace:rw "
				    "voidbox.mount1=skills:/home/sandbox/.skills "
				    "voidbox.mount12=data:/data:ro quiet", specs, MOUNTS_MAX);

	CHECK_INT_EQ(count, 3);
	if (count != 3)
		return;
	CHECK_INT_EQ(specs[0].index, 0);
	CHECK_STR_EQ(specs[0].tag, "mount0");
	CHECK_STR_EQ(specs[0].guest_path, "/workspace");
	CHECK(!specs[0].read_only);
	CHECK_STR_EQ(specs[1].tag, "skills");
	CHECK_STR_EQ(specs[1].guest_path, "/home/sandbox/.skills");
	CHECK(specs[1].read_only);
	CHECK_INT_EQ(specs[2].index, 12);
	CHECK_STR_EQ(specs[2].guest_path, "/data");
	CHECK(specs[2].read_only);
}

static void test_mounts_rejects_malformed(void)
{
	struct mount_spec specs[MOUNTS_MAX];

	CHECK_INT_EQ(mounts_parse("voidbox.mount0=:/x voidbox.mount1=tag:relative "
				  "voidbox.mountX=tag:/x voidbox.mount2=tag voidbox.mount3=tag:/a:b:rw "
				  "voidbox.mount=tag:/x xvoidbox.mount4=tag:/x voidbox.mount5=tag:", specs,
				  MOUNTS_MAX), 0);
	CHECK_INT_EQ(mounts_parse(NULL, specs, MOUNTS_MAX), 0);
	CHECK_INT_EQ(mounts_parse("voidbox.mount0=a:/a voidbox.mount1=b:/b", specs, 1), 1);
}

static void test_network_token(void)
{
	CHECK(netcfg_requested("console=ttyS0 voidbox.network=1"));
	CHECK(netcfg_requested("voidbox.network=1 quiet"));
	CHECK(!netcfg_requested("voidbox.network=10"));
	CHECK(!netcfg_requested("xvoidbox.network=1"));
	CHECK(!netcfg_requested("voidbox.network=0"));
	CHECK(!netcfg_requested(""));
	CHECK(!netcfg_requested(NULL));
}

static void test_oci_root_device(void)
{
	char device[64];

	CHECK(oci_root_requested("quiet voidbox.oci_rootfs_dev=/dev/vda console=ttyS0", device,
				 sizeof(device)));
	CHECK_STR_EQ(device, "/dev/vda");
	CHECK(oci_root_requested("voidbox.oci_rootfs_dev=/dev/vdb", device, sizeof(device)));
	CHECK_STR_EQ(device, "/dev/vdb");
	CHECK(!oci_root_requested("voidbox.oci_rootfs_dev=vda", device, sizeof(device)));
	CHECK(!oci_root_requested("voidbox.oci_rootfs_dev=", device, sizeof(device)));
	CHECK(!oci_root_requested("xvoidbox.oci_rootfs_dev=/dev/vda", device, sizeof(device)));
	CHECK(!oci_root_requested("voidbox.oci_rootfs_dev=/dev/a-very-long-device-name", device, 8));
	CHECK(!oci_root_requested(NULL, device, sizeof(device)));
}

static void test_disks_requested(void)
{
	char path[sizeof("/dev/vda")];

	CHECK_INT_EQ(disks_requested("console=ttyS0 voidbox.disks=2 quiet"), 2);
	CHECK_INT_EQ(disks_requested("voidbox.disks=1"), 1);
	CHECK_INT_EQ(disks_requested("console=ttyS0 quiet"), 0);
	CHECK_INT_EQ(disks_requested(NULL), 0);
	CHECK_INT_EQ(disks_requested("voidbox.disks=0"), 0);
	/* only a whole token, a plain decimal, and never more than /dev/vdz */
	CHECK_INT_EQ(disks_requested("xvoidbox.disks=3"), 0);
	CHECK_INT_EQ(disks_requested("voidbox.disks=3x"), 0);
	CHECK_INT_EQ(disks_requested("voidbox.disks=-1"), 0);
	CHECK_INT_EQ(disks_requested("voidbox.disks="), 0);
	CHECK_INT_EQ(disks_requested("voidbox.disks=99999999999999999999999"), DISKS_MAX);
	disks_device_path(0, path, sizeof(path));
	CHECK_STR_EQ(path, "/dev/vda");
	disks_device_path(2, path, sizeof(path));
	CHECK_STR_EQ(path, "/dev/vdc");
}

int main(void)
{
	RUN_TEST(test_disks_requested);
	RUN_TEST(test_mounts_parse);
	RUN_TEST(test_mounts_read_ahead_path);
	RUN_TEST(test_mounts_learn_no_open);
	RUN_TEST(test_mounts_rejects_malformed);
	RUN_TEST(test_network_token);
	RUN_TEST(test_oci_root_device);
	return harness_finish();
}
