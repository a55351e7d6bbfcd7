/*
 * Connect loop and handshake. The handshake is a challenge-response (docs/protocol.md §3): the
 * agent opens with a Challenge (a fresh nonce), the host answers with Ping carrying an HMAC of
 * that nonce under the session secret, and the agent answers Pong; the secret itself never
 * crosses the wire. The agent may not be listening yet (the VM is booting), so every
 * transient failure (connect refused, no Challenge or Pong in time, EOF) is retried with a doubling backoff
 * until the deadline, while a Pong that proves the agent speaks another protocol ends the loop
 * at once: retrying cannot fix a version mismatch, and the user must hear about it.
 * A restored guest's rekey can ride in the Ping (struct agent_rekey), so switching its secret
 * costs no round trip of its own.
 *
 * Every wait is bounded: a connect attempt gets at most CONNECT_ATTEMPT_MAX_MS, and the Pong
 * read polls with the time left, so a guest that sends half a frame and stops costs one
 * attempt, never the caller's thread. Nothing before the Pong is authenticated, so the
 * Challenge and the Pong are read under the agent's own pre-authentication cap
 * (PROTO_PREAUTH_MAX_PAYLOAD): a header that declares more ends establishment before a byte
 * of its payload is read. The connection under handshake is registered in the
 * caller's agent_connect_cancel, so whoever tears the channel down can shut it down and end
 * the loop within one connect attempt, whatever the guest does.
 *
 * The per-attempt Pong wait also doubles. Upstream caps it at 150 ms, tuned for hardware KVM;
 * here it grows to the caller's cap (2 s for the control channel) because agents in nested,
 * software-emulated guests answer slower, and a cap that is always too short never connects.
 */
#include "host/agent_handshake.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define LOG_MODULE "channel"
#define CONNECT_DEFAULT_DEADLINE_MS 30000
/*
 * A cold boot's first refused attempt comes when the guest's vsock driver is up and the agent,
 * a moment later, is not listening yet: natively a millisecond or two, so the next attempt
 * follows soon; doubling keeps a guest that takes longer (nested: tens of ms) from being asked
 * more than a few times.
 */
#define CONNECT_BACKOFF_START_MS 2
#define CONNECT_BACKOFF_MAX_MS 250
#define CONNECT_ATTEMPT_MAX_MS 2000
#define PONG_TIMEOUT_START_MS 1000
#define SEND_TIMEOUT_MS 10000
#define MS_PER_SEC 1000
#define NS_PER_MS 1000000L
#define US_PER_MS 1000

enum handshake_outcome_kind {
	HANDSHAKE_RETRY,  /* transient: try again until the deadline */
	HANDSHAKE_FATAL,  /* the agent answered, and the answer is unacceptable */
};

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / MS_PER_SEC, .tv_nsec = (long)(ms % MS_PER_SEC) * NS_PER_MS };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int set_socket_timeout(int fd, int option, int ms)
{
	struct timeval tv = { .tv_sec = ms / MS_PER_SEC, .tv_usec = (ms % MS_PER_SEC) * US_PER_MS };

	if (setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) < 0 && errno != ENOTSOCK)
		return -errno;
	return 0;
}

int agent_connect_deadline_ms(const struct control_channel_config *cfg)
{
	return cfg->connect_deadline_ms > 0 ? cfg->connect_deadline_ms : CONNECT_DEFAULT_DEADLINE_MS;
}

/*
 * The agent sent a frame header declaring more than an unauthenticated frame may hold where
 * expected belongs: an agent of another protocol, or a hostile one; retrying cannot help.
 */
static int handshake_oversized(uint8_t expected, enum handshake_outcome_kind *kind,
			       char *reason, size_t reason_len)
{
	snprintf(reason, reason_len, "the agent's frame where %s belongs declares more than the "
		 "%u bytes allowed before authentication; rebuild the guest image with this "
		 "voidbox's agent", proto_msg_type_name(expected), PROTO_PREAUTH_MAX_PAYLOAD);
	*kind = HANDSHAKE_FATAL;
	return -EPROTO;
}

