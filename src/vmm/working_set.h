/*
 * Record-and-prefetch of a restored guest's working set (the technique of vHive's REAP,
 * ASPLOS 2021): almost all of a restore's time is the guest touching pages of the mapped memory
 * file one fault at a time, and a guest restored from one snapshot touches nearly the same pages
 * on its way to its first answer every time.
 *
 * The first restore of a snapshot records which guest pages are mapped once its first exec has
 * answered (from /proc/self/pagemap, which marks exactly the pages of the private file mapping
 * the process has touched, read or written) and stores them beside the snapshot as runs of
 * pages (VM_WORKING_SET_FILE), marking the runs the guest wrote. Every later restore reads that
 * list and maps those runs in large calls (MADV_WILLNEED to start the reads, then
 * MADV_POPULATE_WRITE for the written runs and MADV_POPULATE_READ for the rest) before any vCPU
 * runs. Read pages stay the file's, mapped read-only, so a later diff finds only what was
 * written; written runs become the VM's own copies up front (the guest writes them again on
 * its way to its first answer, and each first write would otherwise be a copy-on-write fault
 * taken by a running guest), so a later diff also holds those pages, written or not.
 *
 * The file is a hint: a missing, stale (another snapshot id or memory size), truncated or
 * garbled one is ignored with a log line and the restore proceeds with lazy faults; the next
 * first exec records a fresh one. Every field is bounded and checked before it is used (it
 * lives in a directory that may have been copied from anywhere), and the decoder is fuzzed
 * (fuzz/working_set_fuzz.c). The layout is in docs/snapshot-format.md.
 */
#ifndef VOIDBOX_VMM_WORKING_SET_H
#define VOIDBOX_VMM_WORKING_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/guest_memory.h"

#define VM_WORKING_SET_FILE "workingset"
#define WORKING_SET_MAGIC 0x53574256u /* "VBWS" little-endian */
#define WORKING_SET_VERSION 2u
/* version 1 runs are {u64 gpa, u64 pages}, all read; version 2 runs {u64 gpa, u32 pages, u32 flags} */
#define WORKING_SET_VERSION_READ_ONLY 1u
#define WORKING_SET_RUN_WRITTEN 1u /* flags: the guest wrote these pages; copy them in ahead */
#define WORKING_SET_PAGE_SIZE 4096u
/* magic, version, snapshot id, memory bytes, run count, reserved, checksum */
#define WORKING_SET_HEADER_BYTES 40u
#define WORKING_SET_RUN_BYTES 16u
/* A guest scattered over more runs than this is not worth a list; it restores lazily. */
#define WORKING_SET_MAX_RUNS 65536u
#define WORKING_SET_MAX_FILE_BYTES \
	(WORKING_SET_HEADER_BYTES + (size_t)WORKING_SET_MAX_RUNS * WORKING_SET_RUN_BYTES)

struct working_set_run {
	uint64_t gpa;	/* page-aligned guest-physical address */
	uint64_t pages; /* >= 1; the run lies inside one RAM region */
	bool written;	/* the recorded guest wrote every page of it, not only read */
};

struct working_set {
	uint64_t snapshot_id;  /* the state file's id it was recorded for */
	uint64_t memory_bytes; /* the guest RAM size it was recorded for */
	struct working_set_run *runs; /* ascending and disjoint */
	uint32_t run_count;
	size_t run_cap;
	uint64_t pages;		/* sum of the runs' pages */
	uint64_t written_pages; /* of them, in written runs */
	bool marks_writes;	/* false: a version 1 list, whose runs are all read ones */
};

enum working_set_decode_mode {
	WORKING_SET_DECODE_CHECKED,	    /* the checksum must match */
	WORKING_SET_DECODE_IGNORE_CHECKSUM, /* fuzzing: reach the run checks */
};

/* What a prefetch or record did, for logs and the benchmark. */
struct working_set_stats {
	uint64_t pages;
	uint64_t written_pages;
	bool marks_writes; /* the list marks written runs (not version 1) */
	uint32_t runs;
	uint64_t elapsed_ns;
};

void working_set_init(struct working_set *ws, uint64_t snapshot_id, uint64_t memory_bytes);
void working_set_release(struct working_set *ws);
/*
 * Appends the page at gpa (ascending order), extending the last run when adjacent and written
 * alike; -errno.
 */
