/*
 * The skill plan: one function per skill kind decides name, source and guest file; MCP
 * entries are gathered into one JSON document because claude-code reads a single config.
 * Reading host files happens here and only here, so a missing file fails before any VM boots.
 */
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/skills.h"

#define SKILLS_FILE_MAX (4u << 20)
#define SKILLS_MD_SUFFIX ".md"
#define SKILLS_REMOTE_BASE "https://raw.githubusercontent.com/"

static void skills_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void skills_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* "dir/hn-api.md" -> "hn-api" */
static char *skills_file_stem(const char *path)
{
	const char *base = strrchr(path, '/');
	size_t len;

	base = base ? base + 1 : path;
	len = strlen(base);
	if (len > strlen(SKILLS_MD_SUFFIX) &&
	    strcmp(base + len - strlen(SKILLS_MD_SUFFIX), SKILLS_MD_SUFFIX) == 0)
		len -= strlen(SKILLS_MD_SUFFIX);
	return strndup(base, len);
}

static char *skills_guest_md(const char *name)
{
	char *path;

	if (asprintf(&path, "%s/%s%s", SKILLS_GUEST_DIR, name, SKILLS_MD_SUFFIX) < 0)
		return NULL;
	return path;
}

/* The MCP server name for "mcp:<cmd>": the command's basename. */
static char *skills_mcp_name(const struct spec_skill *skill)
{
	const char *command = skill->command ? skill->command : skill->value;
	const char *base = command ? strrchr(command, '/') : NULL;
	size_t len;

	base = base ? base + 1 : (command ? command : "mcp");
	len = strcspn(base, " ");
	return strndup(base, len ? len : strlen(base));
}

static int skills_describe_one(const struct spec_skill *skill, struct skill_plan_item *item)
{
	const char *value = skill->value ? skill->value : "";

	item->type = skill->type;
	switch (skill->type) {
	case SPEC_SKILL_FILE:
		item->name = skills_file_stem(value);
		item->source = strdup(value);
		item->guest_path = item->name ? skills_guest_md(item->name) : NULL;
		return item->name && item->source && item->guest_path ? 0 : -ENOMEM;
	case SPEC_SKILL_INLINE:
		item->name = strdup(skill->name ? skill->name : "inline");
		item->source = strdup("inline");
		item->guest_path = item->name ? skills_guest_md(item->name) : NULL;
		return item->name && item->source && item->guest_path ? 0 : -ENOMEM;
	case SPEC_SKILL_MCP:
		item->name = skills_mcp_name(skill);
		item->source = strdup(skill->command ? skill->command : value);
		return item->name && item->source ? 0 : -ENOMEM;
	case SPEC_SKILL_REMOTE:
		item->name = strdup(value);
		if (asprintf(&item->source, SKILLS_REMOTE_BASE "%s", value) < 0)
			item->source = NULL;
		return item->name && item->source ? 0 : -ENOMEM;
	case SPEC_SKILL_OCI:
		item->name = strdup(skill->mount ? skill->mount : "oci");
		item->source = strdup(skill->image ? skill->image : "");
		return item->name && item->source ? 0 : -ENOMEM;
	case SPEC_SKILL_AGENT:
	case SPEC_SKILL_CLI:
		item->name = strdup(value);
		item->source = strdup("image");
		return item->name && item->source ? 0 : -ENOMEM;
	}
	return -EINVAL;
}

static void skills_item_free(struct skill_plan_item *item)
{
	free(item->name);
	free(item->source);
	free(item->guest_path);
	free(item->content);
}

void skills_plan_free(struct skill_plan *plan)
{
	for (size_t i = 0; i < plan->count; i++)
		skills_item_free(&plan->items[i]);
	free(plan->items);
	free(plan->mcp_json);
	memset(plan, 0, sizeof(*plan));
}

int skills_plan_describe(const struct spec_skill *skills, size_t count, struct skill_plan *plan)
{
	memset(plan, 0, sizeof(*plan));
	if (!count)
		return 0;
	plan->items = calloc(count, sizeof(*plan->items));
	if (!plan->items)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		plan->count++;
		if (skills_describe_one(&skills[i], &plan->items[i]) < 0) {
			skills_plan_free(plan);
			return -ENOMEM;
		}
	}
	return 0;
}

