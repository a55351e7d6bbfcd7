/*
 * vmm_process.h: the fork, the child's confinement and the parent-child messages. One message
 * type, fixed size, so a reader takes exactly one recv() per message and refuses any other
 * length; the child answers "started" once, then "exited" once, and takes only "stop" (or the
 * socket's end, which means the same). The child polls its socket and its VM in turn with a
 * short period instead of running a second thread, so its main thread stays one simple loop
 * under a small filter.
 */
#include "sandbox/vmm_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "sandbox/vmm_cgroup.h"
#include "sandbox/vmm_jail.h"
#include "vmm/thread_filter.h"

#define VMM_PROCESS_LOG "vmm-process"
#define VMM_PROCESS_TEXT_MAX 1024
/* Descriptors at or above this in the parent, so the child's dup2 to 0..3 never collides. */
#define VMM_PROCESS_PARENT_FD_FLOOR 10
/* How often the child looks at its VM between control messages. */
#define VMM_PROCESS_POLL_MS 20
/* How long a destroyed VMM process gets to exit by itself before it is killed. */
#define VMM_PROCESS_EXIT_GRACE_MS 2000
/* How long creating the VM may take (extracting a kernel into the cache, nested: a minute). */
#define VMM_PROCESS_START_TIMEOUT_MS 300000
#define VMM_PROCESS_MS_PER_SEC 1000
/* The child's exit statuses. */
#define VMM_PROCESS_EXIT_ORPHANED 70
#define VMM_PROCESS_EXIT_SETUP 71
/* /proc/self/stat, fields counted from 1: the state follows "(comm)", arg_start is 48th. */
#define VMM_PROCESS_STAT_ARG_START_FIELD 48
#define VMM_PROCESS_STAT_STATE_FIELD 3
#define VMM_PROCESS_STAT_MAX 4096

enum vmm_msg_kind {
	VMM_MSG_STARTED = 1, /* child: status (0 or -errno) and, on failure, the sentence */
	VMM_MSG_EXITED,	     /* child: the VM ended, reason */
	VMM_MSG_STOP,	     /* parent: stop the VM */
};

struct vmm_msg {
	uint32_t kind;
	int32_t status;
	uint32_t reason;
	char text[VMM_PROCESS_TEXT_MAX];
};

struct vmm_process {
	pid_t pid;
	int control_fd;
	pthread_mutex_t lock; /* one reader of the socket at a time */
	bool exited;
	enum vm_exit_reason reason;
	bool reaped;
};

static int vmm_msg_send(int fd, enum vmm_msg_kind kind, int status, uint32_t reason,
			const char *text)
{
	struct vmm_msg msg;

	memset(&msg, 0, sizeof(msg));
	msg.kind = kind;
	msg.status = status;
	msg.reason = reason;
	if (text)
		snprintf(msg.text, sizeof(msg.text), "%s", text);
	return send(fd, &msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg) ? 0 : -EIO;
}

/* One message, or -EIO for the socket's end or any malformed message. */
static int vmm_msg_recv(int fd, struct vmm_msg *msg)
{
	ssize_t got;

	do
		got = recv(fd, msg, sizeof(*msg), MSG_TRUNC);
	while (got < 0 && errno == EINTR);
	if (got != (ssize_t)sizeof(*msg))
		return -EIO;
	msg->text[sizeof(msg->text) - 1] = '\0';
	if (msg->kind < VMM_MSG_STARTED || msg->kind > VMM_MSG_STOP ||
	    msg->reason > VM_EXIT_GUEST_TRIPLE_FAULT)
		return -EIO;
	return 0;
}

/* ---- the child's confinement ---- */

/* Reads arg_start, arg_end, env_start and env_end of this process from /proc/self/stat. */
static int vmm_process_blocks(unsigned long bounds[4])
{
	char stat[VMM_PROCESS_STAT_MAX];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t got;
	char *cursor;
	int field;

	if (fd < 0)
		return -errno;
	got = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	if (got <= 0)
		return -EIO;
	stat[got] = '\0';
	cursor = strrchr(stat, ')'); /* the command name may hold spaces and parentheses */
	if (!cursor)
		return -EIO;
	cursor++;
	for (field = VMM_PROCESS_STAT_STATE_FIELD; field < VMM_PROCESS_STAT_ARG_START_FIELD;
	     field++) {
		cursor = strchr(cursor + 1, ' ');
		if (!cursor)
			return -EIO;
	}
	if (sscanf(cursor, " %lu %lu %lu %lu", &bounds[0], &bounds[1], &bounds[2], &bounds[3]) != 4 ||
	    bounds[1] < bounds[0] || bounds[3] < bounds[2])
		return -EIO;
	return 0;
}

