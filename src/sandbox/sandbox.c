/*
 * Sandbox lifecycle: runtime directory -> VM (with its vsock device on a socket in that
 * directory) -> start -> wait for the agent -> control channel. Teardown runs the same ladder backwards.
 *
 * Waiting for the agent is the control channel's own connect loop (short vsock connects to
 * port 1234, each followed by the Ping/Pong handshake, with backoff) run against the boot
 * timeout, after a cold boot and after a restore alike. Its connector watches the VM: the
 * moment the VM ends (panic, bad initramfs, poweroff) the loop stops and the error quotes the
 * console's end, instead of waiting for the deadline. There is no separate port probe, so the
 * agent sees exactly one connection per boot.
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "common/parallel.h"
#include "devices/vsock.h"
#include "host/vsock_connect.h"
#include "sandbox/host_grants.h"
#include "sandbox/leftovers.h"
#include "sandbox/vmm_cgroup.h"
#include "sandbox/vmm_process.h"
#include "store/guest_image.h"
#include "store/snapshot_store.h"
#include "store/store_fs.h"
#include "vmm/device.h"
#include "vmm/kvm.h"
#include "vmm/placement.h"
#include "vmm/snapshot_file.h"
#include "vmm/thread_filter.h"
#include "vmm/working_set.h"

#define SANDBOX_LOG "sandbox"
#define SANDBOX_RUNTIME_PREFIX "voidbox-"
#define SANDBOX_RUNTIME_TEMPLATE SANDBOX_RUNTIME_PREFIX "XXXXXX"
#define SANDBOX_SOCKET_NAME "vsock.sock"
#define SANDBOX_SERIAL_NAME "serial.log"
#define SANDBOX_KERNEL_CACHE_SUBDIR "cache/kernels"
/* how much of the guest console an early-exit error quotes */
#define SANDBOX_CONSOLE_TAIL_BYTES 240
/* sandbox_console_quote's text: the console's path, ", ending: " and its tail */
#define SANDBOX_CONSOLE_QUOTE_MAX (PATH_MAX + 16 + SANDBOX_CONSOLE_TAIL_BYTES)
#define SANDBOX_PATH_MAX 256
/* The agent brings eth0 up when the command line carries this (guest/agent/netcfg.h). */
#define SANDBOX_NETWORK_CMDLINE "voidbox.network=1"
#define SANDBOX_CMDLINE_MAX 2048
/* how long a guest gets to sync and end its connection after Shutdown before it is stopped */
#define SANDBOX_SHUTDOWN_GRACE_MS 2000
/* how long an interrupt waits for room to send the guest its Shutdown */
#define SANDBOX_END_SEND_MS 1000
#define SANDBOX_RUNTIME_FALLBACK_BASE "/tmp"
/* A fork's directory: one private directory per sandbox on tmpfs, one beneath it per fork. */
#define SANDBOX_FORK_PREFIX "voidbox-fork-"
#define SANDBOX_FORK_DIR_TEMPLATE SANDBOX_FORK_PREFIX "XXXXXX"
#define SANDBOX_FORK_SNAPSHOT_TEMPLATE "snapshot-XXXXXX"
#define SANDBOX_FORK_SHM_DIR "/dev/shm"
/* A fork's checked copy, beside its fork area (sandbox_fork_check). */
#define SANDBOX_FORK_CHECKED_SUFFIX "-checked-XXXXXX"
#define SANDBOX_SNAPSHOT_FILE_MODE 0600
#define SANDBOX_COPY_CHUNK 65536
/* The fork area, the caller's snapshot area, and the NULL that ends the list. */
#define SANDBOX_SNAPSHOT_AREAS_MAX 3
/* How many disks the guest agent waits for (guest/agent/disks.h reads it). */
#define SANDBOX_DISKS_CMDLINE_KEY "voidbox.disks="
#define SANDBOX_DISK_RO_SUFFIX ":ro"
#define SANDBOX_DISK_RW_SUFFIX ":rw"

/* The host's default when the caller configured no policy: explicit, never inferred. */
static const struct proto_set_policy sandbox_default_policy_value = {
	.allow_all_commands = true,
	.max_open_files = SANDBOX_DEFAULT_MAX_OPEN_FILES,
	.max_processes = SANDBOX_DEFAULT_MAX_PROCESSES,
	.max_file_size = SANDBOX_DEFAULT_MAX_FILE_SIZE,
};

const struct proto_set_policy *sandbox_default_policy(void)
{
	return &sandbox_default_policy_value;
}

struct sandbox {
	struct vm *vm;		       /* the VM in this process, or */
	struct vmm_process *vmm_proc; /* the VM in a process of its own */
	char cgroup_dir[PATH_MAX];     /* its limits (sandbox/vmm_cgroup.h); "": none */
	unsigned int cgroup_memory_mb; /* the guest memory its memory.max was made for */
	bool cgroup_allows_memory_copy; /* memory.max raised for a snapshot on tmpfs */
	uint64_t vsock_cid;
	struct control_channel *channel;
	uint8_t secret[PROTO_SECRET_SIZE];
	char runtime_dir[SANDBOX_PATH_MAX];
	int runtime_lock_fd; /* its owner lock (sandbox/leftovers.h); -1: none */
	char socket_path[SANDBOX_PATH_MAX + sizeof(SANDBOX_SOCKET_NAME) + 1];
	char serial_log_path[PATH_MAX];
	char kernel_cache_dir[PATH_MAX];
	bool serial_log_is_ours;
	long boot_ms;
	bool exited;
	enum vm_exit_reason exit_reason;
	/* what the agent was told (deep copy), so a fork can tell its children the same */
	struct proto_set_policy policy;
	bool has_policy;
	/* the host's settings it was started with; fork children inherit them */
	struct sandbox_host_settings host;
	/* the snapshot this VM was restored from, locked so eviction leaves it alone */
	struct snapshot_store_hold snapshot_hold;
	/*
	 * Set by a restore: where the first exec's working set is recorded (vmm/working_set.h);
	 * the flag is taken by exactly one exec, however many run at once.
	 */
	char working_set_dir[PATH_MAX];
	atomic_bool record_working_set;
	/*
	 * A VM in a VMM process: the base its memory counts from as far as this side knows
	 * ("": none), so a fork can save a diff against it; and a base a fork wrote, removed
	 * with the sandbox.
	 */
	char dirty_base_dir[PATH_MAX];
	char fork_base_dir[PATH_MAX];
	/* a base fork_base_dir's children restored from: its checked copy (sandbox_fork_check) */
	char fork_base_checked_dir[PATH_MAX];
	/* while it starts: whether its caller gave the start up (sandbox_config.cancelled) */
	sandbox_cancelled_fn start_cancelled;
	void *start_cancelled_opaque;
	/*
	 * The host paths its disks and shares were granted: what a snapshot its VMM process
	 * writes may name before another process restores it (sandbox/host_grants.h).
	 */
	struct host_grants grants;
	/*
	 * A VMM process that takes snapshot requests: the private tmpfs directory its forks are
	 * saved beneath, made before it starts so its jail can hold it ("": none yet).
	 */
	char fork_area[PATH_MAX];
	int fork_area_lock_fd; /* its owner lock (sandbox/leftovers.h); -1: none */
	/*
	 * The caller's snapshot_area, canonical ("": none): the other directory the VMM
	 * process's snapshots may be written beneath.
	 */
	char snapshot_area[PATH_MAX];
};

static int sandbox_boot_timeout_ms(const struct sandbox_config *cfg)
{
	if (cfg->host && cfg->host->boot_timeout_ms > 0)
		return cfg->host->boot_timeout_ms;
	return cfg->boot_timeout_ms > 0 ? cfg->boot_timeout_ms : SANDBOX_DEFAULT_BOOT_TIMEOUT_MS;
}

/* A random CID >= 3 that fits the 32-bit space the guest's vsock uses. */
static uint64_t sandbox_random_cid(void)
{
	uint32_t value = 0;

	if (getrandom(&value, sizeof(value), 0) != sizeof(value))
		value = (uint32_t)getpid() ^ (uint32_t)clock_monotonic_ms();
	return VSOCK_MIN_GUEST_CID + value % (UINT32_MAX - VSOCK_MIN_GUEST_CID - 1);
}

/* dir's owner lock, so a sweep removes dir should this process die before it does. */
static int sandbox_claim(const char *dir)
{
	int fd = leftovers_claim(dir);

	if (fd < 0)
		log_debug(SANDBOX_LOG, "no owner lock in %s (%s): it is not swept if this process "
			  "dies first", dir, strerror(-fd));
	return fd;
}

/*
 * The directories a VMM process that takes snapshot requests writes beneath, each bound into
 * its jail (and held by Landlock on its snapshot-writing thread): a private directory on
 * tmpfs for its forks, made here, and the caller's snapshot area (`snapshot create` saves
 * into a temporary directory of the store it made first), where one is given; both
 * canonical. areas[] ends with NULL.
 */
