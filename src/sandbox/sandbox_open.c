/*
 * The one way a sandbox comes up from what a user wrote: a cold boot, or a restore of what a
 * snapshot reference names. The CLI (--snapshot) and specs (sandbox.snapshot) both come here,
 * so the rules are the same everywhere: a reference that resolves to nothing is a warning and
 * a cold boot (the documented behaviour), an ambiguous or unusable one is an error, and a
 * restore that fails -- for any reason, a missing base included -- is an error, never a
 * silent cold boot of something else.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "devices/net.h"
#include "sandbox/sandbox.h"
#include "store/snapshot_store.h"

#define SANDBOX_OPEN_REASON_MAX 512

static int sandbox_open_cold(const struct sandbox_config *cfg, struct sandbox **out, char *err,
			     size_t errlen)
{
	if (!cfg->kernel_path) {
		snprintf(err, errlen, "no guest image to boot: run `voidbox image build` (or pass "
			 "--kernel / set VOID_BOX_KERNEL)");
		return -ENOENT;
	}
	return sandbox_start(cfg, out, err, errlen);
}

int sandbox_open(const struct sandbox_config *cfg, const char *snapshot_ref,
		 bool track_dirty_pages, struct sandbox **out, struct sandbox_open_info *info,
		 char *err, size_t errlen)
{
	struct sandbox_restore_config restore = {
		.serial_log_path = cfg->serial_log_path,
		.timeout_ms = cfg->boot_timeout_ms,
		.track_dirty_pages = track_dirty_pages,
		.host = cfg->host,
		.vmm_placement = cfg->vmm_placement,
		/* the policy comes from the snapshot; its own services' ports are granted anew */
		.grants = cfg->network ? &cfg->network->policy : NULL,
		.cancelled = cfg->cancelled,
		.cancelled_opaque = cfg->cancelled_opaque,
	};
	enum snapshot_store_source source;
	char reason[SANDBOX_OPEN_REASON_MAX];
	int rc;

	memset(info, 0, sizeof(*info));
	if (!snapshot_ref)
		return sandbox_open_cold(cfg, out, err, errlen);
	rc = snapshot_store_resolve(snapshot_ref, info->snapshot_dir, sizeof(info->snapshot_dir),
				    &source, reason, sizeof(reason));
	if (rc == -ENOENT) {
		info->fell_back_to_cold_boot = true;
		snprintf(info->warning, sizeof(info->warning), "%s; cold-booting instead", reason);
		info->snapshot_dir[0] = '\0';
		return sandbox_open_cold(cfg, out, err, errlen);
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s", reason);
		return rc;
	}
	if (cfg->mount_count) {
		snprintf(err, errlen, "a sandbox restored from a snapshot keeps the mounts it was "
			 "snapshotted with: drop the mounts, or cold-boot without the snapshot");
		return -EINVAL;
	}
	log_info("sandbox", "restoring snapshot %s (%s)", info->snapshot_dir,
		 source == SNAPSHOT_STORE_SOURCE_ID ? "from the store" : "a directory");
	restore.snapshot_dir = info->snapshot_dir;
	rc = sandbox_start_from_snapshot(&restore, out, err, errlen);
	if (rc < 0)
		return rc == -ENOENT ? -ESTALE : rc; /* the reference named something unusable */
	info->restored = true;
	if (source == SNAPSHOT_STORE_SOURCE_ID)
		snapshot_store_touch(info->snapshot_dir);
	return 0;
}
