/* The doubling growth of array.h. */
#include "common/array.h"

#include <stdint.h>
#include <stdlib.h>

bool array_reserve_one(void **items, size_t *capacity, size_t used, size_t item_size,
		       size_t initial)
{
	size_t grown;
	void *bigger;

	if (used < *capacity)
		return true;
	grown = *capacity ? *capacity * 2 : (initial ? initial : 1);
	if (grown < *capacity || item_size == 0 || grown > SIZE_MAX / item_size)
		return false;
	bigger = realloc(*items, grown * item_size);
	if (!bigger)
		return false;
	*items = bigger;
	*capacity = grown;
	return true;
}
