/*
 * Per-vCPU CPUID: what KVM supports, adjusted so each vCPU reports its own APIC id and a
 * topology the guest believes (one socket, N cores, one thread each), with the hypervisor
 * bit and KVM's paravirt leaves so the guest uses kvm-clock.
 */
#ifndef VOIDBOX_VMM_CPUID_H
#define VOIDBOX_VMM_CPUID_H

#include <stdbool.h>
#include <stdint.h>

#define CPUID_MAX_ENTRIES 256

struct kvm_cpuid2;

/* Allocates and fills *out from KVM_GET_SUPPORTED_CPUID. Returns 0 or -errno. */
int cpuid_get_supported(int kvm_sys_fd, struct kvm_cpuid2 **out);
/* Copies base into a fresh table for vCPU index of count. Returns NULL when out of memory. */
struct kvm_cpuid2 *cpuid_for_vcpu(const struct kvm_cpuid2 *base, unsigned int index,
				  unsigned int count, bool tsc_deadline);

#endif
