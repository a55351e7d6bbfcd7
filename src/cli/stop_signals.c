/*
 * The watcher of stop_signals.h: one thread polls the signalfd and the stop eventfd. After the
 * first signal its poll also times out once, at the end of the grace (a deadline the first
 * signal fixes, so an interrupted poll does not start it again), to cut off the guests that
 * are still up; a target set after that is cut off at once. A second signal runs the restore
 * hook and is re-raised with its default action restored, which ends the process. The target
 * is called under the lock, so stop_signals_set_target(NULL) returns only when no call of the
 * old target is under way.
 */
#include "cli/stop_signals.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define STOP_SIGNALS_LOG "cancel"

/* SIGINT and SIGTERM, less one the process was started with ignored. */
static void stop_signals_set(sigset_t *set)
{
	static const int watched[] = { SIGINT, SIGTERM };

	sigemptyset(set);
	for (size_t i = 0; i < sizeof(watched) / sizeof(watched[0]); i++) {
		struct sigaction current;

		if (sigaction(watched[i], NULL, &current) == 0 && current.sa_handler == SIG_IGN)
			continue;
		sigaddset(set, watched[i]);
	}
}

const char *stop_signals_name(int signal_number)
{
	return signal_number == SIGINT ? "SIGINT" : "SIGTERM";
}

/*
 * The second signal: the restore hook, then the default action, now (the process ends; its
 * VMMs die with it). The lock is not taken: a target call under way may hold it for as long
 * as a guest takes to answer, which is what the second signal cuts short.
 */
static void stop_signals_end_now(struct stop_signals *signals, int signal_number)
{
	stop_signals_restore_fn restore;
	void *restore_opaque;
	sigset_t only;

	log_warn(STOP_SIGNALS_LOG, "%s again: ending at once", stop_signals_name(signal_number));
	__atomic_load(&signals->restore, &restore, __ATOMIC_ACQUIRE);
	__atomic_load(&signals->restore_opaque, &restore_opaque, __ATOMIC_ACQUIRE);
	if (restore)
		restore(restore_opaque);
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

/* The poll timeout until the grace ends: -1 before a signal and after the cut. */
static int stop_signals_timeout(struct stop_signals *signals, uint64_t cut_at_ms)
{
	uint64_t now = clock_monotonic_ms();
	int timeout = -1;

	pthread_mutex_lock(&signals->lock);
	if (signals->received && !signals->cut)
		timeout = now >= cut_at_ms ? 0 : (int)(cut_at_ms - now);
	pthread_mutex_unlock(&signals->lock);
	return timeout;
}

static void *stop_signals_thread(void *opaque)
{
	struct stop_signals *signals = opaque;
	struct pollfd fds[] = { { .fd = signals->signal_fd, .events = POLLIN },
				{ .fd = signals->stop_fd, .events = POLLIN } };
	uint64_t cut_at_ms = 0; /* the grace's end, fixed by the first signal */

	for (;;) {
		struct signalfd_siginfo info;
		int ready = poll(fds, 2, stop_signals_timeout(signals, cut_at_ms));

		if (ready < 0 && errno == EINTR)
			continue;
		if (ready < 0 || fds[1].revents)
			return NULL;
		if (ready == 0) { /* the grace is over: cut off the guests still up */
			log_warn(STOP_SIGNALS_LOG, "the sandboxes did not shut down within %d ms; "
				 "stopping them", signals->grace_ms);
			pthread_mutex_lock(&signals->lock);
			signals->cut = true;
			stop_signals_call_locked(signals, true);
			pthread_mutex_unlock(&signals->lock);
			continue;
		}
		if (read(signals->signal_fd, &info, sizeof(info)) != (ssize_t)sizeof(info))
			continue;
		if (stop_signals_received(signals)) {
			stop_signals_end_now(signals, (int)info.ssi_signo);
		} else {
			cut_at_ms = clock_monotonic_ms() + (uint64_t)signals->grace_ms;
			stop_signals_first(signals, (int)info.ssi_signo);
		}
	}
}

int stop_signals_start(struct stop_signals *signals)
{
	return stop_signals_start_with_grace(signals, STOP_SIGNALS_GRACE_MS);
}

int stop_signals_start_with_grace(struct stop_signals *signals, int grace_ms)
{
	sigset_t set;
	int rc;

	memset(signals, 0, sizeof(*signals));
	signals->signal_fd = -1;
	signals->stop_fd = -1;
	signals->grace_ms = grace_ms;
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
		stop_signals_call_locked(signals, signals->cut);
	pthread_mutex_unlock(&signals->lock);
}

void stop_signals_set_restore(struct stop_signals *signals, stop_signals_restore_fn restore,
			      void *opaque)
{
	/*
	 * The watcher reads the hook, then its opaque, without the lock: a new hook goes in after
	 * its opaque, and a hook taken away goes before its opaque does, so the watcher never
	 * pairs a hook with another's opaque.
	 */
	if (restore) {
		__atomic_store(&signals->restore_opaque, &opaque, __ATOMIC_RELEASE);
		__atomic_store(&signals->restore, &restore, __ATOMIC_RELEASE);
	} else {
		__atomic_store(&signals->restore, &restore, __ATOMIC_RELEASE);
		__atomic_store(&signals->restore_opaque, &opaque, __ATOMIC_RELEASE);
	}
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