/*
 * Reads the agent's Challenge into nonce. An agent of an older protocol waits for Ping
 * instead, so no Challenge within the wait is a retry like a missing Pong.
 */
static int handshake_read_challenge(int fd, int timeout_ms, uint8_t nonce[PROTO_NONCE_SIZE],
				    enum handshake_outcome_kind *kind, char *reason,
				    size_t reason_len)
{
	struct proto_frame frame;
	int rc = proto_frame_read_capped(fd, false, timeout_ms, PROTO_PREAUTH_MAX_PAYLOAD, &frame);

	if (rc == -EMSGSIZE)
		return handshake_oversized(PROTO_MSG_CHALLENGE, kind, reason, reason_len);
	if (rc == -ETIMEDOUT || rc == -ETIME) {
		snprintf(reason, reason_len, "no Challenge from the agent within %d ms (an agent "
			 "older than protocol version %u never sends one)", timeout_ms,
			 PROTO_VERSION);
		return -ETIMEDOUT;
	}
	if (rc < 0) {
		snprintf(reason, reason_len, "reading the agent's Challenge failed: %s",
			 strerror(-rc));
		return rc;
	}
	if (frame.type != PROTO_MSG_CHALLENGE || frame.body_len != PROTO_CHALLENGE_SIZE) {
		snprintf(reason, reason_len, "the agent opened with %s of %zu bytes instead of a "
			 "Challenge: rebuild the guest image with this voidbox's agent",
			 proto_msg_type_name(frame.type), frame.body_len);
		proto_frame_free(&frame);
		*kind = HANDSHAKE_FATAL;
		return -EPROTO;
	}
	memcpy(nonce, frame.body, PROTO_NONCE_SIZE);
	proto_frame_free(&frame);
	return 0;
}

/*
 * Copies the rekey document into a Ping's tail, its clock stamped now: a restore whose first
 * attempts failed would otherwise set the guest's clock behind by the time they took. A
 * document that is not a rekey goes as it is (the agent refuses it). Bytes written, or
 * -EMSGSIZE.
 */
static int handshake_put_rekey(const struct agent_rekey *rekey, uint8_t *out, size_t room)
{
	char *stamped = NULL;
	const uint8_t *doc = rekey->doc;
	size_t len = rekey->len;

	if (proto_rekey_restamp(rekey->doc, rekey->len, clock_realtime_ns(), &stamped) == 0) {
		doc = (const uint8_t *)stamped;
		len = strlen(stamped);
	}
	if (len <= room)
		memcpy(out, doc, len);
	if (stamped) {
		explicit_bzero(stamped, strlen(stamped));
		free(stamped);
	}
	return len <= room ? (int)len : -EMSGSIZE;
}

/*
 * Answers the agent's Challenge with Ping (the proof over its nonce, never the secret) and
 * validates Pong; *kind says whether a failure is worth retrying.
 */
