/*
 * A bus is a short array of non-overlapping ranges scanned linearly: a VM has a handful of
 * devices, so a scan is cheaper than any tree, and the array is filled before vCPUs start and
 * never changes afterwards, so lookups need no lock.
 */
#include "vmm/bus.h"

#include <errno.h>
#include <string.h>

static bool bus_range_overlaps(const struct bus_range *range, uint64_t base, uint64_t size)
{
	return base < range->base + range->size && range->base < base + size;
}

int bus_register(struct bus *bus, uint64_t base, uint64_t size, bus_access_fn access,
		 void *opaque)
{
	if (!size || !access || base + size < base)
		return -EINVAL;
	for (unsigned int i = 0; i < bus->range_count; i++)
		if (bus_range_overlaps(&bus->ranges[i], base, size))
			return -EEXIST;
	if (bus->range_count >= BUS_MAX_RANGES)
		return -ENOSPC;
	bus->ranges[bus->range_count++] = (struct bus_range){
		.base = base, .size = size, .access = access, .opaque = opaque,
	};
	return 0;
}

bool bus_dispatch(const struct bus *bus, uint64_t addr, uint8_t *data, uint32_t len,
		  bool is_write)
{
	for (unsigned int i = 0; i < bus->range_count; i++) {
		const struct bus_range *range = &bus->ranges[i];

		if (addr < range->base || addr - range->base >= range->size)
			continue;
		range->access(range->opaque, addr - range->base, data, len, is_write);
		return true;
	}
	if (!is_write)
		memset(data, 0xff, len);
	return false;
}
