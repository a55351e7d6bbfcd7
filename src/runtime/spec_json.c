/*
 * The resolved spec as JSON, for `voidbox inspect --output json` and for comparing specs.
 *
 * The output shows every field with its default applied, uses the same key names as the
 * input, and writes optional values that are absent as null, so a reader sees what voidbox will
 * actually do. Values copied from the host environment are not printed (they are often
 * credentials): such an entry shows `"from_host": true` instead. Positions are left out so two
 * forms of one spec (YAML and JSON) give equal output.
 */
#include <jansson.h>

#include "runtime/spec_internal.h"

static json_t *spec_json_strv(char *const *strv, size_t count)
{
	json_t *array = json_array();

	for (size_t i = 0; array && i < count; i++) {
		if (json_array_append_new(array, json_string(strv[i]))) {
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

static json_t *spec_json_env(const struct spec_env *env)
{
	json_t *object = json_object();

	for (size_t i = 0; object && i < env->count; i++) {
		const struct spec_env_var *var = &env->vars[i];
		json_t *value = var->copy_from_host ? json_pack("{s:b}", "from_host", 1)
						    : json_string(var->value);

		if (json_object_set_new(object, var->name, value)) {
			json_decref(object);
			return NULL;
		}
	}
	return object;
}

static json_t *spec_json_mounts(const struct spec_mount *mounts, size_t count)
{
	json_t *array = json_array();

	for (size_t i = 0; array && i < count; i++) {
		json_t *item = json_pack("{s:s, s:s, s:s}", "host", mounts[i].host, "guest",
					 mounts[i].guest, "mode",
					 spec_mount_mode_name(mounts[i].mode));

		if (json_array_append_new(array, item)) {
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

static json_t *spec_json_sandbox(const struct spec_sandbox *sandbox)
{
	return json_pack("{s:s, s:s?, s:s?, s:I, s:I, s:b, s:o, s:o, s:s?, s:s?, s:s?}", "mode",
			 spec_sandbox_mode_name(sandbox->mode), "kernel", sandbox->kernel,
			 "initramfs", sandbox->initramfs, "memory_mb",
			 (json_int_t)sandbox->memory_mb, "vcpus", (json_int_t)sandbox->vcpus,
			 "network", sandbox->network, "env", spec_json_env(&sandbox->env), "mounts",
			 spec_json_mounts(sandbox->mounts, sandbox->mount_count), "image",
			 sandbox->image, "guest_image", sandbox->guest_image, "snapshot",
			 sandbox->snapshot);
}

static json_t *spec_json_llm(const struct spec_llm *llm)
{
	return json_pack("{s:s, s:s?, s:s?, s:s?, s:b}", "provider",
			 spec_llm_provider_name(llm->provider), "model", llm->model, "base_url",
			 llm->base_url, "api_key_env", llm->api_key_env, "credential_proxy",
			 llm->credential_proxy);
}

static json_t *spec_json_observe(const struct spec_observe *observe)
{
	return json_pack("{s:b, s:b, s:b, s:s?, s:s?, s:o}", "traces", observe->traces, "metrics",
			 observe->metrics, "logs", observe->logs, "otlp_endpoint",
			 observe->otlp_endpoint, "service_name", observe->service_name,
			 "telemetry_buffer_size",
			 observe->has_telemetry_buffer_size
				 ? json_integer(observe->telemetry_buffer_size)
				 : json_null());
}

static json_t *spec_json_skill(const struct spec_skill *skill)
{
	const char *type = spec_skill_type_name(skill->type);

	switch (skill->type) {
	case SPEC_SKILL_OCI:
		return json_pack("{s:s, s:s?, s:s?, s:b}", "type", type, "image", skill->image,
				 "mount", skill->mount, "readonly", skill->readonly);
	case SPEC_SKILL_INLINE:
		return json_pack("{s:s, s:s?, s:s?}", "type", type, "name", skill->name, "content",
				 skill->content);
	case SPEC_SKILL_MCP:
		if (skill->command)
			return json_pack("{s:s, s:s, s:o, s:o}", "type", type, "command",
					 skill->command, "args",
					 spec_json_strv(skill->args, skill->arg_count), "env",
					 spec_json_env(&skill->env));
		break;
	default:
		break;
	}
	return json_pack("{s:s, s:s?}", "type", type, "value", skill->value);
}

static json_t *spec_json_skills(const struct spec_skill *skills, size_t count)
{
	json_t *array = json_array();

	for (size_t i = 0; array && i < count; i++) {
		if (json_array_append_new(array, spec_json_skill(&skills[i]))) {
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

static json_t *spec_json_optional_uint(bool present, uint32_t value)
{
	return present ? json_integer(value) : json_null();
}

static json_t *spec_json_agent(const struct spec_agent *agent)
{
	json_t *messaging = agent->has_messaging
				    ? json_pack("{s:b, s:s?}", "enabled", agent->messaging.enabled,
						"provider_bridge", agent->messaging.provider_bridge)
				    : json_null();

	return json_pack("{s:s?, s:o, s:o, s:s, s:o, s:s}", "prompt", agent->prompt, "skills",
			 spec_json_skills(agent->skills, agent->skill_count), "timeout_secs",
			 spec_json_optional_uint(agent->has_timeout_secs, agent->timeout_secs),
			 "output_file", agent->output_file, "messaging", messaging, "mode",
			 spec_agent_mode_name(agent->mode));
}

static json_t *spec_json_box_sandbox(const struct spec_box *box)
{
	const struct spec_box_sandbox *sandbox = &box->sandbox;

	if (!box->has_sandbox)
		return json_null();
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:s?}", "memory_mb",
			 spec_json_optional_uint(sandbox->has_memory_mb, sandbox->memory_mb),
			 "vcpus", spec_json_optional_uint(sandbox->has_vcpus, sandbox->vcpus),
			 "network", sandbox->has_network ? json_boolean(sandbox->network) : json_null(),
			 "env", spec_json_env(&sandbox->env), "mounts",
			 spec_json_mounts(sandbox->mounts, sandbox->mount_count), "snapshot",
			 sandbox->snapshot);
}

static json_t *spec_json_box_ports(const struct spec_box *box, bool outputs)
{
	size_t count = outputs ? box->output_count : box->input_count;
	json_t *array = json_array();

	for (size_t i = 0; array && i < count; i++) {
		json_t *item = outputs ? json_pack("{s:s?, s:s?}", "name", box->outputs[i].name,
						   "guest", box->outputs[i].guest)
				       : json_pack("{s:s?, s:s?}", "from", box->inputs[i].from,
						   "guest", box->inputs[i].guest);

		if (json_array_append_new(array, item)) {
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

static json_t *spec_json_box(const struct spec_box *box)
{
	return json_pack("{s:s?, s:s?, s:o, s:o, s:o, s:o, s:o, s:o}", "name", box->name,
			 "prompt", box->prompt, "skills",
			 spec_json_skills(box->skills, box->skill_count), "llm",
			 box->has_llm ? spec_json_llm(&box->llm) : json_null(), "timeout_secs",
			 spec_json_optional_uint(box->has_timeout_secs, box->timeout_secs),
			 "sandbox", spec_json_box_sandbox(box), "outputs",
			 spec_json_box_ports(box, true), "inputs", spec_json_box_ports(box, false));
}

static json_t *spec_json_stage(const struct spec_stage *stage)
{
	if (stage->type == SPEC_STAGE_BOX)
		return json_pack("{s:s, s:s?}", "type", spec_stage_type_name(stage->type), "name",
				 stage->box_count ? stage->box_names[0] : NULL);
	return json_pack("{s:s, s:o}", "type", spec_stage_type_name(stage->type), "boxes",
			 spec_json_strv(stage->box_names, stage->box_count));
}

static json_t *spec_json_pipeline(const struct spec_pipeline *pipeline)
{
	json_t *boxes = json_array(), *stages = json_array();

	for (size_t i = 0; boxes && i < pipeline->box_count; i++)
		if (json_array_append_new(boxes, spec_json_box(&pipeline->boxes[i])))
			goto fail;
	for (size_t i = 0; stages && i < pipeline->stage_count; i++)
		if (json_array_append_new(stages, spec_json_stage(&pipeline->stages[i])))
			goto fail;
	return json_pack("{s:o, s:o}", "boxes", boxes, "stages", stages);
fail:
	json_decref(boxes);
	json_decref(stages);
	return NULL;
}

static json_t *spec_json_step(const struct spec_step *step)
{
	json_t *run = json_pack("{s:s?, s:o, s:s?}", "program", step->program, "args",
				spec_json_strv(step->args, step->arg_count), "stdin_from",
				step->stdin_from);
	json_t *out = json_pack("{s:s?, s:o, s:o, s:s, s:o}", "name", step->name, "run", run,
				"depends_on",
				spec_json_strv(step->depends_on, step->depends_count), "mode",
				spec_step_mode_name(step->mode), "timeout_secs",
				spec_json_optional_uint(step->has_timeout_secs,
							step->timeout_secs));

	if (out && step->output_file)
		json_object_set_new(out, "output_file", json_string(step->output_file));
	return out;
}

static json_t *spec_json_workflow(const struct spec_workflow *workflow)
{
	json_t *steps = json_array();

	for (size_t i = 0; steps && i < workflow->step_count; i++) {
		if (json_array_append_new(steps, spec_json_step(&workflow->steps[i]))) {
			json_decref(steps);
			return NULL;
		}
	}
	return json_pack("{s:o, s:s?}", "steps", steps, "output_step", workflow->output_step);
}

json_t *spec_to_json(const struct spec *spec)
{
	return json_pack("{s:s, s:s, s:s?, s:o, s:o, s:o, s:o, s:o, s:o}", "api_version",
			 spec->api_version, "kind", spec_kind_name(spec->kind), "name", spec->name,
			 "sandbox", spec_json_sandbox(&spec->sandbox), "llm",
			 spec->has_llm ? spec_json_llm(&spec->llm) : json_null(), "observe",
			 spec->has_observe ? spec_json_observe(&spec->observe) : json_null(), "agent",
			 spec->has_agent ? spec_json_agent(&spec->agent) : json_null(), "pipeline",
			 spec->has_pipeline ? spec_json_pipeline(&spec->pipeline) : json_null(),
			 "workflow",
			 spec->has_workflow ? spec_json_workflow(&spec->workflow) : json_null());
}
