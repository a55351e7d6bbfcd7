/*
 * The daemon's contract, as a client sees it: the built voidbox (argv[1]) is started as
 * `voidbox serve` on a temporary unix socket and on 127.0.0.1 with a random port (the daemon
 * prints the port it bound), and spoken to through the daemon's own libcurl client. Every run
 * is a `mode: mock` workflow, so no VM boots; a long `sleep` step stands for a run that is
 * still going. Checks cover the API's shapes (errors, idempotent create and cancel, event
 * order and the live SSE stream), the socket's mode, the bearer token on TCP, and what
 * survives a SIGKILL of the daemon: the run store, the failed-on-restart runs, and no run
 * process left behind. Waits are bounded loops that fail rather than hang; nothing is timed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/loopback_claim.h"
#include "harness.h"
#include "daemon/client.h"
#include "daemon/daemon_internal.h"
#include "daemon/serve_harness.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 1024
#define TEST_BIG_BODY (DAEMON_REQUEST_MAX_BYTES + 1024u)
#define TEST_SSE_MAX (1024u * 1024u)
#define TEST_FILE_MODE_MASK 0777
#define TEST_OWNER_ONLY 0600
#define TEST_WIDE_MODE 0644
#define TEST_ENV_MAX (256u * 1024u)
#define TEST_PARALLEL 3
#define TEST_PARALLEL_TEXT "3"
/* a child's exit status for a scenario that needs a mount namespace this host does not give */
#define TEST_FULL_NOT_RUN 77
#define TEST_SMALL_TMPFS "size=2m"
#define TEST_FILL_CHUNK 4096
#define TEST_TOKEN_HEX_LEN 64
#define TEST_LOG_MAX (64u * 1024u)

static const char *voidbox_path;
static char temp_dir[] = "/tmp/voidbox-daemon-test-XXXXXX";
static char state_dir[TEST_PATH_MAX];
static char socket_path[TEST_PATH_MAX / 2];
static char quick_spec[TEST_PATH_MAX];
static char sleep_spec[TEST_PATH_MAX];
static char cat_spec[TEST_PATH_MAX];
static char service_spec[TEST_PATH_MAX];
static char failing_service_spec[TEST_PATH_MAX];
static char agent_spec[TEST_PATH_MAX];
static char nap_spec[TEST_PATH_MAX];

static const char quick_yaml[] =
	"api_version: v1\nkind: workflow\nname: quick\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n"
	"    - name: fetch\n      run:\n        program: echo\n        args: [\"hello daemon\"]\n"
	"    - name: shout\n      depends_on: [fetch]\n      run:\n        program: tr\n"
	"        args: [\"a-z\", \"A-Z\"]\n        stdin_from: fetch\n"
	"  output_step: shout\n";

static const char cat_yaml[] =
	"api_version: v1\nkind: workflow\nname: cat\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n    - name: echo-input\n      run:\n        program: cat\n";

static const char sleep_yaml[] =
	"api_version: v1\nkind: workflow\nname: sleeper\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n"
	"    - name: first\n      run:\n        program: echo\n        args: [\"going\"]\n"
	"    - name: nap\n      depends_on: [first]\n      run:\n        program: sleep\n"
	"        args: [\"3000\"]\n"
	"    - name: after\n      depends_on: [nap]\n      run:\n        program: echo\n"
	"        args: [\"never\"]\n";

/* A service that publishes its output file, then stays up until it is stopped. */
static const char service_yaml[] =
	"api_version: v1\nkind: workflow\nname: service\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n"
	"    - name: web\n      mode: service\n      output_file: /workspace/ready.json\n"
	"      run:\n        program: mock-serve\n"
	"        args: [\"/workspace/ready.json\", \"{\\\"port\\\":8080}\"]\n"
	"    - name: after\n      depends_on: [web]\n      run:\n        program: echo\n"
	"        args: [\"after the service\"]\n";

/* A run that is still going a moment after it starts, and then succeeds. */
static const char nap_yaml[] =
	"api_version: v1\nkind: workflow\nname: nap\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n"
	"    - name: first\n      run:\n        program: echo\n        args: [\"going\"]\n"
	"    - name: nap\n      depends_on: [first]\n      run:\n        program: sleep\n"
	"        args: [\"2\"]\n";

/* An agent in a mock box: the in-process stand-in answers with stream-json. */
static const char agent_yaml[] =
	"api_version: v1\nkind: agent\nname: helper\nsandbox:\n  mode: mock\n"
	"agent:\n  prompt: Say hello\n  skills: [\"agent:claude-code\"]\n";

/* A step that prints TEST_CHATTY_LINES lines: far more log than a 4 KiB cap keeps. */
static const char chatty_yaml_head[] =
	"api_version: v1\nkind: workflow\nname: chatty\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n    - name: count\n      run:\n        program: echo\n"
	"        args: [\"";
#define TEST_CHATTY_LINES 2000
#define TEST_CHATTY_LINE "a line of output\\n" /* each line, as YAML spells it */
#define TEST_CHATTY_LINE_LEN 17u		     /* as the step prints it */

/*
 * A step that prints TEST_WIDE_BYTES, then TEST_WIDE_COPIES steps that each pass it on: the
 * run's report holds the text once per stage and once as the run's output, well over the
 * daemon's 16 MiB.
 */
static const char wide_yaml_head[] =
	"api_version: v1\nkind: workflow\nname: wide\nsandbox:\n  mode: mock\n"
	"workflow:\n  output_step: copy-5\n  steps:\n"
	"    - name: say\n      run:\n        program: echo\n        args: [\"";
#define TEST_WIDE_BYTES (3u * 1024u * 1024u) /* echo's argument; it prints a newline after */
#define TEST_WIDE_COPIES 5
#define TEST_NAME_MAX 16
#define TEST_REPORT_CUT_OUTPUT (1024u * 1024u) /* what the daemon keeps of a cut output */

/* A service that exits with status 3 on its own. */
static const char failing_service_yaml[] =
	"api_version: v1\nkind: workflow\nname: broken-service\nsandbox:\n  mode: mock\n"
	"workflow:\n  steps:\n"
	"    - name: web\n      mode: service\n      run:\n        program: mock-exit\n"
	"        args: [\"3\", \"cannot bind\"]\n";

static void write_file(const char *path, const char *text)
{
	FILE *file = fopen(path, "w");

	if (!file)
		harness_fail_setup("cannot write a spec into the temporary directory");
	fputs(text, file);
	fclose(file);
}

/* An error response: the status and the one shape {code, message, retryable}. */
static void check_error(const struct served *served, const char *method, const char *path,
			const char *body, long expected_status, const char *expected_code)
{
	long status;
	json_t *error = call(served, method, path, body, &status);

	CHECK_INT_EQ(status, expected_status);
	CHECK(json_is_object(error));
	CHECK_STR_EQ(json_string_value(json_object_get(error, "code")), expected_code);
	CHECK(json_is_string(json_object_get(error, "message")));
	CHECK(json_is_boolean(json_object_get(error, "retryable")));
	CHECK_INT_EQ(json_object_size(error), 3);
	json_decref(error);
}

/* ---- pure request parsing ---- */

static int parse_create(const char *body, struct daemon_create_request *req,
			struct daemon_error *err)
{
	return daemon_request_parse_create(body, strlen(body), req, err);
}

