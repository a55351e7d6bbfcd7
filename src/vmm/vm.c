/*
 * VM assembly and lifecycle. vm_create does everything that can fail for a reason the user
 * can fix (sizes, files, /dev/kvm) before any thread exists; vm_start only writes the ACPI
 * tables (they depend on the devices attached in between) and starts the vCPU threads. The
 * first exit reason wins; it is recorded under a mutex and broadcast to vm_wait callers.
 */
#include "vmm/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "vmm/acpi.h"
#include "vmm/boot.h"
#include "vmm/cmdline.h"
#include "vmm/cpuid.h"
#include "vmm/kvm.h"
#include "vmm/memory.h"
#include "vmm/vcpu.h"
#include "vmm/vm_internal.h"
#include "vmm/vmlinux.h"

#define VM_ERR_LEN 512
#define NSEC_PER_MSEC 1000000ULL
#define VM_FILE_MAX_BYTES (1ULL << 32) /* a kernel or initramfs above 4 GiB is a mistake */

static const char *const exit_reason_names[] = {
	[VM_EXIT_NONE] = "running",
	[VM_EXIT_GUEST_POWEROFF] = "guest poweroff",
	[VM_EXIT_GUEST_REBOOT] = "guest reboot",
	[VM_EXIT_GUEST_PANIC] = "guest panic",
	[VM_EXIT_HOST_STOP] = "host stop",
	[VM_EXIT_INTERNAL_ERROR] = "internal error",
	[VM_EXIT_GUEST_TRIPLE_FAULT] = "guest crash (triple fault)",
};

const char *vm_exit_reason_name(enum vm_exit_reason reason)
{
	if ((size_t)reason >= sizeof(exit_reason_names) / sizeof(exit_reason_names[0]))
		return "unknown";
	return exit_reason_names[reason];
}

void vm_kick_all(struct vm *vm)
{
	pthread_mutex_lock(&vm->kick_lock);
	for (unsigned int i = 0; i < vm->vcpus_created; i++)
		vcpu_kick(&vm->vcpus[i]);
	pthread_mutex_unlock(&vm->kick_lock);
}

/*
 * Starts a vCPU's thread under the kick lock, so no kick can pass between its thread existing
 * and it counting as started: a VM that ends meanwhile (another vCPU's guest resets at once)
 * waits for the lock and then kicks it too, instead of leaving it in KVM_RUN for good.
 */
int vm_start_vcpu(struct vm *vm, struct vcpu *vcpu)
{
	pthread_mutex_lock(&vm->kick_lock);
	int rc = vcpu_start(vcpu);

	pthread_mutex_unlock(&vm->kick_lock);
	return rc;
}

/* Stops new kicks to a vCPU, then joins its thread. */
void vm_join_vcpu(struct vm *vm, struct vcpu *vcpu)
{
	pthread_mutex_lock(&vm->kick_lock);
	bool running = vcpu->started;

	vcpu->started = false;
	pthread_mutex_unlock(&vm->kick_lock);
	if (running)
		pthread_join(vcpu->thread, NULL);
}

static bool vm_devices_saw_panic(struct vm *vm)
{
	for (size_t i = 0; i < vm->device_count; i++) {
		const struct vm_device_entry *entry = &vm->devices[i];

		if (entry->type->ops->saw_guest_panic && entry->type->ops->saw_guest_panic(entry->dev))
			return true;
	}
	return false;
}

