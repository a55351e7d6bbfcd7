/*
 * The workflow engine (see workflow.h for the semantics). One report stage per step is added
 * up front, in declaration order, so the stage array never moves while step threads write
 * their own entries; a step's stdout is kept beside it for the steps that read it through
 * stdin_from. Those readers are always in a later level, and a level's threads are joined
 * before the next level starts, so the join orders every write before every read and the
 * engine needs no lock of its own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "runtime/box_internal.h"
#include "runtime/service.h"
#include "runtime/workflow.h"

#define WORKFLOW_ERROR_MAX 1024
/* how much of a failing step's stderr goes into its stage error */
#define WORKFLOW_STDERR_EXCERPT_MAX 200

struct workflow_step_run {
	const struct spec *spec;
	const struct workflow_options *options;
	struct box *box;
	size_t index; /* into spec->workflow.steps and report->stages */
	struct run_stage *stage;
	const struct run_report *report; /* for its observer */
	const char *stdin_data;
	size_t stdin_len;
	char *stdout_data; /* kept for stdin_from readers */
	size_t stdout_len;
	bool timed_out;
	bool box_failed; /* the box could not run the program at all */
	char stderr_excerpt[WORKFLOW_STDERR_EXCERPT_MAX + 1]; /* last stderr line of a failure */
	uint32_t timeout_secs;
	pthread_t thread;
	bool threaded;
};

size_t workflow_check(const struct spec *spec, struct spec_diagnostics *diag)
{
	struct spec_workflow_plan plan;
	char *cycle = NULL;
	size_t errors = 0;
	int rc;

	if (spec->kind != SPEC_KIND_WORKFLOW || !spec->has_workflow) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, spec->file, spec->kind_pos,
				     "use kind: workflow with a workflow: block",
				     "a %s spec is not a workflow", spec_kind_name(spec->kind));
		return 1;
	}
	errors += spec_check_supported(spec, WORKFLOW_SUPPORTED_FEATURES, diag);
	rc = spec_workflow_plan(&spec->workflow, &plan, &cycle);
	if (rc < 0) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, spec->file, spec->workflow.pos,
				     "make depends_on and stdin_from name earlier steps only",
				     "the workflow's steps cannot be ordered (%s)",
				     cycle ? cycle : strerror(-rc));
		free(cycle);
		return errors + 1;
	}
	spec_workflow_plan_free(&plan);
	return errors;
}

/* The last line of a step's stderr, trimmed to a short excerpt, for its stage error. */
static void workflow_stderr_excerpt(const struct box_exec_result *result, char *out,
				    size_t out_len)
{
	size_t end = result->stderr_len;
	size_t start;

	while (end > 0 && (result->stderr_data[end - 1] == '\n' ||
			   result->stderr_data[end - 1] == '\r'))
		end--;
	start = end;
	while (start > 0 && result->stderr_data[start - 1] != '\n')
		start--;
	if (end - start > WORKFLOW_STDERR_EXCERPT_MAX)
		start = end - WORKFLOW_STDERR_EXCERPT_MAX;
	snprintf(out, out_len, "%.*s", (int)(end - start), result->stderr_data + start);
}

static int workflow_record_failure(struct workflow_step_run *run,
				   const struct box_exec_result *result, int rc)
{
	char *excerpt = run->stderr_excerpt;

	if (result->timed_out)
		return run_stage_set_error(run->stage, "timed out after %us", run->timeout_secs);
	if (rc < 0 || result->error)
		return run_stage_set_error(run->stage, "%s",
					   result->error ? result->error : strerror(-rc));
	workflow_stderr_excerpt(result, excerpt, sizeof(run->stderr_excerpt));
	if (excerpt[0])
		return run_stage_set_error(run->stage, "exited with code %d: %s",
					   result->exit_code, excerpt);
	return run_stage_set_error(run->stage, "exited with code %d", result->exit_code);
}

