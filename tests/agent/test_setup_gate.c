/*
 * The gate requests wait at until the agent's device set-up is over: a waiter stays blocked
 * while the gate is closed and goes through once it opens; an open or NULL gate never blocks.
 * The waiter is a thread; "still blocked" is checked after it has had ample time to run.
 */
#include "setup_gate.h"

#include "harness.h"

#include <stdatomic.h>
#include <time.h>

#define TEST_SETTLE_NS (50 * 1000 * 1000L)

struct waiter {
	struct setup_gate *gate;
	atomic_bool passed;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	setup_gate_wait(w->gate);
	atomic_store(&w->passed, true);
	return NULL;
}

static void settle(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = TEST_SETTLE_NS };

	nanosleep(&ts, NULL);
}

static void test_waiter_blocks_until_opened(void)
{
	struct setup_gate gate;
	struct waiter w = { .gate = &gate };
	pthread_t thread;

	setup_gate_init(&gate);
	CHECK(!setup_gate_is_open(&gate));
	CHECK_INT_EQ(pthread_create(&thread, NULL, waiter_main, &w), 0);
	settle();
	CHECK(!atomic_load(&w.passed));
	setup_gate_open(&gate);
	pthread_join(thread, NULL);
	CHECK(atomic_load(&w.passed));
	CHECK(setup_gate_is_open(&gate));
}

static void test_open_gate_never_blocks(void)
{
	struct setup_gate gate;

	setup_gate_init(&gate);
	setup_gate_open(&gate);
	setup_gate_wait(&gate);
	setup_gate_wait(&gate);
	CHECK(setup_gate_is_open(&gate));
}

static void test_null_gate_is_open(void)
{
	setup_gate_wait(NULL);
	CHECK(setup_gate_is_open(NULL));
}

int main(void)
{
	RUN_TEST(test_waiter_blocks_until_opened);
	RUN_TEST(test_open_gate_never_blocks);
	RUN_TEST(test_null_gate_is_open);
	return harness_finish();
}
