/*
 * The VMM process's confinement (src/sandbox/vmm_process.c) without a VM. A forked stand-in
 * body takes the main thread's filter and reports, and the test reads /proc as an outsider
 * would: another process, no new privileges, not dumpable (its /proc files refused to another
 * process of the same user), filtered, only its four descriptors, and dead once its parent is.
 * A VM's launch executes a program afresh: with a stand-in program for voidbox-vmm
 * (vmm_stand_in.c), the process runs that program with an empty environment, holds only its
 * control socket and standard descriptors once it has read its launch, and its memory holds
 * none of the caller's (a marker in this test's heap is absent from it, though present here);
 * a missing program is refused with a sentence. Launched into a cgroup while another thread
 * logs without pause, every child still executes it, in that cgroup; so does one launched
 * where clone3 is refused (forked, and moved in by itself). The real voidbox-vmm
 * reports a VM that cannot start with its sentence and leaves no process behind.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "harness.h"
#include "process_probe.h"
#include "sandbox/vmm_cgroup.h"
#include "sandbox/vmm_jail.h"
#include "sandbox/vmm_process.h"
#include "vmm/thread_filter.h"
#include "vmm_process_probe.h"

#define TEST_ERR_MAX 1024
#define TEST_POLL_MS 20
/* spawn_sleeper_from_middle: the intermediate parent keeps this test's uid */
#define TEST_KEEP_UID ((uid_t)-1)
/* the user an intermediate parent becomes when the test runs as root (nobody) */
#define TEST_UNPRIVILEGED_UID ((uid_t)65534)
/* the stand-in's report: the errno socket(AF_INET) failed with under its filter */
struct stand_in_report {
	int confine_rc;
	int socket_errno;
	int dumpable;
	int signal_parent_errno; /* tgkill(parent, parent, 0): another process of the user */
	int signal_self_errno;	 /* tgkill(itself, its thread, 0) */
};

/* Confines itself, reports, then waits for the parent to close the socket. */
static int stand_in_body(int control_fd, void *opaque)
{
	struct stand_in_report report = { 0 };
	char byte;
	int fd;

	pid_t parent = getppid(), self = getpid(), thread = (pid_t)syscall(SYS_gettid);

	(void)opaque;
	report.dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	report.confine_rc = vmm_thread_confine(VMM_THREAD_VMM_MAIN);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	report.socket_errno = fd < 0 ? errno : 0;
	report.signal_parent_errno = syscall(SYS_tgkill, parent, parent, 0) < 0 ? errno : 0;
	report.signal_self_errno = syscall(SYS_tgkill, self, thread, 0) < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	if (send(control_fd, &report, sizeof(report), 0) != (ssize_t)sizeof(report))
		return 1;
	while (recv(control_fd, &byte, 1, 0) > 0)
		;
	return 0;
}

static void test_child_is_confined(void)
{
	char err[TEST_ERR_MAX], target[PROBE_PATH_MAX], ours[PROBE_PATH_MAX];
	struct stand_in_report report = { -1, -1, -1, -1, -1 };
	int planted = open("/dev/zero", O_RDONLY); /* no O_CLOEXEC: fork alone keeps it */
	int control_fd = -1, status = 0;
	pid_t pid = 0;

	CHECK(planted >= 0);
	CHECK(probe_environ_has(getpid(), PROBE_SECRET_NAME)); /* the precondition */
	CHECK_INT_EQ(vmm_process_spawn(stand_in_body, NULL, &pid, &control_fd, err, sizeof(err)),
		     0);
	CHECK(pid > 0 && pid != getpid());
	CHECK_INT_EQ(recv(control_fd, &report, sizeof(report), 0), (long)sizeof(report));
	CHECK_INT_EQ(report.confine_rc, 0);
	CHECK_INT_EQ(report.socket_errno, EPERM);
	CHECK_INT_EQ(report.dumpable, 0);
	/* its kicks reach its own threads; no signal reaches the process that started it */
	CHECK_INT_EQ(report.signal_parent_errno, EPERM);
	CHECK_INT_EQ(report.signal_self_errno, 0);

	CHECK_INT_EQ(probe_check_every_thread_confined(pid), 1);
	CHECK(!probe_has_fd_to(pid, "/dev/zero"));
	for (int fd = 0; fd <= VMM_PROCESS_CONTROL_FD; fd++) {
		probe_fd_target(pid, fd, target, sizeof(target));
		CHECK(target[0] != '\0');
	}
	probe_fd_target(pid, STDIN_FILENO, target, sizeof(target));
	CHECK_STR_EQ(target, "/dev/null");
	probe_fd_target(pid, STDOUT_FILENO, target, sizeof(target));
	CHECK_STR_EQ(target, "/dev/null");
	probe_fd_target(pid, STDERR_FILENO, target, sizeof(target));
	probe_fd_target(getpid(), STDERR_FILENO, ours, sizeof(ours)); /* where this one logs */
	CHECK_STR_EQ(target, ours);
	probe_fd_target(pid, VMM_PROCESS_CONTROL_FD + 1, target, sizeof(target));
	CHECK_STR_EQ(target, "");

	close(control_fd); /* the body's end of the socket reads EOF: it returns */
	CHECK_INT_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(planted);
}

