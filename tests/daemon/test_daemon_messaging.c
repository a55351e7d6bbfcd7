/*
 * The daemon's messaging relay (src/daemon/messaging.c) against a real sidecar listening on
 * the control socket where a daemon-started run would put it: loading an inbox, pushing a
 * message and draining intents reach the sidecar; a sidecar refusal passes through with its
 * status and shape; a wrong method, a run without a sidecar and other paths are told apart;
 * what GET /v1/runs/{id} reports of messaging (a sidecar and its members' URLs, or none);
 * and a run's environment names its id and control socket.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "daemon/daemon_internal.h"
#include "harness.h"
#include "messaging/sidecar.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 256

static struct daemon test_daemon;

struct relay_answer {
	bool mine;
	bool failed;
	unsigned status;
	json_t *json;
	struct daemon_error err;
};

static struct relay_answer relay(const char *url, const char *method, const char *body)
{
	struct relay_answer a = { 0 };

	a.mine = daemon_messaging_route(&test_daemon, url, method, body, body ? strlen(body) : 0,
					&a.status, &a.json, &a.err, &a.failed);
	return a;
}

static void test_relay_routes(void)
{
	char dir[] = "/tmp/voidbox-daemon-messaging-XXXXXX", path[TEST_PATH_MAX];
	char err[TEST_ERR_MAX];
	struct relay_answer a;
	struct sidecar *sc = NULL;
	uint16_t port = 0;
	json_t *status;

	if (!mkdtemp(dir))
		harness_fail_setup("mkdtemp");
	snprintf(test_daemon.state_dir, sizeof(test_daemon.state_dir), "%s", dir);
	snprintf(path, sizeof(path), "%s/runs", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/runs/run-1", dir);
	mkdir(path, 0700);
	CHECK_INT_EQ(daemon_messaging_control_path(&test_daemon, "run-1", path, sizeof(path)), 0);
	if (sidecar_create("run-1", &sc) < 0 ||
	    sidecar_add_member(sc, "alpha", MESSAGING_ROLE_CANDIDATE, &port, err, sizeof(err)) < 0 ||
	    sidecar_listen_control(sc, path, err, sizeof(err)) < 0)
		harness_fail_setup("cannot start a sidecar");

	a = relay("/v1/runs/run-1/inbox", "PUT",
		  "{\"iteration\":2,\"entries\":[{\"from_candidate_id\":\"boss\",\"kind\":\"proposal\","
		  "\"audience\":\"broadcast\",\"payload\":{\"summary_text\":\"plan\"}}]}");
	CHECK(a.mine && !a.failed);
	CHECK_INT_EQ(a.status, 200);
	CHECK(json_is_true(json_object_get(a.json, "ok")));
	json_decref(a.json);
	a = relay("/v1/runs/run-1/messages", "POST",
		  "{\"kind\":\"signal\",\"audience\":\"broadcast\",\"payload\":{\"summary_text\":\"more\"}}");
	CHECK(a.mine && !a.failed && a.status == 200);
	json_decref(a.json);
	status = sidecar_status(sc);
	CHECK_INT_EQ(json_integer_value(json_object_get(status, "iteration")), 2);
	CHECK_INT_EQ(json_integer_value(json_object_get(status, "inbox_version")), 2);
	json_decref(status);
	/* the sidecar's refusal passes through with its status and shape */
	a = relay("/v1/runs/run-1/inbox", "PUT", "{\"iteration\":1,\"entries\":[]}");
	CHECK(a.mine && !a.failed);
	CHECK_INT_EQ(a.status, 400);
	CHECK_STR_EQ(json_string_value(json_object_get(a.json, "code")), "INVALID_PARAMS");
	json_decref(a.json);
	/* an intent from the guest side is drained once */
	{
		char url[TEST_PATH_MAX];
		CURL *curl = curl_easy_init();

		snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/intents", port);
		curl_easy_setopt(curl, CURLOPT_URL, url);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS,
				 "{\"kind\":\"evaluation\",\"audience\":\"leader\",\"payload\":{\"summary_text\":\"ok\"}}");
		curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, fwrite);
		curl_easy_setopt(curl, CURLOPT_WRITEDATA, stderr);
		CHECK(curl_easy_perform(curl) == CURLE_OK);
		curl_easy_cleanup(curl);
	}
	a = relay("/v1/runs/run-1/intents", "GET", NULL);
	CHECK(a.mine && !a.failed && a.status == 200);
	CHECK_INT_EQ(json_array_size(a.json), 1);
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(a.json, 0),
						       "from_candidate_id")), "alpha");
	json_decref(a.json);
	a = relay("/v1/runs/run-1/intents", "GET", NULL);
	CHECK_INT_EQ(json_array_size(a.json), 0);
	json_decref(a.json);

	a = relay("/v1/runs/run-1/intents", "DELETE", NULL);
	CHECK(a.mine && a.failed && a.err.code == DAEMON_ERR_METHOD_NOT_ALLOWED);
	a = relay("/v1/runs/run-2/inbox", "PUT", "{}");
	CHECK(a.mine && a.failed && a.err.code == DAEMON_ERR_NOT_FOUND);
	CHECK(strstr(a.err.message, "no messaging sidecar") != NULL);
	CHECK(!relay("/v1/runs/run-1/other", "GET", NULL).mine);
	CHECK(!relay("/v1/runs/bad id/inbox", "PUT", NULL).mine);
	CHECK(!relay("/v1/health", "GET", NULL).mine);
	sidecar_destroy(sc);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	CHECK(system(path) == 0);
}

