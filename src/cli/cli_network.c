/*
 * The networking flags that exec, shell, fork and snapshot create share: --network turns the
 * virtio-net device on, and --publish, --allow, --deny, --dns-server, --no-dns, --max-flows
 * and --max-conn-rate shape it. Each command adds CLI_NETWORK_LONG_OPTIONS to its getopt
 * table and hands unknown option ids to cli_network_option first, so the flags parse and
 * read the same everywhere. The policy flags need --network: a sandbox is never networked by
 * accident of a stray --allow.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "devices/net.h"
#include "sandbox/sandbox.h"

#define CLI_NETWORK_MAX_CAP 1000000ul

void cli_network_init(struct cli_network *net)
{
	memset(net, 0, sizeof(*net));
	net_policy_init_default(&net->config.policy);
	net->initialized = true;
}

static int cli_network_cidr(const char *command, const char *flag, const char *arg,
			    struct net_policy *policy, bool allow)
{
	struct net_cidr cidr;
	int rc = net_cidr_parse(arg, &cidr);

	if (rc < 0) {
		fprintf(stderr, "voidbox %s: %s takes an IPv4 CIDR such as 127.0.0.1/32, not '%s'\n",
			command, flag, arg);
		return -1;
	}
	rc = allow ? net_policy_add_allow(policy, &cidr) : net_policy_add_deny(policy, &cidr);
	if (rc < 0) {
		fprintf(stderr, "voidbox %s: at most %d %s entries\n", command, NET_MAX_CIDRS, flag);
		return -1;
	}
	return 0;
}

static int cli_network_cap(const char *command, const char *flag, const char *arg,
			   uint32_t *out)
{
	char *end = NULL;
	unsigned long value = strtoul(arg, &end, 10);

	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || value == 0 ||
	    value > CLI_NETWORK_MAX_CAP) {
		fprintf(stderr, "voidbox %s: %s takes a whole number from 1 to %lu, not '%s'\n",
			command, flag, CLI_NETWORK_MAX_CAP, arg);
		return -1;
	}
	*out = (uint32_t)value;
	return 0;
}

int cli_network_option(struct cli_network *net, const char *command, int option,
		       const char *arg)
{
	struct net_config *cfg = &net->config;

	if (option < CLI_NETWORK_OPT_FIRST || option > CLI_NETWORK_OPT_LAST)
		return 0;
	if (!net->initialized)
		cli_network_init(net);
	if (option != CLI_NETWORK_OPT_NETWORK)
		net->policy_flag = true;
	switch (option) {
	case CLI_NETWORK_OPT_NETWORK:
		net->enabled = true;
		return 1;
	case CLI_NETWORK_OPT_PUBLISH:
		if (cfg->publish_count >= NET_MAX_PUBLISH) {
			fprintf(stderr, "voidbox %s: at most %d --publish\n", command,
				NET_MAX_PUBLISH);
			return -1;
		}
		if (net_publish_parse(arg, &cfg->publish[cfg->publish_count]) < 0) {
			fprintf(stderr, "voidbox %s: --publish takes HOST_PORT:GUEST_PORT, not '%s'\n",
				command, arg);
			return -1;
		}
		cfg->publish_count++;
		return 1;
	case CLI_NETWORK_OPT_ALLOW:
		return cli_network_cidr(command, "--allow", arg, &cfg->policy, true) < 0 ? -1 : 1;
	case CLI_NETWORK_OPT_DENY:
		return cli_network_cidr(command, "--deny", arg, &cfg->policy, false) < 0 ? -1 : 1;
	case CLI_NETWORK_OPT_DNS_SERVER:
		if (net_dns_server_parse(arg, &cfg->dns_server_addr, &cfg->dns_server_port) < 0) {
			fprintf(stderr, "voidbox %s: --dns-server takes ADDR:PORT such as "
				"127.0.0.1:5353, not '%s'\n", command, arg);
			return -1;
		}
		return 1;
	case CLI_NETWORK_OPT_NO_DNS:
		cfg->policy.dns = false;
		return 1;
	case CLI_NETWORK_OPT_MAX_FLOWS:
		return cli_network_cap(command, "--max-flows", arg, &cfg->policy.max_flows) < 0
			       ? -1 : 1;
	case CLI_NETWORK_OPT_MAX_CONN_RATE:
		return cli_network_cap(command, "--max-conn-rate", arg,
				       &cfg->policy.max_new_per_sec) < 0 ? -1 : 1;
	default:
		return 0;
	}
}

int cli_network_finish(struct cli_network *net, const char *command,
		       struct sandbox_config *cfg)
{
	if (net->policy_flag && !net->enabled) {
		fprintf(stderr, "voidbox %s: network flags need --network (networking is off by "
			"default)\n", command);
		return -1;
	}
	if (net->enabled)
		cfg->network = &net->config;
	return 0;
}

void cli_network_usage(FILE *out)
{
	fprintf(out,
		"  --network          give the guest user-mode networking (eth0 10.0.2.15; the host's\n"
		"                     127.0.0.1 is 10.0.2.2, DNS 10.0.2.3); off by default\n"
		"  --publish H:G      forward the host's 127.0.0.1:H to the guest's TCP port G\n"
		"  --allow CIDR       allow only these destinations (repeatable); 10.0.2.2 counts\n"
		"                     as 127.0.0.1\n"
		"  --deny CIDR        refuse these destinations too (169.254.0.0/16 always is)\n"
		"  --dns-server A:P   answer the guest's DNS from this server instead of the host's\n"
		"  --no-dns           no DNS forwarding at 10.0.2.3\n"
		"  --max-flows N      cap on concurrent connections and UDP flows (default %u)\n"
		"  --max-conn-rate N  cap on new connections per second (default %u)\n",
		NET_DEFAULT_MAX_FLOWS, NET_DEFAULT_MAX_NEW_PER_SEC);
}
