/*
 * The pipeline runner: stages in order, one box per pipeline box opened and closed around its
 * agent invocation. A fan_out adds all its report stages first (so their pointers stay valid),
 * then a small pool of worker threads (the parallelism bound) takes boxes from a shared index;
 * each worker writes only its own stage and carry slot, so no lock guards the results.
 */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/log.h"
#include "runtime/pipeline.h"

#define PIPELINE_ERROR_MAX 1024
#define PIPELINE_MAX_PARALLEL_LIMIT 64ul

struct pipeline_box_run {
	const struct spec *spec;
	const struct spec_box *box;
	const struct pipeline_options *options;
	const char *input; /* the carry into this stage; NULL: none */
	size_t input_len;
	struct run_stage *stage;
	const struct run_report *report; /* whose observer hears the box's telemetry */
	char *file_output; /* what the agent wrote to its output file, or NULL */
	bool opened;
	enum box_mode mode; /* what the box really was, once opened */
	const char *sidecar_url; /* the box's messaging sidecar; NULL: messaging is off */
	uint16_t sidecar_port;	 /* the host loopback port behind sidecar_url */
	int rc;
};

/* The run's messaging: the sidecar and each box's member (URL "" for boxes without messaging). */
struct pipeline_messaging {
	struct run_messaging *rm;
	struct run_messaging_member *members; /* indexed like spec->pipeline.boxes */
};

struct pipeline_pool {
	struct pipeline_box_run *runs;
	size_t count;
	size_t next;
	pthread_mutex_t lock;
};

unsigned pipeline_max_parallel(const struct pipeline_options *options)
{
	if (options && options->max_parallel && options->max_parallel <= PIPELINE_MAX_PARALLEL_LIMIT)
		return options->max_parallel;
	return PIPELINE_DEFAULT_MAX_PARALLEL_VMS;
}

size_t pipeline_check(const struct spec *spec, struct spec_diagnostics *diag)
{
	if (spec->kind != SPEC_KIND_PIPELINE || !spec->has_pipeline) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, spec->file, spec->kind_pos,
				     "use kind: pipeline with a pipeline: section",
				     "this spec is not a pipeline spec");
		return 1;
	}
	return spec_check_supported(spec, AGENT_SUPPORTED_FEATURES, diag);
}

/* Opens the box's own VM (or mock), runs its agent, closes it. */
static void pipeline_run_box(struct pipeline_box_run *run)
{
	const struct agent_options *agent = &run->options->agent;
	const struct spec_box *box = run->box;
	struct agent_mock mock = { .exec = agent->mock_exec, .exec_opaque = agent->mock_exec_opaque };
	struct agent_task task = {
		.name = box->name, .prompt = box->prompt, .skills = box->skills,
		.skill_count = box->skill_count, .llm = spec_box_llm(run->spec, box),
		.output_file = SPEC_DEFAULT_OUTPUT_FILE,
		.timeout_secs = box->has_timeout_secs ? box->timeout_secs : agent->default_timeout_secs,
		.input = run->input, .input_len = run->input_len,
		.host_env = agent->host_env, .host_env_ctx = agent->host_env_ctx,
		.sidecar_url = run->sidecar_url,
		.report = run->report,
	};
	struct box_config cfg;
	struct box *handle = NULL;
	char err[PIPELINE_ERROR_MAX];

	box_config_from_spec(&cfg, run->spec, box);
	cfg.image_name = agent_guest_image_name(task.llm);
	if (agent->override_mode)
		cfg.mode = agent->mode;
	cfg.name = box->name;
	if (run->sidecar_url) {
		cfg.network = true;
		cfg.sidecar_port = run->sidecar_port;
	}
	cfg.mock_handler = agent_mock_handler;
	cfg.mock_opaque = &mock;
	run_report_wire_telemetry(run->report, &cfg);
	run->stage->ran = true;
	run->rc = box_open(&cfg, &handle, err, sizeof(err));
	if (run->rc < 0) {
		run_stage_set_error(run->stage, "%s", err);
		return;
	}
	mock.box = handle;
	run->opened = true;
	run->mode = box_mode(handle);
	run->rc = agent_invoke(handle, &task, run->stage, &run->file_output);
	box_close(handle, run->rc != 0);
}

