/*
 * A tiny AML byte emitter: just the opcodes a micro-VM DSDT needs (Scope, Device, Name,
 * integers, strings, packages, resource-template buffers). Nested objects are built in their
 * own buffer and wrapped, because a PkgLength prefix encodes the size of what follows it.
 * Allocation failure is sticky (aml->failed) so callers check once at the end.
 */
#ifndef VOIDBOX_VMM_AML_H
#define VOIDBOX_VMM_AML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct aml {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool failed;
};

enum aml_irq_trigger { AML_IRQ_LEVEL, AML_IRQ_EDGE };
enum aml_irq_polarity { AML_IRQ_ACTIVE_HIGH, AML_IRQ_ACTIVE_LOW };

void aml_init(struct aml *aml);
void aml_free(struct aml *aml);
void aml_bytes(struct aml *aml, const void *bytes, size_t len);
/* PkgLength for a body of body_len bytes (the encoding counts its own bytes). */
void aml_pkg_length(struct aml *aml, size_t body_len);
/* A 4-character name segment; shorter names are padded with '_'. */
void aml_name_seg(struct aml *aml, const char *name);
void aml_integer(struct aml *aml, uint64_t value);
void aml_string(struct aml *aml, const char *str);
/* Name(name, <value>): value is already-encoded data. */
void aml_name(struct aml *aml, const char *name, const struct aml *value);
void aml_name_integer(struct aml *aml, const char *name, uint64_t value);
void aml_name_string(struct aml *aml, const char *name, const char *str);
/* Scope(path) { body }: path "\\_SB_" or a name segment. */
void aml_scope(struct aml *aml, const char *path, const struct aml *body);
void aml_device(struct aml *aml, const char *name, const struct aml *body);
/* Buffer(){ bytes } */
void aml_buffer(struct aml *aml, const struct aml *bytes);
/* Package(){ elements }: elements holds count encoded objects. */
void aml_package(struct aml *aml, uint8_t count, const struct aml *elements);

/* Resource descriptors for a ResourceTemplate; finish with aml_resource_end(). */
void aml_resource_memory32_fixed(struct aml *aml, uint32_t base, uint32_t length, bool writable);
void aml_resource_interrupt(struct aml *aml, uint32_t gsi, enum aml_irq_trigger trigger,
			    enum aml_irq_polarity polarity);
void aml_resource_io(struct aml *aml, uint16_t base, uint8_t length);
void aml_resource_irq_edge_high(struct aml *aml, uint8_t irq);
void aml_resource_end(struct aml *aml);
/* A compressed EISA id ("PNP0501") as the integer _HID form. -EINVAL when malformed. */
int aml_eisa_id(const char *id, uint32_t *out);

#endif
