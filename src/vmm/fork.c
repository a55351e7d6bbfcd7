/*
 * Fork: a running VM becomes the shared copy-on-write base of n children. The parent is
 * paused once and saved into a private directory on tmpfs (/dev/shm); each child is restored
 * from that directory, so parent and children read the same files and each writes to its own
 * private pages. Mappings keep the files alive however long the directory lasts.
 *
 * What is saved depends on the parent's memory:
 *   - a parent whose memory is a copy-on-write mapping of a base that still exists (restored
 *     from a snapshot, or saved as a base before) is saved as a diff against that base: only
 *     the pages it wrote since, found in /proc/self/pagemap. Children map the same base and
 *     copy in those pages. The parent keeps its mapping and runs on.
 *     The diff's directory is removed once the children exist.
 *   - any other parent (cold-booted) is saved as a base: one pass over its non-zero pages into
 *     tmpfs, after which the parent is remapped MAP_PRIVATE over that file like the children.
 *     That directory stays until the parent is destroyed, so its next fork is a diff.
 * The first costs milliseconds per megabyte written; the second reads all of guest memory.
 * The children are then restored and started in parallel.
 * docs/snapshot-format.md has measurements.
 */
#include "vmm/snapshot.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/parallel.h"
#include "vmm/placement.h"
#include "vmm/snapshot_file.h"
#include "vmm/vm_internal.h"

#define FORK_DIR_TEMPLATE "voidbox-fork-XXXXXX"
#define FORK_SHM_DIR "/dev/shm"
#define FORK_FALLBACK_DIR "/tmp"
#define FORK_ERR_MAX 512

static int fork_make_dir(char *dir, size_t len)
{
	const char *base = access(FORK_SHM_DIR, W_OK) == 0 ? FORK_SHM_DIR : FORK_FALLBACK_DIR;

	snprintf(dir, len, "%s/%s", base, FORK_DIR_TEMPLATE);
	return mkdtemp(dir) ? 0 : -errno;
}

static void fork_remove_dir(const char *dir)
{
	static const char *const names[] = { VM_SNAPSHOT_STATE_FILE, VM_SNAPSHOT_MEMORY_FILE,
					     VM_SNAPSHOT_DIFF_FILE };
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (snapshot_path(path, dir, names[i]) == 0)
			unlink(path);
	}
	rmdir(dir);
}

void vm_snapshot_dir_remove(const char *dir)
{
	fork_remove_dir(dir);
}

struct fork_child_job {
	const char *dir;
	struct vm_restore_options opts; /* the caller's, with the CPU this child takes */
	unsigned int index;
	struct vm *vm;
	int rc;
	char err[FORK_ERR_MAX];
};

static void fork_child_run(void *item)
{
	struct fork_child_job *job = item;
	long started = (long)clock_monotonic_ms(), restored;

	job->rc = vm_create_from_snapshot(job->dir, &job->opts, &job->vm, job->err,
					  sizeof(job->err));
	restored = (long)clock_monotonic_ms();
	if (job->rc == 0) {
		job->rc = vm_start(job->vm);
		if (job->rc < 0)
			snprintf(job->err, sizeof(job->err), "child %u did not start: %s",
				 job->index, strerror(-job->rc));
	}
	log_debug("fork", "child %u restored in %ld ms, running %ld ms after that", job->index,
		  restored - started, (long)clock_monotonic_ms() - restored);
}

/*
 * Restores and starts the n children at the same time: every restore is a VM of its own (KVM
 * VM, memory mapping, devices), so they share nothing but the files. Their host CPUs are
 * chosen here, in turn, so n children spread evenly over the CPUs. All or none: on any
 * failure every child made is destroyed and the first error is returned.
 */
