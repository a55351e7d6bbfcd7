/*
 * AML encodings from the ACPI specification, chapter 20 (opcodes) and 6.4 (resource
 * descriptors). Only what voidbox's DSDT uses is implemented; every emitter appends to a
 * growable buffer.
 */
#include "vmm/aml.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AML_INITIAL_CAP 256

#define AML_OP_ZERO 0x00
#define AML_OP_ONE 0x01
#define AML_OP_NAME 0x08
#define AML_OP_BYTE_PREFIX 0x0a
#define AML_OP_WORD_PREFIX 0x0b
#define AML_OP_DWORD_PREFIX 0x0c
#define AML_OP_STRING_PREFIX 0x0d
#define AML_OP_QWORD_PREFIX 0x0e
#define AML_OP_SCOPE 0x10
#define AML_OP_BUFFER 0x11
#define AML_OP_PACKAGE 0x12
#define AML_OP_EXT_PREFIX 0x5b
#define AML_OP_EXT_DEVICE 0x82
#define AML_ROOT_CHAR '\\'
#define AML_NAME_SEG_LEN 4

/* PkgLength: one byte holds 6 bits; with 1..3 follow bytes the lead keeps 4 bits. */
#define PKG_ONE_BYTE_MAX 0x3f
#define PKG_LEAD_BITS 4
#define PKG_LEAD_MASK 0x0f
#define PKG_COUNT_SHIFT 6
#define PKG_MAX_BYTES 4
#define BITS_PER_BYTE 8

#define RES_MEMORY32_FIXED 0x86
#define RES_MEMORY32_FIXED_LEN 9
#define RES_MEMORY_WRITABLE 0x01
#define RES_EXT_INTERRUPT 0x89
#define RES_EXT_INTERRUPT_LEN 6
#define RES_INT_CONSUMER 0x01
#define RES_INT_EDGE 0x02
#define RES_INT_ACTIVE_LOW 0x04
#define RES_END_TAG 0x79
#define RES_INT_COUNT_ONE 1 /* one interrupt number follows */
#define RES_IO 0x47
#define RES_IO_DECODE_16 0x01
#define RES_IO_ALIGN 1
#define RES_IRQ_NO_FLAGS 0x22

/* EISA id: three letters of 5 bits each ('A' = 1) then four hex digits, stored big-endian. */
#define EISA_ID_LEN 7
#define EISA_LETTERS 3
#define EISA_LETTER_BITS 5
#define EISA_LETTER_MASK 0x1f
#define EISA_HEX_BASE 16
#define EISA_HEX_LETTER_BASE 10

void aml_init(struct aml *aml)
{
	memset(aml, 0, sizeof(*aml));
}

void aml_free(struct aml *aml)
{
	free(aml->data);
	aml_init(aml);
}

void aml_bytes(struct aml *aml, const void *bytes, size_t len)
{
	if (aml->failed)
		return;
	if (aml->len + len > aml->cap) {
		size_t cap = aml->cap ? aml->cap : AML_INITIAL_CAP;

		while (cap < aml->len + len)
			cap *= 2;
		uint8_t *data = realloc(aml->data, cap);

		if (!data) {
			aml->failed = true;
			return;
		}
		aml->data = data;
		aml->cap = cap;
	}
	memcpy(aml->data + aml->len, bytes, len);
	aml->len += len;
}

static void aml_byte(struct aml *aml, uint8_t byte)
{
	aml_bytes(aml, &byte, 1);
}

static void aml_append(struct aml *aml, const struct aml *other)
{
	if (other->failed)
		aml->failed = true;
	else
		aml_bytes(aml, other->data, other->len);
}

