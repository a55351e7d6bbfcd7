/* The strict decimal parser of parse_number.h, with overflow checked digit by digit. */
#include "common/parse_number.h"

#include <errno.h>
#include <stddef.h>

#define PARSE_DECIMAL_BASE 10u

int parse_decimal_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t value = 0;
	size_t i = 0;

	if (!text || !text[0])
		return -EINVAL;
	for (; text[i]; i++) {
		unsigned int digit = (unsigned int)(text[i] - '0');

		if (digit >= PARSE_DECIMAL_BASE)
			return -EINVAL;
		if (value > (UINT64_MAX - digit) / PARSE_DECIMAL_BASE)
			return -ERANGE;
		value = value * PARSE_DECIMAL_BASE + digit;
	}
	if (value < min || value > max)
		return -ERANGE;
	*out = value;
	return 0;
}
