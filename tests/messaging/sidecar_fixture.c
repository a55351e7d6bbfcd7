/*
 * A sidecar for tests that drive it from another program (the MCP SDK test): two members,
 * alpha (a candidate) and boss (the leader), and a control socket in a fresh temporary
 * directory. It prints one JSON line {"alpha": PORT, "boss": PORT, "control": PATH} and serves
 * until its stdin closes, so the driving test cannot leave it running.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "messaging/sidecar.h"

#define FIXTURE_ERR_MAX 256
#define FIXTURE_PATH_MAX 256

int main(void)
{
	char dir[] = "/tmp/voidbox-sidecar-fixture-XXXXXX", path[FIXTURE_PATH_MAX];
	char err[FIXTURE_ERR_MAX] = "";
	struct sidecar *sc = NULL;
	uint16_t alpha, boss;
	char byte;

	if (!mkdtemp(dir) || sidecar_create("run-mcp-sdk", &sc) < 0 ||
	    sidecar_add_member(sc, "alpha", MESSAGING_ROLE_CANDIDATE, &alpha, err, sizeof(err)) < 0 ||
	    sidecar_add_member(sc, "boss", MESSAGING_ROLE_LEADER, &boss, err, sizeof(err)) < 0) {
		fprintf(stderr, "sidecar_fixture: cannot start: %s\n", err);
		return EXIT_FAILURE;
	}
	snprintf(path, sizeof(path), "%s/control.sock", dir);
	if (sidecar_listen_control(sc, path, err, sizeof(err)) < 0) {
		fprintf(stderr, "sidecar_fixture: %s\n", err);
		return EXIT_FAILURE;
	}
	printf("{\"alpha\": %u, \"boss\": %u, \"control\": \"%s\"}\n", alpha, boss, path);
	fflush(stdout);
	while (read(STDIN_FILENO, &byte, 1) > 0)
		;
	sidecar_destroy(sc);
	rmdir(dir);
	return EXIT_SUCCESS;
}
