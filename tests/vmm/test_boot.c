/*
 * Boot-protocol arithmetic without a VM: bzImage header checks on synthetic images (each
 * refusal path), the e820 map, initramfs placement and the memory estimate, and a full
 * boot_load_linux into plain mapped memory whose zero page is then read back field by field.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/boot.h"
#include "vmm/memory.h"
#include "vmm/vmlinux.h"

#define SETUP_SECTS 4
#define SETUP_BYTES ((SETUP_SECTS + 1) * 512)
#define PAYLOAD_BYTES 4096
#define IMAGE_BYTES (SETUP_BYTES + PAYLOAD_BYTES)
#define INIT_SIZE 0x100000
#define MIB (1024ULL * 1024ULL)

static uint8_t image[IMAGE_BYTES];

static void put16(size_t off, uint16_t v)
{
	memcpy(image + off, &v, sizeof(v));
}

static void put32(size_t off, uint32_t v)
{
	memcpy(image + off, &v, sizeof(v));
}

static void put64(size_t off, uint64_t v)
{
	memcpy(image + off, &v, sizeof(v));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void make_bzimage(void)
{
	memset(image, 0, sizeof(image));
	image[0x1f1] = SETUP_SECTS;
	put16(0x1fe, 0xaa55);
	image[0x200] = 0xeb;
	image[0x201] = 0x6a; /* header ends at 0x26c */
	memcpy(image + 0x202, "HdrS", 4);
	put16(0x206, 0x020f);
	put32(0x22c, 0x7fffffff);
	put32(0x230, 0x200000);
	put16(0x236, 0x1);
	put32(0x238, 2047);
	put64(0x258, 0x1000000);
	put32(0x260, INIT_SIZE);
	memset(image + SETUP_BYTES, 0xcc, PAYLOAD_BYTES);
}

static void test_bzimage_valid(void)
{
	struct bzimage_info info;
	char err[256] = "";

	make_bzimage();
	CHECK_INT_EQ(bzimage_parse(image, sizeof(image), &info, err, sizeof(err)), 0);
	CHECK_INT_EQ(info.protocol, 0x020f);
	CHECK_INT_EQ(info.setup_size, SETUP_BYTES);
	CHECK_INT_EQ(info.kernel_size, PAYLOAD_BYTES);
	CHECK_INT_EQ(info.setup_header_end, 0x26c);
	CHECK_INT_EQ(info.pref_address, 0x1000000);
	CHECK_INT_EQ(info.initrd_addr_max, 0x7fffffff);
	CHECK_INT_EQ(info.cmdline_size, 2047);
}

static void test_bzimage_refusals(void)
{
	struct bzimage_info info;
	char err[256];

	make_bzimage();
	CHECK_INT_EQ(bzimage_parse(image, 0x100, &info, err, sizeof(err)), -ENOEXEC);
	CHECK(strstr(err, "not a bzImage") != NULL);

	make_bzimage();
	memcpy(image + 0x202, "ELF!", 4);
	CHECK_INT_EQ(bzimage_parse(image, sizeof(image), &info, err, sizeof(err)), -ENOEXEC);

	make_bzimage();
	put16(0x206, 0x0206);
	CHECK_INT_EQ(bzimage_parse(image, sizeof(image), &info, err, sizeof(err)), -ENOEXEC);
	CHECK(strstr(err, "2.12") != NULL);

	make_bzimage();
	put16(0x236, 0);
	CHECK_INT_EQ(bzimage_parse(image, sizeof(image), &info, err, sizeof(err)), -ENOEXEC);
	CHECK(strstr(err, "64-bit") != NULL);

	make_bzimage(); /* truncated: the file ends inside the setup sectors */
	CHECK_INT_EQ(bzimage_parse(image, SETUP_BYTES - 1, &info, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "truncated") != NULL);

	make_bzimage(); /* payload larger than the kernel claims to need */
	put32(0x260, 16);
	CHECK_INT_EQ(bzimage_parse(image, sizeof(image), &info, err, sizeof(err)), -EINVAL);
}

