/*
 * Module discovery, .modinfo parsing, dependency ordering and finit_module loading, kept in one
 * file because they form one boot step. The ordering is a depth-first post-order over the
 * modules present; loading then walks that order in passes so a module whose dependencies were
 * unknown (compressed .ko) still loads once its dependencies are in. Every ELF offset is
 * bounds-checked because a corrupt file must never crash PID 1.
 */
#include "modules.h"

#include "agent_log.h"
#include "cmdline.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE 4
#endif

#define MODINFO_SECTION ".modinfo"
#define MODINFO_NAME_KEY "name="
#define MODINFO_DEPENDS_KEY "depends="
#define MODULES_SCAN_MAX_DEPTH 8
#define MODULES_PARAMS_MAX 4096
#define MODULES_NAME_MAX 64 /* the kernel's MODULE_NAME_LEN is 56 */
#define MODULES_INITIAL_CAPACITY 16
#define MODULES_MAX_FILE_SIZE (256u * 1024u * 1024u)

static const char *const module_suffixes[] = { ".ko", ".ko.xz", ".ko.zst", ".ko.gz" };

enum visit_state {
	VISIT_NEW,
	VISIT_ACTIVE,
	VISIT_DONE,
};

void module_name_canonicalize(char *name)
{
	for (; *name; name++)
		if (*name == '-')
			*name = '_';
}

static ssize_t modules_find(const struct module_entry *mods, size_t count, const char *name,
			    size_t name_len)
{
	for (size_t i = 0; i < count; i++)
		if (strlen(mods[i].name) == name_len && memcmp(mods[i].name, name, name_len) == 0)
			return (ssize_t)i;
	return -1;
}

struct order_walk {
	const struct module_entry *mods;
	size_t count;
	enum visit_state *state;
	size_t *order;
	size_t filled;
};

static void order_visit(struct order_walk *walk, size_t index)
{
	const char *dep;

	if (walk->state[index] != VISIT_NEW)
		return;
	walk->state[index] = VISIT_ACTIVE;
	dep = walk->mods[index].depends;
	while (dep && *dep) {
		const char *end = strchr(dep, ',');
		size_t len = end ? (size_t)(end - dep) : strlen(dep);
		char canonical[NAME_MAX + 1];
		ssize_t found = -1;

		if (len > 0 && len <= NAME_MAX) {
			memcpy(canonical, dep, len);
			canonical[len] = '\0';
			module_name_canonicalize(canonical);
			found = modules_find(walk->mods, walk->count, canonical, len);
		}
		if (found >= 0 && walk->state[found] == VISIT_NEW)
			order_visit(walk, (size_t)found);
		dep = end ? end + 1 : NULL;
	}
	walk->state[index] = VISIT_DONE;
	walk->order[walk->filled++] = index;
}

int modules_order(const struct module_entry *mods, size_t count, size_t *order)
{
	struct order_walk walk = { .mods = mods, .count = count, .order = order };

	if (count == 0)
		return 0;
	walk.state = calloc(count, sizeof(*walk.state));
	if (!walk.state)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++)
		order_visit(&walk, i);
	free(walk.state);
	return 0;
}

/* Returns the section header at index, or NULL when it lies outside the image. */
static const Elf64_Shdr *elf_section(const uint8_t *image, size_t len, const Elf64_Ehdr *ehdr,
				     size_t index)
{
	uint64_t offset;

	if (index >= ehdr->e_shnum)
		return NULL;
	offset = ehdr->e_shoff + (uint64_t)index * ehdr->e_shentsize;
	if (offset < ehdr->e_shoff || offset > len || len - offset < sizeof(Elf64_Shdr))
		return NULL;
	return (const Elf64_Shdr *)(image + offset);
}

static bool elf_range_ok(size_t len, uint64_t offset, uint64_t size)
{
	return offset <= len && size <= len - offset;
}