static int fork_children(const char *dir, unsigned int n, unsigned int vcpus,
			 const struct vm_restore_options *const child_opts[], struct vm *children[],
			 char *err, size_t errlen)
{
	struct fork_child_job *jobs = calloc(n, sizeof(*jobs));
	int rc = 0;

	if (!jobs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < n; i++) {
		jobs[i] = (struct fork_child_job){ .dir = dir, .opts = *child_opts[i], .index = i };
		if (!jobs[i].opts.has_placement_cpu) {
			jobs[i].opts.has_placement_cpu = true;
			jobs[i].opts.placement_cpu = vm_placement_choose(vcpus);
		}
	}
	parallel_for_each(jobs, n, sizeof(*jobs), fork_child_run);
	for (unsigned int i = 0; i < n && rc == 0; i++) {
		if (jobs[i].rc < 0) {
			rc = jobs[i].rc;
			snprintf(err, errlen, "%s", jobs[i].err);
		}
	}
	for (unsigned int i = 0; i < n; i++) {
		if (rc < 0) {
			vm_destroy(jobs[i].vm);
			jobs[i].vm = NULL;
		}
		children[i] = jobs[i].vm;
	}
	free(jobs);
	return rc;
}

/*
 * A base written for a fork stays while the parent lives: the parent maps it, so keeping the
 * files costs no memory, and the parent's next fork (or its children's) can be a diff.
 */
static void fork_keep_base(struct vm *parent, const char *dir)
{
	char *copy = strdup(dir);

	if (!copy) {
		fork_remove_dir(dir); /* the fork worked; only the next one writes a base again */
		return;
	}
	vm_fork_release_base(parent);
	parent->fork_base_dir = copy;
}

void vm_fork_release_base(struct vm *vm)
{
	if (!vm->fork_base_dir)
		return;
	fork_remove_dir(vm->fork_base_dir);
	free(vm->fork_base_dir);
	vm->fork_base_dir = NULL;
}

/* True when the base the parent's memory maps is still there, unchanged: a diff can use it. */
static bool fork_base_still_there(const struct vm *parent)
{
	struct vm_snapshot_info base;
	char why[FORK_ERR_MAX];

	return parent->dirty_base_dir &&
	       vm_snapshot_inspect(parent->dirty_base_dir, &base, why, sizeof(why)) == 0 &&
	       base.type == VM_SNAPSHOT_BASE && base.id == parent->dirty_base_id;
}

int vm_fork(struct vm *parent, unsigned int n, const struct vm_restore_options *const child_opts[],
	    struct vm *children[], char *err, size_t errlen)
{
	struct vm_snapshot_options save = { .type = VM_SNAPSHOT_BASE, .after = VM_SNAPSHOT_RESUME };
	char dir[PATH_MAX];
	long started = (long)clock_monotonic_ms(), saved;
	int rc;

	if (n == 0) {
		snprintf(err, errlen, "fork needs at least one child");
		return -EINVAL;
	}
	for (unsigned int i = 0; i < n; i++)
		children[i] = NULL;
	rc = fork_make_dir(dir, sizeof(dir));
	if (rc < 0) {
		snprintf(err, errlen, "cannot create a fork directory under %s: %s", FORK_SHM_DIR,
			 strerror(-rc));
		return rc;
	}
	if (fork_base_still_there(parent)) {
		save.type = VM_SNAPSHOT_DIFF;
		save.parent_dir = parent->dirty_base_dir;
	}
	rc = vm_snapshot_save(parent, dir, &save, err, errlen);
	saved = (long)clock_monotonic_ms();
	if (rc == 0)
		rc = fork_children(dir, n, parent->vcpu_count, child_opts, children, err, errlen);
	if (rc == 0 && save.type == VM_SNAPSHOT_BASE)
		fork_keep_base(parent, dir);
	else
		fork_remove_dir(dir);
	if (rc == 0)
		log_info("fork", "forked %u child VM(s) in %ld ms (parent paused and %s written "
			 "in %ld ms)", n, (long)clock_monotonic_ms() - started,
			 save.type == VM_SNAPSHOT_DIFF ? "a diff" : "a base", saved - started);
	return rc;
}
