/*
 * Writes the proto_frame seed corpus: one file per interesting stream, each a flags byte
 * (bit 0: multiplexed) followed by frames built with the real encoders, so the seeds stay
 * valid whenever the codecs change. Run: proto_frame_seeds fuzz/corpus/proto_frame
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/protocol.h"

#define SEED_MAX (64 * 1024)
#define SEED_MULTIPLEXED 0x01u
#define SEED_TIMED_READ 0x02u
#define SEED_INT_ARRAY_ITEMS 2000
#define SEED_STALLED_LENGTH 1000
#define SEED_STALLED_SENT 10

struct seed {
	uint8_t data[SEED_MAX];
	size_t len;
};

static void seed_begin(struct seed *seed, bool multiplexed)
{
	seed->data[0] = multiplexed ? SEED_MULTIPLEXED : 0;
	seed->len = 1;
}

static void seed_frame(struct seed *seed, uint8_t type, uint32_t id, const void *body,
		       size_t len)
{
	bool with_id = seed->data[0] & SEED_MULTIPLEXED && type != PROTO_MSG_PING &&
		       type != PROTO_MSG_PONG && type != PROTO_MSG_CHALLENGE;
	size_t prefix = with_id ? PROTO_REQUEST_ID_SIZE : 0;
	uint8_t *p = seed->data + seed->len;

	if (seed->len + PROTO_HEADER_SIZE + prefix + len > SEED_MAX)
		abort();
	proto_header_build(p, (uint32_t)(len + prefix), type);
	p += PROTO_HEADER_SIZE;
	for (size_t i = 0; i < prefix; i++)
		*p++ = (uint8_t)(id >> (8 * i));
	if (len)
		memcpy(p, body, len);
	seed->len += PROTO_HEADER_SIZE + prefix + len;
}

/* Frames a heap body from an encoder and frees it. */
static void seed_owned(struct seed *seed, uint8_t type, uint32_t id, uint8_t *body, size_t len)
{
	seed_frame(seed, type, id, body, len);
	free(body);
}

static int seed_write(const char *dir, const char *name, const struct seed *seed)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.seed", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(seed->data, 1, seed->len, f) != seed->len) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	return fclose(f) == 0 ? 0 : -1;
}

static void seed_exec(struct seed *seed)
{
	char *args[] = { "-c", "echo hi; exit 3" };
	struct proto_env_var env[] = { { "HOME", "/home/sandbox" } };
	struct proto_exec_request req = { .program = "sh", .args = args, .args_count = 2,
					  .stdin_data = { (uint8_t *)"in\0put", 6 }, .env = env,
					  .env_count = 1, .working_dir = "/workspace",
					  .has_timeout = true, .timeout_secs = 5 };
	struct proto_exec_output_chunk chunk = { .stream = PROTO_STREAM_STDERR,
						 .data = { (uint8_t *)"warn\n", 5 }, .seq = 0 };
	struct proto_exec_response resp = { .stdout_data = { (uint8_t *)"hi\n", 3 },
					    .exit_code = 3, .has_duration = true,
					    .duration_ms = 12 };
	uint8_t *body;
	size_t len;

	seed_begin(seed, true);
	proto_exec_request_encode(&req, &body, &len);
	seed_owned(seed, PROTO_MSG_EXEC_REQUEST, 1, body, len);
	proto_exec_output_chunk_encode(&chunk, &body, &len);
	seed_owned(seed, PROTO_MSG_EXEC_OUTPUT_CHUNK, 1, body, len);
	proto_exec_response_encode(&resp, &body, &len);
	seed_owned(seed, PROTO_MSG_EXEC_RESPONSE, 1, body, len);
}

