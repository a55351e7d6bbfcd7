/*
 * ACPI tables as the guest reads them: follow RSDP -> XSDT -> FADT/MADT -> DSDT through the
 * generated region, check every checksum and the fields Linux depends on, check the AML
 * encoders against hand-computed bytes, and have iasl (acpica-tools) disassemble every table
 * and look for the devices in its output (a meson test of its own, vmm-acpi-iasl, which skips
 * where iasl is not installed; CI installs it through scripts/install-deps).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/acpi.h"
#include "vmm/aml.h"

#define REGION_GPA 0xe0000ULL
#define REGION_SIZE 0x20000
#define VCPUS 3

static uint8_t region[REGION_SIZE];

static const struct acpi_virtio_device devices[] = {
	{ .base = 0xd0000000, .size = 0x200, .gsi = 10 },
	{ .base = 0xd0001000, .size = 0x200, .gsi = 11 },
};

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

static uint8_t sum(const uint8_t *p, size_t len)
{
	uint8_t s = 0;

	for (size_t i = 0; i < len; i++)
		s = (uint8_t)(s + p[i]);
	return s;
}

/* Host pointer for a table's guest address, or NULL when outside the region. */
static uint8_t *table_at(uint64_t gpa)
{
	if (gpa < REGION_GPA || gpa - REGION_GPA + 36 > REGION_SIZE)
		return NULL;
	return region + (gpa - REGION_GPA);
}

static int build(void)
{
	struct acpi_config cfg = { .vcpus = VCPUS, .virtio = devices, .virtio_count = 2 };

	memset(region, 0xee, sizeof(region));
	return acpi_build(&cfg, region, REGION_GPA, REGION_SIZE);
}

static size_t count_occurrences(const uint8_t *hay, size_t len, const char *needle)
{
	size_t n = 0, nlen = strlen(needle);

	for (size_t i = 0; i + nlen <= len; i++)
		if (memcmp(hay + i, needle, nlen) == 0)
			n++;
	return n;
}

static uint8_t *find_table(const char *signature)
{
	uint8_t *xsdt = table_at(get64(region + 24));

	if (!xsdt)
		return NULL;
	uint32_t entries = (get32(xsdt + 4) - 36) / 8;

	for (uint32_t i = 0; i < entries; i++) {
		uint8_t *t = table_at(get64(xsdt + 36 + i * 8));

		if (t && memcmp(t, signature, 4) == 0)
			return t;
	}
	return NULL;
}

static void test_rsdp_and_checksums(void)
{
	CHECK_INT_EQ(build(), 0);
	CHECK(memcmp(region, "RSD PTR ", 8) == 0);
	CHECK_INT_EQ(region[15], 2);
	CHECK_INT_EQ(sum(region, 20), 0);
	CHECK_INT_EQ(sum(region, 36), 0);
	uint8_t *xsdt = table_at(get64(region + 24));

	CHECK(xsdt && memcmp(xsdt, "XSDT", 4) == 0);
	if (!xsdt)
		return;
	CHECK_INT_EQ(sum(xsdt, get32(xsdt + 4)), 0);
	const char *sigs[] = { "FACP", "APIC" };

	for (size_t i = 0; i < 2; i++) {
		uint8_t *t = find_table(sigs[i]);

		CHECK(t != NULL);
		if (t)
			CHECK_INT_EQ(sum(t, get32(t + 4)), 0);
	}
}

