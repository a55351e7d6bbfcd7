/*
 * The OCI blob cache: $VOIDBOX_HOME/oci/blobs/sha256/<hex>, one file per blob, named by its
 * digest. A blob enters the cache only through a writer that hashes every byte as it is
 * written (to a temporary file beside the cache) and publishes the file under its digest
 * only when the bytes match it: a registry or a network that hands over other bytes leaves
 * nothing behind but an error naming both digests. Only sha256 digests are accepted, in the
 * canonical form (lowercase hex), so a digest is also a safe file name.
 */
#ifndef VOIDBOX_STORE_OCI_BLOBS_H
#define VOIDBOX_STORE_OCI_BLOBS_H

#include <stddef.h>

#define OCI_DIGEST_ALGORITHM "sha256:"
#define OCI_SHA256_HEX_LEN 64
#define OCI_DIGEST_LEN (sizeof(OCI_DIGEST_ALGORITHM) - 1 + OCI_SHA256_HEX_LEN)
/* Where the blobs are, under the OCI directory: one file per blob, named by its hex digest. */
#define OCI_BLOBS_SUBDIR "blobs/sha256"
/* A blob being written there: .tmp-<writer's pid>-<random>, never taken for a blob. */
#define OCI_BLOBS_TMP_PREFIX ".tmp-"

/* 0 when digest is "sha256:" and 64 lowercase hex digits; -EINVAL otherwise. */
int oci_digest_check(const char *digest);

/* dir/blobs/sha256/<hex> for a checked digest; 0 or -EINVAL / -ENAMETOOLONG. */
int oci_blob_path(const char *oci_dir, const char *digest, char *out, size_t size);

struct oci_blob_writer;

/*
 * Starts writing the blob digest into the cache under oci_dir (directories created as
 * needed). 0 and *out, or -errno with a sentence in err.
 */
int oci_blob_writer_open(const char *oci_dir, const char *digest,
			 struct oci_blob_writer **out, char *err, size_t errlen);
/* Appends bytes (hashed as they go). 0 or -errno. */
int oci_blob_writer_write(struct oci_blob_writer *writer, const void *data, size_t len);
/*
 * Ends the blob: publishes it under its digest when the bytes hash to it (0), else removes
 * them and fails with -EBADMSG and a sentence naming the expected and the actual digest.
 * Frees writer either way.
 */
int oci_blob_writer_commit(struct oci_blob_writer *writer, char *err, size_t errlen);
/* Drops a blob being written (its temporary file goes). NULL is fine. */
void oci_blob_writer_abort(struct oci_blob_writer *writer);

/*
 * Removes the temporary files of blob writers that are gone (a pull killed mid-download);
 * those of running pulls stay. Nothing to report: what cannot be removed is tried again.
 */
void oci_blobs_sweep(const char *oci_dir);

/* The sha256 digest of len bytes as "sha256:<hex>" (out holds OCI_DIGEST_LEN + 1). 0 or -EIO. */
int oci_digest_of(const void *data, size_t len, char *out);

/* Hashes the file at path: 0 when it matches digest, -EBADMSG (err says so) or -errno. */
int oci_blob_verify_file(const char *path, const char *digest, char *err, size_t errlen);

#endif
