/*
 * What voidbox reads from a registry, without a registry: image references spelled the ways
 * Docker accepts (and refused when they could name a path or a header), loopback detection
 * (plain HTTP only there, or anywhere with --insecure), WWW-Authenticate challenges (Basic,
 * Bearer with any parameter order, quoted and token values, unknown schemes and overlong
 * values refused), token answers (a token that could split a header refused), and
 * manifests: OCI and Docker image manifests, an index resolved to linux/amd64 whatever its
 * order, and refusals of schema 1, foreign layers, bad digests, too many layers and
 * oversized layers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "store/oci_registry.h"

#define TEST_ERR_MAX 1024
#define TEST_JSON_MAX 65536
#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"

static void test_references(void)
{
	struct oci_ref ref;
	char err[TEST_ERR_MAX], text[OCI_REF_TEXT_MAX];

	CHECK_INT_EQ(oci_ref_parse("debian", &ref, err, sizeof(err)), 0);
	CHECK_STR_EQ(ref.registry, OCI_DEFAULT_REGISTRY);
	CHECK_STR_EQ(ref.repository, "library/debian");
	CHECK_STR_EQ(ref.tag, "latest");
	CHECK_INT_EQ(oci_ref_parse("docker.io/user/app:v1.2", &ref, err, sizeof(err)), 0);
	CHECK_STR_EQ(ref.registry, OCI_DEFAULT_REGISTRY);
	CHECK_STR_EQ(ref.repository, "user/app");
	CHECK_STR_EQ(ref.tag, "v1.2");
	CHECK_INT_EQ(oci_ref_parse("127.0.0.1:5000/voidbox/test:1", &ref, err, sizeof(err)), 0);
	CHECK_STR_EQ(ref.registry, "127.0.0.1:5000");
	CHECK_STR_EQ(ref.repository, "voidbox/test");
	CHECK_STR_EQ(ref.tag, "1");
	CHECK_INT_EQ(oci_ref_parse("localhost/x@" D1, &ref, err, sizeof(err)), 0);
	CHECK_STR_EQ(ref.registry, "localhost");
	CHECK_STR_EQ(ref.tag, "");
	CHECK_STR_EQ(ref.digest, D1);
	CHECK_INT_EQ(oci_ref_format(&ref, text, sizeof(text)), 0);
	CHECK_STR_EQ(text, "localhost/x@" D1);

	/* refused: empty, bad digest, traversal, uppercase repository, header characters */
	CHECK_INT_EQ(oci_ref_parse("", &ref, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_ref_parse("x@sha256:abc", &ref, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_ref_parse("reg.io/../etc:1", &ref, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_ref_parse("reg.io/Upper", &ref, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_ref_parse("reg.io/a:b\r\nX: y", &ref, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_ref_parse("reg.io/a:", &ref, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_ref_parse("re g.io/a", &ref, err, sizeof(err)), -EINVAL);
}

static void test_loopback(void)
{
	CHECK(oci_registry_is_loopback("127.0.0.1:5000"));
	CHECK(oci_registry_is_loopback("127.3.2.1"));
	CHECK(oci_registry_is_loopback("localhost:80"));
	CHECK(oci_registry_is_loopback("[::1]:5000"));
	CHECK(!oci_registry_is_loopback("127.0.0.1.evil.example:5000"));
	CHECK(!oci_registry_is_loopback("localhost.example"));
	CHECK(!oci_registry_is_loopback(OCI_DEFAULT_REGISTRY));
	CHECK(!oci_registry_is_loopback("[::1]x"));
	/* plain HTTP only to loopback, or elsewhere when the user said --insecure */
	CHECK_STR_EQ(oci_registry_scheme("127.0.0.1:5000", false), "http");
	CHECK_STR_EQ(oci_registry_scheme("registry.example:5000", false), "https");
	CHECK_STR_EQ(oci_registry_scheme("registry.example:5000", true), "http");
}

static int parse_challenge(const char *text, struct oci_auth_challenge *out)
{
	return oci_auth_challenge_parse(text, strlen(text), out);
}

static void test_challenges(void)
{
	struct oci_auth_challenge c;
	char *long_realm;

	CHECK_INT_EQ(parse_challenge("Bearer realm=\"https://auth.example/token\",service=\"registry.example\",scope=\"repository:a/b:pull\"",
				     &c), 0);
	CHECK_INT_EQ(c.scheme, OCI_AUTH_SCHEME_BEARER);
	CHECK_STR_EQ(c.realm, "https://auth.example/token");
	CHECK_STR_EQ(c.service, "registry.example");
	CHECK_STR_EQ(c.scope, "repository:a/b:pull");
	/* any order, spaces, token values, unknown parameters, a quoted escape */
	CHECK_INT_EQ(parse_challenge("bearer  scope=x , error=\"insufficient_scope\", realm=\"http://h/t\\\"q\"",
				     &c), 0);
	CHECK_STR_EQ(c.realm, "http://h/t\"q");
	CHECK_STR_EQ(c.scope, "x");
	CHECK_STR_EQ(c.service, "");
	CHECK_INT_EQ(parse_challenge("Basic realm=\"Registry Realm\"", &c), 0);
	CHECK_INT_EQ(c.scheme, OCI_AUTH_SCHEME_BASIC);
	/* refused */
	CHECK_INT_EQ(parse_challenge("Digest realm=\"x\"", &c), -EINVAL);
	CHECK_INT_EQ(parse_challenge("Bearer service=\"x\"", &c), -EINVAL);
	CHECK_INT_EQ(parse_challenge("Bearer realm=\"unterminated", &c), -EINVAL);
	CHECK_INT_EQ(parse_challenge("Bearer realm", &c), -EINVAL);
	CHECK_INT_EQ(parse_challenge("", &c), -EINVAL);
	long_realm = malloc(OCI_AUTH_REALM_MAX + 32);
	CHECK(long_realm != NULL);
	if (long_realm) {
		int n = snprintf(long_realm, OCI_AUTH_REALM_MAX + 32, "Bearer realm=\"");

		memset(long_realm + n, 'a', OCI_AUTH_REALM_MAX);
		snprintf(long_realm + n + OCI_AUTH_REALM_MAX, 4, "\"");
		CHECK_INT_EQ(parse_challenge(long_realm, &c), -EINVAL);
		free(long_realm);
	}
}

static void test_tokens(void)
{
	char token[OCI_TOKEN_MAX], err[TEST_ERR_MAX];
	const char *good = "{\"token\":\"abc.def\",\"expires_in\":60}";
	const char *access = "{\"access_token\":\"xyz\"}";
	const char *split = "{\"token\":\"abc\\r\\nX-Evil: 1\"}";
	const char *nul = "{\"token\":\"ab\\u0000c\"}";

	CHECK_INT_EQ(oci_token_parse(good, strlen(good), token, sizeof(token), err, sizeof(err)), 0);
	CHECK_STR_EQ(token, "abc.def");
	CHECK_INT_EQ(oci_token_parse(access, strlen(access), token, sizeof(token), err, sizeof(err)),
		     0);
	CHECK_STR_EQ(token, "xyz");
	CHECK_INT_EQ(oci_token_parse(split, strlen(split), token, sizeof(token), err, sizeof(err)),
		     -EINVAL);
	CHECK_INT_EQ(oci_token_parse(nul, strlen(nul), token, sizeof(token), err, sizeof(err)),
		     -EINVAL);
	CHECK_INT_EQ(oci_token_parse("[]", 2, token, sizeof(token), err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(oci_token_parse("{}", 2, token, sizeof(token), err, sizeof(err)), -EINVAL);
}

static int parse_manifest(const char *json, const char *content_type, struct oci_manifest *m,
			  char *err, size_t errlen)
{
	return oci_manifest_parse(json, strlen(json), content_type, m, err, errlen);
}

static void test_image_manifests(void)
{
	static struct oci_manifest m;
	char err[TEST_ERR_MAX];
	const char *oci = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MEDIA_OCI_MANIFEST "\","
			  "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" D1 "\",\"size\":10},"
			  "\"layers\":[{\"mediaType\":\"" LAYER_GZIP "\",\"digest\":\"" D2 "\",\"size\":20},"
			  "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+zstd\",\"digest\":\"" D3 "\",\"size\":30}]}";
	const char *docker = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MEDIA_DOCKER_MANIFEST "\","
			     "\"config\":{\"digest\":\"" D1 "\",\"size\":1},"
			     "\"layers\":[{\"mediaType\":\"application/vnd.docker.image.rootfs.diff.tar.gzip\",\"digest\":\"" D2 "\",\"size\":2}]}";
	const char *foreign = "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":1},"
			      "\"layers\":[{\"mediaType\":\"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip\",\"digest\":\"" D2 "\",\"size\":2}]}";
	const char *schema1 = "{\"schemaVersion\":1,\"fsLayers\":[]}";
	const char *bad_digest = "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:../../x\",\"size\":1},\"layers\":[]}";
	const char *huge = "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":1},"
			   "\"layers\":[{\"mediaType\":\"" LAYER_GZIP "\",\"digest\":\"" D2 "\",\"size\":99999999999999}]}";
	const char *negative = "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":-1},\"layers\":[]}";
	const char *dup = "{\"schemaVersion\":2,\"schemaVersion\":2}";
	/* escape sequences (JSON \u001b) in media types an error quotes */
	const char *escaped_layer = "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":1},"
				    "\"layers\":[{\"mediaType\":\"x\\u001b[2J\\u0007y\",\"digest\":\"" D2 "\",\"size\":2}]}";
	const char *escaped_kind = "{\"schemaVersion\":2,\"mediaType\":\"a\\u001b]0;t\\u0007b\",\"layers\":[]}";

	CHECK_INT_EQ(parse_manifest(oci, NULL, &m, err, sizeof(err)), 0);
	CHECK_INT_EQ(m.kind, OCI_MANIFEST_IMAGE);
	CHECK_STR_EQ(m.config.digest, D1);
	CHECK_INT_EQ(m.layer_count, 2);
	CHECK_STR_EQ(m.layers[1].digest, D3);
	CHECK_INT_EQ(m.layers[1].size, 30);
	CHECK_INT_EQ(parse_manifest(docker, NULL, &m, err, sizeof(err)), 0);
	CHECK_INT_EQ(m.layer_count, 1);
	CHECK_INT_EQ(parse_manifest(foreign, NULL, &m, err, sizeof(err)), -ENOTSUP);
	CHECK(strstr(err, "foreign") != NULL);
	CHECK_INT_EQ(parse_manifest(schema1, NULL, &m, err, sizeof(err)), -ENOTSUP);
	CHECK_INT_EQ(parse_manifest(bad_digest, NULL, &m, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(parse_manifest(huge, NULL, &m, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(parse_manifest(negative, NULL, &m, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(parse_manifest(dup, NULL, &m, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(parse_manifest("not json", NULL, &m, err, sizeof(err)), -EINVAL);
	CHECK_INT_EQ(parse_manifest(escaped_layer, NULL, &m, err, sizeof(err)), -ENOTSUP);
	CHECK(strstr(err, "'x [2J y'") != NULL);
	CHECK_INT_EQ(parse_manifest(escaped_kind, NULL, &m, err, sizeof(err)), -ENOTSUP);
	CHECK(strstr(err, "'a ]0;t b'") != NULL);
}

static void test_too_many_layers(void)
{
	static struct oci_manifest m;
	char err[TEST_ERR_MAX];
	char *json = malloc(TEST_JSON_MAX);
	size_t len;

	CHECK(json != NULL);
	if (!json)
		return;
	len = (size_t)snprintf(json, TEST_JSON_MAX,
			       "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":1},\"layers\":[");
	for (int i = 0; i <= OCI_MANIFEST_LAYERS_MAX; i++)
		len += (size_t)snprintf(json + len, TEST_JSON_MAX - len,
					"%s{\"mediaType\":\"" LAYER_GZIP "\",\"digest\":\"" D2 "\",\"size\":1}",
					i ? "," : "");
	snprintf(json + len, TEST_JSON_MAX - len, "]}");
	CHECK_INT_EQ(parse_manifest(json, NULL, &m, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "layers") != NULL);
	free(json);
}

static void test_indexes(void)
{
	static struct oci_manifest m;
	char err[TEST_ERR_MAX];
	const char *index = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MEDIA_OCI_INDEX "\",\"manifests\":["
			    "{\"digest\":\"" D1 "\",\"size\":5,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}},"
			    "{\"digest\":\"" D2 "\",\"size\":6,\"platform\":{\"os\":\"windows\",\"architecture\":\"amd64\"}},"
			    "{\"digest\":\"" D3 "\",\"size\":7,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
	/* a Docker list without mediaType in the body: the Content-Type says what it is */
	const char *list = "{\"schemaVersion\":2,\"manifests\":["
			   "{\"digest\":\"" D2 "\",\"size\":6,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
	const char *no_amd64 = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MEDIA_DOCKER_LIST "\",\"manifests\":["
			       "{\"digest\":\"" D1 "\",\"size\":5,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}}]}";
	const char *other = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.example+json\"}";

	CHECK_INT_EQ(parse_manifest(index, NULL, &m, err, sizeof(err)), 0);
	CHECK_INT_EQ(m.kind, OCI_MANIFEST_INDEX);
	CHECK_STR_EQ(m.platform.digest, D3);
	CHECK_INT_EQ(m.platform.size, 7);
	CHECK_INT_EQ(parse_manifest(list, OCI_MEDIA_DOCKER_LIST, &m, err, sizeof(err)), 0);
	CHECK_INT_EQ(m.kind, OCI_MANIFEST_INDEX);
	CHECK_STR_EQ(m.platform.digest, D2);
	CHECK_INT_EQ(parse_manifest(no_amd64, NULL, &m, err, sizeof(err)), -ENOTSUP);
	CHECK(strstr(err, "linux/amd64") != NULL);
	CHECK_INT_EQ(parse_manifest(other, NULL, &m, err, sizeof(err)), -ENOTSUP);
}

int main(void)
{
	RUN_TEST(test_references);
	RUN_TEST(test_loopback);
	RUN_TEST(test_challenges);
	RUN_TEST(test_tokens);
	RUN_TEST(test_image_manifests);
	RUN_TEST(test_too_many_layers);
	RUN_TEST(test_indexes);
	return harness_finish();
}
