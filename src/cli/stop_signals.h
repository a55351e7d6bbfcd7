/*
 * SIGINT and SIGTERM for the commands that stop their sandboxes in order (`voidbox run`,
 * `voidbox exec`, `voidbox shell`) rather than die with them. Both signals are blocked before
 * the command starts any thread, so every thread inherits the mask and one watcher thread reads
 * them from a signalfd. The first signal calls the command's cancel target without force: it
 * asks the guests to sync and power off, which fails what runs in them, and the command then
 * unwinds as after any failure (VMs stopped, runtime directories and cgroups removed) and exits
 * with 128 + the signal. STOP_SIGNALS_GRACE_MS later the target is called again with force, to
 * cut off guests that are still up. A second signal ends the process at once, as the signal's
 * default action would have (its VMMs die with it), after the restore hook has put back what
 * the command changed (the shell's raw terminal).
 *
 * The daemon cancels a run with SIGTERM and kills it after the run's grace period, so a
 * cancelled daemon run ends with the report of what it did rather than with nothing.
 */
#ifndef VOIDBOX_CLI_STOP_SIGNALS_H
#define VOIDBOX_CLI_STOP_SIGNALS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

/* How long the guests of a cancelled command get to sync and power off before they are cut. */
#define STOP_SIGNALS_GRACE_MS 10000
/* A command a signal cancelled exits with this plus the signal's number, as a shell says. */
#define STOP_SIGNALS_EXIT_BASE 128

/* Ends what the command runs: force false asks politely, force true cuts it off. */
typedef void (*stop_signals_cancel_fn)(void *opaque, bool force);
/* Puts back what the process changed and its default ending would leave (a raw terminal). */
typedef void (*stop_signals_restore_fn)(void *opaque);

struct stop_signals {
	pthread_t thread;
	bool started;
	int signal_fd;
	int stop_fd; /* an eventfd: stop_signals_stop wakes the watcher with it */
	sigset_t previous_mask;
	pthread_mutex_t lock; /* the fields below; held while the target is called */
	pthread_cond_t received_cond;
	int received; /* the first signal, 0 until one came */
	bool cut;     /* the grace ran out: every target since is called with force */
	int grace_ms;
	stop_signals_cancel_fn cancel;
	void *cancel_opaque;
	stop_signals_restore_fn restore;
	void *restore_opaque;
};

/*
 * Blocks SIGINT and SIGTERM in the calling thread and starts the watcher. Call it before the
 * command starts any thread. 0 or -errno (the signals keep their default action then). A
 * signal the process was started with ignored (a background job of a script, `trap '' INT`)
 * stays ignored and is not watched.
 */
int stop_signals_start(struct stop_signals *signals);
/* The same with a grace other than STOP_SIGNALS_GRACE_MS (tests). */
int stop_signals_start_with_grace(struct stop_signals *signals, int grace_ms);
/*
 * What the signals cancel; NULL for nothing (before the sandbox exists, and before it is
 * destroyed: this waits for a call of the target under way). When a signal already came,
 * the new target is called at once, with force once the grace has run out.
 */
void stop_signals_set_target(struct stop_signals *signals, stop_signals_cancel_fn cancel,
			     void *opaque);
/*
 * What a second signal runs before it ends the process. Set it once and take it away (NULL)
 * once: the watcher reads it without the lock, which a target call under way may hold.
 */
void stop_signals_set_restore(struct stop_signals *signals, stop_signals_restore_fn restore,
			      void *opaque);
/* The first signal received, 0 when none came. */
int stop_signals_received(struct stop_signals *signals);
/* "SIGINT" or "SIGTERM". */
const char *stop_signals_name(int signal_number);
/* Waits until a signal comes (kind sandbox's box stays up until then); returns it. */
int stop_signals_wait(struct stop_signals *signals);
/*
 * Stops the watcher and restores the signal mask; a signal after this acts as by default.
 * Call it once the command's sandboxes are gone.
 */
void stop_signals_stop(struct stop_signals *signals);

#endif
