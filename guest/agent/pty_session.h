/*
 * PTY sessions. PtyOpen forks the program on a new pseudo-terminal (same policy, uid and rlimit
 * rules as exec, TERM=xterm-256color) and a session thread pumps the master to PtyData frames
 * on the PtyOpen's request id; PtyData/PtyResize/PtyClose frames with that id are routed to the
 * session by the connection's reader. At most PTY_MAX_SESSIONS run at once, agent-wide.
 */
#ifndef VOIDBOX_AGENT_PTY_SESSION_H
#define VOIDBOX_AGENT_PTY_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"

#define PTY_MAX_SESSIONS 4

/* Returns 0 (PtyOpened sent, success or not) or -EPROTO for a malformed body. */
int pty_open(struct agent_conn *conn, uint32_t request_id, const uint8_t *body, size_t len);
/* Routes PtyData, PtyResize or PtyClose. Returns 0 or -EPROTO for a malformed resize. */
int pty_route(struct agent_conn *conn, uint8_t type, uint32_t request_id, const uint8_t *body,
	      size_t len);
/* The connection is gone: every session on it closes (with its grace period). */
void pty_conn_closed(struct agent_conn *conn);

#endif
