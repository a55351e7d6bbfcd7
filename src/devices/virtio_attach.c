/* Plugging a virtio-mmio device into a VM (see virtio_attach.h). */
#include "devices/virtio_attach.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

int virtio_attach(struct vm *vm, const struct virtio_attach *spec, char *err, size_t errlen)
{
	struct virtio_attached made = { .kick_fd = -1 };
	struct vm_virtio_mmio_slot slot;
	int rc = vm_virtio_mmio_slot_reserve(vm, &slot);

	if (rc < 0) {
		snprintf(err, errlen, "no virtio-mmio slot left for %s: attach fewer devices "
			 "(mounts, disks)", spec->what);
		return rc;
	}
	rc = spec->create(spec->ctx, vm_guest_memory(vm), slot.irq, &made, err, errlen);
	if (rc < 0)
		return rc;
	rc = vm_device_attach(vm, spec->type, made.dev);
	if (rc < 0) {
		spec->type->ops->destroy(made.dev);
		snprintf(err, errlen, "too many devices for %s: %s", spec->what, strerror(-rc));
		return rc;
	}
	rc = vm_virtio_mmio_slot_attach(vm, &slot, virtio_mmio_access, made.transport);
	if (rc < 0) {
		snprintf(err, errlen, "cannot attach %s at 0x%" PRIx64 ": %s", spec->what,
			 slot.base, strerror(-rc));
		return rc;
	}
	if (made.kick_fd >= 0) {
		/* a notify only wakes the worker, which looks at every queue: no datamatch */
		rc = vm_bind_doorbell(vm, slot.base + VIRTIO_MMIO_QUEUE_NOTIFY, sizeof(uint32_t),
				      made.kick_fd);
		if (rc < 0)
			log_debug(spec->type->name, "queue notifies go through user space: "
				  "KVM_IOEVENTFD: %s", strerror(-rc));
	}
	return 0;
}
