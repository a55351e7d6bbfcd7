/*
 * The kick that ends a VM reaches every vCPU thread, even one whose thread was only just made
 * when the VM ended: a vCPU missed then would stay in KVM_RUN, and vm_destroy would wait on
 * it for good. Needs no /dev/kvm: each vCPU's descriptor is /dev/null, so its thread fails
 * its first KVM ioctl and reports the end at once, from the thread itself. This program is
 * linked with pthread_create wrapped: the wrapper holds the creating thread back after the
 * thread exists, as a scheduler may, so the new thread ends the VM in that window every time.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "vmm/vcpu.h"
#include "vmm/vm_internal.h"

#define TEST_VCPUS 2
#define CREATOR_HOLD_MS 200 /* far longer than a new thread takes to fail its first ioctl */
#define NSEC_PER_MSEC_L 1000000L
#define WAIT_ENDER_MS 10000
#define WAIT_TURN_MS 10
#define KICK_SIGNAL (SIGRTMIN) /* vcpu.c's VCPU_KICK_SIGNAL */

int __real_pthread_create(pthread_t *thread, const pthread_attr_t *attr,
			  void *(*start)(void *), void *arg);
int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr,
			  void *(*start)(void *), void *arg);

static atomic_bool hold_creator;

int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr,
			  void *(*start)(void *), void *arg)
{
	struct timespec hold = { .tv_nsec = CREATOR_HOLD_MS * NSEC_PER_MSEC_L };
	int rc = __real_pthread_create(thread, attr, start, arg);

	if (rc == 0 && atomic_load(&hold_creator))
		nanosleep(&hold, NULL);
	return rc;
}

struct kick_probe {
	struct vm *vm;
	atomic_int ended;	  /* vCPU threads that reported the end */
	atomic_bool ender_kicked; /* the kick was pending in the thread that ended the VM */
	atomic_bool ender_done;	  /* ...which has looked: vm_destroy's joins may begin */
};

/*
 * on_exit of each vCPU: the last one made ends the VM, as its guest could at its first
 * instruction, and looks for its own kick (blocked outside KVM_RUN, so a kick sent to it is
 * pending once vm_request_stop returns).
 */
static void probe_vcpu_exit(void *opaque, enum vm_exit_reason reason)
{
	struct kick_probe *probe = opaque;
	sigset_t pending;

	(void)reason;
	if (atomic_fetch_add(&probe->ended, 1) != TEST_VCPUS - 1)
		return;
	vm_request_stop(probe->vm);
	if (sigpending(&pending) == 0 && sigismember(&pending, KICK_SIGNAL))
		atomic_store(&probe->ender_kicked, true);
	atomic_store(&probe->ender_done, true);
}

/* Until the ending vCPU has looked for its kick, or WAIT_ENDER_MS. */
static void wait_for_ender(const struct kick_probe *probe)
{
	struct timespec turn = { .tv_nsec = WAIT_TURN_MS * NSEC_PER_MSEC_L };

	for (int waited = 0; !atomic_load(&probe->ender_done) && waited < WAIT_ENDER_MS;
	     waited += WAIT_TURN_MS)
		nanosleep(&turn, NULL);
}

static void test_end_while_vcpus_start_kicks_every_vcpu(void)
{
	struct kick_probe probe = { 0 };
	struct vm *vm = vm_alloc();

	if (!vm || vcpu_signal_init() < 0)
		harness_fail_setup("cannot allocate a VM or install the kick handler");
	probe.vm = vm;
	vm->restored = true; /* no ACPI tables to write: the test maps no guest memory */
	vm->no_thread_filters = true;
	vm->vcpu_count = TEST_VCPUS;
	for (unsigned int i = 0; i < TEST_VCPUS; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];

		vcpu->index = i;
		vcpu->fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (vcpu->fd < 0)
			harness_fail_setup("cannot open /dev/null");
		vcpu->stop = &vm->stop;
		vcpu->on_exit = probe_vcpu_exit;
		vcpu->opaque = &probe;
		vm->vcpus_created++;
	}
	atomic_store(&hold_creator, true);
	CHECK(vm_start(vm) == 0);
	atomic_store(&hold_creator, false);
	wait_for_ender(&probe);
	CHECK(atomic_load(&probe.ender_done));
	vm_destroy(vm);
	CHECK_INT_EQ(atomic_load(&probe.ended), TEST_VCPUS);
	CHECK(atomic_load(&probe.ender_kicked));
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_end_while_vcpus_start_kicks_every_vcpu);
	return harness_finish();
}
