/*
 * Strict parsing of the whole numbers users type (flags, environment variables): decimal
 * digits only -- no sign, no spaces, no suffix, no empty string -- within [min, max]. strtoul
 * alone accepts " 12", "-1" (as a huge value) and "12abc"; every caller used to add its own
 * checks around it.
 */
#ifndef VOIDBOX_COMMON_PARSE_NUMBER_H
#define VOIDBOX_COMMON_PARSE_NUMBER_H

#include <stdint.h>

/* 0 with *out, -EINVAL (not a plain decimal) or -ERANGE (outside [min, max]). */
int parse_decimal_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

#endif