/* Records the first reason, stops every vCPU. Called from vCPU threads and the host. */
static void vm_end(struct vm *vm, enum vm_exit_reason reason)
{
	if ((reason == VM_EXIT_GUEST_REBOOT || reason == VM_EXIT_GUEST_TRIPLE_FAULT) &&
	    vm_devices_saw_panic(vm))
		reason = VM_EXIT_GUEST_PANIC;
	bool ended_now = false;

	pthread_mutex_lock(&vm->lock);
	if (vm->reason == VM_EXIT_NONE) {
		vm->reason = reason;
		ended_now = true;
		log_debug("vm", "VM ends: %s", vm_exit_reason_name(reason));
	}
	/* a snapshot's pause sets stop too: the end's eventfd follows the reason, not stop */
	bool first = !atomic_exchange(&vm->stop, true);

	pthread_cond_broadcast(&vm->cond);
	pthread_mutex_unlock(&vm->lock);
	if (ended_now && vm->end_event_fd >= 0) {
		uint64_t one = 1;

		if (write(vm->end_event_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
			log_debug("vm", "cannot signal the VM's end on its eventfd: %s",
				  strerror(errno));
	}
	if (first)
		vm_kick_all(vm);
	/* a guest that is gone answers nothing: its host connections end now, not at timeouts */
	for (size_t i = 0; first && i < vm->device_count; i++) {
		const struct vm_device_entry *entry = &vm->devices[i];

		if (entry->type->ops->guest_stopped)
			entry->type->ops->guest_stopped(entry->dev);
	}
}

static void vm_vcpu_exit(void *opaque, enum vm_exit_reason reason)
{
	vm_end(opaque, reason);
}

void vm_guest_requested_reset(struct vm *vm)
{
	vm_end(vm, VM_EXIT_GUEST_REBOOT);
}

/* ACPI hardware-reduced registers: sleep control (S5 = poweroff), sleep status, reset. */
static void vm_acpi_pm_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			      bool is_write)
{
	struct vm *vm = opaque;
	uint64_t port = ACPI_SLEEP_CONTROL_PORT + offset;

	if (!is_write) {
		memset(data, 0, len);
		return;
	}
	if (port == ACPI_SLEEP_CONTROL_PORT && (data[0] & ACPI_SLEEP_ENABLE) &&
	    ((data[0] >> ACPI_SLEEP_TYPE_SHIFT) & ACPI_SLEEP_TYPE_MASK) == ACPI_S5_SLEEP_TYPE)
		vm_end(vm, VM_EXIT_GUEST_POWEROFF);
	else if (port == ACPI_RESET_PORT && data[0] == ACPI_RESET_VALUE)
		vm_end(vm, VM_EXIT_GUEST_REBOOT);
}

static int vm_read_file(const char *path, const char *what, uint8_t **data, size_t *size,
			char *err, size_t errlen)
{
	struct stat st;
	int rc = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open %s %s: %s: check the path", what, path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > VM_FILE_MAX_BYTES) {
		snprintf(err, errlen, "%s %s is not a regular, non-empty file under 4 GiB", what,
			 path);
		rc = -EINVAL;
		goto out;
	}
	*size = (size_t)st.st_size;
	*data = malloc(*size);
	if (!*data) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory reading %s %s", what, path);
		goto out;
	}
	for (size_t done = 0; done < *size;) {
		ssize_t n = read(fd, *data + done, *size - done);

		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(-rc));
			free(*data);
			*data = NULL;
			goto out;
		}
		done += (size_t)n;
	}
out:
	close(fd);
	return rc;
}

static void vm_warn_small_memory(const struct vm_config *cfg, const uint8_t *initrd,
				 size_t initrd_size, uint64_t memory_bytes)
{
	uint64_t needed = boot_initramfs_min_memory(initrd, initrd_size);

	if (memory_bytes >= needed)
		return;
	log_warn("vm", "%u MiB may be too little to unpack initramfs %s (estimate %" PRIu64
		 " MiB): the guest may panic with \"no working init found\" or run out of "
		 "memory; give the VM more memory",
		 cfg->memory_mb, cfg->initramfs_path, needed / GUEST_MEMORY_MIB + 1);
}

/*
 * The cached vmlinux for cfg->kernel_path in cfg->vmlinux_cache_dir, extracted now when
 * missing. Falls back to the kernel as given (returns its path) when anything fails.
 */
static const char *vm_kernel_to_boot(const struct vm_config *cfg, char *path, size_t len)
{
	char err[VM_ERR_LEN];

	if (!cfg->vmlinux_cache_dir)
		return cfg->kernel_path;
	if (vmlinux_cache_prepare(cfg->vmlinux_cache_dir, cfg->kernel_path, path, len, err,
				  sizeof(err)) < 0) {
		log_warn("vm", "booting %s as given (slower): %s", cfg->kernel_path, err);
		return cfg->kernel_path;
	}
	return path;
}

