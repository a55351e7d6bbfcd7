/*
 * Reads depends= from .ko files and orders a module set for loading.
 *
 * The ELF parser checks every offset against the file size before use: module files come from
 * a downloaded package and the parser is also a fuzz target. The ordering is a depth-first walk
 * with three colours per module, so a cycle is reported rather than looped on.
 */
#include "store/kmod_deps.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KMOD_DEPENDS_KEY "depends="
#define KMOD_MODINFO_SECTION ".modinfo"
#define KMOD_FILE_SUFFIX ".ko"
#define KMOD_MAX_FILE_SIZE (256u << 20)
#define KMOD_SCAN_FD_LIMIT 32
#define KMOD_INDEX_INITIAL_CAPACITY 256
#define KMOD_DEPENDS_MAX 1024

enum kmod_visit_state {
	KMOD_UNVISITED,
	KMOD_VISITING,
	KMOD_VISITED,
};

int kmod_modinfo_find_depends(const char *modinfo, size_t len, char *out, size_t out_len)
{
	size_t key_len = strlen(KMOD_DEPENDS_KEY);
	size_t pos = 0;

	while (pos < len) {
		const char *entry = modinfo + pos;
		const char *end = memchr(entry, '\0', len - pos);
		size_t entry_len = end ? (size_t)(end - entry) : len - pos;

		if (entry_len >= key_len && memcmp(entry, KMOD_DEPENDS_KEY, key_len) == 0) {
			size_t value_len = entry_len - key_len;

			if (value_len + 1 > out_len)
				return -ENAMETOOLONG;
			memcpy(out, entry + key_len, value_len);
			out[value_len] = '\0';
			return 0;
		}
		pos += entry_len + 1;
	}
	return -ENOENT;
}

static bool kmod_range_ok(size_t len, uint64_t offset, uint64_t size)
{
	return offset <= len && size <= len - offset;
}

int kmod_elf_find_modinfo(const unsigned char *image, size_t len, const char **modinfo,
			  size_t *modinfo_len)
{
	const Elf64_Ehdr *ehdr = (const Elf64_Ehdr *)image;
	const Elf64_Shdr *sections, *strtab;
	size_t name_len = strlen(KMOD_MODINFO_SECTION) + 1;

	if (len < sizeof(*ehdr) || memcmp(ehdr->e_ident, ELFMAG, SELFMAG) != 0 ||
	    ehdr->e_ident[EI_CLASS] != ELFCLASS64 || ehdr->e_ident[EI_DATA] != ELFDATA2LSB)
		return -ENOEXEC;
	if (ehdr->e_shentsize != sizeof(Elf64_Shdr) || ehdr->e_shnum == 0 ||
	    ehdr->e_shstrndx >= ehdr->e_shnum ||
	    !kmod_range_ok(len, ehdr->e_shoff, (uint64_t)ehdr->e_shnum * sizeof(Elf64_Shdr)) ||
	    ehdr->e_shoff % _Alignof(Elf64_Shdr) != 0)
		return -ENOEXEC;
	sections = (const Elf64_Shdr *)(image + ehdr->e_shoff);
	strtab = &sections[ehdr->e_shstrndx];
	if (!kmod_range_ok(len, strtab->sh_offset, strtab->sh_size))
		return -ENOEXEC;

	for (size_t i = 0; i < ehdr->e_shnum; i++) {
		const Elf64_Shdr *section = &sections[i];

		if (section->sh_name >= strtab->sh_size ||
		    strtab->sh_size - section->sh_name < name_len ||
		    memcmp(image + strtab->sh_offset + section->sh_name, KMOD_MODINFO_SECTION,
			   name_len) != 0)
			continue;
		if (section->sh_type == SHT_NOBITS ||
		    !kmod_range_ok(len, section->sh_offset, section->sh_size))
			return -ENOEXEC;
		*modinfo = (const char *)image + section->sh_offset;
		*modinfo_len = section->sh_size;
		return 0;
	}
	return -ENOEXEC;
}

static int kmod_read_file(const char *path, unsigned char **data, size_t *len)
{
	struct stat st;
	unsigned char *buf = NULL;
	size_t done = 0;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > KMOD_MAX_FILE_SIZE) {
		rc = -EINVAL;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	while (done < (size_t)st.st_size) {
		ssize_t got = read(fd, buf + done, (size_t)st.st_size - done);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			rc = got < 0 ? -errno : -EIO;
			goto out;
		}
		done += (size_t)got;
	}
	*data = buf;
	*len = done;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

int kmod_read_depends(const char *ko_path, char *out, size_t out_len)
{
	unsigned char *image = NULL;
	const char *modinfo;
	size_t len = 0, modinfo_len = 0;
	int rc;

	rc = kmod_read_file(ko_path, &image, &len);
	if (rc < 0)
		return rc;
	rc = kmod_elf_find_modinfo(image, len, &modinfo, &modinfo_len);
	if (rc == 0)
		rc = kmod_modinfo_find_depends(modinfo, modinfo_len, out, out_len);
	free(image);
	return rc;
}

void kmod_name_from_file(const char *file_name, char *out, size_t out_len)
{
	const char *base = strrchr(file_name, '/');
	size_t i = 0;

	base = base ? base + 1 : file_name;
	if (out_len == 0)
		return;
	for (; base[i] && i + 1 < out_len; i++) {
		if (strncmp(base + i, KMOD_FILE_SUFFIX, strlen(KMOD_FILE_SUFFIX)) == 0)
			break;
		out[i] = base[i] == '-' ? '_' : base[i];
	}
	out[i] = '\0';
}

