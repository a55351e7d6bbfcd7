/*
 * Wire glue for the file RPCs: decode the request, call the path-guarded operation in files.c,
 * encode and send the response on the same request id. Runs on the reader thread because each
 * operation is bounded local I/O.
 */
#ifndef VOIDBOX_AGENT_RPC_FILES_H
#define VOIDBOX_AGENT_RPC_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"

/* Handles WriteFile, ReadFile, MkdirP, FileStat. Returns 0, or -EPROTO for a malformed body. */
int rpc_files_handle(struct agent_conn *conn, uint8_t type, uint32_t request_id,
		     const uint8_t *body, size_t len);

#endif
