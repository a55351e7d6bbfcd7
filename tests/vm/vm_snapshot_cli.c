/*
 * Snapshots as a user drives them, through the voidbox command: two cold boots and everything
 * else restored, because under nested KVM a cold boot costs seconds and a restore should not.
 *
 *   1. `snapshot create` cold-boots and saves a base (first, so the timed cold boot below
 *      does not pay for one-time kernel preparation in the fresh VOIDBOX_HOME);
 *   2. `exec --snapshot no-such-id` warns and cold-boots (timed);
 *   3. `exec --snapshot <prefix>` restores and prints the same hostname, twice (its time is
 *      printed beside the cold boot's; the speed goal is bench/snapshot_bench's, not a check);
 *      the first restore leaves a working-set list beside the snapshot; garbled, it is ignored
 *      (the restore still answers, and records a valid one again), and a restore that
 *      prefetches the valid list answers the same; while it runs, the restored VM is in a
 *      VMM process of the CLI's own (not the CLI, without the API key the CLI was given, every
 *      thread filtered and without new privileges);
 *   3b. Ctrl-C (SIGINT) of a restored `exec` whose program sleeps ends it in order: exit
 *      130, the cancel said on stderr, and the VM's runtime directory removed at once (not
 *      left for the next sandbox's sweep);
 *   4. `snapshot list` and `snapshot inspect` show it, restorable, with the CPU features the
 *      guest was shown;
 *   4b. a copy of the base whose metadata claims every CPU feature is refused before the
 *      guest runs, naming a feature this host lacks (no VM boots for it); so is a copy whose
 *      manifest.json alone claims them (the base's records the features it was shown);
 *   5. `snapshot create --diff --from <id> -- sh -c ...` leaves a marker file only the diff has;
 *      while such a create runs, its VM is in a confined VMM process of its own, whose root
 *      holds of the store only the base and the temporary directory the diff goes into;
 *   6. a workflow spec with sandbox.snapshot runs from the diff and reads that marker;
 *   7. `fork --children 3` gives four distinct outputs (parent and three children); while a
 *      fork runs, the parent and every child are each in a confined VMM process of their own;
 *   7b. a base taken with a share and a read-only disk, restored by `exec --snapshot`, runs
 *      jailed with the share in its root (the disk held open, out of it), and the guest reads
 *      the share and the disk and writes the share through the jail;
 *   8. `snapshot export` of the diff (with its base), `snapshot import` into a second
 *      VOIDBOX_HOME, `snapshot verify` there, and `exec --snapshot` there reads the marker;
 *   9. `snapshot delete` removes the base and its diff;
 *  10. `snapshot create` of a guest that has filled most of its memory, into a store on tmpfs
 *      (/dev/shm), is saved: the memory file's pages are charged to the VMM's cgroup, whose
 *      cap then allows for them.
 * Snapshots go to a temporary VOIDBOX_HOME; the guest image is passed on through
 * VOID_BOX_KERNEL / VOID_BOX_INITRAMFS. Needs a /dev/kvm that runs standard guests and a built
 * image (tests/vm/run-vm-suite arranges the first; without either it exits 77 and says why,
 * or fails under VOIDBOX_REQUIRE_VM=1).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/host_env.h"
#include "common/log.h"
#include "harness.h"
#include "sandbox/vmm_process.h"
#include "vmm_process_probe.h"
#include "store/guest_image.h"
#include "store/snapshot_store.h"
#include "vm_test.h"
#include "vmm/kvm.h"
#include "vmm/memory.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_file.h"
#include "vmm/working_set.h"

/* test paths live under a short mkdtemp directory; truncation cannot happen here */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define TEST_ERR_MAX 1024
#define TEST_OUTPUT_MAX 65536
#define TEST_ARGS_MAX 24
#define TEST_MEMORY_MB "256"
#define TEST_PREFIX_LEN 8
#define TEST_FORK_CHILDREN 3
#define TEST_MS_PER_SEC 1000.0
/* far beyond any step's nested-KVM time (a cold boot there takes 10-60 s) */
#define TEST_CLI_TIMEOUT_S 300
#define TEST_CLI_POLL_NS 50000000L
#define TEST_COPY_CHUNK 65536
#define TEST_NS_PER_MS 1e6
#define TEST_CPUID_1_EDX_SSE2 (1ul << 26)
/* what a guest prints once it runs; it then sleeps until the test kills the CLI */
#define TEST_READY_MARKER "voidbox-guest-ready"
#define TEST_GUEST_SLEEP_S "600"
/* what sandbox_fork logs once every child's VMM process has started */
#define TEST_FORK_LOG_MARKER "each in a VMM process of its own"
#define TEST_VMM_MAX 16
/* what sandbox_start_from_snapshot logs once the restored guest answers with its new secret */
#define TEST_RESTORE_LOG_MARKER "agent rekeyed"
/* the share and disk a snapshot is taken with, and what the restored guest reads of them */
#define TEST_SHARE_GUEST "/mnt/share"
#define TEST_SHARE_FILE "from-host"
#define TEST_SHARE_COPY "copied-by-guest"
#define TEST_SHARE_TEXT "shared-before-the-snapshot"
#define TEST_SHARE_MODE 0777
#define TEST_SHARE_FILE_MODE 0666
#define TEST_DISK_TEXT "disk-mark"
#define TEST_DISK_TEXT_LEN "9"
#define TEST_DISK_BYTES (1024 * 1024)

struct cli_result {
	int status; /* exit status, -1 when it did not exit */
	double ms;
	char out[TEST_OUTPUT_MAX];
	char err[TEST_OUTPUT_MAX];
};

static const char *voidbox_cli;
static char work_dir[PATH_MAX];
static char base_id[64];
static char diff_id[96];
static double cold_ms;
static char hostname[TEST_OUTPUT_MAX]; /* what the base's guest answers */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * TEST_MS_PER_SEC + (double)ts.tv_nsec / TEST_NS_PER_MS;
}

