/*
 * `voidbox skills --file F`: lists every skill a spec provisions, with where it comes from and
 * where it lands in the guest. It prints the same plan the agent runner carries out
 * (skills_plan_describe), so the listing cannot drift from what a run does; it reads no skill
 * files and boots nothing.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "runtime/skills.h"
#include "runtime/spec.h"

enum cli_skills_option {
	CLI_SKILLS_OPT_FILE = 1000,
	CLI_SKILLS_OPT_HELP,
};

static const struct option cli_skills_options[] = {
	{ "file", required_argument, NULL, CLI_SKILLS_OPT_FILE },
	{ "help", no_argument, NULL, CLI_SKILLS_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static void cli_skills_usage(FILE *out)
{
	fprintf(out, "usage: voidbox skills --file SPEC\n\n"
		     "Lists the skills of an agent spec (or of every pipeline box) with their source\n"
		     "and the guest path each is written to.\n");
}

/* Adds one owner's skills to rows (JSON) or prints them (human). 0 or -ENOMEM. */
static int cli_skills_list(const char *owner, const struct spec_skill *skills, size_t count,
			   json_t *rows)
{
	struct skill_plan plan;

	if (skills_plan_describe(skills, count, &plan) < 0)
		return -1;
	for (size_t i = 0; i < plan.count; i++) {
		const struct skill_plan_item *item = &plan.items[i];
		const char *type = spec_skill_type_name(item->type);
		const char *guest = item->guest_path ? item->guest_path :
				    item->type == SPEC_SKILL_MCP ? SKILLS_MCP_CONFIG_PATH : "-";

		if (rows)
			json_array_append_new(rows, json_pack("{ssssssssss}", "owner", owner,
							      "name", item->name, "type", type,
							      "source", item->source, "guest",
							      guest));
		else
			printf("%-12s %-20s %-7s %-40s %s\n", owner, item->name, type,
			       item->source, guest);
	}
	skills_plan_free(&plan);
	return 0;
}

static int cli_skills_print(const struct spec *spec, bool json)
{
	json_t *rows = json ? json_array() : NULL;
	int rc = 0;

	if (json && !rows)
		return -1;
	if (!json)
		printf("%-12s %-20s %-7s %-40s %s\n", "OWNER", "NAME", "TYPE", "SOURCE", "GUEST");
	if (spec->has_agent)
		rc = cli_skills_list(spec->name, spec->agent.skills, spec->agent.skill_count, rows);
	for (size_t i = 0; rc == 0 && spec->has_pipeline && i < spec->pipeline.box_count; i++) {
		const struct spec_box *box = &spec->pipeline.boxes[i];

		rc = cli_skills_list(box->name, box->skills, box->skill_count, rows);
	}
	if (json && rc == 0) {
		char *text = json_dumps(rows, JSON_INDENT(2));

		if (text)
			printf("%s\n", text);
		free(text);
	}
	json_decref(rows);
	return rc;
}

int cli_skills_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct spec_diagnostics diag;
	const char *file = NULL;
	struct spec *spec;
	int option, status;

	optind = 1;
	while ((option = getopt_long(argc, argv, "+", cli_skills_options, NULL)) != -1) {
		if (option == CLI_SKILLS_OPT_FILE) {
			file = optarg;
		} else if (option == CLI_SKILLS_OPT_HELP) {
			cli_skills_usage(stdout);
			return CLI_EXIT_OK;
		} else {
			fprintf(stderr, "(see voidbox skills --help)\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (!file) {
		fprintf(stderr, "voidbox skills: name the spec: voidbox skills --file SPEC\n");
		return CLI_EXIT_USAGE;
	}
	spec_diagnostics_init(&diag);
	spec = cli_spec_load(file, &diag);
	if (diag.count)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	if (!spec) {
		fprintf(stderr, "voidbox skills: %s is not a valid spec (fix the errors above)\n",
			file);
		return CLI_EXIT_FAILURE;
	}
	status = cli_skills_print(spec, globals->output == CLI_OUTPUT_JSON) < 0 ?
			 CLI_EXIT_FAILURE : CLI_EXIT_OK;
	spec_free(spec);
	return status;
}
