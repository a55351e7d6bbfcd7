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
#include <limits.h>
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
#define TEST_DIR_TEMPLATE "/tmp/voidbox-landlock-XXXXXX"
#define TEST_FILE_NAME "file"

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
	{ VMM_THREAD_VMM_MAIN, false, false, false, false },
	{ VMM_THREAD_VMM_MAIN_SNAPSHOTS, true, true, false, true },
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

/* A thread under the snapshots role's filter starts a thread that confines itself as a vCPU. */
struct thread_start_probe {
	int start_rc;	 /* pthread_create */
	int confine_rc;	 /* the new thread's vmm_thread_confine(VMM_THREAD_VCPU) */
	int name_rc;	 /* the new thread's prctl(PR_SET_NAME) */
	int dumpable_errno; /* prctl(PR_SET_DUMPABLE, 1) */
};

static void *started_thread(void *arg)
{
	struct thread_start_probe *p = arg;

	p->name_rc = prctl(PR_SET_NAME, TEST_THREAD_NAME, 0, 0, 0);
	p->confine_rc = vmm_thread_confine(VMM_THREAD_VCPU);
	return NULL;
}

static void *starting_thread(void *arg)
{
	struct thread_start_probe *p = arg;
	pthread_t thread;

	if (vmm_thread_confine(VMM_THREAD_VMM_MAIN_SNAPSHOTS) < 0)
		return NULL;
	p->dumpable_errno = prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 ? errno : 0;
	p->start_rc = pthread_create(&thread, NULL, started_thread, p);
	if (p->start_rc == 0)
		pthread_join(thread, NULL);
	return NULL;
}

/*
 * A VMM process's main thread that resumes a VM after a snapshot starts its vCPU threads again:
 * its filter lets a thread start and install the vCPU filter, and nothing broader (no process,
 * no dumpable process).
 */
static void test_snapshots_role_starts_threads(void)
{
	struct thread_start_probe p = { -1, -1, -1, -1 };
	pthread_t thread;

	CHECK_INT_EQ(pthread_create(&thread, NULL, starting_thread, &p), 0);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(p.start_rc, 0);
	CHECK_INT_EQ(p.name_rc, 0);
	CHECK_INT_EQ(p.confine_rc, 0);
	CHECK_INT_EQ(p.dumpable_errno, EPERM);
}

struct landlock_probe {
	const char *dirs[2];
	const char *elsewhere;
	int restrict_rc;
	int read_errno[2]; /* a file in each allowed directory */
	int elsewhere_errno;
	int create_errno;  /* a new file in the first directory */
};

static int open_errno(const char *dir, const char *name, int flags)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return call_errno(open(path, flags | O_CLOEXEC, 0600));
}

static void *landlock_thread(void *arg)
{
	struct landlock_probe *p = arg;

	p->restrict_rc = vmm_thread_restrict_to_dirs(p->dirs, 2, true);
	for (int i = 0; i < 2; i++)
		p->read_errno[i] = open_errno(p->dirs[i], TEST_FILE_NAME, O_RDONLY);
	p->elsewhere_errno = open_errno(p->elsewhere, TEST_FILE_NAME, O_RDONLY);
	p->create_errno = open_errno(p->dirs[0], "new", O_WRONLY | O_CREAT);
	return NULL;
}

/* count fresh temporary directories, each holding one empty TEST_FILE_NAME */
static void make_dirs_with_file(char (*dirs)[sizeof(TEST_DIR_TEMPLATE)], int count)
{
	for (int i = 0; i < count; i++) {
		char path[PATH_MAX];
		int fd;

		snprintf(dirs[i], sizeof(dirs[i]), "%s", TEST_DIR_TEMPLATE);
		if (!mkdtemp(dirs[i]))
			harness_fail_setup("a temporary directory");
		snprintf(path, sizeof(path), "%s/%s", dirs[i], TEST_FILE_NAME);
		fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			harness_fail_setup("a file in a temporary directory");
		close(fd);
	}
}

static void remove_dirs(char (*dirs)[sizeof(TEST_DIR_TEMPLATE)], int count)
{
	for (int i = 0; i < count; i++) {
		char cmd[PATH_MAX];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dirs[i]);
		CHECK_INT_EQ(system(cmd), 0);
	}
}

/*
 * Landlock (its own meson test: it skips where the kernel has none): a thread held to two
 * directories, read-only, reads files in both, nothing in a third, and creates nothing.
 */
