/*
 * Parsers for what a registry sends (see oci_registry.h). JSON goes through jansson, the
 * parser the rest of the tree uses; the challenge header is parsed by hand because it is a
 * tiny grammar (RFC 7235 auth-params). Every field is copied with oci_copy, which refuses a
 * value that does not fit instead of cutting it, so a long hostile string can never turn
 * into a shorter, different one.
 */
#include "store/oci_registry.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/text.h"

#define OCI_LIBRARY_PREFIX "library/"
#define OCI_DOCKER_HUB_ALIAS "docker.io"
#define OCI_LOCALHOST "localhost"
#define OCI_LOOPBACK_V4_PREFIX "127."
#define OCI_LOOPBACK_V6 "[::1]"
#define OCI_PLATFORM_OS "linux"
#define OCI_PLATFORM_ARCH "amd64"
#define OCI_AUTH_BASIC "basic"
#define OCI_AUTH_BEARER "bearer"
#define OCI_AUTH_NAME_MAX 32

/* Layer media types a tar reader can apply; anything else (foreign layers, say) is refused. */
static const char *const oci_layer_media_types[] = {
	"application/vnd.oci.image.layer.v1.tar",
	"application/vnd.oci.image.layer.v1.tar+gzip",
	"application/vnd.oci.image.layer.v1.tar+zstd",
	"application/vnd.docker.image.rootfs.diff.tar.gzip",
	"application/vnd.docker.image.rootfs.diff.tar",
};

/* Copies len bytes of src into out as a string; -ENAMETOOLONG when it does not fit. */
static int oci_copy(char *out, size_t size, const char *src, size_t len)
{
	if (len >= size)
		return -ENAMETOOLONG;
	memcpy(out, src, len);
	out[len] = '\0';
	return 0;
}

static bool oci_repository_char_ok(char c)
{
	return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '.' || c == '_' ||
	       c == '-' || c == '/';
}

static bool oci_tag_char_ok(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-';
}

static bool oci_host_char_ok(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '-' || c == ':' || c == '[' ||
	       c == ']';
}

static int oci_ref_check(const struct oci_ref *ref, char *err, size_t errlen)
{
	const char *repo = ref->repository;

	for (const char *p = ref->registry; *p; p++)
		if (!oci_host_char_ok(*p)) {
			snprintf(err, errlen, "registry host '%s' has a character a host name cannot",
				 ref->registry);
			return -EINVAL;
		}
	if (!*repo || repo[0] == '/' || repo[strlen(repo) - 1] == '/' || strstr(repo, "//") ||
	    strstr(repo, "..")) {
		snprintf(err, errlen, "repository '%s' is not a repository name", repo);
		return -EINVAL;
	}
	for (const char *p = repo; *p; p++)
		if (!oci_repository_char_ok(*p)) {
			snprintf(err, errlen, "repository '%s' may hold only lowercase letters, digits and . _ - /",
				 repo);
			return -EINVAL;
		}
	for (const char *p = ref->tag; *p; p++)
		if (!oci_tag_char_ok(*p)) {
			snprintf(err, errlen, "tag '%s' may hold only letters, digits and . _ -",
				 ref->tag);
			return -EINVAL;
		}
	return 0;
}

