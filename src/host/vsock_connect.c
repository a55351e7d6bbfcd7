/*
 * Host side of the hybrid-vsock handshake. Everything runs against one deadline so the whole
 * call (connect, request, reply) honours timeout_ms; the socket stays non-blocking until the
 * reply is in and is switched back to blocking for the caller. Errors map to the three things
 * a user can act on: the VM is not running, the guest refused, the guest did not answer.
 */
#include "host/vsock_connect.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define VSOCK_CONNECT_REPLY_MAX 32u
#define VSOCK_CONNECT_REQUEST_MAX 32u
#define VSOCK_CONNECT_OK_PREFIX "OK "
#define VSOCK_CONNECT_DECIMAL 10

static const char *const log_module = "vsock-connect";

/* Waits for events on fd until the deadline; 0 when ready, -ETIMEDOUT or -errno otherwise. */
static int vsock_connect_wait(int fd, short events, long long deadline_ms)
{
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = events };
		long long left = deadline_ms - (long long)clock_monotonic_ms();
		int rc;

		if (left <= 0)
			return -ETIMEDOUT;
		rc = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -errno;
		if (rc > 0)
			return 0;
	}
}

static int vsock_connect_socket(const char *uds_path, long long deadline_ms)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	socklen_t optlen = sizeof(int);
	int fd, rc, soerr = 0;

	if (strlen(uds_path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, uds_path, strlen(uds_path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
		return fd;
	if (errno != EINPROGRESS && errno != EAGAIN) {
		rc = -errno;
		goto fail;
	}
	rc = vsock_connect_wait(fd, POLLOUT, deadline_ms);
	if (rc)
		goto fail;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &optlen) < 0 || soerr) {
		rc = soerr ? -soerr : -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

static int vsock_connect_send_request(int fd, uint32_t port, long long deadline_ms)
{
	char request[VSOCK_CONNECT_REQUEST_MAX];
	int len = snprintf(request, sizeof(request), "CONNECT %" PRIu32 "\n", port);
	int sent = 0;

	while (sent < len) {
		ssize_t n = send(fd, request + sent, (size_t)(len - sent), MSG_NOSIGNAL);
		int rc;

		if (n > 0) {
			sent += (int)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return errno == EPIPE ? -ECONNRESET : -errno;
		rc = vsock_connect_wait(fd, POLLOUT, deadline_ms);
		if (rc)
			return rc;
	}
	return 0;
}

static int vsock_connect_parse_reply(const char *reply)
{
	const size_t prefix_len = strlen(VSOCK_CONNECT_OK_PREFIX);
	char *end;

	if (strncmp(reply, VSOCK_CONNECT_OK_PREFIX, prefix_len) != 0)
		return -EPROTO;
	if (reply[prefix_len] < '0' || reply[prefix_len] > '9')
		return -EPROTO;
	errno = 0;
	strtoul(reply + prefix_len, &end, VSOCK_CONNECT_DECIMAL);
	if (errno || *end != '\0')
		return -EPROTO;
	return 0;
}

/* Reads "OK <n>\n" one byte at a time so no stream byte after it is consumed. */
static int vsock_connect_read_reply(int fd, long long deadline_ms)
{
	char reply[VSOCK_CONNECT_REPLY_MAX];
	size_t len = 0;

	while (len < sizeof(reply) - 1) {
		ssize_t n = recv(fd, reply + len, 1, 0);
		int rc;

		if (n == 1) {
			if (reply[len] == '\n') {
				reply[len] = '\0';
				return vsock_connect_parse_reply(reply);
			}
			len++;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		rc = vsock_connect_wait(fd, POLLIN, deadline_ms);
		if (rc)
			return rc;
	}
	return -EPROTO;
}

static int vsock_connect_set_blocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

int vsock_host_connect(const char *uds_path, uint32_t port, int timeout_ms)
{
	long long deadline_ms = (long long)clock_monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	int fd, rc;

	if (!uds_path)
		return -EINVAL;
	fd = vsock_connect_socket(uds_path, deadline_ms);
	if (fd < 0) {
		log_debug(log_module, "connect %s: %s", uds_path, strerror(-fd));
		return fd;
	}
	rc = vsock_connect_send_request(fd, port, deadline_ms);
	if (!rc)
		rc = vsock_connect_read_reply(fd, deadline_ms);
	if (!rc)
		rc = vsock_connect_set_blocking(fd);
	if (rc) {
		log_debug(log_module, "guest port %" PRIu32 " via %s: %s", port, uds_path,
			  strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

const char *vsock_host_connect_describe(int err)
{
	switch (err) {
	case -ENOENT:
	case -ECONNREFUSED:
		return "the VM's vsock socket is missing or not accepting: the VM is not running; "
		       "start it (or check the socket path)";
	case -ECONNRESET:
		return "the guest refused the connection: nothing listens on that vsock port in the "
		       "guest; check that the guest agent started";
	case -ETIMEDOUT:
		return "the guest did not answer in time: it may still be booting; retry or raise "
		       "the timeout";
	case -EPROTO:
		return "the vsock socket answered with something other than \"OK <port>\": the path "
		       "does not belong to a voidbox VM";
	case -ENAMETOOLONG:
		return "the vsock socket path is too long for AF_UNIX: use a shorter directory";
	default:
		return "connecting to the guest over vsock failed";
	}
}
