/*
 * vsock device tests with a scripted guest: the fake driver from fake_guest.c plays the
 * guest's virtio-vsock transport (posts RX buffers, answers REQUESTs, echoes data, keeps its
 * own credit books) while a host thread connects through vsock_host_connect(), exactly as the
 * control channel does. The guest advertises a small buffer so host-side back-pressure and
 * credit updates happen many times in every transfer; every received RW is checked against
 * the credit we granted, so a device that overruns the guest fails here.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/vsock.h"
#include "devices/vsock_internal.h"
#include "fake_guest.h"
#include "harness.h"
#include "host/vsock_connect.h"

#define GUEST_CID 3u
#define GUEST_LISTEN_PORT 1234u
#define GUEST_BUF_ALLOC (16u * 1024u)
#define GUEST_CREDIT_UPDATE_EVERY (8u * 1024u)
#define GUEST_SEND_CHUNK (16u * 1024u)

#define RX_CHAINS 128u
#define RX_BUF_BASE 0x100000u
#define RX_SLOT 0x1100u
#define RX_PAYLOAD_OFFSET 0x40u
#define RX_PAYLOAD 4096u
#define TX_CHAINS 128u
#define TX_BUF_BASE 0x400000u
#define TX_SLOT 0x11000u
#define TX_PAYLOAD_OFFSET 0x40u
#define TX_INDIRECT_OFFSET 0x10080u
#define EVENT_BUF 0xf00000u

#define ECHO_LEN ((3u << 19) + 123u) /* 1.5 MiB and change: many wraps of every window */
#define ECHO_CAPACITY (4u << 20)
#define RUN_TIMEOUT_MS 20000
#define CONNECT_TIMEOUT_MS 5000

enum peer_request_policy {
	PEER_ACCEPT,     /* RESPONSE to GUEST_LISTEN_PORT, RST elsewhere */
	PEER_IGNORE,     /* never answer: a guest that is not listening yet */
};

struct peer_conn {
	bool open;
	uint32_t host_port;
	uint32_t fwd_cnt;
	uint32_t reported_fwd_cnt;
	uint32_t total_rx;
	uint32_t host_buf_alloc;
	uint32_t host_fwd_cnt;
	uint32_t tx_cnt;
	uint8_t *echo;
	uint32_t echo_len;
	uint32_t echo_sent;
	bool host_shut;
	bool shut_sent;
	bool got_rst;
	bool credit_violation;
	bool len_mismatch;
};

