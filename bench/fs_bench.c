/*
 * Host directory mounts against QEMU: the same guest image, the same agent and the same
 * workloads on a voidbox virtio-fs share and on a QEMU microvm -virtfs (9P2000.L) share,
 * which the agent mounts from the same voidbox.mount0 word (virtiofs fails, 9p follows).
 *
 * Each side boots once; every workload then runs --runs times over the control channel and
 * is timed on the host around its Exec, so both sides pay the same RPC cost:
 *   create  N empty files in a fresh directory       stat  `ls -l` of those N files
 *   remove  the N files                               write M MiB with dd, then fsync
 *   read    M MiB the host wrote before the boot (never in the guest's page cache)
 * Medians are printed per side with voidbox / QEMU ratios. Run by hand (docs/performance.md);
 * QEMU's side needs qemu-system-x86_64 and /dev/vhost-vsock.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/host_env.h"
#include "boot_measure.h"
#include "proto/protocol.h"
#include "qemu_peer.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define FS_BENCH_DEFAULT_RUNS 3u
#define FS_BENCH_DEFAULT_FILES 500u
#define FS_BENCH_DEFAULT_MIB 64u
#define FS_BENCH_MEMORY_MB 512u
#define FS_BENCH_CID 43u
#define FS_BENCH_MAX_RUNS 50u
#define FS_BENCH_BOOT_TIMEOUT_MS 180000.0
#define FS_BENCH_EXEC_TIMEOUT_S 600u
#define FS_BENCH_SCRIPT_MAX 512
#define FS_BENCH_GUEST_DIR "/mnt/bench"
#define FS_BENCH_TAG "voidbox0"
#define FS_BENCH_MOUNT_WORD "voidbox.mount0=" FS_BENCH_TAG ":" FS_BENCH_GUEST_DIR ":rw"
#define FS_BENCH_DIR_TEMPLATE "/tmp/voidbox-fs-bench-XXXXXX"

enum fs_bench_side { FS_BENCH_VOIDBOX, FS_BENCH_QEMU, FS_BENCH_SIDES };
enum fs_bench_op { OP_CREATE, OP_STAT, OP_REMOVE, OP_WRITE, OP_READ, OP_COUNT };

static const char *const side_names[FS_BENCH_SIDES] = { "voidbox virtio-fs", "QEMU -virtfs 9p" };
static const char *const op_names[OP_COUNT] = { "create", "stat", "remove", "write", "read" };

struct fs_bench_options {
	unsigned int runs;
	unsigned int files;
	unsigned int mib;
	const char *qemu;
};

/*
 * The shell each workload runs in the guest; %1$u run, %2$u files, %3$u MiB. Every step that
 * can fail ends the script non-zero: a create whose directory step failed once left `i` unset,
 * so the loop's first test failed quietly and "created" nothing at all. Each run's directory
 * is made on the host before the boot, open to all (prepare_host_dir): on QEMU's 9p share
 * the agent's user could neither chmod a directory it had made (EPERM) nor create in it
 * (EACCES).
 */
static const char *const op_scripts[OP_COUNT] = {
	"cd " FS_BENCH_GUEST_DIR "/m%1$u || exit 1; i=0; "
	"while [ $i -lt %2$u ]; do : > f$i || exit 1; i=$((i+1)); done; [ $i -eq %2$u ]",
	"ls -l " FS_BENCH_GUEST_DIR "/m%1$u >/dev/null && : %2$u",
	"rm -r " FS_BENCH_GUEST_DIR "/m%1$u && : %2$u",
	"dd if=/dev/zero of=" FS_BENCH_GUEST_DIR "/w%1$u bs=1048576 count=%3$u conv=fsync "
	"2>/dev/null && : %2$u",
	"dd if=" FS_BENCH_GUEST_DIR "/host%1$u of=/dev/null bs=1048576 2>/dev/null && : %2$u %3$u",
};

/* Both sides must have the share mounted, or the figures would be of the guest's own tmpfs. */
#define FS_BENCH_CHECK_MOUNT "grep ' " FS_BENCH_GUEST_DIR " ' /proc/mounts"

static double samples[FS_BENCH_SIDES][OP_COUNT][FS_BENCH_MAX_RUNS];

