/*
 * Small file-system path helpers several host modules need the same way: creating a
 * directory with its parents, and checking that a name taken from outside (an image name, a
 * run id from an HTTP path) can be one path component and nothing more.
 */
#ifndef VOIDBOX_COMMON_PATH_H
#define VOIDBOX_COMMON_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* mkdir -p: creates path and its missing parents with mode. 0 or a negative errno. */
int path_mkdirs(const char *path, mode_t mode);

/*
 * True when name is 1 to max characters of A-Z a-z 0-9 . _ - and does not start with '.':
 * one path component that is neither "." nor ".." nor hidden. NULL is not valid.
 */
bool path_name_valid(const char *name, size_t max);

#endif