static int modinfo_find_section(const uint8_t *image, size_t len, const uint8_t **data,
				size_t *size)
{
	const Elf64_Ehdr *ehdr = (const Elf64_Ehdr *)image;
	const Elf64_Shdr *strtab;

	if (len < sizeof(*ehdr) || memcmp(ehdr->e_ident, ELFMAG, SELFMAG) != 0 ||
	    ehdr->e_ident[EI_CLASS] != ELFCLASS64 || ehdr->e_ident[EI_DATA] != ELFDATA2LSB ||
	    ehdr->e_shentsize < sizeof(Elf64_Shdr))
		return -ENOEXEC;
	strtab = elf_section(image, len, ehdr, ehdr->e_shstrndx);
	if (!strtab || !elf_range_ok(len, strtab->sh_offset, strtab->sh_size))
		return -ENOEXEC;
	for (size_t i = 0; i < ehdr->e_shnum; i++) {
		const Elf64_Shdr *shdr = elf_section(image, len, ehdr, i);
		size_t name_len = sizeof(MODINFO_SECTION);

		if (!shdr)
			return -ENOEXEC;
		if (shdr->sh_name >= strtab->sh_size || strtab->sh_size - shdr->sh_name < name_len)
			continue;
		if (memcmp(image + strtab->sh_offset + shdr->sh_name, MODINFO_SECTION, name_len) != 0)
			continue;
		if (shdr->sh_type == SHT_NOBITS ||
		    !elf_range_ok(len, shdr->sh_offset, shdr->sh_size))
			return -ENOEXEC;
		*data = image + shdr->sh_offset;
		*size = shdr->sh_size;
		return 0;
	}
	return -ENOEXEC;
}

/* If the NUL-bounded string at entry starts with key, duplicates its value into *out. */
static int modinfo_take(const uint8_t *entry, size_t entry_len, const char *key, char **out)
{
	size_t key_len = strlen(key);
	char *value;

	if (entry_len < key_len || memcmp(entry, key, key_len) != 0)
		return 0;
	value = strndup((const char *)entry + key_len, entry_len - key_len);
	if (!value)
		return -ENOMEM;
	free(*out);
	*out = value;
	return 0;
}

int modinfo_parse(const uint8_t *image, size_t len, char **name, char **depends)
{
	const uint8_t *data;
	size_t size, pos = 0;
	int err;

	*name = NULL;
	*depends = NULL;
	err = modinfo_find_section(image, len, &data, &size);
	if (err)
		return err;
	while (pos < size) {
		const uint8_t *nul = memchr(data + pos, '\0', size - pos);
		size_t entry_len = nul ? (size_t)(nul - (data + pos)) : size - pos;

		err = modinfo_take(data + pos, entry_len, MODINFO_NAME_KEY, name);
		if (!err)
			err = modinfo_take(data + pos, entry_len, MODINFO_DEPENDS_KEY, depends);
		if (err) {
			free(*name);
			free(*depends);
			*name = *depends = NULL;
			return err;
		}
		pos += entry_len + 1;
	}
	return 0;
}

static const char *module_suffix_of(const char *file)
{
	size_t len = strlen(file);

	for (size_t i = 0; i < sizeof(module_suffixes) / sizeof(module_suffixes[0]); i++) {
		size_t slen = strlen(module_suffixes[i]);

		if (len > slen && strcmp(file + len - slen, module_suffixes[i]) == 0)
			return module_suffixes[i];
	}
	return NULL;
}

/* Reads name= and depends= from an uncompressed module file; leaves them unknown on failure. */
static void module_read_modinfo(struct module_entry *entry)
{
	struct stat st;
	void *image;
	char *name = NULL, *depends = NULL;
	int fd;

	fd = open(entry->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || (uint64_t)st.st_size > MODULES_MAX_FILE_SIZE)
		goto out_close;
	image = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (image == MAP_FAILED)
		goto out_close;
	if (modinfo_parse(image, (size_t)st.st_size, &name, &depends) == 0) {
		if (name && *name) {
			module_name_canonicalize(name);
			free(entry->name);
			entry->name = name;
			name = NULL;
		}
		entry->depends = depends;
	} else {
		agent_warn("module %s: no readable .modinfo; loading it by retry passes",
			   entry->path);
	}
	free(name);
	munmap(image, (size_t)st.st_size);
out_close:
	close(fd);
}

