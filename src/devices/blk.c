/*
 * virtio-blk (VIRTIO 1.2 §5.2): a host file as a guest disk, one device per disk.
 *
 * Every request is parsed into a struct blk_request first, with each bound checked against
 * the disk before any I/O: a header shorter than 16 bytes, a sector past the end, a length
 * that is not whole sectors or runs past the end, more data than seg_max * size_max, a write
 * to a read-only disk all fail with VIRTIO_BLK_S_IOERR, unknown types with
 * VIRTIO_BLK_S_UNSUPP. A chain with no writable byte has nowhere to put a status: it is
 * returned with nothing written (the guest's request never completes, its own fault) and the
 * device goes on. The layout of a chain is not assumed (VIRTIO 1.2 has no fixed framing):
 * the header is the first 16 readable bytes, the status the last writable byte, the data
 * what lies between.
 *
 * Data moves with preadv/pwritev straight between the file and the chain's buffers, which
 * virtqueue_pop already checked lie inside guest RAM: no bounce buffer, so a request costs no
 * host memory however large. A read-only disk is opened O_RDONLY, so even a parser bug could
 * not write it. Requests run on one worker thread per disk, woken by an eventfd the queue
 * notify writes, under the device lock; the transport and a snapshot take the same lock, so
 * they never see a request half done.
 *
 * Disks are locked with flock: shared for a read-only disk, exclusive for a writable one, so
 * two VMs (or a fork's children) never write one file, and a writable disk is never attached
 * while another VM reads it.
 *
 * The snapshot section names the disk (path, read-only) and its identity at save time (size,
 * inode, mtime in ns) before the transport state. A restore opens the same path and refuses
 * a file whose identity differs: the guest's page cache in the memory file describes that
 * disk and no other. Disk contents are not copied into the snapshot.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "devices/blk.h"
#include "devices/virtio_attach.h"
#include "vmm/device.h"
#include "vmm/thread_filter.h"

#define BLK_LOG "blk"
#define BLK_STATE_VERSION 1u
/* The worker's name in /proc/PID/task (at most 15 bytes). */
#define BLK_WORKER_THREAD_NAME "blk-worker"
#define BLK_QUEUE_COUNT 1
#define BLK_QUEUE_NUM_MAX 128
/* Data segments per request: the queue size less the header and status descriptors. */
#define BLK_SEG_MAX (BLK_QUEUE_NUM_MAX - 2u)
/* Bytes per data segment the guest may use. */
#define BLK_SIZE_MAX (1u << 20)
/* The most data one request may move; what seg_max and size_max promise the guest. */
#define BLK_REQUEST_MAX_BYTES ((uint64_t)BLK_SEG_MAX * BLK_SIZE_MAX)

/* Where the request header keeps the sector (after u32 type and u32 reserved). */
#define BLK_HEADER_SECTOR_OFFSET 8u
#define BLK_BITS_PER_BYTE 8u

/* Feature bits (VIRTIO 1.2 §5.2.3). */
#define VIRTIO_BLK_F_SIZE_MAX 1
#define VIRTIO_BLK_F_SEG_MAX 2
#define VIRTIO_BLK_F_RO 5
#define VIRTIO_BLK_F_FLUSH 9

/* Config space: capacity, size_max, seg_max, geometry, blk_size (§5.2.4). */
enum blk_config_offset {
	BLK_CONFIG_CAPACITY = 0,
	BLK_CONFIG_SIZE_MAX = 8,
	BLK_CONFIG_SEG_MAX = 12,
	BLK_CONFIG_BLK_SIZE = 20,
	BLK_CONFIG_SIZE = 24,
};

struct blk_device {
	pthread_mutex_t lock;
	struct virtio_mmio *transport;
	struct virtio_device_ops ops; /* features depend on the disk (read-only) */
	struct virtqueue *queue;      /* the transport's, while the driver has the device running */
	struct virtqueue_chain chain; /* the request being served (large: not on a stack) */
	struct blk_disk disk;
	enum blk_worker_mode mode;
	int kick_fd;
	pthread_t worker;
	bool worker_started;
	atomic_bool stopping;
	uint64_t requests;
	uint64_t failed;
	char path[PATH_MAX]; /* as the VM config named it; the snapshot section keeps it */
};

