/*
 * The snapshot state file's checks, driven with synthetic snapshots written by the same
 * encoder the VMM uses: every way a snapshot can be wrong must be refused by
 * vm_snapshot_inspect with a sentence naming the problem, and garbage must never crash it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_file.h"

#define TEST_MEMORY_MB 64
#define TEST_CID 7
#define TEST_GARBAGE_ROUNDS 2000
#define TEST_GARBAGE_MAX 512
#define MIB (1024 * 1024)

static char root[] = "/tmp/voidbox-snapfile-XXXXXX";
static struct snapshot_image image;

static void path_in(char *out, size_t len, const char *dir, const char *name)
{
	if (snprintf(out, len, "%s/%s", dir, name) >= (int)len)
		out[0] = '\0';
}

static void make_dir(const char *dir)
{
	CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST);
}

static void fill_image(struct snapshot_image *img, enum vm_snapshot_type type)
{
	memset(img, 0, sizeof(*img));
	img->meta.type = type;
	img->meta.memory_mb = TEST_MEMORY_MB;
	img->meta.vcpus = 1;
	img->meta.cid = TEST_CID;
	snapshot_cpu_signature(img->meta.cpu_signature);
	img->meta.device_count = 3;
	strcpy(img->meta.devices[0], SNAPSHOT_DEVICE_SERIAL);
	strcpy(img->meta.devices[1], SNAPSHOT_DEVICE_I8042);
	strcpy(img->meta.devices[2], SNAPSHOT_DEVICE_VSOCK);
	img->meta.memory_bytes = type == VM_SNAPSHOT_BASE ? (uint64_t)TEST_MEMORY_MB * MIB
							  : sizeof(struct snapshot_diff_header);
	for (unsigned int i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++)
		img->irqchips[i].chip_id = i;
	img->vsock.queue_count = 3;
}

/* Writes a snapshot of img into dir with a memory file of the size the state says. */
static uint64_t write_snapshot(const char *dir, const struct snapshot_image *img)
{
	char path[PATH_MAX], err[512];
	uint64_t id = 0;
	int fd;

	make_dir(dir);
	CHECK_INT_EQ(snapshot_file_write(dir, img, &id, err, sizeof(err)), 0);
	if (img->meta.type == VM_SNAPSHOT_BASE) {
		path_in(path, sizeof(path), dir, VM_SNAPSHOT_MEMORY_FILE);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		CHECK(fd >= 0);
		CHECK_INT_EQ(ftruncate(fd, (off_t)img->meta.memory_bytes), 0);
	} else {
		struct snapshot_diff_header header = { .magic = SNAPSHOT_DIFF_MAGIC };

		path_in(path, sizeof(path), dir, VM_SNAPSHOT_DIFF_FILE);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		CHECK(fd >= 0);
		CHECK_INT_EQ((int)write(fd, &header, sizeof(header)), (int)sizeof(header));
	}
	close(fd);
	return id;
}

/* inspect must fail with -expected_errno and an error containing needle. */
static void expect_refusal(const char *dir, int expected, const char *needle)
{
	struct vm_snapshot_info info;
	char err[1024] = "";
	int rc = vm_snapshot_inspect(dir, &info, err, sizeof(err));

	CHECK_INT_EQ(rc, -expected);
	if (!strstr(err, needle))
		fprintf(stderr, "  error '%s' lacks '%s'\n", err, needle);
	CHECK(strstr(err, needle) != NULL);
}

static void patch_state(const char *dir, long offset, const void *bytes, size_t len)
{
	char path[PATH_MAX];
	int fd;

	path_in(path, sizeof(path), dir, VM_SNAPSHOT_STATE_FILE);
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_INT_EQ((int)pwrite(fd, bytes, len, offset), (int)len);
	close(fd);
}

static void test_round_trip(void)
{
	char dir[PATH_MAX];
	struct vm_snapshot_info info;
	char err[512];
	uint64_t id;

	path_in(dir, sizeof(dir), root, "good");
	fill_image(&image, VM_SNAPSHOT_BASE);
	id = write_snapshot(dir, &image);
	CHECK_INT_EQ(vm_snapshot_inspect(dir, &info, err, sizeof(err)), 0);
	CHECK(info.id == id);
	CHECK_INT_EQ(info.type, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(info.memory_mb, TEST_MEMORY_MB);
	CHECK_INT_EQ(info.vcpus, 1);
	CHECK(info.cid == TEST_CID);
	CHECK_INT_EQ(info.device_count, 3);
	CHECK_STR_EQ(info.devices[2], "vsock");
	CHECK(info.memory_bytes == (uint64_t)TEST_MEMORY_MB * MIB);
}

static void test_corrupted_state_refused(void)
{
	char dir[PATH_MAX];
	const uint8_t flip = 0x5a;

	path_in(dir, sizeof(dir), root, "corrupt");
	fill_image(&image, VM_SNAPSHOT_BASE);
	write_snapshot(dir, &image);
	patch_state(dir, (long)sizeof(struct snapshot_header) + 100, &flip, 1);
	expect_refusal(dir, EBADMSG, "corrupted");
}

static void test_truncated_state_refused(void)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct stat st;

	path_in(dir, sizeof(dir), root, "truncated");
	fill_image(&image, VM_SNAPSHOT_BASE);
	write_snapshot(dir, &image);
	path_in(path, sizeof(path), dir, VM_SNAPSHOT_STATE_FILE);
	CHECK_INT_EQ(stat(path, &st), 0);
	CHECK_INT_EQ(truncate(path, st.st_size / 2), 0);
	expect_refusal(dir, EBADMSG, "truncated");
	CHECK_INT_EQ(truncate(path, 10), 0);
	expect_refusal(dir, EBADMSG, "truncated");
}

