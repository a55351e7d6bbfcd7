/*
 * vmm_serve.h: the VMM process's side, one simple loop on its main thread. It polls its
 * socket and its VM's end eventfd together instead of running a second thread, so its
 * main thread stays under a small filter; it serves a request on that thread, so a snapshot
 * is taken while nothing else of the process runs but the VM. Anything but a well-formed
 * request (the socket's end included) is the parent going away, and stops the VM.
 */
#include "sandbox/vmm_serve.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "proto/protocol.h"
#include "sandbox/vmm_cgroup.h"
#include "sandbox/vmm_jail.h"
#include "sandbox/vmm_msg.h"
#include "vmm/device.h"
#include "vmm/thread_filter.h"
#include "vmm/working_set.h"

#define VMM_SERVE_LOG "vmm-process"
/* How often the process looks at its VM where the VM has no end eventfd. */
#define VMM_SERVE_POLL_MS 20

/* What one VM's process works from: its launch, and what the jail handed the VM instead. */
struct vmm_serve {
	const struct vmm_launch *launch;
	const char *snapshot_dir;		  /* a restore's, as the jail shows it */
	const struct vm_restore_options *restore; /* a restore's options, as the jail planned */
};

/* The parent's "snapshot": every field checked, then vm_snapshot_save as the parent asked. */
static void vmm_serve_snapshot(int control_fd, struct vm *vm, const struct vmm_serve *args,
			       struct vmm_msg *msg)
{
	struct vm_snapshot_options opts = { .type = (enum vm_snapshot_type)msg->snapshot_type,
					    .after = (enum vm_snapshot_after)msg->snapshot_after };
	char err[VMM_PROCESS_TEXT_MAX] = "";
	int rc = 0;

