/*
 * The single place that waits for children. One thread takes SIGCHLD (blocked everywhere else
 * via reaper_block_signals before any thread exists) and reaps with waitpid(-1); a status for a
 * pid registered by reaper_fork goes to that child's waiter, anything else is an orphan and is
 * simply reaped, so PID 1 never accumulates zombies and never steals an exec's exit status.
 * reaper_fork forks under the registry lock, so a child that dies instantly is still found.
 */
#ifndef VOIDBOX_AGENT_REAPER_H
#define VOIDBOX_AGENT_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

struct reaper_child;

/* Blocks SIGCHLD in the calling thread; call in main before creating any thread. */
void reaper_block_signals(void);
/* In a freshly forked child: restores the default signal mask and dispositions. */
void reaper_child_reset_signals(void);
/* Starts the reaper thread. Returns 0 or -errno. */
int reaper_start(void);

/*
 * Calls fork_fn(ctx) (fork or forkpty) with the registry locked and registers the new pid.
 * Returns the pid in the parent with *child set, 0 in the child, or -errno. The child side must
 * only call async-signal-safe functions before exec.
 */
pid_t reaper_fork(pid_t (*fork_fn)(void *ctx), void *ctx, struct reaper_child **child);

pid_t reaper_child_pid(const struct reaper_child *child);
/* An eventfd that becomes readable once the child's status is known. */
int reaper_child_event_fd(const struct reaper_child *child);
/* Non-blocking: true and *status once exited. */
bool reaper_child_poll(struct reaper_child *child, int *status);
/* Waits up to timeout_ms (negative: forever). Returns 0 with *status, or -ETIMEDOUT. */
int reaper_child_wait(struct reaper_child *child, int timeout_ms, int *status);
/* Drops the waiter; a child still running is reaped as an orphan later. */
void reaper_child_release(struct reaper_child *child);

/* Number of unregistered children (orphans) reaped so far. */
unsigned long reaper_orphans_reaped(void);

#endif
