/*
 * Source text to a position-carrying document tree, for YAML and JSON alike.
 *
 * YAML goes through libyaml's event parser. JSON is checked by jansson first (strict JSON and
 * its error positions), then read again with libyaml, whose flow syntax is a superset of JSON
 * in practice, because only libyaml reports where each valid node sits. The rare valid JSON
 * libyaml refuses (escaped surrogate pairs, keys over 1024 characters) is converted from
 * jansson's tree instead, and its nodes carry no position (line 0). Aliases are refused so a
 * hostile file cannot expand exponentially, and depth is bounded because the walk recurses.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "runtime/spec_internal.h"

#define SPEC_TREE_INITIAL_CAPACITY 4
#define SPEC_TREE_FILE_START ((struct spec_pos){ .line = 1, .column = 1 })

struct spec_yaml_reader {
	yaml_parser_t parser;
	const char *file;
	const char *data;
	size_t size;
	struct spec_diagnostics *diag;
};

static struct spec_pos spec_pos_from_mark(yaml_mark_t mark)
{
	return (struct spec_pos){ .line = (unsigned)mark.line + 1,
				  .column = (unsigned)mark.column + 1 };
}

void spec_node_free(struct spec_node *node)
{
	if (!node)
		return;
	for (size_t i = 0; i < node->count; i++) {
		if (node->keys)
			spec_node_free(node->keys[i]);
		spec_node_free(node->values[i]);
	}
	free(node->keys);
	free(node->values);
	free(node->text);
	free(node);
}

static struct spec_node *spec_node_new(enum spec_node_type type, struct spec_pos pos)
{
	struct spec_node *node = calloc(1, sizeof(*node));

	if (node) {
		node->type = type;
		node->pos = pos;
	}
	return node;
}

static int spec_node_append(struct spec_node *parent, struct spec_node *key,
			    struct spec_node *value)
{
	if (parent->count == parent->capacity) {
		size_t capacity = parent->capacity ? parent->capacity * 2 : SPEC_TREE_INITIAL_CAPACITY;
		struct spec_node **values = realloc(parent->values, capacity * sizeof(*values));

		if (!values)
			return -ENOMEM;
		parent->values = values;
		if (parent->type == SPEC_NODE_MAP) {
			struct spec_node **keys = realloc(parent->keys, capacity * sizeof(*keys));

			if (!keys)
				return -ENOMEM;
			parent->keys = keys;
		}
		parent->capacity = capacity;
	}
	if (parent->type == SPEC_NODE_MAP)
		parent->keys[parent->count] = key;
	parent->values[parent->count++] = value;
	return 0;
}

const struct spec_node *spec_node_map_get(const struct spec_node *map, const char *key)
{
	if (!map || map->type != SPEC_NODE_MAP)
		return NULL;
	for (size_t i = 0; i < map->count; i++)
		if (strcmp(map->keys[i]->text, key) == 0)
			return map->values[i];
	return NULL;
}

bool spec_node_is_null(const struct spec_node *node)
{
	static const char *const null_words[] = { "", "~", "null", "Null", "NULL" };

	if (!node || node->type != SPEC_NODE_SCALAR || node->quoted)
		return false;
	for (size_t i = 0; i < sizeof(null_words) / sizeof(null_words[0]); i++)
		if (strcmp(node->text, null_words[i]) == 0)
			return true;
	return false;
}

const char *spec_node_type_name(const struct spec_node *node)
{
	switch (node->type) {
	case SPEC_NODE_MAP:
		return "a mapping";
	case SPEC_NODE_SEQ:
		return "a list";
	case SPEC_NODE_SCALAR:
		break;
	}
	return "a scalar";
}

enum spec_format spec_format_detect(const char *file_name, const char *data, size_t size)
{
	const char *dot = file_name ? strrchr(file_name, '.') : NULL;

	if (dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
		return SPEC_FORMAT_YAML;
	if (dot && strcmp(dot, ".json") == 0)
		return SPEC_FORMAT_JSON;
	for (size_t i = 0; i < size; i++) {
		if (isspace((unsigned char)data[i]))
			continue;
		return data[i] == '{' || data[i] == '[' ? SPEC_FORMAT_JSON : SPEC_FORMAT_YAML;
	}
	return SPEC_FORMAT_YAML;
}

/* ---- YAML ------------------------------------------------------------------------------- */