struct peer {
	struct fake_guest guest;
	struct vsock_device *dev;
	enum vsock_worker_mode mode;
	enum peer_request_policy policy;
	bool echo;
	uint32_t source_len; /* when set, the guest sends this much pattern instead of echoing */
	bool use_indirect;
	bool irq_driven;     /* RX is read only after an interrupt, as a real driver does */
	bool accept_all;     /* answer every REQUEST, count RW bytes in all_rx, nothing else */
	bool hold_rx;        /* keep used RX chains instead of giving them back */
	uint32_t buf_alloc;  /* advertised credit; GUEST_BUF_ALLOC when zero */
	uint64_t all_rx;
	uint16_t held[RX_CHAINS];
	unsigned int held_count;
	bool tx_busy[TX_CHAINS];
	struct peer_conn conn;
	unsigned int op_counts[VSOCK_OP_CREDIT_REQUEST + 1];
	struct vsock_hdr last_hdr;
	char path[108];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- guest side ---- */

static void fill_pattern(uint8_t *buf, uint32_t len)
{
	uint32_t x = 0x12345678u;

	for (uint32_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
	}
}

static void peer_post_rx(struct peer *p, uint16_t chain)
{
	uint64_t base = RX_BUF_BASE + (uint64_t)chain * RX_SLOT;

	fake_guest_set_desc(&p->guest, VSOCK_QUEUE_RX, (uint16_t)(2 * chain), base, VSOCK_HDR_SIZE,
			    VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, (uint16_t)(2 * chain + 1));
	fake_guest_set_desc(&p->guest, VSOCK_QUEUE_RX, (uint16_t)(2 * chain + 1),
			    base + RX_PAYLOAD_OFFSET, RX_PAYLOAD, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&p->guest, VSOCK_QUEUE_RX, (uint16_t)(2 * chain));
}

static int peer_start(struct peer *p, enum vsock_worker_mode mode)
{
	char err[256];
	struct vsock_device_config cfg;
	uint32_t status;

	memset(p, 0, sizeof(*p));
	if (fake_guest_init(&p->guest))
		return -1;
	snprintf(p->path, sizeof(p->path), "/tmp/voidbox-test-vsock-%d-%u.sock", (int)getpid(),
		 (unsigned int)rand());
	p->mode = mode;
	cfg = (struct vsock_device_config){
		.guest_cid = GUEST_CID, .uds_path = p->path, .mem = &p->guest.mem,
		.irq = fake_guest_irq(&p->guest), .worker_mode = mode,
	};
	p->dev = vsock_device_create(&cfg, err, sizeof(err));
	if (!p->dev) {
		fprintf(stderr, "  vsock_device_create: %s\n", err);
		return -1;
	}
	status = fake_guest_setup(&p->guest, vsock_device_transport(p->dev), VSOCK_QUEUE_COUNT,
				  ~0ull);
	if (!(status & VIRTIO_STATUS_DRIVER_OK) || (status & VIRTIO_STATUS_DEVICE_NEEDS_RESET))
		return -1;
	for (uint16_t i = 0; i < RX_CHAINS; i++)
		peer_post_rx(p, i);
	fake_guest_notify(&p->guest, VSOCK_QUEUE_RX);
	return 0;
}

static void peer_stop(struct peer *p)
{
	vsock_device_destroy(p->dev);
	free(p->conn.echo);
	fake_guest_free(&p->guest);
}

static void peer_reap_tx(struct peer *p)
{
	uint32_t id, len;

	while (fake_guest_pop_used(&p->guest, VSOCK_QUEUE_TX, &id, &len))
		if (id / 2 < TX_CHAINS)
			p->tx_busy[id / 2] = false;
}

static int peer_free_tx_slot(struct peer *p)
{
	peer_reap_tx(p);
	for (unsigned int i = 0; i < TX_CHAINS; i++)
		if (!p->tx_busy[i])
			return (int)i;
	return -1;
}

/* Queues one packet on the TX queue; every other slot goes through an indirect table. */
static bool peer_send_raw(struct peer *p, const struct vsock_hdr *hdr, const void *payload,
			  uint32_t payload_len)
{
	int slot = peer_free_tx_slot(p);
	uint64_t base;
	uint16_t head;

	if (slot < 0)
		return false;
	base = TX_BUF_BASE + (uint64_t)slot * TX_SLOT;
	head = (uint16_t)(2 * slot);
	vsock_hdr_encode(hdr, fake_guest_host(&p->guest, base));
	if (payload_len)
		memcpy(fake_guest_host(&p->guest, base + TX_PAYLOAD_OFFSET), payload, payload_len);
	if (p->use_indirect && (slot & 1)) {
		uint8_t *table = fake_guest_host(&p->guest, base + TX_INDIRECT_OFFSET);
		uint64_t addrs[2] = { base, base + TX_PAYLOAD_OFFSET };
		uint32_t lens[2] = { VSOCK_HDR_SIZE, payload_len };
		uint16_t flags[2] = { payload_len ? VIRTQ_DESC_F_NEXT : 0, 0 };
		uint16_t next[2] = { 1, 0 };

		for (unsigned int i = 0; i < 2; i++) {
			memcpy(table + 16 * i, &addrs[i], 8);
			memcpy(table + 16 * i + 8, &lens[i], 4);
			memcpy(table + 16 * i + 12, &flags[i], 2);
			memcpy(table + 16 * i + 14, &next[i], 2);
		}
		fake_guest_set_desc(&p->guest, VSOCK_QUEUE_TX, head, base + TX_INDIRECT_OFFSET,
				    payload_len ? 32 : 16, VIRTQ_DESC_F_INDIRECT, 0);
	} else {
		fake_guest_set_desc(&p->guest, VSOCK_QUEUE_TX, head, base, VSOCK_HDR_SIZE,
				    payload_len ? VIRTQ_DESC_F_NEXT : 0, (uint16_t)(head + 1));
		fake_guest_set_desc(&p->guest, VSOCK_QUEUE_TX, (uint16_t)(head + 1),
				    base + TX_PAYLOAD_OFFSET, payload_len, 0, 0);
	}
	p->tx_busy[slot] = true;
	fake_guest_publish(&p->guest, VSOCK_QUEUE_TX, head);
	fake_guest_notify(&p->guest, VSOCK_QUEUE_TX);
	return true;
}

static bool peer_send(struct peer *p, uint32_t guest_port, uint32_t host_port, enum vsock_op op,
		      uint32_t flags, const void *payload, uint32_t len)
{
	struct vsock_hdr hdr = {
		.src_cid = GUEST_CID, .dst_cid = VSOCK_HOST_CID, .src_port = guest_port,
		.dst_port = host_port, .len = len, .type = VSOCK_TYPE_STREAM, .op = (uint16_t)op,
		.flags = flags, .buf_alloc = p->buf_alloc ? p->buf_alloc : GUEST_BUF_ALLOC,
		.fwd_cnt = p->conn.fwd_cnt,
	};

	if (!peer_send_raw(p, &hdr, payload, len))
		return false;
	p->conn.reported_fwd_cnt = p->conn.fwd_cnt;
	if (op == VSOCK_OP_RW)
		p->conn.tx_cnt += len;
	return true;
}

static void peer_conn_send(struct peer *p, enum vsock_op op, uint32_t flags, const void *payload,
			   uint32_t len)
{
	peer_send(p, GUEST_LISTEN_PORT, p->conn.host_port, op, flags, payload, len);
}

static void peer_handle_request(struct peer *p, const struct vsock_hdr *hdr)
{
	if (p->policy == PEER_IGNORE)
		return;
	if (hdr->dst_port != GUEST_LISTEN_PORT || p->conn.open) {
		peer_send(p, hdr->dst_port, hdr->src_port, VSOCK_OP_RST, 0, NULL, 0);
		return;
	}
	free(p->conn.echo);
	memset(&p->conn, 0, sizeof(p->conn));
	p->conn.open = true;
	p->conn.host_port = hdr->src_port;
	p->conn.host_buf_alloc = hdr->buf_alloc;
	p->conn.host_fwd_cnt = hdr->fwd_cnt;
	if (p->echo || p->source_len)
		p->conn.echo = malloc(ECHO_CAPACITY);
	if (p->source_len) {
		fill_pattern(p->conn.echo, p->source_len);
		p->conn.echo_len = p->source_len;
	}
	peer_conn_send(p, VSOCK_OP_RESPONSE, 0, NULL, 0);
}

static void peer_handle_rw(struct peer *p, const struct vsock_hdr *hdr, const uint8_t *payload)
{
	struct peer_conn *c = &p->conn;

	if (c->total_rx + hdr->len - c->reported_fwd_cnt > GUEST_BUF_ALLOC)
		c->credit_violation = true;
	if (p->echo && c->echo_len + hdr->len <= ECHO_CAPACITY) {
		memcpy(c->echo + c->echo_len, payload, hdr->len);
		c->echo_len += hdr->len;
	}
	c->total_rx += hdr->len;
	/* An echoing guest app reads only what it can write back (see peer_pump_echo). */
	if (!p->echo)
		c->fwd_cnt += hdr->len;
	if (c->fwd_cnt - c->reported_fwd_cnt >= GUEST_CREDIT_UPDATE_EVERY)
		peer_conn_send(p, VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
}

static void peer_handle_packet(struct peer *p, const struct vsock_hdr *hdr,
			       const uint8_t *payload, uint32_t used_len)
{
	if (hdr->op <= VSOCK_OP_CREDIT_REQUEST)
		p->op_counts[hdr->op]++;
	p->last_hdr = *hdr;
	if (hdr->len + VSOCK_HDR_SIZE != used_len)
		p->conn.len_mismatch = true;
	if (p->accept_all) {
		if (hdr->op == VSOCK_OP_REQUEST)
			peer_send(p, hdr->dst_port, hdr->src_port, VSOCK_OP_RESPONSE, 0, NULL, 0);
		if (hdr->op == VSOCK_OP_RW)
			p->all_rx += hdr->len;
		return;
	}
	if (hdr->op == VSOCK_OP_REQUEST) {
		peer_handle_request(p, hdr);
		return;
	}
	if (!p->conn.open || hdr->src_port != p->conn.host_port)
		return;
	p->conn.host_buf_alloc = hdr->buf_alloc;
	p->conn.host_fwd_cnt = hdr->fwd_cnt;
	switch (hdr->op) {
	case VSOCK_OP_RW:
		peer_handle_rw(p, hdr, payload);
		break;
	case VSOCK_OP_SHUTDOWN:
		if (hdr->flags & VSOCK_SHUTDOWN_SEND)
			p->conn.host_shut = true;
		break;
	case VSOCK_OP_CREDIT_REQUEST:
		peer_conn_send(p, VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
		break;
	case VSOCK_OP_RST:
		p->conn.got_rst = true;
		p->conn.open = false;
		break;
	default:
		break;
	}
}

static void peer_poll_rx(struct peer *p)
{
	uint32_t id, len;
	bool reposted = false;

	while (fake_guest_pop_used(&p->guest, VSOCK_QUEUE_RX, &id, &len)) {
		uint64_t base = RX_BUF_BASE + (uint64_t)(id / 2) * RX_SLOT;
		struct vsock_hdr hdr;

		if (len >= VSOCK_HDR_SIZE) {
			vsock_hdr_decode(fake_guest_host(&p->guest, base), &hdr);
			peer_handle_packet(p, &hdr,
					   fake_guest_host(&p->guest, base + RX_PAYLOAD_OFFSET), len);
		}
		if (p->hold_rx) {
			p->held[p->held_count++ % RX_CHAINS] = (uint16_t)(id / 2);
			continue;
		}
		peer_post_rx(p, (uint16_t)(id / 2));
		reposted = true;
	}
	if (reposted)
		fake_guest_notify(&p->guest, VSOCK_QUEUE_RX);
}

static void peer_pump_echo(struct peer *p)
{
	struct peer_conn *c = &p->conn;

	while (c->open && c->echo && c->echo_sent < c->echo_len) {
		uint32_t in_flight = c->tx_cnt - c->host_fwd_cnt;
		uint32_t credit = in_flight >= c->host_buf_alloc ? 0 : c->host_buf_alloc - in_flight;
		uint32_t chunk = c->echo_len - c->echo_sent;

		if (chunk > credit)
			chunk = credit;
		if (chunk > GUEST_SEND_CHUNK)
			chunk = GUEST_SEND_CHUNK;
		if (!chunk || peer_free_tx_slot(p) < 0)
			break;
		if (p->echo)
			c->fwd_cnt += chunk;
		peer_send(p, GUEST_LISTEN_PORT, c->host_port, VSOCK_OP_RW, 0, c->echo + c->echo_sent,
			  chunk);
		c->echo_sent += chunk;
	}
	if (c->open && c->echo && c->host_shut && c->echo_sent == c->echo_len && !c->shut_sent) {
		peer_conn_send(p, VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH, NULL, 0);
		c->shut_sent = true;
	}
}

static void peer_step(struct peer *p)
{
	uint32_t pending = fake_guest_ack_irq(&p->guest);

	peer_reap_tx(p);
	/* An interrupt-driven guest looks at RX only when told: a lost interrupt hangs it. */
	if (!p->irq_driven || pending)
		peer_poll_rx(p);
	peer_pump_echo(p);
	if (p->mode == VSOCK_WORKER_CALLER)
		vsock_device_poll(p->dev, 1);
	else
		usleep(100);
}

typedef bool (*peer_done_fn)(struct peer *p, void *arg);

static bool peer_run(struct peer *p, peer_done_fn done, void *arg, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	while (now_ms() < deadline) {
		peer_step(p);
		if (done(p, arg))
			return true;
	}
	return false;
}

/* ---- host side ---- */

struct host_client {
	const char *path;
	uint32_t port;
	int timeout_ms;
	int fd;
	const uint8_t *send_buf;
	uint32_t send_len;
	uint8_t *recv_buf;
	uint32_t recv_cap;
	uint32_t recv_len;
	bool keep_open;
	atomic_bool finished;
};

static void *host_writer_main(void *arg)
{
	struct host_client *hc = arg;
	uint32_t sent = 0;

	while (sent < hc->send_len) {
		ssize_t n = send(hc->fd, hc->send_buf + sent, hc->send_len - sent, MSG_NOSIGNAL);

		if (n <= 0)
			break;
		sent += (uint32_t)n;
	}
	shutdown(hc->fd, SHUT_WR);
	return NULL;
}

static void *host_client_main(void *arg)
{
	struct host_client *hc = arg;
	pthread_t writer;

	hc->fd = vsock_host_connect(hc->path, hc->port, hc->timeout_ms);
	if (hc->fd < 0 || hc->keep_open)
		goto out;
	pthread_create(&writer, NULL, host_writer_main, hc);
	for (;;) {
		ssize_t n = recv(hc->fd, hc->recv_buf + hc->recv_len, hc->recv_cap - hc->recv_len, 0);

		if (n <= 0)
			break;
		hc->recv_len += (uint32_t)n;
	}
	pthread_join(writer, NULL);
	close(hc->fd);
out:
	atomic_store(&hc->finished, true);
	return NULL;
}

static bool host_finished(struct peer *p, void *arg)
{
	struct host_client *hc = arg;

	return atomic_load(&hc->finished);
}

static void test_echo_large_transfer(enum vsock_worker_mode mode, bool indirect)
{
	struct peer *p = calloc(1, sizeof(*p));
	struct host_client hc = { .port = GUEST_LISTEN_PORT, .timeout_ms = CONNECT_TIMEOUT_MS };
	uint8_t *out = malloc(ECHO_LEN), *in = malloc(ECHO_LEN + 1);
	pthread_t client;

	CHECK_INT_EQ(peer_start(p, mode), 0);
	p->echo = true;
	p->use_indirect = indirect;
	p->irq_driven = mode == VSOCK_WORKER_THREAD;
	fill_pattern(out, ECHO_LEN);
	hc.path = p->path;
	hc.send_buf = out;
	hc.send_len = ECHO_LEN;
	hc.recv_buf = in;
	hc.recv_cap = ECHO_LEN + 1;
	pthread_create(&client, NULL, host_client_main, &hc);
	CHECK(peer_run(p, host_finished, &hc, RUN_TIMEOUT_MS));
	pthread_join(client, NULL);
	CHECK(hc.fd >= 0);
	CHECK_INT_EQ(hc.recv_len, ECHO_LEN);
	CHECK(memcmp(in, out, ECHO_LEN) == 0);
	CHECK_INT_EQ(p->conn.total_rx, ECHO_LEN);
	CHECK(!p->conn.credit_violation);
	CHECK(!p->conn.len_mismatch);
	CHECK(p->conn.host_shut);
	/* The device answers the guest's full shutdown with RST. */
	for (int i = 0; i < 100 && !p->conn.got_rst; i++)
		peer_step(p);
	CHECK(p->conn.got_rst);
	/* 1.5 MiB each way through 256 KiB / 16 KiB windows: credit came back many times. */
	CHECK_INT_EQ(p->conn.tx_cnt, ECHO_LEN);
	CHECK(atomic_load(&p->guest.irq_raises) > 0);
	CHECK_INT_EQ(vsock_device_connection_count(p->dev), 0);
	CHECK(!virtio_mmio_is_broken(vsock_device_transport(p->dev)));
	peer_stop(p);
	free(p);
	free(out);
	free(in);
}

static void test_echo_worker_thread(void)
{
	test_echo_large_transfer(VSOCK_WORKER_THREAD, false);
}

static void test_echo_caller_loop_indirect(void)
{
	test_echo_large_transfer(VSOCK_WORKER_CALLER, true);
}

/* Guest -> host only: the device has nothing to piggyback fwd_cnt on, so it must send
 * CREDIT_UPDATEs or the guest stalls after VSOCK_CONN_BUF_ALLOC bytes. */
static void test_guest_to_host_stream_needs_credit_updates(void)
{
	struct peer *p = calloc(1, sizeof(*p));
	struct host_client hc = { .port = GUEST_LISTEN_PORT, .timeout_ms = CONNECT_TIMEOUT_MS };
	uint8_t *expected = malloc(ECHO_LEN), *in = malloc(ECHO_LEN + 1);
	pthread_t client;

	CHECK_INT_EQ(peer_start(p, VSOCK_WORKER_THREAD), 0);
	p->source_len = ECHO_LEN;
	p->irq_driven = true;
	fill_pattern(expected, ECHO_LEN);
	hc.path = p->path;
	hc.recv_buf = in;
	hc.recv_cap = ECHO_LEN + 1;
	pthread_create(&client, NULL, host_client_main, &hc);
	CHECK(peer_run(p, host_finished, &hc, RUN_TIMEOUT_MS));
	pthread_join(client, NULL);
	CHECK_INT_EQ(hc.recv_len, ECHO_LEN);
	CHECK(memcmp(in, expected, ECHO_LEN) == 0);
	CHECK(p->op_counts[VSOCK_OP_CREDIT_UPDATE] >= ECHO_LEN / VSOCK_CONN_BUF_ALLOC);
	CHECK_INT_EQ(p->op_counts[VSOCK_OP_RW], 0);
	peer_stop(p);
	free(p);
	free(expected);
	free(in);
}

static int connect_with_guest(struct peer *p, uint32_t port, int timeout_ms)
{
	struct host_client hc = { .path = p->path, .port = port, .timeout_ms = timeout_ms,
				  .keep_open = true };
	pthread_t client;

	pthread_create(&client, NULL, host_client_main, &hc);
	peer_run(p, host_finished, &hc, RUN_TIMEOUT_MS);
	pthread_join(client, NULL);
	return hc.fd;
}

static void test_connect_refused_by_guest(void)
{
	struct peer p;
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	fd = connect_with_guest(&p, 999, CONNECT_TIMEOUT_MS);
	CHECK_INT_EQ(fd, -ECONNRESET);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_REQUEST], 1);
	CHECK_INT_EQ(p.last_hdr.dst_port, 999);
	CHECK_INT_EQ(p.last_hdr.src_cid, VSOCK_HOST_CID);
	CHECK_INT_EQ(p.last_hdr.dst_cid, GUEST_CID);
	CHECK(strstr(vsock_host_connect_describe(fd), "nothing listens") != NULL);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 0);
	peer_stop(&p);
}