/* box_exec's chunk callback: a step's output, as it prints it, to the report's observer. */
static void workflow_step_chunk(void *opaque, bool is_stderr, const void *data, size_t len)
{
	struct workflow_step_run *run = opaque;

	run_report_stage_output(run->report, run->stage, is_stderr, data, len);
}

static void workflow_step_execute(struct workflow_step_run *run)
{
	const struct spec_step *step = &run->spec->workflow.steps[run->index];
	struct box_exec_request req = {
		.program = step->program,
		.args = (const char *const *)step->args,
		.arg_count = step->arg_count,
		.stdin_data = run->stdin_data,
		.stdin_len = run->stdin_len,
		.timeout_secs = run->timeout_secs,
		.on_chunk = run->report->observer ? workflow_step_chunk : NULL,
		.chunk_opaque = run,
	};
	bool service = step->mode == SPEC_STEP_MODE_SERVICE;
	struct service_watch watch = { 0 };
	struct box_exec_result result;
	int rc;

	log_info("workflow", "[workflow:%s] step %zu/%zu: \"%s\" running%s...", run->spec->name,
		 run->index + 1, run->spec->workflow.step_count, step->name,
		 service ? " as a service" : "");
	run_report_stage_started(run->report, run->stage);
	if (service) {
		req.service_name = step->name;
		if (service_watch_start(&watch, run->box, step->name,
					step->output_file ? step->output_file
							  : SPEC_DEFAULT_OUTPUT_FILE,
					run->report, run->stage) < 0)
			log_warn("workflow",
				 "[workflow:%s] service step \"%s\" has no watcher: its output is published when it ends and it cannot be stopped",
				 run->spec->name, step->name);
	}
	rc = box_exec(run->box, &req, &result);
	if (service)
		service_watch_finish(&watch);
	if (rc == -ENOMEM) {
		run->box_failed = true;
		run_stage_set_error(run->stage, "out of memory running the step");
		run_report_stage_finished(run->report, run->stage);
		return;
	}
	run->stage->ran = true;
	run->stage->exit_code = result.exit_code;
	run->stage->duration_ms = result.duration_ms;
	run->stage->success = rc == 0 && !result.timed_out &&
			      (service ? service_stage_succeeded(&watch, result.exit_code, false)
				       : result.exit_code == 0 && !result.error);
	run->stage->is_error = !run->stage->success;
	run->timed_out = result.timed_out;
	run->box_failed = rc < 0;
	if (run_stage_set_output(run->stage, result.stdout_data, result.stdout_len) < 0)
		run->stage->success = false;
	if (!run->stage->success)
		workflow_record_failure(run, &result, rc);
	/* the stdout buffer moves to the run for stdin_from readers */
	run->stdout_data = result.stdout_data;
	run->stdout_len = result.stdout_len;
	result.stdout_data = NULL;
	if (run->stage->success)
		log_info("workflow", "[workflow:%s] step \"%s\" done (%llu ms)", run->spec->name,
			 step->name, (unsigned long long)result.duration_ms);
	else
		log_debug("workflow", "[workflow:%s] step \"%s\" failed: %s", run->spec->name,
			 step->name, run->stage->error ? run->stage->error : "unknown error");
	box_exec_result_free(&result);
	run_report_stage_finished(run->report, run->stage);
}

static void *workflow_step_thread(void *opaque)
{
	workflow_step_execute(opaque);
	return NULL;
}

/* Wires a step's stdin and timeout; its stdin_from step ran in an earlier level. */
static void workflow_step_prepare(struct workflow_step_run *runs, size_t index,
				  const struct spec *spec, const struct workflow_options *options)
{
	const struct spec_step *step = &spec->workflow.steps[index];
	struct workflow_step_run *run = &runs[index];

	run->timeout_secs = step->has_timeout_secs		   ? step->timeout_secs
			    : step->mode == SPEC_STEP_MODE_SERVICE ? 0
								   : options->default_timeout_secs;
	if (step->stdin_from) {
		long source = spec_workflow_find_step(&spec->workflow, step->stdin_from);

		if (source >= 0) {
			run->stdin_data = runs[source].stdout_data;
			run->stdin_len = runs[source].stdout_len;
		}
	} else if (options->input) {
		run->stdin_data = options->input;
		run->stdin_len = options->input_len;
	}
}

