/*
 * Split virtqueue walker. Every value read from the rings is copied out of guest memory once
 * and validated on the copy, so a guest rewriting a descriptor mid-walk cannot make us use a
 * value we did not check. Walks are bounded by the table they run in (the queue size, or an
 * indirect table's entry count), which turns loops into errors instead of hangs.
 *
 * Ordering: the avail index is loaded with acquire semantics before the ring entries it
 * publishes are read, and the used index is stored with release semantics after the used
 * element is written, which is what the driver's barriers pair with.
 */
#include "devices/virtqueue.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "common/log.h"

#define VIRTQ_DESC_ALIGN 16u
#define VIRTQ_AVAIL_ALIGN 2u
#define VIRTQ_USED_ALIGN 4u
/* flags + idx in front of both rings; one trailing u16 event field behind them. */
#define VIRTQ_RING_HEADER_SIZE 4u
#define VIRTQ_RING_EVENT_SIZE 2u
#define VIRTQ_AVAIL_ELEM_SIZE 2u
#define VIRTQ_RING_IDX_OFFSET 2u
/* struct virtq_desc: le64 addr, le32 len, le16 flags, le16 next */
#define VIRTQ_DESC_ADDR_OFFSET 0u
#define VIRTQ_DESC_LEN_OFFSET 8u
#define VIRTQ_DESC_FLAGS_OFFSET 12u
#define VIRTQ_DESC_NEXT_OFFSET 14u

static const char *const log_module = "virtqueue";

struct virtq_desc_copy {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
	uint16_t next;
};

/* A table of descriptors the walk runs in: the queue's own or one indirect table. */
struct virtq_desc_table {
	const uint8_t *base;
	uint32_t count;
	bool is_indirect;
};

static bool virtqueue_is_power_of_two(uint32_t value)
{
	return value && !(value & (value - 1));
}

static uint64_t virtqueue_avail_bytes(uint16_t size)
{
	return VIRTQ_RING_HEADER_SIZE + (uint64_t)VIRTQ_AVAIL_ELEM_SIZE * size +
	       VIRTQ_RING_EVENT_SIZE;
}

static uint64_t virtqueue_used_bytes(uint16_t size)
{
	return VIRTQ_RING_HEADER_SIZE + (uint64_t)VIRTQ_USED_ELEM_SIZE * size +
	       VIRTQ_RING_EVENT_SIZE;
}

void virtqueue_clear(struct virtqueue *vq)
{
	memset(vq, 0, sizeof(*vq));
}

int virtqueue_configure(struct virtqueue *vq, const struct guest_memory *mem, uint16_t size,
			uint64_t desc_addr, uint64_t avail_addr, uint64_t used_addr,
			unsigned int ring_features)
{
	virtqueue_clear(vq);
	if (!mem || !virtqueue_is_power_of_two(size) || size > VIRTQUEUE_MAX_SIZE)
		return -EINVAL;
	if (desc_addr % VIRTQ_DESC_ALIGN || avail_addr % VIRTQ_AVAIL_ALIGN ||
	    used_addr % VIRTQ_USED_ALIGN)
		return -EINVAL;
	if (!guest_memory_ptr(mem, desc_addr, (uint64_t)VIRTQ_DESC_SIZE * size) ||
	    !guest_memory_ptr(mem, avail_addr, virtqueue_avail_bytes(size)) ||
	    !guest_memory_ptr(mem, used_addr, virtqueue_used_bytes(size)))
		return -EINVAL;
	vq->mem = mem;
	vq->size = size;
	vq->desc_addr = desc_addr;
	vq->avail_addr = avail_addr;
	vq->used_addr = used_addr;
	vq->indirect_allowed = ring_features & VIRTQUEUE_INDIRECT;
	vq->event_idx = ring_features & VIRTQUEUE_EVENT_IDX;
	vq->configured = true;
	return 0;
}

static uint8_t *virtqueue_ring(const struct virtqueue *vq, uint64_t addr, uint64_t len)
{
	return guest_memory_ptr(vq->mem, addr, len);
}

