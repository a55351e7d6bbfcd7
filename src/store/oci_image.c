/*
 * The local store of pulled images (see oci_image.h). Everything a pull publishes appears by
 * rename: blobs through the verifying writer, the rootfs through oci_rootfs_build_ext4's
 * temporary name, the reference file through a temporary beside it, so an interrupted pull
 * never leaves a partial image under a published name. Layers are applied in a scratch tree
 * under oci/tmp/ that is removed whatever happens; every layer blob is hashed again right
 * before it is applied, so a cache file altered after its download is never used.
 *
 * A pull killed outright (SIGKILL, or Ctrl-C: no handler is installed) runs no cleanup, so
 * every temporary a pull makes carries its pid in its name: a blob being downloaded, the
 * scratch tree, the rootfs being built. Each pull and each prune first sweeps those whose pid
 * no longer runs, so what a killed pull left is gone by the next one and never accumulates.
 *
 * `image rm` forgets the reference before it deletes the rootfs, so a kill between the two
 * (or a reference lost any other way) leaves an image directory nothing names; prune removes
 * every such directory, as it removes the blobs nothing needs.
 *
 * What a pull has published but not yet named in a reference (its blobs, its rootfs) looks
 * exactly like what prune deletes, and a rootfs a command has looked up but not yet opened
 * is what rm deletes. So the store has one lock (flock on oci/lock): a pull holds it shared
 * from its first write to its reference, a command booting from an image from its lookup
 * until its VMs have opened the rootfs, and rm and prune hold it exclusive. Pulls never
 * exclude each other: everything they write appears by rename under a name of its own.
 */
#include "store/oci_image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/fd_io.h"
#include "common/log.h"
#include "common/path.h"
#include "store/guest_image.h"
#include "store/oci_layer.h"
#include "store/oci_rootfs.h"
#include "store/store_fs.h"

#define OCI_IMAGE_SUBDIR "oci"
#define OCI_IMAGE_IMAGES "images"
#define OCI_IMAGE_REFS "refs"
#define OCI_IMAGE_TMP "tmp"
#define OCI_IMAGE_REF_SUFFIX ".json"
/* A reference file being written: refs/.tmp-<pid>-<random>, renamed to <hex>.json when whole. */
#define OCI_IMAGE_REF_TMP_PREFIX ".tmp-"
#define OCI_IMAGE_REF_TMP_RANDOM "XXXXXX"
#define OCI_IMAGE_REF_FILE_MODE 0644
#define OCI_IMAGE_LOCK_FILE_MODE 0600
#define OCI_IMAGE_LOG "oci"
/* A scratch tree: unpack-<pid>-<random>, so one a killed pull left is told from a live one's. */
#define OCI_IMAGE_UNPACK_PREFIX "unpack-"
#define OCI_IMAGE_UNPACK_RANDOM "XXXXXX"
#define OCI_IMAGE_TREE "tree"
#define OCI_IMAGE_DIR_MODE 0755
#define OCI_IMAGE_TIME_FORMAT "%Y-%m-%dT%H:%M:%SZ"
#define OCI_IMAGE_LIST_GROWTH 16
#define OCI_IMAGE_REF_FILE_MAX (64u << 10)
/* Digests one reference keeps: its manifest, the manifest's config, and each layer. */
#define OCI_IMAGE_DIGESTS_PER_REF (2 + OCI_MANIFEST_LAYERS_MAX)

int oci_image_dir(char *out, size_t size)
{
	char home[PATH_MAX];
	int rc = guest_image_home(home, sizeof(home));

	return rc < 0 ? rc : store_join(out, size, home, OCI_IMAGE_SUBDIR);
}

/* What a waiter for each kind of lock waits for, in the sentence it logs once. */
static const char *const oci_image_lock_waits_for[] = {
	[OCI_IMAGE_LOCK_SHARED] = "`voidbox image rm` or `image prune` to finish",
	[OCI_IMAGE_LOCK_EXCLUSIVE] = "a pull in progress (or a sandbox starting from a pulled "
				     "image) to finish",
};

