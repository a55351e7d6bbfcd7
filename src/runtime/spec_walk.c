/*
 * Typed readers for one field of a spec mapping: string, positive integer, boolean, enum,
 * string list.
 *
 * Each reader either stores the value, reports absence (a missing key and an explicit null
 * read the same, as in serde), or records one positioned error that names the field by its
 * full path ("workflow.steps[1].timeout_secs") and says what to write. Readers never stop the
 * walk, so one pass finds every wrong field. Quoted scalars are always strings: `"8"` is not a
 * number and `"true"` is not a boolean, which keeps the JSON and YAML forms equally strict.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec_internal.h"

#define SPEC_WALK_KEY_LIST_MAX 512
/* Room for the words around the key list in an unknown-key hint. */
#define SPEC_WALK_HINT_EXTRA 64
#define SPEC_WALK_DECIMAL_BASE 10

void spec_walk_report(struct spec_walk *walk, enum spec_severity severity, struct spec_pos pos,
		      const char *hint, const char *fmt, ...)
{
	char *message = NULL;
	va_list args;
	int rc;

	va_start(args, fmt);
	rc = vasprintf(&message, fmt, args);
	va_end(args);
	if (rc < 0 || spec_diagnostics_add(walk->diag, severity, walk->file, pos, hint, "%s",
					   message) < 0)
		walk->out_of_memory = true;
	free(rc < 0 ? NULL : message);
}

int spec_format(char *buffer, size_t size, const char *fmt, ...)
{
	va_list args;
	int rc;

	va_start(args, fmt);
	rc = vsnprintf(buffer, size, fmt, args);
	va_end(args);
	return rc;
}

char *spec_walk_strdup(struct spec_walk *walk, const char *text)
{
	char *copy = strdup(text);

	if (!copy)
		walk->out_of_memory = true;
	return copy;
}

static void spec_walk_report_unknown_key(struct spec_walk *walk, const struct spec_node *key,
					 const char *path, const char *const *known,
					 size_t known_count)
{
	const char *suggestion = spec_suggest(key->text, known, known_count);
	char list[SPEC_WALK_KEY_LIST_MAX] = "";
	char hint[SPEC_WALK_KEY_LIST_MAX + SPEC_WALK_HINT_EXTRA];
	size_t used = 0;

	if (suggestion) {
		spec_format(hint, sizeof(hint), "did you mean '%s'?", suggestion);
	} else {
		for (size_t i = 0; i < known_count && used < sizeof(list); i++)
			used += (size_t)spec_format(list + used, sizeof(list) - used, "%s%s",
						 i ? ", " : "", known[i]);
		spec_format(hint, sizeof(hint), "remove it; %s takes: %s", path, list);
	}
	spec_walk_report(walk, SPEC_SEVERITY_WARNING, key->pos, hint,
			 "unknown key '%s' in %s is ignored", key->text, path);
}

/* Orders key indices by text, then by position in the mapping. */
static int spec_walk_compare_keys(const void *a, const void *b, void *map_arg)
{
	const struct spec_node *map = map_arg;
	size_t left = *(const size_t *)a, right = *(const size_t *)b;
	int order = strcmp(map->keys[left]->text, map->keys[right]->text);

	if (order)
		return order;
	return left < right ? -1 : left > right;
}

/*
 * For each key of map, the index of the first key with the same text (itself when it is the
 * first), into first[]. Sorting makes this O(n log n): a mapping may hold as many keys as a
 * spec file has lines (an env map), and comparing every pair stalls on a few MiB.
 */
static int spec_walk_first_keys(const struct spec_node *map, size_t *first)
{
	size_t *order = malloc(map->count * sizeof(*order));

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < map->count; i++)
		order[i] = i;
	qsort_r(order, map->count, sizeof(*order), spec_walk_compare_keys, (void *)map);
	for (size_t i = 0, run = 0; i < map->count; i++) {
		if (strcmp(map->keys[order[i]]->text, map->keys[order[run]]->text) != 0)
			run = i;
		first[order[i]] = order[run];
	}
	free(order);
	return 0;
}

