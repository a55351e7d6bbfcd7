/*
 * The host<->guest wire protocol, shared verbatim by the host and the guest agent.
 *
 * Frames are upstream v2: [u32 LE payload length][u8 type][payload]. After the Ping/Pong
 * handshake every payload starts with a u32 LE request id. Control bodies are JSON objects
 * with upstream's field names; bulk byte fields are base64 strings on the wire (decoders also
 * accept upstream's arrays of integers), and PtyData is raw bytes. Each message has a C struct,
 * an encoder to a heap-allocated JSON body and a decoder that validates every field, so no
 * other module touches JSON for protocol purposes. docs/protocol.md is the byte-level spec.
 */
#ifndef VOIDBOX_PROTO_PROTOCOL_H
#define VOIDBOX_PROTO_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_HEADER_SIZE 5
#define PROTO_MAX_PAYLOAD (64u * 1024u * 1024u)
/*
 * Most JSON values (numbers, strings, arrays, objects, keys) one control body may hold: a
 * parsed value costs tens of bytes, so this bounds a body's parsed cost (about 16 MiB) where
 * the frame limit cannot. Byte fields in the upstream integer-array form fit only below it;
 * base64 strings are one value whatever their length.
 */
#define PROTO_JSON_VALUES_MAX (256u * 1024u)
#define PROTO_REQUEST_ID_SIZE 4
#define PROTO_VERSION 3u
#define PROTO_FLAG_SUPPORTS_MULTIPLEX 0x01u
/*
 * Ping: the rekey document (§4.2) follows the 37 bytes; Pong: the agent applied it. Ends a
 * restored guest's rekey with the handshake's own round trip (docs/protocol.md §3).
 */
#define PROTO_FLAG_REKEY 0x02u
/* The largest payload the agent reads before a connection has authenticated (a Ping). */
#define PROTO_PREAUTH_MAX_PAYLOAD 1024u
#define PROTO_SECRET_SIZE 32
/* The agent's challenge (a fresh random nonce) and the host's proof (HMAC-SHA256) over it. */
#define PROTO_NONCE_SIZE 32
#define PROTO_SHA256_SIZE 32
#define PROTO_PROOF_SIZE PROTO_SHA256_SIZE
#define PROTO_CHALLENGE_SIZE PROTO_NONCE_SIZE
#define PROTO_PING_SIZE (PROTO_PROOF_SIZE + 4 + 1)
#define PROTO_PONG_SIZE (4 + 1)
#define PROTO_GUEST_AGENT_PORT 1234u
/* exit_code reported when the process died by a signal (exec) */
#define PROTO_EXIT_CODE_SIGNALED (-1)

enum proto_msg_type {
	PROTO_MSG_EXEC_REQUEST = 1,
	PROTO_MSG_EXEC_RESPONSE = 2,
	PROTO_MSG_PING = 3,
	PROTO_MSG_PONG = 4,
	PROTO_MSG_SHUTDOWN = 5,
	PROTO_MSG_FILE_TRANSFER = 6,
	PROTO_MSG_FILE_TRANSFER_RESPONSE = 7,
	PROTO_MSG_TELEMETRY_DATA = 8,
	PROTO_MSG_TELEMETRY_ACK = 9,
	PROTO_MSG_SUBSCRIBE_TELEMETRY = 10,
	PROTO_MSG_WRITE_FILE = 11,
	PROTO_MSG_WRITE_FILE_RESPONSE = 12,
	PROTO_MSG_MKDIR_P = 13,
	PROTO_MSG_MKDIR_P_RESPONSE = 14,
	PROTO_MSG_EXEC_OUTPUT_CHUNK = 15,
	PROTO_MSG_EXEC_OUTPUT_ACK = 16,
	PROTO_MSG_SNAPSHOT_READY = 17,
	PROTO_MSG_READ_FILE = 18,
	PROTO_MSG_READ_FILE_RESPONSE = 19,
	PROTO_MSG_FILE_STAT = 20,
	PROTO_MSG_FILE_STAT_RESPONSE = 21,
	PROTO_MSG_PTY_OPEN = 22,
	PROTO_MSG_PTY_OPENED = 23,
	PROTO_MSG_PTY_DATA = 24,
	PROTO_MSG_PTY_RESIZE = 25,
	PROTO_MSG_PTY_CLOSE = 26,
	PROTO_MSG_PTY_CLOSED = 27,
	PROTO_MSG_SET_POLICY = 28,
	PROTO_MSG_SET_POLICY_RESPONSE = 29,
	PROTO_MSG_CHALLENGE = 30,
	PROTO_MSG_TYPE_LAST = PROTO_MSG_CHALLENGE,
};

