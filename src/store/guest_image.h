/*
 * Guest images: a Debian kernel plus an initramfs whose /init is the voidbox agent, built
 * locally from Debian packages and kept under $VOIDBOX_HOME/images/<name>/ (VOIDBOX_HOME
 * defaults to ~/.void-box).
 *
 * An image directory holds vmlinuz, initramfs.cpio (or initramfs.cpio.gz) and manifest.json.
 * It is built in a temporary directory beside it and renamed into place, so a reader sees the
 * old image or the new one, never half of one. Named images ("flavours") let a test image add
 * files, such as a mock agent, on top of the default contents.
 *
 * Inside the initramfs, /lib/modules/modules.order lists the .ko files (relative to
 * /lib/modules) in load order, dependencies first, as derived at build time from each
 * module's depends= string; the agent loads them in that order.
 */
#ifndef VOIDBOX_STORE_GUEST_IMAGE_H
#define VOIDBOX_STORE_GUEST_IMAGE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GUEST_IMAGE_DEFAULT_NAME "default"
#define GUEST_IMAGE_NAME_MAX 64
#define GUEST_IMAGE_ENV_HOME "VOIDBOX_HOME"
#define GUEST_IMAGE_ENV_KERNEL "VOID_BOX_KERNEL"
#define GUEST_IMAGE_ENV_INITRAMFS "VOID_BOX_INITRAMFS"

enum guest_image_compression {
	GUEST_IMAGE_COMPRESSION_NONE, /* the default: nothing to decompress at boot */
	GUEST_IMAGE_COMPRESSION_GZIP,
};

struct guest_image_extra_file {
	const char *host_path;
	const char *guest_path; /* absolute, e.g. "/usr/local/bin/claude-code" */
	mode_t mode;            /* permissions, e.g. 0755 */
};

struct guest_image_build_options {
	const char *name;           /* NULL: "default" */
	const char *agent_path;     /* the static agent binary, installed as /init; required */
	const char *kernel_package; /* NULL: the linux-image-6.* that linux-image-amd64 names */
	const char *kernel_deb;     /* a local .deb to use instead of downloading; optional */
	const char *busybox_path;   /* NULL: /bin/busybox from busybox-static, else downloaded */
	const struct guest_image_extra_file *extra_files;
	size_t extra_file_count;
	const char *const *extra_modules; /* more module names to include (with their deps) */
	size_t extra_module_count;
	enum guest_image_compression compression;
	/* Every archive entry's mtime (the CLI passes $SOURCE_DATE_EPOCH); 0: the epoch. */
	uint32_t archive_mtime;
};

struct guest_image_info {
	char name[GUEST_IMAGE_NAME_MAX];
	char kernel_release[NAME_MAX];
	char built_at[32];
	uint64_t size_bytes; /* everything in the image directory */
};

struct guest_image_paths {
	char kernel[PATH_MAX];
	char initramfs[PATH_MAX];
};

/* $VOIDBOX_HOME, else $HOME/.void-box, as store_settings carries them (store_settings.h). */
int guest_image_home(char *out, size_t out_len);
/* $VOIDBOX_HOME/images/<name>; -EINVAL for names other than [A-Za-z0-9._-]+ (no "."/".."). */
int guest_image_dir(const char *name, char *out, size_t out_len);

/* Builds (or rebuilds) one image, logging progress; err says what to do on failure. */
int guest_image_build(const struct guest_image_build_options *options, char *err,
		      size_t errlen);

/* All built images, sorted by name; free *images with free(). */
int guest_image_list(struct guest_image_info **images, size_t *count, char *err,
		     size_t errlen);

/*
 * Removes one image, or every image when name is NULL. -ENOENT when the named one is absent.
 * Each image is renamed out of sight before its files go; temporaries that a killed build or
 * clean left are swept first, while a running build's staging directory is left alone.
 */
int guest_image_clean(const char *name, char *err, size_t errlen);

/*
 * Chooses the kernel and initramfs for a run, each on its own: the flag (non-NULL) wins, then
 * $VOID_BOX_KERNEL / $VOID_BOX_INITRAMFS (as store_settings carries them), then the built
 * default image. Every chosen file must
 * be readable. With nothing to use, the error is "no guest image: run `voidbox image build`".
 */
int guest_image_resolve(const char *flag_kernel, const char *flag_initramfs,
			struct guest_image_paths *out, char *err, size_t errlen);
/*
 * The same choice with the named image (an agent flavour's, "claude") in place of the
 * default one; NULL names the default. A missing named image's error names the command that
 * builds it: `voidbox image build --flavour NAME`.
 */
int guest_image_resolve_named(const char *image_name, const char *flag_kernel,
			      const char *flag_initramfs, struct guest_image_paths *out,
			      char *err, size_t errlen);

#endif
