/*
 * Run specs: the YAML/JSON files that say what voidbox runs (agent, pipeline, workflow,
 * sandbox), parsed into typed C structs with every default applied and every rule checked.
 *
 * Loading never stops at the first problem: every finding goes into a diagnostics list with
 * file, line, column and a hint that says what to write instead, so `voidbox validate` shows
 * them all at once. Closed sets are enums; optional numbers carry a `has_` flag because zero
 * is not a neutral value for them. Each named entity keeps its source position so later stages
 * (the planner, the runtime) can point at the spec when they refuse something. Fields whose
 * machinery lands later (mounts, images, snapshots, service mode, ...) parse and validate now;
 * spec_check_supported() turns "the runtime cannot do this yet" into a positioned error.
 */
#ifndef VOIDBOX_RUNTIME_SPEC_H
#define VOIDBOX_RUNTIME_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "vmm/vm.h" /* the VM limits specs are checked against */

#define SPEC_API_VERSION "v1"
#define SPEC_DEFAULT_MEMORY_MB 1024u
#define SPEC_DEFAULT_VCPUS 1u
#define SPEC_DEFAULT_OUTPUT_FILE "/workspace/output.json"
#define SPEC_DEFAULT_BOX_OUTPUT_GUEST "/workspace/output"
#define SPEC_DEFAULT_BOX_INPUT_GUEST "/workspace/input"
#define SPEC_DEFAULT_OLLAMA_MODEL "qwen3-coder:7b"
#define SPEC_MAX_MEMORY_MB VM_MAX_MEMORY_MB
#define SPEC_MAX_VCPUS VM_MAX_VCPUS

/* ---- diagnostics ------------------------------------------------------------------------ */

enum spec_severity {
	SPEC_SEVERITY_WARNING,
	SPEC_SEVERITY_ERROR,
};

/* line and column are 1-based; 0 means "no position known" (see docs/spec-reference.md). */
struct spec_pos {
	unsigned line;
	unsigned column;
};

struct spec_diagnostic {
	enum spec_severity severity;
	char *file;
	struct spec_pos pos;
	char *message;
	char *hint; /* what to write instead; may be NULL */
};

struct spec_diagnostics {
	struct spec_diagnostic *items;
	size_t count;
	size_t capacity;
	size_t error_count;
	size_t warning_count;
};

void spec_diagnostics_init(struct spec_diagnostics *diag);
void spec_diagnostics_free(struct spec_diagnostics *diag);
/* Appends one finding; a NULL diag drops it. Returns -ENOMEM when it cannot record it. */
int spec_diagnostics_add(struct spec_diagnostics *diag, enum spec_severity severity,
			 const char *file, struct spec_pos pos, const char *hint, const char *fmt,
			 ...) __attribute__((format(printf, 6, 7)));
/* Orders items[from..] by line and column, keeping the order of equal positions. */
void spec_diagnostics_sort(struct spec_diagnostics *diag, size_t from);
/* "file:line:col: error: message" lines, each followed by "  hint: ..." when there is one. */
void spec_diagnostics_print(const struct spec_diagnostics *diag, FILE *out);
/* A JSON array of {severity, file, line, column, message, hint}; NULL on allocation failure. */
json_t *spec_diagnostics_to_json(const struct spec_diagnostics *diag);
const char *spec_severity_name(enum spec_severity severity);

/* ---- the spec ---------------------------------------------------------------------------- */

enum spec_kind {
	SPEC_KIND_AGENT,
	SPEC_KIND_PIPELINE,
	SPEC_KIND_WORKFLOW,
	SPEC_KIND_SANDBOX,
};

enum spec_sandbox_mode {
	SPEC_SANDBOX_MODE_AUTO,
	SPEC_SANDBOX_MODE_MOCK,
	SPEC_SANDBOX_MODE_LOCAL,
};

enum spec_mount_mode {
	SPEC_MOUNT_MODE_RO,
	SPEC_MOUNT_MODE_RW,
};

enum spec_llm_provider {
	SPEC_LLM_PROVIDER_CLAUDE,
	SPEC_LLM_PROVIDER_CLAUDE_PERSONAL,
	SPEC_LLM_PROVIDER_CODEX,
	SPEC_LLM_PROVIDER_OLLAMA,
	SPEC_LLM_PROVIDER_LM_STUDIO,
	SPEC_LLM_PROVIDER_CUSTOM,
};

