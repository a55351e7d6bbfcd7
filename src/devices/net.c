/*
 * virtio-net (VIRTIO 1.2 §5.1) over libslirp, with the egress policy enforced here, on the
 * host, for every frame the guest sends.
 *
 * One worker thread owns slirp (slirp is not thread-safe): it polls slirp's sockets, an
 * eventfd that vCPUs write when they notify a queue, and slirp's timers. Each pass it pops
 * every transmitted chain, judges the frame (net_policy.c), and hands what passes to
 * slirp_input; slirp's replies arrive through send_packet, which writes them into the guest's
 * receive buffers or, when there are none, keeps up to NET_RX_PENDING_MAX frames until the
 * guest posts more (TCP retransmits anything beyond that). A refused TCP connect is answered
 * at once with an injected reset, so the guest sees "connection refused" instead of a
 * timeout; a refused datagram is dropped. Both are counted and logged at debug level.
 * Interrupts are owed, not raised, while a pass runs: each queue is signalled once at its end
 * (and only if the driver asks, with EVENT_IDX), so a burst costs the guest one interrupt.
 *
 * DNS: slirp forwards 10.0.2.3:53 to the host's resolvers. When the config names a server
 * instead, the device rewrites queries to it (a loopback server is reached through the
 * gateway, as any host-loopback port is) and rewrites the answers' source back to
 * 10.0.2.3:53, so the guest cannot tell.
 *
 * Snapshots: save parks the worker, then writes the policy, the transport's registers and
 * slirp's own state (slirp_state_save, under slirp_state_version). A restore or fork child
 * builds a fresh slirp from the saved policy and loads that state into it; host sockets of
 * open TCP connections do not survive, so those connections are lost, and published ports
 * belong to the VM that asked for them (a restored VM or fork child publishes none).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loopback_claim.h"
#include "devices/net.h"
#include "devices/virtio_attach.h"
#include "devices/virtqueue.h"
#include "dynlib/slirp_dl.h"
#include "vmm/device.h"
#include "vmm/thread_filter.h"

#define NET_LOG "net"
/*
 * The worker runs under the network role's seccomp filter (vmm/thread_filter.h): libslirp
 * opens and connects the guest's IPv4/IPv6 sockets there, and nothing else.
 */
#define NET_WORKER_THREAD_NAME "net-worker"
/* What the network needs libslirp for, in the error a missing library gives. */
#define NET_SLIRP_PURPOSE "the guest's network (virtio-net over libslirp)"
/* Where libslirp reads the host's resolvers (NET_RESOLV_CONF): the worker may read there. */
#define NET_HOST_CONFIG_DIR "/etc"
#define NET_STATE_VERSION 1u
#define NET_QUEUE_RX 0u
#define NET_QUEUE_TX 1u
#define NET_QUEUE_COUNT 2u
#define NET_QUEUE_NUM_MAX 256
#define VIRTIO_NET_F_MAC 5
/* VIRTIO 1.x header: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset, num_buffers. */
#define NET_VIRTIO_HEADER_LEN 12u
#define NET_VIRTIO_NUM_BUFFERS_OFFSET 10u
#define NET_CONFIG_SIZE 8u /* mac[6], status */
#define NET_GUEST_MAC { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 }
/* libslirp's own address on the virtual network: 52:55 and then 10.0.2.2 */
#define NET_GATEWAY_MAC { 0x52, 0x55, 0x0a, 0x00, 0x02, 0x02 }
/* The two resets of a reclaimed connection are half the sequence space apart. */
#define NET_RECLAIM_SEQ_HALF 0x80000000u
/* A transmitted chain holds one header and one frame; anything longer is malformed. */
#define NET_TX_MAX_CHAIN (NET_VIRTIO_HEADER_LEN + NET_MAX_FRAME_LEN)
#define NET_RX_PENDING_MAX 256u
#define NET_MAX_POLLFDS 1024u
#define NET_MAX_TIMERS 8u
#define NET_POLL_MAX_MS 1000u
#define NET_NS_PER_MS 1000000LL
#define NET_MS_PER_S 1000LL
#define NET_RESOLV_CONF "/etc/resolv.conf"
#define NET_RESOLV_LINE_MAX 256
#define NET_MAX_PORT 65535ul
#define NET_SLIRP_STATE_MAX (64u << 20)

struct net_timer {
	bool used;
	bool armed;
	SlirpTimerId id;
	void *cb_opaque;
	int64_t expire_ms;
};

struct net_pending_frame {
	uint16_t len;
	uint8_t data[NET_MAX_FRAME_LEN];
};

enum net_worker_state {
	NET_WORKER_RUNNING,
	NET_WORKER_PARK_REQUESTED,
	NET_WORKER_PARKED,
	NET_WORKER_STOPPING,
};

struct net_device {
	pthread_mutex_t lock; /* the queues, the counters */
	struct virtio_mmio *transport;
	struct virtqueue *rx; /* the transport's, while the driver has the device running */
	struct virtqueue *tx;
	struct virtqueue_chain chain; /* worker-only scratch (large: not on its stack) */
	struct net_device_stats stats;
	/* used buffers not yet signalled: one interrupt per queue per worker pass */
	bool rx_signal_due;
	bool tx_signal_due;
	struct net_config cfg;
	uint8_t mac[NET_ETH_ADDR_LEN];
	uint32_t dns_gateway_addr; /* where rewritten DNS queries go in the virtual network */

	/* claims on the published host ports, so other VMs' guests cannot reach this guest */
	int publish_claims[NET_MAX_PUBLISH];
	/* asks whether a host loopback port is claimed (worker-only once the worker runs) */
	int claim_asker;

