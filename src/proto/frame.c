/*
 * Frame layer of the wire protocol: the 5-byte header, the optional request-id prefix,
 * blocking frame IO on a stream fd, and the raw Ping/Pong handshake bodies with the secret.
 *
 * Decoding from memory and reading from an fd share one header/prefix validator so the fuzz
 * target exercises exactly what the host and the guest run. The declared length is checked
 * against PROTO_MAX_PAYLOAD before anything is allocated, and a body read from an fd grows
 * with the bytes that actually arrive, so a peer that announces a large frame and stops costs
 * no more than what it sent. The body always lives in its own heap block (never NULL, even
 * when empty) so callers free one pointer and never special-case empty payloads. A read with
 * a deadline polls with the time left before every read(), so a peer that sends part of a
 * frame and stops cannot hold the reader past it; a write with a deadline polls the same way
 * before every non-blocking send, so a peer that takes a frame in a trickle cannot hold the
 * writer past it either. Both tell "nothing of the frame moved" (the stream is intact) from
 * "the deadline passed inside the frame" (it is not), since only the caller knows which of
 * the two it can recover from.
 */
#include "proto/protocol.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#define FRAME_PREFIX_MAX (PROTO_HEADER_SIZE + PROTO_REQUEST_ID_SIZE)
#define FRAME_TYPE_OFFSET 4          /* after the u32 length */
#define HANDSHAKE_VERSION_SIZE 4     /* u32 version in Ping and Pong */
#define FRAME_DISCARD_CHUNK 4096
#define FRAME_BODY_FIRST_BLOCK (64u * 1024u)
/* What the handshake proof's MAC covers before the nonce: binds it to this use and version. */
#define HANDSHAKE_PROOF_LABEL "voidbox-handshake-v3"
#define HEX_DIGITS_PER_BYTE 2
#define HEX_NIBBLE_BITS 4
#define HEX_NIBBLE_MASK 0x0fu

static const char *const proto_type_names[] = {
	[PROTO_MSG_EXEC_REQUEST] = "ExecRequest",
	[PROTO_MSG_EXEC_RESPONSE] = "ExecResponse",
	[PROTO_MSG_PING] = "Ping",
	[PROTO_MSG_PONG] = "Pong",
	[PROTO_MSG_SHUTDOWN] = "Shutdown",
	[PROTO_MSG_FILE_TRANSFER] = "FileTransfer",
	[PROTO_MSG_FILE_TRANSFER_RESPONSE] = "FileTransferResponse",
	[PROTO_MSG_TELEMETRY_DATA] = "TelemetryData",
	[PROTO_MSG_TELEMETRY_ACK] = "TelemetryAck",
	[PROTO_MSG_SUBSCRIBE_TELEMETRY] = "SubscribeTelemetry",
	[PROTO_MSG_WRITE_FILE] = "WriteFile",
	[PROTO_MSG_WRITE_FILE_RESPONSE] = "WriteFileResponse",
	[PROTO_MSG_MKDIR_P] = "MkdirP",
	[PROTO_MSG_MKDIR_P_RESPONSE] = "MkdirPResponse",
	[PROTO_MSG_EXEC_OUTPUT_CHUNK] = "ExecOutputChunk",
	[PROTO_MSG_EXEC_OUTPUT_ACK] = "ExecOutputAck",
	[PROTO_MSG_SNAPSHOT_READY] = "SnapshotReady",
	[PROTO_MSG_READ_FILE] = "ReadFile",
	[PROTO_MSG_READ_FILE_RESPONSE] = "ReadFileResponse",
	[PROTO_MSG_FILE_STAT] = "FileStat",
	[PROTO_MSG_FILE_STAT_RESPONSE] = "FileStatResponse",
	[PROTO_MSG_PTY_OPEN] = "PtyOpen",
	[PROTO_MSG_PTY_OPENED] = "PtyOpened",
	[PROTO_MSG_PTY_DATA] = "PtyData",
	[PROTO_MSG_PTY_RESIZE] = "PtyResize",
	[PROTO_MSG_PTY_CLOSE] = "PtyClose",
	[PROTO_MSG_PTY_CLOSED] = "PtyClosed",
	[PROTO_MSG_SET_POLICY] = "SetPolicy",
	[PROTO_MSG_SET_POLICY_RESPONSE] = "SetPolicyResponse",
	[PROTO_MSG_CHALLENGE] = "Challenge",
};

