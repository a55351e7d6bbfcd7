/*
 * Disks on real VMs, with as few cold boots as the checks allow (three): the first VM gets a
 * read-only disk and a writable one and checks what the guest sees (/dev/vda and /dev/vdb,
 * their size, read-only flag and serial, the read-only disk's bytes) and that a write to the
 * read-only disk fails while one to the writable disk reaches the host file. That VM is then
 * snapshotted: a fork is refused (its children would share the writable disk), a restore is
 * refused while the first VM still holds the disk, succeeds once it is gone (reading the
 * host file, not its page cache, through O_DIRECT), writes again, and a second restore is
 * refused because the disk changed since the snapshot. A second cold boot, through
 * `voidbox exec --disk PATH:ro`, reads what both VMs wrote: the data outlives the VMs. A
 * third boots with a root filesystem image (oci_rootfs_build_ext4 of a busybox tree) as its
 * root: the agent's overlay and switch-root.
 *
 * Needs a /dev/kvm that runs standard guests and a built guest image with a disk-aware agent
 * (tests/vm/run-vm-suite finds the first; without either it exits 77 and says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "host/control_channel.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "store/oci_rootfs.h"
#include "vmm/kvm.h"
#include "vmm/snapshot.h"
#include "vm_test.h"

#define TEST_VM_MEMORY_MB 256
#define TEST_VM_VCPUS 1
#define TEST_OUTPUT_MAX 512
#define TEST_ERR_MAX 1024
#define TEST_RESTORE_TIMEOUT_MS 60000
/* one MiB: 2048 sectors */
#define TEST_DISK_BYTES (1u << 20)
#define TEST_DISK_SECTORS "2048"
#define TEST_SECTOR 512
#define TEST_RO_TEXT "READONLY-DATA"
#define TEST_RW_TEXT "RW-PAYLOAD-1"
#define TEST_RW_SECTOR 3
#define TEST_RESTORED_TEXT "RESTORED-WROTE"
#define TEST_RESTORED_SECTOR 4
#define TEST_ROOT_OS_RELEASE "ID=voidbox-root-test"
#define TEST_ROOT_CMDLINE "voidbox.oci_rootfs_dev=/dev/vda"
/* OVERLAYFS_SUPER_MAGIC as busybox `stat -f -c %t` prints it (it has no name for it) */
#define TEST_OVERLAYFS_MAGIC_HEX "794c7630"
#define TEST_HOST_BUSYBOX "/bin/busybox"
#define TEST_DIR_MODE 0755
#define TEST_EXEC_MODE 0755
/* disks on the local /tmp: a build tree shared into the nested L1 is slow */
#define TEST_DIR_TEMPLATE "/tmp/voidbox-disktest-XXXXXX"

static char work_dir[sizeof(TEST_DIR_TEMPLATE)];
static char ro_path[PATH_MAX];
static char rw_path[PATH_MAX];
static char snap_path[PATH_MAX];
static struct guest_image_paths image;
static struct sandbox *first_vm;
static const char *voidbox_cli;

static int make_disk(const char *path, const char *text, off_t offset)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	int rc = -1;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, TEST_DISK_BYTES) == 0 &&
	    (!text || pwrite(fd, text, strlen(text), offset) == (ssize_t)strlen(text)))
		rc = 0;
	close(fd);
	return rc;
}

static bool file_has(const char *path, off_t offset, const char *text)
{
	char buf[TEST_OUTPUT_MAX] = { 0 };
	int fd = open(path, O_RDONLY);
	bool same;

	if (fd < 0)
		return false;
	same = pread(fd, buf, strlen(text), offset) == (ssize_t)strlen(text) &&
	       memcmp(buf, text, strlen(text)) == 0;
	close(fd);
	return same;
}

static int boot(const struct vm_disk *disks, unsigned int count, const char *log_name,
		struct sandbox **out)
{
	struct sandbox_config cfg;
	char err[TEST_ERR_MAX], log_path[PATH_MAX];

