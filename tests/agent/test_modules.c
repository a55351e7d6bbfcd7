/*
 * Module ordering from (name, depends) lists shaped like the Debian 6.1 kernels' modules,
 * including the 6.1.0-56 change where virtio depends on virtio_ring, plus .modinfo extraction
 * from synthetic ELF images and the scanner over a temp tree.
 */
#include "modules.h"

#include "harness.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODULE(n, d) { .name = (char *)(n), .depends = (char *)(d) }

static size_t position_of(const struct module_entry *mods, const size_t *order, size_t count,
			  const char *name)
{
	for (size_t i = 0; i < count; i++)
		if (strcmp(mods[order[i]].name, name) == 0)
			return i;
	return (size_t)-1;
}

static bool comes_before(const struct module_entry *mods, const size_t *order, size_t count,
			 const char *first, const char *second)
{
	return position_of(mods, order, count, first) < position_of(mods, order, count, second);
}

static void test_order_debian_61_56(void)
{
	const struct module_entry mods[] = {
		MODULE("9p", "9pnet,fscache,netfs"),
		MODULE("9pnet", ""),
		MODULE("9pnet_virtio", "virtio,9pnet,virtio_ring"),
		MODULE("fscache", "netfs"),
		MODULE("netfs", ""),
		MODULE("virtio", "virtio_ring"),
		MODULE("virtio_mmio", "virtio,virtio_ring"),
		MODULE("virtio_ring", ""),
		MODULE("vmw_vsock_virtio_transport", "vmw_vsock_virtio_transport_common,virtio,virtio_ring,vsock"),
		MODULE("vmw_vsock_virtio_transport_common", "vsock"),
		MODULE("vsock", ""),
	};
	size_t count = sizeof(mods) / sizeof(mods[0]), order[sizeof(mods) / sizeof(mods[0])];

	CHECK_INT_EQ(modules_order(mods, count, order), 0);
	CHECK(comes_before(mods, order, count, "virtio_ring", "virtio"));
	CHECK(comes_before(mods, order, count, "virtio", "virtio_mmio"));
	CHECK(comes_before(mods, order, count, "netfs", "fscache"));
	CHECK(comes_before(mods, order, count, "fscache", "9p"));
	CHECK(comes_before(mods, order, count, "9pnet", "9p"));
	CHECK(comes_before(mods, order, count, "9pnet", "9pnet_virtio"));
	CHECK(comes_before(mods, order, count, "vsock", "vmw_vsock_virtio_transport_common"));
	CHECK(comes_before(mods, order, count, "vmw_vsock_virtio_transport_common",
			   "vmw_vsock_virtio_transport"));
	for (size_t i = 0; i < count; i++)
		CHECK(position_of(mods, order, count, mods[i].name) != (size_t)-1);
}

static bool is_wanted(const struct module_entry *mods, const bool *wanted, size_t count,
		      const char *name)
{
	for (size_t i = 0; i < count; i++)
		if (strcmp(mods[i].name, name) == 0)
			return wanted[i];
	return false;
}

static void test_mark_wanted_vsock_closure_only(void)
{
	const struct module_entry mods[] = {
		MODULE("9p", "9pnet,fscache,netfs"),
		MODULE("9pnet", ""),
		MODULE("ext4", "jbd2,mbcache,crc16"),
		MODULE("jbd2", ""),
		MODULE("virtio", "virtio_ring"),
		MODULE("virtio_mmio", "virtio,virtio_ring"),
		MODULE("virtio_ring", ""),
		MODULE("vmw_vsock_virtio_transport", "vmw_vsock_virtio_transport_common,virtio,virtio_ring,vsock"),
		MODULE("vmw_vsock_virtio_transport_common", "vsock"),
		MODULE("vsock", ""),
	};
	const char *const roots[] = { "virtio_mmio", "vmw-vsock-virtio-transport", "absent", NULL };
	size_t count = sizeof(mods) / sizeof(mods[0]);
	bool wanted[sizeof(mods) / sizeof(mods[0])];

	CHECK_INT_EQ(modules_mark_wanted(mods, count, roots, wanted), 6);
	CHECK(is_wanted(mods, wanted, count, "virtio_ring"));
	CHECK(is_wanted(mods, wanted, count, "vsock"));
	CHECK(is_wanted(mods, wanted, count, "vmw_vsock_virtio_transport_common"));
	CHECK(!is_wanted(mods, wanted, count, "9p"));
	CHECK(!is_wanted(mods, wanted, count, "ext4"));
	CHECK(!is_wanted(mods, wanted, count, "jbd2"));
	/* NULL roots: everything */
	CHECK_INT_EQ(modules_mark_wanted(mods, count, NULL, wanted), count);
}

