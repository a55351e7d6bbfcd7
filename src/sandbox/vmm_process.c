/*
 * vmm_process.h: the fork, the child's confinement and the parent-child messages. One message
 * type, fixed size, so a reader takes exactly one recv() per message and refuses any other
 * length; the child answers "started" once, then "exited" once, and between them takes "stop"
 * (or the socket's end, which means the same) and the two requests, each answered once. The
 * child polls its socket and its VM in turn with a short period instead of running a second
 * thread, so its main thread stays one simple loop under a small filter; it serves a request
 * on that thread, so a snapshot is taken while nothing else of the child runs but the VM.
 * The parent reads the socket in short turns under a lock, so a thread waiting for the VM's
 * end and one waiting for an answer each take the message meant for them.
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
#include "proto/protocol.h"
#include "sandbox/vmm_jail.h"
#include "vmm/thread_filter.h"
#include "vmm/working_set.h"

#define VMM_PROCESS_LOG "vmm-process"
/* Descriptors at or above this in the parent, so the child's dup2 to 0..3 never collides. */
#define VMM_PROCESS_PARENT_FD_FLOOR 10
/* How often the child looks at its VM between control messages. */
#define VMM_PROCESS_POLL_MS 20
/* How long a destroyed VMM process gets to exit by itself before it is killed. */
#define VMM_PROCESS_EXIT_GRACE_MS 2000
/*
 * How long creating the VM may take (extracting a kernel into the cache, nested: a minute),
 * and how long a snapshot may (writing all of guest memory to a slow disk).
 */
#define VMM_PROCESS_START_TIMEOUT_MS 300000
#define VMM_PROCESS_REQUEST_TIMEOUT_MS 300000
/* The largest errno a status may carry; anything else reads as EIO. */
#define VMM_PROCESS_ERRNO_MAX 4095
#define VMM_PROCESS_MS_PER_SEC 1000
#define VMM_PROCESS_NS_PER_MS 1000000ULL
/* The child's exit statuses. */
#define VMM_PROCESS_EXIT_ORPHANED 70
#define VMM_PROCESS_EXIT_SETUP 71
/* /proc/self/stat, fields counted from 1: the state follows "(comm)", arg_start is 48th. */
#define VMM_PROCESS_STAT_ARG_START_FIELD 48
#define VMM_PROCESS_STAT_STATE_FIELD 3
#define VMM_PROCESS_STAT_MAX 4096

struct vmm_process {
	pid_t pid;
	int control_fd;
	pthread_mutex_t lock; /* one reader of the socket at a time, and the fields below */
	bool exited;
	enum vm_exit_reason reason;
	bool reaped;
	bool awaiting;	      /* a request was sent and its answer not yet taken */
	bool answered;	      /* its answer came: answer_status, answer_text */
	int answer_status;
	char answer_text[VMM_PROCESS_TEXT_MAX];
};

static int vmm_msg_send_whole(int fd, struct vmm_msg *msg)
{
	int rc = send(fd, msg, sizeof(*msg), MSG_NOSIGNAL) == (ssize_t)sizeof(*msg) ? 0 : -EIO;

	explicit_bzero(msg->secret, sizeof(msg->secret));
	return rc;
}

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
	return vmm_msg_send_whole(fd, &msg);
}