static int run_script(struct control_channel *ch, const char *script)
{
	char *args[] = { "-c", (char *)script };
	struct proto_exec_request req = { .program = "sh", .args = args, .args_count = 2,
					  .has_timeout = true,
					  .timeout_secs = FS_BENCH_EXEC_TIMEOUT_S };
	struct proto_exec_response resp;
	int rc;

	memset(&resp, 0, sizeof(resp));
	rc = control_channel_exec(ch, &req, NULL, NULL, &resp);
	if (rc == 0 && resp.exit_code != 0) {
		fprintf(stderr, "fs_bench: '%s' exited %d: %.*s\n", script, resp.exit_code,
			(int)resp.stderr_data.len, (const char *)resp.stderr_data.data);
		rc = -EIO;
	}
	if (rc == 0)
		proto_exec_response_free(&resp);
	return rc;
}

static int run_workloads(struct control_channel *ch, enum fs_bench_side side,
			 const struct fs_bench_options *opts)
{
	char script[FS_BENCH_SCRIPT_MAX];

	if (run_script(ch, FS_BENCH_CHECK_MOUNT) < 0) {
		fprintf(stderr, "fs_bench: %s: the share is not mounted in the guest\n",
			side_names[side]);
		return -EIO;
	}
	for (unsigned int run = 0; run < opts->runs; run++) {
		for (unsigned int op = 0; op < OP_COUNT; op++) {
			double started = boot_now_ms();

			snprintf(script, sizeof(script), op_scripts[op], run, opts->files, opts->mib);
			if (run_script(ch, script) < 0)
				return -EIO;
			samples[side][op][run] = boot_now_ms() - started;
		}
		fprintf(stderr, "fs_bench: %s run %u done\n", side_names[side], run + 1);
	}
	return 0;
}

/* Host files each read run reads once, and each create run's directory, before the boot. */
static int prepare_host_dir(const char *dir, const struct fs_bench_options *opts)
{
	char cmd[PATH_MAX + 128];

	for (unsigned int run = 0; run < opts->runs; run++) {
		snprintf(cmd, sizeof(cmd), "head -c %uM /dev/urandom > %s/host%u && mkdir %s/m%u && "
			 "chmod 0777 %s/m%u", opts->mib, dir, run, dir, run, dir, run);
		if (system(cmd) != 0)
			return -EIO;
	}
	return 0;
}

static int bench_voidbox(const struct guest_image_paths *image, const char *dir,
			 const struct fs_bench_options *opts)
{
	struct sandbox_config cfg = { .kernel_path = image->kernel,
				      .initramfs_path = image->initramfs,
				      .memory_mb = FS_BENCH_MEMORY_MB };
	struct sandbox *box = NULL;
	char err[1024];
	int rc;

	cfg.mounts[0] = (struct sandbox_mount){ .host_dir = dir, .guest_dir = FS_BENCH_GUEST_DIR };
	cfg.mount_count = 1;
	if (sandbox_start(&cfg, &box, err, sizeof(err)) < 0) {
		fprintf(stderr, "fs_bench: voidbox did not start: %s\n", err);
		return -EIO;
	}
	rc = run_workloads(sandbox_channel(box), FS_BENCH_VOIDBOX, opts);
	sandbox_destroy(box, rc < 0);
	return rc;
}

static int bench_qemu(const struct guest_image_paths *image, const char *dir,
		      const struct fs_bench_options *opts)
{
	char fsdev[PATH_MAX + 64], console[PATH_MAX + 16], err[1024];
	const char *const extra_args[] = { "-fsdev", fsdev, "-device",
					   "virtio-9p-device,fsdev=fs0,mount_tag=" FS_BENCH_TAG,
					   NULL };
	struct qemu_peer_config cfg = { .qemu = opts->qemu, .kernel = image->kernel,
					.initramfs = image->initramfs,
					.memory_mb = FS_BENCH_MEMORY_MB, .cid = FS_BENCH_CID,
					.cmdline_extra = FS_BENCH_MOUNT_WORD,
					.console_path = console, .extra_args = extra_args,
					.boot_timeout_ms = FS_BENCH_BOOT_TIMEOUT_MS };
	struct qemu_peer peer;
	int rc;

	snprintf(fsdev, sizeof(fsdev), "local,id=fs0,path=%s,security_model=none", dir);
	snprintf(console, sizeof(console), "%s.console", dir);
	rc = qemu_peer_start(&cfg, &peer, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "fs_bench: %s\n", err);
		return rc;
	}
	rc = run_workloads(peer.channel, FS_BENCH_QEMU, opts);
	qemu_peer_stop(&peer);
	return rc;
}

