/*
 * seccomp filters for the threads that do the guest's bidding. A vCPU thread, a device worker
 * and the control channel's reader run code the guest drives with every exit, every queue
 * entry and every frame; if that code is ever subverted, the filter bounds what it can do: no
 * processes, no exec, no mounts, no new sockets or files beyond what the role's device exists
 * to make. Each role gets the system calls its loop needs and nothing else; anything else
 * fails with EPERM (rather than killing the process, so a missed call degrades one operation
 * instead of taking every sandbox of the process down). Filters are installed by each thread
 * on itself before it first touches the guest, and are inherited by nothing (these threads
 * start no others). docs/architecture.md ("What runs where") lists the roles.
 */
#ifndef VOIDBOX_VMM_THREAD_FILTER_H
#define VOIDBOX_VMM_THREAD_FILTER_H

#include <stdbool.h>
#include <stddef.h>

enum vmm_thread_role {
	VMM_THREAD_VCPU,	  /* KVM_RUN and the port/MMIO handlers it calls */
	VMM_THREAD_DEVICE_WORKER, /* the vsock worker: its sockets, eventfds and the guest */
	VMM_THREAD_BLOCK_WORKER,  /* a disk's worker: reads, writes and flushes of its file */
	VMM_THREAD_SHARE_WORKER,  /* a virtio-fs worker: file calls beneath its share */
	VMM_THREAD_NET_WORKER,	  /* libslirp: IPv4/IPv6 sockets, /etc/resolv.conf read-only */
	VMM_THREAD_CHANNEL_READER, /* the control channel's reader: frames from the agent */
	VMM_THREAD_VMM_MAIN,	  /* a VMM process's main thread: its control socket, teardown */
	/* the same, and it writes snapshots and working-set lists when its parent asks */
	VMM_THREAD_VMM_MAIN_SNAPSHOTS,
	VMM_THREAD_ROLE_COUNT,
};

/* Installs the role's filter on the calling thread. 0 or -errno (nothing installed). */
int vmm_thread_confine(enum vmm_thread_role role);
/* The role's name for logs ("vcpu", "device worker", ...). */
const char *vmm_thread_role_name(enum vmm_thread_role role);
/*
 * Limits the calling thread's file access to the trees beneath dirs (Landlock): every kind of
 * access there, or with read_only only reading; nothing elsewhere. A seccomp filter bounds
 * which calls a thread makes, this bounds which files they reach: a share's worker reaches
 * its share, the network worker only what libslirp reads (/etc/resolv.conf), so neither can
 * open the user's files. Call it before vmm_thread_enter (whose filter forbids the Landlock
 * calls). 0; -EOPNOTSUPP where the kernel has no Landlock, or only its first version (which
 * refuses every rename across directories); or -errno (nothing restricted).
 */
int vmm_thread_restrict_to_dirs(const char *const dirs[], size_t count, bool read_only);

/* A path a thread may reach: a directory and everything beneath it, or one file. */
struct vmm_thread_path {
	const char *path;
	bool read_only; /* only reading (and, for a directory, listing) */
};

/*
 * vmm_thread_restrict_to_dirs with each path's own access, and files as well as directories:
 * the snapshot-writing main thread of a VMM process writes beneath some directories, only
 * reads others, and reads /proc/self/pagemap. The same returns.
 */
int vmm_thread_restrict_to(const struct vmm_thread_path paths[], size_t count);
/* Whether vmm_thread_restrict_to_dirs can work on this kernel (it changes nothing). */
bool vmm_thread_restrict_usable(void);
/*
 * What a device worker or reader calls first: names the calling thread thread_name (so
 * /proc/PID/task shows which thread is which; NULL keeps the name it has) and, when confine,
 * installs the role's filter.
 * A filter that cannot be installed is logged as an error and the thread runs on unconfined:
 * the device stays usable rather than cut the guest off. vCPU threads do not use this; they
 * refuse to run unconfined (src/vmm/vcpu.c).
 */
void vmm_thread_enter(enum vmm_thread_role role, const char *thread_name, bool confine);

#endif
