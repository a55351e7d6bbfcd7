/*
 * The seccomp filters of the VMM's thread roles: once a thread installed its role's filter,
 * the kernel reports it filtered (Seccomp: 2 in its status), the calls its loop needs still
 * work, and calls outside its list -- starting a process, making a unix socket, opening a
 * file for writing where the role has no business to -- fail with EPERM. Each role is probed
 * with the same calls and checked against a table of what it may do. Other threads of the
 * process stay unfiltered.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/thread_filter.h"

#define TEST_STATUS_MAX 4096
#define TEST_THREAD_NAME "probe-worker"
#define TEST_READ_PATH "/etc/hostname"

/* What one role may do, of the calls the probe makes. */
struct role_expect {
	enum vmm_thread_role role;
	bool open_read;	  /* open(TEST_READ_PATH, O_RDONLY) */
	bool open_write;  /* open(scratch, O_WRONLY | O_CREAT) */
	bool inet_socket; /* socket(AF_INET, SOCK_DGRAM) */
	bool fdatasync;	  /* fdatasync on a descriptor it was handed */
};

static const struct role_expect role_expects[] = {
	{ VMM_THREAD_VCPU, false, false, false, false },
	{ VMM_THREAD_DEVICE_WORKER, false, false, false, false },
	{ VMM_THREAD_BLOCK_WORKER, false, false, false, true },
	{ VMM_THREAD_SHARE_WORKER, true, true, false, true },
	{ VMM_THREAD_NET_WORKER, true, false, true, false },
	{ VMM_THREAD_CHANNEL_READER, false, false, false, false },
};

struct probe {
	enum vmm_thread_role role;
	const char *scratch_path;
	int scratch_fd;	   /* handed to the thread, as a disk would be */
	int pipe_fd;
	int seccomp_mode;  /* from /proc/thread-self/status */
	char comm[32];	   /* from /proc/thread-self/comm */
	int open_read_errno;
	int open_write_errno;
	int inet_errno;	   /* socket(AF_INET) */
	int unix_errno;	   /* socket(AF_UNIX) */
	int netlink_errno; /* socket(AF_NETLINK) */
	int fork_errno;	   /* fork() */
	int fdatasync_errno;
	bool pipe_write_ok;
};

static int call_errno(long rc)
{
	int err = rc < 0 ? errno : 0;

	if (rc >= 0)
		close((int)rc);
	return err;
}

/* Reads what one of this thread's /proc files says through a descriptor opened beforehand. */
static void read_proc_text(int fd, char *out, size_t len)
{
	ssize_t n = fd >= 0 ? pread(fd, out, len - 1, 0) : -1;

	out[n > 0 ? n : 0] = '\0';
}

static void *probe_thread(void *arg)
{
	struct probe *p = arg;
	int status_fd = open("/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
	int comm_fd = open("/proc/thread-self/comm", O_RDONLY | O_CLOEXEC);
	char status[TEST_STATUS_MAX];
	const char *line;

	vmm_thread_enter(p->role, TEST_THREAD_NAME, true);
	read_proc_text(status_fd, status, sizeof(status));
	read_proc_text(comm_fd, p->comm, sizeof(p->comm));
	p->comm[strcspn(p->comm, "\n")] = '\0';
	close(status_fd);
	close(comm_fd);
	line = strstr(status, "\nSeccomp:");
	p->seccomp_mode = line ? atoi(line + strlen("\nSeccomp:")) : -1;
	p->open_read_errno = call_errno(open(TEST_READ_PATH, O_RDONLY | O_CLOEXEC));
	p->open_write_errno = call_errno(open(p->scratch_path, O_WRONLY | O_CREAT | O_CLOEXEC,
					      0600));
	p->inet_errno = call_errno(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	p->unix_errno = call_errno(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	p->netlink_errno = call_errno(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0));
	/* fork() through the raw call: glibc's wrapper runs handlers first */
	p->fork_errno = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) < 0 ? errno : 0;
	p->fdatasync_errno = fdatasync(p->scratch_fd) < 0 ? errno : 0;
	p->pipe_write_ok = write(p->pipe_fd, "x", 1) == 1;
	return NULL;
}

static void check_role(const struct role_expect *expect)
{
	char scratch[] = "/tmp/voidbox-filter-XXXXXX";
	struct probe p = { .role = expect->role, .scratch_path = scratch };
	int pipe_fds[2];
	pthread_t thread;
	int fd;

	fprintf(stderr, "  role %s\n", vmm_thread_role_name(expect->role));
	p.scratch_fd = mkstemp(scratch);
	if (p.scratch_fd < 0 || pipe(pipe_fds) < 0)
		harness_fail_setup("a scratch file and a pipe");
	p.pipe_fd = pipe_fds[1];
	CHECK_INT_EQ(pthread_create(&thread, NULL, probe_thread, &p), 0);
	pthread_join(thread, NULL);
	close(pipe_fds[0]);
	close(pipe_fds[1]);
	close(p.scratch_fd);
	unlink(scratch);

	CHECK_INT_EQ(p.seccomp_mode, 2);
	CHECK_STR_EQ(p.comm, TEST_THREAD_NAME);
	CHECK(p.pipe_write_ok);
	CHECK_INT_EQ(p.fork_errno, EPERM);
	CHECK_INT_EQ(p.unix_errno, EPERM);
	CHECK_INT_EQ(p.netlink_errno, EPERM);
	CHECK_INT_EQ(p.open_read_errno, expect->open_read ? 0 : EPERM);
	CHECK_INT_EQ(p.open_write_errno, expect->open_write ? 0 : EPERM);
	CHECK_INT_EQ(p.inet_errno, expect->inet_socket ? 0 : EPERM);
	CHECK_INT_EQ(p.fdatasync_errno, expect->fdatasync ? 0 : EPERM);
	/* the filter was the probe thread's alone */
	fd = open(TEST_READ_PATH, O_RDONLY);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
}

static void test_every_role_filtered(void)
{
	CHECK_INT_EQ((int)(sizeof(role_expects) / sizeof(role_expects[0])),
		     VMM_THREAD_ROLE_COUNT);
	for (size_t i = 0; i < sizeof(role_expects) / sizeof(role_expects[0]); i++)
		check_role(&role_expects[i]);
}

static void test_unknown_role_refused(void)
{
	CHECK_INT_EQ(vmm_thread_confine(VMM_THREAD_ROLE_COUNT), -EINVAL);
	CHECK_STR_EQ(vmm_thread_role_name(VMM_THREAD_ROLE_COUNT), "unknown");
}

int main(void)
{
	if (HARNESS_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot run threads that installed seccomp filters; the "
				 "plain and ASan builds run this test");
	RUN_TEST(test_every_role_filtered);
	RUN_TEST(test_unknown_role_refused);
	return harness_finish();
}
