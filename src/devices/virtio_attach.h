/*
 * The steps every virtio-mmio device takes to plug into a VM, in one place: reserve a slot,
 * create the device on the slot's interrupt line, add it to the VM's device list, put its
 * transport's registers at the slot, and (for a device whose queue notify only wakes a
 * worker) bind that notify register to the worker's eventfd in KVM. Each device's create
 * hook supplies only what differs: how to build the device; a device the VM could not take
 * is freed with its type's destroy op.
 */
#ifndef VOIDBOX_DEVICES_VIRTIO_ATTACH_H
#define VOIDBOX_DEVICES_VIRTIO_ATTACH_H

#include <stddef.h>

#include "devices/virtio_mmio.h"
#include "vmm/device.h"

/* What a create callback made. */
struct virtio_attached {
	void *dev;			/* what the type's ops take */
	struct virtio_mmio *transport;	/* the registers to map at the slot */
	int kick_fd; /* the eventfd that wakes the worker; -1 (preset): notifies exit to MMIO */
};

struct virtio_attach {
	const struct vm_device_type *type;
	/* The device as errors name it: "the entropy device", "the share /home/me/src". */
	const char *what;
	/* Builds the device on irq: 0 with out filled, or -errno with err set. */
	int (*create)(void *ctx, const struct guest_memory *mem, struct irq_line irq,
		      struct virtio_attached *out, char *err, size_t errlen);
	void *ctx;
};

/*
 * Reserves, creates, attaches and binds as above. 0 (the device is now the VM's), or -errno
 * with err set and nothing left behind but what the VM owns.
 */
int virtio_attach(struct vm *vm, const struct virtio_attach *spec, char *err, size_t errlen);

#endif
