/*
 * Whether the processes a test started through the guest agent are dead. Shared by the two
 * tests that run the real agent on the host (tests/agent/test_server.c and
 * tests/host/test_agent_integration.c): both prove that an exec's timeout killed its whole
 * process group from the pids the group's members wrote to a file before the timeout. The wait
 * for them to be reaped is bounded so a survivor fails the check instead of hanging; it asserts
 * nothing about speed. Include after harness.h (it CHECKs).
 */
#ifndef VOIDBOX_TESTS_PROCESS_PROBE_H
#define VOIDBOX_TESTS_PROCESS_PROBE_H

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define PROCESS_PROBE_MAX_PIDS 8
#define PROCESS_PROBE_WAIT_MS 3000
#define PROCESS_PROBE_POLL_NS (20 * 1000 * 1000L)
#define PROCESS_PROBE_MS_PER_SEC 1000L
#define PROCESS_PROBE_NS_PER_MS 1000000L

/* A process is dead once it is gone, or a zombie ("pid (comm) Z ...") waiting for its reaper. */
static inline bool process_probe_gone(pid_t pid)
{
	char path[64], state = '?';
	FILE *f;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
		state = '?';
	fclose(f);
	return state == 'Z' || state == 'X';
}

static inline long process_probe_now_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec * PROCESS_PROBE_MS_PER_SEC + now.tv_nsec / PROCESS_PROBE_NS_PER_MS;
}

/*
 * Reads EXPECTED pids (whitespace separated) from PIDFILE and checks each process ends; a
 * survivor is killed so it cannot outlive the test. The file is removed.
 */
static inline void process_probe_check_pidfile_gone(const char *pidfile, int expected)
{
	const struct timespec poll = { .tv_nsec = PROCESS_PROBE_POLL_NS };
	int pids[PROCESS_PROBE_MAX_PIDS] = { 0 };
	int count = 0;
	FILE *f = fopen(pidfile, "r");

	CHECK(f != NULL);
	if (!f)
		return;
	while (count < PROCESS_PROBE_MAX_PIDS && fscanf(f, "%d", &pids[count]) == 1)
		count++;
	fclose(f);
	unlink(pidfile);
	CHECK_INT_EQ(count, expected);
	for (int i = 0; i < count; i++) {
		long until = process_probe_now_ms() + PROCESS_PROBE_WAIT_MS;

		CHECK(pids[i] > 0);
		if (pids[i] <= 0)
			continue;
		while (!process_probe_gone(pids[i]) && process_probe_now_ms() < until)
			nanosleep(&poll, NULL);
		CHECK(process_probe_gone(pids[i]));
		if (!process_probe_gone(pids[i]))
			kill(pids[i], SIGKILL);
	}
}

#endif
