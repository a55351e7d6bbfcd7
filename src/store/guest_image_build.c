/*
 * Builds a guest image from Debian packages: the generic kernel and its modules, busybox-static
 * with a link per applet, the agent as /init, and any extra files a flavour adds.
 *
 * The work is a straight pipeline (find the kernel package, unpack it, order the modules,
 * collect entries, write the cpio, write the manifest, rename into place) run in a staging
 * directory beside the final one, so a failure anywhere leaves the previous image untouched.
 * The staging directory's name carries the builder's pid: a build killed outright (Ctrl-C,
 * SIGKILL) runs no cleanup, and the next build or clean removes what it left by that pid.
 * Debian's own tools do the package work (apt-cache, apt-get download, dpkg-deb, dpkg-query);
 * they run as child processes with their output sent to stderr, never to our stdout.
 * Initramfs entries are gathered first and sorted by path, so the archive is byte-for-byte
 * reproducible from the same inputs (mtime from SOURCE_DATE_EPOCH, else 0).
 */
#include "store/guest_image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"
#include "common/path.h"
#include "store/cpio_newc.h"
#include "store/guest_image_internal.h"
#include "store/kmod_deps.h"
#include "store/store_fs.h"

#define LOG_MODULE "image"
#define IMAGE_KERNEL_META_PACKAGE "linux-image-amd64"
#define IMAGE_KERNEL_DEPENDS_PREFIX "Depends: linux-image-"
#define IMAGE_BUSYBOX_PACKAGE "busybox-static"
#define IMAGE_BUSYBOX_INSTALLED_PATH "/bin/busybox"
#define IMAGE_BUSYBOX_GUEST_PATH "bin/busybox"
#define IMAGE_BUSYBOX_LINK_TARGET "/bin/busybox"
#define IMAGE_MODULES_DIR "lib/modules"
#define IMAGE_MODULES_ORDER_FILE "lib/modules/modules.order"
#define IMAGE_MODULES_ORDER_LINE_MAX (KMOD_NAME_MAX + sizeof(".ko\n"))
#define IMAGE_AGENT_GUEST_PATH "init"
#define IMAGE_CONSOLE_PATH "dev/console"
#define IMAGE_CONSOLE_MAJOR 5
#define IMAGE_CONSOLE_MINOR 1
#define IMAGE_MODE_DIR 0755
#define IMAGE_MODE_TMP 01777
#define IMAGE_MODE_EXEC 0755
#define IMAGE_MODE_DATA 0644
#define IMAGE_MODE_CONSOLE 0600
#define IMAGE_CAPTURE_MAX (256 * 1024)
#define IMAGE_VERSION_MAX 128
#define IMAGE_SHA256_HEX_LEN 65
#define IMAGE_DIGEST_ALGORITHM "sha256"
#define IMAGE_COPY_CHUNK 65536
#define IMAGE_GZIP_LEVEL 6
#define IMAGE_MANIFEST_FORMAT 1
#define IMAGE_ENTRIES_INITIAL 512
#define IMAGE_TIME_FORMAT "%Y-%m-%dT%H:%M:%SZ"

/* What the agent needs: vsock, entropy, host shares (virtio-fs, else 9p), networking, overlay, disks. */
static const char *const image_default_modules[] = {
	"virtio", "virtio_ring", "virtio_mmio",
	"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport",
	"virtio_rng",
	"netfs", "fscache", "9pnet", "9pnet_virtio", "9p",
	"fuse", "virtiofs",
	"failover", "net_failover", "virtio_net",
	"overlay", "virtio_blk", "ext4",
	/* ext4 asks the crypto API for crc32c at every mount, by an alias nothing here resolves */
	"crc32c_generic",
};

#define IMAGE_DEFAULT_MODULE_COUNT (sizeof(image_default_modules) / sizeof(image_default_modules[0]))

/* Directories every image has, whatever its files need. */
static const struct {
	const char *path;
	mode_t mode;
} image_base_dirs[] = {
	{ "bin", IMAGE_MODE_DIR }, { "dev", IMAGE_MODE_DIR }, { "etc", IMAGE_MODE_DIR },
	{ "lib", IMAGE_MODE_DIR }, { "mnt", IMAGE_MODE_DIR }, { "proc", IMAGE_MODE_DIR },
	{ "root", 0700 }, { "run", IMAGE_MODE_DIR }, { "sbin", IMAGE_MODE_DIR },
	{ "sys", IMAGE_MODE_DIR }, { "tmp", IMAGE_MODE_TMP }, { "usr", IMAGE_MODE_DIR },
	{ "usr/bin", IMAGE_MODE_DIR }, { "usr/sbin", IMAGE_MODE_DIR },
	{ "usr/local", IMAGE_MODE_DIR }, { "usr/local/bin", IMAGE_MODE_DIR },
	{ "var", IMAGE_MODE_DIR },
};

#define IMAGE_BASE_DIR_COUNT (sizeof(image_base_dirs) / sizeof(image_base_dirs[0]))

enum image_entry_kind {
	IMAGE_ENTRY_DIRECTORY,
	IMAGE_ENTRY_FILE,      /* contents from a host file */
	IMAGE_ENTRY_DATA,      /* contents in memory */
	IMAGE_ENTRY_SYMLINK,
	IMAGE_ENTRY_CHAR_DEVICE,
};

