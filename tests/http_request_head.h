/*
 * The test servers' side of an HTTP request: its head read up to the blank line that ends
 * it. The loopback servers of the network and registry tests answer by the request line
 * alone, so one reader serves them all.
 */
#ifndef VOIDBOX_TESTS_HTTP_REQUEST_HEAD_H
#define VOIDBOX_TESTS_HTTP_REQUEST_HEAD_H

#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/*
 * Reads from fd into head (cap bytes, NUL-terminated) until the head's blank line, the peer's
 * end or a full buffer: the bytes read.
 */
static inline size_t http_request_head_read(int fd, char *head, size_t cap)
{
	size_t used = 0;

	head[0] = '\0';
	while (used < cap - 1) {
		ssize_t got = recv(fd, head + used, cap - 1 - used, 0);

		if (got <= 0)
			break;
		used += (size_t)got;
		head[used] = '\0';
		if (strstr(head, "\r\n\r\n"))
			break;
	}
	return used;
}

#endif