static void print_table(const struct fs_bench_options *opts)
{
	printf("%-8s %22s %22s %8s   (ms, median of %u; %u files, %u MiB)\n", "op",
	       side_names[FS_BENCH_VOIDBOX], side_names[FS_BENCH_QEMU], "ratio", opts->runs,
	       opts->files, opts->mib);
	for (unsigned int op = 0; op < OP_COUNT; op++) {
		double ours = boot_percentile(samples[FS_BENCH_VOIDBOX][op], opts->runs, 50);
		double theirs = boot_percentile(samples[FS_BENCH_QEMU][op], opts->runs, 50);

		printf("%-8s %22.1f %22.1f %8.2f\n", op_names[op], ours, theirs,
		       theirs > 0 ? ours / theirs : 0.0);
	}
}

static int parse_options(int argc, char **argv, struct fs_bench_options *opts)
{
	static const struct option longopts[] = {
		{ "runs", required_argument, NULL, 'r' }, { "files", required_argument, NULL, 'f' },
		{ "mib", required_argument, NULL, 'm' },  { "qemu", required_argument, NULL, 'q' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*opts = (struct fs_bench_options){ .runs = FS_BENCH_DEFAULT_RUNS,
					   .files = FS_BENCH_DEFAULT_FILES,
					   .mib = FS_BENCH_DEFAULT_MIB,
					   .qemu = "qemu-system-x86_64" };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		unsigned long value = optarg ? strtoul(optarg, NULL, 10) : 0;

		switch (c) {
		case 'r': opts->runs = (unsigned int)value; break;
		case 'f': opts->files = (unsigned int)value; break;
		case 'm': opts->mib = (unsigned int)value; break;
		case 'q': opts->qemu = optarg; break;
		default:
			fprintf(stderr, "usage: fs_bench [--runs N] [--files N] [--mib N] [--qemu PATH]\n");
			return -EINVAL;
		}
	}
	if (opts->runs == 0 || opts->runs > FS_BENCH_MAX_RUNS || opts->files == 0 || opts->mib == 0) {
		fprintf(stderr, "fs_bench: --runs 1..%u, --files and --mib above 0\n",
			FS_BENCH_MAX_RUNS);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct fs_bench_options opts;
	struct guest_image_paths image;
	char dirs[FS_BENCH_SIDES][sizeof(FS_BENCH_DIR_TEMPLATE)], err[1024];
	int rc = 0;

	if (parse_options(argc, argv, &opts) < 0)
		return 2;
	host_env_apply();
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "fs_bench: %s\n", err);
		return 1;
	}
	for (unsigned int side = 0; side < FS_BENCH_SIDES; side++) {
		snprintf(dirs[side], sizeof(dirs[side]), "%s", FS_BENCH_DIR_TEMPLATE);
		if (!mkdtemp(dirs[side]) || prepare_host_dir(dirs[side], &opts) < 0) {
			fprintf(stderr, "fs_bench: cannot prepare %s\n", dirs[side]);
			return 1;
		}
	}
	rc = bench_voidbox(&image, dirs[FS_BENCH_VOIDBOX], &opts);
	if (rc == 0)
		rc = bench_qemu(&image, dirs[FS_BENCH_QEMU], &opts);
	if (rc == 0)
		print_table(&opts);
	for (unsigned int side = 0; side < FS_BENCH_SIDES; side++) {
		char cmd[FS_BENCH_SCRIPT_MAX];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dirs[side]);
		if (system(cmd) != 0)
			fprintf(stderr, "fs_bench: could not remove %s\n", dirs[side]);
	}
	return rc == 0 ? 0 : 1;
}