struct image_entry {
	char *path;   /* archive path, no leading '/' */
	char *source; /* host path, symlink target, or data */
	size_t data_len;
	enum image_entry_kind kind;
	mode_t mode;
	unsigned int major, minor;
	size_t sequence; /* insertion order: the later of two same-path entries wins */
};

struct image_entries {
	struct image_entry *items;
	size_t count, capacity;
};

struct image_build {
	const struct guest_image_build_options *options;
	const char *name;
	char home[PATH_MAX];
	char final_dir[PATH_MAX];
	char staging_dir[PATH_MAX];
	char unpack_dir[PATH_MAX];
	char deb_cache[PATH_MAX];
	char kernel_package[NAME_MAX];
	char kernel_version[IMAGE_VERSION_MAX];
	char kernel_release[NAME_MAX];
	char kernel_deb[PATH_MAX];
	char busybox_path[PATH_MAX];
	char busybox_version[IMAGE_VERSION_MAX];
	char agent_sha256[IMAGE_SHA256_HEX_LEN];
	struct kmod_index module_index;
	struct kmod_load_order module_order;
	struct image_entries entries;
	size_t applet_count;
	uint32_t archive_entries;
	char *err;
	size_t errlen;
};

/* ---- child processes ------------------------------------------------------------------ */

/* Runs a tool (store_run_tool); with capture, its stdout lands there, NUL-terminated. */
static int image_run_tool(struct image_build *build, const char *const argv[], const char *cwd,
			  char *capture, size_t capture_len)
{
	return store_run_tool(argv, cwd, capture, capture_len, build->err, build->errlen);
}

static void image_trim(char *text)
{
	size_t len = strlen(text);

	while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
		text[--len] = '\0';
}

/* ---- small file helpers ------------------------------------------------------------- */


static int image_copy_file(const char *from, const char *to)
{
	char chunk[IMAGE_COPY_CHUNK];
	int in, out, rc = 0;

	in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, IMAGE_MODE_DATA);
	if (out < 0) {
		rc = -errno;
		close(in);
		return rc;
	}
	for (;;) {
		ssize_t got = read(in, chunk, sizeof(chunk));

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			rc = got < 0 ? -errno : 0;
			break;
		}
		if (write(out, chunk, (size_t)got) != got) {
			rc = -EIO;
			break;
		}
	}
	if (close(out) < 0 && rc == 0)
		rc = -errno;
	close(in);
	return rc;
}

static int image_sha256_file(const char *path, char hex[IMAGE_SHA256_HEX_LEN])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int digest_len = 0;
	int rc = store_file_digest(path, IMAGE_DIGEST_ALGORITHM, digest, &digest_len);

	for (unsigned int i = 0; rc == 0 && i < digest_len; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	return rc;
}

static uint64_t image_file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- entries -------------------------------------------------------------------------- */

