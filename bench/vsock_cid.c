/*
 * AF_VSOCK connect with a deadline: non-blocking connect, poll for completion, then back to
 * blocking for the control channel that takes the fd over.
 */
#include "vsock_cid.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

int bench_vsock_connect_cid(unsigned int cid, unsigned int port, int timeout_ms)
{
	struct sockaddr_vm addr = { .svm_family = AF_VSOCK, .svm_cid = cid, .svm_port = port };
	struct pollfd pfd;
	int fd, err = 0, flags;
	socklen_t errlen = sizeof(err);

	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		if (errno != EINPROGRESS) {
			err = errno;
			goto fail;
		}
		pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
		if (poll(&pfd, 1, timeout_ms) <= 0) {
			err = ETIMEDOUT;
			goto fail;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0)
			err = errno;
		if (err)
			goto fail;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		err = errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -err;
}