static int sandbox_snapshot_areas(struct sandbox *sandbox, const char *requested,
				  const char *areas[SANDBOX_SNAPSHOT_AREAS_MAX], char *err,
				  size_t errlen)
{
	const char *base = access(SANDBOX_FORK_SHM_DIR, W_OK) == 0 ? SANDBOX_FORK_SHM_DIR
								  : SANDBOX_RUNTIME_FALLBACK_BASE;
	char made[PATH_MAX];
	size_t count = 0;

	if (!sandbox->fork_area[0]) {
		snprintf(made, sizeof(made), "%s/%s", base, SANDBOX_FORK_DIR_TEMPLATE);
		if (!mkdtemp(made) || !realpath(made, sandbox->fork_area)) {
			int rc = -errno;

			sandbox->fork_area[0] = '\0';
			snprintf(err, errlen, "cannot create a fork directory under %s: %s", base,
				 strerror(-rc));
			return rc;
		}
		sandbox->fork_area_lock_fd = sandbox_claim(sandbox->fork_area);
	}
	areas[count++] = sandbox->fork_area;
	if (requested && !realpath(requested, sandbox->snapshot_area)) {
		int rc = -errno;

		sandbox->snapshot_area[0] = '\0';
		snprintf(err, errlen, "cannot resolve the snapshot directory %s: %s", requested,
			 strerror(-rc));
		return rc;
	}
	if (requested)
		areas[count++] = sandbox->snapshot_area;
	areas[count] = NULL;
	return 0;
}

