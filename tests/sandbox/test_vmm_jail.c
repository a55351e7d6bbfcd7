/*
 * The VMM process's jail (src/sandbox/vmm_jail.c) without a VM: a stand-in body in a VMM
 * process jails itself with a small plan (a writable directory, a read-only file, a file only
 * creation needs) and reports what it can reach; the test looks at it from outside, as root.
 * Each case runs from an intermediate parent, so the probe (once per process) runs afresh and
 * as that parent's user: as this test's user (root: the jail without a user namespace), as
 * nobody (through a user namespace), and with unshare refused by a seccomp filter (no jail,
 * a reason given, the host's root). The jail's root holds only the plan's entries and
 * /proc/self; /etc/passwd, the test's directory and /proc/1 are not there; the read-only
 * entries and the root itself refuse writes; the entry only creation needed is gone once
 * sealed; the mount, IPC and network namespaces are not the test's.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/byte_buffer.h"
#include "devices/fuse_server.h"
#include "harness.h"
#include "sandbox/vmm_jail.h"
#include "sandbox/vmm_process.h"
#include "vmm/snapshot_file.h"
#include "vmm/thread_filter.h"
#include "vmm_process_probe.h"
#include "test_snapshot_sections.h"

#define TEST_ERR_MAX 512
#define TEST_MOUNTS_MAX 2048
#define TEST_LINE_MAX 4096
#define TEST_KEEP_UID ((uid_t)-1)
#define TEST_NOBODY_UID ((uid_t)65534)
#define TEST_RO_TEXT "kept"
#define TEST_CREATION_TEXT "only for creation"
#define TEST_DIR_TEMPLATE "/tmp/voidbox-jail-test-XXXXXX"
#define TEST_OPEN_DIR_MODE 0755
#define TEST_SHARED_DIR_MODE 0777
#define TEST_FILE_MODE 0644
#define TEST_SHARED_FILE_MODE 0666
#define TEST_SNAPSHOT_CID 7
#define TEST_SNAPSHOT_NAME_MAX 64

struct jail_paths {
	char dir[sizeof(TEST_DIR_TEMPLATE)];	      /* the test's temporary directory */
	char rw[sizeof(TEST_DIR_TEMPLATE) + 8];	      /* a writable directory entry */
	char ro[sizeof(TEST_DIR_TEMPLATE) + 8];	      /* a read-only file entry */
	char creation[sizeof(TEST_DIR_TEMPLATE) + 16]; /* a file only creation needs */
	char made[sizeof(TEST_DIR_TEMPLATE) + 32];     /* what the body creates in rw */
	char outside[PATH_MAX];	 /* the test's working directory: not in the plan */
};

struct jail_report {
	int mode;
	int enter_rc;
	int passwd_errno;  /* access(/etc/passwd) */
	int outside_errno; /* access(the test's directory) */
	int proc_one_errno; /* access(/proc/1) */
	int proc_self_fd_errno; /* access(/proc/self/fd/N) of the control socket */
	int ro_read_ok;
	int ro_write_errno;
	int rw_create_errno;
	int root_create_errno;
	long creation_size; /* of the sealed entry, as the jail sees it */
	char mounts[TEST_MOUNTS_MAX]; /* mount points of /proc/self/mountinfo, one a line */
	char err[TEST_ERR_MAX];
};

struct jail_case_result {
	pid_t body;
	int mode;
	char reason[TEST_ERR_MAX];
	struct jail_report report;
};

struct jail_body_args {
	const struct jail_paths *paths;
	enum vmm_jail_mode mode;
};

static int errno_of(int rc)
{
	return rc < 0 ? errno : 0;
}

static void body_read_mounts(char *out, size_t len)
{
	char line[TEST_LINE_MAX], point[TEST_LINE_MAX];
	size_t used = 0;
	FILE *info = fopen("/proc/self/mountinfo", "re");

	out[0] = '\0';
	while (info && fgets(line, sizeof(line), info))
		if (sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 && used < len)
			used += (size_t)snprintf(out + used, len - used, "%s\n", point);
	if (info)
		fclose(info);
}

