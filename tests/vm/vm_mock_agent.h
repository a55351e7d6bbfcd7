/*
 * A guest image with the mock claude-code for VM tests of agents: a copy of the default
 * initramfs with a second cpio archive appended that holds /usr/local/bin/claude-code (the
 * kernel unpacks concatenated archives in order), so no extra image build or download is
 * needed. Header-only, like vm_test.h, so each single-file test program includes it.
 */
#ifndef VOIDBOX_TESTS_VM_MOCK_AGENT_H
#define VOIDBOX_TESTS_VM_MOCK_AGENT_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "store/cpio_newc.h"

#define VM_MOCK_AGENT_COPY_CHUNK 65536

static inline int vm_mock_agent_sink(void *ctx, const void *data, size_t len)
{
	return fwrite(data, 1, len, ctx) == len ? 0 : -EIO;
}

/*
 * Writes base_initramfs plus the mock agent to a new file made from path_template (a mkstemp
 * template, rewritten in place). 0 or a negative errno.
 */
static inline int vm_mock_agent_initramfs(const char *base_initramfs, const char *mock_agent,
					  char *path_template)
{
	char buf[VM_MOCK_AGENT_COPY_CHUNK];
	struct cpio_writer writer;
	FILE *in, *out;
	size_t got;
	int fd, rc = 0;

	fd = mkstemp(path_template);
	if (fd < 0)
		return -errno;
	out = fdopen(fd, "wb");
	in = fopen(base_initramfs, "rb");
	if (!out || !in) {
		if (out)
			fclose(out);
		else
			close(fd);
		if (in)
			fclose(in);
		return -EIO;
	}
	while ((got = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, got, out) != got)
			rc = -EIO;
	fclose(in);
	/* archives start 4-byte aligned; a newc archive's length already is */
	cpio_writer_init(&writer, vm_mock_agent_sink, out, 0);
	if (rc == 0)
		rc = cpio_writer_add_directory(&writer, "usr", 0755);
	if (rc == 0)
		rc = cpio_writer_add_directory(&writer, "usr/local", 0755);
	if (rc == 0)
		rc = cpio_writer_add_directory(&writer, "usr/local/bin", 0755);
	if (rc == 0)
		rc = cpio_writer_add_file_from_path(&writer, "usr/local/bin/claude-code", 0755,
						    mock_agent);
	if (rc == 0)
		rc = cpio_writer_finish(&writer);
	if (fclose(out) != 0 && rc == 0)
		rc = -EIO;
	return rc;
}

#endif