bool proto_msg_type_is_valid(uint8_t type);
/* "ExecRequest", ...; "Invalid" for unknown values. */
const char *proto_msg_type_name(uint8_t type);

/* ---- frames ------------------------------------------------------------------------------ */

/* A decoded frame. body points into payload storage owned by the frame. */
struct proto_frame {
	uint8_t type;
	bool has_request_id;
	uint32_t request_id;
	uint8_t *body;     /* payload after the request id (heap; free with proto_frame_free) */
	size_t body_len;
};

void proto_frame_free(struct proto_frame *frame);

/*
 * Parses a 5-byte header. Returns 0, -EMSGSIZE when the declared length exceeds
 * PROTO_MAX_PAYLOAD, or -EPROTO for an invalid type (the length is still reported so the
 * caller can skip the payload).
 */
int proto_header_parse(const uint8_t header[PROTO_HEADER_SIZE], uint32_t *payload_len,
		       uint8_t *type);
void proto_header_build(uint8_t header[PROTO_HEADER_SIZE], uint32_t payload_len, uint8_t type);

/*
 * Decodes one complete frame from memory (header + payload). multiplexed: expect the 4-byte
 * request id (Ping and Pong never carry one). Returns bytes consumed (>0), 0 when more input is
 * needed, or a negative errno: -EMSGSIZE (over cap), -EPROTO (bad type or payload shorter than
 * the request id). Used by the fuzz target and by stream readers.
 */
long proto_frame_decode(const uint8_t *data, size_t len, bool multiplexed,
			struct proto_frame *out);

#define PROTO_READ_NO_DEADLINE (-1)

/*
 * Reads one frame from fd (handles EINTR and short reads); the whole frame must arrive within
 * timeout_ms (PROTO_READ_NO_DEADLINE: wait as long as it takes). Returns 0, -ECONNRESET on
 * clean EOF before a header, -EPIPE on EOF mid-frame, -EMSGSIZE, -EPROTO, -ETIMEDOUT when
 * nothing of a frame arrived in time (the stream is intact: the caller may read again),
 * -ETIME when the deadline passed mid-frame (the stream is no longer aligned: close it), or
 * another -errno. A socket receive timeout (SO_RCVTIMEO) ends the read the same way. On
 * -EPROTO for an unknown type the payload has been consumed, so the caller may drop the frame
 * and continue.
 */
int proto_frame_read_timed(int fd, bool multiplexed, int timeout_ms, struct proto_frame *out);
/*
 * proto_frame_read_timed for a frame whose payload may not exceed max_payload (a frame before
 * authentication, PROTO_PREAUTH_MAX_PAYLOAD): a header declaring more is -EMSGSIZE before a
 * byte of its payload is read or allocated.
 */
int proto_frame_read_capped(int fd, bool multiplexed, int timeout_ms, uint32_t max_payload,
			    struct proto_frame *out);
/* proto_frame_read_timed without a deadline (a reader woken by shutdown() when it must stop). */
int proto_frame_read(int fd, bool multiplexed, struct proto_frame *out);

#define PROTO_WRITE_NO_DEADLINE (-1)

