/*
 * The backend-independent half of a box: choosing mock or local from the configured mode,
 * merging the environment once at open time (so an exec only layers the request's variables
 * on top), and the per-thread error sentence. The backends behind box->ops never see the
 * mode or the spec.
 *
 * Every open box is on one list, so a cancel (a signal to `voidbox run`) reaches the boxes of
 * every runner without the runners taking part: box_cancel_all interrupts each through its
 * backend, the execs under way fail, and each runner unwinds and closes its box as after any
 * failure. A box is taken off the list before its backend closes it, under the list's lock,
 * so an interrupt never meets a box being freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "runtime/box_internal.h"
#include "store/guest_image.h"

#define BOX_ERROR_MAX 1024
#define BOX_CANCELLED_ERROR "the run was cancelled; the sandbox was shut down"

static _Thread_local char box_error[BOX_ERROR_MAX];

static pthread_mutex_t box_open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct box *box_open_list;
static bool box_cancel_requested; /* under box_open_lock */

static const char *const box_mode_names[] = {
	[BOX_MODE_AUTO] = "auto",
	[BOX_MODE_MOCK] = "mock",
	[BOX_MODE_LOCAL] = "local",
};

void box_set_error(const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	vsnprintf(box_error, sizeof(box_error), fmt, args);
	va_end(args);
}

const char *box_last_error(void)
{
	return box_error;
}

char *box_copy_bytes(const void *data, size_t len)
{
	char *copy = malloc(len + 1);

	if (!copy)
		return NULL;
	if (len)
		memcpy(copy, data, len);
	copy[len] = '\0';
	return copy;
}

const char *box_mode_name(enum box_mode mode)
{
	if ((size_t)mode >= sizeof(box_mode_names) / sizeof(box_mode_names[0]))
		return "unknown";
	return box_mode_names[mode];
}

int box_mode_parse(const char *name, enum box_mode *out)
{
	for (size_t i = 0; i < sizeof(box_mode_names) / sizeof(box_mode_names[0]); i++) {
		if (strcmp(name, box_mode_names[i]) == 0) {
			*out = (enum box_mode)i;
			return 0;
		}
	}
	return -EINVAL;
}

enum box_mode box_mode_from_spec(enum spec_sandbox_mode mode)
{
	switch (mode) {
	case SPEC_SANDBOX_MODE_MOCK:
		return BOX_MODE_MOCK;
	case SPEC_SANDBOX_MODE_LOCAL:
		return BOX_MODE_LOCAL;
	case SPEC_SANDBOX_MODE_AUTO:
		break;
	}
	return BOX_MODE_AUTO;
}

void box_config_from_spec(struct box_config *cfg, const struct spec *spec,
			  const struct spec_box *box)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mode = box_mode_from_spec(spec->sandbox.mode);
	cfg->name = box ? box->name : spec->name;
	cfg->kernel = spec->sandbox.kernel;
	cfg->initramfs = spec->sandbox.initramfs;
	cfg->memory_mb = spec->sandbox.memory_mb;
	cfg->vcpus = spec->sandbox.vcpus;
	cfg->env = &spec->sandbox.env;
	cfg->snapshot = spec->sandbox.snapshot;
	cfg->network = spec->sandbox.network;
	cfg->network_spec = &spec->sandbox;
	cfg->mounts = spec->sandbox.mounts;
	cfg->mount_count = spec->sandbox.mount_count;
	cfg->image = spec->sandbox.image;
	if (box && box->has_sandbox) {
		cfg->box_mounts = box->sandbox.mounts;
		cfg->box_mount_count = box->sandbox.mount_count;
		struct spec_box_resources resources;

		spec_box_resources(spec, box, &resources);
		cfg->memory_mb = resources.memory_mb;
		cfg->vcpus = resources.vcpus;
		cfg->snapshot = resources.snapshot;
		cfg->network = resources.network;
		cfg->env_override = &box->sandbox.env;
	}
}

