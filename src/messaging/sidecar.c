/*
 * The sidecar's state and its HTTP front (see sidecar.h). One mutex guards the state; the
 * libmicrohttpd listeners (one per member, one for control) each run one polling thread, as
 * requests are short and never block. Each request is checked in a fixed order before it
 * touches the state: the size limit (a Content-Length over MESSAGING_BODY_MAX is refused
 * before the body is read; a body that grows past it is refused at its end), the route, the
 * method, then the body's parser (message.c). Every error leaves through sidecar_send_error()
 * with the shape {code, message, retryable}. libmicrohttpd is opened when the first listener
 * starts (src/dynlib/mhd_dl.h), so runs without messaging do not load it.
 *
 * The state is plain JSON values: pending intents (sent this iteration, not yet delivered or
 * drained), inbox entries (delivered, each with the inbox version that added it), and two
 * dedup tables keyed by sender plus Idempotency-Key and by sender plus canonical content.
 * Both tables are bounded per member and iteration: content by the intent limit, keys by
 * MESSAGING_KEYS_PER_ITERATION, since a repeat of known content with a new key counts no
 * intent but still adds a key.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/loopback_claim.h"
#include "dynlib/mhd_dl.h"
#include "messaging/sidecar.h"

#define SIDECAR_MIME_JSON "application/json"
#define SIDECAR_CONNECTION_LIMIT 64u
#define SIDECAR_IDLE_TIMEOUT_SECS 30u
#define SIDECAR_LISTEN_BACKLOG 16
/* Free ports tried before giving up when each one's claim is held by another process. */
#define SIDECAR_CLAIM_ATTEMPTS 8u
#define SIDECAR_SOCKET_UMASK 0177
#define SIDECAR_MS_PER_SEC 1000u
#define SIDECAR_NS_PER_MS 1000000u
#define SIDECAR_INTENT_ID_MAX 48u
#define SIDECAR_KEY_SEPARATOR "\x1f"
#define SIDECAR_IDEMPOTENCY_HEADER "Idempotency-Key"
#define SIDECAR_OPERATOR_ID "operator"
#define SIDECAR_DECIMAL 10
#define SIDECAR_PURPOSE "the messaging sidecar"

/* Who a listener serves: one member agent, or the host's control socket. */
enum sidecar_listener_kind {
	SIDECAR_LISTENER_MEMBER,
	SIDECAR_LISTENER_CONTROL,
};

struct sidecar_listener {
	struct sidecar *sc;
	enum sidecar_listener_kind kind;
	size_t member; /* SIDECAR_LISTENER_MEMBER: index into sc->members */
	struct MHD_Daemon *mhd;
};

struct sidecar_member {
	char candidate_id[SIDECAR_CANDIDATE_ID_MAX + 1];
	enum messaging_role role;
	uint16_t port;
	int port_claim; /* loopback_claim_port: only its own guest is let through to port */
	unsigned sent_this_iteration;
	unsigned keys_this_iteration; /* Idempotency-Keys added to by_key */
	struct sidecar_listener listener;
};

struct sidecar {
	pthread_mutex_t lock;
	char run_id[SIDECAR_RUN_ID_MAX + 1];
	uint64_t iteration;
	uint64_t inbox_version;
	uint64_t next_intent;
	uint64_t started_ms;
	json_t *pending;  /* [stamped intent] */
	json_t *entries;  /* [inbox entry] */
	json_t *by_key;	  /* "sender\x1fkey" -> stamped intent */
	json_t *by_content; /* "sender\x1fcanonical json" -> stamped intent */
	struct sidecar_member members[SIDECAR_MEMBERS_MAX];
	size_t member_count;
	struct sidecar_listener control;
	char control_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* One request's body as it arrives. */
struct sidecar_request {
	char *body;
	size_t len;
	bool too_large;
	bool answered;
};

static uint64_t sidecar_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SIDECAR_MS_PER_SEC + (uint64_t)ts.tv_nsec / SIDECAR_NS_PER_MS;
}

