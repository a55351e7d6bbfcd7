/*
 * The virtio-mmio version 2 transport (VIRTIO 1.2 §4.2): one 0x200-byte register window per
 * device, registered on the MMIO bus, with a level-triggered interrupt line.
 *
 * The transport knows nothing about what a device does: a device is a table of operations
 * (identity, features, config space, queue notify, activate, reset) plus an opaque pointer,
 * the way kvmtool separates transports from devices. Registers are guarded by the transport's
 * own lock (vCPU threads write them); the device's worker thread signals interrupts through a
 * separate leaf lock so it never waits for a vCPU. The transport calls activate/reset and
 * reads queue indices only while holding the device's lock, so the worker never sees a queue
 * change under its feet. Lock order: transport lock, then device lock, then the IRQ lock.
 */
#ifndef VOIDBOX_DEVICES_VIRTIO_MMIO_H
#define VOIDBOX_DEVICES_VIRTIO_MMIO_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/byte_buffer.h"
#include "devices/virtqueue.h"
#include "vmm/bus.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define VIRTIO_MMIO_WINDOW_SIZE 0x200
#define VIRTIO_MMIO_MAX_QUEUES 4

/* Register offsets of the version 2 layout. */
enum virtio_mmio_reg {
	VIRTIO_MMIO_MAGIC_VALUE = 0x000,
	VIRTIO_MMIO_VERSION = 0x004,
	VIRTIO_MMIO_DEVICE_ID = 0x008,
	VIRTIO_MMIO_VENDOR_ID = 0x00c,
	VIRTIO_MMIO_DEVICE_FEATURES = 0x010,
	VIRTIO_MMIO_DEVICE_FEATURES_SEL = 0x014,
	VIRTIO_MMIO_DRIVER_FEATURES = 0x020,
	VIRTIO_MMIO_DRIVER_FEATURES_SEL = 0x024,
	VIRTIO_MMIO_QUEUE_SEL = 0x030,
	VIRTIO_MMIO_QUEUE_NUM_MAX = 0x034,
	VIRTIO_MMIO_QUEUE_NUM = 0x038,
	VIRTIO_MMIO_QUEUE_READY = 0x044,
	VIRTIO_MMIO_QUEUE_NOTIFY = 0x050,
	VIRTIO_MMIO_INTERRUPT_STATUS = 0x060,
	VIRTIO_MMIO_INTERRUPT_ACK = 0x064,
	VIRTIO_MMIO_STATUS = 0x070,
	VIRTIO_MMIO_QUEUE_DESC_LOW = 0x080,
	VIRTIO_MMIO_QUEUE_DESC_HIGH = 0x084,
	VIRTIO_MMIO_QUEUE_DRIVER_LOW = 0x090,
	VIRTIO_MMIO_QUEUE_DRIVER_HIGH = 0x094,
	VIRTIO_MMIO_QUEUE_DEVICE_LOW = 0x0a0,
	VIRTIO_MMIO_QUEUE_DEVICE_HIGH = 0x0a4,
	/* Shared memory regions (VIRTIO 1.2 §4.2.2): none here, so length and base read as -1. */
	VIRTIO_MMIO_SHM_SEL = 0x0ac,
	VIRTIO_MMIO_SHM_LEN_LOW = 0x0b0,
	VIRTIO_MMIO_SHM_LEN_HIGH = 0x0b4,
	VIRTIO_MMIO_SHM_BASE_LOW = 0x0b8,
	VIRTIO_MMIO_SHM_BASE_HIGH = 0x0bc,
	VIRTIO_MMIO_CONFIG_GENERATION = 0x0fc,
	VIRTIO_MMIO_CONFIG = 0x100,
};

#define VIRTIO_MMIO_MAGIC 0x74726976u /* "virt" */
#define VIRTIO_MMIO_VERSION_MODERN 2u
#define VIRTIO_MMIO_VENDOR 0x554d4551u /* "QEMU", as the guest drivers expect nothing else */

/* What a shared memory region's length and base read as when the region does not exist. */
#define VIRTIO_MMIO_NO_SHM_REGION 0xffffffffu

#define VIRTIO_MMIO_INT_USED_BUFFER 1u
#define VIRTIO_MMIO_INT_CONFIG_CHANGE 2u

enum virtio_status_bit {
	VIRTIO_STATUS_ACKNOWLEDGE = 1,
	VIRTIO_STATUS_DRIVER = 2,
	VIRTIO_STATUS_DRIVER_OK = 4,
	VIRTIO_STATUS_FEATURES_OK = 8,
	VIRTIO_STATUS_DEVICE_NEEDS_RESET = 64,
	VIRTIO_STATUS_FAILED = 128,
};

