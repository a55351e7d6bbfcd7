/*
 * Round trips on warm VMs, all in one run so machine drift hits every series alike:
 *
 *   exec (doorbells)      `true` through the agent; queue notifies are KVM_IOEVENTFD doorbells
 *   exec (no doorbells)   the same on a second VM whose notifies exit to user space
 *   agent echo            SnapshotReady, which the agent's connection reader answers at once
 *   raw echo              ECHO_BYTES through the guest's raw vsock echo (the agent binary in
 *                         its --vsock-echo mode, started by an exec), over the VMM's hybrid
 *                         vsock socket: the transport alone, no protocol and no agent
 *   QEMU exec, QEMU raw echo   the same exec and echo on QEMU microvm with vhost-vsock (the
 *                         benchmarks' common peer, qemu_peer.c), booted from the same image
 *
 * The series are measured in alternating rounds of --calls each. The ratios that matter:
 * exec over raw echo (the agent's own cost per exec) and voidbox's raw echo over QEMU's (the
 * transport against the peer's). Prints a table and, with --json, every figure.
 *
 * Usage: exec_bench [--calls N] [--rounds R] [--json] [--append WORDS] [--qemu PATH|--no-qemu]
 *                   [--show CMD]   (CMD's output in each guest, to compare their setups)
 * (needs a guest image: voidbox image build; QEMU's side needs /dev/vhost-vsock)
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/host_env.h"
#include "host/vsock_connect.h"
#include "qemu_peer.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vsock_cid.h"

#define EB_DEFAULT_CALLS 50u
#define EB_DEFAULT_ROUNDS 4u
#define EB_MAX_CALLS 10000u
#define EB_MAX_ROUNDS 100u
#define EB_MEMORY_MB 256u
#define EB_ERROR_MAX 1024
#define EB_EXIT_USAGE 2
#define EB_EXIT_FAILED 1
#define EB_NSEC_PER_USEC 1000.0
#define EB_NSEC_PER_SEC 1000000000ULL
#define EB_PERCENTILE_90 0.9
#define EB_MEDIAN 0.5
#define EB_ECHO_PORT 5000u
#define EB_ECHO_PORT_TEXT "5000"
#define EB_ECHO_BYTES 64u
#define EB_CONNECT_TIMEOUT_MS 30000
#define EB_QEMU_CID 44u
#define EB_QEMU_BOOT_TIMEOUT_MS 300000.0
#define EB_CONSOLE_TEMPLATE "/tmp/voidbox-exec-bench-qemu-XXXXXX"

/* The guest's echo: the agent binary (the image's /init) in its hidden mode (guest/agent/echo.h). */
static char eb_echo_program[] = "/init";
static char eb_echo_flag[] = "--vsock-echo";
static char eb_echo_port[] = EB_ECHO_PORT_TEXT;

/* QEMU's guest gets voidbox's device set: vsock (qemu_peer) and virtio-rng. */
static const char *const eb_qemu_devices[] = { "-device", "virtio-rng-device", NULL };

enum eb_vm { EB_VM_DOORBELLS, EB_VM_NO_DOORBELLS, EB_VM_QEMU, EB_VMS };
enum eb_kind { EB_EXEC, EB_AGENT_ECHO, EB_RAW_ECHO };
enum eb_series {
	EB_EXEC_DOORBELLS,
	EB_EXEC_NO_DOORBELLS,
	EB_AGENT_ECHO_SERIES,
	EB_RAW_ECHO_SERIES,
	EB_QEMU_EXEC,
	EB_QEMU_RAW_ECHO,
	EB_SERIES
};

struct eb_series_def {
	const char *name;
	enum eb_vm vm;
	enum eb_kind kind;
};

static const struct eb_series_def eb_series_defs[EB_SERIES] = {
	[EB_EXEC_DOORBELLS] = { "with doorbells", EB_VM_DOORBELLS, EB_EXEC },
	[EB_EXEC_NO_DOORBELLS] = { "without doorbells", EB_VM_NO_DOORBELLS, EB_EXEC },
	[EB_AGENT_ECHO_SERIES] = { "agent echo", EB_VM_DOORBELLS, EB_AGENT_ECHO },
	[EB_RAW_ECHO_SERIES] = { "raw echo", EB_VM_DOORBELLS, EB_RAW_ECHO },
	[EB_QEMU_EXEC] = { "qemu exec", EB_VM_QEMU, EB_EXEC },
	[EB_QEMU_RAW_ECHO] = { "qemu raw echo", EB_VM_QEMU, EB_RAW_ECHO },
};

struct eb_options {
	unsigned int calls;
	unsigned int rounds;
	bool json;
	const char *append;
	const char *qemu; /* NULL: no QEMU series */
	const char *show; /* a shell command run once in each guest, its output printed */
};