static void spec_yaml_report_parser_error(struct spec_yaml_reader *reader)
{
	yaml_parser_t *parser = &reader->parser;
	struct spec_pos pos = spec_pos_from_mark(parser->problem_mark);
	const char *problem = parser->problem ? parser->problem : "unreadable input";
	const char *hint = "check the YAML syntax at this position";
	size_t offset = parser->problem_mark.index;

	if (parser->error == YAML_MEMORY_ERROR) {
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos, NULL,
				     "out of memory while reading the spec");
		return;
	}
	if (strstr(problem, "tab"))
		hint = "indent YAML with spaces; tabs are not allowed for indentation";
	else if (parser->context && strstr(parser->context, "quoted scalar"))
		hint = "close the quoted string with the same quote character it starts with";
	else if (offset < reader->size && reader->data[offset] == '\t')
		hint = "replace the tab with spaces";
	if (parser->context)
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos, hint,
				     "YAML syntax error: %s (%s that starts at line %zu column %zu)",
				     problem, parser->context, parser->context_mark.line + 1,
				     parser->context_mark.column + 1);
	else
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos, hint,
				     "YAML syntax error: %s", problem);
}

static int spec_yaml_next(struct spec_yaml_reader *reader, yaml_event_t *event)
{
	if (!yaml_parser_parse(&reader->parser, event)) {
		spec_yaml_report_parser_error(reader);
		return -EINVAL;
	}
	return 0;
}

static struct spec_node *spec_yaml_read_node(struct spec_yaml_reader *reader,
					     yaml_event_t *event, unsigned depth);

static struct spec_node *spec_yaml_read_scalar(struct spec_yaml_reader *reader,
					       yaml_event_t *event)
{
	struct spec_pos pos = spec_pos_from_mark(event->start_mark);
	struct spec_node *node;

	if (memchr(event->data.scalar.value, '\0', event->data.scalar.length)) {
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos,
				     "remove the \\0 escape", "a value contains a NUL character");
		return NULL;
	}
	node = spec_node_new(SPEC_NODE_SCALAR, pos);
	if (!node)
		return NULL;
	node->text = strdup((const char *)event->data.scalar.value);
	node->quoted = event->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		       event->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
		       event->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
		       event->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
	if (!node->text) {
		free(node);
		return NULL;
	}
	return node;
}

/* Reads the children of a sequence or mapping up to its end event. */
static int spec_yaml_read_children(struct spec_yaml_reader *reader, struct spec_node *parent,
				   yaml_event_type_t end_type, unsigned depth)
{
	for (;;) {
		yaml_event_t event;
		struct spec_node *key = NULL, *value;

		if (spec_yaml_next(reader, &event) < 0)
			return -EINVAL;
		if (event.type == end_type) {
			yaml_event_delete(&event);
			return 0;
		}
		if (parent->type == SPEC_NODE_MAP) {
			if (event.type != YAML_SCALAR_EVENT) {
				spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file,
						     spec_pos_from_mark(event.start_mark),
						     "write a plain name before the colon",
						     "a mapping key must be a plain name");
				yaml_event_delete(&event);
				return -EINVAL;
			}
			key = spec_yaml_read_scalar(reader, &event);
			yaml_event_delete(&event);
			if (!key || spec_yaml_next(reader, &event) < 0) {
				spec_node_free(key);
				return -EINVAL;
			}
		}
		value = spec_yaml_read_node(reader, &event, depth + 1);
		yaml_event_delete(&event);
		if (!value || spec_node_append(parent, key, value) < 0) {
			spec_node_free(key);
			spec_node_free(value);
			return -EINVAL;
		}
	}
}