/* Says it is up (so the death signal is armed), then sleeps until killed. */
static int sleeper_body(int control_fd, void *opaque)
{
	char up = 1;

	(void)opaque;
	if (send(control_fd, &up, 1, 0) != 1)
		return 1;
	for (;;)
		pause();
	return 0;
}

/*
 * An intermediate parent, running as uid (or as this test when uid is TEST_KEEP_UID), spawns a
 * sleeping VMM process and waits until it is up; this process becomes the subreaper of both.
 * Returns the VMM process's pid (0 on failure) and the intermediate parent's in *middle.
 */
static pid_t spawn_sleeper_from_middle(uid_t uid, pid_t *middle)
{
	int report[2];
	pid_t child = 0;

	CHECK_INT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	CHECK_INT_EQ(pipe(report), 0);
	*middle = fork();
	if (*middle == 0) {
		char err[TEST_ERR_MAX];
		int control_fd;
		pid_t grandchild = 0;

		close(report[0]);
		/* a change of uid makes a process non-dumpable: undo that, as a login would be */
		if (uid != TEST_KEEP_UID && (setresgid(uid, uid, uid) < 0 || setgroups(0, NULL) < 0 ||
					     setresuid(uid, uid, uid) < 0 ||
					     prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0))
			_exit(1);
		if (vmm_process_spawn(sleeper_body, NULL, &grandchild, &control_fd, err,
				      sizeof(err)) < 0 ||
		    recv(control_fd, err, 1, 0) != 1)
			_exit(1);
		if (write(report[1], &grandchild, sizeof(grandchild)) != (ssize_t)sizeof(grandchild))
			_exit(1);
		for (;;)
			pause();
	}
	close(report[1]);
	CHECK(*middle > 0);
	CHECK_INT_EQ(read(report[0], &child, sizeof(child)), (long)sizeof(child));
	close(report[0]);
	CHECK(child > 0);
	return child > 0 ? child : 0;
}

/* Kills the intermediate parent; the VMM process's status once reaped (bounded wait). */
static int end_middle(pid_t middle, pid_t child)
{
	int status = 0;
	long until;

	kill(middle, SIGKILL);
	CHECK_INT_EQ(waitpid(middle, NULL, 0), middle);
	/* the orphan is ours now (subreaper); bounded so a survivor fails instead of hanging */
	until = process_probe_now_ms() + PROCESS_PROBE_WAIT_MS;
	while (child > 0 && waitpid(child, &status, WNOHANG) == 0 &&
	       process_probe_now_ms() < until)
		poll(NULL, 0, TEST_POLL_MS);
	if (child > 0 && !WIFSIGNALED(status)) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
	return status;
}

/*
 * An intermediate parent spawns a VMM process, waits until it is up, names it, and is killed:
 * the child dies of SIGKILL too (an exit of its own would mean the death signal never came).
 */
