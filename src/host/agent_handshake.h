/*
 * Reaching the guest agent: the connect-with-backoff loop and the Ping/Pong handshake, shared
 * by the multiplexed control connection and the dedicated PTY connections so both apply the
 * same retry schedule, secret and version rules.
 */
#ifndef VOIDBOX_HOST_AGENT_HANDSHAKE_H
#define VOIDBOX_HOST_AGENT_HANDSHAKE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "host/control_channel.h"

/* Effective connect deadline: cfg's (default 30 s), lengthened by the environment variable. */
int agent_connect_deadline_ms(const struct control_channel_config *cfg);

/*
 * Lets another thread stop agent_connect: cancelling shuts down the connection under
 * handshake (waking its read) and makes the loop return -ECANCELED before its next step.
 */
struct agent_connect_cancel {
	pthread_mutex_t lock;
	bool cancelled;
	int fd;  /* the connection under handshake, -1 when none */
};

void agent_connect_cancel_init(struct agent_connect_cancel *cancel);
void agent_connect_cancel_destroy(struct agent_connect_cancel *cancel);
void agent_connect_cancel(struct agent_connect_cancel *cancel);

/*
 * A rekey carried by the handshake (docs/protocol.md §3): every Ping, proven with cfg's
 * secret, also carries doc, the rekey document (§4.2), at most PROTO_PREAUTH_MAX_PAYLOAD -
 * PROTO_PING_SIZE bytes. applied says whether the agent's Pong confirmed it; an agent that
 * predates the flag ignores the document and leaves it false. Retries send the same
 * document: an agent that applied it but whose Pong was lost accepts the old secret again for
 * a Ping that carries the very secret it switched to, so a retry cannot lock the host out.
 */
struct agent_rekey {
	const uint8_t *doc;
	size_t len;
	bool applied;
};

/*
 * agent_connect with a rekey in every attempt's Ping (rekey NULL: a plain handshake).
 * -EMSGSIZE: the document does not fit in a Ping.
 */
int agent_connect_rekey(const struct control_channel_config *cfg, struct agent_rekey *rekey,
			int deadline_ms, int pong_timeout_max_ms,
			struct agent_connect_cancel *cancel, char *reason, size_t reason_len);

/*
 * Connects and completes the handshake before deadline_ms passes, retrying connect failures,
 * handshake timeouts and early EOFs with backoff. pong_timeout_max_ms caps the per-attempt
 * wait for Pong; each connect attempt gets at most a couple of seconds. cancel may be NULL.
 * Returns the fd (blocking, send timeout set) or -errno with a sentence in reason:
 * -ETIMEDOUT (nothing answered), -EACCES (the agent hung up after every Ping: wrong secret),
 * -EPROTONOSUPPORT (the agent is not protocol v2 with multiplexing), -EPROTO (the agent sent
 * another message where the Challenge or Pong belongs, or a frame over the
 * PROTO_PREAUTH_MAX_PAYLOAD cap before authentication), -ECHILD (the connector
 * says the VM has stopped), -ECANCELED (cancel was triggered, or the connector returned it).
 */
int agent_connect(const struct control_channel_config *cfg, int deadline_ms,
		  int pong_timeout_max_ms, struct agent_connect_cancel *cancel, char *reason,
		  size_t reason_len);

#endif
