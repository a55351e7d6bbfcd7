/*
 * Frame-layer tests: the type table, header parsing, decoding from memory, blocking fd IO over
 * a socketpair (including short reads, unknown types and EOF placement), the Ping/Pong bodies,
 * secrets and base64. Each hostile case asserts the exact errno the readers promise, because
 * the host and the guest decide whether to drop a frame or a connection from it.
 */
#include "proto/protocol.h"
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_REQUEST_ID 0xa1b2c3d4u
#define TEST_FIRST_INVALID_TYPE 31
#define TEST_BIG_BODY_LEN (256u * 1024u)
/* the handshake bodies' sizes as docs/protocol.md §3 lays them out, independent of the code */
#define WIRE_PING_BYTES 37
#define WIRE_PONG_BYTES 5
/* RFC 4231: test case 1's key is 20 bytes of 0x0b, case 6's 131 bytes of 0xaa */
#define TEST_HMAC_CASE1_KEY 20
#define TEST_HMAC_LONG_KEY 131
#define WIRE_CANARY 0xee

static void test_type_table(void)
{
	CHECK(!proto_msg_type_is_valid(0));
	CHECK(!proto_msg_type_is_valid(TEST_FIRST_INVALID_TYPE));
	CHECK(!proto_msg_type_is_valid(255));
	for (unsigned t = 1; t < TEST_FIRST_INVALID_TYPE; t++)
		CHECK(proto_msg_type_is_valid((uint8_t)t));
	CHECK_STR_EQ(proto_msg_type_name(PROTO_MSG_EXEC_REQUEST), "ExecRequest");
	CHECK_STR_EQ(proto_msg_type_name(PROTO_MSG_PTY_CLOSED), "PtyClosed");
	CHECK_STR_EQ(proto_msg_type_name(PROTO_MSG_SNAPSHOT_READY), "SnapshotReady");
	CHECK_STR_EQ(proto_msg_type_name(0), "Invalid");
	CHECK_STR_EQ(proto_msg_type_name(PROTO_MSG_SET_POLICY), "SetPolicy");
	CHECK_STR_EQ(proto_msg_type_name(PROTO_MSG_SET_POLICY_RESPONSE), "SetPolicyResponse");
	CHECK_STR_EQ(proto_msg_type_name(PROTO_MSG_CHALLENGE), "Challenge");
	CHECK_STR_EQ(proto_msg_type_name(TEST_FIRST_INVALID_TYPE), "Invalid");
}

static void test_header(void)
{
	uint8_t header[PROTO_HEADER_SIZE];
	uint32_t len;
	uint8_t type;

	proto_header_build(header, 0x01020304u, PROTO_MSG_PONG);
	CHECK_INT_EQ(header[0], 0x04);
	CHECK_INT_EQ(header[3], 0x01);
	CHECK_INT_EQ(header[4], 4);
	CHECK_INT_EQ(proto_header_parse(header, &len, &type), 0);
	CHECK_INT_EQ(len, 0x01020304u);
	CHECK_INT_EQ(type, PROTO_MSG_PONG);

	proto_header_build(header, PROTO_MAX_PAYLOAD + 1, PROTO_MSG_EXEC_REQUEST);
	CHECK_INT_EQ(proto_header_parse(header, &len, &type), -EMSGSIZE);
	proto_header_build(header, PROTO_MAX_PAYLOAD, PROTO_MSG_EXEC_REQUEST);
	CHECK_INT_EQ(proto_header_parse(header, &len, &type), 0);
	proto_header_build(header, 7, TEST_FIRST_INVALID_TYPE);
	CHECK_INT_EQ(proto_header_parse(header, &len, &type), -EPROTO);
	CHECK_INT_EQ(len, 7);
	proto_header_build(header, 7, 0);
	CHECK_INT_EQ(proto_header_parse(header, &len, &type), -EPROTO);
}

