/*
 * The multiplexed control connection.
 *
 * A connection (struct channel_conn) is reference-counted: the channel holds one reference
 * while the connection is current and every call in flight holds one, so a call that is still
 * waiting when the connection dies keeps valid memory until it has read its error. The reader
 * thread holds none; whoever retires a connection shuts the socket down and joins the reader
 * first. Retiring and establishing happen under one mutex, so only one reconnect runs at a
 * time and callers that arrive meanwhile wait for its result.
 *
 * Each call registers a slot under its request id before sending. The reader completes
 * one-shot slots with the first matching frame and queues the frames of streaming slots (exec
 * output, telemetry) until their terminal frame; the queue is drained on the calling thread so
 * user callbacks never run on the reader and may themselves call into the channel. Frames for
 * ids without a slot are dropped. When the connection dies, every slot fails with the reason.
 *
 * The guest is hostile, so nothing it sends may cost the host without bound. Queued stream
 * frames are counted in bytes per connection; once STREAM_QUEUE_BYTES_MAX is queued the reader
 * stops reading the socket until a caller drains its queue (back-pressure: the guest's writes
 * then block in its own vsock queue instead of host memory growing). The reader waits for a
 * frame's first byte as long as it takes (shutdown() wakes it) but then gives the rest of the
 * frame CHANNEL_FRAME_TRANSFER_MS, so a guest that stops mid-frame loses the connection instead
 * of wedging it. Establishing a connection can be cancelled (agent_connect_cancel), and no
 * lock that control_channel_destroy needs is held across a read that only the guest can end:
 * destroy cancels the handshake, shuts the socket down and joins the reader, all bounded.
 *
 * Sends are bounded the same way. One frame at a time goes out under write_lock, and the
 * guest decides how fast it leaves: a frame's send ends at its call's deadline, or at a budget
 * that requires a minimum drain rate (channel_send_budget_ms), whichever comes first; a frame
 * cut off half-way ends the connection, since the guest holds part of it. Other callers wait
 * for write_lock no longer than their own deadline, so a guest that reads slowly cannot hold
 * the liveness check or a Shutdown behind another call's frame.
 */
#include "host/control_channel.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "host/agent_handshake.h"
#include "host/control_channel_internal.h"

#define LOG_MODULE "channel"
/* The reader thread's name in /proc/PID/task (at most 15 bytes). */
#define CHANNEL_READER_THREAD_NAME "channel-reader"
#define CHANNEL_PONG_TIMEOUT_MAX_MS 2000
/* bytes of undelivered stream frames one connection may hold before the reader pauses */
#define STREAM_QUEUE_BYTES_MAX (8u * 1024u * 1024u)
#define TIMEOUT_WRITE_FILE_MS 30000
#define TIMEOUT_READ_FILE_MS 30000
#define TIMEOUT_MKDIR_P_MS 10000
#define TIMEOUT_FILE_STAT_MS 10000
#define TIMEOUT_SNAPSHOT_READY_MS 10000
#define TIMEOUT_EXEC_UNSET_MS (1200LL * 1000)
#define EXEC_REPLY_GRACE_MS 30000LL
#define LIVENESS_INTERVAL_MS 20000LL
#define LIVENESS_TIMEOUT_DEFAULT_MS 60000LL
#define LIVENESS_MAX_SECS 3600
/*
 * Malformed frames one stream (an exec's output, a telemetry subscription) logs as warnings;
 * later ones are debug lines, so a hostile agent cannot flood the host's log through them.
 */
#define STREAM_MALFORMED_WARNINGS 4u
#define MS_PER_SEC 1000
#define NS_PER_MS 1000000L
#define NS_PER_SEC 1000000000L

static __thread char channel_error[CONTROL_CHANNEL_ERROR_MAX];

enum slot_kind {
	SLOT_ONESHOT,   /* completes with the first frame for its id */
	SLOT_STREAM,    /* queues frames until one of terminal_type (none: channel lifetime) */
};

struct slot_frame {
	struct slot_frame *next;
	struct proto_frame frame;
};

/* What one queued frame costs in host memory, for the queue's byte bound. */
static size_t slot_frame_cost(const struct proto_frame *frame)
{
	return sizeof(struct slot_frame) + frame->body_len;
}

struct channel_slot {
	struct channel_slot *next;
	uint32_t request_id;
	enum slot_kind kind;
	uint8_t terminal_type;  /* 0 for a stream that only ends with the connection */
	pthread_cond_t cond;
	struct slot_frame *queue_head, *queue_tail;
	size_t queued_bytes;
	bool done;
	int error;
	char reason[CONTROL_CHANNEL_ERROR_MAX];
	struct proto_frame reply;
};

struct channel_conn {
	atomic_int refs;
	int fd;
	pthread_t reader;
	bool reader_started;
	void (*reader_start)(void);  /* control_channel_config.reader_start */
	pthread_mutex_t lock;        /* slots, dead, reason, queued_bytes */
	pthread_mutex_t write_lock;  /* one frame at a time on the socket */
	pthread_cond_t queue_space;  /* the reader waits here while the stream queues are full,
				      * control_channel_shutdown until the end (CLOCK_MONOTONIC) */
	size_t queued_bytes;         /* sum over this connection's slot queues */
	bool dead;
	bool closing;                /* retired on purpose: its end is not worth a warning */
	int dead_error;
	char dead_reason[CONTROL_CHANNEL_ERROR_MAX];
	struct channel_slot *slots;
};

struct control_channel {
	struct control_channel_config cfg;
	pthread_mutex_t lock;            /* conn pointer */
	pthread_mutex_t establish_lock;  /* one reconnect at a time */
	struct agent_connect_cancel cancel;  /* destroy stops a handshake under way */
	struct channel_conn *conn;
	atomic_uint next_request_id;
};

/* ---- errors ------------------------------------------------------------------------------- */

const char *control_channel_last_error(void)
{
	return channel_error;
}

