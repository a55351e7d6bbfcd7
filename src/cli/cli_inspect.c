/*
 * `voidbox inspect --file SPEC`: what running this spec here would use, without booting:
 * the sandbox mode as written and as it resolves on this machine (auto becomes local or
 * mock by the same guest-image lookup the runtime does), the kernel and initramfs, the VM's
 * resources and the counts of mounts and env entries. The JSON form adds the whole resolved
 * spec (spec_to_json) under "spec".
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "runtime/box.h"
#include "runtime/spec.h"
#include "store/guest_image.h"

#define CLI_INSPECT_REASON_MAX 1024

enum cli_inspect_option {
	CLI_INSPECT_OPT_FILE = 1000,
	CLI_INSPECT_OPT_HELP,
};

static const struct option cli_inspect_options[] = {
	{ "file", required_argument, NULL, CLI_INSPECT_OPT_FILE },
	{ "help", no_argument, NULL, CLI_INSPECT_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

/* The sandbox as it resolves on this machine. */
struct cli_inspect_resolution {
	enum box_mode mode;      /* as written */
	const char *effective;   /* "mock", "local", or "unavailable" (local without an image) */
	bool resolved;
	struct guest_image_paths image;
	char reason[CLI_INSPECT_REASON_MAX]; /* why no image resolved; "" when one did */
};

static void cli_inspect_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox inspect --file SPEC\n\n"
		"Shows the sandbox a spec would run in on this machine without booting it: mode\n"
		"(as written and as resolved), kernel, initramfs, memory, vCPUs, network, image,\n"
		"snapshot and the number of mounts and env entries. With the global --output json\n"
		"the whole resolved spec is included.\n");
}

/* Returns 0 with *file set, a positive exit status, or -1 after printing --help. */
static int cli_inspect_parse(int argc, char **argv, const char **file)
{
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_inspect_options, NULL)) != -1) {
		switch (option) {
		case CLI_INSPECT_OPT_FILE:
			*file = optarg;
			break;
		case CLI_INSPECT_OPT_HELP:
			cli_inspect_usage(stdout);
			return -1;
		default:
			cli_inspect_usage(stderr);
			return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr,
			"voidbox inspect: unexpected argument '%s' (see voidbox inspect --help)\n",
			argv[optind]);
		return CLI_EXIT_USAGE;
	}
	if (!*file) {
		fprintf(stderr, "voidbox inspect: --file SPEC is required\n");
		return CLI_EXIT_USAGE;
	}
	return 0;
}

static void cli_inspect_resolve(const struct spec *spec, struct cli_inspect_resolution *out)
{
	memset(out, 0, sizeof(*out));
	out->mode = box_mode_from_spec(spec->sandbox.mode);
	out->resolved = guest_image_resolve(spec->sandbox.kernel, spec->sandbox.initramfs,
					    &out->image, out->reason, sizeof(out->reason)) == 0;
	if (out->resolved)
		out->reason[0] = '\0';
	if (out->mode == BOX_MODE_MOCK)
		out->effective = "mock";
	else if (out->resolved)
		out->effective = "local";
	else
		out->effective = out->mode == BOX_MODE_AUTO ? "mock" : "unavailable";
}

static json_t *cli_inspect_text_or_null(const char *text)
{
	return text && text[0] ? json_string(text) : json_null();
}

static int cli_inspect_print_json(const char *file, const struct spec *spec,
				  const struct cli_inspect_resolution *res)
{
	const struct spec_sandbox *sandbox = &spec->sandbox;
	json_t *object = json_pack(
		"{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:o, s:o, s:o, s:I, s:I, s:b, s:o, s:o, s:I, s:I}, s:o}",
		"file", file, "name", spec->name, "kind", spec_kind_name(spec->kind),
		"api_version", spec->api_version, "sandbox", "mode", box_mode_name(res->mode),
		"effective_mode", res->effective,
		"kernel", res->resolved ? json_string(res->image.kernel) : json_null(),
		"initramfs", res->resolved ? cli_inspect_text_or_null(res->image.initramfs)
					   : json_null(),
		"resolution_error", cli_inspect_text_or_null(res->reason),
		"memory_mb", (json_int_t)sandbox->memory_mb, "vcpus", (json_int_t)sandbox->vcpus,
		"network", sandbox->network, "image", cli_inspect_text_or_null(sandbox->image),
		"snapshot", cli_inspect_text_or_null(sandbox->snapshot),
		"mounts", (json_int_t)sandbox->mount_count, "env", (json_int_t)sandbox->env.count,
		"spec", spec_to_json(spec));

	if (!object || json_dumpf(object, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0) {
		json_decref(object);
		fprintf(stderr, "voidbox inspect: out of memory printing the result\n");
		return -1;
	}
	fputc('\n', stdout);
	json_decref(object);
	return 0;
}

static const char *cli_inspect_or_none(const char *text)
{
	return text && text[0] ? text : "(none)";
}

static void cli_inspect_print_human(const char *file, const struct spec *spec,
				    const struct cli_inspect_resolution *res)
{
	const struct spec_sandbox *sandbox = &spec->sandbox;

	printf("file:        %s\nname:        %s\nkind:        %s\napi_version: %s\nsandbox:\n",
	       file, spec->name, spec_kind_name(spec->kind), spec->api_version);
	printf("  mode:      %s (resolves to %s here)\n", box_mode_name(res->mode),
	       res->effective);
	if (res->resolved) {
		printf("  kernel:    %s\n  initramfs: %s\n", res->image.kernel,
		       cli_inspect_or_none(res->image.initramfs));
	} else {
		printf("  kernel:    (none: %s)\n  initramfs: (none)\n", res->reason);
	}
	printf("  memory_mb: %u\n  vcpus:     %u\n  network:   %s\n", sandbox->memory_mb,
	       sandbox->vcpus, sandbox->network ? "true" : "false");
	printf("  image:     %s\n  snapshot:  %s\n  mounts:    %zu\n  env:       %zu\n",
	       cli_inspect_or_none(sandbox->image), cli_inspect_or_none(sandbox->snapshot),
	       sandbox->mount_count, sandbox->env.count);
}

int cli_inspect_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_inspect_resolution resolution;
	struct spec_diagnostics diag;
	const char *file = NULL;
	struct spec *spec;
	int status;

	status = cli_inspect_parse(argc, argv, &file);
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	spec_diagnostics_init(&diag);
	spec = cli_spec_load(file, &diag);
	if (diag.count)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	if (!spec) {
		fprintf(stderr, "voidbox inspect: %s is not a valid spec (fix the errors above)\n",
			file);
		return CLI_EXIT_FAILURE;
	}
	cli_inspect_resolve(spec, &resolution);
	status = CLI_EXIT_OK;
	if (globals->output == CLI_OUTPUT_JSON) {
		if (cli_inspect_print_json(file, spec, &resolution) < 0)
			status = CLI_EXIT_FAILURE;
	} else {
		cli_inspect_print_human(file, spec, &resolution);
	}
	spec_free(spec);
	return status;
}
