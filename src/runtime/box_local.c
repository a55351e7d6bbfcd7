/*
 * The local box: one real micro-VM through src/sandbox, its guest agent driven over the
 * control channel. The channel multiplexes calls by request id and the agent runs each exec
 * off its connection thread, so concurrent box_exec calls from a workflow level really run
 * side by side in the guest; this file adds no lock of its own.
 *
 * Requests are translated field by field into the wire structs (borrowing the caller's
 * strings, never freeing them) and responses into the box's NUL-terminated buffers.
 *
 * A service exec runs under a small shell prologue that records its pid in a file under /tmp
 * and then execs the program, so box_stop_service() can SIGTERM exactly that program from a
 * second exec; the wire protocol needs no signal message for it.
 *
 * With cfg->on_telemetry set, one thread holds a telemetry subscription for the box's life and
 * hands each guest sample on. Closing asks it to end at the next batch and waits a bounded
 * time; a guest that sends none by then has the channel cancelled under the thread.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "runtime/box_internal.h"
#include "devices/net.h"
#include "sandbox/sandbox.h"
#include "store/oci_image.h"

/* a CIDR prefix naming one IPv4 address */
#define LOCAL_SINGLE_ADDRESS_PREFIX 32
#define LOCAL_FILE_TIMEOUT_MS CONTROL_CHANNEL_TIMEOUT_DEFAULT
#define LOCAL_ERROR_MAX 1024
#define LOCAL_PIDFILE_MAX 192
#define LOCAL_SERVICE_NAME_MAX 128 /* a longer name is cut in its pid file name */
#define LOCAL_PIDFILE_FORMAT "/tmp/.voidbox-service-%s.pid"
/* the service prologue: $1 is the pid file, the rest the program and its arguments */
#define LOCAL_SERVICE_SCRIPT "echo $$ > \"$1\" && shift && exec \"$@\""
/* the stop script exits LOCAL_STOP_NOT_YET while the prologue has not written the pid file */
#define LOCAL_STOP_NOT_YET 3
#define LOCAL_STRINGIFY(x) #x
#define LOCAL_TEXT(x) LOCAL_STRINGIFY(x)
#define LOCAL_STOP_SCRIPT                                                                      \
	"[ -f \"$1\" ] || exit " LOCAL_TEXT(LOCAL_STOP_NOT_YET) "; kill -TERM \"$(cat \"$1\")\" 2>/dev/null; rm -f \"$1\"; exit 0"
#define LOCAL_SERVICE_ARGV0 "voidbox-service"
#define LOCAL_SERVICE_PROLOGUE_ARGS 4 /* -c SCRIPT ARGV0 PIDFILE */
#define LOCAL_STOP_TIMEOUT_SECS 30u

#define LOCAL_TELEMETRY_INTERVAL_MS 1000u
/* how long close waits for the telemetry thread before cancelling the channel under it */
#define LOCAL_TELEMETRY_STOP_WAIT_MS 3000L
#define LOCAL_NS_PER_MS 1000000L
#define LOCAL_NS_PER_SEC 1000000000L

struct local_telemetry {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t ended_cond;
	bool stopping;
	bool ended;
	box_telemetry_fn fn;
	void *opaque;
	const char *box_name; /* the box's own name, which outlives the thread */
	struct control_channel *channel;
};

struct local_box {
	struct sandbox *sandbox;
	struct local_telemetry telemetry;
};

static struct control_channel *local_channel(struct box *box)
{
	struct local_box *local = box->backend;

	return sandbox_channel(local->sandbox);
}

struct local_chunk_relay {
	const struct box_exec_request *req;
};

static void local_on_chunk(const struct proto_exec_output_chunk *chunk, void *opaque)
{
	struct local_chunk_relay *relay = opaque;

	relay->req->on_chunk(relay->req->chunk_opaque, chunk->stream == PROTO_STREAM_STDERR,
			     chunk->data.data, chunk->data.len);
}

static int local_fill_result(const struct box_exec_request *req,
			     const struct proto_exec_response *response,
			     struct box_exec_result *out)
{
	out->exit_code = response->exit_code;
	out->stdout_data = box_copy_bytes(response->stdout_data.data, response->stdout_data.len);
	out->stdout_len = response->stdout_data.len;
	out->stderr_data = box_copy_bytes(response->stderr_data.data, response->stderr_data.len);
	out->stderr_len = response->stderr_data.len;
	if (response->error && !(out->error = strdup(response->error)))
		return -ENOMEM;
	if (!out->stdout_data || !out->stderr_data)
		return -ENOMEM;
	out->timed_out = req->timeout_secs > 0 && response->code == PROTO_ERROR_TIMED_OUT;
	if (response->has_duration)
		out->duration_ms = response->duration_ms;
	return 0;
}

