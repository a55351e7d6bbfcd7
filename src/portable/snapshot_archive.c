/*
 * Export and import of stored snapshots as one tar + zstd archive (snapshot_archive.h).
 *
 * The archive is `manifest.json` first, then `<id>/<file>` for each snapshot of the chain,
 * base first. Export hashes every file again while it streams it and refuses to finish an
 * archive whose bytes differ from what the snapshot recorded, so a snapshot damaged on disk
 * is not shipped as if it were sound. Import reads the manifest before any file, then
 * accepts only entries the manifest names (regular files, "<id>/<name>" with a name from the
 * fixed set, the size the manifest gives), hashes each as it lands in a temporary directory
 * inside the store, and publishes only after the last one matched. All-zero pages are not
 * written (holes), so a memory file stays as sparse as it was where it was taken.
 * Export writes into an unnamed file beside the destination (O_TMPFILE) and names it only
 * once it is whole, so an export killed outright (Ctrl-C, SIGKILL) leaves no half archive;
 * where the file system makes no unnamed files, the temporary's name carries the pid and the
 * next export to that path removes it. An import killed outright leaves its scratch directory
 * (.tmp-<pid>-...) in the store, which the next import, snapshot or gc sweeps.
 * libarchive is opened by the first export or import (src/dynlib/archive_dl.h).
 */
#include "portable/snapshot_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "common/log.h"
#include "dynlib/archive_dl.h"
#include "store/snapshot_store.h"
#include "store/store_fs.h"
#include "vmm/cpu_features.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_file.h"

#define SNAPSHOT_ARCHIVE_CHUNK (1u << 20)
#define SNAPSHOT_ARCHIVE_PAGE 4096u
#define SNAPSHOT_ARCHIVE_FILE_MODE 0644
#define SNAPSHOT_ARCHIVE_DIR_MODE 0755
#define SNAPSHOT_ARCHIVE_ENTRY_MAX (SNAPSHOT_MANIFEST_ID_MAX + SNAPSHOT_MANIFEST_NAME_MAX + 1)
#define SNAPSHOT_ARCHIVE_ERR_MAX 512
#define SNAPSHOT_ARCHIVE_IMPORT_LABEL "import"
/* An archive gets its name as out_path + this + pid, an instant before it is renamed in place. */
#define SNAPSHOT_ARCHIVE_TMP_SUFFIX ".tmp-"
#define SNAPSHOT_ARCHIVE_PROC_FD "/proc/self/fd/%d"
#define SNAPSHOT_ARCHIVE_PROC_FD_MAX 32
#define SNAPSHOT_ARCHIVE_STATE "state"
#define SNAPSHOT_ARCHIVE_EXPORT_PURPOSE "exporting a snapshot"
#define SNAPSHOT_ARCHIVE_IMPORT_PURPOSE "importing a snapshot"