/* Opens (creating) oci_dir/lock: the fd, or -errno. */
static int oci_image_lock_open(const char *oci_dir)
{
	char path[PATH_MAX];
	int fd, rc = store_join(path, sizeof(path), oci_dir, OCI_IMAGE_LOCK_FILE);

	if (rc == 0)
		rc = path_mkdirs(oci_dir, OCI_IMAGE_DIR_MODE);
	if (rc < 0)
		return rc;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, OCI_IMAGE_LOCK_FILE_MODE);
	if (fd < 0 && (errno == EACCES || errno == EROFS))
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); /* flock needs no write access */
	return fd < 0 ? -errno : fd;
}

int oci_image_lock(const char *oci_dir, enum oci_image_lock_mode mode,
		   struct oci_image_lock *lock, char *err, size_t errlen)
{
	int operation = mode == OCI_IMAGE_LOCK_EXCLUSIVE ? LOCK_EX : LOCK_SH;
	int fd = oci_image_lock_open(oci_dir), rc = 0;

	*lock = (struct oci_image_lock){ .fd = -1, .held = false };
	if (fd < 0 && mode == OCI_IMAGE_LOCK_SHARED &&
	    (fd == -EACCES || fd == -EROFS || fd == -EPERM)) {
		log_debug(OCI_IMAGE_LOG, "not locking the image store %s: %s", oci_dir,
			  strerror(-fd));
		return 0;
	}
	if (fd < 0) {
		snprintf(err, errlen, "cannot open the lock of the image store %s: %s", oci_dir,
			 strerror(-fd));
		return fd;
	}
	if (flock(fd, operation | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? 0 : -errno;
		if (rc == 0) {
			log_warn(OCI_IMAGE_LOG, "waiting for %s with the image store %s",
				 oci_image_lock_waits_for[mode], oci_dir);
			while ((rc = flock(fd, operation)) < 0 && errno == EINTR)
				;
			rc = rc < 0 ? -errno : 0;
		}
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot lock the image store %s: %s", oci_dir, strerror(-rc));
		close(fd);
		return rc;
	}
	*lock = (struct oci_image_lock){ .fd = fd, .held = true };
	return 0;
}

void oci_image_unlock(struct oci_image_lock *lock)
{
	if (lock->held)
		close(lock->fd); /* the lock goes with the file's last descriptor */
	*lock = (struct oci_image_lock){ .fd = -1, .held = false };
}

/* oci_dir/refs/<sha256 hex of the canonical reference>.json */
static int oci_image_ref_path(const char *oci_dir, const char *canonical, char *out,
			      size_t size)
{
	char digest[OCI_DIGEST_LEN + 1];
	int n;

	if (oci_digest_of(canonical, strlen(canonical), digest) < 0)
		return -EIO;
	n = snprintf(out, size, "%s/%s/%s%s", oci_dir, OCI_IMAGE_REFS,
		     digest + strlen(OCI_DIGEST_ALGORITHM), OCI_IMAGE_REF_SUFFIX);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int oci_image_rootfs_path(const char *oci_dir, const char *manifest_digest, char *out,
				 size_t size)
{
	int n;

	if (oci_digest_check(manifest_digest) < 0)
		return -EINVAL;
	n = snprintf(out, size, "%s/%s/%s/%s", oci_dir, OCI_IMAGE_IMAGES,
		     manifest_digest + strlen(OCI_DIGEST_ALGORITHM), OCI_IMAGE_ROOTFS_FILE);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int oci_image_canonical(const char *ref_text, char *out, size_t size, char *err,
			       size_t errlen)
{
	struct oci_ref ref;
	int rc = oci_ref_parse(ref_text, &ref, err, errlen);

	if (rc == 0 && oci_ref_format(&ref, out, size) < 0) {
		snprintf(err, errlen, "image reference '%.64s' is too long", ref_text);
		rc = -ENAMETOOLONG;
	}
	return rc;
}

/* Applies the manifest's layers, lowest first, onto a scratch tree; builds rootfs_path. */
static int oci_image_build_rootfs(const struct oci_pull_options *options,
				  const struct oci_manifest *manifest, const char *rootfs_path,
				  char *err, size_t errlen)
{
	const char *oci_dir = options->oci_dir;
	char scratch[PATH_MAX], tree[PATH_MAX], blob[PATH_MAX], dir[PATH_MAX];
	struct oci_layer_budget budget;
	struct oci_layer_stats stats;
	int rc;

	oci_layer_budget_init(&budget);

	if (snprintf(scratch, sizeof(scratch), "%s/%s/%s%ld-%s", oci_dir, OCI_IMAGE_TMP,
		     OCI_IMAGE_UNPACK_PREFIX, (long)getpid(), OCI_IMAGE_UNPACK_RANDOM) >=
		    (int)sizeof(scratch) ||
	    snprintf(dir, sizeof(dir), "%s/%s", oci_dir, OCI_IMAGE_TMP) >= (int)sizeof(dir)) {
		snprintf(err, errlen, "the image store %s is too deep", oci_dir);
		return -ENAMETOOLONG;
	}
	rc = path_mkdirs(dir, OCI_IMAGE_DIR_MODE);
	if (rc < 0 || !mkdtemp(scratch)) {
		rc = rc < 0 ? rc : -errno;
		snprintf(err, errlen, "cannot make a scratch directory in %s: %s", dir, strerror(-rc));
		return rc;
	}
	rc = store_join(tree, sizeof(tree), scratch, OCI_IMAGE_TREE);
	if (rc == 0 && mkdir(tree, OCI_IMAGE_DIR_MODE) < 0)
		rc = -errno;
	if (rc < 0) {
		snprintf(err, errlen, "cannot make the unpack tree in %s: %s", scratch, strerror(-rc));
		goto out;
	}
	for (size_t i = 0; i < manifest->layer_count; i++) {
		const char *digest = manifest->layers[i].digest;

		rc = oci_pull_check_cancel(options, err, errlen);
		if (rc == 0)
			rc = oci_blob_path(oci_dir, digest, blob, sizeof(blob));
		if (rc == 0)
			rc = oci_blob_verify_file(blob, digest, err, errlen);
		if (rc == 0)
			rc = oci_layer_apply(blob, tree, &budget, &stats, err, errlen);
		if (rc < 0)
			goto out;
		if (stats.skipped)
			fprintf(stderr, "warning: layer %s: %llu entries could not be created here and were skipped\n",
				digest, (unsigned long long)stats.skipped);
	}
	rc = oci_pull_check_cancel(options, err, errlen);
	if (rc < 0)
		goto out;
	snprintf(dir, sizeof(dir), "%s", rootfs_path);
	*strrchr(dir, '/') = '\0';
	rc = path_mkdirs(dir, OCI_IMAGE_DIR_MODE);
	if (rc < 0) {
		snprintf(err, errlen, "cannot make %s: %s", dir, strerror(-rc));
		goto out;
	}
	rc = oci_rootfs_build_ext4(tree, rootfs_path, err, errlen);
out:
	store_remove_tree(scratch);
	return rc;
}

/*
 * The temporaries of pulls that were killed: partial blobs, scratch trees, unfinished rootfs,
 * half-written reference files.
 */
static void oci_image_sweep(const char *oci_dir)
{
	char dir[PATH_MAX], image_dir[PATH_MAX];
	struct dirent *entry;
	DIR *handle;

	oci_blobs_sweep(oci_dir);
	if (store_join(dir, sizeof(dir), oci_dir, OCI_IMAGE_TMP) == 0)
		store_sweep_gone_writers(dir, OCI_IMAGE_UNPACK_PREFIX);
	if (store_join(dir, sizeof(dir), oci_dir, OCI_IMAGE_REFS) == 0)
		store_sweep_gone_writers(dir, OCI_IMAGE_REF_TMP_PREFIX);
	if (store_join(dir, sizeof(dir), oci_dir, OCI_IMAGE_IMAGES) < 0 || !(handle = opendir(dir)))
		return;
	while ((entry = readdir(handle)) != NULL) {
		if (entry->d_name[0] == '.' ||
		    store_join(image_dir, sizeof(image_dir), dir, entry->d_name) < 0)
			continue;
		store_sweep_gone_writers(image_dir, OCI_IMAGE_ROOTFS_FILE OCI_ROOTFS_TMP_SUFFIX);
	}
	closedir(handle);
}

/*
 * Writes info's reference file under a temporary name of this pull's own and renames it into
 * place, so two pulls of one reference each publish a whole file and the last one stays.
 */
static int oci_image_write_ref(const char *oci_dir, const struct oci_image_info *info,
			       char *err, size_t errlen)
{
	char path[PATH_MAX], tmp[PATH_MAX], dir[PATH_MAX];
	json_t *root = NULL;
	int fd = -1, rc;

	rc = oci_image_ref_path(oci_dir, info->reference, path, sizeof(path));
	if (rc == 0 && store_join(dir, sizeof(dir), oci_dir, OCI_IMAGE_REFS) < 0)
		rc = -ENAMETOOLONG;
	if (rc == 0 && snprintf(tmp, sizeof(tmp), "%s/%s%ld-%s", dir, OCI_IMAGE_REF_TMP_PREFIX,
				(long)getpid(), OCI_IMAGE_REF_TMP_RANDOM) >= (int)sizeof(tmp))
		rc = -ENAMETOOLONG;
	if (rc == 0)
		rc = path_mkdirs(dir, OCI_IMAGE_DIR_MODE);
	if (rc == 0 && (fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc < 0) {
		snprintf(err, errlen, "cannot record %s in %s: %s", info->reference, oci_dir,
			 strerror(-rc));
		return rc;
	}
	root = json_pack("{s:i, s:s, s:s, s:i, s:s}", "format", 1, "reference", info->reference,
			 "manifest", info->manifest_digest, "layers", (int)info->layer_count,
			 "pulled_at", info->pulled_at);
	rc = root && json_dumpfd(root, fd, JSON_INDENT(2)) == 0 ? 0 : -EIO;
	json_decref(root);
	if (rc == 0 && (fchmod(fd, OCI_IMAGE_REF_FILE_MODE) < 0 || fsync(fd) < 0))
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
	}
	return rc;
}

int oci_image_pull(const char *ref_text, const struct oci_pull_options *options,
		   struct oci_image_info *out, char *err, size_t errlen)
{
	struct oci_pull_result *result = calloc(1, sizeof(*result));
	struct oci_image_lock lock = { .fd = -1 };
	struct oci_ref ref;
	struct stat st;
	time_t now = time(NULL);
	struct tm tm;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!result) {
		snprintf(err, errlen, "out of memory pulling %s", ref_text);
		return -ENOMEM;
	}
	rc = oci_ref_parse(ref_text, &ref, err, errlen);
	if (rc == 0 && oci_ref_format(&ref, out->reference, sizeof(out->reference)) < 0) {
		snprintf(err, errlen, "image reference '%.64s' is too long", ref_text);
		rc = -ENAMETOOLONG;
	}
	if (rc == 0)
		rc = oci_image_lock(options->oci_dir, OCI_IMAGE_LOCK_SHARED, &lock, err, errlen);
	if (rc == 0) {
		oci_image_sweep(options->oci_dir);
		rc = oci_pull(&ref, options, result, err, errlen);
	}
	if (rc < 0)
		goto out;
	memcpy(out->manifest_digest, result->manifest_digest, sizeof(out->manifest_digest));
	out->layer_count = (unsigned int)result->manifest.layer_count;
	rc = oci_image_rootfs_path(options->oci_dir, out->manifest_digest, out->rootfs_path,
				   sizeof(out->rootfs_path));
	if (rc < 0) {
		snprintf(err, errlen, "the image store %s is too deep", options->oci_dir);
		goto out;
	}
	if (stat(out->rootfs_path, &st) < 0) {
		rc = oci_image_build_rootfs(options, &result->manifest, out->rootfs_path, err,
					    errlen);
		if (rc < 0 || stat(out->rootfs_path, &st) < 0) {
			rc = rc < 0 ? rc : -errno;
			goto out;
		}
	}
	out->rootfs_bytes = (uint64_t)st.st_size;
	gmtime_r(&now, &tm);
	strftime(out->pulled_at, sizeof(out->pulled_at), OCI_IMAGE_TIME_FORMAT, &tm);
	rc = oci_image_write_ref(options->oci_dir, out, err, errlen);
out:
	oci_image_unlock(&lock);
	free(result);
	return rc;
}

/* Reads one ref file into info (rootfs path and size included). 0, -ENOENT or -EINVAL. */
static int oci_image_read_ref(const char *oci_dir, const char *path, struct oci_image_info *info)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	const char *reference = NULL, *manifest = NULL, *pulled_at = "";
	int layers = 0, rc = -EINVAL;
	struct stat st;

	memset(info, 0, sizeof(*info));
	if (!root)
		return access(path, F_OK) < 0 ? -ENOENT : -EINVAL;
	if (json_unpack(root, "{s:s, s:s, s?:i, s?:s}", "reference", &reference, "manifest",
			&manifest, "layers", &layers, "pulled_at", &pulled_at) == 0 &&
	    strlen(reference) < sizeof(info->reference) &&
	    strlen(pulled_at) < sizeof(info->pulled_at) && layers >= 0 &&
	    oci_image_rootfs_path(oci_dir, manifest, info->rootfs_path,
				  sizeof(info->rootfs_path)) == 0) {
		snprintf(info->reference, sizeof(info->reference), "%s", reference);
		snprintf(info->manifest_digest, sizeof(info->manifest_digest), "%s", manifest);
		snprintf(info->pulled_at, sizeof(info->pulled_at), "%s", pulled_at);
		info->layer_count = (unsigned int)layers;
		if (stat(info->rootfs_path, &st) == 0)
			info->rootfs_bytes = (uint64_t)st.st_size;
		rc = 0;
	}
	json_decref(root);
	return rc;
}

int oci_image_find(const char *oci_dir, const char *ref_text, struct oci_image_info *out,
		   char *err, size_t errlen)
{
	char canonical[OCI_REF_TEXT_MAX], path[PATH_MAX];
	int rc = oci_image_canonical(ref_text, canonical, sizeof(canonical), err, errlen);

	if (rc < 0)
		return rc;
	rc = oci_image_ref_path(oci_dir, canonical, path, sizeof(path));
	if (rc == 0)
		rc = oci_image_read_ref(oci_dir, path, out);
	if (rc == 0 && access(out->rootfs_path, R_OK) < 0)
		rc = -ENOENT;
	if (rc == -ENOENT)
		snprintf(err, errlen, "image %s is not pulled; run: voidbox image pull %s", canonical,
			 ref_text);
	else if (rc < 0)
		snprintf(err, errlen, "the record of image %s in %s is unreadable; pull it again",
			 canonical, oci_dir);
	return rc;
}

static int oci_image_compare(const void *a, const void *b)
{
	return strcmp(((const struct oci_image_info *)a)->reference,
		      ((const struct oci_image_info *)b)->reference);
}

int oci_image_list(const char *oci_dir, struct oci_image_info **out, size_t *count, char *err,
		   size_t errlen)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct oci_image_info *list = NULL;
	size_t used = 0, cap = 0;
	struct dirent *entry;
	DIR *handle;

