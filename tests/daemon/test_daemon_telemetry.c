/*
 * How the daemon labels and stamps telemetry (src/daemon/telemetry.c): a guest sample of a
 * box is recorded under the stage running in it -- the box itself when it is a running stage
 * (a pipeline box), else each running stage (a workflow's steps share the spec's one box),
 * else the box between stages -- and every sample's time is also written as RFC 3339 UTC.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "daemon/daemon_internal.h"
#include "harness.h"

#define TEST_LABELS_MAX 4
/* 2026-11-26T08:30:05.042Z in ms since the epoch */
#define TEST_TIME_MS 1795681805042ull
#define TEST_NAME_MAX 64

/* the labels point into the running array: copies outlive it */
static char label_copies[TEST_LABELS_MAX][TEST_NAME_MAX];

static size_t labels_of(const char *box, const char *running_json, const char **labels)
{
	json_t *running = json_loads(running_json, 0, NULL);
	size_t count;

	if (!running)
		harness_fail_setup("bad test JSON");
	count = daemon_telemetry_labels(box, running, labels, TEST_LABELS_MAX);
	for (size_t i = 0; i < count; i++) {
		snprintf(label_copies[i], sizeof(label_copies[i]), "%s",
			 labels[i] ? labels[i] : "(null)");
		labels[i] = label_copies[i];
	}
	json_decref(running);
	return count;
}

static void test_workflow_sample_is_the_running_step(void)
{
	const char *labels[TEST_LABELS_MAX];

	/* a workflow's box is named after the spec; its one running step is the label */
	CHECK_INT_EQ(labels_of("hello-workflow", "[\"transform\"]", labels), 1);
	CHECK_STR_EQ(labels[0], "transform");
	/* parallel steps in the same box: the sample belongs to each */
	CHECK_INT_EQ(labels_of("hello-workflow", "[\"left\", \"right\"]", labels), 2);
	CHECK_STR_EQ(labels[0], "left");
	CHECK_STR_EQ(labels[1], "right");
}

static void test_box_named_like_its_stage(void)
{
	const char *labels[TEST_LABELS_MAX];

	/* pipeline boxes run at once, each named after its stage: only its own */
	CHECK_INT_EQ(labels_of("reviewer", "[\"writer\", \"reviewer\"]", labels), 1);
	CHECK_STR_EQ(labels[0], "reviewer");
}

static void test_between_stages_keeps_the_box(void)
{
	const char *labels[TEST_LABELS_MAX];

	CHECK_INT_EQ(labels_of("hello-workflow", "[]", labels), 1);
	CHECK_STR_EQ(labels[0], "hello-workflow");
	CHECK_INT_EQ(labels_of(NULL, "[]", labels), 1);
	CHECK_STR_EQ(labels[0], "(null)");
	CHECK_INT_EQ(labels_of("box", "[\"a\", \"b\", \"c\", \"d\", \"e\", \"f\"]", labels),
		     TEST_LABELS_MAX);
}

static void test_rfc3339(void)
{
	char text[DAEMON_RFC3339_MAX];

	daemon_rfc3339_ms(TEST_TIME_MS, text);
	CHECK_STR_EQ(text, "2026-11-26T08:30:05.042Z");
	daemon_rfc3339_ms(0, text);
	CHECK_STR_EQ(text, "1970-01-01T00:00:00.000Z");
}

int main(void)
{
	RUN_TEST(test_workflow_sample_is_the_running_step);
	RUN_TEST(test_box_named_like_its_stage);
	RUN_TEST(test_between_stages_keeps_the_box);
	RUN_TEST(test_rfc3339);
	return harness_finish();
}
