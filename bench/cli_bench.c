/*
 * The CLI's restore against the CLI's cold boot, as users run them: every figure is the wall
 * time of one `voidbox` process, from fork to exit, so process start-up, the store lookup, the
 * VMM process, the guest's work and the teardown all count:
 *   - `voidbox version` (the floor any command pays: loading the binary and its libraries);
 *   - `voidbox exec -- true`, a cold boot;
 *   - `voidbox exec --snapshot ID -- true`, a restore of a base the bench made first with
 *     `voidbox snapshot create` (its first restore records the working-set list and is
 *     reported apart; the others prefetch it).
 * snapshot_bench measures cold boot and restore inside one process; this bench shows what the
 * CLI adds to both, which is the ratio a user sees (issue: "the goal holds through the CLI
 * too"). The store is a fresh VOIDBOX_HOME in TMPDIR (a local disk or tmpfs, as a user's store
 * is), removed at the end; the guest image is passed by path, so the user's store is only read.
 * Cold and restore runs alternate so machine drift hits both alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot_measure.h"
#include "cli/host_env.h"
#include "store/guest_image.h"

#define CB_PROG "cli_bench" /* the name its messages start with */
#define CB_DEFAULT_RUNS 5
#define CB_MAX_RUNS 100
#define CB_DEFAULT_MEMORY_MB 256
#define CB_MAX_MEMORY_MB 65536
#define CB_OUTPUT_MAX 65536
#define CB_EXIT_USAGE 2
#define CB_HOME_TEMPLATE "voidbox-cli-bench-XXXXXX"
#define CB_CLI_BESIDE "../src/cli/voidbox" /* from build/bench to build/src/cli */
#define CB_NUMBER_TEXT 16

struct cb_options {
	const char *voidbox;
	const char *kernel;
	const char *initramfs;
	const char *json_path;
	unsigned int runs;
	unsigned int memory_mb;
	bool keep_home;
};

struct cb_figures {
	double version_ms[CB_MAX_RUNS];
	double cold_ms[CB_MAX_RUNS];
	double restore_ms[CB_MAX_RUNS];
	double create_ms;
	double first_restore_ms;
	char snapshot_id[CB_OUTPUT_MAX];
};

static void cb_usage(FILE *out)
{
	fprintf(out,
		"usage: cli_bench [--voidbox PATH] [--runs N] [--memory MB] [--kernel K]\n"
		"                 [--initramfs I] [--json PATH] [--keep-home]\n\n"
		"Wall time of whole voidbox processes: `voidbox version`, a cold `voidbox exec --\n"
		"true` and `voidbox exec --snapshot ID -- true` (N runs each, alternating), in a\n"
		"fresh VOIDBOX_HOME under TMPDIR. Needs a /dev/kvm that runs stock kernels.\n"
		"Defaults: voidbox beside this build (%s), %d runs, %d MiB.\n",
		CB_CLI_BESIDE, CB_DEFAULT_RUNS, CB_DEFAULT_MEMORY_MB);
}

enum cb_option {
	CB_OPT_VOIDBOX = 1000, CB_OPT_RUNS, CB_OPT_MEMORY, CB_OPT_KERNEL, CB_OPT_INITRAMFS,
	CB_OPT_JSON, CB_OPT_KEEP_HOME, CB_OPT_HELP,
};

