/*
 * Fuzz target for the snapshot state file decoder: a snapshot directory may come from anywhere
 * (a copied cache, a damaged disk), and the decoder must refuse any byte string it cannot
 * prove well-formed without reading out of bounds. Checksums are not verified here (a random
 * input would almost never pass them), so every input reaches the section parser. An accepted
 * input is re-encoded; that encoding must decode again and encode to the very same bytes, so
 * every section the decoder takes -- metadata, vCPUs, irqchip, PIT, clock and each device's
 * bytes -- survives a round trip. Each device section is also read by its kind's host_paths
 * (what the VMM process's jail is planned from, before any VM exists): every path it hands
 * out must be a non-empty string.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/snapshot_file.h"

static struct snapshot_image decoded;
static struct snapshot_image again;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_host_path(const struct vm_host_path *path, void *opaque)
{
	(void)opaque;
	if (!path->path || !path->path[0] || strnlen(path->path, PATH_MAX) == PATH_MAX)
		abort();
	return 0;
}

/* Every decoded device section through its kind's host_paths, as a restore's plan reads it. */
static void list_host_paths(const struct snapshot_image *image)
{
	char err[512];

	for (size_t i = 0; i < image->device_count; i++) {
		const struct snapshot_device_state *saved = &image->devices[i];
		const struct vm_device_type *type = vm_device_type_find(saved->name);
		struct vm_device_section section = { .version = saved->version,
						     .state = saved->state,
						     .state_len = saved->state_len };

		if (type && type->host_paths)
			type->host_paths(&section, check_host_path, NULL, err, sizeof(err));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	uint8_t *encoded = NULL, *encoded_again = NULL;
	size_t encoded_len = 0, encoded_again_len = 0;
	uint64_t id = 0, id_again = 0;

	if (snapshot_decode(data, size, SNAPSHOT_DECODE_IGNORE_CHECKSUMS, &decoded, &id, err,
			    sizeof(err)) != 0)
		return 0;
	list_host_paths(&decoded);
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
