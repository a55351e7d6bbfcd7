/*
 * The voidbox command line: a table of git-style subcommands, each in its own cli_*.c file
 * with one entry point. Global flags are parsed once in main.c and handed inward as a narrow
 * struct, so no subcommand reads global state.
 */
#ifndef VOIDBOX_CLI_CLI_H
#define VOIDBOX_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
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
struct sandbox_host_settings;
struct proto_bytes;
struct proto_exec_request;
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
/*
 * A flag's whole number in [min, max], digits only. On failure prints "voidbox COMMAND: FLAG
 * takes a whole number from MIN to MAX, not 'TEXT'" and returns false.
 */
bool cli_parse_number(const char *command, const char *flag, const char *text, uint64_t min,
		      uint64_t max, uint64_t *out);
bool cli_parse_uint(const char *command, const char *flag, const char *text, unsigned int min,
		    unsigned int max, unsigned int *out);

/*
 * The host settings every sandbox of this process gets, read from the environment on first
 * use (VOIDBOX_BOOT_TIMEOUT_SECS, XDG_RUNTIME_DIR, VOIDBOX_ALLOW_SLOW_KVM,
 * VOID_BOX_CONNECT_DEADLINE_SECS, VOID_BOX_LIVENESS_SECS); the only place they are read.
 */
const struct sandbox_host_settings *cli_host_settings(void);
/* VOIDBOX_MAX_PARALLEL_VMS (1..64): the VMs a pipeline's fan_out may run at once; 0: default. */
unsigned cli_max_parallel_vms(void);

/* Reads all of stdin when it is a pipe or file; a terminal's stdin is left alone. */
int cli_exec_read_stdin(struct proto_bytes *out);
/*
 * Runs req in sandbox, streaming its output to this process's stdout and stderr; returns the
 * exit status `voidbox exec` gives (the program's code, 124 after its timeout, 137 killed,
 * CLI_EXIT_SANDBOX_FAILURE when the agent did not answer, said as "voidbox COMMAND: ...").
 */
int cli_exec_in_sandbox(const char *command, struct sandbox *sandbox,
			const struct proto_exec_request *req);

int cli_sandbox_start(const char *command, const char *snapshot_ref,
		      const struct sandbox_config *cfg, bool track_dirty_pages,
		      struct sandbox **out, char *err, size_t errlen);

struct vm_disk;

/*
 * Adds a --disk PATH[:ro] argument (cut in place) to cfg, whose disks point at disks (room
 * for VM_MAX_DISKS). -1 after printing why not.
 */
int cli_add_disk(const char *command, char *arg, struct vm_disk *disks,
		 struct sandbox_config *cfg);
/* -1 after printing why when --disk and --snapshot were both given, else 0. */
int cli_check_disks_fit_snapshot(const char *command, const char *snapshot_ref,
				 const struct sandbox_config *cfg);

/* True when argv[i] is -h or --help: every subcommand honours it. */
bool cli_wants_help(int argc, char **argv);

#endif
