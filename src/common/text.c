/*
 * Text helpers (see text.h). The UTF-8 checks follow RFC 3629's table of well-formed byte
 * sequences, the same rules jansson applies, so repaired text is always a valid JSON string.
 */
#include <stdbool.h>
#include <stdint.h>

#include "common/text.h"

#define TEXT_FIRST_PRINTABLE 0x20
#define TEXT_DEL 0x7f
#define TEXT_ASCII_END 0x80
/* U+0080..U+009F, the C1 controls, are 0xC2 followed by 0x80..0x9F */
#define TEXT_C1_LEAD 0xc2
#define TEXT_C1_LAST 0x9f
#define TEXT_REPLACEMENT '?'
#define TEXT_CONTINUATION_MASK 0xc0
#define TEXT_CONTINUATION_BITS 0x80
#define TEXT_CONTINUATION_FIRST 0x80
#define TEXT_CONTINUATION_LAST 0xbf
#define TEXT_UTF8_LONGEST 4

/* The lead bytes of RFC 3629's table, and the range each allows for the byte after it. */
#define TEXT_TWO_FIRST 0xc2
#define TEXT_TWO_LAST 0xdf
#define TEXT_THREE_E0 0xe0
#define TEXT_THREE_E0_SECOND_FIRST 0xa0
#define TEXT_THREE_ED 0xed
#define TEXT_THREE_ED_SECOND_LAST 0x9f
#define TEXT_THREE_LAST 0xef
#define TEXT_FOUR_F0 0xf0
#define TEXT_FOUR_F0_SECOND_FIRST 0x90
#define TEXT_FOUR_F4 0xf4
#define TEXT_FOUR_F4_SECOND_LAST 0x8f

static bool text_is_continuation(uint8_t byte)
{
	return (byte & TEXT_CONTINUATION_MASK) == TEXT_CONTINUATION_BITS;
}

void text_make_printable(char *text, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		uint8_t byte = (uint8_t)text[i];

		if (byte < TEXT_FIRST_PRINTABLE || byte == TEXT_DEL) {
			text[i] = ' ';
		} else if (byte == TEXT_C1_LEAD && i + 1 < len &&
			   (uint8_t)text[i + 1] >= TEXT_CONTINUATION_FIRST &&
			   (uint8_t)text[i + 1] <= TEXT_C1_LAST) {
			text[i] = ' ';
			text[i + 1] = ' ';
			i++;
		}
	}
}

/* The length of the well-formed sequence at text[0], or 0 when it is not one. */
static size_t text_utf8_sequence(const uint8_t *text, size_t len)
{
	uint8_t lead = text[0];
	uint8_t second_first = TEXT_CONTINUATION_FIRST, second_last = TEXT_CONTINUATION_LAST;
	size_t need;

	if (lead < TEXT_ASCII_END)
		return 1;
	if (lead >= TEXT_TWO_FIRST && lead <= TEXT_TWO_LAST)
		need = 2;
	else if (lead >= TEXT_THREE_E0 && lead <= TEXT_THREE_LAST)
		need = 3;
	else if (lead >= TEXT_FOUR_F0 && lead <= TEXT_FOUR_F4)
		need = 4;
	else
		return 0;
	if (lead == TEXT_THREE_E0)
		second_first = TEXT_THREE_E0_SECOND_FIRST;
	else if (lead == TEXT_THREE_ED)
		second_last = TEXT_THREE_ED_SECOND_LAST;
	else if (lead == TEXT_FOUR_F0)
		second_first = TEXT_FOUR_F0_SECOND_FIRST;
	else if (lead == TEXT_FOUR_F4)
		second_last = TEXT_FOUR_F4_SECOND_LAST;
	if (len < need || text[1] < second_first || text[1] > second_last)
		return 0;
	for (size_t i = 2; i < need; i++)
		if (!text_is_continuation(text[i]))
			return 0;
	return need;
}

void text_utf8_repair(char *text, size_t len)
{
	size_t i = 0;

	while (i < len) {
		size_t step = text_utf8_sequence((const uint8_t *)text + i, len - i);

		if (step == 0) {
			text[i] = TEXT_REPLACEMENT;
			step = 1;
		}
		i += step;
	}
}

size_t text_utf8_cut(const char *text, size_t len, size_t max)
{
	size_t cut = max;

	if (len <= max)
		return len;
	/* back off over the continuation bytes of the sequence the cut falls in */
	while (cut > 0 && max - cut < TEXT_UTF8_LONGEST - 1 &&
	       text_is_continuation((uint8_t)text[cut]))
		cut--;
	return text_is_continuation((uint8_t)text[cut]) ? max : cut;
}