static void test_wrong_version_refused(void)
{
	char dir[PATH_MAX];
	const uint32_t version = VM_SNAPSHOT_FORMAT_VERSION + 1;

	path_in(dir, sizeof(dir), root, "version");
	fill_image(&image, VM_SNAPSHOT_BASE);
	write_snapshot(dir, &image);
	patch_state(dir, (long)offsetof(struct snapshot_header, version), &version,
		    sizeof(version));
	expect_refusal(dir, EPROTO, "version");
}

static void test_wrong_host_cpu_refused(void)
{
	char dir[PATH_MAX];

	path_in(dir, sizeof(dir), root, "cpu");
	fill_image(&image, VM_SNAPSHOT_BASE);
	snprintf(image.meta.cpu_signature, sizeof(image.meta.cpu_signature), "OtherVendor 1-2-3");
	write_snapshot(dir, &image);
	expect_refusal(dir, EXDEV, "OtherVendor");
}

static void test_unknown_device_refused(void)
{
	char dir[PATH_MAX];

	path_in(dir, sizeof(dir), root, "device");
	fill_image(&image, VM_SNAPSHOT_BASE);
	strcpy(image.meta.devices[image.meta.device_count++], "virtio-blk");
	write_snapshot(dir, &image);
	expect_refusal(dir, EOPNOTSUPP, "'virtio-blk' device");
}

static void test_memory_file_checked(void)
{
	char dir[PATH_MAX], path[PATH_MAX];

	path_in(dir, sizeof(dir), root, "memory");
	fill_image(&image, VM_SNAPSHOT_BASE);
	write_snapshot(dir, &image);
	path_in(path, sizeof(path), dir, VM_SNAPSHOT_MEMORY_FILE);
	CHECK_INT_EQ(truncate(path, MIB), 0);
	expect_refusal(dir, EBADMSG, "truncated");
	CHECK_INT_EQ(unlink(path), 0);
	expect_refusal(dir, ENOENT, "missing");
}

static void test_diff_needs_its_base(void)
{
	char base[PATH_MAX], diff[PATH_MAX], moved[PATH_MAX];
	struct vm_snapshot_info info;
	char err[512];
	uint64_t base_id;

	path_in(base, sizeof(base), root, "base");
	path_in(diff, sizeof(diff), root, "diff");
	path_in(moved, sizeof(moved), root, "base.moved");
	fill_image(&image, VM_SNAPSHOT_BASE);
	base_id = write_snapshot(base, &image);
	fill_image(&image, VM_SNAPSHOT_DIFF);
	snprintf(image.meta.parent_dir, sizeof(image.meta.parent_dir), "%s", base);
	image.meta.parent_id = base_id;
	write_snapshot(diff, &image);
	CHECK_INT_EQ(vm_snapshot_inspect(diff, &info, err, sizeof(err)), 0);
	CHECK(info.parent_id == base_id);
	CHECK_INT_EQ(rename(base, moved), 0);
	expect_refusal(diff, ENOENT, "base snapshot");
	CHECK_INT_EQ(rename(moved, base), 0);
	/* a base replaced by another snapshot at the same path */
	fill_image(&image, VM_SNAPSHOT_BASE);
	image.meta.created_unix_ns = 1;
	write_snapshot(base, &image);
	expect_refusal(diff, ESTALE, "replaced");
}

static void test_garbage_never_crashes(void)
{
	uint8_t data[TEST_GARBAGE_MAX];
	struct snapshot_header header = { .version = VM_SNAPSHOT_FORMAT_VERSION,
					  .header_size = sizeof(header) };
	char err[512];
	uint64_t id;
	int accepted = 0;

	srand(1);
	memcpy(header.magic, SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_LEN);
	for (int round = 0; round < TEST_GARBAGE_ROUNDS; round++) {
		size_t len = (size_t)rand() % sizeof(data);

		for (size_t i = 0; i < len; i++)
			data[i] = (uint8_t)rand();
		/* half the rounds get a valid header so the section parser is reached */
		if (round % 2 && len >= sizeof(header)) {
			header.body_len = len - sizeof(header);
			header.body_checksum = snapshot_checksum(data + sizeof(header),
								 header.body_len);
			memcpy(data, &header, sizeof(header));
		}
		accepted += snapshot_decode(data, len, &image, &id, err, sizeof(err)) == 0;
	}
	CHECK_INT_EQ(accepted, 0);
}

int main(void)
{
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	RUN_TEST(test_round_trip);
	RUN_TEST(test_corrupted_state_refused);
	RUN_TEST(test_truncated_state_refused);
	RUN_TEST(test_wrong_version_refused);
	RUN_TEST(test_wrong_host_cpu_refused);
	RUN_TEST(test_unknown_device_refused);
	RUN_TEST(test_memory_file_checked);
	RUN_TEST(test_diff_needs_its_base);
	RUN_TEST(test_garbage_never_crashes);
	char cmd[sizeof(root) + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return harness_finish();
}