static void *pipeline_worker(void *opaque)
{
	struct pipeline_pool *pool = opaque;

	for (;;) {
		size_t index;

		pthread_mutex_lock(&pool->lock);
		index = pool->next++;
		pthread_mutex_unlock(&pool->lock);
		if (index >= pool->count)
			return NULL;
		pipeline_run_box(&pool->runs[index]);
	}
}

/* Runs runs[0..count) with at most max_parallel at once; the caller's thread is one worker. */
static void pipeline_run_parallel(struct pipeline_box_run *runs, size_t count,
				  unsigned max_parallel)
{
	struct pipeline_pool pool = { .runs = runs, .count = count };
	size_t helpers = (max_parallel < count ? max_parallel : count) - 1;
	pthread_t *threads = calloc(helpers ? helpers : 1, sizeof(*threads));
	size_t started = 0;

	pthread_mutex_init(&pool.lock, NULL);
	for (size_t i = 0; threads && i < helpers; i++) {
		if (pthread_create(&threads[i], NULL, pipeline_worker, &pool) != 0)
			break;
		started++;
	}
	pipeline_worker(&pool);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&pool.lock);
	free(threads);
}

/* The carry after a box stage: its output file if any, else its result text. */
static char *pipeline_carry_of(const struct pipeline_box_run *run)
{
	return strdup(run->file_output ? run->file_output : run->stage->output);
}

/* The carry after a fan_out: a JSON array of the boxes' result texts, in declared order. */
static char *pipeline_merge(const struct pipeline_box_run *runs, size_t count)
{
	json_t *array = json_array();
	char *text;

	if (!array)
		return NULL;
	for (size_t i = 0; i < count; i++)
		if (json_array_append_new(array, json_string(runs[i].stage->output))) {
			json_decref(array);
			return NULL;
		}
	text = json_dumps(array, JSON_COMPACT);
	json_decref(array);
	return text;
}

/* Adds one report stage per box of stage_index; NULL on -ENOMEM. */
static struct pipeline_box_run *pipeline_stage_runs(const struct spec *spec,
						    const struct spec_stage *stage,
						    const struct pipeline_options *options,
						    const struct pipeline_messaging *messaging,
						    struct run_report *report, const char *carry)
{
	struct pipeline_box_run *runs = calloc(stage->box_count, sizeof(*runs));
	size_t first = report->stage_count;

	if (!runs)
		return NULL;
	for (size_t i = 0; i < stage->box_count; i++) {
		const struct spec_box *box = &spec->pipeline.boxes[stage->box_indices[i]];

		if (!run_report_add_stage(report, box->name)) {
			free(runs);
			return NULL;
		}
		const struct run_messaging_member *member =
			messaging->members ? &messaging->members[stage->box_indices[i]] : NULL;
		const char *url = member ? member->url : "";

		runs[i] = (struct pipeline_box_run){ .spec = spec, .box = box, .options = options,
						     .report = report, .input = carry,
						     .input_len = carry ? strlen(carry) : 0,
						     .sidecar_url = url[0] ? url : NULL,
						     .sidecar_port = member ? member->host_port : 0 };
	}
	for (size_t i = 0; i < stage->box_count; i++)
		runs[i].stage = &report->stages[first + i];
	return runs;
}

static void pipeline_free_runs(struct pipeline_box_run *runs, size_t count)
{
	for (size_t i = 0; runs && i < count; i++)
		free(runs[i].file_output);
	free(runs);
}

/* Adds not-run stages for every box of the stages after a failure. */
static void pipeline_mark_skipped(const struct spec *spec, size_t from, struct run_report *report)
{
	for (size_t s = from; s < spec->pipeline.stage_count; s++) {
		const struct spec_stage *stage = &spec->pipeline.stages[s];

		for (size_t i = 0; i < stage->box_count; i++) {
			struct run_stage *skipped = run_report_add_stage(
				report, spec->pipeline.boxes[stage->box_indices[i]].name);

			if (skipped)
				run_stage_set_error(skipped, "not run: an earlier stage failed");
		}
	}
}

