/*
 * A fake virtio driver for device tests: guest RAM is a malloc'd buffer, the driver writes
 * rings into it and pokes the transport's registers exactly as a guest's MMIO accesses would,
 * so the device under test cannot tell it from a kernel. Only what the tests need: fixed ring
 * placement, one published chain per call, polling of used rings.
 */
#ifndef VOIDBOX_TESTS_DEVICES_FAKE_GUEST_H
#define VOIDBOX_TESTS_DEVICES_FAKE_GUEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio_mmio.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define FAKE_GUEST_RAM_SIZE (16u << 20)
#define FAKE_GUEST_QUEUE_SIZE 256u
#define FAKE_GUEST_MAX_QUEUES 3u
#define FAKE_GUEST_RING_BASE 0x1000u
#define FAKE_GUEST_RING_STRIDE 0x4000u
#define FAKE_GUEST_AVAIL_OFFSET 0x1000u
#define FAKE_GUEST_USED_OFFSET 0x2000u

struct fake_queue {
	uint16_t size;
	uint64_t desc;
	uint64_t avail;
	uint64_t used;
	uint16_t avail_idx;
	uint16_t used_seen;
	uint16_t kicked_idx; /* avail_idx at the last notify decision (EVENT_IDX) */
};

struct fake_guest {
	uint8_t *ram;
	struct guest_memory mem;
	struct virtio_mmio *transport;
	atomic_int irq_level;
	atomic_int irq_raises;
	bool event_idx;        /* negotiated: notifies and interrupts follow the event indices */
	unsigned int notifies_sent;
	unsigned int notifies_suppressed;
	struct fake_queue queues[FAKE_GUEST_MAX_QUEUES];
};

int fake_guest_init(struct fake_guest *guest);
void fake_guest_free(struct fake_guest *guest);
struct irq_line fake_guest_irq(struct fake_guest *guest);
void *fake_guest_host(struct fake_guest *guest, uint64_t gpa);

/*
 * Runs the virtio init sequence against transport: ACKNOWLEDGE, DRIVER, features (the
 * device's offer masked by wanted), FEATURES_OK, queue setup, DRIVER_OK. Returns the final
 * STATUS register value.
 */
uint32_t fake_guest_setup(struct fake_guest *guest, struct virtio_mmio *transport,
			  unsigned int queue_count, uint64_t wanted_features);

void fake_guest_set_desc(struct fake_guest *guest, unsigned int queue, uint16_t index,
			 uint64_t addr, uint32_t len, uint16_t flags, uint16_t next);
void fake_guest_publish(struct fake_guest *guest, unsigned int queue, uint16_t head);
/* Notifies the device, unless EVENT_IDX was negotiated and the device did not ask for it. */
void fake_guest_notify(struct fake_guest *guest, unsigned int queue);
/* Takes one used element; with EVENT_IDX also asks for an interrupt at the next one. */
bool fake_guest_pop_used(struct fake_guest *guest, unsigned int queue, uint32_t *id,
			 uint32_t *len);
/* Reads INTERRUPT_STATUS and acknowledges it; returns what was pending. */
uint32_t fake_guest_ack_irq(struct fake_guest *guest);

#endif
