/*
 * What every RPC handler shares: the agent-wide context (roots, policy, privilege mode) and a
 * reference-counted connection whose writes all go through one mutex, so frames from the
 * reader, exec, telemetry and PTY threads never interleave. The fd is closed when the last
 * reference goes, so a worker thread may outlive the reader without writing to a reused fd.
 */
#ifndef VOIDBOX_AGENT_CONN_H
#define VOIDBOX_AGENT_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "files.h"
#include "policy.h"
#include "sandbox_user.h"
#include "setup_gate.h"

struct agent_context {
	bool is_pid1;
	bool drop_privileges;        /* running as root: children become uid/gid 1000 */
	struct files_roots roots;
	struct policy_store *policy;  /* mutable through its own lock */
	bool has_secret;
	uint8_t secret[32];
	struct setup_gate *setup;    /* requests wait here until the devices are set up; NULL: none */
};

struct pty_session;

struct agent_conn {
	int fd;
	atomic_int refs;
	atomic_bool closed;          /* reader finished or a write failed */
	pthread_mutex_t write_lock;
	const struct agent_context *ctx;
	pthread_mutex_t pty_lock;
	struct pty_session *ptys;    /* sessions opened on this connection */
};

struct agent_conn *conn_new(int fd, const struct agent_context *ctx);
void conn_get(struct agent_conn *conn);
void conn_put(struct agent_conn *conn);
/* Marks the connection dead and shuts the socket down so every blocked reader/writer wakes. */
void conn_shutdown(struct agent_conn *conn);
/* Sends one multiplexed frame. Returns 0 or -errno (and marks the connection closed). */
int conn_send(struct agent_conn *conn, uint8_t type, uint32_t request_id, const void *body,
	      size_t len);

#endif