static size_t build_frame(uint8_t *buf, uint8_t type, bool with_id, uint32_t id,
			  const char *body, size_t body_len)
{
	size_t prefix = with_id ? PROTO_REQUEST_ID_SIZE : 0;

	proto_header_build(buf, (uint32_t)(body_len + prefix), type);
	if (with_id) {
		buf[5] = (uint8_t)id;
		buf[6] = (uint8_t)(id >> 8);
		buf[7] = (uint8_t)(id >> 16);
		buf[8] = (uint8_t)(id >> 24);
	}
	memcpy(buf + PROTO_HEADER_SIZE + prefix, body, body_len);
	return PROTO_HEADER_SIZE + prefix + body_len;
}

static void test_decode_memory(void)
{
	uint8_t buf[64];
	struct proto_frame frame;
	size_t n = build_frame(buf, PROTO_MSG_READ_FILE, true, TEST_REQUEST_ID, "{}", 2);

	CHECK_INT_EQ(proto_frame_decode(buf, n, true, &frame), (long)n);
	CHECK_INT_EQ(frame.type, PROTO_MSG_READ_FILE);
	CHECK(frame.has_request_id);
	CHECK_INT_EQ(frame.request_id, TEST_REQUEST_ID);
	CHECK_INT_EQ(frame.body_len, 2);
	CHECK(memcmp(frame.body, "{}", 2) == 0);
	proto_frame_free(&frame);

	/* truncated: every prefix of a valid frame asks for more input */
	for (size_t cut = 0; cut < n; cut++)
		CHECK_INT_EQ(proto_frame_decode(buf, cut, true, &frame), 0);

	/* a second frame after the first is left for the next call */
	n = build_frame(buf, PROTO_MSG_SNAPSHOT_READY, true, 9, "", 0);
	memcpy(buf + n, buf, n);
	CHECK_INT_EQ(proto_frame_decode(buf, 2 * n, true, &frame), (long)n);
	CHECK_INT_EQ(frame.body_len, 0);
	CHECK(frame.body != NULL);
	proto_frame_free(&frame);

	/* Ping never carries a request id, even on a multiplexed stream */
	n = build_frame(buf, PROTO_MSG_PING, false, 0, "abc", 3);
	CHECK_INT_EQ(proto_frame_decode(buf, n, true, &frame), (long)n);
	CHECK(!frame.has_request_id);
	CHECK_INT_EQ(frame.body_len, 3);
	proto_frame_free(&frame);

	/* not multiplexed: the whole payload is body */
	n = build_frame(buf, PROTO_MSG_EXEC_REQUEST, false, 0, "{}", 2);
	CHECK_INT_EQ(proto_frame_decode(buf, n, false, &frame), (long)n);
	CHECK(!frame.has_request_id);
	proto_frame_free(&frame);
}

static void test_decode_hostile(void)
{
	uint8_t buf[64];
	struct proto_frame frame;
	size_t n;

	/* payload shorter than the request id */
	n = build_frame(buf, PROTO_MSG_EXEC_REQUEST, false, 0, "ab", 2);
	CHECK_INT_EQ(proto_frame_decode(buf, n, true, &frame), -EPROTO);
	/* unknown types */
	n = build_frame(buf, TEST_FIRST_INVALID_TYPE, false, 0, "ab", 2);
	CHECK_INT_EQ(proto_frame_decode(buf, n, false, &frame), -EPROTO);
	n = build_frame(buf, 0, false, 0, "ab", 2);
	CHECK_INT_EQ(proto_frame_decode(buf, n, false, &frame), -EPROTO);
	/* declared length over the cap is refused from the header alone */
	proto_header_build(buf, PROTO_MAX_PAYLOAD + 1, PROTO_MSG_EXEC_REQUEST);
	CHECK_INT_EQ(proto_frame_decode(buf, PROTO_HEADER_SIZE, true, &frame), -EMSGSIZE);
	proto_header_build(buf, UINT32_MAX, PROTO_MSG_EXEC_REQUEST);
	CHECK_INT_EQ(proto_frame_decode(buf, PROTO_HEADER_SIZE, true, &frame), -EMSGSIZE);
	CHECK(frame.body == NULL);
}

