/*
 * Building, serialising and printing run reports. Setters copy their text so runners can
 * hand in stack buffers and exec results they are about to free; the JSON and human forms
 * are produced from the struct alone so the CLI and the daemon print the same facts.
 *
 * Errors quote what the guest chose (a failing step's stderr, the agent's error text, an
 * exec error string), and they are printed on the user's terminal, logged and sent as
 * events: every error is cut to RUN_REPORT_ERROR_MAX bytes, its control characters made
 * spaces and its stray bytes (not UTF-8) '?' where it is set, so no caller can forget.
 * Outputs stay byte for byte in the struct; the JSON form writes text that is not UTF-8 with
 * '?' for its stray bytes, as the encoder accepts nothing else.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text.h"
#include "runtime/run_report.h"

#define RUN_REPORT_FIRST_CAPACITY 4

static int run_replace_text(char **field, const char *text, size_t len)
{
	char *copy;

	if (len == SIZE_MAX)
		len = text ? strlen(text) : 0;
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	if (len)
		memcpy(copy, text, len);
	copy[len] = '\0';
	free(*field);
	*field = copy;
	return 0;
}

/* An error sentence: formatted, cut to RUN_REPORT_ERROR_MAX, printable, valid UTF-8. */
static int run_replace_error(char **field, const char *fmt, va_list args)
{
	char *text;
	size_t len;

	if (vasprintf(&text, fmt, args) < 0)
		return -ENOMEM;
	len = text_utf8_cut(text, strlen(text), RUN_REPORT_ERROR_MAX);
	text[len] = '\0';
	text_make_printable(text, len);
	text_utf8_repair(text, len);
	free(*field);
	*field = text;
	return 0;
}

int run_report_init(struct run_report *report, const char *name, enum spec_kind kind)
{
	memset(report, 0, sizeof(*report));
	report->kind = kind;
	if (run_replace_text(&report->name, name ? name : "", SIZE_MAX) < 0 ||
	    run_replace_text(&report->output, "", 0) < 0) {
		run_report_free(report);
		return -ENOMEM;
	}
	return 0;
}

static void run_stage_free(struct run_stage *stage)
{
	free(stage->name);
	free(stage->output);
	free(stage->error);
}

void run_report_free(struct run_report *report)
{
	for (size_t i = 0; i < report->stage_count; i++)
		run_stage_free(&report->stages[i]);
	free(report->stages);
	free(report->name);
	free(report->output);
	free(report->error);
	free(report->sandbox_mode);
	memset(report, 0, sizeof(*report));
}

void run_report_stage_started(const struct run_report *report, const struct run_stage *stage)
{
	if (report->observer && report->observer->stage_started)
		report->observer->stage_started(report->observer->opaque, stage);
}

void run_report_stage_finished(const struct run_report *report, const struct run_stage *stage)
{
	if (report->observer && report->observer->stage_finished)
		report->observer->stage_finished(report->observer->opaque, stage);
}

void run_report_stage_output(const struct run_report *report, const struct run_stage *stage,
			     bool is_stderr, const void *data, size_t len)
{
	if (report->observer && report->observer->stage_output)
		report->observer->stage_output(report->observer->opaque, stage, is_stderr, data,
					       len);
}

void run_report_stage_output_ready(const struct run_report *report,
				   const struct run_stage *stage, const void *data, size_t len)
{
	if (report && report->observer && report->observer->stage_output_ready)
		report->observer->stage_output_ready(report->observer->opaque, stage, data, len);
}

static void run_report_box_telemetry(void *opaque, const char *box_name,
				     const struct box_telemetry_sample *sample)
{
	const struct run_report *report = opaque;

	report->observer->telemetry(report->observer->opaque, box_name, sample);
}

void run_report_wire_telemetry(const struct run_report *report, struct box_config *cfg)
{
	if (!report->observer || !report->observer->telemetry)
		return;
	cfg->on_telemetry = run_report_box_telemetry;
	cfg->telemetry_opaque = (void *)report;
}

