/*
 * The environment reaches the libraries only through host_env_apply: the variables users set
 * (VOIDBOX_HOME, HOME, VOID_BOX_KERNEL, VOID_BOX_INITRAMFS, VOIDBOX_SNAPSHOT_CACHE_MAX,
 * VOIDBOX_LOG_LEVEL) arrive in the store's settings and the logger, and the store then uses
 * them (an empty variable counts as unset, as it always has).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli/host_env.h"
#include "common/log.h"
#include "harness.h"
#include "store/guest_image.h"
#include "store/snapshot_store.h"
#include "store/store_settings.h"

static void test_variables_reach_the_store(void)
{
	const struct store_settings *settings;
	char out[PATH_MAX];

	setenv(GUEST_IMAGE_ENV_HOME, "/env/voidbox-home", 1);
	setenv("HOME", "/env/user", 1);
	setenv(GUEST_IMAGE_ENV_KERNEL, "/env/vmlinuz", 1);
	setenv(GUEST_IMAGE_ENV_INITRAMFS, "", 1);
	setenv(SNAPSHOT_STORE_CACHE_MAX_ENV, "20G", 1);
	CHECK_INT_EQ(host_env_apply(), 0);
	settings = store_settings_get();
	CHECK_STR_EQ(settings->voidbox_home, "/env/voidbox-home");
	CHECK_STR_EQ(settings->user_home, "/env/user");
	CHECK_STR_EQ(settings->kernel, "/env/vmlinuz");
	CHECK(settings->initramfs == NULL);
	CHECK_STR_EQ(settings->snapshot_cache_max, "20G");
	CHECK_INT_EQ(guest_image_home(out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/env/voidbox-home");

	/* later changes to the environment reach nothing until the next apply */
	unsetenv(GUEST_IMAGE_ENV_HOME);
	CHECK_INT_EQ(guest_image_home(out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/env/voidbox-home");
	CHECK_INT_EQ(host_env_apply(), 0);
	CHECK_INT_EQ(guest_image_home(out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "/env/user/.void-box");
}

static void test_log_level(void)
{
	log_set_level(LOG_LEVEL_WARN);
	setenv(LOG_LEVEL_ENV, "debug", 1);
	CHECK_INT_EQ(host_env_apply(), 0);
	CHECK_INT_EQ(log_get_level(), LOG_LEVEL_DEBUG);
	setenv(LOG_LEVEL_ENV, "nonsense", 1);
	CHECK_INT_EQ(host_env_apply(), 0);
	CHECK_INT_EQ(log_get_level(), LOG_LEVEL_DEBUG);
	log_set_level(LOG_LEVEL_WARN);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_variables_reach_the_store);
	RUN_TEST(test_log_level);
	return harness_finish();
}
