/*
 * The seccomp filters of vCPU and device-worker threads: once a thread installed its role's
 * filter, the kernel reports it filtered (Seccomp: 2 in its status), the calls its loop needs
 * still work, and calls outside its list -- opening a file, making a socket, starting a
 * process -- fail with EPERM. Other threads of the process stay unfiltered.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/thread_filter.h"

#if defined(__has_include) && __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TEST_UNDER_VALGRIND (RUNNING_ON_VALGRIND != 0)
#else
#define TEST_UNDER_VALGRIND 0
#endif

#define TEST_STATUS_MAX 4096

struct probe {
	enum vmm_thread_role role;
	int confine_rc;
	int seccomp_mode;  /* from /proc/thread-self/status */
	int open_errno;	   /* open() of a file */
	int socket_errno;  /* socket() */
	int fork_errno;	   /* fork() */
	bool pipe_write_ok;
	int pipe_fd;
};

/* The Seccomp: line of this thread's status, read before the filter forbids open(). */
static int thread_seccomp_mode(int status_fd)
{
	char text[TEST_STATUS_MAX] = "";
	ssize_t n = pread(status_fd, text, sizeof(text) - 1, 0);
	const char *line = n > 0 ? strstr(text, "\nSeccomp:") : NULL;

	return line ? atoi(line + strlen("\nSeccomp:")) : -1;
}

static void *probe_thread(void *arg)
{
	struct probe *p = arg;
	int status_fd = open("/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
	int fd;

	p->confine_rc = vmm_thread_confine(p->role);
	p->seccomp_mode = thread_seccomp_mode(status_fd);
	close(status_fd);
	fd = open("/etc/hostname", O_RDONLY);
	p->open_errno = fd < 0 ? errno : 0;
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	p->socket_errno = fd < 0 ? errno : 0;
	/* fork() through the raw call: glibc's wrapper runs handlers first */
	p->fork_errno = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) < 0 ? errno : 0;
	p->pipe_write_ok = write(p->pipe_fd, "x", 1) == 1;
	return NULL;
}

static void run_probe(struct probe *p)
{
	int pipe_fds[2];
	pthread_t thread;

	CHECK_INT_EQ(pipe(pipe_fds), 0);
	p->pipe_fd = pipe_fds[1];
	CHECK_INT_EQ(pthread_create(&thread, NULL, probe_thread, p), 0);
	pthread_join(thread, NULL);
	close(pipe_fds[0]);
	close(pipe_fds[1]);
}

static void check_role(enum vmm_thread_role role)
{
	struct probe p = { .role = role };
	int fd;

	run_probe(&p);
	CHECK_INT_EQ(p.confine_rc, 0);
	CHECK_INT_EQ(p.seccomp_mode, 2);
	CHECK_INT_EQ(p.open_errno, EPERM);
	CHECK_INT_EQ(p.socket_errno, EPERM);
	CHECK_INT_EQ(p.fork_errno, EPERM);
	CHECK(p.pipe_write_ok);
	/* the filter was the probe thread's alone */
	fd = open("/etc/hostname", O_RDONLY);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
}

static void test_vcpu_filter(void)
{
	check_role(VMM_THREAD_VCPU);
}

static void test_device_worker_filter(void)
{
	check_role(VMM_THREAD_DEVICE_WORKER);
}

int main(void)
{
	if (TEST_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot run threads that installed seccomp filters; the "
				 "plain and ASan builds run this test");
	RUN_TEST(test_vcpu_filter);
	RUN_TEST(test_device_worker_filter);
	return harness_finish();
}