static void test_request_parsing(void)
{
	struct daemon_create_request req;
	struct daemon_route_match match;
	struct daemon_error err;
	uint64_t event_id;
	char *reason;

	CHECK_INT_EQ(daemon_route_parse("/v1/runs/r-1/stages/s.x/artifacts/out", &match),
		     DAEMON_ROUTE_RUN_ARTIFACT);
	CHECK_STR_EQ(match.run_id, "r-1");
	CHECK_STR_EQ(match.stage, "s.x");
	CHECK_STR_EQ(match.artifact, "out");
	CHECK_INT_EQ(daemon_route_parse("/v1/runs/../cancel", &match), DAEMON_ROUTE_NONE);
	CHECK_INT_EQ(daemon_route_parse("/v1/runs//events", &match), DAEMON_ROUTE_NONE);
	CHECK_INT_EQ(daemon_route_parse("/v1/runs/a/events/stream", &match),
		     DAEMON_ROUTE_RUN_EVENTS_STREAM);
	CHECK_INT_EQ(daemon_route_parse("/v2/health", &match), DAEMON_ROUTE_NONE);
	CHECK_INT_EQ(parse_create("{\"spec\":\"x\",\"file\":\"/y\"}", &req, &err), -1);
	CHECK_INT_EQ(err.code, DAEMON_ERR_INVALID_SPEC);
	CHECK_INT_EQ(parse_create("{\"file\":\"rel.yaml\"}", &req, &err), -1);
	CHECK_INT_EQ(parse_create("{\"file\":\"/a\",\"policy\":{\"stage_timeout_secs\":0}}", &req, &err), -1);
	CHECK_INT_EQ(err.code, DAEMON_ERR_INVALID_POLICY);
	CHECK_INT_EQ(parse_create("{\"file\":\"/a\",\"run_id\":\"a/b\"}", &req, &err), -1);
	CHECK_INT_EQ(err.code, DAEMON_ERR_INVALID_PARAMS);
	CHECK_INT_EQ(parse_create("{\"spec\":\"kind: x\",\"run_id\":\"ok-1\",\"policy\":{\"max_stage_retries\":2}}", &req, &err), 0);
	CHECK_STR_EQ(req.run_id, "ok-1");
	CHECK_INT_EQ(req.policy.max_stage_retries, 2);
	CHECK_INT_EQ(req.policy.cancel_grace_period_secs, DAEMON_POLICY_DEFAULT_GRACE);
	daemon_create_request_free(&req);
	CHECK_INT_EQ(daemon_request_parse_event_id("12", &event_id, &err), 0);
	CHECK_INT_EQ(event_id, 12);
	CHECK_INT_EQ(daemon_request_parse_event_id("-1", &event_id, &err), -1);
	CHECK_INT_EQ(daemon_request_parse_event_id("1x", &event_id, &err), -1);
	CHECK_INT_EQ(daemon_request_parse_cancel("", 0, &reason, &err), 0);
	CHECK(reason == NULL);
	CHECK_INT_EQ(daemon_request_parse_cancel("[1]", 3, &reason, &err), -1);
	CHECK(daemon_request_token_matches("Bearer abc", "abc"));
	CHECK(!daemon_request_token_matches("Bearer abcd", "abc"));
	CHECK(!daemon_request_token_matches("Bearer ab", "abc"));
	CHECK(!daemon_request_token_matches("abc", "abc"));
	CHECK(!daemon_request_token_matches(NULL, "abc"));
}

/* ---- over the unix socket ---- */

static struct served unix_daemon;
static struct served tcp_daemon;

/*
 * The listener the contract checks speak to, and the prefix of their run ids: they run once
 * over the unix socket and again over TCP (test_contract_over_tcp) against the same store.
 */
static const struct served *contract = &unix_daemon;
static const char *contract_prefix = "";

#define TEST_NAME_RING 8

/* base with the pass's prefix, in one of a ring of buffers (a call may use a few at once). */
static const char *cid(const char *base)
{
	static char ring[TEST_NAME_RING][TEST_PATH_MAX];
	static unsigned next;
	char *out = ring[next++ % TEST_NAME_RING];

	snprintf(out, TEST_PATH_MAX, "%s%s", contract_prefix, base);
	return out;
}

/* "/v1/runs/<prefixed base><rest>" */
static const char *cpath(const char *base, const char *rest)
{
	static char ring[TEST_NAME_RING][TEST_PATH_MAX];
	static unsigned next;
	char *out = ring[next++ % TEST_NAME_RING];

	snprintf(out, TEST_PATH_MAX, "/v1/runs/%s%s%s", contract_prefix, base, rest);
	return out;
}

static void test_unix_socket_mode(void)
{
	struct stat st;
	long status;
	json_t *health;

	CHECK_INT_EQ(stat(socket_path, &st), 0);
	CHECK(S_ISSOCK(st.st_mode));
	CHECK_INT_EQ(st.st_mode & TEST_FILE_MODE_MASK, TEST_OWNER_ONLY);
	health = call(&unix_daemon, "GET", "/v1/health", NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(health, "status")), "ok");
	CHECK_STR_EQ(json_string_value(json_object_get(health, "persistence")), "sqlite");
	json_decref(health);
}

/* Event ids count from 1 without gaps; the order follows the run. */
static void test_event_order(void)
{
	static const char *const expected[] = {
		"run.started", "stage.queued", "stage.queued", "stage.started", "log.chunk",
		"stage.completed", "stage.started", "log.chunk", "stage.completed",
		"run.finished", "log.chunk", "log.closed",
	};
	char path[TEST_PATH_MAX];
	char *id = create_run(&unix_daemon, quick_spec, "order-1");
	json_t *run, *events, *later;
	long status;
	size_t count;

	if (!id)
		return;
	run = wait_terminal(&unix_daemon, id);
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(run, "report"), "output")),
		     "HELLO DAEMON\n");
	snprintf(path, sizeof(path), "/v1/runs/%s/events", id);
	events = call(&unix_daemon, "GET", path, NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	count = json_array_size(events);
	CHECK_INT_EQ(count, sizeof(expected) / sizeof(expected[0]));
	for (size_t i = 0; i < count && i < sizeof(expected) / sizeof(expected[0]); i++) {
		json_t *event = json_array_get(events, i);

		CHECK_INT_EQ(json_integer_value(json_object_get(event, "event_id")), i + 1);
		CHECK_STR_EQ(json_string_value(json_object_get(event, "event_type")), expected[i]);
	}
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(events, 3), "stage_name")),
		     "fetch");
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(events, 4), "message")),
		     "hello daemon");
	CHECK_INT_EQ(json_integer_value(json_object_get(run, "terminal_event_id")), 10);
	snprintf(path, sizeof(path), "/v1/runs/%s/events?from_event_id=9", id);
	later = call(&unix_daemon, "GET", path, NULL, &status);
	CHECK_INT_EQ(json_array_size(later), 3);
	CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(later, 0), "event_id")), 10);
	json_decref(later);
	json_decref(events);
	json_decref(run);
	free(id);
}

static void test_stage_outputs(void)
{
	struct daemon_response response;
	char err[TEST_ERR_MAX];
	json_t *stages;
	long status;

	CHECK_INT_EQ(daemon_client_request(&unix_daemon.client, "GET",
					   "/v1/runs/order-1/stages/shout/output-file", NULL,
					   &response, err, sizeof(err)), 0);
	CHECK_INT_EQ(response.status, SERVE_HTTP_OK);
	CHECK_STR_EQ(response.body, "HELLO DAEMON\n");
	daemon_response_free(&response);
	CHECK_INT_EQ(daemon_client_request(&unix_daemon.client, "GET",
					   "/v1/runs/order-1/stages/fetch/artifacts/output", NULL,
					   &response, err, sizeof(err)), 0);
	CHECK_STR_EQ(response.body, "hello daemon\n");
	daemon_response_free(&response);
	check_error(&unix_daemon, "GET", "/v1/runs/order-1/stages/nope/output-file", NULL, 404,
		    "STRUCTURED_OUTPUT_MISSING");
	check_error(&unix_daemon, "GET", "/v1/runs/order-1/stages/fetch/artifacts/nope", NULL, 404,
		    "ARTIFACT_NOT_FOUND");
	stages = call(&unix_daemon, "GET", "/v1/runs/order-1/stages", NULL, &status);
	CHECK_INT_EQ(json_array_size(stages), 2);
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 1), "stage_name")),
		     "shout");
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 1), "status")),
		     "succeeded");
	CHECK_STR_EQ(json_string_value(json_array_get(
			     json_object_get(json_array_get(stages, 1), "depends_on"), 0)),
		     "fetch");
	json_decref(stages);
}

