/*
 * The vsock device as a VM device ("vsock"): created when the VM is given a host socket path,
 * with a random guest CID unless one is asked for, and recreated on restore with the CID its
 * snapshot section names (the guest kernel still believes in it).
 *
 * Its snapshot section is the CID and the transport's registers and ring indices. The worker
 * writes guest memory from the host side, which parking the vCPUs does not stop, so save
 * holds the device lock -- the worker only touches guest memory under it -- until resume:
 * the ring indices saved are then the ones the memory file shows. The registers are read
 * first, because reading them takes the same lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/log.h"
#include "devices/virtio_attach.h"
#include "devices/vsock.h"
#include "devices/vsock_internal.h"
#include "vmm/device.h"

#define VSOCK_STATE_VERSION 1u
#define VSOCK_CID_RANGE (UINT32_MAX - VSOCK_MIN_GUEST_CID) /* 32-bit CIDs from 3, below -1 */

static int vsock_vm_save(void *opaque, struct byte_writer *out)
{
	struct vsock_device *dev = opaque;
	struct virtio_mmio_state state;

	virtio_mmio_state_get_held(dev->transport, &state); /* dev->lock, until resume */
	byte_writer_u64(out, dev->guest_cid);
	virtio_mmio_state_write(out, &state);
	return 0;
}

static void vsock_vm_resume(void *opaque)
{
	struct vsock_device *dev = opaque;

	pthread_mutex_unlock(&dev->lock);
}

/* A restored guest's connections are from before the snapshot: it is told to drop them. */
static int vsock_vm_restore(void *opaque, struct byte_reader *in, uint32_t version, char *err,
			    size_t errlen)
{
	struct vsock_device *dev = opaque;
	struct virtio_mmio_state state;
	uint64_t cid = byte_reader_u64(in);
	int rc;

	(void)version;
	virtio_mmio_state_read(in, &state);
	if (byte_reader_finish(in) < 0 || cid != dev->guest_cid) {
		snprintf(err, errlen, "the vsock device's saved state is malformed: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	rc = virtio_mmio_state_set(dev->transport, &state);
	if (rc < 0) {
		snprintf(err, errlen, "the vsock device refused its saved state: %s",
			 strerror(-rc));
		return rc;
	}
	return vsock_device_reset_transport(dev);
}

static void vsock_vm_guest_stopped(void *opaque)
{
	vsock_device_guest_stopped(opaque);
}

static void vsock_vm_destroy(void *opaque)
{
	vsock_device_destroy(opaque);
}

extern const struct vm_device_type vsock_device_type;

static const struct vm_device_ops vsock_vm_ops = {
	.state_version = VSOCK_STATE_VERSION,
	.save = vsock_vm_save,
	.resume = vsock_vm_resume,
	.restore = vsock_vm_restore,
	.guest_stopped = vsock_vm_guest_stopped,
	.destroy = vsock_vm_destroy,
};

static uint64_t vsock_vm_random_cid(void)
{
	uint32_t value = 0;

	if (getrandom(&value, sizeof(value), 0) != sizeof(value))
		value = (uint32_t)time(NULL);
	return VSOCK_MIN_GUEST_CID + value % VSOCK_CID_RANGE;
}

static int vsock_vm_pick_cid(const struct vm_config *cfg, const struct vm_device_section *saved,
			     uint64_t *cid, char *err, size_t errlen)
{
	struct byte_reader in;

	if (saved) {
		byte_reader_init(&in, saved->state, saved->state_len);
		*cid = byte_reader_u64(&in);
		if (in.failed) {
			snprintf(err, errlen, "the vsock section of the snapshot is truncated: take "
				 "the snapshot again");
			return -EBADMSG;
		}
		if (!cfg->vsock_socket_path) {
			snprintf(err, errlen, "the snapshot has a vsock device: give the restored "
				 "VM a vsock socket path");
			return -EINVAL;
		}
		return 0;
	}
	if (cfg->vsock_cid &&
	    (cfg->vsock_cid < VSOCK_MIN_GUEST_CID || cfg->vsock_cid >= UINT32_MAX)) {
		snprintf(err, errlen, "vsock CID %" PRIu64 " is reserved: use 3 or more",
			 cfg->vsock_cid);
		return -EINVAL;
	}
	*cid = cfg->vsock_cid ? cfg->vsock_cid : vsock_vm_random_cid();
	return 0;
}

static int vsock_attach_create(void *ctx, const struct guest_memory *mem, struct irq_line irq,
			       struct virtio_attached *out, char *err, size_t errlen)
{
	struct vsock_device_config *vsock_cfg = ctx;
	struct vsock_device *dev;

	vsock_cfg->mem = mem;
	vsock_cfg->irq = irq;
	dev = vsock_device_create(vsock_cfg, err, errlen);
	if (!dev)
		return -EIO;
	*out = (struct virtio_attached){ .dev = dev, .transport = dev->transport,
					 .kick_fd = vsock_device_kick_fd(dev) };
	return 0;
}

static int vsock_vm_create(struct vm *vm, const struct vm_config *cfg,
			   const struct vm_device_section *saved, char *err, size_t errlen)
{
	struct vsock_device_config vsock_cfg = {
		.uds_path = cfg->vsock_socket_path,
		.worker_mode = VSOCK_WORKER_THREAD,
		.confine_worker = vm_thread_filters_on(vm),
	};
	const struct virtio_attach spec = {
		.type = &vsock_device_type, .what = "vsock", .create = vsock_attach_create,
		.ctx = &vsock_cfg,
	};
	uint64_t cid = 0;
	int rc;

	if (!saved && !cfg->vsock_socket_path)
		return 0;
	rc = vsock_vm_pick_cid(cfg, saved, &cid, err, errlen);
	if (rc < 0)
		return rc;
	vsock_cfg.guest_cid = cid;
	rc = virtio_attach(vm, &spec, err, errlen);
	if (rc == 0)
		vm_set_vsock_cid(vm, cid);
	return rc;
}

const struct vm_device_type vsock_device_type = {
	.name = "vsock",
	.ops = &vsock_vm_ops,
	.create = vsock_vm_create,
};