static uint16_t virtqueue_load_avail_idx(const struct virtqueue *vq)
{
	uint8_t *ring = virtqueue_ring(vq, vq->avail_addr, virtqueue_avail_bytes(vq->size));
	uint16_t *idx = (uint16_t *)(ring + VIRTQ_RING_IDX_OFFSET);

	return le16toh(__atomic_load_n(idx, __ATOMIC_ACQUIRE));
}

static uint16_t virtqueue_load_avail_entry(const struct virtqueue *vq, uint16_t slot)
{
	uint8_t *ring = virtqueue_ring(vq, vq->avail_addr, virtqueue_avail_bytes(vq->size));
	uint16_t *entry = (uint16_t *)(ring + VIRTQ_RING_HEADER_SIZE +
				       (size_t)VIRTQ_AVAIL_ELEM_SIZE * slot);

	return le16toh(__atomic_load_n(entry, __ATOMIC_RELAXED));
}

/* used_event lives after the avail ring's entries, avail_event after the used ring's. */
static uint16_t *virtqueue_used_event(const struct virtqueue *vq)
{
	uint8_t *ring = virtqueue_ring(vq, vq->avail_addr, virtqueue_avail_bytes(vq->size));

	return (uint16_t *)(ring + VIRTQ_RING_HEADER_SIZE + (size_t)VIRTQ_AVAIL_ELEM_SIZE * vq->size);
}

static uint16_t *virtqueue_avail_event(const struct virtqueue *vq)
{
	uint8_t *ring = virtqueue_ring(vq, vq->used_addr, virtqueue_used_bytes(vq->size));

	return (uint16_t *)(ring + VIRTQ_RING_HEADER_SIZE + (size_t)VIRTQ_USED_ELEM_SIZE * vq->size);
}

/* The virtio event-index test: did [old, new) step over event? */
static bool virtqueue_need_event(uint16_t event, uint16_t new_idx, uint16_t old_idx)
{
	return (uint16_t)(new_idx - event - 1) < (uint16_t)(new_idx - old_idx);
}

/*
 * The ring looks empty: ask for a notify at the next buffer, then look again, since the
 * driver may have added one before it could see the request. Returns the fresh avail index.
 */
