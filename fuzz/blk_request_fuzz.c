/*
 * libFuzzer target for virtio-blk requests: the input is a small guest's RAM (descriptor
 * table, avail ring, headers, data), exactly what a hostile guest controls, served against a
 * 32 KiB disk held in a memfd. The first two bytes pick the queue size and whether the disk
 * is read-only. Every chain the virtqueue walker accepts goes through blk_disk_serve; the
 * target aborts when the device writes more than the chain holds, when a refused request is
 * reported OK, or when a read-only disk's bytes change.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "devices/blk.h"
#include "devices/virtqueue.h"
#include "fuzz_guest_ram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_HEADER_BYTES 2u
#define FUZZ_SIZE_CHOICES 8u /* 1 .. 128, the device's queue sizes */
#define FUZZ_MAX_POPS (2u * VIRTQUEUE_MAX_SIZE + 1u)
#define FUZZ_DISK_SECTORS 64u
#define FUZZ_DISK_BYTES (FUZZ_DISK_SECTORS * BLK_SECTOR_SIZE)
#define FUZZ_DISK_FILL 0xa5

static int fuzz_disk_fd = -1;
static uint8_t fuzz_disk_before[FUZZ_DISK_BYTES];
static uint8_t fuzz_disk_after[FUZZ_DISK_BYTES];

static int fuzz_disk_reset(void)
{
	if (fuzz_disk_fd < 0)
		fuzz_disk_fd = memfd_create("blk-fuzz-disk", MFD_CLOEXEC);
	if (fuzz_disk_fd < 0)
		return -1;
	memset(fuzz_disk_before, FUZZ_DISK_FILL, sizeof(fuzz_disk_before));
	return pwrite(fuzz_disk_fd, fuzz_disk_before, sizeof(fuzz_disk_before), 0) ==
		       (ssize_t)sizeof(fuzz_disk_before) ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct virtqueue_chain chain;
	static bool logging_configured;
	struct guest_memory mem;
	struct blk_disk disk = { .capacity_sectors = FUZZ_DISK_SECTORS };
	struct virtqueue vq;
	uint16_t queue_size;
	uint8_t *ram;

	if (!logging_configured) {
		log_set_level_name(getenv(LOG_LEVEL_ENV));
		logging_configured = true;
	}
	if (size < FUZZ_HEADER_BYTES || fuzz_disk_reset() < 0)
		return 0;
	queue_size = (uint16_t)(1u << (data[0] % FUZZ_SIZE_CHOICES));
	disk.read_only = data[1] & 1u;
	disk.fd = fuzz_disk_fd;
	memcpy(disk.serial, "fuzz-disk", sizeof("fuzz-disk") - 1);
	data += FUZZ_HEADER_BYTES;
	size -= FUZZ_HEADER_BYTES;

	ram = fuzz_guest_ram(data, size, queue_size, VIRTQUEUE_INDIRECT | VIRTQUEUE_EVENT_IDX,
			     &mem, &vq);
	if (!ram)
		return 0;
	for (unsigned int n = 0; n < FUZZ_MAX_POPS; n++) {
		struct blk_request req;
		uint8_t status = 0;
		uint32_t written;

		if (virtqueue_pop(&vq, &chain) <= 0)
			break;
		blk_request_parse(&chain, &disk, &req);
		written = blk_disk_serve(&disk, &chain, &status);
		if (written > chain.writable_len || (!req.has_status && written != 0))
			abort();
		if (req.status != VIRTIO_BLK_S_OK && status != req.status)
			abort();
		if (virtqueue_push(&vq, chain.head, written))
			abort();
	}
	if (disk.read_only &&
	    (pread(fuzz_disk_fd, fuzz_disk_after, sizeof(fuzz_disk_after), 0) !=
		     (ssize_t)sizeof(fuzz_disk_after) ||
	     memcmp(fuzz_disk_before, fuzz_disk_after, sizeof(fuzz_disk_after)) != 0))
		abort();
	free(ram);
	return 0;
}
