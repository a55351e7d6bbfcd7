/*
 * The working-set list (vmm/working_set.h) without KVM: runs are built from pages in order,
 * the file round-trips, every way it can be wrong (truncated, garbled, stale, out of range,
 * oversized, a symlink) is refused so a restore falls back to lazy faults, and against a real
 * MAP_PRIVATE file mapping a scan finds exactly the pages touched and a prefetch maps exactly
 * the listed ones without making them private (a later diff must not see them). The same
 * mapping also takes a diff's pages (snapshot_overlay_diff), which a restore copies in before
 * it prefetches.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byte_buffer.h"
#include "harness.h"
#include "vmm/memory.h"
#include "vmm/snapshot_file.h"
#include "vmm/working_set.h"

#define TEST_MEMORY_MB 64
#define TEST_SNAPSHOT_ID 0x1234abcdULL
#define TEST_PAGE WORKING_SET_PAGE_SIZE
#define TEST_GARBAGE_ROUNDS 2000
#define TEST_GARBAGE_MAX 256
#define TEST_PAGEMAP_PRESENT (1ULL << 63)
#define TEST_PAGEMAP_FILE (1ULL << 61)
#define TEST_ERR_MAX 512
#define TEST_RUN_OFFSET_IN_FILE WORKING_SET_HEADER_BYTES

static char root[] = "/tmp/voidbox-wset-XXXXXX";
static struct guest_memory layout;

static void path_in(char *out, size_t len, const char *name)
{
	if (snprintf(out, len, "%s/%s", root, name) >= (int)len)
		out[0] = '\0';
}

static void write_bytes(const char *name, const void *data, size_t len)
{
	char path[PATH_MAX];
	int fd;

	path_in(path, sizeof(path), name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK_INT_EQ((int)write(fd, data, len), (int)len);
	close(fd);
}

/* pages 3-5 (read) and 100 (written) of the low region */
static void sample_set(struct working_set *ws)
{
	static const uint64_t pages[] = { 3, 4, 5, 100 };

	working_set_init(ws, TEST_SNAPSHOT_ID, layout.total_size);
	for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++)
		CHECK_INT_EQ(working_set_add_page(ws, pages[i] * TEST_PAGE, pages[i] == 100), 0);
}

static void test_runs_from_pages(void)
{
	struct working_set ws;

	sample_set(&ws);
	CHECK_INT_EQ(ws.run_count, 2);
	CHECK(ws.runs[0].gpa == 3 * TEST_PAGE && ws.runs[0].pages == 3);
	CHECK(ws.runs[1].gpa == 100 * TEST_PAGE && ws.runs[1].pages == 1);
	CHECK(!ws.runs[0].written && ws.runs[1].written);
	CHECK(ws.pages == 4 && ws.written_pages == 1);
	/* an adjacent page that was only read starts a run of its own */
	CHECK_INT_EQ(working_set_add_page(&ws, 101 * TEST_PAGE, false), 0);
	CHECK_INT_EQ(ws.run_count, 3);
	CHECK(ws.runs[2].gpa == 101 * TEST_PAGE && !ws.runs[2].written);
	CHECK_INT_EQ(working_set_add_page(&ws, 50 * TEST_PAGE, false), -EINVAL); /* descending */
	CHECK_INT_EQ(working_set_add_page(&ws, 200 * TEST_PAGE + 1, false), -EINVAL);
	working_set_release(&ws);
}

static void test_round_trip(void)
{
	struct working_set ws, back;
	uint8_t *data = NULL;
	size_t len = 0;
	char err[TEST_ERR_MAX] = "";

	sample_set(&ws);
	CHECK_INT_EQ(working_set_encode(&ws, &data, &len), 0);
	CHECK(len == WORKING_SET_HEADER_BYTES + 2 * WORKING_SET_RUN_BYTES);
	CHECK_INT_EQ(working_set_decode(data, len, &layout, WORKING_SET_DECODE_CHECKED, &back, err,
					sizeof(err)), 0);
	CHECK(back.snapshot_id == TEST_SNAPSHOT_ID && back.memory_bytes == layout.total_size);
	CHECK_INT_EQ(back.run_count, 2);
	CHECK(back.pages == 4 && back.runs[1].gpa == 100 * TEST_PAGE);
	CHECK(!back.runs[0].written && back.runs[1].written && back.written_pages == 1);
	CHECK(back.marks_writes);
	working_set_release(&back);
	/* a run flag this voidbox does not know is refused, not guessed at */
	/* (the first run's flags: the u32 after its u64 gpa and u32 page count) */
	data[TEST_RUN_OFFSET_IN_FILE + 12] |= 0x02;
	CHECK_INT_EQ(working_set_decode(data, len, &layout, WORKING_SET_DECODE_IGNORE_CHECKSUM,
					&back, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "unknown flags") != NULL);
	/* through the file */
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	CHECK_INT_EQ(working_set_load(root, TEST_SNAPSHOT_ID, &layout, &back, err, sizeof(err)), 0);
	CHECK(back.pages == 4);
	working_set_release(&back);
	free(data);
	working_set_release(&ws);
}

