/*
 * Message codec tests: every message round-trips through encode and decode with all fields
 * set, the documented defaults apply when optional fields are absent, upstream's integer-array
 * byte form decodes, and hostile JSON (wrong types, missing fields, out-of-range numbers, bad
 * base64) is refused with -EPROTO and a reason instead of being half-accepted.
 */
#include "proto/protocol.h"
#include "harness.h"

#include <errno.h>
#include <math.h>

#define BODY(text) (const uint8_t *)(text), strlen(text)

static struct proto_bytes bytes_of(const char *text, size_t len)
{
	struct proto_bytes b = { .data = malloc(len ? len : 1), .len = len };

	memcpy(b.data, text, len);
	return b;
}

static bool bytes_equal(const struct proto_bytes *b, const void *data, size_t len)
{
	return b->len == len && (len == 0 || memcmp(b->data, data, len) == 0);
}

static void test_exec_request_roundtrip(void)
{
	char *args[] = { "-c", "echo hi" };
	struct proto_env_var env[] = { { "A", "1" }, { "KEY", "v a l" } };
	uint8_t stdin_bytes[256];
	struct proto_exec_request req = {
		.program = "sh", .args = args, .args_count = 2, .env = env, .env_count = 2,
		.working_dir = "/workspace", .has_timeout = true, .timeout_secs = 42,
	};
	struct proto_exec_request got;
	uint8_t *body;
	size_t len;
	const char *why = NULL;

	for (int i = 0; i < 256; i++)
		stdin_bytes[i] = (uint8_t)i;
	req.stdin_data.data = stdin_bytes;
	req.stdin_data.len = sizeof(stdin_bytes);
	CHECK_INT_EQ(proto_exec_request_encode(&req, &body, &len), 0);
	CHECK_INT_EQ(proto_exec_request_decode(body, len, &got, &why), 0);
	CHECK_STR_EQ(got.program, "sh");
	CHECK_INT_EQ(got.args_count, 2);
	CHECK_STR_EQ(got.args[1], "echo hi");
	CHECK(bytes_equal(&got.stdin_data, stdin_bytes, sizeof(stdin_bytes)));
	CHECK_INT_EQ(got.env_count, 2);
	CHECK_STR_EQ(got.env[1].key, "KEY");
	CHECK_STR_EQ(got.env[1].value, "v a l");
	CHECK_STR_EQ(got.working_dir, "/workspace");
	CHECK(got.has_timeout);
	CHECK_INT_EQ(got.timeout_secs, 42);
	proto_exec_request_free(&got);
	free(body);

	/* timeout 0 (wait forever) is distinct from absent */
	req.timeout_secs = 0;
	req.working_dir = NULL;
	CHECK_INT_EQ(proto_exec_request_encode(&req, &body, &len), 0);
	CHECK_INT_EQ(proto_exec_request_decode(body, len, &got, &why), 0);
	CHECK(got.has_timeout);
	CHECK_INT_EQ(got.timeout_secs, 0);
	CHECK(got.working_dir == NULL);
	proto_exec_request_free(&got);
	free(body);

	/* a NULL program is an encoding error, not a crash */
	req.program = NULL;
	CHECK_INT_EQ(proto_exec_request_encode(&req, &body, &len), -EINVAL);
}

static void test_exec_request_defaults(void)
{
	struct proto_exec_request got;
	const char *why = NULL;

	CHECK_INT_EQ(proto_exec_request_decode(BODY("{\"program\":\"ls\"}"), &got, &why), 0);
	CHECK_STR_EQ(got.program, "ls");
	CHECK_INT_EQ(got.args_count, 0);
	CHECK_INT_EQ(got.stdin_data.len, 0);
	CHECK_INT_EQ(got.env_count, 0);
	CHECK(got.working_dir == NULL);
	CHECK(!got.has_timeout);
	proto_exec_request_free(&got);

	/* upstream's form: byte arrays, nulls for absent options */
	CHECK_INT_EQ(proto_exec_request_decode(
			     BODY("{\"program\":\"cat\",\"args\":[],\"stdin\":[0,104,255],"
				  "\"env\":[[\"K\",\"V\"]],\"working_dir\":null,\"timeout_secs\":null}"),
			     &got, &why), 0);
	CHECK(bytes_equal(&got.stdin_data, "\0h\xff", 3));
	CHECK_STR_EQ(got.env[0].value, "V");
	CHECK(!got.has_timeout);
	proto_exec_request_free(&got);
}