struct run_stage *run_report_add_stage(struct run_report *report, const char *name)
{
	struct run_stage *stage;

	if (report->stage_count == report->stage_capacity) {
		size_t capacity = report->stage_capacity ? report->stage_capacity * 2
							 : RUN_REPORT_FIRST_CAPACITY;
		struct run_stage *grown = realloc(report->stages, capacity * sizeof(*grown));

		if (!grown)
			return NULL;
		report->stages = grown;
		report->stage_capacity = capacity;
	}
	stage = &report->stages[report->stage_count];
	memset(stage, 0, sizeof(*stage));
	if (run_replace_text(&stage->name, name ? name : "", SIZE_MAX) < 0 ||
	    run_replace_text(&stage->output, "", 0) < 0) {
		run_stage_free(stage);
		return NULL;
	}
	report->stage_count++;
	return stage;
}

const struct run_stage *run_report_find_stage(const struct run_report *report, const char *name)
{
	for (size_t i = 0; i < report->stage_count; i++)
		if (strcmp(report->stages[i].name, name) == 0)
			return &report->stages[i];
	return NULL;
}

int run_report_set_output(struct run_report *report, const char *text, size_t len)
{
	return run_replace_text(&report->output, text, len);
}

int run_report_set_error(struct run_report *report, const char *fmt, ...)
{
	va_list args;
	int rc;

	va_start(args, fmt);
	rc = run_replace_error(&report->error, fmt, args);
	va_end(args);
	return rc;
}

int run_report_set_sandbox_mode(struct run_report *report, const char *mode)
{
	return run_replace_text(&report->sandbox_mode, mode, SIZE_MAX);
}

int run_stage_set_output(struct run_stage *stage, const char *text, size_t len)
{
	return run_replace_text(&stage->output, text, len);
}

int run_stage_set_error(struct run_stage *stage, const char *fmt, ...)
{
	va_list args;
	int rc;

	va_start(args, fmt);
	rc = run_replace_error(&stage->error, fmt, args);
	va_end(args);
	return rc;
}

void run_report_sum_usage(struct run_report *report)
{
	report->total_cost_usd = 0.0;
	report->input_tokens = 0;
	report->output_tokens = 0;
	for (size_t i = 0; i < report->stage_count; i++) {
		report->total_cost_usd += report->stages[i].cost_usd;
		report->input_tokens += report->stages[i].input_tokens;
		report->output_tokens += report->stages[i].output_tokens;
	}
}

/* json_object_set_new that remembers a failure instead of returning it at each call. */
static void run_json_set(json_t *object, const char *key, json_t *value, bool *failed)
{
	if (!value || json_object_set_new(object, key, value) < 0)
		*failed = true;
}

/* text as a JSON string; bytes that are not UTF-8 become '?' (NULL on -ENOMEM). */
static json_t *run_json_text(const char *text)
{
	json_t *value;
	char *repaired;

	if (!text)
		return json_null();
	value = json_string(text);
	if (value)
		return value;
	repaired = strdup(text);
	if (!repaired)
		return NULL;
	text_utf8_repair(repaired, strlen(repaired));
	value = json_string(repaired);
	free(repaired);
	return value;
}