static int image_entries_add(struct image_entries *entries, enum image_entry_kind kind,
			     const char *path, mode_t mode, const char *source, size_t data_len)
{
	struct image_entry *entry;

	if (entries->count == entries->capacity) {
		size_t capacity = entries->capacity ? entries->capacity * 2 : IMAGE_ENTRIES_INITIAL;
		struct image_entry *grown = realloc(entries->items, capacity * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		entries->items = grown;
		entries->capacity = capacity;
	}
	entry = &entries->items[entries->count];
	memset(entry, 0, sizeof(*entry));
	entry->kind = kind;
	entry->mode = mode;
	entry->sequence = entries->count;
	entry->path = strdup(path);
	if (source) {
		entry->source = kind == IMAGE_ENTRY_DATA ? malloc(data_len + 1) : strdup(source);
		if (entry->source && kind == IMAGE_ENTRY_DATA) {
			memcpy(entry->source, source, data_len);
			entry->source[data_len] = '\0';
		}
	}
	entry->data_len = data_len;
	if (!entry->path || (source && !entry->source)) {
		free(entry->path);
		free(entry->source);
		return -ENOMEM;
	}
	entries->count++;
	return 0;
}

/* Adds every missing parent directory of path ("a/b/c" -> "a", "a/b"). */
static int image_entries_add_parents(struct image_entries *entries, const char *path)
{
	char buf[PATH_MAX];
	int rc;

	if (guest_image_format(buf, sizeof(buf), "%s", path) < 0)
		return -ENAMETOOLONG;
	for (char *slash = strchr(buf, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		rc = image_entries_add(entries, IMAGE_ENTRY_DIRECTORY, buf, IMAGE_MODE_DIR, NULL, 0);
		*slash = '/';
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void image_entries_free(struct image_entries *entries)
{
	for (size_t i = 0; i < entries->count; i++) {
		free(entries->items[i].path);
		free(entries->items[i].source);
	}
	free(entries->items);
	memset(entries, 0, sizeof(*entries));
}

static int image_entry_compare(const void *a, const void *b)
{
	const struct image_entry *left = a, *right = b;
	int by_path = strcmp(left->path, right->path);

	if (by_path)
		return by_path;
	return left->sequence < right->sequence ? -1 : left->sequence > right->sequence;
}

/* ---- pipeline steps ------------------------------------------------------------------- */

static int image_prepare_dirs(struct image_build *build)
{
	char images_dir[PATH_MAX];
	int rc;

	rc = guest_image_home(build->home, sizeof(build->home));
	if (rc < 0) {
		store_error(build->err, build->errlen,
			    "cannot find the voidbox home: set %s or HOME",
			    GUEST_IMAGE_ENV_HOME);
		return rc;
	}
	guest_image_format(images_dir, sizeof(images_dir), "%s/%s", build->home, GUEST_IMAGE_IMAGES_DIR);
	guest_image_format(build->deb_cache, sizeof(build->deb_cache), "%s/%s", build->home,
		 GUEST_IMAGE_DEB_CACHE_DIR);
	rc = path_mkdirs(images_dir, IMAGE_MODE_DIR);
	if (rc == 0)
		rc = path_mkdirs(build->deb_cache, IMAGE_MODE_DIR);
	if (rc < 0) {
		store_error(build->err, build->errlen, "cannot create %s: %s",
			    images_dir, strerror(-rc));
		return rc;
	}
	guest_image_dir(build->name, build->final_dir, sizeof(build->final_dir));
	/* what killed builds left goes first, so staging directories never pile up */
	guest_image_sweep(images_dir);
	guest_image_format(build->staging_dir, sizeof(build->staging_dir), "%s/%s%ld-%s-XXXXXX",
			   images_dir, GUEST_IMAGE_BUILD_PREFIX, (long)getpid(), build->name);
	if (!mkdtemp(build->staging_dir)) {
		rc = -errno;
		build->staging_dir[0] = '\0';
		store_error(build->err, build->errlen, "cannot create a staging "
			    "directory in %s: %s", images_dir, strerror(-rc));
		return rc;
	}
	/* mkdtemp makes it 0700; the published image is readable like any cache entry */
	if (chmod(build->staging_dir, IMAGE_MODE_DIR) < 0)
		return -errno;
	guest_image_format(build->unpack_dir, sizeof(build->unpack_dir), "%s/unpack",
			   build->staging_dir);
	return path_mkdirs(build->unpack_dir, IMAGE_MODE_DIR);
}

static int image_find_kernel_package(struct image_build *build)
{
	const char *argv[] = { "apt-cache", "depends", IMAGE_KERNEL_META_PACKAGE, NULL };
	char *output, *line, *cursor;
	int rc;

	if (build->options->kernel_package) {
		guest_image_format(build->kernel_package, sizeof(build->kernel_package), "%s",
			 build->options->kernel_package);
		return 0;
	}
	output = malloc(IMAGE_CAPTURE_MAX);
	if (!output)
		return -ENOMEM;
	rc = image_run_tool(build, argv, NULL, output, IMAGE_CAPTURE_MAX);
	if (rc == 0) {
		rc = -ENOENT;
		for (cursor = output; (line = strsep(&cursor, "\n")) != NULL;) {
			char *hit = strstr(line, IMAGE_KERNEL_DEPENDS_PREFIX);

			if (!hit)
				continue;
			hit += strlen("Depends: ");
			guest_image_format(build->kernel_package, sizeof(build->kernel_package), "%s", hit);
			image_trim(build->kernel_package);
			rc = 0;
			break;
		}
	}
	free(output);
	if (rc < 0)
		store_error(build->err, build->errlen,
			    "apt-cache does not name a kernel for %s: run `apt-get update` "
			    "or pass a kernel package", IMAGE_KERNEL_META_PACKAGE);
	return rc;
}

/* Finds "<package>_*.deb" in the cache. */
static int image_find_cached_deb(struct image_build *build, const char *package, char *out,
				 size_t out_len)
{
	size_t prefix_len = strlen(package);
	DIR *handle = opendir(build->deb_cache);
	struct dirent *entry;
	int rc = -ENOENT;

	if (!handle)
		return -errno;
	while ((entry = readdir(handle)) != NULL) {
		size_t len = strlen(entry->d_name);

		if (strncmp(entry->d_name, package, prefix_len) == 0 &&
		    entry->d_name[prefix_len] == '_' && len > 4 &&
		    strcmp(entry->d_name + len - 4, ".deb") == 0) {
			guest_image_format(out, out_len, "%s/%s", build->deb_cache, entry->d_name);
			rc = 0;
			break;
		}
	}
	closedir(handle);
	return rc;
}

static int image_download_deb(struct image_build *build, const char *package, char *out,
			      size_t out_len)
{
	const char *as_root[] = { "apt-get", "download", "-q", "-o", "APT::Sandbox::User=root",
				  package, NULL };
	const char *as_user[] = { "apt-get", "download", "-q", package, NULL };
	int rc;

	if (image_find_cached_deb(build, package, out, out_len) == 0) {
		log_info(LOG_MODULE, "using cached %s", out);
		return 0;
	}
	log_info(LOG_MODULE, "downloading %s (apt-get download)", package);
	/* apt drops to _apt, which cannot write a private cache; root needs no drop */
	rc = image_run_tool(build, geteuid() == 0 ? as_root : as_user, build->deb_cache, NULL, 0);
	if (rc == 0)
		rc = image_find_cached_deb(build, package, out, out_len);
	if (rc < 0) {
		store_error(build->err, build->errlen, "cannot download %s", package);
		if (!store_explain_low_space(build->deb_cache, build->err, build->errlen))
			store_error(build->err, build->errlen,
				    "cannot download %s: check `apt-get update` and the apt "
				    "sources", package);
	}
	return rc;
}

static int image_deb_field(struct image_build *build, const char *deb, const char *field,
			   char *out, size_t out_len)
{
	const char *argv[] = { "dpkg-deb", "-f", deb, field, NULL };
	int rc = image_run_tool(build, argv, NULL, out, out_len);

	if (rc == 0)
		image_trim(out);
	return rc;
}

static int image_unpack_deb(struct image_build *build, const char *deb, const char *dest)
{
	const char *argv[] = { "dpkg-deb", "-x", deb, dest, NULL };
	int rc = path_mkdirs(dest, IMAGE_MODE_DIR);

	if (rc < 0)
		return rc;
	log_info(LOG_MODULE, "unpacking %s", strrchr(deb, '/') ? strrchr(deb, '/') + 1 : deb);
	rc = image_run_tool(build, argv, NULL, NULL, 0);
	if (rc < 0)
		store_explain_low_space(dest, build->err, build->errlen);
	return rc;
}

/* The single directory under <kernel>/lib/modules names the kernel release. */
static int image_find_kernel_release(struct image_build *build, const char *kernel_root)
{
	char modules_dir[PATH_MAX];
	struct dirent *entry;
	DIR *handle;
	int rc = -ENOENT;

	guest_image_format(modules_dir, sizeof(modules_dir), "%s/%s", kernel_root, IMAGE_MODULES_DIR);
	handle = opendir(modules_dir);
	if (!handle)
		goto out;
	while ((entry = readdir(handle)) != NULL) {
		if (entry->d_name[0] == '.')
			continue;
		guest_image_format(build->kernel_release, sizeof(build->kernel_release), "%s",
			 entry->d_name);
		rc = 0;
		break;
	}
	closedir(handle);
out:
	if (rc < 0)
		store_error(build->err, build->errlen,
			    "%s has no /lib/modules/<release>: is it a kernel image "
			    "package?", build->kernel_package);
	return rc;
}

struct image_builtin_list {
	char *text; /* modules.builtin, one "kernel/.../name.ko" per line */
};

static int image_module_is_builtin(const char *name, void *ctx)
{
	const struct image_builtin_list *builtin = ctx;
	char line_name[KMOD_NAME_MAX];
	const char *line = builtin->text;

	while (line && *line) {
		const char *end = strchr(line, '\n');
		char path[PATH_MAX];
		size_t len = end ? (size_t)(end - line) : strlen(line);

		if (len < sizeof(path)) {
			memcpy(path, line, len);
			path[len] = '\0';
			kmod_name_from_file(path, line_name, sizeof(line_name));
			if (strcmp(line_name, name) == 0)
				return 1;
		}
		line = end ? end + 1 : NULL;
	}
	return 0;
}

static char *image_read_text_file(const char *path)
{
	FILE *file = fopen(path, "re");
	char *text = NULL;
	size_t len = 0;
	long size;

	if (!file)
		return NULL;
	if (fseek(file, 0, SEEK_END) == 0 && (size = ftell(file)) >= 0 &&
	    fseek(file, 0, SEEK_SET) == 0) {
		text = malloc((size_t)size + 1);
		if (text) {
			len = fread(text, 1, (size_t)size, file);
			text[len] = '\0';
		}
	}
	fclose(file);
	return text;
}

static int image_order_modules(struct image_build *build, const char *kernel_root)
{
	const char *wanted[IMAGE_DEFAULT_MODULE_COUNT + 64];
	size_t wanted_count = 0;
	char release_dir[PATH_MAX], builtin_path[PATH_MAX], missing[KMOD_NAME_MAX] = "";
	struct image_builtin_list builtin;
	int rc;

	if (build->options->extra_module_count > 64) {
		store_error(build->err, build->errlen, "at most 64 extra modules");
		return -E2BIG;
	}
	for (size_t i = 0; i < IMAGE_DEFAULT_MODULE_COUNT; i++)
		wanted[wanted_count++] = image_default_modules[i];
	for (size_t i = 0; i < build->options->extra_module_count; i++)
		wanted[wanted_count++] = build->options->extra_modules[i];

	guest_image_format(release_dir, sizeof(release_dir), "%s/%s/%s", kernel_root, IMAGE_MODULES_DIR,
		 build->kernel_release);
	guest_image_format(builtin_path, sizeof(builtin_path), "%s/modules.builtin", release_dir);
	rc = kmod_index_scan(&build->module_index, release_dir);
	if (rc < 0) {
		store_error(build->err, build->errlen, "cannot scan %s: %s",
			    release_dir, strerror(-rc));
		return rc;
	}
	builtin.text = image_read_text_file(builtin_path);
	rc = kmod_resolve_load_order(&build->module_index, wanted, wanted_count,
				     image_module_is_builtin, &builtin, &build->module_order,
				     missing, sizeof(missing));
	free(builtin.text);
	if (rc == -ELOOP)
		store_error(build->err, build->errlen,
			    "module dependency cycle through %s", missing);
	else if (rc < 0)
		store_error(build->err, build->errlen,
			    "module %s is neither in %s nor built in: use the generic "
			    "(not cloud) kernel flavour", missing, build->kernel_package);
	return rc;
}

static int image_prepare_kernel(struct image_build *build)
{
	char kernel_root[PATH_MAX], vmlinuz[PATH_MAX], dest[PATH_MAX];
	int rc;

	if (build->options->kernel_deb) {
		guest_image_format(build->kernel_deb, sizeof(build->kernel_deb), "%s",
			 build->options->kernel_deb);
		rc = image_deb_field(build, build->kernel_deb, "Package", build->kernel_package,
				     sizeof(build->kernel_package));
	} else {
		rc = image_find_kernel_package(build);
		if (rc == 0)
			rc = image_download_deb(build, build->kernel_package, build->kernel_deb,
						sizeof(build->kernel_deb));
	}
	if (rc == 0)
		rc = image_deb_field(build, build->kernel_deb, "Version", build->kernel_version,
				     sizeof(build->kernel_version));
	if (rc < 0)
		return rc;
	guest_image_format(kernel_root, sizeof(kernel_root), "%s/kernel", build->unpack_dir);
	rc = image_unpack_deb(build, build->kernel_deb, kernel_root);
	if (rc == 0)
		rc = image_find_kernel_release(build, kernel_root);
	if (rc < 0)
		return rc;
	log_info(LOG_MODULE, "kernel %s (%s %s)", build->kernel_release, build->kernel_package,
		 build->kernel_version);

	guest_image_format(vmlinuz, sizeof(vmlinuz), "%s/boot/vmlinuz-%s", kernel_root,
		 build->kernel_release);
	guest_image_format(dest, sizeof(dest), "%s/%s", build->staging_dir, GUEST_IMAGE_KERNEL_FILE);
	rc = image_copy_file(vmlinuz, dest);
	if (rc < 0) {
		store_error(build->err, build->errlen, "cannot copy %s: %s", vmlinuz,
			    strerror(-rc));
		return rc;
	}
	rc = image_order_modules(build, kernel_root);
	if (rc == 0)
		log_info(LOG_MODULE, "%zu kernel modules, load order derived from depends=",
			 build->module_order.count);
	return rc;
}

static int image_prepare_busybox(struct image_build *build)
{
	const char *query[] = { "dpkg-query", "-W", "-f=${Status} ${Version}",
				IMAGE_BUSYBOX_PACKAGE, NULL };
	char status[IMAGE_VERSION_MAX * 2] = "", deb[PATH_MAX], root[PATH_MAX];
	const char *installed = "install ok installed ";
	int rc;

	if (build->options->busybox_path) {
		guest_image_format(build->busybox_path, sizeof(build->busybox_path), "%s",
			 build->options->busybox_path);
		guest_image_format(build->busybox_version, sizeof(build->busybox_version), "unknown");
		return 0;
	}
	if (image_run_tool(build, query, NULL, status, sizeof(status)) == 0 &&
	    strncmp(status, installed, strlen(installed)) == 0 &&
	    access(IMAGE_BUSYBOX_INSTALLED_PATH, X_OK) == 0) {
		guest_image_format(build->busybox_path, sizeof(build->busybox_path), "%s",
			 IMAGE_BUSYBOX_INSTALLED_PATH);
		guest_image_format(build->busybox_version, sizeof(build->busybox_version), "%s",
			 status + strlen(installed));
		image_trim(build->busybox_version);
		log_info(LOG_MODULE, "busybox from the installed %s %s", IMAGE_BUSYBOX_PACKAGE,
			 build->busybox_version);
		return 0;
	}
	build->err[0] = '\0';
	rc = image_download_deb(build, IMAGE_BUSYBOX_PACKAGE, deb, sizeof(deb));
	if (rc == 0)
		rc = image_deb_field(build, deb, "Version", build->busybox_version,
				     sizeof(build->busybox_version));
	guest_image_format(root, sizeof(root), "%s/busybox", build->unpack_dir);
	if (rc == 0)
		rc = image_unpack_deb(build, deb, root);
	guest_image_format(build->busybox_path, sizeof(build->busybox_path), "%s/bin/busybox", root);
	return rc;
}

static int image_collect_applets(struct image_build *build)
{
	const char *argv[] = { build->busybox_path, "--list-full", NULL };
	char *output = malloc(IMAGE_CAPTURE_MAX), *cursor, *line;
	int rc;

	if (!output)
		return -ENOMEM;
	rc = image_run_tool(build, argv, NULL, output, IMAGE_CAPTURE_MAX);
	if (rc < 0) {
		store_error(build->err, build->errlen,
			    "%s --list-full failed: is it busybox-static?",
			    build->busybox_path);
		goto out;
	}
	for (cursor = output; (line = strsep(&cursor, "\n")) != NULL && rc == 0;) {
		image_trim(line);
		/* top-level names (linuxrc) would shadow our own /init layout */
		if (!strchr(line, '/') || strcmp(line, IMAGE_BUSYBOX_GUEST_PATH) == 0)
			continue;
		rc = image_entries_add_parents(&build->entries, line);
		if (rc == 0)
			rc = image_entries_add(&build->entries, IMAGE_ENTRY_SYMLINK, line, 0,
					       IMAGE_BUSYBOX_LINK_TARGET, 0);
		build->applet_count++;
	}
out:
	free(output);
	return rc;
}

static int image_collect_modules(struct image_build *build)
{
	size_t order_len = 0,
	       order_cap = build->module_order.count * IMAGE_MODULES_ORDER_LINE_MAX + 1;
	char *order_text = malloc(order_cap);
	int rc = 0;

	if (!order_text)
		return -ENOMEM;
	order_text[0] = '\0';
	for (size_t i = 0; i < build->module_order.count && rc == 0; i++) {
		const struct kmod_entry *module = build->module_order.modules[i];
		char guest_path[PATH_MAX];

		guest_image_format(guest_path, sizeof(guest_path), "%s/%s.ko", IMAGE_MODULES_DIR,
			 module->name);
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_FILE, guest_path,
				       IMAGE_MODE_DATA, module->path, 0);
		order_len += (size_t)snprintf(order_text + order_len, order_cap - order_len,
					      "%s.ko\n", module->name);
	}
	if (rc == 0)
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_DATA, IMAGE_MODULES_ORDER_FILE,
				       IMAGE_MODE_DATA, order_text, order_len);
	free(order_text);
	return rc;
}

static int image_collect_extra_files(struct image_build *build)
{
	const struct guest_image_build_options *options = build->options;
	int rc = 0;

	for (size_t i = 0; i < options->extra_file_count && rc == 0; i++) {
		const struct guest_image_extra_file *extra = &options->extra_files[i];
		const char *guest_path = extra->guest_path;

		if (!guest_path || guest_path[0] != '/' || strstr(guest_path, "..") ||
		    access(extra->host_path, R_OK) < 0) {
			store_error(build->err, build->errlen,
				    "extra file %s -> %s: the guest path must be absolute "
				    "without '..' and the host file readable",
				    extra->host_path ? extra->host_path : "(null)",
				    guest_path ? guest_path : "(null)");
			return -EINVAL;
		}
		while (*guest_path == '/')
			guest_path++;
		rc = image_entries_add_parents(&build->entries, guest_path);
		if (rc == 0)
			rc = image_entries_add(&build->entries, IMAGE_ENTRY_FILE, guest_path,
					       extra->mode, extra->host_path, 0);
		log_info(LOG_MODULE, "extra file %s", extra->guest_path);
	}
	return rc;
}

static int image_collect_entries(struct image_build *build)
{
	int rc = 0;

	for (size_t i = 0; i < IMAGE_BASE_DIR_COUNT && rc == 0; i++)
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_DIRECTORY,
				       image_base_dirs[i].path, image_base_dirs[i].mode, NULL, 0);
	if (rc == 0) {
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_CHAR_DEVICE, IMAGE_CONSOLE_PATH,
				       IMAGE_MODE_CONSOLE, NULL, 0);
		build->entries.items[build->entries.count - 1].major = IMAGE_CONSOLE_MAJOR;
		build->entries.items[build->entries.count - 1].minor = IMAGE_CONSOLE_MINOR;
	}
	if (rc == 0)
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_FILE, IMAGE_AGENT_GUEST_PATH,
				       IMAGE_MODE_EXEC, build->options->agent_path, 0);
	if (rc == 0)
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_FILE, IMAGE_BUSYBOX_GUEST_PATH,
				       IMAGE_MODE_EXEC, build->busybox_path, 0);
	if (rc == 0)
		rc = image_collect_applets(build);
	if (rc == 0)
		rc = image_entries_add(&build->entries, IMAGE_ENTRY_DIRECTORY, IMAGE_MODULES_DIR,
				       IMAGE_MODE_DIR, NULL, 0);
	if (rc == 0)
		rc = image_collect_modules(build);
	if (rc == 0)
		rc = image_collect_extra_files(build);
	if (rc == -ENOMEM)
		store_error(build->err, build->errlen, "out of memory");
	return rc;
}