static void snapshot_archive_hex(EVP_MD_CTX *ctx, char hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	hex[0] = '\0';
	if (EVP_DigestFinal_ex(ctx, digest, &len) != 1)
		return;
	for (unsigned int i = 0; i < len && 2 * i < SNAPSHOT_MANIFEST_SHA256_HEX_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

/* Reads and decodes dir/state (checksums checked; nothing about this host is). */
static int snapshot_archive_read_state(const char *dir, struct snapshot_image *image,
				       char *err, size_t errlen)
{
	char path[PATH_MAX];
	uint8_t *data = NULL;
	struct stat st;
	uint64_t id = 0;
	int fd, rc = store_join(path, sizeof(path), dir, SNAPSHOT_ARCHIVE_STATE);

	if (rc < 0)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SNAPSHOT_STATE_MAX_BYTES) {
		store_error(err, errlen, "%s is missing or not a snapshot state file",
			    path);
		rc = fd < 0 ? -errno : -EBADMSG;
		goto out;
	}
	data = malloc((size_t)st.st_size);
	rc = data ? fd_pread_full(fd, data, (size_t)st.st_size, 0) : -ENOMEM;
	if (rc < 0)
		store_error(err, errlen, "cannot read %s: %s", path, strerror(-rc));
	else
		rc = snapshot_decode(data, (size_t)st.st_size, SNAPSHOT_DECODE_CHECKED, image, &id,
				     err, errlen);
out:
	if (fd >= 0)
		close(fd);
	free(data);
	return rc;
}

/* ---- export ---- */

/* The snapshot's recorded hashes; one taken before they were recorded is hashed now. */
static int snapshot_archive_manifest_of(const struct snapshot_store_entry *entry,
					const struct snapshot_store_entry *base,
					struct snapshot_manifest *m, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int rc = snapshot_manifest_read(entry->path, m, err, errlen);

	if (rc == -ENOENT) {
		memset(m, 0, sizeof(*m));
		log_info("snapshot", "%s records no hashes; hashing its files now", entry->id);
		rc = snapshot_manifest_hash_dir(entry->path, m, err, errlen);
		if (rc == 0 && entry->kernel_path[0] &&
		    snapshot_sha256_file(entry->kernel_path, m->kernel_sha256, NULL, NULL, 0) < 0)
			m->kernel_sha256[0] = '\0';
		if (rc == 0 && entry->initramfs_path[0] &&
		    snapshot_sha256_file(entry->initramfs_path, m->initramfs_sha256, NULL, NULL, 0) < 0)
			m->initramfs_sha256[0] = '\0';
		if (rc == 0 && base) {
			rc = store_join(path, sizeof(path), base->path,
					SNAPSHOT_ARCHIVE_STATE);
			if (rc == 0)
				rc = snapshot_sha256_file(path, m->parent_state_sha256, NULL, err,
							  errlen);
		}
	}
	if (rc < 0)
		return rc;
	snprintf(m->id, sizeof(m->id), "%.*s", (int)sizeof(m->id) - 1, entry->id);
	m->diff = entry->kind == SNAPSHOT_STORE_KIND_DIFF;
	snprintf(m->parent_id, sizeof(m->parent_id), "%s", m->diff ? entry->parent_id : "");
	if (m->diff && !m->parent_state_sha256[0]) {
		store_error(err, errlen, "diff %s does not record its base's hash: take "
			    "it again", entry->id);
		return -EBADMSG;
	}
	return 0;
}

/* The CPU the snapshot was taken on, from its state file. */
static int snapshot_archive_cpu_of(const char *dir, struct snapshot_archive_manifest *m,
				   char *err, size_t errlen)
{
	struct snapshot_image *image = calloc(1, sizeof(*image));
	int rc;

	if (!image)
		return -ENOMEM;
	rc = snapshot_archive_read_state(dir, image, err, errlen);
	if (rc == 0) {
		snprintf(m->cpu_signature, sizeof(m->cpu_signature), "%s",
			 image->meta.cpu_signature);
		m->has_cpu_features = image->meta.has_cpu_features;
		for (unsigned int i = 0; i < SNAPSHOT_MANIFEST_CPU_REGS; i++)
			m->cpu_features[i] = image->meta.cpu_features.regs[i];
	}
	snapshot_image_release(image);
	free(image);
	return rc;
}

/*
 * What could not be written (an entry, the archive's end) and why; a full file system, which
 * libarchive reports as a bare "Write error", is told with what to do. The partial archive
 * is removed by the caller.
 */
static void snapshot_archive_write_failed(struct archive *a, const char *what, char *err,
					  size_t errlen)
{
	int code = archive_dl.errno_of(a);

	if (code == ENOSPC || code == EDQUOT)
		store_error(err, errlen, "cannot write %s: %s: free space where the archive "
			    "goes, or give -o a path with room; no partial archive is left", what,
			    strerror(code));
	else
		store_error(err, errlen, "cannot write %s: %s", what,
			    code > 0 ? strerror(code) : archive_dl.error_string(a));
}

static int snapshot_archive_put_header(struct archive *a, const char *name, uint64_t size,
				       time_t mtime, char *err, size_t errlen)
{
	struct archive_entry *entry = archive_dl.entry_new();
	int rc;

	if (!entry)
		return -ENOMEM;
	archive_dl.entry_set_pathname(entry, name);
	archive_dl.entry_set_size(entry, (la_int64_t)size);
	archive_dl.entry_set_filetype(entry, AE_IFREG);
	archive_dl.entry_set_perm(entry, SNAPSHOT_ARCHIVE_FILE_MODE);
	archive_dl.entry_set_mtime(entry, mtime, 0);
	rc = archive_dl.write_header(a, entry) == ARCHIVE_OK ? 0 : -EIO;
	if (rc < 0) {
		char what[PATH_MAX];

		snprintf(what, sizeof(what), "the archive entry %s", name);
		snapshot_archive_write_failed(a, what, err, errlen);
	}
	archive_dl.entry_free(entry);
	return rc;
}

static int snapshot_archive_put_data(struct archive *a, const void *data, size_t len,
				     const char *name, char *err, size_t errlen)
{
	char what[PATH_MAX];

	if (archive_dl.write_data(a, data, len) == (la_ssize_t)len)
		return 0;
	snprintf(what, sizeof(what), "%s into the archive", name);
	snapshot_archive_write_failed(a, what, err, errlen);
	return -EIO;
}

/* Streams one file into the archive, hashing it; it must be what its manifest says. */
static int snapshot_archive_put_file(struct archive *a, const char *dir, const char *id,
				     const struct snapshot_manifest_file *f, unsigned char *chunk,
				     char *err, size_t errlen)
{
	char path[PATH_MAX], name[SNAPSHOT_ARCHIVE_ENTRY_MAX], hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint64_t total = 0;
	struct stat st;
	int fd = -1, rc = store_join(path, sizeof(path), dir, f->name);

	if (rc == 0)
		rc = store_join(name, sizeof(name), id, f->name);
	if (rc == 0 && (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1))
		rc = -ENOMEM;
	if (rc < 0)
		goto out;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size != f->size) {
		store_error(err, errlen, "%s is missing or has another size than its "
			    "snapshot recorded (run voidbox snapshot verify %s)", path, id);
		rc = -EBADMSG;
		goto out;
	}
	rc = snapshot_archive_put_header(a, name, f->size, st.st_mtime, err, errlen);
	while (rc == 0) {
		ssize_t n = fd_read_full(fd, chunk, SNAPSHOT_ARCHIVE_CHUNK);

		if (n < 0) {
			rc = (int)n;
			store_error(err, errlen, "cannot read %s: %s", path,
				    strerror((int)-n));
		}
		if (n <= 0)
			break;
		EVP_DigestUpdate(ctx, chunk, (size_t)n);
		total += (uint64_t)n;
		rc = snapshot_archive_put_data(a, chunk, (size_t)n, name, err, errlen);
	}
	if (rc < 0)
		goto out;
	snapshot_archive_hex(ctx, hex);
	if (total != f->size || strcmp(hex, f->sha256) != 0) {
		store_error(err, errlen, "%s does not match the SHA-256 recorded when the "
			    "snapshot was stored: its bytes changed, so it is not exported "
			    "(run voidbox snapshot verify %s)", path, id);
		rc = -EBADMSG;
	}
out:
	if (fd >= 0)
		close(fd);
	EVP_MD_CTX_free(ctx);
	return rc;
}

/*
 * The file the archive is written into, in out_path's directory: an unnamed one (O_TMPFILE)
 * where the file system makes them, which a process killed while writing leaves nothing of;
 * else tmp_path, made here (*named set), which such a process leaves behind for the next
 * export to out_path to remove, as this one removes those of exports that are gone. The fd,
 * or -errno.
 */
