/*
 * virtio-vsock device: virtio plumbing and the worker loop. The connection state machine
 * lives in vsock_conn.c; this file turns TX chains into packets for it, fills RX chains with
 * what it owes the guest, delivers transport-reset events, and runs the epoll loop.
 *
 * Every loop iteration does the same fixed sequence under the device lock (host socket
 * events, TX queue, RX queue, event queue, housekeeping), so progress never depends on which
 * fd woke us; a vCPU's queue notify only writes an eventfd. A malformed ring marks the
 * transport NEEDS_RESET and the device stops touching the queues until the driver resets.
 *
 * After a transport reset (a restored VM), host connection requests are held until the guest
 * has handled the reset event, which it shows by giving the event buffer back: a REQUEST that
 * reached it first would be accepted, then reset with the connections from before the
 * snapshot, and the host would pay a failed handshake and a retry on every restore.
 */
#include "devices/vsock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "devices/vsock_internal.h"
#include "vmm/thread_filter.h"

#define VSOCK_WORKER_THREAD_NAME "vsock-worker"
#define VSOCK_EPOLL_BATCH 64
#define VSOCK_LISTEN_BACKLOG 64
/* While a CONNECT waits for the guest, wake up this often to enforce its deadline. */
#define VSOCK_DEADLINE_TICK_MS 100
#define VSOCK_CONFIG_SIZE 8u /* struct virtio_vsock_config: le64 guest_cid */
#define VSOCK_CONFIG_BITS_PER_BYTE 8u
/*
 * After a transport reset, host ports start at a random point this far past the first one:
 * the guest still holds the reset sockets of the connections from before the snapshot until
 * their owners close them, and a REQUEST from one of their host ports would hit such a
 * socket and be refused.
 */
#define VSOCK_RESET_PORT_SPAN 0x40000000u
/* Chains handled per queue per iteration, so one busy queue cannot starve the others. */
#define VSOCK_CHAINS_PER_ITERATION 256u

static const char *const log_module = "vsock";

/* ---- virtio ops ---- */

static void vsock_config_read(void *opaque, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct vsock_device *dev = opaque;
	uint8_t config[VSOCK_CONFIG_SIZE];

	for (unsigned int i = 0; i < VSOCK_CONFIG_SIZE; i++)
		config[i] = (uint8_t)(dev->guest_cid >> (VSOCK_CONFIG_BITS_PER_BYTE * i));
	memcpy(data, config + offset, len);
}