/* Runs one stage; on success replaces *carry. Returns 0 or the first failing box's rc. */
static int pipeline_run_stage(const struct spec *spec, size_t stage_index,
			      const struct pipeline_options *options,
			      const struct pipeline_messaging *messaging, struct run_report *report,
			      char **carry)
{
	const struct spec_stage *stage = &spec->pipeline.stages[stage_index];
	struct pipeline_box_run *runs =
		pipeline_stage_runs(spec, stage, options, messaging, report, *carry);
	char *next = NULL;
	int rc = 0;

	if (!runs)
		return -ENOMEM;
	for (size_t i = 0; i < stage->box_count; i++)
		run_report_stage_started(report, runs[i].stage);
	if (stage->type == SPEC_STAGE_FAN_OUT)
		pipeline_run_parallel(runs, stage->box_count, pipeline_max_parallel(options));
	else
		pipeline_run_box(&runs[0]);
	for (size_t i = 0; i < stage->box_count; i++)
		run_report_stage_finished(report, runs[i].stage);
	/* the stage is over: what its agents sent reaches the next stage's inboxes */
	run_messaging_advance(messaging->rm);
	if (!report->sandbox_mode && runs[0].opened)
		run_report_set_sandbox_mode(report, box_mode_name(runs[0].mode));
	for (size_t i = 0; i < stage->box_count && rc == 0; i++) {
		if (runs[i].rc < 0) {
			rc = runs[i].rc;
			run_report_set_error(report, "pipeline stopped at stage %zu (%s), box '%s': %s",
					     stage_index + 1, spec_stage_type_name(stage->type),
					     runs[i].box->name,
					     runs[i].stage->error ? runs[i].stage->error :
								    strerror(-rc));
		}
	}
	if (rc == 0) {
		next = stage->type == SPEC_STAGE_FAN_OUT ? pipeline_merge(runs, stage->box_count) :
							   pipeline_carry_of(&runs[0]);
		if (!next)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		free(*carry);
		*carry = next;
	}
	pipeline_free_runs(runs, stage->box_count);
	return rc;
}

/* Starts the sidecar and joins every box with messaging enabled; none: nothing started. */
static int pipeline_messaging_open(const struct spec *spec, const struct pipeline_options *options,
				   struct pipeline_messaging *out, struct run_report *report)
{
	char err[PIPELINE_ERROR_MAX];
	int rc = 0;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < spec->pipeline.box_count && !out->members; i++)
		if (spec->pipeline.boxes[i].messaging.enabled)
			out->members = calloc(spec->pipeline.box_count, sizeof(*out->members));
	if (!out->members)
		return 0;
	rc = run_messaging_open(spec->name, &options->agent.messaging, &out->rm, err, sizeof(err));
	for (size_t i = 0; rc == 0 && i < spec->pipeline.box_count; i++)
		if (spec->pipeline.boxes[i].messaging.enabled)
			rc = run_messaging_join(out->rm, spec->pipeline.boxes[i].name,
						&out->members[i], err, sizeof(err));
	if (rc < 0)
		run_report_set_error(report, "%s", err);
	return rc;
}

static void pipeline_messaging_close(struct pipeline_messaging *messaging)
{
	run_messaging_close(messaging->rm);
	free(messaging->members);
}

int pipeline_run(const struct spec *spec, const struct pipeline_options *options,
		 struct run_report *report)
{
	struct pipeline_messaging messaging;
	static const struct pipeline_options defaults;
	struct spec_diagnostics diag;
	char *carry = NULL;
	int rc = 0;

	if (!options)
		options = &defaults;
	spec_diagnostics_init(&diag);
	if (pipeline_check(spec, &diag)) {
		run_report_set_error(report, "%s",
				     diag.count ? diag.items[0].message : "spec cannot run");
		spec_diagnostics_free(&diag);
		return -ENOTSUP;
	}
	spec_diagnostics_free(&diag);
	if (options->agent.input) {
		carry = strndup(options->agent.input, options->agent.input_len);
		if (!carry)
			return -ENOMEM;
	}
	rc = pipeline_messaging_open(spec, options, &messaging, report);
	for (size_t s = 0; rc == 0 && s < spec->pipeline.stage_count; s++) {
		rc = pipeline_run_stage(spec, s, options, &messaging, report, &carry);
		if (rc < 0) {
			pipeline_mark_skipped(spec, s + 1, report);
			break;
		}
	}
	pipeline_messaging_close(&messaging);
	run_report_sum_usage(report);
	report->success = rc == 0;
	if (rc == 0)
		run_report_set_output(report, carry ? carry : "", SIZE_MAX);
	if (rc == -ENOMEM && !report->error)
		run_report_set_error(report, "out of memory");
	free(carry);
	return rc == 0 ? 0 : (rc == -ENOMEM ? rc : -ECANCELED);
}
