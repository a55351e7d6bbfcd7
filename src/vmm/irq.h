/*
 * How a device raises its interrupt without knowing about KVM: a GSI and a function that sets
 * the line level. The KVM VMM backs it with KVM_IRQ_LINE on the in-kernel IOAPIC; unit tests
 * and fuzzers back it with a recorder.
 */
#ifndef VOIDBOX_VMM_IRQ_H
#define VOIDBOX_VMM_IRQ_H

#include <stdbool.h>
#include <stdint.h>

struct irq_line {
	void (*set_level)(void *opaque, uint32_t gsi, bool asserted);
	void *opaque;
	uint32_t gsi;
};

static inline void irq_line_set(const struct irq_line *line, bool asserted)
{
	if (line->set_level)
		line->set_level(line->opaque, line->gsi, asserted);
}

#endif
