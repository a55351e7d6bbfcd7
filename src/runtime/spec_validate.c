/*
 * Rules that relate one part of a spec to another: which blocks a kind needs or refuses, mode
 * rules (service, interactive), names that must be unique, references that must resolve
 * (stages to boxes, depends_on / stdin_from / output_step to steps) and dependency cycles.
 *
 * It runs on the typed structs after the schema walk, so it sees defaults already applied and
 * uses the positions the walk stored. A reference check suggests the closest existing name, and
 * the cycle check only runs once every reference resolves, so one mistake gives one error.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec_internal.h"

#define SPEC_HINT_MAX 256

/* Reports a reference to a name that is not among candidates, with a suggestion if close. */
static void spec_validate_unknown_reference(struct spec_walk *walk, struct spec_pos pos,
					    const char *what, const char *name,
					    const char *const *candidates, size_t count,
					    const char *target_kind)
{
	const char *suggestion = spec_suggest(name, candidates, count);
	char hint[SPEC_HINT_MAX];

	if (suggestion)
		spec_format(hint, sizeof(hint), "did you mean '%s'?", suggestion);
	else
		spec_format(hint, sizeof(hint), "name one of the %ss defined in this spec", target_kind);
	spec_walk_report(walk, SPEC_SEVERITY_ERROR, pos, hint, "%s names %s '%s', which does not "
			 "exist", what, target_kind, name);
}

/* ---- kinds ---------------------------------------------------------------------------- */

struct spec_block_info {
	const char *name;
	bool present;
	struct spec_pos pos;
	enum spec_kind kind;
};

static void spec_validate_kind_blocks(struct spec_walk *walk)
{
	struct spec *spec = walk->spec;
	const struct spec_block_info blocks[] = {
		{ "agent", spec->has_agent, spec->agent.pos, SPEC_KIND_AGENT },
		{ "pipeline", spec->has_pipeline, spec->pipeline.pos, SPEC_KIND_PIPELINE },
		{ "workflow", spec->has_workflow, spec->workflow.pos, SPEC_KIND_WORKFLOW },
	};
	char hint[SPEC_HINT_MAX];

	for (size_t i = 0; i < SPEC_ARRAY_SIZE(blocks); i++) {
		const struct spec_block_info *block = &blocks[i];

		if (block->kind == spec->kind && !block->present) {
			spec_format(hint, sizeof(hint), "add a `%s:` block (see docs/spec-reference.md)",
				 block->name);
			spec_walk_report(walk, SPEC_SEVERITY_ERROR, spec->kind_pos, hint,
					 "kind: %s needs its '%s' block", block->name, block->name);
		}
		if (block->kind == spec->kind || !block->present)
			continue;
		spec_format(hint, sizeof(hint), "remove the '%s' block or set `kind: %s`", block->name,
			 block->name);
		spec_walk_report(walk,
				 spec->kind == SPEC_KIND_SANDBOX ? SPEC_SEVERITY_ERROR
								 : SPEC_SEVERITY_WARNING,
				 block->pos, hint, "a '%s' block does not belong in kind: %s%s",
				 block->name, spec_kind_name(spec->kind),
				 spec->kind == SPEC_KIND_SANDBOX ? "" : " and is ignored");
	}
}

/* ---- llm and agent ----------------------------------------------------------------------- */

static void spec_validate_llm(struct spec_walk *walk, const struct spec_llm *llm)
{
	if (llm->credential_proxy && llm->provider != SPEC_LLM_PROVIDER_CLAUDE)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, llm->credential_proxy_pos,
				 "remove credential_proxy or use `provider: claude`",
				 "credential_proxy works only with provider claude, not %s",
				 spec_llm_provider_name(llm->provider));
}

static void spec_validate_agent_service(struct spec_walk *walk)
{
	const struct spec_agent *agent = &walk->spec->agent;

	if (agent->has_timeout_secs)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, agent->timeout_pos,
				 "remove timeout_secs: a service runs until it is stopped",
				 "agent.timeout_secs cannot be combined with mode: service");
	if (!agent->has_output_file)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, agent->mode_pos,
				 "add `output_file: /workspace/output.json` (where the service "
				 "writes its result)",
				 "mode: service needs an explicit agent.output_file");
	if (walk->spec->has_llm && walk->spec->llm.credential_proxy)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, walk->spec->llm.credential_proxy_pos,
				 "remove credential_proxy or use mode: task",
				 "credential_proxy cannot be combined with mode: service");
}

