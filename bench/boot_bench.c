/*
 * Cold-boot benchmark: voidbox against QEMU `-M microvm` booting the same kernel and
 * initramfs (the voidbox guest image, agent included) on the same /dev/kvm.
 *
 * Both sides are measured from fork() of a fresh VMM process, so each pays its own process
 * start-up, and both run one vCPU with the same guest RAM and the same kernel command line
 * (built by the VMM's own cmdline_build). Runs alternate between the two so drift in the
 * machine (other jobs, caches) hits both alike.
 *
 * voidbox is driven through its CLI, the way users run it: `voidbox --log-level info exec
 * -- true`. "first answer" is when its "guest agent answered" line reaches our pipe (the
 * handshake's Pong); "true done" is when the process exits, so it also pays for the
 * teardown and is an upper bound on "true answered". QEMU is started with a vhost-vsock
 * device; this program polls AF_VSOCK (cid, 1234) every few milliseconds, then runs the real
 * control channel (Ping/Pong with the secret, then Exec `true`) over it: "first answer" is
 * the Pong, "true done" the Exec response, after which QEMU is killed and not charged for it.
 *
 * Memory is the VMM's resident set minus the guest RAM mapping (boot_measure.h), sampled
 * while the guest is up and idle: for voidbox during a separate `exec -- sleep 3` run, for
 * QEMU after the Exec answer.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include "cli/host_env.h"
#include "boot_measure.h"
#include "vsock_cid.h"
#include "host/control_channel.h"
#include "proto/protocol.h"
#include "sandbox/sandbox.h"
#include "vmm/cmdline.h"

#define BENCH_DEFAULT_RUNS 10u
#define BENCH_DEFAULT_MEMORY_RUNS 3u
#define BENCH_DEFAULT_MEMORY_MB 256u
#define BENCH_DEFAULT_CID 42u
#define BENCH_DEFAULT_BOOT_TIMEOUT_S 180u
#define BENCH_MAX_RUNS 1000u
#define BENCH_MAX_MEMORY_MB 2048u /* one RAM mapping in both VMMs below the PCI hole */
#define BENCH_MIN_CID 3u
#define BENCH_MAX_CID 0xfffffffeu
#define BENCH_MAX_TIMEOUT_S 3600u
#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_FAILED 1
#define BENCH_PARSE_HELP_SHOWN (-1)

#define BYTES_PER_MB (1024ull * 1024ull)
#define MS_PER_SEC 1000
#define KB_PER_MB 1024.0

#define VOIDBOX_ANSWER_MARK "guest agent answered after "
#define VOIDBOX_SLEEP_ARG "3"           /* seconds the memory run keeps the guest up */
#define MEMORY_SETTLE_MS 1500.0         /* from the answer to the smaps sample */
/* What the timeline boots run in the guest: uptime at the first exec, then the kernel log. */
#define TIMELINE_SCRIPT "cat /proc/uptime; dmesg"
/*
 * The sandbox user may read the kernel log only when dmesg_restrict is off, and the agent's
 * own lines reach it only without /dev/kmsg's rate limit.
 */
#define TIMELINE_CMDLINE "sysctl.kernel.dmesg_restrict=0 printk.devkmsg=on"
#define TIMELINE_VOIDBOX_FILE "voidbox-dmesg.txt"
#define TIMELINE_QEMU_FILE "qemu-dmesg.txt"
#define STDERR_TAIL_MAX 4096
#define LINE_MAX_LEN 1024

#define PROBE_CONNECT_TIMEOUT_MS 200
#define PROBE_INTERVAL_NS 10000000L     /* 10 ms between AF_VSOCK attempts */
#define CHANNEL_CONNECT_TIMEOUT_MS 2000
#define EXEC_TIMEOUT_S 120u             /* bounds every Exec so a stuck guest ends the run */
#define QEMU_REAP_TIMEOUT_MS 10000
#define REAP_POLL_NS 20000000L

#define PERCENTILE_MEDIAN 50u
#define PERCENTILE_TAIL 95u

enum bench_side {
	BENCH_VOIDBOX,
	BENCH_QEMU,
	BENCH_SIDES,
};

static const char *const bench_side_names[BENCH_SIDES] = { "voidbox", "qemu-microvm" };

struct bench_options {
	const char *voidbox_path;
	const char *qemu_path;
	const char *kernel_path;
	const char *initramfs_path;
	const char *json_path;
	const char *qemu_machine;
	const char *guest_log_dir;
	const char *qemu_append;
	unsigned int runs;
	unsigned int memory_runs;
	unsigned int memory_mb;
	unsigned int cid;
	unsigned int boot_timeout_s;
	bool verbose;
};

/* One side's figures over all runs; a value per successful run. */
struct bench_series {
	double *first_answer_ms;
	double *done_ms;
	size_t time_count;
	double *vmm_rss_mb;
	double *guest_rss_mb;
	double *total_rss_mb;
	size_t memory_count;
};

struct bench_run {
	double first_answer_ms;
	double done_ms;
	bool has_memory;
	struct boot_memory_sample memory;
};

