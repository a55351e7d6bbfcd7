/*
 * SHA-256 against FIPS 180-4's examples (the empty message, "abc", the two-block message and a
 * million 'a's), whole and fed in pieces of every awkward size, so a block boundary falling
 * anywhere in an update gives the same digest.
 */
#include "common/sha256.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_MILLION 1000000u
#define TEST_PIECES_MESSAGE 10007u
#define TEST_HEX_LEN (2 * SHA256_DIGEST_SIZE + 1)

static const char *hex_of(const uint8_t digest[SHA256_DIGEST_SIZE], char out[TEST_HEX_LEN])
{
	for (unsigned int i = 0; i < SHA256_DIGEST_SIZE; i++)
		snprintf(out + 2 * i, 3, "%02x", digest[i]);
	return out;
}

static void check_digest(const void *data, size_t len, const char *expected)
{
	uint8_t digest[SHA256_DIGEST_SIZE];
	char hex[TEST_HEX_LEN];

	sha256_digest(data, len, digest);
	CHECK_STR_EQ(hex_of(digest, hex), expected);
}

static void test_fips_examples(void)
{
	const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

	check_digest("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check_digest("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check_digest(two_blocks, strlen(two_blocks),
		     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_million_a(void)
{
	uint8_t *data = malloc(TEST_MILLION);

	CHECK(data != NULL);
	if (!data)
		return;
	memset(data, 'a', TEST_MILLION);
	check_digest(data, TEST_MILLION,
		     "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(data);
}

/* pieces of 1 to 130 bytes: every offset against the 64-byte block, and whole blocks */
static void test_pieces_match_whole(void)
{
	uint8_t data[TEST_PIECES_MESSAGE], whole[SHA256_DIGEST_SIZE], pieces[SHA256_DIGEST_SIZE];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 3);
	sha256_digest(data, sizeof(data), whole);
	for (size_t piece = 1; piece <= 2 * SHA256_BLOCK_SIZE + 2; piece++) {
		struct sha256_ctx ctx;

		sha256_init(&ctx);
		for (size_t done = 0; done < sizeof(data); done += piece)
			sha256_update(&ctx, data + done,
				      sizeof(data) - done < piece ? sizeof(data) - done : piece);
		sha256_final(&ctx, pieces);
		CHECK(memcmp(whole, pieces, sizeof(whole)) == 0);
	}
}

int main(void)
{
	RUN_TEST(test_fips_examples);
	RUN_TEST(test_million_a);
	RUN_TEST(test_pieces_match_whole);
	return harness_finish();
}
