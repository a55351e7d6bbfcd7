/*
 * Guest memory planning and lookup, plus the address buses: every refusal path of the plan
 * (too small, too large, larger than the host), the split around the MMIO gap, and
 * guest_memory_ptr's bounds at region edges, where a hostile guest pointer would land.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "vmm/bus.h"
#include "vmm/memory.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

static void test_plan_refusals(void)
{
	struct guest_memory mem;
	char err[256];

	CHECK_INT_EQ(guest_memory_plan(&mem, 16, 0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "at least 64 MiB") != NULL);
	CHECK_INT_EQ(guest_memory_plan(&mem, GUEST_MEMORY_MAX_MB + 1, 0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "at most") != NULL);
	CHECK_INT_EQ(guest_memory_plan(&mem, 2048, 1 * GIB, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "exceeds this host") != NULL);
	CHECK_INT_EQ(guest_memory_plan(&mem, 1024, 1 * GIB, err, sizeof(err)), 0);
}

static void test_plan_layout(void)
{
	struct guest_memory mem;
	char err[256];

	CHECK_INT_EQ(guest_memory_plan(&mem, 3328, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(mem.region_count, 1);
	CHECK_INT_EQ(mem.regions[0].size, GUEST_MEMORY_GAP_START);

	CHECK_INT_EQ(guest_memory_plan(&mem, 3329, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(mem.region_count, 2);
	CHECK_INT_EQ(mem.regions[1].guest_phys_addr, 4 * GIB);
	CHECK_INT_EQ(mem.regions[1].size, 1 * MIB);
	CHECK_INT_EQ(mem.total_size, 3329 * MIB);
	CHECK_INT_EQ(guest_memory_low_end(&mem), GUEST_MEMORY_GAP_START);

	CHECK_INT_EQ(guest_memory_plan(&mem, 16384, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(mem.regions[0].size + mem.regions[1].size, 16 * GIB);
}

static void test_ptr_bounds(void)
{
	struct guest_memory mem;
	char err[256];

	CHECK_INT_EQ(guest_memory_plan(&mem, 64, 0, err, sizeof(err)), 0);
	CHECK(guest_memory_ptr(&mem, 0, 1) == NULL); /* planned, not mapped yet */
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	uint8_t *base = guest_memory_ptr(&mem, 0, 1);

	CHECK(base != NULL);
	CHECK(guest_memory_ptr(&mem, 64 * MIB - 8, 8) == base + 64 * MIB - 8);
	CHECK(guest_memory_ptr(&mem, 64 * MIB - 8, 9) == NULL);
	CHECK(guest_memory_ptr(&mem, 64 * MIB, 1) == NULL);
	CHECK(guest_memory_ptr(&mem, UINT64_MAX, 2) == NULL);
	CHECK(guest_memory_ptr(&mem, 16, UINT64_MAX) == NULL);
	guest_memory_unmap(&mem);
	CHECK(guest_memory_ptr(&mem, 0, 1) == NULL);
}

static void test_ptr_across_regions(void)
{
	struct guest_memory mem;
	char err[256];

	CHECK_INT_EQ(guest_memory_plan(&mem, 3328 + 64, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	CHECK(guest_memory_ptr(&mem, GUEST_MEMORY_GAP_START - 4, 4) != NULL);
	CHECK(guest_memory_ptr(&mem, GUEST_MEMORY_GAP_START - 4, 8) == NULL);
	CHECK(guest_memory_ptr(&mem, GUEST_MEMORY_GAP_START, 1) == NULL); /* MMIO gap */
	CHECK(guest_memory_ptr(&mem, 4 * GIB, 64 * MIB) != NULL);
	CHECK(guest_memory_ptr(&mem, 4 * GIB + 64 * MIB, 1) == NULL);
	guest_memory_unmap(&mem);
}

static void test_host_mappings_are_huge_page_aligned(void)
{
	struct guest_memory mem;
	char err[256];

	/* two regions of odd sizes: each must still start on a 2 MiB boundary */
	CHECK_INT_EQ(guest_memory_plan(&mem, 3328 + 66, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	for (size_t i = 0; i < mem.region_count; i++) {
		CHECK_INT_EQ((uintptr_t)mem.regions[i].host_addr % GUEST_MEMORY_HOST_ALIGN, 0);
		/* the whole region is usable: first and last byte */
		mem.regions[i].host_addr[0] = 1;
		mem.regions[i].host_addr[mem.regions[i].size - 1] = 1;
	}
	guest_memory_unmap(&mem);
}

struct access_log {
	uint64_t offset;
	uint32_t len;
	bool is_write;
	int calls;
};

static void record_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			  bool is_write)
{
	struct access_log *log = opaque;

	log->offset = offset;
	log->len = len;
	log->is_write = is_write;
	log->calls++;
	if (!is_write)
		memset(data, 0x42, len);
}

static void test_bus(void)
{
	struct bus bus = { .range_count = 0 };
	struct access_log a = { 0 }, b = { 0 };
	uint8_t data[4] = { 0 };

	CHECK_INT_EQ(bus_register(&bus, 0x1000, 0x100, record_access, &a), 0);
	CHECK_INT_EQ(bus_register(&bus, 0x1100, 0x10, record_access, &b), 0);
	CHECK_INT_EQ(bus_register(&bus, 0x10ff, 2, record_access, &b), -EEXIST);
	CHECK_INT_EQ(bus_register(&bus, 0x0fff, 2, record_access, &b), -EEXIST);
	CHECK_INT_EQ(bus_register(&bus, 0x2000, 0, record_access, &b), -EINVAL);
	CHECK(bus_dispatch(&bus, 0x1010, data, 4, false));
	CHECK_INT_EQ(a.offset, 0x10);
	CHECK_INT_EQ(a.len, 4);
	CHECK_INT_EQ(data[3], 0x42);
	CHECK(bus_dispatch(&bus, 0x110f, data, 1, true));
	CHECK_INT_EQ(b.offset, 0xf);
	CHECK(b.is_write);
	CHECK(!bus_dispatch(&bus, 0x1110, data, 4, false));
	CHECK_INT_EQ(data[0], 0xff);
	CHECK_INT_EQ(data[3], 0xff);
	for (uint64_t i = bus.range_count; i < BUS_MAX_RANGES; i++)
		CHECK_INT_EQ(bus_register(&bus, 0x10000 + i * 0x10, 0x10, record_access, &a), 0);
	CHECK_INT_EQ(bus_register(&bus, 0x90000, 0x10, record_access, &a), -ENOSPC);
}

int main(void)
{
	RUN_TEST(test_plan_refusals);
	RUN_TEST(test_plan_layout);
	RUN_TEST(test_ptr_bounds);
	RUN_TEST(test_ptr_across_regions);
	RUN_TEST(test_host_mappings_are_huge_page_aligned);
	RUN_TEST(test_bus);
	return harness_finish();
}