static void test_e820_small(void)
{
	struct guest_memory mem;
	struct e820_entry table[BOOT_E820_MAX];
	char err[256];

	CHECK_INT_EQ(guest_memory_plan(&mem, 256, 0, err, sizeof(err)), 0);
	size_t n = boot_e820_build(&mem, table, BOOT_E820_MAX);

	CHECK_INT_EQ(n, 3);
	CHECK_INT_EQ(table[0].addr, 0);
	CHECK_INT_EQ(table[0].size, 0x9fc00);
	CHECK_INT_EQ(table[0].type, E820_TYPE_RAM);
	CHECK_INT_EQ(table[1].addr, 0x9fc00);
	CHECK_INT_EQ(table[1].addr + table[1].size, 0x100000);
	CHECK_INT_EQ(table[1].type, E820_TYPE_RESERVED);
	CHECK_INT_EQ(table[2].addr, 0x100000);
	CHECK_INT_EQ(table[2].addr + table[2].size, 256 * MIB);
	CHECK_INT_EQ(table[2].type, E820_TYPE_RAM);
}

static void test_e820_high(void)
{
	struct guest_memory mem;
	struct e820_entry table[BOOT_E820_MAX];
	char err[256];

	CHECK_INT_EQ(guest_memory_plan(&mem, 8192, 0, err, sizeof(err)), 0);
	size_t n = boot_e820_build(&mem, table, BOOT_E820_MAX);

	CHECK_INT_EQ(n, 4);
	CHECK_INT_EQ(table[2].addr + table[2].size, GUEST_MEMORY_GAP_START);
	CHECK_INT_EQ(table[3].addr, GUEST_MEMORY_HIGH_START);
	CHECK_INT_EQ(table[3].size, 8192 * MIB - GUEST_MEMORY_GAP_START);
	CHECK_INT_EQ(table[3].type, E820_TYPE_RAM);
	/* The table never exceeds the space it is given. */
	CHECK_INT_EQ(boot_e820_build(&mem, table, 2), 2);
}

static void test_initrd_placement(void)
{
	uint64_t addr = 0;

	/* 256 MiB guest, 10 MiB initramfs: highest 2 MiB boundary that still fits. */
	CHECK_INT_EQ(boot_initrd_place(10 * MIB, 0x7fffffff, 256 * MIB, 32 * MIB, &addr), 0);
	CHECK_INT_EQ(addr, 246 * MIB);
	CHECK_INT_EQ(addr % BOOT_INITRD_ALIGN, 0);
	/* Unaligned size: rounded down, still ends below RAM end. */
	CHECK_INT_EQ(boot_initrd_place(3 * MIB + 5, 0x7fffffff, 256 * MIB, 32 * MIB, &addr), 0);
	CHECK_INT_EQ(addr, 252 * MIB);
	CHECK(addr + 3 * MIB + 5 <= 256 * MIB);
	/* initrd_addr_max below RAM end wins. */
	CHECK_INT_EQ(boot_initrd_place(1 * MIB, 128 * MIB - 1, 256 * MIB, 32 * MIB, &addr), 0);
	CHECK_INT_EQ(addr, 126 * MIB);
	/* A 3 GiB low region is capped by the 2 GiB initrd_addr_max of Debian's kernels. */
	CHECK_INT_EQ(boot_initrd_place(20 * MIB, 0x7fffffff, GUEST_MEMORY_GAP_START, 32 * MIB,
				       &addr), 0);
	CHECK(addr + 20 * MIB <= 0x80000000ULL);
	/* Does not fit above the kernel: refused, not overlapped. */
	CHECK_INT_EQ(boot_initrd_place(250 * MIB, 0x7fffffff, 256 * MIB, 32 * MIB, &addr), -ENOMEM);
	CHECK_INT_EQ(boot_initrd_place(0, 0x7fffffff, 256 * MIB, 32 * MIB, &addr), -ENOMEM);
}