static int vm_load_guest(struct vm *vm, const struct vm_config *cfg, char *err, size_t errlen)
{
	uint8_t *kernel = NULL, *initrd = NULL;
	size_t kernel_size = 0, initrd_size = 0;
	struct boot_result result;
	char cached[PATH_MAX];
	const char *kernel_path = vm_kernel_to_boot(cfg, cached, sizeof(cached));
	int rc = vm_read_file(kernel_path, "kernel", &kernel, &kernel_size, err, errlen);

	if (rc < 0)
		return rc;
	if (cfg->initramfs_path) {
		rc = vm_read_file(cfg->initramfs_path, "initramfs", &initrd, &initrd_size, err,
				  errlen);
		if (rc < 0)
			goto out;
		vm_warn_small_memory(cfg, initrd, initrd_size, vm->mem.total_size);
	}
	struct boot_config boot = {
		.kernel = kernel, .kernel_size = kernel_size,
		.initrd = initrd, .initrd_size = initrd_size,
		.cmdline = vm->cmdline, .acpi_rsdp_addr = ACPI_REGION_ADDR,
	};

	rc = boot_load_linux(&vm->mem, &boot, &result, err, errlen);
	if (rc == 0)
		vm->entry = result.entry;
out:
	free(kernel);
	free(initrd);
	return rc;
}

static int vm_setup_cmdline(struct vm *vm, const struct vm_config *cfg, char *err, size_t errlen)
{
	if (cfg->has_secret) {
		memcpy(vm->secret, cfg->secret, VM_SECRET_LEN);
	} else if (getrandom(vm->secret, VM_SECRET_LEN, 0) != VM_SECRET_LEN) {
		snprintf(err, errlen, "cannot read random bytes for the session secret: %s",
			 strerror(errno));
		return -EIO;
	}
	if (cmdline_build(vm->cmdline, sizeof(vm->cmdline), vm->secret, (uint64_t)time(NULL),
			  cfg->cmdline) < 0) {
		snprintf(err, errlen, "kernel command line exceeds %d bytes: shorten the extra "
			 "arguments", CMDLINE_MAX);
		return -E2BIG;
	}
	return 0;
}

int vm_setup_platform(struct vm *vm, char *err, size_t errlen)
{
	if (bus_register(&vm->pio, ACPI_SLEEP_CONTROL_PORT, ACPI_PM_PORT_COUNT, vm_acpi_pm_access,
			 vm) < 0) {
		snprintf(err, errlen, "internal error: the ACPI power ports overlap a device");
		return -EEXIST;
	}
	return 0;
}

void vm_devices_placement_enter(struct vm *vm, struct vm_placement *placement)
{
	vm_placement_enter(placement, vm->placement_cpu);
	vm->creator_cpus = placement->pinned ? &placement->saved : NULL;
}

void vm_devices_placement_leave(struct vm *vm, struct vm_placement *placement)
{
	vm->creator_cpus = NULL;
	vm_placement_leave(placement);
}

int vm_create_devices(struct vm *vm, const struct vm_config *cfg, char *err, size_t errlen)
{
	struct vm_placement placement;
	int rc = 0;

	vm_devices_placement_enter(vm, &placement);
	for (size_t i = 0; vm_device_types[i] && rc == 0; i++)
		rc = vm_device_types[i]->create(vm, cfg, NULL, err, errlen);
	vm_devices_placement_leave(vm, &placement);
	return rc;
}

const struct vm_device_type *vm_device_type_find(const char *name)
{
	for (size_t i = 0; vm_device_types[i]; i++)
		if (strcmp(vm_device_types[i]->name, name) == 0)
			return vm_device_types[i];
	return NULL;
}

int vm_devices_load_libraries(const struct vm_config *cfg, char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && vm_device_types[i]; i++)
		if (vm_device_types[i]->load_libraries)
			rc = vm_device_types[i]->load_libraries(cfg, NULL, err, errlen);
	return rc;
}

int vm_device_attach(struct vm *vm, const struct vm_device_type *type, void *dev)
{
	if (vm->started)
		return -EBUSY;
	if (vm->device_count >= VM_MAX_DEVICES)
		return -ENOSPC;
	vm->devices[vm->device_count++] = (struct vm_device_entry){ .type = type, .dev = dev };
	return 0;
}

