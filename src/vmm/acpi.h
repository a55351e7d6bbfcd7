/*
 * Firmware tables for a PCI-less micro-VM: RSDP -> XSDT -> FADT (hardware-reduced, with a
 * sleep control register for poweroff) -> DSDT (virtio-mmio devices as LNRO0005, _S5), plus a
 * MADT with one LAPIC per vCPU and the IOAPIC. Debian's kernels cannot take virtio-mmio
 * devices from the command line, so the DSDT is how the guest finds them.
 */
#ifndef VOIDBOX_VMM_ACPI_H
#define VOIDBOX_VMM_ACPI_H

#include <stddef.h>
#include <stdint.h>

#define ACPI_REGION_ADDR 0xe0000ULL /* BIOS area: the kernel also finds the RSDP by scan */
#define ACPI_REGION_SIZE 0x20000ULL
#define ACPI_MAX_VIRTIO_DEVICES 16
#define ACPI_MAX_VCPUS 254

/* I/O ports of the hardware-reduced sleep and reset registers (one byte each). */
#define ACPI_SLEEP_CONTROL_PORT 0x600
#define ACPI_SLEEP_STATUS_PORT 0x601
#define ACPI_RESET_PORT 0x602
#define ACPI_PM_PORT_COUNT 3
#define ACPI_RESET_VALUE 0x0f
/* Sleep control register: SLP_EN and the SLP_TYP field, and the S5 type the DSDT declares. */
#define ACPI_SLEEP_ENABLE 0x20
#define ACPI_SLEEP_TYPE_SHIFT 2
#define ACPI_SLEEP_TYPE_MASK 0x7
#define ACPI_S5_SLEEP_TYPE 5

#define ACPI_IOAPIC_ADDR 0xfec00000U
#define ACPI_LAPIC_ADDR 0xfee00000U

struct acpi_virtio_device {
	uint64_t base;
	uint32_t size;
	uint32_t gsi;
};

struct acpi_config {
	unsigned int vcpus;
	const struct acpi_virtio_device *virtio;
	size_t virtio_count;
};

/*
 * Writes the tables into region (host memory standing for guest physical region_gpa,
 * region_size bytes). The RSDP is at region_gpa. Returns 0 or -ENOSPC / -ENOMEM / -EINVAL.
 */
int acpi_build(const struct acpi_config *cfg, uint8_t *region, uint64_t region_gpa,
	       size_t region_size);

/* The 8-bit sum that makes a table's bytes add up to zero. */
uint8_t acpi_checksum(const uint8_t *data, size_t len);

#endif