int control_channel_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(channel_error, sizeof(channel_error), fmt, ap);
	va_end(ap);
	log_debug(LOG_MODULE, "%s", channel_error);
	return err;
}

const struct control_channel_config *control_channel_config_of(const struct control_channel *ch)
{
	return &ch->cfg;
}

/* ---- time --------------------------------------------------------------------------------- */

/* Absolute CLOCK_MONOTONIC deadline timeout_ms from now; false means "no deadline". */
static bool deadline_after(long long timeout_ms, struct timespec *deadline)
{
	if (timeout_ms < 0)
		return false;
	*deadline = clock_deadline_after_ms(timeout_ms);
	return true;
}

long long channel_send_budget_ms(size_t len)
{
	return CHANNEL_SEND_BASE_MS + (long long)len * MS_PER_SEC / CHANNEL_SEND_MIN_BYTES_PER_SEC;
}

static long long resolve_timeout(int timeout_ms, long long default_ms)
{
	if (timeout_ms == CONTROL_CHANNEL_TIMEOUT_DEFAULT)
		return default_ms;
	if (timeout_ms < 0)
		return -1;
	return timeout_ms;
}

/* ---- connections -------------------------------------------------------------------------- */

static void conn_get(struct channel_conn *conn)
{
	atomic_fetch_add(&conn->refs, 1);
}

static void conn_put(struct channel_conn *conn)
{
	if (!conn || atomic_fetch_sub(&conn->refs, 1) != 1)
		return;
	close(conn->fd);
	pthread_mutex_destroy(&conn->lock);
	pthread_mutex_destroy(&conn->write_lock);
	pthread_cond_destroy(&conn->queue_space);
	free(conn);
}

/* Frees a queue already detached from its connection (the slot is off the list). */
static void slot_queue_free(struct slot_frame *item)
{
	while (item) {
		struct slot_frame *next = item->next;

		proto_frame_free(&item->frame);
		free(item);
		item = next;
	}
}

/* Marks the connection dead and fails every waiting call; the first reason wins. */
static void conn_kill(struct channel_conn *conn, int err, const char *reason)
{
	pthread_mutex_lock(&conn->lock);
	if (!conn->dead) {
		conn->dead = true;
		conn->dead_error = err;
		snprintf(conn->dead_reason, sizeof(conn->dead_reason), "%s", reason);
		log_message(conn->closing ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN, LOG_MODULE,
			    "control connection ended: %s", reason);
	}
	for (struct channel_slot *slot = conn->slots; slot; slot = slot->next) {
		if (slot->done)
			continue;
		slot->done = true;
		slot->error = conn->dead_error;
		snprintf(slot->reason, sizeof(slot->reason), "%s", conn->dead_reason);
		pthread_cond_signal(&slot->cond);
	}
	pthread_cond_broadcast(&conn->queue_space);
	pthread_mutex_unlock(&conn->lock);
	shutdown(conn->fd, SHUT_RDWR);
}

static bool conn_is_dead(struct channel_conn *conn)
{
	bool dead;

	pthread_mutex_lock(&conn->lock);
	dead = conn->dead;
	pthread_mutex_unlock(&conn->lock);
	return dead;
}

static struct channel_slot *conn_find_slot(struct channel_conn *conn, uint32_t request_id)
{
	for (struct channel_slot *slot = conn->slots; slot; slot = slot->next)
		if (slot->request_id == request_id && !slot->done)
			return slot;
	return NULL;
}

/* Queues a stream frame (conn->lock held); takes ownership of the frame. */
static int slot_enqueue(struct channel_conn *conn, struct channel_slot *slot,
			struct proto_frame *frame)
{
	struct slot_frame *item = calloc(1, sizeof(*item));

	if (!item) {
		proto_frame_free(frame);
		return -ENOMEM;
	}
	item->frame = *frame;
	if (slot->queue_tail)
		slot->queue_tail->next = item;
	else
		slot->queue_head = item;
	slot->queue_tail = item;
	slot->queued_bytes += slot_frame_cost(frame);
	conn->queued_bytes += slot_frame_cost(frame);
	return 0;
}

/*
 * Hands a frame to its slot; takes ownership of the frame. Returns once the connection's
 * stream queues are under their byte bound again (or the connection is dead), so the reader
 * reads nothing more from the guest while callers are behind.
 */
static int conn_route(struct channel_conn *conn, struct proto_frame *frame)
{
	struct channel_slot *slot;
	int rc = 0;

	pthread_mutex_lock(&conn->lock);
	slot = frame->has_request_id ? conn_find_slot(conn, frame->request_id) : NULL;
	if (!slot) {
		pthread_mutex_unlock(&conn->lock);
		log_debug(LOG_MODULE, "dropping %s for request id %u: no call is waiting for it",
			  proto_msg_type_name(frame->type), frame->request_id);
		proto_frame_free(frame);
		return 0;
	}
	if (slot->kind == SLOT_ONESHOT || frame->type == slot->terminal_type) {
		slot->reply = *frame;
		slot->done = true;
	} else {
		rc = slot_enqueue(conn, slot, frame);
	}
	pthread_cond_signal(&slot->cond);
	while (rc == 0 && !conn->dead && conn->queued_bytes >= STREAM_QUEUE_BYTES_MAX)
		pthread_cond_wait(&conn->queue_space, &conn->lock);
	pthread_mutex_unlock(&conn->lock);
	return rc;
}

int channel_read_frame(int fd, int timeout_ms, struct proto_frame *frame)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int rc;

	if (timeout_ms >= 0)
		return proto_frame_read_timed(fd, true, timeout_ms, frame);
	do
		rc = poll(&pfd, 1, PROTO_READ_NO_DEADLINE);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	if (rc == 0)
		return -ETIMEDOUT;
	return proto_frame_read_timed(fd, true, CHANNEL_FRAME_TRANSFER_MS, frame);
}

