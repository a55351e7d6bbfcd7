/*
 * Reading the five feature registers from KVM and comparing two sets of them. Feature names
 * are a table of the bits a user is likely to meet (the SIMD and crypto extensions a guest's
 * libraries pick at start-up); any other bit is named by its CPUID position, which is
 * unambiguous even when it is not memorable.
 */
#include "vmm/cpu_features.h"

#include <errno.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "vmm/cpuid.h"
#include "vmm/kvm.h"

#define CPU_FEATURE_LEAF_BASIC 0x1u
#define CPU_FEATURE_LEAF_EXTENDED 0x7u
#define CPU_FEATURE_SUBLEAF_MAIN 0u
#define CPU_FEATURE_BITS 32u

/* Bits that follow guest state or voidbox's own CPUID edits, never the host's hardware. */
#define CPU_FEATURE_LEAF1_ECX_MWAIT (1u << 3) /* KVM mirrors MISC_ENABLE into it */
#define CPU_FEATURE_LEAF1_ECX_TSC_DEADLINE (1u << 24)
#define CPU_FEATURE_LEAF1_ECX_OSXSAVE (1u << 27)
#define CPU_FEATURE_LEAF1_ECX_HYPERVISOR (1u << 31)
#define CPU_FEATURE_LEAF1_EDX_HTT (1u << 28)
#define CPU_FEATURE_LEAF7_ECX_OSPKE (1u << 4)

static const uint32_t cpu_feature_ignored[CPU_FEATURE_REG_COUNT] = {
	[CPU_FEATURE_LEAF1_ECX] = CPU_FEATURE_LEAF1_ECX_MWAIT | CPU_FEATURE_LEAF1_ECX_TSC_DEADLINE |
				  CPU_FEATURE_LEAF1_ECX_OSXSAVE | CPU_FEATURE_LEAF1_ECX_HYPERVISOR,
	[CPU_FEATURE_LEAF1_EDX] = CPU_FEATURE_LEAF1_EDX_HTT,
	[CPU_FEATURE_LEAF7_ECX] = CPU_FEATURE_LEAF7_ECX_OSPKE,
};

static const char *const cpu_feature_reg_names[CPU_FEATURE_REG_COUNT] = {
	[CPU_FEATURE_LEAF1_ECX] = "leaf1_ecx", [CPU_FEATURE_LEAF1_EDX] = "leaf1_edx",
	[CPU_FEATURE_LEAF7_EBX] = "leaf7_ebx", [CPU_FEATURE_LEAF7_ECX] = "leaf7_ecx",
	[CPU_FEATURE_LEAF7_EDX] = "leaf7_edx",
};

static const char *const cpu_feature_reg_positions[CPU_FEATURE_REG_COUNT] = {
	[CPU_FEATURE_LEAF1_ECX] = "CPUID.1:ECX", [CPU_FEATURE_LEAF1_EDX] = "CPUID.1:EDX",
	[CPU_FEATURE_LEAF7_EBX] = "CPUID.7.0:EBX", [CPU_FEATURE_LEAF7_ECX] = "CPUID.7.0:ECX",
	[CPU_FEATURE_LEAF7_EDX] = "CPUID.7.0:EDX",
};

struct cpu_feature_bit {
	enum cpu_feature_reg reg;
	unsigned int bit;
	const char *name;
};

