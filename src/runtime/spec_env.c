/*
 * Sandbox environment resolution: `NAME: ""` in a spec means "copy NAME from the host".
 *
 * The host's environment is read through a lookup callback rather than getenv() directly, so
 * tests can supply a fixed environment and the daemon can supply a request's. Resolution
 * happens once, at load, so everything downstream sees one explicit list; copied entries keep
 * copy_from_host set so inspect output can show where a value came from without printing it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec_internal.h"

/* The host's value of this variable wins over the spec's, as upstream does for local LLMs. */
#define SPEC_ENV_HOST_WINS_NAME "OLLAMA_BASE_URL"

void spec_strv_free(char **strv, size_t count)
{
	for (size_t i = 0; strv && i < count; i++)
		free(strv[i]);
	free(strv);
}

static void spec_env_var_free(struct spec_env_var *var)
{
	free(var->name);
	free(var->value);
}

void spec_env_free(struct spec_env *env)
{
	for (size_t i = 0; env->vars && i < env->count; i++)
		spec_env_var_free(&env->vars[i]);
	free(env->vars);
	env->vars = NULL;
	env->count = 0;
}

static int spec_env_replace_value(struct spec_env_var *var, const char *value)
{
	char *copy = strdup(value);

	if (!copy)
		return -ENOMEM;
	free(var->value);
	var->value = copy;
	return 0;
}

/* Resolves one entry; returns 1 to keep it, 0 to drop it, -ENOMEM. */
static int spec_env_resolve_var(struct spec_env_var *var, spec_env_lookup_fn lookup, void *ctx,
				const char *file, struct spec_diagnostics *diag)
{
	const char *host_value;

	if (!var->name)
		return 0;
	host_value = lookup(var->name, ctx);
	if (var->copy_from_host && !host_value) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_WARNING, file, var->pos,
				     "export it before running, or give it a value in the spec",
				     "env %s is \"\" (copy from the host) but the host does not set "
				     "it; the sandbox will not have it", var->name);
		return 0;
	}
	if (host_value && (var->copy_from_host || strcmp(var->name, SPEC_ENV_HOST_WINS_NAME) == 0))
		return spec_env_replace_value(var, host_value) < 0 ? -ENOMEM : 1;
	return 1;
}

int spec_env_resolve(struct spec_env *env, spec_env_lookup_fn lookup, void *ctx,
		     const char *file, struct spec_diagnostics *diag)
{
	size_t kept = 0;
	int rc = 0;

	for (size_t i = 0; i < env->count; i++) {
		struct spec_env_var var = env->vars[i];
		int keep = rc < 0 ? 1 : spec_env_resolve_var(&var, lookup, ctx, file, diag);

		if (keep < 0) {
			rc = keep;
			keep = 1;
		}
		if (keep)
			env->vars[kept++] = var;
		else
			spec_env_var_free(&var);
	}
	env->count = kept;
	return rc;
}
