/*
 * The agent's connection loop: handshake, then frames (read by frame_reader.c, which tells an
 * unknown type from a fatal one) dispatched to the RPC modules. Before authentication a
 * payload may be at most a Ping long, so an unauthenticated peer cannot make the agent
 * allocate. The handshake has a receive timeout; afterwards reads block.
 */
#include "server.h"

#include "agent_log.h"
#include "exec.h"
#include "policy.h"
#include "frame_reader.h"
#include "proto/protocol.h"
#include "pty_session.h"
#include "rpc_files.h"
#include "restore.h"
#include "telemetry.h"
#include "common/fd_io.h"

#include <errno.h>
#include <limits.h>
#include <linux/reboot.h>
#include <linux/vm_sockets.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SERVER_BACKLOG 16
#define SERVER_VSOCK_BIND_ATTEMPTS 30
#define SERVER_VSOCK_BIND_RETRY_NS (200 * 1000 * 1000L)
#define SERVER_HANDSHAKE_TIMEOUT_SECS 30
#define SERVER_SEND_TIMEOUT_SECS 60
#define SERVER_ACCEPT_BACKOFF_NS (100 * 1000 * 1000L)


static void server_sleep_ns(long ns)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ns };

	nanosleep(&ts, NULL);
}

static void server_set_timeout(int fd, int option, int secs)
{
	struct timeval tv = { .tv_sec = secs };

	setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

/* Opens the handshake with a Challenge: a nonce no earlier connection was given. */
static int server_send_challenge(struct agent_conn *conn, uint8_t nonce[PROTO_NONCE_SIZE])
{
	int err;

	if (getrandom(nonce, PROTO_NONCE_SIZE, 0) != PROTO_NONCE_SIZE) {
		agent_warn("handshake: closing: no random bytes for the challenge");
		return -EIO;
	}
	pthread_mutex_lock(&conn->write_lock);
	err = proto_frame_write(conn->fd, PROTO_MSG_CHALLENGE, false, 0, nonce, PROTO_NONCE_SIZE);
	pthread_mutex_unlock(&conn->write_lock);
	return err;
}

/*
 * Challenge, Ping with the proof over it, Pong (docs/protocol.md §3); a Ping flagged
 * PROTO_FLAG_REKEY carries a restored guest's rekey, applied before the Pong confirms it.
 * Returns 0 once the peer is authenticated and has received the Pong.
 */
static int server_handshake(struct agent_conn *conn)
{
	const struct agent_context *ctx = conn->ctx;
	struct proto_ping ping;
	struct proto_pong pong = { .version = PROTO_VERSION,
				   .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	uint8_t pong_body[PROTO_PONG_SIZE], nonce[PROTO_NONCE_SIZE];
	struct agent_frame frame;
	const char *why = "?";
	enum frame_result result;
	int err = -EACCES;

	memset(&ping, 0, sizeof(ping));
	server_set_timeout(conn->fd, SO_RCVTIMEO, SERVER_HANDSHAKE_TIMEOUT_SECS);
	if (server_send_challenge(conn, nonce) < 0)
		return -EPROTO;
	result = frame_reader_read(conn->fd, false, PROTO_PREAUTH_MAX_PAYLOAD, &frame, &why);
	if (result != FRAME_OK) {
		agent_warn("handshake: closing: %s", result == FRAME_EOF ? "peer closed" : why);
		return -EPROTO;
	}
	if (frame.type != PROTO_MSG_PING) {
		agent_warn("handshake: closing: %s before Ping", proto_msg_type_name(frame.type));
		goto out;
	}
	if (proto_ping_decode(frame.payload, frame.len, &ping) != 0) {
		agent_warn("handshake: closing: malformed Ping");
		goto out;
	}
	if (ping.flags & PROTO_FLAG_REKEY) {
		if (frame.len <= PROTO_PING_SIZE) {
			agent_warn("handshake: closing: a rekeying Ping without its document");
			goto out;
		}
		err = restore_authenticate_rekey(ctx, ping.proof, nonce, conn->fd,
						 frame.payload + PROTO_PING_SIZE,
						 frame.len - PROTO_PING_SIZE);
		if (err == 0) {
			/* the new session may set its policy once, as after a WriteFile rekey */
			policy_store_reopen(ctx->policy);
			pong.flags |= PROTO_FLAG_REKEY;
		}
	} else {
		err = restore_authenticate(ctx, ping.proof, nonce, conn->fd);
	}
	if (err == -EINVAL)
		goto out;
	if (err == -EMFILE) {
		agent_warn("handshake: closing: %d connections are open already; close one first",
			   RESTORE_MAX_CONNS);
		goto out;
	}
	if (err) {
		agent_warn("handshake: closing: %s", ctx->has_secret ? "wrong proof of the session secret" :
					"the agent has no session secret (voidbox.secret missing)");
		goto out;
	}
	err = -EACCES;
	if (!(ping.flags & PROTO_FLAG_SUPPORTS_MULTIPLEX)) {
		agent_warn("handshake: closing: peer (version %u) lacks multiplexing, which v2 "
			   "requires", ping.version);
		goto out;
	}
	proto_pong_encode(&pong, pong_body);
	pthread_mutex_lock(&conn->write_lock);
	err = proto_frame_write(conn->fd, PROTO_MSG_PONG, false, 0, pong_body, sizeof(pong_body));
	pthread_mutex_unlock(&conn->write_lock);
	server_set_timeout(conn->fd, SO_RCVTIMEO, 0);
out:
	explicit_bzero(&ping, sizeof(ping));
	free(frame.storage);
	return err;
}

/*
 * Syncs, then ends the connection the Shutdown came on, then powers off: the host takes the
 * connection's end as "the guest's file systems are flushed" and stops the VM there, without
 * waiting for the rest of the kernel's poweroff (docs/protocol.md, Shutdown).
 */
static void server_shutdown_request(struct agent_conn *conn)
{
	if (!conn->ctx->is_pid1) {
		agent_info("Shutdown requested; not PID 1, so the agent keeps running");
		return;
	}
	agent_log_emergency("Shutdown requested: syncing and powering off");
	sync();
	shutdown(conn->fd, SHUT_RDWR);
	reboot(RB_POWER_OFF);
	agent_log_emergency("power off failed: %s", strerror(errno));
}

/* Returns 0 to keep reading or -EPROTO to close the connection. */
static int server_dispatch(struct agent_conn *conn, const struct agent_frame *frame)
{
	switch (frame->type) {
	case PROTO_MSG_EXEC_REQUEST:
		return exec_start(conn, frame->request_id, frame->payload, frame->len) == -EPROTO ?
			       -EPROTO : 0;
	case PROTO_MSG_WRITE_FILE:
	case PROTO_MSG_READ_FILE:
	case PROTO_MSG_MKDIR_P:
	case PROTO_MSG_FILE_STAT:
		return rpc_files_handle(conn, frame->type, frame->request_id, frame->payload,
					frame->len);
	case PROTO_MSG_SET_POLICY:
		return rpc_policy_handle(conn, frame->request_id, frame->payload, frame->len);
	case PROTO_MSG_SUBSCRIBE_TELEMETRY:
		return telemetry_start(conn, frame->request_id, frame->payload, frame->len) ==
				       -EPROTO ? -EPROTO : 0;
	case PROTO_MSG_SNAPSHOT_READY:
		conn_send(conn, PROTO_MSG_SNAPSHOT_READY, frame->request_id, NULL, 0);
		return 0;
	case PROTO_MSG_SHUTDOWN:
		server_shutdown_request(conn);
		return 0;
	case PROTO_MSG_PTY_OPEN:
		return pty_open(conn, frame->request_id, frame->payload, frame->len);
	case PROTO_MSG_PTY_DATA:
	case PROTO_MSG_PTY_RESIZE:
	case PROTO_MSG_PTY_CLOSE:
		return pty_route(conn, frame->type, frame->request_id, frame->payload, frame->len);
	default:
		agent_info("ignoring %s (request %u): not a guest-bound request",
			   proto_msg_type_name(frame->type), frame->request_id);
		return 0;
	}
}

static void server_serve(struct agent_conn *conn)
{
	for (;;) {
		struct agent_frame frame;
		const char *why = "?";
		enum frame_result result;
		int err;

		result = frame_reader_read(conn->fd, true, PROTO_MAX_PAYLOAD, &frame, &why);
		if (result == FRAME_EOF)
			break;
		if (result == FRAME_SKIPPED) {
			agent_warn("dropped a frame: %s", why);
			continue;
		}
		if (result == FRAME_FATAL) {
			if (!atomic_load(&conn->closed))
				agent_warn("closing connection: %s", why);
			break;
		}
		if (restore_conn_is_stale(conn->fd)) {
			agent_info("dropping %s on a connection from before the rekey",
				   proto_msg_type_name(frame.type));
			free(frame.storage);
			break;
		}
		err = server_dispatch(conn, &frame);
		free(frame.storage);
		if (err) {
			agent_warn("closing connection: malformed %s body",
				   proto_msg_type_name(frame.type));
			break;
		}
	}
}

static void *server_conn_main(void *arg)
{
	struct agent_conn *conn = arg;

	if (server_handshake(conn) == 0) {
		agent_info("connection authenticated");
		if (!setup_gate_is_open(conn->ctx->setup)) {
			agent_info("holding the connection's requests until the devices are set up");
			setup_gate_wait(conn->ctx->setup);
		}
		server_serve(conn);
	}
	restore_conn_unregister(conn->fd);
	pty_conn_closed(conn);
	conn_shutdown(conn);
	conn_put(conn);
	return NULL;
}

int server_listen_vsock(unsigned int port)
{
	struct sockaddr_vm addr = {
		.svm_family = AF_VSOCK,
		.svm_port = port,
		.svm_cid = VMADDR_CID_ANY,
	};
	int fd, err = -EIO;

	for (int attempt = 0; attempt < SERVER_VSOCK_BIND_ATTEMPTS; attempt++) {
		fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
		    listen(fd, SERVER_BACKLOG) == 0)
			return fd;
		err = -errno;
		if (fd >= 0)
			close(fd);
		server_sleep_ns(SERVER_VSOCK_BIND_RETRY_NS);
	}
	return err;
}

int server_listen_unix(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd, err;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(fd, SERVER_BACKLOG) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int server_run(int listen_fd, const struct agent_context *ctx)
{
	for (;;) {
		struct agent_conn *conn;
		pthread_t thread;
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof(peer);
		int fd = accept4(listen_fd, (struct sockaddr *)&peer, &peer_len, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			agent_error("accept failed: %s; retrying", strerror(errno));
			server_sleep_ns(SERVER_ACCEPT_BACKOFF_NS);
			continue;
		}
		/* over vsock only the host (CID 2) may talk to the agent, never another guest */
		if (peer.ss_family == AF_VSOCK &&
		    ((struct sockaddr_vm *)&peer)->svm_cid != VMADDR_CID_HOST) {
			agent_warn("refusing a vsock connection from CID %u: only the host may connect",
				   ((struct sockaddr_vm *)&peer)->svm_cid);
			close(fd);
			continue;
		}
		server_set_timeout(fd, SO_SNDTIMEO, SERVER_SEND_TIMEOUT_SECS);
		conn = conn_new(fd, ctx);
		if (!conn) {
			close(fd);
			continue;
		}
		if (pthread_create(&thread, NULL, server_conn_main, conn) != 0) {
			agent_error("cannot start a connection thread; dropping the connection");
			conn_put(conn);
			continue;
		}
		pthread_detach(thread);
	}
	return 0;
}