static bool sidecar_id_valid(const char *id, size_t max)
{
	size_t len = strlen(id);

	if (len == 0 || len > max)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = id[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

int sidecar_create(const char *run_id, struct sidecar **out)
{
	struct sidecar *sc;

	*out = NULL;
	if (!run_id || strlen(run_id) > SIDECAR_RUN_ID_MAX)
		return -EINVAL;
	sc = calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	pthread_mutex_init(&sc->lock, NULL);
	snprintf(sc->run_id, sizeof(sc->run_id), "%s", run_id);
	sc->pending = json_array();
	sc->entries = json_array();
	sc->by_key = json_object();
	sc->by_content = json_object();
	sc->started_ms = sidecar_now_ms();
	if (!sc->pending || !sc->entries || !sc->by_key || !sc->by_content) {
		sidecar_destroy(sc);
		return -ENOMEM;
	}
	*out = sc;
	return 0;
}

/* ---- state (called with sc->lock held) ---------------------------------------------------- */

static void sidecar_reset_iteration_locked(struct sidecar *sc)
{
	for (size_t i = 0; i < sc->member_count; i++) {
		sc->members[i].sent_this_iteration = 0;
		sc->members[i].keys_this_iteration = 0;
	}
	json_object_clear(sc->by_key);
	json_object_clear(sc->by_content);
}

/* Drops entries and pending intents whose TTL has passed at the current iteration. */
static void sidecar_expire_locked(struct sidecar *sc)
{
	json_t *lists[] = { sc->entries, sc->pending };

	for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
		size_t i = 0;

		while (i < json_array_size(lists[l])) {
			json_t *item = json_array_get(lists[l], i);
			uint64_t sent = (uint64_t)json_integer_value(json_object_get(item, "iteration"));

			if (sc->iteration > sent + MESSAGING_TTL_ITERATIONS)
				json_array_remove(lists[l], i);
			else
				i++;
		}
	}
}

/* An inbox entry made from a stamped intent (or a pushed message), at the next version. */
static int sidecar_append_entry_locked(struct sidecar *sc, json_t *intent)
{
	json_t *entry = json_deep_copy(intent);
	json_t *id = json_object_get(intent, "intent_id");

	if (!entry)
		return -ENOMEM;
	json_object_del(entry, "intent_id");
	json_object_set(entry, "message_id", id);
	json_object_set_new(entry, "version", json_integer((json_int_t)++sc->inbox_version));
	json_array_append_new(sc->entries, entry);
	return 0;
}

static json_t *sidecar_stamp_locked(struct sidecar *sc, const char *from,
				    const struct messaging_intent *intent)
{
	char id[SIDECAR_INTENT_ID_MAX];

	snprintf(id, sizeof(id), "int-%" PRIu64 "-%" PRIu64, sc->iteration, ++sc->next_intent);
	return json_pack("{s:s, s:s, s:I, s:s, s:s, s:O, s:s, s:I}", "intent_id", id,
			 "from_candidate_id", from, "iteration", (json_int_t)sc->iteration, "kind",
			 messaging_kind_name(intent->kind), "audience",
			 messaging_audience_name(intent->audience), "payload", intent->payload,
			 "priority", messaging_priority_name(intent->priority), "ttl_iterations",
			 (json_int_t)MESSAGING_TTL_ITERATIONS);
}

uint64_t sidecar_advance(struct sidecar *sc)
{
	uint64_t iteration;
	size_t i;
	json_t *intent;

	pthread_mutex_lock(&sc->lock);
	json_array_foreach(sc->pending, i, intent)
		sidecar_append_entry_locked(sc, intent);
	json_array_clear(sc->pending);
	sc->iteration++;
	sidecar_expire_locked(sc);
	sidecar_reset_iteration_locked(sc);
	iteration = sc->iteration;
	pthread_mutex_unlock(&sc->lock);
	return iteration;
}

json_t *sidecar_drain_intents(struct sidecar *sc)
{
	json_t *drained;

	pthread_mutex_lock(&sc->lock);
	drained = json_copy(sc->pending);
	if (drained) {
		json_array_clear(sc->pending);
		json_object_clear(sc->by_key);
		json_object_clear(sc->by_content);
	}
	pthread_mutex_unlock(&sc->lock);
	return drained;
}

/* An entry the host supplies: an intent plus who it is from (default "operator"). */
static json_t *sidecar_host_entry_locked(struct sidecar *sc, json_t *item, size_t index,
					 struct messaging_error *err)
{
	const char *from = json_string_value(json_object_get(item, "from_candidate_id"));
	char *text = json_dumps(item, JSON_COMPACT);
	struct messaging_intent *intent = NULL;
	json_t *root = NULL, *stamped = NULL;
	size_t count;

	if (!text) {
		messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS, "entry %zu is not an object",
				    index);
		return NULL;
	}
	if (from && !sidecar_id_valid(from, SIDECAR_CANDIDATE_ID_MAX)) {
		messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
				    "entry %zu: from_candidate_id must be 1-%u of [A-Za-z0-9._-]",
				    index, SIDECAR_CANDIDATE_ID_MAX);
	} else if (json_is_object(item) &&
		   messaging_parse_intents(text, strlen(text), &root, &intent, &count, err) == 0) {
		stamped = sidecar_stamp_locked(sc, from ? from : SIDECAR_OPERATOR_ID, intent);
		if (!stamped)
			messaging_error_set(err, MESSAGING_ERR_INTERNAL_ERROR, "out of memory");
	} else if (!json_is_object(item)) {
		messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS, "entry %zu is not an object",
				    index);
	}
	messaging_intents_free(intent);
	json_decref(root);
	free(text);
	return stamped;
}

