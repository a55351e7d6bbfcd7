/*
 * Snapshot benchmark, all figures from one run on one machine:
 *   - cold boot -> first exec (`true` answered) against restore -> first exec, both without
 *     the snapshot's working-set list (pages fault in one at a time; that restore records the
 *     list) and with it (the listed pages prefetched before the vCPUs run; goal: 20x);
 *   - base snapshot create time and size, diff create time and size against the base;
 *   - fork time per child (and each child's first exec), and the whole fork against one restore,
 *     as the median of --fork-runs forks; beside it the CPU time the fork and a restore cost this
 *     process and how busy the host's CPUs were during the fork, which say whether a fork of n
 *     is bound by n children's CPU time on too few CPUs (then only cheaper children help);
 *   - an idle VM's diff: restore, wait SB_IDLE_WAIT_S, save a diff; its size against guest RAM;
 *   - QEMU's own save/restore of the same guest for comparison: migrate to a file, then a new
 *     QEMU with `-incoming "exec:cat FILE"` -> first exec over vhost-vsock.
 *
 * voidbox is measured in this process through src/sandbox (no CLI process start-up on either
 * side of the cold/restore comparison, so the ratio is the VMM's own). QEMU is a fresh process
 * per step, as users run it; its start-up is part of its figures, and the table says so.
 * Runs alternate cold and restore so machine drift hits both alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include "cli/host_env.h"
#include "boot_measure.h"
#include "common/log.h"
#include "host/control_channel.h"
#include "proto/protocol.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/cmdline.h"
#include "vmm/memory.h"
#include "vmm/working_set.h"

/* paths live under a short mkdtemp directory; truncation cannot happen here */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define SB_PROG "snapshot_bench" /* the name its messages start with */
#define SB_DEFAULT_RUNS 3u
#define SB_DEFAULT_MEMORY_MB 256u
#define SB_DEFAULT_CHILDREN 4u
#define SB_DEFAULT_FORK_RUNS 3u
#define SB_DEFAULT_CID 52u
#define SB_MAX_RUNS 100u
#define SB_MAX_CHILDREN 64u
#define SB_MAX_MEMORY_MB 2048u
#define SB_ERROR_MAX 1024
#define SB_EXIT_USAGE 2
#define SB_EXIT_FAILED 1
#define SB_BLOCK_BYTES 512
#define SB_BYTES_PER_MIB (1024.0 * 1024.0)
#define SB_EXEC_TIMEOUT_S 60
#define SB_QEMU_TIMEOUT_MS 180000
#define SB_PROBE_CONNECT_MS 200
#define SB_PROBE_INTERVAL_NS 10000000L
#define SB_QMP_POLL_MS 20
#define SB_QMP_BUF 8192
#define SB_REAP_WAIT_NS 10000000L
#define SB_REAP_TRIES 500
#define SB_MS_PER_SEC 1000
#define SB_US_PER_MS 1000
#define SB_NS_PER_MS 1000000L
#define SB_QEMU_ARGV_MAX 32
#define SB_DIFF_WORKLOAD "dd if=/dev/zero of=/tmp/bench-diff bs=1024 count=1024 2>/dev/null"
#define SB_IDLE_WAIT_S 10
#define SB_PERCENT 100.0

struct sb_options {
	unsigned int runs;
	unsigned int memory_mb;
	unsigned int children;
	unsigned int fork_runs;
	unsigned int cid;
	const char *kernel;
	const char *initramfs;
	const char *qemu_path; /* NULL: skip QEMU */
	const char *qemu_machine;
	const char *json_path;
	const char *log_level; /* NULL: warnings only, so the figures stay readable */
};

struct sb_figures {
	double cold_ms[SB_MAX_RUNS];
	double restore_ms[SB_MAX_RUNS];	 /* no working-set list: lazy faults, records one */
	double prefetch_ms[SB_MAX_RUNS]; /* with the list the run before recorded */
	double prefetch_cpu_ms[SB_MAX_RUNS]; /* CPU time the bench's process spent on it */
	uint64_t working_set_pages;	 /* the list's size after the last run */
	uint64_t working_set_written_pages; /* of them, copied in for writing on a restore */
	uint32_t working_set_runs;
	uint64_t prefaulted_pages; /* of the last prefetched restore: mapped into KVM ahead */
	double create_ms;
	double diff_create_ms;
	uint64_t base_bytes;	  /* allocated */
	uint64_t base_apparent;	  /* file sizes */
	uint64_t diff_bytes;
	double diff_restore_ms;
	double fork_run_ms[SB_MAX_RUNS];
	double fork_run_busy_pct[SB_MAX_RUNS]; /* the host's CPUs busy during it, of all of them */
	double fork_run_cpu_ms[SB_MAX_RUNS];	/* CPU time of the bench's process during it */
	double parent_exec_run_ms[SB_MAX_RUNS];	/* the parent's first exec after each fork */
	double fork_ms;				/* medians of the fork runs */
	double fork_cpu_busy_pct;
	double fork_cpu_ms;
	uint64_t idle_diff_bytes; /* allocated, after SB_IDLE_WAIT_S idle */
	double child_exec_ms;	  /* slowest child's first exec after a fork, of all runs */
	double parent_exec_ms;
	bool have_qemu;
	double qemu_cold_ms;
	double qemu_save_ms;
	double qemu_restore_ms;
	uint64_t qemu_file_bytes;
};

