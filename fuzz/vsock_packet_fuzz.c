/*
 * libFuzzer target for the vsock packet path as a hostile guest drives it: TX packets with
 * any header (lengths, ops, flags, CIDs, ports, credit fields), split or not across
 * descriptors, interleaved with host-side actions on a live connection.
 *
 * Each run resets the device through its STATUS register, re-initialises it with the fake
 * driver, opens one host connection the harness accepts as the guest (so the established-
 * stream code is reachable: the fuzzer cannot guess the host port, so a record flag rewrites
 * the ports to that connection's), then plays the input as records:
 *   u8 flags, u8 len_lo, u8 len_hi, then len packet bytes (or, with FUZZ_MMIO, register
 *   writes: the guest controls those too, including resets in the middle of a stream).
 * The device runs in caller mode, so every step is deterministic and on this thread.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "devices/vsock.h"
#include "devices/vsock_internal.h"
#include "fake_guest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_GUEST_CID 3u
#define FUZZ_GUEST_PORT 1234u
#define FUZZ_RX_CHAINS 64u
#define FUZZ_RX_BASE 0x100000u
#define FUZZ_RX_SLOT 0x1100u
#define FUZZ_RX_PAYLOAD 0x40u
#define FUZZ_RX_LEN 4096u
#define FUZZ_TX_BASE 0x400000u
#define FUZZ_TX_SLOT 0x11000u
#define FUZZ_TX_SLOTS 64u
#define FUZZ_RECORD_HEADER 3u
#define FUZZ_HOST_IO 4096u
#define FUZZ_MAX_RECORDS 64u

enum fuzz_record_flag {
	FUZZ_TO_LIVE_CONN = 1u << 0, /* rewrite cids and ports to the live connection's */
	FUZZ_SPLIT = 1u << 1,        /* header and payload in separate descriptors */
	FUZZ_HOST_WRITE = 1u << 2,   /* the host sends bytes on its socket first */
	FUZZ_HOST_READ = 1u << 3,    /* the host drains its socket after the packet */
	FUZZ_HOST_SHUT = 1u << 4,    /* the host half-closes */
	FUZZ_NO_RX = 1u << 5,        /* do not give RX buffers back this round */
	FUZZ_MMIO = 1u << 6,         /* the record is register writes, not a packet */
};

/* A FUZZ_MMIO record is a list of (le16 offset, le32 value) register writes. */
#define FUZZ_MMIO_WRITE_SIZE 6u
#define FUZZ_MMIO_OFFSET_MASK (VIRTIO_MMIO_WINDOW_SIZE - 1u)

struct fuzz_state {
	struct fake_guest guest;
	struct vsock_device *dev;
	int host_fd;
	uint32_t host_port;
	unsigned int tx_next;
	/* After hostile register writes the rings may be anyone's: stop checking the device. */
	bool registers_touched;
	char path[108];
};

static struct fuzz_state fuzz;

static void fuzz_teardown(void)
{
	vsock_device_destroy(fuzz.dev);
	fake_guest_free(&fuzz.guest);
}

static int fuzz_init_once(void)
{
	struct vsock_device_config cfg;
	char err[256];

	if (fuzz.dev)
		return 0;
	fuzz.host_fd = -1;
	log_set_level_name(getenv(LOG_LEVEL_ENV));
	if (fake_guest_init(&fuzz.guest))
		return -1;
	snprintf(fuzz.path, sizeof(fuzz.path), "/tmp/voidbox-vsock-fuzz-%d.sock", (int)getpid());
	cfg = (struct vsock_device_config){
		.guest_cid = FUZZ_GUEST_CID, .uds_path = fuzz.path, .mem = &fuzz.guest.mem,
		.irq = fake_guest_irq(&fuzz.guest), .worker_mode = VSOCK_WORKER_CALLER,
	};
	fuzz.dev = vsock_device_create(&cfg, err, sizeof(err));
	if (!fuzz.dev) {
		fprintf(stderr, "vsock fuzz: %s\n", err);
		abort();
	}
	atexit(fuzz_teardown);
	return 0;
}

