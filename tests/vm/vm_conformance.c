/*
 * VM conformance: boots real micro-VMs under our VMM and checks the backend contract through
 * the control channel. Boots are the expensive part (seconds each under nested KVM), so one VM
 * runs every RPC check in turn (under an allowlist of the commands they use) and ends with a
 * guest-initiated poweroff; the CLI checks
 * (exit status, streaming, a kernel that cannot boot) use `voidbox exec` as a user would.
 *
 * Needs a /dev/kvm that runs standard guests: run natively, or through scripts/with-nested-kvm
 * (tests/vm/run-vm-suite decides). Without one it exits 77 and prints why, or fails under
 * VOIDBOX_REQUIRE_VM=1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/host_env.h"
#include "harness.h"
#include "host/control_channel.h"
#include "sandbox/sandbox.h"
#include "sandbox/vmm_cgroup.h"
#include "sandbox/vmm_jail.h"
#include "sandbox/vmm_msg.h"
#include "store/cpio_newc.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"
#include "vm_test.h"
#include "vmm_process_probe.h"

#define TEST_VM_MEMORY_MB 512
#define TEST_VM_VCPUS 2
#define TEST_MIB (1024ull * 1024ull)
/* Set (to 1) where the host promises cgroup v2 caps: the nested L1's init (scripts/nested). */
#define TEST_CAPS_EXPECTED_ENV "VOIDBOX_VMM_CGROUP_EXPECTED"
/* the host promises that unprivileged users may run VMs (scripts/nested/l1-init) */
#define TEST_UNPRIVILEGED_EXPECTED_ENV "VOIDBOX_UNPRIVILEGED_VMS_EXPECTED"
#define TEST_UNPRIVILEGED_ID 65534 /* nobody */
#define TEST_UNPRIVILEGED_HOME_TEMPLATE "/tmp/voidbox-unprivileged-XXXXXX"
#define TEST_UNPRIVILEGED_MARKER "unprivileged-vm-running"
#define TEST_UNPRIVILEGED_SCRIPT "echo " TEST_UNPRIVILEGED_MARKER "; sleep 5; echo done"
#define TEST_UNPRIVILEGED_MEMORY_MB "256"
#define TEST_UNPRIVILEGED_WAIT_S 600
#define TEST_UNPRIVILEGED_POLL_NS 100000000L
#define TEST_UNPRIVILEGED_HOME_MODE 0755
#define TEST_VMM_BINARY_NAME "voidbox-vmm"
#define TEST_VMM_BINARY_ENV "VOIDBOX_VMM_BINARY"
/* opened by the test before the sandbox starts; its VMM process must not hold it */
#define TEST_PLANTED_FD_PATH "/dev/zero"
/* An image whose /init prints this and never starts the agent, booted with this timeout. */
#define TEST_NO_AGENT_MARKER "this-initramfs-runs-no-guest-agent"
#define TEST_NO_AGENT_INIT_MODE 0755
#define TEST_NO_AGENT_BOOT_TIMEOUT_S "30"
/* A host directory the VM shares (virtio-fs), so the VMM process's jail holds a share. */
#define TEST_SHARE_TEMPLATE "/tmp/voidbox-conformance-share-XXXXXX"
#define TEST_SHARE_GUEST "/mnt/conformance"
#define TEST_SHARE_FROM_HOST "from-host\n"
#define TEST_SHARE_FROM_GUEST "from-guest\n"
#define TEST_SHARE_FILE_MODE 0644
/* The test VM's allowlist: the commands the checks run, and nothing else. */
#define TEST_VM_ALLOWED "sh", "echo", "cat", "test", "nproc"
#define TEST_SEQUENTIAL_EXECS 100
#define TEST_CONCURRENT_EXECS 16
#define TEST_STDIN_BYTES (256 * 64)
#define TEST_RPC_TIMEOUT_MS 30000
/*
 * Every exec of these checks is bounded, so one the guest never answers fails the check within
 * this plus the host's reply grace (control_channel.c) instead of stalling the program until
 * its meson timeout. Each command takes well under a second; the longest waits for the host
 * for at most TEST_STREAM_WAIT_SECS and passes that bound itself. It is longer than the
 * liveness check takes to find a guest that stopped altogether (about 80 s), so such a guest
 * fails with the liveness check's error, which CI knows for a harness fault (.ci/run).
 */
#define TEST_EXEC_TIMEOUT_SECS 90
/* in the liveness check's error: the guest answers nothing, so a probe would only wait */
#define TEST_LIVENESS_FAILED "liveness check failed"
/* what the guest, the host and the VMM process show once an exec went unanswered */
#define TEST_PROBE_TIMEOUT_SECS 20
#define TEST_PROBE_SCRIPT \
	"for t in /proc/[0-9]*/task/*; do echo \"$t $(cat $t/stat 2>/dev/null)\"; done"
#define TEST_SERIAL_TAIL_BYTES 4096
/*
 * KVM's counters of the test VM in debugfs (the nested harness's L1 mounts it), sampled this
 * far apart once an exec went unanswered. In the harness's nested page-walk fault
 * (docs/testing.md) one vCPU loops on an emulated #PF delivery, so KVM injects page faults
 * thousands of times a second while the other vCPU may still answer the agent's liveness
 * check; a healthy guest has KVM inject next to none (nested paging handles its own faults).
 */
#define TEST_KVM_DEBUGFS "/sys/kernel/debug/kvm"
#define TEST_KVM_SAMPLE_NS 1000000000L
#define TEST_KVM_PF_LOOP_PER_SEC 1000ULL
#define TEST_KVM_PF_LOOP_SIGNATURE "KVM injects page faults into the guest in a loop"
#define TEST_JOB_ERROR_MAX 512
/* bounds a command that waits for the host; reaching it means the host's part never came */
#define TEST_STREAM_WAIT_SECS 120
#define TEST_STREAM_RELEASE "/workspace/stream-release"
#define TEST_RPC_RELEASE "/workspace/rpc-release"
#define TEST_WAIT_POLL "0.1"
/* a guest shell loop that ends once PATH exists */
#define WAIT_FOR_FILE(path) "while [ ! -e " path " ]; do sleep " TEST_WAIT_POLL "; done"
/* what a guest command reads from /proc/self/status, whitespace collapsed */
#define SANDBOX_CREDENTIALS "Uid: 1000 1000 1000 1000\nGid: 1000 1000 1000 1000\nGroups: 1000\n"
#define TEST_POWEROFF_WAIT_MS 30000
/* MemTotal excludes what the kernel reserves for itself; it must still be most of the RAM */
#define TEST_MEMTOTAL_MIN_PERCENT 80
#define TEST_CLI_OUTPUT_MAX 65536

static struct sandbox *test_vm;
/* set once an exec went unanswered: later execs fail at once instead of each waiting */
static atomic_bool test_vm_unanswered;
static const char *voidbox_cli;
static struct guest_image_paths test_image;

static void print_file(const char *label, const char *path, long tail_bytes)
{
	char buf[4096];
	FILE *file = fopen(path, "r");
	size_t got;

	if (!file)
		return;
	if (tail_bytes > 0 && fseek(file, -tail_bytes, SEEK_END) != 0)
		rewind(file);
	fprintf(stderr, "  %s (%s):\n", label, path);
	while ((got = fread(buf, 1, sizeof(buf), file)) > 0)
		fwrite(buf, 1, got, stderr);
	fclose(file);
}

