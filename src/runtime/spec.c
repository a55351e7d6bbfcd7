/*
 * Spec loading front door and teardown.
 *
 * Loading is a fixed pipeline: read the file, build the position tree (spec_tree.c), walk the
 * schema into structs (spec_parse.c), check cross-field rules (spec_validate.c), then resolve
 * the host environment (spec_env.c). Every stage appends to the caller's diagnostics and the
 * spec is handed out only when no stage found an error, so a caller never sees a half-valid
 * spec. Files are size-capped before reading because a spec is configuration, not data.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/spec_internal.h"

/* A spec is a few kilobytes; anything this big is a mistake (or an attack on the parser). */
#define SPEC_MAX_FILE_BYTES (4u * 1024u * 1024u)

/* The lookup of a load given none: a host environment with nothing set. */
static const char *spec_no_host_env(const char *name, void *ctx)
{
	(void)name;
	(void)ctx;
	return NULL;
}

static void spec_llm_free(struct spec_llm *llm)
{
	free(llm->model);
	free(llm->base_url);
	free(llm->api_key_env);
}

static void spec_mounts_free(struct spec_mount *mounts, size_t count)
{
	for (size_t i = 0; mounts && i < count; i++) {
		free(mounts[i].host);
		free(mounts[i].guest);
	}
	free(mounts);
}

static void spec_skills_free(struct spec_skill *skills, size_t count)
{
	for (size_t i = 0; skills && i < count; i++) {
		struct spec_skill *skill = &skills[i];

		free(skill->value);
		free(skill->image);
		free(skill->mount);
		free(skill->command);
		spec_strv_free(skill->args, skill->arg_count);
		spec_env_free(&skill->env);
		free(skill->name);
		free(skill->content);
	}
	free(skills);
}

static void spec_box_free(struct spec_box *box)
{
	free(box->name);
	free(box->prompt);
	free(box->messaging.provider_bridge);
	spec_skills_free(box->skills, box->skill_count);
	spec_llm_free(&box->llm);
	spec_env_free(&box->sandbox.env);
	spec_mounts_free(box->sandbox.mounts, box->sandbox.mount_count);
	free(box->sandbox.snapshot);
	for (size_t i = 0; box->outputs && i < box->output_count; i++) {
		free(box->outputs[i].name);
		free(box->outputs[i].guest);
	}
	free(box->outputs);
	for (size_t i = 0; box->inputs && i < box->input_count; i++) {
		free(box->inputs[i].from);
		free(box->inputs[i].guest);
	}
	free(box->inputs);
}

static void spec_pipeline_free(struct spec_pipeline *pipeline)
{
	for (size_t i = 0; pipeline->boxes && i < pipeline->box_count; i++)
		spec_box_free(&pipeline->boxes[i]);
	free(pipeline->boxes);
	for (size_t i = 0; pipeline->stages && i < pipeline->stage_count; i++) {
		spec_strv_free(pipeline->stages[i].box_names, pipeline->stages[i].box_count);
		free(pipeline->stages[i].box_indices);
		free(pipeline->stages[i].box_pos);
	}
	free(pipeline->stages);
}

static void spec_workflow_free(struct spec_workflow *workflow)
{
	for (size_t i = 0; workflow->steps && i < workflow->step_count; i++) {
		struct spec_step *step = &workflow->steps[i];

		free(step->name);
		free(step->program);
		spec_strv_free(step->args, step->arg_count);
		free(step->stdin_from);
		free(step->output_file);
		spec_strv_free(step->depends_on, step->depends_count);
		free(step->depends_pos);
	}
	free(workflow->steps);
	free(workflow->output_step);
}

void spec_free(struct spec *spec)
{
	if (!spec)
		return;
	free(spec->file);
	free(spec->api_version);
	free(spec->name);
	free(spec->sandbox.kernel);
	free(spec->sandbox.initramfs);
	spec_env_free(&spec->sandbox.env);
	spec_mounts_free(spec->sandbox.mounts, spec->sandbox.mount_count);
	free(spec->sandbox.image);
	free(spec->sandbox.guest_image);
	free(spec->sandbox.snapshot);
	spec_strv_free(spec->sandbox.ports, spec->sandbox.port_count);
	spec_strv_free(spec->sandbox.network_allow, spec->sandbox.network_allow_count);
	spec_strv_free(spec->sandbox.network_deny, spec->sandbox.network_deny_count);
	free(spec->sandbox.dns_server);
	spec_llm_free(&spec->llm);
	free(spec->observe.otlp_endpoint);
	free(spec->observe.service_name);
	free(spec->agent.prompt);
	spec_skills_free(spec->agent.skills, spec->agent.skill_count);
	free(spec->agent.output_file);
	free(spec->agent.messaging.provider_bridge);
	spec_pipeline_free(&spec->pipeline);
	spec_workflow_free(&spec->workflow);
	free(spec);
}

