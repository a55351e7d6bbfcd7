/*
 * The VM's insides, shared by vm.c (create, boot, lifecycle) and the snapshot code (save,
 * restore, fork), which must rebuild a VM from saved state instead of from a kernel image.
 * Nothing outside src/vmm includes this: the rest of the host uses vm.h.
 */
#ifndef VOIDBOX_VMM_VM_INTERNAL_H
#define VOIDBOX_VMM_VM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/acpi.h"
#include "vmm/bus.h"
#include "vmm/cmdline.h"
#include "vmm/device.h"
#include "vmm/guest_memory.h"
#include "vmm/kvm.h"
#include "vmm/placement.h"
#include "vmm/vcpu.h"
#include "vmm/vm.h"

/* One attached device: its kind (name, ops) and the instance. */
struct vm_device_entry {
	const struct vm_device_type *type;
	void *dev;
};

struct vm {
	struct kvm kvm;
	struct guest_memory mem;
	struct bus pio;
	struct bus mmio;
	struct vcpu vcpus[VM_MAX_VCPUS];
	unsigned int vcpu_count;
	unsigned int vcpus_created;
	struct vm_device_entry devices[VM_MAX_DEVICES];
	size_t device_count;
	uint64_t vsock_cid; /* set by the vsock device; 0: none */
	bool no_doorbells;  /* vm_config.no_doorbells */
	bool no_thread_filters; /* vm_config.no_thread_filters */
	int placement_cpu;	/* the host CPU of its threads; VM_PLACEMENT_NONE: any */
	/* while devices are created pinned: the creator's own CPUs (vm_stream_worker_cpus) */
	const cpu_set_t *creator_cpus;
	struct acpi_virtio_device virtio[VM_VIRTIO_MMIO_MAX_SLOTS];
	bool virtio_attached[VM_VIRTIO_MMIO_MAX_SLOTS];
	size_t virtio_count;
	uint8_t secret[VM_SECRET_LEN];
	char cmdline[CMDLINE_MAX];
	uint64_t entry;
	atomic_bool stop;
	bool started;
	uint64_t start_ns;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int end_event_fd; /* eventfd, readable once reason is set (-1: could not be made) */
	pthread_mutex_t kick_lock; /* a kick never targets a thread that was joined */
	enum vm_exit_reason reason;
	/* snapshot state (src/vmm/snapshot.c) */
	bool restored;		/* built from a snapshot: vm_start keeps the guest's ACPI tables */
	bool working_set_known;	/* the restore prefetched its own snapshot's valid list */
	uint64_t working_set_prefaulted; /* pages of it the restore mapped into KVM ahead */
	bool dirty_logging;	/* memslots carry KVM_MEM_LOG_DIRTY_PAGES */
	char *dirty_base_dir;	/* the base a diff of this VM counts from; NULL: none */
	uint64_t dirty_base_id;
	char *fork_base_dir;	/* a base vm_fork wrote for this VM into tmpfs; removed with it */
};

struct vm *vm_alloc(void);
void vm_kick_all(struct vm *vm);
/* Starts a vCPU's thread; a kick from any thread reaches it from then on. 0 or -errno. */
int vm_start_vcpu(struct vm *vm, struct vcpu *vcpu);
void vm_join_vcpu(struct vm *vm, struct vcpu *vcpu);
/* The machine's own ports (ACPI power management), which every VM has. */
int vm_setup_platform(struct vm *vm, char *err, size_t errlen);
/* Cold boot: creates every device kind cfg asks for, in registry order. */
int vm_create_devices(struct vm *vm, const struct vm_config *cfg, char *err, size_t errlen);
/*
 * Around the creation of devices (a boot's or a restore's): the calling thread is pinned to the
 * VM's CPU, which their workers inherit, and a streaming worker finds the creator's own CPUs
 * meanwhile (vm_stream_worker_cpus).
 */
void vm_devices_placement_enter(struct vm *vm, struct vm_placement *placement);
void vm_devices_placement_leave(struct vm *vm, struct vm_placement *placement);
/* Lowers every virtio-mmio interrupt line (a restore, before devices restore their state). */
void vm_lower_virtio_lines(struct vm *vm);
int vm_setup_vcpus(struct vm *vm, char *err, size_t errlen);
/* Frees what snapshot.c attached to the VM; called by vm_destroy. */
void vm_snapshot_release(struct vm *vm);
void vm_fork_release_base(struct vm *vm);

#endif