	*out = NULL;
	*count = 0;
	if (store_join(dir, sizeof(dir), oci_dir, OCI_IMAGE_REFS) < 0) {
		snprintf(err, errlen, "the image store %s is too deep", oci_dir);
		return -ENAMETOOLONG;
	}
	handle = opendir(dir);
	if (!handle)
		return errno == ENOENT ? 0 : (snprintf(err, errlen, "cannot read %s: %s", dir,
						       strerror(errno)), -EIO);
	while ((entry = readdir(handle)) != NULL) {
		size_t len = strlen(entry->d_name);

		if (len <= strlen(OCI_IMAGE_REF_SUFFIX) ||
		    strcmp(entry->d_name + len - strlen(OCI_IMAGE_REF_SUFFIX), OCI_IMAGE_REF_SUFFIX) != 0 ||
		    store_join(path, sizeof(path), dir, entry->d_name) < 0)
			continue;
		if (used == cap) {
			struct oci_image_info *grown =
				realloc(list, (cap + OCI_IMAGE_LIST_GROWTH) * sizeof(*list));

			if (!grown) {
				free(list);
				closedir(handle);
				snprintf(err, errlen, "out of memory listing images");
				return -ENOMEM;
			}
			list = grown;
			cap += OCI_IMAGE_LIST_GROWTH;
		}
		if (oci_image_read_ref(oci_dir, path, &list[used]) == 0)
			used++;
	}
	closedir(handle);
	if (used)
		qsort(list, used, sizeof(*list), oci_image_compare);
	*out = list;
	*count = used;
	return 0;
}

