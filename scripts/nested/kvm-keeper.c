/*
 * kvm-keeper: holds one idle KVM VM for the life of the L1 VM that scripts/with-nested-kvm
 * boots. l1-init starts it before the command and it never exits.
 *
 * Why: whenever L1's count of KVM VMs goes from 0 to 1 or back, L1's kernel flips static
 * keys (the preempt-notifier key KVM needs, the "LAPIC software-disabled" key) and patches
 * its own code with int3 breakpoints and IPIs. Under QEMU's multi-threaded TCG that
 * cross-modifying code sometimes leaves both L1 CPUs looping on a stale breakpoint in
 * finish_task_switch: a soft lockup that stops everything in L1, seen as a test that hangs
 * until its timeout. A VM that stays alive, with an in-kernel irqchip and one vCPU that never
 * runs (its LAPIC stays software-disabled), keeps those counts above zero, so the patching
 * happens once, here, before any test runs, instead of at every VM start and end.
 *
 * It prints "ready" once the VM exists, so l1-init can wait for it.
 */
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

int main(void)
{
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int vm, vcpu;

	if (kvm < 0) {
		perror("kvm-keeper: /dev/kvm");
		return 1;
	}
	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0 || ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0) {
		perror("kvm-keeper: creating the VM");
		return 1;
	}
	vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (vcpu < 0) {
		perror("kvm-keeper: creating the vCPU");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
