/*
 * The CPU features a guest was shown, as five CPUID registers: leaf 1 ECX and EDX, and leaf 7
 * (sub-leaf 0) EBX, ECX and EDX. A snapshot records them (vm.meta) because a guest kernel
 * that saw a feature at boot keeps using it after a restore: on a host whose KVM cannot offer
 * it, the guest would fault on its first such instruction, so a restore compares the recorded
 * features with what this host's KVM would show a guest and refuses before any vCPU runs.
 *
 * The comparison ignores bits that mirror guest state rather than hardware (OSXSAVE, OSPKE:
 * KVM sets them when the guest sets CR4 bits; MONITOR/MWAIT, which KVM may set from the
 * guest's MISC_ENABLE MSR) and bits voidbox itself adds (hypervisor, HTT,
 * TSC deadline, as cpuid_for_vcpu does), since they say nothing about the host CPU.
 * The pure functions here need no KVM, so the refusal is unit-tested with synthetic sets.
 */
#ifndef VOIDBOX_VMM_CPU_FEATURES_H
#define VOIDBOX_VMM_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_FEATURE_NAME_MAX 48

enum cpu_feature_reg {
	CPU_FEATURE_LEAF1_ECX,
	CPU_FEATURE_LEAF1_EDX,
	CPU_FEATURE_LEAF7_EBX,
	CPU_FEATURE_LEAF7_ECX,
	CPU_FEATURE_LEAF7_EDX,
	CPU_FEATURE_REG_COUNT,
};

struct cpu_features {
	uint32_t regs[CPU_FEATURE_REG_COUNT];
};

struct kvm_cpuid2;

/* "leaf1_ecx", ... (the manifest's and docs' names for the registers). */
const char *cpu_feature_reg_name(enum cpu_feature_reg reg);
/* A bit's usual name ("avx2"), or "CPUID.7.0:EBX[5]" for one without a name here. */
void cpu_feature_name(enum cpu_feature_reg reg, unsigned int bit, char *out, size_t len);
/* The five registers from a CPUID table (absent leaves read as 0). */
void cpu_features_from_table(const struct kvm_cpuid2 *table, struct cpu_features *out);
/* What vCPU vcpu_fd was given (KVM_GET_CPUID2). Returns 0 or -errno. */
int cpu_features_of_vcpu(int vcpu_fd, struct cpu_features *out);
/*
 * What this host's KVM would show a guest of vcpus vCPUs (KVM_GET_SUPPORTED_CPUID with
 * voidbox's own adjustments). Returns 0 or -errno.
 */
int cpu_features_for_guest(int kvm_sys_fd, unsigned int vcpus, bool tsc_deadline,
			   struct cpu_features *out);
/*
 * 0 when every feature in shown is in host (ignoring the bits named above); otherwise -EXDEV
 * and err names the first missing feature.
 */
int cpu_features_check(const struct cpu_features *shown, const struct cpu_features *host,
		       char *err, size_t errlen);
/*
 * What a restore checks: the features a snapshot's state file records, then those its
 * manifest.json lists (either NULL when there are none), each against host. A refusal for a
 * listed feature says it is in the manifest. 0 or -EXDEV with err.
 */
int cpu_features_check_snapshot(const struct cpu_features *recorded,
				const struct cpu_features *listed,
				const struct cpu_features *host, char *err, size_t errlen);
/*
 * cpu_features_check_snapshot against what this host's KVM would show a guest of vcpus
 * vCPUs, for a caller that has no VM (an import, an inspect): 0, -EXDEV with err naming the
 * missing feature, or another -errno with err when KVM cannot be asked (no /dev/kvm, say).
 */
int cpu_features_check_here(const struct cpu_features *recorded,
			    const struct cpu_features *listed, unsigned int vcpus, char *err,
			    size_t errlen);

#endif
