/*
 * PTY sessions. Each session owns a dedicated connection (the agent hands the whole connection
 * to its PTY handler), so there is no reader thread and no demultiplexing: the caller reads
 * frames directly, every read bounded (channel_read_frame: a wait for the first byte, then a
 * deadline for the rest), and every frame carries request id 1.
 * Writes (input, resize, close) may come from another thread than the reader and are
 * serialised by a mutex so frames never interleave; each frame must leave within its send
 * budget (channel_send_budget_ms), so a guest that takes input slowly cannot hold a writer.
 * A wait that skips frames it does not want (anything before PtyOpened, anything but data or
 * PtyClosed after) keeps one deadline across them, so a guest that sends such frames now and
 * then cannot stretch it.
 */
#include "host/control_channel.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "host/agent_handshake.h"
#include "host/control_channel_internal.h"

#define LOG_MODULE "channel"
#define PTY_REQUEST_ID 1u
#define PTY_HANDSHAKE_TIMEOUT_MS 3000
#define PTY_OPENED_TIMEOUT_MS 10000

struct control_channel_pty {
	int fd;
	pthread_mutex_t write_lock;
	bool closed;
	int32_t exit_code;
};

/* A frame cut off half-way ends the session: the guest would read the next one as its rest. */
static int pty_send(struct control_channel_pty *pty, uint8_t type, const void *body, size_t len)
{
	long long send_ms = channel_send_budget_ms(len);
	int rc;

	pthread_mutex_lock(&pty->write_lock);
	rc = proto_frame_write_timed(pty->fd, type, true, PTY_REQUEST_ID, body, len, (int)send_ms);
	if (rc == -ETIME)
		shutdown(pty->fd, SHUT_RDWR);
	pthread_mutex_unlock(&pty->write_lock);
	if (rc == -ETIMEDOUT || rc == -ETIME)
		return control_channel_fail(-ETIMEDOUT, "sending %s to the PTY session did not "
					    "finish within %lld ms: the guest takes its input too "
					    "slowly%s", proto_msg_type_name(type), send_ms,
					    rc == -ETIME ? "; the session is lost" : "");
	if (rc < 0)
		return control_channel_fail(rc, "sending %s to the PTY session failed: %s",
					    proto_msg_type_name(type), strerror(-rc));
	return 0;
}

/*
 * Next frame by until_ms (CLOCK_MONOTONIC, clock_monotonic_ms) when timeout_ms, the whole
 * wait's length, is not negative; otherwise its first byte whenever it comes and the rest
 * within CHANNEL_FRAME_TRANSFER_MS. A guest that stops mid-frame ends the session.
 */
static int pty_next_frame(struct control_channel_pty *pty, int timeout_ms, uint64_t until_ms,
			  struct proto_frame *frame)
{
	uint64_t now = clock_monotonic_ms();
	int left = timeout_ms < 0 ? PROTO_READ_NO_DEADLINE
				  : until_ms > now ? (int)(until_ms - now) : 0;
	int rc = channel_read_frame(pty->fd, left, frame);

	if (rc == -ETIMEDOUT)
		return control_channel_fail(-ETIMEDOUT, "the PTY session sent nothing the host "
					    "waits for within %d ms", timeout_ms);
	if (rc == -ETIME)
		return control_channel_fail(-ECONNRESET, "the PTY session stopped in the middle "
					    "of a frame; the session is lost");
	if (rc < 0)
		return control_channel_fail(rc == -EPROTO ? -EPROTO : -ECONNRESET,
					    "the PTY session's connection ended (%s) before "
					    "PtyClosed", strerror(-rc));
	return 0;
}

static int pty_await_opened(struct control_channel_pty *pty)
{
	struct proto_status_response opened;
	struct proto_frame frame;
	uint64_t until = clock_monotonic_ms() + PTY_OPENED_TIMEOUT_MS;
	const char *why = NULL;
	int rc;

	for (;;) {
		rc = pty_next_frame(pty, PTY_OPENED_TIMEOUT_MS, until, &frame);
		if (rc < 0)
			return rc;
		if (frame.type == PROTO_MSG_PTY_OPENED)
			break;
		log_debug(LOG_MODULE, "ignoring %s before PtyOpened",
			  proto_msg_type_name(frame.type));
		proto_frame_free(&frame);
	}
	rc = proto_status_response_decode(frame.body, frame.body_len, &opened, &why);
	proto_frame_free(&frame);
	if (rc < 0)
		return control_channel_fail(rc, "malformed PtyOpened: %s", why ? why : "?");
	if (!opened.success)
		rc = control_channel_fail(channel_errno_for_code(opened.code),
					  "the guest agent refused the PTY session: %s",
					  opened.error ? opened.error : "no reason given");
	proto_status_response_free(&opened);
	return rc;
}