static const char *read_error_reason(int err)
{
	switch (err) {
	case -ECONNRESET:
		return "the guest agent closed the connection";
	case -EPIPE:
		return "the guest agent closed the connection in the middle of a frame";
	case -ETIME:
		return "the guest agent stopped sending in the middle of a frame";
	case -ENOMEM:
		return "the host ran out of memory queueing the guest agent's output";
	case -EMSGSIZE:
		return "the guest agent sent a frame over the 64 MiB limit";
	case -EPROTO:
		return "the guest agent sent an unknown message type or a frame without a request id";
	default:
		return "reading from the guest agent failed";
	}
}

static void *conn_reader_run(void *arg)
{
	struct channel_conn *conn = arg;

	/* named, so /proc/PID/task shows which thread is which (and tests can find it) */
	prctl(PR_SET_NAME, CHANNEL_READER_THREAD_NAME, 0, 0, 0);
	if (conn->reader_start)
		conn->reader_start();
	for (;;) {
		struct proto_frame frame;
		char reason[CONTROL_CHANNEL_ERROR_MAX];
		int rc = channel_read_frame(conn->fd, PROTO_READ_NO_DEADLINE, &frame);

		if (rc == 0)
			rc = conn_route(conn, &frame);
		if (rc == -ETIMEDOUT || rc == -EINTR)
			continue;
		if (rc < 0) {
			snprintf(reason, sizeof(reason), "%s (%s); the next call reconnects",
				 read_error_reason(rc), strerror(-rc));
			conn_kill(conn, rc == -EPROTO || rc == -EMSGSIZE ? -EPROTO : -ECONNRESET,
				  reason);
			return NULL;
		}
	}
}

static int conn_start(int fd, void (*reader_start)(void), struct channel_conn **out)
{
	struct channel_conn *conn = calloc(1, sizeof(*conn));
	pthread_condattr_t attr;
	int rc;

	if (!conn) {
		close(fd);
		return -ENOMEM;
	}
	atomic_init(&conn->refs, 1);
	conn->fd = fd;
	conn->reader_start = reader_start;
	pthread_mutex_init(&conn->lock, NULL);
	pthread_mutex_init(&conn->write_lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* control_channel_shutdown's wait */
	pthread_cond_init(&conn->queue_space, &attr);
	pthread_condattr_destroy(&attr);
	rc = pthread_create(&conn->reader, NULL, conn_reader_run, conn);
	if (rc) {
		conn_put(conn);
		return -rc;
	}
	conn->reader_started = true;
	*out = conn;
	return 0;
}

/* Ends the connection on purpose: every call on it fails with err. */
static void conn_close(struct channel_conn *conn, int err)
{
	pthread_mutex_lock(&conn->lock);
	conn->closing = true;
	pthread_mutex_unlock(&conn->lock);
	conn_kill(conn, err, "the control channel was closed");
}

/* Stops the reader and drops the channel's reference. */
static void conn_retire(struct channel_conn *conn)
{
	if (!conn)
		return;
	conn_close(conn, -ECONNRESET);
	if (conn->reader_started)
		pthread_join(conn->reader, NULL);
	conn_put(conn);
}

static struct channel_conn *channel_current(struct control_channel *ch)
{
	struct channel_conn *conn = NULL;

	pthread_mutex_lock(&ch->lock);
	conn = ch->conn;
	if (conn && !conn_is_dead(conn))
		conn_get(conn);
	else
		conn = NULL;
	pthread_mutex_unlock(&ch->lock);
	return conn;
}

/*
 * Returns a referenced live connection, establishing one if needed (with rekey in its Ping
 * when not NULL).
 */
static int channel_establish(struct control_channel *ch, struct agent_rekey *rekey,
			     struct channel_conn **out)
{
	char reason[CONTROL_CHANNEL_ERROR_MAX];
	struct channel_conn *old, *conn = NULL;
	int fd, rc;

	*out = channel_current(ch);
	if (*out)
		return 0;
	pthread_mutex_lock(&ch->establish_lock);
	*out = channel_current(ch);
	if (*out) {
		pthread_mutex_unlock(&ch->establish_lock);
		return 0;
	}
	pthread_mutex_lock(&ch->lock);
	old = ch->conn;
	ch->conn = NULL;
	pthread_mutex_unlock(&ch->lock);
	conn_retire(old);

	fd = agent_connect_rekey(&ch->cfg, rekey, agent_connect_deadline_ms(&ch->cfg),
				 CHANNEL_PONG_TIMEOUT_MAX_MS, &ch->cancel, reason, sizeof(reason));
	if (fd < 0) {
		pthread_mutex_unlock(&ch->establish_lock);
		return control_channel_fail(fd, "%s", reason);
	}
	rc = conn_start(fd, ch->cfg.reader_start, &conn);
	if (rc < 0) {
		pthread_mutex_unlock(&ch->establish_lock);
		return control_channel_fail(rc, "starting the control channel reader failed: %s",
					    strerror(-rc));
	}
	log_debug(LOG_MODULE, "control connection established");
	pthread_mutex_lock(&ch->lock);
	ch->conn = conn;
	conn_get(conn);
	pthread_mutex_unlock(&ch->lock);
	pthread_mutex_unlock(&ch->establish_lock);
	*out = conn;
	return 0;
}

static int channel_acquire(struct control_channel *ch, struct channel_conn **out)
{
	return channel_establish(ch, NULL, out);
}

/*
 * Sends one frame. The wait for write_lock ends at deadline (NULL: none; whoever holds the lock
 * sends within its own bound, so the wait ends too), the send at the earlier of deadline and
 * the frame's budget. A frame that could not start in time fails the call with -ETIMEDOUT
 * and leaves the connection up; one cut off half-way also ends the connection, since the
 * guest would read the next frame's bytes as the rest of it.
 */
static int conn_send(struct channel_conn *conn, uint8_t type, uint32_t request_id,
		     const void *body, size_t len, const struct timespec *deadline)
{
	const char *what = proto_msg_type_name(type);
	char reason[CONTROL_CHANNEL_ERROR_MAX];
	long long send_ms = channel_send_budget_ms(len);
	int rc;

	rc = deadline ? pthread_mutex_clocklock(&conn->write_lock, CLOCK_MONOTONIC, deadline)
		      : pthread_mutex_lock(&conn->write_lock);
	if (rc == ETIMEDOUT)
		return control_channel_fail(-ETIMEDOUT, "%s could not be sent in time: another "
					    "frame to the guest agent was still going out (the "
					    "guest takes its input slowly or not at all)", what);
	if (rc)
		return control_channel_fail(-rc, "sending %s failed: %s", what, strerror(rc));
	if (deadline) {
		long long left = (long long)clock_ms_until(deadline);

		if (left < send_ms)
			send_ms = left;
	}
	if (send_ms == 0) {
		pthread_mutex_unlock(&conn->write_lock);
		return control_channel_fail(-ETIMEDOUT, "%s was not sent: its call's time ran out "
					    "before it could go out", what);
	}
	rc = proto_frame_write_timed(conn->fd, type, true, request_id, body, len, (int)send_ms);
	pthread_mutex_unlock(&conn->write_lock);
	if (rc == 0)
		return 0;
	if (rc == -EMSGSIZE)
		return control_channel_fail(rc, "%s is larger than the 64 MiB frame limit; "
					    "split the transfer", what);
	if (rc == -ETIMEDOUT)
		return control_channel_fail(rc, "%s could not be sent: the guest agent took none "
					    "of it within %lld ms; it may be overloaded or hung",
					    what, send_ms);
	if (rc == -ETIME) {
		snprintf(reason, sizeof(reason), "sending %s (%zu bytes) did not finish within "
			 "%lld ms: the guest agent takes its input too slowly; the connection is "
			 "closed and the next call reconnects", what, len, send_ms);
		conn_kill(conn, -ECONNRESET, reason);
		return control_channel_fail(-ETIMEDOUT, "%s", reason);
	}
	snprintf(reason, sizeof(reason), "sending %s failed (%s); the next call reconnects",
		 what, strerror(-rc));
	conn_kill(conn, -ECONNRESET, reason);
	return control_channel_fail(-ECONNRESET, "%s", reason);
}

/* ---- calls -------------------------------------------------------------------------------- */

struct channel_call {
	struct control_channel *ch;
	struct channel_conn *conn;
	struct channel_slot slot;
};

static uint32_t channel_next_request_id(struct control_channel *ch)
{
	uint32_t id;

	do
		id = atomic_fetch_add(&ch->next_request_id, 1);
	while (id == 0);
	return id;
}

static int call_begin(struct control_channel *ch, struct channel_call *call, enum slot_kind kind,
		      uint8_t terminal_type)
{
	pthread_condattr_t attr;
	int rc;

	memset(call, 0, sizeof(*call));
	call->ch = ch;
	rc = channel_acquire(ch, &call->conn);
	if (rc < 0)
		return rc;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&call->slot.cond, &attr);
	pthread_condattr_destroy(&attr);
	call->slot.kind = kind;
	call->slot.terminal_type = terminal_type;
	call->slot.request_id = channel_next_request_id(ch);

	pthread_mutex_lock(&call->conn->lock);
	if (call->conn->dead) {
		call->slot.done = true;
		call->slot.error = call->conn->dead_error;
		snprintf(call->slot.reason, sizeof(call->slot.reason), "%s",
			 call->conn->dead_reason);
	}
	call->slot.next = call->conn->slots;
	call->conn->slots = &call->slot;
	pthread_mutex_unlock(&call->conn->lock);
	return 0;
}