/* Whether the canonical path is area (canonical; "" is none) or beneath it. */
static bool sandbox_path_beneath(const char *path, const char *area)
{
	size_t len = strlen(area);

	return len && strncmp(path, area, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

static void sandbox_sweep_leftovers(const char *runtime_base);

static int sandbox_make_runtime_dir(struct sandbox *sandbox, char *err, size_t errlen)
{
	const char *base = sandbox->host.runtime_base;
	int written;

	if (!base || !*base || access(base, W_OK) != 0)
		base = SANDBOX_RUNTIME_FALLBACK_BASE;
	written = snprintf(sandbox->runtime_dir, sizeof(sandbox->runtime_dir), "%s/%s", base,
			   SANDBOX_RUNTIME_TEMPLATE);
	/* a unix socket path must fit in sun_path (108 bytes) */
	if (written < 0 || (size_t)written + sizeof(SANDBOX_SOCKET_NAME) + 1 > 100) {
		snprintf(err, errlen, "runtime directory base '%s' is too long for a unix socket path; set XDG_RUNTIME_DIR to a shorter directory", base);
		return -ENAMETOOLONG;
	}
	sandbox_sweep_leftovers(base);
	if (!mkdtemp(sandbox->runtime_dir)) {
		int saved = errno;

		snprintf(err, errlen, "cannot create a runtime directory under %s: %s", base,
			 strerror(saved));
		return -saved;
	}
	sandbox->runtime_lock_fd = sandbox_claim(sandbox->runtime_dir);
	snprintf(sandbox->socket_path, sizeof(sandbox->socket_path), "%s/%s",
		 sandbox->runtime_dir, SANDBOX_SOCKET_NAME);
	return 0;
}

int sandbox_kernel_cache_dir(char *out, size_t len)
{
	char home[PATH_MAX];
	int rc = guest_image_home(home, sizeof(home));

	if (rc < 0)
		return rc;
	if ((size_t)snprintf(out, len, "%s/%s", home, SANDBOX_KERNEL_CACHE_SUBDIR) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * The last bytes of the guest console on one line (control characters become spaces), so an error
 * shows why the guest stopped even where the log file itself does not survive (a CI VM).
 */
static void sandbox_console_tail(const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t size;
	ssize_t got;
	size_t used = 0;

	out[0] = '\0';
	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	if (size > 0 && lseek(fd, size > (off_t)(len - 1) ? size - (off_t)(len - 1) : 0, SEEK_SET) >= 0) {
		got = read(fd, out, len - 1);
		if (got > 0) {
			for (ssize_t i = 0; i < got; i++) {
				char c = out[i];

				if (c == '\r')
					continue;
				out[used++] = (c == '\n' || (unsigned char)c < 0x20) ? ' ' : c;
			}
		}
	}
	out[used] = '\0';
	close(fd);
}

/* vm_wait wherever the VM runs. */
static int sandbox_vm_wait(struct sandbox *sandbox, int timeout_ms, enum vm_exit_reason *reason)
{
	if (sandbox->vmm_proc)
		return vmm_process_wait(sandbox->vmm_proc, timeout_ms, reason);
	return vm_wait(sandbox->vm, timeout_ms, reason);
}

static bool sandbox_vm_ended(struct sandbox *sandbox)
{
	if (!sandbox->exited && sandbox_vm_wait(sandbox, 0, &sandbox->exit_reason) == 0)
		sandbox->exited = true;
	return sandbox->exited;
}

/*
 * "PATH, ending: TAIL": the console's path and, since the runtime directory that holds it goes
 * with the sandbox, its last bytes, for an error about a guest that never answered. A console
 * the guest wrote nothing to is not kept (sandbox_remove_runtime_dir), so it is said to have
 * stayed empty.
 */
static void sandbox_console_quote(const struct sandbox *sandbox, char *out, size_t len)
{
	char tail[SANDBOX_CONSOLE_TAIL_BYTES + 1];

	sandbox_console_tail(sandbox->serial_log_path, tail, sizeof(tail));
	if (tail[0])
		snprintf(out, len, "%s, ending: %s", sandbox->serial_log_path, tail);
	else
		snprintf(out, len, "%s, which stayed empty (the guest wrote nothing to it)",
			 sandbox->serial_log_path);
}

/* The error for a VM that ended before its agent answered: why, and the console's end. */
static int sandbox_describe_stop(struct sandbox *sandbox, char *err, size_t errlen)
{
	char console[SANDBOX_CONSOLE_QUOTE_MAX];

	sandbox_console_quote(sandbox, console, sizeof(console));
	snprintf(err, errlen,
		 "the VM stopped (%s) before its guest agent answered; the guest console is in %s",
		 vm_exit_reason_name(sandbox->exit_reason), console);
	return -ECHILD;
}

static bool sandbox_start_given_up(const struct sandbox *sandbox)
{
	return sandbox->start_cancelled && sandbox->start_cancelled(sandbox->start_cancelled_opaque);
}

/* Before a VMM starts: -ECANCELED, with err, when the caller has given the start up. */
static int sandbox_refuse_given_up(const struct sandbox *sandbox, char *err, size_t errlen)
{
	if (!sandbox_start_given_up(sandbox))
		return 0;
	snprintf(err, errlen, "the start was cancelled before its VM started");
	return -ECANCELED;
}

static int sandbox_vsock_connector(void *opaque, int timeout_ms)
{
	struct sandbox *sandbox = opaque;

	if (sandbox_vm_ended(sandbox))
		return -ECHILD;
	if (sandbox_start_given_up(sandbox))
		return -ECANCELED;
	return vsock_host_connect(sandbox->socket_path, PROTO_GUEST_AGENT_PORT, timeout_ms);
}

/* Every reader of the control channel parses what the guest sends, under its filter. */
static void sandbox_confine_channel_reader(void)
{
	vmm_thread_enter(VMM_THREAD_CHANNEL_READER, NULL, true); /* the channel named it */
}

/* connect_deadline_ms: how long the handshake may retry; 0 is the channel's default. */
/*
 * Creates the control channel and connects with sandbox->secret. A restore passes its rekey
 * (rekey_json, carrying new_secret) to ride in the handshake's Ping; *rekeyed then says whether
 * the agent applied it and the channel moved to new_secret.
 */
static int sandbox_open_channel(struct sandbox *sandbox, int connect_deadline_ms,
				const char *rekey_json, const uint8_t *new_secret, bool *rekeyed,
				char *err, size_t errlen)
{
	struct control_channel_config channel_cfg;
	int rc;

	memset(&channel_cfg, 0, sizeof(channel_cfg));
	channel_cfg.connect = sandbox_vsock_connector;
	channel_cfg.connect_opaque = sandbox;
	/* the host's setting can only lengthen the deadline the caller needs */
	channel_cfg.connect_deadline_ms = connect_deadline_ms > sandbox->host.connect_deadline_ms
						  ? connect_deadline_ms
						  : sandbox->host.connect_deadline_ms;
	channel_cfg.liveness_timeout_ms = sandbox->host.liveness_timeout_ms;
	if (sandbox->vmm_proc || vm_thread_filters_on(sandbox->vm))
		channel_cfg.reader_start = sandbox_confine_channel_reader;
	memcpy(channel_cfg.secret, sandbox->secret, sizeof(channel_cfg.secret));
	sandbox->channel = control_channel_create(&channel_cfg);
	if (!sandbox->channel) {
		snprintf(err, errlen, "cannot create the control channel: out of memory");
		return -ENOMEM;
	}
	if (rekey_json)
		rc = control_channel_connect_rekey(sandbox->channel, rekey_json, strlen(rekey_json),
						   new_secret, rekeyed);
	else
		rc = control_channel_connect(sandbox->channel);
	if (rc == -ECHILD && sandbox_vm_ended(sandbox))
		return sandbox_describe_stop(sandbox, err, errlen);
	if (rc == -ECANCELED) {
		snprintf(err, errlen, "the start was cancelled before the guest agent answered");
		return rc;
	}
	if (rc < 0) {
		char console[SANDBOX_CONSOLE_QUOTE_MAX];

		sandbox_console_quote(sandbox, console, sizeof(console));
		snprintf(err, errlen, "the guest agent %s: %s (guest console: %s)",
			 rc == -ETIMEDOUT ? "did not answer" : "refused the handshake",
			 control_channel_last_error(), console);
	}
	return rc;
}

/*
 * A KVM that emulates standard guests (PVM hosts) boots a stock kernel a thousand times
 * slower: say so with the remedy up front instead of letting the boot timeout run out.
 */
static void sandbox_policy_clear(struct sandbox *sandbox)
{
	proto_set_policy_free(&sandbox->policy);
	sandbox->has_policy = false;
}

static int sandbox_policy_keep(struct sandbox *sandbox, const struct proto_set_policy *policy)
{
	struct proto_set_policy *kept = &sandbox->policy;

	sandbox_policy_clear(sandbox);
	*kept = *policy;
	kept->commands = NULL;
	kept->commands_count = 0;
	if (policy->commands_count) {
		kept->commands = calloc(policy->commands_count, sizeof(*kept->commands));
		if (!kept->commands)
			return -ENOMEM;
	}
	for (size_t i = 0; i < policy->commands_count; i++) {
		kept->commands[i] = strdup(policy->commands[i]);
		if (!kept->commands[i]) {
			sandbox_policy_clear(sandbox);
			return -ENOMEM;
		}
		kept->commands_count++;
	}
	sandbox->has_policy = true;
	return 0;
}

/*
 * Sends the session's policy (NULL: nothing, the agent keeps what it has) and remembers it.
 * A guest that cannot take it must not be used: with no policy it would refuse every command,
 * and with an old one it would not enforce what the caller asked for.
 */
static int sandbox_send_policy(struct sandbox *sandbox, const struct proto_set_policy *policy,
			       char *err, size_t errlen)
{
	int rc;

	if (!policy)
		return 0;
	rc = control_channel_set_policy(sandbox->channel, policy, CONTROL_CHANNEL_TIMEOUT_DEFAULT);
	if (rc == -ETIMEDOUT) {
		/* an agent that cannot take a policy says so; one that says nothing is stuck */
		snprintf(err, errlen, "the guest agent did not take the exec policy: %s",
			 control_channel_last_error());
		return rc;
	}
	if (rc < 0) {
		snprintf(err, errlen, "the guest agent did not take the exec policy (%s): rebuild "
			 "the image with this voidbox's agent (voidbox image build)",
			 control_channel_last_error());
		return rc;
	}
	rc = sandbox_policy_keep(sandbox, policy);
	if (rc < 0)
		snprintf(err, errlen, "out of memory");
	return rc;
}

static int sandbox_check_kvm(const struct sandbox_host_settings *host, char *err, size_t errlen)
{
	char why[512];

	if (kvm_probe_usable(why, sizeof(why))) {
		log_debug(SANDBOX_LOG, "%s", why);
		return 0;
	}
	if (host && host->allow_slow_kvm && strstr(why, "emulates")) {
		log_warn(SANDBOX_LOG, "%s; booting anyway (VOIDBOX_ALLOW_SLOW_KVM=1), expect minutes",
			 why);
		return 0;
	}
	snprintf(err, errlen, "%s", why);
	return -ENODEV;
}

/* A sandbox with its runtime directory and console path, no VM yet. */
static int sandbox_prepare(const char *serial_log_path, const struct sandbox_host_settings *host,
			   struct sandbox **out, char *err, size_t errlen)
{
	struct sandbox *sandbox = calloc(1, sizeof(*sandbox));
	int rc;

	if (!sandbox) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	sandbox->runtime_lock_fd = -1;
	sandbox->fork_area_lock_fd = -1;
	if (host)
		sandbox->host = *host;
	rc = sandbox_make_runtime_dir(sandbox, err, errlen);
	if (rc < 0) {
		free(sandbox);
		return rc;
	}
	if (serial_log_path) {
		snprintf(sandbox->serial_log_path, sizeof(sandbox->serial_log_path), "%s",
			 serial_log_path);
	} else {
		snprintf(sandbox->serial_log_path, sizeof(sandbox->serial_log_path), "%s/%s",
			 sandbox->runtime_dir, SANDBOX_SERIAL_NAME);
		sandbox->serial_log_is_ours = true;
	}
	*out = sandbox;
	return 0;
}

static bool sandbox_strip_suffix(char *arg, const char *suffix)
{
	size_t len = strlen(arg), suffix_len = strlen(suffix);

	if (len < suffix_len || strcmp(arg + len - suffix_len, suffix) != 0)
		return false;
	arg[len - suffix_len] = '\0';
	return true;
}

int sandbox_disk_parse(char *arg, struct vm_disk *disk, char *err, size_t errlen)
{
	disk->read_only = sandbox_strip_suffix(arg, SANDBOX_DISK_RO_SUFFIX);
	if (!disk->read_only)
		sandbox_strip_suffix(arg, SANDBOX_DISK_RW_SUFFIX);
	disk->path = arg;
	if (arg[0] == '\0') {
		snprintf(err, errlen, "--disk takes PATH or PATH:ro, a file on the host");
		return -EINVAL;
	}
	return 0;
}

/*
 * The extra kernel arguments: extra (the caller's and the mounts'), then the agent's request
 * for eth0 if networked, then how many disks the agent waits for.
 */
static int sandbox_cmdline(const struct sandbox_config *cfg, const char *extra, char *out,
			   size_t len, char *err, size_t errlen)
{
	if (!extra)
		extra = "";
	int written = snprintf(out, len, "%s%s%s", extra, cfg->network && *extra ? " " : "",
			       cfg->network ? SANDBOX_NETWORK_CMDLINE : "");

	if (written >= 0 && (size_t)written < len && cfg->disk_count)
		written += snprintf(out + written, len - (size_t)written,
				    "%s" SANDBOX_DISKS_CMDLINE_KEY "%u", written ? " " : "",
				    cfg->disk_count);
	if (written < 0 || (size_t)written >= len) {
		snprintf(err, errlen, "the extra kernel command line is longer than %zu bytes: "
			 "shorten it", len - 1);
		return -E2BIG;
	}
	return 0;
}

static pthread_once_t sandbox_cgroup_once = PTHREAD_ONCE_INIT;
static char sandbox_cgroup_root[PATH_MAX]; /* "": VMM processes run without caps */

/*
 * Finds the delegated cgroup root once; where there is none, says why once, at info level:
 * most hosts have none, and a warning on every command would teach users to ignore warnings.
 */
static void sandbox_cgroup_find_root(void)
{
	char why[PATH_MAX + 256];

	if (vmm_cgroup_root(sandbox_cgroup_root, sizeof(sandbox_cgroup_root), why,
			    sizeof(why)) < 0) {
		sandbox_cgroup_root[0] = '\0';
		log_info(SANDBOX_LOG, "VMs run without memory and CPU caps: %s", why);
	}
}

/*
 * Once per process, before its first sandbox's runtime directory: what sandboxes of processes
 * that died without their teardown left (sandbox/leftovers.h) in the runtime base and the
 * fork areas' base, with their VMM cgroups.
 */
static void sandbox_sweep_leftovers(const char *runtime_base)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static bool swept;
	const char *fork_base = access(SANDBOX_FORK_SHM_DIR, W_OK) == 0
					? SANDBOX_FORK_SHM_DIR
					: SANDBOX_RUNTIME_FALLBACK_BASE;
	const char *cgroup_root;

	pthread_mutex_lock(&lock);
	if (!swept) {
		swept = true;
		pthread_once(&sandbox_cgroup_once, sandbox_cgroup_find_root);
		cgroup_root = sandbox_cgroup_root[0] ? sandbox_cgroup_root : NULL;
		leftovers_sweep(runtime_base, SANDBOX_RUNTIME_PREFIX, cgroup_root);
		leftovers_sweep(fork_base, SANDBOX_FORK_PREFIX, NULL);
	}
	pthread_mutex_unlock(&lock);
}

/*
 * The VMM process's cgroup, named after the runtime directory (unique on the host); a VM that
 * cannot have one starts without caps, with a warning, as where the host offers none.
 */
static void sandbox_cgroup_prepare(struct sandbox *sandbox, unsigned int memory_mb,
				   unsigned int vcpus)
{
	struct vmm_cgroup_limits limits = { .memory_mb = memory_mb, .vcpus = vcpus };
	const char *name = strrchr(sandbox->runtime_dir, '/');
	char err[PATH_MAX + 256];

	pthread_once(&sandbox_cgroup_once, sandbox_cgroup_find_root);
	if (!sandbox_cgroup_root[0] || !name)
		return;
	if (vmm_cgroup_create(sandbox_cgroup_root, name + 1, &limits, sandbox->cgroup_dir,
			      sizeof(sandbox->cgroup_dir), err, sizeof(err)) < 0)
		log_warn(SANDBOX_LOG, "this VM runs without memory and CPU caps: %s", err);
	else
		sandbox->cgroup_memory_mb = memory_mb;
}

/*
 * Before a VMM process writes a snapshot into dir: where dir is on a memory-backed file system
 * (tmpfs, ramfs: a fork's area, a store under /tmp or /dev/shm), the memory file's pages are
 * charged to the VMM's cgroup for as long as the file exists and cannot be reclaimed, so the
 * cap grows, once, by a copy of the guest's memory; without it a guest that has touched most
 * of its memory gets its VMM killed half-way through the save. A disk's page cache is
 * written back and reclaimed under the cap as it is.
 */
static void sandbox_cgroup_before_snapshot(struct sandbox *sandbox, const char *dir)
{
	struct statfs fs;
	int rc;

	if (!sandbox->cgroup_dir[0] || sandbox->cgroup_allows_memory_copy)
		return;
	if (statfs(dir, &fs) < 0 || (fs.f_type != TMPFS_MAGIC && fs.f_type != RAMFS_MAGIC))
		return;
	rc = vmm_cgroup_allow_memory_copy(sandbox->cgroup_dir, sandbox->cgroup_memory_mb);
	if (rc == 0) {
		sandbox->cgroup_allows_memory_copy = true;
		log_debug(SANDBOX_LOG, "%s is in memory: the VM's cgroup may now hold a copy of "
			  "its %u MiB there too", dir, sandbox->cgroup_memory_mb);
	} else {
		log_warn(SANDBOX_LOG, "cannot raise the memory cap of %s for a snapshot into %s "
			 "(%s): a guest that filled its memory may be killed while it is saved",
			 sandbox->cgroup_dir, dir, strerror(-rc));
	}
}

/* vm_create and vm_start in this process. */
static int sandbox_start_vm_here(const struct vm_config *vm_cfg, struct sandbox *sandbox,
				 char *err, size_t errlen)
{
	int rc = vm_create(vm_cfg, &sandbox->vm, err, errlen);

	if (rc < 0)
		return rc;
	rc = vm_start(sandbox->vm);
	if (rc < 0)
		snprintf(err, errlen, "the VM did not start: %s", strerror(-rc));
	return rc;
}

int sandbox_start(const struct sandbox_config *cfg, struct sandbox **out, char *err,
		  size_t errlen)
{
	struct sandbox_mounts_plan *mounts = NULL;
	struct vm_config vm_cfg;
	struct sandbox *sandbox;
	char cmdline[SANDBOX_CMDLINE_MAX];
	long started_ms = (long)clock_monotonic_ms();
	int rc;

	*out = NULL;
	rc = sandbox_check_kvm(cfg->host, err, errlen);
	if (rc < 0)
		return rc;
	rc = sandbox_mounts_plan(cfg, &mounts, err, errlen);
	if (rc < 0)
		return rc;
	rc = sandbox_prepare(cfg->serial_log_path, cfg->host, &sandbox, err, errlen);
	if (rc < 0) {
		sandbox_mounts_plan_free(mounts);
		return rc;
	}
	sandbox->start_cancelled = cfg->cancelled;
	sandbox->start_cancelled_opaque = cfg->cancelled_opaque;
	if (getrandom(sandbox->secret, sizeof(sandbox->secret), 0) != sizeof(sandbox->secret)) {
		rc = -errno;
		snprintf(err, errlen, "cannot draw a session secret: %s", strerror(errno));
		goto fail;
	}

	memset(&vm_cfg, 0, sizeof(vm_cfg));
	vm_cfg.kernel_path = cfg->kernel_path;
	vm_cfg.initramfs_path = cfg->initramfs_path;
	/* the mounts' plan already holds the caller's extra arguments and the mount words */
	rc = sandbox_cmdline(cfg, mounts->cmdline, cmdline, sizeof(cmdline), err, errlen);
	if (rc < 0)
		goto fail;
	vm_cfg.cmdline = cmdline[0] ? cmdline : NULL;
	vm_cfg.network = cfg->network;
	vm_cfg.disks = cfg->disks;
	vm_cfg.disk_count = cfg->disk_count;
	vm_cfg.shares = mounts->shares;
	vm_cfg.share_count = mounts->share_count;
	for (unsigned int i = 0; rc == 0 && i < vm_cfg.disk_count; i++)
		rc = host_grants_add(&sandbox->grants, vm_cfg.disks[i].path,
				     vm_cfg.disks[i].read_only ? VM_HOST_PATH_READ_ONLY
							       : VM_HOST_PATH_READ_WRITE,
				     err, errlen);
	for (unsigned int i = 0; rc == 0 && i < vm_cfg.share_count; i++)
		rc = host_grants_add(&sandbox->grants, vm_cfg.shares[i].host_dir,
				     vm_cfg.shares[i].read_only ? VM_HOST_PATH_READ_ONLY
								: VM_HOST_PATH_READ_WRITE,
				     err, errlen);
	if (rc < 0)
		goto fail;
	vm_cfg.memory_mb = cfg->memory_mb ? cfg->memory_mb : SANDBOX_DEFAULT_MEMORY_MB;
	vm_cfg.vcpus = cfg->vcpus ? cfg->vcpus : SANDBOX_DEFAULT_VCPUS;
	vm_cfg.serial_log_path = sandbox->serial_log_path;
	vm_cfg.has_secret = true;
	memcpy(vm_cfg.secret, sandbox->secret, sizeof(vm_cfg.secret));
	vm_cfg.vsock_socket_path = sandbox->socket_path;
	vm_cfg.no_doorbells = cfg->no_doorbells;
	if (!cfg->boot_compressed_kernel &&
	    sandbox_kernel_cache_dir(sandbox->kernel_cache_dir,
				     sizeof(sandbox->kernel_cache_dir)) == 0)
		vm_cfg.vmlinux_cache_dir = sandbox->kernel_cache_dir;
	vm_cfg.vsock_cid = sandbox_random_cid();
	sandbox->vsock_cid = vm_cfg.vsock_cid;
	rc = sandbox_refuse_given_up(sandbox, err, errlen);
	if (rc < 0)
		goto fail;
	log_info(SANDBOX_LOG, "booting %s (%u MiB, %u vCPU), console in %s", cfg->kernel_path,
		 vm_cfg.memory_mb, vm_cfg.vcpus, sandbox->serial_log_path);
	if (cfg->vmm_placement != SANDBOX_VMM_IN_PROCESS) {
		/* the turn of host CPUs is this process's: a forked VMM's copy would repeat it */
		vm_cfg.has_placement_cpu = true;
		vm_cfg.placement_cpu = vm_placement_choose(vm_cfg.vcpus);
		bool snapshots = cfg->vmm_placement == SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS;
		const char *areas[SANDBOX_SNAPSHOT_AREAS_MAX] = { NULL };

		sandbox_cgroup_prepare(sandbox, vm_cfg.memory_mb, vm_cfg.vcpus);
		const char *cgroup = sandbox->cgroup_dir[0] ? sandbox->cgroup_dir : NULL;

		rc = snapshots ? sandbox_snapshot_areas(sandbox, cfg->snapshot_area, areas, err,
							errlen)
			       : 0;
		if (rc == 0)
			rc = vmm_process_start_vm(&vm_cfg, cgroup, snapshots, areas, &sandbox->vmm_proc,
						  err, errlen);
	} else
		rc = sandbox_start_vm_here(&vm_cfg, sandbox, err, errlen);
	sandbox_mounts_plan_free(mounts); /* the devices and command line hold copies */
	mounts = NULL;
	if (rc < 0)
		goto fail;
	rc = sandbox_open_channel(sandbox, sandbox_boot_timeout_ms(cfg), NULL, NULL, NULL, err,
				  errlen);
	if (rc < 0)
		goto fail;
	if (!cfg->policy)
		log_info(SANDBOX_LOG, "no command allowlist configured: the guest runs every "
			 "command (limits: %u open files, %u processes, %u-byte files)",
			 SANDBOX_DEFAULT_MAX_OPEN_FILES, SANDBOX_DEFAULT_MAX_PROCESSES,
			 SANDBOX_DEFAULT_MAX_FILE_SIZE);
	rc = sandbox_send_policy(sandbox, cfg->policy ? cfg->policy : &sandbox_default_policy_value,
				 err, errlen);
	if (rc < 0)
		goto fail;
	sandbox->boot_ms = (long)clock_monotonic_ms() - started_ms;
	log_info(SANDBOX_LOG, "guest agent answered after %ld ms", sandbox->boot_ms);
	sandbox->start_cancelled = NULL; /* started: the caller cancels it as a sandbox now */
	*out = sandbox;
	return 0;

fail:
	sandbox_mounts_plan_free(mounts);
	sandbox_destroy(sandbox, rc != -ECANCELED); /* a cancel's console explains nothing */
	return rc;
}

struct control_channel *sandbox_channel(struct sandbox *sandbox)
{
	return sandbox->channel;
}

const char *sandbox_serial_log_path(const struct sandbox *sandbox)
{
	return sandbox->serial_log_path;
}

const char *sandbox_vsock_socket_path(const struct sandbox *sandbox)
{
	return sandbox->socket_path;
}

unsigned long sandbox_guest_cid(const struct sandbox *sandbox)
{
	return sandbox->vm ? (unsigned long)vm_vsock_cid(sandbox->vm)
			   : (unsigned long)sandbox->vsock_cid;
}

uint64_t sandbox_working_set_prefaulted_pages(const struct sandbox *sandbox)
{
	if (sandbox->vmm_proc)
		return vmm_process_working_set_prefaulted(sandbox->vmm_proc);
	return sandbox->vm ? vm_working_set_prefaulted_pages(sandbox->vm) : 0;
}

pid_t sandbox_vmm_pid(const struct sandbox *sandbox)
{
	return sandbox->vmm_proc ? vmm_process_pid(sandbox->vmm_proc) : getpid();
}

long sandbox_boot_ms(const struct sandbox *sandbox)
{
	return sandbox->boot_ms;
}

int sandbox_wait_exit(struct sandbox *sandbox, int timeout_ms, enum vm_exit_reason *reason)
{
	int rc;

	if (sandbox->exited) {
		*reason = sandbox->exit_reason;
		return 0;
	}
	rc = sandbox_vm_wait(sandbox, timeout_ms, &sandbox->exit_reason);
	if (rc == 0) {
		sandbox->exited = true;
		*reason = sandbox->exit_reason;
	}
	return rc;
}

/* Whether the console at path holds anything to read (a VMM that failed early wrote none). */
static bool sandbox_console_has_output(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && st.st_size > 0;
}

/*
 * The socket always goes; the console and the directory stay only when the caller keeps the
 * console and the guest wrote to it. A start that fails before the guest wrote a byte (a
 * kernel the VMM refuses, a snapshot that is gone, a VMM that cannot start) leaves nothing
 * behind, so a daemon or pipeline that opens many failing boxes does not fill the runtime
 * directory's file system (a tmpfs under XDG_RUNTIME_DIR) with empty directories.
 */
static void sandbox_remove_runtime_dir(struct sandbox *sandbox, bool keep_serial_log)
{
	char path[SANDBOX_PATH_MAX + sizeof(SANDBOX_SERIAL_NAME) + 1];

	if (!sandbox->runtime_dir[0])
		return;
	leftovers_release(sandbox->runtime_dir, sandbox->runtime_lock_fd);
	sandbox->runtime_lock_fd = -1;
	snprintf(path, sizeof(path), "%s/%s", sandbox->runtime_dir, SANDBOX_SOCKET_NAME);
	unlink(path);
	if (sandbox->serial_log_is_ours && keep_serial_log &&
	    sandbox_console_has_output(sandbox->serial_log_path))
		return;
	if (sandbox->serial_log_is_ours)
		unlink(sandbox->serial_log_path);
	rmdir(sandbox->runtime_dir);
}

void sandbox_interrupt(struct sandbox *sandbox, bool force)
{
	int rc;

	if (!sandbox)
		return;
	if (!force && sandbox->channel) {
		rc = control_channel_end(sandbox->channel, SANDBOX_END_SEND_MS);
		if (rc == 0)
			return;
		if (rc != -ENOTCONN)
			log_debug(SANDBOX_LOG, "cannot ask the guest to shut down (%s); its "
				  "connection is cut", strerror(-rc));
	}
	if (sandbox->channel)
		control_channel_cancel(sandbox->channel);
	if (!force)
		return;
	if (sandbox->vm)
		vm_request_stop(sandbox->vm);
	if (sandbox->vmm_proc)
		vmm_process_request_stop(sandbox->vmm_proc);
}

void sandbox_destroy(struct sandbox *sandbox, bool keep_serial_log)
{
	if (!sandbox)
		return;
	if ((sandbox->vm || sandbox->vmm_proc) && !sandbox_vm_ended(sandbox) && sandbox->channel) {
		/*
		 * The agent flushes the guest's file systems, ends the connection and powers
		 * off: once the connection has ended the VM is stopped at once, since the rest
		 * of the kernel's poweroff writes nothing (an agent that ends it only when the VM
		 * has gone costs what it did before).
		 */
		if (control_channel_shutdown(sandbox->channel, SANDBOX_SHUTDOWN_GRACE_MS) < 0)
			log_debug(SANDBOX_LOG, "%s", control_channel_last_error());
	}
	if (sandbox->channel)
		control_channel_destroy(sandbox->channel);
	if (sandbox->vm)
		vm_request_stop(sandbox->vm);
	vm_destroy(sandbox->vm);
	vmm_process_destroy(sandbox->vmm_proc); /* stops, then kills after a bounded grace */
	vmm_cgroup_remove(sandbox->cgroup_dir);
	if (sandbox->fork_base_dir[0]) /* its children mapped it: their mappings keep the pages */
		vm_snapshot_dir_remove(sandbox->fork_base_dir);
	if (sandbox->fork_base_checked_dir[0])
		vm_snapshot_dir_remove(sandbox->fork_base_checked_dir);
	host_grants_free(&sandbox->grants);
	if (sandbox->fork_area[0]) {
		leftovers_release(sandbox->fork_area, sandbox->fork_area_lock_fd);
		rmdir(sandbox->fork_area);
	}
	sandbox_remove_runtime_dir(sandbox, keep_serial_log);
	sandbox_policy_clear(sandbox);
	explicit_bzero(sandbox->secret, sizeof(sandbox->secret));
	snapshot_store_release(&sandbox->snapshot_hold);
	free(sandbox);
}

/* ---- snapshots, restore and fork (docs/snapshot-format.md) ---- */

#define SANDBOX_REKEY_PATH "/etc/voidbox/restore.json"
#define SANDBOX_SNAPSHOT_DIR_MODE 0700
#define SANDBOX_RNG_SEED_BYTES 64
#define SANDBOX_REKEY_ERR_MAX 1024

/* The rekey document: a fresh secret (also returned in new_secret), seed and clock. */
static int sandbox_rekey_document(uint8_t new_secret[PROTO_SECRET_SIZE], char **json)
{
	struct proto_rekey rekey = { .seed_len = SANDBOX_RNG_SEED_BYTES };
	int rc;

	if (getrandom(new_secret, PROTO_SECRET_SIZE, 0) != PROTO_SECRET_SIZE ||
	    getrandom(rekey.seed, rekey.seed_len, 0) != (ssize_t)rekey.seed_len)
		return -EIO;
	memcpy(rekey.secret, new_secret, sizeof(rekey.secret));
	rekey.clock_ns = clock_realtime_ns(); /* the handshake stamps it again as it sends it */
	rc = proto_rekey_encode(&rekey, json);
	explicit_bzero(&rekey, sizeof(rekey));
	return rc;
}

/*
 * Connects with the secret the guest answers to now (old_secret), the rekey riding in the
 * handshake's Ping (docs/protocol.md §3), so the switch costs no round trip of its own. The
 * agent keeps this connection (it closes every other connection from before the switch);
 * later connections use the new secret. An agent that predates the rekey in the handshake
 * answers a plain Pong, and the rekey then goes as a WriteFile on the same connection.
 * As after a cold boot, the handshake itself retries until timeout_ms and stops at once if
 * the VM ends.
 */
static int sandbox_rekey(struct sandbox *sandbox, const uint8_t old_secret[PROTO_SECRET_SIZE],
			 const struct proto_set_policy *policy, int timeout_ms, char *err,
			 size_t errlen)
{
	uint8_t new_secret[PROTO_SECRET_SIZE];
	bool rekeyed = false;
	char *json = NULL;
	int rc;

	memcpy(sandbox->secret, old_secret, sizeof(sandbox->secret));
	rc = sandbox_rekey_document(new_secret, &json);
	if (rc < 0) {
		snprintf(err, errlen, "cannot draw a new session secret for the restored guest: %s",
			 strerror(-rc));
		goto out;
	}
	rc = sandbox_open_channel(sandbox, timeout_ms, json, new_secret, &rekeyed, err, errlen);
	if (rc < 0)
		goto out;
	if (!rekeyed) {
		char *stamped = NULL;

		/* the clock as it is sent, as the handshake stamps its own */
		if (proto_rekey_restamp((const uint8_t *)json, strlen(json), clock_realtime_ns(),
					&stamped) == 0) {
			explicit_bzero(json, strlen(json));
			free(json);
			json = stamped;
		}
		rc = control_channel_write_file(sandbox->channel, SANDBOX_REKEY_PATH, json,
						strlen(json), false, CONTROL_CHANNEL_TIMEOUT_DEFAULT);
		if (rc < 0) {
			snprintf(err, errlen, "the restored guest agent refused the new session "
				 "secret (%s): rebuild the image with this voidbox's agent and take "
				 "the snapshot again", control_channel_last_error());
			goto out;
		}
		control_channel_set_secret(sandbox->channel, new_secret);
	}
	memcpy(sandbox->secret, new_secret, sizeof(sandbox->secret));
	if (sandbox->vm) /* a VMM process is told with each snapshot request instead */
		vm_snapshot_set_secret(sandbox->vm, sandbox->secret);
out:
	explicit_bzero(new_secret, sizeof(new_secret));
	if (json)
		explicit_bzero(json, strlen(json));
	free(json);
	if (rc < 0)
		return rc;
	/* the rekey opened the new session; its policy goes first, on the same connection */
	return sandbox_send_policy(sandbox, policy, err, errlen);
}

int sandbox_snapshot_listed_cpu_features(const char *dir, struct cpu_features *out, char *err,
					 size_t errlen)
{
	struct snapshot_manifest manifest;
	int rc = snapshot_manifest_read(dir, &manifest, err, errlen);

	if (rc == -ENOENT || (rc == 0 && !manifest.has_cpu_features))
		return 0;
	if (rc < 0)
		return rc;
	for (unsigned int i = 0; i < CPU_FEATURE_REG_COUNT; i++)
		out->regs[i] = manifest.cpu_features[i];
	return 1;
}

/*
 * The features dir's manifest.json lists, for the restore to require besides those of the
 * state file; a manifest that cannot be read leaves the state file's alone, with a warning.
 */
static void sandbox_manifest_cpu_features(const char *dir, struct vm_restore_options *opts)
{
	char err[PATH_MAX + 256];
	int rc = sandbox_snapshot_listed_cpu_features(dir, &opts->manifest_cpu_features, err,
						      sizeof(err));

	if (rc < 0)
		log_warn("sandbox", "%s: its CPU features are checked against its state file "
			 "only", err);
	opts->has_manifest_cpu_features = rc > 0;
}

/* The claimed ports the caller grants the restored guest, into the VM's restore options. */
static void sandbox_restore_grants(const struct sandbox_restore_config *cfg,
				   struct vm_restore_options *opts)
{
	for (unsigned int i = 0; cfg->grants && i < cfg->grants->granted_count &&
				 i < NET_MAX_GRANTED_PORTS; i++)
		opts->granted_ports[opts->granted_port_count++] = cfg->grants->granted_ports[i];
}

/* The restore in this process: the VM, and the secret its guest answers to now. */
static int sandbox_restore_here(const struct sandbox_restore_config *cfg,
				struct sandbox *sandbox, uint8_t old_secret[PROTO_SECRET_SIZE],
				char *err, size_t errlen)
{
	struct vm_restore_options opts = {
		.vsock_socket_path = sandbox->socket_path,
		.serial_log_path = sandbox->serial_log_path,
		.track_dirty_pages = cfg->track_dirty_pages,
	};
	char old_hex[2 * PROTO_SECRET_SIZE + 1];
	int rc;

	sandbox_manifest_cpu_features(cfg->snapshot_dir, &opts);
	sandbox_restore_grants(cfg, &opts);
	rc = vm_create_from_snapshot(cfg->snapshot_dir, &opts, &sandbox->vm, err, errlen);

	if (rc < 0)
		return rc;
	rc = vm_start(sandbox->vm);
	if (rc < 0) {
		snprintf(err, errlen, "the restored VM did not start: %s", strerror(-rc));
		return rc;
	}
	vm_secret_hex(sandbox->vm, old_hex);
	rc = proto_secret_from_hex(old_hex, old_secret);
	explicit_bzero(old_hex, sizeof(old_hex));
	return rc < 0 ? -EIO : 0;
}

/*
 * Launches the restore in a VMM process, as a cold boot's (the host CPU chosen here, cgroup
 * caps where delegated); the size, CPU count and CID come from the snapshot, checked before
 * the fork. Returns once the child is forked; vmm_process_await_started waits for its VM.
 */
static int sandbox_launch_restore(const struct sandbox_restore_config *cfg,
				  struct sandbox *sandbox, char *err, size_t errlen)
{
	struct vm_restore_options opts = {
		.vsock_socket_path = sandbox->socket_path,
		.serial_log_path = sandbox->serial_log_path,
		.track_dirty_pages = cfg->track_dirty_pages,
		.has_placement_cpu = true,
	};
	const char *areas[SANDBOX_SNAPSHOT_AREAS_MAX] = { NULL };
	struct vm_snapshot_state *state = NULL;
	struct vm_snapshot_info info;
	int rc = vm_snapshot_state_read(cfg->snapshot_dir, &state, err, errlen);

	/* what the snapshot names is what its sandbox is granted (a fork's was checked first) */
	if (rc == 0) {
		info = *vm_snapshot_state_info(state);
		rc = host_grants_add_snapshot(&sandbox->grants, state, err, errlen);
	}
	vm_snapshot_state_free(state);
	if (rc == 0 && cfg->vmm_placement == SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS)
		rc = sandbox_snapshot_areas(sandbox, cfg->snapshot_area, areas, err, errlen);
	if (rc < 0)
		return rc;
	opts.placement_cpu = vm_placement_choose(info.vcpus);
	sandbox_manifest_cpu_features(cfg->snapshot_dir, &opts);
	sandbox_restore_grants(cfg, &opts);
	sandbox->vsock_cid = info.cid;
	if (info.type == VM_SNAPSHOT_DIFF)
		snprintf(sandbox->dirty_base_dir, sizeof(sandbox->dirty_base_dir), "%s",
			 info.parent_dir);
	else if (!realpath(cfg->snapshot_dir, sandbox->dirty_base_dir))
		sandbox->dirty_base_dir[0] = '\0';
	sandbox_cgroup_prepare(sandbox, info.memory_mb, info.vcpus);
	return vmm_process_launch_restore(cfg->snapshot_dir, &opts,
					  sandbox->cgroup_dir[0] ? sandbox->cgroup_dir : NULL, areas,
					  &sandbox->vmm_proc, err, errlen);
}

/* The restore in a VMM process, and the secret its guest answers to now. */
static int sandbox_restore_in_vmm_process(const struct sandbox_restore_config *cfg,
					  struct sandbox *sandbox,
					  uint8_t old_secret[PROTO_SECRET_SIZE], char *err,
					  size_t errlen)
{
	int rc = sandbox_launch_restore(cfg, sandbox, err, errlen);

	return rc < 0 ? rc : vmm_process_await_started(sandbox->vmm_proc, old_secret, err, errlen);
}

int sandbox_start_from_snapshot(const struct sandbox_restore_config *cfg, struct sandbox **out,
				char *err, size_t errlen)
{
	long started_ms = (long)clock_monotonic_ms();
	struct sandbox *sandbox = NULL;
	uint8_t old_secret[PROTO_SECRET_SIZE];
	int timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : SANDBOX_DEFAULT_BOOT_TIMEOUT_MS;
	int rc;

	*out = NULL;
	rc = sandbox_check_kvm(cfg->host, err, errlen);
	if (rc == 0)
		rc = sandbox_prepare(cfg->serial_log_path, cfg->host, &sandbox, err, errlen);
	if (rc < 0)
		return rc;
	sandbox->start_cancelled = cfg->cancelled;
	sandbox->start_cancelled_opaque = cfg->cancelled_opaque;
	rc = sandbox_refuse_given_up(sandbox, err, errlen);
	if (rc == 0)
		rc = snapshot_store_hold(cfg->snapshot_dir, &sandbox->snapshot_hold, err, errlen);
	if (rc == 0)
		rc = cfg->vmm_placement == SANDBOX_VMM_IN_PROCESS
			     ? sandbox_restore_here(cfg, sandbox, old_secret, err, errlen)
			     : sandbox_restore_in_vmm_process(cfg, sandbox, old_secret, err, errlen);
	if (rc < 0)
		goto fail;
	rc = sandbox_rekey(sandbox, old_secret, cfg->policy, timeout_ms, err, errlen);
	explicit_bzero(old_secret, sizeof(old_secret));
	if (rc < 0)
		goto fail;
	sandbox->boot_ms = (long)clock_monotonic_ms() - started_ms;
	snprintf(sandbox->working_set_dir, sizeof(sandbox->working_set_dir), "%s",
		 cfg->snapshot_dir);
	/* a restore that prefetched its snapshot's own list has nothing to record */
	bool known = sandbox->vmm_proc ? vmm_process_working_set_known(sandbox->vmm_proc)
				       : vm_working_set_known(sandbox->vm);

	atomic_store(&sandbox->record_working_set, !known);
	if (known)
		log_debug(SANDBOX_LOG, "the restore prefetched the working-set list of %s: "
			  "nothing to record", cfg->snapshot_dir);
	log_info(SANDBOX_LOG, "restored %s, agent rekeyed after %ld ms", cfg->snapshot_dir,
		 sandbox->boot_ms);
	sandbox->start_cancelled = NULL;
	*out = sandbox;
	return 0;
fail:
	sandbox_destroy(sandbox, rc != -ECANCELED);
	return rc;
}

/*
 * A snapshot by the VMM process: the directory is made here and both paths are made
 * absolute, so the child needs neither this process's working directory nor its rights.
 */
static int sandbox_snapshot_in_vmm_process(struct sandbox *sandbox, const char *dir,
					   const struct vm_snapshot_options *opts, char *err,
					   size_t errlen)
{
	struct vm_snapshot_options abs_opts = *opts;
	char abs_dir[PATH_MAX], abs_parent[PATH_MAX];
	bool made = mkdir(dir, SANDBOX_SNAPSHOT_DIR_MODE) == 0;

	if (!made && errno != EEXIST) {
		int rc = -errno;

		snprintf(err, errlen, "cannot create snapshot directory %s: %s", dir,
			 strerror(-rc));
		return rc;
	}
	const char *unresolved = !realpath(dir, abs_dir) ? dir : NULL;

	/* the VMM process may write beneath its areas only (its jail and Landlock hold it) */
	if (!unresolved && !sandbox_path_beneath(abs_dir, sandbox->fork_area) &&
	    !sandbox_path_beneath(abs_dir, sandbox->snapshot_area)) {
		if (made)
			rmdir(dir);
		snprintf(err, errlen, "this sandbox's VMM process may write snapshots only beneath "
			 "%s%s%s, not %s: name the directory as the sandbox's snapshot_area when "
			 "starting it", sandbox->fork_area[0] ? sandbox->fork_area : "(none)",
			 sandbox->snapshot_area[0] ? " and " : "", sandbox->snapshot_area, abs_dir);
		return -EACCES;
	}

	if (!unresolved && opts->parent_dir && !realpath(opts->parent_dir, abs_parent))
		unresolved = opts->parent_dir;
	if (unresolved) {
		int rc = -errno;

		snprintf(err, errlen, "cannot resolve the snapshot directory %s: %s", unresolved,
			 strerror(-rc));
		return rc;
	}
	if (opts->parent_dir)
		abs_opts.parent_dir = abs_parent;
	sandbox_cgroup_before_snapshot(sandbox, abs_dir);
	int rc = vmm_process_snapshot(sandbox->vmm_proc, abs_dir, &abs_opts, sandbox->secret, err,
				      errlen);

	/* a base the VM resumed after is what its memory counts from now (vm_snapshot_save) */
	if (rc == 0 && opts->type == VM_SNAPSHOT_BASE && opts->after == VM_SNAPSHOT_RESUME)
		snprintf(sandbox->dirty_base_dir, sizeof(sandbox->dirty_base_dir), "%s", abs_dir);
	return rc;
}

int sandbox_granted(const struct sandbox *sandbox, struct host_grants *out, char *err,
		    size_t errlen)
{
	return host_grants_copy(out, &sandbox->grants, err, errlen);
}

int sandbox_snapshot(struct sandbox *sandbox, const char *dir,
		     const struct vm_snapshot_options *opts, char *err, size_t errlen)
{
	int rc;

	/* the VM stops once saved, so the guest's connection ends: an end nobody need be told of */
	if (opts->after == VM_SNAPSHOT_STAY_STOPPED && sandbox->channel)
		control_channel_expect_end(sandbox->channel);
	if (sandbox->vmm_proc) /* the child stops a VM left stopped itself */
		return sandbox_snapshot_in_vmm_process(sandbox, dir, opts, err, errlen);
	rc = vm_snapshot_save(sandbox->vm, dir, opts, err, errlen);

	/* A VM left stopped is over: end it so teardown does not wait for its agent. */
	if (opts->after == VM_SNAPSHOT_STAY_STOPPED)
		vm_request_stop(sandbox->vm);
	return rc;
}

struct sandbox_rekey_job {
	struct sandbox *child;
	bool await_start; /* a fork into VMM processes: wait for the child's VM first */
	const uint8_t *old_secret;
	const struct proto_set_policy *policy;
	int rc;
	char err[SANDBOX_REKEY_ERR_MAX];
};

static void sandbox_rekey_job_run(void *item)
{
	struct sandbox_rekey_job *job = item;
	long started = (long)clock_monotonic_ms();

	if (job->await_start) {
		job->rc = vmm_process_await_started(job->child->vmm_proc, NULL, job->err,
						    sizeof(job->err));
		if (job->rc < 0)
			return;
	}
	job->rc = sandbox_rekey(job->child, job->old_secret, job->policy,
				SANDBOX_DEFAULT_BOOT_TIMEOUT_MS, job->err, sizeof(job->err));
	log_debug(SANDBOX_LOG, "fork child %s rekeyed in %ld ms", job->child->socket_path,
		  (long)clock_monotonic_ms() - started);
}

/*
 * The children of a fork are rekeyed at the same time: every rekey is a few round trips to a
 * guest that has just resumed, so one after another they would make a fork of n cost n of
 * them. With await_start each child's VMM process, launched already, is waited for first on
 * the same thread, so no child waits for another's restore either.
 */
static int sandbox_rekey_children(struct sandbox *parent, struct sandbox *children[],
				  unsigned int n, bool await_start, char *err, size_t errlen)
{
	struct sandbox_rekey_job *jobs = calloc(n, sizeof(*jobs));
	int rc = 0;

	if (!jobs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < n; i++)
		jobs[i] = (struct sandbox_rekey_job){
			.child = children[i], .await_start = await_start,
			.old_secret = parent->secret,
			.policy = parent->has_policy ? &parent->policy : NULL,
		};
	parallel_for_each(jobs, n, sizeof(*jobs), sandbox_rekey_job_run);
	for (unsigned int i = 0; i < n && rc == 0; i++) {
		if (jobs[i].rc < 0) {
			rc = jobs[i].rc;
			snprintf(err, errlen, "child %u: %s", i, jobs[i].err);
		}
	}
	free(jobs);
	return rc;
}

/*
 * ---- a fork of a VM in a VMM process ----
 * The parent's VMM process saves its VM into a private directory on tmpfs (a diff against the
 * base its memory counts from where there is one, else a base it then counts from), and each
 * child is a restore of that directory in a VMM process of its own, all restoring at the same
 * time, then rekeyed at the same time (sandbox_rekey_children). A diff's directory goes
 * once the children exist (they copied its pages); a base stays while the parent lives, so its
 * next fork is a diff.
 */

static int sandbox_fork_save(struct sandbox *parent, char *dir, size_t dirlen, bool *is_base,
			     char *err, size_t errlen)
{
	struct vm_snapshot_options save = { .type = VM_SNAPSHOT_DIFF,
					    .parent_dir = parent->dirty_base_dir,
					    .after = VM_SNAPSHOT_RESUME };
	int rc = -ENOENT;

	if (!parent->fork_area[0]) {
		snprintf(err, errlen, "this sandbox's VMM process takes no snapshot requests: "
			 "start it with vmm_placement SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS");
		return -EPERM;
	}
	if (snprintf(dir, dirlen, "%s/%s", parent->fork_area, SANDBOX_FORK_SNAPSHOT_TEMPLATE) >=
	    (int)dirlen) {
		snprintf(err, errlen, "the path of the fork directory under %s is too long",
			 parent->fork_area);
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(dir)) {
		rc = -errno;
		snprintf(err, errlen, "cannot create a fork directory under %s: %s",
			 parent->fork_area, strerror(errno));
		return rc;
	}
	if (parent->dirty_base_dir[0])
		rc = sandbox_snapshot_in_vmm_process(parent, dir, &save, err, errlen);
	/* no base, or one gone or replaced: the VM still runs, so a base it is */
	if (rc < 0 && rc != -ECHILD) {
		if (parent->dirty_base_dir[0])
			log_debug(SANDBOX_LOG, "the fork saves a base: %s", err);
		save = (struct vm_snapshot_options){ .type = VM_SNAPSHOT_BASE,
						     .after = VM_SNAPSHOT_RESUME };
		rc = sandbox_snapshot_in_vmm_process(parent, dir, &save, err, errlen);
	}
	*is_base = save.type == VM_SNAPSHOT_BASE;
	if (rc < 0)
		vm_snapshot_dir_remove(dir);
	return rc;
}

/* Copies the file from/name to to/name, refusing anything but a regular file. */
static int sandbox_copy_state_file(const char *from, const char *to, char *err, size_t errlen)
{
	char src[PATH_MAX], dst[PATH_MAX], chunk[SANDBOX_COPY_CHUNK];
	int in = -1, out = -1, rc = 0;
	uint64_t copied = 0;
	struct stat st;
	ssize_t got = 0;

	if (store_join(src, sizeof(src), from, VM_SNAPSHOT_STATE_FILE) < 0 ||
	    store_join(dst, sizeof(dst), to, VM_SNAPSHOT_STATE_FILE) < 0) {
		rc = -ENAMETOOLONG;
		goto out;
	}
	in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = in < 0 ? -errno : -EINVAL;
		goto out;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SANDBOX_SNAPSHOT_FILE_MODE);
	if (out < 0) {
		rc = -errno;
		goto out;
	}
	while (rc == 0 && (got = fd_read_full(in, chunk, sizeof(chunk))) > 0) {
		copied += (uint64_t)got;
		rc = copied > SNAPSHOT_STATE_MAX_BYTES ? -EFBIG
						       : fd_write_full(out, chunk, (size_t)got);
	}
	if (rc == 0 && got < 0)
		rc = (int)got;
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot copy the fork's state from %s to %s: %s", from, to,
			 strerror(-rc));
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc;
}

/*
 * The fork's snapshot as its children restore it: its VMM process wrote dir and may still
 * write there, so its state is copied into a directory of this process's own (on the same
 * file system: the memory file is linked, not copied, since its bytes only ever become the
 * children's guest memory), read back from there, and checked: a diff of the base the parent
 * counts from, or a base; every host path it names one the parent was granted
 * (host_grants_check_snapshot). The children then restore the copy, which no VMM process can
 * change under them.
 */
static int sandbox_fork_check(struct sandbox *parent, const char *dir, bool is_base,
			      char *checked, size_t checkedlen, char *err, size_t errlen)
{
	const char *memory = is_base ? VM_SNAPSHOT_MEMORY_FILE : VM_SNAPSHOT_DIFF_FILE;
	char from[PATH_MAX], to[PATH_MAX], expected_parent[PATH_MAX];
	struct vm_snapshot_state *state = NULL;
	const struct vm_snapshot_info *info;
	int rc;

	/* beside the fork area, not in it: the parent's VMM process can write in that */
	if (snprintf(checked, checkedlen, "%s%s", parent->fork_area,
		     SANDBOX_FORK_CHECKED_SUFFIX) >= (int)checkedlen) {
		snprintf(err, errlen, "the path of a fork directory is too long");
		checked[0] = '\0';
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(checked)) {
		rc = -errno;
		snprintf(err, errlen, "cannot create a directory beside %s: %s", parent->fork_area,
			 strerror(-rc));
		checked[0] = '\0';
		return rc;
	}
	rc = sandbox_copy_state_file(dir, checked, err, errlen);
	if (rc == 0 && (store_join(from, sizeof(from), dir, memory) < 0 ||
			store_join(to, sizeof(to), checked, memory) < 0)) {
		snprintf(err, errlen, "the path of the fork's memory file is too long");
		rc = -ENAMETOOLONG;
	}
	if (rc == 0 && link(from, to) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot link the fork's memory file %s: %s", from,
			 strerror(-rc));
	}
	if (rc == 0)
		rc = vm_snapshot_state_read(checked, &state, err, errlen);
	if (rc == 0) {
		info = vm_snapshot_state_info(state);
		if ((info->type == VM_SNAPSHOT_BASE) != is_base ||
		    (!is_base && (!realpath(parent->dirty_base_dir, expected_parent) ||
				  strcmp(info->parent_dir, expected_parent) != 0))) {
			snprintf(err, errlen, "the fork's snapshot is not the %s its VMM process was "
				 "asked for: it is not restored", is_base ? "base" : "diff");
			rc = -EPERM;
		}
	}
	if (rc == 0)
		rc = host_grants_check_snapshot(&parent->grants, state, err, errlen);
	vm_snapshot_state_free(state);
	if (rc < 0) {
		vm_snapshot_dir_remove(checked);
		checked[0] = '\0';
	}
	return rc;
}

