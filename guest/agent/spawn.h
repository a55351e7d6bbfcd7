/*
 * Building and starting a sandboxed child, shared by exec and PTY sessions so both apply the
 * same rules: the program looked up in the parent through a fixed PATH (never the request's)
 * and canonicalized so the allowlist decides on what execve runs, uid/gid 1000
 * with supplementary groups reset and an empty capability bounding set, no_new_privs (so no
 * setuid binary undoes the drop), rlimits from policy, the working directory, and exec errors
 * reported back through a close-on-exec pipe. Everything that allocates happens before fork.
 */
#ifndef VOIDBOX_AGENT_SPAWN_H
#define VOIDBOX_AGENT_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "policy.h"
#include "proto/protocol.h"

#define SPAWN_STDIO_COUNT 3

enum spawn_kind {
	SPAWN_KIND_EXEC,   /* own process group, pipes on 0/1/2 */
	SPAWN_KIND_PTY,    /* session leader with the pty as controlling terminal (forkpty) */
};

struct spawn_request {
	enum spawn_kind kind;
	const char *program;
	char *const *args;
	size_t args_count;
	const struct proto_env_var *env;
	size_t env_count;
	const char *working_dir;
	bool interactive;            /* PTY only: interactive sessions get no RLIMIT_FSIZE */
};

struct spawn_plan {
	enum spawn_kind kind;
	char *path;
	char **argv;
	char **envp;
	char *working_dir;
	struct policy_limits limits;
	bool apply_fsize_limit;
	bool drop_privileges;
	int stdio[SPAWN_STDIO_COUNT]; /* EXEC: fds to install as 0/1/2 */
};

/* Child failure stages reported through the pipe together with errno. */
enum spawn_stage {
	SPAWN_STAGE_CHDIR = 1,
	SPAWN_STAGE_RLIMIT,
	SPAWN_STAGE_CREDENTIALS,
	SPAWN_STAGE_EXEC,
	SPAWN_STAGE_STDIO,
	SPAWN_STAGE_NO_NEW_PRIVS,
};

struct spawn_failure {
	int stage;
	int err;
};

/*
 * Resolves the program (plan->path: the canonical path to check with policy_store_check and
 * exec) and builds argv/envp; plan->limits are the defaults until the caller sets the
 * policy's. Returns 0, or -errno with *error set to a user-facing message (e.g. the program
 * is not found).
 */
int spawn_plan_build(struct spawn_plan *plan, const struct spawn_request *request,
		     bool drop_privileges, char **error);
void spawn_plan_free(struct spawn_plan *plan);

/*
 * Runs in the child (forked, or cloned by spawn_clone_exec); never returns. report_fd is the
 * close-on-exec error pipe. Touches no memory but its stack and errno, so it is safe in a
 * child that shares the agent's memory.
 */
void spawn_child_exec(const struct spawn_plan *plan, int report_fd) __attribute__((noreturn));
/*
 * Starts spawn_child_exec in a child that shares the agent's memory until it execs
 * (CLONE_VM | CLONE_VFORK): no page tables copied. Returns the child's pid once it has
 * exec'd or failed (the failure is in report_fd), or -1 with errno set.
 */
pid_t spawn_clone_exec(const struct spawn_plan *plan, int report_fd);

/* Formats a child failure for the user ("Failed to spawn 'x': chdir: No such file ..."). */
char *spawn_failure_message(const char *program, const struct spawn_failure *failure);

/* Reads the error pipe after fork (blocks until exec or failure). Returns true on failure. */
bool spawn_read_failure(int report_fd, struct spawn_failure *failure);

#endif
