/*
 * The steps every virtio-mmio device takes to plug into a VM, in one place: reserve a slot,
 * create the device on the slot's interrupt line, add it to the VM's device list, put its
 * transport's registers at the slot, and (for a device whose queue notify only wakes a
 * worker) bind that notify register to the worker's eventfd in KVM. Each device's create
 * hook supplies only what differs: how to build the device, its transport and its kick fd.
 */
#ifndef VOIDBOX_DEVICES_VIRTIO_ATTACH_H
#define VOIDBOX_DEVICES_VIRTIO_ATTACH_H

#include <stddef.h>

#include "devices/virtio_mmio.h"
#include "vmm/device.h"

struct virtio_attach {
	const struct vm_device_type *type;
	/* The device as errors name it: "the entropy device", "the share /home/me/src". */
	const char *what;
	/* Builds the device on irq: 0 with *dev set, or -errno with err set. */
	int (*create)(void *ctx, const struct guest_memory *mem, struct irq_line irq, void **dev,
		      char *err, size_t errlen);
	struct virtio_mmio *(*transport)(void *dev);
	/* Frees a device the VM did not take. */
	void (*destroy)(void *dev);
	/* The eventfd that wakes the device's worker; NULL: notifies take the MMIO path. */
	int (*kick_fd)(void *dev);
	void *ctx;
};

/*
 * Reserves, creates, attaches and binds as above. 0 with *dev_out (may be NULL) set to the
 * device, now the VM's; or -errno with err set and nothing left behind but what the VM owns.
 */
int virtio_attach(struct vm *vm, const struct virtio_attach *spec, void **dev_out, char *err,
		  size_t errlen);

#endif
