/*
 * One row of an HTTP API's error table: the daemon and the messaging sidecar each keep their
 * own set of error codes (their clients see different names and statuses), indexed by their
 * own enum, but describe every code the same way.
 */
#ifndef VOIDBOX_COMMON_API_ERROR_H
#define VOIDBOX_COMMON_API_ERROR_H

#include <stdbool.h>

struct api_error_info {
	const char *name;     /* the code as clients see it, e.g. "NOT_FOUND" */
	unsigned http_status; /* the response's status */
	bool retryable;       /* whether the same request may succeed later */
};

#endif
