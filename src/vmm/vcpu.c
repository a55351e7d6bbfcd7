/*
 * The vCPU thread: KVM_RUN, dispatch port and MMIO exits to the buses, turn the guest's
 * shutdown/reset/crash exits into VM exit reasons, and leave when the VM says stop. APs are
 * created with the in-kernel LAPIC in KVM_MP_STATE_UNINITIALIZED and sit inside KVM_RUN until
 * the BSP sends INIT/SIPI, so their threads need nothing special.
 */
#include "vmm/vcpu.h"

#include <errno.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/boot.h"
#include "vmm/thread_filter.h"

#define VCPU_THREAD_NAME_MAX 16 /* the kernel's TASK_COMM_LEN */
#define VCPU_KICK_SIGNAL (SIGRTMIN)
#define KERNEL_SIGSET_BYTES 8 /* the kernel's sigset_t on x86-64 */
#define MSR_IA32_MISC_ENABLE 0x1a0
#define MISC_ENABLE_FAST_STRING 0x1
#define MSR_MTRR_DEF_TYPE 0x2ff
#define MTRR_DEF_TYPE_ENABLE 0x800
#define MTRR_TYPE_WRBACK 0x6
#define VCPU_BOOT_MSR_COUNT 2
#define FPU_DEFAULT_FCW 0x37f
#define FPU_DEFAULT_MXCSR 0x1f80

static void vcpu_kick_handler(int sig)
{
	(void)sig;
}

int vcpu_signal_init(void)
{
	struct sigaction action = { .sa_handler = vcpu_kick_handler };

	sigemptyset(&action.sa_mask);
	if (sigaction(VCPU_KICK_SIGNAL, &action, NULL) < 0)
		return -errno;
	return 0;
}

int vcpu_create(struct vcpu *vcpu, int vm_fd, unsigned int index, size_t run_size)
{
	memset(vcpu, 0, sizeof(*vcpu));
	vcpu->index = index;
	vcpu->run_size = run_size;
	vcpu->fd = ioctl(vm_fd, KVM_CREATE_VCPU, (unsigned long)index);
	if (vcpu->fd < 0)
		return -errno;
	vcpu->run = mmap(NULL, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu->fd, 0);
	if (vcpu->run == MAP_FAILED) {
		int rc = -errno;

		close(vcpu->fd);
		vcpu->fd = -1;
		vcpu->run = NULL;
		return rc;
	}
	return 0;
}

static int vcpu_set_msrs(struct vcpu *vcpu)
{
	/* Fast strings on; MTRRs default to write-back so no RAM is uncached before Linux. */
	const struct kvm_msr_entry entries[VCPU_BOOT_MSR_COUNT] = {
		{ .index = MSR_IA32_MISC_ENABLE, .data = MISC_ENABLE_FAST_STRING },
		{ .index = MSR_MTRR_DEF_TYPE, .data = MTRR_DEF_TYPE_ENABLE | MTRR_TYPE_WRBACK },
	};
	struct kvm_msrs *msrs = calloc(1, sizeof(*msrs) + sizeof(entries));
	int rc = 0;

	if (!msrs)
		return -ENOMEM;
	msrs->nmsrs = VCPU_BOOT_MSR_COUNT;
	memcpy(msrs->entries, entries, sizeof(entries));
	if (ioctl(vcpu->fd, KVM_SET_MSRS, msrs) != VCPU_BOOT_MSR_COUNT)
		rc = -EIO;
	free(msrs);
	return rc;
}

static int vcpu_set_boot_state(struct vcpu *vcpu, uint64_t entry)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	struct kvm_fpu fpu = { .fcw = FPU_DEFAULT_FCW, .mxcsr = FPU_DEFAULT_MXCSR };

	if (ioctl(vcpu->fd, KVM_GET_SREGS, &sregs) < 0)
		return -errno;
	boot_setup_sregs(&sregs);
	boot_setup_regs(&regs, entry);
	if (ioctl(vcpu->fd, KVM_SET_SREGS, &sregs) < 0 || ioctl(vcpu->fd, KVM_SET_REGS, &regs) < 0 ||
	    ioctl(vcpu->fd, KVM_SET_FPU, &fpu) < 0)
		return -errno;
	return 0;
}

