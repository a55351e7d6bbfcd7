/*
 * parallel_for_each: one pthread per item, joined in order. The thread table is the only
 * allocation; when even that fails the items are done one after another, which is slower but
 * gives the same results.
 */
#include "common/parallel.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct parallel_task {
	void (*fn)(void *item);
	void *item;
	pthread_t thread;
	bool started;
};

static void *parallel_task_run(void *arg)
{
	struct parallel_task *task = arg;

	task->fn(task->item);
	return NULL;
}

void parallel_for_each(void *items, size_t n, size_t item_size, void (*fn)(void *item))
{
	struct parallel_task *tasks = calloc(n ? n : 1, sizeof(*tasks));
	uint8_t *base = items;

	if (!tasks) {
		for (size_t i = 0; i < n; i++)
			fn(base + i * item_size);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		tasks[i] = (struct parallel_task){ .fn = fn, .item = base + i * item_size };
		tasks[i].started =
			pthread_create(&tasks[i].thread, NULL, parallel_task_run, &tasks[i]) == 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (tasks[i].started)
			pthread_join(tasks[i].thread, NULL);
		else
			fn(tasks[i].item);
	}
	free(tasks);
}
