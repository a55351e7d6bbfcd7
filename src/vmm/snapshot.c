/*
 * Snapshot save, inspect and restore (the API and the directory layout are in snapshot.h,
 * every byte of the state file in docs/snapshot-format.md).
 *
 * The state file is a fixed header (magic, version, body length, the body's SHA-256) and a
 * body of named, checksummed sections written field by field (snapshot_file.c). Reading
 * checks the header, length and hash before it looks at any section, and bounds-checks every
 * section, so a truncated or corrupted file is refused with a sentence, never parsed.
 *
 * Memory: a base writes all RAM regions back to back into memory.mem, leaving all-zero pages
 * as holes (sparse file). Restore maps that file MAP_PRIVATE, so pages load lazily and writes
 * (the guest's through KVM, and the vsock device's from the host) become private anonymous
 * pages. That is also how a diff finds its pages: /proc/self/pagemap marks exactly the pages
 * that are no longer the file's, whoever wrote them. (KVM's dirty log would miss the device's
 * host-side writes.) A VM that saves a base and resumes is remapped over its own new
 * memory.mem for the same reason, so it can save diffs against it later. Before the vCPUs
 * exist, a restore prefetches the pages the snapshot's working-set list names (working_set.h),
 * and once they hold their state, maps those pages into KVM ahead of the guest where the
 * kernel can (KVM_PRE_FAULT_MEMORY).
 */
#include "vmm/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "vmm/device.h"
#include "vmm/memory.h"
#include "vmm/snapshot_file.h"
#include "vmm/vcpu_state.h"
#include "vmm/vm_internal.h"
#include "vmm/working_set.h"

#define SNAP_LOG "snapshot"
#define SNAP_FILE_MODE 0600
#define SNAP_DIR_MODE 0700
#define SNAP_PAGE_SIZE 4096u
#define SNAP_PAGEMAP_PATH "/proc/self/pagemap"
#define PAGEMAP_PRESENT (1ULL << 63)
#define PAGEMAP_SWAPPED (1ULL << 62)
#define PAGEMAP_FILE_OR_SHARED (1ULL << 61)
#define SNAP_IOAPIC_LEVEL_BIT (1ULL << 15) /* redirection entry: trigger mode level */
#define SNAP_IOAPIC_REMOTE_IRR_BIT (1ULL << 14)
#define NSEC_PER_SEC_U64 1000000000ULL
#define NSEC_PER_MSEC_U64 1000000ULL
#define SNAP_MEMORY_TMP "." VM_SNAPSHOT_MEMORY_FILE ".tmp"
#define SNAP_DIFF_TMP "." VM_SNAPSHOT_DIFF_FILE ".tmp"
#define SNAP_KVM_ERROR_MAX 256 /* a KVM setup error: one sentence */

const char *vm_snapshot_type_name(enum vm_snapshot_type type)
{
	switch (type) {
	case VM_SNAPSHOT_BASE:
		return "base";
	case VM_SNAPSHOT_DIFF:
		return "diff";
	default:
		return "unknown";
	}
}

/* ---- pause and resume ---- */

