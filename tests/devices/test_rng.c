/*
 * virtio-rng driven through its registers by the fake driver: requests are filled with
 * random bytes and completed with the length written, a huge request is capped, a read-only
 * buffer gets nothing, a malformed ring marks the device broken instead of crashing it (and a
 * guest that does so in a loop gets a few warnings logged, not one per fault), and its
 * transport state survives a save and restore into a new device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "devices/rng.h"
#include "fake_guest.h"
#include "harness.h"

#define TEST_BUFFER_GPA 0x100000u
#define TEST_SMALL_LEN 64u
#define TEST_HUGE_LEN (8u << 20)
#define TEST_REQUEST_CAP (64u * 1024u)
#define TEST_RNG_QUEUE 0
/* Break-and-reset rounds a looping guest gets through; far more than the warnings allowed. */
#define TEST_FAULT_ROUNDS 200
#define TEST_FAULT_WARNINGS_MAX 4

struct rng_fixture {
	struct fake_guest guest;
	struct rng_device *dev;
};

static int fixture_init(struct rng_fixture *f)
{
	uint32_t status;

	memset(f, 0, sizeof(*f));
	if (fake_guest_init(&f->guest))
		return -1;
	f->dev = rng_device_create(&f->guest.mem, fake_guest_irq(&f->guest));
	if (!f->dev)
		return -1;
	status = fake_guest_setup(&f->guest, rng_device_transport(f->dev), 1, ~0ull);
	return (status & VIRTIO_STATUS_DRIVER_OK) ? 0 : -1;
}

static void fixture_free(struct rng_fixture *f)
{
	rng_device_destroy(f->dev);
	fake_guest_free(&f->guest);
}

/* Posts one buffer of len bytes at TEST_BUFFER_GPA with flags, notifies, returns used len. */
static int request(struct rng_fixture *f, uint32_t len, uint16_t flags, uint32_t *used_len)
{
	uint32_t id = 0;

	fake_guest_set_desc(&f->guest, TEST_RNG_QUEUE, 0, TEST_BUFFER_GPA, len, flags, 0);
	fake_guest_publish(&f->guest, TEST_RNG_QUEUE, 0);
	fake_guest_notify(&f->guest, TEST_RNG_QUEUE);
	return fake_guest_pop_used(&f->guest, TEST_RNG_QUEUE, &id, used_len) ? 0 : -1;
}

static void test_request_filled(void)
{
	struct rng_fixture f;
	uint8_t zero[TEST_SMALL_LEN] = { 0 }, first[TEST_SMALL_LEN];
	uint32_t used = 0;

	CHECK_INT_EQ(fixture_init(&f), 0);
	memset(fake_guest_host(&f.guest, TEST_BUFFER_GPA), 0, TEST_SMALL_LEN);
	CHECK_INT_EQ(request(&f, TEST_SMALL_LEN, VIRTQ_DESC_F_WRITE, &used), 0);
	CHECK_INT_EQ(used, TEST_SMALL_LEN);
	memcpy(first, fake_guest_host(&f.guest, TEST_BUFFER_GPA), sizeof(first));
	CHECK(memcmp(first, zero, sizeof(zero)) != 0);
	CHECK(f.guest.irq_raises > 0);
	CHECK_INT_EQ(request(&f, TEST_SMALL_LEN, VIRTQ_DESC_F_WRITE, &used), 0);
	CHECK(memcmp(first, fake_guest_host(&f.guest, TEST_BUFFER_GPA), sizeof(first)) != 0);
	CHECK(rng_device_bytes_served(f.dev) == 2 * TEST_SMALL_LEN);
	fixture_free(&f);
}

static void test_huge_request_capped(void)
{
	struct rng_fixture f;
	uint32_t used = 0;

	CHECK_INT_EQ(fixture_init(&f), 0);
	CHECK_INT_EQ(request(&f, TEST_HUGE_LEN, VIRTQ_DESC_F_WRITE, &used), 0);
	CHECK_INT_EQ(used, TEST_REQUEST_CAP);
	fixture_free(&f);
}

static void test_read_only_buffer_gets_nothing(void)
{
	struct rng_fixture f;
	uint32_t used = 1;

	CHECK_INT_EQ(fixture_init(&f), 0);
	memset(fake_guest_host(&f.guest, TEST_BUFFER_GPA), 0xaa, TEST_SMALL_LEN);
	CHECK_INT_EQ(request(&f, TEST_SMALL_LEN, 0, &used), 0);
	CHECK_INT_EQ(used, 0);
	CHECK_INT_EQ(((uint8_t *)fake_guest_host(&f.guest, TEST_BUFFER_GPA))[0], 0xaa);
	fixture_free(&f);
}

