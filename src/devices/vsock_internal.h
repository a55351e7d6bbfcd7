/*
 * Private to the vsock device: the packet header, the per-connection state machine and the
 * device struct shared by vsock.c (virtio side, worker loop) and vsock_conn.c (connections).
 *
 * All of it is guarded by vsock_device.lock, which only the worker (or the poll caller) and
 * the transport's activate/reset hold, so connection code never locks anything itself.
 */
#ifndef VOIDBOX_DEVICES_VSOCK_INTERNAL_H
#define VOIDBOX_DEVICES_VSOCK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include "devices/virtio_mmio.h"
#include "devices/virtqueue.h"
#include "devices/vsock.h"

#define VSOCK_HDR_SIZE 44u
#define VSOCK_TYPE_STREAM 1u
/* Largest payload in one packet either way (Linux's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE). */
#define VSOCK_MAX_PAYLOAD (64u * 1024u)
/* Host -> guest bytes buffered per connection, within the global backlog limit. */
#define VSOCK_CONN_TO_GUEST_BUF (256u * 1024u)
/* Tell the guest about freed credit once this much was forwarded since the last report. */
#define VSOCK_CREDIT_UPDATE_THRESHOLD (VSOCK_CONN_BUF_ALLOC / 4u)
/* "CONNECT 4294967295\n" fits with room to spare. */
#define VSOCK_CONNECT_LINE_MAX 32u
/*
 * Once the host has closed a connection, how long the guest may go without taking any of what
 * is left for it, or without answering the SHUTDOWN that follows, before the connection is
 * reset and its slot freed (Linux's own close timeout for vsock is 8 s): a guest that never
 * answers cannot hold the device's connection slots and their buffers for good.
 */
#define VSOCK_CLOSE_TIMEOUT_MS 8000u
/* RSTs for connections that no longer (or never) existed, waiting for an RX buffer. */
#define VSOCK_ORPHAN_QUEUE_LEN 256u
#define VSOCK_FIRST_LOCAL_PORT 1024u
#define VSOCK_EVENT_TRANSPORT_RESET 0u
#define VSOCK_EVENT_SIZE 4u

enum vsock_op {
	VSOCK_OP_INVALID = 0,
	VSOCK_OP_REQUEST = 1,
	VSOCK_OP_RESPONSE = 2,
	VSOCK_OP_RST = 3,
	VSOCK_OP_SHUTDOWN = 4,
	VSOCK_OP_RW = 5,
	VSOCK_OP_CREDIT_UPDATE = 6,
	VSOCK_OP_CREDIT_REQUEST = 7,
};

enum vsock_shutdown_flag {
	VSOCK_SHUTDOWN_RCV = 1,
	VSOCK_SHUTDOWN_SEND = 2,
	VSOCK_SHUTDOWN_BOTH = 3,
};

struct vsock_hdr {
	uint64_t src_cid;
	uint64_t dst_cid;
	uint32_t src_port;
	uint32_t dst_port;
	uint32_t len;
	uint16_t type;
	uint16_t op;
	uint32_t flags;
	uint32_t buf_alloc;
	uint32_t fwd_cnt;
};

void vsock_hdr_decode(const uint8_t raw[VSOCK_HDR_SIZE], struct vsock_hdr *hdr);
void vsock_hdr_encode(const struct vsock_hdr *hdr, uint8_t raw[VSOCK_HDR_SIZE]);

struct vsock_ring {
	uint8_t *data;
	uint32_t cap;
	uint32_t head;
	uint32_t len;
};

enum vsock_conn_state {
	VSOCK_CONN_FREE,
	VSOCK_CONN_AWAIT_LINE,  /* host accepted; reading "CONNECT <port>\n" */
	VSOCK_CONN_CONNECTING,  /* REQUEST queued or sent; waiting for RESPONSE */
	VSOCK_CONN_ESTABLISHED,
};

/* Control packets a connection owes the guest, sent as RX buffers allow. */
enum vsock_pending_bit {
	VSOCK_PENDING_REQUEST = 1u << 0,
	VSOCK_PENDING_CREDIT_UPDATE = 1u << 1,
	VSOCK_PENDING_CREDIT_REQUEST = 1u << 2,
	VSOCK_PENDING_SHUTDOWN = 1u << 3,
};