static void bench_usage(FILE *out)
{
	fprintf(out,
		"usage: boot_bench --voidbox PATH --kernel PATH --initramfs PATH [options]\n\n"
		"Cold boot to the guest agent's first answer and to `true` done, voidbox against\n"
		"QEMU -M microvm with vhost-vsock, alternating; then p50/p95 and the ratios.\n"
		"Needs a /dev/kvm that runs stock kernels and /dev/vhost-vsock (see scripts/bench-boot).\n\n"
		"  --voidbox PATH     the voidbox CLI binary\n"
		"  --qemu PATH        QEMU binary (default qemu-system-x86_64 from PATH)\n"
		"  --kernel PATH      guest kernel (bzImage) for both VMMs\n"
		"  --initramfs PATH   guest initramfs for both VMMs (a voidbox image's)\n"
		"  --runs N           timed boots of each VMM (default %u; 0 with --guest-log)\n"
		"  --memory-runs N    voidbox `sleep 3` runs sampled for memory (default %u)\n"
		"  --memory MB        guest RAM for both (default %u, at most %u)\n"
		"  --cid N            guest CID for QEMU's vhost-vsock device (default %u)\n"
		"  --boot-timeout S   give up on a boot after S seconds (default %u)\n"
		"  --qemu-machine M   QEMU -M value (default microvm,acpi=on)\n"
		"  --qemu-append ARGS extra kernel arguments for the QEMU guest only (to try the\n"
		"                     peer's best case; the default is the identical command line)\n"
		"  --json PATH        also write every figure as JSON\n"
		"  --guest-log DIR    after the timed runs, boot each VMM once more and save the\n"
		"                     guest's uptime and dmesg (its boot timeline) in DIR\n"
		"  --verbose          print each VMM's stderr lines\n",
		BENCH_DEFAULT_RUNS, BENCH_DEFAULT_MEMORY_RUNS, BENCH_DEFAULT_MEMORY_MB,
		BENCH_MAX_MEMORY_MB, BENCH_DEFAULT_CID, BENCH_DEFAULT_BOOT_TIMEOUT_S);
}

static bool parse_unsigned(const char *flag, const char *text, unsigned long min,
			   unsigned long max, unsigned int *out)
{
	char *end;
	unsigned long value;

	errno = 0;
	value = strtoul(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || value < min || value > max) {
		fprintf(stderr, "boot_bench: %s takes a whole number from %lu to %lu, not '%s'\n",
			flag, min, max, text);
		return false;
	}
	*out = (unsigned int)value;
	return true;
}

enum bench_option {
	OPT_VOIDBOX = 1000,
	OPT_QEMU,
	OPT_KERNEL,
	OPT_INITRAMFS,
	OPT_RUNS,
	OPT_MEMORY_RUNS,
	OPT_MEMORY,
	OPT_CID,
	OPT_BOOT_TIMEOUT,
	OPT_QEMU_MACHINE,
	OPT_QEMU_APPEND,
	OPT_JSON,
	OPT_GUEST_LOG,
	OPT_VERBOSE,
	OPT_HELP,
};

static const struct option bench_long_options[] = {
	{ "voidbox", required_argument, NULL, OPT_VOIDBOX },
	{ "qemu", required_argument, NULL, OPT_QEMU },
	{ "kernel", required_argument, NULL, OPT_KERNEL },
	{ "initramfs", required_argument, NULL, OPT_INITRAMFS },
	{ "runs", required_argument, NULL, OPT_RUNS },
	{ "memory-runs", required_argument, NULL, OPT_MEMORY_RUNS },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "cid", required_argument, NULL, OPT_CID },
	{ "boot-timeout", required_argument, NULL, OPT_BOOT_TIMEOUT },
	{ "qemu-machine", required_argument, NULL, OPT_QEMU_MACHINE },
	{ "qemu-append", required_argument, NULL, OPT_QEMU_APPEND },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "guest-log", required_argument, NULL, OPT_GUEST_LOG },
	{ "verbose", no_argument, NULL, OPT_VERBOSE },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

/* Returns 0 to run, BENCH_PARSE_HELP_SHOWN, or the (positive) exit status to end with. */
static int bench_parse_options(int argc, char **argv, struct bench_options *opts)
{
	int option;
	bool ok = true;

	*opts = (struct bench_options){
		.qemu_path = "qemu-system-x86_64", .qemu_machine = "microvm,acpi=on",
		.runs = BENCH_DEFAULT_RUNS, .memory_runs = BENCH_DEFAULT_MEMORY_RUNS,
		.memory_mb = BENCH_DEFAULT_MEMORY_MB, .cid = BENCH_DEFAULT_CID,
		.boot_timeout_s = BENCH_DEFAULT_BOOT_TIMEOUT_S,
	};
	while (ok && (option = getopt_long(argc, argv, "", bench_long_options, NULL)) != -1) {
		switch (option) {
		case OPT_VOIDBOX: opts->voidbox_path = optarg; break;
		case OPT_QEMU: opts->qemu_path = optarg; break;
		case OPT_KERNEL: opts->kernel_path = optarg; break;
		case OPT_INITRAMFS: opts->initramfs_path = optarg; break;
		case OPT_JSON: opts->json_path = optarg; break;
		case OPT_GUEST_LOG: opts->guest_log_dir = optarg; break;
		case OPT_QEMU_MACHINE: opts->qemu_machine = optarg; break;
		case OPT_QEMU_APPEND: opts->qemu_append = optarg; break;
		case OPT_VERBOSE: opts->verbose = true; break;
		case OPT_RUNS:
			ok = parse_unsigned("--runs", optarg, 0, BENCH_MAX_RUNS, &opts->runs);
			break;
		case OPT_MEMORY_RUNS:
			ok = parse_unsigned("--memory-runs", optarg, 0, BENCH_MAX_RUNS,
					    &opts->memory_runs);
			break;
		case OPT_MEMORY:
			ok = parse_unsigned("--memory", optarg, 1, BENCH_MAX_MEMORY_MB,
					    &opts->memory_mb);
			break;
		case OPT_CID:
			ok = parse_unsigned("--cid", optarg, BENCH_MIN_CID, BENCH_MAX_CID,
					    &opts->cid);
			break;
		case OPT_BOOT_TIMEOUT:
			ok = parse_unsigned("--boot-timeout", optarg, 1, BENCH_MAX_TIMEOUT_S,
					    &opts->boot_timeout_s);
			break;
		case OPT_HELP:
			bench_usage(stdout);
			return BENCH_PARSE_HELP_SHOWN;
		default:
			ok = false;
		}
	}
	if (ok && (!opts->voidbox_path || !opts->kernel_path || !opts->initramfs_path)) {
		fprintf(stderr, "boot_bench: --voidbox, --kernel and --initramfs are required\n");
		ok = false;
	}
	if (ok && opts->runs == 0 && !opts->guest_log_dir) {
		fprintf(stderr, "boot_bench: --runs 0 only makes sense with --guest-log\n");
		ok = false;
	}
	if (ok && optind < argc) {
		fprintf(stderr, "boot_bench: unexpected argument '%s'\n", argv[optind]);
		ok = false;
	}
	if (!ok) {
		bench_usage(stderr);
		return BENCH_EXIT_USAGE;
	}
	if (opts->memory_runs > opts->runs)
		opts->memory_runs = opts->runs;
	return 0;
}