static void test_buffer_outside_ram_breaks_device(void)
{
	struct rng_fixture f;
	struct virtio_mmio *t;
	uint32_t used = 0;

	CHECK_INT_EQ(fixture_init(&f), 0);
	t = rng_device_transport(f.dev);
	fake_guest_set_desc(&f.guest, TEST_RNG_QUEUE, 0, FAKE_GUEST_RAM_SIZE - 8, TEST_SMALL_LEN,
			    VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&f.guest, TEST_RNG_QUEUE, 0);
	fake_guest_notify(&f.guest, TEST_RNG_QUEUE);
	CHECK(!fake_guest_pop_used(&f.guest, TEST_RNG_QUEUE, &(uint32_t){ 0 }, &used));
	CHECK(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	/* a reset and a new setup bring it back */
	CHECK(fake_guest_setup(&f.guest, t, 1, ~0ull) & VIRTIO_STATUS_DRIVER_OK);
	CHECK_INT_EQ(request(&f, TEST_SMALL_LEN, VIRTQ_DESC_F_WRITE, &used), 0);
	CHECK_INT_EQ(used, TEST_SMALL_LEN);
	fixture_free(&f);
}

static size_t count_lines(const char *text, size_t len)
{
	size_t lines = 0;

	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	return lines;
}

/* A guest that breaks its ring and resets the device in a loop cannot flood the host's log. */
static void test_fault_loop_logs_a_few_warnings(void)
{
	struct rng_fixture f;
	struct virtio_mmio *t;
	enum log_level level = log_get_level();
	char *log_text = NULL;
	size_t log_len = 0;
	FILE *log_stream = open_memstream(&log_text, &log_len);
	unsigned int broken = 0;

	CHECK(log_stream != NULL);
	CHECK_INT_EQ(fixture_init(&f), 0);
	t = rng_device_transport(f.dev);
	log_set_stream(log_stream);
	log_set_level(LOG_LEVEL_WARN);
	for (int round = 0; round < TEST_FAULT_ROUNDS; round++) {
		fake_guest_setup(&f.guest, t, 1, ~0ull);
		fake_guest_set_desc(&f.guest, TEST_RNG_QUEUE, 0, FAKE_GUEST_RAM_SIZE - 8,
				    TEST_SMALL_LEN, VIRTQ_DESC_F_WRITE, 0);
		fake_guest_publish(&f.guest, TEST_RNG_QUEUE, 0);
		fake_guest_notify(&f.guest, TEST_RNG_QUEUE);
		broken += !!(virtio_mmio_read32(t, VIRTIO_MMIO_STATUS) &
			     VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	}
	log_set_stream(stderr);
	log_set_level(level);
	fclose(log_stream);
	CHECK_INT_EQ(broken, TEST_FAULT_ROUNDS);
	CHECK(count_lines(log_text, log_len) >= 1);
	CHECK(count_lines(log_text, log_len) <= TEST_FAULT_WARNINGS_MAX);
	free(log_text);
	fixture_free(&f);
}

/* The transport state, encoded and decoded, brings a second device to the same ring place. */
static void test_state_round_trip(void)
{
	struct rng_fixture f;
	struct virtio_mmio_state saved, decoded;
	struct rng_device *second;
	struct byte_writer out;
	struct byte_reader in;
	uint32_t used = 0;

	CHECK_INT_EQ(fixture_init(&f), 0);
	CHECK_INT_EQ(request(&f, TEST_SMALL_LEN, VIRTQ_DESC_F_WRITE, &used), 0);
	virtio_mmio_state_get(rng_device_transport(f.dev), &saved);
	byte_writer_init(&out);
	virtio_mmio_state_write(&out, &saved);
	CHECK(!byte_writer_failed(&out));
	byte_reader_init(&in, out.data, out.len);
	virtio_mmio_state_read(&in, &decoded);
	CHECK_INT_EQ(byte_reader_finish(&in), 0);
	CHECK(decoded.queues[0].used_idx == 1 && decoded.status == saved.status);
	second = rng_device_create(&f.guest.mem, fake_guest_irq(&f.guest));
	CHECK_INT_EQ(virtio_mmio_state_set(rng_device_transport(second), &decoded), 0);
	/* the next request goes to the second device, which continues at used index 1 */
	f.guest.transport = rng_device_transport(second);
	CHECK_INT_EQ(request(&f, TEST_SMALL_LEN, VIRTQ_DESC_F_WRITE, &used), 0);
	CHECK_INT_EQ(used, TEST_SMALL_LEN);
	CHECK(rng_device_bytes_served(second) == TEST_SMALL_LEN);
	/* a truncated state fails the reader */
	byte_reader_init(&in, out.data, out.len - 1);
	virtio_mmio_state_read(&in, &decoded);
	CHECK(byte_reader_finish(&in) < 0);
	byte_writer_free(&out);
	rng_device_destroy(second);
	fixture_free(&f);
}

int main(void)
{
	RUN_TEST(test_request_filled);
	RUN_TEST(test_huge_request_capped);
	RUN_TEST(test_read_only_buffer_gets_nothing);
	RUN_TEST(test_buffer_outside_ram_breaks_device);
	RUN_TEST(test_fault_loop_logs_a_few_warnings);
	RUN_TEST(test_state_round_trip);
	return harness_finish();
}
