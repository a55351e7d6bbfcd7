/*
 * virtio-rng: the guest's /dev/hwrng, filled from the host's getrandom(). As a VM device it
 * is registered as "rng" (src/devices/registry.c); the calls below let tests drive it through
 * its virtio-mmio registers without a VM.
 */
#ifndef VOIDBOX_DEVICES_RNG_H
#define VOIDBOX_DEVICES_RNG_H

#include <stdint.h>

#include "devices/virtio_mmio.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

struct rng_device;

struct rng_device *rng_device_create(const struct guest_memory *mem, struct irq_line irq);
void rng_device_destroy(struct rng_device *dev);
struct virtio_mmio *rng_device_transport(struct rng_device *dev);
/* Bytes handed to the guest so far. */
uint64_t rng_device_bytes_served(struct rng_device *dev);

#endif
