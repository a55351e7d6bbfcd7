/*
 * One mutex guards the policy in memory. The store starts refusing everything and becomes
 * usable only through policy_store_set, which the SetPolicy handler calls; a second set in the
 * same session is refused, so a connection that somehow learned the secret later cannot
 * widen what the host decided at boot. Trusted directories are re-checked (canonical path,
 * root owner, no group or other write bit) on every match rather than cached: the check is a
 * few stats, and it then holds for the filesystem as it is when the command runs.
 */
#include "policy.h"

#include "agent_log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define POLICY_ROOT_UID 0

/* Where a bare allowlist entry may be found: the system's own binaries, owned by root. */
static const char *const policy_trusted_dirs[] = {
	"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
};

struct policy_store {
	pthread_mutex_t lock;
	bool accepting;              /* this session's SetPolicy has not arrived yet */
	struct policy_allowlist allowlist;
	struct policy_limits limits;
};

void policy_limits_default(struct policy_limits *out)
{
	out->max_open_files = POLICY_DEFAULT_MAX_OPEN_FILES;
	out->max_processes = POLICY_DEFAULT_MAX_PROCESSES;
	out->max_file_size = POLICY_DEFAULT_MAX_FILE_SIZE;
}

void policy_allowlist_free(struct policy_allowlist *list)
{
	for (size_t i = 0; i < list->count; i++)
		free(list->names[i]);
	free(list->names);
	memset(list, 0, sizeof(*list));
}

static bool policy_entry_is_valid(const char *name)
{
	return name && *name && (name[0] == '/' || !strchr(name, '/'));
}

int policy_allowlist_build(struct policy_allowlist *out, bool allow_all, char *const *names,
			   size_t count, const char **why)
{
	memset(out, 0, sizeof(*out));
	out->mode = allow_all ? POLICY_COMMANDS_ANY : POLICY_COMMANDS_LISTED;
	if (count == 0)
		return 0;
	out->names = calloc(count, sizeof(*out->names));
	if (!out->names)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		if (!policy_entry_is_valid(names[i])) {
			*why = "an allowlist entry must be a bare command name or an absolute path";
			policy_allowlist_free(out);
			return -EINVAL;
		}
		out->names[i] = strdup(names[i]);
		if (!out->names[i]) {
			policy_allowlist_free(out);
			return -ENOMEM;
		}
		out->count++;
	}
	return 0;
}

int policy_canonical_path(const char *path, const char *base_dir, char *out, size_t size)
{
	char joined[PATH_MAX], dir[PATH_MAX];
	const char *slash, *leaf;
	size_t dir_len;

	if (path[0] != '/' && base_dir && *base_dir) {
		if (snprintf(joined, sizeof(joined), "%s/%s", base_dir, path) >= (int)sizeof(joined))
			return -ENAMETOOLONG;
		path = joined;
	}
	slash = strrchr(path, '/');
	leaf = slash ? slash + 1 : path;
	if (!*leaf || strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0)
		return -EINVAL;
	if (!slash) {
		dir_len = 1;
		memcpy(joined, ".", 2);
	} else {
		dir_len = slash == path ? 1 : (size_t)(slash - path);
		if (dir_len >= sizeof(joined))
			return -ENAMETOOLONG;
		memmove(joined, path, dir_len);
		joined[dir_len] = '\0';
	}
	if (!realpath(joined, dir))
		return -errno;
	if (snprintf(out, size, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, leaf) >= (int)size)
		return -ENAMETOOLONG;
	return 0;
}

/* dir (canonical) is one of the trusted directories and nobody but root can change it. */
static bool policy_dir_is_trusted(const char *dir)
{
	char canonical[PATH_MAX];
	struct stat st;
	bool listed = false;

	for (size_t i = 0; i < sizeof(policy_trusted_dirs) / sizeof(policy_trusted_dirs[0]) &&
			   !listed; i++)
		listed = realpath(policy_trusted_dirs[i], canonical) &&
			 strcmp(canonical, dir) == 0;
	return listed && stat(dir, &st) == 0 && st.st_uid == POLICY_ROOT_UID &&
	       !(st.st_mode & (S_IWGRP | S_IWOTH));
}