static bool saw_rst(struct peer *p, void *arg)
{
	return p->op_counts[VSOCK_OP_RST] > 0;
}

static void test_connect_timeout_then_host_gives_up(void)
{
	struct peer p;
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	p.policy = PEER_IGNORE;
	fd = connect_with_guest(&p, GUEST_LISTEN_PORT, 300);
	CHECK_INT_EQ(fd, -ETIMEDOUT);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_REQUEST], 1);
	/* The host closed its end; the device tells the guest to forget the half-open stream. */
	CHECK(peer_run(&p, saw_rst, NULL, 2000));
	CHECK_INT_EQ(p.last_hdr.op, VSOCK_OP_RST);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 0);
	peer_stop(&p);
}

static void test_connect_without_vm(void)
{
	char path[] = "/tmp/voidbox-test-vsock-XXXXXX";
	int fd = mkstemp(path);
	int rc;

	CHECK_INT_EQ(vsock_host_connect("/nonexistent-dir/vm.sock", 1234, 100), -ENOENT);
	CHECK(fd >= 0);
	rc = vsock_host_connect(path, 1234, 100);
	CHECK_INT_EQ(rc, -ECONNREFUSED);
	CHECK(strstr(vsock_host_connect_describe(rc), "not running") != NULL);
	close(fd);
	unlink(path);
}

