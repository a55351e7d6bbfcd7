/*
 * The snapshot store's directory work: hashing a config, atomic commit of a snapshot written
 * into a temporary directory (with its manifest of SHA-256s), listing, prefix lookup,
 * deletion, the in-use locks, LRU eviction under a cap and resolving a user's snapshot
 * reference.
 *
 * Every removal first renames the directory to a .tmp- name and then removes the tree, so a
 * crash in the middle of a delete leaves a .tmp- directory (swept later), never a snapshot with
 * half its files. Sizes are allocated bytes, so sparse memory files count what they occupy.
 */
#include "store/snapshot_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/array.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "common/path.h"
#include "store/guest_image.h"
#include "store/store_fs.h"
#include "store/store_settings.h"

#define SNAPSHOT_STORE_HASH_CHUNK (1u << 16)
#define SNAPSHOT_STORE_DIR_MODE 0755
#define SNAPSHOT_STORE_FILE_MODE 0644
#define SNAPSHOT_STORE_LIST_INITIAL 8
#define SNAPSHOT_STORE_BLOCK_BYTES 512
#define SNAPSHOT_STORE_DIFF_MAX 100000
#define SNAPSHOT_STORE_AMBIGUOUS_SHOWN 4
#define SNAPSHOT_STORE_ERR_MAX 512
#define SNAPSHOT_STORE_SIZE_SHIFT 10 /* each of K, M, G, T is 1024 times the last */

static unsigned int snapshot_store_tmp_counter;

const char *snapshot_store_kind_name(enum snapshot_store_kind kind)
{
	return kind == SNAPSHOT_STORE_KIND_DIFF ? "diff" : "base";
}

int snapshot_store_dir(char *out, size_t out_len)
{
	char home[PATH_MAX];
	int rc = guest_image_home(home, sizeof(home));

	if (rc < 0)
		return rc;
	return store_join(out, out_len, home, SNAPSHOT_STORE_DIR_NAME);
}

/* ---- config hash ---- */

static void snapshot_store_put_u64(EVP_MD_CTX *ctx, uint64_t value)
{
	unsigned char bytes[sizeof(uint64_t)];

	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(value >> (8 * i));
	EVP_DigestUpdate(ctx, bytes, sizeof(bytes));
}

static void snapshot_store_put_u32(EVP_MD_CTX *ctx, uint32_t value)
{
	unsigned char bytes[sizeof(uint32_t)];

	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(value >> (8 * i));
	EVP_DigestUpdate(ctx, bytes, sizeof(bytes));
}

