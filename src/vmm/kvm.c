/*
 * /dev/kvm and VM setup. Everything here happens once per VM before any vCPU exists, so
 * failures are reported with a message and -errno and the caller unwinds.
 */
#include "vmm/kvm.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

/* Calls of KVM_PRE_FAULT_MEMORY in a row that may map nothing (interrupted) before giving up. */
#define KVM_PRE_FAULT_STALLS_MAX 16

/* Linux 6.10's stage-2 prefault, for builds against older headers. */
#ifndef KVM_PRE_FAULT_MEMORY
#define KVM_CAP_PRE_FAULT_MEMORY 236
struct kvm_pre_fault_memory {
	__u64 gpa;
	__u64 size;
	__u64 flags;
	__u64 padding[5];
};
#define KVM_PRE_FAULT_MEMORY _IOWR(KVMIO, 0xd5, struct kvm_pre_fault_memory)
#endif

#define KVM_EXPECTED_API_VERSION 12
/* Three pages the VMX implementation needs below 4 GiB, inside the MMIO gap, above devices. */
#define KVM_TSS_ADDR 0xfffbd000UL
#define KVM_IDENTITY_MAP_ADDR 0xfffbc000ULL

/* The probe guest: a real-mode countdown loop at PROBE_CODE_ADDR, then HLT. */
#define PROBE_MEMORY_SIZE 0x10000
#define PROBE_CODE_ADDR 0x1000
#define PROBE_ITERATIONS 500000U
#define PROBE_RFLAGS 0x2 /* bit 1 is reserved and always set */
#define PROBE_MAX_MS 500 /* hardware: under 1 ms; nested KVM: 14-165 ms; PVM emulation: 0.85-2.2 s */
#define PROBE_GIVE_UP_MS 5000 /* stop waiting for a guest that never halts */
#define NSEC_PER_MSEC 1000000L
#define MSEC_PER_SEC 1000L

static const int kvm_required_caps[] = {
	KVM_CAP_IRQCHIP, KVM_CAP_USER_MEMORY, KVM_CAP_SET_TSS_ADDR, KVM_CAP_PIT2,
	KVM_CAP_EXT_CPUID, KVM_CAP_IOEVENTFD,
};

static const char *kvm_open_remedy(int error)
{
	switch (error) {
	case ENOENT:
	case ENODEV:
	case ENXIO:
		return "load the kvm_intel or kvm_amd module (and enable virtualization in the "
		       "firmware), or run inside a VM with nested virtualization";
	case EACCES:
	case EPERM:
		return "add yourself to the kvm group (sudo usermod -aG kvm $USER) and log in again";
	default:
		return "check that KVM works on this host";
	}
}

int kvm_open(struct kvm *kvm, char *err, size_t errlen)
{
	kvm->sys_fd = -1;
	kvm->vm_fd = -1;
	kvm->sys_fd = open(KVM_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	if (kvm->sys_fd < 0) {
		int rc = errno;

		snprintf(err, errlen, "cannot open %s: %s: %s", KVM_DEVICE_PATH, strerror(rc),
			 kvm_open_remedy(rc));
		return -rc;
	}
	int version = ioctl(kvm->sys_fd, KVM_GET_API_VERSION, 0);

	if (version != KVM_EXPECTED_API_VERSION) {
		snprintf(err, errlen, "%s speaks KVM API %d, voidbox needs %d: use a newer kernel",
			 KVM_DEVICE_PATH, version, KVM_EXPECTED_API_VERSION);
		goto fail;
	}
	for (size_t i = 0; i < sizeof(kvm_required_caps) / sizeof(kvm_required_caps[0]); i++) {
		if (ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION, kvm_required_caps[i]) > 0)
			continue;
		snprintf(err, errlen, "KVM lacks capability %d that voidbox needs: use a newer "
			 "kernel or a host with hardware virtualization", kvm_required_caps[i]);
		goto fail;
	}
	int mmap_size = ioctl(kvm->sys_fd, KVM_GET_VCPU_MMAP_SIZE, 0);

	if (mmap_size <= 0) {
		snprintf(err, errlen, "KVM_GET_VCPU_MMAP_SIZE failed: %s", strerror(errno));
		goto fail;
	}
	kvm->vcpu_mmap_size = (size_t)mmap_size;
	kvm->has_tsc_deadline = ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION,
				      KVM_CAP_TSC_DEADLINE_TIMER) > 0;
	kvm->has_pre_fault_memory = ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION,
					  KVM_CAP_PRE_FAULT_MEMORY) > 0;
	return 0;
fail:
	close(kvm->sys_fd);
	kvm->sys_fd = -1;
	return -ENOTSUP;
}

int kvm_pre_fault_memory(int vcpu_fd, uint64_t gpa, uint64_t size)
{
	struct kvm_pre_fault_memory range = { .gpa = gpa, .size = size };
	int stalls = 0;

	/* the kernel moves gpa and size past what it mapped and may stop early: go on */
	while (range.size > 0) {
		uint64_t before = range.size;

		if (ioctl(vcpu_fd, KVM_PRE_FAULT_MEMORY, &range) < 0 && errno != EINTR &&
		    errno != EAGAIN)
			return -errno;
		if (range.size == before && ++stalls > KVM_PRE_FAULT_STALLS_MAX)
			return -EAGAIN;
	}
	return 0;
}