static void test_mark_wanted_unknown_depends_takes_all(void)
{
	/* a compressed module whose .modinfo could not be read: its needs are unknown */
	const struct module_entry mods[] = {
		MODULE("virtio_mmio", NULL),
		MODULE("virtio", ""),
		MODULE("ext4", ""),
	};
	const char *const roots[] = { "virtio_mmio", NULL };
	bool wanted[3];

	CHECK_INT_EQ(modules_mark_wanted(mods, 3, roots, wanted), 3);
}

static void test_order_previous_abi(void)
{
	/* 6.1.0-50: virtio depends on nothing, virtio_ring on nothing; input order is kept. */
	const struct module_entry mods[] = {
		MODULE("virtio", ""),
		MODULE("virtio_mmio", "virtio,virtio_ring"),
		MODULE("virtio_ring", ""),
	};
	size_t order[3];

	CHECK_INT_EQ(modules_order(mods, 3, order), 0);
	CHECK_INT_EQ(order[0], 0);
	CHECK_INT_EQ(order[1], 2);
	CHECK_INT_EQ(order[2], 1);
}

static void test_order_missing_and_unknown_deps(void)
{
	const struct module_entry mods[] = {
		MODULE("kvm-amd-like", "kvm,ccp"),  /* ccp absent: built in or not shipped */
		MODULE("kvm", "irqbypass"),
		MODULE("irqbypass", NULL),           /* compressed: unknown */
	};
	size_t order[3];

	CHECK_INT_EQ(modules_order(mods, 3, order), 0);
	CHECK(comes_before(mods, order, 3, "irqbypass", "kvm"));
	CHECK(comes_before(mods, order, 3, "kvm", "kvm-amd-like"));
}

static void test_order_dash_underscore(void)
{
	const struct module_entry mods[] = {
		MODULE("kvm_amd", "kvm"),
		MODULE("kvm", "irq-bypass"),
		MODULE("irq_bypass", ""),
	};
	size_t order[3];

	CHECK_INT_EQ(modules_order(mods, 3, order), 0);
	CHECK_INT_EQ(order[0], 2);
	CHECK_INT_EQ(order[1], 1);
	CHECK_INT_EQ(order[2], 0);
}

static void test_order_cycle_terminates(void)
{
	const struct module_entry mods[] = {
		MODULE("a", "b"),
		MODULE("b", "a"),
		MODULE("c", "a"),
	};
	size_t order[3];

	CHECK_INT_EQ(modules_order(mods, 3, order), 0);
	CHECK(position_of(mods, order, 3, "a") != (size_t)-1);
	CHECK(position_of(mods, order, 3, "b") != (size_t)-1);
	CHECK(comes_before(mods, order, 3, "a", "c"));
}

/* Builds a minimal ELF64 with sections: null, .shstrtab, .modinfo. */
static size_t build_elf(uint8_t *buf, size_t size, const char *modinfo, size_t modinfo_len)
{
	static const char shstrtab[] = "\0.shstrtab\0.modinfo\0";
	Elf64_Ehdr *ehdr = (Elf64_Ehdr *)buf;
	size_t strtab_off = sizeof(Elf64_Ehdr);
	size_t modinfo_off = strtab_off + sizeof(shstrtab);
	size_t shoff = (modinfo_off + modinfo_len + 7) & ~(size_t)7;
	Elf64_Shdr *sh = (Elf64_Shdr *)(buf + shoff);
	size_t total = shoff + 3 * sizeof(Elf64_Shdr);

	if (total > size)
		return 0;
	memset(buf, 0, total);
	memcpy(ehdr->e_ident, ELFMAG, SELFMAG);
	ehdr->e_ident[EI_CLASS] = ELFCLASS64;
	ehdr->e_ident[EI_DATA] = ELFDATA2LSB;
	ehdr->e_shoff = shoff;
	ehdr->e_shentsize = sizeof(Elf64_Shdr);
	ehdr->e_shnum = 3;
	ehdr->e_shstrndx = 1;
	memcpy(buf + strtab_off, shstrtab, sizeof(shstrtab));
	memcpy(buf + modinfo_off, modinfo, modinfo_len);
	sh[1].sh_name = 1;
	sh[1].sh_type = SHT_STRTAB;
	sh[1].sh_offset = strtab_off;
	sh[1].sh_size = sizeof(shstrtab);
	sh[2].sh_name = 11;
	sh[2].sh_type = SHT_PROGBITS;
	sh[2].sh_offset = modinfo_off;
	sh[2].sh_size = modinfo_len;
	return total;
}

static const char sample_modinfo[] = "license=GPL\0depends=virtio_ring,virtio\0name=virtio_mmio\0"
				     "vermagic=6.1.0 SMP mod_unload\0";

static void test_modinfo_parse(void)
{
	uint8_t image[1024];
	size_t len = build_elf(image, sizeof(image), sample_modinfo, sizeof(sample_modinfo));
	char *name = NULL, *depends = NULL;

	CHECK(len > 0);
	CHECK_INT_EQ(modinfo_parse(image, len, &name, &depends), 0);
	CHECK_STR_EQ(name, "virtio_mmio");
	CHECK_STR_EQ(depends, "virtio_ring,virtio");
	free(name);
	free(depends);
}

