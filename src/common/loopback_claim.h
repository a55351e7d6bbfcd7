/*
 * Claims on the host's loopback TCP ports, so a guest reaches only the voidbox services meant
 * for it.
 *
 * Every guest with a network reaches the host's 127.0.0.1 through its gateway 10.0.2.2 (that is
 * how an agent reaches a model server on the host). voidbox's own host services on loopback are
 * each meant for one guest or for none: a messaging member's listener for its own agent, a
 * published port for its own VM's guest, the daemon's TCP API for no guest at all. The process
 * that serves such a port claims it, and the network device of every VM refuses a guest's
 * connection to a claimed port it was not granted (src/devices/net_policy.h).
 *
 * A claim is a datagram socket bound to the abstract unix name "voidbox-loopback-claim:PORT".
 * Abstract names belong to the network namespace, which every VMM with a network shares with
 * the host, so claims made under any VOIDBOX_HOME are seen by every VM; the name goes when its
 * socket closes, so a claimant that dies leaves nothing stale. Asking is a connect() on one
 * datagram socket made ahead (the VMM's confined network worker may make no unix socket).
 */
#ifndef VOIDBOX_COMMON_LOOPBACK_CLAIM_H
#define VOIDBOX_COMMON_LOOPBACK_CLAIM_H

#include <stdbool.h>
#include <stdint.h>

#define LOOPBACK_CLAIM_NAME_PREFIX "voidbox-loopback-claim:"

/*
 * Claims TCP port on the host's loopback for as long as the returned descriptor stays open
 * (close it with the service). -errno on failure: -EADDRINUSE when it is claimed already.
 */
int loopback_claim_port(uint16_t port);

/*
 * A descriptor to ask with; -errno. Make it before the asking thread is confined. It can ask
 * and do nothing else: it is bound to a name of its own and shut down, so no datagram can be
 * sent or received through it and no claim bound to it.
 */
int loopback_claim_asker_open(void);

/* Whether some process holds a claim on port; false when asker is not a descriptor. */
bool loopback_claim_held(int asker, uint16_t port);

#endif