	if (args->launch->main_role != VMM_THREAD_VMM_MAIN_SNAPSHOTS) {
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
static void vmm_serve_working_set(int control_fd, struct vm *vm, const struct vmm_serve *args)
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
		working_set_log_recorded(VMM_SERVE_LOG, args->snapshot_dir, &stats);
	vmm_msg_send(control_fd, VMM_MSG_ANSWER, rc, 0, err);
}

/*
 * The process's loop: serve "stop" (or the socket's end), "snapshot" and "record working set"
 * until the VM has ended, then say so.
 */
static void vmm_serve_loop(int control_fd, struct vm *vm, const struct vmm_serve *args)
{
	enum vm_exit_reason reason = VM_EXIT_NONE;
	struct pollfd pfds[] = { { .fd = control_fd, .events = POLLIN },
				 { .fd = vm_end_event_fd(vm), .events = POLLIN } };
	int turn_ms = pfds[1].fd >= 0 ? -1 : VMM_SERVE_POLL_MS;
	bool stop_asked = false;
	struct vmm_msg msg;

	while (vm_wait(vm, 0, &reason) != 0) {
		if (poll(pfds, 2, turn_ms) <= 0 || !pfds[0].revents || stop_asked)
			continue;
		/* anything but a well-formed request is the parent going away: stop too */
		int rc = vmm_msg_recv(control_fd, &msg);

		if (rc == 0 && msg.kind == VMM_MSG_SNAPSHOT)
			vmm_serve_snapshot(control_fd, vm, args, &msg);
		else if (rc == 0 && msg.kind == VMM_MSG_RECORD_WORKING_SET)
			vmm_serve_working_set(control_fd, vm, args);
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
static int vmm_serve_restore(const struct vmm_serve *args, const struct vmm_jail *jail,
			     struct vm **vm, struct vmm_msg *started, char *err, size_t errlen)
{
	char hex[2 * VM_SECRET_LEN + 1];
	const struct vm_snapshot_state *state = vmm_jail_snapshot_state(jail);
	int rc = state ? vm_create_from_snapshot_state(args->snapshot_dir, state, args->restore,
						       vm, err, errlen)
		       : vm_create_from_snapshot(args->snapshot_dir, args->restore, vm, err,
						 errlen);

	if (rc < 0)
		return rc;
	started->working_set_known = vm_working_set_known(*vm);
	started->working_set_prefaulted = vm_working_set_prefaulted_pages(*vm);
	vm_secret_hex(*vm, hex);
	rc = proto_secret_from_hex(hex, started->secret);
	explicit_bzero(hex, sizeof(hex));
	if (rc < 0)
		snprintf(err, errlen, "the restored VM's secret is not readable");
	return rc;
}

/* The directories snapshot requests write beneath, read-write for the VM's life. */
static int vmm_serve_jail_areas(struct vmm_jail *jail, const char *const *areas, char *err,
				size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; jail && areas && areas[i] && rc == 0; i++)
		rc = vmm_jail_add(jail, areas[i], NULL, VMM_JAIL_READ_WRITE, VMM_JAIL_WHILE_RUNNING,
				  err, errlen);
	return rc;
}

/*
 * The libraries the VM's devices open on first use (libslirp for a network), opened while /lib
 * is still in reach: inside the jail they could not be. A VM without such a device maps none.
 */
static int vmm_serve_load_device_libraries(const struct vmm_launch *launch,
					   const struct vmm_jail *jail, char *err, size_t errlen)
{
	if (launch->kind != VMM_LAUNCH_RESTORE)
		return vm_devices_load_libraries(&launch->cfg, err, errlen);
	return jail ? vm_snapshot_load_device_libraries(vmm_jail_snapshot_state(jail), err, errlen)
		    : 0; /* no jail: the restore opens them where it needs them */
}

/* Plans, enters the jail, then builds the VM in it: a restore or a cold boot. */
static int vmm_serve_create_jailed(struct vmm_serve *here, struct vmm_jail **jail,
				   struct vm_config *jailed, struct vm_restore_options *restore,
				   struct vm **vm, struct vmm_msg *started, char *err, size_t errlen)
{
	const struct vmm_launch *launch = here->launch;
	int rc;

	if (launch->kind == VMM_LAUNCH_RESTORE) {
		rc = vmm_jail_plan_restore(launch->snapshot_dir, &launch->restore, jail,
					   &here->snapshot_dir, restore, err, errlen);
		here->restore = restore;
	} else {
		rc = vmm_jail_plan_vm(&launch->cfg, jail, jailed, err, errlen);
	}
	if (rc == 0)
		rc = vmm_serve_jail_areas(*jail, launch->snapshot_areas, err, errlen);
	if (rc == 0)
		rc = vmm_serve_load_device_libraries(launch, *jail, err, errlen);
	if (rc == 0 && *jail)
		rc = vmm_jail_enter(*jail, launch->jail_mode, err, errlen);
	if (rc == 0)
		rc = launch->kind == VMM_LAUNCH_RESTORE
			     ? vmm_serve_restore(here, *jail, vm, started, err, errlen)
			     : vm_create(jailed, vm, err, errlen);
	if (rc == 0)
		vmm_jail_seal(*jail); /* the VM holds what only its creation needed */
	return rc;
}

int vmm_serve_read_launch(int fd, struct vmm_launch_decoded *out, char *err, size_t errlen)
{
	uint8_t *bytes = NULL;
	size_t used = 0;
	struct stat st;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > VMM_LAUNCH_MAX_BYTES) {
		rc = -EBADMSG;
		snprintf(err, errlen, "the VMM process was given no launch it can read (descriptor "
			 "%d is not a file of at most %u bytes)", fd, VMM_LAUNCH_MAX_BYTES);
		goto out;
	}
	bytes = malloc((size_t)st.st_size);
	if (!bytes) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory reading the VM's configuration");
		goto out;
	}
	while (used < (size_t)st.st_size) {
		ssize_t got = pread(fd, bytes + used, (size_t)st.st_size - used, (off_t)used);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			rc = -EIO;
			snprintf(err, errlen, "cannot read the VM's configuration: %s",
				 got < 0 ? strerror(errno) : "it ended early");
			goto out;
		}
		used += (size_t)got;
	}
	rc = vmm_launch_decode(bytes, used, out, err, errlen);