void aml_pkg_length(struct aml *aml, size_t body_len)
{
	if (body_len + 1 <= PKG_ONE_BYTE_MAX) {
		aml_byte(aml, (uint8_t)(body_len + 1));
		return;
	}
	for (size_t n = 2; n <= PKG_MAX_BYTES; n++) {
		size_t total = body_len + n;

		if (total >> (PKG_LEAD_BITS + BITS_PER_BYTE * (n - 1)))
			continue;
		aml_byte(aml, (uint8_t)(((n - 1) << PKG_COUNT_SHIFT) | (total & PKG_LEAD_MASK)));
		for (size_t i = 1; i < n; i++)
			aml_byte(aml, (uint8_t)(total >> (PKG_LEAD_BITS + BITS_PER_BYTE * (i - 1))));
		return;
	}
	aml->failed = true;
}

void aml_name_seg(struct aml *aml, const char *name)
{
	char seg[AML_NAME_SEG_LEN];
	size_t len = strlen(name);

	memset(seg, '_', sizeof(seg));
	memcpy(seg, name, len < sizeof(seg) ? len : sizeof(seg));
	aml_bytes(aml, seg, sizeof(seg));
}

static void aml_name_path(struct aml *aml, const char *path)
{
	if (path[0] == AML_ROOT_CHAR) {
		aml_byte(aml, AML_ROOT_CHAR);
		path++;
	}
	aml_name_seg(aml, path);
}

void aml_integer(struct aml *aml, uint64_t value)
{
	if (value == 0) {
		aml_byte(aml, AML_OP_ZERO);
	} else if (value == 1) {
		aml_byte(aml, AML_OP_ONE);
	} else if (value <= UINT8_MAX) {
		aml_byte(aml, AML_OP_BYTE_PREFIX);
		aml_byte(aml, (uint8_t)value);
	} else if (value <= UINT16_MAX) {
		uint16_t v = (uint16_t)value;

		aml_byte(aml, AML_OP_WORD_PREFIX);
		aml_bytes(aml, &v, sizeof(v));
	} else if (value <= UINT32_MAX) {
		uint32_t v = (uint32_t)value;

		aml_byte(aml, AML_OP_DWORD_PREFIX);
		aml_bytes(aml, &v, sizeof(v));
	} else {
		aml_byte(aml, AML_OP_QWORD_PREFIX);
		aml_bytes(aml, &value, sizeof(value));
	}
}

void aml_string(struct aml *aml, const char *str)
{
	aml_byte(aml, AML_OP_STRING_PREFIX);
	aml_bytes(aml, str, strlen(str) + 1);
}

void aml_name(struct aml *aml, const char *name, const struct aml *value)
{
	aml_byte(aml, AML_OP_NAME);
	aml_name_seg(aml, name);
	aml_append(aml, value);
}

void aml_name_integer(struct aml *aml, const char *name, uint64_t value)
{
	aml_byte(aml, AML_OP_NAME);
	aml_name_seg(aml, name);
	aml_integer(aml, value);
}

void aml_name_string(struct aml *aml, const char *name, const char *str)
{
	aml_byte(aml, AML_OP_NAME);
	aml_name_seg(aml, name);
	aml_string(aml, str);
}

void aml_scope(struct aml *aml, const char *path, const struct aml *body)
{
	struct aml head;

	aml_init(&head);
	aml_name_path(&head, path);
	aml_byte(aml, AML_OP_SCOPE);
	aml_pkg_length(aml, head.len + body->len);
	aml_append(aml, &head);
	aml_append(aml, body);
	aml_free(&head);
}

void aml_device(struct aml *aml, const char *name, const struct aml *body)
{
	aml_byte(aml, AML_OP_EXT_PREFIX);
	aml_byte(aml, AML_OP_EXT_DEVICE);
	aml_pkg_length(aml, AML_NAME_SEG_LEN + body->len);
	aml_name_seg(aml, name);
	aml_append(aml, body);
}

void aml_buffer(struct aml *aml, const struct aml *bytes)
{
	struct aml size;

	aml_init(&size);
	aml_integer(&size, bytes->len);
	aml_byte(aml, AML_OP_BUFFER);
	aml_pkg_length(aml, size.len + bytes->len);
	aml_append(aml, &size);
	aml_append(aml, bytes);
	aml_free(&size);
}