int sidecar_load_inbox(struct sidecar *sc, const char *body, size_t len,
		       struct messaging_error *err)
{
	json_error_t json_err;
	json_t *doc = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &json_err);
	json_t *entries = json_object_get(doc, "entries");
	json_t *iteration = json_object_get(doc, "iteration");
	json_t *stamped = json_array();
	json_t *item;
	size_t i;
	int rc = -1;

	pthread_mutex_lock(&sc->lock);
	if (!doc || !json_is_object(doc)) {
		messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
				    "the inbox must be a JSON object {iteration, entries}");
		goto out;
	}
	if (!json_is_array(entries) ||
	    (iteration && (!json_is_integer(iteration) || json_integer_value(iteration) < 0 ||
			   (uint64_t)json_integer_value(iteration) < sc->iteration))) {
		messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
				    "entries must be an array and iteration a whole number no lower than %" PRIu64,
				    sc->iteration);
		goto out;
	}
	if (iteration)
		sc->iteration = (uint64_t)json_integer_value(iteration);
	json_array_foreach(entries, i, item) {
		json_t *entry = sidecar_host_entry_locked(sc, item, i, err);

		if (!entry)
			goto out;
		json_array_append_new(stamped, entry);
	}
	json_array_clear(sc->entries);
	json_array_foreach(stamped, i, item)
		sidecar_append_entry_locked(sc, item);
	sidecar_reset_iteration_locked(sc);
	rc = 0;
out:
	pthread_mutex_unlock(&sc->lock);
	json_decref(stamped);
	json_decref(doc);
	return rc;
}

int sidecar_push_message(struct sidecar *sc, const char *body, size_t len,
			 struct messaging_error *err)
{
	json_error_t json_err;
	json_t *doc = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &json_err);
	json_t *entry;
	int rc = -1;

	if (!doc)
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "the message is not JSON: %s", json_err.text);
	pthread_mutex_lock(&sc->lock);
	entry = sidecar_host_entry_locked(sc, doc, 0, err);
	if (entry) {
		rc = sidecar_append_entry_locked(sc, entry) < 0
			     ? messaging_error_set(err, MESSAGING_ERR_INTERNAL_ERROR, "out of memory")
			     : 0;
		json_decref(entry);
	}
	pthread_mutex_unlock(&sc->lock);
	json_decref(doc);
	return rc;
}

json_t *sidecar_status(struct sidecar *sc)
{
	json_t *members = json_array(), *status;

	pthread_mutex_lock(&sc->lock);
	for (size_t i = 0; members && i < sc->member_count; i++)
		json_array_append_new(members,
				      json_pack("{s:s, s:s, s:i}", "candidate_id",
						sc->members[i].candidate_id, "role",
						messaging_role_name(sc->members[i].role), "port",
						sc->members[i].port));
	status = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:o*}", "status", "ok",
			   "sidecar_version", SIDECAR_VERSION, "run_id", sc->run_id, "iteration",
			   (json_int_t)sc->iteration, "buffer_depth",
			   (json_int_t)json_array_size(sc->pending), "inbox_version",
			   (json_int_t)sc->inbox_version, "members", members);
	pthread_mutex_unlock(&sc->lock);
	return status;
}

/* ---- member routes ------------------------------------------------------------------------ */

static enum MHD_Result sidecar_send(struct MHD_Connection *conn, unsigned status, json_t *value)
{
	char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;
	struct MHD_Response *response;
	enum MHD_Result rc;

	json_decref(value);
	if (!text)
		return MHD_NO;
	response = mhd_dl.create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!response) {
		free(text);
		return MHD_NO;
	}
	mhd_dl.add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, SIDECAR_MIME_JSON);
	rc = mhd_dl.queue_response(conn, status, response);
	mhd_dl.destroy_response(response);
	return rc;
}