static void sb_usage(FILE *out)
{
	fprintf(out,
		"usage: snapshot_bench [--runs N] [--memory MB] [--children N] [--fork-runs N]\n"
		"                      [--kernel K] [--initramfs I] [--qemu PATH | --no-qemu]\n"
		"                      [--qemu-machine M] [--cid N] [--json PATH]\n"
		"                      [--log-level LEVEL]\n\n"
		"Cold boot -> first exec against restore -> first exec without and with the\n"
		"snapshot's working-set list (N runs each), snapshot create time, diff size against\n"
		"base, fork time per child and against one restore, an idle VM's diff after %d s,\n"
		"and QEMU's migrate-to-file restore of the same guest. Needs a /dev/kvm that runs\n"
		"stock kernels (and /dev/vhost-vsock for the QEMU part). Defaults: 3 runs, 256 MiB,\n"
		"4 children, 3 forks (the fork's figures are their medians).\n", SB_IDLE_WAIT_S);
}

enum sb_option {
	SB_OPT_RUNS = 1000, SB_OPT_MEMORY, SB_OPT_CHILDREN, SB_OPT_KERNEL, SB_OPT_INITRAMFS,
	SB_OPT_QEMU, SB_OPT_NO_QEMU, SB_OPT_QEMU_MACHINE, SB_OPT_CID, SB_OPT_JSON, SB_OPT_HELP,
	SB_OPT_LOG_LEVEL, SB_OPT_FORK_RUNS,
};

static int sb_parse(int argc, char **argv, struct sb_options *o)
{
	static const struct option options[] = {
		{ "runs", required_argument, NULL, SB_OPT_RUNS },
		{ "memory", required_argument, NULL, SB_OPT_MEMORY },
		{ "children", required_argument, NULL, SB_OPT_CHILDREN },
		{ "fork-runs", required_argument, NULL, SB_OPT_FORK_RUNS },
		{ "kernel", required_argument, NULL, SB_OPT_KERNEL },
		{ "initramfs", required_argument, NULL, SB_OPT_INITRAMFS },
		{ "qemu", required_argument, NULL, SB_OPT_QEMU },
		{ "no-qemu", no_argument, NULL, SB_OPT_NO_QEMU },
		{ "qemu-machine", required_argument, NULL, SB_OPT_QEMU_MACHINE },
		{ "cid", required_argument, NULL, SB_OPT_CID },
		{ "json", required_argument, NULL, SB_OPT_JSON },
		{ "help", no_argument, NULL, SB_OPT_HELP },
		{ "log-level", required_argument, NULL, SB_OPT_LOG_LEVEL },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		bool ok = true;

		switch (c) {
		case SB_OPT_RUNS:
			ok = boot_parse_count(SB_PROG, "--runs", optarg, SB_MAX_RUNS, &o->runs);
			break;
		case SB_OPT_MEMORY:
			ok = boot_parse_count(SB_PROG, "--memory", optarg, SB_MAX_MEMORY_MB, &o->memory_mb);
			break;
		case SB_OPT_CHILDREN:
			ok = boot_parse_count(SB_PROG, "--children", optarg, SB_MAX_CHILDREN, &o->children);
			break;
		case SB_OPT_FORK_RUNS:
			ok = boot_parse_count(SB_PROG, "--fork-runs", optarg, SB_MAX_RUNS,
					      &o->fork_runs);
			break;
		case SB_OPT_KERNEL: o->kernel = optarg; break;
		case SB_OPT_INITRAMFS: o->initramfs = optarg; break;
		case SB_OPT_QEMU: o->qemu_path = optarg; break;
		case SB_OPT_NO_QEMU: o->qemu_path = NULL; break;
		case SB_OPT_QEMU_MACHINE: o->qemu_machine = optarg; break;
		case SB_OPT_CID:
			ok = boot_parse_count(SB_PROG, "--cid", optarg, UINT32_MAX - 1, &o->cid);
			break;
		case SB_OPT_JSON: o->json_path = optarg; break;
		case SB_OPT_LOG_LEVEL: o->log_level = optarg; break;
		case SB_OPT_HELP: sb_usage(stdout); return -1;
		default: ok = false; break;
		}
		if (!ok)
			return SB_EXIT_USAGE;
	}
	return 0;
}

static uint64_t sb_dir_bytes(const char *path, bool allocated)
{
	char cmd_path[PATH_MAX];
	const char *names[] = { "state", "memory.mem", "memory.diff" };
	uint64_t total = 0;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct stat st;

		snprintf(cmd_path, sizeof(cmd_path), "%s/%s", path, names[i]);
		if (stat(cmd_path, &st) == 0)
			total += allocated ? (uint64_t)st.st_blocks * SB_BLOCK_BYTES :
					     (uint64_t)st.st_size;
	}
	return total;
}

/* Exec `true`; 0 when it answered with exit 0. */
static int sb_exec(struct sandbox *sandbox, const char *shell_command)
{
	static char sh[] = "sh", dash_c[] = "-c", tru[] = "true";
	char *args[] = { dash_c, (char *)shell_command };
	struct proto_exec_request req = {
		.program = shell_command ? sh : tru, .args = shell_command ? args : NULL,
		.args_count = shell_command ? 2 : 0, .has_timeout = true,
		.timeout_secs = SB_EXEC_TIMEOUT_S,
	};
	struct proto_exec_response resp = { 0 };
	char err[SB_ERROR_MAX] = "";
	/* through the sandbox, as the CLI runs it: a restored one records its working set here */
	int rc = sandbox_exec(sandbox, &req, NULL, NULL, &resp, err, sizeof(err));

	if (rc == 0 && resp.exit_code != 0)
		snprintf(err, sizeof(err), "exit code %d", resp.exit_code);
	if (rc == 0 && resp.exit_code != 0)
		rc = -EIO;
	if (rc < 0)
		fprintf(stderr, "snapshot_bench: exec failed: %s\n", err);
	proto_exec_response_free(&resp);
	return rc;
}

