/*
 * depends= parsing and module ordering on synthetic ELF modules (built here: an ELF64 header,
 * a section-name table and a .modinfo section), plus malformed images the parser must refuse.
 * A separate meson test (store_kmod_real_modules, suite 'modules') orders the virtio/vsock
 * stack from a real Debian module tree named by VOIDBOX_TEST_MODULES_DIR; .ci/run unpacks the
 * kernel package for it after the guest image stage, and without the variable it skips.
 */
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "store/kmod_deps.h"

#define TEST_ELF_MAX 4096
#define TEST_MODULES_DIR_ENV "VOIDBOX_TEST_MODULES_DIR"
#define SHSTRTAB_CONTENT "\0.shstrtab\0.modinfo\0"
#define SHSTRTAB_NAME_OFFSET 1
#define MODINFO_NAME_OFFSET 11

/* Builds a minimal relocatable ELF64 whose .modinfo holds `modinfo` (len bytes). */
static size_t build_module_elf(unsigned char *out, const char *modinfo, size_t len)
{
	Elf64_Ehdr *ehdr = (Elf64_Ehdr *)out;
	size_t strtab_off = sizeof(*ehdr), strtab_len = sizeof(SHSTRTAB_CONTENT);
	size_t modinfo_off = strtab_off + strtab_len;
	size_t shoff = (modinfo_off + len + 7) & ~(size_t)7;
	Elf64_Shdr *sections = (Elf64_Shdr *)(out + shoff);

	memset(out, 0, TEST_ELF_MAX);
	memcpy(ehdr->e_ident, ELFMAG, SELFMAG);
	ehdr->e_ident[EI_CLASS] = ELFCLASS64;
	ehdr->e_ident[EI_DATA] = ELFDATA2LSB;
	ehdr->e_ident[EI_VERSION] = EV_CURRENT;
	ehdr->e_type = ET_REL;
	ehdr->e_machine = EM_X86_64;
	ehdr->e_version = EV_CURRENT;
	ehdr->e_ehsize = sizeof(*ehdr);
	ehdr->e_shentsize = sizeof(Elf64_Shdr);
	ehdr->e_shnum = 3;
	ehdr->e_shstrndx = 1;
	ehdr->e_shoff = shoff;
	memcpy(out + strtab_off, SHSTRTAB_CONTENT, strtab_len);
	memcpy(out + modinfo_off, modinfo, len);
	sections[1].sh_name = SHSTRTAB_NAME_OFFSET;
	sections[1].sh_type = SHT_STRTAB;
	sections[1].sh_offset = strtab_off;
	sections[1].sh_size = strtab_len;
	sections[2].sh_name = MODINFO_NAME_OFFSET;
	sections[2].sh_type = SHT_PROGBITS;
	sections[2].sh_offset = modinfo_off;
	sections[2].sh_size = len;
	return shoff + 3 * sizeof(Elf64_Shdr);
}

static void write_module(const char *dir, const char *file, const char *depends)
{
	unsigned char image[TEST_ELF_MAX];
	char modinfo[256], path[PATH_MAX];
	int len = depends ? snprintf(modinfo, sizeof(modinfo), "license=GPL%cdepends=%s%cvermagic=6.1",
				     '\0', depends, '\0')
			  : snprintf(modinfo, sizeof(modinfo), "license=GPL");
	size_t size = build_module_elf(image, modinfo, (size_t)len + 1);
	FILE *out;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	out = fopen(path, "wb");
	CHECK(out && fwrite(image, 1, size, out) == size);
	if (out)
		fclose(out);
}

