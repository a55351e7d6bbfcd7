/*
 * The registry client against a hostile registry on loopback: a server written here answers
 * each manifest request the way a registry that means harm would, and the pull must end with
 * an error, quickly, without reading what the registry keeps sending. An error answer with an
 * endless body is cut after its first bytes; a manifest trickled one byte at a time ends at
 * the request's deadline; escape sequences in an error answer or a challenge reach the error
 * sentence as spaces. The server stops on its own after a cap, so a client that does not
 * stop shows up as a failed check, not a hung test.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http_request_head.h"
#include "loopback_port.h"
#include "store/oci_pull.h"
#include "store/store_fs.h"

#define TEST_ERR_MAX 1024
#define TEST_REF_MAX 128
#define TEST_REQUEST_MAX 8192
#define TEST_CHUNK_BYTES 65536
/* What the endless answer sends at most: far more than the client may read. */
#define TEST_ENDLESS_CAP_BYTES (1ull << 30)
#define TEST_ENDLESS_READ_MAX (64ull << 20)
/* The trickle: one byte this often, for at most this long. */
#define TEST_TRICKLE_INTERVAL_NS 200000000L
#define TEST_TRICKLE_CAP_S 30
#define TEST_TIMEOUT_S 2u
#define TEST_TRICKLE_ELAPSED_MAX_S 10

enum test_answer {
	TEST_ENDLESS_ERROR, /* HTTP 500 whose body never ends */
	TEST_TRICKLE,	    /* HTTP 200 with a 4 KiB manifest, one byte at a time */
	TEST_ESCAPES,	    /* HTTP 500 whose body holds terminal escape sequences */
	TEST_ESCAPED_CHALLENGE, /* HTTP 401 whose WWW-Authenticate holds escape sequences */
};

struct test_server {
	int listen_fd;
	uint16_t port;
	enum test_answer answer;
	unsigned long long sent;
	pthread_t thread;
};

static const char test_endless_head[] = "HTTP/1.1 500 Internal Server Error\r\n"
					"Content-Type: text/plain\r\n"
					"Connection: close\r\n\r\n";
static const char test_trickle_head[] = "HTTP/1.1 200 OK\r\n"
					"Content-Type: application/vnd.oci.image.manifest.v1+json\r\n"
					"Content-Length: 4096\r\n"
					"Connection: close\r\n\r\n";

/* An OSC that retitles the terminal and a CSI that clears it, around the registry's words. */
#define TEST_ESCAPES_BODY "\x1b]0;owned\x07\x1b[2Jmanifest unknown\r\n"
static const char test_escapes_answer[] = "HTTP/1.1 500 Internal Server Error\r\n"
					  "Content-Type: text/plain\r\n"
					  "Content-Length: 32\r\n"
					  "Connection: close\r\n\r\n" TEST_ESCAPES_BODY;
_Static_assert(sizeof(TEST_ESCAPES_BODY) - 1 == 32, "the answer's Content-Length");
static const char test_escaped_challenge_answer[] = "HTTP/1.1 401 Unauthorized\r\n"
						    "WWW-Authenticate: Bogus \x1b[2Jrealm\r\n"
						    "Content-Length: 0\r\n"
						    "Connection: close\r\n\r\n";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool send_all(int fd, const void *data, size_t len)
{
	return send(fd, data, len, MSG_NOSIGNAL) == (ssize_t)len;
}

static void serve_endless(struct test_server *server, int fd)
{
	static char chunk[TEST_CHUNK_BYTES];

	memset(chunk, 'x', sizeof(chunk));
	if (!send_all(fd, test_endless_head, strlen(test_endless_head)))
		return;
	while (server->sent < TEST_ENDLESS_CAP_BYTES && send_all(fd, chunk, sizeof(chunk)))
		server->sent += sizeof(chunk);
}

static void serve_trickle(struct test_server *server, int fd)
{
	struct timespec interval = { .tv_nsec = TEST_TRICKLE_INTERVAL_NS };
	double start = now_s();

	if (!send_all(fd, test_trickle_head, strlen(test_trickle_head)))
		return;
	while (now_s() - start < TEST_TRICKLE_CAP_S && send_all(fd, " ", 1)) {
		server->sent++;
		nanosleep(&interval, NULL);
	}
}