/*
 * Writes one frame as a single gathered write loop (caller serialises writers); the whole
 * frame must leave within timeout_ms (PROTO_WRITE_NO_DEADLINE: as long as it takes, or until
 * a socket send timeout, SO_SNDTIMEO, finds no progress). request_id is ignored when
 * !multiplexed. Returns 0, -EMSGSIZE (over PROTO_MAX_PAYLOAD), -ETIMEDOUT when nothing of the
 * frame left in time (the stream is intact), -ETIME when the deadline passed mid-frame (the
 * peer holds part of a frame: the stream is lost, close it), or another -errno (-EPIPE for a
 * vanished peer).
 */
int proto_frame_write_timed(int fd, uint8_t type, bool multiplexed, uint32_t request_id,
			    const void *body, size_t body_len, int timeout_ms);
/* proto_frame_write_timed without a deadline. */
int proto_frame_write(int fd, uint8_t type, bool multiplexed, uint32_t request_id,
		      const void *body, size_t body_len);

/* ---- handshake --------------------------------------------------------------------------- */

/*
 * Challenge-response (docs/protocol.md §3): on accept the agent sends Challenge, a fresh nonce;
 * the host answers with Ping, whose proof is proto_handshake_proof(secret, nonce); the agent
 * checks it and sends Pong. The secret never crosses the wire, and a recorded Ping proves
 * nothing on a later connection, whose nonce differs.
 */
struct proto_ping {
	uint8_t proof[PROTO_PROOF_SIZE];
	uint32_t version;
	uint8_t flags;
};

/* HMAC-SHA256(secret, "voidbox-handshake-v3" || nonce): what the host's Ping carries. */
void proto_handshake_proof(const uint8_t secret[PROTO_SECRET_SIZE],
			   const uint8_t nonce[PROTO_NONCE_SIZE], uint8_t out[PROTO_PROOF_SIZE]);

/* Bytes hashed as one message (src/proto/hmac_sha256.c). */
struct proto_bytes_piece {
	const uint8_t *data;
	size_t len;
};

void proto_sha256(const struct proto_bytes_piece *pieces, size_t count,
		  uint8_t out[PROTO_SHA256_SIZE]);
void proto_hmac_sha256(const uint8_t *key, size_t key_len, const struct proto_bytes_piece *pieces,
		       size_t count, uint8_t out[PROTO_SHA256_SIZE]);

struct proto_pong {
	uint32_t version;
	uint8_t flags;
};

/* Append-only parsing: <32 bytes invalid (-EPROTO); missing tail fields are 0. */
int proto_ping_decode(const uint8_t *body, size_t len, struct proto_ping *out);
void proto_ping_encode(const struct proto_ping *ping, uint8_t out[PROTO_PING_SIZE]);
int proto_pong_decode(const uint8_t *body, size_t len, struct proto_pong *out);
void proto_pong_encode(const struct proto_pong *pong, uint8_t out[PROTO_PONG_SIZE]);
/* Constant-time comparison of two secrets. */
bool proto_secret_equal(const uint8_t a[PROTO_SECRET_SIZE], const uint8_t b[PROTO_SECRET_SIZE]);
/* 64 lowercase hex chars <-> 32 bytes; parse returns -EINVAL on bad length or digits. */
int proto_secret_from_hex(const char *hex, uint8_t out[PROTO_SECRET_SIZE]);
void proto_secret_to_hex(const uint8_t secret[PROTO_SECRET_SIZE], char out[2 * PROTO_SECRET_SIZE + 1]);

/* ---- message bodies ---------------------------------------------------------------------- */

/*
 * Why a reply failed, for programs: the "code" field beside the "error" sentence (which stays
 * for people). Hosts decide on the code, never on the sentence's words.
 */