static void test_child_dies_with_its_parent(void)
{
	pid_t middle = 0, child = spawn_sleeper_from_middle(TEST_KEEP_UID, &middle);
	int status;

	if (child > 0)
		CHECK(!process_probe_gone(child));
	status = end_middle(middle, child);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/*
 * Not dumpable, seen as the kernel shows it to the user's other processes: the /proc files of a
 * non-dumpable process belong to root, not to the user who runs it. The VMM process is spawned
 * by a parent running as an unprivileged user (this test usually runs as root, whose own
 * processes' files belong to root either way), and its /proc/PID/mem and environ are refused
 * to another process of that same user.
 */
static void test_child_is_not_dumpable(void)
{
	uid_t user = geteuid() == 0 ? TEST_UNPRIVILEGED_UID : geteuid();
	pid_t middle = 0, child = spawn_sleeper_from_middle(geteuid() == 0 ? user : TEST_KEEP_UID,
							    &middle);
	char path[PROBE_PATH_MAX];
	struct stat st = { .st_uid = user };
	int peer[2], verdict = -1;
	pid_t peer_pid;

	CHECK(user != 0);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	CHECK_INT_EQ(child > 0 ? stat(path, &st) : -1, 0);
	CHECK_INT_EQ((long)st.st_uid, 0L);
	/* the same user's process, unprivileged, tries what a debugger would */
	CHECK_INT_EQ(pipe(peer), 0);
	peer_pid = fork();
	if (peer_pid == 0) {
		int refused = 0, fd;

		close(peer[0]);
		if (geteuid() == 0 && (setresgid(user, user, user) < 0 || setgroups(0, NULL) < 0 ||
				       setresuid(user, user, user) < 0))
			_exit(1);
		snprintf(path, sizeof(path), "/proc/%d/mem", (int)child);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		refused += fd < 0 && errno == EACCES;
		snprintf(path, sizeof(path), "/proc/%d/environ", (int)child);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		refused += fd < 0 && errno == EACCES;
		_exit(write(peer[1], &refused, sizeof(refused)) == (ssize_t)sizeof(refused) ? 0 : 1);
	}
	close(peer[1]);
	CHECK_INT_EQ(read(peer[0], &verdict, sizeof(verdict)), (long)sizeof(verdict));
	close(peer[0]);
	CHECK_INT_EQ(verdict, 2);
	CHECK_INT_EQ(waitpid(peer_pid, NULL, 0), peer_pid);
	end_middle(middle, child);
}

/* ---- the execution of voidbox-vmm, played by vmm_stand_in ---- */

#define TEST_STAND_IN_ENV "VOIDBOX_TEST_VMM_STAND_IN"
/* at least VM_SECRET_LEN bytes: the stand-in hands back its first ones as the secret */
#define TEST_STAND_IN_SNAPSHOT "/tmp/voidbox-test-snapshot-for-the-stand-in"
#define TEST_MARKER_MAX 64
#define TEST_NOT_A_PROGRAM "this file is executable but no program\n"
#define TEST_PROGRAM_MODE 0700

/* VOIDBOX_VMM_BINARY as the test setup gave it, put back after each test that changes it */
static const char *test_setup_binary;

static void use_binary(const char *path)
{
	CHECK_INT_EQ(vmm_process_use_binary(path), 0);
}

/* The bytes of /proc/PID/environ, or -1 when it cannot be read. */
static long environ_size(pid_t pid)
{
	char path[PROBE_PATH_MAX], block[PROBE_PATH_MAX];
	long size = 0;
	ssize_t got;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while ((got = read(fd, block, sizeof(block))) > 0)
		size += got;
	close(fd);
	return got < 0 ? -1 : size;
}

/*
 * A restore's launch reaches the executed program (its "started" echoes the snapshot
 * directory), which is that program, not a copy of this one: /proc/PID/exe names it, its
 * environment is empty, descriptors 0 to 3 are all it holds once it has read its launch, and a
 * marker this test keeps in its heap (found by the same scan in this process) is nowhere in
 * its memory. A forked child's memory would hold the marker.
 */
static void test_vm_process_is_executed_afresh(void)
{
	const char *stand_in = getenv(TEST_STAND_IN_ENV);
	struct vm_restore_options opts = { .placement_cpu = -1 };
	char exe[PATH_MAX] = "", expected[PATH_MAX] = "", target[PROBE_PATH_MAX];
	char err[TEST_ERR_MAX] = "", *marker = malloc(TEST_MARKER_MAX);
	uint8_t secret[VM_SECRET_LEN] = { 0 };
	struct vmm_process *proc = NULL;
	pid_t pid;

	CHECK(stand_in != NULL && marker != NULL && realpath(stand_in, expected) != NULL);
	if (!stand_in || !marker) {
		free(marker);
		return;
	}
	snprintf(marker, TEST_MARKER_MAX, "voidbox-heap-marker-%d-%ld", (int)getpid(),
		 process_probe_now_ms());
	CHECK_INT_EQ(probe_memory_has(getpid(), marker), 1); /* the scan finds it where it is */
	use_binary(stand_in);
	CHECK_INT_EQ(vmm_process_launch_restore(TEST_STAND_IN_SNAPSHOT, &opts, NULL, NULL, &proc,
						err, sizeof(err)), 0);
	use_binary(test_setup_binary);
	if (!proc) {
		fprintf(stderr, "  (the launch said: %s)\n", err);
		free(marker);
		return;
	}
	CHECK_INT_EQ(vmm_process_await_started(proc, secret, err, sizeof(err)), 0);
	CHECK(memcmp(secret, TEST_STAND_IN_SNAPSHOT, sizeof(secret)) == 0);
	pid = vmm_process_pid(proc);
	probe_exe(pid, exe, sizeof(exe));
	CHECK_STR_EQ(exe, expected);
	CHECK_INT_EQ(environ_size(pid), 0L);
	CHECK(probe_environ_has(getpid(), PROBE_SECRET_NAME)); /* and not in its: it has none */
	probe_fd_target(pid, STDIN_FILENO, target, sizeof(target));
	CHECK_STR_EQ(target, "/dev/null");
	probe_fd_target(pid, VMM_PROCESS_CONTROL_FD, target, sizeof(target));
	CHECK(strncmp(target, "socket:", strlen("socket:")) == 0);
	probe_fd_target(pid, VMM_PROCESS_LAUNCH_FD, target, sizeof(target));
	CHECK_STR_EQ(target, ""); /* read and closed */
	CHECK_INT_EQ(probe_memory_has(pid, marker), 0);
	vmm_process_destroy(proc);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
	explicit_bzero(marker, TEST_MARKER_MAX);
	free(marker);
}

/* test_born_in_cgroup_while_others_log: its launches, and how long each may take to execute */
#define TEST_LOGGED_LAUNCHES 48
#define TEST_EXECUTE_WAIT_MS 10000

struct busy_log {
	FILE *stream;
	pthread_t thread;
	atomic_bool stop;
};

/* Logs warnings into /dev/null until told to stop: the log's lock is held most of the time. */
static void *log_busily(void *opaque)
{
	struct busy_log *busy = opaque;

	while (!atomic_load(&busy->stop))
		log_warn("test", "a warning that keeps the log's lock busy");
	return NULL;
}

/*
 * A cgroup v2 directory beneath this process's own, made for the test (a host with v1
 * controllers still mounts a cgroup2 hierarchy without them, which is all a clone into a
 * cgroup needs); false with why where the host has none or the test may not make one.
 */
static bool make_own_cgroup(char *dir, size_t len, char *why, size_t whylen)
{
	char own[PATH_MAX];

	if (vmm_cgroup_own_dir(own, sizeof(own), why, whylen) < 0)
		return false;
	if (snprintf(dir, len, "%s/voidbox-test-born-%d", own, (int)getpid()) >= (int)len ||
	    mkdir(dir, 0755) < 0) {
		snprintf(why, whylen, "cannot make a cgroup beneath %.800s: %s", own,
			 strerror(errno));
		return false;
	}
	return true;
}

/* Whether process pid runs the program at path expected within wait_ms. */
static bool executes_within(pid_t pid, const char *expected, long wait_ms)
{
	long deadline = process_probe_now_ms() + wait_ms;
	char exe[PATH_MAX] = "";

	for (;;) {
		probe_exe(pid, exe, sizeof(exe));
		if (strcmp(exe, expected) == 0)
			return true;
		if (process_probe_now_ms() >= deadline)
			return false;
		usleep(TEST_POLL_MS * 1000);
	}
}

/*
 * For a test that launches the stand-in into a cgroup: the stand-in's path, its resolved path
 * (what /proc/PID/exe shows once it runs) and a cgroup of the test's own. False when there is
 * no stand-in (a failed check). Where no cgroup can be made the test cannot run at all: such a
 * test is a separate one (its own meson test), which skips there and says why.
 */
static bool prepare_cgroup_launch(const char **stand_in, char expected[PATH_MAX],
				  char dir[PATH_MAX])
{
	char why[TEST_ERR_MAX] = "";
	char reason[2 * TEST_ERR_MAX];

	*stand_in = getenv(TEST_STAND_IN_ENV);
	CHECK(*stand_in != NULL && realpath(*stand_in, expected) != NULL);
	if (!*stand_in)
		return false;
	if (!make_own_cgroup(dir, PATH_MAX, why, sizeof(why))) {
		snprintf(reason, sizeof(reason), "no cgroup of this test's own to launch into: %s",
			 why);
		harness_skip_all(reason);
	}
	return true;
}

/*
 * VMM processes launched into a cgroup while another thread of the caller logs without pause
 * each execute voidbox-vmm, in that cgroup (born there; where the kernel refuses clone3, forked
 * and moved in by the program, as the stand-in does too). The clone runs none
 * of the C library's fork handlers, so a child that took the log's lock before executing
 * would, whenever the clone came while the other thread held it, wait for the lock for good
 * (and its caller for its "started" until the start timed out, 5 minutes). With the lock held
 * most of the time, about one launch in eight did.
 */
static void test_born_in_cgroup_while_others_log(void)
{
	const char *stand_in;
	struct vm_restore_options opts = { .placement_cpu = -1 };
	char dir[PATH_MAX], expected[PATH_MAX] = "", err[TEST_ERR_MAX] = "";
	struct busy_log busy = { 0 };
	int executed = 0, in_cgroup = 0, started = 0;

	if (!prepare_cgroup_launch(&stand_in, expected, dir))
		return;
	(void)vmm_jail_host_mode(); /* its probe's children are forked once, before the noise */
	busy.stream = fopen("/dev/null", "we");
	CHECK(busy.stream != NULL);
	if (!busy.stream)
		goto out;
	log_set_stream(busy.stream);
	CHECK_INT_EQ(pthread_create(&busy.thread, NULL, log_busily, &busy), 0);
	use_binary(stand_in);
	for (int i = 0; i < TEST_LOGGED_LAUNCHES; i++) {
		uint8_t secret[VM_SECRET_LEN] = { 0 };
		struct vmm_process *proc = NULL;

		if (vmm_process_launch_restore(TEST_STAND_IN_SNAPSHOT, &opts, dir, NULL, &proc, err,
					       sizeof(err)) < 0) {
			fprintf(stderr, "  launch %d: %s\n", i, err);
			continue;
		}
		if (executes_within(vmm_process_pid(proc), expected, TEST_EXECUTE_WAIT_MS)) {
			executed++;
			started += vmm_process_await_started(proc, secret, err, sizeof(err)) == 0;
			in_cgroup += probe_in_cgroup(vmm_process_pid(proc), dir);
		} else {
			fprintf(stderr, "  launch %d: the child did not execute %s within %d s\n", i,
				expected, TEST_EXECUTE_WAIT_MS / 1000);
		}
		vmm_process_destroy(proc);
		if (executed <= i)
			break; /* one hung child says it all, within the test's timeout */
	}
	use_binary(test_setup_binary);
	atomic_store(&busy.stop, true);
	pthread_join(busy.thread, NULL);
	log_set_stream(stderr);
	fclose(busy.stream);
	CHECK_INT_EQ(executed, TEST_LOGGED_LAUNCHES);
	CHECK_INT_EQ(in_cgroup, TEST_LOGGED_LAUNCHES);
	CHECK_INT_EQ(started, TEST_LOGGED_LAUNCHES);
out:
	if (rmdir(dir) < 0)
		fprintf(stderr, "  cannot remove the test's cgroup %s: %s\n", dir, strerror(errno));
}

/* What the child of test_clone3_refused_falls_back_to_fork exits with. */
enum fallback_outcome {
	FALLBACK_OK,
	FALLBACK_NO_FILTER,	 /* the seccomp filter could not be loaded */
	FALLBACK_CLONE3_ALLOWED, /* clone3 was not refused: the test proves nothing */
	FALLBACK_NOT_LAUNCHED,
	FALLBACK_NOT_EXECUTED,
	FALLBACK_NOT_STARTED,
	FALLBACK_NOT_IN_CGROUP,
};

/* In a child of the test: clone3 refused by a filter, then one launch into dir. */
static enum fallback_outcome launch_without_clone3(const char *dir, const char *stand_in,
						   const char *expected)
{
	struct vm_restore_options opts = { .placement_cpu = -1 };
	struct clone_args probe = { .exit_signal = SIGCHLD };
	scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
	uint8_t secret[VM_SECRET_LEN] = { 0 };
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";
	enum fallback_outcome outcome = FALLBACK_OK;

	if (!filter || seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) < 0 ||
	    seccomp_load(filter) < 0) {
		seccomp_release(filter);
		return FALLBACK_NO_FILTER;
	}
	seccomp_release(filter);
	if (syscall(SYS_clone3, &probe, sizeof(probe)) != -1 || errno != ENOSYS)
		return FALLBACK_CLONE3_ALLOWED; /* (a child, were it allowed, exits at once) */
	if (vmm_process_use_binary(stand_in) < 0 ||
	    vmm_process_launch_restore(TEST_STAND_IN_SNAPSHOT, &opts, dir, NULL, &proc, err,
				       sizeof(err)) < 0) {
		fprintf(stderr, "  launch without clone3: %s\n", err);
		return FALLBACK_NOT_LAUNCHED;
	}
	if (!executes_within(vmm_process_pid(proc), expected, TEST_EXECUTE_WAIT_MS))
		outcome = FALLBACK_NOT_EXECUTED;
	else if (vmm_process_await_started(proc, secret, err, sizeof(err)) < 0)
		outcome = FALLBACK_NOT_STARTED;
	else if (!probe_in_cgroup(vmm_process_pid(proc), dir))
		outcome = FALLBACK_NOT_IN_CGROUP;
	if (outcome != FALLBACK_OK)
		fprintf(stderr, "  launch without clone3: outcome %d %s\n", outcome, err);
	vmm_process_destroy(proc);
	return outcome;
}

