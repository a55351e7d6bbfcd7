/*
 * A box is where the runtime runs a spec's programs: a real micro-VM (src/sandbox) or a
 * deterministic mock. Workflows, pipelines and agents talk to this one interface and never
 * know which of the two they got, so the same engine code is exercised by fast unit tests
 * (mock) and by VM tests (local).
 *
 * The mode is a closed set decided at open time: `local` insists on a VM (a kernel that does
 * not resolve is an error naming `voidbox image build`), `mock` never boots one, `auto` boots
 * when a guest image resolves and otherwise falls back to mock with a warning. After open the
 * box reports the mode it really has (mock or local, never auto).
 *
 * Every call is safe from several threads at once: a workflow level runs its steps in
 * parallel in one box. Exec answers 0 whenever the program ran (whatever its exit code) and a
 * negative errno when the box could not run it; the sentence for the latter is in
 * result->error for exec and in box_last_error() (per thread) for the file calls.
 *
 * The mock's behaviour is documented in docs/runtime.md ("Mock semantics").
 */
#ifndef VOIDBOX_RUNTIME_BOX_H
#define VOIDBOX_RUNTIME_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/protocol.h"
#include "runtime/spec.h"

enum box_mode {
	BOX_MODE_AUTO,
	BOX_MODE_MOCK,
	BOX_MODE_LOCAL,
};

/* Exit code of a program the box killed (timeout) or could not start, as the guest agent. */
#define BOX_EXIT_NOT_RUN (-1)

struct box_env_var {
	const char *name;
	const char *value;
};

/*
 * One scripted answer of the mock: an exec of `program` (its basename is compared) whose
 * first argument equals `first_arg` (NULL: any arguments) prints stdout_text/stderr_text and
 * exits with exit_code. Rules are tried in order before the built-in programs.
 */
struct box_mock_rule {
	const char *program;
	const char *first_arg;
	const char *stdout_text;
	const char *stderr_text;
	int exit_code;
};

struct box;
struct box_exec_request;
struct box_exec_result;

/* One sample of the guest agent's telemetry (its TelemetryBatch system metrics). */
struct box_telemetry_sample {
	uint64_t seq;
	uint64_t timestamp_ms; /* the guest's clock */
	struct proto_system_metrics system;
};

/* Called on a box thread for every guest sample of a local box, about once a second. */
typedef void (*box_telemetry_fn)(void *opaque, const char *box_name,
				 const struct box_telemetry_sample *sample);

/*
 * A programmatic mock: called for every mock exec before the rules; returns 1 after filling
 * result (stdout/stderr must be malloc'd), 0 to let the rules and built-ins answer, or a
 * negative errno to fail the exec. Called from several threads at once.
 */
typedef int (*box_mock_handler_fn)(void *opaque, const struct box_exec_request *req,
				   struct box_exec_result *result);

struct box_config {
	enum box_mode mode;
	const char *name;      /* for log lines; may be NULL */
	const char *kernel;    /* NULL: resolved (flag, VOID_BOX_KERNEL, built image) */
	const char *initramfs; /* NULL: resolved likewise */
	uint32_t memory_mb;    /* 0: SPEC_DEFAULT_MEMORY_MB */
	uint32_t vcpus;	       /* 0: SPEC_DEFAULT_VCPUS */
	/* Environment for every exec, in order (a later name wins); borrowed, may be NULL. */
	const struct spec_env *env;
	const struct spec_env *env_override;
	const struct box_mock_rule *mock_rules;
	size_t mock_rule_count;
	box_mock_handler_fn mock_handler;
	void *mock_opaque;
	/* Where the VM console goes; NULL: a temporary file kept only when the run fails. */
	const char *serial_log_path;
	/* the host's sandbox settings (read by the CLI from its environment); NULL: defaults */
	const struct sandbox_host_settings *host;
	/*
	 * A snapshot to restore instead of booting (store id prefix, else a snapshot directory);
	 * NULL: cold boot. One that resolves to nothing warns and cold-boots (docs/snapshots.md).
	 */
	const char *snapshot;
	/*
	 * User-mode networking (sandbox.network) and its shape (ports, allow and deny lists, DNS
	 * server) from the spec's sandbox section, borrowed; NULL with network false.
	 */
	bool network;
	const struct spec_sandbox *network_spec;
	/* Host directories to share (sandbox.mounts, then the box's own); borrowed. */
	const struct spec_mount *mounts;
	size_t mount_count;
	const struct spec_mount *box_mounts;
	size_t box_mount_count;
	/*
	 * The host loopback port of the agent's messaging listener, which the sidecar claims; 0:
	 * no messaging. The egress policy must reach 10.0.2.2, and the VM is granted this port.
	 */
	uint16_t sidecar_port;
	/*
	 * The built image to boot when kernel and initramfs resolve to no explicit choice: an
	 * agent flavour's ("claude", "codex"), whose absence is an error naming the command that
	 * builds it. NULL: the default image.
	 */
	const char *image_name;
	/*
	 * sandbox.image: an OCI reference whose pulled root filesystem the VM boots as its root
	 * (pulled anonymously when it is not cached); NULL: the initramfs is the root. Borrowed.
	 */
	const char *image;
	/* guest telemetry while the box is open (local boxes; a mock has none); NULL: off */
	box_telemetry_fn on_telemetry;
	void *telemetry_opaque;
};

