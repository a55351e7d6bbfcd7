/*
 * virtio-mmio v2 register file. Queue registers are plain storage until the driver sets
 * DRIVER_OK; only then are they validated and turned into struct virtqueue, so a guest that
 * rewrites them later (undefined by the spec) cannot move a ring under the worker. Anything
 * the guest gets wrong ends in DEVICE_NEEDS_RESET plus a config-change interrupt, never in a
 * crash of the VMM.
 *
 * A guest can break a device and reset it in a loop, thousands of times a second: only the
 * first VIRTIO_MMIO_FAULT_WARNINGS faults of a device are logged as warnings (the rest as
 * debug lines, log_warn_repeated), so a hostile guest cannot fill the host's log file or its
 * tmpfs through them.
 *
 * Locks: `lock` guards the registers (vCPU threads); the device lock (owned by the device)
 * is taken inside it around activate/reset/state; `irq_lock` is a leaf that guards
 * interrupt_status and the line level, so the worker can signal without touching `lock`.
 */
#include "devices/virtio_mmio.h"

#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define VIRTIO_MMIO_REG_WIDTH 4u
#define VIRTIO_MMIO_FEATURE_WORD_BITS 32
#define VIRTIO_MMIO_FEATURE_WORDS 2u
#define VIRTIO_MMIO_ADDR_HIGH_SHIFT 32
#define VIRTIO_MMIO_LOW_MASK 0xffffffffull
#define VIRTIO_MMIO_QUEUE_READY_BIT 1u
/* Guest protocol faults a device logs as warnings over its lifetime; later ones at debug. */
#define VIRTIO_MMIO_FAULT_WARNINGS 4u
#define VIRTIO_MMIO_FAULT_TEXT_MAX 128

static const char *const log_module = "virtio-mmio";

struct virtio_mmio_queue {
	uint16_t num;
	bool ready;
	uint64_t desc_addr;
	uint64_t driver_addr;
	uint64_t device_addr;
};

struct virtio_mmio {
	pthread_mutex_t lock;
	pthread_mutex_t irq_lock;
	const struct virtio_device_ops *ops;
	void *opaque;
	const struct guest_memory *mem;
	struct irq_line irq;
	pthread_mutex_t *device_lock;

	uint32_t device_features_sel;
	uint32_t driver_features_sel;
	uint64_t driver_features;
	uint32_t queue_sel;
	uint32_t status;
	uint32_t config_generation;
	bool activated;
	atomic_bool broken;
	/* guest protocol faults so far; never reset, so resets do not renew the warnings */
	atomic_uint faults;

	/* guarded by irq_lock */
	uint32_t interrupt_status;
	bool irq_asserted;

	struct virtio_mmio_queue queues[VIRTIO_MMIO_MAX_QUEUES];
	/* guarded by the device lock once activated */
	struct virtqueue vqs[VIRTIO_MMIO_MAX_QUEUES];
};

struct virtio_mmio *virtio_mmio_create(const struct virtio_mmio_config *cfg)
{
	struct virtio_mmio *t;

	if (!cfg->ops || !cfg->mem || !cfg->device_lock ||
	    cfg->ops->queue_count > VIRTIO_MMIO_MAX_QUEUES ||
	    cfg->ops->queue_num_max > VIRTQUEUE_MAX_SIZE)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->irq_lock, NULL);
	t->ops = cfg->ops;
	t->opaque = cfg->opaque;
	t->mem = cfg->mem;
	t->irq = cfg->irq;
	t->device_lock = cfg->device_lock;
	atomic_init(&t->broken, false);
	atomic_init(&t->faults, 0);
	return t;
}

void virtio_mmio_destroy(struct virtio_mmio *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->irq_lock);
	free(t);
}

int virtio_mmio_register(struct virtio_mmio *t, struct bus *bus, uint64_t base)
{
	return bus_register(bus, base, VIRTIO_MMIO_WINDOW_SIZE, virtio_mmio_access, t);
}

static void virtio_mmio_raise(struct virtio_mmio *t, uint32_t reason)
{
	pthread_mutex_lock(&t->irq_lock);
	t->interrupt_status |= reason;
	if (!t->irq_asserted) {
		t->irq_asserted = true;
		irq_line_set(&t->irq, true);
	}
	pthread_mutex_unlock(&t->irq_lock);
}