static uint16_t virtqueue_arm_notify(struct virtqueue *vq)
{
	__atomic_store_n(virtqueue_avail_event(vq), htole16(vq->last_avail_idx), __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return virtqueue_load_avail_idx(vq);
}

/*
 * The reason goes to the debug log only: the device's transport warns (a few times per
 * device) when its owner marks it broken, and a guest can break a queue without end.
 */
static void virtqueue_mark_broken(struct virtqueue *vq, const char *why)
{
	if (!vq->broken)
		log_debug(log_module, "guest broke the virtqueue protocol (%s); "
			  "the device stops until the driver resets it", why);
	vq->broken = true;
}

uint16_t virtqueue_notify_on_next(struct virtqueue *vq)
{
	uint16_t idx;

	if (!vq->configured || vq->broken)
		return 0;
	idx = virtqueue_load_avail_idx(vq);
	__atomic_store_n(virtqueue_avail_event(vq), htole16(idx), __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return idx;
}

uint16_t virtqueue_avail_idx(struct virtqueue *vq)
{
	return vq->configured && !vq->broken ? virtqueue_load_avail_idx(vq) : 0;
}

bool virtqueue_has_available(struct virtqueue *vq)
{
	if (!vq->configured || vq->broken)
		return false;
	return virtqueue_load_avail_idx(vq) != vq->last_avail_idx;
}

static void virtqueue_read_desc(const struct virtq_desc_table *table, uint32_t index,
				struct virtq_desc_copy *out)
{
	uint8_t raw[VIRTQ_DESC_SIZE];

	memcpy(raw, table->base + (size_t)index * VIRTQ_DESC_SIZE, sizeof(raw));
	memcpy(&out->addr, raw + VIRTQ_DESC_ADDR_OFFSET, sizeof(out->addr));
	memcpy(&out->len, raw + VIRTQ_DESC_LEN_OFFSET, sizeof(out->len));
	memcpy(&out->flags, raw + VIRTQ_DESC_FLAGS_OFFSET, sizeof(out->flags));
	memcpy(&out->next, raw + VIRTQ_DESC_NEXT_OFFSET, sizeof(out->next));
	out->addr = le64toh(out->addr);
	out->len = le32toh(out->len);
	out->flags = le16toh(out->flags);
	out->next = le16toh(out->next);
}

static int virtqueue_chain_add(struct virtqueue *vq, struct virtqueue_chain *chain,
			       const struct virtq_desc_copy *desc)
{
	bool writable = desc->flags & VIRTQ_DESC_F_WRITE;
	uint8_t *host;

	if (chain->buffer_count >= VIRTQUEUE_MAX_SIZE || chain->buffer_count >= vq->size)
		return -EIO;
	if (!writable && chain->writable_len)
		return -EIO;
	if (!desc->len)
		return 0;
	host = guest_memory_ptr(vq->mem, desc->addr, desc->len);
	if (!host)
		return -EIO;
	chain->buffers[chain->buffer_count++] = (struct virtqueue_buffer){
		.host = host, .len = desc->len, .writable = writable,
	};
	if (writable)
		chain->writable_len += desc->len;
	else
		chain->readable_len += desc->len;
	return 0;
}

static int virtqueue_walk(struct virtqueue *vq, struct virtqueue_chain *chain,
			  const struct virtq_desc_table *table, uint32_t start);

static int virtqueue_walk_indirect(struct virtqueue *vq, struct virtqueue_chain *chain,
				   const struct virtq_desc_table *outer,
				   const struct virtq_desc_copy *desc)
{
	struct virtq_desc_table inner;

	if (!vq->indirect_allowed || outer->is_indirect)
		return -EIO;
	if (desc->flags & VIRTQ_DESC_F_NEXT)
		return -EIO;
	if (!desc->len || desc->len % VIRTQ_DESC_SIZE)
		return -EIO;
	inner.count = desc->len / VIRTQ_DESC_SIZE;
	if (inner.count > vq->size)
		return -EIO;
	inner.base = guest_memory_ptr(vq->mem, desc->addr, desc->len);
	if (!inner.base)
		return -EIO;
	inner.is_indirect = true;
	return virtqueue_walk(vq, chain, &inner, 0);
}

static int virtqueue_walk(struct virtqueue *vq, struct virtqueue_chain *chain,
			  const struct virtq_desc_table *table, uint32_t start)
{
	uint32_t index = start;

	for (uint32_t steps = 0; steps < table->count; steps++) {
		struct virtq_desc_copy desc;
		int rc;

		if (index >= table->count)
			return -EIO;
		virtqueue_read_desc(table, index, &desc);
		if (desc.flags & VIRTQ_DESC_F_INDIRECT)
			return virtqueue_walk_indirect(vq, chain, table, &desc);
		rc = virtqueue_chain_add(vq, chain, &desc);
		if (rc)
			return rc;
		if (!(desc.flags & VIRTQ_DESC_F_NEXT))
			return 0;
		index = desc.next;
	}
	/* More steps than entries: the chain loops. */
	return -EIO;
}

int virtqueue_pop(struct virtqueue *vq, struct virtqueue_chain *chain)
{
	struct virtq_desc_table table;
	uint16_t avail_idx, head;
	int rc;

	if (!vq->configured || vq->broken)
		return vq->broken ? -EIO : 0;
	avail_idx = virtqueue_load_avail_idx(vq);
	if (avail_idx == vq->last_avail_idx && vq->event_idx)
		avail_idx = virtqueue_arm_notify(vq);
	if (avail_idx == vq->last_avail_idx)
		return 0;
	if ((uint16_t)(avail_idx - vq->last_avail_idx) > vq->size) {
		virtqueue_mark_broken(vq, "avail index ran ahead by more than the queue size");
		return -EIO;
	}
	head = virtqueue_load_avail_entry(vq, vq->last_avail_idx % vq->size);
	if (head >= vq->size) {
		virtqueue_mark_broken(vq, "chain head out of range");
		return -EIO;
	}
	chain->head = head;
	chain->buffer_count = 0;
	chain->readable_len = 0;
	chain->writable_len = 0;
	table.base = virtqueue_ring(vq, vq->desc_addr, (uint64_t)VIRTQ_DESC_SIZE * vq->size);
	table.count = vq->size;
	table.is_indirect = false;
	rc = virtqueue_walk(vq, chain, &table, head);
	if (rc) {
		virtqueue_mark_broken(vq, "malformed descriptor chain");
		return -EIO;
	}
	vq->last_avail_idx++;
	return 1;
}

int virtqueue_push(struct virtqueue *vq, uint16_t head, uint32_t written_len)
{
	uint8_t *ring;
	uint8_t *elem;
	uint32_t id_le = htole32(head);
	uint32_t len_le = htole32(written_len);

	if (!vq->configured || vq->broken)
		return -EIO;
	if (head >= vq->size)
		return -EINVAL;
	ring = virtqueue_ring(vq, vq->used_addr, virtqueue_used_bytes(vq->size));
	elem = ring + VIRTQ_RING_HEADER_SIZE + (size_t)VIRTQ_USED_ELEM_SIZE * (vq->used_idx % vq->size);
	memcpy(elem, &id_le, sizeof(id_le));
	memcpy(elem + sizeof(id_le), &len_le, sizeof(len_le));
	vq->used_idx++;
	__atomic_store_n((uint16_t *)(ring + VIRTQ_RING_IDX_OFFSET), htole16(vq->used_idx),
			 __ATOMIC_RELEASE);
	return 0;
}

bool virtqueue_should_signal(struct virtqueue *vq)
{
	uint8_t *avail;
	uint16_t flags, old_idx, used_event;
	bool valid;

	if (!vq->configured || vq->broken)
		return false;
	/* Our used index store must be visible before we read what the driver asked for. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!vq->event_idx) {
		avail = virtqueue_ring(vq, vq->avail_addr, virtqueue_avail_bytes(vq->size));
		flags = le16toh(__atomic_load_n((uint16_t *)avail, __ATOMIC_RELAXED));
		return !(flags & VIRTQ_AVAIL_F_NO_INTERRUPT);
	}
	valid = vq->signalled_used_valid;
	old_idx = vq->signalled_used;
	vq->signalled_used_valid = true;
	vq->signalled_used = vq->used_idx;
	used_event = le16toh(__atomic_load_n(virtqueue_used_event(vq), __ATOMIC_RELAXED));
	return !valid || virtqueue_need_event(used_event, vq->used_idx, old_idx);
}

/*
 * Copies between data and the chain's readable (to_guest false) or writable (to_guest true)
 * buffers, starting offset bytes into them; returns the bytes copied.
 */
static size_t virtqueue_chain_copy(const struct virtqueue_chain *chain, uint64_t offset,
				   uint8_t *data, size_t len, bool to_guest)
{
	size_t copied = 0;

	for (unsigned int i = 0; i < chain->buffer_count && copied < len; i++) {
		const struct virtqueue_buffer *buf = &chain->buffers[i];
		size_t take;

		if (buf->writable != to_guest) {
			if (to_guest)
				continue; /* readable buffers come first */
			break;
		}
		if (offset >= buf->len) {
			offset -= buf->len;
			continue;
		}
		take = buf->len - offset;
		if (take > len - copied)
			take = len - copied;
		if (to_guest)
			memcpy(buf->host + offset, data + copied, take);
		else
			memcpy(data + copied, buf->host + offset, take);
		copied += take;
		offset = 0;
	}
	return copied;
}

size_t virtqueue_chain_read(const struct virtqueue_chain *chain, uint64_t offset, void *dst,
			    size_t len)
{
	return virtqueue_chain_copy(chain, offset, dst, len, false);
}

size_t virtqueue_chain_write(const struct virtqueue_chain *chain, uint64_t offset,
			     const void *src, size_t len)
{
	return virtqueue_chain_copy(chain, offset, (uint8_t *)src, len, true);
}