enum spec_agent_mode {
	SPEC_AGENT_MODE_TASK,
	SPEC_AGENT_MODE_SERVICE,
	SPEC_AGENT_MODE_INTERACTIVE,
};

enum spec_step_mode {
	SPEC_STEP_MODE_TASK,
	SPEC_STEP_MODE_SERVICE,
};

enum spec_skill_type {
	SPEC_SKILL_AGENT,  /* "agent:claude-code" */
	SPEC_SKILL_FILE,   /* "file:<host path>" */
	SPEC_SKILL_REMOTE, /* "remote:owner/repo/skill" */
	SPEC_SKILL_CLI,    /* "cli:<bin>" */
	SPEC_SKILL_MCP,    /* "mcp:<cmd>" or {command, args, env} */
	SPEC_SKILL_OCI,    /* {image, mount, readonly} */
	SPEC_SKILL_INLINE, /* {name, content} */
};

enum spec_stage_type {
	SPEC_STAGE_BOX,
	SPEC_STAGE_FAN_OUT,
};

/* A variable from `env:`; copy_from_host marks a "" value before spec_env_resolve(). */
struct spec_env_var {
	char *name;
	char *value;
	bool copy_from_host;
	struct spec_pos pos;
};

struct spec_env {
	struct spec_env_var *vars;
	size_t count;
};

struct spec_mount {
	char *host;
	char *guest;
	enum spec_mount_mode mode;
	struct spec_pos pos;
};

struct spec_sandbox {
	enum spec_sandbox_mode mode;
	char *kernel;	   /* NULL: resolved by the runtime */
	char *initramfs;   /* NULL: resolved by the runtime */
	uint32_t memory_mb;
	uint32_t vcpus;
	bool network;
	struct spec_env env;
	struct spec_mount *mounts;
	size_t mount_count;
	char *image;	   /* OCI base image for the rootfs, NULL when none */
	char *guest_image; /* NULL: default lookup; "" disables the pull */
	char *snapshot;	   /* hash prefix or path, NULL when none */
	/*
	 * With network: true (docs/spec-reference.md): published ports ("HOST:GUEST"), the
	 * egress allow and deny lists (IPv4 CIDRs) and a DNS server ("ADDR:PORT") for 10.0.2.3.
	 * Kept as written; the runtime checks their syntax when it builds the network.
	 */
	char **ports;
	size_t port_count;
	char **network_allow;
	size_t network_allow_count;
	char **network_deny;
	size_t network_deny_count;
	char *dns_server;
	struct spec_pos pos;
};

struct spec_llm {
	enum spec_llm_provider provider;
	char *model;	   /* defaulted for ollama */
	char *base_url;
	char *api_key_env;
	bool credential_proxy;
	struct spec_pos pos;
	struct spec_pos credential_proxy_pos;
};

struct spec_observe {
	bool traces;
	bool metrics;
	bool logs;
	char *otlp_endpoint;
	char *service_name;
	bool has_telemetry_buffer_size;
	uint32_t telemetry_buffer_size;
};

struct spec_skill {
	enum spec_skill_type type;
	char *value;   /* the text after "<type>:" for string forms */
	char *image;   /* oci */
	char *mount;   /* oci */
	bool readonly; /* oci, default true */
	char *command; /* mcp object form */
	char **args;
	size_t arg_count;
	struct spec_env env; /* mcp object form */
	char *name;	     /* inline */
	char *content;	     /* inline */
	struct spec_pos pos;
};

struct spec_messaging {
	bool enabled;
	char *provider_bridge;
};

struct spec_agent {
	char *prompt;
	struct spec_skill *skills;
	size_t skill_count;
	bool has_timeout_secs;
	uint32_t timeout_secs;
	char *output_file;
	bool has_messaging;
	struct spec_messaging messaging;
	enum spec_agent_mode mode;
	bool has_output_file; /* written in the spec, not defaulted */
	struct spec_pos pos;
	struct spec_pos prompt_pos;
	struct spec_pos timeout_pos;
	struct spec_pos mode_pos;
};