static void test_initramfs_min_memory(void)
{
	uint8_t gz[64] = { 0x1f, 0x8b, 0x08 };
	uint32_t isize = 100 * MIB;
	uint8_t cpio[64] = "070701";
	uint8_t other[64] = { 0x28, 0xb5, 0x2f, 0xfd };

	memcpy(gz + sizeof(gz) - 4, &isize, sizeof(isize));
	CHECK_INT_EQ(boot_initramfs_min_memory(gz, sizeof(gz)), sizeof(gz) + 100 * MIB + 208 * MIB);
	CHECK_INT_EQ(boot_initramfs_min_memory(cpio, sizeof(cpio)), 2 * sizeof(cpio) + 208 * MIB);
	CHECK_INT_EQ(boot_initramfs_min_memory(other, sizeof(other)), 4 * sizeof(other) + 208 * MIB);
}

static void test_load_linux(void)
{
	struct guest_memory mem;
	struct boot_result result;
	char err[256] = "";
	const char *cmdline = "console=ttyS0 quiet";
	uint8_t initrd[3000];

	memset(initrd, 0x5a, sizeof(initrd));
	make_bzimage();
	CHECK_INT_EQ(guest_memory_plan(&mem, 64, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	struct boot_config cfg = {
		.kernel = image, .kernel_size = sizeof(image),
		.initrd = initrd, .initrd_size = sizeof(initrd),
		.cmdline = cmdline, .acpi_rsdp_addr = 0xe0000,
	};

	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), 0);
	CHECK_INT_EQ(result.kernel_addr, 0x1000000);
	CHECK_INT_EQ(result.entry, 0x1000200);
	CHECK_INT_EQ(result.initrd_addr, 62 * MIB);
	uint8_t *zp = guest_memory_ptr(&mem, BOOT_ZERO_PAGE_ADDR, 4096);

	CHECK(zp != NULL);
	if (zp) {
		CHECK(memcmp(zp + 0x202, "HdrS", 4) == 0);
		CHECK_INT_EQ(zp[0x210], 0xff);
		CHECK_INT_EQ(get32(zp + 0x228), BOOT_CMDLINE_ADDR);
		CHECK_INT_EQ(get32(zp + 0x218), 62 * MIB);
		CHECK_INT_EQ(get32(zp + 0x21c), sizeof(initrd));
		CHECK_INT_EQ(get64(zp + 0x070), 0xe0000);
		CHECK_INT_EQ(zp[0x1e8], 3);
	}
	CHECK_STR_EQ((char *)guest_memory_ptr(&mem, BOOT_CMDLINE_ADDR, 1), cmdline);
	uint8_t *kernel = guest_memory_ptr(&mem, result.kernel_addr, PAYLOAD_BYTES);

	CHECK(kernel && kernel[0] == 0xcc && kernel[PAYLOAD_BYTES - 1] == 0xcc);
	uint8_t *rd = guest_memory_ptr(&mem, result.initrd_addr, sizeof(initrd));

	CHECK(rd && memcmp(rd, initrd, sizeof(initrd)) == 0);
	/* Identity map: PML4[0] -> PDPT, PDPT[0..3] -> PDs, PD entry 1 maps 2 MiB. */
	uint64_t *pml4 = guest_memory_ptr(&mem, 0x9000, 4096);
	uint64_t *pd = guest_memory_ptr(&mem, 0xb000, 4096);

	CHECK(pml4 && (pml4[0] & ~0xfffULL) == 0xa000);
	CHECK(pd && pd[1] == (0x200000ULL | 0x83));
	guest_memory_unmap(&mem);
}

static void test_load_linux_refusals(void)
{
	struct guest_memory mem;
	struct boot_result result;
	char err[256] = "";
	char long_cmdline[3000];

	memset(long_cmdline, 'a', sizeof(long_cmdline) - 1);
	long_cmdline[sizeof(long_cmdline) - 1] = '\0';
	make_bzimage();
	CHECK_INT_EQ(guest_memory_plan(&mem, 64, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	struct boot_config cfg = { .kernel = image, .kernel_size = sizeof(image),
				   .cmdline = long_cmdline };

	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), -E2BIG);
	CHECK(strstr(err, "command line") != NULL);
	/* An initramfs that cannot fit between the kernel and the end of RAM. */
	static uint8_t big_initrd[60 * 1024 * 1024];

	cfg.cmdline = "x";
	cfg.initrd = big_initrd;
	cfg.initrd_size = sizeof(big_initrd);
	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), -ENOMEM);
	CHECK(strstr(err, "more memory") != NULL);
	guest_memory_unmap(&mem);
}

