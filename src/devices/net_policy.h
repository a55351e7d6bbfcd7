/*
 * The egress policy of the user-mode network, and the Ethernet/IPv4 frame parser it needs.
 *
 * The guest is hostile, so its frames are judged on the host, in the virtio-net device, before
 * libslirp sees them (src/devices/net.c): nothing inside the guest can loosen the policy. The
 * parser bounds every length against the frame it was given; the policy is plain data and a
 * clock passed in by the caller, so tests and the fuzzer drive it without a VM or a timer.
 *
 * What is judged, and by what address:
 *   - a TCP segment that opens a connection (SYN without ACK): slirp creates a host socket
 *     only for those, so the other segments of a connection need no verdict;
 *   - every UDP datagram and ICMP message (slirp relays each one);
 *   - addresses of the virtual network by what they reach: the gateway 10.0.2.2 is the host's
 *     loopback (127.0.0.1), the DNS address 10.0.2.3 port 53 is the resolver DNS forwarding
 *     sends to (and is refused when DNS forwarding is off); every other virtual address is
 *     refused, and so is every address that names no single remote host (0.0.0.0/8, which
 *     the host's stack takes for itself, and multicast and 240.0.0.0/4 with the broadcast
 *     address, which libslirp turns into the host's loopback), and so is 127.0.0.0/8 given
 *     as a destination (the host's loopback is reached through the gateway only), so no deny
 *     list can be walked around by them;
 *   - IPv4 fragments, IPv6 and other protocols are dropped (the guest stack needs none of them
 *     for TCP, and a fragment could hide the transport header);
 *   - an IPv4 frame from any source but the guest's 10.0.2.15 is dropped: libslirp would open
 *     a host socket for another source address too, and flows are keyed without one, so a
 *     spoofed source would pass as a flow the guest already has and slip past the caps.
 * A deny list is checked first (169.254.0.0/16 always), then the allow list if there is one,
 * then, for a TCP connection through the gateway, whether another voidbox process has claimed
 * that host port (src/common/loopback_claim.h: a messaging listener, a published port, the
 * daemon's API) without granting it to this VM, then the caps on concurrent flows and on new
 * flows per second. When the flow cap is reached, the TCP connection the guest has left silent
 * longest, if that is over NET_TCP_FLOW_IDLE_MS, gives up its slot: the device resets it in
 * libslirp. A reset that libslirp may have dropped ends a flow only with such a reset too.
 */
