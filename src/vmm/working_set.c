/*
 * Working-set record and prefetch (the design is in working_set.h, the file layout in
 * docs/snapshot-format.md).
 *
 * The codec is pure (bytes and a RAM layout in, runs out) so the unit tests and the fuzz target
 * drive it without KVM. Recording reads /proc/self/pagemap in bounded chunks, so a large guest
 * costs a few reads, never one allocation per guest page. Prefetching is two passes over the
 * runs: MADV_WILLNEED first, so the reads of every run are queued before the first one is
 * waited on, then MADV_POPULATE_READ, which maps the pages without copying them (a read fault),
 * so they stay the memory file's and a diff still sees only written pages, or, for a run the
 * recorded guest wrote, MADV_POPULATE_WRITE, which copies them in now. A kernel without them
 * (before 5.14) gets the same effect from one read, or one read and write back, per page.
 */
#include "vmm/working_set.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array.h"
#include "common/byte_buffer.h"
#include "common/clock.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_file.h"
#include "vmm/vm_internal.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define WS_LOG "snapshot"
#define WS_FILE_MODE 0600
#define WS_INITIAL_RUNS 256u
#define WS_PAGEMAP_PATH "/proc/self/pagemap"
#define WS_PAGEMAP_CHUNK 4096u /* entries per pread: 32 KiB, 16 MiB of guest memory */
#define WS_PAGEMAP_PRESENT (1ULL << 63)
#define WS_PAGEMAP_SWAPPED (1ULL << 62)
#define WS_PAGEMAP_FILE (1ULL << 61) /* the page is the file's (or shared), not the VM's own */
#define WS_TMP_NAME_MAX 64
#define WS_ERR_MAX 256
#define WS_NS_PER_MS 1000000u

void working_set_init(struct working_set *ws, uint64_t snapshot_id, uint64_t memory_bytes)
{
	memset(ws, 0, sizeof(*ws));
	ws->snapshot_id = snapshot_id;
	ws->memory_bytes = memory_bytes;
	ws->marks_writes = true;
}

void working_set_release(struct working_set *ws)
{
	free(ws->runs);
	ws->runs = NULL;
	ws->run_count = 0;
	ws->run_cap = 0;
	ws->pages = 0;
	ws->written_pages = 0;
}

int working_set_add_page(struct working_set *ws, uint64_t gpa, bool written)
{
	struct working_set_run *last = ws->run_count ? &ws->runs[ws->run_count - 1] : NULL;

	if (gpa % WORKING_SET_PAGE_SIZE)
		return -EINVAL;
	if (last && gpa < last->gpa + last->pages * WORKING_SET_PAGE_SIZE)
		return -EINVAL; /* not ascending */
	if (last && gpa == last->gpa + last->pages * WORKING_SET_PAGE_SIZE &&
	    last->written == written) {
		last->pages++;
		ws->pages++;
		ws->written_pages += written;
		return 0;
	}
	if (ws->run_count == WORKING_SET_MAX_RUNS)
		return -E2BIG;
	if (!array_reserve_one((void **)&ws->runs, &ws->run_cap, ws->run_count,
			       sizeof(*ws->runs), WS_INITIAL_RUNS))
		return -ENOMEM;
	ws->runs[ws->run_count++] =
		(struct working_set_run){ .gpa = gpa, .pages = 1, .written = written };
	ws->pages++;
	ws->written_pages += written;
	return 0;
}

/* ---- codec ---- */

static void working_set_write_runs(struct byte_writer *w, const struct working_set *ws)
{
	for (uint32_t i = 0; i < ws->run_count; i++) {
		byte_writer_u64(w, ws->runs[i].gpa);
		byte_writer_u32(w, (uint32_t)ws->runs[i].pages);
		byte_writer_u32(w, ws->runs[i].written ? WORKING_SET_RUN_WRITTEN : 0);
	}
}

