/*
 * void-message: the shell's way to the messaging sidecar inside a guest (docs/messaging.md).
 *   void-message context | health | inbox [--since N]
 *   void-message send --kind proposal|signal|evaluation --audience broadcast|leader
 *                     --summary TEXT [--priority high|normal|low]
 * It prints the sidecar's JSON answer on stdout. Exit 0 on a 2xx answer, 1 when the sidecar
 * refused or could not be reached (its error JSON still printed), 2 for a usage error. Flag
 * values are checked here against the same closed sets the sidecar uses, so a typo is named
 * before anything is sent; `send` carries a fresh Idempotency-Key, so a retried send is not
 * delivered twice.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sidecar_client.h"

#define VM_EXIT_OK 0
#define VM_EXIT_FAILED 1
#define VM_EXIT_USAGE 2
#define VM_ERR_MAX 256
#define VM_PATH_MAX 64
#define VM_HTTP_OK_MIN 200
#define VM_HTTP_OK_END 300
#define VM_SINCE_DIGITS_MAX 20 /* the digits of the largest inbox version (a uint64) */

static const char *const vm_kinds[] = { "proposal", "signal", "evaluation", NULL };
static const char *const vm_audiences[] = { "broadcast", "leader", NULL };
static const char *const vm_priorities[] = { "high", "normal", "low", NULL };

static int vm_usage(FILE *out, int code)
{
	fprintf(out,
		"usage: void-message context | health | inbox [--since N]\n"
		"       void-message send --kind proposal|signal|evaluation --audience broadcast|leader\n"
		"                         --summary TEXT [--priority high|normal|low]\n"
		"Talks to the run's messaging sidecar at $" SIDECAR_URL_ENV ".\n");
	return code;
}

static bool vm_one_of(const char *value, const char *const *set)
{
	for (size_t i = 0; value && set[i]; i++)
		if (strcmp(value, set[i]) == 0)
			return true;
	return false;
}

static int vm_call(const char *method, const char *path, const char *body, bool keyed)
{
	const char *url = getenv(SIDECAR_URL_ENV);
	struct sidecar_endpoint ep;
	struct sidecar_reply reply;
	char err[VM_ERR_MAX], key[SIDECAR_CLIENT_KEY_HEX + 1];
	int rc;

	if (sidecar_endpoint_parse(url, &ep) < 0) {
		fprintf(stderr, "void-message: %s must be http://IPV4:PORT (it is %s); messaging is enabled per agent in the spec (agent.messaging.enabled)\n",
			SIDECAR_URL_ENV, url ? url : "unset");
		return VM_EXIT_FAILED;
	}
	if (keyed && sidecar_new_key(key, sizeof(key)) < 0) {
		fprintf(stderr, "void-message: cannot make an Idempotency-Key (getrandom failed)\n");
		return VM_EXIT_FAILED;
	}
	rc = sidecar_call(&ep, method, path, body, keyed ? key : NULL, &reply, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "void-message: %s\n", err);
		return VM_EXIT_FAILED;
	}
	printf("%s\n", reply.body);
	rc = reply.status >= VM_HTTP_OK_MIN && reply.status < VM_HTTP_OK_END ? VM_EXIT_OK
									    : VM_EXIT_FAILED;
	if (rc != VM_EXIT_OK)
		fprintf(stderr, "void-message: the sidecar answered HTTP %d\n", reply.status);
	sidecar_reply_free(&reply);
	return rc;
}

static int vm_inbox(int argc, char **argv)
{
	char path[VM_PATH_MAX] = "/v1/inbox";

	if (argc == 2)
		return vm_call("GET", path, NULL, false);
	if (argc != 4 || strcmp(argv[2], "--since") != 0 || !argv[3][0] ||
	    strspn(argv[3], "0123456789") != strlen(argv[3]) || strlen(argv[3]) > VM_SINCE_DIGITS_MAX) {
		fprintf(stderr, "void-message: inbox takes --since N (a whole number)\n");
		return VM_EXIT_USAGE;
	}
	snprintf(path, sizeof(path), "/v1/inbox?since=%s", argv[3]);
	return vm_call("GET", path, NULL, false);
}

static int vm_send(int argc, char **argv)
{
	const char *kind = NULL, *audience = NULL, *summary = NULL, *priority = "normal";
	json_t *intent;
	char *body;
	int rc;

	for (int i = 2; i < argc; i++) {
		const char **slot = strcmp(argv[i], "--kind") == 0	 ? &kind
				    : strcmp(argv[i], "--audience") == 0 ? &audience
				    : strcmp(argv[i], "--summary") == 0	 ? &summary
				    : strcmp(argv[i], "--priority") == 0 ? &priority
									 : NULL;

		if (!slot || i + 1 >= argc) {
			fprintf(stderr, "void-message: send: unexpected '%s'\n", argv[i]);
			return vm_usage(stderr, VM_EXIT_USAGE);
		}
		*slot = argv[++i];
	}
	if (!vm_one_of(kind, vm_kinds) || !vm_one_of(audience, vm_audiences) || !summary ||
	    !vm_one_of(priority, vm_priorities)) {
		fprintf(stderr, "void-message: send needs --kind proposal|signal|evaluation, --audience broadcast|leader and --summary TEXT; --priority is high, normal or low\n");
		return VM_EXIT_USAGE;
	}
	intent = json_pack("{s:s, s:s, s:{s:s}, s:s}", "kind", kind, "audience", audience,
			   "payload", "summary_text", summary, "priority", priority);
	body = intent ? json_dumps(intent, JSON_COMPACT) : NULL;
	json_decref(intent);
	if (!body) {
		fprintf(stderr, "void-message: the summary is not valid UTF-8 text\n");
		return VM_EXIT_USAGE;
	}
	rc = vm_call("POST", "/v1/intents", body, true);
	free(body);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return vm_usage(stderr, VM_EXIT_USAGE);
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0)
		return vm_usage(stdout, VM_EXIT_OK);
	if (strcmp(argv[1], "context") == 0 && argc == 2)
		return vm_call("GET", "/v1/context", NULL, false);
	if (strcmp(argv[1], "health") == 0 && argc == 2)
		return vm_call("GET", "/v1/health", NULL, false);
	if (strcmp(argv[1], "inbox") == 0)
		return vm_inbox(argc, argv);
	if (strcmp(argv[1], "send") == 0)
		return vm_send(argc, argv);
	fprintf(stderr, "void-message: unknown command '%s'\n", argv[1]);
	return vm_usage(stderr, VM_EXIT_USAGE);
}
