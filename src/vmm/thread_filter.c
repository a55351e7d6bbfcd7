/*
 * The allow lists of thread_filter.h, built with libseccomp. The lists are what the loops
 * call, read off the code: KVM ioctls and interrupt lines, reads and writes on descriptors
 * the thread was handed (the console log, eventfds, the vsock sockets, a disk), memory
 * management for malloc, futexes for the locks, the clock, getrandom for the entropy device,
 * signals for the kicks, and thread exit. Every role shares the common list and adds its own
 * (one table, indexed by role); two roles add calls with their arguments pinned: the network
 * worker may make IPv4 and IPv6 sockets only and open files read-only (libslirp reads
 * /etc/resolv.conf for the guest's DNS), never a unix, netlink or packet socket. Every
 * role's signals (the kicks) go to threads of its own process only: tgkill's process is
 * pinned to the caller's, since a VMM process shares the host's PID namespace and runs as the
 * user, so an unpinned tgkill could stop or kill the CLI, the daemon or any other process of
 * the user. A share's worker is also held beneath its directory by Landlock, since seccomp
 * cannot judge paths (vmm_thread_restrict_to gives each path its own access, for a VMM
 * process's snapshot-writing thread).
 */
#include "vmm/thread_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"

#define FILTER_DENY_ERRNO EPERM
/* The open flags that would let a read-only role create, truncate or write a file. */
#define FILTER_WRITE_OPEN_FLAGS ((scmp_datum_t)(O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND))
/* Where the flags are in open(path, flags) and openat(dirfd, path, flags). */
#define FILTER_OPEN_FLAGS_ARG 1
#define FILTER_OPENAT_FLAGS_ARG 2

#define FILTER_COUNT(list) (sizeof(list) / sizeof((list)[0]))

/*
 * Landlock: the version that can rename across directories (REFER). Later rights (TRUNCATE,
 * device ioctls) are left unhandled: the share role's seccomp filter has no path-based
 * truncate, and the worker opens no devices.
 */
#define LANDLOCK_ABI_REFER 2
/* Every file access right of Landlock's first version (bits 0 to MAKE_SYM). */
#define LANDLOCK_ACCESS_FS_ABI1 ((LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1)
#define LANDLOCK_ACCESS_FS_READ_ONLY \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
/* The rights a rule on a single file may carry (the rest concern directories). */
#define LANDLOCK_ACCESS_FS_ON_FILE \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE)
/* How many paths vmm_thread_restrict_to_dirs hands on at most. */
#define LANDLOCK_DIRS_MAX 16

/* Every role: memory, locks, time, signals, logging, exit. */
static const int filter_common_calls[] = {
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
	SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(close), SCMP_SYS(ioctl),
	SCMP_SYS(futex), SCMP_SYS(sched_yield), SCMP_SYS(nanosleep),
	SCMP_SYS(clock_nanosleep), SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday),
	SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(rt_sigreturn),
	SCMP_SYS(rt_sigprocmask), SCMP_SYS(restart_syscall), SCMP_SYS(exit),
	SCMP_SYS(exit_group), SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap),
	SCMP_SYS(mprotect), SCMP_SYS(brk), SCMP_SYS(madvise), SCMP_SYS(fstat),
	SCMP_SYS(newfstatat), SCMP_SYS(lseek), SCMP_SYS(getrandom),
	/* a thread's exit tears down its signal stack (sanitizer runtimes set one up) */
	SCMP_SYS(sigaltstack),
	/* a guest that stops makes its vCPU close the device's host connections */
	SCMP_SYS(epoll_ctl), SCMP_SYS(shutdown),
};

/* The vsock worker also waits on its descriptors and serves the host's connections. */
static const int filter_device_worker_calls[] = {
	SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(accept), SCMP_SYS(accept4),
	SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
	SCMP_SYS(getsockopt), SCMP_SYS(setsockopt), SCMP_SYS(fcntl), SCMP_SYS(poll),
	SCMP_SYS(ppoll),
};

/* A disk's worker moves data between its file and the chain's buffers, and flushes. */
static const int filter_block_worker_calls[] = {
	SCMP_SYS(preadv), SCMP_SYS(pwritev), SCMP_SYS(preadv2), SCMP_SYS(pwritev2),
	SCMP_SYS(fdatasync), SCMP_SYS(fsync),
};

