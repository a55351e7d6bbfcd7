/*
 * The 64-bit Linux boot protocol without firmware: the VMM plays the boot loader. Offsets
 * into the setup header and zero page are named after Documentation/x86/boot.rst; all
 * multi-byte fields are little-endian, like the host, so they are read with memcpy.
 */
#include "vmm/boot.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>

#include "vmm/memory.h"

/* Setup header fields, as file offsets (and zero-page offsets: the header is copied 1:1). */
#define HDR_SETUP_SECTS 0x1f1
#define HDR_BOOT_FLAG 0x1fe
#define HDR_JUMP 0x200
#define HDR_HEADER_END_BASE 0x202 /* the jump at 0x200 skips to 0x202 + its 8-bit offset */
#define HDR_MAGIC 0x202
#define HDR_VERSION 0x206
#define HDR_TYPE_OF_LOADER 0x210
#define HDR_LOADFLAGS 0x211
#define HDR_RAMDISK_IMAGE 0x218
#define HDR_RAMDISK_SIZE 0x21c
#define HDR_CMD_LINE_PTR 0x228
#define HDR_INITRD_ADDR_MAX 0x22c
#define HDR_KERNEL_ALIGNMENT 0x230
#define HDR_XLOADFLAGS 0x236
#define HDR_CMDLINE_SIZE 0x238
#define HDR_PREF_ADDRESS 0x258
#define HDR_INIT_SIZE 0x260
#define HDR_MIN_END 0x264 /* a protocol 2.12 header reaches at least here */

#define BOOT_FLAG_MAGIC 0xaa55
#define HDRS_MAGIC 0x53726448 /* "HdrS" */
#define SECTOR_SIZE 512
#define DEFAULT_SETUP_SECTS 4
#define XLF_KERNEL_64 0x1
#define LOADER_TYPE_UNDEFINED 0xff
#define LOADFLAGS_LOADED_HIGH 0x01
#define ENTRY_64_OFFSET 0x200

/* Zero-page fields outside the setup header. */
#define ZP_ACPI_RSDP_ADDR 0x070
#define ZP_EXT_RAMDISK_IMAGE 0x0c0
#define ZP_EXT_RAMDISK_SIZE 0x0c4
#define ZP_EXT_CMD_LINE_PTR 0x0c8
#define ZP_E820_ENTRIES 0x1e8
#define ZP_E820_TABLE 0x2d0
#define ZERO_PAGE_SIZE 4096

/* Legacy low-memory layout: the EBDA and BIOS area below 1 MiB stay reserved. */
#define EBDA_START 0x9fc00ULL
#define HIGH_MEMORY_START 0x100000ULL

/* Boot page tables: identity map of the first 4 GiB with 2 MiB pages. */
#define BOOT_GDT_ADDR 0x500ULL
#define BOOT_PML4_ADDR 0x9000ULL
#define BOOT_PDPT_ADDR 0xa000ULL
#define BOOT_PD_ADDR 0xb000ULL
#define BOOT_PD_COUNT 4
#define PAGE_SIZE_4K 0x1000ULL
#define PAGE_SIZE_2M 0x200000ULL
#define PT_ENTRIES 512
#define PTE_PRESENT 0x1ULL
#define PTE_WRITABLE 0x2ULL
#define PTE_HUGE 0x80ULL

/* GDT: null, unused, 64-bit code (0x10), flat data (0x18), as the boot protocol expects. */
#define GDT_ENTRY_CODE 2
#define GDT_ENTRY_DATA 3
#define GDT_ENTRIES 4
#define GDT_CODE64 0x00af9b000000ffffULL
#define GDT_DATA 0x00cf93000000ffffULL
#define SELECTOR_SHIFT 3
#define SEG_TYPE_CODE_XRA 0xb
#define SEG_TYPE_DATA_RWA 0x3
#define SEG_LIMIT_4G 0xffffffffU