/* The state and wait channel of each thread of pid on the host, one line each. */
static void print_host_threads(const char *label, pid_t pid)
{
	char path[PATH_MAX], stat[512], wchan[128];
	struct dirent *entry;
	DIR *tasks;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	tasks = opendir(path);
	if (!tasks)
		return;
	fprintf(stderr, "  %s threads (pid %d):\n", label, (int)pid);
	while ((entry = readdir(tasks)) != NULL) {
		FILE *file;

		if (entry->d_name[0] == '.')
			continue;
		stat[0] = wchan[0] = '\0';
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, entry->d_name);
		if ((file = fopen(path, "r")) != NULL) {
			if (!fgets(stat, sizeof(stat), file))
				stat[0] = '\0';
			fclose(file);
		}
		snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", (int)pid, entry->d_name);
		if ((file = fopen(path, "r")) != NULL) {
			if (!fgets(wchan, sizeof(wchan), file))
				wchan[0] = '\0';
			fclose(file);
		}
		fprintf(stderr, "    wchan %s: %s", wchan[0] ? wchan : "?", stat);
	}
	closedir(tasks);
}

static const char *const test_kvm_counters[] = { "pf_guest", "insn_emulation", "exits" };
#define TEST_KVM_COUNTER_COUNT (sizeof(test_kvm_counters) / sizeof(test_kvm_counters[0]))

/* Reads every counter of dir; false when one is missing. */
static bool read_kvm_counters(const char *dir, unsigned long long values[TEST_KVM_COUNTER_COUNT])
{
	char path[PATH_MAX];

	for (size_t i = 0; i < TEST_KVM_COUNTER_COUNT; i++) {
		FILE *file;
		bool ok;

		snprintf(path, sizeof(path), "%s/%s", dir, test_kvm_counters[i]);
		file = fopen(path, "r");
		if (!file)
			return false;
		ok = fscanf(file, "%llu", &values[i]) == 1;
		fclose(file);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * How KVM's counters of pid's VM moved over a second, and the harness fault's line when its
 * page-fault injections run away. Nothing where debugfs is not mounted.
 */
static void print_kvm_counters(pid_t pid)
{
	struct timespec pause = { .tv_sec = 0, .tv_nsec = TEST_KVM_SAMPLE_NS };
	unsigned long long before[TEST_KVM_COUNTER_COUNT], after[TEST_KVM_COUNTER_COUNT];
	char prefix[32], dir[PATH_MAX] = "";
	struct dirent *entry;
	DIR *vms = opendir(TEST_KVM_DEBUGFS);

	if (!vms)
		return;
	snprintf(prefix, sizeof(prefix), "%d-", (int)pid);
	while ((entry = readdir(vms)) != NULL)
		if (strncmp(entry->d_name, prefix, strlen(prefix)) == 0)
			snprintf(dir, sizeof(dir), "%s/%s", TEST_KVM_DEBUGFS, entry->d_name);
	closedir(vms);
	if (!dir[0] || !read_kvm_counters(dir, before))
		return;
	nanosleep(&pause, NULL);
	if (!read_kvm_counters(dir, after))
		return;
	fprintf(stderr, "  KVM counters of the VM over 1 s (%s):", dir);
	for (size_t i = 0; i < TEST_KVM_COUNTER_COUNT; i++)
		fprintf(stderr, " %s +%llu", test_kvm_counters[i], after[i] - before[i]);
	fprintf(stderr, "\n");
	if (after[0] - before[0] >= TEST_KVM_PF_LOOP_PER_SEC)
		fprintf(stderr, "  %s (%llu a second): the harness's nested page-walk fault "
			"(docs/testing.md)\n", TEST_KVM_PF_LOOP_SIGNATURE, after[0] - before[0]);
}

static int vm_exec_request(struct proto_exec_response *out, const void *stdin_data,
			   size_t stdin_len, long timeout_secs, const char *program, char **args,
			   size_t args_count)
{
	struct proto_exec_request req;

	memset(&req, 0, sizeof(req));
	memset(out, 0, sizeof(*out));
	req.program = (char *)program;
	req.args = args;
	req.args_count = args_count;
	req.stdin_data.data = (uint8_t *)stdin_data;
	req.stdin_data.len = stdin_len;
	req.has_timeout = true;
	req.timeout_secs = (uint64_t)timeout_secs;
	return control_channel_exec(sandbox_channel(test_vm), &req, NULL, NULL, out);
}

/*
 * After the first exec the guest left unanswered: what each thread in the guest (the agent is
 * pid 1) and in the host's test and VMM processes was doing, and the end of the guest console,
 * so the failure says where it stuck. The guest probe is itself bounded.
 */
static void report_unanswered_exec(const char *program, const char *why)
{
	static atomic_flag reported = ATOMIC_FLAG_INIT;
	struct proto_exec_response probe = { 0 };
	char *args[] = { "-c", TEST_PROBE_SCRIPT };

	fprintf(stderr, "  exec %s went unanswered: %s\n", program, why);
	if (atomic_flag_test_and_set(&reported))
		return;
	print_host_threads("test process", getpid());
	if (sandbox_vmm_pid(test_vm) > 0)
		print_host_threads("VMM process", sandbox_vmm_pid(test_vm));
	print_kvm_counters(sandbox_vmm_pid(test_vm) > 0 ? sandbox_vmm_pid(test_vm) : getpid());
	if (strstr(why, TEST_LIVENESS_FAILED))
		fprintf(stderr, "  the guest answers nothing: no probe\n");
	else if (vm_exec_request(&probe, NULL, 0, TEST_PROBE_TIMEOUT_SECS, "sh", args, 2) == 0)
		fprintf(stderr, "  guest threads (pid, tid, stat):\n%.*s", (int)probe.stdout_data.len,
			(const char *)probe.stdout_data.data);
	else
		fprintf(stderr, "  the guest did not answer a probe either: %s\n",
			control_channel_last_error());
	proto_exec_response_free(&probe);
	print_file("guest console, last lines", sandbox_serial_log_path(test_vm),
		   TEST_SERIAL_TAIL_BYTES);
}

/*
 * Runs argv[0] with args in the test VM; fills *out. Returns the RPC status. timeout_secs 0
 * stands for TEST_EXEC_TIMEOUT_SECS: no exec here goes unbounded.
 */
static int vm_exec(struct proto_exec_response *out, const void *stdin_data, size_t stdin_len,
		   long timeout_secs, const char *program, char **args, size_t args_count)
{
	int rc;

	if (atomic_load(&test_vm_unanswered)) {
		memset(out, 0, sizeof(*out));
		fprintf(stderr, "  exec %s not sent: the guest left an earlier exec unanswered\n",
			program);
		return -ETIMEDOUT;
	}
	rc = vm_exec_request(out, stdin_data, stdin_len,
			     timeout_secs > 0 ? timeout_secs : TEST_EXEC_TIMEOUT_SECS, program, args,
			     args_count);
	if (rc == -ETIMEDOUT) {
		atomic_store(&test_vm_unanswered, true);
		report_unanswered_exec(program, control_channel_last_error());
	}
	return rc;
}

static int vm_sh(struct proto_exec_response *out, const char *script)
{
	char *args[] = { "-c", (char *)script };

	return vm_exec(out, NULL, 0, 0, "sh", args, 2);
}

static bool output_is(const struct proto_bytes *bytes, const char *expected)
{
	size_t len = strlen(expected);

	return bytes->len == len && memcmp(bytes->data, expected, len) == 0;
}

static void test_echo_hello_world(void)
{
	struct proto_exec_response out;
	char *args[] = { "hello", "world" };

	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 0, "echo", args, 2), 0);
	CHECK_INT_EQ(out.exit_code, 0);
	CHECK(output_is(&out.stdout_data, "hello world\n"));
	proto_exec_response_free(&out);
}

static void test_exit_code_42(void)
{
	struct proto_exec_response out;

	CHECK_INT_EQ(vm_sh(&out, "exit 42"), 0);
	CHECK_INT_EQ(out.exit_code, 42);
	proto_exec_response_free(&out);
}