int working_set_encode(const struct working_set *ws, uint8_t **out, size_t *out_len)
{
	struct byte_writer runs, file;

	*out = NULL;
	*out_len = 0;
	if (ws->run_count > WORKING_SET_MAX_RUNS)
		return -EINVAL;
	for (uint32_t i = 0; i < ws->run_count; i++)
		if (ws->runs[i].pages > UINT32_MAX)
			return -EINVAL; /* a run's page count is a u32 */
	byte_writer_init(&runs);
	working_set_write_runs(&runs, ws);
	byte_writer_init(&file);
	byte_writer_u32(&file, WORKING_SET_MAGIC);
	byte_writer_u32(&file, WORKING_SET_VERSION);
	byte_writer_u64(&file, ws->snapshot_id);
	byte_writer_u64(&file, ws->memory_bytes);
	byte_writer_u32(&file, ws->run_count);
	byte_writer_u32(&file, 0); /* reserved */
	byte_writer_u64(&file, snapshot_checksum(runs.data, runs.len));
	byte_writer_bytes(&file, runs.data, runs.len);
	byte_writer_free(&runs);
	if (byte_writer_failed(&runs) || byte_writer_failed(&file)) {
		byte_writer_free(&file);
		return -ENOMEM;
	}
	*out = file.data;
	*out_len = file.len;
	return 0;
}

/* True when [gpa, gpa + pages pages) lies wholly inside one region of layout. */
static bool working_set_run_fits(const struct guest_memory *layout, uint64_t gpa, uint64_t pages)
{
	if (pages == 0 || pages > layout->total_size / WORKING_SET_PAGE_SIZE)
		return false;
	uint64_t len = pages * WORKING_SET_PAGE_SIZE;

	for (size_t i = 0; i < layout->region_count; i++) {
		const struct guest_memory_region *region = &layout->regions[i];

		if (gpa >= region->guest_phys_addr &&
		    gpa - region->guest_phys_addr <= region->size &&
		    len <= region->size - (gpa - region->guest_phys_addr))
			return true;
	}
	return false;
}

static int working_set_refuse(char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "the working-set file is not valid (%s): it is ignored, and the "
		 "next restore records a new one", what);
	return -EBADMSG;
}