/* Jails itself, looks around, reports, then waits for the parent to close the socket. */
static int jail_body(int control_fd, void *opaque)
{
	const struct jail_body_args *args = opaque;
	const struct jail_paths *paths = args->paths;
	struct jail_report *report = calloc(1, sizeof(*report));
	struct vmm_jail *jail = vmm_jail_new(false);
	char text[sizeof(TEST_RO_TEXT)] = "", fd_path[TEST_ERR_MAX];
	struct stat st;
	int fd, rc = 0;
	char byte;

	if (!report || !jail)
		return 1;
	report->mode = args->mode;
	rc = vmm_jail_add(jail, paths->rw, NULL, VMM_JAIL_READ_WRITE, VMM_JAIL_WHILE_RUNNING,
			  report->err, sizeof(report->err));
	if (rc == 0)
		rc = vmm_jail_add(jail, paths->ro, NULL, VMM_JAIL_READ_ONLY, VMM_JAIL_WHILE_RUNNING,
				  report->err, sizeof(report->err));
	if (rc == 0)
		rc = vmm_jail_add(jail, paths->creation, NULL, VMM_JAIL_READ_ONLY,
				  VMM_JAIL_FOR_CREATION, report->err, sizeof(report->err));
	if (rc == 0)
		rc = vmm_jail_enter(jail, args->mode, report->err, sizeof(report->err));
	report->enter_rc = rc;
	vmm_jail_seal(jail);

	report->passwd_errno = errno_of(access("/etc/passwd", F_OK));
	report->outside_errno = errno_of(access(paths->outside, F_OK));
	report->proc_one_errno = errno_of(access("/proc/1", F_OK));
	snprintf(fd_path, sizeof(fd_path), "/proc/self/fd/%d", control_fd);
	report->proc_self_fd_errno = errno_of(access(fd_path, F_OK));
	fd = open(paths->ro, O_RDONLY | O_CLOEXEC);
	report->ro_read_ok = fd >= 0 && read(fd, text, sizeof(text) - 1) > 0 &&
			     strcmp(text, TEST_RO_TEXT) == 0;
	if (fd >= 0)
		close(fd);
	report->ro_write_errno = errno_of(open(paths->ro, O_WRONLY | O_CLOEXEC));
	fd = open(paths->made, O_WRONLY | O_CREAT | O_CLOEXEC, TEST_FILE_MODE);
	report->rw_create_errno = errno_of(fd);
	if (fd >= 0)
		close(fd);
	report->root_create_errno = errno_of(mkdir("/made-in-root", TEST_OPEN_DIR_MODE));
	report->creation_size = stat(paths->creation, &st) == 0 ? (long)st.st_size : -1;
	body_read_mounts(report->mounts, sizeof(report->mounts));

	if (send(control_fd, report, sizeof(*report), 0) != (ssize_t)sizeof(*report))
		return 1;
	while (recv(control_fd, &byte, 1, 0) > 0)
		;
	vmm_jail_free(jail);
	free(report);
	return 0;
}

/* Makes unshare fail with EPERM in the calling process and what it forks. */
static int deny_unshare(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int rc;

	if (!ctx)
		return -1;
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 0);
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

/* The intermediate parent: becomes uid, probes, spawns the body and relays what it says. */
static void jail_middle(uid_t uid, bool refuse_unshare, const struct jail_paths *paths,
			int to_test, int from_test)
{
	struct jail_case_result *result = calloc(1, sizeof(*result));
	struct jail_body_args args = { .paths = paths };
	char err[TEST_ERR_MAX], byte;
	int control_fd;

	if (!result)
		_exit(1);
	/* a change of uid makes a process non-dumpable: undo that, as a login would be */
	if (uid != TEST_KEEP_UID && (setresgid(uid, uid, uid) < 0 || setgroups(0, NULL) < 0 ||
				     setresuid(uid, uid, uid) < 0 ||
				     prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0))
		_exit(1);
	if (refuse_unshare && deny_unshare() < 0)
		_exit(1);
	args.mode = vmm_jail_host_mode();
	result->mode = args.mode;
	snprintf(result->reason, sizeof(result->reason), "%s", vmm_jail_off_reason());
	if (vmm_process_spawn(jail_body, &args, &result->body, &control_fd, err, sizeof(err)) < 0 ||
	    recv(control_fd, &result->report, sizeof(result->report), 0) !=
		    (ssize_t)sizeof(result->report))
		_exit(1);
	if (write(to_test, result, sizeof(*result)) != (ssize_t)sizeof(*result))
		_exit(1);
	/* the body stays up until the test has looked at it from outside */
	if (read(from_test, &byte, 1) < 0)
		_exit(1);
	close(control_fd);
	waitpid(result->body, NULL, 0);
	_exit(0);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	CHECK(fd >= 0);
	if (fd >= 0) {
		CHECK_INT_EQ(write(fd, text, strlen(text)), (long)strlen(text));
		CHECK_INT_EQ(fchmod(fd, mode), 0); /* whatever the umask */
		close(fd);
	}
}