static int snapshot_archive_create(const char *out_path, const char *tmp_path, bool *named)
{
	char dir[PATH_MAX], prefix[NAME_MAX + 1];
	const char *slash = strrchr(out_path, '/');
	int fd;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == out_path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - out_path), out_path);
	if (snprintf(prefix, sizeof(prefix), "%s%s", slash ? slash + 1 : out_path,
		     SNAPSHOT_ARCHIVE_TMP_SUFFIX) < (int)sizeof(prefix))
		store_sweep_gone_writers(dir, prefix);
	fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, SNAPSHOT_ARCHIVE_FILE_MODE);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd >= 0 ? fd : -errno;
	unlink(tmp_path); /* carries this pid: only a gone process of the same pid left it */
	fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SNAPSHOT_ARCHIVE_FILE_MODE);
	if (fd < 0)
		return -errno;
	*named = true;
	return fd;
}

/* Gives the finished unnamed file fd the name tmp_path, from where it is renamed in place. */
static int snapshot_archive_name(int fd, const char *tmp_path, char *err, size_t errlen)
{
	char proc_path[SNAPSHOT_ARCHIVE_PROC_FD_MAX];
	int rc;

	snprintf(proc_path, sizeof(proc_path), SNAPSHOT_ARCHIVE_PROC_FD, fd);
	unlink(tmp_path); /* carries this pid: only a gone process of the same pid left it */
	if (linkat(AT_FDCWD, proc_path, AT_FDCWD, tmp_path, AT_SYMLINK_FOLLOW) == 0 ||
	    linkat(fd, "", AT_FDCWD, tmp_path, AT_EMPTY_PATH) == 0)
		return 0;
	rc = -errno;
	store_error(err, errlen, "cannot write %s: %s", tmp_path, strerror(-rc));
	return rc;
}

/* Writes the archive onto fd, the temporary file that becomes out_path (named in messages). */
static int snapshot_archive_write(int fd, const char *out_path,
				  const struct snapshot_archive_manifest *m,
				  const struct snapshot_store_entry *chain, char *err,
				  size_t errlen)
{
	struct archive *a = archive_dl.write_new();
	unsigned char *chunk = malloc(SNAPSHOT_ARCHIVE_CHUNK);
	char *text = snapshot_archive_manifest_dump(m);
	int rc = a && chunk && text ? 0 : -ENOMEM;

	if (rc == 0 && (archive_dl.write_add_filter_zstd(a) != ARCHIVE_OK ||
			archive_dl.write_set_format_pax_restricted(a) != ARCHIVE_OK ||
			archive_dl.write_open_fd(a, fd) != ARCHIVE_OK)) {
		store_error(err, errlen, "cannot write %s: %s", out_path,
			    archive_dl.error_string(a));
		rc = -EIO;
	}
	if (rc == 0)
		rc = snapshot_archive_put_header(a, SNAPSHOT_MANIFEST_FILE, strlen(text), time(NULL),
						 err, errlen);
	if (rc == 0)
		rc = snapshot_archive_put_data(a, text, strlen(text), SNAPSHOT_MANIFEST_FILE, err,
					       errlen);
	for (size_t i = 0; rc == 0 && i < m->chain_count; i++)
		for (size_t j = 0; rc == 0 && j < m->chain[i].file_count; j++)
			rc = snapshot_archive_put_file(a, chain[i].path, m->chain[i].id,
						       &m->chain[i].files[j], chunk, err, errlen);
	if (rc == 0 && archive_dl.write_close(a) != ARCHIVE_OK) {
		snapshot_archive_write_failed(a, out_path, err, errlen);
		rc = -EIO;
	}
	archive_dl.write_free(a);
	free(chunk);
	free(text);
	return rc;
}

int snapshot_archive_export(const char *prefix, const char *out_path,
			    enum snapshot_archive_scope scope,
			    struct snapshot_archive_manifest *manifest, char *err, size_t errlen)
{
	struct snapshot_store_entry chain[SNAPSHOT_MANIFEST_CHAIN_MAX], top;
	struct snapshot_archive_manifest *m = calloc(1, sizeof(*m));
	char tmp_path[PATH_MAX], base_err[SNAPSHOT_ARCHIVE_ERR_MAX];
	size_t count = 0;
	int rc = m ? archive_dl_load(SNAPSHOT_ARCHIVE_EXPORT_PURPOSE, err, errlen) : -ENOMEM;

	if (rc == 0)
		rc = snapshot_store_find(prefix, &top, err, errlen);