/* A pipeline box's sandbox overrides: only the fields a box may change. */
struct spec_box_sandbox {
	bool has_memory_mb;
	uint32_t memory_mb;
	bool has_vcpus;
	uint32_t vcpus;
	bool has_network;
	bool network;
	struct spec_env env;
	struct spec_mount *mounts;
	size_t mount_count;
	char *snapshot;
};

struct spec_box_output {
	char *name;
	char *guest;
	struct spec_pos pos;
};

struct spec_box_input {
	char *from;
	char *guest;
	struct spec_pos pos;
};

struct spec_box {
	char *name;
	char *prompt;
	struct spec_skill *skills;
	size_t skill_count;
	bool has_llm;
	struct spec_llm llm;
	bool has_timeout_secs;
	uint32_t timeout_secs;
	bool has_sandbox;
	struct spec_box_sandbox sandbox;
	struct spec_box_output *outputs;
	size_t output_count;
	struct spec_box_input *inputs;
	size_t input_count;
	bool has_messaging;
	struct spec_messaging messaging;
	struct spec_pos pos;
};

/* A stage names boxes: one for SPEC_STAGE_BOX, several run in parallel for FAN_OUT. */
struct spec_stage {
	enum spec_stage_type type;
	char **box_names;
	size_t box_count;
	size_t *box_indices; /* into spec_pipeline.boxes, filled by validation */
	struct spec_pos pos;
	struct spec_pos *box_pos;
};

struct spec_pipeline {
	struct spec_box *boxes;
	size_t box_count;
	struct spec_stage *stages; /* defaulted to one box stage per box when absent */
	size_t stage_count;
	struct spec_pos pos;
};

struct spec_step {
	char *name;
	char *program;
	char **args;
	size_t arg_count;
	char *stdin_from; /* NULL when none */
	char **depends_on;
	size_t depends_count;
	enum spec_step_mode mode;
	char *output_file; /* a service step's published file; NULL: SPEC_DEFAULT_OUTPUT_FILE */
	struct spec_pos output_file_pos;
	bool has_timeout_secs;
	uint32_t timeout_secs;
	struct spec_pos pos;
	struct spec_pos timeout_pos;
	struct spec_pos stdin_from_pos;
	struct spec_pos *depends_pos;
};

struct spec_workflow {
	struct spec_step *steps;
	size_t step_count;
	char *output_step; /* NULL when none */
	struct spec_pos output_step_pos;
	struct spec_pos pos;
};

/* Features whose machinery may not exist yet; see spec_features_required(). */
enum spec_feature {
	SPEC_FEATURE_MOUNTS,
	SPEC_FEATURE_IMAGE,
	SPEC_FEATURE_GUEST_IMAGE,
	SPEC_FEATURE_NETWORK,
	SPEC_FEATURE_SNAPSHOT,
	SPEC_FEATURE_SERVICE_MODE,
	SPEC_FEATURE_INTERACTIVE_MODE,
	SPEC_FEATURE_MESSAGING,
	SPEC_FEATURE_CREDENTIAL_PROXY,
	SPEC_FEATURE_OBSERVE,
	SPEC_FEATURE_SKILL_OCI,
	SPEC_FEATURE_SKILL_MCP,
	SPEC_FEATURE_SKILL_REMOTE,
	SPEC_FEATURE_COUNT,
};

#define SPEC_FEATURE_BIT(feature) (UINT32_C(1) << (feature))

struct spec {
	char *file;
	char *api_version;
	enum spec_kind kind;
	char *name;
	struct spec_pos kind_pos;
	struct spec_sandbox sandbox;
	bool has_llm;
	struct spec_llm llm;
	bool has_observe;
	struct spec_observe observe;
	bool has_agent;
	struct spec_agent agent;
	bool has_pipeline;
	struct spec_pipeline pipeline;
	bool has_workflow;
	struct spec_workflow workflow;
	/* Where each feature is first used (line 0: unused); filled while parsing. */
	struct spec_pos feature_pos[SPEC_FEATURE_COUNT];
	uint32_t features; /* SPEC_FEATURE_BIT set of features used */
};

/* ---- loading ----------------------------------------------------------------------------- */

enum spec_format {
	SPEC_FORMAT_AUTO, /* by extension, then by content */
	SPEC_FORMAT_YAML,
	SPEC_FORMAT_JSON,
};

