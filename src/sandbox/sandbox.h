/*
 * A sandbox is one running micro-VM with its guest agent reachable: the composition of the
 * VMM (src/vmm), the userspace vsock device (src/devices) and the control channel (src/host).
 * Everything above this layer (the CLI, specs, workflows) talks to a sandbox and never to KVM,
 * devices or sockets directly.
 *
 * Start is "boot, wait until the agent answers, hand it the exec policy": a VM that stops
 * before that, or an agent that never answers within the boot timeout, fails with a sentence
 * that names the serial log, so a broken kernel or initramfs is never a hang. The policy goes
 * over the authenticated control connection, never through a file the sandbox could touch.
 */
#ifndef VOIDBOX_SANDBOX_SANDBOX_H
#define VOIDBOX_SANDBOX_SANDBOX_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "host/control_channel.h"
#include "sandbox/host_grants.h"
#include "vmm/snapshot.h"
#include "vmm/vm.h"

#define SANDBOX_DEFAULT_MEMORY_MB 512
#define SANDBOX_DEFAULT_VCPUS 1
#define SANDBOX_DEFAULT_BOOT_TIMEOUT_MS 120000
/* The limits of the host's default policy (applied as RLIMIT_NOFILE, _NPROC, _FSIZE). */
#define SANDBOX_DEFAULT_MAX_OPEN_FILES 1024u
#define SANDBOX_DEFAULT_MAX_PROCESSES 512u
#define SANDBOX_DEFAULT_MAX_FILE_SIZE (100u * 1024u * 1024u)

/*
 * What the host's environment may tune for the sandboxes of a process. The CLI reads the
 * variables once (cli_host_settings_from_env: VOIDBOX_BOOT_TIMEOUT_SECS, XDG_RUNTIME_DIR,
 * VOIDBOX_ALLOW_SLOW_KVM, VOID_BOX_CONNECT_DEADLINE_SECS, VOID_BOX_LIVENESS_SECS) and passes
 * this in; nothing below the CLI reads the environment. A NULL pointer, or a zero field,
 * means the default.
 */
struct sandbox_host_settings {
	int boot_timeout_ms;	    /* replaces sandbox_config.boot_timeout_ms; 0: none */
	const char *runtime_base;   /* where runtime directories are made; NULL: /tmp */
	bool allow_slow_kvm;	    /* boot even where /dev/kvm emulates a standard guest */
	int connect_deadline_ms;    /* a restore's handshake retries this long; 0: the default */
	int liveness_timeout_ms;    /* a long exec's liveness answer time; 0: 60 s, < 0: off */
};

/* At most this many host directories per sandbox (each one virtio-mmio slot). */
#define SANDBOX_MAX_MOUNTS 8
/* A virtio-fs tag (36 bytes) and its NUL. */
#define SANDBOX_MOUNT_TAG_MAX 37
/* The kernel command line words the mounts may take, with the extra arguments. */
#define SANDBOX_MOUNTS_CMDLINE_MAX 2048

/* A host directory the guest sees at guest_dir (docs/devices.md, virtio-fs). */
struct sandbox_mount {
	const char *host_dir;
	const char *guest_dir; /* absolute; no spaces or colons */
	bool read_only;	       /* writes answer EROFS, enforced by the host */
};

/* Where a sandbox's VMM runs (docs/security.md, "What runs where"). */
enum sandbox_vmm_placement {
	SANDBOX_VMM_IN_PROCESS,	 /* in the caller's process (docs/security.md says who) */
	/* a confined child process (sandbox/vmm_process.h) that writes no file: no snapshots */
	SANDBOX_VMM_OWN_PROCESS,
	/* the same, whose main thread may also write snapshots when asked (sandbox_snapshot) */
	SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS,
};

/*
 * Whether the caller has given up a start under way (a signal to the CLI, a cancelled run).
 * A boot and a restore ask it before their VMM starts and before each attempt to reach the
 * guest agent, so a cancel ends the start with -ECANCELED within an attempt or two (a few
 * seconds at most) instead of at the boot timeout. It runs on the starting thread only.
 */
typedef bool (*sandbox_cancelled_fn)(void *opaque);

