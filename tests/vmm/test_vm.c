/*
 * The lifecycle API against the real /dev/kvm, without booting Linux: the "kernel" is a tiny
 * ELF whose entry is a HLT loop, wrapped as an XZ bzImage so vm_create also exercises the
 * vmlinux cache. Checks slot allocation, the secret on the command line, a wait that times
 * out, and a host stop that kicks halted vCPUs out of KVM_RUN and signals the end's eventfd.
 * Skips where /dev/kvm cannot be opened.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <lzma.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/vm.h"

#define KERNEL_ADDR 0x1000000ULL
#define CODE_OFFSET 0x1000
#define CODE_SIZE 0x1000
#define SETUP_BYTES (5 * 512)
#define WAIT_SHORT_MS 200

static uint8_t elf[CODE_OFFSET + CODE_SIZE];
static uint8_t bz[SETUP_BYTES + 16384];
static char dir[] = "/tmp/voidbox-vm-test-XXXXXX";

static void make_elf(void)
{
	Elf64_Ehdr eh = { 0 };
	Elf64_Phdr ph = { 0 };
	const uint8_t halt_loop[] = { 0xf4, 0xeb, 0xfd }; /* hlt; jmp hlt */

	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_type = ET_EXEC;
	eh.e_machine = EM_X86_64;
	eh.e_entry = KERNEL_ADDR;
	eh.e_phoff = sizeof(eh);
	eh.e_phentsize = sizeof(ph);
	eh.e_phnum = 1;
	ph.p_type = PT_LOAD;
	ph.p_offset = CODE_OFFSET;
	ph.p_paddr = KERNEL_ADDR;
	ph.p_filesz = CODE_SIZE;
	ph.p_memsz = CODE_SIZE;
	memcpy(elf, &eh, sizeof(eh));
	memcpy(elf + sizeof(eh), &ph, sizeof(ph));
	memcpy(elf + CODE_OFFSET, halt_loop, sizeof(halt_loop));
}

/* An XZ bzImage around the ELF; returns its size or 0. */
static size_t make_bzimage(void)
{
	size_t xz_len = 0;
	uint16_t boot_flag = 0xaa55, version = 0x020f, xlf = 1;
	uint32_t zero = 0, init = 0x400000, cmdline_size = 2047, initrd_max = 0x7fffffff;

	if (lzma_easy_buffer_encode(6, LZMA_CHECK_CRC32, NULL, elf, sizeof(elf),
				    bz + SETUP_BYTES, &xz_len, sizeof(bz) - SETUP_BYTES) != LZMA_OK)
		return 0;
	uint32_t len = (uint32_t)xz_len;

	bz[0x1f1] = 4;
	memcpy(bz + 0x1fe, &boot_flag, 2);
	bz[0x201] = 0x6a;
	memcpy(bz + 0x202, "HdrS", 4);
	memcpy(bz + 0x206, &version, 2);
	memcpy(bz + 0x22c, &initrd_max, 4);
	memcpy(bz + 0x236, &xlf, 2);
	memcpy(bz + 0x238, &cmdline_size, 4);
	memcpy(bz + 0x248, &zero, 4);
	memcpy(bz + 0x24c, &len, 4);
	memcpy(bz + 0x260, &init, 4);
	return SETUP_BYTES + xz_len;
}

static int count_cached(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += strncmp(e->d_name, "vmlinux-", 8) == 0;
	closedir(d);
	return n;
}

static void dummy_mmio(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
		       bool is_write)
{
	if (!is_write)
		memset(data, 0, len);
}

