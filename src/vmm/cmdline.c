/*
 * Command-line assembly with one snprintf and a length check: the kernel silently truncates
 * an over-long command line, which would cut off the secret, so overflow is an error here.
 */
#include "vmm/cmdline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

void cmdline_secret_hex(const uint8_t secret[CMDLINE_SECRET_LEN], char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < CMDLINE_SECRET_LEN; i++) {
		out[2 * i] = digits[secret[i] >> 4];
		out[2 * i + 1] = digits[secret[i] & 0xf];
	}
	out[CMDLINE_SECRET_HEX_LEN] = '\0';
}

int cmdline_build(char *out, size_t outlen, const uint8_t secret[CMDLINE_SECRET_LEN],
		  uint64_t clock_secs, const char *extra)
{
	char hex[CMDLINE_SECRET_HEX_LEN + 1];
	bool has_extra = extra && extra[0];

	cmdline_secret_hex(secret, hex);
	int n = snprintf(out, outlen, "%s voidbox.secret=%s voidbox.clock=%" PRIu64 "%s%s",
			 CMDLINE_BASE, hex, clock_secs, has_extra ? " " : "",
			 has_extra ? extra : "");

	if (n < 0 || (size_t)n >= outlen || n >= CMDLINE_MAX)
		return -E2BIG;
	return n;
}
