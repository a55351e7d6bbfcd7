/*
 * Fuzz target for the snapshot state file decoder: a snapshot directory may come from anywhere
 * (a copied cache, a damaged disk), and the decoder must refuse any byte string it cannot
 * prove well-formed without reading out of bounds. An accepted input is re-encoded, and the
 * encoding must decode to the same image: a section the decoder takes must survive a
 * round trip.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/snapshot_file.h"

static struct snapshot_image decoded;
static struct snapshot_image again;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	uint8_t *encoded = NULL;
	size_t encoded_len = 0;
	uint64_t id = 0, id_again = 0;

	if (snapshot_decode(data, size, &decoded, &id, err, sizeof(err)) != 0)
		return 0;
	if (snapshot_encode(&decoded, &encoded, &encoded_len) != 0)
		abort();
	if (snapshot_decode(encoded, encoded_len, &again, &id_again, err, sizeof(err)) != 0 ||
	    memcmp(&decoded.meta, &again.meta, sizeof(decoded.meta)) != 0)
		abort();
	free(encoded);
	return 0;
}
