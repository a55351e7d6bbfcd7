/*
 * Host directory mounts against QEMU and against the guest's own tmpfs: the same guest image,
 * the same agent and the same workloads on a voidbox virtio-fs share, on a QEMU microvm
 * -virtfs (9P2000.L, security_model=none) share, which the agent mounts from the same
 * voidbox.mount0 word (virtiofs fails, 9p follows), and in a voidbox guest's /tmp (tmpfs, no
 * host round trip at all: the ceiling).
 *
 * Each side boots once; every workload then runs --runs times over the control channel and
 * is timed on the host around its Exec, so all sides pay the same RPC cost:
 *   create  N small files (`echo $i > f$i`)        stat    `ls -l` of those N files
 *   unlink  the N files (`rm -r`)                   find    `find` over a tree of T entries
 *   write   M MiB with dd, then fsync               read    M MiB back with dd
 * The tree, the files read and each run's create directory are made before the guest boots
 * by the host on the shared sides, so reads come from the host, never the guest's page
 * cache, and no guest chmod is needed (9p refuses it); on the tmpfs side an untimed guest
 * step makes the directories and the tree, and the read reads back the file the write wrote.
 * Every script ends non-zero when a step fails and checks it did all its work (N files
 * created and listed, the tree's entry count found): a loop that runs zero times must not
 * pass for a fast one. The defaults are the sizes the goal is stated in (10,000 files, 20,000
 * entries, 256 MiB); medians are printed per side with voidbox / QEMU ratios, and --json
 * writes every sample, median and ratio. Before the first side boots, --warm-mib of host
 * memory is touched once (warm_host_memory: in a fresh nested L1 the first VM would otherwise
 * pay for L1's untouched memory). Run by hand (docs/performance.md); QEMU's side
 * (bench/qemu_peer.c, shared with exec_bench) needs qemu-system-x86_64 and /dev/vhost-vsock.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/host_env.h"
#include "boot_measure.h"
#include "proto/protocol.h"
#include "qemu_peer.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define FS_BENCH_DEFAULT_RUNS 3u
#define FS_BENCH_DEFAULT_FILES 10000u
#define FS_BENCH_DEFAULT_TREE 20000u
#define FS_BENCH_DEFAULT_MIB 256u
/*
 * The warm-up's default size and its cap: enough for every side's guest RAM and host files,
 * and never more than half of what the host has available.
 */
#define FS_BENCH_DEFAULT_WARM_MIB 1536u
#define FS_BENCH_MAX_WARM_MIB 65536u
#define FS_BENCH_WARM_STRIDE 4096u /* one write per page */
#define FS_BENCH_MEMORY_MB 512u
/* The guest's /tmp is a tmpfs of half its memory: it must hold the M MiB file and the tree. */
#define FS_BENCH_TMPFS_MEMORY_MB 1024u
#define FS_BENCH_CID 43u
#define FS_BENCH_MAX_RUNS 50u
#define FS_BENCH_MAX_COUNT 1000000u
#define FS_BENCH_MAX_MIB 4096u
/* The find tree: this many directories under its root, the rest of the entries files in them. */
#define FS_BENCH_TREE_DIRS 100u
#define FS_BENCH_BOOT_TIMEOUT_MS 180000.0
#define FS_BENCH_EXEC_TIMEOUT_S 1800u
#define FS_BENCH_SCRIPT_MAX 1024
#define FS_BENCH_NAME_MAX 64
#define FS_BENCH_FILE_MODE 0644
#define FS_BENCH_DIR_MODE 0755
#define FS_BENCH_SHARE_DIR "/mnt/bench"
#define FS_BENCH_TMPFS_DIR "/tmp/bench"
#define FS_BENCH_TAG "voidbox0"
#define FS_BENCH_MOUNT_WORD "voidbox.mount0=" FS_BENCH_TAG ":" FS_BENCH_SHARE_DIR ":rw"
#define FS_BENCH_DIR_TEMPLATE "/tmp/voidbox-fs-bench-XXXXXX"

