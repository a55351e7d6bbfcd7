/* A one-way gate: closed until setup_gate_open, then open for good (see setup_gate.h). */
#include "setup_gate.h"

void setup_gate_init(struct setup_gate *gate)
{
	pthread_mutex_init(&gate->lock, NULL);
	pthread_cond_init(&gate->opened_cond, NULL);
	gate->opened = false;
}

void setup_gate_open(struct setup_gate *gate)
{
	pthread_mutex_lock(&gate->lock);
	gate->opened = true;
	pthread_cond_broadcast(&gate->opened_cond);
	pthread_mutex_unlock(&gate->lock);
}

void setup_gate_wait(struct setup_gate *gate)
{
	if (!gate)
		return;
	pthread_mutex_lock(&gate->lock);
	while (!gate->opened)
		pthread_cond_wait(&gate->opened_cond, &gate->lock);
	pthread_mutex_unlock(&gate->lock);
}

bool setup_gate_is_open(struct setup_gate *gate)
{
	bool opened;

	if (!gate)
		return true;
	pthread_mutex_lock(&gate->lock);
	opened = gate->opened;
	pthread_mutex_unlock(&gate->lock);
	return opened;
}
