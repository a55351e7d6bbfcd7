/*
 * Fake virtio driver: see fake_guest.h. Ring stores use release ordering and used-ring loads
 * acquire ordering, as the Linux driver's barriers do, so a device running on its own thread
 * sees a consistent ring.
 */
#include "fake_guest.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_GUEST_RING_IDX_OFFSET 2u
#define FAKE_GUEST_RING_HEADER 4u
#define FAKE_GUEST_USED_ELEM 8u
#define FAKE_GUEST_HIGH_SHIFT 32
#define FAKE_GUEST_EVENT_IDX_BIT 29

static void fake_guest_set_level(void *opaque, uint32_t gsi, bool asserted)
{
	struct fake_guest *guest = opaque;

	atomic_store(&guest->irq_level, asserted);
	if (asserted)
		atomic_fetch_add(&guest->irq_raises, 1);
}

int fake_guest_init(struct fake_guest *guest)
{
	memset(guest, 0, sizeof(*guest));
	guest->ram = calloc(1, FAKE_GUEST_RAM_SIZE);
	if (!guest->ram)
		return -1;
	guest->mem.regions[0] = (struct guest_memory_region){
		.guest_phys_addr = 0, .size = FAKE_GUEST_RAM_SIZE, .host_addr = guest->ram,
	};
	guest->mem.region_count = 1;
	guest->mem.total_size = FAKE_GUEST_RAM_SIZE;
	return 0;
}

void fake_guest_free(struct fake_guest *guest)
{
	free(guest->ram);
	guest->ram = NULL;
}

struct irq_line fake_guest_irq(struct fake_guest *guest)
{
	return (struct irq_line){ .set_level = fake_guest_set_level, .opaque = guest, .gsi = 11 };
}

void *fake_guest_host(struct fake_guest *guest, uint64_t gpa)
{
	return guest->ram + gpa;
}

static void fake_guest_write_addr(struct virtio_mmio *t, uint64_t low_reg, uint64_t addr)
{
	virtio_mmio_write32(t, low_reg, (uint32_t)addr);
	virtio_mmio_write32(t, low_reg + 4, (uint32_t)(addr >> FAKE_GUEST_HIGH_SHIFT));
}

static void fake_guest_setup_queue(struct fake_guest *guest, unsigned int index)
{
	struct fake_queue *q = &guest->queues[index];
	struct virtio_mmio *t = guest->transport;
	uint32_t num_max;

	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_SEL, index);
	num_max = virtio_mmio_read32(t, VIRTIO_MMIO_QUEUE_NUM_MAX);
	memset(q, 0, sizeof(*q));
	q->size = num_max < FAKE_GUEST_QUEUE_SIZE ? (uint16_t)num_max : FAKE_GUEST_QUEUE_SIZE;
	q->desc = FAKE_GUEST_RING_BASE + (uint64_t)index * FAKE_GUEST_RING_STRIDE;
	q->avail = q->desc + FAKE_GUEST_AVAIL_OFFSET;
	q->used = q->desc + FAKE_GUEST_USED_OFFSET;
	memset(guest->ram + q->desc, 0, FAKE_GUEST_RING_STRIDE);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_NUM, q->size);
	fake_guest_write_addr(t, VIRTIO_MMIO_QUEUE_DESC_LOW, q->desc);
	fake_guest_write_addr(t, VIRTIO_MMIO_QUEUE_DRIVER_LOW, q->avail);
	fake_guest_write_addr(t, VIRTIO_MMIO_QUEUE_DEVICE_LOW, q->used);
	virtio_mmio_write32(t, VIRTIO_MMIO_QUEUE_READY, 1);
}

uint32_t fake_guest_setup(struct fake_guest *guest, struct virtio_mmio *t,
			  unsigned int queue_count, uint64_t wanted_features)
{
	uint64_t offered;
	uint32_t status = VIRTIO_STATUS_ACKNOWLEDGE;

	guest->transport = t;
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status);
	status |= VIRTIO_STATUS_DRIVER;
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	offered = virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	offered |= (uint64_t)virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES)
		   << FAKE_GUEST_HIGH_SHIFT;
	offered &= wanted_features;
	guest->event_idx = offered & (1ull << FAKE_GUEST_EVENT_IDX_BIT);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)offered);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	virtio_mmio_write32(t, VIRTIO_MMIO_DRIVER_FEATURES,
			    (uint32_t)(offered >> FAKE_GUEST_HIGH_SHIFT));
	status |= VIRTIO_STATUS_FEATURES_OK;
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status);
	if (!(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK))
		return virtio_mmio_read32(t, VIRTIO_MMIO_STATUS);
	for (unsigned int i = 0; i < queue_count && i < FAKE_GUEST_MAX_QUEUES; i++)
		fake_guest_setup_queue(guest, i);
	status |= VIRTIO_STATUS_DRIVER_OK;
	virtio_mmio_write32(t, VIRTIO_MMIO_STATUS, status);
	return virtio_mmio_read32(t, VIRTIO_MMIO_STATUS);
}