static int sandbox_fork_in_vmm_processes(struct sandbox *parent, unsigned int n,
					 struct sandbox *children[], char *err, size_t errlen)
{
	long started = (long)clock_monotonic_ms();
	char dir[PATH_MAX], checked[PATH_MAX];
	bool is_base = false;
	int rc;

	for (unsigned int i = 0; i < n; i++)
		children[i] = NULL;
	if (n == 0) {
		snprintf(err, errlen, "fork needs at least one child");
		return -EINVAL;
	}
	rc = sandbox_fork_save(parent, dir, sizeof(dir), &is_base, err, errlen);
	if (rc < 0)
		return rc;
	rc = sandbox_fork_check(parent, dir, is_base, checked, sizeof(checked), err, errlen);
	/*
	 * Launched here, on the caller's thread, because a child's death signal follows the
	 * thread that forked it; their restores then run at the same time, each awaited on a
	 * thread of its own before its rekey. The children start from the parent's secret.
	 */
	struct sandbox_restore_config restore = { .snapshot_dir = checked,
						  .vmm_placement = SANDBOX_VMM_OWN_PROCESS };

	for (unsigned int i = 0; i < n && rc == 0; i++) {
		rc = sandbox_prepare(NULL, &parent->host, &children[i], err, errlen);
		if (rc == 0)
			rc = sandbox_launch_restore(&restore, children[i], err, errlen);
	}
	if (rc == 0)
		rc = sandbox_rekey_children(parent, children, n, true, err, errlen);
	if (is_base) { /* the parent's memory counts from it now, whatever became of the children */
		if (parent->fork_base_dir[0])
			vm_snapshot_dir_remove(parent->fork_base_dir);
		if (parent->fork_base_checked_dir[0])
			vm_snapshot_dir_remove(parent->fork_base_checked_dir);
		snprintf(parent->fork_base_dir, sizeof(parent->fork_base_dir), "%s", dir);
		snprintf(parent->fork_base_checked_dir, sizeof(parent->fork_base_checked_dir), "%s",
			 checked);
	} else {
		vm_snapshot_dir_remove(dir);
		if (checked[0])
			vm_snapshot_dir_remove(checked);
	}
	if (rc < 0) {
		for (unsigned int i = 0; i < n; i++) {
			sandbox_destroy(children[i], false);
			children[i] = NULL;
		}
		return rc;
	}
	log_info(SANDBOX_LOG, "forked %u child VM(s), each in a VMM process of its own, in %ld ms "
		 "(the parent saved a %s)", n, (long)clock_monotonic_ms() - started,
		 is_base ? "base" : "diff");
	return 0;
}

