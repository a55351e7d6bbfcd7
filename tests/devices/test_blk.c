/*
 * virtio-blk: the request parser on hand-made hostile chains (short header, missing status,
 * sectors and lengths past the end or wrapping, partial sectors, writes to a read-only
 * disk, unknown types), and the device driven through its registers by the fake driver on a
 * temporary disk file: config space and features, a write read back byte-exact through
 * several descriptors and in one, GET_ID, FLUSH, a refused request that leaves the file
 * alone and the device working, the worker thread, and the disk lock and identity check that
 * keep a snapshot from restoring onto a disk that changed.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk.h"
#include "fake_guest.h"
#include "harness.h"

#define TEST_DISK_SECTORS 64u
#define TEST_DISK_BYTES (TEST_DISK_SECTORS * BLK_SECTOR_SIZE)
#define TEST_HEADER_GPA 0x100000u
#define TEST_DATA_GPA 0x200000u
#define TEST_DATA2_GPA 0x280000u
#define TEST_STATUS_GPA 0x300000u
#define TEST_QUEUE 0
#define TEST_ERR_MAX 512
#define TEST_STATUS_UNTOUCHED 0xeeu
#define TEST_WAIT_SPINS 10000000L
#define TEST_FEATURE_RO 5
#define TEST_FEATURE_FLUSH 9
#define TEST_CONFIG_SIZE_MAX 8u
#define TEST_CONFIG_SEG_MAX 12u

struct blk_fixture {
	struct fake_guest guest;
	struct blk_device *dev;
	char path[64];
};

static int make_disk_file(char *path, size_t size, uint64_t bytes)
{
	int fd;

	snprintf(path, size, "/tmp/voidbox-test-blk-XXXXXX");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)bytes) < 0) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int fixture_init(struct blk_fixture *f, bool read_only, enum blk_worker_mode mode)
{
	char err[TEST_ERR_MAX];
	struct blk_identity id;
	struct blk_disk disk;

	memset(f, 0, sizeof(*f));
	if (make_disk_file(f->path, sizeof(f->path), TEST_DISK_BYTES) < 0 ||
	    fake_guest_init(&f->guest))
		return -1;
	if (blk_disk_open(f->path, read_only, NULL, &disk, &id, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	f->dev = blk_device_create(&f->guest.mem, fake_guest_irq(&f->guest), &disk, mode, err,
				   sizeof(err));
	if (!f->dev)
		return -1;
	return fake_guest_setup(&f->guest, blk_device_transport(f->dev), 1, ~0ull) &
			       VIRTIO_STATUS_DRIVER_OK ? 0 : -1;
}

static void fixture_free(struct blk_fixture *f)
{
	blk_device_destroy(f->dev);
	fake_guest_free(&f->guest);
	unlink(f->path);
}

static void put_header(struct blk_fixture *f, uint32_t type, uint64_t sector)
{
	uint8_t *h = fake_guest_host(&f->guest, TEST_HEADER_GPA);

	memset(h, 0, BLK_HEADER_BYTES);
	memcpy(h, &type, sizeof(type));
	memcpy(h + 8, &sector, sizeof(sector));
}

/* Waits for the one used element (the worker thread may still be at it). */
static bool wait_used(struct blk_fixture *f, uint32_t *used_len)
{
	uint32_t id;

	for (long spin = 0; spin < TEST_WAIT_SPINS; spin++) {
		if (fake_guest_pop_used(&f->guest, TEST_QUEUE, &id, used_len))
			return true;
		sched_yield();
	}
	return false;
}

/* Header, one data buffer of len bytes (writable for reads), status; returns the status. */
static int simple_request(struct blk_fixture *f, uint32_t type, uint64_t sector, uint32_t len,
			  uint32_t *used_len)
{
	uint16_t data_flags = type == VIRTIO_BLK_T_OUT ? 0 : VIRTQ_DESC_F_WRITE;
	uint8_t *status = fake_guest_host(&f->guest, TEST_STATUS_GPA);

	put_header(f, type, sector);
	*status = TEST_STATUS_UNTOUCHED;
	fake_guest_set_desc(&f->guest, TEST_QUEUE, 0, TEST_HEADER_GPA, BLK_HEADER_BYTES,
			    VIRTQ_DESC_F_NEXT, 1);
	if (len) {
		fake_guest_set_desc(&f->guest, TEST_QUEUE, 1, TEST_DATA_GPA, len,
				    data_flags | VIRTQ_DESC_F_NEXT, 2);
		fake_guest_set_desc(&f->guest, TEST_QUEUE, 2, TEST_STATUS_GPA, 1,
				    VIRTQ_DESC_F_WRITE, 0);
	} else {
		fake_guest_set_desc(&f->guest, TEST_QUEUE, 1, TEST_STATUS_GPA, 1,
				    VIRTQ_DESC_F_WRITE, 0);
	}
	fake_guest_publish(&f->guest, TEST_QUEUE, 0);
	fake_guest_notify(&f->guest, TEST_QUEUE);
	if (!wait_used(f, used_len))
		return -1;
	return *status;
}

