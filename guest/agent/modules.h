/*
 * Kernel module loading in dependency order derived at run time. The image builder decides
 * which .ko files exist under /lib/modules; the agent reads each module's ELF .modinfo
 * (name=, depends=) and loads dependencies first, so no order is ever hard-coded. Modules whose
 * dependencies cannot be read (compressed files) are retried in passes until nothing new loads.
 * The ordering and .modinfo parsing are pure functions so tests feed synthetic data.
 */
#ifndef VOIDBOX_AGENT_MODULES_H
#define VOIDBOX_AGENT_MODULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct module_entry {
	char *name;     /* canonical: dashes replaced by underscores */
	char *depends;  /* comma-separated names; "" none; NULL unknown */
	char *path;     /* file to load; may be NULL in tests */
	bool compressed;
};

/*
 * Writes into order[] a permutation of 0..count-1 in which every module comes after the modules
 * it depends on. Dependencies not in the list are ignored (built in, or absent from the image);
 * a dependency cycle is broken at the back edge. Ties keep the input order. Returns 0 or
 * -ENOMEM.
 */
int modules_order(const struct module_entry *mods, size_t count, size_t *order);

/*
 * Extracts name= and depends= from the .modinfo section of an ELF64 little-endian module image.
 * Either output is set to a heap string (name NULL if the section has none; depends "" when
 * the key is present but empty, NULL when absent). Returns 0, or -ENOEXEC for anything that is
 * not a well-formed ELF64 with a .modinfo section; never reads out of bounds.
 */
int modinfo_parse(const uint8_t *image, size_t len, char **name, char **depends);

/* Replaces '-' by '_' in place, as module names are canonicalised by the kernel. */
void module_name_canonicalize(char *name);

/* Recursively collects *.ko, *.ko.xz, *.ko.zst, *.ko.gz under dir, sorted by name. */
int modules_scan(const char *dir, struct module_entry **mods, size_t *count);
void modules_free(struct module_entry *mods, size_t count);

/*
 * Marks in wanted[] the modules named in roots (NULL-terminated) and, transitively, every
 * module they depend on. A wanted module whose dependencies cannot be read (depends NULL)
 * makes every module wanted, since what it needs is unknown. Roots absent from the list are
 * ignored (built in). Returns the number of wanted modules.
 */
size_t modules_mark_wanted(const struct module_entry *mods, size_t count,
			   const char *const *roots, bool *wanted);

/*
 * Loads the modules under modules_dir that roots (NULL-terminated; NULL means every module)
 * need, with finit_module, dependencies first. Loading only what the VM's devices use keeps
 * the boot short: each module costs a relocation pass that is slow under emulation. A module
 * listed in sysfs_module_dir (/sys/module/NAME: built in or already loaded) or answering EEXIST
 * counts as loaded. Parameters come from "<name>.<param>=" tokens of cmdline_text. Returns the
 * number of modules that could not be loaded (0 when all are in), or -errno when the directory
 * cannot be scanned; a missing directory is 0 (everything built in).
 */
int modules_load_all(const char *modules_dir, const char *sysfs_module_dir,
		     const char *cmdline_text, const char *const *roots);

#endif