enum fs_bench_side { FS_BENCH_VOIDBOX, FS_BENCH_QEMU, FS_BENCH_TMPFS, FS_BENCH_SIDES };
enum fs_bench_op { OP_CREATE, OP_STAT, OP_UNLINK, OP_FIND, OP_WRITE, OP_READ, OP_COUNT };

static const char *const side_names[FS_BENCH_SIDES] = { "voidbox virtio-fs", "QEMU -virtfs 9p",
							 "guest tmpfs" };
/* Names in --sides and in the JSON. */
static const char *const side_keys[FS_BENCH_SIDES] = { "voidbox", "qemu", "tmpfs" };
static const char *const op_names[OP_COUNT] = { "create", "stat", "unlink",
						"find", "write", "read" };
/* Where each side's workloads run in the guest. */
static const char *const side_dirs[FS_BENCH_SIDES] = { FS_BENCH_SHARE_DIR, FS_BENCH_SHARE_DIR,
							FS_BENCH_TMPFS_DIR };

struct fs_bench_options {
	unsigned int runs;
	unsigned int files;
	unsigned int tree;
	unsigned int mib;
	bool sides[FS_BENCH_SIDES];
	const char *qemu;
	const char *json_path;
	unsigned int warm_mib; /* host memory touched once before the first side boots */
};

/* What the warm-up touched and took (write_json). */
static unsigned int warmed_mib;
static double warm_ms;

static double samples[FS_BENCH_SIDES][OP_COUNT][FS_BENCH_MAX_RUNS];
/* The default policy, its file-size limit (RLIMIT_FSIZE) raised to fit the M MiB file. */
static struct proto_set_policy bench_policy;

static void bench_policy_init(const struct fs_bench_options *opts)
{
	uint64_t needed = ((uint64_t)opts->mib + 1) * 1048576u;

	bench_policy = *sandbox_default_policy();
	if (bench_policy.max_file_size < needed)
		bench_policy.max_file_size = needed;
}

/* Files per tree directory: the tree holds its directories and their files, opts->tree in all. */
static unsigned int tree_files_per_dir(const struct fs_bench_options *opts)
{
	unsigned int per_dir = opts->tree / FS_BENCH_TREE_DIRS;

	return per_dir > 0 ? per_dir - 1 : 0;
}

/* The lines `find` prints over the tree: its root, its directories and their files. */
static unsigned int tree_find_lines(const struct fs_bench_options *opts)
{
	return 1 + FS_BENCH_TREE_DIRS * (1 + tree_files_per_dir(opts));
}

/*
 * Writes the shell that runs op in run on a side whose workloads live in dir. Every step that
 * can fail ends the script non-zero, and each workload checks it did its whole work: a create
 * whose `mkdir` failed once left its counter unset, so its loop ran zero times, exited 0 and
 * "created" nothing at all. Each run's directory exists before the op (prepare_host_dir on
 * the shared sides, prepare_guest on tmpfs).
 */