	if (rc == 0 && top.kind == SNAPSHOT_STORE_KIND_DIFF) {
		rc = snapshot_store_find(top.parent_id, &chain[0], base_err, sizeof(base_err));
		if (rc < 0 || strcmp(chain[0].id, top.parent_id) != 0) {
			store_error(err, errlen, "the base %s of diff %s is not in the store: "
				    "the diff cannot be exported", top.parent_id, top.id);
			rc = -ENOENT;
		} else if (scope == SNAPSHOT_ARCHIVE_WITH_BASE) {
			count = 1;
		}
	}
	if (rc < 0)
		goto out;
	chain[count++] = top;
	for (size_t i = 0; rc == 0 && i < count; i++)
		rc = snapshot_archive_manifest_of(&chain[i], top.kind == SNAPSHOT_STORE_KIND_DIFF &&
						  chain[i].kind == SNAPSHOT_STORE_KIND_DIFF ? &chain[0] : NULL,
						  &m->chain[i], err, errlen);
	if (rc < 0)
		goto out;
	m->chain_count = count;
	m->state_format_version = VM_SNAPSHOT_FORMAT_VERSION;
	snprintf(m->snapshot, sizeof(m->snapshot), "%s", top.id);
	snprintf(m->config_hash, sizeof(m->config_hash), "%s", top.config_hash);
	snprintf(m->kernel_path, sizeof(m->kernel_path), "%s", top.kernel_path);
	snprintf(m->initramfs_path, sizeof(m->initramfs_path), "%s", top.initramfs_path);
	rc = snapshot_archive_cpu_of(top.path, m, err, errlen);
	/* one list in the archive: what the state file records and what the manifests claim */
	for (size_t i = 0; rc == 0 && i < count; i++) {
		snapshot_manifest_add_cpu_features(&m->has_cpu_features, m->cpu_features,
						   m->chain[i].has_cpu_features,
						   m->chain[i].cpu_features);
		m->chain[i].has_cpu_features = false;
	}
	if (rc == 0 && snprintf(tmp_path, sizeof(tmp_path), "%s%s%ld", out_path,
				SNAPSHOT_ARCHIVE_TMP_SUFFIX, (long)getpid()) >= (int)sizeof(tmp_path))
		rc = -ENAMETOOLONG;
	if (rc == 0) {
		/* opened here, so an unwritable destination is told with its errno */
		bool named = false;
		int fd = snapshot_archive_create(out_path, tmp_path, &named);

		if (fd < 0) {
			rc = fd;
			store_error(err, errlen, "cannot write %s: %s: check that its directory "
				    "exists and is writable", out_path, strerror(-rc));
			goto out;
		}
		rc = snapshot_archive_write(fd, out_path, m, chain, err, errlen);
		if (rc == 0 && !named)
			rc = snapshot_archive_name(fd, tmp_path, err, errlen);
		named = named || rc == 0;
		if (close(fd) < 0 && rc == 0) {
			rc = -errno;
			store_error(err, errlen, "cannot write %s: %s", tmp_path, strerror(-rc));
		}
		if (rc == 0 && rename(tmp_path, out_path) < 0) {
			rc = -errno;
			store_error(err, errlen, "cannot write %s: %s", out_path, strerror(errno));
		}
		if (rc < 0 && named)
			unlink(tmp_path);
	}
	if (rc == 0 && manifest)
		*manifest = *m;
out:
	free(m);
	return rc;
}

/* ---- import ---- */

struct snapshot_archive_import {
	const char *archive_path;
	int archive_fd; /* the archive, open for libarchive until the import ends (-1: not yet) */
	struct snapshot_archive_manifest *m;
	char store[PATH_MAX];
	char scratch[PATH_MAX];
	bool present[SNAPSHOT_MANIFEST_CHAIN_MAX]; /* an identical base is stored already */
	bool seen[SNAPSHOT_MANIFEST_CHAIN_MAX][SNAPSHOT_MANIFEST_MAX_FILES];
	unsigned char *chunk;
	char *err;
	size_t errlen;
};

static const char *snapshot_archive_state_hash(const struct snapshot_manifest *m)
{
	const struct snapshot_manifest_file *state = snapshot_manifest_find(m,
									    SNAPSHOT_ARCHIVE_STATE);

	return state ? state->sha256 : "";
}

/* Whether the store holds a snapshot id whose state file hashes to sha256. */
static int snapshot_archive_stored_state(const struct snapshot_archive_import *ctx,
					 const char *id, const char *sha256, bool *exists,
					 bool *same)
{
	char dir[PATH_MAX], path[PATH_MAX], hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];
	int rc = store_join(dir, sizeof(dir), ctx->store, id);

	if (rc == 0)
		rc = store_join(path, sizeof(path), dir, SNAPSHOT_ARCHIVE_STATE);
	if (rc < 0)
		return rc;
	*exists = access(path, F_OK) == 0;
	*same = *exists && snapshot_sha256_file(path, hex, NULL, NULL, 0) == 0 &&
		strcmp(hex, sha256) == 0;
	return 0;
}

/* What the destination already holds decides what is published; conflicts are refused. */
static int snapshot_archive_plan(struct snapshot_archive_import *ctx)
{
	const struct snapshot_archive_manifest *m = ctx->m;
	const struct snapshot_manifest *last = &m->chain[m->chain_count - 1];
	bool exists = false, same = false;
	int rc;

	if (m->state_format_version != VM_SNAPSHOT_FORMAT_VERSION) {
		store_error(ctx->err, ctx->errlen, "the archive's snapshot has state "
			    "format version %u, this voidbox reads version %u: export it "
			    "again with this voidbox's version", m->state_format_version,
			    VM_SNAPSHOT_FORMAT_VERSION);
		return -EPROTO;
	}
	if (m->chain_count == 2 && strcmp(last->parent_state_sha256,
					  snapshot_archive_state_hash(&m->chain[0])) != 0) {
		store_error(ctx->err, ctx->errlen, "the archive's manifest says diff %s "
			    "needs another base than the %s it carries", last->id,
			    m->chain[0].id);
		return -EBADMSG;
	}
	if (!m->chain[0].diff) {
		rc = snapshot_archive_stored_state(ctx, m->chain[0].id,
						   snapshot_archive_state_hash(&m->chain[0]),
						   &exists, &same);
		if (rc < 0)
			return rc;
		if (exists && !same) {
			store_error(ctx->err, ctx->errlen, "this store already has a "
				    "snapshot %s, and it is not the one in the archive: "
				    "delete it first (voidbox snapshot delete %s)",
				    m->chain[0].id, m->chain[0].id);
			return -EEXIST;
		}
		ctx->present[0] = exists;
		return 0;
	}
	rc = snapshot_archive_stored_state(ctx, last->parent_id, last->parent_state_sha256,
					   &exists, &same);
	if (rc < 0)
		return rc;
	if (!exists) {
		store_error(ctx->err, ctx->errlen, "the archive holds diff %s without its "
			    "base %s, and this store has no snapshot %s: import the base "
			    "first, or export the diff with its base", last->id,
			    last->parent_id, last->parent_id);
		return -ENOENT;
	}
	if (!same) {
		store_error(ctx->err, ctx->errlen, "this store's snapshot %s is not the "
			    "base diff %s was taken against (its state file differs)",
			    last->parent_id, last->id);
		return -ESTALE;
	}
	return 0;
}