static void test_stdin_byte_exact(void)
{
	struct proto_exec_response out;
	uint8_t *input = malloc(TEST_STDIN_BYTES);

	for (size_t i = 0; i < TEST_STDIN_BYTES; i++)
		input[i] = (uint8_t)(i * 7 + i / 256);
	CHECK_INT_EQ(vm_exec(&out, input, TEST_STDIN_BYTES, 0, "cat", NULL, 0), 0);
	CHECK_INT_EQ(out.exit_code, 0);
	CHECK_INT_EQ(out.stdout_data.len, TEST_STDIN_BYTES);
	CHECK(out.stdout_data.len == TEST_STDIN_BYTES &&
	      memcmp(out.stdout_data.data, input, TEST_STDIN_BYTES) == 0);
	proto_exec_response_free(&out);
	free(input);
}

static void test_write_file_then_cat(void)
{
	static const char content[] = "written by the host\nsecond line\n";
	struct proto_exec_response out;
	char *args[] = { "/workspace/conformance_test.txt" };

	CHECK_INT_EQ(control_channel_write_file(sandbox_channel(test_vm),
						"/workspace/conformance_test.txt", content,
						strlen(content), true, TEST_RPC_TIMEOUT_MS),
		     0);
	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 0, "cat", args, 1), 0);
	CHECK_INT_EQ(out.exit_code, 0);
	CHECK(output_is(&out.stdout_data, content));
	proto_exec_response_free(&out);
}

static void test_mkdir_p_then_test_d(void)
{
	struct proto_exec_response out;
	char *args[] = { "-d", "/workspace/conformance/nested/dir" };

	CHECK_INT_EQ(control_channel_mkdir_p(sandbox_channel(test_vm),
					     "/workspace/conformance/nested/dir",
					     TEST_RPC_TIMEOUT_MS),
		     0);
	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 0, "test", args, 2), 0);
	CHECK_INT_EQ(out.exit_code, 0);
	proto_exec_response_free(&out);
}

/*
 * A guest command runs as the agent's sandbox user (guest/agent/sandbox_user.h): real,
 * effective, saved and filesystem uid and gid 1000, and group 1000 as its only supplementary
 * group (the agent's setgroups), read from the kernel's own record with whitespace collapsed.
 */
static void test_exec_runs_as_sandbox_user(void)
{
	struct proto_exec_response out;

	CHECK_INT_EQ(vm_sh(&out, "grep -E '^(Uid|Gid|Groups):' /proc/self/status | "
				 "while read -r line; do echo $line; done"),
		     0);
	CHECK_INT_EQ(out.exit_code, 0);
	CHECK(output_is(&out.stdout_data, SANDBOX_CREDENTIALS));
	if (!output_is(&out.stdout_data, SANDBOX_CREDENTIALS))
		fprintf(stderr, "  credentials: %.*s\n", (int)out.stdout_data.len,
			(const char *)out.stdout_data.data);
	proto_exec_response_free(&out);
}

/* Writes a file in the guest that a waiting command (WAIT_FOR_FILE) is looking for. */
static void release_guest_command(const char *path)
{
	CHECK_INT_EQ(control_channel_write_file(sandbox_channel(test_vm), path, "go", 2, true,
						TEST_RPC_TIMEOUT_MS),
		     0);
}

struct chunk_record {
	pthread_mutex_t lock;
	pthread_cond_t arrived;
	size_t chunks;
	char first_bytes[16];
};

static void record_chunk(const struct proto_exec_output_chunk *chunk, void *opaque)
{
	struct chunk_record *record = opaque;

	pthread_mutex_lock(&record->lock);
	if (record->chunks++ == 0)
		snprintf(record->first_bytes, sizeof(record->first_bytes), "%.*s",
			 (int)(chunk->data.len < 15 ? chunk->data.len : 15),
			 (const char *)chunk->data.data);
	pthread_cond_broadcast(&record->arrived);
	pthread_mutex_unlock(&record->lock);
}

/* Lets the streaming command finish, but only once its first chunk has reached the host. */
static void *release_after_first_chunk(void *opaque)
{
	struct chunk_record *record = opaque;
	struct timespec deadline;
	bool seen;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += TEST_STREAM_WAIT_SECS;
	pthread_mutex_lock(&record->lock);
	while (record->chunks == 0 &&
	       pthread_cond_timedwait(&record->arrived, &record->lock, &deadline) == 0)
		;
	seen = record->chunks > 0;
	pthread_mutex_unlock(&record->lock);
	if (seen)
		release_guest_command(TEST_STREAM_RELEASE);
	return NULL;
}

/*
 * The command prints a line, then waits for a file the host writes only after that line has
 * arrived as a chunk: the command can finish (and the response come) only if the chunk was
 * delivered while it still ran. Without streaming it never finishes and the exec times out.
 */
static void test_streaming_chunks_arrive_before_response(void)
{
	struct proto_exec_request req;
	struct proto_exec_response out;
	struct chunk_record record = { .lock = PTHREAD_MUTEX_INITIALIZER,
				       .arrived = PTHREAD_COND_INITIALIZER };
	char *args[] = { "-c", "echo first; " WAIT_FOR_FILE(TEST_STREAM_RELEASE) "; echo second" };
	pthread_t releaser;

	memset(&req, 0, sizeof(req));
	req.program = "sh";
	req.args = args;
	req.args_count = 2;
	req.has_timeout = true;
	req.timeout_secs = TEST_STREAM_WAIT_SECS;
	pthread_create(&releaser, NULL, release_after_first_chunk, &record);
	CHECK_INT_EQ(control_channel_exec(sandbox_channel(test_vm), &req, record_chunk, &record,
					  &out),
		     0);
	pthread_join(releaser, NULL);
	CHECK_INT_EQ(out.exit_code, 0);
	CHECK(record.chunks >= 2);
	CHECK(strncmp(record.first_bytes, "first", 5) == 0);
	CHECK(output_is(&out.stdout_data, "first\nsecond\n"));
	proto_exec_response_free(&out);
}

static void test_timeout_kills_process_group(void)
{
	struct proto_exec_response out;
	char *args[] = { "-c", "sleep 60 & sleep 60" };

	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 2, "sh", args, 2), 0);
	CHECK(out.exit_code != 0);
	CHECK(out.error && strstr(out.error, "Process killed after 2s timeout"));
	proto_exec_response_free(&out);
	/* neither sleep survives: the whole process group was killed */
	CHECK_INT_EQ(vm_sh(&out, "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && exit 1; done; exit 0"), 0);
	CHECK_INT_EQ(out.exit_code, 0);
	proto_exec_response_free(&out);
}

struct waiting_exec {
	struct proto_exec_response out;
	atomic_bool finished;
};

static void *run_waiting_exec(void *opaque)
{
	struct waiting_exec *waiter = opaque;
	char *args[] = { "-c", WAIT_FOR_FILE(TEST_RPC_RELEASE) };

	vm_exec(&waiter->out, NULL, 0, TEST_STREAM_WAIT_SECS, "sh", args, 2);
	atomic_store(&waiter->finished, true);
	return NULL;
}

/*
 * File RPCs are answered while an exec runs: the exec waits for a file the host writes only
 * after the RPCs have come back, so had they waited for the exec, they would never have.
 */
