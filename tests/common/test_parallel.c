/*
 * parallel_for_each: every item is done exactly once, and the items really run at the same
 * time: each waits (up to a generous bound) until all have arrived, which items run one after
 * another could never see.
 */
#include "common/parallel.h"
#include "harness.h"

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#define TEST_ITEMS 8
#define TEST_ARRIVAL_WAIT_SECS 10

static pthread_mutex_t arrival_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrival_cond;
static int arrived;

struct test_item {
	int index;
	int calls;
	bool saw_everyone;
};

static void wait_for_everyone(void *opaque)
{
	struct test_item *item = opaque;
	struct timespec deadline;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += TEST_ARRIVAL_WAIT_SECS;
	pthread_mutex_lock(&arrival_lock);
	item->calls++;
	arrived++;
	pthread_cond_broadcast(&arrival_cond);
	while (arrived < TEST_ITEMS &&
	       pthread_cond_timedwait(&arrival_cond, &arrival_lock, &deadline) == 0)
		;
	item->saw_everyone = arrived >= TEST_ITEMS;
	pthread_mutex_unlock(&arrival_lock);
}

static void test_items_run_together_once_each(void)
{
	struct test_item items[TEST_ITEMS] = { 0 };

	for (int i = 0; i < TEST_ITEMS; i++)
		items[i].index = i;
	parallel_for_each(items, TEST_ITEMS, sizeof(items[0]), wait_for_everyone);
	for (int i = 0; i < TEST_ITEMS; i++) {
		CHECK_INT_EQ(items[i].calls, 1);
		CHECK(items[i].saw_everyone);
	}
}

static void count_call(void *opaque)
{
	((struct test_item *)opaque)->calls++;
}

static void test_no_items(void)
{
	struct test_item unused = { 0 };

	parallel_for_each(&unused, 0, sizeof(unused), count_call);
	CHECK_INT_EQ(unused.calls, 0);
}

int main(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&arrival_cond, &attr);
	pthread_condattr_destroy(&attr);
	RUN_TEST(test_items_run_together_once_each);
	RUN_TEST(test_no_items);
	return harness_finish();
}
