/*
 * Exec policy: the command allowlist and the child resource limits, read from
 * <dir>/allowed_commands.json and <dir>/resource_limits.json. The host writes these files after
 * boot, so the cache re-reads a file whenever its identity, size or mtime changes and every exec
 * or PTY open sees the current policy. Parsing is separate from the cache so tests feed strings.
 */
#ifndef VOIDBOX_AGENT_POLICY_H
#define VOIDBOX_AGENT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_ALLOWLIST_FILE "allowed_commands.json"
#define POLICY_LIMITS_FILE "resource_limits.json"
#define POLICY_DEFAULT_MAX_OPEN_FILES 1024u
#define POLICY_DEFAULT_MAX_PROCESSES 512u
#define POLICY_DEFAULT_MAX_FILE_SIZE (100u * 1024u * 1024u)

struct policy_limits {
	uint64_t max_open_files;
	uint64_t max_processes;
	uint64_t max_file_size;
};

/* count == 0 and !deny_all means "allow everything" (absent or empty list). */
struct policy_allowlist {
	char **names;
	size_t count;
	bool deny_all; /* the file exists but is unreadable or malformed: fail closed */
};

void policy_limits_default(struct policy_limits *out);

/*
 * Parses {"max_open_files":N,"max_processes":N,"max_file_size":N}; missing keys keep the
 * defaults, other keys are ignored. Returns 0, or -EINVAL (out holds the defaults) when the
 * text is not a JSON object or a known key is not a positive integer.
 */
int policy_parse_limits(const char *json, size_t len, struct policy_limits *out);

/* Parses a JSON array of basenames. Returns 0 or -EINVAL (out is then empty). */
int policy_parse_allowlist(const char *json, size_t len, struct policy_allowlist *out);
void policy_allowlist_free(struct policy_allowlist *list);
/* True when the basename of program is listed, or the list allows everything. */
bool policy_allowlist_permits(const struct policy_allowlist *list, const char *program);

struct policy_cache;

/* dir is where the two policy files live (normally /etc/voidbox). */
struct policy_cache *policy_cache_new(const char *dir);
void policy_cache_free(struct policy_cache *cache);

/*
 * Refreshes the cache from disk if a file changed, then decides for program. Fills *limits with
 * the limits to apply. Returns 0 when allowed, -EACCES when the allowlist refuses it.
 */
int policy_cache_check(struct policy_cache *cache, const char *program,
		       struct policy_limits *limits);

#endif