int vmm_process_scrub_identity(void)
{
	unsigned long bounds[4];
	int rc = vmm_process_blocks(bounds);

	clearenv();
	if (rc < 0)
		return rc;
	/*
	 * The block lives in this process's stack mapping, written by the kernel at exec.
	 * Nothing below the CLI keeps pointers into it (sandbox.h: the CLI reads the environment
	 * once, into settings). The argument block is left alone: network policies and paths
	 * may point into it, and what it holds is what the guest is told anyway.
	 */
	explicit_bzero((void *)bounds[2], bounds[3] - bounds[2]);
	prctl(PR_SET_NAME, VMM_PROCESS_NAME, 0, 0, 0);
	return 0;
}

/* Step by step as the header says; any failure ends the child before it runs anything. */
static void vmm_process_child(int control_fd, int null_fd, int log_fd, pid_t parent,
			      int (*body)(int control_fd, void *opaque), void *opaque)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (getppid() != parent) /* the parent died before the death signal was armed */
		_exit(VMM_PROCESS_EXIT_ORPHANED);
	/* no terminal: a Ctrl-C meant for the CLI must not kill the VM under it */
	if (setsid() < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0 ||
	    dup2(log_fd, STDERR_FILENO) < 0 || dup2(control_fd, VMM_PROCESS_CONTROL_FD) < 0 ||
	    close_range(VMM_PROCESS_CONTROL_FD + 1, ~0U, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	/* no other process of the user may ptrace it or read its memory through /proc */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		_exit(VMM_PROCESS_EXIT_SETUP);
	log_set_stream(stderr); /* now the caller's log, whose own descriptor is closed */
	_exit(body(VMM_PROCESS_CONTROL_FD, opaque));
}

int vmm_process_spawn(int (*body)(int control_fd, void *opaque), void *opaque, pid_t *pid,
		      int *control_fd, char *err, size_t errlen)
{
	int pair[2] = { -1, -1 }, ours = -1, theirs = -1, null_fd = -1;
	pid_t parent = getpid(), child;
	FILE *log_stream;
	int rc = 0, log_fd;

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
	child = fork();
	if (child < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot start the VMM process: %s", strerror(errno));
		goto out;
	}
	if (child == 0)
		vmm_process_child(theirs, null_fd, log_fd >= 0 ? log_fd : null_fd, parent, body,
				  opaque);
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

/* ---- the VM's child ---- */

/* The child's loop: serve "stop" (or the socket's end) until the VM has ended, then say so. */
static void vmm_process_serve(int control_fd, struct vm *vm)
{
	enum vm_exit_reason reason = VM_EXIT_NONE;
	struct pollfd pfd = { .fd = control_fd, .events = POLLIN };
	bool stop_asked = false;

	while (vm_wait(vm, 0, &reason) != 0) {
		struct vmm_msg msg;

		if (poll(&pfd, 1, VMM_PROCESS_POLL_MS) <= 0 || stop_asked)
			continue;
		/* anything but a well-formed message is the parent going away: stop too */
		if (vmm_msg_recv(control_fd, &msg) < 0 || msg.kind == VMM_MSG_STOP) {
			stop_asked = true;
			vm_request_stop(vm);
		}
	}
	vmm_msg_send(control_fd, VMM_MSG_EXITED, 0, reason, NULL);
}

struct vmm_process_vm_args {
	const struct vm_config *cfg;
	const char *cgroup_dir;
	enum vmm_jail_mode jail_mode;
};

static int vmm_process_vm_body(int control_fd, void *opaque)
{
	const struct vmm_process_vm_args *args = opaque;
	char err[VMM_PROCESS_TEXT_MAX] = "";
	struct vmm_jail *jail = NULL;
	struct vm_config jailed;
	struct vm *vm = NULL;
	int rc = 0;

	/* the limits hold before the guest's memory is even mapped */
	if (args->cgroup_dir && (rc = vmm_cgroup_enter(args->cgroup_dir, 0)) < 0)
		snprintf(err, sizeof(err), "cannot move the VMM process into the cgroup %s: %s",
			 args->cgroup_dir, strerror(-rc));
	/* still one thread: the VM's threads start in the jail's namespaces */
	if (rc == 0)
		rc = vmm_jail_plan_vm(args->cfg, &jail, &jailed, err, sizeof(err));
	if (rc == 0)
		rc = vmm_jail_enter(jail, args->jail_mode, err, sizeof(err));
	if (rc == 0)
		rc = vm_create(&jailed, &vm, err, sizeof(err));
	if (rc == 0)
		vmm_jail_seal(jail); /* the VM holds what only its creation needed by descriptor */

	/* the VM holds copies of what it needs from cfg: what pointed into the blocks can go */
	if (rc == 0 && (rc = vmm_process_scrub_identity()) < 0)
		snprintf(err, sizeof(err), "cannot wipe the VMM process's environment: %s",
			 strerror(-rc));
	if (rc == 0 && (rc = vm_start(vm)) < 0)
		snprintf(err, sizeof(err), "the VM did not start: %s", strerror(-rc));
	if (rc == 0 && (rc = vmm_thread_confine(VMM_THREAD_VMM_MAIN)) < 0)
		snprintf(err, sizeof(err), "cannot install the VMM main thread's seccomp filter: "
			 "%s", strerror(-rc));
	if (vmm_msg_send(control_fd, VMM_MSG_STARTED, rc, 0, err) == 0 && rc == 0)
		vmm_process_serve(control_fd, vm);
	vm_destroy(vm);
	vmm_jail_free(jail);
	return rc == 0 ? 0 : VMM_PROCESS_EXIT_SETUP;
}

/* ---- the parent's side ---- */

static void vmm_process_reap(struct vmm_process *proc, int grace_ms)
{
	long deadline = (long)clock_monotonic_ms() + grace_ms;

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
		poll(NULL, 0, VMM_PROCESS_POLL_MS);
	}
}

int vmm_process_start_vm(const struct vm_config *cfg, const char *cgroup_dir,
			 struct vmm_process **out, char *err, size_t errlen)
{
	struct vmm_process_vm_args args = { .cfg = cfg, .cgroup_dir = cgroup_dir,
					    .jail_mode = vmm_jail_host_mode() };
	struct vmm_process *proc = calloc(1, sizeof(*proc));
	struct pollfd pfd = { .fd = -1, .events = POLLIN };
	struct vmm_msg msg;
	int rc;

	*out = NULL;
	if (!proc) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&proc->lock, NULL);
	/* the child works on its copy of args and cfg, made by fork */
	rc = vmm_process_spawn(vmm_process_vm_body, &args, &proc->pid, &proc->control_fd, err,
			       errlen);
	if (rc < 0) {
		pthread_mutex_destroy(&proc->lock);
		free(proc);
		return rc;
	}
	pfd.fd = proc->control_fd;
	if (poll(&pfd, 1, VMM_PROCESS_START_TIMEOUT_MS) == 0) {
		rc = -ETIMEDOUT;
		snprintf(err, errlen, "the VMM process did not start the VM within %d s",
			 VMM_PROCESS_START_TIMEOUT_MS / VMM_PROCESS_MS_PER_SEC);
	} else if (vmm_msg_recv(proc->control_fd, &msg) < 0 || msg.kind != VMM_MSG_STARTED) {
		rc = -ECHILD;
		snprintf(err, errlen, "the VMM process ended before it started the VM (see the "
			 "log above)");
	} else if (msg.status < 0) {
		rc = msg.status < -4095 ? -EIO : msg.status;
		snprintf(err, errlen, "%s", msg.text[0] ? msg.text : "the VM did not start");
	}
	if (rc < 0) {
		vmm_process_destroy(proc);
		return rc;
	}
	log_debug(VMM_PROCESS_LOG, "the VM runs in process %ld", (long)proc->pid);
	*out = proc;
	return 0;
}