static bool rst_count_reaches(struct peer *p, void *arg)
{
	return p->op_counts[VSOCK_OP_RST] >= *(unsigned int *)arg;
}

static void test_guest_packets_that_get_rst_or_dropped(void)
{
	struct peer p;
	struct vsock_hdr hdr = {
		.src_cid = GUEST_CID, .dst_cid = VSOCK_HOST_CID, .src_port = 5000, .dst_port = 80,
		.type = VSOCK_TYPE_STREAM, .op = VSOCK_OP_REQUEST, .buf_alloc = GUEST_BUF_ALLOC,
	};
	unsigned int want = 1;
	uint8_t junk[16] = { 0 };

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	/* Guest-initiated connections are refused. */
	CHECK(peer_send_raw(&p, &hdr, NULL, 0));
	CHECK(peer_run(&p, rst_count_reaches, &want, 2000));
	CHECK_INT_EQ(p.last_hdr.dst_port, 5000);
	CHECK_INT_EQ(p.last_hdr.src_port, 80);


	/* Wrong CIDs are dropped without an answer; the next RST proves the queue moved on. */
	hdr.src_cid = 7;
	CHECK(peer_send_raw(&p, &hdr, NULL, 0));
	hdr.src_cid = GUEST_CID;
	hdr.dst_cid = 9;
	CHECK(peer_send_raw(&p, &hdr, NULL, 0));
	hdr.dst_cid = VSOCK_HOST_CID;
	/* A length that lies about the payload, an unknown op, a non-stream type. */
	hdr.op = VSOCK_OP_RW;
	hdr.len = 100000;
	hdr.src_port = 5001;
	CHECK(peer_send_raw(&p, &hdr, junk, sizeof(junk)));
	hdr.len = 0;
	hdr.op = 99;
	hdr.src_port = 5002;
	CHECK(peer_send_raw(&p, &hdr, NULL, 0));
	hdr.op = VSOCK_OP_RW;
	hdr.type = 2;
	hdr.src_port = 5003;
	CHECK(peer_send_raw(&p, &hdr, NULL, 0));
	want = 4;
	CHECK(peer_run(&p, rst_count_reaches, &want, 2000));
	for (int i = 0; i < 20; i++)
		peer_step(&p);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_RST], 4);
	CHECK(!virtio_mmio_is_broken(vsock_device_transport(p.dev)));
	peer_stop(&p);
}

