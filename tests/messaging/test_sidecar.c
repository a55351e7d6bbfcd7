/*
 * The messaging sidecar's contract, over real HTTP (libcurl against the libmicrohttpd
 * listeners): the routes, the limits (3 intents and 32 new Idempotency-Keys per iteration,
 * 4096-byte payloads, the body limit), dedup by Idempotency-Key and by content, delivery at
 * the next iteration to the right audience, the TTL, the control socket, and the one error
 * shape for 400, 404, 405, 413 and 429. No VM: two members stand for two agents.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/loopback_claim.h"
#include "harness.h"
#include "messaging/sidecar.h"
#include "messaging/sidecar_http.h"

#define TEST_ERR_MAX 256
/* Replays of one intent, each with a new Idempotency-Key: far past the key limit. */
#define TEST_KEY_FLOOD 1000u
#define TEST_SIGNAL "{\"kind\":\"signal\",\"audience\":\"broadcast\",\"payload\":{\"summary_text\":\"%s\"}}"

struct fixture {
	struct sidecar *sc;
	uint16_t alpha; /* candidate */
	uint16_t beta;	/* candidate */
	uint16_t boss;	/* leader */
};

static int fixture_open(struct fixture *fx)
{
	char err[TEST_ERR_MAX];

	memset(fx, 0, sizeof(*fx));
	if (sidecar_create("run-test", &fx->sc) < 0 ||
	    sidecar_add_member(fx->sc, "alpha", MESSAGING_ROLE_CANDIDATE, &fx->alpha, err,
			       sizeof(err)) < 0 ||
	    sidecar_add_member(fx->sc, "beta", MESSAGING_ROLE_CANDIDATE, &fx->beta, err,
			       sizeof(err)) < 0 ||
	    sidecar_add_member(fx->sc, "boss", MESSAGING_ROLE_LEADER, &fx->boss, err,
			       sizeof(err)) < 0) {
		harness_fail_setup("cannot start a sidecar");
		return -1;
	}
	return 0;
}

static struct sidecar_http_answer send_signal(uint16_t port, const char *text, const char *key)
{
	struct sidecar_http_answer answer = { 0 };
	char *body = NULL;

	if (asprintf(&body, TEST_SIGNAL, text) < 0)
		return answer;
	answer = sidecar_http(NULL, port, "POST", "/v1/intents", body, key);
	free(body);
	return answer;
}

/* The status of sending one signal, the answer dropped. */
static long send_status(uint16_t port, const char *text, const char *key)
{
	struct sidecar_http_answer answer = send_signal(port, text, key);
	long status = answer.status;

	sidecar_http_free(&answer);
	return status;
}

static size_t inbox_count(uint16_t port, const char *query)
{
	char path[TEST_ERR_MAX];
	struct sidecar_http_answer a;
	size_t n;

	snprintf(path, sizeof(path), "/v1/inbox%s", query ? query : "");
	a = sidecar_http(NULL, port, "GET", path, NULL, NULL);
	n = a.status == 200 ? json_array_size(json_object_get(a.json, "entries")) : SIZE_MAX;
	sidecar_http_free(&a);
	return n;
}

/* The request is refused with status and the error shape carrying code. */
static bool refused(uint16_t port, const char *method, const char *path, const char *body,
		    const char *header, long status, const char *code)
{
	struct sidecar_http_answer a = sidecar_http(NULL, port, method, path, body, header);
	bool ok = a.status == status && sidecar_http_is_error(&a, code);

	if (!ok)
		fprintf(stderr, "  %s %s: HTTP %ld %s\n", method, path, a.status,
			a.body ? a.body : "");
	sidecar_http_free(&a);
	return ok;
}