static void make_paths(struct jail_paths *paths)
{
	snprintf(paths->dir, sizeof(paths->dir), "%s", TEST_DIR_TEMPLATE);
	CHECK(mkdtemp(paths->dir) != NULL);
	CHECK_INT_EQ(chmod(paths->dir, TEST_OPEN_DIR_MODE), 0);
	snprintf(paths->rw, sizeof(paths->rw), "%s/rw", paths->dir);
	snprintf(paths->ro, sizeof(paths->ro), "%s/ro.txt", paths->dir);
	snprintf(paths->creation, sizeof(paths->creation), "%s/creation.txt", paths->dir);
	snprintf(paths->made, sizeof(paths->made), "%s/made-in-jail", paths->rw);
	CHECK(getcwd(paths->outside, sizeof(paths->outside)) != NULL);
	CHECK_INT_EQ(mkdir(paths->rw, TEST_SHARED_DIR_MODE), 0);
	CHECK_INT_EQ(chmod(paths->rw, TEST_SHARED_DIR_MODE), 0);
	/* writable by anyone: only the jail's read-only mount refuses the write */
	write_file(paths->ro, TEST_RO_TEXT, TEST_SHARED_FILE_MODE);
	write_file(paths->creation, TEST_CREATION_TEXT, TEST_FILE_MODE);
}

static void remove_paths(const struct jail_paths *paths)
{
	unlink(paths->made);
	rmdir(paths->rw);
	unlink(paths->ro);
	unlink(paths->creation);
	rmdir(paths->dir);
}

/* Runs one case; the body's result, checked from outside while it is up. */
static void run_case(uid_t uid, bool refuse_unshare, const struct jail_paths *paths,
		     struct jail_case_result *result, char *outside_root_passwd_errno)
{
	int to_test[2], from_test[2];
	char path[PATH_MAX + 64];
	pid_t middle;

	memset(result, 0, sizeof(*result));
	CHECK_INT_EQ(pipe(to_test), 0);
	CHECK_INT_EQ(pipe(from_test), 0);
	middle = fork();
	if (middle == 0) {
		close(to_test[0]);
		close(from_test[1]);
		jail_middle(uid, refuse_unshare, paths, to_test[1], from_test[0]);
	}
	close(to_test[1]);
	close(from_test[0]);
	CHECK(middle > 0);
	CHECK_INT_EQ(read(to_test[0], result, sizeof(*result)), (long)sizeof(*result));
	fprintf(stderr, "  (mode %d%s%s; the body said: %s)\n", result->mode,
		result->reason[0] ? ", off because " : "", result->reason, result->report.err);
	if (result->body > 0) {
		struct stat st;

		snprintf(path, sizeof(path), "/proc/%d/root/etc/passwd", (int)result->body);
		*outside_root_passwd_errno = (char)errno_of(stat(path, &st));
		/* the jail's entries are there, at their own paths */
		if (result->mode != VMM_JAIL_OFF) {
			snprintf(path, sizeof(path), "/proc/%d/root%s", (int)result->body, paths->ro);
			CHECK_INT_EQ(stat(path, &st), 0);
			CHECK(!probe_same_namespace(result->body, "mnt"));
			CHECK(!probe_same_namespace(result->body, "ipc"));
			CHECK(!probe_same_namespace(result->body, "net"));
		} else {
			CHECK(probe_same_namespace(result->body, "mnt"));
		}
	}
	CHECK_INT_EQ(write(from_test[1], "x", 1), 1L);
	close(from_test[1]);
	close(to_test[0]);
	CHECK_INT_EQ(waitpid(middle, NULL, 0), middle);
}

