/*
 * Guest images end to end without the network: a fake kernel package (synthetic modules,
 * everything else declared built in) is made with dpkg-deb -b and built into an image under a
 * temporary VOIDBOX_HOME; the initramfs is parsed back and checked (a meson test of its own,
 * store_image_build, which skips where dpkg-deb or busybox is missing). Also: listing,
 * cleaning, name validation, the resolution precedence (flag > env > built image > error) and
 * errors.
 */
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "store/cpio_reader.h"
#include "store/guest_image.h"
#include "store/store_settings.h"

/* test paths live under a short mkdtemp directory; truncation cannot happen here */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define FAKE_RELEASE "9.9.9-voidbox-test"
#define ERR_MAX 512
#define DPKG_DEB_PATH "/usr/bin/dpkg-deb"
#define BUSYBOX_PATH "/bin/busybox"
#define TEST_ARCHIVE_MTIME 1700000000u

static char home[PATH_MAX];

static void run_ok(const char *cmd)
{
	int rc = system(cmd);

	if (rc != 0)
		fprintf(stderr, "  command failed (%d): %s\n", rc, cmd);
	CHECK_INT_EQ(rc, 0);
}

static void write_text(const char *path, const char *text)
{
	FILE *out = fopen(path, "w");

	CHECK(out != NULL);
	if (out) {
		fputs(text, out);
		fclose(out);
	}
}

/* The store's settings as the environment would give them: home, and kernel/initramfs. */
static void use_settings(const char *kernel, const char *initramfs)
{
	const struct store_settings settings = { .voidbox_home = home, .kernel = kernel,
						 .initramfs = initramfs };

	CHECK_INT_EQ(store_settings_set(&settings), 0);
}

/* The smallest ELF .ko the builder accepts: a .modinfo section with depends=. */
static void write_fake_module(const char *path, const char *depends)
{
	static const char strtab[] = "\0.shstrtab\0.modinfo\0";
	unsigned char image[1024] = { 0 };
	Elf64_Ehdr *ehdr = (Elf64_Ehdr *)image;
	char modinfo[128];
	int len = snprintf(modinfo, sizeof(modinfo), "depends=%s", depends) + 1;
	size_t shoff = 256;
	Elf64_Shdr *sections = (Elf64_Shdr *)(image + shoff);
	FILE *out;

	memcpy(ehdr->e_ident, ELFMAG, SELFMAG);
	ehdr->e_ident[EI_CLASS] = ELFCLASS64;
	ehdr->e_ident[EI_DATA] = ELFDATA2LSB;
	ehdr->e_shentsize = sizeof(Elf64_Shdr);
	ehdr->e_shnum = 3;
	ehdr->e_shstrndx = 1;
	ehdr->e_shoff = shoff;
	memcpy(image + 64, strtab, sizeof(strtab));
	memcpy(image + 128, modinfo, (size_t)len);
	sections[1] = (Elf64_Shdr){ .sh_name = 1, .sh_type = SHT_STRTAB, .sh_offset = 64,
				    .sh_size = sizeof(strtab) };
	sections[2] = (Elf64_Shdr){ .sh_name = 11, .sh_type = SHT_PROGBITS, .sh_offset = 128,
				    .sh_size = (Elf64_Xword)len };
	out = fopen(path, "wb");
	CHECK(out && fwrite(image, 1, shoff + 3 * sizeof(Elf64_Shdr), out) > 0);
	if (out)
		fclose(out);
}

