/*
 * vsock connections: the host end of each stream is an AF_UNIX socket, the guest end a
 * (local_port, peer_port) pair. This file is the state machine between the two, kept apart
 * from the virtio plumbing in vsock.c so it reads as the protocol it implements.
 *
 * Flow control follows VIRTIO 1.2 §5.10.6.3 in both directions:
 *  - host -> guest: we read from the host socket only as much as the guest's credit
 *    (peer_buf_alloc - (tx_cnt - peer_fwd_cnt)) and our buffers allow, so bytes are never
 *    dropped; when the credit or the VM-wide backlog runs out the socket is simply not read
 *    (back-pressure) and a CREDIT_REQUEST goes out;
 *  - guest -> host: we advertise VSOCK_CONN_BUF_ALLOC and count fwd_cnt as bytes the host
 *    socket accepted; a guest that sends past its credit is reset, since it broke the rule
 *    that bounds our memory.
 * Guest-controlled header fields are only compared and counted, never used as sizes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "devices/vsock_internal.h"

#define VSOCK_MS_PER_SEC 1000ull
#define VSOCK_NS_PER_MS 1000000ull
#define VSOCK_CONNECT_VERB "CONNECT "
#define VSOCK_DECIMAL_BASE 10
#define VSOCK_OK_LINE_MAX 32u
#define VSOCK_BITS_PER_BYTE 8u
/* At most 1 MiB of unread host input is dropped on a graceful close. */
#define VSOCK_DISCARD_CHUNK 4096u
#define VSOCK_DISCARD_MAX_CHUNKS 256u

static const char *const log_module = "vsock";

static void vsock_put_le(uint8_t *raw, uint64_t value, unsigned int bytes)
{
	for (unsigned int i = 0; i < bytes; i++)
		raw[i] = (uint8_t)(value >> (VSOCK_BITS_PER_BYTE * i));
}

static uint64_t vsock_get_le(const uint8_t *raw, unsigned int bytes)
{
	uint64_t value = 0;

	for (unsigned int i = 0; i < bytes; i++)
		value |= (uint64_t)raw[i] << (VSOCK_BITS_PER_BYTE * i);
	return value;
}

/* Field offsets of struct virtio_vsock_hdr (packed, little-endian). */
enum vsock_hdr_offset {
	VSOCK_HDR_SRC_CID = 0,
	VSOCK_HDR_DST_CID = 8,
	VSOCK_HDR_SRC_PORT = 16,
	VSOCK_HDR_DST_PORT = 20,
	VSOCK_HDR_LEN = 24,
	VSOCK_HDR_TYPE = 28,
	VSOCK_HDR_OP = 30,
	VSOCK_HDR_FLAGS = 32,
	VSOCK_HDR_BUF_ALLOC = 36,
	VSOCK_HDR_FWD_CNT = 40,
};

void vsock_hdr_decode(const uint8_t raw[VSOCK_HDR_SIZE], struct vsock_hdr *hdr)
{
	hdr->src_cid = vsock_get_le(raw + VSOCK_HDR_SRC_CID, sizeof(uint64_t));
	hdr->dst_cid = vsock_get_le(raw + VSOCK_HDR_DST_CID, sizeof(uint64_t));
	hdr->src_port = (uint32_t)vsock_get_le(raw + VSOCK_HDR_SRC_PORT, sizeof(uint32_t));
	hdr->dst_port = (uint32_t)vsock_get_le(raw + VSOCK_HDR_DST_PORT, sizeof(uint32_t));
	hdr->len = (uint32_t)vsock_get_le(raw + VSOCK_HDR_LEN, sizeof(uint32_t));
	hdr->type = (uint16_t)vsock_get_le(raw + VSOCK_HDR_TYPE, sizeof(uint16_t));
	hdr->op = (uint16_t)vsock_get_le(raw + VSOCK_HDR_OP, sizeof(uint16_t));
	hdr->flags = (uint32_t)vsock_get_le(raw + VSOCK_HDR_FLAGS, sizeof(uint32_t));
	hdr->buf_alloc = (uint32_t)vsock_get_le(raw + VSOCK_HDR_BUF_ALLOC, sizeof(uint32_t));
	hdr->fwd_cnt = (uint32_t)vsock_get_le(raw + VSOCK_HDR_FWD_CNT, sizeof(uint32_t));
}

