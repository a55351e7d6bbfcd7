/*
 * Linux x86 boot: parse a bzImage setup header (or an ELF vmlinux), place kernel, initramfs, command line and
 * zero page in guest RAM, and describe RAM with an e820 table. The arithmetic (header checks,
 * e820, initramfs placement, memory estimate) is exposed separately so it is unit-tested
 * without a VM; boot_load_linux() strings it together.
 */
#ifndef VOIDBOX_VMM_BOOT_H
#define VOIDBOX_VMM_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/guest_memory.h"

#define BOOT_ZERO_PAGE_ADDR 0x7000ULL
#define BOOT_CMDLINE_ADDR 0x20000ULL
#define BOOT_KERNEL_DEFAULT_ADDR 0x1000000ULL /* 16 MiB */
#define BOOT_INITRD_ALIGN 0x200000ULL	     /* 2 MiB */
#define BOOT_MIN_PROTOCOL 0x020c	     /* 2.12: 64-bit entry and xloadflags */
#define BOOT_E820_MAX 128

enum e820_type {
	E820_TYPE_RAM = 1,
	E820_TYPE_RESERVED = 2,
};

struct e820_entry {
	uint64_t addr;
	uint64_t size;
	uint32_t type;
} __attribute__((packed));

struct bzimage_info {
	uint16_t protocol;
	uint16_t xloadflags;
	uint32_t setup_size;	  /* bytes before the protected-mode kernel */
	size_t setup_header_end;  /* file offset where the setup header ends */
	uint64_t kernel_size;	  /* protected-mode kernel bytes in the file */
	uint64_t pref_address;
	uint32_t init_size;	  /* memory the kernel needs at its load address */
	uint32_t initrd_addr_max;
	uint32_t cmdline_size;
	uint32_t kernel_alignment;
};

struct boot_config {
	const uint8_t *kernel;
	size_t kernel_size;
	const uint8_t *initrd; /* may be NULL */
	size_t initrd_size;
	const char *cmdline;
	uint64_t acpi_rsdp_addr; /* 0 = none */
};

struct boot_result {
	uint64_t entry;
	uint64_t kernel_addr;
	uint64_t initrd_addr;
};

/* Returns 0, or -ENOEXEC / -EINVAL with a message. */
int bzimage_parse(const uint8_t *image, size_t size, struct bzimage_info *info, char *err,
		  size_t errlen);
/* Returns the number of entries written. */
size_t boot_e820_build(const struct guest_memory *mem, struct e820_entry *table, size_t max);
/*
 * Highest 2 MiB aligned address for an initramfs of size bytes that ends at or below
 * min(initrd_addr_max, low_ram_end - 1) and starts at or above floor. -ENOMEM if none.
 */
int boot_initrd_place(uint64_t size, uint64_t initrd_addr_max, uint64_t low_ram_end,
		      uint64_t floor, uint64_t *addr);
/*
 * Memory (bytes) the guest needs to unpack this initramfs: compressed + uncompressed + 208
 * MiB. gzip states its uncompressed size (ISIZE trailer); an uncompressed cpio counts twice;
 * other formats are estimated at four times their size.
 */
uint64_t boot_initramfs_min_memory(const uint8_t *data, size_t size);
/* True when the kernel file is an ELF (an uncompressed vmlinux) rather than a bzImage. */
bool boot_is_elf(const uint8_t *image, size_t size);
/*
 * Writes kernel, initramfs, command line, zero page, GDT and page tables into guest RAM.
 * The kernel is a bzImage (entered at its 64-bit entry, decompressing itself) or an ELF
 * vmlinux (segments at their physical addresses, entered at e_entry; no decompression in
 * the guest, and no KASLR, which the bzImage's decompressor would have applied).
 */
int boot_load_linux(struct guest_memory *mem, const struct boot_config *cfg,
		    struct boot_result *result, char *err, size_t errlen);

struct kvm_sregs;
struct kvm_regs;
/* 64-bit boot protocol state for the boot vCPU: long mode, flat segments, RSI = zero page. */
void boot_setup_sregs(struct kvm_sregs *sregs);
void boot_setup_regs(struct kvm_regs *regs, uint64_t entry);

#endif