static enum MHD_Result sidecar_send_error(struct MHD_Connection *conn,
					  const struct messaging_error *err)
{
	return sidecar_send(conn, messaging_error_http_status(err->code),
			    messaging_error_to_json(err));
}

static enum MHD_Result sidecar_fail(struct MHD_Connection *conn, enum messaging_error_code code,
				    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static enum MHD_Result sidecar_fail(struct MHD_Connection *conn, enum messaging_error_code code,
				    const char *fmt, ...)
{
	struct messaging_error err;
	va_list ap;

	err.code = code;
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	return sidecar_send_error(conn, &err);
}

static json_t *sidecar_health(struct sidecar *sc, const struct sidecar_member *member)
{
	json_t *health;

	pthread_mutex_lock(&sc->lock);
	health = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "status", "ok",
			   "sidecar_version", SIDECAR_VERSION, "run_id", sc->run_id, "candidate_id",
			   member->candidate_id, "iteration", (json_int_t)sc->iteration,
			   "buffer_depth", (json_int_t)json_array_size(sc->pending), "inbox_version",
			   (json_int_t)sc->inbox_version, "uptime_ms",
			   (json_int_t)(sidecar_now_ms() - sc->started_ms));
	pthread_mutex_unlock(&sc->lock);
	return health;
}

static json_t *sidecar_context(struct sidecar *sc, const struct sidecar_member *member)
{
	json_t *peers = json_array(), *context;

	pthread_mutex_lock(&sc->lock);
	for (size_t i = 0; peers && i < sc->member_count; i++)
		if (&sc->members[i] != member)
			json_array_append_new(peers, json_string(sc->members[i].candidate_id));
	context = json_pack("{s:s, s:s, s:s, s:I, s:s, s:o*, s:s, s:I}", "run_id", sc->run_id,
			    "execution_id", sc->run_id, "candidate_id", member->candidate_id,
			    "iteration", (json_int_t)sc->iteration, "role",
			    messaging_role_name(member->role), "peers", peers, "sidecar_version",
			    SIDECAR_VERSION, "ttl_iterations", (json_int_t)MESSAGING_TTL_ITERATIONS);
	pthread_mutex_unlock(&sc->lock);
	return context;
}

/* What member may read: others' entries, to everyone or (for a leader) to the leader. */
static bool sidecar_entry_visible(const struct sidecar_member *member, json_t *entry,
				  uint64_t since)
{
	const char *from = json_string_value(json_object_get(entry, "from_candidate_id"));
	const char *audience = json_string_value(json_object_get(entry, "audience"));
	enum messaging_audience parsed = MESSAGING_AUDIENCE_BROADCAST;

	if ((uint64_t)json_integer_value(json_object_get(entry, "version")) <= since)
		return false;
	if (from && strcmp(from, member->candidate_id) == 0)
		return false;
	messaging_audience_parse(audience, &parsed);
	return parsed == MESSAGING_AUDIENCE_BROADCAST || member->role == MESSAGING_ROLE_LEADER;
}

static enum MHD_Result sidecar_inbox(struct MHD_Connection *conn, struct sidecar *sc,
				     const struct sidecar_member *member)
{
	const char *since_text =
		mhd_dl.lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "since");
	struct messaging_error err;
	json_t *entries = json_array(), *entry, *inbox;
	uint64_t since;
	size_t i;

	if (messaging_parse_since(since_text, &since, &err) < 0) {
		json_decref(entries);
		return sidecar_send_error(conn, &err);
	}
	pthread_mutex_lock(&sc->lock);
	json_array_foreach(sc->entries, i, entry)
		if (entries && sidecar_entry_visible(member, entry, since))
			json_array_append(entries, entry);
	inbox = json_pack("{s:I, s:s, s:s, s:s, s:I, s:o*}", "version",
			  (json_int_t)sc->inbox_version, "run_id", sc->run_id, "execution_id",
			  sc->run_id, "candidate_id", member->candidate_id, "iteration",
			  (json_int_t)sc->iteration, "entries", entries);
	pthread_mutex_unlock(&sc->lock);
	return sidecar_send(conn, MHD_HTTP_OK, inbox);
}

