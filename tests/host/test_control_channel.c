/*
 * Control-channel tests against a scripted in-process agent. A fake agent, rather than the
 * real one, lets each test force exactly the situation under test: a Pong of the wrong
 * version, replies in reverse order, a reply for an id never issued, a connection that dies
 * with calls in flight, silence until a timeout. The connect callback hands one end of a
 * socketpair to a fresh agent thread per connection, so reconnects are observable.
 */
#include "host/control_channel.h"
#include "common/log.h"
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* the liveness check's answer time in the tests that exercise it */
#define TEST_LIVENESS_MS 1000
/* a Shutdown the fake agent answers by ending the connection, and one it never answers */
#define TEST_SHUTDOWN_LONG_WAIT_MS 5000
#define TEST_SHUTDOWN_WAIT_MS 300
#define FAKE_MAX_CONNECTIONS 64
#define FAKE_CONCURRENT_CALLS 16
#define FAKE_SHORT_DEADLINE_MS 400
#define FAKE_SLOW_EXEC_MS 2500
#define FAKE_POLL_MS 50
#define FAKE_FLOOD_CHUNKS 48
#define FAKE_FLOOD_CHUNK_BYTES (1024 * 1024)
#define FAKE_STALL_BYTES 2
#define FAKE_STALL_DECLARED_BYTES 64
/*
 * Chunks the flood may get out while its caller sleeps: 8 MiB of queue (six encoded chunks),
 * the chunk that crossed the bound, the one being read and the socket buffers.
 */
#define FAKE_FLOOD_HELD_MAX 12
/* undecodable output chunks a hostile agent sends, and the warnings the host may log of them */
#define FAKE_MALFORMED_COUNT 200
#define TEST_MALFORMED_WARNINGS_MAX 4
/* how long a test waits for a call that must end before calling it hung */
#define HANG_LIMIT_SECS 20
/* a guest that takes its input slowly: this much every interval, and never answers */
#define FAKE_DRAIN_BYTES (32 * 1024)
#define FAKE_DRAIN_INTERVAL_MS 3000
/* a frame many socket buffers long, and the calls that must not wait behind it */
#define TEST_BIG_WRITE_BYTES (8u * 1024 * 1024)
#define TEST_BIG_WRITE_TIMEOUT_MS 1000
#define TEST_PING_TIMEOUT_MS 500
#define TEST_UNANSWERED_PING_MS 300
/* how long after its deadline a bounded call may take to return */
#define TEST_RETURN_SLACK_MS 1000
#define SLOW_DRAIN_LIMIT_SECS 6
/*
 * Frames the host skips while it waits: one every interval, never what it waits for. Each
 * wait's deadline falls midway between two of them (10 s after 9 s, 400 ms after 320 ms), so
 * no frame is still arriving as the deadline passes.
 */
#define FAKE_CHATTER_SLOW_MS 3000
#define FAKE_CHATTER_FAST_MS 160
/* the host's wait for PtyOpened (PTY_OPENED_TIMEOUT_MS in control_channel_pty.c) */
#define TEST_PTY_OPENED_TIMEOUT_MS 10000
#define PTY_OPEN_LIMIT_SECS 14
#define PTY_READ_LIMIT_SECS 5
/* what a hostile agent's frame before authentication declares: far over the 1 KiB cap */
#define FAKE_OVERSIZED_BYTES (1024u * 1024u)
#define CONTROL_CHANNEL_ERROR_TEXT_MAX 512
enum fake_mode {
	FAKE_NORMAL,        /* answers every request at once */
	FAKE_PONG_V1,       /* Pong version 1 */
	FAKE_PONG_NO_MUX,   /* Pong v2 without the multiplex flag */
	FAKE_REVERSE_PAIRS, /* collects two requests, answers the second first */
	FAKE_DIE_ON_EXEC,   /* closes the connection when an exec arrives */
	FAKE_SILENT,        /* handshakes, then never answers */
	FAKE_STRAY_ID,      /* precedes every reply with one for an id never issued */
	FAKE_SLOW_EXEC,     /* answers an exec FAKE_SLOW_EXEC_MS late, everything else at once */
	FAKE_HALF_PONG,     /* answers Ping with two bytes of a header, then nothing */
	FAKE_FLOOD,         /* answers an exec with FAKE_FLOOD_CHUNKS large output chunks */
	FAKE_PTY_STALL,     /* opens a PTY, then sends two bytes of a frame and stops */
	FAKE_NO_CHALLENGE,  /* an agent of protocol 2: waits for Ping without a Challenge */
	FAKE_DROP_WRITES,   /* never answers a WriteFile, everything else at once */
	FAKE_SLOW_DRAIN,    /* reads FAKE_DRAIN_BYTES every FAKE_DRAIN_INTERVAL_MS, answers nothing */
	FAKE_PTY_NEVER_OPENS, /* answers PtyOpen with other frames only, one every 3 s */
	FAKE_PTY_CHATTER,   /* opens a PTY, then sends frames a reader skips, many a second */
	FAKE_BIG_CHALLENGE, /* a Challenge header declaring FAKE_OVERSIZED_BYTES, then nothing */
	FAKE_BIG_PONG,      /* answers Ping with a Pong header declaring FAKE_OVERSIZED_BYTES */
	FAKE_MALFORMED_CHUNKS, /* answers an exec with FAKE_MALFORMED_COUNT undecodable chunks */
};

struct fake_agent {
	enum fake_mode mode;
	uint8_t secret[PROTO_SECRET_SIZE];
	atomic_int connections;
	atomic_int requests;
	atomic_int chunks_sent;
	atomic_long bytes_drained; /* FAKE_SLOW_DRAIN: what the host got through */
	atomic_int secret_on_wire; /* handshakes whose Ping held the secret's bytes */
	atomic_uint nonce_counter; /* makes every Challenge differ */
	pthread_mutex_t lock;
	pthread_t threads[FAKE_MAX_CONNECTIONS];
	int fds[FAKE_MAX_CONNECTIONS];
	int thread_count;
};

struct fake_conn {
	struct fake_agent *agent;
	int fd;
};

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void fake_send_json(int fd, uint8_t type, uint32_t id, uint8_t *body, size_t len)
{
	proto_frame_write(fd, type, true, id, body, len);
	free(body);
}

/*
 * Sends the first sent_bytes of a header declaring declared_len bytes of type, and then
 * nothing, until the host hangs up.
 */
static void fake_stall_until_eof(int fd, uint8_t type, uint32_t declared_len, size_t sent_bytes)
{
	uint8_t header[PROTO_HEADER_SIZE], scratch[256];

	proto_header_build(header, declared_len, type);
	/* the host may have hung up already (a cancelled connect): EPIPE, not SIGPIPE */
	if (send(fd, header, sent_bytes, MSG_NOSIGNAL) != (ssize_t)sent_bytes)
		return;
	while (read(fd, scratch, sizeof(scratch)) > 0)
		;
}

/* Waits up to ms; whether the host hung up meanwhile (buffered input does not count). */
static bool fake_host_hung_up(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLRDHUP };

	return poll(&pfd, 1, ms) > 0;
}