	memset(&cfg, 0, sizeof(cfg));
	cfg.kernel_path = image.kernel;
	cfg.initramfs_path = image.initramfs;
	cfg.memory_mb = TEST_VM_MEMORY_MB;
	cfg.vcpus = TEST_VM_VCPUS;
	cfg.disks = disks;
	cfg.disk_count = count;
	snprintf(log_path, sizeof(log_path), "%s/%s", work_dir, log_name);
	cfg.serial_log_path = log_path;
	if (sandbox_start(&cfg, out, err, sizeof(err)) < 0) {
		fprintf(stderr, "  the VM did not start: %s\n", err);
		return -1;
	}
	return 0;
}

static int restore(const char *log_name, struct sandbox **out, char *err, size_t errlen)
{
	struct sandbox_restore_config cfg;
	char log_path[PATH_MAX];

	memset(&cfg, 0, sizeof(cfg));
	cfg.snapshot_dir = snap_path;
	snprintf(log_path, sizeof(log_path), "%s/%s", work_dir, log_name);
	cfg.serial_log_path = log_path;
	cfg.timeout_ms = TEST_RESTORE_TIMEOUT_MS;
	return sandbox_start_from_snapshot(&cfg, out, err, errlen);
}

static void test_guest_sees_disks(void)
{
	char out[TEST_OUTPUT_MAX], expect[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(sh(first_vm, "echo $(cat /sys/block/vda/ro /sys/block/vdb/ro)", out,
			sizeof(out)), 0);
	CHECK_STR_EQ(out, "1 0");
	CHECK_INT_EQ(sh(first_vm, "cat /sys/block/vdb/size", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_DISK_SECTORS);
	CHECK_INT_EQ(sh(first_vm, "cat /sys/block/vda/serial", out, sizeof(out)), 0);
	snprintf(expect, sizeof(expect), "%s", strrchr(ro_path, '/') + 1);
	CHECK_STR_EQ(out, expect);
	snprintf(expect, sizeof(expect), "head -c %zu /dev/vda", strlen(TEST_RO_TEXT));
	CHECK_INT_EQ(sh(first_vm, expect, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_RO_TEXT);
}

static void test_read_only_disk_refuses_writes(void)
{
	CHECK(sh(first_vm, "printf OVERWRITE | dd of=/dev/vda conv=notrunc,fsync 2>&1", NULL,
		 0) != 0);
	CHECK(file_has(ro_path, 0, TEST_RO_TEXT));
}

static void test_writable_disk_reaches_host(void)
{
	char script[TEST_OUTPUT_MAX];

	snprintf(script, sizeof(script),
		 "printf %s | dd of=/dev/vdb bs=%d seek=%d conv=notrunc,fsync 2>/dev/null",
		 TEST_RW_TEXT, TEST_SECTOR, TEST_RW_SECTOR);
	CHECK_INT_EQ(sh(first_vm, script, NULL, 0), 0);
	CHECK(file_has(rw_path, TEST_RW_SECTOR * TEST_SECTOR, TEST_RW_TEXT));
}

/* After reads, writes and flushes: both disk workers served them under their filter. */
static void test_disk_workers_confined(void)
{
	vm_test_check_threads_confined("blk-worker");
}

static void test_snapshot_restore_rules(void)
{
	struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_BASE,
					    .after = VM_SNAPSHOT_RESUME };
	struct sandbox *children[1], *restored = NULL, *again = NULL;
	char err[TEST_ERR_MAX], out[TEST_OUTPUT_MAX], script[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(sandbox_snapshot(first_vm, snap_path, &opts, err, sizeof(err)), 0);
	/* a fork's children would write the same file */
	CHECK(sandbox_fork(first_vm, 1, children, err, sizeof(err)) < 0);
	CHECK(strstr(err, "in use") != NULL);
	fprintf(stderr, "  fork refused: %s\n", err);
	CHECK(restore("restore-busy.log", &restored, err, sizeof(err)) < 0);
	CHECK(strstr(err, "in use") != NULL);
	sandbox_destroy(first_vm, false);
	first_vm = NULL;

	CHECK_INT_EQ(restore("restore.log", &restored, err, sizeof(err)), 0);
	if (!restored) {
		fprintf(stderr, "  restore failed: %s\n", err);
		return;
	}
	snprintf(script, sizeof(script),
		 "dd if=/dev/vdb iflag=direct bs=%d skip=%d count=1 2>/dev/null | head -c %zu",
		 TEST_SECTOR, TEST_RW_SECTOR, strlen(TEST_RW_TEXT));
	CHECK_INT_EQ(sh(restored, script, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_RW_TEXT);
	snprintf(script, sizeof(script),
		 "printf %s | dd of=/dev/vdb bs=%d seek=%d conv=notrunc,fsync 2>/dev/null",
		 TEST_RESTORED_TEXT, TEST_SECTOR, TEST_RESTORED_SECTOR);
	CHECK_INT_EQ(sh(restored, script, NULL, 0), 0);
	sandbox_destroy(restored, false);

	/* the disk changed since the snapshot: refused, and the message names it */
	CHECK(restore("restore-stale.log", &again, err, sizeof(err)) < 0);
	CHECK(strstr(err, "changed since the snapshot") != NULL);
	CHECK(strstr(err, rw_path) != NULL);
	fprintf(stderr, "  stale restore refused: %s\n", err);
	if (again)
		sandbox_destroy(again, false);
}

/* Through the command line, as a user would: --disk PATH:ro on the file the VMs wrote. */
static void test_data_outlives_vms(void)
{
	char cmd[3 * PATH_MAX], out[TEST_OUTPUT_MAX] = { 0 };
	size_t got;
	FILE *pipe;

	snprintf(cmd, sizeof(cmd),
		 "%s exec --serial-log %s/second.log --disk %s:ro -- sh -c "
		 "'cat /sys/block/vda/ro; "
		 "dd if=/dev/vda bs=%d skip=%d count=1 2>/dev/null | head -c %zu; echo; "
		 "dd if=/dev/vda bs=%d skip=%d count=1 2>/dev/null | head -c %zu'",
		 voidbox_cli, work_dir, rw_path, TEST_SECTOR, TEST_RW_SECTOR, strlen(TEST_RW_TEXT),
		 TEST_SECTOR, TEST_RESTORED_SECTOR, strlen(TEST_RESTORED_TEXT));
	pipe = popen(cmd, "r");
	CHECK(pipe != NULL);
	if (!pipe)
		return;
	got = fread(out, 1, sizeof(out) - 1, pipe);
	out[got] = '\0';
	CHECK_INT_EQ(pclose(pipe), 0);
	CHECK_STR_EQ(out, "1\n" TEST_RW_TEXT "\n" TEST_RESTORED_TEXT);
}

/* A root tree: busybox with the applets the checks use, and an os-release of its own. */
static int make_root_tree(const char *tree)
{
	static const char *const dirs[] = { "", "/bin", "/etc" };
	static const char *const applets[] = { "sh", "cat", "stat", "touch", "test", "echo" };
	char path[PATH_MAX * 2], copy[PATH_MAX * 2];
	FILE *file;

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", tree, dirs[i]);
		if (mkdir(path, TEST_DIR_MODE) < 0)
			return -1;
	}
	snprintf(copy, sizeof(copy), "cp %s %s/bin/busybox", TEST_HOST_BUSYBOX, tree);
	if (system(copy) != 0)
		return -1;
	for (size_t i = 0; i < sizeof(applets) / sizeof(applets[0]); i++) {
		snprintf(path, sizeof(path), "%s/bin/%s", tree, applets[i]);
		if (symlink("busybox", path) < 0)
			return -1;
	}
	snprintf(path, sizeof(path), "%s/etc/os-release", tree);
	file = fopen(path, "w");
	if (!file)
		return -1;
	fputs(TEST_ROOT_OS_RELEASE "\n", file);
	return fclose(file) == 0 ? 0 : -1;
}

/*
 * A root filesystem image as the guest's root: the agent mounts the read-only ext4 disk under
 * a tmpfs overlay, switches root, and keeps serving; the root is the image's, writable in
 * memory, and /workspace and the sandbox user's home are there.
 */
static void test_image_root(void)
{
	char tree[PATH_MAX], image_path[PATH_MAX], log_path[PATH_MAX], err[TEST_ERR_MAX];
	char out[TEST_OUTPUT_MAX];
	struct sandbox_config cfg;
	struct vm_disk disk;
	struct sandbox *box = NULL;

	snprintf(tree, sizeof(tree), "%s/root-tree", work_dir);
	snprintf(image_path, sizeof(image_path), "%s/root.ext4", work_dir);
	CHECK_INT_EQ(make_root_tree(tree), 0);
	CHECK_INT_EQ(oci_rootfs_build_ext4(tree, image_path, err, sizeof(err)), 0);
	disk = (struct vm_disk){ .path = image_path, .read_only = true };
	memset(&cfg, 0, sizeof(cfg));
	cfg.kernel_path = image.kernel;
	cfg.initramfs_path = image.initramfs;
	cfg.memory_mb = TEST_VM_MEMORY_MB;
	cfg.vcpus = TEST_VM_VCPUS;
	cfg.disks = &disk;
	cfg.disk_count = 1;
	cfg.extra_cmdline = TEST_ROOT_CMDLINE;
	snprintf(log_path, sizeof(log_path), "%s/image-root.log", work_dir);
	cfg.serial_log_path = log_path;
	if (sandbox_start(&cfg, &box, err, sizeof(err)) < 0) {
		fprintf(stderr, "  the VM did not start: %s\n", err);
		CHECK(box != NULL);
		return;
	}
	if (sh(box, "cat /etc/os-release", out, sizeof(out)) != 0) {
		char grep[PATH_MAX * 2];

		/* the console is in the nested VM's /tmp: show what the agent said about it */
		snprintf(grep, sizeof(grep),
			 "grep -aiE 'oci|rootfs|module|error|warn|ext4|vda|crc|fail|mount' %s >&2",
			 log_path);
		CHECK(system(grep) == 0 && false);
	}
	CHECK_STR_EQ(out, TEST_ROOT_OS_RELEASE);
	CHECK_INT_EQ(sh(box, "stat -f -c %t /", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_OVERLAYFS_MAGIC_HEX);
	CHECK_INT_EQ(sh(box, "test -d /workspace && touch $HOME/written && echo ok", out,
			sizeof(out)), 0);
	CHECK_STR_EQ(out, "ok");
	sandbox_destroy(box, harness_tests_failed > 0);
}

static void remove_work_dir(void)
{
	char cmd[sizeof(work_dir) + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", work_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", work_dir);
}

int main(int argc, char **argv)
{
	struct vm_disk disks[2];

	if (argc != 2) {
		fprintf(stderr, "usage: vm_disks PATH-TO-VOIDBOX\n");
		return 2;
	}
	voidbox_cli = argv[1];
	vm_test_require_vm(&image);
	snprintf(work_dir, sizeof(work_dir), "%s", TEST_DIR_TEMPLATE);
	if (!mkdtemp(work_dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(ro_path, sizeof(ro_path), "%s/ro.img", work_dir);
	snprintf(rw_path, sizeof(rw_path), "%s/rw.img", work_dir);
	snprintf(snap_path, sizeof(snap_path), "%s/snapshot", work_dir);
	if (make_disk(ro_path, TEST_RO_TEXT, 0) < 0 || make_disk(rw_path, NULL, 0) < 0) {
		perror("disk files");
		return 1;
	}
	disks[0] = (struct vm_disk){ .path = ro_path, .read_only = true };
	disks[1] = (struct vm_disk){ .path = rw_path, .read_only = false };
	if (boot(disks, 2, "first.log", &first_vm) < 0) {
		printf("0 passed, 1 failed\n");
		return 1;
	}
	RUN_TEST(test_guest_sees_disks);
	RUN_TEST(test_read_only_disk_refuses_writes);
	RUN_TEST(test_writable_disk_reaches_host);
	RUN_TEST(test_disk_workers_confined);
	RUN_TEST(test_snapshot_restore_rules);
	if (first_vm)
		sandbox_destroy(first_vm, true);
	RUN_TEST(test_data_outlives_vms);
	RUN_TEST(test_image_root);
	if (harness_tests_failed)
		fprintf(stderr, "guest consoles kept in %s\n", work_dir);
	else
		remove_work_dir();
	return harness_finish();
}
