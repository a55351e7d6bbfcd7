/*
 * The VM lifecycle the rest of the host uses: create (validate, map memory, load the kernel),
 * attach virtio-mmio devices to slots, start (ACPI tables, vCPU threads), wait for an exit
 * reason, request a stop, destroy (join every thread, close every fd, unmap memory).
 *
 * Exit reasons: the guest ends a VM by powering off (ACPI S5) or by resetting (i8042 pulse,
 * ACPI reset register, triple fault). voidbox never restarts a guest, so a reset is the end
 * of the VM. The kernel runs with panic=-1, so a panic becomes a reset; when the serial log
 * showed "Kernel panic" before the reset, the reason is VM_EXIT_GUEST_PANIC. A triple fault
 * without a panic first is a crash the kernel could not even report, so it has its own
 * reason (VM_EXIT_GUEST_TRIPLE_FAULT) rather than passing for a reboot.
 */
#ifndef VOIDBOX_VMM_VM_H
#define VOIDBOX_VMM_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/bus.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define VM_SECRET_LEN 32
/* The one limit of each quantity: specs, CLI flags and the VMM all check against these. */
#define VM_MAX_VCPUS 64
#define VM_MAX_MEMORY_MB (1024u * 1024u)
#define VM_DEFAULT_MEMORY_MB 256
/* virtio-mmio slots: one 0x200 window per page in the MMIO gap, GSI 10 + slot (level). */
#define VM_VIRTIO_MMIO_BASE 0xd0000000ULL
#define VM_VIRTIO_MMIO_STRIDE 0x1000ULL
#define VM_VIRTIO_MMIO_SIZE 0x200U
#define VM_VIRTIO_MMIO_FIRST_GSI 10U
#define VM_VIRTIO_MMIO_MAX_SLOTS 12
/* virtio-blk disks one VM may have (each takes a virtio-mmio slot). */
#define VM_MAX_DISKS 8

enum vm_exit_reason {
	VM_EXIT_NONE,		/* still running */
	VM_EXIT_GUEST_POWEROFF, /* poweroff / halt through ACPI S5 */
	VM_EXIT_GUEST_REBOOT,	/* reset requested: treated as the end of the VM */
	VM_EXIT_GUEST_PANIC,	/* kernel panic (then reset, panic=-1) */
	VM_EXIT_HOST_STOP,	/* vm_request_stop() */
	VM_EXIT_INTERNAL_ERROR, /* KVM or VMM failure: see the log */
	VM_EXIT_GUEST_TRIPLE_FAULT, /* the CPU could not deliver an exception: a guest crash */
};

/* A host file the guest sees as a virtio-blk disk. */
struct vm_disk {
	const char *path;
	bool read_only; /* opened O_RDONLY and offered with VIRTIO_BLK_F_RO */
};
struct net_config; /* src/devices/net.h */
/* A host directory shared with the guest over virtio-fs (src/devices/fs.c). */
struct vm_share {
	const char *host_dir; /* an existing directory */
	const char *tag;      /* what the guest mounts: `mount -t virtiofs TAG DIR` */
	bool read_only;	      /* the host server answers EROFS to every change */
};