/* A booted VM: its control channel and, once started, the connection to its raw echo. */
struct eb_target {
	struct sandbox *sandbox; /* voidbox's VMs */
	struct qemu_peer peer;	 /* QEMU's */
	struct control_channel *channel;
	int echo_fd;
};

struct eb_samples {
	double *us;
	size_t count;
};

static uint64_t eb_now_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * EB_NSEC_PER_SEC + (uint64_t)now.tv_nsec;
}

static int eb_compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int eb_exec(struct control_channel *channel, char *program, char **args,
		   size_t args_count)
{
	struct proto_exec_request req = { .program = program, .args = args,
					  .args_count = args_count };
	struct proto_exec_response resp = { 0 };
	int rc = control_channel_exec(channel, &req, NULL, NULL, &resp);

	if (rc == 0 && resp.exit_code != 0)
		rc = -ECANCELED;
	if (rc < 0)
		fprintf(stderr, "exec_bench: exec of %s failed: %s\n", program,
			rc == -ECANCELED ? "it exited non-zero" : control_channel_last_error());
	if (rc == 0 || rc == -ECANCELED)
		proto_exec_response_free(&resp);
	return rc;
}

/* --show: what each guest says to opts->show, on stderr, to compare the guests' setups. */
static void eb_show(const char *name, struct control_channel *channel, const char *command)
{
	static char shell[] = "sh";
	static char dash_c[] = "-c";
	char *args[] = { dash_c, (char *)command };
	struct proto_exec_request req = { .program = shell, .args = args, .args_count = 2 };
	struct proto_exec_response resp = { 0 };

	if (control_channel_exec(channel, &req, NULL, NULL, &resp) < 0) {
		fprintf(stderr, "exec_bench: %s: --show failed: %s\n", name,
			control_channel_last_error());
		return;
	}
	fprintf(stderr, "---- %s: %s (exit %d)\n%.*s%.*s", name, command, resp.exit_code,
		(int)resp.stdout_data.len, (const char *)resp.stdout_data.data,
		(int)resp.stderr_data.len, (const char *)resp.stderr_data.data);
	proto_exec_response_free(&resp);
}

static int eb_raw_echo(int fd)
{
	static const char out[EB_ECHO_BYTES] = "voidbox exec_bench raw echo";
	char back[EB_ECHO_BYTES];
	size_t got = 0;

	if (write(fd, out, sizeof(out)) != (ssize_t)sizeof(out)) {
		fprintf(stderr, "exec_bench: raw echo write failed: %s\n", strerror(errno));
		return -EIO;
	}
	while (got < sizeof(back)) {
		ssize_t n = read(fd, back + got, sizeof(back) - got);

		if (n <= 0) {
			fprintf(stderr, "exec_bench: the raw echo closed or failed\n");
			return -EIO;
		}
		got += (size_t)n;
	}
	return memcmp(out, back, sizeof(out)) == 0 ? 0 : -EPROTO;
}

static int eb_call(const struct eb_series_def *def, struct eb_target *target, double *us)
{
	static char true_program[] = "true";
	uint64_t started = eb_now_ns();
	int rc;

	switch (def->kind) {
	case EB_EXEC:
		rc = eb_exec(target->channel, true_program, NULL, 0);
		break;
	case EB_AGENT_ECHO:
		rc = control_channel_snapshot_ready(target->channel, 0);
		if (rc < 0)
			fprintf(stderr, "exec_bench: SnapshotReady failed: %s\n",
				control_channel_last_error());
		break;
	case EB_RAW_ECHO:
	default:
		rc = eb_raw_echo(target->echo_fd);
		break;
	}
	*us = (double)(eb_now_ns() - started) / EB_NSEC_PER_USEC;
	return rc;
}

static int eb_boot_voidbox(struct eb_target *target, bool no_doorbells,
			   const struct guest_image_paths *image, const struct eb_options *opts)
{
	struct sandbox_config cfg = {
		.kernel_path = image->kernel,
		.initramfs_path = image->initramfs[0] ? image->initramfs : NULL,
		.memory_mb = EB_MEMORY_MB,
		.extra_cmdline = opts->append,
		.no_doorbells = no_doorbells,
	};
	char err[EB_ERROR_MAX];

	if (sandbox_start(&cfg, &target->sandbox, err, sizeof(err)) < 0) {
		fprintf(stderr, "exec_bench: a voidbox VM did not start: %s\n", err);
		return -1;
	}
	target->channel = sandbox_channel(target->sandbox);
	return 0;
}