/* The kick eventfd alone (what KVM_IOEVENTFD would write) gets the queues looked at. */
static void test_kick_fd_wakes_worker(void)
{
	struct peer p;
	struct vsock_hdr hdr = {
		.src_cid = GUEST_CID, .dst_cid = VSOCK_HOST_CID, .src_port = 4999, .dst_port = 80,
		.type = VSOCK_TYPE_STREAM, .op = VSOCK_OP_REQUEST,
	};
	unsigned int want = 1;
	uint64_t one = 1;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_THREAD), 0);
	/* Let the worker finish with the kicks of the driver's own setup first. */
	usleep(200 * 1000);
	vsock_hdr_encode(&hdr, fake_guest_host(&p.guest, TX_BUF_BASE));
	fake_guest_set_desc(&p.guest, VSOCK_QUEUE_TX, 0, TX_BUF_BASE, VSOCK_HDR_SIZE, 0, 0);
	p.tx_busy[0] = true;
	fake_guest_publish(&p.guest, VSOCK_QUEUE_TX, 0);
	/* Published but not notified: the worker sleeps on. */
	usleep(50 * 1000);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_RST], 0);
	peer_poll_rx(&p);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_RST], 0);
	CHECK_INT_EQ(write(vsock_device_kick_fd(p.dev), &one, sizeof(one)), sizeof(one));
	CHECK(peer_run(&p, rst_count_reaches, &want, 2000));
	CHECK_INT_EQ(p.last_hdr.dst_port, 4999);
	peer_stop(&p);
}

static bool conn_rst(struct peer *p, void *arg)
{
	return p->conn.got_rst;
}

static void test_guest_overrunning_credit_is_reset(void)
{
	struct peer p;
	uint8_t *chunk = calloc(1, VSOCK_MAX_PAYLOAD);
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	fd = connect_with_guest(&p, GUEST_LISTEN_PORT, CONNECT_TIMEOUT_MS);
	CHECK(fd >= 0);
	CHECK(p.conn.open);
	/* The host never reads; the guest ignores the 256 KiB credit it was given. */
	for (int i = 0; i < 64 && p.conn.open; i++) {
		if (!peer_send(&p, GUEST_LISTEN_PORT, p.conn.host_port, VSOCK_OP_RW, 0, chunk,
			       VSOCK_MAX_PAYLOAD))
			peer_step(&p);
		peer_step(&p);
	}
	CHECK(peer_run(&p, conn_rst, NULL, 2000));
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 0);
	if (fd >= 0)
		close(fd);
	free(chunk);
	peer_stop(&p);
}

struct half_close_client {
	const char *path;
	int fd;
	char got[64];
	atomic_int stage;
};

static void *half_close_client_main(void *arg)
{
	struct half_close_client *hc = arg;
	size_t len = 0;
	ssize_t n;

	hc->fd = vsock_host_connect(hc->path, GUEST_LISTEN_PORT, CONNECT_TIMEOUT_MS);
	if (hc->fd < 0)
		goto out;
	while ((n = recv(hc->fd, hc->got + len, sizeof(hc->got) - 1 - len, 0)) > 0)
		len += (size_t)n;
	atomic_store(&hc->stage, 1);
	/* The guest stopped sending; we can still talk to it. */
	send(hc->fd, "bye", 3, MSG_NOSIGNAL);
	close(hc->fd);
out:
	atomic_store(&hc->stage, 2);
	return NULL;
}

static bool peer_got_bytes(struct peer *p, void *arg)
{
	return p->conn.total_rx >= *(uint32_t *)arg && p->conn.host_shut;
}

