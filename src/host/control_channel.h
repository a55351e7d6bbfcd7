/*
 * The host's RPC client to the guest agent: one persistent, authenticated, multiplexed
 * connection per sandbox carrying every call, plus dedicated connections for PTY sessions.
 *
 * The channel does not know how a stream to the agent is made (a plain unix socket to an agent
 * running on the host, or the VM's hybrid-vsock socket after its CONNECT handshake): the caller
 * supplies a connect callback. Everything else lives here: connect retries with backoff, the
 * Ping/Pong handshake that insists on protocol v2 with multiplexing, one reader thread that
 * routes replies by request id, one mutex-held writer so frames never interleave, per-call
 * timeouts from the digest's table, and a lazy, serialised reconnect after the connection dies.
 * Every read from the guest is bounded (a deadline, or a shutdown() that wakes it) and what
 * the guest may make the host queue is bounded in bytes, so a hostile guest can neither hang
 * the host's calls nor exhaust its memory.
 *
 * Calls return 0 or a negative errno. The sentence explaining the last failure on the calling
 * thread (what happened and what to do) is control_channel_last_error().
 */
#ifndef VOIDBOX_HOST_CONTROL_CHANNEL_H
#define VOIDBOX_HOST_CONTROL_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/protocol.h"

/* timeout_ms values understood by every call that takes one */
#define CONTROL_CHANNEL_TIMEOUT_DEFAULT 0   /* the per-RPC default (digest §2.5) */
#define CONTROL_CHANNEL_TIMEOUT_INFINITE (-1)

struct control_channel_config {
	/*
	 * Returns a connected, blocking stream fd to the agent (owned by the channel from then
	 * on) or a negative errno; it should give up after about timeout_ms. Called again, with
	 * backoff, until the connect deadline passes. -ECHILD means the VM has ended, and
	 * -ECANCELED that the caller gave the start up (a signal during a boot): no retry.
	 */
	int (*connect)(void *opaque, int timeout_ms);
	void *connect_opaque;
	uint8_t secret[PROTO_SECRET_SIZE];
	/* How long the handshake retries; 0 means 30 s. */
	int connect_deadline_ms;
	/*
	 * How long a quiet, long-running exec's liveness check waits for the guest's answer
	 * before the call fails; 0 means 60 s, a negative value turns the check off.
	 */
	int liveness_timeout_ms;
	/*
	 * Called first on each connection's reader thread, before it reads a byte from the guest:
	 * the sandbox installs the reader's seccomp filter there. NULL: the reader runs as is.
	 */
	void (*reader_start)(void);
};

struct control_channel;

/* Copies cfg; connects lazily on the first call. NULL on bad config or out of memory. */
struct control_channel *control_channel_create(const struct control_channel_config *cfg);
/*
 * Safe from any thread while calls are in flight: stops a handshake under way and fails every
 * call with -ECANCELED within one connect attempt (about 2 s) whatever the guest does; later
 * calls fail with -ECANCELED too. Call it before joining threads that use the channel.
 */
void control_channel_cancel(struct control_channel *ch);
/*
 * Cancels (as above), joins the reader, closes and frees; returns within a bounded time
 * whatever the guest does. No call may still be running on another thread.
 */
void control_channel_destroy(struct control_channel *ch);

/* Connects a stream socket to path; returns the fd or -errno. */
int control_channel_connect_unix(const char *path);
/* Adapter for control_channel_config.connect: opaque is the socket path (a char *). */
int control_channel_unix_connector(void *opaque, int timeout_ms);

/* Thread-local description of the last failed call on this thread ("" when none). */
const char *control_channel_last_error(void);

/* Establishes the connection now (the "warm handshake") instead of on the first call. */
int control_channel_connect(struct control_channel *ch);

/*
 * Runs a command. on_chunk (may be NULL) sees every ExecOutputChunk in arrival order on the
 * calling thread before the call returns; the final response in *out holds the full output
 * (release with proto_exec_response_free). Returns 0 whenever the agent answered, whatever
 * the exit code; the wait is req->timeout_secs plus a grace period, forever for 0, and 1200 s
 * when the request has no timeout.
 */
int control_channel_exec(struct control_channel *ch, const struct proto_exec_request *req,
			 void (*on_chunk)(const struct proto_exec_output_chunk *chunk,
					  void *opaque),
			 void *opaque, struct proto_exec_response *out);

/*
 * File RPCs. The reply's error code decides the errno: a refusal ("denied": outside the allowed
 * roots, through a symbolic link) is -EPERM, a missing file ("not_found") -ENOENT, a request
 * that cannot be done as asked ("invalid") -EINVAL, any other failure -EIO; the agent's
 * sentence is in last_error.
 */
int control_channel_write_file(struct control_channel *ch, const char *path, const void *data,
			       size_t len, bool create_parents, int timeout_ms);
int control_channel_read_file(struct control_channel *ch, const char *path,
			      struct proto_bytes *out, int timeout_ms);
/*
 * SetPolicy: the session's allowlist and limits (docs/protocol.md §8). The agent refuses
 * every command until it has one and accepts one per session: -EPERM (agent's text in
 * last_error) when it refuses this one.
 */
int control_channel_set_policy(struct control_channel *ch, const struct proto_set_policy *policy,
			       int timeout_ms);