/*
 * Where the kernel refuses clone3 (older than 5.7, or a seccomp filter such as a container
 * runtime's), the VMM process is forked instead and moves itself into its cgroup: launched
 * from a child of the test whose filter makes clone3 fail with ENOSYS, the stand-in still
 * executes, starts and runs in the cgroup.
 */
static void test_clone3_refused_falls_back_to_fork(void)
{
	const char *stand_in;
	char dir[PATH_MAX], expected[PATH_MAX] = "";
	long deadline = process_probe_now_ms() + 2 * TEST_EXECUTE_WAIT_MS;
	int status = -1;
	pid_t child, done = 0;

	if (!prepare_cgroup_launch(&stand_in, expected, dir))
		return;
	fflush(NULL);
	child = fork();
	CHECK(child >= 0);
	if (child == 0)
		_exit(launch_without_clone3(dir, stand_in, expected));
	while (child > 0 && (done = waitpid(child, &status, WNOHANG)) == 0 &&
	       process_probe_now_ms() < deadline)
		usleep(TEST_POLL_MS * 1000);
	if (child > 0 && done == 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		fprintf(stderr, "  the launch without clone3 did not end within %d s\n",
			2 * TEST_EXECUTE_WAIT_MS / 1000);
	}
	CHECK(WIFEXITED(status));
	CHECK_INT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, FALLBACK_OK);
	if (rmdir(dir) < 0)
		fprintf(stderr, "  cannot remove the test's cgroup %s: %s\n", dir, strerror(errno));
}

