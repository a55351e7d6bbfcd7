/*
 * A stand-in for voidbox-vmm (src/sandbox/vmm_main.c) that needs no KVM: the sandbox layer
 * executes it as it would the real program (tests/sandbox/test_vmm_process.c points
 * VOIDBOX_VMM_BINARY at it), it reads its launch with the real reader, then plays a VM that
 * runs until it is told to stop. Its "started" hands back, in place of a restored guest's
 * secret, the first bytes of the snapshot directory it was given, so the test sees the launch
 * arrived; anything but a restore launch is refused with the reader's sentence or "not a
 * restore". Like the real program, it first enters the cgroup its launch names (a no-op for a
 * process the caller cloned straight into it). A boot whose command line holds
 * STAND_IN_CONSOLE_WORD writes a line to its serial log first, as a guest that printed
 * something would (tests/sandbox/test_sandbox_teardown.c). A boot whose command line holds
 * STAND_IN_SILENT_WORD is accepted instead, and plays a guest that never answers: nothing
 * listens on its vsock socket, which is never made, until it is stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/vmm_cgroup.h"
#include "sandbox/vmm_msg.h"
#include "sandbox/vmm_serve.h"

#define STAND_IN_CONSOLE_WORD "voidbox.test_console=1"
#define STAND_IN_CONSOLE_LINE "stand-in console: this VM stops here\n"
#define STAND_IN_CONSOLE_MODE 0600
#define STAND_IN_SILENT_WORD "voidbox.test_silent_guest=1"

/* The console line of a boot that asked for one (see the header). */
static void stand_in_write_console(const struct vm_config *cfg)
{
	int fd;

	if (!cfg->cmdline || !strstr(cfg->cmdline, STAND_IN_CONSOLE_WORD) || !cfg->serial_log_path)
		return;
	fd = open(cfg->serial_log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
		  STAND_IN_CONSOLE_MODE);
	if (fd < 0)
		return;
	/* a short write leaves a console the test finds empty, and it says so */
	(void)!write(fd, STAND_IN_CONSOLE_LINE, strlen(STAND_IN_CONSOLE_LINE));
	close(fd);
}

int main(void)
{
	struct vmm_msg msg = { .kind = VMM_MSG_STARTED };
	struct vmm_launch_decoded decoded;
	int rc = vmm_serve_read_launch(VMM_PROCESS_LAUNCH_FD, &decoded, msg.text,
				       sizeof(msg.text));

	if (rc == 0 && decoded.launch.cgroup_dir &&
	    (rc = vmm_cgroup_enter(decoded.launch.cgroup_dir, 0)) < 0)
		strcpy(msg.text, "cannot enter the cgroup");
	bool silent_boot = decoded.launch.kind == VMM_LAUNCH_BOOT && decoded.launch.cfg.cmdline &&
			   strstr(decoded.launch.cfg.cmdline, STAND_IN_SILENT_WORD);

	if (rc == 0 && decoded.launch.kind == VMM_LAUNCH_BOOT)
		stand_in_write_console(&decoded.launch.cfg);
	if (rc == 0 && decoded.launch.kind != VMM_LAUNCH_RESTORE && !silent_boot) {
		rc = -EINVAL;
		strcpy(msg.text, "not a restore");
	}
	if (rc == 0 && !silent_boot) {
		size_t len = strlen(decoded.launch.snapshot_dir);

		memcpy(msg.secret, decoded.launch.snapshot_dir,
		       len < sizeof(msg.secret) ? len : sizeof(msg.secret));
	}
	msg.status = rc;
	if (vmm_msg_send_whole(VMM_PROCESS_CONTROL_FD, &msg) < 0 || rc < 0) {
		vmm_launch_release(&decoded); /* zeroed by the read, so safe after any failure */
		return 1;
	}
	while (vmm_msg_recv(VMM_PROCESS_CONTROL_FD, &msg) == 0 && msg.kind != VMM_MSG_STOP)
		vmm_msg_send(VMM_PROCESS_CONTROL_FD, VMM_MSG_ANSWER, 0, 0, NULL);
	vmm_msg_send(VMM_PROCESS_CONTROL_FD, VMM_MSG_EXITED, 0, VM_EXIT_GUEST_POWEROFF, NULL);
	vmm_launch_release(&decoded);
	return 0;
}