static void expect_exec_request_refused(const char *json, const char *reason_part)
{
	struct proto_exec_request got;
	const char *why = NULL;

	CHECK_INT_EQ(proto_exec_request_decode(BODY(json), &got, &why), -EPROTO);
	CHECK(why != NULL);
	if (why && reason_part && !strstr(why, reason_part)) {
		fprintf(stderr, "  reason \"%s\" lacks \"%s\"\n", why, reason_part);
		CHECK(strstr(why, reason_part) != NULL);
	}
	CHECK(got.program == NULL && got.args == NULL && got.env == NULL);
}

static void test_exec_request_hostile(void)
{
	expect_exec_request_refused("", "empty");
	expect_exec_request_refused("{", "invalid JSON");
	expect_exec_request_refused("[1,2]", "not a JSON object");
	expect_exec_request_refused("{\"program\":\"a\"} trailing", "invalid JSON");
	expect_exec_request_refused("{}", "'program'");
	expect_exec_request_refused("{\"program\":5}", "'program'");
	expect_exec_request_refused("{\"program\":\"a\",\"args\":\"x\"}", "'args'");
	expect_exec_request_refused("{\"program\":\"a\",\"args\":[\"x\",1]}", "'args'");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":[256]}", "0..255");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":[-1]}", "0..255");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":[1.5]}", "0..255");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":[\"1\"]}", "0..255");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":\"Zg=\"}", "base64");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":\"@@@@\"}", "base64");
	expect_exec_request_refused("{\"program\":\"a\",\"stdin\":{}}", "'stdin'");
	expect_exec_request_refused("{\"program\":\"a\",\"env\":[[\"K\"]]}", "'env'");
	expect_exec_request_refused("{\"program\":\"a\",\"env\":[[\"K\",1]]}", "'env'");
	expect_exec_request_refused("{\"program\":\"a\",\"env\":[[\"K\",\"V\"],\"x\"]}", "'env'");
	expect_exec_request_refused("{\"program\":\"a\",\"env\":{\"K\":\"V\"}}", "'env'");
	expect_exec_request_refused("{\"program\":\"a\",\"timeout_secs\":-1}", "'timeout_secs'");
	expect_exec_request_refused("{\"program\":\"a\",\"timeout_secs\":\"5\"}", "'timeout_secs'");
	expect_exec_request_refused("{\"program\":\"a\",\"timeout_secs\":1e3}", "'timeout_secs'");
	expect_exec_request_refused("{\"program\":\"a\",\"working_dir\":[]}", "'working_dir'");
	expect_exec_request_refused("{\"program\":\"a\",\"program\":\"b\"}", "invalid JSON");
	expect_exec_request_refused("{\"program\":\"a\\u0000b\"}", "invalid JSON");
	expect_exec_request_refused("{\"program\":\"a\",\"timeout_secs\":99999999999999999999}",
				    "invalid JSON");
}

static void test_exec_response_roundtrip(void)
{
	struct proto_exec_response resp = {
		.stdout_data = bytes_of("out\0put", 7), .stderr_data = bytes_of("", 0),
		.exit_code = -1, .error = "Process killed after 2s timeout",
		.has_duration = true, .duration_ms = 2001,
	};
	struct proto_exec_response got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_exec_response_encode(&resp, &body, &len), 0);
	CHECK_INT_EQ(proto_exec_response_decode(body, len, &got, &why), 0);
	CHECK(bytes_equal(&got.stdout_data, "out\0put", 7));
	CHECK_INT_EQ(got.stderr_data.len, 0);
	CHECK_INT_EQ(got.exit_code, -1);
	CHECK_STR_EQ(got.error, resp.error);
	CHECK(got.has_duration);
	CHECK_INT_EQ(got.duration_ms, 2001);
	proto_exec_response_free(&got);
	resp.error = NULL; /* a literal, not heap */
	proto_exec_response_free(&resp);
	free(body);

	CHECK_INT_EQ(proto_exec_response_decode(
			     BODY("{\"stdout\":[104,105],\"stderr\":[],\"exit_code\":42}"), &got,
			     &why), 0);
	CHECK(bytes_equal(&got.stdout_data, "hi", 2));
	CHECK_INT_EQ(got.exit_code, 42);
	CHECK(got.error == NULL);
	CHECK(!got.has_duration);
	proto_exec_response_free(&got);

	CHECK_INT_EQ(proto_exec_response_decode(BODY("{\"stdout\":[],\"stderr\":[]}"), &got, &why),
		     -EPROTO);
	CHECK_INT_EQ(proto_exec_response_decode(
			     BODY("{\"stdout\":[],\"stderr\":[],\"exit_code\":2147483648}"), &got,
			     &why), -EPROTO);
	CHECK_INT_EQ(proto_exec_response_decode(BODY("{\"stderr\":[],\"exit_code\":0}"), &got,
						&why), -EPROTO);
}

