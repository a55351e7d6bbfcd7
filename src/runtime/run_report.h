/*
 * The result of `voidbox run`: one report per run, one stage entry per workflow step,
 * pipeline box or agent invocation. Every runner (workflow, pipeline, agent) fills the same
 * struct so the CLI, the daemon and tests print and compare one shape.
 *
 * The JSON form keeps upstream's RunReport keys {name, kind, success, output, stages,
 * total_cost_usd, input_tokens, output_tokens} and adds error and duration_ms; each stage has
 * {name, success, exit_code, output, error, duration_ms, input_tokens, output_tokens,
 * cost_usd, turns, tool_calls, is_error}. Strings are owned by the report. Stages live in one
 * growable array, so a pointer from run_report_add_stage() stays valid only until the next
 * add; runners that fill stages from several threads add them all first.
 */
#ifndef VOIDBOX_RUNTIME_RUN_REPORT_H
#define VOIDBOX_RUNTIME_RUN_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "runtime/box.h"
#include "runtime/spec.h"

/*
 * The longest error a report or stage keeps, in bytes: errors quote guest text (a step's
 * stderr, an exec error string), so they are cut here and have their control characters
 * made spaces when set (run_report_set_error, run_stage_set_error).
 */
#define RUN_REPORT_ERROR_MAX 4096u

struct run_stage {
	char *name;
	bool success;
	int exit_code;
	char *output; /* the stage's result text (stdout for a step); never NULL once added */
	char *error;  /* NULL when none */
	uint64_t duration_ms;
	uint64_t input_tokens;
	uint64_t output_tokens;
	double cost_usd;
	uint32_t turns;
	uint32_t tool_calls;
	bool is_error;
	bool ran; /* false for a stage that never started (an earlier failure stopped the run) */
};

/*
 * Who hears about stages while a run goes (the daemon's event stream, through `voidbox run
 * --events-fd`). Runners call run_report_stage_started/finished; parallel steps call them from
 * their own threads, so an observer that keeps state locks it. NULL observer: nothing is told.
 */
struct run_observer {
	void (*stage_started)(void *opaque, const struct run_stage *stage);
	/* a piece of a running stage's output as the program prints it (workflow steps) */
	void (*stage_output)(void *opaque, const struct run_stage *stage, bool is_stderr,
			     const void *data, size_t len);
	void (*stage_finished)(void *opaque, const struct run_stage *stage);
	/* a service stage's output_file was first published (the service keeps running) */
	void (*stage_output_ready)(void *opaque, const struct run_stage *stage, const void *data,
				   size_t len);
	/* a guest telemetry sample of the box called box_name (local boxes, about 1/s) */
	void (*telemetry)(void *opaque, const char *box_name,
			  const struct box_telemetry_sample *sample);
	void *opaque;
};

struct run_report {
	char *name;
	enum spec_kind kind;
	bool success;
	char *output; /* never NULL after init */
	struct run_stage *stages;
	size_t stage_count;
	size_t stage_capacity;
	double total_cost_usd;
	uint64_t input_tokens;
	uint64_t output_tokens;
	char *error; /* NULL when the run succeeded */
	uint64_t duration_ms;
	char *sandbox_mode; /* "mock" or "local"; NULL when no box was opened */
	const struct run_observer *observer; /* set by the caller after init; may stay NULL */
};

/* 0 or -ENOMEM. */
int run_report_init(struct run_report *report, const char *name, enum spec_kind kind);
void run_report_free(struct run_report *report);

/* Appends a stage named name (success false, exit_code 0, output ""); NULL on -ENOMEM. */
struct run_stage *run_report_add_stage(struct run_report *report, const char *name);
/* The stage called name, or NULL. */
const struct run_stage *run_report_find_stage(const struct run_report *report, const char *name);
/* Replace the text fields (copies; len may be SIZE_MAX for a C string). 0 or -ENOMEM. */
int run_report_set_output(struct run_report *report, const char *text, size_t len);
int run_report_set_error(struct run_report *report, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int run_report_set_sandbox_mode(struct run_report *report, const char *mode);
int run_stage_set_output(struct run_stage *stage, const char *text, size_t len);
int run_stage_set_error(struct run_stage *stage, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Tell the report's observer, if any, that stage started or reached its final state. */
void run_report_stage_started(const struct run_report *report, const struct run_stage *stage);
void run_report_stage_finished(const struct run_report *report, const struct run_stage *stage);
void run_report_stage_output(const struct run_report *report, const struct run_stage *stage,
			     bool is_stderr, const void *data, size_t len);
void run_report_stage_output_ready(const struct run_report *report,
				   const struct run_stage *stage, const void *data, size_t len);
/* Sends cfg's guest telemetry to the report's observer when it listens for it. */
void run_report_wire_telemetry(const struct run_report *report, struct box_config *cfg);
/* Sums the stages' tokens and costs into the report's totals. */
void run_report_sum_usage(struct run_report *report);

/* The JSON form described above; NULL on allocation failure. */
json_t *run_report_to_json(const struct run_report *report);
/* A human summary: status line, one line per stage, then the output. */
void run_report_print(const struct run_report *report, FILE *out);

#endif