/* ---- requests ---- */

static uint32_t blk_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t blk_le64(const uint8_t *p)
{
	return (uint64_t)blk_le32(p) | (uint64_t)blk_le32(p + 4) << 32;
}

/* Whether [sector, sector + data_len) is whole sectors inside the disk (overflow-safe). */
static bool blk_range_ok(const struct blk_disk *disk, uint64_t sector, uint64_t data_len)
{
	if (data_len % BLK_SECTOR_SIZE || data_len > BLK_REQUEST_MAX_BYTES)
		return false;
	return sector <= disk->capacity_sectors &&
	       data_len >> BLK_SECTOR_SHIFT <= disk->capacity_sectors - sector;
}

void blk_request_parse(const struct virtqueue_chain *chain, const struct blk_disk *disk,
		       struct blk_request *req)
{
	uint8_t header[BLK_HEADER_BYTES];

	memset(req, 0, sizeof(*req));
	req->status = VIRTIO_BLK_S_IOERR;
	req->has_status = chain->writable_len >= 1;
	if (!req->has_status || chain->readable_len < BLK_HEADER_BYTES ||
	    virtqueue_chain_read(chain, 0, header, sizeof(header)) != sizeof(header))
		return;
	req->type = blk_le32(header);
	req->sector = blk_le64(header + BLK_HEADER_SECTOR_OFFSET);
	switch (req->type) {
	case VIRTIO_BLK_T_IN:
		req->data_len = chain->writable_len - 1;
		if (chain->readable_len == BLK_HEADER_BYTES &&
		    blk_range_ok(disk, req->sector, req->data_len))
			req->status = VIRTIO_BLK_S_OK;
		break;
	case VIRTIO_BLK_T_OUT:
		req->data_len = chain->readable_len - BLK_HEADER_BYTES;
		if (!disk->read_only && blk_range_ok(disk, req->sector, req->data_len))
			req->status = VIRTIO_BLK_S_OK;
		break;
	case VIRTIO_BLK_T_FLUSH:
		req->status = VIRTIO_BLK_S_OK;
		break;
	case VIRTIO_BLK_T_GET_ID:
		req->data_len = chain->writable_len - 1 < BLK_SERIAL_BYTES ? chain->writable_len - 1
									    : BLK_SERIAL_BYTES;
		req->status = VIRTIO_BLK_S_OK;
		break;
	default:
		req->status = VIRTIO_BLK_S_UNSUPP;
		break;
	}
}

/*
 * Fills iov with the chain's buffers of one direction that cover [start, start + len) of that
 * direction's bytes; returns the iovec count.
 */
static int blk_chain_iov(const struct virtqueue_chain *chain, bool writable, uint64_t start,
			 uint64_t len, struct iovec *iov)
{
	uint64_t pos = 0, end = start + len;
	int count = 0;

	for (unsigned int i = 0; i < chain->buffer_count && pos < end; i++) {
		const struct virtqueue_buffer *buf = &chain->buffers[i];
		uint64_t from, to;

		if (buf->writable != writable)
			continue;
		from = start > pos ? start - pos : 0;
		to = end - pos < buf->len ? end - pos : buf->len;
		if (from < to)
			iov[count++] = (struct iovec){ .iov_base = buf->host + from,
						       .iov_len = (size_t)(to - from) };
		pos += buf->len;
	}
	return count;
}

/* Moves every byte of iov at offset, resuming short transfers; 0 or -errno (-EIO at EOF). */
static int blk_transfer(int fd, struct iovec *iov, int count, uint64_t offset, bool write)
{
	while (count > 0) {
		ssize_t done = write ? pwritev(fd, iov, count, (off_t)offset)
				     : preadv(fd, iov, count, (off_t)offset);

		if (done < 0 && errno == EINTR)
			continue;
		if (done < 0)
			return -errno;
		if (done == 0)
			return -EIO;
		offset += (uint64_t)done;
		while (count > 0 && (size_t)done >= iov->iov_len) {
			done -= (ssize_t)iov->iov_len;
			iov++;
			count--;
		}
		if (count > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + done;
			iov->iov_len -= (size_t)done;
		}
	}
	return 0;
}