#define X86_CR0_PE 0x1ULL
#define X86_CR0_ET 0x10ULL
#define X86_CR0_PG 0x80000000ULL
#define X86_CR4_PAE 0x20ULL
#define EFER_LME 0x100ULL
#define EFER_LMA 0x400ULL
#define RFLAGS_RESERVED_ONE 0x2ULL

/* An ELF vmlinux has no setup header: these stand in for the bzImage's. */
#define ELF_SYNTH_PROTOCOL 0x020f
#define ELF_SYNTH_CMDLINE_SIZE 2047
#define ELF_SYNTH_INITRD_ADDR_MAX 0x7fffffffU
#define BOOT_KERNEL_MIN_ADDR HIGH_MEMORY_START /* segments never overwrite boot data */

/* Where the kernel went and what its header allows. */
struct boot_kernel {
	uint64_t load_addr;
	uint64_t entry;
	uint64_t end;
	uint32_t cmdline_size;
	uint32_t initrd_addr_max;
	size_t setup_header_end; /* 0: no bzImage header, synthesize one */
};

/* Initramfs memory estimate. */
#define GZIP_MAGIC0 0x1f
#define GZIP_MAGIC1 0x8b
#define GZIP_ISIZE_BYTES 4
#define CPIO_NEWC_MAGIC "070701"
#define CPIO_MAGIC_LEN 6
#define INITRAMFS_KERNEL_OVERHEAD (208ULL * 1024 * 1024)
#define INITRAMFS_UNKNOWN_RATIO 4

static uint16_t read16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t read32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t read64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void write32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

static void write64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

int bzimage_parse(const uint8_t *image, size_t size, struct bzimage_info *info, char *err,
		  size_t errlen)
{
	memset(info, 0, sizeof(*info));
	if (size < HDR_MIN_END || read16(image + HDR_BOOT_FLAG) != BOOT_FLAG_MAGIC ||
	    read32(image + HDR_MAGIC) != HDRS_MAGIC) {
		snprintf(err, errlen, "kernel is not a bzImage (no HdrS setup header): pass a "
			 "bzImage such as /boot/vmlinuz-*");
		return -ENOEXEC;
	}
	info->protocol = read16(image + HDR_VERSION);
	if (info->protocol < BOOT_MIN_PROTOCOL) {
		snprintf(err, errlen, "kernel boot protocol %u.%02u is older than 2.12: use a "
			 "kernel from Linux 3.8 or later", info->protocol >> 8,
			 info->protocol & 0xff);
		return -ENOEXEC;
	}
	info->xloadflags = read16(image + HDR_XLOADFLAGS);
	if (!(info->xloadflags & XLF_KERNEL_64)) {
		snprintf(err, errlen, "kernel has no 64-bit entry point: use an x86-64 kernel");
		return -ENOEXEC;
	}
	unsigned int setup_sects = image[HDR_SETUP_SECTS] ? image[HDR_SETUP_SECTS] :
							   DEFAULT_SETUP_SECTS;

	info->setup_size = (setup_sects + 1) * SECTOR_SIZE;
	info->setup_header_end = HDR_HEADER_END_BASE + image[HDR_JUMP + 1];
	if (info->setup_header_end < HDR_MIN_END || info->setup_header_end > info->setup_size) {
		snprintf(err, errlen, "kernel setup header is malformed: the file is damaged");
		return -EINVAL;
	}
	if (size <= info->setup_size) {
		snprintf(err, errlen, "kernel file is truncated (%zu bytes, setup alone needs %u): "
			 "the file is damaged", size, info->setup_size);
		return -EINVAL;
	}
	info->kernel_size = size - info->setup_size;
	info->pref_address = read64(image + HDR_PREF_ADDRESS);
	info->init_size = read32(image + HDR_INIT_SIZE);
	info->initrd_addr_max = read32(image + HDR_INITRD_ADDR_MAX);
	info->cmdline_size = read32(image + HDR_CMDLINE_SIZE);
	info->kernel_alignment = read32(image + HDR_KERNEL_ALIGNMENT);
	if (info->init_size < info->kernel_size) {
		snprintf(err, errlen, "kernel is truncated or damaged: init_size %u is below its "
			 "payload of %" PRIu64 " bytes", info->init_size, info->kernel_size);
		return -EINVAL;
	}
	return 0;
}

