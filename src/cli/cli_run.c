/*
 * `voidbox run --file SPEC`: load a spec, refuse what this build cannot run (with the spec's
 * own positions and hints) before anything boots, dispatch by kind, print the run report.
 *
 * SIGINT and SIGTERM cancel the run in order (stop_signals.h): the sandboxes are shut down,
 * the stages under way fail, and the report of what ran is printed; a second signal ends the
 * process at once. A `kind: sandbox` spec boots its box, runs `echo ready` in it, says so on
 * stderr and keeps the box up until one of those signals, which ends it successfully.
 *
 * Under `voidbox serve` each run is this command with --events-fd: a JSON line per stage
 * start, piece of output and finish goes to that descriptor (the runners' run_observer), so
 * the daemon streams stage events while the run goes, and a last run.finished line carries the
 * report with its outputs cut, which the daemon keeps when the whole report is more than it
 * reads; --input-file carries an input too large for argv. SIGUSR1 asks the run's
 * `mode: service` programs to stop gracefully (src/runtime/service.h).
 * `--daemon[=URL]` instead submits the spec to a running daemon and prints the run id.
 *
 * The report goes to stdout (human or --output json) and progress to the logger on stderr,
 * so `voidbox --output json run ...` is machine-readable as a whole. The exit status is 0
 * only when the run succeeded: 1 for a failed run or a spec that cannot run, 2 for usage,
 * 128 + the signal's number (130, 143) for a run that SIGINT or SIGTERM cancelled.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/host_env.h"
#include "cli/stop_signals.h"
#include "common/log.h"
#include "common/text.h"
#include "daemon/daemon.h"
#include "runtime/agent.h"
#include "runtime/box.h"
#include "runtime/pipeline.h"
#include "runtime/run_report.h"
#include "runtime/service.h"
#include "runtime/spec.h"
#include "runtime/workflow.h"

/* the daemon's run id and the messaging sidecar's control socket for a daemon-started run */
#define CLI_RUN_ID_ENV "VOIDBOX_RUN_ID"
#define CLI_SIDECAR_CONTROL_ENV "VOIDBOX_SIDECAR_CONTROL"
#define CLI_RUN_MAX_TIMEOUT_SECS (24u * 3600u)
#define CLI_RUN_DECIMAL 10
#define CLI_RUN_ERROR_MAX 1024
/* a sandbox spec may use what a workflow may: the same box runs it */
#define CLI_RUN_SANDBOX_FEATURES WORKFLOW_SUPPORTED_FEATURES
/*
 * A piece of running output is sent in stage.output events of at most this many bytes: the
 * guest chooses how large one piece is (up to a whole protocol frame), and JSON escapes can
 * make a line six times its text, while the daemon reads a line of at most 8 MiB.
 */
#define CLI_RUN_EVENT_CHUNK_MAX (64u * 1024u)
#define CLI_RUN_INPUT_FILE_MAX (4u * 1024u * 1024u)
static const char *const cli_run_ready_args[] = { "ready" };

enum cli_run_option {
	CLI_RUN_OPT_FILE = 1000,
	CLI_RUN_OPT_INPUT,
	CLI_RUN_OPT_SANDBOX_MODE,
	CLI_RUN_OPT_STEP_TIMEOUT,
	CLI_RUN_OPT_SERIAL_LOG,
	CLI_RUN_OPT_EVENTS_FD,
	CLI_RUN_OPT_INPUT_FILE,
	CLI_RUN_OPT_DAEMON,
	CLI_RUN_OPT_RUN_ID,
	CLI_RUN_OPT_HELP,
};