static void spec_validate_agent(struct spec_walk *walk)
{
	const struct spec_agent *agent = &walk->spec->agent;

	if (!agent->prompt && agent->mode != SPEC_AGENT_MODE_INTERACTIVE)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, agent->pos,
				 "add `prompt: <what the agent should do>`, or set "
				 "`mode: interactive`",
				 "agent needs 'prompt'");
	if (agent->mode == SPEC_AGENT_MODE_SERVICE)
		spec_validate_agent_service(walk);
	if (agent->mode == SPEC_AGENT_MODE_INTERACTIVE && agent->has_timeout_secs)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, agent->timeout_pos,
				 "remove timeout_secs: an interactive session ends when you leave it",
				 "agent.timeout_secs cannot be combined with mode: interactive");
}

/* ---- pipeline ----------------------------------------------------------------------------- */

static long spec_pipeline_find_box(const struct spec_pipeline *pipeline, const char *name)
{
	for (size_t i = 0; i < pipeline->box_count; i++)
		if (pipeline->boxes[i].name && strcmp(pipeline->boxes[i].name, name) == 0)
			return (long)i;
	return -1;
}

static const char **spec_pipeline_box_names(struct spec_walk *walk,
					    const struct spec_pipeline *pipeline)
{
	const char **names = calloc(pipeline->box_count + 1, sizeof(*names));

	if (!names) {
		walk->out_of_memory = true;
		return NULL;
	}
	for (size_t i = 0; i < pipeline->box_count; i++)
		names[i] = pipeline->boxes[i].name ? pipeline->boxes[i].name : "";
	return names;
}

static void spec_validate_box_names(struct spec_walk *walk, const struct spec_pipeline *pipeline)
{
	for (size_t i = 0; i < pipeline->box_count; i++) {
		const struct spec_box *box = &pipeline->boxes[i];
		long first = box->name ? spec_pipeline_find_box(pipeline, box->name) : -1;

		if (first >= 0 && (size_t)first != i)
			spec_walk_report(walk, SPEC_SEVERITY_ERROR, box->pos,
					 "give every box its own name",
					 "box name '%s' is already used at line %u", box->name,
					 pipeline->boxes[first].pos.line);
		if (box->has_llm)
			spec_validate_llm(walk, &box->llm);
	}
}

static bool spec_pipeline_has_output(const struct spec_pipeline *pipeline, const char *name,
				     size_t except_box)
{
	for (size_t i = 0; i < pipeline->box_count; i++) {
		const struct spec_box *box = &pipeline->boxes[i];

		for (size_t j = 0; i != except_box && j < box->output_count; j++)
			if (box->outputs[j].name && strcmp(box->outputs[j].name, name) == 0)
				return true;
	}
	return false;
}

/* An input's `from` names another box, or an output another box declares. */
static void spec_validate_box_inputs(struct spec_walk *walk, const struct spec_pipeline *pipeline,
				     const char **names)
{
	for (size_t i = 0; i < pipeline->box_count; i++) {
		const struct spec_box *box = &pipeline->boxes[i];

		for (size_t j = 0; j < box->input_count; j++) {
			const char *from = box->inputs[j].from;
			long source = from ? spec_pipeline_find_box(pipeline, from) : -1;

			if (!from || (source >= 0 && (size_t)source != i) ||
			    spec_pipeline_has_output(pipeline, from, i))
				continue;
			if (source >= 0)
				spec_walk_report(walk, SPEC_SEVERITY_ERROR, box->inputs[j].pos,
						 "take input from another box",
						 "box '%s' takes input from itself", box->name);
			else
				spec_validate_unknown_reference(walk, box->inputs[j].pos, "input",
								from, names, pipeline->box_count,
								"box");
		}
	}
}

static void spec_validate_stage(struct spec_walk *walk, const struct spec_pipeline *pipeline,
				struct spec_stage *stage, const char **names)
{
	if (!stage->box_count) {
		if (stage->type == SPEC_STAGE_FAN_OUT && stage->box_names)
			spec_walk_report(walk, SPEC_SEVERITY_ERROR, stage->pos,
					 "list the boxes to run in parallel: `boxes: [a, b]`",
					 "a fan_out stage needs at least one box");
		return;
	}
	stage->box_indices = calloc(stage->box_count, sizeof(*stage->box_indices));
	if (!stage->box_indices) {
		walk->out_of_memory = true;
		return;
	}
	for (size_t i = 0; i < stage->box_count; i++) {
		long index = spec_pipeline_find_box(pipeline, stage->box_names[i]);

		if (index < 0) {
			spec_validate_unknown_reference(walk, stage->box_pos[i], "stage",
							stage->box_names[i], names,
							pipeline->box_count, "box");
			continue;
		}
		stage->box_indices[i] = (size_t)index;
		for (size_t j = 0; j < i; j++)
			if (strcmp(stage->box_names[j], stage->box_names[i]) == 0)
				spec_walk_report(walk, SPEC_SEVERITY_ERROR, stage->box_pos[i],
						 "list each box once per fan_out",
						 "box '%s' appears twice in this fan_out",
						 stage->box_names[i]);
	}
}

