/*
 * `voidbox snapshot create|list|inspect|delete|export|import|verify|gc`, and the one place the CLI turns a
 * user's --snapshot reference into a running sandbox (cli_sandbox_start, shared by exec, shell
 * and fork).
 *
 * create is "boot, prove the agent answers by running a program, save": a base snapshot is a
 * cold boot saved after the program (default `true`) exits 0; a diff (--diff --from BASE)
 * restores the base with dirty-page tracking, runs the program and saves only the pages it
 * wrote. The snapshot goes into the store through a temporary directory, so an interrupted
 * create leaves nothing behind. The store decides names and layout (src/store/snapshot_store.h);
 * the VMM decides the files' contents (src/vmm/snapshot.h).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "portable/snapshot_archive.h"
#include "runtime/spec.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "store/snapshot_store.h"
#include "vmm/device.h"

/* The network device kind: in a config hash only when the VM is networked. */
#define CLI_SNAPSHOT_NET_DEVICE "net"
#define CLI_SNAPSHOT_ERROR_MAX 1024
#define CLI_SNAPSHOT_DEFAULT_PROGRAM "true"
#define CLI_SNAPSHOT_BYTES_PER_MIB (1024.0 * 1024.0)
#define CLI_SNAPSHOT_TIME_TEXT 32
#define CLI_SNAPSHOT_HEX_WORD 11 /* "0x" + 8 hex digits + NUL */
#define CLI_SNAPSHOT_MOUNT_NAME_MAX (2 * PATH_MAX + 16)
/* What the config hash names besides device kinds: each mount, each disk, the command line. */
#define CLI_SNAPSHOT_ATTACHED_MAX (SANDBOX_MAX_MOUNTS + VM_MAX_DISKS + 1)
#define CLI_SNAPSHOT_HASH_NAMES_MAX (VM_MAX_DEVICES + CLI_SNAPSHOT_ATTACHED_MAX)

/* The device kinds the VM will have: the network device only when it is networked. */
static size_t cli_snapshot_device_names(const char *names[CLI_SNAPSHOT_HASH_NAMES_MAX], bool network)
{
	size_t count = 0;

	for (size_t i = 0; vm_device_types[i] && count < VM_MAX_DEVICES; i++) {
		if (network || strcmp(vm_device_types[i]->name, CLI_SNAPSHOT_NET_DEVICE) != 0)
			names[count++] = vm_device_types[i]->name;
	}
	return count;
}

enum cli_snapshot_option {
	CLI_SNAPSHOT_OPT_SPEC = 1000,
	CLI_SNAPSHOT_OPT_KERNEL,
	CLI_SNAPSHOT_OPT_INITRAMFS,
	CLI_SNAPSHOT_OPT_MEMORY,
	CLI_SNAPSHOT_OPT_VCPUS,
	CLI_SNAPSHOT_OPT_DIFF,
	CLI_SNAPSHOT_OPT_FROM,
	CLI_SNAPSHOT_OPT_MAX_BYTES,
	CLI_SNAPSHOT_OPT_OUTPUT_FILE,
	CLI_SNAPSHOT_OPT_DIFF_ONLY,
	CLI_SNAPSHOT_OPT_MOUNT,
	CLI_SNAPSHOT_OPT_DISK,
	CLI_SNAPSHOT_OPT_IMAGE,
	CLI_SNAPSHOT_OPT_HELP,
};

