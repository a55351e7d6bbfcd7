/*
 * Unit tests for the split-virtqueue walker and the virtio-mmio register file. Chains are
 * written by hand into fake guest RAM, one hostile shape per check, because each shape is a
 * separate way a guest could try to crash or hang the VMM.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "devices/virtio_mmio.h"
#include "devices/virtqueue.h"
#include "fake_guest.h"
#include "harness.h"
#include "vmm/bus.h"

#define TEST_QUEUE 0u
#define TEST_QUEUE_SIZE 8u
#define TEST_BUF_A 0x100000u
#define TEST_BUF_B 0x101000u
#define TEST_INDIRECT_TABLE 0x102000u
#define TEST_MMIO_BASE 0xd0800000ull
/* A queue size the transport accepts as a register value but no ring can have. */
#define TEST_BAD_QUEUE_SIZE 3u
#define TEST_FAULT_ROUNDS 200
#define TEST_FAULT_WARNINGS_MAX 4

static struct fake_guest guest;
static struct virtqueue vq;
static struct virtqueue_chain chain;

static void vq_setup_features(uint16_t size, unsigned int ring_features)
{
	struct fake_queue *q = &guest.queues[TEST_QUEUE];

	memset(guest.ram, 0, 0x200000);
	memset(q, 0, sizeof(*q));
	q->size = size;
	q->desc = FAKE_GUEST_RING_BASE;
	q->avail = q->desc + FAKE_GUEST_AVAIL_OFFSET;
	q->used = q->desc + FAKE_GUEST_USED_OFFSET;
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, size, q->desc, q->avail, q->used,
					 ring_features), 0);
}

static void vq_setup(uint16_t size, bool indirect)
{
	struct fake_queue *q = &guest.queues[TEST_QUEUE];

	memset(guest.ram, 0, 0x200000);
	memset(q, 0, sizeof(*q));
	q->size = size;
	q->desc = FAKE_GUEST_RING_BASE;
	q->avail = q->desc + FAKE_GUEST_AVAIL_OFFSET;
	q->used = q->desc + FAKE_GUEST_USED_OFFSET;
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, size, q->desc, q->avail, q->used,
					 indirect ? VIRTQUEUE_INDIRECT : 0), 0);
}

static void test_configure_rejects_bad_layouts(void)
{
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 3, 0x1000, 0x2000, 0x3000, 0),
		     -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 2 * VIRTQUEUE_MAX_SIZE, 0x1000, 0x2000,
					 0x3000, 0),
		     -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 8, 0x1008, 0x2000, 0x3000, 0),
		     -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 8, 0x1000, 0x2001, 0x3000, 0),
		     -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 8, 0x1000, 0x2000, 0x3002, 0),
		     -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 8, FAKE_GUEST_RAM_SIZE - 16, 0x2000,
					 0x3000, 0), -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 8, 0x1000, 0x2000,
					 0xfffffffffffff000ull, 0), -EINVAL);
	CHECK_INT_EQ(virtqueue_configure(&vq, &guest.mem, 0, 0x1000, 0x2000, 0x3000, 0),
		     -EINVAL);
	CHECK(!vq.configured);
}

static void test_pop_push_roundtrip(void)
{
	uint8_t out[32], in[12] = "hello world";
	uint32_t id, len;

	vq_setup(TEST_QUEUE_SIZE, false);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 0);
	CHECK(!virtqueue_has_available(&vq));
	memcpy(fake_guest_host(&guest, TEST_BUF_A), in, sizeof(in));
	fake_guest_set_desc(&guest, TEST_QUEUE, 2, TEST_BUF_A, 5, VIRTQ_DESC_F_NEXT, 5);
	fake_guest_set_desc(&guest, TEST_QUEUE, 5, TEST_BUF_A + 5, 7, VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&guest, TEST_QUEUE, 1, TEST_BUF_B, 4,
			    VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 7);
	fake_guest_set_desc(&guest, TEST_QUEUE, 7, TEST_BUF_B + 100, 20, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&guest, TEST_QUEUE, 2);
	CHECK(virtqueue_has_available(&vq));
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(chain.head, 2);
	CHECK_INT_EQ(chain.buffer_count, 4);
	CHECK_INT_EQ(chain.readable_len, 12);
	CHECK_INT_EQ(chain.writable_len, 24);
	CHECK_INT_EQ(virtqueue_chain_read(&chain, 3, out, sizeof(out)), 9);
	CHECK(memcmp(out, "lo world", 9) == 0);
	CHECK_INT_EQ(virtqueue_chain_write(&chain, 2, "abcdefgh", 8), 8);
	CHECK(memcmp(fake_guest_host(&guest, TEST_BUF_B + 2), "ab", 2) == 0);
	CHECK(memcmp(fake_guest_host(&guest, TEST_BUF_B + 100), "cdefgh", 6) == 0);
	CHECK_INT_EQ(virtqueue_chain_write(&chain, 20, "0123456789", 10), 4);
	CHECK_INT_EQ(virtqueue_push(&vq, chain.head, 8), 0);
	CHECK(fake_guest_pop_used(&guest, TEST_QUEUE, &id, &len));
	CHECK_INT_EQ(id, 2);
	CHECK_INT_EQ(len, 8);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 0);
	CHECK_INT_EQ(virtqueue_push(&vq, TEST_QUEUE_SIZE, 0), -EINVAL);
}

