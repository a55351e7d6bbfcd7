/*
 * Memory and CPU caps for one VMM process (docs/security.md, "Design: resource limits per
 * VM"): a cgroup v2 directory of its own beneath a delegated root, with memory.max (guest
 * memory plus a fixed allowance for the VMM itself), memory.swap.max 0 and cpu.max (the VM's
 * vCPUs' worth of host CPU). The host makes the directory and writes the limits before it
 * starts the VMM process, which is born in it where the kernel allows (CLONE_INTO_CGROUP) and
 * otherwise moves itself in before it builds the VM, so no guest instruction runs outside the
 * limits.
 *
 * The delegated root is the parent of this process's own cgroup on the cgroup2 mount (a
 * cgroup that holds processes cannot give controllers to children, so siblings are the place),
 * usable only where it is writable and its cgroup.subtree_control enables both memory and cpu.
 * Where it is not (cgroup v1 hosts, hybrid hosts whose controllers are all on v1, a root this
 * user may not write), the VMs run without caps and vmm_cgroup_root says why in one sentence.
 */
#ifndef VOIDBOX_SANDBOX_VMM_CGROUP_H
#define VOIDBOX_SANDBOX_VMM_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * What the VMM may take beyond its guest's memory (page tables, device buffers, libslirp). A
 * build with AddressSanitizer (the CI's sanitizer pass over the VM suite) adds its shadow
 * memory and its quarantine of freed blocks (256 MiB by default) to every VMM process.
 */
#if defined(__SANITIZE_ADDRESS__)
#define VMM_CGROUP_OVERHEAD_MB 1024u
#else
#define VMM_CGROUP_OVERHEAD_MB 128u
#endif
/* cpu.max's period: a cap of N vCPUs is N periods of CPU time in each period. */
#define VMM_CGROUP_CPU_PERIOD_US 100000u

struct vmm_cgroup_limits {
	unsigned int memory_mb; /* the guest's memory */
	unsigned int vcpus;
};

/*
 * The delegated root for VMM cgroups into out: 0, or -EOPNOTSUPP (or -errno) with a sentence in
 * why that names what is missing.
 */
int vmm_cgroup_root(char *out, size_t len, char *why, size_t whylen);

/*
 * This process's own cgroup v2 directory (the cgroup2 mount joined with /proc/self/cgroup's
 * path) into out, whatever controllers it has: 0, or -errno with a sentence in why.
 */
int vmm_cgroup_own_dir(char *out, size_t len, char *why, size_t whylen);

/*
 * Checks that root enables the memory and cpu controllers for its children, makes root/name
 * and writes the limits there; the directory's path goes to dir. 0, or -errno with a sentence.
 */
int vmm_cgroup_create(const char *root, const char *name, const struct vmm_cgroup_limits *limits,
		      char *dir, size_t dirlen, char *err, size_t errlen);

/*
 * memory.max for a guest of memory_mb: the guest and the allowance, and with_memory_copy the
 * guest's memory once more (below).
 */
unsigned long long vmm_cgroup_memory_max_bytes(unsigned int memory_mb, bool with_memory_copy);

/*
 * Raises dir's memory.max by the guest's memory, for a VMM about to write a snapshot onto a
 * memory-backed file system (tmpfs): the file's pages are charged to the cgroup of the
 * process that writes them and cannot be reclaimed without swap, so under the plain cap the
 * kernel would kill the VMM half-way through its guest's memory. 0 or -errno.
 */
int vmm_cgroup_allow_memory_copy(const char *dir, unsigned int memory_mb);

/*
 * Moves pid (0: the calling process) into dir. 0 or -errno. A calling process already in dir
 * (born there: vmm_process.c clones it in) is left as it is, since a write to cgroup.procs
 * takes the kernel's migration lock even for a process that does not move.
 */
int vmm_cgroup_enter(const char *dir, pid_t pid);

/* Removes dir once its processes have ended; NULL or "" is fine. */
void vmm_cgroup_remove(const char *dir);

#endif
