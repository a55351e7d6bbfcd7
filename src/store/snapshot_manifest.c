/*
 * Hashing a snapshot's files and reading and writing the two manifest documents
 * (snapshot_manifest.h). JSON through jansson, SHA-256 through OpenSSL's EVP interface.
 *
 * The parser of an archive's manifest trusts nothing: every string is checked against a
 * character set and length before it is copied, file names come from a fixed set (so no
 * path an archive names can leave the directory it is extracted into), sizes are bounded per
 * file, and the chain is one of three shapes. A refusal says which field is wrong.
 */
#include "store/snapshot_manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "store/snapshot_store.h"
#include "store/store_fs.h"

#define SNAPSHOT_MANIFEST_CHUNK (1u << 20)
#define SNAPSHOT_MANIFEST_FILE_MODE 0644
#define SNAPSHOT_MANIFEST_HEX_DIGITS "0123456789abcdef"
#define SNAPSHOT_MANIFEST_KIB (1ULL << 10)
#define SNAPSHOT_MANIFEST_MIB (1ULL << 20)
#define SNAPSHOT_MANIFEST_TIB (1ULL << 40)
#define SNAPSHOT_MANIFEST_HEX_WORD 11 /* "0x" + 8 digits + NUL */
#define SNAPSHOT_MANIFEST_PAGE 4096ULL
#define SNAPSHOT_MANIFEST_DIFF_HEADER 16ULL

/* The files a snapshot is made of, with the largest size an archive may give each. */
static const struct {
	const char *name;
	uint64_t max_bytes;
} snapshot_manifest_known[] = {
	{ "state", 64 * SNAPSHOT_MANIFEST_MIB }, /* the VMM's SNAPSHOT_STATE_MAX_BYTES */
	{ "memory.mem", SNAPSHOT_MANIFEST_TIB },	/* the CLI's largest guest */
	/* every page of the largest guest, with its address, after the header */
	{ "memory.diff", SNAPSHOT_MANIFEST_DIFF_HEADER +
				 SNAPSHOT_MANIFEST_TIB / SNAPSHOT_MANIFEST_PAGE *
					 (SNAPSHOT_MANIFEST_PAGE + sizeof(uint64_t)) },
	{ "store.json", SNAPSHOT_MANIFEST_MIB },
};

#define SNAPSHOT_MANIFEST_KNOWN_COUNT \
	(sizeof(snapshot_manifest_known) / sizeof(snapshot_manifest_known[0]))

const char *const SNAPSHOT_MANIFEST_CPU_REG_NAMES[SNAPSHOT_MANIFEST_CPU_REGS] = {
	"leaf1_ecx", "leaf1_edx", "leaf7_ebx", "leaf7_ecx", "leaf7_edx",
};

bool snapshot_manifest_file_known(const char *name)
{
	return snapshot_manifest_file_max(name) > 0;
}

uint64_t snapshot_manifest_file_max(const char *name)
{
	for (size_t i = 0; name && i < SNAPSHOT_MANIFEST_KNOWN_COUNT; i++)
		if (strcmp(name, snapshot_manifest_known[i].name) == 0)
			return snapshot_manifest_known[i].max_bytes;
	return 0;
}

const struct snapshot_manifest_file *snapshot_manifest_find(const struct snapshot_manifest *m,
							    const char *name)
{
	for (size_t i = 0; i < m->file_count; i++)
		if (strcmp(m->files[i].name, name) == 0)
			return &m->files[i];
	return NULL;
}

/* ---- hashing ---- */

/*
 * Feeds the first size bytes of fd into ctx (chunk and zeros: SNAPSHOT_MANIFEST_CHUNK bytes
 * each, zeros all zero): a hole is fed from zeros without reading it (a memory file is mostly
 * holes, and reading a hole costs the kernel a copy of zeros per byte), data is read; a file
 * system that cannot tell holes is read whole. 0 or -errno.
 */
