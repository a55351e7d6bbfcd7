/*
 * `voidbox serve` from start to stop. SIGINT and SIGTERM are blocked before any thread
 * exists, so every thread (libmicrohttpd's, each run's) inherits the mask and only the
 * sigwait() here receives them; SIGPIPE is ignored so a client hanging up mid-response is an
 * error on one write, not the end of the daemon. Startup order matters: the store opens and
 * recovers (runs a killed daemon left active are failed) before the socket exists, so no
 * client sees a run in a state no process backs. Shutdown runs the other way: streams are
 * woken, runs are cancelled and reaped, the HTTP server stops, the socket file goes.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/path.h"
#include "daemon/daemon_internal.h"

#define DAEMON_DIR_MODE 0700
#define DAEMON_MS_PER_SEC 1000u
#define DAEMON_NS_PER_MS 1000000u
#define DAEMON_STATE_SUBDIR ".local/state/voidbox"

uint64_t daemon_now_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (uint64_t)now.tv_sec * DAEMON_MS_PER_SEC + (uint64_t)now.tv_nsec / DAEMON_NS_PER_MS;
}

uint64_t daemon_monotonic_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * DAEMON_MS_PER_SEC + (uint64_t)now.tv_nsec / DAEMON_NS_PER_MS;
}


static int daemon_resolve_state_dir(const struct daemon_config *config, char *out, size_t len)
{
	const char *env = config->env ? config->env->state_dir : NULL;
	const char *home = config->env ? config->env->home : NULL;
	int n;

	if (config->state_dir)
		n = snprintf(out, len, "%s", config->state_dir);
	else if (env && env[0])
		n = snprintf(out, len, "%s", env);
	else if (home && home[0] == '/')
		n = snprintf(out, len, "%s/%s", home, DAEMON_STATE_SUBDIR);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* State directory, runs/ below it, and the store, recovered. */
static int daemon_open_state(struct daemon *d, const struct daemon_config *config, char *err,
			     size_t errlen)
{
	char runs_dir[DAEMON_PATH_MAX + 8];
	int rc;

	if (daemon_resolve_state_dir(config, d->state_dir, sizeof(d->state_dir)) < 0) {
		snprintf(err, errlen, "no usable state directory: set VOIDBOX_STATE_DIR (or HOME) to a path under %d bytes",
			 DAEMON_STATE_DIR_MAX);
		return -ENOENT;
	}
	snprintf(runs_dir, sizeof(runs_dir), "%s/runs", d->state_dir);
	rc = path_mkdirs(runs_dir, DAEMON_DIR_MODE);
	if (rc < 0) {
		snprintf(err, errlen, "cannot create the state directory %s: %s", runs_dir,
			 strerror(-rc));
		return rc;
	}
	rc = daemon_store_open(d->state_dir, &d->store, err, errlen);
	if (rc < 0)
		return rc;
	daemon_exec_recover(d);
	return 0;
}

static int daemon_load_token(struct daemon *d, const struct daemon_config *config, char *err,
			     size_t errlen)
{
	char path[DAEMON_PATH_MAX];

	if (config->address.kind != DAEMON_LISTEN_TCP)
		return 0;
	if (config->token_file) {
		snprintf(path, sizeof(path), "%s", config->token_file);
	} else if (daemon_default_token_file(config->env, path, sizeof(path)) < 0) {
		snprintf(err, errlen, "tcp needs a token: pass --token-file FILE");
		return -ENOENT;
	}
	return daemon_token_load(path, d->token, sizeof(d->token), err, errlen);
}

static void daemon_print_address(const struct daemon_config *config, unsigned port)
{
	if (config->address.kind == DAEMON_LISTEN_UNIX)
		printf("voidbox serve: listening on unix://%s\n", config->address.path);
	else
		printf("voidbox serve: listening on tcp://%s:%u\n", config->address.host, port);
	fflush(stdout);
}

int daemon_serve(const struct daemon_config *config, char *err, size_t errlen)
{
	struct daemon d = { .listen_kind = config->address.kind };
	struct MHD_Daemon *mhd = NULL;
	sigset_t stop_signals, previous;
	int listen_fd = -1, port_claim = -1, signal_number, rc;
	unsigned port = 0;

	err[0] = '\0';
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&d.lock, NULL);
	pthread_cond_init(&d.changed, NULL);
	snprintf(d.voidbox_exe, sizeof(d.voidbox_exe), "%s", config->voidbox_exe);
	d.run_log_max_bytes = config->run_log_max_bytes ? config->run_log_max_bytes
							  : DAEMON_RUN_LOG_DEFAULT_BYTES;
	rc = daemon_load_token(&d, config, err, errlen);
	if (rc == 0)
		rc = daemon_open_state(&d, config, err, errlen);
	if (rc < 0)
		goto out;
	listen_fd = daemon_listen_open(&config->address, &port, &port_claim, err, errlen);
	if (listen_fd < 0) {
		rc = listen_fd;
		goto out;
	}
	mhd = daemon_http_start(&d, listen_fd, err, errlen);
	if (!mhd) {
		close(listen_fd);
		rc = -EIO;
		goto out_socket;
	}
	log_info("daemon", "run store %s", daemon_store_path(d.store));
	daemon_print_address(config, port);
	sigwait(&stop_signals, &signal_number);
	log_info("daemon", "signal %d: stopping", signal_number);
	daemon_exec_stop_all(&d);
	daemon_http_stop(mhd);
	rc = 0;
out_socket:
	if (config->address.kind == DAEMON_LISTEN_UNIX)
		unlink(config->address.path);
	if (port_claim >= 0)
		close(port_claim);
out:
	daemon_store_close(d.store);
	pthread_cond_destroy(&d.changed);
	pthread_mutex_destroy(&d.lock);
	pthread_sigmask(SIG_SETMASK, &previous, NULL);
	return rc;
}
