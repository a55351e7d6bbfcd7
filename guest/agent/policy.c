/*
 * One mutex guards the cached policy; a check stats both files, re-parses only those whose
 * (dev, inode, size, mtime) stamp changed, and answers from memory. A malformed allowlist fails
 * closed (nothing runs, and the log says why) because an attacker who can corrupt the file must
 * not thereby widen it; malformed limits fall back to the defaults, which are safe.
 */
#include "policy.h"

#include "agent_log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLICY_FILE_MAX (1024 * 1024)

struct policy_file_stamp {
	bool present;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct policy_cache {
	pthread_mutex_t lock;
	char allowlist_path[PATH_MAX];
	char limits_path[PATH_MAX];
	struct policy_file_stamp allowlist_stamp;
	struct policy_file_stamp limits_stamp;
	bool loaded;
	struct policy_allowlist allowlist;
	struct policy_limits limits;
};

void policy_limits_default(struct policy_limits *out)
{
	out->max_open_files = POLICY_DEFAULT_MAX_OPEN_FILES;
	out->max_processes = POLICY_DEFAULT_MAX_PROCESSES;
	out->max_file_size = POLICY_DEFAULT_MAX_FILE_SIZE;
}

static int limits_take(json_t *root, const char *key, uint64_t *out)
{
	json_t *value = json_object_get(root, key);

	if (!value)
		return 0;
	if (!json_is_integer(value) || json_integer_value(value) <= 0)
		return -EINVAL;
	*out = (uint64_t)json_integer_value(value);
	return 0;
}

int policy_parse_limits(const char *json, size_t len, struct policy_limits *out)
{
	struct policy_limits parsed;
	json_t *root;
	int err = -EINVAL;

	policy_limits_default(out);
	policy_limits_default(&parsed);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
	if (!root || !json_is_object(root))
		goto out;
	if (limits_take(root, "max_open_files", &parsed.max_open_files) ||
	    limits_take(root, "max_processes", &parsed.max_processes) ||
	    limits_take(root, "max_file_size", &parsed.max_file_size))
		goto out;
	*out = parsed;
	err = 0;
out:
	json_decref(root);
	return err;
}

void policy_allowlist_free(struct policy_allowlist *list)
{
	for (size_t i = 0; i < list->count; i++)
		free(list->names[i]);
	free(list->names);
	memset(list, 0, sizeof(*list));
}

int policy_parse_allowlist(const char *json, size_t len, struct policy_allowlist *out)
{
	json_t *root, *item;
	size_t index;
	int err = -EINVAL;

	memset(out, 0, sizeof(*out));
	root = json_loadb(json, len, 0, NULL);
	if (!root || !json_is_array(root))
		goto out;
	if (json_array_size(root) == 0) {
		err = 0;
		goto out;
	}
	out->names = calloc(json_array_size(root), sizeof(*out->names));
	if (!out->names) {
		err = -ENOMEM;
		goto out;
	}
	json_array_foreach(root, index, item) {
		if (!json_is_string(item) || json_string_length(item) == 0) {
			policy_allowlist_free(out);
			goto out;
		}
		out->names[out->count] = strdup(json_string_value(item));
		if (!out->names[out->count]) {
			policy_allowlist_free(out);
			err = -ENOMEM;
			goto out;
		}
		out->count++;
	}
	err = 0;
out:
	json_decref(root);
	return err;
}

bool policy_allowlist_permits(const struct policy_allowlist *list, const char *program)
{
	const char *base;

	if (list->deny_all)
		return false;
	if (list->count == 0)
		return true;
	base = strrchr(program, '/');
	base = base ? base + 1 : program;
	for (size_t i = 0; i < list->count; i++)
		if (strcmp(list->names[i], base) == 0)
			return true;
	return false;
}

struct policy_cache *policy_cache_new(const char *dir)
{
	struct policy_cache *cache = calloc(1, sizeof(*cache));