void vsock_hdr_encode(const struct vsock_hdr *hdr, uint8_t raw[VSOCK_HDR_SIZE])
{
	vsock_put_le(raw + VSOCK_HDR_SRC_CID, hdr->src_cid, sizeof(uint64_t));
	vsock_put_le(raw + VSOCK_HDR_DST_CID, hdr->dst_cid, sizeof(uint64_t));
	vsock_put_le(raw + VSOCK_HDR_SRC_PORT, hdr->src_port, sizeof(uint32_t));
	vsock_put_le(raw + VSOCK_HDR_DST_PORT, hdr->dst_port, sizeof(uint32_t));
	vsock_put_le(raw + VSOCK_HDR_LEN, hdr->len, sizeof(uint32_t));
	vsock_put_le(raw + VSOCK_HDR_TYPE, hdr->type, sizeof(uint16_t));
	vsock_put_le(raw + VSOCK_HDR_OP, hdr->op, sizeof(uint16_t));
	vsock_put_le(raw + VSOCK_HDR_FLAGS, hdr->flags, sizeof(uint32_t));
	vsock_put_le(raw + VSOCK_HDR_BUF_ALLOC, hdr->buf_alloc, sizeof(uint32_t));
	vsock_put_le(raw + VSOCK_HDR_FWD_CNT, hdr->fwd_cnt, sizeof(uint32_t));
}

/* ---- byte rings ---- */

static int vsock_ring_alloc(struct vsock_ring *ring, uint32_t cap)
{
	ring->data = malloc(cap);
	if (!ring->data)
		return -ENOMEM;
	ring->cap = cap;
	ring->head = 0;
	ring->len = 0;
	return 0;
}

static void vsock_ring_free(struct vsock_ring *ring)
{
	free(ring->data);
	memset(ring, 0, sizeof(*ring));
}

static uint32_t vsock_ring_space(const struct vsock_ring *ring)
{
	return ring->cap - ring->len;
}

/* The contiguous free span at the tail. */
static uint8_t *vsock_ring_tail(const struct vsock_ring *ring, uint32_t *span)
{
	uint32_t tail = (ring->head + ring->len) % ring->cap;
	uint32_t to_end = ring->cap - tail;
	uint32_t space = vsock_ring_space(ring);

	*span = space < to_end ? space : to_end;
	return ring->data + tail;
}

/* The contiguous filled span at the head. */
static uint8_t *vsock_ring_head(const struct vsock_ring *ring, uint32_t *span)
{
	uint32_t to_end = ring->cap - ring->head;

	*span = ring->len < to_end ? ring->len : to_end;
	return ring->data + ring->head;
}

static void vsock_ring_consume(struct vsock_ring *ring, uint32_t len)
{
	ring->head = (ring->head + len) % ring->cap;
	ring->len -= len;
	if (!ring->len)
		ring->head = 0;
}

static void vsock_ring_append(struct vsock_ring *ring, const uint8_t *src, uint32_t len)
{
	while (len) {
		uint32_t span;
		uint8_t *tail = vsock_ring_tail(ring, &span);

		if (span > len)
			span = len;
		memcpy(tail, src, span);
		ring->len += span;
		src += span;
		len -= span;
	}
}

/* ---- connection bookkeeping ---- */

static unsigned int vsock_conn_index(const struct vsock_device *dev,
				     const struct vsock_conn *conn)
{
	return (unsigned int)(conn - dev->conns);
}

static void vsock_orphan_rst(struct vsock_device *dev, uint32_t local_port, uint32_t peer_port)
{
	uint32_t slot;

	if (dev->orphan_len >= VSOCK_ORPHAN_QUEUE_LEN) {
		log_debug(log_module, "RST queue full; dropping RST for port %" PRIu32, peer_port);
		return;
	}
	slot = (dev->orphan_head + dev->orphan_len) % VSOCK_ORPHAN_QUEUE_LEN;
	dev->orphans[slot] = (struct vsock_orphan_rst){ .local_port = local_port,
							 .peer_port = peer_port };
	dev->orphan_len++;
}

