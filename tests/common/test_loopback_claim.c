/*
 * Tests of claims on host loopback ports (common/loopback_claim.h): real abstract sockets in
 * this process's network namespace, as the VMM's network device and the sidecar use them.
 * Ports are taken from the upper end, where no claimant of a running voidbox would sit for
 * long, and each test releases what it claims.
 */
#include <errno.h>
#include <unistd.h>

#include "common/loopback_claim.h"
#include "harness.h"

/* A port number of this test's own: its pid spread over 50000-59999. */
static uint16_t test_port(unsigned int offset)
{
	return (uint16_t)(50000u + ((unsigned int)getpid() * 7u + offset) % 10000u);
}

static void test_claim_is_seen_until_released(void)
{
	uint16_t port = test_port(0);
	int asker = loopback_claim_asker_open();
	int claim;

	CHECK(asker >= 0);
	CHECK(!loopback_claim_held(asker, port));
	claim = loopback_claim_port(port);
	CHECK(claim >= 0);
	CHECK(loopback_claim_held(asker, port));
	CHECK(!loopback_claim_held(asker, (uint16_t)(port + 1)));
	/* asking again, after a refused ask, still answers */
	CHECK(loopback_claim_held(asker, port));
	close(claim);
	CHECK(!loopback_claim_held(asker, port));
	close(asker);
}

static void test_second_claim_refused(void)
{
	uint16_t port = test_port(1);
	int first = loopback_claim_port(port);

	CHECK(first >= 0);
	CHECK_INT_EQ(loopback_claim_port(port), -EADDRINUSE);
	close(first);
	first = loopback_claim_port(port); /* free again once released */
	CHECK(first >= 0);
	close(first);
}

static void test_no_asker_sees_no_claim(void)
{
	uint16_t port = test_port(2);
	int claim = loopback_claim_port(port);

	CHECK(claim >= 0);
	CHECK(!loopback_claim_held(-1, port));
	close(claim);
}

int main(void)
{
	RUN_TEST(test_claim_is_seen_until_released);
	RUN_TEST(test_second_claim_refused);
	RUN_TEST(test_no_asker_sees_no_claim);
	return harness_finish();
}