struct control_channel_pty *control_channel_pty_open(struct control_channel *ch,
						     const struct proto_pty_open *req, int *err)
{
	const struct control_channel_config *cfg = control_channel_config_of(ch);
	char reason[CONTROL_CHANNEL_ERROR_MAX];
	struct control_channel_pty *pty;
	uint8_t *body = NULL;
	size_t len;
	int rc;

	pty = calloc(1, sizeof(*pty));
	if (!pty) {
		*err = control_channel_fail(-ENOMEM, "out of memory opening a PTY session");
		return NULL;
	}
	pthread_mutex_init(&pty->write_lock, NULL);
	pty->fd = -1;
	rc = proto_pty_open_encode(req, &body, &len);
	if (rc < 0) {
		rc = control_channel_fail(rc, "cannot encode PtyOpen (%s)", strerror(-rc));
		goto fail;
	}
	pty->fd = agent_connect(cfg, agent_connect_deadline_ms(cfg), PTY_HANDSHAKE_TIMEOUT_MS,
				NULL, reason, sizeof(reason));
	if (pty->fd < 0) {
		rc = control_channel_fail(pty->fd, "%s", reason);
		goto fail;
	}
	rc = pty_send(pty, PROTO_MSG_PTY_OPEN, body, len);
	if (rc == 0)
		rc = pty_await_opened(pty);
	if (rc < 0)
		goto fail;
	free(body);
	return pty;

fail:
	free(body);
	control_channel_pty_free(pty);
	*err = rc;
	return NULL;
}

int control_channel_pty_write(struct control_channel_pty *pty, const void *data, size_t len)
{
	return pty_send(pty, PROTO_MSG_PTY_DATA, data, len);
}

int control_channel_pty_resize(struct control_channel_pty *pty, uint16_t cols, uint16_t rows)
{
	struct proto_pty_resize resize = { .cols = cols, .rows = rows };
	uint8_t *body;
	size_t len;
	int rc = proto_pty_resize_encode(&resize, &body, &len);

	if (rc < 0)
		return control_channel_fail(rc, "cannot encode PtyResize (%s)", strerror(-rc));
	rc = pty_send(pty, PROTO_MSG_PTY_RESIZE, body, len);
	free(body);
	return rc;
}

int control_channel_pty_close(struct control_channel_pty *pty)
{
	return pty_send(pty, PROTO_MSG_PTY_CLOSE, NULL, 0);
}

static int pty_closed_event(struct control_channel_pty *pty,
			    struct control_channel_pty_event *event)
{
	event->kind = CONTROL_CHANNEL_PTY_CLOSED;
	event->exit_code = pty->exit_code;
	return 0;
}

int control_channel_pty_read(struct control_channel_pty *pty,
			     struct control_channel_pty_event *event, int timeout_ms)
{
	uint64_t until = clock_monotonic_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	struct proto_pty_closed closed;
	struct proto_frame frame;
	const char *why = NULL;
	int rc;

	memset(event, 0, sizeof(*event));
	if (pty->closed)
		return pty_closed_event(pty, event);
	for (;;) {
		rc = pty_next_frame(pty, timeout_ms, until, &frame);
		if (rc < 0)
			return rc;
		if (frame.type == PROTO_MSG_PTY_DATA) {
			event->kind = CONTROL_CHANNEL_PTY_DATA;
			event->data = frame.body;
			event->len = frame.body_len;
			return 0;
		}
		if (frame.type == PROTO_MSG_PTY_CLOSED)
			break;
		log_debug(LOG_MODULE, "ignoring %s in a PTY session",
			  proto_msg_type_name(frame.type));
		proto_frame_free(&frame);
	}
	rc = proto_pty_closed_decode(frame.body, frame.body_len, &closed, &why);
	proto_frame_free(&frame);
	if (rc < 0)
		return control_channel_fail(rc, "malformed PtyClosed: %s", why ? why : "?");
	pty->closed = true;
	pty->exit_code = closed.exit_code;
	return pty_closed_event(pty, event);
}

void control_channel_pty_event_free(struct control_channel_pty_event *event)
{
	if (!event)
		return;
	free(event->data);
	memset(event, 0, sizeof(*event));
}

int control_channel_pty_wait(struct control_channel_pty *pty,
			     void (*on_data)(const uint8_t *data, size_t len, void *opaque),
			     void *opaque, int32_t *exit_code, int timeout_ms)
{
	struct control_channel_pty_event event;
	int rc;

	for (;;) {
		rc = control_channel_pty_read(pty, &event, timeout_ms);
		if (rc < 0)
			return rc;
		if (event.kind == CONTROL_CHANNEL_PTY_CLOSED)
			break;
		if (on_data)
			on_data(event.data, event.len, opaque);
		control_channel_pty_event_free(&event);
	}
	if (exit_code)
		*exit_code = event.exit_code;
	return 0;
}

void control_channel_pty_cut(struct control_channel_pty *pty)
{
	shutdown(pty->fd, SHUT_RDWR);
}

void control_channel_pty_free(struct control_channel_pty *pty)
{
	if (!pty)
		return;
	if (pty->fd >= 0)
		close(pty->fd);
	pthread_mutex_destroy(&pty->write_lock);
	free(pty);
}