static void test_guest_half_close(void)
{
	struct peer p;
	struct half_close_client hc = { 0 };
	uint32_t want = 3;
	pthread_t client;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_THREAD), 0);
	p.echo = true;
	hc.path = p.path;
	pthread_create(&client, NULL, half_close_client_main, &hc);
	while (!p.conn.open && atomic_load(&hc.stage) == 0)
		peer_step(&p);
	CHECK(p.conn.open);
	CHECK(peer_send(&p, GUEST_LISTEN_PORT, p.conn.host_port, VSOCK_OP_RW, 0, "hello", 5));
	CHECK(peer_send(&p, GUEST_LISTEN_PORT, p.conn.host_port, VSOCK_OP_SHUTDOWN,
			VSOCK_SHUTDOWN_SEND, NULL, 0));
	/* peer_pump_echo must not echo "bye" back: mark it all sent already. */
	p.conn.echo_sent = UINT32_MAX / 2;
	CHECK(peer_run(&p, peer_got_bytes, &want, RUN_TIMEOUT_MS));
	pthread_join(client, NULL);
	CHECK_STR_EQ(hc.got, "hello");
	CHECK_INT_EQ(p.conn.total_rx, 3);
	CHECK(p.conn.echo && memcmp(p.conn.echo, "bye", 3) == 0);
	CHECK(p.conn.host_shut);
	peer_stop(&p);
}

static int raw_connect(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		return -errno;
	}
	return fd;
}

static void test_connection_limit(void)
{
	enum { ATTEMPTS = VSOCK_MAX_CONNECTIONS + 2 };
	struct peer p;
	int fds[ATTEMPTS];
	int closed = 0;
	char byte;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	for (int i = 0; i < ATTEMPTS; i++) {
		fds[i] = raw_connect(p.path);
		CHECK(fds[i] >= 0);
		vsock_device_poll(p.dev, 0);
	}
	for (int i = 0; i < 5; i++)
		vsock_device_poll(p.dev, 1);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), VSOCK_MAX_CONNECTIONS);
	for (int i = 0; i < ATTEMPTS; i++)
		if (fds[i] >= 0 && recv(fds[i], &byte, 1, MSG_DONTWAIT) == 0)
			closed++;
	CHECK_INT_EQ(closed, ATTEMPTS - VSOCK_MAX_CONNECTIONS);
	for (int i = 0; i < ATTEMPTS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	for (int i = 0; i < 5; i++)
		vsock_device_poll(p.dev, 1);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 0);
	peer_stop(&p);
}

#define BACKLOG_CONNS 24u
#define BACKLOG_PER_CONN (1u << 20)

struct backlog_host {
	int fd;
	uint32_t sent;
};

static void backlog_hosts_send(struct backlog_host *hosts, const uint8_t *data)
{
	for (unsigned int i = 0; i < BACKLOG_CONNS; i++) {
		while (hosts[i].fd >= 0 && hosts[i].sent < BACKLOG_PER_CONN) {
			ssize_t n = send(hosts[i].fd, data, BACKLOG_PER_CONN - hosts[i].sent,
					 MSG_DONTWAIT | MSG_NOSIGNAL);

			if (n <= 0)
				break;
			hosts[i].sent += (uint32_t)n;
		}
	}
}

/* Reads "OK <n>\n" from a raw host socket while the guest side keeps running. */
static bool backlog_handshake(struct peer *p, int fd)
{
	static const char request[] = "CONNECT 1234\n";
	char c = 0;

	if (send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL) != sizeof(request) - 1)
		return false;
	for (int i = 0; i < 1000 && c != '\n'; i++) {
		if (recv(fd, &c, 1, MSG_DONTWAIT) == 1)
			continue;
		peer_step(p);
	}
	return c == '\n';
}

static void test_host_backlog_is_bounded(void)
{
	struct peer *p = calloc(1, sizeof(*p));
	struct backlog_host hosts[BACKLOG_CONNS];
	uint8_t *data = calloc(1, BACKLOG_PER_CONN);
	struct vsock_device *dev;

	CHECK_INT_EQ(peer_start(p, VSOCK_WORKER_CALLER), 0);
	dev = p->dev;
	p->accept_all = true;
	p->buf_alloc = BACKLOG_PER_CONN;
	for (unsigned int i = 0; i < BACKLOG_CONNS; i++) {
		hosts[i].fd = raw_connect(p->path);
		hosts[i].sent = 0;
		CHECK(hosts[i].fd >= 0 && backlog_handshake(p, hosts[i].fd));
	}
	/* The guest stops giving RX buffers back: everything the hosts send piles up. */
	p->hold_rx = true;
	for (int i = 0; i < 400; i++) {
		backlog_hosts_send(hosts, data);
		peer_step(p);
	}
	CHECK_INT_EQ(dev->backlog_bytes, VSOCK_HOST_BACKLOG_LIMIT);
	for (unsigned int i = 0; i < VSOCK_MAX_CONNECTIONS; i++)
		CHECK(dev->conns[i].to_guest.len <= VSOCK_CONN_TO_GUEST_BUF);
	CHECK(p->all_rx < (uint64_t)BACKLOG_CONNS * BACKLOG_PER_CONN);

	/* Buffers come back: the hosts' writes resume and every byte arrives. */
	p->hold_rx = false;
	for (unsigned int i = 0; i < p->held_count && i < RX_CHAINS; i++)
		peer_post_rx(p, p->held[i]);
	fake_guest_notify(&p->guest, VSOCK_QUEUE_RX);
	for (int i = 0; i < 20000 && p->all_rx < (uint64_t)BACKLOG_CONNS * BACKLOG_PER_CONN; i++) {
		backlog_hosts_send(hosts, data);
		peer_step(p);
	}
	CHECK_INT_EQ(p->all_rx, (uint64_t)BACKLOG_CONNS * BACKLOG_PER_CONN);
	CHECK_INT_EQ(dev->backlog_bytes, 0);
	for (unsigned int i = 0; i < BACKLOG_CONNS; i++)
		if (hosts[i].fd >= 0)
			close(hosts[i].fd);
	peer_stop(p);
	free(p);
	free(data);
}

/* The guest closes while host bytes it never read are still queued: the host sees EOF. */
static void test_guest_close_gives_host_clean_eof(void)
{
	struct peer p;
	char buf[128] = { 0 };
	ssize_t n;
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	p.buf_alloc = 1; /* one byte of credit at a time: most of what the host sends stays queued */
	fd = connect_with_guest(&p, GUEST_LISTEN_PORT, CONNECT_TIMEOUT_MS);
	CHECK(fd >= 0);
	CHECK_INT_EQ(send(fd, buf, sizeof(buf), MSG_NOSIGNAL), sizeof(buf));
	for (int i = 0; i < 10; i++)
		peer_step(&p);
	CHECK(p.conn.total_rx >= 1 && p.conn.total_rx < sizeof(buf));
	CHECK(!p.conn.credit_violation);
	CHECK(peer_send(&p, GUEST_LISTEN_PORT, p.conn.host_port, VSOCK_OP_SHUTDOWN,
			VSOCK_SHUTDOWN_BOTH, NULL, 0));
	CHECK(peer_run(&p, conn_rst, NULL, 2000));
	n = recv(fd, buf, sizeof(buf), 0);
	CHECK_INT_EQ(n, 0);
	if (fd >= 0)
		close(fd);
	peer_stop(&p);
}