static bool policy_entry_matches(const char *entry, const char *resolved)
{
	char canonical[PATH_MAX];
	const char *slash = strrchr(resolved, '/');
	size_t dir_len;

	if (entry[0] == '/')
		return policy_canonical_path(entry, NULL, canonical, sizeof(canonical)) == 0 &&
		       strcmp(canonical, resolved) == 0;
	if (!slash || strcmp(slash + 1, entry) != 0)
		return false;
	dir_len = slash == resolved ? 1 : (size_t)(slash - resolved);
	if (dir_len >= sizeof(canonical))
		return false;
	memcpy(canonical, resolved, dir_len);
	canonical[dir_len] = '\0';
	return policy_dir_is_trusted(canonical);
}

bool policy_allowlist_permits(const struct policy_allowlist *list, const char *resolved)
{
	if (list->mode == POLICY_COMMANDS_ANY)
		return true;
	if (list->mode != POLICY_COMMANDS_LISTED || !resolved || resolved[0] != '/')
		return false;
	for (size_t i = 0; i < list->count; i++)
		if (policy_entry_matches(list->names[i], resolved))
			return true;
	return false;
}

struct policy_store *policy_store_new(void)
{
	struct policy_store *store = calloc(1, sizeof(*store));

	if (!store)
		return NULL;
	pthread_mutex_init(&store->lock, NULL);
	store->accepting = true;
	store->allowlist.mode = POLICY_COMMANDS_NONE;
	policy_limits_default(&store->limits);
	return store;
}

void policy_store_free(struct policy_store *store)
{
	if (!store)
		return;
	policy_allowlist_free(&store->allowlist);
	pthread_mutex_destroy(&store->lock);
	free(store);
}

int policy_store_set(struct policy_store *store, struct policy_allowlist *list,
		     const struct policy_limits *limits, const char **why)
{
	enum policy_commands mode = list->mode;
	int err = 0;

	if (!limits->max_open_files || !limits->max_processes || !limits->max_file_size) {
		*why = "every resource limit must be a positive integer";
		policy_allowlist_free(list);
		return -EINVAL;
	}
	pthread_mutex_lock(&store->lock);
	if (!store->accepting) {
		*why = "the session's policy is set already; it cannot be changed from inside the "
		       "session";
		err = -EBUSY;
	} else {
		policy_allowlist_free(&store->allowlist);
		store->allowlist = *list;
		memset(list, 0, sizeof(*list));
		store->limits = *limits;
		store->accepting = false;
	}
	pthread_mutex_unlock(&store->lock);
	if (err) {
		policy_allowlist_free(list);
		return err;
	}
	agent_info("policy set: %s, limits nofile %llu nproc %llu fsize %llu",
		   mode == POLICY_COMMANDS_ANY ? "every command allowed" : "allowlist only",
		   (unsigned long long)limits->max_open_files,
		   (unsigned long long)limits->max_processes,
		   (unsigned long long)limits->max_file_size);
	return 0;
}

void policy_store_reopen(struct policy_store *store)
{
	pthread_mutex_lock(&store->lock);
	store->accepting = true;
	pthread_mutex_unlock(&store->lock);
}

int policy_store_check(struct policy_store *store, const char *resolved,
		       struct policy_limits *limits)
{
	int verdict;

	pthread_mutex_lock(&store->lock);
	verdict = policy_allowlist_permits(&store->allowlist, resolved) ? 0 : -EACCES;
	if (verdict && store->allowlist.mode == POLICY_COMMANDS_NONE)
		agent_warn("refusing '%s': the host has not sent the session's policy yet",
			   resolved ? resolved : "?");
	*limits = store->limits;
	pthread_mutex_unlock(&store->lock);
	return verdict;
}