static int sb_cold(const struct sandbox_config *cfg, double *ms)
{
	struct sandbox *sandbox = NULL;
	char err[SB_ERROR_MAX];
	double start = boot_now_ms();
	int rc = sandbox_start(cfg, &sandbox, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "snapshot_bench: cold boot: %s\n", err);
	if (rc == 0)
		rc = sb_exec(sandbox, NULL);
	*ms = boot_now_ms() - start;
	sandbox_destroy(sandbox, rc < 0);
	return rc;
}

/*
 * CPU time this process has used, in ms: its VMM threads included (the vCPUs' guest time
 * among them), since the bench runs every VM in-process.
 */
static double sb_process_cpu_ms(void)
{
	struct rusage use;

	if (getrusage(RUSAGE_SELF, &use) != 0)
		return 0;
	return (double)(use.ru_utime.tv_sec + use.ru_stime.tv_sec) * SB_MS_PER_SEC +
	       (double)(use.ru_utime.tv_usec + use.ru_stime.tv_usec) / SB_US_PER_MS;
}

/* A restore of dir up to its first exec's answer: wall time in *ms, CPU time in *cpu_ms. */
static int sb_restore_cpu(const char *dir, bool track, struct sandbox **out, double *ms,
			  double *cpu_ms)
{
	struct sandbox_restore_config restore = { .snapshot_dir = dir, .track_dirty_pages = track };
	char err[SB_ERROR_MAX];
	double start = boot_now_ms(), cpu_start = sb_process_cpu_ms();
	int rc = sandbox_start_from_snapshot(&restore, out, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "snapshot_bench: restore of %s: %s\n", dir, err);
	if (rc == 0)
		rc = sb_exec(*out, NULL);
	*ms = boot_now_ms() - start;
	*cpu_ms = sb_process_cpu_ms() - cpu_start;
	return rc;
}

static int sb_restore(const char *dir, bool track, struct sandbox **out, double *ms)
{
	double ignored;

	return sb_restore_cpu(dir, track, out, ms, &ignored);
}

static int sb_save(struct sandbox *sandbox, const char *dir, enum vm_snapshot_type type,
		   const char *parent, double *ms)
{
	struct vm_snapshot_options opts = { .type = type, .parent_dir = parent,
					    .after = VM_SNAPSHOT_STAY_STOPPED };
	char err[SB_ERROR_MAX];
	double start = boot_now_ms();
	int rc = sandbox_snapshot(sandbox, dir, &opts, err, sizeof(err));

	*ms = boot_now_ms() - start;
	if (rc < 0)
		fprintf(stderr, "snapshot_bench: snapshot into %s: %s\n", dir, err);
	return rc;
}

static int sb_create_base(const struct sandbox_config *cfg, const char *dir,
			  struct sb_figures *fig)
{
	struct sandbox *sandbox = NULL;
	char err[SB_ERROR_MAX];
	int rc = sandbox_start(cfg, &sandbox, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "snapshot_bench: cold boot for the base: %s\n", err);
	if (rc == 0)
		rc = sb_exec(sandbox, NULL);
	if (rc == 0)
		rc = sb_save(sandbox, dir, VM_SNAPSHOT_BASE, NULL, &fig->create_ms);
	sandbox_destroy(sandbox, rc < 0);
	fig->base_bytes = sb_dir_bytes(dir, true);
	fig->base_apparent = sb_dir_bytes(dir, false);
	return rc;
}

static int sb_diff(const char *base, const char *dir, struct sb_figures *fig)
{
	struct sandbox *sandbox = NULL;
	double ignored;
	int rc = sb_restore(base, true, &sandbox, &ignored);

	if (rc == 0)
		rc = sb_exec(sandbox, SB_DIFF_WORKLOAD);
	if (rc == 0)
		rc = sb_save(sandbox, dir, VM_SNAPSHOT_DIFF, base, &fig->diff_create_ms);
	sandbox_destroy(sandbox, rc < 0);
	sandbox = NULL;
	fig->diff_bytes = sb_dir_bytes(dir, true);
	if (rc == 0)
		rc = sb_restore(dir, false, &sandbox, &fig->diff_restore_ms);
	sandbox_destroy(sandbox, rc < 0);
	return rc;
}

/*
 * The host's CPU time so far from /proc/stat's "cpu" line, in ticks: all of it, and the part
 * spent idle or waiting for I/O. Tells a fork bound by CPU (every CPU busy throughout) from one
 * that waits on something. Both 0 where /proc/stat cannot be read.
 */
static void sb_cpu_ticks(unsigned long long *total, unsigned long long *idle)
{
	unsigned long long t[8] = { 0 };
	FILE *f = fopen("/proc/stat", "re");

	*total = *idle = 0;
	if (!f)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &t[0], &t[1], &t[2], &t[3],
		   &t[4], &t[5], &t[6], &t[7]) == 8) {
		for (int i = 0; i < 8; i++)
			*total += t[i];
		*idle = t[3] + t[4];
	}
	fclose(f);
}

