/*
 * A socket of the test's own on the host's 127.0.0.1, at a port the kernel picks: the servers
 * the network, OCI and claim tests run on loopback, and the ports they hold while they claim
 * them. Bound only, so a caller that serves listens itself, and one that claims holds the port
 * without taking connections.
 */
#ifndef VOIDBOX_TESTS_LOOPBACK_PORT_H
#define VOIDBOX_TESTS_LOOPBACK_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

/* A socket of type bound to 127.0.0.1 at a free port, *port set; -1 on failure. */
static inline int loopback_port_bind(int type, uint16_t *port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&addr, &len) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(addr.sin_port);
	return fd;
}

#endif
