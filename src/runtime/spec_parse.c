/*
 * The schema walk: one function per spec section, each listing its known keys, applying its
 * defaults first and then reading the fields the document sets.
 *
 * Only single-field rules live here (types, ranges, enums, required keys, absolute guest
 * paths); rules that relate fields to each other are in spec_validate.c. Every struct gets the
 * position of the node it came from, and features whose machinery may be missing record where
 * they are first used, so a later "not supported yet" error points at the right line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec_internal.h"

#define SPEC_PATH_MAX 256

static const char *const spec_kind_names[] = { "agent", "pipeline", "workflow", "sandbox" };
static const char *const spec_sandbox_mode_names[] = { "auto", "mock", "local" };
static const char *const spec_mount_mode_names[] = { "ro", "rw" };
static const char *const spec_llm_provider_names[] = { "claude", "claude-personal", "codex",
							"ollama", "lm-studio", "custom" };
static const char *const spec_agent_mode_names[] = { "task", "service", "interactive" };
static const char *const spec_step_mode_names[] = { "task", "service" };
static const char *const spec_skill_type_names[] = { "agent", "file", "remote", "cli",
						      "mcp", "oci", "inline" };
static const char *const spec_stage_type_names[] = { "box", "fan_out" };

const char *spec_kind_name(enum spec_kind kind)
{
	return spec_kind_names[kind];
}

const char *spec_sandbox_mode_name(enum spec_sandbox_mode mode)
{
	return spec_sandbox_mode_names[mode];
}

const char *spec_mount_mode_name(enum spec_mount_mode mode)
{
	return spec_mount_mode_names[mode];
}

const char *spec_llm_provider_name(enum spec_llm_provider provider)
{
	return spec_llm_provider_names[provider];
}

const char *spec_agent_mode_name(enum spec_agent_mode mode)
{
	return spec_agent_mode_names[mode];
}

const char *spec_step_mode_name(enum spec_step_mode mode)
{
	return spec_step_mode_names[mode];
}

const char *spec_skill_type_name(enum spec_skill_type type)
{
	return spec_skill_type_names[type];
}

const char *spec_stage_type_name(enum spec_stage_type type)
{
	return spec_stage_type_names[type];
}

/* Allocates count zeroed elements for a list the walk fills; count 0 gives NULL. */
static void *spec_walk_calloc(struct spec_walk *walk, size_t count, size_t size)
{
	void *items;

	if (!count)
		return NULL;
	items = calloc(count, size);
	if (!items)
		walk->out_of_memory = true;
	return items;
}

/* Returns the list under key as a sequence node, NULL when absent or wrong (reported). */
static const struct spec_node *spec_walk_list(struct spec_walk *walk,
					      const struct spec_node *map, const char *path,
					      const char *key)
{
	const struct spec_node *node = spec_walk_field(map, key);
	char field[SPEC_PATH_MAX];

	if (!node)
		return NULL;
	spec_format(field, sizeof(field), "%s.%s", path, key);
	return spec_walk_expect(walk, node, field, SPEC_NODE_SEQ) ? node : NULL;
}

static void spec_walk_require(struct spec_walk *walk, const struct spec_node *map,
			      const char *path, const char *key, const char *hint)
{
	if (!spec_walk_field(map, key))
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, map->pos, hint,
				 "%s needs '%s'", path, key);
}

static void spec_walk_absolute_path(struct spec_walk *walk, const struct spec_node *map,
				    const char *path, const char *key, const char *value)
{
	if (value && value[0] != '/')
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, spec_walk_field(map, key)->pos,
				 "write an absolute guest path such as /workspace/data",
				 "%s.%s must be an absolute path, not '%s'", path, key, value);
}

/* ---- env and mounts ----------------------------------------------------------------------- */

static void spec_walk_env_var(struct spec_walk *walk, const struct spec_node *key,
			      const struct spec_node *value, const char *path,
			      struct spec_env_var *var)
{
	var->pos = key->pos;
	if (!key->text[0] || strchr(key->text, '=')) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, key->pos,
				 "use a name of letters, digits and underscores",
				 "%s has an invalid variable name '%s'", path, key->text);
		return;
	}
	var->name = spec_walk_strdup(walk, key->text);
	if (spec_node_is_null(value) || (value->type == SPEC_NODE_SCALAR && !value->text[0])) {
		var->copy_from_host = true;
		var->value = spec_walk_strdup(walk, "");
		return;
	}
	if (value->type != SPEC_NODE_SCALAR) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, value->pos,
				 "write a string, or \"\" to copy the host's value",
				 "%s.%s must be a single value, not %s", path, key->text,
				 spec_node_type_name(value));
		return;
	}
	var->value = spec_walk_strdup(walk, value->text);
}

static void spec_walk_env(struct spec_walk *walk, const struct spec_node *map, const char *path,
			  struct spec_env *env)
{
	const struct spec_node *node = spec_walk_field(map, "env");
	char field[SPEC_PATH_MAX];