static void workflow_run_level(struct workflow_step_run *runs, const struct spec_plan_level *level,
			       const struct spec *spec, const struct workflow_options *options)
{
	for (size_t i = 0; i < level->count; i++)
		workflow_step_prepare(runs, level->steps[i], spec, options);
	if (level->count == 1) {
		workflow_step_execute(&runs[level->steps[0]]);
		return;
	}
	for (size_t i = 0; i < level->count; i++) {
		struct workflow_step_run *run = &runs[level->steps[i]];

		run->threaded = pthread_create(&run->thread, NULL, workflow_step_thread, run) == 0;
		if (!run->threaded) {
			log_warn("workflow",
				 "[workflow:%s] cannot start a thread for step \"%s\"; running it after the others",
				 spec->name, spec->workflow.steps[run->index].name);
		}
	}
	for (size_t i = 0; i < level->count; i++) {
		struct workflow_step_run *run = &runs[level->steps[i]];

		if (run->threaded)
			pthread_join(run->thread, NULL);
		else
			workflow_step_execute(run);
	}
}

/* The first failed step of a level (in declaration order) fails the run; returns its index. */
static long workflow_level_failure(const struct workflow_step_run *runs,
				   const struct spec_plan_level *level)
{
	for (size_t i = 0; i < level->count; i++)
		if (!runs[level->steps[i]].stage->success)
			return (long)level->steps[i];
	return -1;
}

static void workflow_report_failure(struct run_report *report, const struct spec *spec,
				    const struct workflow_step_run *run)
{
	const char *name = spec->workflow.steps[run->index].name;

	if (run->timed_out)
		run_report_set_error(report, "step \"%s\" timed out after %us (exit code %d)", name,
				     run->timeout_secs, run->stage->exit_code);
	else if (run->box_failed || !run->stage->ran)
		run_report_set_error(report, "step \"%s\" could not run: %s", name,
				     run->stage->error ? run->stage->error : "unknown error");
	else
		run_report_set_error(report, "step \"%s\" failed with exit code %d%s%s", name,
				     run->stage->exit_code, run->stderr_excerpt[0] ? ": " : "",
				     run->stderr_excerpt);
}

static int workflow_add_stages(const struct spec *spec, struct run_report *report,
			       struct workflow_step_run *runs, struct box *box,
			       const struct workflow_options *options)
{
	size_t first = report->stage_count;

	for (size_t i = 0; i < spec->workflow.step_count; i++)
		if (!run_report_add_stage(report, spec->workflow.steps[i].name))
			return -ENOMEM;
	for (size_t i = 0; i < spec->workflow.step_count; i++) {
		runs[i].spec = spec;
		runs[i].options = options;
		runs[i].box = box;
		runs[i].index = i;
		runs[i].stage = &report->stages[first + i];
		runs[i].report = report;
	}
	return 0;
}

static size_t workflow_output_step(const struct spec *spec)
{
	long index = spec->workflow.output_step
			     ? spec_workflow_find_step(&spec->workflow, spec->workflow.output_step)
			     : -1;

	return index >= 0 ? (size_t)index : spec->workflow.step_count - 1;
}

static int workflow_execute(const struct spec *spec, struct box *box,
			    const struct workflow_options *options, struct run_report *report,
			    struct workflow_step_run *runs, const struct spec_workflow_plan *plan)
{
	size_t output_index;

	if (workflow_add_stages(spec, report, runs, box, options) < 0) {
		run_report_set_error(report, "out of memory preparing the workflow");
		return -ENOMEM;
	}
	for (size_t level = 0; level < plan->level_count; level++) {
		long failed;

		workflow_run_level(runs, &plan->levels[level], spec, options);
		failed = workflow_level_failure(runs, &plan->levels[level]);
		if (failed >= 0) {
			workflow_report_failure(report, spec, &runs[failed]);
			log_error("workflow", "[workflow:%s] %s", spec->name, report->error);
			return -ECANCELED;
		}
	}
	output_index = workflow_output_step(spec);
	if (run_report_set_output(report, runs[output_index].stdout_data,
				  runs[output_index].stdout_len) < 0) {
		run_report_set_error(report, "out of memory keeping the workflow output");
		return -ENOMEM;
	}
	report->success = true;
	return 0;
}

