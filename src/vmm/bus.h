/*
 * Address-range dispatch for vCPU exits: one bus for MMIO, one for port I/O. Devices register
 * a range and a handler; the vCPU loop looks the exit address up here and knows nothing about
 * devices. Handlers run on the vCPU thread that exited and must do their own locking.
 */
#ifndef VOIDBOX_VMM_BUS_H
#define VOIDBOX_VMM_BUS_H

#include <stdbool.h>
#include <stdint.h>

#define BUS_MAX_RANGES 32

/* data is len (1,2,4 or 8) bytes, little-endian; offset is relative to the range base. */
typedef void (*bus_access_fn)(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			      bool is_write);

struct bus_range {
	uint64_t base;
	uint64_t size;
	bus_access_fn access;
	void *opaque;
};

struct bus {
	struct bus_range ranges[BUS_MAX_RANGES];
	unsigned int range_count;
};

/* Returns 0, -EEXIST on overlap, -ENOSPC when full. Ranges are registered before vCPUs start. */
int bus_register(struct bus *bus, uint64_t base, uint64_t size, bus_access_fn access,
		 void *opaque);
/* Dispatches; returns false when no range claims addr (reads then see all-ones). */
bool bus_dispatch(const struct bus *bus, uint64_t addr, uint8_t *data, uint32_t len,
		  bool is_write);

#endif