/* Writes len bytes at offset, leaving all-zero pages as holes. */
static int snapshot_archive_write_sparse(int fd, const unsigned char *data, size_t len,
					 uint64_t offset)
{
	static const unsigned char zero[SNAPSHOT_ARCHIVE_PAGE];

	for (size_t done = 0; done < len;) {
		size_t part = len - done < SNAPSHOT_ARCHIVE_PAGE ? len - done : SNAPSHOT_ARCHIVE_PAGE;
		int rc;

		if (part == SNAPSHOT_ARCHIVE_PAGE && memcmp(data + done, zero, part) == 0) {
			done += part;
			continue;
		}
		rc = fd_pwrite_full(fd, data + done, part, offset + done);
		if (rc < 0)
			return rc;
		done += part;
	}
	return 0;
}

/*
 * A file of the archive that could not be written into the store: which, why, and for a full
 * file system what to do (nothing is published, and the scratch directory goes).
 */
static void snapshot_archive_unpack_failed(struct snapshot_archive_import *ctx, const char *name,
					   int rc)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < ctx->m->chain_count; i++)
		for (size_t f = 0; f < ctx->m->chain[i].file_count; f++)
			bytes += ctx->m->chain[i].files[f].size;
	if (rc == -ENOSPC || rc == -EDQUOT)
		store_error(ctx->err, ctx->errlen, "cannot unpack %s into %s: %s: free space "
			    "there, or set VOIDBOX_HOME to a store with room (the archive's files "
			    "take up to %.1f MiB, less where memory is all zeros); nothing was "
			    "imported", name, ctx->store, strerror(-rc),
			    (double)bytes / (1024.0 * 1024.0));
	else
		store_error(ctx->err, ctx->errlen, "cannot unpack %s into %s: %s; nothing was "
			    "imported", name, ctx->store, strerror(-rc));
}

/* Refuses anything but a regular file at a path the manifest names, not seen before. */
static int snapshot_archive_match(struct snapshot_archive_import *ctx,
				  struct archive_entry *entry, size_t *chain_index,
				  const struct snapshot_manifest_file **file)
{
	const char *name = archive_dl.entry_pathname(entry);

	if (!name || name[0] == '/' || strstr(name, "..")) {
		store_error(ctx->err, ctx->errlen, "archive entry '%s' points outside "
			    "the directory it is unpacked into: the archive is refused",
			    name ? name : "(no name)");
		return -EBADMSG;
	}
	if (archive_dl.entry_filetype(entry) != AE_IFREG || archive_dl.entry_hardlink(entry) ||
	    archive_dl.entry_symlink(entry)) {
		store_error(ctx->err, ctx->errlen, "archive entry '%s' is not a regular "
			    "file (links, directories and devices are refused)", name);
		return -EBADMSG;
	}
	for (size_t i = 0; i < ctx->m->chain_count; i++) {
		const struct snapshot_manifest *snap = &ctx->m->chain[i];
		size_t id_len = strlen(snap->id);

		if (strncmp(name, snap->id, id_len) != 0 || name[id_len] != '/')
			continue;
		for (size_t j = 0; j < snap->file_count; j++) {
			if (strcmp(name + id_len + 1, snap->files[j].name) != 0)
				continue;
			if (ctx->seen[i][j]) {
				store_error(ctx->err, ctx->errlen, "archive entry '%s' "
					    "appears twice", name);
				return -EBADMSG;
			}
			ctx->seen[i][j] = true;
			*chain_index = i;
			*file = &snap->files[j];
			return 0;
		}
	}
	store_error(ctx->err, ctx->errlen, "archive entry '%s' is not in the archive's "
		    "manifest", name);
	return -EBADMSG;
}