static void op_script(enum fs_bench_op op, const char *dir, unsigned int run,
		      const struct fs_bench_options *opts, char *out, size_t len)
{
	switch (op) {
	case OP_CREATE:
		snprintf(out, len, "cd %s/m%u || exit 1; i=0; "
			 "while [ $i -lt %u ]; do echo $i > f$i || exit 1; i=$((i+1)); done; "
			 "[ $i -eq %u ]", dir, run, opts->files, opts->files);
		break;
	case OP_STAT:
		/* `ls -l` prints a "total" line before the N files */
		snprintf(out, len, "n=$(ls -l %s/m%u | wc -l) && [ \"$n\" -eq %u ]", dir, run,
			 opts->files + 1);
		break;
	case OP_UNLINK:
		snprintf(out, len, "rm -r %s/m%u && [ ! -e %s/m%u ]", dir, run, dir, run);
		break;
	case OP_FIND:
		snprintf(out, len, "n=$(find %s/tree | wc -l) && [ \"$n\" -eq %u ]", dir,
			 tree_find_lines(opts));
		break;
	case OP_WRITE:
		snprintf(out, len, "dd if=/dev/zero of=%s/w%u bs=1048576 count=%u conv=fsync "
			 "2>/dev/null", dir, run, opts->mib);
		break;
	case OP_READ:
		/* tmpfs has no host: it reads back what the write wrote (memory either way) */
		snprintf(out, len, "dd if=%s/%s%u of=/dev/null bs=1048576 2>/dev/null", dir,
			 strcmp(dir, FS_BENCH_TMPFS_DIR) == 0 ? "w" : "host", run);
		break;
	case OP_COUNT: out[0] = '\0'; break;
	}
}

/* Both shared sides must have the share mounted, or the figures would be of the guest's tmpfs. */
#define FS_BENCH_CHECK_MOUNT "grep ' " FS_BENCH_SHARE_DIR " ' /proc/mounts"
/*
 * The tmpfs side's run directories and tree, made by the guest before any timing (%1$s dir,
 * %2$u runs, %3$u tree directories, %4$u files in each, %5$u lines find must print).
 */
#define FS_BENCH_TMPFS_SETUP                                                                  \
	"r=0; while [ $r -lt %2$u ]; do mkdir -p %1$s/m$r || exit 1; r=$((r+1)); done; "        \
	"[ $r -eq %2$u ] || exit 1; mkdir %1$s/tree && cd %1$s/tree || exit 1; d=0; "            \
	"while [ $d -lt %3$u ]; do mkdir d$d || exit 1; f=0; while [ $f -lt %4$u ]; do "         \
	": > d$d/f$f || exit 1; f=$((f+1)); done; d=$((d+1)); done; "                            \
	"n=$(find %1$s/tree | wc -l) && [ \"$n\" -eq %5$u ]"

/* Steps that found the connection gone and ran again on a new one (run_script). */
static unsigned int lost_connections;

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
	if (rc < 0)
		fprintf(stderr, "fs_bench: '%s' did not run: %s\n", script,
			control_channel_last_error());
	if (rc < 0) {
		/*
		 * The channel reconnects on its next call: a step that found the connection
		 * gone (QEMU's guest has dropped it after a step of minutes) runs once more; its
		 * time, taken by the caller, includes the failed attempt and the reconnect, and
		 * the count is printed with the table.
		 */
		memset(&resp, 0, sizeof(resp));
		rc = control_channel_exec(ch, &req, NULL, NULL, &resp);
		fprintf(stderr, "fs_bench: retried once on a new connection: %s\n",
			rc == 0 ? "it ran" : control_channel_last_error());
		if (rc == 0)
			lost_connections++;
	}
	if (rc == 0 && resp.exit_code != 0) {
		fprintf(stderr, "fs_bench: '%s' exited %d: %.*s\n", script, resp.exit_code,
			(int)resp.stderr_data.len, (const char *)resp.stderr_data.data);
		rc = -EIO;
	}
	if (rc == 0)
		proto_exec_response_free(&resp);
	return rc;
}

static int prepare_guest(struct control_channel *ch, enum fs_bench_side side,
			 const struct fs_bench_options *opts)
{
	char script[FS_BENCH_SCRIPT_MAX];

	if (side != FS_BENCH_TMPFS) {
		if (run_script(ch, FS_BENCH_CHECK_MOUNT) == 0)
			return 0;
		fprintf(stderr, "fs_bench: %s: the share is not mounted in the guest\n",
			side_names[side]);
		return -EIO;
	}
	snprintf(script, sizeof(script), FS_BENCH_TMPFS_SETUP, FS_BENCH_TMPFS_DIR, opts->runs,
		 FS_BENCH_TREE_DIRS, tree_files_per_dir(opts), tree_find_lines(opts));
	return run_script(ch, script);
}