static void test_health_and_context(void)
{
	struct fixture fx;
	struct sidecar_http_answer a;
	json_t *peers;

	if (fixture_open(&fx) < 0)
		return;
	a = sidecar_http(NULL, fx.alpha, "GET", "/v1/health", NULL, NULL);
	CHECK_INT_EQ(a.status, 200);
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "status")), "ok");
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "run_id")), "run-test");
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "candidate_id")), "alpha");
	sidecar_http_free(&a);
	a = sidecar_http(NULL, fx.boss, "GET", "/v1/context", NULL, NULL);
	CHECK_INT_EQ(a.status, 200);
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "role")), "leader");
	CHECK_INT_EQ(json_integer_value(json_object_get(a.json, "iteration")), 0);
	peers = json_object_get(a.json, "peers");
	CHECK_INT_EQ(json_array_size(peers), 2);
	CHECK_STR_EQ(json_string_value(json_array_get(peers, 0)), "alpha");
	CHECK_STR_EQ(json_string_value(json_array_get(peers, 1)), "beta");
	sidecar_http_free(&a);
	sidecar_destroy(fx.sc);
}

static void test_error_shapes(void)
{
	struct fixture fx;
	struct sidecar_http_answer a;
	char *big;

	if (fixture_open(&fx) < 0)
		return;
	CHECK(refused(fx.alpha, "GET", "/v1/nothing", NULL, NULL, 404, "NOT_FOUND"));
	CHECK(refused(fx.alpha, "DELETE", "/v1/intents", NULL, NULL, 405, "METHOD_NOT_ALLOWED"));
	CHECK(refused(fx.alpha, "POST", "/v1/intents", "{not json", NULL, 400, "INVALID_PARAMS"));
	CHECK(refused(fx.alpha, "POST", "/v1/intents",
		      "{\"kind\":\"gossip\",\"audience\":\"broadcast\",\"payload\":{}}", NULL, 400,
		      "INVALID_PARAMS"));
	CHECK(refused(fx.alpha, "GET", "/v1/inbox?since=abc", NULL, NULL, 400, "INVALID_PARAMS"));
	CHECK(refused(fx.alpha, "POST", "/v1/intents", "{}", "Idempotency-Key: a b", 400,
		      "INVALID_PARAMS"));
	/* a payload just over 4096 bytes: 413, and nothing was counted against the limit */
	big = malloc(MESSAGING_PAYLOAD_MAX + 1);
	if (big) {
		memset(big, 'x', MESSAGING_PAYLOAD_MAX);
		big[MESSAGING_PAYLOAD_MAX] = '\0';
		a = send_signal(fx.alpha, big, NULL);
		CHECK_INT_EQ(a.status, 413);
		CHECK(sidecar_http_is_error(&a, "PAYLOAD_TOO_LARGE"));
		sidecar_http_free(&a);
		free(big);
	}
	big = malloc(MESSAGING_BODY_MAX * 2);
	if (big) {
		memset(big, ' ', MESSAGING_BODY_MAX * 2 - 1);
		big[MESSAGING_BODY_MAX * 2 - 1] = '\0';
		a = sidecar_http(NULL, fx.alpha, "POST", "/v1/intents", big, NULL);
		CHECK_INT_EQ(a.status, 413);
		CHECK(sidecar_http_is_error(&a, "PAYLOAD_TOO_LARGE"));
		sidecar_http_free(&a);
		free(big);
	}
	a = send_signal(fx.alpha, "still allowed", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	sidecar_destroy(fx.sc);
}

static void test_limit_and_dedup(void)
{
	struct fixture fx;
	struct sidecar_http_answer a, b;

	if (fixture_open(&fx) < 0)
		return;
	a = send_signal(fx.alpha, "one", "Idempotency-Key: k1");
	CHECK_INT_EQ(a.status, 201);
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "from_candidate_id")), "alpha");
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "priority")), "normal");
	CHECK_INT_EQ(json_integer_value(json_object_get(a.json, "ttl_iterations")),
		     MESSAGING_TTL_ITERATIONS);
	/* the same key with other content returns the first intent */
	b = send_signal(fx.alpha, "different text", "Idempotency-Key: k1");
	CHECK_INT_EQ(b.status, 200);
	CHECK_STR_EQ(json_string_value(json_object_get(b.json, "intent_id")),
		     json_string_value(json_object_get(a.json, "intent_id")));
	sidecar_http_free(&b);
	/* the same content with no key is the same intent */
	b = send_signal(fx.alpha, "one", NULL);
	CHECK_INT_EQ(b.status, 200);
	CHECK_STR_EQ(json_string_value(json_object_get(b.json, "intent_id")),
		     json_string_value(json_object_get(a.json, "intent_id")));
	sidecar_http_free(&b);
	sidecar_http_free(&a);
	/* the same content from another member is its own intent */
	a = send_signal(fx.beta, "one", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	a = send_signal(fx.alpha, "two", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	/* a batch of two when one is left: refused whole */
	a = sidecar_http(NULL, fx.alpha, "POST", "/v1/intents",
			 "[" "{\"kind\":\"proposal\",\"audience\":\"leader\",\"payload\":{\"summary_text\":\"p\"}},"
			 "{\"kind\":\"evaluation\",\"audience\":\"leader\",\"payload\":{\"summary_text\":\"e\"}}]",
			 NULL);
	CHECK_INT_EQ(a.status, 429);
	CHECK(sidecar_http_is_error(&a, "TOO_MANY_REQUESTS"));
	CHECK(json_is_true(json_object_get(a.json, "retryable")));
	sidecar_http_free(&a);
	a = send_signal(fx.alpha, "three", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	a = send_signal(fx.alpha, "four", NULL);
	CHECK_INT_EQ(a.status, 429);
	CHECK(sidecar_http_is_error(&a, "TOO_MANY_REQUESTS"));
	sidecar_http_free(&a);
	/* a repeat still answers once the limit is reached */
	a = send_signal(fx.alpha, "one", NULL);
	CHECK_INT_EQ(a.status, 200);
	sidecar_http_free(&a);
	/* the next iteration resets the limit */
	CHECK_INT_EQ(sidecar_advance(fx.sc), 1);
	a = send_signal(fx.alpha, "four", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	sidecar_destroy(fx.sc);
}

/*
 * A member that repeats one intent with a new Idempotency-Key each time counts no intent, yet
 * each key is kept for the iteration: past MESSAGING_KEYS_PER_ITERATION new keys it gets 429,
 * so the key table stays bounded, while every key it used still answers.
 */
static void test_key_limit(void)
{
	struct fixture fx;
	struct sidecar_http_answer a, first;
	char key[TEST_ERR_MAX];
	unsigned answered = 0, limited = 0;

	if (fixture_open(&fx) < 0)
		return;
	first = send_signal(fx.alpha, "again", "Idempotency-Key: flood-0");
	CHECK_INT_EQ(first.status, 201);
	for (unsigned i = 1; i < TEST_KEY_FLOOD; i++) {
		snprintf(key, sizeof(key), "Idempotency-Key: flood-%u", i);
		a = send_signal(fx.alpha, "again", key);
		if (a.status == 200)
			answered++;
		else if (a.status == 429 && sidecar_http_is_error(&a, "TOO_MANY_REQUESTS") &&
			 json_is_true(json_object_get(a.json, "retryable")))
			limited++;
		sidecar_http_free(&a);
	}
	CHECK_INT_EQ(answered, MESSAGING_KEYS_PER_ITERATION - 1);
	CHECK_INT_EQ(limited, TEST_KEY_FLOOD - MESSAGING_KEYS_PER_ITERATION);
	/* keys already used still answer with the first intent */
	a = send_signal(fx.alpha, "again", "Idempotency-Key: flood-0");
	CHECK_INT_EQ(a.status, 200);
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "intent_id")),
		     json_string_value(json_object_get(first.json, "intent_id")));
	sidecar_http_free(&a);
	snprintf(key, sizeof(key), "Idempotency-Key: flood-%u", MESSAGING_KEYS_PER_ITERATION - 1);
	CHECK_INT_EQ(send_status(fx.alpha, "again", key), 200);
	/* without a key, and for another member, sending goes on */
	CHECK_INT_EQ(send_status(fx.alpha, "new content", NULL), 201);
	CHECK_INT_EQ(send_status(fx.beta, "again", "Idempotency-Key: flood-0"), 201);
	/* the next iteration resets the key limit */
	sidecar_advance(fx.sc);
	snprintf(key, sizeof(key), "Idempotency-Key: flood-%u", TEST_KEY_FLOOD);
	CHECK_INT_EQ(send_status(fx.alpha, "again", key), 201);
	sidecar_http_free(&first);
	sidecar_destroy(fx.sc);
}

