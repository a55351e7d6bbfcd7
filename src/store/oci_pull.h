/*
 * Pulling an image from a registry (Docker Registry HTTP API v2) into the blob cache, with
 * libcurl: the manifest (an index or manifest list resolves to linux/amd64), the config and
 * every layer, each one written through the verifying blob writer (oci_blobs.h), so nothing
 * reaches the cache unless its bytes hash to the digest that names it. Authentication follows
 * the registry's `WWW-Authenticate` challenge: Basic with the caller's credentials, or Bearer
 * with a token fetched from the challenge's realm (with the credentials, when given).
 *
 * Policy comes from the caller as struct oci_pull_options; nothing here reads the
 * environment, and a cancel (a signal to `voidbox run`) reaches a pull only through the
 * options' cancelled callback. A loopback registry is spoken to over plain HTTP (as Docker does); any other
 * over HTTPS unless the caller says insecure.
 */
#ifndef VOIDBOX_STORE_OCI_PULL_H
#define VOIDBOX_STORE_OCI_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "store/oci_registry.h"

/* Manifests and token answers are small; a registry that sends more is refused. */
#define OCI_MANIFEST_BYTES_MAX (4u << 20)
#define OCI_CONFIG_BYTES_MAX (4u << 20)
#define OCI_TOKEN_BODY_MAX (64u << 10)
/* What one request may take; a blob's request gets more in proportion to its size. */
#define OCI_REQUEST_TIMEOUT_S 300u

enum oci_progress_mode {
	OCI_PROGRESS_NONE,
	OCI_PROGRESS_LINES, /* one line when a layer starts and one when it is done */
	OCI_PROGRESS_BAR,   /* a bar per layer redrawn in place: stderr is a terminal */
};

struct oci_pull_options {
	const char *oci_dir;	 /* $VOIDBOX_HOME/oci */
	const char *username;	 /* NULL: anonymous */
	const char *password;
	bool insecure;		 /* plain HTTP to a registry that is not on loopback */
	enum oci_progress_mode progress;
	FILE *progress_stream;	 /* NULL: stderr */
	unsigned int request_timeout_s; /* 0: OCI_REQUEST_TIMEOUT_S */
	/*
	 * NULL: never. Asked while a request runs (libcurl's progress callback, at least once a
	 * second, also while a registry sends nothing) and between steps (blobs, layers, the
	 * rootfs build); true ends the pull with -ECANCELED, keeping nothing it had half-written.
	 */
	bool (*cancelled)(void);
};

/* The error sentence of a cancelled pull, as it ends err. */
#define OCI_PULL_CANCELLED_ERROR "the pull was cancelled"

/* 0, or -ECANCELED with OCI_PULL_CANCELLED_ERROR in err when the caller cancelled the pull. */
int oci_pull_check_cancel(const struct oci_pull_options *options, char *err, size_t errlen);

struct oci_pull_result {
	char manifest_digest[OCI_DIGEST_LEN + 1]; /* the linux/amd64 image manifest's */
	struct oci_manifest manifest;		  /* kind OCI_MANIFEST_IMAGE */
	unsigned long long downloaded_bytes;	  /* blobs fetched (cached ones not counted) */
};

/*
 * Pulls ref's manifest, config and layers into options->oci_dir's blob cache. 0 with *out,
 * or -errno with a sentence in err (a digest mismatch is -EBADMSG and names both digests).
 */
int oci_pull(const struct oci_ref *ref, const struct oci_pull_options *options,
	     struct oci_pull_result *out, char *err, size_t errlen);

#endif
