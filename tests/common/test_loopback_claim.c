/*
 * Tests of claims on host loopback ports (common/loopback_claim.h): real abstract sockets in
 * this process's network namespace, as the VMM's network device and the sidecar use them.
 * Each port is one this test holds bound on 127.0.0.1 for as long as it claims it, as a real
 * service would, so no other test or service running beside it can be handed the same port.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/loopback_claim.h"
#include "harness.h"
#include "loopback_port.h"

/* A TCP port on 127.0.0.1 this test holds (bound, not listening) while it claims it. */
static int hold_loopback_port(uint16_t *port)
{
	return loopback_port_bind(SOCK_STREAM, port);
}

static void test_claim_is_seen_until_released(void)
{
	uint16_t port = 0, other = 0;
	int held = hold_loopback_port(&port), other_held = hold_loopback_port(&other);
	int asker = loopback_claim_asker_open();
	int claim;

	if (held < 0 || other_held < 0 || asker < 0)
		harness_fail_setup("loopback ports or a claim asker");
	CHECK(!loopback_claim_held(asker, port));
	claim = loopback_claim_port(port);
	CHECK(claim >= 0);
	CHECK(loopback_claim_held(asker, port));
	CHECK(!loopback_claim_held(asker, other));
	/* asking again, after an answer of "not claimed", still answers */
	CHECK(loopback_claim_held(asker, port));
	close(claim);
	CHECK(!loopback_claim_held(asker, port));
	close(asker);
	close(other_held);
	close(held);
}

static void test_second_claim_refused(void)
{
	uint16_t port = 0;
	int held = hold_loopback_port(&port);
	int first = held >= 0 ? loopback_claim_port(port) : -1;

	if (held < 0)
		harness_fail_setup("a loopback port");
	CHECK(first >= 0);
	CHECK_INT_EQ(loopback_claim_port(port), -EADDRINUSE);
	close(first);
	first = loopback_claim_port(port); /* free again once released */
	CHECK(first >= 0);
	close(first);
	close(held);
}

/*
 * The asker lives in the VMM's network worker, which the guest drives: it can send no
 * datagram to the claim (or anywhere), take no claim of its own, and a claim queues nothing.
 */
static void test_asker_only_asks(void)
{
	uint16_t port = 0;
	int held = hold_loopback_port(&port);
	int claim = held >= 0 ? loopback_claim_port(port) : -1;
	int asker = loopback_claim_asker_open();
	struct sockaddr_un name = { .sun_family = AF_UNIX };
	const char byte = 'x';

	if (held < 0 || claim < 0 || asker < 0)
		harness_fail_setup("a claimed loopback port and an asker");
	CHECK(loopback_claim_held(asker, port));
	CHECK(send(asker, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0);
	int name_len = snprintf(name.sun_path + 1, sizeof(name.sun_path) - 1, "%s%u",
				LOOPBACK_CLAIM_NAME_PREFIX, (unsigned int)port + 1u);

	CHECK(bind(asker, (struct sockaddr *)&name,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)name_len)) < 0);
	CHECK(!loopback_claim_held(asker, (uint16_t)(port + 1u)));
	CHECK(recv(claim, (void *)&name, 1, MSG_DONTWAIT) <= 0);
	close(asker);
	close(claim);
	close(held);
}

static void test_no_asker_sees_no_claim(void)
{
	uint16_t port = 0;
	int held = hold_loopback_port(&port);
	int claim = held >= 0 ? loopback_claim_port(port) : -1;

	if (held < 0)
		harness_fail_setup("a loopback port");
	CHECK(claim >= 0);
	CHECK(!loopback_claim_held(-1, port));
	close(claim);
	close(held);
}

int main(void)
{
	RUN_TEST(test_claim_is_seen_until_released);
	RUN_TEST(test_second_claim_refused);
	RUN_TEST(test_asker_only_asks);
	RUN_TEST(test_no_asker_sees_no_claim);
	return harness_finish();
}
