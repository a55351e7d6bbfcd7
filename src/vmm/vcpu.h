/*
 * One vCPU: its KVM fd, its shared kvm_run page and the thread that runs it. The thread knows
 * only the two buses and a callback for "the guest wants to stop"; the VM owns the policy.
 * A vCPU is kicked out of KVM_RUN with SIGRTMIN, which is blocked in the thread except inside
 * KVM_RUN (KVM_SET_SIGNAL_MASK), so a kick that arrives between runs is never lost.
 */
#ifndef VOIDBOX_VMM_VCPU_H
#define VOIDBOX_VMM_VCPU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/bus.h"
#include "vmm/vm.h"

struct kvm_cpuid2;
struct kvm_run;

struct vcpu {
	unsigned int index;
	int fd;
	struct kvm_run *run;
	size_t run_size;
	pthread_t thread;
	bool started;
	const struct bus *pio;
	const struct bus *mmio;
	atomic_bool *stop;
	void (*on_exit)(void *opaque, enum vm_exit_reason reason);
	void *opaque;
	bool confine; /* install the vCPU seccomp filter on the thread (thread_filter.h) */
};

/* Installs the no-op SIGRTMIN handler used for kicks (idempotent). */
int vcpu_signal_init(void);
int vcpu_create(struct vcpu *vcpu, int vm_fd, unsigned int index, size_t run_size);
/* Sets CPUID and MSRs; the boot vCPU also gets long-mode registers at entry. */
int vcpu_configure(struct vcpu *vcpu, const struct kvm_cpuid2 *cpuid, bool boot_cpu,
		   uint64_t entry);
int vcpu_start(struct vcpu *vcpu);
void vcpu_kick(struct vcpu *vcpu);
void vcpu_join(struct vcpu *vcpu);
void vcpu_destroy(struct vcpu *vcpu);

#endif
