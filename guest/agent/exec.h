/*
 * ExecRequest handling. Each request runs on its own detached thread, so a long exec never
 * delays file RPCs or other execs on the same connection; the reader thread only decodes the
 * request and hands it over.
 */
#ifndef VOIDBOX_AGENT_EXEC_H
#define VOIDBOX_AGENT_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"

/*
 * Decodes an ExecRequest body and starts its worker thread. Returns 0, or -EPROTO for a
 * malformed body (the caller closes the connection), or -errno when no thread could start
 * (an ExecResponse with the error has then been sent).
 */
int exec_start(struct agent_conn *conn, uint32_t request_id, const uint8_t *body, size_t len);

#endif