struct module_list {
	struct module_entry *items;
	size_t count;
	size_t capacity;
};

static int module_list_add(struct module_list *list, const char *dir, const char *file,
			   const char *suffix)
{
	struct module_entry *entry;

	if (list->count == list->capacity) {
		size_t capacity = list->capacity ? 2 * list->capacity : MODULES_INITIAL_CAPACITY;
		struct module_entry *items = realloc(list->items, capacity * sizeof(*items));

		if (!items)
			return -ENOMEM;
		list->items = items;
		list->capacity = capacity;
	}
	entry = &list->items[list->count];
	memset(entry, 0, sizeof(*entry));
	entry->name = strndup(file, strlen(file) - strlen(suffix));
	if (!entry->name || asprintf(&entry->path, "%s/%s", dir, file) < 0) {
		free(entry->name);
		return -ENOMEM;
	}
	list->count++;
	module_name_canonicalize(entry->name);
	entry->compressed = strcmp(suffix, ".ko") != 0;
	if (!entry->compressed)
		module_read_modinfo(entry);
	return 0;
}

static int modules_scan_dir(const char *dir, int depth, struct module_list *list)
{
	DIR *d;
	struct dirent *de;
	int err = 0;

	if (depth > MODULES_SCAN_MAX_DEPTH)
		return 0;
	d = opendir(dir);
	if (!d)
		return depth == 0 ? -errno : 0;
	while (!err && (de = readdir(d))) {
		const char *suffix;
		char *child;

		if (de->d_name[0] == '.')
			continue;
		if (de->d_type == DT_DIR) {
			if (asprintf(&child, "%s/%s", dir, de->d_name) < 0) {
				err = -ENOMEM;
				continue;
			}
			err = modules_scan_dir(child, depth + 1, list);
			free(child);
			continue;
		}
		suffix = module_suffix_of(de->d_name);
		if (suffix && (de->d_type == DT_REG || de->d_type == DT_UNKNOWN))
			err = module_list_add(list, dir, de->d_name, suffix);
	}
	closedir(d);
	return err;
}

static int module_entry_compare(const void *a, const void *b)
{
	const struct module_entry *ma = a, *mb = b;

	return strcmp(ma->name, mb->name);
}

int modules_scan(const char *dir, struct module_entry **mods, size_t *count)
{
	struct module_list list = { 0 };
	int err;

	err = modules_scan_dir(dir, 0, &list);
	if (err) {
		modules_free(list.items, list.count);
		return err;
	}
	if (list.count)
		qsort(list.items, list.count, sizeof(*list.items), module_entry_compare);
	*mods = list.items;
	*count = list.count;
	return 0;
}

void modules_free(struct module_entry *mods, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		free(mods[i].name);
		free(mods[i].depends);
		free(mods[i].path);
	}
	free(mods);
}

static bool module_present_in_sysfs(const char *sysfs_module_dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/%s", sysfs_module_dir, name) >= (int)sizeof(path))
		return false;
	return stat(path, &st) == 0;
}