static const struct option cli_run_options[] = {
	{ "file", required_argument, NULL, CLI_RUN_OPT_FILE },
	{ "input", required_argument, NULL, CLI_RUN_OPT_INPUT },
	{ "sandbox-mode", required_argument, NULL, CLI_RUN_OPT_SANDBOX_MODE },
	{ "step-timeout", required_argument, NULL, CLI_RUN_OPT_STEP_TIMEOUT },
	{ "serial-log", required_argument, NULL, CLI_RUN_OPT_SERIAL_LOG },
	{ "events-fd", required_argument, NULL, CLI_RUN_OPT_EVENTS_FD },
	{ "input-file", required_argument, NULL, CLI_RUN_OPT_INPUT_FILE },
	{ "daemon", optional_argument, NULL, CLI_RUN_OPT_DAEMON },
	{ "run-id", required_argument, NULL, CLI_RUN_OPT_RUN_ID },
	{ "help", no_argument, NULL, CLI_RUN_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

struct cli_run_args {
	const char *file;
	struct workflow_options workflow;
	int events_fd; /* -1: none */
	const char *input_file;
	bool daemon;
	const char *daemon_url; /* NULL: the default socket */
	const char *run_id;
};

/* The stage events written to --events-fd; parallel steps report from their own threads. */
struct cli_run_events {
	int fd;
	pthread_mutex_t lock;
};

static void cli_run_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox run --file SPEC [--input TEXT] [--sandbox-mode auto|mock|local]\n"
		"                   [--step-timeout S] [--serial-log PATH] [--input-file PATH]\n"
		"                   [--daemon[=URL] [--run-id ID]]\n\n"
		"Runs a workflow, agent or pipeline spec and prints its run report (docs/runtime.md);\n"
		"a sandbox spec boots, runs `echo ready` and stays up until Ctrl-C.\n"
		"with the global --output json the report is JSON. Exits 0 only when the run succeeded.\n"
		"Ctrl-C or SIGTERM cancels the run: its sandboxes are shut down and the report of what\n"
		"ran is printed (exit 130 or 143); a second signal ends voidbox at once.\n\n"
		"  --file SPEC          the YAML or JSON spec to run\n"
		"  --input TEXT         workflow: stdin of every step without stdin_from;\n"
		"                       agent/pipeline: the first agent's previous-stage input\n"
		"  --sandbox-mode MODE  override the spec's sandbox.mode (auto, mock or local)\n"
		"  --step-timeout S     workflow steps, agents and pipeline boxes that set no\n"
		"                       timeout_secs (default none; services never time out)\n"
		"  --serial-log PATH    write the VM console here (default: a file kept on failure)\n"
		"  --input-file PATH    like --input, with the text read from PATH\n"
		"  --daemon[=URL]       submit to `voidbox serve` (default socket, or unix://PATH or\n"
		"                       tcp://HOST:PORT with --token-file in VOIDBOX_DAEMON_TOKEN_FILE)\n"
		"                       and print the run id instead of running here\n"
		"  --run-id ID          with --daemon: the run's id (submitting twice is idempotent)\n"
		"  --events-fd FD       write a JSON line per stage start and finish to FD (the daemon)\n");
}

/* Returns 0 to run, a positive exit status, or -1 after printing --help. */
static int cli_run_parse(int argc, char **argv, struct cli_run_args *args)
{
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_run_options, NULL)) != -1) {
		switch (option) {
		case CLI_RUN_OPT_FILE:
			args->file = optarg;
			break;
		case CLI_RUN_OPT_INPUT:
			args->workflow.input = optarg;
			args->workflow.input_len = strlen(optarg);
			break;
		case CLI_RUN_OPT_SANDBOX_MODE:
			if (box_mode_parse(optarg, &args->workflow.mode) < 0) {
				fprintf(stderr,
					"voidbox run: --sandbox-mode takes auto, mock or local, not '%s'\n",
					optarg);
				return CLI_EXIT_USAGE;
			}
			args->workflow.override_mode = true;
			break;
		case CLI_RUN_OPT_STEP_TIMEOUT: {
			unsigned int secs;

			if (!cli_parse_uint("run", "--step-timeout", optarg, 0,
					    CLI_RUN_MAX_TIMEOUT_SECS, &secs))
				return CLI_EXIT_USAGE;
			args->workflow.default_timeout_secs = (uint32_t)secs;
			break;
		}
		case CLI_RUN_OPT_SERIAL_LOG:
			args->workflow.serial_log_path = optarg;
			break;
		case CLI_RUN_OPT_EVENTS_FD: {
			char *end;
			long fd;

			errno = 0;
			fd = strtol(optarg, &end, CLI_RUN_DECIMAL);
			if (errno || end == optarg || *end || fd <= STDERR_FILENO ||
			    fcntl((int)fd, F_GETFD) < 0) {
				fprintf(stderr,
					"voidbox run: --events-fd takes an open descriptor above 2, not '%s'\n",
					optarg);
				return CLI_EXIT_USAGE;
			}
			args->events_fd = (int)fd;
			break;
		}
		case CLI_RUN_OPT_INPUT_FILE:
			args->input_file = optarg;
			break;
		case CLI_RUN_OPT_DAEMON:
			args->daemon = true;
			args->daemon_url = optarg;
			break;
		case CLI_RUN_OPT_RUN_ID:
			args->run_id = optarg;
			break;
		case CLI_RUN_OPT_HELP:
			cli_run_usage(stdout);
			return -1;
		default:
			cli_run_usage(stderr);
			return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "voidbox run: unexpected argument '%s' (see voidbox run --help)\n",
			argv[optind]);
		return CLI_EXIT_USAGE;
	}
	if (!args->file) {
		fprintf(stderr, "voidbox run: --file SPEC is required (see voidbox run --help)\n");
		return CLI_EXIT_USAGE;
	}
	if (args->input_file && args->workflow.input) {
		fprintf(stderr, "voidbox run: give --input or --input-file, not both\n");
		return CLI_EXIT_USAGE;
	}
	if (args->run_id && !args->daemon) {
		fprintf(stderr, "voidbox run: --run-id names a daemon run; add --daemon\n");
		return CLI_EXIT_USAGE;
	}
	return 0;
}

