/*
 * Every device kind a VM can have, in the order a cold boot creates them (which is also the
 * order of their virtio-mmio slots). Adding a device is its own file plus one line here.
 */
#include <stddef.h>

#include "vmm/device.h"

#define VM_DEVICE_KINDS(X) X(serial) X(i8042) X(vsock) X(rng) X(blk) X(net) X(fs)

#define VM_DEVICE_DECLARE(kind) extern const struct vm_device_type kind##_device_type;
#define VM_DEVICE_ENTRY(kind) &kind##_device_type,

VM_DEVICE_KINDS(VM_DEVICE_DECLARE)

const struct vm_device_type *const vm_device_types[] = { VM_DEVICE_KINDS(VM_DEVICE_ENTRY) NULL };