static void test_file_rpcs_answer_during_long_exec(void)
{
	struct waiting_exec waiter = { .finished = false };
	struct proto_file_stat_response stat_out;
	struct proto_bytes read_out = { 0 };
	pthread_t thread;

	memset(&stat_out, 0, sizeof(stat_out));
	CHECK_INT_EQ(control_channel_write_file(sandbox_channel(test_vm), "/workspace/five.txt",
						"12345", 5, true, TEST_RPC_TIMEOUT_MS),
		     0);
	pthread_create(&thread, NULL, run_waiting_exec, &waiter);
	CHECK_INT_EQ(control_channel_file_stat(sandbox_channel(test_vm), "/workspace/five.txt",
					       &stat_out, TEST_RPC_TIMEOUT_MS),
		     0);
	CHECK(stat_out.exists && stat_out.has_size && stat_out.size == 5);
	proto_file_stat_response_free(&stat_out);
	CHECK_INT_EQ(control_channel_read_file(sandbox_channel(test_vm), "/workspace/five.txt",
					       &read_out, TEST_RPC_TIMEOUT_MS),
		     0);
	CHECK(read_out.len == 5 && memcmp(read_out.data, "12345", 5) == 0);
	free(read_out.data);
	CHECK_INT_EQ(control_channel_file_stat(sandbox_channel(test_vm), "/workspace/missing",
					       &stat_out, TEST_RPC_TIMEOUT_MS),
		     0);
	CHECK(!stat_out.exists);
	proto_file_stat_response_free(&stat_out);
	/* the exec cannot have ended: nothing has released it yet */
	CHECK(!atomic_load(&waiter.finished));
	release_guest_command(TEST_RPC_RELEASE);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(waiter.out.exit_code, 0);
	proto_exec_response_free(&waiter.out);
}

static void test_sequential_execs_get_own_output(void)
{
	int mismatches = 0;

	for (int i = 0; i < TEST_SEQUENTIAL_EXECS; i++) {
		struct proto_exec_response out;
		char arg[32], expected[40];
		char *args[] = { arg };

		int rc;

		snprintf(arg, sizeof(arg), "seq-%d", i);
		snprintf(expected, sizeof(expected), "seq-%d\n", i);
		rc = vm_exec(&out, NULL, 0, 0, "echo", args, 1);
		if (rc != 0 || !output_is(&out.stdout_data, expected)) {
			fprintf(stderr, "  exec %d: %s\n", i, rc != 0 ? control_channel_last_error()
							    : "wrong output");
			mismatches++;
		}
		proto_exec_response_free(&out);
		if (rc != 0)
			break;
	}
	CHECK_INT_EQ(mismatches, 0);
}

struct concurrent_exec {
	pthread_t thread;
	int index;
	bool matched;
	char error[TEST_JOB_ERROR_MAX];
};

static void *run_concurrent_exec(void *opaque)
{
	struct concurrent_exec *job = opaque;
	struct proto_exec_response out;
	char script[64], expected[40];

	snprintf(script, sizeof(script), "sleep 0.$((%d %% 5)); echo conc-%d", job->index,
		 job->index);
	snprintf(expected, sizeof(expected), "conc-%d\n", job->index);
	if (vm_sh(&out, script) != 0)
		snprintf(job->error, sizeof(job->error), "%s", control_channel_last_error());
	else if (out.exit_code != 0 || !output_is(&out.stdout_data, expected))
		snprintf(job->error, sizeof(job->error), "exit %d, %zu bytes of output",
			 out.exit_code, out.stdout_data.len);
	else
		job->matched = true;
	proto_exec_response_free(&out);
	return NULL;
}

static void test_concurrent_execs_get_own_output(void)
{
	struct concurrent_exec jobs[TEST_CONCURRENT_EXECS];
	int matched = 0;

	for (int i = 0; i < TEST_CONCURRENT_EXECS; i++) {
		jobs[i].index = i;
		jobs[i].matched = false;
		jobs[i].error[0] = '\0';
		pthread_create(&jobs[i].thread, NULL, run_concurrent_exec, &jobs[i]);
	}
	for (int i = 0; i < TEST_CONCURRENT_EXECS; i++) {
		pthread_join(jobs[i].thread, NULL);
		matched += jobs[i].matched;
		if (!jobs[i].matched)
			fprintf(stderr, "  concurrent exec %d: %s\n", i, jobs[i].error);
	}
	CHECK_INT_EQ(matched, TEST_CONCURRENT_EXECS);
}

static void test_nproc_matches_vcpus(void)
{
	struct proto_exec_response out;
	char expected[16];

	snprintf(expected, sizeof(expected), "%d\n", TEST_VM_VCPUS);
	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 0, "nproc", NULL, 0), 0);
	CHECK(output_is(&out.stdout_data, expected));
	proto_exec_response_free(&out);
}

static void test_memtotal_matches_memory(void)
{
	struct proto_exec_response out;
	long memtotal_kib = -1;

	CHECK_INT_EQ(vm_sh(&out, "awk '/^MemTotal:/ { print $2 }' /proc/meminfo"), 0);
	if (out.stdout_data.len > 0) {
		char text[32];

		snprintf(text, sizeof(text), "%.*s", (int)out.stdout_data.len,
			 (const char *)out.stdout_data.data);
		memtotal_kib = strtol(text, NULL, 10);
	}
	fprintf(stderr, "  MemTotal %ld KiB for %d MiB configured\n", memtotal_kib,
		TEST_VM_MEMORY_MB);
	CHECK(memtotal_kib <= TEST_VM_MEMORY_MB * 1024L);
	CHECK(memtotal_kib >= TEST_VM_MEMORY_MB * 1024L * TEST_MEMTOTAL_MIN_PERCENT / 100);
	proto_exec_response_free(&out);
}

/*
 * The sandbox cannot change its own policy: /etc/voidbox and what the host writes there are
 * root's, the sandbox user's rm and writes there fail, and afterwards a command off the
 * allowlist (the VM runs with TEST_VM_ALLOWED) is still refused, because the policy lives in
 * the agent's memory. A copy of sh planted in /workspace is refused by its path, the
 * sandboxed shell runs with no_new_privs, and /workspace and /home are mounted nosuid.
 */
static void test_sandbox_cannot_change_policy(void)
{
	static const char hosts[] = "127.0.0.1 conformance-host\n";
	static const char script[] =
		"id -u; stat -c '%u %a' /etc/voidbox /etc/voidbox/hosts; "
		"rm -f /etc/voidbox/* 2>/dev/null; "
		"echo '[]' > /etc/voidbox/allowed_commands.json 2>/dev/null && echo wrote; "
		"cat /etc/voidbox/hosts; grep NoNewPrivs /proc/self/status; "
		"mkdir -p /workspace/x && cp /bin/busybox /workspace/x/sh && echo planted; "
		"awk '$2 == \"/workspace\" || $2 == \"/home\" { print $2, $4 ~ /(^|,)nosuid(,|$)/ }' "
		"/proc/mounts";
	static const char expected[] = "1000\n0 755\n0 644\n127.0.0.1 conformance-host\n"
				       "NoNewPrivs:\t1\nplanted\n/workspace 1\n/home 1\n";
	char *echo_args[] = { "-c", "echo pwned" };
	struct proto_exec_response out;

	CHECK_INT_EQ(control_channel_write_file(sandbox_channel(test_vm), "/etc/voidbox/hosts",
						hosts, strlen(hosts), true, TEST_RPC_TIMEOUT_MS),
		     0);
	CHECK_INT_EQ(vm_sh(&out, script), 0);
	CHECK(output_is(&out.stdout_data, expected));
	if (!output_is(&out.stdout_data, expected))
		fprintf(stderr, "  got: %.*s\n", (int)out.stdout_data.len,
			(const char *)out.stdout_data.data);
	proto_exec_response_free(&out);

	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 0, "uname", NULL, 0), 0);
	CHECK_INT_EQ(out.exit_code, -1);
	CHECK(out.error && strcmp(out.error, "Command 'uname' is not allowed") == 0);
	proto_exec_response_free(&out);
	CHECK_INT_EQ(vm_exec(&out, NULL, 0, 0, "/workspace/x/sh", echo_args, 2), 0);
	CHECK_INT_EQ(out.exit_code, -1);
	CHECK(!output_is(&out.stdout_data, "pwned\n"));
	proto_exec_response_free(&out);
}