/*
 * A program that is not there is refused before anything is forked, with a sentence naming
 * the variable; one that is there but cannot be executed fails the start with the child's
 * sentence, and nothing is left running.
 */
static void test_missing_program_is_a_sentence(void)
{
	struct vm_config cfg = { .kernel_path = "/nonexistent/voidbox-test-bzImage",
				 .memory_mb = 64, .no_thread_filters = true };
	char not_a_program[] = "/tmp/voidbox-test-not-a-program-XXXXXX";
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";
	int fd;

	use_binary("/nonexistent/" VMM_PROCESS_NAME);
	CHECK_INT_EQ(vmm_process_start_vm(&cfg, NULL, false, NULL, &proc, err, sizeof(err)),
		     -ENOENT);
	CHECK(proc == NULL);
	CHECK(strstr(err, VMM_PROCESS_BINARY_ENV) != NULL);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);

	fd = mkstemp(not_a_program);
	CHECK(fd >= 0);
	CHECK_INT_EQ(write(fd, TEST_NOT_A_PROGRAM, strlen(TEST_NOT_A_PROGRAM)),
		     (long)strlen(TEST_NOT_A_PROGRAM));
	CHECK_INT_EQ(fchmod(fd, TEST_PROGRAM_MODE), 0);
	close(fd);
	use_binary(not_a_program);
	CHECK(vmm_process_start_vm(&cfg, NULL, false, NULL, &proc, err, sizeof(err)) < 0);
	CHECK(proc == NULL);
	CHECK(strstr(err, "cannot execute") != NULL);
	fprintf(stderr, "  (the failed execution said: %s)\n", err);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
	unlink(not_a_program);
	use_binary(test_setup_binary);
}

