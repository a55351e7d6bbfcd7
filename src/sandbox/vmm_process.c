/*
 * vmm_process.h: the fork, the child's confinement, the execution of voidbox-vmm with its
 * launch, and the parent's side of the messages (sandbox/vmm_msg.h). The launch is encoded
 * before the fork into a sealed memfd the child puts on VMM_PROCESS_LAUNCH_FD, so the child
 * between fork and execution only moves descriptors and makes system calls, whatever other
 * threads of the caller held at the fork; an execution that fails says why on the control
 * socket as a "started" with the error. The parent reads the socket in short turns under a
 * lock, so a thread waiting for the VM's end and one waiting for an answer each take the
 * message meant for them. The child may be subverted: the parent never waits for room to send
 * to it, and its sentences reach the caller's errors without their control bytes.
 */
#include "sandbox/vmm_process.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/sched.h> /* struct clone_args, CLONE_INTO_CGROUP */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "sandbox/vmm_jail.h"
#include "sandbox/vmm_launch.h"
#include "vmm/thread_filter.h"

#define VMM_PROCESS_LOG "vmm-process"
/* Descriptors at or above this in the parent, so the child's dup2 to 0..4 never collides. */
#define VMM_PROCESS_PARENT_FD_FLOOR 10
/* How often the parent's waits look at the socket. */
#define VMM_PROCESS_POLL_MS 20
/* How long a destroyed VMM process gets to exit by itself before it is killed. */
#define VMM_PROCESS_EXIT_GRACE_MS 2000
/*
 * How long creating the VM may take (extracting a kernel into the cache, nested: a minute),
 * and how long a snapshot may (writing all of guest memory to a slow disk).
 */
#define VMM_PROCESS_START_TIMEOUT_MS 300000
#define VMM_PROCESS_REQUEST_TIMEOUT_MS 300000
#define VMM_PROCESS_MS_PER_SEC 1000
/* The child's exit statuses before it is voidbox-vmm. */
#define VMM_PROCESS_EXIT_ORPHANED 70
#define VMM_PROCESS_EXIT_SETUP 71
/* Where `meson install` puts voidbox-vmm (src/cli/meson.build). */
#ifndef VOIDBOX_VMM_INSTALLED_PATH
#define VOIDBOX_VMM_INSTALLED_PATH "/usr/local/libexec/" VMM_PROCESS_NAME
#endif
#define VMM_PROCESS_SELF_EXE "/proc/self/exe"
/* The memfd's name, as /proc/PID/fd shows it. */
#define VMM_PROCESS_LAUNCH_NAME "voidbox-vmm-launch"
#define VMM_PROCESS_LAUNCH_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

struct vmm_process {
	pid_t pid;
	int control_fd;
	pthread_mutex_t lock; /* one reader of the socket at a time, and the fields below */
	bool exited;
	enum vm_exit_reason reason;
	bool reaped;
	bool working_set_known; /* its "started": the restore prefetched its own snapshot's list */
	uint64_t working_set_prefaulted; /* its "started": pages the restore mapped into KVM */
	bool awaiting;	      /* a request was sent and its answer not yet taken */
	bool answered;	      /* its answer came: answer_status, answer_text */
	int answer_status;
	char answer_text[VMM_PROCESS_TEXT_MAX];
};

/* ---- the child's confinement ---- */

/*
 * Step by step as the header says; any failure ends the child before it runs anything.
 * bare_clone: the child came from clone3, so the C library's fork handlers did not run and a
 * lock another thread held at the clone (the log's, say) stays held here for good; such a
 * child touches no lock before it executes voidbox-vmm.
 */