static size_t e820_add(struct e820_entry *table, size_t count, size_t max, uint64_t addr,
		       uint64_t size, enum e820_type type)
{
	if (count >= max || !size)
		return count;
	table[count] = (struct e820_entry){ .addr = addr, .size = size, .type = type };
	return count + 1;
}

size_t boot_e820_build(const struct guest_memory *mem, struct e820_entry *table, size_t max)
{
	uint64_t low_end = guest_memory_low_end(mem);
	size_t n = 0;

	n = e820_add(table, n, max, 0, EBDA_START, E820_TYPE_RAM);
	n = e820_add(table, n, max, EBDA_START, HIGH_MEMORY_START - EBDA_START,
		     E820_TYPE_RESERVED);
	if (low_end > HIGH_MEMORY_START)
		n = e820_add(table, n, max, HIGH_MEMORY_START, low_end - HIGH_MEMORY_START,
			     E820_TYPE_RAM);
	for (size_t i = 1; i < mem->region_count; i++)
		n = e820_add(table, n, max, mem->regions[i].guest_phys_addr, mem->regions[i].size,
			     E820_TYPE_RAM);
	return n;
}

int boot_initrd_place(uint64_t size, uint64_t initrd_addr_max, uint64_t low_ram_end,
		      uint64_t floor, uint64_t *addr)
{
	uint64_t max_end = low_ram_end - 1;

	if (initrd_addr_max && initrd_addr_max < max_end)
		max_end = initrd_addr_max;
	if (!size || size > max_end + 1)
		return -ENOMEM;
	uint64_t start = (max_end + 1 - size) & ~(BOOT_INITRD_ALIGN - 1);

	if (start < floor)
		return -ENOMEM;
	*addr = start;
	return 0;
}

uint64_t boot_initramfs_min_memory(const uint8_t *data, size_t size)
{
	uint64_t unpacked;

	if (size > GZIP_ISIZE_BYTES && data[0] == GZIP_MAGIC0 && data[1] == GZIP_MAGIC1)
		unpacked = read32(data + size - GZIP_ISIZE_BYTES);
	else if (size >= CPIO_MAGIC_LEN && memcmp(data, CPIO_NEWC_MAGIC, CPIO_MAGIC_LEN) == 0)
		unpacked = size;
	else
		unpacked = (uint64_t)size * (INITRAMFS_UNKNOWN_RATIO - 1);
	return size + unpacked + INITRAMFS_KERNEL_OVERHEAD;
}

static void boot_write_page_tables(uint8_t *low)
{
	uint64_t *pml4 = (uint64_t *)(low + BOOT_PML4_ADDR);
	uint64_t *pdpt = (uint64_t *)(low + BOOT_PDPT_ADDR);

	memset(pml4, 0, PAGE_SIZE_4K);
	memset(pdpt, 0, PAGE_SIZE_4K);
	pml4[0] = BOOT_PDPT_ADDR | PTE_PRESENT | PTE_WRITABLE;
	for (uint64_t d = 0; d < BOOT_PD_COUNT; d++) {
		uint64_t pd_addr = BOOT_PD_ADDR + d * PAGE_SIZE_4K;
		uint64_t *pd = (uint64_t *)(low + pd_addr);

		pdpt[d] = pd_addr | PTE_PRESENT | PTE_WRITABLE;
		for (uint64_t i = 0; i < PT_ENTRIES; i++)
			pd[i] = ((d * PT_ENTRIES + i) * PAGE_SIZE_2M) | PTE_PRESENT |
				PTE_WRITABLE | PTE_HUGE;
	}
}