static int snapshot_sha256_fd(EVP_MD_CTX *ctx, int fd, uint64_t size, unsigned char *chunk,
			      const unsigned char *zeros)
{
	uint64_t at = 0;

	while (at < size) {
		off_t data = lseek(fd, (off_t)at, SEEK_DATA);
		uint64_t data_at = data < 0 ? (errno == ENXIO ? size : at) : (uint64_t)data;
		off_t hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		uint64_t hole_at = hole < 0 ? size : (uint64_t)hole;

		if (data_at > size)
			data_at = size;
		if (hole_at > size)
			hole_at = size;
		for (; at < data_at; at += SNAPSHOT_MANIFEST_CHUNK)
			EVP_DigestUpdate(ctx, zeros, data_at - at < SNAPSHOT_MANIFEST_CHUNK
							     ? data_at - at
							     : SNAPSHOT_MANIFEST_CHUNK);
		at = data_at;
		while (at < hole_at) {
			size_t want = hole_at - at < SNAPSHOT_MANIFEST_CHUNK ? hole_at - at
									 : SNAPSHOT_MANIFEST_CHUNK;
			int rc = fd_pread_full(fd, chunk, want, (off_t)at);

			if (rc < 0)
				return rc;
			EVP_DigestUpdate(ctx, chunk, want);
			at += want;
		}
	}
	return 0;
}

int snapshot_sha256_file(const char *path, char hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1],
			 uint64_t *size, char *err, size_t errlen)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int digest_len = 0;
	unsigned char *chunk = malloc(SNAPSHOT_MANIFEST_CHUNK);
	unsigned char *zeros = calloc(1, SNAPSHOT_MANIFEST_CHUNK);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	int rc = 0;

	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		store_error(err, errlen, "cannot read %s: %s", path, strerror(errno));
		goto out;
	}
	if (!chunk || !zeros || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		rc = -ENOMEM;
		store_error(err, errlen, "out of memory hashing %s", path);
		goto out;
	}
	rc = snapshot_sha256_fd(ctx, fd, (uint64_t)st.st_size, chunk, zeros);
	if (rc < 0) {
		store_error(err, errlen, "cannot read %s: %s", path, strerror(-rc));
		goto out;
	}
	if (EVP_DigestFinal_ex(ctx, digest, &digest_len) != 1) {
		rc = -EIO;
		goto out;
	}
	for (unsigned int i = 0; i < digest_len && 2 * i < SNAPSHOT_MANIFEST_SHA256_HEX_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN] = '\0';
	if (size)
		*size = (uint64_t)st.st_size;
out:
	if (fd >= 0)
		close(fd);
	EVP_MD_CTX_free(ctx);
	free(zeros);
	free(chunk);
	return rc;
}

int snapshot_manifest_hash_dir(const char *dir, struct snapshot_manifest *m, char *err,
			       size_t errlen)
{
	m->file_count = 0;
	for (size_t i = 0; i < SNAPSHOT_MANIFEST_KNOWN_COUNT; i++) {
		struct snapshot_manifest_file *f = &m->files[m->file_count];
		char path[PATH_MAX];
		int rc = store_join(path, sizeof(path), dir,
				    snapshot_manifest_known[i].name);

		if (rc < 0)
			return rc;
		if (access(path, F_OK) < 0)
			continue;
		rc = snapshot_sha256_file(path, f->sha256, &f->size, err, errlen);
		if (rc < 0)
			return rc;
		snprintf(f->name, sizeof(f->name), "%s", snapshot_manifest_known[i].name);
		m->file_count++;
	}
	return 0;
}

/* ---- JSON ---- */

static json_t *snapshot_manifest_hash_or_null(const char *hex)
{
	return hex[0] ? json_string(hex) : json_null();
}