static void seed_files(struct seed *seed)
{
	struct proto_write_file wf = { .path = "/workspace/a.txt",
				       .content = { (uint8_t *)"abc", 3 }, .create_parents = true };
	struct proto_status_response st = { .success = false, .error = "Refusing write",
					    .code = PROTO_ERROR_DENIED };
	struct proto_path_request pr = { .path = "/workspace/a.txt" };
	struct proto_read_file_response rf = { .success = true,
					       .content = { (uint8_t *)"abc", 3 } };
	struct proto_file_stat_response fs = { .exists = true, .has_size = true, .size = 3 };
	uint8_t *body;
	size_t len;

	seed_begin(seed, true);
	proto_write_file_encode(&wf, &body, &len);
	seed_owned(seed, PROTO_MSG_WRITE_FILE, 2, body, len);
	proto_status_response_encode(&st, &body, &len);
	seed_owned(seed, PROTO_MSG_WRITE_FILE_RESPONSE, 2, body, len);
	proto_path_request_encode(&pr, &body, &len);
	seed_owned(seed, PROTO_MSG_READ_FILE, 3, body, len);
	proto_read_file_response_encode(&rf, &body, &len);
	seed_owned(seed, PROTO_MSG_READ_FILE_RESPONSE, 3, body, len);
	proto_file_stat_response_encode(&fs, &body, &len);
	seed_owned(seed, PROTO_MSG_FILE_STAT_RESPONSE, 4, body, len);
}

/* The rekey document a restored guest receives, as a frame body the fuzzer decodes. */
static void seed_rekey(struct seed *seed)
{
	struct proto_rekey rekey = { .seed_len = 64, .clock_ns = 1767225600000000000ULL };
	char *json = NULL;

	memset(rekey.secret, 0x5a, sizeof(rekey.secret));
	memset(rekey.seed, 0xa5, rekey.seed_len);
	seed_begin(seed, true);
	if (proto_rekey_encode(&rekey, &json) == 0)
		seed_frame(seed, PROTO_MSG_WRITE_FILE, 6, json, strlen(json));
	free(json);
}

static void seed_telemetry(struct seed *seed)
{
	struct proto_process_metrics proc = { .pid = 1, .comm = "init", .rss_bytes = 4096,
					      .cpu_jiffies = 7, .state = 'S' };
	struct proto_telemetry_batch batch = {
		.seq = 1, .timestamp_ms = 1700000000000ull, .has_system = true,
		.system = { .cpu_percent = 3.5, .memory_used_bytes = 1000,
			    .memory_total_bytes = 2000, .procs_running = 1, .open_fds = 5 },
		.processes = &proc, .processes_count = 1,
	};
	struct proto_subscribe_telemetry sub = { .interval_ms = 100 };
	uint8_t *body;
	size_t len;

	seed_begin(seed, true);
	seed_frame(seed, PROTO_MSG_SUBSCRIBE_TELEMETRY, 5, NULL, 0);
	proto_subscribe_telemetry_encode(&sub, &body, &len);
	seed_owned(seed, PROTO_MSG_SUBSCRIBE_TELEMETRY, 6, body, len);
	proto_telemetry_batch_encode(&batch, &body, &len);
	seed_owned(seed, PROTO_MSG_TELEMETRY_DATA, 5, body, len);
}

static void seed_pty(struct seed *seed)
{
	struct proto_pty_open open_msg = { .cols = 80, .rows = 24, .program = "sh",
					   .interactive = true };
	struct proto_pty_resize resize = { .cols = 120, .rows = 40 };
	struct proto_pty_closed closed = { .exit_code = 130 };
	uint8_t *body;
	size_t len;

	seed_begin(seed, true);
	proto_pty_open_encode(&open_msg, &body, &len);
	seed_owned(seed, PROTO_MSG_PTY_OPEN, 1, body, len);
	seed_frame(seed, PROTO_MSG_PTY_DATA, 1, "ls\r\n\x1b[A", 7);
	proto_pty_resize_encode(&resize, &body, &len);
	seed_owned(seed, PROTO_MSG_PTY_RESIZE, 1, body, len);
	seed_frame(seed, PROTO_MSG_PTY_CLOSE, 1, NULL, 0);
	proto_pty_closed_encode(&closed, &body, &len);
	seed_owned(seed, PROTO_MSG_PTY_CLOSED, 1, body, len);
}