static void virtio_mmio_ack(struct virtio_mmio *t, uint32_t reasons)
{
	pthread_mutex_lock(&t->irq_lock);
	t->interrupt_status &= ~reasons;
	if (!t->interrupt_status && t->irq_asserted) {
		t->irq_asserted = false;
		irq_line_set(&t->irq, false);
	}
	pthread_mutex_unlock(&t->irq_lock);
}

static uint32_t virtio_mmio_interrupt_status(struct virtio_mmio *t)
{
	uint32_t status;

	pthread_mutex_lock(&t->irq_lock);
	status = t->interrupt_status;
	pthread_mutex_unlock(&t->irq_lock);
	return status;
}

void virtio_mmio_signal_used(struct virtio_mmio *t)
{
	virtio_mmio_raise(t, VIRTIO_MMIO_INT_USED_BUFFER);
}

void virtio_mmio_signal_config(struct virtio_mmio *t)
{
	virtio_mmio_raise(t, VIRTIO_MMIO_INT_CONFIG_CHANGE);
}

/*
 * Sets DEVICE_NEEDS_RESET and tells the driver; what says why, in a warning for the first few
 * faults of this device.
 */
static void virtio_mmio_break(struct virtio_mmio *t, const char *what)
{
	if (atomic_exchange(&t->broken, true))
		return;
	log_warn_repeated(log_module, atomic_fetch_add(&t->faults, 1), VIRTIO_MMIO_FAULT_WARNINGS,
			  "device %u needs a reset: %s; reload the guest driver or restart the VM",
			  t->ops->device_id, what);
	virtio_mmio_raise(t, VIRTIO_MMIO_INT_CONFIG_CHANGE);
}

void virtio_mmio_mark_broken(struct virtio_mmio *t)
{
	virtio_mmio_break(t, "the guest driver violated the virtio protocol "
			  "(--log-level debug says how)");
}

bool virtio_mmio_is_broken(struct virtio_mmio *t)
{
	return atomic_load(&t->broken);
}

/* Caller holds t->lock and the device lock. */
static void virtio_mmio_clear_queues(struct virtio_mmio *t)
{
	for (unsigned int i = 0; i < VIRTIO_MMIO_MAX_QUEUES; i++) {
		memset(&t->queues[i], 0, sizeof(t->queues[i]));
		virtqueue_clear(&t->vqs[i]);
	}
}

static void virtio_mmio_reset(struct virtio_mmio *t)
{
	pthread_mutex_lock(t->device_lock);
	if (t->ops->reset)
		t->ops->reset(t->opaque);
	virtio_mmio_clear_queues(t);
	pthread_mutex_unlock(t->device_lock);
	t->device_features_sel = 0;
	t->driver_features_sel = 0;
	t->driver_features = 0;
	t->queue_sel = 0;
	t->status = 0;
	t->activated = false;
	atomic_store(&t->broken, false);
	virtio_mmio_ack(t, ~0u);
}

static bool virtio_mmio_features_acceptable(const struct virtio_mmio *t)
{
	uint64_t version_1 = 1ull << VIRTIO_F_VERSION_1;

	if (t->driver_features & ~t->ops->features)
		return false;
	return t->driver_features & version_1;
}

/* Caller holds t->lock and the device lock. */
static int virtio_mmio_configure_queues(struct virtio_mmio *t)
{
	unsigned int ring_features = 0;

	if (t->driver_features & (1ull << VIRTIO_RING_F_INDIRECT_DESC))
		ring_features |= VIRTQUEUE_INDIRECT;
	if (t->driver_features & (1ull << VIRTIO_RING_F_EVENT_IDX))
		ring_features |= VIRTQUEUE_EVENT_IDX;

	for (unsigned int i = 0; i < t->ops->queue_count; i++) {
		const struct virtio_mmio_queue *q = &t->queues[i];
		int rc;

		if (!q->ready)
			continue;
		rc = virtqueue_configure(&t->vqs[i], t->mem, q->num, q->desc_addr, q->driver_addr,
					 q->device_addr, ring_features);
		if (rc)
			return rc;
	}
	return 0;
}