struct sandbox_config {
	const char *kernel_path;
	const char *initramfs_path;
	unsigned int memory_mb;		/* 0: SANDBOX_DEFAULT_MEMORY_MB */
	unsigned int vcpus;		/* 0: SANDBOX_DEFAULT_VCPUS */
	const char *extra_cmdline;	/* appended to the kernel command line; may be NULL */
	/* Where the guest console goes; NULL: a file in the sandbox's runtime directory. */
	const char *serial_log_path;
	/* 0: SANDBOX_DEFAULT_BOOT_TIMEOUT_MS (host->boot_timeout_ms overrides). */
	int boot_timeout_ms;
	/* The host's settings (above); NULL: defaults. */
	const struct sandbox_host_settings *host;
	/*
	 * By default the kernel boots as the vmlinux extracted once into the kernel cache
	 * (sandbox_kernel_cache_dir), skipping the in-guest decompression that dominates a
	 * boot; true boots the bzImage as given, keeping the decompressor's KASLR.
	 */
	bool boot_compressed_kernel;
	/* Queue notifications exit to user space (vm_config.no_doorbells): benchmarks only. */
	bool no_doorbells;
	/*
	 * The exec policy the agent enforces (docs/protocol.md §8), sent right after the
	 * handshake, before anything can run. NULL: the host's default, every command allowed
	 * with the SANDBOX_DEFAULT_* limits; the agent is told so explicitly, it never assumes
	 * it (without a policy it refuses every command).
	 */
	const struct proto_set_policy *policy;
	/* Host files the guest sees as /dev/vda, /dev/vdb...; at most VM_MAX_DISKS. */
	const struct vm_disk *disks;
	unsigned int disk_count;
	/*
	 * User-mode networking (src/devices/net.h): NULL, the default, boots without a network
	 * device; set, the VM gets virtio-net with this policy and the agent brings eth0 up.
	 */
	const struct net_config *network;
	/* Host directories shared over virtio-fs; a restored sandbox keeps its snapshot's. */
	struct sandbox_mount mounts[SANDBOX_MAX_MOUNTS];
	unsigned int mount_count;
	/*
	 * Also where sandbox_open runs a restore's VMM (a restored VM in a process of its own
	 * may always write snapshots and its working set). A sandbox_fork parent in a process of
	 * its own needs OWN_PROCESS_SNAPSHOTS (or to have been restored).
	 */
	enum sandbox_vmm_placement vmm_placement;
	/*
	 * OWN_PROCESS_SNAPSHOTS: an existing directory sandbox_snapshot will write into (or
	 * beneath), such as the snapshot store's temporary directory of a `snapshot create`; its
	 * VMM process's jail holds it and its private fork directory, nothing else it may write.
	 * NULL: forks only.
	 */
	const char *snapshot_area;
	/*
	 * Whether the caller gave the start up (above); NULL: never, the start ends at the boot
	 * timeout at the latest.
	 */
	sandbox_cancelled_fn cancelled;
	void *cancelled_opaque;
};

/* The host's default policy: every command, the SANDBOX_DEFAULT_* limits. */
const struct proto_set_policy *sandbox_default_policy(void);

/*
 * Parses a --disk argument, PATH or PATH:ro (PATH:rw is the default spelled out), into *disk.
 * The suffix is cut off arg in place, so disk->path points into arg (a file named like a
 * suffix is given as ./:ro). 0, or -EINVAL with err for an empty path.
 */
int sandbox_disk_parse(char *arg, struct vm_disk *disk, char *err, size_t errlen);

/*
 * Splits "HOST_DIR:GUEST_DIR[:ro|:rw]" (default rw) in place into out; the strings point into
 * text. 0, or -EINVAL with a sentence in err.
 */
int sandbox_mount_parse(char *text, struct sandbox_mount *out, char *err, size_t errlen);

/* What sandbox_start hands the VM for cfg's mounts: devices and command line words. */
struct sandbox_mounts_plan {
	struct vm_share shares[SANDBOX_MAX_MOUNTS];
	char host_dirs[SANDBOX_MAX_MOUNTS][PATH_MAX]; /* resolved */
	char tags[SANDBOX_MAX_MOUNTS][SANDBOX_MOUNT_TAG_MAX];
	unsigned int share_count;
	char cmdline[SANDBOX_MOUNTS_CMDLINE_MAX]; /* cfg's extra arguments, then the mounts */
};