	if (!node)
		return;
	spec_format(field, sizeof(field), "%s.env", path);
	if (!spec_walk_expect(walk, node, field, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, field, NULL, 0);
	env->vars = spec_walk_calloc(walk, node->count, sizeof(*env->vars));
	if (!env->vars)
		return;
	env->count = node->count;
	for (size_t i = 0; i < node->count; i++)
		spec_walk_env_var(walk, node->keys[i], node->values[i], field, &env->vars[i]);
}

static void spec_walk_mount(struct spec_walk *walk, const struct spec_node *node,
			    const char *path, struct spec_mount *mount)
{
	static const char *const keys[] = { "host", "guest", "mode" };
	int mode = SPEC_MOUNT_MODE_RO;

	mount->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_require(walk, node, path, "host", "add `host: ./dir` (the host directory)");
	spec_walk_require(walk, node, path, "guest", "add `guest: /workspace/dir`");
	spec_walk_string(walk, node, path, "host", &mount->host);
	spec_walk_string(walk, node, path, "guest", &mount->guest);
	spec_walk_absolute_path(walk, node, path, "guest", mount->guest);
	spec_walk_enum(walk, node, path, "mode", spec_mount_mode_names,
		       SPEC_ARRAY_SIZE(spec_mount_mode_names), &mode);
	mount->mode = (enum spec_mount_mode)mode;
}

static void spec_walk_mounts(struct spec_walk *walk, const struct spec_node *map,
			     const char *path, struct spec_mount **mounts, size_t *count)
{
	const struct spec_node *list = spec_walk_list(walk, map, path, "mounts");

	if (!list || !list->count)
		return;
	spec_walk_note_feature(walk, SPEC_FEATURE_MOUNTS, list->pos);
	*mounts = spec_walk_calloc(walk, list->count, sizeof(**mounts));
	if (!*mounts)
		return;
	*count = list->count;
	for (size_t i = 0; i < list->count; i++) {
		char item_path[SPEC_PATH_MAX];

		spec_format(item_path, sizeof(item_path), "%s.mounts[%zu]", path, i);
		spec_walk_mount(walk, list->values[i], item_path, &(*mounts)[i]);
	}
}

/* ---- sandbox, llm, observe ---------------------------------------------------------------- */

static void spec_walk_sandbox_features(struct spec_walk *walk, const struct spec_node *node,
				       const struct spec_sandbox *sandbox)
{
	if (sandbox->network)
		spec_walk_note_feature(walk, SPEC_FEATURE_NETWORK,
				       spec_node_map_get(node, "network")->pos);
	if (sandbox->image)
		spec_walk_note_feature(walk, SPEC_FEATURE_IMAGE, spec_node_map_get(node, "image")->pos);
	if (sandbox->guest_image && sandbox->guest_image[0])
		spec_walk_note_feature(walk, SPEC_FEATURE_GUEST_IMAGE,
				       spec_node_map_get(node, "guest_image")->pos);
	if (sandbox->snapshot)
		spec_walk_note_feature(walk, SPEC_FEATURE_SNAPSHOT,
				       spec_node_map_get(node, "snapshot")->pos);
}

/* The network's shape: only meaningful with network: true, so refused without it. */
static void spec_walk_sandbox_network(struct spec_walk *walk, const struct spec_node *node,
				      const char *path, struct spec_sandbox *sandbox)
{
	static const char *const keys[] = { "ports", "network_allow", "network_deny",
					     "dns_server" };

	spec_walk_string_list(walk, node, path, "ports", &sandbox->ports, &sandbox->port_count,
			      NULL);
	spec_walk_string_list(walk, node, path, "network_allow", &sandbox->network_allow,
			      &sandbox->network_allow_count, NULL);
	spec_walk_string_list(walk, node, path, "network_deny", &sandbox->network_deny,
			      &sandbox->network_deny_count, NULL);
	spec_walk_string(walk, node, path, "dns_server", &sandbox->dns_server);
	for (size_t i = 0; i < SPEC_ARRAY_SIZE(keys) && !sandbox->network; i++) {
		const struct spec_node *field = spec_walk_field(node, keys[i]);

		if (field)
			spec_walk_report(walk, SPEC_SEVERITY_ERROR, field->pos,
					 "add 'network: true' to the sandbox, or drop the field",
					 "%s.%s needs %s.network: true", path, keys[i], path);
	}
}

static void spec_walk_sandbox(struct spec_walk *walk, const struct spec_node *node,
			      struct spec_sandbox *sandbox)
{
	static const char *const keys[] = { "mode",    "kernel", "initramfs", "memory_mb",
					     "vcpus",   "network", "env",       "mounts",
					     "image",   "guest_image", "snapshot", "ports",
					     "network_allow", "network_deny", "dns_server" };
	const char *path = "sandbox";
	int mode = SPEC_SANDBOX_MODE_AUTO;