static int cb_parse(int argc, char **argv, struct cb_options *o)
{
	static const struct option options[] = {
		{ "voidbox", required_argument, NULL, CB_OPT_VOIDBOX },
		{ "runs", required_argument, NULL, CB_OPT_RUNS },
		{ "memory", required_argument, NULL, CB_OPT_MEMORY },
		{ "kernel", required_argument, NULL, CB_OPT_KERNEL },
		{ "initramfs", required_argument, NULL, CB_OPT_INITRAMFS },
		{ "json", required_argument, NULL, CB_OPT_JSON },
		{ "keep-home", no_argument, NULL, CB_OPT_KEEP_HOME },
		{ "help", no_argument, NULL, CB_OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		bool ok = true;

		switch (c) {
		case CB_OPT_VOIDBOX: o->voidbox = optarg; break;
		case CB_OPT_RUNS:
			ok = boot_parse_count(CB_PROG, "--runs", optarg, CB_MAX_RUNS, &o->runs);
			break;
		case CB_OPT_MEMORY:
			ok = boot_parse_count(CB_PROG, "--memory", optarg, CB_MAX_MEMORY_MB, &o->memory_mb);
			break;
		case CB_OPT_KERNEL: o->kernel = optarg; break;
		case CB_OPT_INITRAMFS: o->initramfs = optarg; break;
		case CB_OPT_JSON: o->json_path = optarg; break;
		case CB_OPT_KEEP_HOME: o->keep_home = true; break;
		case CB_OPT_HELP: cb_usage(stdout); return -1;
		default: ok = false; break;
		}
		if (!ok)
			return CB_EXIT_USAGE;
	}
	if (optind != argc) {
		cb_usage(stderr);
		return CB_EXIT_USAGE;
	}
	return 0;
}

/* Reads what fd holds from its start into buf (NUL-terminated), then closes it. */
static void cb_read_back(int fd, char *buf, size_t len)
{
	ssize_t got = pread(fd, buf, len - 1, 0);

	buf[got > 0 ? got : 0] = '\0';
	close(fd);
}

/* A file of its own in TMPDIR that is already unlinked, for a child's output; -1 on failure. */
static int cb_scratch_file(void)
{
	const char *tmp = getenv("TMPDIR");
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/voidbox-cli-bench-out-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	if (fd >= 0)
		unlink(path);
	return fd;
}

/*
 * Runs voidbox with argv (argv[0] is ignored), stdin on /dev/null; *ms is its wall time from
 * fork to reaped exit. Its stdout goes to out (when out_len > 0). A run that does not exit 0
 * prints its stderr and fails the bench: a figure from a failed command would mean nothing.
 */
static int cb_run(const char *voidbox, char *const argv[], double *ms, char *out, size_t out_len)
{
	static char err_text[CB_OUTPUT_MAX];
	int out_fd = cb_scratch_file(), err_fd = cb_scratch_file(), status = 0;
	double started;
	pid_t pid;

	if (out_fd < 0 || err_fd < 0) {
		fprintf(stderr, "cli_bench: cannot make a scratch file in TMPDIR: %s\n",
			strerror(errno));
		return -1;
	}
	started = boot_now_ms();
	pid = fork();
	if (pid == 0) {
		int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (null_fd >= 0)
			dup2(null_fd, STDIN_FILENO);
		dup2(out_fd, STDOUT_FILENO);
		dup2(err_fd, STDERR_FILENO);
		execv(voidbox, argv);
		perror("cli_bench: executing voidbox");
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		status = -1;
	*ms = boot_now_ms() - started;
	if (out_len)
		cb_read_back(out_fd, out, out_len);
	else
		close(out_fd);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		cb_read_back(err_fd, err_text, sizeof(err_text));
		fprintf(stderr, "cli_bench: voidbox %s %s exited with status %d:\n%s\n", argv[1],
			argv[2] ? argv[2] : "", status, err_text);
		return -1;
	}
	close(err_fd);
	return 0;
}

/* `voidbox --output json snapshot create ...`: the new base's id into fig->snapshot_id. */
static int cb_create(const struct cb_options *o, const struct guest_image_paths *image,
		     const char *memory, struct cb_figures *fig)
{
	static char out[CB_OUTPUT_MAX];
	char *argv[] = { "voidbox", "--output", "json", "snapshot", "create", "--kernel",
			 (char *)image->kernel, "--initramfs", (char *)image->initramfs,
			 "--memory", (char *)memory, NULL };
	json_t *json;
	const char *id;

	if (cb_run(o->voidbox, argv, &fig->create_ms, out, sizeof(out)) < 0)
		return -1;
	json = json_loads(out, 0, NULL);
	id = json ? json_string_value(json_object_get(json, "id")) : NULL;
	if (!id || !*id) {
		fprintf(stderr, "cli_bench: `voidbox snapshot create` printed no id: %s\n", out);
		json_decref(json);
		return -1;
	}
	snprintf(fig->snapshot_id, sizeof(fig->snapshot_id), "%s", id);
	json_decref(json);
	return 0;
}

static int cb_measure(const struct cb_options *o, const struct guest_image_paths *image,
		      struct cb_figures *fig)
{
	char memory[CB_NUMBER_TEXT];
	double warm_up_ms;
	char *version_argv[] = { "voidbox", "version", NULL };
	char *cold_argv[] = { "voidbox", "exec", "--kernel", (char *)image->kernel,
			      "--initramfs", (char *)image->initramfs, "--memory", memory, "--",
			      "true", NULL };
	char *restore_argv[] = { "voidbox", "exec", "--snapshot", fig->snapshot_id, "--", "true",
				 NULL };

	snprintf(memory, sizeof(memory), "%u", o->memory_mb);
	/* the first cold boot extracts the kernel into the fresh store's cache: not measured */
	if (cb_run(o->voidbox, cold_argv, &warm_up_ms, NULL, 0) < 0 ||
	    cb_create(o, image, memory, fig) < 0 ||
	    cb_run(o->voidbox, restore_argv, &fig->first_restore_ms, NULL, 0) < 0)
		return -1;
	for (unsigned int i = 0; i < o->runs; i++) {
		if (cb_run(o->voidbox, version_argv, &fig->version_ms[i], NULL, 0) < 0 ||
		    cb_run(o->voidbox, cold_argv, &fig->cold_ms[i], NULL, 0) < 0 ||
		    cb_run(o->voidbox, restore_argv, &fig->restore_ms[i], NULL, 0) < 0)
			return -1;
		fprintf(stderr, "cli_bench: run %u: version %.0f ms, cold %.0f ms, restore %.0f ms\n",
			i + 1, fig->version_ms[i], fig->cold_ms[i], fig->restore_ms[i]);
	}
	return 0;
}

static void cb_report(const struct cb_options *o, const struct cb_figures *fig)
{
	double version = boot_median(fig->version_ms, o->runs);
	double cold = boot_median(fig->cold_ms, o->runs);
	double restore = boot_median(fig->restore_ms, o->runs);
	json_t *root;

	printf("cli_bench: %u MiB guest, %u runs, medians of whole voidbox processes\n",
	       o->memory_mb, o->runs);
	printf("  voidbox version                          %9.1f ms\n", version);
	printf("  voidbox exec -- true (cold boot)         %9.1f ms\n", cold);
	printf("  voidbox exec --snapshot ID -- true       %9.1f ms\n", restore);
	printf("  first restore (records the working set)  %9.1f ms\n", fig->first_restore_ms);
	printf("  voidbox snapshot create                  %9.1f ms\n", fig->create_ms);
	printf("  cold over restore                        %9.2fx\n", restore > 0 ? cold / restore : 0);
	if (!o->json_path)
		return;
	root = json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "memory_mb", o->memory_mb,
			 "runs", o->runs, "version_ms", version, "cold_exec_ms", cold,
			 "restore_exec_ms", restore, "first_restore_exec_ms", fig->first_restore_ms,
			 "snapshot_create_ms", fig->create_ms, "ratio_cold_over_restore",
			 restore > 0 ? cold / restore : 0.0);
	if (!root || json_dump_file(root, o->json_path, JSON_INDENT(2)) < 0)
		fprintf(stderr, "cli_bench: cannot write %s\n", o->json_path);
	json_decref(root);
}