/* Checks cfg's mounts (directories, guest paths) and plans them; -errno with a sentence. */
int sandbox_mounts_plan(const struct sandbox_config *cfg, struct sandbox_mounts_plan **out,
			char *err, size_t errlen);
void sandbox_mounts_plan_free(struct sandbox_mounts_plan *plan);

/* $VOIDBOX_HOME/cache/kernels: where extracted kernels are kept. */
int sandbox_kernel_cache_dir(char *out, size_t len);

struct sandbox;

/*
 * Boots the VM and waits until its agent has completed the handshake. Returns 0 and *out, or
 * -errno with a user-facing sentence in err (which names the serial log when the guest is at
 * fault).
 */
int sandbox_start(const struct sandbox_config *cfg, struct sandbox **out, char *err,
		  size_t errlen);

/* The agent's RPC channel; owned by the sandbox. Callers above src/sandbox use the calls below. */
struct control_channel *sandbox_channel(struct sandbox *sandbox);

/*
 * Runs req in the guest (output chunks to on_chunk as they come, may be NULL). Returns 0 with
 * out filled (free with proto_exec_response_free), or -errno with a sentence in err that
 * names the guest console.
 */
int sandbox_exec(struct sandbox *sandbox, const struct proto_exec_request *req,
		 void (*on_chunk)(const struct proto_exec_output_chunk *chunk, void *opaque),
		 void *opaque, struct proto_exec_response *out, char *err, size_t errlen);
/* Opens a terminal session in the guest; NULL with a sentence in err. */
struct control_channel_pty *sandbox_pty_open(struct sandbox *sandbox,
					     const struct proto_pty_open *req, char *err,
					     size_t errlen);
const char *sandbox_serial_log_path(const struct sandbox *sandbox);
const char *sandbox_vsock_socket_path(const struct sandbox *sandbox);
unsigned long sandbox_guest_cid(const struct sandbox *sandbox);
/* The process that runs the sandbox's VM: the caller's own, or its VMM process. */
pid_t sandbox_vmm_pid(const struct sandbox *sandbox);
/*
 * For a restored sandbox: how many pages of its working set the restore mapped into KVM ahead
 * of the guest (KVM_PRE_FAULT_MEMORY, Linux 6.10); 0 for a cold boot, a restore without a
 * working-set list, or a kernel without it.
 */
uint64_t sandbox_working_set_prefaulted_pages(const struct sandbox *sandbox);
/* Milliseconds from sandbox_start's call to the agent's first Pong. */
long sandbox_boot_ms(const struct sandbox *sandbox);

/*
 * Waits up to timeout_ms for the VM to end by itself (guest poweroff, reboot, panic).
 * Returns 0 with *reason, or -ETIMEDOUT.
 */
int sandbox_wait_exit(struct sandbox *sandbox, int timeout_ms, enum vm_exit_reason *reason);

/*
 * For a cancel, from any thread while calls are in flight: with force false the agent is asked
 * to sync and power off, which fails every call under way (the guest ends the connection);
 * when that cannot be asked, the control connection is cut. With force true, for a guest that
 * did not power off, the connection is cut and the VM is stopped, which also ends a terminal
 * session. Nothing connects again afterwards; sandbox_destroy still frees everything.
 */
void sandbox_interrupt(struct sandbox *sandbox, bool force);

/*
 * Stops the VM (asks the agent to power off, then forces a stop after a short grace),
 * releases every thread, fd, mapping and file (a temporary serial log, with its runtime
 * directory, is kept only with keep_serial_log and only when the guest wrote to it; a named
 * one is always left). NULL is fine.
 */
void sandbox_destroy(struct sandbox *sandbox, bool keep_serial_log);

/*
 * Snapshots and clones (docs/snapshot-format.md). A restored or forked sandbox is rekeyed
 * before it is handed out: the host connects once with the snapshot's stored secret, sends the
 * agent a fresh secret, RNG seed and clock (WriteFile to /etc/voidbox/restore.json), and
 * reconnects with the new secret; two sandboxes restored from one snapshot never share one.
 */