/* One fork of a restored parent into n children: fork run `run` of the figures. */
static int sb_fork(const char *base, unsigned int n, unsigned int run, struct sb_figures *fig)
{
	struct sandbox *parent = NULL, **children = calloc(n, sizeof(*children));
	char err[SB_ERROR_MAX];
	double ignored, start;
	int rc = children ? sb_restore(base, false, &parent, &ignored) : -ENOMEM;

	if (rc == 0) {
		unsigned long long total0, idle0, total1, idle1;
		double cpu_start = sb_process_cpu_ms();

		sb_cpu_ticks(&total0, &idle0);
		start = boot_now_ms();
		rc = sandbox_fork(parent, n, children, err, sizeof(err));
		fig->fork_run_ms[run] = boot_now_ms() - start;
		fig->fork_run_cpu_ms[run] = sb_process_cpu_ms() - cpu_start;
		sb_cpu_ticks(&total1, &idle1);
		if (total1 > total0)
			fig->fork_run_busy_pct[run] = SB_PERCENT *
				(double)((total1 - total0) - (idle1 - idle0)) / (double)(total1 - total0);
		if (rc < 0)
			fprintf(stderr, "snapshot_bench: fork: %s\n", err);
		for (unsigned int i = 0; rc == 0 && i < n; i++) {
			double exec_start = boot_now_ms(), took;

			rc = sb_exec(children[i], NULL);
			took = boot_now_ms() - exec_start;
			if (took > fig->child_exec_ms)
				fig->child_exec_ms = took;
		}
		if (rc == 0) {
			double exec_start = boot_now_ms();

			rc = sb_exec(parent, NULL);
			fig->parent_exec_run_ms[run] = boot_now_ms() - exec_start;
		}
		for (unsigned int i = 0; children && i < n; i++)
			sandbox_destroy(children[i], rc < 0);
	}
	sandbox_destroy(parent, rc < 0);
	free(children);
	return rc;
}

/* Restore, leave the guest idle SB_IDLE_WAIT_S, save a diff: what an idle VM dirties. */
static int sb_idle_diff(const char *base, const char *dir, struct sb_figures *fig)
{
	struct sandbox *sandbox = NULL;
	double ignored;
	int rc = sb_restore(base, true, &sandbox, &ignored);

	if (rc == 0) {
		sleep(SB_IDLE_WAIT_S);
		rc = sb_save(sandbox, dir, VM_SNAPSHOT_DIFF, base, &ignored);
	}
	sandbox_destroy(sandbox, rc < 0);
	fig->idle_diff_bytes = sb_dir_bytes(dir, true);
	return rc;
}

/* ---- QEMU: migrate to a file, restore with -incoming ---------------------------------- */

