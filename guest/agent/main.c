/*
 * voidbox-agent entry point. The same binary is PID 1 of every VM (system setup, vsock
 * listener, secret from the kernel command line) and, outside a VM, a test server on a Unix
 * socket with its roots under --root-prefix. After setup both modes run the identical server
 * code. As PID 1 the agent never exits: a fatal error leaves it idling so the kernel does not
 * panic and the log stays readable.
 *
 * As PID 1 the boot is split so the first answer waits only for what answering needs: the
 * vsock transport's modules load, the agent listens, and the rest (the entropy device, the
 * OCI root, shares, disks, network, their modules) is set up on a thread of its own while the
 * host's handshake goes on. Requests wait for that thread at the setup gate (setup_gate.h).
 */
#include "agent_log.h"
#include "cmdline.h"
#include "conn.h"
#include "disks.h"
#include "echo.h"
#include "init.h"
#include "modules.h"
#include "mounts.h"
#include "netcfg.h"
#include "oci_root.h"
#include "policy.h"
#include "proto/protocol.h"
#include "reaper.h"
#include "server.h"
#include "setup_gate.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT_CMDLINE_PATH "/proc/cmdline"
#define AGENT_MODULES_DIR "/lib/modules"
#define AGENT_SYSFS_MODULES_DIR "/sys/module"
#define AGENT_SECRET_ENV "VOIDBOX_SECRET"
#define AGENT_LISTEN_UNIX_PREFIX "unix:"
#define AGENT_LISTEN_VSOCK "vsock"
#define AGENT_EXIT_USAGE 2
#define AGENT_DECIMAL_BASE 10
#define AGENT_HWRNG_PATH "/dev/hwrng"
#define AGENT_HWRNG_MODE 0444

struct agent_options {
	const char *listen;
	const char *secret_hex;
	const char *root_prefix;
	const char *log_level;
};

static void __attribute__((noreturn)) agent_idle_forever(void)
{
	agent_log_emergency("the agent cannot serve the host; idling so the VM stays inspectable");
	for (;;)
		pause();
}

static void __attribute__((noreturn)) agent_fail(bool is_pid1)
{
	if (is_pid1)
		agent_idle_forever();
	exit(EXIT_FAILURE);
}

static void agent_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox-agent [--listen unix:PATH|vsock[:PORT]] [--secret-hex HEX]\n"
		"                     [--root-prefix DIR] [--log-level LEVEL]\n"
		"As PID 1 it sets up the VM and listens on vsock port %u with the secret from\n"
		"voidbox.secret= on the kernel command line. Outside a VM the secret comes from\n"
		"--secret-hex or $%s, and --root-prefix DIR relocates /workspace, /home and\n"
		"/etc/voidbox under DIR (for tests).\n",
		PROTO_GUEST_AGENT_PORT, AGENT_SECRET_ENV);
}

static int agent_parse_options(int argc, char **argv, struct agent_options *options)
{
	static const struct option long_options[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "secret-hex", required_argument, NULL, 's' },
		{ "root-prefix", required_argument, NULL, 'r' },
		{ "log-level", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
		switch (opt) {
		case 'l':
			options->listen = optarg;
			break;
		case 's':
			options->secret_hex = optarg;
			break;
		case 'r':
			options->root_prefix = optarg;
			break;
		case 'v':
			options->log_level = optarg;
			break;
		case 'h':
			agent_usage(stdout);
			exit(EXIT_SUCCESS);
		default:
			agent_usage(stderr);
			return -EINVAL;
		}
	}
	return optind == argc ? 0 : -EINVAL;
}

static void agent_apply_log_level(const char *name)
{
	int level = log_level_parse(name ? name : getenv("VOIDBOX_LOG_LEVEL"));

	if (level >= 0)
		agent_log_set_level((enum log_level)level);
}

/*
 * PID 1 only: the OCI root when asked for, host shares, host disks, loopback and (when asked
 * for) eth0.
 */
