/* The stores' copy of what the entry point read from the environment (see store_settings.h). */
#include "store/store_settings.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static struct store_settings store_current;

/* A copy of value for the settings: NULL for unset (NULL or ""); false when out of memory. */
static bool store_settings_copy(const char *value, const char **out)
{
	*out = NULL;
	if (!value || !*value)
		return true;
	*out = strdup(value);
	return *out != NULL;
}

static void store_settings_free(struct store_settings *settings)
{
	free((char *)settings->voidbox_home);
	free((char *)settings->user_home);
	free((char *)settings->kernel);
	free((char *)settings->initramfs);
	free((char *)settings->snapshot_cache_max);
	memset(settings, 0, sizeof(*settings));
}

int store_settings_set(const struct store_settings *settings)
{
	static const struct store_settings unset;
	struct store_settings copy;
	bool ok;

	if (!settings)
		settings = &unset;
	ok = store_settings_copy(settings->voidbox_home, &copy.voidbox_home);
	ok = store_settings_copy(settings->user_home, &copy.user_home) && ok;
	ok = store_settings_copy(settings->kernel, &copy.kernel) && ok;
	ok = store_settings_copy(settings->initramfs, &copy.initramfs) && ok;
	ok = store_settings_copy(settings->snapshot_cache_max, &copy.snapshot_cache_max) && ok;
	if (!ok) {
		store_settings_free(&copy);
		return -ENOMEM;
	}
	store_settings_free(&store_current);
	store_current = copy;
	return 0;
}

const struct store_settings *store_settings_get(void)
{
	return &store_current;
}
