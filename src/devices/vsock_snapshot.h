/*
 * What a VM snapshot needs from the vsock device beyond the transport's registers: a way to
 * hold its worker still (it writes guest memory from the host side, which the vCPUs' pause
 * does not stop) and the ring indices as they are while it is held. Kept apart from vsock.c
 * so the snapshot code reaches the device's insides in one place.
 */
#ifndef VOIDBOX_DEVICES_VSOCK_SNAPSHOT_H
#define VOIDBOX_DEVICES_VSOCK_SNAPSHOT_H

#include <stdint.h>

#include "devices/virtio_mmio.h"
#include "devices/vsock.h"

/*
 * Holds the worker out of guest memory until vsock_snapshot_release. Take only after
 * virtio_mmio_state_get (which takes the same lock); the vCPUs must already be paused.
 */
void vsock_snapshot_hold(struct vsock_device *dev);
void vsock_snapshot_release(struct vsock_device *dev);
/* While held: overwrites state's ring indices with the device's current ones. */
void vsock_snapshot_update_indices(struct vsock_device *dev, struct virtio_mmio_state *state);

#endif
