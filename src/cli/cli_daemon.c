/*
 * The daemon's commands: `voidbox serve` starts it; `status`, `logs`, `cancel`, `stop` and `run
 * --daemon` (cli_run_submit) are its clients. Clients find the daemon with --daemon URL,
 * else $VOIDBOX_DAEMON, else the default per-user socket; a TCP daemon's token comes from
 * --token-file, else $VOIDBOX_DAEMON_TOKEN_FILE, else the default token file. A response
 * that is an error prints the daemon's own message (its {code, message} shape) and exits 1.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "daemon/client.h"
#include "daemon/daemon.h"
#include "store/snapshot_store.h"

#define CLI_DAEMON_ERROR_MAX 1024
#define CLI_DAEMON_PATH_MAX 4096
#define CLI_DAEMON_HTTP_OK 200
#define CLI_DAEMON_HTTP_ERROR 400
#define CLI_DAEMON_URL_ENV "VOIDBOX_DAEMON"
#define CLI_DAEMON_TOKEN_ENV "VOIDBOX_DAEMON_TOKEN_FILE"
#define CLI_DAEMON_SSE_DATA "data: "
#define CLI_DAEMON_SSE_LINE_MAX (16u * 1024u * 1024u)
#define CLI_DAEMON_MS_PER_SEC 1000

enum cli_daemon_option {
	CLI_DAEMON_OPT_LISTEN = 1000,
	CLI_DAEMON_OPT_TOKEN_FILE,
	CLI_DAEMON_OPT_STATE_DIR,
	CLI_DAEMON_OPT_DAEMON,
	CLI_DAEMON_OPT_RUN_ID,
	CLI_DAEMON_OPT_FOLLOW,
	CLI_DAEMON_OPT_REASON,
	CLI_DAEMON_OPT_STATE,
	CLI_DAEMON_OPT_MAX_RUN_LOG,
	CLI_DAEMON_OPT_HELP,
};

static const struct option cli_daemon_options[] = {
	{ "listen", required_argument, NULL, CLI_DAEMON_OPT_LISTEN },
	{ "token-file", required_argument, NULL, CLI_DAEMON_OPT_TOKEN_FILE },
	{ "state-dir", required_argument, NULL, CLI_DAEMON_OPT_STATE_DIR },
	{ "daemon", required_argument, NULL, CLI_DAEMON_OPT_DAEMON },
	{ "run-id", required_argument, NULL, CLI_DAEMON_OPT_RUN_ID },
	{ "follow", no_argument, NULL, CLI_DAEMON_OPT_FOLLOW },
	{ "reason", required_argument, NULL, CLI_DAEMON_OPT_REASON },
	{ "state", required_argument, NULL, CLI_DAEMON_OPT_STATE },
	{ "max-run-log", required_argument, NULL, CLI_DAEMON_OPT_MAX_RUN_LOG },
	{ "help", no_argument, NULL, CLI_DAEMON_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

/* Every daemon command's flags; each command accepts the subset its usage names. */
struct cli_daemon_args {
	const char *command;
	const char *usage;
	const char *listen;
	const char *token_file;
	const char *state_dir;
	const char *daemon;
	const char *run_id;
	const char *reason;
	const char *state;
	const char *max_run_log;
	bool follow;
};

/* A line-buffered reader of the SSE stream for `logs --follow`. */
struct cli_daemon_follow {
	const struct cli_globals *globals;
	char *line;
	size_t len;
	bool closed; /* log.closed seen */
};

