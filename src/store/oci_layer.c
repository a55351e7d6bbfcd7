/*
 * OCI layers onto a directory (see oci_layer.h). libarchive reads the layer (any of its
 * compressions) and writes each entry with its "secure" flags: no absolute paths, no "..",
 * no writing through a symlink. Those checks are repeated here before any entry is written,
 * so a hostile layer is refused as a whole, with its bad entry named, instead of entry by
 * entry. The working directory is the root while a layer is written, because libarchive
 * resolves names against it. The working directory belongs to the whole process, so the
 * applying thread first takes one of its own (unshare(CLONE_FS)), and layers are applied one
 * at a time in a process (a mutex, which alone keeps two unpackers apart where unshare is
 * refused): otherwise one thread's return to its old directory would send another thread's
 * entries into it.
 *
 * A layer spends from its image's budget (oci_layer.h) before anything is written: an entry's
 * declared size, one entry, and its name's bytes. Declared sizes bound what libarchive writes
 * (it writes no more than an entry declares), so a decompression bomb is refused at the
 * header of the entry that would exceed the budget, not when the disk is full.
 *
 * Whiteouts and replacements delete from what lower layers wrote. The directory they
 * delete in is opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from the root, and
 * removals go through that descriptor with unlinkat and O_NOFOLLOW opens, so a symlink a
 * lower layer planted can never turn a deletion into one on the host. An opaque directory
 * loses everything that this layer did not write itself: the paths a layer writes are kept
 * in a hash set while it is applied, because the marker may come before or after its
 * siblings in the archive.
 *
 * An entry that replaces an existing one of another type (a file over a directory, a
 * directory over a symlink) removes the old one first; a directory over a directory merges,
 * as overlayfs does. An existing file is always removed before it is rewritten, so a hard
 * link from a lower layer never sees the upper layer's bytes.
 *
 * libarchive is opened by the first layer applied (src/dynlib/archive_dl.h).
 */
#include "store/oci_layer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "dynlib/archive_dl.h"

#define OCI_LAYER_LOG "oci"
#define OCI_LAYER_PURPOSE "unpacking an OCI image layer"
#define OCI_LAYER_PATH_MAX 4096
#define OCI_LAYER_BLOCK_BYTES 65536
#define OCI_SET_INITIAL_SLOTS 1024u
#define OCI_FNV_OFFSET 1469598103934665603ull
#define OCI_FNV_PRIME 1099511628211ull

/* The paths one layer wrote, for opaque directories: open addressing, grown at half full. */
struct oci_path_set {
	char **slots;
	size_t capacity;
	size_t count;
};

struct oci_apply {
	const char *archive_path;
	int root_fd;
	struct archive *in;
	struct archive *out;
	struct oci_path_set written;
	struct oci_layer_budget *budget;
	struct oci_layer_stats *stats;
	char *err;
	size_t errlen;
};

static uint64_t oci_hash(const char *text)
{
	uint64_t hash = OCI_FNV_OFFSET;

	for (; *text; text++)
		hash = (hash ^ (uint8_t)*text) * OCI_FNV_PRIME;
	return hash;
}

static size_t oci_set_slot(const struct oci_path_set *set, const char *path)
{
	size_t slot = (size_t)(oci_hash(path) & (set->capacity - 1));

	while (set->slots[slot] && strcmp(set->slots[slot], path) != 0)
		slot = (slot + 1) & (set->capacity - 1);
	return slot;
}

static bool oci_set_has(const struct oci_path_set *set, const char *path)
{
	return set->capacity && set->slots[oci_set_slot(set, path)];
}

