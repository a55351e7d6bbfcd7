/*
 * libFuzzer target for the helpers that make guest text safe to print and to serialise
 * (src/common/text.c): the guest chooses every byte of a step's stderr or an error string.
 * Whatever the input, a repaired copy is a string JSON accepts and repairing it again changes
 * nothing, text that was UTF-8 already is left alone, a cut never passes its bound nor splits
 * a character of valid text, and printable text holds no C0, DEL or C1 control.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/text.h"

/* C1 controls in UTF-8: this lead byte, then a byte up to the last below. */
#define FUZZ_C1_LEAD 0xc2
#define FUZZ_C1_FIRST_SECOND 0x80
#define FUZZ_C1_LAST 0x9f
#define FUZZ_FIRST_PRINTABLE 0x20
#define FUZZ_DEL 0x7f

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool fuzz_is_utf8(const char *text, size_t len)
{
	json_t *value = json_stringn(text, len);

	json_decref(value);
	return value != NULL;
}

static void fuzz_check_repair(const uint8_t *data, size_t size, char *copy)
{
	char *again;

	memcpy(copy, data, size);
	text_utf8_repair(copy, size);
	if (!fuzz_is_utf8(copy, size))
		abort();
	if (fuzz_is_utf8((const char *)data, size) && memcmp(copy, data, size) != 0)
		abort();
	again = malloc(size ? size : 1);
	if (!again)
		return;
	memcpy(again, copy, size);
	text_utf8_repair(again, size);
	if (memcmp(again, copy, size) != 0)
		abort();
	free(again);
}

static void fuzz_check_cut(const uint8_t *data, size_t size, const char *repaired)
{
	size_t max = size ? data[0] : 0;
	size_t cut = text_utf8_cut(repaired, size, max);

	if (cut > size || (size > max && cut > max))
		abort();
	if (!fuzz_is_utf8(repaired, cut))
		abort();
}

static void fuzz_check_printable(const uint8_t *data, size_t size, char *copy)
{
	memcpy(copy, data, size);
	text_make_printable(copy, size);
	for (size_t i = 0; i < size; i++) {
		uint8_t byte = (uint8_t)copy[i];

		if (byte < FUZZ_FIRST_PRINTABLE || byte == FUZZ_DEL)
			abort();
		if (byte == FUZZ_C1_LEAD && i + 1 < size && (uint8_t)copy[i + 1] >= FUZZ_C1_FIRST_SECOND &&
		    (uint8_t)copy[i + 1] <= FUZZ_C1_LAST)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1);

	if (!copy)
		return 0;
	fuzz_check_repair(data, size, copy);
	fuzz_check_cut(data, size, copy);
	fuzz_check_printable(data, size, copy);
	free(copy);
	return 0;
}