/*
 * A share's FUSE server: every call works on descriptors opened beneath the share with
 * openat2(RESOLVE_BENEATH) (src/devices/fuse_server.c), or on /proc/self/fd paths of them.
 */
static const int filter_share_worker_calls[] = {
	SCMP_SYS(open), SCMP_SYS(openat), SCMP_SYS(openat2), SCMP_SYS(statx), SCMP_SYS(stat),
	SCMP_SYS(lstat), SCMP_SYS(fstatfs), SCMP_SYS(statfs), SCMP_SYS(access),
	SCMP_SYS(faccessat), SCMP_SYS(faccessat2), SCMP_SYS(fallocate), SCMP_SYS(fdatasync),
	SCMP_SYS(fsync), SCMP_SYS(ftruncate), SCMP_SYS(getxattr), SCMP_SYS(lgetxattr),
	SCMP_SYS(fgetxattr), SCMP_SYS(setxattr), SCMP_SYS(lsetxattr), SCMP_SYS(fsetxattr),
	SCMP_SYS(listxattr), SCMP_SYS(llistxattr), SCMP_SYS(flistxattr), SCMP_SYS(removexattr),
	SCMP_SYS(lremovexattr), SCMP_SYS(fremovexattr), SCMP_SYS(linkat), SCMP_SYS(mkdirat), SCMP_SYS(mknodat),
	SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(renameat), SCMP_SYS(renameat2),
	SCMP_SYS(symlinkat), SCMP_SYS(unlinkat), SCMP_SYS(utimensat), SCMP_SYS(chmod),
	SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(getdents64), SCMP_SYS(dup),
	SCMP_SYS(fcntl), SCMP_SYS(geteuid),
	/* file data moves between the guest's buffers and the host file in one call */
	SCMP_SYS(preadv), SCMP_SYS(pwritev),
};

/* libslirp's loop: the guest's connections and datagrams (socket() itself is pinned below). */
static const int filter_net_worker_calls[] = {
	SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(listen),
	SCMP_SYS(accept), SCMP_SYS(accept4), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
	SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
	SCMP_SYS(getsockopt), SCMP_SYS(setsockopt), SCMP_SYS(fcntl), SCMP_SYS(stat),
	SCMP_SYS(statx),
};

/* The control channel's reader waits for frames with a deadline. */
static const int filter_channel_reader_calls[] = {
	SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg),
};

/*
 * The main thread of a VMM in its own process (src/sandbox/vmm_process.c): after the VM has
 * started it only waits on its control socket, answers it, and tears the VM down (joins,
 * closes and unmaps, in the common list). No exec, no new files or sockets.
 */
static const int filter_vmm_main_calls[] = {
	SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg),
	SCMP_SYS(sendto), SCMP_SYS(sendmsg),
};

/*
 * What a VMM process's main thread adds when it may be asked to write a snapshot
 * (vm_snapshot_save: create the directory, write each file under a temporary name, fsync,
 * rename, fsync the directory; a diff reads its base, realpath resolves the paths) or a
 * restored VM's working-set list (the same, and /proc/self/pagemap read). seccomp cannot
 * judge paths: a VMM process holds this thread beneath its snapshot directories with
 * Landlock too (vmm_jail_hold_snapshot_writer, where the kernel has it). A snapshot
 * that resumes starts new vCPU threads, which name themselves and install their own filter:
 * filter_allow_thread_start pins what that takes.
 */
static const int filter_vmm_snapshot_calls[] = {
	SCMP_SYS(open), SCMP_SYS(openat), SCMP_SYS(mkdir), SCMP_SYS(mkdirat), SCMP_SYS(rename),
	SCMP_SYS(renameat), SCMP_SYS(renameat2), SCMP_SYS(unlink), SCMP_SYS(unlinkat),
	SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(ftruncate), SCMP_SYS(fallocate),
	SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(getcwd), SCMP_SYS(statx),
};

/*
 * What a new thread's start calls unconditionally (see filter_allow_thread_start); the
 * sanitizer runtimes read the thread's attributes, which asks for its CPU affinity.
 */
static const int filter_thread_start_calls[] = {
	SCMP_SYS(set_robust_list), SCMP_SYS(rseq), SCMP_SYS(seccomp), SCMP_SYS(sched_getaffinity),
};