static void virtio_mmio_activate(struct virtio_mmio *t)
{
	int rc;

	pthread_mutex_lock(t->device_lock);
	rc = virtio_mmio_configure_queues(t);
	if (!rc && t->ops->activate)
		rc = t->ops->activate(t->opaque, t->vqs, t->ops->queue_count, t->driver_features);
	pthread_mutex_unlock(t->device_lock);
	if (rc) {
		char what[VIRTIO_MMIO_FAULT_TEXT_MAX];

		snprintf(what, sizeof(what), "it cannot start with the guest's queue setup (%s)",
			 strerror(-rc));
		virtio_mmio_break(t, what);
		return;
	}
	t->activated = true;
}

static void virtio_mmio_write_status(struct virtio_mmio *t, uint32_t value)
{
	uint32_t newly_set = value & ~t->status;

	if (!value) {
		virtio_mmio_reset(t);
		return;
	}
	if ((newly_set & VIRTIO_STATUS_FEATURES_OK) && !virtio_mmio_features_acceptable(t))
		value &= ~(uint32_t)VIRTIO_STATUS_FEATURES_OK;
	t->status = value & ~(uint32_t)VIRTIO_STATUS_DEVICE_NEEDS_RESET;
	if ((newly_set & VIRTIO_STATUS_DRIVER_OK) && (value & VIRTIO_STATUS_FEATURES_OK) &&
	    !t->activated)
		virtio_mmio_activate(t);
}

static struct virtio_mmio_queue *virtio_mmio_selected_queue(struct virtio_mmio *t)
{
	if (t->queue_sel >= t->ops->queue_count)
		return NULL;
	return &t->queues[t->queue_sel];
}

static uint32_t virtio_mmio_read_queue_reg(struct virtio_mmio *t, uint64_t offset)
{
	struct virtio_mmio_queue *q = virtio_mmio_selected_queue(t);

	if (!q)
		return 0;
	switch (offset) {
	case VIRTIO_MMIO_QUEUE_NUM_MAX:
		return t->ops->queue_num_max;
	case VIRTIO_MMIO_QUEUE_READY:
		return q->ready;
	default:
		return 0;
	}
}

static uint32_t virtio_mmio_read_reg(struct virtio_mmio *t, uint64_t offset)
{
	uint32_t status;

	switch (offset) {
	case VIRTIO_MMIO_MAGIC_VALUE:
		return VIRTIO_MMIO_MAGIC;
	case VIRTIO_MMIO_VERSION:
		return VIRTIO_MMIO_VERSION_MODERN;
	case VIRTIO_MMIO_DEVICE_ID:
		return t->ops->device_id;
	case VIRTIO_MMIO_VENDOR_ID:
		return VIRTIO_MMIO_VENDOR;
	case VIRTIO_MMIO_DEVICE_FEATURES:
		if (t->device_features_sel >= VIRTIO_MMIO_FEATURE_WORDS)
			return 0;
		return (uint32_t)(t->ops->features >>
				  (VIRTIO_MMIO_FEATURE_WORD_BITS * t->device_features_sel));
	case VIRTIO_MMIO_QUEUE_NUM_MAX:
	case VIRTIO_MMIO_QUEUE_READY:
		return virtio_mmio_read_queue_reg(t, offset);
	case VIRTIO_MMIO_INTERRUPT_STATUS:
		return virtio_mmio_interrupt_status(t);
	case VIRTIO_MMIO_STATUS:
		status = t->status;
		if (atomic_load(&t->broken))
			status |= VIRTIO_STATUS_DEVICE_NEEDS_RESET;
		return status;
	case VIRTIO_MMIO_CONFIG_GENERATION:
		return t->config_generation;
	case VIRTIO_MMIO_SHM_LEN_LOW:
	case VIRTIO_MMIO_SHM_LEN_HIGH:
	case VIRTIO_MMIO_SHM_BASE_LOW:
	case VIRTIO_MMIO_SHM_BASE_HIGH:
		/* a length of 0 would be a region: virtio-fs would then map a DAX window */
		return VIRTIO_MMIO_NO_SHM_REGION;
	default:
		return 0;
	}
}