static void test_modinfo_empty_depends(void)
{
	static const char info[] = "depends=\0license=GPL";
	uint8_t image[1024];
	size_t len = build_elf(image, sizeof(image), info, sizeof(info) - 1);
	char *name = NULL, *depends = NULL;

	CHECK_INT_EQ(modinfo_parse(image, len, &name, &depends), 0);
	CHECK(name == NULL);
	CHECK_STR_EQ(depends, "");
	free(depends);
}

static void test_modinfo_rejects_corrupt(void)
{
	uint8_t image[1024];
	size_t len = build_elf(image, sizeof(image), sample_modinfo, sizeof(sample_modinfo));
	char *name, *depends;
	Elf64_Ehdr *ehdr = (Elf64_Ehdr *)image;
	Elf64_Shdr *sh = (Elf64_Shdr *)(image + ehdr->e_shoff);

	CHECK_INT_EQ(modinfo_parse(image, 10, &name, &depends), -ENOEXEC);
	CHECK_INT_EQ(modinfo_parse(image, len - 1, &name, &depends), -ENOEXEC);
	sh[2].sh_size = 1u << 30;
	CHECK_INT_EQ(modinfo_parse(image, len, &name, &depends), -ENOEXEC);
	sh[2].sh_size = sizeof(sample_modinfo);
	ehdr->e_shstrndx = 7;
	CHECK_INT_EQ(modinfo_parse(image, len, &name, &depends), -ENOEXEC);
	ehdr->e_shstrndx = 1;
	ehdr->e_shoff = (Elf64_Off)-8;
	CHECK_INT_EQ(modinfo_parse(image, len, &name, &depends), -ENOEXEC);
	image[0] = 0;
	CHECK_INT_EQ(modinfo_parse(image, len, &name, &depends), -ENOEXEC);
}

static void write_module(const char *dir, const char *file, const char *info, size_t info_len)
{
	uint8_t image[1024];
	size_t len = build_elf(image, sizeof(image), info, info_len);
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, image, len) == (ssize_t)len);
	close(fd);
}

static void test_scan_tree(void)
{
	char root[] = "/tmp/voidbox-modules-XXXXXX", sub[600], deep[700];
	struct module_entry *mods = NULL;
	size_t count = 0, order[4];
	static const char ring[] = "depends=\0name=virtio_ring";
	static const char virtio[] = "depends=virtio_ring\0name=virtio";
	static const char mmio[] = "depends=virtio,virtio_ring\0name=virtio_mmio";

	CHECK(mkdtemp(root) != NULL);
	snprintf(sub, sizeof(sub), "%s/6.1.0-56-amd64", root);
	snprintf(deep, sizeof(deep), "%s/kernel", sub);
	mkdir(sub, 0755);
	mkdir(deep, 0755);
	write_module(deep, "virtio_mmio.ko", mmio, sizeof(mmio));
	write_module(sub, "virtio.ko", virtio, sizeof(virtio));
	write_module(deep, "virtio_ring.ko", ring, sizeof(ring));
	write_module(deep, "notes.txt", ring, sizeof(ring));
	CHECK_INT_EQ(modules_scan(root, &mods, &count), 0);
	CHECK_INT_EQ(count, 3);
	if (count == 3) {
		CHECK_STR_EQ(mods[0].name, "virtio");
		CHECK_STR_EQ(mods[0].depends, "virtio_ring");
		CHECK_INT_EQ(modules_order(mods, count, order), 0);
		CHECK_STR_EQ(mods[order[0]].name, "virtio_ring");
		CHECK_STR_EQ(mods[order[1]].name, "virtio");
		CHECK_STR_EQ(mods[order[2]].name, "virtio_mmio");
	}
	modules_free(mods, count);
	CHECK_INT_EQ(modules_scan("/nonexistent/voidbox", &mods, &count), -ENOENT);
	snprintf(sub, sizeof(sub), "rm -rf '%s'", root);
	CHECK_INT_EQ(system(sub), 0);
}

int main(void)
{
	RUN_TEST(test_order_debian_61_56);
	RUN_TEST(test_order_previous_abi);
	RUN_TEST(test_mark_wanted_vsock_closure_only);
	RUN_TEST(test_mark_wanted_unknown_depends_takes_all);
	RUN_TEST(test_order_missing_and_unknown_deps);
	RUN_TEST(test_order_dash_underscore);
	RUN_TEST(test_order_cycle_terminates);
	RUN_TEST(test_modinfo_parse);
	RUN_TEST(test_modinfo_empty_depends);
	RUN_TEST(test_modinfo_rejects_corrupt);
	RUN_TEST(test_scan_tree);
	return harness_finish();
}
