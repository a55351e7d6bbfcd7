/*
 * CPUID fix-ups on top of KVM_GET_SUPPORTED_CPUID. Only the leaves that carry per-vCPU
 * identity or topology are rewritten; everything else passes through, so the guest sees the
 * host CPU's features as KVM can virtualize them.
 */
#include "vmm/cpuid.h"

#include <errno.h>
#include <linux/kvm.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#define LEAF_FEATURES 0x1
#define LEAF_EXT_TOPOLOGY 0xb
#define LEAF_V2_EXT_TOPOLOGY 0x1f
#define LEAF_AMD_SIZE_IDS 0x80000008

#define FEAT_EBX_APIC_ID_SHIFT 24
#define FEAT_EBX_APIC_ID_MASK 0x00ffffffU
#define FEAT_EBX_LOGICAL_COUNT_SHIFT 16
#define FEAT_EBX_LOGICAL_COUNT_MASK 0xff00ffffU
#define FEAT_ECX_TSC_DEADLINE (1U << 24)
#define FEAT_ECX_HYPERVISOR (1U << 31)
#define FEAT_EDX_HTT (1U << 28)

#define TOPO_LEVEL_SMT 1
#define TOPO_LEVEL_CORE 2
#define TOPO_LEVEL_TYPE_SHIFT 8
#define TOPO_SUBLEAF_SMT 0
#define TOPO_SUBLEAF_CORE 1

#define AMD_ECX_CORE_COUNT_MASK 0xffU
#define AMD_ECX_APIC_ID_SIZE_SHIFT 12
#define AMD_ECX_KEEP_MASK 0xffff0000U

int cpuid_get_supported(int kvm_sys_fd, struct kvm_cpuid2 **out)
{
	size_t size = sizeof(struct kvm_cpuid2) +
		      CPUID_MAX_ENTRIES * sizeof(struct kvm_cpuid_entry2);
	struct kvm_cpuid2 *cpuid = calloc(1, size);

	if (!cpuid)
		return -ENOMEM;
	cpuid->nent = CPUID_MAX_ENTRIES;
	if (ioctl(kvm_sys_fd, KVM_GET_SUPPORTED_CPUID, cpuid) < 0) {
		int rc = -errno;

		free(cpuid);
		return rc;
	}
	*out = cpuid;
	return 0;
}

/* Bits needed to hold ids 0..count-1. */
static uint32_t cpuid_id_bits(unsigned int count)
{
	uint32_t bits = 0;

	while ((1U << bits) < count)
		bits++;
	return bits;
}

static void cpuid_fix_topology(struct kvm_cpuid_entry2 *e, unsigned int index,
			       unsigned int count)
{
	e->edx = index; /* x2APIC id */
	switch (e->index) {
	case TOPO_SUBLEAF_SMT:
		e->eax = 0;
		e->ebx = 1;
		e->ecx = e->index | (TOPO_LEVEL_SMT << TOPO_LEVEL_TYPE_SHIFT);
		break;
	case TOPO_SUBLEAF_CORE:
		e->eax = cpuid_id_bits(count);
		e->ebx = count;
		e->ecx = e->index | (TOPO_LEVEL_CORE << TOPO_LEVEL_TYPE_SHIFT);
		break;
	default:
		e->eax = 0;
		e->ebx = 0;
		e->ecx = e->index; /* level type 0: no more levels */
		break;
	}
}

static void cpuid_fix_entry(struct kvm_cpuid_entry2 *e, unsigned int index, unsigned int count,
			    bool tsc_deadline)
{
	switch (e->function) {
	case LEAF_FEATURES:
		e->ebx = (e->ebx & FEAT_EBX_APIC_ID_MASK) | (index << FEAT_EBX_APIC_ID_SHIFT);
		e->ebx = (e->ebx & FEAT_EBX_LOGICAL_COUNT_MASK) |
			 (count << FEAT_EBX_LOGICAL_COUNT_SHIFT);
		e->ecx |= FEAT_ECX_HYPERVISOR;
		if (tsc_deadline)
			e->ecx |= FEAT_ECX_TSC_DEADLINE;
		if (count > 1)
			e->edx |= FEAT_EDX_HTT;
		break;
	case LEAF_EXT_TOPOLOGY:
	case LEAF_V2_EXT_TOPOLOGY:
		cpuid_fix_topology(e, index, count);
		break;
	case LEAF_AMD_SIZE_IDS:
		e->ecx = (e->ecx & AMD_ECX_KEEP_MASK) | ((count - 1) & AMD_ECX_CORE_COUNT_MASK) |
			 (cpuid_id_bits(count) << AMD_ECX_APIC_ID_SIZE_SHIFT);
		break;
	default:
		break;
	}
}

struct kvm_cpuid2 *cpuid_for_vcpu(const struct kvm_cpuid2 *base, unsigned int index,
				  unsigned int count, bool tsc_deadline)
{
	size_t size = sizeof(*base) + base->nent * sizeof(base->entries[0]);
	struct kvm_cpuid2 *cpuid = malloc(size);

	if (!cpuid)
		return NULL;
	memcpy(cpuid, base, size);
	for (uint32_t i = 0; i < cpuid->nent; i++)
		cpuid_fix_entry(&cpuid->entries[i], index, count, tsc_deadline);
	return cpuid;
}
