/*
 * The environment is assembled as a small key=value vector: the agent's own environment, then
 * the sandbox defaults, then the request's variables, each replacing an earlier key. The
 * child's PATH is the request's business (it decides what the child itself runs later); the
 * program the agent execs is looked up through a fixed path instead. The child
 * side is strictly async-signal-safe (no malloc, no stdio) because the agent is multithreaded.
 *
 * An exec's child is started with clone(CLONE_VM | CLONE_VFORK) on a stack of its own: it
 * shares the agent's memory until execve, so nothing of the agent's page tables is copied
 * or faulted back copy-on-write (most of an exec's cost in an emulated guest). Sharing
 * memory makes the child stricter still: it writes nothing but its own stack and errno, and
 * it changes its credentials with raw system calls, because libc's setuid/setgid/setgroups
 * broadcast the change to every thread of the process they believe they run in: they lock,
 * mark and signal the agent's own thread list, which a child sharing that memory must not
 * touch. The parent blocks every signal around the clone, so no agent signal handler
 * can run on the child's stack before the child resets the dispositions.
 */
#include "spawn.h"

#include "conn.h"
#include "reaper.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPAWN_EXIT_FAILURE 127
#define SPAWN_ENV_INITIAL_CAPACITY 32
/*
 * The cloned child's stack: it runs spawn_child_exec only (a few frames of syscalls), but a
 * sanitized build's frames are several times larger; pages are touched only as used.
 */
#define SPAWN_CHILD_STACK_SIZE (256 * 1024)
#define SPAWN_PTY_TERM "xterm-256color"
#define SPAWN_PTY_PATH_PREFIX AGENT_SANDBOX_HOME "/.local/bin:/usr/local/bin"
#define SPAWN_REQUIRED_PATH_DIR "/usr/local/bin"
/* Where a program name is looked up; fixed, so a request's PATH cannot redirect the lookup. */
#define SPAWN_EXEC_LOOKUP_PATH AGENT_DEFAULT_PATH
#define SPAWN_PTY_LOOKUP_PATH SPAWN_PTY_PATH_PREFIX ":" AGENT_DEFAULT_PATH

extern char **environ;

static const char *const spawn_stage_names[] = {
	[SPAWN_STAGE_CHDIR] = "chdir",
	[SPAWN_STAGE_RLIMIT] = "setrlimit",
	[SPAWN_STAGE_CREDENTIALS] = "dropping to uid 1000",
	[SPAWN_STAGE_NO_NEW_PRIVS] = "setting no_new_privs",
	[SPAWN_STAGE_EXEC] = "exec",
	[SPAWN_STAGE_STDIO] = "stdio setup",
};

struct env_vector {
	char **items;
	size_t count;
	size_t capacity;
};

static int env_set(struct env_vector *env, const char *key, size_t key_len, const char *value)
{
	char *entry;

	if (asprintf(&entry, "%.*s=%s", (int)key_len, key, value) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < env->count; i++) {
		if (strncmp(env->items[i], key, key_len) == 0 && env->items[i][key_len] == '=') {
			free(env->items[i]);
			env->items[i] = entry;
			return 0;
		}
	}
	if (env->count + 1 >= env->capacity) {
		size_t capacity = env->capacity ? 2 * env->capacity : SPAWN_ENV_INITIAL_CAPACITY;
		char **items = realloc(env->items, capacity * sizeof(*items));

		if (!items) {
			free(entry);
			return -ENOMEM;
		}
		env->items = items;
		env->capacity = capacity;
	}
	env->items[env->count++] = entry;
	env->items[env->count] = NULL;
	return 0;
}

static const char *env_get(const struct env_vector *env, const char *key)
{
	size_t len = strlen(key);

	for (size_t i = 0; i < env->count; i++)
		if (strncmp(env->items[i], key, len) == 0 && env->items[i][len] == '=')
			return env->items[i] + len + 1;
	return NULL;
}