/* ---- archive output ------------------------------------------------------------------ */

static int image_sink_file(void *ctx, const void *data, size_t len)
{
	return fwrite(data, 1, len, ctx) == len ? 0 : -EIO;
}

static int image_sink_gzip(void *ctx, const void *data, size_t len)
{
	return gzwrite(ctx, data, (unsigned int)len) == (int)len ? 0 : -EIO;
}

static int image_write_entry(struct cpio_writer *writer, const struct image_entry *entry)
{
	switch (entry->kind) {
	case IMAGE_ENTRY_DIRECTORY:
		return cpio_writer_add_directory(writer, entry->path, entry->mode);
	case IMAGE_ENTRY_FILE:
		return cpio_writer_add_file_from_path(writer, entry->path, entry->mode,
						      entry->source);
	case IMAGE_ENTRY_DATA:
		return cpio_writer_add_file(writer, entry->path, entry->mode, entry->source,
					    entry->data_len);
	case IMAGE_ENTRY_SYMLINK:
		return cpio_writer_add_symlink(writer, entry->path, entry->source);
	case IMAGE_ENTRY_CHAR_DEVICE:
		return cpio_writer_add_char_device(writer, entry->path, entry->mode, entry->major,
						   entry->minor);
	}
	return -EINVAL;
}