/* The "messaging" member of GET /v1/runs/{id}: the live sidecar's members, or none. */
static void test_run_messaging_json(void)
{
	char dir[] = "/tmp/voidbox-daemon-run-json-XXXXXX", path[TEST_PATH_MAX];
	char err[TEST_ERR_MAX], url[TEST_PATH_MAX];
	struct sidecar *sc = NULL;
	uint16_t port_a = 0, port_b = 0;
	json_t *info, *member;

	if (!mkdtemp(dir))
		harness_fail_setup("mkdtemp");
	snprintf(test_daemon.state_dir, sizeof(test_daemon.state_dir), "%s", dir);
	snprintf(path, sizeof(path), "%s/runs", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/runs/run-3", dir);
	mkdir(path, 0700);
	CHECK_INT_EQ(daemon_messaging_control_path(&test_daemon, "run-3", path, sizeof(path)), 0);
	info = daemon_messaging_run_json(&test_daemon, "run-3");
	CHECK(json_is_false(json_object_get(info, "sidecar")));
	CHECK(json_object_get(info, "members") == NULL);
	json_decref(info);
	if (sidecar_create("run-3", &sc) < 0 ||
	    sidecar_add_member(sc, "alpha", MESSAGING_ROLE_CANDIDATE, &port_a, err, sizeof(err)) < 0 ||
	    sidecar_add_member(sc, "boss", MESSAGING_ROLE_LEADER, &port_b, err, sizeof(err)) < 0 ||
	    sidecar_listen_control(sc, path, err, sizeof(err)) < 0)
		harness_fail_setup("cannot start a sidecar");
	info = daemon_messaging_run_json(&test_daemon, "run-3");
	CHECK(json_is_true(json_object_get(info, "sidecar")));
	CHECK_INT_EQ(json_array_size(json_object_get(info, "members")), 2);
	member = json_array_get(json_object_get(info, "members"), 1);
	CHECK_STR_EQ(json_string_value(json_object_get(member, "candidate_id")), "boss");
	CHECK_STR_EQ(json_string_value(json_object_get(member, "role")), "leader");
	snprintf(url, sizeof(url), "http://10.0.2.2:%u", port_b);
	CHECK_STR_EQ(json_string_value(json_object_get(member, "url")), url);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", port_b);
	CHECK_STR_EQ(json_string_value(json_object_get(member, "host_url")), url);
	json_decref(info);
	/* another run of the same daemon has none */
	info = daemon_messaging_run_json(&test_daemon, "run-4");
	CHECK(json_is_false(json_object_get(info, "sidecar")));
	json_decref(info);
	sidecar_destroy(sc);
	info = daemon_messaging_run_json(&test_daemon, "run-3");
	CHECK(json_is_false(json_object_get(info, "sidecar")));
	json_decref(info);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	CHECK(system(path) == 0);
}

static void test_child_env(void)
{
	char **env;
	bool has_id = false, has_control = false, has_path = false;

	char dir[] = "/tmp/voidbox-daemon-env-XXXXXX", expected[TEST_PATH_MAX];
	struct stat st;

	if (!mkdtemp(dir))
		harness_fail_setup("mkdtemp");
	snprintf(test_daemon.state_dir, sizeof(test_daemon.state_dir), "%s", dir);
	snprintf(expected, sizeof(expected), "%s/runs", dir); /* the daemon makes runs/ */
	mkdir(expected, 0700);
	snprintf(expected, sizeof(expected), "VOIDBOX_SIDECAR_CONTROL=%s/runs/run-7/sidecar.sock",
		 dir);
	setenv("VOIDBOX_RUN_ID", "stale", 1);
	env = daemon_messaging_child_env(&test_daemon, "run-7");
	CHECK(env != NULL);
	for (size_t i = 0; env && env[i]; i++) {
		has_id |= strcmp(env[i], "VOIDBOX_RUN_ID=run-7") == 0;
		CHECK(strcmp(env[i], "VOIDBOX_RUN_ID=stale") != 0);
		has_control |= strcmp(env[i], expected) == 0;
		has_path |= strncmp(env[i], "PATH=", 5) == 0;
	}
	CHECK(has_id && has_control && has_path == (getenv("PATH") != NULL));
	daemon_messaging_child_env_free(env);
	unsetenv("VOIDBOX_RUN_ID");
	/* the socket's directory exists before the run starts */
	snprintf(expected, sizeof(expected), "%s/runs/run-7", dir);
	CHECK(stat(expected, &st) == 0 && S_ISDIR(st.st_mode));
	snprintf(expected, sizeof(expected), "rm -rf '%s'", dir);
	CHECK(system(expected) == 0);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	RUN_TEST(test_relay_routes);
	RUN_TEST(test_run_messaging_json);
	RUN_TEST(test_child_env);
	curl_global_cleanup();
	return harness_finish();
}
