/* Directory removal and no-replace renames for the stores (see store_fs.h). */
#include "store/store_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#define STORE_REMOVE_FD_LIMIT 32

static int store_remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int store_remove_tree(const char *path)
{
	if (nftw(path, store_remove_one, STORE_REMOVE_FD_LIMIT, FTW_DEPTH | FTW_PHYS) < 0 &&
	    errno != ENOENT)
		return -errno;
	return 0;
}

int store_rename_noreplace(const char *from, const char *to)
{
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	if (rename(from, to) == 0)
		return 0;
	return errno == ENOTEMPTY || errno == EEXIST ? -EEXIST : -errno;
}