/* What every jailed case shows, whichever way the namespaces were made. */
static void check_jailed(const struct jail_paths *paths, const struct jail_case_result *result,
			 char outside_passwd_errno)
{
	const struct jail_report *report = &result->report;
	char expected[TEST_MOUNTS_MAX];
	struct stat st;

	CHECK_INT_EQ(report->enter_rc, 0);
	CHECK_INT_EQ(report->passwd_errno, ENOENT);
	CHECK_INT_EQ(outside_passwd_errno, ENOENT);
	CHECK_INT_EQ(report->outside_errno, ENOENT);
	CHECK_INT_EQ(report->proc_one_errno, ENOENT);
	CHECK_INT_EQ(report->proc_self_fd_errno, 0);
	CHECK(report->ro_read_ok);
	CHECK_INT_EQ(report->ro_write_errno, EROFS);
	CHECK_INT_EQ(report->rw_create_errno, 0);
	CHECK_INT_EQ(stat(paths->made, &st), 0); /* made in the jail, seen on the host */
	CHECK_INT_EQ(report->root_create_errno, EROFS);
	CHECK_INT_EQ(report->creation_size, 0L); /* its empty mount point, once detached */
	/* shortest first, as they are bound */
	snprintf(expected, sizeof(expected), "/\n/proc/self\n%s\n%s\n", paths->rw, paths->ro);
	CHECK_STR_EQ(report->mounts, expected);
	unlink(paths->made);
}

static void test_jail_as_this_user(void)
{
	struct jail_case_result result;
	struct jail_paths paths;
	char passwd_errno = 0;

	make_paths(&paths);
	run_case(TEST_KEEP_UID, false, &paths, &result, &passwd_errno);
	CHECK_INT_EQ(result.mode, geteuid() == 0 ? VMM_JAIL_PRIVILEGED : VMM_JAIL_USER_NS);
	check_jailed(&paths, &result, passwd_errno);
	remove_paths(&paths);
}

/*
 * Only where this test may become nobody: the user namespace's way in, or, on a host that
 * refuses unprivileged user namespaces, the VMM process running without a jail.
 */
static void test_jail_through_a_user_namespace(void)
{
	struct jail_case_result result;
	struct jail_paths paths;
	char passwd_errno = 0;

	if (geteuid() != 0) {
		fprintf(stderr, "  (not root: test_jail_as_this_user covered the user namespace)\n");
		return;
	}
	make_paths(&paths);
	run_case(TEST_NOBODY_UID, false, &paths, &result, &passwd_errno);
	if (result.mode == VMM_JAIL_OFF) {
		/* a host without unprivileged user namespaces: the way without a jail, said */
		fprintf(stderr, "  (this host refuses nobody a user namespace: %s)\n",
			result.reason);
		CHECK(result.reason[0] != '\0');
		CHECK_INT_EQ(result.report.enter_rc, 0);
		CHECK_INT_EQ(result.report.passwd_errno, 0);
	} else {
		CHECK_INT_EQ(result.mode, VMM_JAIL_USER_NS);
		check_jailed(&paths, &result, passwd_errno);
	}
	remove_paths(&paths);
}

/* unshare refused: no jail, the reason names the step, and the body sees the host. */
static void test_no_jail_where_unshare_is_refused(void)
{
	struct jail_case_result result;
	struct jail_paths paths;
	char passwd_errno = -1;

	make_paths(&paths);
	run_case(TEST_KEEP_UID, true, &paths, &result, &passwd_errno);
	CHECK_INT_EQ(result.mode, VMM_JAIL_OFF);
	CHECK(strstr(result.reason, "unshare") != NULL);
	CHECK_INT_EQ(result.report.enter_rc, 0);
	CHECK_INT_EQ(result.report.passwd_errno, 0);
	CHECK_INT_EQ(passwd_errno, 0);
	remove_paths(&paths);
}

/* ---- a restore's plan ---- */