/* Answers one connection: reads the request's head, then sends the hostile answer. */
static void *server_run(void *opaque)
{
	struct test_server *server = opaque;
	char request[TEST_REQUEST_MAX];
	int fd = accept(server->listen_fd, NULL, NULL);

	if (fd < 0)
		return NULL;
	http_request_head_read(fd, request, sizeof(request));
	if (server->answer == TEST_ENDLESS_ERROR)
		serve_endless(server, fd);
	else if (server->answer == TEST_TRICKLE)
		serve_trickle(server, fd);
	else if (server->answer == TEST_ESCAPES)
		send_all(fd, test_escapes_answer, strlen(test_escapes_answer));
	else
		send_all(fd, test_escaped_challenge_answer, strlen(test_escaped_challenge_answer));
	close(fd);
	return NULL;
}

static bool server_start(struct test_server *server, enum test_answer answer)
{
	memset(server, 0, sizeof(*server));
	server->answer = answer;
	server->listen_fd = loopback_port_bind(SOCK_STREAM, &server->port);
	if (server->listen_fd < 0 || listen(server->listen_fd, 1) < 0)
		return false;
	return pthread_create(&server->thread, NULL, server_run, server) == 0;
}

static void server_stop(struct test_server *server)
{
	shutdown(server->listen_fd, SHUT_RDWR);
	pthread_join(server->thread, NULL);
	close(server->listen_fd);
}

/* Pulls 127.0.0.1:PORT/voidbox/test:1 into a scratch cache; the pull's return code. */
static int pull_from(const struct test_server *server, char *err)
{
	char oci_dir[] = "/tmp/voidbox-test-oci-pull-XXXXXX", text[TEST_REF_MAX];
	struct oci_pull_options options = { .progress = OCI_PROGRESS_NONE,
					    .request_timeout_s = TEST_TIMEOUT_S };
	struct oci_pull_result *result = calloc(1, sizeof(*result));
	struct oci_ref ref;
	int rc;

	if (!result || !mkdtemp(oci_dir))
		harness_fail_setup("cannot make a scratch cache");
	options.oci_dir = oci_dir;
	snprintf(text, sizeof(text), "127.0.0.1:%d/voidbox/test:1", server->port);
	rc = oci_ref_parse(text, &ref, err, TEST_ERR_MAX);
	if (rc == 0)
		rc = oci_pull(&ref, &options, result, err, TEST_ERR_MAX);
	store_remove_tree(oci_dir);
	free(result);
	return rc;
}

static void test_endless_error_body_is_cut(void)
{
	struct test_server server;
	char err[TEST_ERR_MAX] = "";

	if (!server_start(&server, TEST_ENDLESS_ERROR))
		harness_fail_setup("cannot listen on loopback");
	CHECK_INT_EQ(pull_from(&server, err), -EIO);
	CHECK(strstr(err, "HTTP 500") != NULL);
	server_stop(&server);
	CHECK(server.sent < TEST_ENDLESS_READ_MAX);
}

static void test_trickled_manifest_times_out(void)
{
	struct test_server server;
	char err[TEST_ERR_MAX] = "";
	double start;

	if (!server_start(&server, TEST_TRICKLE))
		harness_fail_setup("cannot listen on loopback");
	start = now_s();
	CHECK(pull_from(&server, err) < 0);
	CHECK(now_s() - start < TEST_TRICKLE_ELAPSED_MAX_S);
	CHECK(strstr(err, "cannot fetch") != NULL);
	server_stop(&server);
}

/* What a registry says is quoted in the error, without a control byte of it. */
static void check_quoted_without_controls(enum test_answer answer, const char *words)
{
	struct test_server server;
	char err[TEST_ERR_MAX] = "";

	if (!server_start(&server, answer))
		harness_fail_setup("cannot listen on loopback");
	CHECK(pull_from(&server, err) < 0);
	server_stop(&server);
	CHECK(strstr(err, words) != NULL);
	if (!strstr(err, words))
		fprintf(stderr, "  the error: %s\n", err);
	for (const char *c = err; *c; c++)
		if ((unsigned char)*c < ' ' || *c == 0x7f) {
			CHECK(!"a control byte of the registry's reached the error");
			break;
		}
}

static void test_registry_text_quoted_without_controls(void)
{
	check_quoted_without_controls(TEST_ESCAPES, "manifest unknown");
	check_quoted_without_controls(TEST_ESCAPED_CHALLENGE, "Bogus");
}

int main(void)
{
	RUN_TEST(test_endless_error_body_is_cut);
	RUN_TEST(test_trickled_manifest_times_out);
	RUN_TEST(test_registry_text_quoted_without_controls);
	return harness_finish();
}