void spec_walk_check_keys(struct spec_walk *walk, const struct spec_node *map, const char *path,
			  const char *const *known, size_t known_count)
{
	size_t *first = map->count ? malloc(map->count * sizeof(*first)) : NULL;

	if (map->count && (!first || spec_walk_first_keys(map, first) < 0)) {
		walk->out_of_memory = true;
		free(first);
		return;
	}
	for (size_t i = 0; i < map->count; i++) {
		const struct spec_node *key = map->keys[i];
		bool is_known = false;

		if (first[i] != i)
			spec_walk_report(walk, SPEC_SEVERITY_ERROR, key->pos,
					 "keep one of the two entries",
					 "key '%s' in %s appears twice (first at line %u)",
					 key->text, path, map->keys[first[i]]->pos.line);
		for (size_t j = 0; j < known_count && !is_known; j++)
			is_known = strcmp(known[j], key->text) == 0;
		if (!is_known && known)
			spec_walk_report_unknown_key(walk, key, path, known, known_count);
	}
	free(first);
}

bool spec_walk_expect(struct spec_walk *walk, const struct spec_node *node, const char *path,
		      enum spec_node_type type)
{
	static const char *const hints[] = {
		[SPEC_NODE_SCALAR] = "write a single value here",
		[SPEC_NODE_MAP] = "write `key: value` lines indented under it",
		[SPEC_NODE_SEQ] = "write a list: one `- item` line per entry, or [a, b]",
	};
	static const char *const names[] = {
		[SPEC_NODE_SCALAR] = "a single value",
		[SPEC_NODE_MAP] = "a mapping",
		[SPEC_NODE_SEQ] = "a list",
	};

	if (node->type == type)
		return true;
	spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, hints[type], "%s must be %s, not %s",
			 path, names[type], spec_node_type_name(node));
	return false;
}

const struct spec_node *spec_walk_field(const struct spec_node *map, const char *key)
{
	const struct spec_node *node = spec_node_map_get(map, key);

	return spec_node_is_null(node) ? NULL : node;
}

int spec_walk_string(struct spec_walk *walk, const struct spec_node *map, const char *path,
		     const char *key, char **out)
{
	const struct spec_node *node = spec_walk_field(map, key);
	char field[SPEC_WALK_KEY_LIST_MAX];
	char *copy;

	if (!node)
		return 0;
	spec_format(field, sizeof(field), "%s.%s", path, key);
	if (!spec_walk_expect(walk, node, field, SPEC_NODE_SCALAR))
		return -1;
	copy = spec_walk_strdup(walk, node->text);
	if (!copy)
		return -1;
	free(*out);
	*out = copy;
	return 1;
}

static bool spec_walk_is_integer_text(const char *text)
{
	if (*text == '-' || *text == '+')
		text++;
	if (!*text)
		return false;
	for (; *text; text++)
		if (*text < '0' || *text > '9')
			return false;
	return true;
}

int spec_walk_uint(struct spec_walk *walk, const struct spec_node *map, const char *path,
		   const char *key, uint32_t max, uint32_t *out)
{
	const struct spec_node *node = spec_walk_field(map, key);
	char hint[SPEC_WALK_KEY_LIST_MAX];
	long long value;

	if (!node)
		return 0;
	if (max == UINT32_MAX)
		spec_format(hint, sizeof(hint), "write a positive whole number, without quotes");
	else
		spec_format(hint, sizeof(hint), "write a whole number from 1 to %u, without quotes",
			    max);
	if (node->type != SPEC_NODE_SCALAR || node->quoted || !spec_walk_is_integer_text(node->text)) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, hint,
				 "%s.%s must be a whole number, not %s%s%s", path, key,
				 node->type == SPEC_NODE_SCALAR ? "\"" : spec_node_type_name(node),
				 node->type == SPEC_NODE_SCALAR ? node->text : "",
				 node->type == SPEC_NODE_SCALAR ? "\"" : "");
		return -1;
	}
	errno = 0;
	value = strtoll(node->text, NULL, SPEC_WALK_DECIMAL_BASE);
	if (node->text[0] == '-' || (errno != ERANGE && value < 1)) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, hint,
				 "%s.%s must be positive, not %s", path, key, node->text);
		return -1;
	}
	if (errno == ERANGE || value > (long long)max) {
		spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, hint,
				 "%s.%s must be at most %u, not %s", path, key, max, node->text);
		return -1;
	}
	*out = (uint32_t)value;
	return 1;
}

