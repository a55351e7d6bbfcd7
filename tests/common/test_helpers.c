/*
 * The small shared helpers: the strict number parser refuses everything strtoul lets through,
 * the whole-transfer loops move every byte (and report a short file), and the monotonic
 * deadlines count forward from now.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/fd_io.h"
#include "common/parse_number.h"
#include "harness.h"

#define TEST_BIG_BYTES (1u << 20)

static void test_parse_decimal_strict(void)
{
	static const char *const refused[] = { "", " 1", "1 ", "-1", "+1", "1x", "0x10", "1.5" };
	uint64_t value = 0;

	CHECK_INT_EQ(parse_decimal_u64("42", 1, 64, &value), 0);
	CHECK(value == 42);
	CHECK_INT_EQ(parse_decimal_u64("0", 0, 0, &value), 0);
	CHECK_INT_EQ(parse_decimal_u64("65", 1, 64, &value), -ERANGE);
	CHECK_INT_EQ(parse_decimal_u64("0", 1, 64, &value), -ERANGE);
	CHECK_INT_EQ(parse_decimal_u64("18446744073709551615", 0, UINT64_MAX, &value), 0);
	CHECK(value == UINT64_MAX);
	CHECK_INT_EQ(parse_decimal_u64("18446744073709551616", 0, UINT64_MAX, &value), -ERANGE);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		CHECK_INT_EQ(parse_decimal_u64(refused[i], 0, UINT64_MAX, &value), -EINVAL);
	CHECK_INT_EQ(parse_decimal_u64(NULL, 0, 1, &value), -EINVAL);
}

/* A megabyte through a socket pair: the writer's short writes and the reader's short reads. */
static void test_whole_transfers(void)
{
	uint8_t *out = malloc(TEST_BIG_BYTES), *in = calloc(1, TEST_BIG_BYTES);
	int pair[2];
	pid_t child;

	CHECK(out && in);
	if (!out || !in || socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
		harness_fail_setup("no memory or socket pair for the transfer test");
	for (size_t i = 0; i < TEST_BIG_BYTES; i++)
		out[i] = (uint8_t)(i * 7);
	child = fork();
	if (child == 0) {
		close(pair[0]);
		_exit(fd_write_full(pair[1], out, TEST_BIG_BYTES) == 0 ? 0 : 1);
	}
	close(pair[1]);
	CHECK(fd_read_full(pair[0], in, TEST_BIG_BYTES) == (ssize_t)TEST_BIG_BYTES);
	CHECK(memcmp(in, out, TEST_BIG_BYTES) == 0);
	/* end of stream: a read of more gets what is left (nothing) */
	CHECK(fd_read_full(pair[0], in, 1) == 0);
	close(pair[0]);
	free(out);
	free(in);
}

static void test_positioned_transfers_and_short_file(void)
{
	char path[] = "/tmp/voidbox-fdio-XXXXXX";
	uint8_t back[8] = { 0 };
	int fd = mkstemp(path);

	if (fd < 0)
		harness_fail_setup("mkstemp failed");
	CHECK_INT_EQ(fd_pwrite_full(fd, "abcdefgh", 8, 100), 0);
	CHECK_INT_EQ(fd_pread_full(fd, back, 8, 100), 0);
	CHECK(memcmp(back, "abcdefgh", 8) == 0);
	CHECK_INT_EQ(fd_pread_full(fd, back, 8, 104), -EBADMSG);
	CHECK_INT_EQ(fd_write_full(-1, "x", 1), -EBADF);
	close(fd);
	unlink(path);
	CHECK_INT_EQ(fsync_dir("/tmp"), 0);
	CHECK_INT_EQ(fsync_dir(path), -ENOENT);
}

static void test_monotonic_deadlines(void)
{
	uint64_t before = clock_monotonic_ms();
	struct timespec deadline = clock_deadline_after_ms(1500);
	uint64_t deadline_ns = (uint64_t)deadline.tv_sec * CLOCK_NSEC_PER_SEC +
			       (uint64_t)deadline.tv_nsec;

	CHECK(deadline_ns >= before * CLOCK_NSEC_PER_MSEC + 1500 * CLOCK_NSEC_PER_MSEC);
	CHECK(deadline.tv_nsec >= 0 && deadline.tv_nsec < (long)CLOCK_NSEC_PER_SEC);
	CHECK(clock_monotonic_ns() / CLOCK_NSEC_PER_MSEC >= before);
}

static void test_array_growth(void)
{
	uint32_t *items = NULL;
	size_t capacity = 0;

	for (size_t used = 0; used < 1000; used++) {
		CHECK(array_reserve_one((void **)&items, &capacity, used, sizeof(*items), 4));
		items[used] = (uint32_t)used;
		CHECK(capacity > used);
	}
	for (size_t i = 0; i < 1000; i++)
		if (items[i] != i)
			CHECK(!"an element changed while the array grew");
	/* a capacity whose doubling would overflow the byte count is refused, items kept */
	capacity = SIZE_MAX / 2 + 1;
	CHECK(!array_reserve_one((void **)&items, &capacity, capacity, sizeof(*items), 4));
	free(items);
}

int main(void)
{
	RUN_TEST(test_parse_decimal_strict);
	RUN_TEST(test_whole_transfers);
	RUN_TEST(test_positioned_transfers_and_short_file);
	RUN_TEST(test_monotonic_deadlines);
	RUN_TEST(test_array_growth);
	return harness_finish();
}
