/*
 * Internals shared by the spec_*.c files and nothing else.
 *
 * YAML and JSON both become one small document tree whose every node knows its line and
 * column, so the schema walk (spec_parse.c) is written once and points at the source for
 * either format. Validation (spec_validate.c) then checks cross-field rules on the typed
 * structs, using the positions the walk stored in them.
 */
#ifndef VOIDBOX_RUNTIME_SPEC_INTERNAL_H
#define VOIDBOX_RUNTIME_SPEC_INTERNAL_H

#include "runtime/spec.h"

/* Deeper documents are refused: the tree walk recurses and fuzzed input must not blow the stack. */
#define SPEC_TREE_MAX_DEPTH 64

enum spec_node_type {
	SPEC_NODE_SCALAR,
	SPEC_NODE_MAP,
	SPEC_NODE_SEQ,
};

struct spec_node {
	enum spec_node_type type;
	struct spec_pos pos;
	char *text;  /* scalar text, NUL-terminated */
	bool quoted; /* a quoted scalar is always a string, never null/bool/number */
	struct spec_node **keys;   /* map keys (scalars), parallel to values */
	struct spec_node **values; /* map values or sequence items */
	size_t count;
	size_t capacity;
};

enum spec_format spec_format_detect(const char *file_name, const char *data, size_t size);
/* Returns the root node, or NULL after recording the syntax error in diag. */
struct spec_node *spec_tree_parse(const char *data, size_t size, enum spec_format format,
				  const char *file, struct spec_diagnostics *diag);
void spec_node_free(struct spec_node *node);
const struct spec_node *spec_node_map_get(const struct spec_node *map, const char *key);
bool spec_node_is_null(const struct spec_node *node);
const char *spec_node_type_name(const struct spec_node *node);

/* State of the schema walk: where findings go and whether memory ran out on the way. */
struct spec_walk {
	struct spec *spec;
	const char *file;
	struct spec_diagnostics *diag;
	bool out_of_memory;
	bool kind_known;
};

/* Typed field readers (spec_walk.c): 0 absent or null, 1 read, -1 wrong (already reported). */
void spec_walk_report(struct spec_walk *walk, enum spec_severity severity, struct spec_pos pos,
		      const char *hint, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
char *spec_walk_strdup(struct spec_walk *walk, const char *text);
/* Warns about keys outside known (NULL: any key goes) and rejects repeated keys. */
void spec_walk_check_keys(struct spec_walk *walk, const struct spec_node *map, const char *path,
			  const char *const *known, size_t known_count);
bool spec_walk_expect(struct spec_walk *walk, const struct spec_node *node, const char *path,
		      enum spec_node_type type);
const struct spec_node *spec_walk_field(const struct spec_node *map, const char *key);
int spec_walk_string(struct spec_walk *walk, const struct spec_node *map, const char *path,
		     const char *key, char **out);
int spec_walk_uint(struct spec_walk *walk, const struct spec_node *map, const char *path,
		   const char *key, uint32_t max, uint32_t *out);
int spec_walk_bool(struct spec_walk *walk, const struct spec_node *map, const char *path,
		   const char *key, bool *out);
int spec_walk_enum(struct spec_walk *walk, const struct spec_node *map, const char *path,
		   const char *key, const char *const *names, size_t count, int *out);
int spec_walk_string_list(struct spec_walk *walk, const struct spec_node *map, const char *path,
			  const char *key, char ***out, size_t *count, struct spec_pos **positions);
void spec_walk_note_feature(struct spec_walk *walk, enum spec_feature feature,
			    struct spec_pos pos);

/* snprintf for messages and field paths, where cutting an overlong text short is fine. */
int spec_format(char *buffer, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define SPEC_ARRAY_SIZE(array) (sizeof(array) / sizeof((array)[0]))

/* Tree to structs: the schema walk. Returns NULL only on allocation failure. */
struct spec *spec_from_tree(struct spec_walk *walk, const struct spec_node *root);
/* Cross-field rules; findings go to diag. Returns -ENOMEM or 0. */
int spec_validate(struct spec_walk *walk);
/* spec_workflow_plan() that also gives the index of a step on the cycle for -ELOOP. */
int spec_workflow_plan_with_cycle(const struct spec_workflow *workflow,
				  struct spec_workflow_plan *plan, char **cycle, size_t *cycle_step);
/* The closest candidate within a small edit distance, or NULL. */
const char *spec_suggest(const char *word, const char *const *candidates, size_t count);

void spec_env_free(struct spec_env *env);
void spec_strv_free(char **strv, size_t count);

#endif
