/*
 * The gate between the agent's first answer and its first request. As PID 1 the agent listens
 * as soon as the vsock transport is up, so the host's handshake does not wait for the rest of
 * the boot; the device set-up (the other modules, the OCI root, shares, disks, network) runs
 * on a thread of its own meanwhile. Every request after the handshake waits at this gate until
 * that set-up is over, so a command never sees a share, disk or address that is not there yet.
 * A NULL gate is open: outside a VM there is nothing to wait for.
 */
#ifndef VOIDBOX_AGENT_SETUP_GATE_H
#define VOIDBOX_AGENT_SETUP_GATE_H

#include <pthread.h>
#include <stdbool.h>

struct setup_gate {
	pthread_mutex_t lock;
	pthread_cond_t opened_cond;
	bool opened;
};

void setup_gate_init(struct setup_gate *gate);
/* Lets every waiter through, now and later. */
void setup_gate_open(struct setup_gate *gate);
/* Returns once the gate is open (at once for a NULL or open gate). */
void setup_gate_wait(struct setup_gate *gate);
bool setup_gate_is_open(struct setup_gate *gate);

#endif