static void test_fadt_dsdt(void)
{
	CHECK_INT_EQ(build(), 0);
	uint8_t *fadt = find_table("FACP");

	CHECK(fadt != NULL);
	if (!fadt)
		return;
	CHECK_INT_EQ(get32(fadt + 4), 276);
	CHECK(get32(fadt + 112) & (1U << 20)); /* HW_REDUCED_ACPI */
	CHECK_INT_EQ(fadt[244], 1);	       /* sleep control: system I/O */
	CHECK_INT_EQ(get64(fadt + 248), ACPI_SLEEP_CONTROL_PORT);
	CHECK_INT_EQ(get64(fadt + 260), ACPI_SLEEP_STATUS_PORT);
	CHECK_INT_EQ(get64(fadt + 120), ACPI_RESET_PORT);
	uint8_t *dsdt = table_at(get64(fadt + 140));

	CHECK(dsdt && memcmp(dsdt, "DSDT", 4) == 0);
	CHECK(dsdt && get32(fadt + 40) == get64(fadt + 140));
	if (!dsdt)
		return;
	uint32_t len = get32(dsdt + 4);

	CHECK_INT_EQ(sum(dsdt, len), 0);
	CHECK_INT_EQ(count_occurrences(dsdt, len, "LNRO0005"), 2);
	CHECK_INT_EQ(count_occurrences(dsdt, len, "_S5_"), 1);
	CHECK_INT_EQ(count_occurrences(dsdt, len, "COM1"), 1);
}

static void test_madt(void)
{
	CHECK_INT_EQ(build(), 0);
	uint8_t *madt = find_table("APIC");

	CHECK(madt != NULL);
	if (!madt)
		return;
	uint32_t len = get32(madt + 4);
	int lapics = 0, ioapics = 0;

	CHECK_INT_EQ(get32(madt + 36), ACPI_LAPIC_ADDR);
	for (uint32_t off = 44; off + 2 <= len; off += madt[off + 1]) {
		if (madt[off] == 0) {
			CHECK_INT_EQ(madt[off + 3], lapics); /* APIC id == index */
			lapics++;
		} else if (madt[off] == 1) {
			CHECK_INT_EQ(get32(madt + off + 4), ACPI_IOAPIC_ADDR);
			ioapics++;
		}
		if (madt[off + 1] == 0)
			break;
	}
	CHECK_INT_EQ(lapics, VCPUS);
	CHECK_INT_EQ(ioapics, 1);
}

static void test_build_refusals(void)
{
	struct acpi_config cfg = { .vcpus = 0 };

	CHECK_INT_EQ(acpi_build(&cfg, region, REGION_GPA, REGION_SIZE), -EINVAL);
	cfg.vcpus = 1;
	CHECK_INT_EQ(acpi_build(&cfg, region, REGION_GPA, 64), -ENOSPC);
}

static void test_aml_pkg_length(void)
{
	struct aml aml;

	aml_init(&aml);
	aml_pkg_length(&aml, 0x3e); /* 0x3f with its own byte: one byte */
	CHECK_INT_EQ(aml.len, 1);
	CHECK_INT_EQ(aml.data[0], 0x3f);
	aml_free(&aml);

	aml_init(&aml);
	aml_pkg_length(&aml, 0x3f); /* 0x41 total: two bytes, 0x41 = lead 0x1 | 0x04 << 4 */
	CHECK_INT_EQ(aml.len, 2);
	CHECK_INT_EQ(aml.data[0], 0x41);
	CHECK_INT_EQ(aml.data[1], 0x04);
	aml_free(&aml);

	aml_init(&aml);
	aml_pkg_length(&aml, 0x1000); /* 0x1003 total: three bytes */
	CHECK_INT_EQ(aml.len, 3);
	CHECK_INT_EQ(aml.data[0], 0x83);
	CHECK_INT_EQ(aml.data[1], 0x00);
	CHECK_INT_EQ(aml.data[2], 0x01);
	aml_free(&aml);
}