static void test_error_shapes(void)
{
	char *big = malloc(TEST_BIG_BODY + 1);

	check_error(contract, "GET", "/v1/runs/no-such-run", NULL, 404, "NOT_FOUND");
	check_error(contract, "GET", "/v1/runs/no-such-run/events", NULL, 404, "NOT_FOUND");
	check_error(contract, "POST", "/v1/runs/no-such-run/cancel", "{}", 404, "NOT_FOUND");
	check_error(contract, "GET", "/v1/elsewhere", NULL, 404, "NOT_FOUND");
	check_error(contract, "DELETE", "/v1/runs", NULL, 405, "METHOD_NOT_ALLOWED");
	check_error(contract, "POST", "/v1/runs", "{not json", 400, "INVALID_SPEC");
	check_error(contract, "POST", "/v1/runs", "{\"spec\":\"kind: nonsense\"}", 400,
		    "INVALID_SPEC");
	check_error(contract, "POST", "/v1/runs",
		    "{\"spec\":\"x\",\"policy\":{\"max_parallel_microvms_per_run\":0}}", 400,
		    "INVALID_POLICY");
	check_error(contract, "GET", "/v1/runs/order-1/events?from_event_id=abc", NULL, 400,
		    "INVALID_PARAMS");
	check_error(contract, "GET", "/v1/runs?state=sideways", NULL, 400, "INVALID_PARAMS");
	if (!big) {
		CHECK(big != NULL);
		return;
	}
	memset(big, ' ', TEST_BIG_BODY);
	big[TEST_BIG_BODY] = '\0';
	check_error(contract, "POST", "/v1/runs", big, 413, "PAYLOAD_TOO_LARGE");
	free(big);
}

/* POSTs body (stolen) as a create, expects 200, and returns the run once it has ended. */
static json_t *create_and_finish(json_t *body, const char *run_id)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_t *answer;
	long status = 0;

	json_decref(body);
	answer = text ? call(contract, "POST", "/v1/runs", text, &status) : NULL;
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_decref(answer);
	free(text);
	return wait_terminal(contract, run_id);
}

/* An inline spec runs like a file; the list filter sees it. */
static void test_inline_spec_and_list(void)
{
	json_t *run, *list;
	long status;

	run = create_and_finish(json_pack("{s:s, s:s, s:s}", "spec", quick_yaml, "run_id",
					  "inline-1", "input", "ignored"),
				"inline-1");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "file")), "inline");
	json_decref(run);
	list = call(&unix_daemon, "GET", "/v1/runs?state=succeeded", NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK(json_array_size(json_object_get(list, "runs")) >= 2);
	json_decref(list);
	list = call(&unix_daemon, "GET", "/v1/runs?state=active", NULL, &status);
	CHECK_INT_EQ(json_array_size(json_object_get(list, "runs")), 0);
	json_decref(list);
}

/* input reaches a spec given by file the way --input does, through a file in the run's dir */
static void test_input_with_file_spec(void)
{
	json_t *run = create_and_finish(json_pack("{s:s, s:s, s:s}", "file", cat_spec, "run_id",
						  "input-1", "input", "piped in\n"),
					"input-1");

	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(run, "report"), "output")),
		     "piped in\n");
	json_decref(run);
}

/* What a live stream reader saw. */
struct stream_reader {
	const struct served *served;
	char path[TEST_PATH_MAX];
	char *text;
	size_t len;
	bool saw_nap_started;
	long status;
	pthread_mutex_t lock;
};

static bool stream_collect(const char *data, size_t len, void *opaque)
{
	struct stream_reader *reader = opaque;
	char *grown;

	if (reader->len + len > TEST_SSE_MAX)
		return false;
	pthread_mutex_lock(&reader->lock);
	grown = realloc(reader->text, reader->len + len + 1);
	if (grown) {
		reader->text = grown;
		memcpy(reader->text + reader->len, data, len);
		reader->len += len;
		reader->text[reader->len] = '\0';
		if (strstr(reader->text, "\"event_type\":\"stage.started\"") &&
		    strstr(reader->text, "\"stage_name\":\"nap\""))
			reader->saw_nap_started = true;
	}
	pthread_mutex_unlock(&reader->lock);
	return grown != NULL;
}

static void *stream_thread(void *opaque)
{
	struct stream_reader *reader = opaque;
	char err[TEST_ERR_MAX];

	daemon_client_stream(&reader->served->client, reader->path, stream_collect, reader,
			     &reader->status, err, sizeof(err));
	return NULL;
}

static bool reader_saw_nap(struct stream_reader *reader)
{
	bool saw;

	pthread_mutex_lock(&reader->lock);
	saw = reader->saw_nap_started;
	pthread_mutex_unlock(&reader->lock);
	return saw;
}

/*
 * A stream opened while the run goes delivers events as they happen: the reader sees the
 * sleeping stage start before anything ends the run, then the cancel, and the stream closes.
 */
static void test_sse_live_and_cancel(void)
{
	char body[TEST_PATH_MAX];
	struct stream_reader reader = { .served = contract,
					.lock = PTHREAD_MUTEX_INITIALIZER };
	char *id = create_run(contract, sleep_spec, cid("live-1"));
	json_t *first, *second, *run, *stages, *report;
	pthread_t thread;
	long status;
	pid_t pid;
	int i;

	if (!id)
		return;
	/* /events with Accept: text/event-stream (the client sends it); `logs --follow` uses /events/stream */
	snprintf(reader.path, sizeof(reader.path), "/v1/runs/%s/events", id);
	if (pthread_create(&thread, NULL, stream_thread, &reader) != 0)
		harness_fail_setup("cannot start the stream reader thread");
	pid = wait_stage_running(contract, id, "nap");
	for (i = 0; i < SERVE_WAIT_ROUNDS && !reader_saw_nap(&reader); i++)
		serve_pause();
	CHECK(reader_saw_nap(&reader));
	/* idempotent create: the same run_id while it runs is the same run */
	free(create_run(contract, sleep_spec, cid("live-1")));
	first = call(contract, "POST", cpath("live-1", "/cancel"), "{\"reason\":\"test\"}",
		     &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(first, "state")), "cancelled");
	if (pid > 0)
		wait_gone(pid);
	second = call(contract, "POST", cpath("live-1", "/cancel"), NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(second, "state")), "cancelled");
	CHECK(json_integer_value(json_object_get(first, "terminal_event_id")) > 0);
	CHECK(json_equal(json_object_get(first, "terminal_event_id"),
			 json_object_get(second, "terminal_event_id")));
	pthread_join(thread, NULL);
	CHECK_INT_EQ(reader.status, SERVE_HTTP_OK);
	CHECK(reader.text && strstr(reader.text, "event: run.cancelled\n"));
	CHECK(reader.text && strstr(reader.text, "event: log.closed\n"));
	CHECK(reader.text && strstr(reader.text, "id: 1\nevent: run.started\n") == reader.text);
	snprintf(body, sizeof(body), "{\"file\":\"/x\",\"run_id\":\"%s\"}", cid("live-1"));
	check_error(contract, "POST", "/v1/runs", body, 409, "ALREADY_TERMINAL");
	run = get_run(contract, id);
	CHECK_STR_EQ(json_string_value(json_object_get(run, "terminal_reason")), "cancelled");
	stages = json_object_get(run, "stage_states");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(stages, "nap"), "status")),
		     "failed");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(stages, "after"), "status")),
		     "skipped");
	/* the run's process took the SIGTERM as a cancel: it ended with the report of what ran */
	report = json_object_get(run, "report");
	CHECK(strstr(json_string_value(json_object_get(report, "error")) ?: "",
		     "the run was cancelled by SIGTERM") != NULL);
	CHECK_STR_EQ(json_string_value(json_object_get(
			     json_array_get(json_object_get(report, "stages"), 0), "output")),
		     "going\n");
	CHECK_INT_EQ(json_integer_value(json_object_get(run, "exit_code")), 128 + SIGTERM);
	json_decref(run);
	json_decref(first);
	json_decref(second);
	free(reader.text);
	free(id);
}