/*
 * The session secret is on the kernel command line: a sandboxed program can read neither
 * /proc/cmdline (PID 1 covered it once it had read it) nor the kernel log that repeats it.
 */
static void test_session_secret_hidden(void)
{
	static const char script[] =
		"cat /proc/cmdline 2>/dev/null | grep -c voidbox.secret; "
		"dmesg 2>/dev/null | grep -c voidbox.secret; "
		"cat /proc/sys/kernel/dmesg_restrict";
	struct proto_exec_response out;

	CHECK_INT_EQ(vm_sh(&out, script), 0);
	CHECK(output_is(&out.stdout_data, "0\n0\n1\n"));
	if (!output_is(&out.stdout_data, "0\n0\n1\n"))
		fprintf(stderr, "  got: %.*s\n", (int)out.stdout_data.len,
			(const char *)out.stdout_data.data);
	proto_exec_response_free(&out);
}

/* a string only this process's heap holds, put there before the sandbox started */
#define TEST_MARKER_MAX 64
static char *test_heap_marker;

/*
 * The test VM runs as the CLI's does, its VMM in a process of its own: not this one but the
 * voidbox-vmm program executed afresh (none of this process's memory: the heap marker is not
 * in its memory), without this process's API key, every thread without new privileges and
 * filtered (the vCPUs, the workers and the main thread), stdin on /dev/null, and without a
 * descriptor this process had open when it started the sandbox.
 */
static void test_vmm_runs_in_its_own_process(void)
{
	pid_t vmm = sandbox_vmm_pid(test_vm);
	char target[PROBE_PATH_MAX], exe[PATH_MAX];
	const char *base;

	CHECK(vmm > 0 && vmm != getpid());
	probe_exe(vmm, exe, sizeof(exe));
	base = strrchr(exe, '/');
	CHECK_STR_EQ(base ? base + 1 : exe, VMM_PROCESS_NAME);
	CHECK_INT_EQ(probe_memory_has(getpid(), test_heap_marker), 1);
	CHECK_INT_EQ(probe_memory_has(vmm, test_heap_marker), 0);
	CHECK(probe_environ_has(getpid(), PROBE_SECRET_NAME));
	CHECK(!probe_environ_has(vmm, PROBE_SECRET_NAME));
	CHECK(probe_check_every_thread_confined(vmm) > TEST_VM_VCPUS);
	CHECK(!probe_has_fd_to(vmm, TEST_PLANTED_FD_PATH));
	probe_fd_target(vmm, STDIN_FILENO, target, sizeof(target));
	CHECK_STR_EQ(target, "/dev/null");
}

static char test_share_dir[] = TEST_SHARE_TEMPLATE;

/*
 * The VMM process is jailed (src/sandbox/vmm_jail.h): its own mount, IPC and network
 * namespaces (the test VM has no network), and a root that holds, once the VM runs, only
 * /proc/self, the runtime directory with the vsock socket and the share: neither /etc/passwd
 * nor the kernel (its mount point is left, empty) nor this test's directory. The share works
 * through it both ways (its server reopens files through /proc/self/fd).
 */
static void test_vmm_runs_in_its_jail(void)
{
	pid_t vmm = sandbox_vmm_pid(test_vm);
	char path[PATH_MAX + PROBE_PATH_MAX], runtime_dir[PATH_MAX] = "", cwd[PATH_MAX];
	char line[PATH_MAX + PROBE_PATH_MAX], point[PATH_MAX];
	int mounts = 0, runtime_dir_mounted = 0, proc_self_mounted = 0, root_mounted = 0;
	int share_mounted = 0;
	struct proto_exec_response out;
	struct stat st;
	FILE *info;

	CHECK(vmm_jail_host_mode() != VMM_JAIL_OFF);
	CHECK(probe_is_jailed(vmm));
	CHECK(!probe_same_namespace(vmm, "ipc"));
	CHECK(!probe_same_namespace(vmm, "net"));
	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	snprintf(path, sizeof(path), "/proc/%d/root%s", (int)vmm, cwd);
	CHECK(stat(path, &st) < 0 && errno == ENOENT);
	snprintf(path, sizeof(path), "/proc/%d/root%s", (int)vmm, test_image.kernel);
	CHECK(stat(path, &st) < 0 || st.st_size == 0);
	snprintf(path, sizeof(path), "/proc/%d/root%s", (int)vmm, sandbox_vsock_socket_path(test_vm));
	CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode));

	snprintf(path, sizeof(path), "%s", sandbox_vsock_socket_path(test_vm));
	*strrchr(path, '/') = '\0';
	CHECK(realpath(path, runtime_dir) != NULL);
	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)vmm);
	info = fopen(path, "re");
	CHECK(info != NULL);
	while (info && fgets(line, sizeof(line), info)) {
		if (sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1)
			continue;
		mounts++;
		root_mounted += strcmp(point, "/") == 0;
		proc_self_mounted += strcmp(point, "/proc/self") == 0;
		runtime_dir_mounted += strcmp(point, runtime_dir) == 0;
		share_mounted += strcmp(point, test_share_dir) == 0;
		fprintf(stderr, "  (the VMM's mount: %s)\n", point);
	}
	if (info)
		fclose(info);
	CHECK_INT_EQ(mounts, 4);
	CHECK_INT_EQ(root_mounted + proc_self_mounted + runtime_dir_mounted + share_mounted, 4);

	CHECK_INT_EQ(vm_sh(&out, "cat " TEST_SHARE_GUEST "/host.txt && echo from-guest > "
			   TEST_SHARE_GUEST "/guest.txt"), 0);
	CHECK(output_is(&out.stdout_data, TEST_SHARE_FROM_HOST));
	proto_exec_response_free(&out);
	snprintf(path, sizeof(path), "%s/guest.txt", test_share_dir);
	info = fopen(path, "re");
	CHECK(info != NULL);
	line[0] = '\0';
	if (info && !fgets(line, sizeof(line), info))
		line[0] = '\0';
	if (info)
		fclose(info);
	CHECK_STR_EQ(line, TEST_SHARE_FROM_GUEST);
}

/* Whether the host promised cgroup v2 caps (TEST_CAPS_EXPECTED_ENV=1). */
static bool caps_expected(void)
{
	const char *value = getenv(TEST_CAPS_EXPECTED_ENV);

	return value && strcmp(value, "1") == 0;
}

/* The VM's cgroup directory, kept for the check after the sandbox ends ("": no caps here). */
static char test_vm_cgroup[PATH_MAX * 2 + 1];

/* One line of a cgroup file, without its newline ("" when it cannot be read). */
static void read_cgroup_file(const char *dir, const char *name, char *out, size_t len)
{
	char path[sizeof(test_vm_cgroup) + PROBE_PATH_MAX];
	FILE *file;

	out[0] = '\0';
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	file = fopen(path, "re");
	if (file && fgets(out, (int)len, file))
		out[strcspn(out, "\n")] = '\0';
	if (file)
		fclose(file);
}

/*
 * Where the host delegates cgroup v2 with the memory and cpu controllers (the nested L1 of
 * run-vm-suite mounts it so, and says so with TEST_CAPS_EXPECTED_ENV), the VMM process runs in
 * a cgroup of its own named after the runtime directory, with memory.max the guest's memory
 * plus the VMM's allowance and cpu.max its vCPUs' worth of each period (docs/security.md,
 * "Design: resource limits per VM"). Elsewhere the test says why there are no caps.
 */
