/*
 * Path helpers (see path.h). path_mkdirs works on a PATH_MAX copy so the caller's string is
 * never written; an existing directory anywhere along the path is not an error.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#include "common/path.h"

int path_mkdirs(const char *path, mode_t mode)
{
	char partial[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(partial))
		return -ENAMETOOLONG;
	memcpy(partial, path, len + 1);
	for (char *p = partial + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(partial, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(partial, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

bool path_name_valid(const char *name, size_t max)
{
	size_t len = name ? strnlen(name, max + 1) : 0;

	if (len == 0 || len > max || name[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}
