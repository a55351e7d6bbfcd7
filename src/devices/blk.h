/*
 * virtio-blk: host files as the guest's /dev/vda, /dev/vdb... As a VM device it is registered
 * as "blk" (src/devices/registry.c), one device per disk the vm_config lists. The request
 * parser and the single-request server are public so unit tests and the fuzzer feed them
 * hostile chains without a VM; the device calls let tests drive it through its registers.
 */
#ifndef VOIDBOX_DEVICES_BLK_H
#define VOIDBOX_DEVICES_BLK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/virtio_mmio.h"
#include "devices/virtqueue.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define BLK_SECTOR_SIZE 512u
#define BLK_SECTOR_SHIFT 9u
/* The request header: type, reserved, sector (VIRTIO 1.2 §5.2.6). */
#define BLK_HEADER_BYTES 16u
/* VIRTIO_BLK_T_GET_ID answers with this many bytes, NUL-padded. */
#define BLK_SERIAL_BYTES 20u

/* Request types (VIRTIO 1.2 §5.2.6). */
enum blk_request_type {
	VIRTIO_BLK_T_IN = 0,
	VIRTIO_BLK_T_OUT = 1,
	VIRTIO_BLK_T_FLUSH = 4,
	VIRTIO_BLK_T_GET_ID = 8,
};

/* The status byte the device writes last. */
enum blk_status {
	VIRTIO_BLK_S_OK = 0,
	VIRTIO_BLK_S_IOERR = 1,
	VIRTIO_BLK_S_UNSUPP = 2,
};

/* The disk a request runs against. */
struct blk_disk {
	int fd;
	uint64_t capacity_sectors;
	bool read_only;
	char serial[BLK_SERIAL_BYTES]; /* NUL-padded, not necessarily terminated */
};

/* What a snapshot remembers of a disk file, to refuse one that changed under it. */
struct blk_identity {
	uint64_t size;
	uint64_t inode;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
};

/*
 * Opens and locks (flock: shared read-only, exclusive read-write) a disk file and fills disk
 * (fd, capacity, serial from the file name) and *id. With expect set, a file whose identity
 * differs is refused with -ESTALE. 0 or -errno with a sentence in err naming the file.
 */
int blk_disk_open(const char *path, bool read_only, const struct blk_identity *expect,
		  struct blk_disk *disk, struct blk_identity *id, char *err, size_t errlen);

/* A request as parsed from a chain; the I/O is only done when status is VIRTIO_BLK_S_OK. */
struct blk_request {
	uint32_t type;
	uint64_t sector;
	uint64_t data_len;  /* bytes to move: readable after the header (OUT), writable before
			     * the status byte (IN, GET_ID) */
	bool has_status;    /* false: no writable byte to report in; the chain is returned empty */
	uint8_t status;
};

/* Checks a chain against the disk: every bound, before any I/O. Never fails itself. */
void blk_request_parse(const struct virtqueue_chain *chain, const struct blk_disk *disk,
		       struct blk_request *req);

/*
 * Parses and performs one request, writes its status byte (also returned in *status), and
 * returns the bytes the device wrote into the chain (data and status), for the used ring.
 */
uint32_t blk_disk_serve(const struct blk_disk *disk, const struct virtqueue_chain *chain,
			uint8_t *status);

/*
 * Where requests are served: a worker thread (confined by the disk role's seccomp filter,
 * vmm/thread_filter.h, or not), or the notifying thread (tests, the fuzzer).
 */
enum blk_worker_mode {
	BLK_WORKER_THREAD,
	BLK_WORKER_CALLER,
	BLK_WORKER_CONFINED_THREAD,
};

struct blk_device;

/* Takes ownership of disk->fd (closed on destroy). NULL with err set on failure. */
struct blk_device *blk_device_create(const struct guest_memory *mem, struct irq_line irq,
				     const struct blk_disk *disk, enum blk_worker_mode mode,
				     char *err, size_t errlen);
void blk_device_destroy(struct blk_device *dev);
struct virtio_mmio *blk_device_transport(struct blk_device *dev);
/* Requests completed so far, and how many of them failed. */
uint64_t blk_device_requests(struct blk_device *dev, uint64_t *failed);

#endif
