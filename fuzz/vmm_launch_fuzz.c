/*
 * Fuzz target for the decoder of a VMM process's launch (sandbox/vmm_launch.h): voidbox-vmm
 * reads it before anything else, so any byte string must be refused or accepted without
 * reading out of bounds, and an accepted launch must hold only values in range and encode
 * back to exactly the bytes it came from.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/vmm_launch.h"

#define FUZZ_ERR_MAX 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vmm_launch_decoded decoded;
	const struct vmm_launch *launch = &decoded.launch;
	char err[FUZZ_ERR_MAX];
	uint8_t *encoded = NULL;
	size_t encoded_len = 0;

	if (vmm_launch_decode(data, size, &decoded, err, sizeof(err)) != 0)
		return 0;
	if (launch->kind == VMM_LAUNCH_BOOT &&
	    (!launch->cfg.kernel_path || launch->cfg.disk_count > VM_MAX_DISKS ||
	     launch->cfg.share_count > VMM_LAUNCH_MAX_SHARES ||
	     launch->cfg.memory_mb > VM_MAX_MEMORY_MB || launch->cfg.vcpus > VM_MAX_VCPUS))
		abort();
	if (launch->kind == VMM_LAUNCH_RESTORE && !launch->snapshot_dir)
		abort();
	if (vmm_launch_encode(launch, &encoded, &encoded_len, err, sizeof(err)) != 0 ||
	    encoded_len != size || memcmp(encoded, data, size) != 0)
		abort();
	free(encoded);
	vmm_launch_release(&decoded);
	return 0;
}
