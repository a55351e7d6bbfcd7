/*
 * Running one piece of work per item at the same time. Forks restore and rekey their
 * children this way: each child is independent, and under nested virtualization doing them
 * one after another multiplied the wait by the number of children.
 */
#ifndef VOIDBOX_COMMON_PARALLEL_H
#define VOIDBOX_COMMON_PARALLEL_H

#include <stddef.h>

/*
 * Calls fn on each of the n items of items (an array of item_size-byte elements), each on a
 * thread of its own, and returns once every call has returned. An item whose thread cannot be
 * started is done on the calling thread, so every item is always done; results go in the
 * items themselves.
 */
void parallel_for_each(void *items, size_t n, size_t item_size, void (*fn)(void *item));

#endif