/* Takes FAKE_DRAIN_BYTES every FAKE_DRAIN_INTERVAL_MS and answers nothing, until hung up on. */
static void fake_drain_slowly(struct fake_agent *agent, int fd)
{
	uint8_t *scratch = malloc(FAKE_DRAIN_BYTES);
	ssize_t n;

	while ((n = read(fd, scratch, FAKE_DRAIN_BYTES)) > 0) {
		atomic_fetch_add(&agent->bytes_drained, n);
		if (fake_host_hung_up(fd, FAKE_DRAIN_INTERVAL_MS))
			break;
	}
	free(scratch);
}

/* Sends a frame a PTY reader skips (SnapshotReady) every interval_ms until hung up on. */
static void fake_chatter_until_eof(int fd, int interval_ms)
{
	do
		if (proto_frame_write(fd, PROTO_MSG_SNAPSHOT_READY, true, 1, NULL, 0) < 0)
			return;
	while (!fake_host_hung_up(fd, interval_ms));
}

/* FAKE_FLOOD_CHUNKS chunks of FAKE_FLOOD_CHUNK_BYTES as fast as the host takes them. */
static void fake_flood_exec(struct fake_agent *agent, int fd, uint32_t request_id)
{
	struct proto_exec_output_chunk chunk = { .stream = PROTO_STREAM_STDOUT };
	struct proto_exec_response resp = { .exit_code = 0 };
	uint8_t *body;
	size_t len;

	chunk.data.data = calloc(1, FAKE_FLOOD_CHUNK_BYTES);
	chunk.data.len = FAKE_FLOOD_CHUNK_BYTES;
	proto_exec_output_chunk_encode(&chunk, &body, &len);
	free(chunk.data.data);
	for (int i = 0; i < FAKE_FLOOD_CHUNKS; i++) {
		if (proto_frame_write(fd, PROTO_MSG_EXEC_OUTPUT_CHUNK, true, request_id, body,
				      len) < 0)
			break;
		atomic_fetch_add(&agent->chunks_sent, 1);
	}
	free(body);
	proto_exec_response_encode(&resp, &body, &len);
	fake_send_json(fd, PROTO_MSG_EXEC_RESPONSE, request_id, body, len);
}

/* FAKE_MALFORMED_COUNT output chunks that are not JSON, then a success. */
static void fake_malformed_exec(int fd, uint32_t request_id)
{
	static const char garbage[] = "not a chunk";
	struct proto_exec_response resp = { .exit_code = 0 };
	uint8_t *body;
	size_t len;

	for (int i = 0; i < FAKE_MALFORMED_COUNT; i++)
		if (proto_frame_write(fd, PROTO_MSG_EXEC_OUTPUT_CHUNK, true, request_id, garbage,
				      sizeof(garbage) - 1) < 0)
			return;
	proto_exec_response_encode(&resp, &body, &len);
	fake_send_json(fd, PROTO_MSG_EXEC_RESPONSE, request_id, body, len);
}

static void fake_reply_exec(int fd, struct proto_frame *req)
{
	struct proto_exec_request exec;
	struct proto_exec_response resp = { .exit_code = 0 };
	struct proto_exec_output_chunk chunk = { .stream = PROTO_STREAM_STDOUT };
	const char *why;
	uint8_t *body;
	size_t len;

	if (proto_exec_request_decode(req->body, req->body_len, &exec, &why) < 0)
		return;
	/* two chunks "<program>" and "-<args[0]>", then the whole output */
	chunk.data.data = (uint8_t *)exec.program;
	chunk.data.len = strlen(exec.program);
	proto_exec_output_chunk_encode(&chunk, &body, &len);
	fake_send_json(fd, PROTO_MSG_EXEC_OUTPUT_CHUNK, req->request_id, body, len);
	chunk.seq = 1;
	chunk.data.data = (uint8_t *)(exec.args_count ? exec.args[0] : "");
	chunk.data.len = strlen((char *)chunk.data.data);
	proto_exec_output_chunk_encode(&chunk, &body, &len);
	fake_send_json(fd, PROTO_MSG_EXEC_OUTPUT_CHUNK, req->request_id, body, len);
	resp.stdout_data.data = (uint8_t *)exec.program;
	resp.stdout_data.len = strlen(exec.program);
	resp.exit_code = (int32_t)exec.args_count;
	proto_exec_response_encode(&resp, &body, &len);
	fake_send_json(fd, PROTO_MSG_EXEC_RESPONSE, req->request_id, body, len);
	proto_exec_request_free(&exec);
}

/* FileStat answers with size = length of the path, so each caller can check its own reply. */
static void fake_reply(struct fake_conn *fc, struct proto_frame *req)
{
	struct proto_path_request path;
	struct proto_file_stat_response stat = { .exists = true, .has_size = true };
	struct proto_status_response status = { .success = true };
	struct proto_read_file_response read = { .success = true };
	const char *why;
	uint8_t *body;
	size_t len;

	if (fc->agent->mode == FAKE_STRAY_ID)
		proto_frame_write(fc->fd, PROTO_MSG_SNAPSHOT_READY, true, 0xdeadbeef, NULL, 0);
	switch (req->type) {
	case PROTO_MSG_EXEC_REQUEST:
		if (fc->agent->mode == FAKE_FLOOD)
			fake_flood_exec(fc->agent, fc->fd, req->request_id);
		else if (fc->agent->mode == FAKE_MALFORMED_CHUNKS)
			fake_malformed_exec(fc->fd, req->request_id);
		else
			fake_reply_exec(fc->fd, req);
		break;
	case PROTO_MSG_PTY_OPEN:
		if (fc->agent->mode == FAKE_PTY_NEVER_OPENS) {
			fake_chatter_until_eof(fc->fd, FAKE_CHATTER_SLOW_MS);
			break;
		}
		proto_status_response_encode(&status, &body, &len);
		fake_send_json(fc->fd, PROTO_MSG_PTY_OPENED, req->request_id, body, len);
		if (fc->agent->mode == FAKE_PTY_STALL)
			fake_stall_until_eof(fc->fd, PROTO_MSG_PTY_DATA, FAKE_STALL_DECLARED_BYTES,
				     FAKE_STALL_BYTES);
		if (fc->agent->mode == FAKE_PTY_CHATTER)
			fake_chatter_until_eof(fc->fd, FAKE_CHATTER_FAST_MS);
		break;
	case PROTO_MSG_FILE_STAT:
		proto_path_request_decode(req->body, req->body_len, &path, &why);
		stat.size = strlen(path.path);
		proto_path_request_free(&path);
		proto_file_stat_response_encode(&stat, &body, &len);
		fake_send_json(fc->fd, PROTO_MSG_FILE_STAT_RESPONSE, req->request_id, body, len);
		break;
	case PROTO_MSG_READ_FILE:
		proto_path_request_decode(req->body, req->body_len, &path, &why);
		/* the sentences avoid the agent's usual words: the host must go by the code */
		if (strcmp(path.path, "/missing") == 0) {
			read.success = false;
			read.error = "gone";
			read.code = PROTO_ERROR_NOT_FOUND;
		}
		if (strcmp(path.path, "/uncoded") == 0) {
			read.success = false;
			read.error = "Refusing: No such file";
		}
		read.content.data = (uint8_t *)path.path;
		read.content.len = strlen(path.path);
		proto_read_file_response_encode(&read, &body, &len);
		proto_path_request_free(&path);
		fake_send_json(fc->fd, PROTO_MSG_READ_FILE_RESPONSE, req->request_id, body, len);
		break;
	case PROTO_MSG_WRITE_FILE:
	case PROTO_MSG_MKDIR_P:
		proto_path_request_decode(req->body, req->body_len, &path, &why);
		if (!path.path || strncmp(path.path, "/workspace", 10) != 0) {
			status.success = false;
			status.error = "outside the roots";
			status.code = PROTO_ERROR_DENIED;
		}
		proto_path_request_free(&path);
		proto_status_response_encode(&status, &body, &len);
		fake_send_json(fc->fd, req->type + 1, req->request_id, body, len);
		break;
	case PROTO_MSG_SNAPSHOT_READY:
		proto_frame_write(fc->fd, PROTO_MSG_SNAPSHOT_READY, true, req->request_id, NULL, 0);
		break;
	default:
		break;
	}
}