/* True when process pid's environment holds entry ("NAME=value") exactly. */
static bool process_env_has(pid_t pid, const char *entry)
{
	char path[TEST_PATH_MAX], env[TEST_ENV_MAX];
	size_t len, at = 0;
	bool found = false;
	FILE *file;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	file = fopen(path, "r");
	if (!file)
		return false;
	len = fread(env, 1, sizeof(env) - 1, file);
	fclose(file);
	env[len] = '\0';
	while (at < len && !found) {
		found = strcmp(env + at, entry) == 0;
		at += strlen(env + at) + 1;
	}
	return found;
}

/*
 * A service step publishes its output_file while the run is still running (output_ready,
 * the artifact, a stage.output_ready event), and POST .../stop ends it gracefully: the
 * service exits, the step after it runs, the run succeeds with terminal_reason stopped, the
 * run's process is gone, and a second stop answers the same.
 */
static void test_service_output_ready_and_stop(void)
{
	char *id = create_run(contract, service_spec, cid("service-1"));
	struct daemon_response response;
	json_t *first, *second, *run, *stages;
	char err[TEST_ERR_MAX];
	long status;
	pid_t pid;

	if (!id)
		return;
	pid = wait_stage_running(contract, id, "web");
	CHECK(wait_output_ready_running(contract, id));
	/* the stage says so too, in /stages and in the run's stage_states, while it runs */
	stages = call(contract, "GET", cpath("service-1", "/stages"), NULL, &status);
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 0), "status")),
		     "running");
	CHECK(json_is_true(json_object_get(json_array_get(stages, 0), "output_ready")));
	CHECK(json_is_false(json_object_get(json_array_get(stages, 1), "output_ready")));
	json_decref(stages);
	run = get_run(contract, id);
	CHECK(json_is_true(json_object_get(
		json_object_get(json_object_get(run, "stage_states"), "web"), "output_ready")));
	json_decref(run);
	CHECK(first_event_id(contract, id, "stage.output_ready", "web", NULL) > 0);
	CHECK_INT_EQ(daemon_client_request(&contract->client, "GET",
					   cpath("service-1", "/stages/web/output-file"), NULL,
					   &response, err, sizeof(err)), 0);
	CHECK_INT_EQ(response.status, SERVE_HTTP_OK);
	CHECK_STR_EQ(response.body, "{\"port\":8080}");
	daemon_response_free(&response);
	first = call(contract, "POST", cpath("service-1", "/stop"), NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(first, "state")), "succeeded");
	if (pid > 0)
		wait_gone(pid);
	second = call(contract, "POST", cpath("service-1", "/stop"), "{}", &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK(json_integer_value(json_object_get(first, "terminal_event_id")) > 0);
	CHECK(json_equal(json_object_get(first, "terminal_event_id"),
			 json_object_get(second, "terminal_event_id")));
	run = get_run(contract, id);
	CHECK_STR_EQ(json_string_value(json_object_get(run, "terminal_reason")), "stopped");
	CHECK(json_is_true(json_object_get(run, "output_ready")));
	stages = json_object_get(run, "stage_states");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(stages, "web"), "status")),
		     "succeeded");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(stages, "after"), "status")),
		     "succeeded");
	CHECK(first_event_id(contract, id, "run.stop_requested", NULL, NULL) > 0);
	json_decref(run);
	json_decref(first);
	json_decref(second);
	free(id);
}

/* A service that exits non-zero on its own fails its run; stop on a run with no service to
 * stop (a task step sleeping) cancels it once the grace period is over. That run's process
 * also carries the policy's parallelism. */
static void test_service_exit_mapping(void)
{
	json_t *body = json_pack("{s:s, s:s, s:{s:i, s:i}}", "file", sleep_spec, "run_id",
				 cid("no-service"), "policy", "cancel_grace_period_secs", 1,
				 "max_parallel_microvms_per_run", TEST_PARALLEL);
	char *text = json_dumps(body, JSON_COMPACT);
	json_t *run, *answer;
	long status;
	pid_t pid;

	run = create_and_finish(json_pack("{s:s, s:s}", "file", failing_service_spec, "run_id",
					  cid("service-broken")), cid("service-broken"));
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "failed");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(
			     json_object_get(run, "stage_states"), "web"), "status")),
		     "failed");
	json_decref(run);
	answer = call(contract, "POST", "/v1/runs", text, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_decref(answer);
	pid = wait_stage_running(contract, cid("no-service"), "nap");
	/* the policy's parallelism reaches the run as the pipeline runner's bound */
	CHECK(process_env_has(pid, "VOIDBOX_MAX_PARALLEL_VMS=" TEST_PARALLEL_TEXT));
	answer = call(contract, "POST", cpath("no-service", "/stop"), NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(answer, "state")), "cancelled");
	if (pid > 0)
		wait_gone(pid);
	json_decref(answer);
	json_decref(body);
	free(text);
}

/* The first telemetry sample of a run with a host part, polled (bounded); NULL if none came. */
static json_t *wait_host_sample(const struct served *served, const char *run_id)
{
	char path[TEST_PATH_MAX];
	long status;

	snprintf(path, sizeof(path), "/v1/runs/%s/telemetry", run_id);
	for (int i = 0; i < SERVE_WAIT_ROUNDS; i++) {
		json_t *answer = call(served, "GET", path, NULL, &status);
		json_t *sample = json_array_get(json_object_get(answer, "samples"), 0);

		if (json_object_get(sample, "host"))
			return answer;
		json_decref(answer);
		serve_pause();
	}
	return NULL;
}

/*
 * GET /telemetry while a run goes: host samples of the run's process (the VMM's process;
 * here a mock run, so no guest part) with its RSS, CPU and I/O; from_seq continues after
 * next_seq; a bad from_seq or stage_name is 400 and an unknown run 404.
 */