static void make_pair(int sv[2])
{
	int rc = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);

	if (rc < 0)
		harness_fail_setup("socketpair failed");
}

static void test_fd_roundtrip(void)
{
	int sv[2];
	struct proto_frame frame;

	make_pair(sv);
	CHECK_INT_EQ(proto_frame_write(sv[0], PROTO_MSG_MKDIR_P, true, 77, "{\"path\":\"/x\"}", 13), 0);
	CHECK_INT_EQ(proto_frame_write(sv[0], PROTO_MSG_PONG, true, 77, "\2\0\0\0\1", 5), 0);
	CHECK_INT_EQ(proto_frame_write(sv[0], PROTO_MSG_SNAPSHOT_READY, true, 78, NULL, 0), 0);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), 0);
	CHECK_INT_EQ(frame.type, PROTO_MSG_MKDIR_P);
	CHECK_INT_EQ(frame.request_id, 77);
	CHECK_INT_EQ(frame.body_len, 13);
	proto_frame_free(&frame);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), 0);
	CHECK_INT_EQ(frame.type, PROTO_MSG_PONG);
	CHECK(!frame.has_request_id);
	CHECK_INT_EQ(frame.body_len, 5);
	proto_frame_free(&frame);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), 0);
	CHECK_INT_EQ(frame.request_id, 78);
	CHECK_INT_EQ(frame.body_len, 0);
	proto_frame_free(&frame);

	/* invalid type on write is refused locally */
	CHECK_INT_EQ(proto_frame_write(sv[0], TEST_FIRST_INVALID_TYPE, true, 1, NULL, 0), -EINVAL);
	CHECK_INT_EQ(proto_frame_write(sv[0], PROTO_MSG_EXEC_REQUEST, true, 1, "",
				       PROTO_MAX_PAYLOAD), -EMSGSIZE);

	close(sv[0]);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -ECONNRESET);
	close(sv[1]);
}

struct big_writer {
	int fd;
	uint8_t *body;
};

static void *big_writer_run(void *arg)
{
	struct big_writer *w = arg;

	proto_frame_write(w->fd, PROTO_MSG_WRITE_FILE, true, 5, w->body, TEST_BIG_BODY_LEN);
	return NULL;
}

/* A body larger than the socket buffer forces short writes and short reads on both sides. */
static void test_fd_large_frame(void)
{
	int sv[2];
	struct proto_frame frame;
	struct big_writer w;
	pthread_t thread;

	make_pair(sv);
	w.fd = sv[0];
	w.body = malloc(TEST_BIG_BODY_LEN);
	for (size_t i = 0; i < TEST_BIG_BODY_LEN; i++)
		w.body[i] = (uint8_t)(i * 31 + 7);
	pthread_create(&thread, NULL, big_writer_run, &w);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), 0);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(frame.body_len, TEST_BIG_BODY_LEN);
	CHECK(frame.body && memcmp(frame.body, w.body, TEST_BIG_BODY_LEN) == 0);
	proto_frame_free(&frame);
	free(w.body);
	close(sv[0]);
	close(sv[1]);
}