bool proto_msg_type_is_valid(uint8_t type)
{
	return type >= PROTO_MSG_EXEC_REQUEST && type <= PROTO_MSG_TYPE_LAST;
}

const char *proto_msg_type_name(uint8_t type)
{
	if (!proto_msg_type_is_valid(type))
		return "Invalid";
	return proto_type_names[type];
}

/* ---- little-endian helpers ---------------------------------------------------------------- */

static uint32_t le32_load(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void le32_store(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* ---- header and frames -------------------------------------------------------------------- */

int proto_header_parse(const uint8_t header[PROTO_HEADER_SIZE], uint32_t *payload_len,
		       uint8_t *type)
{
	*payload_len = le32_load(header);
	*type = header[FRAME_TYPE_OFFSET];
	if (*payload_len > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (!proto_msg_type_is_valid(*type))
		return -EPROTO;
	return 0;
}

void proto_header_build(uint8_t header[PROTO_HEADER_SIZE], uint32_t payload_len, uint8_t type)
{
	le32_store(header, payload_len);
	header[FRAME_TYPE_OFFSET] = type;
}

static bool frame_carries_request_id(uint8_t type, bool multiplexed)
{
	return multiplexed && type != PROTO_MSG_PING && type != PROTO_MSG_PONG &&
	       type != PROTO_MSG_CHALLENGE;
}

void proto_frame_free(struct proto_frame *frame)
{
	if (!frame)
		return;
	free(frame->body);
	memset(frame, 0, sizeof(*frame));
}

/* Allocates the body block; one spare byte keeps it non-NULL and NUL-terminated. */
static int frame_alloc_body(struct proto_frame *out, size_t body_len)
{
	out->body = malloc(body_len + 1);
	if (!out->body)
		return -ENOMEM;
	out->body[body_len] = 0;
	out->body_len = body_len;
	return 0;
}

long proto_frame_decode(const uint8_t *data, size_t len, bool multiplexed,
			struct proto_frame *out)
{
	uint32_t payload_len;
	uint8_t type;
	size_t prefix = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (len < PROTO_HEADER_SIZE)
		return 0;
	rc = proto_header_parse(data, &payload_len, &type);
	if (rc < 0)
		return rc;
	if (frame_carries_request_id(type, multiplexed)) {
		if (payload_len < PROTO_REQUEST_ID_SIZE)
			return -EPROTO;
		prefix = PROTO_REQUEST_ID_SIZE;
	}
	if (len - PROTO_HEADER_SIZE < payload_len)
		return 0;

	out->type = type;
	if (prefix) {
		out->has_request_id = true;
		out->request_id = le32_load(data + PROTO_HEADER_SIZE);
	}
	rc = frame_alloc_body(out, payload_len - prefix);
	if (rc < 0)
		return rc;
	memcpy(out->body, data + PROTO_HEADER_SIZE + prefix, out->body_len);
	return (long)(PROTO_HEADER_SIZE + payload_len);
}

/*
 * One frame being read from or written to an fd: the absolute deadline (or none) and whether
 * any byte of the frame has moved, which decides between -ETIMEDOUT (nothing moved, the
 * stream is still aligned) and -ETIME (stopped mid-frame, the stream is lost).
 */
struct frame_io {
	int fd;
	bool bounded;
	struct timespec deadline;
	bool started;
};

static void frame_io_start(struct frame_io *io, int fd, int timeout_ms)
{
	memset(io, 0, sizeof(*io));
	io->fd = fd;
	io->bounded = timeout_ms >= 0;
	if (!io->bounded)
		return;
	io->deadline = clock_deadline_after_ms(timeout_ms);
}

static int frame_io_remaining_ms(const struct frame_io *io)
{
	uint64_t left = clock_ms_until(&io->deadline);

	return left > INT_MAX ? INT_MAX : (int)left;
}

static int frame_io_timeout(const struct frame_io *io)
{
	return io->started ? -ETIME : -ETIMEDOUT;
}

/* Waits until the fd is ready for events (POLLIN or POLLOUT) or the deadline passes. */
static int frame_io_wait(const struct frame_io *io, short events)
{
	for (;;) {
		struct pollfd pfd = { .fd = io->fd, .events = events };
		int left = frame_io_remaining_ms(io);
		int rc;

		if (left == 0)
			return frame_io_timeout(io);
		rc = poll(&pfd, 1, left);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

/*
 * Reads exactly len bytes before the reader's deadline. A socket receive timeout (SO_RCVTIMEO)
 * counts as the deadline passing, so no read waits longer than the caller allowed, whichever
 * way the wait was bounded.
 */
static int fd_read_exact(struct frame_io *reader, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n;

		if (reader->bounded) {
			int rc = frame_io_wait(reader, POLLIN);

			if (rc < 0)
				return rc;
		}
		n = read(reader->fd, p + done, len - done);
		if (n > 0) {
			done += (size_t)n;
			reader->started = true;
			continue;
		}
		if (n == 0)
			return reader->started ? -EPIPE : -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return frame_io_timeout(reader);
		return -errno;
	}
	return 0;
}

static int fd_discard(struct frame_io *reader, size_t len)
{
	uint8_t scratch[FRAME_DISCARD_CHUNK];

	while (len > 0) {
		size_t step = len < sizeof(scratch) ? len : sizeof(scratch);
		int rc = fd_read_exact(reader, scratch, step);

		if (rc < 0)
			return rc;
		len -= step;
	}
	return 0;
}

/*
 * Reads the body into a block that grows with what has arrived (doubling, from
 * FRAME_BODY_FIRST_BLOCK), so a header that announces 64 MiB costs memory only as the bytes
 * come, not up front.
 */
static int frame_read_body(struct frame_io *reader, struct proto_frame *out, size_t body_len)
{
	size_t capacity = 0, done = 0;
	uint8_t *body = NULL;
	int rc;

	do {
		size_t want = capacity ? capacity * 2 : FRAME_BODY_FIRST_BLOCK;
		uint8_t *grown;

		if (want > body_len)
			want = body_len;
		grown = realloc(body, want + 1);
		if (!grown) {
			free(body);
			return -ENOMEM;
		}
		body = grown;
		capacity = want;
		rc = fd_read_exact(reader, body + done, capacity - done);
		if (rc < 0) {
			free(body);
			return rc;
		}
		done = capacity;
	} while (done < body_len);
	body[body_len] = 0;
	out->body = body;
	out->body_len = body_len;
	return 0;
}

int proto_frame_read_capped(int fd, bool multiplexed, int timeout_ms, uint32_t max_payload,
			    struct proto_frame *out)
{
	struct frame_io reader;
	uint8_t header[PROTO_HEADER_SIZE];
	uint8_t id_bytes[PROTO_REQUEST_ID_SIZE];
	uint32_t payload_len;
	uint8_t type;
	size_t prefix = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	frame_io_start(&reader, fd, timeout_ms);
	rc = fd_read_exact(&reader, header, sizeof(header));
	if (rc < 0)
		return rc;
	rc = proto_header_parse(header, &payload_len, &type);
	if (payload_len > max_payload)
		return -EMSGSIZE;
	if (rc == -EPROTO) {
		rc = fd_discard(&reader, payload_len);
		return rc < 0 ? rc : -EPROTO;
	}
	if (rc < 0)
		return rc;
	if (frame_carries_request_id(type, multiplexed)) {
		if (payload_len < PROTO_REQUEST_ID_SIZE) {
			rc = fd_discard(&reader, payload_len);
			return rc < 0 ? rc : -EPROTO;
		}
		rc = fd_read_exact(&reader, id_bytes, sizeof(id_bytes));
		if (rc < 0)
			return rc;
		prefix = PROTO_REQUEST_ID_SIZE;
	}

	rc = frame_read_body(&reader, out, payload_len - prefix);
	if (rc < 0)
		return rc;
	out->type = type;
	if (prefix) {
		out->has_request_id = true;
		out->request_id = le32_load(id_bytes);
	}
	return 0;
}

int proto_frame_read_timed(int fd, bool multiplexed, int timeout_ms, struct proto_frame *out)
{
	return proto_frame_read_capped(fd, multiplexed, timeout_ms, PROTO_MAX_PAYLOAD, out);
}

int proto_frame_read(int fd, bool multiplexed, struct proto_frame *out)
{
	return proto_frame_read_timed(fd, multiplexed, PROTO_READ_NO_DEADLINE, out);
}

/*
 * sendmsg with MSG_NOSIGNAL on sockets so a dead peer is -EPIPE, not SIGPIPE (flags adds
 * MSG_DONTWAIT for a bounded write); writev otherwise.
 */
static ssize_t fd_write_vector(int fd, struct iovec *iov, int iov_count, int flags)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)iov_count };
	ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | flags);

	if (n < 0 && errno == ENOTSOCK)
		n = writev(fd, iov, iov_count);
	return n;
}