/* {"leaf1_ecx": "0x...", ...}: the five registers, as the archive's cpu.features. */
static json_t *snapshot_manifest_features_to_json(const uint32_t regs[SNAPSHOT_MANIFEST_CPU_REGS])
{
	json_t *features = json_object();

	for (size_t i = 0; features && i < SNAPSHOT_MANIFEST_CPU_REGS; i++) {
		char word[SNAPSHOT_MANIFEST_HEX_WORD];

		snprintf(word, sizeof(word), "0x%08x", regs[i]);
		json_object_set_new(features, SNAPSHOT_MANIFEST_CPU_REG_NAMES[i], json_string(word));
	}
	return features;
}

/*
 * A features object (see above) into regs and *has; absent or null leaves *has false.
 * where names the field for the error ("cpu.features").
 */
static int snapshot_manifest_take_features(json_t *features, const char *where, bool *has,
					   uint32_t regs[SNAPSHOT_MANIFEST_CPU_REGS], char *err,
					   size_t errlen)
{
	*has = false;
	if (!features || json_is_null(features))
		return 0;
	if (!json_is_object(features))
		goto bad;
	for (size_t i = 0; i < SNAPSHOT_MANIFEST_CPU_REGS; i++) {
		const char *word = json_string_value(json_object_get(features,
								     SNAPSHOT_MANIFEST_CPU_REG_NAMES[i]));
		char *end;
		unsigned long value;

		if (!word || strncmp(word, "0x", 2) != 0 ||
		    strlen(word) != SNAPSHOT_MANIFEST_HEX_WORD - 1 ||
		    strspn(word + 2, "0123456789abcdefABCDEF") != SNAPSHOT_MANIFEST_HEX_WORD - 3)
			goto bad;
		errno = 0;
		value = strtoul(word + 2, &end, 16);
		if (errno || *end || value > UINT32_MAX)
			goto bad;
		regs[i] = (uint32_t)value;
	}
	*has = true;
	return 0;
bad:
	store_error(err, errlen, "the manifest's %s must map leaf1_ecx, leaf1_edx, leaf7_ebx, "
		    "leaf7_ecx and leaf7_edx to \"0x\" and 8 hex digits", where);
	return -EBADMSG;
}

void snapshot_manifest_add_cpu_features(bool *into_has, uint32_t into[SNAPSHOT_MANIFEST_CPU_REGS],
					bool from_has,
					const uint32_t from[SNAPSHOT_MANIFEST_CPU_REGS])
{
	if (!from_has)
		return;
	for (size_t i = 0; i < SNAPSHOT_MANIFEST_CPU_REGS; i++)
		into[i] = (*into_has ? into[i] : 0) | from[i];
	*into_has = true;
}

static json_t *snapshot_manifest_to_json(const struct snapshot_manifest *m)
{
	json_t *files = json_array();
	json_t *root = json_pack("{s:s, s:s, s:o, s:o, s:o}", "id", m->id, "kind",
				 m->diff ? "diff" : "base", "parent",
				 m->parent_id[0] ? json_string(m->parent_id) : json_null(),
				 "kernel_sha256", snapshot_manifest_hash_or_null(m->kernel_sha256),
				 "initramfs_sha256",
				 snapshot_manifest_hash_or_null(m->initramfs_sha256));

	if (!root || !files) {
		json_decref(root);
		json_decref(files);
		return NULL;
	}
	if (m->diff)
		json_object_set_new(root, "parent_state_sha256",
				    snapshot_manifest_hash_or_null(m->parent_state_sha256));
	if (m->has_cpu_features)
		json_object_set_new(root, "cpu_features",
				    snapshot_manifest_features_to_json(m->cpu_features));
	for (size_t i = 0; i < m->file_count; i++)
		json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", m->files[i].name,
						       "size", (json_int_t)m->files[i].size,
						       "sha256", m->files[i].sha256));
	json_object_set_new(root, "files", files);
	return root;
}

static bool snapshot_manifest_hex_ok(const char *hex)
{
	return strlen(hex) == SNAPSHOT_MANIFEST_SHA256_HEX_LEN &&
	       strspn(hex, SNAPSHOT_MANIFEST_HEX_DIGITS) == SNAPSHOT_MANIFEST_SHA256_HEX_LEN;
}