static void test_aml_integers_and_eisa(void)
{
	struct aml aml;
	uint32_t id = 0;

	aml_init(&aml);
	aml_integer(&aml, 0);
	aml_integer(&aml, 1);
	aml_integer(&aml, 0x20);
	aml_integer(&aml, 0x1234);
	aml_integer(&aml, 0xd0000000);
	const uint8_t expect[] = { 0x00, 0x01, 0x0a, 0x20, 0x0b, 0x34, 0x12,
				   0x0c, 0x00, 0x00, 0x00, 0xd0 };

	CHECK_INT_EQ(aml.len, sizeof(expect));
	CHECK(aml.len == sizeof(expect) && memcmp(aml.data, expect, sizeof(expect)) == 0);
	aml_free(&aml);
	CHECK_INT_EQ(aml_eisa_id("PNP0501", &id), 0);
	CHECK_INT_EQ(id, 0x0105d041);
	CHECK_INT_EQ(aml_eisa_id("PNP05", &id), -EINVAL);
	CHECK_INT_EQ(aml_eisa_id("pnp0501", &id), -EINVAL);
}

static int write_file(const char *path, const uint8_t *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		return -errno;
	size_t n = fwrite(data, 1, len, f);

	fclose(f);
	return n == len ? 0 : -EIO;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	static char text[65536];
	size_t n;

	if (!f)
		return NULL;
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	return text;
}

static int run_iasl(const char *dir, const char *name)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "cd '%s' && iasl -d %s.dat >iasl-%s.log 2>&1", dir, name,
		 name);
	int status = system(cmd);

	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_iasl_disassembly(void)
{
	char dir[] = "/tmp/voidbox-acpi-XXXXXX";
	char path[512];
	const char *names[] = { "facp", "apic", "dsdt" };
	const char *sigs[] = { "FACP", "APIC", "DSDT" };

	if (system("command -v iasl >/dev/null 2>&1") != 0)
		harness_skip_all("iasl is not installed (apt-get install acpica-tools): the tables "
				 "cannot be disassembled");
	CHECK_INT_EQ(build(), 0);
	CHECK(mkdtemp(dir) != NULL);
	uint8_t *tables[3] = { find_table("FACP"), find_table("APIC"), NULL };

	tables[2] = tables[0] ? table_at(get64(tables[0] + 140)) : NULL;
	for (int i = 0; i < 3; i++) {
		CHECK(tables[i] != NULL);
		if (!tables[i])
			continue;
		snprintf(path, sizeof(path), "%s/%s.dat", dir, names[i]);
		CHECK_INT_EQ(write_file(path, tables[i], get32(tables[i] + 4)), 0);
		CHECK_INT_EQ(run_iasl(dir, names[i]), 0);
		snprintf(path, sizeof(path), "%s/%s.dsl", dir, names[i]);
		char *dsl = read_text(path);

		CHECK(dsl != NULL);
		if (!dsl)
			continue;
		CHECK(strstr(dsl, sigs[i]) != NULL);
		CHECK(strstr(dsl, "Invalid") == NULL);
		CHECK(strstr(dsl, "**** ") == NULL);
		if (i == 2) {
			CHECK(strstr(dsl, "\"LNRO0005\"") != NULL);
			CHECK(strstr(dsl, "Memory32Fixed (ReadWrite,") != NULL);
			CHECK(strstr(dsl, "0xD0001000") != NULL);
			CHECK(strstr(dsl, "Interrupt (ResourceConsumer, Level, ActiveHigh, Exclusive") != NULL);
			CHECK(strstr(dsl, "0x0000000B") != NULL);
			CHECK(strstr(dsl, "EisaId (\"PNP0501\")") != NULL);
			CHECK(strstr(dsl, "Name (_S5, Package") != NULL);
		}
		if (i == 0)
			CHECK(strstr(dsl, "Hardware Reduced (V5) : 1") != NULL);
	}
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	CHECK_INT_EQ(system(path), 0);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_rsdp_and_checksums);
	RUN_TEST(test_fadt_dsdt);
	RUN_TEST(test_madt);
	RUN_TEST(test_build_refusals);
	RUN_TEST(test_aml_pkg_length);
	RUN_TEST(test_aml_integers_and_eisa);
	RUN_SEPARATE_TEST(test_iasl_disassembly);
	return harness_finish();
}