static void vsock_kick(struct vsock_device *dev)
{
	uint64_t one = 1;

	if (write(dev->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_debug(log_module, "kick failed: %s", strerror(errno));
}

static void vsock_queue_notify(void *opaque, unsigned int queue_index)
{
	vsock_kick(opaque);
}

static int vsock_activate(void *opaque, struct virtqueue *queues, unsigned int queue_count,
			  uint64_t driver_features)
{
	struct vsock_device *dev = opaque;

	if (queue_count < VSOCK_QUEUE_COUNT)
		return -EINVAL;
	for (unsigned int i = 0; i < VSOCK_QUEUE_COUNT; i++)
		if (!queues[i].configured)
			return -EINVAL;
	dev->queues = queues;
	dev->active = true;
	vsock_kick(dev);
	return 0;
}

static void vsock_reset(void *opaque)
{
	struct vsock_device *dev = opaque;

	vsock_conn_close_all(dev);
	dev->queues = NULL;
	dev->active = false;
	dev->event_reset_pending = false;
	dev->reset_unacked = false;
}

static const struct virtio_device_ops vsock_ops = {
	.device_id = VIRTIO_ID_VSOCK,
	.features = (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
		    (1ull << VIRTIO_RING_F_EVENT_IDX),
	.queue_count = VSOCK_QUEUE_COUNT,
	.queue_num_max = VSOCK_QUEUE_NUM_MAX,
	.config_size = VSOCK_CONFIG_SIZE,
	.config_read = vsock_config_read,
	.queue_notify = vsock_queue_notify,
	.activate = vsock_activate,
	.reset = vsock_reset,
};

/* ---- queues ---- */

static bool vsock_queues_usable(struct vsock_device *dev)
{
	return dev->active && dev->queues && !virtio_mmio_is_broken(dev->transport);
}

static void vsock_queue_failed(struct vsock_device *dev)
{
	virtio_mmio_mark_broken(dev->transport);
}

/* One TX chain: header plus payload, gathered into dev->packet and handed on. */
static void vsock_handle_tx_chain(struct vsock_device *dev, const struct virtqueue_chain *chain)
{
	struct vsock_hdr hdr;

	if (chain->readable_len < VSOCK_HDR_SIZE) {
		log_debug(log_module, "dropping a TX chain shorter than a vsock header");
		return;
	}
	virtqueue_chain_read(chain, 0, dev->packet, VSOCK_HDR_SIZE);
	vsock_hdr_decode(dev->packet, &hdr);
	if (hdr.len > VSOCK_MAX_PAYLOAD || hdr.len > chain->readable_len - VSOCK_HDR_SIZE) {
		log_debug(log_module, "dropping a TX packet whose length %" PRIu32 " lies", hdr.len);
		hdr.op = VSOCK_OP_INVALID;
		hdr.len = 0;
		/* An invalid op resets the connection the packet claims to belong to, if any. */
		vsock_conn_handle_packet(dev, &hdr, dev->packet + VSOCK_HDR_SIZE);
		return;
	}
	if (hdr.op != VSOCK_OP_RW)
		hdr.len = 0;
	virtqueue_chain_read(chain, VSOCK_HDR_SIZE, dev->packet + VSOCK_HDR_SIZE, hdr.len);
	vsock_conn_handle_packet(dev, &hdr, dev->packet + VSOCK_HDR_SIZE);
}

/*
 * A batch ended on its bound rather than on an empty ring: with EVENT_IDX the driver will not
 * notify again, so the worker wakes itself for the rest.
 */
static void vsock_batch_bounded(struct vsock_device *dev, unsigned int handled)
{
	if (handled == VSOCK_CHAINS_PER_ITERATION)
		vsock_kick(dev);
}

static bool vsock_process_tx(struct vsock_device *dev)
{
	struct virtqueue *vq = &dev->queues[VSOCK_QUEUE_TX];
	unsigned int n;

	for (n = 0; n < VSOCK_CHAINS_PER_ITERATION; n++) {
		int rc = virtqueue_pop(vq, &dev->chain);

		if (rc < 0) {
			vsock_queue_failed(dev);
			return false;
		}
		if (rc == 0)
			break;
		vsock_handle_tx_chain(dev, &dev->chain);
		virtqueue_push(vq, dev->chain.head, 0);
	}
	vsock_batch_bounded(dev, n);
	return n && virtqueue_should_signal(vq);
}

static bool vsock_process_rx(struct vsock_device *dev)
{
	struct virtqueue *vq = &dev->queues[VSOCK_QUEUE_RX];
	unsigned int n;

	for (n = 0; n < VSOCK_CHAINS_PER_ITERATION; n++) {
		int rc;

		if (!vsock_conn_has_output(dev))
			break;
		rc = virtqueue_pop(vq, &dev->chain);
		if (rc < 0) {
			vsock_queue_failed(dev);
			return false;
		}
		if (rc == 0)
			break;
		virtqueue_push(vq, dev->chain.head, vsock_conn_emit_packet(dev, &dev->chain));
	}
	vsock_batch_bounded(dev, n);
	return n && virtqueue_should_signal(vq);
}

static bool vsock_process_event(struct vsock_device *dev)
{
	struct virtqueue *vq = &dev->queues[VSOCK_QUEUE_EVENT];
	uint8_t event[VSOCK_EVENT_SIZE] = { 0 };
	uint32_t written = 0;
	int rc;

	if (!dev->event_reset_pending)
		return false;
	rc = virtqueue_pop(vq, &dev->chain);
	if (rc < 0) {
		vsock_queue_failed(dev);
		return false;
	}
	if (rc == 0)
		return false;
	event[0] = VSOCK_EVENT_TRANSPORT_RESET;
	if (dev->chain.writable_len >= VSOCK_EVENT_SIZE)
		written = (uint32_t)virtqueue_chain_write(&dev->chain, 0, event, sizeof(event));
	virtqueue_push(vq, dev->chain.head, written);
	dev->event_reset_pending = false;
	dev->reset_unacked = true;
	dev->reset_avail_idx = virtqueue_notify_on_next(vq);
	return virtqueue_should_signal(vq);
}

bool vsock_reset_in_flight(struct vsock_device *dev)
{
	uint64_t waited_ms;

	if (!dev->event_reset_pending && !dev->reset_unacked)
		return false;
	waited_ms = clock_monotonic_ms() - dev->reset_started_ms;
	if (dev->reset_unacked && vsock_queues_usable(dev) &&
	    virtqueue_avail_idx(&dev->queues[VSOCK_QUEUE_EVENT]) != dev->reset_avail_idx) {
		dev->reset_unacked = false;
		log_debug(log_module, "the guest handled the transport reset after %" PRIu64 " ms",
			  waited_ms);
		return false;
	}
	return waited_ms < VSOCK_RESET_ACK_MAX_MS;
}

static void vsock_process_queues(struct vsock_device *dev)
{
	bool signal = false;

	if (!vsock_queues_usable(dev))
		return;
	signal |= vsock_process_tx(dev);
	if (vsock_queues_usable(dev))
		signal |= vsock_process_rx(dev);
	if (vsock_queues_usable(dev))
		signal |= vsock_process_event(dev);
	if (signal)
		virtio_mmio_signal_used(dev->transport);
}

/* ---- worker loop ---- */

static void vsock_handle_epoll_event(struct vsock_device *dev, const struct epoll_event *ev)
{
	uint64_t drained;

	if (ev->data.u64 == VSOCK_EPOLL_KEY_KICK) {
		if (read(dev->kick_fd, &drained, sizeof(drained)) < 0 && errno != EAGAIN)
			log_debug(log_module, "draining the kick eventfd: %s", strerror(errno));
		return;
	}
	if (ev->data.u64 == VSOCK_EPOLL_KEY_LISTEN) {
		vsock_conn_accept(dev);
		return;
	}
	if (ev->data.u64 - VSOCK_EPOLL_KEY_CONN_BASE < VSOCK_MAX_CONNECTIONS) {
		struct vsock_conn *conn = &dev->conns[ev->data.u64 - VSOCK_EPOLL_KEY_CONN_BASE];

		if (conn->state != VSOCK_CONN_FREE)
			vsock_conn_host_event(dev, conn, ev->events);
	}
}

static int vsock_loop_once(struct vsock_device *dev, int timeout_ms)
{
	struct epoll_event events[VSOCK_EPOLL_BATCH];
	int count;

	pthread_mutex_lock(&dev->lock);
	if (vsock_conn_any_deadline(dev) &&
	    (timeout_ms < 0 || timeout_ms > VSOCK_DEADLINE_TICK_MS))
		timeout_ms = VSOCK_DEADLINE_TICK_MS;
	pthread_mutex_unlock(&dev->lock);

	count = epoll_wait(dev->epoll_fd, events, VSOCK_EPOLL_BATCH, timeout_ms);
	if (count < 0 && errno != EINTR)
		return -errno;

	pthread_mutex_lock(&dev->lock);
	for (int i = 0; i < count; i++)
		vsock_handle_epoll_event(dev, &events[i]);
	vsock_process_queues(dev);
	vsock_conn_housekeeping(dev, clock_monotonic_ms());
	/* Housekeeping may have queued control packets (SHUTDOWN, credit requests). */
	vsock_process_queues(dev);
	pthread_mutex_unlock(&dev->lock);
	return 0;
}

static void *vsock_worker_main(void *arg)
{
	struct vsock_device *dev = arg;

	vmm_thread_enter(VMM_THREAD_DEVICE_WORKER, VSOCK_WORKER_THREAD_NAME, dev->confine_worker);
	while (!atomic_load(&dev->stopping)) {
		int rc = vsock_loop_once(dev, -1);

		if (rc < 0) {
			log_error(log_module, "worker stopped: epoll failed (%s); the guest loses "
				  "its host connections", strerror(-rc));
			break;
		}
	}
	return NULL;
}

int vsock_device_poll(struct vsock_device *dev, int timeout_ms)
{
	if (dev->mode != VSOCK_WORKER_CALLER)
		return -EINVAL;
	return vsock_loop_once(dev, timeout_ms);
}

/* ---- setup ---- */

static int vsock_epoll_add(int epoll_fd, int fd, uint64_t key)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = key };

	return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* True when something accepts connections on the socket at path (a VM that is alive). */
static bool vsock_socket_is_live(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	bool live;

	if (fd < 0)
		return false;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	live = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 || errno == EAGAIN;
	close(fd);
	return live;
}

/* Replaces a stale socket file (a VM that died) but never a live one or anything else. */
static int vsock_remove_stale_socket(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	if (vsock_socket_is_live(path))
		return -EADDRINUSE;
	return unlink(path) < 0 ? -errno : 0;
}

static int vsock_listen(struct vsock_device *dev, char *err, size_t errlen)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int rc;

	rc = vsock_remove_stale_socket(dev->uds_path);
	if (rc) {
		snprintf(err, errlen, "cannot use %s for the vsock socket (%s): remove it or pick "
			 "another path", dev->uds_path, strerror(-rc));
		return rc;
	}
	dev->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (dev->listen_fd < 0)
		goto fail;
	memcpy(addr.sun_path, dev->uds_path, sizeof(addr.sun_path));
	if (bind(dev->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		goto fail;
	dev->socket_bound = true;
	if (listen(dev->listen_fd, VSOCK_LISTEN_BACKLOG) < 0)
		goto fail;
	return 0;
fail:
	rc = -errno;
	snprintf(err, errlen, "cannot listen on %s (%s): check that its directory exists and "
		 "is writable", dev->uds_path, strerror(errno));
	return rc;
}

static int vsock_setup_fds(struct vsock_device *dev, char *err, size_t errlen)
{
	int rc = vsock_listen(dev, err, errlen);

	if (rc)
		return rc;
	dev->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	dev->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (dev->epoll_fd < 0 || dev->kick_fd < 0)
		goto fail;
	rc = vsock_epoll_add(dev->epoll_fd, dev->listen_fd, VSOCK_EPOLL_KEY_LISTEN);
	if (!rc)
		rc = vsock_epoll_add(dev->epoll_fd, dev->kick_fd, VSOCK_EPOLL_KEY_KICK);
	if (!rc)
		return 0;
	errno = -rc;
fail:
	rc = -errno;
	snprintf(err, errlen, "cannot set up the vsock event loop: %s", strerror(errno));
	return rc;
}

static int vsock_check_config(const struct vsock_device_config *cfg, char *err, size_t errlen)
{
	struct sockaddr_un addr;

	if (cfg->guest_cid < VSOCK_MIN_GUEST_CID || cfg->guest_cid > UINT32_MAX) {
		snprintf(err, errlen, "guest CID %" PRIu64 " is invalid: use a value from %u to %u",
			 cfg->guest_cid, VSOCK_MIN_GUEST_CID, UINT32_MAX - 1);
		return -EINVAL;
	}
	if (cfg->guest_cid == UINT32_MAX) {
		snprintf(err, errlen, "guest CID %u is reserved: pick a smaller one", UINT32_MAX);
		return -EINVAL;
	}
	if (!cfg->uds_path || !cfg->uds_path[0] || strlen(cfg->uds_path) >= sizeof(addr.sun_path)) {
		snprintf(err, errlen, "vsock socket path must be 1 to %zu bytes: use a shorter "
			 "directory", sizeof(addr.sun_path) - 1);
		return -EINVAL;
	}
	if (!cfg->mem) {
		snprintf(err, errlen, "vsock device needs guest memory");
		return -EINVAL;
	}
	return 0;
}

static void vsock_device_free(struct vsock_device *dev)
{
	vsock_conn_close_all(dev);
	if (dev->listen_fd >= 0)
		close(dev->listen_fd);
	if (dev->socket_bound)
		unlink(dev->uds_path);
	if (dev->epoll_fd >= 0)
		close(dev->epoll_fd);
	if (dev->kick_fd >= 0)
		close(dev->kick_fd);
	virtio_mmio_destroy(dev->transport);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

struct vsock_device *vsock_device_create(const struct vsock_device_config *cfg, char *err,
					 size_t errlen)
{
	struct virtio_mmio_config transport_cfg;
	struct vsock_device *dev;

	if (vsock_check_config(cfg, err, errlen))
		return NULL;
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		snprintf(err, errlen, "out of memory creating the vsock device");
		return NULL;
	}
	pthread_mutex_init(&dev->lock, NULL);
	dev->listen_fd = dev->epoll_fd = dev->kick_fd = -1;
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		dev->conns[i].fd = -1;
	dev->mem = cfg->mem;
	dev->guest_cid = cfg->guest_cid;
	dev->mode = cfg->worker_mode;
	dev->confine_worker = cfg->confine_worker;
	dev->next_local_port = VSOCK_FIRST_LOCAL_PORT;
	atomic_init(&dev->stopping, false);
	snprintf(dev->uds_path, sizeof(dev->uds_path), "%s", cfg->uds_path);

	transport_cfg = (struct virtio_mmio_config){
		.ops = &vsock_ops, .opaque = dev, .mem = cfg->mem, .irq = cfg->irq,
		.device_lock = &dev->lock,
	};
	dev->transport = virtio_mmio_create(&transport_cfg);
	if (!dev->transport) {
		snprintf(err, errlen, "out of memory creating the vsock transport");
		goto fail;
	}
	if (vsock_setup_fds(dev, err, errlen))
		goto fail;
	if (dev->mode == VSOCK_WORKER_THREAD) {
		int rc = pthread_create(&dev->worker, NULL, vsock_worker_main, dev);

		if (rc) {
			snprintf(err, errlen, "cannot start the vsock worker thread: %s", strerror(rc));
			goto fail;
		}
		dev->worker_started = true;
	}
	return dev;
fail:
	vsock_device_free(dev);
	return NULL;
}

void vsock_device_destroy(struct vsock_device *dev)
{
	if (!dev)
		return;
	if (dev->worker_started) {
		atomic_store(&dev->stopping, true);
		vsock_kick(dev);
		pthread_join(dev->worker, NULL);
	}
	vsock_device_free(dev);
}

struct virtio_mmio *vsock_device_transport(struct vsock_device *dev)
{
	return dev->transport;
}

uint64_t vsock_device_guest_cid(const struct vsock_device *dev)
{
	return dev->guest_cid;
}

const char *vsock_device_uds_path(const struct vsock_device *dev)
{
	return dev->uds_path;
}

int vsock_device_reset_transport(struct vsock_device *dev)
{
	uint32_t port_offset = 0;

	pthread_mutex_lock(&dev->lock);
	vsock_conn_close_all(dev);
	dev->event_reset_pending = true;
	dev->reset_unacked = false;
	dev->reset_started_ms = clock_monotonic_ms();
	if (getrandom(&port_offset, sizeof(port_offset), 0) == sizeof(port_offset))
		dev->next_local_port = VSOCK_FIRST_LOCAL_PORT + port_offset % VSOCK_RESET_PORT_SPAN;
	pthread_mutex_unlock(&dev->lock);
	vsock_kick(dev);
	return 0;
}

void vsock_device_guest_stopped(struct vsock_device *dev)
{
	pthread_mutex_lock(&dev->lock);
	vsock_conn_close_all(dev);
	pthread_mutex_unlock(&dev->lock);
}

int vsock_device_kick_fd(const struct vsock_device *dev)
{
	return dev->kick_fd;
}

unsigned int vsock_device_connection_count(struct vsock_device *dev)
{
	unsigned int count = 0;

	pthread_mutex_lock(&dev->lock);
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		if (dev->conns[i].state != VSOCK_CONN_FREE)
			count++;
	pthread_mutex_unlock(&dev->lock);
	return count;
}
