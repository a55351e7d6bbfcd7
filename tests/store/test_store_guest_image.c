/*
 * Guest images end to end without the network: a fake kernel package (synthetic modules,
 * everything else declared built in) is made with dpkg-deb -b and built into an image under a
 * temporary VOIDBOX_HOME; the initramfs is parsed back and checked (a meson test of its own,
 * store_image_build, which skips where dpkg-deb or busybox is missing). Also: listing,
 * cleaning, name validation, the resolution precedence (flag > env > built image > error) and
 * errors. Builds and cleans killed outright (SIGKILL, as Ctrl-C or a timeout ends them, with
 * no cleanup) leave no half-deleted image and nothing the next build or clean does not sweep;
 * a build blocks for that in its first tool, a dpkg-deb of the test's own that sleeps.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
#define TEST_POLL_NS 1000000L
#define TEST_WAIT_POLLS 20000 /* 20 s of 1 ms polls */
/* Enough directories in an image that removing it takes long enough to be caught midway. */
#define TEST_REMOVE_SUBDIRS 20000
#define TEST_CLEAN_KILL_ATTEMPTS 5 /* a loaded machine may let a clean finish first */
#define TEST_STALL_ENV "VOIDBOX_TEST_STALL"
/* The test's dpkg-deb: sleeps where TEST_STALL_ENV is set (the build blocks), else fails. */
#define TEST_FAKE_DPKG_DEB "#!/bin/sh\n[ -n \"$" TEST_STALL_ENV "\" ] && exec sleep 60\nexit 1\n"
#define TEST_BUILD_PREFIX ".build-"
#define TEST_REMOVE_PREFIX ".remove-"

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

