/*
 * virtio-net backed by libslirp: user-mode networking that needs no root, TAP or bridge on the
 * host. The guest is 10.0.2.15/24 behind the gateway 10.0.2.2 (the host's loopback) with DNS
 * at 10.0.2.3; every frame it sends is judged by the egress policy (net_policy.h) before slirp
 * sees it. docs/devices.md describes the device; this header is what the VM, the sandbox layer
 * and the tests need of it.
 */
#ifndef VOIDBOX_DEVICES_NET_H
#define VOIDBOX_DEVICES_NET_H

#include <stdint.h>

#include "devices/net_policy.h"
#include "devices/virtio_mmio.h"
#include "vmm/guest_memory.h"
#include "vmm/irq.h"

#define NET_MAX_PUBLISH 16

/* A host port on 127.0.0.1 forwarded to a guest port (TCP). */
struct net_publish {
	uint16_t host_port;
	uint16_t guest_port;
};

/* What a VM's network is (vm_config.network); the policy travels with its snapshots. */
struct net_config {
	struct net_policy policy;
	/*
	 * Where DNS queries to 10.0.2.3:53 go: 0 forwards them to the host's resolvers (as
	 * /etc/resolv.conf names them); an address and port send them to that server instead
	 * (127.0.0.1 means the host's loopback).
	 */
	uint32_t dns_server_addr;
	uint16_t dns_server_port;
	struct net_publish publish[NET_MAX_PUBLISH];
	unsigned int publish_count;
	/* Set by the VM, not the user: the worker installs its seccomp filter (thread_filter.h). */
	bool confine_worker;
};

/* What the device has done, for tests and logs. */
struct net_device_stats {
	uint64_t tx_frames;	  /* frames handed to slirp */
	uint64_t rx_frames;	  /* frames delivered to the guest */
	uint64_t rx_dropped;	  /* no guest buffer, or too small */
	uint64_t resets_injected; /* TCP resets to the guest: refused connects, reclaimed idle ones */
	uint64_t flows_reclaimed; /* TCP connections reset in libslirp: reclaimed, or reset ends */
	uint64_t verdicts[NET_VERDICT_COUNT];
};

struct net_device;

/* "HOST:GUEST" ports: 0 or -EINVAL. */
int net_publish_parse(const char *text, struct net_publish *out);
/* "ADDR:PORT": 0 or -EINVAL. */
int net_dns_server_parse(const char *text, uint32_t *addr, uint16_t *port);

/* Creates the device and starts its worker; NULL with a sentence in err. */
struct net_device *net_device_create(const struct net_config *cfg, const struct guest_memory *mem,
				     struct irq_line irq, char *err, size_t errlen);
struct virtio_mmio *net_device_transport(struct net_device *dev);
void net_device_stats(struct net_device *dev, struct net_device_stats *out);
/* Stops the worker, closes slirp's sockets, frees everything. NULL is fine. */
void net_device_destroy(struct net_device *dev);

#endif