/* Parks every vCPU outside KVM_RUN with its pending I/O completed; 0 or -errno. */
static int snapshot_pause(struct vm *vm)
{
	atomic_store(&vm->stop, true);
	vm_kick_all(vm);
	for (unsigned int i = 0; i < vm->vcpus_created; i++)
		vm_join_vcpu(vm, &vm->vcpus[i]);
	for (unsigned int i = 0; i < vm->vcpus_created; i++) {
		int rc = vcpu_state_settle(vm->vcpus[i].fd, vm->vcpus[i].run);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static int snapshot_resume(struct vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	bool ended = vm->reason != VM_EXIT_NONE;

	pthread_mutex_unlock(&vm->lock);
	if (ended)
		return -ECHILD;
	atomic_store(&vm->stop, false);
	for (unsigned int i = 0; i < vm->vcpus_created; i++) {
		vcpu_state_clock_paused(vm->vcpus[i].fd);
		int rc = vm_start_vcpu(vm, &vm->vcpus[i]);

		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- capture ---- */

static int snapshot_capture_vm(struct vm *vm, struct snapshot_image *image)
{
	static const uint32_t chips[SNAPSHOT_IRQCHIP_COUNT] = {
		KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_IRQCHIP_IOAPIC,
	};

	for (unsigned int i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++) {
		image->irqchips[i].chip_id = chips[i];
		if (ioctl(vm->kvm.vm_fd, KVM_GET_IRQCHIP, &image->irqchips[i]) < 0)
			return -errno;
	}
	if (ioctl(vm->kvm.vm_fd, KVM_GET_PIT2, &image->pit) < 0 ||
	    ioctl(vm->kvm.vm_fd, KVM_GET_CLOCK, &image->clock) < 0)
		return -errno;
	for (unsigned int i = 0; i < vm->vcpus_created; i++) {
		int rc = vcpu_state_capture(vm->vcpus[i].fd, &image->vcpus[i]);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static void snapshot_fill_meta(struct vm *vm, struct snapshot_image *image,
			       const struct vm_snapshot_options *opts)
{
	struct snapshot_meta *meta = &image->meta;
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	meta->type = opts->type;
	meta->memory_mb = (uint32_t)(vm->mem.total_size / GUEST_MEMORY_MIB);
	meta->vcpus = vm->vcpus_created;
	meta->cid = vm->vsock_cid;
	meta->created_unix_ns = (uint64_t)now.tv_sec * NSEC_PER_SEC_U64 + (uint64_t)now.tv_nsec;
	snapshot_cpu_signature(meta->cpu_signature);
	memcpy(meta->secret, vm->secret, sizeof(meta->secret));
	snprintf(meta->cmdline, sizeof(meta->cmdline), "%s", vm->cmdline);
	meta->has_cpu_features = vm->vcpus_created > 0 &&
				 cpu_features_of_vcpu(vm->vcpus[0].fd, &meta->cpu_features) == 0;
}

/* ---- memory files ---- */

static bool snapshot_page_is_zero(const uint8_t *page)
{
	static const uint8_t zero[SNAP_PAGE_SIZE];

	return memcmp(page, zero, SNAP_PAGE_SIZE) == 0;
}

/* One region at file_offset: each run of non-zero pages in one write, zero pages as holes. */
static int snapshot_write_region(const struct guest_memory_region *region, int fd,
				 uint64_t file_offset)
{
	uint64_t run_start = 0, run_len = 0;

	for (uint64_t off = 0; off <= region->size; off += SNAP_PAGE_SIZE) {
		bool data = off < region->size && !snapshot_page_is_zero(region->host_addr + off);

		if (data) {
			if (run_len == 0)
				run_start = off;
			run_len += SNAP_PAGE_SIZE;
			continue;
		}
		if (run_len == 0)
			continue;
		int rc = fd_pwrite_full(fd, region->host_addr + run_start, run_len,
					file_offset + run_start);

		if (rc < 0)
			return rc;
		run_len = 0;
	}
	return 0;
}

/* All regions back to back; zero pages become holes. */
static int snapshot_write_base_memory(const struct guest_memory *mem, int fd)
{
	uint64_t file_offset = 0;

	if (ftruncate(fd, (off_t)mem->total_size) < 0)
		return -errno;
	for (size_t r = 0; r < mem->region_count; r++) {
		int rc = snapshot_write_region(&mem->regions[r], fd, file_offset);

		if (rc < 0)
			return rc;
		file_offset += mem->regions[r].size;
	}
	return 0;
}

/* The pagemap entry (u64 per page) of every page of [addr, addr + size). */
static int snapshot_read_pagemap(int pagemap_fd, const uint8_t *addr, uint64_t size,
				  uint64_t *entries)
{
	uint64_t pages = size / SNAP_PAGE_SIZE;
	off_t offset = (off_t)((uintptr_t)addr / SNAP_PAGE_SIZE * sizeof(uint64_t));

	return fd_pread_full(pagemap_fd, entries, pages * sizeof(uint64_t), (uint64_t)offset);
}

static bool snapshot_pagemap_written(uint64_t entry)
{
	return (entry & PAGEMAP_SWAPPED) ||
	       ((entry & PAGEMAP_PRESENT) && !(entry & PAGEMAP_FILE_OR_SHARED));
}

/*
 * memory.diff: header, the guest-physical address of each page, then the pages. pagemap is
 * read once per region and used for both the count and the writes; nothing can write guest
 * memory in between, because the vCPUs are parked and the vsock worker is held.
 */
static int snapshot_write_diff_memory(const struct guest_memory *mem, int fd, uint64_t *pages_out)
{
	struct snapshot_diff_header header = { .magic = SNAPSHOT_DIFF_MAGIC };
	uint64_t *entries[GUEST_MEMORY_MAX_REGIONS] = { 0 };
	uint64_t count = 0, index = 0;
	int rc = 0;
	int pagemap_fd = open(SNAP_PAGEMAP_PATH, O_RDONLY | O_CLOEXEC);

	if (pagemap_fd < 0)
		return -errno;
	for (size_t r = 0; r < mem->region_count && rc == 0; r++) {
		uint64_t pages = mem->regions[r].size / SNAP_PAGE_SIZE;

		entries[r] = malloc(pages * sizeof(uint64_t));
		rc = entries[r] ? snapshot_read_pagemap(pagemap_fd, mem->regions[r].host_addr,
							 mem->regions[r].size, entries[r])
				: -ENOMEM;
		for (uint64_t p = 0; rc == 0 && p < pages; p++)
			count += snapshot_pagemap_written(entries[r][p]);
	}
	if (rc < 0)
		goto out;
	header.page_count = count;
	uint64_t data_offset = sizeof(header) + count * sizeof(uint64_t);

	rc = fd_pwrite_full(fd, &header, sizeof(header), 0);
	for (size_t r = 0; r < mem->region_count && rc == 0; r++) {
		const struct guest_memory_region *region = &mem->regions[r];

		for (uint64_t p = 0; rc == 0 && p < region->size / SNAP_PAGE_SIZE; p++) {
			if (!snapshot_pagemap_written(entries[r][p]))
				continue;
			uint64_t gpa = region->guest_phys_addr + p * SNAP_PAGE_SIZE;

			rc = fd_pwrite_full(fd, &gpa, sizeof(gpa),
					    sizeof(header) + index * sizeof(gpa));
			if (rc == 0)
				rc = fd_pwrite_full(fd, region->host_addr + p * SNAP_PAGE_SIZE,
						    SNAP_PAGE_SIZE,
						    data_offset + index * SNAP_PAGE_SIZE);
			index++;
		}
	}
	*pages_out = count;
out:
	for (size_t r = 0; r < GUEST_MEMORY_MAX_REGIONS; r++)
		free(entries[r]);
	close(pagemap_fd);
	return rc;
}

/*
 * Maps every region of mem MAP_PRIVATE from path, MAP_FIXED over the old mapping or over a
 * fresh 2 MiB-aligned reservation: where the file system keeps the file in 2 MiB pages, the
 * host maps them 2 MiB at a time and so can KVM, which it does only where host and guest
 * addresses agree modulo 2 MiB (memory.c). tmpfs aligns its own huge mappings; the
 * reservation does it for every file system. The
 * size is checked on the descriptor that is mapped: a file cut short after an earlier check
 * would otherwise kill the VMM with SIGBUS at the first touch of a missing page.
 */
static int snapshot_map_memory_file(struct guest_memory *mem, const char *path)
{
	uint64_t file_offset = 0;
	struct stat st;
	int rc = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != mem->total_size) {
		close(fd);
		return -EBADMSG;
	}
	for (size_t r = 0; r < mem->region_count; r++) {
		struct guest_memory_region *region = &mem->regions[r];
		void *addr = region->host_addr;

		if (!addr) {
			addr = guest_memory_reserve_aligned(region->size);
			if (addr == MAP_FAILED) {
				rc = -errno;
				break;
			}
			region->host_addr = addr; /* guest_memory_unmap releases it on failure */
		}
		if (mmap(addr, region->size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_NORESERVE | MAP_FIXED, fd,
			 (off_t)file_offset) == MAP_FAILED) {
			rc = -errno;
			break;
		}
		file_offset += region->size;
	}
	close(fd);
	return rc;
}

/*
 * Copies a run of diff pages (consecutive guest frames whose bytes follow each other in the
 * file) into the private mapping: the run's pages are made private in one call first
 * (MADV_POPULATE_WRITE; a kernel without it takes one fault a page inside the read), then one
 * read fills them. A fork restores its children from the same diff at once, so a syscall and
 * a fault per page in each child was most of a child's restore.
 */
static int snapshot_overlay_run(int fd, uint8_t *dest, uint64_t pages, uint64_t file_offset)
{
	uint64_t len = pages * SNAP_PAGE_SIZE;

	(void)madvise(dest, len, MADV_POPULATE_WRITE); /* only a speed-up; the read faults anyway */
	return fd_pread_full(fd, dest, len, (off_t)file_offset);
}

int snapshot_overlay_diff(struct guest_memory *mem, const char *path, uint64_t expected_pages)
{
	struct snapshot_diff_header header;
	uint64_t *gpas = NULL, data_offset;
	struct stat st;
	int rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	rc = fd_pread_full(fd, &header, sizeof(header), 0);
	if (rc == 0 && (header.magic != SNAPSHOT_DIFF_MAGIC || header.page_count != expected_pages ||
			header.page_count > mem->total_size / SNAP_PAGE_SIZE))
		rc = -EBADMSG;
	data_offset = sizeof(header) + header.page_count * sizeof(uint64_t);
	if (rc == 0 && (fstat(fd, &st) < 0 || (uint64_t)st.st_size < data_offset +
						  header.page_count * SNAP_PAGE_SIZE))
		rc = -EBADMSG;
	if (rc == 0 && header.page_count) {
		gpas = malloc(header.page_count * sizeof(*gpas));
		rc = gpas ? fd_pread_full(fd, gpas, header.page_count * sizeof(*gpas),
					  sizeof(header))
			  : -ENOMEM;
	}
	for (uint64_t i = 0, run; rc == 0 && i < header.page_count; i += run) {
		for (run = 1; i + run < header.page_count &&
			      gpas[i + run] == gpas[i] + run * SNAP_PAGE_SIZE; run++)
			;
		uint8_t *dest = gpas[i] % SNAP_PAGE_SIZE
					? NULL
					: guest_memory_ptr(mem, gpas[i], run * SNAP_PAGE_SIZE);

		rc = dest ? snapshot_overlay_run(fd, dest, run, data_offset + i * SNAP_PAGE_SIZE)
			  : -EBADMSG;
	}
	free(gpas);
	close(fd);
	return rc;
}

/* ---- save ---- */

struct snapshot_save_ctx {
	struct vm *vm;
	const char *dir;
	const struct vm_snapshot_options *opts;
	struct snapshot_image *image;
	char *err;
	size_t errlen;
};

static int snapshot_write_memory_file(struct snapshot_save_ctx *ctx)
{
	bool base = ctx->opts->type == VM_SNAPSHOT_BASE;
	const char *name = base ? VM_SNAPSHOT_MEMORY_FILE : VM_SNAPSHOT_DIFF_FILE;
	const char *tmp_name = base ? SNAP_MEMORY_TMP : SNAP_DIFF_TMP;
	char tmp[PATH_MAX], final[PATH_MAX];
	int rc, fd;

	if (snapshot_path(final, ctx->dir, name) < 0 || snapshot_path(tmp, ctx->dir, tmp_name) < 0) {
		snprintf(ctx->err, ctx->errlen, "snapshot directory path is too long: use a "
			 "shorter one");
		return -ENAMETOOLONG;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, SNAP_FILE_MODE);
	if (fd < 0) {
		rc = -errno;
		snprintf(ctx->err, ctx->errlen, "cannot create %s: %s: check the directory is "
			 "writable", tmp, strerror(-rc));
		return rc;
	}
	if (ctx->opts->type == VM_SNAPSHOT_BASE)
		rc = snapshot_write_base_memory(&ctx->vm->mem, fd);
	else
		rc = snapshot_write_diff_memory(&ctx->vm->mem, fd, &ctx->image->meta.diff_pages);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	struct stat st;

	if (rc == 0 && fstat(fd, &st) == 0)
		ctx->image->meta.memory_bytes = (uint64_t)st.st_size;
	close(fd);
	if (rc == 0 && rename(tmp, final) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		snprintf(ctx->err, ctx->errlen, "cannot write %s: %s: check free disk space",
			 final, strerror(-rc));
	}
	return rc;
}

/*
 * Every device's section, then the memory file, while the devices stay quiet (save leaves a
 * device quiet until resume), so what the devices recorded agrees with the memory written.
 */
static int snapshot_capture_devices_and_memory(struct snapshot_save_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	size_t quiet = 0;
	int rc = 0;

	for (; rc == 0 && quiet < vm->device_count; quiet++) {
		const struct vm_device_entry *entry = &vm->devices[quiet];
		struct byte_writer state;

		byte_writer_init(&state);
		rc = entry->type->ops->save ? entry->type->ops->save(entry->dev, &state) : 0;
		if (rc == 0 && byte_writer_failed(&state))
			rc = -ENOMEM;
		if (rc == 0)
			rc = snapshot_image_add_device(ctx->image, entry->type->name,
						       entry->type->ops->state_version, state.data,
						       state.len);
		byte_writer_free(&state);
		if (rc < 0)
			snprintf(ctx->err, ctx->errlen, "cannot save the %s device's state: %s",
				 entry->type->name, strerror(-rc));
	}
	if (rc == 0)
		rc = snapshot_write_memory_file(ctx);
	if (rc == 0 && ctx->opts->type == VM_SNAPSHOT_BASE &&
	    ctx->opts->after == VM_SNAPSHOT_RESUME) {
		char path[PATH_MAX];

		rc = snapshot_path(path, ctx->dir, VM_SNAPSHOT_MEMORY_FILE);
		if (rc == 0)
			rc = snapshot_map_memory_file(&vm->mem, path);
		if (rc < 0)
			snprintf(ctx->err, ctx->errlen, "cannot remap guest memory over %s: %s",
				 path, strerror(-rc));
	}
	while (quiet-- > 0) {
		const struct vm_device_entry *entry = &vm->devices[quiet];

		if (entry->type->ops->resume)
			entry->type->ops->resume(entry->dev);
	}
	return rc;
}

static int snapshot_check_diff_parent(struct snapshot_save_ctx *ctx)
{
	struct vm_snapshot_info parent;
	int rc;

	if (!ctx->opts->parent_dir || !ctx->vm->dirty_base_dir) {
		snprintf(ctx->err, ctx->errlen, "a diff needs the base this VM was restored from "
			 "or saved last: save a base snapshot first");
		return -EINVAL;
	}
	rc = vm_snapshot_inspect(ctx->opts->parent_dir, &parent, ctx->err, ctx->errlen);
	if (rc < 0)
		return rc;
	if (parent.type != VM_SNAPSHOT_BASE || parent.id != ctx->vm->dirty_base_id) {
		snprintf(ctx->err, ctx->errlen, "%s is not the base this VM's memory counts from "
			 "(%s): pass that base as the parent", ctx->opts->parent_dir,
			 ctx->vm->dirty_base_dir);
		return -EINVAL;
	}
	ctx->image->meta.parent_id = parent.id;
	if (!realpath(ctx->opts->parent_dir, ctx->image->meta.parent_dir))
		snprintf(ctx->image->meta.parent_dir, sizeof(ctx->image->meta.parent_dir), "%s",
			 ctx->opts->parent_dir);
	return 0;
}

static int snapshot_set_dirty_base(struct vm *vm, const char *dir, uint64_t id)
{
	char *copy = realpath(dir, NULL);

	if (!copy)
		return -errno;
	free(vm->dirty_base_dir);
	vm->dirty_base_dir = copy;
	vm->dirty_base_id = id;
	return 0;
}

static int snapshot_save_paused(struct snapshot_save_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	int rc;

	if (ctx->opts->type == VM_SNAPSHOT_DIFF) {
		rc = snapshot_check_diff_parent(ctx);
		if (rc < 0)
			return rc;
	}
	snapshot_fill_meta(vm, ctx->image, ctx->opts);
	rc = snapshot_capture_vm(vm, ctx->image);
	if (rc < 0) {
		snprintf(ctx->err, ctx->errlen, "cannot read the VM's KVM state: %s",
			 strerror(-rc));
		return rc;
	}
	rc = snapshot_capture_devices_and_memory(ctx);
	if (rc < 0)
		return rc;
	uint64_t id = 0;

	rc = snapshot_file_write(ctx->dir, ctx->image, &id, ctx->err, ctx->errlen);
	if (rc == 0 && ctx->opts->type == VM_SNAPSHOT_BASE && ctx->opts->after == VM_SNAPSHOT_RESUME)
		rc = snapshot_set_dirty_base(vm, ctx->dir, id);
	return rc;
}

static int snapshot_validate_save(struct vm *vm, const char *dir,
				  const struct vm_snapshot_options *opts, char *err,
				  size_t errlen)
{
	if (!vm->started) {
		snprintf(err, errlen, "the VM has not started: start it before taking a snapshot");
		return -EINVAL;
	}
	if (opts->type != VM_SNAPSHOT_BASE && opts->type != VM_SNAPSHOT_DIFF) {
		snprintf(err, errlen, "unknown snapshot type %d: use base or diff", opts->type);
		return -EINVAL;
	}
	if (mkdir(dir, SNAP_DIR_MODE) < 0 && errno != EEXIST) {
		int rc = -errno;

		snprintf(err, errlen, "cannot create snapshot directory %s: %s", dir,
			 strerror(-rc));
		return rc;
	}
	return 0;
}

int vm_snapshot_save(struct vm *vm, const char *dir, const struct vm_snapshot_options *opts,
		     char *err, size_t errlen)
{
	struct snapshot_save_ctx ctx = { .vm = vm, .dir = dir, .opts = opts, .err = err,
					 .errlen = errlen };
	uint64_t paused_ns = 0, resumed_ns = 0;
	int rc = snapshot_validate_save(vm, dir, opts, err, errlen);

	if (rc < 0)
		return rc;
	ctx.image = calloc(1, sizeof(*ctx.image));
	if (!ctx.image) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	paused_ns = clock_monotonic_ns();
	rc = snapshot_pause(vm);
	if (rc < 0)
		snprintf(err, errlen, "cannot pause the vCPUs: %s", strerror(-rc));
	pthread_mutex_lock(&vm->lock);
	if (rc == 0 && vm->reason != VM_EXIT_NONE) {
		snprintf(err, errlen, "the VM already ended (%s): nothing to snapshot",
			 vm_exit_reason_name(vm->reason));
		rc = -ECHILD;
	}
	pthread_mutex_unlock(&vm->lock);
	if (rc == 0)
		rc = snapshot_save_paused(&ctx);
	if (opts->after == VM_SNAPSHOT_RESUME) {
		int resumed = snapshot_resume(vm);

		if (resumed < 0 && rc == 0) {
			snprintf(err, errlen, "snapshot saved, but the VM did not resume: %s",
				 strerror(-resumed));
			rc = resumed;
		}
	}
	resumed_ns = clock_monotonic_ns();
	snapshot_image_release(ctx.image);
	free(ctx.image);
	if (rc == 0)
		log_info(SNAP_LOG, "saved %s snapshot of %u vCPU(s) to %s in %llu ms; the VM %s",
			 vm_snapshot_type_name(opts->type), vm->vcpus_created, dir,
			 (unsigned long long)((resumed_ns - paused_ns) / NSEC_PER_MSEC_U64),
			 opts->after == VM_SNAPSHOT_RESUME ? "runs again" : "stays stopped");
	return rc;
}

/* ---- restore ---- */

struct snapshot_restore_ctx {
	const char *dir;
	const struct vm_restore_options *opts;
	const struct snapshot_image *image;
	struct vm_snapshot_info info;
	struct vm *vm;
	char *err;
	size_t errlen;
	uint64_t read_ms; /* reading and checking the state files, for the debug timeline */
	struct working_set prefetched; /* the list the memory step prefetched, for the prefault */
};

/* The directory whose memory.mem the guest's RAM maps: a diff's base, or the snapshot's own. */
static const char *snapshot_restore_base_dir(const struct snapshot_restore_ctx *ctx)
{
	return ctx->info.type == VM_SNAPSHOT_DIFF ? ctx->info.parent_dir : ctx->dir;
}

static int snapshot_restore_memory(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	const char *base_dir = snapshot_restore_base_dir(ctx);
	char path[PATH_MAX];
	int rc = guest_memory_plan(&vm->mem, ctx->info.memory_mb, 0, ctx->err, ctx->errlen);

	if (rc < 0)
		return rc;
	rc = snapshot_path(path, base_dir, VM_SNAPSHOT_MEMORY_FILE);
	if (rc == 0)
		rc = snapshot_map_memory_file(&vm->mem, path);
	if (rc < 0) {
		snprintf(ctx->err, ctx->errlen, "cannot map %s: %s", path, strerror(-rc));
		return rc;
	}
	if (ctx->info.type == VM_SNAPSHOT_DIFF) {
		rc = snapshot_path(path, ctx->dir, VM_SNAPSHOT_DIFF_FILE);
		if (rc == 0)
			rc = snapshot_overlay_diff(&vm->mem, path, ctx->info.diff_pages);
		if (rc < 0) {
			snprintf(ctx->err, ctx->errlen, "cannot apply %s: %s: take the diff "
				 "snapshot again", path, strerror(-rc));
			return rc;
		}
	}
	/*
	 * Before any vCPU runs: the pages the last first exec needed, in large runs. A diff with
	 * no list of its own (every fork's, and a diff not restored before) takes its base's:
	 * the guest's way to its first answer runs through much the same pages, and pages the
	 * diff copied in are private already, so the prefetch leaves them alone.
	 */
	struct working_set_stats own = { 0 };

	if (!working_set_prefetch_dir(&vm->mem, ctx->dir, ctx->info.id, &own, &ctx->prefetched) &&
	    ctx->info.type == VM_SNAPSHOT_DIFF)
		working_set_prefetch_dir(&vm->mem, base_dir, ctx->info.parent_id, NULL,
					 &ctx->prefetched);
	/* a version 1 list marks no written runs: the first exec records it again */
	vm->working_set_known = own.pages > 0 && own.marks_writes;
	return 0;
}

/* Once both the KVM VM and the mapped memory exist: the memory slots, and the diffs' base. */
static int snapshot_register_memory(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	int rc = kvm_map_guest_memory(&vm->kvm, &vm->mem);

	if (rc < 0) {
		snprintf(ctx->err, ctx->errlen, "cannot register guest memory with KVM: %s",
			 strerror(-rc));
		return rc;
	}
	return snapshot_set_dirty_base(vm, snapshot_restore_base_dir(ctx),
				       ctx->info.type == VM_SNAPSHOT_DIFF ? ctx->info.parent_id
									  : ctx->info.id);
}

/* A saved device's section as its kind reads it, and the kind. 0, or -EOPNOTSUPP and err. */
static int snapshot_saved_section(const struct snapshot_device_state *saved,
				  struct vm_device_section *section,
				  const struct vm_device_type **type, char *err, size_t errlen)
{
	*section = (struct vm_device_section){ .version = saved->version, .state = saved->state,
					       .state_len = saved->state_len };
	snprintf(section->name, sizeof(section->name), "%s", saved->name);
	*type = vm_device_type_find(saved->name);
	if (*type)
		return 0;
	/* snapshot_decode refuses these; kept for the invariant */
	snprintf(err, errlen, "unknown device '%s' in the snapshot", saved->name);
	return -EOPNOTSUPP;
}

/* The saved devices, in their saved order, so each gets its saved virtio-mmio slot. */
static int snapshot_restore_devices(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	struct vm_config cfg = {
		.serial_log_path = ctx->opts->serial_log_path,
		.serial_to_stdout = ctx->opts->serial_to_stdout,
		.vsock_socket_path = ctx->opts->vsock_socket_path,
		/* the network device keeps its saved policy and adds these */
		.restore_granted_ports = ctx->opts->granted_ports,
		.restore_granted_port_count = ctx->opts->granted_port_count,
	};
	struct vm_placement placement;
	int rc = vm_setup_platform(vm, ctx->err, ctx->errlen);

	for (size_t i = 0; rc == 0 && i < ctx->image->device_count; i++) {
		const struct snapshot_device_state *saved = &ctx->image->devices[i];
		const struct vm_device_type *type;
		struct vm_device_section section;

		rc = snapshot_saved_section(saved, &section, &type, ctx->err, ctx->errlen);
		if (rc < 0)
			return rc;
		vm_devices_placement_enter(vm, &placement);
		rc = type->create(vm, &cfg, &section, ctx->err, ctx->errlen);
		vm_devices_placement_leave(vm, &placement);
		if (rc == 0 && (vm->device_count != i + 1 || vm->devices[i].type != type)) {
			snprintf(ctx->err, ctx->errlen, "internal error: the %s device did not "
				 "attach in its saved place", saved->name);
			rc = -EPROTO;
		}
	}
	return rc;
}

/*
 * Device state, once the irqchip holds its saved state: an interrupt a device raises now
 * reaches the restored IOAPIC instead of being overwritten by it. The virtio lines are
 * lowered first so the IOAPIC agrees with the transports, which raise them again when their
 * saved interrupt status says so.
 */
static int snapshot_restore_device_state(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;

	vm_lower_virtio_lines(vm);
	for (size_t i = 0; i < vm->device_count; i++) {
		const struct vm_device_ops *ops = vm->devices[i].type->ops;
		const struct snapshot_device_state *saved = &ctx->image->devices[i];
		struct byte_reader in;
		int rc;

		if (!ops->restore) {
			if (saved->state_len == 0)
				continue;
			snprintf(ctx->err, ctx->errlen, "the %s device has no state, but the "
				 "snapshot holds some: take the snapshot again", saved->name);
			return -EBADMSG;
		}
		byte_reader_init(&in, saved->state, saved->state_len);
		rc = ops->restore(vm->devices[i].dev, &in, saved->version, ctx->err, ctx->errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Level-triggered pins left waiting for an EOI that will never come on this host. */
static void snapshot_clear_remote_irr(struct kvm_irqchip *chip)
{
	for (unsigned int pin = 0; pin < KVM_IOAPIC_NUM_PINS; pin++) {
		__u64 *bits = &chip->chip.ioapic.redirtbl[pin].bits;

		if (*bits & SNAP_IOAPIC_LEVEL_BIT)
			*bits &= ~SNAP_IOAPIC_REMOTE_IRR_BIT;
	}
}

static int snapshot_restore_kvm_state(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	struct kvm_clock_data clock = { .clock = ctx->image->clock.clock };

	for (unsigned int i = 0; i < vm->vcpus_created; i++) {
		int rc = vcpu_state_restore(vm->vcpus[i].fd, &ctx->image->vcpus[i]);

		if (rc < 0) {
			snprintf(ctx->err, ctx->errlen, "cannot restore vCPU %u: %s: the snapshot "
				 "does not fit this host's KVM; take it again here", i,
				 strerror(-rc));
			return rc;
		}
	}
	for (unsigned int i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++) {
		struct kvm_irqchip chip = ctx->image->irqchips[i];

		if (chip.chip_id == KVM_IRQCHIP_IOAPIC)
			snapshot_clear_remote_irr(&chip);
		if (ioctl(vm->kvm.vm_fd, KVM_SET_IRQCHIP, &chip) < 0)
			goto fail;
	}
	if (ioctl(vm->kvm.vm_fd, KVM_SET_PIT2, &ctx->image->pit) < 0 ||
	    ioctl(vm->kvm.vm_fd, KVM_SET_CLOCK, &clock) < 0)
		goto fail;
	for (unsigned int i = 0; i < vm->vcpus_created; i++)
		vcpu_state_clock_paused(vm->vcpus[i].fd);
	return 0;
fail:;
	int saved = errno;

	snprintf(ctx->err, ctx->errlen, "cannot restore the irqchip, PIT or clock: %s",
		 strerror(saved));
	return -saved;
}

/*
 * Once the vCPUs hold their saved state: the prefetched working set goes into KVM's stage-2
 * page tables too, where the kernel can (KVM_PRE_FAULT_MEMORY, Linux 6.10), so the guest's
 * first touches of those pages do not each exit to KVM. Under nested virtualization each such
 * exit is a round trip through the outer hypervisor. Never fails the restore: a page left out
 * faults in on first touch as before.
 */
static void snapshot_pre_fault_working_set(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	const struct working_set *ws = &ctx->prefetched;
	uint64_t started = clock_monotonic_ms();

	if (ws->run_count == 0 || vm->vcpus_created == 0 || !vm->kvm.has_pre_fault_memory)
		return;
	for (uint32_t i = 0; i < ws->run_count; i++) {
		int rc = kvm_pre_fault_memory(vm->vcpus[0].fd, ws->runs[i].gpa,
					      ws->runs[i].pages * WORKING_SET_PAGE_SIZE);

		if (rc < 0) {
			log_info(SNAP_LOG, "KVM did not map the working set ahead (%s); its pages "
				 "map on first touch", strerror(-rc));
			return;
		}
	}
	vm->working_set_prefaulted = ws->pages;
	log_debug(SNAP_LOG, "mapped %" PRIu64 " pages of the working set into KVM in %" PRIu64
		  " ms", ws->pages, clock_monotonic_ms() - started);
}

/*
 * Before any vCPU exists: every feature the guest was shown, as its state file records and as
 * its manifest says, must be one this host's KVM offers.
 */
static int snapshot_check_host_features(struct snapshot_restore_ctx *ctx, const struct kvm *kvm)
{
	const struct snapshot_meta *meta = &ctx->image->meta;
	const struct vm_restore_options *opts = ctx->opts;
	const struct cpu_features *listed = opts && opts->has_manifest_cpu_features ?
						    &opts->manifest_cpu_features : NULL;
	struct cpu_features host;
	int rc;

	if (!meta->has_cpu_features && !listed)
		return 0;
	rc = cpu_features_for_guest(kvm->sys_fd, meta->vcpus, kvm->has_tsc_deadline, &host);
	if (rc < 0) {
		snprintf(ctx->err, ctx->errlen, "cannot read this host's CPU features from KVM: %s",
			 strerror(-rc));
		return rc;
	}
	return cpu_features_check_snapshot(meta->has_cpu_features ? &meta->cpu_features : NULL,
					   listed, &host, ctx->err, ctx->errlen);
}

/*
 * KVM_CREATE_VM with its irqchip and PIT is the slowest of a restore's ioctls (15-20 ms in the
 * nested harness, most of it the kernel starting the VM's worker thread and waiting for it),
 * and mapping the memory files needs no VM, so the two run side by side and meet where the
 * memory slots are registered.
 */
struct snapshot_kvm_job {
	struct kvm *kvm;
	int rc;
	uint64_t ms;
	char err[SNAP_KVM_ERROR_MAX];
};

static void *snapshot_kvm_job_main(void *arg)
{
	struct snapshot_kvm_job *job = arg;
	uint64_t started = clock_monotonic_ms();

	job->rc = kvm_create_vm(job->kvm, job->err, sizeof(job->err));
	job->ms = clock_monotonic_ms() - started;
	return NULL;
}

static int snapshot_create_kvm_beside_memory(struct snapshot_restore_ctx *ctx, uint64_t *kvm_ms,
					     uint64_t *memory_ms)
{
	struct snapshot_kvm_job job = { .kvm = &ctx->vm->kvm };
	uint64_t memory_started;
	pthread_t thread;
	bool beside = pthread_create(&thread, NULL, snapshot_kvm_job_main, &job) == 0;
	int rc;

	if (!beside)
		snapshot_kvm_job_main(&job); /* no thread to be had: one after the other */
	memory_started = clock_monotonic_ms();
	rc = (beside || job.rc == 0) ? snapshot_restore_memory(ctx) : 0;
	*memory_ms = clock_monotonic_ms() - memory_started;
	if (beside)
		pthread_join(thread, NULL);
	*kvm_ms = job.ms;
	if (job.rc < 0) {
		snprintf(ctx->err, ctx->errlen, "%s", job.err);
		return job.rc;
	}
	return rc < 0 ? rc : snapshot_register_memory(ctx);
}

static int snapshot_build_vm(struct snapshot_restore_ctx *ctx)
{
	struct vm *vm = ctx->vm;
	uint64_t started = clock_monotonic_ms(), features_ms = 0, memory_ready = 0;
	uint64_t kvm_ms = 0, memory_ms = 0;
	int rc;

	vm->vcpu_count = ctx->info.vcpus;
	vm->placement_cpu = ctx->opts->has_placement_cpu ? ctx->opts->placement_cpu
							 : vm_placement_choose(vm->vcpu_count);
	memcpy(vm->secret, ctx->image->meta.secret, sizeof(vm->secret));
	snprintf(vm->cmdline, sizeof(vm->cmdline), "%s", ctx->image->meta.cmdline);
	rc = vcpu_signal_init();
	if (rc < 0) {
		snprintf(ctx->err, ctx->errlen, "cannot install the vCPU kick handler: %s",
			 strerror(-rc));
		return rc;
	}
	rc = kvm_open(&vm->kvm, ctx->err, ctx->errlen);
	if (rc == 0) {
		uint64_t features_started = clock_monotonic_ms();

		rc = snapshot_check_host_features(ctx, &vm->kvm);
		features_ms = clock_monotonic_ms() - features_started;
	}
	if (rc == 0)
		rc = snapshot_create_kvm_beside_memory(ctx, &kvm_ms, &memory_ms);
	memory_ready = clock_monotonic_ms();
	if (rc == 0)
		rc = snapshot_restore_devices(ctx);
	if (rc == 0)
		rc = vm_setup_vcpus(vm, ctx->err, ctx->errlen);
	if (rc == 0)
		rc = snapshot_restore_kvm_state(ctx);
	if (rc == 0)
		snapshot_pre_fault_working_set(ctx);
	working_set_release(&ctx->prefetched);
	if (rc == 0)
		rc = snapshot_restore_device_state(ctx);
	vm->restored = true;
	if (rc == 0)
		log_debug(SNAP_LOG, "rebuilt the VM of %s: state files %" PRIu64 " ms, CPU-feature "
			  "check %" PRIu64 " ms, then side by side KVM %" PRIu64 " ms and memory %"
			  PRIu64 " ms (%" PRIu64 " ms until both were ready), devices and vCPUs %"
			  PRIu64 " ms", ctx->dir, ctx->read_ms, features_ms, kvm_ms, memory_ms,
			  memory_ready - started, clock_monotonic_ms() - memory_ready);
	return rc;
}

/* The state file, decoded and checked once; its directory's info beside it. */
struct vm_snapshot_state {
	struct snapshot_image image;
	struct vm_snapshot_info info;
	uint64_t read_ms; /* how long reading and checking took, for the debug timeline */
};

int vm_snapshot_state_read(const char *dir, struct vm_snapshot_state **out, char *err,
			   size_t errlen)
{
	struct vm_snapshot_state *state = calloc(1, sizeof(*state));
	uint64_t started = clock_monotonic_ms();
	int rc;

	*out = NULL;
	if (!state) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = snapshot_file_read(dir, &state->image, &state->info, err, errlen);
	state->read_ms = clock_monotonic_ms() - started;
	if (rc < 0) {
		vm_snapshot_state_free(state);
		return rc;
	}
	*out = state;
	return 0;
}

const struct vm_snapshot_info *vm_snapshot_state_info(const struct vm_snapshot_state *state)
{
	return &state->info;
}

int vm_snapshot_host_paths(const struct vm_snapshot_state *state, vm_host_path_fn each,
			   void *opaque, char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < state->image.device_count; i++) {
		const struct vm_device_type *type;
		struct vm_device_section section;

		rc = snapshot_saved_section(&state->image.devices[i], &section, &type, err, errlen);
		if (rc == 0 && type->host_paths)
			rc = type->host_paths(&section, each, opaque, err, errlen);
	}
	return rc;
}

int vm_snapshot_load_device_libraries(const struct vm_snapshot_state *state, char *err,
				      size_t errlen)
{
	const struct vm_config none = { 0 };
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < state->image.device_count; i++) {
		const struct vm_device_type *type;
		struct vm_device_section section;

		rc = snapshot_saved_section(&state->image.devices[i], &section, &type, err, errlen);
		if (rc == 0 && type->load_libraries)
			rc = type->load_libraries(&none, &section, err, errlen);
	}
	return rc;
}

int vm_create_from_snapshot_state(const char *dir, const struct vm_snapshot_state *state,
				  const struct vm_restore_options *opts, struct vm **out,
				  char *err, size_t errlen)
{
	struct snapshot_restore_ctx ctx = { .dir = dir, .opts = opts, .image = &state->image,
					    .info = state->info, .err = err, .errlen = errlen,
					    .read_ms = state->read_ms };
	int rc;

	*out = NULL;
	ctx.vm = vm_alloc();
	if (!ctx.vm) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = snapshot_build_vm(&ctx);
	if (rc < 0) {
		vm_destroy(ctx.vm);
		return rc;
	}
	*out = ctx.vm;
	return 0;
}

void vm_snapshot_state_free(struct vm_snapshot_state *state)
{
	if (!state)
		return;
	snapshot_image_release(&state->image);
	free(state);
}

int vm_create_from_snapshot(const char *dir, const struct vm_restore_options *opts,
			    struct vm **out, char *err, size_t errlen)
{
	struct vm_snapshot_state *state = NULL;
	int rc = vm_snapshot_state_read(dir, &state, err, errlen);

	*out = NULL;
	if (rc == 0)
		rc = vm_create_from_snapshot_state(dir, state, opts, out, err, errlen);
	vm_snapshot_state_free(state);
	return rc;
}

int vm_snapshot_inspect(const char *dir, struct vm_snapshot_info *info, char *err,
			size_t errlen)
{
	struct vm_snapshot_state *state = NULL;
	int rc = vm_snapshot_state_read(dir, &state, err, errlen);

	if (rc == 0)
		*info = state->info;
	vm_snapshot_state_free(state);
	return rc;
}

void vm_snapshot_set_secret(struct vm *vm, const uint8_t secret[VM_SECRET_LEN])
{
	memcpy(vm->secret, secret, VM_SECRET_LEN);
}

void vm_snapshot_release(struct vm *vm)
{
	free(vm->dirty_base_dir);
	vm->dirty_base_dir = NULL;
}
