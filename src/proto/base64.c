/*
 * RFC 4648 base64 (standard alphabet, padded) for the protocol's bulk byte fields.
 *
 * The decoder is strict: the length must be a multiple of four, padding may only close the
 * text, and unused trailing bits must be zero, so every byte string has exactly one wire form
 * and hostile text cannot smuggle ambiguity. The decoded size is checked against
 * PROTO_MAX_PAYLOAD before the output is allocated.
 */
#include "proto/protocol.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define B64_GROUP_CHARS 4
#define B64_GROUP_BYTES 3
#define B64_BITS_PER_CHAR 6
#define B64_CHAR_MASK 0x3fu
#define B64_PAD '='
#define B64_INVALID 0xff
#define B64_BITS_PER_BYTE 8
#define B64_ACC_MASK 0xffffffu /* never more than 24 live bits */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *proto_base64_encode(const uint8_t *data, size_t len)
{
	size_t groups = (len + B64_GROUP_BYTES - 1) / B64_GROUP_BYTES;
	char *text, *p;
	size_t i;

	if (groups > (SIZE_MAX - 1) / B64_GROUP_CHARS)
		return NULL;
	text = malloc(groups * B64_GROUP_CHARS + 1);
	if (!text)
		return NULL;
	p = text;
	for (i = 0; i + B64_GROUP_BYTES <= len; i += B64_GROUP_BYTES) {
		uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];

		*p++ = b64_alphabet[(v >> 18) & B64_CHAR_MASK];
		*p++ = b64_alphabet[(v >> 12) & B64_CHAR_MASK];
		*p++ = b64_alphabet[(v >> 6) & B64_CHAR_MASK];
		*p++ = b64_alphabet[v & B64_CHAR_MASK];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)data[i] << 16;

		*p++ = b64_alphabet[(v >> 18) & B64_CHAR_MASK];
		*p++ = b64_alphabet[(v >> 12) & B64_CHAR_MASK];
		*p++ = B64_PAD;
		*p++ = B64_PAD;
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8;

		*p++ = b64_alphabet[(v >> 18) & B64_CHAR_MASK];
		*p++ = b64_alphabet[(v >> 12) & B64_CHAR_MASK];
		*p++ = b64_alphabet[(v >> 6) & B64_CHAR_MASK];
		*p++ = B64_PAD;
	}
	*p = '\0';
	return text;
}

static uint8_t b64_char_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return (uint8_t)(c - 'A');
	if (c >= 'a' && c <= 'z')
		return (uint8_t)(c - 'a' + 26);
	if (c >= '0' && c <= '9')
		return (uint8_t)(c - '0' + 52);
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return B64_INVALID;
}

/* Number of '=' at the end of a group-aligned text, or -1 when padding is malformed. */
static int b64_padding(const char *text, size_t text_len)
{
	int pad = 0;

	if (text_len == 0)
		return 0;
	if (text[text_len - 1] == B64_PAD)
		pad++;
	if (pad && text[text_len - 2] == B64_PAD)
		pad++;
	for (size_t i = 0; i < text_len - (size_t)pad; i++)
		if (text[i] == B64_PAD)
			return -1;
	return pad;
}

int proto_base64_decode(const char *text, size_t text_len, struct proto_bytes *out)
{
	size_t out_len, o = 0;
	uint32_t acc = 0;
	int pad, bits = 0;
	uint8_t *data;

	out->data = NULL;
	out->len = 0;
	if (text_len % B64_GROUP_CHARS)
		return -EINVAL;
	/* at most two padding characters: refuse oversize text before reading it */
	if (text_len / B64_GROUP_CHARS * B64_GROUP_BYTES > PROTO_MAX_PAYLOAD + 2)
		return -EMSGSIZE;
	pad = b64_padding(text, text_len);
	if (pad < 0)
		return -EINVAL;
	out_len = text_len / B64_GROUP_CHARS * B64_GROUP_BYTES - (size_t)pad;
	if (out_len > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (out_len == 0)
		return 0;
	data = malloc(out_len);
	if (!data)
		return -ENOMEM;
	for (size_t i = 0; i < text_len - (size_t)pad; i++) {
		uint8_t v = b64_char_value(text[i]);

		if (v == B64_INVALID)
			goto invalid;
		acc = (acc << B64_BITS_PER_CHAR | v) & B64_ACC_MASK;
		bits += B64_BITS_PER_CHAR;
		if (bits >= B64_BITS_PER_BYTE) {
			bits -= B64_BITS_PER_BYTE;
			data[o++] = (uint8_t)(acc >> bits);
		}
	}
	/* The leftover bits of a padded group must be zero (canonical encoding). */
	if (acc & ((1u << bits) - 1))
		goto invalid;
	out->data = data;
	out->len = out_len;
	return 0;

invalid:
	free(data);
	return -EINVAL;
}
