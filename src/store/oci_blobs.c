/*
 * The OCI blob cache (see oci_blobs.h). A writer owns a temporary file in the cache's own
 * directory (so publishing is a rename on one filesystem) and a SHA-256 context; commit
 * finishes the hash, compares it with the digest it was opened for, fsyncs and renames. A
 * blob that is already cached is left alone (another pull published the same bytes). The
 * temporary's name carries the writer's pid, so the file of a pull that was killed (which no
 * cleanup code outlives) is told from a running pull's and swept by the next pull or prune.
 */
#include "store/oci_blobs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "store/store_fs.h"

#define OCI_BLOBS_DIR_MODE 0755
#define OCI_BLOBS_FILE_MODE 0644
#define OCI_BLOBS_TMP_RANDOM "XXXXXX"
#define OCI_BLOBS_CHUNK 65536
#define OCI_SHA256_BYTES 32

struct oci_blob_writer {
	EVP_MD_CTX *hash;
	int fd;
	char digest[OCI_DIGEST_LEN + 1];
	char tmp_path[PATH_MAX];
	char final_path[PATH_MAX];
};

int oci_digest_check(const char *digest)
{
	const char *hex;

	if (!digest || strncmp(digest, OCI_DIGEST_ALGORITHM, strlen(OCI_DIGEST_ALGORITHM)) != 0)
		return -EINVAL;
	hex = digest + strlen(OCI_DIGEST_ALGORITHM);
	if (strlen(hex) != OCI_SHA256_HEX_LEN)
		return -EINVAL;
	for (size_t i = 0; i < OCI_SHA256_HEX_LEN; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
			return -EINVAL;
	return 0;
}

int oci_blob_path(const char *oci_dir, const char *digest, char *out, size_t size)
{
	if (oci_digest_check(digest) < 0)
		return -EINVAL;
	if (snprintf(out, size, "%s/%s/%s", oci_dir, OCI_BLOBS_SUBDIR,
		     digest + strlen(OCI_DIGEST_ALGORITHM)) >= (int)size)
		return -ENAMETOOLONG;
	return 0;
}

/* mkdir -p for the cache directories; 0 or -errno. */
static int oci_blobs_mkdirs(const char *path)
{
	char partial[PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(partial))
		return -ENAMETOOLONG;
	memcpy(partial, path, len + 1);
	for (char *p = partial + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(partial, OCI_BLOBS_DIR_MODE) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(partial, OCI_BLOBS_DIR_MODE) < 0 && errno != EEXIST ? -errno : 0;
}

static void oci_hex(const unsigned char *bytes, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 0xf];
	}
	out[2 * len] = '\0';
}

