/*
 * The allow lists of thread_filter.h, built with libseccomp. The lists are what the loops
 * call, read off the code: KVM ioctls and interrupt lines, reads and writes on descriptors
 * the thread was handed (the console log, eventfds, the vsock sockets), memory management for
 * malloc, futexes for the locks, the clock, getrandom for the entropy device, signals for the
 * kicks, and thread exit.
 */
#include "vmm/thread_filter.h"

#include <errno.h>
#include <seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>

#define FILTER_DENY_ERRNO EPERM

/* Every role: memory, locks, time, signals, logging, exit. */
static const int filter_common_calls[] = {
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
	SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(close), SCMP_SYS(ioctl),
	SCMP_SYS(futex), SCMP_SYS(sched_yield), SCMP_SYS(nanosleep),
	SCMP_SYS(clock_nanosleep), SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday),
	SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(tgkill), SCMP_SYS(rt_sigreturn),
	SCMP_SYS(rt_sigprocmask), SCMP_SYS(restart_syscall), SCMP_SYS(exit),
	SCMP_SYS(exit_group), SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap),
	SCMP_SYS(mprotect), SCMP_SYS(brk), SCMP_SYS(madvise), SCMP_SYS(fstat),
	SCMP_SYS(newfstatat), SCMP_SYS(lseek), SCMP_SYS(getrandom),
	/* a guest that stops makes its vCPU close the device's host connections */
	SCMP_SYS(epoll_ctl), SCMP_SYS(shutdown),
};

/* A device worker also waits on its descriptors and serves the host's connections. */
static const int filter_worker_calls[] = {
	SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(accept), SCMP_SYS(accept4),
	SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
	SCMP_SYS(getsockopt), SCMP_SYS(setsockopt), SCMP_SYS(fcntl), SCMP_SYS(poll),
	SCMP_SYS(ppoll),
};

#define FILTER_COUNT(list) (sizeof(list) / sizeof((list)[0]))

static int filter_allow(scmp_filter_ctx ctx, const int *calls, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, calls[i], 0);

		if (rc < 0)
			return rc;
	}
	return 0;
}

int vmm_thread_confine(enum vmm_thread_role role)
{
	scmp_filter_ctx ctx;
	int rc;

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
	if (rc == 0 && role == VMM_THREAD_DEVICE_WORKER)
		rc = filter_allow(ctx, filter_worker_calls, FILTER_COUNT(filter_worker_calls));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

const char *vmm_thread_role_name(enum vmm_thread_role role)
{
	return role == VMM_THREAD_VCPU ? "vcpu" : "device worker";
}