/* Length-prefixed file contents; a file that changes size while hashed is an error. */
static int snapshot_store_hash_file(EVP_MD_CTX *ctx, const char *path, char *err, size_t errlen)
{
	unsigned char *chunk = NULL;
	uint64_t hashed = 0;
	struct stat st;
	int fd, rc = 0;

	if (!path) {
		snapshot_store_put_u64(ctx, 0);
		return 0;
	}
	/* non-blocking, so a FIFO named as a kernel cannot hang the open */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		store_error(err, errlen, "cannot read %s: %s (check the path)", path,
			    strerror(errno));
		goto out;
	}
	/* a device such as /dev/zero never ends; a kernel or initramfs is a regular file */
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		store_error(err, errlen, "%s is not a regular file: give the path of a kernel "
			    "or initramfs file", path);
		goto out;
	}
	chunk = malloc(SNAPSHOT_STORE_HASH_CHUNK);
	if (!chunk) {
		rc = -ENOMEM;
		goto out;
	}
	snapshot_store_put_u64(ctx, (uint64_t)st.st_size);
	for (;;) {
		ssize_t n = read(fd, chunk, SNAPSHOT_STORE_HASH_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			store_error(err, errlen, "cannot read %s: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, chunk, (size_t)n);
		hashed += (uint64_t)n;
	}
	if (hashed != (uint64_t)st.st_size) {
		rc = -EAGAIN;
		store_error(err, errlen, "%s changed while it was hashed; try again", path);
	}
out:
	free(chunk);
	if (fd >= 0)
		close(fd);
	return rc;
}

static int snapshot_store_compare_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int snapshot_store_hash_devices(EVP_MD_CTX *ctx, const struct snapshot_store_config *cfg)
{
	const char **sorted = NULL;

	snapshot_store_put_u32(ctx, (uint32_t)cfg->device_count);
	if (cfg->device_count == 0)
		return 0;
	sorted = calloc(cfg->device_count, sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	memcpy(sorted, cfg->devices, cfg->device_count * sizeof(*sorted));
	qsort(sorted, cfg->device_count, sizeof(*sorted), snapshot_store_compare_names);
	for (size_t i = 0; i < cfg->device_count; i++) {
		size_t len = strlen(sorted[i]);

		snapshot_store_put_u32(ctx, (uint32_t)len);
		EVP_DigestUpdate(ctx, sorted[i], len);
	}
	free(sorted);
	return 0;
}

int snapshot_store_config_hash(const struct snapshot_store_config *config,
			       char hex[SNAPSHOT_STORE_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int digest_len = 0;
	EVP_MD_CTX *ctx;
	int rc;

	if (!config || !config->kernel_path || (config->device_count && !config->devices)) {
		store_error(err, errlen, "a snapshot config needs at least a kernel");
		return -EINVAL;
	}
	ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -ENOMEM;
	}
	EVP_DigestUpdate(ctx, SNAPSHOT_STORE_CONFIG_MAGIC, sizeof(SNAPSHOT_STORE_CONFIG_MAGIC));
	rc = snapshot_store_hash_file(ctx, config->kernel_path, err, errlen);
	if (rc == 0)
		rc = snapshot_store_hash_file(ctx, config->initramfs_path, err, errlen);
	if (rc == 0) {
		snapshot_store_put_u32(ctx, config->memory_mb);
		snapshot_store_put_u32(ctx, config->vcpus);
		rc = snapshot_store_hash_devices(ctx, config);
	}
	if (rc == 0 && EVP_DigestFinal_ex(ctx, digest, &digest_len) != 1)
		rc = -EIO;
	EVP_MD_CTX_free(ctx);
	if (rc < 0)
		return rc;
	for (unsigned int i = 0; i < digest_len && 2 * i < SNAPSHOT_STORE_HASH_HEX_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	hex[SNAPSHOT_STORE_HASH_HEX_LEN] = '\0';
	return 0;
}

/* ---- removal and temporary directories ---- */

static int snapshot_store_tmp_path(const char *store, const char *label, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s%ld-%u-%s", store, SNAPSHOT_STORE_TMP_PREFIX,
			 (long)getpid(), __atomic_add_fetch(&snapshot_store_tmp_counter, 1,
							    __ATOMIC_RELAXED), label);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int snapshot_store_read_entry(const char *store, const char *name,
				     struct snapshot_store_entry *entry);

/* ---- in use: a shared flock per restoring process, an exclusive one to remove ---- */

/* Opens (creating) dir/lock; -errno when it cannot. */
static int snapshot_store_open_lock(const char *dir)
{
	char path[PATH_MAX];
	int fd, rc = store_join(path, sizeof(path), dir, SNAPSHOT_STORE_LOCK_FILE);

	if (rc < 0)
		return rc;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, SNAPSHOT_STORE_FILE_MODE);
	return fd < 0 ? -errno : fd;
}

/* An exclusive lock without waiting: the fd, -EBUSY when a VM holds the snapshot. */
static int snapshot_store_lock_exclusive(const char *dir)
{
	int fd = snapshot_store_open_lock(dir);

	if (fd < 0)
		return fd;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;

		close(fd);
		return rc;
	}
	return fd;
}

bool snapshot_store_in_use(const char *snapshot_dir)
{
	int fd = snapshot_store_lock_exclusive(snapshot_dir);

	if (fd >= 0)
		close(fd);
	return fd == -EBUSY;
}

static int snapshot_store_hold_one(const char *dir, struct snapshot_store_hold *hold,
				   char *err, size_t errlen)
{
	char state[PATH_MAX];
	int fd = snapshot_store_open_lock(dir);

	if (fd == -EACCES || fd == -EROFS || fd == -EPERM) {
		log_debug("snapshot", "not locking %s: %s", dir, strerror(-fd));
		return 0;
	}
	if (fd < 0 || flock(fd, LOCK_SH) < 0 ||
	    store_join(state, sizeof(state), dir, SNAPSHOT_STORE_STATE_FILE) < 0 ||
	    access(state, F_OK) < 0) {
		if (fd >= 0)
			close(fd);
		store_error(err, errlen, "snapshot %s is gone (deleted or evicted while "
			    "it was being opened)", dir);
		return -ENOENT;
	}
	hold->fds[hold->count++] = fd;
	return 0;
}

int snapshot_store_hold(const char *snapshot_dir, struct snapshot_store_hold *hold, char *err,
			size_t errlen)
{
	char store[PATH_MAX], parent[PATH_MAX];
	struct snapshot_store_entry entry;
	const char *slash = strrchr(snapshot_dir, '/');
	int rc;

	memset(hold, 0, sizeof(*hold));
	rc = snapshot_store_hold_one(snapshot_dir, hold, err, errlen);
	if (rc < 0 || !slash || (size_t)(slash - snapshot_dir) >= sizeof(store))
		return rc;
	snprintf(store, sizeof(store), "%.*s", (int)(slash - snapshot_dir), snapshot_dir);
	if (snapshot_store_read_entry(store, slash + 1, &entry) < 0 ||
	    entry.kind != SNAPSHOT_STORE_KIND_DIFF || !entry.parent_id[0] ||
	    store_join(parent, sizeof(parent), store, entry.parent_id) < 0)
		return 0;
	rc = snapshot_store_hold_one(parent, hold, err, errlen);
	if (rc < 0)
		snapshot_store_release(hold);
	return rc;
}

void snapshot_store_release(struct snapshot_store_hold *hold)
{
	if (!hold)
		return;
	for (unsigned int i = 0; i < hold->count; i++)
		close(hold->fds[i]);
	hold->count = 0;
}

/*
 * Renames the directory out of sight first, so it vanishes whole, then removes the tree; the
 * exclusive lock held meanwhile makes a restorer that opened the lock wait and then find the
 * snapshot gone. -EBUSY when a VM holds it.
 */
static int snapshot_store_remove_snapshot(const char *store, const char *id)
{
	char path[PATH_MAX], doomed[PATH_MAX];
	int rc = store_join(path, sizeof(path), store, id);
	int lock_fd;

	if (rc == 0)
		rc = snapshot_store_tmp_path(store, id, doomed, sizeof(doomed));
	if (rc < 0)
		return rc;
	lock_fd = snapshot_store_lock_exclusive(path);
	if (lock_fd == -EBUSY)
		return lock_fd;
	if (rename(path, doomed) < 0)
		rc = -errno;
	else
		rc = store_remove_tree(doomed);
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}

static void snapshot_store_sweep(const char *store)
{
	DIR *dir = opendir(store);
	struct dirent *ent;

	if (!dir)
		return;
	while ((ent = readdir(dir))) {
		char path[PATH_MAX];

		if (!store_tmp_writer_gone(ent->d_name, SNAPSHOT_STORE_TMP_PREFIX) ||
		    store_join(path, sizeof(path), store, ent->d_name) < 0)
			continue;
		log_info("snapshot", "removing %s, left by a writer that stopped", path);
		store_remove_tree(path);
	}
	closedir(dir);
}


/* ---- reading one snapshot directory ---- */

bool snapshot_store_id_valid(const char *id)
{
	size_t len = id ? strlen(id) : 0;

	if (len == 0 || len >= SNAPSHOT_STORE_ID_MAX || id[0] == '.' || id[0] == '-')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = id[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return false;
	}
	return true;
}

static uint64_t snapshot_store_dir_bytes(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *ent;
	uint64_t total = 0;

	if (!dir)
		return 0;
	while ((ent = readdir(dir))) {
		struct stat st;

		if (fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			total += (uint64_t)st.st_blocks * SNAPSHOT_STORE_BLOCK_BYTES;
	}
	closedir(dir);
	return total;
}

static void snapshot_store_copy_string(char *out, size_t len, json_t *value)
{
	const char *text = json_string_value(value);

	snprintf(out, len, "%s", text ? text : "");
}

static void snapshot_store_read_meta(struct snapshot_store_entry *entry)
{
	char path[PATH_MAX];
	json_t *root;

	if (store_join(path, sizeof(path), entry->path, SNAPSHOT_STORE_META_FILE) < 0)
		return;
	root = json_load_file(path, 0, NULL);
	if (!root)
		return;
	snapshot_store_copy_string(entry->config_hash, sizeof(entry->config_hash),
				   json_object_get(root, "config_hash"));
	snapshot_store_copy_string(entry->parent_id, sizeof(entry->parent_id),
				   json_object_get(root, "parent"));
	snapshot_store_copy_string(entry->kernel_path, sizeof(entry->kernel_path),
				   json_object_get(root, "kernel"));
	snapshot_store_copy_string(entry->initramfs_path, sizeof(entry->initramfs_path),
				   json_object_get(root, "initramfs"));
	entry->memory_mb = (unsigned int)json_integer_value(json_object_get(root, "memory_mb"));
	entry->vcpus = (unsigned int)json_integer_value(json_object_get(root, "vcpus"));
	json_decref(root);
}

/* Fills entry from <store>/<name>; -ENOENT when it is not a committed snapshot. */
static int snapshot_store_read_entry(const char *store, const char *name,
				     struct snapshot_store_entry *entry)
{
	char state[PATH_MAX];
	const char *diff;
	struct stat st;

	memset(entry, 0, sizeof(*entry));
	if (!snapshot_store_id_valid(name))
		return -ENOENT;
	if (store_join(entry->path, sizeof(entry->path), store, name) < 0 ||
	    store_join(state, sizeof(state), entry->path, SNAPSHOT_STORE_STATE_FILE) < 0)
		return -ENAMETOOLONG;
	if (stat(state, &st) < 0 || !S_ISREG(st.st_mode))
		return -ENOENT;
	snprintf(entry->id, sizeof(entry->id), "%s", name);
	entry->last_used = st.st_mtime;
	entry->size_bytes = snapshot_store_dir_bytes(entry->path);
	diff = strstr(name, SNAPSHOT_STORE_DIFF_INFIX);
	entry->kind = diff ? SNAPSHOT_STORE_KIND_DIFF : SNAPSHOT_STORE_KIND_BASE;
	snapshot_store_read_meta(entry);
	/*
	 * The name is the record of the family: store.json may have come from another machine
	 * in an archive, and a parent it names is no path and no base here to lock or spare.
	 */
	snprintf(entry->parent_id, sizeof(entry->parent_id), "%.*s",
		 diff ? (int)(diff - name) : 0, name);
	return 0;
}

/* ---- list, find, delete, evict ---- */

static int snapshot_store_compare_ids(const void *a, const void *b)
{
	return strcmp(((const struct snapshot_store_entry *)a)->id,
		      ((const struct snapshot_store_entry *)b)->id);
}

static int snapshot_store_list_in(const char *store, struct snapshot_store_entry **entries,
				  size_t *count)
{
	struct snapshot_store_entry *list = NULL;
	size_t used = 0, capacity = 0;
	struct dirent *ent;
	DIR *dir;

	*entries = NULL;
	*count = 0;
	dir = opendir(store);
	if (!dir)
		return errno == ENOENT ? 0 : -errno;
	while ((ent = readdir(dir))) {
		if (!array_reserve_one((void **)&list, &capacity, used, sizeof(*list),
				       SNAPSHOT_STORE_LIST_INITIAL)) {
			free(list);
			closedir(dir);
			return -ENOMEM;
		}
		if (snapshot_store_read_entry(store, ent->d_name, &list[used]) == 0)
			used++;
	}
	closedir(dir);
	if (used)
		qsort(list, used, sizeof(*list), snapshot_store_compare_ids);
	if (!used) {
		free(list);
		list = NULL;
	}
	*entries = list;
	*count = used;
	return 0;
}

int snapshot_store_list(struct snapshot_store_entry **entries, size_t *count, char *err,
			size_t errlen)
{
	char store[PATH_MAX];
	int rc = snapshot_store_dir(store, sizeof(store));

	if (rc < 0) {
		store_error(err, errlen, "cannot locate the snapshot store: set VOIDBOX_HOME or HOME");
		return rc;
	}
	rc = snapshot_store_list_in(store, entries, count);
	if (rc < 0)
		store_error(err, errlen, "cannot read %s: %s", store, strerror(-rc));
	return rc;
}

static bool snapshot_store_is_diff_of(const struct snapshot_store_entry *entry, const char *base)
{
	return entry->kind == SNAPSHOT_STORE_KIND_DIFF && strcmp(entry->parent_id, base) == 0;
}

/* A prefix that matches one base and only that base's diffs names the base. */
static bool snapshot_store_pick_family(const struct snapshot_store_entry *list, size_t count,
				       const char *prefix, size_t *index)
{
	size_t prefix_len = strlen(prefix), base = count;

	for (size_t i = 0; i < count; i++) {
		if (strncmp(list[i].id, prefix, prefix_len) != 0 ||
		    list[i].kind != SNAPSHOT_STORE_KIND_BASE)
			continue;
		if (base != count)
			return false;
		base = i;
	}
	if (base == count)
		return false;
	for (size_t i = 0; i < count; i++)
		if (i != base && strncmp(list[i].id, prefix, prefix_len) == 0 &&
		    !snapshot_store_is_diff_of(&list[i], list[base].id))
			return false;
	*index = base;
	return true;
}

static int snapshot_store_pick(const struct snapshot_store_entry *list, size_t count,
			       const char *prefix, size_t *index, char *err, size_t errlen)
{
	size_t matches = 0, prefix_len = strlen(prefix);
	char shown[SNAPSHOT_STORE_AMBIGUOUS_SHOWN * SNAPSHOT_STORE_ID_MAX] = "";

	for (size_t i = 0; i < count; i++) {
		if (strcmp(list[i].id, prefix) == 0) {
			*index = i;
			return 0;
		}
	}
	for (size_t i = 0; i < count; i++) {
		if (strncmp(list[i].id, prefix, prefix_len) != 0)
			continue;
		if (matches < SNAPSHOT_STORE_AMBIGUOUS_SHOWN) {
			size_t used = strlen(shown);

			snprintf(shown + used, sizeof(shown) - used, "%s%s", matches ? ", " : "",
				 list[i].id);
		}
		*index = i;
		matches++;
	}
	if (matches == 1)
		return 0;
	if (matches > 1 && snapshot_store_pick_family(list, count, prefix, index))
		return 0;
	if (matches == 0) {
		store_error(err, errlen,
			    "no snapshot id starts with '%s' (see voidbox snapshot list)",
			    prefix);
		return -ENOENT;
	}
	store_error(err, errlen,
		    "'%s' matches %zu snapshots (%s%s): give more characters of the id",
		    prefix, matches, shown,
		    matches > SNAPSHOT_STORE_AMBIGUOUS_SHOWN ? ", ..." : "");
	return -ENOTUNIQ;
}

static int snapshot_store_prefix_check(const char *prefix, char *err, size_t errlen)
{
	if (snapshot_store_id_valid(prefix))
		return 0;
	store_error(err, errlen,
		    "'%s' is not a snapshot id prefix (letters, digits, '-' and '_'; see voidbox snapshot list)",
		    prefix ? prefix : "");
	return -EINVAL;
}

int snapshot_store_find(const char *prefix, struct snapshot_store_entry *out, char *err,
			size_t errlen)
{
	struct snapshot_store_entry *list = NULL;
	size_t count = 0, index = 0;
	int rc = snapshot_store_prefix_check(prefix, err, errlen);

	if (rc == 0)
		rc = snapshot_store_list(&list, &count, err, errlen);
	if (rc == 0)
		rc = snapshot_store_pick(list, count, prefix, &index, err, errlen);
	if (rc == 0)
		*out = list[index];
	free(list);
	return rc;
}

/* Removes list[index] (and, for a base, its diffs); marks removed entries with size 0 id "". */
static int snapshot_store_remove_entry(const char *store, struct snapshot_store_entry *list,
				       size_t count, size_t index, size_t *removed,
				       uint64_t *freed)
{
	char base[SNAPSHOT_STORE_ID_MAX];
	int rc;

	snprintf(base, sizeof(base), "%s", list[index].id);
	if (list[index].kind == SNAPSHOT_STORE_KIND_BASE) {
		for (size_t i = 0; i < count; i++) {
			if (!list[i].id[0] || !snapshot_store_is_diff_of(&list[i], base))
				continue;
			rc = snapshot_store_remove_snapshot(store, list[i].id);
			if (rc < 0)
				return rc;
			*removed += 1;
			*freed += list[i].size_bytes;
			list[i].id[0] = '\0';
		}
	}
	rc = snapshot_store_remove_snapshot(store, base);
	if (rc < 0)
		return rc;
	*removed += 1;
	*freed += list[index].size_bytes;
	list[index].id[0] = '\0';
	return 0;
}

/* -EBUSY, with err naming it, when a VM holds list[index] or (for a base) one of its diffs. */
static int snapshot_store_family_idle(const struct snapshot_store_entry *list, size_t count,
				      size_t index, char *err, size_t errlen)
{
	for (size_t i = 0; i < count; i++) {
		if (i != index && (list[index].kind != SNAPSHOT_STORE_KIND_BASE ||
				   !snapshot_store_is_diff_of(&list[i], list[index].id)))
			continue;
		if (!snapshot_store_in_use(list[i].path))
			continue;
		store_error(err, errlen, "snapshot %s is in use by a running VM: stop it "
			    "first, then delete", list[i].id);
		return -EBUSY;
	}
	return 0;
}

int snapshot_store_delete(const char *prefix, size_t *deleted, char *err, size_t errlen)
{
	struct snapshot_store_entry *list = NULL;
	size_t count = 0, index = 0, removed = 0;
	uint64_t freed = 0;
	char store[PATH_MAX];
	int rc = snapshot_store_prefix_check(prefix, err, errlen);

	if (rc == 0)
		rc = snapshot_store_dir(store, sizeof(store));
	if (rc == 0)
		rc = snapshot_store_list(&list, &count, err, errlen);
	if (rc == 0)
		rc = snapshot_store_pick(list, count, prefix, &index, err, errlen);
	if (rc == 0)
		rc = snapshot_store_family_idle(list, count, index, err, errlen);
	if (rc == 0) {
		rc = snapshot_store_remove_entry(store, list, count, index, &removed, &freed);
		if (rc < 0)
			store_error(err, errlen, "cannot delete snapshot %s: %s (check permissions on %s)",
				    list[index].id, strerror(-rc), store);
	}
	if (deleted)
		*deleted = removed;
	free(list);
	return rc;
}

static int snapshot_store_compare_age(const void *a, const void *b)
{
	const struct snapshot_store_entry *x = a, *y = b;

	if (x->last_used != y->last_used)
		return x->last_used < y->last_used ? -1 : 1;
	return strcmp(x->id, y->id);
}

static bool snapshot_store_has_diff(const struct snapshot_store_entry *list, size_t count,
				    const char *base)
{
	for (size_t i = 0; i < count; i++)
		if (list[i].id[0] && snapshot_store_is_diff_of(&list[i], base))
			return true;
	return false;
}

/*
 * One pass in LRU order: removes the first snapshot that may go. Returns 1 when it removed
 * one, 0 when none may, or -errno; counts what it spared.
 */
static int snapshot_store_gc_pass(const char *store, struct snapshot_store_entry *list,
				  size_t count, const char *keep_id, uint64_t *freed,
				  struct snapshot_store_gc_result *result, char *err, size_t errlen)
{
	result->spared_in_use = 0;
	result->spared_bases = 0;
	for (size_t i = 0; i < count; i++) {
		int rc;

		if (!list[i].id[0] || (keep_id && strcmp(list[i].id, keep_id) == 0))
			continue;
		if (list[i].kind == SNAPSHOT_STORE_KIND_BASE &&
		    snapshot_store_has_diff(list, count, list[i].id)) {
			result->spared_bases++;
			continue;
		}
		rc = snapshot_store_remove_snapshot(store, list[i].id);
		if (rc == -EBUSY) {
			log_info("snapshot", "keeping %s: a running VM uses it", list[i].id);
			result->spared_in_use++;
			continue;
		}
		if (rc < 0) {
			store_error(err, errlen, "cannot evict snapshot %s: %s", list[i].id,
				    strerror(-rc));
			return rc;
		}
		log_info("snapshot", "evicted %s (last used %lld)", list[i].id,
			 (long long)list[i].last_used);
		*freed += list[i].size_bytes;
		list[i].id[0] = '\0';
		result->evicted++;
		return 1;
	}
	return 0;
}

int snapshot_store_gc(uint64_t max_bytes, const char *keep_id,
		      struct snapshot_store_gc_result *result, char *err, size_t errlen)
{
	struct snapshot_store_gc_result local;
	struct snapshot_store_entry *list = NULL;
	size_t count = 0;
	uint64_t total = 0, freed = 0;
	char store[PATH_MAX];
	int rc = snapshot_store_dir(store, sizeof(store));

	if (!result)
		result = &local;
	memset(result, 0, sizeof(*result));
	if (rc == 0)
		rc = snapshot_store_list(&list, &count, err, errlen);
	if (rc < 0)
		goto out;
	snapshot_store_sweep(store);
	for (size_t i = 0; i < count; i++)
		total += list[i].size_bytes;
	if (count)
		qsort(list, count, sizeof(*list), snapshot_store_compare_age);
	/* each pass starts again from the oldest: removing a diff can free its older base */
	while (total - freed > max_bytes) {
		rc = snapshot_store_gc_pass(store, list, count, keep_id, &freed, result, err, errlen);
		if (rc <= 0)
			break;
	}
	rc = rc < 0 ? rc : 0;
out:
	result->remaining_bytes = total - freed;
	free(list);
	return rc;
}

int snapshot_store_evict_lru(uint64_t max_bytes, size_t *evicted, uint64_t *remaining_bytes,
			     char *err, size_t errlen)
{
	struct snapshot_store_gc_result result;
	int rc = snapshot_store_gc(max_bytes, NULL, &result, err, errlen);

	if (evicted)
		*evicted = result.evicted;
	if (remaining_bytes)
		*remaining_bytes = result.remaining_bytes;
	return rc;
}

bool snapshot_store_parse_size(const char *text, uint64_t *out)
{
	static const char suffixes[] = "KMGT";
	unsigned long long value;
	unsigned int shift = 0;
	const char *suffix;
	char *end;

	if (!text || text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	value = strtoull(text, &end, 10);
	if (errno || end == text)
		return false;
	if (*end) {
		suffix = strchr(suffixes, *end >= 'a' ? *end - ('a' - 'A') : *end);
		if (!suffix || !*suffix || end[1])
			return false;
		shift = SNAPSHOT_STORE_SIZE_SHIFT * (unsigned int)(suffix - suffixes + 1);
	}
	if (value > (UINT64_MAX >> shift))
		return false;
	*out = (uint64_t)value << shift;
	return true;
}

int snapshot_store_cache_max(uint64_t *max_bytes, bool *set, char *err, size_t errlen)
{
	const char *text = store_settings_get()->snapshot_cache_max;

	*set = false;
	*max_bytes = 0;
	if (!text || !*text)
		return 0;
	if (!snapshot_store_parse_size(text, max_bytes)) {
		store_error(err, errlen, "%s='%s' is not a size such as 20G (suffixes K, M, "
			    "G, T)", SNAPSHOT_STORE_CACHE_MAX_ENV, text);
		return -EINVAL;
	}
	*set = true;
	return 0;
}

int snapshot_store_enforce_cap(const char *keep_id, char *err, size_t errlen)
{
	struct snapshot_store_gc_result result;
	uint64_t cap = 0;
	bool set = false;
	int rc = snapshot_store_cache_max(&cap, &set, err, errlen);

	if (rc < 0 || !set)
		return rc;
	rc = snapshot_store_gc(cap, keep_id, &result, err, errlen);
	if (rc == 0 && result.remaining_bytes > cap)
		log_warn("snapshot", "the snapshot store holds %llu bytes, over %s=%llu: what is "
			 "left is in use, the base of a diff, or the snapshot just written",
			 (unsigned long long)result.remaining_bytes, SNAPSHOT_STORE_CACHE_MAX_ENV,
			 (unsigned long long)cap);
	return rc;
}

int snapshot_store_verify(const char *prefix, struct snapshot_store_entry *entry, char *err,
			  size_t errlen)
{
	struct snapshot_manifest manifest;
	int rc = snapshot_store_find(prefix, entry, err, errlen);

	if (rc == 0)
		rc = snapshot_manifest_read(entry->path, &manifest, err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_verify(entry->path, &manifest, err, errlen);
	return rc;
}

int snapshot_store_touch(const char *snapshot_dir)
{
	char state[PATH_MAX];
	int rc = store_join(state, sizeof(state), snapshot_dir, SNAPSHOT_STORE_STATE_FILE);

	if (rc < 0)
		return rc;
	return utimensat(AT_FDCWD, state, NULL, 0) < 0 ? -errno : 0;
}

/* ---- writing ---- */

static int snapshot_store_next_diff_id(const char *store, const char *parent, char *out,
				       size_t len)
{
	for (unsigned int n = 1; n < SNAPSHOT_STORE_DIFF_MAX; n++) {
		char path[PATH_MAX];
		int w = snprintf(out, len, "%s%s%u", parent, SNAPSHOT_STORE_DIFF_INFIX, n);

		if (w < 0 || (size_t)w >= len || store_join(path, sizeof(path), store, out) < 0)
			return -ENAMETOOLONG;
		if (access(path, F_OK) < 0 && errno == ENOENT)
			return 0;
	}
	return -ENOSPC;
}

static int snapshot_store_begin_ids(const char *store, const char *config_hash,
				    const char *parent_id, struct snapshot_store_txn *txn,
				    char *err, size_t errlen)
{
	struct snapshot_store_entry parent;
	char state[PATH_MAX];
	int rc;

	if (!parent_id) {
		txn->kind = SNAPSHOT_STORE_KIND_BASE;
		snprintf(txn->id, sizeof(txn->id), "%.*s", SNAPSHOT_STORE_ID_HEX_LEN, config_hash);
		if (store_join(state, sizeof(state), store, txn->id) == 0 &&
		    access(state, F_OK) == 0) {
			store_error(err, errlen,
				    "snapshot %s already exists for this config: use it, or delete it first (voidbox snapshot delete %s)",
				    txn->id, txn->id);
			return -EEXIST;
		}
		return 0;
	}
	txn->kind = SNAPSHOT_STORE_KIND_DIFF;
	rc = snapshot_store_read_entry(store, parent_id, &parent);
	if (rc < 0 || parent.kind != SNAPSHOT_STORE_KIND_BASE) {
		store_error(err, errlen,
			    "a diff needs a stored base snapshot, and '%s' is not one (see voidbox snapshot list)",
			    parent_id);
		return -ENOENT;
	}
	snprintf(txn->parent_id, sizeof(txn->parent_id), "%s", parent_id);
	return snapshot_store_next_diff_id(store, parent_id, txn->id, sizeof(txn->id));
}

/* With txn's id and kind decided: its final path and a fresh temporary directory. */
static int snapshot_store_open_txn(const char *store, const char *config_hash,
				   struct snapshot_store_txn *txn, char *err, size_t errlen)
{
	int rc;

	snprintf(txn->config_hash, sizeof(txn->config_hash), "%s", config_hash);
	rc = store_join(txn->final_path, sizeof(txn->final_path), store, txn->id);
	if (rc == 0)
		rc = snapshot_store_tmp_path(store, txn->id, txn->tmp_path, sizeof(txn->tmp_path));
	if (rc == 0 && mkdir(txn->tmp_path, SNAPSHOT_STORE_DIR_MODE) < 0)
		rc = -errno;
	if (rc < 0) {
		store_error(err, errlen, "cannot create a snapshot directory in %s: %s", store,
			    strerror(-rc));
		return rc;
	}
	txn->open = true;
	return 0;
}

int snapshot_store_begin(const char *config_hash, const char *parent_id,
			 struct snapshot_store_txn *txn, char *err, size_t errlen)
{
	char store[PATH_MAX];
	int rc;

	memset(txn, 0, sizeof(*txn));
	if (!config_hash || strlen(config_hash) != SNAPSHOT_STORE_HASH_HEX_LEN ||
	    strspn(config_hash, "0123456789abcdef") != SNAPSHOT_STORE_HASH_HEX_LEN) {
		store_error(err, errlen, "a snapshot needs a 64-digit lowercase hex config hash");
		return -EINVAL;
	}
	rc = snapshot_store_dir(store, sizeof(store));
	if (rc < 0) {
		store_error(err, errlen, "cannot locate the snapshot store: set VOIDBOX_HOME or HOME");
		return rc;
	}
	rc = path_mkdirs(store, SNAPSHOT_STORE_DIR_MODE);
	if (rc < 0) {
		store_error(err, errlen, "cannot create %s: %s (check permissions or set VOIDBOX_HOME)",
			    store, strerror(-rc));
		return rc;
	}
	snapshot_store_sweep(store);
	rc = snapshot_store_begin_ids(store, config_hash, parent_id, txn, err, errlen);
	if (rc < 0)
		return rc;
	return snapshot_store_open_txn(store, config_hash, txn, err, errlen);
}

int snapshot_store_begin_import(const char *id, const char *parent_id, const char *config_hash,
				struct snapshot_store_txn *txn, char *err, size_t errlen)
{
	char store[PATH_MAX];
	int rc;

	memset(txn, 0, sizeof(*txn));
	if (!snapshot_store_id_valid(id) || (parent_id && !snapshot_store_id_valid(parent_id))) {
		store_error(err, errlen, "'%s' is not a snapshot id", id ? id : "");
		return -EINVAL;
	}
	rc = snapshot_store_dir(store, sizeof(store));
	if (rc == 0)
		rc = path_mkdirs(store, SNAPSHOT_STORE_DIR_MODE);
	if (rc < 0) {
		store_error(err, errlen, "cannot create the snapshot store: %s (check "
			    "permissions or set VOIDBOX_HOME)", strerror(-rc));
		return rc;
	}
	snapshot_store_sweep(store);
	if (parent_id) {
		rc = snapshot_store_begin_ids(store, "", parent_id, txn, err, errlen);
	} else {
		txn->kind = SNAPSHOT_STORE_KIND_BASE;
		snprintf(txn->id, sizeof(txn->id), "%s", id);
		rc = store_join(txn->final_path, sizeof(txn->final_path), store, id);
		if (rc == 0 && access(txn->final_path, F_OK) == 0) {
			store_error(err, errlen, "this store already has a snapshot %s: "
				    "delete it first (voidbox snapshot delete %s)", id, id);
			rc = -EEXIST;
		}
	}
	if (rc < 0)
		return rc;
	return snapshot_store_open_txn(store, config_hash ? config_hash : "", txn, err, errlen);
}

int snapshot_store_scratch_dir(const char *label, char *out, size_t out_len, char *err,
			       size_t errlen)
{
	char store[PATH_MAX];
	int rc = snapshot_store_dir(store, sizeof(store));

	if (rc == 0)
		rc = path_mkdirs(store, SNAPSHOT_STORE_DIR_MODE);
	if (rc == 0) {
		snapshot_store_sweep(store);
		rc = snapshot_store_tmp_path(store, label, out, out_len);
	}
	if (rc == 0 && mkdir(out, SNAPSHOT_STORE_DIR_MODE) < 0)
		rc = -errno;
	if (rc < 0)
		store_error(err, errlen, "cannot make a temporary directory in the snapshot "
			    "store %s: %s (check permissions or set VOIDBOX_HOME)", store,
			    strerror(-rc));
	return rc;
}

static json_t *snapshot_store_meta_json(const struct snapshot_store_txn *txn,
					const struct snapshot_store_config *config)
{
	json_t *root = json_pack("{s:s, s:s, s:s, s:s, s:I}", "id", txn->id, "kind",
				 snapshot_store_kind_name(txn->kind), "parent", txn->parent_id,
				 "config_hash", txn->config_hash, "created_at",
				 (json_int_t)time(NULL));
	json_t *devices;

	if (!root || !config)
		return root;
	devices = json_array();
	for (size_t i = 0; devices && i < config->device_count; i++)
		json_array_append_new(devices, json_string(config->devices[i]));
	json_object_set_new(root, "kernel", json_string(config->kernel_path));
	json_object_set_new(root, "initramfs",
			    config->initramfs_path ? json_string(config->initramfs_path) : json_null());
	json_object_set_new(root, "memory_mb", json_integer(config->memory_mb));
	json_object_set_new(root, "vcpus", json_integer(config->vcpus));
	json_object_set_new(root, "devices", devices ? devices : json_array());
	return root;
}

static int snapshot_store_write_meta(const struct snapshot_store_txn *txn,
				     const struct snapshot_store_config *config)
{
	char path[PATH_MAX];
	json_t *root = snapshot_store_meta_json(txn, config);
	char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	int fd = -1, rc = store_join(path, sizeof(path), txn->tmp_path,
				     SNAPSHOT_STORE_META_FILE);

	if (!text)
		rc = -ENOMEM;
	if (rc == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, SNAPSHOT_STORE_FILE_MODE);
		if (fd < 0)
			rc = -errno;
	}
	if (rc == 0)
		rc = fd_write_full(fd, text, strlen(text));
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(root);
	return rc;
}

/* A file's SHA-256 into hex, or "" when it cannot be read (a kernel since removed). */
static void snapshot_store_hash_or_empty(const char *path, char *hex)
{
	hex[0] = '\0';
	if (path && snapshot_sha256_file(path, hex, NULL, NULL, 0) < 0)
		hex[0] = '\0';
}

/* A diff records its base's state hash, so an import can tell the right base from another. */
static int snapshot_store_parent_state_hash(const char *store, const char *parent_id, char *hex,
					    char *err, size_t errlen)
{
	struct snapshot_manifest parent;
	const struct snapshot_manifest_file *state;
	char dir[PATH_MAX], path[PATH_MAX];
	int rc = store_join(dir, sizeof(dir), store, parent_id);

	if (rc == 0 && snapshot_manifest_read(dir, &parent, NULL, 0) == 0 &&
	    (state = snapshot_manifest_find(&parent, SNAPSHOT_STORE_STATE_FILE))) {
		memcpy(hex, state->sha256, sizeof(state->sha256));
		return 0;
	}
	if (rc == 0)
		rc = store_join(path, sizeof(path), dir, SNAPSHOT_STORE_STATE_FILE);
	return rc < 0 ? rc : snapshot_sha256_file(path, hex, NULL, err, errlen);
}

/* manifest.json: the known hashes of an import, else every file hashed now. */
static int snapshot_store_write_manifest(const struct snapshot_store_txn *txn,
					 const struct snapshot_store_config *config, char *err,
					 size_t errlen)
{
	struct snapshot_manifest manifest;
	char store[PATH_MAX];
	int rc = 0;

	if (txn->manifest) {
		manifest = *txn->manifest;
	} else {
		memset(&manifest, 0, sizeof(manifest));
		snapshot_store_hash_or_empty(config ? config->kernel_path : NULL,
					     manifest.kernel_sha256);
		snapshot_store_hash_or_empty(config ? config->initramfs_path : NULL,
					     manifest.initramfs_sha256);
		snapshot_manifest_add_cpu_features(&manifest.has_cpu_features,
						   manifest.cpu_features, txn->has_cpu_features,
						   txn->cpu_features);
		rc = snapshot_manifest_hash_dir(txn->tmp_path, &manifest, err, errlen);
		if (rc == 0 && txn->kind == SNAPSHOT_STORE_KIND_DIFF) {
			rc = snapshot_store_dir(store, sizeof(store));
			if (rc == 0)
				rc = snapshot_store_parent_state_hash(store, txn->parent_id,
								      manifest.parent_state_sha256,
								      err, errlen);
		}
		if (rc < 0)
			return rc;
	}
	snprintf(manifest.id, sizeof(manifest.id), "%s", txn->id);
	manifest.diff = txn->kind == SNAPSHOT_STORE_KIND_DIFF;
	snprintf(manifest.parent_id, sizeof(manifest.parent_id), "%s", txn->parent_id);
	return snapshot_manifest_write(txn->tmp_path, &manifest, err, errlen);
}


/* fsync every regular file in dir, then dir itself. */
static int snapshot_store_fsync_dir_tree(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *ent;
	int rc = 0;

	if (!dir)
		return -errno;
	while (rc == 0 && (ent = readdir(dir))) {
		char file[PATH_MAX];
		struct stat st;

		if (fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		rc = store_join(file, sizeof(file), path, ent->d_name);
		if (rc == 0)
			rc = fsync_path(file, 0);
	}
	closedir(dir);
	if (rc == 0)
		rc = fsync_dir(path);
	return rc;
}

/* Renames without replacing; a diff whose number was taken meanwhile moves to the next one. */
static int snapshot_store_publish(struct snapshot_store_txn *txn, const char *store)
{
	for (;;) {
		int rc = store_rename_noreplace(txn->tmp_path, txn->final_path);

		if (rc == 0)
			return 0;
		if (rc != -EEXIST || txn->kind != SNAPSHOT_STORE_KIND_DIFF)
			return rc;
		rc = snapshot_store_next_diff_id(store, txn->parent_id, txn->id, sizeof(txn->id));
		if (rc == 0)
			rc = store_join(txn->final_path, sizeof(txn->final_path), store,
					txn->id);
		if (rc < 0)
			return rc;
	}
}

int snapshot_store_commit(struct snapshot_store_txn *txn,
			  const struct snapshot_store_config *config, char *err, size_t errlen)
{
	char state[PATH_MAX], store[PATH_MAX], meta[PATH_MAX], manifest_err[SNAPSHOT_STORE_ERR_MAX];
	int rc;

	if (!txn->open)
		return -EINVAL;
	rc = store_join(state, sizeof(state), txn->tmp_path, SNAPSHOT_STORE_STATE_FILE);
	if (rc == 0 && access(state, F_OK) < 0) {
		store_error(err, errlen, "nothing was saved into %s (no %s): the snapshot is discarded",
			    txn->tmp_path, SNAPSHOT_STORE_STATE_FILE);
		rc = -ENOENT;
		goto fail;
	}
	if (rc == 0 && store_join(meta, sizeof(meta), txn->tmp_path,
				  SNAPSHOT_STORE_META_FILE) == 0 && access(meta, F_OK) < 0)
		rc = snapshot_store_write_meta(txn, config);
	if (rc == 0 && snapshot_store_write_manifest(txn, config, manifest_err,
						     sizeof(manifest_err)) < 0) {
		store_error(err, errlen, "cannot record the snapshot's hashes: %s",
			    manifest_err);
		rc = -EIO;
		goto fail;
	}
	if (rc == 0)
		rc = snapshot_store_fsync_dir_tree(txn->tmp_path);
	if (rc == 0)
		rc = snapshot_store_dir(store, sizeof(store));
	if (rc == 0)
		rc = snapshot_store_publish(txn, store);
	if (rc == 0)
		rc = fsync_dir(store);
	if (rc < 0) {
		store_error(err, errlen, "cannot store snapshot %s: %s (check free space and permissions)",
			    txn->id, strerror(-rc));
		goto fail;
	}
	txn->open = false;
	return 0;
fail:
	snapshot_store_abort(txn);
	return rc;
}

void snapshot_store_abort(struct snapshot_store_txn *txn)
{
	if (!txn || !txn->open)
		return;
	store_remove_tree(txn->tmp_path);
	txn->open = false;
}

/* ---- resolution ---- */

int snapshot_store_resolve(const char *reference, char *dir_out, size_t dir_len,
			   enum snapshot_store_source *source, char *err, size_t errlen)
{
	struct snapshot_store_entry entry;
	char state[PATH_MAX], resolved[PATH_MAX];
	int rc;

	if (!reference || !*reference) {
		store_error(err, errlen, "the snapshot reference is empty");
		return -EINVAL;
	}
	if (snapshot_store_id_valid(reference)) {
		rc = snapshot_store_find(reference, &entry, err, errlen);
		if (rc == -ENOTUNIQ)
			return rc;
		if (rc == 0) {
			if (source)
				*source = SNAPSHOT_STORE_SOURCE_ID;
			return snprintf(dir_out, dir_len, "%s", entry.path) >= (int)dir_len ?
				       -ENAMETOOLONG : 0;
		}
	}
	if (store_join(state, sizeof(state), reference, SNAPSHOT_STORE_STATE_FILE) == 0 &&
	    access(state, R_OK) == 0 && realpath(reference, resolved)) {
		if (source)
			*source = SNAPSHOT_STORE_SOURCE_PATH;
		return snprintf(dir_out, dir_len, "%s", resolved) >= (int)dir_len ? -ENAMETOOLONG :
										     0;
	}
	store_error(err, errlen,
		    "snapshot '%s' is neither a stored snapshot id (see voidbox snapshot list) nor a snapshot directory (one holding a '%s' file)",
		    reference, SNAPSHOT_STORE_STATE_FILE);
	return -ENOENT;
}