static int oci_set_add(struct oci_path_set *set, const char *path)
{
	size_t slot;

	if (2 * (set->count + 1) > set->capacity) {
		struct oci_path_set grown = { .capacity = set->capacity ? 2 * set->capacity
									 : OCI_SET_INITIAL_SLOTS };

		grown.slots = calloc(grown.capacity, sizeof(*grown.slots));
		if (!grown.slots)
			return -ENOMEM;
		for (size_t i = 0; i < set->capacity; i++)
			if (set->slots[i])
				grown.slots[oci_set_slot(&grown, set->slots[i])] = set->slots[i];
		grown.count = set->count;
		free(set->slots);
		*set = grown;
	}
	slot = oci_set_slot(set, path);
	if (set->slots[slot])
		return 0;
	set->slots[slot] = strdup(path);
	if (!set->slots[slot])
		return -ENOMEM;
	set->count++;
	return 0;
}

static void oci_set_free(struct oci_path_set *set)
{
	for (size_t i = 0; i < set->capacity; i++)
		free(set->slots[i]);
	free(set->slots);
	memset(set, 0, sizeof(*set));
}

int oci_layer_normalize_path(const char *name, char *out, size_t size)
{
	size_t used = 0;
	const char *p = name;

	if (!name || name[0] == '/')
		return -EINVAL;
	while (*p) {
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (len > 0 && !(len == 1 && p[0] == '.')) {
			if (used + (used ? 1 : 0) + len + 1 > size)
				return -EINVAL;
			if (used)
				out[used++] = '/';
			memmove(out + used, p, len); /* out may be name itself */
			used += len;
		}
		p += len;
		while (*p == '/')
			p++;
	}
	if (size == 0)
		return -EINVAL;
	out[used] = '\0';
	return 0;
}

/* Splits rel into its directory ("" for the root) and its last component. */
static void oci_split(const char *rel, char *dir, size_t dir_size, const char **base)
{
	const char *slash = strrchr(rel, '/');
	size_t len = slash ? (size_t)(slash - rel) : 0;

	if (len >= dir_size)
		len = dir_size - 1;
	memcpy(dir, rel, len);
	dir[len] = '\0';
	*base = slash ? slash + 1 : rel;
}