static void vmm_process_child(int control_fd, int launch_fd, int null_fd, int log_fd,
			      pid_t parent, bool bare_clone,
			      int (*body)(int control_fd, void *opaque), void *opaque)
{
	sigset_t no_signals;

	sigemptyset(&no_signals);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (getppid() != parent) /* the parent died before the death signal was armed */
		_exit(VMM_PROCESS_EXIT_ORPHANED);
	/* no terminal: a Ctrl-C meant for the CLI must not kill the VM under it */
	if (setsid() < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	/* the caller may block SIGINT and SIGTERM to read them itself; the VMM takes them plainly */
	if (sigprocmask(SIG_SETMASK, &no_signals, NULL) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0 ||
	    dup2(log_fd, STDERR_FILENO) < 0 || dup2(control_fd, VMM_PROCESS_CONTROL_FD) < 0 ||
	    (launch_fd >= 0 && dup2(launch_fd, VMM_PROCESS_LAUNCH_FD) < 0) ||
	    close_range(launch_fd >= 0 ? VMM_PROCESS_LAUNCH_FD + 1 : VMM_PROCESS_CONTROL_FD + 1,
			~0U, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	/* no other process of the user may ptrace it or read its memory through /proc */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (!bare_clone)
		log_set_stream(stderr); /* now the caller's log, whose own descriptor is closed */
	_exit(body(VMM_PROCESS_CONTROL_FD, opaque));
}

/*
 * fork(), or where cgroup_fd names a cgroup directory, a clone3 straight into that cgroup
 * (CLONE_INTO_CGROUP, Linux 5.7). A process that moves itself by writing cgroup.procs takes
 * the kernel's cgroup-migration lock for writing, which waits out an RCU grace period (17-20
 * ms a VM in the nested harness); one born in the cgroup takes it only for reading. The
 * clone3 child has not run the C library's fork handlers, so only a child that makes nothing
 * but system calls until it executes another program may come from it: the caller says so
 * by passing a cgroup_fd. Where clone3 is refused (an older kernel, a seccomp filter, a cgroup
 * that cannot take the process), plain fork(), and the child moves itself as before.
 */
static pid_t vmm_process_fork_into(int cgroup_fd, bool *bare_clone)
{
	struct clone_args args = { .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD,
				   .cgroup = (uint64_t)cgroup_fd };
	long child;

	*bare_clone = false;
	if (cgroup_fd < 0)
		return fork();
	child = syscall(SYS_clone3, &args, sizeof(args));
	if (child < 0)
		return fork();
	*bare_clone = true; /* in the parent and in the child alike */
	return (pid_t)child;
}

/*
 * vmm_process_spawn, with launch_fd (-1: none) on VMM_PROCESS_LAUNCH_FD in the child, started
 * by vmm_process_fork_into(cgroup_fd).
 */
static int vmm_process_spawn_with(int (*body)(int control_fd, void *opaque), void *opaque,
				  int launch_fd, int cgroup_fd, pid_t *pid, int *control_fd,
				  char *err, size_t errlen)
{
	int pair[2] = { -1, -1 }, ours = -1, theirs = -1, null_fd = -1;
	pid_t parent = getpid(), child;
	FILE *log_stream;
	int rc = 0, log_fd;
	bool bare_clone;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot make the VMM process's control socket: %s",
			 strerror(errno));
		return rc;
	}
	ours = fcntl(pair[0], F_DUPFD_CLOEXEC, VMM_PROCESS_PARENT_FD_FLOOR);
	theirs = fcntl(pair[1], F_DUPFD_CLOEXEC, VMM_PROCESS_PARENT_FD_FLOOR);
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd >= 0 && null_fd < VMM_PROCESS_PARENT_FD_FLOOR) {
		int high = fcntl(null_fd, F_DUPFD_CLOEXEC, VMM_PROCESS_PARENT_FD_FLOOR);

		close(null_fd);
		null_fd = high;
	}
	close(pair[0]);
	close(pair[1]);
	if (ours < 0 || theirs < 0 || null_fd < 0) {
		rc = -EMFILE;
		snprintf(err, errlen, "cannot set up the VMM process's descriptors: too many open "
			 "files");
		goto out;
	}
	/*
	 * The child's stderr is where the caller logs (a shell's quiet log file, say: the
	 * terminal belongs to the shell's PTY), or /dev/null where logging is off.
	 */
	log_stream = log_current_stream();
	log_fd = log_stream ? fileno(log_stream) : -1;
	child = vmm_process_fork_into(cgroup_fd, &bare_clone);
	if (child < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot start the VMM process: %s", strerror(errno));
		goto out;
	}
	if (child == 0)
		vmm_process_child(theirs, launch_fd, null_fd, log_fd >= 0 ? log_fd : null_fd, parent,
				  bare_clone, body, opaque);
	*pid = child;
	*control_fd = ours;
	ours = -1;
out:
	if (ours >= 0)
		close(ours);
	if (theirs >= 0)
		close(theirs);
	if (null_fd >= 0)
		close(null_fd);
	return rc;
}