/*
 * The real voidbox-vmm (as the test setup names it) reports vm_create's sentence; the process
 * is reaped, no zombie is left.
 */
static void test_failed_vm_reports_and_is_reaped(void)
{
	struct vm_config cfg = { .kernel_path = "/nonexistent/voidbox-test-bzImage",
				 .memory_mb = 64, .no_thread_filters = true };
	struct vmm_process *proc = (struct vmm_process *)&cfg; /* must be reset to NULL */
	char err[TEST_ERR_MAX] = "";
	int rc = vmm_process_start_vm(&cfg, NULL, false, NULL, &proc, err, sizeof(err));

	CHECK(rc < 0);
	CHECK(proc == NULL);
	CHECK(err[0] != '\0');
	fprintf(stderr, "  (the failed start said: %s)\n", err);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

/* ---- the requests: a stand-in child that plays the VM's side of the messages ---- */

#define TEST_SNAPSHOT_DIR "/tmp/voidbox-test-snapshot"
#define TEST_BASE_DIR "/tmp/voidbox-test-base"
#define TEST_OLD_SECRET_BYTE 0x5a
#define TEST_NEW_SECRET_BYTE 0xa5
#define TEST_ANSWER "no space left on the snapshot's filesystem: free some and take it again"
#define TEST_MALFORMED "bad"

enum stand_in_answer {
	STAND_IN_ANSWER_SENTENCE,  /* a well-formed answer: -ENOSPC and TEST_ANSWER */
	STAND_IN_ANSWER_MALFORMED, /* a record of the wrong length */
	STAND_IN_ANSWER_WRONG_KIND, /* a well-formed "started" where an answer belongs */
};

static bool snapshot_request_as_sent(const struct vmm_msg *msg)
{
	return strcmp(msg->text, TEST_SNAPSHOT_DIR) == 0 &&
	       strcmp(msg->parent_dir, TEST_BASE_DIR) == 0 &&
	       msg->snapshot_type == VM_SNAPSHOT_DIFF && msg->snapshot_after == VM_SNAPSHOT_RESUME &&
	       msg->secret[0] == TEST_NEW_SECRET_BYTE &&
	       msg->secret[VM_SECRET_LEN - 1] == TEST_NEW_SECRET_BYTE;
}

/*
 * Says "started" with the old secret, answers a snapshot request as its plan says (and a
 * working-set request with success), and says "exited" (poweroff) when told to stop.
 */
static int answering_body(int control_fd, void *opaque)
{
	const enum stand_in_answer *plan = opaque;
	struct vmm_msg msg = { .kind = VMM_MSG_STARTED };

	memset(msg.secret, TEST_OLD_SECRET_BYTE, sizeof(msg.secret));
	if (send(control_fd, &msg, sizeof(msg), 0) != (ssize_t)sizeof(msg))
		return 1;
	while (recv(control_fd, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg) &&
	       msg.kind != VMM_MSG_STOP) {
		struct vmm_msg answer = { .kind = VMM_MSG_ANSWER };

		if (msg.kind == VMM_MSG_SNAPSHOT && *plan == STAND_IN_ANSWER_MALFORMED) {
			send(control_fd, TEST_MALFORMED, strlen(TEST_MALFORMED), 0);
			continue;
		}
		if (msg.kind == VMM_MSG_SNAPSHOT && *plan == STAND_IN_ANSWER_WRONG_KIND)
			answer.kind = VMM_MSG_STARTED;
		else if (msg.kind == VMM_MSG_SNAPSHOT && snapshot_request_as_sent(&msg)) {
			answer.status = -ENOSPC;
			snprintf(answer.text, sizeof(answer.text), "%s", TEST_ANSWER);
		} else if (msg.kind == VMM_MSG_SNAPSHOT) {
			answer.status = -EINVAL;
			snprintf(answer.text, sizeof(answer.text), "not the request that was sent");
		}
		send(control_fd, &answer, sizeof(answer), 0);
	}
	msg = (struct vmm_msg){ .kind = VMM_MSG_EXITED, .reason = VM_EXIT_GUEST_POWEROFF };
	send(control_fd, &msg, sizeof(msg), 0);
	return 0;
}

static int request_snapshot(struct vmm_process *proc, char *err, size_t errlen)
{
	struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_DIFF, .parent_dir = TEST_BASE_DIR,
					    .after = VM_SNAPSHOT_RESUME };
	uint8_t secret[VM_SECRET_LEN];

	memset(secret, TEST_NEW_SECRET_BYTE, sizeof(secret));
	return vmm_process_snapshot(proc, TEST_SNAPSHOT_DIR, &opts, secret, err, errlen);
}

