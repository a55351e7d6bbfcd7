/*
 * `voidbox image build|list|clean`: the front end of src/store/guest_image (pull and rm, and
 * the pulled half of list, are in cli_oci.c). The agent binary
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
#include "store/agent_flavour.h"
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
/* the messaging tools every image carries (docs/messaging.md) */
#define CLI_IMAGE_TOOL_MODE 0755
#ifndef VOIDBOX_VOID_MESSAGE_BUILD_PATH
#define VOIDBOX_VOID_MESSAGE_BUILD_PATH ""
#endif
#ifndef VOIDBOX_VOID_MCP_BUILD_PATH
#define VOIDBOX_VOID_MCP_BUILD_PATH ""
#endif

/* A static guest tool: found through its variable, beside this executable, or in the build. */
struct cli_image_tool {
	const char *name;
	const char *env;
	const char *build_path;
	const char *guest_path;
};

static const struct cli_image_tool cli_image_messaging_tools[] = {
	{ "void-message", "VOIDBOX_VOID_MESSAGE", VOIDBOX_VOID_MESSAGE_BUILD_PATH,
	  "/usr/local/bin/void-message" },
	{ "void-mcp", "VOIDBOX_VOID_MCP", VOIDBOX_VOID_MCP_BUILD_PATH, "/usr/local/bin/void-mcp" },
};

#define CLI_IMAGE_MESSAGING_TOOL_COUNT \
	(sizeof(cli_image_messaging_tools) / sizeof(cli_image_messaging_tools[0]))
/* the mock agent and the messaging tools */
#define CLI_IMAGE_EXTRA_FILES_MAX (1 + CLI_IMAGE_MESSAGING_TOOL_COUNT)

static void cli_image_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox image build [--name NAME] [--agent PATH] [--kernel-deb PATH] [--gzip]\n"
		"                           [--with-mock-agent]  (adds the mock claude-code for tests)\n"
		"                           [--flavour claude|codex]  (adds that agent CLI from npm)\n"
		"       voidbox image list\n"
		"       voidbox image clean [NAME | --all]\n"
		"       voidbox image pull [--username USER [--password-stdin]] [--insecure] [--quiet] REF\n"
		"       voidbox image rm REF...\n"
		"       voidbox image prune\n\n"
		"Guest images (a Debian kernel and an initramfs whose /init is the voidbox agent)\n"
		"live in $VOIDBOX_HOME/images (default ~/.void-box/images). build fetches the kernel\n"
		"and busybox from Debian's package archive with apt-get and assembles the image.\n"
		"--flavour builds the image of that name with the pinned agent CLI (src/store/\n"
		"agent_pins.h) fetched from registry.npmjs.org and checked against its sha512;\n"
		"agent specs with provider claude or codex run on it.\n\n"
		"pull fetches an OCI image from a registry (credentials: --username with\n"
		"--password-stdin, else VOIDBOX_REGISTRY_AUTH=USER:PASSWORD) and makes its root\n"
		"filesystem, which `exec|shell|fork --image REF` boot; a registry on loopback is\n"
		"spoken to over plain HTTP, any other over HTTPS unless --insecure. rm forgets a\n"
		"pulled image (and its root filesystem, once no reference names it); prune deletes\n"
		"the downloaded blobs and the root filesystems no pulled image needs. rm and prune\n"
		"wait, saying so, for pulls under way and for VMs about to open an image.\n");
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

/* $env, else name beside this executable, else this build's copy. */
static const char *cli_image_find_tool(const struct cli_image_tool *tool, char *buf, size_t buflen)
{
	const char *env = getenv(tool->env);
	ssize_t len = readlink("/proc/self/exe", buf, buflen - 1);
	char *slash;

	if (env && *env)
		return env;
	if (len > 0) {
		buf[len] = '\0';
		slash = strrchr(buf, '/');
		if (slash && (size_t)(slash - buf) + strlen(tool->name) + 2 < buflen) {
			strcpy(slash + 1, tool->name);
			if (cli_image_is_file(buf))
				return buf;
		}
	}
	return cli_image_is_file(tool->build_path) ? tool->build_path : NULL;
}

/* $VOIDBOX_MOCK_CLAUDE, else voidbox-mock-claude beside this executable, else this build's. */
static const char *cli_image_find_mock_agent(char *buf, size_t buflen)
{
	static const struct cli_image_tool mock = { CLI_IMAGE_MOCK_AGENT_NAME,
						    CLI_IMAGE_MOCK_AGENT_ENV,
						    VOIDBOX_MOCK_CLAUDE_BUILD_PATH,
						    CLI_IMAGE_MOCK_AGENT_GUEST };

	return cli_image_find_tool(&mock, buf, buflen);
}

