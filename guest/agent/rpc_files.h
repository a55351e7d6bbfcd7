/*
 * Wire glue for the file RPCs and SetPolicy: decode the request, call the path-guarded
 * operation in files.c (or the policy store), encode and send the response on the same
 * request id. Runs on the reader thread because each
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

/*
 * Sends a status body (success when error is NULL) as type on request_id; err (a negative
 * errno, 0 for unknown) picks the machine-readable code of a failure.
 */
void rpc_send_status(struct agent_conn *conn, uint8_t type, uint32_t request_id,
		     const char *error, int err);

/*
 * SetPolicy: installs the session's allowlist and limits (policy_store_set) and answers
 * SetPolicyResponse. Returns 0, or -EPROTO for a malformed body.
 */
int rpc_policy_handle(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
		      size_t len);

#endif