	sandbox->memory_mb = SPEC_DEFAULT_MEMORY_MB;
	sandbox->vcpus = SPEC_DEFAULT_VCPUS;
	if (!node)
		return;
	sandbox->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_enum(walk, node, path, "mode", spec_sandbox_mode_names,
		       SPEC_ARRAY_SIZE(spec_sandbox_mode_names), &mode);
	sandbox->mode = (enum spec_sandbox_mode)mode;
	spec_walk_string(walk, node, path, "kernel", &sandbox->kernel);
	spec_walk_string(walk, node, path, "initramfs", &sandbox->initramfs);
	spec_walk_uint(walk, node, path, "memory_mb", SPEC_MAX_MEMORY_MB, &sandbox->memory_mb);
	spec_walk_uint(walk, node, path, "vcpus", SPEC_MAX_VCPUS, &sandbox->vcpus);
	spec_walk_bool(walk, node, path, "network", &sandbox->network);
	spec_walk_env(walk, node, path, &sandbox->env);
	spec_walk_mounts(walk, node, path, &sandbox->mounts, &sandbox->mount_count);
	spec_walk_string(walk, node, path, "image", &sandbox->image);
	spec_walk_string(walk, node, path, "guest_image", &sandbox->guest_image);
	spec_walk_string(walk, node, path, "snapshot", &sandbox->snapshot);
	spec_walk_sandbox_network(walk, node, path, sandbox);
	spec_walk_sandbox_features(walk, node, sandbox);
}

static void spec_walk_llm(struct spec_walk *walk, const struct spec_node *node, const char *path,
			  struct spec_llm *llm)
{
	static const char *const keys[] = { "provider", "model", "base_url", "api_key_env",
					     "credential_proxy" };
	int provider = SPEC_LLM_PROVIDER_CLAUDE;

	llm->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_enum(walk, node, path, "provider", spec_llm_provider_names,
		       SPEC_ARRAY_SIZE(spec_llm_provider_names), &provider);
	llm->provider = (enum spec_llm_provider)provider;
	spec_walk_string(walk, node, path, "model", &llm->model);
	spec_walk_string(walk, node, path, "base_url", &llm->base_url);
	spec_walk_string(walk, node, path, "api_key_env", &llm->api_key_env);
	if (spec_walk_bool(walk, node, path, "credential_proxy", &llm->credential_proxy) > 0)
		llm->credential_proxy_pos = spec_node_map_get(node, "credential_proxy")->pos;
	if (llm->credential_proxy)
		spec_walk_note_feature(walk, SPEC_FEATURE_CREDENTIAL_PROXY, llm->credential_proxy_pos);
	if (!llm->model && llm->provider == SPEC_LLM_PROVIDER_OLLAMA)
		llm->model = spec_walk_strdup(walk, SPEC_DEFAULT_OLLAMA_MODEL);
}

static void spec_walk_observe(struct spec_walk *walk, const struct spec_node *node,
			      struct spec_observe *observe)
{
	static const char *const keys[] = { "traces",	     "metrics",	     "logs",
					     "otlp_endpoint", "service_name", "telemetry_buffer_size" };
	const char *path = "observe";

	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_note_feature(walk, SPEC_FEATURE_OBSERVE, node->pos);
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_bool(walk, node, path, "traces", &observe->traces);
	spec_walk_bool(walk, node, path, "metrics", &observe->metrics);
	spec_walk_bool(walk, node, path, "logs", &observe->logs);
	spec_walk_string(walk, node, path, "otlp_endpoint", &observe->otlp_endpoint);
	spec_walk_string(walk, node, path, "service_name", &observe->service_name);
	observe->has_telemetry_buffer_size =
		spec_walk_uint(walk, node, path, "telemetry_buffer_size", UINT32_MAX,
			       &observe->telemetry_buffer_size) > 0;
}

/* ---- skills ------------------------------------------------------------------------------- */

static void spec_walk_skill_string(struct spec_walk *walk, const struct spec_node *node,
				   const char *path, struct spec_skill *skill)
{
	static const char *const string_types[] = { "agent", "file", "remote", "cli", "mcp" };
	const char *colon = strchr(node->text, ':');
	size_t type_len = colon ? (size_t)(colon - node->text) : 0;
	const char *hint = "write \"<type>:<value>\" with type agent, file, remote, cli or mcp, "
			   "e.g. \"agent:claude-code\"";

	for (size_t i = 0; colon && i < SPEC_ARRAY_SIZE(string_types); i++) {
		if (strlen(string_types[i]) == type_len &&
		    strncmp(node->text, string_types[i], type_len) == 0 && colon[1]) {
			skill->type = (enum spec_skill_type)i;
			skill->value = spec_walk_strdup(walk, colon + 1);
			break;
		}
	}
	if (!skill->value) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, hint,
				 "%s '%s' is not a known skill", path, node->text);
		return;
	}
	if (skill->type == SPEC_SKILL_REMOTE && !strchr(skill->value, '/'))
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos,
				 "write remote:<owner>/<repo>/<skill> or remote:<owner>/<repo>",
				 "%s '%s' does not name a repository", path, node->text);
	if (skill->type == SPEC_SKILL_REMOTE)
		spec_walk_note_feature(walk, SPEC_FEATURE_SKILL_REMOTE, node->pos);
	if (skill->type == SPEC_SKILL_MCP)
		spec_walk_note_feature(walk, SPEC_FEATURE_SKILL_MCP, node->pos);
}