static void test_sregs(void)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;

	memset(&sregs, 0, sizeof(sregs));
	boot_setup_sregs(&sregs);
	boot_setup_regs(&regs, 0x1000200);
	CHECK_INT_EQ(sregs.cs.selector, 0x10);
	CHECK_INT_EQ(sregs.cs.l, 1);
	CHECK_INT_EQ(sregs.ds.selector, 0x18);
	CHECK_INT_EQ(sregs.cr3, 0x9000);
	CHECK(sregs.cr0 & 0x80000001ULL);
	CHECK(sregs.efer & 0x500ULL);
	CHECK_INT_EQ(regs.rip, 0x1000200);
	CHECK_INT_EQ(regs.rsi, BOOT_ZERO_PAGE_ADDR);
}

#define ELF_LOAD_ADDR 0x1000000ULL
#define ELF_FILESZ 0x3000
#define ELF_MEMSZ 0x5000
#define ELF_DATA_OFFSET 0x1000

static uint8_t elf_image[ELF_DATA_OFFSET + ELF_FILESZ];

static void make_elf(uint64_t paddr, uint64_t entry)
{
	Elf64_Ehdr eh = { 0 };
	Elf64_Phdr ph = { 0 };

	memset(elf_image, 0, sizeof(elf_image));
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_type = ET_EXEC;
	eh.e_machine = EM_X86_64;
	eh.e_entry = entry;
	eh.e_phoff = sizeof(eh);
	eh.e_phentsize = sizeof(ph);
	eh.e_phnum = 1;
	ph.p_type = PT_LOAD;
	ph.p_offset = ELF_DATA_OFFSET;
	ph.p_paddr = paddr;
	ph.p_filesz = ELF_FILESZ;
	ph.p_memsz = ELF_MEMSZ;
	memcpy(elf_image, &eh, sizeof(eh));
	memcpy(elf_image + sizeof(eh), &ph, sizeof(ph));
	memset(elf_image + ELF_DATA_OFFSET, 0x90, ELF_FILESZ);
}

static void test_load_elf(void)
{
	struct guest_memory mem;
	struct boot_result result;
	char err[256] = "";
	uint8_t initrd[100] = { 1 };

	make_elf(ELF_LOAD_ADDR, ELF_LOAD_ADDR + 0x10);
	CHECK(boot_is_elf(elf_image, sizeof(elf_image)));
	CHECK_INT_EQ(guest_memory_plan(&mem, 64, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	uint8_t *bss = guest_memory_ptr(&mem, ELF_LOAD_ADDR + ELF_FILESZ, ELF_MEMSZ - ELF_FILESZ);

	if (bss)
		memset(bss, 0x77, ELF_MEMSZ - ELF_FILESZ); /* must be cleared by the loader */
	struct boot_config cfg = { .kernel = elf_image, .kernel_size = sizeof(elf_image),
				   .initrd = initrd, .initrd_size = sizeof(initrd),
				   .cmdline = "console=ttyS0" };

	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), 0);
	CHECK_INT_EQ(result.entry, ELF_LOAD_ADDR + 0x10);
	CHECK_INT_EQ(result.kernel_addr, ELF_LOAD_ADDR);
	uint8_t *text = guest_memory_ptr(&mem, ELF_LOAD_ADDR, ELF_MEMSZ);

	CHECK(text && text[0] == 0x90 && text[ELF_FILESZ - 1] == 0x90);
	CHECK(text && text[ELF_FILESZ] == 0 && text[ELF_MEMSZ - 1] == 0);
	uint8_t *zp = guest_memory_ptr(&mem, BOOT_ZERO_PAGE_ADDR, 4096);

	CHECK(zp && memcmp(zp + 0x202, "HdrS", 4) == 0);
	CHECK(zp && zp[0x206] == 0x0f && zp[0x207] == 0x02);
	CHECK(zp && get32(zp + 0x218) == 62 * MIB);
	guest_memory_unmap(&mem);
}