int vmm_process_spawn(int (*body)(int control_fd, void *opaque), void *opaque, pid_t *pid,
		      int *control_fd, char *err, size_t errlen)
{
	return vmm_process_spawn_with(body, opaque, -1, -1, pid, control_fd, err, errlen);
}

/* ---- voidbox-vmm: finding it, its launch, its execution ---- */

static bool vmm_process_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int vmm_process_found(char *path, size_t len, const char *found)
{
	return snprintf(path, len, "%s", found) < (int)len ? 0 : -ENAMETOOLONG;
}

/* What vmm_process_use_binary named; "" for none. */
static char vmm_process_named_binary[PATH_MAX];

int vmm_process_use_binary(const char *path)
{
	if (path && strlen(path) >= sizeof(vmm_process_named_binary))
		return -ENAMETOOLONG;
	snprintf(vmm_process_named_binary, sizeof(vmm_process_named_binary), "%s",
		 path ? path : "");
	return 0;
}

int vmm_process_binary(char *path, size_t len, char *err, size_t errlen)
{
	const char *named = vmm_process_named_binary;
	char self[PATH_MAX], beside[PATH_MAX] = "";
	ssize_t got;

	if (named[0]) {
		if (vmm_process_executable(named) && vmm_process_found(path, len, named) == 0)
			return 0;
		snprintf(err, errlen, "%s names %s, which is not an executable file: point it at "
			 "the %s this build made (beside the voidbox command), or unset it",
			 VMM_PROCESS_BINARY_ENV, named, VMM_PROCESS_NAME);
		return -ENOENT;
	}
	got = readlink(VMM_PROCESS_SELF_EXE, self, sizeof(self) - 1);
	if (got > 0) {
		self[got] = '\0';
		if (snprintf(beside, sizeof(beside), "%s/%s", dirname(self), VMM_PROCESS_NAME) <
			    (int)sizeof(beside) &&
		    vmm_process_executable(beside) && vmm_process_found(path, len, beside) == 0)
			return 0;
	}
	if (vmm_process_executable(VOIDBOX_VMM_INSTALLED_PATH) &&
	    vmm_process_found(path, len, VOIDBOX_VMM_INSTALLED_PATH) == 0)
		return 0;
	snprintf(err, errlen, "cannot find %s, the program every VM runs in: it is neither "
		 "beside this program (%s) nor at %s; install voidbox (meson install puts it at the "
		 "latter), or set %s to its path", VMM_PROCESS_NAME,
		 beside[0] ? beside : "unknown: " VMM_PROCESS_SELF_EXE " is unreadable",
		 VOIDBOX_VMM_INSTALLED_PATH, VMM_PROCESS_BINARY_ENV);
	return -ENOENT;
}

