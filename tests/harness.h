/*
 * A deliberately tiny test harness: checks record failures and keep going, so one run shows
 * every broken expectation; the final line is "N passed, N failed" as CI reads it.
 *
 * Every failed check fails the program, wherever it is: a CHECK outside any RUN_TEST (after
 * the last test, say) counts as one more failed test in harness_finish. Three ways to stop
 * early, each for one kind of cause:
 * - harness_skip_all: the environment genuinely cannot run the test (a tool or device this
 *   machine does not have); exits 77, meson's skip code, after printing why.
 * - harness_skip_vm: the same for a VM test (no usable KVM, no guest image), except that under
 *   VOIDBOX_REQUIRE_VM=1 (CI) it is a failure: CI may not pass without booting a VM.
 * - harness_fail_setup: the test's own setup broke (a temporary directory, a socketpair, a
 *   missing argument); that is a failure, never a skip.
 *
 * A test that needs what a machine may lack (a tool, root, a real kernel tree) is registered
 * with RUN_SEPARATE_TEST and given its own meson test that runs the program with
 * --only=NAME (harness_select reads it): there it may skip with a reason while the program's
 * other tests, run without --only, still count. --only naming no such test is a failure.
 */
#ifndef VOIDBOX_TESTS_HARNESS_H
#define VOIDBOX_TESTS_HARNESS_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HARNESS_SKIP_EXIT_CODE 77
#define HARNESS_FAIL_EXIT_CODE 1
#define HARNESS_REQUIRE_VM_ENV "VOIDBOX_REQUIRE_VM"
#define HARNESS_ONLY_OPTION "--only="

/* Whether the program runs under valgrind, which cannot run seccomp-filtered threads. */
#if defined(__has_include) && __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HARNESS_UNDER_VALGRIND (RUNNING_ON_VALGRIND != 0)
#else
#define HARNESS_UNDER_VALGRIND false
#endif

static int harness_checks_failed_in_test;
static int harness_checks_failed_outside_tests;
static const char *harness_current_test;
static int harness_tests_passed;
static int harness_tests_failed;
static const char *harness_only_test;
static int harness_only_test_runs;

/* Reads --only=NAME from any argument: then only the RUN_SEPARATE_TEST named NAME runs. */
static inline void harness_select(int argc, char **argv)
{
	size_t prefix_len = strlen(HARNESS_ONLY_OPTION);

	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], HARNESS_ONLY_OPTION, prefix_len) == 0)
			harness_only_test = argv[i] + prefix_len;
}

/* Counts one failed check against the running test, or against the program when none runs. */
static inline void harness_check_failed(void)
{
	if (harness_current_test)
		harness_checks_failed_in_test++;
	else
		harness_checks_failed_outside_tests++;
}

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
			harness_check_failed();                                              \
		}                                                                            \
	} while (0)

#define CHECK_INT_EQ(actual, expected)                                                       \
	do {                                                                                 \
		long long harness_a = (long long)(actual), harness_e = (long long)(expected);  \
		if (harness_a != harness_e) {                                                \
			fprintf(stderr, "  FAIL %s:%d: %s == %lld, expected %lld\n", __FILE__, \
				__LINE__, #actual, harness_a, harness_e);                    \
			harness_check_failed();                                              \
		}                                                                            \
	} while (0)

#define CHECK_STR_EQ(actual, expected)                                                       \
	do {                                                                                 \
		const char *harness_a = (actual), *harness_e = (expected);                   \
		if (!harness_a || !harness_e || strcmp(harness_a, harness_e) != 0) {         \
			fprintf(stderr, "  FAIL %s:%d: %s == \"%s\", expected \"%s\"\n",     \
				__FILE__, __LINE__, #actual, harness_a ? harness_a : "(null)", \
				harness_e ? harness_e : "(null)");                           \
			harness_check_failed();                                              \
		}                                                                            \
	} while (0)

#define HARNESS_RUN(fn)                                                                      \
	do {                                                                                 \
		harness_checks_failed_in_test = 0;                                           \
		harness_current_test = #fn;                                                  \
		fprintf(stderr, "test %s\n", #fn);                                           \
		fn();                                                                        \
		harness_current_test = NULL;                                                 \
		if (harness_checks_failed_in_test) {                                         \
			harness_tests_failed++;                                              \
			fprintf(stderr, "  -> FAILED %s\n", #fn);                            \
		} else {                                                                     \
			harness_tests_passed++;                                              \
		}                                                                            \
	} while (0)

/* One of the program's own tests: runs unless --only picked a separate one. */
#define RUN_TEST(fn)                                                                         \
	do {                                                                                 \
		if (!harness_only_test)                                                      \
			HARNESS_RUN(fn);                                                     \
	} while (0)

/* A test with a meson test of its own: runs only under --only=fn. */
#define RUN_SEPARATE_TEST(fn)                                                                \
	do {                                                                                 \
		if (harness_only_test && strcmp(harness_only_test, #fn) == 0) {              \
			harness_only_test_runs++;                                            \
			HARNESS_RUN(fn);                                                     \
		}                                                                            \
	} while (0)

static inline int harness_finish(void)
{
	int failed = harness_tests_failed;

	if (harness_only_test && !harness_only_test_runs) {
		fprintf(stderr, "  -> FAILED %s%s names no separate test of this program\n",
			HARNESS_ONLY_OPTION, harness_only_test);
		failed++;
	}

	if (harness_checks_failed_outside_tests) {
		fprintf(stderr, "  -> FAILED %d check(s) outside any test (see FAIL lines above)\n",
			harness_checks_failed_outside_tests);
		failed++;
	}
	printf("%d passed, %d failed\n", harness_tests_passed, failed);
	return failed ? HARNESS_FAIL_EXIT_CODE : 0;
}

static inline void harness_skip_all(const char *why)
{
	printf("SKIP: %s\n", why);
	exit(HARNESS_SKIP_EXIT_CODE);
}

/* The test's own setup broke: one more failure on top of what already ran, and stop. */
static inline void harness_fail_setup(const char *why)
{
	printf("FAIL: test setup: %s\n", why);
	printf("%d passed, %d failed\n", harness_tests_passed, harness_tests_failed + 1);
	exit(HARNESS_FAIL_EXIT_CODE);
}

static inline bool harness_vm_required(void)
{
	const char *require = getenv(HARNESS_REQUIRE_VM_ENV);

	return require && strcmp(require, "1") == 0;
}

/* A VM test that cannot boot here: a skip, or under VOIDBOX_REQUIRE_VM=1 a failure. */
static inline void harness_skip_vm(const char *why)
{
	if (harness_vm_required()) {
		printf("FAIL: %s=1 and this VM test cannot run: %s\n", HARNESS_REQUIRE_VM_ENV, why);
		printf("0 passed, 1 failed\n");
		exit(HARNESS_FAIL_EXIT_CODE);
	}
	harness_skip_all(why);
}

#endif