/* nftw has no context argument; the scan is single-threaded and short. */
static struct kmod_index *kmod_scan_target;
static int kmod_scan_error;

static bool kmod_is_module_file(const char *path)
{
	size_t len = strlen(path), suffix_len = strlen(KMOD_FILE_SUFFIX);

	return len > suffix_len && strcmp(path + len - suffix_len, KMOD_FILE_SUFFIX) == 0;
}

static int kmod_index_add(struct kmod_index *index, const char *path)
{
	struct kmod_entry *entry;

	if (index->count == index->capacity) {
		size_t capacity = index->capacity ? index->capacity * 2 : KMOD_INDEX_INITIAL_CAPACITY;
		struct kmod_entry *grown = realloc(index->entries, capacity * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		index->entries = grown;
		index->capacity = capacity;
	}
	entry = &index->entries[index->count];
	kmod_name_from_file(path, entry->name, sizeof(entry->name));
	entry->path = strdup(path);
	if (!entry->path)
		return -ENOMEM;
	index->count++;
	return 0;
}

static int kmod_scan_visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type != FTW_F || !S_ISREG(st->st_mode) || !kmod_is_module_file(path))
		return 0;
	kmod_scan_error = kmod_index_add(kmod_scan_target, path);
	return kmod_scan_error ? 1 : 0;
}

int kmod_index_scan(struct kmod_index *index, const char *root)
{
	int rc;

	memset(index, 0, sizeof(*index));
	kmod_scan_target = index;
	kmod_scan_error = 0;
	rc = nftw(root, kmod_scan_visit, KMOD_SCAN_FD_LIMIT, FTW_PHYS);
	kmod_scan_target = NULL;
	if (rc < 0)
		rc = -errno;
	else if (kmod_scan_error)
		rc = kmod_scan_error;
	if (rc < 0)
		kmod_index_free(index);
	return rc;
}

const struct kmod_entry *kmod_index_find(const struct kmod_index *index, const char *name)
{
	for (size_t i = 0; i < index->count; i++)
		if (strcmp(index->entries[i].name, name) == 0)
			return &index->entries[i];
	return NULL;
}

void kmod_index_free(struct kmod_index *index)
{
	for (size_t i = 0; i < index->count; i++)
		free(index->entries[i].path);
	free(index->entries);
	memset(index, 0, sizeof(*index));
}

struct kmod_walk {
	const struct kmod_index *index;
	enum kmod_visit_state *state;
	struct kmod_load_order *order;
	char *missing;
	size_t missing_len;
};

static void kmod_walk_note_missing(struct kmod_walk *walk, const char *name)
{
	if (walk->missing_len)
		snprintf(walk->missing, walk->missing_len, "%s", name);
}

static int kmod_walk_visit(struct kmod_walk *walk, const struct kmod_entry *entry)
{
	size_t slot = (size_t)(entry - walk->index->entries);
	char depends[KMOD_DEPENDS_MAX];
	char *cursor, *dep;
	int rc;

	if (walk->state[slot] == KMOD_VISITED)
		return 0;
	if (walk->state[slot] == KMOD_VISITING) {
		kmod_walk_note_missing(walk, entry->name);
		return -ELOOP;
	}
	walk->state[slot] = KMOD_VISITING;
	rc = kmod_read_depends(entry->path, depends, sizeof(depends));
	if (rc == -ENOENT)
		depends[0] = '\0'; /* no depends= at all: nothing to load first */
	else if (rc < 0) {
		kmod_walk_note_missing(walk, entry->name);
		return rc;
	}
	for (cursor = depends; (dep = strsep(&cursor, ",")) != NULL;) {
		const struct kmod_entry *dep_entry;

		if (!*dep)
			continue;
		dep_entry = kmod_index_find(walk->index, dep);
		if (!dep_entry) {
			kmod_walk_note_missing(walk, dep);
			return -ENOENT;
		}
		rc = kmod_walk_visit(walk, dep_entry);
		if (rc < 0)
			return rc;
	}
	walk->state[slot] = KMOD_VISITED;
	walk->order->modules[walk->order->count++] = entry;
	return 0;
}

int kmod_resolve_load_order(const struct kmod_index *index, const char *const *wanted,
			    size_t wanted_count, kmod_builtin_fn is_builtin, void *builtin_ctx,
			    struct kmod_load_order *order, char *missing, size_t missing_len)
{
	struct kmod_walk walk = {
		.index = index, .order = order, .missing = missing, .missing_len = missing_len,
	};
	int rc = 0;

	memset(order, 0, sizeof(*order));
	walk.state = calloc(index->count ? index->count : 1, sizeof(*walk.state));
	order->modules = calloc(index->count ? index->count : 1, sizeof(*order->modules));
	if (!walk.state || !order->modules) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < wanted_count && rc == 0; i++) {
		const struct kmod_entry *entry = kmod_index_find(index, wanted[i]);

		if (entry)
			rc = kmod_walk_visit(&walk, entry);
		else if (!is_builtin || !is_builtin(wanted[i], builtin_ctx)) {
			kmod_walk_note_missing(&walk, wanted[i]);
			rc = -ENOENT;
		}
	}
out:
	free(walk.state);
	if (rc < 0)
		kmod_load_order_free(order);
	return rc;
}

void kmod_load_order_free(struct kmod_load_order *order)
{
	free(order->modules);
	memset(order, 0, sizeof(*order));
}
