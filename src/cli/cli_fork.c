/*
 * `voidbox fork`: boot (or restore) one parent sandbox, warm it up, fork it into N live
 * copy-on-write children, run the same program in the parent and every child at once, print
 * each one's output and exit code, and tear everything down.
 *
 * The CLI process owns its VMs, so a fork outlives nothing: the command is the whole life of
 * the family. Each run sees VOIDBOX_FORK_INDEX (0 for the parent, 1..N for the children) so
 * one program can branch on it, which is what forking is for: many explorations of one warmed
 * in-memory state. Runs happen on one thread per sandbox; output is collected, then printed
 * in index order so it never interleaves.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define CLI_FORK_ERROR_MAX 1024
#define CLI_FORK_MAX_CHILDREN 64u
#define CLI_FORK_INDEX_ENV "VOIDBOX_FORK_INDEX"
#define CLI_FORK_INDEX_TEXT 16
#define CLI_FORK_SHELL "/bin/sh"

enum cli_fork_option {
	CLI_FORK_OPT_CHILDREN = 1000,
	CLI_FORK_OPT_SNAPSHOT,
	CLI_FORK_OPT_KERNEL,
	CLI_FORK_OPT_INITRAMFS,
	CLI_FORK_OPT_MEMORY,
	CLI_FORK_OPT_VCPUS,
	CLI_FORK_OPT_WARMUP,
	CLI_FORK_OPT_TIMEOUT,
	CLI_FORK_OPT_MOUNT,
	CLI_FORK_OPT_IMAGE,
	CLI_FORK_OPT_HELP,
};

static const struct option cli_fork_options[] = {
	{ "children", required_argument, NULL, CLI_FORK_OPT_CHILDREN },
	{ "snapshot", required_argument, NULL, CLI_FORK_OPT_SNAPSHOT },
	{ "kernel", required_argument, NULL, CLI_FORK_OPT_KERNEL },
	{ "initramfs", required_argument, NULL, CLI_FORK_OPT_INITRAMFS },
	{ "memory", required_argument, NULL, CLI_FORK_OPT_MEMORY },
	{ "vcpus", required_argument, NULL, CLI_FORK_OPT_VCPUS },
	{ "warmup", required_argument, NULL, CLI_FORK_OPT_WARMUP },
	{ "timeout", required_argument, NULL, CLI_FORK_OPT_TIMEOUT },
	CLI_NETWORK_LONG_OPTIONS
	{ "mount", required_argument, NULL, CLI_FORK_OPT_MOUNT },
	{ "image", required_argument, NULL, CLI_FORK_OPT_IMAGE },
	{ "help", no_argument, NULL, CLI_FORK_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

struct cli_fork_args {
	struct sandbox_config sandbox;
	unsigned int children;
	const char *snapshot;
	const char *warmup;
	unsigned int timeout_secs;
	char **program;
	int program_argc;
	struct cli_network network;
	const char *image; /* --image: the parent (and so every child) boots from it */
	struct vm_disk image_disk[1];
	struct cli_image_root image_root;
};

/* One run of PROGRAM in one member of the family. */
struct cli_fork_run {
	struct sandbox *sandbox;
	const struct cli_fork_args *args;
	unsigned int index;
	pthread_t thread;
	bool started;
	int rc;
	long ms;
	struct proto_exec_response response;
	char error[CLI_FORK_ERROR_MAX];
};

static void cli_fork_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox fork --children N [--snapshot ID | --kernel K --initramfs I --memory MB --vcpus V]\n"
		"                    [--warmup 'SHELL COMMAND'] [--timeout S] [--network ...]\n"
		"                    [--mount HOST:GUEST[:ro|:rw]]... -- PROGRAM [ARGS...]\n\n"
		"Boots a parent VM (or restores it from --snapshot), runs the warm-up command in it,\n"
		"forks it into N live copy-on-write children, then runs PROGRAM in the parent and in\n"
		"every child at once with %s=0 (parent) or 1..N (children), prints each one's\n"
		"output and exit code, and stops them all. Exits 0 when every run exits 0.\n"
		"With --network every child gets its own network stack with the parent's policy\n"
		"(published ports stay with the parent).\n\n"
		"  --children N     children to fork (1..%u)\n"
		"  --snapshot ID    restore the parent from a snapshot (id prefix or directory)\n"
		"  --image REF      boot the parent from a pulled OCI image (pulled when absent)\n"
		"  --warmup CMD     run `sh -c CMD` in the parent before forking (must exit 0)\n"
		"  --timeout S      kill each PROGRAM after S seconds\n"
		CLI_MOUNT_USAGE
		"Children share the parent's mounts: the same host directories, written by all.\n",
		CLI_FORK_INDEX_ENV, CLI_FORK_MAX_CHILDREN);
	cli_network_usage(out);
}