struct vm_config {
	const char *kernel_path;    /* bzImage */
	const char *initramfs_path; /* NULL: none */
	const char *cmdline;	    /* extra kernel arguments, appended last; may be NULL */
	unsigned int memory_mb;	    /* 0: VM_DEFAULT_MEMORY_MB */
	unsigned int vcpus;	    /* 0: 1 */
	const char *serial_log_path; /* file that receives the guest console; NULL: discard */
	bool serial_to_stdout;	     /* console to stdout instead of a file */
	bool has_secret;	     /* use secret below instead of a fresh random one */
	uint8_t secret[VM_SECRET_LEN];
	/*
	 * When set and the kernel is an XZ bzImage, boot its uncompressed vmlinux instead,
	 * extracted once into this directory (named by the bzImage's size and mtime). Saves the
	 * guest's decompression on every boot (seconds when nested) at the cost of KASLR.
	 */
	const char *vmlinux_cache_dir;
	/* virtio-vsock: the host side listens on this AF_UNIX path; NULL: no vsock device. */
	const char *vsock_socket_path;
	uint64_t vsock_cid; /* guest CID (>= 3); 0: a random one */
	/* Leaves out the virtio-rng entropy device every VM otherwise has. */
	bool no_entropy_device;
	/*
	 * Queue notifications exit to a vCPU thread in user space instead of signalling the
	 * device's eventfd inside KVM (KVM_IOEVENTFD); for measuring what the doorbells save.
	 */
	bool no_doorbells;
	/*
	 * The host CPU chosen for this VM's threads by whoever creates VMs in turn
	 * (vm_placement_choose), when the VM is built in another process whose own turn counter
	 * would start every VM on the same CPU; has_placement_cpu false: vm_create chooses.
	 */
	bool has_placement_cpu;
	int placement_cpu;
	/*
	 * Runs vCPU and device threads without their seccomp filters; only for tests under
	 * valgrind, which cannot run filtered threads.
	 */
	bool no_thread_filters;
	/* virtio-blk: the guest's /dev/vda, /dev/vdb... in this order; at most VM_MAX_DISKS. */
	const struct vm_disk *disks;
	unsigned int disk_count;
	/*
	 * User-mode networking (virtio-net over libslirp, src/devices/net.h) with its egress
	 * policy and published ports; NULL: the VM has no network device.
	 */
	const struct net_config *network;
	/*
	 * A restore only: claimed host loopback ports its guest may reach (a snapshot's network
	 * section saves no grants: vm_restore_options.granted_ports, src/devices/net_policy.h).
	 */
	const uint16_t *restore_granted_ports;
	unsigned int restore_granted_port_count;
	/* virtio-fs: one device per share, in this order; a restore re-opens the saved ones. */
	const struct vm_share *shares;
	unsigned int share_count;
};

struct vm;

struct vm_virtio_mmio_slot {
	uint64_t base;
	uint32_t size;
	uint32_t gsi;
	struct irq_line irq; /* level-triggered line to the guest's IOAPIC */
};

int vm_create(const struct vm_config *cfg, struct vm **out, char *err, size_t errlen);

/*
 * Takes the next virtio-mmio slot (address window, GSI, IRQ line) for a device being built;
 * the device then attaches its register handler. Only before vm_start. -ENOSPC when full.
 */
int vm_virtio_mmio_slot_reserve(struct vm *vm, struct vm_virtio_mmio_slot *slot);
int vm_virtio_mmio_slot_attach(struct vm *vm, const struct vm_virtio_mmio_slot *slot,
			       bus_access_fn access, void *opaque);
/* Guest RAM, for devices that follow guest pointers. */
const struct guest_memory *vm_guest_memory(struct vm *vm);
/* The KVM VM fd, for devices that use ioeventfd/irqfd. */
int vm_kvm_fd(struct vm *vm);

/* Builds the ACPI tables from the attached devices and starts every vCPU thread. */
int vm_start(struct vm *vm);
/*
 * Waits until the VM has ended (0, *reason set) or timeout_ms passed (-ETIMEDOUT).
 * timeout_ms < 0 waits forever.
 */
int vm_wait(struct vm *vm, int timeout_ms, enum vm_exit_reason *reason);
/*
 * A descriptor that polls readable once the VM has ended, for a loop that waits on other
 * descriptors too (vm_wait then returns at once); -1 when none could be made. Owned by vm.
 */
int vm_end_event_fd(const struct vm *vm);
/* Asks every vCPU to stop; returns at once. Safe from any thread, repeatable. */
void vm_request_stop(struct vm *vm);
/* Stops, joins every thread, closes every fd, unmaps memory, frees vm. NULL is fine. */
void vm_destroy(struct vm *vm);

const char *vm_exit_reason_name(enum vm_exit_reason reason);
/* The secret on the kernel command line, hex (VM_SECRET_LEN * 2 + 1 bytes). */
void vm_secret_hex(const struct vm *vm, char *out);
const char *vm_kernel_cmdline(const struct vm *vm);
/* The vsock device's guest CID, 0 when the VM has none. */
uint64_t vm_vsock_cid(const struct vm *vm);
/* Milliseconds from vm_start to the guest's first console byte; -1 if none yet. */
long vm_first_output_ms(struct vm *vm);

#endif