/*
 * A version 1 list (runs {u64 gpa, u64 pages}, no flags), as a voidbox before written runs
 * recorded it: still read, every run read-only.
 */
static void test_version_1_read(void)
{
	struct byte_writer runs, file;
	struct working_set back;
	char err[TEST_ERR_MAX] = "";

	byte_writer_init(&runs);
	byte_writer_u64(&runs, 3 * TEST_PAGE);
	byte_writer_u64(&runs, 3);
	byte_writer_u64(&runs, 100 * TEST_PAGE);
	byte_writer_u64(&runs, 1);
	byte_writer_init(&file);
	byte_writer_u32(&file, WORKING_SET_MAGIC);
	byte_writer_u32(&file, WORKING_SET_VERSION_READ_ONLY);
	byte_writer_u64(&file, TEST_SNAPSHOT_ID);
	byte_writer_u64(&file, layout.total_size);
	byte_writer_u32(&file, 2);
	byte_writer_u32(&file, 0);
	byte_writer_u64(&file, snapshot_checksum(runs.data, runs.len));
	byte_writer_bytes(&file, runs.data, runs.len);
	CHECK(!byte_writer_failed(&runs) && !byte_writer_failed(&file));
	CHECK_INT_EQ(working_set_decode(file.data, file.len, &layout, WORKING_SET_DECODE_CHECKED,
					&back, err, sizeof(err)), 0);
	CHECK_INT_EQ(back.run_count, 2);
	CHECK(back.pages == 4 && back.written_pages == 0);
	CHECK(back.runs[1].gpa == 100 * TEST_PAGE && !back.runs[1].written);
	CHECK(!back.marks_writes); /* so the next first exec records a version 2 list */
	working_set_release(&back);
	byte_writer_free(&runs);
	byte_writer_free(&file);
}

static void expect_load(int expected, const char *needle)
{
	struct working_set ws;
	char err[TEST_ERR_MAX] = "";
	int rc = working_set_load(root, TEST_SNAPSHOT_ID, &layout, &ws, err, sizeof(err));

	CHECK_INT_EQ(rc, expected);
	if (needle && !strstr(err, needle))
		fprintf(stderr, "  error '%s' lacks '%s'\n", err, needle);
	CHECK(!needle || strstr(err, needle) != NULL);
	CHECK(ws.runs == NULL && ws.run_count == 0);
}

static void test_bad_files_refused(void)
{
	struct working_set ws;
	uint8_t *data = NULL;
	size_t len = 0;

	sample_set(&ws);
	CHECK_INT_EQ(working_set_encode(&ws, &data, &len), 0);
	write_bytes(VM_WORKING_SET_FILE, data, 0);
	expect_load(-EBADMSG, "wrong size");
	for (size_t cut = 1; cut < len; cut += 7) { /* every truncation */
		write_bytes(VM_WORKING_SET_FILE, data, cut);
		expect_load(-EBADMSG, "not valid");
	}
	data[TEST_RUN_OFFSET_IN_FILE + 1] ^= 0x40; /* a run's address, checksum now wrong */
	write_bytes(VM_WORKING_SET_FILE, data, len);
	expect_load(-EBADMSG, "checksum");
	data[TEST_RUN_OFFSET_IN_FILE + 1] ^= 0x40;
	data[0] ^= 0xff;
	write_bytes(VM_WORKING_SET_FILE, data, len);
	expect_load(-EBADMSG, "magic");
	data[0] ^= 0xff;
	free(data);
	/* recorded for another snapshot, or another memory size */
	ws.snapshot_id = TEST_SNAPSHOT_ID + 1;
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	expect_load(-ESTALE, "another snapshot");
	ws.snapshot_id = TEST_SNAPSHOT_ID;
	ws.memory_bytes = layout.total_size * 2;
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	expect_load(-ESTALE, "another snapshot");
	working_set_release(&ws);
}