static int handshake_run(const struct control_channel_config *cfg, struct agent_rekey *rekey,
			 int fd, int pong_timeout_ms, enum handshake_outcome_kind *kind,
			 char *reason, size_t reason_len)
{
	struct proto_ping ping = { .version = PROTO_VERSION,
				   .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	uint8_t ping_body[PROTO_PREAUTH_MAX_PAYLOAD], nonce[PROTO_NONCE_SIZE];
	size_t ping_len = PROTO_PING_SIZE;
	struct proto_frame frame;
	struct proto_pong pong;
	int rc;

	*kind = HANDSHAKE_RETRY;
	rc = handshake_read_challenge(fd, pong_timeout_ms, nonce, kind, reason, reason_len);
	if (rc < 0)
		return rc;
	proto_handshake_proof(cfg->secret, nonce, ping.proof);
	if (rekey) {
		rc = handshake_put_rekey(rekey, ping_body + PROTO_PING_SIZE,
					 sizeof(ping_body) - PROTO_PING_SIZE);
		if (rc < 0) {
			*kind = HANDSHAKE_FATAL;
			snprintf(reason, reason_len, "the rekey document does not fit in a Ping");
			return rc;
		}
		ping.flags |= PROTO_FLAG_REKEY;
		ping_len += (size_t)rc;
	}
	proto_ping_encode(&ping, ping_body);
	rc = set_socket_timeout(fd, SO_SNDTIMEO, SEND_TIMEOUT_MS);
	if (rc == 0)
		rc = proto_frame_write_timed(fd, PROTO_MSG_PING, false, 0, ping_body, ping_len,
					     pong_timeout_ms);
	explicit_bzero(ping_body, ping_len);
	memset(&ping, 0, sizeof(ping));
	if (rc < 0) {
		snprintf(reason, reason_len, "sending Ping failed: %s", strerror(-rc));
		return rc;
	}
	rc = proto_frame_read_capped(fd, false, pong_timeout_ms, PROTO_PREAUTH_MAX_PAYLOAD,
				     &frame);
	if (rc == -EMSGSIZE)
		return handshake_oversized(PROTO_MSG_PONG, kind, reason, reason_len);
	if (rc == -ECONNRESET || rc == -EPIPE) {
		snprintf(reason, reason_len,
			 "the agent closed the connection after Ping (wrong session secret?)");
		return -EACCES;
	}
	if (rc == -ETIMEDOUT) {
		snprintf(reason, reason_len, "no Pong within %d ms", pong_timeout_ms);
		return rc;
	}
	if (rc == -ETIME) {
		snprintf(reason, reason_len, "the agent sent part of a Pong and then nothing for "
			 "%d ms", pong_timeout_ms);
		return -ETIMEDOUT;
	}
	if (rc < 0) {
		snprintf(reason, reason_len, "reading Pong failed: %s", strerror(-rc));
		return rc;
	}
	if (frame.type != PROTO_MSG_PONG) {
		snprintf(reason, reason_len, "the agent answered Ping with %s instead of Pong",
			 proto_msg_type_name(frame.type));
		proto_frame_free(&frame);
		*kind = HANDSHAKE_FATAL;
		return -EPROTO;
	}
	proto_pong_decode(frame.body, frame.body_len, &pong);
	proto_frame_free(&frame);
	if (pong.version != PROTO_VERSION || !(pong.flags & PROTO_FLAG_SUPPORTS_MULTIPLEX)) {
		snprintf(reason, reason_len,
			 "the guest agent speaks protocol version %u%s, this host needs version %u "
			 "with multiplexing: rebuild the guest image with this voidbox's agent",
			 pong.version,
			 pong.flags & PROTO_FLAG_SUPPORTS_MULTIPLEX ? "" : " without multiplexing",
			 PROTO_VERSION);
		*kind = HANDSHAKE_FATAL;
		return -EPROTONOSUPPORT;
	}
	if (rekey)
		rekey->applied = (pong.flags & PROTO_FLAG_REKEY) != 0;
	return 0;
}

void agent_connect_cancel_init(struct agent_connect_cancel *cancel)
{
	pthread_mutex_init(&cancel->lock, NULL);
	cancel->cancelled = false;
	cancel->fd = -1;
}

void agent_connect_cancel_destroy(struct agent_connect_cancel *cancel)
{
	pthread_mutex_destroy(&cancel->lock);
}

void agent_connect_cancel(struct agent_connect_cancel *cancel)
{
	pthread_mutex_lock(&cancel->lock);
	cancel->cancelled = true;
	if (cancel->fd >= 0)
		shutdown(cancel->fd, SHUT_RDWR);
	pthread_mutex_unlock(&cancel->lock);
}

/* Publishes fd (or -1) as the connection under handshake; false once cancelled. */
static bool connect_track(struct agent_connect_cancel *cancel, int fd)
{
	bool live;

	if (!cancel)
		return true;
	pthread_mutex_lock(&cancel->lock);
	live = !cancel->cancelled;
	cancel->fd = live ? fd : -1;
	pthread_mutex_unlock(&cancel->lock);
	return live;
}

int agent_connect(const struct control_channel_config *cfg, int deadline_ms,
		  int pong_timeout_max_ms, struct agent_connect_cancel *cancel, char *reason,
		  size_t reason_len)
{
	return agent_connect_rekey(cfg, NULL, deadline_ms, pong_timeout_max_ms, cancel, reason,
				   reason_len);
}

int agent_connect_rekey(const struct control_channel_config *cfg, struct agent_rekey *rekey,
			int deadline_ms, int pong_timeout_max_ms,
			struct agent_connect_cancel *cancel, char *reason, size_t reason_len)
{
	long long deadline = (long long)clock_monotonic_ms() + deadline_ms;
	int backoff = CONNECT_BACKOFF_START_MS;
	int pong_timeout = PONG_TIMEOUT_START_MS;
	int last_err = -ETIMEDOUT;
	unsigned attempts = 0;
	char last_reason[256] = "no attempt finished";

	if (rekey && rekey->len > PROTO_PREAUTH_MAX_PAYLOAD - PROTO_PING_SIZE) {
		snprintf(reason, reason_len, "the rekey document (%zu bytes) does not fit in a Ping",
			 rekey->len);
		return -EMSGSIZE;
	}
	for (;;) {
		long long remaining = deadline - (long long)clock_monotonic_ms();
		enum handshake_outcome_kind kind = HANDSHAKE_RETRY;
		int fd, rc;

		if (remaining <= 0)
			break;
		if (!connect_track(cancel, -1))
			goto cancelled;
		attempts++;
		fd = cfg->connect(cfg->connect_opaque, remaining < CONNECT_ATTEMPT_MAX_MS
								? (int)remaining
								: CONNECT_ATTEMPT_MAX_MS);
		if (fd == -ECHILD) {
			snprintf(reason, reason_len, "the VM has stopped");
			return fd;
		}
		if (fd == -ECANCELED)
			goto cancelled;
		if (fd < 0) {
			last_err = fd;
			snprintf(last_reason, sizeof(last_reason), "connect failed: %s",
				 strerror(-fd));
		} else {
			int wait = pong_timeout < remaining ? pong_timeout : (int)remaining;

			if (!connect_track(cancel, fd)) {
				close(fd);
				goto cancelled;
			}
			rc = handshake_run(cfg, rekey, fd, wait, &kind, last_reason,
					   sizeof(last_reason));
			if (!connect_track(cancel, -1)) {
				close(fd);
				goto cancelled;
			}
			if (rc == 0)
				return fd;
			close(fd);
			last_err = rc;
			if (kind == HANDSHAKE_FATAL) {
				snprintf(reason, reason_len, "%s", last_reason);
				return rc;
			}
			pong_timeout = pong_timeout * 2 < pong_timeout_max_ms ? pong_timeout * 2
									   : pong_timeout_max_ms;
		}
		log_debug(LOG_MODULE, "agent connect attempt %u: %s", attempts, last_reason);
		remaining = deadline - (long long)clock_monotonic_ms();
		if (remaining <= 0)
			break;
		sleep_ms(backoff < remaining ? backoff : (int)remaining);
		backoff = backoff * 2 < CONNECT_BACKOFF_MAX_MS ? backoff * 2 : CONNECT_BACKOFF_MAX_MS;
	}
	snprintf(reason, reason_len,
		 "could not reach the guest agent within %d ms after %u attempts (last: %s); "
		 "check that the VM booted, or set VOID_BOX_CONNECT_DEADLINE_SECS to wait longer "
		 "on slow hosts", deadline_ms, attempts, last_reason);
	return last_err == -EACCES ? -EACCES : -ETIMEDOUT;

cancelled:
	snprintf(reason, reason_len, "the connect was cancelled before the guest agent answered");
	return -ECANCELED;
}