static void env_free(struct env_vector *env)
{
	for (size_t i = 0; i < env->count; i++)
		free(env->items[i]);
	free(env->items);
	memset(env, 0, sizeof(*env));
}

static bool path_has_dir(const char *path, const char *dir)
{
	size_t len = strlen(dir);
	const char *p = path;

	while (p && *p) {
		const char *end = strchrnul(p, ':');

		if ((size_t)(end - p) == len && strncmp(p, dir, len) == 0)
			return true;
		p = *end ? end + 1 : NULL;
	}
	return false;
}

static int env_build_path(struct env_vector *env, enum spawn_kind kind)
{
	const char *path = env_get(env, "PATH");
	char *value;
	int err;

	if (!path)
		path = AGENT_DEFAULT_PATH;
	if (kind == SPAWN_KIND_PTY)
		err = asprintf(&value, "%s:%s", SPAWN_PTY_PATH_PREFIX, path);
	else if (!path_has_dir(path, SPAWN_REQUIRED_PATH_DIR))
		err = asprintf(&value, "%s:%s", SPAWN_REQUIRED_PATH_DIR, path);
	else
		err = asprintf(&value, "%s", path);
	if (err < 0)
		return -ENOMEM;
	err = env_set(env, "PATH", strlen("PATH"), value);
	free(value);
	return err;
}

static int env_build(struct env_vector *env, const struct spawn_request *request)
{
	int err = 0;

	for (char **e = environ; *e && !err; e++) {
		const char *eq = strchr(*e, '=');

		if (eq)
			err = env_set(env, *e, (size_t)(eq - *e), eq + 1);
	}
	if (!err)
		err = env_build_path(env, request->kind);
	if (!err)
		err = env_set(env, "HOME", strlen("HOME"), AGENT_SANDBOX_HOME);
	if (!err && request->kind == SPAWN_KIND_PTY)
		err = env_set(env, "TERM", strlen("TERM"), SPAWN_PTY_TERM);
	for (size_t i = 0; i < request->env_count && !err; i++) {
		const char *key = request->env[i].key;

		if (!key || !*key || strchr(key, '='))
			continue;
		err = env_set(env, key, strlen(key), request->env[i].value ? request->env[i].value : "");
	}
	return err;
}

static bool path_is_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/*
 * Looks program up the way the agent will exec it: a name without '/' through the fixed
 * lookup_path, a path as given (relative ones from working_dir, where the child starts).
 * *resolved (heap) is the canonical path policy_store_check decides on and execve runs, so
 * nothing can change between the decision and the exec but root-owned directories.
 */
static int spawn_resolve(const char *program, const char *lookup_path, const char *working_dir,
			 char **resolved)
{
	char canonical[PATH_MAX];
	const char *p = lookup_path;
	int err;

	if (strchr(program, '/')) {
		err = policy_canonical_path(program, working_dir, canonical, sizeof(canonical));
		if (err)
			return err;
		*resolved = strdup(canonical);
		return *resolved ? 0 : -ENOMEM;
	}
	while (p && *p) {
		const char *end = strchrnul(p, ':');
		char *candidate;

		if (asprintf(&candidate, "%.*s/%s", (int)(end - p), p, program) < 0)
			return -ENOMEM;
		if (end > p && path_is_executable(candidate) &&
		    policy_canonical_path(candidate, NULL, canonical, sizeof(canonical)) == 0) {
			free(candidate);
			*resolved = strdup(canonical);
			return *resolved ? 0 : -ENOMEM;
		}
		free(candidate);
		p = *end ? end + 1 : NULL;
	}
	return -ENOENT;
}

static int spawn_build_argv(struct spawn_plan *plan, const struct spawn_request *request)
{
	plan->argv = calloc(request->args_count + 2, sizeof(*plan->argv));
	if (!plan->argv)
		return -ENOMEM;
	plan->argv[0] = strdup(request->program);
	if (!plan->argv[0])
		return -ENOMEM;
	for (size_t i = 0; i < request->args_count; i++) {
		plan->argv[i + 1] = strdup(request->args[i] ? request->args[i] : "");
		if (!plan->argv[i + 1])
			return -ENOMEM;
	}
	return 0;
}