struct filter_role {
	const char *name;
	const int *calls;
	size_t count;
	bool net_pinned; /* also socket(AF_INET/AF_INET6) and read-only opens */
	bool vmm_main;	 /* also what the VMM process's main thread may call */
	bool threads;	 /* may start threads (filter_allow_thread_start) */
};

static const struct filter_role filter_roles[VMM_THREAD_ROLE_COUNT] = {
	[VMM_THREAD_VCPU] = { .name = "vcpu" },
	[VMM_THREAD_DEVICE_WORKER] = { .name = "device worker",
				       .calls = filter_device_worker_calls,
				       .count = FILTER_COUNT(filter_device_worker_calls) },
	[VMM_THREAD_BLOCK_WORKER] = { .name = "disk worker", .calls = filter_block_worker_calls,
				      .count = FILTER_COUNT(filter_block_worker_calls) },
	[VMM_THREAD_SHARE_WORKER] = { .name = "share worker", .calls = filter_share_worker_calls,
				      .count = FILTER_COUNT(filter_share_worker_calls) },
	[VMM_THREAD_NET_WORKER] = { .name = "network worker", .calls = filter_net_worker_calls,
				    .count = FILTER_COUNT(filter_net_worker_calls),
				    .net_pinned = true },
	[VMM_THREAD_CHANNEL_READER] = { .name = "channel reader",
					.calls = filter_channel_reader_calls,
					.count = FILTER_COUNT(filter_channel_reader_calls) },
	[VMM_THREAD_VMM_MAIN] = { .name = "vmm main", .calls = filter_vmm_main_calls,
				  .count = FILTER_COUNT(filter_vmm_main_calls) },
	[VMM_THREAD_VMM_MAIN_SNAPSHOTS] = { .name = "vmm main (snapshots)",
					    .calls = filter_vmm_snapshot_calls,
					    .count = FILTER_COUNT(filter_vmm_snapshot_calls),
					    .vmm_main = true, .threads = true },
};

static int filter_allow(scmp_filter_ctx ctx, const int *calls, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, calls[i], 0);

		if (rc < 0)
			return rc;
	}
	return 0;
}

/* socket() for IPv4 and IPv6 only; open() and openat() without a flag that writes. */
static int filter_allow_net_pinned(scmp_filter_ctx ctx)
{
	int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				  SCMP_A0(SCMP_CMP_EQ, AF_INET, 0));

	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, AF_INET6, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(open), 1,
				      SCMP_CMP(FILTER_OPEN_FLAGS_ARG, SCMP_CMP_MASKED_EQ,
					       FILTER_WRITE_OPEN_FLAGS, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
				      SCMP_CMP(FILTER_OPENAT_FLAGS_ARG, SCMP_CMP_MASKED_EQ,
					       FILTER_WRITE_OPEN_FLAGS, 0));
	return rc;
}

/* tgkill to a thread of this process only (pthread_kill and raise name it by getpid()). */
static int filter_allow_own_signals(scmp_filter_ctx ctx)
{
	return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid(), 0));
}

/*
 * Starting a thread, and what a new thread does before its own filter holds: clone only with
 * CLONE_THREAD (no new process); clone3, whose flags seccomp cannot read, answers ENOSYS so
 * the C library falls back to clone; the C library's per-thread set-up; prctl only to name a
 * thread or set no_new_privs (not, say, to make the process dumpable again); seccomp, which
 * can only add filters.
 */
static int filter_allow_thread_start(scmp_filter_ctx ctx)
{
	int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));

	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
				      SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
				      SCMP_A0(SCMP_CMP_EQ, PR_SET_NO_NEW_PRIVS, 0));
	if (rc == 0)
		rc = filter_allow(ctx, filter_thread_start_calls,
				  FILTER_COUNT(filter_thread_start_calls));
	return rc;
}

