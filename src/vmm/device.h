/*
 * How a device plugs into a VM. The VMM names no device: every device is an instance with
 * one ops table, attached to the VM's device list, and the VM reaches it only through that
 * table -- to save and restore its snapshot section, to tell it the guest has stopped, and to
 * destroy it. Device kinds are listed once, in src/devices/registry.c; the VM creates them
 * from that list on a cold boot and from a snapshot's device sections on a restore, so a
 * restored VM gets the same devices, in the same order, at the same virtio-mmio slots.
 *
 * A device takes what it needs from the VM through vm.h's device-facing calls (a virtio-mmio
 * slot, port I/O ranges, an interrupt line, guest memory) and from the vm_config the VM was
 * created with (or the restore options, which become one).
 */
#ifndef VOIDBOX_VMM_DEVICE_H
#define VOIDBOX_VMM_DEVICE_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/byte_buffer.h"
#include "vmm/vm.h"

/* The name of a device kind, also its snapshot section's name. */
#define VM_DEVICE_NAME_MAX 16
#define VM_MAX_DEVICES 16

struct vm_device_ops {
	/* Snapshot sections this build writes carry this version; older ones must still read. */
	uint32_t state_version;
	/*
	 * Called with every vCPU parked: writes the device's state and leaves the device quiet
	 * (its workers no longer touch guest memory or raise interrupts) until resume, so the
	 * memory file written next agrees with it. NULL: the device has no state.
	 */
	int (*save)(void *dev, struct byte_writer *out);
	/* Ends the quiet that save began (the snapshot is written, or failed). */
	void (*resume)(void *dev);
	/*
	 * Called on a restored VM once KVM's irqchip holds its saved state, with what save wrote
	 * under a version no newer than state_version. Every byte is checked: 0 or -errno, err set.
	 */
	int (*restore)(void *dev, struct byte_reader *in, uint32_t version, char *err,
		       size_t errlen);
	/* The guest has ended for good: release whoever waits on it (may be NULL). */
	void (*guest_stopped)(void *dev);
	/* True when the device saw the guest kernel panic (a console); may be NULL. */
	bool (*saw_guest_panic)(void *dev);
	/* CLOCK_MONOTONIC ns of the guest's first console output, 0 if none; may be NULL. */
	uint64_t (*first_output_ns)(void *dev);
	/* Stops the device's threads and frees it; the VM's vCPUs are already joined. */
	void (*destroy)(void *dev);
};

/*
 * A host path a restore opens by the name its device section holds (a disk, a share's
 * directory), so whoever confines the restore (the VMM process's jail) can let exactly it in.
 */
enum vm_host_path_access {
	VM_HOST_PATH_READ_ONLY,
	VM_HOST_PATH_READ_WRITE,
};

enum vm_host_path_use {
	VM_HOST_PATH_AT_CREATION,     /* opened once while the device is created, then held */
	VM_HOST_PATH_WHILE_RUNNING,   /* reached by path for the VM's whole life */
};

struct vm_host_path {
	const char *path; /* as the section names it; the restore opens exactly this */
	enum vm_host_path_access access;
	enum vm_host_path_use use;
};

/* Called once per path; a nonzero return stops the listing and is returned. */
typedef int (*vm_host_path_fn)(const struct vm_host_path *path, void *opaque);

/* A device's section as a snapshot holds it. */
struct vm_device_section {
	char name[VM_DEVICE_NAME_MAX];
	uint32_t version;
	const uint8_t *state;
	size_t state_len;
};

struct vm_device_type {
	const char *name;
	const struct vm_device_ops *ops;
	/*
	 * Creates the device and attaches it with vm_device_attach. On a cold boot (saved NULL)
	 * the device is created only when cfg asks for it (returning 0 without attaching
	 * otherwise); on a restore (saved set) it must be created, with the identity saved
	 * (read from saved->state) and the host-side resources cfg names. 0 or -errno, err set.
	 */
	int (*create)(struct vm *vm, const struct vm_config *cfg,
		      const struct vm_device_section *saved, char *err, size_t errlen);
	/*
	 * Every host path create opens by a name saved holds, each handed to each; NULL: the
	 * kind opens none (what it opens comes from the restore options). Reads saved as create
	 * does, before any VM exists: 0, -EBADMSG with err set for a malformed section, or what
	 * each returned.
	 */
	int (*host_paths)(const struct vm_device_section *saved, vm_host_path_fn each,
			  void *opaque, char *err, size_t errlen);
	/*
	 * Loads the shared libraries create will call (src/dynlib opens them on first use),
	 * for the same cfg and saved as create: a VMM process asks before it enters its jail,
	 * where the host's /lib is out of reach (vm_devices_load_libraries,
	 * vm_snapshot_load_device_libraries). NULL: the kind calls none. 0, or -errno with err
	 * saying what to install.
	 */
	int (*load_libraries)(const struct vm_config *cfg, const struct vm_device_section *saved,
			      char *err, size_t errlen);
};

/* Every device kind, in the order a cold boot creates them (src/devices/registry.c). */
extern const struct vm_device_type *const vm_device_types[];
const struct vm_device_type *vm_device_type_find(const char *name);
/*
 * Every kind's load_libraries for a cold boot of cfg; a restore's are asked by
 * vm_snapshot_load_device_libraries. 0, or the first failure with err.
 */
int vm_devices_load_libraries(const struct vm_config *cfg, char *err, size_t errlen);

/* Adds a created device of type to the VM; the VM destroys it from then on. 0 or -errno. */
int vm_device_attach(struct vm *vm, const struct vm_device_type *type, void *dev);

/* ---- what a device may ask of the VM while it is created ---- */

/* Port I/O range for a legacy device; 0 or -EEXIST on overlap. */
int vm_pio_register(struct vm *vm, uint64_t base, uint64_t len, bus_access_fn access,
		    void *opaque);
/* A level-triggered line to the guest's IOAPIC at gsi. */
struct irq_line vm_irq_line(struct vm *vm, uint32_t gsi);
/* The guest asked for a reset (i8042 pulse): voidbox ends the VM. Any thread. */
void vm_guest_requested_reset(struct vm *vm);
/*
 * Makes a guest write of len bytes at addr (a virtio-mmio QUEUE_NOTIFY register) signal the
 * eventfd fd inside KVM, without an exit to a vCPU thread in user space; the register's
 * handler then never sees those writes, so only a device whose notify does nothing but wake
 * a worker through fd may ask. Does nothing (returns 0) when the VM's config turned doorbells
 * off. 0 or -errno (the caller keeps the slower MMIO path then).
 */
int vm_bind_doorbell(struct vm *vm, uint64_t addr, uint32_t len, int fd);
/*
 * Inside a device's create: the CPUs a streaming worker runs on instead of the VM's one
 * (vm_placement_float_thread), or NULL when the VM's threads are not pinned. The set lives
 * only until create returns: a device copies it.
 */
const cpu_set_t *vm_stream_worker_cpus(const struct vm *vm);
/* Whether device threads install their seccomp filters (vmm/thread_filter.h). */
bool vm_thread_filters_on(const struct vm *vm);
/* The vsock device records the guest's CID here; the VM saves it as its identity. */
void vm_set_vsock_cid(struct vm *vm, uint64_t cid);

#endif