static void test_telemetry(void)
{
	char *id = create_run(contract, sleep_spec, cid("telemetry-1"));
	json_t *answer, *first, *host, *later, *sample;
	char path[TEST_PATH_MAX];
	json_int_t next_seq;
	size_t i;
	long status;
	pid_t pid;

	if (!id)
		return;
	pid = wait_stage_running(contract, id, "nap");
	answer = wait_host_sample(contract, id);
	CHECK(answer != NULL);
	CHECK_STR_EQ(json_string_value(json_object_get(answer, "run_id")), cid("telemetry-1"));
	CHECK_INT_EQ(json_integer_value(json_object_get(answer, "attempt_id")), 1);
	first = json_array_get(json_object_get(answer, "samples"), 0);
	host = json_object_get(first, "host");
	CHECK_INT_EQ(json_integer_value(json_object_get(first, "seq")), 1);
	CHECK(json_integer_value(json_object_get(first, "timestamp_ms")) > 0);
	{
		char expected[DAEMON_RFC3339_MAX];

		daemon_rfc3339_ms((uint64_t)json_integer_value(json_object_get(first, "timestamp_ms")),
				  expected);
		CHECK_STR_EQ(json_string_value(json_object_get(first, "timestamp")), expected);
		CHECK(strlen(expected) == strlen("2026-01-01T00:00:00.000Z"));
	}
	CHECK(json_integer_value(json_object_get(host, "rss_bytes")) > 0);
	CHECK(json_is_number(json_object_get(host, "cpu_percent")));
	CHECK(json_is_integer(json_object_get(host, "io_read_bytes")));
	CHECK(json_is_integer(json_object_get(host, "io_write_bytes")));
	next_seq = json_integer_value(json_object_get(answer, "next_seq"));
	CHECK(next_seq > 1);
	snprintf(path, sizeof(path), "/v1/runs/%s/telemetry?from_seq=%lld", cid("telemetry-1"),
		 (long long)next_seq);
	later = call(contract, "GET", path, NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_array_foreach(json_object_get(later, "samples"), i, sample)
		CHECK(json_integer_value(json_object_get(sample, "seq")) >= next_seq);
	json_decref(later);
	json_decref(answer);
	check_error(contract, "GET", cpath("telemetry-1", "/telemetry?from_seq=x1"), NULL, 400,
		    "INVALID_PARAMS");
	check_error(contract, "GET", cpath("telemetry-1", "/telemetry?stage_name=.hidden"), NULL,
		    400, "INVALID_PARAMS");
	check_error(contract, "GET", "/v1/runs/nobody/telemetry", NULL, 404, "NOT_FOUND");
	answer = call(contract, "POST", cpath("telemetry-1", "/cancel"), NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_decref(answer);
	if (pid > 0)
		wait_gone(pid);
	free(id);
}

/*
 * An agent's stream-json output reaches the events parsed, one line per event, as the box
 * delivers it (before the stage's completion), not as raw JSON when the stage ends.
 */
static void test_agent_output_parsed_live(void)
{
	json_t *run = create_and_finish(json_pack("{s:s, s:s}", "file", agent_spec, "run_id",
						  cid("agent-1")), cid("agent-1"));
	json_int_t system_id, result_id, completed_id;

	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	json_decref(run);
	system_id = first_event_id(contract, cid("agent-1"), "log.chunk", "helper",
				   "[system] init model voidbox-mock");
	result_id = first_event_id(contract, cid("agent-1"), "log.chunk", "helper",
				   "[result] success: mock: completed 'Say hello'");
	completed_id = first_event_id(contract, cid("agent-1"), "stage.completed", "helper", NULL);
	CHECK(system_id > 0);
	CHECK(result_id > system_id);
	CHECK(completed_id > result_id);
}

/* A daemon killed outright: its run's process dies with it, the socket is replaced, and the
 * next daemon has every run, the active one failed with daemon_restarted. */
static void test_restart_after_sigkill(void)
{
	char *id = create_run(&unix_daemon, sleep_spec, "orphan-1");
	char listen[TEST_PATH_MAX];
	struct stat st;
	json_t *run;
	pid_t pid;

	if (!id)
		return;
	pid = wait_stage_running(&unix_daemon, id, "nap");
	CHECK_INT_EQ(serve_stop(&unix_daemon, SIGKILL), -1);
	if (pid > 0)
		wait_gone(pid);
	CHECK_INT_EQ(stat(socket_path, &st), 0); /* left behind: stale */
	snprintf(listen, sizeof(listen), "unix://%s", socket_path);
	if (!serve_start(&unix_daemon, voidbox_path, state_dir, listen, NULL))
		harness_fail_setup("the daemon did not restart on its stale socket");
	run = get_run(&unix_daemon, id);
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "failed");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "terminal_reason")),
		     "daemon_restarted");
	json_decref(run);
	run = get_run(&unix_daemon, "order-1");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	/* a finished run without messaging has no sidecar (test_daemon_messaging has a live one) */
	CHECK(json_is_false(json_object_get(json_object_get(run, "messaging"), "sidecar")));
	json_decref(run);
	free(id);
}

/* The CLI clients against the same daemon. */
static void test_cli_clients(void)
{
	char url_arg[SERVE_LINE_MAX + 16], out_path[TEST_PATH_MAX], text[SERVE_LINE_MAX * 4];
	const char *commands[][8] = {
		{ "status", "order-1", "--daemon", url_arg, NULL },
		{ "logs", "order-1", "--follow", "--daemon", url_arg, NULL },
		{ "run", "--file", quick_spec, NULL, "--run-id", "cli-1", NULL },
		{ "cancel", "order-1", "--daemon", url_arg, NULL },
		{ "stop", "service-1", "--daemon", url_arg, NULL },
	};
	static const char *const expected[] = {
		"succeeded", "[log.closed]", "run cli-1 submitted", "is succeeded", "is succeeded",
	};
	char daemon_flag[SERVE_LINE_MAX + 16];
	json_t *run;

	snprintf(url_arg, sizeof(url_arg), "%s", unix_daemon.url);
	snprintf(daemon_flag, sizeof(daemon_flag), "--daemon=%s", unix_daemon.url);
	commands[2][3] = daemon_flag;
	snprintf(out_path, sizeof(out_path), "%s/cli.out", temp_dir);
	for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++) {
		const char *argv[10] = { voidbox_path };
		int status = -1, fd;
		pid_t pid;
		ssize_t n;

		for (size_t i = 0; commands[c][i]; i++)
			argv[i + 1] = commands[c][i];
		pid = fork();
		if (pid == 0) {
			fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, TEST_OWNER_ONLY);
			dup2(fd, STDOUT_FILENO);
			execv(voidbox_path, (char *const *)argv);
			_exit(127);
		}
		waitpid(pid, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		fd = open(out_path, O_RDONLY);
		n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
		text[n > 0 ? n : 0] = '\0';
		if (fd >= 0)
			close(fd);
		if (!strstr(text, expected[c]))
			fprintf(stderr, "  voidbox %s printed: %s\n", commands[c][0], text);
		CHECK(strstr(text, expected[c]) != NULL);
	}
	run = wait_terminal(&unix_daemon, "cli-1");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	json_decref(run);
}

/* SIGTERM stops the daemon cleanly and removes its socket. */
/* The environment's defaults, as the daemon takes them: a struct, no variables read. */
static void test_default_paths(void)
{
	const struct daemon_env env = { .runtime_dir = "/run/user/7", .config_home = "/cfg",
					.home = "/home/u" };
	const struct daemon_env home_only = { .home = "/home/u" };
	char path[TEST_PATH_MAX], expect[TEST_PATH_MAX], err[TEST_ERR_MAX];
	struct daemon_address address;

	CHECK_INT_EQ(daemon_address_parse(NULL, &env, &address, err, sizeof(err)), 0);
	CHECK_STR_EQ(address.path, "/run/user/7/voidbox.sock");
	daemon_default_socket(NULL, path, sizeof(path));
	snprintf(expect, sizeof(expect), "/tmp/voidbox-%u.sock", (unsigned)getuid());
	CHECK_STR_EQ(path, expect);
	CHECK_INT_EQ(daemon_default_token_file(&env, path, sizeof(path)), 0);
	CHECK_STR_EQ(path, "/cfg/voidbox/daemon-token");
	CHECK_INT_EQ(daemon_default_token_file(&home_only, path, sizeof(path)), 0);
	CHECK_STR_EQ(path, "/home/u/.config/voidbox/daemon-token");
	CHECK_INT_EQ(daemon_default_token_file(NULL, path, sizeof(path)), -ENOENT);
}

/*
 * The CLI reads XDG_RUNTIME_DIR and VOIDBOX_STATE_DIR and hands them to the daemon: with
 * neither --listen nor --state-dir, the socket and the run store land where they say.
 */
static void test_defaults_from_environment(void)
{
	char runtime[TEST_PATH_MAX], state[TEST_PATH_MAX], expect[TEST_PATH_MAX + 32];
	struct served served;
	struct stat st;
	bool started;

	snprintf(runtime, sizeof(runtime), "%s/runtime", temp_dir);
	snprintf(state, sizeof(state), "%s/env-state", temp_dir);
	CHECK_INT_EQ(mkdir(runtime, 0700), 0);
	setenv("XDG_RUNTIME_DIR", runtime, 1);
	setenv("VOIDBOX_STATE_DIR", state, 1);
	started = serve_start(&served, voidbox_path, NULL, NULL, NULL);
	unsetenv("XDG_RUNTIME_DIR");
	unsetenv("VOIDBOX_STATE_DIR");
	CHECK(started);
	if (!started)
		return;
	snprintf(expect, sizeof(expect), "unix://%s/voidbox.sock", runtime);
	CHECK_STR_EQ(served.url, expect);
	CHECK_INT_EQ(stat(state, &st), 0);
	CHECK(S_ISDIR(st.st_mode));
	CHECK_INT_EQ(serve_stop(&served, SIGTERM), 0);
}