int vcpu_configure(struct vcpu *vcpu, const struct kvm_cpuid2 *cpuid, bool boot_cpu,
		   uint64_t entry)
{
	int rc;

	if (ioctl(vcpu->fd, KVM_SET_CPUID2, cpuid) < 0)
		return -errno;
	rc = vcpu_set_msrs(vcpu);
	if (rc < 0)
		return rc;
	return boot_cpu ? vcpu_set_boot_state(vcpu, entry) : 0;
}

static void vcpu_handle_io(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	uint8_t *data = (uint8_t *)run + run->io.data_offset;
	bool is_write = run->io.direction == KVM_EXIT_IO_OUT;

	for (uint32_t i = 0; i < run->io.count; i++, data += run->io.size)
		bus_dispatch(vcpu->pio, run->io.port, data, run->io.size, is_write);
}

static void vcpu_handle_mmio(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;

	bus_dispatch(vcpu->mmio, run->mmio.phys_addr, run->mmio.data, run->mmio.len,
		     run->mmio.is_write);
}

static enum vm_exit_reason vcpu_system_event_reason(uint32_t type)
{
	switch (type) {
	case KVM_SYSTEM_EVENT_SHUTDOWN:
		return VM_EXIT_GUEST_POWEROFF;
	case KVM_SYSTEM_EVENT_RESET:
		return VM_EXIT_GUEST_REBOOT;
	case KVM_SYSTEM_EVENT_CRASH:
		return VM_EXIT_GUEST_PANIC;
	default:
		return VM_EXIT_INTERNAL_ERROR;
	}
}

/*
 * What a KVM internal error's suberror means. The first is the one a guest can cause at will
 * (an instruction on device memory that KVM cannot emulate), so it is said as the guest's doing.
 */
static const char *vcpu_internal_error_cause(uint32_t suberror)
{
	switch (suberror) {
	case KVM_INTERNAL_ERROR_EMULATION:
		return "the guest ran an instruction on device memory that KVM cannot emulate";
	case KVM_INTERNAL_ERROR_SIMUL_EX:
		return "a fault while the guest's previous fault was being delivered";
	case KVM_INTERNAL_ERROR_DELIVERY_EV:
		return "an event could not be delivered to the guest";
	default:
		return "see the host kernel's KVM documentation";
	}
}

/*
 * A triple fault leaves nothing on the guest console, so the registers at that moment are
 * the only account of where the guest was: logged as a warning for the bug report.
 */
static void vcpu_log_triple_fault(const struct vcpu *vcpu)
{
	struct kvm_regs regs;
	struct kvm_sregs sregs;

	if (ioctl(vcpu->fd, KVM_GET_REGS, &regs) < 0 || ioctl(vcpu->fd, KVM_GET_SREGS, &sregs) < 0) {
		log_warn("vcpu", "vcpu %u: triple fault (registers unreadable)", vcpu->index);
		return;
	}
	log_warn("vcpu", "vcpu %u: triple fault at rip 0x%llx rsp 0x%llx rflags 0x%llx cr0 0x%llx "
		 "cr2 0x%llx cr3 0x%llx cr4 0x%llx efer 0x%llx idt 0x%llx/%u cs 0x%x",
		 vcpu->index, (unsigned long long)regs.rip, (unsigned long long)regs.rsp,
		 (unsigned long long)regs.rflags, (unsigned long long)sregs.cr0,
		 (unsigned long long)sregs.cr2, (unsigned long long)sregs.cr3,
		 (unsigned long long)sregs.cr4, (unsigned long long)sregs.efer,
		 (unsigned long long)sregs.idt.base, sregs.idt.limit, sregs.cs.selector);
}