uint32_t blk_disk_serve(const struct blk_disk *disk, const struct virtqueue_chain *chain,
			uint8_t *status)
{
	struct iovec iov[VIRTQUEUE_MAX_SIZE];
	struct blk_request req;
	uint32_t written = 0;
	int count, rc = 0;

	blk_request_parse(chain, disk, &req);
	*status = req.status;
	if (!req.has_status)
		return 0;
	if (req.status == VIRTIO_BLK_S_OK) {
		switch (req.type) {
		case VIRTIO_BLK_T_IN:
			count = blk_chain_iov(chain, true, 0, req.data_len, iov);
			rc = blk_transfer(disk->fd, iov, count, req.sector << BLK_SECTOR_SHIFT,
					  false);
			written = rc == 0 ? (uint32_t)req.data_len : 0;
			break;
		case VIRTIO_BLK_T_OUT:
			count = blk_chain_iov(chain, false, BLK_HEADER_BYTES, req.data_len, iov);
			rc = blk_transfer(disk->fd, iov, count, req.sector << BLK_SECTOR_SHIFT,
					  true);
			break;
		case VIRTIO_BLK_T_FLUSH:
			rc = disk->read_only || fdatasync(disk->fd) == 0 ? 0 : -errno;
			break;
		case VIRTIO_BLK_T_GET_ID:
			written = (uint32_t)virtqueue_chain_write(chain, 0, disk->serial,
								  (size_t)req.data_len);
			break;
		default:
			break;
		}
		if (rc < 0)
			*status = VIRTIO_BLK_S_IOERR;
	}
	virtqueue_chain_write(chain, chain->writable_len - 1, status, 1);
	return written + 1;
}

/* ---- the virtio device ---- */

/* Called with the device lock held. */
static void blk_serve_queue(struct blk_device *dev)
{
	bool served = false;
	int rc;

	if (!dev->queue || dev->queue->broken)
		return;
	while ((rc = virtqueue_pop(dev->queue, &dev->chain)) == 1) {
		uint8_t status = VIRTIO_BLK_S_IOERR;
		uint32_t written = blk_disk_serve(&dev->disk, &dev->chain, &status);

		if (virtqueue_push(dev->queue, dev->chain.head, written) < 0) {
			rc = -EIO;
			break;
		}
		dev->requests++;
		if (status != VIRTIO_BLK_S_OK)
			dev->failed++;
		served = true;
	}
	if (rc < 0)
		virtio_mmio_mark_broken(dev->transport);
	if (served && virtqueue_should_signal(dev->queue))
		virtio_mmio_signal_used(dev->transport);
}

static void *blk_worker(void *opaque)
{
	struct blk_device *dev = opaque;
	uint64_t kicks;

	vmm_thread_enter(VMM_THREAD_BLOCK_WORKER, BLK_WORKER_THREAD_NAME,
			 dev->mode == BLK_WORKER_CONFINED_THREAD);
	while (!atomic_load(&dev->stopping)) {
		if (read(dev->kick_fd, &kicks, sizeof(kicks)) < 0 && errno != EINTR &&
		    errno != EAGAIN)
			break;
		if (atomic_load(&dev->stopping))
			break;
		pthread_mutex_lock(&dev->lock);
		blk_serve_queue(dev);
		pthread_mutex_unlock(&dev->lock);
	}
	return NULL;
}

