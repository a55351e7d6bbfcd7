/*
 * `voidbox validate --file SPEC`: load a spec and report every finding at once, without
 * booting or running anything. The JSON form is upstream's {valid, file, kind, api_version}
 * plus the diagnostics array; kind and api_version are null when the spec did not load.
 * Exit 0 when valid (warnings allowed), 1 when not, 2 for usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "runtime/spec.h"

enum cli_validate_option {
	CLI_VALIDATE_OPT_FILE = 1000,
	CLI_VALIDATE_OPT_HELP,
};

static const struct option cli_validate_options[] = {
	{ "file", required_argument, NULL, CLI_VALIDATE_OPT_FILE },
	{ "help", no_argument, NULL, CLI_VALIDATE_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static void cli_validate_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox validate --file SPEC\n\n"
		"Checks a spec without running it and lists every error and warning with its line,\n"
		"column and a hint. Exits 0 when the spec is valid, 1 when it is not.\n"
		"With the global --output json it prints {valid, file, kind, api_version, diagnostics}.\n");
}

/* Returns 0 with *file set, a positive exit status, or -1 after printing --help. */
static int cli_validate_parse(int argc, char **argv, const char **file)
{
	int option;

	optind = 1;
	opterr = 1;
	while ((option = getopt_long(argc, argv, "+", cli_validate_options, NULL)) != -1) {
		switch (option) {
		case CLI_VALIDATE_OPT_FILE:
			*file = optarg;
			break;
		case CLI_VALIDATE_OPT_HELP:
			cli_validate_usage(stdout);
			return -1;
		default:
			cli_validate_usage(stderr);
			return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr,
			"voidbox validate: unexpected argument '%s' (see voidbox validate --help)\n",
			argv[optind]);
		return CLI_EXIT_USAGE;
	}
	if (!*file) {
		fprintf(stderr, "voidbox validate: --file SPEC is required\n");
		return CLI_EXIT_USAGE;
	}
	return 0;
}

static int cli_validate_print_json(const char *file, const struct spec *spec,
				   const struct spec_diagnostics *diag)
{
	json_t *object = json_pack("{s:b, s:s, s:o, s:o, s:o}", "valid", spec != NULL,
				   "file", file,
				   "kind", spec ? json_string(spec_kind_name(spec->kind)) : json_null(),
				   "api_version", spec ? json_string(spec->api_version) : json_null(),
				   "diagnostics", spec_diagnostics_to_json(diag));

	if (!object || json_dumpf(object, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0) {
		json_decref(object);
		fprintf(stderr, "voidbox validate: out of memory printing the result\n");
		return -1;
	}
	fputc('\n', stdout);
	json_decref(object);
	return 0;
}

static void cli_validate_print_human(const char *file, const struct spec *spec,
				     const struct spec_diagnostics *diag)
{
	spec_diagnostics_print(diag, stdout);
	if (spec)
		printf("%s: valid (kind %s, api_version %s, %zu warning%s)\n", file,
		       spec_kind_name(spec->kind), spec->api_version, diag->warning_count,
		       diag->warning_count == 1 ? "" : "s");
	else
		printf("%s: invalid (%zu error%s, %zu warning%s)\n", file, diag->error_count,
		       diag->error_count == 1 ? "" : "s", diag->warning_count,
		       diag->warning_count == 1 ? "" : "s");
}

int cli_validate_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct spec_diagnostics diag;
	const char *file = NULL;
	struct spec *spec;
	int status;

	status = cli_validate_parse(argc, argv, &file);
	if (status != 0)
		return status < 0 ? CLI_EXIT_OK : status;
	spec_diagnostics_init(&diag);
	spec = cli_spec_load(file, &diag);
	status = spec ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
	if (globals->output == CLI_OUTPUT_JSON) {
		if (cli_validate_print_json(file, spec, &diag) < 0)
			status = CLI_EXIT_FAILURE;
	} else {
		cli_validate_print_human(file, spec, &diag);
	}
	spec_free(spec);
	spec_diagnostics_free(&diag);
	return status;
}