static void read_back(int fd, char *buf, size_t len)
{
	ssize_t got = pread(fd, buf, len - 1, 0);

	buf[got > 0 ? got : 0] = '\0';
	close(fd);
}

/* Prints the end of every guest console a killed voidbox left in its runtime directory. */
static void print_left_consoles(void)
{
	char cmd[PATH_MAX + 128];

	snprintf(cmd, sizeof(cmd),
		 "for f in '%s'/voidbox-*/serial.log; do [ -f \"$f\" ] && "
		 "{ echo \"  console $f:\"; tail -c 3000 \"$f\"; }; done >&2",
		 work_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "  (no guest console was left behind)\n");
}

/* Waits for pid up to TEST_CLI_TIMEOUT_S; a voidbox still running then is killed. */
static int wait_cli(pid_t pid, int *status)
{
	double deadline = now_ms() + TEST_CLI_TIMEOUT_S * TEST_MS_PER_SEC;
	struct timespec poll = { .tv_nsec = TEST_CLI_POLL_NS };

	while (now_ms() < deadline) {
		pid_t done = waitpid(pid, status, WNOHANG);

		if (done == pid)
			return 0;
		if (done < 0)
			return -1;
		nanosleep(&poll, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, status, 0);
	return -1;
}

/*
 * Runs voidbox with argv (NULL-terminated); output captured, wall time measured. One that
 * does not finish in TEST_CLI_TIMEOUT_S is killed and reported with its debug log and the
 * guest console, so a stalled guest is a failure with evidence rather than a suite timeout.
 */
/* Starts voidbox with args, its stdout and stderr into fresh unlinked files *out_fd, *err_fd. */
static pid_t spawn_cli(const char *const *args, int *out_fd, int *err_fd)
{
	char out_path[PATH_MAX], err_path[PATH_MAX];
	const char *argv[TEST_ARGS_MAX + 2] = { voidbox_cli };
	pid_t pid;

	for (size_t i = 0; args[i] && i < TEST_ARGS_MAX; i++)
		argv[i + 1] = args[i];
	snprintf(out_path, sizeof(out_path), "%s/out-XXXXXX", work_dir);
	snprintf(err_path, sizeof(err_path), "%s/err-XXXXXX", work_dir);
	*out_fd = mkstemp(out_path);
	*err_fd = mkstemp(err_path);
	unlink(out_path);
	unlink(err_path);
	pid = fork();
	if (pid == 0) {
		dup2(*out_fd, STDOUT_FILENO);
		dup2(*err_fd, STDERR_FILENO);
		execv(voidbox_cli, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static void run_cli(struct cli_result *r, const char *const *args)
{
	int out_fd, err_fd, status = 0;
	bool finished = false;
	double started = now_ms();
	pid_t pid = spawn_cli(args, &out_fd, &err_fd);

	if (pid > 0)
		finished = wait_cli(pid, &status) == 0;
	r->ms = now_ms() - started;
	r->status = finished && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	read_back(out_fd, r->out, sizeof(r->out));
	read_back(err_fd, r->err, sizeof(r->err));
	if (!finished)
		fprintf(stderr, "  voidbox %s ... did not finish within %d s and was killed\n",
			args[0], TEST_CLI_TIMEOUT_S);
	if (r->status != 0)
		fprintf(stderr, "  voidbox %s ... exited %d\n  stdout: %s\n  stderr: %s\n", args[0],
			r->status, r->out, r->err);
	if (!finished)
		print_left_consoles();
}

static void test_missing_snapshot_cold_boots(void)
{
	static struct cli_result r;
	const char *args[] = { "exec", "--memory", TEST_MEMORY_MB, "--snapshot", "nosuchsnapshot",
			       "--", "cat", "/proc/sys/kernel/hostname", NULL };

	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	CHECK(strstr(r.err, "cold-booting instead") != NULL);
	CHECK(r.out[0] != '\0');
	cold_ms = r.ms;
	printf("cold boot + exec: %.0f ms\n", cold_ms);
}

static void test_create_base(void)
{
	static struct cli_result r;
	const char *args[] = { "--output", "json", "snapshot", "create", "--memory",
			       TEST_MEMORY_MB, NULL };
	json_t *json;

	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	json = json_loads(r.out, 0, NULL);
	CHECK(json != NULL);
	if (!json)
		return;
	CHECK_STR_EQ(json_string_value(json_object_get(json, "kind")), "base");
	/* the VM stops once saved: its connection's end is expected, not a warning */
	CHECK(strstr(r.err, "warn channel: control connection ended") == NULL);
	snprintf(base_id, sizeof(base_id), "%s",
		 json_string_value(json_object_get(json, "id")) ?: "");
	CHECK_INT_EQ(strlen(base_id), 16);
	printf("snapshot create: %.0f ms (snapshot step %lld ms)\n", r.ms,
	       (long long)json_integer_value(json_object_get(json, "snapshot_ms")));
	json_decref(json);
}

static void test_exec_from_snapshot(void)
{
	static struct cli_result r, again;
	char prefix[TEST_PREFIX_LEN + 1], kernel[PATH_MAX];
	const char *args[] = { "exec", "--snapshot", prefix, "--", "cat",
			       "/proc/sys/kernel/hostname", NULL };

	snprintf(prefix, sizeof(prefix), "%s", base_id);
	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	CHECK(r.out[0] != '\0');
	CHECK(strstr(r.err, "cold-booting") == NULL);
	/*
	 * a second restore of the same snapshot works as well (fresh clone each time), and needs
	 * no guest image: only a cold boot would
	 */
	snprintf(kernel, sizeof(kernel), "%s", getenv(GUEST_IMAGE_ENV_KERNEL) ?: "");
	setenv(GUEST_IMAGE_ENV_KERNEL, "/nonexistent/vmlinuz", 1);
	run_cli(&again, args);
	setenv(GUEST_IMAGE_ENV_KERNEL, kernel, 1);
	CHECK_INT_EQ(again.status, 0);
	CHECK_STR_EQ(again.out, r.out);
	snprintf(hostname, sizeof(hostname), "%s", r.out);
	printf("restore + exec: %.0f ms, %.0f ms (cold %.0f ms)\n", r.ms, again.ms, cold_ms);
}

/*
 * Runs voidbox with args, whose guests sleep once they run; once its output (stdout or the
 * log on stderr) holds marker, which it prints only after every VM has started, checks that
 * each of its want VMs runs in a VMM process of its own: a child of the CLI that is not the
 * CLI, whose environment lacks the API key the CLI's has, every thread without new
 * privileges and filtered, jailed (a mount namespace of its own, no /etc/passwd). Then kills the CLI, which takes its VMM processes with it.
 */
static void check_cli_vms_confined(const char *const *args, const char *marker, int want,
				   void (*also)(pid_t cli, pid_t vmm))
{
	double deadline = now_ms() + TEST_CLI_TIMEOUT_S * TEST_MS_PER_SEC;
	struct timespec poll = { .tv_nsec = TEST_CLI_POLL_NS };
	static char out[TEST_OUTPUT_MAX], err[TEST_OUTPUT_MAX];
	pid_t vmms[TEST_VMM_MAX];
	int out_fd, err_fd, found = 0;
	pid_t cli = spawn_cli(args, &out_fd, &err_fd);

	CHECK(cli > 0);
	while (cli > 0 && now_ms() < deadline && waitpid(cli, NULL, WNOHANG) == 0) {
		probe_read_so_far(out_fd, out, sizeof(out));
		probe_read_so_far(err_fd, err, sizeof(err));
		if ((strstr(out, marker) || strstr(err, marker)) &&
		    (found = probe_children_named(cli, VMM_PROCESS_NAME, vmms, TEST_VMM_MAX)) >= want)
			break;
		nanosleep(&poll, NULL);
	}
	CHECK_INT_EQ(found, want);
	for (int i = 0; i < found; i++) {
		CHECK(vmms[i] != cli);
		CHECK(probe_environ_has(cli, PROBE_SECRET_NAME));
		CHECK(!probe_environ_has(vmms[i], PROBE_SECRET_NAME));
		CHECK(probe_check_every_thread_confined(vmms[i]) > 1);
		CHECK(probe_is_jailed(vmms[i]));
		if (also)
			also(cli, vmms[i]);
	}
	if (found != want)
		fprintf(stderr, "  %d of %d VMM processes under voidbox %s ...\n  stdout: %s\n"
			"  stderr: %s\n", found, want, args[0], out, err);
	if (cli > 0) {
		kill(cli, SIGKILL);
		waitpid(cli, NULL, 0);
	}
	close(out_fd);
	close(err_fd);
}

static void test_exec_interrupted_stops_in_order(void)
{
	double deadline = now_ms() + TEST_CLI_TIMEOUT_S * TEST_MS_PER_SEC;
	struct timespec poll = { .tv_nsec = TEST_CLI_POLL_NS };
	static char out[TEST_OUTPUT_MAX], err[TEST_OUTPUT_MAX];
	char prefix[TEST_PREFIX_LEN + 1];
	const char *args[] = { "exec", "--snapshot", prefix, "--", "sh", "-c",
			       "echo " TEST_READY_MARKER "; sleep " TEST_GUEST_SLEEP_S, NULL };
	int out_fd, err_fd, status = 0, running = -1;
	bool ready = false;
	pid_t cli;

	snprintf(prefix, sizeof(prefix), "%s", base_id);
	unsetenv("VOIDBOX_LOG_LEVEL"); /* stderr short enough to read whole */
	cli = spawn_cli(args, &out_fd, &err_fd);
	setenv("VOIDBOX_LOG_LEVEL", "debug", 1);
	CHECK(cli > 0);
	while (cli > 0 && !ready && now_ms() < deadline && waitpid(cli, NULL, WNOHANG) == 0) {
		probe_read_so_far(out_fd, out, sizeof(out));
		ready = strstr(out, TEST_READY_MARKER) != NULL;
		if (!ready)
			nanosleep(&poll, NULL);
	}
	CHECK(ready);
	/* its own, plus any an earlier test's kill left that its start has not swept */
	running = vm_test_count_runtime_dirs(work_dir);
	CHECK(running >= 1);
	if (cli > 0) {
		kill(cli, SIGINT);
		CHECK_INT_EQ(wait_cli(cli, &status), 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130);
	}
	probe_read_so_far(err_fd, err, sizeof(err));
	CHECK(strstr(err, "voidbox exec: cancelled by SIGINT") != NULL);
	CHECK_INT_EQ(vm_test_count_runtime_dirs(work_dir), running - 1);
	if (harness_checks_failed_in_test)
		fprintf(stderr, "  stdout: %s\n  stderr: %s\n", out, err);
	close(out_fd);
	close(err_fd);
}

/* A restore by `exec --snapshot` runs its VM in a confined process of its own. */
static void test_exec_from_snapshot_runs_in_vmm_process(void)
{
	char prefix[TEST_PREFIX_LEN + 1];
	const char *args[] = { "exec", "--snapshot", prefix, "--", "sh", "-c",
			       "echo " TEST_READY_MARKER "; sleep " TEST_GUEST_SLEEP_S, NULL };

	snprintf(prefix, sizeof(prefix), "%s", base_id);
	check_cli_vms_confined(args, TEST_READY_MARKER, 1, NULL);
}

/* Whether path exists in pid's root (through /proc/PID/root); errno otherwise. */
static int errno_in_root(pid_t pid, const char *path)
{
	char in_root[PATH_MAX];
	struct stat st;

	snprintf(in_root, sizeof(in_root), "/proc/%d/root%s", (int)pid, path);
	return stat(in_root, &st) == 0 ? 0 : errno;
}

/*
 * The snapshot store as the VMM process of a `snapshot create --diff` sees it: the base it
 * restored, and the one temporary directory the CLI made for the diff, but not the store's
 * other snapshots (the earlier diff).
 */
static void check_store_in_create_jail(pid_t cli, pid_t vmm)
{
	char store[PATH_MAX], path[PATH_MAX], home_store[PATH_MAX], tmp_prefix[PROBE_PATH_MAX];
	struct dirent *entry;
	bool tmp_seen = false;
	DIR *dir;

	snprintf(home_store, sizeof(home_store), "%s/home/%s", work_dir, SNAPSHOT_STORE_DIR_NAME);
	CHECK(realpath(home_store, store) != NULL);
	CHECK(diff_id[0] != '\0');
	snprintf(path, sizeof(path), "%s/%s/%s", store, base_id, VM_SNAPSHOT_STATE_FILE);
	CHECK_INT_EQ(errno_in_root(vmm, path), 0);
	snprintf(path, sizeof(path), "%s/%s/%s", store, diff_id, VM_SNAPSHOT_STATE_FILE);
	CHECK_INT_EQ(errno_in_root(vmm, path), ENOENT);
	/* the CLI's transaction directory (the store names it by the CLI's pid) */
	snprintf(tmp_prefix, sizeof(tmp_prefix), "%s%d-", SNAPSHOT_STORE_TMP_PREFIX, (int)cli);
	dir = opendir(store);
	CHECK(dir != NULL);
	while (dir && (entry = readdir(dir))) {
		if (strncmp(entry->d_name, tmp_prefix, strlen(tmp_prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", store, entry->d_name);
		CHECK_INT_EQ(errno_in_root(vmm, path), 0);
		tmp_seen = true;
	}
	if (dir)
		closedir(dir);
	CHECK(tmp_seen);
}

/*
 * `snapshot create --diff`: the restored VM whose snapshot is taken runs in a confined VMM
 * process of its own while PROGRAM runs, whose root holds of the store only the base and the
 * temporary directory the diff is written into (its store entry is never committed: the CLI
 * is killed, and the next create sweeps the temporary directory).
 */
static void test_create_runs_in_vmm_process(void)
{
	const char *args[] = { "snapshot", "create", "--diff", "--from", base_id, "--", "sleep",
			       TEST_GUEST_SLEEP_S, NULL };

	check_cli_vms_confined(args, TEST_RESTORE_LOG_MARKER, 1, check_store_in_create_jail);
}

/* The share and disk of test_share_and_disk_restore_jailed, beneath work_dir. */
static char share_dir[PATH_MAX], disk_path[PATH_MAX];

/*
 * A restore of a snapshot with a share and a read-only disk, as its VMM process sees its
 * root: the share there (its device sections name it; the worker works beneath it for the
 * VM's life), the disk gone (held open since creation).
 */
static void check_devices_in_restore_jail(pid_t cli, pid_t vmm)
{
	char path[PATH_MAX];

	struct stat st;

	(void)cli;
	snprintf(path, sizeof(path), "%s/%s", share_dir, TEST_SHARE_FILE);
	CHECK_INT_EQ(errno_in_root(vmm, path), 0);
	/* at most the empty mount point it was bound on is left */
	snprintf(path, sizeof(path), "/proc/%d/root%s", (int)vmm, disk_path);
	CHECK(stat(path, &st) < 0 || st.st_size == 0);
}

/* How many times needle occurs in text. */
static int count_of(const char *text, const char *needle)
{
	int count = 0;

	for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle))
		count++;
	return count;
}

/*
 * `snapshot create --mount DIR:/mnt/share --disk FILE:ro`, then `exec --snapshot` of it: the
 * restored VM runs jailed (its plan takes the share and the disk from the snapshot's device
 * sections), and through the jail the guest reads the share and the disk and writes the
 * share, which the host then sees; then `fork` of it, whose children each read the share.
 */
static void test_share_and_disk_restore_jailed(void)
{
	static struct cli_result created;
	char mount_arg[PATH_MAX + 32], disk_arg[PATH_MAX + 8], id[64], copied[PATH_MAX];
	char text[TEST_ERR_MAX] = "";
	const char *create[] = { "--output", "json", "snapshot", "create", "--memory",
				 TEST_MEMORY_MB, "--mount", mount_arg, "--disk", disk_arg, NULL };
	const char *restore[] = { "exec", "--snapshot", id, "--", "sh", "-c",
				  "cat " TEST_SHARE_GUEST "/" TEST_SHARE_FILE " && "
				  "head -c " TEST_DISK_TEXT_LEN " /dev/vda && "
				  "cp " TEST_SHARE_GUEST "/" TEST_SHARE_FILE " " TEST_SHARE_GUEST
				  "/" TEST_SHARE_COPY " && echo " TEST_READY_MARKER "; sleep "
				  TEST_GUEST_SLEEP_S, NULL };
	const char *delete_args[] = { "snapshot", "delete", id, NULL };
	char children[TEST_PREFIX_LEN];
	const char *fork_args[] = { "fork", "--children", children, "--snapshot", id, "--", "cat",
				    TEST_SHARE_GUEST "/" TEST_SHARE_FILE, NULL };
	json_t *json;
	int fd;

	snprintf(children, sizeof(children), "%d", TEST_FORK_CHILDREN);
	snprintf(share_dir, sizeof(share_dir), "%s/share", work_dir);
	snprintf(disk_path, sizeof(disk_path), "%s/disk.img", work_dir);
	CHECK_INT_EQ(mkdir(share_dir, TEST_SHARE_MODE), 0);
	CHECK_INT_EQ(chmod(share_dir, TEST_SHARE_MODE), 0); /* the guest's user writes it */
	snprintf(copied, sizeof(copied), "%s/%s", share_dir, TEST_SHARE_FILE);
	fd = open(copied, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, TEST_SHARE_FILE_MODE);
	CHECK(fd >= 0 && write(fd, TEST_SHARE_TEXT, strlen(TEST_SHARE_TEXT)) ==
			     (ssize_t)strlen(TEST_SHARE_TEXT));
	if (fd >= 0)
		close(fd);
	fd = open(disk_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, TEST_SHARE_FILE_MODE);
	CHECK(fd >= 0 && write(fd, TEST_DISK_TEXT, strlen(TEST_DISK_TEXT)) ==
			     (ssize_t)strlen(TEST_DISK_TEXT));
	CHECK(fd >= 0 && ftruncate(fd, TEST_DISK_BYTES) == 0);
	if (fd >= 0)
		close(fd);
	snprintf(mount_arg, sizeof(mount_arg), "%s:%s", share_dir, TEST_SHARE_GUEST);
	snprintf(disk_arg, sizeof(disk_arg), "%s:ro", disk_path);

	run_cli(&created, create);
	CHECK_INT_EQ(created.status, 0);
	json = json_loads(created.out, 0, NULL);
	CHECK(json != NULL);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(json, "id")) ?: "");
	json_decref(json);
	CHECK(id[0] != '\0');
	if (!id[0])
		return;
	check_cli_vms_confined(restore, TEST_READY_MARKER, 1, check_devices_in_restore_jail);
	snprintf(copied, sizeof(copied), "%s/%s", share_dir, TEST_SHARE_COPY);
	fd = open(copied, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	if (fd >= 0) {
		read_back(fd, text, sizeof(text));
		CHECK_STR_EQ(text, TEST_SHARE_TEXT);
	}
	/*
	 * a fork of it: the children restore the parent's snapshot once it was checked against
	 * the share and disk the parent was granted, and each reads the share
	 */
	run_cli(&created, fork_args);
	CHECK_INT_EQ(created.status, 0);
	CHECK_INT_EQ(count_of(created.out, TEST_SHARE_TEXT), TEST_FORK_CHILDREN + 1);
	if (created.status != 0)
		fprintf(stderr, "  fork: %s\n", created.err);
	/* the store holds only the base and its diffs again, as the last test expects */
	run_cli(&created, delete_args);
	CHECK_INT_EQ(created.status, 0);
}

/* `fork`: the restored parent and each child run in a confined VMM process of their own. */
static void test_fork_children_run_in_vmm_processes(void)
{
	char prefix[TEST_PREFIX_LEN + 1], children[TEST_PREFIX_LEN];
	const char *args[] = { "fork", "--children", children, "--snapshot", prefix, "--", "sleep",
			       TEST_GUEST_SLEEP_S, NULL };

	snprintf(prefix, sizeof(prefix), "%s", base_id);
	snprintf(children, sizeof(children), "%d", TEST_FORK_CHILDREN);
	check_cli_vms_confined(args, TEST_FORK_LOG_MARKER, TEST_FORK_CHILDREN + 1, NULL);
}

/* pages in the base's working-set list, or -1 when it has no valid one */
static long long base_working_set_pages(void)
{
	char dir[PATH_MAX], err[TEST_ERR_MAX];
	struct vm_snapshot_info info;
	struct guest_memory layout;
	struct working_set ws;
	long long pages;

	snprintf(dir, sizeof(dir), "%s/snapshots/%s", getenv(GUEST_IMAGE_ENV_HOME) ?: "", base_id);
	if (vm_snapshot_inspect(dir, &info, err, sizeof(err)) < 0 ||
	    guest_memory_plan(&layout, info.memory_mb, 0, err, sizeof(err)) < 0 ||
	    working_set_load(dir, info.id, &layout, &ws, err, sizeof(err)) < 0)
		return -1;
	pages = (long long)ws.pages;
	working_set_release(&ws);
	return pages;
}

static void garble_base_working_set(void)
{
	static const char garbage[] = "not a working-set list";
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/snapshots/%s/%s", getenv(GUEST_IMAGE_ENV_HOME) ?: "",
		 base_id, VM_WORKING_SET_FILE);
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0);
	if (fd >= 0) {
		CHECK_INT_EQ((int)write(fd, garbage, sizeof(garbage)), (int)sizeof(garbage));
		close(fd);
	}
}

/*
 * The first restore recorded the pages it touched; a garbled list is ignored (the restore
 * answers the same) and recorded again; a restore that prefetches it answers the same too.
 */
static void test_working_set_recorded_and_checked(void)
{
	static struct cli_result r;
	char prefix[TEST_PREFIX_LEN + 1];
	const char *args[] = { "exec", "--snapshot", prefix, "--", "cat",
			       "/proc/sys/kernel/hostname", NULL };
	long long pages = base_working_set_pages();

	snprintf(prefix, sizeof(prefix), "%s", base_id);
	printf("working set recorded by the first restore: %lld pages\n", pages);
	CHECK(pages > 0);
	garble_base_working_set();
	CHECK(base_working_set_pages() < 0);
	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	CHECK_STR_EQ(r.out, hostname);
	CHECK(strstr(r.err, "working-set file is not valid") != NULL);
	CHECK(base_working_set_pages() > 0);
	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	CHECK_STR_EQ(r.out, hostname);
	CHECK(strstr(r.err, "prefetched") != NULL);
	/* a restore that prefetched its own list does not ask its VMM to record one again */
	CHECK(strstr(r.err, "nothing to record") != NULL);
}

static void test_list_and_inspect(void)
{
	static struct cli_result r;
	const char *list[] = { "--output", "json", "snapshot", "list", NULL };
	const char *inspect[] = { "--output", "json", "snapshot", "inspect", base_id, NULL };
	json_t *json;

	run_cli(&r, list);
	CHECK_INT_EQ(r.status, 0);
	json = json_loads(r.out, 0, NULL);
	CHECK(json_is_array(json) && json_array_size(json) == 1);
	if (json_is_array(json) && json_array_size(json) == 1)
		CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(json, 0), "id")),
			     base_id);
	json_decref(json);

	run_cli(&r, inspect);
	CHECK_INT_EQ(r.status, 0);
	json = json_loads(r.out, 0, NULL);
	CHECK(json != NULL);
	CHECK(json_is_true(json_object_get(json, "restorable")));
	/* KVM runs the VMs here, so inspect could ask it for this host's CPU features too */
	CHECK(json_is_true(json_object_get(json, "cpu_features_checked")));
	CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(json, "vm"), "memory_mb")),
		     atoi(TEST_MEMORY_MB));
	/* the save recorded the CPU features KVM gave the guest (SSE2 is in every x86-64 CPU) */
	CHECK(json_is_object(json_object_get(json_object_get(json, "vm"), "cpu_features")));
	CHECK(strtoul(json_string_value(json_object_get(json_object_get(json_object_get(json, "vm"),
									  "cpu_features"),
							 "leaf1_edx")) ?: "0", NULL, 16) &
	      TEST_CPUID_1_EDX_SSE2);
	json_decref(json);
}