/* How many of a run's events are of type. */
static size_t count_events(const json_t *events, const char *type)
{
	size_t count = 0, i;
	json_t *event;

	json_array_foreach(events, i, event)
		count += strcmp(json_string_value(json_object_get(event, "event_type")) ?: "", type) == 0;
	return count;
}

/*
 * Every line a run prints becomes a stored event, so a run that prints without end must not
 * fill the host's disk: past --max-run-log one log.truncated event says so and no more lines
 * are kept, while the stage's output and the run's report stay whole. A size that is not one
 * is refused.
 */
static void test_run_log_cap(void)
{
	char dir[TEST_PATH_MAX], spec[TEST_PATH_MAX], listen[TEST_PATH_MAX], path[TEST_PATH_MAX];
	const char *bad_argv[] = { voidbox_path, "serve", "--max-run-log", "banana", NULL };
	struct daemon_response response;
	char err[TEST_ERR_MAX];
	struct served served;
	json_t *run, *events;
	long status;
	char *id;
	int exit_status;
	pid_t pid;

	FILE *yaml;

	snprintf(dir, sizeof(dir), "%s/capped", temp_dir);
	snprintf(spec, sizeof(spec), "%s/chatty.yaml", temp_dir);
	snprintf(listen, sizeof(listen), "unix://%s/capped.sock", temp_dir);
	yaml = fopen(spec, "w");
	if (!yaml)
		harness_fail_setup("cannot write a spec into the temporary directory");
	fputs(chatty_yaml_head, yaml);
	for (int i = 0; i < TEST_CHATTY_LINES; i++)
		fputs(TEST_CHATTY_LINE, yaml);
	fputs("\"]\n", yaml);
	fclose(yaml);
	CHECK(serve_start_with(&served, voidbox_path, dir, listen, NULL, "4K"));
	id = create_run(&served, spec, "chatty-1");
	if (id) {
		run = wait_terminal(&served, id);
		CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
		snprintf(path, sizeof(path), "/v1/runs/%s/events", id);
		events = call(&served, "GET", path, NULL, &status);
		CHECK_INT_EQ(status, SERVE_HTTP_OK);
		CHECK_INT_EQ(count_events(events, "log.truncated"), 1);
		CHECK(count_events(events, "log.chunk") > 0);
		CHECK(count_events(events, "log.chunk") <= 4096 / DAEMON_LOG_LINE_COST);
		CHECK_INT_EQ(count_events(events, "log.closed"), 1);
		CHECK_INT_EQ(daemon_client_request(&served.client, "GET",
						   "/v1/runs/chatty-1/stages/count/artifacts/output",
						   NULL, &response, err, sizeof(err)), 0);
		/* the stage's whole output, echo's newline after its argument included */
		CHECK(response.body &&
		      strlen(response.body) == TEST_CHATTY_LINES * TEST_CHATTY_LINE_LEN + 1);
		daemon_response_free(&response);
		json_decref(events);
		json_decref(run);
		free(id);
	}
	CHECK_INT_EQ(serve_stop(&served, SIGTERM), 0);
	pid = fork();
	if (pid == 0) {
		int null_fd = open("/dev/null", O_WRONLY);

		dup2(null_fd, STDERR_FILENO);
		execv(voidbox_path, (char *const *)bad_argv);
		_exit(127);
	}
	CHECK(pid > 0 && waitpid(pid, &exit_status, 0) == pid);
	CHECK(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 2);
}

/*
 * A run whose report is over the daemon's 16 MiB still succeeds there: the report the daemon
 * keeps is the run.finished line's (outputs cut, marked report_cut), a run.report_cut event
 * says so, and each stage's artifact holds its output's first 1 MiB.
 */
static void test_report_over_limit(void)
{
	char spec[TEST_PATH_MAX], path[TEST_PATH_MAX];
	struct daemon_response response;
	char err[TEST_ERR_MAX];
	json_t *run, *report, *events;
	long status;
	FILE *yaml;

	snprintf(spec, sizeof(spec), "%s/wide.yaml", temp_dir);
	yaml = fopen(spec, "w");
	if (!yaml)
		harness_fail_setup("cannot write a spec into the temporary directory");
	fputs(wide_yaml_head, yaml);
	for (unsigned int i = 0; i < TEST_WIDE_BYTES; i++)
		fputc('w', yaml);
	fputs("\"]\n", yaml);
	for (int i = 1; i <= TEST_WIDE_COPIES; i++) {
		char previous[TEST_NAME_MAX];

		if (i == 1)
			snprintf(previous, sizeof(previous), "say");
		else
			snprintf(previous, sizeof(previous), "copy-%d", i - 1);
		fprintf(yaml,
			"    - name: copy-%d\n      depends_on: [%s]\n      run:\n"
			"        program: cat\n        stdin_from: %s\n",
			i, previous, previous);
	}
	fclose(yaml);
	run = create_and_finish(json_pack("{s:s, s:s}", "file", spec, "run_id", "wide-1"),
				"wide-1");
	report = json_object_get(run, "report");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	CHECK(json_is_true(json_object_get(report, "success")));
	CHECK(json_is_true(json_object_get(report, "report_cut")));
	CHECK_INT_EQ(json_string_length(json_object_get(report, "output")),
		     TEST_REPORT_CUT_OUTPUT);
	CHECK_INT_EQ(json_integer_value(json_object_get(report, "output_bytes")),
		     TEST_WIDE_BYTES + 1);
	CHECK_INT_EQ(json_array_size(json_object_get(report, "stages")), TEST_WIDE_COPIES + 1);
	CHECK_STR_EQ(json_string_value(json_object_get(
			     json_array_get(json_object_get(report, "stages"), TEST_WIDE_COPIES),
			     "name")),
		     "copy-5");
	snprintf(path, sizeof(path), "/v1/runs/wide-1/events");
	events = call(contract, "GET", path, NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_INT_EQ(count_events(events, "run.report_cut"), 1);
	CHECK_INT_EQ(count_events(events, "run.finished"), 1);
	CHECK_INT_EQ(daemon_client_request(&contract->client, "GET",
					   "/v1/runs/wide-1/stages/copy-3/artifacts/output", NULL,
					   &response, err, sizeof(err)), 0);
	CHECK_INT_EQ(response.status, SERVE_HTTP_OK);
	CHECK(response.body && strlen(response.body) == TEST_REPORT_CUT_OUTPUT &&
	      strspn(response.body, "w") == TEST_REPORT_CUT_OUTPUT);
	daemon_response_free(&response);
	json_decref(events);
	json_decref(run);
}

static void test_clean_stop_removes_socket(void)
{
	struct stat st;

	CHECK_INT_EQ(serve_stop(&unix_daemon, SIGTERM), 0);
	CHECK(stat(socket_path, &st) < 0 && errno == ENOENT);
	unix_daemon.pid = 0;
}

/* ---- a full file system ---- */

/* Writes dir/filler until the file system is full; true when it is. */
static bool fill_file_system(const char *dir)
{
	static const char chunk[TEST_FILL_CHUNK];
	char path[TEST_PATH_MAX];
	int fd;
	bool full = false;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, TEST_OWNER_ONLY);
	while (fd >= 0 && !full)
		full = write(fd, chunk, sizeof(chunk)) < 0 && errno == ENOSPC;
	if (fd >= 0)
		close(fd);
	return full;
}

