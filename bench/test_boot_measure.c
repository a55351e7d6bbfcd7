/*
 * Unit test of the boot benchmark's measuring code on fixed input: an smaps text with a
 * guest-RAM-sized mapping among others, one without any, and nearest-rank percentiles.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "boot_measure.h"
#include "harness.h"

#define GUEST_BYTES (256ull * 1024 * 1024)

static const char smaps_with_guest[] =
	"55d0c0000000-55d0c0021000 r-xp 00000000 08:01 1234 /usr/bin/voidbox\n"
	"Size:                132 kB\n"
	"Rss:                 120 kB\n"
	"Pss:                 120 kB\n"
	"7f0000000000-7f0010000000 rw-p 00000000 00:00 0 \n"
	"Size:             262144 kB\n"
	"Rss:              40000 kB\n"
	"AnonHugePages:    32768 kB\n"
	"Swap:                 0 kB\n"
	"7f0010000000-7f0010001000 ---p 00000000 00:00 0 \n"
	"Rss:                   0 kB\n"
	"7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]\n"
	"Size:                132 kB\n"
	"Rss:                  16 kB\n"
	"VmFlags: rd wr mr mw me gd ac\n";

static const char smaps_without_guest[] =
	"55d0c0000000-55d0c0021000 r-xp 00000000 08:01 1234 /usr/bin/voidbox\n"
	"Rss:                 120 kB\n";

static FILE *stream_of(const char *text)
{
	return fmemopen((void *)text, strlen(text), "r");
}

static void test_smaps_subtracts_the_guest_mapping(void)
{
	struct boot_memory_sample sample;
	FILE *in = stream_of(smaps_with_guest);

	CHECK(in != NULL);
	if (!in)
		return;
	CHECK_INT_EQ(boot_memory_parse_smaps(in, GUEST_BYTES, &sample), 0);
	CHECK_INT_EQ(sample.total_rss_kb, 120 + 40000 + 0 + 16);
	CHECK_INT_EQ(sample.guest_rss_kb, 40000);
	CHECK_INT_EQ(sample.vmm_rss_kb, 136);
	CHECK_INT_EQ(sample.guest_mappings, 1);
	CHECK_INT_EQ(sample.guest_huge_kb, 32768);
	fclose(in);
}

static void test_smaps_without_guest_mapping_is_refused(void)
{
	struct boot_memory_sample sample;
	FILE *in = stream_of(smaps_without_guest);

	CHECK(in != NULL);
	if (!in)
		return;
	CHECK_INT_EQ(boot_memory_parse_smaps(in, GUEST_BYTES, &sample), -ENOENT);
	CHECK_INT_EQ(sample.total_rss_kb, 120);
	fclose(in);
}

static void test_percentiles_are_nearest_rank(void)
{
	double ten[] = { 10, 1, 9, 2, 8, 3, 7, 4, 6, 5 };
	double three[] = { 30, 10, 20 };
	double one[] = { 42 };

	CHECK(boot_percentile(ten, 10, 50) == 5);
	CHECK(boot_percentile(ten, 10, 95) == 10);
	CHECK(boot_percentile(ten, 10, 90) == 9);
	CHECK(boot_percentile(three, 3, 50) == 20);
	CHECK(boot_percentile(three, 3, 95) == 30);
	CHECK(boot_percentile(one, 1, 50) == 42);
	CHECK(boot_percentile(one, 0, 50) == 0);
}

/* The median leaves its input as it was; a count option takes 1..max and nothing else. */
static void test_median_and_count_option(void)
{
	const double three[] = { 30, 10, 20 };
	unsigned int out = 7;

	CHECK(boot_median(three, 3) == 20);
	CHECK(three[0] == 30 && three[1] == 10 && three[2] == 20);
	CHECK(boot_median(three, 0) == 0);
	CHECK(boot_parse_count("test", "--runs", "5", 10, &out) && out == 5);
	CHECK(boot_parse_count("test", "--runs", "10", 10, &out) && out == 10);
	out = 7;
	CHECK(!boot_parse_count("test", "--runs", "11", 10, &out));
	CHECK(!boot_parse_count("test", "--runs", "0", 10, &out));
	CHECK(!boot_parse_count("test", "--runs", "-1", 10, &out));
	CHECK(!boot_parse_count("test", "--runs", "3x", 10, &out));
	CHECK(!boot_parse_count("test", "--runs", "", 10, &out));
	CHECK(out == 7);
}

int main(void)
{
	RUN_TEST(test_smaps_subtracts_the_guest_mapping);
	RUN_TEST(test_smaps_without_guest_mapping_is_refused);
	RUN_TEST(test_percentiles_are_nearest_rank);
	RUN_TEST(test_median_and_count_option);
	return harness_finish();
}