static void fill_pattern(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 7u);
}

/* ---- the parser on hand-made chains ---- */

struct hand_chain {
	struct virtqueue_chain chain;
	uint8_t header[BLK_HEADER_BYTES];
	uint8_t data[2 * BLK_SECTOR_SIZE];
	uint8_t status;
};

static void hand_add(struct hand_chain *c, void *host, uint32_t len, bool writable)
{
	c->chain.buffers[c->chain.buffer_count++] =
		(struct virtqueue_buffer){ .host = host, .len = len, .writable = writable };
	if (writable)
		c->chain.writable_len += len;
	else
		c->chain.readable_len += len;
}

static void hand_header(struct hand_chain *c, uint32_t type, uint64_t sector)
{
	memset(c, 0, sizeof(*c));
	memcpy(c->header, &type, sizeof(type));
	memcpy(c->header + 8, &sector, sizeof(sector));
}

static struct blk_disk test_disk(bool read_only)
{
	struct blk_disk disk = { .fd = -1, .capacity_sectors = TEST_DISK_SECTORS,
				 .read_only = read_only };

	memcpy(disk.serial, "serial", sizeof("serial") - 1);
	return disk;
}

static uint8_t parse_status(struct hand_chain *c, bool read_only)
{
	struct blk_disk disk = test_disk(read_only);
	struct blk_request req;

	blk_request_parse(&c->chain, &disk, &req);
	return req.status;
}

static void test_parse_good_requests(void)
{
	struct hand_chain c;
	struct blk_disk disk = test_disk(false);
	struct blk_request req;

	hand_header(&c, VIRTIO_BLK_T_IN, TEST_DISK_SECTORS - 2);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, sizeof(c.data), true);
	hand_add(&c, &c.status, 1, true);
	blk_request_parse(&c.chain, &disk, &req);
	CHECK_INT_EQ(req.status, VIRTIO_BLK_S_OK);
	CHECK(req.has_status && req.data_len == sizeof(c.data));

	hand_header(&c, VIRTIO_BLK_T_OUT, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, BLK_SECTOR_SIZE, false);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_OK);

	hand_header(&c, VIRTIO_BLK_T_FLUSH, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, true), VIRTIO_BLK_S_OK);
}

static void test_parse_hostile_requests(void)
{
	struct hand_chain c;
	struct blk_disk disk = test_disk(false);
	struct blk_request req;

	/* no writable byte: nowhere to put a status */
	hand_header(&c, VIRTIO_BLK_T_IN, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, sizeof(c.data), false);
	blk_request_parse(&c.chain, &disk, &req);
	CHECK(!req.has_status && req.status != VIRTIO_BLK_S_OK);

	/* header shorter than 16 bytes */
	hand_header(&c, VIRTIO_BLK_T_IN, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES - 1, false);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* no header at all, only a status */
	hand_header(&c, VIRTIO_BLK_T_IN, 0);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* first sector past the end */
	hand_header(&c, VIRTIO_BLK_T_IN, TEST_DISK_SECTORS);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, BLK_SECTOR_SIZE, true);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* starts inside, runs past the end */
	hand_header(&c, VIRTIO_BLK_T_OUT, TEST_DISK_SECTORS - 1);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, 2 * BLK_SECTOR_SIZE, false);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* a sector whose byte offset wraps 64 bits */
	hand_header(&c, VIRTIO_BLK_T_IN, UINT64_MAX - 1);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, 2 * BLK_SECTOR_SIZE, true);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* a partial sector */
	hand_header(&c, VIRTIO_BLK_T_IN, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, BLK_SECTOR_SIZE - 1, true);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* a read that also carries data to write */
	hand_header(&c, VIRTIO_BLK_T_IN, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, BLK_SECTOR_SIZE, false);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_IOERR);

	/* a write to a read-only disk */
	hand_header(&c, VIRTIO_BLK_T_OUT, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, BLK_SECTOR_SIZE, false);
	hand_add(&c, &c.status, 1, true);
	CHECK_INT_EQ(parse_status(&c, true), VIRTIO_BLK_S_IOERR);

	/* types the device does not do (discard, write zeroes, made up) */
	for (uint32_t type = 11; type <= 14; type += 3) {
		hand_header(&c, type, 0);
		hand_add(&c, c.header, BLK_HEADER_BYTES, false);
		hand_add(&c, &c.status, 1, true);
		CHECK_INT_EQ(parse_status(&c, false), VIRTIO_BLK_S_UNSUPP);
	}
}