static void virtio_mmio_set_addr_half(uint64_t *addr, uint32_t value, bool high)
{
	if (high)
		*addr = (*addr & VIRTIO_MMIO_LOW_MASK) | ((uint64_t)value << VIRTIO_MMIO_ADDR_HIGH_SHIFT);
	else
		*addr = (*addr & ~VIRTIO_MMIO_LOW_MASK) | value;
}

static void virtio_mmio_write_queue_reg(struct virtio_mmio *t, uint64_t offset, uint32_t value)
{
	struct virtio_mmio_queue *q = virtio_mmio_selected_queue(t);

	/* Queue layout is frozen once the device runs; later writes are ignored. */
	if (!q || t->activated)
		return;
	switch (offset) {
	case VIRTIO_MMIO_QUEUE_NUM:
		q->num = value > t->ops->queue_num_max ? 0 : (uint16_t)value;
		break;
	case VIRTIO_MMIO_QUEUE_READY:
		q->ready = value & VIRTIO_MMIO_QUEUE_READY_BIT;
		break;
	case VIRTIO_MMIO_QUEUE_DESC_LOW:
	case VIRTIO_MMIO_QUEUE_DESC_HIGH:
		virtio_mmio_set_addr_half(&q->desc_addr, value,
					  offset == VIRTIO_MMIO_QUEUE_DESC_HIGH);
		break;
	case VIRTIO_MMIO_QUEUE_DRIVER_LOW:
	case VIRTIO_MMIO_QUEUE_DRIVER_HIGH:
		virtio_mmio_set_addr_half(&q->driver_addr, value,
					  offset == VIRTIO_MMIO_QUEUE_DRIVER_HIGH);
		break;
	case VIRTIO_MMIO_QUEUE_DEVICE_LOW:
	case VIRTIO_MMIO_QUEUE_DEVICE_HIGH:
		virtio_mmio_set_addr_half(&q->device_addr, value,
					  offset == VIRTIO_MMIO_QUEUE_DEVICE_HIGH);
		break;
	default:
		break;
	}
}

static void virtio_mmio_write_driver_features(struct virtio_mmio *t, uint32_t value)
{
	unsigned int shift;

	if (t->driver_features_sel >= VIRTIO_MMIO_FEATURE_WORDS ||
	    (t->status & VIRTIO_STATUS_FEATURES_OK))
		return;
	shift = VIRTIO_MMIO_FEATURE_WORD_BITS * t->driver_features_sel;
	t->driver_features &= ~(VIRTIO_MMIO_LOW_MASK << shift);
	t->driver_features |= (uint64_t)value << shift;
}

static void virtio_mmio_write_reg(struct virtio_mmio *t, uint64_t offset, uint32_t value)
{
	switch (offset) {
	case VIRTIO_MMIO_DEVICE_FEATURES_SEL:
		t->device_features_sel = value;
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES:
		virtio_mmio_write_driver_features(t, value);
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES_SEL:
		t->driver_features_sel = value;
		break;
	case VIRTIO_MMIO_QUEUE_SEL:
		t->queue_sel = value;
		break;
	case VIRTIO_MMIO_QUEUE_NOTIFY:
		if (t->activated && value < t->ops->queue_count && t->ops->queue_notify)
			t->ops->queue_notify(t->opaque, value);
		break;
	case VIRTIO_MMIO_INTERRUPT_ACK:
		virtio_mmio_ack(t, value);
		break;
	case VIRTIO_MMIO_STATUS:
		virtio_mmio_write_status(t, value);
		break;
	default:
		virtio_mmio_write_queue_reg(t, offset, value);
		break;
	}
}

static void virtio_mmio_config_access(struct virtio_mmio *t, uint64_t offset, uint8_t *data,
				      uint32_t len, bool is_write)
{
	uint64_t config_offset = offset - VIRTIO_MMIO_CONFIG;

	if (config_offset >= t->ops->config_size || len > t->ops->config_size - config_offset) {
		if (!is_write)
			memset(data, 0, len);
		return;
	}
	if (is_write) {
		if (t->ops->config_write)
			t->ops->config_write(t->opaque, (uint32_t)config_offset, data, len);
	} else if (t->ops->config_read) {
		t->ops->config_read(t->opaque, (uint32_t)config_offset, data, len);
	} else {
		memset(data, 0, len);
	}
}