static int eb_boot_qemu(struct eb_target *target, const struct guest_image_paths *image,
			const struct eb_options *opts, char *console)
{
	struct qemu_peer_config cfg = { .qemu = opts->qemu, .kernel = image->kernel,
					.initramfs = image->initramfs, .memory_mb = EB_MEMORY_MB,
					.cid = EB_QEMU_CID, .cmdline_extra = opts->append,
					.console_path = console, .extra_args = eb_qemu_devices,
					.boot_timeout_ms = EB_QEMU_BOOT_TIMEOUT_MS };
	char err[EB_ERROR_MAX];
	int fd = mkstemp(console);

	if (fd < 0) {
		fprintf(stderr, "exec_bench: cannot create the QEMU console file %s\n", console);
		return -1;
	}
	close(fd);
	if (qemu_peer_start(&cfg, &target->peer, err, sizeof(err)) < 0) {
		fprintf(stderr, "exec_bench: %s\n", err);
		return -1;
	}
	target->channel = target->peer.channel;
	return 0;
}

/* Starts the guest's raw echo with an exec, then connects to it through the VMM. */
static int eb_start_echo(enum eb_vm vm, struct eb_target *target)
{
	char *args[] = { eb_echo_flag, eb_echo_port };

	if (eb_exec(target->channel, eb_echo_program, args, 2) < 0)
		return -1;
	target->echo_fd = vm == EB_VM_QEMU
				  ? bench_vsock_connect_cid(EB_QEMU_CID, EB_ECHO_PORT,
							    EB_CONNECT_TIMEOUT_MS)
				  : vsock_host_connect(sandbox_vsock_socket_path(target->sandbox),
						       EB_ECHO_PORT, EB_CONNECT_TIMEOUT_MS);
	if (target->echo_fd < 0) {
		fprintf(stderr, "exec_bench: cannot connect to the guest's raw echo: %s\n",
			strerror(-target->echo_fd));
		return -1;
	}
	return 0;
}

static double eb_percentile(const struct eb_samples *s, double fraction)
{
	return s->us[(size_t)(fraction * (double)(s->count - 1))];
}

static double eb_ratio(const double *median, enum eb_series over, enum eb_series under)
{
	return median[under] > 0 ? median[over] / median[under] : 0.0;
}

static const struct {
	const char *name;
	enum eb_series over, under;
} eb_ratios[] = {
	{ "median_ratio_without_over_with", EB_EXEC_NO_DOORBELLS, EB_EXEC_DOORBELLS },
	{ "median_ratio_exec_over_agent_echo", EB_EXEC_DOORBELLS, EB_AGENT_ECHO_SERIES },
	{ "median_ratio_exec_over_raw_echo", EB_EXEC_DOORBELLS, EB_RAW_ECHO_SERIES },
	{ "median_ratio_raw_echo_over_qemu_raw_echo", EB_RAW_ECHO_SERIES, EB_QEMU_RAW_ECHO },
	{ "median_ratio_exec_over_qemu_exec", EB_EXEC_DOORBELLS, EB_QEMU_EXEC },
	{ "median_ratio_qemu_exec_over_qemu_raw_echo", EB_QEMU_EXEC, EB_QEMU_RAW_ECHO },
};