struct sandbox_restore_config {
	const char *snapshot_dir;
	const char *serial_log_path; /* NULL: a file in the sandbox's runtime directory */
	int timeout_ms;		     /* agent answer + rekey; 0: SANDBOX_DEFAULT_BOOT_TIMEOUT_MS */
	bool track_dirty_pages;	     /* so sandbox_snapshot can later save a diff */
	const struct sandbox_host_settings *host; /* NULL: defaults */
	/*
	 * Sent after the rekey. NULL: the restored agent keeps the policy it held when the
	 * snapshot was taken (it lives in guest memory), which is never widened by a restore.
	 */
	const struct proto_set_policy *policy;
	/*
	 * IN_PROCESS (the zero value): the VM in the caller's process; either OWN_PROCESS: in a
	 * confined process of its own that restores the VM, may write snapshots and records
	 * the working set, while the rekey stays here.
	 */
	enum sandbox_vmm_placement vmm_placement;
	/* OWN_PROCESS_SNAPSHOTS: as sandbox_config's snapshot_area. */
	const char *snapshot_area;
	/*
	 * Claimed host loopback ports the restored guest may reach (vm_restore_options); NULL: none.
	 * sandbox_open passes its config's network grants (a messaging agent's own listener).
	 */
	const struct net_policy *grants;
	/* As sandbox_config's: asked before each attempt to reach the restored agent. */
	sandbox_cancelled_fn cancelled;
	void *cancelled_opaque;
};

/* What sandbox_open did, for the caller to report. */
struct sandbox_open_info {
	bool restored;		       /* from snapshot_dir */
	bool fell_back_to_cold_boot;   /* the reference named nothing: warning says so */
	char snapshot_dir[PATH_MAX];
	char warning[PATH_MAX + 256];
};

/*
 * Starts a sandbox the way a user asked: a cold boot of cfg when snapshot_ref is NULL, else a
 * restore of what the reference resolves to (a store id prefix, then a directory). A
 * reference that names nothing cold-boots cfg with info->warning set; an ambiguous
 * reference, or a restore that fails for any reason, is an error (a restore's -ENOENT, such
 * as a missing base, is returned as -ESTALE so it is never mistaken for "names nothing").
 * The serial log path and boot timeout of cfg apply to a restore too.
 */
int sandbox_open(const struct sandbox_config *cfg, const char *snapshot_ref,
		 bool track_dirty_pages, struct sandbox **out, struct sandbox_open_info *info,
		 char *err, size_t errlen);

/* The session secret the host uses now, hex (2 * PROTO_SECRET_SIZE + 1 bytes). */
void sandbox_secret_hex(const struct sandbox *sandbox, char *out);
int sandbox_start_from_snapshot(const struct sandbox_restore_config *cfg, struct sandbox **out,
				char *err, size_t errlen);
/*
 * The CPU features the snapshot in dir lists in its manifest.json (docs/snapshots.md), which
 * every restore requires besides those its state file records: 1 with *out, 0 when it lists
 * none (or has no manifest), -errno with err when the manifest cannot be read.
 */
int sandbox_snapshot_listed_cpu_features(const char *dir, struct cpu_features *out, char *err,
					 size_t errlen);
/*
 * A copy of the host paths the sandbox was granted (its disks and shares; a restore's, those
 * its snapshot names), into *out (emptied first): what a snapshot its VMM process wrote may
 * name (host_grants_check_dir), checked once that process has ended. 0 or -ENOMEM with err.
 */
int sandbox_granted(const struct sandbox *sandbox, struct host_grants *out, char *err,
		    size_t errlen);
/*
 * vm_snapshot_save on the sandbox's VM, wherever it runs (a VMM process is asked over its
 * control socket and told the session secret, which the snapshot stores); the channel
 * reconnects by itself after a resume.
 */
int sandbox_snapshot(struct sandbox *sandbox, const char *dir,
		     const struct vm_snapshot_options *opts, char *err, size_t errlen);
/*
 * n live copy-on-write children of a running sandbox, each with its own runtime directory,
 * vsock socket and secret, and the parent's policy sent again after its rekey; the parent
 * keeps running. A parent whose VMM runs in this process forks in it (vm_fork); one in a VMM
 * process writes a snapshot on request and each child restores it in a VMM process of its
 * own. children[] is filled only on success.
 */
int sandbox_fork(struct sandbox *parent, unsigned int n, struct sandbox *children[], char *err,
		 size_t errlen);

#endif