static void call_end(struct channel_call *call)
{
	struct channel_conn *conn = call->conn;
	struct channel_slot **link;
	struct slot_frame *queue;

	if (!conn)
		return;
	pthread_mutex_lock(&conn->lock);
	for (link = &conn->slots; *link; link = &(*link)->next) {
		if (*link == &call->slot) {
			*link = call->slot.next;
			break;
		}
	}
	queue = call->slot.queue_head;
	call->slot.queue_head = call->slot.queue_tail = NULL;
	conn->queued_bytes -= call->slot.queued_bytes;
	call->slot.queued_bytes = 0;
	pthread_cond_broadcast(&conn->queue_space);
	pthread_mutex_unlock(&conn->lock);
	slot_queue_free(queue);
	proto_frame_free(&call->slot.reply);
	pthread_cond_destroy(&call->slot.cond);
	conn_put(conn);
	call->conn = NULL;
}

static int call_send(struct channel_call *call, uint8_t type, const void *body, size_t len,
		     const struct timespec *deadline)
{
	return conn_send(call->conn, type, call->slot.request_id, body, len, deadline);
}

/*
 * Waits for the next event on the call: a queued stream frame (returned in *frame, 1), the
 * terminal reply (0, in call->slot.reply), or a failure (-errno, last_error set).
 */
static int call_wait(struct channel_call *call, const struct timespec *deadline,
		     const char *what, long long timeout_ms, struct proto_frame *frame)
{
	struct channel_slot *slot = &call->slot;
	struct slot_frame *item;
	bool done;
	int rc = 0, error;

	pthread_mutex_lock(&call->conn->lock);
	while (!slot->queue_head && !slot->done && rc == 0)
		rc = deadline ? pthread_cond_timedwait(&slot->cond, &call->conn->lock, deadline)
			      : pthread_cond_wait(&slot->cond, &call->conn->lock);
	item = slot->queue_head;
	if (item) {
		slot->queue_head = item->next;
		if (!slot->queue_head)
			slot->queue_tail = NULL;
		slot->queued_bytes -= slot_frame_cost(&item->frame);
		call->conn->queued_bytes -= slot_frame_cost(&item->frame);
		pthread_cond_broadcast(&call->conn->queue_space);
		pthread_mutex_unlock(&call->conn->lock);
		*frame = item->frame;
		free(item);
		return 1;
	}
	/* once done is set under the lock, the reader never touches the slot again */
	done = slot->done;
	error = slot->error;
	pthread_mutex_unlock(&call->conn->lock);
	if (done && error)
		return control_channel_fail(error, "%s failed: %s", what, slot->reason);
	if (done)
		return 0;
	return control_channel_fail(-ETIMEDOUT, "%s got no answer from the guest agent within "
				    "%lld ms; the agent may be overloaded or hung", what,
				    timeout_ms);
}