int kvm_create_vm(struct kvm *kvm, char *err, size_t errlen)
{
	struct kvm_pit_config pit = { .flags = KVM_PIT_SPEAKER_DUMMY };
	uint64_t identity_map = KVM_IDENTITY_MAP_ADDR;
	int rc;

	kvm->vm_fd = ioctl(kvm->sys_fd, KVM_CREATE_VM, 0);
	if (kvm->vm_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "KVM_CREATE_VM failed: %s: free memory or close other VMs",
			 strerror(-rc));
		return rc;
	}
	if (ioctl(kvm->vm_fd, KVM_SET_TSS_ADDR, KVM_TSS_ADDR) < 0 ||
	    ioctl(kvm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &identity_map) < 0) {
		rc = -errno;
		snprintf(err, errlen, "KVM TSS/identity-map setup failed: %s", strerror(-rc));
		goto fail;
	}
	if (ioctl(kvm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0) {
		rc = -errno;
		snprintf(err, errlen, "KVM_CREATE_IRQCHIP failed: %s", strerror(-rc));
		goto fail;
	}
	if (ioctl(kvm->vm_fd, KVM_CREATE_PIT2, &pit) < 0) {
		rc = -errno;
		snprintf(err, errlen, "KVM_CREATE_PIT2 failed: %s", strerror(-rc));
		goto fail;
	}
	return 0;
fail:
	close(kvm->vm_fd);
	kvm->vm_fd = -1;
	return rc;
}

int kvm_map_guest_memory(struct kvm *kvm, const struct guest_memory *mem)
{
	for (size_t i = 0; i < mem->region_count; i++) {
		const struct guest_memory_region *region = &mem->regions[i];
		struct kvm_userspace_memory_region slot = {
			.slot = (uint32_t)i,
			.guest_phys_addr = region->guest_phys_addr,
			.memory_size = region->size,
			.userspace_addr = (uint64_t)(uintptr_t)region->host_addr,
		};

		if (ioctl(kvm->vm_fd, KVM_SET_USER_MEMORY_REGION, &slot) < 0)
			return -errno;
	}
	return 0;
}

void kvm_set_irq_level(void *opaque, uint32_t gsi, bool asserted)
{
	struct kvm *kvm = opaque;
	struct kvm_irq_level level = { .irq = gsi, .level = asserted ? 1 : 0 };

	if (ioctl(kvm->vm_fd, KVM_IRQ_LINE, &level) < 0)
		log_warn("kvm", "KVM_IRQ_LINE gsi %u failed: %s", gsi, strerror(errno));
}

void kvm_close(struct kvm *kvm)
{
	if (kvm->vm_fd >= 0)
		close(kvm->vm_fd);
	if (kvm->sys_fd >= 0)
		close(kvm->sys_fd);
	kvm->vm_fd = -1;
	kvm->sys_fd = -1;
}

/* 16-bit code (0x66 selects 32-bit operands): mov ecx, <count>; then the loop and hlt. */
static const uint8_t probe_code_mov_ecx[] = { 0x66, 0xb9 };
static const uint8_t probe_code_loop[] = {
	0x66, 0x49, /* dec ecx */
	0x75, 0xfc, /* jnz back to dec */
	0xf4,	    /* hlt */
};

static void kvm_probe_write_code(uint8_t *code)
{
	const uint32_t count = PROBE_ITERATIONS;

	memcpy(code, probe_code_mov_ecx, sizeof(probe_code_mov_ecx));
	code += sizeof(probe_code_mov_ecx);
	memcpy(code, &count, sizeof(count));
	code += sizeof(count);
	memcpy(code, probe_code_loop, sizeof(probe_code_loop));
}

static long kvm_probe_elapsed_ms(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - start->tv_sec) * MSEC_PER_SEC +
	       (now.tv_nsec - start->tv_nsec) / NSEC_PER_MSEC;
}

static int kvm_probe_run(int vm_fd, size_t mmap_size, uint8_t *mem, long *elapsed_ms)
{
	struct kvm_userspace_memory_region slot = {
		.memory_size = PROBE_MEMORY_SIZE, .userspace_addr = (uint64_t)(uintptr_t)mem,
	};
	struct kvm_sregs sregs;
	struct kvm_regs regs = { .rip = PROBE_CODE_ADDR, .rflags = PROBE_RFLAGS };
	struct kvm_run *run = MAP_FAILED;
	struct timespec start;
	int rc = -EIO;
	int vcpu_fd;

	kvm_probe_write_code(mem + PROBE_CODE_ADDR);
	if (ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &slot) < 0)
		return -errno;
	vcpu_fd = ioctl(vm_fd, KVM_CREATE_VCPU, 0);
	if (vcpu_fd < 0)
		return -errno;
	run = mmap(NULL, mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu_fd, 0);
	if (run == MAP_FAILED || ioctl(vcpu_fd, KVM_GET_SREGS, &sregs) < 0)
		goto out;
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	if (ioctl(vcpu_fd, KVM_SET_SREGS, &sregs) < 0 || ioctl(vcpu_fd, KVM_SET_REGS, &regs) < 0)
		goto out;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		if (ioctl(vcpu_fd, KVM_RUN, 0) < 0 && errno != EINTR)
			goto out;
	} while (run->exit_reason != KVM_EXIT_HLT && kvm_probe_elapsed_ms(&start) < PROBE_GIVE_UP_MS &&
		 (run->exit_reason == KVM_EXIT_INTR || run->exit_reason == KVM_EXIT_UNKNOWN));
	*elapsed_ms = kvm_probe_elapsed_ms(&start);
	rc = run->exit_reason == KVM_EXIT_HLT ? 0 : -EIO;