/* A string field into out: -EBADMSG unless it is a string that fits (or null when allowed). */
static int snapshot_manifest_take_string(json_t *root, const char *key, bool nullable, char *out,
					 size_t len, char *err, size_t errlen)
{
	json_t *value = json_object_get(root, key);
	const char *text;

	out[0] = '\0';
	if (nullable && (!value || json_is_null(value)))
		return 0;
	text = json_string_value(value);
	if (!text || strlen(text) >= len || strlen(text) != json_string_length(value)) {
		store_error(err, errlen, "the manifest's '%s' is missing, too long or "
			    "not a string", key);
		return -EBADMSG;
	}
	memcpy(out, text, strlen(text) + 1);
	return 0;
}

static int snapshot_manifest_take_hash(json_t *root, const char *key, char *out, char *err,
				       size_t errlen)
{
	int rc = snapshot_manifest_take_string(root, key, true, out,
					       SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1, err, errlen);

	if (rc == 0 && out[0] && !snapshot_manifest_hex_ok(out)) {
		store_error(err, errlen, "the manifest's '%s' is not a SHA-256 (64 "
			    "lowercase hex digits)", key);
		rc = -EBADMSG;
	}
	return rc;
}

static int snapshot_manifest_take_file(json_t *item, struct snapshot_manifest *m, char *err,
				       size_t errlen)
{
	struct snapshot_manifest_file *f = &m->files[m->file_count];
	json_t *size = json_object_get(item, "size");
	int rc = snapshot_manifest_take_string(item, "name", false, f->name, sizeof(f->name), err,
					       errlen);

	if (rc == 0 && !snapshot_manifest_file_known(f->name)) {
		store_error(err, errlen, "the manifest lists a file '%s', which is not "
			    "part of a snapshot", f->name);
		return -EBADMSG;
	}
	if (rc == 0 && snapshot_manifest_find(m, f->name)) {
		store_error(err, errlen, "the manifest lists %s/%s twice", m->id,
			    f->name);
		return -EBADMSG;
	}
	if (rc == 0 && (!json_is_integer(size) || json_integer_value(size) < 0 ||
			(uint64_t)json_integer_value(size) > snapshot_manifest_file_max(f->name))) {
		store_error(err, errlen, "the manifest's size of %s/%s is missing or "
			    "larger than such a file can be", m->id, f->name);
		return -EBADMSG;
	}
	if (rc == 0)
		rc = snapshot_manifest_take_hash(item, "sha256", f->sha256, err, errlen);
	if (rc == 0 && !f->sha256[0]) {
		store_error(err, errlen, "the manifest gives no sha256 for %s/%s", m->id,
			    f->name);
		rc = -EBADMSG;
	}
	if (rc < 0)
		return rc;
	f->size = (uint64_t)json_integer_value(size);
	m->file_count++;
	return 0;
}