/* Returns VM_EXIT_NONE to keep running, or why the VM ends. */
static enum vm_exit_reason vcpu_handle_exit(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;

	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		vcpu_handle_io(vcpu);
		return VM_EXIT_NONE;
	case KVM_EXIT_MMIO:
		vcpu_handle_mmio(vcpu);
		return VM_EXIT_NONE;
	case KVM_EXIT_INTR:
	case KVM_EXIT_HLT:
		return VM_EXIT_NONE;
	case KVM_EXIT_SHUTDOWN:
		vcpu_log_triple_fault(vcpu);
		return VM_EXIT_GUEST_TRIPLE_FAULT;
	case KVM_EXIT_SYSTEM_EVENT:
		return vcpu_system_event_reason(run->system_event.type);
	case KVM_EXIT_FAIL_ENTRY:
		log_error("vcpu", "vcpu %u: entry failed, hardware reason 0x%llx", vcpu->index,
			  (unsigned long long)run->fail_entry.hardware_entry_failure_reason);
		return VM_EXIT_INTERNAL_ERROR;
	case KVM_EXIT_INTERNAL_ERROR:
		log_error("vcpu", "vcpu %u: KVM could not go on running the guest (internal error, "
			  "suberror %u: %s)", vcpu->index, run->internal.suberror,
			  vcpu_internal_error_cause(run->internal.suberror));
		return VM_EXIT_INTERNAL_ERROR;
	default:
		log_error("vcpu", "vcpu %u: unexpected exit reason %u", vcpu->index,
			  run->exit_reason);
		return VM_EXIT_INTERNAL_ERROR;
	}
}

static int vcpu_unblock_kick_in_run(struct vcpu *vcpu)
{
	/* An empty mask: inside KVM_RUN no signal is blocked, so a kick interrupts it. */
	struct kvm_signal_mask *mask = calloc(1, sizeof(*mask) + KERNEL_SIGSET_BYTES);
	int rc = 0;

	if (!mask)
		return -ENOMEM;
	mask->len = KERNEL_SIGSET_BYTES;
	if (ioctl(vcpu->fd, KVM_SET_SIGNAL_MASK, mask) < 0)
		rc = -errno;
	free(mask);
	return rc;
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *vcpu = arg;
	enum vm_exit_reason reason = VM_EXIT_NONE;
	char name[VCPU_THREAD_NAME_MAX];
	int rc;

	/* named, so /proc/PID/task shows which thread is which (and tests can find them) */
	snprintf(name, sizeof(name), "vcpu%u", vcpu->index);
	prctl(PR_SET_NAME, name, 0, 0, 0);
	rc = vcpu->confine ? vmm_thread_confine(VMM_THREAD_VCPU) : 0;

	if (rc < 0) {
		log_error("vcpu", "vcpu %u: cannot install its seccomp filter: %s", vcpu->index,
			  strerror(-rc));
		vcpu->on_exit(vcpu->opaque, VM_EXIT_INTERNAL_ERROR);
		return NULL;
	}
	if (vcpu_unblock_kick_in_run(vcpu) < 0) {
		log_error("vcpu", "vcpu %u: KVM_SET_SIGNAL_MASK failed: %s", vcpu->index,
			  strerror(errno));
		vcpu->on_exit(vcpu->opaque, VM_EXIT_INTERNAL_ERROR);
		return NULL;
	}
	while (!atomic_load(vcpu->stop)) {
		if (ioctl(vcpu->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			log_error("vcpu", "vcpu %u: KVM_RUN failed: %s", vcpu->index,
				  strerror(errno));
			reason = VM_EXIT_INTERNAL_ERROR;
		} else {
			reason = vcpu_handle_exit(vcpu);
		}
		if (reason != VM_EXIT_NONE) {
			vcpu->on_exit(vcpu->opaque, reason);
			break;
		}
	}
	return NULL;
}

int vcpu_start(struct vcpu *vcpu)
{
	sigset_t kick, old;
	int rc;

	/* The thread inherits the blocked kick signal; KVM unblocks it only inside KVM_RUN. */
	sigemptyset(&kick);
	sigaddset(&kick, VCPU_KICK_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &kick, &old);
	rc = pthread_create(&vcpu->thread, NULL, vcpu_thread, vcpu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return -rc;
	vcpu->started = true;
	return 0;
}

void vcpu_kick(struct vcpu *vcpu)
{
	if (vcpu->started)
		pthread_kill(vcpu->thread, VCPU_KICK_SIGNAL);
}

void vcpu_join(struct vcpu *vcpu)
{
	if (!vcpu->started)
		return;
	pthread_join(vcpu->thread, NULL);
	vcpu->started = false;
}

void vcpu_destroy(struct vcpu *vcpu)
{
	vcpu_join(vcpu);
	if (vcpu->run)
		munmap(vcpu->run, vcpu->run_size);
	if (vcpu->fd >= 0)
		close(vcpu->fd);
	vcpu->run = NULL;
	vcpu->fd = -1;
}