static int run_workloads(struct control_channel *ch, enum fs_bench_side side,
			 const struct fs_bench_options *opts)
{
	char script[FS_BENCH_SCRIPT_MAX];

	if (prepare_guest(ch, side, opts) < 0)
		return -EIO;
	for (unsigned int run = 0; run < opts->runs; run++) {
		for (unsigned int op = 0; op < OP_COUNT; op++) {
			double started = boot_now_ms();

			op_script(op, side_dirs[side], run, opts, script, sizeof(script));
			if (run_script(ch, script) < 0)
				return -EIO;
			samples[side][op][run] = boot_now_ms() - started;
			/* each figure as it comes: a later failure must not lose the ones before */
			fprintf(stderr, "fs_bench: %s %s run %u: %.1f ms\n", side_names[side],
				op_names[op], run + 1, samples[side][op][run]);
		}
		/* untimed: the run's big files go, so memory and /tmp hold one run's at a time */
		snprintf(script, sizeof(script), "rm -f %s/w%u %s/host%u", side_dirs[side], run,
			 side_dirs[side], run);
		if (run_script(ch, script) < 0)
			return -EIO;
		fprintf(stderr, "fs_bench: %s run %u done\n", side_names[side], run + 1);
	}
	return 0;
}

/* The find tree beneath dir, as the host writes it for the shared sides. */
static int prepare_host_tree(const char *dir, const struct fs_bench_options *opts)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/tree", dir);
	if (mkdir(path, FS_BENCH_DIR_MODE) < 0)
		return -errno;
	for (unsigned int d = 0; d < FS_BENCH_TREE_DIRS; d++) {
		snprintf(path, sizeof(path), "%s/tree/d%u", dir, d);
		if (mkdir(path, FS_BENCH_DIR_MODE) < 0)
			return -errno;
		for (unsigned int f = 0; f < tree_files_per_dir(opts); f++) {
			snprintf(path, sizeof(path), "%s/tree/d%u/f%u", dir, d, f);
			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, FS_BENCH_FILE_MODE);
			if (fd < 0)
				return -errno;
			close(fd);
		}
	}
	return 0;
}

/*
 * Before the boot: the tree, the file each read run reads once, and each create run's
 * directory, open to all -- on QEMU's 9p share the agent's user can neither chmod a directory
 * it made (EPERM) nor create in it (EACCES).
 */
static int prepare_host_dir(const char *dir, const struct fs_bench_options *opts)
{
	char cmd[PATH_MAX + 128];

	for (unsigned int run = 0; run < opts->runs; run++) {
		snprintf(cmd, sizeof(cmd), "head -c %uM /dev/urandom > %s/host%u && mkdir %s/m%u && "
			 "chmod 0777 %s/m%u", opts->mib, dir, run, dir, run, dir, run);
		if (system(cmd) != 0)
			return -EIO;
	}
	return prepare_host_tree(dir, opts);
}

static int bench_voidbox(const struct guest_image_paths *image, const char *dir,
			 enum fs_bench_side side, const struct fs_bench_options *opts)
{
	struct sandbox_config cfg = { .kernel_path = image->kernel,
				      .initramfs_path = image->initramfs,
				      .memory_mb = side == FS_BENCH_TMPFS ? FS_BENCH_TMPFS_MEMORY_MB
									 : FS_BENCH_MEMORY_MB };
	struct sandbox *box = NULL;
	char err[1024];
	int rc;

	cfg.policy = &bench_policy;
	if (side == FS_BENCH_VOIDBOX) {
		cfg.mounts[0] = (struct sandbox_mount){ .host_dir = dir,
							.guest_dir = FS_BENCH_SHARE_DIR };
		cfg.mount_count = 1;
	}
	if (sandbox_start(&cfg, &box, err, sizeof(err)) < 0) {
		fprintf(stderr, "fs_bench: voidbox did not start: %s\n", err);
		return -EIO;
	}
	rc = run_workloads(sandbox_channel(box), side, opts);
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
					.boot_timeout_ms = FS_BENCH_BOOT_TIMEOUT_MS,
					.policy = &bench_policy };
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

