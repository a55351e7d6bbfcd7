/*
 * Claims on host loopback ports as abstract unix datagram names (loopback_claim.h says why).
 * A datagram socket is used on both sides because connecting to one creates nothing on the
 * claimant's side: no pending connection to accept, no backlog a prober could fill. Both
 * sockets are shut down for sending and receiving once bound: the asker lives in the VMM's
 * network worker, which the guest drives, so it must not be able to send datagrams to other
 * sockets on the host or bind a claim of its own; and nobody can queue datagrams on a claim.
 */
#include "common/loopback_claim.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* "\0" + prefix + a port of at most five digits */
static socklen_t loopback_claim_address(uint16_t port, struct sockaddr_un *addr)
{
	int len;

	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	len = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "%s%u",
		       LOOPBACK_CLAIM_NAME_PREFIX, (unsigned int)port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

/* A datagram socket bound to addr and shut down both ways: the descriptor, or -errno. */
static int loopback_claim_bound_socket(const struct sockaddr_un *addr, socklen_t addr_len)
{
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (const struct sockaddr *)addr, addr_len) < 0 ||
	    shutdown(fd, SHUT_RDWR) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

int loopback_claim_port(uint16_t port)
{
	struct sockaddr_un addr;
	socklen_t addr_len = loopback_claim_address(port, &addr);

	return loopback_claim_bound_socket(&addr, addr_len);
}

int loopback_claim_asker_open(void)
{
	/* an autobind (the family alone) gives it a name, so a later bind() fails */
	const struct sockaddr_un autobind = { .sun_family = AF_UNIX };

	return loopback_claim_bound_socket(&autobind, sizeof(sa_family_t));
}

bool loopback_claim_held(int asker, uint16_t port)
{
	struct sockaddr_un addr;
	socklen_t addr_len = loopback_claim_address(port, &addr);

	if (asker < 0)
		return false;
	/*
	 * Connecting a datagram socket only names its peer: it succeeds when the name is bound,
	 * fails with ECONNREFUSED when it is not. Any other failure is taken as a claim, so the
	 * guest is refused rather than let through when the answer is unknown.
	 */
	return connect(asker, (struct sockaddr *)&addr, addr_len) == 0 || errno != ECONNREFUSED;
}
