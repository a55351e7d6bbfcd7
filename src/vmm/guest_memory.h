/*
 * Guest physical memory as the host sees it: a few contiguous regions (RAM below the 32-bit
 * MMIO gap, RAM above 4 GiB), each one anonymous mapping. Every device that follows a guest
 * pointer goes through guest_memory_ptr(), which refuses ranges that are not wholly inside one
 * region: a hostile guest controls those addresses.
 */
#ifndef VOIDBOX_VMM_GUEST_MEMORY_H
#define VOIDBOX_VMM_GUEST_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GUEST_MEMORY_MAX_REGIONS 4

struct guest_memory_region {
	uint64_t guest_phys_addr;
	uint64_t size;
	uint8_t *host_addr;
};

struct guest_memory {
	struct guest_memory_region regions[GUEST_MEMORY_MAX_REGIONS];
	size_t region_count;
	uint64_t total_size;
};

/* Host pointer for [gpa, gpa+len) or NULL when any byte lies outside a single region. */
void *guest_memory_ptr(const struct guest_memory *mem, uint64_t gpa, uint64_t len);

#endif