static double median(enum fs_bench_side side, enum fs_bench_op op,
		     const struct fs_bench_options *opts)
{
	double sorted[FS_BENCH_MAX_RUNS];

	/* boot_percentile sorts in place: keep the samples in run order for the JSON */
	memcpy(sorted, samples[side][op], sizeof(double) * opts->runs);
	return boot_percentile(sorted, opts->runs, 50);
}

static double ratio(double ours, double theirs)
{
	return theirs > 0 ? ours / theirs : 0.0;
}

static void print_table(const struct fs_bench_options *opts)
{
	printf("(ms, median of %u; %u files, a %u-entry tree, %u MiB)\n", opts->runs, opts->files,
	       opts->tree, opts->mib);
	if (lost_connections)
		printf("(%u step(s) found the connection gone and ran again on a new one)\n",
		       lost_connections);
	printf("%-8s", "op");
	for (unsigned int side = 0; side < FS_BENCH_SIDES; side++) {
		if (opts->sides[side])
			printf(" %18s", side_names[side]);
	}
	printf(" %14s %14s\n", "voidbox/QEMU", "voidbox/tmpfs");
	for (unsigned int op = 0; op < OP_COUNT; op++) {
		double ours = median(FS_BENCH_VOIDBOX, op, opts);

		printf("%-8s", op_names[op]);
		for (unsigned int side = 0; side < FS_BENCH_SIDES; side++) {
			if (opts->sides[side])
				printf(" %18.1f", median(side, op, opts));
		}
		/* a ratio is voidbox's to a side: 0 where either did not run */
		printf(" %14.2f %14.2f\n",
		       opts->sides[FS_BENCH_QEMU] ? ratio(ours, median(FS_BENCH_QEMU, op, opts)) : 0,
		       opts->sides[FS_BENCH_TMPFS] ? ratio(ours, median(FS_BENCH_TMPFS, op, opts))
						   : 0);
	}
}

/* Every side's samples and medians, and voidbox's ratio to each other side, per op. */
static int write_json(const struct fs_bench_options *opts)
{
	json_t *root = json_pack("{s:I, s:I, s:I, s:I, s:I, s:f}", "runs", (json_int_t)opts->runs,
				 "files", (json_int_t)opts->files, "tree_entries",
				 (json_int_t)opts->tree, "mib", (json_int_t)opts->mib,
				 "host_warm_mib", (json_int_t)warmed_mib, "host_warm_ms", warm_ms);
	int rc;

	for (unsigned int side = 0; root && side < FS_BENCH_SIDES; side++) {
		json_t *ops = json_object();

		if (!opts->sides[side])
			continue;
		for (unsigned int op = 0; op < OP_COUNT; op++) {
			json_t *all = json_array();

			for (unsigned int run = 0; run < opts->runs; run++)
				json_array_append_new(all, json_real(samples[side][op][run]));
			json_object_set_new(ops, op_names[op],
					    json_pack("{s:f, s:o}", "median_ms",
						      median(side, op, opts), "samples_ms", all));
		}
		json_object_set_new(root, side_keys[side], ops);
	}
	for (unsigned int side = FS_BENCH_QEMU; root && opts->sides[FS_BENCH_VOIDBOX] &&
						side < FS_BENCH_SIDES; side++) {
		json_t *ratios = json_object();
		char key[FS_BENCH_NAME_MAX];

		if (!opts->sides[side])
			continue;
		for (unsigned int op = 0; op < OP_COUNT; op++)
			json_object_set_new(ratios, op_names[op],
					    json_real(ratio(median(FS_BENCH_VOIDBOX, op, opts),
							    median(side, op, opts))));
		snprintf(key, sizeof(key), "ratio_voidbox_over_%s", side_keys[side]);
		json_object_set_new(root, key, ratios);
	}
	rc = root ? json_dump_file(root, opts->json_path, JSON_INDENT(2)) : -1;
	json_decref(root);
	if (rc < 0)
		fprintf(stderr, "fs_bench: could not write %s\n", opts->json_path);
	return rc == 0 ? 0 : -EIO;
}

