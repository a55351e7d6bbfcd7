/*
 * The read side of guest images: where they live, listing, removal and choosing the kernel and
 * initramfs for a run. Building is in guest_image_build.c.
 *
 * Removal renames an image out of sight (a .remove-<pid>- name) before deleting its files, so
 * a process killed midway leaves a temporary that the next build or clean sweeps, never a
 * half-deleted image under its real name that a later run would try to boot.
 *
 * Resolution decides each of the two files on its own, so `--kernel` with an env-provided
 * initramfs works; every chosen file is checked for readability here, before any VM exists,
 * and the error names where the path came from.
 */
#include "store/guest_image.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array.h"
#include "common/path.h"
#include "store/guest_image_internal.h"
#include "store/store_fs.h"
#include "store/store_settings.h"

#define GUEST_IMAGE_HOME_DIR_NAME ".void-box"
#define GUEST_IMAGE_LIST_INITIAL 8

/* Numbers the removals of one process, so two of the same name never share a temporary. */
static unsigned int guest_image_remove_counter;

int guest_image_format(char *out, size_t out_len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, out_len, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

int guest_image_home(char *out, size_t out_len)
{
	const char *home = store_settings_get()->voidbox_home;
	const char *user_home = store_settings_get()->user_home;

	if (home && *home)
		return guest_image_format(out, out_len, "%s", home);
	if (!user_home || !*user_home)
		return -ENOENT;
	return guest_image_format(out, out_len, "%s/%s", user_home, GUEST_IMAGE_HOME_DIR_NAME);
}

bool guest_image_name_valid(const char *name)
{
	return path_name_valid(name, GUEST_IMAGE_NAME_MAX - 1);
}

int guest_image_dir(const char *name, char *out, size_t out_len)
{
	char home[PATH_MAX];
	int rc;

	if (!guest_image_name_valid(name))
		return -EINVAL;
	rc = guest_image_home(home, sizeof(home));
	if (rc < 0)
		return rc;
	return guest_image_format(out, out_len, "%s/%s/%s", home, GUEST_IMAGE_IMAGES_DIR, name);
}

static uint64_t guest_image_dir_size(const char *dir)
{
	DIR *handle = opendir(dir);
	struct dirent *entry;
	uint64_t total = 0;

	if (!handle)
		return 0;
	while ((entry = readdir(handle)) != NULL) {
		char path[PATH_MAX];
		struct stat st;

		if (guest_image_format(path, sizeof(path), "%s/%s", dir, entry->d_name) < 0)
			continue;
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
	}
	closedir(handle);
	return total;
}

static int guest_image_read_info(const char *images_dir, const char *name,
				 struct guest_image_info *info)
{
	char dir[PATH_MAX], manifest_path[PATH_MAX];
	json_error_t json_error;
	json_t *manifest;
	const char *release = "?", *built_at = "?";

	if (guest_image_format(dir, sizeof(dir), "%s/%s", images_dir, name) < 0 ||
	    guest_image_format(manifest_path, sizeof(manifest_path), "%s/%s", dir,
		     GUEST_IMAGE_MANIFEST_FILE) < 0)
		return -ENAMETOOLONG;
	manifest = json_load_file(manifest_path, 0, &json_error);
	if (!manifest)
		return -ENOENT;
	json_unpack(manifest, "{s:{s:s}}", "kernel", "release", &release);
	json_unpack(manifest, "{s:s}", "built_at", &built_at);
	memset(info, 0, sizeof(*info));
	guest_image_format(info->name, sizeof(info->name), "%s", name);
	guest_image_format(info->kernel_release, sizeof(info->kernel_release), "%s", release);
	guest_image_format(info->built_at, sizeof(info->built_at), "%s", built_at);
	info->size_bytes = guest_image_dir_size(dir);
	json_decref(manifest);
	return 0;
}

static int guest_image_info_compare(const void *a, const void *b)
{
	return strcmp(((const struct guest_image_info *)a)->name,
		      ((const struct guest_image_info *)b)->name);
}

/* $VOIDBOX_HOME/images into out, or an error naming the variable to set. */
static int guest_image_images_dir(char *out, size_t len, char *err, size_t errlen)
{
	char home[PATH_MAX];
	int rc = guest_image_home(home, sizeof(home));

	if (rc < 0) {
		store_error(err, errlen, "cannot find the voidbox home: set %s or HOME",
			    GUEST_IMAGE_ENV_HOME);
		return rc;
	}
	guest_image_format(out, len, "%s/%s", home, GUEST_IMAGE_IMAGES_DIR);
	return 0;
}

int guest_image_list(struct guest_image_info **images, size_t *count, char *err,
		     size_t errlen)
{
	char images_dir[PATH_MAX];
	struct guest_image_info *list = NULL;
	size_t used = 0, capacity = 0;
	struct dirent *entry;
	DIR *handle;
	int rc;

	*images = NULL;
	*count = 0;
	rc = guest_image_images_dir(images_dir, sizeof(images_dir), err, errlen);
	if (rc < 0)
		return rc;
	handle = opendir(images_dir);
	if (!handle)
		return errno == ENOENT ? 0 : -errno;
	while ((entry = readdir(handle)) != NULL) {
		if (!guest_image_name_valid(entry->d_name))
			continue; /* ".", "..", and the .build-/.remove- temporaries */
		if (!array_reserve_one((void **)&list, &capacity, used, sizeof(*list),
				       GUEST_IMAGE_LIST_INITIAL)) {
			rc = -ENOMEM;
			goto fail;
		}
		if (guest_image_read_info(images_dir, entry->d_name, &list[used]) == 0)
			used++;
	}
	closedir(handle);
	if (used)
		qsort(list, used, sizeof(*list), guest_image_info_compare);
	*images = list;
	*count = used;
	return 0;
fail:
	closedir(handle);
	free(list);
	return rc;
}

void guest_image_sweep(const char *images_dir)
{
	store_sweep_gone_writers(images_dir, GUEST_IMAGE_BUILD_PREFIX);
	store_sweep_gone_writers(images_dir, GUEST_IMAGE_REMOVE_PREFIX);
}

/* Renames images_dir/name to a .remove-<pid>- temporary, then deletes it. -ENOENT: absent. */
static int guest_image_remove(const char *images_dir, const char *name, char *err,
			      size_t errlen)
{
	char dir[PATH_MAX], doomed[PATH_MAX];
	unsigned int serial = __atomic_add_fetch(&guest_image_remove_counter, 1, __ATOMIC_RELAXED);
	int rc;

	if (guest_image_format(dir, sizeof(dir), "%s/%s", images_dir, name) < 0 ||
	    guest_image_format(doomed, sizeof(doomed), "%s/%s%ld-%u-%s", images_dir,
			       GUEST_IMAGE_REMOVE_PREFIX, (long)getpid(), serial, name) < 0) {
		store_error(err, errlen, "the image store %s is too deep: set %s to a shorter "
			    "path", images_dir, GUEST_IMAGE_ENV_HOME);
		return -ENAMETOOLONG;
	}
	if (rename(dir, doomed) < 0) {
		rc = -errno;
		if (rc != -ENOENT)
			store_error(err, errlen, "cannot remove %s: %s", dir, strerror(-rc));
		return rc;
	}
	rc = store_remove_tree(doomed);
	if (rc < 0)
		store_error(err, errlen, "cannot remove %s (the image %s, already out of use): %s",
			    doomed, name, strerror(-rc));
	return rc;
}

static int guest_image_clean_one(const char *images_dir, const char *name, char *err,
				 size_t errlen)
{
	int rc;

	if (!guest_image_name_valid(name)) {
		store_error(err, errlen, "invalid image name '%s': use letters, digits, "
			    "'.', '_' and '-'", name);
		return -EINVAL;
	}
	rc = guest_image_remove(images_dir, name, err, errlen);
	if (rc == -ENOENT)
		store_error(err, errlen, "no image named '%s' (see `voidbox image list`)",
			    name);
	return rc;
}

/* Every image; a running build's staging directory stays, so that build still publishes. */
static int guest_image_clean_all(const char *images_dir, char *err, size_t errlen)
{
	struct dirent *entry;
	DIR *handle = opendir(images_dir);
	int rc = 0;

	if (!handle) {
		if (errno == ENOENT)
			return 0;
		rc = -errno;
		store_error(err, errlen, "cannot read %s: %s", images_dir, strerror(-rc));
		return rc;
	}
	while (rc == 0 && (entry = readdir(handle)) != NULL) {
		if (!guest_image_name_valid(entry->d_name))
			continue; /* ".", "..", and the temporaries guest_image_sweep handles */
		rc = guest_image_remove(images_dir, entry->d_name, err, errlen);
		if (rc == -ENOENT)
			rc = 0; /* removed meanwhile by someone else */
	}
	closedir(handle);
	return rc;
}

int guest_image_clean(const char *name, char *err, size_t errlen)
{
	char images_dir[PATH_MAX];
	int rc;

	rc = guest_image_images_dir(images_dir, sizeof(images_dir), err, errlen);
	if (rc < 0)
		return rc;
	guest_image_sweep(images_dir);
	return name ? guest_image_clean_one(images_dir, name, err, errlen) :
		      guest_image_clean_all(images_dir, err, errlen);
}

/* A built image's file (its initramfs: whichever of the two compressions it has). */
static int guest_image_default_file(const char *image_name, const char *file, char *out,
				    size_t out_len)
{
	char dir[PATH_MAX];
	int rc = guest_image_dir(image_name, dir, sizeof(dir));

	if (rc < 0)
		return rc;
	if (guest_image_format(out, out_len, "%s/%s", dir, file) < 0)
		return -ENAMETOOLONG;
	return access(out, F_OK) == 0 ? 0 : -ENOENT;
}

/* One file of a run's image: the flag, else the environment's value, else the named image's. */
static int guest_image_pick(const char *image_name, const char *flag_value,
			    const char *flag_name, const char *env_value, const char *env_name,
			    const char *const *default_files, size_t default_count, char *out,
			    size_t out_len, char *err, size_t errlen)
{
	const char *chosen = NULL, *source = NULL;

	if (flag_value) {
		chosen = flag_value;
		source = flag_name;
	} else if (env_value && *env_value) {
		chosen = env_value;
		source = env_name;
	}
	if (chosen) {
		if (guest_image_format(out, out_len, "%s", chosen) < 0) {
			store_error(err, errlen, "%s: path too long", source);
			return -ENAMETOOLONG;
		}
	} else {
		int rc = -ENOENT;

		for (size_t i = 0; i < default_count && rc < 0; i++)
			rc = guest_image_default_file(image_name, default_files[i], out, out_len);
		if (rc < 0 && strcmp(image_name, GUEST_IMAGE_DEFAULT_NAME) != 0) {
			store_error(err, errlen,
				    "no guest image '%s': build it with `voidbox image build "
				    "--flavour %s` (or pass %s / set %s)", image_name, image_name,
				    flag_name, env_name);
			return -ENOENT;
		}
		if (rc < 0) {
			store_error(err, errlen,
				    "no guest image: run `voidbox image build` (or pass "
				    "%s / set %s)", flag_name, env_name);
			return -ENOENT;
		}
		source = "the built image";
	}
	if (access(out, R_OK) < 0) {
		int saved = errno;

		store_error(err, errlen, "%s (from %s): %s", out, source, strerror(saved));
		return -saved;
	}
	return 0;
}

int guest_image_resolve(const char *flag_kernel, const char *flag_initramfs,
			struct guest_image_paths *out, char *err, size_t errlen)
{
	return guest_image_resolve_named(NULL, flag_kernel, flag_initramfs, out, err, errlen);
}

int guest_image_resolve_named(const char *image_name, const char *flag_kernel,
			      const char *flag_initramfs, struct guest_image_paths *out,
			      char *err, size_t errlen)
{
	static const char *const kernel_files[] = { GUEST_IMAGE_KERNEL_FILE };
	static const char *const initramfs_files[] = { GUEST_IMAGE_INITRAMFS_FILE,
						       GUEST_IMAGE_INITRAMFS_GZ_FILE };
	const struct store_settings *settings = store_settings_get();
	int rc;

	if (!image_name)
		image_name = GUEST_IMAGE_DEFAULT_NAME;
	rc = guest_image_pick(image_name, flag_kernel, "--kernel", settings->kernel,
			      GUEST_IMAGE_ENV_KERNEL, kernel_files, 1, out->kernel,
			      sizeof(out->kernel), err, errlen);
	if (rc < 0)
		return rc;
	return guest_image_pick(image_name, flag_initramfs, "--initramfs", settings->initramfs,
				GUEST_IMAGE_ENV_INITRAMFS, initramfs_files, 2, out->initramfs,
				sizeof(out->initramfs), err, errlen);
}
