/*
 * Agent flavours without the network: names parse both ways, the npm integrity check accepts
 * exactly the pinned bytes (a tampered tarball is refused with both digests, an integrity of
 * another algorithm is refused outright), `ldd` output becomes the list of host libraries to
 * copy (a missing library is an error naming it, a static program needs none), and every pin
 * in agent_pins.h is a well-formed sha512 integrity of a registry tarball.
 */
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "store/agent_flavour.h"
#include "store/agent_pins.h"

#define TEST_ERR_MAX 1024
#define TEST_CONTENT "voidbox pinned tarball\n"
#define TEST_TAMPERED "voidbox pinned tarbalL\n"
/* printf 'voidbox pinned tarball\n' | openssl dgst -sha512 -binary | base64 */
#define TEST_INTEGRITY \
	"sha512-HpuQH1vPrmtaRXAs9Io4b0eQ72o1vEK7oSIRSu7sZhB8P6GP0EC4ynpCrwBISZK52KuS4C8rQEwga6IEcD5l2A=="
#define TEST_SHA1_INTEGRITY "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk="
#define TEST_SHA512_BYTES 64
#define TEST_REGISTRY "https://registry.npmjs.org/"

static const char ldd_glibc[] =
	"\tlinux-vdso.so.1 (0x00007ffd0c3f2000)\n"
	"\tlibrt.so.1 => /lib/x86_64-linux-gnu/librt.so.1 (0x00007f1)\n"
	"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n"
	"\t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n"
	"\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f4)\n"
	"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n";

static void write_file(const char *path, const char *text)
{
	FILE *out = fopen(path, "w");

	CHECK(out != NULL);
	if (out) {
		fputs(text, out);
		fclose(out);
	}
}

static void test_names(void)
{
	enum agent_flavour flavour;

	CHECK_INT_EQ(agent_flavour_parse("claude", &flavour), 0);
	CHECK_INT_EQ(flavour, AGENT_FLAVOUR_CLAUDE);
	CHECK_STR_EQ(agent_flavour_name(flavour), "claude");
	CHECK_INT_EQ(agent_flavour_parse("codex", &flavour), 0);
	CHECK_INT_EQ(flavour, AGENT_FLAVOUR_CODEX);
	CHECK_STR_EQ(agent_flavour_name(flavour), "codex");
	CHECK_INT_EQ(agent_flavour_parse("Claude", &flavour), -EINVAL);
	CHECK_INT_EQ(agent_flavour_parse("", &flavour), -EINVAL);
	CHECK_INT_EQ(agent_flavour_parse(NULL, &flavour), -EINVAL);
	CHECK_STR_EQ(agent_flavour_version(AGENT_FLAVOUR_CLAUDE), AGENT_PIN_CLAUDE_VERSION);
	CHECK_STR_EQ(agent_flavour_package(AGENT_FLAVOUR_CODEX), AGENT_PIN_CODEX_PACKAGE);
}

static void test_integrity(void)
{
	char dir[] = "/tmp/voidbox-flavour-test-XXXXXX", path[PATH_MAX], err[TEST_ERR_MAX] = "";

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/package.tgz", dir);
	write_file(path, TEST_CONTENT);
	CHECK_INT_EQ(agent_flavour_check_integrity(path, TEST_INTEGRITY, err, sizeof(err)), 0);

	/* one changed byte: refused, with both digests in the sentence */
	write_file(path, TEST_TAMPERED);
	CHECK_INT_EQ(agent_flavour_check_integrity(path, TEST_INTEGRITY, err, sizeof(err)),
		     -EBADMSG);
	CHECK(strstr(err, "does not match its pinned integrity") != NULL);
	CHECK(strstr(err, TEST_INTEGRITY) != NULL);

	/* only sha512 pins are accepted, whatever the file holds */
	CHECK_INT_EQ(agent_flavour_check_integrity(path, TEST_SHA1_INTEGRITY, err, sizeof(err)),
		     -EINVAL);
	CHECK(strstr(err, "sha512") != NULL);
	CHECK_INT_EQ(agent_flavour_check_integrity(path, NULL, err, sizeof(err)), -EINVAL);

	/* a missing file is an error, not a match */
	unlink(path);
	CHECK(agent_flavour_check_integrity(path, TEST_INTEGRITY, err, sizeof(err)) < 0);
	rmdir(dir);
}

static void test_ldd_paths(void)
{
	char (*paths)[PATH_MAX] = calloc(8, PATH_MAX);
	char err[TEST_ERR_MAX] = "";
	size_t count = 99;

	CHECK(paths != NULL);
	if (!paths)
		return;
	/* arrows and bare loader lines; the vdso has no file; duplicates once */
	CHECK_INT_EQ(agent_flavour_ldd_paths(ldd_glibc, paths, 8, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 4);
	CHECK_STR_EQ(paths[0], "/lib/x86_64-linux-gnu/librt.so.1");
	CHECK_STR_EQ(paths[1], "/lib/x86_64-linux-gnu/libc.so.6");
	CHECK_STR_EQ(paths[2], "/lib64/ld-linux-x86-64.so.2");
	CHECK_STR_EQ(paths[3], "/lib/x86_64-linux-gnu/libm.so.6");

	/* a static program needs nothing */
	CHECK_INT_EQ(agent_flavour_ldd_paths("\tstatically linked\n", paths, 8, &count, err,
					     sizeof(err)), 0);
	CHECK_INT_EQ(count, 0);

	/* a library the host lacks stops the build and is named */
	CHECK_INT_EQ(agent_flavour_ldd_paths("\tlibfoo.so.9 => not found\n", paths, 8, &count, err,
					     sizeof(err)), -ENOENT);
	CHECK(strstr(err, "libfoo.so.9") != NULL);

	/* more libraries than room is refused, not truncated */
	CHECK_INT_EQ(agent_flavour_ldd_paths(ldd_glibc, paths, 2, &count, err, sizeof(err)),
		     -E2BIG);
	free(paths);
}

static void check_pin(const char *tarball, const char *integrity)
{
	const char *b64 = integrity + strlen("sha512-");
	unsigned char digest[TEST_SHA512_BYTES + 3];

	CHECK(strncmp(tarball, TEST_REGISTRY, strlen(TEST_REGISTRY)) == 0);
	CHECK(strncmp(integrity, "sha512-", strlen("sha512-")) == 0);
	/* 64 bytes are 88 base64 characters with two '=' of padding */
	CHECK_INT_EQ(strlen(b64), 88);
	CHECK_INT_EQ(EVP_DecodeBlock(digest, (const unsigned char *)b64, (int)strlen(b64)),
		     TEST_SHA512_BYTES + 2);
}

static void test_pins_are_well_formed(void)
{
	check_pin(AGENT_PIN_CLAUDE_TARBALL, AGENT_PIN_CLAUDE_INTEGRITY);
	check_pin(AGENT_PIN_CODEX_TARBALL, AGENT_PIN_CODEX_INTEGRITY);
	CHECK(strstr(AGENT_PIN_CLAUDE_TARBALL, AGENT_PIN_CLAUDE_VERSION) != NULL);
	CHECK(strstr(AGENT_PIN_CODEX_TARBALL, AGENT_PIN_CODEX_VERSION) != NULL);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_names);
	RUN_TEST(test_integrity);
	RUN_TEST(test_ldd_paths);
	RUN_TEST(test_pins_are_well_formed);
	return harness_finish();
}