static void spec_walk_skill_oci(struct spec_walk *walk, const struct spec_node *node,
				const char *path, struct spec_skill *skill)
{
	static const char *const keys[] = { "image", "mount", "readonly" };

	skill->type = SPEC_SKILL_OCI;
	skill->readonly = true;
	spec_walk_note_feature(walk, SPEC_FEATURE_SKILL_OCI, node->pos);
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_require(walk, node, path, "mount", "add `mount: /skills/<name>`");
	spec_walk_string(walk, node, path, "image", &skill->image);
	spec_walk_string(walk, node, path, "mount", &skill->mount);
	spec_walk_absolute_path(walk, node, path, "mount", skill->mount);
	spec_walk_bool(walk, node, path, "readonly", &skill->readonly);
}

static void spec_walk_skill_mcp(struct spec_walk *walk, const struct spec_node *node,
				const char *path, struct spec_skill *skill)
{
	static const char *const keys[] = { "command", "args", "env" };

	skill->type = SPEC_SKILL_MCP;
	spec_walk_note_feature(walk, SPEC_FEATURE_SKILL_MCP, node->pos);
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_string(walk, node, path, "command", &skill->command);
	spec_walk_string_list(walk, node, path, "args", &skill->args, &skill->arg_count, NULL);
	spec_walk_env(walk, node, path, &skill->env);
}

static void spec_walk_skill_inline(struct spec_walk *walk, const struct spec_node *node,
				   const char *path, struct spec_skill *skill)
{
	static const char *const keys[] = { "name", "content" };

	skill->type = SPEC_SKILL_INLINE;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_require(walk, node, path, "name", "add `name: <skill name>`");
	spec_walk_require(walk, node, path, "content", "add `content: <markdown text>`");
	spec_walk_string(walk, node, path, "name", &skill->name);
	spec_walk_string(walk, node, path, "content", &skill->content);
}

static void spec_walk_skill(struct spec_walk *walk, const struct spec_node *node,
			    const char *path, struct spec_skill *skill)
{
	skill->pos = node->pos;
	if (node->type == SPEC_NODE_SCALAR)
		spec_walk_skill_string(walk, node, path, skill);
	else if (node->type != SPEC_NODE_MAP)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos,
				 "write \"agent:claude-code\" or an {image, mount} mapping",
				 "%s must be a string or a mapping, not %s", path,
				 spec_node_type_name(node));
	else if (spec_node_map_get(node, "image"))
		spec_walk_skill_oci(walk, node, path, skill);
	else if (spec_node_map_get(node, "command"))
		spec_walk_skill_mcp(walk, node, path, skill);
	else if (spec_node_map_get(node, "content") || spec_node_map_get(node, "name"))
		spec_walk_skill_inline(walk, node, path, skill);
	else
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos,
				 "give `image` (OCI skill), `command` (MCP server) or `name` and "
				 "`content` (inline skill)",
				 "%s is not a skill form voidbox knows", path);
}

static void spec_walk_skills(struct spec_walk *walk, const struct spec_node *map,
			     const char *path, struct spec_skill **skills, size_t *count)
{
	const struct spec_node *list = spec_walk_list(walk, map, path, "skills");

	if (!list || !list->count)
		return;
	*skills = spec_walk_calloc(walk, list->count, sizeof(**skills));
	if (!*skills)
		return;
	*count = list->count;
	for (size_t i = 0; i < list->count; i++) {
		char item_path[SPEC_PATH_MAX];

		spec_format(item_path, sizeof(item_path), "%s.skills[%zu]", path, i);
		spec_walk_skill(walk, list->values[i], item_path, &(*skills)[i]);
	}
}

/* ---- agent -------------------------------------------------------------------------------- */

static void spec_walk_messaging(struct spec_walk *walk, const struct spec_node *node,
				const char *path, struct spec_messaging *messaging)
{
	static const char *const keys[] = { "enabled", "provider_bridge" };

	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_bool(walk, node, path, "enabled", &messaging->enabled);
	spec_walk_string(walk, node, path, "provider_bridge", &messaging->provider_bridge);
	if (messaging->enabled)
		spec_walk_note_feature(walk, SPEC_FEATURE_MESSAGING, node->pos);
}

static void spec_walk_agent_mode(struct spec_walk *walk, const struct spec_node *node,
				 struct spec_agent *agent)
{
	int mode = SPEC_AGENT_MODE_TASK;

