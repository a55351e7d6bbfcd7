/*
 * A run's host sample (src/daemon/telemetry.c) covers its VMM processes: a child that holds
 * memory and has spent CPU, as a VMM process forked by `voidbox run` does, is counted in the
 * sample of its parent's pid. Without the children the sample would miss the VM entirely.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "common/clock.h"
#include "daemon/daemon_internal.h"

#define TEST_CHILD_BYTES (96u * 1024u * 1024u)
/* what the sample must grow by at least: most of the child's memory */
#define TEST_CHILD_MIN_BYTES (64u * 1024u * 1024u)

static json_int_t sample_rss(void)
{
	struct daemon_host_sampler sampler = { 0 };
	json_t *sample = daemon_host_sample(&sampler, getpid(), clock_monotonic_ms());
	json_int_t rss = sample ? json_integer_value(json_object_get(sample, "rss_bytes")) : -1;

	json_decref(sample);
	return rss;
}

static void test_sample_counts_children(void)
{
	json_int_t alone = sample_rss(), with_child;
	int ready[2];
	pid_t child;
	char byte = 0;

	CHECK(alone > 0);
	CHECK_INT_EQ(pipe(ready), 0);
	child = fork();
	if (child == 0) {
		/* volatile: stores to memory nothing reads are otherwise optimised away */
		volatile char *memory = malloc(TEST_CHILD_BYTES);
		long page = sysconf(_SC_PAGESIZE);

		if (!memory || page <= 0)
			_exit(1);
		for (size_t at = 0; at < TEST_CHILD_BYTES; at += (size_t)page)
			memory[at] = 1;
		if (write(ready[1], &byte, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	CHECK(child > 0);
	CHECK_INT_EQ(read(ready[0], &byte, 1), 1);
	with_child = sample_rss();
	CHECK(with_child - alone >= (json_int_t)TEST_CHILD_MIN_BYTES);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	close(ready[0]);
	close(ready[1]);
}

int main(void)
{
	RUN_TEST(test_sample_counts_children);
	return harness_finish();
}
