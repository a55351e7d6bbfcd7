/*
 * Split virtqueues (VIRTIO 1.2 §2.7) read straight out of guest memory.
 *
 * The guest owns every byte of the rings, so a chain is resolved in one bounded walk into a
 * flat list of host buffers that were each checked with guest_memory_ptr(); device code then
 * copies through virtqueue_chain_read()/virtqueue_chain_write() and never follows a guest
 * pointer itself. Any structural lie (a loop, an index out of range, a chain longer than the
 * queue, a buffer outside RAM, a readable buffer after a writable one) marks the queue broken
 * and the caller stops using it until the driver resets the device.
 *
 * A struct virtqueue is not locked: one thread (the device's worker) uses it at a time, and
 * the transport touches it only while holding the device lock.
 */
#ifndef VOIDBOX_DEVICES_VIRTQUEUE_H
#define VOIDBOX_DEVICES_VIRTQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/guest_memory.h"

/* The largest queue any of our devices offers; chains are bounded by the queue size. */
#define VIRTQUEUE_MAX_SIZE 512

#define VIRTQ_DESC_F_NEXT 1u
#define VIRTQ_DESC_F_WRITE 2u
#define VIRTQ_DESC_F_INDIRECT 4u
#define VIRTQ_AVAIL_F_NO_INTERRUPT 1u

/* Feature bits that change how rings are read (VIRTIO 1.2 §6). */
#define VIRTIO_RING_F_INDIRECT_DESC 28
#define VIRTIO_RING_F_EVENT_IDX 29

#define VIRTQ_DESC_SIZE 16u
#define VIRTQ_USED_ELEM_SIZE 8u

struct virtqueue {
	const struct guest_memory *mem;
	uint16_t size;
	uint64_t desc_addr;
	uint64_t avail_addr;
	uint64_t used_addr;
	uint16_t last_avail_idx;
	uint16_t used_idx;
	bool indirect_allowed;
	bool event_idx;
	/* used_idx when we last decided about an interrupt (EVENT_IDX only) */
	uint16_t signalled_used;
	bool signalled_used_valid;
	bool configured;
	bool broken;
};

struct virtqueue_buffer {
	uint8_t *host;
	uint32_t len;
	bool writable;
};

/* One popped chain: readable buffers first, then writable ones, all inside guest RAM. */
struct virtqueue_chain {
	uint16_t head;
	unsigned int buffer_count;
	uint64_t readable_len;
	uint64_t writable_len;
	struct virtqueue_buffer buffers[VIRTQUEUE_MAX_SIZE];
};

/* Ring features the driver negotiated (VIRTIO_RING_F_INDIRECT_DESC, VIRTIO_RING_F_EVENT_IDX). */
enum virtqueue_feature {
	VIRTQUEUE_INDIRECT = 1u << 0,
	VIRTQUEUE_EVENT_IDX = 1u << 1,
};

/*
 * Checks size (power of two, 1..VIRTQUEUE_MAX_SIZE), alignment and that all three ring areas
 * lie inside guest memory; returns -EINVAL otherwise. Indices start at zero. ring_features is
 * a mask of enum virtqueue_feature.
 */
int virtqueue_configure(struct virtqueue *vq, const struct guest_memory *mem, uint16_t size,
			uint64_t desc_addr, uint64_t avail_addr, uint64_t used_addr,
			unsigned int ring_features);
void virtqueue_clear(struct virtqueue *vq);

/* True when the driver has made a chain available that we have not popped yet. */
bool virtqueue_has_available(struct virtqueue *vq);

/*
 * The driver's avail index now, after asking it (EVENT_IDX) to notify when it makes the next
 * buffer available: a device that waits for the driver to hand a buffer back is woken when it
 * does. 0 for a queue that is not configured.
 */
uint16_t virtqueue_notify_on_next(struct virtqueue *vq);
/* The driver's avail index now (0 for a queue that is not configured). */
uint16_t virtqueue_avail_idx(struct virtqueue *vq);

/*
 * Pops the next available chain: 1 when one was popped, 0 when none is available, -EIO when
 * the guest's rings are malformed (the queue is then marked broken and stays so).
 * With EVENT_IDX, finding the ring empty asks the driver to notify at its next buffer; until
 * then the driver may not notify, so a caller that stops popping before it sees 0 must come
 * back without waiting for a notify.
 */
int virtqueue_pop(struct virtqueue *vq, struct virtqueue_chain *chain);

/* Returns a chain to the driver with the number of bytes the device wrote into it. */
int virtqueue_push(struct virtqueue *vq, uint16_t head, uint32_t written_len);

/*
 * After a batch of pushes: whether the driver wants an interrupt for them (its used_event
 * with EVENT_IDX, else the avail ring's NO_INTERRUPT flag).
 */
bool virtqueue_should_signal(struct virtqueue *vq);

/* Copies from the chain's readable bytes starting at offset; returns the bytes copied. */
size_t virtqueue_chain_read(const struct virtqueue_chain *chain, uint64_t offset, void *dst,
			    size_t len);
/* Copies into the chain's writable bytes starting at offset; returns the bytes copied. */
size_t virtqueue_chain_write(const struct virtqueue_chain *chain, uint64_t offset,
			     const void *src, size_t len);

#endif
