/*
 * Connection lifetime and the serialised writer. Sending is the only operation worker threads
 * do on the socket, so the write mutex is the whole of the cross-thread protocol discipline.
 */
#include "conn.h"

#include "agent_log.h"
#include "proto/protocol.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct agent_conn *conn_new(int fd, const struct agent_context *ctx)
{
	struct agent_conn *conn = calloc(1, sizeof(*conn));

	if (!conn)
		return NULL;
	conn->fd = fd;
	atomic_init(&conn->refs, 1);
	atomic_init(&conn->closed, false);
	pthread_mutex_init(&conn->write_lock, NULL);
	pthread_mutex_init(&conn->pty_lock, NULL);
	conn->ctx = ctx;
	return conn;
}

void conn_get(struct agent_conn *conn)
{
	atomic_fetch_add(&conn->refs, 1);
}

void conn_put(struct agent_conn *conn)
{
	if (atomic_fetch_sub(&conn->refs, 1) != 1)
		return;
	close(conn->fd);
	pthread_mutex_destroy(&conn->write_lock);
	pthread_mutex_destroy(&conn->pty_lock);
	free(conn);
}

void conn_shutdown(struct agent_conn *conn)
{
	atomic_store(&conn->closed, true);
	shutdown(conn->fd, SHUT_RDWR);
}

int conn_send(struct agent_conn *conn, uint8_t type, uint32_t request_id, const void *body,
	      size_t len)
{
	int err;

	if (atomic_load(&conn->closed))
		return -EPIPE;
	pthread_mutex_lock(&conn->write_lock);
	err = proto_frame_write(conn->fd, type, true, request_id, body, len);
	pthread_mutex_unlock(&conn->write_lock);
	if (err) {
		agent_warn("send %s (request %u) failed: %s", proto_msg_type_name(type),
			   request_id, strerror(-err));
		conn_shutdown(conn);
	}
	return err;
}