/* A box that no stage names never runs; that is almost always a typo in the stages. */
static void spec_validate_unused_boxes(struct spec_walk *walk,
				       const struct spec_pipeline *pipeline)
{
	for (size_t i = 0; i < pipeline->box_count; i++) {
		const struct spec_box *box = &pipeline->boxes[i];
		bool used = false;

		for (size_t s = 0; s < pipeline->stage_count && !used; s++)
			for (size_t j = 0; j < pipeline->stages[s].box_count && !used; j++)
				used = box->name &&
				       strcmp(pipeline->stages[s].box_names[j], box->name) == 0;
		if (!used && box->name)
			spec_walk_report(walk, SPEC_SEVERITY_WARNING, box->pos,
					 "add it to a stage, or remove the box",
					 "box '%s' is not named by any stage and will not run",
					 box->name);
	}
}

/* Without stages, the boxes run one after another in the order they are written. */
static int spec_pipeline_default_stages(struct spec_pipeline *pipeline)
{
	pipeline->stages = calloc(pipeline->box_count, sizeof(*pipeline->stages));
	if (!pipeline->stages)
		return -ENOMEM;
	for (size_t i = 0; i < pipeline->box_count; i++) {
		struct spec_stage *stage = &pipeline->stages[i];

		pipeline->stage_count++;
		stage->type = SPEC_STAGE_BOX;
		stage->pos = pipeline->boxes[i].pos;
		stage->box_names = calloc(1, sizeof(*stage->box_names));
		stage->box_pos = calloc(1, sizeof(*stage->box_pos));
		stage->box_indices = calloc(1, sizeof(*stage->box_indices));
		if (!stage->box_names || !stage->box_pos || !stage->box_indices)
			return -ENOMEM;
		stage->box_names[0] = strdup(pipeline->boxes[i].name ? pipeline->boxes[i].name : "");
		if (!stage->box_names[0])
			return -ENOMEM;
		stage->box_count = 1;
		stage->box_pos[0] = pipeline->boxes[i].pos;
		stage->box_indices[0] = i;
	}
	return 0;
}

static void spec_validate_pipeline(struct spec_walk *walk)
{
	struct spec_pipeline *pipeline = &walk->spec->pipeline;
	const char **names;

	if (!pipeline->box_count) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, pipeline->pos,
				 "add `boxes:` with at least one `- name: ...` entry",
				 "pipeline needs at least one box");
		return;
	}
	names = spec_pipeline_box_names(walk, pipeline);
	if (!names)
		return;
	spec_validate_box_names(walk, pipeline);
	spec_validate_box_inputs(walk, pipeline, names);
	for (size_t i = 0; i < pipeline->stage_count; i++)
		spec_validate_stage(walk, pipeline, &pipeline->stages[i], names);
	if (pipeline->stage_count)
		spec_validate_unused_boxes(walk, pipeline);
	if (!pipeline->stage_count && spec_pipeline_default_stages(pipeline) < 0)
		walk->out_of_memory = true;
	free(names);
}

/* ---- workflow ----------------------------------------------------------------------------- */

static const char **spec_workflow_step_names(struct spec_walk *walk,
					     const struct spec_workflow *workflow)
{
	const char **names = calloc(workflow->step_count + 1, sizeof(*names));

	if (!names) {
		walk->out_of_memory = true;
		return NULL;
	}
	for (size_t i = 0; i < workflow->step_count; i++)
		names[i] = workflow->steps[i].name ? workflow->steps[i].name : "";
	return names;
}

