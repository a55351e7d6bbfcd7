/*
 * The messaging sidecar: a per-run HTTP/1.1 server on libmicrohttpd that lets the agents of
 * one run exchange intents. Every member agent gets its own listener on host loopback (the
 * guest reaches it as http://10.0.2.2:PORT through the user-mode network), so the sidecar
 * knows who sends without trusting a field the guest writes. The run's iteration advances
 * between stages (sidecar_advance) or when the daemon loads an inbox: intents sent in one
 * iteration are delivered to their audience's inboxes at the next, and live
 * MESSAGING_TTL_ITERATIONS iterations. docs/messaging.md describes routes, limits and dedup.
 */
#ifndef VOIDBOX_MESSAGING_SIDECAR_H
#define VOIDBOX_MESSAGING_SIDECAR_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "messaging/message.h"

#define SIDECAR_MEMBERS_MAX 32u
#define SIDECAR_CANDIDATE_ID_MAX 64u
#define SIDECAR_RUN_ID_MAX 64u
#define SIDECAR_VERSION "voidbox-sidecar/1"

struct sidecar;

/* A sidecar for run_id with no members yet. 0 or -errno. */
int sidecar_create(const char *run_id, struct sidecar **out);

/*
 * Adds a member and starts its listener on 127.0.0.1 (a free port, in *port). candidate_id
 * names it to its peers ([A-Za-z0-9._-], unique). 0, or -errno with err saying why.
 */
int sidecar_add_member(struct sidecar *sc, const char *candidate_id, enum messaging_role role,
		       uint16_t *port, char *err, size_t errlen);

/*
 * Serves the control routes (docs/messaging.md, "Control") on a unix socket at path, mode
 * 0600: the host's way to load an inbox, push a message, drain intents and advance. 0 or
 * -errno with err set.
 */
int sidecar_listen_control(struct sidecar *sc, const char *path, char *err, size_t errlen);

/* Ends the iteration: delivers pending intents, expires old entries. The new iteration. */
uint64_t sidecar_advance(struct sidecar *sc);

/* Takes every pending (undelivered) intent: a JSON array, NULL on allocation failure. */
json_t *sidecar_drain_intents(struct sidecar *sc);

/*
 * Loads an inbox {iteration, entries:[{from_candidate_id, kind, audience, payload,
 * priority?}]}: replaces the entries, moves to that iteration (never backwards) and resets
 * the per-iteration limits and dedup. 0 or -1 with err set.
 */
int sidecar_load_inbox(struct sidecar *sc, const char *body, size_t len,
		       struct messaging_error *err);

/* Appends one entry {from_candidate_id, kind, audience, payload, priority?} to the inbox. */
int sidecar_push_message(struct sidecar *sc, const char *body, size_t len,
			 struct messaging_error *err);

/* {status, run_id, iteration, buffer_depth, inbox_version, members}: NULL when out of memory. */
json_t *sidecar_status(struct sidecar *sc);

/* Stops every listener and frees the sidecar. NULL is fine. */
void sidecar_destroy(struct sidecar *sc);

#endif