/*
 * Writes every byte of iov before the writer's deadline: a bounded write waits for room with
 * the time left and then sends only what fits without blocking, so a peer that drains a
 * socket buffer now and then cannot stretch one frame past the deadline (on a socket; a
 * non-socket's writev may still block once it has room). A socket send timeout
 * (SO_SNDTIMEO) ends an unbounded write the same way as a deadline.
 */
static int fd_write_all(struct frame_io *writer, struct iovec *iov, int iov_count)
{
	int flags = writer->bounded ? MSG_DONTWAIT : 0;

	while (iov_count > 0) {
		ssize_t n;

		if (writer->bounded) {
			int rc = frame_io_wait(writer, POLLOUT);

			if (rc < 0)
				return rc;
		}
		n = fd_write_vector(writer->fd, iov, iov_count, flags);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if ((errno == EAGAIN || errno == EWOULDBLOCK) && writer->bounded)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return frame_io_timeout(writer);
			return -errno;
		}
		if (n > 0)
			writer->started = true;
		while (iov_count > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			iov_count--;
		}
		if (iov_count > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int proto_frame_write_timed(int fd, uint8_t type, bool multiplexed, uint32_t request_id,
			    const void *body, size_t body_len, int timeout_ms)
{
	uint8_t prefix[FRAME_PREFIX_MAX];
	size_t prefix_len = PROTO_HEADER_SIZE;
	size_t id_len = frame_carries_request_id(type, multiplexed) ? PROTO_REQUEST_ID_SIZE : 0;
	struct frame_io writer;
	struct iovec iov[2];
	int iov_count = 1;

	if (!proto_msg_type_is_valid(type))
		return -EINVAL;
	if (body_len > PROTO_MAX_PAYLOAD - id_len)
		return -EMSGSIZE;
	proto_header_build(prefix, (uint32_t)(body_len + id_len), type);
	if (id_len) {
		le32_store(prefix + PROTO_HEADER_SIZE, request_id);
		prefix_len += id_len;
	}
	iov[0].iov_base = prefix;
	iov[0].iov_len = prefix_len;
	if (body_len) {
		iov[1].iov_base = (void *)body;
		iov[1].iov_len = body_len;
		iov_count++;
	}
	frame_io_start(&writer, fd, timeout_ms);
	return fd_write_all(&writer, iov, iov_count);
}

int proto_frame_write(int fd, uint8_t type, bool multiplexed, uint32_t request_id,
		      const void *body, size_t body_len)
{
	return proto_frame_write_timed(fd, type, multiplexed, request_id, body, body_len,
				       PROTO_WRITE_NO_DEADLINE);
}

/* ---- handshake ---------------------------------------------------------------------------- */

int proto_ping_decode(const uint8_t *body, size_t len, struct proto_ping *out)
{
	const size_t version_end = PROTO_PROOF_SIZE + HANDSHAKE_VERSION_SIZE;

	memset(out, 0, sizeof(*out));
	if (len < PROTO_PROOF_SIZE)
		return -EPROTO;
	memcpy(out->proof, body, PROTO_PROOF_SIZE);
	if (len >= version_end)
		out->version = le32_load(body + PROTO_PROOF_SIZE);
	if (len >= PROTO_PING_SIZE)
		out->flags = body[version_end];
	return 0;
}

void proto_ping_encode(const struct proto_ping *ping, uint8_t out[PROTO_PING_SIZE])
{
	memcpy(out, ping->proof, PROTO_PROOF_SIZE);
	le32_store(out + PROTO_PROOF_SIZE, ping->version);
	out[PROTO_PROOF_SIZE + HANDSHAKE_VERSION_SIZE] = ping->flags;
}

void proto_handshake_proof(const uint8_t secret[PROTO_SECRET_SIZE],
			   const uint8_t nonce[PROTO_NONCE_SIZE], uint8_t out[PROTO_PROOF_SIZE])
{
	static const char label[] = HANDSHAKE_PROOF_LABEL;
	const struct proto_bytes_piece pieces[] = {
		{ (const uint8_t *)label, sizeof(label) - 1 },
		{ nonce, PROTO_NONCE_SIZE },
	};

	proto_hmac_sha256(secret, PROTO_SECRET_SIZE, pieces, sizeof(pieces) / sizeof(pieces[0]),
			  out);
}

int proto_pong_decode(const uint8_t *body, size_t len, struct proto_pong *out)
{
	const size_t version_end = HANDSHAKE_VERSION_SIZE;

	memset(out, 0, sizeof(*out));
	if (len >= version_end)
		out->version = le32_load(body);
	if (len >= PROTO_PONG_SIZE)
		out->flags = body[version_end];
	return 0;
}

void proto_pong_encode(const struct proto_pong *pong, uint8_t out[PROTO_PONG_SIZE])
{
	le32_store(out, pong->version);
	out[HANDSHAKE_VERSION_SIZE] = pong->flags;
}

bool proto_secret_equal(const uint8_t a[PROTO_SECRET_SIZE], const uint8_t b[PROTO_SECRET_SIZE])
{
	volatile uint8_t diff = 0;

	for (size_t i = 0; i < PROTO_SECRET_SIZE; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

static int hex_digit_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int proto_secret_from_hex(const char *hex, uint8_t out[PROTO_SECRET_SIZE])
{
	uint8_t parsed[PROTO_SECRET_SIZE];

	if (!hex || strlen(hex) != HEX_DIGITS_PER_BYTE * PROTO_SECRET_SIZE)
		return -EINVAL;
	for (size_t i = 0; i < PROTO_SECRET_SIZE; i++) {
		int hi = hex_digit_value(hex[HEX_DIGITS_PER_BYTE * i]);
		int lo = hex_digit_value(hex[HEX_DIGITS_PER_BYTE * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		parsed[i] = (uint8_t)(hi << HEX_NIBBLE_BITS | lo);
	}
	memcpy(out, parsed, sizeof(parsed));
	return 0;
}

void proto_secret_to_hex(const uint8_t secret[PROTO_SECRET_SIZE],
			 char out[2 * PROTO_SECRET_SIZE + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < PROTO_SECRET_SIZE; i++) {
		out[HEX_DIGITS_PER_BYTE * i] = digits[secret[i] >> HEX_NIBBLE_BITS];
		out[HEX_DIGITS_PER_BYTE * i + 1] = digits[secret[i] & HEX_NIBBLE_MASK];
	}
	out[HEX_DIGITS_PER_BYTE * PROTO_SECRET_SIZE] = '\0';
}