static void sleep_ns(long ns)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ns };

	nanosleep(&ts, NULL);
}

/* Keeps the last STDERR_TAIL_MAX bytes a child wrote, for failure messages. */
struct stderr_tail {
	char text[STDERR_TAIL_MAX];
	size_t len;
};

static void stderr_tail_append(struct stderr_tail *tail, const char *line)
{
	size_t add = strlen(line);

	if (add >= sizeof(tail->text))
		return;
	if (tail->len + add >= sizeof(tail->text)) {
		size_t drop = tail->len + add + 1 - sizeof(tail->text);

		memmove(tail->text, tail->text + drop, tail->len - drop);
		tail->len -= drop;
	}
	memcpy(tail->text + tail->len, line, add);
	tail->len += add;
	tail->text[tail->len] = '\0';
}

/* Kills and reaps a child that is still running; used on every failure path. */
static void child_kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* ---- voidbox: the CLI as a child process ---------------------------------------------- */

struct voidbox_watch {
	const struct bench_options *opts;
	pid_t pid;
	double start_ms;
	double sample_at_ms;      /* 0: no memory sample wanted (or already taken) */
	struct bench_run *run;
	bool answered;
	struct stderr_tail tail;
	char line[LINE_MAX_LEN];
	size_t line_len;
};

static void voidbox_take_line(struct voidbox_watch *watch)
{
	watch->line[watch->line_len] = '\0';
	if (watch->opts->verbose)
		fprintf(stderr, "    voidbox: %s", watch->line);
	stderr_tail_append(&watch->tail, watch->line);
	if (!watch->answered && strstr(watch->line, VOIDBOX_ANSWER_MARK)) {
		watch->answered = true;
		watch->run->first_answer_ms = boot_now_ms() - watch->start_ms;
		if (watch->sample_at_ms > 0)
			watch->sample_at_ms = boot_now_ms() + MEMORY_SETTLE_MS;
	}
	watch->line_len = 0;
}

static void voidbox_take_bytes(struct voidbox_watch *watch, const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		watch->line[watch->line_len++] = buf[i];
		if (buf[i] == '\n' || watch->line_len == sizeof(watch->line) - 1)
			voidbox_take_line(watch);
	}
}

/* What a voidbox run executes in the guest. */
enum voidbox_job {
	VOIDBOX_JOB_TRUE,      /* the timed run */
	VOIDBOX_JOB_SLEEP,     /* keeps the guest up for the memory sample */
};

static int voidbox_spawn(const struct bench_options *opts, enum voidbox_job job, int stderr_fd)
{
	char memory[16];
	const char *argv[] = {
		opts->voidbox_path, "--log-level", "info", "exec", "--memory", memory,
		"--kernel", opts->kernel_path, "--initramfs", opts->initramfs_path, "--",
		NULL, NULL, NULL, NULL,
	};
	const size_t program_at = 11;
	pid_t pid;

	switch (job) {
	case VOIDBOX_JOB_TRUE:
		argv[program_at] = "true";
		break;
	case VOIDBOX_JOB_SLEEP:
		argv[program_at] = "sleep";
		argv[program_at + 1] = VOIDBOX_SLEEP_ARG;
		break;
	}

	snprintf(memory, sizeof(memory), "%u", opts->memory_mb);
	pid = fork();
	if (pid != 0)
		return pid < 0 ? -errno : pid;
	int devnull = open("/dev/null", O_RDWR);

	if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0 || dup2(devnull, STDOUT_FILENO) < 0 ||
	    dup2(stderr_fd, STDERR_FILENO) < 0)
		_exit(BENCH_EXIT_FAILED);
	execv(opts->voidbox_path, (char *const *)argv);
	fprintf(stderr, "boot_bench: cannot run %s: %s\n", opts->voidbox_path, strerror(errno));
	_exit(BENCH_EXIT_FAILED);
}