int vmm_process_wait(struct vmm_process *proc, int timeout_ms, enum vm_exit_reason *reason)
{
	struct pollfd pfd = { .fd = proc->control_fd, .events = POLLIN };
	long deadline = (long)clock_monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	bool exited;

	pthread_mutex_lock(&proc->lock);
	while (!proc->exited) {
		long left = deadline - (long)clock_monotonic_ms();
		struct vmm_msg msg;
		int ready = poll(&pfd, 1, timeout_ms < 0 ? -1 : (int)(left > 0 ? left : 0));

		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			break;
		/* its end, or anything but "exited", means the VMM process is gone or broken */
		proc->exited = true;
		if (vmm_msg_recv(proc->control_fd, &msg) == 0 && msg.kind == VMM_MSG_EXITED)
			proc->reason = (enum vm_exit_reason)msg.reason;
		else
			proc->reason = VM_EXIT_INTERNAL_ERROR;
	}
	exited = proc->exited;
	if (exited && reason)
		*reason = proc->reason;
	pthread_mutex_unlock(&proc->lock);
	return exited ? 0 : -ETIMEDOUT;
}

void vmm_process_request_stop(struct vmm_process *proc)
{
	vmm_msg_send(proc->control_fd, VMM_MSG_STOP, 0, 0, NULL);
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