/* blk_disk_serve on a hostile chain writes only the status byte. */
static void test_serve_refused_touches_only_status(void)
{
	struct hand_chain c;
	struct blk_disk disk = test_disk(false);
	uint8_t status = 0;
	uint32_t written;

	hand_header(&c, VIRTIO_BLK_T_IN, TEST_DISK_SECTORS);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	hand_add(&c, c.data, BLK_SECTOR_SIZE, true);
	hand_add(&c, &c.status, 1, true);
	memset(c.data, 0x5a, sizeof(c.data));
	written = blk_disk_serve(&disk, &c.chain, &status);
	CHECK_INT_EQ(written, 1);
	CHECK_INT_EQ(status, VIRTIO_BLK_S_IOERR);
	CHECK_INT_EQ(c.status, VIRTIO_BLK_S_IOERR);
	CHECK_INT_EQ(c.data[0], 0x5a);

	/* no status byte: nothing written at all */
	hand_header(&c, VIRTIO_BLK_T_GET_ID, 0);
	hand_add(&c, c.header, BLK_HEADER_BYTES, false);
	CHECK_INT_EQ(blk_disk_serve(&disk, &c.chain, &status), 0);
}

/* ---- the device through its registers ---- */

static void test_config_and_features(void)
{
	struct blk_fixture f;
	struct virtio_mmio *t;
	uint64_t capacity;

	CHECK_INT_EQ(fixture_init(&f, true, BLK_WORKER_CALLER), 0);
	t = blk_device_transport(f.dev);
	CHECK_INT_EQ(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_ID), VIRTIO_ID_BLOCK);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES) & 1u << TEST_FEATURE_RO);
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES) & 1u << TEST_FEATURE_FLUSH);
	capacity = virtio_mmio_read32(t, VIRTIO_MMIO_CONFIG) |
		   (uint64_t)virtio_mmio_read32(t, VIRTIO_MMIO_CONFIG + 4) << 32;
	CHECK(capacity == TEST_DISK_SECTORS);
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_CONFIG + TEST_CONFIG_SIZE_MAX) > 0);
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_CONFIG + TEST_CONFIG_SEG_MAX) > 0);
	fixture_free(&f);

	CHECK_INT_EQ(fixture_init(&f, false, BLK_WORKER_CALLER), 0);
	t = blk_device_transport(f.dev);
	virtio_mmio_write32(t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	CHECK(!(virtio_mmio_read32(t, VIRTIO_MMIO_DEVICE_FEATURES) & 1u << TEST_FEATURE_RO));
	fixture_free(&f);
}