static json_t *run_stage_to_json(const struct run_stage *stage)
{
	json_t *object = json_object();
	bool failed = !object;

	if (failed)
		return NULL;
	run_json_set(object, "name", run_json_text(stage->name), &failed);
	run_json_set(object, "success", json_boolean(stage->success), &failed);
	run_json_set(object, "exit_code", json_integer(stage->exit_code), &failed);
	run_json_set(object, "output", run_json_text(stage->output), &failed);
	run_json_set(object, "error", run_json_text(stage->error), &failed);
	run_json_set(object, "duration_ms", json_integer((json_int_t)stage->duration_ms), &failed);
	run_json_set(object, "input_tokens", json_integer((json_int_t)stage->input_tokens),
		     &failed);
	run_json_set(object, "output_tokens", json_integer((json_int_t)stage->output_tokens),
		     &failed);
	run_json_set(object, "cost_usd", json_real(stage->cost_usd), &failed);
	run_json_set(object, "turns", json_integer(stage->turns), &failed);
	run_json_set(object, "tool_calls", json_integer(stage->tool_calls), &failed);
	run_json_set(object, "is_error", json_boolean(stage->is_error), &failed);
	run_json_set(object, "ran", json_boolean(stage->ran), &failed);
	if (failed) {
		json_decref(object);
		return NULL;
	}
	return object;
}

json_t *run_report_to_json(const struct run_report *report)
{
	json_t *object = json_object();
	json_t *stages = json_array();
	bool failed = !object || !stages;

	for (size_t i = 0; !failed && i < report->stage_count; i++) {
		json_t *stage = run_stage_to_json(&report->stages[i]);

		if (!stage || json_array_append_new(stages, stage) < 0)
			failed = true;
	}
	if (failed) {
		json_decref(object);
		json_decref(stages);
		return NULL;
	}
	run_json_set(object, "name", run_json_text(report->name), &failed);
	run_json_set(object, "kind", json_string(spec_kind_name(report->kind)), &failed);
	run_json_set(object, "success", json_boolean(report->success), &failed);
	run_json_set(object, "output", run_json_text(report->output), &failed);
	run_json_set(object, "stages", stages, &failed);
	run_json_set(object, "total_cost_usd", json_real(report->total_cost_usd), &failed);
	run_json_set(object, "input_tokens", json_integer((json_int_t)report->input_tokens),
		     &failed);
	run_json_set(object, "output_tokens", json_integer((json_int_t)report->output_tokens),
		     &failed);
	run_json_set(object, "error", run_json_text(report->error), &failed);
	run_json_set(object, "duration_ms", json_integer((json_int_t)report->duration_ms),
		     &failed);
	run_json_set(object, "sandbox_mode", run_json_text(report->sandbox_mode), &failed);
	if (failed) {
		json_decref(object);
		return NULL;
	}
	return object;
}

static const char *run_stage_status(const struct run_stage *stage)
{
	if (!stage->ran)
		return "skipped";
	return stage->success ? "ok" : "FAILED";
}

void run_report_print(const struct run_report *report, FILE *out)
{
	size_t output_len = report->output ? strlen(report->output) : 0;

	fprintf(out, "%s \"%s\": %s (%llu ms", spec_kind_name(report->kind), report->name,
		report->success ? "succeeded" : "FAILED",
		(unsigned long long)report->duration_ms);
	if (report->sandbox_mode)
		fprintf(out, ", sandbox %s", report->sandbox_mode);
	fprintf(out, ")\n");
	if (report->error)
		fprintf(out, "error: %s\n", report->error);
	for (size_t i = 0; i < report->stage_count; i++) {
		const struct run_stage *stage = &report->stages[i];

		fprintf(out, "  %-7s %s", run_stage_status(stage), stage->name);
		if (stage->ran)
			fprintf(out, " (exit %d, %llu ms)", stage->exit_code,
				(unsigned long long)stage->duration_ms);
		if (stage->error)
			fprintf(out, ": %s", stage->error);
		fprintf(out, "\n");
	}
	if (report->input_tokens || report->output_tokens || report->total_cost_usd > 0.0)
		fprintf(out, "tokens: %llu in, %llu out; cost: $%.4f\n",
			(unsigned long long)report->input_tokens,
			(unsigned long long)report->output_tokens, report->total_cost_usd);
	if (output_len) {
		fprintf(out, "output:\n%s", report->output);
		if (report->output[output_len - 1] != '\n')
			fprintf(out, "\n");
	}
}