/* A kernel package: vmlinuz, two real modules, and the default module set "built in". */
static void make_fake_kernel_deb(const char *root, char *deb, size_t deb_len)
{
	static const char *const builtin[] = {
		"virtio", "virtio_ring", "virtio_mmio", "vsock", "vmw_vsock_virtio_transport_common",
		"netfs", "fscache", "9pnet", "9pnet_virtio", "9p", "failover", "net_failover",
		"virtio_net", "overlay", "virtio_blk", "ext4", "virtio_rng", "crc32c_generic", "fuse",
		"virtiofs",
	};
	char path[PATH_MAX], cmd[3 * PATH_MAX], list[2048] = "";

	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s/pkg/DEBIAN %s/pkg/boot %s/pkg/lib/modules/%s/kernel/net", root,
		 root, root, FAKE_RELEASE);
	run_ok(cmd);
	snprintf(path, sizeof(path), "%s/pkg/DEBIAN/control", root);
	write_text(path, "Package: linux-image-voidbox-test\nVersion: 9.9.9-1\n"
			 "Architecture: all\nMaintainer: voidbox tests <tests@invalid>\n"
			 "Description: fake kernel for the image builder tests\n");
	snprintf(path, sizeof(path), "%s/pkg/boot/vmlinuz-%s", root, FAKE_RELEASE);
	write_text(path, "not really a kernel\n");
	/* vmw_vsock_virtio_transport is a module here, depending on a helper module */
	snprintf(path, sizeof(path), "%s/pkg/lib/modules/%s/kernel/net/vmw_vsock_virtio_transport.ko",
		 root, FAKE_RELEASE);
	write_fake_module(path, "vsock_helper");
	snprintf(path, sizeof(path), "%s/pkg/lib/modules/%s/kernel/net/vsock-helper.ko", root,
		 FAKE_RELEASE);
	write_fake_module(path, "");
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
		strcat(list, "kernel/x/");
		strcat(list, builtin[i]);
		strcat(list, ".ko\n");
	}
	snprintf(path, sizeof(path), "%s/pkg/lib/modules/%s/modules.builtin", root, FAKE_RELEASE);
	write_text(path, list);
	snprintf(deb, deb_len, "%s/fake-kernel.deb", root);
	snprintf(cmd, sizeof(cmd), "dpkg-deb --root-owner-group -Zgzip -b %s/pkg %s >/dev/null",
		 root, deb);
	run_ok(cmd);
}