/*
 * A test copy of the base: copy_dir = work_dir/name, made, with the base's memory file
 * hard-linked into it; base_dir = the base's directory in the store.
 */
static void start_base_copy(const char *name, char base_dir[PATH_MAX], char copy_dir[PATH_MAX])
{
	char from[PATH_MAX], to[PATH_MAX];

	snprintf(base_dir, PATH_MAX, "%s/%s/%s", getenv(GUEST_IMAGE_ENV_HOME) ?: "", "snapshots",
		 base_id);
	snprintf(copy_dir, PATH_MAX, "%s/%s", work_dir, name);
	CHECK_INT_EQ(mkdir(copy_dir, 0755), 0);
	snprintf(from, sizeof(from), "%s/%s", base_dir, VM_SNAPSHOT_MEMORY_FILE);
	snprintf(to, sizeof(to), "%s/%s", copy_dir, VM_SNAPSHOT_MEMORY_FILE);
	CHECK_INT_EQ(link(from, to), 0);
}

/*
 * A test copy of the base (state re-encoded with every CPUID feature bit set, memory file
 * hard-linked) must be refused by the restore itself, before the guest runs, naming a
 * feature: no host offers a guest every bit of those five registers.
 */
static void test_cpu_feature_mismatch_refused(void)
{
	static struct cli_result r;
	struct snapshot_image *image = calloc(1, sizeof(*image));
	char base_dir[PATH_MAX], copy_dir[PATH_MAX], from[PATH_MAX], err[TEST_ERR_MAX];
	const char *args[] = { "exec", "--snapshot", copy_dir, "--", "true", NULL };
	uint8_t *state = NULL;
	uint64_t id = 0;
	long len = 0;
	FILE *f;

	CHECK(image != NULL);
	if (!image)
		return;
	start_base_copy("all-features", base_dir, copy_dir);
	snprintf(from, sizeof(from), "%s/%s", base_dir, VM_SNAPSHOT_STATE_FILE);
	f = fopen(from, "rb");
	CHECK(f != NULL);
	if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (state = malloc((size_t)len)) && fread(state, 1, (size_t)len, f) != (size_t)len)
		len = 0;
	if (f)
		fclose(f);
	CHECK(len > 0 && state != NULL);
	if (len > 0 && state) {
		CHECK_INT_EQ(snapshot_decode(state, (size_t)len, SNAPSHOT_DECODE_CHECKED, image, &id,
					     err, sizeof(err)), 0);
		CHECK(image->meta.has_cpu_features);
		for (unsigned int i = 0; i < CPU_FEATURE_REG_COUNT; i++)
			image->meta.cpu_features.regs[i] = UINT32_MAX;
		CHECK_INT_EQ(snapshot_file_write(copy_dir, image, &id, err, sizeof(err)), 0);
		run_cli(&r, args);
		CHECK(r.status != 0);
		CHECK(strstr(r.err, "the snapshot's guest was shown CPU feature") != NULL);
		CHECK(strstr(r.err, "which this host lacks") != NULL);
		CHECK(strstr(r.err, "cold-booting") == NULL);
	}
	snapshot_image_release(image);
	free(image);
	free(state);
}

