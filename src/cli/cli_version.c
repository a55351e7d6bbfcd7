/*
 * `voidbox version`: the release and the wire protocol version, the two numbers a bug report
 * needs.
 */
#include <stdio.h>

#include "cli/cli.h"
#include "proto/protocol.h"

#ifndef VOIDBOX_VERSION
#define VOIDBOX_VERSION "unknown"
#endif

int cli_version_run(const struct cli_globals *globals, int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: voidbox version\n\nPrints the voidbox version and protocol version.\n");
		return CLI_EXIT_OK;
	}
	if (globals->output == CLI_OUTPUT_JSON)
		printf("{\"version\":\"%s\",\"protocol_version\":%u}\n", VOIDBOX_VERSION,
		       PROTO_VERSION);
	else
		printf("voidbox %s (protocol v%u)\n", VOIDBOX_VERSION, PROTO_VERSION);
	return CLI_EXIT_OK;
}
