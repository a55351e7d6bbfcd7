/*
 * Growing a heap array one element at a time (directory listings and the like) without each
 * caller writing its own doubling and overflow checks.
 */
#ifndef VOIDBOX_COMMON_ARRAY_H
#define VOIDBOX_COMMON_ARRAY_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Makes room for at least used + 1 elements of item_size bytes in *items (capacity in
 * *capacity, doubling from initial). False on overflow or out of memory; *items is then
 * unchanged and still the caller's to free.
 */
bool array_reserve_one(void **items, size_t *capacity, size_t used, size_t item_size,
		       size_t initial);

#endif