/* Finishes hash into "sha256:<hex>" (OCI_DIGEST_LEN + 1 bytes). */
static int oci_hash_finish(EVP_MD_CTX *hash, char *out)
{
	unsigned char sum[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	if (EVP_DigestFinal_ex(hash, sum, &len) != 1 || len != OCI_SHA256_BYTES)
		return -EIO;
	memcpy(out, OCI_DIGEST_ALGORITHM, strlen(OCI_DIGEST_ALGORITHM));
	oci_hex(sum, len, out + strlen(OCI_DIGEST_ALGORITHM));
	return 0;
}

int oci_digest_of(const void *data, size_t len, char *out)
{
	EVP_MD_CTX *hash = EVP_MD_CTX_new();
	int rc = -EIO;

	if (hash && EVP_DigestInit_ex(hash, EVP_sha256(), NULL) == 1 &&
	    EVP_DigestUpdate(hash, data, len) == 1)
		rc = oci_hash_finish(hash, out);
	EVP_MD_CTX_free(hash);
	return rc;
}

static void oci_blob_writer_free(struct oci_blob_writer *writer)
{
	if (writer->fd >= 0)
		close(writer->fd);
	if (writer->tmp_path[0])
		unlink(writer->tmp_path);
	EVP_MD_CTX_free(writer->hash);
	free(writer);
}

int oci_blob_writer_open(const char *oci_dir, const char *digest,
			 struct oci_blob_writer **out, char *err, size_t errlen)
{
	struct oci_blob_writer *writer = calloc(1, sizeof(*writer));
	char dir[PATH_MAX];
	int rc;

	*out = NULL;
	if (!writer) {
		snprintf(err, errlen, "out of memory starting blob %s", digest);
		return -ENOMEM;
	}
	writer->fd = -1;
	rc = oci_blob_path(oci_dir, digest, writer->final_path, sizeof(writer->final_path));
	if (rc < 0) {
		snprintf(err, errlen, "'%s' is not a sha256 digest the cache accepts", digest);
		goto fail;
	}
	snprintf(writer->digest, sizeof(writer->digest), "%s", digest);
	if (snprintf(dir, sizeof(dir), "%s/%s", oci_dir, OCI_BLOBS_SUBDIR) >= (int)sizeof(dir) ||
	    snprintf(writer->tmp_path, sizeof(writer->tmp_path), "%s/%s%ld-%s", dir,
		     OCI_BLOBS_TMP_PREFIX, (long)getpid(), OCI_BLOBS_TMP_RANDOM) >=
		    (int)sizeof(writer->tmp_path)) {
		rc = -ENAMETOOLONG;
		snprintf(err, errlen, "the cache directory %s is too deep", oci_dir);
		writer->tmp_path[0] = '\0';
		goto fail;
	}
	rc = oci_blobs_mkdirs(dir);
	if (rc == 0) {
		writer->fd = mkostemp(writer->tmp_path, O_CLOEXEC);
		rc = writer->fd < 0 ? -errno : 0;
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot write into the blob cache %s: %s", dir, strerror(-rc));
		writer->tmp_path[0] = '\0';
		goto fail;
	}
	writer->hash = EVP_MD_CTX_new();
	if (!writer->hash || EVP_DigestInit_ex(writer->hash, EVP_sha256(), NULL) != 1) {
		rc = -ENOMEM;
		snprintf(err, errlen, "cannot start a sha256 hash");
		goto fail;
	}
	*out = writer;
	return 0;
fail:
	oci_blob_writer_free(writer);
	return rc;
}

int oci_blob_writer_write(struct oci_blob_writer *writer, const void *data, size_t len)
{
	const unsigned char *p = data;

	if (EVP_DigestUpdate(writer->hash, data, len) != 1)
		return -EIO;
	while (len > 0) {
		ssize_t done = write(writer->fd, p, len);

		if (done < 0 && errno == EINTR)
			continue;
		if (done <= 0)
			return done < 0 ? -errno : -EIO;
		p += done;
		len -= (size_t)done;
	}
	return 0;
}

int oci_blob_writer_commit(struct oci_blob_writer *writer, char *err, size_t errlen)
{
	char actual[OCI_DIGEST_LEN + 1];
	int rc = oci_hash_finish(writer->hash, actual);

	if (rc < 0) {
		snprintf(err, errlen, "cannot finish the sha256 of blob %s", writer->digest);
	} else if (strcmp(actual, writer->digest) != 0) {
		rc = -EBADMSG;
		snprintf(err, errlen, "blob digest mismatch: expected %s, got %s; nothing was "
			 "cached (the registry or the network altered it)", writer->digest, actual);
	} else if (fchmod(writer->fd, OCI_BLOBS_FILE_MODE) < 0 || fsync(writer->fd) < 0 ||
		   rename(writer->tmp_path, writer->final_path) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot publish blob %s: %s", writer->digest, strerror(-rc));
	} else {
		writer->tmp_path[0] = '\0'; /* published: nothing to remove */
	}
	oci_blob_writer_free(writer);
	return rc;
}

void oci_blob_writer_abort(struct oci_blob_writer *writer)
{
	if (writer)
		oci_blob_writer_free(writer);
}

void oci_blobs_sweep(const char *oci_dir)
{
	char dir[PATH_MAX];

	if (snprintf(dir, sizeof(dir), "%s/%s", oci_dir, OCI_BLOBS_SUBDIR) < (int)sizeof(dir))
		store_sweep_gone_writers(dir, OCI_BLOBS_TMP_PREFIX);
}

int oci_blob_verify_file(const char *path, const char *digest, char *err, size_t errlen)
{
	unsigned char chunk[OCI_BLOBS_CHUNK];
	char actual[OCI_DIGEST_LEN + 1];
	EVP_MD_CTX *hash = EVP_MD_CTX_new();
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	ssize_t got;

	if (fd < 0 || !hash || EVP_DigestInit_ex(hash, EVP_sha256(), NULL) != 1) {
		rc = fd < 0 ? -errno : -ENOMEM;
		snprintf(err, errlen, "cannot read blob %s: %s", path, strerror(-rc));
		goto out;
	}
	while ((got = read(fd, chunk, sizeof(chunk))) > 0)
		EVP_DigestUpdate(hash, chunk, (size_t)got);
	if (got < 0 || oci_hash_finish(hash, actual) < 0) {
		rc = -EIO;
		snprintf(err, errlen, "cannot hash blob %s", path);
	} else if (strcmp(actual, digest) != 0) {
		rc = -EBADMSG;
		snprintf(err, errlen, "blob %s does not match its digest: expected %s, got %s", path,
			 digest, actual);
	}
out:
	if (fd >= 0)
		close(fd);
	EVP_MD_CTX_free(hash);
	return rc;
}