static int parse_sides(const char *list, struct fs_bench_options *opts)
{
	char copy[FS_BENCH_NAME_MAX], *save = NULL;
	unsigned int chosen = 0;

	if (snprintf(copy, sizeof(copy), "%s", list) >= (int)sizeof(copy))
		return -EINVAL;
	memset(opts->sides, 0, sizeof(opts->sides));
	for (char *word = strtok_r(copy, ",", &save); word; word = strtok_r(NULL, ",", &save)) {
		unsigned int side = 0;

		while (side < FS_BENCH_SIDES && strcmp(word, side_keys[side]) != 0)
			side++;
		if (side == FS_BENCH_SIDES)
			return -EINVAL;
		opts->sides[side] = true;
		chosen++;
	}
	return chosen > 0 ? 0 : -EINVAL;
}

static const char fs_bench_usage[] =
	"usage: fs_bench [--runs N] [--files N] [--tree N] [--mib N] [--sides voidbox,qemu,tmpfs]\n"
	"                [--qemu PATH] [--json PATH] [--warm-mib N]\n";

static int parse_options(int argc, char **argv, struct fs_bench_options *opts)
{
	static const struct option longopts[] = {
		{ "runs", required_argument, NULL, 'r' }, { "files", required_argument, NULL, 'f' },
		{ "tree", required_argument, NULL, 't' }, { "mib", required_argument, NULL, 'm' },
		{ "qemu", required_argument, NULL, 'q' }, { "sides", required_argument, NULL, 's' },
		{ "json", required_argument, NULL, 'j' },
		{ "warm-mib", required_argument, NULL, 'w' }, { NULL, 0, NULL, 0 },
	};
	int c;

	*opts = (struct fs_bench_options){ .runs = FS_BENCH_DEFAULT_RUNS,
					   .files = FS_BENCH_DEFAULT_FILES,
					   .tree = FS_BENCH_DEFAULT_TREE,
					   .mib = FS_BENCH_DEFAULT_MIB,
					   .sides = { true, true, true },
					   .qemu = "qemu-system-x86_64",
					   .warm_mib = FS_BENCH_DEFAULT_WARM_MIB };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		unsigned long value = optarg ? strtoul(optarg, NULL, 10) : 0;

		switch (c) {
		case 'r': opts->runs = (unsigned int)value; break;
		case 'f': opts->files = (unsigned int)value; break;
		case 't': opts->tree = (unsigned int)value; break;
		case 'm': opts->mib = (unsigned int)value; break;
		case 'q': opts->qemu = optarg; break;
		case 'j': opts->json_path = optarg; break;
		case 'w': opts->warm_mib = (unsigned int)value; break;
		case 's':
			if (parse_sides(optarg, opts) == 0)
				break;
			fprintf(stderr, "fs_bench: --sides is a comma list of voidbox, "
				"qemu and tmpfs\n");
			return -EINVAL;
		default: fputs(fs_bench_usage, stderr); return -EINVAL;
		}
	}
	if (opts->runs == 0 || opts->runs > FS_BENCH_MAX_RUNS || opts->files == 0 ||
	    opts->files > FS_BENCH_MAX_COUNT || opts->tree < FS_BENCH_TREE_DIRS ||
	    opts->tree > FS_BENCH_MAX_COUNT || opts->mib == 0 || opts->mib > FS_BENCH_MAX_MIB ||
	    opts->warm_mib > FS_BENCH_MAX_WARM_MIB) {
		fprintf(stderr, "fs_bench: --runs 1..%u, --files 1..%u, --tree %u..%u, --mib 1..%u, "
			"--warm-mib 0..%u\n", FS_BENCH_MAX_RUNS, FS_BENCH_MAX_COUNT,
			FS_BENCH_TREE_DIRS, FS_BENCH_MAX_COUNT, FS_BENCH_MAX_MIB,
			FS_BENCH_MAX_WARM_MIB);
		return -EINVAL;
	}
	return 0;
}