/* The dedup key of an intent's content: sender, iteration and the canonical intent. */
static char *sidecar_content_key(const char *from, uint64_t iteration,
				 const struct messaging_intent *intent)
{
	json_t *canonical = json_pack("{s:s, s:s, s:O, s:s}", "kind",
				      messaging_kind_name(intent->kind), "audience",
				      messaging_audience_name(intent->audience), "payload",
				      intent->payload, "priority",
				      messaging_priority_name(intent->priority));
	char *text = canonical ? json_dumps(canonical, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	char *key = NULL;

	if (text && asprintf(&key, "%s" SIDECAR_KEY_SEPARATOR "%" PRIu64 SIDECAR_KEY_SEPARATOR "%s",
			     from, iteration, text) < 0)
		key = NULL;
	json_decref(canonical);
	free(text);
	return key;
}

/*
 * Accepts a batch from member under sc->lock: repeats (same key or same content this
 * iteration) return the earlier intent and do not count; the rest must fit the limit as a
 * whole or none is taken. A new key must fit the member's key limit, as it is kept for the
 * iteration whatever the content. *created says whether anything new was stamped.
 */
static json_t *sidecar_accept_locked(struct sidecar *sc, struct sidecar_member *member,
				     const char *idem_key, const struct messaging_intent *intents,
				     size_t count, bool *created, struct messaging_error *err)
{
	json_t *answers = json_array();
	char *content_keys[MESSAGING_INTENTS_PER_ITERATION] = { 0 };
	char *key_name = NULL;
	json_t *earlier;
	unsigned fresh = 0;

	*created = false;
	if (idem_key && asprintf(&key_name, "%s" SIDECAR_KEY_SEPARATOR "%s",
				 member->candidate_id, idem_key) < 0)
		key_name = NULL;
	if (!answers || (idem_key && !key_name)) {
		messaging_error_set(err, MESSAGING_ERR_INTERNAL_ERROR, "out of memory");
		goto fail;
	}
	earlier = key_name ? json_object_get(sc->by_key, key_name) : NULL;
	if (earlier) {
		json_array_extend(answers, earlier);
		goto out;
	}
	if (key_name && member->keys_this_iteration >= MESSAGING_KEYS_PER_ITERATION) {
		messaging_error_set(err, MESSAGING_ERR_TOO_MANY_REQUESTS,
				    "%s has used its %u new Idempotency-Keys this iteration; repeat a "
				    "key it used, send without one, or wait for the next iteration "
				    "(GET /v1/context shows it)",
				    member->candidate_id, MESSAGING_KEYS_PER_ITERATION);
		goto fail;
	}
	for (size_t i = 0; i < count; i++) {
		content_keys[i] = sidecar_content_key(member->candidate_id, sc->iteration,
						      &intents[i]);
		if (!content_keys[i]) {
			messaging_error_set(err, MESSAGING_ERR_INTERNAL_ERROR, "out of memory");
			goto fail;
		}
		if (!json_object_get(sc->by_content, content_keys[i]))
			fresh++;
	}
	if (member->sent_this_iteration + fresh > MESSAGING_INTENTS_PER_ITERATION) {
		messaging_error_set(err, MESSAGING_ERR_TOO_MANY_REQUESTS,
				    "%s has sent %u of its %u intents this iteration; wait for the next iteration (GET /v1/context shows it)",
				    member->candidate_id, member->sent_this_iteration,
				    MESSAGING_INTENTS_PER_ITERATION);
		goto fail;
	}
	for (size_t i = 0; i < count; i++) {
		json_t *stamped = json_object_get(sc->by_content, content_keys[i]);

		if (stamped) {
			json_array_append(answers, stamped);
			continue;
		}
		stamped = sidecar_stamp_locked(sc, member->candidate_id, &intents[i]);
		if (!stamped) {
			messaging_error_set(err, MESSAGING_ERR_INTERNAL_ERROR, "out of memory");
			goto fail;
		}
		json_object_set(sc->by_content, content_keys[i], stamped);
		json_array_append(sc->pending, stamped);
		json_array_append_new(answers, stamped);
		member->sent_this_iteration++;
		*created = true;
	}
	if (key_name && json_object_set(sc->by_key, key_name, answers) == 0)
		member->keys_this_iteration++;
out:
	for (size_t i = 0; i < count; i++)
		free(content_keys[i]);
	free(key_name);
	return answers;
fail:
	json_decref(answers);
	answers = NULL;
	goto out;
}

static enum MHD_Result sidecar_post_intents(struct MHD_Connection *conn, struct sidecar *sc,
					    struct sidecar_member *member,
					    const struct sidecar_request *req)
{
	const char *idem_key =
		mhd_dl.lookup_connection_value(conn, MHD_HEADER_KIND, SIDECAR_IDEMPOTENCY_HEADER);
	struct messaging_intent *intents = NULL;
	struct messaging_error err;
	json_t *root = NULL, *answers;
	size_t count;
	bool created;
	enum MHD_Result rc;

	if (idem_key && !messaging_idempotency_key_valid(idem_key))
		return sidecar_fail(conn, MESSAGING_ERR_INVALID_PARAMS,
				    "Idempotency-Key must be 1-128 printable ASCII characters");
	if (messaging_parse_intents(req->body, req->len, &root, &intents, &count, &err) < 0)
		return sidecar_send_error(conn, &err);
	pthread_mutex_lock(&sc->lock);
	answers = sidecar_accept_locked(sc, member, idem_key, intents, count, &created, &err);
	pthread_mutex_unlock(&sc->lock);
	if (!answers)
		rc = sidecar_send_error(conn, &err);
	else
		rc = sidecar_send(conn, created ? MHD_HTTP_CREATED : MHD_HTTP_OK,
				  json_is_array(root) ? answers
						      : json_incref(json_array_get(answers, 0)));
	if (answers && !json_is_array(root))
		json_decref(answers);
	messaging_intents_free(intents);
	json_decref(root);
	return rc;
}

static bool sidecar_is(const char *method, const char *want)
{
	return strcmp(method, want) == 0;
}

static enum MHD_Result sidecar_member_dispatch(struct MHD_Connection *conn, struct sidecar *sc,
					       struct sidecar_member *member, const char *url,
					       const char *method, const struct sidecar_request *req)
{
	bool get = sidecar_is(method, MHD_HTTP_METHOD_GET);

	if (strcmp(url, "/v1/health") == 0)
		return get ? sidecar_send(conn, MHD_HTTP_OK, sidecar_health(sc, member))
			   : sidecar_fail(conn, MESSAGING_ERR_METHOD_NOT_ALLOWED, "use GET");
	if (strcmp(url, "/v1/context") == 0)
		return get ? sidecar_send(conn, MHD_HTTP_OK, sidecar_context(sc, member))
			   : sidecar_fail(conn, MESSAGING_ERR_METHOD_NOT_ALLOWED, "use GET");
	if (strcmp(url, "/v1/inbox") == 0)
		return get ? sidecar_inbox(conn, sc, member)
			   : sidecar_fail(conn, MESSAGING_ERR_METHOD_NOT_ALLOWED, "use GET");
	if (strcmp(url, "/v1/intents") == 0)
		return sidecar_is(method, MHD_HTTP_METHOD_POST)
			       ? sidecar_post_intents(conn, sc, member, req)
			       : sidecar_fail(conn, MESSAGING_ERR_METHOD_NOT_ALLOWED, "use POST");
	return sidecar_fail(conn, MESSAGING_ERR_NOT_FOUND,
			    "route not found (see docs/messaging.md for the sidecar's routes)");
}

/* ---- control routes (host only, on a 0600 unix socket) ----------------------------------- */

static enum MHD_Result sidecar_control_dispatch(struct MHD_Connection *conn, struct sidecar *sc,
						const char *url, const char *method,
						const struct sidecar_request *req)
{
	struct messaging_error err;

	if (strcmp(url, "/v1/status") == 0 && sidecar_is(method, MHD_HTTP_METHOD_GET))
		return sidecar_send(conn, MHD_HTTP_OK, sidecar_status(sc));
	if (strcmp(url, "/v1/inbox") == 0 && sidecar_is(method, MHD_HTTP_METHOD_PUT))
		return sidecar_load_inbox(sc, req->body, req->len, &err) < 0
			       ? sidecar_send_error(conn, &err)
			       : sidecar_send(conn, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1));
	if (strcmp(url, "/v1/messages") == 0 && sidecar_is(method, MHD_HTTP_METHOD_POST))
		return sidecar_push_message(sc, req->body, req->len, &err) < 0
			       ? sidecar_send_error(conn, &err)
			       : sidecar_send(conn, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1));
	if (strcmp(url, "/v1/intents/drain") == 0 && sidecar_is(method, MHD_HTTP_METHOD_POST))
		return sidecar_send(conn, MHD_HTTP_OK, sidecar_drain_intents(sc));
	if (strcmp(url, "/v1/advance") == 0 && sidecar_is(method, MHD_HTTP_METHOD_POST))
		return sidecar_send(conn, MHD_HTTP_OK, json_pack("{s:I}", "iteration",
								 (json_int_t)sidecar_advance(sc)));
	return sidecar_fail(conn, MESSAGING_ERR_NOT_FOUND,
			    "control route not found (see docs/messaging.md, \"Control\")");
}