/* Publishes a chain headed at 0 and expects the walker to refuse it and stay broken. */
static void expect_broken(const char *what)
{
	int rc;

	fake_guest_publish(&guest, TEST_QUEUE, 0);
	rc = virtqueue_pop(&vq, &chain);
	if (rc != -EIO)
		fprintf(stderr, "  hostile chain accepted: %s (rc %d)\n", what, rc);
	CHECK_INT_EQ(rc, -EIO);
	CHECK(vq.broken);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), -EIO);
	CHECK(!virtqueue_has_available(&vq));
}

static void test_hostile_chains(void)
{
	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_BUF_A, 8, VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&guest, TEST_QUEUE, 1, TEST_BUF_A, 8, VIRTQ_DESC_F_NEXT, 0);
	expect_broken("two-descriptor loop");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_BUF_A, 8, VIRTQ_DESC_F_NEXT, 0);
	expect_broken("self loop");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_BUF_A, 8, VIRTQ_DESC_F_NEXT, 300);
	expect_broken("next out of range");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, FAKE_GUEST_RAM_SIZE - 4, 8, 0, 0);
	expect_broken("buffer crossing the end of RAM");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_BUF_A, 0xffffffffu, 0, 0);
	expect_broken("huge length");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, 0xfffffffffffffff0ull, 0x20, 0, 0);
	expect_broken("address wrapping around");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_BUF_A, 8,
			    VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&guest, TEST_QUEUE, 1, TEST_BUF_B, 8, 0, 0);
	expect_broken("readable after writable");

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE, 32, VIRTQ_DESC_F_INDIRECT, 0);
	expect_broken("indirect without the feature");
}

static void test_zero_length_and_full_length_chains(void)
{
	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, 0, 0, VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&guest, TEST_QUEUE, 1, FAKE_GUEST_RAM_SIZE + 0x1000, 0, 0, 0);
	fake_guest_publish(&guest, TEST_QUEUE, 0);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(chain.buffer_count, 0);
	CHECK_INT_EQ(chain.readable_len, 0);

	/* A chain through every descriptor is legal; one more link would be a loop. */
	vq_setup(TEST_QUEUE_SIZE, false);
	for (uint16_t i = 0; i < TEST_QUEUE_SIZE; i++)
		fake_guest_set_desc(&guest, TEST_QUEUE, i, TEST_BUF_A + i, 1,
				    (unsigned int)i + 1 < TEST_QUEUE_SIZE ? VIRTQ_DESC_F_NEXT : 0, i + 1);
	fake_guest_publish(&guest, TEST_QUEUE, 0);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(chain.buffer_count, TEST_QUEUE_SIZE);
}

static void test_avail_ring_lies(void)
{
	uint16_t *avail_idx;

	vq_setup(TEST_QUEUE_SIZE, false);
	avail_idx = fake_guest_host(&guest, guest.queues[TEST_QUEUE].avail + 2);
	*avail_idx = TEST_QUEUE_SIZE + 1;
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), -EIO);

	vq_setup(TEST_QUEUE_SIZE, false);
	fake_guest_publish(&guest, TEST_QUEUE, 999);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), -EIO);
}