static void test_exec_output_chunk(void)
{
	struct proto_exec_output_chunk chunk = {
		.stream = PROTO_STREAM_STDERR, .data = bytes_of("err", 3), .seq = 9,
	};
	struct proto_exec_output_chunk got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_exec_output_chunk_encode(&chunk, &body, &len), 0);
	CHECK(memmem(body, len, "\"stderr\"", 8) != NULL);
	CHECK_INT_EQ(proto_exec_output_chunk_decode(body, len, &got, &why), 0);
	CHECK_INT_EQ(got.stream, PROTO_STREAM_STDERR);
	CHECK(bytes_equal(&got.data, "err", 3));
	CHECK_INT_EQ(got.seq, 9);
	proto_exec_output_chunk_free(&got);
	proto_exec_output_chunk_free(&chunk);
	free(body);

	CHECK_INT_EQ(proto_exec_output_chunk_decode(
			     BODY("{\"stream\":\"stdin\",\"data\":[],\"seq\":0}"), &got, &why),
		     -EPROTO);
	CHECK_INT_EQ(proto_exec_output_chunk_decode(BODY("{\"stream\":\"stdout\",\"data\":[]}"),
						    &got, &why), -EPROTO);
}

static void test_write_file(void)
{
	struct proto_write_file wf = { .path = "/workspace/a", .content = bytes_of("xy", 2),
				       .create_parents = false };
	struct proto_write_file got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_write_file_encode(&wf, &body, &len), 0);
	CHECK_INT_EQ(proto_write_file_decode(body, len, &got, &why), 0);
	CHECK_STR_EQ(got.path, "/workspace/a");
	CHECK(bytes_equal(&got.content, "xy", 2));
	CHECK(!got.create_parents);
	proto_write_file_free(&got);
	free(wf.content.data);
	free(body);

	CHECK_INT_EQ(proto_write_file_decode(BODY("{\"path\":\"/p\",\"content\":[]}"), &got, &why),
		     0);
	CHECK(got.create_parents);
	CHECK_INT_EQ(got.content.len, 0);
	proto_write_file_free(&got);
	CHECK_INT_EQ(proto_write_file_decode(BODY("{\"path\":\"/p\",\"content\":[],"
						  "\"create_parents\":1}"), &got, &why), -EPROTO);
	CHECK_INT_EQ(proto_write_file_decode(BODY("{\"path\":\"/p\"}"), &got, &why), -EPROTO);
}

static void test_status_and_path(void)
{
	struct proto_status_response st = { .success = false, .error = "Refusing write" };
	struct proto_status_response st_got;
	struct proto_path_request pr = { .path = "/etc/voidbox/x" };
	struct proto_path_request pr_got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_status_response_encode(&st, &body, &len), 0);
	CHECK_INT_EQ(proto_status_response_decode(body, len, &st_got, &why), 0);
	CHECK(!st_got.success);
	CHECK_STR_EQ(st_got.error, "Refusing write");
	proto_status_response_free(&st_got);
	free(body);
	CHECK_INT_EQ(proto_status_response_decode(BODY("{\"success\":true}"), &st_got, &why), 0);
	CHECK(st_got.success && st_got.error == NULL);
	CHECK_INT_EQ(proto_status_response_decode(BODY("{\"error\":null}"), &st_got, &why),
		     -EPROTO);

	CHECK_INT_EQ(proto_path_request_encode(&pr, &body, &len), 0);
	CHECK_INT_EQ(proto_path_request_decode(body, len, &pr_got, &why), 0);
	CHECK_STR_EQ(pr_got.path, "/etc/voidbox/x");
	proto_path_request_free(&pr_got);
	free(body);
	CHECK_INT_EQ(proto_path_request_decode(BODY("{\"path\":null}"), &pr_got, &why), -EPROTO);
}