static void eb_report(struct eb_samples samples[EB_SERIES], const struct eb_options *opts)
{
	double median[EB_SERIES] = { 0 };
	json_t *root = opts->json ? json_object() : NULL;

	for (int i = 0; i < EB_SERIES; i++) {
		if (samples[i].count == 0)
			continue;
		qsort(samples[i].us, samples[i].count, sizeof(double), eb_compare);
		median[i] = eb_percentile(&samples[i], EB_MEDIAN);
	}
	if (!root)
		printf("%-22s %8s %10s %10s %10s\n", "round trip", "calls", "min us", "median us",
		       "p90 us");
	for (int i = 0; i < EB_SERIES; i++) {
		const struct eb_samples *s = &samples[i];

		if (s->count == 0)
			continue;
		if (root)
			json_object_set_new(root, eb_series_defs[i].name,
					    json_pack("{s:I, s:f, s:f, s:f, s:f}", "calls",
						      (json_int_t)s->count, "min_us", s->us[0],
						      "median_us", median[i], "p90_us",
						      eb_percentile(s, EB_PERCENTILE_90), "max_us",
						      s->us[s->count - 1]));
		else
			printf("%-22s %8zu %10.0f %10.0f %10.0f\n", eb_series_defs[i].name,
			       s->count, s->us[0], median[i], eb_percentile(s, EB_PERCENTILE_90));
	}
	for (size_t i = 0; i < sizeof(eb_ratios) / sizeof(eb_ratios[0]); i++) {
		double ratio = eb_ratio(median, eb_ratios[i].over, eb_ratios[i].under);

		if (ratio == 0.0)
			continue;
		if (root)
			json_object_set_new(root, eb_ratios[i].name, json_real(ratio));
		else
			printf("%s: %.2f\n", eb_ratios[i].name, ratio);
	}
	if (root) {
		if (opts->append)
			json_object_set_new(root, "guest_cmdline_append", json_string(opts->append));
		json_dumpf(root, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(root);
	}
}

static int eb_parse(int argc, char **argv, struct eb_options *opts)
{
	static const struct option options[] = {
		{ "calls", required_argument, NULL, 'c' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "append", required_argument, NULL, 'a' },
		{ "qemu", required_argument, NULL, 'q' },
		{ "no-qemu", no_argument, NULL, 'n' },
		{ "show", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	int option;

	while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
		unsigned long value;
		char *end;

		switch (option) {
		case 'j': opts->json = true; continue;
		case 'a': opts->append = optarg; continue;
		case 'q': opts->qemu = optarg; continue;
		case 'n': opts->qemu = NULL; continue;
		case 's': opts->show = optarg; continue;
		case 'c':
		case 'r': break;
		default: return -1;
		}
		errno = 0;
		value = strtoul(optarg, &end, 10);
		if (errno || *end || optarg[0] == '-' || value == 0 ||
		    value > (option == 'c' ? EB_MAX_CALLS : EB_MAX_ROUNDS))
			return -1;
		*(option == 'c' ? &opts->calls : &opts->rounds) = (unsigned int)value;
	}
	return optind == argc ? 0 : -1;
}

static int eb_boot_all(struct eb_target targets[EB_VMS], const struct guest_image_paths *image,
		       const struct eb_options *opts, char *console)
{
	if (eb_boot_voidbox(&targets[EB_VM_DOORBELLS], false, image, opts) < 0 ||
	    eb_boot_voidbox(&targets[EB_VM_NO_DOORBELLS], true, image, opts) < 0 ||
	    eb_start_echo(EB_VM_DOORBELLS, &targets[EB_VM_DOORBELLS]) < 0)
		return -1;
	if (opts->qemu && (eb_boot_qemu(&targets[EB_VM_QEMU], image, opts, console) < 0 ||
			   eb_start_echo(EB_VM_QEMU, &targets[EB_VM_QEMU]) < 0))
		return -1;
	for (int vm = 0; opts->show && vm < EB_VMS; vm++)
		if (targets[vm].channel)
			eb_show(vm == EB_VM_QEMU ? "QEMU guest" : "voidbox guest",
				targets[vm].channel, opts->show);
	return 0;
}

static int eb_measure(struct eb_target targets[EB_VMS], struct eb_samples samples[EB_SERIES],
		      const struct eb_options *opts)
{
	for (unsigned int round = 0; round < opts->rounds; round++)
		for (int i = 0; i < EB_SERIES; i++) {
			const struct eb_series_def *def = &eb_series_defs[i];

			if (!targets[def->vm].channel)
				continue;
			for (unsigned int call = 0; call < opts->calls; call++) {
				if (eb_call(def, &targets[def->vm],
					    &samples[i].us[samples[i].count]) < 0)
					return -1;
				samples[i].count++;
			}
		}
	return 0;
}

int main(int argc, char **argv)
{
	struct eb_options opts = { .calls = EB_DEFAULT_CALLS, .rounds = EB_DEFAULT_ROUNDS,
				   .qemu = "qemu-system-x86_64" };
	struct eb_target targets[EB_VMS];
	struct eb_samples samples[EB_SERIES] = { 0 };
	char console[] = EB_CONSOLE_TEMPLATE;
	struct guest_image_paths image;
	char err[EB_ERROR_MAX];
	int status = EB_EXIT_FAILED;

	for (int vm = 0; vm < EB_VMS; vm++)
		targets[vm] = (struct eb_target){ .peer = { .pid = -1 }, .echo_fd = -1 };
	if (eb_parse(argc, argv, &opts) < 0) {
		fprintf(stderr, "usage: exec_bench [--calls N] [--rounds R] [--json] "
				"[--append WORDS] [--qemu PATH | --no-qemu] [--show CMD]\n");
		return EB_EXIT_USAGE;
	}
	host_env_apply();
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "exec_bench: %s\n", err);
		return EB_EXIT_FAILED;
	}
	for (int i = 0; i < EB_SERIES; i++) {
		samples[i].us = calloc((size_t)opts.calls * opts.rounds, sizeof(double));
		if (!samples[i].us)
			goto out;
	}
	if (eb_boot_all(targets, &image, &opts, console) < 0 ||
	    eb_measure(targets, samples, &opts) < 0)
		goto out;
	eb_report(samples, &opts);
	status = 0;
out:
	for (int vm = 0; vm < EB_VMS; vm++) {
		if (targets[vm].echo_fd >= 0)
			close(targets[vm].echo_fd);
		sandbox_destroy(targets[vm].sandbox, status != 0);
		qemu_peer_stop(&targets[vm].peer);
	}
	for (int i = 0; i < EB_SERIES; i++)
		free(samples[i].us);
	if (console[sizeof(console) - 2] != 'X')
		unlink(console);
	return status;
}
