/*
 * How many entries a directory holds, for the tests that check what a step left behind (a
 * runtime directory emptied, a blob cache, an unpacked layer, a share the agent probed) or
 * count a process's fds and threads through /proc/self.
 */
#ifndef VOIDBOX_TESTS_DIR_ENTRIES_H
#define VOIDBOX_TESTS_DIR_ENTRIES_H

#include <dirent.h>
#include <string.h>

/* The entries of dir other than . and ..; -1 when it cannot be read (a missing one too). */
static inline int dir_entry_count(const char *dir)
{
	DIR *handle = opendir(dir);
	struct dirent *entry;
	int count = 0;

	if (!handle)
		return -1;
	while ((entry = readdir(handle)))
		if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0)
			count++;
	closedir(handle);
	return count;
}

#endif
