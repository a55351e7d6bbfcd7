/*
 * box_cancel_all on mock boxes, in process: an exec waiting in a built-in (sleep, mock-serve,
 * mock-barrier) returns with the cancel's error, later execs and opens are refused, and the
 * boxes still close. The cancel is process-wide and cannot be undone, so this is a program of
 * its own and each check runs in order. A mock handler marks the moment an exec has started,
 * so the cancel comes while the exec runs (or, in a narrow window, just before its wait,
 * which the mock checks under the same lock: the result is the same).
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <string.h>

#include "harness.h"
#include "runtime/box.h"

#define TEST_ERROR_MAX 256

struct waiting_exec {
	struct box *box;
	const char *program;
	const char *const *args;
	size_t arg_count;
	const char *service_name;
	struct box_exec_result result;
	int rc;
	pthread_t thread;
};

static sem_t exec_started;

/* Lets every exec through to the built-ins, after saying it has started. */
static int mark_started(void *opaque, const struct box_exec_request *req,
			struct box_exec_result *result)
{
	(void)opaque;
	(void)req;
	(void)result;
	sem_post(&exec_started);
	return 0;
}

static void *run_waiting_exec(void *opaque)
{
	struct waiting_exec *exec = opaque;
	struct box_exec_request req = { .program = exec->program, .args = exec->args,
					.arg_count = exec->arg_count,
					.service_name = exec->service_name };

	exec->rc = box_exec(exec->box, &req, &exec->result);
	return NULL;
}

static struct box *open_mock(void)
{
	struct box_config cfg = { .mode = BOX_MODE_MOCK, .name = "cancel",
				  .mock_handler = mark_started };
	char err[TEST_ERROR_MAX];
	struct box *box = NULL;

	CHECK_INT_EQ(box_open(&cfg, &box, err, sizeof(err)), 0);
	return box;
}

static void start_waiting(struct waiting_exec *exec)
{
	CHECK_INT_EQ(pthread_create(&exec->thread, NULL, run_waiting_exec, exec), 0);
	sem_wait(&exec_started);
}

static void check_cancelled(struct waiting_exec *exec)
{
	pthread_join(exec->thread, NULL);
	CHECK_INT_EQ(exec->rc, -ECANCELED);
	CHECK(exec->result.error && strstr(exec->result.error, "cancelled"));
	box_exec_result_free(&exec->result);
}

static void test_cancel_ends_waiting_execs_and_refuses_more(void)
{
	static const char *const sleep_args[] = { "600" };
	static const char *const serve_args[] = { "/srv/ready", "up" };
	static const char *const barrier_args[] = { "never", "2", "600" };
	static const char *const echo_args[] = { "late" };
	struct box *first = open_mock(), *second = open_mock();
	struct waiting_exec sleeping = { .box = first, .program = "sleep", .args = sleep_args,
					 .arg_count = 1 };
	struct waiting_exec serving = { .box = first, .program = "mock-serve", .args = serve_args,
					.arg_count = 2, .service_name = "web" };
	struct waiting_exec waiting = { .box = second, .program = "mock-barrier",
					.args = barrier_args, .arg_count = 3 };
	struct box_exec_request late = { .program = "echo", .args = echo_args, .arg_count = 1 };
	struct box_config cfg = { .mode = BOX_MODE_MOCK };
	struct box_exec_result result;
	char err[TEST_ERROR_MAX];
	struct box *refused = NULL;

	if (!first || !second)
		return;
	CHECK(!box_cancelled());
	start_waiting(&sleeping);
	start_waiting(&serving);
	start_waiting(&waiting);
	box_cancel_all(false);
	CHECK(box_cancelled());
	check_cancelled(&sleeping);
	check_cancelled(&serving);
	check_cancelled(&waiting);

	/* nothing new runs in a cancelled process */
	CHECK_INT_EQ(box_exec(first, &late, &result), -ECANCELED);
	box_exec_result_free(&result);
	CHECK_INT_EQ(box_open(&cfg, &refused, err, sizeof(err)), -ECANCELED);
	CHECK(refused == NULL);
	CHECK(strstr(err, "cancelled") != NULL);

	/* the force pass and a repeated cancel are harmless; the boxes still close */
	box_cancel_all(true);
	box_cancel_all(false);
	box_close(first, true);
	box_close(second, false);
}

int main(void)
{
	sem_init(&exec_started, 0, 0);
	RUN_TEST(test_cancel_ends_waiting_execs_and_refuses_more);
	sem_destroy(&exec_started);
	return harness_finish();
}