int oci_image_remove(const char *oci_dir, const char *ref_text, char *err, size_t errlen)
{
	struct oci_image_info target, *all = NULL;
	struct oci_image_lock lock = { .fd = -1 };
	char canonical[OCI_REF_TEXT_MAX], path[PATH_MAX], image_dir[PATH_MAX];
	size_t count = 0;
	bool shared = false;
	int rc = oci_image_canonical(ref_text, canonical, sizeof(canonical), err, errlen);

	if (rc < 0)
		return rc;
	rc = oci_image_ref_path(oci_dir, canonical, path, sizeof(path));
	if (rc == 0)
		rc = oci_image_lock(oci_dir, OCI_IMAGE_LOCK_EXCLUSIVE, &lock, err, errlen);
	if (rc < 0)
		return rc;
	rc = oci_image_read_ref(oci_dir, path, &target);
	if (rc < 0) {
		snprintf(err, errlen, "no pulled image %s (voidbox image list shows them)", canonical);
		rc = rc == -EINVAL ? (unlink(path), -EINVAL) : -ENOENT;
		goto out;
	}
	if (unlink(path) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot remove %s: %s", path, strerror(-rc));
		goto out;
	}
	rc = oci_image_list(oci_dir, &all, &count, err, errlen);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < count; i++)
		shared |= strcmp(all[i].manifest_digest, target.manifest_digest) == 0;
	free(all);
	if (shared)
		goto out;
	snprintf(image_dir, sizeof(image_dir), "%s", target.rootfs_path);
	*strrchr(image_dir, '/') = '\0';
	rc = store_remove_tree(image_dir);
	if (rc < 0)
		snprintf(err, errlen, "cannot remove %s: %s", image_dir, strerror(-rc));