	if (spec_walk_enum(walk, node, "agent", "mode", spec_agent_mode_names,
			   SPEC_ARRAY_SIZE(spec_agent_mode_names), &mode) <= 0)
		return;
	agent->mode = (enum spec_agent_mode)mode;
	agent->mode_pos = spec_node_map_get(node, "mode")->pos;
	if (agent->mode == SPEC_AGENT_MODE_SERVICE)
		spec_walk_note_feature(walk, SPEC_FEATURE_SERVICE_MODE, agent->mode_pos);
	if (agent->mode == SPEC_AGENT_MODE_INTERACTIVE)
		spec_walk_note_feature(walk, SPEC_FEATURE_INTERACTIVE_MODE, agent->mode_pos);
}

static void spec_walk_agent(struct spec_walk *walk, const struct spec_node *node,
			    struct spec_agent *agent)
{
	static const char *const keys[] = { "prompt",	   "skills",	"timeout_secs",
					     "output_file", "messaging", "mode" };
	const char *path = "agent";
	const struct spec_node *messaging;

	agent->pos = node->pos;
	agent->output_file = spec_walk_strdup(walk, SPEC_DEFAULT_OUTPUT_FILE);
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	if (spec_walk_string(walk, node, path, "prompt", &agent->prompt) > 0)
		agent->prompt_pos = spec_node_map_get(node, "prompt")->pos;
	spec_walk_skills(walk, node, path, &agent->skills, &agent->skill_count);
	if (spec_walk_uint(walk, node, path, "timeout_secs", UINT32_MAX, &agent->timeout_secs) > 0) {
		agent->has_timeout_secs = true;
		agent->timeout_pos = spec_node_map_get(node, "timeout_secs")->pos;
	}
	agent->has_output_file =
		spec_walk_string(walk, node, path, "output_file", &agent->output_file) > 0;
	spec_walk_absolute_path(walk, node, path, "output_file",
				agent->has_output_file ? agent->output_file : NULL);
	messaging = spec_walk_field(node, "messaging");
	if (messaging) {
		agent->has_messaging = true;
		spec_walk_messaging(walk, messaging, "agent.messaging", &agent->messaging);
	}
	spec_walk_agent_mode(walk, node, agent);
}

/* ---- pipeline ----------------------------------------------------------------------------- */

static void spec_walk_box_sandbox(struct spec_walk *walk, const struct spec_node *node,
				  const char *path, struct spec_box_sandbox *sandbox)
{
	static const char *const keys[] = { "memory_mb", "vcpus",  "network",
					     "env",	  "mounts", "snapshot" };

	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	sandbox->has_memory_mb = spec_walk_uint(walk, node, path, "memory_mb", SPEC_MAX_MEMORY_MB,
						&sandbox->memory_mb) > 0;
	sandbox->has_vcpus =
		spec_walk_uint(walk, node, path, "vcpus", SPEC_MAX_VCPUS, &sandbox->vcpus) > 0;
	sandbox->has_network = spec_walk_bool(walk, node, path, "network", &sandbox->network) > 0;
	if (sandbox->network)
		spec_walk_note_feature(walk, SPEC_FEATURE_NETWORK,
				       spec_node_map_get(node, "network")->pos);
	spec_walk_env(walk, node, path, &sandbox->env);
	spec_walk_mounts(walk, node, path, &sandbox->mounts, &sandbox->mount_count);
	if (spec_walk_string(walk, node, path, "snapshot", &sandbox->snapshot) > 0)
		spec_walk_note_feature(walk, SPEC_FEATURE_SNAPSHOT,
				       spec_node_map_get(node, "snapshot")->pos);
}

/* Reads outputs ({name, guest}) or inputs ({from, guest}): same shape, different first key. */
static void spec_walk_box_port(struct spec_walk *walk, const struct spec_node *node,
			       const char *path, const char *first_key, const char *default_guest,
			       char **first, char **guest, struct spec_pos *pos)
{
	const char *keys[] = { first_key, "guest" };
	char hint[SPEC_PATH_MAX];

	*pos = node->pos;
	*guest = spec_walk_strdup(walk, default_guest);
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_format(hint, sizeof(hint), "add `%s: <name>`", first_key);
	spec_walk_require(walk, node, path, first_key, hint);
	spec_walk_string(walk, node, path, first_key, first);
	spec_walk_string(walk, node, path, "guest", guest);
	spec_walk_absolute_path(walk, node, path, "guest", *guest);
}

static void spec_walk_box_outputs(struct spec_walk *walk, const struct spec_node *node,
				  const char *path, struct spec_box *box)
{
	const struct spec_node *list = spec_walk_list(walk, node, path, "outputs");

	if (!list || !(box->outputs = spec_walk_calloc(walk, list->count, sizeof(*box->outputs))))
		return;
	box->output_count = list->count;
	for (size_t i = 0; i < list->count; i++) {
		char item_path[SPEC_PATH_MAX];
		struct spec_box_output *output = &box->outputs[i];

		spec_format(item_path, sizeof(item_path), "%s.outputs[%zu]", path, i);
		spec_walk_box_port(walk, list->values[i], item_path, "name",
				   SPEC_DEFAULT_BOX_OUTPUT_GUEST, &output->name, &output->guest,
				   &output->pos);
	}
}