int spawn_plan_build(struct spawn_plan *plan, const struct spawn_request *request,
		     bool drop_privileges, char **error)
{
	const char *lookup_path = request->kind == SPAWN_KIND_PTY ? SPAWN_PTY_LOOKUP_PATH :
								    SPAWN_EXEC_LOOKUP_PATH;
	struct env_vector env = { 0 };
	int err;

	memset(plan, 0, sizeof(*plan));
	*error = NULL;
	plan->kind = request->kind;
	policy_limits_default(&plan->limits);
	plan->apply_fsize_limit = !(request->kind == SPAWN_KIND_PTY && request->interactive);
	plan->drop_privileges = drop_privileges;
	plan->stdio[0] = plan->stdio[1] = plan->stdio[2] = -1;
	if (!request->program || !*request->program) {
		if (asprintf(error, "Failed to spawn: the program name is empty") < 0)
			*error = NULL;
		return -EINVAL;
	}
	err = env_build(&env, request);
	if (!err)
		err = spawn_build_argv(plan, request);
	if (!err && request->working_dir && *request->working_dir) {
		plan->working_dir = strdup(request->working_dir);
		if (!plan->working_dir)
			err = -ENOMEM;
	}
	if (!err) {
		err = spawn_resolve(request->program, lookup_path, request->working_dir,
				    &plan->path);
		if (err == -ENOENT && asprintf(error, "Failed to spawn '%s': not found in %s",
					       request->program, strchr(request->program, '/') ?
					       "the filesystem" : lookup_path) < 0)
			*error = NULL;
	}
	plan->envp = env.items;
	if (err) {
		if (!*error && asprintf(error, "Failed to spawn '%s': %s", request->program,
					strerror(-err)) < 0)
			*error = NULL;
		spawn_plan_free(plan);
	}
	return err;
}

void spawn_plan_free(struct spawn_plan *plan)
{
	struct env_vector env = { .items = plan->envp };

	if (plan->argv)
		for (char **a = plan->argv; *a; a++)
			free(*a);
	free(plan->argv);
	while (env.items && env.items[env.count])
		env.count++;
	env_free(&env);
	free(plan->path);
	free(plan->working_dir);
	memset(plan, 0, sizeof(*plan));
}

static void __attribute__((noreturn)) spawn_child_fail(int report_fd, enum spawn_stage stage)
{
	struct spawn_failure failure = { .stage = stage, .err = errno };
	ssize_t rc = write(report_fd, &failure, sizeof(failure));

	(void)rc;
	_exit(SPAWN_EXIT_FAILURE);
}

/*
 * Sets soft and hard limit to value. Without privilege to raise the hard limit (the agent is
 * not root, as in host tests) the value is clamped to the current hard limit instead.
 */
static int spawn_set_limit(int resource, uint64_t value)
{
	struct rlimit limit = { .rlim_cur = value, .rlim_max = value };

	if (setrlimit(resource, &limit) == 0)
		return 0;
	if (errno != EPERM || getrlimit(resource, &limit) < 0)
		return -1;
	if (limit.rlim_max != RLIM_INFINITY && value > limit.rlim_max)
		value = limit.rlim_max;
	limit.rlim_cur = value;
	return setrlimit(resource, &limit);
}

/*
 * Empties the capability bounding set, so nothing the child execs can regain a capability
 * (file capabilities, or a setuid-root binary should no_new_privs ever be lifted). Needs
 * CAP_SETPCAP, which only a root agent has; the loop ends at the first number the kernel does
 * not know (EINVAL), so it needs no cap_last_cap read in the async-signal-safe child.
 */