static void test_runs_checked(void)
{
	struct working_set ws;
	char path[PATH_MAX];

	/* a run past the end of guest memory (checksum valid: the writer is hostile) */
	working_set_init(&ws, TEST_SNAPSHOT_ID, layout.total_size);
	CHECK_INT_EQ(working_set_add_page(&ws, layout.total_size - TEST_PAGE, false), 0);
	ws.runs[0].pages = 2;
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	expect_load(-EBADMSG, "outside guest memory");
	ws.runs[0].pages = 0;
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	expect_load(-EBADMSG, "outside guest memory");
	ws.runs[0] = (struct working_set_run){ .gpa = UINT64_MAX - TEST_PAGE + 1, .pages = 1 };
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	expect_load(-EBADMSG, "outside guest memory");
	working_set_release(&ws);
	/* overlapping runs */
	sample_set(&ws);
	ws.runs[1].gpa = 4 * TEST_PAGE;
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	expect_load(-EBADMSG, "overlap");
	working_set_release(&ws);
	/* a symlink is not followed; an absent file is just absent */
	path_in(path, sizeof(path), VM_WORKING_SET_FILE);
	unlink(path);
	expect_load(-ENOENT, NULL);
	CHECK_INT_EQ(symlink("/dev/zero", path), 0);
	expect_load(-ELOOP, NULL);
	unlink(path);
}

static void test_oversized_refused(void)
{
	size_t len = WORKING_SET_MAX_FILE_BYTES + 1;
	uint8_t *data = calloc(1, len);

	CHECK(data != NULL);
	if (!data)
		return;
	write_bytes(VM_WORKING_SET_FILE, data, len);
	expect_load(-EBADMSG, "bounded size");
	free(data);
}

static void test_garbage_never_crashes(void)
{
	uint8_t buf[TEST_GARBAGE_MAX];
	struct working_set ws;
	char err[TEST_ERR_MAX];

	srand(7);
	for (int round = 0; round < TEST_GARBAGE_ROUNDS; round++) {
		size_t len = (size_t)rand() % sizeof(buf);

		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)rand();
		if (round % 2 && len >= WORKING_SET_HEADER_BYTES) { /* a plausible header */
			uint32_t magic = WORKING_SET_MAGIC, version = WORKING_SET_VERSION;
			uint32_t count = (uint32_t)((len - WORKING_SET_HEADER_BYTES) /
						    WORKING_SET_RUN_BYTES);

			memcpy(buf, &magic, sizeof(magic));
			memcpy(buf + 4, &version, sizeof(version));
			memcpy(buf + 24, &count, sizeof(count));
			memset(buf + 28, 0, 4);
		}
		if (working_set_decode(buf, len, &layout, WORKING_SET_DECODE_IGNORE_CHECKSUM, &ws,
				       err, sizeof(err)) == 0)
			working_set_release(&ws);
	}
	CHECK(1);
}

/* The low region mapped MAP_PRIVATE from a sparse file the size of guest memory. */
static int map_memory(struct guest_memory *mem)
{
	char path[PATH_MAX];
	int fd;

	*mem = layout;
	path_in(path, sizeof(path), "memory.mem");
	fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)layout.total_size) < 0)
		return -1;
	mem->regions[0].host_addr = mmap(NULL, layout.regions[0].size, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_NORESERVE, fd, 0);
	close(fd);
	return mem->regions[0].host_addr == MAP_FAILED ? -1 : 0;
}

static void unmap_memory(struct guest_memory *mem)
{
	munmap(mem->regions[0].host_addr, mem->regions[0].size);
}

static uint64_t pagemap_entry(const void *addr)
{
	uint64_t entry = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	CHECK(fd >= 0);
	CHECK_INT_EQ((int)pread(fd, &entry, sizeof(entry),
				(off_t)((uintptr_t)addr / TEST_PAGE * sizeof(entry))),
		     (int)sizeof(entry));
	close(fd);
	return entry;
}