static void test_vmm_cgroup_caps(void)
{
	char root[PATH_MAX], why[PATH_MAX + 256], name[PATH_MAX], expected[PROBE_PATH_MAX];
	char value[PROBE_PATH_MAX];
	pid_t vmm = sandbox_vmm_pid(test_vm);

	if (vmm_cgroup_root(root, sizeof(root), why, sizeof(why)) < 0) {
		CHECK(!caps_expected());
		fprintf(stderr, "  (no memory and CPU caps on this host: %s)\n", why);
		return;
	}
	snprintf(name, sizeof(name), "%s", sandbox_vsock_socket_path(test_vm));
	*strrchr(name, '/') = '\0';
	snprintf(test_vm_cgroup, sizeof(test_vm_cgroup), "%s/%s", root, strrchr(name, '/') + 1);
	fprintf(stderr, "  (the VM's cgroup: %s)\n", test_vm_cgroup);

	/* the VMM process is in it: /proc/PID/cgroup's v2 path is the end of the cgroup's */
	CHECK(probe_in_cgroup(vmm, test_vm_cgroup));

	read_cgroup_file(test_vm_cgroup, "memory.max", value, sizeof(value));
	snprintf(expected, sizeof(expected), "%llu",
		 (unsigned long long)(TEST_VM_MEMORY_MB + VMM_CGROUP_OVERHEAD_MB) * TEST_MIB);
	CHECK_STR_EQ(value, expected);
	read_cgroup_file(test_vm_cgroup, "cpu.max", value, sizeof(value));
	snprintf(expected, sizeof(expected), "%u %u", TEST_VM_VCPUS * VMM_CGROUP_CPU_PERIOD_US,
		 VMM_CGROUP_CPU_PERIOD_US);
	CHECK_STR_EQ(value, expected);
}

/* Once the sandbox has ended, its cgroup is gone. */
static void test_vmm_cgroup_removed(void)
{
	struct stat st;

	if (!test_vm_cgroup[0]) {
		CHECK(!caps_expected());
		fprintf(stderr, "  (no cgroup was made: no caps on this host)\n");
		return;
	}
	CHECK(stat(test_vm_cgroup, &st) < 0 && errno == ENOENT);
}

static void test_guest_poweroff_ends_vm(void)
{
	enum vm_exit_reason reason = VM_EXIT_NONE;

	/* 0: the agent synced and ended the connection; the guest then powers off by itself */
	CHECK_INT_EQ(control_channel_shutdown(sandbox_channel(test_vm), TEST_POWEROFF_WAIT_MS), 0);
	CHECK_INT_EQ(sandbox_wait_exit(test_vm, TEST_POWEROFF_WAIT_MS, &reason), 0);
	CHECK_INT_EQ(reason, VM_EXIT_GUEST_POWEROFF);
}

/* ---- the CLI, as a user runs it ----------------------------------------------------------- */

struct cli_result {
	int status;
	char out[TEST_CLI_OUTPUT_MAX];
	char err[TEST_CLI_OUTPUT_MAX];
};

static void read_into(int fd, char *buf, size_t cap)
{
	size_t used = 0;
	ssize_t got;

	while (used + 1 < cap && (got = read(fd, buf + used, cap - 1 - used)) > 0)
		used += (size_t)got;
	buf[used] = '\0';
}

/* Runs voidbox with argv, stdin from stdin_text; stdout/stderr via temp files. */
static void run_cli(struct cli_result *result, const char *stdin_text, char *const argv[])
{
	char out_path[] = "/tmp/voidbox-cli-out-XXXXXX";
	char err_path[] = "/tmp/voidbox-cli-err-XXXXXX";
	int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
	int in_pipe[2];
	int wstatus;
	pid_t pid;

	if (pipe(in_pipe) < 0)
		abort();
	pid = fork();
	if (pid == 0) {
		dup2(in_pipe[0], STDIN_FILENO);
		dup2(out_fd, STDOUT_FILENO);
		dup2(err_fd, STDERR_FILENO);
		close(in_pipe[1]);
		execv(voidbox_cli, argv);
		_exit(127);
	}
	close(in_pipe[0]);
	if (stdin_text && write(in_pipe[1], stdin_text, strlen(stdin_text)) < 0)
		perror("write stdin");
	close(in_pipe[1]);
	waitpid(pid, &wstatus, 0);
	result->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
	lseek(out_fd, 0, SEEK_SET);
	lseek(err_fd, 0, SEEK_SET);
	read_into(out_fd, result->out, sizeof(result->out));
	read_into(err_fd, result->err, sizeof(result->err));
	close(out_fd);
	close(err_fd);
	unlink(out_path);
	unlink(err_path);
}

static void test_cli_exec_status_streams_and_stdin(void)
{
	static struct cli_result result;
	char *argv[] = { "voidbox", "exec", "--kernel", test_image.kernel, "--initramfs",
			 test_image.initramfs, "--env", "GREETING=hi", "--",
			 "sh", "-c", "echo \"$GREETING $(cat)\"; echo to-stderr >&2; exit 7", NULL };

	run_cli(&result, "from-stdin", argv);
	CHECK_INT_EQ(result.status, 7);
	CHECK_STR_EQ(result.out, "hi from-stdin\n");
	CHECK(strstr(result.err, "to-stderr\n") != NULL);
	if (result.status != 7)
		fprintf(stderr, "  stderr: %s\n", result.err);
}

/*
 * `voidbox shell` without a terminal (stdin a pipe here) runs the shell on that input, as
 * `docker run -i` does, and exits with the shell's status.
 */
static void test_cli_shell_without_terminal(void)
{
	static struct cli_result result;
	char *argv[] = { "voidbox", "shell", "--kernel", test_image.kernel, "--initramfs",
			 test_image.initramfs, NULL };

	run_cli(&result, "echo piped-$((6 * 7))\nexit 3\n", argv);
	CHECK_INT_EQ(result.status, 3);
	CHECK_STR_EQ(result.out, "piped-42\n");
	if (result.status != 3)
		fprintf(stderr, "  stderr: %s\n", result.err);
}

static void test_cli_unbootable_initramfs_names_serial_log(void)
{
	static struct cli_result result;
	char bogus[] = "/tmp/voidbox-bogus-initramfs-XXXXXX";
	int fd = mkstemp(bogus);
	char junk[4096];
	char *argv[] = { "voidbox", "exec", "--kernel", test_image.kernel, "--initramfs", bogus,
			 "--boot-timeout", "120", "--", "true", NULL };

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 131 + 17);
	if (write(fd, junk, sizeof(junk)) != (ssize_t)sizeof(junk))
		perror("write bogus initramfs");
	close(fd);
	run_cli(&result, NULL, argv);
	fprintf(stderr, "  bogus initramfs: status %d: %s", result.status, result.err);
	CHECK_INT_EQ(result.status, 125);
	CHECK(strstr(result.err, "serial.log") != NULL || strstr(result.err, "console") != NULL);
	unlink(bogus);
}

/* Replaces the image's /init with a script that prints a line and never starts an agent. */
static int add_init_without_agent(struct cpio_writer *writer, const void *ctx)
{
	static const char init[] =
		"#!/bin/sh\necho " TEST_NO_AGENT_MARKER "\nwhile :; do sleep 60; done\n";

	return cpio_writer_add_file(writer, "init", TEST_NO_AGENT_INIT_MODE, init, strlen(init));
}

/*
 * A guest that boots but never answers (its /init is not the agent) fails once the boot
 * timeout runs out, and the error quotes the end of the guest's console: the console file is
 * in the sandbox's runtime directory, which is gone by the time the user reads the error.
 */
