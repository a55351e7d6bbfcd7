/*
 * ACPI table layouts from the ACPI 6.x specification, written field by field at named
 * offsets into a byte region (no packed structs: offsets are what the spec states, and the
 * code reads like the tables in it). Tables are laid out back to back, 16-byte aligned, in
 * the order RSDP, DSDT, FADT, MADT, XSDT, so every pointer is known when it is written.
 */
#include "vmm/acpi.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "vmm/aml.h"

#define ACPI_TABLE_ALIGN 16
#define ACPI_OEM_ID "VOIDBX"
#define ACPI_OEM_TABLE_ID "VOIDBOX "
#define ACPI_CREATOR_ID "VBOX"
#define ACPI_OEM_REVISION 1
#define ACPI_CREATOR_REVISION 1

/* Common table header. */
#define HDR_SIGNATURE 0
#define HDR_LENGTH 4
#define HDR_REVISION 8
#define HDR_CHECKSUM 9
#define HDR_OEM_ID 10
#define HDR_OEM_TABLE_ID 16
#define HDR_OEM_REVISION 24
#define HDR_CREATOR_ID 28
#define HDR_CREATOR_REVISION 32
#define HDR_SIZE 36
#define ACPI_SIGNATURE_LEN 4

/* RSDP (revision 2). */
#define RSDP_SIGNATURE "RSD PTR "
#define RSDP_CHECKSUM 8
#define RSDP_OEM_ID 9
#define RSDP_REVISION 15
#define RSDP_LENGTH 20
#define RSDP_XSDT_ADDR 24
#define RSDP_EXT_CHECKSUM 32
#define RSDP_V1_SIZE 20
#define RSDP_SIZE 36
#define RSDP_REVISION_2 2

/* XSDT. */
#define XSDT_REVISION 1
#define XSDT_ENTRY_SIZE 8
#define XSDT_ENTRIES 2

/* FADT, revision 6.5 layout (276 bytes). */
#define FADT_REVISION 6
#define FADT_MINOR_REVISION 5
#define FADT_SIZE 276
#define FADT_DSDT 40
#define FADT_PM_PROFILE 45
#define FADT_IAPC_BOOT_ARCH 109
#define FADT_FLAGS 112
#define FADT_RESET_REG 116
#define FADT_RESET_VALUE 128
#define FADT_MINOR_VERSION 131
#define FADT_X_DSDT 140
#define FADT_SLEEP_CONTROL_REG 244
#define FADT_SLEEP_STATUS_REG 256
#define FADT_HYPERVISOR_ID 268
#define FADT_PM_PROFILE_UNSPECIFIED 0
#define FADT_BOOT_VGA_NOT_PRESENT (1U << 2)
#define FADT_BOOT_MSI_NOT_SUPPORTED (1U << 3)
#define FADT_BOOT_CMOS_RTC_NOT_PRESENT (1U << 5)
#define FADT_FLAG_WBINVD (1U << 0)
#define FADT_FLAG_RESET_REG_SUP (1U << 10)
#define FADT_FLAG_HW_REDUCED_ACPI (1U << 20)
#define FADT_HYPERVISOR_VENDOR "VOIDBOX"

/* Generic Address Structure. */
#define GAS_SPACE_ID 0
#define GAS_BIT_WIDTH 1
#define GAS_BIT_OFFSET 2
#define GAS_ACCESS_SIZE 3
#define GAS_ADDRESS 4
#define GAS_SPACE_SYSTEM_IO 1
#define GAS_ACCESS_BYTE 1
#define GAS_BYTE_BITS 8

/* MADT. */
#define MADT_REVISION 5
#define MADT_LAPIC_ADDR 36
#define MADT_FLAGS 40
#define MADT_ENTRIES 44
#define MADT_TYPE_LAPIC 0
#define MADT_LAPIC_SIZE 8
#define MADT_LAPIC_ENABLED 1
#define MADT_TYPE_IOAPIC 1
#define MADT_IOAPIC_SIZE 12
#define MADT_IOAPIC_ID 0
#define MADT_ENTRY_TYPE 0
#define MADT_ENTRY_LENGTH 1
#define MADT_LAPIC_UID 2
#define MADT_LAPIC_APIC_ID 3
#define MADT_LAPIC_FLAGS 4
#define MADT_IOAPIC_ID_OFFSET 2
#define MADT_IOAPIC_ADDRESS 4
#define MADT_IOAPIC_GSI_BASE 8