static int working_set_decode_runs(struct byte_reader *in, uint32_t version, uint32_t count,
				   const struct guest_memory *layout, struct working_set *ws,
				   char *err, size_t errlen)
{
	uint64_t next_free = 0; /* runs must start past the end of the previous one */

	ws->runs = count ? calloc(count, sizeof(*ws->runs)) : NULL;
	if (count && !ws->runs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	ws->run_cap = count;
	for (uint32_t i = 0; i < count; i++) {
		uint64_t gpa = byte_reader_u64(in), pages;
		uint32_t flags = 0;

		if (version == WORKING_SET_VERSION_READ_ONLY) {
			pages = byte_reader_u64(in);
		} else {
			pages = byte_reader_u32(in);
			flags = byte_reader_u32(in);
		}
		if (flags & ~WORKING_SET_RUN_WRITTEN)
			return working_set_refuse(err, errlen, "a run has unknown flags");
		if (gpa % WORKING_SET_PAGE_SIZE || !working_set_run_fits(layout, gpa, pages))
			return working_set_refuse(err, errlen, "a run lies outside guest memory");
		if (i > 0 && gpa < next_free)
			return working_set_refuse(err, errlen, "runs overlap or are out of order");
		ws->runs[i] = (struct working_set_run){
			.gpa = gpa, .pages = pages, .written = flags & WORKING_SET_RUN_WRITTEN
		};
		ws->run_count++;
		ws->pages += pages;
		if (ws->runs[i].written)
			ws->written_pages += pages;
		next_free = gpa + pages * WORKING_SET_PAGE_SIZE;
	}
	return 0;
}

int working_set_decode(const uint8_t *data, size_t len, const struct guest_memory *layout,
		       enum working_set_decode_mode mode, struct working_set *ws, char *err,
		       size_t errlen)
{
	struct byte_reader in;
	uint32_t magic, version, count, reserved;
	uint64_t checksum;
	int rc;

	working_set_init(ws, 0, 0);
	if (len < WORKING_SET_HEADER_BYTES || len > WORKING_SET_MAX_FILE_BYTES)
		return working_set_refuse(err, errlen, "wrong size");
	byte_reader_init(&in, data, len);
	magic = byte_reader_u32(&in);
	version = byte_reader_u32(&in);
	ws->snapshot_id = byte_reader_u64(&in);
	ws->memory_bytes = byte_reader_u64(&in);
	count = byte_reader_u32(&in);
	reserved = byte_reader_u32(&in);
	checksum = byte_reader_u64(&in);
	if (magic != WORKING_SET_MAGIC || reserved != 0 ||
	    (version != WORKING_SET_VERSION && version != WORKING_SET_VERSION_READ_ONLY))
		return working_set_refuse(err, errlen, "unknown magic or version");
	if (count > WORKING_SET_MAX_RUNS ||
	    len - WORKING_SET_HEADER_BYTES != (size_t)count * WORKING_SET_RUN_BYTES)
		return working_set_refuse(err, errlen, "its length does not match its run count");
	if (mode == WORKING_SET_DECODE_CHECKED &&
	    snapshot_checksum(data + WORKING_SET_HEADER_BYTES, len - WORKING_SET_HEADER_BYTES) !=
		    checksum)
		return working_set_refuse(err, errlen, "checksum mismatch");
	ws->marks_writes = version != WORKING_SET_VERSION_READ_ONLY;
	rc = working_set_decode_runs(&in, version, count, layout, ws, err, errlen);
	if (rc == 0 && byte_reader_finish(&in) < 0)
		rc = working_set_refuse(err, errlen, "trailing bytes");
	if (rc < 0)
		working_set_release(ws);
	return rc;
}

/* ---- the file ---- */

int working_set_load(const char *dir, uint64_t snapshot_id, const struct guest_memory *layout,
		     struct working_set *ws, char *err, size_t errlen)
{
	char path[PATH_MAX];
	uint8_t *data = NULL;
	struct stat st;
	int rc, fd;

	working_set_init(ws, 0, 0);
	if (snapshot_path(path, dir, VM_WORKING_SET_FILE) < 0)
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc == 0 && (!S_ISREG(st.st_mode) || st.st_size < 0 ||
			(uint64_t)st.st_size > WORKING_SET_MAX_FILE_BYTES))
		rc = working_set_refuse(err, errlen, "not a regular file of a bounded size");
	if (rc == 0 && !(data = malloc((size_t)st.st_size + 1)))
		rc = -ENOMEM;
	if (rc == 0) {
		ssize_t got = fd_read_full(fd, data, (size_t)st.st_size + 1);

		rc = got < 0 ? (int)got : 0;
		if (rc == 0)
			rc = working_set_decode(data, (size_t)got, layout,
						WORKING_SET_DECODE_CHECKED, ws, err, errlen);
	}
	if (rc == 0 && (ws->snapshot_id != snapshot_id || ws->memory_bytes != layout->total_size)) {
		snprintf(err, errlen, "the working-set file was recorded for another snapshot: it "
			 "is ignored, and the next restore records a new one");
		working_set_release(ws);
		rc = -ESTALE;
	}
	free(data);
	close(fd);
	return rc;
}

int working_set_store(const char *dir, const struct working_set *ws)
{
	char tmp_name[WS_TMP_NAME_MAX], tmp[PATH_MAX], final[PATH_MAX];
	uint8_t *data = NULL;
	size_t len = 0;
	int rc, fd;

	/* unique per thread: two sandboxes of one process may record into one directory */
	snprintf(tmp_name, sizeof(tmp_name), "." VM_WORKING_SET_FILE ".tmp-%ld-%ld", (long)getpid(),
		 (long)gettid());
	if (snapshot_path(tmp, dir, tmp_name) < 0 ||
	    snapshot_path(final, dir, VM_WORKING_SET_FILE) < 0)
		return -ENAMETOOLONG;
	rc = working_set_encode(ws, &data, &len);
	if (rc < 0)
		return rc;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, WS_FILE_MODE);
	if (fd < 0)
		rc = -errno;
	if (fd >= 0) {
		rc = fd_write_full(fd, data, len);
		close(fd);
		/* a torn file after a crash fails its checksum and is recorded again */
		if (rc == 0 && rename(tmp, final) < 0)
			rc = -errno;
		if (rc < 0)
			unlink(tmp);
	}
	free(data);
	return rc;
}