/*
 * The base's manifest.json records the CPU features its guest was shown, and a test copy of
 * the base whose manifest.json (only) claims every feature is refused by the restore before
 * the guest runs, naming a feature and the manifest: a feature list edited in a copy, or
 * carried in by an imported archive, counts as the state file's does.
 */
static void test_manifest_cpu_features_refused(void)
{
	static struct cli_result r;
	char base_dir[PATH_MAX], copy_dir[PATH_MAX], from[PATH_MAX], to[PATH_MAX];
	const char *args[] = { "exec", "--snapshot", copy_dir, "--", "true", NULL };
	json_t *manifest, *features;
	const char *leaf1_edx;
	int in, out;
	char buf[TEST_COPY_CHUNK];
	ssize_t n;

	start_base_copy("features-in-manifest", base_dir, copy_dir);
	snprintf(from, sizeof(from), "%s/manifest.json", base_dir);
	manifest = json_load_file(from, 0, NULL);
	CHECK(manifest != NULL);
	features = json_object_get(manifest, "cpu_features");
	CHECK(json_is_object(features));
	leaf1_edx = json_string_value(json_object_get(features, "leaf1_edx"));
	CHECK(leaf1_edx && (strtoul(leaf1_edx, NULL, 16) & TEST_CPUID_1_EDX_SSE2));
	if (!json_is_object(features)) {
		json_decref(manifest);
		return;
	}
	for (const char *const *reg = (const char *const[]){ "leaf1_ecx", "leaf1_edx", "leaf7_ebx",
							     "leaf7_ecx", "leaf7_edx", NULL };
	     *reg; reg++)
		json_object_set_new(features, *reg, json_string("0xffffffff"));

	/* the state file as it is: only the manifest differs from the base */
	snprintf(from, sizeof(from), "%s/%s", base_dir, VM_SNAPSHOT_STATE_FILE);
	snprintf(to, sizeof(to), "%s/%s", copy_dir, VM_SNAPSHOT_STATE_FILE);
	in = open(from, O_RDONLY | O_CLOEXEC);
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	CHECK(in >= 0 && out >= 0);
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		CHECK_INT_EQ(write(out, buf, (size_t)n), n);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	snprintf(to, sizeof(to), "%s/manifest.json", copy_dir);
	CHECK_INT_EQ(json_dump_file(manifest, to, JSON_INDENT(2)), 0);
	json_decref(manifest);

	run_cli(&r, args);
	CHECK(r.status != 0);
	CHECK(strstr(r.err, "the snapshot's guest was shown CPU feature") != NULL);
	CHECK(strstr(r.err, "which this host lacks") != NULL);
	CHECK(strstr(r.err, "manifest.json") != NULL);
	CHECK(strstr(r.err, "cold-booting") == NULL);
}

