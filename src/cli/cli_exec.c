/*
 * `voidbox exec`: boot a sandbox, run one program in it, stream its stdout and stderr live,
 * exit with its exit code. The VM's console goes to a log file and never to this terminal, so
 * what the user sees is exactly the program's output.
 *
 * stdin: when it is not a terminal (a pipe or a file) it is read to the end and delivered to
 * the program byte-exact; a terminal's stdin is not read (use `voidbox shell` for interactive
 * work), so a plain `voidbox exec -- ls` never waits for Ctrl-D.
 *
 * SIGINT and SIGTERM once stdin is read stop the sandbox in order (stop_signals.h): the guest
 * syncs and powers off, which ends the program, the VM's runtime directory and cgroup are
 * removed, and voidbox exits 130 or 143.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/stop_signals.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define CLI_EXEC_ERROR_MAX 1024
#define CLI_EXEC_STDIN_CHUNK 65536
#define CLI_EXEC_MAX_BOOT_TIMEOUT_SECS (24u * 3600u)
#define CLI_EXEC_MS_PER_SEC 1000
/* exit statuses when the agent reports no exit code of the program's own */
#define CLI_EXEC_EXIT_TIMED_OUT 124
#define CLI_EXEC_EXIT_KILLED 137

enum cli_exec_option {
	CLI_EXEC_OPT_MEMORY = 1000,
	CLI_EXEC_OPT_VCPUS,
	CLI_EXEC_OPT_ENV,
	CLI_EXEC_OPT_TIMEOUT,
	CLI_EXEC_OPT_KERNEL,
	CLI_EXEC_OPT_INITRAMFS,
	CLI_EXEC_OPT_WORKDIR,
	CLI_EXEC_OPT_SERIAL_LOG,
	CLI_EXEC_OPT_BOOT_TIMEOUT,
	CLI_EXEC_OPT_SNAPSHOT,
	CLI_EXEC_OPT_DISK,
	CLI_EXEC_OPT_MOUNT,
	CLI_EXEC_OPT_IMAGE,
	CLI_EXEC_OPT_HELP,
};

static const struct option cli_exec_options[] = {
	{ "memory", required_argument, NULL, CLI_EXEC_OPT_MEMORY },
	{ "vcpus", required_argument, NULL, CLI_EXEC_OPT_VCPUS },
	{ "env", required_argument, NULL, CLI_EXEC_OPT_ENV },
	{ "timeout", required_argument, NULL, CLI_EXEC_OPT_TIMEOUT },
	{ "kernel", required_argument, NULL, CLI_EXEC_OPT_KERNEL },
	{ "initramfs", required_argument, NULL, CLI_EXEC_OPT_INITRAMFS },
	{ "workdir", required_argument, NULL, CLI_EXEC_OPT_WORKDIR },
	{ "serial-log", required_argument, NULL, CLI_EXEC_OPT_SERIAL_LOG },
	{ "boot-timeout", required_argument, NULL, CLI_EXEC_OPT_BOOT_TIMEOUT },
	{ "snapshot", required_argument, NULL, CLI_EXEC_OPT_SNAPSHOT },
	{ "disk", required_argument, NULL, CLI_EXEC_OPT_DISK },
	CLI_NETWORK_LONG_OPTIONS
	{ "mount", required_argument, NULL, CLI_EXEC_OPT_MOUNT },
	{ "image", required_argument, NULL, CLI_EXEC_OPT_IMAGE },
	{ "help", no_argument, NULL, CLI_EXEC_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

struct cli_exec_args {
	struct sandbox_config sandbox;
	struct proto_exec_request request;
	size_t env_capacity;
	const char *snapshot; /* --snapshot; NULL: cold boot */
	struct vm_disk disks[VM_MAX_DISKS]; /* --disk */
	struct cli_network network;
	const char *image; /* --image */
	struct cli_image_root image_root;
};

static void cli_exec_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox exec [--memory MB] [--vcpus N] [--env K=V]... [--timeout S]\n"
		"                    [--kernel PATH] [--initramfs PATH] [--workdir DIR]\n"
		"                    [--serial-log PATH] [--boot-timeout S] [--snapshot ID]\n"
		"                    [--disk PATH[:ro]]...\n"
		"                    [--network [--publish H:G] [--allow CIDR] [--deny CIDR]...]\n"
		"                    [--mount HOST:GUEST[:ro|:rw]]... [--image REF]\n"
		"                    -- PROGRAM [ARGS...]\n\n"
		"Boots a micro-VM, runs PROGRAM in it as the sandbox user and exits with its exit\n"
		"code. stdout and stderr stream live; piped stdin is delivered to the program.\n"
		"Ctrl-C or SIGTERM shuts the VM down in order (exit 130 or 143).\n\n"
		"  --memory MB        guest RAM (default %u)\n"
		"  --vcpus N          virtual CPUs (default %u)\n"
		"  --env K=V          environment variable for the program (repeatable)\n"
		"  --timeout S        kill the program's process group after S seconds (exit 124)\n"
		"  --kernel PATH      kernel bzImage (else VOID_BOX_KERNEL, else the built image)\n"
		"  --initramfs PATH   initramfs (else VOID_BOX_INITRAMFS, else the built image)\n"
		"  --workdir DIR      working directory in the guest (default the user's home)\n"
		"  --serial-log PATH  write the guest console here (default: a file kept on failure)\n"
		"  --boot-timeout S   give up when the guest agent has not answered after S seconds\n"
		"  --snapshot ID      restore from a snapshot (id prefix, else a snapshot directory)\n"
		"                     instead of booting; one that is not found warns and cold-boots\n"
		"  --disk PATH[:ro]   attach a host file as /dev/vda, /dev/vdb... (repeatable; :ro\n"
		"                     read-only); the sandbox user may read and write it\n"
		CLI_MOUNT_USAGE
		"  --image REF        boot from a pulled OCI image's root filesystem (pulled now\n"
		"                     when it is not cached; see voidbox image pull)\n",
		SANDBOX_DEFAULT_MEMORY_MB, SANDBOX_DEFAULT_VCPUS);
	cli_network_usage(out);
}