	/* worker-only */
	Slirp *slirp;
	struct net_policy_state policy_state;
	struct pollfd pollfds[NET_MAX_POLLFDS];
	unsigned int pollfd_count;
	struct net_timer timers[NET_MAX_TIMERS];
	struct net_pending_frame *pending; /* ring of NET_RX_PENDING_MAX */
	unsigned int pending_head;
	unsigned int pending_count;
	uint8_t tx_buffer[NET_TX_MAX_CHAIN];

	int kick_fd;
	pthread_t worker;
	bool worker_started;
	pthread_mutex_t park_lock;
	pthread_cond_t park_cond;
	enum net_worker_state worker_state;
};

static int64_t net_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NET_MS_PER_S + ts.tv_nsec / NET_NS_PER_MS;
}

static void net_kick(struct net_device *dev)
{
	uint64_t one = 1;

	if (write(dev->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn(NET_LOG, "cannot wake the network worker: %s", strerror(errno));
}

/* ---- receive: frames to the guest ---- */

/* Writes one frame into the next receive buffer; false when the guest has posted none. */
static bool net_deliver_locked(struct net_device *dev, const uint8_t *frame, size_t len)
{
	uint8_t header[NET_VIRTIO_HEADER_LEN] = { 0 };
	int rc;

	if (!dev->rx || dev->rx->broken)
		return false;
	rc = virtqueue_pop(dev->rx, &dev->chain);
	if (rc < 0)
		virtio_mmio_mark_broken(dev->transport);
	if (rc != 1)
		return false;
	if (dev->chain.writable_len < NET_VIRTIO_HEADER_LEN + len) {
		dev->stats.rx_dropped++;
		if (virtqueue_push(dev->rx, dev->chain.head, 0) < 0)
			virtio_mmio_mark_broken(dev->transport);
		dev->rx_signal_due = true;
		return true;
	}
	header[NET_VIRTIO_NUM_BUFFERS_OFFSET] = 1;
	virtqueue_chain_write(&dev->chain, 0, header, sizeof(header));
	virtqueue_chain_write(&dev->chain, sizeof(header), frame, len);
	if (virtqueue_push(dev->rx, dev->chain.head, (uint32_t)(sizeof(header) + len)) < 0) {
		virtio_mmio_mark_broken(dev->transport);
		return true;
	}
	dev->stats.rx_frames++;
	dev->rx_signal_due = true;
	return true;
}

/* Raises the interrupts a worker pass owes the guest, if the driver wants them. */
static void net_signal_queues(struct net_device *dev)
{
	bool signal = false;

	pthread_mutex_lock(&dev->lock);
	if (dev->rx_signal_due && dev->rx && !dev->rx->broken)
		signal = virtqueue_should_signal(dev->rx);
	if (dev->tx_signal_due && dev->tx && !dev->tx->broken)
		signal = virtqueue_should_signal(dev->tx) || signal;
	dev->rx_signal_due = false;
	dev->tx_signal_due = false;
	if (signal)
		virtio_mmio_signal_used(dev->transport);
	pthread_mutex_unlock(&dev->lock);
}

/* Delivers the frames kept while the guest had no buffers, oldest first. */
static void net_flush_pending(struct net_device *dev)
{
	pthread_mutex_lock(&dev->lock);
	while (dev->pending_count) {
		struct net_pending_frame *frame = &dev->pending[dev->pending_head];

		if (!net_deliver_locked(dev, frame->data, frame->len))
			break;
		dev->pending_head = (dev->pending_head + 1) % NET_RX_PENDING_MAX;
		dev->pending_count--;
	}
	pthread_mutex_unlock(&dev->lock);
}

/* A frame from slirp, or an injected reset: to the guest now, else kept, else dropped. */
static void net_receive(struct net_device *dev, const uint8_t *frame, size_t len)
{
	bool delivered = false;

	if (len > NET_MAX_FRAME_LEN) {
		pthread_mutex_lock(&dev->lock);
		dev->stats.rx_dropped++;
		pthread_mutex_unlock(&dev->lock);
		return;
	}
	pthread_mutex_lock(&dev->lock);
	if (!dev->pending_count && net_deliver_locked(dev, frame, len))
		delivered = true;
	if (!delivered && dev->pending_count < NET_RX_PENDING_MAX) {
		unsigned int tail = (dev->pending_head + dev->pending_count) % NET_RX_PENDING_MAX;

		dev->pending[tail].len = (uint16_t)len;
		memcpy(dev->pending[tail].data, frame, len);
		dev->pending_count++;
	} else if (!delivered) {
		dev->stats.rx_dropped++;
	}
	pthread_mutex_unlock(&dev->lock);
}

static ssize_t net_slirp_send_packet(const void *buf, size_t len, void *opaque)
{
	struct net_device *dev = opaque;
	uint8_t frame[NET_MAX_FRAME_LEN];
	struct net_frame_info info;

	if (len > sizeof(frame))
		return (ssize_t)len; /* slirp sends nothing larger than its MTU; never truncate */
	memcpy(frame, buf, len);
	net_frame_parse(frame, len, &info);
	net_policy_observe_rx(&dev->policy_state, &info, (uint64_t)net_now_ms());
	if (dev->cfg.dns_server_port) {
		if (info.kind == NET_FRAME_UDP && info.src_addr == dev->dns_gateway_addr &&
		    info.src_port == dev->cfg.dns_server_port && info.dst_addr == NET_GUEST_ADDR)
			net_frame_set_udp_src(frame, &info, NET_DNS_ADDR, NET_DNS_PORT);
	}
	net_receive(dev, frame, len);
	return (ssize_t)len;
}

/* ---- transmit: frames from the guest ---- */

static void net_log_refusal(const struct net_frame_info *info, enum net_verdict verdict,
			    uint32_t judged_addr)
{
	char dst[INET_ADDRSTRLEN], judged[INET_ADDRSTRLEN];

	net_addr_format(info->dst_addr, dst, sizeof(dst));
	net_addr_format(judged_addr, judged, sizeof(judged));
	log_debug(NET_LOG, "refused %s to %s:%u (judged as %s): %s",
		  info->kind == NET_FRAME_TCP ? "TCP" : info->kind == NET_FRAME_UDP ? "UDP" : "ICMP",
		  dst, info->dst_port, judged, net_verdict_name(verdict));
}

/*
 * Resets in libslirp the connections the policy stopped counting (an idle one reclaimed for a
 * new flow, one a reset ended that libslirp may have dropped), which closes their host
 * sockets: two resets each, as if the guest sent them (net_build_reclaim_rst says why two).
 * An idle one is reset in the guest too, as if its remote end sent it, so a program waiting
 * to read from it learns now that it is gone, not at its next write.
 * Called outside libslirp's callbacks: after a frame is judged (before its verdict is counted,
 * so the counters never show a verdict whose resets are still owed), after the frame went to
 * libslirp (whose answers may hand over more) and after each of libslirp's own turns.
 */
static void net_reset_reclaimed(struct net_device *dev)
{
	static const uint8_t gateway_mac[NET_ETH_ADDR_LEN] = NET_GATEWAY_MAC;
	struct net_policy_state *state = &dev->policy_state;
	/* a copy: libslirp's answers to these pass the policy again and may queue more */
	struct net_reclaimed_flow due[NET_RECLAIMED_MAX];
	unsigned int count = state->reclaimed_count < NET_RECLAIMED_MAX ? state->reclaimed_count
									 : NET_RECLAIMED_MAX;
	uint8_t rst[NET_RST_FRAME_LEN];

	if (!count)
		return;
	memcpy(due, state->reclaimed, count * sizeof(due[0]));
	state->reclaimed_count = 0;
	for (unsigned int i = 0; i < count; i++) {
		const struct net_reclaimed_flow *flow = &due[i];
		const uint32_t seqs[] = { flow->guest_seq, flow->guest_seq + NET_RECLAIM_SEQ_HALF };

		for (size_t s = 0; s < sizeof(seqs) / sizeof(seqs[0]); s++)
			if (net_build_reclaim_rst(flow, seqs[s], dev->mac, gateway_mac, rst,
						  sizeof(rst)) == sizeof(rst))
				slirp_dl.input(dev->slirp, rst, (int)sizeof(rst));
		bool told = flow->tell_guest &&
			    net_build_guest_rst(flow, gateway_mac, dev->mac, rst, sizeof(rst)) ==
				    sizeof(rst);

		if (told)
			net_receive(dev, rst, sizeof(rst));
		pthread_mutex_lock(&dev->lock);
		dev->stats.flows_reclaimed++;
		dev->stats.resets_injected += told;
		pthread_mutex_unlock(&dev->lock);
	}
}

/* Judges one frame the guest sent and passes it on, answers it with a reset, or drops it. */
static void net_transmit_frame(struct net_device *dev, uint8_t *frame, size_t len)
{
	struct net_frame_info info;
	uint32_t judged_addr = 0;
	enum net_verdict verdict;
	uint8_t rst[NET_RST_FRAME_LEN];

	net_frame_parse(frame, len, &info);
	verdict = net_policy_judge(&dev->cfg.policy, &dev->policy_state, &info,
				   (uint64_t)net_now_ms(), &judged_addr);
	net_reset_reclaimed(dev);
	pthread_mutex_lock(&dev->lock);
	dev->stats.verdicts[verdict]++;
	pthread_mutex_unlock(&dev->lock);
	if (verdict != NET_VERDICT_PASS) {
		if (verdict != NET_VERDICT_DROP_MALFORMED && verdict != NET_VERDICT_DROP_UNSUPPORTED)
			net_log_refusal(&info, verdict, judged_addr);
		/* a refused connect hears a reset; a spoofed source is not answered */
		if (info.kind == NET_FRAME_TCP && verdict != NET_VERDICT_DROP_SPOOFED &&
		    net_build_tcp_rst(frame, &info, rst, sizeof(rst)) == sizeof(rst)) {
			net_receive(dev, rst, sizeof(rst));
			pthread_mutex_lock(&dev->lock);
			dev->stats.resets_injected++;
			pthread_mutex_unlock(&dev->lock);
		}
		return;
	}
	if (dev->cfg.dns_server_port && info.kind == NET_FRAME_UDP &&
	    info.dst_addr == NET_DNS_ADDR && info.dst_port == NET_DNS_PORT)
		net_frame_set_udp_dst(frame, &info, dev->dns_gateway_addr, dev->cfg.dns_server_port);
	slirp_dl.input(dev->slirp, frame, (int)len);
	net_reset_reclaimed(dev);
	pthread_mutex_lock(&dev->lock);
	dev->stats.tx_frames++;
	pthread_mutex_unlock(&dev->lock);
}

/* Pops one transmitted chain into tx_buffer; returns its frame length, 0 none, -1 skip. */
static long net_pop_tx(struct net_device *dev)
{
	long frame_len = -1;
	int rc;

	pthread_mutex_lock(&dev->lock);
	if (!dev->tx || dev->tx->broken) {
		pthread_mutex_unlock(&dev->lock);
		return 0;
	}
	rc = virtqueue_pop(dev->tx, &dev->chain);
	if (rc == 1) {
		uint64_t total = dev->chain.readable_len;

		if (total > NET_VIRTIO_HEADER_LEN && total <= NET_TX_MAX_CHAIN) {
			virtqueue_chain_read(&dev->chain, 0, dev->tx_buffer, (size_t)total);
			frame_len = (long)(total - NET_VIRTIO_HEADER_LEN);
		} else {
			dev->stats.verdicts[NET_VERDICT_DROP_MALFORMED]++;
		}
		if (virtqueue_push(dev->tx, dev->chain.head, 0) < 0)
			rc = -EIO;
		else
			dev->tx_signal_due = true;
	}
	if (rc < 0)
		virtio_mmio_mark_broken(dev->transport);
	pthread_mutex_unlock(&dev->lock);
	return rc == 1 ? frame_len : 0;
}

static void net_serve_tx(struct net_device *dev)
{
	long frame_len;

	while ((frame_len = net_pop_tx(dev)) != 0) {
		if (frame_len > 0)
			net_transmit_frame(dev, dev->tx_buffer + NET_VIRTIO_HEADER_LEN,
					   (size_t)frame_len);
	}
}

/* ---- slirp's callbacks: clock, timers, poll ---- */

static void net_slirp_guest_error(const char *msg, void *opaque)
{
	(void)opaque;
	log_debug(NET_LOG, "slirp: guest error: %s", msg);
}

static int64_t net_slirp_clock_ns(void *opaque)
{
	(void)opaque;
	return net_now_ms() * NET_NS_PER_MS;
}

static void *net_slirp_timer_new_opaque(SlirpTimerId id, void *cb_opaque, void *opaque)
{
	struct net_device *dev = opaque;

	for (unsigned int i = 0; i < NET_MAX_TIMERS; i++) {
		if (!dev->timers[i].used) {
			dev->timers[i] = (struct net_timer){ .used = true, .id = id,
							     .cb_opaque = cb_opaque };
			return &dev->timers[i];
		}
	}
	log_warn(NET_LOG, "slirp asked for more than %u timers; IPv6 router adverts will not run",
		 NET_MAX_TIMERS);
	return NULL;
}

static void net_slirp_timer_free(void *timer, void *opaque)
{
	(void)opaque;
	if (timer)
		((struct net_timer *)timer)->used = false;
}

static void net_slirp_timer_mod(void *timer, int64_t expire_ms, void *opaque)
{
	(void)opaque;
	if (timer) {
		((struct net_timer *)timer)->expire_ms = expire_ms;
		((struct net_timer *)timer)->armed = true;
	}
}

static void net_slirp_register_poll_fd(int fd, void *opaque)
{
	(void)fd;
	(void)opaque;
}

static void net_slirp_notify(void *opaque)
{
	net_kick(opaque);
}

static int net_slirp_add_poll(int fd, int events, void *opaque)
{
	struct net_device *dev = opaque;
	short poll_events = 0;

	if (dev->pollfd_count >= NET_MAX_POLLFDS)
		return -1;
	if (events & SLIRP_POLL_IN)
		poll_events |= POLLIN;
	if (events & SLIRP_POLL_OUT)
		poll_events |= POLLOUT;
	if (events & SLIRP_POLL_PRI)
		poll_events |= POLLPRI;
	dev->pollfds[dev->pollfd_count] = (struct pollfd){ .fd = fd, .events = poll_events };
	return (int)dev->pollfd_count++;
}

static int net_slirp_get_revents(int idx, void *opaque)
{
	struct net_device *dev = opaque;
	short revents;
	int events = 0;

	if (idx < 0 || (unsigned int)idx >= dev->pollfd_count)
		return 0;
	revents = dev->pollfds[idx].revents;
	if (revents & POLLIN)
		events |= SLIRP_POLL_IN;
	if (revents & POLLOUT)
		events |= SLIRP_POLL_OUT;
	if (revents & POLLPRI)
		events |= SLIRP_POLL_PRI;
	if (revents & POLLERR)
		events |= SLIRP_POLL_ERR;
	if (revents & POLLHUP)
		events |= SLIRP_POLL_HUP;
	return events;
}

static const SlirpCb net_slirp_callbacks = {
	.send_packet = net_slirp_send_packet,
	.guest_error = net_slirp_guest_error,
	.clock_get_ns = net_slirp_clock_ns,
	.timer_free = net_slirp_timer_free,
	.timer_mod = net_slirp_timer_mod,
	.register_poll_fd = net_slirp_register_poll_fd,
	.unregister_poll_fd = net_slirp_register_poll_fd,
	.notify = net_slirp_notify,
	.timer_new_opaque = net_slirp_timer_new_opaque,
};

/* ---- the worker ---- */

static void net_fire_timers(struct net_device *dev)
{
	int64_t now = net_now_ms();

	for (unsigned int i = 0; i < NET_MAX_TIMERS; i++) {
		struct net_timer *timer = &dev->timers[i];

		if (timer->used && timer->armed && timer->expire_ms <= now) {
			timer->armed = false;
			slirp_dl.handle_timer(dev->slirp, timer->id, timer->cb_opaque);
		}
	}
}

static uint32_t net_timer_timeout(struct net_device *dev, uint32_t timeout)
{
	int64_t now = net_now_ms();

	for (unsigned int i = 0; i < NET_MAX_TIMERS; i++) {
		const struct net_timer *timer = &dev->timers[i];

		if (timer->used && timer->armed) {
			int64_t left = timer->expire_ms > now ? timer->expire_ms - now : 0;

			if (left < (int64_t)timeout)
				timeout = (uint32_t)left;
		}
	}
	return timeout;
}

/* Parks while a snapshot asks; returns false once the device is stopping. */
static bool net_worker_checkpoint(struct net_device *dev)
{
	bool running;

	pthread_mutex_lock(&dev->park_lock);
	if (dev->worker_state == NET_WORKER_PARK_REQUESTED) {
		dev->worker_state = NET_WORKER_PARKED;
		pthread_cond_broadcast(&dev->park_cond);
		while (dev->worker_state == NET_WORKER_PARKED)
			pthread_cond_wait(&dev->park_cond, &dev->park_lock);
	}
	running = dev->worker_state != NET_WORKER_STOPPING;
	pthread_mutex_unlock(&dev->park_lock);
	return running;
}

/*
 * The worker reads files only where libslirp looks for the host's resolvers: /etc, and the
 * directory /etc/resolv.conf resolves into (systemd-resolved keeps it under /run). Its
 * seccomp filter lets it open files read-only but cannot judge paths; Landlock keeps a
 * subverted worker from reading the user's files and sending them out. Without Landlock the
 * filter alone remains, worth a debug line.
 */
static void net_worker_restrict_files(void)
{
	char resolv_dir[PATH_MAX];
	const char *dirs[] = { NET_HOST_CONFIG_DIR, resolv_dir };
	size_t count = 1;
	int rc;

	if (realpath(NET_RESOLV_CONF, resolv_dir)) {
		dirname(resolv_dir);
		count = 2;
	}
	rc = vmm_thread_restrict_to_dirs(dirs, count, true);
	if (rc == -EOPNOTSUPP)
		log_debug(NET_LOG, "no Landlock in this kernel; the network worker is confined by "
			  "its seccomp filter only");
	else if (rc < 0)
		log_error(NET_LOG, "cannot limit the network worker's files to %s: %s",
			  NET_HOST_CONFIG_DIR, strerror(-rc));
}

static void *net_worker_main(void *opaque)
{
	struct net_device *dev = opaque;

	if (dev->cfg.confine_worker)
		net_worker_restrict_files();
	vmm_thread_enter(VMM_THREAD_NET_WORKER, NET_WORKER_THREAD_NAME, dev->cfg.confine_worker);

	while (net_worker_checkpoint(dev)) {
		uint32_t timeout = NET_POLL_MAX_MS;
		uint64_t kicks;
		int rc;

		dev->pollfd_count = 0;
		net_slirp_add_poll(dev->kick_fd, SLIRP_POLL_IN, dev);
		slirp_dl.pollfds_fill(dev->slirp, &timeout, net_slirp_add_poll, dev);
		timeout = net_timer_timeout(dev, timeout);
		rc = poll(dev->pollfds, dev->pollfd_count, (int)timeout);
		if (rc > 0 && (dev->pollfds[0].revents & POLLIN) &&
		    read(dev->kick_fd, &kicks, sizeof(kicks)) < 0 && errno != EAGAIN)
			log_warn(NET_LOG, "cannot read the network kick: %s", strerror(errno));
		slirp_dl.pollfds_poll(dev->slirp, rc < 0, net_slirp_get_revents, dev);
		net_fire_timers(dev);
		net_reset_reclaimed(dev);
		net_serve_tx(dev);
		net_flush_pending(dev);
		net_signal_queues(dev);
	}
	return NULL;
}

/* Stops the worker at its next checkpoint and waits until it has; the caller owns slirp. */
static void net_worker_park(struct net_device *dev)
{
	if (!dev->worker_started)
		return;
	pthread_mutex_lock(&dev->park_lock);
	if (dev->worker_state == NET_WORKER_RUNNING)
		dev->worker_state = NET_WORKER_PARK_REQUESTED;
	net_kick(dev);
	while (dev->worker_state == NET_WORKER_PARK_REQUESTED)
		pthread_cond_wait(&dev->park_cond, &dev->park_lock);
	pthread_mutex_unlock(&dev->park_lock);
}

static void net_worker_unpark(struct net_device *dev)
{
	pthread_mutex_lock(&dev->park_lock);
	if (dev->worker_state == NET_WORKER_PARKED)
		dev->worker_state = NET_WORKER_RUNNING;
	pthread_cond_broadcast(&dev->park_cond);
	pthread_mutex_unlock(&dev->park_lock);
	net_kick(dev);
}

/* ---- virtio ---- */

static void net_config_read(void *opaque, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct net_device *dev = opaque;
	uint8_t config[NET_CONFIG_SIZE] = { 0 };

	memcpy(config, dev->mac, sizeof(dev->mac));
	if (offset < sizeof(config))
		memcpy(data, config + offset, len <= sizeof(config) - offset ? len
									      : sizeof(config) - offset);
}

static void net_queue_notify(void *opaque, unsigned int queue_index)
{
	(void)queue_index;
	net_kick(opaque);
}

static int net_activate(void *opaque, struct virtqueue *queues, unsigned int queue_count,
			uint64_t driver_features)
{
	struct net_device *dev = opaque;

	(void)driver_features;
	if (queue_count != NET_QUEUE_COUNT || !queues[NET_QUEUE_RX].configured ||
	    !queues[NET_QUEUE_TX].configured)
		return -EINVAL;
	dev->rx = &queues[NET_QUEUE_RX];
	dev->tx = &queues[NET_QUEUE_TX];
	net_kick(dev);
	return 0;
}

static void net_reset(void *opaque)
{
	struct net_device *dev = opaque;

	dev->rx = NULL;
	dev->tx = NULL;
	dev->pending_count = 0;
}

static const struct virtio_device_ops net_virtio_ops = {
	.device_id = VIRTIO_ID_NET,
	.features = (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_NET_F_MAC) |
		    (1ull << VIRTIO_RING_F_INDIRECT_DESC) | (1ull << VIRTIO_RING_F_EVENT_IDX),
	.queue_count = NET_QUEUE_COUNT,
	.queue_num_max = NET_QUEUE_NUM_MAX,
	.config_size = NET_CONFIG_SIZE,
	.config_read = net_config_read,
	.queue_notify = net_queue_notify,
	.activate = net_activate,
	.reset = net_reset,
};

/* ---- configuration ---- */

int net_publish_parse(const char *text, struct net_publish *out)
{
	char *end = NULL;
	unsigned long host, guest;

	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	host = strtoul(text, &end, 10);
	if (*end != ':' || end[1] < '0' || end[1] > '9')
		return -EINVAL;
	guest = strtoul(end + 1, &end, 10);
	if (*end != '\0' || host == 0 || guest == 0 || host > NET_MAX_PORT || guest > NET_MAX_PORT)
		return -EINVAL;
	out->host_port = (uint16_t)host;
	out->guest_port = (uint16_t)guest;
	return 0;
}

int net_dns_server_parse(const char *text, uint32_t *addr, uint16_t *port)
{
	const char *colon = strrchr(text, ':');
	char addr_text[INET_ADDRSTRLEN];
	struct net_cidr cidr;
	char *end = NULL;
	unsigned long value;

	if (!colon || (size_t)(colon - text) >= sizeof(addr_text) || colon[1] < '0' ||
	    colon[1] > '9')
		return -EINVAL;
	memcpy(addr_text, text, (size_t)(colon - text));
	addr_text[colon - text] = '\0';
	value = strtoul(colon + 1, &end, 10);
	if (*end != '\0' || value == 0 || value > NET_MAX_PORT ||
	    strchr(addr_text, '/') || net_cidr_parse(addr_text, &cidr) < 0)
		return -EINVAL;
	*addr = cidr.addr;
	*port = (uint16_t)value;
	return 0;
}

/* The first IPv4 nameserver of the host's resolv.conf, which slirp forwards to; 0: none. */
static uint32_t net_host_resolver(void)
{
	char line[NET_RESOLV_LINE_MAX];
	FILE *file = fopen(NET_RESOLV_CONF, "re");
	uint32_t addr = 0;

	if (!file)
		return 0;
	while (!addr && fgets(line, sizeof(line), file)) {
		char name[NET_RESOLV_LINE_MAX];
		struct net_cidr cidr;

		if (sscanf(line, "nameserver %255s", name) == 1 && !strchr(name, '/') &&
		    net_cidr_parse(name, &cidr) == 0)
			addr = cidr.addr;
	}
	fclose(file);
	return addr;
}

static struct in_addr net_in_addr(uint32_t addr)
{
	return (struct in_addr){ .s_addr = htonl(addr) };
}

/*
 * A published port is the guest's service on the host's loopback: this VM's guest reaches it
 * through the gateway, other VMs' guests do not (src/common/loopback_claim.h). Claimed before
 * slirp listens on it, so no connection is ever accepted there unclaimed.
 */
static void net_claim_published_port(struct net_device *dev, unsigned int index)
{
	uint16_t port = dev->cfg.publish[index].host_port;
	int fd = loopback_claim_port(port);

	if (fd < 0)
		log_warn(NET_LOG, "cannot claim published port 127.0.0.1:%u (%s): other sandboxes' guests may reach it",
			 port, strerror(-fd));
	dev->publish_claims[index] = fd;
}

/* Claimed by another service: this device's own claims (its published ports) do not count. */
static bool net_port_claimed(void *opaque, uint16_t port)
{
	const struct net_device *dev = opaque;

	for (unsigned int i = 0; i < dev->cfg.publish_count && i < NET_MAX_PUBLISH; i++)
		if (dev->publish_claims[i] >= 0 && dev->cfg.publish[i].host_port == port)
			return false;
	return loopback_claim_held(dev->claim_asker, port);
}

static int net_slirp_create(struct net_device *dev, char *err, size_t errlen)
{
	SlirpConfig config = {
		.version = SLIRP_CONFIG_VERSION_MAX,
		.in_enabled = true,
		.vnetwork = net_in_addr(NET_VIRTUAL_NETWORK),
		.vnetmask = net_in_addr(~0u << (32 - NET_VIRTUAL_PREFIX)),
		.vhost = net_in_addr(NET_GATEWAY_ADDR),
		.vdhcp_start = net_in_addr(NET_GUEST_ADDR),
		.vnameserver = net_in_addr(NET_DNS_ADDR),
		.disable_host_loopback = false, /* 10.0.2.2:PORT is the host's 127.0.0.1:PORT */
		.disable_dns = !dev->cfg.policy.dns,
		.disable_dhcp = true, /* the agent configures eth0 statically */
	};
	int rc = slirp_dl_load(NET_SLIRP_PURPOSE, err, errlen);

	if (rc < 0)
		return rc;
	dev->slirp = slirp_dl.new_stack(&config, &net_slirp_callbacks, dev);
	if (!dev->slirp) {
		snprintf(err, errlen, "libslirp could not create the network stack");
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < dev->cfg.publish_count && i < NET_MAX_PUBLISH; i++) {
		const struct net_publish *publish = &dev->cfg.publish[i];

		net_claim_published_port(dev, i);
		if (slirp_dl.add_hostfwd(dev->slirp, 0, net_in_addr(NET_HOST_LOOPBACK_ADDR),
					 publish->host_port, net_in_addr(NET_GUEST_ADDR),
					 publish->guest_port) < 0) {
			snprintf(err, errlen, "cannot publish 127.0.0.1:%u to the guest's port %u "
				 "(is the host port in use?): pick another host port",
				 publish->host_port, publish->guest_port);
			return -EADDRINUSE;
		}
	}
	return 0;
}

struct net_device *net_device_create(const struct net_config *cfg, const struct guest_memory *mem,
				     struct irq_line irq, char *err, size_t errlen)
{
	static const uint8_t mac[NET_ETH_ADDR_LEN] = NET_GUEST_MAC;
	struct net_device *dev = calloc(1, sizeof(*dev));
	int rc;

	if (!dev) {
		snprintf(err, errlen, "out of memory creating the network device");
		return NULL;
	}
	pthread_mutex_init(&dev->lock, NULL);
	pthread_mutex_init(&dev->park_lock, NULL);
	pthread_cond_init(&dev->park_cond, NULL);
	dev->kick_fd = -1;
	dev->claim_asker = -1;
	for (unsigned int i = 0; i < NET_MAX_PUBLISH; i++)
		dev->publish_claims[i] = -1;
	dev->cfg = *cfg;
	memcpy(dev->mac, mac, sizeof(mac));
	if (dev->cfg.dns_server_port) {
		dev->cfg.policy.resolver_addr = dev->cfg.dns_server_addr;
		dev->dns_gateway_addr = dev->cfg.dns_server_addr == NET_HOST_LOOPBACK_ADDR
						? NET_GATEWAY_ADDR
						: dev->cfg.dns_server_addr;
	} else if (!dev->cfg.policy.resolver_addr) {
		dev->cfg.policy.resolver_addr = net_host_resolver();
	}
	dev->pending = calloc(NET_RX_PENDING_MAX, sizeof(*dev->pending));
	dev->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	dev->claim_asker = loopback_claim_asker_open();
	dev->policy_state.port_claimed = net_port_claimed;
	dev->policy_state.port_claimed_opaque = dev;
	if (!dev->pending || dev->kick_fd < 0 || dev->claim_asker < 0) {
		snprintf(err, errlen, "cannot set up the network device: %s", strerror(errno));
		goto fail;
	}
	struct virtio_mmio_config transport_cfg = {
		.ops = &net_virtio_ops, .opaque = dev, .mem = mem, .irq = irq,
		.device_lock = &dev->lock,
	};

	dev->transport = virtio_mmio_create(&transport_cfg);
	if (!dev->transport) {
		snprintf(err, errlen, "out of memory creating the network device");
		goto fail;
	}
	if (net_slirp_create(dev, err, errlen) < 0)
		goto fail;
	rc = pthread_create(&dev->worker, NULL, net_worker_main, dev);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start the network worker: %s", strerror(rc));
		goto fail;
	}
	dev->worker_started = true;
	return dev;
fail:
	net_device_destroy(dev);
	return NULL;
}

struct virtio_mmio *net_device_transport(struct net_device *dev)
{
	return dev->transport;
}

void net_device_stats(struct net_device *dev, struct net_device_stats *out)
{
	pthread_mutex_lock(&dev->lock);
	*out = dev->stats;
	pthread_mutex_unlock(&dev->lock);
}

void net_device_destroy(struct net_device *dev)
{
	if (!dev)
		return;
	if (dev->worker_started) {
		pthread_mutex_lock(&dev->park_lock);
		dev->worker_state = NET_WORKER_STOPPING;
		pthread_cond_broadcast(&dev->park_cond);
		pthread_mutex_unlock(&dev->park_lock);
		net_kick(dev);
		pthread_join(dev->worker, NULL);
	}
	if (dev->slirp)
		slirp_dl.cleanup(dev->slirp);
	virtio_mmio_destroy(dev->transport);
	if (dev->kick_fd >= 0)
		close(dev->kick_fd);
	if (dev->claim_asker >= 0)
		close(dev->claim_asker);
	for (unsigned int i = 0; i < NET_MAX_PUBLISH; i++)
		if (dev->publish_claims[i] >= 0)
			close(dev->publish_claims[i]);
	free(dev->pending);
	pthread_cond_destroy(&dev->park_cond);
	pthread_mutex_destroy(&dev->park_lock);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

/* ---- as a VM device ---- */

static void net_config_write_section(struct byte_writer *out, const struct net_config *cfg)
{
	const struct net_policy *policy = &cfg->policy;

	byte_writer_u32(out, policy->deny_count);
	for (unsigned int i = 0; i < policy->deny_count; i++) {
		byte_writer_u32(out, policy->deny[i].addr);
		byte_writer_u8(out, policy->deny[i].prefix);
	}
	byte_writer_u32(out, policy->allow_count);
	for (unsigned int i = 0; i < policy->allow_count; i++) {
		byte_writer_u32(out, policy->allow[i].addr);
		byte_writer_u8(out, policy->allow[i].prefix);
	}
	byte_writer_u32(out, policy->max_flows);
	byte_writer_u32(out, policy->max_new_per_sec);
	byte_writer_u8(out, policy->dns ? 1 : 0);
	byte_writer_u32(out, cfg->dns_server_addr);
	byte_writer_u16(out, cfg->dns_server_port);
}

static void net_cidr_list_read(struct byte_reader *in, struct net_cidr *list, unsigned int *count)
{
	uint32_t n = byte_reader_u32(in);

	if (n > NET_MAX_CIDRS) {
		byte_reader_fail(in);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct net_cidr cidr = { .addr = byte_reader_u32(in), .prefix = byte_reader_u8(in) };

		if (cidr.prefix > 32) {
			byte_reader_fail(in);
			return;
		}
		list[i] = cidr;
	}
	*count = n;
}

/* The policy a snapshot's section carries: the restored VM keeps the one it had. */
static void net_config_read_section(struct byte_reader *in, struct net_config *cfg)
{
	struct net_policy *policy = &cfg->policy;
	uint8_t dns;

	memset(cfg, 0, sizeof(*cfg));
	net_cidr_list_read(in, policy->deny, &policy->deny_count);
	net_cidr_list_read(in, policy->allow, &policy->allow_count);
	policy->max_flows = byte_reader_u32(in);
	policy->max_new_per_sec = byte_reader_u32(in);
	dns = byte_reader_u8(in);
	if (dns > 1)
		byte_reader_fail(in);
	policy->dns = dns == 1;
	cfg->dns_server_addr = byte_reader_u32(in);
	cfg->dns_server_port = byte_reader_u16(in);
}

static ssize_t net_slirp_state_write(const void *buf, size_t len, void *opaque)
{
	byte_writer_bytes(opaque, buf, len);
	return (ssize_t)len;
}

static int net_vm_save(void *opaque, struct byte_writer *out)
{
	struct net_device *dev = opaque;
	struct virtio_mmio_state state;
	struct byte_writer slirp_state;
	int rc = 0;

	net_worker_park(dev); /* until resume: slirp and the queues stay as saved */
	virtio_mmio_state_get(dev->transport, &state);
	net_config_write_section(out, &dev->cfg);
	virtio_mmio_state_write(out, &state);
	byte_writer_init(&slirp_state);
	slirp_dl.state_save(dev->slirp, net_slirp_state_write, &slirp_state);
	if (byte_writer_failed(&slirp_state) || slirp_state.len > NET_SLIRP_STATE_MAX) {
		rc = -ENOMEM;
	} else {
		byte_writer_u32(out, (uint32_t)slirp_dl.state_version());
		byte_writer_u32(out, (uint32_t)slirp_state.len);
		byte_writer_bytes(out, slirp_state.data, slirp_state.len);
	}
	byte_writer_free(&slirp_state);
	return rc;
}

static void net_vm_resume(void *opaque)
{
	net_worker_unpark(opaque);
}

static ssize_t net_slirp_state_read(void *buf, size_t len, void *opaque)
{
	struct byte_reader *in = opaque;

	if (byte_reader_remaining(in) < len)
		return -1;
	byte_reader_bytes(in, buf, len);
	return (ssize_t)len;
}

static int net_vm_restore(void *opaque, struct byte_reader *in, uint32_t version, char *err,
			  size_t errlen)
{
	struct net_device *dev = opaque;
	struct virtio_mmio_state state;
	struct net_config saved_cfg;
	struct byte_reader slirp_in;
	uint32_t slirp_version, slirp_len;
	const uint8_t *slirp_bytes;
	int rc;

	(void)version;
	net_config_read_section(in, &saved_cfg);
	virtio_mmio_state_read(in, &state);
	slirp_version = byte_reader_u32(in);
	slirp_len = byte_reader_u32(in);
	slirp_bytes = byte_reader_view(in, slirp_len);
	if (byte_reader_finish(in) < 0 || !slirp_bytes ||
	    slirp_version > (uint32_t)slirp_dl.state_version()) {
		snprintf(err, errlen, "the network device's saved state is malformed or from a "
			 "newer libslirp: take the snapshot again");
		return -EBADMSG;
	}
	net_worker_park(dev);
	byte_reader_init(&slirp_in, slirp_bytes, slirp_len);
	rc = slirp_dl.state_load(dev->slirp, (int)slirp_version, net_slirp_state_read, &slirp_in);
	if (rc < 0) {
		snprintf(err, errlen, "libslirp refused the network state of the snapshot (%d): "
			 "take the snapshot again", rc);
		rc = -EBADMSG;
	}
	if (rc == 0) {
		rc = virtio_mmio_state_set(dev->transport, &state);
		if (rc < 0)
			snprintf(err, errlen, "the network device refused its saved state: %s",
				 strerror(-rc));
	}
	net_worker_unpark(dev);
	return rc;
}

static void net_vm_destroy(void *opaque)
{
	net_device_destroy(opaque);
}

extern const struct vm_device_type net_device_type;

static const struct vm_device_ops net_vm_ops = {
	.state_version = NET_STATE_VERSION,
	.save = net_vm_save,
	.resume = net_vm_resume,
	.restore = net_vm_restore,
	.destroy = net_vm_destroy,
};

static int net_attach_create(void *ctx, const struct guest_memory *mem, struct irq_line irq,
			     struct virtio_attached *out, char *err, size_t errlen)
{
	struct net_device *dev = net_device_create(ctx, mem, irq, err, errlen);

	if (!dev)
		return -EIO;
	*out = (struct virtio_attached){ .dev = dev, .transport = dev->transport,
					 .kick_fd = dev->kick_fd };
	return 0;
}

/*
 * Created when the config asks for a network; a restore takes the policy from the section and
 * adds the ports the restoring caller grants (cfg->restore_granted_ports).
 */
static int net_vm_create(struct vm *vm, const struct vm_config *cfg,
			 const struct vm_device_section *saved, char *err, size_t errlen)
{
	struct net_config net_cfg;
	const struct virtio_attach spec = {
		.type = &net_device_type, .what = "the network device",
		.create = net_attach_create, .ctx = &net_cfg,
	};

	if (!saved && !cfg->network)
		return 0;
	if (saved) {
		struct byte_reader in;

		byte_reader_init(&in, saved->state, saved->state_len);
		net_config_read_section(&in, &net_cfg);
		if (in.failed) {
			snprintf(err, errlen, "the network section of the snapshot is malformed: "
				 "take the snapshot again");
			return -EBADMSG;
		}
		for (unsigned int i = 0; i < cfg->restore_granted_port_count; i++)
			if (net_policy_grant_port(&net_cfg.policy, cfg->restore_granted_ports[i]) < 0)
				log_warn(NET_LOG, "too many granted ports: the restored guest cannot reach 127.0.0.1:%u through 10.0.2.2",
					 cfg->restore_granted_ports[i]);
	} else {
		net_cfg = *cfg->network;
	}
	net_cfg.confine_worker = vm_thread_filters_on(vm);
	return virtio_attach(vm, &spec, err, errlen);
}

/* libslirp, for a network the config asks for or a snapshot holds: as net_vm_create decides. */
static int net_vm_load_libraries(const struct vm_config *cfg, const struct vm_device_section *saved,
				 char *err, size_t errlen)
{
	return saved || cfg->network ? slirp_dl_load(NET_SLIRP_PURPOSE, err, errlen) : 0;
}

const struct vm_device_type net_device_type = {
	.name = "net",
	.ops = &net_vm_ops,
	.create = net_vm_create,
	.load_libraries = net_vm_load_libraries,
};