static struct spec_node *spec_yaml_read_node(struct spec_yaml_reader *reader,
					     yaml_event_t *event, unsigned depth)
{
	struct spec_pos pos = spec_pos_from_mark(event->start_mark);
	enum spec_node_type type = SPEC_NODE_MAP;
	yaml_event_type_t end_type = YAML_MAPPING_END_EVENT;
	struct spec_node *node;

	if (depth > SPEC_TREE_MAX_DEPTH) {
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos,
				     "flatten the document", "nesting is deeper than %d levels",
				     SPEC_TREE_MAX_DEPTH);
		return NULL;
	}
	switch (event->type) {
	case YAML_SCALAR_EVENT:
		return spec_yaml_read_scalar(reader, event);
	case YAML_ALIAS_EVENT:
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos,
				     "write the value out instead of referring to an anchor",
				     "YAML aliases (*name) are not supported in specs");
		return NULL;
	case YAML_SEQUENCE_START_EVENT:
		type = SPEC_NODE_SEQ;
		end_type = YAML_SEQUENCE_END_EVENT;
		break;
	case YAML_MAPPING_START_EVENT:
		break;
	default:
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_ERROR, reader->file, pos, NULL,
				     "unexpected YAML structure");
		return NULL;
	}
	node = spec_node_new(type, pos);
	if (!node)
		return NULL;
	if (spec_yaml_read_children(reader, node, end_type, depth) < 0) {
		spec_node_free(node);
		return NULL;
	}
	return node;
}

/* Skips to the first document's root node event; returns 1 for an empty stream. */
static int spec_yaml_read_prologue(struct spec_yaml_reader *reader, yaml_event_t *event)
{
	for (;;) {
		if (spec_yaml_next(reader, event) < 0)
			return -EINVAL;
		switch (event->type) {
		case YAML_STREAM_START_EVENT:
		case YAML_DOCUMENT_START_EVENT:
			yaml_event_delete(event);
			continue;
		case YAML_STREAM_END_EVENT:
			yaml_event_delete(event);
			return 1;
		default:
			return 0;
		}
	}
}

static void spec_yaml_check_single_document(struct spec_yaml_reader *reader)
{
	yaml_event_t event;

	if (spec_yaml_next(reader, &event) < 0) /* the document end */
		return;
	yaml_event_delete(&event);
	if (spec_yaml_next(reader, &event) < 0)
		return;
	if (event.type == YAML_DOCUMENT_START_EVENT)
		spec_diagnostics_add(reader->diag, SPEC_SEVERITY_WARNING, reader->file,
				     spec_pos_from_mark(event.start_mark),
				     "put each spec in its own file",
				     "only the first YAML document is read; the rest is ignored");
	yaml_event_delete(&event);
}

static struct spec_node *spec_yaml_parse(const char *data, size_t size, const char *file,
					 struct spec_diagnostics *diag)
{
	struct spec_yaml_reader reader = { .file = file, .data = data, .size = size,
					   .diag = diag };
	struct spec_node *root = NULL;
	yaml_event_t event;
	int rc;

	if (!yaml_parser_initialize(&reader.parser))
		return NULL;
	yaml_parser_set_input_string(&reader.parser, (const unsigned char *)data, size);
	rc = spec_yaml_read_prologue(&reader, &event);
	if (rc == 1)
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, file, SPEC_TREE_FILE_START,
				     "start the file with `api_version: v1` and `kind: ...`",
				     "the spec is empty");
	if (rc != 0)
		goto out;
	root = spec_yaml_read_node(&reader, &event, 0);
	yaml_event_delete(&event);
	if (root)
		spec_yaml_check_single_document(&reader);
out:
	yaml_parser_delete(&reader.parser);
	return root;
}

/* ---- JSON ------------------------------------------------------------------------------- */

static struct spec_node *spec_json_convert(json_t *value, unsigned depth);

static struct spec_node *spec_json_convert_scalar(json_t *value)
{
	struct spec_node *node = spec_node_new(SPEC_NODE_SCALAR, (struct spec_pos){ 0, 0 });
	int rc = 0;

