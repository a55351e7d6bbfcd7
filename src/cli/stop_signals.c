/*
 * The watcher of stop_signals.h: one thread polls the signalfd and the stop eventfd. After the
 * first signal its poll also times out once, at the end of the grace, to cut off the guests
 * that are still up; a second signal is re-raised with its default action restored, which
 * ends the process. The target is called under the lock, so stop_signals_set_target(NULL)
 * returns only when no call of the old target is under way.
 */
#include "cli/stop_signals.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/log.h"

#define STOP_SIGNALS_LOG "cancel"

static void stop_signals_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
}

const char *stop_signals_name(int signal_number)
{
	return signal_number == SIGINT ? "SIGINT" : "SIGTERM";
}

/* The second signal: the default action, now (the process ends; its VMMs die with it). */
static void stop_signals_end_now(int signal_number)
{
	sigset_t only;

	log_warn(STOP_SIGNALS_LOG, "%s again: ending at once", stop_signals_name(signal_number));
	signal(signal_number, SIG_DFL);
	sigemptyset(&only);
	sigaddset(&only, signal_number);
	pthread_sigmask(SIG_UNBLOCK, &only, NULL);
	raise(signal_number);
}

static void stop_signals_call_locked(struct stop_signals *signals, bool force)
{
	if (signals->cancel)
		signals->cancel(signals->cancel_opaque, force);
}

static void stop_signals_first(struct stop_signals *signals, int signal_number)
{
	log_warn(STOP_SIGNALS_LOG,
		 "%s: cancelling; the sandboxes are shut down (send it again to end at once)",
		 stop_signals_name(signal_number));
	pthread_mutex_lock(&signals->lock);
	signals->received = signal_number;
	pthread_cond_broadcast(&signals->received_cond);
	stop_signals_call_locked(signals, false);
	pthread_mutex_unlock(&signals->lock);
}

static void *stop_signals_thread(void *opaque)
{
	struct stop_signals *signals = opaque;
	struct pollfd fds[] = { { .fd = signals->signal_fd, .events = POLLIN },
				{ .fd = signals->stop_fd, .events = POLLIN } };
	bool cut = false;

	for (;;) {
		struct signalfd_siginfo info;
		int timeout = stop_signals_received(signals) && !cut ? STOP_SIGNALS_GRACE_MS : -1;
		int ready = poll(fds, 2, timeout);

		if (ready < 0 && errno == EINTR)
			continue;
		if (ready < 0 || fds[1].revents)
			return NULL;
		if (ready == 0) { /* the grace is over: cut off the guests still up */
			log_warn(STOP_SIGNALS_LOG, "the sandboxes did not shut down within %d ms; "
				 "stopping them", STOP_SIGNALS_GRACE_MS);
			pthread_mutex_lock(&signals->lock);
			stop_signals_call_locked(signals, true);
			pthread_mutex_unlock(&signals->lock);
			cut = true;
			continue;
		}
		if (read(signals->signal_fd, &info, sizeof(info)) != (ssize_t)sizeof(info))
			continue;
		if (stop_signals_received(signals))
			stop_signals_end_now((int)info.ssi_signo);
		else
			stop_signals_first(signals, (int)info.ssi_signo);
	}
}

int stop_signals_start(struct stop_signals *signals)
{
	sigset_t set;
	int rc;

	memset(signals, 0, sizeof(*signals));
	signals->signal_fd = -1;
	signals->stop_fd = -1;
	stop_signals_set(&set);
	pthread_mutex_init(&signals->lock, NULL);
	pthread_cond_init(&signals->received_cond, NULL);
	pthread_sigmask(SIG_BLOCK, &set, &signals->previous_mask);
	signals->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	signals->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (signals->signal_fd < 0 || signals->stop_fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = -pthread_create(&signals->thread, NULL, stop_signals_thread, signals);
	if (rc < 0)
		goto fail;
	signals->started = true;
	return 0;
fail:
	stop_signals_stop(signals);
	return rc;
}

void stop_signals_set_target(struct stop_signals *signals, stop_signals_cancel_fn cancel,
			     void *opaque)
{
	pthread_mutex_lock(&signals->lock);
	signals->cancel = cancel;
	signals->cancel_opaque = opaque;
	if (signals->received)
		stop_signals_call_locked(signals, false);
	pthread_mutex_unlock(&signals->lock);
}

int stop_signals_received(struct stop_signals *signals)
{
	int received;

	pthread_mutex_lock(&signals->lock);
	received = signals->received;
	pthread_mutex_unlock(&signals->lock);
	return received;
}

int stop_signals_wait(struct stop_signals *signals)
{
	int received;

	pthread_mutex_lock(&signals->lock);
	while (!signals->received)
		pthread_cond_wait(&signals->received_cond, &signals->lock);
	received = signals->received;
	pthread_mutex_unlock(&signals->lock);
	return received;
}

void stop_signals_stop(struct stop_signals *signals)
{
	static const uint64_t wake = 1;

	if (signals->started) {
		ssize_t written;

		do
			written = write(signals->stop_fd, &wake, sizeof(wake));
		while (written < 0 && errno == EINTR);
		if (written != (ssize_t)sizeof(wake)) { /* cannot happen to a fresh eventfd */
			log_warn(STOP_SIGNALS_LOG, "cannot stop the signal watcher: %s",
				 strerror(errno));
			return;
		}
		pthread_join(signals->thread, NULL);
		signals->started = false;
	}
	if (signals->signal_fd >= 0)
		close(signals->signal_fd);
	if (signals->stop_fd >= 0)
		close(signals->stop_fd);
	signals->signal_fd = signals->stop_fd = -1;
	pthread_sigmask(SIG_SETMASK, &signals->previous_mask, NULL);
	pthread_cond_destroy(&signals->received_cond);
	pthread_mutex_destroy(&signals->lock);
}
