/*
 * The vsock device's side of a snapshot. The worker only touches guest memory under the
 * device lock, so holding that lock is what "the worker is paused" means; the indices read
 * while holding it match the guest memory copied while holding it.
 */
#include "devices/vsock_snapshot.h"

#include <pthread.h>

#include "devices/vsock_internal.h"

void vsock_snapshot_hold(struct vsock_device *dev)
{
	pthread_mutex_lock(&dev->lock);
}

void vsock_snapshot_release(struct vsock_device *dev)
{
	pthread_mutex_unlock(&dev->lock);
}

void vsock_snapshot_update_indices(struct vsock_device *dev, struct virtio_mmio_state *state)
{
	if (!dev->active || !dev->queues)
		return;
	for (unsigned int i = 0; i < VSOCK_QUEUE_COUNT && i < state->queue_count; i++) {
		state->queues[i].last_avail_idx = dev->queues[i].last_avail_idx;
		state->queues[i].used_idx = dev->queues[i].used_idx;
	}
}