/* Reads the child's stderr until EOF or the deadline; takes the memory sample when due. */
static int voidbox_watch_stderr(struct voidbox_watch *watch, int fd, double deadline_ms)
{
	char buf[LINE_MAX_LEN];

	for (;;) {
		double now = boot_now_ms(), wake = deadline_ms;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int rc;

		if (watch->answered && watch->sample_at_ms > 0 && now >= watch->sample_at_ms) {
			rc = boot_memory_sample_pid(watch->pid, watch->opts->memory_mb * BYTES_PER_MB,
						    &watch->run->memory);
			if (rc < 0)
				fprintf(stderr, "boot_bench: voidbox smaps sample failed: %s\n",
					strerror(-rc));
			watch->run->has_memory = rc == 0;
			watch->sample_at_ms = 0;
		}
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		if (watch->answered && watch->sample_at_ms > 0 && watch->sample_at_ms < wake)
			wake = watch->sample_at_ms;
		rc = poll(&pfd, 1, (int)(wake - now) + 1);
		if (rc < 0 && errno != EINTR)
			return -errno;
		if (rc <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : 0;
		voidbox_take_bytes(watch, buf, (size_t)n);
	}
}

static int voidbox_run(const struct bench_options *opts, enum voidbox_job job,
		       struct bench_run *run)
{
	bool memory_run = job == VOIDBOX_JOB_SLEEP;
	struct voidbox_watch *watch = calloc(1, sizeof(*watch));
	int pipefd[2] = { -1, -1 }, status = 0, rc;
	double deadline;

	if (!watch)
		return -ENOMEM;
	memset(run, 0, sizeof(*run));
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out;
	}
	watch->opts = opts;
	watch->run = run;
	watch->sample_at_ms = memory_run ? 1 : 0;
	watch->start_ms = boot_now_ms();
	deadline = watch->start_ms + (double)opts->boot_timeout_s * MS_PER_SEC;
	rc = voidbox_spawn(opts, job, pipefd[1]);
	close(pipefd[1]);
	if (rc < 0)
		goto out;
	watch->pid = rc;
	rc = voidbox_watch_stderr(watch, pipefd[0], deadline);
	if (rc < 0) {
		child_kill_and_reap(watch->pid);
		fprintf(stderr, "boot_bench: voidbox run failed (%s); its last output:\n%s\n",
			strerror(-rc), watch->tail.text);
		goto out;
	}
	while (waitpid(watch->pid, &status, 0) < 0 && errno == EINTR)
		;
	run->done_ms = boot_now_ms() - watch->start_ms;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !watch->answered) {
		fprintf(stderr, "boot_bench: voidbox exec did not succeed (status %d%s); its output:\n%s\n",
			status, watch->answered ? "" : ", no answer line", watch->tail.text);
		rc = -EIO;
		goto out;
	}
	if (memory_run && !run->has_memory)
		rc = -ENOENT;
out:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	free(watch);
	return rc;
}

/* ---- QEMU microvm with vhost-vsock ----------------------------------------------------- */

struct qemu_peer {
	unsigned int cid;
};

static int qemu_vsock_connector(void *opaque, int timeout_ms)
{
	const struct qemu_peer *peer = opaque;

	return bench_vsock_connect_cid(peer->cid, PROTO_GUEST_AGENT_PORT,
				 timeout_ms > 0 ? timeout_ms : CHANNEL_CONNECT_TIMEOUT_MS);
}

static int qemu_spawn(const struct bench_options *opts, const char *cmdline,
		      const char *serial_path, const char *log_path)
{
	char memory[16], serial[PATH_MAX + 8], device[64];
	const char *argv[] = {
		opts->qemu_path, "-M", opts->qemu_machine, "-enable-kvm", "-cpu", "host",
		"-m", memory, "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
		"-no-reboot", "-serial", serial, "-kernel", opts->kernel_path,
		"-initrd", opts->initramfs_path, "-append", cmdline, "-device", device, NULL,
	};
	pid_t pid;

	snprintf(memory, sizeof(memory), "%u", opts->memory_mb);
	snprintf(serial, sizeof(serial), "file:%s", serial_path);
	snprintf(device, sizeof(device), "vhost-vsock-device,guest-cid=%u", opts->cid);
	pid = fork();
	if (pid != 0)
		return pid < 0 ? -errno : pid;
	int devnull = open("/dev/null", O_RDWR);
	int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (devnull < 0 || log < 0 || dup2(devnull, STDIN_FILENO) < 0 ||
	    dup2(log, STDOUT_FILENO) < 0 || dup2(log, STDERR_FILENO) < 0)
		_exit(BENCH_EXIT_FAILED);
	execvp(opts->qemu_path, (char *const *)argv);
	fprintf(stderr, "cannot run %s: %s\n", opts->qemu_path, strerror(errno));
	_exit(BENCH_EXIT_FAILED);
}

/* Polls the agent port until it accepts; -ECHILD when QEMU ends first. */
static int qemu_wait_for_agent(pid_t pid, unsigned int cid, double deadline_ms)
{
	int status;

	while (boot_now_ms() < deadline_ms) {
		int fd = bench_vsock_connect_cid(cid, PROTO_GUEST_AGENT_PORT, PROBE_CONNECT_TIMEOUT_MS);

		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "boot_bench: QEMU ended before the agent answered (%s %d)\n",
				WIFEXITED(status) ? "exit status" : "signal",
				WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			return -ECHILD;
		}
		sleep_ns(PROBE_INTERVAL_NS);
	}
	return -ETIMEDOUT;
}