void aml_package(struct aml *aml, uint8_t count, const struct aml *elements)
{
	aml_byte(aml, AML_OP_PACKAGE);
	aml_pkg_length(aml, 1 + elements->len);
	aml_byte(aml, count);
	aml_append(aml, elements);
}

void aml_resource_memory32_fixed(struct aml *aml, uint32_t base, uint32_t length, bool writable)
{
	uint16_t len = RES_MEMORY32_FIXED_LEN;

	aml_byte(aml, RES_MEMORY32_FIXED);
	aml_bytes(aml, &len, sizeof(len));
	aml_byte(aml, writable ? RES_MEMORY_WRITABLE : 0);
	aml_bytes(aml, &base, sizeof(base));
	aml_bytes(aml, &length, sizeof(length));
}

void aml_resource_interrupt(struct aml *aml, uint32_t gsi, enum aml_irq_trigger trigger,
			    enum aml_irq_polarity polarity)
{
	uint16_t len = RES_EXT_INTERRUPT_LEN;
	uint8_t flags = RES_INT_CONSUMER;

	if (trigger == AML_IRQ_EDGE)
		flags |= RES_INT_EDGE;
	if (polarity == AML_IRQ_ACTIVE_LOW)
		flags |= RES_INT_ACTIVE_LOW;
	aml_byte(aml, RES_EXT_INTERRUPT);
	aml_bytes(aml, &len, sizeof(len));
	aml_byte(aml, flags);
	aml_byte(aml, RES_INT_COUNT_ONE);
	aml_bytes(aml, &gsi, sizeof(gsi));
}

void aml_resource_io(struct aml *aml, uint16_t base, uint8_t length)
{
	aml_byte(aml, RES_IO);
	aml_byte(aml, RES_IO_DECODE_16);
	aml_bytes(aml, &base, sizeof(base)); /* minimum */
	aml_bytes(aml, &base, sizeof(base)); /* maximum: fixed */
	aml_byte(aml, RES_IO_ALIGN);
	aml_byte(aml, length);
}

void aml_resource_irq_edge_high(struct aml *aml, uint8_t irq)
{
	uint16_t mask = (uint16_t)(1U << irq);

	aml_byte(aml, RES_IRQ_NO_FLAGS);
	aml_bytes(aml, &mask, sizeof(mask));
}

int aml_eisa_id(const char *id, uint32_t *out)
{
	uint32_t letters = 0, product = 0;

	if (strlen(id) != EISA_ID_LEN)
		return -EINVAL;
	for (int i = 0; i < EISA_LETTERS; i++) {
		if (id[i] < 'A' || id[i] > 'Z')
			return -EINVAL;
		letters = (letters << EISA_LETTER_BITS) | ((uint32_t)(id[i] - 'A' + 1) &
							   EISA_LETTER_MASK);
	}
	for (int i = EISA_LETTERS; i < EISA_ID_LEN; i++) {
		char c = id[i];
		uint32_t digit;

		if (c >= '0' && c <= '9')
			digit = (uint32_t)(c - '0');
		else if (c >= 'A' && c <= 'F')
			digit = (uint32_t)(c - 'A' + EISA_HEX_LETTER_BASE);
		else
			return -EINVAL;
		product = product * EISA_HEX_BASE + digit;
	}
	/* Bytes in memory: letters high, letters low, product high, product low. */
	uint8_t bytes[sizeof(*out)] = {
		(uint8_t)(letters >> BITS_PER_BYTE), (uint8_t)letters,
		(uint8_t)(product >> BITS_PER_BYTE), (uint8_t)product,
	};

	memcpy(out, bytes, sizeof(bytes));
	return 0;
}

void aml_resource_end(struct aml *aml)
{
	aml_byte(aml, RES_END_TAG);
	aml_byte(aml, 0); /* checksum 0: "treat as valid" */
}
