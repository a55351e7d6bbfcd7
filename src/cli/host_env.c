/* Reading the libraries' environment variables once, at a program's entry (see host_env.h). */
#include "cli/host_env.h"

#include <stdlib.h>

#include "common/log.h"
#include "sandbox/vmm_process.h"
#include "store/guest_image.h"
#include "store/snapshot_store.h"
#include "store/store_settings.h"

int host_env_apply(void)
{
	const struct store_settings store = {
		.voidbox_home = getenv(GUEST_IMAGE_ENV_HOME),
		.user_home = getenv(HOST_ENV_HOME),
		.kernel = getenv(GUEST_IMAGE_ENV_KERNEL),
		.initramfs = getenv(GUEST_IMAGE_ENV_INITRAMFS),
		.snapshot_cache_max = getenv(SNAPSHOT_STORE_CACHE_MAX_ENV),
	};
	int rc;

	log_set_level_name(getenv(LOG_LEVEL_ENV));
	if (vmm_process_use_binary(getenv(VMM_PROCESS_BINARY_ENV)) < 0)
		log_warn("env", "%s is longer than a path may be: it is ignored, and the VMM's "
			 "program is looked for beside this one", VMM_PROCESS_BINARY_ENV);
	rc = store_settings_set(&store);
	if (rc < 0)
		log_error("env", "out of memory copying the environment's settings");
	return rc;
}

const char *host_env_lookup(const char *name, void *ctx)
{
	(void)ctx;
	return getenv(name);
}