/* Every SetPolicy field is required: a policy the host did not spell out is not a policy. */
static void test_set_policy(void)
{
	char *commands[] = { "sh", "/usr/bin/python3" };
	struct proto_set_policy policy = {
		.allow_all_commands = false, .commands = commands, .commands_count = 2,
		.max_open_files = 64, .max_processes = 32, .max_file_size = 4096,
	};
	struct proto_set_policy got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_set_policy_encode(&policy, &body, &len), 0);
	CHECK_INT_EQ(proto_set_policy_decode(body, len, &got, &why), 0);
	CHECK(!got.allow_all_commands);
	CHECK_INT_EQ(got.commands_count, 2);
	if (got.commands_count == 2) {
		CHECK_STR_EQ(got.commands[0], "sh");
		CHECK_STR_EQ(got.commands[1], "/usr/bin/python3");
	}
	CHECK_INT_EQ(got.max_open_files, 64);
	CHECK_INT_EQ(got.max_processes, 32);
	CHECK_INT_EQ(got.max_file_size, 4096);
	proto_set_policy_free(&got);
	free(body);
	CHECK_INT_EQ(proto_set_policy_decode(BODY("{\"allow_all_commands\":true,\"commands\":[],"
						  "\"max_open_files\":1,\"max_processes\":1,"
						  "\"max_file_size\":1}"), &got, &why), 0);
	CHECK(got.allow_all_commands && got.commands_count == 0);
	proto_set_policy_free(&got);
	CHECK_INT_EQ(proto_set_policy_decode(BODY("{\"commands\":[],\"max_open_files\":1,"
						  "\"max_processes\":1,\"max_file_size\":1}"),
					     &got, &why), -EPROTO);
	CHECK_INT_EQ(proto_set_policy_decode(BODY("{\"allow_all_commands\":false,"
						  "\"max_open_files\":1,\"max_processes\":1,"
						  "\"max_file_size\":1}"), &got, &why), -EPROTO);
	CHECK_INT_EQ(proto_set_policy_decode(BODY("{\"allow_all_commands\":false,\"commands\":[1],"
						  "\"max_open_files\":1,\"max_processes\":1,"
						  "\"max_file_size\":1}"), &got, &why), -EPROTO);
	CHECK_INT_EQ(proto_set_policy_decode(BODY("{\"allow_all_commands\":false,\"commands\":[],"
						  "\"max_open_files\":1,\"max_processes\":1}"),
					     &got, &why), -EPROTO);
}

static void test_read_file_and_stat(void)
{
	struct proto_read_file_response rf = { .success = true, .content = bytes_of("abc", 3) };
	struct proto_read_file_response rf_got;
	struct proto_file_stat_response fs = { .exists = true, .has_size = true, .size = 5 };
	struct proto_file_stat_response fs_got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_read_file_response_encode(&rf, &body, &len), 0);
	CHECK_INT_EQ(proto_read_file_response_decode(body, len, &rf_got, &why), 0);
	CHECK(rf_got.success);
	CHECK(bytes_equal(&rf_got.content, "abc", 3));
	CHECK(rf_got.error == NULL);
	proto_read_file_response_free(&rf_got);
	proto_read_file_response_free(&rf);
	free(body);

	CHECK_INT_EQ(proto_file_stat_response_encode(&fs, &body, &len), 0);
	CHECK_INT_EQ(proto_file_stat_response_decode(body, len, &fs_got, &why), 0);
	CHECK(fs_got.exists && fs_got.has_size);
	CHECK_INT_EQ(fs_got.size, 5);
	proto_file_stat_response_free(&fs_got);
	free(body);
	CHECK_INT_EQ(proto_file_stat_response_decode(BODY("{\"exists\":false,\"size\":null,"
							  "\"error\":null}"), &fs_got, &why), 0);
	CHECK(!fs_got.exists && !fs_got.has_size && fs_got.error == NULL);
	CHECK_INT_EQ(proto_file_stat_response_decode(BODY("{\"exists\":\"no\"}"), &fs_got, &why),
		     -EPROTO);
}

