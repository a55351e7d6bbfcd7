/*
 * VM snapshots: save a running VM to a directory, inspect one without restoring it, restore it
 * into a new VM, and fork a running VM into live copy-on-write children.
 *
 * A snapshot directory holds a versioned, checksummed `state` file (vCPUs, irqchip, PIT, clock,
 * devices, VM identity; docs/snapshot-format.md lists every field) and one memory file:
 * `memory.mem` (base: all guest RAM, regions back to back) or `memory.diff` (diff: only the
 * pages written since the base it names, from KVM's dirty log). Restore maps the base memory
 * file MAP_PRIVATE, so pages load lazily and guest writes stay private to that VM; a diff's
 * pages are then copied over it.
 *
 * Everything that can be wrong with a snapshot (truncated, corrupted, another format version,
 * another host CPU, a missing or replaced base, a device this VMM cannot restore) is found by
 * vm_snapshot_inspect, which restore calls first, and is reported as a sentence that says what
 * to do; nothing in a snapshot file is trusted before its checksum and bounds are checked.
 *
 * Clone hygiene (fresh secret, RNG seed, clock) needs the guest agent and so lives one layer up,
 * in sandbox_start_from_snapshot / sandbox_fork (src/sandbox/sandbox.h): a VM restored here
 * still answers to the snapshot's stored secret until the sandbox layer rekeys it.
 */
#ifndef VOIDBOX_VMM_SNAPSHOT_H
#define VOIDBOX_VMM_SNAPSHOT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/net_policy.h"
#include "vmm/cpu_features.h"
#include "vmm/device.h"
#include "vmm/vm.h"

#define VM_SNAPSHOT_STATE_FILE "state"
#define VM_SNAPSHOT_MEMORY_FILE "memory.mem"
#define VM_SNAPSHOT_DIFF_FILE "memory.diff"
#define VM_SNAPSHOT_FORMAT_VERSION 3u
#define VM_SNAPSHOT_CPU_SIGNATURE_LEN 64
#define VM_SNAPSHOT_MAX_DEVICES 16
#define VM_SNAPSHOT_DEVICE_NAME_LEN 16

enum vm_snapshot_type {
	VM_SNAPSHOT_BASE = 1, /* all guest memory in memory.mem */
	VM_SNAPSHOT_DIFF = 2, /* pages written since the base in memory.diff */
};

/* What the VM does once the snapshot is on disk. */
enum vm_snapshot_after {
	VM_SNAPSHOT_RESUME,	  /* vCPUs and devices run again */
	VM_SNAPSHOT_STAY_STOPPED, /* vCPUs stay parked; the caller destroys the VM */
};

struct vm_snapshot_options {
	enum vm_snapshot_type type;
	/*
	 * DIFF only: the base snapshot directory this VM's dirty log counts from, i.e. the base
	 * it was restored from, or the base it saved and resumed after. NULL for a base.
	 */
	const char *parent_dir;
	enum vm_snapshot_after after;
};

struct vm_snapshot_info {
	uint32_t version;
	enum vm_snapshot_type type;
	uint64_t id;		  /* first 8 bytes of the state body's SHA-256: names this snapshot */
	char parent_dir[PATH_MAX]; /* DIFF: the base directory, as recorded at save time */
	uint64_t parent_id;	  /* DIFF: the base's id; a replaced base is refused */
	unsigned int memory_mb;
	unsigned int vcpus;
	uint64_t cid;		  /* the guest's vsock CID, reused on restore; 0: no vsock */
	uint64_t state_bytes;	  /* size of the state file */
	uint64_t memory_bytes;	  /* size of memory.mem or memory.diff */
	uint64_t diff_pages;	  /* DIFF: pages in memory.diff */
	uint64_t created_unix_ns; /* wall clock at save */
	char cpu_signature[VM_SNAPSHOT_CPU_SIGNATURE_LEN]; /* "vendor family-model-stepping" */
	bool has_cpu_features;		  /* false: a state file from before they were recorded */
	struct cpu_features cpu_features; /* what the guest was shown (vCPU 0's CPUID) */
	unsigned int device_count;
	char devices[VM_SNAPSHOT_MAX_DEVICES][VM_SNAPSHOT_DEVICE_NAME_LEN]; /* "serial", "rng" */
};