static void fuzz_post_rx(uint16_t chain)
{
	uint64_t base = FUZZ_RX_BASE + (uint64_t)chain * FUZZ_RX_SLOT;

	fake_guest_set_desc(&fuzz.guest, VSOCK_QUEUE_RX, (uint16_t)(2 * chain), base,
			    VSOCK_HDR_SIZE, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT,
			    (uint16_t)(2 * chain + 1));
	fake_guest_set_desc(&fuzz.guest, VSOCK_QUEUE_RX, (uint16_t)(2 * chain + 1),
			    base + FUZZ_RX_PAYLOAD, FUZZ_RX_LEN, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&fuzz.guest, VSOCK_QUEUE_RX, (uint16_t)(2 * chain));
}

/* Reaps RX, checking every packet's length; remembers the host port of the first REQUEST. */
static void fuzz_reap_rx(bool repost)
{
	uint32_t id, len;

	while (fake_guest_pop_used(&fuzz.guest, VSOCK_QUEUE_RX, &id, &len)) {
		struct vsock_hdr hdr;

		if (fuzz.registers_touched)
			continue;
		if (id % 2 || id / 2 >= FUZZ_RX_CHAINS || len > VSOCK_HDR_SIZE + FUZZ_RX_LEN)
			abort();
		vsock_hdr_decode(fake_guest_host(&fuzz.guest, FUZZ_RX_BASE + (id / 2) * FUZZ_RX_SLOT),
				 &hdr);
		if (len >= VSOCK_HDR_SIZE && hdr.len != len - VSOCK_HDR_SIZE)
			abort();
		if (hdr.op == VSOCK_OP_REQUEST && !fuzz.host_port)
			fuzz.host_port = hdr.src_port;
		if (repost)
			fuzz_post_rx((uint16_t)(id / 2));
	}
	if (repost)
		fake_guest_notify(&fuzz.guest, VSOCK_QUEUE_RX);
}

static void fuzz_send(const uint8_t *packet, uint32_t len, bool split)
{
	unsigned int slot = fuzz.tx_next++ % FUZZ_TX_SLOTS;
	uint64_t base = FUZZ_TX_BASE + (uint64_t)slot * FUZZ_TX_SLOT;
	uint16_t head = (uint16_t)(2 * slot);
	uint32_t first = split && len > VSOCK_HDR_SIZE ? VSOCK_HDR_SIZE : len;
	uint32_t id, used_len;

	memcpy(fake_guest_host(&fuzz.guest, base), packet, len);
	fake_guest_set_desc(&fuzz.guest, VSOCK_QUEUE_TX, head, base, first,
			    first < len ? VIRTQ_DESC_F_NEXT : 0, (uint16_t)(head + 1));
	fake_guest_set_desc(&fuzz.guest, VSOCK_QUEUE_TX, (uint16_t)(head + 1), base + first,
			    len - first, 0, 0);
	fake_guest_publish(&fuzz.guest, VSOCK_QUEUE_TX, head);
	fake_guest_notify(&fuzz.guest, VSOCK_QUEUE_TX);
	vsock_device_poll(fuzz.dev, 0);
	while (fake_guest_pop_used(&fuzz.guest, VSOCK_QUEUE_TX, &id, &used_len))
		if (used_len != 0 && !fuzz.registers_touched)
			abort();
}

static void fuzz_send_hdr(const struct vsock_hdr *hdr)
{
	uint8_t raw[VSOCK_HDR_SIZE];

	vsock_hdr_encode(hdr, raw);
	fuzz_send(raw, sizeof(raw), false);
}