int vm_pio_register(struct vm *vm, uint64_t base, uint64_t len, bus_access_fn access,
		    void *opaque)
{
	return vm->started ? -EBUSY : bus_register(&vm->pio, base, len, access, opaque);
}

struct irq_line vm_irq_line(struct vm *vm, uint32_t gsi)
{
	return (struct irq_line){ .set_level = kvm_set_irq_level, .opaque = &vm->kvm,
				  .gsi = gsi };
}

int vm_bind_doorbell(struct vm *vm, uint64_t addr, uint32_t len, int fd)
{
	struct kvm_ioeventfd doorbell = { .addr = addr, .len = len, .fd = fd };

	if (vm->no_doorbells)
		return 0;
	if (vm->started)
		return -EBUSY;
	return ioctl(vm->kvm.vm_fd, KVM_IOEVENTFD, &doorbell) < 0 ? -errno : 0;
}

const cpu_set_t *vm_stream_worker_cpus(const struct vm *vm)
{
	return vm->creator_cpus;
}

bool vm_thread_filters_on(const struct vm *vm)
{
	return !vm->no_thread_filters;
}

void vm_set_vsock_cid(struct vm *vm, uint64_t cid)
{
	vm->vsock_cid = cid;
}

void vm_lower_virtio_lines(struct vm *vm)
{
	for (size_t i = 0; i < vm->virtio_count; i++)
		kvm_set_irq_level(&vm->kvm, vm->virtio[i].gsi, false);
}

int vm_setup_vcpus(struct vm *vm, char *err, size_t errlen)
{
	struct kvm_cpuid2 *supported = NULL;
	int rc = cpuid_get_supported(vm->kvm.sys_fd, &supported);

	if (rc < 0) {
		snprintf(err, errlen, "KVM_GET_SUPPORTED_CPUID failed: %s", strerror(-rc));
		return rc;
	}
	for (unsigned int i = 0; i < vm->vcpu_count && rc == 0; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];
		struct kvm_cpuid2 *cpuid;

		rc = vcpu_create(vcpu, vm->kvm.vm_fd, i, vm->kvm.vcpu_mmap_size);
		if (rc < 0) {
			snprintf(err, errlen, "cannot create vCPU %u: %s: use fewer vCPUs", i,
				 strerror(-rc));
			break;
		}
		vm->vcpus_created++;
		vcpu->pio = &vm->pio;
		vcpu->mmio = &vm->mmio;
		vcpu->stop = &vm->stop;
		vcpu->on_exit = vm_vcpu_exit;
		vcpu->opaque = vm;
		vcpu->confine = !vm->no_thread_filters;
		cpuid = cpuid_for_vcpu(supported, i, vm->vcpu_count, vm->kvm.has_tsc_deadline);
		rc = cpuid ? vcpu_configure(vcpu, cpuid, i == 0, vm->entry) : -ENOMEM;
		free(cpuid);
		if (rc < 0)
			snprintf(err, errlen, "cannot configure vCPU %u: %s", i, strerror(-rc));
	}
	free(supported);
	return rc;
}

static int vm_validate(const struct vm_config *cfg, char *err, size_t errlen)
{
	if (!cfg->kernel_path) {
		snprintf(err, errlen, "no kernel given: pass a bzImage path");
		return -EINVAL;
	}
	if (cfg->vcpus > VM_MAX_VCPUS) {
		snprintf(err, errlen, "%u vCPUs requested, at most %d are supported: use fewer",
			 cfg->vcpus, VM_MAX_VCPUS);
		return -EINVAL;
	}
	return 0;
}

struct vm *vm_alloc(void)
{
	struct vm *vm = calloc(1, sizeof(*vm));

	if (!vm)
		return NULL;
	vm->kvm.sys_fd = -1;
	vm->kvm.vm_fd = -1;
	vm->placement_cpu = VM_PLACEMENT_NONE;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_mutex_init(&vm->kick_lock, NULL);
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&vm->cond, &attr);
	pthread_condattr_destroy(&attr);
	vm->end_event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return vm;
}

