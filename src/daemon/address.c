/*
 * Daemon addresses, shared by the daemon and its clients: unix://PATH and tcp://HOST:PORT
 * parsed into struct daemon_address, the default per-user socket and the default token file.
 * Kept apart from listen.c so a client links the parsing without the server's sockets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/daemon.h"

#define ADDRESS_PORT_MAX 65535ul
#define ADDRESS_DECIMAL 10
#define ADDRESS_UNIX_PREFIX "unix://"
#define ADDRESS_TCP_PREFIX "tcp://"
#define ADDRESS_DEFAULT_SOCKET_NAME "voidbox.sock"
#define ADDRESS_TOKEN_NAME "daemon-token"

static const struct daemon_env address_no_env;

void daemon_default_socket(const struct daemon_env *env, char *out, size_t out_len)
{
	const char *runtime_dir = (env ? env : &address_no_env)->runtime_dir;

	if (runtime_dir && runtime_dir[0] == '/')
		snprintf(out, out_len, "%s/%s", runtime_dir, ADDRESS_DEFAULT_SOCKET_NAME);
	else
		snprintf(out, out_len, "/tmp/voidbox-%u.sock", (unsigned)getuid());
}

int daemon_default_token_file(const struct daemon_env *env, char *out, size_t out_len)
{
	const char *config = (env ? env : &address_no_env)->config_home;
	const char *home = (env ? env : &address_no_env)->home;

	if (config && config[0] == '/')
		snprintf(out, out_len, "%s/voidbox/%s", config, ADDRESS_TOKEN_NAME);
	else if (home && home[0] == '/')
		snprintf(out, out_len, "%s/.config/voidbox/%s", home, ADDRESS_TOKEN_NAME);
	else
		return -ENOENT;
	return 0;
}

static int address_parse_tcp(const char *text, struct daemon_address *out, char *err,
			    size_t errlen)
{
	const char *colon = strrchr(text, ':');
	unsigned long port;
	char *end;

	if (!colon || colon == text || (size_t)(colon - text) >= sizeof(out->host)) {
		snprintf(err, errlen, "--listen tcp://HOST:PORT needs a host and a port, not 'tcp://%s'",
			 text);
		return -EINVAL;
	}
	errno = 0;
	port = strtoul(colon + 1, &end, ADDRESS_DECIMAL);
	if (errno || end == colon + 1 || *end || port > ADDRESS_PORT_MAX) {
		snprintf(err, errlen, "--listen tcp://HOST:PORT takes a port from 0 to %lu, not '%s'",
			 ADDRESS_PORT_MAX, colon + 1);
		return -EINVAL;
	}
	out->kind = DAEMON_LISTEN_TCP;
	memcpy(out->host, text, (size_t)(colon - text));
	out->host[colon - text] = '\0';
	out->port = (unsigned)port;
	return 0;
}

int daemon_address_parse(const char *text, const struct daemon_env *env,
			 struct daemon_address *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (!text) {
		out->kind = DAEMON_LISTEN_UNIX;
		daemon_default_socket(env, out->path, sizeof(out->path));
		return 0;
	}
	if (strncmp(text, ADDRESS_UNIX_PREFIX, strlen(ADDRESS_UNIX_PREFIX)) == 0) {
		const char *path = text + strlen(ADDRESS_UNIX_PREFIX);

		if (path[0] != '/' || strlen(path) >= sizeof(out->path)) {
			snprintf(err, errlen, "unix://PATH needs an absolute path shorter than %zu bytes, not '%s'",
				 sizeof(out->path), path);
			return -EINVAL;
		}
		out->kind = DAEMON_LISTEN_UNIX;
		snprintf(out->path, sizeof(out->path), "%s", path);
		return 0;
	}
	if (strncmp(text, ADDRESS_TCP_PREFIX, strlen(ADDRESS_TCP_PREFIX)) == 0)
		return address_parse_tcp(text + strlen(ADDRESS_TCP_PREFIX), out, err, errlen);
	snprintf(err, errlen, "an address is unix:///PATH or tcp://HOST:PORT, not '%s'", text);
	return -EINVAL;
}