/*
 * A restore's "started" hands the parent the old secret; a snapshot request arrives as sent
 * and its error comes back as the child's sentence; the VM runs on, answers a working-set
 * request, and ends as the child says when stopped.
 */
static void test_snapshot_answered_with_a_sentence(void)
{
	enum stand_in_answer plan = STAND_IN_ANSWER_SENTENCE;
	enum vm_exit_reason reason = VM_EXIT_NONE;
	uint8_t secret[VM_SECRET_LEN] = { 0 };
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";

	CHECK_INT_EQ(vmm_process_start(answering_body, &plan, secret, &proc, err, sizeof(err)),
		     0);
	if (!proc)
		return;
	CHECK_INT_EQ(secret[0], TEST_OLD_SECRET_BYTE);
	CHECK_INT_EQ(secret[VM_SECRET_LEN - 1], TEST_OLD_SECRET_BYTE);
	CHECK_INT_EQ(request_snapshot(proc, err, sizeof(err)), -ENOSPC);
	CHECK_STR_EQ(err, TEST_ANSWER);
	CHECK_INT_EQ(vmm_process_wait(proc, 0, &reason), -ETIMEDOUT);
	CHECK_INT_EQ(vmm_process_record_working_set(proc, err, sizeof(err)), 0);
	vmm_process_request_stop(proc);
	CHECK_INT_EQ(vmm_process_wait(proc, PROCESS_PROBE_WAIT_MS, &reason), 0);
	CHECK_INT_EQ(reason, VM_EXIT_GUEST_POWEROFF);
	vmm_process_destroy(proc);
}

/* An answer of the wrong length or kind is a broken VMM process: its VM has ended. */
static void check_broken_answer_ends_the_vm(enum stand_in_answer plan)
{
	enum vm_exit_reason reason = VM_EXIT_NONE;
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";

	CHECK_INT_EQ(vmm_process_start(answering_body, &plan, NULL, &proc, err, sizeof(err)), 0);
	if (!proc)
		return;
	CHECK(request_snapshot(proc, err, sizeof(err)) < 0);
	CHECK(strstr(err, "the VMM process ended") != NULL);
	CHECK_INT_EQ(vmm_process_wait(proc, 0, &reason), 0);
	CHECK_INT_EQ(reason, VM_EXIT_INTERNAL_ERROR);
	CHECK_INT_EQ(vmm_process_record_working_set(proc, err, sizeof(err)), -ECHILD);
	vmm_process_destroy(proc);
}

static void test_malformed_answer_ends_the_vm(void)
{
	check_broken_answer_ends_the_vm(STAND_IN_ANSWER_MALFORMED);
	check_broken_answer_ends_the_vm(STAND_IN_ANSWER_WRONG_KIND);
}

/*
 * A VMM process's exit takes a while after it said "exited" (the kernel tears its KVM VM
 * down): a destroy waits for that exit, without killing it, and reaps it.
 */
#define TEST_SLOW_EXIT_NS 300000000L
#define TEST_SLOW_EXIT_MARKER_TEMPLATE "/tmp/voidbox-test-slow-exit-XXXXXX"

static int slow_exit_body(int control_fd, void *opaque)
{
	const char *marker = opaque;
	struct timespec teardown = { .tv_sec = 0, .tv_nsec = TEST_SLOW_EXIT_NS };
	struct vmm_msg msg = { .kind = VMM_MSG_STARTED };
	int fd;

	if (send(control_fd, &msg, sizeof(msg), 0) != (ssize_t)sizeof(msg))
		return 1;
	while (recv(control_fd, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg) &&
	       msg.kind != VMM_MSG_STOP)
		;
	msg = (struct vmm_msg){ .kind = VMM_MSG_EXITED, .reason = VM_EXIT_HOST_STOP };
	send(control_fd, &msg, sizeof(msg), 0);
	nanosleep(&teardown, NULL);
	fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return 1;
	close(fd);
	return 0;
}

static void test_destroy_waits_for_a_slow_exit(void)
{
	char marker[] = TEST_SLOW_EXIT_MARKER_TEMPLATE;
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";
	int fd = mkstemp(marker);

	if (fd < 0)
		harness_fail_setup("cannot create a temporary file (mkstemp)");
	close(fd);
	unlink(marker); /* the child makes it again once its slow exit is done */
	CHECK_INT_EQ(vmm_process_start(slow_exit_body, marker, NULL, &proc, err, sizeof(err)), 0);
	if (!proc)
		return;
	vmm_process_destroy(proc);
	CHECK(access(marker, F_OK) == 0);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
	unlink(marker);
}

/*
 * A subverted VMM's sentences reach the caller's error without their control bytes: no escape
 * sequence for the terminal, no line break for the log.
 */
#define TEST_CONTROLS_START "\x1b[2J\x1b]0;owned\x07the VM did not start\n"
#define TEST_CONTROLS_ANSWER "\x1b[31mno room\r\nfor the snapshot\x7f"