/* Checks one depends_on / stdin_from reference; returns false when it does not resolve. */
static bool spec_validate_step_reference(struct spec_walk *walk,
					 const struct spec_workflow *workflow,
					 const struct spec_step *step, const char *field,
					 const char *target, struct spec_pos pos, const char **names)
{
	char what[SPEC_HINT_MAX];
	char hint[SPEC_HINT_MAX];

	spec_format(what, sizeof(what), "step '%s' %s", step->name ? step->name : "?", field);
	if (step->name && strcmp(target, step->name) == 0) {
		spec_format(hint, sizeof(hint), "remove '%s' from %s", target, field);
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, pos, hint, "%s names the step itself",
				 what);
		return false;
	}
	if (spec_workflow_find_step(workflow, target) >= 0)
		return true;
	spec_validate_unknown_reference(walk, pos, what, target, names, workflow->step_count,
					"step");
	return false;
}

static bool spec_validate_step(struct spec_walk *walk, const struct spec_workflow *workflow,
			       size_t index, const char **names)
{
	const struct spec_step *step = &workflow->steps[index];
	long first = step->name ? spec_workflow_find_step(workflow, step->name) : -1;
	bool resolved = true;

	if (first >= 0 && (size_t)first != index)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, step->pos, "give every step its own name",
				 "step name '%s' is already used at line %u", step->name,
				 workflow->steps[first].pos.line);
	for (size_t i = 0; i < step->depends_count; i++)
		resolved &= spec_validate_step_reference(walk, workflow, step, "depends_on",
							 step->depends_on[i], step->depends_pos[i],
							 names);
	if (step->stdin_from)
		resolved &= spec_validate_step_reference(walk, workflow, step, "stdin_from",
							 step->stdin_from, step->stdin_from_pos,
							 names);
	if (step->mode == SPEC_STEP_MODE_SERVICE && step->has_timeout_secs)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, step->timeout_pos,
				 "remove timeout_secs: a service step runs until the run ends",
				 "step '%s' has mode: service and timeout_secs; they exclude each "
				 "other", step->name ? step->name : "?");
	if (step->output_file && step->mode != SPEC_STEP_MODE_SERVICE)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, step->output_file_pos,
				 "add `mode: service`, or remove output_file",
				 "step '%s' has output_file, which only a service step publishes",
				 step->name ? step->name : "?");
	else if (step->output_file && step->output_file[0] != '/')
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, step->output_file_pos,
				 "use an absolute guest path such as /workspace/output.json",
				 "step '%s' has a relative output_file", step->name ? step->name : "?");
	return resolved;
}

static void spec_validate_cycles(struct spec_walk *walk, const struct spec_workflow *workflow)
{
	struct spec_workflow_plan plan;
	char *cycle = NULL;
	size_t start = 0;
	int rc = spec_workflow_plan_with_cycle(workflow, &plan, &cycle, &start);

	if (rc == -ELOOP)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, workflow->steps[start].pos,
				 "remove one depends_on or stdin_from entry along the cycle",
				 "steps depend on each other in a cycle: %s",
				 cycle ? cycle : "(out of memory)");
	else if (rc == -ENOMEM)
		walk->out_of_memory = true;
	else if (rc == 0)
		spec_workflow_plan_free(&plan);
	free(cycle);
}

static void spec_validate_workflow(struct spec_walk *walk)
{
	const struct spec_workflow *workflow = &walk->spec->workflow;
	bool resolved = true;
	const char **names;

	if (!workflow->step_count) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, workflow->pos,
				 "add `steps:` with at least one `- name: ...` and `run:` entry",
				 "workflow needs at least one step");
		return;
	}
	names = spec_workflow_step_names(walk, workflow);
	if (!names)
		return;
	for (size_t i = 0; i < workflow->step_count; i++)
		resolved &= spec_validate_step(walk, workflow, i, names);
	if (workflow->output_step && spec_workflow_find_step(workflow, workflow->output_step) < 0) {
		spec_validate_unknown_reference(walk, workflow->output_step_pos, "output_step",
						workflow->output_step, names,
						workflow->step_count, "step");
	}
	if (resolved)
		spec_validate_cycles(walk, workflow);
	free(names);
}

int spec_validate(struct spec_walk *walk)
{
	struct spec *spec = walk->spec;

	if (walk->kind_known)
		spec_validate_kind_blocks(walk);
	if (spec->has_llm)
		spec_validate_llm(walk, &spec->llm);
	if (spec->has_agent)
		spec_validate_agent(walk);
	if (spec->has_pipeline)
		spec_validate_pipeline(walk);
	if (spec->has_workflow)
		spec_validate_workflow(walk);
	return walk->out_of_memory ? -ENOMEM : 0;
}