/* A status from the other side: 0, or a -errno in range (anything else is -EIO). */
static int vmm_msg_status(int32_t status)
{
	return status > 0 || status < -VMM_PROCESS_ERRNO_MAX ? -EIO : status;
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
	msg->parent_dir[sizeof(msg->parent_dir) - 1] = '\0';
	if (msg->kind < VMM_MSG_STARTED || msg->kind > VMM_MSG_ANSWER ||
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

struct vmm_process_vm_args {
	const struct vm_config *cfg;		     /* a cold boot, or */
	const char *snapshot_dir;		     /* a restore of this, with */
	const struct vm_restore_options *restore;
	const char *cgroup_dir;
	enum vmm_thread_role main_role; /* VMM_THREAD_VMM_MAIN or _MAIN_SNAPSHOTS */
	enum vmm_jail_mode jail_mode;
	const char *const *snapshot_areas; /* NULL-terminated; NULL: none */
};

/* The parent's "snapshot": every field checked, then vm_snapshot_save as the parent asked. */
static void vmm_process_serve_snapshot(int control_fd, struct vm *vm,
				       const struct vmm_process_vm_args *args, struct vmm_msg *msg)
{
	struct vm_snapshot_options opts = { .type = (enum vm_snapshot_type)msg->snapshot_type,
					    .after = (enum vm_snapshot_after)msg->snapshot_after };
	char err[VMM_PROCESS_TEXT_MAX] = "";
	int rc = 0;

	if (args->main_role != VMM_THREAD_VMM_MAIN_SNAPSHOTS) {
		rc = -EPERM;
		snprintf(err, sizeof(err), "this VM's process may write no snapshot: start the "
			 "sandbox with vmm_placement SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS");
	} else if ((opts.type != VM_SNAPSHOT_BASE && opts.type != VM_SNAPSHOT_DIFF) ||
		   (opts.after != VM_SNAPSHOT_RESUME && opts.after != VM_SNAPSHOT_STAY_STOPPED) ||
		   msg->text[0] != '/' ||
		   (opts.type == VM_SNAPSHOT_DIFF) != (msg->parent_dir[0] != '\0')) {
		rc = -EINVAL;
		snprintf(err, sizeof(err), "a malformed snapshot request (type %u, after %u)",
			 msg->snapshot_type, msg->snapshot_after);
	}
	if (rc == 0) {
		opts.parent_dir = msg->parent_dir[0] ? msg->parent_dir : NULL;
		vm_snapshot_set_secret(vm, msg->secret);
		rc = vm_snapshot_save(vm, msg->text, &opts, err, sizeof(err));
		/* a VM left stopped is over: end it, as sandbox_snapshot does in process */
		if (opts.after == VM_SNAPSHOT_STAY_STOPPED)
			vm_request_stop(vm);
	}
	explicit_bzero(msg->secret, sizeof(msg->secret));
	vmm_msg_send(control_fd, VMM_MSG_ANSWER, rc, 0, err);
}

/* The parent's "record working set": beside the snapshot this VM was restored from. */
static void vmm_process_serve_working_set(int control_fd, struct vm *vm,
					  const struct vmm_process_vm_args *args)
{
	char err[VMM_PROCESS_TEXT_MAX] = "";
	struct working_set_stats stats = { 0 };
	int rc;

	if (!args->snapshot_dir) {
		rc = -EINVAL;
		snprintf(err, sizeof(err), "this VM was not restored: it has no working set to "
			 "record");
	} else {
		rc = vm_working_set_record(vm, args->snapshot_dir, &stats, err, sizeof(err));
	}
	if (rc == 0 && stats.pages) /* the line sandbox_exec logs for a VM in its process */
		log_info(VMM_PROCESS_LOG, "recorded the working set of %s: %llu pages in %u runs "
			 "in %llu ms", args->snapshot_dir, (unsigned long long)stats.pages,
			 stats.runs, (unsigned long long)(stats.elapsed_ns / VMM_PROCESS_NS_PER_MS));
	vmm_msg_send(control_fd, VMM_MSG_ANSWER, rc, 0, err);
}

/*
 * The child's loop: serve "stop" (or the socket's end), "snapshot" and "record working set"
 * until the VM has ended, then say so.
 */
static void vmm_process_serve(int control_fd, struct vm *vm,
			      const struct vmm_process_vm_args *args)
{
	enum vm_exit_reason reason = VM_EXIT_NONE;
	struct pollfd pfd = { .fd = control_fd, .events = POLLIN };
	bool stop_asked = false;
	struct vmm_msg msg;

	while (vm_wait(vm, 0, &reason) != 0) {
		if (poll(&pfd, 1, VMM_PROCESS_POLL_MS) <= 0 || stop_asked)
			continue;
		/* anything but a well-formed request is the parent going away: stop too */
		int rc = vmm_msg_recv(control_fd, &msg);

		if (rc == 0 && msg.kind == VMM_MSG_SNAPSHOT)
			vmm_process_serve_snapshot(control_fd, vm, args, &msg);
		else if (rc == 0 && msg.kind == VMM_MSG_RECORD_WORKING_SET)
			vmm_process_serve_working_set(control_fd, vm, args);
		else {
			stop_asked = true;
			vm_request_stop(vm);
		}
	}
	vmm_msg_send(control_fd, VMM_MSG_EXITED, 0, reason, NULL);
}

/*
 * The restore, from the state file its plan read (the jail's), the secret it answers to
 * copied into *started for the parent.
 */
static int vmm_process_restore_here(const struct vmm_process_vm_args *args,
				    const struct vmm_jail *jail, struct vm **vm,
				    struct vmm_msg *started, char *err, size_t errlen)
{
	char hex[2 * VM_SECRET_LEN + 1];
	const struct vm_snapshot_state *state = vmm_jail_snapshot_state(jail);
	int rc = state ? vm_create_from_snapshot_state(args->snapshot_dir, state, args->restore,
						       vm, err, errlen)
		       : vm_create_from_snapshot(args->snapshot_dir, args->restore, vm, err,
						 errlen);

	if (rc < 0)
		return rc;
	vm_secret_hex(*vm, hex);
	rc = proto_secret_from_hex(hex, started->secret);
	explicit_bzero(hex, sizeof(hex));
	if (rc < 0)
		snprintf(err, errlen, "the restored VM's secret is not readable");
	return rc;
}

/* The directories snapshot requests write beneath, read-write for the VM's life. */
static int vmm_process_jail_areas(struct vmm_jail *jail, const char *const *areas, char *err,
				  size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; jail && areas && areas[i] && rc == 0; i++)
		rc = vmm_jail_add(jail, areas[i], NULL, VMM_JAIL_READ_WRITE, VMM_JAIL_WHILE_RUNNING,
				  err, errlen);
	return rc;
}

/* Plans, enters the jail, then builds the VM in it: a restore of here->snapshot_dir or cfg. */
static int vmm_process_create_jailed(struct vmm_process_vm_args *here, struct vmm_jail **jail,
				     struct vm_config *jailed, struct vm_restore_options *restore,
				     struct vm **vm, struct vmm_msg *started, char *err,
				     size_t errlen)
{
	int rc;

	if (here->snapshot_dir) {
		rc = vmm_jail_plan_restore(here->snapshot_dir, here->restore, jail,
					   &here->snapshot_dir, restore, err, errlen);
		here->restore = restore;
	} else {
		rc = vmm_jail_plan_vm(here->cfg, jail, jailed, err, errlen);
	}
	if (rc == 0)
		rc = vmm_process_jail_areas(*jail, here->snapshot_areas, err, errlen);
	if (rc == 0 && *jail)
		rc = vmm_jail_enter(*jail, here->jail_mode, err, errlen);
	if (rc == 0)
		rc = here->snapshot_dir ? vmm_process_restore_here(here, *jail, vm, started, err,
								   errlen)
					: vm_create(jailed, vm, err, errlen);
	if (rc == 0)
		vmm_jail_seal(*jail); /* the VM holds what only its creation needed */
	return rc;
}

static int vmm_process_vm_body(int control_fd, void *opaque)
{
	struct vmm_process_vm_args here = *(const struct vmm_process_vm_args *)opaque;
	struct vmm_msg started = { .kind = VMM_MSG_STARTED };
	char *err = started.text;
	size_t errlen = sizeof(started.text);
	struct vmm_jail *jail = NULL;
	struct vm_restore_options restore;
	struct vm_config jailed;
	struct vm *vm = NULL;
	int rc = 0;

	/* the limits hold before the guest's memory is even mapped */
	if (here.cgroup_dir && (rc = vmm_cgroup_enter(here.cgroup_dir, 0)) < 0)
		snprintf(err, errlen, "cannot move the VMM process into the cgroup %s: %s",
			 here.cgroup_dir, strerror(-rc));
	/*
	 * still one thread: the VM's threads start in the jail's namespaces. A cold boot's root
	 * holds what its vm_config names, a restore's its snapshot chain and runtime directory,
	 * and a VMM that takes snapshot requests also the directories they write beneath
	 * (docs/security.md, "The jail").
	 */
	if (rc == 0)
		rc = vmm_process_create_jailed(&here, &jail, &jailed, &restore, &vm, &started, err,
					       errlen);

	/* the VM holds copies of what it needs from cfg: what pointed into the blocks can go */
	if (rc == 0 && (rc = vmm_process_scrub_identity()) < 0)
		snprintf(err, errlen, "cannot wipe the VMM process's environment: %s",
			 strerror(-rc));
	if (rc == 0 && (rc = vm_start(vm)) < 0)
		snprintf(err, errlen, "the VM did not start: %s", strerror(-rc));
	if (rc == 0 && here.main_role == VMM_THREAD_VMM_MAIN_SNAPSHOTS)
		rc = vmm_jail_hold_snapshot_writer(jail, here.snapshot_areas, err, errlen);
	if (rc == 0 && (rc = vmm_thread_confine(here.main_role)) < 0)
		snprintf(err, errlen, "cannot install the VMM main thread's seccomp filter: %s",
			 strerror(-rc));
	started.status = rc;
	if (rc < 0)
		explicit_bzero(started.secret, sizeof(started.secret));
	if (vmm_msg_send_whole(control_fd, &started) == 0 && rc == 0)
		vmm_process_serve(control_fd, vm, &here);
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
		snprintf(proc->answer_text, sizeof(proc->answer_text), "%s", msg.text);
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

int vmm_process_launch(int (*body)(int control_fd, void *opaque), void *opaque,
		       struct vmm_process **out, char *err, size_t errlen)
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
	rc = vmm_process_spawn(body, opaque, &proc->pid, &proc->control_fd, err, errlen);
	if (rc < 0) {
		pthread_mutex_destroy(&proc->lock);
		free(proc);
		return rc;
	}
	*out = proc;
	return 0;
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
		snprintf(err, errlen, "%s", msg.text[0] ? msg.text : "the VM did not start");
	} else if (secret) {
		memcpy(secret, msg.secret, VM_SECRET_LEN);
	}
	explicit_bzero(msg.secret, sizeof(msg.secret));
	if (rc == 0)
		log_debug(VMM_PROCESS_LOG, "the VM runs in process %ld", (long)proc->pid);
	return rc;
}