static void test_load_elf_refusals(void)
{
	struct guest_memory mem;
	struct boot_result result;
	char err[256] = "";
	struct boot_config cfg = { .kernel = elf_image, .kernel_size = sizeof(elf_image),
				   .cmdline = "x" };

	CHECK_INT_EQ(guest_memory_plan(&mem, 64, 0, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_memory_map(&mem), 0);
	make_elf(ELF_LOAD_ADDR, ELF_LOAD_ADDR + ELF_MEMSZ); /* entry past the segment */
	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), -ENOEXEC);
	make_elf(128 * MIB, 128 * MIB); /* beyond 64 MiB of RAM */
	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), -ENOMEM);
	CHECK(strstr(err, "more memory") != NULL);
	make_elf(0x7000, 0x7000); /* would overwrite the zero page */
	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), -ENOMEM);
	make_elf(ELF_LOAD_ADDR, ELF_LOAD_ADDR);
	cfg.kernel_size = ELF_DATA_OFFSET + 16; /* segment data cut off */
	CHECK_INT_EQ(boot_load_linux(&mem, &cfg, &result, err, sizeof(err)), -EINVAL);
	guest_memory_unmap(&mem);
}

/* A bzImage whose payload is the given bytes. */
static size_t make_bzimage_with_payload(uint8_t *out, size_t cap, const uint8_t *payload,
					size_t len)
{
	make_bzimage();
	memcpy(out, image, SETUP_BYTES);
	memcpy(out + SETUP_BYTES, payload, len);
	uint32_t offset = 0, length = (uint32_t)len, init = (uint32_t)(len + INIT_SIZE);

	memcpy(out + 0x248, &offset, 4);
	memcpy(out + 0x24c, &length, 4);
	memcpy(out + 0x260, &init, 4);
	return SETUP_BYTES + len <= cap ? SETUP_BYTES + len : 0;
}

static void test_vmlinux_extract(void)
{
	static uint8_t xz[16384], bz[32768];
	size_t xz_len = 0, bz_len;
	uint8_t *elf = NULL;
	size_t elf_len = 0;
	char err[256] = "";

	make_elf(ELF_LOAD_ADDR, ELF_LOAD_ADDR);
	CHECK_INT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC32, NULL, elf_image,
					     sizeof(elf_image), xz, &xz_len, sizeof(xz)), LZMA_OK);
	bz_len = make_bzimage_with_payload(bz, sizeof(bz), xz, xz_len);
	CHECK(bz_len > 0);
	CHECK_INT_EQ(vmlinux_extract(bz, bz_len, &elf, &elf_len, err, sizeof(err)), 0);
	CHECK_INT_EQ(elf_len, sizeof(elf_image));
	CHECK(elf && memcmp(elf, elf_image, sizeof(elf_image)) == 0);
	free(elf);
	elf = NULL;

	/* Corrupt XZ data. */
	xz[xz_len / 2] ^= 0xff;
	bz_len = make_bzimage_with_payload(bz, sizeof(bz), xz, xz_len);
	CHECK_INT_EQ(vmlinux_extract(bz, bz_len, &elf, &elf_len, err, sizeof(err)), -EINVAL);
	CHECK(elf == NULL);
	/* A gzip payload is refused with a way out. */
	const uint8_t gz[16] = { 0x1f, 0x8b, 0x08 };

	bz_len = make_bzimage_with_payload(bz, sizeof(bz), gz, sizeof(gz));
	CHECK_INT_EQ(vmlinux_extract(bz, bz_len, &elf, &elf_len, err, sizeof(err)), -ENOEXEC);
	CHECK(strstr(err, "not XZ") != NULL);
	/* Not a bzImage at all. */
	CHECK_INT_EQ(vmlinux_extract(elf_image, sizeof(elf_image), &elf, &elf_len, err,
				     sizeof(err)), -ENOEXEC);
}

