/*
 * The voidbox command line: a table of git-style subcommands, each in its own cli_*.c file
 * with one entry point. Global flags are parsed once in main.c and handed inward as a narrow
 * struct, so no subcommand reads global state.
 */
#ifndef VOIDBOX_CLI_CLI_H
#define VOIDBOX_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>

enum cli_output_format {
	CLI_OUTPUT_HUMAN,
	CLI_OUTPUT_JSON,
};

struct cli_globals {
	enum cli_output_format output;
	const char *program_name;
};

/* Exit statuses of the voidbox command itself (a guest program's own code passes through). */
enum cli_exit_status {
	CLI_EXIT_OK = 0,
	CLI_EXIT_FAILURE = 1,
	CLI_EXIT_USAGE = 2,
	/* exec/shell: the VM or the agent failed before the program could report its status */
	CLI_EXIT_SANDBOX_FAILURE = 125,
};

struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(const struct cli_globals *globals, int argc, char **argv);
};

int cli_version_run(const struct cli_globals *globals, int argc, char **argv);
int cli_exec_run(const struct cli_globals *globals, int argc, char **argv);
int cli_image_run(const struct cli_globals *globals, int argc, char **argv);
int cli_run_run(const struct cli_globals *globals, int argc, char **argv);
int cli_validate_run(const struct cli_globals *globals, int argc, char **argv);
int cli_inspect_run(const struct cli_globals *globals, int argc, char **argv);
int cli_shell_run(const struct cli_globals *globals, int argc, char **argv);
int cli_skills_run(const struct cli_globals *globals, int argc, char **argv);
int cli_snapshot_run(const struct cli_globals *globals, int argc, char **argv);
int cli_fork_run(const struct cli_globals *globals, int argc, char **argv);

struct sandbox;
struct sandbox_config;
struct guest_image_paths;

/*
 * Fills cfg's kernel and initramfs from the flags already in cfg, VOID_BOX_KERNEL /
 * VOID_BOX_INITRAMFS or the built image (paths kept in *image). Without an image that is an
 * error (printed) unless a snapshot is asked for: a restore needs none, and only the
 * cold-boot fallback then fails, saying so.
 */
int cli_sandbox_resolve_image(const char *command, const char *snapshot_ref,
			      struct sandbox_config *cfg, struct guest_image_paths *image);

/*
 * Starts the sandbox for exec/shell/fork. snapshot_ref NULL: a cold boot from cfg and no
 * snapshot code runs. Otherwise the reference resolves as a store id prefix, then a directory
 * holding a snapshot; one that names nothing prints a warning and cold-boots, an ambiguous
 * prefix fails. A restored sandbox takes memory and vCPUs from the snapshot, not from cfg.
 */
int cli_sandbox_start(const char *command, const char *snapshot_ref,
		      const struct sandbox_config *cfg, bool track_dirty_pages,
		      struct sandbox **out, char *err, size_t errlen);

/*
 * Adds one --mount HOST_DIR:GUEST_DIR[:ro|:rw] to cfg (text is split in place). 0, or
 * CLI_EXIT_USAGE after printing why.
 */
int cli_mount_add(const char *command, struct sandbox_config *cfg, char *text);
#define CLI_MOUNT_USAGE \
	"  --mount HOST:GUEST[:ro|:rw]  share a host directory at GUEST (default rw; repeatable)\n"

/* True when argv[i] is -h or --help: every subcommand honours it. */
bool cli_wants_help(int argc, char **argv);

#endif
