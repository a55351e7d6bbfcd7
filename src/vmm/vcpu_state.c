/*
 * vCPU capture and restore. Restore order (each step depends on the ones before it):
 * MSRs without TSC_DEADLINE (EFER, PAT, kvm-clock, IA32_XSS...), sregs (CR0/CR3/CR4 and
 * segments), LAPIC (which disarms the timer), TSC_DEADLINE (re-arms it), vcpu events, XCRs
 * (XCR0 decides which XSAVE components are valid, so it precedes xsave), xsave, regs,
 * debugregs, mp_state last so a halted or uninitialized vCPU stays that way.
 *
 * MSRs are read one at a time so an MSR this host's KVM refuses is skipped instead of failing
 * the whole capture; restore writes only MSRs the snapshot holds.
 */
#include "vmm/vcpu_state.h"

#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#define MSR_IA32_TSC 0x10
#define MSR_IA32_TSC_ADJUST 0x3b
#define MSR_IA32_SYSENTER_CS 0x174
#define MSR_IA32_SYSENTER_ESP 0x175
#define MSR_IA32_SYSENTER_EIP 0x176
#define MSR_IA32_MISC_ENABLE 0x1a0
#define MSR_IA32_PAT 0x277
#define MSR_MTRR_DEF_TYPE 0x2ff
#define MSR_MTRR_PHYS_FIRST 0x200
#define MSR_MTRR_PHYS_COUNT 16 /* 8 base/mask pairs */
#define MSR_MTRR_FIX64K 0x250
#define MSR_MTRR_FIX16K_FIRST 0x258
#define MSR_MTRR_FIX16K_COUNT 2
#define MSR_MTRR_FIX4K_FIRST 0x268
#define MSR_MTRR_FIX4K_COUNT 8
#define MSR_IA32_TSC_DEADLINE 0x6e0
#define MSR_IA32_XSS 0xda0
#define MSR_EFER 0xc0000080
#define MSR_STAR 0xc0000081
#define MSR_LSTAR 0xc0000082
#define MSR_CSTAR 0xc0000083
#define MSR_SYSCALL_MASK 0xc0000084
#define MSR_FS_BASE 0xc0000100
#define MSR_GS_BASE 0xc0000101
#define MSR_KERNEL_GS_BASE 0xc0000102
#define MSR_TSC_AUX 0xc0000103
#define MSR_KVM_WALL_CLOCK_NEW 0x4b564d00
#define MSR_KVM_SYSTEM_TIME_NEW 0x4b564d01
#define MSR_KVM_ASYNC_PF_EN 0x4b564d02
#define MSR_KVM_STEAL_TIME 0x4b564d03
#define MSR_KVM_PV_EOI_EN 0x4b564d04
#define MSR_KVM_POLL_CONTROL 0x4b564d05
#define MSR_KVM_ASYNC_PF_INT 0x4b564d06

/* LAPIC registers (offsets into kvm_lapic_state.regs) for the NO_HZ timer bootstrap. */
#define APIC_LVTT 0x320
#define APIC_TMICT 0x380
#define APIC_TDCR 0x3e0
#define APIC_LVT_MASKED (1u << 16)
#define APIC_LVT_VECTOR_MASK 0xffu
#define APIC_LVT_TIMER_PERIODIC (1u << 17)
#define APIC_LOCAL_TIMER_VECTOR 0xecu /* Linux's LOCAL_TIMER_VECTOR */
#define APIC_BOOTSTRAP_TMICT 0x200000u
#define APIC_TDCR_DIVIDE_BY_1 0xbu

