/*
 * OCI images on the command line: `voidbox image pull`, the pulled images in `image list`,
 * `image rm` and `image prune`, and `--image REF` for exec, shell and fork (cli_image_attach). The
 * registry credentials are read here and nowhere else: --username with --password-stdin,
 * else VOIDBOX_REGISTRY_AUTH=USER:PASSWORD; src/store gets them as oci_pull_options.
 * `--image` holds the image store's lock shared from the lookup until the command's VM has
 * opened the rootfs (cli_image_release), so an `image rm` meanwhile waits rather than
 * deleting the file between the two.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sandbox/sandbox.h"
#include "store/oci_image.h"

#define CLI_OCI_ERROR_MAX 1024
#define CLI_OCI_AUTH_ENV "VOIDBOX_REGISTRY_AUTH"
#define CLI_OCI_CRED_MAX 512
#define CLI_OCI_BYTES_PER_MIB (1024.0 * 1024.0)
#define CLI_OCI_SHORT_DIGEST 19 /* "sha256:" and 12 hex digits */

enum cli_oci_pull_opt {
	CLI_OCI_OPT_USERNAME = 1000,
	CLI_OCI_OPT_PASSWORD_STDIN,
	CLI_OCI_OPT_INSECURE,
	CLI_OCI_OPT_QUIET,
};

static const struct option cli_oci_pull_options[] = {
	{ "username", required_argument, NULL, CLI_OCI_OPT_USERNAME },
	{ "password-stdin", no_argument, NULL, CLI_OCI_OPT_PASSWORD_STDIN },
	{ "insecure", no_argument, NULL, CLI_OCI_OPT_INSECURE },
	{ "quiet", no_argument, NULL, CLI_OCI_OPT_QUIET },
	{ NULL, 0, NULL, 0 },
};

/* Credentials and options for a pull; the strings live here. */
struct cli_oci_pull {
	struct oci_pull_options options;
	char oci_dir[PATH_MAX];
	char username[CLI_OCI_CRED_MAX];
	char password[CLI_OCI_CRED_MAX];
};

static int cli_oci_init(struct cli_oci_pull *pull, const char *command)
{
	const char *auth = getenv(CLI_OCI_AUTH_ENV);
	const char *colon = auth ? strchr(auth, ':') : NULL;

	memset(pull, 0, sizeof(*pull));
	if (oci_image_dir(pull->oci_dir, sizeof(pull->oci_dir)) < 0) {
		fprintf(stderr, "voidbox %s: cannot find the voidbox home; set VOIDBOX_HOME or HOME\n",
			command);
		return -1;
	}
	pull->options.oci_dir = pull->oci_dir;
	pull->options.progress = isatty(STDERR_FILENO) ? OCI_PROGRESS_BAR : OCI_PROGRESS_LINES;
	if (auth && *auth) {
		if (!colon || colon == auth ||
		    (size_t)(colon - auth) >= sizeof(pull->username) ||
		    strlen(colon + 1) >= sizeof(pull->password)) {
			fprintf(stderr, "voidbox %s: %s takes USER:PASSWORD\n", command,
				CLI_OCI_AUTH_ENV);
			return -1;
		}
		snprintf(pull->username, sizeof(pull->username), "%.*s", (int)(colon - auth), auth);
		snprintf(pull->password, sizeof(pull->password), "%s", colon + 1);
		pull->options.username = pull->username;
		pull->options.password = pull->password;
	}
	return 0;
}

static int cli_oci_read_password(struct cli_oci_pull *pull)
{
	size_t len;

	if (!fgets(pull->password, sizeof(pull->password), stdin)) {
		fprintf(stderr, "voidbox image pull: --password-stdin read no password\n");
		return -1;
	}
	len = strcspn(pull->password, "\r\n");
	pull->password[len] = '\0';
	pull->options.password = pull->password;
	return 0;
}