static void free_file_system(const char *dir)
{
	char path[TEST_PATH_MAX];

	snprintf(path, sizeof(path), "%s/filler", dir);
	unlink(path);
}

static void remove_temp_dir(void);

/*
 * Runs scenario(dir) in a child with a mount namespace of its own and a small tmpfs on dir, so
 * it can fill that file system. Such a test is a separate one (its own meson test): where the
 * host gives no namespace it skips, having said why, after stopping the shared daemon.
 */
static void in_small_tmpfs(const char *name, int (*scenario)(const char *dir))
{
	char dir[TEST_PATH_MAX];
	int status = -1;
	pid_t child;

	snprintf(dir, sizeof(dir), "%s/%s", temp_dir, name);
	CHECK_INT_EQ(mkdir(dir, 0700), 0);
	fflush(NULL);
	child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", dir, "tmpfs", 0, TEST_SMALL_TMPFS) < 0) {
			fprintf(stderr, "  not run: cannot mount a small tmpfs (%s)\n",
				strerror(errno));
			_exit(TEST_FULL_NOT_RUN);
		}
		_exit(scenario(dir));
	}
	CHECK_INT_EQ(waitpid(child, &status, 0), child);
	if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_FULL_NOT_RUN) {
		if (unix_daemon.pid > 0)
			serve_stop(&unix_daemon, SIGKILL);
		remove_temp_dir();
		harness_skip_all("no mount namespace with a small tmpfs to fill (the line above "
				 "says why)");
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The names in dir, space-separated, into out ("" when empty). */
static void list_dir(const char *dir, char *out, size_t len)
{
	DIR *handle = opendir(dir);
	struct dirent *ent;
	size_t used = 0;

	out[0] = '\0';
	while (handle && (ent = readdir(handle))) {
		int n;

		if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
			continue;
		n = snprintf(out + used, len - used, "%s%s", used ? " " : "", ent->d_name);
		if (n < 0 || (size_t)n >= len - used)
			break;
		used += (size_t)n;
	}
	if (handle)
		closedir(handle);
}

static int token_on_full_disk(const char *dir)
{
	char path[2 * TEST_PATH_MAX], cfg[TEST_PATH_MAX], token[TEST_PATH_MAX];
	char again[TEST_PATH_MAX];
	char err[TEST_ERR_MAX] = "", listing[TEST_PATH_MAX];
	struct stat st;

	snprintf(cfg, sizeof(cfg), "%s/cfg", dir);
	snprintf(path, sizeof(path), "%s/token", cfg);
	CHECK(fill_file_system(dir));
	CHECK(daemon_token_load(path, token, sizeof(token), err, sizeof(err)) < 0);
	fprintf(stderr, "  refused: %s\n", err);
	CHECK(strstr(err, "No space left on device") != NULL);
	CHECK(strstr(err, "pass --token-file a path on a file system with room") != NULL);
	/* nothing is left that the next start would refuse as an empty token file */
	list_dir(cfg, listing, sizeof(listing));
	CHECK_STR_EQ(listing, "");
	free_file_system(dir);
	err[0] = '\0';
	CHECK_INT_EQ(daemon_token_load(path, token, sizeof(token), err, sizeof(err)), 0);
	CHECK_INT_EQ(strlen(token), TEST_TOKEN_HEX_LEN);
	CHECK_INT_EQ(stat(path, &st), 0);
	CHECK_INT_EQ(st.st_mode & TEST_FILE_MODE_MASK, TEST_OWNER_ONLY);
	CHECK_INT_EQ(daemon_token_load(path, again, sizeof(again), err, sizeof(err)), 0);
	CHECK_STR_EQ(again, token);
	list_dir(cfg, listing, sizeof(listing));
	CHECK_STR_EQ(listing, "token");
	return harness_checks_failed_in_test == 0 ? 0 : 1;
}

/*
 * A token file that cannot be written on a full disk says what to do and leaves no empty
 * file behind; with space freed the next start makes a whole one.
 */
static void test_token_on_full_disk(void)
{
	in_small_tmpfs("token-full", token_on_full_disk);
}

/* `voidbox serve` with its state on dir and its log into log_path. */
static bool serve_logged(struct served *served, const char *dir, const char *log_path)
{
	char state[TEST_PATH_MAX], listen[TEST_PATH_MAX];
	int saved = dup(STDERR_FILENO);
	int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, TEST_OWNER_ONLY);
	bool started;

	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(listen, sizeof(listen), "unix://%s/sock", dir);
	if (saved < 0 || log_fd < 0)
		return false;
	dup2(log_fd, STDERR_FILENO);
	started = serve_start(served, voidbox_path, state, listen, NULL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(log_fd);
	return started;
}

static void read_text(const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;

	out[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

static int run_store_on_full_disk(const char *dir)
{
	static char log_text[TEST_LOG_MAX];
	char log_path[TEST_PATH_MAX], *body;
	struct served served;
	json_t *answer, *run, *events;
	const char *message;
	long status;
	char *id;

	snprintf(log_path, sizeof(log_path), "%s/serve.log", temp_dir);
	if (!serve_logged(&served, dir, log_path)) {
		CHECK(!"voidbox serve did not start on the small tmpfs");
		return 1;
	}
	id = create_run(&served, nap_spec, "full-1");
	wait_stage_running(&served, "full-1", "nap");
	CHECK(fill_file_system(dir));
	/* a new run is refused with why and what to do */
	body = create_body(quick_spec, "full-2");
	answer = call(&served, "POST", "/v1/runs", body, &status);
	free(body);
	CHECK_INT_EQ(status, 500);
	message = json_string_value(json_object_get(answer, "message"));
	fprintf(stderr, "  refused: %s\n", message ? message : "(no message)");
	CHECK(message && strstr(message, "free space on its file system") != NULL);
	CHECK(message && strstr(message, "the run was not started") != NULL);
	json_decref(answer);
	/* the running one ends while the disk is full: its end waits, and the log says why */
	for (int i = 0; i < SERVE_WAIT_ROUNDS && !strstr(log_text, "its end is not recorded");
	     i++) {
		serve_pause();
		read_text(log_path, log_text, sizeof(log_text));
	}
	CHECK(strstr(log_text, "run full-1 has ended but its end is not recorded") != NULL);
	CHECK(strstr(log_text, "free space on its file system") != NULL);
	free_file_system(dir);
	run = wait_terminal(&served, "full-1");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "succeeded");
	CHECK(json_is_object(json_object_get(run, "report")));
	json_decref(run);
	events = call(&served, "GET", "/v1/runs/full-1/events", NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK(json_array_size(events) > 0);
	CHECK(daemon_event_is_last(json_array_get(events, json_array_size(events) - 1)));
	json_decref(events);
	free(id);
	CHECK_INT_EQ(serve_stop(&served, SIGTERM), 0);
	return harness_checks_failed_in_test == 0 ? 0 : 1;
}

/*
 * The run store on a full file system: a new run is refused with what to free, and a run that
 * ends meanwhile is not lost: its end is recorded once space is freed, so a client waiting on
 * it sees it finish instead of waiting on a run stuck in "running".
 */
static void test_run_store_on_full_disk(void)
{
	in_small_tmpfs("store-full", run_store_on_full_disk);
}

/* ---- over TCP ---- */

/*
 * Whether a TCP daemon's port is claimed (common/loopback_claim.h): while it runs, no
 * sandbox's guest reaches the API through its gateway, while host clients (this test) still
 * do; once it has stopped, nothing of it is left.
 */
static bool api_port_claimed(const struct served *served)
{
	const char *colon = strrchr(served->url, ':');
	unsigned long port = colon ? strtoul(colon + 1, NULL, 10) : 0;
	int asker = loopback_claim_asker_open();
	bool claimed;

	CHECK(port > 0 && port <= UINT16_MAX);
	CHECK(asker >= 0);
	claimed = loopback_claim_held(asker, (uint16_t)port);
	if (asker >= 0)
		close(asker);
	return claimed;
}

static void test_tcp_requires_token(void)
{
	char token_file[TEST_PATH_MAX], wide_file[TEST_PATH_MAX];
	struct served tcp, anonymous, wrong;
	struct stat st;
	json_t *health;
	long status;
	size_t last;
	pid_t pid;
	int exit_status = 0;

	snprintf(token_file, sizeof(token_file), "%s/token", temp_dir);
	if (!serve_start(&tcp, voidbox_path, state_dir, "tcp://127.0.0.1:0", token_file))
		harness_fail_setup("the TCP daemon did not start");
	CHECK_INT_EQ(stat(token_file, &st), 0);
	CHECK_INT_EQ(st.st_mode & TEST_FILE_MODE_MASK, TEST_OWNER_ONLY);
	CHECK(strncmp(tcp.url, "tcp://127.0.0.1:", strlen("tcp://127.0.0.1:")) == 0);
	CHECK(api_port_claimed(&tcp));
	health = call(&tcp, "GET", "/v1/health", NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_decref(health);
	anonymous = tcp;
	anonymous.client.token[0] = '\0';
	check_error(&anonymous, "GET", "/v1/health", NULL, 401, "UNAUTHORIZED");
	check_error(&anonymous, "GET", "/v1/runs", NULL, 401, "UNAUTHORIZED");
	check_error(&anonymous, "POST", "/v1/runs", "{}", 401, "UNAUTHORIZED");
	wrong = tcp;
	/* the same length, the last character different */
	last = strlen(wrong.client.token) - 1;
	wrong.client.token[last] = wrong.client.token[last] == '0' ? '1' : '0';
	check_error(&wrong, "GET", "/v1/runs/order-1", NULL, 401, "UNAUTHORIZED");
	/* a longer token that starts with the right one */
	memcpy(wrong.client.token, tcp.client.token, last + 1);
	wrong.client.token[last + 1] = 'x';
	wrong.client.token[last + 2] = '\0';
	check_error(&wrong, "GET", "/v1/health", NULL, 401, "UNAUTHORIZED");
	/* the store is the one the unix daemon used */
	health = get_run(&tcp, "order-1");
	CHECK_STR_EQ(json_string_value(json_object_get(health, "status")), "succeeded");
	json_decref(health);
	free(create_run(&tcp, quick_spec, "tcp-1"));
	health = wait_terminal(&tcp, "tcp-1");
	CHECK_STR_EQ(json_string_value(json_object_get(health, "status")), "succeeded");
	json_decref(health);
	CHECK_INT_EQ(serve_stop(&tcp, SIGTERM), 0);
	CHECK(!api_port_claimed(&tcp));
	/* a token file others can read is refused */
	snprintf(wide_file, sizeof(wide_file), "%s/wide-token", temp_dir);
	write_file(wide_file, "secret\n");
	chmod(wide_file, TEST_WIDE_MODE);
	pid = fork();
	if (pid == 0) {
		execl(voidbox_path, voidbox_path, "serve", "--listen", "tcp://127.0.0.1:0",
		      "--token-file", wide_file, "--state-dir", state_dir, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &exit_status, 0);
	CHECK(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 1);
	unlink(wide_file);
	unlink(token_file);
}

/*
 * The contract again over TCP, with its bearer token on every call: error shapes, idempotent
 * create and cancel with the SSE stream, a service's output_ready and stop, the exit mapping,
 * telemetry and the live agent output, with run ids prefixed tcp-.
 */
static void test_contract_over_tcp(void)
{
	char token_file[TEST_PATH_MAX];

	snprintf(token_file, sizeof(token_file), "%s/contract-token", temp_dir);
	if (!serve_start(&tcp_daemon, voidbox_path, state_dir, "tcp://127.0.0.1:0", token_file))
		harness_fail_setup("the TCP daemon did not start");
	contract = &tcp_daemon;
	contract_prefix = "tcp-";
	test_error_shapes();
	test_sse_live_and_cancel();
	test_service_output_ready_and_stop();
	test_service_exit_mapping();
	test_telemetry();
	test_agent_output_parsed_live();
	contract = &unix_daemon;
	contract_prefix = "";
	CHECK_INT_EQ(serve_stop(&tcp_daemon, SIGTERM), 0);
	unlink(token_file);
}

static void remove_temp_dir(void)
{
	char command[TEST_PATH_MAX + 16];

	snprintf(command, sizeof(command), "rm -rf '%s'", temp_dir);
	if (system(command) != 0)
		fprintf(stderr, "cannot remove %s\n", temp_dir);
}

int main(int argc, char **argv)
{
	char listen[TEST_PATH_MAX];

	harness_select(argc, argv);
	if (argc < 2)
		harness_fail_setup("usage: test_daemon VOIDBOX_BINARY");
	voidbox_path = argv[1];
	if (!mkdtemp(temp_dir))
		harness_fail_setup("cannot create a temporary directory");
	snprintf(state_dir, sizeof(state_dir), "%s/state", temp_dir);
	snprintf(socket_path, sizeof(socket_path), "%s/voidbox.sock", temp_dir);
	snprintf(quick_spec, sizeof(quick_spec), "%s/quick.yaml", temp_dir);
	snprintf(sleep_spec, sizeof(sleep_spec), "%s/sleep.yaml", temp_dir);
	write_file(quick_spec, quick_yaml);
	write_file(sleep_spec, sleep_yaml);
	snprintf(cat_spec, sizeof(cat_spec), "%s/cat.yaml", temp_dir);
	write_file(cat_spec, cat_yaml);
	snprintf(service_spec, sizeof(service_spec), "%s/service.yaml", temp_dir);
	write_file(service_spec, service_yaml);
	snprintf(failing_service_spec, sizeof(failing_service_spec), "%s/broken.yaml", temp_dir);
	write_file(failing_service_spec, failing_service_yaml);
	snprintf(agent_spec, sizeof(agent_spec), "%s/agent.yaml", temp_dir);
	write_file(agent_spec, agent_yaml);
	snprintf(nap_spec, sizeof(nap_spec), "%s/nap.yaml", temp_dir);
	write_file(nap_spec, nap_yaml);
	RUN_TEST(test_request_parsing);
	snprintf(listen, sizeof(listen), "unix://%s", socket_path);
	if (!serve_start(&unix_daemon, voidbox_path, state_dir, listen, NULL))
		harness_fail_setup("voidbox serve did not start on the unix socket");
	RUN_TEST(test_unix_socket_mode);
	RUN_TEST(test_event_order);
	RUN_TEST(test_stage_outputs);
	RUN_TEST(test_error_shapes);
	RUN_TEST(test_inline_spec_and_list);
	RUN_TEST(test_input_with_file_spec);
	RUN_TEST(test_sse_live_and_cancel);
	RUN_TEST(test_service_output_ready_and_stop);
	RUN_TEST(test_service_exit_mapping);
	RUN_TEST(test_telemetry);
	RUN_TEST(test_agent_output_parsed_live);
	RUN_TEST(test_restart_after_sigkill);
	RUN_TEST(test_cli_clients);
	RUN_TEST(test_run_log_cap);
	RUN_TEST(test_report_over_limit);
	RUN_TEST(test_clean_stop_removes_socket);
	RUN_TEST(test_tcp_requires_token);
	RUN_SEPARATE_TEST(test_token_on_full_disk);
	RUN_SEPARATE_TEST(test_run_store_on_full_disk);
	RUN_TEST(test_contract_over_tcp);
	RUN_TEST(test_default_paths);
	RUN_TEST(test_defaults_from_environment);
	if (unix_daemon.pid > 0)
		serve_stop(&unix_daemon, SIGKILL);
	remove_temp_dir();
	return harness_finish();
}