static void test_lifecycle(const char *kernel_path)
{
	char serial_log[512], hex[VM_SECRET_LEN * 2 + 1], err[512] = "";
	struct vm_virtio_mmio_slot a, b, bogus;
	enum vm_exit_reason reason = VM_EXIT_INTERNAL_ERROR;
	struct vm *vm = NULL;

	snprintf(serial_log, sizeof(serial_log), "%s/serial.log", dir);
	struct vm_config cfg = { .kernel_path = kernel_path, .memory_mb = 64, .vcpus = 2,
				 .serial_log_path = serial_log, .vmlinux_cache_dir = dir,
				 .no_entropy_device = true, /* so the first slot is free */
				 /* valgrind cannot run threads that installed seccomp filters */
				 .no_thread_filters = HARNESS_UNDER_VALGRIND };

	CHECK_INT_EQ(vm_create(&cfg, &vm, err, sizeof(err)), 0);
	if (!vm) {
		fprintf(stderr, "  vm_create: %s\n", err);
		return;
	}
	CHECK_INT_EQ(count_cached(), 1);
	CHECK_INT_EQ(vm_virtio_mmio_slot_reserve(vm, &a), 0);
	CHECK_INT_EQ(vm_virtio_mmio_slot_reserve(vm, &b), 0);
	CHECK_INT_EQ(a.base, VM_VIRTIO_MMIO_BASE);
	CHECK_INT_EQ(a.gsi, VM_VIRTIO_MMIO_FIRST_GSI);
	CHECK_INT_EQ(b.base, VM_VIRTIO_MMIO_BASE + VM_VIRTIO_MMIO_STRIDE);
	CHECK_INT_EQ(b.gsi, VM_VIRTIO_MMIO_FIRST_GSI + 1);
	CHECK(a.irq.set_level != NULL);
	CHECK_INT_EQ(vm_virtio_mmio_slot_attach(vm, &a, dummy_mmio, NULL), 0);
	CHECK_INT_EQ(vm_virtio_mmio_slot_attach(vm, &a, dummy_mmio, NULL), -EINVAL);
	bogus = b;
	bogus.base += 8;
	CHECK_INT_EQ(vm_virtio_mmio_slot_attach(vm, &bogus, dummy_mmio, NULL), -EINVAL);
	vm_secret_hex(vm, hex);
	CHECK_INT_EQ(strlen(hex), 64);
	CHECK(strstr(vm_kernel_cmdline(vm), hex) != NULL);
	CHECK(vm_guest_memory(vm)->total_size == 64ULL << 20);
	CHECK(vm_kvm_fd(vm) >= 0);
	CHECK_INT_EQ(vm_start(vm), 0);
	CHECK_INT_EQ(vm_virtio_mmio_slot_reserve(vm, &bogus), -EBUSY);
	CHECK_INT_EQ(vm_wait(vm, WAIT_SHORT_MS, &reason), -ETIMEDOUT);
	CHECK_INT_EQ(reason, VM_EXIT_NONE);
	/* the end's eventfd stays quiet while the VM runs and turns readable when it ends */
	struct pollfd end = { .fd = vm_end_event_fd(vm), .events = POLLIN };

	CHECK(end.fd >= 0);
	CHECK_INT_EQ(poll(&end, 1, 0), 0);
	vm_request_stop(vm);
	CHECK_INT_EQ(poll(&end, 1, WAIT_SHORT_MS), 1);
	CHECK(end.revents & POLLIN);
	CHECK_INT_EQ(vm_wait(vm, -1, &reason), 0);
	CHECK_INT_EQ(reason, VM_EXIT_HOST_STOP);
	vm_request_stop(vm);
	vm_destroy(vm);
}

/* The entropy device plugs in through virtio_attach: it holds the first slot, fs the next. */
static void test_devices_attach(const char *kernel_path)
{
	char err[512] = "", share[sizeof(dir) + 8];
	struct vm_virtio_mmio_slot next;
	struct vm *vm = NULL;

	snprintf(share, sizeof(share), "%s/share", dir);
	CHECK(mkdir(share, 0700) == 0 || errno == EEXIST);
	const struct vm_share shares[] = { { .tag = "attach-test", .host_dir = share } };
	struct vm_config cfg = { .kernel_path = kernel_path, .memory_mb = 64, .vcpus = 1,
				 .vmlinux_cache_dir = dir, .shares = shares, .share_count = 1,
				 .no_thread_filters = HARNESS_UNDER_VALGRIND };

	CHECK_INT_EQ(vm_create(&cfg, &vm, err, sizeof(err)), 0);
	if (!vm) {
		fprintf(stderr, "  vm_create: %s\n", err);
		return;
	}
	CHECK_INT_EQ(vm_virtio_mmio_slot_reserve(vm, &next), 0);
	CHECK_INT_EQ(next.base, VM_VIRTIO_MMIO_BASE + 2 * VM_VIRTIO_MMIO_STRIDE);
	vm_destroy(vm);
}

int main(void)
{
	char kernel_path[512];
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		harness_skip_all("/dev/kvm cannot be opened here");
	close(fd);
	make_elf();
	size_t bz_len = make_bzimage();

	if (!bz_len || !mkdtemp(dir)) {
		fprintf(stderr, "cannot prepare the test kernel\n");
		return 1;
	}
	snprintf(kernel_path, sizeof(kernel_path), "%s/bzImage", dir);
	FILE *f = fopen(kernel_path, "wb");

	if (!f || fwrite(bz, 1, bz_len, f) != bz_len) {
		fprintf(stderr, "cannot write %s\n", kernel_path);
		return 1;
	}
	fclose(f);
	/* RUN_TEST takes no arguments; the same bookkeeping by hand. */
	static const struct {
		const char *name;
		void (*run)(const char *kernel_path);
	} tests[] = { { "test_lifecycle", test_lifecycle },
		      { "test_devices_attach", test_devices_attach } };

	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		harness_checks_failed_in_test = 0;
		fprintf(stderr, "test %s\n", tests[i].name);
		tests[i].run(kernel_path);
		if (harness_checks_failed_in_test)
			harness_tests_failed++;
		else
			harness_tests_passed++;
	}
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	return harness_finish();
}
