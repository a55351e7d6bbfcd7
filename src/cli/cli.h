/*
 * The voidbox command line: a table of git-style subcommands, each in its own cli_*.c file
 * with one entry point. Global flags are parsed once in main.c and handed inward as a narrow
 * struct, so no subcommand reads global state.
 */
#ifndef VOIDBOX_CLI_CLI_H
#define VOIDBOX_CLI_CLI_H

#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#include "devices/net.h"
#include "store/oci_image.h"

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
int cli_serve_run(const struct cli_globals *globals, int argc, char **argv);
int cli_status_run(const struct cli_globals *globals, int argc, char **argv);
int cli_logs_run(const struct cli_globals *globals, int argc, char **argv);
int cli_cancel_run(const struct cli_globals *globals, int argc, char **argv);
int cli_stop_run(const struct cli_globals *globals, int argc, char **argv);

/* `voidbox run --daemon`: submits file (made absolute) to the daemon at url (NULL: default). */
int cli_run_submit(const struct cli_globals *globals, const char *url, const char *file,
		   const char *input, const char *run_id);

struct sandbox;
struct sandbox_config;
struct sandbox_host_settings;
struct daemon_env;
struct spec;
struct spec_diagnostics;
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
/*
 * The daemon's default paths' variables (XDG_RUNTIME_DIR, XDG_CONFIG_HOME, HOME,
 * VOIDBOX_STATE_DIR) for `voidbox serve` and the daemon clients.
 */
const struct daemon_env *cli_daemon_env(void);
/* spec_load_file with the host's environment (host_env_lookup) for copy-from-host entries. */
struct spec *cli_spec_load(const char *path, struct spec_diagnostics *diag);
/* $SOURCE_DATE_EPOCH as an image archive's mtime (reproducible builds); 0 when unset. */
uint32_t cli_source_date_epoch(void);

/* Reads all of stdin when it is a pipe or file; a terminal's stdin is left alone. */
int cli_exec_read_stdin(struct proto_bytes *out);
/*
 * Runs req in sandbox, streaming its output to this process's stdout and stderr; returns the
 * exit status `voidbox exec` gives (the program's code, 124 after its timeout, 137 killed,
 * CLI_EXIT_SANDBOX_FAILURE when the agent did not answer, said as "voidbox COMMAND: ...").
 * With signals (may be NULL), a failure a signal caused is left to cli_stop_signals_status.
 */
struct stop_signals;
int cli_exec_in_sandbox(const char *command, struct sandbox *sandbox,
			const struct proto_exec_request *req, struct stop_signals *signals);

/*
 * SIGINT and SIGTERM for a command with one sandbox (exec, shell; stop_signals.h). Start: 0,
 * or -1 after saying why the signals cannot be watched.
 */
int cli_stop_signals_start(const char *command, struct stop_signals *signals);
/* A signal gives up the start of cfg's sandbox (sandbox_config.cancelled) while it boots. */
void cli_stop_signals_cancel_start(struct stop_signals *signals, struct sandbox_config *cfg);
/* The sandbox becomes what the signals cancel (sandbox_interrupt); at once if one came. */
void cli_stop_signals_watch_sandbox(struct stop_signals *signals, struct sandbox *sandbox);
/*
 * When the command is done with its sandbox: nothing is cancelled any more, and a failure a
 * signal caused (status CLI_EXIT_SANDBOX_FAILURE) is said as that cancel and becomes
 * 128 + the signal. Returns the command's status.
 */
int cli_stop_signals_status(const char *command, struct stop_signals *signals, int status);

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

/* `voidbox image pull|rm|prune` and the pulled images in `image list` (cli_oci.c). */
int cli_image_pull(int argc, char **argv);
int cli_image_rm(int argc, char **argv);
int cli_image_prune(bool json, int argc);
/* Human: a table after the guest images; json: array elements (a comma first if after_others). */
int cli_image_list_pulled(bool json, bool after_others);

/*
 * Where --image's root filesystem path lives while the sandbox config points at it, and the
 * image store's lock (shared) that keeps `image rm` from deleting it before the VM opens it.
 */
struct cli_image_root {
	char rootfs_path[PATH_MAX];
	struct oci_image_lock store_lock;
};

/*
 * --image REF: the pulled image's root filesystem (pulled now when it is not cached) becomes
 * /dev/vda, read-only, with the kernel command line word that makes it the guest's root; the
 * --disk files move up one. ref NULL does nothing. 0, or -1 after printing why. The store
 * lock is held from the lookup on: cli_image_release once every VM booting from the image has
 * opened it (an open file outlives its removal); an exit before that drops it too.
 */
int cli_image_attach(const char *command, const char *ref, const char *snapshot_ref,
		     struct vm_disk *disks, struct sandbox_config *cfg, struct cli_image_root *root);
/* Releases what cli_image_attach holds; a root it never attached (zeroed) is fine. */
void cli_image_release(struct cli_image_root *root);

/*
 * The networking flags of exec, shell, fork and snapshot create (cli_network.c). Their option
 * ids are above every command's own, so a command's getopt switch passes them on unchanged.
 */
enum cli_network_option_id {
	CLI_NETWORK_OPT_FIRST = 3000,
	CLI_NETWORK_OPT_NETWORK = CLI_NETWORK_OPT_FIRST,
	CLI_NETWORK_OPT_PUBLISH,
	CLI_NETWORK_OPT_ALLOW,
	CLI_NETWORK_OPT_DENY,
	CLI_NETWORK_OPT_DNS_SERVER,
	CLI_NETWORK_OPT_NO_DNS,
	CLI_NETWORK_OPT_MAX_FLOWS,
	CLI_NETWORK_OPT_MAX_CONN_RATE,
	CLI_NETWORK_OPT_LAST = CLI_NETWORK_OPT_MAX_CONN_RATE,
};

#define CLI_NETWORK_LONG_OPTIONS                                                        \
	{ "network", no_argument, NULL, CLI_NETWORK_OPT_NETWORK },                       \
	{ "publish", required_argument, NULL, CLI_NETWORK_OPT_PUBLISH },                 \
	{ "allow", required_argument, NULL, CLI_NETWORK_OPT_ALLOW },                     \
	{ "deny", required_argument, NULL, CLI_NETWORK_OPT_DENY },                       \
	{ "dns-server", required_argument, NULL, CLI_NETWORK_OPT_DNS_SERVER },           \
	{ "no-dns", no_argument, NULL, CLI_NETWORK_OPT_NO_DNS },                         \
	{ "max-flows", required_argument, NULL, CLI_NETWORK_OPT_MAX_FLOWS },             \
	{ "max-conn-rate", required_argument, NULL, CLI_NETWORK_OPT_MAX_CONN_RATE },

/* Zeroed is ready: the first network flag fills in the defaults. */
struct cli_network {
	bool initialized;
	bool enabled;	  /* --network */
	bool policy_flag; /* any other network flag */
	struct net_config config;
};

void cli_network_init(struct cli_network *net);
/* 1: option was a network flag and is recorded; 0: not a network flag; -1: bad (printed). */
int cli_network_option(struct cli_network *net, const char *command, int option,
		       const char *arg);
/* Points cfg->network at net's config when --network was given; -1 (printed) on misuse. */
int cli_network_finish(struct cli_network *net, const char *command,
		       struct sandbox_config *cfg);
void cli_network_usage(FILE *out);

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
