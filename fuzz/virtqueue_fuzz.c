/*
 * libFuzzer target for the split-virtqueue walker: the input is the whole of a small guest's
 * RAM (descriptor table, avail ring, buffers, indirect tables), exactly what a hostile guest
 * controls. The first two bytes pick the queue size and which ring features (indirect
 * descriptors, event index) were negotiated. Every popped chain is read and written end to end; RAM is allocated to its exact
 * size so any access outside it trips ASan, and a chain whose buffers leave RAM aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "devices/virtqueue.h"
#include "fuzz_guest_ram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_HEADER_BYTES 2u
#define FUZZ_SIZE_CHOICES 9u /* 1 .. 256 */
#define FUZZ_MAX_POPS (2u * VIRTQUEUE_MAX_SIZE + 1u)

static uint8_t fuzz_scratch[FUZZ_RAM_SIZE];

static void fuzz_check_chain(const struct virtqueue_chain *chain, const uint8_t *ram)
{
	uint64_t readable = 0, writable = 0;

	for (unsigned int i = 0; i < chain->buffer_count; i++) {
		const struct virtqueue_buffer *buf = &chain->buffers[i];

		if (buf->host < ram || buf->host + buf->len > ram + FUZZ_RAM_SIZE)
			abort();
		if (buf->writable)
			writable += buf->len;
		else
			readable += buf->len;
	}
	if (readable != chain->readable_len || writable != chain->writable_len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct virtqueue_chain chain;
	struct guest_memory mem = { 0 };
	struct virtqueue vq;
	uint8_t *ram;
	uint16_t queue_size;
	unsigned int ring_features;
	static bool logging_configured;

	if (!logging_configured) {
		log_set_level_name(getenv(LOG_LEVEL_ENV));
		logging_configured = true;
	}
	if (size < FUZZ_HEADER_BYTES)
		return 0;
	queue_size = (uint16_t)(1u << (data[0] % FUZZ_SIZE_CHOICES));
	ring_features = data[1] & (VIRTQUEUE_INDIRECT | VIRTQUEUE_EVENT_IDX);
	data += FUZZ_HEADER_BYTES;
	size -= FUZZ_HEADER_BYTES;

	ram = fuzz_guest_ram(data, size, queue_size, ring_features, &mem, &vq);
	if (!ram)
		return 0;
	for (unsigned int n = 0; n < FUZZ_MAX_POPS; n++) {
		int rc = virtqueue_pop(&vq, &chain);
		size_t moved;

		if (rc <= 0)
			break;
		fuzz_check_chain(&chain, ram);
		moved = virtqueue_chain_read(&chain, 0, fuzz_scratch, sizeof(fuzz_scratch));
		if (moved > chain.readable_len)
			abort();
		moved = virtqueue_chain_write(&chain, 0, fuzz_scratch, sizeof(fuzz_scratch));
		if (moved > chain.writable_len)
			abort();
		if (virtqueue_push(&vq, chain.head, (uint32_t)moved))
			abort();
		virtqueue_should_signal(&vq);
	}
	free(ram);
	return 0;
}