static bool host_shut_seen(struct peer *p, void *arg)
{
	(void)arg;
	return p->conn.host_shut;
}

/*
 * The host closes a connection whose guest never answers the SHUTDOWN that follows (its
 * socket left open): once the close timeout passes, the device resets it and frees the slot,
 * so silent guests cannot hold every slot for good. Before that, the slot is kept.
 */
static void test_host_closed_connection_times_out(void)
{
	struct peer p;
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	fd = connect_with_guest(&p, GUEST_LISTEN_PORT, CONNECT_TIMEOUT_MS);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK(peer_run(&p, host_shut_seen, NULL, RUN_TIMEOUT_MS));
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 1);
	vsock_conn_housekeeping(p.dev, now_ms() + VSOCK_CLOSE_TIMEOUT_MS / 2);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 1);
	vsock_conn_housekeeping(p.dev, now_ms() + VSOCK_CLOSE_TIMEOUT_MS + 1);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 0);
	CHECK(peer_run(&p, conn_rst, NULL, RUN_TIMEOUT_MS));
	peer_stop(&p);
}

/* A guest that stopped for good: the host's open connection reads EOF at once. */
static void test_guest_stopped_ends_host_connections(void)
{
	struct peer p;
	char buf[16];
	ssize_t n;
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	fd = connect_with_guest(&p, GUEST_LISTEN_PORT, CONNECT_TIMEOUT_MS);
	CHECK(fd >= 0);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 1);
	vsock_device_guest_stopped(p.dev);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 0);
	if (fd >= 0) {
		n = recv(fd, buf, sizeof(buf), 0);
		CHECK_INT_EQ(n, 0);
		close(fd);
	}
	peer_stop(&p);
}

static void test_transport_reset_event(void)
{
	struct peer p;
	uint32_t id = 0, len = 0;
	uint32_t *event;
	bool got = false;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	event = fake_guest_host(&p.guest, EVENT_BUF);
	*event = 0xdeadbeef;
	fake_guest_set_desc(&p.guest, VSOCK_QUEUE_EVENT, 0, EVENT_BUF, 4, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&p.guest, VSOCK_QUEUE_EVENT, 0);
	fake_guest_notify(&p.guest, VSOCK_QUEUE_EVENT);
	vsock_device_poll(p.dev, 0);
	CHECK(!fake_guest_pop_used(&p.guest, VSOCK_QUEUE_EVENT, &id, &len));
	CHECK_INT_EQ(vsock_device_reset_transport(p.dev), 0);
	for (int i = 0; i < 10 && !got; i++) {
		vsock_device_poll(p.dev, 10);
		got = fake_guest_pop_used(&p.guest, VSOCK_QUEUE_EVENT, &id, &len);
	}
	CHECK(got);
	CHECK_INT_EQ(id, 0);
	CHECK_INT_EQ(len, 4);
	CHECK_INT_EQ(*event, VSOCK_EVENT_TRANSPORT_RESET);
	peer_stop(&p);
}

/* Gives the guest two event buffers and delivers a transport reset into the first. */
static void peer_take_reset(struct peer *p)
{
	uint32_t id = 0, len = 0;
	bool got = false;

	for (uint16_t i = 0; i < 2; i++)
		fake_guest_set_desc(&p->guest, VSOCK_QUEUE_EVENT, i, EVENT_BUF + 8u * i, 4,
				    VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&p->guest, VSOCK_QUEUE_EVENT, 0);
	fake_guest_publish(&p->guest, VSOCK_QUEUE_EVENT, 1);
	fake_guest_notify(&p->guest, VSOCK_QUEUE_EVENT);
	CHECK_INT_EQ(vsock_device_reset_transport(p->dev), 0);
	for (int i = 0; i < 10 && !got; i++) {
		vsock_device_poll(p->dev, 10);
		got = fake_guest_pop_used(&p->guest, VSOCK_QUEUE_EVENT, &id, &len);
	}
	CHECK(got);
	CHECK_INT_EQ(id, 0);
}

/*
 * A host connection made while the guest has not handled a transport reset yet waits: its
 * REQUEST goes out once the guest gives the event buffer back (its reset is done), so the
 * reset cannot end the new connection. (The hold is bounded by VSOCK_RESET_ACK_MAX_MS; the
 * check below only counts while that bound has not passed.)
 */
static void test_connect_waits_for_reset_handled(void)
{
	struct host_client hc = { .timeout_ms = CONNECT_TIMEOUT_MS, .keep_open = true };
	struct peer p;
	pthread_t client;
	uint64_t started;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	peer_take_reset(&p);
	hc.path = p.path;
	hc.port = GUEST_LISTEN_PORT;
	started = now_ms();
	pthread_create(&client, NULL, host_client_main, &hc);
	for (int i = 0; i < 20; i++) {
		peer_step(&p);
		if (now_ms() - started < VSOCK_RESET_ACK_MAX_MS)
			CHECK_INT_EQ(p.op_counts[VSOCK_OP_REQUEST], 0);
	}
	/* the guest handled the event and gives its buffer back */
	fake_guest_publish(&p.guest, VSOCK_QUEUE_EVENT, 0);
	fake_guest_notify(&p.guest, VSOCK_QUEUE_EVENT);
	CHECK(peer_run(&p, host_finished, &hc, RUN_TIMEOUT_MS));
	pthread_join(client, NULL);
	CHECK(hc.fd >= 0);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_REQUEST], 1);
	CHECK_INT_EQ(vsock_device_connection_count(p.dev), 1);
	/* not a host port the connections from before the reset may have used */
	CHECK(p.conn.host_port != VSOCK_FIRST_LOCAL_PORT);
	if (hc.fd >= 0)
		close(hc.fd);
	peer_stop(&p);
}