static const struct option cli_snapshot_create_options[] = {
	{ "spec", required_argument, NULL, CLI_SNAPSHOT_OPT_SPEC },
	{ "kernel", required_argument, NULL, CLI_SNAPSHOT_OPT_KERNEL },
	{ "initramfs", required_argument, NULL, CLI_SNAPSHOT_OPT_INITRAMFS },
	{ "memory", required_argument, NULL, CLI_SNAPSHOT_OPT_MEMORY },
	{ "vcpus", required_argument, NULL, CLI_SNAPSHOT_OPT_VCPUS },
	{ "diff", no_argument, NULL, CLI_SNAPSHOT_OPT_DIFF },
	{ "from", required_argument, NULL, CLI_SNAPSHOT_OPT_FROM },
	CLI_NETWORK_LONG_OPTIONS
	{ "mount", required_argument, NULL, CLI_SNAPSHOT_OPT_MOUNT },
	{ "disk", required_argument, NULL, CLI_SNAPSHOT_OPT_DISK },
	{ "image", required_argument, NULL, CLI_SNAPSHOT_OPT_IMAGE },
	{ "help", no_argument, NULL, CLI_SNAPSHOT_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const struct option cli_snapshot_gc_options[] = {
	{ "max-size", required_argument, NULL, CLI_SNAPSHOT_OPT_MAX_BYTES },
	{ "max-bytes", required_argument, NULL, CLI_SNAPSHOT_OPT_MAX_BYTES },
	{ "help", no_argument, NULL, CLI_SNAPSHOT_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const struct option cli_snapshot_export_options[] = {
	{ "output-file", required_argument, NULL, CLI_SNAPSHOT_OPT_OUTPUT_FILE },
	{ "diff-only", no_argument, NULL, CLI_SNAPSHOT_OPT_DIFF_ONLY },
	{ "help", no_argument, NULL, CLI_SNAPSHOT_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

struct cli_snapshot_create {
	const char *spec_path;
	const char *kernel;
	const char *initramfs;
	unsigned int memory_mb;
	unsigned int vcpus;
	bool diff;
	const char *from;
	char **program; /* NULL: CLI_SNAPSHOT_DEFAULT_PROGRAM */
	/* only --mount, --disk and --image (its disk and command line): part of the config hash */
	struct sandbox_config mounts;
	struct vm_disk disks[VM_MAX_DISKS]; /* mounts.disks points here */
	const char *image; /* --image REF, else the spec's sandbox.image */
	struct cli_image_root image_root;
	int program_argc;
	struct cli_network network;
	struct sandbox_config network_cfg; /* only .network: what --network asked for */
};

static void cli_snapshot_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox snapshot create [--spec FILE | --kernel K --initramfs I --memory MB --vcpus N]\n"
		"                               [--mount HOST:GUEST[:ro|:rw]]... [--network ...]\n"
		"                               [--disk PATH[:ro]]... [--image REF]\n"
		"                               [--diff --from BASE] [-- PROGRAM [ARGS...]]\n"
		"       voidbox snapshot list\n"
		"       voidbox snapshot inspect ID\n"
		"       voidbox snapshot delete PREFIX\n"
		"       voidbox snapshot export ID -o FILE [--diff-only]\n"
		"       voidbox snapshot import FILE\n"
		"       voidbox snapshot verify ID\n"
		"       voidbox snapshot gc [--max-size SIZE]   (evict --max-bytes SIZE: the same)\n\n"
		"Snapshots live in $VOIDBOX_HOME/snapshots (default ~/.void-box/snapshots), named by\n"
		"the first 16 hex digits of the config hash (kernel, initramfs, memory, vCPUs, devices).\n\n"
		"create   cold-boots the VM, runs PROGRAM (default `true`) and saves a base snapshot once\n"
		"         it exits 0; with --diff --from BASE it restores BASE, runs PROGRAM and saves only\n"
		"         the pages that changed, as BASE-diff-N. --spec takes the sandbox section of a spec.\n"
		"         --mount shares a host directory (repeatable); a restore re-opens it.\n"
		"         --disk attaches a host file and --image boots from a pulled OCI image, as for\n"
		"         exec; a restore reopens the same files and refuses one that changed.\n"
		"list     every snapshot with kind, parent, size and last use\n"
		"inspect  one snapshot (an unambiguous id prefix): the store's record, the VMM's checks\n"
		"         and, where /dev/kvm opens, whether this host offers its CPU features\n"
		"delete   one snapshot by id prefix; deleting a base deletes its diffs\n"
		"export   writes the snapshot (and a diff's base, unless --diff-only) to one archive\n"
		"         (tar + zstd) with a manifest of every file's SHA-256\n"
		"import   checks every file of an archive against its manifest, then adds it to the store\n"
		"verify   checks a stored snapshot's files against the SHA-256 recorded for them\n"
		"gc       deletes least recently used snapshots until the store holds at most SIZE\n"
		"         (suffixes K, M, G, T; default: $" SNAPSHOT_STORE_CACHE_MAX_ENV "), never one a\n"
		"         running VM uses or the base of a diff\n\n"
		"Use one with `voidbox exec --snapshot ID`, `voidbox shell --snapshot ID`,\n"
		"`voidbox fork --snapshot ID` or `sandbox.snapshot` in a spec.\n\n"
		"create takes the networking flags of exec (the network's policy is saved with the\n"
		"snapshot and every restore keeps it):\n");
	cli_network_usage(out);
}


/* ---- starting a sandbox from a --snapshot reference ---- */

int cli_sandbox_resolve_image(const char *command, const char *snapshot_ref,
			      struct sandbox_config *cfg, struct guest_image_paths *image)
{
	char err[CLI_SNAPSHOT_ERROR_MAX];

	if (guest_image_resolve(cfg->kernel_path, cfg->initramfs_path, image, err,
				sizeof(err)) < 0) {
		if (!snapshot_ref) {
			fprintf(stderr, "voidbox %s: %s\n", command, err);
			return -ENOENT;
		}
		/* a restore needs no image; only a cold-boot fallback would */
		cfg->kernel_path = NULL;
		cfg->initramfs_path = NULL;
		return 0;
	}
	cfg->kernel_path = image->kernel;
	cfg->initramfs_path = image->initramfs[0] ? image->initramfs : NULL;
	return 0;
}

int cli_mount_add(const char *command, struct sandbox_config *cfg, char *text)
{
	char err[CLI_SNAPSHOT_ERROR_MAX];

	if (cfg->mount_count >= SANDBOX_MAX_MOUNTS) {
		fprintf(stderr, "voidbox %s: at most %d --mount: share a parent directory\n",
			command, SANDBOX_MAX_MOUNTS);
		return CLI_EXIT_USAGE;
	}
	if (sandbox_mount_parse(text, &cfg->mounts[cfg->mount_count], err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		return CLI_EXIT_USAGE;
	}
	cfg->mount_count++;
	return 0;
}

int cli_sandbox_start(const char *command, const char *snapshot_ref,
		      const struct sandbox_config *cfg, bool track_dirty_pages,
		      struct sandbox **out, char *err, size_t errlen)
{
	struct sandbox_config with_host = *cfg;
	struct sandbox_open_info info;
	int rc;

	if (!with_host.host)
		with_host.host = cli_host_settings();
	rc = sandbox_open(&with_host, snapshot_ref, track_dirty_pages, out, &info, err, errlen);

	if (info.fell_back_to_cold_boot)
		fprintf(stderr, "voidbox %s: warning: %s\n", command, info.warning);
	if (rc == 0 && info.restored && cfg->network)
		fprintf(stderr, "voidbox %s: warning: a restored VM keeps the network of its "
			"snapshot (none, or the policy it was taken with): --network and its flags "
			"are ignored; give them to `voidbox snapshot create`\n", command);
	return rc;
}

/* ---- create ---- */

/*
 * Each mount as "mount:HOST:GUEST:MODE", each disk as "diskN:PATH:MODE:SIZE:INODE:MTIME" (its
 * slot, and the identity the blk device checks on restore, so a changed disk is another
 * config) and the extra command line as "cmdline:TEXT", hashed like devices: another share,
 * disk or image, another id. SIZE_MAX (err says which) when a disk cannot be read.
 */
static size_t cli_snapshot_attached_names(const struct sandbox_config *attached,
					  char names[][CLI_SNAPSHOT_MOUNT_NAME_MAX],
					  const char **out, char *err, size_t errlen)
{
	size_t count = 0;

	for (unsigned int i = 0; i < attached->mount_count; i++) {
		const struct sandbox_mount *mount = &attached->mounts[i];

		snprintf(names[count], CLI_SNAPSHOT_MOUNT_NAME_MAX, "mount:%s:%s:%s",
			 mount->host_dir, mount->guest_dir, mount->read_only ? "ro" : "rw");
		out[count] = names[count];
		count++;
	}
	for (unsigned int i = 0; i < attached->disk_count; i++) {
		const struct vm_disk *disk = &attached->disks[i];
		struct stat st;

		if (stat(disk->path, &st) < 0) {
			snprintf(err, errlen, "cannot read the disk %s: %s", disk->path,
				 strerror(errno));
			return SIZE_MAX;
		}
		snprintf(names[count], CLI_SNAPSHOT_MOUNT_NAME_MAX, "disk%u:%s:%s:%lld:%llu:%lld.%09ld",
			 i, disk->path, disk->read_only ? "ro" : "rw", (long long)st.st_size,
			 (unsigned long long)st.st_ino, (long long)st.st_mtim.tv_sec,
			 st.st_mtim.tv_nsec);
		out[count] = names[count];
		count++;
	}
	if (attached->extra_cmdline) {
		snprintf(names[count], CLI_SNAPSHOT_MOUNT_NAME_MAX, "cmdline:%s",
			 attached->extra_cmdline);
		out[count] = names[count];
		count++;
	}
	return count;
}

static int cli_snapshot_create_parse(int argc, char **argv, struct cli_snapshot_create *c)
{
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_snapshot_create_options, NULL)) != -1) {
		int network_rc = cli_network_option(&c->network, "snapshot create", option, optarg);

		if (network_rc < 0)
			return CLI_EXIT_USAGE;
		if (network_rc > 0)
			continue;
		switch (option) {
		case CLI_SNAPSHOT_OPT_SPEC:
			c->spec_path = optarg;
			break;
		case CLI_SNAPSHOT_OPT_KERNEL:
			c->kernel = optarg;
			break;
		case CLI_SNAPSHOT_OPT_INITRAMFS:
			c->initramfs = optarg;
			break;
		case CLI_SNAPSHOT_OPT_MEMORY:
			if (!cli_parse_uint("snapshot create", "--memory", optarg, 1,
					    VM_MAX_MEMORY_MB, &c->memory_mb))
				return CLI_EXIT_USAGE;
			break;
		case CLI_SNAPSHOT_OPT_VCPUS:
			if (!cli_parse_uint("snapshot create", "--vcpus", optarg, 1, VM_MAX_VCPUS,
					    &c->vcpus))
				return CLI_EXIT_USAGE;
			break;
		case CLI_SNAPSHOT_OPT_DIFF:
			c->diff = true;
			break;
		case CLI_SNAPSHOT_OPT_FROM:
			c->from = optarg;
			break;
		case CLI_SNAPSHOT_OPT_MOUNT:
			if (cli_mount_add("snapshot create", &c->mounts, optarg) != 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_SNAPSHOT_OPT_DISK:
			if (cli_add_disk("snapshot create", optarg, c->disks, &c->mounts) < 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_SNAPSHOT_OPT_IMAGE:
			c->image = optarg;
			break;
		case CLI_SNAPSHOT_OPT_HELP:
			cli_snapshot_usage(stdout);
			return -1;
		default:
			fprintf(stderr, "(see voidbox snapshot --help)\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (cli_network_finish(&c->network, "snapshot create", &c->network_cfg) < 0)
		return CLI_EXIT_USAGE;
	if (c->diff && c->network_cfg.network) {
		fprintf(stderr, "voidbox snapshot create: a diff keeps its base's network; drop --network\n");
		return CLI_EXIT_USAGE;
	}
	if (c->diff != (c->from != NULL)) {
		fprintf(stderr, "voidbox snapshot create: --diff and --from BASE go together\n");
		return CLI_EXIT_USAGE;
	}
	if (c->diff && (c->spec_path || c->kernel || c->initramfs || c->memory_mb || c->vcpus ||
			c->mounts.mount_count || c->mounts.disk_count || c->image)) {
		fprintf(stderr, "voidbox snapshot create: a diff takes its VM from BASE; drop --spec, --kernel, --initramfs, --memory, --vcpus, --mount, --disk and --image\n");
		return CLI_EXIT_USAGE;
	}
	if (optind < argc) {
		c->program = argv + optind;
		c->program_argc = argc - optind;
	}
	return 0;
}

/* Fills what --spec gives unless a flag already set it; the spec stays alive in *spec. */
static int cli_snapshot_apply_spec(struct cli_snapshot_create *c, struct spec **spec)
{
	struct spec_diagnostics diag;

	spec_diagnostics_init(&diag);
	*spec = cli_spec_load(c->spec_path, &diag);
	if (!*spec) {
		spec_diagnostics_print(&diag, stderr);
		spec_diagnostics_free(&diag);
		fprintf(stderr, "voidbox snapshot create: fix %s first (see voidbox validate)\n",
			c->spec_path);
		return -EINVAL;
	}
	spec_diagnostics_free(&diag);
	if (!c->kernel)
		c->kernel = (*spec)->sandbox.kernel;
	if (!c->initramfs)
		c->initramfs = (*spec)->sandbox.initramfs;
	if (!c->memory_mb)
		c->memory_mb = (*spec)->sandbox.memory_mb;
	if (!c->vcpus)
		c->vcpus = (*spec)->sandbox.vcpus;
	if (!c->image)
		c->image = (*spec)->sandbox.image;
	if ((*spec)->sandbox.network && !c->network_cfg.network) {
		fprintf(stderr, "voidbox snapshot create: %s asks for sandbox.network: give "
			"--network and its flags too (the spec's network fields are not read here)\n",
			c->spec_path);
		return -EINVAL;
	}
	return 0;
}

/* Runs the warm-up program; 0 only when it exits 0. */
static int cli_snapshot_run_program(struct sandbox *sandbox, const struct cli_snapshot_create *c)
{
	static char default_program[] = CLI_SNAPSHOT_DEFAULT_PROGRAM;
	struct proto_exec_request request = { 0 };
	struct proto_exec_response response = { 0 };
	char err[CLI_SNAPSHOT_ERROR_MAX];
	int rc;

	request.program = c->program ? c->program[0] : default_program;
	request.args = c->program ? c->program + 1 : NULL;
	request.args_count = c->program ? (size_t)(c->program_argc - 1) : 0;
	rc = sandbox_exec(sandbox, &request, NULL, NULL, &response, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "voidbox snapshot create: the agent did not run %s: %s\n",
			request.program, err);
	} else if (response.exit_code != 0) {
		fprintf(stderr, "voidbox snapshot create: %s exited %d before the snapshot: %.*s\n",
			request.program, response.exit_code, (int)response.stderr_data.len,
			(const char *)response.stderr_data.data);
		rc = -ECANCELED;
	}
	proto_exec_response_free(&response);
	return rc;
}

static void cli_snapshot_print_created(const struct cli_globals *globals,
				       const struct snapshot_store_txn *txn, long boot_ms,
				       long save_ms)
{
	struct snapshot_store_entry entry;
	char err[CLI_SNAPSHOT_ERROR_MAX];

	if (snapshot_store_find(txn->id, &entry, err, sizeof(err)) < 0)
		memset(&entry, 0, sizeof(entry));
	if (globals->output == CLI_OUTPUT_JSON) {
		json_t *root = json_pack("{s:s, s:s, s:s, s:s?, s:s, s:I, s:I, s:I}", "id", txn->id,
					 "kind", snapshot_store_kind_name(txn->kind), "path",
					 txn->final_path, "parent",
					 txn->parent_id[0] ? txn->parent_id : NULL, "config_hash",
					 txn->config_hash, "size_bytes",
					 (json_int_t)entry.size_bytes, "start_ms", (json_int_t)boot_ms,
					 "snapshot_ms", (json_int_t)save_ms);

		if (root) {
			json_dumpf(root, stdout, JSON_INDENT(2));
			fputc('\n', stdout);
			json_decref(root);
		}
		return;
	}
	printf("snapshot %s created (%s%s%s, %.1f MiB)\n  path: %s\n  %s %ld ms, snapshot %ld ms\n",
	       txn->id, snapshot_store_kind_name(txn->kind), txn->parent_id[0] ? " of " : "",
	       txn->parent_id, (double)entry.size_bytes / CLI_SNAPSHOT_BYTES_PER_MIB,
	       txn->final_path, txn->kind == SNAPSHOT_STORE_KIND_DIFF ? "restore" : "cold boot",
	       boot_ms, save_ms);
}

/* Boots (base) or restores (diff) the VM for a create; *start_ms is how long that took. */
static int cli_snapshot_create_start(const struct cli_snapshot_create *c,
				     const struct snapshot_store_entry *base,
				     const struct sandbox_config *cfg, struct sandbox **sandbox,
				     long *start_ms)
{
	char err[CLI_SNAPSHOT_ERROR_MAX];
	long started = (long)clock_monotonic_ms();
	int rc;

	if (c->diff) {
		struct sandbox_restore_config restore = {
			.snapshot_dir = base->path, .track_dirty_pages = true,
			.host = cli_host_settings(), .vmm_placement = cfg->vmm_placement,
			.snapshot_area = cfg->snapshot_area,
		};

		rc = sandbox_start_from_snapshot(&restore, sandbox, err, sizeof(err));
	} else {
		rc = sandbox_start(cfg, sandbox, err, sizeof(err));
	}
	if (rc < 0)
		fprintf(stderr, "voidbox snapshot create: %s\n", err);
	*start_ms = (long)clock_monotonic_ms() - started;
	return rc;
}

/* The CPU features the saved guest was shown, for the store's manifest.json. */
static void cli_snapshot_note_cpu_features(struct snapshot_store_txn *txn)
{
	struct vm_snapshot_info info;
	char err[CLI_SNAPSHOT_ERROR_MAX];

	if (vm_snapshot_inspect(txn->tmp_path, &info, err, sizeof(err)) < 0 ||
	    !info.has_cpu_features)
		return;
	txn->has_cpu_features = true;
	for (unsigned int i = 0; i < SNAPSHOT_MANIFEST_CPU_REGS; i++)
		txn->cpu_features[i] = info.cpu_features.regs[i];
}

static int cli_snapshot_create_in_store(const struct cli_globals *globals,
					const struct cli_snapshot_create *c,
					const struct snapshot_store_config *config,
					const char *hash, const struct snapshot_store_entry *base)
{
	struct sandbox_config cfg = c->mounts; /* its --mount entries; the rest is set below */
	struct vm_snapshot_options opts = {
		.type = c->diff ? VM_SNAPSHOT_DIFF : VM_SNAPSHOT_BASE,
		.parent_dir = c->diff ? base->path : NULL,
		.after = VM_SNAPSHOT_STAY_STOPPED,
	};
	struct snapshot_store_txn txn;
	struct sandbox *sandbox = NULL;
	struct host_grants granted = { 0 };
	char err[CLI_SNAPSHOT_ERROR_MAX];
	long start_ms = 0, save_ms = 0, started;
	int status = CLI_EXIT_FAILURE;

	cfg.kernel_path = config->kernel_path;
	cfg.initramfs_path = config->initramfs_path;
	cfg.memory_mb = config->memory_mb;
	cfg.vcpus = config->vcpus;
	cfg.host = cli_host_settings();
	cfg.network = c->network_cfg.network;
	/* the VMM writes the snapshot from a confined process of its own, as asked */
	cfg.vmm_placement = SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS;
	if (snapshot_store_begin(hash, c->diff ? base->id : NULL, &txn, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot create: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	/* its VMM process may write the transaction's directory and nothing else of the store */
	cfg.snapshot_area = txn.tmp_path;
	if (cli_snapshot_create_start(c, base, &cfg, &sandbox, &start_ms) < 0 ||
	    cli_snapshot_run_program(sandbox, c) < 0)
		goto out;
	started = (long)clock_monotonic_ms();
	if (sandbox_snapshot(sandbox, txn.tmp_path, &opts, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot create: %s\n", err);
		goto out;
	}
	save_ms = (long)clock_monotonic_ms() - started;
	/*
	 * What the VMM process wrote is checked once it has ended (it can change nothing after):
	 * its snapshot may name only the disks and directories it was given.
	 */
	if (sandbox_granted(sandbox, &granted, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot create: %s\n", err);
		goto out;
	}
	sandbox_destroy(sandbox, false);
	sandbox = NULL;
	if (host_grants_check_dir(&granted, txn.tmp_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot create: %s\n", err);
		goto out;
	}
	cli_snapshot_note_cpu_features(&txn);
	if (snapshot_store_commit(&txn, config, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot create: %s\n", err);
		goto out;
	}
	cli_snapshot_print_created(globals, &txn, start_ms, save_ms);
	status = CLI_EXIT_OK;
	if (snapshot_store_enforce_cap(txn.id, err, sizeof(err)) < 0)
		fprintf(stderr, "voidbox snapshot create: warning: %s\n", err);
out:
	snapshot_store_abort(&txn);
	sandbox_destroy(sandbox, status != CLI_EXIT_OK);
	host_grants_free(&granted);
	return status;
}

static int cli_snapshot_create(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_snapshot_create c = { 0 };
	const char *device_names[CLI_SNAPSHOT_HASH_NAMES_MAX];
	char (*attached_names)[CLI_SNAPSHOT_MOUNT_NAME_MAX] =
		calloc(CLI_SNAPSHOT_ATTACHED_MAX, sizeof(*attached_names));
	struct snapshot_store_config config = {
		.devices = device_names,
	};
	struct snapshot_store_entry base = { 0 };
	struct guest_image_paths image;
	struct spec *spec = NULL;
	char hash[SNAPSHOT_STORE_HASH_HEX_LEN + 1], err[CLI_SNAPSHOT_ERROR_MAX];
	int status = CLI_EXIT_FAILURE;
	int rc = cli_snapshot_create_parse(argc, argv, &c);

	size_t attached_count;

	if (rc != 0 || !attached_names) {
		free(attached_names);
		return rc < 0 ? CLI_EXIT_OK : rc ? rc : CLI_EXIT_FAILURE;
	}
	config.device_count = cli_snapshot_device_names(device_names, c.network_cfg.network);
	if (c.spec_path && cli_snapshot_apply_spec(&c, &spec) < 0)
		goto out;
	if (c.diff) {
		if (snapshot_store_find(c.from, &base, err, sizeof(err)) < 0 ||
		    base.kind != SNAPSHOT_STORE_KIND_BASE || !base.config_hash[0]) {
			fprintf(stderr, "voidbox snapshot create: %s\n",
				base.id[0] ? "--from must name a base snapshot created by voidbox snapshot create" :
					     err);
			goto out;
		}
		snprintf(hash, sizeof(hash), "%s", base.config_hash);
		config.kernel_path = base.kernel_path;
		config.initramfs_path = base.initramfs_path[0] ? base.initramfs_path : NULL;
		config.memory_mb = base.memory_mb;
		config.vcpus = base.vcpus;
	} else {
		if (guest_image_resolve(c.kernel, c.initramfs, &image, err, sizeof(err)) < 0) {
			fprintf(stderr, "voidbox snapshot create: %s\n", err);
			goto out;
		}
		config.kernel_path = image.kernel;
		config.initramfs_path = image.initramfs[0] ? image.initramfs : NULL;
		config.memory_mb = c.memory_mb ? c.memory_mb : SANDBOX_DEFAULT_MEMORY_MB;
		config.vcpus = c.vcpus ? c.vcpus : SANDBOX_DEFAULT_VCPUS;
		if (cli_image_attach("snapshot create", c.image, NULL, c.disks, &c.mounts,
				     &c.image_root) < 0)
			goto out;
		attached_count = cli_snapshot_attached_names(&c.mounts, attached_names,
							     device_names + config.device_count,
							     err, sizeof(err));
		if (attached_count == SIZE_MAX) {
			fprintf(stderr, "voidbox snapshot create: %s\n", err);
			goto out;
		}
		config.device_count += attached_count;
		if (snapshot_store_config_hash(&config, hash, err, sizeof(err)) < 0) {
			fprintf(stderr, "voidbox snapshot create: %s\n", err);
			goto out;
		}
	}
	status = cli_snapshot_create_in_store(globals, &c, &config, hash, &base);
out:
	cli_image_release(&c.image_root);
	spec_free(spec);
	free(attached_names);
	return status;
}

/* ---- list, inspect, delete, gc, verify, export, import ---- */

static void cli_snapshot_time_text(time_t when, char *out, size_t len)
{
	struct tm tm;

	if (!gmtime_r(&when, &tm) || strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, len, "?");
}

static json_t *cli_snapshot_entry_json(const struct snapshot_store_entry *e)
{
	char used[CLI_SNAPSHOT_TIME_TEXT];

	cli_snapshot_time_text(e->last_used, used, sizeof(used));
	return json_pack("{s:s, s:s, s:s?, s:s, s:s?, s:s?, s:s?, s:I, s:I, s:I, s:s}", "id", e->id,
			 "kind", snapshot_store_kind_name(e->kind), "parent",
			 e->parent_id[0] ? e->parent_id : NULL, "path", e->path, "config_hash",
			 e->config_hash[0] ? e->config_hash : NULL, "kernel",
			 e->kernel_path[0] ? e->kernel_path : NULL, "initramfs",
			 e->initramfs_path[0] ? e->initramfs_path : NULL, "memory_mb",
			 (json_int_t)e->memory_mb, "vcpus", (json_int_t)e->vcpus, "size_bytes",
			 (json_int_t)e->size_bytes, "last_used", used);
}

static void cli_snapshot_print_json(json_t *root)
{
	if (!root)
		return;
	json_dumpf(root, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(root);
}

static int cli_snapshot_list(const struct cli_globals *globals)
{
	struct snapshot_store_entry *list = NULL;
	char err[CLI_SNAPSHOT_ERROR_MAX], used[CLI_SNAPSHOT_TIME_TEXT], dir[PATH_MAX];
	size_t count = 0;

	if (snapshot_store_list(&list, &count, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot list: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	if (globals->output == CLI_OUTPUT_JSON) {
		json_t *array = json_array();

		for (size_t i = 0; array && i < count; i++)
			json_array_append_new(array, cli_snapshot_entry_json(&list[i]));
		cli_snapshot_print_json(array);
	} else if (count == 0) {
		if (snapshot_store_dir(dir, sizeof(dir)) < 0)
			snprintf(dir, sizeof(dir), "the snapshot store");
		printf("no snapshots in %s (create one with voidbox snapshot create)\n", dir);
	} else {
		printf("%-32s %-5s %-18s %10s  %s\n", "ID", "KIND", "PARENT", "SIZE(MiB)",
		       "LAST USED");
		for (size_t i = 0; i < count; i++) {
			cli_snapshot_time_text(list[i].last_used, used, sizeof(used));
			printf("%-32s %-5s %-18s %10.1f  %s\n", list[i].id,
			       snapshot_store_kind_name(list[i].kind),
			       list[i].parent_id[0] ? list[i].parent_id : "-",
			       (double)list[i].size_bytes / CLI_SNAPSHOT_BYTES_PER_MIB, used);
		}
	}
	free(list);
	return CLI_EXIT_OK;
}

/* The CPUID registers the guest was shown, as "0x%08x" by register name; null when not recorded. */
static json_t *cli_snapshot_features_json(const struct vm_snapshot_info *info)
{
	json_t *features;

	if (!info->has_cpu_features)
		return json_null();
	features = json_object();
	for (unsigned int i = 0; features && i < CPU_FEATURE_REG_COUNT; i++) {
		char word[CLI_SNAPSHOT_HEX_WORD];

		snprintf(word, sizeof(word), "0x%08x", info->cpu_features.regs[i]);
		json_object_set_new(features, cpu_feature_reg_name((enum cpu_feature_reg)i),
				    json_string(word));
	}
	return features ? features : json_null();
}

static json_t *cli_snapshot_vm_json(const struct vm_snapshot_info *info)
{
	json_t *devices = json_array();

	for (unsigned int i = 0; devices && i < info->device_count; i++)
		json_array_append_new(devices, json_string(info->devices[i]));
	return json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:o, s:o}", "format_version",
			 (json_int_t)info->version, "type", vm_snapshot_type_name(info->type),
			 "memory_mb", (json_int_t)info->memory_mb, "vcpus",
			 (json_int_t)info->vcpus, "cid", (json_int_t)info->cid, "state_bytes",
			 (json_int_t)info->state_bytes, "memory_bytes",
			 (json_int_t)info->memory_bytes, "diff_pages",
			 (json_int_t)info->diff_pages, "cpu", info->cpu_signature, "devices",
			 devices ? devices : json_array(), "cpu_features",
			 cli_snapshot_features_json(info));
}

static void cli_snapshot_inspect_human(const struct snapshot_store_entry *e,
				       const struct vm_snapshot_info *info, int vm_rc,
				       const char *vm_err, bool cpu_asked, const char *cpu_err)
{
	char used[CLI_SNAPSHOT_TIME_TEXT];

	cli_snapshot_time_text(e->last_used, used, sizeof(used));
	printf("snapshot %s\n  kind:        %s%s%s\n  path:        %s\n  config hash: %s\n"
	       "  kernel:      %s\n  initramfs:   %s\n  size:        %.1f MiB\n  last used:   %s\n",
	       e->id, snapshot_store_kind_name(e->kind), e->parent_id[0] ? " of " : "",
	       e->parent_id, e->path, e->config_hash[0] ? e->config_hash : "(not recorded)",
	       e->kernel_path[0] ? e->kernel_path : "(not recorded)",
	       e->initramfs_path[0] ? e->initramfs_path : "(none)",
	       (double)e->size_bytes / CLI_SNAPSHOT_BYTES_PER_MIB, used);
	if (vm_rc < 0) {
		printf("  restorable:  no: %s\n", vm_err);
		return;
	}
	printf("  restorable:  yes (format %u, %s)\n  memory:      %u MiB, %u vCPU, vsock cid %llu\n"
	       "  cpu:         %s\n  devices:    ",
	       info->version, vm_snapshot_type_name(info->type), info->memory_mb, info->vcpus,
	       (unsigned long long)info->cid, info->cpu_signature);
	for (unsigned int i = 0; i < info->device_count; i++)
		printf(" %s", info->devices[i]);
	printf("\n");
	if (info->has_cpu_features) {
		printf("  cpu features:");
		for (unsigned int i = 0; i < CPU_FEATURE_REG_COUNT; i++)
			printf(" %s=0x%08x", cpu_feature_reg_name((enum cpu_feature_reg)i),
			       info->cpu_features.regs[i]);
		printf("\n");
	}
	if (cpu_asked)
		printf("  this host:   its KVM offers every CPU feature the guest was shown\n");
	else if (cpu_err[0])
		printf("  this host:   CPU features not checked (%s)\n", cpu_err);
	if (info->type == VM_SNAPSHOT_DIFF)
		printf("  diff pages:  %llu\n", (unsigned long long)info->diff_pages);
}

/*
 * Whether this host's KVM offers every CPU feature the snapshot's guest was shown, as its
 * state file records and as its manifest.json lists (what a restore checks): 0, -EXDEV with
 * err, or another -errno (*asked false) where KVM cannot be asked.
 */
static int cli_snapshot_judge_cpu(const char *dir, const struct vm_snapshot_info *info,
				  bool *asked, char *err, size_t errlen)
{
	struct cpu_features listed;
	bool has_listed = sandbox_snapshot_listed_cpu_features(dir, &listed, NULL, 0) > 0;
	int rc;

	*asked = false;
	if (!info->has_cpu_features && !has_listed)
		return 0;
	rc = cpu_features_check_here(info->has_cpu_features ? &info->cpu_features : NULL,
				     has_listed ? &listed : NULL, info->vcpus, err, errlen);
	*asked = rc == 0 || rc == -EXDEV;
	return rc;
}

static int cli_snapshot_inspect(const struct cli_globals *globals, const char *prefix)
{
	struct snapshot_store_entry entry;
	struct vm_snapshot_info info;
	char err[CLI_SNAPSHOT_ERROR_MAX], vm_err[CLI_SNAPSHOT_ERROR_MAX] = "";
	char cpu_err[CLI_SNAPSHOT_ERROR_MAX] = "";
	bool cpu_asked = false, decoded;
	int vm_rc;

	if (snapshot_store_find(prefix, &entry, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot inspect: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	memset(&info, 0, sizeof(info));
	vm_rc = vm_snapshot_inspect(entry.path, &info, vm_err, sizeof(vm_err));
	decoded = vm_rc == 0;
	if (decoded && cli_snapshot_judge_cpu(entry.path, &info, &cpu_asked, cpu_err,
					      sizeof(cpu_err)) == -EXDEV) {
		vm_rc = -EXDEV;
		snprintf(vm_err, sizeof(vm_err), "%s", cpu_err);
	}
	if (globals->output == CLI_OUTPUT_JSON) {
		json_t *root = cli_snapshot_entry_json(&entry);

		if (root && decoded) /* the VMM's checks passed: its record is whole */
			json_object_set_new(root, "vm", cli_snapshot_vm_json(&info));
		if (root) {
			json_object_set_new(root, "restorable", json_boolean(vm_rc == 0));
			json_object_set_new(root, "cpu_features_checked", json_boolean(cpu_asked));
		}
		if (root && vm_rc < 0)
			json_object_set_new(root, "error", json_string(vm_err));
		cli_snapshot_print_json(root);
	} else {
		cli_snapshot_inspect_human(&entry, &info, vm_rc, vm_err, cpu_asked, cpu_err);
	}
	return vm_rc < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

static int cli_snapshot_delete(const struct cli_globals *globals, const char *prefix)
{
	struct snapshot_store_entry entry;
	char err[CLI_SNAPSHOT_ERROR_MAX];
	size_t deleted = 0;

	if (snapshot_store_find(prefix, &entry, err, sizeof(err)) < 0 ||
	    snapshot_store_delete(entry.id, &deleted, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot delete: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	if (globals->output == CLI_OUTPUT_JSON)
		cli_snapshot_print_json(json_pack("{s:s, s:I}", "deleted", entry.id, "directories",
						  (json_int_t)deleted));
	else
		printf("deleted snapshot %s%s\n", entry.id,
		       deleted > 1 ? " and its diffs" : "");
	return CLI_EXIT_OK;
}

/*
 * gc [--max-size SIZE] and its older spelling evict --max-bytes SIZE: without a size, the
 * configured cap (VOIDBOX_SNAPSHOT_CACHE_MAX); without either, only stale temporary
 * directories go.
 */
static int cli_snapshot_gc(const struct cli_globals *globals, const char *command, int argc,
			   char **argv)
{
	struct snapshot_store_gc_result result;
	char err[CLI_SNAPSHOT_ERROR_MAX];
	uint64_t max_bytes = UINT64_MAX;
	bool have_max = false;
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_snapshot_gc_options, NULL)) != -1) {
		if (option == CLI_SNAPSHOT_OPT_HELP) {
			cli_snapshot_usage(stdout);
			return CLI_EXIT_OK;
		}
		if (option != CLI_SNAPSHOT_OPT_MAX_BYTES || !snapshot_store_parse_size(optarg, &max_bytes)) {
			fprintf(stderr, "voidbox snapshot %s: --max-size takes a size such as 2G\n",
				command);
			return CLI_EXIT_USAGE;
		}
		have_max = true;
	}
	if (optind < argc) {
		fprintf(stderr, "voidbox snapshot %s: unexpected '%s' (see voidbox snapshot --help)\n",
			command, argv[optind]);
		return CLI_EXIT_USAGE;
	}
	if (!have_max && snapshot_store_cache_max(&max_bytes, &have_max, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot %s: %s\n", command, err);
		return CLI_EXIT_USAGE;
	}
	if (!have_max)
		max_bytes = UINT64_MAX;
	if (snapshot_store_gc(max_bytes, NULL, &result, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot %s: %s\n", command, err);
		return CLI_EXIT_FAILURE;
	}
	if (globals->output == CLI_OUTPUT_JSON)
		cli_snapshot_print_json(json_pack("{s:I, s:I, s:I, s:I}", "evicted",
						  (json_int_t)result.evicted, "spared_in_use",
						  (json_int_t)result.spared_in_use, "spared_bases",
						  (json_int_t)result.spared_bases, "remaining_bytes",
						  (json_int_t)result.remaining_bytes));
	else
		printf("evicted %zu snapshot director%s; %.1f MiB remain%s%s\n", result.evicted,
		       result.evicted == 1 ? "y" : "ies",
		       (double)result.remaining_bytes / CLI_SNAPSHOT_BYTES_PER_MIB,
		       result.spared_in_use || result.spared_bases ?
			       " (some kept: in use by a running VM, or the base of a diff)" : "",
		       have_max ? "" : " (no size cap to keep the store within: give "
				       "--max-size SIZE or set VOIDBOX_SNAPSHOT_CACHE_MAX)");
	return CLI_EXIT_OK;
}

static int cli_snapshot_verify(const struct cli_globals *globals, const char *prefix)
{
	struct snapshot_store_entry entry = { 0 };
	char err[CLI_SNAPSHOT_ERROR_MAX] = "";
	int rc = snapshot_store_verify(prefix, &entry, err, sizeof(err));

	if (globals->output == CLI_OUTPUT_JSON)
		cli_snapshot_print_json(json_pack("{s:s, s:b, s:s?}", "id", entry.id[0] ? entry.id :
							    prefix, "verified", rc == 0, "error",
						  rc < 0 ? err : NULL));
	else if (rc == 0)
		printf("snapshot %s: every file matches the SHA-256 recorded for it\n", entry.id);
	else
		fprintf(stderr, "voidbox snapshot verify: %s\n", err);
	return rc < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

static int cli_snapshot_export(const struct cli_globals *globals, int argc, char **argv)
{
	enum snapshot_archive_scope scope = SNAPSHOT_ARCHIVE_WITH_BASE;
	struct snapshot_archive_manifest *manifest = calloc(1, sizeof(*manifest));
	char err[CLI_SNAPSHOT_ERROR_MAX];
	const char *out_path = NULL;
	int option, status = CLI_EXIT_USAGE;

	/* options may follow the id (export ID -o FILE): permute, from a fresh getopt state */
	optind = 0;
	opterr = 1;
	if (!manifest)
		return CLI_EXIT_FAILURE;
	while ((option = getopt_long(argc, argv, "o:", cli_snapshot_export_options, NULL)) != -1) {
		if (option == 'o' || option == CLI_SNAPSHOT_OPT_OUTPUT_FILE) {
			out_path = optarg;
		} else if (option == CLI_SNAPSHOT_OPT_DIFF_ONLY) {
			scope = SNAPSHOT_ARCHIVE_DIFF_ONLY;
		} else if (option == CLI_SNAPSHOT_OPT_HELP) {
			cli_snapshot_usage(stdout);
			status = CLI_EXIT_OK;
			goto out;
		} else {
			goto usage;
		}
	}
	if (!out_path || optind + 1 != argc)
		goto usage;
	status = CLI_EXIT_FAILURE;
	if (snapshot_archive_export(argv[optind], out_path, scope, manifest, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot export: %s\n", err);
		goto out;
	}
	if (globals->output == CLI_OUTPUT_JSON)
		cli_snapshot_print_json(json_pack("{s:s, s:s, s:I}", "exported", manifest->snapshot,
						  "file", out_path, "snapshots",
						  (json_int_t)manifest->chain_count));
	else
		printf("exported snapshot %s%s to %s\n", manifest->snapshot,
		       manifest->chain_count > 1 ? " with its base" : "", out_path);
	status = CLI_EXIT_OK;
	goto out;
usage:
	fprintf(stderr, "voidbox snapshot export: give one snapshot id and -o FILE (see voidbox snapshot --help)\n");
out:
	free(manifest);
	return status;
}

static int cli_snapshot_import(const struct cli_globals *globals, const char *path)
{
	struct snapshot_archive_import_result result;
	char err[CLI_SNAPSHOT_ERROR_MAX];

	if (snapshot_archive_import(path, &result, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox snapshot import: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	if (globals->output == CLI_OUTPUT_JSON)
		cli_snapshot_print_json(json_pack("{s:s, s:s?, s:I, s:I}", "imported",
						  result.snapshot_id, "base",
						  result.base_id[0] ? result.base_id : NULL, "published",
						  (json_int_t)result.published, "already_present",
						  (json_int_t)result.already_present));
	else
		printf("imported snapshot %s%s%s%s\n", result.snapshot_id,
		       result.base_id[0] ? " (a diff of " : "", result.base_id,
		       result.base_id[0] ? ")" : result.published ? "" : " (it was here already)");
	if (snapshot_store_enforce_cap(result.snapshot_id, err, sizeof(err)) < 0)
		fprintf(stderr, "voidbox snapshot import: warning: %s\n", err);
	return CLI_EXIT_OK;
}

int cli_snapshot_run(const struct cli_globals *globals, int argc, char **argv)
{
	const char *action = argc > 1 ? argv[1] : NULL;

	if (!action || strcmp(action, "-h") == 0 || strcmp(action, "--help") == 0) {
		cli_snapshot_usage(action ? stdout : stderr);
		return action ? CLI_EXIT_OK : CLI_EXIT_USAGE;
	}
	if (strcmp(action, "create") == 0)
		return cli_snapshot_create(globals, argc - 1, argv + 1);
	if (strcmp(action, "gc") == 0 || strcmp(action, "evict") == 0)
		return cli_snapshot_gc(globals, action, argc - 1, argv + 1);
	if (strcmp(action, "export") == 0)
		return cli_snapshot_export(globals, argc - 1, argv + 1);
	if (strcmp(action, "import") == 0 && argc == 3)
		return cli_snapshot_import(globals, argv[2]);
	if (strcmp(action, "verify") == 0 && argc == 3)
		return cli_snapshot_verify(globals, argv[2]);
	if (strcmp(action, "list") == 0 && argc == 2)
		return cli_snapshot_list(globals);
	if (strcmp(action, "inspect") == 0 && argc == 3)
		return cli_snapshot_inspect(globals, argv[2]);
	if (strcmp(action, "delete") == 0 && argc == 3)
		return cli_snapshot_delete(globals, argv[2]);
	fprintf(stderr, "voidbox snapshot: '%s' needs other arguments (see voidbox snapshot --help)\n",
		action);
	return CLI_EXIT_USAGE;
}