static void test_delivery_audience_and_ttl(void)
{
	struct fixture fx;
	struct sidecar_http_answer a;
	json_t *entry;
	uint64_t version;

	if (fixture_open(&fx) < 0)
		return;
	a = send_signal(fx.alpha, "seen by all", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	a = sidecar_http(NULL, fx.alpha, "POST", "/v1/intents",
			 "{\"kind\":\"proposal\",\"audience\":\"leader\",\"priority\":\"high\","
			 "\"payload\":{\"summary_text\":\"for the leader\"}}", NULL);
	CHECK_INT_EQ(a.status, 201);
	sidecar_http_free(&a);
	/* nothing is delivered within the iteration it was sent in */
	CHECK_INT_EQ(inbox_count(fx.beta, NULL), 0);
	sidecar_advance(fx.sc);
	CHECK_INT_EQ(inbox_count(fx.alpha, NULL), 0); /* never one's own */
	CHECK_INT_EQ(inbox_count(fx.beta, NULL), 1);  /* broadcast only */
	CHECK_INT_EQ(inbox_count(fx.boss, NULL), 2);  /* broadcast and leader */
	a = sidecar_http(NULL, fx.beta, "GET", "/v1/inbox", NULL, NULL);
	entry = json_array_get(json_object_get(a.json, "entries"), 0);
	CHECK_STR_EQ(json_string_value(json_object_get(entry, "from_candidate_id")), "alpha");
	CHECK_STR_EQ(json_string_value(json_object_get(entry, "kind")), "signal");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(entry, "payload"),
						       "summary_text")),
		     "seen by all");
	CHECK(json_is_string(json_object_get(entry, "message_id")));
	version = (uint64_t)json_integer_value(json_object_get(a.json, "version"));
	CHECK(version >= 1);
	sidecar_http_free(&a);
	{
		char query[64];

		snprintf(query, sizeof(query), "?since=%llu", (unsigned long long)version);
		CHECK_INT_EQ(inbox_count(fx.boss, query), 0);
		CHECK_INT_EQ(inbox_count(fx.boss, "?since=0"), 2);
	}
	/* sent at 0: still there at iteration 2, gone at 3 */
	sidecar_advance(fx.sc);
	CHECK_INT_EQ(inbox_count(fx.beta, NULL), 1);
	sidecar_advance(fx.sc);
	CHECK_INT_EQ(inbox_count(fx.beta, NULL), 0);
	CHECK_INT_EQ(inbox_count(fx.boss, NULL), 0);
	sidecar_destroy(fx.sc);
}