struct vsock_conn {
	enum vsock_conn_state state;
	int fd;
	uint32_t epoll_events;
	bool in_epoll;
	uint32_t local_port;
	uint32_t peer_port;
	uint64_t deadline_ms; /* connecting: the guest's answer; host closed: the guest's progress */
	char line[VSOCK_CONNECT_LINE_MAX];
	uint32_t line_len;
	uint32_t pending;

	/* host -> guest */
	struct vsock_ring to_guest;
	uint32_t tx_cnt;
	uint32_t peer_buf_alloc;
	uint32_t peer_fwd_cnt;
	bool credit_requested;
	bool host_eof;
	bool host_hup;
	bool shutdown_sent;

	/* guest -> host */
	struct vsock_ring to_host;
	uint32_t fwd_cnt;
	uint32_t reported_fwd_cnt;
	uint32_t peer_shutdown;
	bool host_write_shut;
	bool host_write_dead;
};

struct vsock_orphan_rst {
	uint32_t local_port;
	uint32_t peer_port;
};

struct vsock_device {
	pthread_mutex_t lock;
	struct virtio_mmio *transport;
	const struct guest_memory *mem;
	uint64_t guest_cid;
	char uds_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	enum vsock_worker_mode mode;
	bool confine_worker;
	int listen_fd;
	bool socket_bound;
	int epoll_fd;
	int kick_fd;
	pthread_t worker;
	bool worker_started;
	atomic_bool stopping;

	struct virtqueue *queues;
	bool active;
	bool event_reset_pending;
	/*
	 * A transport reset the guest has been given but not handled yet: it handles the event,
	 * then gives the event buffer back (the avail index moves past reset_avail_idx). Until
	 * then host REQUESTs wait, or the guest's reset would end the new connection too
	 * (vsock_reset_in_flight, at most VSOCK_RESET_ACK_MAX_MS after reset_started_ms).
	 */
	bool reset_unacked;
	uint16_t reset_avail_idx;
	uint64_t reset_started_ms;

	struct vsock_conn conns[VSOCK_MAX_CONNECTIONS];
	unsigned int rr_cursor;
	uint32_t next_local_port;
	uint32_t backlog_bytes;
	struct vsock_orphan_rst orphans[VSOCK_ORPHAN_QUEUE_LEN];
	uint32_t orphan_head;
	uint32_t orphan_len;

	struct virtqueue_chain chain;
	uint8_t packet[VSOCK_HDR_SIZE + VSOCK_MAX_PAYLOAD];
};

/*
 * A transport reset is on its way to the guest or not handled by it yet, and not older than
 * VSOCK_RESET_ACK_MAX_MS: new host connections wait (vsock.c).
 */
#define VSOCK_RESET_ACK_MAX_MS 1000u
bool vsock_reset_in_flight(struct vsock_device *dev);

/* vsock_conn.c: connections and the packet state machine. */
void vsock_conn_accept(struct vsock_device *dev);
void vsock_conn_host_event(struct vsock_device *dev, struct vsock_conn *conn, uint32_t events);
void vsock_conn_handle_packet(struct vsock_device *dev, const struct vsock_hdr *hdr,
			      const uint8_t *payload);
/* Fills one RX chain with the next packet owed to the guest; false when nothing is owed. */
bool vsock_conn_has_output(struct vsock_device *dev);
uint32_t vsock_conn_emit_packet(struct vsock_device *dev, const struct virtqueue_chain *chain);
void vsock_conn_close(struct vsock_device *dev, struct vsock_conn *conn, bool send_rst);
void vsock_conn_close_all(struct vsock_device *dev);
/* Per loop iteration: timeouts, reads owed to hung-up sockets, epoll interest. */
void vsock_conn_housekeeping(struct vsock_device *dev, uint64_t now_ms);
bool vsock_conn_any_deadline(const struct vsock_device *dev);

#define VSOCK_EPOLL_KEY_LISTEN 0u
#define VSOCK_EPOLL_KEY_KICK 1u
#define VSOCK_EPOLL_KEY_CONN_BASE 2u

#endif