struct vm_restore_options {
	/* Where the restored VM's vsock device listens; required when the snapshot has vsock. */
	const char *vsock_socket_path;
	const char *serial_log_path; /* NULL: discard the console */
	bool serial_to_stdout;
	/*
	 * Accepted for callers that ask for diff tracking explicitly; every restored VM can save a
	 * diff anyway, because its memory is a private mapping of the base file and the pages it
	 * wrote are found in /proc/self/pagemap, so this changes nothing today.
	 */
	bool track_dirty_pages;
	/*
	 * The host CPU of a one-vCPU VM's threads (as in struct vm_config), chosen by the caller;
	 * false: the restore chooses. A VMM process's copy of the turn counter would repeat its
	 * siblings' choice, and a fork's children, chosen by each child's own restore thread,
	 * would bunch on whichever CPU ran it: so both choose one after another in the parent.
	 */
	bool has_placement_cpu;
	int placement_cpu;
	/*
	 * CPU features the snapshot's manifest.json says its guest was shown (an imported
	 * archive's list, or one edited in a copy): the restore requires these as well as those
	 * its state file records. false: the state file's alone.
	 */
	bool has_manifest_cpu_features;
	struct cpu_features manifest_cpu_features;
	/*
	 * Host loopback ports the restored guest may reach although another voidbox service
	 * claims them (its own messaging listener: docs/devices.md), added to the egress policy
	 * its snapshot's network section holds; nothing without a network device.
	 */
	uint16_t granted_ports[NET_MAX_GRANTED_PORTS];
	unsigned int granted_port_count;
};

/*
 * Pauses the vCPUs (out of KVM_RUN, pending I/O completed) and the vsock worker, captures
 * every vCPU, the irqchip, PIT, clock and device state, writes dir/state and the memory file
 * (dir is created if missing; files are written under temporary names, fsynced and renamed),
 * then resumes or leaves the VM stopped as opts->after says. A base saved with
 * VM_SNAPSHOT_RESUME starts dirty logging, so a later diff against it is possible.
 * Returns 0 or -errno with a sentence in err.
 */
int vm_snapshot_save(struct vm *vm, const char *dir, const struct vm_snapshot_options *opts,
		     char *err, size_t errlen);

/*
 * Reads and checks dir/state (length, checksum, version, host CPU, devices, the memory file's
 * size, for a diff its base's presence and id). Returns 0 with *info, or -errno and err.
 */
int vm_snapshot_inspect(const char *dir, struct vm_snapshot_info *info, char *err,
			size_t errlen);

/*
 * Builds a VM from a snapshot: same memory size, vCPUs and CID, memory mapped copy-on-write,
 * state restored in the order docs/snapshot-format.md gives. Start it with vm_start; once
 * running it raises a vsock transport reset so the guest drops connections from before the
 * snapshot. Returns 0 and *out, or -errno with err.
 */
int vm_create_from_snapshot(const char *dir, const struct vm_restore_options *opts,
			    struct vm **out, char *err, size_t errlen);

/*
 * A snapshot's state file read and checked once (vm_snapshot_state_read), so that what
 * confines a restore and the restore itself see the same bytes: its info, every host path its
 * device sections make the restore open (vm_snapshot_host_paths), then the restore
 * (vm_create_from_snapshot_state). Free with vm_snapshot_state_free.
 */
struct vm_snapshot_state;

/* vm_snapshot_inspect's checks of dir, the decoded state kept. 0 and *out, or -errno and err. */
int vm_snapshot_state_read(const char *dir, struct vm_snapshot_state **out, char *err,
			   size_t errlen);
const struct vm_snapshot_info *vm_snapshot_state_info(const struct vm_snapshot_state *state);
/*
 * Hands each every host path a restore of state opens by a name a device section holds (a
 * disk with its access, a share's directory with its mode), asking each saved device's kind
 * (its vm_device_type's host_paths); the snapshot's own files and what the restore options
 * name are not listed. 0, -EBADMSG with err for a malformed section, or what each returned.
 */
int vm_snapshot_host_paths(const struct vm_snapshot_state *state, vm_host_path_fn each,
			   void *opaque, char *err, size_t errlen);
/*
 * Loads the shared libraries the restore of state will call, asking each saved device's kind
 * (its vm_device_type's load_libraries), while the host's files are in reach. 0, or the first
 * failure with err.
 */
int vm_snapshot_load_device_libraries(const struct vm_snapshot_state *state, char *err,
				      size_t errlen);
/*
 * vm_create_from_snapshot of dir (the directory state was read from, or the same directory
 * by another name, such as its canonical path) from the state already read. The state can be
 * freed afterwards.
 */
int vm_create_from_snapshot_state(const char *dir, const struct vm_snapshot_state *state,
				  const struct vm_restore_options *opts, struct vm **out,
				  char *err, size_t errlen);
void vm_snapshot_state_free(struct vm_snapshot_state *state);

/*
 * Forks a running VM into n running children that share its memory copy-on-write; each child
 * gets child_opts[i] (its own vsock socket). The parent is paused for the capture and resumes.
 * children[] receives n started VMs, or nothing on failure. See docs/snapshot-format.md (fork).
 */
int vm_fork(struct vm *parent, unsigned int n, const struct vm_restore_options *const child_opts[],
	    struct vm *children[], char *err, size_t errlen);

/*
 * Records the session secret the guest agent answers to now (after a rekey it differs from
 * the one on the kernel command line); snapshots store it so the next restore can rekey.
 */
void vm_snapshot_set_secret(struct vm *vm, const uint8_t secret[VM_SECRET_LEN]);

const char *vm_snapshot_type_name(enum vm_snapshot_type type);
/* Removes a snapshot directory a fork made: its state and memory files, then the directory. */
void vm_snapshot_dir_remove(const char *dir);

#endif