/* Runs TIMELINE_SCRIPT in the guest and writes its stdout to path. */
static int channel_save_timeline(struct control_channel *ch, const char *path)
{
	char *args[] = { "-c", TIMELINE_SCRIPT };
	struct proto_exec_request req = {
		.program = "sh", .args = args, .args_count = 2,
		.has_timeout = true, .timeout_secs = EXEC_TIMEOUT_S,
	};
	struct proto_exec_response resp;
	FILE *out;
	int rc;

	memset(&resp, 0, sizeof(resp));
	rc = control_channel_exec(ch, &req, NULL, NULL, &resp);
	if (rc < 0)
		return rc;
	out = fopen(path, "we");
	if (!out) {
		rc = -errno;
	} else {
		if (fwrite(resp.stdout_data.data, 1, resp.stdout_data.len, out) !=
		    resp.stdout_data.len)
			rc = -EIO;
		if (fclose(out) != 0 && rc == 0)
			rc = -EIO;
	}
	proto_exec_response_free(&resp);
	return rc;
}

/*
 * Handshake and Exec `true` over the control channel; fills the two times. With a
 * timeline_path, the guest's timeline is saved afterwards (not timed).
 */
static int qemu_talk_to_agent(struct qemu_peer *peer, const uint8_t *secret, double start_ms,
			      const char *timeline_path, struct bench_run *run)
{
	struct control_channel_config cfg = {
		.connect = qemu_vsock_connector, .connect_opaque = peer,
	};
	struct proto_exec_request req = {
		.program = "true", .has_timeout = true, .timeout_secs = EXEC_TIMEOUT_S,
	};
	struct proto_exec_response resp;
	struct control_channel *ch;
	int rc;

	memcpy(cfg.secret, secret, sizeof(cfg.secret));
	ch = control_channel_create(&cfg);
	if (!ch)
		return -ENOMEM;
	rc = control_channel_connect(ch);
	if (rc < 0) {
		fprintf(stderr, "boot_bench: QEMU guest agent handshake failed: %s\n",
			control_channel_last_error());
		goto out;
	}
	run->first_answer_ms = boot_now_ms() - start_ms;
	/* the agent runs nothing before the session's policy; sandbox_start sends the same */
	rc = control_channel_set_policy(ch, sandbox_default_policy(), 0);
	if (rc < 0) {
		fprintf(stderr, "boot_bench: the QEMU guest agent refused the policy: %s\n",
			control_channel_last_error());
		goto out;
	}
	memset(&resp, 0, sizeof(resp));
	rc = control_channel_exec(ch, &req, NULL, NULL, &resp);
	if (rc < 0) {
		fprintf(stderr, "boot_bench: Exec `true` in the QEMU guest failed: %s\n",
			control_channel_last_error());
		goto out;
	}
	run->done_ms = boot_now_ms() - start_ms;
	if (resp.exit_code != 0 || resp.error) {
		fprintf(stderr, "boot_bench: `true` in the QEMU guest exited %d (%s)\n",
			resp.exit_code, resp.error ? resp.error : "no error text");
		rc = -EIO;
	}
	proto_exec_response_free(&resp);
	if (rc == 0 && timeline_path) {
		rc = channel_save_timeline(ch, timeline_path);
		if (rc < 0)
			fprintf(stderr, "boot_bench: cannot save the QEMU guest timeline to %s: %s\n",
				timeline_path, strerror(-rc));
	}
out:
	control_channel_destroy(ch);
	return rc;
}

static void print_file_tail(const char *label, const char *path)
{
	char line[LINE_MAX_LEN];
	FILE *file = fopen(path, "re");

	if (!file)
		return;
	fprintf(stderr, "--- %s (%s) ---\n", label, path);
	while (fgets(line, sizeof(line), file))
		fputs(line, stderr);
	fclose(file);
}

static int qemu_run(const struct bench_options *opts, const char *workdir,
		    const char *timeline_path, struct bench_run *run)
{
	uint8_t secret[CMDLINE_SECRET_LEN];
	char cmdline[CMDLINE_MAX], serial_path[PATH_MAX], log_path[PATH_MAX];
	char extra[CMDLINE_MAX];
	struct qemu_peer peer = { .cid = opts->cid };
	double start, deadline;
	pid_t pid;
	int rc;

	memset(run, 0, sizeof(*run));
	if (getrandom(secret, sizeof(secret), 0) != (ssize_t)sizeof(secret))
		return -EIO;
	snprintf(extra, sizeof(extra), "%s%s%s", opts->qemu_append ? opts->qemu_append : "",
		 opts->qemu_append && timeline_path ? " " : "", timeline_path ? TIMELINE_CMDLINE : "");
	rc = cmdline_build(cmdline, sizeof(cmdline), secret, (uint64_t)time(NULL), extra);
	if (rc < 0)
		return rc;
	snprintf(serial_path, sizeof(serial_path), "%s/qemu-serial.log", workdir);
	snprintf(log_path, sizeof(log_path), "%s/qemu-stderr.log", workdir);
	start = boot_now_ms();
	deadline = start + (double)opts->boot_timeout_s * MS_PER_SEC;
	pid = qemu_spawn(opts, cmdline, serial_path, log_path);
	if (pid < 0)
		return pid;
	rc = qemu_wait_for_agent(pid, opts->cid, deadline);
	if (rc == 0)
		rc = qemu_talk_to_agent(&peer, secret, start, timeline_path, run);
	if (rc == 0) {
		rc = boot_memory_sample_pid(pid, opts->memory_mb * BYTES_PER_MB, &run->memory);
		run->has_memory = rc == 0;
		if (rc < 0)
			fprintf(stderr, "boot_bench: QEMU smaps sample failed: %s\n", strerror(-rc));
	}
	child_kill_and_reap(pid);
	if (rc < 0) {
		fprintf(stderr, "boot_bench: QEMU run failed: %s\n", strerror(-rc));
		print_file_tail("QEMU output", log_path);
		print_file_tail("QEMU guest console", serial_path);
	}
	explicit_bzero(secret, sizeof(secret));
	return rc;
}

