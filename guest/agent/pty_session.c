/*
 * A session is shared by its own thread and the connection reader (which writes PtyData into
 * the master and applies resizes), so it is reference counted and the master fd is closed only
 * when both are done. The session thread owns the child: it forwards master output, notices the
 * exit through the reaper's eventfd, and on a close request waits the grace period (2 s, or 0
 * for interactive sessions), sends SIGHUP to the process group, then SIGKILL one second later.
 */
#include "pty_session.h"

#include "agent_log.h"
#include "policy.h"
#include "proto/protocol.h"
#include "reaper.h"
#include "spawn.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PTY_CHUNK_SIZE 4096
#define PTY_POLL_COUNT 3 /* master, wake-up, exit event */
#define PTY_GRACE_MS 2000
#define PTY_HUP_TO_KILL_MS 1000
#define PTY_WRITE_POLL_MS 100
#define PTY_SIGNAL_EXIT_BASE 128

enum pty_close_phase {
	PTY_PHASE_RUNNING,
	PTY_PHASE_GRACE,
	PTY_PHASE_HUP_SENT,
	PTY_PHASE_KILL_SENT,
};

struct pty_session {
	struct agent_conn *conn;
	uint32_t request_id;
	int master_fd;
	int wake_fd;
	bool interactive;
	atomic_bool close_requested;
	atomic_int refs;
	struct reaper_child *child;
	struct pty_session *next;
};

struct pty_fork_args {
	struct winsize size;
	int master_fd;
};

static atomic_int pty_active_sessions;

static void pty_session_put(struct pty_session *session)
{
	if (atomic_fetch_sub(&session->refs, 1) != 1)
		return;
	if (session->master_fd >= 0)
		close(session->master_fd);
	if (session->wake_fd >= 0)
		close(session->wake_fd);
	reaper_child_release(session->child);
	conn_put(session->conn);
	free(session);
}

static void pty_session_wake(struct pty_session *session)
{
	uint64_t one = 1;
	ssize_t rc = write(session->wake_fd, &one, sizeof(one));

	(void)rc;
}

static void pty_request_close(struct pty_session *session)
{
	atomic_store(&session->close_requested, true);
	pty_session_wake(session);
}

static int pty_send_opened(struct agent_conn *conn, uint32_t request_id, const char *error,
			   int failure)
{
	struct proto_status_response opened = {
		.success = !error,
		.error = (char *)error,
		.code = error ? proto_error_code_from_errno(failure ? failure : -EIO)
			      : PROTO_ERROR_NONE,
	};
	uint8_t *body;
	size_t len;
	int err;

	err = proto_status_response_encode(&opened, &body, &len);
	if (err)
		return err;
	err = conn_send(conn, PROTO_MSG_PTY_OPENED, request_id, body, len);
	free(body);
	return err;
}

static void pty_send_closed(struct pty_session *session, int32_t exit_code)
{
	struct proto_pty_closed closed = { .exit_code = exit_code };
	uint8_t *body;
	size_t len;

	if (proto_pty_closed_encode(&closed, &body, &len) != 0)
		return;
	conn_send(session->conn, PROTO_MSG_PTY_CLOSED, session->request_id, body, len);
	free(body);
}

/* Forwards what the master has; returns false once the master is finished (EIO/EOF). */
static bool pty_forward_output(struct pty_session *session)
{
	uint8_t buf[PTY_CHUNK_SIZE];
	ssize_t n = read(session->master_fd, buf, sizeof(buf));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	conn_send(session->conn, PROTO_MSG_PTY_DATA, session->request_id, buf, (size_t)n);
	return true;
}

/* Advances the close sequence; returns the poll timeout until the next step (-1: none). */
static int pty_close_step(struct pty_session *session, enum pty_close_phase *phase,
			  uint64_t *phase_deadline)
{
	pid_t pid = reaper_child_pid(session->child);
	uint64_t now = clock_monotonic_ms();

	if (*phase == PTY_PHASE_RUNNING) {
		if (!atomic_load(&session->close_requested))
			return -1;
		*phase = PTY_PHASE_GRACE;
		*phase_deadline = now + (session->interactive ? 0 : PTY_GRACE_MS);
	}
	if (*phase == PTY_PHASE_KILL_SENT)
		return -1;
	if (now < *phase_deadline)
		return (int)(*phase_deadline - now);
	if (*phase == PTY_PHASE_GRACE) {
		kill(-pid, SIGHUP);
		*phase = PTY_PHASE_HUP_SENT;
		*phase_deadline = now + PTY_HUP_TO_KILL_MS;
		return PTY_HUP_TO_KILL_MS;
	}
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	*phase = PTY_PHASE_KILL_SENT;
	return -1;
}

static int32_t pty_exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return PTY_SIGNAL_EXIT_BASE + WTERMSIG(status);
	return PROTO_EXIT_CODE_SIGNALED;
}

