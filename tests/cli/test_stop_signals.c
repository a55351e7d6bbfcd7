/*
 * stop_signals (src/cli/stop_signals.c) in a child process of its own, since it blocks
 * signals and may end its process: the first SIGTERM or SIGINT calls the target without force
 * and is readable as received; a target set after the signal is called at once; a second
 * signal ends the process by that signal, as its default action would. The target writes
 * what it was called with to a pipe the test reads.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/stop_signals.h"
#include "harness.h"

#define TEST_CHILD_OK 0
#define TEST_CHILD_FAILED 3
#define TEST_NOTE_MAX 64

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

static void check_signal(int signal_number, bool target_late)
{
	char notes[TEST_NOTE_MAX] = "";
	size_t used = 0;
	int pipe_fds[2], status = 0;
	ssize_t got;
	pid_t pid;

	CHECK(pipe(pipe_fds) == 0);
	pid = fork();
	if (pid == 0) {
		close(pipe_fds[0]);
		notes_fd = pipe_fds[1];
		_exit(child_first_then_second(signal_number, target_late));
	}
	close(pipe_fds[1]);
	while (used + 1 < sizeof(notes) &&
	       (got = read(pipe_fds[0], notes + used, sizeof(notes) - 1 - used)) > 0)
		used += (size_t)got;
	notes[used] = '\0';
	close(pipe_fds[0]);
	CHECK_INT_EQ(waitpid(pid, &status, 0), pid);
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
	return harness_finish();
}
