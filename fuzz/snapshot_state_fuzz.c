/*
 * Fuzz target for the snapshot state file decoder: a snapshot directory may come from anywhere
 * (a copied cache, a damaged disk), and the decoder must refuse any byte string it cannot
 * prove well-formed without reading out of bounds. Checksums are not verified here (a random
 * input would almost never pass them), so every input reaches the section parser. An accepted
 * input is re-encoded; that encoding must decode again and encode to the very same bytes, so
 * every section the decoder takes -- metadata, vCPUs, irqchip, PIT, clock and each device's
 * bytes -- survives a round trip.
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
	uint8_t *encoded = NULL, *encoded_again = NULL;
	size_t encoded_len = 0, encoded_again_len = 0;
	uint64_t id = 0, id_again = 0;

	if (snapshot_decode(data, size, SNAPSHOT_DECODE_IGNORE_CHECKSUMS, &decoded, &id, err,
			    sizeof(err)) != 0)
		return 0;
	if (snapshot_encode(&decoded, &encoded, &encoded_len) != 0)
		abort();
	if (snapshot_decode(encoded, encoded_len, SNAPSHOT_DECODE_CHECKED, &again, &id_again, err,
			    sizeof(err)) != 0 ||
	    snapshot_encode(&again, &encoded_again, &encoded_again_len) != 0 ||
	    encoded_len != encoded_again_len || memcmp(encoded, encoded_again, encoded_len) != 0)
		abort();
	free(encoded);
	free(encoded_again);
	snapshot_image_release(&decoded);
	snapshot_image_release(&again);
	return 0;
}