static void cli_oci_report(const struct oci_image_info *info)
{
	printf("%s %s %.1fMB %s\n", info->reference, info->manifest_digest,
	       (double)info->rootfs_bytes / CLI_OCI_BYTES_PER_MIB, info->rootfs_path);
}

int cli_image_pull(int argc, char **argv)
{
	struct cli_oci_pull pull;
	struct oci_image_info info;
	char err[CLI_OCI_ERROR_MAX];
	bool password_stdin = false;
	int option;

	if (cli_oci_init(&pull, "image pull") < 0)
		return CLI_EXIT_FAILURE;
	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_oci_pull_options, NULL)) != -1) {
		switch (option) {
		case CLI_OCI_OPT_USERNAME:
			snprintf(pull.username, sizeof(pull.username), "%s", optarg);
			pull.options.username = pull.username;
			pull.options.password = NULL;
			break;
		case CLI_OCI_OPT_PASSWORD_STDIN:
			password_stdin = true;
			break;
		case CLI_OCI_OPT_INSECURE:
			pull.options.insecure = true;
			break;
		case CLI_OCI_OPT_QUIET:
			pull.options.progress = OCI_PROGRESS_NONE;
			break;
		default:
			fprintf(stderr, "(see voidbox image --help)\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "voidbox image pull: name one image: voidbox image pull REF\n");
		return CLI_EXIT_USAGE;
	}
	if (password_stdin && (!pull.options.username || cli_oci_read_password(&pull) < 0)) {
		if (!pull.options.username)
			fprintf(stderr, "voidbox image pull: --password-stdin needs --username\n");
		return CLI_EXIT_USAGE;
	}
	if (oci_image_pull(argv[optind], &pull.options, &info, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image pull: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	cli_oci_report(&info);
	return CLI_EXIT_OK;
}

int cli_image_rm(int argc, char **argv)
{
	char oci_dir[PATH_MAX], err[CLI_OCI_ERROR_MAX];
	int status = CLI_EXIT_OK;

	if (argc < 2) {
		fprintf(stderr, "voidbox image rm: name the images to remove (voidbox image list)\n");
		return CLI_EXIT_USAGE;
	}
	if (oci_image_dir(oci_dir, sizeof(oci_dir)) < 0) {
		fprintf(stderr, "voidbox image rm: cannot find the voidbox home; set VOIDBOX_HOME or HOME\n");
		return CLI_EXIT_FAILURE;
	}
	for (int i = 1; i < argc; i++)
		if (oci_image_remove(oci_dir, argv[i], err, sizeof(err)) < 0) {
			fprintf(stderr, "voidbox image rm: %s\n", err);
			status = CLI_EXIT_FAILURE;
		}
	return status;
}

int cli_image_prune(bool json, int argc)
{
	struct oci_image_prune_result result;
	char oci_dir[PATH_MAX], err[CLI_OCI_ERROR_MAX];

	if (argc != 1) {
		fprintf(stderr, "voidbox image prune: takes no arguments (see voidbox image --help)\n");
		return CLI_EXIT_USAGE;
	}
	if (oci_image_dir(oci_dir, sizeof(oci_dir)) < 0) {
		fprintf(stderr, "voidbox image prune: cannot find the voidbox home; set VOIDBOX_HOME or HOME\n");
		return CLI_EXIT_FAILURE;
	}
	if (oci_image_prune(oci_dir, &result, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image prune: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	if (json)
		printf("{\"removed\":%zu,\"kept\":%zu,\"images_removed\":%zu,"
		       "\"freed_bytes\":%llu}\n", result.removed, result.kept,
		       result.images_removed, (unsigned long long)result.freed_bytes);
	else
		printf("removed %zu blob%s and %zu unreferenced rootfs (%.1fMB); %zu kept for "
		       "pulled images\n", result.removed, result.removed == 1 ? "" : "s",
		       result.images_removed, (double)result.freed_bytes / CLI_OCI_BYTES_PER_MIB,
		       result.kept);
	return CLI_EXIT_OK;
}

int cli_image_list_pulled(bool json, bool after_others)
{
	struct oci_image_info *images = NULL;
	char oci_dir[PATH_MAX], err[CLI_OCI_ERROR_MAX];
	size_t count = 0;

	if (oci_image_dir(oci_dir, sizeof(oci_dir)) < 0 ||
	    oci_image_list(oci_dir, &images, &count, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image list: cannot list pulled images\n");
		return CLI_EXIT_FAILURE;
	}
	if (json) {
		for (size_t i = 0; i < count; i++)
			printf("%s{\"reference\":\"%s\",\"manifest\":\"%s\",\"size_bytes\":%llu,\"layers\":%u,\"pulled_at\":\"%s\"}",
			       i || after_others ? "," : "", images[i].reference, images[i].manifest_digest,
			       (unsigned long long)images[i].rootfs_bytes, images[i].layer_count,
			       images[i].pulled_at);
	} else if (count > 0) {
		printf("\n%-48s %-19s %10s  %s\n", "PULLED IMAGE", "MANIFEST", "ROOTFS", "PULLED");
		for (size_t i = 0; i < count; i++)
			printf("%-48s %-19.*s %8.1fMB  %s\n", images[i].reference,
			       CLI_OCI_SHORT_DIGEST, images[i].manifest_digest,
			       (double)images[i].rootfs_bytes / CLI_OCI_BYTES_PER_MIB,
			       images[i].pulled_at);
	}
	free(images);
	return CLI_EXIT_OK;
}

int cli_image_attach(const char *command, const char *ref, const char *snapshot_ref,
		     struct vm_disk *disks, struct sandbox_config *cfg, struct cli_image_root *root)
{
	struct cli_oci_pull pull;
	struct oci_image_info info;
	char err[CLI_OCI_ERROR_MAX];

	if (!ref)
		return 0;
	if (snapshot_ref) {
		fprintf(stderr, "voidbox %s: --image does not combine with --snapshot: a restored VM boots from the root it was snapshotted with\n",
			command);
		return -1;
	}
	if (cfg->disk_count >= VM_MAX_DISKS) {
		fprintf(stderr, "voidbox %s: --image takes a disk slot; at most %u --disk flags with it\n",
			command, VM_MAX_DISKS - 1);
		return -1;
	}
	if (cfg->extra_cmdline) {
		fprintf(stderr, "voidbox %s: --image cannot be combined with another kernel command line\n",
			command);
		return -1;
	}
	if (cli_oci_init(&pull, command) < 0)
		return -1;
	if (oci_image_lock(pull.oci_dir, OCI_IMAGE_LOCK_SHARED, &root->store_lock, err,
			   sizeof(err)) < 0) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		return -1;
	}
	if (oci_image_find(pull.oci_dir, ref, &info, err, sizeof(err)) == -ENOENT &&
	    oci_image_pull(ref, &pull.options, &info, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		cli_image_release(root);
		return -1;
	}
	if (!info.rootfs_path[0]) {
		fprintf(stderr, "voidbox %s: %s\n", command, err);
		cli_image_release(root);
		return -1;
	}
	snprintf(root->rootfs_path, sizeof(root->rootfs_path), "%s", info.rootfs_path);
	/* the image is /dev/vda, where the agent looks for its root; --disk files move up */
	memmove(&disks[1], &disks[0], cfg->disk_count * sizeof(disks[0]));
	disks[0] = (struct vm_disk){ .path = root->rootfs_path, .read_only = true };
	cfg->disks = disks;
	cfg->disk_count++;
	cfg->extra_cmdline = OCI_IMAGE_ROOT_CMDLINE;
	return 0;
}

void cli_image_release(struct cli_image_root *root)
{
	oci_image_unlock(&root->store_lock);
}
