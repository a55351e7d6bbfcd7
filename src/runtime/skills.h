/*
 * Skills: what a spec's `skills:` list puts into the guest before the agent starts. The work is
 * split in two so it can be checked without a VM: skills_plan_build() reads the host side
 * (files) and decides every guest write, and the agent runner carries the plan out with box
 * file calls. `voidbox skills` prints the same plan, so what a user sees listed is what lands.
 *
 * Provisioning per kind: file and inline skills become /workspace/.claude/skills/<name>.md;
 * mcp entries are collected into one /workspace/.mcp.json; agent and cli skills are markers
 * (the binary must already be in the image); remote skills need the network and fail clearly
 * here; oci skills are refused until image mounts exist.
 */
#ifndef VOIDBOX_RUNTIME_SKILLS_H
#define VOIDBOX_RUNTIME_SKILLS_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/spec.h"

#define SKILLS_GUEST_DIR "/workspace/.claude/skills"
#define SKILLS_MCP_CONFIG_PATH "/workspace/.mcp.json"

struct skill_plan_item {
	enum spec_skill_type type;
	char *name;	  /* the skill's name (file stem, inline name, binary, server) */
	char *source;	  /* where it comes from, for listings: a host path, "inline", ... */
	char *guest_path; /* the file written into the guest; NULL for markers and mcp */
	char *content;	  /* what is written there */
	size_t content_len;
};

struct skill_plan {
	struct skill_plan_item *items;
	size_t count;
	char *mcp_json; /* the whole .mcp.json, NULL when no mcp skill */
};

/*
 * Builds the plan for skills. Relative file: paths are resolved against the current directory,
 * as upstream does. On failure returns -errno with a sentence in err saying what to change
 * (-ENOENT unreadable file, -ENETUNREACH remote skill, -ENOTSUP oci skill, -ENOMEM).
 */
int skills_plan_build(const struct spec_skill *skills, size_t count, struct skill_plan *plan,
		      char *err, size_t errlen);
void skills_plan_free(struct skill_plan *plan);

/*
 * Lists skills without reading files (for `voidbox skills`): one item each with name and
 * source filled, guest_path set where the skill would land, content NULL. 0 or -ENOMEM.
 */
int skills_plan_describe(const struct spec_skill *skills, size_t count, struct skill_plan *plan);

#endif
