/*
 * A fuzz input as a small guest's RAM with one split virtqueue in it (descriptor table at 0,
 * avail ring at 0x1000, used ring at 0x2000), shared by the targets that feed rings to a
 * device. RAM is allocated to its exact size, so any access outside it trips ASan.
 */
#ifndef VOIDBOX_FUZZ_GUEST_RAM_H
#define VOIDBOX_FUZZ_GUEST_RAM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtqueue.h"
#include "vmm/guest_memory.h"

#define FUZZ_RAM_SIZE 0x10000u
#define FUZZ_DESC_ADDR 0x0u
#define FUZZ_AVAIL_ADDR 0x1000u
#define FUZZ_USED_ADDR 0x2000u

/*
 * Copies data into fresh RAM (zero-filled past the input), describes it in *mem and sets vq
 * up over it with queue_size and ring_features. Returns the RAM (free it) or NULL.
 */
static inline uint8_t *fuzz_guest_ram(const uint8_t *data, size_t size, uint16_t queue_size,
				      unsigned int ring_features, struct guest_memory *mem,
				      struct virtqueue *vq)
{
	uint8_t *ram = calloc(1, FUZZ_RAM_SIZE);

	if (!ram)
		return NULL;
	memcpy(ram, data, size < FUZZ_RAM_SIZE ? size : FUZZ_RAM_SIZE);
	memset(mem, 0, sizeof(*mem));
	mem->regions[0] = (struct guest_memory_region){ .guest_phys_addr = 0,
							.size = FUZZ_RAM_SIZE, .host_addr = ram };
	mem->region_count = 1;
	mem->total_size = FUZZ_RAM_SIZE;
	if (virtqueue_configure(vq, mem, queue_size, FUZZ_DESC_ADDR, FUZZ_AVAIL_ADDR,
				FUZZ_USED_ADDR, ring_features))
		abort();
	return ram;
}

#endif
