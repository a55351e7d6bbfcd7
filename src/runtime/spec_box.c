/*
 * Effective settings of a pipeline box: a box may override a few sandbox fields and the llm,
 * and everything it leaves out comes from the spec. Kept as small lookups over the parsed spec
 * (no copies) so the pipeline runner and `inspect` agree on one rule for the merge. The box's
 * env and mounts are separate lists the runner applies on top of the spec's.
 */
#include "runtime/spec_internal.h"

void spec_box_resources(const struct spec *spec, const struct spec_box *box,
			struct spec_box_resources *out)
{
	const struct spec_box_sandbox *own = &box->sandbox;
	bool has = box->has_sandbox;

	out->memory_mb = has && own->has_memory_mb ? own->memory_mb : spec->sandbox.memory_mb;
	out->vcpus = has && own->has_vcpus ? own->vcpus : spec->sandbox.vcpus;
	out->network = has && own->has_network ? own->network : spec->sandbox.network;
	out->snapshot = has && own->snapshot ? own->snapshot : spec->sandbox.snapshot;
}

const struct spec_llm *spec_box_llm(const struct spec *spec, const struct spec_box *box)
{
	if (box->has_llm)
		return &box->llm;
	return spec->has_llm ? &spec->llm : NULL;
}