int vmm_thread_confine(enum vmm_thread_role role)
{
	const struct filter_role *spec;
	scmp_filter_ctx ctx;
	int rc;

	if ((unsigned int)role >= VMM_THREAD_ROLE_COUNT)
		return -EINVAL;
	spec = &filter_roles[role];
	/* unprivileged seccomp needs it; it only stops privilege gains through exec */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	ctx = seccomp_init(SCMP_ACT_ERRNO(FILTER_DENY_ERRNO));
	if (!ctx)
		return -ENOMEM;
	/* this thread only: the rest of the process keeps its own rules */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 0);
	if (rc == 0)
		rc = filter_allow(ctx, filter_common_calls, FILTER_COUNT(filter_common_calls));
	if (rc == 0)
		rc = filter_allow_own_signals(ctx);
	if (rc == 0)
		rc = filter_allow(ctx, spec->calls, spec->count);
	if (rc == 0 && spec->net_pinned)
		rc = filter_allow_net_pinned(ctx);
	if (rc == 0 && spec->vmm_main)
		rc = filter_allow(ctx, filter_vmm_main_calls, FILTER_COUNT(filter_vmm_main_calls));
	if (rc == 0 && spec->threads)
		rc = filter_allow_thread_start(ctx);
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

const char *vmm_thread_role_name(enum vmm_thread_role role)
{
	return (unsigned int)role < VMM_THREAD_ROLE_COUNT ? filter_roles[role].name : "unknown";
}

/* The file rights the restriction handles; 0 where Landlock is missing or too old. */
static uint64_t landlock_handled_rights(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);

	return abi < LANDLOCK_ABI_REFER ? 0 : LANDLOCK_ACCESS_FS_ABI1 | LANDLOCK_ACCESS_FS_REFER;
}

bool vmm_thread_restrict_usable(void)
{
	return landlock_handled_rights() != 0;
}

/*
 * Adds "path and everything beneath it, with rights" to the ruleset; a file gets the rights
 * that apply to a file. 0 or -errno.
 */
static int landlock_allow_beneath(int ruleset_fd, const char *path, uint64_t rights)
{
	struct landlock_path_beneath_attr beneath = { .allowed_access = rights };
	struct stat st;
	int rc = 0;

	beneath.parent_fd = open(path, O_PATH | O_CLOEXEC);
	if (beneath.parent_fd < 0)
		return -errno;
	if (fstat(beneath.parent_fd, &st) < 0)
		rc = -errno;
	else if (!S_ISDIR(st.st_mode))
		beneath.allowed_access &= LANDLOCK_ACCESS_FS_ON_FILE;
	if (rc == 0 &&
	    syscall(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) < 0)
		rc = -errno;
	close(beneath.parent_fd);
	return rc;
}

int vmm_thread_restrict_to(const struct vmm_thread_path paths[], size_t count)
{
	uint64_t handled = landlock_handled_rights();
	struct landlock_ruleset_attr ruleset = { .handled_access_fs = handled };
	int ruleset_fd, rc = 0;

	if (!handled)
		return -EOPNOTSUPP;
	ruleset_fd = (int)syscall(SYS_landlock_create_ruleset, &ruleset, sizeof(ruleset), 0);
	if (ruleset_fd < 0)
		return -errno;
	for (size_t i = 0; i < count && rc == 0; i++)
		rc = landlock_allow_beneath(ruleset_fd, paths[i].path,
					    paths[i].read_only ? LANDLOCK_ACCESS_FS_READ_ONLY
							       : handled);
	if (rc == 0 && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			syscall(SYS_landlock_restrict_self, ruleset_fd, 0) < 0))
		rc = -errno;
	close(ruleset_fd);
	return rc;
}

int vmm_thread_restrict_to_dirs(const char *const dirs[], size_t count, bool read_only)
{
	struct vmm_thread_path paths[LANDLOCK_DIRS_MAX];

	if (count > LANDLOCK_DIRS_MAX)
		return -E2BIG;
	for (size_t i = 0; i < count; i++)
		paths[i] = (struct vmm_thread_path){ .path = dirs[i], .read_only = read_only };
	return vmm_thread_restrict_to(paths, count);
}

void vmm_thread_enter(enum vmm_thread_role role, const char *thread_name, bool confine)
{
	int rc;

	if (thread_name)
		prctl(PR_SET_NAME, thread_name, 0, 0, 0);
	rc = confine ? vmm_thread_confine(role) : 0;
	if (rc < 0)
		log_error("vmm", "cannot install the %s seccomp filter: %s; the thread runs "
			  "unconfined", vmm_thread_role_name(role), strerror(-rc));
}