enum virtio_device_id {
	VIRTIO_ID_NET = 1,
	VIRTIO_ID_BLOCK = 2,
	VIRTIO_ID_CONSOLE = 3,
	VIRTIO_ID_RNG = 4,
	VIRTIO_ID_9P = 9,
	VIRTIO_ID_VSOCK = 19,
};

#define VIRTIO_F_VERSION_1 32

struct virtio_mmio;

struct virtio_device_ops {
	uint32_t device_id;
	uint64_t features;
	unsigned int queue_count;
	uint16_t queue_num_max;
	uint32_t config_size;
	/* Config-space accesses; offset is relative to 0x100 and already bounds-checked. */
	void (*config_read)(void *opaque, uint32_t offset, uint8_t *data, uint32_t len);
	void (*config_write)(void *opaque, uint32_t offset, const uint8_t *data, uint32_t len);
	/* Runs on a vCPU thread without the device lock: should only kick the worker. */
	void (*queue_notify)(void *opaque, unsigned int queue_index);
	/*
	 * DRIVER_OK with FEATURES_OK: queues[i] is configured when the driver set it ready.
	 * Called with the device lock held. A negative return marks the device NEEDS_RESET.
	 */
	int (*activate)(void *opaque, struct virtqueue *queues, unsigned int queue_count,
			uint64_t driver_features);
	/* The driver wrote 0 to STATUS; called with the device lock held. */
	void (*reset)(void *opaque);
};

struct virtio_mmio_config {
	const struct virtio_device_ops *ops;
	void *opaque;
	const struct guest_memory *mem;
	struct irq_line irq;
	/* Held by the device's worker while it touches queues; the transport takes it too. */
	pthread_mutex_t *device_lock;
};

struct virtio_mmio_queue_state {
	uint16_t num_max;
	uint16_t num;
	bool ready;
	uint64_t desc_addr;
	uint64_t driver_addr;
	uint64_t device_addr;
	uint16_t last_avail_idx;
	uint16_t used_idx;
};

/* Everything a snapshot needs to bring the transport back exactly where it was. */
struct virtio_mmio_state {
	uint64_t device_features;
	uint64_t driver_features;
	uint32_t device_features_sel;
	uint32_t driver_features_sel;
	uint32_t queue_sel;
	uint32_t status;
	uint32_t interrupt_status;
	uint32_t config_generation;
	unsigned int queue_count;
	struct virtio_mmio_queue_state queues[VIRTIO_MMIO_MAX_QUEUES];
};

struct virtio_mmio *virtio_mmio_create(const struct virtio_mmio_config *cfg);
void virtio_mmio_destroy(struct virtio_mmio *transport);

/* Registers [base, base + VIRTIO_MMIO_WINDOW_SIZE) on bus; returns bus_register's result. */
int virtio_mmio_register(struct virtio_mmio *transport, struct bus *bus, uint64_t base);
/* The bus handler (a bus_access_fn); exposed so tests and fuzzers can drive registers. */
void virtio_mmio_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			bool is_write);
/* Convenience wrappers around virtio_mmio_access for 32-bit registers. */
uint32_t virtio_mmio_read32(struct virtio_mmio *transport, uint64_t offset);
void virtio_mmio_write32(struct virtio_mmio *transport, uint64_t offset, uint32_t value);

/* Device side: raise the interrupt for used buffers / a config change (any thread). */
void virtio_mmio_signal_used(struct virtio_mmio *transport);
void virtio_mmio_signal_config(struct virtio_mmio *transport);
/* Device side: the guest broke the protocol; sets DEVICE_NEEDS_RESET and tells the driver. */
void virtio_mmio_mark_broken(struct virtio_mmio *transport);
bool virtio_mmio_is_broken(struct virtio_mmio *transport);

/* Snapshot support: call with the vCPUs stopped. set re-activates the device if DRIVER_OK. */
void virtio_mmio_state_get(struct virtio_mmio *transport, struct virtio_mmio_state *state);
/*
 * The same, returning with the device lock still held: a device whose worker writes guest
 * memory only under that lock saves this way, so the ring indices saved stay the ones guest
 * memory shows until its resume op unlocks the device lock.
 */
void virtio_mmio_state_get_held(struct virtio_mmio *transport, struct virtio_mmio_state *state);
int virtio_mmio_state_set(struct virtio_mmio *transport, const struct virtio_mmio_state *state);
/* The transport's part of a device's snapshot section, field by field (little-endian). */
void virtio_mmio_state_write(struct byte_writer *out, const struct virtio_mmio_state *state);
/* Reads what virtio_mmio_state_write wrote; a queue count above the maximum fails the reader. */
void virtio_mmio_state_read(struct byte_reader *in, struct virtio_mmio_state *state);

#endif
