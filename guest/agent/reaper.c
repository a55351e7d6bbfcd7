/*
 * SIGCHLD is consumed synchronously with sigwaitinfo in a dedicated thread rather than in a
 * handler, so dispatch can take a mutex and signal condition variables. Registered children are
 * kept in a small linked list (there are only as many as running execs and PTYs).
 */
#include "reaper.h"

#include "agent_log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REAPER_MS_PER_SEC 1000
#define REAPER_NS_PER_MS 1000000L
#define REAPER_NS_PER_SEC 1000000000L

struct reaper_child {
	pid_t pid;
	bool exited;
	bool registered;
	int status;
	int event_fd;
	struct reaper_child *next;
};

static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_cond = PTHREAD_COND_INITIALIZER;
static struct reaper_child *reaper_children;
static atomic_ulong reaper_orphan_count;

static void reaper_sigchld_noop(int signo)
{
	(void)signo;
}

void reaper_block_signals(void)
{
	struct sigaction sa;
	sigset_t set;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = reaper_sigchld_noop;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/*
 * A command starts with every signal at its default action and none blocked: whatever the
 * agent ignores or blocks for itself (SIGPIPE, SIGCHLD), and whatever its own parent left
 * ignored (nohup's SIGHUP when the agent runs on a host), must not leak into sandboxed
 * programs, or `yes | head` never ends and a hung-up PTY session ignores SIGHUP.
 */
void reaper_child_reset_signals(void)
{
	sigset_t empty;

	for (int signo = 1; signo < NSIG; signo++)
		if (signo != SIGKILL && signo != SIGSTOP)
			signal(signo, SIG_DFL);
	sigemptyset(&empty);
	sigprocmask(SIG_SETMASK, &empty, NULL);
}

static void reaper_unlink_locked(struct reaper_child *child)
{
	struct reaper_child **link = &reaper_children;

	while (*link && *link != child)
		link = &(*link)->next;
	if (*link)
		*link = child->next;
	child->registered = false;
}

static void reaper_dispatch(pid_t pid, int status)
{
	struct reaper_child *child;
	uint64_t one = 1;

	pthread_mutex_lock(&reaper_lock);
	for (child = reaper_children; child; child = child->next)
		if (child->pid == pid)
			break;
	if (child) {
		child->exited = true;
		child->status = status;
		reaper_unlink_locked(child);
		if (write(child->event_fd, &one, sizeof(one)) < 0)
			agent_warn("reaper: cannot signal waiter of pid %d", (int)pid);
		pthread_cond_broadcast(&reaper_cond);
	} else {
		atomic_fetch_add(&reaper_orphan_count, 1);
		agent_debug("reaped orphan pid %d (status 0x%x)", (int)pid, status);
	}
	pthread_mutex_unlock(&reaper_lock);
}

static void reaper_drain(void)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		reaper_dispatch(pid, status);
}

static void *reaper_thread_main(void *arg)
{
	sigset_t set;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (;;) {
		reaper_drain();
		if (sigwaitinfo(&set, NULL) < 0 && errno != EINTR)
			agent_error("reaper: sigwaitinfo failed: %s", strerror(errno));
	}
	return NULL;
}

int reaper_start(void)
{
	pthread_t thread;
	int err;

	err = pthread_create(&thread, NULL, reaper_thread_main, NULL);
	if (err)
		return -err;
	pthread_detach(thread);
	return 0;
}

pid_t reaper_fork(pid_t (*fork_fn)(void *ctx), void *ctx, struct reaper_child **child_out)
{
	struct reaper_child *child = calloc(1, sizeof(*child));
	pid_t pid;

	if (!child)
		return -ENOMEM;
	child->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (child->event_fd < 0) {
		int err = -errno;

		free(child);
		return err;
	}
	pthread_mutex_lock(&reaper_lock);
	pid = fork_fn(ctx);
	if (pid == 0)
		return 0;
	if (pid < 0) {
		int err = -errno;

		pthread_mutex_unlock(&reaper_lock);
		close(child->event_fd);
		free(child);
		return err;
	}
	child->pid = pid;
	child->registered = true;
	child->next = reaper_children;
	reaper_children = child;
	pthread_mutex_unlock(&reaper_lock);
	*child_out = child;
	return pid;
}

pid_t reaper_child_pid(const struct reaper_child *child)
{
	return child->pid;
}

int reaper_child_event_fd(const struct reaper_child *child)
{
	return child->event_fd;
}

bool reaper_child_poll(struct reaper_child *child, int *status)
{
	bool exited;

	pthread_mutex_lock(&reaper_lock);
	exited = child->exited;
	if (exited)
		*status = child->status;
	pthread_mutex_unlock(&reaper_lock);
	return exited;
}

static void reaper_deadline(int timeout_ms, struct timespec *deadline)
{
	clock_gettime(CLOCK_MONOTONIC, deadline);
	deadline->tv_sec += timeout_ms / REAPER_MS_PER_SEC;
	deadline->tv_nsec += (long)(timeout_ms % REAPER_MS_PER_SEC) * REAPER_NS_PER_MS;
	if (deadline->tv_nsec >= REAPER_NS_PER_SEC) {
		deadline->tv_sec++;
		deadline->tv_nsec -= REAPER_NS_PER_SEC;
	}
}

int reaper_child_wait(struct reaper_child *child, int timeout_ms, int *status)
{
	struct timespec deadline;
	int err = 0;

	if (timeout_ms >= 0)
		reaper_deadline(timeout_ms, &deadline);
	pthread_mutex_lock(&reaper_lock);
	while (!child->exited && err == 0) {
		if (timeout_ms < 0)
			err = pthread_cond_wait(&reaper_cond, &reaper_lock);
		else
			err = pthread_cond_clockwait(&reaper_cond, &reaper_lock,
						     CLOCK_MONOTONIC, &deadline);
	}
	if (child->exited) {
		*status = child->status;
		err = 0;
	} else {
		err = -ETIMEDOUT;
	}
	pthread_mutex_unlock(&reaper_lock);
	return err;
}

void reaper_child_release(struct reaper_child *child)
{
	if (!child)
		return;
	pthread_mutex_lock(&reaper_lock);
	if (child->registered)
		reaper_unlink_locked(child);
	pthread_mutex_unlock(&reaper_lock);
	close(child->event_fd);
	free(child);
}

unsigned long reaper_orphans_reaped(void)
{
	return atomic_load(&reaper_orphan_count);
}