/* Unpacks one entry (or only hashes it, for a base stored already) and checks its hash. */
static int snapshot_archive_unpack(struct snapshot_archive_import *ctx, struct archive *a,
				   struct archive_entry *entry)
{
	const struct snapshot_manifest_file *f = NULL;
	char path[PATH_MAX], dir[PATH_MAX], hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];
	const char *name = archive_dl.entry_pathname(entry);
	EVP_MD_CTX *hash = EVP_MD_CTX_new();
	uint64_t total = 0;
	size_t index = 0;
	int fd = -1, rc = snapshot_archive_match(ctx, entry, &index, &f);

	if (rc == 0 && (!archive_dl.entry_size_is_set(entry) ||
			(uint64_t)archive_dl.entry_size(entry) != f->size)) {
		store_error(ctx->err, ctx->errlen, "archive entry '%s' has %lld bytes, "
			    "its manifest says %llu: the archive is refused", name,
			    (long long)archive_dl.entry_size(entry),
			    (unsigned long long)f->size);
		rc = -EBADMSG;
	}
	if (rc == 0 && (!hash || EVP_DigestInit_ex(hash, EVP_sha256(), NULL) != 1))
		rc = -ENOMEM;
	if (rc == 0 && !ctx->present[index]) {
		rc = store_join(dir, sizeof(dir), ctx->scratch, ctx->m->chain[index].id);
		if (rc == 0)
			rc = store_join(path, sizeof(path), dir, f->name);
		if (rc == 0)
			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
				  SNAPSHOT_ARCHIVE_FILE_MODE);
		if (rc == 0 && fd < 0) {
			rc = -errno;
			snapshot_archive_unpack_failed(ctx, name, rc);
		}
	}
	while (rc == 0) {
		la_ssize_t n = archive_dl.read_data(a, ctx->chunk, SNAPSHOT_ARCHIVE_CHUNK);

		if (n < 0) {
			store_error(ctx->err, ctx->errlen, "cannot read %s from the "
				    "archive: %s (the archive is truncated or damaged)",
				    name, archive_dl.error_string(a));
			rc = -EBADMSG;
		}
		if (n <= 0)
			break;
		if ((uint64_t)n > f->size - total) {
			store_error(ctx->err, ctx->errlen, "%s holds more bytes than its "
				    "manifest says", name);
			rc = -EBADMSG;
			break;
		}
		EVP_DigestUpdate(hash, ctx->chunk, (size_t)n);
		if (fd >= 0)
			rc = snapshot_archive_write_sparse(fd, ctx->chunk, (size_t)n, total);
		if (rc < 0)
			snapshot_archive_unpack_failed(ctx, name, rc);
		total += (uint64_t)n;
	}
	if (rc == 0 && fd >= 0 && ftruncate(fd, (off_t)total) < 0) {
		rc = -errno;
		snapshot_archive_unpack_failed(ctx, name, rc);
	}
	if (rc == 0) {
		snapshot_archive_hex(hash, hex);
		if (total != f->size || strcmp(hex, f->sha256) != 0) {
			store_error(ctx->err, ctx->errlen, "%s does not match the SHA-256 "
				    "in the archive's manifest: the archive was damaged or "
				    "altered, and nothing was imported", name);
			rc = -EBADMSG;
		}
	}
	if (fd >= 0)
		close(fd);
	EVP_MD_CTX_free(hash);
	return rc;
}

/* The manifest, which must come first: everything after it is judged against it. */
static int snapshot_archive_read_manifest(struct snapshot_archive_import *ctx, struct archive *a)
{
	struct archive_entry *entry;
	char *text = NULL;
	size_t len = 0;
	int rc = archive_dl.read_next_header(a, &entry);

	if (rc != ARCHIVE_OK) {
		store_error(ctx->err, ctx->errlen, "%s is not a voidbox snapshot archive "
			    "(%s)", ctx->archive_path, rc == ARCHIVE_EOF ? "it is empty" :
			    archive_dl.error_string(a));
		return -EBADMSG;
	}
	if (strcmp(archive_dl.entry_pathname(entry) ? archive_dl.entry_pathname(entry) : "",
		   SNAPSHOT_MANIFEST_FILE) != 0 || archive_dl.entry_filetype(entry) != AE_IFREG ||
	    archive_dl.entry_size(entry) <= 0 ||
	    archive_dl.entry_size(entry) > SNAPSHOT_ARCHIVE_MANIFEST_MAX_BYTES) {
		store_error(ctx->err, ctx->errlen, "%s is not a voidbox snapshot archive "
			    "(it does not start with a %s of at most %u bytes)",
			    ctx->archive_path, SNAPSHOT_MANIFEST_FILE,
			    SNAPSHOT_ARCHIVE_MANIFEST_MAX_BYTES);
		return -EBADMSG;
	}
	text = malloc((size_t)archive_dl.entry_size(entry));
	if (!text)
		return -ENOMEM;
	while (len < (size_t)archive_dl.entry_size(entry)) {
		la_ssize_t n = archive_dl.read_data(a, text + len,
						    (size_t)archive_dl.entry_size(entry) - len);

		if (n <= 0)
			break;
		len += (size_t)n;
	}
	rc = len == (size_t)archive_dl.entry_size(entry) ? 0 : -EBADMSG;
	if (rc < 0)
		store_error(ctx->err, ctx->errlen, "cannot read %s from the archive: %s "
			    "(the archive is truncated or damaged)", SNAPSHOT_MANIFEST_FILE,
			    archive_dl.error_string(a));
	else
		rc = snapshot_archive_manifest_parse(text, len, ctx->m, ctx->err, ctx->errlen);
	free(text);
	return rc;
}

/* The first file the manifest lists that the archive did not hold; NULL when none. */
static bool snapshot_archive_first_missing(const struct snapshot_archive_import *ctx,
					   char *name, size_t len)
{
	for (size_t i = 0; i < ctx->m->chain_count; i++)
		for (size_t j = 0; j < ctx->m->chain[i].file_count; j++)
			if (!ctx->seen[i][j]) {
				snprintf(name, len, "%s/%s", ctx->m->chain[i].id,
					 ctx->m->chain[i].files[j].name);
				return true;
			}
	return false;
}

static int snapshot_archive_unpack_all(struct snapshot_archive_import *ctx, struct archive *a)
{
	char missing[SNAPSHOT_ARCHIVE_ENTRY_MAX];
	struct archive_entry *entry;
	int rc = 0;

	for (;;) {
		int status = archive_dl.read_next_header(a, &entry);

		if (status == ARCHIVE_EOF)
			break;
		if (status != ARCHIVE_OK) {
			if (!snapshot_archive_first_missing(ctx, missing, sizeof(missing)))
				snprintf(missing, sizeof(missing), "(after the last file)");
			store_error(ctx->err, ctx->errlen, "the archive is truncated or "
				    "damaged before %s: %s", missing,
				    archive_dl.error_string(a));
			return -EBADMSG;
		}
		rc = snapshot_archive_unpack(ctx, a, entry);
		if (rc < 0)
			return rc;
	}
	if (snapshot_archive_first_missing(ctx, missing, sizeof(missing))) {
		store_error(ctx->err, ctx->errlen, "the archive is incomplete: %s, which "
			    "its manifest lists, is missing", missing);
		return -EBADMSG;
	}
	return 0;
}