/* ---- figures ---------------------------------------------------------------------------- */

static int series_init(struct bench_series *series, size_t capacity)
{
	memset(series, 0, sizeof(*series));
	series->first_answer_ms = calloc(capacity, sizeof(double));
	series->done_ms = calloc(capacity, sizeof(double));
	series->vmm_rss_mb = calloc(capacity, sizeof(double));
	series->guest_rss_mb = calloc(capacity, sizeof(double));
	series->total_rss_mb = calloc(capacity, sizeof(double));
	if (!series->first_answer_ms || !series->done_ms || !series->vmm_rss_mb ||
	    !series->guest_rss_mb || !series->total_rss_mb)
		return -ENOMEM;
	return 0;
}

static void series_free(struct bench_series *series)
{
	free(series->first_answer_ms);
	free(series->done_ms);
	free(series->vmm_rss_mb);
	free(series->guest_rss_mb);
	free(series->total_rss_mb);
}

static void series_add_time(struct bench_series *series, const struct bench_run *run)
{
	series->first_answer_ms[series->time_count] = run->first_answer_ms;
	series->done_ms[series->time_count] = run->done_ms;
	series->time_count++;
}

static void series_add_memory(struct bench_series *series, const struct bench_run *run)
{
	series->vmm_rss_mb[series->memory_count] = (double)run->memory.vmm_rss_kb / KB_PER_MB;
	series->guest_rss_mb[series->memory_count] = (double)run->memory.guest_rss_kb / KB_PER_MB;
	series->total_rss_mb[series->memory_count] = (double)run->memory.total_rss_kb / KB_PER_MB;
	series->memory_count++;
}

struct bench_summary {
	double first_answer_p50, first_answer_p95;
	double done_p50, done_p95;
	double vmm_rss_p50, vmm_rss_p95;
	double guest_rss_p50, total_rss_p50;
};

/* Percentiles work on copies: the series keep run order for the JSON. */
static double percentile_of(const double *values, size_t count, unsigned int percent)
{
	double *copy;
	double result;

	if (count == 0)
		return 0;
	copy = malloc(count * sizeof(*copy));
	if (!copy)
		return 0;
	memcpy(copy, values, count * sizeof(*copy));
	result = boot_percentile(copy, count, percent);
	free(copy);
	return result;
}

static void series_summarise(const struct bench_series *s, struct bench_summary *out)
{
	out->first_answer_p50 = percentile_of(s->first_answer_ms, s->time_count, PERCENTILE_MEDIAN);
	out->first_answer_p95 = percentile_of(s->first_answer_ms, s->time_count, PERCENTILE_TAIL);
	out->done_p50 = percentile_of(s->done_ms, s->time_count, PERCENTILE_MEDIAN);
	out->done_p95 = percentile_of(s->done_ms, s->time_count, PERCENTILE_TAIL);
	out->vmm_rss_p50 = percentile_of(s->vmm_rss_mb, s->memory_count, PERCENTILE_MEDIAN);
	out->vmm_rss_p95 = percentile_of(s->vmm_rss_mb, s->memory_count, PERCENTILE_TAIL);
	out->guest_rss_p50 = percentile_of(s->guest_rss_mb, s->memory_count, PERCENTILE_MEDIAN);
	out->total_rss_p50 = percentile_of(s->total_rss_mb, s->memory_count, PERCENTILE_MEDIAN);
}

static double ratio(double ours, double theirs)
{
	return theirs > 0 ? ours / theirs : 0;
}

static void print_table(const struct bench_summary sum[BENCH_SIDES],
			const struct bench_series series[BENCH_SIDES])
{
	printf("\n%-14s %5s %12s %12s %12s %12s %5s %12s %12s\n", "VMM", "runs",
	       "answer p50", "answer p95", "true p50", "true p95", "mem n", "VMM MiB p50",
	       "VMM MiB p95");
	for (int side = 0; side < BENCH_SIDES; side++)
		printf("%-14s %5zu %10.0fms %10.0fms %10.0fms %10.0fms %5zu %12.1f %12.1f\n",
		       bench_side_names[side], series[side].time_count,
		       sum[side].first_answer_p50, sum[side].first_answer_p95, sum[side].done_p50,
		       sum[side].done_p95, series[side].memory_count, sum[side].vmm_rss_p50,
		       sum[side].vmm_rss_p95);
	printf("\nratio voidbox/qemu (p50): first answer %.2f, true done %.2f, VMM memory %.2f\n",
	       ratio(sum[BENCH_VOIDBOX].first_answer_p50, sum[BENCH_QEMU].first_answer_p50),
	       ratio(sum[BENCH_VOIDBOX].done_p50, sum[BENCH_QEMU].done_p50),
	       ratio(sum[BENCH_VOIDBOX].vmm_rss_p50, sum[BENCH_QEMU].vmm_rss_p50));
	printf("(voidbox 'true done' = process exit, teardown included; QEMU's = the Exec answer)\n");
}