/* Captured in this order; TSC_DEADLINE is written back separately, after the LAPIC. */
static const uint32_t vcpu_state_msr_indices[] = {
	MSR_IA32_TSC, MSR_IA32_TSC_ADJUST,
	MSR_IA32_SYSENTER_CS, MSR_IA32_SYSENTER_ESP, MSR_IA32_SYSENTER_EIP,
	MSR_IA32_MISC_ENABLE, MSR_IA32_PAT, MSR_MTRR_DEF_TYPE,
	MSR_MTRR_PHYS_FIRST + 0, MSR_MTRR_PHYS_FIRST + 1, MSR_MTRR_PHYS_FIRST + 2,
	MSR_MTRR_PHYS_FIRST + 3, MSR_MTRR_PHYS_FIRST + 4, MSR_MTRR_PHYS_FIRST + 5,
	MSR_MTRR_PHYS_FIRST + 6, MSR_MTRR_PHYS_FIRST + 7, MSR_MTRR_PHYS_FIRST + 8,
	MSR_MTRR_PHYS_FIRST + 9, MSR_MTRR_PHYS_FIRST + 10, MSR_MTRR_PHYS_FIRST + 11,
	MSR_MTRR_PHYS_FIRST + 12, MSR_MTRR_PHYS_FIRST + 13, MSR_MTRR_PHYS_FIRST + 14,
	MSR_MTRR_PHYS_FIRST + 15,
	MSR_MTRR_FIX64K, MSR_MTRR_FIX16K_FIRST, MSR_MTRR_FIX16K_FIRST + 1,
	MSR_MTRR_FIX4K_FIRST + 0, MSR_MTRR_FIX4K_FIRST + 1, MSR_MTRR_FIX4K_FIRST + 2,
	MSR_MTRR_FIX4K_FIRST + 3, MSR_MTRR_FIX4K_FIRST + 4, MSR_MTRR_FIX4K_FIRST + 5,
	MSR_MTRR_FIX4K_FIRST + 6, MSR_MTRR_FIX4K_FIRST + 7,
	MSR_IA32_XSS, MSR_EFER, MSR_STAR, MSR_LSTAR, MSR_CSTAR, MSR_SYSCALL_MASK,
	MSR_FS_BASE, MSR_GS_BASE, MSR_KERNEL_GS_BASE, MSR_TSC_AUX,
	MSR_KVM_WALL_CLOCK_NEW, MSR_KVM_SYSTEM_TIME_NEW, MSR_KVM_ASYNC_PF_EN,
	MSR_KVM_STEAL_TIME, MSR_KVM_PV_EOI_EN, MSR_KVM_POLL_CONTROL, MSR_KVM_ASYNC_PF_INT,
	MSR_IA32_TSC_DEADLINE,
};

_Static_assert(sizeof(vcpu_state_msr_indices) / sizeof(vcpu_state_msr_indices[0]) <=
		       VCPU_STATE_MAX_MSRS,
	       "vcpu_state.msrs is too small for the captured MSR list");
_Static_assert(sizeof(((struct kvm_xsave *)0)->region) ==
		       sizeof(((struct vcpu_state *)0)->xsave_region),
	       "vcpu_state.xsave_region must hold kvm_xsave.region");

/* struct kvm_msrs with room for one entry, spelled out: kvm_msrs ends in a flexible array */
struct vcpu_state_one_msr {
	uint32_t nmsrs;
	uint32_t pad;
	struct kvm_msr_entry entry;
};

_Static_assert(offsetof(struct vcpu_state_one_msr, entry) == sizeof(struct kvm_msrs) &&
		       offsetof(struct vcpu_state_one_msr, entry) ==
			       offsetof(struct kvm_msrs, entries),
	       "vcpu_state_one_msr must match the layout of struct kvm_msrs");

int vcpu_state_settle(int vcpu_fd, struct kvm_run *run)
{
	run->immediate_exit = 1;
	int rc = ioctl(vcpu_fd, KVM_RUN, 0);
	int saved = errno;

	run->immediate_exit = 0;
	if (rc < 0 && saved != EINTR)
		return -saved;
	return 0;
}

static int vcpu_state_get_msr(int vcpu_fd, uint32_t index, uint64_t *value)
{
	struct vcpu_state_one_msr one = { .nmsrs = 1, .entry = { .index = index } };

	if (ioctl(vcpu_fd, KVM_GET_MSRS, &one) != 1)
		return -ENOENT;
	*value = one.entry.data;
	return 0;
}

static int vcpu_state_set_msr(int vcpu_fd, uint32_t index, uint64_t value)
{
	struct vcpu_state_one_msr one = {
		.nmsrs = 1, .entry = { .index = index, .data = value },
	};

	return ioctl(vcpu_fd, KVM_SET_MSRS, &one) == 1 ? 0 : -EIO;
}

static void vcpu_state_capture_msrs(int vcpu_fd, struct vcpu_state *state)
{
	size_t count = sizeof(vcpu_state_msr_indices) / sizeof(vcpu_state_msr_indices[0]);

	state->msr_count = 0;
	for (size_t i = 0; i < count; i++) {
		uint64_t value;

		if (vcpu_state_get_msr(vcpu_fd, vcpu_state_msr_indices[i], &value) < 0)
			continue;
		state->msrs[state->msr_count++] = (struct kvm_msr_entry){
			.index = vcpu_state_msr_indices[i], .data = value,
		};
	}
}

