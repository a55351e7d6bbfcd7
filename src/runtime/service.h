/*
 * Service mode (`mode: service` agents and workflow steps): a program that stays up until it
 * exits or is asked to stop. While it runs, a watcher thread polls its output_file in the box;
 * the first time the file has content it is published once to the run's observer
 * (stage_output_ready: the daemon sets output_ready while the run is still running). A stop
 * request is process-wide, because it arrives as a signal (`voidbox run` turns SIGUSR1 into
 * service_request_stop()); the watcher of every running service sees it and stops its program
 * through box_stop_service(), so the program ends on its own terms and its exit code decides
 * the stage's state (service_stage_succeeded).
 */
#ifndef VOIDBOX_RUNTIME_SERVICE_H
#define VOIDBOX_RUNTIME_SERVICE_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/box.h"
#include "runtime/run_report.h"

/* The signal `voidbox run` takes as a stop request; `voidbox serve` sends it on POST .../stop. */
#define SERVICE_STOP_SIGNAL SIGUSR1

/* How often a watcher looks for a stop request; the output file is read every few ticks. */
#define SERVICE_TICK_MS 250u
#define SERVICE_OUTPUT_POLL_TICKS 4u

/* Async-signal-safe: asks every running service of this process to stop. */
void service_request_stop(void);
bool service_stop_requested(void);

struct service_watch {
	struct box *box;
	const char *name;	 /* the service's name in box_stop_service */
	const char *output_file; /* polled in the box */
	const struct run_report *report;
	const struct run_stage *stage;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool done;	     /* set by service_watch_finish */
	bool published;	     /* the output file was published */
	bool stop_requested; /* a stop was requested while the program ran */
	bool stop_sent;	     /* ... and the program was asked (retried each tick until then) */
};

/* Starts watching; strings and pointers are borrowed until service_watch_finish. 0 or -errno. */
int service_watch_start(struct service_watch *watch, struct box *box, const char *name,
			const char *output_file, const struct run_report *report,
			const struct run_stage *stage);
/*
 * After the program ended: stops the thread, and publishes the output file now when the
 * watcher had not yet seen it (a service that wrote it and exited between two polls).
 */
void service_watch_finish(struct service_watch *watch);

/*
 * A service's exit maps to its stage: exit 0 succeeds; when it was asked to stop, so does an
 * end by that SIGTERM (the guest reports a signal death as exit -1 and 128+15 from shells).
 */
bool service_stage_succeeded(const struct service_watch *watch, int exit_code, bool timed_out);

#endif