static void write_indirect(unsigned int slot, uint64_t addr, uint32_t len, uint16_t flags,
			   uint16_t next)
{
	uint8_t *entry = fake_guest_host(&guest, TEST_INDIRECT_TABLE + slot * 16u);

	memcpy(entry, &addr, 8);
	memcpy(entry + 8, &len, 4);
	memcpy(entry + 12, &flags, 2);
	memcpy(entry + 14, &next, 2);
}

static void test_indirect_descriptors(void)
{
	vq_setup(TEST_QUEUE_SIZE, true);
	write_indirect(0, TEST_BUF_A, 44, VIRTQ_DESC_F_NEXT, 2);
	write_indirect(2, TEST_BUF_A + 64, 100, VIRTQ_DESC_F_NEXT, 1);
	write_indirect(1, TEST_BUF_B, 200, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE, 48, VIRTQ_DESC_F_INDIRECT, 0);
	fake_guest_publish(&guest, TEST_QUEUE, 0);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(chain.buffer_count, 3);
	CHECK_INT_EQ(chain.readable_len, 144);
	CHECK_INT_EQ(chain.writable_len, 200);

	vq_setup(TEST_QUEUE_SIZE, true);
	write_indirect(0, TEST_BUF_A, 8, VIRTQ_DESC_F_NEXT, 1);
	write_indirect(1, TEST_BUF_A, 8, VIRTQ_DESC_F_NEXT, 0);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE, 32, VIRTQ_DESC_F_INDIRECT, 0);
	expect_broken("loop inside an indirect table");

	vq_setup(TEST_QUEUE_SIZE, true);
	write_indirect(0, TEST_INDIRECT_TABLE, 16, VIRTQ_DESC_F_INDIRECT, 0);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE, 16, VIRTQ_DESC_F_INDIRECT, 0);
	expect_broken("nested indirect table");

	vq_setup(TEST_QUEUE_SIZE, true);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE, 20, VIRTQ_DESC_F_INDIRECT, 0);
	expect_broken("indirect table length not a multiple of 16");

	vq_setup(TEST_QUEUE_SIZE, true);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE, 16,
			    VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_NEXT, 1);
	expect_broken("indirect with NEXT");

	vq_setup(TEST_QUEUE_SIZE, true);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_INDIRECT_TABLE,
			    (TEST_QUEUE_SIZE + 1) * 16, VIRTQ_DESC_F_INDIRECT, 0);
	expect_broken("indirect table longer than the queue");
}

static uint16_t *ring_u16(uint64_t gpa)
{
	return fake_guest_host(&guest, gpa);
}

static void test_notification_suppression(void)
{
	struct fake_queue *q = &guest.queues[TEST_QUEUE];
	uint16_t *avail_flags, *used_event, *avail_event;

	/* Without EVENT_IDX the avail ring's NO_INTERRUPT flag decides. */
	vq_setup(TEST_QUEUE_SIZE, false);
	avail_flags = ring_u16(q->avail);
	fake_guest_set_desc(&guest, TEST_QUEUE, 0, TEST_BUF_A, 8, 0, 0);
	fake_guest_publish(&guest, TEST_QUEUE, 0);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(virtqueue_push(&vq, 0, 0), 0);
	*avail_flags = VIRTQ_AVAIL_F_NO_INTERRUPT;
	CHECK(!virtqueue_should_signal(&vq));
	*avail_flags = 0;
	CHECK(virtqueue_should_signal(&vq));

	/* With EVENT_IDX: an empty ring asks for a notify at the next buffer ... */
	vq_setup_features(TEST_QUEUE_SIZE, VIRTQUEUE_EVENT_IDX);
	used_event = ring_u16(q->avail + 4 + 2 * TEST_QUEUE_SIZE);
	avail_event = ring_u16(q->used + 4 + 8 * TEST_QUEUE_SIZE);
	*avail_event = 0xffff;
	for (uint16_t i = 0; i < 3; i++) {
		fake_guest_set_desc(&guest, TEST_QUEUE, i, TEST_BUF_A, 8, 0, 0);
		fake_guest_publish(&guest, TEST_QUEUE, i);
	}
	for (int i = 0; i < 3; i++)
		CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(*avail_event, 0xffff);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 0);
	CHECK_INT_EQ(*avail_event, 3);

	/* ... and interrupts follow used_event: the first decision always signals. */
	*used_event = 1;
	CHECK_INT_EQ(virtqueue_push(&vq, 0, 0), 0);
	CHECK(virtqueue_should_signal(&vq));
	CHECK_INT_EQ(virtqueue_push(&vq, 1, 0), 0);
	CHECK(virtqueue_should_signal(&vq));   /* used went 1 -> 2, past used_event 1 */
	CHECK_INT_EQ(virtqueue_push(&vq, 2, 0), 0);
	CHECK(!virtqueue_should_signal(&vq));  /* the driver has not caught up yet */
	*used_event = 3;
	fake_guest_set_desc(&guest, TEST_QUEUE, 3, TEST_BUF_A, 8, 0, 0);
	fake_guest_publish(&guest, TEST_QUEUE, 3);
	CHECK_INT_EQ(virtqueue_pop(&vq, &chain), 1);
	CHECK_INT_EQ(virtqueue_push(&vq, 3, 0), 0);
	CHECK(virtqueue_should_signal(&vq));
}