static void test_build_from_fake_kernel_package(void)
{
	char root[PATH_MAX], deb[PATH_MAX], agent[PATH_MAX], extra[PATH_MAX], cpio[PATH_MAX],
	     err[ERR_MAX] = "", manifest_path[PATH_MAX];
	struct guest_image_extra_file extra_file = { .guest_path = "/usr/local/bin/claude-code",
						     .mode = 0755 };
	struct guest_image_build_options options = { 0 };
	struct cpio_reader_archive *archive = malloc(sizeof(*archive));
	const struct cpio_reader_entry *entry;
	struct guest_image_info *images = NULL;
	struct guest_image_paths paths;
	unsigned char *data;
	size_t len = 0, count = 0;
	const char *why = "";
	char *order;

	if (access(DPKG_DEB_PATH, X_OK) != 0 || access(BUSYBOX_PATH, X_OK) != 0) {
		free(archive);
		harness_skip_all(DPKG_DEB_PATH " or " BUSYBOX_PATH " is missing (apt-get install "
				 "dpkg-dev busybox-static): the image build cannot be tested");
	}
	snprintf(root, sizeof(root), "%s/work", home);
	mkdir(root, 0755);
	make_fake_kernel_deb(root, deb, sizeof(deb));
	snprintf(agent, sizeof(agent), "%s/agent", root);
	write_text(agent, "#!/bin/sh\necho agent\n");
	snprintf(extra, sizeof(extra), "%s/mock", root);
	write_text(extra, "mock claude-code\n");
	extra_file.host_path = extra;

	options.name = "test-flavour";
	options.agent_path = agent;
	options.kernel_deb = deb;
	options.busybox_path = "/bin/busybox";
	options.extra_files = &extra_file;
	options.extra_file_count = 1;
	options.archive_mtime = TEST_ARCHIVE_MTIME;
	CHECK_INT_EQ(guest_image_build(&options, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "  build error: %s\n", err);

	snprintf(cpio, sizeof(cpio), "%s/images/test-flavour/initramfs.cpio", home);
	data = cpio_reader_load(cpio, &len);
	CHECK(data != NULL);
	if (!data) {
		free(archive);
		return;
	}
	CHECK_INT_EQ(cpio_reader_parse(data, len, archive, &why), 0);
	entry = cpio_reader_find(archive, "init");
	CHECK(entry && entry->field[CPIO_FIELD_MODE] == (S_IFREG | 0755) &&
	      entry->data_len == strlen("#!/bin/sh\necho agent\n"));
	/* the build stamps every entry with the mtime it is given ($SOURCE_DATE_EPOCH) */
	CHECK(entry && entry->field[CPIO_FIELD_MTIME] == TEST_ARCHIVE_MTIME);
	entry = cpio_reader_find(archive, "dev/console");
	CHECK(entry && entry->field[CPIO_FIELD_RDEVMAJOR] == 5 &&
	      entry->field[CPIO_FIELD_RDEVMINOR] == 1);
	entry = cpio_reader_find(archive, "usr/local/bin/claude-code");
	CHECK(entry && entry->data_len == strlen("mock claude-code\n"));
	CHECK(cpio_reader_find(archive, "usr/local/bin") != NULL);
	entry = cpio_reader_find(archive, "sbin/ip");
	if (!entry)
		entry = cpio_reader_find(archive, "bin/ip");
	CHECK(entry && entry->data_len == strlen("/bin/busybox"));
	CHECK(cpio_reader_find(archive, "bin/busybox") != NULL);
	CHECK(cpio_reader_find(archive, "lib/modules/vsock_helper.ko") != NULL);
	entry = cpio_reader_find(archive, "lib/modules/modules.order");
	order = entry ? strndup((const char *)entry->data, entry->data_len) : NULL;
	CHECK_STR_EQ(order, "vsock_helper.ko\nvmw_vsock_virtio_transport.ko\n");
	free(order);
	/* sorted, so every parent directory precedes its children */
	for (size_t i = 1; i < archive->count; i++)
		CHECK(strcmp(archive->entries[i - 1].name, archive->entries[i].name) < 0);
	free(data);

	snprintf(manifest_path, sizeof(manifest_path), "%s/images/test-flavour/manifest.json",
		 home);
	CHECK_INT_EQ(access(manifest_path, R_OK), 0);
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 1);
	if (count == 1) {
		CHECK_STR_EQ(images[0].name, "test-flavour");
		CHECK_STR_EQ(images[0].kernel_release, FAKE_RELEASE);
		CHECK(images[0].size_bytes > len);
	}
	free(images);

	/* a rebuild replaces the image in place */
	CHECK_INT_EQ(guest_image_build(&options, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 1);
	free(images);

	/* not the default image: resolution still has nothing to offer */
	use_settings(NULL, NULL);
	CHECK_INT_EQ(guest_image_resolve(NULL, NULL, &paths, err, sizeof(err)), -ENOENT);

	CHECK_INT_EQ(guest_image_clean("test-flavour", err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 0);
	free(images);
	free(archive);
}

static void test_build_errors(void)
{
	struct guest_image_build_options options = { .name = "ok", .agent_path = "/nonexistent" };
	char err[ERR_MAX] = "";

	CHECK_INT_EQ(guest_image_build(&options, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "agent") != NULL);
	options.name = "../escape";
	CHECK_INT_EQ(guest_image_build(&options, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "invalid image name") != NULL);
}

static void make_image_files(const char *name, const char *initramfs_file)
{
	char dir[PATH_MAX], path[PATH_MAX], cmd[PATH_MAX + 16];

	CHECK_INT_EQ(guest_image_dir(name, dir, sizeof(dir)), 0);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s", dir);
	run_ok(cmd);
	snprintf(path, sizeof(path), "%s/vmlinuz", dir);
	write_text(path, "k");
	snprintf(path, sizeof(path), "%s/%s", dir, initramfs_file);
	write_text(path, "i");
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	write_text(path, "{\"built_at\":\"2026-01-01T00:00:00Z\",\"kernel\":{\"release\":\"6.1.0-x\"}}");
}

static void test_resolution_precedence(void)
{
	char err[ERR_MAX] = "", flag_kernel[PATH_MAX], env_initramfs[PATH_MAX], expect[PATH_MAX];
	struct guest_image_paths paths;

	use_settings(NULL, NULL);
	CHECK_INT_EQ(guest_image_clean(NULL, err, sizeof(err)), 0);

	/* nothing anywhere: the error names the command */
	CHECK_INT_EQ(guest_image_resolve(NULL, NULL, &paths, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "no guest image: run `voidbox image build`") != NULL);

	/* the built default image */
	make_image_files(GUEST_IMAGE_DEFAULT_NAME, "initramfs.cpio.gz");
	CHECK_INT_EQ(guest_image_resolve(NULL, NULL, &paths, err, sizeof(err)), 0);
	snprintf(expect, sizeof(expect), "%s/images/default/vmlinuz", home);
	CHECK_STR_EQ(paths.kernel, expect);
	snprintf(expect, sizeof(expect), "%s/images/default/initramfs.cpio.gz", home);
	CHECK_STR_EQ(paths.initramfs, expect);

	/* env beats the image, each file on its own */
	snprintf(env_initramfs, sizeof(env_initramfs), "%s/env-initramfs", home);
	write_text(env_initramfs, "e");
	use_settings(NULL, env_initramfs);
	CHECK_INT_EQ(guest_image_resolve(NULL, NULL, &paths, err, sizeof(err)), 0);
	CHECK_STR_EQ(paths.initramfs, env_initramfs);
	snprintf(expect, sizeof(expect), "%s/images/default/vmlinuz", home);
	CHECK_STR_EQ(paths.kernel, expect);

	/* a flag beats env */
	snprintf(flag_kernel, sizeof(flag_kernel), "%s/flag-kernel", home);
	write_text(flag_kernel, "f");
	use_settings("/nonexistent/env-kernel", env_initramfs);
	CHECK_INT_EQ(guest_image_resolve(flag_kernel, NULL, &paths, err, sizeof(err)), 0);
	CHECK_STR_EQ(paths.kernel, flag_kernel);

	/* a chosen path that does not exist is an error naming its source */
	CHECK_INT_EQ(guest_image_resolve(NULL, NULL, &paths, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, GUEST_IMAGE_ENV_KERNEL) != NULL);
	CHECK_INT_EQ(guest_image_resolve(flag_kernel, "/nonexistent/flag-initramfs", &paths, err,
					 sizeof(err)), -ENOENT);
	CHECK(strstr(err, "--initramfs") != NULL);

	use_settings(NULL, NULL);
	CHECK_INT_EQ(guest_image_clean(NULL, err, sizeof(err)), 0);
}

static void test_list_and_clean(void)
{
	struct guest_image_info *images = NULL;
	char err[ERR_MAX] = "", dir[PATH_MAX];
	size_t count = 0;

	make_image_files("zeta", "initramfs.cpio");
	make_image_files("alpha", "initramfs.cpio");
	snprintf(dir, sizeof(dir), "mkdir -p %s/images/.build-alpha-XXXXXX", home);
	run_ok(dir); /* an interrupted build is not an image */
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 2);
	if (count == 2) {
		CHECK_STR_EQ(images[0].name, "alpha");
		CHECK_STR_EQ(images[1].name, "zeta");
		CHECK_STR_EQ(images[0].kernel_release, "6.1.0-x");
		CHECK_STR_EQ(images[0].built_at, "2026-01-01T00:00:00Z");
		CHECK(images[0].size_bytes > 2);
	}
	free(images);

	CHECK_INT_EQ(guest_image_clean("nope", err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "voidbox image list") != NULL);
	CHECK_INT_EQ(guest_image_clean("../etc", err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(guest_image_clean("zeta", err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 1);
	free(images);
	CHECK_INT_EQ(guest_image_clean(NULL, err, sizeof(err)), 0);
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 0);
	free(images);
}

static void test_home_and_names(void)
{
	char out[PATH_MAX];

	CHECK_INT_EQ(guest_image_home(out, sizeof(out)), 0);
	CHECK_STR_EQ(out, home);
	CHECK_INT_EQ(guest_image_dir("default", out, sizeof(out)), 0);
	CHECK_INT_EQ(guest_image_dir("", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(guest_image_dir("a/b", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(guest_image_dir(".hidden", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(guest_image_dir("claude-test_1.0", out, sizeof(out)), 0);
	CHECK_INT_EQ(guest_image_home(out, 4), -ENAMETOOLONG);
}

int main(int argc, char **argv)
{
	char cmd[PATH_MAX + 16];

	harness_select(argc, argv);
	snprintf(home, sizeof(home), "/tmp/voidbox-image-test-XXXXXX");
	if (!mkdtemp(home))
		harness_fail_setup("cannot create a temporary directory (mkdtemp)");
	use_settings(NULL, NULL);
	log_set_level(LOG_LEVEL_WARN);

	RUN_TEST(test_home_and_names);
	RUN_TEST(test_resolution_precedence);
	RUN_TEST(test_list_and_clean);
	RUN_TEST(test_build_errors);
	RUN_SEPARATE_TEST(test_build_from_fake_kernel_package);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", home);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", home);
	return harness_finish();
}