enum proto_error_code {
	PROTO_ERROR_NONE,       /* no code: success, or a reply that carries none */
	PROTO_ERROR_DENIED,     /* "denied": the agent's rules refuse it (roots, allowlist, links) */
	PROTO_ERROR_NOT_FOUND,  /* "not_found": the path or program does not exist */
	PROTO_ERROR_INVALID,    /* "invalid": the request cannot be carried out as asked */
	PROTO_ERROR_TIMED_OUT,  /* "timed_out": the command outlived its timeout and was killed */
	PROTO_ERROR_KILLED,     /* "killed": the command died by a signal */
	PROTO_ERROR_BUSY,       /* "busy": a limit on concurrent work was reached */
	PROTO_ERROR_FAILED,     /* "failed": any other failure */
	PROTO_ERROR_UNKNOWN,    /* "unknown": a code this side does not know */
};

/* The wire name of code; NULL for PROTO_ERROR_NONE (no "code" field is sent). */
const char *proto_error_code_name(enum proto_error_code code);
/* The code for a failure reported as an errno value (either sign); 0 is PROTO_ERROR_NONE. */
enum proto_error_code proto_error_code_from_errno(int err);

struct proto_bytes {
	uint8_t *data; /* heap, may be NULL when len == 0 */
	size_t len;
};

struct proto_env_var {
	char *key;
	char *value;
};

struct proto_exec_request {
	char *program;
	char **args; /* args_count entries */
	size_t args_count;
	struct proto_bytes stdin_data;   /* "stdin" */
	struct proto_env_var *env;       /* "env": [[k,v],...] */
	size_t env_count;
	char *working_dir;               /* NULL when absent */
	bool has_timeout;
	uint64_t timeout_secs;           /* 0 = no timeout */
};

struct proto_exec_response {
	struct proto_bytes stdout_data;
	struct proto_bytes stderr_data;
	int32_t exit_code;
	char *error;                     /* NULL when absent */
	enum proto_error_code code;      /* "code"; PROTO_ERROR_NONE when absent */
	bool has_duration;
	uint64_t duration_ms;
};

enum proto_stream { PROTO_STREAM_STDOUT, PROTO_STREAM_STDERR };

struct proto_exec_output_chunk {
	enum proto_stream stream;        /* "stream": "stdout" | "stderr" */
	struct proto_bytes data;
	uint64_t seq;                    /* per stream, from 0 */
};

struct proto_write_file {
	char *path;
	struct proto_bytes content;
	bool create_parents;             /* default true */
};

/* WriteFileResponse and MkdirPResponse */
struct proto_status_response {
	bool success;
	char *error;
	enum proto_error_code code;
};

/* MkdirP, ReadFile, FileStat */
struct proto_path_request {
	char *path;
};

struct proto_read_file_response {
	bool success;
	struct proto_bytes content;
	char *error;
	enum proto_error_code code;
};

struct proto_file_stat_response {
	bool exists;
	bool has_size;
	uint64_t size;
	char *error;
	enum proto_error_code code;
};

struct proto_subscribe_telemetry {
	uint64_t interval_ms;            /* default 1000 */
	bool include_kernel_threads;     /* default false */
};

struct proto_system_metrics {
	double cpu_percent;
	uint64_t memory_used_bytes;
	uint64_t memory_total_bytes;
	uint64_t net_rx_bytes;
	uint64_t net_tx_bytes;
	uint32_t procs_running;
	uint32_t open_fds;
};

struct proto_process_metrics {
	uint32_t pid;
	char *comm;
	uint64_t rss_bytes;
	uint64_t cpu_jiffies;
	char state;                      /* 1-char string on the wire */
};

struct proto_telemetry_batch {
	uint64_t seq;
	uint64_t timestamp_ms;
	bool has_system;
	struct proto_system_metrics system;
	struct proto_process_metrics *processes;
	size_t processes_count;
	char *trace_context;             /* NULL -> null */
};

struct proto_pty_open {
	uint16_t cols;
	uint16_t rows;
	char *program;
	char **args;
	size_t args_count;
	struct proto_env_var *env;
	size_t env_count;
	char *working_dir;
	bool interactive;                /* default false */
};