static void test_scan_and_prefetch(void)
{
	struct guest_memory mem;
	struct working_set touched, again;
	struct working_set_stats stats;
	volatile uint8_t sink = 0;

	CHECK_INT_EQ(map_memory(&mem), 0);
	/* reads of pages 3, 4, 5 and a write of page 100, as a guest would */
	for (uint64_t page = 3; page <= 5; page++)
		sink ^= mem.regions[0].host_addr[page * TEST_PAGE];
	mem.regions[0].host_addr[100 * TEST_PAGE] = 1;
	CHECK_INT_EQ(working_set_scan(&mem, TEST_SNAPSHOT_ID, &touched), 0);
	/* read faults map neighbours too (fault-around); the touched pages must be there */
	CHECK(touched.pages >= 4);
	CHECK(touched.memory_bytes == layout.total_size);
	/* the written page, and only it, is in a written run */
	CHECK(touched.written_pages == 1);
	for (uint32_t i = 0; i < touched.run_count; i++) {
		const struct working_set_run *run = &touched.runs[i];
		bool has_100 = run->gpa <= 100 * TEST_PAGE &&
			       100 * TEST_PAGE < run->gpa + run->pages * TEST_PAGE;

		CHECK(run->written == has_100);
	}
	unmap_memory(&mem);

	/* a fresh mapping has nothing mapped; the prefetch maps exactly the list, read-only */
	struct working_set listed;

	sample_set(&listed);
	CHECK_INT_EQ(map_memory(&mem), 0);
	CHECK_INT_EQ(working_set_scan(&mem, TEST_SNAPSHOT_ID, &again), 0);
	CHECK(again.pages == 0);
	working_set_release(&again);
	CHECK_INT_EQ(working_set_prefetch(&mem, &listed, &stats), 0);
	CHECK(stats.pages == 4 && stats.runs == 2 && stats.marks_writes);
	for (uint64_t page = 3; page <= 5; page++) {
		uint64_t entry = pagemap_entry(mem.regions[0].host_addr + page * TEST_PAGE);

		CHECK(entry & TEST_PAGEMAP_PRESENT);
		CHECK(entry & TEST_PAGEMAP_FILE); /* still the file's: a diff will not copy it */
	}
	/* the written run is copied in: the VM's own page, with the file's contents */
	CHECK(pagemap_entry(mem.regions[0].host_addr + 100 * TEST_PAGE) & TEST_PAGEMAP_PRESENT);
	CHECK(!(pagemap_entry(mem.regions[0].host_addr + 100 * TEST_PAGE) & TEST_PAGEMAP_FILE));
	CHECK(mem.regions[0].host_addr[100 * TEST_PAGE] == 0);
	CHECK(stats.written_pages == 1);
	CHECK(!(pagemap_entry(mem.regions[0].host_addr + 1000 * TEST_PAGE) &
		TEST_PAGEMAP_PRESENT));
	unmap_memory(&mem);
	working_set_release(&listed);
	working_set_release(&touched);
	(void)sink;
}

static void test_prefetch_dir_ignores_bad_list(void)
{
	struct guest_memory mem;
	struct working_set_stats stats = { .pages = 1 };
	struct working_set ws;
	uint8_t *data = NULL;
	size_t len = 0;

	sample_set(&ws);
	CHECK_INT_EQ(working_set_encode(&ws, &data, &len), 0);
	data[len - 1] ^= 1; /* garbled */
	write_bytes(VM_WORKING_SET_FILE, data, len);
	CHECK_INT_EQ(map_memory(&mem), 0);
	/* a bad list is still a list: the caller does not go looking for another */
	CHECK(working_set_prefetch_dir(&mem, root, TEST_SNAPSHOT_ID, &stats, NULL));
	CHECK(stats.pages == 0);
	CHECK(!(pagemap_entry(mem.regions[0].host_addr + 3 * TEST_PAGE) & TEST_PAGEMAP_PRESENT));
	/* the memory reads as the file does: the restore goes on with lazy faults */
	CHECK(mem.regions[0].host_addr[3 * TEST_PAGE] == 0);
	unmap_memory(&mem);
	/* a good list for this snapshot is prefetched */
	CHECK_INT_EQ(working_set_store(root, &ws), 0);
	CHECK_INT_EQ(map_memory(&mem), 0);
	CHECK(working_set_prefetch_dir(&mem, root, TEST_SNAPSHOT_ID, &stats, NULL));
	CHECK(stats.pages == 4);
	CHECK(pagemap_entry(mem.regions[0].host_addr + 3 * TEST_PAGE) & TEST_PAGEMAP_PRESENT);
	unmap_memory(&mem);
	free(data);
	working_set_release(&ws);
}

/* Writes a diff file: header (count), the gpas, then one page per gpa filled with fill[i]. */
static void write_diff(const char *name, uint64_t count, const uint64_t *gpas,
		       const uint8_t *fill, size_t pages_written)
{
	struct snapshot_diff_header header = { .magic = SNAPSHOT_DIFF_MAGIC, .page_count = count };
	size_t len = sizeof(header) + count * sizeof(uint64_t) + pages_written * TEST_PAGE;
	uint8_t *data = calloc(1, len);

	CHECK(data != NULL);
	if (!data)
		return;
	memcpy(data, &header, sizeof(header));
	memcpy(data + sizeof(header), gpas, count * sizeof(uint64_t));
	for (size_t i = 0; i < pages_written; i++)
		memset(data + sizeof(header) + count * sizeof(uint64_t) + i * TEST_PAGE, fill[i],
		       TEST_PAGE);
	write_bytes(name, data, len);
	free(data);
}

