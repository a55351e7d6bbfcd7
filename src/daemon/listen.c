/*
 * The daemon's sockets and its token. The daemon makes the listening socket itself and hands
 * it to libmicrohttpd (MHD_OPTION_LISTEN_SOCKET), because a unix socket needs what the
 * library does not do: a per-user path, mode 0600 from the moment it exists (bound under a
 * umask of 0177), and a stale socket from a crashed daemon replaced while a live one is
 * refused. A TCP listener gets a bearer token instead, read from a 0600 file or created in
 * one with 32 random bytes (written beside it and linked into place, so it appears whole or
 * not at all); a token file others may read is refused, not trusted.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "common/log.h"
#include "common/loopback_claim.h"
#include "daemon/daemon_internal.h"

#define LISTEN_BACKLOG 64
#define LISTEN_SOCKET_UMASK 0177
#define LISTEN_SOCKET_MODE 0600
#define LISTEN_DIR_MODE 0700
#define LISTEN_PORT_TEXT_MAX 8
#define LISTEN_TOKEN_BYTES 32
#define LISTEN_PERMISSION_BITS 0777
#define LISTEN_TOKEN_TMP_SUFFIX ".tmp-" /* then the creating process's id */

/* A socket file nobody answers on is stale; one that accepts a connection is a live daemon. */
static int listen_replace_stale(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;
	int probe, rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "%s exists and is not a socket; remove it or pick another --listen path",
			 path);
		return -EEXIST;
	}
	probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe < 0)
		return -errno;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	rc = connect(probe, (struct sockaddr *)&addr, sizeof(addr));
	close(probe);
	if (rc == 0) {
		snprintf(err, errlen, "a daemon already listens on %s; stop it first or pick another --listen path",
			 path);
		return -EADDRINUSE;
	}
	return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

static int listen_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	mode_t old_mask;
	int fd, rc;

	rc = listen_replace_stale(path, err, errlen);
	if (rc < 0) {
		if (!err[0])
			snprintf(err, errlen, "cannot replace the stale socket %s: %s", path,
				 strerror(-rc));
		return rc;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	old_mask = umask(LISTEN_SOCKET_UMASK);
	rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old_mask);
	if (rc < 0 || chmod(path, LISTEN_SOCKET_MODE) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot listen on %s: %s (is its directory writable?)", path,
			 strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

/*
 * A listener that takes connections on the host's 127.0.0.1 claims its port
 * (common/loopback_claim.h) before it listens, so no sandbox's guest reaches the API through
 * its gateway 10.0.2.2. The claim's descriptor, or -1: not on 127.0.0.1, or the claim failed
 * (warned: the token still guards every route).
 */
static int listen_claim(const struct sockaddr_in *bound)
{
	uint32_t addr = ntohl(bound->sin_addr.s_addr);
	int claim;

	if (addr != INADDR_LOOPBACK && addr != INADDR_ANY)
		return -1; /* guests reach no such address through their gateway */
	if (addr == INADDR_ANY)
		log_warn("daemon", "listening on every address: guests reach the API through the host's other addresses unless their allow or deny lists keep them off those");
	claim = loopback_claim_port(ntohs(bound->sin_port));
	if (claim < 0)
		log_warn("daemon", "cannot claim 127.0.0.1:%u against sandboxes' guests (%s): a guest with a network may reach the API (it still needs the token)",
			 ntohs(bound->sin_port), strerror(-claim));
	return claim;
}

static int listen_tcp(const struct daemon_address *address, unsigned *bound_port, int *claim,
		      char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct sockaddr_in bound;
	socklen_t bound_len = sizeof(bound);
	struct addrinfo *found = NULL;
	char port[LISTEN_PORT_TEXT_MAX];
	int fd = -1, one = 1, rc;

	snprintf(port, sizeof(port), "%u", address->port);
	rc = getaddrinfo(address->host, port, &hints, &found);
	if (rc != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s (give an IPv4 address)", address->host,
			 gai_strerror(rc));
		return -EINVAL;
	}
	fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
	rc = 0;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, found->ai_addr, found->ai_addrlen) < 0 ||
	    getsockname(fd, (struct sockaddr *)&bound, &bound_len) < 0)
		rc = -errno;
	if (rc == 0) {
		/* claimed before it listens: no guest's connection is ever accepted unclaimed */
		*claim = listen_claim(&bound);
		if (listen(fd, LISTEN_BACKLOG) < 0)
			rc = -errno;
	}
	if (rc < 0) {
		if (*claim >= 0)
			close(*claim);
		*claim = -1;
		snprintf(err, errlen, "cannot listen on %s:%u: %s", address->host, address->port,
			 strerror(-rc));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(found);
		return rc;
	}
	freeaddrinfo(found);
	*bound_port = ntohs(bound.sin_port);
	return fd;
}