out:
	oci_image_unlock(&lock);
	return rc;
}

/* ---- prune: the blobs no pulled reference needs ---- */

/* Reads the cached manifest blob digest (verified) and adds it, its config and layers. */
static int oci_image_needed_by(const char *oci_dir, const char *digest,
			       char (*keep)[OCI_DIGEST_LEN + 1], size_t *kept, char *err,
			       size_t errlen)
{
	struct oci_manifest *manifest = calloc(1, sizeof(*manifest));
	char path[PATH_MAX];
	char *body = malloc(OCI_MANIFEST_BYTES_MAX);
	ssize_t len = -EINVAL;
	int fd = -1, rc;

	rc = manifest && body ? oci_blob_path(oci_dir, digest, path, sizeof(path)) : -ENOMEM;
	if (rc == 0)
		rc = oci_blob_verify_file(path, digest, err, errlen);
	if (rc == 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc == 0) {
		len = fd_read_full(fd, body, OCI_MANIFEST_BYTES_MAX);
		rc = len < 0 ? (int)len : len == OCI_MANIFEST_BYTES_MAX ? -EMSGSIZE : 0;
	}
	if (rc == 0)
		rc = oci_manifest_parse(body, (size_t)len, NULL, manifest, err, errlen);
	if (rc == 0 && manifest->kind != OCI_MANIFEST_IMAGE)
		rc = -EINVAL;
	if (rc < 0) {
		snprintf(err, errlen, "the manifest %s of a pulled image is missing or unreadable "
			 "in the cache, so its layers cannot be told from the rest: pull that image "
			 "again (voidbox image list) or remove it, then prune", digest);
		goto out;
	}
	snprintf(keep[(*kept)++], OCI_DIGEST_LEN + 1, "%s", digest);
	snprintf(keep[(*kept)++], OCI_DIGEST_LEN + 1, "%s", manifest->config.digest);
	for (size_t i = 0; i < manifest->layer_count; i++)
		snprintf(keep[(*kept)++], OCI_DIGEST_LEN + 1, "%s", manifest->layers[i].digest);
out:
	if (fd >= 0)
		close(fd);
	free(body);
	free(manifest);
	return rc;
}