out:
	if (bytes)
		explicit_bzero(bytes, used);
	free(bytes);
	close(fd);
	return rc;
}

/* Builds and starts the VM of launch, answers "started", serves until the VM ends. */
static int vmm_serve_run(int control_fd, struct vmm_launch_decoded *decoded)
{
	const struct vmm_launch *launch = &decoded->launch;
	struct vmm_serve here = { .launch = launch, .snapshot_dir = NULL, .restore = NULL };
	struct vmm_msg started = { .kind = VMM_MSG_STARTED };
	char *err = started.text;
	size_t errlen = sizeof(started.text);
	struct vmm_jail *jail = NULL;
	struct vm_restore_options restore;
	struct vm_config jailed = { .kernel_path = NULL };
	struct vm *vm = NULL;
	int rc = 0;

	/* the limits hold before the guest's memory is even mapped */
	if (launch->cgroup_dir && (rc = vmm_cgroup_enter(launch->cgroup_dir, 0)) < 0)
		snprintf(err, errlen, "cannot move the VMM process into the cgroup %s: %s",
			 launch->cgroup_dir, strerror(-rc));
	/*
	 * still one thread: the VM's threads start in the jail's namespaces. A cold boot's root
	 * holds what its vm_config names, a restore's its snapshot chain and runtime directory,
	 * and a VMM that takes snapshot requests also the directories they write beneath
	 * (docs/security.md, "The jail").
	 */
	if (rc == 0)
		rc = vmm_serve_create_jailed(&here, &jail, &jailed, &restore, &vm, &started, err,
					     errlen);
	/* the VM holds copies of what it needs: the secret in the launch can go now */
	explicit_bzero(decoded->launch.cfg.secret, sizeof(decoded->launch.cfg.secret));
	explicit_bzero(jailed.secret, sizeof(jailed.secret));
	if (rc == 0 && (rc = vm_start(vm)) < 0)
		snprintf(err, errlen, "the VM did not start: %s", strerror(-rc));
	if (rc == 0 && launch->main_role == VMM_THREAD_VMM_MAIN_SNAPSHOTS)
		rc = vmm_jail_hold_snapshot_writer(jail, launch->snapshot_areas, err, errlen);
	if (rc == 0 && (rc = vmm_thread_confine(launch->main_role)) < 0)
		snprintf(err, errlen, "cannot install the VMM main thread's seccomp filter: %s",
			 strerror(-rc));
	started.status = rc;
	if (rc < 0)
		explicit_bzero(started.secret, sizeof(started.secret));
	if (vmm_msg_send_whole(control_fd, &started) == 0 && rc == 0)
		vmm_serve_loop(control_fd, vm, &here);
	vm_destroy(vm);
	vmm_jail_free(jail);
	return rc == 0 ? 0 : VMM_SERVE_EXIT_SETUP;
}

int vmm_serve_main(int control_fd, int launch_fd)
{
	struct vmm_launch_decoded decoded;
	char err[VMM_PROCESS_TEXT_MAX] = "";
	struct stat st;
	int rc;

	if (fstat(control_fd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		fprintf(stderr, "%s runs the VM of a voidbox sandbox and is started by voidbox "
			"itself, with its control socket on descriptor %d: it is not run by hand\n",
			VMM_PROCESS_NAME, control_fd);
		return VMM_SERVE_EXIT_USAGE;
	}
	rc = vmm_serve_read_launch(launch_fd, &decoded, err, sizeof(err));
	if (rc < 0) {
		vmm_msg_send(control_fd, VMM_MSG_STARTED, rc, 0, err);
		return VMM_SERVE_EXIT_SETUP;
	}
	log_set_level(decoded.launch.log_level);
	rc = vmm_serve_run(control_fd, &decoded);
	vmm_launch_release(&decoded);
	return rc;
}