/*
 * The entropy device's node is root-only as the kernel makes it; sandboxed programs may read
 * it like /dev/urandom (each read is a request the host fills from its own getrandom()).
 */
static void agent_open_hwrng(void)
{
	if (chmod(AGENT_HWRNG_PATH, AGENT_HWRNG_MODE) < 0 && errno != ENOENT)
		agent_error("cannot make %s readable: %s", AGENT_HWRNG_PATH, strerror(errno));
}

static void agent_init_devices(const char *cmdline_text)
{
	struct mount_spec shares[MOUNTS_MAX];
	size_t count = mounts_parse(cmdline_text, shares, MOUNTS_MAX);
	char device[PATH_MAX];

	if (oci_root_requested(cmdline_text, device, sizeof(device)) &&
	    oci_root_switch(device) == 0)
		init_sandbox_dirs();
	mounts_setup(shares, count);
	disks_setup(disks_requested(cmdline_text));
	netcfg_setup(netcfg_requested(cmdline_text));
	agent_open_hwrng();
}

/* The driver modules each kind of device needs; their dependencies come from depends=. */
/* Every boot, before the agent listens: the host's channel. */
static const char *const agent_modules_for_vsock[] = { "virtio_mmio",
						       "vmw_vsock_virtio_transport" };
/* Every boot, after the agent listens: the entropy device that seeds the guest's RNG. */
static const char *const agent_modules_for_entropy[] = { "virtio_rng" };
static const char *const agent_modules_for_shares[] = { "fuse", "virtiofs", "9pnet_virtio", "9p" };
static const char *const agent_modules_for_network[] = { "virtio_net" };
/* ext4 mounts nothing without a crc32c driver, which it asks for by an alias (no modprobe). */
static const char *const agent_modules_for_oci_root[] = { "virtio_blk", "crc32c_generic", "ext4",
							  "overlay" };
static const char *const agent_modules_for_disks[] = { "virtio_blk" };

#define AGENT_ARRAY_LEN(array) (sizeof(array) / sizeof((array)[0]))
#define AGENT_MODULE_ROOTS_MAX                                                                \
	(AGENT_ARRAY_LEN(agent_modules_for_entropy) + AGENT_ARRAY_LEN(agent_modules_for_shares) + \
	 AGENT_ARRAY_LEN(agent_modules_for_network) + AGENT_ARRAY_LEN(agent_modules_for_oci_root) + \
	 AGENT_ARRAY_LEN(agent_modules_for_disks) + 1)

static size_t agent_roots_add(const char **roots, size_t used, const char *const *names,
			      size_t count)
{
	for (size_t i = 0; i < count; i++)
		roots[used++] = names[i];
	return used;
}

/*
 * Which modules this boot needs once the agent listens: virtio-rng always, and the drivers of
 * the devices the command line asks for (shares, network, an OCI root disk, host disks).
 * Modules the image carries for other features stay unloaded, which saves seconds of boot
 * under emulation. The vsock stack is loaded before, on its own (agent_init_system).
 */
static void agent_module_roots(const char *cmdline_text, const char **roots)
{
	struct mount_spec shares[MOUNTS_MAX];
	char device[PATH_MAX];
	size_t used = 0;

	used = agent_roots_add(roots, used, agent_modules_for_entropy,
			       AGENT_ARRAY_LEN(agent_modules_for_entropy));
	if (mounts_parse(cmdline_text, shares, MOUNTS_MAX) > 0)
		used = agent_roots_add(roots, used, agent_modules_for_shares,
				       AGENT_ARRAY_LEN(agent_modules_for_shares));
	if (netcfg_requested(cmdline_text))
		used = agent_roots_add(roots, used, agent_modules_for_network,
				       AGENT_ARRAY_LEN(agent_modules_for_network));
	if (oci_root_requested(cmdline_text, device, sizeof(device)))
		used = agent_roots_add(roots, used, agent_modules_for_oci_root,
				       AGENT_ARRAY_LEN(agent_modules_for_oci_root));
	else if (disks_requested(cmdline_text) > 0) /* the OCI root's list has virtio_blk */
		used = agent_roots_add(roots, used, agent_modules_for_disks,
				       AGENT_ARRAY_LEN(agent_modules_for_disks));
	roots[used] = NULL;
}

