/*
 * Where a VM's threads run (src/vmm/placement.c): a one-vCPU VM gets one allowed CPU, VMs
 * take the allowed CPUs in turn, a VM with more vCPUs gets none; entering pins the calling
 * thread and the threads it creates, leaving gives the caller its own affinity back.
 * Needs at least two allowed CPUs; with one there is nothing to choose and that is checked.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "harness.h"
#include "vmm/placement.h"

static cpu_set_t allowed;

static void *report_affinity(void *arg)
{
	cpu_set_t *out = arg;

	pthread_getaffinity_np(pthread_self(), sizeof(*out), out);
	return NULL;
}

static void test_choose(void)
{
	int count = CPU_COUNT(&allowed), first, second;

	CHECK_INT_EQ(vm_placement_choose(2), VM_PLACEMENT_NONE);
	first = vm_placement_choose(1);
	second = vm_placement_choose(1);
	if (count < 2) {
		CHECK_INT_EQ(first, VM_PLACEMENT_NONE);
		return;
	}
	CHECK(first >= 0 && CPU_ISSET(first, &allowed));
	CHECK(second >= 0 && CPU_ISSET(second, &allowed));
	CHECK(first != second); /* the next VM takes the next CPU */
}

static void test_enter_pins_children_and_leave_restores(void)
{
	struct vm_placement placement;
	cpu_set_t child, after;
	pthread_t thread;
	int cpu = vm_placement_choose(1);

	if (cpu == VM_PLACEMENT_NONE) {
		CHECK(CPU_COUNT(&allowed) < 2);
		return;
	}
	vm_placement_enter(&placement, cpu);
	CHECK(placement.pinned);
	CHECK_INT_EQ(pthread_create(&thread, NULL, report_affinity, &child), 0);
	pthread_join(thread, NULL);
	vm_placement_leave(&placement);
	CHECK_INT_EQ(CPU_COUNT(&child), 1);
	CHECK(CPU_ISSET(cpu, &child));
	CHECK_INT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(after), &after), 0);
	CHECK(CPU_EQUAL(&after, &allowed));

	vm_placement_enter(&placement, VM_PLACEMENT_NONE);
	CHECK(!placement.pinned);
	vm_placement_leave(&placement);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0)
		harness_fail_setup("cannot read this thread's CPU affinity");
	RUN_TEST(test_choose);
	RUN_TEST(test_enter_pins_children_and_leave_restores);
	return harness_finish();
}
