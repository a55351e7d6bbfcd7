/*
 * stop_signals (src/cli/stop_signals.c) in a child process of its own, since it blocks
 * signals and may end its process: the first SIGTERM or SIGINT calls the target without force
 * and is readable as received; a target set after the signal is called at once; a second
 * signal ends the process by that signal, as its default action would, after the restore
 * hook; a grace that ran out with no target makes a later target be cut off at once; a
 * signal the process started with ignored stays ignored. The target writes what it was
 * called with to a pipe the test reads.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/stop_signals.h"
#include "harness.h"

#define TEST_CHILD_OK 0
#define TEST_CHILD_FAILED 3
#define TEST_NOTE_MAX 64
#define TEST_GRACE_MS 50
#define TEST_PAST_GRACE_NS (300 * 1000 * 1000L)

static int notes_fd = -1;

/* The target: "cancel" or "force" down the pipe. */
static void note_call(void *opaque, bool force)
{
	const char *note = force ? "force\n" : "cancel\n";

	(void)opaque;
	if (write(notes_fd, note, strlen(note)) < 0)
		_exit(TEST_CHILD_FAILED);
}

/* Runs in the child: the first signal, then the pause for the second. */
static int child_first_then_second(int signal_number, bool target_late)
{
	struct stop_signals signals;

	if (stop_signals_start(&signals) < 0)
		return TEST_CHILD_FAILED;
	if (!target_late)
		stop_signals_set_target(&signals, note_call, NULL);
	kill(getpid(), signal_number); /* to the process, as a kill: the watcher reads it */
	if (stop_signals_wait(&signals) != signal_number)
		return TEST_CHILD_FAILED;
	if (target_late) /* a signal that came first is passed on at once */
		stop_signals_set_target(&signals, note_call, NULL);
	if (write(notes_fd, "received\n", strlen("received\n")) < 0)
		return TEST_CHILD_FAILED;
	kill(getpid(), signal_number); /* the second: ends the process */
	pause();
	return TEST_CHILD_OK;
}

/* The restore hook: "restored" down the pipe. */
static void note_restore(void *opaque)
{
	(void)opaque;
	if (write(notes_fd, "restored\n", strlen("restored\n")) < 0)
		_exit(TEST_CHILD_FAILED);
}

/*
 * Runs in the child: the first signal with no target, a wait past the grace, then a target,
 * which is cut off at once; then the second signal, after which the restore hook runs.
 */
static int child_target_after_the_grace(int signal_number)
{
	struct timespec past_grace = { .tv_nsec = TEST_PAST_GRACE_NS };
	struct stop_signals signals;

	if (stop_signals_start_with_grace(&signals, TEST_GRACE_MS) < 0)
		return TEST_CHILD_FAILED;
	stop_signals_set_restore(&signals, note_restore, NULL);
	kill(getpid(), signal_number);
	if (stop_signals_wait(&signals) != signal_number)
		return TEST_CHILD_FAILED;
	nanosleep(&past_grace, NULL);
	stop_signals_set_target(&signals, note_call, NULL);
	if (write(notes_fd, "received\n", strlen("received\n")) < 0)
		return TEST_CHILD_FAILED;
	kill(getpid(), signal_number);
	pause();
	return TEST_CHILD_OK;
}

/*
 * Runs in the child, which was started with SIGINT ignored (as a script's background job
 * is): SIGINT stays ignored and cancels nothing; signal_number (watched) still cancels, then
 * ends the process.
 */
static int child_with_sigint_ignored(int signal_number)
{
	struct timespec settle = { .tv_nsec = TEST_PAST_GRACE_NS };
	struct stop_signals signals;

	signal(SIGINT, SIG_IGN);
	if (stop_signals_start(&signals) < 0)
		return TEST_CHILD_FAILED;
	stop_signals_set_target(&signals, note_call, NULL);
	kill(getpid(), SIGINT);
	nanosleep(&settle, NULL);
	if (stop_signals_received(&signals) != 0 &&
	    write(notes_fd, "SIGINT-received\n", strlen("SIGINT-received\n")) < 0)
		return TEST_CHILD_FAILED;
	kill(getpid(), signal_number);
	if (stop_signals_wait(&signals) != signal_number)
		return TEST_CHILD_FAILED;
	if (write(notes_fd, "received\n", strlen("received\n")) < 0)
		return TEST_CHILD_FAILED;
	kill(getpid(), signal_number);
	pause();
	return TEST_CHILD_OK;
}

/* Runs child(signal_number) with the notes pipe; its notes and how it ended. */
static void run_child(int (*child)(int), int signal_number, char *notes, size_t notes_len,
		      int *status)
{
	size_t used = 0;
	int pipe_fds[2];
	ssize_t got;
	pid_t pid;

	CHECK(pipe(pipe_fds) == 0);
	pid = fork();
	if (pid == 0) {
		close(pipe_fds[0]);
		notes_fd = pipe_fds[1];
		_exit(child(signal_number));
	}
	close(pipe_fds[1]);
	while (used + 1 < notes_len &&
	       (got = read(pipe_fds[0], notes + used, notes_len - 1 - used)) > 0)
		used += (size_t)got;
	notes[used] = '\0';
	close(pipe_fds[0]);
	CHECK_INT_EQ(waitpid(pid, status, 0), pid);
}

/*
 * The grace runs out while nothing is the target (a sandbox still booting): the target set
 * later is cut off at once, not asked politely. The second signal runs the restore hook (the
 * shell's terminal) before it ends the process.
 */
static void test_target_after_the_grace_is_cut_off(void)
{
	char notes[TEST_NOTE_MAX] = "";
	int status = 0;

	run_child(child_target_after_the_grace, SIGTERM, notes, sizeof(notes), &status);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	CHECK_STR_EQ(notes, "force\nreceived\nrestored\n");
}

static void test_ignored_signal_stays_ignored(void)
{
	char notes[TEST_NOTE_MAX] = "";
	int status = 0;

	run_child(child_with_sigint_ignored, SIGTERM, notes, sizeof(notes), &status);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	CHECK_STR_EQ(notes, "cancel\nreceived\n");
}

static bool child_sets_target_late;

static int child_first_then_second_adapter(int signal_number)
{
	return child_first_then_second(signal_number, child_sets_target_late);
}

static void check_signal(int signal_number, bool target_late)
{
	char notes[TEST_NOTE_MAX] = "";
	int status = 0;

	child_sets_target_late = target_late;
	run_child(child_first_then_second_adapter, signal_number, notes, sizeof(notes), &status);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == signal_number);
	CHECK_STR_EQ(notes, "cancel\nreceived\n"); /* the target ran before the wait ended */
}

static void test_sigterm_cancels_then_ends(void)
{
	check_signal(SIGTERM, false);
}

static void test_sigint_cancels_then_ends(void)
{
	check_signal(SIGINT, false);
}

static void test_target_set_after_the_signal_is_called(void)
{
	check_signal(SIGTERM, true);
}

int main(void)
{
	RUN_TEST(test_sigterm_cancels_then_ends);
	RUN_TEST(test_sigint_cancels_then_ends);
	RUN_TEST(test_target_set_after_the_signal_is_called);
	RUN_TEST(test_target_after_the_grace_is_cut_off);
	RUN_TEST(test_ignored_signal_stays_ignored);
	return harness_finish();
}