static void agent_load_modules(const char *cmdline_text, const char *const *roots)
{
	int failed = modules_load_all(AGENT_MODULES_DIR, AGENT_SYSFS_MODULES_DIR, cmdline_text,
				      roots);

	if (failed < 0)
		agent_error("cannot scan %s: %s", AGENT_MODULES_DIR, strerror(-failed));
	else if (failed > 0)
		agent_error("%d kernel module(s) failed to load; devices may be missing", failed);
}

/*
 * PID 1 only: what answering the host needs (file systems, clock, the vsock transport);
 * returns the command line text (heap, "" when unreadable) for agent_setup_devices.
 */
static char *agent_init_system(struct agent_cmdline *cmdline)
{
	const char *vsock_roots[AGENT_ARRAY_LEN(agent_modules_for_vsock) + 1];
	char *text = NULL;

	init_environment();
	init_mount_filesystems();
	init_kernel_settings();
	init_sandbox_dirs();
	if (cmdline_read_file(AGENT_CMDLINE_PATH, &text) < 0) {
		agent_error("cannot read %s: no secret, no clock", AGENT_CMDLINE_PATH);
		text = strdup("");
	}
	cmdline_parse(text, cmdline);
	init_hide_kernel_cmdline();
	init_set_clock(cmdline);
	agent_roots_add(vsock_roots, 0, agent_modules_for_vsock,
			AGENT_ARRAY_LEN(agent_modules_for_vsock));
	vsock_roots[AGENT_ARRAY_LEN(agent_modules_for_vsock)] = NULL;
	agent_load_modules(text ? text : "", vsock_roots);
	return text;
}

struct agent_setup {
	char *cmdline_text; /* owned; freed when the set-up is done */
	struct setup_gate gate;
};

/* The rest of the boot: the other modules and the devices; then requests may run. */
static void *agent_setup_devices(void *arg)
{
	struct agent_setup *setup = arg;
	const char *module_roots[AGENT_MODULE_ROOTS_MAX];
	const char *text = setup->cmdline_text ? setup->cmdline_text : "";

	agent_module_roots(text, module_roots);
	agent_load_modules(text, module_roots);
	agent_init_devices(text);
	free(setup->cmdline_text);
	setup->cmdline_text = NULL;
	agent_info("devices set up");
	setup_gate_open(&setup->gate);
	return NULL;
}

/* Runs agent_setup_devices beside the listener, or inline when no thread can be had. */
static void agent_start_setup(struct agent_setup *setup)
{
	pthread_t thread;

	if (pthread_create(&thread, NULL, agent_setup_devices, setup) == 0) {
		pthread_detach(thread);
		return;
	}
	agent_warn("cannot start the device set-up thread; setting up before answering");
	agent_setup_devices(setup);
}

static int agent_secret_from_options(const struct agent_options *options,
				     struct agent_context *ctx)
{
	const char *hex = options->secret_hex ? options->secret_hex : getenv(AGENT_SECRET_ENV);

	if (!hex) {
		agent_error("no session secret: pass --secret-hex HEX or set %s (64 hex digits)",
			    AGENT_SECRET_ENV);
		return -EINVAL;
	}
	if (cmdline_hex_decode(hex, strlen(hex), ctx->secret, sizeof(ctx->secret)) < 0) {
		agent_error("the session secret must be exactly 64 hex digits");
		return -EINVAL;
	}
	ctx->has_secret = true;
	return 0;
}

