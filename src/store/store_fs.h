/*
 * Filesystem steps the guest-image and snapshot stores both take to publish and remove
 * directories. They live here once so both stores behave the same on filesystems that lack
 * renameat2 flags (9p, some network filesystems).
 */
#ifndef VOIDBOX_STORE_FS_H
#define VOIDBOX_STORE_FS_H

/* Removes path and everything below it (symlinks are not followed); 0 also when absent. */
int store_remove_tree(const char *path);
/*
 * Renames the directory from to to unless to exists: 0, -EEXIST when it does, or -errno.
 * Where RENAME_NOREPLACE is unsupported (EINVAL) a plain rename does the same for the stores,
 * because rename(2) replaces only an empty directory and a published one never is: its
 * populated directory makes the rename fail, which is reported as -EEXIST.
 */
int store_rename_noreplace(const char *from, const char *to);

#endif