static void check_write_read_back(enum blk_worker_mode mode)
{
	struct blk_fixture f;
	uint8_t expect[2 * BLK_SECTOR_SIZE], disk_bytes[2 * BLK_SECTOR_SIZE];
	uint8_t *data, *data2, *status;
	uint32_t used = 0;
	int fd;

	CHECK_INT_EQ(fixture_init(&f, false, mode), 0);
	data = fake_guest_host(&f.guest, TEST_DATA_GPA);
	fill_pattern(expect, sizeof(expect), 3);
	memcpy(data, expect, sizeof(expect));
	CHECK_INT_EQ(simple_request(&f, VIRTIO_BLK_T_OUT, 5, sizeof(expect), &used),
		     VIRTIO_BLK_S_OK);
	CHECK_INT_EQ(used, 1);
	fd = open(f.path, O_RDONLY);
	CHECK(pread(fd, disk_bytes, sizeof(disk_bytes), 5 * BLK_SECTOR_SIZE) ==
	      (ssize_t)sizeof(disk_bytes));
	close(fd);
	CHECK(memcmp(disk_bytes, expect, sizeof(expect)) == 0);

	/* read back into two descriptors, the first one ending mid-sector */
	data2 = fake_guest_host(&f.guest, TEST_DATA2_GPA);
	status = fake_guest_host(&f.guest, TEST_STATUS_GPA);
	memset(data, 0, sizeof(expect));
	memset(data2, 0, sizeof(expect));
	*status = TEST_STATUS_UNTOUCHED;
	put_header(&f, VIRTIO_BLK_T_IN, 5);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 3, TEST_HEADER_GPA, BLK_HEADER_BYTES,
			    VIRTQ_DESC_F_NEXT, 4);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 4, TEST_DATA_GPA, 100,
			    VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 5);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 5, TEST_DATA2_GPA, sizeof(expect) - 100,
			    VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 6);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 6, TEST_STATUS_GPA, 1, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&f.guest, TEST_QUEUE, 3);
	fake_guest_notify(&f.guest, TEST_QUEUE);
	CHECK(wait_used(&f, &used));
	CHECK_INT_EQ(*status, VIRTIO_BLK_S_OK);
	CHECK_INT_EQ(used, sizeof(expect) + 1);
	CHECK(memcmp(data, expect, 100) == 0);
	CHECK(memcmp(data2, expect + 100, sizeof(expect) - 100) == 0);
	CHECK(blk_device_requests(f.dev, NULL) == 2);
	fixture_free(&f);
}

static void test_write_read_back_caller(void)
{
	check_write_read_back(BLK_WORKER_CALLER);
}

static void test_write_read_back_worker_thread(void)
{
	check_write_read_back(BLK_WORKER_THREAD);
}

/*
 * The worker under the disk role's seccomp filter moves the same bytes: its allow list holds
 * every call a request makes (valgrind cannot run filtered threads; there it runs unfiltered).
 */
static void test_write_read_back_confined_worker(void)
{
	check_write_read_back(HARNESS_UNDER_VALGRIND ? BLK_WORKER_THREAD : BLK_WORKER_CONFINED_THREAD);
}

/* Header, data and status all in one writable-after-readable pair: layout is not assumed. */
static void test_any_layout(void)
{
	struct blk_fixture f;
	uint8_t *buf, *out;
	uint32_t used = 0;
	uint32_t type = VIRTIO_BLK_T_OUT;
	uint64_t sector = 7;

	CHECK_INT_EQ(fixture_init(&f, false, BLK_WORKER_CALLER), 0);
	buf = fake_guest_host(&f.guest, TEST_DATA_GPA);
	memset(buf, 0, BLK_HEADER_BYTES);
	memcpy(buf, &type, sizeof(type));
	memcpy(buf + 8, &sector, sizeof(sector));
	fill_pattern(buf + BLK_HEADER_BYTES, BLK_SECTOR_SIZE, 9);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 0, TEST_DATA_GPA,
			    BLK_HEADER_BYTES + BLK_SECTOR_SIZE, VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 1, TEST_STATUS_GPA, 1, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&f.guest, TEST_QUEUE, 0);
	fake_guest_notify(&f.guest, TEST_QUEUE);
	CHECK(wait_used(&f, &used));
	CHECK_INT_EQ(*(uint8_t *)fake_guest_host(&f.guest, TEST_STATUS_GPA), VIRTIO_BLK_S_OK);

	/* read it back with data and status in one writable buffer */
	out = fake_guest_host(&f.guest, TEST_DATA2_GPA);
	memset(out, 0xff, BLK_SECTOR_SIZE + 1);
	put_header(&f, VIRTIO_BLK_T_IN, sector);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 2, TEST_HEADER_GPA, BLK_HEADER_BYTES,
			    VIRTQ_DESC_F_NEXT, 3);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 3, TEST_DATA2_GPA, BLK_SECTOR_SIZE + 1,
			    VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&f.guest, TEST_QUEUE, 2);
	fake_guest_notify(&f.guest, TEST_QUEUE);
	CHECK(wait_used(&f, &used));
	CHECK_INT_EQ(used, BLK_SECTOR_SIZE + 1);
	CHECK_INT_EQ(out[BLK_SECTOR_SIZE], VIRTIO_BLK_S_OK);
	CHECK(memcmp(out, buf + BLK_HEADER_BYTES, BLK_SECTOR_SIZE) == 0);
	fixture_free(&f);
}

