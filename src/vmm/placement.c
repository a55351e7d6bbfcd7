/* One host CPU for a one-vCPU VM's threads (see placement.h). */
#include "vmm/placement.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/log.h"

/* How many VMs chose a CPU so far: the next one takes the next allowed CPU. */
static atomic_uint vm_placement_turn;

int vm_placement_choose(unsigned int vcpus)
{
	cpu_set_t allowed;
	int count, current, start = 0, pick;

	if (vcpus != 1 || sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return VM_PLACEMENT_NONE;
	count = CPU_COUNT(&allowed);
	if (count <= 1)
		return VM_PLACEMENT_NONE; /* nowhere else to go: pinning changes nothing */
	/* start from the CPU this thread is on, so a single VM stays where its creator is */
	current = sched_getcpu();
	for (int cpu = 0; current >= 0 && cpu < current && cpu < CPU_SETSIZE; cpu++)
		start += CPU_ISSET(cpu, &allowed) ? 1 : 0;
	pick = (int)((start + atomic_fetch_add(&vm_placement_turn, 1)) % (unsigned int)count);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (CPU_ISSET(cpu, &allowed) && pick-- == 0)
			return cpu;
	}
	return VM_PLACEMENT_NONE;
}

void vm_placement_enter(struct vm_placement *placement, int cpu)
{
	cpu_set_t one;
	int rc;

	placement->pinned = false;
	if (cpu == VM_PLACEMENT_NONE)
		return;
	rc = pthread_getaffinity_np(pthread_self(), sizeof(placement->saved), &placement->saved);
	if (rc == 0) {
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		rc = pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
	}
	if (rc != 0) {
		log_debug("vm", "the VM's threads float between CPUs: %s", strerror(rc));
		return;
	}
	placement->pinned = true;
}

void vm_placement_float_thread(const cpu_set_t *cpus)
{
	int rc;

	if (!cpus)
		return;
	rc = pthread_setaffinity_np(pthread_self(), sizeof(*cpus), cpus);
	if (rc != 0)
		log_debug("vm", "a streaming worker stays on the VM's CPU: %s", strerror(rc));
}

void vm_placement_leave(struct vm_placement *placement)
{
	if (placement->pinned)
		pthread_setaffinity_np(pthread_self(), sizeof(placement->saved), &placement->saved);
	placement->pinned = false;
}
