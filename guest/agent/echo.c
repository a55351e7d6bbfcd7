/*
 * The benchmarks' raw vsock echo (see echo.h). One connection at a time and a plain
 * read/write loop, so each round trip is exactly one guest read and one guest write and the
 * figure is the transport's, not a scheduler's. The server forks after it listens and leaves
 * the exec's process group, so the exec returns at once and the agent's end-of-exec cleanup
 * (which kills the group) does not reach it.
 */
#include "echo.h"

#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define ECHO_BUFFER_BYTES 4096
#define ECHO_PORT_MAX 0xfffffffeUL /* VMADDR_PORT_ANY is not a port one can ask for */
#define ECHO_DECIMAL_BASE 10
#define ECHO_EXIT_OK 0
#define ECHO_EXIT_FAILED 1
#define ECHO_EXIT_USAGE 2

static int echo_connection(int fd)
{
	char buffer[ECHO_BUFFER_BYTES];

	for (;;) {
		ssize_t got = read(fd, buffer, sizeof(buffer));

		if (got == 0)
			return 0;
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (ssize_t sent = 0; sent < got;) {
			ssize_t n = write(fd, buffer + sent, (size_t)(got - sent));

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			sent += n;
		}
	}
}

int echo_serve(int listen_fd, unsigned int max_connections)
{
	for (unsigned int served = 0; max_connections == 0 || served < max_connections;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		echo_connection(fd); /* a broken connection ends only itself */
		close(fd);
		served++;
	}
	return 0;
}

static void echo_detach_stdio(void)
{
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null_fd < 0)
		return;
	for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++)
		dup2(null_fd, fd);
	close(null_fd);
}

int echo_main(const char *port_text)
{
	char *end;
	unsigned long port;
	int listen_fd;
	pid_t pid;

	errno = 0;
	port = strtoul(port_text, &end, ECHO_DECIMAL_BASE);
	if (errno || end == port_text || *end || port_text[0] == '-' || port > ECHO_PORT_MAX)
		return ECHO_EXIT_USAGE;
	listen_fd = server_listen_vsock((unsigned int)port);
	if (listen_fd < 0)
		return ECHO_EXIT_FAILED;
	pid = fork();
	if (pid < 0)
		return ECHO_EXIT_FAILED;
	if (pid > 0)
		return ECHO_EXIT_OK; /* listening: the host may connect now */
	setsid();
	echo_detach_stdio();
	_exit(echo_serve(listen_fd, 0) == 0 ? ECHO_EXIT_OK : ECHO_EXIT_FAILED);
}