/*
 * Reads dir's state, which must be of the kind the manifest gives m: a diff's, or a base's
 * that names no parent (a diff's would keep the other machine's path to its parent, and a
 * restore here would read whatever snapshot that path names).
 */
static int snapshot_archive_read_state_of(const char *dir, const struct snapshot_manifest *m,
					  struct snapshot_image *image, char *err, size_t errlen)
{
	const char *kind = m->diff ? "diff" : "base";
	int rc = snapshot_archive_read_state(dir, image, err, errlen);

	if (rc == 0 && (image->meta.type != (m->diff ? VM_SNAPSHOT_DIFF : VM_SNAPSHOT_BASE) ||
			(!m->diff && image->meta.parent_dir[0]))) {
		store_error(err, errlen, "the state file of %s %s is not a %s's: the archive is "
			    "refused", kind, m->id, kind);
		rc = -EBADMSG;
	}
	return rc;
}

/* A diff's state names its base by path: point it at the base in this store. */
static int snapshot_archive_rebase(const char *dir, const char *base_dir,
				   struct snapshot_manifest *m, char *err, size_t errlen)
{
	struct snapshot_image *image = calloc(1, sizeof(*image));
	struct snapshot_manifest_file *state = (struct snapshot_manifest_file *)
		snapshot_manifest_find(m, SNAPSHOT_ARCHIVE_STATE);
	char path[PATH_MAX];
	uint64_t id = 0;
	int rc = image && state ? snapshot_archive_read_state_of(dir, m, image, err, errlen)
				: -ENOMEM;

	if (rc == 0 && strlen(base_dir) >= sizeof(image->meta.parent_dir)) {
		store_error(err, errlen, "the path of this store's base %s is too long for diff %s's "
			    "state", base_dir, m->id);
		rc = -ENAMETOOLONG;
	}
	if (rc == 0) {
		snprintf(image->meta.parent_dir, sizeof(image->meta.parent_dir), "%s", base_dir);
		rc = snapshot_file_write(dir, image, &id, err, errlen);
	}
	if (rc == 0)
		rc = store_join(path, sizeof(path), dir, SNAPSHOT_ARCHIVE_STATE);
	if (rc == 0)
		rc = snapshot_sha256_file(path, state->sha256, &state->size, err, errlen);
	if (image)
		snapshot_image_release(image);
	free(image);
	return rc;
}

/* A base's state, checked to be a base's (snapshot_archive_read_state_of). */
static int snapshot_archive_check_base(const char *dir, const struct snapshot_manifest *m,
				       char *err, size_t errlen)
{
	struct snapshot_image *image = calloc(1, sizeof(*image));
	int rc = image ? snapshot_archive_read_state_of(dir, m, image, err, errlen) : -ENOMEM;

	if (image)
		snapshot_image_release(image);
	free(image);
	return rc;
}

/* Moves one verified snapshot from the scratch directory into the store. */
static int snapshot_archive_publish_one(struct snapshot_archive_import *ctx, size_t index,
					const char *base_id, char *published_id)
{
	struct snapshot_manifest stored = ctx->m->chain[index];
	struct snapshot_store_txn txn;
	char src[PATH_MAX], base_dir[PATH_MAX], resolved[PATH_MAX];
	int rc = store_join(src, sizeof(src), ctx->scratch, stored.id);

	/* the archive's cpu.features go with each snapshot: its restores require them */
	snapshot_manifest_add_cpu_features(&stored.has_cpu_features, stored.cpu_features,
					   ctx->m->has_cpu_features, ctx->m->cpu_features);

	if (rc == 0 && !stored.diff)
		rc = snapshot_archive_check_base(src, &stored, ctx->err, ctx->errlen);
	if (rc == 0 && stored.diff) {
		rc = store_join(base_dir, sizeof(base_dir), ctx->store, base_id);
		if (rc == 0 && !realpath(base_dir, resolved))
			rc = -errno;
		if (rc == 0)
			rc = snapshot_archive_rebase(src, resolved, &stored, ctx->err, ctx->errlen);
	}
	if (rc == 0)
		rc = snapshot_store_begin_import(stored.id, stored.diff ? base_id : NULL,
						 ctx->m->config_hash, &txn, ctx->err, ctx->errlen);
	if (rc < 0)
		return rc;
	/* the transaction's empty directory gives way to the verified one */
	if (rmdir(txn.tmp_path) < 0 || rename(src, txn.tmp_path) < 0) {
		rc = -errno;
		store_error(ctx->err, ctx->errlen, "cannot move %s into the store: %s",
			    stored.id, strerror(errno));
		snapshot_store_abort(&txn);
		return rc;
	}
	txn.manifest = &stored;
	rc = snapshot_store_commit(&txn, NULL, ctx->err, ctx->errlen);
	if (rc == 0)
		snprintf(published_id, SNAPSHOT_MANIFEST_ID_MAX, "%s", txn.id);
	return rc;
}

static int snapshot_archive_publish(struct snapshot_archive_import *ctx,
				    struct snapshot_archive_import_result *result)
{
	char published[SNAPSHOT_MANIFEST_CHAIN_MAX][SNAPSHOT_MANIFEST_ID_MAX] = { { 0 } };
	const struct snapshot_manifest *last = &ctx->m->chain[ctx->m->chain_count - 1];
	char base_id[SNAPSHOT_MANIFEST_ID_MAX];
	int rc = 0;

