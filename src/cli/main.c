/*
 * Entry point of the voidbox command: global flags (--output, --log-level), then dispatch to
 * one subcommand from a table. Everything a subcommand needs arrives as arguments; logging is
 * configured here once so every module's progress goes through the same levelled logger.
 * What a command printed is flushed here and checked, so output that could not be written (a
 * report redirected onto a full disk) fails the command with why, instead of exiting 0 with the
 * file cut short.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/host_env.h"
#include "common/log.h"

static const struct cli_command cli_commands[] = {
	{ "cancel", "cancel a daemon run; its VMs stop", cli_cancel_run },
	{ "exec", "boot a VM, run one program in it, exit with its exit code", cli_exec_run },
	{ "fork", "fork one warmed-up VM into N live children and run a program in each", cli_fork_run },
	{ "image", "build, list or remove guest images (kernel + initramfs)", cli_image_run },
	{ "logs", "print a daemon run's events (--follow streams them)", cli_logs_run },
	{ "inspect", "show the sandbox a spec would run in here, without booting", cli_inspect_run },
	{ "run", "run a workflow, agent or pipeline spec and print its report", cli_run_run },
	{ "serve", "run the daemon: an HTTP API for runs on a unix socket or TCP", cli_serve_run },
	{ "shell", "open an interactive terminal in a fresh VM", cli_shell_run },
	{ "skills", "list a spec's skills with their source", cli_skills_run },
	{ "snapshot", "create, list, export, import, verify, delete or gc VM snapshots", cli_snapshot_run },
	{ "status", "show a daemon run, or list them", cli_status_run },
	{ "stop", "stop a daemon run's service programs gracefully", cli_stop_run },
	{ "validate", "check a spec and list every error with a hint", cli_validate_run },
	{ "version", "print the version", cli_version_run },
};

#define CLI_COMMAND_COUNT (sizeof(cli_commands) / sizeof(cli_commands[0]))

bool cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return false;
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return true;
	}
	return false;
}

static void cli_print_usage(FILE *out, const char *program_name)
{
	fprintf(out,
		"usage: %s [--output human|json] [--log-level LEVEL] COMMAND [ARGS...]\n\n"
		"voidbox runs untrusted work in KVM micro-VMs.\n\ncommands:\n",
		program_name);
	for (size_t i = 0; i < CLI_COMMAND_COUNT; i++)
		fprintf(out, "  %-10s %s\n", cli_commands[i].name, cli_commands[i].summary);
	fprintf(out,
		"\nglobal options:\n"
		"  --output human|json   output format (default human)\n"
		"  --log-level LEVEL     trace|debug|info|warn|error|off (env VOIDBOX_LOG_LEVEL)\n"
		"\nRun '%s COMMAND --help' for a command's options.\n",
		program_name);
}

/*
 * Flushes stdout: rc unchanged when everything reached it, else CLI_EXIT_FAILURE (or the
 * command's own failure) after saying what to do.
 */
static int cli_finish_output(int rc)
{
	/* errno is the flush's own only when the flush failed */
	int code = fflush(stdout) == 0 ? 0 : errno;

	if (code == 0 && !ferror(stdout))
		return rc;
	if (code == ENOSPC || code == EDQUOT)
		fprintf(stderr, "voidbox: cannot write the output: %s: free space where it goes, "
			"or redirect it to a file system with room; the output is incomplete\n",
			strerror(code));
	else
		fprintf(stderr, "voidbox: cannot write the output: %s; the output is incomplete\n",
			code ? strerror(code) : "write error");
	return rc == CLI_EXIT_OK ? CLI_EXIT_FAILURE : rc;
}

int main(int argc, char **argv)
{
	struct cli_globals globals = { .output = CLI_OUTPUT_HUMAN, .program_name = "voidbox" };
	int arg_index = 1;

	log_set_level(LOG_LEVEL_WARN);
	if (host_env_apply() < 0)
		return CLI_EXIT_FAILURE;

	while (arg_index < argc && argv[arg_index][0] == '-') {
		const char *flag = argv[arg_index];

		if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
			cli_print_usage(stdout, globals.program_name);
			return CLI_EXIT_OK;
		}
		if (strcmp(flag, "--version") == 0)
			return cli_version_run(&globals, 1, argv);
		if (arg_index + 1 >= argc) {
			fprintf(stderr, "voidbox: %s needs a value\n", flag);
			return CLI_EXIT_USAGE;
		}
		if (strcmp(flag, "--output") == 0) {
			const char *format = argv[arg_index + 1];

			if (strcmp(format, "json") == 0) {
				globals.output = CLI_OUTPUT_JSON;
			} else if (strcmp(format, "human") == 0) {
				globals.output = CLI_OUTPUT_HUMAN;
			} else {
				fprintf(stderr, "voidbox: --output takes human or json, not '%s'\n",
					format);
				return CLI_EXIT_USAGE;
			}
		} else if (strcmp(flag, "--log-level") == 0) {
			int level = log_level_parse(argv[arg_index + 1]);

			if (level < 0) {
				fprintf(stderr,
					"voidbox: --log-level takes trace, debug, info, warn, error or off, not '%s'\n",
					argv[arg_index + 1]);
				return CLI_EXIT_USAGE;
			}
			log_set_level((enum log_level)level);
		} else {
			fprintf(stderr, "voidbox: unknown option '%s' (see voidbox --help)\n", flag);
			return CLI_EXIT_USAGE;
		}
		arg_index += 2;
	}

	if (arg_index >= argc) {
		cli_print_usage(stderr, globals.program_name);
		return CLI_EXIT_USAGE;
	}
	for (size_t i = 0; i < CLI_COMMAND_COUNT; i++)
		if (strcmp(argv[arg_index], cli_commands[i].name) == 0)
			return cli_finish_output(cli_commands[i].run(&globals, argc - arg_index,
								     argv + arg_index));
	if (strcmp(argv[arg_index], "help") == 0) {
		cli_print_usage(stdout, globals.program_name);
		return CLI_EXIT_OK;
	}
	fprintf(stderr, "voidbox: unknown command '%s' (see voidbox --help)\n", argv[arg_index]);
	return CLI_EXIT_USAGE;
}