void fake_guest_set_desc(struct fake_guest *guest, unsigned int queue, uint16_t index,
			 uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	uint8_t *desc = guest->ram + guest->queues[queue].desc + (uint64_t)index * 16;
	uint64_t addr_le = htole64(addr);
	uint32_t len_le = htole32(len);
	uint16_t flags_le = htole16(flags), next_le = htole16(next);

	memcpy(desc, &addr_le, 8);
	memcpy(desc + 8, &len_le, 4);
	memcpy(desc + 12, &flags_le, 2);
	memcpy(desc + 14, &next_le, 2);
}

void fake_guest_publish(struct fake_guest *guest, unsigned int queue, uint16_t head)
{
	struct fake_queue *q = &guest->queues[queue];
	uint16_t *ring = (uint16_t *)(guest->ram + q->avail + FAKE_GUEST_RING_HEADER);
	uint16_t *idx = (uint16_t *)(guest->ram + q->avail + FAKE_GUEST_RING_IDX_OFFSET);

	ring[q->avail_idx % q->size] = htole16(head);
	q->avail_idx++;
	__atomic_store_n(idx, htole16(q->avail_idx), __ATOMIC_RELEASE);
}

static bool fake_guest_need_event(uint16_t event, uint16_t new_idx, uint16_t old_idx)
{
	return (uint16_t)(new_idx - event - 1) < (uint16_t)(new_idx - old_idx);
}

void fake_guest_notify(struct fake_guest *guest, unsigned int queue)
{
	struct fake_queue *q = &guest->queues[queue];

	if (guest->event_idx) {
		uint16_t *avail_event = (uint16_t *)(guest->ram + q->used + FAKE_GUEST_RING_HEADER +
						     (uint64_t)FAKE_GUEST_USED_ELEM * q->size);
		uint16_t old_idx = q->kicked_idx;

		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		q->kicked_idx = q->avail_idx;
		if (!fake_guest_need_event(le16toh(__atomic_load_n(avail_event, __ATOMIC_RELAXED)),
					   q->avail_idx, old_idx)) {
			guest->notifies_suppressed++;
			return;
		}
	}
	guest->notifies_sent++;
	virtio_mmio_write32(guest->transport, VIRTIO_MMIO_QUEUE_NOTIFY, queue);
}

bool fake_guest_pop_used(struct fake_guest *guest, unsigned int queue, uint32_t *id,
			 uint32_t *len)
{
	struct fake_queue *q = &guest->queues[queue];
	uint16_t *idx = (uint16_t *)(guest->ram + q->used + FAKE_GUEST_RING_IDX_OFFSET);
	uint8_t *elem;

	if (le16toh(__atomic_load_n(idx, __ATOMIC_ACQUIRE)) == q->used_seen)
		return false;
	elem = guest->ram + q->used + FAKE_GUEST_RING_HEADER +
	       (uint64_t)FAKE_GUEST_USED_ELEM * (q->used_seen % q->size);
	memcpy(id, elem, 4);
	memcpy(len, elem + 4, 4);
	*id = le32toh(*id);
	*len = le32toh(*len);
	q->used_seen++;
	if (guest->event_idx) {
		uint16_t *used_event = (uint16_t *)(guest->ram + q->avail + FAKE_GUEST_RING_HEADER +
						    2u * q->size);

		__atomic_store_n(used_event, htole16(q->used_seen), __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	}
	return true;
}

uint32_t fake_guest_ack_irq(struct fake_guest *guest)
{
	uint32_t pending = virtio_mmio_read32(guest->transport, VIRTIO_MMIO_INTERRUPT_STATUS);

	if (pending)
		virtio_mmio_write32(guest->transport, VIRTIO_MMIO_INTERRUPT_ACK, pending);
	return pending;
}