static void test_control_socket(void)
{
	char dir[] = "/tmp/voidbox-sidecar-XXXXXX", path[TEST_ERR_MAX], err[TEST_ERR_MAX];
	struct sidecar_http_answer a;
	struct fixture fx;
	json_t *drained;

	if (!mkdtemp(dir)) {
		harness_fail_setup("mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/sidecar.sock", dir);
	if (fixture_open(&fx) < 0)
		return;
	CHECK_INT_EQ(sidecar_listen_control(fx.sc, path, err, sizeof(err)), 0);
	CHECK_INT_EQ(access(path, F_OK), 0);
	a = sidecar_http(path, 0, "PUT", "/v1/inbox",
			 "{\"iteration\":5,\"entries\":[{\"from_candidate_id\":\"boss\",\"kind\":\"proposal\","
			 "\"audience\":\"broadcast\",\"payload\":{\"summary_text\":\"plan\"}}]}", NULL);
	CHECK_INT_EQ(a.status, 200);
	sidecar_http_free(&a);
	CHECK_INT_EQ(inbox_count(fx.alpha, NULL), 1);
	CHECK_INT_EQ(inbox_count(fx.boss, NULL), 0);
	a = sidecar_http(path, 0, "PUT", "/v1/inbox", "{\"iteration\":1,\"entries\":[]}", NULL);
	CHECK_INT_EQ(a.status, 400); /* never backwards */
	CHECK(sidecar_http_is_error(&a, "INVALID_PARAMS"));
	sidecar_http_free(&a);
	a = sidecar_http(path, 0, "POST", "/v1/messages",
			 "{\"kind\":\"signal\",\"audience\":\"broadcast\",\"payload\":{\"summary_text\":\"more\"}}",
			 NULL);
	CHECK_INT_EQ(a.status, 200);
	sidecar_http_free(&a);
	CHECK_INT_EQ(inbox_count(fx.alpha, NULL), 2);
	a = send_signal(fx.beta, "to drain", NULL);
	CHECK_INT_EQ(json_integer_value(json_object_get(a.json, "iteration")), 5);
	sidecar_http_free(&a);
	a = sidecar_http(path, 0, "POST", "/v1/intents/drain", NULL, NULL);
	CHECK_INT_EQ(a.status, 200);
	CHECK_INT_EQ(json_array_size(a.json), 1);
	sidecar_http_free(&a);
	drained = sidecar_drain_intents(fx.sc);
	CHECK_INT_EQ(json_array_size(drained), 0);
	json_decref(drained);
	a = sidecar_http(path, 0, "POST", "/v1/advance", NULL, NULL);
	CHECK_INT_EQ(json_integer_value(json_object_get(a.json, "iteration")), 6);
	sidecar_http_free(&a);
	/* a drained intent is not delivered */
	CHECK_INT_EQ(inbox_count(fx.alpha, NULL), 2);
	a = sidecar_http(path, 0, "GET", "/v1/status", NULL, NULL);
	CHECK_INT_EQ(json_array_size(json_object_get(a.json, "members")), 3);
	sidecar_http_free(&a);
	/* the guest-facing listener has no control routes */
	a = sidecar_http(NULL, fx.alpha, "POST", "/v1/intents/drain", NULL, NULL);
	CHECK_INT_EQ(a.status, 404);
	sidecar_http_free(&a);
	sidecar_destroy(fx.sc);
	CHECK(access(path, F_OK) != 0);
	rmdir(dir);
}

static void test_member_names(void)
{
	struct sidecar *sc;
	char err[TEST_ERR_MAX];
	uint16_t port;

	if (sidecar_create("run", &sc) < 0) {
		harness_fail_setup("sidecar_create");
		return;
	}
	CHECK(sidecar_add_member(sc, "bad name", MESSAGING_ROLE_CANDIDATE, &port, err,
				 sizeof(err)) < 0);
	CHECK_INT_EQ(sidecar_add_member(sc, "a", MESSAGING_ROLE_CANDIDATE, &port, err, sizeof(err)),
		     0);
	CHECK(sidecar_add_member(sc, "a", MESSAGING_ROLE_CANDIDATE, &port, err, sizeof(err)) < 0);
	CHECK(strstr(err, "unique") != NULL);
	sidecar_destroy(sc);
}

/* A member's port is claimed while its listener serves, so only its own VM's guest reaches it. */
static void test_member_port_claimed(void)
{
	struct sidecar *sc;
	char err[TEST_ERR_MAX];
	uint16_t port = 0;
	int asker = loopback_claim_asker_open();

	if (asker < 0 || sidecar_create("run", &sc) < 0) {
		harness_fail_setup("sidecar_create or a claim asker");
		return;
	}
	CHECK_INT_EQ(sidecar_add_member(sc, "a", MESSAGING_ROLE_CANDIDATE, &port, err, sizeof(err)),
		     0);
	CHECK(port != 0);
	CHECK(loopback_claim_held(asker, port));
	sidecar_destroy(sc);
	CHECK(!loopback_claim_held(asker, port));
	close(asker);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	RUN_TEST(test_health_and_context);
	RUN_TEST(test_error_shapes);
	RUN_TEST(test_limit_and_dedup);
	RUN_TEST(test_key_limit);
	RUN_TEST(test_delivery_audience_and_ttl);
	RUN_TEST(test_control_socket);
	RUN_TEST(test_member_names);
	RUN_TEST(test_member_port_claimed);
	curl_global_cleanup();
	return harness_finish();
}
