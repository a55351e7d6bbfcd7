/*
 * The listener and the per-connection reader: accept, authenticate with the Ping/Pong
 * handshake, then read multiplexed frames and dispatch them. One detached thread per
 * connection; a broken connection never affects the others or the accept loop.
 */
#ifndef VOIDBOX_AGENT_SERVER_H
#define VOIDBOX_AGENT_SERVER_H

#include "conn.h"

/* Binds AF_VSOCK (CID any) on port, retrying while the transport comes up. Returns fd or -errno. */
int server_listen_vsock(unsigned int port);
/* Binds a Unix stream socket at path (an existing socket file is replaced). Returns fd or -errno. */
int server_listen_unix(const char *path);
/* Accepts forever; returns only if accept fails persistently (-errno). */
int server_run(int listen_fd, const struct agent_context *ctx);

#endif