/* The launch encoded into a sealed memfd above the descriptor floor: its fd, or -errno. */
static int vmm_process_launch_file(const struct vmm_launch *launch, char *err, size_t errlen)
{
	uint8_t *bytes = NULL;
	size_t len = 0, done = 0;
	int fd, high = -1, rc = vmm_launch_encode(launch, &bytes, &len, err, errlen);

	if (rc < 0)
		return rc;
	fd = memfd_create(VMM_PROCESS_LAUNCH_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	while (fd >= 0 && done < len) {
		ssize_t put = write(fd, bytes + done, len - done);

		if (put < 0 && errno == EINTR)
			continue;
		if (put <= 0)
			break;
		done += (size_t)put;
	}
	if (fd >= 0 && done == len && fcntl(fd, F_ADD_SEALS, VMM_PROCESS_LAUNCH_SEALS) == 0)
		high = fcntl(fd, F_DUPFD_CLOEXEC, VMM_PROCESS_PARENT_FD_FLOOR);
	rc = high >= 0 ? high : -errno;
	if (high < 0)
		snprintf(err, errlen, "cannot hand the VM's configuration to its VMM process: %s",
			 strerror(errno));
	if (fd >= 0)
		close(fd);
	explicit_bzero(bytes, len);
	free(bytes);
	return rc;
}

/*
 * The child's last step: voidbox-vmm with an empty environment. Only reached again when the
 * execution failed, which the parent then reads as the VM's failed start.
 */
static int vmm_process_exec_body(int control_fd, void *opaque)
{
	const char *binary = opaque;
	char *const argv[] = { (char *)VMM_PROCESS_NAME, NULL };
	char *const envp[] = { NULL };
	struct vmm_msg failed = { .kind = VMM_MSG_STARTED };

	execve(binary, argv, envp);
	failed.status = -errno;
	/* strerrordesc_np: strerror's translation takes a lock a bare clone may find held */
	snprintf(failed.text, sizeof(failed.text), "cannot execute %s: %s: reinstall voidbox, or "
		 "set %s to the %s of this build", binary, strerrordesc_np(errno),
		 VMM_PROCESS_BINARY_ENV, VMM_PROCESS_NAME);
	vmm_msg_send_whole(control_fd, &failed);
	return VMM_PROCESS_EXIT_SETUP;
}

/* ---- the parent's side ---- */

/*
 * A sentence the child wrote, copied into out with its control bytes made spaces: the child
 * may be subverted, and the caller prints its errors on a terminal (an escape sequence) or
 * one line of a log (a line break).
 */
static void vmm_process_quote(char *out, size_t len, const char *text)
{
	if (len == 0)
		return;
	snprintf(out, len, "%s", text);
	text_make_printable(out, strlen(out));
}

/*
 * Sleeps until the child has exited (its pidfd turns readable) or the deadline passes; where
 * the kernel has no pidfd_open (before 5.3) or the call is refused, a short sleep. The child
 * tearing its KVM VM down is what a destroy waits for here (tens of ms nested), so a fixed
 * turn of polling would add up to a turn to every VM's end.
 */
static void vmm_process_sleep_until_exit(int pidfd, long deadline)
{
	long left = deadline - (long)clock_monotonic_ms();
	struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

	if (left <= 0)
		return;
	if (pidfd >= 0)
		poll(&pfd, 1, (int)left);
	else
		poll(NULL, 0, left < VMM_PROCESS_POLL_MS ? (int)left : VMM_PROCESS_POLL_MS);
}

static void vmm_process_reap(struct vmm_process *proc, int grace_ms)
{
	long deadline = (long)clock_monotonic_ms() + grace_ms;
	int pidfd = proc->reaped ? -1 : (int)syscall(SYS_pidfd_open, proc->pid, 0);

	while (!proc->reaped) {
		pid_t got = waitpid(proc->pid, NULL, WNOHANG);

		if (got == proc->pid || (got < 0 && errno != EINTR)) {
			proc->reaped = true;
			break;
		}
		if ((long)clock_monotonic_ms() >= deadline) {
			kill(proc->pid, SIGKILL);
			while (waitpid(proc->pid, NULL, 0) < 0 && errno == EINTR)
				;
			proc->reaped = true;
			break;
		}
		vmm_process_sleep_until_exit(pidfd, deadline);
	}
	if (pidfd >= 0)
		close(pidfd);
}

/*
 * Takes one message from the child, proc->lock held: "exited" ends the VM, "answer" is kept
 * for the request that waits for it; anything else (the socket's end, a malformed message, an
 * answer nobody asked for) means the VMM process is gone or broken, and so is its VM.
 */
static void vmm_process_take(struct vmm_process *proc)
{
	struct vmm_msg msg;
	int rc = vmm_msg_recv(proc->control_fd, &msg);

	if (rc == 0 && msg.kind == VMM_MSG_EXITED) {
		proc->exited = true;
		proc->reason = (enum vm_exit_reason)msg.reason;
	} else if (rc == 0 && msg.kind == VMM_MSG_ANSWER && proc->awaiting && !proc->answered) {
		proc->answered = true;
		proc->answer_status = vmm_msg_status(msg.status);
		vmm_process_quote(proc->answer_text, sizeof(proc->answer_text), msg.text);
	} else {
		proc->exited = true;
		proc->reason = VM_EXIT_INTERNAL_ERROR;
	}
}

/*
 * Reads the socket in turns of at most VMM_PROCESS_POLL_MS until *flag or the VM's end, or
 * timeout_ms (< 0: no limit) has passed. Returns whether *flag or the end came.
 */
static bool vmm_process_pump(struct vmm_process *proc, int timeout_ms, const bool *flag)
{
	struct pollfd pfd = { .fd = proc->control_fd, .events = POLLIN };
	long deadline = (long)clock_monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	bool done;

	for (;;) {
		long left = deadline - (long)clock_monotonic_ms();
		int turn = timeout_ms < 0 || left > VMM_PROCESS_POLL_MS ? VMM_PROCESS_POLL_MS
									: (int)(left > 0 ? left : 0);
		int ready;

		pthread_mutex_lock(&proc->lock);
		done = proc->exited || *flag;
		if (!done) {
			ready = poll(&pfd, 1, turn);
			if (ready > 0)
				vmm_process_take(proc);
			done = proc->exited || *flag;
		}
		pthread_mutex_unlock(&proc->lock);
		if (done || (timeout_ms >= 0 && left <= 0))
			return done;
	}
}

/*
 * vmm_process_launch, with launch_fd on the child's VMM_PROCESS_LAUNCH_FD (-1: none), born in
 * the cgroup cgroup_fd names where the kernel lets it (-1: none; see vmm_process_fork_into).
 */
static int vmm_process_launch_with(int (*body)(int control_fd, void *opaque), void *opaque,
				   int launch_fd, int cgroup_fd, struct vmm_process **out,
				   char *err, size_t errlen)
{
	struct vmm_process *proc = calloc(1, sizeof(*proc));
	int rc;

	*out = NULL;
	if (!proc) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&proc->lock, NULL);
	/* the child works on its copy of opaque, made by fork */
	rc = vmm_process_spawn_with(body, opaque, launch_fd, cgroup_fd, &proc->pid,
				    &proc->control_fd, err, errlen);
	if (rc < 0) {
		pthread_mutex_destroy(&proc->lock);
		free(proc);
		return rc;
	}
	*out = proc;
	return 0;
}