static void test_diff_keeps_its_pages(void)
{
	static struct cli_result r;
	const char *create[] = { "--output", "json", "snapshot", "create", "--diff", "--from",
				 base_id, "--", "sh", "-c", "echo from-the-diff > /tmp/diff-marker",
				 NULL };
	const char *read_marker[] = { "exec", "--snapshot", diff_id, "--", "cat",
				      "/tmp/diff-marker", NULL };
	json_t *json;

	run_cli(&r, create);
	CHECK_INT_EQ(r.status, 0);
	json = json_loads(r.out, 0, NULL);
	CHECK(json != NULL);
	snprintf(diff_id, sizeof(diff_id), "%s",
		 json_string_value(json_object_get(json, "id")) ?: "");
	CHECK_STR_EQ(json_string_value(json_object_get(json, "parent")), base_id);
	json_decref(json);
	CHECK(strstr(diff_id, "-diff-1") != NULL);

	run_cli(&r, read_marker);
	CHECK_INT_EQ(r.status, 0);
	CHECK_STR_EQ(r.out, "from-the-diff\n");
}

static void test_spec_snapshot_runs_workflow(void)
{
	static struct cli_result r;
	char spec_path[PATH_MAX], spec_text[PATH_MAX * 2];
	const char *args[] = { "--output", "json", "--log-level", "info", "run", "--file",
			       spec_path, "--sandbox-mode", "local", NULL };
	json_t *json;
	FILE *f;

	snprintf(spec_path, sizeof(spec_path), "%s/from-snapshot.yaml", work_dir);
	snprintf(spec_text, sizeof(spec_text),
		 "kind: workflow\nname: from-snapshot\nsandbox:\n  snapshot: \"%s\"\n"
		 "workflow:\n  steps:\n    - name: read\n"
		 "      run: {program: cat, args: [/tmp/diff-marker]}\n  output_step: read\n",
		 diff_id);
	f = fopen(spec_path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs(spec_text, f);
	fclose(f);
	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	CHECK(strstr(r.err, "restoring snapshot") != NULL);
	json = json_loads(r.out, 0, NULL);
	CHECK(json_is_true(json_object_get(json, "success")));
	CHECK_STR_EQ(json_string_value(json_object_get(json, "output")), "from-the-diff\n");
	json_decref(json);
}

static void test_fork_children_are_distinct(void)
{
	static struct cli_result r;
	const char *args[] = { "--output", "json", "fork", "--children", "3", "--snapshot",
			       base_id, "--warmup", "echo warm > /tmp/warm", "--", "sh", "-c",
			       "echo $(cat /tmp/warm)-$VOIDBOX_FORK_INDEX", NULL };
	bool seen[TEST_FORK_CHILDREN + 1] = { false };
	json_t *json, *runs;

	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	json = json_loads(r.out, 0, NULL);
	runs = json_object_get(json, "runs");
	CHECK_INT_EQ(json_array_size(runs), TEST_FORK_CHILDREN + 1);
	for (size_t i = 0; i < json_array_size(runs); i++) {
		const char *out = json_string_value(json_object_get(json_array_get(runs, i),
								    "stdout"));
		unsigned int index = 0;

		CHECK(out && sscanf(out, "warm-%u", &index) == 1);
		if (out && index <= TEST_FORK_CHILDREN) {
			CHECK(!seen[index]);
			seen[index] = true;
		}
	}
	for (unsigned int i = 0; i <= TEST_FORK_CHILDREN; i++)
		CHECK(seen[i]);
	printf("fork: %lld ms for %d children\n",
	       (long long)json_integer_value(json_object_get(json, "fork_ms")), TEST_FORK_CHILDREN);
	json_decref(json);
}

/* The diff and its base, moved to another store as one archive, restore there. */
static void test_export_import_restore_elsewhere(void)
{
	static struct cli_result r;
	char archive[PATH_MAX], home[PATH_MAX], other_home[PATH_MAX];
	const char *export_args[] = { "snapshot", "export", diff_id, "-o", archive, NULL };
	const char *import_args[] = { "--output", "json", "snapshot", "import", archive, NULL };
	const char *verify_args[] = { "snapshot", "verify", diff_id, NULL };
	const char *read_marker[] = { "exec", "--snapshot", diff_id, "--", "cat",
				      "/tmp/diff-marker", NULL };
	json_t *json;

	snprintf(archive, sizeof(archive), "%s/diff.vbsnap", work_dir);
	snprintf(other_home, sizeof(other_home), "%s/other-home", work_dir);
	snprintf(home, sizeof(home), "%s", getenv(GUEST_IMAGE_ENV_HOME) ?: "");
	run_cli(&r, export_args);
	CHECK_INT_EQ(r.status, 0);
	CHECK(strstr(r.out, "with its base") != NULL);

	setenv(GUEST_IMAGE_ENV_HOME, other_home, 1);
	run_cli(&r, import_args);
	CHECK_INT_EQ(r.status, 0);
	json = json_loads(r.out, 0, NULL);
	CHECK_STR_EQ(json_string_value(json_object_get(json, "imported")) ?: "", diff_id);
	CHECK_STR_EQ(json_string_value(json_object_get(json, "base")) ?: "", base_id);
	json_decref(json);
	run_cli(&r, verify_args);
	CHECK_INT_EQ(r.status, 0);
	run_cli(&r, read_marker);
	CHECK_INT_EQ(r.status, 0);
	CHECK(strstr(r.err, "cold-booting") == NULL);
	CHECK_STR_EQ(r.out, "from-the-diff\n");
	printf("export + import + restore elsewhere: restore + exec %.0f ms\n", r.ms);
	setenv(GUEST_IMAGE_ENV_HOME, home, 1);
}

/*
 * Guest /tmp filled until it refuses (the agent's file size limit is 100 MiB, so several
 * files), then a 32 MiB buffer of random bytes: with the kernel's own, most of a 256 MiB
 * guest's pages hold data, and so does the memory file written from them.
 */
#define TEST_FILL_GUEST "for f in a b c; do dd if=/dev/urandom of=/tmp/fill-$f bs=1M count=60 " \
	"2>/dev/null; done; dd if=/dev/urandom of=/dev/null bs=32M count=1 2>/dev/null; true"

static void test_create_of_full_guest_on_tmpfs_store(void)
{
	static struct cli_result r;
	const char *args[] = { "snapshot", "create", "--memory", TEST_MEMORY_MB, "--", "sh", "-c",
			       TEST_FILL_GUEST, NULL };
	char home[PATH_MAX], shm_home[] = "/dev/shm/vbsnaptmpfsXXXXXX", cmd[PATH_MAX + 16];
	struct statfs fs;

	if (!mkdtemp(shm_home) || statfs(shm_home, &fs) < 0 || fs.f_type != TMPFS_MAGIC) {
		fprintf(stderr, "  /dev/shm is not a tmpfs here (%s): nothing to check\n",
			strerror(errno));
		CHECK(!harness_vm_required()); /* CI's machines have one */
		return;
	}
	snprintf(home, sizeof(home), "%s", getenv(GUEST_IMAGE_ENV_HOME) ?: "");
	setenv(GUEST_IMAGE_ENV_HOME, shm_home, 1);
	run_cli(&r, args);
	CHECK_INT_EQ(r.status, 0);
	if (r.status != 0)
		fprintf(stderr, "  stderr: %s\n", r.err);
	CHECK(strstr(r.err, "the VMM process ended") == NULL);
	printf("snapshot create of a full guest on tmpfs: %.0f ms\n", r.ms);
	setenv(GUEST_IMAGE_ENV_HOME, home, 1);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shm_home);
	CHECK_INT_EQ(system(cmd), 0);
}

