/*
 * The little-endian writer and bounded reader of byte_buffer.h. The writer doubles its
 * buffer as it grows; the reader checks every length against what is left before it touches
 * a byte, so a hostile or truncated input can only make it fail, never read out of bounds.
 */
#include "common/byte_buffer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BYTE_WRITER_INITIAL_CAP 256u
#define BITS_PER_BYTE 8u

void byte_writer_init(struct byte_writer *w)
{
	memset(w, 0, sizeof(*w));
}

void byte_writer_free(struct byte_writer *w)
{
	free(w->data);
	memset(w, 0, sizeof(*w));
}

bool byte_writer_failed(const struct byte_writer *w)
{
	return w->failed;
}

static bool byte_writer_grow(struct byte_writer *w, size_t extra)
{
	size_t cap = w->cap ? w->cap : BYTE_WRITER_INITIAL_CAP;
	uint8_t *data;

	if (w->failed)
		return false;
	if (extra <= w->cap - w->len)
		return true;
	if (extra > SIZE_MAX / 2 - w->len) {
		w->failed = true;
		return false;
	}
	while (cap - w->len < extra)
		cap *= 2;
	data = realloc(w->data, cap);
	if (!data) {
		w->failed = true;
		return false;
	}
	w->data = data;
	w->cap = cap;
	return true;
}

static void byte_writer_le(struct byte_writer *w, uint64_t value, size_t width)
{
	if (!byte_writer_grow(w, width))
		return;
	for (size_t i = 0; i < width; i++)
		w->data[w->len++] = (uint8_t)(value >> (i * BITS_PER_BYTE));
}

void byte_writer_u8(struct byte_writer *w, uint8_t value)
{
	byte_writer_le(w, value, sizeof(value));
}

void byte_writer_u16(struct byte_writer *w, uint16_t value)
{
	byte_writer_le(w, value, sizeof(value));
}

void byte_writer_u32(struct byte_writer *w, uint32_t value)
{
	byte_writer_le(w, value, sizeof(value));
}

void byte_writer_u64(struct byte_writer *w, uint64_t value)
{
	byte_writer_le(w, value, sizeof(value));
}

void byte_writer_bytes(struct byte_writer *w, const void *data, size_t len)
{
	if (len == 0 || !byte_writer_grow(w, len))
		return;
	memcpy(w->data + w->len, data, len);
	w->len += len;
}

void byte_writer_string(struct byte_writer *w, const char *text)
{
	size_t len = strlen(text);

	if (len > BYTE_BUFFER_STRING_MAX) {
		w->failed = true;
		return;
	}
	byte_writer_u16(w, (uint16_t)len);
	byte_writer_bytes(w, text, len);
}



void byte_reader_init(struct byte_reader *r, const void *data, size_t len)
{
	*r = (struct byte_reader){ .data = data, .len = len };
}

const uint8_t *byte_reader_view(struct byte_reader *r, size_t len)
{
	const uint8_t *at;

	if (r->failed || len > r->len - r->pos) {
		r->failed = true;
		return NULL;
	}
	at = r->data + r->pos;
	r->pos += len;
	return at;
}

static uint64_t byte_reader_le(struct byte_reader *r, size_t width)
{
	const uint8_t *at = byte_reader_view(r, width);
	uint64_t value = 0;

	if (!at)
		return 0;
	for (size_t i = 0; i < width; i++)
		value |= (uint64_t)at[i] << (i * BITS_PER_BYTE);
	return value;
}

uint8_t byte_reader_u8(struct byte_reader *r)
{
	return (uint8_t)byte_reader_le(r, sizeof(uint8_t));
}

uint16_t byte_reader_u16(struct byte_reader *r)
{
	return (uint16_t)byte_reader_le(r, sizeof(uint16_t));
}

uint32_t byte_reader_u32(struct byte_reader *r)
{
	return (uint32_t)byte_reader_le(r, sizeof(uint32_t));
}

uint64_t byte_reader_u64(struct byte_reader *r)
{
	return byte_reader_le(r, sizeof(uint64_t));
}

void byte_reader_bytes(struct byte_reader *r, void *out, size_t len)
{
	const uint8_t *at = byte_reader_view(r, len);

	if (at)
		memcpy(out, at, len);
	else if (len)
		memset(out, 0, len);
}

void byte_reader_string(struct byte_reader *r, char *out, size_t cap)
{
	uint16_t len = byte_reader_u16(r);
	const uint8_t *at = byte_reader_view(r, len);

	if (cap)
		out[0] = '\0';
	if (!at)
		return;
	if ((size_t)len >= cap || memchr(at, '\0', len)) {
		r->failed = true;
		return;
	}
	memcpy(out, at, len);
	out[len] = '\0';
}

size_t byte_reader_remaining(const struct byte_reader *r)
{
	return r->failed ? 0 : r->len - r->pos;
}

void byte_reader_fail(struct byte_reader *r)
{
	r->failed = true;
}

int byte_reader_finish(const struct byte_reader *r)
{
	return r->failed || r->pos != r->len ? -EBADMSG : 0;
}