static int skills_read_file(const char *path, struct skill_plan_item *item, char *err,
			    size_t errlen)
{
	FILE *file = fopen(path, "rb");
	char *data;
	size_t got;

	if (!file) {
		int rc = -errno;

		skills_error(err, errlen, "skill file %s cannot be read (%s): fix the path after 'file:' (relative paths are taken from the current directory)",
			     path, strerror(-rc));
		return rc;
	}
	data = malloc(SKILLS_FILE_MAX + 1);
	if (!data) {
		fclose(file);
		return -ENOMEM;
	}
	got = fread(data, 1, SKILLS_FILE_MAX + 1, file);
	fclose(file);
	if (got > SKILLS_FILE_MAX) {
		free(data);
		skills_error(err, errlen, "skill file %s is larger than %u MiB: trim it", path,
			     SKILLS_FILE_MAX >> 20);
		return -EFBIG;
	}
	data[got] = '\0';
	item->content = data;
	item->content_len = got;
	return 0;
}

static json_t *skills_mcp_entry(const struct spec_skill *skill)
{
	json_t *entry = json_object();
	json_t *args = json_array();
	json_t *env = json_object();

	if (!entry || !args || !env)
		goto fail;
	for (size_t i = 0; i < skill->arg_count; i++)
		json_array_append_new(args, json_string(skill->args[i]));
	for (size_t i = 0; i < skill->env.count; i++)
		json_object_set_new(env, skill->env.vars[i].name,
				    json_string(skill->env.vars[i].value ?
							skill->env.vars[i].value : ""));
	if (json_object_set_new(entry, "command",
				json_string(skill->command ? skill->command : skill->value)) ||
	    json_object_set_new(entry, "args", args) || json_object_set_new(entry, "env", env))
		goto fail_entry;
	return entry;
fail:
	json_decref(args);
	json_decref(env);
fail_entry:
	json_decref(entry);
	return NULL;
}

/* Reads what each skill needs from the host and refuses what cannot run offline. */
static int skills_fill_one(const struct spec_skill *skill, struct skill_plan_item *item,
			   json_t *mcp_servers, char *err, size_t errlen)
{
	switch (skill->type) {
	case SPEC_SKILL_FILE:
		return skills_read_file(skill->value, item, err, errlen);
	case SPEC_SKILL_INLINE:
		item->content = strdup(skill->content ? skill->content : "");
		item->content_len = item->content ? strlen(item->content) : 0;
		return item->content ? 0 : -ENOMEM;
	case SPEC_SKILL_MCP:
		if (json_object_set_new(mcp_servers, item->name, skills_mcp_entry(skill)))
			return -ENOMEM;
		return 0;
	case SPEC_SKILL_REMOTE:
		skills_error(err, errlen, "remote skill '%s' would be fetched from %s, but voidbox runs offline: download SKILL.md yourself and use 'file:<path>' instead",
			     item->name, item->source);
		return -ENETUNREACH;
	case SPEC_SKILL_OCI:
		skills_error(err, errlen, "OCI skill image '%s' cannot be mounted yet: copy its files into the guest image or use 'file:' skills",
			     item->source);
		return -ENOTSUP;
	case SPEC_SKILL_AGENT:
	case SPEC_SKILL_CLI:
		return 0;
	}
	return -EINVAL;
}

int skills_plan_build(const struct spec_skill *skills, size_t count, struct skill_plan *plan,
		      char *err, size_t errlen)
{
	json_t *mcp_servers = json_object();
	json_t *doc;
	int rc;

	if (!mcp_servers)
		return -ENOMEM;
	rc = skills_plan_describe(skills, count, plan);
	if (rc < 0) {
		skills_error(err, errlen, "out of memory while planning skills");
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		rc = skills_fill_one(&skills[i], &plan->items[i], mcp_servers, err, errlen);
		if (rc < 0)
			goto fail;
	}
	if (json_object_size(mcp_servers)) {
		doc = json_pack("{sO}", "mcpServers", mcp_servers);
		plan->mcp_json = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
		json_decref(doc);
		if (!plan->mcp_json) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	rc = 0;
	goto out;
fail:
	if (rc == -ENOMEM)
		skills_error(err, errlen, "out of memory while planning skills");
	skills_plan_free(plan);
out:
	json_decref(mcp_servers);
	return rc;
}