static int spec_resolve_skills_env(struct spec_skill *skills, size_t count,
				   spec_env_lookup_fn lookup, void *ctx, const char *file,
				   struct spec_diagnostics *diag)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < count; i++)
		rc = spec_env_resolve(&skills[i].env, lookup, ctx, file, diag);
	return rc;
}

/* Resolves every env map: the sandbox's, each box's overrides and each MCP skill's. */
static int spec_resolve_all_env(struct spec *spec, const struct spec_load_options *options,
				struct spec_diagnostics *diag)
{
	spec_env_lookup_fn lookup = options && options->env_lookup ? options->env_lookup
								   : spec_no_host_env;
	void *ctx = options ? options->env_ctx : NULL;
	int rc = spec_env_resolve(&spec->sandbox.env, lookup, ctx, spec->file, diag);

	if (rc == 0)
		rc = spec_resolve_skills_env(spec->agent.skills, spec->agent.skill_count, lookup,
					     ctx, spec->file, diag);
	for (size_t i = 0; rc == 0 && i < spec->pipeline.box_count; i++) {
		struct spec_box *box = &spec->pipeline.boxes[i];

		rc = spec_env_resolve(&box->sandbox.env, lookup, ctx, spec->file, diag);
		if (rc == 0)
			rc = spec_resolve_skills_env(box->skills, box->skill_count, lookup, ctx,
						     spec->file, diag);
	}
	return rc;
}

static void spec_report_out_of_memory(const char *file, struct spec_diagnostics *diag)
{
	spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, file, (struct spec_pos){ 0, 0 },
			     "free some memory and retry", "out of memory while loading the spec");
}

struct spec *spec_parse_buffer(const char *data, size_t size, const char *file_name,
			       const struct spec_load_options *options,
			       struct spec_diagnostics *diag)
{
	struct spec_diagnostics local;
	struct spec_diagnostics *sink = diag ? diag : &local;
	struct spec_walk walk = { .file = file_name ? file_name : "<spec>", .diag = sink };
	struct spec_node *root;
	struct spec *spec = NULL;
	size_t errors_before, first_item;

	if (!diag)
		spec_diagnostics_init(&local);
	errors_before = sink->error_count;
	first_item = sink->count;
	root = spec_tree_parse(data, size, options ? options->format : SPEC_FORMAT_AUTO, walk.file,
			       sink);
	if (!root) {
		if (sink->error_count == errors_before)
			spec_report_out_of_memory(walk.file, sink);
		goto out;
	}
	spec = spec_from_tree(&walk, root);
	spec_node_free(root);
	if (spec && spec_validate(&walk) == 0 && !walk.out_of_memory &&
	    sink->error_count == errors_before &&
	    spec_resolve_all_env(spec, options, sink) < 0)
		walk.out_of_memory = true;
	if (!spec || walk.out_of_memory)
		spec_report_out_of_memory(walk.file, sink);
	if (sink->error_count != errors_before) {
		spec_free(spec);
		spec = NULL;
	}
out:
	spec_diagnostics_sort(sink, first_item);
	if (!diag)
		spec_diagnostics_free(&local);
	return spec;
}

/* Reads a whole regular file of at most SPEC_MAX_FILE_BYTES; returns -errno. */
static int spec_read_file(const char *path, char **data, size_t *size)
{
	FILE *file = fopen(path, "rb");
	struct stat info;
	int rc = 0;

	if (!file)
		return -errno;
	if (fstat(fileno(file), &info) < 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(info.st_mode) || (size_t)info.st_size > SPEC_MAX_FILE_BYTES) {
		rc = S_ISREG(info.st_mode) ? -EFBIG : S_ISDIR(info.st_mode) ? -EISDIR : -EINVAL;
		goto out;
	}
	*data = malloc((size_t)info.st_size + 1);
	if (!*data) {
		rc = -ENOMEM;
		goto out;
	}
	*size = fread(*data, 1, (size_t)info.st_size, file);
	(*data)[*size] = '\0';
	if (ferror(file)) {
		rc = -EIO;
		free(*data);
		*data = NULL;
	}
out:
	fclose(file);
	return rc;
}

struct spec *spec_load_file_with(const char *path, const struct spec_load_options *options,
				 struct spec_diagnostics *diag)
{
	char *data = NULL;
	size_t size = 0;
	struct spec *spec;
	int rc = spec_read_file(path, &data, &size);

	if (rc < 0) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, path, (struct spec_pos){ 0, 0 },
				     rc == -EFBIG ? "a spec is at most 4 MiB; split it"
						  : "check the path given to --file",
				     "cannot read the spec: %s", strerror(-rc));
		return NULL;
	}
	spec = spec_parse_buffer(data, size, path, options, diag);
	free(data);
	return spec;
}

struct spec *spec_load_file(const char *path, struct spec_diagnostics *diag)
{
	return spec_load_file_with(path, NULL, diag);
}