static const struct cpu_feature_bit cpu_feature_bits[] = {
	{ CPU_FEATURE_LEAF1_ECX, 0, "sse3" },	     { CPU_FEATURE_LEAF1_ECX, 1, "pclmulqdq" },
	{ CPU_FEATURE_LEAF1_ECX, 9, "ssse3" },	     { CPU_FEATURE_LEAF1_ECX, 12, "fma" },
	{ CPU_FEATURE_LEAF1_ECX, 13, "cx16" },	     { CPU_FEATURE_LEAF1_ECX, 19, "sse4_1" },
	{ CPU_FEATURE_LEAF1_ECX, 20, "sse4_2" },     { CPU_FEATURE_LEAF1_ECX, 21, "x2apic" },
	{ CPU_FEATURE_LEAF1_ECX, 22, "movbe" },	     { CPU_FEATURE_LEAF1_ECX, 23, "popcnt" },
	{ CPU_FEATURE_LEAF1_ECX, 25, "aes" },	     { CPU_FEATURE_LEAF1_ECX, 26, "xsave" },
	{ CPU_FEATURE_LEAF1_ECX, 28, "avx" },	     { CPU_FEATURE_LEAF1_ECX, 29, "f16c" },
	{ CPU_FEATURE_LEAF1_ECX, 30, "rdrand" },     { CPU_FEATURE_LEAF1_EDX, 0, "fpu" },
	{ CPU_FEATURE_LEAF1_EDX, 4, "tsc" },	     { CPU_FEATURE_LEAF1_EDX, 8, "cx8" },
	{ CPU_FEATURE_LEAF1_EDX, 15, "cmov" },	     { CPU_FEATURE_LEAF1_EDX, 19, "clflush" },
	{ CPU_FEATURE_LEAF1_EDX, 23, "mmx" },	     { CPU_FEATURE_LEAF1_EDX, 24, "fxsr" },
	{ CPU_FEATURE_LEAF1_EDX, 25, "sse" },	     { CPU_FEATURE_LEAF1_EDX, 26, "sse2" },
	{ CPU_FEATURE_LEAF7_EBX, 0, "fsgsbase" },    { CPU_FEATURE_LEAF7_EBX, 3, "bmi1" },
	{ CPU_FEATURE_LEAF7_EBX, 4, "hle" },	     { CPU_FEATURE_LEAF7_EBX, 5, "avx2" },
	{ CPU_FEATURE_LEAF7_EBX, 7, "smep" },	     { CPU_FEATURE_LEAF7_EBX, 8, "bmi2" },
	{ CPU_FEATURE_LEAF7_EBX, 9, "erms" },	     { CPU_FEATURE_LEAF7_EBX, 10, "invpcid" },
	{ CPU_FEATURE_LEAF7_EBX, 11, "rtm" },	     { CPU_FEATURE_LEAF7_EBX, 16, "avx512f" },
	{ CPU_FEATURE_LEAF7_EBX, 17, "avx512dq" },   { CPU_FEATURE_LEAF7_EBX, 18, "rdseed" },
	{ CPU_FEATURE_LEAF7_EBX, 19, "adx" },	     { CPU_FEATURE_LEAF7_EBX, 20, "smap" },
	{ CPU_FEATURE_LEAF7_EBX, 23, "clflushopt" }, { CPU_FEATURE_LEAF7_EBX, 24, "clwb" },
	{ CPU_FEATURE_LEAF7_EBX, 28, "avx512cd" },   { CPU_FEATURE_LEAF7_EBX, 29, "sha_ni" },
	{ CPU_FEATURE_LEAF7_EBX, 30, "avx512bw" },   { CPU_FEATURE_LEAF7_EBX, 31, "avx512vl" },
	{ CPU_FEATURE_LEAF7_ECX, 1, "avx512vbmi" },  { CPU_FEATURE_LEAF7_ECX, 2, "umip" },
	{ CPU_FEATURE_LEAF7_ECX, 3, "pku" },	     { CPU_FEATURE_LEAF7_ECX, 6, "avx512_vbmi2" },
	{ CPU_FEATURE_LEAF7_ECX, 8, "gfni" },	     { CPU_FEATURE_LEAF7_ECX, 9, "vaes" },
	{ CPU_FEATURE_LEAF7_ECX, 10, "vpclmulqdq" }, { CPU_FEATURE_LEAF7_ECX, 11, "avx512_vnni" },
	{ CPU_FEATURE_LEAF7_ECX, 12, "avx512_bitalg" },
	{ CPU_FEATURE_LEAF7_ECX, 14, "avx512_vpopcntdq" },
	{ CPU_FEATURE_LEAF7_ECX, 16, "la57" },	     { CPU_FEATURE_LEAF7_ECX, 22, "rdpid" },
	{ CPU_FEATURE_LEAF7_ECX, 27, "movdiri" },    { CPU_FEATURE_LEAF7_ECX, 28, "movdir64b" },
	{ CPU_FEATURE_LEAF7_EDX, 4, "fsrm" },	     { CPU_FEATURE_LEAF7_EDX, 14, "serialize" },
	{ CPU_FEATURE_LEAF7_EDX, 22, "amx_bf16" },   { CPU_FEATURE_LEAF7_EDX, 23, "avx512_fp16" },
	{ CPU_FEATURE_LEAF7_EDX, 24, "amx_tile" },   { CPU_FEATURE_LEAF7_EDX, 25, "amx_int8" },
};

const char *cpu_feature_reg_name(enum cpu_feature_reg reg)
{
	return reg < CPU_FEATURE_REG_COUNT ? cpu_feature_reg_names[reg] : "?";
}

void cpu_feature_name(enum cpu_feature_reg reg, unsigned int bit, char *out, size_t len)
{
	for (size_t i = 0; i < sizeof(cpu_feature_bits) / sizeof(cpu_feature_bits[0]); i++) {
		if (cpu_feature_bits[i].reg == reg && cpu_feature_bits[i].bit == bit) {
			snprintf(out, len, "%s", cpu_feature_bits[i].name);
			return;
		}
	}
	snprintf(out, len, "%s[%u]", reg < CPU_FEATURE_REG_COUNT ? cpu_feature_reg_positions[reg] :
								    "?", bit);
}

