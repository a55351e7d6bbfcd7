/*
 * --disk PATH[:ro] for every subcommand that boots a sandbox: one parser, so exec and shell
 * take the same spelling and the same limit. The disk itself is opened and checked when the
 * VM is created (src/devices/blk.c), which names the file in any error.
 */
#include <stdio.h>

#include "cli/cli.h"
#include "sandbox/sandbox.h"

#define CLI_DISK_ERROR_MAX 256

int cli_add_disk(const char *command, char *arg, struct vm_disk *disks,
		 struct sandbox_config *cfg)
{
	char err[CLI_DISK_ERROR_MAX];

	if (cfg->disk_count >= VM_MAX_DISKS) {
		fprintf(stderr, "voidbox %s: at most %u --disk flags\n", command, VM_MAX_DISKS);
		return -1;
	}
	if (sandbox_disk_parse(arg, &disks[cfg->disk_count], err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		return -1;
	}
	cfg->disks = disks;
	cfg->disk_count++;
	return 0;
}

int cli_check_disks_fit_snapshot(const char *command, const char *snapshot_ref,
				 const struct sandbox_config *cfg)
{
	if (!snapshot_ref || cfg->disk_count == 0)
		return 0;
	fprintf(stderr, "voidbox %s: --disk does not combine with --snapshot: a restored VM has the "
		"disks it had when it was snapshotted\n", command);
	return -1;
}