static void test_restrict_to_dirs(void)
{
	char dirs[3][sizeof(TEST_DIR_TEMPLATE)];
	struct landlock_probe p = { 0 };
	pthread_t thread;

	if (!vmm_thread_restrict_usable())
		harness_skip_all("this kernel has no Landlock (version 2 or later)");
	make_dirs_with_file(dirs, 3);
	p.dirs[0] = dirs[0];
	p.dirs[1] = dirs[1];
	p.elsewhere = dirs[2];
	CHECK_INT_EQ(pthread_create(&thread, NULL, landlock_thread, &p), 0);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(p.restrict_rc, 0);
	CHECK_INT_EQ(p.read_errno[0], 0);
	CHECK_INT_EQ(p.read_errno[1], 0);
	CHECK_INT_EQ(p.elsewhere_errno, EACCES);
	CHECK_INT_EQ(p.create_errno, EACCES);
	/* the restriction was the thread's alone */
	CHECK_INT_EQ(open_errno(dirs[2], TEST_FILE_NAME, O_RDONLY), 0);
	remove_dirs(dirs, 3);
}

struct landlock_paths_probe {
	struct vmm_thread_path paths[3]; /* a writable and a read-only directory, a file */
	const char *elsewhere;
	int restrict_rc;
	int create_errno[2];   /* a new file in each directory */
	int read_errno[2];     /* the file in each directory */
	int file_read_errno;   /* the file rule, read */
	int file_write_errno;  /* the file rule, written */
	int elsewhere_errno;
};

static void *landlock_paths_thread(void *arg)
{
	struct landlock_paths_probe *p = arg;

	p->restrict_rc = vmm_thread_restrict_to(p->paths, 3);
	for (int i = 0; i < 2; i++) {
		p->create_errno[i] = open_errno(p->paths[i].path, "new", O_WRONLY | O_CREAT);
		p->read_errno[i] = open_errno(p->paths[i].path, TEST_FILE_NAME, O_RDONLY);
	}
	p->file_read_errno = call_errno(open(p->paths[2].path, O_RDONLY | O_CLOEXEC));
	p->file_write_errno = call_errno(open(p->paths[2].path, O_WRONLY | O_CLOEXEC));
	p->elsewhere_errno = open_errno(p->elsewhere, "new", O_WRONLY | O_CREAT);
	return NULL;
}

/*
 * Landlock with each path's own access (what a VMM process's snapshot-writing thread gets):
 * a file made in the writable directory, none in the read-only one (its file still read),
 * the file rule read but not written, and nothing made in a directory outside them all.
 */
static void test_restrict_to_paths(void)
{
	char dirs[4][sizeof(TEST_DIR_TEMPLATE)], file[PATH_MAX];
	struct landlock_paths_probe p = { 0 };
	pthread_t thread;

	if (!vmm_thread_restrict_usable())
		harness_skip_all("this kernel has no Landlock (version 2 or later)");
	make_dirs_with_file(dirs, 4);
	snprintf(file, sizeof(file), "%s/%s", dirs[2], TEST_FILE_NAME);
	p.paths[0] = (struct vmm_thread_path){ .path = dirs[0] };
	p.paths[1] = (struct vmm_thread_path){ .path = dirs[1], .read_only = true };
	p.paths[2] = (struct vmm_thread_path){ .path = file, .read_only = true };
	p.elsewhere = dirs[3];
	CHECK_INT_EQ(pthread_create(&thread, NULL, landlock_paths_thread, &p), 0);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(p.restrict_rc, 0);
	CHECK_INT_EQ(p.create_errno[0], 0);
	CHECK_INT_EQ(p.create_errno[1], EACCES);
	CHECK_INT_EQ(p.read_errno[0], 0);
	CHECK_INT_EQ(p.read_errno[1], 0);
	CHECK_INT_EQ(p.file_read_errno, 0);
	CHECK_INT_EQ(p.file_write_errno, EACCES);
	CHECK_INT_EQ(p.elsewhere_errno, EACCES);
	remove_dirs(dirs, 4);
}

static void test_unknown_role_refused(void)
{
	CHECK_INT_EQ(vmm_thread_confine(VMM_THREAD_ROLE_COUNT), -EINVAL);
	CHECK_STR_EQ(vmm_thread_role_name(VMM_THREAD_ROLE_COUNT), "unknown");
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (HARNESS_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot run threads that installed seccomp filters; the "
				 "plain and ASan builds run this test");
	RUN_TEST(test_every_role_filtered);
	RUN_TEST(test_unknown_role_refused);
	RUN_TEST(test_snapshots_role_starts_threads);
	RUN_SEPARATE_TEST(test_restrict_to_dirs);
	RUN_SEPARATE_TEST(test_restrict_to_paths);
	return harness_finish();
}
