/* Plugging a virtio-mmio device into a VM (see virtio_attach.h). */
#include "devices/virtio_attach.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

int virtio_attach(struct vm *vm, const struct virtio_attach *spec, void **dev_out, char *err,
		  size_t errlen)
{
	struct vm_virtio_mmio_slot slot;
	void *dev = NULL;
	int rc = vm_virtio_mmio_slot_reserve(vm, &slot);

	if (rc < 0) {
		snprintf(err, errlen, "no virtio-mmio slot left for %s: attach fewer devices "
			 "(mounts, disks)", spec->what);
		return rc;
	}
	rc = spec->create(spec->ctx, vm_guest_memory(vm), slot.irq, &dev, err, errlen);
	if (rc < 0)
		return rc;
	rc = vm_device_attach(vm, spec->type, dev);
	if (rc < 0) {
		spec->destroy(dev);
		snprintf(err, errlen, "too many devices for %s: %s", spec->what, strerror(-rc));
		return rc;
	}
	rc = vm_virtio_mmio_slot_attach(vm, &slot, virtio_mmio_access, spec->transport(dev));
	if (rc < 0) {
		snprintf(err, errlen, "cannot attach %s at 0x%" PRIx64 ": %s", spec->what,
			 slot.base, strerror(-rc));
		return rc;
	}
	if (spec->kick_fd) {
		/* a notify only wakes the worker, which looks at every queue: no datamatch */
		rc = vm_bind_doorbell(vm, slot.base + VIRTIO_MMIO_QUEUE_NOTIFY, sizeof(uint32_t),
				      spec->kick_fd(dev));
		if (rc < 0)
			log_debug(spec->type->name, "queue notifies go through user space: "
				  "KVM_IOEVENTFD: %s", strerror(-rc));
	}
	if (dev_out)
		*dev_out = dev;
	return 0;
}