static void test_fd_hostile(void)
{
	int sv[2];
	uint8_t buf[64];
	struct proto_frame frame;
	size_t n;

	make_pair(sv);
	/* unknown type: payload consumed, the next frame is still readable */
	n = build_frame(buf, 200, false, 0, "garbage", 7);
	CHECK(write(sv[0], buf, n) == (ssize_t)n);
	n = build_frame(buf, PROTO_MSG_FILE_STAT, true, 3, "{}", 2);
	CHECK(write(sv[0], buf, n) == (ssize_t)n);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -EPROTO);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), 0);
	CHECK_INT_EQ(frame.request_id, 3);
	proto_frame_free(&frame);

	/* payload shorter than a request id: consumed and refused */
	n = build_frame(buf, PROTO_MSG_FILE_STAT, false, 0, "ab", 2);
	CHECK(write(sv[0], buf, n) == (ssize_t)n);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -EPROTO);

	/* over-cap length */
	proto_header_build(buf, PROTO_MAX_PAYLOAD + 1, PROTO_MSG_EXEC_REQUEST);
	CHECK(write(sv[0], buf, PROTO_HEADER_SIZE) == PROTO_HEADER_SIZE);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -EMSGSIZE);

	/* truncated frame then EOF */
	n = build_frame(buf, PROTO_MSG_FILE_STAT, true, 3, "{\"path\":1}", 10);
	CHECK(write(sv[0], buf, n - 3) == (ssize_t)(n - 3));
	close(sv[0]);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -EPIPE);
	close(sv[1]);

	/* EOF in the middle of a header */
	make_pair(sv);
	CHECK(write(sv[0], buf, 3) == 3);
	close(sv[0]);
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -EPIPE);
	close(sv[1]);
}

static void test_fd_timeout(void)
{
	int sv[2];
	struct proto_frame frame;
	struct timeval tv = { .tv_sec = 0, .tv_usec = 20000 };

	make_pair(sv);
	setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -ETIMEDOUT);
	close(sv[0]);
	close(sv[1]);
}

#define STALL_TEST_TIMEOUT_MS 50
/* a hang here is the bug under test: end the test program rather than wait forever */
#define STALL_TEST_ALARM_SECS 20

/*
 * A peer that sends part of a frame and stops: the read ends at the deadline with -ETIME (the
 * stream is lost), whether the deadline is the caller's or the socket's receive timeout,
 * while a peer that sends nothing yields -ETIMEDOUT (the stream is intact).
 */
static void test_fd_stall_mid_frame(void)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 20000 };
	uint8_t header[PROTO_HEADER_SIZE];
	struct proto_frame frame;
	int sv[2];

	alarm(STALL_TEST_ALARM_SECS);
	proto_header_build(header, 16, PROTO_MSG_EXEC_RESPONSE);
	make_pair(sv);
	CHECK_INT_EQ(proto_frame_read_timed(sv[1], true, STALL_TEST_TIMEOUT_MS, &frame),
		     -ETIMEDOUT);
	CHECK(write(sv[0], header, 2) == 2);
	CHECK_INT_EQ(proto_frame_read_timed(sv[1], true, STALL_TEST_TIMEOUT_MS, &frame), -ETIME);
	close(sv[0]);
	close(sv[1]);

	/* the socket's receive timeout bounds a started frame too */
	make_pair(sv);
	setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	CHECK(write(sv[0], header, sizeof(header)) == sizeof(header));
	CHECK_INT_EQ(proto_frame_read(sv[1], true, &frame), -ETIME);
	close(sv[0]);
	close(sv[1]);
	alarm(0);
}

/* a frame larger than a socketpair's send buffer, so a peer that reads nothing stalls it */
#define STALL_TEST_WRITE_BYTES (1024u * 1024u)
#define CAPPED_TEST_DECLARED_BYTES (1024u * 1024u)

/*
 * A peer that takes nothing: a timed write that fills the socket buffer and stops ends at its
 * deadline with -ETIME (the peer holds part of the frame), and the next one, which cannot
 * start, with -ETIMEDOUT (the stream is intact). A peer that reads gets the frame whole.
 */