static bool oci_image_is_kept(const char (*keep)[OCI_DIGEST_LEN + 1], size_t kept,
			      const char *hex)
{
	for (size_t i = 0; i < kept; i++)
		if (strcmp(keep[i] + strlen(OCI_DIGEST_ALGORITHM), hex) == 0)
			return true;
	return false;
}

/*
 * Opens oci_dir/sub for a sweep, its path into path: 0 with *handle NULL when it does not
 * exist yet, or -errno with the reason in err.
 */
static int oci_image_open_sweep_dir(const char *oci_dir, const char *sub, char *path,
				    size_t path_len, DIR **handle, char *err, size_t errlen)
{
	*handle = NULL;
	if (store_join(path, path_len, oci_dir, sub) < 0) {
		snprintf(err, errlen, "the image store %s is too deep", oci_dir);
		return -ENAMETOOLONG;
	}
	*handle = opendir(path);
	if (*handle || errno == ENOENT)
		return 0;
	snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
	return -EIO;
}

/* Whether name is a digest's hex (a blob's or an image directory's name); the digest into out. */
static bool oci_image_entry_digest(const char *name, char out[OCI_DIGEST_LEN + 1])
{
	snprintf(out, OCI_DIGEST_LEN + 1, "%s%.*s", OCI_DIGEST_ALGORITHM, OCI_SHA256_HEX_LEN,
		 name);
	return strlen(name) == OCI_SHA256_HEX_LEN && oci_digest_check(out) == 0;
}