/* ---- libmicrohttpd glue --------------------------------------------------------------------- */

/* The first call for a request: refuse a declared body over the limit before reading it. */
static enum MHD_Result sidecar_first_call(struct MHD_Connection *conn, void **con_cls)
{
	const char *length =
		mhd_dl.lookup_connection_value(conn, MHD_HEADER_KIND,
					       MHD_HTTP_HEADER_CONTENT_LENGTH);
	struct sidecar_request *req = calloc(1, sizeof(*req));

	if (!req)
		return MHD_NO;
	*con_cls = req;
	if (length && strtoull(length, NULL, SIDECAR_DECIMAL) > MESSAGING_BODY_MAX) {
		req->answered = true;
		return sidecar_fail(conn, MESSAGING_ERR_PAYLOAD_TOO_LARGE,
				    "the body is over the sidecar's limit of %u bytes", MESSAGING_BODY_MAX);
	}
	return MHD_YES;
}

static enum MHD_Result sidecar_handle(void *cls, struct MHD_Connection *conn, const char *url,
				      const char *method, const char *version,
				      const char *upload_data, size_t *upload_data_size,
				      void **con_cls)
{
	struct sidecar_listener *listener = cls;
	struct sidecar_request *req = *con_cls;

	if (!req)
		return sidecar_first_call(conn, con_cls);
	if (*upload_data_size) {
		if (!req->answered && !req->too_large) {
			char *grown = NULL;

			if (req->len + *upload_data_size > MESSAGING_BODY_MAX)
				req->too_large = true;
			else
				grown = realloc(req->body, req->len + *upload_data_size + 1);
			if (grown) {
				memcpy(grown + req->len, upload_data, *upload_data_size);
				req->body = grown;
				req->len += *upload_data_size;
				req->body[req->len] = '\0';
			} else {
				req->too_large = true;
			}
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->answered)
		return MHD_YES;
	req->answered = true;
	if (req->too_large)
		return sidecar_fail(conn, MESSAGING_ERR_PAYLOAD_TOO_LARGE,
				    "the body is over the sidecar's limit of %u bytes", MESSAGING_BODY_MAX);
	if (listener->kind == SIDECAR_LISTENER_CONTROL)
		return sidecar_control_dispatch(conn, listener->sc, url, method, req);
	return sidecar_member_dispatch(conn, listener->sc,
				       &listener->sc->members[listener->member], url, method, req);
}

static void sidecar_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			      enum MHD_RequestTerminationCode code)
{
	struct sidecar_request *req = *con_cls;

	if (req) {
		free(req->body);
		free(req);
		*con_cls = NULL;
	}
}