/* Called for each piece of output in arrival order (mock: once per stream). */
typedef void (*box_chunk_fn)(void *opaque, bool is_stderr, const void *data, size_t len);

struct box_exec_request {
	const char *program;
	const char *const *args;
	size_t arg_count;
	const struct box_env_var *env; /* wins over the box's env; may be NULL */
	size_t env_count;
	const void *stdin_data;	/* NULL or empty: no stdin */
	size_t stdin_len;
	const char *working_dir; /* NULL: the guest's default */
	uint32_t timeout_secs;	 /* 0: no timeout */
	box_chunk_fn on_chunk;	 /* may be NULL */
	void *chunk_opaque;
	/* non-NULL: a service (`mode: service`) that box_stop_service(box, this name) stops */
	const char *service_name;
};

struct box_exec_result {
	int exit_code;	   /* BOX_EXIT_NOT_RUN when killed or not started */
	char *stdout_data; /* NUL-terminated (the NUL is not counted); never NULL after exec */
	size_t stdout_len;
	char *stderr_data;
	size_t stderr_len;
	char *error; /* why the program did not run to its own exit; NULL when it did */
	bool timed_out;
	uint64_t duration_ms;
};

/*
 * Fills cfg from a spec: its sandbox (mode, kernel, initramfs, memory, vcpus, env), with a
 * pipeline box's overrides on top when box is non-NULL. Pointers are borrowed from spec.
 */
void box_config_from_spec(struct box_config *cfg, const struct spec *spec,
			  const struct spec_box *box);

/* Opens a box; 0 and *out, or -errno with a sentence saying what to do in err. */
int box_open(const struct box_config *cfg, struct box **out, char *err, size_t errlen);
/* The mode the box really has: BOX_MODE_MOCK or BOX_MODE_LOCAL. */
enum box_mode box_mode(const struct box *box);
const char *box_mode_name(enum box_mode mode);
/* Parses "auto|mock|local"; -EINVAL otherwise. */
int box_mode_parse(const char *name, enum box_mode *out);
enum box_mode box_mode_from_spec(enum spec_sandbox_mode mode);
/* The resolved kernel and initramfs of a local box ("" for mock). */
const char *box_kernel_path(const struct box *box);
const char *box_initramfs_path(const struct box *box);
/*
 * Stops the VM (if any) and frees everything; keep_logs keeps the serial log, except after
 * box_cancel_all. NULL is fine.
 */
void box_close(struct box *box, bool keep_logs);

/*
 * Cancels every box of this process, for a run that was asked to stop (`voidbox run` on
 * SIGINT or SIGTERM). From the first call on, box_open refuses with -ECANCELED. Each open
 * box is interrupted: with force false (the first call only), a VM's guest agent is asked to
 * sync and power off, which ends every exec under way in it with an error, and the mock's
 * waiting built-ins return at once; with force true, a VM's connection is cut as well, for
 * a guest that has not ended it within the caller's grace. Returns at once: closing the
 * boxes stays their runners' job, and the open list is how long they take. Thread-safe.
 */
void box_cancel_all(bool force);
/* Whether box_cancel_all was called. */
bool box_cancelled(void);

/* Runs one program; see the file comment for the return convention. */
int box_exec(struct box *box, const struct box_exec_request *req, struct box_exec_result *out);
void box_exec_result_free(struct box_exec_result *result);

/*
 * Asks the running service exec called name to end: SIGTERM to its program in a VM (the
 * program may trap it and exit cleanly), an early end with exit 0 for the mock's mock-serve.
 * 0 when asked (also when it was asked before), -EAGAIN when the service has not started far
 * enough to be asked (ask again), or another -errno.
 */
int box_stop_service(struct box *box, const char *name);

/* File calls: 0 or -errno (-ENOENT for a missing file); the reason is in box_last_error(). */
int box_write_file(struct box *box, const char *path, const void *data, size_t len);
/* *data is malloc'd and NUL-terminated (the NUL not counted in *len). */
int box_read_file(struct box *box, const char *path, char **data, size_t *len);
int box_mkdir_p(struct box *box, const char *path);
/* The sentence explaining the last failed box call on this thread ("" when none). */
const char *box_last_error(void);

#endif
