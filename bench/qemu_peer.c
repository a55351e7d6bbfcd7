/*
 * Boots the benchmarks' QEMU peer (see qemu_peer.h). The agent's port is probed until it
 * accepts before the control channel is made, because the channel's own connect deadline is
 * shorter than a nested boot; QEMU's exit ends the wait at once.
 */
#include "qemu_peer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot_measure.h"
#include "proto/protocol.h"
#include "sandbox/sandbox.h"
#include "vmm/cmdline.h"
#include "vsock_cid.h"

#define QEMU_PEER_FIXED_ARGS 30
#define QEMU_PEER_MAX_EXTRA_ARGS 16
#define QEMU_PEER_PROBE_MS 200
#define QEMU_PEER_PROBE_INTERVAL_US 20000
#define QEMU_PEER_EXEC_FAILED 127

static int qemu_peer_connect(void *opaque, int timeout_ms)
{
	const struct qemu_peer *peer = opaque;

	return bench_vsock_connect_cid(peer->cid, PROTO_GUEST_AGENT_PORT, timeout_ms);
}

static pid_t qemu_peer_spawn(const struct qemu_peer_config *cfg, const char *cmdline)
{
	char memory[16], vsock[64], serial[4096];
	const char *argv[QEMU_PEER_FIXED_ARGS + QEMU_PEER_MAX_EXTRA_ARGS + 1] = {
		cfg->qemu, "-M", "microvm,acpi=on", "-enable-kvm", "-cpu", "host", "-m", memory,
		"-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", serial, "-kernel", cfg->kernel, "-initrd", cfg->initramfs,
		"-append", cmdline, "-device", vsock,
	};
	size_t argc = 0;
	pid_t pid;

	while (argv[argc])
		argc++;
	for (size_t i = 0; cfg->extra_args && cfg->extra_args[i]; i++) {
		if (i == QEMU_PEER_MAX_EXTRA_ARGS)
			return -E2BIG;
		argv[argc++] = cfg->extra_args[i];
	}
	snprintf(memory, sizeof(memory), "%u", cfg->memory_mb);
	snprintf(vsock, sizeof(vsock), "vhost-vsock-device,guest-cid=%u", cfg->cid);
	snprintf(serial, sizeof(serial), "file:%s", cfg->console_path);
	pid = fork();
	if (pid == 0) {
		execvp(cfg->qemu, (char *const *)argv);
		_exit(QEMU_PEER_EXEC_FAILED);
	}
	return pid < 0 ? -errno : pid;
}

/* Polls the agent's port until it accepts: 0, -ECHILD when QEMU ended, -ETIMEDOUT. */
static int qemu_peer_wait(const struct qemu_peer_config *cfg, pid_t pid, int *status)
{
	double deadline = boot_now_ms() + cfg->boot_timeout_ms;

	while (boot_now_ms() < deadline) {
		int fd;

		if (waitpid(pid, status, WNOHANG) == pid)
			return -ECHILD;
		fd = bench_vsock_connect_cid(cfg->cid, PROTO_GUEST_AGENT_PORT, QEMU_PEER_PROBE_MS);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		usleep(QEMU_PEER_PROBE_INTERVAL_US);
	}
	return -ETIMEDOUT;
}

int qemu_peer_start(const struct qemu_peer_config *cfg, struct qemu_peer *peer, char *err,
		    size_t err_len)
{
	struct control_channel_config ch_cfg = { .connect = qemu_peer_connect,
						 .connect_opaque = peer };
	char cmdline[CMDLINE_MAX];
	int rc, status = 0;

	*peer = (struct qemu_peer){ .pid = -1, .cid = cfg->cid };
	if (getrandom(ch_cfg.secret, sizeof(ch_cfg.secret), 0) != (ssize_t)sizeof(ch_cfg.secret) ||
	    cmdline_build(cmdline, sizeof(cmdline), ch_cfg.secret, (uint64_t)time(NULL),
			  cfg->cmdline_extra) < 0) {
		snprintf(err, err_len, "cannot build the QEMU guest's command line");
		return -EINVAL;
	}
	peer->pid = qemu_peer_spawn(cfg, cmdline);
	if (peer->pid < 0) {
		rc = peer->pid;
		snprintf(err, err_len, "cannot start %s: %s", cfg->qemu, strerror(-rc));
		return rc;
	}
	rc = qemu_peer_wait(cfg, peer->pid, &status);
	if (rc == -ECHILD) {
		peer->pid = -1;
		snprintf(err, err_len, "QEMU exited (status %d) before its agent answered (console: %s)",
			 status, cfg->console_path);
		return rc;
	}
	if (rc == 0) {
		peer->channel = control_channel_create(&ch_cfg);
		rc = peer->channel && control_channel_connect(peer->channel) == 0 ? 0 : -EIO;
	}
	/* the agent runs nothing before the session's policy; sandbox_start sends the default */
	if (rc == 0 && control_channel_set_policy(peer->channel,
						  cfg->policy ? cfg->policy : sandbox_default_policy(),
						  0) < 0)
		rc = -EPROTO;
	if (rc < 0) {
		snprintf(err, err_len, "the QEMU guest's agent did not answer (%s; console: %s)",
			 rc == -EPROTO ? control_channel_last_error() : strerror(-rc),
			 cfg->console_path);
		qemu_peer_stop(peer);
	}
	return rc;
}

void qemu_peer_stop(struct qemu_peer *peer)
{
	int status;

	control_channel_destroy(peer->channel);
	peer->channel = NULL;
	if (peer->pid > 0 && waitpid(peer->pid, &status, WNOHANG) == peer->pid) {
		/* it ended on its own: say how, since its guest's connection went with it */
		if (WIFSIGNALED(status))
			fprintf(stderr, "qemu_peer: QEMU had already ended, killed by signal %d\n",
				WTERMSIG(status));
		else
			fprintf(stderr, "qemu_peer: QEMU had already exited with status %d\n",
				WEXITSTATUS(status));
	} else if (peer->pid > 0) {
		kill(peer->pid, SIGKILL);
		waitpid(peer->pid, &status, 0);
	}
	peer->pid = -1;
}
