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

#include "common/sha256.h"
#include "harness.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_file.h"

#define TEST_MEMORY_MB 64
#define TEST_CID 7
#define TEST_GARBAGE_ROUNDS 2000
#define TEST_GARBAGE_MAX 512
#define MIB (1024 * 1024)
#define TEST_HEADER_VERSION_OFFSET 8
#define TEST_SERIAL_STATE_BYTES 8

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
	static const uint8_t serial_state[TEST_SERIAL_STATE_BYTES] = { 0 };
	static const uint8_t vsock_state[] = { TEST_CID, 0, 0, 0, 0, 0, 0, 0 };

	snapshot_image_release(img);
	memset(img, 0, sizeof(*img));
	img->meta.type = type;
	img->meta.memory_mb = TEST_MEMORY_MB;
	img->meta.vcpus = 1;
	img->meta.cid = TEST_CID;
	snapshot_cpu_signature(img->meta.cpu_signature);
	CHECK_INT_EQ(snapshot_image_add_device(img, "serial", 1, serial_state,
					       sizeof(serial_state)), 0);
	CHECK_INT_EQ(snapshot_image_add_device(img, "i8042", 1, NULL, 0), 0);
	CHECK_INT_EQ(snapshot_image_add_device(img, "vsock", 1, vsock_state, sizeof(vsock_state)),
		     0);
	img->meta.memory_bytes = type == VM_SNAPSHOT_BASE ? (uint64_t)TEST_MEMORY_MB * MIB
							  : sizeof(struct snapshot_diff_header);
	for (unsigned int i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++)
		img->irqchips[i].chip_id = i;
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