	if (!cache)
		return NULL;
	if (snprintf(cache->allowlist_path, sizeof(cache->allowlist_path), "%s/%s", dir,
		     POLICY_ALLOWLIST_FILE) >= (int)sizeof(cache->allowlist_path) ||
	    snprintf(cache->limits_path, sizeof(cache->limits_path), "%s/%s", dir,
		     POLICY_LIMITS_FILE) >= (int)sizeof(cache->limits_path)) {
		free(cache);
		return NULL;
	}
	pthread_mutex_init(&cache->lock, NULL);
	policy_limits_default(&cache->limits);
	return cache;
}

void policy_cache_free(struct policy_cache *cache)
{
	if (!cache)
		return;
	policy_allowlist_free(&cache->allowlist);
	pthread_mutex_destroy(&cache->lock);
	free(cache);
}

static void policy_stamp_read(const char *path, struct policy_file_stamp *stamp)
{
	struct stat st;

	memset(stamp, 0, sizeof(*stamp));
	if (stat(path, &st) < 0)
		return;
	stamp->present = true;
	stamp->dev = st.st_dev;
	stamp->ino = st.st_ino;
	stamp->size = st.st_size;
	stamp->mtime = st.st_mtim;
}

static bool policy_stamp_equal(const struct policy_file_stamp *a,
			       const struct policy_file_stamp *b)
{
	if (a->present != b->present)
		return false;
	if (!a->present)
		return true;
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static int policy_read_file(const char *path, char **text, size_t *len)
{
	char *buf;
	size_t used = 0;
	int fd, err = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	buf = malloc(POLICY_FILE_MAX);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t n = read(fd, buf + used, POLICY_FILE_MAX - used);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			break;
		}
		if (n == 0)
			break;
		used += (size_t)n;
		if (used == POLICY_FILE_MAX) {
			err = -EFBIG;
			break;
		}
	}
	close(fd);
	if (err) {
		free(buf);
		return err;
	}
	*text = buf;
	*len = used;
	return 0;
}

static void policy_reload_allowlist(struct policy_cache *cache)
{
	char *text;
	size_t len;
	int err;

	policy_allowlist_free(&cache->allowlist);
	if (!cache->allowlist_stamp.present) {
		agent_info("no %s: every command is allowed", cache->allowlist_path);
		return;
	}
	err = policy_read_file(cache->allowlist_path, &text, &len);
	if (!err) {
		err = policy_parse_allowlist(text, len, &cache->allowlist);
		free(text);
	}
	if (err) {
		cache->allowlist.deny_all = true;
		agent_error("%s is unreadable or not a JSON array of strings (%s): refusing every "
			    "command until it is fixed", cache->allowlist_path, strerror(-err));
		return;
	}
	agent_info("allowlist %s: %zu command(s)%s", cache->allowlist_path,
		   cache->allowlist.count, cache->allowlist.count ? "" : " (allow all)");
}

static void policy_reload_limits(struct policy_cache *cache)
{
	char *text;
	size_t len;
	int err;

	policy_limits_default(&cache->limits);
	if (!cache->limits_stamp.present)
		return;
	err = policy_read_file(cache->limits_path, &text, &len);
	if (!err) {
		err = policy_parse_limits(text, len, &cache->limits);
		free(text);
	}
	if (err)
		agent_warn("%s is unreadable or malformed (%s): using default limits",
			   cache->limits_path, strerror(-err));
}

int policy_cache_check(struct policy_cache *cache, const char *program,
		       struct policy_limits *limits)
{
	struct policy_file_stamp allow_now, limits_now;
	int verdict;

	policy_stamp_read(cache->allowlist_path, &allow_now);
	policy_stamp_read(cache->limits_path, &limits_now);
	pthread_mutex_lock(&cache->lock);
	if (!cache->loaded || !policy_stamp_equal(&allow_now, &cache->allowlist_stamp)) {
		cache->allowlist_stamp = allow_now;
		policy_reload_allowlist(cache);
	}
	if (!cache->loaded || !policy_stamp_equal(&limits_now, &cache->limits_stamp)) {
		cache->limits_stamp = limits_now;
		policy_reload_limits(cache);
	}
	cache->loaded = true;
	verdict = policy_allowlist_permits(&cache->allowlist, program) ? 0 : -EACCES;
	*limits = cache->limits;
	pthread_mutex_unlock(&cache->lock);
	return verdict;
}
