/*
 * virtio-fs (VIRTIO 1.2 §5.11) served in-process: one device per shared host directory, a
 * worker thread that takes FUSE requests off its queues and answers them with fuse_server.
 * No external daemon and no shared-memory vhost-user: guest RAM stays the VMM's private
 * copy-on-write mapping that snapshots rely on; the server works on the guest's buffers
 * (file data moves with one pwritev or preadv, headers are copied).
 */
#ifndef VOIDBOX_DEVICES_FS_H
#define VOIDBOX_DEVICES_FS_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/fuse_server.h"
#include "devices/virtio_mmio.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define VIRTIO_ID_FS 26
/* The config space's tag field; the tag is NUL-padded, at most this long. */
#define FS_TAG_LEN 36
/* Queue 0 is hiprio (FORGET), queue 1 the one request queue. */
#define FS_QUEUE_HIPRIO 0u
#define FS_QUEUE_REQUEST 1u
#define FS_QUEUE_COUNT 2u

enum fs_worker_mode {
	FS_WORKER_THREAD, /* a thread serves the queues when the guest notifies */
	FS_WORKER_CALLER, /* fs_device_poll serves them (tests) */
};

struct fs_device_config {
	const char *tag;
	const char *host_dir;
	enum fuse_server_access access;
	const struct guest_memory *mem;
	struct irq_line irq;
	enum fs_worker_mode worker_mode;
	bool confine_worker; /* the worker installs its seccomp filter (vmm/thread_filter.h) */
	/* the CPUs the worker runs on (vm_stream_worker_cpus); NULL: its creator's */
	const cpu_set_t *worker_cpus;
};

struct fs_device;

/* NULL with a sentence in err (the directory cannot be opened, a bad tag, no memory). */
struct fs_device *fs_device_create(const struct fs_device_config *cfg, char *err, size_t errlen);
void fs_device_destroy(struct fs_device *dev);
struct virtio_mmio *fs_device_transport(struct fs_device *dev);
/* FS_WORKER_CALLER: serves every available request now; returns how many were answered. */
unsigned int fs_device_poll(struct fs_device *dev);
struct fuse_server *fs_device_server(struct fs_device *dev);

#endif
