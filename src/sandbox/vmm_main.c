/*
 * voidbox-vmm: the executable every VMM process runs (docs/security.md, "What runs where").
 * The sandbox layer forks, confines the child and executes this with an empty environment, so
 * the process starts from a fresh image holding nothing of its caller's memory; all it knows
 * comes from its launch on VMM_PROCESS_LAUNCH_FD (sandbox/vmm_serve.h does the rest).
 *
 * An execution resets the "dumpable" attribute the child had cleared, so the first thing done
 * here is clearing it again: before the launch (with the session secret) is read, no other
 * process of the user may ptrace this one or read its memory through /proc.
 */
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "sandbox/vmm_msg.h"
#include "sandbox/vmm_serve.h"

int main(void)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		perror(VMM_PROCESS_NAME ": cannot make the process not dumpable");
		return VMM_SERVE_EXIT_SETUP;
	}
	/* _exit: the main thread's filter has no room for what exit handlers might call */
	_exit(vmm_serve_main(VMM_PROCESS_CONTROL_FD, VMM_PROCESS_LAUNCH_FD));
}
