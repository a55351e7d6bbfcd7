/*
 * virtio-rng (VIRTIO 1.2 §5.4): one request queue of guest buffers that the device fills with
 * bytes from the host kernel's getrandom(). The guest's hw_random core reads it as
 * /dev/hwrng and feeds it into the kernel's entropy pool, so a guest has entropy from its
 * first second, and every clone restored from one snapshot draws its own.
 *
 * Requests are served on the vCPU thread that notified the queue, under the device lock:
 * getrandom() never blocks once the host has booted, each request is capped at
 * RNG_MAX_REQUEST_BYTES however large the guest's buffers are, and so a worker thread would
 * add a wake-up per request and nothing else. A malformed ring marks the device broken, as
 * every virtio device here does; the guest must reset it.
 *
 * Its snapshot section is the transport's registers and ring indices.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "devices/rng.h"
#include "devices/virtio_attach.h"
#include "devices/virtio_mmio.h"
#include "devices/virtqueue.h"
#include "vmm/device.h"

#define RNG_STATE_VERSION 1u
#define RNG_QUEUE_NUM_MAX 64
#define RNG_QUEUE_COUNT 1
/* Bytes one request gets at most; the guest asks again for more. */
#define RNG_MAX_REQUEST_BYTES (64u * 1024u)
#define RNG_CHUNK_BYTES 256u

struct rng_device {
	pthread_mutex_t lock;
	struct virtio_mmio *transport;
	struct virtqueue *queue; /* the transport's, while the driver has the device running */
	struct virtqueue_chain chain; /* the chain being filled (large: not on a vCPU's stack) */
	uint64_t bytes_served;
};

/* Fills the chain's writable buffers with up to RNG_MAX_REQUEST_BYTES; returns bytes written. */
static uint32_t rng_fill_chain(struct rng_device *dev)
{
	uint64_t want = dev->chain.writable_len < RNG_MAX_REQUEST_BYTES ? dev->chain.writable_len
									 : RNG_MAX_REQUEST_BYTES;
	uint8_t chunk[RNG_CHUNK_BYTES];
	uint64_t done = 0;

	while (done < want) {
		size_t len = want - done < sizeof(chunk) ? (size_t)(want - done) : sizeof(chunk);
		ssize_t got = getrandom(chunk, len, 0);

		if (got <= 0)
			break;
		done += virtqueue_chain_write(&dev->chain, done, chunk, (size_t)got);
	}
	explicit_bzero(chunk, sizeof(chunk));
	return (uint32_t)done;
}

/* Called with the device lock held. */
static void rng_serve_queue(struct rng_device *dev)
{
	bool served = false;
	int rc;

	if (!dev->queue || dev->queue->broken)
		return;
	while ((rc = virtqueue_pop(dev->queue, &dev->chain)) == 1) {
		uint32_t written = rng_fill_chain(dev);

		if (virtqueue_push(dev->queue, dev->chain.head, written) < 0) {
			rc = -EIO;
			break;
		}
		dev->bytes_served += written;
		served = true;
	}
	if (rc < 0)
		virtio_mmio_mark_broken(dev->transport);
	if (served && virtqueue_should_signal(dev->queue))
		virtio_mmio_signal_used(dev->transport);
}

static void rng_queue_notify(void *opaque, unsigned int queue_index)
{
	struct rng_device *dev = opaque;

	(void)queue_index;
	pthread_mutex_lock(&dev->lock);
	rng_serve_queue(dev);
	pthread_mutex_unlock(&dev->lock);
}

static int rng_activate(void *opaque, struct virtqueue *queues, unsigned int queue_count,
			uint64_t driver_features)
{
	struct rng_device *dev = opaque;

	(void)driver_features;
	if (queue_count != RNG_QUEUE_COUNT || !queues[0].configured)
		return -EINVAL;
	dev->queue = &queues[0];
	return 0;
}

static void rng_reset(void *opaque)
{
	struct rng_device *dev = opaque;

	dev->queue = NULL;
}

