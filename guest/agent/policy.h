/*
 * Exec policy: the command allowlist and the child resource limits. The host sends them with
 * one SetPolicy request right after the handshake (docs/protocol.md §8) and the agent keeps
 * them in memory only, so nothing the sandbox user can write (no file, no directory) can
 * change them. Until a policy arrives nothing runs: the built-in default refuses every
 * command, and "allow every command" exists only as the host's explicit choice.
 *
 * Commands are matched on the path the agent will exec, never on the name a request used:
 * spawn resolves the program through a fixed PATH (the request's env has no say) and
 * policy_canonical_path turns the result into a canonical directory plus the file name. A
 * bare allowlist entry ("sh") matches that name only in one of the trusted system directories
 * (root-owned, writable by nobody else); an absolute entry matches its own canonical path.
 * The file name itself is not resolved, so a multi-call binary (busybox) that dispatches on
 * its name is matched by the name it is run as.
 */
#ifndef VOIDBOX_AGENT_POLICY_H
#define VOIDBOX_AGENT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_DEFAULT_MAX_OPEN_FILES 1024u
#define POLICY_DEFAULT_MAX_PROCESSES 512u
#define POLICY_DEFAULT_MAX_FILE_SIZE (100u * 1024u * 1024u)

struct policy_limits {
	uint64_t max_open_files;
	uint64_t max_processes;
	uint64_t max_file_size;
};

/* Which commands run: a closed set, so "empty list" never silently means "everything". */
enum policy_commands {
	POLICY_COMMANDS_NONE,    /* no policy yet: nothing runs */
	POLICY_COMMANDS_LISTED,  /* only the listed names and paths */
	POLICY_COMMANDS_ANY,     /* the host said so explicitly */
};

struct policy_allowlist {
	enum policy_commands mode;
	char **names;
	size_t count;
};

void policy_limits_default(struct policy_limits *out);

/*
 * Builds an allowlist from the host's SetPolicy fields. Entries must be non-empty and either
 * a bare name (no '/') or an absolute path; anything else is -EINVAL with *why set.
 */
int policy_allowlist_build(struct policy_allowlist *out, bool allow_all, char *const *names,
			   size_t count, const char **why);
void policy_allowlist_free(struct policy_allowlist *list);

/*
 * realpath() of path's directory joined with its last component, into out. A relative path
 * is taken relative to base_dir (NULL: the current directory). -ENOENT when the directory
 * does not exist, -EINVAL when the last component is empty, "." or "..".
 */
int policy_canonical_path(const char *path, const char *base_dir, char *out, size_t size);

/* True when the allowlist lets the program at canonical path resolved run. */
bool policy_allowlist_permits(const struct policy_allowlist *list, const char *resolved);

struct policy_store;

/* A store with no policy yet: every check is refused, limits are the defaults. */
struct policy_store *policy_store_new(void);
void policy_store_free(struct policy_store *store);

/*
 * Installs the session's policy, taking ownership of *list (emptied on return either way).
 * Accepted once per session: -EBUSY when a policy is set already and policy_store_reopen was
 * not called since, -EINVAL when a limit is zero. *why says what was wrong.
 */
int policy_store_set(struct policy_store *store, struct policy_allowlist *list,
		     const struct policy_limits *limits, const char **why);
/*
 * A rekey starts a new session: the policy in force stays, and the host may send the new
 * session's SetPolicy once.
 */
void policy_store_reopen(struct policy_store *store);

/*
 * Decides for the program at canonical path resolved (from policy_canonical_path) and fills
 * *limits. Returns 0 when allowed, -EACCES when refused.
 */
int policy_store_check(struct policy_store *store, const char *resolved,
		       struct policy_limits *limits);

#endif