/* DSDT. */
#define DSDT_REVISION 2
#define S5_PACKAGE_ELEMENTS 4
#define ACPI_COM1_HID "PNP0501"
#define ACPI_COM1_PORT 0x3f8
#define ACPI_COM1_PORT_COUNT 8
#define ACPI_COM1_IRQ 4
#define VIRTIO_MMIO_HID "LNRO0005"
#define DSDT_DEVICE_NAME_FMT "V%03u"
#define DSDT_DEVICE_NAME_LEN 5
#define ACPI_DEVICE_NAME_LIMIT 1000

struct acpi_writer {
	uint8_t *region;
	uint64_t gpa;
	size_t size;
	size_t used;
};

static void put16(uint8_t *p, uint16_t v)
{
	memcpy(p, &v, sizeof(v));
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

uint8_t acpi_checksum(const uint8_t *data, size_t len)
{
	uint8_t sum = 0;

	for (size_t i = 0; i < len; i++)
		sum = (uint8_t)(sum + data[i]);
	return (uint8_t)(0 - sum);
}

/* Reserves len bytes, 16-byte aligned; returns the table's guest address or 0 when full. */
static uint8_t *acpi_alloc(struct acpi_writer *w, size_t len, uint64_t *gpa)
{
	size_t start = (w->used + ACPI_TABLE_ALIGN - 1) & ~(size_t)(ACPI_TABLE_ALIGN - 1);

	if (start > w->size || len > w->size - start)
		return NULL;
	w->used = start + len;
	*gpa = w->gpa + start;
	memset(w->region + start, 0, len);
	return w->region + start;
}

static void acpi_header(uint8_t *table, const char *signature, uint32_t length,
			uint8_t revision)
{
	memcpy(table + HDR_SIGNATURE, signature, ACPI_SIGNATURE_LEN);
	put32(table + HDR_LENGTH, length);
	table[HDR_REVISION] = revision;
	memcpy(table + HDR_OEM_ID, ACPI_OEM_ID, strlen(ACPI_OEM_ID));
	memcpy(table + HDR_OEM_TABLE_ID, ACPI_OEM_TABLE_ID, strlen(ACPI_OEM_TABLE_ID));
	put32(table + HDR_OEM_REVISION, ACPI_OEM_REVISION);
	memcpy(table + HDR_CREATOR_ID, ACPI_CREATOR_ID, strlen(ACPI_CREATOR_ID));
	put32(table + HDR_CREATOR_REVISION, ACPI_CREATOR_REVISION);
}

static void acpi_finish(uint8_t *table, uint32_t length)
{
	table[HDR_CHECKSUM] = 0;
	table[HDR_CHECKSUM] = acpi_checksum(table, length);
}

static void acpi_gas_io_byte(uint8_t *gas, uint16_t port)
{
	gas[GAS_SPACE_ID] = GAS_SPACE_SYSTEM_IO;
	gas[GAS_BIT_WIDTH] = GAS_BYTE_BITS;
	gas[GAS_BIT_OFFSET] = 0;
	gas[GAS_ACCESS_SIZE] = GAS_ACCESS_BYTE;
	put64(gas + GAS_ADDRESS, port);
}

static void acpi_dsdt_virtio_device(struct aml *scope, size_t index,
				    const struct acpi_virtio_device *dev)
{
	struct aml body, resources, template;
	char name[DSDT_DEVICE_NAME_LEN];

	aml_init(&body);
	aml_init(&resources);
	aml_init(&template);
	snprintf(name, sizeof(name), DSDT_DEVICE_NAME_FMT, (unsigned int)(index % ACPI_DEVICE_NAME_LIMIT));
	aml_name_string(&body, "_HID", VIRTIO_MMIO_HID);
	aml_name_integer(&body, "_UID", index);
	aml_name_integer(&body, "_CCA", 1);
	aml_resource_memory32_fixed(&resources, (uint32_t)dev->base, dev->size, true);
	aml_resource_interrupt(&resources, dev->gsi, AML_IRQ_LEVEL, AML_IRQ_ACTIVE_HIGH);
	aml_resource_end(&resources);
	aml_buffer(&template, &resources);
	aml_name(&body, "_CRS", &template);
	aml_device(scope, name, &body);
	aml_free(&body);
	aml_free(&resources);
	aml_free(&template);
}

/* COM1 as a PNP0501 device, so Linux maps its IRQ through ACPI (there is no legacy PIC). */
static void acpi_dsdt_com1(struct aml *scope)
{
	struct aml body, resources, template;
	uint32_t hid = 0;

	aml_init(&body);
	aml_init(&resources);
	aml_init(&template);
	if (aml_eisa_id(ACPI_COM1_HID, &hid) < 0)
		body.failed = true;
	aml_name_integer(&body, "_HID", hid);
	aml_name_integer(&body, "_UID", 0);
	aml_resource_io(&resources, ACPI_COM1_PORT, ACPI_COM1_PORT_COUNT);
	aml_resource_irq_edge_high(&resources, ACPI_COM1_IRQ);
	aml_resource_end(&resources);
	aml_buffer(&template, &resources);
	aml_name(&body, "_CRS", &template);
	aml_device(scope, "COM1", &body);
	if (body.failed)
		scope->failed = true;
	aml_free(&body);
	aml_free(&resources);
	aml_free(&template);
}

static int acpi_dsdt_body(const struct acpi_config *cfg, struct aml *dsdt)
{
	struct aml devices, sleep_types, s5;

	aml_init(&devices);
	aml_init(&sleep_types);
	aml_init(&s5);
	acpi_dsdt_com1(&devices);
	for (size_t i = 0; i < cfg->virtio_count; i++)
		acpi_dsdt_virtio_device(&devices, i, &cfg->virtio[i]);
	aml_scope(dsdt, "\\_SB_", &devices);
	/* _S5: SLP_TYPa, SLP_TYPb, two reserved; only SLP_TYPa reaches the sleep register. */
	aml_integer(&sleep_types, ACPI_S5_SLEEP_TYPE);
	aml_integer(&sleep_types, 0);
	aml_integer(&sleep_types, 0);
	aml_integer(&sleep_types, 0);
	aml_package(&s5, S5_PACKAGE_ELEMENTS, &sleep_types);
	aml_name(dsdt, "_S5_", &s5);
	bool failed = devices.failed || sleep_types.failed || s5.failed || dsdt->failed;

	aml_free(&devices);
	aml_free(&sleep_types);
	aml_free(&s5);
	return failed ? -ENOMEM : 0;
}

static int acpi_build_dsdt(struct acpi_writer *w, const struct acpi_config *cfg, uint64_t *gpa)
{
	struct aml body;
	uint8_t *table;
	int rc;

	aml_init(&body);
	rc = acpi_dsdt_body(cfg, &body);
	if (rc < 0)
		goto out;
	table = acpi_alloc(w, HDR_SIZE + body.len, gpa);
	if (!table) {
		rc = -ENOSPC;
		goto out;
	}
	acpi_header(table, "DSDT", (uint32_t)(HDR_SIZE + body.len), DSDT_REVISION);
	memcpy(table + HDR_SIZE, body.data, body.len);
	acpi_finish(table, (uint32_t)(HDR_SIZE + body.len));
out:
	aml_free(&body);
	return rc;
}

static int acpi_build_fadt(struct acpi_writer *w, uint64_t dsdt, uint64_t *gpa)
{
	uint8_t *t = acpi_alloc(w, FADT_SIZE, gpa);

	if (!t)
		return -ENOSPC;
	acpi_header(t, "FACP", FADT_SIZE, FADT_REVISION);
	put32(t + FADT_DSDT, (uint32_t)dsdt);
	put64(t + FADT_X_DSDT, dsdt);
	t[FADT_PM_PROFILE] = FADT_PM_PROFILE_UNSPECIFIED;
	put16(t + FADT_IAPC_BOOT_ARCH, FADT_BOOT_VGA_NOT_PRESENT | FADT_BOOT_MSI_NOT_SUPPORTED |
					       FADT_BOOT_CMOS_RTC_NOT_PRESENT);
	put32(t + FADT_FLAGS, FADT_FLAG_WBINVD | FADT_FLAG_RESET_REG_SUP |
				      FADT_FLAG_HW_REDUCED_ACPI);
	acpi_gas_io_byte(t + FADT_RESET_REG, ACPI_RESET_PORT);
	t[FADT_RESET_VALUE] = ACPI_RESET_VALUE;
	t[FADT_MINOR_VERSION] = FADT_MINOR_REVISION;
	acpi_gas_io_byte(t + FADT_SLEEP_CONTROL_REG, ACPI_SLEEP_CONTROL_PORT);
	acpi_gas_io_byte(t + FADT_SLEEP_STATUS_REG, ACPI_SLEEP_STATUS_PORT);
	memcpy(t + FADT_HYPERVISOR_ID, FADT_HYPERVISOR_VENDOR, strlen(FADT_HYPERVISOR_VENDOR));
	acpi_finish(t, FADT_SIZE);
	return 0;
}

static int acpi_build_madt(struct acpi_writer *w, unsigned int vcpus, uint64_t *gpa)
{
	uint32_t size = MADT_ENTRIES + vcpus * MADT_LAPIC_SIZE + MADT_IOAPIC_SIZE;
	uint8_t *t = acpi_alloc(w, size, gpa);

	if (!t)
		return -ENOSPC;
	acpi_header(t, "APIC", size, MADT_REVISION);
	put32(t + MADT_LAPIC_ADDR, ACPI_LAPIC_ADDR);
	put32(t + MADT_FLAGS, 0);
	uint8_t *entry = t + MADT_ENTRIES;

	for (unsigned int i = 0; i < vcpus; i++, entry += MADT_LAPIC_SIZE) {
		entry[MADT_ENTRY_TYPE] = MADT_TYPE_LAPIC;
		entry[MADT_ENTRY_LENGTH] = MADT_LAPIC_SIZE;
		entry[MADT_LAPIC_UID] = (uint8_t)i;
		entry[MADT_LAPIC_APIC_ID] = (uint8_t)i; /* as CPUID reports it */
		put32(entry + MADT_LAPIC_FLAGS, MADT_LAPIC_ENABLED);
	}
	entry[MADT_ENTRY_TYPE] = MADT_TYPE_IOAPIC;
	entry[MADT_ENTRY_LENGTH] = MADT_IOAPIC_SIZE;
	entry[MADT_IOAPIC_ID_OFFSET] = MADT_IOAPIC_ID;
	put32(entry + MADT_IOAPIC_ADDRESS, ACPI_IOAPIC_ADDR);
	put32(entry + MADT_IOAPIC_GSI_BASE, 0);
	acpi_finish(t, size);
	return 0;
}

static int acpi_build_xsdt(struct acpi_writer *w, const uint64_t *tables, size_t count,
			   uint64_t *gpa)
{
	uint32_t size = (uint32_t)(HDR_SIZE + count * XSDT_ENTRY_SIZE);
	uint8_t *t = acpi_alloc(w, size, gpa);

	if (!t)
		return -ENOSPC;
	acpi_header(t, "XSDT", size, XSDT_REVISION);
	for (size_t i = 0; i < count; i++)
		put64(t + HDR_SIZE + i * XSDT_ENTRY_SIZE, tables[i]);
	acpi_finish(t, size);
	return 0;
}

static void acpi_write_rsdp(uint8_t *rsdp, uint64_t xsdt)
{
	memcpy(rsdp, RSDP_SIGNATURE, strlen(RSDP_SIGNATURE));
	memcpy(rsdp + RSDP_OEM_ID, ACPI_OEM_ID, strlen(ACPI_OEM_ID));
	rsdp[RSDP_REVISION] = RSDP_REVISION_2;
	put32(rsdp + RSDP_LENGTH, RSDP_SIZE);
	put64(rsdp + RSDP_XSDT_ADDR, xsdt);
	rsdp[RSDP_CHECKSUM] = acpi_checksum(rsdp, RSDP_V1_SIZE);
	rsdp[RSDP_EXT_CHECKSUM] = acpi_checksum(rsdp, RSDP_SIZE);
}

int acpi_build(const struct acpi_config *cfg, uint8_t *region, uint64_t region_gpa,
	       size_t region_size)
{
	struct acpi_writer w = { .region = region, .gpa = region_gpa, .size = region_size };
	uint64_t rsdp_gpa, dsdt, tables[XSDT_ENTRIES], xsdt;
	uint8_t *rsdp;
	int rc;

	if (!cfg->vcpus || cfg->vcpus > ACPI_MAX_VCPUS ||
	    cfg->virtio_count > ACPI_MAX_VIRTIO_DEVICES)
		return -EINVAL;
	rsdp = acpi_alloc(&w, RSDP_SIZE, &rsdp_gpa);
	if (!rsdp)
		return -ENOSPC;
	rc = acpi_build_dsdt(&w, cfg, &dsdt);
	if (rc < 0)
		return rc;
	rc = acpi_build_fadt(&w, dsdt, &tables[0]);
	if (rc < 0)
		return rc;
	rc = acpi_build_madt(&w, cfg->vcpus, &tables[1]);
	if (rc < 0)
		return rc;
	rc = acpi_build_xsdt(&w, tables, XSDT_ENTRIES, &xsdt);
	if (rc < 0)
		return rc;
	acpi_write_rsdp(rsdp, xsdt);
	return 0;
}
