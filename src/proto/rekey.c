/*
 * The rekey document a restored or forked guest receives (docs/protocol.md §4.2): its new
 * session secret, a seed for its RNG and the host's clock. The host writes it and the agent
 * reads it with this one codec, so the two can never disagree on a field; the decoder checks
 * every field's type and size, because the agent applies what it reads as PID 1.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/protocol.h"

#define REKEY_KEY_SECRET "secret_hex"
#define REKEY_KEY_SEED "rng_seed_b64"
#define REKEY_KEY_CLOCK "clock_ns"

int proto_rekey_encode(const struct proto_rekey *rekey, char **json_out)
{
	char hex[2 * PROTO_SECRET_SIZE + 1];
	char *seed_b64;
	json_t *root;

	*json_out = NULL;
	if (rekey->seed_len == 0 || rekey->seed_len > PROTO_REKEY_SEED_MAX || rekey->clock_ns == 0 ||
	    rekey->clock_ns > (uint64_t)INT64_MAX)
		return -EINVAL;
	seed_b64 = proto_base64_encode(rekey->seed, rekey->seed_len);
	if (!seed_b64)
		return -ENOMEM;
	proto_secret_to_hex(rekey->secret, hex);
	root = json_pack("{s:s, s:s, s:I}", REKEY_KEY_SECRET, hex, REKEY_KEY_SEED, seed_b64,
			 REKEY_KEY_CLOCK, (json_int_t)rekey->clock_ns);
	explicit_bzero(hex, sizeof(hex));
	explicit_bzero(seed_b64, strlen(seed_b64));
	free(seed_b64);
	if (root)
		*json_out = json_dumps(root, JSON_COMPACT);
	json_decref(root); /* jansson keeps no copy of the secret past this */
	return *json_out ? 0 : -ENOMEM;
}

int proto_rekey_decode(const uint8_t *json, size_t len, struct proto_rekey *out, const char **why)
{
	json_error_t error;
	json_t *root = json_loadb((const char *)json, len, JSON_REJECT_DUPLICATES, &error);
	struct proto_bytes seed = { 0 };
	struct proto_rekey decoded = { 0 };
	int rc = -EINVAL;

	if (!json_is_object(root)) {
		*why = "the rekey document is not a JSON object";
		goto out;
	}
	const char *hex = json_string_value(json_object_get(root, REKEY_KEY_SECRET));
	json_t *b64 = json_object_get(root, REKEY_KEY_SEED);
	json_t *clock = json_object_get(root, REKEY_KEY_CLOCK);

	if (!hex || proto_secret_from_hex(hex, decoded.secret) != 0) {
		*why = "secret_hex must be 64 hex digits";
		goto out;
	}
	if (!json_is_string(b64) ||
	    proto_base64_decode(json_string_value(b64), json_string_length(b64), &seed) != 0 ||
	    seed.len == 0 || seed.len > PROTO_REKEY_SEED_MAX) {
		*why = "rng_seed_b64 must be base64 of 1 to 256 bytes";
		goto out;
	}
	if (!json_is_integer(clock) || json_integer_value(clock) <= 0) {
		*why = "clock_ns must be a positive integer";
		goto out;
	}
	memcpy(decoded.seed, seed.data, seed.len);
	decoded.seed_len = seed.len;
	decoded.clock_ns = (uint64_t)json_integer_value(clock);
	rc = 0;
out:
	if (seed.data)
		explicit_bzero(seed.data, seed.len);
	free(seed.data);
	if (rc < 0)
		explicit_bzero(&decoded, sizeof(decoded));
	*out = decoded; /* all zero on failure */
	explicit_bzero(&decoded, sizeof(decoded));
	json_decref(root);
	return rc;
}

int proto_rekey_restamp(const uint8_t *json, size_t len, uint64_t clock_ns, char **json_out)
{
	struct proto_rekey rekey;
	const char *why = NULL;
	int rc = proto_rekey_decode(json, len, &rekey, &why);

	*json_out = NULL;
	if (rc == 0) {
		rekey.clock_ns = clock_ns;
		rc = proto_rekey_encode(&rekey, json_out);
	}
	explicit_bzero(&rekey, sizeof(rekey));
	return rc;
}
