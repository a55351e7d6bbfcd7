/*
 * The daemon's side of messaging (docs/messaging.md): a run the daemon starts gets its run id
 * and a control socket path in its environment (VOIDBOX_RUN_ID, VOIDBOX_SIDECAR_CONTROL), and
 * three routes forward to that socket, where the run's own process serves its sidecar:
 *   PUT  /v1/runs/{id}/inbox     loads an inbox        -> PUT  /v1/inbox
 *   POST /v1/runs/{id}/messages  appends one message   -> POST /v1/messages
 *   GET  /v1/runs/{id}/intents   drains the intents    -> POST /v1/intents/drain
 * The sidecar lives in the run's process because that is where the VMs are; the daemon only
 * relays, so a run without messaging (or no longer running) answers 404 from the socket's
 * absence. The sidecar's answers already have the daemon's error shape and pass through.
 * GET /v1/runs/{id} asks the same socket's GET /v1/status whether there is a sidecar and
 * which members it serves, with the URL each member's guest uses. libcurl is opened by the
 * first relayed request (src/dynlib/curl_dl.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/log.h"
#include "daemon/daemon_internal.h"
#include "dynlib/curl_dl.h"
#include "runtime/messaging_run.h"

#define MESSAGING_RUNS_PREFIX "/v1/runs/"
#define MESSAGING_CONTROL_NAME "sidecar.sock"
#define MESSAGING_RUN_ID_ENV "VOIDBOX_RUN_ID"
#define MESSAGING_CONTROL_ENV "VOIDBOX_SIDECAR_CONTROL"
#define MESSAGING_CHILD_ENV_EXTRA 2
#define MESSAGING_URL_MAX 64
#define MESSAGING_TIMEOUT_SECS 10L
#define MESSAGING_ANSWER_MAX (4u * 1024u * 1024u)
#define MESSAGING_RUN_DIR_MODE 0700
#define MESSAGING_HOST_LOOPBACK "127.0.0.1"
#define MESSAGING_RELAY_PURPOSE "the daemon's messaging relay"

/* The sidecar's answer as it arrives, at most MESSAGING_ANSWER_MAX bytes. */
struct messaging_answer {
	char *data;
	size_t len;
};

/* One relayed route: the daemon's tail and method, and the sidecar's control route. */
struct messaging_relay {
	const char *tail;
	const char *method;
	const char *control_method;
	const char *control_path;
};

static const struct messaging_relay messaging_relays[] = {
	{ "inbox", MHD_HTTP_METHOD_PUT, MHD_HTTP_METHOD_PUT, "/v1/inbox" },
	{ "messages", MHD_HTTP_METHOD_POST, MHD_HTTP_METHOD_POST, "/v1/messages" },
	{ "intents", MHD_HTTP_METHOD_GET, MHD_HTTP_METHOD_POST, "/v1/intents/drain" },
};

/* Not a daemon route: GET /v1/runs/{id} asks this of the control socket. */
static const struct messaging_relay messaging_status_relay = {
	NULL, MHD_HTTP_METHOD_GET, MHD_HTTP_METHOD_GET, "/v1/status"
};

