/* Directory removal, no-replace renames and the error and path helpers of the stores (see store_fs.h). */
#include "store/store_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#define STORE_REMOVE_FD_LIMIT 32

void store_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int store_join(char *out, size_t out_len, const char *dir, const char *name)
{
	int n = snprintf(out, out_len, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

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