/* ---- record ---- */

static int working_set_scan_region(int pagemap_fd, const struct guest_memory_region *region,
				   uint64_t *entries, struct working_set *ws)
{
	uint64_t pages = region->size / WORKING_SET_PAGE_SIZE;
	uint64_t first = (uintptr_t)region->host_addr / WORKING_SET_PAGE_SIZE;

	for (uint64_t done = 0; done < pages;) {
		uint64_t chunk = pages - done < WS_PAGEMAP_CHUNK ? pages - done : WS_PAGEMAP_CHUNK;
		int rc = fd_pread_full(pagemap_fd, entries, chunk * sizeof(uint64_t),
				       (first + done) * sizeof(uint64_t));

		if (rc < 0)
			return rc;
		for (uint64_t i = 0; i < chunk; i++) {
			bool present = entries[i] & WS_PAGEMAP_PRESENT;
			bool swapped = entries[i] & WS_PAGEMAP_SWAPPED;

			if (!present && !swapped)
				continue;
			rc = working_set_add_page(ws,
						  region->guest_phys_addr +
							  (done + i) * WORKING_SET_PAGE_SIZE,
						  swapped || !(entries[i] & WS_PAGEMAP_FILE));
			if (rc < 0)
				return rc;
		}
		done += chunk;
	}
	return 0;
}

int working_set_scan(const struct guest_memory *mem, uint64_t snapshot_id, struct working_set *ws)
{
	uint64_t *entries = malloc(WS_PAGEMAP_CHUNK * sizeof(uint64_t));
	int rc = entries ? 0 : -ENOMEM;
	int pagemap_fd = -1;

	working_set_init(ws, snapshot_id, mem->total_size);
	if (rc == 0) {
		pagemap_fd = open(WS_PAGEMAP_PATH, O_RDONLY | O_CLOEXEC);
		if (pagemap_fd < 0)
			rc = -errno;
	}
	/* regions are ordered by guest address, so the runs come out ascending */
	for (size_t r = 0; rc == 0 && r < mem->region_count; r++)
		rc = mem->regions[r].host_addr
			     ? working_set_scan_region(pagemap_fd, &mem->regions[r], entries, ws)
			     : -EINVAL;
	if (pagemap_fd >= 0)
		close(pagemap_fd);
	free(entries);
	if (rc < 0)
		working_set_release(ws);
	return rc;
}

bool vm_working_set_known(const struct vm *vm)
{
	return vm->working_set_known;
}

uint64_t vm_working_set_prefaulted_pages(const struct vm *vm)
{
	return vm->working_set_prefaulted;
}

int vm_working_set_record(struct vm *vm, const char *dir, struct working_set_stats *stats,
			  char *err, size_t errlen)
{
	struct vm_snapshot_info info;
	struct working_set ws;
	char ignored[WS_ERR_MAX];
	uint64_t start_ns = clock_monotonic_ns();
	int rc = vm_snapshot_inspect(dir, &info, err, errlen);

	if (stats)
		*stats = (struct working_set_stats){ 0 };
	if (rc < 0)
		return rc;
	if (working_set_load(dir, info.id, &vm->mem, &ws, ignored, sizeof(ignored)) == 0) {
		bool current = ws.marks_writes;

		working_set_release(&ws);
		if (current)
			return 0;
	}
	rc = working_set_scan(&vm->mem, info.id, &ws);
	if (rc == 0)
		rc = working_set_store(dir, &ws);
	if (rc < 0) {
		snprintf(err, errlen, "cannot record the working set of %s: %s", dir,
			 rc == -E2BIG ? "the guest touched too scattered a set of pages"
				      : strerror(-rc));
	} else if (stats) {
		*stats = (struct working_set_stats){ .pages = ws.pages,
						     .written_pages = ws.written_pages,
						     .runs = ws.run_count,
						     .elapsed_ns = clock_monotonic_ns() - start_ns };
	}
	working_set_release(&ws);
	return rc;
}

