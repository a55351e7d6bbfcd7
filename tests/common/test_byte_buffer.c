/*
 * The little-endian writer and bounded reader: values round-trip with the byte order on the
 * wire fixed, strings carry their length, and a reader given too little, too long a string,
 * a NUL inside one, or bytes left over reports failure instead of reading past its input.
 */
#include <errno.h>
#include <string.h>

#include "common/byte_buffer.h"
#include "harness.h"

static void test_round_trip_and_byte_order(void)
{
	static const uint8_t expected_prefix[] = { 0x11, 0x22, 0x11, 0x44, 0x33, 0x22, 0x11 };
	struct byte_writer w;
	struct byte_reader r;
	char text[16];
	uint8_t raw[3];

	byte_writer_init(&w);
	byte_writer_u8(&w, 0x11);
	byte_writer_u16(&w, 0x1122);
	byte_writer_u32(&w, 0x11223344u);
	byte_writer_u64(&w, 0x0102030405060708ull);
	byte_writer_string(&w, "hello");
	byte_writer_bytes(&w, "abc", 3);
	CHECK(!byte_writer_failed(&w));
	CHECK(memcmp(w.data, expected_prefix, sizeof(expected_prefix)) == 0);
	byte_reader_init(&r, w.data, w.len);
	CHECK_INT_EQ(byte_reader_u8(&r), 0x11);
	CHECK_INT_EQ(byte_reader_u16(&r), 0x1122);
	CHECK(byte_reader_u32(&r) == 0x11223344u);
	CHECK(byte_reader_u64(&r) == 0x0102030405060708ull);
	byte_reader_string(&r, text, sizeof(text));
	CHECK_STR_EQ(text, "hello");
	byte_reader_bytes(&r, raw, sizeof(raw));
	CHECK(memcmp(raw, "abc", 3) == 0);
	CHECK_INT_EQ(byte_reader_finish(&r), 0);
	byte_writer_free(&w);
}

static void test_reader_refuses_short_and_long_inputs(void)
{
	const uint8_t short_input[3] = { 1, 2, 3 };
	struct byte_reader r;

	byte_reader_init(&r, short_input, sizeof(short_input));
	CHECK(byte_reader_u32(&r) == 0);
	CHECK_INT_EQ(byte_reader_finish(&r), -EBADMSG);
	/* sticky: nothing more is read once failed */
	CHECK_INT_EQ(byte_reader_u8(&r), 0);
	CHECK(byte_reader_view(&r, 1) == NULL);
	/* leftover bytes fail the finish */
	byte_reader_init(&r, short_input, sizeof(short_input));
	byte_reader_u16(&r);
	CHECK_INT_EQ(byte_reader_finish(&r), -EBADMSG);
	CHECK_INT_EQ(byte_reader_remaining(&r), 1);
}

static void test_strings_checked(void)
{
	const uint8_t too_long[] = { 5, 0, 'a', 'b', 'c', 'd', 'e' };
	const uint8_t with_nul[] = { 3, 0, 'a', 0, 'b' };
	const uint8_t past_end[] = { 200, 0, 'a' };
	char out[4];
	struct byte_reader r;

	byte_reader_init(&r, too_long, sizeof(too_long));
	byte_reader_string(&r, out, sizeof(out));
	CHECK_INT_EQ(byte_reader_finish(&r), -EBADMSG);
	CHECK_STR_EQ(out, "");
	byte_reader_init(&r, with_nul, sizeof(with_nul));
	byte_reader_string(&r, out, sizeof(out));
	CHECK_INT_EQ(byte_reader_finish(&r), -EBADMSG);
	byte_reader_init(&r, past_end, sizeof(past_end));
	byte_reader_string(&r, out, sizeof(out));
	CHECK_INT_EQ(byte_reader_finish(&r), -EBADMSG);
}

static void test_writer_growth(void)
{
	struct byte_writer w;
	struct byte_reader r;

	byte_writer_init(&w);
	byte_writer_u64(&w, 42);
	for (int i = 0; i < 10000; i++)
		byte_writer_u32(&w, (uint32_t)i);
	CHECK(!byte_writer_failed(&w));
	CHECK_INT_EQ(w.len, sizeof(uint64_t) + 10000 * sizeof(uint32_t));
	byte_reader_init(&r, w.data, w.len);
	CHECK(byte_reader_u64(&r) == 42);
	for (int i = 0; i < 10000; i++)
		if (byte_reader_u32(&r) != (uint32_t)i)
			CHECK(!"a value changed while the buffer grew");
	CHECK_INT_EQ(byte_reader_finish(&r), 0);
	byte_writer_free(&w);
}

int main(void)
{
	RUN_TEST(test_round_trip_and_byte_order);
	RUN_TEST(test_reader_refuses_short_and_long_inputs);
	RUN_TEST(test_strings_checked);
	RUN_TEST(test_writer_growth);
	return harness_finish();
}