void virtio_mmio_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			bool is_write)
{
	struct virtio_mmio *t = opaque;
	uint32_t value = 0;

	if (!len || len > sizeof(uint64_t))
		return;
	pthread_mutex_lock(&t->lock);
	if (offset >= VIRTIO_MMIO_CONFIG) {
		virtio_mmio_config_access(t, offset, data, len, is_write);
		goto out;
	}
	/* Registers below the config space are 32 bits wide and accessed only as such. */
	if (len != VIRTIO_MMIO_REG_WIDTH || offset % VIRTIO_MMIO_REG_WIDTH) {
		if (!is_write)
			memset(data, 0, len);
		goto out;
	}
	if (is_write) {
		memcpy(&value, data, sizeof(value));
		virtio_mmio_write_reg(t, offset, le32toh(value));
	} else {
		value = htole32(virtio_mmio_read_reg(t, offset));
		memcpy(data, &value, sizeof(value));
	}
out:
	pthread_mutex_unlock(&t->lock);
}

uint32_t virtio_mmio_read32(struct virtio_mmio *t, uint64_t offset)
{
	uint32_t value = 0;

	virtio_mmio_access(t, offset, (uint8_t *)&value, sizeof(value), false);
	return le32toh(value);
}

void virtio_mmio_write32(struct virtio_mmio *t, uint64_t offset, uint32_t value)
{
	uint32_t le = htole32(value);

	virtio_mmio_access(t, offset, (uint8_t *)&le, sizeof(le), true);
}

/* Copies the registers and ring indices; the caller holds the lock and the device lock. */
static void virtio_mmio_state_fill(struct virtio_mmio *t, struct virtio_mmio_state *state)
{
	memset(state, 0, sizeof(*state));
	state->device_features = t->ops->features;
	state->driver_features = t->driver_features;
	state->device_features_sel = t->device_features_sel;
	state->driver_features_sel = t->driver_features_sel;
	state->queue_sel = t->queue_sel;
	state->status = t->status;
	state->interrupt_status = virtio_mmio_interrupt_status(t);
	state->config_generation = t->config_generation;
	state->queue_count = t->ops->queue_count;
	for (unsigned int i = 0; i < t->ops->queue_count; i++) {
		struct virtio_mmio_queue_state *qs = &state->queues[i];

		qs->num_max = t->ops->queue_num_max;
		qs->num = t->queues[i].num;
		qs->ready = t->queues[i].ready;
		qs->desc_addr = t->queues[i].desc_addr;
		qs->driver_addr = t->queues[i].driver_addr;
		qs->device_addr = t->queues[i].device_addr;
		qs->last_avail_idx = t->vqs[i].last_avail_idx;
		qs->used_idx = t->vqs[i].used_idx;
	}
}

void virtio_mmio_state_get(struct virtio_mmio *t, struct virtio_mmio_state *state)
{
	pthread_mutex_lock(&t->lock);
	pthread_mutex_lock(t->device_lock);
	virtio_mmio_state_fill(t, state);
	pthread_mutex_unlock(t->device_lock);
	pthread_mutex_unlock(&t->lock);
}

void virtio_mmio_state_get_held(struct virtio_mmio *t, struct virtio_mmio_state *state)
{
	pthread_mutex_lock(&t->lock);
	pthread_mutex_lock(t->device_lock);
	virtio_mmio_state_fill(t, state);
	pthread_mutex_unlock(&t->lock);
}

static int virtio_mmio_state_check(const struct virtio_mmio *t,
				   const struct virtio_mmio_state *state)
{
	if (state->device_features != t->ops->features ||
	    state->queue_count != t->ops->queue_count)
		return -EINVAL;
	for (unsigned int i = 0; i < state->queue_count; i++)
		if (state->queues[i].num > t->ops->queue_num_max)
			return -EINVAL;
	return 0;
}