void vsock_conn_close(struct vsock_device *dev, struct vsock_conn *conn, bool send_rst)
{
	if (conn->state == VSOCK_CONN_FREE)
		return;
	if (send_rst && conn->state >= VSOCK_CONN_CONNECTING)
		vsock_orphan_rst(dev, conn->local_port, conn->peer_port);
	if (conn->in_epoll)
		epoll_ctl(dev->epoll_fd, EPOLL_CTL_DEL, conn->fd, NULL);
	close(conn->fd);
	dev->backlog_bytes -= conn->to_guest.len;
	vsock_ring_free(&conn->to_guest);
	vsock_ring_free(&conn->to_host);
	memset(conn, 0, sizeof(*conn));
	conn->fd = -1;
	conn->state = VSOCK_CONN_FREE;
}

void vsock_conn_close_all(struct vsock_device *dev)
{
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		vsock_conn_close(dev, &dev->conns[i], false);
	dev->orphan_head = 0;
	dev->orphan_len = 0;
}

static struct vsock_conn *vsock_conn_free_slot(struct vsock_device *dev)
{
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		if (dev->conns[i].state == VSOCK_CONN_FREE)
			return &dev->conns[i];
	return NULL;
}

static struct vsock_conn *vsock_conn_find(struct vsock_device *dev, uint32_t local_port,
					  uint32_t peer_port)
{
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++) {
		struct vsock_conn *conn = &dev->conns[i];

		if (conn->state >= VSOCK_CONN_CONNECTING && conn->local_port == local_port &&
		    conn->peer_port == peer_port)
			return conn;
	}
	return NULL;
}

static bool vsock_local_port_in_use(struct vsock_device *dev, uint32_t port)
{
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		if (dev->conns[i].state >= VSOCK_CONN_CONNECTING && dev->conns[i].local_port == port)
			return true;
	return false;
}

static uint32_t vsock_alloc_local_port(struct vsock_device *dev)
{
	for (;;) {
		uint32_t port = dev->next_local_port++;

		if (dev->next_local_port < VSOCK_FIRST_LOCAL_PORT ||
		    dev->next_local_port == UINT32_MAX)
			dev->next_local_port = VSOCK_FIRST_LOCAL_PORT;
		if (port >= VSOCK_FIRST_LOCAL_PORT && !vsock_local_port_in_use(dev, port))
			return port;
	}
}

