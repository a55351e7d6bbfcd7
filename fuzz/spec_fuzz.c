/*
 * libFuzzer target for the spec loader: arbitrary bytes through the whole pipeline (tree,
 * schema walk, validation, env resolution, JSON output, diagnostics rendering).
 *
 * The first byte picks the format (YAML, JSON or sniffed) so one corpus exercises both
 * parsers; the rest is the document. A spec that loads is also planned and serialised, so the
 * planner and spec_to_json see every shape the parser accepts. The host environment is a fixed
 * empty lookup so runs are deterministic.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *spec_fuzz_env_lookup(const char *name, void *ctx)
{
	return NULL;
}

static void spec_fuzz_exercise(const struct spec *spec)
{
	struct spec_workflow_plan plan;
	char *cycle = NULL;
	json_t *json = spec_to_json(spec);
	char *text = json ? json_dumps(json, 0) : NULL;

	free(text);
	json_decref(json);
	if (spec_workflow_plan(&spec->workflow, &plan, &cycle) == 0)
		spec_workflow_plan_free(&plan);
	free(cycle);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum spec_format formats[] = { SPEC_FORMAT_AUTO, SPEC_FORMAT_YAML,
						    SPEC_FORMAT_JSON };
	struct spec_load_options options = { .env_lookup = spec_fuzz_env_lookup };
	struct spec_diagnostics diag;
	struct spec *spec;
	FILE *sink;
	json_t *json;

	if (size < 1)
		return 0;
	options.format = formats[data[0] % (sizeof(formats) / sizeof(formats[0]))];
	spec_diagnostics_init(&diag);
	spec = spec_parse_buffer((const char *)data + 1, size - 1, "fuzz", &options, &diag);
	if (spec)
		spec_fuzz_exercise(spec);
	sink = fopen("/dev/null", "w");
	if (sink) {
		spec_diagnostics_print(&diag, sink);
		fclose(sink);
	}
	json = spec_diagnostics_to_json(&diag);
	json_decref(json);
	spec_free(spec);
	spec_diagnostics_free(&diag);
	return 0;
}