int oci_ref_parse(const char *text, struct oci_ref *out, char *err, size_t errlen)
{
	const char *at, *slash, *name, *colon;
	size_t name_len;

	memset(out, 0, sizeof(*out));
	if (!text || !*text) {
		snprintf(err, errlen, "an empty image reference; name one like debian:bookworm");
		return -EINVAL;
	}
	at = strchr(text, '@');
	if (at) {
		if (oci_copy(out->digest, sizeof(out->digest), at + 1, strlen(at + 1)) < 0 ||
		    oci_digest_check(out->digest) < 0) {
			snprintf(err, errlen, "'%s' pins a digest that is not sha256:<64 hex digits>",
				 text);
			return -EINVAL;
		}
	}
	name_len = at ? (size_t)(at - text) : strlen(text);
	slash = memchr(text, '/', name_len);
	name = text;
	if (slash && (memchr(text, '.', (size_t)(slash - text)) ||
		      memchr(text, ':', (size_t)(slash - text)) ||
		      ((size_t)(slash - text) == strlen(OCI_LOCALHOST) &&
		       strncmp(text, OCI_LOCALHOST, strlen(OCI_LOCALHOST)) == 0))) {
		if (oci_copy(out->registry, sizeof(out->registry), text, (size_t)(slash - text)) < 0)
			goto too_long;
		name = slash + 1;
		name_len -= (size_t)(slash + 1 - text);
	} else {
		snprintf(out->registry, sizeof(out->registry), "%s", OCI_DEFAULT_REGISTRY);
	}
	if (strcmp(out->registry, OCI_DOCKER_HUB_ALIAS) == 0)
		snprintf(out->registry, sizeof(out->registry), "%s", OCI_DEFAULT_REGISTRY);
	/* a tag is after the last ':' that follows the last '/' */
	colon = NULL;
	for (size_t i = name_len; i > 0; i--) {
		if (name[i - 1] == '/')
			break;
		if (name[i - 1] == ':') {
			colon = name + i - 1;
			break;
		}
	}
	if (colon) {
		if (colon + 1 == name + name_len) {
			snprintf(err, errlen, "'%s' has an empty tag", text);
			return -EINVAL;
		}
		if (oci_copy(out->tag, sizeof(out->tag), colon + 1,
			     (size_t)(name + name_len - colon - 1)) < 0)
			goto too_long;
		name_len = (size_t)(colon - name);
	} else if (!at) {
		snprintf(out->tag, sizeof(out->tag), "%s", OCI_DEFAULT_TAG);
	}
	if (strcmp(out->registry, OCI_DEFAULT_REGISTRY) == 0 && !memchr(name, '/', name_len)) {
		if (strlen(OCI_LIBRARY_PREFIX) + name_len >= sizeof(out->repository))
			goto too_long;
		snprintf(out->repository, sizeof(out->repository), "%s%.*s", OCI_LIBRARY_PREFIX,
			 (int)name_len, name);
	} else if (oci_copy(out->repository, sizeof(out->repository), name, name_len) < 0) {
		goto too_long;
	}
	return oci_ref_check(out, err, errlen);
too_long:
	snprintf(err, errlen, "image reference '%.64s...' is too long", text);
	return -EINVAL;
}