static void spec_walk_box_inputs(struct spec_walk *walk, const struct spec_node *node,
				 const char *path, struct spec_box *box)
{
	const struct spec_node *list = spec_walk_list(walk, node, path, "inputs");

	if (!list || !(box->inputs = spec_walk_calloc(walk, list->count, sizeof(*box->inputs))))
		return;
	box->input_count = list->count;
	for (size_t i = 0; i < list->count; i++) {
		char item_path[SPEC_PATH_MAX];
		struct spec_box_input *input = &box->inputs[i];

		spec_format(item_path, sizeof(item_path), "%s.inputs[%zu]", path, i);
		spec_walk_box_port(walk, list->values[i], item_path, "from",
				   SPEC_DEFAULT_BOX_INPUT_GUEST, &input->from, &input->guest,
				   &input->pos);
	}
}

static void spec_walk_box(struct spec_walk *walk, const struct spec_node *node, const char *path,
			  struct spec_box *box)
{
	static const char *const keys[] = { "name",	    "prompt",  "skills",  "llm",
					     "timeout_secs", "sandbox", "outputs", "inputs",
					     "messaging" };
	const struct spec_node *child;
	char child_path[SPEC_PATH_MAX];

	box->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_require(walk, node, path, "name", "add `name: <box name>`");
	spec_walk_require(walk, node, path, "prompt", "add `prompt: <what this box should do>`");
	spec_walk_string(walk, node, path, "name", &box->name);
	spec_walk_string(walk, node, path, "prompt", &box->prompt);
	spec_walk_skills(walk, node, path, &box->skills, &box->skill_count);
	child = spec_walk_field(node, "llm");
	if (child) {
		box->has_llm = true;
		spec_format(child_path, sizeof(child_path), "%s.llm", path);
		spec_walk_llm(walk, child, child_path, &box->llm);
	}
	box->has_timeout_secs = spec_walk_uint(walk, node, path, "timeout_secs", UINT32_MAX,
					       &box->timeout_secs) > 0;
	child = spec_walk_field(node, "sandbox");
	if (child) {
		box->has_sandbox = true;
		spec_format(child_path, sizeof(child_path), "%s.sandbox", path);
		spec_walk_box_sandbox(walk, child, child_path, &box->sandbox);
	}
	spec_walk_box_outputs(walk, node, path, box);
	spec_walk_box_inputs(walk, node, path, box);
	child = spec_walk_field(node, "messaging");
	if (child) {
		box->has_messaging = true;
		spec_format(child_path, sizeof(child_path), "%s.messaging", path);
		spec_walk_messaging(walk, child, child_path, &box->messaging);
	}
}

/* A stage's type may be left out: `boxes:` makes it a fan_out, `name:` a box stage. */
static void spec_walk_stage_type(struct spec_walk *walk, const struct spec_node *node,
				 const char *path, struct spec_stage *stage)
{
	int type = spec_node_map_get(node, "boxes") ? SPEC_STAGE_FAN_OUT : SPEC_STAGE_BOX;

	spec_walk_enum(walk, node, path, "type", spec_stage_type_names,
		       SPEC_ARRAY_SIZE(spec_stage_type_names), &type);
	stage->type = (enum spec_stage_type)type;
}

static void spec_walk_stage(struct spec_walk *walk, const struct spec_node *node,
			    const char *path, struct spec_stage *stage)
{
	static const char *const box_keys[] = { "type", "name" };
	static const char *const fan_out_keys[] = { "type", "boxes" };
	char *name = NULL;

	stage->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_stage_type(walk, node, path, stage);
	if (stage->type == SPEC_STAGE_FAN_OUT) {
		spec_walk_check_keys(walk, node, path, fan_out_keys, SPEC_ARRAY_SIZE(fan_out_keys));
		spec_walk_require(walk, node, path, "boxes", "add `boxes: [a, b, c]`");
		spec_walk_string_list(walk, node, path, "boxes", &stage->box_names,
				      &stage->box_count, &stage->box_pos);
		return;
	}
	spec_walk_check_keys(walk, node, path, box_keys, SPEC_ARRAY_SIZE(box_keys));
	spec_walk_require(walk, node, path, "name", "add `name: <box name>`");
	if (spec_walk_string(walk, node, path, "name", &name) <= 0)
		return;
	stage->box_names = spec_walk_calloc(walk, 1, sizeof(*stage->box_names));
	stage->box_pos = spec_walk_calloc(walk, 1, sizeof(*stage->box_pos));
	if (!stage->box_names || !stage->box_pos) {
		free(name);
		return;
	}
	stage->box_names[0] = name;
	stage->box_pos[0] = spec_node_map_get(node, "name")->pos;
	stage->box_count = 1;
}