static int spawn_drop_bounding_set(void)
{
	for (int cap = 0;; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		return errno == EINVAL && cap > 0 ? 0 : -1;
	}
}

void spawn_child_exec(const struct spawn_plan *plan, int report_fd)
{
	static const gid_t sandbox_groups[] = { AGENT_SANDBOX_GID };

	reaper_child_reset_signals();
	if (plan->kind == SPAWN_KIND_EXEC) {
		if (setpgid(0, 0) < 0)
			spawn_child_fail(report_fd, SPAWN_STAGE_STDIO);
		for (int fd = 0; fd < SPAWN_STDIO_COUNT; fd++)
			if (dup2(plan->stdio[fd], fd) < 0)
				spawn_child_fail(report_fd, SPAWN_STAGE_STDIO);
	}
	if (spawn_set_limit(RLIMIT_NOFILE, plan->limits.max_open_files) < 0 ||
	    spawn_set_limit(RLIMIT_NPROC, plan->limits.max_processes) < 0 ||
	    (plan->apply_fsize_limit &&
	     spawn_set_limit(RLIMIT_FSIZE, plan->limits.max_file_size) < 0))
		spawn_child_fail(report_fd, SPAWN_STAGE_RLIMIT);
	/* Raw calls: the libc wrappers would walk the agent's thread list, shared with us. */
	if (plan->drop_privileges &&
	    (spawn_drop_bounding_set() < 0 ||
	     syscall(SYS_setgroups, 1, sandbox_groups) < 0 ||
	     syscall(SYS_setgid, AGENT_SANDBOX_GID) < 0 ||
	     syscall(SYS_setuid, AGENT_SANDBOX_UID) < 0))
		spawn_child_fail(report_fd, SPAWN_STAGE_CREDENTIALS);
	/* A setuid binary or file capabilities would otherwise undo the uid drop at exec. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		spawn_child_fail(report_fd, SPAWN_STAGE_NO_NEW_PRIVS);
	/* After the drop, so the sandbox user's own permissions decide where it may start. */
	if (plan->working_dir && chdir(plan->working_dir) < 0)
		spawn_child_fail(report_fd, SPAWN_STAGE_CHDIR);
	execve(plan->path, plan->argv, plan->envp);
	spawn_child_fail(report_fd, SPAWN_STAGE_EXEC);
}

struct spawn_clone_args {
	const struct spawn_plan *plan;
	int report_fd;
};

static int spawn_clone_main(void *arg)
{
	const struct spawn_clone_args *args = arg;

	spawn_child_exec(args->plan, args->report_fd);
}

pid_t spawn_clone_exec(const struct spawn_plan *plan, int report_fd)
{
	struct spawn_clone_args args = { .plan = plan, .report_fd = report_fd };
	sigset_t all, saved;
	void *stack;
	pid_t pid;
	int saved_errno;

	stack = mmap(NULL, SPAWN_CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -1;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	/* Returns once the child has exec'd or exited: its stack is free again then. */
	pid = clone(spawn_clone_main, (char *)stack + SPAWN_CHILD_STACK_SIZE,
		    CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
	saved_errno = errno;
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	munmap(stack, SPAWN_CHILD_STACK_SIZE);
	errno = saved_errno;
	return pid;
}

char *spawn_failure_message(const char *program, const struct spawn_failure *failure)
{
	const char *stage = "start";
	char *message;

	if (failure->stage > 0 &&
	    (size_t)failure->stage < sizeof(spawn_stage_names) / sizeof(spawn_stage_names[0]))
		stage = spawn_stage_names[failure->stage];
	if (asprintf(&message, "Failed to spawn '%s': %s: %s", program, stage,
		     strerror(failure->err)) < 0)
		return NULL;
	return message;
}

bool spawn_read_failure(int report_fd, struct spawn_failure *failure)
{
	ssize_t n;

	do {
		n = read(report_fd, failure, sizeof(*failure));
	} while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(*failure);
}