static void test_subscribe_telemetry(void)
{
	struct proto_subscribe_telemetry sub = { .interval_ms = 250, .include_kernel_threads = true };
	struct proto_subscribe_telemetry got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_subscribe_telemetry_encode(&sub, &body, &len), 0);
	CHECK_INT_EQ(proto_subscribe_telemetry_decode(body, len, &got, &why), 0);
	CHECK_INT_EQ(got.interval_ms, 250);
	CHECK(got.include_kernel_threads);
	free(body);
	CHECK_INT_EQ(proto_subscribe_telemetry_decode(NULL, 0, &got, &why), 0);
	CHECK_INT_EQ(got.interval_ms, 1000);
	CHECK(!got.include_kernel_threads);
	CHECK_INT_EQ(proto_subscribe_telemetry_decode(BODY("{}"), &got, &why), 0);
	CHECK_INT_EQ(got.interval_ms, 1000);
	CHECK_INT_EQ(proto_subscribe_telemetry_decode(BODY("{\"interval_ms\":true}"), &got, &why),
		     -EPROTO);
}

static void test_telemetry_batch(void)
{
	struct proto_process_metrics procs[] = {
		{ .pid = 1, .comm = "init", .rss_bytes = 4096, .cpu_jiffies = 12, .state = 'S' },
		{ .pid = 77, .comm = "sh", .rss_bytes = 1, .cpu_jiffies = 0, .state = 'R' },
	};
	struct proto_telemetry_batch batch = {
		.seq = 3, .timestamp_ms = 1700000000000ull, .has_system = true,
		.system = { .cpu_percent = 12.5, .memory_used_bytes = 1u << 20,
			    .memory_total_bytes = 1u << 30, .net_rx_bytes = 10, .net_tx_bytes = 20,
			    .procs_running = 2, .open_fds = 99 },
		.processes = procs, .processes_count = 2,
	};
	struct proto_telemetry_batch got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_telemetry_batch_encode(&batch, &body, &len), 0);
	CHECK_INT_EQ(proto_telemetry_batch_decode(body, len, &got, &why), 0);
	CHECK_INT_EQ(got.seq, 3);
	CHECK_INT_EQ(got.timestamp_ms, 1700000000000ull);
	CHECK(got.has_system);
	CHECK(got.system.cpu_percent == 12.5);
	CHECK_INT_EQ(got.system.memory_total_bytes, 1u << 30);
	CHECK_INT_EQ(got.system.open_fds, 99);
	CHECK_INT_EQ(got.processes_count, 2);
	CHECK_STR_EQ(got.processes[1].comm, "sh");
	CHECK_INT_EQ(got.processes[1].state, 'R');
	CHECK(got.trace_context == NULL);
	proto_telemetry_batch_free(&got);
	free(body);

	batch.system.cpu_percent = NAN;
	CHECK_INT_EQ(proto_telemetry_batch_encode(&batch, &body, &len), 0);
	CHECK_INT_EQ(proto_telemetry_batch_decode(body, len, &got, &why), 0);
	CHECK(got.system.cpu_percent == 0.0);
	proto_telemetry_batch_free(&got);
	free(body);

	CHECK_INT_EQ(proto_telemetry_batch_decode(
			     BODY("{\"seq\":0,\"timestamp_ms\":1,\"system\":null,\"processes\":[],"
				  "\"trace_context\":\"t\"}"), &got, &why), 0);
	CHECK(!got.has_system);
	CHECK_STR_EQ(got.trace_context, "t");
	proto_telemetry_batch_free(&got);

	CHECK_INT_EQ(proto_telemetry_batch_decode(
			     BODY("{\"seq\":0,\"timestamp_ms\":1,\"processes\":[{\"pid\":1,"
				  "\"comm\":\"x\",\"rss_bytes\":0,\"cpu_jiffies\":0,\"state\":\"SS\"}]}"),
			     &got, &why), -EPROTO);
	CHECK_INT_EQ(proto_telemetry_batch_decode(
			     BODY("{\"seq\":0,\"timestamp_ms\":1,\"processes\":[{\"pid\":1},5]}"),
			     &got, &why), -EPROTO);
	CHECK_INT_EQ(proto_telemetry_batch_decode(
			     BODY("{\"seq\":0,\"timestamp_ms\":1,\"system\":{\"cpu_percent\":\"x\"}}"),
			     &got, &why), -EPROTO);
}

