/*
 * A minimal newc cpio reader for the store tests. It is written independently of the writer
 * (parsing fields by position from the format description) so the tests check the writer
 * against the format, not against itself. Header-only: each test program includes it once.
 */
#ifndef VOIDBOX_TESTS_STORE_CPIO_READER_H
#define VOIDBOX_TESTS_STORE_CPIO_READER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPIO_READER_HEADER_SIZE 110
#define CPIO_READER_FIELD_DIGITS 8
#define CPIO_READER_MAX_ENTRIES 4096

enum cpio_reader_field {
	CPIO_FIELD_INODE, CPIO_FIELD_MODE, CPIO_FIELD_UID, CPIO_FIELD_GID, CPIO_FIELD_NLINK,
	CPIO_FIELD_MTIME, CPIO_FIELD_FILESIZE, CPIO_FIELD_DEVMAJOR, CPIO_FIELD_DEVMINOR,
	CPIO_FIELD_RDEVMAJOR, CPIO_FIELD_RDEVMINOR, CPIO_FIELD_NAMESIZE, CPIO_FIELD_CHECK,
	CPIO_FIELD_COUNT,
};

struct cpio_reader_entry {
	char name[256];
	uint32_t field[CPIO_FIELD_COUNT];
	const unsigned char *data;
	size_t data_len;
	size_t header_offset;
};

struct cpio_reader_archive {
	struct cpio_reader_entry entries[CPIO_READER_MAX_ENTRIES];
	size_t count;
	bool saw_trailer;
	size_t end_offset; /* just after the trailer's name padding */
};

static inline size_t cpio_reader_align4(size_t offset)
{
	return (offset + 3) & ~(size_t)3;
}

/* Returns 0, or -1 with a reason in why. */
static inline int cpio_reader_parse(const unsigned char *buf, size_t len,
				    struct cpio_reader_archive *archive, const char **why)
{
	size_t offset = 0;

	memset(archive, 0, sizeof(*archive));
	while (offset + CPIO_READER_HEADER_SIZE <= len) {
		struct cpio_reader_entry entry = { .header_offset = offset };
		size_t name_size;

		if (memcmp(buf + offset, "070701", 6) != 0) {
			*why = "bad magic";
			return -1;
		}
		for (int f = 0; f < CPIO_FIELD_COUNT; f++) {
			char digits[CPIO_READER_FIELD_DIGITS + 1];

			memcpy(digits, buf + offset + 6 + f * CPIO_READER_FIELD_DIGITS,
			       CPIO_READER_FIELD_DIGITS);
			digits[CPIO_READER_FIELD_DIGITS] = '\0';
			entry.field[f] = (uint32_t)strtoul(digits, NULL, 16);
		}
		name_size = entry.field[CPIO_FIELD_NAMESIZE];
		if (name_size == 0 || name_size > sizeof(entry.name) ||
		    offset + CPIO_READER_HEADER_SIZE + name_size > len ||
		    buf[offset + CPIO_READER_HEADER_SIZE + name_size - 1] != '\0') {
			*why = "bad name";
			return -1;
		}
		memcpy(entry.name, buf + offset + CPIO_READER_HEADER_SIZE, name_size);
		offset = cpio_reader_align4(offset + CPIO_READER_HEADER_SIZE + name_size);
		if (strcmp(entry.name, "TRAILER!!!") == 0) {
			archive->saw_trailer = true;
			archive->end_offset = offset;
			return 0;
		}
		entry.data_len = entry.field[CPIO_FIELD_FILESIZE];
		if (offset + entry.data_len > len) {
			*why = "data past the end";
			return -1;
		}
		entry.data = buf + offset;
		offset = cpio_reader_align4(offset + entry.data_len);
		if (archive->count == CPIO_READER_MAX_ENTRIES) {
			*why = "too many entries";
			return -1;
		}
		archive->entries[archive->count++] = entry;
	}
	*why = "no trailer";
	return -1;
}

static inline const struct cpio_reader_entry *
cpio_reader_find(const struct cpio_reader_archive *archive, const char *name)
{
	for (size_t i = 0; i < archive->count; i++)
		if (strcmp(archive->entries[i].name, name) == 0)
			return &archive->entries[i];
	return NULL;
}

/* Reads a whole file into memory (NULL on failure); the caller frees. */
static inline unsigned char *cpio_reader_load(const char *path, size_t *len)
{
	FILE *file = fopen(path, "rb");
	unsigned char *buf = NULL;
	long size;

	if (!file)
		return NULL;
	if (fseek(file, 0, SEEK_END) == 0 && (size = ftell(file)) >= 0 &&
	    fseek(file, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1)) != NULL)
		*len = fread(buf, 1, (size_t)size, file);
	fclose(file);
	return buf;
}

#endif