static void test_cli_guest_without_agent_quotes_console(void)
{
	static struct cli_result result;
	char initramfs[] = "/tmp/voidbox-no-agent-initramfs-XXXXXX";
	char *argv[] = { "voidbox", "exec", "--kernel", test_image.kernel, "--initramfs", initramfs,
			 "--boot-timeout", TEST_NO_AGENT_BOOT_TIMEOUT_S, "--", "true", NULL };

	if (vm_test_initramfs_extend(test_image.initramfs, add_init_without_agent, NULL,
				     initramfs) < 0) {
		CHECK(!"cannot write the initramfs without an agent");
		unlink(initramfs);
		return;
	}
	run_cli(&result, NULL, argv);
	fprintf(stderr, "  initramfs without an agent: status %d: %s", result.status, result.err);
	CHECK_INT_EQ(result.status, 125);
	CHECK(strstr(result.err, "did not answer") != NULL);
	CHECK(strstr(result.err, TEST_NO_AGENT_MARKER) != NULL);
	unlink(initramfs);
}

/* ---- the CLI as an unprivileged user ---------------------------------------------------- */

/* Copies from into dir/name with mode, owned by the unprivileged user; false on any failure. */
static bool copy_for_unprivileged(const char *from, const char *dir, const char *name, mode_t mode)
{
	char to[PATH_MAX];
	struct stat st;
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1;
	off_t offset = 0;
	bool ok = false;

	snprintf(to, sizeof(to), "%s/%s", dir, name);
	if (in >= 0 && fstat(in, &st) == 0)
		out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (out >= 0) {
		while (offset < st.st_size && sendfile(out, in, &offset, (size_t)(st.st_size - offset)) > 0)
			;
		ok = offset == st.st_size &&
		     fchown(out, TEST_UNPRIVILEGED_ID, TEST_UNPRIVILEGED_ID) == 0;
	}
	if (!ok)
		fprintf(stderr, "  (cannot copy %s to %s: %s)\n", from, to, strerror(errno));
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return ok;
}

/* Whether the host promised that unprivileged users may run VMs. */
static bool unprivileged_expected(void)
{
	const char *value = getenv(TEST_UNPRIVILEGED_EXPECTED_ENV);

	return value && strcmp(value, "1") == 0;
}

/*
 * Runs `voidbox exec` as nobody, with out_fd and err_fd as its stdout and stderr, from copies
 * in home (the binaries may sit where nobody cannot reach, as beneath /root): the caller then
 * holds neither CAP_SYS_ADMIN nor any other capability, and the VMM's jail is built through
 * a user namespace (src/sandbox/vmm_jail.c).
 */
static pid_t spawn_unprivileged_cli(const char *home, int out_fd, int err_fd)
{
	char cli[PATH_MAX], kernel[PATH_MAX], initramfs[PATH_MAX];
	pid_t pid;

	snprintf(cli, sizeof(cli), "%s/voidbox", home);
	snprintf(kernel, sizeof(kernel), "%s/vmlinuz", home);
	snprintf(initramfs, sizeof(initramfs), "%s/initramfs", home);
	pid = fork();
	if (pid != 0)
		return pid;
	char *argv[] = { "voidbox", "exec", "--memory", TEST_UNPRIVILEGED_MEMORY_MB, "--kernel",
			 kernel, "--initramfs", initramfs, "--", "sh", "-c",
			 TEST_UNPRIVILEGED_SCRIPT, NULL };
	dup2(out_fd, STDOUT_FILENO);
	dup2(err_fd, STDERR_FILENO);
	setenv("HOME", home, 1);
	setenv(GUEST_IMAGE_ENV_HOME, home, 1);
	unsetenv(TEST_VMM_BINARY_ENV);
	if (setgroups(0, NULL) < 0 || setresgid(TEST_UNPRIVILEGED_ID, TEST_UNPRIVILEGED_ID,
						TEST_UNPRIVILEGED_ID) < 0 ||
	    setresuid(TEST_UNPRIVILEGED_ID, TEST_UNPRIVILEGED_ID, TEST_UNPRIVILEGED_ID) < 0) {
		perror("becoming nobody");
		_exit(126);
	}
	execv(cli, argv);
	perror("executing the copied voidbox");
	_exit(127);
}

/*
 * A user without privileges runs a VM as root does, and its VMM process is jailed all the
 * same, through a user namespace of its own that maps only that user: its own mount
 * namespace, no /etc/passwd in its root, every thread filtered. Where the host does not
 * promise that unprivileged users may run VMs (/dev/kvm open to them, unprivileged user
 * namespaces allowed) and this test cannot arrange it, it says why and checks nothing more.
 */
static void test_cli_unprivileged_user_vm_jailed_in_user_namespace(void)
{
	char home[] = TEST_UNPRIVILEGED_HOME_TEMPLATE, vmm_beside[PATH_MAX], uid_map[PROBE_PATH_MAX];
	char path[PROBE_PATH_MAX];
	static char out[TEST_CLI_OUTPUT_MAX], err[TEST_CLI_OUTPUT_MAX];
	long map[3] = { -1, -1, -1 };
	struct timespec poll = { .tv_nsec = TEST_UNPRIVILEGED_POLL_NS };
	struct timespec now;
	time_t deadline;
	int out_fd, err_fd, wstatus = 0;
	bool reaped = false;
	pid_t cli, vmm = 0;
	FILE *file;

	if (!unprivileged_expected() || geteuid() != 0) {
		fprintf(stderr, "  (not checked: %s\n", geteuid() != 0 ?
			"becoming another user needs root)" :
			"the host does not promise that unprivileged users may run VMs: "
			TEST_UNPRIVILEGED_EXPECTED_ENV "=1 would, where /dev/kvm is open to every "
			"user and unprivileged user namespaces are allowed)");
		CHECK(!unprivileged_expected());
		return;
	}
	CHECK(mkdtemp(home) != NULL);
	CHECK(chmod(home, TEST_UNPRIVILEGED_HOME_MODE) == 0);
	CHECK(chown(home, TEST_UNPRIVILEGED_ID, TEST_UNPRIVILEGED_ID) == 0);
	CHECK(copy_for_unprivileged(voidbox_cli, home, "voidbox", TEST_UNPRIVILEGED_HOME_MODE));
	snprintf(vmm_beside, sizeof(vmm_beside), "%s", voidbox_cli);
	if (strrchr(vmm_beside, '/'))
		snprintf(strrchr(vmm_beside, '/') + 1,
			 sizeof(vmm_beside) - (size_t)(strrchr(vmm_beside, '/') + 1 - vmm_beside),
			 "%s", TEST_VMM_BINARY_NAME);
	if (access(vmm_beside, X_OK) == 0)
		CHECK(copy_for_unprivileged(vmm_beside, home, TEST_VMM_BINARY_NAME,
					    TEST_UNPRIVILEGED_HOME_MODE));
	CHECK(copy_for_unprivileged(test_image.kernel, home, "vmlinuz", TEST_SHARE_FILE_MODE));
	CHECK(copy_for_unprivileged(test_image.initramfs, home, "initramfs", TEST_SHARE_FILE_MODE));

	snprintf(path, sizeof(path), "%s/out", home);
	out_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, TEST_SHARE_FILE_MODE);
	snprintf(path, sizeof(path), "%s/err", home);
	err_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, TEST_SHARE_FILE_MODE);
	CHECK(out_fd >= 0 && err_fd >= 0);
	cli = spawn_unprivileged_cli(home, out_fd, err_fd);
	CHECK(cli > 0);
	clock_gettime(CLOCK_MONOTONIC, &now);
	deadline = now.tv_sec + TEST_UNPRIVILEGED_WAIT_S;
	while (cli > 0 && !reaped && clock_gettime(CLOCK_MONOTONIC, &now) == 0 &&
	       now.tv_sec < deadline && !(reaped = waitpid(cli, &wstatus, WNOHANG) == cli)) {
		probe_read_so_far(out_fd, out, sizeof(out));
		if (strstr(out, TEST_UNPRIVILEGED_MARKER) &&
		    probe_children_named(cli, VMM_PROCESS_NAME, &vmm, 1) == 1)
			break;
		nanosleep(&poll, NULL);
	}
	CHECK(vmm > 0);
	if (vmm > 0) {
		char pid_text[PROBE_PATH_MAX];

		snprintf(pid_text, sizeof(pid_text), "%d", (int)vmm);
		CHECK_INT_EQ((int)probe_task_status(vmm, pid_text, "Uid"), TEST_UNPRIVILEGED_ID);
		CHECK(probe_is_jailed(vmm));
		CHECK(!probe_same_namespace(vmm, "user"));
		CHECK(probe_check_every_thread_confined(vmm) > 1);
		/* the user namespace maps nobody to itself, and nobody else */
		snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)vmm);
		file = fopen(path, "re");
		uid_map[0] = '\0';
		if (file && !fgets(uid_map, sizeof(uid_map), file))
			uid_map[0] = '\0';
		CHECK(file && fgetc(file) == EOF);
		if (file)
			fclose(file);
		CHECK_INT_EQ(sscanf(uid_map, "%ld %ld %ld", &map[0], &map[1], &map[2]), 3);
		CHECK(map[0] == TEST_UNPRIVILEGED_ID && map[1] == TEST_UNPRIVILEGED_ID && map[2] == 1);
		uid_map[strcspn(uid_map, "\n")] = '\0';
		fprintf(stderr, "  (the unprivileged VMM %d: uid_map %s)\n", (int)vmm, uid_map);
	}
	/* the guest sleeps, then says done and the CLI exits 0; one that does not is killed */
	while (cli > 0 && !reaped && clock_gettime(CLOCK_MONOTONIC, &now) == 0 &&
	       now.tv_sec < deadline && !(reaped = waitpid(cli, &wstatus, WNOHANG) == cli))
		nanosleep(&poll, NULL);
	if (cli > 0 && !reaped) {
		fprintf(stderr, "  voidbox exec as nobody did not end within %d s; killed\n",
			TEST_UNPRIVILEGED_WAIT_S);
		kill(cli, SIGKILL);
		waitpid(cli, &wstatus, 0);
		wstatus = -1;
	}
	probe_read_so_far(out_fd, out, sizeof(out));
	probe_read_so_far(err_fd, err, sizeof(err));
	CHECK(reaped && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
	CHECK_STR_EQ(out, TEST_UNPRIVILEGED_MARKER "\ndone\n");
	if (!reaped || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || vmm <= 0)
		fprintf(stderr, "  voidbox exec as nobody: status %d\n  stdout: %s\n  stderr: %s\n",
			wstatus, out, err);
	if (out_fd >= 0)
		close(out_fd);
	if (err_fd >= 0)
		close(err_fd);
	snprintf(path, sizeof(path), "rm -rf %s", home);
	if (system(path) != 0)
		fprintf(stderr, "  (cannot remove %s)\n", home);
}