static int image_write_archive(struct image_build *build, const char *path)
{
	bool gzip = build->options->compression == GUEST_IMAGE_COMPRESSION_GZIP;
	struct image_entries *entries = &build->entries;
	struct cpio_writer writer;
	gzFile gz_out = NULL;
	FILE *out = NULL;
	int rc = 0;

	qsort(entries->items, entries->count, sizeof(*entries->items), image_entry_compare);
	if (gzip) {
		char gz_mode[8];

		snprintf(gz_mode, sizeof(gz_mode), "wb%d", IMAGE_GZIP_LEVEL);
		gz_out = gzopen(path, gz_mode);
		if (!gz_out)
			return -errno ? -errno : -EIO;
		cpio_writer_init(&writer, image_sink_gzip, gz_out, build->options->archive_mtime);
	} else {
		out = fopen(path, "wbe");
		if (!out)
			return -errno;
		cpio_writer_init(&writer, image_sink_file, out, build->options->archive_mtime);
	}
	for (size_t i = 0; i < entries->count && rc == 0; i++) {
		/* of several entries at one path, only the last added is written */
		if (i + 1 < entries->count && strcmp(entries->items[i].path,
						     entries->items[i + 1].path) == 0)
			continue;
		rc = image_write_entry(&writer, &entries->items[i]);
		if (rc < 0)
			store_error(build->err, build->errlen, "cannot archive /%s: %s",
				    entries->items[i].path, strerror(-rc));
	}
	if (rc == 0)
		rc = cpio_writer_finish(&writer);
	build->archive_entries = writer.entries;
	if (gzip) {
		if (gzclose(gz_out) != Z_OK && rc == 0)
			rc = -EIO;
	} else if (fclose(out) != 0 && rc == 0) {
		rc = -errno;
	}
	if (rc < 0 && !build->err[0])
		store_error(build->err, build->errlen, "cannot write %s: %s", path,
			    strerror(-rc));
	return rc;
}

