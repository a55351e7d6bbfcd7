/*
 * Snapshots on real VMs: one cold boot (2 vCPUs) serves every check, because restores are
 * cheap and boots are not. The booted VM gets a file and a background process, is saved as a
 * base, changes a little, is saved as a diff against that base; then two VMs restored from
 * the base at once, one from the diff and forked children (of the cold-booted parent, then
 * twice of the parent mapping the base) are each checked for the state they must (and must
 * not) see, their CID and their session secrets. Last, the base is restored once more from a
 * tmpfs that keeps files in 2 MiB pages, and a diff of that VM restored in turn.
 *
 * Needs a /dev/kvm that runs standard guests (tests/vm/run-vm-suite finds one or skips; under
 * VOIDBOX_REQUIRE_VM=1 a skip is a failure).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "host/control_channel.h"
#include "host/vsock_connect.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"
#include "vmm/memory.h"
#include "vmm/snapshot.h"
#include "vmm/working_set.h"
#include "vm_test.h"

#define TEST_VM_MEMORY_MB 256
#define TEST_VM_VCPUS 2
#define TEST_FORK_CHILDREN 3
#define TEST_WRONG_SECRET_DEADLINE_MS 3000
#define TEST_CONNECT_TIMEOUT_MS 2000
#define TEST_RESTORE_TIMEOUT_MS 60000
#define TEST_OUTPUT_MAX 256
/* how old the base snapshot is when it is restored, so a stale guest clock shows */
#define TEST_CLOCK_AGE_S 3
#define TEST_HEX_LEN (2 * PROTO_SECRET_SIZE + 1)
/* in the working directory (the build tree), so logs survive a nested run */
#define TEST_DIR_TEMPLATE "voidbox-snaptest-XXXXXX"
/* snapshots on the local /tmp: a build tree shared into the nested L1 is slow to write */
#define TEST_SNAP_TEMPLATE "/tmp/voidbox-snapdirs-XXXXXX"
/* a tmpfs that keeps files in 2 MiB pages, in this process's own mount namespace */
#define TEST_HUGE_TMPFS_OPTIONS "huge=always,size=768m"

static struct sandbox *parent_vm;
static char work_dir[sizeof(TEST_DIR_TEMPLATE)];
static char snap_dir[sizeof(TEST_SNAP_TEMPLATE)];
static char base_dir[PATH_MAX];
static char diff_dir[PATH_MAX];
static char snapshot_secret[TEST_HEX_LEN];
static struct vm_snapshot_info base_info;
static char huge_dir[PATH_MAX];
static char huge_unavailable[PATH_MAX + 256]; /* why the huge-page tmpfs could not be mounted */

static long now_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec * 1000L + now.tv_nsec / 1000000L;
}

struct test_connector {
	const char *socket_path;
};

static int test_connect(void *opaque, int timeout_ms)
{
	const struct test_connector *connector = opaque;

	return vsock_host_connect(connector->socket_path, PROTO_GUEST_AGENT_PORT,
				  timeout_ms < TEST_CONNECT_TIMEOUT_MS ? timeout_ms
								       : TEST_CONNECT_TIMEOUT_MS);
}

/* True when the agent of box completes a handshake with secret_hex. */
static bool handshake_works(struct sandbox *box, const char *secret_hex)
{
	struct test_connector connector = { .socket_path = sandbox_vsock_socket_path(box) };
	struct control_channel_config cfg;
	struct control_channel *ch;
	bool ok;

	memset(&cfg, 0, sizeof(cfg));
	cfg.connect = test_connect;
	cfg.connect_opaque = &connector;
	cfg.connect_deadline_ms = TEST_WRONG_SECRET_DEADLINE_MS;
	if (proto_secret_from_hex(secret_hex, cfg.secret) != 0)
		return false;
	ch = control_channel_create(&cfg);
	if (!ch)
		return false;
	ok = control_channel_connect(ch) == 0;
	control_channel_destroy(ch);
	return ok;
}

/*
 * The guest's entropy device works in box: the kernel chose virtio-rng as its hardware RNG,
 * /dev/hwrng gives 64 bytes, and a second read gives other bytes. The hex of the first read
 * goes to sample (TEST_OUTPUT_MAX bytes) for comparisons between VMs.
 */