int vcpu_state_capture(int vcpu_fd, struct vcpu_state *state)
{
	memset(state, 0, sizeof(*state));
	if (ioctl(vcpu_fd, KVM_GET_REGS, &state->regs) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_SREGS, &state->sregs) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_LAPIC, &state->lapic) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_VCPU_EVENTS, &state->events) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_XCRS, &state->xcrs) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_XSAVE, (struct kvm_xsave *)state->xsave_region) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_MP_STATE, &state->mp_state) < 0 ||
	    ioctl(vcpu_fd, KVM_GET_DEBUGREGS, &state->debugregs) < 0)
		return -errno;
	vcpu_state_capture_msrs(vcpu_fd, state);
	return 0;
}

static uint32_t vcpu_state_lapic_reg(const struct kvm_lapic_state *lapic, unsigned int offset)
{
	uint32_t value;

	memcpy(&value, &lapic->regs[offset], sizeof(value));
	return value;
}

static void vcpu_state_lapic_set_reg(struct kvm_lapic_state *lapic, unsigned int offset,
				     uint32_t value)
{
	memcpy(&lapic->regs[offset], &value, sizeof(value));
}

/*
 * A guest idle in NO_HZ can leave the timer masked with vector 0; restored like that no tick
 * ever comes and the scheduler never runs. Arm a periodic tick on Linux's timer vector; the
 * guest reprograms the timer on its next clockevent change.
 */
static void vcpu_state_bootstrap_timer(struct kvm_lapic_state *lapic)
{
	uint32_t lvtt = vcpu_state_lapic_reg(lapic, APIC_LVTT);

	if (!(lvtt & APIC_LVT_MASKED) || (lvtt & APIC_LVT_VECTOR_MASK) != 0)
		return;
	vcpu_state_lapic_set_reg(lapic, APIC_LVTT,
				 APIC_LVT_TIMER_PERIODIC | APIC_LOCAL_TIMER_VECTOR);
	vcpu_state_lapic_set_reg(lapic, APIC_TDCR, APIC_TDCR_DIVIDE_BY_1);
	vcpu_state_lapic_set_reg(lapic, APIC_TMICT, APIC_BOOTSTRAP_TMICT);
}

static int vcpu_state_restore_msrs(int vcpu_fd, const struct vcpu_state *state,
				   bool deadline_only)
{
	for (uint32_t i = 0; i < state->msr_count && i < VCPU_STATE_MAX_MSRS; i++) {
		const struct kvm_msr_entry *msr = &state->msrs[i];
		bool is_deadline = msr->index == MSR_IA32_TSC_DEADLINE;

		if (is_deadline != deadline_only)
			continue;
		if (vcpu_state_set_msr(vcpu_fd, msr->index, msr->data) < 0)
			return -EIO;
	}
	return 0;
}

int vcpu_state_restore(int vcpu_fd, const struct vcpu_state *state)
{
	struct kvm_lapic_state lapic = state->lapic;
	struct kvm_vcpu_events events = state->events;
	int rc;

	rc = vcpu_state_restore_msrs(vcpu_fd, state, false);
	if (rc < 0)
		return rc;
	if (ioctl(vcpu_fd, KVM_SET_SREGS, &state->sregs) < 0)
		return -errno;
	if (state->mp_state.mp_state != KVM_MP_STATE_UNINITIALIZED)
		vcpu_state_bootstrap_timer(&lapic);
	if (ioctl(vcpu_fd, KVM_SET_LAPIC, &lapic) < 0)
		return -errno;
	rc = vcpu_state_restore_msrs(vcpu_fd, state, true);
	if (rc < 0)
		return rc;
	events.flags |= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR;
	if (ioctl(vcpu_fd, KVM_SET_VCPU_EVENTS, &events) < 0 ||
	    ioctl(vcpu_fd, KVM_SET_XCRS, &state->xcrs) < 0 ||
	    ioctl(vcpu_fd, KVM_SET_XSAVE, (const struct kvm_xsave *)state->xsave_region) < 0 ||
	    ioctl(vcpu_fd, KVM_SET_REGS, &state->regs) < 0 ||
	    ioctl(vcpu_fd, KVM_SET_DEBUGREGS, &state->debugregs) < 0 ||
	    ioctl(vcpu_fd, KVM_SET_MP_STATE, &state->mp_state) < 0)
		return -errno;
	return 0;
}

void vcpu_state_clock_paused(int vcpu_fd)
{
	/* EINVAL when the guest never enabled kvm-clock: nothing to tell it. */
	(void)ioctl(vcpu_fd, KVM_KVMCLOCK_CTRL, 0);
}