int vm_create(const struct vm_config *cfg, struct vm **out, char *err, size_t errlen)
{
	unsigned int memory_mb = cfg->memory_mb ? cfg->memory_mb : VM_DEFAULT_MEMORY_MB;
	struct vm *vm;
	int rc = vm_validate(cfg, err, errlen);

	if (rc < 0)
		return rc;
	vm = vm_alloc();
	if (!vm) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	vm->vcpu_count = cfg->vcpus ? cfg->vcpus : 1;
	vm->placement_cpu = cfg->has_placement_cpu ? cfg->placement_cpu :
						     vm_placement_choose(vm->vcpu_count);
	vm->no_doorbells = cfg->no_doorbells;
	vm->no_thread_filters = cfg->no_thread_filters;
	rc = guest_memory_plan(&vm->mem, memory_mb, guest_memory_host_ram(), err, errlen);
	if (rc < 0)
		goto fail;
	rc = vcpu_signal_init();
	if (rc < 0) {
		snprintf(err, errlen, "cannot install the vCPU kick handler: %s", strerror(-rc));
		goto fail;
	}
	rc = kvm_open(&vm->kvm, err, errlen);
	if (rc < 0)
		goto fail;
	rc = kvm_create_vm(&vm->kvm, err, errlen);
	if (rc < 0)
		goto fail;
	rc = guest_memory_map(&vm->mem);
	if (rc == 0)
		rc = kvm_map_guest_memory(&vm->kvm, &vm->mem);
	if (rc < 0) {
		snprintf(err, errlen, "cannot map %u MiB of guest memory: %s: use less memory",
			 memory_mb, strerror(-rc));
		goto fail;
	}
	rc = vm_setup_cmdline(vm, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	rc = vm_load_guest(vm, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	rc = vm_setup_platform(vm, err, errlen);
	if (rc < 0)
		goto fail;
	rc = vm_create_devices(vm, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	rc = vm_setup_vcpus(vm, err, errlen);
	if (rc < 0)
		goto fail;
	*out = vm;
	return 0;
fail:
	vm_destroy(vm);
	return rc;
}

int vm_virtio_mmio_slot_reserve(struct vm *vm, struct vm_virtio_mmio_slot *slot)
{
	if (vm->started)
		return -EBUSY;
	if (vm->virtio_count >= VM_VIRTIO_MMIO_MAX_SLOTS)
		return -ENOSPC;
	size_t index = vm->virtio_count++;

	vm->virtio[index] = (struct acpi_virtio_device){
		.base = VM_VIRTIO_MMIO_BASE + index * VM_VIRTIO_MMIO_STRIDE,
		.size = VM_VIRTIO_MMIO_SIZE,
		.gsi = VM_VIRTIO_MMIO_FIRST_GSI + (uint32_t)index,
	};
	*slot = (struct vm_virtio_mmio_slot){
		.base = vm->virtio[index].base,
		.size = vm->virtio[index].size,
		.gsi = vm->virtio[index].gsi,
		.irq = { .set_level = kvm_set_irq_level, .opaque = &vm->kvm,
			 .gsi = vm->virtio[index].gsi },
	};
	return 0;
}

int vm_virtio_mmio_slot_attach(struct vm *vm, const struct vm_virtio_mmio_slot *slot,
			       bus_access_fn access, void *opaque)
{
	if (vm->started)
		return -EBUSY;
	if (slot->base < VM_VIRTIO_MMIO_BASE)
		return -EINVAL;
	size_t index = (slot->base - VM_VIRTIO_MMIO_BASE) / VM_VIRTIO_MMIO_STRIDE;

	if (index >= vm->virtio_count || vm->virtio[index].base != slot->base ||
	    vm->virtio_attached[index])
		return -EINVAL;
	int rc = bus_register(&vm->mmio, slot->base, slot->size, access, opaque);

	if (rc == 0)
		vm->virtio_attached[index] = true;
	return rc;
}

const struct guest_memory *vm_guest_memory(struct vm *vm)
{
	return &vm->mem;
}

int vm_kvm_fd(struct vm *vm)
{
	return vm->kvm.vm_fd;
}

static int vm_write_acpi(struct vm *vm)
{
	struct acpi_virtio_device attached[VM_VIRTIO_MMIO_MAX_SLOTS];
	size_t count = 0;
	uint8_t *region = guest_memory_ptr(&vm->mem, ACPI_REGION_ADDR, ACPI_REGION_SIZE);

	if (!region)
		return -EFAULT;
	for (size_t i = 0; i < vm->virtio_count; i++)
		if (vm->virtio_attached[i])
			attached[count++] = vm->virtio[i];
	struct acpi_config cfg = { .vcpus = vm->vcpu_count, .virtio = attached,
				   .virtio_count = count };

	return acpi_build(&cfg, region, ACPI_REGION_ADDR, ACPI_REGION_SIZE);
}

int vm_start(struct vm *vm)
{
	struct vm_placement placement;
	int rc;

	if (vm->started)
		return -EBUSY;
	rc = vm->restored ? 0 : vm_write_acpi(vm); /* a restored guest has its tables */
	if (rc < 0) {
		log_error("vm", "cannot write ACPI tables: %s", strerror(-rc));
		return rc;
	}
	vm->started = true;
	vm->start_ns = clock_monotonic_ns();
	vm_placement_enter(&placement, vm->placement_cpu); /* the vCPU threads inherit it */
	for (unsigned int i = 0; i < vm->vcpu_count && rc == 0; i++) {
		rc = vm_start_vcpu(vm, &vm->vcpus[i]);
		if (rc < 0)
			log_error("vm", "cannot start vCPU %u thread: %s", i, strerror(-rc));
	}
	vm_placement_leave(&placement);
	if (rc < 0)
		vm_end(vm, VM_EXIT_INTERNAL_ERROR);
	return rc;
}

int vm_wait(struct vm *vm, int timeout_ms, enum vm_exit_reason *reason)
{
	struct timespec deadline = clock_deadline_after_ms(timeout_ms);
	int rc = 0;

	pthread_mutex_lock(&vm->lock);
	while (vm->reason == VM_EXIT_NONE && rc == 0) {
		if (timeout_ms < 0)
			rc = pthread_cond_wait(&vm->cond, &vm->lock);
		else
			rc = pthread_cond_timedwait(&vm->cond, &vm->lock, &deadline);
	}
	if (reason)
		*reason = vm->reason;
	bool ended = vm->reason != VM_EXIT_NONE;

	pthread_mutex_unlock(&vm->lock);
	return ended ? 0 : -ETIMEDOUT;
}

int vm_end_event_fd(const struct vm *vm)
{
	return vm->end_event_fd;
}

void vm_request_stop(struct vm *vm)
{
	vm_end(vm, VM_EXIT_HOST_STOP);
}

void vm_destroy(struct vm *vm)
{
	if (!vm)
		return;
	if (vm->started)
		vm_request_stop(vm);
	for (unsigned int i = 0; i < vm->vcpus_created; i++) {
		vm_join_vcpu(vm, &vm->vcpus[i]);
		vcpu_destroy(&vm->vcpus[i]);
	}
	for (size_t i = vm->device_count; i-- > 0;)
		vm->devices[i].type->ops->destroy(vm->devices[i].dev);
	kvm_close(&vm->kvm);
	guest_memory_unmap(&vm->mem);
	vm_fork_release_base(vm);
	vm_snapshot_release(vm);
	if (vm->end_event_fd >= 0)
		close(vm->end_event_fd);
	pthread_cond_destroy(&vm->cond);
	pthread_mutex_destroy(&vm->lock);
	pthread_mutex_destroy(&vm->kick_lock);
	free(vm);
}

void vm_secret_hex(const struct vm *vm, char *out)
{
	cmdline_secret_hex(vm->secret, out);
}

const char *vm_kernel_cmdline(const struct vm *vm)
{
	return vm->cmdline;
}

uint64_t vm_vsock_cid(const struct vm *vm)
{
	return vm->vsock_cid;
}

long vm_first_output_ms(struct vm *vm)
{
	uint64_t first = 0;

	for (size_t i = 0; !first && i < vm->device_count; i++)
		if (vm->devices[i].type->ops->first_output_ns)
			first = vm->devices[i].type->ops->first_output_ns(vm->devices[i].dev);

	if (!first || !vm->started)
		return -1;
	return (long)((first - vm->start_ns) / NSEC_PER_MSEC);
}