static struct MHD_Daemon *sidecar_start_mhd(struct sidecar_listener *listener, int listen_fd)
{
	return mhd_dl.start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
				   sidecar_handle, listener, MHD_OPTION_LISTEN_SOCKET, listen_fd,
				   MHD_OPTION_NOTIFY_COMPLETED, sidecar_completed, listener,
				   MHD_OPTION_CONNECTION_LIMIT, SIDECAR_CONNECTION_LIMIT,
				   MHD_OPTION_CONNECTION_TIMEOUT, SIDECAR_IDLE_TIMEOUT_SECS,
				   MHD_OPTION_END);
}

/* One try of sidecar_listen_loopback: -EADDRINUSE when the port's claim is somebody else's. */
static int sidecar_listen_loopback_once(uint16_t *port, int *claim)
{
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t addr_len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = 0;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&addr, &addr_len) < 0)
		rc = -errno;
	if (rc == 0) {
		*claim = loopback_claim_port(ntohs(addr.sin_port));
		rc = *claim < 0 ? *claim : 0;
	}
	if (rc == 0 && listen(fd, SIDECAR_LISTEN_BACKLOG) < 0) {
		rc = -errno;
		close(*claim);
		*claim = -1;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	*port = ntohs(addr.sin_port);
	return fd;
}

/*
 * A listening TCP socket on 127.0.0.1 at a free port, and its claim (loopback_claim.h), made
 * before it listens, so no other sandbox's guest is ever let through to it. A port whose claim
 * another process holds (nothing of voidbox's leaves one behind a free port) is passed over.
 */