#ifndef VOIDBOX_DEVICES_NET_POLICY_H
#define VOIDBOX_DEVICES_NET_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The virtual network slirp presents, host byte order. */
#define NET_ADDR(a, b, c, d)                                                             \
	(((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d))
#define NET_VIRTUAL_NETWORK NET_ADDR(10, 0, 2, 0)
#define NET_VIRTUAL_PREFIX 24
#define NET_GATEWAY_ADDR NET_ADDR(10, 0, 2, 2)
#define NET_DNS_ADDR NET_ADDR(10, 0, 2, 3)
#define NET_GUEST_ADDR NET_ADDR(10, 0, 2, 15)
#define NET_HOST_LOOPBACK_ADDR NET_ADDR(127, 0, 0, 1)
#define NET_DNS_PORT 53

#define NET_ETH_HEADER_LEN 14
#define NET_ETH_ADDR_LEN 6
#define NET_ETHERTYPE_IPV4 0x0800
#define NET_ETHERTYPE_ARP 0x0806
#define NET_IPV4_MIN_HEADER_LEN 20
#define NET_TCP_MIN_HEADER_LEN 20
#define NET_UDP_HEADER_LEN 8
#define NET_IP_PROTO_ICMP 1
#define NET_IP_PROTO_TCP 6
#define NET_IP_PROTO_UDP 17
#define NET_TCP_FIN 0x01u
#define NET_TCP_SYN 0x02u
#define NET_TCP_RST 0x04u
#define NET_TCP_ACK 0x10u
/* The largest frame either side passes: a 1500-byte MTU plus the Ethernet header. */
#define NET_MAX_FRAME_LEN 1514
/* An injected TCP reset: Ethernet + IPv4 + TCP headers, no options. */
#define NET_RST_FRAME_LEN (NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN + NET_TCP_MIN_HEADER_LEN)

#define NET_MAX_CIDRS 32
/* Host loopback ports one VM may reach although they are claimed: its own services. */
#define NET_MAX_GRANTED_PORTS 8
#define NET_FLOW_TABLE_SIZE 1024
#define NET_DEFAULT_MAX_FLOWS 256
#define NET_DEFAULT_MAX_NEW_PER_SEC 64
/*
 * A UDP or ICMP flow nobody used for this long no longer counts against the concurrency cap:
 * each is at least as long as libslirp keeps the host socket of such a flow without traffic
 * (a UDP socket 240 s, 10 s for port 53; an ICMP echo's until its reply or 240 s). libslirp
 * keeps an idle TCP connection for ever, so a TCP flow counts until it closes; one the guest
 * left silent this long may be reclaimed (reset in libslirp) when a new flow needs its slot.
 */
#define NET_TCP_FLOW_IDLE_MS (300u * 1000u)
#define NET_UDP_FLOW_IDLE_MS (240u * 1000u)
#define NET_DNS_FLOW_IDLE_MS (30u * 1000u)
#define NET_ICMP_FLOW_IDLE_MS (240u * 1000u)
#define NET_ICMP_ECHO_REPLY 0
#define NET_ICMP_ECHO_REQUEST 8
#define NET_ICMP_HEADER_LEN 8
#define NET_RATE_WINDOW_MS 1000u

struct net_cidr {
	uint32_t addr; /* host byte order, host bits cleared */
	uint8_t prefix;
};

struct net_policy {
	struct net_cidr deny[NET_MAX_CIDRS];
	unsigned int deny_count;
	/* allow_count > 0: everything outside these is refused. */
	struct net_cidr allow[NET_MAX_CIDRS];
	unsigned int allow_count;
	uint32_t max_flows;	  /* 0: NET_DEFAULT_MAX_FLOWS */
	uint32_t tcp_idle_ms;	  /* 0: NET_TCP_FLOW_IDLE_MS (tests shorten it; not carried) */
	uint32_t max_new_per_sec; /* 0: NET_DEFAULT_MAX_NEW_PER_SEC */
	bool dns;		  /* DNS forwarding at 10.0.2.3 */
	uint32_t resolver_addr;	  /* what 10.0.2.3:53 forwards to, judged by the lists */
	/* claimed host loopback ports this VM may still reach (its messaging listener) */
	uint16_t granted_ports[NET_MAX_GRANTED_PORTS];
	unsigned int granted_count;
};

enum net_frame_kind {
	NET_FRAME_MALFORMED,   /* a length or field that does not fit the frame */
	NET_FRAME_ARP,	       /* passed to slirp: it answers for the virtual addresses */
	NET_FRAME_UNSUPPORTED, /* IPv6, other ethertypes, other IP protocols, fragments */
	NET_FRAME_TCP,
	NET_FRAME_UDP,
	NET_FRAME_ICMP,
};

struct net_frame_info {
	enum net_frame_kind kind;
	uint32_t src_addr; /* host byte order */
	uint32_t dst_addr;
	uint16_t src_port; /* TCP/UDP; an ICMP echo's identifier */
	uint16_t dst_port; /* an ICMP echo's sequence number */
	uint8_t tcp_flags;
	uint32_t tcp_seq;
	uint32_t tcp_ack;
	bool tcp_checksum_ok; /* computed for a FIN or RST only: what may end a flow */
	uint8_t icmp_type;    /* ICMP: echo id and sequence are in src_port and dst_port */
	size_t ip_offset;	  /* where the IPv4 header starts */
	size_t l4_offset;	  /* where the TCP/UDP/ICMP header starts */
	size_t l4_payload_len; /* bytes after the TCP/UDP header */
};

enum net_verdict {
	NET_VERDICT_PASS,
	NET_VERDICT_DROP_MALFORMED,
	NET_VERDICT_DROP_UNSUPPORTED,
	NET_VERDICT_DENY_ADDRESS, /* deny list, allow list, or a virtual address with no service */
	NET_VERDICT_DENY_FLOWS,	  /* too many concurrent flows */
	NET_VERDICT_DENY_RATE,	  /* too many new flows in this second */
	NET_VERDICT_DENY_CLAIMED, /* a host loopback port another voidbox service claimed */
	NET_VERDICT_DROP_SPOOFED, /* an IPv4 source other than the guest's address */
	NET_VERDICT_COUNT,
};

/*
 * A flow is keyed as the guest's frames name it: TCP and UDP by the guest's port and the remote
 * address and port; an ICMP echo by its identifier (guest_port) and sequence number (dst_port),
 * since libslirp opens a host socket per echo request.
 */
struct net_flow {
	bool used;
	bool guest_fin;	 /* TCP: the guest closed its side, and libslirp acknowledged it */
	bool guest_fin_sent; /* TCP: the guest sent a FIN, numbered guest_fin_seq */
	uint32_t guest_fin_seq;
	bool remote_fin; /* TCP: the remote end closed its side */
	uint8_t proto;
	uint16_t guest_port;
	uint32_t dst_addr;
	uint16_t dst_port;
	uint64_t last_seen_ms;
	uint32_t guest_seq; /* TCP: a sequence number of the guest's, the latest it sent */
	uint32_t guest_ack; /* TCP: the latest acknowledgement the guest sent, if guest_acked */
	bool guest_acked;
	bool synack_seen;   /* TCP: libslirp answered the SYN, so it has left connecting */
};

/*
 * A TCP connection the policy has stopped counting while libslirp may still hold it: an idle
 * one whose slot a new flow took, or one a reset ended that libslirp may have dropped. The
 * device resets it in libslirp (net_build_reclaim_rst), which closes its host socket, and an
 * idle one in the guest too (net_build_guest_rst), whose program would otherwise wait on it.
 */
struct net_reclaimed_flow {
	uint16_t guest_port;
	uint32_t dst_addr;
	uint16_t dst_port;
	uint32_t guest_seq;
	bool tell_guest;    /* idle, and the guest acknowledged something: guest_ack is its next */
	uint32_t guest_ack;
};

/* Connections not yet reset by the device: past this many, flows keep counting instead. */
#define NET_RECLAIMED_MAX 16

/* What the policy remembers between frames: open flows and this second's new ones. */
struct net_policy_state {
	struct net_flow flows[NET_FLOW_TABLE_SIZE];
	uint32_t active_flows;
	uint32_t flow_slots_high; /* every used slot is below this: what a scan reads */
	uint64_t window_start_ms;
	uint32_t window_new;
	uint64_t verdicts[NET_VERDICT_COUNT];
	/* connections no longer counted, for the device to reset in libslirp and then clear */
	struct net_reclaimed_flow reclaimed[NET_RECLAIMED_MAX];
	unsigned int reclaimed_count;
	/*
	 * Whether a host loopback TCP port is claimed (loopback_claim_held in the device); NULL:
	 * no port is, as for the tests and the fuzzer that judge frames without a host.
	 */
	bool (*port_claimed)(void *opaque, uint16_t port);
	void *port_claimed_opaque;
};

/* "a.b.c.d/n" or "a.b.c.d" (a /32). 0, or -EINVAL. */
int net_cidr_parse(const char *text, struct net_cidr *out);
bool net_cidr_contains(const struct net_cidr *cidr, uint32_t addr);
/* Formats addr (host byte order) as a dotted quad into out (at least 16 bytes). */
void net_addr_format(uint32_t addr, char *out, size_t len);

/* A policy with the default deny list (169.254.0.0/16), no allow list, default caps. */
void net_policy_init_default(struct net_policy *policy);
/* Adds to the deny or allow list: 0, -ENOSPC when full. */
int net_policy_add_deny(struct net_policy *policy, const struct net_cidr *cidr);
int net_policy_add_allow(struct net_policy *policy, const struct net_cidr *cidr);
/* Lets the guest reach host loopback port although it is claimed: 0, -ENOSPC when full. */
int net_policy_grant_port(struct net_policy *policy, uint16_t port);

/* Reads a frame the guest sent (Ethernet, no virtio header). Never reads past len. */
void net_frame_parse(const uint8_t *frame, size_t len, struct net_frame_info *out);

/*
 * The verdict for a parsed frame at now_ms, updating state (flows, rate window, counters).
 * *judged_addr is set to the address the frame was judged by (for the log).
 */
enum net_verdict net_policy_judge(const struct net_policy *policy, struct net_policy_state *state,
				  const struct net_frame_info *info, uint64_t now_ms,
				  uint32_t *judged_addr);
const char *net_verdict_name(enum net_verdict verdict);
/*
 * A frame on its way to the guest: libslirp's SYN|ACK marks its connection past connecting;
 * its reset closes the flow it answers (before the SYN|ACK a failed connect, after it with
 * the device's own reset for certain); its ACK past the guest's FIN closes the guest's side;
 * its FIN closes a flow whose guest side is closed; an ICMP echo reply ends its request's
 * flow. Each is when libslirp lets the flow's host socket go, so its slot frees then.
 */
void net_policy_observe_rx(struct net_policy_state *state, const struct net_frame_info *info,
			   uint64_t now_ms);

/*
 * Builds a reset of a reclaimed connection as if the guest sent it (from 10.0.2.15, src_mac to
 * dst_mac) with sequence number seq. libslirp takes a reset whose sequence number is at or up
 * to 2^31 before the next one it expects, so the device sends two, seq and seq + 2^31, and one
 * of them closes the connection whatever the guest sent since. Returns NET_RST_FRAME_LEN, or
 * 0 when cap is short.
 */
size_t net_build_reclaim_rst(const struct net_reclaimed_flow *flow, uint32_t seq,
			     const uint8_t src_mac[NET_ETH_ADDR_LEN],
			     const uint8_t dst_mac[NET_ETH_ADDR_LEN], uint8_t *out, size_t cap);

/*
 * Builds the reset of a reclaimed idle connection the guest is told of (flow->tell_guest), as
 * if its remote end sent it (src_mac to dst_mac), numbered flow->guest_ack: the next number the
 * guest expects after a silence, which is the one number a reset must carry to end a
 * connection at once (RFC 5961; one elsewhere in its window only draws an acknowledgement,
 * which libslirp, holding no such connection any more, answers with a reset of that number).
 * Returns NET_RST_FRAME_LEN, or 0 when cap is short.
 */
size_t net_build_guest_rst(const struct net_reclaimed_flow *flow,
			   const uint8_t src_mac[NET_ETH_ADDR_LEN],
			   const uint8_t dst_mac[NET_ETH_ADDR_LEN], uint8_t *out, size_t cap);

/*
 * Builds the TCP reset (RST|ACK) answering the SYN in frame/info, as if sent by its
 * destination. Returns NET_RST_FRAME_LEN, or 0 when info is not a TCP frame or cap is short.
 */
size_t net_build_tcp_rst(const uint8_t *frame, const struct net_frame_info *info, uint8_t *out,
			 size_t cap);

/*
 * Rewrites a parsed UDP frame's destination (guest to host) or source (host to guest) address
 * and port in place, fixing the IPv4 checksum and clearing the UDP one (IPv4 allows that).
 */
void net_frame_set_udp_dst(uint8_t *frame, const struct net_frame_info *info, uint32_t addr,
			   uint16_t port);
void net_frame_set_udp_src(uint8_t *frame, const struct net_frame_info *info, uint32_t addr,
			   uint16_t port);

#endif
