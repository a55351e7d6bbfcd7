/*
 * Kernel module dependencies read from the modules themselves.
 *
 * A module's dependencies are in its ELF ".modinfo" section as a NUL-separated
 * "depends=a,b" string. Unpacking a kernel package with `dpkg-deb -x` leaves no modules.dep
 * (depmod only runs on install), and load order changes between kernel ABIs, so the guest image
 * builder derives the order here at build time instead of keeping a fixed list.
 */
#ifndef VOIDBOX_STORE_KMOD_DEPS_H
#define VOIDBOX_STORE_KMOD_DEPS_H

#include <stddef.h>

#define KMOD_NAME_MAX 64

/*
 * Finds "depends=" in a .modinfo section's bytes; copies its value ("" when the module
 * depends on nothing) into out. -ENOENT when there is no depends= entry, -ENAMETOOLONG when
 * out is too small.
 */
int kmod_modinfo_find_depends(const char *modinfo, size_t len, char *out, size_t out_len);

/* Locates the .modinfo section in an ELF64 image in memory; -ENOEXEC when malformed. */
int kmod_elf_find_modinfo(const unsigned char *image, size_t len, const char **modinfo,
			  size_t *modinfo_len);

/* Reads a plain (uncompressed) .ko file and returns its depends= value. */
int kmod_read_depends(const char *ko_path, char *out, size_t out_len);

/* "kvm-amd.ko" -> "kvm_amd": the name depends= and /sys/module use. */
void kmod_name_from_file(const char *file_name, char *out, size_t out_len);

struct kmod_entry {
	char name[KMOD_NAME_MAX];
	char *path;
};

/* Every .ko under a directory tree, by module name. */
struct kmod_index {
	struct kmod_entry *entries;
	size_t count;
	size_t capacity;
};

int kmod_index_scan(struct kmod_index *index, const char *root);
const struct kmod_entry *kmod_index_find(const struct kmod_index *index, const char *name);
void kmod_index_free(struct kmod_index *index);

/* Modules in load order: every module after everything it depends on. */
struct kmod_load_order {
	const struct kmod_entry **modules;
	size_t count;
};

/*
 * Computes the closure of `wanted` (module names) over depends=, dependencies first.
 * A wanted name the index lacks is skipped when is_builtin(name, ctx) says so and is an
 * error (-ENOENT, its name in missing) otherwise; a dependency cycle is -ELOOP.
 */
typedef int (*kmod_builtin_fn)(const char *name, void *ctx);
int kmod_resolve_load_order(const struct kmod_index *index, const char *const *wanted,
			    size_t wanted_count, kmod_builtin_fn is_builtin, void *builtin_ctx,
			    struct kmod_load_order *order, char *missing, size_t missing_len);
void kmod_load_order_free(struct kmod_load_order *order);

#endif