static int sb_vsock_connect(unsigned int cid, int timeout_ms)
{
	struct sockaddr_vm addr = { .svm_family = AF_VSOCK, .svm_cid = cid,
				    .svm_port = PROTO_GUEST_AGENT_PORT };
	struct timeval tv = { .tv_sec = timeout_ms / SB_MS_PER_SEC,
			      .tv_usec = (timeout_ms % SB_MS_PER_SEC) * SB_US_PER_MS };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

static int sb_qemu_connector(void *opaque, int timeout_ms)
{
	const unsigned int *cid = opaque;

	return sb_vsock_connect(*cid, timeout_ms > 0 ? timeout_ms : SB_PROBE_CONNECT_MS);
}

static pid_t sb_qemu_spawn(const struct sb_options *o, const char *cmdline, const char *qmp,
			   const char *incoming, const char *log_path)
{
	char memory[16], device[64], qmp_arg[PATH_MAX + 32];
	const char *argv[SB_QEMU_ARGV_MAX] = {
		o->qemu_path, "-M", o->qemu_machine, "-enable-kvm", "-cpu", "host", "-m", memory,
		"-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "null", "-kernel", o->kernel, "-append", cmdline, "-device", device,
		"-qmp", qmp_arg,
	};
	size_t argc = 0;
	pid_t pid;

	while (argv[argc])
		argc++;

	snprintf(memory, sizeof(memory), "%u", o->memory_mb);
	snprintf(device, sizeof(device), "vhost-vsock-device,guest-cid=%u", o->cid);
	snprintf(qmp_arg, sizeof(qmp_arg), "unix:%s,server=on,wait=off", qmp);
	if (o->initramfs) {
		argv[argc++] = "-initrd";
		argv[argc++] = o->initramfs;
	}
	if (incoming) {
		argv[argc++] = "-incoming";
		argv[argc++] = incoming;
	}
	pid = fork();
	if (pid != 0)
		return pid;
	int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (log >= 0) {
		dup2(log, STDOUT_FILENO);
		dup2(log, STDERR_FILENO);
	}
	execvp(o->qemu_path, (char *const *)argv);
	_exit(SB_EXIT_FAILED);
}

static void sb_reap(pid_t pid)
{
	struct timespec wait = { .tv_nsec = SB_REAP_WAIT_NS };

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < SB_REAP_TRIES; i++) {
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return;
		nanosleep(&wait, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* Connects and runs `true` over a fresh control channel, polling until the deadline. */
static int sb_qemu_first_exec(unsigned int *cid, const uint8_t *secret, pid_t pid,
			      double deadline)
{
	struct timespec wait = { .tv_nsec = SB_PROBE_INTERVAL_NS };
	struct control_channel_config cfg = { .connect = sb_qemu_connector, .connect_opaque = cid };
	struct proto_exec_request req = { .program = "true", .has_timeout = true,
					  .timeout_secs = SB_EXEC_TIMEOUT_S };
	struct proto_exec_response resp = { 0 };
	struct control_channel *ch;
	int rc;

	while (boot_now_ms() < deadline) {
		int fd = sb_vsock_connect(*cid, SB_PROBE_CONNECT_MS);

		if (fd >= 0) {
			close(fd);
			break;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -ECHILD;
		nanosleep(&wait, NULL);
	}
	memcpy(cfg.secret, secret, sizeof(cfg.secret));
	ch = control_channel_create(&cfg);
	if (!ch)
		return -ENOMEM;
	/*
	 * The agent runs nothing before the session's policy. A guest restored from a QEMU
	 * snapshot may hold one already and refuse this one; the exec then tells.
	 */
	control_channel_set_policy(ch, sandbox_default_policy(), 0);
	rc = control_channel_exec(ch, &req, NULL, NULL, &resp);
	if (rc == 0 && resp.exit_code != 0)
		rc = -EIO;
	proto_exec_response_free(&resp);
	control_channel_destroy(ch);
	return rc;
}

/* One QMP command; reply (up to the first line with "return" or "error") in buf. */
static int sb_qmp(int fd, const char *command, char *buf, size_t len)
{
	size_t used = 0;

	if (command && write(fd, command, strlen(command)) != (ssize_t)strlen(command))
		return -EIO;
	while (used + 1 < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t got;

		if (poll(&pfd, 1, SB_QEMU_TIMEOUT_MS) <= 0)
			return -ETIMEDOUT;
		got = read(fd, buf + used, len - used - 1);
		if (got <= 0)
			return -EIO;
		used += (size_t)got;
		buf[used] = '\0';
		if (strstr(buf, "\"return\"") || strstr(buf, "\"error\"") ||
		    (!command && strstr(buf, "\"QMP\"")))
			return strstr(buf, "\"error\"") ? -EIO : 0;
	}
	return -ENOSPC;
}

static int sb_qmp_open(const char *path, double deadline)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct timespec wait = { .tv_nsec = SB_PROBE_INTERVAL_NS };
	char buf[SB_QMP_BUF];

	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	while (boot_now_ms() < deadline) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
			if (sb_qmp(fd, NULL, buf, sizeof(buf)) == 0 &&
			    sb_qmp(fd, "{\"execute\":\"qmp_capabilities\"}\n", buf, sizeof(buf)) == 0)
				return fd;
		}
		if (fd >= 0)
			close(fd);
		nanosleep(&wait, NULL);
	}
	return -ETIMEDOUT;
}

static int sb_qmp_migrate(int fd, const char *file)
{
	struct timespec wait = { .tv_nsec = SB_QMP_POLL_MS * SB_NS_PER_MS };
	char command[PATH_MAX + 96], buf[SB_QMP_BUF];
	int rc;

	snprintf(command, sizeof(command),
		 "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"exec:cat > %s\"}}\n", file);
	rc = sb_qmp(fd, command, buf, sizeof(buf));
	while (rc == 0) {
		rc = sb_qmp(fd, "{\"execute\":\"query-migrate\"}\n", buf, sizeof(buf));
		if (rc == 0 && strstr(buf, "\"completed\""))
			return 0;
		if (rc == 0 && strstr(buf, "\"failed\""))
			return -EIO;
		nanosleep(&wait, NULL);
	}
	return rc;
}

static int sb_qemu(const struct sb_options *o, const char *workdir, struct sb_figures *fig)
{
	uint8_t secret[CMDLINE_SECRET_LEN];
	char cmdline[CMDLINE_MAX], qmp[PATH_MAX], file[PATH_MAX], incoming[PATH_MAX + 16];
	char log_path[PATH_MAX];
	unsigned int cid = o->cid;
	struct stat st;
	double start;
	int rc, qmp_fd = -1;
	pid_t pid;

	if (getrandom(secret, sizeof(secret), 0) != (ssize_t)sizeof(secret))
		return -EIO;
	rc = cmdline_build(cmdline, sizeof(cmdline), secret, (uint64_t)time(NULL), NULL);
	if (rc < 0)
		return rc;
	snprintf(qmp, sizeof(qmp), "%s/qmp.sock", workdir);
	snprintf(file, sizeof(file), "%s/qemu-state.bin", workdir);
	snprintf(incoming, sizeof(incoming), "exec:cat %s", file);
	snprintf(log_path, sizeof(log_path), "%s/qemu.log", workdir);

	start = boot_now_ms();
	pid = sb_qemu_spawn(o, cmdline, qmp, NULL, log_path);
	rc = pid < 0 ? -errno : sb_qemu_first_exec(&cid, secret, pid, start + SB_QEMU_TIMEOUT_MS);
	fig->qemu_cold_ms = boot_now_ms() - start;
	if (rc == 0) {
		qmp_fd = sb_qmp_open(qmp, boot_now_ms() + SB_QEMU_TIMEOUT_MS);
		rc = qmp_fd < 0 ? qmp_fd : 0;
	}
	if (rc == 0) {
		start = boot_now_ms();
		rc = sb_qmp_migrate(qmp_fd, file);
		fig->qemu_save_ms = boot_now_ms() - start;
	}
	if (qmp_fd >= 0)
		close(qmp_fd);
	sb_reap(pid);
	if (rc < 0) {
		fprintf(stderr, "snapshot_bench: QEMU boot or migrate failed: %s (see %s)\n",
			strerror(-rc), log_path);
		return rc;
	}
	fig->qemu_file_bytes = stat(file, &st) == 0 ? (uint64_t)st.st_size : 0;
	unlink(qmp);
	start = boot_now_ms();
	pid = sb_qemu_spawn(o, cmdline, qmp, incoming, log_path);
	rc = pid < 0 ? -errno : sb_qemu_first_exec(&cid, secret, pid, start + SB_QEMU_TIMEOUT_MS);
	fig->qemu_restore_ms = boot_now_ms() - start;
	sb_reap(pid);
	if (rc < 0)
		fprintf(stderr, "snapshot_bench: QEMU -incoming restore failed: %s (see %s)\n",
			strerror(-rc), log_path);
	fig->have_qemu = rc == 0;
	explicit_bzero(secret, sizeof(secret));
	return rc;
}

/* ---- report ------------------------------------------------------------------------------ */

/* a / b, or 0 when b is not a measurement */
static double sb_ratio(double a, double b)
{
	return b > 0 ? a / b : 0.0;
}

static void sb_print(const struct sb_options *o, const struct sb_figures *f)
{
	double cold = boot_median(f->cold_ms, o->runs), restore = boot_median(f->restore_ms, o->runs);
	double prefetch = boot_median(f->prefetch_ms, o->runs);
	double prefetch_cpu = boot_median(f->prefetch_cpu_ms, o->runs);

	printf("snapshot_bench: %u MiB guest, %u runs, medians\n", o->memory_mb, o->runs);
	printf("  voidbox cold boot -> first exec     %9.1f ms\n", cold);
	printf("  voidbox restore -> first exec       %9.1f ms   (%.1fx faster)\n", restore,
	       sb_ratio(cold, restore));
	printf("  voidbox restore, prefetched -> exec %9.1f ms   (%.1fx faster; %llu pages in %u runs)\n",
	       prefetch, sb_ratio(cold, prefetch),
	       (unsigned long long)f->working_set_pages, f->working_set_runs);
	printf("  of them copied in for writing        %9llu pages\n",
	       (unsigned long long)f->working_set_written_pages);
	printf("  of them mapped into KVM ahead        %9llu pages (0: the kernel cannot)\n",
	       (unsigned long long)f->prefaulted_pages);
	printf("  base snapshot create                %9.1f ms   (%.1f MiB on disk, %.1f MiB apparent)\n",
	       f->create_ms, (double)f->base_bytes / SB_BYTES_PER_MIB,
	       (double)f->base_apparent / SB_BYTES_PER_MIB);
	printf("  diff snapshot create                %9.1f ms   (%.2f MiB, %.2f%% of the base)\n",
	       f->diff_create_ms, (double)f->diff_bytes / SB_BYTES_PER_MIB,
	       f->base_bytes ? 100.0 * (double)f->diff_bytes / (double)f->base_bytes : 0.0);
	printf("  diff restore -> first exec          %9.1f ms\n", f->diff_restore_ms);
	printf("  fork, per child (%u children)        %9.1f ms   (median of %u forks; slowest child's first exec %.1f ms)\n",
	       o->children, f->fork_ms / o->children, o->fork_runs, f->child_exec_ms);
	printf("  fork of %u against one restore        %9.2fx  (%.1f ms against %.1f ms)\n",
	       o->children, sb_ratio(f->fork_ms, prefetch), f->fork_ms, prefetch);
	printf("  host CPUs busy during the fork        %9.1f %%   (%ld online)\n",
	       f->fork_cpu_busy_pct, sysconf(_SC_NPROCESSORS_ONLN));
	printf("  CPU time: fork of %u / one restore     %9.1f ms / %.1f ms (%.2f restores a child)\n",
	       o->children, f->fork_cpu_ms, prefetch_cpu,
	       sb_ratio(f->fork_cpu_ms / o->children, prefetch_cpu));
	printf("  the parent's first exec after it      %9.1f ms\n", f->parent_exec_ms);
	printf("  idle diff after %d s                  %9.2f MiB (%.2f%% of guest RAM)\n",
	       SB_IDLE_WAIT_S, (double)f->idle_diff_bytes / SB_BYTES_PER_MIB,
	       SB_PERCENT * (double)f->idle_diff_bytes / ((double)o->memory_mb * SB_BYTES_PER_MIB));
	if (f->have_qemu)
		printf("  QEMU cold boot -> first exec        %9.1f ms\n"
		       "  QEMU migrate to file               %9.1f ms   (%.1f MiB)\n"
		       "  QEMU -incoming restore -> exec     %9.1f ms   (process start included)\n",
		       f->qemu_cold_ms, f->qemu_save_ms,
		       (double)f->qemu_file_bytes / SB_BYTES_PER_MIB, f->qemu_restore_ms);
	else
		printf("  QEMU comparison                     not run\n");
}

static int sb_write_json(const struct sb_options *o, const struct sb_figures *f)
{
	json_t *cold = json_array(), *restore = json_array(), *prefetch = json_array(), *root;
	json_t *forks = json_array(), *busy = json_array(), *fork_cpu = json_array();
	json_t *prefetch_cpu = json_array();
	double cold_median = boot_median(f->cold_ms, o->runs);
	double prefetch_median = boot_median(f->prefetch_ms, o->runs);
	int rc;

	for (unsigned int i = 0; i < o->runs; i++) {
		json_array_append_new(cold, json_real(f->cold_ms[i]));
		json_array_append_new(restore, json_real(f->restore_ms[i]));
		json_array_append_new(prefetch, json_real(f->prefetch_ms[i]));
		json_array_append_new(prefetch_cpu, json_real(f->prefetch_cpu_ms[i]));
	}
	for (unsigned int i = 0; i < o->fork_runs; i++) {
		json_array_append_new(forks, json_real(f->fork_run_ms[i]));
		json_array_append_new(busy, json_real(f->fork_run_busy_pct[i]));
		json_array_append_new(fork_cpu, json_real(f->fork_run_cpu_ms[i]));
	}
	root = json_pack("{s:I, s:I, s:I, s:o, s:o, s:f, s:I, s:I, s:f, s:I, s:f, s:f, s:f}",
			 "memory_mb", (json_int_t)o->memory_mb, "runs", (json_int_t)o->runs,
			 "children", (json_int_t)o->children, "cold_first_exec_ms", cold,
			 "restore_first_exec_ms", restore, "create_ms", f->create_ms,
			 "base_bytes", (json_int_t)f->base_bytes, "diff_bytes",
			 (json_int_t)f->diff_bytes, "diff_create_ms", f->diff_create_ms,
			 "base_apparent_bytes", (json_int_t)f->base_apparent, "diff_restore_ms",
			 f->diff_restore_ms, "fork_ms", f->fork_ms, "child_first_exec_ms",
			 f->child_exec_ms);
	if (root) {
		json_object_set_new(root, "prefetch_first_exec_ms", prefetch);
		json_object_set_new(root, "working_set_pages",
				    json_integer((json_int_t)f->working_set_pages));
		json_object_set_new(root, "working_set_prefaulted_pages",
				    json_integer((json_int_t)f->prefaulted_pages));
		json_object_set_new(root, "working_set_written_pages",
				    json_integer((json_int_t)f->working_set_written_pages));
		json_object_set_new(root, "working_set_runs",
				    json_integer((json_int_t)f->working_set_runs));
		json_object_set_new(root, "idle_diff_bytes",
				    json_integer((json_int_t)f->idle_diff_bytes));
		json_object_set_new(root, "idle_wait_s", json_integer(SB_IDLE_WAIT_S));
		json_object_set_new(root, "fork_runs_ms", forks);
		json_object_set_new(root, "fork_runs_host_cpu_busy_pct", busy);
		json_object_set_new(root, "fork_host_cpu_busy_pct", json_real(f->fork_cpu_busy_pct));
		json_object_set_new(root, "fork_runs_cpu_ms", fork_cpu);
		json_object_set_new(root, "fork_cpu_ms", json_real(f->fork_cpu_ms));
		json_object_set_new(root, "prefetch_cpu_ms", prefetch_cpu);
		json_object_set_new(root, "host_cpus_online",
				    json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
		json_object_set_new(root, "parent_first_exec_after_fork_ms",
				    json_real(f->parent_exec_ms));
		/* the ratios the goals are stated in, from this run's medians */
		json_object_set_new(root, "ratio_cold_over_restore",
				    json_real(sb_ratio(cold_median, boot_median(f->restore_ms, o->runs))));
		json_object_set_new(root, "ratio_cold_over_prefetch",
				    json_real(sb_ratio(cold_median, prefetch_median)));
		json_object_set_new(root, "ratio_fork_over_prefetch",
				    json_real(sb_ratio(f->fork_ms, prefetch_median)));
	} else {
		json_decref(prefetch);
		json_decref(forks);
		json_decref(busy);
		json_decref(fork_cpu);
		json_decref(prefetch_cpu);
	}
	if (root && f->have_qemu)
		json_object_set_new(root, "qemu",
				    json_pack("{s:f, s:f, s:f, s:I}", "cold_first_exec_ms",
					      f->qemu_cold_ms, "migrate_ms", f->qemu_save_ms,
					      "incoming_first_exec_ms", f->qemu_restore_ms,
					      "state_bytes", (json_int_t)f->qemu_file_bytes));
	rc = root ? json_dump_file(root, o->json_path, JSON_INDENT(2)) : -1;
	json_decref(root);
	return rc == 0 ? 0 : -EIO;
}

/* The base's working-set list: removed so the next restore faults lazily and records it. */
static void sb_forget_working_set(const char *base)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", base, VM_WORKING_SET_FILE);
	if (unlink(path) < 0 && errno != ENOENT)
		fprintf(stderr, "snapshot_bench: cannot remove %s: %s\n", path, strerror(errno));
}

static void sb_read_working_set(const char *base, unsigned int memory_mb, struct sb_figures *fig)
{
	struct vm_snapshot_info info;
	struct guest_memory layout;
	struct working_set ws;
	char err[SB_ERROR_MAX];

	if (vm_snapshot_inspect(base, &info, err, sizeof(err)) < 0 ||
	    guest_memory_plan(&layout, memory_mb, 0, err, sizeof(err)) < 0 ||
	    working_set_load(base, info.id, &layout, &ws, err, sizeof(err)) < 0) {
		fprintf(stderr, "snapshot_bench: no working-set list in %s\n", base);
		return;
	}
	fig->working_set_pages = ws.pages;
	fig->working_set_written_pages = ws.written_pages;
	fig->working_set_runs = ws.run_count;
	working_set_release(&ws);
}

static int sb_voidbox(const struct sb_options *o, const char *workdir, struct sb_figures *fig)
{
	struct sandbox_config cfg = { .kernel_path = o->kernel, .initramfs_path = o->initramfs,
				      .memory_mb = o->memory_mb, .vcpus = 1 };
	char base[PATH_MAX], diff[PATH_MAX], idle[PATH_MAX];
	int rc;

	snprintf(base, sizeof(base), "%s/base", workdir);
	snprintf(diff, sizeof(diff), "%s/diff", workdir);
	snprintf(idle, sizeof(idle), "%s/idle", workdir);
	rc = sb_create_base(&cfg, base, fig);
	for (unsigned int i = 0; rc == 0 && i < o->runs; i++) {
		struct sandbox *sandbox = NULL;

		rc = sb_cold(&cfg, &fig->cold_ms[i]);
		sb_forget_working_set(base);
		if (rc == 0)
			rc = sb_restore(base, false, &sandbox, &fig->restore_ms[i]);
		sandbox_destroy(sandbox, rc < 0);
		sandbox = NULL;
		if (rc == 0)
			rc = sb_restore_cpu(base, false, &sandbox, &fig->prefetch_ms[i],
					    &fig->prefetch_cpu_ms[i]);
		if (rc == 0)
			fig->prefaulted_pages = sandbox_working_set_prefaulted_pages(sandbox);
		sandbox_destroy(sandbox, rc < 0);
		if (rc == 0)
			fprintf(stderr, "run %u: cold %.1f ms, restore %.1f ms, with prefetch %.1f ms\n",
				i + 1, fig->cold_ms[i], fig->restore_ms[i], fig->prefetch_ms[i]);
	}
	if (rc == 0)
		sb_read_working_set(base, o->memory_mb, fig);
	if (rc == 0)
		rc = sb_diff(base, diff, fig);
	for (unsigned int i = 0; rc == 0 && i < o->fork_runs; i++) {
		rc = sb_fork(base, o->children, i, fig);
		if (rc == 0)
			fprintf(stderr, "fork %u: %u children in %.1f ms, %.1f ms of CPU, host CPUs "
				"%.0f %% busy\n", i + 1, o->children, fig->fork_run_ms[i],
				fig->fork_run_cpu_ms[i], fig->fork_run_busy_pct[i]);
	}
	fig->fork_ms = boot_median(fig->fork_run_ms, o->fork_runs);
	fig->fork_cpu_busy_pct = boot_median(fig->fork_run_busy_pct, o->fork_runs);
	fig->fork_cpu_ms = boot_median(fig->fork_run_cpu_ms, o->fork_runs);
	fig->parent_exec_ms = boot_median(fig->parent_exec_run_ms, o->fork_runs);
	if (rc == 0)
		rc = sb_idle_diff(base, idle, fig);
	return rc;
}

int main(int argc, char **argv)
{
	struct sb_options o = { .runs = SB_DEFAULT_RUNS, .memory_mb = SB_DEFAULT_MEMORY_MB,
				.children = SB_DEFAULT_CHILDREN, .fork_runs = SB_DEFAULT_FORK_RUNS,
				.cid = SB_DEFAULT_CID,
				.qemu_path = "qemu-system-x86_64", .qemu_machine = "microvm,acpi=on" };
	static struct sb_figures fig;
	struct guest_image_paths image;
	char err[SB_ERROR_MAX], workdir[PATH_MAX], cmd[PATH_MAX + 16];
	const char *tmpdir = getenv("TMPDIR");
	int rc = sb_parse(argc, argv, &o);

	if (rc != 0)
		return rc < 0 ? 0 : rc;
	log_set_level(LOG_LEVEL_WARN);
	if (o.log_level)
		log_set_level_name(o.log_level); /* debug: the fork's per-child timeline */
	host_env_apply();
	if (guest_image_resolve(o.kernel, o.initramfs, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "snapshot_bench: %s\n", err);
		return SB_EXIT_FAILED;
	}
	o.kernel = image.kernel;
	o.initramfs = image.initramfs[0] ? image.initramfs : NULL;
	snprintf(workdir, sizeof(workdir), "%s/snapbenchXXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(workdir)) {
		fprintf(stderr, "snapshot_bench: cannot create a work directory: %s\n", strerror(errno));
		return SB_EXIT_FAILED;
	}
	rc = sb_voidbox(&o, workdir, &fig);
	if (rc == 0 && o.qemu_path && access("/dev/vhost-vsock", R_OK | W_OK) == 0)
		sb_qemu(&o, workdir, &fig);
	else if (rc == 0 && o.qemu_path)
		fprintf(stderr, "snapshot_bench: no usable /dev/vhost-vsock; QEMU comparison skipped\n");
	if (rc == 0)
		sb_print(&o, &fig);
	if (rc == 0 && o.json_path && sb_write_json(&o, &fig) < 0)
		fprintf(stderr, "snapshot_bench: cannot write %s\n", o.json_path);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", workdir);
	if (system(cmd) != 0)
		fprintf(stderr, "snapshot_bench: could not remove %s\n", workdir);
	return rc == 0 ? 0 : SB_EXIT_FAILED;
}
