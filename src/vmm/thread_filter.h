/*
 * seccomp filters for the threads that do the guest's bidding. A vCPU thread and a device
 * worker run code the guest drives with every exit and every queue entry; if that code is
 * ever subverted, the filter bounds what it can do: no opening files, no new sockets or
 * connections, no processes, no exec, no mounts. Each role gets the system calls its loop
 * needs and nothing else; anything else fails with EPERM (rather than killing the process, so
 * a missed call degrades one operation instead of taking every sandbox of the process down).
 * Filters are installed by each thread on itself before it first touches the guest, and are
 * inherited by nothing (these threads start no others).
 */
#ifndef VOIDBOX_VMM_THREAD_FILTER_H
#define VOIDBOX_VMM_THREAD_FILTER_H

enum vmm_thread_role {
	VMM_THREAD_VCPU,	  /* KVM_RUN and the port/MMIO handlers it calls */
	VMM_THREAD_DEVICE_WORKER, /* a device's event loop: its sockets, eventfds and the guest */
};

/* Installs the role's filter on the calling thread. 0 or -errno (nothing installed). */
int vmm_thread_confine(enum vmm_thread_role role);
/* The role's name for logs ("vcpu", "device worker"). */
const char *vmm_thread_role_name(enum vmm_thread_role role);

#endif