void cpu_features_from_table(const struct kvm_cpuid2 *table, struct cpu_features *out)
{
	*out = (struct cpu_features){ { 0 } };
	for (uint32_t i = 0; i < table->nent; i++) {
		const struct kvm_cpuid_entry2 *e = &table->entries[i];

		if (e->function == CPU_FEATURE_LEAF_BASIC) {
			out->regs[CPU_FEATURE_LEAF1_ECX] = e->ecx;
			out->regs[CPU_FEATURE_LEAF1_EDX] = e->edx;
		} else if (e->function == CPU_FEATURE_LEAF_EXTENDED &&
			   e->index == CPU_FEATURE_SUBLEAF_MAIN) {
			out->regs[CPU_FEATURE_LEAF7_EBX] = e->ebx;
			out->regs[CPU_FEATURE_LEAF7_ECX] = e->ecx;
			out->regs[CPU_FEATURE_LEAF7_EDX] = e->edx;
		}
	}
}

int cpu_features_of_vcpu(int vcpu_fd, struct cpu_features *out)
{
	struct kvm_cpuid2 *table = calloc(1, sizeof(*table) + CPUID_MAX_ENTRIES *
							      sizeof(struct kvm_cpuid_entry2));
	int rc = 0;

	if (!table)
		return -ENOMEM;
	table->nent = CPUID_MAX_ENTRIES;
	if (ioctl(vcpu_fd, KVM_GET_CPUID2, table) < 0)
		rc = -errno;
	else
		cpu_features_from_table(table, out);
	free(table);
	return rc;
}

int cpu_features_for_guest(int kvm_sys_fd, unsigned int vcpus, bool tsc_deadline,
			   struct cpu_features *out)
{
	struct kvm_cpuid2 *supported = NULL, *shown;
	int rc = cpuid_get_supported(kvm_sys_fd, &supported);

	if (rc < 0)
		return rc;
	shown = cpuid_for_vcpu(supported, 0, vcpus, tsc_deadline);
	free(supported);
	if (!shown)
		return -ENOMEM;
	cpu_features_from_table(shown, out);
	free(shown);
	return 0;
}

int cpu_features_check(const struct cpu_features *shown, const struct cpu_features *host,
		       char *err, size_t errlen)
{
	for (unsigned int reg = 0; reg < CPU_FEATURE_REG_COUNT; reg++) {
		uint32_t missing = shown->regs[reg] & ~host->regs[reg] & ~cpu_feature_ignored[reg];
		char name[CPU_FEATURE_NAME_MAX];

		for (unsigned int bit = 0; missing && bit < CPU_FEATURE_BITS; bit++) {
			if (!(missing & (1u << bit)))
				continue;
			cpu_feature_name((enum cpu_feature_reg)reg, bit, name, sizeof(name));
			snprintf(err, errlen, "the snapshot's guest was shown CPU feature %s, which "
				 "this host lacks: restore it on a host whose CPU has %s, or take "
				 "the snapshot again here", name, name);
			return -EXDEV;
		}
	}
	return 0;
}

int cpu_features_check_snapshot(const struct cpu_features *recorded,
				const struct cpu_features *listed,
				const struct cpu_features *host, char *err, size_t errlen)
{
	int rc = recorded ? cpu_features_check(recorded, host, err, errlen) : 0;
	size_t len;

	if (rc < 0 || !listed)
		return rc;
	rc = cpu_features_check(listed, host, err, errlen);
	if (rc < 0 && (len = strlen(err)) + 1 < errlen)
		snprintf(err + len, errlen - len, " (the feature is in the snapshot's "
			 "manifest.json)");
	return rc;
}

int cpu_features_check_here(const struct cpu_features *recorded,
			    const struct cpu_features *listed, unsigned int vcpus, char *err,
			    size_t errlen)
{
	struct cpu_features host;
	struct kvm kvm;
	int rc = kvm_open(&kvm, err, errlen);

	if (rc < 0)
		return rc;
	rc = cpu_features_for_guest(kvm.sys_fd, vcpus ? vcpus : 1, kvm.has_tsc_deadline, &host);
	if (rc < 0)
		snprintf(err, errlen, "cannot read this host's CPU features from KVM: %s",
			 strerror(-rc));
	else
		rc = cpu_features_check_snapshot(recorded, listed, &host, err, errlen);
	kvm_close(&kvm);
	return rc;
}