static void test_get_id_and_flush(void)
{
	struct blk_fixture f;
	const char *name;
	char serial[BLK_SERIAL_BYTES + 1] = { 0 };
	uint32_t used = 0;

	CHECK_INT_EQ(fixture_init(&f, false, BLK_WORKER_CALLER), 0);
	CHECK_INT_EQ(simple_request(&f, VIRTIO_BLK_T_GET_ID, 0, BLK_SERIAL_BYTES, &used),
		     VIRTIO_BLK_S_OK);
	CHECK_INT_EQ(used, BLK_SERIAL_BYTES + 1);
	memcpy(serial, fake_guest_host(&f.guest, TEST_DATA_GPA), BLK_SERIAL_BYTES);
	name = strrchr(f.path, '/') + 1;
	CHECK(strncmp(serial, name, BLK_SERIAL_BYTES) == 0);
	CHECK_INT_EQ(simple_request(&f, VIRTIO_BLK_T_FLUSH, 0, 0, &used), VIRTIO_BLK_S_OK);
	CHECK_INT_EQ(used, 1);
	fixture_free(&f);
}

/* Refused requests complete with an error, leave the file alone, and the device goes on. */
static void test_refused_requests_keep_device_working(void)
{
	struct blk_fixture f;
	uint8_t zero[BLK_SECTOR_SIZE] = { 0 }, on_disk[BLK_SECTOR_SIZE];
	uint32_t used = 0, id;
	uint64_t failed = 0;
	int fd;

	CHECK_INT_EQ(fixture_init(&f, true, BLK_WORKER_CALLER), 0);
	fill_pattern(fake_guest_host(&f.guest, TEST_DATA_GPA), BLK_SECTOR_SIZE, 1);
	CHECK_INT_EQ(simple_request(&f, VIRTIO_BLK_T_OUT, 0, BLK_SECTOR_SIZE, &used),
		     VIRTIO_BLK_S_IOERR);
	CHECK_INT_EQ(simple_request(&f, VIRTIO_BLK_T_IN, TEST_DISK_SECTORS, BLK_SECTOR_SIZE,
				    &used), VIRTIO_BLK_S_IOERR);
	CHECK_INT_EQ(simple_request(&f, 42, 0, 0, &used), VIRTIO_BLK_S_UNSUPP);
	/* a chain with no writable byte comes back empty */
	put_header(&f, VIRTIO_BLK_T_IN, 0);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 0, TEST_HEADER_GPA, BLK_HEADER_BYTES, 0, 0);
	fake_guest_publish(&f.guest, TEST_QUEUE, 0);
	fake_guest_notify(&f.guest, TEST_QUEUE);
	CHECK(fake_guest_pop_used(&f.guest, TEST_QUEUE, &id, &used));
	CHECK_INT_EQ(used, 0);
	/* still serving, and the file was never written */
	CHECK_INT_EQ(simple_request(&f, VIRTIO_BLK_T_IN, 0, BLK_SECTOR_SIZE, &used),
		     VIRTIO_BLK_S_OK);
	CHECK(!(virtio_mmio_read32(blk_device_transport(f.dev), VIRTIO_MMIO_STATUS) &
		VIRTIO_STATUS_DEVICE_NEEDS_RESET));
	CHECK(blk_device_requests(f.dev, &failed) == 5 && failed == 4);
	fd = open(f.path, O_RDONLY);
	CHECK(pread(fd, on_disk, sizeof(on_disk), 0) == (ssize_t)sizeof(on_disk));
	close(fd);
	CHECK(memcmp(on_disk, zero, sizeof(zero)) == 0);
	fixture_free(&f);
}

/*
 * A request queued but not yet served when the transport state was saved is served by the
 * device the state is restored into, without another notify (the guest sends none).
 */
