/*
 * Host directory mounts (virtio-fs) on a real VM: one cold boot with three shares -- a rw
 * one, a read-only one and an empty one -- serves every check, then a snapshot restore and a
 * fork check that the mounts survive.
 *
 * Checked: a file written in the guest read on the host and the reverse; nested mkdir,
 * rename, delete, chmod, truncate seen on the host; 100 MiB byte-exact both ways (sha256 on
 * each side); the empty share; the read-only share refusing writes with EROFS and its host
 * file unchanged; `tar x` of a tree with symlinks and hard links compared on the host by
 * checksum; symlinks (made by the guest or by the host) pointing outside the share never
 * reaching the host's files; a background writer holding a file open in the share across a
 * snapshot restore; a file removed on the host between snapshot and restore failing cleanly;
 * a forked child and its parent writing the same host directory; files opened without an
 * OPEN truncating, appending, refusing what their mode refuses and seeing a host change;
 * `find` over a 20,000-file tree the host made listing every file.
 *
 * Needs a /dev/kvm that runs standard guests (tests/vm/run-vm-suite finds one or skips).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "host/control_channel.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"
#include "vmm/snapshot.h"
#include "vm_test.h"

#define TEST_VM_MEMORY_MB 512
#define TEST_VM_VCPUS 1 /* 2-vCPU guests here wedged now and then under this I/O in the nested harness */
#define TEST_RESTORE_TIMEOUT_MS 120000
#define TEST_OUTPUT_MAX 4096
#define TEST_CMD_MAX 8192
#define TEST_BIG_MIB 100
/* 20,000 files: more nodes than a share once held, and than its node fd budget */
#define TEST_TREE_DIRS 100
#define TEST_TREE_FILES 200
#define TEST_SECRET "host-only secret"
#define TEST_KEEP_TEXT "read-only original"
/* host directories on the local /tmp: the test's build tree may be a slow shared folder */
#define TEST_DIR_TEMPLATE "/tmp/voidbox-mounts-XXXXXX"
#define TEST_LOG_DIR "vm-mounts-logs"
#define TEST_GUEST_RW "/mnt/rw"
#define TEST_GUEST_RO "/mnt/ro"
#define TEST_GUEST_EMPTY "/mnt/empty"

static struct sandbox *vm;
static char top[sizeof(TEST_DIR_TEMPLATE)];
static char rw_dir[PATH_MAX / 4], ro_dir[PATH_MAX / 4], empty_dir[PATH_MAX / 4];
static char outside_dir[PATH_MAX / 4], snap_dir[PATH_MAX / 4], log_dir[PATH_MAX / 4];