static void test_pty_messages(void)
{
	char *args[] = { "-c", "exit 3" };
	struct proto_pty_open open_msg = { .cols = 120, .rows = 40, .program = "sh", .args = args,
					   .args_count = 2, .interactive = true };
	struct proto_pty_open open_got;
	struct proto_pty_resize rs = { .cols = 65535, .rows = 1 }, rs_got;
	struct proto_pty_closed cl = { .exit_code = 130 }, cl_got;
	uint8_t *body;
	size_t len;
	const char *why;

	CHECK_INT_EQ(proto_pty_open_encode(&open_msg, &body, &len), 0);
	CHECK_INT_EQ(proto_pty_open_decode(body, len, &open_got, &why), 0);
	CHECK_INT_EQ(open_got.cols, 120);
	CHECK_INT_EQ(open_got.rows, 40);
	CHECK_STR_EQ(open_got.args[1], "exit 3");
	CHECK(open_got.interactive);
	CHECK_INT_EQ(open_got.env_count, 0);
	proto_pty_open_free(&open_got);
	free(body);
	CHECK_INT_EQ(proto_pty_open_decode(BODY("{\"cols\":80,\"rows\":24,\"program\":\"sh\"}"),
					   &open_got, &why), 0);
	CHECK(!open_got.interactive);
	proto_pty_open_free(&open_got);
	CHECK_INT_EQ(proto_pty_open_decode(BODY("{\"cols\":65536,\"rows\":24,\"program\":\"sh\"}"),
					   &open_got, &why), -EPROTO);

	CHECK_INT_EQ(proto_pty_resize_encode(&rs, &body, &len), 0);
	CHECK_INT_EQ(proto_pty_resize_decode(body, len, &rs_got, &why), 0);
	CHECK_INT_EQ(rs_got.cols, 65535);
	CHECK_INT_EQ(rs_got.rows, 1);
	free(body);

	CHECK_INT_EQ(proto_pty_closed_encode(&cl, &body, &len), 0);
	CHECK_INT_EQ(proto_pty_closed_decode(body, len, &cl_got, &why), 0);
	CHECK_INT_EQ(cl_got.exit_code, 130);
	free(body);
	CHECK_INT_EQ(proto_pty_closed_decode(BODY("{}"), &cl_got, &why), -EPROTO);
	CHECK(why && strstr(why, "PtyClosed") != NULL);
}

static void test_big_byte_array_cap(void)
{
	/* a base64 string whose decoded size exceeds the cap is refused before allocation */
	struct proto_bytes bytes;
	size_t text_len = (PROTO_MAX_PAYLOAD / 3 + 1) * 4;

	char *text = calloc(text_len, 1); /* zero pages: never touched by the decoder */

	CHECK_INT_EQ(proto_base64_decode(text, text_len, &bytes), -EMSGSIZE);
	free(text);
}

/* Builds {"success":true,"content":[7,7,...]} with count items. */
static char *int_array_reply(size_t count)
{
	const char head[] = "{\"success\":true,\"content\":[";
	size_t len = strlen(head) + 2 * count + 2;
	char *text = malloc(len + 1);
	char *p = text + strlen(head);

	memcpy(text, head, strlen(head));
	for (size_t i = 0; i < count; i++) {
		*p++ = '7';
		*p++ = ',';
	}
	p[-1] = ']';
	*p++ = '}';
	*p = '\0';
	return text;
}

/*
 * The integer-array byte form costs jansson tens of bytes per byte: a body with more values
 * than PROTO_JSON_VALUES_MAX is refused by name before it is parsed, while one under the
 * limit still decodes.
 */
