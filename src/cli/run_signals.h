/*
 * SIGINT and SIGTERM during `voidbox run`: the run is cancelled in order rather than killed.
 * Both signals are blocked before the run starts any thread, so every thread inherits the
 * mask and one watcher thread reads them from a signalfd. The first signal cancels every box
 * of the process (box_cancel_all): each guest is asked to sync and power off, the stages under
 * way fail, the runners close their boxes as after any failure (VMs stopped, runtime
 * directories and cgroups removed), and the run ends with its report. A guest that has not
 * ended its connection within RUN_SIGNALS_GRACE_MS is cut off. A second signal ends the
 * process at once, as the signal's default action would have (its VMMs die with it).
 *
 * The daemon cancels a run with SIGTERM and kills it after the run's grace period, so a
 * cancelled daemon run ends with the report of what it did rather than with nothing.
 */
#ifndef VOIDBOX_CLI_RUN_SIGNALS_H
#define VOIDBOX_CLI_RUN_SIGNALS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

/* How long the guests of a cancelled run get to sync and power off before they are cut. */
#define RUN_SIGNALS_GRACE_MS 10000

struct run_signals {
	pthread_t thread;
	bool started;
	int signal_fd;
	int stop_fd; /* an eventfd: run_signals_stop wakes the watcher with it */
	sigset_t previous_mask;
	pthread_mutex_t lock;
	pthread_cond_t received_cond;
	int received; /* the first signal, 0 until one came */
};

/*
 * Blocks SIGINT and SIGTERM in the calling thread and starts the watcher. Call it before the
 * run starts any thread. 0 or -errno (the signals keep their default action then).
 */
int run_signals_start(struct run_signals *signals);
/* The first signal received, 0 when none came. */
int run_signals_received(struct run_signals *signals);
/* Waits until a signal comes (kind sandbox's box stays up until then); returns it. */
int run_signals_wait(struct run_signals *signals);
/*
 * Stops the watcher and restores the signal mask; a signal after this acts as by default.
 * Call it once the run's boxes are closed.
 */
void run_signals_stop(struct run_signals *signals);

#endif