static void test_timed_write_stall(void)
{
	uint8_t *body = calloc(1, STALL_TEST_WRITE_BYTES);
	struct proto_frame frame;
	int sv[2];

	alarm(STALL_TEST_ALARM_SECS);
	make_pair(sv);
	CHECK_INT_EQ(proto_frame_write_timed(sv[0], PROTO_MSG_WRITE_FILE, true, 1, body,
					     STALL_TEST_WRITE_BYTES, STALL_TEST_TIMEOUT_MS),
		     -ETIME);
	CHECK_INT_EQ(proto_frame_write_timed(sv[0], PROTO_MSG_SNAPSHOT_READY, true, 2, NULL, 0,
					     STALL_TEST_TIMEOUT_MS),
		     -ETIMEDOUT);
	close(sv[0]);
	close(sv[1]);

	make_pair(sv);
	CHECK_INT_EQ(proto_frame_write_timed(sv[0], PROTO_MSG_SNAPSHOT_READY, true, 3, NULL, 0,
					     STALL_TEST_TIMEOUT_MS),
		     0);
	CHECK_INT_EQ(proto_frame_read_timed(sv[1], true, STALL_TEST_TIMEOUT_MS, &frame), 0);
	CHECK_INT_EQ(frame.request_id, 3);
	proto_frame_free(&frame);
	close(sv[0]);
	close(sv[1]);
	free(body);
	alarm(0);
}

/*
 * A capped read refuses a header that declares more than its cap before reading any of the
 * payload (the bytes after the header are still there), and reads a frame at the cap.
 */
static void test_capped_read(void)
{
	uint8_t header[PROTO_HEADER_SIZE], rest[sizeof("abc")];
	uint8_t *body = calloc(1, PROTO_PREAUTH_MAX_PAYLOAD);
	struct proto_frame frame;
	int sv[2];

	make_pair(sv);
	proto_header_build(header, CAPPED_TEST_DECLARED_BYTES, PROTO_MSG_CHALLENGE);
	CHECK(write(sv[0], header, sizeof(header)) == sizeof(header));
	CHECK(write(sv[0], "abc", 3) == 3);
	CHECK_INT_EQ(proto_frame_read_capped(sv[1], false, STALL_TEST_TIMEOUT_MS,
					     PROTO_PREAUTH_MAX_PAYLOAD, &frame),
		     -EMSGSIZE);
	CHECK(frame.body == NULL);
	CHECK(read(sv[1], rest, sizeof(rest)) == 3);

	CHECK_INT_EQ(proto_frame_write(sv[0], PROTO_MSG_PONG, false, 0, body,
				       PROTO_PREAUTH_MAX_PAYLOAD), 0);
	CHECK_INT_EQ(proto_frame_read_capped(sv[1], false, STALL_TEST_TIMEOUT_MS,
					     PROTO_PREAUTH_MAX_PAYLOAD, &frame), 0);
	CHECK_INT_EQ(frame.body_len, PROTO_PREAUTH_MAX_PAYLOAD);
	proto_frame_free(&frame);
	close(sv[0]);
	close(sv[1]);
	free(body);
}

/* A complete frame read with a deadline arrives whole, its body grown past the first block. */
static void test_timed_read_large_body(void)
{
	size_t body_len = 300 * 1024;
	size_t total = PROTO_HEADER_SIZE + PROTO_REQUEST_ID_SIZE + body_len;
	uint8_t *buf = malloc(total);
	struct proto_frame frame;
	int sv[2];

	proto_header_build(buf, (uint32_t)(body_len + PROTO_REQUEST_ID_SIZE), PROTO_MSG_PTY_DATA);
	memset(buf + PROTO_HEADER_SIZE, 0, PROTO_REQUEST_ID_SIZE);
	for (size_t i = 0; i < body_len; i++)
		buf[PROTO_HEADER_SIZE + PROTO_REQUEST_ID_SIZE + i] = (uint8_t)(i * 7);
	make_pair(sv);
	if (fork() == 0) {
		ssize_t written = write(sv[0], buf, total);

		_exit(written == (ssize_t)total ? 0 : 1);
	}
	CHECK_INT_EQ(proto_frame_read_timed(sv[1], true, 10000, &frame), 0);
	CHECK_INT_EQ(frame.body_len, body_len);
	CHECK(frame.body_len == body_len &&
	      memcmp(frame.body, buf + PROTO_HEADER_SIZE + PROTO_REQUEST_ID_SIZE, body_len) == 0);
	proto_frame_free(&frame);
	wait(NULL);
	close(sv[0]);
	close(sv[1]);
	free(buf);
}

