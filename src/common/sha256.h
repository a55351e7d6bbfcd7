/*
 * SHA-256 (FIPS 180-4) for the host and the static guest agent alike: a streaming context for
 * hashing a message in pieces, and one call for a whole buffer.
 */
#ifndef VOIDBOX_COMMON_SHA256_H
#define VOIDBOX_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32u
#define SHA256_BLOCK_SIZE 64u

struct sha256_ctx {
	uint32_t state[8];
	uint8_t block[SHA256_BLOCK_SIZE];
	size_t block_len;
	uint64_t total_len;
};

void sha256_init(struct sha256_ctx *h);
void sha256_update(struct sha256_ctx *h, const void *data, size_t len);
/* Writes the digest and wipes the context. */
void sha256_final(struct sha256_ctx *h, uint8_t out[SHA256_DIGEST_SIZE]);
/* The digest of len bytes at data. */
void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE]);

#endif
