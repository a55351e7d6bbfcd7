/*
 * Kernel command line parsing: the secret must be exactly 64 hex digits, the clock a plain
 * decimal, and module parameters are gathered per module with '-'/'_' equivalence.
 */
#include "cmdline.h"

#include "harness.h"

#include <errno.h>

#define SECRET_HEX "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static void test_secret_and_clock(void)
{
	struct agent_cmdline parsed;

	CHECK_INT_EQ(cmdline_parse("console=ttyS0 voidbox.secret=" SECRET_HEX
				   " voidbox.clock=1764100000 quiet", &parsed), 0);
	CHECK(parsed.has_secret);
	CHECK_INT_EQ(parsed.secret[0], 0x00);
	CHECK_INT_EQ(parsed.secret[15], 0x0f);
	CHECK_INT_EQ(parsed.secret[31], 0x1f);
	CHECK(parsed.has_clock);
	CHECK_INT_EQ(parsed.clock_epoch_secs, 1764100000LL);
}

static void test_secret_rejects_bad_values(void)
{
	struct agent_cmdline parsed;

	cmdline_parse("voidbox.secret=abcd", &parsed);
	CHECK(!parsed.has_secret);
	cmdline_parse("voidbox.secret=" SECRET_HEX "00", &parsed);
	CHECK(!parsed.has_secret);
	cmdline_parse("voidbox.secret=zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		      &parsed);
	CHECK(!parsed.has_secret);
	cmdline_parse("xvoidbox.secret=" SECRET_HEX, &parsed);
	CHECK(!parsed.has_secret);
	cmdline_parse("", &parsed);
	CHECK(!parsed.has_secret);
	CHECK(!parsed.has_clock);
	cmdline_parse(NULL, &parsed);
	CHECK(!parsed.has_secret);
}

static void test_secret_uppercase_accepted(void)
{
	struct agent_cmdline parsed;

	cmdline_parse("voidbox.secret=FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100",
		      &parsed);
	CHECK(parsed.has_secret);
	CHECK_INT_EQ(parsed.secret[0], 0xff);
	CHECK_INT_EQ(parsed.secret[31], 0x00);
}

static void test_clock_rejects_bad_values(void)
{
	struct agent_cmdline parsed;

	cmdline_parse("voidbox.clock=-5", &parsed);
	CHECK(!parsed.has_clock);
	cmdline_parse("voidbox.clock=12abc", &parsed);
	CHECK(!parsed.has_clock);
	cmdline_parse("voidbox.clock=", &parsed);
	CHECK(!parsed.has_clock);
	cmdline_parse("voidbox.clock=99999999999999999999999", &parsed);
	CHECK(!parsed.has_clock);
	cmdline_parse("voidbox.clock=0", &parsed);
	CHECK(parsed.has_clock);
	CHECK_INT_EQ(parsed.clock_epoch_secs, 0);
}

static void test_module_params(void)
{
	const char *text = "virtio_mmio.device=512@0xd0000000:10 quiet "
			   "virtio-mmio.device=512@0xd0800000:11 vsock.x=1 virtio_mmio.=bad "
			   "virtio_mmio.flag virtio_mmiox.device=no";
	char out[128];

	CHECK_INT_EQ(cmdline_module_params(text, "virtio_mmio", out, sizeof(out)),
		     (int)strlen("device=512@0xd0000000:10 device=512@0xd0800000:11"));
	CHECK_STR_EQ(out, "device=512@0xd0000000:10 device=512@0xd0800000:11");
	CHECK_INT_EQ(cmdline_module_params(text, "vsock", out, sizeof(out)), 3);
	CHECK_STR_EQ(out, "x=1");
	CHECK_INT_EQ(cmdline_module_params(text, "virtio", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "");
	CHECK_INT_EQ(cmdline_module_params(text, "virtio_mmio", out, 8), -ENOSPC);
}

static void test_hex_decode(void)
{
	uint8_t out[2];

	CHECK_INT_EQ(cmdline_hex_decode("a0B1", 4, out, 2), 0);
	CHECK_INT_EQ(out[0], 0xa0);
	CHECK_INT_EQ(out[1], 0xb1);
	CHECK_INT_EQ(cmdline_hex_decode("a0B", 3, out, 2), -EINVAL);
	CHECK_INT_EQ(cmdline_hex_decode("a0g1", 4, out, 2), -EINVAL);
}

int main(void)
{
	RUN_TEST(test_secret_and_clock);
	RUN_TEST(test_secret_rejects_bad_values);
	RUN_TEST(test_secret_uppercase_accepted);
	RUN_TEST(test_clock_rejects_bad_values);
	RUN_TEST(test_module_params);
	RUN_TEST(test_hex_decode);
	return harness_finish();
}
