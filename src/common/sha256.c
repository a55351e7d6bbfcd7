/*
 * SHA-256 (FIPS 180-4), written out here, small and dependency-free: the guest agent is one
 * static binary that links no crypto library (its handshake proof is an HMAC over this), and
 * the VMM hashes snapshot state files without loading one. Inputs are small (handshake
 * messages, state files of tens of KiB), so it favours plainness over speed.
 */
#include "common/sha256.h"

#include <string.h>

#define SHA256_WORDS 8u
#define SHA256_ROUNDS 64u
#define SHA256_SCHEDULE_WORDS 16u
#define SHA256_LENGTH_BYTES 8u
#define SHA256_PAD_BYTE 0x80u
#define BITS_PER_BYTE 8u

static const uint32_t sha256_k[SHA256_ROUNDS] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static const uint32_t sha256_initial[SHA256_WORDS] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static uint32_t rotr32(uint32_t x, unsigned int n)
{
	return x >> n | x << (32u - n);
}

/*
 * One 64-byte block. The message schedule is expanded in full first and the eight working
 * variables are named rather than shifted through an array each round: the same FIPS 180-4
 * steps, several times faster, since a restore hashes its state file on every start.
 */
static void sha256_compress(struct sha256_ctx *ctx, const uint8_t block[SHA256_BLOCK_SIZE])
{
	uint32_t w[SHA256_ROUNDS];
	uint32_t a = ctx->state[0], b = ctx->state[1], c = ctx->state[2], d = ctx->state[3];
	uint32_t e = ctx->state[4], f = ctx->state[5], g = ctx->state[6], h = ctx->state[7];

	for (unsigned int i = 0; i < SHA256_SCHEDULE_WORDS; i++)
		w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
		       (uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
	for (unsigned int i = SHA256_SCHEDULE_WORDS; i < SHA256_ROUNDS; i++) {
		uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	for (unsigned int i = 0; i < SHA256_ROUNDS; i++) {
		uint32_t t1 = h + (rotr32(e, 6) ^ rotr32(e, 11) ^ rotr32(e, 25)) +
			      ((e & f) ^ (~e & g)) + sha256_k[i] + w[i];
		uint32_t t2 = (rotr32(a, 2) ^ rotr32(a, 13) ^ rotr32(a, 22)) +
			      ((a & b) ^ (a & c) ^ (b & c));

		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	ctx->state[0] += a;
	ctx->state[1] += b;
	ctx->state[2] += c;
	ctx->state[3] += d;
	ctx->state[4] += e;
	ctx->state[5] += f;
	ctx->state[6] += g;
	ctx->state[7] += h;
}

void sha256_init(struct sha256_ctx *h)
{
	memcpy(h->state, sha256_initial, sizeof(h->state));
	h->block_len = 0;
	h->total_len = 0;
}

void sha256_update(struct sha256_ctx *h, const void *bytes, size_t len)
{
	const uint8_t *data = bytes;

	h->total_len += len;
	while (len > 0) {
		size_t take = SHA256_BLOCK_SIZE - h->block_len;

		if (take > len)
			take = len;
		memcpy(h->block + h->block_len, data, take);
		h->block_len += take;
		data += take;
		len -= take;
		if (h->block_len == SHA256_BLOCK_SIZE) {
			sha256_compress(h, h->block);
			h->block_len = 0;
		}
	}
}

void sha256_final(struct sha256_ctx *h, uint8_t out[SHA256_DIGEST_SIZE])
{
	uint64_t bits = h->total_len * BITS_PER_BYTE;
	uint8_t pad = SHA256_PAD_BYTE;
	uint8_t zero = 0;
	uint8_t length[SHA256_LENGTH_BYTES];

	for (unsigned int i = 0; i < SHA256_LENGTH_BYTES; i++)
		length[i] = (uint8_t)(bits >> (BITS_PER_BYTE * (SHA256_LENGTH_BYTES - 1 - i)));
	sha256_update(h, &pad, 1);
	while (h->block_len != SHA256_BLOCK_SIZE - SHA256_LENGTH_BYTES)
		sha256_update(h, &zero, 1);
	sha256_update(h, length, sizeof(length));
	for (unsigned int i = 0; i < SHA256_WORDS; i++)
		for (unsigned int b = 0; b < 4; b++)
			out[4 * i + b] = (uint8_t)(h->state[i] >> (24 - BITS_PER_BYTE * b));
	memset(h, 0, sizeof(*h));
}

void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE])
{
	struct sha256_ctx h;

	sha256_init(&h);
	sha256_update(&h, data, len);
	sha256_final(&h, out);
}