/* A guest that never gives the event buffer back still gets the connection, late. */
static void test_connect_after_unhandled_reset(void)
{
	struct peer p;
	int fd;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	peer_take_reset(&p);
	fd = connect_with_guest(&p, GUEST_LISTEN_PORT, CONNECT_TIMEOUT_MS);
	CHECK(fd >= 0);
	CHECK_INT_EQ(p.op_counts[VSOCK_OP_REQUEST], 1);
	if (fd >= 0)
		close(fd);
	peer_stop(&p);
}

static void test_hostile_tx_ring_needs_reset_then_recovers(void)
{
	struct peer p;
	struct virtio_mmio *t;
	unsigned int want = 1;
	struct vsock_hdr hdr = {
		.src_cid = GUEST_CID, .dst_cid = VSOCK_HOST_CID, .src_port = 6000, .dst_port = 81,
		.type = VSOCK_TYPE_STREAM, .op = VSOCK_OP_REQUEST,
	};

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	t = vsock_device_transport(p.dev);
	fake_guest_set_desc(&p.guest, VSOCK_QUEUE_TX, 0, TX_BUF_BASE, 16, VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&p.guest, VSOCK_QUEUE_TX, 1, TX_BUF_BASE, 16, VIRTQ_DESC_F_NEXT, 0);
	fake_guest_publish(&p.guest, VSOCK_QUEUE_TX, 0);
	fake_guest_notify(&p.guest, VSOCK_QUEUE_TX);
	vsock_device_poll(p.dev, 10);
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	CHECK(fake_guest_ack_irq(&p.guest) & VIRTIO_MMIO_INT_CONFIG_CHANGE);

	/* The driver resets and starts over; the device works again. */
	CHECK(fake_guest_setup(&p.guest, t, VSOCK_QUEUE_COUNT, ~0ull) & VIRTIO_STATUS_DRIVER_OK);
	CHECK(!(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET));
	memset(p.tx_busy, 0, sizeof(p.tx_busy));
	for (uint16_t i = 0; i < RX_CHAINS; i++)
		peer_post_rx(&p, i);
	fake_guest_notify(&p.guest, VSOCK_QUEUE_RX);
	CHECK(peer_send_raw(&p, &hdr, NULL, 0));
	CHECK(peer_run(&p, rst_count_reaches, &want, 2000));
	CHECK_INT_EQ(p.last_hdr.dst_port, 6000);
	peer_stop(&p);
}

static void test_create_rejects_bad_config(void)
{
	struct fake_guest guest;
	char err[256] = "";
	struct vsock_device_config cfg = { .guest_cid = 2, .uds_path = "/tmp/x.sock" };
	char path[] = "/tmp/voidbox-test-vsock-XXXXXX";
	int fd;

	CHECK_INT_EQ(fake_guest_init(&guest), 0);
	cfg.mem = &guest.mem;
	CHECK(vsock_device_create(&cfg, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "CID") != NULL);
	cfg.guest_cid = GUEST_CID;
	cfg.uds_path = "/nonexistent-dir/vm.sock";
	CHECK(vsock_device_create(&cfg, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "/nonexistent-dir/vm.sock") != NULL);
	/* A regular file at the path is never deleted to make room for the socket. */
	fd = mkstemp(path);
	cfg.uds_path = path;
	CHECK(vsock_device_create(&cfg, err, sizeof(err)) == NULL);
	CHECK(access(path, F_OK) == 0);
	close(fd);
	unlink(path);
	fake_guest_free(&guest);
}

static void test_socket_path_in_use_or_stale(void)
{
	struct peer p;
	struct fake_guest guest;
	struct vsock_device_config cfg = { .guest_cid = GUEST_CID };
	struct vsock_device *second;
	char err[256] = "";
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int stale;

	CHECK_INT_EQ(peer_start(&p, VSOCK_WORKER_CALLER), 0);
	CHECK_INT_EQ(fake_guest_init(&guest), 0);
	cfg.mem = &guest.mem;
	cfg.uds_path = p.path;
	cfg.worker_mode = VSOCK_WORKER_CALLER;
	/* A running VM's socket is never taken over. */
	CHECK(vsock_device_create(&cfg, err, sizeof(err)) == NULL);
	CHECK(strstr(err, p.path) != NULL);
	peer_stop(&p);

	/* A socket file nobody listens on (a VM that died) is replaced. */
	stale = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", p.path);
	CHECK_INT_EQ(bind(stale, (struct sockaddr *)&addr, sizeof(addr)), 0);
	close(stale);
	second = vsock_device_create(&cfg, err, sizeof(err));
	CHECK(second != NULL);
	vsock_device_destroy(second);
	CHECK(access(p.path, F_OK) != 0);
	fake_guest_free(&guest);
}

int main(void)
{
	srand((unsigned int)getpid());
	RUN_TEST(test_create_rejects_bad_config);
	RUN_TEST(test_socket_path_in_use_or_stale);
	RUN_TEST(test_connect_without_vm);
	RUN_TEST(test_connect_refused_by_guest);
	RUN_TEST(test_connect_timeout_then_host_gives_up);
	RUN_TEST(test_guest_packets_that_get_rst_or_dropped);
	RUN_TEST(test_kick_fd_wakes_worker);
	RUN_TEST(test_echo_worker_thread);
	RUN_TEST(test_echo_caller_loop_indirect);
	RUN_TEST(test_guest_to_host_stream_needs_credit_updates);
	RUN_TEST(test_guest_half_close);
	RUN_TEST(test_guest_overrunning_credit_is_reset);
	RUN_TEST(test_connection_limit);
	RUN_TEST(test_host_backlog_is_bounded);
	RUN_TEST(test_guest_close_gives_host_clean_eof);
	RUN_TEST(test_host_closed_connection_times_out);
	RUN_TEST(test_transport_reset_event);
	RUN_TEST(test_connect_waits_for_reset_handled);
	RUN_TEST(test_connect_after_unhandled_reset);
	RUN_TEST(test_guest_stopped_ends_host_connections);
	RUN_TEST(test_hostile_tx_ring_needs_reset_then_recovers);
	return harness_finish();
}