static void pty_session_run(struct pty_session *session)
{
	enum pty_close_phase phase = PTY_PHASE_RUNNING;
	uint64_t phase_deadline = 0, drained;
	bool master_open = true;
	int status = 0;

	while (!reaper_child_poll(session->child, &status)) {
		struct pollfd fds[PTY_POLL_COUNT] = {
			{ .fd = master_open ? session->master_fd : -1, .events = POLLIN },
			{ .fd = session->wake_fd, .events = POLLIN },
			{ .fd = reaper_child_event_fd(session->child), .events = POLLIN },
		};
		int timeout = pty_close_step(session, &phase, &phase_deadline);

		if (poll(fds, PTY_POLL_COUNT, timeout) < 0 && errno != EINTR)
			break;
		if (fds[0].revents && !pty_forward_output(session))
			master_open = false;
		if (fds[1].revents && read(session->wake_fd, &drained, sizeof(drained)) < 0)
			drained = 0;
	}
	while (master_open && pty_forward_output(session)) {
		struct pollfd pfd = { .fd = session->master_fd, .events = POLLIN };

		if (poll(&pfd, 1, 0) <= 0)
			break;
	}
	reaper_child_wait(session->child, -1, &status);
	agent_info("pty %u: session ended (exit %d)", session->request_id, pty_exit_code(status));
	pty_send_closed(session, pty_exit_code(status));
}

static void pty_session_unlink(struct pty_session *session)
{
	struct agent_conn *conn = session->conn;
	struct pty_session **link;

	pthread_mutex_lock(&conn->pty_lock);
	for (link = &conn->ptys; *link; link = &(*link)->next) {
		if (*link == session) {
			*link = session->next;
			break;
		}
	}
	pthread_mutex_unlock(&conn->pty_lock);
}

static void *pty_thread_main(void *arg)
{
	struct pty_session *session = arg;

	pty_session_run(session);
	pty_session_unlink(session);
	atomic_fetch_sub(&pty_active_sessions, 1);
	pty_session_put(session);
	return NULL;
}

static pid_t pty_fork(void *ctx)
{
	struct pty_fork_args *args = ctx;
	pid_t pid = forkpty(&args->master_fd, NULL, NULL, &args->size);

	if (pid > 0) {
		fcntl(args->master_fd, F_SETFD, FD_CLOEXEC);
		fcntl(args->master_fd, F_SETFL, O_NONBLOCK);
	}
	return pid;
}

/* Forks the child; returns 0 with session->child and master set, or -errno with *error. */
static int pty_spawn(struct pty_session *session, const struct proto_pty_open *open_msg,
		     char **error)
{
	struct spawn_request request = {
		.kind = SPAWN_KIND_PTY,
		.program = open_msg->program,
		.args = open_msg->args,
		.args_count = open_msg->args_count,
		.env = open_msg->env,
		.env_count = open_msg->env_count,
		.working_dir = open_msg->working_dir,
		.interactive = open_msg->interactive,
	};
	struct pty_fork_args args = {
		.size = { .ws_row = open_msg->rows, .ws_col = open_msg->cols },
		.master_fd = -1,
	};
	const struct agent_context *ctx = session->conn->ctx;
	struct spawn_failure failure;
	struct policy_limits limits;
	struct spawn_plan plan;
	int report[2], err, status;
	pid_t pid;

	err = spawn_plan_build(&plan, &request, ctx->drop_privileges, error);
	if (err)
		return err;
	if (policy_store_check(ctx->policy, plan.path, &limits) != 0) {
		spawn_plan_free(&plan);
		return asprintf(error, "Command '%s' is not in the allowed commands list",
				open_msg->program) < 0 ? -ENOMEM : -EACCES;
	}
	plan.limits = limits;
	if (pipe2(report, O_CLOEXEC) < 0) {
		err = -errno;
		goto out_plan;
	}
	pid = reaper_fork(pty_fork, &args, &session->child);
	if (pid == 0) {
		close(report[0]);
		spawn_child_exec(&plan, report[1]);
	}
	close(report[1]);
	if (pid < 0) {
		err = (int)pid;
		if (asprintf(error, "Failed to open a pseudo-terminal: %s", strerror(-err)) < 0)
			*error = NULL;
		close(report[0]);
		goto out_plan;
	}
	session->master_fd = args.master_fd;
	if (spawn_read_failure(report[0], &failure)) {
		reaper_child_wait(session->child, -1, &status);
		*error = spawn_failure_message(open_msg->program, &failure);
		err = failure.err ? -failure.err : -EIO;
	}
	close(report[0]);
out_plan:
	spawn_plan_free(&plan);
	return err;
}

static struct pty_session *pty_session_new(struct agent_conn *conn, uint32_t request_id,
					   bool interactive)
{
	struct pty_session *session = calloc(1, sizeof(*session));

	if (!session)
		return NULL;
	session->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (session->wake_fd < 0) {
		free(session);
		return NULL;
	}
	session->conn = conn;
	session->request_id = request_id;
	session->master_fd = -1;
	session->interactive = interactive;
	atomic_init(&session->refs, 1);
	conn_get(conn);
	return session;
}

