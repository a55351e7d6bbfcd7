/*
 * One vCPU's architectural state as KVM exposes it, captured and restored as KVM's own
 * structures (their layout is KVM ABI, stable across kernels), so the snapshot file stores
 * them verbatim. Capture and restore live apart from the run loop in vcpu.c because the
 * restore order matters and is written down once, here (docs/snapshot-format.md).
 */
#ifndef VOIDBOX_VMM_VCPU_STATE_H
#define VOIDBOX_VMM_VCPU_STATE_H

#include <linux/kvm.h>
#include <stdint.h>

#define VCPU_STATE_MAX_MSRS 64
/* the legacy 4 KiB XSAVE area of struct kvm_xsave (its flexible tail is for AMX, unused) */
#define VCPU_STATE_XSAVE_WORDS 1024

struct vcpu_state {
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_lapic_state lapic;
	struct kvm_vcpu_events events;
	struct kvm_xcrs xcrs;
	/* struct kvm_xsave's region[], kept as words: the struct ends in a flexible array */
	uint32_t xsave_region[VCPU_STATE_XSAVE_WORDS];
	struct kvm_mp_state mp_state;
	struct kvm_debugregs debugregs;
	uint32_t msr_count;
	uint32_t reserved;
	struct kvm_msr_entry msrs[VCPU_STATE_MAX_MSRS];
};

/*
 * Completes any port or MMIO access the vCPU exited for (KVM_RUN with immediate_exit), so the
 * captured registers are those after the instruction. The vCPU's thread must be joined.
 */
int vcpu_state_settle(int vcpu_fd, struct kvm_run *run);
/* Every field above; MSRs this host's KVM does not know are left out. Returns 0 or -errno. */
int vcpu_state_capture(int vcpu_fd, struct vcpu_state *state);
/* Restores in the documented order; CPUID must already be set. Returns 0 or -errno. */
int vcpu_state_restore(int vcpu_fd, const struct vcpu_state *state);
/* Tells a kvm-clock guest it was paused (no soft-lockup reports); ignores guests without it. */
void vcpu_state_clock_paused(int vcpu_fd);

#endif