static void boot_write_gdt(uint8_t *low)
{
	uint64_t gdt[GDT_ENTRIES] = { 0 };

	gdt[GDT_ENTRY_CODE] = GDT_CODE64;
	gdt[GDT_ENTRY_DATA] = GDT_DATA;
	memcpy(low + BOOT_GDT_ADDR, gdt, sizeof(gdt));
}

/* Setup-header fields a loader must provide when the kernel is an ELF without one. */
static void boot_synthesize_header(uint8_t *zp)
{
	uint16_t boot_flag = BOOT_FLAG_MAGIC;
	uint16_t version = ELF_SYNTH_PROTOCOL;

	memcpy(zp + HDR_BOOT_FLAG, &boot_flag, sizeof(boot_flag));
	write32(zp + HDR_MAGIC, HDRS_MAGIC);
	memcpy(zp + HDR_VERSION, &version, sizeof(version));
	write32(zp + HDR_INITRD_ADDR_MAX, ELF_SYNTH_INITRD_ADDR_MAX);
	write32(zp + HDR_KERNEL_ALIGNMENT, (uint32_t)PAGE_SIZE_2M);
	write32(zp + HDR_CMDLINE_SIZE, ELF_SYNTH_CMDLINE_SIZE);
}

static int boot_write_zero_page(struct guest_memory *mem, const struct boot_config *cfg,
				const struct boot_kernel *kernel, uint64_t initrd_addr)
{
	uint8_t *zp = guest_memory_ptr(mem, BOOT_ZERO_PAGE_ADDR, ZERO_PAGE_SIZE);
	struct e820_entry table[BOOT_E820_MAX];
	size_t entries = boot_e820_build(mem, table, BOOT_E820_MAX);

	if (!zp)
		return -EFAULT;
	memset(zp, 0, ZERO_PAGE_SIZE);
	if (kernel->setup_header_end)
		memcpy(zp + HDR_SETUP_SECTS, cfg->kernel + HDR_SETUP_SECTS,
		       kernel->setup_header_end - HDR_SETUP_SECTS);
	else
		boot_synthesize_header(zp);
	zp[HDR_TYPE_OF_LOADER] = LOADER_TYPE_UNDEFINED;
	zp[HDR_LOADFLAGS] |= LOADFLAGS_LOADED_HIGH;
	write32(zp + HDR_CMD_LINE_PTR, (uint32_t)BOOT_CMDLINE_ADDR);
	write32(zp + ZP_EXT_CMD_LINE_PTR, 0);
	write32(zp + HDR_RAMDISK_IMAGE, (uint32_t)initrd_addr);
	write32(zp + ZP_EXT_RAMDISK_IMAGE, (uint32_t)(initrd_addr >> 32));
	write32(zp + HDR_RAMDISK_SIZE, (uint32_t)cfg->initrd_size);
	write32(zp + ZP_EXT_RAMDISK_SIZE, (uint32_t)((uint64_t)cfg->initrd_size >> 32));
	write64(zp + ZP_ACPI_RSDP_ADDR, cfg->acpi_rsdp_addr);
	zp[ZP_E820_ENTRIES] = (uint8_t)entries;
	memcpy(zp + ZP_E820_TABLE, table, entries * sizeof(table[0]));
	return 0;
}

static int boot_copy(struct guest_memory *mem, uint64_t gpa, const void *src, size_t len)
{
	void *dst = guest_memory_ptr(mem, gpa, len);

	if (!dst)
		return -EFAULT;
	memcpy(dst, src, len);
	return 0;
}

static uint64_t boot_kernel_address(const struct bzimage_info *info)
{
	uint64_t align = info->kernel_alignment ? info->kernel_alignment : PAGE_SIZE_2M;
	uint64_t addr = info->pref_address >= BOOT_KERNEL_DEFAULT_ADDR ? info->pref_address :
									 BOOT_KERNEL_DEFAULT_ADDR;

	return (addr + align - 1) & ~(align - 1);
}

