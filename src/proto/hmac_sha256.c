/*
 * SHA-256 over pieces and HMAC-SHA256 (RFC 2104) for the handshake's challenge-response
 * (docs/protocol.md §3), on the dependency-free SHA-256 of src/common (the guest agent links
 * no crypto library, and both ends must compute the proof identically). Only whole messages
 * are hashed (the handshake's inputs are a few dozen bytes), so the interface is one call
 * over a list of pieces.
 */
#include "proto/protocol.h"

#include <string.h>

#include "common/sha256.h"

#define HMAC_INNER_PAD 0x36u
#define HMAC_OUTER_PAD 0x5cu

void proto_sha256(const struct proto_bytes_piece *pieces, size_t count,
		  uint8_t out[PROTO_SHA256_SIZE])
{
	struct sha256_ctx h;

	sha256_init(&h);
	for (size_t i = 0; i < count; i++)
		sha256_update(&h, pieces[i].data, pieces[i].len);
	sha256_final(&h, out);
}

void proto_hmac_sha256(const uint8_t *key, size_t key_len, const struct proto_bytes_piece *pieces,
		       size_t count, uint8_t out[PROTO_SHA256_SIZE])
{
	uint8_t block_key[SHA256_BLOCK_SIZE] = { 0 }, pad[SHA256_BLOCK_SIZE];
	uint8_t inner[PROTO_SHA256_SIZE];
	struct sha256_ctx h;

	if (key_len > SHA256_BLOCK_SIZE) {
		struct proto_bytes_piece whole = { key, key_len };

		proto_sha256(&whole, 1, block_key);
	} else {
		memcpy(block_key, key, key_len);
	}
	for (unsigned int i = 0; i < SHA256_BLOCK_SIZE; i++)
		pad[i] = block_key[i] ^ HMAC_INNER_PAD;
	sha256_init(&h);
	sha256_update(&h, pad, sizeof(pad));
	for (size_t i = 0; i < count; i++)
		sha256_update(&h, pieces[i].data, pieces[i].len);
	sha256_final(&h, inner);
	for (unsigned int i = 0; i < SHA256_BLOCK_SIZE; i++)
		pad[i] = block_key[i] ^ HMAC_OUTER_PAD;
	sha256_init(&h);
	sha256_update(&h, pad, sizeof(pad));
	sha256_update(&h, inner, sizeof(inner));
	sha256_final(&h, out);
	memset(block_key, 0, sizeof(block_key));
	memset(pad, 0, sizeof(pad));
	memset(inner, 0, sizeof(inner));
}