static int pty_open_session(struct agent_conn *conn, uint32_t request_id,
			    const struct proto_pty_open *open_msg, char **error)
{
	struct pty_session *session = pty_session_new(conn, request_id, open_msg->interactive);
	pthread_t thread;
	int err;

	if (!session)
		return -ENOMEM;
	err = pty_spawn(session, open_msg, error);
	if (err) {
		pty_session_put(session);
		return err;
	}
	pthread_mutex_lock(&conn->pty_lock);
	session->next = conn->ptys;
	conn->ptys = session;
	pthread_mutex_unlock(&conn->pty_lock);
	pty_send_opened(conn, request_id, NULL, 0);
	agent_info("pty %u: '%s' started as pid %d", request_id, open_msg->program,
		   (int)reaper_child_pid(session->child));
	err = pthread_create(&thread, NULL, pty_thread_main, session);
	if (err) {
		/* No thread will own the child: end it here; PtyOpened already went out. */
		kill(-reaper_child_pid(session->child), SIGKILL);
		pty_session_unlink(session);
		pty_send_closed(session, PROTO_EXIT_CODE_SIGNALED);
		pty_session_put(session);
		return 0;
	}
	pthread_detach(thread);
	return 0;
}

int pty_open(struct agent_conn *conn, uint32_t request_id, const uint8_t *body, size_t len)
{
	struct proto_pty_open open_msg = { 0 };
	const char *why = NULL;
	char *error = NULL;
	int err;

	if (proto_pty_open_decode(body, len, &open_msg, &why) != 0) {
		agent_warn("pty %u: malformed PtyOpen: %s", request_id, why ? why : "?");
		return -EPROTO;
	}
	if (atomic_fetch_add(&pty_active_sessions, 1) >= PTY_MAX_SESSIONS) {
		atomic_fetch_sub(&pty_active_sessions, 1);
		if (asprintf(&error, "max PTY sessions (%d) reached", PTY_MAX_SESSIONS) < 0)
			error = NULL;
		err = -EBUSY;
	} else {
		err = pty_open_session(conn, request_id, &open_msg, &error);
		if (err)
			atomic_fetch_sub(&pty_active_sessions, 1);
	}
	if (err) {
		agent_warn("pty %u: open failed: %s", request_id, error ? error : strerror(-err));
		pty_send_opened(conn, request_id, error ? error : "Failed to open PTY session", err);
	}
	free(error);
	proto_pty_open_free(&open_msg);
	return 0;
}

static struct pty_session *pty_session_find(struct agent_conn *conn, uint32_t request_id)
{
	struct pty_session *session;

	pthread_mutex_lock(&conn->pty_lock);
	for (session = conn->ptys; session; session = session->next)
		if (session->request_id == request_id)
			break;
	if (session)
		atomic_fetch_add(&session->refs, 1);
	pthread_mutex_unlock(&conn->pty_lock);
	return session;
}

/* Writes terminal input; waits in short polls while the tty is full, until closed. */
static void pty_write_input(struct pty_session *session, const uint8_t *data, size_t len)
{
	while (len > 0 && !atomic_load(&session->close_requested)) {
		ssize_t n = write(session->master_fd, data, len);

		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = session->master_fd, .events = POLLOUT };

			poll(&pfd, 1, PTY_WRITE_POLL_MS);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return;
		data += n;
		len -= (size_t)n;
	}
}

int pty_route(struct agent_conn *conn, uint8_t type, uint32_t request_id, const uint8_t *body,
	      size_t len)
{
	struct pty_session *session = pty_session_find(conn, request_id);
	struct proto_pty_resize resize;
	const char *why = NULL;
	int err = 0;

	if (!session) {
		agent_debug("%s for request %u without a PTY session: dropped",
			    proto_msg_type_name(type), request_id);
		return 0;
	}
	switch (type) {
	case PROTO_MSG_PTY_DATA:
		pty_write_input(session, body, len);
		break;
	case PROTO_MSG_PTY_RESIZE:
		if (proto_pty_resize_decode(body, len, &resize, &why) != 0) {
			agent_warn("pty %u: malformed PtyResize: %s", request_id, why ? why : "?");
			err = -EPROTO;
			break;
		}
		ioctl(session->master_fd, TIOCSWINSZ,
		      &(struct winsize){ .ws_row = resize.rows, .ws_col = resize.cols });
		proto_pty_resize_free(&resize);
		break;
	default:
		pty_request_close(session);
		break;
	}
	pty_session_put(session);
	return err;
}

void pty_conn_closed(struct agent_conn *conn)
{
	pthread_mutex_lock(&conn->pty_lock);
	for (struct pty_session *session = conn->ptys; session; session = session->next)
		pty_request_close(session);
	pthread_mutex_unlock(&conn->pty_lock);
}
