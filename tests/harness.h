/*
 * A deliberately tiny test harness: checks record failures and keep going, so one run shows
 * every broken expectation; the final line is "N passed, N failed" as CI reads it. A test that
 * cannot run exits 77 (meson's skip code) after printing why.
 */
#ifndef VOIDBOX_TESTS_HARNESS_H
#define VOIDBOX_TESTS_HARNESS_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HARNESS_SKIP_EXIT_CODE 77

static int harness_checks_failed_in_test;
static int harness_tests_passed;
static int harness_tests_failed;

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
			harness_checks_failed_in_test++;                                     \
		}                                                                            \
	} while (0)

#define CHECK_INT_EQ(actual, expected)                                                       \
	do {                                                                                 \
		long long harness_a = (long long)(actual), harness_e = (long long)(expected);  \
		if (harness_a != harness_e) {                                                \
			fprintf(stderr, "  FAIL %s:%d: %s == %lld, expected %lld\n", __FILE__, \
				__LINE__, #actual, harness_a, harness_e);                    \
			harness_checks_failed_in_test++;                                     \
		}                                                                            \
	} while (0)

#define CHECK_STR_EQ(actual, expected)                                                       \
	do {                                                                                 \
		const char *harness_a = (actual), *harness_e = (expected);                   \
		if (!harness_a || !harness_e || strcmp(harness_a, harness_e) != 0) {         \
			fprintf(stderr, "  FAIL %s:%d: %s == \"%s\", expected \"%s\"\n",     \
				__FILE__, __LINE__, #actual, harness_a ? harness_a : "(null)", \
				harness_e ? harness_e : "(null)");                           \
			harness_checks_failed_in_test++;                                     \
		}                                                                            \
	} while (0)

#define RUN_TEST(fn)                                                                         \
	do {                                                                                 \
		harness_checks_failed_in_test = 0;                                           \
		fprintf(stderr, "test %s\n", #fn);                                           \
		fn();                                                                        \
		if (harness_checks_failed_in_test) {                                         \
			harness_tests_failed++;                                              \
			fprintf(stderr, "  -> FAILED %s\n", #fn);                            \
		} else {                                                                     \
			harness_tests_passed++;                                              \
		}                                                                            \
	} while (0)

static inline int harness_finish(void)
{
	printf("%d passed, %d failed\n", harness_tests_passed, harness_tests_failed);
	return harness_tests_failed ? 1 : 0;
}

static inline void harness_skip_all(const char *why)
{
	printf("SKIP: %s\n", why);
	exit(HARNESS_SKIP_EXIT_CODE);
}

#endif