int vmm_process_start(int (*body)(int control_fd, void *opaque), void *opaque,
		      uint8_t secret[VM_SECRET_LEN], struct vmm_process **out, char *err,
		      size_t errlen)
{
	struct vmm_process *proc;
	int rc = vmm_process_launch(body, opaque, &proc, err, errlen);

	if (rc == 0 && (rc = vmm_process_await_started(proc, secret, err, errlen)) < 0) {
		vmm_process_destroy(proc);
		proc = NULL;
	}
	*out = proc;
	return rc;
}

int vmm_process_start_vm(const struct vm_config *cfg, const char *cgroup_dir, bool snapshots,
			 const char *const *snapshot_areas, struct vmm_process **out, char *err,
			 size_t errlen)
{
	struct vmm_process_vm_args args = {
		.cfg = cfg, .cgroup_dir = cgroup_dir,
		.main_role = snapshots ? VMM_THREAD_VMM_MAIN_SNAPSHOTS : VMM_THREAD_VMM_MAIN,
		.jail_mode = vmm_jail_host_mode(),
		.snapshot_areas = snapshots ? snapshot_areas : NULL,
	};

	return vmm_process_start(vmm_process_vm_body, &args, NULL, out, err, errlen);
}

int vmm_process_launch_restore(const char *snapshot_dir, const struct vm_restore_options *opts,
			       const char *cgroup_dir, const char *const *snapshot_areas,
			       struct vmm_process **out, char *err, size_t errlen)
{
	struct vmm_process_vm_args args = { .snapshot_dir = snapshot_dir, .restore = opts,
					    .cgroup_dir = cgroup_dir,
					    .main_role = VMM_THREAD_VMM_MAIN_SNAPSHOTS,
					    .jail_mode = vmm_jail_host_mode(),
					    .snapshot_areas = snapshot_areas };

	return vmm_process_launch(vmm_process_vm_body, &args, out, err, errlen);
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
	rc = vmm_msg_send_whole(proc->control_fd, msg);
	pthread_mutex_unlock(&proc->lock);
	if (rc == 0 && !vmm_process_pump(proc, VMM_PROCESS_REQUEST_TIMEOUT_MS, &proc->answered))
		rc = -ETIMEDOUT;
	pthread_mutex_lock(&proc->lock);
	if (rc == -ETIMEDOUT)
		snprintf(err, errlen, "cannot %s: the VMM process did not answer within %d s", what,
			 VMM_PROCESS_REQUEST_TIMEOUT_MS / VMM_PROCESS_MS_PER_SEC);
	else if (rc < 0 || !proc->answered)
		snprintf(err, errlen, "cannot %s: the VMM process ended (see the log above)", what);
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

int vmm_process_record_working_set(struct vmm_process *proc, char *err, size_t errlen)
{
	struct vmm_msg msg;

	memset(&msg, 0, sizeof(msg));
	msg.kind = VMM_MSG_RECORD_WORKING_SET;
	return vmm_process_request(proc, &msg, "record the working set", err, errlen);
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