static int controls_body(int control_fd, void *opaque)
{
	const bool *start_fails = opaque;
	struct vmm_msg msg = { .kind = VMM_MSG_STARTED };

	if (*start_fails) {
		msg.status = -EINVAL;
		snprintf(msg.text, sizeof(msg.text), "%s", TEST_CONTROLS_START);
	}
	if (send(control_fd, &msg, sizeof(msg), 0) != (ssize_t)sizeof(msg) || *start_fails)
		return 0;
	while (recv(control_fd, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg) &&
	       msg.kind != VMM_MSG_STOP) {
		struct vmm_msg answer = { .kind = VMM_MSG_ANSWER, .status = -ENOSPC };

		snprintf(answer.text, sizeof(answer.text), "%s", TEST_CONTROLS_ANSWER);
		send(control_fd, &answer, sizeof(answer), 0);
	}
	return 0;
}

static bool has_control_bytes(const char *text)
{
	for (; *text; text++)
		if ((unsigned char)*text < 0x20 || (unsigned char)*text == 0x7f)
			return true;
	return false;
}

static void test_sentences_lose_their_control_bytes(void)
{
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";
	bool start_fails = true;

	CHECK_INT_EQ(vmm_process_start(controls_body, &start_fails, NULL, &proc, err,
				       sizeof(err)),
		     -EINVAL);
	CHECK(!has_control_bytes(err));
	CHECK(strstr(err, "the VM did not start") != NULL);
	start_fails = false;
	CHECK_INT_EQ(vmm_process_start(controls_body, &start_fails, NULL, &proc, err,
				       sizeof(err)),
		     0);
	if (!proc)
		return;
	CHECK_INT_EQ(vmm_process_record_working_set(proc, err, sizeof(err)), -ENOSPC);
	CHECK(!has_control_bytes(err));
	CHECK(strstr(err, "for the snapshot") != NULL);
	vmm_process_destroy(proc);
}

/*
 * A VMM process that never reads its socket: however many requests the caller sends, none
 * waits for room, and the destroy still ends it within its grace.
 */
#define TEST_DEAF_REQUESTS 256
#define TEST_DEAF_ALARM_S 15
#define TEST_DEAF_MAX_MS 10000

static int deaf_body(int control_fd, void *opaque)
{
	struct vmm_msg msg = { .kind = VMM_MSG_STARTED };

	(void)opaque;
	if (send(control_fd, &msg, sizeof(msg), 0) != (ssize_t)sizeof(msg))
		return 1;
	for (;;)
		pause();
}

static void test_requests_to_a_deaf_vmm_do_not_block(void)
{
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";
	long started;

	CHECK_INT_EQ(vmm_process_start(deaf_body, NULL, NULL, &proc, err, sizeof(err)), 0);
	if (!proc)
		return;
	alarm(TEST_DEAF_ALARM_S); /* a send that waits for room ends the test here */
	started = (long)clock_monotonic_ms();
	for (int i = 0; i < TEST_DEAF_REQUESTS; i++)
		vmm_process_request_stop(proc);
	vmm_process_destroy(proc);
	alarm(0);
	CHECK((long)clock_monotonic_ms() - started < TEST_DEAF_MAX_MS);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

/* A "started" of the wrong length fails the start, and nothing is left running. */
static int malformed_start_body(int control_fd, void *opaque)
{
	(void)opaque;
	return send(control_fd, TEST_MALFORMED, strlen(TEST_MALFORMED), 0) < 0;
}

static void test_malformed_start_fails(void)
{
	struct vmm_process *proc = NULL;
	char err[TEST_ERR_MAX] = "";

	CHECK_INT_EQ(vmm_process_start(malformed_start_body, NULL, NULL, &proc, err, sizeof(err)),
		     -ECHILD);
	CHECK(proc == NULL);
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (HARNESS_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot run the VMM process (seccomp-filtered threads) nor "
				 "this test's re-execution of itself; the plain and ASan builds run it");
	probe_reexec_with_secret(argv);
	test_setup_binary = getenv(VMM_PROCESS_BINARY_ENV); /* as an entry point would */
	use_binary(test_setup_binary);
	RUN_TEST(test_child_is_confined);
	RUN_TEST(test_child_dies_with_its_parent);
	RUN_TEST(test_child_is_not_dumpable);
	RUN_TEST(test_vm_process_is_executed_afresh);
	RUN_SEPARATE_TEST(test_born_in_cgroup_while_others_log);
	RUN_SEPARATE_TEST(test_clone3_refused_falls_back_to_fork);
	RUN_TEST(test_missing_program_is_a_sentence);
	RUN_TEST(test_failed_vm_reports_and_is_reaped);
	RUN_TEST(test_snapshot_answered_with_a_sentence);
	RUN_TEST(test_malformed_answer_ends_the_vm);
	RUN_TEST(test_malformed_start_fails);
	RUN_TEST(test_destroy_waits_for_a_slow_exit);
	RUN_TEST(test_sentences_lose_their_control_bytes);
	RUN_TEST(test_requests_to_a_deaf_vmm_do_not_block);
	return harness_finish();
}
