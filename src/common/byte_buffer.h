/*
 * Explicit little-endian encoding for files this program writes and reads back later (the
 * snapshot state file and each device's section of it). Writing C structures verbatim would
 * tie the format to one compiler's padding and put uninitialised bytes on disk; these helpers
 * write every field on purpose and read nothing past the end of what was given.
 *
 * Both sides are sticky on failure: after an allocation failure (writer) or a read past the
 * end (reader) every further call does nothing, and the caller checks once at the end
 * (byte_writer_failed, byte_reader_finish), so encoders and decoders stay straight-line code.
 */
#ifndef VOIDBOX_COMMON_BYTE_BUFFER_H
#define VOIDBOX_COMMON_BYTE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A string field is at most this long on the wire (u16 length prefix). */
#define BYTE_BUFFER_STRING_MAX UINT16_MAX

struct byte_writer {
	uint8_t *data; /* malloc'ed; owned by the writer until byte_writer_take */
	size_t len;
	size_t cap;
	bool failed;
};

struct byte_reader {
	const uint8_t *data;
	size_t len;
	size_t pos;
	bool failed;
};

void byte_writer_init(struct byte_writer *w);
void byte_writer_free(struct byte_writer *w);
bool byte_writer_failed(const struct byte_writer *w);
void byte_writer_u8(struct byte_writer *w, uint8_t value);
void byte_writer_u16(struct byte_writer *w, uint16_t value);
void byte_writer_u32(struct byte_writer *w, uint32_t value);
void byte_writer_u64(struct byte_writer *w, uint64_t value);
void byte_writer_bytes(struct byte_writer *w, const void *data, size_t len);
/* A u16 length, then the bytes, no terminator; a longer string fails the writer. */
void byte_writer_string(struct byte_writer *w, const char *text);

void byte_reader_init(struct byte_reader *r, const void *data, size_t len);
uint8_t byte_reader_u8(struct byte_reader *r);
uint16_t byte_reader_u16(struct byte_reader *r);
uint32_t byte_reader_u32(struct byte_reader *r);
uint64_t byte_reader_u64(struct byte_reader *r);
/* Copies len bytes into out (zeroes out when they are not there). */
void byte_reader_bytes(struct byte_reader *r, void *out, size_t len);
/* Points at the next len bytes without copying; NULL when they are not there. */
const uint8_t *byte_reader_view(struct byte_reader *r, size_t len);
/*
 * Reads a string written by byte_writer_string into out (cap bytes, always terminated). A
 * string that does not fit, or holds a NUL byte, fails the reader.
 */
void byte_reader_string(struct byte_reader *r, char *out, size_t cap);
size_t byte_reader_remaining(const struct byte_reader *r);
/* Marks the reader failed (for a value that decoded but is out of range). */
void byte_reader_fail(struct byte_reader *r);
/* 0 when nothing failed and every byte was consumed; -EBADMSG otherwise. */
int byte_reader_finish(const struct byte_reader *r);

#endif