int spec_walk_bool(struct spec_walk *walk, const struct spec_node *map, const char *path,
		   const char *key, bool *out)
{
	static const char *const true_words[] = { "true", "True", "TRUE" };
	static const char *const false_words[] = { "false", "False", "FALSE" };
	const struct spec_node *node = spec_walk_field(map, key);

	if (!node)
		return 0;
	if (node->type == SPEC_NODE_SCALAR && !node->quoted) {
		for (size_t i = 0; i < SPEC_ARRAY_SIZE(true_words); i++) {
			if (strcmp(node->text, true_words[i]) == 0) {
				*out = true;
				return 1;
			}
			if (strcmp(node->text, false_words[i]) == 0) {
				*out = false;
				return 1;
			}
		}
	}
	spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, "write true or false, without quotes",
			 "%s.%s must be true or false, not %s", path, key,
			 node->type == SPEC_NODE_SCALAR ? node->text : spec_node_type_name(node));
	return -1;
}

int spec_walk_enum(struct spec_walk *walk, const struct spec_node *map, const char *path,
		   const char *key, const char *const *names, size_t count, int *out)
{
	const struct spec_node *node = spec_walk_field(map, key);
	char hint[SPEC_WALK_KEY_LIST_MAX] = "";
	const char *suggestion;
	size_t used;

	if (!node)
		return 0;
	if (node->type == SPEC_NODE_SCALAR) {
		for (size_t i = 0; i < count; i++) {
			if (strcmp(node->text, names[i]) == 0) {
				*out = (int)i;
				return 1;
			}
		}
	}
	suggestion = node->type == SPEC_NODE_SCALAR ? spec_suggest(node->text, names, count) : NULL;
	if (suggestion) {
		spec_format(hint, sizeof(hint), "did you mean '%s'?", suggestion);
	} else {
		used = (size_t)spec_format(hint, sizeof(hint), "write one of:");
		for (size_t i = 0; i < count && used < sizeof(hint); i++)
			used += (size_t)spec_format(hint + used, sizeof(hint) - used, " %s", names[i]);
	}
	spec_walk_report(walk, SPEC_SEVERITY_ERROR, node->pos, hint, "%s.%s '%s' is not known",
			 path, key,
			 node->type == SPEC_NODE_SCALAR ? node->text : spec_node_type_name(node));
	return -1;
}

/* Frees a partially filled list and reports the walk as failed. */
static int spec_walk_string_list_fail(char **items, size_t count, struct spec_pos *positions)
{
	spec_strv_free(items, count);
	free(positions);
	return -1;
}

int spec_walk_string_list(struct spec_walk *walk, const struct spec_node *map, const char *path,
			  const char *key, char ***out, size_t *count, struct spec_pos **positions)
{
	const struct spec_node *node = spec_walk_field(map, key);
	char field[SPEC_WALK_KEY_LIST_MAX];
	struct spec_pos *pos_list;
	char **items;

	if (!node)
		return 0;
	spec_format(field, sizeof(field), "%s.%s", path, key);
	if (!spec_walk_expect(walk, node, field, SPEC_NODE_SEQ))
		return -1;
	items = calloc(node->count + 1, sizeof(*items));
	pos_list = calloc(node->count + 1, sizeof(*pos_list));
	if (!items || !pos_list) {
		walk->out_of_memory = true;
		return spec_walk_string_list_fail(items, 0, pos_list);
	}
	for (size_t i = 0; i < node->count; i++) {
		const struct spec_node *item = node->values[i];
		char item_path[SPEC_WALK_KEY_LIST_MAX];

		spec_format(item_path, sizeof(item_path), "%s[%zu]", field, i);
		if (!spec_walk_expect(walk, item, item_path, SPEC_NODE_SCALAR))
			return spec_walk_string_list_fail(items, i, pos_list);
		items[i] = spec_walk_strdup(walk, item->text);
		if (!items[i])
			return spec_walk_string_list_fail(items, i, pos_list);
		pos_list[i] = item->pos;
	}
	*out = items;
	*count = node->count;
	if (positions)
		*positions = pos_list;
	else
		free(pos_list);
	return 1;
}

void spec_walk_note_feature(struct spec_walk *walk, enum spec_feature feature,
			    struct spec_pos pos)
{
	if (walk->spec->features & SPEC_FEATURE_BIT(feature))
		return;
	walk->spec->features |= SPEC_FEATURE_BIT(feature);
	walk->spec->feature_pos[feature] = pos;
}