static void test_write_to_closed_peer(void)
{
	int sv[2];

	make_pair(sv);
	close(sv[1]);
	CHECK_INT_EQ(proto_frame_write(sv[0], PROTO_MSG_SHUTDOWN, true, 1, NULL, 0), -EPIPE);
	close(sv[0]);
}

static void test_ping_pong(void)
{
	struct proto_ping ping = { .version = PROTO_VERSION, .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	struct proto_ping ping_out;
	struct proto_pong pong = { .version = PROTO_VERSION, .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	struct proto_pong pong_out;
	uint8_t ping_buf[PROTO_PING_SIZE], pong_buf[PROTO_PONG_SIZE];
	/* proof (32 bytes), version u32 LE, flags; version u32 LE, flags */
	uint8_t expected_ping[WIRE_PING_BYTES], ping_wire[WIRE_PING_BYTES + 1];
	static const uint8_t expected_pong[WIRE_PONG_BYTES] = { 3, 0, 0, 0, 1 };
	uint8_t pong_wire[WIRE_PONG_BYTES + 1];

	for (int i = 0; i < PROTO_PROOF_SIZE; i++)
		ping.proof[i] = (uint8_t)(i + 100);
	/* the wire layout of docs/protocol.md §3, byte for byte, and not one byte more */
	for (int i = 0; i < PROTO_PROOF_SIZE; i++)
		expected_ping[i] = (uint8_t)(i + 100);
	memcpy(expected_ping + 32, (const uint8_t[]){ 3, 0, 0, 0, 1 }, 5);
	memset(ping_wire, WIRE_CANARY, sizeof(ping_wire));
	proto_ping_encode(&ping, ping_wire);
	CHECK(memcmp(ping_wire, expected_ping, sizeof(expected_ping)) == 0);
	CHECK_INT_EQ(ping_wire[sizeof(expected_ping)], WIRE_CANARY);
	memset(pong_wire, WIRE_CANARY, sizeof(pong_wire));
	proto_pong_encode(&pong, pong_wire);
	CHECK(memcmp(pong_wire, expected_pong, sizeof(expected_pong)) == 0);
	CHECK_INT_EQ(pong_wire[sizeof(expected_pong)], WIRE_CANARY);

	proto_ping_encode(&ping, ping_buf);
	CHECK_INT_EQ(proto_ping_decode(ping_buf, sizeof(ping_buf), &ping_out), 0);
	CHECK(proto_secret_equal(ping.proof, ping_out.proof));
	CHECK_INT_EQ(ping_out.version, 3);
	CHECK_INT_EQ(ping_out.flags, 1);
	/* append-only: a v1 ping has no flags, a v0 ping not even a version */
	CHECK_INT_EQ(proto_ping_decode(ping_buf, 36, &ping_out), 0);
	CHECK_INT_EQ(ping_out.version, 3);
	CHECK_INT_EQ(ping_out.flags, 0);
	CHECK_INT_EQ(proto_ping_decode(ping_buf, 32, &ping_out), 0);
	CHECK_INT_EQ(ping_out.version, 0);
	CHECK_INT_EQ(proto_ping_decode(ping_buf, 31, &ping_out), -EPROTO);

	proto_pong_encode(&pong, pong_buf);
	CHECK_INT_EQ(proto_pong_decode(pong_buf, sizeof(pong_buf), &pong_out), 0);
	CHECK_INT_EQ(pong_out.version, 3);
	CHECK_INT_EQ(pong_out.flags, 1);
	CHECK_INT_EQ(proto_pong_decode(pong_buf, 4, &pong_out), 0);
	CHECK_INT_EQ(pong_out.flags, 0);
	CHECK_INT_EQ(proto_pong_decode(pong_buf, 0, &pong_out), 0);
	CHECK_INT_EQ(pong_out.version, 0);
}

/* Parses hex into out; the test vectors below are written the way their RFCs print them. */
static size_t hex_bytes(const char *hex, uint8_t *out)
{
	size_t n = strlen(hex) / 2;

	for (size_t i = 0; i < n; i++)
		sscanf(hex + 2 * i, "%2hhx", &out[i]);
	return n;
}

static bool digest_is(const uint8_t digest[PROTO_SHA256_SIZE], const char *hex)
{
	uint8_t expected[PROTO_SHA256_SIZE];

	return hex_bytes(hex, expected) == PROTO_SHA256_SIZE &&
	       memcmp(digest, expected, PROTO_SHA256_SIZE) == 0;
}

/* FIPS 180-4's "abc" and two-block message; RFC 4231 cases 1, 2 and 6 (a key over a block). */
static void test_sha256_and_hmac_vectors(void)
{
	static const char two_blocks[] =
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static const char case6_data[] = "Test Using Larger Than Block-Size Key - Hash Key First";
	uint8_t digest[PROTO_SHA256_SIZE], key[TEST_HMAC_LONG_KEY];
	struct proto_bytes_piece abc[] = { { (const uint8_t *)"a", 1 }, { (const uint8_t *)"bc", 2 } };
	struct proto_bytes_piece piece = { (const uint8_t *)two_blocks, strlen(two_blocks) };

	proto_sha256(abc, 2, digest);
	CHECK(digest_is(digest, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
	proto_sha256(&piece, 1, digest);
	CHECK(digest_is(digest, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));

	memset(key, 0x0b, TEST_HMAC_CASE1_KEY);
	piece = (struct proto_bytes_piece){ (const uint8_t *)"Hi There", 8 };
	proto_hmac_sha256(key, TEST_HMAC_CASE1_KEY, &piece, 1, digest);
	CHECK(digest_is(digest, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
	piece = (struct proto_bytes_piece){ (const uint8_t *)"what do ya want for nothing?", 28 };
	proto_hmac_sha256((const uint8_t *)"Jefe", 4, &piece, 1, digest);
	CHECK(digest_is(digest, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
	memset(key, 0xaa, TEST_HMAC_LONG_KEY);
	piece = (struct proto_bytes_piece){ (const uint8_t *)case6_data, strlen(case6_data) };
	proto_hmac_sha256(key, TEST_HMAC_LONG_KEY, &piece, 1, digest);
	CHECK(digest_is(digest, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
}

/* The proof depends on the secret and on the nonce, and is not the secret. */
static void test_handshake_proof(void)
{
	uint8_t secret[PROTO_SECRET_SIZE], nonce[PROTO_NONCE_SIZE];
	uint8_t proof[PROTO_PROOF_SIZE], again[PROTO_PROOF_SIZE];

	memset(secret, 0x5a, sizeof(secret));
	memset(nonce, 0x11, sizeof(nonce));
	proto_handshake_proof(secret, nonce, proof);
	proto_handshake_proof(secret, nonce, again);
	CHECK(memcmp(proof, again, sizeof(proof)) == 0);
	CHECK(memcmp(proof, secret, sizeof(proof)) != 0);
	nonce[0] ^= 1;
	proto_handshake_proof(secret, nonce, again);
	CHECK(memcmp(proof, again, sizeof(proof)) != 0);
	nonce[0] ^= 1;
	secret[31] ^= 1;
	proto_handshake_proof(secret, nonce, again);
	CHECK(memcmp(proof, again, sizeof(proof)) != 0);
}

static void test_secret(void)
{
	uint8_t a[PROTO_SECRET_SIZE], b[PROTO_SECRET_SIZE];
	char hex[2 * PROTO_SECRET_SIZE + 1];

	for (int i = 0; i < PROTO_SECRET_SIZE; i++)
		a[i] = (uint8_t)(i * 7 + 0xa0);
	proto_secret_to_hex(a, hex);
	CHECK_INT_EQ(strlen(hex), 64);
	CHECK(strncmp(hex, "a0a7aeb5", 8) == 0);
	CHECK_INT_EQ(proto_secret_from_hex(hex, b), 0);
	CHECK(proto_secret_equal(a, b));
	b[31] ^= 1;
	CHECK(!proto_secret_equal(a, b));
	b[31] ^= 1;
	b[0] ^= 0x80;
	CHECK(!proto_secret_equal(a, b));

	CHECK_INT_EQ(proto_secret_from_hex("abcd", b), -EINVAL);
	CHECK_INT_EQ(proto_secret_from_hex(NULL, b), -EINVAL);
	hex[10] = 'g';
	CHECK_INT_EQ(proto_secret_from_hex(hex, b), -EINVAL);
	hex[10] = 'A';
	CHECK_INT_EQ(proto_secret_from_hex(hex, b), 0);
}

static void check_base64(const char *plain, const char *encoded)
{
	char *text = proto_base64_encode((const uint8_t *)plain, strlen(plain));
	struct proto_bytes bytes;

	CHECK_STR_EQ(text, encoded);
	CHECK_INT_EQ(proto_base64_decode(encoded, strlen(encoded), &bytes), 0);
	CHECK_INT_EQ(bytes.len, strlen(plain));
	CHECK(bytes.len == 0 || memcmp(bytes.data, plain, bytes.len) == 0);
	free(bytes.data);
	free(text);
}

static void test_base64(void)
{
	struct proto_bytes bytes;
	uint8_t all[256];
	char *text;

	/* RFC 4648 section 10 vectors */
	check_base64("", "");
	check_base64("f", "Zg==");
	check_base64("fo", "Zm8=");
	check_base64("foo", "Zm9v");
	check_base64("foob", "Zm9vYg==");
	check_base64("fooba", "Zm9vYmE=");
	check_base64("foobar", "Zm9vYmFy");

	for (int i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	text = proto_base64_encode(all, sizeof(all));
	CHECK_INT_EQ(proto_base64_decode(text, strlen(text), &bytes), 0);
	CHECK_INT_EQ(bytes.len, 256);
	CHECK(memcmp(bytes.data, all, 256) == 0);
	free(bytes.data);
	free(text);

	CHECK_INT_EQ(proto_base64_decode("Zg=", 3, &bytes), -EINVAL);
	CHECK_INT_EQ(proto_base64_decode("Zg=a", 4, &bytes), -EINVAL);
	CHECK_INT_EQ(proto_base64_decode("Z===", 4, &bytes), -EINVAL);
	CHECK_INT_EQ(proto_base64_decode("====", 4, &bytes), -EINVAL);
	CHECK_INT_EQ(proto_base64_decode("Zm9v!mFy", 8, &bytes), -EINVAL);
	CHECK_INT_EQ(proto_base64_decode("Zh==", 4, &bytes), -EINVAL); /* non-zero tail bits */
	CHECK_INT_EQ(proto_base64_decode("Zm 9", 4, &bytes), -EINVAL);
	CHECK(bytes.data == NULL);
}

int main(void)
{
	RUN_TEST(test_type_table);
	RUN_TEST(test_header);
	RUN_TEST(test_decode_memory);
	RUN_TEST(test_decode_hostile);
	RUN_TEST(test_fd_roundtrip);
	RUN_TEST(test_fd_large_frame);
	RUN_TEST(test_fd_hostile);
	RUN_TEST(test_fd_timeout);
	RUN_TEST(test_fd_stall_mid_frame);
	RUN_TEST(test_timed_write_stall);
	RUN_TEST(test_capped_read);
	RUN_TEST(test_timed_read_large_body);
	RUN_TEST(test_write_to_closed_peer);
	RUN_TEST(test_ping_pong);
	RUN_TEST(test_sha256_and_hmac_vectors);
	RUN_TEST(test_handshake_proof);
	RUN_TEST(test_secret);
	RUN_TEST(test_base64);
	return harness_finish();
}
