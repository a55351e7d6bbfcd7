/*
 * The workflow engine: every step of a `kind: workflow` spec runs in ONE box. The planner's
 * dependency levels run in order; the steps of one level run in parallel, one thread each,
 * because they cannot see each other's output. `stdin_from` hands a step the full stdout of
 * an earlier step; `output_step` (default: the last declared step) is the run's output. The
 * first level with a failing step (non-zero exit, timeout, or a box error) ends the run: its
 * steps finish, later levels never start, and the report names the step and its exit code.
 *
 * Features the runtime cannot honour yet are refused before anything boots, through
 * spec_check_supported(), so a spec never half-runs. The engine is split into "open a box
 * from the spec" (workflow_run) and "run in a box I already have" (workflow_run_in_box) so
 * tests and callers can run several workflows in one VM.
 *
 * A `mode: service` step runs with no timeout until it exits or the run is asked to stop
 * (src/runtime/service.h); its output_file is published while it runs, and steps that depend
 * on it start only after it ended.
 */
#ifndef VOIDBOX_RUNTIME_WORKFLOW_H
#define VOIDBOX_RUNTIME_WORKFLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/box.h"
#include "runtime/run_report.h"
#include "runtime/spec.h"

/* The SPEC_FEATURE_BIT set the workflow engine runs today (see docs/runtime.md). */
#define WORKFLOW_SUPPORTED_FEATURES \
	(SPEC_FEATURE_BIT(SPEC_FEATURE_SNAPSHOT) | SPEC_FEATURE_BIT(SPEC_FEATURE_NETWORK) | \
	 SPEC_FEATURE_BIT(SPEC_FEATURE_MOUNTS) | SPEC_FEATURE_BIT(SPEC_FEATURE_IMAGE) |          \
	 SPEC_FEATURE_BIT(SPEC_FEATURE_SERVICE_MODE))

struct workflow_options {
	/* stdin of every step without stdin_from (`voidbox run --input`); NULL: none */
	const char *input;
	size_t input_len;
	/* replaces the spec's sandbox.mode when set (`voidbox run --sandbox-mode`) */
	bool override_mode;
	enum box_mode mode;
	/* a step's timeout when it has no timeout_secs; 0: none */
	uint32_t default_timeout_secs;
	/* scripted answers for a mock box (see box_config) */
	const struct box_mock_rule *mock_rules;
	size_t mock_rule_count;
	/* the VM console file of a local box; NULL: a temporary one */
	const char *serial_log_path;
	/* the host's sandbox settings; NULL: defaults */
	const struct sandbox_host_settings *host;
};

/*
 * Adds an error to diag for everything that stops spec from running as a workflow here:
 * another kind, features outside WORKFLOW_SUPPORTED_FEATURES, a cycle. Returns the number of
 * errors added (0: it can run).
 */
size_t workflow_check(const struct spec *spec, struct spec_diagnostics *diag);

/*
 * Checks, opens a box from spec's sandbox (options may override the mode), runs, closes.
 * report must be initialised by the caller. Returns 0 when every step succeeded, otherwise a
 * negative errno (-ECANCELED when a step failed, -ENOTSUP for an unsupported spec, the box's
 * error when it could not open) with report->error saying why.
 */
int workflow_run(const struct spec *spec, const struct workflow_options *options,
		 struct run_report *report);

/* Runs the workflow in an open box; same return convention. The box stays open. */
int workflow_run_in_box(const struct spec *spec, struct box *box,
			const struct workflow_options *options, struct run_report *report);

#endif
