/*
 * `voidbox image build|list|clean`: the front end of src/store/guest_image. The agent binary
 * that becomes the image's /init is found the way a user would expect: --agent, then
 * VOIDBOX_AGENT, then a voidbox-agent beside this executable (an install), then the one this
 * build produced.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/log.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/vmlinux.h"

#define CLI_IMAGE_ERROR_MAX 1024
#define CLI_IMAGE_AGENT_NAME "voidbox-agent"
#define CLI_IMAGE_AGENT_ENV "VOIDBOX_AGENT"
#define CLI_IMAGE_BYTES_PER_MIB (1024.0 * 1024.0)

#ifndef VOIDBOX_AGENT_BUILD_PATH
#define VOIDBOX_AGENT_BUILD_PATH ""
#endif
/* --with-mock-agent: the deterministic claude-code stand-in (docs/agents.md) */
#define CLI_IMAGE_MOCK_AGENT_NAME "voidbox-mock-claude"
#define CLI_IMAGE_MOCK_AGENT_ENV "VOIDBOX_MOCK_CLAUDE"
#define CLI_IMAGE_MOCK_AGENT_GUEST "/usr/local/bin/claude-code"
#define CLI_IMAGE_MOCK_AGENT_MODE 0755
#ifndef VOIDBOX_MOCK_CLAUDE_BUILD_PATH
#define VOIDBOX_MOCK_CLAUDE_BUILD_PATH ""
#endif

static void cli_image_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox image build [--name NAME] [--agent PATH] [--kernel-deb PATH] [--gzip]\n"
		"                           [--with-mock-agent]  (adds the mock claude-code for tests)\n"
		"       voidbox image list\n"
		"       voidbox image clean [NAME | --all]\n\n"
		"Guest images (a Debian kernel and an initramfs whose /init is the voidbox agent)\n"
		"live in $VOIDBOX_HOME/images (default ~/.void-box/images). build fetches the kernel\n"
		"and busybox from Debian's package archive with apt-get and assembles the image.\n");
}

static bool cli_image_is_file(const char *path)
{
	return path && *path && access(path, R_OK) == 0;
}

static const char *cli_image_find_agent(const char *flag, char *buf, size_t buflen)
{
	const char *env = getenv(CLI_IMAGE_AGENT_ENV);
	ssize_t len;

	if (flag)
		return flag;
	if (env && *env)
		return env;
	len = readlink("/proc/self/exe", buf, buflen - 1);
	if (len > 0) {
		char *slash;

		buf[len] = '\0';
		slash = strrchr(buf, '/');
		if (slash && (size_t)(slash - buf) + sizeof(CLI_IMAGE_AGENT_NAME) + 1 < buflen) {
			strcpy(slash + 1, CLI_IMAGE_AGENT_NAME);
			if (cli_image_is_file(buf))
				return buf;
		}
	}
	if (cli_image_is_file(VOIDBOX_AGENT_BUILD_PATH))
		return VOIDBOX_AGENT_BUILD_PATH;
	return NULL;
}

/* $VOIDBOX_MOCK_CLAUDE, else voidbox-mock-claude beside this executable, else this build's. */
static const char *cli_image_find_mock_agent(char *buf, size_t buflen)
{
	const char *env = getenv(CLI_IMAGE_MOCK_AGENT_ENV);
	ssize_t len = readlink("/proc/self/exe", buf, buflen - 1);
	char *slash;

	if (env && *env)
		return env;
	if (len > 0) {
		buf[len] = '\0';
		slash = strrchr(buf, '/');
		if (slash && (size_t)(slash - buf) + sizeof(CLI_IMAGE_MOCK_AGENT_NAME) + 1 < buflen) {
			strcpy(slash + 1, CLI_IMAGE_MOCK_AGENT_NAME);
			if (cli_image_is_file(buf))
				return buf;
		}
	}
	return cli_image_is_file(VOIDBOX_MOCK_CLAUDE_BUILD_PATH) ? VOIDBOX_MOCK_CLAUDE_BUILD_PATH :
								   NULL;
}

/*
 * Extracts the image's kernel into the kernel cache now, so no boot pays for it (and a
 * read-only VOIDBOX_HOME, as inside the nested harness, still finds it).
 */
static int cli_image_prepare_kernel_cache(const char *name)
{
	char image_dir[PATH_MAX], kernel[PATH_MAX + 16], cache_dir[PATH_MAX], cached[PATH_MAX];
	char err[CLI_IMAGE_ERROR_MAX];

	if (guest_image_dir(name, image_dir, sizeof(image_dir)) < 0 ||
	    sandbox_kernel_cache_dir(cache_dir, sizeof(cache_dir)) < 0)
		return CLI_EXIT_OK;
	snprintf(kernel, sizeof(kernel), "%s/vmlinuz", image_dir);
	if (vmlinux_cache_prepare(cache_dir, kernel, cached, sizeof(cached), err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image build: warning: %s; VMs will boot the compressed kernel (slower)\n",
			err);
		return CLI_EXIT_OK;
	}
	log_info("image", "kernel extracted for fast boots: %s", cached);
	return CLI_EXIT_OK;
}

