/*
 * What voidbox reads from an OCI registry (Docker Registry HTTP API v2), parsed without any
 * network code so the fuzz targets and unit tests reach every byte a registry can send: image
 * references, the `WWW-Authenticate` challenge, token-endpoint answers, and manifests (image
 * manifests, and the indexes / manifest lists that point at one per platform).
 *
 * A registry is hostile input. Every string is copied into a fixed-size field (too long is an
 * error, never a truncation), every digest is checked to be a canonical sha256 digest before it
 * can become a file name or a URL, and a manifest with more layers than OCI_MANIFEST_LAYERS_MAX
 * or a layer larger than OCI_LAYER_SIZE_MAX is refused. Text a registry chose that an error
 * sentence quotes (a media type, an error answer's body, a challenge) has its control bytes
 * made spaces first, so no escape sequence of its reaches a terminal or a log.
 */
#ifndef VOIDBOX_STORE_OCI_REGISTRY_H
#define VOIDBOX_STORE_OCI_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/oci_blobs.h"

#define OCI_REGISTRY_HOST_MAX 256
#define OCI_REPOSITORY_MAX 256
#define OCI_TAG_MAX 129
#define OCI_REF_TEXT_MAX (OCI_REGISTRY_HOST_MAX + OCI_REPOSITORY_MAX + OCI_TAG_MAX + OCI_DIGEST_LEN + 4)
/* Where a reference without a registry host is pulled from, as `docker pull` does. */
#define OCI_DEFAULT_REGISTRY "registry-1.docker.io"
#define OCI_DEFAULT_TAG "latest"

#define OCI_MANIFEST_LAYERS_MAX 128
#define OCI_INDEX_ENTRIES_MAX 1024
#define OCI_LAYER_SIZE_MAX (16ull << 30)
#define OCI_MEDIA_TYPE_MAX 128
#define OCI_AUTH_REALM_MAX 1024
#define OCI_AUTH_FIELD_MAX 512
#define OCI_TOKEN_MAX 16384

#define OCI_MEDIA_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define OCI_MEDIA_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define OCI_MEDIA_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define OCI_MEDIA_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"

/* An image reference: [REGISTRY/]REPOSITORY[:TAG][@DIGEST]. */
struct oci_ref {
	char registry[OCI_REGISTRY_HOST_MAX];	/* host[:port] */
	char repository[OCI_REPOSITORY_MAX];	/* "library/debian" for "debian" on Docker Hub */
	char tag[OCI_TAG_MAX];			/* "" when only a digest was given */
	char digest[OCI_DIGEST_LEN + 1];	/* "" unless pinned */
};


/*
 * Parses text the way Docker does: the first component is a registry host when it holds a
 * '.' or a ':' or is "localhost"; otherwise the image is on Docker Hub (a one-component name
 * gains "library/"). No tag and no digest means "latest". 0, or -EINVAL with err.
 */
int oci_ref_parse(const char *text, struct oci_ref *out, char *err, size_t errlen);
/* The canonical spelling, "registry/repository:tag" or "...@digest". 0 or -ENAMETOOLONG. */
int oci_ref_format(const struct oci_ref *ref, char *out, size_t size);
/* true for localhost, 127.0.0.0/8 and [::1] (with or without a port): plain HTTP is allowed. */
bool oci_registry_is_loopback(const char *registry);
/* "http" for a loopback registry or when insecure, else "https". */
const char *oci_registry_scheme(const char *registry, bool insecure);

enum oci_auth_scheme {
	OCI_AUTH_SCHEME_NONE,
	OCI_AUTH_SCHEME_BASIC,
	OCI_AUTH_SCHEME_BEARER,
};

struct oci_auth_challenge {
	enum oci_auth_scheme scheme;
	char realm[OCI_AUTH_REALM_MAX];
	char service[OCI_AUTH_FIELD_MAX];
	char scope[OCI_AUTH_FIELD_MAX];
};

/*
 * Parses a WWW-Authenticate value: `Basic realm="..."` or `Bearer realm="...",service="...",
 * scope="..."` (quoted or token values, any order, unknown parameters ignored). 0, or -EINVAL
 * for another scheme, a Bearer challenge without a realm, or a value that does not fit.
 */
int oci_auth_challenge_parse(const char *value, size_t len, struct oci_auth_challenge *out);

/*
 * Reads a token endpoint's JSON answer: "token", else "access_token". The token must be
 * printable ASCII without spaces (it goes into a header). 0, or -EINVAL with err.
 */
int oci_token_parse(const char *body, size_t len, char *token, size_t size, char *err,
		    size_t errlen);

enum oci_manifest_kind {
	OCI_MANIFEST_IMAGE, /* config + layers */
	OCI_MANIFEST_INDEX, /* one manifest per platform; platform holds linux/amd64's */
};

struct oci_descriptor {
	char media_type[OCI_MEDIA_TYPE_MAX];
	char digest[OCI_DIGEST_LEN + 1];
	uint64_t size;
};

struct oci_manifest {
	enum oci_manifest_kind kind;
	struct oci_descriptor config;			/* IMAGE */
	struct oci_descriptor layers[OCI_MANIFEST_LAYERS_MAX]; /* IMAGE, lowest first */
	size_t layer_count;
	struct oci_descriptor platform;			/* INDEX: the linux/amd64 manifest */
};

/*
 * Parses a manifest or an index (OCI or Docker v2 schema 2; the kind comes from its
 * mediaType, else from content_type, else from its shape). An index resolves to its
 * linux/amd64 entry, which must exist. Layers must be tar layers (plain, gzip or zstd) and
 * not larger than OCI_LAYER_SIZE_MAX. 0, or -EINVAL / -ENOTSUP with a sentence in err.
 */
int oci_manifest_parse(const char *body, size_t len, const char *content_type,
		       struct oci_manifest *out, char *err, size_t errlen);

#endif
