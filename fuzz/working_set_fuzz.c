/*
 * Fuzz target for the working-set list decoder (vmm/working_set.h): the list sits in a snapshot
 * directory that may have been copied from anywhere, and a restore reads it before the guest
 * runs, so any byte string must be refused or accepted without reading out of bounds, and an
 * accepted list must name only pages inside the guest's RAM. The checksum is skipped so random
 * input reaches the run checks. An accepted input re-encodes to bytes that decode, checked, to
 * the same runs.
 */
#include <stdint.h>
#include <stdlib.h>

#include "vmm/memory.h"
#include "vmm/working_set.h"

#define FUZZ_MEMORY_MB 4096 /* two regions: below the MMIO gap and above 4 GiB */
#define FUZZ_ERR_MAX 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct guest_memory layout;
	struct working_set ws, again;
	char err[FUZZ_ERR_MAX];
	uint8_t *encoded = NULL;
	size_t encoded_len = 0;

	if (layout.region_count == 0 &&
	    guest_memory_plan(&layout, FUZZ_MEMORY_MB, 0, err, sizeof(err)) != 0)
		abort();
	if (working_set_decode(data, size, &layout, WORKING_SET_DECODE_IGNORE_CHECKSUM, &ws, err,
			       sizeof(err)) != 0)
		return 0;
	if (ws.pages > layout.total_size / WORKING_SET_PAGE_SIZE)
		abort();
	if (working_set_encode(&ws, &encoded, &encoded_len) != 0 ||
	    working_set_decode(encoded, encoded_len, &layout, WORKING_SET_DECODE_CHECKED, &again,
			       err, sizeof(err)) != 0 ||
	    again.run_count != ws.run_count || again.pages != ws.pages ||
	    again.written_pages != ws.written_pages || ws.written_pages > ws.pages)
		abort();
	for (uint32_t i = 0; i < ws.run_count; i++)
		if (again.runs[i].gpa != ws.runs[i].gpa || again.runs[i].pages != ws.runs[i].pages ||
		    again.runs[i].written != ws.runs[i].written)
			abort();
	free(encoded);
	working_set_release(&ws);
	working_set_release(&again);
	return 0;
}