/* Runs a host shell command; its exit code and trimmed stdout. */
static int host(const char *cmd, char *out, size_t out_len)
{
	FILE *pipe = popen(cmd, "r");
	size_t n = 0;
	int status;

	if (!pipe)
		return -1;
	if (out && out_len) {
		n = fread(out, 1, out_len - 1, pipe);
		while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
			n--;
		out[n] = '\0';
	} else {
		char sink[256];

		while (fread(sink, 1, sizeof(sink), pipe) > 0)
			;
	}
	status = pclose(pipe);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_three_mounts_up(void)
{
	char out[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(sh(vm, "grep -c ' virtiofs ' /proc/mounts", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "3");
	if (strcmp(out, "3") != 0 &&
	    sh(vm, "dmesg | grep -i -E 'virtio|fuse|mount' | tail -40", out, sizeof(out)) >= 0)
		fprintf(stderr, "  guest kernel log:\n%s\n", out);
	CHECK_INT_EQ(sh(vm, "grep ' " TEST_GUEST_RO " ' /proc/mounts | grep -c ' ro[ ,]'", out,
			sizeof(out)), 0);
	CHECK_STR_EQ(out, "1");
	CHECK_INT_EQ(sh(vm, "ls -A " TEST_GUEST_EMPTY " | wc -l", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "0");
	CHECK_INT_EQ(sh(vm, "id -u; stat -c '%u:%g' " TEST_GUEST_RW, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "1000\n1000:1000");
}

static void test_write_both_ways(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	CHECK_INT_EQ(sh(vm, "echo from-guest > " TEST_GUEST_RW "/g.txt", NULL, 0), 0);
	snprintf(cmd, sizeof(cmd), "cat %s/g.txt && stat -c %%u %s/g.txt", rw_dir, rw_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	snprintf(cmd, sizeof(cmd), "from-guest\n%u", (unsigned int)geteuid());
	CHECK_STR_EQ(out, cmd);
	snprintf(cmd, sizeof(cmd), "echo from-host > %s/h.txt", rw_dir);
	CHECK_INT_EQ(host(cmd, NULL, 0), 0);
	CHECK_INT_EQ(sh(vm, "cat " TEST_GUEST_RW "/h.txt", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "from-host");
}

/*
 * A file a shell's `>` creates is written past the guest's page cache; a reader that cached its
 * partial last page in between two writes must still read the second write's bytes, not the
 * zeros its cached page holds there (the server moves the mtime the guest is shown on every
 * write). Under nested emulation the steps rarely share a tick of the host's clock; natively
 * they mostly do.
 */
static void test_reader_sees_later_writes(void)
{
	char out[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(sh(vm, "cd " TEST_GUEST_RW " && i=0; while [ $i -lt 20 ]; do "
			"exec 3> tail$i; printf hello >&3; read -r x < tail$i; printf world >&3; "
			"exec 3>&-; [ \"$(cat tail$i)\" = helloworld ] || echo \"stale tail$i\"; "
			"rm tail$i; i=$((i+1)); done; echo $i", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "20");
}

static void test_metadata_operations(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	CHECK_INT_EQ(sh(vm, "cd " TEST_GUEST_RW " && mkdir -p a/b/c && echo 0123456789 > a/b/c/f "
			"&& mv a/b/c/f a/moved && chmod 600 a/moved && truncate -s 4 a/moved && "
			"echo x > a/b/gone && rm a/b/gone && rmdir a/b/c", NULL, 0), 0);
	snprintf(cmd, sizeof(cmd), "cd %s/a && stat -c '%%a %%s' moved && cat moved && echo && "
		 "test -d b && test ! -e b/c && test ! -e b/gone && echo ok", rw_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "600 4\n0123\nok");
	/* rm -r of a directory larger than one READDIR reply, removing while it reads */
	CHECK_INT_EQ(sh(vm, "mkdir " TEST_GUEST_RW "/many && cd " TEST_GUEST_RW "/many && i=0; "
			"while [ $i -lt 300 ]; do : > file-$i; i=$((i+1)); done; "
			"cd / && rm -r " TEST_GUEST_RW "/many && echo gone", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "gone");
	/* the host changes a file the guest has cached: the guest sees it within the timeout */
	snprintf(cmd, sizeof(cmd), "printf changed > %s/a/moved", rw_dir);
	CHECK_INT_EQ(host(cmd, NULL, 0), 0);
	CHECK_INT_EQ(sh(vm, "sleep 2; cat " TEST_GUEST_RW "/a/moved", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "changed");
}

/*
 * Files open without an OPEN (the server answers ENOSYS, docs/devices.md): a truncating
 * open still truncates (it arrives as a SETATTR), an append appends, the sandbox user is
 * still refused a file its mode forbids, and a same-size host change to a file whose pages
 * the guest holds is seen once the attributes expire (1 s).
 */
static void test_files_without_open(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	CHECK_INT_EQ(sh(vm, "cd " TEST_GUEST_RW " && printf 0123456789 > t && printf ab > t && "
			"printf cd >> t && chmod 444 t && (printf no > t) 2>&1; "
			"printf no >> t 2>/dev/null || echo refused", out, sizeof(out)), 0);
	CHECK(strstr(out, "Permission denied") != NULL && strstr(out, "refused") != NULL);
	snprintf(cmd, sizeof(cmd), "cat %s/t && stat -c ' %%a' %s/t", rw_dir, rw_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "abcd 444");
	CHECK_INT_EQ(sh(vm, "printf aaaa > " TEST_GUEST_RW "/cached && cat " TEST_GUEST_RW
			"/cached", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "aaaa");
	snprintf(cmd, sizeof(cmd), "printf bbbb > %s/cached", rw_dir);
	CHECK_INT_EQ(host(cmd, NULL, 0), 0);
	CHECK_INT_EQ(sh(vm, "sleep 2; cat " TEST_GUEST_RW "/cached", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "bbbb");
}

/*
 * A tree of more entries than the share has fds for its nodes (20,000 files the host made):
 * `find` lists every one without an error, since the guest keeps every inode it looked up,
 * and a file deep in it still reads its bytes afterwards.
 */
static void test_tree_beyond_fd_budget(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	snprintf(cmd, sizeof(cmd), "mkdir %s/tree && cd %s/tree && for d in $(seq 1 %d); do "
		 "mkdir d$d && (cd d$d && seq -f f%%g 1 %d | xargs touch); done && "
		 "echo deep > d%d/f%d", rw_dir, rw_dir, TEST_TREE_DIRS, TEST_TREE_FILES,
		 TEST_TREE_DIRS, TEST_TREE_FILES);
	CHECK_INT_EQ(host(cmd, NULL, 0), 0);
	CHECK_INT_EQ(sh(vm, "find " TEST_GUEST_RW "/tree -type f > /tmp/tree.list "
			"2> /tmp/tree.err; echo $? $(wc -l < /tmp/tree.list) $(wc -l < /tmp/tree.err)",
			out, sizeof(out)), 0);
	snprintf(cmd, sizeof(cmd), "0 %d 0", TEST_TREE_DIRS * TEST_TREE_FILES);
	CHECK_STR_EQ(out, cmd);
	if (strcmp(out, cmd) != 0 && sh(vm, "head -5 /tmp/tree.err", out, sizeof(out)) >= 0)
		fprintf(stderr, "  find's errors:\n%s\n", out);
	snprintf(cmd, sizeof(cmd), "cat " TEST_GUEST_RW "/tree/d%d/f%d && cat " TEST_GUEST_RW
		 "/tree/d1/f1 | wc -c", TEST_TREE_DIRS, TEST_TREE_FILES);
	CHECK_INT_EQ(sh(vm, cmd, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "deep\n0");
}

static void test_big_file_both_ways(void)
{
	char guest_sum[TEST_OUTPUT_MAX], host_sum[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	snprintf(cmd, sizeof(cmd), "head -c %dM /dev/urandom > %s/big.host && "
		 "sha256sum %s/big.host | cut -d' ' -f1", TEST_BIG_MIB, rw_dir, rw_dir);
	CHECK_INT_EQ(host(cmd, host_sum, sizeof(host_sum)), 0);
	CHECK_INT_EQ(sh(vm, "sha256sum " TEST_GUEST_RW "/big.host | cut -d' ' -f1", guest_sum,
			sizeof(guest_sum)), 0);
	CHECK_STR_EQ(guest_sum, host_sum);
	snprintf(cmd, sizeof(cmd), "dd if=/dev/urandom of=" TEST_GUEST_RW "/big.guest bs=1048576 "
		 "count=%d 2>/dev/null && sync && sha256sum " TEST_GUEST_RW "/big.guest | "
		 "cut -d' ' -f1", TEST_BIG_MIB);
	CHECK_INT_EQ(sh(vm, cmd, guest_sum, sizeof(guest_sum)), 0);
	snprintf(cmd, sizeof(cmd), "stat -c %%s %s/big.guest && sha256sum %s/big.guest | "
		 "cut -d' ' -f1", rw_dir, rw_dir);
	CHECK_INT_EQ(host(cmd, host_sum, sizeof(host_sum)), 0);
	snprintf(cmd, sizeof(cmd), "%d\n%s", TEST_BIG_MIB << 20, guest_sum);
	CHECK_STR_EQ(host_sum, cmd);
	snprintf(cmd, sizeof(cmd), "rm -f %s/big.host %s/big.guest", rw_dir, rw_dir);
	host(cmd, NULL, 0);
}

static void test_read_only_share(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	CHECK_INT_EQ(sh(vm, "cat " TEST_GUEST_RO "/keep.txt", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_KEEP_TEXT);
	CHECK_INT_EQ(sh(vm, "echo overwritten > " TEST_GUEST_RO "/keep.txt 2>&1; "
			"touch " TEST_GUEST_RO "/new 2>&1; rm -f " TEST_GUEST_RO "/keep.txt 2>&1; "
			"true", out, sizeof(out)), 0);
	CHECK(strstr(out, "Read-only file system") != NULL);
	snprintf(cmd, sizeof(cmd), "cat %s/keep.txt && echo && ls -A %s | wc -l", ro_dir, ro_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, TEST_KEEP_TEXT "\n1");
}

/* Checksums of regular files, symlink targets and hard-link counts of a tree, sorted. */
#define TEST_TREE_MANIFEST                                                                    \
	"find . -type f -exec sha256sum {} + | sort; "                                        \
	"find . -type l | sort | while read l; do echo \"$l -> $(readlink \"$l\")\"; done; "   \
	"find . -type f -links +1 | sort"

static void test_tar_with_links(void)
{
	char expected[TEST_OUTPUT_MAX], got[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX];

	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s && mkdir -p src/d/e && cd src && head -c 300000 /dev/urandom > "
		 "d/blob && echo text > d/e/t && ln d/blob d/e/hard && ln -s e/t d/rel && "
		 "ln -s /etc/hostname abs && ln -s d/e dirlink && cd .. && tar cf tree.tar -C src . "
		 "&& mv tree.tar %s/ && cd src && " TEST_TREE_MANIFEST,
		 top, rw_dir);
	CHECK_INT_EQ(host(cmd, expected, sizeof(expected)), 0);
	CHECK_INT_EQ(sh(vm, "mkdir " TEST_GUEST_RW "/x && tar xf " TEST_GUEST_RW
			"/tree.tar -C " TEST_GUEST_RW "/x", NULL, 0), 0);
	snprintf(cmd, sizeof(cmd), "cd %s/x && " TEST_TREE_MANIFEST, rw_dir);
	CHECK_INT_EQ(host(cmd, got, sizeof(got)), 0);
	CHECK_STR_EQ(got, expected);
	CHECK(strstr(got, "./d/e/hard") != NULL && strstr(got, "-> /etc/hostname") != NULL);
	/* the guest reads its own extraction the same way */
	CHECK_INT_EQ(sh(vm, "cd " TEST_GUEST_RW "/x && cat d/rel && stat -c %h d/blob", got,
			sizeof(got)), 0);
	CHECK_STR_EQ(got, "text\n2");
}

static void test_symlinks_stay_inside(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX], script[TEST_CMD_MAX];

	/* a link the host made, and one the guest makes, to the host's secret */
	snprintf(cmd, sizeof(cmd), "ln -s %s/secret %s/hostlink && ln -s ../outside %s/uplink",
		 outside_dir, rw_dir, rw_dir);
	CHECK_INT_EQ(host(cmd, NULL, 0), 0);
	snprintf(script, sizeof(script),
		 "cd " TEST_GUEST_RW " && ln -s %s/secret guestlink; "
		 "cat hostlink guestlink uplink/secret ../outside/secret %s/secret 2>/dev/null; "
		 "ls uplink/ 2>/dev/null; true", outside_dir, outside_dir);
	CHECK_INT_EQ(sh(vm, script, out, sizeof(out)), 0);
	CHECK(strstr(out, TEST_SECRET) == NULL);
	CHECK(strstr(out, "secret") == NULL);
	/* the guest's link is a plain symlink on the host, and nothing changed outside */
	snprintf(cmd, sizeof(cmd), "readlink %s/guestlink && cat %s/secret && echo && "
		 "ls -A %s | wc -l", rw_dir, outside_dir, outside_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	snprintf(script, sizeof(script), "%s/secret\n%s\n1", outside_dir, TEST_SECRET);
	CHECK_STR_EQ(out, script);
}

static struct sandbox *restore(const char *dir)
{
	char serial_log[PATH_MAX];
	struct sandbox_restore_config cfg = { .snapshot_dir = dir, .serial_log_path = serial_log,
					       .timeout_ms = TEST_RESTORE_TIMEOUT_MS };
	struct sandbox *box = NULL;
	char err[1024];

	snprintf(serial_log, sizeof(serial_log), "%s/restore.log", log_dir);
	if (sandbox_start_from_snapshot(&cfg, &box, err, sizeof(err)) < 0) {
		fprintf(stderr, "  restore of %s failed: %s\n", dir, err);
		return NULL;
	}
	return box;
}

/* After every kind of file call: the shares' workers served them under their filter. */
static void test_share_workers_confined(void)
{
	vm_test_check_threads_confined("fs-worker");
}

static void test_snapshot_restore_keeps_mounts(void)
{
	const struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_BASE,
						  .after = VM_SNAPSHOT_RESUME };
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX], err[1024], before[64], after[64];
	struct sandbox *restored;

	/* a shell in the share, holding a file open, writing every 0.2 s */
	CHECK_INT_EQ(sh(vm, "mkdir -p " TEST_GUEST_RW "/w && cd " TEST_GUEST_RW "/w && "
			"echo keep > kept && echo soon-gone > vanish || exit 1; "
			"setsid sh -c 'exec 3>>ticks; while :; do echo t >&3; sleep 0.2; done' "
			"</dev/null >/dev/null 2>&1 & echo $! > /tmp/writer.pid; sleep 1; cat kept",
			out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "keep");
	CHECK_INT_EQ(sh(vm, "cat " TEST_GUEST_RW "/w/vanish", out, sizeof(out)), 0);
	CHECK_INT_EQ(sandbox_snapshot(vm, snap_dir, &opts, err, sizeof(err)), 0);
	/* from here only the restored VM's copy of the writer runs */
	CHECK_INT_EQ(sh(vm, "kill $(cat /tmp/writer.pid)", NULL, 0), 0);
	snprintf(cmd, sizeof(cmd), "rm %s/w/vanish", rw_dir);
	CHECK_INT_EQ(host(cmd, NULL, 0), 0);
	restored = restore(snap_dir);
	CHECK(restored != NULL);
	if (!restored)
		return;
	CHECK_INT_EQ(sh(restored, "cd " TEST_GUEST_RW "/w && cat kept && echo restored >> kept",
			out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "keep");
	snprintf(cmd, sizeof(cmd), "cat %s/w/kept", rw_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "keep\nrestored");
	/* the vanished file is an error in the guest, and the share still works after it */
	CHECK(sh(restored, "sleep 1; cat " TEST_GUEST_RW "/w/vanish", NULL, 0) != 0);
	CHECK_INT_EQ(sh(restored, "ls " TEST_GUEST_RW "/w | grep -c vanish", out, sizeof(out)),
		     1);
	CHECK_STR_EQ(out, "0");
	/* the background writer's open file keeps growing on the host after the restore */
	snprintf(cmd, sizeof(cmd), "wc -l < %s/w/ticks", rw_dir);
	CHECK_INT_EQ(host(cmd, before, sizeof(before)), 0);
	CHECK_INT_EQ(sh(restored, "sleep 2", NULL, 0), 0);
	CHECK_INT_EQ(host(cmd, after, sizeof(after)), 0);
	CHECK(atoi(after) > atoi(before));
	CHECK_INT_EQ(sh(restored, "grep -c ' virtiofs ' /proc/mounts", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "3");
	sandbox_destroy(restored, harness_tests_failed > 0);
}

static void test_fork_shares_directory(void)
{
	char out[TEST_OUTPUT_MAX], cmd[TEST_CMD_MAX], err[1024];
	struct sandbox *child = NULL;
	int rc = sandbox_fork(vm, 1, &child, err, sizeof(err));

	CHECK_INT_EQ(rc, 0);
	if (rc < 0) {
		fprintf(stderr, "  fork failed: %s\n", err);
		return;
	}
	CHECK_INT_EQ(sh(child, "cat " TEST_GUEST_RW "/g.txt && echo child > " TEST_GUEST_RW
			"/from-child", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "from-guest");
	CHECK_INT_EQ(sh(vm, "sleep 2; cat " TEST_GUEST_RW "/from-child", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "child");
	snprintf(cmd, sizeof(cmd), "cat %s/from-child", rw_dir);
	CHECK_INT_EQ(host(cmd, out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "child");
	sandbox_destroy(child, harness_tests_failed > 0);
}

static int setup_dirs(void)
{
	char cmd[TEST_CMD_MAX];

	snprintf(top, sizeof(top), "%s", TEST_DIR_TEMPLATE);
	if (!mkdtemp(top))
		return -1;
	snprintf(rw_dir, sizeof(rw_dir), "%s/rw", top);
	snprintf(ro_dir, sizeof(ro_dir), "%s/ro", top);
	snprintf(empty_dir, sizeof(empty_dir), "%s/empty", top);
	snprintf(outside_dir, sizeof(outside_dir), "%s/outside", top);
	snprintf(snap_dir, sizeof(snap_dir), "%s/snapshot", top);
	/* consoles in the working directory (the build tree): /tmp may vanish with a nested L1 */
	snprintf(log_dir, sizeof(log_dir), "%s", TEST_LOG_DIR);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s %s %s %s %s && printf '%s' > %s/keep.txt && "
		 "printf '%s' > %s/secret", rw_dir, ro_dir, empty_dir, outside_dir, log_dir,
		 TEST_KEEP_TEXT, ro_dir, TEST_SECRET, outside_dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	struct guest_image_paths image;
	struct sandbox_config cfg;
	char err[1024], serial_log[PATH_MAX], cmd[TEST_CMD_MAX];

	vm_test_require_vm(&image);
	if (setup_dirs() < 0) {
		perror("setting up the host directories");
		return 1;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.kernel_path = image.kernel;
	cfg.initramfs_path = image.initramfs;
	cfg.memory_mb = TEST_VM_MEMORY_MB;
	cfg.vcpus = TEST_VM_VCPUS;
	snprintf(serial_log, sizeof(serial_log), "%s/parent.log", log_dir);
	cfg.serial_log_path = serial_log;
	cfg.mounts[0] = (struct sandbox_mount){ .host_dir = rw_dir, .guest_dir = TEST_GUEST_RW };
	cfg.mounts[1] = (struct sandbox_mount){ .host_dir = ro_dir, .guest_dir = TEST_GUEST_RO,
						.read_only = true };
	cfg.mounts[2] = (struct sandbox_mount){ .host_dir = empty_dir,
						.guest_dir = TEST_GUEST_EMPTY };
	cfg.mount_count = 3;
	if (sandbox_start(&cfg, &vm, err, sizeof(err)) < 0) {
		fprintf(stderr, "FAIL: the test VM did not start: %s\n", err);
		printf("0 passed, 1 failed\n");
		return 1;
	}
	fprintf(stderr, "VM with three mounts up in %ld ms\n", sandbox_boot_ms(vm));
	RUN_TEST(test_three_mounts_up);
	RUN_TEST(test_write_both_ways);
	RUN_TEST(test_reader_sees_later_writes);
	RUN_TEST(test_metadata_operations);
	RUN_TEST(test_files_without_open);
	RUN_TEST(test_read_only_share);
	RUN_TEST(test_symlinks_stay_inside);
	RUN_TEST(test_tar_with_links);
	RUN_TEST(test_tree_beyond_fd_budget);
	RUN_TEST(test_big_file_both_ways);
	RUN_TEST(test_share_workers_confined);
	RUN_TEST(test_snapshot_restore_keeps_mounts);
	RUN_TEST(test_fork_shares_directory);
	sandbox_destroy(vm, harness_tests_failed > 0);
	if (harness_tests_failed) {
		fprintf(stderr, "guest consoles and host directories kept in %s\n", top);
	} else {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", top);
	}
	return harness_finish();
}