/* The voidbox beside this build (build/bench/cli_bench -> build/src/cli/voidbox). */
static const char *cb_default_voidbox(char *buf, size_t len)
{
	char self[PATH_MAX - sizeof(CB_CLI_BESIDE)];
	ssize_t got = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (got <= 0)
		return NULL;
	self[got] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	snprintf(buf, len, "%s/%s", self, CB_CLI_BESIDE);
	return buf;
}

int main(int argc, char **argv)
{
	struct cb_options o = { .runs = CB_DEFAULT_RUNS, .memory_mb = CB_DEFAULT_MEMORY_MB };
	static struct cb_figures fig;
	struct guest_image_paths image;
	char voidbox[PATH_MAX + sizeof(CB_CLI_BESIDE)], home[PATH_MAX], err[1024], cleanup[PATH_MAX + 16];
	const char *tmp = getenv("TMPDIR");
	int rc;

	host_env_apply();
	rc = cb_parse(argc, argv, &o);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (!o.voidbox)
		o.voidbox = cb_default_voidbox(voidbox, sizeof(voidbox));
	if (!o.voidbox || access(o.voidbox, X_OK) < 0) {
		fprintf(stderr, "cli_bench: no voidbox executable at %s: pass --voidbox PATH\n",
			o.voidbox ? o.voidbox : "(unknown)");
		return 1;
	}
	if (guest_image_resolve(o.kernel, o.initramfs, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "cli_bench: %s\n", err);
		return 1;
	}
	snprintf(home, sizeof(home), "%s/" CB_HOME_TEMPLATE, tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(home)) {
		fprintf(stderr, "cli_bench: cannot make a store in %s: %s\n", home, strerror(errno));
		return 1;
	}
	setenv(GUEST_IMAGE_ENV_HOME, home, 1);
	fprintf(stderr, "cli_bench: store %s, voidbox %s\n", home, o.voidbox);
	rc = cb_measure(&o, &image, &fig);
	if (rc == 0)
		cb_report(&o, &fig);
	if (o.keep_home) {
		fprintf(stderr, "cli_bench: kept %s\n", home);
	} else {
		snprintf(cleanup, sizeof(cleanup), "rm -rf '%s'", home);
		if (system(cleanup) != 0)
			fprintf(stderr, "cli_bench: cannot remove %s\n", home);
	}
	return rc == 0 ? 0 : 1;
}