int vmm_process_launch(int (*body)(int control_fd, void *opaque), void *opaque,
		       struct vmm_process **out, char *err, size_t errlen)
{
	return vmm_process_launch_with(body, opaque, -1, -1, out, err, errlen);
}

/* Finds voidbox-vmm, encodes launch, and spawns the child that executes it with it. */
static int vmm_process_launch_exec(struct vmm_launch *launch, struct vmm_process **out,
				   char *err, size_t errlen)
{
	char binary[PATH_MAX];
	int launch_fd, cgroup_fd, rc;

	*out = NULL;
	rc = vmm_process_binary(binary, sizeof(binary), err, errlen);
	if (rc < 0)
		return rc;
	launch->jail_mode = vmm_jail_host_mode(); /* probed once, here, in the caller */
	launch->log_level = log_get_level();
	launch_fd = vmm_process_launch_file(launch, err, errlen);
	if (launch_fd < 0)
		return launch_fd;
	/* the child only executes voidbox-vmm: it may be born in its cgroup */
	cgroup_fd = launch->cgroup_dir ? open(launch->cgroup_dir, O_RDONLY | O_DIRECTORY |
								     O_CLOEXEC)
				       : -1;
	rc = vmm_process_launch_with(vmm_process_exec_body, binary, launch_fd, cgroup_fd, out,
				     err, errlen);
	if (cgroup_fd >= 0)
		close(cgroup_fd);
	close(launch_fd);
	return rc;
}