/* The liveness check's answer time; 0 turns the check off. */
static long long channel_liveness_timeout_ms(const struct control_channel *ch)
{
	if (ch->cfg.liveness_timeout_ms < 0)
		return 0;
	return ch->cfg.liveness_timeout_ms > 0 ? ch->cfg.liveness_timeout_ms
					       : LIVENESS_TIMEOUT_DEFAULT_MS;
}

/*
 * The liveness check: a SnapshotReady round trip within timeout_ms, which the agent answers
 * from its connection reader whatever its commands are doing. 0 when it came back; otherwise
 * the error says that the guest stopped answering while what was under way (-ETIMEDOUT).
 */
static int channel_check_alive(struct control_channel *ch, const char *what,
			       long long timeout_ms)
{
	char why[CONTROL_CHANNEL_ERROR_MAX];

	if (control_channel_snapshot_ready(ch, (int)timeout_ms) == 0)
		return 0;
	snprintf(why, sizeof(why), "%s", control_channel_last_error());
	return control_channel_fail(-ETIMEDOUT, "%s: the guest stopped answering (a liveness "
				    "check failed: %s); the VM is wedged, see its console", what,
				    why);
}

/* One request, one reply of reply_type; the reply stays in call->slot.reply. */
static int call_oneshot(struct control_channel *ch, struct channel_call *call,
			uint8_t request_type, const void *body, size_t len, uint8_t reply_type,
			long long timeout_ms)
{
	const char *what = proto_msg_type_name(request_type);
	struct timespec deadline;
	bool bounded = deadline_after(timeout_ms, &deadline);
	long long check_ms = channel_liveness_timeout_ms(ch);
	struct proto_frame unused;
	int rc;

	rc = call_begin(ch, call, SLOT_ONESHOT, 0);
	if (rc < 0)
		return rc;
	/* a send that failed says why itself: a liveness check would queue behind it */
	rc = call_send(call, request_type, body, len, bounded ? &deadline : NULL);
	if (rc < 0)
		return rc;
	rc = call_wait(call, bounded ? &deadline : NULL, what, timeout_ms, &unused);
	/*
	 * Unanswered: say whether the guest is wedged or only this call went unanswered, with a
	 * check no longer than the call's own wait, so a call fails within twice its timeout.
	 */
	if (rc == -ETIMEDOUT && request_type != PROTO_MSG_SNAPSHOT_READY && timeout_ms > 0 &&
	    check_ms > 0) {
		char unanswered[CONTROL_CHANNEL_ERROR_MAX];

		if (timeout_ms < check_ms)
			check_ms = timeout_ms;
		snprintf(unanswered, sizeof(unanswered), "%s", control_channel_last_error());
		if (channel_check_alive(ch, what, check_ms) == 0)
			control_channel_fail(-ETIMEDOUT, "%s (the guest answered a liveness check "
					     "after it)", unanswered);
	}
	if (rc == 0 && call->slot.reply.type != reply_type)
		rc = control_channel_fail(-EPROTO, "the guest agent answered %s with %s", what,
					  proto_msg_type_name(call->slot.reply.type));
	return rc;
}

/* ---- public: lifecycle -------------------------------------------------------------------- */

struct control_channel *control_channel_create(const struct control_channel_config *cfg)
{
	struct control_channel *ch;

	if (!cfg || !cfg->connect)
		return NULL;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return NULL;
	ch->cfg = *cfg;
	pthread_mutex_init(&ch->lock, NULL);
	pthread_mutex_init(&ch->establish_lock, NULL);
	agent_connect_cancel_init(&ch->cancel);
	atomic_init(&ch->next_request_id, 1);
	return ch;
}

void control_channel_cancel(struct control_channel *ch)
{
	struct channel_conn *conn;

	agent_connect_cancel(&ch->cancel);
	pthread_mutex_lock(&ch->lock);
	conn = ch->conn;
	if (conn)
		conn_get(conn);
	pthread_mutex_unlock(&ch->lock);
	if (!conn)
		return;
	conn_close(conn, -ECANCELED);
	conn_put(conn);
}

/*
 * Cancelling first frees establish_lock within one connect attempt whatever the guest does,
 * and shuts the connection down, which wakes its reader wherever it waits (a read, or the
 * queue's back-pressure); then the reader is joined.
 */
void control_channel_destroy(struct control_channel *ch)
{
	if (!ch)
		return;
	control_channel_cancel(ch);
	pthread_mutex_lock(&ch->establish_lock);
	conn_retire(ch->conn);
	ch->conn = NULL;
	pthread_mutex_unlock(&ch->establish_lock);
	agent_connect_cancel_destroy(&ch->cancel);
	pthread_mutex_destroy(&ch->lock);
	pthread_mutex_destroy(&ch->establish_lock);
	memset(ch->cfg.secret, 0, sizeof(ch->cfg.secret));
	free(ch);
}

