/*
 * Pipelines: `kind: pipeline` specs run one fresh box (one VM) per pipeline box, stage by
 * stage. A box stage hands the agent the previous stage's carry (written to
 * /workspace/input.json and inlined into the prompt); the carry after it is the agent's output
 * file when it wrote one, else its result text. A fan_out stage runs its boxes in parallel,
 * at most max_parallel VMs at once, each with the same carry, and merges their result texts
 * into a JSON array as the next carry. The first stage with a failing box stops the run: the
 * report names it, and boxes of later stages appear as not run.
 */
#ifndef VOIDBOX_RUNTIME_PIPELINE_H
#define VOIDBOX_RUNTIME_PIPELINE_H

#include <stddef.h>

#include "runtime/agent.h"
#include "runtime/run_report.h"
#include "runtime/spec.h"

#define PIPELINE_DEFAULT_MAX_PARALLEL_VMS 4u
#define PIPELINE_ENV_MAX_PARALLEL_VMS "VOIDBOX_MAX_PARALLEL_VMS"

struct pipeline_options {
	/* the same fields as an agent run: input, mode override, host env, mock hooks */
	struct agent_options agent;
	/* VMs a fan_out may run at once (1..64); 0: the default, 4 */
	unsigned max_parallel;
};

/* Errors for everything that stops spec from running as a pipeline; returns their count. */
size_t pipeline_check(const struct spec *spec, struct spec_diagnostics *diag);

/*
 * Runs every stage; report initialised by the caller. Returns 0 when all boxes succeeded,
 * -ECANCELED when a stage failed, -ENOTSUP for a spec that cannot run, or another -errno,
 * with report->error naming the failing stage and box.
 */
int pipeline_run(const struct spec *spec, const struct pipeline_options *options,
		 struct run_report *report);

/* The parallelism bound options ask for (resolving 0 as documented above). */
unsigned pipeline_max_parallel(const struct pipeline_options *options);

#endif
