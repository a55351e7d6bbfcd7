/*
 * libFuzzer target for the guest agent's own .modinfo reader (guest/agent/modules.c), which
 * PID 1 runs on every module file in the initramfs at boot: ELF64 section lookup, then the
 * name= and depends= scan. The input is copied into a fresh allocation, as the agent reads
 * each module into one. Any verdict is fine; a crash or a sanitizer report is a finding, and
 * so is a returned string that is not a NUL-terminated copy.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "modules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *image = malloc(size ? size : 1);
	char *name = NULL, *depends = NULL;

	if (!image)
		return 0;
	memcpy(image, data, size);
	if (modinfo_parse(image, size, &name, &depends) == 0) {
		if (name) {
			module_name_canonicalize(name);
			if (strchr(name, '-'))
				abort();
		}
		if (depends && strlen(depends) > size)
			abort();
	}
	free(name);
	free(depends);
	free(image);
	return 0;
}
