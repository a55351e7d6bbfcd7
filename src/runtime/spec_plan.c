/*
 * Workflow planning: steps grouped into dependency levels that can run in parallel.
 *
 * A step's level is one more than the highest level among the steps it waits for (depends_on
 * and stdin_from alike: reading a step's stdout means waiting for it). The levels are built
 * one at a time from the steps whose dependencies are all placed, so steps keep their written
 * order inside a level and the output is deterministic. When no step can be placed, the rest
 * contain a cycle; following unplaced dependencies from any of them must revisit a step, and
 * that loop is the cycle named in the error. Specs are small (tens of steps), so the quadratic
 * scan is simpler than a heap and fast enough.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec_internal.h"

#define SPEC_PLAN_UNPLACED (-1L)
#define SPEC_PLAN_ARROW " -> "

struct spec_plan_graph {
	size_t step_count;
	size_t **deps;
	size_t *dep_count;
	long *level;
};

long spec_workflow_find_step(const struct spec_workflow *workflow, const char *name)
{
	for (size_t i = 0; i < workflow->step_count; i++)
		if (workflow->steps[i].name && strcmp(workflow->steps[i].name, name) == 0)
			return (long)i;
	return -1;
}

static void spec_plan_graph_free(struct spec_plan_graph *graph)
{
	for (size_t i = 0; graph->deps && i < graph->step_count; i++)
		free(graph->deps[i]);
	free(graph->deps);
	free(graph->dep_count);
	free(graph->level);
}

static int spec_plan_graph_add_step(struct spec_plan_graph *graph,
				    const struct spec_workflow *workflow, size_t index)
{
	const struct spec_step *step = &workflow->steps[index];
	size_t total = step->depends_count + (step->stdin_from ? 1 : 0);

	graph->deps[index] = calloc(total + 1, sizeof(size_t));
	if (!graph->deps[index])
		return -ENOMEM;
	for (size_t i = 0; i < total; i++) {
		const char *name = i < step->depends_count ? step->depends_on[i] : step->stdin_from;
		long target = spec_workflow_find_step(workflow, name);

		if (target < 0)
			return -ENOENT;
		graph->deps[index][graph->dep_count[index]++] = (size_t)target;
	}
	return 0;
}

static int spec_plan_graph_build(struct spec_plan_graph *graph,
				 const struct spec_workflow *workflow)
{
	graph->step_count = workflow->step_count;
	graph->deps = calloc(graph->step_count + 1, sizeof(*graph->deps));
	graph->dep_count = calloc(graph->step_count + 1, sizeof(*graph->dep_count));
	graph->level = calloc(graph->step_count + 1, sizeof(*graph->level));
	if (!graph->deps || !graph->dep_count || !graph->level)
		return -ENOMEM;
	for (size_t i = 0; i < graph->step_count; i++) {
		int rc = spec_plan_graph_add_step(graph, workflow, i);

		graph->level[i] = SPEC_PLAN_UNPLACED;
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* A step is ready for level `level` when every dependency sits on a lower level. */
static bool spec_plan_step_ready(const struct spec_plan_graph *graph, size_t step, long level)
{
	for (size_t i = 0; i < graph->dep_count[step]; i++) {
		long dep_level = graph->level[graph->deps[step][i]];

		if (dep_level == SPEC_PLAN_UNPLACED || dep_level >= level)
			return false;
	}
	return true;
}

/* Places the next level; returns how many steps it holds (0: none could be placed). */
static int spec_plan_place_level(struct spec_plan_graph *graph, struct spec_workflow_plan *plan)
{
	long level = (long)plan->level_count;
	struct spec_plan_level *levels;
	struct spec_plan_level *current;

	levels = realloc(plan->levels, (plan->level_count + 1) * sizeof(*levels));
	if (!levels)
		return -ENOMEM;
	plan->levels = levels;
	current = &levels[plan->level_count];
	memset(current, 0, sizeof(*current));
	current->steps = calloc(graph->step_count, sizeof(*current->steps));
	if (!current->steps)
		return -ENOMEM;
	for (size_t i = 0; i < graph->step_count; i++)
		if (graph->level[i] == SPEC_PLAN_UNPLACED && spec_plan_step_ready(graph, i, level))
			current->steps[current->count++] = i;
	for (size_t i = 0; i < current->count; i++)
		graph->level[current->steps[i]] = level;
	if (!current->count) {
		free(current->steps);
		return 0;
	}
	plan->level_count++;
	return (int)current->count;
}