int main(int argc, char **argv)
{
	static char *allowed[] = { TEST_VM_ALLOWED };
	const struct proto_set_policy policy = {
		.commands = allowed, .commands_count = sizeof(allowed) / sizeof(allowed[0]),
		.max_open_files = SANDBOX_DEFAULT_MAX_OPEN_FILES,
		.max_processes = SANDBOX_DEFAULT_MAX_PROCESSES,
		.max_file_size = SANDBOX_DEFAULT_MAX_FILE_SIZE,
	};
	struct sandbox_config cfg;
	char why[512], err[1024];
	int rc, planted_fd, share_fd;

	probe_reexec_with_secret(argv);
	host_env_apply();
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH-TO-voidbox\n", argv[0]);
		return 2;
	}
	voidbox_cli = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	if (guest_image_resolve(NULL, NULL, &test_image, err, sizeof(err)) < 0)
		harness_skip_vm(err);

	memset(&cfg, 0, sizeof(cfg));
	cfg.kernel_path = test_image.kernel;
	cfg.initramfs_path = test_image.initramfs;
	cfg.memory_mb = TEST_VM_MEMORY_MB;
	cfg.vcpus = TEST_VM_VCPUS;
	cfg.policy = &policy;
	cfg.vmm_placement = SANDBOX_VMM_OWN_PROCESS;
	if (!mkdtemp(test_share_dir)) {
		perror("making the shared directory");
		return 1;
	}
	snprintf(err, sizeof(err), "%s/host.txt", test_share_dir);
	share_fd = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, TEST_SHARE_FILE_MODE);
	if (share_fd < 0 || write(share_fd, TEST_SHARE_FROM_HOST, strlen(TEST_SHARE_FROM_HOST)) !=
				    (ssize_t)strlen(TEST_SHARE_FROM_HOST)) {
		perror("writing into the shared directory");
		return 1;
	}
	close(share_fd);
	cfg.mounts[0] = (struct sandbox_mount){ .host_dir = test_share_dir,
						.guest_dir = TEST_SHARE_GUEST };
	cfg.mount_count = 1;
	/* a descriptor the VMM process must not inherit (no O_CLOEXEC: fork keeps it) */
	planted_fd = open(TEST_PLANTED_FD_PATH, O_RDONLY);
	test_heap_marker = malloc(TEST_MARKER_MAX);
	if (!test_heap_marker)
		return 1;
	snprintf(test_heap_marker, TEST_MARKER_MAX, "voidbox-heap-marker-%d-%ld", (int)getpid(),
		 (long)time(NULL));
	rc = sandbox_start(&cfg, &test_vm, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "FAIL: the test VM did not start: %s\n", err);
		printf("0 passed, 1 failed\n");
		return 1;
	}
	fprintf(stderr, "test VM up in %ld ms (cid %lu)\n", sandbox_boot_ms(test_vm),
		sandbox_guest_cid(test_vm));

	RUN_TEST(test_echo_hello_world);
	RUN_TEST(test_exit_code_42);
	RUN_TEST(test_stdin_byte_exact);
	RUN_TEST(test_write_file_then_cat);
	RUN_TEST(test_mkdir_p_then_test_d);
	RUN_TEST(test_exec_runs_as_sandbox_user);
	RUN_TEST(test_streaming_chunks_arrive_before_response);
	RUN_TEST(test_timeout_kills_process_group);
	RUN_TEST(test_file_rpcs_answer_during_long_exec);
	RUN_TEST(test_sequential_execs_get_own_output);
	RUN_TEST(test_concurrent_execs_get_own_output);
	RUN_TEST(test_nproc_matches_vcpus);
	RUN_TEST(test_memtotal_matches_memory);
	RUN_TEST(test_sandbox_cannot_change_policy);
	RUN_TEST(test_session_secret_hidden);
	RUN_TEST(test_vmm_runs_in_its_own_process);
	RUN_TEST(test_vmm_runs_in_its_jail);
	RUN_TEST(test_vmm_cgroup_caps);
	RUN_TEST(test_guest_poweroff_ends_vm);
	sandbox_destroy(test_vm, harness_tests_failed > 0);
	RUN_TEST(test_vmm_cgroup_removed);
	if (planted_fd >= 0)
		close(planted_fd);
	snprintf(err, sizeof(err), "rm -rf %s", test_share_dir);
	if (system(err) != 0)
		fprintf(stderr, "(cannot remove %s)\n", test_share_dir);
	if (harness_tests_failed)
		fprintf(stderr, "(the guest console of the failed VM is kept in /tmp/voidbox-*/serial.log)\n");

	RUN_TEST(test_cli_exec_status_streams_and_stdin);
	RUN_TEST(test_cli_shell_without_terminal);
	RUN_TEST(test_cli_unbootable_initramfs_names_serial_log);
	RUN_TEST(test_cli_guest_without_agent_quotes_console);
	RUN_TEST(test_cli_unprivileged_user_vm_jailed_in_user_namespace);
	return harness_finish();
}
