/*
 * Clone hygiene after a snapshot restore or fork. The host rekeys a restored guest with the
 * document {"secret_hex", "rng_seed_b64", "clock_ns"} in the Ping of its first handshake
 * (proven with the snapshot's secret), or, from an older host, with one WriteFile to the
 * reserved path RESTORE_REKEY_PATH; the agent never writes that file. It mixes the seed into the kernel's pool,
 * steps CLOCK_REALTIME, switches the session secret for new connections, closes every other
 * connection that authenticated before the switch, and answers on the rekeying connection,
 * which stays open: it is the host's (only the host reaches the guest's vsock), and keeping
 * it saves the restored guest a reconnect. So once the host has the answer, no other old
 * connection can be served, and a request an old connection's reader had already taken in is
 * dropped, not run (readers check restore_conn_is_stale before each dispatch). The secret
 * therefore lives here (mutable, locked) instead of in the read-only agent_context once a
 * rekey happened.
 * Protocol: docs/protocol.md and docs/snapshot-format.md.
 */
#ifndef VOIDBOX_AGENT_RESTORE_H
#define VOIDBOX_AGENT_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "proto/protocol.h"

#define RESTORE_REKEY_PATH "/etc/voidbox/restore.json"

/*
 * Returns 0 when proof is proto_handshake_proof of nonce under the current session secret (the
 * rekeyed one, or ctx's before that); fd is then registered as authenticated under that
 * secret, in the same step, so a rekey
 * cannot fall between the check and the registration and leave fd counted as newer than
 * the secret it used. Every fd passed here is unregistered when its connection ends.
 * -EACCES: wrong proof (a wrong secret, or a proof recorded for another connection's nonce). -EMFILE: RESTORE_MAX_CONNS connections are registered already; the
 * connection must be refused, because one the registry does not hold would survive a rekey.
 */
#define RESTORE_MAX_CONNS 256
int restore_authenticate(const struct agent_context *ctx, const uint8_t proof[PROTO_PROOF_SIZE],
			 const uint8_t nonce[PROTO_NONCE_SIZE], int fd);
void restore_conn_unregister(int fd);
bool restore_is_rekey_path(const char *path);
/*
 * Applies a rekey document. Returns 0, or -EINVAL with *error (malloc'ed) for the host.
 * The RNG seed and clock touch the machine, so only an agent that is PID 1 in its VM applies
 * them (outside a VM, the host's clock is not the agent's to set); the secret always switches.
 * On success the caller calls restore_retire_stale_connections(its own fd) before answering.
 */
int restore_apply(const uint8_t *json, size_t len, bool in_vm, char **error);
/*
 * The rekey carried in a Ping (PROTO_FLAG_REKEY, docs/protocol.md §3): authenticates like
 * restore_authenticate, then applies json (in the VM when ctx->is_pid1) and retires every
 * other connection, so fd is the only one of the new session. A Ping whose proof fails under
 * the current secret is still accepted when it repeats the handshake rekey that installed
 * that secret: proven with the secret that rekey replaced and carrying the same new secret.
 * That is the host retrying after a lost Pong; it proves knowledge of the new secret, so it
 * grants nothing the new secret does not. -EINVAL: malformed document; -EACCES, -EMFILE as
 * restore_authenticate.
 */
int restore_authenticate_rekey(const struct agent_context *ctx,
			       const uint8_t proof[PROTO_PROOF_SIZE],
			       const uint8_t nonce[PROTO_NONCE_SIZE], int fd, const uint8_t *json,
			       size_t len);
/*
 * Shuts down every connection authenticated before the latest rekey except rekeying_fd, which
 * moves to the new secret's generation and stays usable. One locked step.
 */
void restore_retire_stale_connections(int rekeying_fd);
/* True when fd authenticated before the latest rekey: its requests must not be served. */
bool restore_conn_is_stale(int fd);

#endif