static void test_modinfo_depends_parsing(void)
{
	static const char with_deps[] = "license=GPL\0depends=virtio,virtio_ring\0name=x";
	static const char empty_deps[] = "depends=\0name=x";
	static const char no_deps[] = "license=GPL\0name=x";
	static const char unterminated[] = { 'd', 'e', 'p', 'e', 'n', 'd', 's', '=', 'a' };
	char out[64];

	CHECK_INT_EQ(kmod_modinfo_find_depends(with_deps, sizeof(with_deps), out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "virtio,virtio_ring");
	CHECK_INT_EQ(kmod_modinfo_find_depends(empty_deps, sizeof(empty_deps), out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "");
	CHECK_INT_EQ(kmod_modinfo_find_depends(no_deps, sizeof(no_deps), out, sizeof(out)), -ENOENT);
	CHECK_INT_EQ(kmod_modinfo_find_depends(unterminated, sizeof(unterminated), out, sizeof(out)),
		     0);
	CHECK_STR_EQ(out, "a");
	CHECK_INT_EQ(kmod_modinfo_find_depends(with_deps, sizeof(with_deps), out, 4),
		     -ENAMETOOLONG);
}

static void test_elf_modinfo_lookup_and_malformed(void)
{
	static const char modinfo[] = "depends=a,b";
	unsigned char image[TEST_ELF_MAX];
	size_t size = build_module_elf(image, modinfo, sizeof(modinfo));
	Elf64_Ehdr *ehdr = (Elf64_Ehdr *)image;
	const char *found = NULL;
	size_t found_len = 0;

	CHECK_INT_EQ(kmod_elf_find_modinfo(image, size, &found, &found_len), 0);
	CHECK_INT_EQ(found_len, sizeof(modinfo));
	CHECK(found && memcmp(found, modinfo, sizeof(modinfo)) == 0);

	CHECK_INT_EQ(kmod_elf_find_modinfo(image, sizeof(Elf64_Ehdr) - 1, &found, &found_len),
		     -ENOEXEC);
	CHECK_INT_EQ(kmod_elf_find_modinfo(image, size - 1, &found, &found_len), -ENOEXEC);
	ehdr->e_shstrndx = 3;
	CHECK_INT_EQ(kmod_elf_find_modinfo(image, size, &found, &found_len), -ENOEXEC);
	ehdr->e_shstrndx = 1;
	ehdr->e_shoff = (Elf64_Off)-8;
	CHECK_INT_EQ(kmod_elf_find_modinfo(image, size, &found, &found_len), -ENOEXEC);
	size = build_module_elf(image, modinfo, sizeof(modinfo));
	((Elf64_Shdr *)(image + ehdr->e_shoff))[2].sh_size = 1u << 30;
	CHECK_INT_EQ(kmod_elf_find_modinfo(image, size, &found, &found_len), -ENOEXEC);
	image[0] = 0;
	CHECK_INT_EQ(kmod_elf_find_modinfo(image, size, &found, &found_len), -ENOEXEC);
}

static void test_module_names(void)
{
	char name[KMOD_NAME_MAX];

	kmod_name_from_file("/lib/modules/x/kernel/arch/x86/kvm/kvm-amd.ko", name, sizeof(name));
	CHECK_STR_EQ(name, "kvm_amd");
	kmod_name_from_file("9pnet_virtio.ko.xz", name, sizeof(name));
	CHECK_STR_EQ(name, "9pnet_virtio");
}

static int builtin_only_crc(const char *name, void *ctx)
{
	return strcmp(name, "crc_builtin") == 0;
}

static ssize_t position_of(const struct kmod_load_order *order, const char *name)
{
	for (size_t i = 0; i < order->count; i++)
		if (strcmp(order->modules[i]->name, name) == 0)
			return (ssize_t)i;
	return -1;
}

static void test_load_order_from_synthetic_tree(void)
{
	char root[] = "/tmp/voidbox-kmod-test-XXXXXX", sub[PATH_MAX], missing[KMOD_NAME_MAX];
	const char *wanted[] = { "top", "kvm_amd", "crc_builtin" };
	const char *wanted_missing[] = { "top", "not_there" };
	const char *wanted_cycle[] = { "loop_a" };
	struct kmod_load_order order;
	struct kmod_index index;
	char cmd[PATH_MAX + 16];

	CHECK(mkdtemp(root) != NULL);
	snprintf(sub, sizeof(sub), "%s/kernel/drivers", root);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s", sub);
	CHECK_INT_EQ(system(cmd), 0);
	/* top -> mid,leaf ; mid -> leaf ; kvm-amd -> kvm,leaf ; unrelated has no depends= */
	write_module(sub, "top.ko", "mid,leaf");
	write_module(sub, "mid.ko", "leaf");
	write_module(root, "leaf.ko", "");
	write_module(sub, "kvm-amd.ko", "kvm,leaf");
	write_module(sub, "kvm.ko", NULL);
	write_module(sub, "unrelated.ko", "");
	write_module(sub, "loop_a.ko", "loop_b");
	write_module(sub, "loop_b.ko", "loop_a");
	write_module(sub, "needs_ghost.ko", "ghost");

	CHECK_INT_EQ(kmod_index_scan(&index, root), 0);
	CHECK_INT_EQ(index.count, 9);
	CHECK(kmod_index_find(&index, "kvm_amd") != NULL);

	CHECK_INT_EQ(kmod_resolve_load_order(&index, wanted, 3, builtin_only_crc, NULL, &order,
					     missing, sizeof(missing)), 0);
	CHECK_INT_EQ(order.count, 5);
	CHECK(position_of(&order, "leaf") < position_of(&order, "mid"));
	CHECK(position_of(&order, "mid") < position_of(&order, "top"));
	CHECK(position_of(&order, "kvm") < position_of(&order, "kvm_amd"));
	CHECK(position_of(&order, "leaf") >= 0 && position_of(&order, "unrelated") < 0);
	kmod_load_order_free(&order);

	CHECK_INT_EQ(kmod_resolve_load_order(&index, wanted_missing, 2, builtin_only_crc, NULL,
					     &order, missing, sizeof(missing)), -ENOENT);
	CHECK_STR_EQ(missing, "not_there");
	CHECK_INT_EQ(kmod_resolve_load_order(&index, (const char *[]){ "needs_ghost" }, 1, NULL,
					     NULL, &order, missing, sizeof(missing)), -ENOENT);
	CHECK_STR_EQ(missing, "ghost");
	CHECK_INT_EQ(kmod_resolve_load_order(&index, wanted_cycle, 1, NULL, NULL, &order, missing,
					     sizeof(missing)), -ELOOP);
	kmod_index_free(&index);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	CHECK_INT_EQ(system(cmd), 0);
}

/* A real module tree: the vsock stack must order after virtio. Separate, in the 'modules'
 * suite: it skips without a tree, and .ci/run gives it one once the guest image stage has
 * fetched the kernel package. */
static void test_real_modules(void)
{
	const char *dir = getenv(TEST_MODULES_DIR_ENV);
	const char *wanted[] = { "vmw_vsock_virtio_transport", "virtio_mmio" };
	char missing[KMOD_NAME_MAX] = "";
	struct kmod_load_order order;
	struct kmod_index index;

	if (!dir || !*dir)
		harness_skip_all(TEST_MODULES_DIR_ENV " is not set: point it at an unpacked "
			       "kernel's lib/modules/RELEASE to order real modules");
	if (access(dir, R_OK) != 0)
		harness_fail_setup(TEST_MODULES_DIR_ENV " names a directory that cannot be read");
	CHECK_INT_EQ(kmod_index_scan(&index, dir), 0);
	CHECK_INT_EQ(kmod_resolve_load_order(&index, wanted, 2, NULL, NULL, &order, missing,
					     sizeof(missing)), 0);
	CHECK(position_of(&order, "virtio_ring") >= 0);
	CHECK(position_of(&order, "vsock") < position_of(&order, "vmw_vsock_virtio_transport"));
	CHECK(position_of(&order, "virtio_ring") < position_of(&order, "virtio_mmio"));
	kmod_load_order_free(&order);
	kmod_index_free(&index);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_modinfo_depends_parsing);
	RUN_TEST(test_elf_modinfo_lookup_and_malformed);
	RUN_TEST(test_module_names);
	RUN_TEST(test_load_order_from_synthetic_tree);
	RUN_SEPARATE_TEST(test_real_modules);
	return harness_finish();
}