void vsock_conn_accept(struct vsock_device *dev)
{
	for (;;) {
		int fd = accept4(dev->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct vsock_conn *conn;
		struct epoll_event ev = { .events = EPOLLIN };

		if (fd < 0)
			return;
		conn = vsock_conn_free_slot(dev);
		if (!conn) {
			log_warn(log_module, "refusing a host connection: all %d vsock connections "
				 "are in use; close idle ones", VSOCK_MAX_CONNECTIONS);
			close(fd);
			continue;
		}
		ev.data.u64 = VSOCK_EPOLL_KEY_CONN_BASE + vsock_conn_index(dev, conn);
		if (epoll_ctl(dev->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			continue;
		}
		memset(conn, 0, sizeof(*conn));
		conn->fd = fd;
		conn->in_epoll = true;
		conn->epoll_events = EPOLLIN;
		conn->state = VSOCK_CONN_AWAIT_LINE;
		conn->deadline_ms = clock_monotonic_ms() + VSOCK_CONNECT_TIMEOUT_MS;
	}
}

/* ---- host side ---- */

static int vsock_conn_parse_line(struct vsock_conn *conn)
{
	const size_t verb_len = strlen(VSOCK_CONNECT_VERB);
	unsigned long long port;
	char *end;

	conn->line[conn->line_len - 1] = '\0';
	if (strncmp(conn->line, VSOCK_CONNECT_VERB, verb_len) != 0)
		return -EPROTO;
	if (conn->line[verb_len] < '0' || conn->line[verb_len] > '9')
		return -EPROTO;
	errno = 0;
	port = strtoull(conn->line + verb_len, &end, VSOCK_DECIMAL_BASE);
	if (errno || *end != '\0' || port > UINT32_MAX)
		return -EPROTO;
	conn->peer_port = (uint32_t)port;
	return 0;
}

static void vsock_conn_read_line(struct vsock_device *dev, struct vsock_conn *conn)
{
	while (conn->line_len < VSOCK_CONNECT_LINE_MAX) {
		char c;
		ssize_t n = recv(conn->fd, &c, 1, 0);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			goto drop;
		conn->line[conn->line_len++] = c;
		if (c != '\n')
			continue;
		if (vsock_conn_parse_line(conn))
			goto drop;
		conn->local_port = vsock_alloc_local_port(dev);
		conn->state = VSOCK_CONN_CONNECTING;
		conn->pending |= VSOCK_PENDING_REQUEST;
		log_debug(log_module, "host asks for guest port %" PRIu32 " (local port %" PRIu32 ")",
			  conn->peer_port, conn->local_port);
		return;
	}
drop:
	log_debug(log_module, "dropping a host connection without a valid CONNECT line");
	vsock_conn_close(dev, conn, false);
}

static uint32_t vsock_conn_peer_credit(const struct vsock_conn *conn)
{
	uint32_t in_flight = conn->tx_cnt - conn->peer_fwd_cnt;

	if (in_flight >= conn->peer_buf_alloc)
		return 0;
	return conn->peer_buf_alloc - in_flight;
}

/* How many host bytes we may read now without overrunning the guest or our buffers. */
static uint32_t vsock_conn_read_allowance(const struct vsock_device *dev,
					  const struct vsock_conn *conn)
{
	uint32_t allowed = vsock_conn_peer_credit(conn);
	uint32_t space = vsock_ring_space(&conn->to_guest);

	if (conn->state != VSOCK_CONN_ESTABLISHED || conn->host_eof ||
	    (conn->peer_shutdown & VSOCK_SHUTDOWN_RCV))
		return 0;
	if (dev->backlog_bytes >= VSOCK_HOST_BACKLOG_LIMIT)
		return 0;
	if (allowed > space)
		allowed = space;
	if (allowed > VSOCK_HOST_BACKLOG_LIMIT - dev->backlog_bytes)
		allowed = VSOCK_HOST_BACKLOG_LIMIT - dev->backlog_bytes;
	return allowed;
}

static void vsock_conn_read_host(struct vsock_device *dev, struct vsock_conn *conn)
{
	uint32_t allowed = vsock_conn_read_allowance(dev, conn);

	while (allowed) {
		uint32_t span;
		uint8_t *tail = vsock_ring_tail(&conn->to_guest, &span);
		ssize_t n;

		if (span > allowed)
			span = allowed;
		n = recv(conn->fd, tail, span, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0) {
			vsock_conn_close(dev, conn, true);
			return;
		}
		if (n == 0) {
			conn->host_eof = true;
			return;
		}
		conn->to_guest.len += (uint32_t)n;
		conn->tx_cnt += (uint32_t)n;
		dev->backlog_bytes += (uint32_t)n;
		allowed -= (uint32_t)n;
	}
}

static void vsock_conn_note_forwarded(struct vsock_conn *conn, uint32_t len)
{
	conn->fwd_cnt += len;
	if (conn->fwd_cnt - conn->reported_fwd_cnt >= VSOCK_CREDIT_UPDATE_THRESHOLD)
		conn->pending |= VSOCK_PENDING_CREDIT_UPDATE;
}

/* After the host went away: guest bytes have nowhere to go, but their credit comes back. */
static void vsock_conn_discard_to_host(struct vsock_conn *conn)
{
	uint32_t len = conn->to_host.len;

	vsock_ring_consume(&conn->to_host, len);
	vsock_conn_note_forwarded(conn, len);
}

/*
 * The guest closed gracefully: bytes the host sent that the guest will never read are dropped
 * before the socket closes, so the host reads a clean EOF instead of ECONNRESET (which an
 * AF_UNIX close with unread input produces). Bounded, so a host that keeps writing cannot
 * hold the worker.
 */
static void vsock_conn_discard_host_input(struct vsock_conn *conn)
{
	uint8_t scratch[VSOCK_DISCARD_CHUNK];

	for (unsigned int i = 0; i < VSOCK_DISCARD_MAX_CHUNKS; i++)
		if (recv(conn->fd, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0)
			return;
}

/* Writes buffered guest bytes to the host; returns false when the connection was closed. */
static bool vsock_conn_flush_host(struct vsock_device *dev, struct vsock_conn *conn)
{
	while (conn->to_host.len && !conn->host_write_dead) {
		uint32_t span;
		uint8_t *head = vsock_ring_head(&conn->to_host, &span);
		ssize_t n = send(conn->fd, head, span, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return true;
		if (n <= 0) {
			conn->host_write_dead = true;
			break;
		}
		vsock_ring_consume(&conn->to_host, (uint32_t)n);
		vsock_conn_note_forwarded(conn, (uint32_t)n);
	}
	if (conn->host_write_dead)
		vsock_conn_discard_to_host(conn);
	if (conn->to_host.len)
		return true;
	if (conn->peer_shutdown == VSOCK_SHUTDOWN_BOTH) {
		vsock_conn_discard_host_input(conn);
		vsock_conn_close(dev, conn, true);
		return false;
	}
	if ((conn->peer_shutdown & VSOCK_SHUTDOWN_SEND) && !conn->host_write_shut) {
		shutdown(conn->fd, SHUT_WR);
		conn->host_write_shut = true;
	}
	return true;
}

void vsock_conn_host_event(struct vsock_device *dev, struct vsock_conn *conn, uint32_t events)
{
	switch (conn->state) {
	case VSOCK_CONN_AWAIT_LINE:
		vsock_conn_read_line(dev, conn);
		return;
	case VSOCK_CONN_CONNECTING:
		/* The host gave up before the guest answered. */
		if (events & (EPOLLHUP | EPOLLERR))
			vsock_conn_close(dev, conn, true);
		return;
	case VSOCK_CONN_ESTABLISHED:
		break;
	default:
		return;
	}
	if (events & EPOLLERR) {
		vsock_conn_close(dev, conn, true);
		return;
	}
	if ((events & EPOLLOUT) && !vsock_conn_flush_host(dev, conn))
		return;
	if (events & EPOLLHUP) {
		/* Fully closed by the host: stop polling it, drain what it left. */
		conn->host_hup = true;
		conn->host_write_dead = true;
		if (!vsock_conn_flush_host(dev, conn))
			return;
	}
	if (events & (EPOLLIN | EPOLLHUP))
		vsock_conn_read_host(dev, conn);
}

/* ---- guest packets ---- */

static void vsock_conn_established(struct vsock_device *dev, struct vsock_conn *conn)
{
	char reply[VSOCK_OK_LINE_MAX];
	int len = snprintf(reply, sizeof(reply), "OK %" PRIu32 "\n", conn->local_port);
	ssize_t n;

	if (vsock_ring_alloc(&conn->to_guest, VSOCK_CONN_TO_GUEST_BUF) ||
	    vsock_ring_alloc(&conn->to_host, VSOCK_CONN_BUF_ALLOC)) {
		vsock_conn_close(dev, conn, true);
		return;
	}
	n = send(conn->fd, reply, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n != len) {
		vsock_conn_close(dev, conn, true);
		return;
	}
	conn->state = VSOCK_CONN_ESTABLISHED;
	conn->deadline_ms = 0;
	log_debug(log_module, "guest port %" PRIu32 " accepted local port %" PRIu32,
		  conn->peer_port, conn->local_port);
}

static void vsock_conn_guest_rw(struct vsock_device *dev, struct vsock_conn *conn,
				const struct vsock_hdr *hdr, const uint8_t *payload)
{
	if (conn->peer_shutdown & VSOCK_SHUTDOWN_SEND)
		return;
	if (hdr->len > vsock_ring_space(&conn->to_host)) {
		log_warn(log_module, "guest port %" PRIu32 " sent past its credit; resetting the "
			 "connection", conn->peer_port);
		vsock_conn_close(dev, conn, true);
		return;
	}
	vsock_ring_append(&conn->to_host, payload, hdr->len);
	vsock_conn_flush_host(dev, conn);
}

static void vsock_conn_guest_shutdown(struct vsock_device *dev, struct vsock_conn *conn,
				      uint32_t flags)
{
	conn->peer_shutdown |= flags & VSOCK_SHUTDOWN_BOTH;
	if (conn->peer_shutdown & VSOCK_SHUTDOWN_RCV) {
		dev->backlog_bytes -= conn->to_guest.len;
		vsock_ring_consume(&conn->to_guest, conn->to_guest.len);
	}
	vsock_conn_flush_host(dev, conn);
}

static void vsock_conn_guest_packet(struct vsock_device *dev, struct vsock_conn *conn,
				    const struct vsock_hdr *hdr, const uint8_t *payload)
{
	conn->peer_buf_alloc = hdr->buf_alloc;
	conn->peer_fwd_cnt = hdr->fwd_cnt;
	if (vsock_conn_peer_credit(conn))
		conn->credit_requested = false;

	switch (hdr->op) {
	case VSOCK_OP_RESPONSE:
		if (conn->state == VSOCK_CONN_CONNECTING && !(conn->pending & VSOCK_PENDING_REQUEST))
			vsock_conn_established(dev, conn);
		else
			vsock_conn_close(dev, conn, true);
		return;
	case VSOCK_OP_RST:
		vsock_conn_close(dev, conn, false);
		return;
	case VSOCK_OP_REQUEST:
		vsock_conn_close(dev, conn, true);
		return;
	default:
		break;
	}
	if (conn->state != VSOCK_CONN_ESTABLISHED) {
		vsock_conn_close(dev, conn, true);
		return;
	}
	switch (hdr->op) {
	case VSOCK_OP_RW:
		vsock_conn_guest_rw(dev, conn, hdr, payload);
		break;
	case VSOCK_OP_SHUTDOWN:
		vsock_conn_guest_shutdown(dev, conn, hdr->flags);
		break;
	case VSOCK_OP_CREDIT_UPDATE:
		break;
	case VSOCK_OP_CREDIT_REQUEST:
		conn->pending |= VSOCK_PENDING_CREDIT_UPDATE;
		break;
	default:
		vsock_conn_close(dev, conn, true);
		break;
	}
}

void vsock_conn_handle_packet(struct vsock_device *dev, const struct vsock_hdr *hdr,
			      const uint8_t *payload)
{
	struct vsock_conn *conn;

	if (hdr->src_cid != dev->guest_cid || hdr->dst_cid != VSOCK_HOST_CID) {
		log_debug(log_module, "dropping a packet from cid %" PRIu64 " to cid %" PRIu64,
			  hdr->src_cid, hdr->dst_cid);
		return;
	}
	conn = vsock_conn_find(dev, hdr->dst_port, hdr->src_port);
	if (hdr->type != VSOCK_TYPE_STREAM) {
		if (conn)
			vsock_conn_close(dev, conn, true);
		else if (hdr->op != VSOCK_OP_RST)
			vsock_orphan_rst(dev, hdr->dst_port, hdr->src_port);
		return;
	}
	if (conn) {
		vsock_conn_guest_packet(dev, conn, hdr, payload);
		return;
	}
	/* No such connection; guest-initiated REQUESTs land here too and are refused. */
	if (hdr->op != VSOCK_OP_RST)
		vsock_orphan_rst(dev, hdr->dst_port, hdr->src_port);
}

/* ---- packets to the guest ---- */

static bool vsock_conn_wants_output(struct vsock_device *dev, const struct vsock_conn *conn)
{
	if (conn->state == VSOCK_CONN_CONNECTING)
		return (conn->pending & VSOCK_PENDING_REQUEST) && !vsock_reset_in_flight(dev);
	if (conn->state != VSOCK_CONN_ESTABLISHED)
		return false;
	return conn->pending || conn->to_guest.len;
}

bool vsock_conn_has_output(struct vsock_device *dev)
{
	if (dev->orphan_len)
		return true;
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		if (vsock_conn_wants_output(dev, &dev->conns[i]))
			return true;
	return false;
}

static void vsock_conn_fill_hdr(const struct vsock_device *dev, const struct vsock_conn *conn,
				struct vsock_hdr *hdr, enum vsock_op op)
{
	*hdr = (struct vsock_hdr){
		.src_cid = VSOCK_HOST_CID,
		.dst_cid = dev->guest_cid,
		.src_port = conn->local_port,
		.dst_port = conn->peer_port,
		.type = VSOCK_TYPE_STREAM,
		.op = (uint16_t)op,
		.buf_alloc = VSOCK_CONN_BUF_ALLOC,
		.fwd_cnt = conn->fwd_cnt,
	};
}

static uint32_t vsock_write_packet(const struct virtqueue_chain *chain, const struct vsock_hdr *hdr)
{
	uint8_t raw[VSOCK_HDR_SIZE];

	vsock_hdr_encode(hdr, raw);
	virtqueue_chain_write(chain, 0, raw, sizeof(raw));
	return VSOCK_HDR_SIZE + hdr->len;
}

static uint32_t vsock_emit_orphan(struct vsock_device *dev, const struct virtqueue_chain *chain)
{
	struct vsock_orphan_rst rst = dev->orphans[dev->orphan_head];
	struct vsock_conn fake = { .local_port = rst.local_port, .peer_port = rst.peer_port };
	struct vsock_hdr hdr;

	dev->orphan_head = (dev->orphan_head + 1) % VSOCK_ORPHAN_QUEUE_LEN;
	dev->orphan_len--;
	vsock_conn_fill_hdr(dev, &fake, &hdr, VSOCK_OP_RST);
	hdr.buf_alloc = 0;
	return vsock_write_packet(chain, &hdr);
}

static uint32_t vsock_emit_data(struct vsock_device *dev, struct vsock_conn *conn,
				const struct virtqueue_chain *chain, struct vsock_hdr *hdr)
{
	uint64_t room = chain->writable_len - VSOCK_HDR_SIZE;
	uint32_t len = conn->to_guest.len;
	uint32_t done = 0;

	if (len > room)
		len = (uint32_t)room;
	if (len > VSOCK_MAX_PAYLOAD)
		len = VSOCK_MAX_PAYLOAD;
	while (done < len) {
		uint32_t span;
		uint8_t *head = vsock_ring_head(&conn->to_guest, &span);

		if (span > len - done)
			span = len - done;
		virtqueue_chain_write(chain, VSOCK_HDR_SIZE + done, head, span);
		vsock_ring_consume(&conn->to_guest, span);
		done += span;
	}
	dev->backlog_bytes -= len;
	hdr->len = len;
	if (conn->host_hup && len) /* the guest still takes what the closed host left */
		conn->deadline_ms = clock_monotonic_ms() + VSOCK_CLOSE_TIMEOUT_MS;
	return vsock_write_packet(chain, hdr);
}

/* The next packet one connection owes, control before data, SHUTDOWN after the data. */
static uint32_t vsock_conn_emit(struct vsock_device *dev, struct vsock_conn *conn,
				const struct virtqueue_chain *chain)
{
	struct vsock_hdr hdr;
	uint32_t written;

	if (conn->pending & VSOCK_PENDING_REQUEST) {
		conn->pending &= ~(uint32_t)VSOCK_PENDING_REQUEST;
		vsock_conn_fill_hdr(dev, conn, &hdr, VSOCK_OP_REQUEST);
	} else if (conn->to_guest.len) {
		vsock_conn_fill_hdr(dev, conn, &hdr, VSOCK_OP_RW);
		conn->pending &= ~(uint32_t)VSOCK_PENDING_CREDIT_UPDATE;
		conn->reported_fwd_cnt = conn->fwd_cnt;
		return vsock_emit_data(dev, conn, chain, &hdr);
	} else if (conn->pending & VSOCK_PENDING_CREDIT_UPDATE) {
		conn->pending &= ~(uint32_t)VSOCK_PENDING_CREDIT_UPDATE;
		vsock_conn_fill_hdr(dev, conn, &hdr, VSOCK_OP_CREDIT_UPDATE);
	} else if (conn->pending & VSOCK_PENDING_CREDIT_REQUEST) {
		conn->pending &= ~(uint32_t)VSOCK_PENDING_CREDIT_REQUEST;
		vsock_conn_fill_hdr(dev, conn, &hdr, VSOCK_OP_CREDIT_REQUEST);
	} else {
		conn->pending &= ~(uint32_t)VSOCK_PENDING_SHUTDOWN;
		vsock_conn_fill_hdr(dev, conn, &hdr, VSOCK_OP_SHUTDOWN);
		hdr.flags = VSOCK_SHUTDOWN_SEND;
	}
	conn->reported_fwd_cnt = conn->fwd_cnt;
	written = vsock_write_packet(chain, &hdr);
	return written;
}

uint32_t vsock_conn_emit_packet(struct vsock_device *dev, const struct virtqueue_chain *chain)
{
	if (chain->writable_len < VSOCK_HDR_SIZE)
		return 0;
	if (dev->orphan_len)
		return vsock_emit_orphan(dev, chain);
	for (unsigned int n = 0; n < VSOCK_MAX_CONNECTIONS; n++) {
		unsigned int i = (dev->rr_cursor + n) % VSOCK_MAX_CONNECTIONS;
		struct vsock_conn *conn = &dev->conns[i];

		if (!vsock_conn_wants_output(dev, conn))
			continue;
		dev->rr_cursor = (i + 1) % VSOCK_MAX_CONNECTIONS;
		return vsock_conn_emit(dev, conn, chain);
	}
	return 0;
}

/* ---- per-iteration housekeeping ---- */

bool vsock_conn_any_deadline(const struct vsock_device *dev)
{
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		if (dev->conns[i].state != VSOCK_CONN_FREE && dev->conns[i].deadline_ms)
			return true;
	return false;
}

static void vsock_conn_update_epoll(struct vsock_device *dev, struct vsock_conn *conn)
{
	uint32_t wanted = 0;
	struct epoll_event ev;

	if (conn->host_hup) {
		if (conn->in_epoll)
			epoll_ctl(dev->epoll_fd, EPOLL_CTL_DEL, conn->fd, NULL);
		conn->in_epoll = false;
		return;
	}
	if (conn->state == VSOCK_CONN_AWAIT_LINE)
		wanted = EPOLLIN;
	if (conn->state == VSOCK_CONN_ESTABLISHED) {
		if (vsock_conn_read_allowance(dev, conn))
			wanted |= EPOLLIN;
		if (conn->to_host.len && !conn->host_write_dead)
			wanted |= EPOLLOUT;
	}
	if (wanted == conn->epoll_events)
		return;
	ev.events = wanted;
	ev.data.u64 = VSOCK_EPOLL_KEY_CONN_BASE + vsock_conn_index(dev, conn);
	if (epoll_ctl(dev->epoll_fd, EPOLL_CTL_MOD, conn->fd, &ev) == 0)
		conn->epoll_events = wanted;
}

static void vsock_conn_tick(struct vsock_device *dev, struct vsock_conn *conn, uint64_t now_ms)
{
	if (conn->deadline_ms && now_ms >= conn->deadline_ms) {
		log_debug(log_module, "guest port %" PRIu32 " did not answer in time",
			  conn->peer_port);
		vsock_conn_close(dev, conn, true);
		return;
	}
	if (conn->state != VSOCK_CONN_ESTABLISHED)
		return;
	if (conn->host_hup && !conn->deadline_ms)
		conn->deadline_ms = now_ms + VSOCK_CLOSE_TIMEOUT_MS;
	if (conn->host_hup && !conn->host_eof)
		vsock_conn_read_host(dev, conn);
	if (conn->state != VSOCK_CONN_ESTABLISHED)
		return;
	if (conn->host_eof && !conn->to_guest.len && !conn->shutdown_sent) {
		conn->shutdown_sent = true;
		conn->pending |= VSOCK_PENDING_SHUTDOWN;
	}
	if (!conn->host_eof && !vsock_conn_peer_credit(conn) && !conn->credit_requested &&
	    !(conn->peer_shutdown & VSOCK_SHUTDOWN_RCV)) {
		conn->credit_requested = true;
		conn->pending |= VSOCK_PENDING_CREDIT_REQUEST;
	}
	vsock_conn_update_epoll(dev, conn);
}

void vsock_conn_housekeeping(struct vsock_device *dev, uint64_t now_ms)
{
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++) {
		struct vsock_conn *conn = &dev->conns[i];

		if (conn->state == VSOCK_CONN_FREE)
			continue;
		vsock_conn_tick(dev, conn, now_ms);
		if (conn->state != VSOCK_CONN_FREE && conn->state != VSOCK_CONN_ESTABLISHED)
			vsock_conn_update_epoll(dev, conn);
	}
}