static const struct virtio_device_ops rng_virtio_ops = {
	.device_id = VIRTIO_ID_RNG,
	.features = 1ull << VIRTIO_F_VERSION_1,
	.queue_count = RNG_QUEUE_COUNT,
	.queue_num_max = RNG_QUEUE_NUM_MAX,
	.config_size = 0,
	.queue_notify = rng_queue_notify,
	.activate = rng_activate,
	.reset = rng_reset,
};

/* ---- as a VM device ---- */

static int rng_save(void *opaque, struct byte_writer *out)
{
	struct rng_device *dev = opaque;
	struct virtio_mmio_state state;

	virtio_mmio_state_get(dev->transport, &state);
	virtio_mmio_state_write(out, &state);
	return 0;
}

static int rng_restore(void *opaque, struct byte_reader *in, uint32_t version, char *err,
		       size_t errlen)
{
	struct rng_device *dev = opaque;
	struct virtio_mmio_state state;
	int rc;

	(void)version;
	virtio_mmio_state_read(in, &state);
	if (byte_reader_finish(in) < 0) {
		snprintf(err, errlen, "the entropy device's saved state is malformed: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	rc = virtio_mmio_state_set(dev->transport, &state);
	if (rc < 0)
		snprintf(err, errlen, "the entropy device refused its saved state: %s",
			 strerror(-rc));
	return rc;
}

static void rng_destroy(void *opaque)
{
	struct rng_device *dev = opaque;

	virtio_mmio_destroy(dev->transport);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

extern const struct vm_device_type rng_device_type;

static const struct vm_device_ops rng_vm_ops = {
	.state_version = RNG_STATE_VERSION,
	.save = rng_save,
	.restore = rng_restore,
	.destroy = rng_destroy,
};

struct rng_device *rng_device_create(const struct guest_memory *mem, struct irq_line irq)
{
	struct rng_device *dev = calloc(1, sizeof(*dev));

	if (!dev)
		return NULL;
	pthread_mutex_init(&dev->lock, NULL);
	struct virtio_mmio_config transport_cfg = {
		.ops = &rng_virtio_ops, .opaque = dev, .mem = mem, .irq = irq,
		.device_lock = &dev->lock,
	};

	dev->transport = virtio_mmio_create(&transport_cfg);
	if (!dev->transport) {
		pthread_mutex_destroy(&dev->lock);
		free(dev);
		return NULL;
	}
	return dev;
}

struct virtio_mmio *rng_device_transport(struct rng_device *dev)
{
	return dev->transport;
}

uint64_t rng_device_bytes_served(struct rng_device *dev)
{
	pthread_mutex_lock(&dev->lock);
	uint64_t bytes = dev->bytes_served;

	pthread_mutex_unlock(&dev->lock);
	return bytes;
}

void rng_device_destroy(struct rng_device *dev)
{
	if (dev)
		rng_destroy(dev);
}

static int rng_attach_create(void *ctx, const struct guest_memory *mem, struct irq_line irq,
			     struct virtio_attached *out, char *err, size_t errlen)
{
	struct rng_device *dev = rng_device_create(mem, irq);

	(void)ctx;
	if (!dev) {
		snprintf(err, errlen, "out of memory creating the entropy device");
		return -ENOMEM;
	}
	out->dev = dev;
	out->transport = dev->transport;
	return 0;
}

/* Every VM has one, unless its config turns it off. */
static int rng_vm_create(struct vm *vm, const struct vm_config *cfg,
			 const struct vm_device_section *saved, char *err, size_t errlen)
{
	const struct virtio_attach spec = {
		.type = &rng_device_type, .what = "the entropy device", .create = rng_attach_create,
	};

	if (!saved && cfg->no_entropy_device)
		return 0;
	return virtio_attach(vm, &spec, err, errlen);
}

const struct vm_device_type rng_device_type = {
	.name = "rng",
	.ops = &rng_vm_ops,
	.create = rng_vm_create,
};