/* Returns 0 when the module is in the kernel afterwards, or -errno. */
static int module_load_one(const struct module_entry *entry, const char *sysfs_module_dir,
			   const char *cmdline_text)
{
	char params[MODULES_PARAMS_MAX];
	int fd, rc, flags = entry->compressed ? MODULE_INIT_COMPRESSED_FILE : 0;

	if (module_present_in_sysfs(sysfs_module_dir, entry->name))
		return 0;
	if (cmdline_module_params(cmdline_text, entry->name, params, sizeof(params)) < 0) {
		agent_warn("module %s: parameters on the command line too long; loading without",
			   entry->name);
		params[0] = '\0';
	}
	fd = open(entry->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = (int)syscall(SYS_finit_module, fd, params, flags);
	rc = rc < 0 ? -errno : 0;
	close(fd);
	if (rc == -EEXIST)
		return 0;
	if (rc == 0)
		agent_info("loaded module %s%s%s", entry->name, params[0] ? " " : "", params);
	return rc;
}

static size_t modules_load_pass(const struct module_entry *mods, const size_t *order,
				size_t count, int *result, const char *sysfs_module_dir,
				const char *cmdline_text)
{
	size_t loaded = 0;

	for (size_t i = 0; i < count; i++) {
		size_t index = order[i];

		if (result[index] == 0)
			continue;
		result[index] = module_load_one(&mods[index], sysfs_module_dir, cmdline_text);
		if (result[index] == 0)
			loaded++;
	}
	return loaded;
}

/* Marks index and its dependencies; false when a wanted module's dependencies are unknown. */
static bool modules_want(const struct module_entry *mods, size_t count, size_t index,
			 bool *wanted)
{
	char *depends, *cursor, *name;
	bool known = true;

	if (wanted[index])
		return true;
	wanted[index] = true;
	if (!mods[index].depends)
		return false;
	depends = strdup(mods[index].depends);
	if (!depends)
		return false;
	for (cursor = depends; (name = strsep(&cursor, ",")) != NULL;) {
		ssize_t dep;

		if (!*name)
			continue;
		module_name_canonicalize(name);
		dep = modules_find(mods, count, name, strlen(name));
		if (dep >= 0 && !modules_want(mods, count, (size_t)dep, wanted))
			known = false;
	}
	free(depends);
	return known;
}

size_t modules_mark_wanted(const struct module_entry *mods, size_t count,
			   const char *const *roots, bool *wanted)
{
	bool closure_known = true;
	size_t marked = 0;

	for (size_t i = 0; i < count; i++)
		wanted[i] = roots == NULL;
	for (size_t r = 0; roots && roots[r]; r++) {
		char name[MODULES_NAME_MAX];
		ssize_t index;

		snprintf(name, sizeof(name), "%s", roots[r]);
		module_name_canonicalize(name);
		index = modules_find(mods, count, name, strlen(name));
		if (index >= 0 && !modules_want(mods, count, (size_t)index, wanted))
			closure_known = false;
	}
	for (size_t i = 0; i < count; i++) {
		if (!closure_known)
			wanted[i] = true;
		marked += wanted[i];
	}
	return marked;
}

int modules_load_all(const char *modules_dir, const char *sysfs_module_dir,
		     const char *cmdline_text, const char *const *roots)
{
	bool *wanted = NULL;
	struct module_entry *mods = NULL;
	size_t count = 0, *order = NULL, pending = 0;
	int *result = NULL, err;

	err = modules_scan(modules_dir, &mods, &count);
	if (err == -ENOENT || (err == 0 && count == 0)) {
		agent_info("no modules under %s: assuming drivers are built in", modules_dir);
		return 0;
	}
	if (err)
		return err;
	order = calloc(count, sizeof(*order));
	result = calloc(count, sizeof(*result));
	wanted = calloc(count, sizeof(*wanted));
	if (!order || !result || !wanted || modules_order(mods, count, order) < 0) {
		err = -ENOMEM;
		goto out;
	}
	agent_info("loading %zu of the %zu modules under %s",
		   modules_mark_wanted(mods, count, roots, wanted), count, modules_dir);
	for (size_t i = 0; i < count; i++)
		result[i] = wanted[i] ? -EAGAIN : 0;
	while (modules_load_pass(mods, order, count, result, sysfs_module_dir, cmdline_text) > 0)
		;
	for (size_t i = 0; i < count; i++) {
		if (result[i] == 0)
			continue;
		pending++;
		agent_error("module %s (%s) failed to load: %s", mods[i].name, mods[i].path,
			    strerror(-result[i]));
	}
	err = (int)pending;
out:
	free(order);
	free(result);
	free(wanted);
	modules_free(mods, count);
	return err;
}