int control_channel_connect_unix(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd;

	if (!path || strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int control_channel_unix_connector(void *opaque, int timeout_ms)
{
	return control_channel_connect_unix(opaque);
}

int control_channel_connect(struct control_channel *ch)
{
	struct channel_conn *conn = NULL;
	int rc = channel_acquire(ch, &conn);

	if (rc == 0)
		conn_put(conn);
	return rc;
}

/* ---- public: exec ------------------------------------------------------------------------- */

static long long exec_timeout_ms(const struct proto_exec_request *req)
{
	if (!req->has_timeout)
		return TIMEOUT_EXEC_UNSET_MS;
	if (req->timeout_secs == 0)
		return -1;
	if (req->timeout_secs > (uint64_t)(INT64_MAX / MS_PER_SEC) - EXEC_REPLY_GRACE_MS)
		return -1;
	return (long long)req->timeout_secs * MS_PER_SEC + EXEC_REPLY_GRACE_MS;
}

/* Tells of a malformed frame that a stream drops: a warning for the stream's first few. */
static void stream_drop_malformed(unsigned int *dropped, const char *what, const char *why)
{
	log_warn_repeated(LOG_MODULE, *dropped, STREAM_MALFORMED_WARNINGS,
			  "dropping a malformed %s: %s", what, why ? why : "?");
	if (*dropped < UINT_MAX)
		(*dropped)++;
}

static void exec_deliver_chunk(struct proto_frame *frame, unsigned int *dropped,
			       void (*on_chunk)(const struct proto_exec_output_chunk *, void *),
			       void *opaque)
{
	struct proto_exec_output_chunk chunk;
	const char *why = NULL;

	if (frame->type != PROTO_MSG_EXEC_OUTPUT_CHUNK) {
		log_debug(LOG_MODULE, "ignoring %s inside an exec stream",
			  proto_msg_type_name(frame->type));
		return;
	}
	if (proto_exec_output_chunk_decode(frame->body, frame->body_len, &chunk, &why) < 0) {
		stream_drop_malformed(dropped, "output chunk", why);
		return;
	}
	if (on_chunk)
		on_chunk(&chunk, opaque);
	proto_exec_output_chunk_free(&chunk);
}

static bool timespec_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* The earlier of the call's deadline (if any) and now + interval_ms. */
static struct timespec exec_next_wake(const struct timespec *deadline, long long interval_ms)
{
	struct timespec wake;

	deadline_after(interval_ms, &wake);
	return deadline && timespec_before(deadline, &wake) ? *deadline : wake;
}

static bool exec_deadline_passed(const struct timespec *deadline)
{
	struct timespec now;

	if (!deadline)
		return false;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return !timespec_before(&now, deadline);
}

/*
 * Waits for the exec's next frame like call_wait, but a guest that has stopped altogether (a
 * wedged kernel answers nothing, however long the command may run) is found within about
 * twice the liveness timeout (at most LIVENESS_INTERVAL_MS + it) instead of at the exec's own
 * deadline: after each quiet interval a SnapshotReady round trip, which the agent answers from
 * its connection reader whatever its commands are doing, must come back.
 */
static int exec_wait_alive(struct channel_call *call, const struct timespec *deadline,
			   long long timeout_ms, struct proto_frame *frame)
{
	long long liveness_ms = channel_liveness_timeout_ms(call->ch);

	for (;;) {
		struct timespec wake = exec_next_wake(deadline, liveness_ms < LIVENESS_INTERVAL_MS
									? liveness_ms
									: LIVENESS_INTERVAL_MS);
		int rc = call_wait(call, liveness_ms > 0 ? &wake : deadline, "Exec", timeout_ms,
				   frame);

		if (rc != -ETIMEDOUT || liveness_ms == 0 || exec_deadline_passed(deadline))
			return rc;
		rc = channel_check_alive(call->ch, "Exec", liveness_ms);
		if (rc < 0)
			return rc;
		log_debug(LOG_MODULE, "Exec still running; the guest answered a liveness check");
	}
}

int control_channel_exec(struct control_channel *ch, const struct proto_exec_request *req,
			 void (*on_chunk)(const struct proto_exec_output_chunk *chunk,
					  void *opaque),
			 void *opaque, struct proto_exec_response *out)
{
	long long timeout_ms = exec_timeout_ms(req);
	struct timespec deadline;
	bool bounded = deadline_after(timeout_ms, &deadline);
	struct channel_call call;
	struct proto_frame frame;
	unsigned int malformed = 0;
	const char *why = NULL;
	uint8_t *body;
	size_t len;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = proto_exec_request_encode(req, &body, &len);
	if (rc < 0)
		return control_channel_fail(rc, "cannot encode the exec request for '%s' (%s)",
					    req->program ? req->program : "(null)", strerror(-rc));
	rc = call_begin(ch, &call, SLOT_STREAM, PROTO_MSG_EXEC_RESPONSE);
	if (rc == 0)
		rc = call_send(&call, PROTO_MSG_EXEC_REQUEST, body, len, bounded ? &deadline : NULL);
	free(body);
	while (rc == 0) {
		rc = exec_wait_alive(&call, bounded ? &deadline : NULL, timeout_ms, &frame);
		if (rc != 1)
			break;
		exec_deliver_chunk(&frame, &malformed, on_chunk, opaque);
		proto_frame_free(&frame);
		rc = 0;
	}
	if (rc == 0) {
		rc = proto_exec_response_decode(call.slot.reply.body, call.slot.reply.body_len, out,
						&why);
		if (rc < 0)
			rc = control_channel_fail(rc, "the guest agent sent a malformed "
						  "ExecResponse: %s", why ? why : "?");
	}
	call_end(&call);
	return rc;
}

/* ---- public: files ------------------------------------------------------------------------ */

int channel_errno_for_code(enum proto_error_code code)
{
	switch (code) {
	case PROTO_ERROR_DENIED:
		return -EPERM;
	case PROTO_ERROR_NOT_FOUND:
		return -ENOENT;
	case PROTO_ERROR_INVALID:
		return -EINVAL;
	case PROTO_ERROR_TIMED_OUT:
		return -ETIMEDOUT;
	case PROTO_ERROR_BUSY:
		return -EBUSY;
	default:
		return -EIO;
	}
}

/* The errno comes from the reply's code; the agent's sentence goes to last_error for people. */
static int agent_failure(const char *what, const char *path, enum proto_error_code code,
			 const char *error)
{
	const char *text = error ? error : "no reason given";

	return control_channel_fail(channel_errno_for_code(code),
				    "%s %s: the guest agent reported: %s", what, path, text);
}

static int path_body(const char *path, uint8_t **body, size_t *len)
{
	struct proto_path_request req = { .path = (char *)path };
	int rc = proto_path_request_encode(&req, body, len);

	if (rc < 0)
		return control_channel_fail(rc, "cannot encode path '%s' (%s)",
					    path ? path : "(null)", strerror(-rc));
	return 0;
}

static int status_call(struct control_channel *ch, const char *what, const char *path,
		       uint8_t request_type, const uint8_t *body, size_t len,
		       uint8_t reply_type, long long timeout_ms)
{
	struct proto_status_response status;
	struct channel_call call;
	const char *why = NULL;
	int rc;

	rc = call_oneshot(ch, &call, request_type, body, len, reply_type, timeout_ms);
	if (rc == 0) {
		rc = proto_status_response_decode(call.slot.reply.body, call.slot.reply.body_len,
						  &status, &why);
		if (rc < 0)
			rc = control_channel_fail(rc, "malformed %s: %s",
						  proto_msg_type_name(reply_type), why ? why : "?");
		else if (!status.success)
			rc = agent_failure(what, path, status.code, status.error);
		proto_status_response_free(&status);
	}
	call_end(&call);
	return rc;
}

int control_channel_write_file(struct control_channel *ch, const char *path, const void *data,
			       size_t len, bool create_parents, int timeout_ms)
{
	struct proto_write_file req = {
		.path = (char *)path,
		.content = { .data = (uint8_t *)data, .len = len },
		.create_parents = create_parents,
	};
	uint8_t *body;
	size_t body_len;
	int rc = proto_write_file_encode(&req, &body, &body_len);

	if (rc < 0)
		return control_channel_fail(rc, "cannot encode WriteFile for '%s' (%s)",
					    path ? path : "(null)", strerror(-rc));
	rc = status_call(ch, "writing", path, PROTO_MSG_WRITE_FILE, body, body_len,
			 PROTO_MSG_WRITE_FILE_RESPONSE,
			 resolve_timeout(timeout_ms, TIMEOUT_WRITE_FILE_MS));
	free(body);
	return rc;
}

int control_channel_set_policy(struct control_channel *ch, const struct proto_set_policy *policy,
			       int timeout_ms)
{
	uint8_t *body;
	size_t body_len;
	int rc = proto_set_policy_encode(policy, &body, &body_len);

	if (rc < 0)
		return control_channel_fail(rc, "cannot encode SetPolicy (%s)", strerror(-rc));
	rc = status_call(ch, "setting", "the exec policy", PROTO_MSG_SET_POLICY, body, body_len,
			 PROTO_MSG_SET_POLICY_RESPONSE,
			 resolve_timeout(timeout_ms, TIMEOUT_WRITE_FILE_MS));
	free(body);
	return rc;
}

int control_channel_mkdir_p(struct control_channel *ch, const char *path, int timeout_ms)
{
	uint8_t *body;
	size_t len;
	int rc = path_body(path, &body, &len);

	if (rc < 0)
		return rc;
	rc = status_call(ch, "creating directory", path, PROTO_MSG_MKDIR_P, body, len,
			 PROTO_MSG_MKDIR_P_RESPONSE, resolve_timeout(timeout_ms, TIMEOUT_MKDIR_P_MS));
	free(body);
	return rc;
}

int control_channel_read_file(struct control_channel *ch, const char *path,
			      struct proto_bytes *out, int timeout_ms)
{
	struct proto_read_file_response resp;
	struct channel_call call;
	const char *why = NULL;
	uint8_t *body;
	size_t len;
	int rc;

	out->data = NULL;
	out->len = 0;
	rc = path_body(path, &body, &len);
	if (rc < 0)
		return rc;
	rc = call_oneshot(ch, &call, PROTO_MSG_READ_FILE, body, len, PROTO_MSG_READ_FILE_RESPONSE,
			  resolve_timeout(timeout_ms, TIMEOUT_READ_FILE_MS));
	free(body);
	if (rc == 0) {
		rc = proto_read_file_response_decode(call.slot.reply.body,
						     call.slot.reply.body_len, &resp, &why);
		if (rc < 0) {
			rc = control_channel_fail(rc, "malformed ReadFileResponse: %s",
						  why ? why : "?");
		} else if (!resp.success) {
			rc = agent_failure("reading", path, resp.code, resp.error);
		} else {
			*out = resp.content;
			resp.content.data = NULL;
			resp.content.len = 0;
		}
		proto_read_file_response_free(&resp);
	}
	call_end(&call);
	return rc;
}

int control_channel_file_stat(struct control_channel *ch, const char *path,
			      struct proto_file_stat_response *out, int timeout_ms)
{
	struct channel_call call;
	const char *why = NULL;
	uint8_t *body;
	size_t len;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = path_body(path, &body, &len);
	if (rc < 0)
		return rc;
	rc = call_oneshot(ch, &call, PROTO_MSG_FILE_STAT, body, len, PROTO_MSG_FILE_STAT_RESPONSE,
			  resolve_timeout(timeout_ms, TIMEOUT_FILE_STAT_MS));
	free(body);
	if (rc == 0) {
		rc = proto_file_stat_response_decode(call.slot.reply.body,
						     call.slot.reply.body_len, out, &why);
		if (rc < 0)
			rc = control_channel_fail(rc, "malformed FileStatResponse: %s",
						  why ? why : "?");
	}
	call_end(&call);
	return rc;
}

int control_channel_snapshot_ready(struct control_channel *ch, int timeout_ms)
{
	struct channel_call call;
	int rc;

	rc = call_oneshot(ch, &call, PROTO_MSG_SNAPSHOT_READY, NULL, 0, PROTO_MSG_SNAPSHOT_READY,
			  resolve_timeout(timeout_ms, TIMEOUT_SNAPSHOT_READY_MS));
	call_end(&call);
	return rc;
}

/* The guest will end the current connection on purpose: its end is then not worth a warning. */
static void conn_expect_end(struct channel_conn *conn)
{
	pthread_mutex_lock(&conn->lock);
	conn->closing = true;
	pthread_mutex_unlock(&conn->lock);
}

void control_channel_expect_end(struct control_channel *ch)
{
	struct channel_conn *conn = channel_current(ch); /* a dead one's end was logged already */

	if (!conn)
		return;
	conn_expect_end(conn);
	conn_put(conn);
}

int control_channel_connect_rekey(struct control_channel *ch, const void *doc, size_t len,
				  const uint8_t new_secret[PROTO_SECRET_SIZE], bool *applied)
{
	struct agent_rekey rekey = { .doc = doc, .len = len };
	struct channel_conn *conn = NULL;
	int rc = channel_establish(ch, &rekey, &conn);

	*applied = rc == 0 && rekey.applied;
	if (rc < 0)
		return rc;
	conn_put(conn);
	if (*applied)
		control_channel_set_secret(ch, new_secret);
	return 0;
}

void control_channel_set_secret(struct control_channel *ch,
				const uint8_t secret[PROTO_SECRET_SIZE])
{
	pthread_mutex_lock(&ch->establish_lock);
	memcpy(ch->cfg.secret, secret, sizeof(ch->cfg.secret));
	pthread_mutex_unlock(&ch->establish_lock);
}

/* Waits until conn is dead (the reader saw its end) or deadline passes; whether it is. */
static bool conn_wait_dead(struct channel_conn *conn, const struct timespec *deadline)
{
	bool dead;
	int rc = 0;

	pthread_mutex_lock(&conn->lock);
	while (!conn->dead && rc == 0)
		rc = pthread_cond_timedwait(&conn->queue_space, &conn->lock, deadline);
	dead = conn->dead;
	pthread_mutex_unlock(&conn->lock);
	return dead;
}

/* Sends Shutdown on conn; once sent, the connection's end is expected, not a failure. */
static int conn_send_shutdown(struct control_channel *ch, struct channel_conn *conn,
			      const struct timespec *deadline)
{
	int rc = conn_send(conn, PROTO_MSG_SHUTDOWN, channel_next_request_id(ch), NULL, 0,
			   deadline);

	if (rc == 0)
		conn_expect_end(conn); /* the guest now syncs, ends it and powers off */
	return rc;
}

/* Only over a live connection: a teardown never waits for a reconnect to a dead guest. */
int control_channel_shutdown(struct control_channel *ch, int timeout_ms)
{
	struct timespec deadline = clock_deadline_after_ms(timeout_ms);
	struct channel_conn *conn = channel_current(ch);
	int rc;

	if (!conn)
		return control_channel_fail(-ENOTCONN, "no live control connection to send "
					    "Shutdown on; the VM is stopped instead");
	rc = conn_send_shutdown(ch, conn, &deadline);
	if (rc == 0 && !conn_wait_dead(conn, &deadline))
		rc = control_channel_fail(-ETIMEDOUT, "the guest did not end its connection after "
					  "Shutdown; the VM is stopped");
	conn_put(conn);
	return rc;
}

int control_channel_end(struct control_channel *ch, int timeout_ms)
{
	struct timespec deadline = clock_deadline_after_ms(timeout_ms);
	struct channel_conn *conn;
	int rc;

	agent_connect_cancel(&ch->cancel); /* a dead connection is not replaced */
	conn = channel_current(ch);
	if (!conn)
		return -ENOTCONN;
	rc = conn_send_shutdown(ch, conn, &deadline);
	conn_put(conn);
	return rc;
}

/* ---- public: telemetry -------------------------------------------------------------------- */

static int telemetry_deliver(struct proto_frame *frame, unsigned int *dropped,
			     int (*on_batch)(const struct proto_telemetry_batch *, void *),
			     void *opaque)
{
	struct proto_telemetry_batch batch;
	const char *why = NULL;
	int stop;

	if (frame->type != PROTO_MSG_TELEMETRY_DATA)
		return 0;
	if (proto_telemetry_batch_decode(frame->body, frame->body_len, &batch, &why) < 0) {
		stream_drop_malformed(dropped, "telemetry batch", why);
		return 0;
	}
	stop = on_batch(&batch, opaque);
	proto_telemetry_batch_free(&batch);
	return stop;
}

int control_channel_subscribe_telemetry(struct control_channel *ch,
					const struct proto_subscribe_telemetry *req,
					int (*on_batch)(const struct proto_telemetry_batch *batch,
							void *opaque),
					void *opaque)
{
	struct channel_call call;
	struct proto_frame frame;
	unsigned int malformed = 0;
	uint8_t *body;
	size_t len;
	int rc;

	rc = proto_subscribe_telemetry_encode(req, &body, &len);
	if (rc < 0)
		return control_channel_fail(rc, "cannot encode SubscribeTelemetry (%s)",
					    strerror(-rc));
	rc = call_begin(ch, &call, SLOT_STREAM, 0);
	if (rc == 0)
		rc = call_send(&call, PROTO_MSG_SUBSCRIBE_TELEMETRY, body, len, NULL);
	free(body);
	while (rc == 0) {
		int stop;

		rc = call_wait(&call, NULL, "SubscribeTelemetry", -1, &frame);
		if (rc != 1)
			break;
		stop = telemetry_deliver(&frame, &malformed, on_batch, opaque);
		proto_frame_free(&frame);
		rc = 0;
		if (stop)
			break;
	}
	call_end(&call);
	return rc;
}