int control_channel_mkdir_p(struct control_channel *ch, const char *path, int timeout_ms);
/* A missing file is success with out->exists == false. */
int control_channel_file_stat(struct control_channel *ch, const char *path,
			      struct proto_file_stat_response *out, int timeout_ms);
/* Round trip of SnapshotReady: returns once the agent has echoed it. */
int control_channel_snapshot_ready(struct control_channel *ch, int timeout_ms);
/*
 * Establishes the connection now with the rekey document doc (docs/protocol.md §4.2) in its
 * Ping, proven with the channel's current secret; once the agent confirms it (*applied), the
 * channel switches to new_secret, which doc carries. An agent that predates the rekey in the
 * handshake leaves *applied false on a connection authenticated with the old secret, and the
 * caller rekeys with WriteFile instead. Returns 0 or -errno (last_error says why).
 */
int control_channel_connect_rekey(struct control_channel *ch, const void *doc, size_t len,
				  const uint8_t new_secret[PROTO_SECRET_SIZE], bool *applied);
/* The secret later connections authenticate with (after a rekey); the current one stays. */
void control_channel_set_secret(struct control_channel *ch,
				const uint8_t secret[PROTO_SECRET_SIZE]);
/*
 * Sends Shutdown (the agent syncs and powers the VM off; nothing answers it) and waits for the
 * guest to end the connection, which the agent does once its sync has returned, before the
 * kernel's poweroff; timeout_ms bounds the send and the wait together. 0 when it ended (the
 * guest's file systems are flushed: the caller may stop the VM at once), -ETIMEDOUT when it
 * did not or Shutdown could not be sent in time, -ENOTCONN or another -errno when Shutdown
 * could not be sent.
 */
int control_channel_shutdown(struct control_channel *ch, int timeout_ms);
/*
 * Safe from any thread while calls are in flight: no later call connects again, and a live
 * connection gets Shutdown (timeout_ms bounds the send) without waiting for its end. The
 * guest syncs and ends the connection, which fails every call in flight; a guest that does
 * not is cut off by control_channel_cancel. 0 when Shutdown was sent, -errno otherwise.
 */
int control_channel_end(struct control_channel *ch, int timeout_ms);
/*
 * The current connection is about to end on purpose without a Shutdown (the VMM stops the VM
 * after a snapshot that leaves it stopped): its end is logged at debug level, not warned of.
 */
void control_channel_expect_end(struct control_channel *ch);

/*
 * Subscribes to telemetry and calls on_batch for each batch on the calling thread until
 * on_batch returns non-zero (returns 0) or the connection dies (returns its error). Later
 * batches of a cancelled subscription are dropped by the reader.
 */
int control_channel_subscribe_telemetry(struct control_channel *ch,
					const struct proto_subscribe_telemetry *req,
					int (*on_batch)(const struct proto_telemetry_batch *batch,
							void *opaque),
					void *opaque);

/* ---- PTY sessions: one dedicated connection each, every frame on request id 1 ------------- */

struct control_channel_pty;

enum control_channel_pty_event_kind {
	CONTROL_CHANNEL_PTY_DATA,
	CONTROL_CHANNEL_PTY_CLOSED,
};

struct control_channel_pty_event {
	enum control_channel_pty_event_kind kind;
	uint8_t *data;      /* DATA: heap bytes, released by control_channel_pty_event_free */
	size_t len;
	int32_t exit_code;  /* CLOSED: the session's exit code */
};

/*
 * Opens a session; NULL on failure with *err set (-EPERM when the agent refused it, e.g. a
 * command outside the allowlist; the agent's reason is in last_error).
 */
struct control_channel_pty *control_channel_pty_open(struct control_channel *ch,
						     const struct proto_pty_open *req, int *err);
int control_channel_pty_write(struct control_channel_pty *pty, const void *data, size_t len);
int control_channel_pty_resize(struct control_channel_pty *pty, uint16_t cols, uint16_t rows);
/* Asks the agent to end the session; PtyClosed still arrives through read/wait. */
int control_channel_pty_close(struct control_channel_pty *pty);
/*
 * Blocks for the next event, up to timeout_ms (CONTROL_CHANNEL_TIMEOUT_INFINITE to wait
 * forever). After CLOSED every further read returns CLOSED again. -ETIMEDOUT, -ECONNRESET.
 */
int control_channel_pty_read(struct control_channel_pty *pty,
			     struct control_channel_pty_event *event, int timeout_ms);
void control_channel_pty_event_free(struct control_channel_pty_event *event);
/*
 * Feeds every DATA event to on_data until CLOSED and stores the exit code; timeout_ms bounds
 * each wait for the next event (a session that keeps printing never times out).
 */
int control_channel_pty_wait(struct control_channel_pty *pty,
			     void (*on_data)(const uint8_t *data, size_t len, void *opaque),
			     void *opaque, int32_t *exit_code, int timeout_ms);
/*
 * Safe from any thread: shuts the session's connection down, so a read under way returns
 * -ECONNRESET and every later call fails (for a guest that does not end a session it was
 * asked to close). control_channel_pty_free still frees it.
 */
void control_channel_pty_cut(struct control_channel_pty *pty);
/* Closes the connection (the agent then ends the session) and frees. */
void control_channel_pty_free(struct control_channel_pty *pty);

#endif
