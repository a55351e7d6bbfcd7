/*
 * The service watcher: one thread per running service, woken every SERVICE_TICK_MS or at
 * once by service_watch_finish. The stop flag is a lock-free atomic because a signal handler
 * sets it; everything else is under the watch's own lock.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "runtime/service.h"

#define SERVICE_NS_PER_MS 1000000L
#define SERVICE_NS_PER_SEC 1000000000L
#define SERVICE_EXIT_SIGNAL_BASE 128

static atomic_bool service_stop_flag;

void service_request_stop(void)
{
	atomic_store(&service_stop_flag, true);
}

bool service_stop_requested(void)
{
	return atomic_load(&service_stop_flag);
}

/* Reads the output file and publishes it once it has content; true once published. */
static bool service_try_publish(struct service_watch *watch)
{
	char *data = NULL;
	size_t len = 0;

	if (box_read_file(watch->box, watch->output_file, &data, &len) < 0 || len == 0) {
		free(data);
		return false;
	}
	log_info("service", "[service:%s] %s published (%zu bytes)", watch->name,
		 watch->output_file, len);
	run_report_stage_output_ready(watch->report, watch->stage, data, len);
	free(data);
	return true;
}

/* Asks the program to stop; false when it must be asked again (it is still starting). */
static bool service_stop_program(struct service_watch *watch)
{
	int rc = box_stop_service(watch->box, watch->name);

	if (rc == -EAGAIN)
		return false;
	if (rc < 0)
		log_warn("service", "[service:%s] could not be asked to stop: %s", watch->name,
			 box_last_error());
	else
		log_info("service", "[service:%s] asked to stop", watch->name);
	return true;
}

static void *service_watch_thread(void *opaque)
{
	struct service_watch *watch = opaque;
	unsigned int tick = 0;

	pthread_mutex_lock(&watch->lock);
	while (!watch->done) {
		struct timespec deadline;
		bool publish = !watch->published && tick % SERVICE_OUTPUT_POLL_TICKS == 0;
		bool stop = !watch->stop_sent && service_stop_requested();

		if (stop)
			watch->stop_requested = true;
		pthread_mutex_unlock(&watch->lock);
		/* box calls run unlocked: they may take a while, and finish sets done meanwhile */
		if (publish && service_try_publish(watch)) {
			pthread_mutex_lock(&watch->lock);
			watch->published = true;
			pthread_mutex_unlock(&watch->lock);
		}
		if (stop && service_stop_program(watch)) {
			pthread_mutex_lock(&watch->lock);
			watch->stop_sent = true;
			pthread_mutex_unlock(&watch->lock);
		}
		tick++;
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_nsec += (long)SERVICE_TICK_MS * SERVICE_NS_PER_MS;
		deadline.tv_sec += deadline.tv_nsec / SERVICE_NS_PER_SEC;
		deadline.tv_nsec %= SERVICE_NS_PER_SEC;
		pthread_mutex_lock(&watch->lock);
		if (!watch->done)
			pthread_cond_timedwait(&watch->wake, &watch->lock, &deadline);
	}
	pthread_mutex_unlock(&watch->lock);
	return NULL;
}

int service_watch_start(struct service_watch *watch, struct box *box, const char *name,
			const char *output_file, const struct run_report *report,
			const struct run_stage *stage)
{
	int rc;

	*watch = (struct service_watch){ .box = box, .name = name, .output_file = output_file,
					 .report = report, .stage = stage };
	pthread_mutex_init(&watch->lock, NULL);
	pthread_cond_init(&watch->wake, NULL);
	rc = pthread_create(&watch->thread, NULL, service_watch_thread, watch);
	watch->started = rc == 0;
	return -rc;
}

void service_watch_finish(struct service_watch *watch)
{
	if (watch->started) {
		pthread_mutex_lock(&watch->lock);
		watch->done = true;
		pthread_cond_broadcast(&watch->wake);
		pthread_mutex_unlock(&watch->lock);
		pthread_join(watch->thread, NULL);
		watch->started = false;
	}
	if (!watch->published && watch->box)
		watch->published = service_try_publish(watch);
	pthread_cond_destroy(&watch->wake);
	pthread_mutex_destroy(&watch->lock);
}

bool service_stage_succeeded(const struct service_watch *watch, int exit_code, bool timed_out)
{
	if (exit_code == 0)
		return true;
	return watch->stop_requested && !timed_out &&
	       (exit_code == BOX_EXIT_NOT_RUN || exit_code == SERVICE_EXIT_SIGNAL_BASE + SIGTERM);
}