void working_set_log_recorded(const char *log_tag, const char *dir,
			      const struct working_set_stats *stats)
{
	log_info(log_tag, "recorded the working set of %s: %" PRIu64 " pages (%" PRIu64
		 " written) in %u runs in %" PRIu64 " ms", dir, stats->pages,
		 stats->written_pages, stats->runs, stats->elapsed_ns / WS_NS_PER_MS);
}

/* ---- prefetch ---- */

/*
 * One read per page, or one read and the same byte written back: what MADV_POPULATE_READ and
 * MADV_POPULATE_WRITE do, for kernels without them. Safe only before any vCPU runs.
 */
static void working_set_touch(uint8_t *addr, uint64_t len, bool write)
{
	for (uint64_t off = 0; off < len; off += WORKING_SET_PAGE_SIZE) {
		volatile uint8_t *byte = addr + off;
		uint8_t value = *byte;

		if (write)
			*byte = value;
	}
}

int working_set_prefetch(const struct guest_memory *mem, const struct working_set *ws,
			 struct working_set_stats *stats)
{
	uint64_t start_ns = clock_monotonic_ns();
	bool populate = true;

	for (uint32_t i = 0; i < ws->run_count; i++) {
		uint64_t len = ws->runs[i].pages * WORKING_SET_PAGE_SIZE;
		void *addr = guest_memory_ptr(mem, ws->runs[i].gpa, len);

		if (!addr)
			return -EFAULT;
		(void)madvise(addr, len, MADV_WILLNEED); /* only a hint; populate decides */
	}
	for (uint32_t i = 0; i < ws->run_count; i++) {
		uint64_t len = ws->runs[i].pages * WORKING_SET_PAGE_SIZE;
		uint8_t *addr = guest_memory_ptr(mem, ws->runs[i].gpa, len);
		int advice = ws->runs[i].written ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;

		if (populate && madvise(addr, len, advice) == 0)
			continue;
		if (populate && errno != EINVAL)
			return -errno;
		populate = false;
		working_set_touch(addr, len, ws->runs[i].written);
	}
	if (stats)
		*stats = (struct working_set_stats){ .pages = ws->pages,
						     .written_pages = ws->written_pages,
						     .marks_writes = ws->marks_writes,
						     .runs = ws->run_count,
						     .elapsed_ns = clock_monotonic_ns() - start_ns };
	return 0;
}

bool working_set_prefetch_dir(const struct guest_memory *mem, const char *dir,
			      uint64_t snapshot_id, struct working_set_stats *stats,
			      struct working_set *keep)
{
	struct working_set ws;
	struct working_set_stats done = { 0 };
	char err[WS_ERR_MAX];
	int rc = working_set_load(dir, snapshot_id, mem, &ws, err, sizeof(err));

	if (rc == -ENOENT) {
		log_debug(WS_LOG, "%s has no working-set list yet: pages load on first touch", dir);
	} else if (rc < 0) {
		log_warn(WS_LOG, "%s: %s", dir, rc == -EBADMSG || rc == -ESTALE ? err :
			 strerror(-rc));
	} else {
		rc = working_set_prefetch(mem, &ws, &done);
		if (rc < 0)
			log_warn(WS_LOG, "prefetching the working set of %s stopped: %s; the rest "
				 "loads on first touch", dir, strerror(-rc));
		else
			log_info(WS_LOG, "prefetched %" PRIu64 " pages in %u runs (%" PRIu64
				 " of them copied in for writing) in %" PRIu64 " ms", done.pages,
				 done.runs, done.written_pages, done.elapsed_ns / WS_NS_PER_MS);
		if (rc == 0 && keep)
			*keep = ws; /* the caller's now */
		else
			working_set_release(&ws);
	}
	if (stats)
		*stats = done;
	return rc != -ENOENT;
}