int virtio_mmio_state_set(struct virtio_mmio *t, const struct virtio_mmio_state *state)
{
	bool running = (state->status & VIRTIO_STATUS_DRIVER_OK) &&
		       (state->status & VIRTIO_STATUS_FEATURES_OK);
	int rc = virtio_mmio_state_check(t, state);

	if (rc)
		return rc;
	pthread_mutex_lock(&t->lock);
	virtio_mmio_reset(t);
	t->driver_features = state->driver_features;
	t->device_features_sel = state->device_features_sel;
	t->driver_features_sel = state->driver_features_sel;
	t->queue_sel = state->queue_sel;
	t->status = state->status;
	t->config_generation = state->config_generation;
	for (unsigned int i = 0; i < state->queue_count; i++) {
		const struct virtio_mmio_queue_state *qs = &state->queues[i];

		t->queues[i] = (struct virtio_mmio_queue){
			.num = qs->num, .ready = qs->ready, .desc_addr = qs->desc_addr,
			.driver_addr = qs->driver_addr, .device_addr = qs->device_addr,
		};
	}
	pthread_mutex_lock(t->device_lock);
	if (running) {
		rc = virtio_mmio_configure_queues(t);
		for (unsigned int i = 0; !rc && i < state->queue_count; i++) {
			t->vqs[i].last_avail_idx = state->queues[i].last_avail_idx;
			t->vqs[i].used_idx = state->queues[i].used_idx;
		}
		if (!rc && t->ops->activate)
			rc = t->ops->activate(t->opaque, t->vqs, t->ops->queue_count,
					      t->driver_features);
		t->activated = !rc;
	}
	pthread_mutex_unlock(t->device_lock);
	pthread_mutex_unlock(&t->lock);
	if (state->interrupt_status)
		virtio_mmio_raise(t, state->interrupt_status);
	return rc;
}

void virtio_mmio_state_write(struct byte_writer *out, const struct virtio_mmio_state *state)
{
	byte_writer_u64(out, state->device_features);
	byte_writer_u64(out, state->driver_features);
	byte_writer_u32(out, state->device_features_sel);
	byte_writer_u32(out, state->driver_features_sel);
	byte_writer_u32(out, state->queue_sel);
	byte_writer_u32(out, state->status);
	byte_writer_u32(out, state->interrupt_status);
	byte_writer_u32(out, state->config_generation);
	byte_writer_u32(out, state->queue_count);
	for (unsigned int i = 0; i < state->queue_count && i < VIRTIO_MMIO_MAX_QUEUES; i++) {
		const struct virtio_mmio_queue_state *queue = &state->queues[i];

		byte_writer_u16(out, queue->num_max);
		byte_writer_u16(out, queue->num);
		byte_writer_u8(out, queue->ready);
		byte_writer_u64(out, queue->desc_addr);
		byte_writer_u64(out, queue->driver_addr);
		byte_writer_u64(out, queue->device_addr);
		byte_writer_u16(out, queue->last_avail_idx);
		byte_writer_u16(out, queue->used_idx);
	}
}

void virtio_mmio_state_read(struct byte_reader *in, struct virtio_mmio_state *state)
{
	memset(state, 0, sizeof(*state));
	state->device_features = byte_reader_u64(in);
	state->driver_features = byte_reader_u64(in);
	state->device_features_sel = byte_reader_u32(in);
	state->driver_features_sel = byte_reader_u32(in);
	state->queue_sel = byte_reader_u32(in);
	state->status = byte_reader_u32(in);
	state->interrupt_status = byte_reader_u32(in);
	state->config_generation = byte_reader_u32(in);
	state->queue_count = byte_reader_u32(in);
	if (state->queue_count > VIRTIO_MMIO_MAX_QUEUES) {
		byte_reader_fail(in);
		state->queue_count = 0;
		return;
	}
	for (unsigned int i = 0; i < state->queue_count; i++) {
		struct virtio_mmio_queue_state *queue = &state->queues[i];
		uint8_t ready;

		queue->num_max = byte_reader_u16(in);
		queue->num = byte_reader_u16(in);
		ready = byte_reader_u8(in);
		queue->desc_addr = byte_reader_u64(in);
		queue->driver_addr = byte_reader_u64(in);
		queue->device_addr = byte_reader_u64(in);
		queue->last_avail_idx = byte_reader_u16(in);
		queue->used_idx = byte_reader_u16(in);
		if (ready > 1)
			byte_reader_fail(in);
		queue->ready = ready;
	}
}