int daemon_messaging_control_path(const struct daemon *d, const char *run_id, char *out,
				  size_t len)
{
	int n = snprintf(out, len, "%s/runs/%s/" MESSAGING_CONTROL_NAME, d->state_dir, run_id);

	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

char **daemon_messaging_child_env(const struct daemon *d, const char *run_id)
{
	char path[DAEMON_PATH_MAX];
	size_t count = 0, at = 0;
	char **env;

	while (environ[count])
		count++;
	env = calloc(count + MESSAGING_CHILD_ENV_EXTRA + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < count; i++)
		if (strncmp(environ[i], MESSAGING_RUN_ID_ENV "=", strlen(MESSAGING_RUN_ID_ENV) + 1) &&
		    strncmp(environ[i], MESSAGING_CONTROL_ENV "=", strlen(MESSAGING_CONTROL_ENV) + 1))
			env[at++] = environ[i];
	if (asprintf(&env[at], MESSAGING_RUN_ID_ENV "=%s", run_id) < 0) {
		free(env);
		return NULL;
	}
	at++;
	/* the run's directory holds the socket; an inline spec or input may have made it */
	snprintf(path, sizeof(path), "%s/runs/%s", d->state_dir, run_id);
	if (mkdir(path, MESSAGING_RUN_DIR_MODE) < 0 && errno != EEXIST)
		log_warn("daemon", "run %s: cannot create %s: %s", run_id, path, strerror(errno));
	if (daemon_messaging_control_path(d, run_id, path, sizeof(path)) == 0 &&
	    asprintf(&env[at], MESSAGING_CONTROL_ENV "=%s", path) >= 0)
		at++;
	else
		log_warn("daemon", "run %s: the state directory's path is too long for the messaging control socket; its inbox and intents routes will answer 404",
			 run_id);
	env[at] = NULL;
	return env;
}

void daemon_messaging_child_env_free(char **env)
{
	size_t count = 0;

	if (!env)
		return;
	while (environ[count])
		count++;
	/* the strings after the inherited ones are this file's */
	for (size_t i = 0; env[i]; i++) {
		bool inherited = false;

		for (size_t j = 0; j < count && !inherited; j++)
			inherited = env[i] == environ[j];
		if (!inherited)
			free(env[i]);
	}
	free(env);
}

static size_t messaging_collect(char *data, size_t size, size_t nmemb, void *opaque)
{
	struct messaging_answer *out = opaque;
	size_t n = size * nmemb;
	char *grown;

	if (out->len + n > MESSAGING_ANSWER_MAX)
		return 0;
	grown = realloc(out->data, out->len + n + 1);
	if (!grown)
		return 0;
	memcpy(grown + out->len, data, n);
	out->data = grown;
	out->len += n;
	out->data[out->len] = '\0';
	return n;
}

/* Sends the request to the run's control socket; 0 with *status and *answer, or -1 with err. */
static int messaging_forward(const char *socket_path, const struct messaging_relay *relay,
			     const char *body, size_t len, unsigned *status, json_t **answer,
			     struct daemon_error *err)
{
	struct messaging_answer collected = { 0 };
	struct curl_slist *headers;
	char url[MESSAGING_URL_MAX], why[DAEMON_ERROR_MESSAGE_MAX];
	CURL *curl;
	long code = 0;
	CURLcode rc;

	if (curl_dl_load(MESSAGING_RELAY_PURPOSE, why, sizeof(why)) < 0)
		return daemon_error_set(err, DAEMON_ERR_INTERNAL_ERROR, "%s", why);
	headers = curl_dl.slist_append(NULL, "Content-Type: application/json");
	curl = curl_dl.easy_init();
	if (!curl || !headers) {
		curl_dl.slist_free_all(headers);
		if (curl)
			curl_dl.easy_cleanup(curl);
		return daemon_error_set(err, DAEMON_ERR_INTERNAL_ERROR, "out of memory");
	}
	snprintf(url, sizeof(url), "http://localhost%s", relay->control_path);
	curl_dl.easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path);
	curl_dl.easy_setopt(curl, CURLOPT_URL, url);
	curl_dl.easy_setopt(curl, CURLOPT_CUSTOMREQUEST, relay->control_method);
	curl_dl.easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_dl.easy_setopt(curl, CURLOPT_POSTFIELDS, body ? body : "");
	curl_dl.easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)(body ? len : 0));
	curl_dl.easy_setopt(curl, CURLOPT_TIMEOUT, MESSAGING_TIMEOUT_SECS);
	curl_dl.easy_setopt(curl, CURLOPT_WRITEFUNCTION, messaging_collect);
	curl_dl.easy_setopt(curl, CURLOPT_WRITEDATA, &collected);
	rc = curl_dl.easy_perform(curl);
	if (rc == CURLE_OK)
		curl_dl.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
	curl_dl.slist_free_all(headers);
	curl_dl.easy_cleanup(curl);
	*answer = collected.data ? json_loadb(collected.data, collected.len, 0, NULL) : NULL;
	free(collected.data);
	if (rc == CURLE_COULDNT_CONNECT)
		return daemon_error_set(err, DAEMON_ERR_NOT_FOUND,
					"this run has no messaging sidecar: it is not running, or no agent in it has messaging enabled");
	if (rc != CURLE_OK || !*answer) {
		json_decref(*answer);
		*answer = NULL;
		return daemon_error_set(err, DAEMON_ERR_INTERNAL_ERROR,
					"the run's messaging sidecar gave no answer: %s",
					curl_dl.easy_strerror(rc));
	}
	*status = (unsigned)code;
	return 0;
}