static size_t spec_plan_first_unplaced_dep(const struct spec_plan_graph *graph, size_t step)
{
	for (size_t i = 0; i < graph->dep_count[step]; i++)
		if (graph->level[graph->deps[step][i]] == SPEC_PLAN_UNPLACED)
			return graph->deps[step][i];
	return step; /* unreachable for an unplaced step that could not be placed */
}

static const char *spec_plan_step_name(const struct spec_workflow *workflow, size_t step)
{
	return workflow->steps[step].name ? workflow->steps[step].name : "?";
}

/* Joins the step names of path[from..count) plus path[from] again with arrows. */
static char *spec_plan_cycle_text(const struct spec_workflow *workflow, const size_t *path,
				  size_t from, size_t count)
{
	size_t length = 1;
	char *text;

	for (size_t i = from; i <= count; i++)
		length += strlen(spec_plan_step_name(workflow, path[i < count ? i : from])) +
			  strlen(SPEC_PLAN_ARROW);
	text = calloc(length, 1);
	if (!text)
		return NULL;
	for (size_t i = from; i <= count; i++) {
		if (i > from)
			strcat(text, SPEC_PLAN_ARROW);
		strcat(text, spec_plan_step_name(workflow, path[i < count ? i : from]));
	}
	return text;
}

static int spec_plan_find_cycle(const struct spec_plan_graph *graph,
				const struct spec_workflow *workflow, char **cycle,
				size_t *cycle_step)
{
	size_t *path = calloc(graph->step_count + 1, sizeof(*path));
	long *seen_at = calloc(graph->step_count + 1, sizeof(*seen_at));
	size_t length = 0, current = 0;

	if (!path || !seen_at) {
		free(path);
		free(seen_at);
		return -ENOMEM;
	}
	for (size_t i = 0; i < graph->step_count; i++)
		seen_at[i] = -1;
	while (graph->level[current] != SPEC_PLAN_UNPLACED)
		current++;
	while (seen_at[current] < 0) {
		seen_at[current] = (long)length;
		path[length++] = current;
		current = spec_plan_first_unplaced_dep(graph, current);
	}
	*cycle_step = current;
	if (cycle)
		*cycle = spec_plan_cycle_text(workflow, path, (size_t)seen_at[current], length);
	free(path);
	free(seen_at);
	return -ELOOP;
}

void spec_workflow_plan_free(struct spec_workflow_plan *plan)
{
	for (size_t i = 0; plan->levels && i < plan->level_count; i++)
		free(plan->levels[i].steps);
	free(plan->levels);
	plan->levels = NULL;
	plan->level_count = 0;
}

int spec_workflow_plan_with_cycle(const struct spec_workflow *workflow,
				  struct spec_workflow_plan *plan, char **cycle, size_t *cycle_step)
{
	struct spec_plan_graph graph = { 0 };
	size_t placed = 0;
	int rc;

	memset(plan, 0, sizeof(*plan));
	if (cycle)
		*cycle = NULL;
	rc = spec_plan_graph_build(&graph, workflow);
	while (rc == 0 && placed < graph.step_count) {
		rc = spec_plan_place_level(&graph, plan);
		if (rc == 0)
			rc = spec_plan_find_cycle(&graph, workflow, cycle, cycle_step);
		if (rc > 0) {
			placed += (size_t)rc;
			rc = 0;
		}
	}
	spec_plan_graph_free(&graph);
	if (rc < 0)
		spec_workflow_plan_free(plan);
	return rc;
}

int spec_workflow_plan(const struct spec_workflow *workflow, struct spec_workflow_plan *plan,
		       char **cycle)
{
	size_t cycle_step;

	return spec_workflow_plan_with_cycle(workflow, plan, cycle, &cycle_step);
}
