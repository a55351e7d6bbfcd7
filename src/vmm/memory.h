/*
 * Guest RAM layout for x86-64: RAM from 0 up to the 32-bit MMIO gap, the remainder mapped
 * at 4 GiB as a second region, so every megabyte the user asks for is really usable. Planning
 * (pure arithmetic, unit-tested) is separate from mapping (mmap) so refusals can be tested
 * without allocating anything.
 */
#ifndef VOIDBOX_VMM_MEMORY_H
#define VOIDBOX_VMM_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/guest_memory.h"

#define GUEST_MEMORY_GAP_START 0xD0000000ULL /* 3.25 GiB: start of the 32-bit MMIO hole */
#define GUEST_MEMORY_HIGH_START 0x100000000ULL /* 4 GiB: RAM above the hole resumes here */
#define GUEST_MEMORY_MIN_MB 64ULL
#define GUEST_MEMORY_MAX_MB (1024ULL * 1024ULL) /* 1 TiB: far beyond any sandbox */
#define GUEST_MEMORY_MIB ((uint64_t)1 << 20)
/* host mappings start on a 2 MiB boundary so KVM can back the guest with huge pages */
#define GUEST_MEMORY_HOST_ALIGN ((size_t)2 << 20)

/*
 * Fills mem->regions for memory_mb without mapping. host_ram_bytes is the host's physical
 * RAM (0 = do not check). Returns 0 or -EINVAL with a message that says what to do.
 */
int guest_memory_plan(struct guest_memory *mem, uint64_t memory_mb, uint64_t host_ram_bytes,
		      char *err, size_t errlen);
/*
 * Address space for one region, its start GUEST_MEMORY_HOST_ALIGN-aligned (anonymous; a
 * restore maps its memory file over it with MAP_FIXED). MAP_FAILED with errno on failure.
 */
void *guest_memory_reserve_aligned(uint64_t size);
/* Maps every planned region (anonymous, MAP_NORESERVE). Returns 0 or -errno. */
int guest_memory_map(struct guest_memory *mem);
void guest_memory_unmap(struct guest_memory *mem);
/* End (exclusive) of the RAM region that starts at 0. */
uint64_t guest_memory_low_end(const struct guest_memory *mem);
/* Physical RAM of this host in bytes, 0 when unknown. */
uint64_t guest_memory_host_ram(void);

#endif