/* One member of the sidecar's status, with the URLs its guest and the host reach it at. */
static json_t *messaging_member_json(json_t *member)
{
	json_int_t port = json_integer_value(json_object_get(member, "port"));
	const char *id = json_string_value(json_object_get(member, "candidate_id"));
	const char *role = json_string_value(json_object_get(member, "role"));
	char *url = NULL, *host_url = NULL;
	json_t *out = NULL;

	if (!id || !role || port <= 0 || port > UINT16_MAX)
		return NULL;
	if (asprintf(&url, "http://" RUN_MESSAGING_GUEST_HOST ":%lld", (long long)port) >= 0 &&
	    asprintf(&host_url, "http://" MESSAGING_HOST_LOOPBACK ":%lld", (long long)port) >= 0)
		out = json_pack("{s:s, s:s, s:I, s:s, s:s}", "candidate_id", id, "role", role,
				"port", port, "url", url, "host_url", host_url);
	free(url);
	free(host_url);
	return out;
}

json_t *daemon_messaging_run_json(const struct daemon *d, const char *run_id)
{
	char path[DAEMON_PATH_MAX];
	struct daemon_error err;
	json_t *status = NULL, *members, *member;
	unsigned code = 0;
	size_t i;

	if (daemon_messaging_control_path(d, run_id, path, sizeof(path)) < 0 ||
	    access(path, F_OK) < 0 ||
	    messaging_forward(path, &messaging_status_relay, NULL, 0, &code, &status, &err) < 0 ||
	    code != MHD_HTTP_OK || !json_is_array(json_object_get(status, "members"))) {
		json_decref(status);
		return json_pack("{s:b}", "sidecar", false);
	}
	members = json_array();
	json_array_foreach(json_object_get(status, "members"), i, member) {
		json_t *entry = messaging_member_json(member);

		if (entry && members)
			json_array_append_new(members, entry);
		else
			json_decref(entry);
	}
	json_decref(status);
	return members ? json_pack("{s:b, s:o}", "sidecar", true, "members", members) : NULL;
}

bool daemon_messaging_route(struct daemon *d, const char *url, const char *method,
			    const char *body, size_t len, unsigned *status, json_t **answer,
			    struct daemon_error *err, bool *failed)
{
	char run_id[DAEMON_RUN_ID_MAX + 1], path[DAEMON_PATH_MAX];
	const char *rest, *slash;
	size_t id_len;

	*failed = false;
	if (strncmp(url, MESSAGING_RUNS_PREFIX, strlen(MESSAGING_RUNS_PREFIX)) != 0)
		return false;
	rest = url + strlen(MESSAGING_RUNS_PREFIX);
	slash = strchr(rest, '/');
	id_len = slash ? (size_t)(slash - rest) : 0;
	if (!slash || id_len == 0 || id_len > DAEMON_RUN_ID_MAX)
		return false;
	memcpy(run_id, rest, id_len);
	run_id[id_len] = '\0';
	if (!daemon_name_valid(run_id, DAEMON_RUN_ID_MAX))
		return false;
	for (size_t i = 0; i < sizeof(messaging_relays) / sizeof(messaging_relays[0]); i++) {
		const struct messaging_relay *relay = &messaging_relays[i];

		if (strcmp(slash + 1, relay->tail) != 0)
			continue;
		*failed = true;
		if (strcmp(method, relay->method) != 0) {
			daemon_error_set(err, DAEMON_ERR_METHOD_NOT_ALLOWED,
					 "use %s for /v1/runs/{id}/%s (docs/messaging.md)",
					 relay->method, relay->tail);
			return true;
		}
		if (daemon_messaging_control_path(d, run_id, path, sizeof(path)) < 0) {
			daemon_error_set(err, DAEMON_ERR_NOT_FOUND,
					 "this run has no messaging control socket (the state directory's path is too long)");
			return true;
		}
		*failed = messaging_forward(path, relay, body, len, status, answer, err) < 0;
		return true;
	}
	return false;
}