static void spec_walk_pipeline(struct spec_walk *walk, const struct spec_node *node,
			       struct spec_pipeline *pipeline)
{
	static const char *const keys[] = { "boxes", "stages" };
	const char *path = "pipeline";
	const struct spec_node *list;

	pipeline->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	list = spec_walk_list(walk, node, path, "boxes");
	if (list && (pipeline->boxes = spec_walk_calloc(walk, list->count, sizeof(struct spec_box)))) {
		pipeline->box_count = list->count;
		for (size_t i = 0; i < list->count; i++) {
			char item_path[SPEC_PATH_MAX];

			spec_format(item_path, sizeof(item_path), "pipeline.boxes[%zu]", i);
			spec_walk_box(walk, list->values[i], item_path, &pipeline->boxes[i]);
		}
	}
	list = spec_walk_list(walk, node, path, "stages");
	if (list &&
	    (pipeline->stages = spec_walk_calloc(walk, list->count, sizeof(struct spec_stage)))) {
		pipeline->stage_count = list->count;
		for (size_t i = 0; i < list->count; i++) {
			char item_path[SPEC_PATH_MAX];

			spec_format(item_path, sizeof(item_path), "pipeline.stages[%zu]", i);
			spec_walk_stage(walk, list->values[i], item_path, &pipeline->stages[i]);
		}
	}
}

/* ---- workflow ----------------------------------------------------------------------------- */

static void spec_walk_step_run(struct spec_walk *walk, const struct spec_node *node,
			       const char *path, struct spec_step *step)
{
	static const char *const keys[] = { "program", "args", "stdin_from" };

	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_require(walk, node, path, "program", "add `program: <command>`, e.g. `echo`");
	spec_walk_string(walk, node, path, "program", &step->program);
	if (step->program && !step->program[0])
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, spec_node_map_get(node, "program")->pos,
				 "name the command to run, e.g. `program: echo`",
				 "%s.program is empty", path);
	spec_walk_string_list(walk, node, path, "args", &step->args, &step->arg_count, NULL);
	if (spec_walk_string(walk, node, path, "stdin_from", &step->stdin_from) > 0)
		step->stdin_from_pos = spec_node_map_get(node, "stdin_from")->pos;
}

/* depends_on takes a list, or one step name on its own. */
static void spec_walk_step_depends(struct spec_walk *walk, const struct spec_node *node,
				   const char *path, struct spec_step *step)
{
	const struct spec_node *depends = spec_walk_field(node, "depends_on");

	if (!depends)
		return;
	if (depends->type != SPEC_NODE_SCALAR) {
		spec_walk_string_list(walk, node, path, "depends_on", &step->depends_on,
				      &step->depends_count, &step->depends_pos);
		return;
	}
	step->depends_on = spec_walk_calloc(walk, 1, sizeof(*step->depends_on));
	step->depends_pos = spec_walk_calloc(walk, 1, sizeof(*step->depends_pos));
	if (!step->depends_on || !step->depends_pos)
		return;
	step->depends_on[0] = spec_walk_strdup(walk, depends->text);
	step->depends_pos[0] = depends->pos;
	step->depends_count = step->depends_on[0] ? 1 : 0;
}

static void spec_walk_step(struct spec_walk *walk, const struct spec_node *node,
			   const char *path, struct spec_step *step)
{
	static const char *const keys[] = { "name",	    "run",	    "depends_on",
					    "mode",	    "timeout_secs", "output_file" };
	const struct spec_node *run;
	char run_path[SPEC_PATH_MAX];
	int mode = SPEC_STEP_MODE_TASK;

	step->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_require(walk, node, path, "name", "add `name: <step name>`");
	spec_walk_require(walk, node, path, "run", "add `run: {program: echo, args: [hi]}`");
	spec_walk_string(walk, node, path, "name", &step->name);
	run = spec_walk_field(node, "run");
	spec_format(run_path, sizeof(run_path), "%s.run", path);
	if (run)
		spec_walk_step_run(walk, run, run_path, step);
	spec_walk_step_depends(walk, node, path, step);
	if (spec_walk_enum(walk, node, path, "mode", spec_step_mode_names,
			   SPEC_ARRAY_SIZE(spec_step_mode_names), &mode) > 0 &&
	    mode == SPEC_STEP_MODE_SERVICE)
		spec_walk_note_feature(walk, SPEC_FEATURE_SERVICE_MODE,
				       spec_node_map_get(node, "mode")->pos);
	step->mode = (enum spec_step_mode)mode;
	if (spec_walk_string(walk, node, path, "output_file", &step->output_file) > 0)
		step->output_file_pos = spec_node_map_get(node, "output_file")->pos;
	if (spec_walk_uint(walk, node, path, "timeout_secs", UINT32_MAX, &step->timeout_secs) > 0) {
		step->has_timeout_secs = true;
		step->timeout_pos = spec_node_map_get(node, "timeout_secs")->pos;
	}
}

