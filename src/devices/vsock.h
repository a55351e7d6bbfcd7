/*
 * The userspace virtio-vsock device (VIRTIO 1.2 §5.10) with a hybrid host side: the host
 * reaches guest ports through one AF_UNIX socket per VM instead of /dev/vhost-vsock, so a
 * restored clone gets its own socket path and all state lives in this process (snapshot-able).
 *
 * Host protocol on the unix socket: the client sends "CONNECT <port>\n"; once the guest
 * accepts (RESPONSE) the device answers "OK <host-port>\n" and the connection becomes a raw
 * byte stream; on RST or timeout the device closes it. Guest-initiated connections to the
 * host are refused with RST. See docs/devices.md.
 *
 * One worker thread owns all connections (epoll over the listening socket, the host
 * connections and an eventfd the transport kicks on queue notify). For tests and fuzzers the
 * same loop can run on the caller's thread instead (VSOCK_WORKER_CALLER + vsock_device_poll).
 */
#ifndef VOIDBOX_DEVICES_VSOCK_H
#define VOIDBOX_DEVICES_VSOCK_H

#include <stddef.h>
#include <stdint.h>

#include "devices/virtio_mmio.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define VSOCK_HOST_CID 2u
#define VSOCK_MIN_GUEST_CID 3u
#define VSOCK_QUEUE_NUM_MAX 256
#define VSOCK_MAX_CONNECTIONS 128
/* Credit we advertise per connection (guest -> host bytes we accept before forwarding). */
#define VSOCK_CONN_BUF_ALLOC (256u * 1024u)
/* Host -> guest bytes buffered across all connections before host sockets stop being read. */
#define VSOCK_HOST_BACKLOG_LIMIT (4u * 1024u * 1024u)
/* How long a host CONNECT waits for the guest's RESPONSE before the device closes it. */
#define VSOCK_CONNECT_TIMEOUT_MS 10000

enum vsock_queue_index {
	VSOCK_QUEUE_RX = 0,
	VSOCK_QUEUE_TX = 1,
	VSOCK_QUEUE_EVENT = 2,
	VSOCK_QUEUE_COUNT = 3,
};

enum vsock_worker_mode {
	VSOCK_WORKER_THREAD, /* the device runs its own worker thread (the VMM's choice) */
	VSOCK_WORKER_CALLER, /* the caller runs the loop with vsock_device_poll() */
};

struct vsock_device_config {
	uint64_t guest_cid;
	const char *uds_path;
	const struct guest_memory *mem;
	struct irq_line irq;
	enum vsock_worker_mode worker_mode;
	bool confine_worker; /* the worker installs its seccomp filter (vmm/thread_filter.h) */
};

struct vsock_device;

/*
 * Creates the device, binds and listens on uds_path (a stale socket file there is replaced)
 * and starts the worker. On failure returns NULL with a message for the user in err.
 */
struct vsock_device *vsock_device_create(const struct vsock_device_config *cfg, char *err,
					 size_t errlen);
/* Stops the worker, closes every connection and removes the socket file. */
void vsock_device_destroy(struct vsock_device *dev);

/* The transport to register on the MMIO bus: virtio_mmio_register(t, bus, base). */
struct virtio_mmio *vsock_device_transport(struct vsock_device *dev);
uint64_t vsock_device_guest_cid(const struct vsock_device *dev);
const char *vsock_device_uds_path(const struct vsock_device *dev);

/*
 * Drops every connection and queues VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the event queue so
 * the guest closes its sockets (used after a snapshot restore). Returns 0 or -errno.
 */
int vsock_device_reset_transport(struct vsock_device *dev);
/*
 * The guest has stopped for good: every host connection is closed, so whoever holds one reads
 * EOF at once instead of waiting for a guest that will never answer.
 */
void vsock_device_guest_stopped(struct vsock_device *dev);

/* VSOCK_WORKER_CALLER only: runs one loop iteration, waiting up to timeout_ms for events. */
int vsock_device_poll(struct vsock_device *dev, int timeout_ms);

/*
 * The eventfd that wakes the worker to look at every queue. A QUEUE_NOTIFY register write
 * only writes it, so a VMM may bind this fd to the notify register with KVM_IOEVENTFD (no
 * datamatch needed) and keep notifies from ever leaving the kernel. Owned by the device.
 */
int vsock_device_kick_fd(const struct vsock_device *dev);

/* Number of live connections (tests and diagnostics). */
unsigned int vsock_device_connection_count(struct vsock_device *dev);

#endif