/* Returns 0 to go on, -1 after --help, or a usage exit status. */
static int cli_daemon_parse(int argc, char **argv, struct cli_daemon_args *args,
			    const char *allowed)
{
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "", cli_daemon_options, NULL)) != -1) {
		const char *name = NULL;

		for (size_t i = 0; cli_daemon_options[i].name; i++)
			if (cli_daemon_options[i].val == option)
				name = cli_daemon_options[i].name;
		if (option == CLI_DAEMON_OPT_HELP) {
			printf("%s", args->usage);
			return -1;
		}
		if (!name || !strstr(allowed, name)) {
			fprintf(stderr, "%s", args->usage);
			return CLI_EXIT_USAGE;
		}
		switch (option) {
		case CLI_DAEMON_OPT_LISTEN: args->listen = optarg; break;
		case CLI_DAEMON_OPT_TOKEN_FILE: args->token_file = optarg; break;
		case CLI_DAEMON_OPT_STATE_DIR: args->state_dir = optarg; break;
		case CLI_DAEMON_OPT_DAEMON: args->daemon = optarg; break;
		case CLI_DAEMON_OPT_RUN_ID: args->run_id = optarg; break;
		case CLI_DAEMON_OPT_REASON: args->reason = optarg; break;
		case CLI_DAEMON_OPT_STATE: args->state = optarg; break;
		case CLI_DAEMON_OPT_MAX_RUN_LOG: args->max_run_log = optarg; break;
		case CLI_DAEMON_OPT_FOLLOW: args->follow = true; break;
		default: break;
		}
	}
	if (optind < argc && !args->run_id && strstr(allowed, "run-id"))
		args->run_id = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "voidbox %s: unexpected argument '%s' (see voidbox %s --help)\n",
			args->command, argv[optind], args->command);
		return CLI_EXIT_USAGE;
	}
	return 0;
}

static int cli_daemon_client(const char *command, const char *url, const char *token_file,
			     struct daemon_client *client)
{
	char err[CLI_DAEMON_ERROR_MAX];