static int boot_place_bzimage(struct guest_memory *mem, const struct boot_config *cfg,
			      struct boot_kernel *kernel, char *err, size_t errlen)
{
	struct bzimage_info info;
	int rc = bzimage_parse(cfg->kernel, cfg->kernel_size, &info, err, errlen);

	if (rc < 0)
		return rc;
	kernel->load_addr = boot_kernel_address(&info);
	kernel->entry = kernel->load_addr + ENTRY_64_OFFSET;
	kernel->end = kernel->load_addr + info.init_size;
	kernel->cmdline_size = info.cmdline_size;
	kernel->initrd_addr_max = info.initrd_addr_max;
	kernel->setup_header_end = info.setup_header_end;
	if (kernel->end > guest_memory_low_end(mem)) {
		snprintf(err, errlen, "kernel needs %" PRIu64 " MiB of low memory: give the VM "
			 "more memory", kernel->end / GUEST_MEMORY_MIB + 1);
		return -ENOMEM;
	}
	if (boot_copy(mem, kernel->load_addr, cfg->kernel + info.setup_size, info.kernel_size))
		return -EFAULT;
	return 0;
}

bool boot_is_elf(const uint8_t *image, size_t size)
{
	return size >= SELFMAG && memcmp(image, ELFMAG, SELFMAG) == 0;
}

static int boot_elf_segment(struct guest_memory *mem, const struct boot_config *cfg,
			    const Elf64_Phdr *ph, struct boot_kernel *kernel, char *err,
			    size_t errlen)
{
	uint8_t *dst;

	if (ph->p_filesz > ph->p_memsz || ph->p_offset > cfg->kernel_size ||
	    ph->p_filesz > cfg->kernel_size - ph->p_offset) {
		snprintf(err, errlen, "kernel ELF segment lies outside the file: the file is "
			 "damaged");
		return -EINVAL;
	}
	dst = guest_memory_ptr(mem, ph->p_paddr, ph->p_memsz);
	if (!dst || ph->p_paddr < BOOT_KERNEL_MIN_ADDR) {
		snprintf(err, errlen, "kernel ELF segment at 0x%" PRIx64 " (+%" PRIu64 " bytes) "
			 "does not fit in guest RAM: give the VM more memory",
			 (uint64_t)ph->p_paddr, (uint64_t)ph->p_memsz);
		return -ENOMEM;
	}
	memcpy(dst, cfg->kernel + ph->p_offset, ph->p_filesz);
	memset(dst + ph->p_filesz, 0, ph->p_memsz - ph->p_filesz);
	if (!kernel->load_addr || ph->p_paddr < kernel->load_addr)
		kernel->load_addr = ph->p_paddr;
	if (ph->p_paddr + ph->p_memsz > kernel->end)
		kernel->end = ph->p_paddr + ph->p_memsz;
	return 0;
}

static int boot_place_elf(struct guest_memory *mem, const struct boot_config *cfg,
			  struct boot_kernel *kernel, char *err, size_t errlen)
{
	Elf64_Ehdr eh;
	int rc;