/* ---- transport ---- */

struct dummy_device {
	pthread_mutex_t lock;
	int activations;
	int resets;
	int notifies;
	unsigned int last_notify;
	int activate_rc;
	uint64_t features_seen;
	uint8_t config[8];
};

static void dummy_config_read(void *opaque, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct dummy_device *dev = opaque;

	memcpy(data, dev->config + offset, len);
}

static void dummy_notify(void *opaque, unsigned int queue)
{
	struct dummy_device *dev = opaque;

	dev->notifies++;
	dev->last_notify = queue;
}

static int dummy_activate(void *opaque, struct virtqueue *queues, unsigned int count,
			  uint64_t features)
{
	struct dummy_device *dev = opaque;

	dev->activations++;
	dev->features_seen = features;
	return dev->activate_rc;
}

static void dummy_reset(void *opaque)
{
	struct dummy_device *dev = opaque;

	dev->resets++;
}

static const struct virtio_device_ops dummy_ops = {
	.device_id = VIRTIO_ID_RNG,
	.features = (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_INDIRECT_DESC),
	.queue_count = 2,
	.queue_num_max = 64,
	.config_size = 8,
	.config_read = dummy_config_read,
	.queue_notify = dummy_notify,
	.activate = dummy_activate,
	.reset = dummy_reset,
};

static struct virtio_mmio *make_transport(struct dummy_device *dev)
{
	struct virtio_mmio_config cfg = {
		.ops = &dummy_ops, .opaque = dev, .mem = &guest.mem, .irq = fake_guest_irq(&guest),
		.device_lock = &dev->lock,
	};

	memset(dev, 0, sizeof(*dev));
	pthread_mutex_init(&dev->lock, NULL);
	memcpy(dev->config, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	return virtio_mmio_create(&cfg);
}

static void test_mmio_identity_and_config(void)
{
	struct dummy_device dev;
	struct virtio_mmio *t = make_transport(&dev);
	uint8_t bytes[8];
	uint16_t half = 0;

	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_MAGIC_VALUE), 0x74726976);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_VERSION), 2);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_ID), VIRTIO_ID_RNG);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_VENDOR_ID), VIRTIO_MMIO_VENDOR);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES), 1u << 28);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES), 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 7);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES), 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_SEL, 1);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_QUEUE_NUM_MAX), 64);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_SEL, 2);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_QUEUE_NUM_MAX), 0);

	virtio_mmio_access(t, VIRTIO_MMIO_CONFIG, bytes, 8, false);
	CHECK(memcmp(bytes, dev.config, 8) == 0);
	virtio_mmio_access(t, VIRTIO_MMIO_CONFIG + 6, (uint8_t *)&half, 2, false);
	CHECK_INT_EQ(half, 0x0807);
	memset(bytes, 0xaa, sizeof(bytes));
	virtio_mmio_access(t, VIRTIO_MMIO_CONFIG + 6, bytes, 4, false);
	CHECK_INT_EQ(bytes[0], 0);
	/* Narrow or misaligned accesses to 32-bit registers read zero and write nothing. */
	virtio_mmio_access(t, VIRTIO_MMIO_MAGIC_VALUE, (uint8_t *)&half, 2, false);
	CHECK_INT_EQ(half, 0);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_MAGIC_VALUE + 1), 0);
	virtio_mmio_destroy(t);
	pthread_mutex_destroy(&dev.lock);
}

