/*
 * The runners' side of messaging (see messaging_run.h): a thin owner of the sidecar plus the
 * two guest configuration files. The MCP entry starts void-mcp over stdio, the transport the
 * agent itself spawns and owns, so no server has to be left running in the guest.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/log.h"
#include "messaging/sidecar.h"
#include "runtime/messaging_run.h"

#define RUN_MESSAGING_MCP_KEY "mcpServers"

struct run_messaging {
	struct sidecar *sc;
};

int run_messaging_open(const char *spec_name, const struct run_messaging_options *options,
		       struct run_messaging **out, char *err, size_t errlen)
{
	const char *run_id = options && options->run_id ? options->run_id : spec_name;
	struct run_messaging *rm = calloc(1, sizeof(*rm));
	int rc;

	*out = NULL;
	if (!rm)
		return -ENOMEM;
	rc = sidecar_create(run_id ? run_id : "run", &rm->sc);
	if (rc < 0) {
		snprintf(err, errlen, "cannot start the messaging sidecar: %s (a run id is at most %u characters)",
			 strerror(-rc), SIDECAR_RUN_ID_MAX);
		free(rm);
		return rc;
	}
	/* without its control socket the run's agents still talk; only the host cannot steer */
	if (options && options->control_path &&
	    sidecar_listen_control(rm->sc, options->control_path, err, errlen) < 0)
		log_warn("messaging", "%s; the daemon's inbox and intents routes will answer 404 for this run",
			 err);
	*out = rm;
	return 0;
}

int run_messaging_join(struct run_messaging *rm, const char *name,
		       struct run_messaging_member *out, char *err, size_t errlen)
{
	uint16_t port;
	int rc = sidecar_add_member(rm->sc, name, MESSAGING_ROLE_CANDIDATE, &port, err, errlen);

	if (rc < 0)
		return rc;
	out->host_port = port;
	snprintf(out->url, sizeof(out->url), "http://%s:%u", RUN_MESSAGING_GUEST_HOST, port);
	log_info("messaging", "[agent:%s] messaging sidecar on 127.0.0.1:%u (%s in the guest)", name,
		 port, out->url);
	return 0;
}

void run_messaging_advance(struct run_messaging *rm)
{
	if (rm)
		sidecar_advance(rm->sc);
}

void run_messaging_close(struct run_messaging *rm)
{
	if (!rm)
		return;
	sidecar_destroy(rm->sc);
	free(rm);
}

char *run_messaging_mcp_json(const char *existing, const char *url)
{
	json_t *doc = existing ? json_loads(existing, 0, NULL) : json_object();
	json_t *servers;
	char *text = NULL;

	if (!json_is_object(doc))
		goto out;
	servers = json_object_get(doc, RUN_MESSAGING_MCP_KEY);
	if (!servers) {
		servers = json_object();
		if (json_object_set_new(doc, RUN_MESSAGING_MCP_KEY, servers) < 0)
			goto out;
	}
	if (!json_is_object(servers) ||
	    json_object_set_new(servers, RUN_MESSAGING_MCP_NAME,
				json_pack("{s:s, s:s, s:[], s:{s:s}}", "type", "stdio", "command",
					  RUN_MESSAGING_MCP_PROGRAM, "args", "env",
					  RUN_MESSAGING_URL_ENV, url)) < 0)
		goto out;
	text = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
out:
	json_decref(doc);
	return text;
}

char *run_messaging_codex_toml(const char *url)
{
	char *text = NULL;

	/* url is http://10.0.2.2:PORT, built by run_messaging_join: nothing to escape */
	if (asprintf(&text,
		     "[mcp_servers.%s]\ncommand = \"%s\"\nargs = []\nenv = { %s = \"%s\" }\n",
		     RUN_MESSAGING_MCP_NAME, RUN_MESSAGING_MCP_PROGRAM, RUN_MESSAGING_URL_ENV,
		     url) < 0)
		return NULL;
	return text;
}
