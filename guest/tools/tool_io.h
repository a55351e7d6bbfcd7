/*
 * The one I/O helper the guest tools' two HTTP ends share: writing a whole buffer to a socket
 * through short writes and EINTR. A header of its own so the MCP library and the sidecar
 * client, which link separately, use the same code.
 */
#ifndef VOIDBOX_GUEST_TOOLS_TOOL_IO_H
#define VOIDBOX_GUEST_TOOLS_TOOL_IO_H

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

/* 0, or -EIO when the peer went away. */
static inline int tool_write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

#endif