static void test_mmio_feature_negotiation_and_activation(void)
{
	struct dummy_device dev;
	struct virtio_mmio *t = make_transport(&dev);
	uint32_t status;

	/* A driver that asks for a feature we never offered does not get FEATURES_OK. */
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES, 1u << 29);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES, 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE |
			    VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
	CHECK(!(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK));

	/* A legacy driver (no VERSION_1) is refused the same way. */
	guest.transport = t;
	status = fake_guest_setup(&guest, t, 2, 1ull << VIRTIO_RING_F_INDIRECT_DESC);
	CHECK(!(status & VIRTIO_STATUS_FEATURES_OK));
	CHECK_INT_EQ(dev.activations, 0);

	status = fake_guest_setup(&guest, t, 2, ~0ull);
	CHECK(status & VIRTIO_STATUS_DRIVER_OK);
	CHECK(!(status & VIRTIO_STATUS_DEVICE_NEEDS_RESET));
	CHECK_INT_EQ(dev.activations, 1);
	CHECK_INT_EQ(dev.features_seen, dummy_ops.features);

	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	CHECK_INT_EQ(dev.notifies, 1);
	CHECK_INT_EQ(dev.last_notify, 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_NOTIFY, 9);
	CHECK_INT_EQ(dev.notifies, 1);

	/* Queue registers are frozen while the device runs. */
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_SEL, 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_READY, 0);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_QUEUE_READY), 1);

	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, 0);
	CHECK_INT_EQ(dev.resets >= 1, 1);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS), 0);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_QUEUE_READY), 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	CHECK_INT_EQ(dev.notifies, 1);

	/* A device that cannot start reports NEEDS_RESET. */
	dev.activate_rc = -EINVAL;
	status = fake_guest_setup(&guest, t, 2, ~0ull);
	CHECK(status & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	virtio_mmio_destroy(t);
	pthread_mutex_destroy(&dev.lock);
}

static void test_mmio_interrupt_level(void)
{
	struct dummy_device dev;
	struct virtio_mmio *t = make_transport(&dev);

	atomic_store(&guest.irq_level, 0);
	guest.transport = t;
	fake_guest_setup(&guest, t, 2, ~0ull);
	virtio_mmio_signal_used(t);
	CHECK_INT_EQ(atomic_load(&guest.irq_level), 1);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_INTERRUPT_STATUS), 1);
	virtio_mmio_signal_config(t);
	virtio_mmio_write32(t, VIRTIO_MMIO_INTERRUPT_ACK, 1);
	CHECK_INT_EQ(atomic_load(&guest.irq_level), 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_INTERRUPT_ACK, 2);
	CHECK_INT_EQ(atomic_load(&guest.irq_level), 0);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_INTERRUPT_STATUS), 0);

	virtio_mmio_mark_broken(t);
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_INTERRUPT_STATUS),
		     VIRTIO_MMIO_INT_CONFIG_CHANGE);
	CHECK_INT_EQ(atomic_load(&guest.irq_level), 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, 0);
	CHECK_INT_EQ(atomic_load(&guest.irq_level), 0);
	CHECK(!(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET));
	virtio_mmio_destroy(t);
	pthread_mutex_destroy(&dev.lock);
}

/* The driver's side of a start with queue 0 TEST_BAD_QUEUE_SIZE entries long. */
static void start_with_bad_queue(struct virtio_mmio *t)
{
	uint32_t status = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER;

	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES, 1u << (VIRTIO_F_VERSION_1 - 32));
	status |= VIRTIO_STATUS_FEATURES_OK;
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_SEL, 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_NUM, TEST_BAD_QUEUE_SIZE);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_READY, 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status | VIRTIO_STATUS_DRIVER_OK);
}