/* Reads --input-file into *text (the caller frees it). 0 or CLI_EXIT_FAILURE, printed. */
static int cli_run_read_input(struct cli_run_args *args, char **text)
{
	FILE *file = fopen(args->input_file, "re");
	size_t len;

	*text = NULL;
	if (!file) {
		fprintf(stderr, "voidbox run: cannot read --input-file %s: %s\n", args->input_file,
			strerror(errno));
		return CLI_EXIT_FAILURE;
	}
	*text = malloc(CLI_RUN_INPUT_FILE_MAX + 1);
	len = *text ? fread(*text, 1, CLI_RUN_INPUT_FILE_MAX + 1, file) : 0;
	fclose(file);
	if (!*text || len > CLI_RUN_INPUT_FILE_MAX) {
		fprintf(stderr, "voidbox run: --input-file %s is over %u bytes\n", args->input_file,
			CLI_RUN_INPUT_FILE_MAX);
		free(*text);
		*text = NULL;
		return CLI_EXIT_FAILURE;
	}
	(*text)[len] = '\0';
	args->workflow.input = *text;
	args->workflow.input_len = len;
	return 0;
}

/* Writes one JSON line to the events descriptor; a closed reader only loses the events. */
static void cli_run_event_write(struct cli_run_events *events, json_t *line)
{
	char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
	size_t len, done = 0;

	json_decref(line);
	if (!text)
		return;
	len = strlen(text);
	text[len] = '\n';
	pthread_mutex_lock(&events->lock);
	while (done < len + 1) {
		ssize_t n = write(events->fd, text + done, len + 1 - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	pthread_mutex_unlock(&events->lock);
	free(text);
}

static void cli_run_stage_started(void *opaque, const struct run_stage *stage)
{
	cli_run_event_write(opaque, json_pack("{s:s, s:s}", "type", "stage.started", "stage",
					      stage->name));
}

static void cli_run_stage_output(void *opaque, const struct run_stage *stage, bool is_stderr,
				 const void *data, size_t len)
{
	const char *rest = data;

	while (len > 0) {
		size_t piece = text_utf8_cut(rest, len, CLI_RUN_EVENT_CHUNK_MAX);
		json_t *text = daemon_text_json(rest, piece);

		if (text)
			cli_run_event_write(opaque,
					    json_pack("{s:s, s:s, s:s, s:o}", "type", "stage.output",
						      "stage", stage->name, "stream",
						      is_stderr ? "stderr" : "stdout", "data", text));
		rest += piece;
		len -= piece;
	}
}

static void cli_run_stage_finished(void *opaque, const struct run_stage *stage)
{
	size_t output_len =
		text_utf8_cut(stage->output, strlen(stage->output), DAEMON_EVENT_OUTPUT_MAX);
	json_t *output = daemon_text_json(stage->output, output_len);

	cli_run_event_write(opaque,
			    json_pack("{s:s, s:s, s:b, s:i, s:I, s:o*, s:s?}", "type",
				      "stage.finished", "stage", stage->name, "success",
				      stage->success, "exit_code", stage->exit_code, "duration_ms",
				      (json_int_t)stage->duration_ms, "output", output, "error",
				      stage->error));
}

/* A service's first published output_file; cut like a stage's output, the full text stays. */
static void cli_run_stage_output_ready(void *opaque, const struct run_stage *stage,
				       const void *data, size_t len)
{
	json_t *text = daemon_text_json(data, text_utf8_cut(data, len, DAEMON_EVENT_OUTPUT_MAX));

	cli_run_event_write(opaque, json_pack("{s:s, s:s, s:I, s:o*}", "type",
					      "stage.output_ready", "stage", stage->name,
					      "size_bytes", (json_int_t)len, "output", text));
}

/*
 * The run's end as one line: its report without the stages' outputs (each went out with its
 * stage.finished, cut the same way) and with its own output cut like a stage's, so the daemon
 * can record the run even when the whole report on stdout is more than it reads.
 */
static void cli_run_finished(struct cli_run_events *events, const struct run_report *report)
{
	size_t full_len = strlen(report->output);
	json_t *summary = run_report_to_json(report);
	json_t *stage;
	size_t i;

	if (!summary)
		return;
	json_array_foreach(json_object_get(summary, "stages"), i, stage)
		json_object_del(stage, "output");
	json_object_set_new(summary, "output",
			    daemon_text_json(report->output,
					     text_utf8_cut(report->output, full_len,
							   DAEMON_EVENT_OUTPUT_MAX)));
	json_object_set_new(summary, "output_bytes", json_integer((json_int_t)full_len));
	cli_run_event_write(events, json_pack("{s:s, s:o}", "type", "run.finished", "report",
					      summary));
}

static void cli_run_telemetry(void *opaque, const char *box_name,
			      const struct box_telemetry_sample *sample)
{
	cli_run_event_write(opaque,
			    json_pack("{s:s, s:s, s:I, s:I, s:{s:f, s:I, s:I, s:I, s:I, s:I, s:I}}",
				      "type", "telemetry", "box", box_name, "seq",
				      (json_int_t)sample->seq, "timestamp_ms",
				      (json_int_t)sample->timestamp_ms, "guest", "cpu_percent",
				      sample->system.cpu_percent, "memory_used_bytes",
				      (json_int_t)sample->system.memory_used_bytes,
				      "memory_total_bytes",
				      (json_int_t)sample->system.memory_total_bytes, "net_rx_bytes",
				      (json_int_t)sample->system.net_rx_bytes, "net_tx_bytes",
				      (json_int_t)sample->system.net_tx_bytes, "procs_running",
				      (json_int_t)sample->system.procs_running, "open_fds",
				      (json_int_t)sample->system.open_fds));
}

static void cli_run_on_stop_signal(int signal_number)
{
	(void)signal_number;
	service_request_stop();
}

/* SIGUSR1 asks the run's services to stop gracefully (the daemon's POST .../stop sends it). */
static void cli_run_catch_stop_signal(void)
{
	struct sigaction action = { .sa_handler = cli_run_on_stop_signal, .sa_flags = SA_RESTART };

	sigset_t stop;

	sigemptyset(&action.sa_mask);
	sigaction(SERVICE_STOP_SIGNAL, &action, NULL);
	/* the daemon starts runs with it blocked, so a stop sent early waits for the handler */
	sigemptyset(&stop);
	sigaddset(&stop, SERVICE_STOP_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
}

static int cli_run_print_report(const struct cli_globals *globals,
				const struct run_report *report)
{
	json_t *json;

	if (globals->output == CLI_OUTPUT_HUMAN) {
		run_report_print(report, stdout);
		return 0;
	}
	json = run_report_to_json(report);
	if (!json || json_dumpf(json, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0) {
		json_decref(json);
		fprintf(stderr, "voidbox run: out of memory printing the report\n");
		return -ENOMEM;
	}
	fputc('\n', stdout);
	json_decref(json);
	return 0;
}

/* The options of an agent or pipeline run, from the same flags as a workflow's. */
static void cli_run_agent_options(const struct cli_run_args *args, struct agent_options *out)
{
	memset(out, 0, sizeof(*out));
	out->input = args->workflow.input;
	out->input_len = args->workflow.input_len;
	out->override_mode = args->workflow.override_mode;
	out->mode = args->workflow.mode;
	out->serial_log_path = args->workflow.serial_log_path;
	out->host = cli_host_settings();
	out->default_timeout_secs = args->workflow.default_timeout_secs;
	out->host_env = host_env_lookup;
	/* set by `voidbox serve` for the runs it starts (docs/messaging.md) */
	out->messaging.run_id = getenv(CLI_RUN_ID_ENV);
	out->messaging.control_path = getenv(CLI_SIDECAR_CONTROL_ENV);
}

/* Checks spec for its kind; prints the errors with their positions. True when it can run. */
static bool cli_run_check(const struct spec *spec, struct run_report *report)
{
	struct spec_diagnostics diag;
	size_t errors = 0;

	spec_diagnostics_init(&diag);
	switch (spec->kind) {
	case SPEC_KIND_WORKFLOW:
		errors = workflow_check(spec, &diag);
		break;
	case SPEC_KIND_AGENT:
		errors = agent_check(spec, &diag);
		break;
	case SPEC_KIND_PIPELINE:
		errors = pipeline_check(spec, &diag);
		break;
	case SPEC_KIND_SANDBOX:
		errors = spec_check_supported(spec, CLI_RUN_SANDBOX_FEATURES, &diag);
		break;
	}
	if (errors > 0) {
		spec_diagnostics_print(&diag, stderr);
		run_report_set_error(report,
				     "this spec uses features the runtime does not run yet (see the errors above)");
	}
	spec_diagnostics_free(&diag);
	return errors == 0;
}

/* Runs `echo ready` in the box as the report's one stage. True when it printed. */
static bool cli_run_sandbox_ready(struct box *box, struct run_report *report)
{
	struct box_exec_request req = { .program = "echo", .args = cli_run_ready_args,
					.arg_count = 1 };
	struct box_exec_result result;
	struct run_stage *stage = run_report_add_stage(report, "ready");
	bool ok;

	if (!stage) {
		run_report_set_error(report, "out of memory");
		return false;
	}
	box_exec(box, &req, &result);
	stage->ran = true;
	stage->exit_code = result.exit_code;
	stage->duration_ms = result.duration_ms;
	ok = result.exit_code == 0 && !result.error;
	stage->success = ok;
	stage->is_error = !ok;
	run_stage_set_output(stage, result.stdout_data, result.stdout_len);
	run_report_set_output(report, result.stdout_data, result.stdout_len);
	if (!ok)
		run_report_set_error(report, "the sandbox did not run `echo ready`: %s",
				     result.error ? result.error : result.stderr_data);
	box_exec_result_free(&result);
	return ok;
}

/* kind sandbox: boot, `echo ready`, wait for SIGINT or SIGTERM, stop. */
static void cli_run_sandbox(const struct spec *spec, const struct cli_run_args *args,
			    struct stop_signals *signals, struct run_report *report)
{
	char err[CLI_RUN_ERROR_MAX];
	struct box_config cfg;
	struct box *box = NULL;

	box_config_from_spec(&cfg, spec, NULL);
	if (args->workflow.override_mode)
		cfg.mode = args->workflow.mode;
	cfg.serial_log_path = args->workflow.serial_log_path;
	cfg.host = cli_host_settings();
	if (box_open(&cfg, &box, err, sizeof(err)) < 0) {
		run_report_set_error(report, "%s", err);
		goto out;
	}
	run_report_set_sandbox_mode(report, box_mode_name(box_mode(box)));
	if (cli_run_sandbox_ready(box, report)) {
		fprintf(stderr, "voidbox run: sandbox \"%s\" is ready (%s); press Ctrl-C to stop it\n",
			spec->name, box_mode_name(box_mode(box)));
		fflush(stderr);
		stop_signals_wait(signals);
		report->success = true;
	}
out:
	box_close(box, !report->success);
}

/* The signals' target: every box of the run (box_cancel_all). */
static void cli_run_cancel_boxes(void *opaque, bool force)
{
	(void)opaque;
	box_cancel_all(force);
}

/* The error of a run a signal cancelled; what failed because of it follows in brackets. */
static void cli_run_mark_cancelled(struct run_report *report, int signal_number)
{
	const char *name = stop_signals_name(signal_number);
	char *failure = report->error ? strdup(report->error) : NULL;

	if (failure)
		run_report_set_error(report, "the run was cancelled by %s; its sandboxes were shut "
				     "down (%s)", name, failure);
	else
		run_report_set_error(report, "the run was cancelled by %s; its sandboxes were shut "
				     "down", name);
	free(failure);
}

/* Runs a loaded spec into report, dispatching by kind. */
static void cli_run_dispatch(const struct spec *spec, const struct cli_run_args *args,
			     struct stop_signals *signals, struct run_report *report)
{
	struct pipeline_options pipeline;
	struct agent_options agent;

	if (!cli_run_check(spec, report))
		return;
	switch (spec->kind) {
	case SPEC_KIND_WORKFLOW: {
		struct workflow_options workflow = args->workflow;

		workflow.host = cli_host_settings();
		workflow_run(spec, &workflow, report);
		return;
	}
	case SPEC_KIND_AGENT:
		cli_run_agent_options(args, &agent);
		agent_run(spec, &agent, report);
		return;
	case SPEC_KIND_PIPELINE:
		memset(&pipeline, 0, sizeof(pipeline));
		cli_run_agent_options(args, &pipeline.agent);
		pipeline.max_parallel = cli_max_parallel_vms();
		pipeline_run(spec, &pipeline, report);
		return;
	case SPEC_KIND_SANDBOX:
		cli_run_sandbox(spec, args, signals, report);
		return;
	}
}

int cli_run_run(const struct cli_globals *globals, int argc, char **argv)
{
	static const struct run_observer observer = {
		.stage_started = cli_run_stage_started,
		.stage_output = cli_run_stage_output,
		.stage_finished = cli_run_stage_finished,
		.stage_output_ready = cli_run_stage_output_ready,
		.telemetry = cli_run_telemetry,
	};
	struct cli_run_args args = { .events_fd = -1 };
	struct cli_run_events events = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct run_observer bound_observer = observer;
	struct spec_diagnostics diag;
	struct stop_signals signals;
	struct run_report report;
	char *input_text = NULL;
	struct spec *spec;
	bool watching;
	int cancelled_by;
	int status;

	cli_run_catch_stop_signal();
	status = cli_run_parse(argc, argv, &args);
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	if (args.input_file && cli_run_read_input(&args, &input_text) != 0)
		return CLI_EXIT_FAILURE;
	if (args.daemon) {
		status = cli_run_submit(globals, args.daemon_url, args.file, args.workflow.input,
					args.run_id);
		free(input_text);
		return status;
	}
	spec_diagnostics_init(&diag);
	spec = cli_spec_load(args.file, &diag);
	if (diag.count)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	if (!spec) {
		fprintf(stderr, "voidbox run: %s is not a valid spec (fix the errors above)\n",
			args.file);
		free(input_text);
		return CLI_EXIT_FAILURE;
	}
	if (run_report_init(&report, spec->name, spec->kind) < 0) {
		spec_free(spec);
		free(input_text);
		fprintf(stderr, "voidbox run: out of memory\n");
		return CLI_EXIT_FAILURE;
	}
	if (args.events_fd >= 0) {
		events.fd = args.events_fd;
		bound_observer.opaque = &events;
		report.observer = &bound_observer;
	}
	status = stop_signals_start(&signals);
	watching = status == 0;
	if (status < 0) {
		run_report_set_error(&report, "cannot watch for SIGINT and SIGTERM (%s), so the run "
				     "could not be cancelled in order; nothing was started",
				     strerror(-status));
		cancelled_by = 0;
	} else {
		/* boxes opened later are refused or closed at once by the same cancel */
		stop_signals_set_target(&signals, cli_run_cancel_boxes, NULL);
		cli_run_dispatch(spec, &args, &signals, &report);
		cancelled_by = stop_signals_received(&signals);
	}
	if (cancelled_by && !report.success)
		cli_run_mark_cancelled(&report, cancelled_by);
	run_report_sum_usage(&report);
	if (args.events_fd >= 0)
		cli_run_finished(&events, &report);
	status = report.success ? CLI_EXIT_OK
		 : cancelled_by	? STOP_SIGNALS_EXIT_BASE + cancelled_by
				: CLI_EXIT_FAILURE;
	if (cli_run_print_report(globals, &report) < 0)
		status = CLI_EXIT_FAILURE;
	if (!report.success && globals->output == CLI_OUTPUT_JSON && report.error)
		fprintf(stderr, "voidbox run: %s\n", report.error);
	/*
	 * Only now: a daemon's cancel that comes as the run ends still gets the report (every box
	 * is closed, so the cancel finds nothing to stop); a second signal ends the process.
	 */
	if (watching)
		stop_signals_stop(&signals);
	run_report_free(&report);
	spec_free(spec);
	free(input_text);
	return status;
}