static int cli_fork_parse_option(int option, struct cli_fork_args *a)
{
	switch (option) {
	case CLI_FORK_OPT_CHILDREN:
		return cli_parse_uint("fork", "--children", optarg, 1, CLI_FORK_MAX_CHILDREN,
				      &a->children) ?
			       0 : CLI_EXIT_USAGE;
	case CLI_FORK_OPT_SNAPSHOT:
		a->snapshot = optarg;
		return 0;
	case CLI_FORK_OPT_KERNEL:
		a->sandbox.kernel_path = optarg;
		return 0;
	case CLI_FORK_OPT_INITRAMFS:
		a->sandbox.initramfs_path = optarg;
		return 0;
	case CLI_FORK_OPT_MEMORY:
		return cli_parse_uint("fork", "--memory", optarg, 1, VM_MAX_MEMORY_MB,
				      &a->sandbox.memory_mb) ? 0 : CLI_EXIT_USAGE;
	case CLI_FORK_OPT_VCPUS:
		return cli_parse_uint("fork", "--vcpus", optarg, 1, VM_MAX_VCPUS, &a->sandbox.vcpus) ?
			       0 : CLI_EXIT_USAGE;
	case CLI_FORK_OPT_WARMUP:
		a->warmup = optarg;
		return 0;
	case CLI_FORK_OPT_TIMEOUT:
		return cli_parse_uint("fork", "--timeout", optarg, 1, UINT32_MAX, &a->timeout_secs) ?
			       0 : CLI_EXIT_USAGE;
	case CLI_FORK_OPT_MOUNT:
		return cli_mount_add("fork", &a->sandbox, optarg);
	case CLI_FORK_OPT_IMAGE:
		a->image = optarg;
		return 0;
	case CLI_FORK_OPT_HELP:
		cli_fork_usage(stdout);
		return -1;
	default:
		fprintf(stderr, "(see voidbox fork --help)\n");
		return CLI_EXIT_USAGE;
	}
}

static int cli_fork_parse(int argc, char **argv, struct cli_fork_args *a)
{
	int option, rc;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_fork_options, NULL)) != -1) {
		rc = cli_network_option(&a->network, "fork", option, optarg);
		if (rc < 0)
			return CLI_EXIT_USAGE;
		if (rc > 0)
			continue;
		rc = cli_fork_parse_option(option, a);
		if (rc != 0)
			return rc;
	}
	if (cli_network_finish(&a->network, "fork", &a->sandbox) < 0)
		return CLI_EXIT_USAGE;
	if (!a->children) {
		fprintf(stderr, "voidbox fork: say how many children: --children N\n");
		return CLI_EXIT_USAGE;
	}
	if (optind >= argc) {
		fprintf(stderr, "voidbox fork: no program given: voidbox fork --children N -- PROGRAM [ARGS...]\n");
		return CLI_EXIT_USAGE;
	}
	if (cli_image_attach("fork", a->image, a->snapshot, a->image_disk, &a->sandbox,
			     &a->image_root) < 0)
		return CLI_EXIT_FAILURE;
	a->program = argv + optind;
	a->program_argc = argc - optind;
	return 0;
}