	if (!url)
		url = getenv(CLI_DAEMON_URL_ENV);
	if (!token_file)
		token_file = getenv(CLI_DAEMON_TOKEN_ENV);
	if (daemon_client_init(client, url, token_file, cli_daemon_env(), err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		return CLI_EXIT_USAGE;
	}
	return 0;
}

/* Prints an error response's message; true when the response is a success. */
static bool cli_daemon_ok(const char *command, const struct daemon_response *response)
{
	json_t *body;

	if (response->status >= CLI_DAEMON_HTTP_OK && response->status < CLI_DAEMON_HTTP_ERROR)
		return true;
	body = json_loads(response->body, 0, NULL);
	fprintf(stderr, "voidbox %s: the daemon answered %ld %s: %s\n", command, response->status,
		json_string_value(json_object_get(body, "code")) ?: "",
		json_string_value(json_object_get(body, "message")) ?: response->body);
	json_decref(body);
	return false;
}

/* One request; prints and returns the parsed body, or NULL after printing the failure. */
static json_t *cli_daemon_call(const char *command, const struct daemon_client *client,
			       const char *method, const char *path, const char *body)
{
	struct daemon_response response;
	char err[CLI_DAEMON_ERROR_MAX];
	json_t *parsed = NULL;

	if (daemon_client_request(client, method, path, body, &response, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		return NULL;
	}
	if (cli_daemon_ok(command, &response)) {
		parsed = json_loads(response.body, JSON_DECODE_ANY, NULL);
		if (!parsed)
			fprintf(stderr, "voidbox %s: the daemon's answer is not JSON\n", command);
	}
	daemon_response_free(&response);
	return parsed;
}

/* POSTs request (stolen) as JSON; the parsed answer, or NULL after printing the failure. */
static json_t *cli_daemon_post(const char *command, const struct daemon_client *client,
			       const char *path, json_t *request)
{
	char *text = request ? json_dumps(request, JSON_COMPACT) : NULL;
	json_t *answer = NULL;

	json_decref(request);
	if (text)
		answer = cli_daemon_call(command, client, "POST", path, text);
	else
		fprintf(stderr, "voidbox %s: out of memory\n", command);
	free(text);
	return answer;
}

/*
 * A client command's start: its flags (allowed names them), the run id when it needs one, and
 * its daemon. 0 to go on, -1 after --help, or an exit status.
 */
static int cli_daemon_begin(int argc, char **argv, struct cli_daemon_args *args,
			    const char *allowed, bool needs_run_id, struct daemon_client *client)
{
	int status = cli_daemon_parse(argc, argv, args, allowed);

	if (status != 0)
		return status;
	if (needs_run_id && !args->run_id) {
		fprintf(stderr, "%s", args->usage);
		return CLI_EXIT_USAGE;
	}
	return cli_daemon_client(args->command, args->daemon, args->token_file, client);
}

static void cli_daemon_print_json(const json_t *value)
{
	json_dumpf(value, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

/* ---- serve ---- */

static const char cli_serve_usage[] =
	"usage: voidbox serve [--listen unix:///PATH|tcp://HOST:PORT] [--token-file FILE]\n"
	"                     [--state-dir DIR] [--max-run-log SIZE]\n\n"
	"Runs the run daemon (docs/daemon.md) until SIGINT or SIGTERM.\n\n"
	"  --listen ADDR      default: unix://$XDG_RUNTIME_DIR/voidbox.sock (or\n"
	"                     /tmp/voidbox-$UID.sock), mode 0600; tcp:// needs a bearer token\n"
	"  --token-file FILE  the TCP token (mode 0600; created with a random token if absent;\n"
	"                     default $XDG_CONFIG_HOME/voidbox/daemon-token)\n"
	"  --state-dir DIR    the run store (default $VOIDBOX_STATE_DIR or ~/.local/state/voidbox)\n"
	"  --max-run-log SIZE what one run's log lines may take in the store (512K, 64M,\n"
	"                     1G; default 64M); past it one log.truncated event, no more lines\n";

int cli_serve_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_daemon_args args = { .command = "serve", .usage = cli_serve_usage };
	struct daemon_config config = { 0 };
	char err[CLI_DAEMON_ERROR_MAX], exe[PATH_MAX];
	ssize_t exe_len;
	int status;

	status = cli_daemon_parse(argc, argv, &args, "listen token-file state-dir max-run-log");
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	if (args.max_run_log && (!snapshot_store_parse_size(args.max_run_log,
							    &config.run_log_max_bytes) ||
				 config.run_log_max_bytes == 0)) {
		fprintf(stderr, "voidbox serve: --max-run-log takes a size such as 512K, 64M or 1G, "
			"not '%s'\n", args.max_run_log);
		return CLI_EXIT_USAGE;
	}
	config.env = cli_daemon_env();
	if (daemon_address_parse(args.listen, config.env, &config.address, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox serve: %s\n", err);
		return CLI_EXIT_USAGE;
	}
	exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (exe_len < 0) {
		fprintf(stderr, "voidbox serve: cannot find its own binary: %s\n", strerror(errno));
		return CLI_EXIT_FAILURE;
	}
	exe[exe_len] = '\0';
	config.voidbox_exe = exe;
	config.token_file = args.token_file;
	config.state_dir = args.state_dir;
	if (daemon_serve(&config, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox serve: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	return CLI_EXIT_OK;
}

/* ---- status ---- */

static const char cli_status_usage[] =
	"usage: voidbox status [RUN_ID] [--state active|terminal|STATE] [--daemon URL]\n"
	"                      [--token-file FILE]\n\n"
	"Shows one run of the daemon, or lists its runs.\n";

static void cli_status_print_run(const json_t *run)
{
	const char *error = json_string_value(json_object_get(run, "error"));

	printf("%-40s %-10s %s%s%s\n", json_string_value(json_object_get(run, "id")),
	       json_string_value(json_object_get(run, "status")),
	       json_string_value(json_object_get(run, "file")), error ? "  error: " : "",
	       error ? error : "");
}

static void cli_status_print_stages(const json_t *run)
{
	json_t *states = json_object_get(run, "stage_states");
	const char *name;
	json_t *state;

	json_object_foreach(states, name, state)
		printf("  stage %-30s %s\n", name,
		       json_string_value(json_object_get(state, "status")));
}

int cli_status_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_daemon_args args = { .command = "status", .usage = cli_status_usage };
	char path[CLI_DAEMON_PATH_MAX];
	struct daemon_client client;
	json_t *body, *run;
	size_t i;
	int status;

	status = cli_daemon_begin(argc, argv, &args, "daemon token-file run-id state", false,
				  &client);
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	if (args.run_id)
		snprintf(path, sizeof(path), "/v1/runs/%s", args.run_id);
	else
		snprintf(path, sizeof(path), "/v1/runs%s%s", args.state ? "?state=" : "",
			 args.state ? args.state : "");
	body = cli_daemon_call("status", &client, "GET", path, NULL);
	if (!body)
		return CLI_EXIT_FAILURE;
	if (globals->output == CLI_OUTPUT_JSON) {
		cli_daemon_print_json(body);
	} else if (args.run_id) {
		cli_status_print_run(body);
		cli_status_print_stages(body);
	} else {
		json_array_foreach(json_object_get(body, "runs"), i, run)
			cli_status_print_run(run);
	}
	json_decref(body);
	return CLI_EXIT_OK;
}

/* ---- logs ---- */

static const char cli_logs_usage[] =
	"usage: voidbox logs RUN_ID [--follow] [--daemon URL] [--token-file FILE]\n\n"
	"Prints a run's events; --follow keeps printing them as they come until the run ends.\n";

static void cli_logs_print_event(const struct cli_globals *globals, const json_t *event)
{
	const char *type = json_string_value(json_object_get(event, "event_type"));
	const char *stage = json_string_value(json_object_get(event, "stage_name"));
	json_int_t ts = json_integer_value(json_object_get(event, "ts_ms"));
	time_t secs = (time_t)(ts / CLI_DAEMON_MS_PER_SEC);
	char when[32];
	struct tm tm;

	if (globals->output == CLI_OUTPUT_JSON) {
		json_dumpf(event, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		fflush(stdout);
		return;
	}
	gmtime_r(&secs, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	if (type && strcmp(type, "log.chunk") == 0)
		printf("%s %s%s%s\n", when, stage ? stage : "", stage ? ": " : "",
		       json_string_value(json_object_get(event, "message")));
	else
		printf("%s [%s]%s%s %s\n", when, type ? type : "?", stage ? " " : "",
		       stage ? stage : "", json_string_value(json_object_get(event, "message")));
	fflush(stdout);
}

/* An SSE line: "data: {event}" lines are events; ids, names and comments are skipped. */
static void cli_logs_follow_line(struct cli_daemon_follow *follow, const char *line)
{
	json_t *event;

	if (strncmp(line, CLI_DAEMON_SSE_DATA, strlen(CLI_DAEMON_SSE_DATA)) != 0)
		return;
	event = json_loads(line + strlen(CLI_DAEMON_SSE_DATA), 0, NULL);
	if (!event)
		return;
	cli_logs_print_event(follow->globals, event);
	if (json_string_value(json_object_get(event, "event_type")) &&
	    strcmp(json_string_value(json_object_get(event, "event_type")), "log.closed") == 0)
		follow->closed = true;
	json_decref(event);
}

static bool cli_logs_follow_data(const char *data, size_t len, void *opaque)
{
	struct cli_daemon_follow *follow = opaque;
	char *grown;
	char *newline;

	if (follow->len + len > CLI_DAEMON_SSE_LINE_MAX)
		return false;
	grown = realloc(follow->line, follow->len + len + 1);
	if (!grown)
		return false;
	follow->line = grown;
	memcpy(follow->line + follow->len, data, len);
	follow->len += len;
	follow->line[follow->len] = '\0';
	while ((newline = memchr(follow->line, '\n', follow->len))) {
		size_t consumed = (size_t)(newline - follow->line) + 1;

		*newline = '\0';
		cli_logs_follow_line(follow, follow->line);
		memmove(follow->line, follow->line + consumed, follow->len - consumed);
		follow->len -= consumed;
		follow->line[follow->len] = '\0';
	}
	return true;
}

static int cli_logs_follow(const struct cli_globals *globals, const struct daemon_client *client,
			   const char *run_id)
{
	struct cli_daemon_follow follow = { .globals = globals };
	char path[CLI_DAEMON_PATH_MAX], err[CLI_DAEMON_ERROR_MAX];
	long http_status;
	int rc;

	snprintf(path, sizeof(path), "/v1/runs/%s/events/stream", run_id);
	rc = daemon_client_stream(client, path, cli_logs_follow_data, &follow, &http_status, err,
				  sizeof(err));
	free(follow.line);
	if (rc < 0) {
		fprintf(stderr, "voidbox logs: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	if (http_status != CLI_DAEMON_HTTP_OK) {
		fprintf(stderr, "voidbox logs: the daemon answered %ld (is %s a run id? see voidbox status)\n",
			http_status, run_id);
		return CLI_EXIT_FAILURE;
	}
	return follow.closed ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

int cli_logs_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_daemon_args args = { .command = "logs", .usage = cli_logs_usage };
	char path[CLI_DAEMON_PATH_MAX];
	struct daemon_client client;
	json_t *events, *event;
	size_t i;
	int status;

	status = cli_daemon_begin(argc, argv, &args, "daemon token-file run-id follow", true,
				  &client);
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	if (args.follow)
		return cli_logs_follow(globals, &client, args.run_id);
	snprintf(path, sizeof(path), "/v1/runs/%s/events", args.run_id);
	events = cli_daemon_call("logs", &client, "GET", path, NULL);
	if (!events)
		return CLI_EXIT_FAILURE;
	json_array_foreach(events, i, event)
		cli_logs_print_event(globals, event);
	json_decref(events);
	return CLI_EXIT_OK;
}

/* ---- cancel ---- */

static const char cli_cancel_usage[] =
	"usage: voidbox cancel RUN_ID [--reason TEXT] [--daemon URL] [--token-file FILE]\n\n"
	"Cancels a run: its VMs are stopped (SIGTERM, then SIGKILL after the run's grace period)\n"
	"and the command returns once the run has ended. Cancelling an ended run changes nothing.\n";

static const char cli_stop_usage[] =
	"usage: voidbox stop RUN_ID [--reason TEXT] [--daemon URL] [--token-file FILE]\n\n"
	"Stops a run gracefully: its mode: service programs get SIGTERM and end on their own terms\n"
	"(their exit codes decide the run's state); a run still going after its grace period is\n"
	"cancelled. Returns once the run has ended. Stopping an ended run changes nothing.\n";

/* cancel and stop: POST /v1/runs/{id}/<command> with {reason?}, then print the state. */
static int cli_end_run(const struct cli_globals *globals, int argc, char **argv,
		       const char *command, const char *usage)
{
	struct cli_daemon_args args = { .command = command, .usage = usage };
	char path[CLI_DAEMON_PATH_MAX];
	struct daemon_client client;
	json_t *body;
	int status;

	status = cli_daemon_begin(argc, argv, &args, "daemon token-file run-id reason", true,
				  &client);
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	snprintf(path, sizeof(path), "/v1/runs/%s/%s", args.run_id, command);
	body = cli_daemon_post(command, &client, path,
			       args.reason ? json_pack("{s:s}", "reason", args.reason) :
					     json_object());
	if (!body)
		return CLI_EXIT_FAILURE;
	if (globals->output == CLI_OUTPUT_JSON)
		cli_daemon_print_json(body);
	else
		printf("run %s is %s\n", args.run_id,
		       json_string_value(json_object_get(body, "state")));
	json_decref(body);
	return CLI_EXIT_OK;
}

int cli_cancel_run(const struct cli_globals *globals, int argc, char **argv)
{
	return cli_end_run(globals, argc, argv, "cancel", cli_cancel_usage);
}

int cli_stop_run(const struct cli_globals *globals, int argc, char **argv)
{
	return cli_end_run(globals, argc, argv, "stop", cli_stop_usage);
}

/* ---- run --daemon ---- */

int cli_run_submit(const struct cli_globals *globals, const char *url, const char *file,
		   const char *input, const char *run_id)
{
	char absolute[PATH_MAX];
	struct daemon_client client;
	json_t *body;
	int status;

	if (!realpath(file, absolute)) {
		fprintf(stderr, "voidbox run: cannot find %s: %s\n", file, strerror(errno));
		return CLI_EXIT_FAILURE;
	}
	status = cli_daemon_client("run", url, NULL, &client);
	if (status != 0)
		return status;
	body = cli_daemon_post("run", &client, "/v1/runs",
			       json_pack("{s:s, s:s?, s:s?}", "file", absolute, "input", input,
					 "run_id", run_id));
	if (!body)
		return CLI_EXIT_FAILURE;
	if (globals->output == CLI_OUTPUT_JSON)
		cli_daemon_print_json(body);
	else
		printf("run %s submitted (%s); follow it with: voidbox logs %s --follow\n",
		       json_string_value(json_object_get(body, "run_id")),
		       json_string_value(json_object_get(body, "state")),
		       json_string_value(json_object_get(body, "run_id")));
	json_decref(body);
	return CLI_EXIT_OK;
}