static void blk_kick(struct blk_device *dev)
{
	uint64_t one = 1;

	if (write(dev->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn(BLK_LOG, "cannot wake the disk worker for %s: %s", dev->path,
			 strerror(errno));
}

static void blk_queue_notify(void *opaque, unsigned int queue_index)
{
	struct blk_device *dev = opaque;

	(void)queue_index;
	if (dev->mode != BLK_WORKER_CALLER) {
		blk_kick(dev);
		return;
	}
	pthread_mutex_lock(&dev->lock);
	blk_serve_queue(dev);
	pthread_mutex_unlock(&dev->lock);
}

static void blk_put_le(uint8_t *out, uint64_t value, unsigned int bytes)
{
	for (unsigned int i = 0; i < bytes; i++)
		out[i] = (uint8_t)(value >> (BLK_BITS_PER_BYTE * i));
}

static void blk_config_read(void *opaque, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct blk_device *dev = opaque;
	uint8_t config[BLK_CONFIG_SIZE] = { 0 };

	blk_put_le(config + BLK_CONFIG_CAPACITY, dev->disk.capacity_sectors, sizeof(uint64_t));
	blk_put_le(config + BLK_CONFIG_SIZE_MAX, BLK_SIZE_MAX, sizeof(uint32_t));
	blk_put_le(config + BLK_CONFIG_SEG_MAX, BLK_SEG_MAX, sizeof(uint32_t));
	blk_put_le(config + BLK_CONFIG_BLK_SIZE, BLK_SECTOR_SIZE, sizeof(uint32_t));
	if (offset < sizeof(config) && len <= sizeof(config) - offset)
		memcpy(data, config + offset, len);
	else
		memset(data, 0, len);
}

static int blk_activate(void *opaque, struct virtqueue *queues, unsigned int queue_count,
			uint64_t driver_features)
{
	struct blk_device *dev = opaque;

	(void)driver_features;
	if (queue_count != BLK_QUEUE_COUNT || !queues[0].configured)
		return -EINVAL;
	dev->queue = &queues[0];
	/*
	 * A restored device starts with whatever the guest queued before the snapshot, and the
	 * guest will not notify for those again: serve them now (a fresh ring is empty).
	 */
	if (dev->mode != BLK_WORKER_CALLER)
		blk_kick(dev);
	else
		blk_serve_queue(dev);
	return 0;
}

static void blk_reset(void *opaque)
{
	struct blk_device *dev = opaque;

	dev->queue = NULL;
}

static void blk_free(struct blk_device *dev)
{
	if (dev->worker_started) {
		atomic_store(&dev->stopping, true);
		blk_kick(dev);
		pthread_join(dev->worker, NULL);
	}
	virtio_mmio_destroy(dev->transport);
	if (dev->kick_fd >= 0)
		close(dev->kick_fd);
	if (dev->disk.fd >= 0)
		close(dev->disk.fd);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

struct blk_device *blk_device_create(const struct guest_memory *mem, struct irq_line irq,
				     const struct blk_disk *disk, enum blk_worker_mode mode,
				     char *err, size_t errlen)
{
	struct blk_device *dev = calloc(1, sizeof(*dev));
	int rc;

	if (!dev) {
		snprintf(err, errlen, "out of memory creating a disk device");
		return NULL;
	}
	pthread_mutex_init(&dev->lock, NULL);
	dev->disk = *disk;
	dev->mode = mode;
	dev->kick_fd = eventfd(0, EFD_CLOEXEC);
	dev->ops = (struct virtio_device_ops){
		.device_id = VIRTIO_ID_BLOCK,
		.features = 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_RING_F_INDIRECT_DESC |
			    1ull << VIRTIO_RING_F_EVENT_IDX | 1ull << VIRTIO_BLK_F_SIZE_MAX |
			    1ull << VIRTIO_BLK_F_SEG_MAX | 1ull << VIRTIO_BLK_F_FLUSH |
			    (disk->read_only ? 1ull << VIRTIO_BLK_F_RO : 0),
		.queue_count = BLK_QUEUE_COUNT,
		.queue_num_max = BLK_QUEUE_NUM_MAX,
		.config_size = BLK_CONFIG_SIZE,
		.config_read = blk_config_read,
		.queue_notify = blk_queue_notify,
		.activate = blk_activate,
		.reset = blk_reset,
	};
	struct virtio_mmio_config transport_cfg = {
		.ops = &dev->ops, .opaque = dev, .mem = mem, .irq = irq,
		.device_lock = &dev->lock,
	};

	dev->transport = virtio_mmio_create(&transport_cfg);
	if (dev->kick_fd < 0 || !dev->transport) {
		snprintf(err, errlen, "cannot create a disk device: %s",
			 dev->kick_fd < 0 ? strerror(errno) : "out of memory");
		goto fail;
	}
	if (mode != BLK_WORKER_CALLER) {
		rc = pthread_create(&dev->worker, NULL, blk_worker, dev);
		if (rc != 0) {
			snprintf(err, errlen, "cannot start a disk worker thread: %s",
				 strerror(rc));
			goto fail;
		}
		dev->worker_started = true;
	}
	return dev;
fail:
	dev->disk.fd = -1; /* the caller still owns it */
	blk_free(dev);
	return NULL;
}

void blk_device_destroy(struct blk_device *dev)
{
	if (dev)
		blk_free(dev);
}

struct virtio_mmio *blk_device_transport(struct blk_device *dev)
{
	return dev->transport;
}

uint64_t blk_device_requests(struct blk_device *dev, uint64_t *failed)
{
	pthread_mutex_lock(&dev->lock);
	uint64_t requests = dev->requests;

	if (failed)
		*failed = dev->failed;
	pthread_mutex_unlock(&dev->lock);
	return requests;
}

/* ---- the disk file ---- */

static void blk_identity_of(const struct stat *st, struct blk_identity *id)
{
	*id = (struct blk_identity){ .size = (uint64_t)st->st_size, .inode = (uint64_t)st->st_ino,
				     .mtime_sec = st->st_mtim.tv_sec,
				     .mtime_nsec = (uint32_t)st->st_mtim.tv_nsec };
}

static bool blk_identity_equal(const struct blk_identity *a, const struct blk_identity *b)
{
	return a->size == b->size && a->inode == b->inode && a->mtime_sec == b->mtime_sec &&
	       a->mtime_nsec == b->mtime_nsec;
}

/* The serial the guest reads in /sys/block/vdX/serial: the file's name, printable. */
static void blk_serial_from_path(const char *path, char *serial)
{
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;

	memset(serial, 0, BLK_SERIAL_BYTES);
	for (size_t i = 0; i < BLK_SERIAL_BYTES && name[i]; i++)
		serial[i] = name[i] > ' ' && name[i] < 0x7f ? name[i] : '_';
}

int blk_disk_open(const char *path, bool read_only, const struct blk_identity *expect,
		  struct blk_disk *disk, struct blk_identity *id, char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	int rc;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open the disk %s%s: %s", path,
			 read_only ? "" : " for writing (add :ro to attach it read-only)",
			 strerror(-rc));
		return rc;
	}
	if (flock(fd, (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
		rc = -errno;
		snprintf(err, errlen, "the disk %s is in use by another VM%s%s%s", path,
			 read_only ? " that writes it" : " (a writable disk belongs to one VM)",
			 rc == -EWOULDBLOCK ? "" : ": ", rc == -EWOULDBLOCK ? "" : strerror(-rc));
		goto fail;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < BLK_SECTOR_SIZE) {
		rc = -EINVAL;
		snprintf(err, errlen, "the disk %s must be a regular file of at least %u bytes",
			 path, BLK_SECTOR_SIZE);
		goto fail;
	}
	blk_identity_of(&st, id);
	if (expect && !blk_identity_equal(expect, id)) {
		rc = -ESTALE;
		snprintf(err, errlen, "the disk %s changed since the snapshot was taken (size, "
			 "inode or modification time differ): the snapshot's guest expects the "
			 "disk as it was; put that file back or take the snapshot again", path);
		goto fail;
	}
	if (st.st_size % BLK_SECTOR_SIZE)
		log_warn(BLK_LOG, "the disk %s is not whole 512-byte sectors: its last %lld bytes "
			 "are out of the guest's reach", path,
			 (long long)(st.st_size % BLK_SECTOR_SIZE));
	*disk = (struct blk_disk){ .fd = fd, .read_only = read_only,
				   .capacity_sectors = (uint64_t)st.st_size >> BLK_SECTOR_SHIFT };
	blk_serial_from_path(path, disk->serial);
	return 0;
fail:
	close(fd);
	return rc;
}

/* ---- as a VM device ---- */

/* The section's head: what a restore needs before it can create the device. */
static void blk_write_identity(struct byte_writer *out, const struct blk_device *dev,
			       const struct blk_identity *id)
{
	byte_writer_u8(out, dev->disk.read_only);
	byte_writer_string(out, dev->path);
	byte_writer_u64(out, id->size);
	byte_writer_u64(out, id->inode);
	byte_writer_u64(out, (uint64_t)id->mtime_sec);
	byte_writer_u32(out, id->mtime_nsec);
}

static void blk_read_identity(struct byte_reader *in, bool *read_only, char *path, size_t cap,
			      struct blk_identity *id)
{
	uint8_t ro = byte_reader_u8(in);

	if (ro > 1)
		byte_reader_fail(in);
	*read_only = ro == 1;
	byte_reader_string(in, path, cap);
	id->size = byte_reader_u64(in);
	id->inode = byte_reader_u64(in);
	id->mtime_sec = (int64_t)byte_reader_u64(in);
	id->mtime_nsec = byte_reader_u32(in);
}

static int blk_vm_save(void *opaque, struct byte_writer *out)
{
	struct blk_device *dev = opaque;
	struct virtio_mmio_state state;
	struct blk_identity id;
	struct stat st;

	/* dev->lock stays held until blk_vm_resume: no request runs */
	virtio_mmio_state_get_held(dev->transport, &state);
	if (fstat(dev->disk.fd, &st) < 0)
		return -errno;
	blk_identity_of(&st, &id);
	blk_write_identity(out, dev, &id);
	virtio_mmio_state_write(out, &state);
	return 0;
}

static void blk_vm_resume(void *opaque)
{
	struct blk_device *dev = opaque;

	pthread_mutex_unlock(&dev->lock);
}

static int blk_vm_restore(void *opaque, struct byte_reader *in, uint32_t version, char *err,
			  size_t errlen)
{
	struct blk_device *dev = opaque;
	struct virtio_mmio_state state;
	struct blk_identity id;
	char path[PATH_MAX];
	bool read_only;
	int rc;

	(void)version;
	blk_read_identity(in, &read_only, path, sizeof(path), &id);
	virtio_mmio_state_read(in, &state);
	if (byte_reader_finish(in) < 0 || read_only != dev->disk.read_only ||
	    strcmp(path, dev->path) != 0) {
		snprintf(err, errlen, "the disk device's saved state is malformed: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	rc = virtio_mmio_state_set(dev->transport, &state);
	if (rc < 0)
		snprintf(err, errlen, "the disk device for %s refused its saved state: %s", path,
			 strerror(-rc));
	return rc;
}

static void blk_vm_destroy(void *opaque)
{
	blk_free(opaque);
}

extern const struct vm_device_type blk_device_type;

static const struct vm_device_ops blk_vm_ops = {
	.state_version = BLK_STATE_VERSION,
	.save = blk_vm_save,
	.resume = blk_vm_resume,
	.restore = blk_vm_restore,
	.destroy = blk_vm_destroy,
};

/* What blk_attach_create builds on: the open disk, whose fd the device takes on success. */
struct blk_attach_ctx {
	const char *path;
	struct blk_disk disk;
	bool confine; /* the worker runs under its seccomp filter (the VM's thread filters are on) */
	bool taken;
};

static int blk_attach_create(void *opaque, const struct guest_memory *mem, struct irq_line irq,
			     struct virtio_attached *out, char *err, size_t errlen)
{
	struct blk_attach_ctx *ctx = opaque;
	struct blk_device *dev = blk_device_create(mem, irq, &ctx->disk,
						   ctx->confine ? BLK_WORKER_CONFINED_THREAD :
								  BLK_WORKER_THREAD,
						   err, errlen);

	if (!dev)
		return -ENOMEM;
	ctx->taken = true;
	snprintf(dev->path, sizeof(dev->path), "%s", ctx->path);
	out->dev = dev;
	out->transport = dev->transport;
	return 0;
}

/* Opens one disk (the config's, or the one a snapshot section names) and attaches it. */
static int blk_vm_attach(struct vm *vm, const char *path, bool read_only,
			 const struct blk_identity *saved_id, char *err, size_t errlen)
{
	struct blk_attach_ctx ctx = { .path = path, .confine = vm_thread_filters_on(vm) };
	char what[PATH_MAX + sizeof("the disk ")];
	const struct virtio_attach spec = {
		.type = &blk_device_type, .what = what, .create = blk_attach_create, .ctx = &ctx,
	};
	struct blk_identity id;
	int rc;

	if (strlen(path) >= sizeof(((struct blk_device *)NULL)->path)) {
		snprintf(err, errlen, "the disk path %.64s... is too long", path);
		return -ENAMETOOLONG;
	}
	snprintf(what, sizeof(what), "the disk %s", path);
	rc = blk_disk_open(path, read_only, saved_id, &ctx.disk, &id, err, errlen);
	if (rc < 0)
		return rc;
	rc = virtio_attach(vm, &spec, err, errlen);
	if (rc < 0 && !ctx.taken)
		close(ctx.disk.fd);
	return rc;
}

/* The identity at the head of a restore's section: 0, or -EBADMSG with err set. */
static int blk_read_section(const struct vm_device_section *saved, bool *read_only,
			    char path[PATH_MAX], struct blk_identity *id, char *err, size_t errlen)
{
	struct byte_reader in;

	byte_reader_init(&in, saved->state, saved->state_len);
	blk_read_identity(&in, read_only, path, PATH_MAX, id);
	if (!in.failed && path[0])
		return 0;
	snprintf(err, errlen, "a disk section of the snapshot is malformed: take the snapshot "
		 "again");
	return -EBADMSG;
}

/* A cold boot attaches every disk the config lists; a restore, the one its section names. */
static int blk_vm_create(struct vm *vm, const struct vm_config *cfg,
			 const struct vm_device_section *saved, char *err, size_t errlen)
{
	int rc = 0;

	if (saved) {
		struct blk_identity id;
		char path[PATH_MAX];
		bool read_only;

		rc = blk_read_section(saved, &read_only, path, &id, err, errlen);
		return rc < 0 ? rc : blk_vm_attach(vm, path, read_only, &id, err, errlen);
	}
	if (cfg->disk_count > VM_MAX_DISKS) {
		snprintf(err, errlen, "%u disks asked for; a VM takes at most %u", cfg->disk_count,
			 VM_MAX_DISKS);
		return -E2BIG;
	}
	for (unsigned int i = 0; rc == 0 && i < cfg->disk_count; i++)
		rc = blk_vm_attach(vm, cfg->disks[i].path, cfg->disks[i].read_only, NULL, err,
				   errlen);
	return rc;
}

/* The disk a restore opens: the path its section names, read-only where the disk was. */
static int blk_vm_host_paths(const struct vm_device_section *saved, vm_host_path_fn each,
			     void *opaque, char *err, size_t errlen)
{
	struct blk_identity id;
	char path[PATH_MAX];
	bool read_only;
	int rc = blk_read_section(saved, &read_only, path, &id, err, errlen);

	if (rc < 0)
		return rc;
	return each(&(const struct vm_host_path){
			    .path = path,
			    .access = read_only ? VM_HOST_PATH_READ_ONLY : VM_HOST_PATH_READ_WRITE,
			    .use = VM_HOST_PATH_AT_CREATION,
		    },
		    opaque);
}

const struct vm_device_type blk_device_type = {
	.name = "blk",
	.ops = &blk_vm_ops,
	.create = blk_vm_create,
	.host_paths = blk_vm_host_paths,
};