/* Returns the value of a host environment variable, or NULL when it is not set. */
typedef const char *(*spec_env_lookup_fn)(const char *name, void *ctx);

struct spec_load_options {
	enum spec_format format;
	/* the host's environment (the CLI passes getenv's); NULL: nothing is set */
	spec_env_lookup_fn env_lookup;
	void *env_ctx;
};

/*
 * Reads, parses, validates and resolves a spec. Returns NULL when any error was found (all of
 * them are in diag); warnings alone do not fail the load. The env of the sandbox and of every
 * box is resolved against the host's environment as options->env_lookup gives it
 * (spec_env_resolve()); spec_load_file, without options, sees an empty one.
 */
struct spec *spec_load_file(const char *path, struct spec_diagnostics *diag);
struct spec *spec_load_file_with(const char *path, const struct spec_load_options *options,
				 struct spec_diagnostics *diag);
/* The same from memory; file_name labels the diagnostics and picks the format under AUTO. */
struct spec *spec_parse_buffer(const char *data, size_t size, const char *file_name,
			       const struct spec_load_options *options,
			       struct spec_diagnostics *diag);
void spec_free(struct spec *spec);

/*
 * Replaces every "" (copy from the host) entry by the host's value from lookup; an entry the
 * host lacks is dropped with a warning. OLLAMA_BASE_URL from the host wins over the spec.
 * Returns 0 or -ENOMEM.
 */
int spec_env_resolve(struct spec_env *env, spec_env_lookup_fn lookup, void *ctx,
		     const char *file, struct spec_diagnostics *diag);

/* ---- features ---------------------------------------------------------------------------- */

uint32_t spec_features_required(const struct spec *spec);
const char *spec_feature_name(enum spec_feature feature);
/*
 * Adds one "not supported yet" error (with the position of first use) for every feature the
 * spec needs outside `supported` (a SPEC_FEATURE_BIT set). Returns the number of such features.
 */
size_t spec_check_supported(const struct spec *spec, uint32_t supported,
			    struct spec_diagnostics *diag);

/* ---- workflow planning ------------------------------------------------------------------- */

struct spec_plan_level {
	size_t *steps; /* indices into spec_workflow.steps, in declaration order */
	size_t count;
};

struct spec_workflow_plan {
	struct spec_plan_level *levels;
	size_t level_count;
};

/*
 * Groups steps by dependency level: level 0 has no dependencies, level N depends only on
 * levels below N. stdin_from counts as a dependency. Returns 0; -ELOOP when the steps form a
 * cycle (then *cycle, if given, receives a malloc'd "a -> b -> a"); -ENOENT when a step names
 * an unknown step; -ENOMEM.
 */
int spec_workflow_plan(const struct spec_workflow *workflow, struct spec_workflow_plan *plan,
		       char **cycle);
void spec_workflow_plan_free(struct spec_workflow_plan *plan);
/* Index of the step called name, or -1. */
long spec_workflow_find_step(const struct spec_workflow *workflow, const char *name);

/* ---- pipeline boxes ---------------------------------------------------------------------- */

/* A box's VM resources: its own overrides where written, the spec's sandbox otherwise. */
struct spec_box_resources {
	uint32_t memory_mb;
	uint32_t vcpus;
	bool network;
	const char *snapshot; /* borrowed from the spec; NULL when none */
};

void spec_box_resources(const struct spec *spec, const struct spec_box *box,
			struct spec_box_resources *out);
/* The box's llm when it has one, else the spec's, else NULL (provider claude by default). */
const struct spec_llm *spec_box_llm(const struct spec *spec, const struct spec_box *box);

/* ---- output ------------------------------------------------------------------------------ */

/* The resolved spec (defaults applied) as JSON for `voidbox inspect --output json`. */
json_t *spec_to_json(const struct spec *spec);

const char *spec_kind_name(enum spec_kind kind);
const char *spec_sandbox_mode_name(enum spec_sandbox_mode mode);
const char *spec_mount_mode_name(enum spec_mount_mode mode);
const char *spec_llm_provider_name(enum spec_llm_provider provider);
const char *spec_agent_mode_name(enum spec_agent_mode mode);
const char *spec_step_mode_name(enum spec_step_mode mode);
const char *spec_skill_type_name(enum spec_skill_type type);
const char *spec_stage_type_name(enum spec_stage_type type);

#endif