static void *cli_fork_run_thread(void *opaque)
{
	struct cli_fork_run *run = opaque;
	char index_text[CLI_FORK_INDEX_TEXT];
	char env_key[] = CLI_FORK_INDEX_ENV;
	struct proto_env_var env = { .key = env_key, .value = index_text };
	struct proto_exec_request request = {
		.program = run->args->program[0],
		.args = run->args->program + 1,
		.args_count = (size_t)(run->args->program_argc - 1),
		.env = &env,
		.env_count = 1,
		.has_timeout = run->args->timeout_secs > 0,
		.timeout_secs = run->args->timeout_secs,
	};
	long started = (long)clock_monotonic_ms();

	snprintf(index_text, sizeof(index_text), "%u", run->index);
	run->rc = sandbox_exec(run->sandbox, &request, NULL, NULL, &run->response, run->error,
			       sizeof(run->error));
	run->ms = (long)clock_monotonic_ms() - started;
	return NULL;
}

static int cli_fork_warmup(struct sandbox *parent, const char *command)
{
	static char shell[] = CLI_FORK_SHELL, dash_c[] = "-c";
	char *args[] = { dash_c, (char *)command };
	struct proto_exec_request request = { .program = shell, .args = args,
					      .args_count = sizeof(args) / sizeof(args[0]) };
	struct proto_exec_response response = { 0 };
	char err[CLI_FORK_ERROR_MAX];
	int rc = sandbox_exec(parent, &request, NULL, NULL, &response, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "voidbox fork: the warm-up did not run: %s\n", err);
	else if (response.exit_code != 0)
		fprintf(stderr, "voidbox fork: the warm-up exited %d: %.*s\n", response.exit_code,
			(int)response.stderr_data.len, (const char *)response.stderr_data.data);
	if (rc == 0 && response.exit_code != 0)
		rc = -ECANCELED;
	proto_exec_response_free(&response);
	return rc;
}

static json_t *cli_fork_run_json(const struct cli_fork_run *run)
{
	const struct proto_exec_response *r = &run->response;

	return json_pack("{s:I, s:s, s:i, s:s%, s:s%, s:I, s:s?}", "index",
			 (json_int_t)run->index, "role", run->index ? "child" : "parent",
			 "exit_code", run->rc < 0 ? -1 : r->exit_code, "stdout",
			 r->stdout_data.data ? (const char *)r->stdout_data.data : "",
			 r->stdout_data.len, "stderr",
			 r->stderr_data.data ? (const char *)r->stderr_data.data : "",
			 r->stderr_data.len, "ms", (json_int_t)run->ms, "error",
			 run->rc < 0 ? run->error : r->error);
}

static void cli_fork_print(const struct cli_globals *globals, const struct cli_fork_run *runs,
			   unsigned int count, long start_ms, long fork_ms)
{
	if (globals->output == CLI_OUTPUT_JSON) {
		json_t *list = json_array();
		json_t *root;

		for (unsigned int i = 0; list && i < count; i++)
			json_array_append_new(list, cli_fork_run_json(&runs[i]));
		root = json_pack("{s:I, s:I, s:I, s:f, s:o}", "children", (json_int_t)(count - 1),
				 "parent_start_ms", (json_int_t)start_ms, "fork_ms",
				 (json_int_t)fork_ms, "fork_ms_per_child",
				 (double)fork_ms / (double)(count - 1), "runs",
				 list ? list : json_array());
		if (root) {
			json_dumpf(root, stdout, JSON_INDENT(2));
			fputc('\n', stdout);
			json_decref(root);
		}
		return;
	}
	printf("parent ready in %ld ms; forked %u children in %ld ms (%.1f ms each)\n", start_ms,
	       count - 1, fork_ms, (double)fork_ms / (double)(count - 1));
	for (unsigned int i = 0; i < count; i++) {
		const struct proto_exec_response *r = &runs[i].response;

		printf("== %s %u: exit %d (%ld ms) ==\n", i ? "child" : "parent", i,
		       runs[i].rc < 0 ? -1 : r->exit_code, runs[i].ms);
		/* an empty output may have no buffer at all */
		if (r->stdout_data.len)
			fwrite(r->stdout_data.data, 1, r->stdout_data.len, stdout);
		if (r->stderr_data.len)
			fwrite(r->stderr_data.data, 1, r->stderr_data.len, stdout);
		if (runs[i].rc < 0) /* the reason, so a wedged guest is told from a refused call */
			printf("(the agent did not answer: %s)\n",
			       runs[i].error[0] ? runs[i].error : strerror(-runs[i].rc));
		else if (r->error)
			printf("(%s)\n", r->error);
	}
}