static void test_restored_device_serves_pending(void)
{
	struct blk_fixture f;
	struct virtio_mmio_state saved;
	struct blk_device *second;
	struct blk_identity id;
	struct blk_disk disk;
	char err[TEST_ERR_MAX];
	uint8_t *status;
	uint32_t used = 0;

	CHECK_INT_EQ(fixture_init(&f, true, BLK_WORKER_CALLER), 0);
	status = fake_guest_host(&f.guest, TEST_STATUS_GPA);
	*status = TEST_STATUS_UNTOUCHED;
	put_header(&f, VIRTIO_BLK_T_GET_ID, 0);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 0, TEST_HEADER_GPA, BLK_HEADER_BYTES,
			    VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&f.guest, TEST_QUEUE, 1, TEST_STATUS_GPA, 1, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&f.guest, TEST_QUEUE, 0); /* no notify: "the snapshot came first" */
	virtio_mmio_state_get(blk_device_transport(f.dev), &saved);
	CHECK_INT_EQ(*status, TEST_STATUS_UNTOUCHED);

	CHECK_INT_EQ(blk_disk_open(f.path, true, NULL, &disk, &id, err, sizeof(err)), 0);
	second = blk_device_create(&f.guest.mem, fake_guest_irq(&f.guest), &disk,
				   BLK_WORKER_CALLER, err, sizeof(err));
	CHECK(second != NULL);
	if (!second) {
		fixture_free(&f);
		return;
	}
	CHECK_INT_EQ(virtio_mmio_state_set(blk_device_transport(second), &saved), 0);
	f.guest.transport = blk_device_transport(second);
	CHECK(wait_used(&f, &used));
	CHECK_INT_EQ(*status, VIRTIO_BLK_S_OK);
	CHECK(blk_device_requests(second, NULL) == 1);
	blk_device_destroy(second);
	fixture_free(&f);
}

/* The locks: many readers, or one writer; and a changed file is refused on "restore". */
static void test_disk_lock_and_identity(void)
{
	char path[64], err[TEST_ERR_MAX];
	struct blk_disk reader1, reader2, writer;
	struct blk_identity id, again;
	struct timespec times[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = 12345 } };
	int fd;

	CHECK_INT_EQ(make_disk_file(path, sizeof(path), TEST_DISK_BYTES), 0);
	CHECK_INT_EQ(blk_disk_open(path, true, NULL, &reader1, &id, err, sizeof(err)), 0);
	CHECK(reader1.capacity_sectors == TEST_DISK_SECTORS && reader1.read_only);
	CHECK_INT_EQ(blk_disk_open(path, true, &id, &reader2, &again, err, sizeof(err)), 0);
	CHECK(blk_disk_open(path, false, NULL, &writer, &again, err, sizeof(err)) < 0);
	CHECK(strstr(err, "in use") != NULL);
	close(reader1.fd);
	close(reader2.fd);
	CHECK_INT_EQ(blk_disk_open(path, false, &id, &writer, &again, err, sizeof(err)), 0);
	CHECK(blk_disk_open(path, true, NULL, &reader1, &again, err, sizeof(err)) < 0);
	close(writer.fd);

	/* the same size, another modification time: refused, and says why */
	fd = open(path, O_RDWR);
	CHECK(futimens(fd, times) == 0);
	close(fd);
	CHECK_INT_EQ(blk_disk_open(path, true, &id, &reader1, &again, err, sizeof(err)),
		     -ESTALE);
	CHECK(strstr(err, "changed since the snapshot") != NULL);
	CHECK(strstr(err, path) != NULL);

	/* too small, or not there */
	CHECK(truncate(path, BLK_SECTOR_SIZE - 1) == 0);
	CHECK(blk_disk_open(path, true, NULL, &reader1, &again, err, sizeof(err)) < 0);
	unlink(path);
	CHECK(blk_disk_open(path, true, NULL, &reader1, &again, err, sizeof(err)) < 0);
	CHECK(strstr(err, path) != NULL);
}

int main(void)
{
	RUN_TEST(test_parse_good_requests);
	RUN_TEST(test_parse_hostile_requests);
	RUN_TEST(test_serve_refused_touches_only_status);
	RUN_TEST(test_config_and_features);
	RUN_TEST(test_write_read_back_caller);
	RUN_TEST(test_write_read_back_worker_thread);
	RUN_TEST(test_write_read_back_confined_worker);
	RUN_TEST(test_any_layout);
	RUN_TEST(test_get_id_and_flush);
	RUN_TEST(test_refused_requests_keep_device_working);
	RUN_TEST(test_restored_device_serves_pending);
	RUN_TEST(test_disk_lock_and_identity);
	return harness_finish();
}