/* What a process in a restore's jail reached. */
struct restore_report {
	int plan_rc, enter_rc;
	bool planned;
	int passwd_errno, diff_state_errno, base_state_errno, runtime_dir_errno;
	int diff_write_errno, base_write_errno;
	/* the restored snapshot's own state: rewritten, replaced, removed */
	int diff_state_write_errno, diff_state_replace_errno, diff_state_unlink_errno;
	/* the disks and shares the diff's sections name */
	int disk_rw_errno, disk_ro_read_errno, disk_ro_write_errno;
	int share_rw_create_errno, share_ro_read_errno, share_ro_create_errno;
	/* then held as a snapshot-writing thread is (vmm_jail_hold_snapshot_writer) */
	int writer_rc, writer_area_errno, writer_diff_errno, writer_runtime_errno;
	int writer_base_read_errno, writer_pagemap_errno;
	char jailed_dir[PATH_MAX];
	char err[TEST_ERR_MAX];
};

struct restore_paths {
	char dir[sizeof(TEST_DIR_TEMPLATE)];
	char base[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char diff[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char runtime[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char socket[sizeof(TEST_DIR_TEMPLATE) + 2 * TEST_SNAPSHOT_NAME_MAX];
	char made[2][sizeof(TEST_DIR_TEMPLATE) + 2 * TEST_SNAPSHOT_NAME_MAX];
	/* named only in the diff's device sections */
	char disk_rw[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char disk_ro[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char share_rw[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char share_ro[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	char share_made[2][sizeof(TEST_DIR_TEMPLATE) + 2 * TEST_SNAPSHOT_NAME_MAX];
	/* a snapshot area (what snapshot create's temporary directory would be) */
	char area[sizeof(TEST_DIR_TEMPLATE) + TEST_SNAPSHOT_NAME_MAX];
	/* what the held process makes in the area, the diff and the runtime directory */
	char writer_made[3][sizeof(TEST_DIR_TEMPLATE) + 2 * TEST_SNAPSHOT_NAME_MAX];
};

/* Which device sections the diff gets. */
enum restore_devices {
	RESTORE_NO_DEVICES,
	RESTORE_DISKS_AND_SHARES, /* a disk and a share each read-write and read-only */
	RESTORE_MALFORMED_SHARE,  /* a share's section with no bytes */
};

/* errno of open(path, flags), 0 where it opened (the file is closed again). */
static int open_errno(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, TEST_FILE_MODE);

	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

static int access_errno(const char *dir, const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return errno_of(access(path, R_OK));
}

/*
 * In the jailed child, last: held as a VMM process's snapshot-writing thread with paths->area,
 * what it may still make and read.
 */
static void hold_as_snapshot_writer(const struct vmm_jail *jail,
				    const struct restore_paths *paths, struct restore_report *mine)
{
	const char *const areas[] = { paths->area, NULL };
	char state[PATH_MAX];

	mine->writer_rc = vmm_jail_hold_snapshot_writer(jail, areas, mine->err,
							sizeof(mine->err));
	mine->writer_area_errno = open_errno(paths->writer_made[0], O_WRONLY | O_CREAT);
	mine->writer_diff_errno = open_errno(paths->writer_made[1], O_WRONLY | O_CREAT);
	mine->writer_runtime_errno = open_errno(paths->writer_made[2], O_WRONLY | O_CREAT);
	snprintf(state, sizeof(state), "%s/%s", paths->base, VM_SNAPSHOT_STATE_FILE);
	mine->writer_base_read_errno = open_errno(state, O_RDONLY);
	mine->writer_pagemap_errno = open_errno("/proc/self/pagemap", O_RDONLY);
}

/* In a child: plans the restore of paths->diff, enters it, looks around; the report comes back. */
static void restore_in_jail(const struct restore_paths *paths, struct restore_report *report)
{
	enum vmm_jail_mode mode = vmm_jail_host_mode();
	struct vm_restore_options opts = { .vsock_socket_path = paths->socket }, jailed;
	int pipe_fds[2];
	pid_t child;

	memset(report, 0, sizeof(*report));
	CHECK_INT_EQ(pipe(pipe_fds), 0);
	child = fork();
	if (child == 0) {
		struct restore_report mine = { 0 };
		struct vmm_jail *jail = NULL;
		const char *dir = NULL;
		char state[PATH_MAX];
		int fd;

		close(pipe_fds[0]);
		mine.plan_rc = vmm_jail_plan_restore(paths->diff, &opts, &jail, &dir, &jailed,
						     mine.err, sizeof(mine.err));
		mine.planned = jail != NULL;
		/* as vmm_process.c adds a snapshot-writing VMM's areas */
		if (jail)
			mine.enter_rc = vmm_jail_add(jail, paths->area, NULL, VMM_JAIL_READ_WRITE,
						     VMM_JAIL_WHILE_RUNNING, mine.err,
						     sizeof(mine.err));
		if (jail && mine.enter_rc == 0)
			mine.enter_rc = vmm_jail_enter(jail, mode, mine.err, sizeof(mine.err));
		snprintf(mine.jailed_dir, sizeof(mine.jailed_dir), "%s", dir ? dir : "");
		mine.passwd_errno = errno_of(access("/etc/passwd", F_OK));
		mine.diff_state_errno = access_errno(paths->diff, VM_SNAPSHOT_STATE_FILE);
		mine.base_state_errno = access_errno(paths->base, VM_SNAPSHOT_STATE_FILE);
		mine.runtime_dir_errno = errno_of(access(paths->runtime, W_OK));
		fd = open(paths->made[0], O_WRONLY | O_CREAT | O_CLOEXEC, TEST_FILE_MODE);
		mine.diff_write_errno = errno_of(fd);
		if (fd >= 0)
			close(fd);
		mine.base_write_errno = errno_of(open(paths->made[1], O_WRONLY | O_CREAT | O_CLOEXEC,
						      TEST_FILE_MODE));
		snprintf(state, sizeof(state), "%s/%s", paths->diff, VM_SNAPSHOT_STATE_FILE);
		if (mode != VMM_JAIL_OFF) {
			mine.diff_state_write_errno = open_errno(state, O_WRONLY);
			mine.diff_state_replace_errno = errno_of(rename(paths->made[0], state));
			mine.diff_state_unlink_errno = errno_of(unlink(state));
		}
		mine.disk_rw_errno = open_errno(paths->disk_rw, O_RDWR);
		mine.disk_ro_read_errno = open_errno(paths->disk_ro, O_RDONLY);
		mine.disk_ro_write_errno = open_errno(paths->disk_ro, O_RDWR);
		mine.share_rw_create_errno = open_errno(paths->share_made[0], O_WRONLY | O_CREAT);
		mine.share_ro_read_errno = errno_of(access(paths->share_ro, R_OK | X_OK));
		mine.share_ro_create_errno = open_errno(paths->share_made[1], O_WRONLY | O_CREAT);
		hold_as_snapshot_writer(jail, paths, &mine);
		_exit(write(pipe_fds[1], &mine, sizeof(mine)) == (ssize_t)sizeof(mine) ? 0 : 1);
	}
	close(pipe_fds[1]);
	CHECK(child > 0);
	CHECK_INT_EQ(read(pipe_fds[0], report, sizeof(*report)), (long)sizeof(*report));
	close(pipe_fds[0]);
	CHECK_INT_EQ(waitpid(child, NULL, 0), child);
	fprintf(stderr, "  (mode %d; the plan said: %s)\n", (int)mode, report->err);
}

/* The disks and shares, and the sections of the diff that name them. */
static size_t make_devices(struct restore_paths *paths, enum restore_devices devices,
			   struct test_section sections[4])
{
	snprintf(paths->disk_rw, sizeof(paths->disk_rw), "%s/disk-rw.img", paths->dir);
	snprintf(paths->disk_ro, sizeof(paths->disk_ro), "%s/disk-ro.img", paths->dir);
	snprintf(paths->share_rw, sizeof(paths->share_rw), "%s/share-rw", paths->dir);
	snprintf(paths->share_ro, sizeof(paths->share_ro), "%s/share-ro", paths->dir);
	snprintf(paths->share_made[0], sizeof(paths->share_made[0]), "%s/made-in-jail",
		 paths->share_rw);
	snprintf(paths->share_made[1], sizeof(paths->share_made[1]), "%s/made-in-jail",
		 paths->share_ro);
	if (devices == RESTORE_MALFORMED_SHARE) {
		sections[0] = (struct test_section){ .device = "fs" };
		return 1;
	}
	if (devices == RESTORE_NO_DEVICES)
		return 0;
	write_file(paths->disk_rw, "", TEST_SHARED_FILE_MODE);
	write_file(paths->disk_ro, "", TEST_SHARED_FILE_MODE);
	CHECK_INT_EQ(mkdir(paths->share_rw, TEST_SHARED_DIR_MODE), 0);
	CHECK_INT_EQ(mkdir(paths->share_ro, TEST_SHARED_DIR_MODE), 0);
	disk_section(&sections[0], paths->disk_rw, false);
	disk_section(&sections[1], paths->disk_ro, true);
	share_section(&sections[2], "rw", paths->share_rw, false);
	share_section(&sections[3], "ro", paths->share_ro, true);
	return 4;
}

static void make_restore_paths(struct restore_paths *paths, enum restore_devices devices)
{
	struct test_section sections[4];
	uint64_t base_id = 0, diff_id = 0;
	size_t section_count;

	snprintf(paths->dir, sizeof(paths->dir), "%s", TEST_DIR_TEMPLATE);
	CHECK(mkdtemp(paths->dir) != NULL);
	CHECK_INT_EQ(chmod(paths->dir, TEST_OPEN_DIR_MODE), 0);
	snprintf(paths->base, sizeof(paths->base), "%s/base", paths->dir);
	snprintf(paths->diff, sizeof(paths->diff), "%s/diff", paths->dir);
	snprintf(paths->runtime, sizeof(paths->runtime), "%s/runtime", paths->dir);
	snprintf(paths->socket, sizeof(paths->socket), "%s/vsock.sock", paths->runtime);
	snprintf(paths->made[0], sizeof(paths->made[0]), "%s/made-in-jail", paths->diff);
	snprintf(paths->made[1], sizeof(paths->made[1]), "%s/made-in-jail", paths->base);
	CHECK_INT_EQ(mkdir(paths->runtime, TEST_OPEN_DIR_MODE), 0);
	snprintf(paths->area, sizeof(paths->area), "%s/area", paths->dir);
	CHECK_INT_EQ(mkdir(paths->area, TEST_OPEN_DIR_MODE), 0);
	snprintf(paths->writer_made[0], sizeof(paths->writer_made[0]), "%s/by-writer",
		 paths->area);
	snprintf(paths->writer_made[1], sizeof(paths->writer_made[1]), "%s/by-writer",
		 paths->diff);
	snprintf(paths->writer_made[2], sizeof(paths->writer_made[2]), "%s/by-writer",
		 paths->runtime);
	section_count = make_devices(paths, devices, sections);
	write_test_snapshot(paths->base, NULL, 0, NULL, 0, &base_id);
	write_test_snapshot(paths->diff, paths->base, base_id, sections, section_count, &diff_id);
	for (size_t i = 0; i < section_count; i++)
		byte_writer_free(&sections[i].bytes);
}

static void remove_restore_paths(const struct restore_paths *paths)
{
	const char *const snapshots[] = { paths->base, paths->diff };
	static const char *const files[] = { VM_SNAPSHOT_STATE_FILE, VM_SNAPSHOT_MEMORY_FILE,
					     VM_SNAPSHOT_DIFF_FILE, "made-in-jail", "by-writer" };
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(snapshots) / sizeof(snapshots[0]); i++) {
		for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
			snprintf(path, sizeof(path), "%s/%s", snapshots[i], files[f]);
			unlink(path);
		}
		rmdir(snapshots[i]);
	}
	for (size_t i = 0; i < sizeof(paths->writer_made) / sizeof(paths->writer_made[0]); i++)
		unlink(paths->writer_made[i]);
	rmdir(paths->area);
	unlink(paths->share_made[0]);
	unlink(paths->share_made[1]);
	rmdir(paths->share_rw);
	rmdir(paths->share_ro);
	unlink(paths->disk_rw);
	unlink(paths->disk_ro);
	rmdir(paths->runtime);
	rmdir(paths->dir);
}

/*
 * A restore of a diff: its root holds the diff (writable: the working set is recorded there),
 * its base (read-only) and the runtime directory, and not /etc/passwd.
 */
static void test_restore_plan_holds_the_snapshot_chain(void)
{
	struct restore_report report;
	struct restore_paths paths;

	make_restore_paths(&paths, RESTORE_NO_DEVICES);
	restore_in_jail(&paths, &report);
	CHECK_INT_EQ(report.plan_rc, 0);
	CHECK(report.planned);
	CHECK_STR_EQ(report.jailed_dir, paths.diff);
	if (vmm_jail_host_mode() != VMM_JAIL_OFF) {
		CHECK_INT_EQ(report.enter_rc, 0);
		CHECK_INT_EQ(report.passwd_errno, ENOENT);
		CHECK_INT_EQ(report.base_write_errno, EROFS);
		/* a working set may be added beside it, but its state stays as it was */
		CHECK_INT_EQ(report.diff_state_write_errno, EROFS);
		CHECK_INT_EQ(report.diff_state_replace_errno, EBUSY);
		CHECK_INT_EQ(report.diff_state_unlink_errno, EBUSY);
	}
	CHECK_INT_EQ(report.diff_state_errno, 0);
	CHECK_INT_EQ(report.base_state_errno, 0);
	CHECK_INT_EQ(report.runtime_dir_errno, 0);
	CHECK_INT_EQ(report.diff_write_errno, 0);
	/* held as the snapshot-writing thread: its area and the diff, the base and pagemap read */
	CHECK_INT_EQ(report.writer_rc, 0);
	CHECK_INT_EQ(report.writer_area_errno, 0);
	CHECK_INT_EQ(report.writer_diff_errno, 0);
	CHECK_INT_EQ(report.writer_base_read_errno, 0);
	CHECK_INT_EQ(report.writer_pagemap_errno, 0);
	if (vmm_thread_restrict_usable()) /* else the log says the thread is not held */
		CHECK_INT_EQ(report.writer_runtime_errno, EACCES);
	CHECK_INT_EQ(access(paths.writer_made[2], F_OK) < 0 ? errno : 0,
		     vmm_thread_restrict_usable() ? ENOENT : 0);
	remove_restore_paths(&paths);
}

/*
 * A restore of a diff whose sections name a disk and a share, each read-write and read-only:
 * all four are in its root at the paths the sections name, the read-only ones refusing writes.
 */
static void test_restore_plan_holds_disks_and_shares(void)
{
	struct restore_report report;
	struct restore_paths paths;

	make_restore_paths(&paths, RESTORE_DISKS_AND_SHARES);
	restore_in_jail(&paths, &report);
	CHECK_INT_EQ(report.plan_rc, 0);
	CHECK(report.planned);
	if (vmm_jail_host_mode() != VMM_JAIL_OFF) {
		CHECK_INT_EQ(report.enter_rc, 0);
		CHECK_INT_EQ(report.passwd_errno, ENOENT);
		CHECK_INT_EQ(report.disk_ro_write_errno, EROFS);
		CHECK_INT_EQ(report.share_ro_create_errno, EROFS);
	}
	CHECK_INT_EQ(report.disk_rw_errno, 0);
	CHECK_INT_EQ(report.disk_ro_read_errno, 0);
	CHECK_INT_EQ(report.share_rw_create_errno, 0);
	CHECK_INT_EQ(report.share_ro_read_errno, 0);
	CHECK_INT_EQ(access(paths.share_made[0], F_OK), 0); /* made through the jail */
	remove_restore_paths(&paths);
}

/* A share's section that cannot be read: no plan, and the sentence says to take it again. */
static void test_restore_with_a_malformed_share_is_refused(void)
{
	struct restore_report report;
	struct restore_paths paths;

	make_restore_paths(&paths, RESTORE_MALFORMED_SHARE);
	restore_in_jail(&paths, &report);
	CHECK_INT_EQ(report.plan_rc, -EBADMSG);
	CHECK(!report.planned);
	CHECK(strstr(report.err, "share section of the snapshot is malformed") != NULL);
	remove_restore_paths(&paths);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (HARNESS_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot follow the VMM process's namespaces and pivot; the "
				 "plain and ASan builds run it");
	RUN_TEST(test_jail_as_this_user);
	RUN_TEST(test_jail_through_a_user_namespace);
	RUN_TEST(test_no_jail_where_unshare_is_refused);
	RUN_TEST(test_restore_plan_holds_the_snapshot_chain);
	RUN_TEST(test_restore_plan_holds_disks_and_shares);
	RUN_TEST(test_restore_with_a_malformed_share_is_refused);
	return harness_finish();
}
