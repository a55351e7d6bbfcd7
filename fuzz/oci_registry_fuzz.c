/*
 * libFuzzer target for what voidbox parses from an OCI registry (src/store/oci_registry.c):
 * manifests and indexes, the WWW-Authenticate challenge, token answers, and the image
 * references those end up in. The registry controls every byte. The first byte picks the
 * parser (and, for manifests, which Content-Type came with it); what a parser accepts must
 * hold up: canonical digests only, counts within their bounds, a Bearer challenge with a
 * realm, a token that fits in a header.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/oci_registry.h"

#define FUZZ_ERR_MAX 512

enum fuzz_oci_parser {
	FUZZ_OCI_MANIFEST,
	FUZZ_OCI_CHALLENGE,
	FUZZ_OCI_TOKEN,
	FUZZ_OCI_REFERENCE,
	FUZZ_OCI_PARSER_COUNT,
};

static const char *const fuzz_content_types[] = { NULL, OCI_MEDIA_OCI_INDEX,
						  OCI_MEDIA_DOCKER_LIST, OCI_MEDIA_OCI_MANIFEST };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_manifest(const char *text, size_t len, uint8_t selector)
{
	static struct oci_manifest manifest;
	char err[FUZZ_ERR_MAX];
	const char *content_type =
		fuzz_content_types[selector % (sizeof(fuzz_content_types) / sizeof(fuzz_content_types[0]))];

	if (oci_manifest_parse(text, len, content_type, &manifest, err, sizeof(err)) != 0)
		return;
	if (manifest.kind == OCI_MANIFEST_INDEX) {
		if (oci_digest_check(manifest.platform.digest) != 0)
			abort();
		return;
	}
	if (oci_digest_check(manifest.config.digest) != 0 || manifest.layer_count == 0 ||
	    manifest.layer_count > OCI_MANIFEST_LAYERS_MAX)
		abort();
	for (size_t i = 0; i < manifest.layer_count; i++)
		if (oci_digest_check(manifest.layers[i].digest) != 0 ||
		    manifest.layers[i].size > OCI_LAYER_SIZE_MAX)
			abort();
}

static void fuzz_challenge(const char *text, size_t len)
{
	struct oci_auth_challenge challenge;

	if (oci_auth_challenge_parse(text, len, &challenge) != 0)
		return;
	if (challenge.scheme == OCI_AUTH_SCHEME_BEARER && !challenge.realm[0])
		abort();
	if (strlen(challenge.realm) >= sizeof(challenge.realm))
		abort();
}

static void fuzz_token(const char *text, size_t len)
{
	char token[OCI_TOKEN_MAX], err[FUZZ_ERR_MAX];

	if (oci_token_parse(text, len, token, sizeof(token), err, sizeof(err)) != 0)
		return;
	for (const char *p = token; *p; p++)
		if (*p <= ' ' || *p > '~')
			abort();
}

static void fuzz_reference(const char *text, size_t len)
{
	char *copy = malloc(len + 1), err[FUZZ_ERR_MAX], canonical[OCI_REF_TEXT_MAX];
	struct oci_ref ref, again;

	if (!copy)
		return;
	memcpy(copy, text, len);
	copy[len] = '\0';
	if (oci_ref_parse(copy, &ref, err, sizeof(err)) == 0) {
		/* the canonical spelling parses to the same reference */
		if (oci_ref_format(&ref, canonical, sizeof(canonical)) != 0 ||
		    oci_ref_parse(canonical, &again, err, sizeof(err)) != 0 ||
		    memcmp(&ref, &again, sizeof(ref)) != 0)
			abort();
		if (strstr(ref.repository, "..") || strchr(ref.tag, '/') || strchr(ref.tag, '\n'))
			abort();
	}
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data + 1;

	if (size == 0)
		return 0;
	switch ((enum fuzz_oci_parser)(data[0] % FUZZ_OCI_PARSER_COUNT)) {
	case FUZZ_OCI_MANIFEST:
		fuzz_manifest(text, size - 1, data[0] / FUZZ_OCI_PARSER_COUNT);
		break;
	case FUZZ_OCI_CHALLENGE:
		fuzz_challenge(text, size - 1);
		break;
	case FUZZ_OCI_TOKEN:
		fuzz_token(text, size - 1);
		break;
	case FUZZ_OCI_REFERENCE:
	case FUZZ_OCI_PARSER_COUNT:
		fuzz_reference(text, size - 1);
		break;
	}
	return 0;
}