static void test_json_value_cap(void)
{
	struct proto_read_file_response resp;
	const char *why = NULL;
	char *text = int_array_reply(PROTO_JSON_VALUES_MAX + 1);

	CHECK_INT_EQ(proto_read_file_response_decode(BODY(text), &resp, &why), -EPROTO);
	CHECK(why && strstr(why, "JSON values") != NULL);
	free(text);

	text = int_array_reply(PROTO_JSON_VALUES_MAX / 2);
	CHECK_INT_EQ(proto_read_file_response_decode(BODY(text), &resp, &why), 0);
	CHECK_INT_EQ(resp.content.len, PROTO_JSON_VALUES_MAX / 2);
	proto_read_file_response_free(&resp);
	free(text);

	/* separators inside strings are not values */
	CHECK_INT_EQ(proto_read_file_response_decode(
			     BODY("{\"success\":false,\"error\":\"a,b[c{\\\"d,\"}"), &resp, &why),
		     0);
	CHECK_STR_EQ(resp.error, "a,b[c{\"d,");
	proto_read_file_response_free(&resp);
}

/* The code beside the error: named on the wire, absent when none, unknown names tolerated. */
static void test_error_codes(void)
{
	struct proto_status_response status = { .success = false, .error = "refused",
						.code = PROTO_ERROR_DENIED };
	struct proto_status_response got;
	struct proto_exec_response exec;
	const char *why = NULL;
	uint8_t *body;
	size_t len;

	CHECK_INT_EQ(proto_status_response_encode(&status, &body, &len), 0);
	CHECK(memmem(body, len, "\"code\":\"denied\"", 15) != NULL);
	CHECK_INT_EQ(proto_status_response_decode(body, len, &got, &why), 0);
	CHECK_INT_EQ(got.code, PROTO_ERROR_DENIED);
	CHECK_STR_EQ(got.error, "refused");
	proto_status_response_free(&got);
	free(body);

	status = (struct proto_status_response){ .success = true };
	CHECK_INT_EQ(proto_status_response_encode(&status, &body, &len), 0);
	CHECK(memmem(body, len, "code", 4) == NULL);
	free(body);

	CHECK_INT_EQ(proto_status_response_decode(BODY("{\"success\":false,\"error\":\"x\"}"),
						  &got, &why), 0);
	CHECK_INT_EQ(got.code, PROTO_ERROR_NONE);
	proto_status_response_free(&got);
	CHECK_INT_EQ(proto_status_response_decode(
			     BODY("{\"success\":false,\"code\":\"on_fire\"}"), &got, &why), 0);
	CHECK_INT_EQ(got.code, PROTO_ERROR_UNKNOWN);
	proto_status_response_free(&got);
	CHECK_INT_EQ(proto_status_response_decode(BODY("{\"success\":false,\"code\":3}"), &got,
						  &why), -EPROTO);
	CHECK(why && strstr(why, "'code'") != NULL);
	CHECK_INT_EQ(proto_exec_response_decode(
			     BODY("{\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":-1,"
				  "\"error\":\"Process killed after 2s timeout\","
				  "\"code\":\"timed_out\"}"), &exec, &why), 0);
	CHECK_INT_EQ(exec.code, PROTO_ERROR_TIMED_OUT);
	proto_exec_response_free(&exec);

	CHECK_INT_EQ(proto_error_code_from_errno(-EXDEV), PROTO_ERROR_DENIED);
	CHECK_INT_EQ(proto_error_code_from_errno(ENOENT), PROTO_ERROR_NOT_FOUND);
	CHECK_INT_EQ(proto_error_code_from_errno(-EIO), PROTO_ERROR_FAILED);
	CHECK_INT_EQ(proto_error_code_from_errno(0), PROTO_ERROR_NONE);
	CHECK(proto_error_code_name(PROTO_ERROR_NONE) == NULL);
}