/* A fork of a VM in this process: vm_fork, then the children's rekeys. */
static int sandbox_fork_here(struct sandbox *parent, unsigned int n, struct sandbox *children[],
			     char *err, size_t errlen)
{
	struct vm_restore_options *opts = calloc(n ? n : 1, sizeof(*opts));
	const struct vm_restore_options **opts_ptrs = calloc(n ? n : 1, sizeof(*opts_ptrs));
	struct vm **vms = calloc(n ? n : 1, sizeof(*vms));
	unsigned int prepared = 0;
	int rc = opts && opts_ptrs && vms ? 0 : -ENOMEM;

	if (rc < 0)
		snprintf(err, errlen, "out of memory");
	for (unsigned int i = 0; i < n; i++)
		children[i] = NULL;
	for (; rc == 0 && prepared < n; prepared++) {
		rc = sandbox_prepare(NULL, &parent->host, &children[prepared], err, errlen);
		if (rc < 0)
			break;
		opts[prepared] = (struct vm_restore_options){
			.vsock_socket_path = children[prepared]->socket_path,
			.serial_log_path = children[prepared]->serial_log_path,
		};
		opts_ptrs[prepared] = &opts[prepared];
	}
	if (rc == 0)
		rc = vm_fork(parent->vm, n, opts_ptrs, vms, err, errlen);
	for (unsigned int i = 0; rc == 0 && i < n; i++)
		children[i]->vm = vms[i];
	if (rc == 0)
		rc = sandbox_rekey_children(parent, children, n, false, err, errlen);
	if (rc < 0) {
		for (unsigned int i = 0; i < n; i++) {
			sandbox_destroy(children[i], false);
			children[i] = NULL;
		}
	}
	free(opts);
	free(opts_ptrs);
	free(vms);
	return rc;
}

