/*
 * libFuzzer target for the kernel-module reader the guest image builder runs on files from a
 * downloaded package: ELF64 section lookup of .modinfo, then the depends= scan, and the scan
 * alone on the raw bytes. Input is copied into a fresh allocation first because the builder
 * always parses a malloc'd (so aligned) buffer. Any result is fine; only a crash or a
 * sanitizer report is a finding. A returned section must lie inside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/kmod_deps.h"

#define FUZZ_DEPENDS_MAX 1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *image = malloc(size ? size : 1);
	char depends[FUZZ_DEPENDS_MAX];
	const char *modinfo = NULL;
	size_t modinfo_len = 0;

	if (!image)
		return 0;
	memcpy(image, data, size);
	if (kmod_elf_find_modinfo(image, size, &modinfo, &modinfo_len) == 0) {
		if ((const unsigned char *)modinfo < image ||
		    (const unsigned char *)modinfo + modinfo_len > image + size)
			abort();
		kmod_modinfo_find_depends(modinfo, modinfo_len, depends, sizeof(depends));
	}
	kmod_modinfo_find_depends((const char *)image, size, depends, sizeof(depends));
	free(image);
	return 0;
}