/*
 * A diff's pages land at their own frames, runs of consecutive frames and single ones alike,
 * as private pages; the frames between them still read as the base.
 */
static void test_overlay_diff_runs(void)
{
	static const uint64_t gpas[] = { 5 * TEST_PAGE, 6 * TEST_PAGE, 7 * TEST_PAGE,
					 20 * TEST_PAGE, 22 * TEST_PAGE, 23 * TEST_PAGE };
	static const uint8_t fill[] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66 };
	const size_t count = sizeof(gpas) / sizeof(gpas[0]);
	struct guest_memory mem;
	char path[PATH_MAX];

	write_diff("test.diff", count, gpas, fill, count);
	path_in(path, sizeof(path), "test.diff");
	CHECK_INT_EQ(map_memory(&mem), 0);
	CHECK_INT_EQ(snapshot_overlay_diff(&mem, path, count), 0);
	for (size_t i = 0; i < count; i++) {
		const uint8_t *page = mem.regions[0].host_addr + gpas[i];

		CHECK(page[0] == fill[i] && page[TEST_PAGE - 1] == fill[i]);
		CHECK(!(pagemap_entry(page) & TEST_PAGEMAP_FILE));
	}
	CHECK(mem.regions[0].host_addr[4 * TEST_PAGE] == 0);
	CHECK(mem.regions[0].host_addr[8 * TEST_PAGE] == 0);
	CHECK(mem.regions[0].host_addr[21 * TEST_PAGE] == 0);
	unmap_memory(&mem);
}

/* Every malformed diff is refused: wrong count, short data, a page off its frame or outside RAM. */
static void test_overlay_diff_refusals(void)
{
	const uint64_t in_ram[] = { 5 * TEST_PAGE, 6 * TEST_PAGE };
	const uint64_t unaligned[] = { 5 * TEST_PAGE + 1 };
	const uint64_t outside[] = { layout.total_size - TEST_PAGE, layout.total_size };
	const uint8_t fill[] = { 1, 2 };
	struct guest_memory mem;
	char path[PATH_MAX];

	path_in(path, sizeof(path), "test.diff");
	CHECK_INT_EQ(map_memory(&mem), 0);
	write_diff("test.diff", 2, in_ram, fill, 2);
	CHECK_INT_EQ(snapshot_overlay_diff(&mem, path, 3), -EBADMSG);
	write_diff("test.diff", 2, in_ram, fill, 1);
	CHECK_INT_EQ(snapshot_overlay_diff(&mem, path, 2), -EBADMSG);
	write_diff("test.diff", 1, unaligned, fill, 1);
	CHECK_INT_EQ(snapshot_overlay_diff(&mem, path, 1), -EBADMSG);
	write_diff("test.diff", 2, outside, fill, 2);
	CHECK_INT_EQ(snapshot_overlay_diff(&mem, path, 2), -EBADMSG);
	unmap_memory(&mem);
}

/* No list at all is the one case the restore of a diff falls back to its base's list. */
static void test_prefetch_dir_says_when_there_is_no_list(void)
{
	struct guest_memory mem;
	struct working_set_stats stats = { .pages = 1 };
	char empty[] = "/tmp/voidbox-ws-empty-XXXXXX";

	CHECK(mkdtemp(empty) != NULL);
	CHECK_INT_EQ(map_memory(&mem), 0);
	CHECK(!working_set_prefetch_dir(&mem, empty, TEST_SNAPSHOT_ID, &stats, NULL));
	CHECK(stats.pages == 0);
	unmap_memory(&mem);
	rmdir(empty);
}

int main(void)
{
	char err[TEST_ERR_MAX];

	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	CHECK_INT_EQ(guest_memory_plan(&layout, TEST_MEMORY_MB, 0, err, sizeof(err)), 0);
	RUN_TEST(test_runs_from_pages);
	RUN_TEST(test_round_trip);
	RUN_TEST(test_version_1_read);
	RUN_TEST(test_bad_files_refused);
	RUN_TEST(test_runs_checked);
	RUN_TEST(test_oversized_refused);
	RUN_TEST(test_garbage_never_crashes);
	RUN_TEST(test_scan_and_prefetch);
	RUN_TEST(test_prefetch_dir_ignores_bad_list);
	RUN_TEST(test_prefetch_dir_says_when_there_is_no_list);
	RUN_TEST(test_overlay_diff_runs);
	RUN_TEST(test_overlay_diff_refusals);
	char cmd[sizeof(root) + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return harness_finish();
}