/* The pid file of service name; characters outside [A-Za-z0-9._-] become '_'. */
static void local_pidfile(const char *name, char *out, size_t len)
{
	char safe[LOCAL_SERVICE_NAME_MAX];
	size_t i;

	for (i = 0; name[i] && i + 1 < sizeof(safe); i++) {
		char c = name[i];

		safe[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
					  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'
				  ? c
				  : '_';
	}
	safe[i] = '\0';
	snprintf(out, len, LOCAL_PIDFILE_FORMAT, safe);
}

/* argv of `sh -c PROLOGUE ARGV0 PIDFILE PROGRAM ARGS...` for a service exec; NULL on -ENOMEM. */
static char **local_service_argv(const struct box_exec_request *req, const char *pidfile,
				 size_t *count)
{
	char **argv = calloc(LOCAL_SERVICE_PROLOGUE_ARGS + 1 + req->arg_count, sizeof(*argv));
	size_t n = 0;

	if (!argv)
		return NULL;
	argv[n++] = "-c";
	argv[n++] = LOCAL_SERVICE_SCRIPT;
	argv[n++] = LOCAL_SERVICE_ARGV0;
	argv[n++] = (char *)pidfile;
	argv[n++] = (char *)req->program;
	for (size_t i = 0; i < req->arg_count; i++)
		argv[n++] = (char *)req->args[i];
	*count = n;
	return argv;
}

static int local_exec(struct box *box, const struct box_exec_request *req,
		      const struct box_env_var *env, size_t env_count,
		      struct box_exec_result *out)
{
	struct proto_exec_request wire;
	struct proto_exec_response response;
	struct local_chunk_relay relay = { .req = req };
	char pidfile[LOCAL_PIDFILE_MAX];
	char **service_argv = NULL;
	int rc;

	memset(&wire, 0, sizeof(wire));
	memset(&response, 0, sizeof(response));
	wire.program = (char *)req->program;
	wire.args = (char **)req->args;
	wire.args_count = req->arg_count;
	if (req->service_name) {
		local_pidfile(req->service_name, pidfile, sizeof(pidfile));
		service_argv = local_service_argv(req, pidfile, &wire.args_count);
		if (!service_argv) {
			box_set_error("out of memory building the exec request");
			return -ENOMEM;
		}
		wire.program = "sh";
		wire.args = service_argv;
	}
	wire.stdin_data.data = (uint8_t *)req->stdin_data;
	wire.stdin_data.len = req->stdin_data ? req->stdin_len : 0;
	wire.working_dir = (char *)req->working_dir;
	wire.has_timeout = req->timeout_secs > 0;
	wire.timeout_secs = req->timeout_secs;
	wire.env_count = env_count;
	if (env_count) {
		wire.env = calloc(env_count, sizeof(*wire.env));
		if (!wire.env) {
			free(service_argv);
			box_set_error("out of memory building the exec request");
			return -ENOMEM;
		}
		for (size_t i = 0; i < env_count; i++) {
			wire.env[i].key = (char *)env[i].name;
			wire.env[i].value = (char *)env[i].value;
		}
	}
	struct local_box *local = box->backend;
	char err[LOCAL_ERROR_MAX];

	rc = sandbox_exec(local->sandbox, &wire, req->on_chunk ? local_on_chunk : NULL, &relay,
			  &response, err, sizeof(err));
	free(wire.env);
	free(service_argv);
	if (rc < 0) {
		box_set_error("%s", err);
		return rc;
	}
	rc = local_fill_result(req, &response, out);
	proto_exec_response_free(&response);
	if (rc < 0)
		box_set_error("out of memory reading the exec response");
	return rc;
}

static int local_write_file(struct box *box, const char *path, const void *data, size_t len)
{
	int rc = control_channel_write_file(local_channel(box), path, data, len, true,
					    LOCAL_FILE_TIMEOUT_MS);

	if (rc < 0)
		box_set_error("writing %s in the guest: %s", path, control_channel_last_error());
	return rc;
}

static int local_read_file(struct box *box, const char *path, char **data, size_t *len)
{
	struct proto_bytes bytes = { 0 };
	int rc = control_channel_read_file(local_channel(box), path, &bytes,
					   LOCAL_FILE_TIMEOUT_MS);

	if (rc < 0) {
		box_set_error("reading %s in the guest: %s", path, control_channel_last_error());
		return rc;
	}
	*data = box_copy_bytes(bytes.data, bytes.len);
	*len = bytes.len;
	free(bytes.data);
	if (!*data) {
		box_set_error("out of memory reading %s", path);
		return -ENOMEM;
	}
	return 0;
}

static int local_mkdir_p(struct box *box, const char *path)
{
	int rc = control_channel_mkdir_p(local_channel(box), path, LOCAL_FILE_TIMEOUT_MS);

	if (rc < 0)
		box_set_error("creating %s in the guest: %s", path, control_channel_last_error());
	return rc;
}

static int local_stop_service(struct box *box, const char *name)
{
	char pidfile[LOCAL_PIDFILE_MAX];
	const char *args[] = { "-c", LOCAL_STOP_SCRIPT, LOCAL_SERVICE_ARGV0, pidfile };
	struct proto_exec_request wire = { .program = "sh", .args = (char **)args,
					   .args_count = sizeof(args) / sizeof(args[0]),
					   .has_timeout = true,
					   .timeout_secs = LOCAL_STOP_TIMEOUT_SECS };
	struct proto_exec_response response = { 0 };
	struct local_box *local = box->backend;
	char err[LOCAL_ERROR_MAX];
	int rc;

	local_pidfile(name, pidfile, sizeof(pidfile));
	rc = sandbox_exec(local->sandbox, &wire, NULL, NULL, &response, err, sizeof(err));
	if (rc < 0)
		box_set_error("stopping service %s: %s", name, err);
	else if (response.exit_code == LOCAL_STOP_NOT_YET)
		rc = -EAGAIN;
	proto_exec_response_free(&response);
	return rc;
}

static int local_telemetry_batch(const struct proto_telemetry_batch *batch, void *opaque)
{
	struct local_telemetry *telemetry = opaque;
	struct box_telemetry_sample sample;
	bool stopping;

	pthread_mutex_lock(&telemetry->lock);
	stopping = telemetry->stopping;
	pthread_mutex_unlock(&telemetry->lock);
	if (stopping)
		return 1;
	if (!batch->has_system)
		return 0;
	sample = (struct box_telemetry_sample){ .seq = batch->seq,
						.timestamp_ms = batch->timestamp_ms,
						.system = batch->system };
	telemetry->fn(telemetry->opaque, telemetry->box_name, &sample);
	return 0;
}

static void *local_telemetry_thread(void *opaque)
{
	struct local_telemetry *telemetry = opaque;
	struct proto_subscribe_telemetry req = { .interval_ms = LOCAL_TELEMETRY_INTERVAL_MS };
	int rc = control_channel_subscribe_telemetry(telemetry->channel, &req,
						     local_telemetry_batch, telemetry);

	pthread_mutex_lock(&telemetry->lock);
	if (rc < 0 && !telemetry->stopping && !box_cancelled())
		log_warn("box", "[box:%s] guest telemetry ended: %s", telemetry->box_name,
			 control_channel_last_error());
	telemetry->ended = true;
	pthread_cond_broadcast(&telemetry->ended_cond);
	pthread_mutex_unlock(&telemetry->lock);
	return NULL;
}

static void local_telemetry_start(struct box *box, struct local_box *local,
				  const struct box_config *cfg)
{
	struct local_telemetry *telemetry = &local->telemetry;

	if (!cfg->on_telemetry)
		return;
	telemetry->fn = cfg->on_telemetry;
	telemetry->opaque = cfg->telemetry_opaque;
	telemetry->box_name = box->name;
	telemetry->channel = sandbox_channel(local->sandbox);
	pthread_mutex_init(&telemetry->lock, NULL);
	pthread_cond_init(&telemetry->ended_cond, NULL);
	telemetry->started = pthread_create(&telemetry->thread, NULL, local_telemetry_thread,
					    telemetry) == 0;
	if (!telemetry->started) {
		log_warn("box", "[box:%s] cannot start a thread for guest telemetry", box->name);
		pthread_cond_destroy(&telemetry->ended_cond);
		pthread_mutex_destroy(&telemetry->lock);
	}
}

static void local_telemetry_stop(struct local_telemetry *telemetry)
{
	struct timespec deadline;

	if (!telemetry->started)
		return;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_nsec += LOCAL_TELEMETRY_STOP_WAIT_MS * LOCAL_NS_PER_MS;
	deadline.tv_sec += deadline.tv_nsec / LOCAL_NS_PER_SEC;
	deadline.tv_nsec %= LOCAL_NS_PER_SEC;
	pthread_mutex_lock(&telemetry->lock);
	telemetry->stopping = true;
	while (!telemetry->ended)
		if (pthread_cond_timedwait(&telemetry->ended_cond, &telemetry->lock, &deadline) ==
		    ETIMEDOUT)
			break;
	if (!telemetry->ended)
		control_channel_cancel(telemetry->channel);
	pthread_mutex_unlock(&telemetry->lock);
	pthread_join(telemetry->thread, NULL);
	pthread_cond_destroy(&telemetry->ended_cond);
	pthread_mutex_destroy(&telemetry->lock);
	telemetry->started = false;
}

/* Politely, the agent syncs and powers off, which ends every exec under way; or at once. */
static void local_interrupt(struct box *box, bool force)
{
	struct local_box *local = box->backend;

	sandbox_interrupt(local->sandbox, force);
}

static void local_close(struct box *box, bool keep_logs)
{
	struct local_box *local = box->backend;

	local_telemetry_stop(&local->telemetry);
	sandbox_destroy(local->sandbox, keep_logs);
	free(local);
}

static const struct box_ops local_ops = {
	.exec = local_exec,
	.write_file = local_write_file,
	.read_file = local_read_file,
	.mkdir_p = local_mkdir_p,
	.stop_service = local_stop_service,
	.interrupt = local_interrupt,
	.close = local_close,
};

/* The box's sandbox: a cold boot, or a restore of its snapshot reference (sandbox_open). */
static int local_start(struct box *box, const struct box_config *cfg,
		       const struct sandbox_config *sandbox_cfg, struct sandbox **out, char *err,
		       size_t errlen)
{
	struct sandbox_open_info info;
	int rc;

	if (!cfg->snapshot)
		log_info("box", "[box:%s] booting a VM (%u MiB, %u vCPU, kernel %s)", box->name,
			 sandbox_cfg->memory_mb, sandbox_cfg->vcpus, box->kernel);
	rc = sandbox_open(sandbox_cfg, cfg->snapshot, false, out, &info, err, errlen);
	if (info.fell_back_to_cold_boot)
		log_warn("box", "[box:%s] %s", box->name, info.warning);
	if (rc < 0 && cfg->snapshot && !info.fell_back_to_cold_boot) {
		char reason[LOCAL_ERROR_MAX];

		snprintf(reason, sizeof(reason), "%s", err);
		snprintf(err, errlen, "sandbox.snapshot: %s", reason);
	}
	return rc;
}

static int local_network_cidrs(char *const *items, size_t count, const char *field,
			       struct net_policy *policy, bool allow, char *err, size_t errlen)
{
	for (size_t i = 0; i < count; i++) {
		struct net_cidr cidr;

		if (net_cidr_parse(items[i], &cidr) < 0) {
			snprintf(err, errlen, "sandbox.%s: '%s' is not an IPv4 CIDR such as "
				 "127.0.0.1/32", field, items[i]);
			return -EINVAL;
		}
		if ((allow ? net_policy_add_allow(policy, &cidr)
			   : net_policy_add_deny(policy, &cidr)) < 0) {
			snprintf(err, errlen, "sandbox.%s: at most %d entries", field, NET_MAX_CIDRS);
			return -EINVAL;
		}
	}
	return 0;
}

/* The spec's mounts, then the box's, as the sandbox takes them. */
static int local_mounts(const struct box_config *cfg, struct sandbox_config *sandbox_cfg,
			char *err, size_t errlen)
{
	const struct spec_mount *lists[] = { cfg->mounts, cfg->box_mounts };
	size_t counts[] = { cfg->mount_count, cfg->box_mount_count };

	for (size_t list = 0; list < sizeof(lists) / sizeof(lists[0]); list++) {
		for (size_t i = 0; i < counts[list]; i++) {
			struct sandbox_mount *mount;

			if (sandbox_cfg->mount_count >= SANDBOX_MAX_MOUNTS) {
				snprintf(err, errlen, "sandbox.mounts: at most %d mounts: share a "
					 "parent directory", SANDBOX_MAX_MOUNTS);
				return -E2BIG;
			}
			mount = &sandbox_cfg->mounts[sandbox_cfg->mount_count++];
			mount->host_dir = lists[list][i].host;
			mount->guest_dir = lists[list][i].guest;
			mount->read_only = lists[list][i].mode == SPEC_MOUNT_MODE_RO;
		}
	}
	return 0;
}

/* The spec's network (sandbox.network and its fields) as the device's config. */
static int local_network_config(const struct spec_sandbox *spec, struct net_config *out,
				char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	net_policy_init_default(&out->policy);
	if (local_network_cidrs(spec->network_allow, spec->network_allow_count, "network_allow",
				&out->policy, true, err, errlen) < 0 ||
	    local_network_cidrs(spec->network_deny, spec->network_deny_count, "network_deny",
				&out->policy, false, err, errlen) < 0)
		return -EINVAL;
	if (spec->port_count > NET_MAX_PUBLISH) {
		snprintf(err, errlen, "sandbox.ports: at most %d ports", NET_MAX_PUBLISH);
		return -EINVAL;
	}
	for (size_t i = 0; i < spec->port_count; i++) {
		if (net_publish_parse(spec->ports[i], &out->publish[i]) < 0) {
			snprintf(err, errlen, "sandbox.ports: '%s' is not HOST_PORT:GUEST_PORT",
				 spec->ports[i]);
			return -EINVAL;
		}
	}
	out->publish_count = (unsigned int)spec->port_count;
	if (spec->dns_server &&
	    net_dns_server_parse(spec->dns_server, &out->dns_server_addr,
				 &out->dns_server_port) < 0) {
		snprintf(err, errlen, "sandbox.dns_server: '%s' is not ADDR:PORT such as "
			 "127.0.0.1:5353", spec->dns_server);
		return -EINVAL;
	}
	return 0;
}

/*
 * A messaging agent reaches its sidecar at 10.0.2.2, the host's 127.0.0.1: an allow list gets
 * 127.0.0.1/32 added, and a deny list that covers it is worth a warning now, since inside the
 * guest the only symptom is a refused connection. Its member's port is granted: the sidecar
 * claims it, and the guests of every other VM are refused it.
 */
static void local_network_allow_sidecar(const char *name, uint16_t port, struct net_policy *policy)
{
	const struct net_cidr loopback = { .addr = NET_HOST_LOOPBACK_ADDR,
					   .prefix = LOCAL_SINGLE_ADDRESS_PREFIX };

	for (unsigned int i = 0; i < policy->deny_count; i++)
		if (net_cidr_contains(&policy->deny[i], NET_HOST_LOOPBACK_ADDR))
			log_warn("box", "[box:%s] sandbox.network_deny covers 127.0.0.1, which the guest reaches as 10.0.2.2: the agent cannot reach its messaging sidecar",
				 name);
	if (policy->allow_count && net_policy_add_allow(policy, &loopback) < 0)
		log_warn("box", "[box:%s] sandbox.network_allow is full: 127.0.0.1/32 for the messaging sidecar was not added",
			 name);
	if (net_policy_grant_port(policy, port) < 0)
		log_warn("box", "[box:%s] too many granted ports: the agent cannot reach its messaging sidecar on 127.0.0.1:%u",
			 name, port);
}

/*
 * sandbox.image: the pulled root filesystem (pulled now, anonymously, when it is not cached;
 * a registry that wants credentials is pulled from with `voidbox image pull` first) as the
 * read-only /dev/vda the agent switches root to. On success the image store's lock is held
 * shared in *lock until the caller's VM has opened the file, so `image rm` waits for that.
 */
static int local_image(const struct box *box, const char *ref, struct oci_image_info *image,
		       struct vm_disk *disk, struct sandbox_config *sandbox_cfg,
		       struct oci_image_lock *lock, char *err, size_t errlen)
{
	/* a cancel of the run ends a pull under way instead of waiting for it */
	struct oci_pull_options options = { .progress = OCI_PROGRESS_NONE,
					    .cancelled = box_cancelled };
	char oci_dir[PATH_MAX], reason[LOCAL_ERROR_MAX];
	int rc = oci_image_dir(oci_dir, sizeof(oci_dir));

	if (rc < 0) {
		snprintf(err, errlen, "sandbox.image: cannot find the voidbox home; set VOIDBOX_HOME or HOME");
		return rc;
	}
	options.oci_dir = oci_dir;
	rc = oci_image_lock(oci_dir, OCI_IMAGE_LOCK_SHARED, lock, reason, sizeof(reason));
	if (rc == 0)
		rc = oci_image_find(oci_dir, ref, image, reason, sizeof(reason));
	if (rc == -ENOENT) {
		log_info("box", "[box:%s] pulling image %s", box->name, ref);
		rc = oci_image_pull(ref, &options, image, reason, sizeof(reason));
	}
	if (rc < 0)
		oci_image_unlock(lock);
	if (rc == -EACCES) {
		snprintf(err, errlen, "sandbox.image: the registry of %s wants credentials and a "
			 "spec pulls anonymously: pull the image first with `voidbox image pull "
			 "--username USER --password-stdin %s` (or VOIDBOX_REGISTRY_AUTH=USER:PASSWORD "
			 "voidbox image pull %s), then run the spec again", ref, ref, ref);
		return rc;
	}
	if (rc < 0) {
		snprintf(err, errlen, "sandbox.image: %s", reason);
		return rc;
	}
	*disk = (struct vm_disk){ .path = image->rootfs_path, .read_only = true };
	sandbox_cfg->disks = disk;
	sandbox_cfg->disk_count = 1;
	sandbox_cfg->extra_cmdline = OCI_IMAGE_ROOT_CMDLINE;
	return 0;
}

/* sandbox_config.cancelled: a cancelled run gives up the boots under way too. */
static bool local_start_cancelled(void *opaque)
{
	(void)opaque;
	return box_cancelled();
}

int box_local_open(struct box *box, const struct box_config *cfg, char *err, size_t errlen)
{
	struct oci_image_info image;
	struct vm_disk image_disk;
	struct net_config network;
	struct sandbox_config sandbox_cfg = {
		.kernel_path = box->kernel,
		.initramfs_path = box->initramfs[0] ? box->initramfs : NULL,
		.memory_mb = cfg->memory_mb ? cfg->memory_mb : SPEC_DEFAULT_MEMORY_MB,
		.vcpus = cfg->vcpus ? cfg->vcpus : SPEC_DEFAULT_VCPUS,
		.serial_log_path = cfg->serial_log_path,
		.host = cfg->host,
		/* a box never snapshots or forks its sandbox: the VMM runs confined, apart */
		.vmm_placement = SANDBOX_VMM_OWN_PROCESS,
		.cancelled = local_start_cancelled,
	};
	struct oci_image_lock image_lock = { .fd = -1 };
	struct local_box *local = NULL;
	uint64_t start = clock_monotonic_ms();
	int rc = local_mounts(cfg, &sandbox_cfg, err, errlen);

	if (rc == 0 && cfg->image)
		rc = local_image(box, cfg->image, &image, &image_disk, &sandbox_cfg, &image_lock,
				 err, errlen);
	if (rc < 0)
		return rc;
	local = calloc(1, sizeof(*local));
	if (!local) {
		snprintf(err, errlen, "out of memory opening a sandbox");
		rc = -ENOMEM;
		goto out;
	}
	if (cfg->network && cfg->network_spec) {
		rc = local_network_config(cfg->network_spec, &network, err, errlen);
		if (rc < 0)
			goto out;
		if (cfg->sidecar_port)
			local_network_allow_sidecar(box->name, cfg->sidecar_port, &network.policy);
		sandbox_cfg.network = &network;
	}
	rc = local_start(box, cfg, &sandbox_cfg, &local->sandbox, err, errlen);
	/* the VM has the image's rootfs open (or never will): `image rm` may go ahead */
	oci_image_unlock(&image_lock);
	if (rc < 0)
		goto out;
	log_info("box", "[box:%s] VM ready in %llu ms", box->name,
		 (unsigned long long)(clock_monotonic_ms() - start));
	box->backend = local;
	box->ops = &local_ops;
	local_telemetry_start(box, local, cfg);
	return 0;
out:
	oci_image_unlock(&image_lock);
	free(local);
	return rc;
}