static void seed_handshake(struct seed *seed)
{
	struct proto_ping ping = { .version = PROTO_VERSION, .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	struct proto_pong pong = { .version = PROTO_VERSION, .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	uint8_t ping_body[PROTO_PING_SIZE], pong_body[PROTO_PONG_SIZE];
	uint8_t nonce[PROTO_NONCE_SIZE];

	memset(nonce, 0xcd, sizeof(nonce));
	memset(ping.proof, 0xab, sizeof(ping.proof));
	proto_ping_encode(&ping, ping_body);
	proto_pong_encode(&pong, pong_body);
	seed_begin(seed, false);
	seed_frame(seed, PROTO_MSG_CHALLENGE, 0, nonce, sizeof(nonce));
	seed_frame(seed, PROTO_MSG_PING, 0, ping_body, sizeof(ping_body));
	seed_frame(seed, PROTO_MSG_PONG, 0, pong_body, sizeof(pong_body));
	seed_frame(seed, PROTO_MSG_SNAPSHOT_READY, 0, NULL, 0);
}

/* Upstream's form: bytes as arrays of integers, absent options as null. */
static void seed_upstream_json(struct seed *seed)
{
	static const char exec[] = "{\"program\":\"cat\",\"args\":[],\"stdin\":[104,105,0,255],"
				   "\"env\":[[\"A\",\"B\"]],\"working_dir\":null,"
				   "\"timeout_secs\":null}";
	static const char resp[] = "{\"stdout\":[104,105],\"stderr\":[],\"exit_code\":0,"
				   "\"error\":null,\"duration_ms\":3}";

	seed_begin(seed, true);
	seed_frame(seed, PROTO_MSG_EXEC_REQUEST, 9, exec, strlen(exec));
	seed_frame(seed, PROTO_MSG_EXEC_RESPONSE, 9, resp, strlen(resp));
}

/*
 * For the JSON value count and the timed fd reader: separators inside strings (escaped quotes
 * too), a byte array of a few thousand values, then a frame announcing more than follows.
 */
static void seed_json_values(struct seed *seed)
{
	static const char error[] = "{\"success\":false,\"error\":\"a,[b{\\\"c,]\"}";
	static char array[8 * SEED_INT_ARRAY_ITEMS];
	size_t len = (size_t)snprintf(array, sizeof(array), "{\"success\":true,\"content\":[");
	uint8_t stalled[PROTO_HEADER_SIZE + SEED_STALLED_SENT] = { 0 };

	for (int i = 0; i < SEED_INT_ARRAY_ITEMS; i++)
		len += (size_t)snprintf(array + len, sizeof(array) - len, "%d,", i % 256);
	snprintf(array + len - 1, sizeof(array) - len + 1, "]}");
	seed_begin(seed, true);
	seed->data[0] |= SEED_TIMED_READ;
	seed_frame(seed, PROTO_MSG_READ_FILE_RESPONSE, 4, error, strlen(error));
	seed_frame(seed, PROTO_MSG_READ_FILE_RESPONSE, 5, array, strlen(array));
	proto_header_build(stalled, SEED_STALLED_LENGTH, PROTO_MSG_EXEC_OUTPUT_CHUNK);
	memcpy(seed->data + seed->len, stalled, sizeof(stalled));
	seed->len += sizeof(stalled);
}

int main(int argc, char **argv)
{
	static struct seed seed;
	static const struct {
		const char *name;
		void (*build)(struct seed *);
	} seeds[] = {
		{ "exec", seed_exec },           { "files", seed_files },
		{ "telemetry", seed_telemetry }, { "pty", seed_pty },
		{ "handshake", seed_handshake }, { "upstream-json", seed_upstream_json },
		{ "json-values", seed_json_values }, { "rekey", seed_rekey },
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		seeds[i].build(&seed);
		if (seed_write(argv[1], seeds[i].name, &seed) < 0)
			return 1;
	}
	return 0;
}
