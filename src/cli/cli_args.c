/*
 * Argument helpers every subcommand shares, so a flag means the same thing and fails the same
 * way whichever command it is given to.
 */
#include <stdio.h>

#include "cli/cli.h"
#include "common/parse_number.h"

bool cli_parse_number(const char *command, const char *flag, const char *text, uint64_t min,
		      uint64_t max, uint64_t *out)
{
	if (parse_decimal_u64(text, min, max, out) == 0)
		return true;
	fprintf(stderr, "voidbox %s: %s takes a whole number from %llu to %llu, not '%s'\n",
		command, flag, (unsigned long long)min, (unsigned long long)max, text);
	return false;
}

bool cli_parse_uint(const char *command, const char *flag, const char *text, unsigned int min,
		    unsigned int max, unsigned int *out)
{
	uint64_t value = 0;

	if (!cli_parse_number(command, flag, text, min, max, &value))
		return false;
	*out = (unsigned int)value;
	return true;
}