out:
	if (run != MAP_FAILED)
		munmap(run, mmap_size);
	close(vcpu_fd);
	return rc;
}

/* The hardware KVM backends and the PVM one, as /sys/module names them. */
#define KVM_SYSFS_MODULE_DIR "/sys/module"
static const char *const kvm_hardware_modules[] = { "kvm_intel", "kvm_amd" };
#define KVM_PVM_MODULE "kvm_pvm"

static bool kvm_module_loaded(const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", KVM_SYSFS_MODULE_DIR, name);
	return access(path, F_OK) == 0;
}

enum kvm_backend_kind {
	KVM_BACKEND_HARDWARE, /* kvm_intel / kvm_amd: standard guests run at hardware speed */
	KVM_BACKEND_PVM,      /* kvm_pvm: standard guests are emulated instruction by instruction */
	KVM_BACKEND_UNKNOWN,  /* anything else: only timing a guest tells */
};

static enum kvm_backend_kind kvm_backend_kind(void)
{
	if (kvm_module_loaded(KVM_PVM_MODULE))
		return KVM_BACKEND_PVM;
	for (size_t i = 0; i < sizeof(kvm_hardware_modules) / sizeof(kvm_hardware_modules[0]); i++)
		if (kvm_module_loaded(kvm_hardware_modules[i]))
			return KVM_BACKEND_HARDWARE;
	return KVM_BACKEND_UNKNOWN;
}

static bool kvm_probe_timed(char *why, size_t why_len);

/*
 * The loaded KVM backend decides when it is conclusive; a guest loop is timed only when it is
 * not. Timing is the fallback rather than the rule because a real-mode test guest is exactly
 * what some nested hypervisors handle worst (a software-emulated SVM has been seen to wedge
 * on it), while the backend module names the answer outright.
 */
bool kvm_probe_usable(char *why, size_t why_len)
{
	struct kvm kvm;

	if (kvm_open(&kvm, why, why_len) < 0)
		return false;
	kvm_close(&kvm);
	switch (kvm_backend_kind()) {
	case KVM_BACKEND_HARDWARE:
		snprintf(why, why_len, "KVM runs standard guests (hardware virtualization)");
		return true;
	case KVM_BACKEND_PVM:
		snprintf(why, why_len, "this host's KVM emulates standard guests (PVM: the kvm_pvm "
			 "module runs a stock kernel a thousand times slower than hardware): run "
			 "inside a VM with nested virtualization or use scripts/with-nested-kvm");
		return false;
	case KVM_BACKEND_UNKNOWN:
		break;
	}
	return kvm_probe_timed(why, why_len);
}

static bool kvm_probe_timed(char *why, size_t why_len)
{
	struct kvm kvm;
	uint8_t *mem = MAP_FAILED;
	long elapsed_ms = 0;
	bool usable = false;
	int rc;

	if (kvm_open(&kvm, why, why_len) < 0)
		return false;
	kvm.vm_fd = ioctl(kvm.sys_fd, KVM_CREATE_VM, 0);
	if (kvm.vm_fd < 0) {
		snprintf(why, why_len, "KVM_CREATE_VM failed: %s", strerror(errno));
		goto out;
	}
	mem = mmap(NULL, PROBE_MEMORY_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (mem == MAP_FAILED) {
		snprintf(why, why_len, "cannot allocate probe memory: %s", strerror(errno));
		goto out;
	}
	rc = kvm_probe_run(kvm.vm_fd, kvm.vcpu_mmap_size, mem, &elapsed_ms);
	if (rc < 0) {
		snprintf(why, why_len, "a test guest did not run on this host's KVM (%s): run "
			 "inside a VM with nested virtualization or use scripts/with-nested-kvm",
			 strerror(-rc));
		goto out;
	}
	if (elapsed_ms > PROBE_MAX_MS) {
		snprintf(why, why_len, "this host's KVM emulates standard guests (PVM: a test loop "
			 "took %ld ms, hardware needs a few): run inside a VM with nested "
			 "virtualization or use scripts/with-nested-kvm", elapsed_ms);
		goto out;
	}
	snprintf(why, why_len, "KVM runs standard guests (test loop %ld ms)", elapsed_ms);
	usable = true;
out:
	if (mem != MAP_FAILED)
		munmap(mem, PROBE_MEMORY_SIZE);
	kvm_close(&kvm);
	return usable;
}