int working_set_add_page(struct working_set *ws, uint64_t gpa, bool written);

/* The file's bytes (malloc'ed into *out). 0, -EINVAL (too many runs) or -ENOMEM. */
int working_set_encode(const struct working_set *ws, uint8_t **out, size_t *out_len);
/*
 * Decodes and checks data against the RAM layout (regions and total size; no mapping needed):
 * header, length, checksum (per mode), every run page-aligned, non-empty, inside one region,
 * ascending and disjoint. Returns 0 with *ws (release it), or -EBADMSG with a sentence in err.
 */
int working_set_decode(const uint8_t *data, size_t len, const struct guest_memory *layout,
		       enum working_set_decode_mode mode, struct working_set *ws, char *err,
		       size_t errlen);

/*
 * Reads dir/VM_WORKING_SET_FILE and checks it belongs to snapshot_id and layout. 0 with *ws;
 * -ENOENT when there is none; -EBADMSG (garbled, too large) or -ESTALE (another snapshot or
 * memory size) with a sentence in err.
 */
int working_set_load(const char *dir, uint64_t snapshot_id, const struct guest_memory *layout,
		     struct working_set *ws, char *err, size_t errlen);
/* Writes ws to dir/VM_WORKING_SET_FILE (temporary name, rename); 0 or -errno. */
int working_set_store(const char *dir, const struct working_set *ws);

/*
 * Every page of mem's mappings that this process has mapped or written (pagemap present or
 * swapped), as runs; a page that is the VM's own (written since the mapping: anonymous, or
 * swapped) is in a written run. 0 with *ws, or -errno.
 */
int working_set_scan(const struct guest_memory *mem, uint64_t snapshot_id, struct working_set *ws);
/*
 * Maps every run of ws into mem's mappings (readahead first, then populate): a written run as
 * private copies (a write fault each, taken now rather than by the guest), any other as the
 * file's pages (a read fault). Pages already private to the VM are left as they are. 0, or
 * -errno from the first run that failed (the rest then fault in lazily, as without a list).
 */
int working_set_prefetch(const struct guest_memory *mem, const struct working_set *ws,
			 struct working_set_stats *stats);

/*
 * The restore's step: loads dir's list for snapshot_id and prefetches it into mem. Never fails
 * the restore: a missing list is logged at debug level, a bad one as a warning. *stats (may be
 * NULL) gets what was prefetched (zero when nothing was). When keep is not NULL, a list that
 * was prefetched whole moves into *keep (release it) for the restore's later steps. Returns
 * false only when dir has no list at all, so the caller may try another (a diff's base).
 */
bool working_set_prefetch_dir(const struct guest_memory *mem, const char *dir,
			      uint64_t snapshot_id, struct working_set_stats *stats,
			      struct working_set *keep);

/* The info line for a record that wrote a list: one wording wherever the VM runs. */
void working_set_log_recorded(const char *log_tag, const char *dir,
			      const struct working_set_stats *stats);

struct vm;
/*
 * Records vm's working set beside the snapshot it was restored from (dir), unless dir already
 * holds a valid list for that snapshot (the restore then prefetched it, and the mapped pages
 * say more about the prefetch than about the guest) that marks written runs; a version 1 list
 * is recorded again, so its written pages are copied in from then on. Call once the first exec
 * has answered.
 * 0 (recorded, or nothing to do), or -errno with a sentence in err; *stats may be NULL.
 */
int vm_working_set_record(struct vm *vm, const char *dir, struct working_set_stats *stats,
			  char *err, size_t errlen);
/*
 * True when vm was restored and prefetched a valid list of its own snapshot's directory that
 * marks written runs: a record would then have nothing to do, so a caller need not ask for one.
 */
bool vm_working_set_known(const struct vm *vm);
/*
 * Pages of the prefetched working set that vm's restore also mapped into KVM's stage-2 page
 * tables ahead of the guest (KVM_PRE_FAULT_MEMORY); 0 where the kernel cannot, or without a list.
 */
uint64_t vm_working_set_prefaulted_pages(const struct vm *vm);

#endif