/* Adds void-message and void-mcp; a missing one is a warning (agents lose messaging). */
static void cli_image_add_messaging_tools(struct guest_image_extra_file *files, size_t *count,
					  char (*bufs)[PATH_MAX])
{
	for (size_t i = 0; i < CLI_IMAGE_MESSAGING_TOOL_COUNT; i++) {
		const struct cli_image_tool *tool = &cli_image_messaging_tools[i];
		const char *path = cli_image_find_tool(tool, bufs[i], PATH_MAX);

		if (!path) {
			fprintf(stderr, "voidbox image build: warning: cannot find %s (build it with ninja, or set %s=PATH); agents in this image cannot use messaging\n",
				tool->name, tool->env);
			continue;
		}
		files[(*count)++] = (struct guest_image_extra_file){ .host_path = path,
								     .guest_path = tool->guest_path,
								     .mode = CLI_IMAGE_TOOL_MODE };
	}
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

/*
 * The flavour's files, then the extra files already chosen (the messaging tools), as the
 * build's extra files: *combined holds both and is the caller's to free.
 */
static int cli_image_add_flavour(const char *flavour_name, bool with_mock,
				 struct guest_image_build_options *options,
				 struct agent_flavour_files **files,
				 struct guest_image_extra_file **combined)
{
	enum agent_flavour flavour;
	char err[CLI_IMAGE_ERROR_MAX];

	if (agent_flavour_parse(flavour_name, &flavour) < 0) {
		fprintf(stderr, "voidbox image build: unknown flavour '%s' (claude or codex)\n",
			flavour_name);
		return CLI_EXIT_USAGE;
	}
	if (with_mock) {
		fprintf(stderr, "voidbox image build: --flavour and --with-mock-agent both install "
			"the agent CLI: pick one\n");
		return CLI_EXIT_USAGE;
	}
	*files = calloc(1, sizeof(**files));
	if (!*files || agent_flavour_prepare(flavour, *files, err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox image build: flavour %s: %s\n", flavour_name,
			*files ? err : "out of memory");
		return CLI_EXIT_FAILURE;
	}
	if (!options->name)
		options->name = agent_flavour_name(flavour);
	*combined = calloc((*files)->count + options->extra_file_count, sizeof(**combined));
	if (!*combined) {
		fprintf(stderr, "voidbox image build: out of memory\n");
		return CLI_EXIT_FAILURE;
	}
	memcpy(*combined, (*files)->files, (*files)->count * sizeof(**combined));
	if (options->extra_file_count)
		memcpy(*combined + (*files)->count, options->extra_files,
		       options->extra_file_count * sizeof(**combined));
	options->extra_files = *combined;
	options->extra_file_count += (*files)->count;
	return CLI_EXIT_OK;
}

static int cli_image_build(int argc, char **argv)
{
	struct agent_flavour_files *flavour_files = NULL;
	struct guest_image_extra_file *all_files = NULL;
	const char *flavour = NULL;
	int rc;
	struct guest_image_build_options options;
	struct guest_image_extra_file mock_agent = { .guest_path = CLI_IMAGE_MOCK_AGENT_GUEST,
						     .mode = CLI_IMAGE_MOCK_AGENT_MODE };
	struct guest_image_extra_file extra_files[CLI_IMAGE_EXTRA_FILES_MAX];
	char tool_bufs[CLI_IMAGE_MESSAGING_TOOL_COUNT][PATH_MAX];
	size_t extra_count = 0;
	bool with_mock = false;
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
		} else if (strcmp(argv[i], "--flavour") == 0 && has_value) {
			flavour = argv[++i];
		} else if (strcmp(argv[i], "--gzip") == 0) {
			options.compression = GUEST_IMAGE_COMPRESSION_GZIP;
		} else if (strcmp(argv[i], "--with-mock-agent") == 0) {
			mock_agent.host_path = cli_image_find_mock_agent(mock_buf, sizeof(mock_buf));
			if (!mock_agent.host_path) {
				fprintf(stderr, "voidbox image build: cannot find %s; build it (ninja -C build) or set %s=PATH\n",
					CLI_IMAGE_MOCK_AGENT_NAME, CLI_IMAGE_MOCK_AGENT_ENV);
				return CLI_EXIT_FAILURE;
			}
			with_mock = true;
		} else {
			fprintf(stderr, "voidbox image build: unexpected '%s' (see voidbox image --help)\n",
				argv[i]);
			return CLI_EXIT_USAGE;
		}
	}
	options.archive_mtime = cli_source_date_epoch();
	if (with_mock)
		extra_files[extra_count++] = mock_agent;
	cli_image_add_messaging_tools(extra_files, &extra_count, tool_bufs);
	options.extra_files = extra_files;
	options.extra_file_count = extra_count;
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
	rc = flavour ? cli_image_add_flavour(flavour, with_mock, &options, &flavour_files,
					     &all_files) :
		       CLI_EXIT_OK;
	if (rc != CLI_EXIT_OK) {
		free(all_files);
		free(flavour_files);
		return rc;
	}
	rc = guest_image_build(&options, err, sizeof(err));
	free(all_files);
	free(flavour_files);
	if (rc < 0) {
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
		/* pulled OCI images are elements of the same array, with "reference" for "name" */
		if (cli_image_list_pulled(true, count > 0) != CLI_EXIT_OK) {
			free(images);
			return CLI_EXIT_FAILURE;
		}
		printf("]\n");
	} else if (count == 0) {
		printf("no guest images; build one with: voidbox image build\n");
		free(images);
		return cli_image_list_pulled(false, false);
	} else {
		printf("%-16s %-24s %10s  %s\n", "NAME", "KERNEL", "SIZE", "BUILT");
		for (size_t i = 0; i < count; i++)
			printf("%-16s %-24s %8.1fMB  %s\n", images[i].name, images[i].kernel_release,
			       (double)images[i].size_bytes / CLI_IMAGE_BYTES_PER_MIB,
			       images[i].built_at);
	}
	free(images);
	return globals->output == CLI_OUTPUT_JSON ? CLI_EXIT_OK : cli_image_list_pulled(false, false);
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
	if (strcmp(argv[1], "pull") == 0)
		return cli_image_pull(argc - 1, argv + 1);
	if (strcmp(argv[1], "rm") == 0)
		return cli_image_rm(argc - 1, argv + 1);
	if (strcmp(argv[1], "prune") == 0)
		return cli_image_prune(globals->output == CLI_OUTPUT_JSON, argc - 1);
	fprintf(stderr, "voidbox image: unknown subcommand '%s' (build, list, clean, pull, rm or prune)\n",
		argv[1]);
	return CLI_EXIT_USAGE;
}