/* Sets name=value in the box's env, replacing an earlier entry of the same name. */
static int box_env_set(struct box *box, const char *name, const char *value)
{
	struct box_env_var *grown;
	char *name_copy, *value_copy;

	for (size_t i = 0; i < box->env_count; i++) {
		if (strcmp(box->env[i].name, name) == 0) {
			value_copy = strdup(value);
			if (!value_copy)
				return -ENOMEM;
			free((char *)box->env[i].value);
			box->env[i].value = value_copy;
			return 0;
		}
	}
	grown = realloc(box->env, (box->env_count + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	box->env = grown;
	name_copy = strdup(name);
	value_copy = strdup(value);
	if (!name_copy || !value_copy) {
		free(name_copy);
		free(value_copy);
		return -ENOMEM;
	}
	box->env[box->env_count].name = name_copy;
	box->env[box->env_count].value = value_copy;
	box->env_count++;
	return 0;
}

static int box_env_add_spec(struct box *box, const struct spec_env *env)
{
	if (!env)
		return 0;
	for (size_t i = 0; i < env->count; i++) {
		const struct spec_env_var *var = &env->vars[i];
		int rc;

		/* an unresolved copy-from-host entry has no value to pass on */
		if (var->copy_from_host && !var->value)
			continue;
		rc = box_env_set(box, var->name, var->value ? var->value : "");
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void box_free(struct box *box)
{
	for (size_t i = 0; i < box->env_count; i++) {
		free((char *)box->env[i].name);
		free((char *)box->env[i].value);
	}
	free(box->env);
	free(box->name);
	free(box);
}

/*
 * Picks mock (only when the spec asks for it) or local, resolving the guest image into
 * box->kernel/initramfs; auto and local both need a real VM.
 */
static int box_resolve_mode(struct box *box, const struct box_config *cfg, char *err,
			    size_t errlen)
{
	struct guest_image_paths image;
	char reason[BOX_ERROR_MAX];

	if (cfg->mode == BOX_MODE_MOCK) {
		box->mode = BOX_MODE_MOCK;
		return 0;
	}
	if (cfg->image_name) {
		if (guest_image_resolve_named(cfg->image_name, cfg->kernel, cfg->initramfs, &image,
					      reason, sizeof(reason)) < 0) {
			snprintf(err, errlen, "this agent runs on the %s image: %s", cfg->image_name,
				 reason);
			return -ENOENT;
		}
	} else if (guest_image_resolve(cfg->kernel, cfg->initramfs, &image, reason,
				       sizeof(reason)) < 0) {
		/* auto never turns into the scripted mock: a run must not pass for a real one */
		snprintf(err, errlen, "sandbox mode %s needs a VM but %s: build one with `voidbox "
			 "image build`, or set sandbox.mode: mock to run the scripted stand-in "
			 "instead", cfg->mode == BOX_MODE_LOCAL ? "local" : "auto", reason);
		return -ENOENT;
	}
	box->mode = BOX_MODE_LOCAL;
	snprintf(box->kernel, sizeof(box->kernel), "%s", image.kernel);
	snprintf(box->initramfs, sizeof(box->initramfs), "%s", image.initramfs);
	return 0;
}

/* Puts box on the open list; false (and not on it) once a cancel was asked. */
static bool box_list_add(struct box *box)
{
	bool added;

	pthread_mutex_lock(&box_open_lock);
	added = !box_cancel_requested;
	if (added) {
		box->open_next = box_open_list;
		if (box_open_list)
			box_open_list->open_prev = box;
		box_open_list = box;
	}
	pthread_mutex_unlock(&box_open_lock);
	return added;
}

static void box_list_remove(struct box *box)
{
	pthread_mutex_lock(&box_open_lock);
	if (box->open_prev)
		box->open_prev->open_next = box->open_next;
	else
		box_open_list = box->open_next;
	if (box->open_next)
		box->open_next->open_prev = box->open_prev;
	box->open_prev = box->open_next = NULL;
	pthread_mutex_unlock(&box_open_lock);
}

bool box_cancelled(void)
{
	bool cancelled;

	pthread_mutex_lock(&box_open_lock);
	cancelled = box_cancel_requested;
	pthread_mutex_unlock(&box_open_lock);
	return cancelled;
}

static void box_interrupt_open_locked(bool force)
{
	for (struct box *box = box_open_list; box; box = box->open_next)
		if (box->ops->interrupt)
			box->ops->interrupt(box, force);
}

void box_cancel_all(bool force)
{
	bool first;

	pthread_mutex_lock(&box_open_lock);
	first = !box_cancel_requested;
	box_cancel_requested = true;
	if (first || force)
		box_interrupt_open_locked(force);
	pthread_mutex_unlock(&box_open_lock);
}

int box_open(const struct box_config *cfg, struct box **out, char *err, size_t errlen)
{
	struct box *box;
	int rc;

	*out = NULL;
	if (box_cancelled()) {
		snprintf(err, errlen, "the run was cancelled; no sandbox is started for it");
		return -ECANCELED;
	}
	box = calloc(1, sizeof(*box));
	if (!box || !(box->name = strdup(cfg->name ? cfg->name : "box"))) {
		free(box);
		snprintf(err, errlen, "out of memory opening a sandbox");
		return -ENOMEM;
	}
	rc = box_env_add_spec(box, cfg->env);
	if (rc == 0)
		rc = box_env_add_spec(box, cfg->env_override);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory copying the sandbox environment");
		goto fail;
	}
	rc = box_resolve_mode(box, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	if (box->mode == BOX_MODE_MOCK)
		rc = box_mock_open(box, cfg, err, errlen);
	else
		rc = box_local_open(box, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	if (!box_list_add(box)) {
		box->ops->close(box, false);
		snprintf(err, errlen, "the run was cancelled while this sandbox was starting");
		rc = -ECANCELED;
		goto fail;
	}
	log_debug("box", "[box:%s] open in %s mode", box->name, box_mode_name(box->mode));
	*out = box;
	return 0;
fail:
	box_free(box);
	return rc;
}

enum box_mode box_mode(const struct box *box)
{
	return box->mode;
}

const char *box_kernel_path(const struct box *box)
{
	return box->kernel;
}

const char *box_initramfs_path(const struct box *box)
{
	return box->initramfs;
}

void box_close(struct box *box, bool keep_logs)
{
	if (!box)
		return;
	box_list_remove(box);
	/* a cancelled run's failures are the cancel's: its serial logs would explain nothing */
	box->ops->close(box, keep_logs && !box_cancelled());
	box_free(box);
}

/* The box's env with the request's variables layered on top (a request name wins). */
static int box_merge_env(const struct box *box, const struct box_exec_request *req,
			 struct box_env_var **merged, size_t *count)
{
	struct box_env_var *env;
	size_t n = 0;

	env = calloc(box->env_count + req->env_count + 1, sizeof(*env));
	if (!env)
		return -ENOMEM;
	for (size_t i = 0; i < box->env_count; i++) {
		bool overridden = false;

		for (size_t j = 0; j < req->env_count && !overridden; j++)
			overridden = strcmp(req->env[j].name, box->env[i].name) == 0;
		if (!overridden)
			env[n++] = box->env[i];
	}
	for (size_t j = 0; j < req->env_count; j++)
		env[n++] = req->env[j];
	*merged = env;
	*count = n;
	return 0;
}

int box_exec(struct box *box, const struct box_exec_request *req, struct box_exec_result *out)
{
	struct box_env_var *env = NULL;
	size_t env_count = 0;
	uint64_t start = clock_monotonic_ms();
	int rc;

	memset(out, 0, sizeof(*out));
	out->exit_code = BOX_EXIT_NOT_RUN;
	if (!req->program || !req->program[0]) {
		out->error = strdup("no program to run: give the step a run.program");
		rc = -EINVAL;
		goto fill;
	}
	rc = box_merge_env(box, req, &env, &env_count);
	if (rc == 0)
		rc = box->ops->exec(box, req, env, env_count, out);
	free(env);
	if (rc < 0 && box_cancelled()) {
		/* whatever the backend saw (a connection the guest ended), the cancel caused it */
		free(out->error);
		out->error = strdup(BOX_CANCELLED_ERROR);
		rc = -ECANCELED;
	}
	if (rc < 0 && !out->error)
		out->error = strdup(box_last_error()[0] ? box_last_error() : strerror(-rc));
fill:
	if (!out->stdout_data)
		out->stdout_data = box_copy_bytes("", 0);
	if (!out->stderr_data)
		out->stderr_data = box_copy_bytes("", 0);
	if (!out->stdout_data || !out->stderr_data) {
		box_exec_result_free(out);
		return -ENOMEM;
	}
	if (!out->duration_ms)
		out->duration_ms = clock_monotonic_ms() - start;
	return rc;
}

void box_exec_result_free(struct box_exec_result *result)
{
	free(result->stdout_data);
	free(result->stderr_data);
	free(result->error);
	memset(result, 0, sizeof(*result));
}

int box_write_file(struct box *box, const char *path, const void *data, size_t len)
{
	return box->ops->write_file(box, path, data, len);
}

int box_read_file(struct box *box, const char *path, char **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	return box->ops->read_file(box, path, data, len);
}

int box_mkdir_p(struct box *box, const char *path)
{
	return box->ops->mkdir_p(box, path);
}

int box_stop_service(struct box *box, const char *name)
{
	return box->ops->stop_service(box, name);
}