int vmm_process_await_started(struct vmm_process *proc, uint8_t secret[VM_SECRET_LEN],
			      char *err, size_t errlen)
{
	struct pollfd pfd = { .fd = proc->control_fd, .events = POLLIN };
	struct vmm_msg msg;
	int rc = 0;

	if (poll(&pfd, 1, VMM_PROCESS_START_TIMEOUT_MS) == 0) {
		rc = -ETIMEDOUT;
		snprintf(err, errlen, "the VMM process did not start the VM within %d s",
			 VMM_PROCESS_START_TIMEOUT_MS / VMM_PROCESS_MS_PER_SEC);
	} else if (vmm_msg_recv(proc->control_fd, &msg) < 0 || msg.kind != VMM_MSG_STARTED) {
		rc = -ECHILD;
		snprintf(err, errlen, "the VMM process ended before it started the VM (see the "
			 "log above)");
	} else if (msg.status != 0) {
		rc = msg.status < 0 ? vmm_msg_status(msg.status) : -EIO;
		vmm_process_quote(err, errlen, msg.text[0] ? msg.text : "the VM did not start");
	} else {
		proc->working_set_known = msg.working_set_known != 0;
		proc->working_set_prefaulted = msg.working_set_prefaulted;
		if (secret)
			memcpy(secret, msg.secret, VM_SECRET_LEN);
	}
	explicit_bzero(msg.secret, sizeof(msg.secret));
	if (rc == 0)
		log_debug(VMM_PROCESS_LOG, "the VM runs in process %ld", (long)proc->pid);
	return rc;
}

/* Waits for a launched child's "started"; on failure destroys it. *out: proc or NULL. */
static int vmm_process_started_or_gone(int rc, struct vmm_process *proc,
				       uint8_t secret[VM_SECRET_LEN], struct vmm_process **out,
				       char *err, size_t errlen)
{
	if (rc == 0 && (rc = vmm_process_await_started(proc, secret, err, errlen)) < 0) {
		vmm_process_destroy(proc);
		proc = NULL;
	}
	*out = rc == 0 ? proc : NULL;
	return rc;
}

int vmm_process_start(int (*body)(int control_fd, void *opaque), void *opaque,
		      uint8_t secret[VM_SECRET_LEN], struct vmm_process **out, char *err,
		      size_t errlen)
{
	struct vmm_process *proc = NULL;
	int rc = vmm_process_launch(body, opaque, &proc, err, errlen);

	return vmm_process_started_or_gone(rc, proc, secret, out, err, errlen);
}

int vmm_process_start_vm(const struct vm_config *cfg, const char *cgroup_dir, bool snapshots,
			 const char *const *snapshot_areas, struct vmm_process **out, char *err,
			 size_t errlen)
{
	struct vmm_launch launch = {
		.kind = VMM_LAUNCH_BOOT, .cfg = *cfg, .cgroup_dir = cgroup_dir,
		.main_role = snapshots ? VMM_THREAD_VMM_MAIN_SNAPSHOTS : VMM_THREAD_VMM_MAIN,
		.snapshot_areas = snapshots ? snapshot_areas : NULL,
	};
	struct vmm_process *proc = NULL;
	int rc = vmm_process_launch_exec(&launch, &proc, err, errlen);

	explicit_bzero(launch.cfg.secret, sizeof(launch.cfg.secret));
	return vmm_process_started_or_gone(rc, proc, NULL, out, err, errlen);
}

int vmm_process_launch_restore(const char *snapshot_dir, const struct vm_restore_options *opts,
			       const char *cgroup_dir, const char *const *snapshot_areas,
			       struct vmm_process **out, char *err, size_t errlen)
{
	struct vmm_launch launch = { .kind = VMM_LAUNCH_RESTORE, .snapshot_dir = snapshot_dir,
				     .restore = *opts, .cgroup_dir = cgroup_dir,
				     .main_role = VMM_THREAD_VMM_MAIN_SNAPSHOTS,
				     .snapshot_areas = snapshot_areas };

	return vmm_process_launch_exec(&launch, out, err, errlen);
}

int vmm_process_wait(struct vmm_process *proc, int timeout_ms, enum vm_exit_reason *reason)
{
	bool never = false;

	if (!vmm_process_pump(proc, timeout_ms, &never))
		return -ETIMEDOUT;
	if (reason) {
		pthread_mutex_lock(&proc->lock);
		*reason = proc->reason;
		pthread_mutex_unlock(&proc->lock);
	}
	return 0;
}

