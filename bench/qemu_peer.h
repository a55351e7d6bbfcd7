/*
 * The QEMU peer the benchmarks compare voidbox against: QEMU `-M microvm,acpi=on` with KVM,
 * `-cpu host`, one vCPU, the voidbox guest image and a vhost-vsock device, its guest's agent
 * reached over AF_VSOCK with the real control channel (handshake, then the default policy, as
 * sandbox_start sends it). One place boots it, so every bench's peer is the same machine and
 * a bench adds only its own devices (extra_args) and kernel words (cmdline_extra).
 */
#ifndef VOIDBOX_BENCH_QEMU_PEER_H
#define VOIDBOX_BENCH_QEMU_PEER_H

#include <stddef.h>
#include <sys/types.h>

#include "host/control_channel.h"

struct qemu_peer_config {
	const char *qemu;		/* binary, looked up in PATH */
	const char *kernel;
	const char *initramfs;
	unsigned int memory_mb;
	unsigned int cid;		/* the guest CID of the vhost-vsock device */
	const char *cmdline_extra;	/* appended to voidbox's own command line; may be NULL */
	const char *console_path;	/* the guest's serial console goes to this file */
	const char *const *extra_args;	/* more QEMU arguments, NULL-terminated; may be NULL */
	double boot_timeout_ms;
	/* the session's policy; NULL sends sandbox_default_policy(), as sandbox_start does */
	const struct proto_set_policy *policy;
};

/* Stays in place while the peer runs: the channel reconnects through it. */
struct qemu_peer {
	pid_t pid;
	unsigned int cid;
	struct control_channel *channel; /* to the guest agent, policy already sent */
};

/* Boots QEMU and waits for its agent. 0, or -errno with a sentence in err (QEMU is gone). */
int qemu_peer_start(const struct qemu_peer_config *cfg, struct qemu_peer *peer, char *err,
		    size_t err_len);
/* Closes the channel and kills QEMU; safe on a peer that never started. */
void qemu_peer_stop(struct qemu_peer *peer);

#endif