static int agent_listen(const struct agent_options *options, bool is_pid1)
{
	const char *spec = options->listen;
	unsigned long port = PROTO_GUEST_AGENT_PORT;

	if (is_pid1 || !spec || strncmp(spec, AGENT_LISTEN_VSOCK, strlen(AGENT_LISTEN_VSOCK)) == 0) {
		if (spec && spec[strlen(AGENT_LISTEN_VSOCK)] == ':')
			port = strtoul(spec + strlen(AGENT_LISTEN_VSOCK) + 1, NULL, AGENT_DECIMAL_BASE);
		agent_info("listening on vsock port %lu", port);
		return server_listen_vsock((unsigned int)port);
	}
	if (strncmp(spec, AGENT_LISTEN_UNIX_PREFIX, strlen(AGENT_LISTEN_UNIX_PREFIX)) == 0) {
		agent_info("listening on %s", spec);
		return server_listen_unix(spec + strlen(AGENT_LISTEN_UNIX_PREFIX));
	}
	agent_error("--listen takes unix:PATH or vsock[:PORT], not '%s'", spec);
	return -EINVAL;
}

static int agent_build_context(const struct agent_options *options, struct agent_context *ctx)
{
	ctx->roots.prefix = options->root_prefix ? options->root_prefix : "";
	ctx->drop_privileges = geteuid() == 0;
	ctx->roots.chown_to_sandbox = ctx->drop_privileges;
	if (!ctx->drop_privileges)
		agent_info("not running as root: children keep uid %d and files keep their owner",
			   (int)geteuid());
	ctx->policy = policy_store_new();
	return ctx->policy ? 0 : -ENOMEM;
}

int main(int argc, char **argv)
{
	static struct agent_context ctx;
	static struct agent_setup setup;
	struct agent_options options = { 0 };
	struct agent_cmdline cmdline = { 0 };
	bool is_pid1 = getpid() == 1;
	int listen_fd, err;

	if (!is_pid1 && argc == 3 && strcmp(argv[1], ECHO_MODE_FLAG) == 0)
		return echo_main(argv[2]); /* the benchmarks' raw transport echo (echo.h) */
	reaper_block_signals();
	signal(SIGPIPE, SIG_IGN);
	agent_log_init(is_pid1 ? AGENT_LOG_SINK_KMSG : AGENT_LOG_SINK_STDERR);
	if (!is_pid1 && agent_parse_options(argc, argv, &options) < 0)
		return AGENT_EXIT_USAGE;
	agent_apply_log_level(options.log_level);
	ctx.is_pid1 = is_pid1;
	if (is_pid1) {
		setup.cmdline_text = agent_init_system(&cmdline);
		setup_gate_init(&setup.gate);
		ctx.setup = &setup.gate;
		ctx.has_secret = cmdline.has_secret;
		memcpy(ctx.secret, cmdline.secret, sizeof(ctx.secret));
		explicit_bzero(&cmdline, sizeof(cmdline));
		if (!ctx.has_secret)
			agent_log_emergency("no valid voidbox.secret on the command line: every "
					    "connection will be refused");
	} else if (agent_secret_from_options(&options, &ctx) < 0) {
		return AGENT_EXIT_USAGE;
	}
	if (!is_pid1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		agent_warn("cannot become a child subreaper: %s", strerror(errno));
	err = agent_build_context(&options, &ctx);
	if (!err)
		err = reaper_start();
	if (err) {
		agent_log_emergency("agent setup failed: %s", strerror(-err));
		agent_fail(is_pid1);
	}
	listen_fd = agent_listen(&options, is_pid1);
	if (listen_fd < 0) {
		agent_log_emergency("cannot listen: %s", strerror(-listen_fd));
		agent_fail(is_pid1);
	}
	if (is_pid1)
		agent_start_setup(&setup);
	server_run(listen_fd, &ctx);
	agent_fail(is_pid1);
}