/* Sends msg (one request at a time) and waits for its answer: 0 or -errno with err. */
static int vmm_process_request(struct vmm_process *proc, struct vmm_msg *msg, const char *what,
			       char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&proc->lock);
	if (proc->exited || proc->awaiting) {
		pthread_mutex_unlock(&proc->lock);
		explicit_bzero(msg->secret, sizeof(msg->secret));
		snprintf(err, errlen, "cannot %s: %s", what,
			 proc->exited ? "the VM has ended" : "another request is under way");
		return proc->exited ? -ECHILD : -EBUSY;
	}
	proc->awaiting = true;
	proc->answered = false;
	rc = vmm_msg_send_nowait(proc->control_fd, msg);
	pthread_mutex_unlock(&proc->lock);
	if (rc == 0 && !vmm_process_pump(proc, VMM_PROCESS_REQUEST_TIMEOUT_MS, &proc->answered))
		rc = -ETIMEDOUT;
	pthread_mutex_lock(&proc->lock);
	if (rc == -ETIMEDOUT)
		snprintf(err, errlen, "cannot %s: the VMM process did not answer within %d s", what,
			 VMM_PROCESS_REQUEST_TIMEOUT_MS / VMM_PROCESS_MS_PER_SEC);
	else if (rc < 0 || !proc->answered)
		snprintf(err, errlen, "cannot %s: the VMM process ended or stopped reading its "
			 "requests (see the log above)", what);
	else if (proc->answer_status < 0)
		snprintf(err, errlen, "%s", proc->answer_text[0] ? proc->answer_text : what);
	if (rc == 0)
		rc = !proc->answered ? -ECHILD : proc->answer_status;
	proc->awaiting = false;
	proc->answered = false;
	pthread_mutex_unlock(&proc->lock);
	return rc;
}

int vmm_process_snapshot(struct vmm_process *proc, const char *dir,
			 const struct vm_snapshot_options *opts,
			 const uint8_t secret[VM_SECRET_LEN], char *err, size_t errlen)
{
	struct vmm_msg msg;
	int dir_len, parent_len;

	memset(&msg, 0, sizeof(msg));
	msg.kind = VMM_MSG_SNAPSHOT;
	msg.snapshot_type = opts->type;
	msg.snapshot_after = opts->after;
	dir_len = snprintf(msg.text, sizeof(msg.text), "%s", dir);
	parent_len = snprintf(msg.parent_dir, sizeof(msg.parent_dir), "%s",
			      opts->parent_dir ? opts->parent_dir : "");
	if (dir_len < 0 || (size_t)dir_len >= sizeof(msg.text) || parent_len < 0 ||
	    (size_t)parent_len >= sizeof(msg.parent_dir)) {
		snprintf(err, errlen, "the snapshot directory's path is too long: use a shorter one");
		return -ENAMETOOLONG;
	}
	memcpy(msg.secret, secret, sizeof(msg.secret));
	return vmm_process_request(proc, &msg, "take the snapshot", err, errlen);
}

bool vmm_process_working_set_known(const struct vmm_process *proc)
{
	return proc->working_set_known;
}

uint64_t vmm_process_working_set_prefaulted(const struct vmm_process *proc)
{
	return proc->working_set_prefaulted;
}

int vmm_process_record_working_set(struct vmm_process *proc, char *err, size_t errlen)
{
	struct vmm_msg msg;

	memset(&msg, 0, sizeof(msg));
	msg.kind = VMM_MSG_RECORD_WORKING_SET;
	return vmm_process_request(proc, &msg, "record the working set", err, errlen);
}

void vmm_process_request_stop(struct vmm_process *proc)
{
	struct vmm_msg msg;

	memset(&msg, 0, sizeof(msg));
	msg.kind = VMM_MSG_STOP;
	vmm_msg_send_nowait(proc->control_fd, &msg);
}

void vmm_process_destroy(struct vmm_process *proc)
{
	enum vm_exit_reason reason;

	if (!proc)
		return;
	vmm_process_request_stop(proc);
	vmm_process_wait(proc, VMM_PROCESS_EXIT_GRACE_MS, &reason);
	close(proc->control_fd);
	vmm_process_reap(proc, VMM_PROCESS_EXIT_GRACE_MS);
	pthread_mutex_destroy(&proc->lock);
	free(proc);
}

pid_t vmm_process_pid(const struct vmm_process *proc)
{
	return proc->pid;
}