/* Opens dir (relative to the root) without following any symlink; -errno on failure. */
static int oci_open_dir(const struct oci_apply *apply, const char *dir, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_DIRECTORY | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, apply->root_fd, dir[0] ? dir : ".", &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/* Removes name in dirfd and, for a directory, everything below it; symlinks are not followed. */
static int oci_remove_at(int parent_fd, const char *name)
{
	struct stat st;
	struct dirent *child;
	DIR *dir;
	int fd, rc = 0;

	if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(parent_fd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	while (rc == 0 && (child = readdir(dir)))
		if (strcmp(child->d_name, ".") != 0 && strcmp(child->d_name, "..") != 0)
			rc = oci_remove_at(dirfd(dir), child->d_name);
	closedir(dir);
	if (rc == 0 && unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = -errno;
	return rc;
}

/* Empties dir of everything this layer did not write (recursing into what it merged). */
static int oci_clear_opaque(struct oci_apply *apply, const char *dir)
{
	char child_path[OCI_LAYER_PATH_MAX];
	struct dirent *child;
	DIR *listing;
	int fd = oci_open_dir(apply, dir, O_RDONLY), rc = 0;

	if (fd < 0)
		return fd == -ENOENT || fd == -ENOTDIR ? 0 : fd;
	listing = fdopendir(fd);
	if (!listing) {
		close(fd);
		return -errno;
	}
	while (rc == 0 && (child = readdir(listing))) {
		if (strcmp(child->d_name, ".") == 0 || strcmp(child->d_name, "..") == 0)
			continue;
		if (snprintf(child_path, sizeof(child_path), "%s%s%s", dir, dir[0] ? "/" : "",
			     child->d_name) >= (int)sizeof(child_path)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (!oci_set_has(&apply->written, child_path))
			rc = oci_remove_at(dirfd(listing), child->d_name);
		else if (child->d_type == DT_DIR)
			rc = oci_clear_opaque(apply, child_path);
	}
	closedir(listing);
	return rc;
}

static int oci_fail(struct oci_apply *apply, int rc, const char *entry, const char *why)
{
	snprintf(apply->err, apply->errlen, "layer %s: entry '%s' %s", apply->archive_path,
		 entry, why);
	return rc;
}

/* A .wh.NAME or opaque marker; 1 when name was one (and applied), 0 when not, or -errno. */
static int oci_apply_whiteout(struct oci_apply *apply, const char *rel, const char *dir,
			      const char *base)
{
	char target[OCI_LAYER_PATH_MAX];
	const char *target_base;
	char target_dir[OCI_LAYER_PATH_MAX];
	int fd, rc;

	if (strcmp(base, OCI_OPAQUE_MARKER) == 0) {
		rc = oci_clear_opaque(apply, dir);
		if (rc == -ELOOP || rc == -EXDEV) {
			log_warn(OCI_LAYER_LOG, "layer %s: opaque marker '%s' is under a symlink; "
				 "skipped", apply->archive_path, rel);
			apply->stats->skipped++;
			return 1;
		}
		if (rc < 0)
			return oci_fail(apply, rc, rel, "(an opaque directory) could not be emptied");
		apply->stats->whiteouts++;
		return 1;
	}
	if (strncmp(base, OCI_WHITEOUT_PREFIX, strlen(OCI_WHITEOUT_PREFIX)) != 0)
		return 0;
	if (snprintf(target, sizeof(target), "%s%s%s", dir, dir[0] ? "/" : "",
		     base + strlen(OCI_WHITEOUT_PREFIX)) >= (int)sizeof(target) ||
	    oci_layer_normalize_path(target, target, sizeof(target)) < 0 ||
	    strcmp(target, dir) == 0)
		return oci_fail(apply, -EINVAL, rel, "is a whiteout of nothing a layer may delete");
	oci_split(target, target_dir, sizeof(target_dir), &target_base);
	fd = oci_open_dir(apply, target_dir, O_PATH);
	if (fd == -ENOENT || fd == -ENOTDIR) {
		apply->stats->whiteouts++;
		return 1; /* nothing there to delete */
	}
	if (fd < 0) {
		log_warn(OCI_LAYER_LOG, "layer %s: whiteout '%s' is under a symlink; skipped",
			 apply->archive_path, rel);
		apply->stats->skipped++;
		return 1;
	}
	rc = oci_remove_at(fd, target_base);
	close(fd);
	if (rc < 0)
		return oci_fail(apply, rc, rel, "(a whiteout) could not delete its target");
	apply->stats->whiteouts++;
	return 1;
}

/*
 * Makes room for an entry: whatever a lower layer left at rel goes unless both are
 * directories. 0, 1 when the entry must be skipped (its directory is a symlink), or -errno.
 */
static int oci_make_room(struct oci_apply *apply, const char *dir, const char *base,
			 bool entry_is_dir)
{
	struct stat st;
	int fd = oci_open_dir(apply, dir, O_PATH), rc = 0;

	if (fd == -ELOOP || fd == -EXDEV)
		return 1;
	if (fd < 0) /* nothing there yet, or not a directory: libarchive says what it can */
		return 0;
	if (fstatat(fd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !(entry_is_dir && S_ISDIR(st.st_mode)))
		rc = oci_remove_at(fd, base);
	close(fd);
	return rc;
}

static int oci_copy_data(struct oci_apply *apply, const char *rel)
{
	const void *block;
	size_t size;
	la_int64_t offset;
	int rc;

	while ((rc = archive_dl.read_data_block(apply->in, &block, &size, &offset)) == ARCHIVE_OK)
		if (archive_dl.write_data_block(apply->out, block, size, offset) < ARCHIVE_OK)
			return oci_fail(apply, -EIO, rel, archive_dl.error_string(apply->out));
	if (rc != ARCHIVE_EOF)
		return oci_fail(apply, -EIO, rel, archive_dl.error_string(apply->in));
	return 0;
}

static void oci_skip(struct oci_apply *apply, const char *rel, const char *why)
{
	log_warn(OCI_LAYER_LOG, "layer %s: entry '%s' skipped: %s", apply->archive_path, rel,
		 why ? why : "it cannot be created here");
	apply->stats->skipped++;
}

/* Takes the entry's share of the image's budget; -EFBIG with err when it does not fit. */
static int oci_spend(struct oci_apply *apply, struct archive_entry *entry, const char *rel)
{
	struct oci_layer_budget *budget = apply->budget;
	la_int64_t declared = archive_dl.entry_size(entry);
	uint64_t data = declared > 0 ? (uint64_t)declared : 0, name = strlen(rel) + 1;

	if (budget->entries == 0) {
		snprintf(apply->err, apply->errlen, "layer %s: entry '%s' is past the %llu entries "
			 "voidbox unpacks for one image; the image is refused", apply->archive_path,
			 rel, (unsigned long long)OCI_IMAGE_ENTRIES_MAX);
		return -EFBIG;
	}
	if (data > budget->data_bytes) {
		snprintf(apply->err, apply->errlen, "layer %s: entry '%s' (%llu bytes) takes the image "
			 "past the %llu bytes voidbox unpacks for one image; the image is refused",
			 apply->archive_path, rel, (unsigned long long)data,
			 (unsigned long long)OCI_IMAGE_DATA_BYTES_MAX);
		return -EFBIG;
	}
	if (name > budget->name_bytes) {
		snprintf(apply->err, apply->errlen, "layer %s: entry '%s' takes the image past the "
			 "%llu bytes of entry names voidbox unpacks for one image; the image is refused",
			 apply->archive_path, rel, (unsigned long long)OCI_IMAGE_NAME_BYTES_MAX);
		return -EFBIG;
	}
	budget->entries--;
	budget->data_bytes -= data;
	budget->name_bytes -= name;
	return 0;
}

static int oci_apply_entry(struct oci_apply *apply, struct archive_entry *entry)
{
	char rel[OCI_LAYER_PATH_MAX], link[OCI_LAYER_PATH_MAX], dir[OCI_LAYER_PATH_MAX];
	const char *name = archive_dl.entry_pathname(entry), *hardlink, *base;
	bool is_dir = archive_dl.entry_filetype(entry) == AE_IFDIR;
	int rc;

	if (!name || oci_layer_normalize_path(name, rel, sizeof(rel)) < 0)
		return oci_fail(apply, -EINVAL, name ? name : "(no name)",
				"leaves the root (an absolute path or ..): the layer is refused");
	if (rel[0] == '\0')
		return 0; /* the root itself keeps its own metadata */
	rc = oci_spend(apply, entry, rel);
	if (rc < 0)
		return rc;
	oci_split(rel, dir, sizeof(dir), &base);
	rc = oci_apply_whiteout(apply, rel, dir, base);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	hardlink = archive_dl.entry_hardlink(entry);
	if (hardlink) {
		if (oci_layer_normalize_path(hardlink, link, sizeof(link)) < 0 || !link[0])
			return oci_fail(apply, -EINVAL, rel, "is a hard link that leaves the root: "
					"the layer is refused");
		archive_dl.entry_set_hardlink(entry, link);
	}
	rc = oci_make_room(apply, dir, base, is_dir);
	if (rc < 0)
		return oci_fail(apply, rc, rel, "could not replace what a lower layer left");
	if (rc == 1) {
		oci_skip(apply, rel, "its directory is a symlink");
		return 0;
	}
	archive_dl.entry_set_pathname(entry, rel);
	rc = oci_set_add(&apply->written, rel);
	if (rc < 0)
		return oci_fail(apply, rc, rel, "could not be recorded (out of memory)");
	rc = archive_dl.write_header(apply->out, entry);
	if (rc == ARCHIVE_FAILED || rc == ARCHIVE_RETRY) {
		oci_skip(apply, rel, archive_dl.error_string(apply->out));
		return 0;
	}
	if (rc < ARCHIVE_WARN)
		return oci_fail(apply, -EIO, rel, archive_dl.error_string(apply->out));
	if (archive_dl.entry_size(entry) > 0 && (rc = oci_copy_data(apply, rel)) < 0)
		return rc;
	if (archive_dl.write_finish_entry(apply->out) < ARCHIVE_WARN)
		return oci_fail(apply, -EIO, rel, archive_dl.error_string(apply->out));
	apply->stats->entries++;
	return 0;
}

static int oci_open_archives(struct oci_apply *apply)
{
	int flags = ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
		    ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
		    ARCHIVE_EXTRACT_UNLINK;

	if (geteuid() == 0)
		flags |= ARCHIVE_EXTRACT_OWNER;
	apply->in = archive_dl.read_new();
	apply->out = archive_dl.write_disk_new();
	if (!apply->in || !apply->out) {
		snprintf(apply->err, apply->errlen, "out of memory opening layer %s",
			 apply->archive_path);
		return -ENOMEM;
	}
	archive_dl.read_support_filter_all(apply->in);
	archive_dl.read_support_format_tar(apply->in);
	archive_dl.write_disk_set_options(apply->out, flags);
	if (archive_dl.read_open_filename(apply->in, apply->archive_path, OCI_LAYER_BLOCK_BYTES) !=
	    ARCHIVE_OK) {
		snprintf(apply->err, apply->errlen, "cannot read layer %s: %s",
			 apply->archive_path, archive_dl.error_string(apply->in));
		return -EIO;
	}
	return 0;
}

void oci_layer_budget_init(struct oci_layer_budget *budget)
{
	*budget = (struct oci_layer_budget){ .data_bytes = OCI_IMAGE_DATA_BYTES_MAX,
					     .entries = OCI_IMAGE_ENTRIES_MAX,
					     .name_bytes = OCI_IMAGE_NAME_BYTES_MAX };
}

int oci_layer_apply(const char *archive_path, const char *root, struct oci_layer_budget *budget,
		    struct oci_layer_stats *stats, char *err, size_t errlen)
{
	static pthread_mutex_t one_layer_at_a_time = PTHREAD_MUTEX_INITIALIZER;
	struct oci_apply apply = { .archive_path = archive_path, .budget = budget, .stats = stats,
				   .err = err, .errlen = errlen, .root_fd = -1 };
	struct archive_entry *entry;
	int cwd_fd, rc;

	memset(stats, 0, sizeof(*stats));
	pthread_mutex_lock(&one_layer_at_a_time);
	/* refused under some sandboxes' seccomp policies; the mutex still keeps unpackers apart */
	(void)unshare(CLONE_FS);
	cwd_fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	rc = archive_dl_load(OCI_LAYER_PURPOSE, err, errlen);
	if (rc < 0)
		goto out;
	apply.root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cwd_fd < 0 || apply.root_fd < 0 || fchdir(apply.root_fd) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot enter the root %s: %s", root, strerror(-rc));
		goto out;
	}
	rc = oci_open_archives(&apply);
	while (rc == 0) {
		int next = archive_dl.read_next_header(apply.in, &entry);

		if (next == ARCHIVE_EOF)
			break;
		if (next < ARCHIVE_WARN) {
			snprintf(err, errlen, "layer %s is not a readable tar archive: %s",
				 archive_path, archive_dl.error_string(apply.in));
			rc = -EIO;
			break;
		}
		rc = oci_apply_entry(&apply, entry);
	}
	if (apply.out && archive_dl.write_close(apply.out) < ARCHIVE_WARN && rc == 0) {
		snprintf(err, errlen, "layer %s: %s", archive_path,
			 archive_dl.error_string(apply.out));
		rc = -EIO;
	}
out:
	if (apply.in)
		archive_dl.read_free(apply.in);
	if (apply.out)
		archive_dl.write_free(apply.out);
	oci_set_free(&apply.written);
	if (cwd_fd >= 0) {
		if (fchdir(cwd_fd) < 0 && rc == 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot return to the working directory: %s",
				 strerror(-rc));
		}
		close(cwd_fd);
	}
	if (apply.root_fd >= 0)
		close(apply.root_fd);
	pthread_mutex_unlock(&one_layer_at_a_time);
	return rc;
}