static int sidecar_listen_loopback(uint16_t *port, int *claim)
{
	int fd = -EADDRINUSE;

	*claim = -1;
	for (unsigned int i = 0; i < SIDECAR_CLAIM_ATTEMPTS && fd == -EADDRINUSE; i++)
		fd = sidecar_listen_loopback_once(port, claim);
	return fd;
}

int sidecar_add_member(struct sidecar *sc, const char *candidate_id, enum messaging_role role,
		       uint16_t *port, char *err, size_t errlen)
{
	struct sidecar_member *member;
	int fd, rc;

	if (!candidate_id || !sidecar_id_valid(candidate_id, SIDECAR_CANDIDATE_ID_MAX)) {
		snprintf(err, errlen, "a messaging member needs a name of 1-%u characters [A-Za-z0-9._-]",
			 SIDECAR_CANDIDATE_ID_MAX);
		return -EINVAL;
	}
	rc = mhd_dl_load(SIDECAR_PURPOSE, err, errlen);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&sc->lock);
	for (size_t i = 0; i < sc->member_count; i++)
		if (strcmp(sc->members[i].candidate_id, candidate_id) == 0) {
			pthread_mutex_unlock(&sc->lock);
			snprintf(err, errlen, "two messaging members are named %s; names must be unique",
				 candidate_id);
			return -EEXIST;
		}
	if (sc->member_count == SIDECAR_MEMBERS_MAX) {
		pthread_mutex_unlock(&sc->lock);
		snprintf(err, errlen, "a run has at most %u messaging members", SIDECAR_MEMBERS_MAX);
		return -E2BIG;
	}
	member = &sc->members[sc->member_count];
	memset(member, 0, sizeof(*member));
	snprintf(member->candidate_id, sizeof(member->candidate_id), "%s", candidate_id);
	member->role = role;
	member->listener = (struct sidecar_listener){ .sc = sc, .kind = SIDECAR_LISTENER_MEMBER,
						      .member = sc->member_count };
	fd = sidecar_listen_loopback(&member->port, &member->port_claim);
	if (fd >= 0)
		member->listener.mhd = sidecar_start_mhd(&member->listener, fd);
	if (fd < 0 || !member->listener.mhd) {
		if (fd >= 0)
			close(fd);
		if (member->port_claim >= 0)
			close(member->port_claim);
		pthread_mutex_unlock(&sc->lock);
		snprintf(err, errlen, "cannot start the messaging sidecar for %s on 127.0.0.1 (a listener and its claim against other sandboxes' guests): %s",
			 candidate_id, fd < 0 ? strerror(-fd) : "libmicrohttpd refused to start");
		return fd < 0 ? fd : -EIO;
	}
	sc->member_count++;
	*port = member->port;
	pthread_mutex_unlock(&sc->lock);
	return 0;
}

int sidecar_listen_control(struct sidecar *sc, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	mode_t old_mask;
	int fd, rc;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		snprintf(err, errlen, "the control socket path %s is too long", path);
		return -ENAMETOOLONG;
	}
	rc = mhd_dl_load(SIDECAR_PURPOSE, err, errlen);
	if (rc < 0)
		return rc;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	old_mask = umask(SIDECAR_SOCKET_UMASK);
	rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old_mask);
	if (rc < 0 || listen(fd, SIDECAR_LISTEN_BACKLOG) < 0) {
		rc = -errno;
		close(fd);
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(-rc));
		return rc;
	}
	sc->control = (struct sidecar_listener){ .sc = sc, .kind = SIDECAR_LISTENER_CONTROL };
	sc->control.mhd = sidecar_start_mhd(&sc->control, fd);
	if (!sc->control.mhd) {
		close(fd);
		unlink(path);
		snprintf(err, errlen, "libmicrohttpd refused to serve %s", path);
		return -EIO;
	}
	snprintf(sc->control_path, sizeof(sc->control_path), "%s", path);
	return 0;
}

void sidecar_destroy(struct sidecar *sc)
{
	if (!sc)
		return;
	for (size_t i = 0; i < sc->member_count; i++) {
		if (sc->members[i].listener.mhd)
			mhd_dl.stop_daemon(sc->members[i].listener.mhd);
		close(sc->members[i].port_claim);
	}
	if (sc->control.mhd) {
		mhd_dl.stop_daemon(sc->control.mhd);
		unlink(sc->control_path);
	}
	json_decref(sc->pending);
	json_decref(sc->entries);
	json_decref(sc->by_key);
	json_decref(sc->by_content);
	pthread_mutex_destroy(&sc->lock);
	free(sc);
}
