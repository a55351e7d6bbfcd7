/*
 * What the host's environment tells the stores: where voidbox keeps its images, snapshots and
 * kernel cache, which kernel and initramfs a run takes when no flag names one, and the
 * snapshot cache's size cap. A program's entry point reads the variables once (the CLI's env
 * layer, src/cli/host_env.c) and hands them here; nothing in src/store reads the environment,
 * so a test sets these with store_settings_set instead of setenv.
 */
#ifndef VOIDBOX_STORE_STORE_SETTINGS_H
#define VOIDBOX_STORE_STORE_SETTINGS_H

/* Every field is optional: NULL and "" both mean unset. */
struct store_settings {
	const char *voidbox_home;	/* $VOIDBOX_HOME; unset: user_home/.void-box */
	const char *user_home;		/* $HOME */
	const char *kernel;		/* $VOID_BOX_KERNEL: beats the built image, not a flag */
	const char *initramfs;		/* $VOID_BOX_INITRAMFS: likewise */
	const char *snapshot_cache_max; /* $VOIDBOX_SNAPSHOT_CACHE_MAX as written ("20G") */
};

/*
 * Copies settings (NULL: all unset) over what an earlier call set; call it before using the
 * stores, from one thread. 0, or -ENOMEM with the earlier settings kept.
 */
int store_settings_set(const struct store_settings *settings);
/* The settings in force: all unset until store_settings_set. Never NULL. */
const struct store_settings *store_settings_get(void);

#endif
