/*
 * Guest RAM: at most two anonymous mappings (below the MMIO gap and above 4 GiB). Mappings
 * use MAP_NORESERVE so a large, mostly idle guest costs only the pages it touches, and start
 * on 2 MiB boundaries with transparent huge pages requested, so KVM's second-level tables can
 * use 2 MiB pages (a 4 KiB-mapped guest boots measurably slower, docs/performance.md).
 */
#include "vmm/memory.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

void *guest_memory_ptr(const struct guest_memory *mem, uint64_t gpa, uint64_t len)
{
	for (size_t i = 0; i < mem->region_count; i++) {
		const struct guest_memory_region *region = &mem->regions[i];

		if (gpa < region->guest_phys_addr)
			continue;
		uint64_t offset = gpa - region->guest_phys_addr;

		if (offset >= region->size || len > region->size - offset)
			continue;
		if (!region->host_addr)
			return NULL;
		return region->host_addr + offset;
	}
	return NULL;
}

uint64_t guest_memory_host_ram(void)
{
	struct sysinfo info;

	if (sysinfo(&info) != 0)
		return 0;
	return (uint64_t)info.totalram * info.mem_unit;
}

int guest_memory_plan(struct guest_memory *mem, uint64_t memory_mb, uint64_t host_ram_bytes,
		      char *err, size_t errlen)
{
	memset(mem, 0, sizeof(*mem));
	if (memory_mb < GUEST_MEMORY_MIN_MB) {
		snprintf(err, errlen, "memory %" PRIu64 " MiB is too small: use at least %llu MiB",
			 memory_mb, GUEST_MEMORY_MIN_MB);
		return -EINVAL;
	}
	if (memory_mb > GUEST_MEMORY_MAX_MB) {
		snprintf(err, errlen, "memory %" PRIu64 " MiB is too large: use at most %llu MiB",
			 memory_mb, GUEST_MEMORY_MAX_MB);
		return -EINVAL;
	}
	uint64_t bytes = memory_mb * GUEST_MEMORY_MIB;

	if (host_ram_bytes && bytes > host_ram_bytes) {
		snprintf(err, errlen,
			 "memory %" PRIu64 " MiB exceeds this host's %" PRIu64
			 " MiB of RAM: ask for less memory",
			 memory_mb, host_ram_bytes / GUEST_MEMORY_MIB);
		return -EINVAL;
	}
	uint64_t low = bytes < GUEST_MEMORY_GAP_START ? bytes : GUEST_MEMORY_GAP_START;

	mem->regions[0] = (struct guest_memory_region){ .guest_phys_addr = 0, .size = low };
	mem->region_count = 1;
	if (bytes > low) {
		mem->regions[1] = (struct guest_memory_region){
			.guest_phys_addr = GUEST_MEMORY_HIGH_START, .size = bytes - low,
		};
		mem->region_count = 2;
	}
	mem->total_size = bytes;
	return 0;
}

/*
 * An anonymous mapping of size bytes whose start is GUEST_MEMORY_HOST_ALIGN-aligned: KVM maps
 * guest memory with 2 MiB pages only where the host address and the guest address agree
 * modulo 2 MiB, and guest RAM regions start on 2 MiB boundaries. Over-reserves by one
 * alignment unit and trims both ends.
 */
void *guest_memory_reserve_aligned(uint64_t size)
{
	size_t reserve = (size_t)size + GUEST_MEMORY_HOST_ALIGN;
	uint8_t *base = mmap(NULL, reserve, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint8_t *aligned;
	size_t head, tail;

	if (base == MAP_FAILED)
		return MAP_FAILED;
	aligned = (uint8_t *)(((uintptr_t)base + GUEST_MEMORY_HOST_ALIGN - 1) &
			      ~(uintptr_t)(GUEST_MEMORY_HOST_ALIGN - 1));
	head = (size_t)(aligned - base);
	tail = reserve - head - (size_t)size;
	if (head)
		munmap(base, head);
	if (tail)
		munmap(aligned + size, tail);
	return aligned;
}

static void *guest_memory_map_aligned(uint64_t size)
{
	void *aligned = guest_memory_reserve_aligned(size);

	/* transparent huge pages where the host offers them; a refusal costs only speed */
	if (aligned != MAP_FAILED)
		madvise(aligned, (size_t)size, MADV_HUGEPAGE);
	return aligned;
}

int guest_memory_map(struct guest_memory *mem)
{
	for (size_t i = 0; i < mem->region_count; i++) {
		struct guest_memory_region *region = &mem->regions[i];
		void *addr = guest_memory_map_aligned(region->size);

		if (addr == MAP_FAILED) {
			int rc = -errno;

			guest_memory_unmap(mem);
			return rc;
		}
		region->host_addr = addr;
	}
	return 0;
}

void guest_memory_unmap(struct guest_memory *mem)
{
	for (size_t i = 0; i < mem->region_count; i++) {
		struct guest_memory_region *region = &mem->regions[i];

		if (region->host_addr)
			munmap(region->host_addr, region->size);
		region->host_addr = NULL;
	}
}

uint64_t guest_memory_low_end(const struct guest_memory *mem)
{
	return mem->region_count ? mem->regions[0].size : 0;
}