/* Writes a diff snapshot into dir that names parent (with parent_id) as its base. */
static uint64_t write_diff(const char *dir, const char *parent, uint64_t parent_id)
{
	fill_image(&image, VM_SNAPSHOT_DIFF);
	snprintf(image.meta.parent_dir, sizeof(image.meta.parent_dir), "%s", parent);
	image.meta.parent_id = parent_id;
	return write_snapshot(dir, &image);
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

/* The header holds the body's SHA-256, and the id is its first 8 bytes, little-endian. */
static void test_id_is_body_sha256(void)
{
	uint8_t *encoded = NULL, digest[SHA256_DIGEST_SIZE];
	size_t len = 0;
	uint64_t id = 0, expected = 0;
	char err[512] = "";
	struct snapshot_image *decoded = calloc(1, sizeof(*decoded));

	fill_image(&image, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(snapshot_encode(&image, &encoded, &len), 0);
	CHECK(decoded != NULL && encoded != NULL && len > SNAPSHOT_HEADER_SIZE);
	if (!decoded || !encoded || len <= SNAPSHOT_HEADER_SIZE)
		goto out;
	sha256_digest(encoded + SNAPSHOT_HEADER_SIZE, len - SNAPSHOT_HEADER_SIZE, digest);
	CHECK(memcmp(encoded + SNAPSHOT_BODY_HASH_OFFSET, digest, sizeof(digest)) == 0);
	for (int i = 7; i >= 0; i--)
		expected = expected << 8 | digest[i];
	CHECK_INT_EQ(snapshot_decode(encoded, len, SNAPSHOT_DECODE_CHECKED, decoded, &id, err,
				     sizeof(err)), 0);
	CHECK(id == expected);
	snapshot_image_release(decoded);
out:
	free(decoded);
	free(encoded);
}

static void test_corrupted_state_refused(void)
{
	char dir[PATH_MAX];
	const uint8_t flip = 0x5a;

	path_in(dir, sizeof(dir), root, "corrupt");
	fill_image(&image, VM_SNAPSHOT_BASE);
	write_snapshot(dir, &image);
	patch_state(dir, (long)SNAPSHOT_HEADER_SIZE + 100, &flip, 1);
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
	patch_state(dir, TEST_HEADER_VERSION_OFFSET, &version, sizeof(version));
	expect_refusal(dir, EPROTO, "re-create this snapshot");
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

/*
 * The CPU features the guest was shown survive the state file, a state file without them
 * (written before they were recorded) still reads, and a host lacking one of them is refused
 * with the feature's name. The "host" here is a synthetic feature set: the state file is the
 * test copy whose metadata claims avx512f, and the host set lacks it.
 */
static void test_cpu_features_recorded_and_checked(void)
{
	struct cpu_features host = { { 0 } }, listed;
	struct vm_snapshot_info info;
	char dir[PATH_MAX], err[512] = "";

	path_in(dir, sizeof(dir), root, "features");
	fill_image(&image, VM_SNAPSHOT_BASE);
	image.meta.has_cpu_features = true;
	image.meta.cpu_features.regs[CPU_FEATURE_LEAF1_ECX] = (1u << 28) | (1u << 31); /* avx */
	image.meta.cpu_features.regs[CPU_FEATURE_LEAF7_EBX] = (1u << 5) | (1u << 16);
	image.meta.cpu_features.regs[CPU_FEATURE_LEAF7_EDX] = 1u << 1; /* a bit with no name */
	write_snapshot(dir, &image);
	CHECK_INT_EQ(vm_snapshot_inspect(dir, &info, err, sizeof(err)), 0);
	CHECK(info.has_cpu_features);
	CHECK(info.cpu_features.regs[CPU_FEATURE_LEAF7_EBX] == ((1u << 5) | (1u << 16)));
	CHECK(info.cpu_features.regs[CPU_FEATURE_LEAF1_ECX] == ((1u << 28) | (1u << 31)));

	host = info.cpu_features;
	CHECK_INT_EQ(cpu_features_check(&info.cpu_features, &host, err, sizeof(err)), 0);
	host.regs[CPU_FEATURE_LEAF7_EBX] &= ~(1u << 16);
	CHECK_INT_EQ(cpu_features_check(&info.cpu_features, &host, err, sizeof(err)), -EXDEV);
	CHECK(strstr(err, "shown CPU feature avx512f, which this host lacks") != NULL);
	host = info.cpu_features;
	host.regs[CPU_FEATURE_LEAF1_ECX] = 1u << 28; /* the hypervisor bit is voidbox's own */
	CHECK_INT_EQ(cpu_features_check(&info.cpu_features, &host, err, sizeof(err)), 0);
	host.regs[CPU_FEATURE_LEAF7_EDX] = 0;
	CHECK_INT_EQ(cpu_features_check(&info.cpu_features, &host, err, sizeof(err)), -EXDEV);
	CHECK(strstr(err, "CPUID.7.0:EDX[1]") != NULL);
	/* a restore checks the state file's features, then those the manifest lists */
	host = info.cpu_features;
	listed = host;
	listed.regs[CPU_FEATURE_LEAF7_EBX] |= 1u << 30; /* avx512bw, which host lacks */
	CHECK_INT_EQ(cpu_features_check_snapshot(&info.cpu_features, NULL, &host, err,
						 sizeof(err)), 0);
	CHECK_INT_EQ(cpu_features_check_snapshot(&info.cpu_features, &host, &host, err,
						 sizeof(err)), 0);
	CHECK_INT_EQ(cpu_features_check_snapshot(&info.cpu_features, &listed, &host, err,
						 sizeof(err)), -EXDEV);
	CHECK(strstr(err, "which this host lacks") != NULL);
	CHECK(strstr(err, "(the feature is in the snapshot's manifest.json)") != NULL);
	CHECK_INT_EQ(cpu_features_check_snapshot(NULL, &listed, &host, err, sizeof(err)), -EXDEV);
	CHECK_INT_EQ(cpu_features_check_snapshot(&listed, NULL, &host, err, sizeof(err)), -EXDEV);
	CHECK(strstr(err, "manifest.json") == NULL);

	fill_image(&image, VM_SNAPSHOT_BASE); /* no features: the older layout */
	write_snapshot(dir, &image);
	CHECK_INT_EQ(vm_snapshot_inspect(dir, &info, err, sizeof(err)), 0);
	CHECK(!info.has_cpu_features);
}

static void test_unknown_device_refused(void)
{
	char dir[PATH_MAX];

	path_in(dir, sizeof(dir), root, "device");
	fill_image(&image, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(snapshot_image_add_device(&image, "virtio-tape", 1, NULL, 0), 0);
	write_snapshot(dir, &image);
	expect_refusal(dir, EOPNOTSUPP, "'virtio-tape' device");
}

/* A device section written by a newer voidbox (a higher state version) is refused. */
static void test_newer_device_section_refused(void)
{
	char dir[PATH_MAX];

	path_in(dir, sizeof(dir), root, "newer");
	fill_image(&image, VM_SNAPSHOT_BASE);
	image.devices[2].version = 99;
	write_snapshot(dir, &image);
	expect_refusal(dir, EPROTO, "'vsock' device state has version 99");
}

/* The device list read back is the one written, in order, with each device's bytes. */
static void test_device_sections_round_trip(void)
{
	struct snapshot_image *decoded = calloc(1, sizeof(*decoded));
	uint8_t *encoded = NULL;
	size_t len = 0;
	uint64_t id = 0;
	char err[512];

	fill_image(&image, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(snapshot_encode(&image, &encoded, &len), 0);
	CHECK_INT_EQ(snapshot_decode(encoded, len, SNAPSHOT_DECODE_CHECKED, decoded, &id, err,
				     sizeof(err)), 0);
	CHECK_INT_EQ(decoded->device_count, 3);
	CHECK_STR_EQ(decoded->devices[0].name, "serial");
	CHECK_INT_EQ(decoded->devices[0].state_len, TEST_SERIAL_STATE_BYTES);
	CHECK_INT_EQ(decoded->devices[1].state_len, 0);
	CHECK_STR_EQ(decoded->devices[2].name, "vsock");
	CHECK_INT_EQ(decoded->devices[2].state[0], TEST_CID);
	CHECK(memcmp(&decoded->meta, &image.meta, sizeof(image.meta)) == 0);
	snapshot_image_release(decoded);
	free(decoded);
	free(encoded);
}

/* A device section that appears twice is refused, naming the device. */
static void test_duplicate_section_refused(void)
{
	uint8_t *encoded = NULL, *doubled;
	size_t len = 0, section_len;
	uint64_t id = 0;
	char err[512] = "";
	struct snapshot_image *decoded = calloc(1, sizeof(*decoded));

	fill_image(&image, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(snapshot_encode(&image, &encoded, &len), 0);
	/* the last section is vsock's: name (1 + 5), version, instance, len, checksum, payload */
	section_len = 1 + 5 + 4 + 4 + 8 + 8 + 8;
	doubled = malloc(len + section_len);
	memcpy(doubled, encoded, len);
	memcpy(doubled + len, encoded + len - section_len, section_len);
	memcpy(doubled + 16, &(uint64_t){ len + section_len - SNAPSHOT_HEADER_SIZE },
	       sizeof(uint64_t)); /* the header's body length */
	CHECK_INT_EQ(snapshot_decode(doubled, len + section_len, SNAPSHOT_DECODE_IGNORE_CHECKSUMS,
				     decoded, &id, err, sizeof(err)), -EBADMSG);
	if (!strstr(err, "'vsock'"))
		fprintf(stderr, "  error: %s\n", err);
	CHECK(strstr(err, "'vsock'") != NULL);
	free(doubled);
	free(encoded);
	free(decoded);
}

/* A diff that names itself, or another diff, as its base is refused without recursing. */
static void test_diff_chain_refused(void)
{
	char base[PATH_MAX], diff[PATH_MAX], chained[PATH_MAX];
	uint64_t base_id, diff_id;

	path_in(base, sizeof(base), root, "chain-base");
	path_in(diff, sizeof(diff), root, "chain-diff");
	path_in(chained, sizeof(chained), root, "chain-self");
	fill_image(&image, VM_SNAPSHOT_BASE);
	base_id = write_snapshot(base, &image);
	diff_id = write_diff(diff, base, base_id);
	write_diff(chained, diff, diff_id); /* a diff whose parent is that diff */
	expect_refusal(chained, ESTALE, "itself a diff");
	write_diff(chained, chained, 0); /* a diff whose parent is itself */
	expect_refusal(chained, ESTALE, "itself a diff");
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
	write_diff(diff, base, base_id);
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
	uint8_t data[TEST_GARBAGE_MAX], *valid = NULL;
	size_t valid_len = 0;
	char err[512];
	uint64_t id;
	int accepted = 0;

	/* a valid header from the encoder, so half the rounds reach the section parser */
	fill_image(&image, VM_SNAPSHOT_BASE);
	CHECK_INT_EQ(snapshot_encode(&image, &valid, &valid_len), 0);
	srand(1);
	for (int round = 0; round < TEST_GARBAGE_ROUNDS; round++) {
		size_t len = (size_t)rand() % sizeof(data);

		for (size_t i = 0; i < len; i++)
			data[i] = (uint8_t)rand();
		if (round % 2 && len >= SNAPSHOT_HEADER_SIZE && valid) {
			uint64_t body_len = len - SNAPSHOT_HEADER_SIZE;

			memcpy(data, valid, SNAPSHOT_HEADER_SIZE);
			memcpy(data + 16, &body_len, sizeof(body_len));
		}
		accepted += snapshot_decode(data, len, SNAPSHOT_DECODE_IGNORE_CHECKSUMS, &image,
					    &id, err, sizeof(err)) == 0;
	}
	free(valid);
	CHECK_INT_EQ(accepted, 0);
}

int main(void)
{
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	RUN_TEST(test_round_trip);
	RUN_TEST(test_id_is_body_sha256);
	RUN_TEST(test_corrupted_state_refused);
	RUN_TEST(test_truncated_state_refused);
	RUN_TEST(test_wrong_version_refused);
	RUN_TEST(test_wrong_host_cpu_refused);
	RUN_TEST(test_cpu_features_recorded_and_checked);
	RUN_TEST(test_unknown_device_refused);
	RUN_TEST(test_newer_device_section_refused);
	RUN_TEST(test_device_sections_round_trip);
	RUN_TEST(test_duplicate_section_refused);
	RUN_TEST(test_diff_chain_refused);
	RUN_TEST(test_memory_file_checked);
	RUN_TEST(test_diff_needs_its_base);
	RUN_TEST(test_garbage_never_crashes);
	char cmd[sizeof(root) + 16];

	snapshot_image_release(&image);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return harness_finish();
}