/* ---- manifest ------------------------------------------------------------------------ */

static json_t *image_manifest_modules(const struct image_build *build)
{
	json_t *modules = json_array();

	for (size_t i = 0; modules && i < build->module_order.count; i++)
		json_array_append_new(modules, json_string(build->module_order.modules[i]->name));
	return modules;
}

static json_t *image_manifest_extra_files(const struct image_build *build)
{
	json_t *files = json_array();

	for (size_t i = 0; files && i < build->options->extra_file_count; i++) {
		const struct guest_image_extra_file *extra = &build->options->extra_files[i];
		char sha[IMAGE_SHA256_HEX_LEN] = "";

		image_sha256_file(extra->host_path, sha);
		json_array_append_new(files, json_pack("{s:s, s:s, s:s, s:I}", "guest_path",
						       extra->guest_path, "source",
						       extra->host_path, "sha256", sha, "size",
						       (json_int_t)image_file_size(extra->host_path)));
	}
	return files;
}

static int image_write_manifest(struct image_build *build, const char *initramfs_name)
{
	char path[PATH_MAX], kernel_path[PATH_MAX], initramfs_path[PATH_MAX], built_at[32];
	time_t now = time(NULL);
	struct tm utc;
	json_t *manifest;
	int rc;

	gmtime_r(&now, &utc);
	strftime(built_at, sizeof(built_at), IMAGE_TIME_FORMAT, &utc);
	guest_image_format(path, sizeof(path), "%s/%s", build->staging_dir, GUEST_IMAGE_MANIFEST_FILE);
	guest_image_format(kernel_path, sizeof(kernel_path), "%s/%s", build->staging_dir,
		 GUEST_IMAGE_KERNEL_FILE);
	guest_image_format(initramfs_path, sizeof(initramfs_path), "%s/%s", build->staging_dir,
		 initramfs_name);
	manifest = json_pack(
		"{s:i, s:s, s:s,"
		" s:{s:s, s:s, s:s, s:s, s:I},"
		" s:{s:s, s:s, s:I, s:i},"
		" s:{s:s, s:s, s:i},"
		" s:{s:s, s:s, s:I},"
		" s:o, s:o}",
		"format", IMAGE_MANIFEST_FORMAT, "name", build->name, "built_at", built_at,
		"kernel", "package", build->kernel_package, "version", build->kernel_version,
		"release", build->kernel_release, "file", GUEST_IMAGE_KERNEL_FILE, "size",
		(json_int_t)image_file_size(kernel_path),
		"initramfs", "file", initramfs_name, "compression",
		build->options->compression == GUEST_IMAGE_COMPRESSION_GZIP ? "gzip" : "none",
		"size", (json_int_t)image_file_size(initramfs_path), "entries",
		(int)build->archive_entries,
		"busybox", "package", IMAGE_BUSYBOX_PACKAGE, "version", build->busybox_version,
		"applets", (int)build->applet_count,
		"agent", "source", build->options->agent_path, "sha256", build->agent_sha256,
		"size", (json_int_t)image_file_size(build->options->agent_path),
		"modules", image_manifest_modules(build),
		"extra_files", image_manifest_extra_files(build));
	if (!manifest) {
		store_error(build->err, build->errlen, "cannot build the manifest");
		return -ENOMEM;
	}
	rc = json_dump_file(manifest, path, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 ? 0 : -EIO;
	json_decref(manifest);
	if (rc < 0)
		store_error(build->err, build->errlen, "cannot write %s", path);
	return rc;
}

/* ---- publish ------------------------------------------------------------------------- */

/*
 * Replaces the published image with the staged one where RENAME_EXCHANGE is unsupported (9p
 * answers EINVAL): the old image is moved aside first, so there is a moment without an image
 * instead of an atomic swap. The old image ends up at the staging path, as after the exchange.
 */
static int image_replace_without_exchange(struct image_build *build)
{
	char old_dir[sizeof(build->staging_dir) + sizeof(".old")];

	snprintf(old_dir, sizeof(old_dir), "%s.old", build->staging_dir);
	if (rename(build->final_dir, old_dir) < 0)
		return -errno;
	if (rename(build->staging_dir, build->final_dir) < 0) {
		int saved = errno;

		rename(old_dir, build->final_dir);
		return -saved;
	}
	return rename(old_dir, build->staging_dir) < 0 ? -errno : 0;
}

static int image_publish(struct image_build *build)
{
	int rc = store_remove_tree(build->unpack_dir);

	if (rc < 0)
		return rc;
	rc = store_rename_noreplace(build->staging_dir, build->final_dir);
	if (rc == 0) {
		build->staging_dir[0] = '\0';
		return 0;
	}
	if (rc != -EEXIST)
		return rc;
	/* swap old and new in one step; the staging path then holds the old image */
	if (renameat2(AT_FDCWD, build->staging_dir, AT_FDCWD, build->final_dir,
		      RENAME_EXCHANGE) == 0)
		return 0;
	return errno == EINVAL ? image_replace_without_exchange(build) : -errno;
}

static int image_check_options(const struct guest_image_build_options *options, char *err,
			       size_t errlen)
{
	const char *name = options->name ? options->name : GUEST_IMAGE_DEFAULT_NAME;
	struct stat st;

	if (!guest_image_name_valid(name)) {
		store_error(err, errlen, "invalid image name '%s': use letters, digits, "
			    "'.', '_' and '-'", name);
		return -EINVAL;
	}
	if (!options->agent_path || stat(options->agent_path, &st) < 0 || !S_ISREG(st.st_mode)) {
		store_error(err, errlen, "the guest agent binary %s is missing: build it "
			    "first (ninja builds guest/agent/voidbox-agent)",
			    options->agent_path ? options->agent_path : "(none given)");
		return -ENOENT;
	}
	return 0;
}

static int image_build_steps(struct image_build *build)
{
	char initramfs_path[PATH_MAX];
	const char *initramfs_name =
		build->options->compression == GUEST_IMAGE_COMPRESSION_GZIP ?
			GUEST_IMAGE_INITRAMFS_GZ_FILE : GUEST_IMAGE_INITRAMFS_FILE;
	int rc;

	rc = image_prepare_dirs(build);
	if (rc == 0)
		rc = image_sha256_file(build->options->agent_path, build->agent_sha256);
	if (rc == 0)
		rc = image_prepare_kernel(build);
	if (rc == 0)
		rc = image_prepare_busybox(build);
	if (rc == 0)
		rc = image_collect_entries(build);
	if (rc < 0)
		return rc;
	guest_image_format(initramfs_path, sizeof(initramfs_path), "%s/%s", build->staging_dir,
		 initramfs_name);
	log_info(LOG_MODULE, "writing %s (%s)", initramfs_name,
		 build->options->compression == GUEST_IMAGE_COMPRESSION_GZIP ? "gzip" : "uncompressed");
	rc = image_write_archive(build, initramfs_path);
	if (rc == 0)
		log_info(LOG_MODULE, "%u entries, %llu bytes", build->archive_entries,
			 (unsigned long long)image_file_size(initramfs_path));
	if (rc == 0)
		rc = image_write_manifest(build, initramfs_name);
	if (rc == 0)
		rc = image_publish(build);
	if (rc < 0 && !build->err[0])
		store_error(build->err, build->errlen, "cannot publish %s: %s",
			    build->final_dir, strerror(-rc));
	return rc;
}

int guest_image_build(const struct guest_image_build_options *options, char *err,
		      size_t errlen)
{
	static char scratch_err[8];
	struct image_build *build;
	int rc;

	if (!err || errlen == 0) {
		err = scratch_err;
		errlen = sizeof(scratch_err);
	}
	err[0] = '\0';
	rc = image_check_options(options, err, errlen);
	if (rc < 0)
		return rc;
	build = calloc(1, sizeof(*build));
	if (!build)
		return -ENOMEM;
	build->options = options;
	build->name = options->name ? options->name : GUEST_IMAGE_DEFAULT_NAME;
	build->err = err;
	build->errlen = errlen;
	log_info(LOG_MODULE, "building guest image '%s'", build->name);

	rc = image_build_steps(build);
	if (rc == 0)
		log_info(LOG_MODULE, "guest image '%s' ready in %s", build->name, build->final_dir);

	if (build->staging_dir[0])
		store_remove_tree(build->staging_dir);
	image_entries_free(&build->entries);
	kmod_load_order_free(&build->module_order);
	kmod_index_free(&build->module_index);
	free(build);
	return rc;
}