static int cli_exec_add_env(struct cli_exec_args *args, const char *assignment)
{
	const char *equals = strchr(assignment, '=');
	struct proto_env_var *var;

	if (!equals || equals == assignment) {
		fprintf(stderr, "voidbox exec: --env takes KEY=VALUE, not '%s'\n", assignment);
		return -EINVAL;
	}
	if (args->request.env_count == args->env_capacity) {
		size_t capacity = args->env_capacity ? args->env_capacity * 2 : 8;
		struct proto_env_var *grown =
			realloc(args->request.env, capacity * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		args->request.env = grown;
		args->env_capacity = capacity;
	}
	var = &args->request.env[args->request.env_count];
	var->key = strndup(assignment, (size_t)(equals - assignment));
	var->value = strdup(equals + 1);
	if (!var->key || !var->value) {
		free(var->key);
		free(var->value);
		return -ENOMEM;
	}
	args->request.env_count++;
	return 0;
}

/* Returns 0, CLI_EXIT_USAGE-style positive status to exit with, or -errno. */
static int cli_exec_parse(int argc, char **argv, struct cli_exec_args *args)
{
	uint64_t value;
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_exec_options, NULL)) != -1) {
		int network_rc = cli_network_option(&args->network, "exec", option, optarg);

		if (network_rc < 0)
			return CLI_EXIT_USAGE;
		if (network_rc > 0)
			continue;
		switch (option) {
		case CLI_EXEC_OPT_MEMORY:
			if (!cli_parse_number("exec", "--memory", optarg, 1, VM_MAX_MEMORY_MB,
					      &value))
				return CLI_EXIT_USAGE;
			args->sandbox.memory_mb = (unsigned int)value;
			break;
		case CLI_EXEC_OPT_VCPUS:
			if (!cli_parse_number("exec", "--vcpus", optarg, 1, VM_MAX_VCPUS, &value))
				return CLI_EXIT_USAGE;
			args->sandbox.vcpus = (unsigned int)value;
			break;
		case CLI_EXEC_OPT_ENV:
			if (cli_exec_add_env(args, optarg) < 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_EXEC_OPT_TIMEOUT:
			if (!cli_parse_number("exec", "--timeout", optarg, 1, UINT32_MAX, &value))
				return CLI_EXIT_USAGE;
			args->request.has_timeout = true;
			args->request.timeout_secs = value;
			break;
		case CLI_EXEC_OPT_KERNEL:
			args->sandbox.kernel_path = optarg;
			break;
		case CLI_EXEC_OPT_INITRAMFS:
			args->sandbox.initramfs_path = optarg;
			break;
		case CLI_EXEC_OPT_WORKDIR:
			args->request.working_dir = optarg;
			break;
		case CLI_EXEC_OPT_SERIAL_LOG:
			args->sandbox.serial_log_path = optarg;
			break;
		case CLI_EXEC_OPT_BOOT_TIMEOUT:
			if (!cli_parse_number("exec", "--boot-timeout", optarg, 1,
					      CLI_EXEC_MAX_BOOT_TIMEOUT_SECS, &value))
				return CLI_EXIT_USAGE;
			args->sandbox.boot_timeout_ms = (int)value * CLI_EXEC_MS_PER_SEC;
			break;
		case CLI_EXEC_OPT_SNAPSHOT:
			args->snapshot = optarg;
			break;
		case CLI_EXEC_OPT_DISK:
			if (cli_add_disk("exec", optarg, args->disks, &args->sandbox) < 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_EXEC_OPT_MOUNT:
			if (cli_mount_add("exec", &args->sandbox, optarg) != 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_EXEC_OPT_IMAGE:
			args->image = optarg;
			break;
		case CLI_EXEC_OPT_HELP:
			cli_exec_usage(stdout);
			return -1;
		default:
			fprintf(stderr, "(see voidbox exec --help)\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (cli_check_disks_fit_snapshot("exec", args->snapshot, &args->sandbox) < 0 ||
	    cli_network_finish(&args->network, "exec", &args->sandbox) < 0)
		return CLI_EXIT_USAGE;
	if (optind >= argc) {
		fprintf(stderr, "voidbox exec: no program given: voidbox exec [OPTIONS] -- PROGRAM [ARGS...]\n");
		return CLI_EXIT_USAGE;
	}
	args->request.program = argv[optind];
	args->request.args = argv + optind + 1;
	args->request.args_count = (size_t)(argc - optind - 1);
	return 0;
}

int cli_exec_read_stdin(struct proto_bytes *out)
{
	size_t capacity = 0;

	out->data = NULL;
	out->len = 0;
	if (isatty(STDIN_FILENO))
		return 0;
	for (;;) {
		ssize_t got;

		if (out->len + CLI_EXEC_STDIN_CHUNK > capacity) {
			size_t grown_capacity = capacity ? capacity * 2 : CLI_EXEC_STDIN_CHUNK * 2;
			uint8_t *grown;

			if (grown_capacity > PROTO_MAX_PAYLOAD) {
				fprintf(stderr, "voidbox: stdin is larger than the %u MiB a request can carry; write the data to a file in the guest instead\n",
					PROTO_MAX_PAYLOAD >> 20);
				return -EFBIG;
			}
			grown = realloc(out->data, grown_capacity);
			if (!grown)
				return -ENOMEM;
			out->data = grown;
			capacity = grown_capacity;
		}
		got = read(STDIN_FILENO, out->data + out->len, capacity - out->len);
		if (got == 0)
			return 0;
		if (got < 0) {
			if (errno == EINTR)
				continue;
			/* a closed stdin (EBADF) simply means no input */
			return errno == EBADF ? 0 : -errno;
		}
		out->len += (size_t)got;
	}
}

static void cli_exec_on_chunk(const struct proto_exec_output_chunk *chunk, void *opaque)
{
	bool *streamed_any = opaque;

	*streamed_any = true;
	/* a reader that went away (EPIPE) just stops seeing output */
	(void)fd_write_full(chunk->stream == PROTO_STREAM_STDERR ? STDERR_FILENO : STDOUT_FILENO,
			    chunk->data.data, chunk->data.len);
}

static int cli_exec_status_from_response(const struct proto_exec_response *response)
{
	if (response->exit_code >= 0)
		return response->exit_code;
	if (response->error)
		fprintf(stderr, "voidbox exec: %s\n", response->error);
	if (response->code == PROTO_ERROR_TIMED_OUT)
		return CLI_EXEC_EXIT_TIMED_OUT;
	return CLI_EXEC_EXIT_KILLED;
}

static void cli_exec_args_free(struct cli_exec_args *args)
{
	for (size_t i = 0; i < args->request.env_count; i++) {
		free(args->request.env[i].key);
		free(args->request.env[i].value);
	}
	free(args->request.env);
	free(args->request.stdin_data.data);
	cli_image_release(&args->image_root); /* a start that failed before the boot */
}

/* The signals' target: the sandbox. */
static void cli_stop_signals_interrupt(void *opaque, bool force)
{
	sandbox_interrupt(opaque, force);
}

int cli_stop_signals_start(const char *command, struct stop_signals *signals)
{
	int rc = stop_signals_start(signals);

	if (rc < 0)
		fprintf(stderr, "voidbox %s: cannot watch for SIGINT and SIGTERM: %s\n", command,
			strerror(-rc));
	return rc < 0 ? -1 : 0;
}

static bool cli_stop_signals_came(void *opaque)
{
	return stop_signals_received(opaque) != 0;
}

void cli_stop_signals_cancel_start(struct stop_signals *signals, struct sandbox_config *cfg)
{
	cfg->cancelled = cli_stop_signals_came;
	cfg->cancelled_opaque = signals;
}

void cli_stop_signals_watch_sandbox(struct stop_signals *signals, struct sandbox *sandbox)
{
	stop_signals_set_target(signals, cli_stop_signals_interrupt, sandbox);
}

int cli_stop_signals_status(const char *command, struct stop_signals *signals, int status)
{
	int cancelled_by;

	stop_signals_set_target(signals, NULL, NULL);
	cancelled_by = stop_signals_received(signals);
	if (!cancelled_by || status != CLI_EXIT_SANDBOX_FAILURE)
		return status;
	fprintf(stderr, "voidbox %s: cancelled by %s; the sandbox was shut down\n", command,
		stop_signals_name(cancelled_by));
	return STOP_SIGNALS_EXIT_BASE + cancelled_by;
}

int cli_exec_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_exec_args args;
	struct guest_image_paths image;
	struct sandbox *sandbox = NULL;
	struct stop_signals signals;
	char err[CLI_EXEC_ERROR_MAX];
	int status = CLI_EXIT_SANDBOX_FAILURE;
	bool watching = false;
	int rc;

	(void)globals;
	memset(&args, 0, sizeof(args));
	rc = cli_exec_parse(argc, argv, &args);
	if (rc != 0) {
		cli_exec_args_free(&args);
		return rc < 0 ? CLI_EXIT_OK : rc;
	}
	if (cli_sandbox_resolve_image("exec", args.snapshot, &args.sandbox, &image) < 0)
		goto out;
	rc = cli_exec_read_stdin(&args.request.stdin_data);
	if (rc < 0) {
		if (rc != -EFBIG)
			fprintf(stderr, "voidbox exec: cannot read stdin: %s\n", strerror(-rc));
		goto out;
	}
	/*
	 * Both after stdin: a slow writer does not hold the image store's lock (and so `image
	 * rm`), and a Ctrl-C while stdin is read ends the command as before.
	 */
	if (cli_image_attach("exec", args.image, args.snapshot, args.disks, &args.sandbox,
			     &args.image_root) < 0) {
		status = CLI_EXIT_FAILURE;
		goto out;
	}
	if (cli_stop_signals_start("exec", &signals) < 0)
		goto out;
	watching = true;
	args.sandbox.vmm_placement = SANDBOX_VMM_OWN_PROCESS; /* exec takes no snapshot */
	cli_stop_signals_cancel_start(&signals, &args.sandbox);
	rc = cli_sandbox_start("exec", args.snapshot, &args.sandbox, false, &sandbox, err,
			       sizeof(err));
	cli_image_release(&args.image_root); /* the VM has its rootfs open, or never will */
	if (rc < 0) {
		if (rc != -ECANCELED) /* a cancel is said by cli_stop_signals_status */
			fprintf(stderr, "voidbox exec: %s\n", err);
		goto out;
	}
	/* a signal just after the boot cancels now, and the exec fails at once */
	cli_stop_signals_watch_sandbox(&signals, sandbox);
	status = cli_exec_in_sandbox("exec", sandbox, &args.request, &signals);

out:
	if (watching)
		status = cli_stop_signals_status("exec", &signals, status);
	/* the console log is worth keeping only when the sandbox itself failed */
	sandbox_destroy(sandbox, status == CLI_EXIT_SANDBOX_FAILURE);
	if (watching)
		stop_signals_stop(&signals);
	cli_exec_args_free(&args);
	return status;
}

int cli_exec_in_sandbox(const char *command, struct sandbox *sandbox,
			const struct proto_exec_request *req, struct stop_signals *signals)
{
	struct proto_exec_response response = { 0 };
	char err[CLI_EXEC_ERROR_MAX];
	bool streamed_any = false;
	int status;

	if (sandbox_exec(sandbox, req, cli_exec_on_chunk, &streamed_any, &response, err,
			 sizeof(err)) < 0) {
		if (!signals || !stop_signals_received(signals))
			fprintf(stderr, "voidbox %s: %s\n", command, err);
		proto_exec_response_free(&response);
		return CLI_EXIT_SANDBOX_FAILURE;
	}
	/* an agent that streams nothing still returns the full output in the response */
	if (!streamed_any) {
		(void)fd_write_full(STDOUT_FILENO, response.stdout_data.data, response.stdout_data.len);
		(void)fd_write_full(STDERR_FILENO, response.stderr_data.data, response.stderr_data.len);
	}
	status = cli_exec_status_from_response(&response);
	proto_exec_response_free(&response);
	return status;
}