int daemon_listen_open(const struct daemon_address *address, unsigned *bound_port, int *claim,
		       char *err, size_t errlen)
{
	err[0] = '\0';
	*bound_port = 0;
	*claim = -1;
	if (address->kind == DAEMON_LISTEN_UNIX)
		return listen_unix(address->path, err, errlen);
	return listen_tcp(address, bound_port, claim, err, errlen);
}

/* Why the token file could not be made, with what to do when its file system is full. */
static void listen_token_failed(const char *path, int code, char *err, size_t errlen)
{
	if (code == ENOSPC || code == EDQUOT)
		snprintf(err, errlen, "cannot write the token file %s: %s: free space there, or "
			 "pass --token-file a path on a file system with room; no token file was "
			 "left", path, strerror(code));
	else
		snprintf(err, errlen, "cannot write the token file %s: %s (check its directory's "
			 "permissions, or pass --token-file another path); no token file was left",
			 path, strerror(code));
}

/*
 * Writes text into a new file tmp (mode 0600) and makes it durable, then publishes it at path
 * with link(2), which never replaces a file: 0 or -errno, tmp removed either way.
 */
static int listen_token_publish(const char *tmp, const char *path, const char *text)
{
	int fd, rc;

	/* the name is this process's: one left there is a crashed earlier process's */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, LISTEN_SOCKET_MODE);
	if (fd < 0)
		return -errno;
	rc = fd_write_full(fd, text, strlen(text));
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && link(tmp, path) < 0)
		rc = -errno;
	unlink(tmp);
	return rc;
}

/*
 * Creates the token file (and its directory) with a fresh random token. The token is written
 * beside it and published whole, so a full disk or a crash never leaves an empty or cut-short
 * token file that the next start would refuse.
 */
static int listen_token_create(const char *path, char *token, size_t token_size, char *err,
			       size_t errlen)
{
	unsigned char bytes[LISTEN_TOKEN_BYTES];
	char dir[DAEMON_PATH_MAX], tmp[DAEMON_PATH_MAX], line[2 * LISTEN_TOKEN_BYTES + 2];
	char *slash;
	int rc;

	if (token_size < 2 * LISTEN_TOKEN_BYTES + 1)
		return -ENOSPC;
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, LISTEN_DIR_MODE) < 0 && errno != EEXIST) {
			rc = -errno;
			snprintf(err, errlen, "cannot create %s for the token file: %s", dir,
				 strerror(-rc));
			return rc;
		}
	}
	if (snprintf(tmp, sizeof(tmp), "%s" LISTEN_TOKEN_TMP_SUFFIX "%ld", path,
		     (long)getpid()) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "the token file path %s is too long", path);
		return -ENAMETOOLONG;
	}
	if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes)) {
		snprintf(err, errlen, "cannot read random bytes for the daemon token");
		return -EIO;
	}
	for (size_t i = 0; i < sizeof(bytes); i++)
		snprintf(token + 2 * i, 3, "%02x", bytes[i]);
	snprintf(line, sizeof(line), "%s\n", token);
	rc = listen_token_publish(tmp, path, line);
	if (rc < 0) {
		listen_token_failed(path, -rc, err, errlen);
		return rc;
	}
	return 0;
}

int daemon_token_load(const char *path, char *token, size_t token_size, char *err,
		      size_t errlen)
{
	struct stat st;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) {
		int rc = listen_token_create(path, token, token_size, err, errlen);

		/* another daemon published one first: that one is read like any other */
		if (rc != -EEXIST)
			return rc;
		err[0] = '\0';
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0) {
		snprintf(err, errlen, "cannot open the token file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || (st.st_mode & LISTEN_PERMISSION_BITS & ~(mode_t)S_IRWXU) ||
	    st.st_uid != getuid()) {
		close(fd);
		snprintf(err, errlen, "the token file %s must be yours with mode 0600 (chmod 600 %s)",
			 path, path);
		return -EPERM;
	}
	n = read(fd, token, token_size - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "cannot read the token file %s: %s", path, strerror(errno));
		return -EIO;
	}
	token[n] = '\0';
	token[strcspn(token, "\r\n")] = '\0';
	if (!token[0]) {
		snprintf(err, errlen, "the token file %s is empty; remove it and a new token is made",
			 path);
		return -EINVAL;
	}
	return 0;
}