static void spec_walk_workflow(struct spec_walk *walk, const struct spec_node *node,
			       struct spec_workflow *workflow)
{
	static const char *const keys[] = { "steps", "output_step" };
	const char *path = "workflow";
	const struct spec_node *list;

	workflow->pos = node->pos;
	if (!spec_walk_expect(walk, node, path, SPEC_NODE_MAP))
		return;
	spec_walk_check_keys(walk, node, path, keys, SPEC_ARRAY_SIZE(keys));
	if (spec_walk_string(walk, node, path, "output_step", &workflow->output_step) > 0)
		workflow->output_step_pos = spec_node_map_get(node, "output_step")->pos;
	list = spec_walk_list(walk, node, path, "steps");
	if (!list || !(workflow->steps = spec_walk_calloc(walk, list->count, sizeof(struct spec_step))))
		return;
	workflow->step_count = list->count;
	for (size_t i = 0; i < list->count; i++) {
		char item_path[SPEC_PATH_MAX];

		spec_format(item_path, sizeof(item_path), "workflow.steps[%zu]", i);
		spec_walk_step(walk, list->values[i], item_path, &workflow->steps[i]);
	}
}

/* ---- top level ---------------------------------------------------------------------------- */

static void spec_walk_header(struct spec_walk *walk, const struct spec_node *root)
{
	struct spec *spec = walk->spec;
	const struct spec_node *node;
	int kind = SPEC_KIND_AGENT;

	spec->api_version = spec_walk_strdup(walk, SPEC_API_VERSION);
	if (spec_walk_string(walk, root, "spec", "api_version", &spec->api_version) > 0 &&
	    strcmp(spec->api_version, SPEC_API_VERSION) != 0)
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, spec_node_map_get(root, "api_version")->pos,
				 "write `api_version: v1`",
				 "api_version '%s' is not supported", spec->api_version);
	spec_walk_require(walk, root, "the spec", "kind",
			  "add `kind: agent` (or pipeline, workflow, sandbox)");
	walk->kind_known = spec_walk_enum(walk, root, "spec", "kind", spec_kind_names,
					  SPEC_ARRAY_SIZE(spec_kind_names), &kind) > 0;
	spec->kind = (enum spec_kind)kind;
	node = spec_node_map_get(root, "kind");
	spec->kind_pos = node ? node->pos : root->pos;
	spec_walk_require(walk, root, "the spec", "name", "add `name: my-run`");
	spec_walk_string(walk, root, "spec", "name", &spec->name);
	if (spec->name && !spec->name[0])
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, spec_node_map_get(root, "name")->pos,
				 "write a short name such as `name: my-run`", "name is empty");
}

static void spec_walk_sections(struct spec_walk *walk, const struct spec_node *root)
{
	struct spec *spec = walk->spec;
	const struct spec_node *node;

	spec_walk_sandbox(walk, spec_walk_field(root, "sandbox"), &spec->sandbox);
	if ((node = spec_walk_field(root, "llm"))) {
		spec->has_llm = true;
		spec_walk_llm(walk, node, "llm", &spec->llm);
	}
	if ((node = spec_walk_field(root, "observe"))) {
		spec->has_observe = true;
		spec_walk_observe(walk, node, &spec->observe);
	}
	if ((node = spec_walk_field(root, "agent"))) {
		spec->has_agent = true;
		spec_walk_agent(walk, node, &spec->agent);
	}
	if ((node = spec_walk_field(root, "pipeline"))) {
		spec->has_pipeline = true;
		spec_walk_pipeline(walk, node, &spec->pipeline);
	}
	if ((node = spec_walk_field(root, "workflow"))) {
		spec->has_workflow = true;
		spec_walk_workflow(walk, node, &spec->workflow);
	}
}

struct spec *spec_from_tree(struct spec_walk *walk, const struct spec_node *root)
{
	static const char *const keys[] = { "api_version", "kind",  "name",	"sandbox", "llm",
					     "observe",	    "agent", "pipeline", "workflow" };

	walk->spec = calloc(1, sizeof(*walk->spec));
	if (!walk->spec)
		return NULL;
	walk->spec->file = strdup(walk->file);
	if (!walk->spec->file)
		walk->out_of_memory = true;
	if (root->type != SPEC_NODE_MAP) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, root->pos,
				 "start the file with `api_version: v1` and `kind: ...` lines",
				 "a spec must be a mapping of keys, not %s", spec_node_type_name(root));
		spec_walk_sandbox(walk, NULL, &walk->spec->sandbox);
		return walk->spec;
	}
	spec_walk_check_keys(walk, root, "the spec", keys, SPEC_ARRAY_SIZE(keys));
	spec_walk_header(walk, root);
	spec_walk_sections(walk, root);
	return walk->spec;
}