/* Runs PROGRAM in every member at once; returns the family's exit status. */
static int cli_fork_run_all(struct cli_fork_run *runs, unsigned int count)
{
	int status = CLI_EXIT_OK;

	for (unsigned int i = 0; i < count; i++) {
		runs[i].started = pthread_create(&runs[i].thread, NULL, cli_fork_run_thread,
						 &runs[i]) == 0;
		if (!runs[i].started)
			cli_fork_run_thread(&runs[i]);
	}
	for (unsigned int i = 0; i < count; i++) {
		if (runs[i].started)
			pthread_join(runs[i].thread, NULL);
		if (runs[i].rc < 0 || runs[i].response.exit_code != 0)
			status = CLI_EXIT_FAILURE;
	}
	return status;
}

/*
 * Forks the family and runs PROGRAM in every member. The children reopen the parent's disks
 * by path, --image's rootfs among them, so the image store lock in image_root is released
 * only once they exist.
 */
static int cli_fork_family(const struct cli_globals *globals, const struct cli_fork_args *args,
			   struct cli_image_root *image_root, struct sandbox *parent,
			   long start_ms)
{
	unsigned int count = args->children + 1;
	struct sandbox **children = calloc(args->children, sizeof(*children));
	struct cli_fork_run *runs = calloc(count, sizeof(*runs));
	char err[CLI_FORK_ERROR_MAX];
	int status = CLI_EXIT_SANDBOX_FAILURE, rc;
	long started, fork_ms;

	if (!children || !runs) {
		fprintf(stderr, "voidbox fork: out of memory\n");
		goto out;
	}
	started = (long)clock_monotonic_ms();
	rc = sandbox_fork(parent, args->children, children, err, sizeof(err));
	cli_image_release(image_root);
	if (rc < 0) {
		fprintf(stderr, "voidbox fork: %s\n", err);
		free(children);
		children = NULL;
		goto out;
	}
	fork_ms = (long)clock_monotonic_ms() - started;
	for (unsigned int i = 0; i < count; i++) {
		runs[i].sandbox = i ? children[i - 1] : parent;
		runs[i].args = args;
		runs[i].index = i;
	}
	status = cli_fork_run_all(runs, count);
	cli_fork_print(globals, runs, count, start_ms, fork_ms);
out:
	for (unsigned int i = 0; children && i < args->children; i++)
		sandbox_destroy(children[i], status == CLI_EXIT_SANDBOX_FAILURE);
	for (unsigned int i = 0; runs && i < count; i++)
		proto_exec_response_free(&runs[i].response);
	free(children);
	free(runs);
	return status;
}

int cli_fork_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_fork_args args = { 0 };
	struct guest_image_paths image;
	struct sandbox *parent = NULL;
	char err[CLI_FORK_ERROR_MAX];
	int status = CLI_EXIT_SANDBOX_FAILURE;
	long started;
	int rc = cli_fork_parse(argc, argv, &args);

	if (rc != 0)
		return rc < 0 ? CLI_EXIT_OK : rc;
	if (cli_sandbox_resolve_image("fork", args.snapshot, &args.sandbox, &image) < 0)
		return CLI_EXIT_SANDBOX_FAILURE;
	started = (long)clock_monotonic_ms();
	/* the parent's VMM process writes what the children restore from (sandbox_fork) */
	args.sandbox.vmm_placement = SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS;
	if (cli_sandbox_start("fork", args.snapshot, &args.sandbox, false, &parent, err,
			      sizeof(err)) < 0) {
		fprintf(stderr, "voidbox fork: %s\n", err);
		goto out;
	}
	started = (long)clock_monotonic_ms() - started;
	if (args.warmup && cli_fork_warmup(parent, args.warmup) < 0)
		goto out;
	status = cli_fork_family(globals, &args, &args.image_root, parent, started);
out:
	cli_image_release(&args.image_root);
	sandbox_destroy(parent, status == CLI_EXIT_SANDBOX_FAILURE);
	return status;
}
