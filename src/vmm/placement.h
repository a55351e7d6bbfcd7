/*
 * Where a VM's threads run. A one-vCPU guest mostly waits on its devices one request at a
 * time (a FUSE call on a mount, an exec's vsock packets): each round trip wakes a device
 * worker and then the vCPU thread again. When the two sit on different host CPUs, each
 * wake-up is also an idle CPU's wake-up, which costs more than the request itself under
 * nested virtualization (docs/performance.md, host directory mounts). So the vCPU thread and
 * every device worker of a one-vCPU VM are created pinned to one host CPU; VMs created one
 * after another take the allowed CPUs in turn. A VM with more vCPUs is left to the scheduler.
 * The virtio-fs worker is the exception (vm_placement_float_thread): its requests carry up to
 * 1 MiB of data, and on a CPU of its own it copies one while the guest copies the next.
 *
 * Threads inherit their creator's affinity, so the VM pins the creating thread around the
 * code that makes its threads (devices, vCPUs) and gives it its own affinity back after.
 * A sandbox whose VMM runs in a process of its own chooses the CPU before the fork and passes
 * it in the VM's config (has_placement_cpu), so successive VMM processes still take turns.
 */
#ifndef VOIDBOX_VMM_PLACEMENT_H
#define VOIDBOX_VMM_PLACEMENT_H

#include <sched.h>
#include <stdbool.h>

/* No CPU chosen: the VM's threads float. */
#define VM_PLACEMENT_NONE (-1)

struct vm_placement {
	cpu_set_t saved; /* the creating thread's own affinity */
	bool pinned;
};

/* The host CPU a VM with vcpus vCPUs keeps its threads on, or VM_PLACEMENT_NONE. */
int vm_placement_choose(unsigned int vcpus);
/* Pins the calling thread to cpu (nothing for VM_PLACEMENT_NONE) until vm_placement_leave. */
void vm_placement_enter(struct vm_placement *placement, int cpu);
void vm_placement_leave(struct vm_placement *placement);
/*
 * A device worker that streams data rather than answering one small request at a time (the
 * virtio-fs worker: a 1 MiB READ or WRITE is a host copy as long as the guest's) gives the
 * VM's CPU back: it runs on cpus, the CPUs its creator had before the pin, so the host copies
 * one request while the vCPU copies the last in the guest. A worker whose request wakes it
 * while the vCPU waits still tends to run on the vCPU's idle CPU (the scheduler wakes a thread
 * near its waker), so small requests keep most of the pin's benefit (docs/performance.md,
 * "host directory mounts"). Called by the worker thread itself; cpus NULL: nothing.
 */
void vm_placement_float_thread(const cpu_set_t *cpus);

#endif