/* One snapshot's entry; in an archive (whole) it must list a state file and its memory file. */
static int snapshot_manifest_from_json(json_t *root, bool whole, struct snapshot_manifest *m,
				       char *err, size_t errlen)
{
	char kind[SNAPSHOT_MANIFEST_NAME_MAX];
	json_t *files = json_object_get(root, "files");
	size_t index;
	json_t *item;
	int rc;

	memset(m, 0, sizeof(*m));
	if (!json_is_object(root)) {
		store_error(err, errlen, "a manifest entry is not an object");
		return -EBADMSG;
	}
	rc = snapshot_manifest_take_string(root, "id", false, m->id, sizeof(m->id), err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_string(root, "kind", false, kind, sizeof(kind), err,
						   errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_string(root, "parent", true, m->parent_id,
						   sizeof(m->parent_id), err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_hash(root, "kernel_sha256", m->kernel_sha256, err,
						 errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_hash(root, "initramfs_sha256", m->initramfs_sha256, err,
						 errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_hash(root, "parent_state_sha256",
						 m->parent_state_sha256, err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_features(json_object_get(root, "cpu_features"),
						     "cpu_features", &m->has_cpu_features,
						     m->cpu_features, err, errlen);
	if (rc < 0)
		return rc;
	m->diff = strcmp(kind, "diff") == 0;
	/* a base named like a diff would be listed, locked and deleted as one of another base */
	if (!snapshot_store_id_valid(m->id) || (!m->diff && strcmp(kind, "base") != 0) ||
	    (!m->diff && strstr(m->id, SNAPSHOT_STORE_DIFF_INFIX)) ||
	    m->diff != (m->parent_id[0] != '\0') ||
	    (m->parent_id[0] && !snapshot_store_id_valid(m->parent_id))) {
		store_error(err, errlen, "the manifest's snapshot '%s' has a bad id, "
			    "kind or parent", m->id);
		return -EBADMSG;
	}
	if (!json_is_array(files) || json_array_size(files) > SNAPSHOT_MANIFEST_MAX_FILES) {
		store_error(err, errlen, "the manifest's file list of %s is missing or "
			    "too long", m->id);
		return -EBADMSG;
	}
	json_array_foreach(files, index, item) {
		rc = snapshot_manifest_take_file(item, m, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (whole && (!snapshot_manifest_find(m, "state") ||
	    !snapshot_manifest_find(m, m->diff ? "memory.diff" : "memory.mem") ||
	    snapshot_manifest_find(m, m->diff ? "memory.mem" : "memory.diff"))) {
		store_error(err, errlen, "the manifest's %s %s does not list a state "
			    "file and its memory file", m->diff ? "diff" : "base", m->id);
		return -EBADMSG;
	}
	return 0;
}

static int snapshot_manifest_write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		      SNAPSHOT_MANIFEST_FILE_MODE);
	int rc;

	if (fd < 0)
		return -errno;
	rc = fd_write_full(fd, text, strlen(text));
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int snapshot_manifest_write(const char *dir, const struct snapshot_manifest *m, char *err,
			    size_t errlen)
{
	char path[PATH_MAX];
	json_t *root = snapshot_manifest_to_json(m);
	char *text = NULL;
	int rc = store_join(path, sizeof(path), dir, SNAPSHOT_MANIFEST_FILE);

	if (root) {
		json_object_set_new(root, "manifest_version", json_integer(SNAPSHOT_MANIFEST_VERSION));
		text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	}
	if (rc == 0 && !text)
		rc = -ENOMEM;
	if (rc == 0)
		rc = snapshot_manifest_write_text(path, text);
	if (rc < 0)
		store_error(err, errlen, "cannot write %s: %s", path, strerror(-rc));
	free(text);
	json_decref(root);
	return rc;
}

int snapshot_manifest_read(const char *dir, struct snapshot_manifest *m, char *err,
			   size_t errlen)
{
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *root;
	int rc = store_join(path, sizeof(path), dir, SNAPSHOT_MANIFEST_FILE);

	if (rc < 0)
		return rc;
	if (access(path, F_OK) < 0) {
		store_error(err, errlen, "%s has no %s (it was taken before snapshots "
			    "recorded their hashes)", dir, SNAPSHOT_MANIFEST_FILE);
		return -ENOENT;
	}
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		store_error(err, errlen, "%s is not valid JSON (%s, line %d)", path,
			    jerr.text, jerr.line);
		return -EBADMSG;
	}
	rc = snapshot_manifest_from_json(root, false, m, err, errlen);
	json_decref(root);
	return rc;
}

int snapshot_manifest_verify(const char *dir, const struct snapshot_manifest *m, char *err,
			     size_t errlen)
{
	for (size_t i = 0; i < m->file_count; i++) {
		const struct snapshot_manifest_file *f = &m->files[i];
		char path[PATH_MAX], hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];
		uint64_t size = 0;
		int rc = store_join(path, sizeof(path), dir, f->name);

		if (rc == 0)
			rc = snapshot_sha256_file(path, hex, &size, err, errlen);
		if (rc < 0) {
			store_error(err, errlen, "%s is missing or unreadable", path);
			return rc;
		}
		if (size != f->size) {
			store_error(err, errlen, "%s has %llu bytes, the manifest records "
				    "%llu: it is truncated or was replaced", path,
				    (unsigned long long)size,
				    (unsigned long long)f->size);
			return -EBADMSG;
		}
		if (strcmp(hex, f->sha256) != 0) {
			store_error(err, errlen, "%s does not match the SHA-256 recorded "
				    "for it: its bytes changed", path);
			return -EBADMSG;
		}
	}
	for (size_t i = 0; i < SNAPSHOT_MANIFEST_KNOWN_COUNT; i++) {
		char path[PATH_MAX];

		if (snapshot_manifest_find(m, snapshot_manifest_known[i].name) ||
		    store_join(path, sizeof(path), dir,
			       snapshot_manifest_known[i].name) < 0 ||
		    access(path, F_OK) < 0)
			continue;
		store_error(err, errlen, "%s is not in the manifest", path);
		return -EBADMSG;
	}
	return 0;
}

/* ---- the archive's manifest ---- */

char *snapshot_archive_manifest_dump(const struct snapshot_archive_manifest *m)
{
	json_t *chain = json_array();
	json_t *features = m->has_cpu_features ? snapshot_manifest_features_to_json(m->cpu_features) :
						  json_null();
	json_t *root = json_pack("{s:s, s:i, s:i, s:s}", "format", SNAPSHOT_ARCHIVE_FORMAT,
				 "version", SNAPSHOT_ARCHIVE_VERSION, "state_format_version",
				 (int)m->state_format_version, "snapshot", m->snapshot);
	char *text = NULL;

	if (!root || !chain || !features)
		goto out;
	json_object_set_new(root, "config_hash", m->config_hash[0] ? json_string(m->config_hash) :
								    json_null());
	json_object_set_new(root, "kernel", m->kernel_path[0] ? json_string(m->kernel_path) :
								json_null());
	json_object_set_new(root, "initramfs", m->initramfs_path[0] ?
						       json_string(m->initramfs_path) : json_null());
	json_object_set_new(root, "cpu", json_pack("{s:s, s:O}", "signature", m->cpu_signature,
						   "features", features));
	for (size_t i = 0; i < m->chain_count; i++)
		json_array_append_new(chain, snapshot_manifest_to_json(&m->chain[i]));
	json_object_set(root, "snapshots", chain);
	text = json_dumps(root, JSON_INDENT(2));
out:
	json_decref(features);
	json_decref(chain);
	json_decref(root);
	return text;
}

static int snapshot_archive_take_header(json_t *root, struct snapshot_archive_manifest *m,
					char *err, size_t errlen)
{
	json_t *cpu = json_object_get(root, "cpu");
	json_t *state_version = json_object_get(root, "state_format_version");
	const char *format = json_string_value(json_object_get(root, "format"));
	json_t *version = json_object_get(root, "version");
	int rc;

	if (!format || strcmp(format, SNAPSHOT_ARCHIVE_FORMAT) != 0) {
		store_error(err, errlen, "this is not a voidbox snapshot archive (its "
			    "manifest's format is not '%s')", SNAPSHOT_ARCHIVE_FORMAT);
		return -EBADMSG;
	}
	if (!json_is_integer(version) || json_integer_value(version) != SNAPSHOT_ARCHIVE_VERSION) {
		store_error(err, errlen, "the archive has another manifest version; this "
			    "voidbox reads version %d", SNAPSHOT_ARCHIVE_VERSION);
		return -EBADMSG;
	}
	if (!json_is_integer(state_version) || json_integer_value(state_version) <= 0 ||
	    json_integer_value(state_version) > UINT32_MAX) {
		store_error(err, errlen, "the manifest has no state_format_version");
		return -EBADMSG;
	}
	m->state_format_version = (unsigned int)json_integer_value(state_version);
	rc = snapshot_manifest_take_string(root, "snapshot", false, m->snapshot,
					   sizeof(m->snapshot), err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_hash(root, "config_hash", m->config_hash, err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_string(root, "kernel", true, m->kernel_path,
						   sizeof(m->kernel_path), err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_string(root, "initramfs", true, m->initramfs_path,
						   sizeof(m->initramfs_path), err, errlen);
	if (rc == 0 && !json_is_object(cpu)) {
		store_error(err, errlen, "the manifest has no cpu object");
		rc = -EBADMSG;
	}
	if (rc == 0)
		rc = snapshot_manifest_take_string(cpu, "signature", false, m->cpu_signature,
						   sizeof(m->cpu_signature), err, errlen);
	if (rc == 0)
		rc = snapshot_manifest_take_features(json_object_get(cpu, "features"),
						     "cpu.features", &m->has_cpu_features,
						     m->cpu_features, err, errlen);
	return rc;
}

/* A base; a diff alone (its base is expected in the store); or a base and its diff. */
static int snapshot_archive_check_chain(const struct snapshot_archive_manifest *m, char *err,
					size_t errlen)
{
	const struct snapshot_manifest *last = &m->chain[m->chain_count - 1];

	if (strcmp(last->id, m->snapshot) != 0) {
		store_error(err, errlen, "the manifest's snapshot '%s' is not the last "
			    "of its chain", m->snapshot);
		return -EBADMSG;
	}
	if (m->chain_count == 2 && (m->chain[0].diff || !m->chain[1].diff ||
				    strcmp(m->chain[1].parent_id, m->chain[0].id) != 0)) {
		store_error(err, errlen, "the manifest's chain must be a base and then a "
			    "diff of that base");
		return -EBADMSG;
	}
	if (last->diff && !last->parent_state_sha256[0]) {
		store_error(err, errlen, "the manifest's diff %s does not say which base "
			    "state it needs (parent_state_sha256)", last->id);
		return -EBADMSG;
	}
	return 0;
}

int snapshot_archive_manifest_parse(const char *text, size_t len,
				    struct snapshot_archive_manifest *m, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root, *chain, *item;
	size_t index;
	int rc;

	memset(m, 0, sizeof(*m));
	if (len > SNAPSHOT_ARCHIVE_MANIFEST_MAX_BYTES) {
		store_error(err, errlen, "the archive's manifest is larger than %u bytes",
			    SNAPSHOT_ARCHIVE_MANIFEST_MAX_BYTES);
		return -EBADMSG;
	}
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		store_error(err, errlen, "the archive's manifest is not valid JSON (%s, "
			    "line %d)", jerr.text, jerr.line);
		return -EBADMSG;
	}
	rc = json_is_object(root) ? snapshot_archive_take_header(root, m, err, errlen) : -EBADMSG;
	if (rc < 0 && !json_is_object(root))
		store_error(err, errlen, "the archive's manifest is not a JSON object");
	chain = json_object_get(root, "snapshots");
	if (rc == 0 && (!json_is_array(chain) || json_array_size(chain) == 0 ||
			json_array_size(chain) > SNAPSHOT_MANIFEST_CHAIN_MAX)) {
		store_error(err, errlen, "the manifest must list 1 or %d snapshots",
			    SNAPSHOT_MANIFEST_CHAIN_MAX);
		rc = -EBADMSG;
	}
	if (rc == 0) {
		json_array_foreach(chain, index, item) {
			rc = snapshot_manifest_from_json(item, true, &m->chain[index], err, errlen);
			if (rc < 0)
				break;
			m->chain_count++;
		}
	}
	if (rc == 0)
		rc = snapshot_archive_check_chain(m, err, errlen);
	json_decref(root);
	return rc;
}