int oci_ref_format(const struct oci_ref *ref, char *out, size_t size)
{
	int n;

	if (ref->digest[0])
		n = snprintf(out, size, "%s/%s%s%s@%s", ref->registry, ref->repository,
			     ref->tag[0] ? ":" : "", ref->tag, ref->digest);
	else
		n = snprintf(out, size, "%s/%s:%s", ref->registry, ref->repository, ref->tag);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

bool oci_registry_is_loopback(const char *registry)
{
	size_t host_len;

	if (strncmp(registry, OCI_LOOPBACK_V6, strlen(OCI_LOOPBACK_V6)) == 0)
		return registry[strlen(OCI_LOOPBACK_V6)] == '\0' ||
		       registry[strlen(OCI_LOOPBACK_V6)] == ':';
	host_len = strcspn(registry, ":");
	if (host_len == strlen(OCI_LOCALHOST) &&
	    strncmp(registry, OCI_LOCALHOST, host_len) == 0)
		return true;
	if (strncmp(registry, OCI_LOOPBACK_V4_PREFIX, strlen(OCI_LOOPBACK_V4_PREFIX)) != 0)
		return false;
	for (size_t i = 0; i < host_len; i++)
		if (!isdigit((unsigned char)registry[i]) && registry[i] != '.')
			return false;
	return true;
}

const char *oci_registry_scheme(const char *registry, bool insecure)
{
	return insecure || oci_registry_is_loopback(registry) ? "http" : "https";
}

/* RFC 7230 token characters. */
static bool oci_token_char(char c)
{
	return isalnum((unsigned char)c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/*
 * Reads one auth-param value at *p (quoted-string or token) into out. Advances *p.
 * 0, or -EINVAL / -ENAMETOOLONG.
 */
static int oci_auth_value(const char **p, const char *end, char *out, size_t size)
{
	size_t n = 0;
	const char *s = *p;

	if (s < end && *s == '"') {
		for (s++; s < end && *s != '"'; s++) {
			if (*s == '\\' && s + 1 < end)
				s++;
			if ((unsigned char)*s < ' ')
				return -EINVAL;
			if (n + 1 >= size)
				return -ENAMETOOLONG;
			out[n++] = *s;
		}
		if (s >= end)
			return -EINVAL;
		s++;
	} else {
		for (; s < end && oci_token_char(*s); s++) {
			if (n + 1 >= size)
				return -ENAMETOOLONG;
			out[n++] = *s;
		}
	}
	out[n] = '\0';
	*p = s;
	return 0;
}

static const char *oci_skip_space(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

int oci_auth_challenge_parse(const char *value, size_t len, struct oci_auth_challenge *out)
{
	const char *p = value, *end = value + len, *start;
	char name[OCI_AUTH_NAME_MAX];
	int rc;

	memset(out, 0, sizeof(*out));
	p = oci_skip_space(p, end);
	for (start = p; p < end && oci_token_char(*p); p++)
		;
	if (oci_copy(name, sizeof(name), start, (size_t)(p - start)) < 0)
		return -EINVAL;
	if (strcasecmp(name, OCI_AUTH_BASIC) == 0)
		out->scheme = OCI_AUTH_SCHEME_BASIC;
	else if (strcasecmp(name, OCI_AUTH_BEARER) == 0)
		out->scheme = OCI_AUTH_SCHEME_BEARER;
	else
		return -EINVAL;
	while (p < end) {
		char scratch[OCI_AUTH_REALM_MAX];
		char *dest = scratch;
		size_t dest_size = sizeof(scratch);

		p = oci_skip_space(p, end);
		if (p < end && *p == ',') {
			p++;
			continue;
		}
		if (p >= end)
			break;
		for (start = p; p < end && oci_token_char(*p); p++)
			;
		if (p == start || oci_copy(name, sizeof(name), start, (size_t)(p - start)) < 0)
			return -EINVAL;
		p = oci_skip_space(p, end);
		if (p >= end || *p != '=')
			return -EINVAL;
		p = oci_skip_space(p + 1, end);
		if (strcasecmp(name, "realm") == 0) {
			dest = out->realm;
			dest_size = sizeof(out->realm);
		} else if (strcasecmp(name, "service") == 0) {
			dest = out->service;
			dest_size = sizeof(out->service);
		} else if (strcasecmp(name, "scope") == 0) {
			dest = out->scope;
			dest_size = sizeof(out->scope);
		}
		rc = oci_auth_value(&p, end, dest, dest_size);
		if (rc < 0)
			return -EINVAL;
	}
	if (out->scheme == OCI_AUTH_SCHEME_BEARER && !out->realm[0])
		return -EINVAL;
	return 0;
}

int oci_token_parse(const char *body, size_t len, char *token, size_t size, char *err,
		    size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *value;
	const char *text;
	int rc = -EINVAL;

	if (!root || !json_is_object(root)) {
		snprintf(err, errlen, "the token endpoint's answer is not a JSON object");
		goto out;
	}
	value = json_object_get(root, "token");
	if (!json_is_string(value))
		value = json_object_get(root, "access_token");
	if (!json_is_string(value)) {
		snprintf(err, errlen, "the token endpoint's answer holds no \"token\"");
		goto out;
	}
	text = json_string_value(value);
	if (!*text || oci_copy(token, size, text, json_string_length(value)) < 0 ||
	    strlen(text) != json_string_length(value)) {
		snprintf(err, errlen, "the token endpoint's token is empty or too long");
		goto out;
	}
	for (const char *p = text; *p; p++)
		if (*p <= ' ' || *p > '~') {
			snprintf(err, errlen, "the token endpoint's token holds a character a header cannot");
			goto out;
		}
	rc = 0;
out:
	json_decref(root);
	return rc;
}

static int oci_descriptor_parse(json_t *obj, struct oci_descriptor *out, const char *what,
				char *err, size_t errlen)
{
	json_t *digest = json_object_get(obj, "digest");
	json_t *size = json_object_get(obj, "size");
	json_t *media = json_object_get(obj, "mediaType");

	memset(out, 0, sizeof(*out));
	if (!json_is_object(obj) || !json_is_string(digest) ||
	    oci_copy(out->digest, sizeof(out->digest), json_string_value(digest),
		     json_string_length(digest)) < 0 ||
	    oci_digest_check(out->digest) < 0) {
		snprintf(err, errlen, "the manifest's %s has no sha256 digest voidbox accepts", what);
		return -EINVAL;
	}
	if (!json_is_integer(size) || json_integer_value(size) < 0) {
		snprintf(err, errlen, "the manifest's %s %s has no size", what, out->digest);
		return -EINVAL;
	}
	out->size = (uint64_t)json_integer_value(size);
	if (json_is_string(media) &&
	    oci_copy(out->media_type, sizeof(out->media_type), json_string_value(media),
		     json_string_length(media)) < 0) {
		snprintf(err, errlen, "the manifest's %s %s has an overlong media type", what,
			 out->digest);
		return -EINVAL;
	}
	text_make_printable(out->media_type, strlen(out->media_type));
	return 0;
}

static bool oci_is_layer_media_type(const char *media)
{
	for (size_t i = 0; i < sizeof(oci_layer_media_types) / sizeof(oci_layer_media_types[0]); i++)
		if (strcmp(media, oci_layer_media_types[i]) == 0)
			return true;
	return false;
}

static int oci_manifest_parse_image(json_t *root, struct oci_manifest *out, char *err,
				    size_t errlen)
{
	json_t *layers = json_object_get(root, "layers");
	json_t *layer;
	size_t i;
	int rc;

	out->kind = OCI_MANIFEST_IMAGE;
	rc = oci_descriptor_parse(json_object_get(root, "config"), &out->config, "config", err,
				  errlen);
	if (rc < 0)
		return rc;
	if (!json_is_array(layers) || json_array_size(layers) == 0) {
		snprintf(err, errlen, "the manifest lists no layers");
		return -EINVAL;
	}
	if (json_array_size(layers) > OCI_MANIFEST_LAYERS_MAX) {
		snprintf(err, errlen, "the manifest lists %zu layers; voidbox takes at most %d",
			 json_array_size(layers), OCI_MANIFEST_LAYERS_MAX);
		return -EINVAL;
	}
	json_array_foreach(layers, i, layer) {
		struct oci_descriptor *desc = &out->layers[i];

		rc = oci_descriptor_parse(layer, desc, "layer", err, errlen);
		if (rc < 0)
			return rc;
		if (!oci_is_layer_media_type(desc->media_type)) {
			snprintf(err, errlen, "layer %s has media type '%s', which is not a tar layer voidbox can apply",
				 desc->digest, desc->media_type);
			return -ENOTSUP;
		}
		if (desc->size > OCI_LAYER_SIZE_MAX) {
			snprintf(err, errlen, "layer %s claims %llu bytes; voidbox takes layers up to %llu",
				 desc->digest, (unsigned long long)desc->size,
				 (unsigned long long)OCI_LAYER_SIZE_MAX);
			return -EINVAL;
		}
	}
	out->layer_count = json_array_size(layers);
	return 0;
}

static int oci_manifest_parse_index(json_t *root, struct oci_manifest *out, char *err,
				    size_t errlen)
{
	json_t *entries = json_object_get(root, "manifests");
	json_t *entry;
	size_t i;

	out->kind = OCI_MANIFEST_INDEX;
	if (!json_is_array(entries) || json_array_size(entries) > OCI_INDEX_ENTRIES_MAX) {
		snprintf(err, errlen, "the index has no list of manifests voidbox accepts");
		return -EINVAL;
	}
	json_array_foreach(entries, i, entry) {
		json_t *platform = json_object_get(entry, "platform");
		json_t *os = json_object_get(platform, "os");
		json_t *arch = json_object_get(platform, "architecture");

		if (!json_is_string(os) || !json_is_string(arch) ||
		    strcmp(json_string_value(os), OCI_PLATFORM_OS) != 0 ||
		    strcmp(json_string_value(arch), OCI_PLATFORM_ARCH) != 0)
			continue;
		return oci_descriptor_parse(entry, &out->platform, "linux/amd64 entry", err, errlen);
	}
	snprintf(err, errlen, "the image has no %s/%s variant (voidbox runs x86-64 Linux guests)",
		 OCI_PLATFORM_OS, OCI_PLATFORM_ARCH);
	return -ENOTSUP;
}

int oci_manifest_parse(const char *body, size_t len, const char *content_type,
		       struct oci_manifest *out, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *media, *schema;
	const char *kind = NULL;
	int rc = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (!root || !json_is_object(root)) {
		snprintf(err, errlen, "the manifest is not a JSON object");
		goto out;
	}
	schema = json_object_get(root, "schemaVersion");
	if (!json_is_integer(schema) || json_integer_value(schema) != 2) {
		rc = -ENOTSUP;
		snprintf(err, errlen, "the manifest is not schema version 2 (Docker schema 1 images are not supported)");
		goto out;
	}
	media = json_object_get(root, "mediaType");
	if (json_is_string(media))
		kind = json_string_value(media);
	else if (content_type && *content_type)
		kind = content_type;
	if (kind && (strncmp(kind, OCI_MEDIA_OCI_INDEX, strlen(OCI_MEDIA_OCI_INDEX)) == 0 ||
		     strncmp(kind, OCI_MEDIA_DOCKER_LIST, strlen(OCI_MEDIA_DOCKER_LIST)) == 0))
		rc = oci_manifest_parse_index(root, out, err, errlen);
	else if (kind && strncmp(kind, OCI_MEDIA_OCI_MANIFEST, strlen(OCI_MEDIA_OCI_MANIFEST)) != 0 &&
		 strncmp(kind, OCI_MEDIA_DOCKER_MANIFEST, strlen(OCI_MEDIA_DOCKER_MANIFEST)) != 0 &&
		 json_is_string(media)) {
		rc = -ENOTSUP;
		snprintf(err, errlen, "manifest media type '%.128s' is not an image manifest or index",
			 kind);
		text_make_printable(err, strlen(err));
	} else if (json_is_array(json_object_get(root, "manifests")))
		rc = oci_manifest_parse_index(root, out, err, errlen);
	else
		rc = oci_manifest_parse_image(root, out, err, errlen);
out:
	json_decref(root);
	return rc;
}
