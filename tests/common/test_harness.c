/*
 * tests/harness.h itself: a test harness whose failures can be lost makes every test that uses
 * it worthless, so each way out of a test program is checked in a forked child (which gets
 * its own copy of the harness's counters) by its exit status: a CHECK outside any RUN_TEST
 * fails the program, a setup failure is a failure, and a VM test's skip becomes a failure
 * under VOIDBOX_REQUIRE_VM=1.
 */
#include "harness.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* a child that could not even silence its stdout: matches no expected status */
#define CHILD_BROKEN_EXIT_CODE 99

enum child_action {
	CHILD_CHECK_OUTSIDE_TEST_FAILS,
	CHILD_CHECK_OUTSIDE_TEST_PASSES,
	CHILD_FAIL_SETUP,
	CHILD_SKIP_VM,
	CHILD_SKIP_ALL,
};

static void child_run(enum child_action action)
{
	/* the child starts outside any test, with nothing counted */
	harness_current_test = NULL;
	harness_checks_failed_in_test = 0;
	harness_checks_failed_outside_tests = 0;
	harness_tests_passed = 0;
	harness_tests_failed = 0;
	switch (action) {
	case CHILD_CHECK_OUTSIDE_TEST_FAILS:
		CHECK_INT_EQ(1 + 1, 3);
		break;
	case CHILD_CHECK_OUTSIDE_TEST_PASSES:
		CHECK_INT_EQ(1 + 1, 2);
		break;
	case CHILD_FAIL_SETUP:
		harness_fail_setup("a deliberately broken setup");
		break;
	case CHILD_SKIP_VM:
		harness_skip_vm("a deliberately missing VM");
		break;
	case CHILD_SKIP_ALL:
		harness_skip_all("a deliberately missing tool");
		break;
	}
	exit(harness_finish());
}

/* The exit status of a child that does ACTION with VOIDBOX_REQUIRE_VM set to REQUIRE_VM (or
 * unset when NULL), or -1 when it did not exit normally. */
static int child_status(enum child_action action, const char *require_vm)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* the child's own "N passed, N failed" line is not this program's result */
		if (!freopen("/dev/null", "w", stdout))
			_exit(CHILD_BROKEN_EXIT_CODE);
		if (require_vm)
			setenv(HARNESS_REQUIRE_VM_ENV, require_vm, 1);
		else
			unsetenv(HARNESS_REQUIRE_VM_ENV);
		child_run(action);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static void test_check_outside_any_test_fails_the_program(void)
{
	CHECK_INT_EQ(child_status(CHILD_CHECK_OUTSIDE_TEST_FAILS, NULL), HARNESS_FAIL_EXIT_CODE);
	CHECK_INT_EQ(child_status(CHILD_CHECK_OUTSIDE_TEST_PASSES, NULL), 0);
}

static void test_setup_failure_is_a_failure(void)
{
	CHECK_INT_EQ(child_status(CHILD_FAIL_SETUP, NULL), HARNESS_FAIL_EXIT_CODE);
	CHECK_INT_EQ(child_status(CHILD_FAIL_SETUP, "0"), HARNESS_FAIL_EXIT_CODE);
}

static void test_vm_skip_fails_when_a_vm_is_required(void)
{
	CHECK_INT_EQ(child_status(CHILD_SKIP_VM, NULL), HARNESS_SKIP_EXIT_CODE);
	CHECK_INT_EQ(child_status(CHILD_SKIP_VM, "0"), HARNESS_SKIP_EXIT_CODE);
	CHECK_INT_EQ(child_status(CHILD_SKIP_VM, "1"), HARNESS_FAIL_EXIT_CODE);
	/* a tool-missing skip is not a VM skip: it stays a skip */
	CHECK_INT_EQ(child_status(CHILD_SKIP_ALL, "1"), HARNESS_SKIP_EXIT_CODE);
}

int main(void)
{
	RUN_TEST(test_check_outside_any_test_fails_the_program);
	RUN_TEST(test_setup_failure_is_a_failure);
	RUN_TEST(test_vm_skip_fails_when_a_vm_is_required);
	return harness_finish();
}