/*
 * Touches and frees opts->warm_mib of host memory (at most half of what is available) before
 * any side boots. In the nested harness the first VM of a fresh L1 otherwise pays for memory
 * L1 has never used (each first use an emulated fault and zeroing, about 0.6 s a 256 MiB
 * write or read here) and the sides after it do not, so whichever side runs first would be
 * measured slower for a reason that is the harness's, not its file system's.
 */
static void warm_host_memory(const struct fs_bench_options *opts)
{
	uint64_t available = (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t mib = opts->warm_mib;
	double start;
	size_t len;
	uint8_t *mem;

	if (mib > available / 2 / (1024 * 1024))
		mib = available / 2 / (1024 * 1024);
	if (mib == 0)
		return;
	len = (size_t)mib << 20;
	start = boot_now_ms();
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		fprintf(stderr, "fs_bench: no warm-up (%s)\n", strerror(errno));
		return;
	}
	for (size_t off = 0; off < len; off += FS_BENCH_WARM_STRIDE)
		mem[off] = 1;
	munmap(mem, len);
	warmed_mib = (unsigned int)mib;
	warm_ms = boot_now_ms() - start;
	fprintf(stderr, "fs_bench: host memory warmed: %u MiB in %.0f ms\n", warmed_mib, warm_ms);
}

static int bench_side(enum fs_bench_side side, const struct guest_image_paths *image,
		      const struct fs_bench_options *opts)
{
	char dir[sizeof(FS_BENCH_DIR_TEMPLATE)], cmd[FS_BENCH_SCRIPT_MAX];
	int rc;

	snprintf(dir, sizeof(dir), "%s", FS_BENCH_DIR_TEMPLATE);
	if (!mkdtemp(dir))
		return -errno;
	rc = side == FS_BENCH_TMPFS ? 0 : prepare_host_dir(dir, opts);
	if (rc < 0)
		fprintf(stderr, "fs_bench: cannot prepare %s\n", dir);
	else if (side == FS_BENCH_QEMU)
		rc = bench_qemu(image, dir, opts);
	else
		rc = bench_voidbox(image, dir, side, opts);
	/* a failed QEMU side keeps its guest's console, the one record of what the guest saw */
	if (rc < 0 && side == FS_BENCH_QEMU) {
		fprintf(stderr, "fs_bench: the QEMU guest's console is kept in %s.console\n", dir);
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	} else {
		snprintf(cmd, sizeof(cmd), "rm -rf %s %s.console", dir, dir);
	}
	if (system(cmd) != 0)
		fprintf(stderr, "fs_bench: could not remove %s\n", dir);
	return rc;
}

int main(int argc, char **argv)
{
	struct fs_bench_options opts;
	struct guest_image_paths image;
	char err[1024];
	int rc = 0;

	if (parse_options(argc, argv, &opts) < 0)
		return 2;
	host_env_apply();
	bench_policy_init(&opts);
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "fs_bench: %s\n", err);
		return 1;
	}
	warm_host_memory(&opts);
	for (unsigned int side = 0; rc == 0 && side < FS_BENCH_SIDES; side++) {
		if (opts.sides[side])
			rc = bench_side(side, &image, &opts);
	}
	if (rc == 0) {
		print_table(&opts);
		if (opts.json_path)
			rc = write_json(&opts);
	}
	return rc == 0 ? 0 : 1;
}