	if (cfg->kernel_size < sizeof(eh))
		goto bad;
	memcpy(&eh, cfg->kernel, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > cfg->kernel_size ||
	    (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > cfg->kernel_size - eh.e_phoff)
		goto bad;
	for (uint16_t i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		memcpy(&ph, cfg->kernel + eh.e_phoff + i * sizeof(ph), sizeof(ph));
		if (ph.p_type != PT_LOAD)
			continue;
		rc = boot_elf_segment(mem, cfg, &ph, kernel, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (!kernel->end || eh.e_entry < kernel->load_addr || eh.e_entry >= kernel->end)
		goto bad;
	kernel->entry = eh.e_entry;
	kernel->cmdline_size = ELF_SYNTH_CMDLINE_SIZE;
	kernel->initrd_addr_max = ELF_SYNTH_INITRD_ADDR_MAX;
	kernel->setup_header_end = 0;
	return 0;
bad:
	snprintf(err, errlen, "kernel is not a loadable x86-64 ELF vmlinux: pass a bzImage or "
		 "an uncompressed vmlinux");
	return -ENOEXEC;
}

int boot_load_linux(struct guest_memory *mem, const struct boot_config *cfg,
		    struct boot_result *result, char *err, size_t errlen)
{
	struct boot_kernel kernel = { 0 };
	uint64_t low_end = guest_memory_low_end(mem);
	size_t cmdline_len = strlen(cfg->cmdline);
	int rc;

	if (boot_is_elf(cfg->kernel, cfg->kernel_size))
		rc = boot_place_elf(mem, cfg, &kernel, err, errlen);
	else
		rc = boot_place_bzimage(mem, cfg, &kernel, err, errlen);
	if (rc < 0)
		return rc;
	if (kernel.cmdline_size && cmdline_len > kernel.cmdline_size) {
		snprintf(err, errlen, "kernel command line is %zu bytes, this kernel accepts %u: "
			 "shorten the extra arguments", cmdline_len, kernel.cmdline_size);
		return -E2BIG;
	}
	result->kernel_addr = kernel.load_addr;
	result->entry = kernel.entry;
	if (boot_copy(mem, BOOT_CMDLINE_ADDR, cfg->cmdline, cmdline_len + 1))
		return -EFAULT;
	result->initrd_addr = 0;
	if (cfg->initrd && cfg->initrd_size) {
		if (boot_initrd_place(cfg->initrd_size, kernel.initrd_addr_max, low_end, kernel.end,
				      &result->initrd_addr) < 0) {
			snprintf(err, errlen, "initramfs of %zu MiB does not fit in guest memory "
				 "below %" PRIu64 " MiB: give the VM more memory",
				 cfg->initrd_size / (size_t)GUEST_MEMORY_MIB,
				 (uint64_t)(low_end / GUEST_MEMORY_MIB));
			return -ENOMEM;
		}
		if (boot_copy(mem, result->initrd_addr, cfg->initrd, cfg->initrd_size))
			return -EFAULT;
	}
	uint8_t *low = guest_memory_ptr(mem, 0, HIGH_MEMORY_START);

	if (!low)
		return -EFAULT;
	boot_write_page_tables(low);
	boot_write_gdt(low);
	return boot_write_zero_page(mem, cfg, &kernel, result->initrd_addr);
}

static void boot_segment(struct kvm_segment *seg, uint16_t index, uint8_t type, bool code)
{
	*seg = (struct kvm_segment){
		.base = 0,
		.limit = SEG_LIMIT_4G,
		.selector = (uint16_t)(index << SELECTOR_SHIFT),
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = code ? 0 : 1,
		.s = 1,
		.l = code ? 1 : 0,
		.g = 1,
	};
}

void boot_setup_sregs(struct kvm_sregs *sregs)
{
	boot_segment(&sregs->cs, GDT_ENTRY_CODE, SEG_TYPE_CODE_XRA, true);
	boot_segment(&sregs->ds, GDT_ENTRY_DATA, SEG_TYPE_DATA_RWA, false);
	sregs->es = sregs->ds;
	sregs->fs = sregs->ds;
	sregs->gs = sregs->ds;
	sregs->ss = sregs->ds;
	sregs->gdt.base = BOOT_GDT_ADDR;
	sregs->gdt.limit = GDT_ENTRIES * sizeof(uint64_t) - 1;
	sregs->idt.base = 0;
	sregs->idt.limit = 0;
	sregs->cr0 = X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
	sregs->cr3 = BOOT_PML4_ADDR;
	sregs->cr4 = X86_CR4_PAE;
	sregs->efer = EFER_LME | EFER_LMA;
}

void boot_setup_regs(struct kvm_regs *regs, uint64_t entry)
{
	memset(regs, 0, sizeof(*regs));
	regs->rip = entry;
	regs->rsi = BOOT_ZERO_PAGE_ADDR;
	regs->rflags = RFLAGS_RESERVED_ONE;
}