/* A flavour's image: used by name, never the default in its place; env still wins. */
static void test_named_resolution(void)
{
	char err[ERR_MAX] = "", expect[PATH_MAX], env_initramfs[PATH_MAX], env_kernel[PATH_MAX];
	struct guest_image_paths paths;

	use_settings(NULL, NULL);
	CHECK_INT_EQ(guest_image_clean(NULL, err, sizeof(err)), 0);
	make_image_files(GUEST_IMAGE_DEFAULT_NAME, "initramfs.cpio");

	/* the default image exists, the flavour's does not: the error names the build command */
	CHECK_INT_EQ(guest_image_resolve_named("claude", NULL, NULL, &paths, err, sizeof(err)),
		     -ENOENT);
	CHECK(strstr(err, "`voidbox image build --flavour claude`") != NULL);

	make_image_files("claude", "initramfs.cpio");
	CHECK_INT_EQ(guest_image_resolve_named("claude", NULL, NULL, &paths, err, sizeof(err)), 0);
	snprintf(expect, sizeof(expect), "%s/images/claude/initramfs.cpio", home);
	CHECK_STR_EQ(paths.initramfs, expect);
	snprintf(expect, sizeof(expect), "%s/images/claude/vmlinuz", home);
	CHECK_STR_EQ(paths.kernel, expect);

	/* NULL is the default image, as guest_image_resolve */
	CHECK_INT_EQ(guest_image_resolve_named(NULL, NULL, NULL, &paths, err, sizeof(err)), 0);
	snprintf(expect, sizeof(expect), "%s/images/default/initramfs.cpio", home);
	CHECK_STR_EQ(paths.initramfs, expect);

	/* an explicit choice (the environment's here) beats the flavour, so test images work */
	snprintf(env_initramfs, sizeof(env_initramfs), "%s/env-initramfs", home);
	snprintf(env_kernel, sizeof(env_kernel), "%s/env-kernel", home);
	write_text(env_initramfs, "e");
	write_text(env_kernel, "k");
	use_settings(env_kernel, env_initramfs);
	CHECK_INT_EQ(guest_image_resolve_named("codex", NULL, NULL, &paths, err, sizeof(err)), 0);
	CHECK_STR_EQ(paths.initramfs, env_initramfs);
	CHECK_STR_EQ(paths.kernel, env_kernel);

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

/* Whether dir holds an entry whose name starts with prefix. */
static bool dir_has(const char *dir, const char *prefix)
{
	DIR *handle = opendir(dir);
	struct dirent *entry;
	bool has = false;

	if (!handle)
		return false;
	while (!has && (entry = readdir(handle)) != NULL)
		has = strncmp(entry->d_name, prefix, strlen(prefix)) == 0;
	closedir(handle);
	return has;
}

/* A build whose dpkg-deb is the test's: it blocks where TEST_STALL_ENV is set, else fails. */
static int build_with_fake_tools(const char *name)
{
	char agent[PATH_MAX], err[ERR_MAX] = "";
	struct guest_image_build_options options = { .name = name, .agent_path = agent,
						     .kernel_deb = "/nonexistent/kernel.deb" };

	snprintf(agent, sizeof(agent), "%s/agent", home);
	write_text(agent, "#!/bin/sh\n");
	return guest_image_build(&options, err, sizeof(err));
}

/* Puts the fake dpkg-deb first in PATH; the old PATH goes into saved. */
static void use_fake_tools(char *saved, size_t saved_len)
{
	char bin[PATH_MAX], tool[PATH_MAX], path[2 * PATH_MAX];
	const char *old = getenv("PATH");

	snprintf(saved, saved_len, "%s", old ? old : "/usr/bin:/bin");
	snprintf(bin, sizeof(bin), "%s/fake-bin", home);
	mkdir(bin, 0755);
	snprintf(tool, sizeof(tool), "%s/dpkg-deb", bin);
	write_text(tool, TEST_FAKE_DPKG_DEB);
	CHECK_INT_EQ(chmod(tool, 0755), 0);
	snprintf(path, sizeof(path), "%s:%s", bin, saved);
	setenv("PATH", path, 1);
}

/* A build in a process group of its own, blocked once its staging directory exists. */
static pid_t start_stalled_build(const char *images_dir)
{
	struct timespec poll = { .tv_nsec = TEST_POLL_NS };
	pid_t pid = fork();

	if (pid < 0)
		harness_fail_setup("cannot fork the build");
	if (pid == 0) {
		setpgid(0, 0);
		setenv(TEST_STALL_ENV, "1", 1);
		_exit(build_with_fake_tools("stalled") == 0 ? 0 : 1);
	}
	setpgid(pid, pid);
	for (int i = 0; i < TEST_WAIT_POLLS && !dir_has(images_dir, TEST_BUILD_PREFIX); i++)
		nanosleep(&poll, NULL);
	return pid;
}

/* SIGKILL to the build and its tool, as Ctrl-C reaches the whole foreground group. */
static void kill_group(pid_t pid)
{
	int status;

	kill(-pid, SIGKILL);
	waitpid(pid, &status, 0);
}

static void test_killed_build_is_swept(void)
{
	char images_dir[PATH_MAX], saved_path[2 * PATH_MAX], err[ERR_MAX] = "";
	pid_t builder;

	use_settings(NULL, NULL);
	use_fake_tools(saved_path, sizeof(saved_path));
	snprintf(images_dir, sizeof(images_dir), "%s/images", home);

	builder = start_stalled_build(images_dir);
	CHECK(dir_has(images_dir, TEST_BUILD_PREFIX));
	/* a build and a clean meanwhile leave the running build's staging directory alone */
	CHECK(build_with_fake_tools("other") < 0);
	CHECK(dir_has(images_dir, TEST_BUILD_PREFIX));
	CHECK_INT_EQ(guest_image_clean(NULL, err, sizeof(err)), 0);
	CHECK(dir_has(images_dir, TEST_BUILD_PREFIX));
	kill_group(builder);
	CHECK(dir_has(images_dir, TEST_BUILD_PREFIX)); /* a killed build cleans up nothing */
	/* the next build removes it, even one that fails */
	CHECK(build_with_fake_tools("other") < 0);
	CHECK(!dir_has(images_dir, TEST_BUILD_PREFIX));

	/* and so does a clean, also one naming an image that does not exist */
	builder = start_stalled_build(images_dir);
	kill_group(builder);
	CHECK(dir_has(images_dir, TEST_BUILD_PREFIX));
	CHECK_INT_EQ(guest_image_clean("nope", err, sizeof(err)), -ENOENT);
	CHECK(!dir_has(images_dir, TEST_BUILD_PREFIX));

	setenv("PATH", saved_path, 1);
}

/*
 * Makes the image "big" (TEST_REMOVE_SUBDIRS directories), cleans it in a child and kills the
 * child as soon as removal shows (the name gone, or a directory under it gone). False when
 * the clean ended on its own before the kill (a machine that did not run this process in
 * time), for the caller to try again.
 */
static bool clean_killed_midway(const char *dir)
{
	char sub[PATH_MAX + 16], err[ERR_MAX] = "";
	struct stat st;
	nlink_t links;
	int status;
	pid_t cleaner, ended = 0;

	make_image_files("big", "initramfs.cpio");
	for (int i = 0; i < TEST_REMOVE_SUBDIRS; i++) {
		snprintf(sub, sizeof(sub), "%s/d%05d", dir, i);
		mkdir(sub, 0755);
	}
	CHECK_INT_EQ(stat(dir, &st), 0);
	links = st.st_nlink;
	cleaner = fork();
	if (cleaner < 0)
		harness_fail_setup("cannot fork the clean");
	if (cleaner == 0)
		_exit(guest_image_clean("big", err, sizeof(err)) == 0 ? 0 : 1);
	while (stat(dir, &st) == 0 && st.st_nlink == links &&
	       (ended = waitpid(cleaner, &status, WNOHANG)) == 0)
		;
	if (ended == 0)
		ended = waitpid(cleaner, &status, WNOHANG);
	if (ended == 0) {
		kill(cleaner, SIGKILL);
		waitpid(cleaner, &status, 0);
		return true;
	}
	return false;
}

static void test_clean_killed_midway_leaves_no_half_image(void)
{
	char images_dir[PATH_MAX], dir[PATH_MAX], err[ERR_MAX] = "";
	struct guest_image_info *images = NULL;
	size_t count = 0;
	bool killed = false;

	use_settings(NULL, NULL);
	snprintf(images_dir, sizeof(images_dir), "%s/images", home);
	CHECK_INT_EQ(guest_image_dir("big", dir, sizeof(dir)), 0);
	for (int attempt = 0; attempt < TEST_CLEAN_KILL_ATTEMPTS && !killed; attempt++) {
		killed = clean_killed_midway(dir);
		if (!killed)
			fprintf(stderr, "  the clean ended before it could be killed; again\n");
	}
	CHECK(killed);
	CHECK(access(dir, F_OK) != 0); /* the image vanished whole, not half-deleted in place */
	CHECK(dir_has(images_dir, TEST_REMOVE_PREFIX)); /* killed midway: its temporary stays */
	CHECK_INT_EQ(guest_image_list(&images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 0);
	free(images);
	/* the next clean sweeps what the killed one left */
	CHECK_INT_EQ(guest_image_clean(NULL, err, sizeof(err)), 0);
	CHECK(!dir_has(images_dir, TEST_REMOVE_PREFIX));
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
	RUN_TEST(test_named_resolution);
	RUN_TEST(test_list_and_clean);
	RUN_TEST(test_build_errors);
	RUN_TEST(test_killed_build_is_swept);
	RUN_TEST(test_clean_killed_midway_leaves_no_half_image);
	RUN_SEPARATE_TEST(test_build_from_fake_kernel_package);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", home);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", home);
	return harness_finish();
}