/* Deletes each blob (a file named by a well-formed digest) not in keep. */
static int oci_image_sweep_blobs(const char *oci_dir, const char (*keep)[OCI_DIGEST_LEN + 1],
				 size_t kept, struct oci_image_prune_result *out, char *err,
				 size_t errlen)
{
	char digest[OCI_DIGEST_LEN + 1], path[PATH_MAX];
	struct dirent *entry;
	struct stat st;
	DIR *handle;
	int rc = oci_image_open_sweep_dir(oci_dir, OCI_BLOBS_SUBDIR, path, sizeof(path), &handle,
					  err, errlen);

	if (rc < 0 || !handle)
		return rc;
	while ((entry = readdir(handle)) != NULL) {
		char blob[PATH_MAX];

		if (!oci_image_entry_digest(entry->d_name, digest) ||
		    oci_blob_path(oci_dir, digest, blob, sizeof(blob)) < 0)
			continue; /* a pull's temporary file, or nothing of ours */
		if (oci_image_is_kept(keep, kept, entry->d_name)) {
			out->kept++;
			continue;
		}
		if (lstat(blob, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (unlink(blob) < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot remove %s: %s", blob, strerror(errno));
			break;
		}
		out->removed++;
		out->freed_bytes += (uint64_t)st.st_size;
	}
	closedir(handle);
	return rc;
}

/* Whether dir holds an entry whose name starts with prefix. */
static bool oci_image_dir_holds(const char *dir, const char *prefix)
{
	DIR *handle = opendir(dir);
	struct dirent *entry;
	bool holds = false;

	if (!handle)
		return false;
	while (!holds && (entry = readdir(handle)) != NULL)
		holds = strncmp(entry->d_name, prefix, strlen(prefix)) == 0;
	closedir(handle);
	return holds;
}

/*
 * Deletes each images/<hex>/ no reference in images names, unless a running pull is building
 * its rootfs there (the sweep before has removed the temporaries of pulls that are gone).
 */
static int oci_image_sweep_unreferenced(const char *oci_dir, const struct oci_image_info *images,
					size_t count, struct oci_image_prune_result *out,
					char *err, size_t errlen)
{
	char digest[OCI_DIGEST_LEN + 1], dir[PATH_MAX], image_dir[PATH_MAX], rootfs[PATH_MAX];
	struct dirent *entry;
	DIR *handle;
	int rc = oci_image_open_sweep_dir(oci_dir, OCI_IMAGE_IMAGES, dir, sizeof(dir), &handle,
					  err, errlen);

	if (rc < 0 || !handle)
		return rc;
	while (rc == 0 && (entry = readdir(handle)) != NULL) {
		bool named = false;
		struct stat st;

		if (!oci_image_entry_digest(entry->d_name, digest) ||
		    store_join(image_dir, sizeof(image_dir), dir, entry->d_name) < 0 ||
		    store_join(rootfs, sizeof(rootfs), image_dir, OCI_IMAGE_ROOTFS_FILE) < 0)
			continue; /* nothing of ours */
		for (size_t i = 0; i < count && !named; i++)
			named = strcmp(images[i].manifest_digest, digest) == 0;
		if (named ||
		    oci_image_dir_holds(image_dir, OCI_IMAGE_ROOTFS_FILE OCI_ROOTFS_TMP_SUFFIX))
			continue;
		if (stat(rootfs, &st) < 0)
			st.st_size = 0;
		rc = store_remove_tree(image_dir);
		if (rc < 0) {
			snprintf(err, errlen, "cannot remove %s: %s", image_dir, strerror(-rc));
			break;
		}
		out->images_removed++;
		out->freed_bytes += (uint64_t)st.st_size;
	}
	closedir(handle);
	return rc;
}

int oci_image_prune(const char *oci_dir, struct oci_image_prune_result *out, char *err,
		    size_t errlen)
{
	struct oci_image_info *images = NULL;
	char (*keep)[OCI_DIGEST_LEN + 1] = NULL;
	struct oci_image_lock lock = { .fd = -1 };
	size_t count = 0, kept = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = oci_image_lock(oci_dir, OCI_IMAGE_LOCK_EXCLUSIVE, &lock, err, errlen);
	if (rc < 0)
		return rc;
	oci_image_sweep(oci_dir);
	rc = oci_image_list(oci_dir, &images, &count, err, errlen);
	if (rc < 0)
		goto out;
	keep = calloc(count ? count * OCI_IMAGE_DIGESTS_PER_REF : 1, sizeof(*keep));
	if (!keep) {
		snprintf(err, errlen, "out of memory pruning the image cache");
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < count && rc == 0; i++)
		rc = oci_image_needed_by(oci_dir, images[i].manifest_digest, keep, &kept, err,
					 errlen);
	if (rc == 0)
		rc = oci_image_sweep_blobs(oci_dir, (const char (*)[OCI_DIGEST_LEN + 1])keep, kept,
					   out, err, errlen);
	if (rc == 0)
		rc = oci_image_sweep_unreferenced(oci_dir, images, count, out, err, errlen);
out:
	oci_image_unlock(&lock);
	free(keep);
	free(images);
	return rc;
}
