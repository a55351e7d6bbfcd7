/*
 * The benchmarks' raw echo (guest/agent/echo.c) on a unix socket: what each connection sends
 * comes back byte for byte, in pieces larger than one read, and the server goes on to the
 * next connection after one closes.
 */
#include "echo.h"

#include "harness.h"

#include <pthread.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define TEST_ECHO_CONNECTIONS 2
#define TEST_ECHO_LARGE_BYTES 10000 /* more than the server's one read */

struct echo_thread {
	int listen_fd;
	int rc;
};

static void *serve_thread(void *opaque)
{
	struct echo_thread *server = opaque;

	server->rc = echo_serve(server->listen_fd, TEST_ECHO_CONNECTIONS);
	return NULL;
}

/* An abstract unix socket the kernel names: no file to clean up. */
static int listen_abstract(struct sockaddr_un *addr, socklen_t *len)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	*len = sizeof(addr->sun_family);
	if (fd < 0 || bind(fd, (struct sockaddr *)addr, *len) < 0 || listen(fd, 1) < 0)
		harness_fail_setup("cannot listen on an abstract unix socket");
	*len = sizeof(*addr);
	if (getsockname(fd, (struct sockaddr *)addr, len) < 0)
		harness_fail_setup("getsockname failed");
	return fd;
}

static void round_trip(const struct sockaddr_un *addr, socklen_t len, const char *out, size_t n)
{
	static char back[TEST_ECHO_LARGE_BYTES];
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t got = 0;

	CHECK(fd >= 0 && connect(fd, (const struct sockaddr *)addr, len) == 0);
	CHECK(write(fd, out, n) == (ssize_t)n);
	while (got < n) {
		ssize_t r = read(fd, back + got, n - got);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	CHECK(got == n);
	CHECK(memcmp(back, out, n) == 0);
	close(fd);
}

static void test_echoes_each_connection(void)
{
	static char large[TEST_ECHO_LARGE_BYTES];
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct echo_thread server = { .rc = -1 };
	pthread_t thread;
	socklen_t len;

	for (size_t i = 0; i < sizeof(large); i++)
		large[i] = (char)(i * 7);
	server.listen_fd = listen_abstract(&addr, &len);
	CHECK(pthread_create(&thread, NULL, serve_thread, &server) == 0);
	round_trip(&addr, len, "ping", 4);
	round_trip(&addr, len, large, sizeof(large));
	pthread_join(thread, NULL);
	CHECK(server.rc == 0);
	close(server.listen_fd);
}

static void test_refuses_bad_ports(void)
{
	CHECK(echo_main("") == 2);
	CHECK(echo_main("-1") == 2);
	CHECK(echo_main("12x") == 2);
	CHECK(echo_main("99999999999") == 2);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_echoes_each_connection);
	RUN_TEST(test_refuses_bad_ports);
	return harness_finish();
}