static int cli_image_build(int argc, char **argv)
{
	struct guest_image_build_options options;
	struct guest_image_extra_file mock_agent = { .guest_path = CLI_IMAGE_MOCK_AGENT_GUEST,
						     .mode = CLI_IMAGE_MOCK_AGENT_MODE };
	char mock_buf[PATH_MAX];
	char agent_buf[PATH_MAX];
	const char *agent_flag = NULL;
	char err[CLI_IMAGE_ERROR_MAX];

	memset(&options, 0, sizeof(options));
	for (int i = 1; i < argc; i++) {
		bool has_value = i + 1 < argc;

		if (strcmp(argv[i], "--name") == 0 && has_value) {
			options.name = argv[++i];
		} else if (strcmp(argv[i], "--agent") == 0 && has_value) {
			agent_flag = argv[++i];
		} else if (strcmp(argv[i], "--kernel-deb") == 0 && has_value) {
			options.kernel_deb = argv[++i];
		} else if (strcmp(argv[i], "--gzip") == 0) {
			options.compression = GUEST_IMAGE_COMPRESSION_GZIP;
		} else if (strcmp(argv[i], "--with-mock-agent") == 0) {
			mock_agent.host_path = cli_image_find_mock_agent(mock_buf, sizeof(mock_buf));
			if (!mock_agent.host_path) {
				fprintf(stderr, "voidbox image build: cannot find %s; build it (ninja -C build) or set %s=PATH\n",
					CLI_IMAGE_MOCK_AGENT_NAME, CLI_IMAGE_MOCK_AGENT_ENV);
				return CLI_EXIT_FAILURE;
			}
			options.extra_files = &mock_agent;
			options.extra_file_count = 1;
		} else {
			fprintf(stderr, "voidbox image build: unexpected '%s' (see voidbox image --help)\n",
				argv[i]);
			return CLI_EXIT_USAGE;
		}
	}
	options.archive_mtime = cli_source_date_epoch();
	options.agent_path = cli_image_find_agent(agent_flag, agent_buf, sizeof(agent_buf));
	if (!options.agent_path) {
		fprintf(stderr,
			"voidbox image build: cannot find the %s binary; build it (ninja -C build) or pass --agent PATH\n",
			CLI_IMAGE_AGENT_NAME);
		return CLI_EXIT_FAILURE;
	}
	/* progress lines are the point of this command: show them unless asked otherwise */
	if (log_get_level() > LOG_LEVEL_INFO && !getenv("VOIDBOX_LOG_LEVEL"))
		log_set_level(LOG_LEVEL_INFO);
	if (guest_image_build(&options, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image build: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	return cli_image_prepare_kernel_cache(options.name ? options.name : GUEST_IMAGE_DEFAULT_NAME);
}

static int cli_image_list(const struct cli_globals *globals)
{
	struct guest_image_info *images = NULL;
	size_t count = 0;
	char err[CLI_IMAGE_ERROR_MAX];

	if (guest_image_list(&images, &count, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image list: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	if (globals->output == CLI_OUTPUT_JSON) {
		printf("[");
		for (size_t i = 0; i < count; i++)
			printf("%s{\"name\":\"%s\",\"kernel\":\"%s\",\"size_bytes\":%llu,\"built_at\":\"%s\"}",
			       i ? "," : "", images[i].name, images[i].kernel_release,
			       (unsigned long long)images[i].size_bytes, images[i].built_at);
		printf("]\n");
	} else if (count == 0) {
		printf("no guest images; build one with: voidbox image build\n");
	} else {
		printf("%-16s %-24s %10s  %s\n", "NAME", "KERNEL", "SIZE", "BUILT");
		for (size_t i = 0; i < count; i++)
			printf("%-16s %-24s %8.1fMB  %s\n", images[i].name, images[i].kernel_release,
			       (double)images[i].size_bytes / CLI_IMAGE_BYTES_PER_MIB,
			       images[i].built_at);
	}
	free(images);
	return CLI_EXIT_OK;
}

static int cli_image_clean(int argc, char **argv)
{
	char err[CLI_IMAGE_ERROR_MAX];
	const char *name;

	if (argc != 2) {
		fprintf(stderr, "voidbox image clean: name one image, or --all\n");
		return CLI_EXIT_USAGE;
	}
	name = strcmp(argv[1], "--all") == 0 ? NULL : argv[1];
	if (guest_image_clean(name, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image clean: %s\n", err);
		return CLI_EXIT_FAILURE;
	}
	return CLI_EXIT_OK;
}

int cli_image_run(const struct cli_globals *globals, int argc, char **argv)
{
	if (argc < 2 || cli_wants_help(argc, argv)) {
		cli_image_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
	}
	if (strcmp(argv[1], "build") == 0)
		return cli_image_build(argc - 1, argv + 1);
	if (strcmp(argv[1], "list") == 0)
		return cli_image_list(globals);
	if (strcmp(argv[1], "clean") == 0)
		return cli_image_clean(argc - 1, argv + 1);
	fprintf(stderr, "voidbox image: unknown subcommand '%s' (build, list or clean)\n", argv[1]);
	return CLI_EXIT_USAGE;
}