/* A driver that fails its start and resets, in a loop, gets a few warnings, not one a round. */
static void test_mmio_fault_loop_logs_a_few_warnings(void)
{
	struct dummy_device dev;
	struct virtio_mmio *t = make_transport(&dev);
	enum log_level level = log_get_level();
	char *log_text = NULL;
	size_t log_len = 0, lines = 0;
	FILE *log_stream = open_memstream(&log_text, &log_len);
	unsigned int broken = 0;

	CHECK(log_stream != NULL);
	log_set_stream(log_stream);
	log_set_level(LOG_LEVEL_WARN);
	for (int round = 0; round < TEST_FAULT_ROUNDS; round++) {
		start_with_bad_queue(t);
		broken += !!(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) &
			     VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	}
	log_set_stream(stderr);
	log_set_level(level);
	fclose(log_stream);
	for (size_t i = 0; i < log_len; i++)
		lines += log_text[i] == '\n';
	CHECK_INT_EQ(broken, TEST_FAULT_ROUNDS);
	CHECK_INT_EQ(dev.activations, 0);
	CHECK(lines >= 1 && lines <= TEST_FAULT_WARNINGS_MAX);
	free(log_text);
	virtio_mmio_destroy(t);
	pthread_mutex_destroy(&dev.lock);
}

static void test_mmio_state_roundtrip_and_bus(void)
{
	struct dummy_device dev_a, dev_b;
	struct virtio_mmio *a = make_transport(&dev_a);
	struct virtio_mmio *b;
	struct virtio_mmio_state state, again;
	struct bus bus = { 0 };
	uint8_t magic[4];

	guest.transport = a;
	fake_guest_setup(&guest, a, 2, ~0ull);
	virtio_mmio_signal_used(a);
	virtio_mmio_state_get(a, &state);
	CHECK(state.status & VIRTIO_STATUS_DRIVER_OK);
	CHECK_INT_EQ(state.queues[1].num, 64);
	CHECK_INT_EQ(state.interrupt_status, 1);
	state.queues[0].last_avail_idx = 7;
	state.queues[0].used_idx = 5;

	b = make_transport(&dev_b);
	CHECK_INT_EQ(virtio_mmio_state_set(b, &state), 0);
	CHECK_INT_EQ(dev_b.activations, 1);
	virtio_mmio_state_get(b, &again);
	CHECK(memcmp(&state, &again, sizeof(state)) == 0);
	/* the held variant reads the same and keeps the device lock for the device's resume */
	memset(&again, 0, sizeof(again));
	virtio_mmio_state_get_held(b, &again);
	CHECK(memcmp(&state, &again, sizeof(state)) == 0);
	CHECK_INT_EQ(pthread_mutex_trylock(&dev_b.lock), EBUSY);
	pthread_mutex_unlock(&dev_b.lock);
	CHECK_INT_EQ(pthread_mutex_trylock(&dev_b.lock), 0);
	pthread_mutex_unlock(&dev_b.lock);
	state.device_features = 0;
	CHECK_INT_EQ(virtio_mmio_state_set(b, &state), -EINVAL);

	CHECK_INT_EQ(virtio_mmio_register(b, &bus, TEST_MMIO_BASE), 0);
	CHECK(bus_dispatch(&bus, TEST_MMIO_BASE, magic, 4, false));
	CHECK(memcmp(magic, "virt", 4) == 0);
	CHECK(!bus_dispatch(&bus, TEST_MMIO_BASE + VIRTIO_MMIO_WINDOW_SIZE, magic, 4, false));
	virtio_mmio_destroy(a);
	virtio_mmio_destroy(b);
	pthread_mutex_destroy(&dev_a.lock);
	pthread_mutex_destroy(&dev_b.lock);
}

int main(void)
{
	if (fake_guest_init(&guest))
		harness_fail_setup("cannot allocate fake guest memory");
	RUN_TEST(test_configure_rejects_bad_layouts);
	RUN_TEST(test_pop_push_roundtrip);
	RUN_TEST(test_hostile_chains);
	RUN_TEST(test_zero_length_and_full_length_chains);
	RUN_TEST(test_avail_ring_lies);
	RUN_TEST(test_indirect_descriptors);
	RUN_TEST(test_notification_suppression);
	RUN_TEST(test_mmio_identity_and_config);
	RUN_TEST(test_mmio_feature_negotiation_and_activation);
	RUN_TEST(test_mmio_interrupt_level);
	RUN_TEST(test_mmio_fault_loop_logs_a_few_warnings);
	RUN_TEST(test_mmio_state_roundtrip_and_bus);
	fake_guest_free(&guest);
	return harness_finish();
}