static void check_entropy_device(struct sandbox *box, char *sample)
{
	char out[TEST_OUTPUT_MAX], again[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(sh(box, "cat /sys/class/misc/hw_random/rng_current", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "virtio_rng.0");
	CHECK_INT_EQ(sh(box, "head -c 64 /dev/hwrng | od -An -tx1 | tr -d ' \\n'", out,
			sizeof(out)), 0);
	CHECK_INT_EQ((int)strlen(out), 128);
	CHECK_INT_EQ(sh(box, "head -c 64 /dev/hwrng | od -An -tx1 | tr -d ' \\n'", again,
			sizeof(again)), 0);
	CHECK(strcmp(out, again) != 0);
	if (sample)
		snprintf(sample, TEST_OUTPUT_MAX, "%s", out);
}

static struct sandbox *restore(const char *dir)
{
	static int restores;
	char serial_log[PATH_MAX];
	struct sandbox_restore_config cfg = { .snapshot_dir = dir, .serial_log_path = serial_log,
					       .timeout_ms = TEST_RESTORE_TIMEOUT_MS };
	struct sandbox *box = NULL;
	char err[1024];
	long started = now_ms();

	snprintf(serial_log, sizeof(serial_log), "%s/restore-%d.log", work_dir, restores++);

	if (sandbox_start_from_snapshot(&cfg, &box, err, sizeof(err)) < 0) {
		fprintf(stderr, "  restore of %s failed: %s\n", dir, err);
		return NULL;
	}
	fprintf(stderr, "  restored %s in %ld ms\n", dir, now_ms() - started);
	return box;
}

static void test_base_snapshot_saved(void)
{
	const struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_BASE,
						  .after = VM_SNAPSHOT_RESUME };
	char out[TEST_OUTPUT_MAX], err[1024];
	long started;

	CHECK_INT_EQ(sh(parent_vm, "echo before-snapshot > /tmp/marker && "
			"(while true; do sleep 1; done) >/dev/null 2>&1 & echo $! > /tmp/bg.pid",
			NULL, 0), 0);
	/* the secret the agent answers to when the snapshot is taken (the guest cannot read it) */
	sandbox_secret_hex(parent_vm, snapshot_secret);
	CHECK_INT_EQ((int)strlen(snapshot_secret), 2 * PROTO_SECRET_SIZE);
	started = now_ms();
	CHECK_INT_EQ(sandbox_snapshot(parent_vm, base_dir, &opts, err, sizeof(err)), 0);
	fprintf(stderr, "  base snapshot in %ld ms\n", now_ms() - started);
	CHECK_INT_EQ(vm_snapshot_inspect(base_dir, &base_info, err, sizeof(err)), 0);
	CHECK_INT_EQ(base_info.type, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(base_info.vcpus, TEST_VM_VCPUS);
	CHECK_INT_EQ(base_info.memory_mb, TEST_VM_MEMORY_MB);
	CHECK(base_info.cid == sandbox_guest_cid(parent_vm));
	/* the parent keeps running after a base with RESUME */
	CHECK_INT_EQ(sh(parent_vm, "cat /tmp/marker", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "before-snapshot");
}

static void test_diff_snapshot_is_small(void)
{
	const struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_DIFF,
						  .parent_dir = base_dir,
						  .after = VM_SNAPSHOT_RESUME };
	struct vm_snapshot_info info;
	char err[1024];
	long started;

	CHECK_INT_EQ(sh(parent_vm, "echo after-base > /tmp/after-base", NULL, 0), 0);
	started = now_ms();
	CHECK_INT_EQ(sandbox_snapshot(parent_vm, diff_dir, &opts, err, sizeof(err)), 0);
	fprintf(stderr, "  diff snapshot in %ld ms\n", now_ms() - started);
	CHECK_INT_EQ(vm_snapshot_inspect(diff_dir, &info, err, sizeof(err)), 0);
	CHECK_INT_EQ(info.type, VM_SNAPSHOT_DIFF);
	CHECK(info.parent_id == base_info.id);
	CHECK(info.diff_pages > 0);
	fprintf(stderr, "  diff: %llu pages, %llu bytes; base: %llu bytes\n",
		(unsigned long long)info.diff_pages, (unsigned long long)info.memory_bytes,
		(unsigned long long)base_info.memory_bytes);
	CHECK(info.memory_bytes * 4 < base_info.memory_bytes);
}

/* 32 bytes of the guest kernel's CRNG (getrandom() behind /dev/urandom), as hex. */
static int urandom_sample(struct sandbox *box, char *out)
{
	return sh(box, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'", out,
		  TEST_OUTPUT_MAX);
}

/*
 * The restored guest's wall clock is the host's (the rekey sets it), not the snapshot's:
 * the snapshot is at least TEST_CLOCK_AGE_S old when this runs, so a clock left alone would
 * be that far behind.
 */
static void check_clock_is_hosts(struct sandbox *box)
{
	char out[TEST_OUTPUT_MAX];
	time_t before = time(NULL), after;
	long long guest;

	CHECK_INT_EQ(sh(box, "date +%s", out, sizeof(out)), 0);
	after = time(NULL);
	guest = atoll(out);
	if (guest < (long long)before - 1 || guest > (long long)after + 1)
		fprintf(stderr, "  guest clock %lld, host %lld..%lld\n", guest, (long long)before,
			(long long)after);
	CHECK(guest >= (long long)before - 1 && guest <= (long long)after + 1);
}

static void test_restore_base_twice_at_once(void)
{
	struct sandbox *first, *second;
	char out[TEST_OUTPUT_MAX], first_secret[TEST_HEX_LEN], second_secret[TEST_HEX_LEN];
	char first_random[TEST_OUTPUT_MAX], second_random[TEST_OUTPUT_MAX];
	long long age = (long long)time(NULL) - (long long)(base_info.created_unix_ns / 1000000000ULL);

	/* let the snapshot's clock fall behind the host's, so a restored clock is told apart */
	if (age < TEST_CLOCK_AGE_S)
		sleep((unsigned int)(TEST_CLOCK_AGE_S - age));
	first = restore(base_dir);
	second = restore(base_dir);

	CHECK(first != NULL && second != NULL);
	if (!first || !second)
		goto out;
	CHECK_INT_EQ(sh(first, "cat /tmp/marker", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "before-snapshot");
	CHECK_INT_EQ(sh(first, "kill -0 $(cat /tmp/bg.pid) && echo alive", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "alive");
	CHECK_INT_EQ(sh(first, "test -e /tmp/after-base && echo yes || echo no", out,
			sizeof(out)), 0);
	CHECK_STR_EQ(out, "no");
	CHECK(sandbox_guest_cid(first) == base_info.cid);
	CHECK_INT_EQ(sh(second, "echo second > /tmp/who && cat /tmp/who", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "second");
	CHECK_INT_EQ(sh(first, "cat /tmp/who 2>/dev/null || echo none", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "none");
	sandbox_secret_hex(first, first_secret);
	sandbox_secret_hex(second, second_secret);
	CHECK(strcmp(first_secret, second_secret) != 0);
	CHECK(strcmp(first_secret, snapshot_secret) != 0);
	CHECK(!handshake_works(first, snapshot_secret));
	CHECK(!handshake_works(second, first_secret));
	CHECK(handshake_works(first, first_secret));
	/* clone hygiene beyond the secret: each clone's clock is now, its CRNG its own */
	check_clock_is_hosts(first);
	check_clock_is_hosts(second);
	CHECK_INT_EQ(urandom_sample(first, first_random), 0);
	CHECK_INT_EQ(urandom_sample(second, second_random), 0);
	CHECK_INT_EQ((int)strlen(first_random), 64);
	CHECK(strcmp(first_random, second_random) != 0);
out:
	sandbox_destroy(first, harness_tests_failed > 0);
	sandbox_destroy(second, harness_tests_failed > 0);
}

/*
 * Whether this host's KVM maps memory ahead of a vCPU (KVM_PRE_FAULT_MEMORY, Linux 6.10): a
 * restore with a working-set list must then have mapped it, and without it must not claim to.
 */
static bool kvm_can_pre_fault(void)
{
	char err[1024];
	struct kvm kvm;
	bool can;

	if (kvm_open(&kvm, err, sizeof(err)) < 0)
		return false;
	can = kvm.has_pre_fault_memory;
	kvm_close(&kvm);
	return can;
}

/*
 * The base's list, recorded by a real guest on its way to its first answer: some of its pages
 * were written (a restore copies those in ahead), most only read.
 */
static void check_base_list_marks_written_runs(void)
{
	struct guest_memory layout;
	struct working_set ws;
	char err[1024] = "";

	CHECK_INT_EQ(guest_memory_plan(&layout, base_info.memory_mb, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(working_set_load(base_dir, base_info.id, &layout, &ws, err, sizeof(err)), 0);
	fprintf(stderr, "  the base's working set: %llu pages, %llu of them written, in %u runs\n",
		(unsigned long long)ws.pages, (unsigned long long)ws.written_pages, ws.run_count);
	CHECK(ws.written_pages > 0);
	CHECK(ws.written_pages < ws.pages);
	working_set_release(&ws);
}

static void test_restore_diff(void)
{
	char list[PATH_MAX + sizeof(VM_WORKING_SET_FILE) + 1], out[TEST_OUTPUT_MAX];
	bool base_has_list, can_pre_fault = kvm_can_pre_fault();
	struct sandbox *box;

	/* the base's first restores recorded its list; a diff without one of its own takes it */
	snprintf(list, sizeof(list), "%s/%s", base_dir, VM_WORKING_SET_FILE);
	base_has_list = access(list, F_OK) == 0;
	box = restore(diff_dir);
	CHECK(box != NULL);
	if (!box)
		return;
	fprintf(stderr, "  working set mapped into KVM ahead: %llu pages (KVM %s it; the base %s a "
		"list)\n", (unsigned long long)sandbox_working_set_prefaulted_pages(box),
		can_pre_fault ? "can do" : "cannot do", base_has_list ? "has" : "has no");
	CHECK(base_has_list);
	if (base_has_list)
		check_base_list_marks_written_runs();
	if (base_has_list && can_pre_fault)
		CHECK(sandbox_working_set_prefaulted_pages(box) > 0);
	else
		CHECK_INT_EQ(sandbox_working_set_prefaulted_pages(box), 0);
	CHECK_INT_EQ(sh(box, "cat /tmp/marker /tmp/after-base", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "before-snapshot\nafter-base");
	CHECK_INT_EQ(sh(box, "nproc", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "2");
	check_entropy_device(box, NULL);
	sandbox_destroy(box, harness_tests_failed > 0);
}

/*
 * A cold-booted parent has no base to count from, so its fork writes its whole memory as one
 * (the other forks here are diffs against the base the parent maps by then).
 */
static void test_fork_cold_parent(void)
{
	struct sandbox *child = NULL;
	char out[TEST_OUTPUT_MAX], err[1024];
	long started = now_ms();
	int rc;

	CHECK_INT_EQ(sh(parent_vm, "echo cold > /tmp/cold-parent", NULL, 0), 0);
	rc = sandbox_fork(parent_vm, 1, &child, err, sizeof(err));
	fprintf(stderr, "  fork of a cold-booted parent in %ld ms\n", now_ms() - started);
	CHECK_INT_EQ(rc, 0);
	if (rc < 0) {
		fprintf(stderr, "  fork failed: %s\n", err);
		return;
	}
	CHECK_INT_EQ(sh(child, "cat /tmp/cold-parent; echo child > /tmp/cold-child", out,
			sizeof(out)), 0);
	CHECK_STR_EQ(out, "cold");
	CHECK_INT_EQ(sh(parent_vm, "ls /tmp/cold-child 2>/dev/null | wc -l", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "0");
	sandbox_destroy(child, harness_tests_failed > 0);
}

/*
 * Every thread of the running VMM (this process) that serves the guest -- vCPUs, the vsock
 * worker, the control channel's readers -- is confined by its role's seccomp filter: the
 * kernel shows Seccomp: 2 for each (src/vmm/thread_filter.h).
 */
static void test_vmm_threads_confined(void)
{
	int vcpus = 0;

	CHECK_INT_EQ(vm_test_unconfined_vmm_threads("vcpu", &vcpus), 0);
	CHECK(vcpus >= TEST_VM_VCPUS);
	vm_test_check_threads_confined("vsock-worker");
	vm_test_check_threads_confined("channel-reader");
}

/* The cold-booted VM has its entropy device (the restores and forks below check theirs). */
static void test_entropy_device(void)
{
	check_entropy_device(parent_vm, NULL);
}

static void test_fork_three_children(void)
{
	struct sandbox *children[TEST_FORK_CHILDREN] = { 0 };
	char samples[TEST_FORK_CHILDREN][TEST_OUTPUT_MAX];
	char random_samples[TEST_FORK_CHILDREN][TEST_OUTPUT_MAX];
	char out[TEST_OUTPUT_MAX], script[TEST_OUTPUT_MAX], err[1024];
	long started = now_ms();
	int rc = sandbox_fork(parent_vm, TEST_FORK_CHILDREN, children, err, sizeof(err));
	int vcpus = 0;

	fprintf(stderr, "  fork of %d children in %ld ms\n", TEST_FORK_CHILDREN, now_ms() - started);
	CHECK_INT_EQ(rc, 0);
	if (rc < 0) {
		fprintf(stderr, "  fork failed: %s\n", err);
		return;
	}
	/* right after the fork, before anything else runs in them: their CRNGs differ */
	for (int i = 0; i < TEST_FORK_CHILDREN; i++)
		CHECK_INT_EQ(urandom_sample(children[i], random_samples[i]), 0);
	for (int i = 1; i < TEST_FORK_CHILDREN; i++)
		CHECK(strcmp(random_samples[0], random_samples[i]) != 0);
	/* restored VMs confine their threads too: the parent's and every child's vCPUs */
	CHECK_INT_EQ(vm_test_unconfined_vmm_threads("vcpu", &vcpus), 0);
	CHECK(vcpus >= (TEST_FORK_CHILDREN + 1) * TEST_VM_VCPUS);
	for (int i = 0; i < TEST_FORK_CHILDREN; i++) {
		snprintf(script, sizeof(script), "echo %d > /tmp/child-%d", i, i);
		CHECK_INT_EQ(sh(children[i], script, NULL, 0), 0);
	}
	for (int i = 0; i < TEST_FORK_CHILDREN; i++) {
		CHECK_INT_EQ(sh(children[i], "cat /tmp/child-* | tr '\\n' ' '", out, sizeof(out)), 0);
		snprintf(script, sizeof(script), "%d ", i);
		CHECK_STR_EQ(out, script);
		CHECK_INT_EQ(sh(children[i], "cat /tmp/after-base", out, sizeof(out)), 0);
		CHECK_STR_EQ(out, "after-base");
		check_entropy_device(children[i], samples[i]);
	}
	/* each child draws its own bytes from the host, not a replay of the parent's */
	for (int i = 1; i < TEST_FORK_CHILDREN; i++)
		CHECK(strcmp(samples[0], samples[i]) != 0);
	CHECK_INT_EQ(sh(parent_vm, "ls /tmp/child-* 2>/dev/null | wc -l", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "0");
	CHECK_INT_EQ(sh(parent_vm, "echo parent-alive", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "parent-alive");
	for (int i = 0; i < TEST_FORK_CHILDREN; i++)
		sandbox_destroy(children[i], harness_tests_failed > 0);
}

/* A second fork of the same parent: a new diff, with what the parent wrote since the first. */
static void test_fork_again_from_forked_parent(void)
{
	struct sandbox *child = NULL;
	char out[TEST_OUTPUT_MAX], err[1024];
	long started = now_ms();
	int rc;

	CHECK_INT_EQ(sh(parent_vm, "echo second-generation > /tmp/generation", NULL, 0), 0);
	rc = sandbox_fork(parent_vm, 1, &child, err, sizeof(err));
	fprintf(stderr, "  second fork of 1 child in %ld ms\n", now_ms() - started);
	CHECK_INT_EQ(rc, 0);
	if (rc < 0) {
		fprintf(stderr, "  fork failed: %s\n", err);
		return;
	}
	CHECK_INT_EQ(sh(child, "cat /tmp/generation /tmp/after-base", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "second-generation\nafter-base");
	CHECK_INT_EQ(sh(child, "ls /tmp/child-* 2>/dev/null | wc -l", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "0");
	CHECK_INT_EQ(sh(parent_vm, "echo parent-alive", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "parent-alive");
	sandbox_destroy(child, harness_tests_failed > 0);
}

static void test_missing_base_refused(void)
{
	char moved[PATH_MAX + 8], err[1024];
	struct vm_snapshot_info info;

	snprintf(moved, sizeof(moved), "%s.moved", base_dir);
	CHECK_INT_EQ(rename(base_dir, moved), 0);
	CHECK(vm_snapshot_inspect(diff_dir, &info, err, sizeof(err)) < 0);
	CHECK(strstr(err, "base") != NULL);
	CHECK(restore(diff_dir) == NULL);
	CHECK_INT_EQ(rename(moved, base_dir), 0);
}

/*
 * Mounts a huge-page tmpfs at huge_dir in a mount namespace of this process's own, made
 * before any thread exists so that every thread (the in-process VMMs') sees it and the mount
 * ends with the process. Leaves the reason in huge_unavailable when it cannot.
 */
static void mount_huge_tmpfs(void)
{
	snprintf(huge_dir, sizeof(huge_dir), "%s/huge", snap_dir);
	if (mkdir(huge_dir, 0700) < 0 || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("voidbox-test-huge", huge_dir, "tmpfs", 0, TEST_HUGE_TMPFS_OPTIONS) < 0)
		snprintf(huge_unavailable, sizeof(huge_unavailable),
			 "cannot mount a tmpfs with %s at %s: %s", TEST_HUGE_TMPFS_OPTIONS,
			 huge_dir, strerror(errno));
}

/* The kB of pid's mappings that the host maps with 2 MiB pages of tmpfs (smaps). */
static long shmem_pmd_mapped_kb(pid_t pid)
{
	char path[64], line[256];
	long total = 0, kb;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1)
			total += kb;
	}
	fclose(f);
	return total;
}

/* A VM restored from dir whose script prints expected; NULL (a failed check) if not restored. */
static struct sandbox *restore_showing(const char *dir, const char *script, const char *expected)
{
	struct sandbox *box = restore(dir);
	char out[TEST_OUTPUT_MAX];

	CHECK(box != NULL);
	if (box) {
		CHECK_INT_EQ(sh(box, script, out, sizeof(out)), 0);
		CHECK_STR_EQ(out, expected);
	}
	return box;
}

/*
 * A store on a tmpfs mounted huge=always (docs/performance.md): the restore maps the memory
 * file over a 2 MiB-aligned reservation, so what the guest only reads is mapped 2 MiB at a
 * time, and a guest write splits just that chunk. The restored guest must see its state, a
 * diff taken of it must hold what it wrote, and that diff must restore.
 */
static void test_restore_from_huge_page_tmpfs(void)
{
	char huge_base[PATH_MAX + 8], huge_diff[PATH_MAX + 8], cmd[3 * PATH_MAX];
	char out[TEST_OUTPUT_MAX], err[1024];
	struct sandbox *box;
	long pmd_kb;

	if (huge_unavailable[0]) {
		fprintf(stderr, "  not checked: %s\n", huge_unavailable);
		/* CI runs as root on kernels with transparent huge pages: there it must run */
		CHECK(!harness_vm_required());
		return;
	}
	snprintf(huge_base, sizeof(huge_base), "%s/base", huge_dir);
	snprintf(huge_diff, sizeof(huge_diff), "%s/diff", huge_dir);
	snprintf(cmd, sizeof(cmd), "cp -r --sparse=always '%s' '%s'", base_dir, huge_base);
	CHECK_INT_EQ(system(cmd), 0);
	box = restore_showing(huge_base, "cat /tmp/marker", "before-snapshot");
	if (!box)
		return;
	pmd_kb = shmem_pmd_mapped_kb(sandbox_vmm_pid(box));
	fprintf(stderr, "  guest memory mapped with 2 MiB pages: %ld kB\n", pmd_kb);
	CHECK(pmd_kb > 0);
	CHECK_INT_EQ(sh(box, "echo written-on-huge > /tmp/huge-marker", NULL, 0), 0);
	const struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_DIFF,
						  .parent_dir = huge_base,
						  .after = VM_SNAPSHOT_RESUME };
	CHECK_INT_EQ(sandbox_snapshot(box, huge_diff, &opts, err, sizeof(err)), 0);
	CHECK_INT_EQ(sh(box, "cat /tmp/huge-marker", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "written-on-huge");
	sandbox_destroy(box, harness_tests_failed > 0);
	box = restore_showing(huge_diff, "cat /tmp/marker /tmp/huge-marker",
			      "before-snapshot\nwritten-on-huge");
	sandbox_destroy(box, harness_tests_failed > 0);
}

static void remove_snapshot_dir(const char *dir)
{
	static const char *const names[] = { VM_SNAPSHOT_STATE_FILE, VM_SNAPSHOT_MEMORY_FILE,
					     VM_SNAPSHOT_DIFF_FILE };
	char path[PATH_MAX + 32];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	struct guest_image_paths image;
	struct sandbox_config cfg;
	char err[1024], parent_log[PATH_MAX];

	vm_test_require_vm(&image); /* VOIDBOX_LOG_LEVEL=info shows pause and fork timings */
	snprintf(work_dir, sizeof(work_dir), "%s", TEST_DIR_TEMPLATE);
	if (!mkdtemp(work_dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(snap_dir, sizeof(snap_dir), "%s", TEST_SNAP_TEMPLATE);
	if (!mkdtemp(snap_dir)) {
		perror("mkdtemp");
		return 1;
	}
	mount_huge_tmpfs();
	snprintf(base_dir, sizeof(base_dir), "%s/base", snap_dir);
	snprintf(diff_dir, sizeof(diff_dir), "%s/diff", snap_dir);
	memset(&cfg, 0, sizeof(cfg));
	cfg.kernel_path = image.kernel;
	cfg.initramfs_path = image.initramfs;
	cfg.memory_mb = TEST_VM_MEMORY_MB;
	cfg.vcpus = TEST_VM_VCPUS;
	snprintf(parent_log, sizeof(parent_log), "%s/parent.log", work_dir);
	cfg.serial_log_path = parent_log;
	if (sandbox_start(&cfg, &parent_vm, err, sizeof(err)) < 0) {
		fprintf(stderr, "FAIL: the test VM did not start: %s\n", err);
		printf("0 passed, 1 failed\n");
		return 1;
	}
	fprintf(stderr, "parent VM up in %ld ms (cid %lu)\n", sandbox_boot_ms(parent_vm),
		sandbox_guest_cid(parent_vm));
	RUN_TEST(test_vmm_threads_confined);
	RUN_TEST(test_entropy_device);
	RUN_TEST(test_fork_cold_parent);
	RUN_TEST(test_base_snapshot_saved);
	RUN_TEST(test_diff_snapshot_is_small);
	RUN_TEST(test_restore_base_twice_at_once);
	RUN_TEST(test_restore_diff);
	RUN_TEST(test_fork_three_children);
	RUN_TEST(test_fork_again_from_forked_parent);
	RUN_TEST(test_missing_base_refused);
	RUN_TEST(test_restore_from_huge_page_tmpfs);
	sandbox_destroy(parent_vm, harness_tests_failed > 0);
	remove_snapshot_dir(base_dir);
	remove_snapshot_dir(diff_dir);
	if (!huge_unavailable[0])
		umount2(huge_dir, MNT_DETACH);
	rmdir(huge_dir);
	rmdir(snap_dir);
	if (harness_tests_failed) {
		fprintf(stderr, "guest consoles kept in %s\n", work_dir);
	} else {
		char cmd[sizeof(work_dir) + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", work_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", work_dir);
	}
	return harness_finish();
}
