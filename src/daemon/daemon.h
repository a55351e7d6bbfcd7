/*
 * `voidbox serve`: the run daemon. One process owns an HTTP/1.1 API (libmicrohttpd) on a
 * per-user unix socket or on TCP with a bearer token, a SQLite run store that survives
 * restarts, and one child process per run (`voidbox run --events-fd`) so cancelling a run is
 * signalling a process group and its VMs die with it. docs/daemon.md describes the API, the
 * store schema and the lifecycle; this header is the one entry point the CLI calls.
 */
#ifndef VOIDBOX_DAEMON_DAEMON_H
#define VOIDBOX_DAEMON_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum daemon_listen_kind {
	DAEMON_LISTEN_UNIX,
	DAEMON_LISTEN_TCP,
};

/* Where the daemon listens (parsed from unix://PATH or tcp://HOST:PORT). */
struct daemon_address {
	enum daemon_listen_kind kind;
	char path[108]; /* unix: the socket path (sun_path's size) */
	char host[256]; /* tcp: a numeric IPv4 address or a name */
	unsigned port;  /* tcp: 0 picks a free port, printed at startup */
};

/*
 * The environment's part in the daemon's default paths. The CLI reads the variables
 * (cli_daemon_env) and passes this in; nothing in src/daemon reads the environment. A NULL
 * pointer or field is unset.
 */
struct daemon_env {
	const char *runtime_dir; /* $XDG_RUNTIME_DIR: the default socket's directory */
	const char *config_home; /* $XDG_CONFIG_HOME: the default token file's */
	const char *home;	 /* $HOME: for ~/.config and ~/.local/state */
	const char *state_dir;	 /* $VOIDBOX_STATE_DIR */
};

struct daemon_config {
	struct daemon_address address;
	const struct daemon_env *env; /* NULL: every variable unset */
	const char *token_file; /* tcp only; NULL: the default path (docs/daemon.md) */
	const char *state_dir;  /* NULL: env->state_dir or ~/.local/state/voidbox */
	const char *voidbox_exe; /* the binary that runs each run (normally /proc/self/exe) */
	uint64_t run_log_max_bytes; /* what one run's log lines may take in the store; 0: default */
};

/*
 * Parses unix://PATH, tcp://HOST:PORT or NULL (the default socket, from env) into out. 0, or
 * -EINVAL with err saying what the form should be.
 */
int daemon_address_parse(const char *text, const struct daemon_env *env,
			 struct daemon_address *out, char *err, size_t errlen);

/* The default per-user socket: $XDG_RUNTIME_DIR/voidbox.sock, else /tmp/voidbox-$UID.sock. */
void daemon_default_socket(const struct daemon_env *env, char *out, size_t out_len);

/*
 * The token file used when --token-file is not given: $XDG_CONFIG_HOME/voidbox/daemon-token,
 * else ~/.config/voidbox/daemon-token; -ENOENT without either variable.
 */
int daemon_default_token_file(const struct daemon_env *env, char *out, size_t out_len);

/*
 * Serves until SIGINT or SIGTERM. Prints "voidbox serve: listening on ADDRESS" on stdout once
 * the socket accepts connections. Returns 0 after a clean stop, negative errno with err set
 * when the daemon could not start.
 */
int daemon_serve(const struct daemon_config *config, char *err, size_t errlen);

/*
 * Output text as a JSON string for run events: bytes that are not UTF-8 (or a character cut
 * at a chunk's edge) become '?', so a line is never dropped for its encoding. NULL only when
 * out of memory. `voidbox run --events-fd` and the daemon both use it.
 */
json_t *daemon_text_json(const char *data, size_t len);

/*
 * What `voidbox run --events-fd` keeps of an output in its stage.finished, stage.output_ready
 * and run.finished lines; the daemon's error for a cut report quotes it.
 */
#define DAEMON_EVENT_OUTPUT_MAX (1024u * 1024u)

#endif