int workflow_run_in_box(const struct spec *spec, struct box *box,
			const struct workflow_options *options, struct run_report *report)
{
	static const struct workflow_options no_options;
	struct spec_workflow_plan plan = { 0 };
	struct workflow_step_run *runs = NULL;
	uint64_t start = clock_monotonic_ms();
	int rc;

	if (!options)
		options = &no_options;
	report->success = false;
	run_report_set_sandbox_mode(report, box_mode_name(box_mode(box)));
	if (spec->kind != SPEC_KIND_WORKFLOW || spec->workflow.step_count == 0) {
		run_report_set_error(report, "a %s spec is not a workflow with steps",
				     spec_kind_name(spec->kind));
		return -EINVAL;
	}
	rc = spec_workflow_plan(&spec->workflow, &plan, NULL);
	if (rc < 0) {
		run_report_set_error(report, "the workflow's steps cannot be ordered: %s",
				     strerror(-rc));
		return rc;
	}
	runs = calloc(spec->workflow.step_count, sizeof(*runs));
	if (!runs) {
		rc = -ENOMEM;
		run_report_set_error(report, "out of memory preparing the workflow");
	} else {
		rc = workflow_execute(spec, box, options, report, runs, &plan);
	}
	for (size_t i = 0; runs && i < spec->workflow.step_count; i++)
		free(runs[i].stdout_data);
	free(runs);
	spec_workflow_plan_free(&plan);
	report->duration_ms = clock_monotonic_ms() - start;
	if (rc == 0)
		log_info("workflow", "[workflow:%s] done in %llu ms", spec->name,
			 (unsigned long long)report->duration_ms);
	return rc;
}

/* Joins the check's error messages into the report's error. */
static void workflow_report_check_errors(struct run_report *report,
					 const struct spec_diagnostics *diag)
{
	char text[WORKFLOW_ERROR_MAX] = "";
	size_t used = 0;

	for (size_t i = 0; i < diag->count && used < sizeof(text); i++) {
		const struct spec_diagnostic *item = &diag->items[i];
		int written;

		if (item->severity != SPEC_SEVERITY_ERROR)
			continue;
		written = snprintf(text + used, sizeof(text) - used, "%s%s", used ? "; " : "",
				   item->message);
		if (written < 0)
			break;
		used += (size_t)written;
	}
	run_report_set_error(report, "%s", text);
}

int workflow_run(const struct spec *spec, const struct workflow_options *options,
		 struct run_report *report)
{
	static const struct workflow_options no_options;
	struct spec_diagnostics diag;
	struct box_config cfg;
	struct box *box = NULL;
	char err[WORKFLOW_ERROR_MAX];
	int rc;

	if (!options)
		options = &no_options;
	report->success = false;
	spec_diagnostics_init(&diag);
	if (workflow_check(spec, &diag) > 0) {
		workflow_report_check_errors(report, &diag);
		spec_diagnostics_free(&diag);
		return -ENOTSUP;
	}
	spec_diagnostics_free(&diag);

	box_config_from_spec(&cfg, spec, NULL);
	if (options->override_mode)
		cfg.mode = options->mode;
	cfg.mock_rules = options->mock_rules;
	cfg.mock_rule_count = options->mock_rule_count;
	cfg.serial_log_path = options->serial_log_path;
	cfg.host = options->host;
	run_report_wire_telemetry(report, &cfg);
	rc = box_open(&cfg, &box, err, sizeof(err));
	if (rc < 0) {
		run_report_set_error(report, "%s", err);
		return rc;
	}
	rc = workflow_run_in_box(spec, box, options, report);
	box_close(box, rc < 0);
	return rc;
}