static void fuzz_open_connection(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	static const char request[] = "CONNECT 1234\n";
	struct vsock_hdr response = {
		.src_cid = FUZZ_GUEST_CID, .dst_cid = VSOCK_HOST_CID, .src_port = FUZZ_GUEST_PORT,
		.type = VSOCK_TYPE_STREAM, .op = VSOCK_OP_RESPONSE, .buf_alloc = 1u << 16,
	};

	fuzz.host_port = 0;
	fuzz.host_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	memcpy(addr.sun_path, fuzz.path, strlen(fuzz.path) + 1);
	if (fuzz.host_fd < 0 || connect(fuzz.host_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		abort();
	if (send(fuzz.host_fd, request, sizeof(request) - 1, MSG_NOSIGNAL) < 0)
		abort();
	for (int i = 0; i < 4 && !fuzz.host_port; i++) {
		vsock_device_poll(fuzz.dev, 0);
		fuzz_reap_rx(true);
	}
	if (!fuzz.host_port)
		abort();
	response.dst_port = fuzz.host_port;
	fuzz_send_hdr(&response);
}

static void fuzz_reset_device(void)
{
	struct virtio_mmio *t = vsock_device_transport(fuzz.dev);

	if (fuzz.host_fd >= 0)
		close(fuzz.host_fd);
	fuzz.host_fd = -1;
	fuzz.tx_next = 0;
	fuzz.registers_touched = false;
	if (!(fake_guest_setup(&fuzz.guest, t, VSOCK_QUEUE_COUNT, ~0ull) &
	      VIRTIO_STATUS_DRIVER_OK))
		abort();
	if (vsock_device_connection_count(fuzz.dev))
		abort();
	for (uint16_t i = 0; i < FUZZ_RX_CHAINS; i++)
		fuzz_post_rx(i);
	fake_guest_notify(&fuzz.guest, VSOCK_QUEUE_RX);
}

static void fuzz_host_actions(uint8_t flags)
{
	static uint8_t io[FUZZ_HOST_IO];

	if (flags & FUZZ_HOST_WRITE)
		send(fuzz.host_fd, io, sizeof(io), MSG_NOSIGNAL | MSG_DONTWAIT);
	if (flags & FUZZ_HOST_SHUT)
		shutdown(fuzz.host_fd, SHUT_WR);
}

static void fuzz_write_registers(const uint8_t *writes, uint32_t len)
{
	struct virtio_mmio *t = vsock_device_transport(fuzz.dev);

	fuzz.registers_touched = true;
	for (uint32_t at = 0; at + FUZZ_MMIO_WRITE_SIZE <= len; at += FUZZ_MMIO_WRITE_SIZE) {
		uint32_t offset = ((uint32_t)writes[at] | (uint32_t)writes[at + 1] << 8) &
				  FUZZ_MMIO_OFFSET_MASK;
		uint32_t value;

		memcpy(&value, writes + at + 2, sizeof(value));
		virtio_mmio_write32(t, offset, value);
		virtio_mmio_read32(t, offset);
	}
	vsock_device_poll(fuzz.dev, 0);
}

static void fuzz_play_record(uint8_t flags, const uint8_t *packet, uint32_t len)
{
	static uint8_t buf[VSOCK_HDR_SIZE + VSOCK_MAX_PAYLOAD];
	static uint8_t io[FUZZ_HOST_IO];
	struct vsock_hdr hdr;

	if (flags & FUZZ_MMIO) {
		fuzz_write_registers(packet, len);
		return;
	}
	memcpy(buf, packet, len);
	if ((flags & FUZZ_TO_LIVE_CONN) && len >= VSOCK_HDR_SIZE) {
		vsock_hdr_decode(buf, &hdr);
		hdr.src_cid = FUZZ_GUEST_CID;
		hdr.dst_cid = VSOCK_HOST_CID;
		hdr.src_port = FUZZ_GUEST_PORT;
		hdr.dst_port = fuzz.host_port;
		vsock_hdr_encode(&hdr, buf);
	}
	fuzz_host_actions(flags);
	vsock_device_poll(fuzz.dev, 0);
	fuzz_send(buf, len, flags & FUZZ_SPLIT);
	fuzz_reap_rx(!(flags & FUZZ_NO_RX));
	if (flags & FUZZ_HOST_READ)
		while (recv(fuzz.host_fd, io, sizeof(io), MSG_DONTWAIT) > 0)
			;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (fuzz_init_once())
		return 0;
	fuzz_reset_device();
	fuzz_open_connection();
	for (unsigned int n = 0; n < FUZZ_MAX_RECORDS && size >= FUZZ_RECORD_HEADER; n++) {
		uint8_t flags = data[0];
		uint32_t len = (uint32_t)data[1] | (uint32_t)data[2] << 8;

		data += FUZZ_RECORD_HEADER;
		size -= FUZZ_RECORD_HEADER;
		if (len > size)
			len = (uint32_t)size;
		fuzz_play_record(flags, data, len);
		data += len;
		size -= len;
	}
	vsock_device_poll(fuzz.dev, 0);
	fuzz_reap_rx(true);
	return 0;
}
