/*
 * Which optional features a spec uses, and a check against what the runtime supports.
 *
 * The spec format is ahead of the runtime: mounts, images, snapshots, service mode and more
 * parse and validate before their machinery exists. Rather than failing deep inside a run, the
 * runtime passes the set it supports and gets one positioned "not supported yet" error per
 * missing feature, at the line where the spec first uses it.
 */
#include "runtime/spec_internal.h"

static const char *const spec_feature_names[SPEC_FEATURE_COUNT] = {
	[SPEC_FEATURE_MOUNTS] = "mounts",
	[SPEC_FEATURE_IMAGE] = "sandbox.image (OCI root filesystem)",
	[SPEC_FEATURE_GUEST_IMAGE] = "sandbox.guest_image (OCI guest image)",
	[SPEC_FEATURE_NETWORK] = "network",
	[SPEC_FEATURE_SNAPSHOT] = "snapshot",
	[SPEC_FEATURE_SERVICE_MODE] = "mode: service",
	[SPEC_FEATURE_INTERACTIVE_MODE] = "mode: interactive",
	[SPEC_FEATURE_MESSAGING] = "messaging",
	[SPEC_FEATURE_CREDENTIAL_PROXY] = "credential_proxy",
	[SPEC_FEATURE_OBSERVE] = "observe",
	[SPEC_FEATURE_SKILL_OCI] = "OCI skills",
	[SPEC_FEATURE_SKILL_MCP] = "MCP skills",
	[SPEC_FEATURE_SKILL_REMOTE] = "remote skills",
};

const char *spec_feature_name(enum spec_feature feature)
{
	return feature < SPEC_FEATURE_COUNT ? spec_feature_names[feature] : "unknown feature";
}

uint32_t spec_features_required(const struct spec *spec)
{
	return spec->features;
}

size_t spec_check_supported(const struct spec *spec, uint32_t supported,
			    struct spec_diagnostics *diag)
{
	uint32_t missing = spec->features & ~supported;
	size_t count = 0;

	for (unsigned feature = 0; feature < SPEC_FEATURE_COUNT; feature++) {
		if (!(missing & SPEC_FEATURE_BIT(feature)))
			continue;
		count++;
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, spec->file, spec->feature_pos[feature],
				     "remove it from the spec to run now; it is accepted by "
				     "`voidbox validate` but this build cannot run it yet",
				     "%s is not supported yet", spec_feature_names[feature]);
	}
	return count;
}