static void test_delete_base_and_diff(void)
{
	static struct cli_result r;
	const char *del[] = { "snapshot", "delete", base_id, NULL };
	const char *list[] = { "--output", "json", "snapshot", "list", NULL };
	json_t *json;

	run_cli(&r, del);
	CHECK_INT_EQ(r.status, 0);
	CHECK(strstr(r.out, "and its diffs") != NULL);
	run_cli(&r, list);
	json = json_loads(r.out, 0, NULL);
	CHECK(json_is_array(json) && json_array_size(json) == 0);
	json_decref(json);
}

int main(int argc, char **argv)
{
	struct guest_image_paths image;
	char why[TEST_ERR_MAX], home[PATH_MAX], cmd[PATH_MAX + 16];
	const char *tmpdir = getenv("TMPDIR");

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH-TO-voidbox\n", argv[0]);
		return 2;
	}
	probe_reexec_with_secret(argv); /* the API key the CLI has and its VMM must not */
	voidbox_cli = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	log_set_level(LOG_LEVEL_WARN);
	host_env_apply();
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	if (guest_image_resolve(NULL, NULL, &image, why, sizeof(why)) < 0)
		harness_skip_vm(why);
	snprintf(work_dir, sizeof(work_dir), "%s/vbsnapvmXXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(work_dir))
		harness_fail_setup("cannot create a temporary directory");
	snprintf(home, sizeof(home), "%s/home", work_dir);
	setenv(GUEST_IMAGE_ENV_KERNEL, image.kernel, 1);
	if (image.initramfs[0])
		setenv(GUEST_IMAGE_ENV_INITRAMFS, image.initramfs, 1);
	setenv(GUEST_IMAGE_ENV_HOME, home, 1);
	/* runtime directories (console, socket) under work_dir, and a debug log on stderr */
	setenv("XDG_RUNTIME_DIR", work_dir, 1);
	setenv("VOIDBOX_LOG_LEVEL", "debug", 1);

	/* create first: it pays for any one-time kernel preparation in the fresh VOIDBOX_HOME */
	RUN_TEST(test_create_base);
	RUN_TEST(test_missing_snapshot_cold_boots);
	if (base_id[0]) {
		RUN_TEST(test_exec_from_snapshot);
		RUN_TEST(test_working_set_recorded_and_checked);
		RUN_TEST(test_exec_from_snapshot_runs_in_vmm_process);
		RUN_TEST(test_exec_interrupted_stops_in_order);
		RUN_TEST(test_list_and_inspect);
		RUN_TEST(test_cpu_feature_mismatch_refused);
		RUN_TEST(test_manifest_cpu_features_refused);
		RUN_TEST(test_diff_keeps_its_pages);
		RUN_TEST(test_create_runs_in_vmm_process);
		if (diff_id[0])
			RUN_TEST(test_spec_snapshot_runs_workflow);
		RUN_TEST(test_fork_children_are_distinct);
		RUN_TEST(test_fork_children_run_in_vmm_processes);
		RUN_TEST(test_share_and_disk_restore_jailed);
		if (diff_id[0])
			RUN_TEST(test_export_import_restore_elsewhere);
		RUN_TEST(test_delete_base_and_diff);
	}
	RUN_TEST(test_create_of_full_guest_on_tmpfs_store);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", work_dir);
	return harness_finish();
}