static bool fake_handshake(struct fake_conn *fc)
{
	struct proto_frame frame;
	struct proto_ping ping;
	struct proto_pong pong = { .version = PROTO_VERSION, .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	uint8_t body[PROTO_PONG_SIZE], nonce[PROTO_NONCE_SIZE] = { 0 }, proof[PROTO_PROOF_SIZE];
	unsigned int serial = atomic_fetch_add(&fc->agent->nonce_counter, 1);

	memcpy(nonce, &serial, sizeof(serial));
	if (fc->agent->mode == FAKE_BIG_CHALLENGE) {
		fake_stall_until_eof(fc->fd, PROTO_MSG_CHALLENGE, FAKE_OVERSIZED_BYTES,
				     PROTO_HEADER_SIZE);
		return false;
	}
	if (fc->agent->mode != FAKE_NO_CHALLENGE &&
	    proto_frame_write(fc->fd, PROTO_MSG_CHALLENGE, false, 0, nonce, sizeof(nonce)) < 0)
		return false;
	if (proto_frame_read(fc->fd, false, &frame) < 0)
		return false;
	if (memmem(frame.body, frame.body_len, fc->agent->secret, PROTO_SECRET_SIZE))
		atomic_fetch_add(&fc->agent->secret_on_wire, 1);
	proto_ping_decode(frame.body, frame.body_len, &ping);
	proto_frame_free(&frame);
	proto_handshake_proof(fc->agent->secret, nonce, proof);
	if (!proto_secret_equal(ping.proof, proof) ||
	    !(ping.flags & PROTO_FLAG_SUPPORTS_MULTIPLEX))
		return false;
	if (fc->agent->mode == FAKE_HALF_PONG) {
		fake_stall_until_eof(fc->fd, PROTO_MSG_PTY_DATA, FAKE_STALL_DECLARED_BYTES,
				     FAKE_STALL_BYTES);
		return false;
	}
	if (fc->agent->mode == FAKE_BIG_PONG) {
		fake_stall_until_eof(fc->fd, PROTO_MSG_PONG, FAKE_OVERSIZED_BYTES,
				     PROTO_HEADER_SIZE);
		return false;
	}
	if (fc->agent->mode == FAKE_PONG_V1)
		pong.version = 1;
	if (fc->agent->mode == FAKE_PONG_NO_MUX)
		pong.flags = 0;
	proto_pong_encode(&pong, body);
	return proto_frame_write(fc->fd, PROTO_MSG_PONG, false, 0, body, sizeof(body)) == 0;
}

static void *fake_serve(void *arg)
{
	struct fake_conn *fc = arg;
	struct proto_frame held = { 0 }, frame;
	bool holding = false;

	struct proto_frame slow_exec = { 0 };
	long long slow_exec_due = 0;
	int rc;

	if (!fake_handshake(fc))
		goto out;
	if (fc->agent->mode == FAKE_SLOW_DRAIN) {
		fake_drain_slowly(fc->agent, fc->fd);
		goto out;
	}
	if (fc->agent->mode == FAKE_SLOW_EXEC) {
		struct timeval poll = { .tv_usec = FAKE_POLL_MS * 1000 };

		setsockopt(fc->fd, SOL_SOCKET, SO_RCVTIMEO, &poll, sizeof(poll));
	}
	while ((rc = proto_frame_read(fc->fd, true, &frame)) == 0 || rc == -ETIMEDOUT ||
	       rc == -EAGAIN) {
		if (slow_exec_due && now_ms() >= slow_exec_due) {
			fake_reply(fc, &slow_exec);
			proto_frame_free(&slow_exec);
			slow_exec_due = 0;
		}
		if (rc != 0)
			continue;
		atomic_fetch_add(&fc->agent->requests, 1);
		if (fc->agent->mode == FAKE_SLOW_EXEC && frame.type == PROTO_MSG_EXEC_REQUEST) {
			slow_exec = frame;
			slow_exec_due = now_ms() + FAKE_SLOW_EXEC_MS;
			continue;
		}
		if (fc->agent->mode == FAKE_SILENT ||
		    (fc->agent->mode == FAKE_DROP_WRITES && frame.type == PROTO_MSG_WRITE_FILE)) {
			proto_frame_free(&frame);
			continue;
		}
		if (frame.type == PROTO_MSG_SHUTDOWN) {
			/* as the agent as PID 1: sync, then end the connection, then power off */
			proto_frame_free(&frame);
			break;
		}
		if (fc->agent->mode == FAKE_DIE_ON_EXEC && frame.type == PROTO_MSG_EXEC_REQUEST) {
			proto_frame_free(&frame);
			break;
		}
		if (fc->agent->mode == FAKE_REVERSE_PAIRS && !holding) {
			held = frame;
			holding = true;
			continue;
		}
		fake_reply(fc, &frame);
		proto_frame_free(&frame);
		if (holding) {
			fake_reply(fc, &held);
			proto_frame_free(&held);
			holding = false;
		}
	}
out:
	if (holding)
		proto_frame_free(&held);
	if (slow_exec_due)
		proto_frame_free(&slow_exec);
	shutdown(fc->fd, SHUT_RDWR);
	free(fc);
	return NULL;
}

static int fake_connect(void *opaque, int timeout_ms)
{
	struct fake_agent *agent = opaque;
	struct fake_conn *fc;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	fc = calloc(1, sizeof(*fc));
	fc->agent = agent;
	fc->fd = sv[1];
	pthread_mutex_lock(&agent->lock);
	if (agent->thread_count == FAKE_MAX_CONNECTIONS) {
		pthread_mutex_unlock(&agent->lock);
		close(sv[0]);
		close(sv[1]);
		free(fc);
		return -EMFILE;
	}
	agent->fds[agent->thread_count] = sv[1];
	pthread_create(&agent->threads[agent->thread_count++], NULL, fake_serve, fc);
	pthread_mutex_unlock(&agent->lock);
	atomic_fetch_add(&agent->connections, 1);
	return sv[0];
}

static void fake_init(struct fake_agent *agent, enum fake_mode mode)
{
	memset(agent, 0, sizeof(*agent));
	agent->mode = mode;
	for (int i = 0; i < PROTO_SECRET_SIZE; i++)
		agent->secret[i] = (uint8_t)(0x40 + i);
	pthread_mutex_init(&agent->lock, NULL);
}

static void fake_finish(struct fake_agent *agent)
{
	for (int i = 0; i < agent->thread_count; i++) {
		pthread_join(agent->threads[i], NULL);
		close(agent->fds[i]);
	}
	pthread_mutex_destroy(&agent->lock);
}

static struct control_channel *channel_with(struct fake_agent *agent, int deadline_ms,
					    int liveness_timeout_ms)
{
	struct control_channel_config cfg = {
		.connect = fake_connect, .connect_opaque = agent,
		.connect_deadline_ms = deadline_ms, .liveness_timeout_ms = liveness_timeout_ms,
	};

	memcpy(cfg.secret, agent->secret, PROTO_SECRET_SIZE);
	return control_channel_create(&cfg);
}

static struct control_channel *channel_for(struct fake_agent *agent, int deadline_ms)
{
	return channel_with(agent, deadline_ms, 0);
}

/* ---- tests -------------------------------------------------------------------------------- */

struct chunk_log {
	char text[64];
	int count;
};

static void collect_chunk(const struct proto_exec_output_chunk *chunk, void *opaque)
{
	struct chunk_log *log = opaque;

	strncat(log->text, (const char *)chunk->data.data,
		chunk->data.len < sizeof(log->text) - strlen(log->text) - 1
			? chunk->data.len : sizeof(log->text) - strlen(log->text) - 1);
	log->count++;
}

static void test_exec_and_files(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	char *args[] = { "hello" };
	struct proto_exec_request req = { .program = "echo", .args = args, .args_count = 1 };
	struct proto_exec_response resp;
	struct proto_file_stat_response stat;
	struct proto_bytes content;
	struct chunk_log log = { .count = 0 };

	fake_init(&agent, FAKE_NORMAL);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_exec(ch, &req, collect_chunk, &log, &resp), 0);
	CHECK_INT_EQ(log.count, 2);
	CHECK_STR_EQ(log.text, "echohello");
	CHECK_INT_EQ(resp.exit_code, 1);
	CHECK(resp.stdout_data.len == 4 && memcmp(resp.stdout_data.data, "echo", 4) == 0);
	proto_exec_response_free(&resp);

	CHECK_INT_EQ(control_channel_file_stat(ch, "/workspace/abc", &stat, 0), 0);
	CHECK(stat.exists && stat.has_size);
	CHECK_INT_EQ(stat.size, 14);
	proto_file_stat_response_free(&stat);
	CHECK_INT_EQ(control_channel_read_file(ch, "/workspace/r", &content, 0), 0);
	CHECK(content.len == 12 && memcmp(content.data, "/workspace/r", 12) == 0);
	free(content.data);
	CHECK_INT_EQ(control_channel_read_file(ch, "/missing", &content, 0), -ENOENT);
	CHECK(strstr(control_channel_last_error(), "gone") != NULL);
	/* no code: a failure like any other, whatever the sentence says */
	CHECK_INT_EQ(control_channel_read_file(ch, "/uncoded", &content, 0), -EIO);
	CHECK_INT_EQ(control_channel_write_file(ch, "/workspace/w", "x", 1, true, 0), 0);
	CHECK_INT_EQ(control_channel_write_file(ch, "/etc/passwd", "x", 1, true, 0), -EPERM);
	CHECK(strstr(control_channel_last_error(), "outside the roots") != NULL);
	CHECK_INT_EQ(control_channel_mkdir_p(ch, "/workspace/d/e", 0), 0);
	CHECK_INT_EQ(control_channel_snapshot_ready(ch, 0), 0);
	CHECK_INT_EQ(atomic_load(&agent.connections), 1);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/* The handshake fails with err and a sentence holding needle, and is not retried. */
static void expect_handshake_refused(enum fake_mode mode, int err, const char *needle)
{
	struct fake_agent agent;
	struct control_channel *ch;

	fake_init(&agent, mode);
	ch = channel_for(&agent, FAKE_SHORT_DEADLINE_MS);
	CHECK_INT_EQ(control_channel_connect(ch), err);
	CHECK(strstr(control_channel_last_error(), needle) != NULL);
	CHECK_INT_EQ(atomic_load(&agent.connections), 1);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void test_handshake_validation(void)
{
	expect_handshake_refused(FAKE_PONG_V1, -EPROTONOSUPPORT, "version 1");
	expect_handshake_refused(FAKE_PONG_NO_MUX, -EPROTONOSUPPORT, "without multiplexing");
}

/* The host answers the Challenge with a proof: the secret's bytes never cross the wire. */
static void test_handshake_sends_proof_not_secret(void)
{
	struct fake_agent agent;
	struct control_channel *ch;

	fake_init(&agent, FAKE_NORMAL);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_connect(ch), 0);
	CHECK_INT_EQ(atomic_load(&agent.connections), 1);
	CHECK_INT_EQ(atomic_load(&agent.secret_on_wire), 0);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/*
 * An agent that predates the rekey in the handshake answers a plain Pong: the channel is
 * connected with the old secret and usable, and says the rekey was not applied (so the caller
 * sends it the old way).
 */
static void test_rekey_ignored_by_an_older_agent(void)
{
	static const char doc[] = "{\"secret_hex\": \"00\"}";
	uint8_t new_secret[PROTO_SECRET_SIZE] = { 0 };
	struct fake_agent agent;
	struct control_channel *ch;
	bool applied = true;

	fake_init(&agent, FAKE_NORMAL);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_connect_rekey(ch, doc, strlen(doc), new_secret, &applied), 0);
	CHECK(!applied);
	CHECK_INT_EQ(control_channel_snapshot_ready(ch, CONTROL_CHANNEL_TIMEOUT_DEFAULT), 0);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/* An agent that sends no Challenge (an older image) fails with a sentence that says so. */
static void test_agent_without_challenge(void)
{
	struct fake_agent agent;
	struct control_channel *ch;

	fake_init(&agent, FAKE_NO_CHALLENGE);
	ch = channel_for(&agent, FAKE_SHORT_DEADLINE_MS);
	CHECK(control_channel_connect(ch) < 0);
	CHECK(strstr(control_channel_last_error(), "Challenge") != NULL);
	CHECK_INT_EQ(atomic_load(&agent.secret_on_wire), 0);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void test_wrong_secret(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct control_channel_config cfg = { .connect = fake_connect,
					      .connect_deadline_ms = FAKE_SHORT_DEADLINE_MS };

	fake_init(&agent, FAKE_NORMAL);
	cfg.connect_opaque = &agent;
	ch = control_channel_create(&cfg); /* all-zero secret */
	CHECK_INT_EQ(control_channel_connect(ch), -EACCES);
	CHECK(strstr(control_channel_last_error(), "secret") != NULL);
	CHECK(atomic_load(&agent.connections) > 1);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

struct stat_thread {
	struct control_channel *ch;
	char path[32];
	int rc;
	uint64_t size;
};

static void *stat_thread_run(void *arg)
{
	struct stat_thread *t = arg;
	struct proto_file_stat_response stat;

	t->rc = control_channel_file_stat(t->ch, t->path, &stat, 0);
	t->size = stat.size;
	proto_file_stat_response_free(&stat);
	return NULL;
}

static void run_concurrent_stats(struct control_channel *ch, int count)
{
	struct stat_thread threads[FAKE_CONCURRENT_CALLS];
	pthread_t ids[FAKE_CONCURRENT_CALLS];

	for (int i = 0; i < count; i++) {
		threads[i].ch = ch;
		snprintf(threads[i].path, sizeof(threads[i].path), "/workspace/%0*d", i + 1, 0);
		pthread_create(&ids[i], NULL, stat_thread_run, &threads[i]);
	}
	for (int i = 0; i < count; i++) {
		pthread_join(ids[i], NULL);
		CHECK_INT_EQ(threads[i].rc, 0);
		CHECK_INT_EQ(threads[i].size, strlen(threads[i].path));
	}
}

static void test_out_of_order_replies(void)
{
	struct fake_agent agent;
	struct control_channel *ch;

	fake_init(&agent, FAKE_REVERSE_PAIRS);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_connect(ch), 0);
	run_concurrent_stats(ch, FAKE_CONCURRENT_CALLS);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void test_stray_request_id_dropped(void)
{
	struct fake_agent agent;
	struct control_channel *ch;

	fake_init(&agent, FAKE_STRAY_ID);
	ch = channel_for(&agent, 0);
	run_concurrent_stats(ch, 4);
	CHECK_INT_EQ(control_channel_snapshot_ready(ch, 0), 0);
	CHECK_INT_EQ(atomic_load(&agent.connections), 1);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void test_connection_loss_and_reconnect(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct proto_exec_request req = { .program = "true" };
	struct proto_exec_response resp;

	fake_init(&agent, FAKE_DIE_ON_EXEC);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_snapshot_ready(ch, 0), 0);
	CHECK_INT_EQ(control_channel_exec(ch, &req, NULL, NULL, &resp), -ECONNRESET);
	CHECK(strstr(control_channel_last_error(), "closed the connection") != NULL);
	CHECK(strstr(control_channel_last_error(), "reconnects") != NULL);
	CHECK_INT_EQ(control_channel_snapshot_ready(ch, 0), 0);
	CHECK_INT_EQ(atomic_load(&agent.connections), 2);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void test_call_timeout(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct proto_file_stat_response stat;

	/* a silent agent never answers: only the call's own timeout can end it */
	fake_init(&agent, FAKE_SILENT);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_file_stat(ch, "/x", &stat, 100), -ETIMEDOUT);
	CHECK(strstr(control_channel_last_error(), "no answer") != NULL);
	/* the connection survives a timed-out call */
	CHECK_INT_EQ(control_channel_file_stat(ch, "/x", &stat, 50), -ETIMEDOUT);
	CHECK_INT_EQ(atomic_load(&agent.connections), 1);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/*
 * A one-shot call that goes unanswered is followed by a liveness check no longer than the
 * call's own wait, and its error says which it was: a wedged guest, or an agent that answers
 * but not this call.
 */
static void test_call_timeout_tells_wedged_from_unanswered(void)
{
	static const char data[] = "x";
	struct fake_agent agent;
	struct control_channel *ch;
	long long started;

	fake_init(&agent, FAKE_SILENT);
	ch = channel_with(&agent, 0, TEST_LIVENESS_MS);
	started = now_ms();
	CHECK_INT_EQ(control_channel_write_file(ch, "/x", data, 1, false, 200), -ETIMEDOUT);
	CHECK(strstr(control_channel_last_error(),
		     "WriteFile: the guest stopped answering (a liveness check failed") != NULL);
	/* the check waited no longer than the call (200 ms), not the liveness timeout */
	CHECK(now_ms() - started < TEST_LIVENESS_MS);
	control_channel_destroy(ch);
	fake_finish(&agent);

	fake_init(&agent, FAKE_DROP_WRITES);
	ch = channel_with(&agent, 0, TEST_LIVENESS_MS);
	CHECK_INT_EQ(control_channel_write_file(ch, "/x", data, 1, false, 200), -ETIMEDOUT);
	CHECK(strstr(control_channel_last_error(), "WriteFile got no answer") != NULL);
	CHECK(strstr(control_channel_last_error(), "the guest answered a liveness check") != NULL);
	/* the write and the check reached the agent, and the channel still works */
	CHECK(atomic_load(&agent.requests) >= 2);
	CHECK_INT_EQ(control_channel_snapshot_ready(ch, 1000), 0);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static int refuse_connect(void *opaque, int timeout_ms)
{
	atomic_fetch_add((atomic_int *)opaque, 1);
	return -ECONNREFUSED;
}

static void test_connect_deadline(void)
{
	atomic_int attempts = 0;
	struct control_channel_config cfg = { .connect = refuse_connect, .connect_opaque = &attempts,
					      .connect_deadline_ms = 300 };
	struct control_channel *ch = control_channel_create(&cfg);

	CHECK_INT_EQ(control_channel_connect(ch), -ETIMEDOUT);
	/* 25, 50, 100, then 250 ms steps: a handful of attempts, not a busy loop */
	CHECK(atomic_load(&attempts) >= 3 && atomic_load(&attempts) <= 8);
	CHECK(strstr(control_channel_last_error(), "VOID_BOX_CONNECT_DEADLINE_SECS") != NULL);
	control_channel_destroy(ch);
	CHECK(control_channel_create(NULL) == NULL);
}

static void run_true(struct control_channel *ch, struct proto_exec_response *resp, int *rc)
{
	struct proto_exec_request req = { .program = "true" };

	*rc = control_channel_exec(ch, &req, NULL, NULL, resp);
}

/* A guest that answers nothing fails a long exec at the liveness check, not at its end. */
static void test_exec_wedged_guest_found_by_liveness(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct proto_exec_response resp;
	int rc;

	fake_init(&agent, FAKE_SILENT);
	ch = channel_with(&agent, 0, TEST_LIVENESS_MS);
	/* the exec's own deadline is 20 minutes, past the test's timeout: only the liveness
	 * check can end it, and its error says so */
	run_true(ch, &resp, &rc);
	CHECK_INT_EQ(rc, -ETIMEDOUT);
	CHECK(strstr(control_channel_last_error(), "the guest stopped answering") != NULL);
	proto_exec_response_free(&resp);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/* A command that runs longer than the liveness interval is fine while the agent answers. */
static void test_exec_outlives_liveness_checks(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct proto_exec_response resp;
	int rc;

	fake_init(&agent, FAKE_SLOW_EXEC);
	ch = channel_with(&agent, 0, TEST_LIVENESS_MS);
	run_true(ch, &resp, &rc);
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ(resp.exit_code, 0);
	/* the exec and at least one liveness check reached the agent */
	CHECK(atomic_load(&agent.requests) >= 2);
	proto_exec_response_free(&resp);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/* A connector refused (nothing listens yet) `refused` times, then answering `final`. */
struct final_answer_connector {
	atomic_int attempts;
	int refused;
	int final;
};

static int final_answer_connect(void *opaque, int timeout_ms)
{
	struct final_answer_connector *connector = opaque;

	(void)timeout_ms;
	return atomic_fetch_add(&connector->attempts, 1) < connector->refused ? -ECONNREFUSED
									       : connector->final;
}

/*
 * A connector that says the VM has ended, or that the caller gave the start up (a signal
 * during a boot), stops the handshake there, long before its deadline: no retry can help.
 */
static void test_connect_stops_at_a_final_answer(void)
{
	static const struct {
		int refused, final;
		const char *said;
	} cases[] = {
		{ 0, -ECHILD, "the VM has stopped" },
		{ 3, -ECANCELED, "cancelled" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct final_answer_connector connector = { .refused = cases[i].refused,
							    .final = cases[i].final };
		struct control_channel_config cfg = { .connect = final_answer_connect,
						      .connect_opaque = &connector,
						      .connect_deadline_ms = 30000 };
		struct control_channel *ch = control_channel_create(&cfg);

		CHECK_INT_EQ(control_channel_connect(ch), cases[i].final);
		CHECK_INT_EQ(atomic_load(&connector.attempts), cases[i].refused + 1);
		CHECK(strstr(control_channel_last_error(), cases[i].said) != NULL);
		control_channel_destroy(ch);
	}
}

/* ---- a hostile guest ---------------------------------------------------------------------- */

struct bounded_call {
	struct control_channel *ch;
	struct control_channel_pty *pty;
	int timeout_ms;              /* the call's, where the runner takes one */
	int rc;
	long long ended_ms;          /* now_ms() when it returned */
	long long elapsed_ms;
	char error[CONTROL_CHANNEL_ERROR_TEXT_MAX];  /* last_error is per thread: copied here */
};

/* Records how a call ended: its result, its time since started_ms and its sentence. */
static void bounded_call_end(struct bounded_call *call, int rc, long long started_ms)
{
	call->rc = rc;
	call->ended_ms = now_ms();
	call->elapsed_ms = call->ended_ms - started_ms;
	snprintf(call->error, sizeof(call->error), "%s", control_channel_last_error());
}

static void *connect_run(void *arg)
{
	struct bounded_call *call = arg;

	call->rc = control_channel_connect(call->ch);
	snprintf(call->error, sizeof(call->error), "%s", control_channel_last_error());
	return NULL;
}

static void *pty_read_run(void *arg)
{
	struct bounded_call *call = arg;
	struct control_channel_pty_event event;
	long long started = now_ms();
	int rc = control_channel_pty_read(call->pty, &event, FAKE_SHORT_DEADLINE_MS);

	bounded_call_end(call, rc, started);
	if (rc == 0)
		control_channel_pty_event_free(&event);
	return NULL;
}

/* The CLOCK_REALTIME instant limit_secs from now, as pthread_timedjoin_np wants it. */
static struct timespec join_limit(int limit_secs)
{
	struct timespec limit;

	clock_gettime(CLOCK_REALTIME, &limit);
	limit.tv_sec += limit_secs;
	return limit;
}

/* Joins thread by limit; false when it is still running then (it is left running). */
static bool joined_by(pthread_t thread, const struct timespec *limit)
{
	if (pthread_timedjoin_np(thread, NULL, limit) != 0) {
		pthread_detach(thread);
		return false;
	}
	return true;
}

/* Runs fn on a thread; false when it is still running after limit_secs (it is left). */
static bool finishes_within(void *(*fn)(void *), struct bounded_call *call, int limit_secs)
{
	struct timespec limit = join_limit(limit_secs);
	pthread_t thread;

	if (pthread_create(&thread, NULL, fn, call) != 0)
		return false;
	return joined_by(thread, &limit);
}

static bool finishes(void *(*fn)(void *), struct bounded_call *call)
{
	return finishes_within(fn, call, HANG_LIMIT_SECS);
}

/* Half a Pong and then silence: the handshake gives up at its deadline instead of hanging. */
static void test_handshake_stall_mid_frame(void)
{
	struct fake_agent agent;
	struct bounded_call call = { 0 };

	fake_init(&agent, FAKE_HALF_PONG);
	call.ch = channel_for(&agent, FAKE_SHORT_DEADLINE_MS);
	if (!finishes(connect_run, &call)) {
		CHECK(!"the handshake hung on half a Pong");
		return; /* the channel is stuck: leak it rather than hang the test program */
	}
	CHECK_INT_EQ(call.rc, -ETIMEDOUT);
	CHECK(strstr(call.error, "part of a Pong") != NULL);
	control_channel_destroy(call.ch);
	fake_finish(&agent);
}

/* A connect stuck on a stalled guest ends at once when the channel is cancelled. */
static void test_cancel_ends_stalled_connect(void)
{
	struct fake_agent agent;
	struct bounded_call call = { 0 };
	pthread_t thread;

	fake_init(&agent, FAKE_HALF_PONG);
	call.ch = channel_for(&agent, HANG_LIMIT_SECS * 1000 * 4);
	pthread_create(&thread, NULL, connect_run, &call);
	while (atomic_load(&agent.connections) == 0)
		usleep(FAKE_POLL_MS * 1000);
	control_channel_cancel(call.ch);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(call.rc, -ECANCELED);
	/* a cancelled channel stays cancelled: no call reconnects */
	CHECK_INT_EQ(control_channel_snapshot_ready(call.ch, 0), -ECANCELED);
	control_channel_destroy(call.ch);
	fake_finish(&agent);
}

/* Starts agent in mode and opens a PTY session on it into call; whether it opened. */
static bool open_pty_session(struct fake_agent *agent, enum fake_mode mode,
			     struct bounded_call *call)
{
	struct proto_pty_open open = { .cols = 80, .rows = 24, .program = "/bin/sh" };
	int err = 0;

	fake_init(agent, mode);
	call->ch = channel_for(agent, 0);
	call->pty = control_channel_pty_open(call->ch, &open, &err);
	CHECK(call->pty != NULL);
	return call->pty != NULL;
}

/* Half a PtyData frame and then silence: the PTY read honours its timeout. */
static void test_pty_stall_mid_frame(void)
{
	struct fake_agent agent;
	struct bounded_call call = { 0 };

	if (!open_pty_session(&agent, FAKE_PTY_STALL, &call))
		return;
	if (!finishes(pty_read_run, &call)) {
		CHECK(!"the PTY read hung on half a frame");
		return;
	}
	CHECK_INT_EQ(call.rc, -ECONNRESET);
	CHECK(strstr(call.error, "middle of a frame") != NULL);
	control_channel_pty_free(call.pty);
	control_channel_destroy(call.ch);
	fake_finish(&agent);
}

struct flood_log {
	struct fake_agent *agent;
	struct control_channel *cancel_at_first_chunk;  /* NULL: just read on */
	int chunks;
	size_t bytes;
	int sent_at_first_chunk;
};

/*
 * The first chunk waits until the agent has sent everything or has been held back for a
 * while: with back-pressure the host stops reading, so the agent cannot get far ahead.
 */
static void flood_chunk(const struct proto_exec_output_chunk *chunk, void *opaque)
{
	struct flood_log *log = opaque;

	if (log->chunks++ == 0) {
		long long until = now_ms() + FAKE_SLOW_EXEC_MS;

		while (atomic_load(&log->agent->chunks_sent) < FAKE_FLOOD_CHUNKS &&
		       now_ms() < until)
			usleep(FAKE_POLL_MS * 1000);
		log->sent_at_first_chunk = atomic_load(&log->agent->chunks_sent);
		if (log->cancel_at_first_chunk)
			control_channel_cancel(log->cancel_at_first_chunk);
	}
	log->bytes += chunk->data.len;
}

/* A guest that streams faster than the caller reads is held back, and nothing is dropped. */
static void test_stream_backpressure(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct proto_exec_request req = { .program = "flood" };
	struct proto_exec_response resp;
	struct flood_log log = { .agent = &agent };

	fake_init(&agent, FAKE_FLOOD);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_exec(ch, &req, flood_chunk, &log, &resp), 0);
	CHECK(log.sent_at_first_chunk <= FAKE_FLOOD_HELD_MAX);
	CHECK_INT_EQ(log.chunks, FAKE_FLOOD_CHUNKS);
	CHECK_INT_EQ(log.bytes, (size_t)FAKE_FLOOD_CHUNKS * FAKE_FLOOD_CHUNK_BYTES);
	proto_exec_response_free(&resp);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

/*
 * An agent that sends malformed output chunks without end gets a few warnings logged for the
 * stream, not one a frame, and the exec still ends with its reply.
 */
static void test_malformed_chunks_log_a_few_warnings(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	struct proto_exec_request req = { .program = "garbage" };
	struct proto_exec_response resp;
	enum log_level level = log_get_level();
	char *log_text = NULL;
	size_t log_len = 0, lines = 0;
	FILE *log_stream = open_memstream(&log_text, &log_len);

	CHECK(log_stream != NULL);
	fake_init(&agent, FAKE_MALFORMED_CHUNKS);
	ch = channel_for(&agent, 0);
	log_set_stream(log_stream);
	log_set_level(LOG_LEVEL_WARN);
	CHECK_INT_EQ(control_channel_exec(ch, &req, NULL, NULL, &resp), 0);
	log_set_stream(stderr);
	log_set_level(level);
	fclose(log_stream);
	for (size_t i = 0; i < log_len; i++)
		lines += log_text[i] == '\n';
	CHECK(lines >= 1 && lines <= TEST_MALFORMED_WARNINGS_MAX);
	CHECK(log_text && strstr(log_text, "malformed output chunk"));
	free(log_text);
	proto_exec_response_free(&resp);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void *destroy_run(void *arg)
{
	struct bounded_call *call = arg;

	control_channel_destroy(call->ch);
	return NULL;
}

/* Cancelling wakes a reader paused by back-pressure, so the exec ends and destroy returns. */
static void test_cancel_wakes_paused_reader(void)
{
	struct fake_agent agent;
	struct proto_exec_request req = { .program = "flood" };
	struct proto_exec_response resp;
	struct bounded_call call = { 0 };
	struct flood_log log = { .agent = &agent };

	fake_init(&agent, FAKE_FLOOD);
	call.ch = channel_for(&agent, 0);
	log.cancel_at_first_chunk = call.ch;
	CHECK_INT_EQ(control_channel_exec(call.ch, &req, flood_chunk, &log, &resp), -ECANCELED);
	CHECK(log.chunks < FAKE_FLOOD_CHUNKS);
	proto_exec_response_free(&resp);
	if (!finishes(destroy_run, &call)) {
		CHECK(!"destroy hung on a reader paused by back-pressure");
		return;
	}
	fake_finish(&agent);
}

/*
 * Shutdown goes over a live connection only: with none it neither connects nor waits. Over
 * one, it returns once the agent has ended the connection (after its sync), and gives up
 * with -ETIMEDOUT on an agent that keeps it.
 */
static void test_shutdown_never_reconnects(void)
{
	struct fake_agent agent;
	struct control_channel *ch;
	long long start;

	fake_init(&agent, FAKE_NORMAL);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_shutdown(ch, TEST_SHUTDOWN_WAIT_MS), -ENOTCONN);
	CHECK_INT_EQ(atomic_load(&agent.connections), 0);
	CHECK_INT_EQ(control_channel_connect(ch), 0);
	start = now_ms();
	CHECK_INT_EQ(control_channel_shutdown(ch, TEST_SHUTDOWN_LONG_WAIT_MS), 0);
	CHECK(now_ms() - start < TEST_SHUTDOWN_LONG_WAIT_MS);
	control_channel_destroy(ch);
	fake_finish(&agent);

	fake_init(&agent, FAKE_SILENT);
	ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_connect(ch), 0);
	start = now_ms();
	CHECK_INT_EQ(control_channel_shutdown(ch, TEST_SHUTDOWN_WAIT_MS), -ETIMEDOUT);
	CHECK(now_ms() - start >= TEST_SHUTDOWN_WAIT_MS - 1);
	CHECK(strstr(control_channel_last_error(), "did not end its connection") != NULL);
	control_channel_destroy(ch);
	fake_finish(&agent);
}

static void *big_write_run(void *arg)
{
	struct bounded_call *call = arg;
	void *data = calloc(1, TEST_BIG_WRITE_BYTES);
	long long started = now_ms();
	int rc = control_channel_write_file(call->ch, "/workspace/big", data, TEST_BIG_WRITE_BYTES,
					    true, call->timeout_ms);

	bounded_call_end(call, rc, started);
	free(data);
	return NULL;
}

static void *ping_run(void *arg)
{
	struct bounded_call *call = arg;
	long long started = now_ms();

	bounded_call_end(call, control_channel_snapshot_ready(call->ch, call->timeout_ms),
			 started);
	return NULL;
}

/*
 * A guest that takes a large frame a socket buffer every few seconds: the frame's send ends
 * at its call's deadline, which fails with -ETIMEDOUT and ends the connection (the guest holds
 * part of a frame), and a call that waits to send behind it fails at its own deadline
 * instead of waiting for the writer.
 */
static void test_slow_reader_bounds_sends(void)
{
	/* static: threads still running when the test fails keep using them after it returns */
	static struct fake_agent agent;
	static struct bounded_call write = { .timeout_ms = TEST_BIG_WRITE_TIMEOUT_MS };
	static struct bounded_call ping = { .timeout_ms = TEST_PING_TIMEOUT_MS };
	struct timespec limit;
	pthread_t writer, pinger;
	bool write_ended, ping_ended;
	long long sending_since;

	fake_init(&agent, FAKE_SLOW_DRAIN);
	write.ch = ping.ch = channel_for(&agent, 0);
	CHECK_INT_EQ(control_channel_connect(write.ch), 0);
	limit = join_limit(SLOW_DRAIN_LIMIT_SECS);
	pthread_create(&writer, NULL, big_write_run, &write);
	while (atomic_load(&agent.bytes_drained) == 0)
		usleep(FAKE_POLL_MS * 1000);
	sending_since = now_ms(); /* encoding the body came first: the send is what is timed */
	pthread_create(&pinger, NULL, ping_run, &ping);
	write_ended = joined_by(writer, &limit);
	ping_ended = joined_by(pinger, &limit);
	if (!write_ended || !ping_ended) {
		CHECK(!"a send to a slowly reading guest outlived its call's timeout");
		return; /* the channel is stuck: leak it rather than hang the test program */
	}
	CHECK_INT_EQ(write.rc, -ETIMEDOUT);
	CHECK(write.ended_ms - sending_since < TEST_BIG_WRITE_TIMEOUT_MS + TEST_RETURN_SLACK_MS);
	CHECK(strstr(write.error, "takes its input too slowly") != NULL);
	CHECK_INT_EQ(ping.rc, -ETIMEDOUT);
	CHECK(ping.elapsed_ms < TEST_PING_TIMEOUT_MS + TEST_RETURN_SLACK_MS);
	CHECK(strstr(ping.error, "still going out") != NULL);
	/* the half-sent frame ended the connection: the next call makes another */
	CHECK_INT_EQ(control_channel_snapshot_ready(write.ch, TEST_UNANSWERED_PING_MS), -ETIMEDOUT);
	CHECK_INT_EQ(atomic_load(&agent.connections), 2);
	control_channel_destroy(write.ch);
	fake_finish(&agent);
}

/* A guest that takes its input promptly gets a large frame whole, as before. */
static void test_large_write_to_a_prompt_reader(void)
{
	struct fake_agent agent;
	struct bounded_call write = { .timeout_ms = CONTROL_CHANNEL_TIMEOUT_DEFAULT };

	fake_init(&agent, FAKE_NORMAL);
	write.ch = channel_for(&agent, 0);
	if (!finishes(big_write_run, &write)) {
		CHECK(!"a large write to a prompt guest hung");
		return;
	}
	CHECK_INT_EQ(write.rc, 0);
	CHECK_INT_EQ(control_channel_snapshot_ready(write.ch, 0), 0);
	CHECK_INT_EQ(atomic_load(&agent.connections), 1);
	control_channel_destroy(write.ch);
	fake_finish(&agent);
}

static void *pty_open_run(void *arg)
{
	struct proto_pty_open open = { .cols = 80, .rows = 24, .program = "/bin/sh" };
	struct bounded_call *call = arg;
	long long started = now_ms();
	int err = 0;

	call->pty = control_channel_pty_open(call->ch, &open, &err);
	bounded_call_end(call, call->pty ? 0 : err, started);
	return NULL;
}

/* The PTY call ended with -ETIMEDOUT by timeout_ms (and the slack); frees what it used. */
static void expect_pty_timed_out(struct bounded_call *call, struct fake_agent *agent,
				 long long timeout_ms)
{
	CHECK_INT_EQ(call->rc, -ETIMEDOUT);
	CHECK(call->elapsed_ms < timeout_ms + TEST_RETURN_SLACK_MS);
	control_channel_pty_free(call->pty);
	control_channel_destroy(call->ch);
	fake_finish(agent);
}

/* Frames the host skips before PtyOpened do not restart its wait: it ends at its 10 s. */
static void test_pty_open_deadline_spans_skipped_frames(void)
{
	/* static: threads still running when the test fails keep using them after it returns */
	static struct fake_agent agent;
	static struct bounded_call call;

	fake_init(&agent, FAKE_PTY_NEVER_OPENS);
	call.ch = channel_for(&agent, 0);
	if (!finishes_within(pty_open_run, &call, PTY_OPEN_LIMIT_SECS)) {
		CHECK(!"the wait for PtyOpened restarted at every skipped frame");
		return;
	}
	CHECK(call.pty == NULL);
	expect_pty_timed_out(&call, &agent, TEST_PTY_OPENED_TIMEOUT_MS);
}

/* Frames a PTY read skips do not restart its timeout either. */
static void test_pty_read_deadline_spans_skipped_frames(void)
{
	/* static: threads still running when the test fails keep using them after it returns */
	static struct fake_agent agent;
	static struct bounded_call call;

	if (!open_pty_session(&agent, FAKE_PTY_CHATTER, &call))
		return;
	if (!finishes_within(pty_read_run, &call, PTY_READ_LIMIT_SECS)) {
		CHECK(!"a PTY read restarted its timeout at every skipped frame");
		return;
	}
	expect_pty_timed_out(&call, &agent, FAKE_SHORT_DEADLINE_MS);
}

/*
 * A frame before authentication that declares more than the agent's own pre-authentication
 * cap is refused at its header: the fake sends nothing after it, so a host that waited for
 * the payload would time out instead.
 */
static void test_oversized_preauth_frames_refused(void)
{
	expect_handshake_refused(FAKE_BIG_CHALLENGE, -EPROTO, "where Challenge belongs declares "
				 "more than the 1024 bytes allowed before authentication");
	expect_handshake_refused(FAKE_BIG_PONG, -EPROTO, "where Pong belongs declares more than "
				 "the 1024 bytes allowed before authentication");
}

int main(void)
{
	RUN_TEST(test_exec_and_files);
	RUN_TEST(test_malformed_chunks_log_a_few_warnings);
	RUN_TEST(test_handshake_validation);
	RUN_TEST(test_wrong_secret);
	RUN_TEST(test_handshake_sends_proof_not_secret);
	RUN_TEST(test_rekey_ignored_by_an_older_agent);
	RUN_TEST(test_agent_without_challenge);
	RUN_TEST(test_out_of_order_replies);
	RUN_TEST(test_stray_request_id_dropped);
	RUN_TEST(test_connection_loss_and_reconnect);
	RUN_TEST(test_call_timeout);
	RUN_TEST(test_connect_deadline);
	RUN_TEST(test_connect_stops_at_a_final_answer);
	RUN_TEST(test_exec_wedged_guest_found_by_liveness);
	RUN_TEST(test_call_timeout_tells_wedged_from_unanswered);
	RUN_TEST(test_exec_outlives_liveness_checks);
	RUN_TEST(test_handshake_stall_mid_frame);
	RUN_TEST(test_cancel_ends_stalled_connect);
	RUN_TEST(test_pty_stall_mid_frame);
	RUN_TEST(test_stream_backpressure);
	RUN_TEST(test_cancel_wakes_paused_reader);
	RUN_TEST(test_shutdown_never_reconnects);
	RUN_TEST(test_slow_reader_bounds_sends);
	RUN_TEST(test_large_write_to_a_prompt_reader);
	RUN_TEST(test_pty_open_deadline_spans_skipped_frames);
	RUN_TEST(test_pty_read_deadline_spans_skipped_frames);
	RUN_TEST(test_oversized_preauth_frames_refused);
	return harness_finish();
}
