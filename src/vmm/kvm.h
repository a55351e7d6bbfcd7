/*
 * The KVM system and VM file descriptors and the few VM-wide ioctls, with errors phrased as
 * remedies: a user who cannot open /dev/kvm is told which module to load or which group to
 * join, not just an errno.
 */
#ifndef VOIDBOX_VMM_KVM_H
#define VOIDBOX_VMM_KVM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/guest_memory.h"

#define KVM_DEVICE_PATH "/dev/kvm"

struct kvm {
	int sys_fd;
	int vm_fd;
	size_t vcpu_mmap_size;
	bool has_tsc_deadline;
	bool has_pre_fault_memory; /* KVM_PRE_FAULT_MEMORY (Linux 6.10) */
};

/* Opens /dev/kvm, checks the API version and required capabilities. */
int kvm_open(struct kvm *kvm, char *err, size_t errlen);
/* Creates the VM with an in-kernel IRQ chip and PIT. */
int kvm_create_vm(struct kvm *kvm, char *err, size_t errlen);
/* One KVM memslot per guest memory region. */
int kvm_map_guest_memory(struct kvm *kvm, const struct guest_memory *mem);
/* Sets a GSI level on the in-kernel IOAPIC; opaque is a struct kvm. */
void kvm_set_irq_level(void *opaque, uint32_t gsi, bool asserted);
void kvm_close(struct kvm *kvm);
/*
 * Maps [gpa, gpa + size) into the VM's stage-2 page tables as read faults of the vCPU would
 * (KVM_PRE_FAULT_MEMORY; kvm->has_pre_fault_memory says whether the kernel has it), so the
 * guest's first touches of those pages exit to nobody. 0, or -errno (EOPNOTSUPP where the MMU
 * cannot, e.g. without two-dimensional paging).
 */
int kvm_pre_fault_memory(int vcpu_fd, uint64_t gpa, uint64_t size);

/*
 * Whether this host's KVM runs standard guests at hardware speed: true, or false with the
 * reason and the remedy in why. The loaded backend module decides (kvm_intel/kvm_amd: yes;
 * kvm_pvm: no); for any other backend a tiny real-mode guest loop is timed.
 */
bool kvm_probe_usable(char *why, size_t why_len);

#endif