/* Writes a bzImage of elf_image to path with the given mtime (the cache keys on it). */
static void write_kernel(const char *path, time_t mtime)
{
	static uint8_t xz[16384], bz[32768];
	size_t xz_len = 0, bz_len;
	struct timespec times[2] = { { .tv_sec = mtime }, { .tv_sec = mtime } };
	FILE *f;

	make_elf(ELF_LOAD_ADDR, ELF_LOAD_ADDR);
	CHECK_INT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC32, NULL, elf_image,
					     sizeof(elf_image), xz, &xz_len, sizeof(xz)), LZMA_OK);
	bz_len = make_bzimage_with_payload(bz, sizeof(bz), xz, xz_len);
	f = fopen(path, "wb");
	CHECK(f && fwrite(bz, 1, bz_len, f) == bz_len);
	if (f)
		fclose(f);
	CHECK_INT_EQ(utimensat(AT_FDCWD, path, times, 0), 0);
}

static int count_cache_entries(const char *dir)
{
	char cmd[PATH_MAX + 64];
	FILE *p;
	int count = -1;

	snprintf(cmd, sizeof(cmd), "ls '%s' | grep -c '^vmlinux-'", dir);
	p = popen(cmd, "r");
	if (p && fscanf(p, "%d", &count) != 1)
		count = -1;
	if (p)
		pclose(p);
	return count;
}

/* The cache keeps the four most recently used kernels: a hit counts as a use. */
static void test_vmlinux_cache_keeps_recent(void)
{
	char dir[] = "/tmp/voidbox-vmlinux-cache-XXXXXX";
	char kernels[5][PATH_MAX], cached[5][PATH_MAX], cache_dir[PATH_MAX + 8], err[256];
	time_t now = time(NULL);

	CHECK(mkdtemp(dir) != NULL);
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", dir);
	for (int i = 0; i < 4; i++) {
		struct timespec used[2] = { { .tv_sec = now - 100 + i }, { .tv_sec = now - 100 + i } };

		snprintf(kernels[i], sizeof(kernels[i]), "%s/bzImage-%d", dir, i);
		write_kernel(kernels[i], now - 1000 + i);
		CHECK_INT_EQ(vmlinux_cache_prepare(cache_dir, kernels[i], cached[i],
						   sizeof(cached[i]), err, sizeof(err)), 0);
		utimensat(AT_FDCWD, cached[i], used, 0);
	}
	CHECK_INT_EQ(count_cache_entries(cache_dir), 4);
	/* kernel 0 is used again, so kernel 1 is now the least recently used */
	CHECK_INT_EQ(vmlinux_cache_prepare(cache_dir, kernels[0], cached[0], sizeof(cached[0]),
					   err, sizeof(err)), 0);
	snprintf(kernels[4], sizeof(kernels[4]), "%s/bzImage-4", dir);
	write_kernel(kernels[4], now - 500);
	CHECK_INT_EQ(vmlinux_cache_prepare(cache_dir, kernels[4], cached[4], sizeof(cached[4]),
					   err, sizeof(err)), 0);
	CHECK_INT_EQ(count_cache_entries(cache_dir), 4);
	CHECK(access(cached[0], R_OK) == 0);
	CHECK(access(cached[1], F_OK) != 0);
	CHECK(access(cached[2], R_OK) == 0 && access(cached[3], R_OK) == 0);
	CHECK(access(cached[4], R_OK) == 0);
	snprintf(cache_dir, sizeof(cache_dir), "rm -rf '%s'", dir);
	CHECK_INT_EQ(system(cache_dir), 0);
}

int main(void)
{
	RUN_TEST(test_load_elf);
	RUN_TEST(test_vmlinux_cache_keeps_recent);
	RUN_TEST(test_load_elf_refusals);
	RUN_TEST(test_vmlinux_extract);
	RUN_TEST(test_bzimage_valid);
	RUN_TEST(test_bzimage_refusals);
	RUN_TEST(test_e820_small);
	RUN_TEST(test_e820_high);
	RUN_TEST(test_initrd_placement);
	RUN_TEST(test_initramfs_min_memory);
	RUN_TEST(test_load_linux);
	RUN_TEST(test_load_linux_refusals);
	RUN_TEST(test_sregs);
	return harness_finish();
}