int sandbox_fork(struct sandbox *parent, unsigned int n, struct sandbox *children[], char *err,
		 size_t errlen)
{
	return parent->vmm_proc ? sandbox_fork_in_vmm_processes(parent, n, children, err, errlen)
				: sandbox_fork_here(parent, n, children, err, errlen);
}

void sandbox_secret_hex(const struct sandbox *sandbox, char *out)
{
	proto_secret_to_hex(sandbox->secret, out);
}

/*
 * After a restored sandbox's first exec has answered, the pages its guest touched on the way
 * are the list the next restore of the same snapshot prefetches. Once per sandbox; a failure
 * costs only the next restore's speed, so it is a warning, and only a debug line for a
 * snapshot directory this user cannot write (a shared, read-only store).
 */
static void sandbox_record_working_set(struct sandbox *sandbox)
{
	struct working_set_stats stats = { 0 };
	char err[SANDBOX_REKEY_ERR_MAX];
	/* a VMM process logs its own success line */
	int rc = sandbox->vmm_proc
			 ? vmm_process_record_working_set(sandbox->vmm_proc, err, sizeof(err))
			 : vm_working_set_record(sandbox->vm, sandbox->working_set_dir, &stats, err,
						 sizeof(err));

	if (rc == -EACCES || rc == -EPERM || rc == -EROFS)
		log_debug(SANDBOX_LOG, "%s", err);
	else if (rc < 0)
		log_warn(SANDBOX_LOG, "%s", err);
	else if (stats.pages)
		working_set_log_recorded(SANDBOX_LOG, sandbox->working_set_dir, &stats);
}

int sandbox_exec(struct sandbox *sandbox, const struct proto_exec_request *req,
		 void (*on_chunk)(const struct proto_exec_output_chunk *chunk, void *opaque),
		 void *opaque, struct proto_exec_response *out, char *err, size_t errlen)
{
	int rc = control_channel_exec(sandbox->channel, req, on_chunk, opaque, out);

	if (rc < 0)
		snprintf(err, errlen, "%s (guest console: %s)", control_channel_last_error(),
			 sandbox_serial_log_path(sandbox));
	if (rc == 0 && atomic_exchange(&sandbox->record_working_set, false))
		sandbox_record_working_set(sandbox);
	return rc;
}

struct control_channel_pty *sandbox_pty_open(struct sandbox *sandbox,
					     const struct proto_pty_open *req, char *err,
					     size_t errlen)
{
	int code = 0;
	struct control_channel_pty *pty = control_channel_pty_open(sandbox->channel, req, &code);

	if (!pty)
		snprintf(err, errlen, "%s (guest console: %s)", control_channel_last_error(),
			 sandbox_serial_log_path(sandbox));
	return pty;
}