	if (!node)
		return NULL;
	switch (json_typeof(value)) {
	case JSON_STRING:
		node->quoted = true;
		node->text = strdup(json_string_value(value));
		break;
	case JSON_INTEGER:
		rc = asprintf(&node->text, "%" JSON_INTEGER_FORMAT, json_integer_value(value));
		break;
	case JSON_REAL:
		rc = asprintf(&node->text, "%.17g", json_real_value(value));
		break;
	case JSON_TRUE:
		node->text = strdup("true");
		break;
	case JSON_FALSE:
		node->text = strdup("false");
		break;
	default:
		node->text = strdup("null");
		break;
	}
	if (rc < 0 || !node->text) {
		if (rc < 0)
			node->text = NULL;
		spec_node_free(node);
		return NULL;
	}
	return node;
}

static int spec_json_convert_children(json_t *value, struct spec_node *node, unsigned depth)
{
	if (json_is_object(value)) {
		const char *key;
		json_t *child;

		json_object_foreach(value, key, child) {
			struct spec_node *key_node = spec_node_new(SPEC_NODE_SCALAR, node->pos);
			struct spec_node *child_node = spec_json_convert(child, depth + 1);

			if (key_node)
				key_node->text = strdup(key);
			if (!key_node || !key_node->text || !child_node ||
			    spec_node_append(node, key_node, child_node) < 0) {
				spec_node_free(key_node);
				spec_node_free(child_node);
				return -ENOMEM;
			}
		}
		return 0;
	}
	for (size_t i = 0; i < json_array_size(value); i++) {
		struct spec_node *child_node = spec_json_convert(json_array_get(value, i), depth + 1);

		if (!child_node || spec_node_append(node, NULL, child_node) < 0) {
			spec_node_free(child_node);
			return -ENOMEM;
		}
	}
	return 0;
}

static struct spec_node *spec_json_convert(json_t *value, unsigned depth)
{
	struct spec_node *node;

	if (depth > SPEC_TREE_MAX_DEPTH)
		return NULL;
	if (!json_is_object(value) && !json_is_array(value))
		return spec_json_convert_scalar(value);
	node = spec_node_new(json_is_object(value) ? SPEC_NODE_MAP : SPEC_NODE_SEQ,
			     (struct spec_pos){ 0, 0 });
	if (node && spec_json_convert_children(value, node, depth) < 0) {
		spec_node_free(node);
		return NULL;
	}
	return node;
}

static struct spec_node *spec_json_parse(const char *data, size_t size, const char *file,
					 struct spec_diagnostics *diag)
{
	struct spec_diagnostics yaml_diag;
	struct spec_node *root;
	json_error_t error;
	json_t *value = json_loadb(data, size, 0, &error);

	if (!value) {
		struct spec_pos pos = { error.line > 0 ? (unsigned)error.line : 0,
					error.column > 0 ? (unsigned)error.column : 0 };

		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, file, pos,
				     "fix the JSON syntax at this position, or write the spec as "
				     "YAML in a .yaml file",
				     "JSON syntax error: %s", error.text);
		return NULL;
	}
	/* Positions come from libyaml; its complaints about valid JSON are not the user's. */
	spec_diagnostics_init(&yaml_diag);
	root = spec_yaml_parse(data, size, file, &yaml_diag);
	spec_diagnostics_free(&yaml_diag);
	if (!root) {
		root = spec_json_convert(value, 0);
		if (!root)
			spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, file,
					     (struct spec_pos){ 0, 0 }, "flatten the document",
					     "the JSON is nested deeper than %d levels or memory "
					     "ran out", SPEC_TREE_MAX_DEPTH);
	}
	json_decref(value);
	return root;
}

struct spec_node *spec_tree_parse(const char *data, size_t size, enum spec_format format,
				  const char *file, struct spec_diagnostics *diag)
{
	if (format == SPEC_FORMAT_AUTO)
		format = spec_format_detect(file, data, size);
	if (format == SPEC_FORMAT_JSON)
		return spec_json_parse(data, size, file, diag);
	return spec_yaml_parse(data, size, file, diag);
}
