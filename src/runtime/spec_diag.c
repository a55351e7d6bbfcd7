/*
 * The diagnostics list every spec stage appends to.
 *
 * Findings are collected rather than returned one at a time so a user fixing a spec sees every
 * problem in one `voidbox validate` run. The human form follows the compiler convention
 * "file:line:col: severity: message" that editors already turn into links; the JSON form carries
 * the same fields for `--output json`. Did-you-mean suggestions live here too because both the
 * schema walk and validation use them.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec_internal.h"

#define SPEC_DIAG_INITIAL_CAPACITY 8
/* A suggestion must be this close (edits) and closer than a third of the word's length. */
#define SPEC_SUGGEST_MAX_DISTANCE 3
#define SPEC_SUGGEST_LENGTH_DIVISOR 3
#define SPEC_SUGGEST_MAX_WORD 64

const char *spec_severity_name(enum spec_severity severity)
{
	return severity == SPEC_SEVERITY_ERROR ? "error" : "warning";
}

void spec_diagnostics_init(struct spec_diagnostics *diag)
{
	memset(diag, 0, sizeof(*diag));
}

void spec_diagnostics_free(struct spec_diagnostics *diag)
{
	if (!diag)
		return;
	for (size_t i = 0; i < diag->count; i++) {
		free(diag->items[i].file);
		free(diag->items[i].message);
		free(diag->items[i].hint);
	}
	free(diag->items);
	spec_diagnostics_init(diag);
}

static int spec_diagnostics_grow(struct spec_diagnostics *diag)
{
	size_t capacity = diag->capacity ? diag->capacity * 2 : SPEC_DIAG_INITIAL_CAPACITY;
	struct spec_diagnostic *items = realloc(diag->items, capacity * sizeof(*items));

	if (!items)
		return -ENOMEM;
	diag->items = items;
	diag->capacity = capacity;
	return 0;
}

int spec_diagnostics_add(struct spec_diagnostics *diag, enum spec_severity severity,
			 const char *file, struct spec_pos pos, const char *hint, const char *fmt,
			 ...)
{
	struct spec_diagnostic item = { .severity = severity, .pos = pos };
	va_list args;
	int rc;

	if (!diag)
		return 0;
	if (diag->count == diag->capacity && spec_diagnostics_grow(diag) < 0)
		return -ENOMEM;
	va_start(args, fmt);
	rc = vasprintf(&item.message, fmt, args);
	va_end(args);
	if (rc < 0)
		return -ENOMEM;
	item.file = strdup(file ? file : "<spec>");
	item.hint = hint ? strdup(hint) : NULL;
	if (!item.file || (hint && !item.hint)) {
		free(item.message);
		free(item.file);
		free(item.hint);
		return -ENOMEM;
	}
	diag->items[diag->count++] = item;
	if (severity == SPEC_SEVERITY_ERROR)
		diag->error_count++;
	else
		diag->warning_count++;
	return 0;
}

static bool spec_pos_before(struct spec_pos a, struct spec_pos b)
{
	return a.line < b.line || (a.line == b.line && a.column < b.column);
}

void spec_diagnostics_sort(struct spec_diagnostics *diag, size_t from)
{
	/* Insertion sort: stable, and lists are short and nearly sorted already. */
	for (size_t i = from + 1; i < diag->count; i++) {
		struct spec_diagnostic item = diag->items[i];
		size_t j = i;

		while (j > from && spec_pos_before(item.pos, diag->items[j - 1].pos)) {
			diag->items[j] = diag->items[j - 1];
			j--;
		}
		diag->items[j] = item;
	}
}

void spec_diagnostics_print(const struct spec_diagnostics *diag, FILE *out)
{
	for (size_t i = 0; i < diag->count; i++) {
		const struct spec_diagnostic *item = &diag->items[i];

		if (item->pos.line)
			fprintf(out, "%s:%u:%u: %s: %s\n", item->file, item->pos.line,
				item->pos.column, spec_severity_name(item->severity), item->message);
		else
			fprintf(out, "%s: %s: %s\n", item->file, spec_severity_name(item->severity),
				item->message);
		if (item->hint)
			fprintf(out, "  hint: %s\n", item->hint);
	}
}

static json_t *spec_diagnostic_to_json(const struct spec_diagnostic *item)
{
	json_t *obj = json_object();

	if (!obj)
		return NULL;
	if (json_object_set_new(obj, "severity", json_string(spec_severity_name(item->severity))) ||
	    json_object_set_new(obj, "file", json_string(item->file)) ||
	    json_object_set_new(obj, "line", json_integer(item->pos.line)) ||
	    json_object_set_new(obj, "column", json_integer(item->pos.column)) ||
	    json_object_set_new(obj, "message", json_string(item->message)) ||
	    json_object_set_new(obj, "hint", item->hint ? json_string(item->hint) : json_null())) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

json_t *spec_diagnostics_to_json(const struct spec_diagnostics *diag)
{
	json_t *array = json_array();

	if (!array)
		return NULL;
	for (size_t i = 0; i < diag->count; i++) {
		if (json_array_append_new(array, spec_diagnostic_to_json(&diag->items[i]))) {
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

/* Plain Levenshtein distance over two short words, one rolling row. */
static size_t spec_edit_distance(const char *a, const char *b)
{
	size_t len_a = strlen(a), len_b = strlen(b);
	size_t row[SPEC_SUGGEST_MAX_WORD + 1];

	if (len_a > SPEC_SUGGEST_MAX_WORD || len_b > SPEC_SUGGEST_MAX_WORD)
		return SIZE_MAX;
	for (size_t j = 0; j <= len_b; j++)
		row[j] = j;
	for (size_t i = 1; i <= len_a; i++) {
		size_t diagonal = row[0];

		row[0] = i;
		for (size_t j = 1; j <= len_b; j++) {
			size_t above = row[j];
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t best = diagonal + cost;

			if (above + 1 < best)
				best = above + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diagonal = above;
		}
	}
	return row[len_b];
}

const char *spec_suggest(const char *word, const char *const *candidates, size_t count)
{
	size_t limit = strlen(word) / SPEC_SUGGEST_LENGTH_DIVISOR + 1;
	const char *best = NULL;
	size_t best_distance = SIZE_MAX;

	if (limit > SPEC_SUGGEST_MAX_DISTANCE)
		limit = SPEC_SUGGEST_MAX_DISTANCE;
	for (size_t i = 0; i < count; i++) {
		size_t distance = spec_edit_distance(word, candidates[i]);

		if (distance <= limit && distance < best_distance) {
			best = candidates[i];
			best_distance = distance;
		}
	}
	return best;
}