	snprintf(base_id, sizeof(base_id), "%s", last->diff ? last->parent_id : last->id);
	for (size_t i = 0; rc == 0 && i < ctx->m->chain_count; i++) {
		if (ctx->present[i]) {
			result->already_present++;
			snprintf(published[i], sizeof(published[i]), "%s", ctx->m->chain[i].id);
			continue;
		}
		rc = snapshot_archive_publish_one(ctx, i, base_id, published[i]);
		if (rc == 0)
			result->published++;
	}
	if (rc < 0) {
		/* all or nothing: what this import published goes again */
		for (size_t i = 0; i < ctx->m->chain_count; i++)
			if (!ctx->present[i] && published[i][0])
				snapshot_store_delete(published[i], NULL, NULL, 0);
		result->published = 0;
		return rc;
	}
	snprintf(result->snapshot_id, sizeof(result->snapshot_id), "%s",
		 published[ctx->m->chain_count - 1]);
	snprintf(result->base_id, sizeof(result->base_id), "%s", last->diff ? base_id : "");
	return 0;
}

/*
 * After an import: a snapshot of another CPU model, or (where this host's KVM can be asked)
 * one whose guest was shown a feature this host cannot offer, is named now, since every
 * restore of it here will be refused. The import stands: the store may be moved on, or the
 * archive was only being checked.
 */
static void snapshot_archive_judge_features(const struct snapshot_archive_manifest *m,
					    const char *imported_id)
{
	char here[VM_SNAPSHOT_CPU_SIGNATURE_LEN];
	struct cpu_features shown;
	char err[SNAPSHOT_ARCHIVE_ERR_MAX];

	snapshot_cpu_signature(here);
	if (strcmp(here, m->cpu_signature) != 0) {
		log_warn("snapshot", "%s was taken on CPU %s and this host's is %s: it is imported, "
			 "but it restores only on a host like the one it was taken on",
			 imported_id, m->cpu_signature, here);
		return;
	}
	if (!m->has_cpu_features)
		return;
	for (unsigned int i = 0; i < CPU_FEATURE_REG_COUNT; i++)
		shown.regs[i] = m->cpu_features[i];
	if (cpu_features_check_here(&shown, NULL, 1, err, sizeof(err)) == -EXDEV)
		log_warn("snapshot", "%s is imported, but this host cannot restore it: %s",
			 imported_id, err);
}

static int snapshot_archive_open(struct snapshot_archive_import *ctx, struct archive **out)
{
	/* opened here, so a missing or unreadable file is told with its errno */
	int fd = open(ctx->archive_path, O_RDONLY | O_CLOEXEC);
	struct archive *a;
	struct stat st;
	int rc = 0;

	*out = NULL;
	if (fd < 0 || fstat(fd, &st) < 0)
		rc = -errno;
	else if (!S_ISREG(st.st_mode))
		rc = -EINVAL;
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		store_error(ctx->err, ctx->errlen, "cannot open %s: %s", ctx->archive_path,
			    rc == -EINVAL ? "not a regular file (give the archive's path)"
					  : strerror(-rc));
		return rc;
	}
	ctx->archive_fd = fd;
	a = archive_dl.read_new();
	*out = a;
	if (!a)
		return -ENOMEM;
	if (archive_dl.read_support_filter_zstd(a) != ARCHIVE_OK ||
	    archive_dl.read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_dl.read_open_fd(a, ctx->archive_fd, SNAPSHOT_ARCHIVE_CHUNK) != ARCHIVE_OK) {
		store_error(ctx->err, ctx->errlen, "cannot open %s: %s: give an archive written "
			    "by voidbox snapshot export", ctx->archive_path,
			    archive_dl.error_string(a));
		return -EIO;
	}
	return 0;
}

int snapshot_archive_import(const char *archive_path,
			    struct snapshot_archive_import_result *result, char *err,
			    size_t errlen)
{
	struct snapshot_archive_import ctx = { .archive_path = archive_path, .archive_fd = -1,
					       .err = err, .errlen = errlen };
	struct archive *a = NULL;
	int rc;

	memset(result, 0, sizeof(*result));
	ctx.m = calloc(1, sizeof(*ctx.m));
	ctx.chunk = malloc(SNAPSHOT_ARCHIVE_CHUNK);
	rc = ctx.m && ctx.chunk ? archive_dl_load(SNAPSHOT_ARCHIVE_IMPORT_PURPOSE, err, errlen) :
				  -ENOMEM;
	if (rc == 0)
		rc = snapshot_store_dir(ctx.store, sizeof(ctx.store));
	if (rc == 0)
		rc = snapshot_store_scratch_dir(SNAPSHOT_ARCHIVE_IMPORT_LABEL, ctx.scratch,
						sizeof(ctx.scratch), err, errlen);
	if (rc < 0) {
		ctx.scratch[0] = '\0';
		goto out;
	}
	rc = snapshot_archive_open(&ctx, &a);
	if (rc == 0)
		rc = snapshot_archive_read_manifest(&ctx, a);
	if (rc == 0)
		rc = snapshot_archive_plan(&ctx);
	for (size_t i = 0; rc == 0 && i < ctx.m->chain_count; i++) {
		char dir[PATH_MAX];

		if (ctx.present[i])
			continue;
		rc = store_join(dir, sizeof(dir), ctx.scratch, ctx.m->chain[i].id);
		if (rc == 0 && mkdir(dir, SNAPSHOT_ARCHIVE_DIR_MODE) < 0)
			rc = -errno;
	}
	if (rc == 0)
		rc = snapshot_archive_unpack_all(&ctx, a);
	if (rc == 0)
		rc = snapshot_archive_publish(&ctx, result);
	if (rc == 0)
		snapshot_archive_judge_features(ctx.m, result->snapshot_id);
out:
	if (a)
		archive_dl.read_free(a);
	if (ctx.archive_fd >= 0)
		close(ctx.archive_fd);
	if (ctx.scratch[0])
		store_remove_tree(ctx.scratch);
	free(ctx.chunk);
	free(ctx.m);
	return rc;
}