/* The rekey document: host and agent share this codec; every field is checked. */
static void test_rekey_document(void)
{
	struct proto_rekey rekey = { .seed_len = 64, .clock_ns = 1767225600123456789ULL }, back;
	const char *why = NULL;
	char *json = NULL;
	static const char *const refused[] = {
		"[]",
		"{\"secret_hex\":\"00\",\"rng_seed_b64\":\"AAAA\",\"clock_ns\":1}",
		"{\"secret_hex\":\"" "0000000000000000000000000000000000000000000000000000000000000000"
		"\",\"rng_seed_b64\":\"\",\"clock_ns\":1}",
		"{\"secret_hex\":\"" "0000000000000000000000000000000000000000000000000000000000000000"
		"\",\"rng_seed_b64\":\"AAAA\",\"clock_ns\":0}",
		"{\"secret_hex\":\"" "0000000000000000000000000000000000000000000000000000000000000000"
		"\",\"rng_seed_b64\":\"AAAA\",\"clock_ns\":\"1\"}",
		"{\"secret_hex\":\"" "0000000000000000000000000000000000000000000000000000000000000000"
		"\",\"rng_seed_b64\":\"!!!!\",\"clock_ns\":1}",
	};

	for (size_t i = 0; i < sizeof(rekey.secret); i++)
		rekey.secret[i] = (uint8_t)i;
	memset(rekey.seed, 0x42, rekey.seed_len);
	CHECK_INT_EQ(proto_rekey_encode(&rekey, &json), 0);
	CHECK(json != NULL);
	CHECK_INT_EQ(proto_rekey_decode((const uint8_t *)json, strlen(json), &back, &why), 0);
	CHECK(memcmp(&rekey, &back, sizeof(rekey)) == 0);
	free(json);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		why = NULL;
		CHECK_INT_EQ(proto_rekey_decode((const uint8_t *)refused[i], strlen(refused[i]), &back,
						&why), -EINVAL);
		CHECK(why != NULL);
	}
	/* a seed longer than 256 bytes is refused on both sides */
	rekey.seed_len = PROTO_REKEY_SEED_MAX + 1;
	CHECK_INT_EQ(proto_rekey_encode(&rekey, &json), -EINVAL);
}

/* Restamping keeps the secret and seed and replaces only the clock; a non-document is refused. */
static void test_rekey_restamp(void)
{
	struct proto_rekey rekey = { .seed_len = 32, .clock_ns = 1000 }, back;
	const char *why = NULL;
	char *json = NULL, *stamped = NULL;

	memset(rekey.secret, 0x5a, sizeof(rekey.secret));
	memset(rekey.seed, 0x17, rekey.seed_len);
	CHECK_INT_EQ(proto_rekey_encode(&rekey, &json), 0);
	CHECK(json != NULL);
	if (!json)
		return;
	CHECK_INT_EQ(proto_rekey_restamp((const uint8_t *)json, strlen(json),
					 1767225600123456789ULL, &stamped), 0);
	CHECK(stamped != NULL);
	if (stamped) {
		CHECK_INT_EQ(proto_rekey_decode((const uint8_t *)stamped, strlen(stamped), &back,
						&why), 0);
		CHECK(back.clock_ns == 1767225600123456789ULL);
		CHECK(memcmp(back.secret, rekey.secret, sizeof(rekey.secret)) == 0);
		CHECK(back.seed_len == rekey.seed_len &&
		      memcmp(back.seed, rekey.seed, rekey.seed_len) == 0);
	}
	free(stamped);
	CHECK_INT_EQ(proto_rekey_restamp((const uint8_t *)json, strlen(json), 0, &stamped), -EINVAL);
	CHECK(stamped == NULL);
	CHECK_INT_EQ(proto_rekey_restamp((const uint8_t *)"[]", 2, 1, &stamped), -EINVAL);
	CHECK(stamped == NULL);
	free(json);
}

int main(void)
{
	RUN_TEST(test_exec_request_roundtrip);
	RUN_TEST(test_exec_request_defaults);
	RUN_TEST(test_exec_request_hostile);
	RUN_TEST(test_exec_response_roundtrip);
	RUN_TEST(test_exec_output_chunk);
	RUN_TEST(test_write_file);
	RUN_TEST(test_status_and_path);
	RUN_TEST(test_read_file_and_stat);
	RUN_TEST(test_set_policy);
	RUN_TEST(test_subscribe_telemetry);
	RUN_TEST(test_telemetry_batch);
	RUN_TEST(test_pty_messages);
	RUN_TEST(test_big_byte_array_cap);
	RUN_TEST(test_json_value_cap);
	RUN_TEST(test_error_codes);
	RUN_TEST(test_rekey_document);
	RUN_TEST(test_rekey_restamp);
	return harness_finish();
}