/*
 * SetPolicy: the exec policy of the session, sent by the host right after the handshake and
 * held by the agent in memory (docs/protocol.md §8). allow_all_commands is the host's explicit
 * choice; with it false only the listed commands run (bare names or absolute paths).
 */
struct proto_set_policy {
	bool allow_all_commands;
	char **commands;                 /* commands_count entries */
	size_t commands_count;
	uint64_t max_open_files;
	uint64_t max_processes;
	uint64_t max_file_size;
};

struct proto_pty_resize {
	uint16_t cols;
	uint16_t rows;
};

struct proto_pty_closed {
	int32_t exit_code;
};

/*
 * Every encoder returns a malloc'd body (not NUL-terminated; release with free()) in *out and
 * *out_len, 0 or -errno (-EINVAL for a NULL required string or invalid UTF-8, -ERANGE never:
 * integers above INT64_MAX are -EINVAL). Every decoder fills the struct from a JSON body;
 * returns 0, -ENOMEM, or -EPROTO with a short reason in *why (why may be NULL; the text lives
 * in thread-local storage until the next decode on the same thread) for malformed input. Decoded structs are released with the
 * matching _free, which also accepts a zeroed struct. Missing optional fields take upstream's
 * defaults.
 */
#define PROTO_DECLARE_CODEC(name)                                                               \
	int proto_##name##_encode(const struct proto_##name *msg, uint8_t **out, size_t *out_len); \
	int proto_##name##_decode(const uint8_t *body, size_t len, struct proto_##name *out,       \
				  const char **why);                                             \
	void proto_##name##_free(struct proto_##name *msg)

PROTO_DECLARE_CODEC(exec_request);
PROTO_DECLARE_CODEC(exec_response);
PROTO_DECLARE_CODEC(exec_output_chunk);
PROTO_DECLARE_CODEC(write_file);
PROTO_DECLARE_CODEC(status_response);
PROTO_DECLARE_CODEC(path_request);
PROTO_DECLARE_CODEC(read_file_response);
PROTO_DECLARE_CODEC(file_stat_response);
PROTO_DECLARE_CODEC(subscribe_telemetry);
PROTO_DECLARE_CODEC(telemetry_batch);
PROTO_DECLARE_CODEC(pty_open);
PROTO_DECLARE_CODEC(pty_resize);
PROTO_DECLARE_CODEC(pty_closed);
PROTO_DECLARE_CODEC(set_policy);

/* Base64 helpers (RFC 4648, padded) used by the codecs and by tests. */
char *proto_base64_encode(const uint8_t *data, size_t len);
int proto_base64_decode(const char *text, size_t text_len, struct proto_bytes *out);

/*
 * The rekey document (§4.2): what a restored guest's agent needs to stop being a copy of the
 * snapshot. Encoded as {"secret_hex", "rng_seed_b64", "clock_ns"} JSON.
 */
#define PROTO_REKEY_SEED_MAX 256
struct proto_rekey {
	uint8_t secret[PROTO_SECRET_SIZE];
	uint8_t seed[PROTO_REKEY_SEED_MAX];
	size_t seed_len;   /* 1..PROTO_REKEY_SEED_MAX */
	uint64_t clock_ns; /* host CLOCK_REALTIME, > 0 */
};

/* malloc'ed JSON text in *json_out; 0, -EINVAL (a field out of range) or -ENOMEM. */
int proto_rekey_encode(const struct proto_rekey *rekey, char **json_out);
/* 0, or -EINVAL with *why naming the bad field; out is zeroed on failure. */
int proto_rekey_decode(const uint8_t *json, size_t len, struct proto_rekey *out,
		       const char **why);
/*
 * The same document with clock_ns in place of its clock: a host stamps a rekey as it sends it,
 * so a guest restored after retries is not set behind by the time they took. Malloc'ed JSON
 * in *json_out; 0, or -EINVAL (json is not a rekey document, or clock_ns is 0) or -ENOMEM.
 */
int proto_rekey_restamp(const uint8_t *json, size_t len, uint64_t clock_ns, char **json_out);

#endif