static json_t *json_doubles(const double *values, size_t count)
{
	json_t *array = json_array();

	for (size_t i = 0; array && i < count; i++)
		json_array_append_new(array, json_real(values[i]));
	return array;
}

static json_t *json_side(const struct bench_series *s, const struct bench_summary *sum)
{
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			 "first_answer_ms", json_doubles(s->first_answer_ms, s->time_count),
			 "true_done_ms", json_doubles(s->done_ms, s->time_count),
			 "vmm_rss_mib", json_doubles(s->vmm_rss_mb, s->memory_count),
			 "guest_rss_mib", json_doubles(s->guest_rss_mb, s->memory_count),
			 "total_rss_mib", json_doubles(s->total_rss_mb, s->memory_count),
			 "first_answer_p50_ms", sum->first_answer_p50,
			 "first_answer_p95_ms", sum->first_answer_p95,
			 "true_done_p50_ms", sum->done_p50, "true_done_p95_ms", sum->done_p95,
			 "vmm_rss_p50_mib", sum->vmm_rss_p50, "vmm_rss_p95_mib", sum->vmm_rss_p95,
			 "guest_rss_p50_mib", sum->guest_rss_p50,
			 "total_rss_p50_mib", sum->total_rss_p50);
}

/* The first "model name" of /proc/cpuinfo, or "unknown". */
static void cpu_model(char *out, size_t outlen)
{
	char line[LINE_MAX_LEN];
	FILE *cpuinfo = fopen("/proc/cpuinfo", "re");
	char *colon;

	snprintf(out, outlen, "unknown");
	if (!cpuinfo)
		return;
	while (fgets(line, sizeof(line), cpuinfo)) {
		if (strncmp(line, "model name", strlen("model name")) != 0)
			continue;
		colon = strchr(line, ':');
		if (colon) {
			snprintf(out, outlen, "%s", colon + 2);
			out[strcspn(out, "\n")] = '\0';
		}
		break;
	}
	fclose(cpuinfo);
}

static int write_json(const struct bench_options *opts, const struct bench_summary sum[BENCH_SIDES],
		      const struct bench_series series[BENCH_SIDES])
{
	char model[LINE_MAX_LEN];
	struct utsname uts;
	json_t *root;
	int rc;

	cpu_model(model, sizeof(model));
	if (uname(&uts) < 0)
		memset(&uts, 0, sizeof(uts));
	root = json_pack("{s:{s:s, s:s, s:i, s:s}, s:{s:i, s:i, s:i, s:s, s:s, s:s}, s:o, s:o, "
			 "s:{s:f, s:f, s:f}}",
			 "machine", "cpu", model, "kernel", uts.release,
			 "online_cpus", (int)sysconf(_SC_NPROCESSORS_ONLN), "kvm", "/dev/kvm",
			 "config", "runs", (int)opts->runs, "memory_runs", (int)opts->memory_runs,
			 "guest_memory_mib", (int)opts->memory_mb, "kernel", opts->kernel_path,
			 "initramfs", opts->initramfs_path, "qemu_machine", opts->qemu_machine,
			 "voidbox", json_side(&series[BENCH_VOIDBOX], &sum[BENCH_VOIDBOX]),
			 "qemu", json_side(&series[BENCH_QEMU], &sum[BENCH_QEMU]),
			 "ratio_voidbox_over_qemu_p50",
			 "first_answer", ratio(sum[BENCH_VOIDBOX].first_answer_p50,
					       sum[BENCH_QEMU].first_answer_p50),
			 "true_done", ratio(sum[BENCH_VOIDBOX].done_p50, sum[BENCH_QEMU].done_p50),
			 "vmm_memory", ratio(sum[BENCH_VOIDBOX].vmm_rss_p50,
					     sum[BENCH_QEMU].vmm_rss_p50));
	if (!root)
		return -ENOMEM;
	rc = json_dump_file(root, opts->json_path, JSON_INDENT(2)) == 0 ? 0 : -EIO;
	json_decref(root);
	if (rc < 0)
		fprintf(stderr, "boot_bench: cannot write %s\n", opts->json_path);
	return rc;
}

static void print_run(const char *side, unsigned int index, const char *what,
		      const struct bench_run *run)
{
	printf("run %2u %-13s %-6s answer %8.0f ms  done %8.0f ms", index + 1, side, what,
	       run->first_answer_ms, run->done_ms);
	if (run->has_memory)
		printf("  VMM %6.1f MiB (total %6.1f, guest %6.1f, of it THP %6.1f)",
		       (double)run->memory.vmm_rss_kb / KB_PER_MB,
		       (double)run->memory.total_rss_kb / KB_PER_MB,
		       (double)run->memory.guest_rss_kb / KB_PER_MB,
		       (double)run->memory.guest_huge_kb / KB_PER_MB);
	printf("\n");
	fflush(stdout);
}

/* One iteration: voidbox `true`, maybe voidbox `sleep`, QEMU; the order flips every time. */
static int bench_iteration(const struct bench_options *opts, const char *workdir,
			   unsigned int index, struct bench_series series[BENCH_SIDES])
{
	struct bench_run run;
	int failures = 0;

	for (int step = 0; step < BENCH_SIDES; step++) {
		enum bench_side side = (enum bench_side)((step + (int)index) % BENCH_SIDES);

		if (side == BENCH_QEMU) {
			if (qemu_run(opts, workdir, NULL, &run) < 0) {
				failures++;
				continue;
			}
			print_run(bench_side_names[side], index, "true", &run);
			series_add_time(&series[side], &run);
			if (run.has_memory)
				series_add_memory(&series[side], &run);
			continue;
		}
		if (voidbox_run(opts, VOIDBOX_JOB_TRUE, &run) < 0) {
			failures++;
		} else {
			print_run(bench_side_names[side], index, "true", &run);
			series_add_time(&series[side], &run);
		}
		if (index >= opts->memory_runs)
			continue;
		if (voidbox_run(opts, VOIDBOX_JOB_SLEEP, &run) < 0) {
			failures++;
		} else {
			print_run(bench_side_names[side], index, "sleep", &run);
			series_add_memory(&series[side], &run);
		}
	}
	return failures;
}

/*
 * The voidbox timeline boot runs in this process through the sandbox API, because only that
 * takes extra kernel arguments (TIMELINE_CMDLINE); it is not timed.
 */
static int voidbox_save_timeline(const struct bench_options *opts, const char *path)
{
	struct sandbox_config cfg = {
		.kernel_path = opts->kernel_path, .initramfs_path = opts->initramfs_path,
		.memory_mb = opts->memory_mb, .vcpus = 1, .extra_cmdline = TIMELINE_CMDLINE,
		.boot_timeout_ms = (int)opts->boot_timeout_s * MS_PER_SEC,
	};
	char err[LINE_MAX_LEN];
	struct sandbox *sandbox;
	int rc;

	rc = sandbox_start(&cfg, &sandbox, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "boot_bench: voidbox timeline boot failed: %s\n", err);
		return rc;
	}
	rc = channel_save_timeline(sandbox_channel(sandbox), path);
	if (rc < 0)
		fprintf(stderr, "boot_bench: cannot save the voidbox guest timeline to %s: %s\n",
			path, strerror(-rc));
	sandbox_destroy(sandbox, false);
	return rc;
}

/* One more boot of each VMM that saves the guest's uptime and dmesg in the guest-log dir. */
static int bench_save_timelines(const struct bench_options *opts, const char *workdir)
{
	char path[PATH_MAX];
	struct bench_run run;
	int failures = 0;

	snprintf(path, sizeof(path), "%s/%s", opts->guest_log_dir, TIMELINE_VOIDBOX_FILE);
	if (voidbox_save_timeline(opts, path) < 0)
		failures++;
	else
		printf("voidbox guest timeline in %s\n", path);
	snprintf(path, sizeof(path), "%s/%s", opts->guest_log_dir, TIMELINE_QEMU_FILE);
	if (qemu_run(opts, workdir, path, &run) < 0)
		failures++;
	else
		printf("QEMU guest timeline in %s\n", path);
	return failures;
}

int main(int argc, char **argv)
{
	struct bench_options opts;
	struct bench_series series[BENCH_SIDES];
	struct bench_summary sum[BENCH_SIDES];
	char workdir[] = "/tmp/voidbox-boot-bench.XXXXXX";
	int rc, failures = 0;

	memset(series, 0, sizeof(series));
	rc = bench_parse_options(argc, argv, &opts);
	if (rc == BENCH_PARSE_HELP_SHOWN)
		return EXIT_SUCCESS;
	if (rc)
		return rc;
	host_env_apply();
	if (!mkdtemp(workdir)) {
		fprintf(stderr, "boot_bench: cannot create a directory in /tmp: %s\n",
			strerror(errno));
		return BENCH_EXIT_FAILED;
	}
	for (int side = 0; side < BENCH_SIDES; side++) {
		if (series_init(&series[side], opts.runs + 1) < 0) {
			fprintf(stderr, "boot_bench: out of memory\n");
			rc = BENCH_EXIT_FAILED;
			goto out;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows through with-nested-kvm's file */
	printf("boot_bench: %u runs each, %u MiB guest RAM, 1 vCPU, kernel %s\n", opts.runs,
	       opts.memory_mb, opts.kernel_path);
	for (unsigned int i = 0; i < opts.runs; i++)
		failures += bench_iteration(&opts, workdir, i, series);
	for (int side = 0; side < BENCH_SIDES; side++)
		series_summarise(&series[side], &sum[side]);
	if (opts.runs > 0)
		print_table(sum, series);
	if (opts.guest_log_dir)
		failures += bench_save_timelines(&opts, workdir);
	if (failures)
		printf("%d run(s) failed and are not in the figures\n", failures);
	if (opts.runs > 0 && opts.json_path && write_json(&opts, sum, series) < 0)
		failures++;
	rc = failures ? BENCH_EXIT_FAILED : EXIT_SUCCESS;
out:
	for (int side = 0; side < BENCH_SIDES; side++)
		series_free(&series[side]);
	char serial_path[PATH_MAX], log_path[PATH_MAX];

	snprintf(serial_path, sizeof(serial_path), "%s/qemu-serial.log", workdir);
	snprintf(log_path, sizeof(log_path), "%s/qemu-stderr.log", workdir);
	unlink(serial_path);
	unlink(log_path);
	rmdir(workdir);
	return rc;
}
