/*
 * The user-mode network's egress policy and virtio-net device, without a VM.
 *
 * The first half drives the frame parser and policy directly with frames built here: every
 * length a guest can lie about is dropped as malformed, the deny list, allow list, virtual
 * addresses and DNS are judged by what they reach, the flow and rate caps refuse and
 * recover, a host port another voidbox process claims is refused unless granted, the injected
 * reset answers the SYN it refuses, and random bytes never crash the parser. The second half
 * drives the device through its registers with the fake driver: hostile chains and frames are
 * counted and dropped without breaking the device, a denied connect (a refused address, a
 * claimed port) comes back as a reset in the guest's receive queue, a published port is
 * claimed while its VM lives and reached by its own guest, and slirp itself answers an ARP
 * request for the gateway. Only that published-port connect reaches a host socket (the VM's
 * own forward on loopback); every other frame is refused by the policy or is ARP, which slirp
 * answers in-process.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/loopback_claim.h"
#include "devices/net.h"
#include "fake_guest.h"
#include "harness.h"
#include "loopback_port.h"

#define TEST_RX_QUEUE 0u
#define TEST_TX_QUEUE 1u
#define TEST_QUEUE_COUNT 2u
#define TEST_RX_GPA 0x200000u
#define TEST_TX_GPA 0x400000u
#define TEST_RX_BUFFER_LEN 2048u
#define TEST_RX_BUFFERS 8u
#define TEST_VIRTIO_HEADER_LEN 12u
#define TEST_WAIT_STEP_NS (1000 * 1000L)
#define TEST_WAIT_STEPS 5000 /* a bound on a worker's reply, not a timing assertion */
#define TEST_RANDOM_FRAMES 20000
#define TEST_GUEST_PORT 40000
#define TEST_IDLE_MS 100u /* a test's idle time for TCP flows */
#define TEST_SYN_SEQ 1001u /* the guest's next number after the SYN build_ip_frame writes */
#define TEST_FAR_SEQ 0x10000000u /* past any window ahead of a connection's next number */
#define TEST_GUEST_ACK 0x5eed1234u /* the number a guest segment acknowledges */
#define TEST_NOW_MS 1000000u
#define TEST_ETHERTYPE_IPV6 0x86dd
#define TEST_ARP_LEN 42u
#define TEST_ARP_OP_REQUEST 1
#define TEST_ARP_OP_REPLY 2

static const uint8_t test_guest_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
static const uint8_t test_gateway_mac[6] = { 0x52, 0x55, 0x0a, 0x00, 0x02, 0x02 };

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)get16(p) << 16) | get16(p + 2);
}

/* Ethernet + IPv4 (no options) + a TCP or UDP header and payload_len zero bytes. */
static size_t build_ip_frame(uint8_t *out, uint8_t proto, uint32_t dst, uint16_t dport,
			     uint8_t tcp_flags, size_t payload_len)
{
	size_t l4_len = proto == NET_IP_PROTO_TCP ? NET_TCP_MIN_HEADER_LEN : NET_UDP_HEADER_LEN;
	size_t total = NET_IPV4_MIN_HEADER_LEN + l4_len + payload_len;
	uint8_t *ip = out + NET_ETH_HEADER_LEN, *l4 = ip + NET_IPV4_MIN_HEADER_LEN;

	memset(out, 0, NET_ETH_HEADER_LEN + total);
	memcpy(out, test_gateway_mac, 6);
	memcpy(out + 6, test_guest_mac, 6);
	put16(out + 12, NET_ETHERTYPE_IPV4);
	ip[0] = 0x45;
	put16(ip + 2, (uint16_t)total);
	ip[8] = 64;
	ip[9] = proto;
	put32(ip + 12, NET_GUEST_ADDR);
	put32(ip + 16, dst);
	put16(l4, TEST_GUEST_PORT);
	put16(l4 + 2, dport);
	if (proto == NET_IP_PROTO_TCP) {
		put32(l4 + 4, 1000);
		l4[12] = 0x50;
		l4[13] = tcp_flags;
	} else if (proto == NET_IP_PROTO_UDP) {
		put16(l4 + 4, (uint16_t)(NET_UDP_HEADER_LEN + payload_len));
	}
	return NET_ETH_HEADER_LEN + total;
}

static enum net_verdict judge(const struct net_policy *policy, struct net_policy_state *state,
			      const uint8_t *frame, size_t len, uint64_t now_ms)
{
	struct net_frame_info info;

	net_frame_parse(frame, len, &info);
	return net_policy_judge(policy, state, &info, now_ms, NULL);
}

static struct net_policy_state *new_state(void)
{
	return calloc(1, sizeof(struct net_policy_state));
}

static void test_cidr_parse(void)
{
	struct net_cidr cidr;

	CHECK_INT_EQ(net_cidr_parse("10.1.2.3/8", &cidr), 0);
	CHECK(cidr.addr == NET_ADDR(10, 0, 0, 0) && cidr.prefix == 8);
	CHECK(net_cidr_contains(&cidr, NET_ADDR(10, 200, 1, 1)));
	CHECK(!net_cidr_contains(&cidr, NET_ADDR(11, 0, 0, 1)));
	CHECK_INT_EQ(net_cidr_parse("127.0.0.1", &cidr), 0);
	CHECK(cidr.prefix == 32);
	CHECK_INT_EQ(net_cidr_parse("0.0.0.0/0", &cidr), 0);
	CHECK(net_cidr_contains(&cidr, NET_ADDR(8, 8, 8, 8)));
	CHECK(net_cidr_parse("10.0.0.0/33", &cidr) < 0);
	CHECK(net_cidr_parse("10.0.0.0/", &cidr) < 0);
	CHECK(net_cidr_parse("10.0.0/8", &cidr) < 0);
	CHECK(net_cidr_parse("", &cidr) < 0);
	CHECK(net_cidr_parse("10.0.0.0/8x", &cidr) < 0);
	CHECK(net_cidr_parse("/8", &cidr) < 0);
}

static void test_publish_and_dns_server_parse(void)
{
	struct net_publish publish;
	uint32_t addr = 0;
	uint16_t port = 0;

	CHECK_INT_EQ(net_publish_parse("8080:80", &publish), 0);
	CHECK(publish.host_port == 8080 && publish.guest_port == 80);
	CHECK(net_publish_parse("0:80", &publish) < 0);
	CHECK(net_publish_parse("70000:80", &publish) < 0);
	CHECK(net_publish_parse("80", &publish) < 0);
	CHECK(net_publish_parse("80:", &publish) < 0);
	CHECK(net_publish_parse("-1:80", &publish) < 0);
	CHECK_INT_EQ(net_dns_server_parse("127.0.0.1:5353", &addr, &port), 0);
	CHECK(addr == NET_HOST_LOOPBACK_ADDR && port == 5353);
	CHECK(net_dns_server_parse("127.0.0.1", &addr, &port) < 0);
	CHECK(net_dns_server_parse("127.0.0.1/8:53", &addr, &port) < 0);
	CHECK(net_dns_server_parse("127.0.0.1:0", &addr, &port) < 0);
	CHECK(net_dns_server_parse("host:53", &addr, &port) < 0);
}

static void test_malformed_frames_dropped(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN + 64];
	size_t len;

	net_policy_init_default(&policy);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 80, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	/* every truncation of a valid frame */
	for (size_t cut = 0; cut < len; cut++)
		CHECK_INT_EQ(judge(&policy, state, frame, cut, TEST_NOW_MS),
			     NET_VERDICT_DROP_MALFORMED);
	CHECK_INT_EQ(judge(&policy, state, NULL, 0, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	CHECK_INT_EQ(judge(&policy, state, frame, NET_MAX_FRAME_LEN + 1, TEST_NOW_MS),
		     NET_VERDICT_DROP_MALFORMED);
	frame[NET_ETH_HEADER_LEN] = 0x44; /* IHL 4 words: shorter than the minimum */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	frame[NET_ETH_HEADER_LEN] = 0x4f; /* IHL 15 words: past the total length */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	frame[NET_ETH_HEADER_LEN] = 0x65; /* version 6 in an IPv4 ethertype */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 80, NET_TCP_SYN, 0);
	put16(frame + NET_ETH_HEADER_LEN + 2, 0xffff); /* total length past the frame */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 80, NET_TCP_SYN, 0);
	frame[NET_ETH_HEADER_LEN + 20 + 12] = 0xf0; /* TCP data offset past the packet */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_GATEWAY_ADDR, 53, 0, 4);
	put16(frame + NET_ETH_HEADER_LEN + 20 + 4, 200); /* UDP length past the packet */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	put16(frame + NET_ETH_HEADER_LEN + 20 + 4, 3); /* UDP length under its header */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_MALFORMED);
	CHECK(state->verdicts[NET_VERDICT_DROP_MALFORMED] >= len + 8);
	free(state);
}

static void test_unsupported_frames_dropped(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len;

	net_policy_init_default(&policy);
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_GATEWAY_ADDR, 9, 0, 8);
	put16(frame + 12, TEST_ETHERTYPE_IPV6);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_UNSUPPORTED);
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_GATEWAY_ADDR, 9, 0, 8);
	put16(frame + NET_ETH_HEADER_LEN + 6, 0x2000); /* more fragments */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_UNSUPPORTED);
	put16(frame + NET_ETH_HEADER_LEN + 6, 0x0010); /* a later fragment */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_UNSUPPORTED);
	len = build_ip_frame(frame, 47 /* GRE */, NET_GATEWAY_ADDR, 0, 0, 8);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_UNSUPPORTED);
	free(state);
}

static void test_addresses_judged_by_what_they_reach(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	struct net_cidr loopback, extra;
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len;

	net_policy_init_default(&policy);
	/* the default deny list: the metadata service's link-local range */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(169, 254, 169, 254), 80,
			     NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	/* a user deny entry */
	CHECK_INT_EQ(net_cidr_parse("192.0.2.0/24", &extra), 0);
	CHECK_INT_EQ(net_policy_add_deny(&policy, &extra), 0);
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_ADDR(192, 0, 2, 9), 9, 0, 4);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	/* an allow list of the host's loopback: the gateway passes, the world does not */
	CHECK_INT_EQ(net_cidr_parse("127.0.0.1/32", &loopback), 0);
	CHECK_INT_EQ(net_policy_add_allow(&policy, &loopback), 0);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 8080, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(93, 184, 216, 34), 80,
			     NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	len = build_ip_frame(frame, NET_IP_PROTO_ICMP, NET_ADDR(93, 184, 216, 34), 0, 0, 8);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	/* any other address of the virtual network reaches nothing */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(10, 0, 2, 99), 80, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	/* DNS: judged by the resolver, refused when forwarding is off */
	policy.resolver_addr = NET_HOST_LOOPBACK_ADDR;
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_DNS_ADDR, NET_DNS_PORT, 0, 12);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	policy.resolver_addr = NET_ADDR(8, 8, 8, 8);
	put16(frame + NET_ETH_HEADER_LEN + 20, TEST_GUEST_PORT + 1); /* a new flow */
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	policy.resolver_addr = NET_HOST_LOOPBACK_ADDR;
	policy.dns = false;
	put16(frame + NET_ETH_HEADER_LEN + 20, TEST_GUEST_PORT + 2);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	policy.dns = true;
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_DNS_ADDR, 80, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	/* segments of an existing connection are not judged: slirp opens nothing for them */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(93, 184, 216, 34), 80,
			     NET_TCP_ACK, 10);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	/* ARP is slirp's to answer */
	memset(frame, 0, TEST_ARP_LEN);
	put16(frame + 12, NET_ETHERTYPE_ARP);
	CHECK_INT_EQ(judge(&policy, state, frame, TEST_ARP_LEN, TEST_NOW_MS), NET_VERDICT_PASS);
	free(state);
}

#define TEST_CLAIMED_PORT 7100
#define TEST_OTHER_PORT 7101

/* The device asks loopback_claim_held; this stand-in claims TEST_CLAIMED_PORT alone. */
static bool claimed_port_only(void *opaque, uint16_t port)
{
	unsigned int *asked = opaque;

	(*asked)++;
	return port == TEST_CLAIMED_PORT;
}

static void test_claimed_ports_refused_unless_granted(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN];
	unsigned int asked = 0;
	size_t len;

	net_policy_init_default(&policy);
	state->port_claimed = claimed_port_only;
	state->port_claimed_opaque = &asked;
	/* a claimed port through the gateway: another sandbox's or the host's service */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, TEST_CLAIMED_PORT,
			     NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_CLAIMED);
	CHECK(state->verdicts[NET_VERDICT_DENY_CLAIMED] == 1);
	CHECK_INT_EQ(asked, 1);
	/* an unclaimed port of the host's loopback is reached as before */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, TEST_OTHER_PORT,
			     NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	/* a claim is on the host's loopback TCP port: not on UDP, not on a remote host's port */
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_GATEWAY_ADDR, TEST_CLAIMED_PORT, 0, 4);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(93, 184, 216, 34),
			     TEST_CLAIMED_PORT, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	/* the deny list is judged first: a denied gateway is not asked about */
	asked = 0;
	struct net_cidr loopback;

	CHECK_INT_EQ(net_cidr_parse("127.0.0.1/32", &loopback), 0);
	CHECK_INT_EQ(net_policy_add_deny(&policy, &loopback), 0);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, TEST_CLAIMED_PORT,
			     NET_TCP_SYN, 0);
	put16(frame + NET_ETH_HEADER_LEN + 20, TEST_GUEST_PORT + 1);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	CHECK_INT_EQ(asked, 0);
	/* granted to this VM (its own messaging listener or published port): reached */
	policy.deny_count--;
	CHECK_INT_EQ(net_policy_grant_port(&policy, TEST_CLAIMED_PORT), 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	CHECK_INT_EQ(asked, 0);
	/* the grant list is bounded */
	for (unsigned int i = 1; i < NET_MAX_GRANTED_PORTS; i++)
		CHECK_INT_EQ(net_policy_grant_port(&policy, (uint16_t)(TEST_OTHER_PORT + i)), 0);
	CHECK_INT_EQ(net_policy_grant_port(&policy, TEST_OTHER_PORT), -ENOSPC);
	free(state);
}

/*
 * Only the guest's own address may be a source: flows are keyed without one, so a SYN from
 * another source to a destination the guest already reaches would pass as that flow's
 * retransmission while libslirp opened a second host socket for it.
 */
static void test_spoofed_source_dropped(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len;

	net_policy_init_default(&policy);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 8080, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 1);
	put32(frame + NET_ETH_HEADER_LEN + 12, NET_ADDR(10, 0, 2, 16));
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_SPOOFED);
	/* segments of no new connection, datagrams and echoes alike */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 8080, NET_TCP_ACK, 10);
	put32(frame + NET_ETH_HEADER_LEN + 12, NET_ADDR(192, 0, 2, 1));
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_SPOOFED);
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_DNS_ADDR, NET_DNS_PORT, 0, 12);
	put32(frame + NET_ETH_HEADER_LEN + 12, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DROP_SPOOFED);
	CHECK_INT_EQ(state->active_flows, 1);
	CHECK(state->verdicts[NET_VERDICT_DROP_SPOOFED] == 3);
	free(state);
}

static void test_rate_cap_refuses_and_recovers(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 80, NET_TCP_SYN, 0);
	uint8_t *sport = frame + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN;

	net_policy_init_default(&policy);
	policy.max_new_per_sec = 3;
	for (uint16_t i = 0; i < 3; i++) {
		put16(sport, (uint16_t)(TEST_GUEST_PORT + i));
		CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS + i), NET_VERDICT_PASS);
	}
	put16(sport, TEST_GUEST_PORT + 3);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS + 10), NET_VERDICT_DENY_RATE);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS + 999), NET_VERDICT_DENY_RATE);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS + 1000), NET_VERDICT_PASS);
	CHECK(state->verdicts[NET_VERDICT_DENY_RATE] == 2);
	free(state);
}

/* The one's-complement sum over data is 0xffff when its checksum field is right. */
static uint16_t checksum_over(const uint8_t *data, size_t len, uint32_t sum)
{
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += get16(data + i);
	if (len & 1u)
		sum += (uint32_t)data[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffffu) + (sum >> 16);
	return (uint16_t)sum;
}

/* The same over a TCP segment of tcp_len bytes and its pseudo-header (from the IPv4 header ip). */
static uint16_t tcp_checksum_over(const uint8_t *ip, const uint8_t *tcp, size_t tcp_len)
{
	uint8_t pseudo[12];

	memcpy(pseudo, ip + 12, 8);
	pseudo[8] = 0;
	pseudo[9] = NET_IP_PROTO_TCP;
	put16(pseudo + 10, (uint16_t)tcp_len);
	return checksum_over(tcp, tcp_len, checksum_over(pseudo, sizeof(pseudo), 0));
}

/* Gives the TCP segment in frame (built by build_ip_frame) a right checksum. */
static void set_tcp_checksum(uint8_t *frame, size_t len)
{
	uint8_t *ip = frame + NET_ETH_HEADER_LEN, *tcp = ip + NET_IPV4_MIN_HEADER_LEN;
	size_t tcp_len = len - NET_ETH_HEADER_LEN - NET_IPV4_MIN_HEADER_LEN;

	put16(tcp + 16, 0);
	put16(tcp + 16, (uint16_t)~tcp_checksum_over(ip, tcp, tcp_len));
}

/* Gives the IPv4 header and TCP segment in frame right checksums, as libslirp checks both. */
static void set_checksums(uint8_t *frame, size_t len)
{
	uint8_t *ip = frame + NET_ETH_HEADER_LEN;

	put16(ip + 10, 0);
	put16(ip + 10, (uint16_t)~checksum_over(ip, NET_IPV4_MIN_HEADER_LEN, 0));
	set_tcp_checksum(frame, len);
}

/* A segment of the connection from TEST_GUEST_PORT + port_offset to the gateway, port 80. */
static enum net_verdict guest_segment(const struct net_policy *policy,
				      struct net_policy_state *state, uint16_t port_offset,
				      uint8_t flags, bool right_checksum, uint64_t now_ms)
{
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 80, flags, 0);

	put16(frame + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN,
	      (uint16_t)(TEST_GUEST_PORT + port_offset));
	if (right_checksum)
		set_tcp_checksum(frame, len);
	return judge(policy, state, frame, len, now_ms);
}

/*
 * The remote end's FIN (or reset, or ACK) on that connection, on its way to the guest; with
 * ACK set it acknowledges numbers up to ack (TEST_SYN_SEQ: the FIN guest_segment sends).
 */
static void remote_segment_acking(struct net_policy_state *state, uint16_t port_offset,
				  uint8_t flags, uint32_t ack)
{
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GUEST_ADDR, 0, flags, 0);
	uint8_t *ip = frame + NET_ETH_HEADER_LEN, *tcp = ip + NET_IPV4_MIN_HEADER_LEN;
	struct net_frame_info info;

	put32(ip + 12, NET_GATEWAY_ADDR);
	put16(tcp, 80);
	put16(tcp + 2, (uint16_t)(TEST_GUEST_PORT + port_offset));
	put32(tcp + 8, ack);
	net_frame_parse(frame, len, &info);
	net_policy_observe_rx(state, &info, TEST_NOW_MS);
}

static void remote_segment(struct net_policy_state *state, uint16_t port_offset, uint8_t flags)
{
	remote_segment_acking(state, port_offset, flags, TEST_SYN_SEQ);
}

/*
 * The cap on concurrent flows counts host sockets as libslirp holds them: a flow ends at a
 * reset either way, or once both ends have sent a FIN, never at a FIN or reset libslirp
 * would drop for its checksum; a connection in use never expires; a retransmitted SYN is no
 * new flow.
 */
static void test_flow_cap_refuses_and_recovers(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();

	net_policy_init_default(&policy);
	policy.max_flows = 2;
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 1, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 2, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_DENY_FLOWS);
	/* a retransmitted SYN is the same connection */
	CHECK_INT_EQ(guest_segment(&policy, state, 1, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	/* a FIN or reset with a wrong checksum (libslirp drops it) frees nothing */
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_FIN | NET_TCP_ACK, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_RST, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 2);
	/* the guest's FIN only half-closes: the host socket is still held */
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_FIN | NET_TCP_ACK, true, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 2, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_DENY_FLOWS);
	/* the remote end's FIN that has not acknowledged the guest's (libslirp dropped it) neither */
	remote_segment_acking(state, 0, NET_TCP_FIN | NET_TCP_ACK, TEST_SYN_SEQ - 1);
	CHECK_INT_EQ(state->active_flows, 2);
	/* once libslirp acknowledges the guest's FIN, both sides are closed */
	remote_segment(state, 0, NET_TCP_ACK);
	CHECK_INT_EQ(state->active_flows, 1);
	CHECK_INT_EQ(guest_segment(&policy, state, 2, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	/* the other order: the remote end's FIN first, then the guest's */
	remote_segment(state, 2, NET_TCP_FIN | NET_TCP_ACK);
	CHECK_INT_EQ(state->active_flows, 2);
	CHECK_INT_EQ(guest_segment(&policy, state, 2, NET_TCP_FIN | NET_TCP_ACK, true, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 2);
	remote_segment(state, 2, NET_TCP_ACK);
	CHECK_INT_EQ(state->active_flows, 1);
	/*
	 * a reset from the guest with a right checksum, before libslirp answered the SYN, ends
	 * nothing (libslirp drops every segment while it connects); after, it ends the flow and
	 * hands the connection to the device to reset for certain (libslirp may have dropped it)
	 */
	CHECK_INT_EQ(guest_segment(&policy, state, 3, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 3, NET_TCP_RST, true, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 2);
	remote_segment(state, 3, NET_TCP_SYN | NET_TCP_ACK);
	CHECK_INT_EQ(guest_segment(&policy, state, 3, NET_TCP_RST, true, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 1);
	CHECK_INT_EQ(state->reclaimed_count, 1);
	CHECK_INT_EQ(state->reclaimed[0].guest_port, TEST_GUEST_PORT + 3);
	CHECK(!state->reclaimed[0].tell_guest); /* the guest ended it itself */
	state->reclaimed_count = 0; /* as the device does once it has reset them */
	/* a reset from the remote end closes the flow it answers */
	CHECK_INT_EQ(guest_segment(&policy, state, 4, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	remote_segment(state, 4, NET_TCP_RST | NET_TCP_ACK);
	CHECK_INT_EQ(state->active_flows, 1);
	/* a connection in use keeps its flow past the idle time; an idle one is reclaimed at the cap */
	CHECK_INT_EQ(guest_segment(&policy, state, 5, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 5, NET_TCP_ACK, false,
				   TEST_NOW_MS + NET_TCP_FLOW_IDLE_MS - 1),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->reclaimed_count, 0);
	CHECK_INT_EQ(guest_segment(&policy, state, 6, NET_TCP_SYN, false,
				   TEST_NOW_MS + NET_TCP_FLOW_IDLE_MS + 1),
		     NET_VERDICT_PASS); /* the slot of port 1, idle since TEST_NOW_MS */
	/* which libslirp still holds: it is handed over to be reset, with a number of the guest's */
	CHECK_INT_EQ(state->reclaimed_count, 1);
	CHECK_INT_EQ(state->reclaimed[0].guest_port, TEST_GUEST_PORT + 1);
	CHECK(state->reclaimed[0].dst_addr == NET_GATEWAY_ADDR && state->reclaimed[0].dst_port == 80);
	CHECK_INT_EQ(state->reclaimed[0].guest_seq, TEST_SYN_SEQ);
	CHECK_INT_EQ(guest_segment(&policy, state, 7, NET_TCP_SYN, false,
				   TEST_NOW_MS + NET_TCP_FLOW_IDLE_MS + 1),
		     NET_VERDICT_DENY_FLOWS); /* port 5's flow is alive */
	CHECK_INT_EQ(state->reclaimed_count, 1);
	free(state);
}

/*
 * At the cap, the connection silent longest is reclaimed, a silent one only: libslirp keeps
 * an idle connection's host socket for ever, so an idle flow keeps counting until then; and no
 * more are reclaimed than the device has yet to reset.
 */
static void test_idle_connections_reclaimed_at_the_cap(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	const uint64_t later = TEST_NOW_MS + NET_TCP_FLOW_IDLE_MS + 1;

	net_policy_init_default(&policy);
	policy.max_flows = 2;
	policy.max_new_per_sec = 100;
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(guest_segment(&policy, state, 1, NET_TCP_SYN, false, TEST_NOW_MS + 10),
		     NET_VERDICT_PASS);
	/* idle, but below the cap: nothing is reclaimed, the flows still count */
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_ACK, false, later + 5),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 2);
	CHECK_INT_EQ(state->reclaimed_count, 0);
	/* at the cap: port 1 (silent since TEST_NOW_MS + 10) goes, port 0 was just heard from */
	CHECK_INT_EQ(guest_segment(&policy, state, 2, NET_TCP_SYN, false, later + 20),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->reclaimed_count, 1);
	CHECK_INT_EQ(state->reclaimed[0].guest_port, TEST_GUEST_PORT + 1);
	CHECK(!state->reclaimed[0].tell_guest); /* it acknowledged nothing: no number to reset */
	CHECK_INT_EQ(state->active_flows, 2);
	/* a device that has not reset them yet holds the reclaiming at NET_RECLAIMED_MAX */
	state->reclaimed_count = NET_RECLAIMED_MAX;
	CHECK_INT_EQ(guest_segment(&policy, state, 3, NET_TCP_SYN, false,
				   later + 2 * NET_TCP_FLOW_IDLE_MS),
		     NET_VERDICT_DENY_FLOWS);
	state->reclaimed_count = 0;
	CHECK_INT_EQ(guest_segment(&policy, state, 3, NET_TCP_SYN, false,
				   later + 2 * NET_TCP_FLOW_IDLE_MS),
		     NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 2);
	/* port 0, whose last segment acknowledged number 0: the guest is told, with that number */
	CHECK_INT_EQ(state->reclaimed_count, 1);
	CHECK_INT_EQ(state->reclaimed[0].guest_port, TEST_GUEST_PORT);
	CHECK(state->reclaimed[0].tell_guest);
	CHECK_INT_EQ(state->reclaimed[0].guest_ack, 0);
	free(state);
}

/*
 * libslirp's reset before it answered the SYN is a failed connect, which it has closed; one
 * after may answer a segment it refused on a connection it keeps, so the device resets that
 * for certain before the flow stops counting. When the device is behind, the flow counts on.
 */
static void test_remote_resets_by_connection_state(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();

	net_policy_init_default(&policy);
	CHECK_INT_EQ(guest_segment(&policy, state, 0, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	remote_segment(state, 0, NET_TCP_RST | NET_TCP_ACK); /* refused */
	CHECK_INT_EQ(state->active_flows, 0);
	CHECK_INT_EQ(state->reclaimed_count, 0);
	CHECK_INT_EQ(guest_segment(&policy, state, 1, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	remote_segment(state, 1, NET_TCP_SYN | NET_TCP_ACK);
	remote_segment(state, 1, NET_TCP_RST | NET_TCP_ACK);
	CHECK_INT_EQ(state->active_flows, 0);
	CHECK_INT_EQ(state->reclaimed_count, 1);
	CHECK_INT_EQ(state->reclaimed[0].guest_port, TEST_GUEST_PORT + 1);
	CHECK(!state->reclaimed[0].tell_guest); /* the remote's reset tells it */
	state->reclaimed_count = NET_RECLAIMED_MAX;
	CHECK_INT_EQ(guest_segment(&policy, state, 2, NET_TCP_SYN, false, TEST_NOW_MS),
		     NET_VERDICT_PASS);
	remote_segment(state, 2, NET_TCP_SYN | NET_TCP_ACK);
	remote_segment(state, 2, NET_TCP_RST | NET_TCP_ACK);
	CHECK_INT_EQ(state->active_flows, 1);
	free(state);
}

/*
 * A UDP flow counts as long as libslirp keeps its socket (240 s idle, 10 s for DNS, which the
 * policy keeps 30 s), and every ICMP echo request is a flow of its own until its reply.
 */
static void test_udp_and_echo_flows(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN], reply[NET_MAX_FRAME_LEN];
	uint8_t *l4 = frame + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN;
	struct net_frame_info info;
	size_t len;

	net_policy_init_default(&policy);
	policy.max_flows = 1;
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_GATEWAY_ADDR, 9999, 0, 4);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	put16(l4, TEST_GUEST_PORT + 1);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS + NET_DNS_FLOW_IDLE_MS + 1),
		     NET_VERDICT_DENY_FLOWS);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS + NET_UDP_FLOW_IDLE_MS + 1),
		     NET_VERDICT_PASS);
	free(state);

	/* ICMP echo: capped like any flow, freed by its reply */
	state = new_state();
	policy.max_flows = 2;
	policy.max_new_per_sec = 3;
	len = build_ip_frame(frame, NET_IP_PROTO_ICMP, NET_GATEWAY_ADDR, 0, 0, 8);
	l4[0] = NET_ICMP_ECHO_REQUEST;
	for (uint16_t seq = 1; seq <= 2; seq++) {
		put16(l4 + 6, seq);
		CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	}
	put16(l4 + 6, 3);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_FLOWS);
	/* the reply to sequence 1, from the host the request went to */
	memcpy(reply, frame, len);
	put32(reply + NET_ETH_HEADER_LEN + 12, NET_GATEWAY_ADDR);
	put32(reply + NET_ETH_HEADER_LEN + 16, NET_GUEST_ADDR);
	reply[NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN] = NET_ICMP_ECHO_REPLY;
	put16(reply + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN + 6, 1);
	net_frame_parse(reply, len, &info);
	net_policy_observe_rx(state, &info, TEST_NOW_MS);
	CHECK_INT_EQ(state->active_flows, 1);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	/* a flood of requests meets the rate cap as connections do */
	put16(l4 + 6, 4);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_RATE);
	/* other ICMP messages open nothing in libslirp and pass uncounted */
	l4[0] = NET_ICMP_ECHO_REPLY;
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	CHECK_INT_EQ(state->active_flows, 2);
	free(state);
}

/* Each of addrs is refused for its address, a TCP connect and a UDP datagram to port alike. */
static void check_addresses_refused(const struct net_policy *policy, struct net_policy_state *state,
				    const uint32_t *addrs, size_t count, uint16_t port)
{
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len;

	for (size_t i = 0; i < count; i++) {
		len = build_ip_frame(frame, NET_IP_PROTO_TCP, addrs[i], port, NET_TCP_SYN, 0);
		CHECK_INT_EQ(judge(policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
		len = build_ip_frame(frame, NET_IP_PROTO_UDP, addrs[i], port, 0, 4);
		CHECK_INT_EQ(judge(policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	}
}

/*
 * Addresses that name no single remote host reach nothing: libslirp turns the broadcast
 * address into the host's loopback and the host's stack takes 0.0.0.0 for itself, so either
 * would walk around a deny list of the loopback; multicast has no place in a sandbox's egress.
 * Nor does the host's loopback network given as a destination: past a deny list of 127.0.0.1
 * alone, 127.0.0.2 would reach what the host serves on 0.0.0.0 (and 127.0.0.53 its resolver).
 */
static void test_addresses_of_no_single_host_refused(void)
{
	static const uint32_t nowhere[] = { NET_ADDR(255, 255, 255, 255), NET_ADDR(0, 0, 0, 0),
					     NET_ADDR(0, 1, 2, 3), NET_ADDR(224, 0, 0, 1),
					     NET_ADDR(239, 255, 255, 250), NET_ADDR(240, 0, 0, 1) };
	static const uint32_t host_itself[] = { NET_ADDR(127, 0, 0, 1), NET_ADDR(127, 0, 0, 2),
						NET_ADDR(127, 0, 0, 53), NET_ADDR(127, 255, 255, 254) };
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	struct net_cidr loopback;
	uint8_t frame[NET_MAX_FRAME_LEN];
	size_t len;

	net_policy_init_default(&policy);
	CHECK_INT_EQ(net_cidr_parse("127.0.0.0/8", &loopback), 0);
	CHECK_INT_EQ(net_policy_add_deny(&policy, &loopback), 0);
	check_addresses_refused(&policy, state, nowhere, sizeof(nowhere) / sizeof(nowhere[0]),
				8080);
	/* an ordinary public address still passes a deny list of the loopback */
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(192, 0, 2, 1), 80, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	free(state);

	/* with only 127.0.0.1 denied, no other loopback address reaches the host either */
	state = new_state();
	net_policy_init_default(&policy);
	CHECK_INT_EQ(net_cidr_parse("127.0.0.1/32", &loopback), 0);
	CHECK_INT_EQ(net_policy_add_deny(&policy, &loopback), 0);
	check_addresses_refused(&policy, state, host_itself,
				sizeof(host_itself) / sizeof(host_itself[0]), 53);
	/* and without any list, the loopback is still the gateway's alone */
	net_policy_init_default(&policy);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(127, 0, 0, 2), 8080, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_DENY_ADDRESS);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 8080, NET_TCP_SYN, 0);
	CHECK_INT_EQ(judge(&policy, state, frame, len, TEST_NOW_MS), NET_VERDICT_PASS);
	free(state);
}

static void test_reset_answers_the_syn(void)
{
	uint8_t frame[NET_MAX_FRAME_LEN], rst[NET_RST_FRAME_LEN];
	struct net_frame_info info, reply;
	size_t len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(169, 254, 169, 254), 80,
				    NET_TCP_SYN, 0);
	const uint8_t *ip = rst + NET_ETH_HEADER_LEN, *tcp = ip + NET_IPV4_MIN_HEADER_LEN;

	net_frame_parse(frame, len, &info);
	CHECK_INT_EQ(net_build_tcp_rst(frame, &info, rst, sizeof(rst) - 1), 0);
	CHECK_INT_EQ(net_build_tcp_rst(frame, &info, rst, sizeof(rst)), NET_RST_FRAME_LEN);
	CHECK(memcmp(rst, test_guest_mac, 6) == 0);
	net_frame_parse(rst, sizeof(rst), &reply);
	CHECK_INT_EQ(reply.kind, NET_FRAME_TCP);
	CHECK(reply.src_addr == NET_ADDR(169, 254, 169, 254) && reply.dst_addr == NET_GUEST_ADDR);
	CHECK(reply.src_port == 80 && reply.dst_port == TEST_GUEST_PORT);
	CHECK(reply.tcp_flags == (NET_TCP_RST | NET_TCP_ACK));
	CHECK(get32(tcp + 8) == 1001); /* acknowledges the SYN */
	CHECK_INT_EQ(checksum_over(ip, NET_IPV4_MIN_HEADER_LEN, 0), 0xffff);
	CHECK_INT_EQ(tcp_checksum_over(ip, tcp, NET_TCP_MIN_HEADER_LEN), 0xffff);
	len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_GATEWAY_ADDR, 53, 0, 4);
	net_frame_parse(frame, len, &info);
	CHECK_INT_EQ(net_build_tcp_rst(frame, &info, rst, sizeof(rst)), 0);
}

static void test_udp_rewrite(void)
{
	uint8_t frame[NET_MAX_FRAME_LEN];
	struct net_frame_info info, after;
	size_t len = build_ip_frame(frame, NET_IP_PROTO_UDP, NET_DNS_ADDR, NET_DNS_PORT, 0, 12);

	net_frame_parse(frame, len, &info);
	net_frame_set_udp_dst(frame, &info, NET_GATEWAY_ADDR, 5353);
	net_frame_parse(frame, len, &after);
	CHECK(after.dst_addr == NET_GATEWAY_ADDR && after.dst_port == 5353);
	CHECK_INT_EQ(checksum_over(frame + NET_ETH_HEADER_LEN, NET_IPV4_MIN_HEADER_LEN, 0), 0xffff);
	CHECK_INT_EQ(get16(frame + info.l4_offset + 6), 0);
	net_frame_set_udp_src(frame, &after, NET_DNS_ADDR, NET_DNS_PORT);
	net_frame_parse(frame, len, &after);
	CHECK(after.src_addr == NET_DNS_ADDR && after.src_port == NET_DNS_PORT);
	CHECK_INT_EQ(checksum_over(frame + NET_ETH_HEADER_LEN, NET_IPV4_MIN_HEADER_LEN, 0), 0xffff);
}

/* Random bytes, and random mutations of a valid frame, only ever get a verdict. */
static void test_random_frames_never_crash(void)
{
	struct net_policy policy;
	struct net_policy_state *state = new_state();
	uint8_t frame[NET_MAX_FRAME_LEN], rst[NET_RST_FRAME_LEN];
	unsigned int seed = 12345;

	net_policy_init_default(&policy);
	for (int i = 0; i < TEST_RANDOM_FRAMES; i++) {
		size_t len = (size_t)rand_r(&seed) % sizeof(frame);
		struct net_frame_info info;
		enum net_verdict verdict;

		if (i % 2) {
			for (size_t j = 0; j < len; j++)
				frame[j] = (uint8_t)rand_r(&seed);
		} else {
			size_t valid = build_ip_frame(frame, i % 4 ? NET_IP_PROTO_TCP
								   : NET_IP_PROTO_UDP,
						      NET_GATEWAY_ADDR, 80, NET_TCP_SYN, 16);

			len = valid;
			frame[(size_t)rand_r(&seed) % valid] = (uint8_t)rand_r(&seed);
			len -= (size_t)rand_r(&seed) % 3;
		}
		net_frame_parse(frame, len, &info);
		verdict = net_policy_judge(&policy, state, &info, TEST_NOW_MS + (uint64_t)i, NULL);
		CHECK((unsigned int)verdict < NET_VERDICT_COUNT);
		if (info.kind == NET_FRAME_TCP)
			CHECK_INT_EQ(net_build_tcp_rst(frame, &info, rst, sizeof(rst)),
				     NET_RST_FRAME_LEN);
		if (info.kind != NET_FRAME_MALFORMED && info.kind != NET_FRAME_ARP &&
		    info.kind != NET_FRAME_UNSUPPORTED)
			CHECK(info.l4_offset <= len);
	}
	free(state);
}

/* ---- the device, through its registers ---- */

struct net_fixture {
	struct fake_guest guest;
	struct net_device *dev;
	uint16_t tx_next;
};

static int fixture_init(struct net_fixture *f, const struct net_config *cfg)
{
	char err[256];
	uint32_t status;

	memset(f, 0, sizeof(*f));
	if (fake_guest_init(&f->guest))
		return -1;
	f->dev = net_device_create(cfg, &f->guest.mem, fake_guest_irq(&f->guest), err,
				   sizeof(err));
	if (!f->dev) {
		fprintf(stderr, "net_device_create: %s\n", err);
		return -1;
	}
	status = fake_guest_setup(&f->guest, net_device_transport(f->dev), TEST_QUEUE_COUNT,
				  ~0ull);
	if (!(status & VIRTIO_STATUS_DRIVER_OK))
		return -1;
	for (uint16_t i = 0; i < TEST_RX_BUFFERS; i++) {
		fake_guest_set_desc(&f->guest, TEST_RX_QUEUE, i,
				    TEST_RX_GPA + (uint64_t)i * TEST_RX_BUFFER_LEN,
				    TEST_RX_BUFFER_LEN, VIRTQ_DESC_F_WRITE, 0);
		fake_guest_publish(&f->guest, TEST_RX_QUEUE, i);
	}
	fake_guest_notify(&f->guest, TEST_RX_QUEUE);
	return 0;
}

static void fixture_free(struct net_fixture *f)
{
	net_device_destroy(f->dev);
	fake_guest_free(&f->guest);
}

/* Sends one chain of a single readable buffer holding bytes (header included). */
static void transmit_raw(struct net_fixture *f, const uint8_t *bytes, uint32_t len)
{
	uint16_t index = f->tx_next++ % FAKE_GUEST_QUEUE_SIZE;
	uint64_t gpa = TEST_TX_GPA + (uint64_t)index * 4096u;

	if (len)
		memcpy(fake_guest_host(&f->guest, gpa), bytes, len);
	fake_guest_set_desc(&f->guest, TEST_TX_QUEUE, index, gpa, len, 0, 0);
	fake_guest_publish(&f->guest, TEST_TX_QUEUE, index);
	fake_guest_notify(&f->guest, TEST_TX_QUEUE);
}

static void transmit_frame(struct net_fixture *f, const uint8_t *frame, size_t len)
{
	uint8_t chain[TEST_VIRTIO_HEADER_LEN + NET_MAX_FRAME_LEN] = { 0 };

	memcpy(chain + TEST_VIRTIO_HEADER_LEN, frame, len);
	transmit_raw(f, chain, (uint32_t)(TEST_VIRTIO_HEADER_LEN + len));
}

static bool wait_used(struct net_fixture *f, unsigned int queue, uint32_t *id, uint32_t *len)
{
	struct timespec step = { .tv_sec = 0, .tv_nsec = TEST_WAIT_STEP_NS };

	for (int i = 0; i < TEST_WAIT_STEPS; i++) {
		if (fake_guest_pop_used(&f->guest, queue, id, len))
			return true;
		nanosleep(&step, NULL);
	}
	return false;
}

static void test_device_hostile_chains_counted(void)
{
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	uint8_t big[TEST_VIRTIO_HEADER_LEN + NET_MAX_FRAME_LEN + 100] = { 0 };
	uint8_t frame[NET_MAX_FRAME_LEN];
	uint32_t id, len;

	net_policy_init_default(&cfg.policy);
	CHECK_INT_EQ(fixture_init(&f, &cfg), 0);
	transmit_raw(&f, big, 4);			/* shorter than the virtio header */
	CHECK(wait_used(&f, TEST_TX_QUEUE, &id, &len));
	transmit_raw(&f, big, sizeof(big));		/* longer than any frame */
	CHECK(wait_used(&f, TEST_TX_QUEUE, &id, &len));
	transmit_raw(&f, big, TEST_VIRTIO_HEADER_LEN + 20); /* zeros: ethertype 0 */
	CHECK(wait_used(&f, TEST_TX_QUEUE, &id, &len));
	len = (uint32_t)build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, 80,
				       NET_TCP_SYN, 0);
	put16(frame + NET_ETH_HEADER_LEN + 2, 0xffff);
	transmit_frame(&f, frame, len);			/* IPv4 length past the frame */
	CHECK(wait_used(&f, TEST_TX_QUEUE, &id, &len));
	net_device_stats(f.dev, &stats);
	CHECK(stats.verdicts[NET_VERDICT_DROP_MALFORMED] == 3);
	CHECK(stats.verdicts[NET_VERDICT_DROP_UNSUPPORTED] == 1);
	CHECK(stats.tx_frames == 0);
	CHECK(!(virtio_mmio_read32(net_device_transport(f.dev), VIRTIO_MMIO_STATUS) &
		VIRTIO_STATUS_DEVICE_NEEDS_RESET));
	fixture_free(&f);
}

static void test_device_denied_connect_gets_reset(void)
{
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	struct net_frame_info reply;
	uint8_t frame[NET_MAX_FRAME_LEN];
	const uint8_t *rx;
	uint32_t id = 0, len = 0;
	size_t frame_len;

	net_policy_init_default(&cfg.policy);
	CHECK_INT_EQ(fixture_init(&f, &cfg), 0);
	frame_len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_ADDR(169, 254, 169, 254), 80,
				   NET_TCP_SYN, 0);
	transmit_frame(&f, frame, frame_len);
	CHECK(wait_used(&f, TEST_RX_QUEUE, &id, &len));
	CHECK_INT_EQ(len, TEST_VIRTIO_HEADER_LEN + NET_RST_FRAME_LEN);
	rx = fake_guest_host(&f.guest, TEST_RX_GPA + (uint64_t)id * TEST_RX_BUFFER_LEN);
	CHECK_INT_EQ(rx[10] | (rx[11] << 8), 1); /* num_buffers, little-endian */
	net_frame_parse(rx + TEST_VIRTIO_HEADER_LEN, NET_RST_FRAME_LEN, &reply);
	CHECK(reply.kind == NET_FRAME_TCP && (reply.tcp_flags & NET_TCP_RST));
	CHECK(reply.dst_port == TEST_GUEST_PORT && reply.src_port == 80);
	net_device_stats(f.dev, &stats);
	CHECK(stats.resets_injected == 1);
	CHECK(stats.verdicts[NET_VERDICT_DENY_ADDRESS] == 1);
	CHECK(stats.tx_frames == 0);
	CHECK(stats.rx_frames == 1);
	fixture_free(&f);
}

/*
 * A TCP socket bound to a free port on the host's loopback (not listening), which the caller
 * holds while it claims the port, as a service would; -1 on failure.
 */
static int hold_loopback_port(uint16_t *port)
{
	return loopback_port_bind(SOCK_STREAM, port);
}

/* Waits until the device has judged `frames` frames (the queue's used entry comes first). */
static void wait_judged(struct net_fixture *f, uint64_t frames, struct net_device_stats *stats)
{
	struct timespec step = { .tv_sec = 0, .tv_nsec = TEST_WAIT_STEP_NS };

	for (int i = 0; i < TEST_WAIT_STEPS; i++) {
		uint64_t judged = 0;

		net_device_stats(f->dev, stats);
		for (unsigned int v = 0; v < NET_VERDICT_COUNT; v++)
			judged += stats->verdicts[v];
		if (judged >= frames)
			return;
		nanosleep(&step, NULL);
	}
}

/* A SYN to a port another process claimed is answered with a reset, as a denied address is. */
static void test_device_claimed_port_gets_reset(void)
{
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	struct net_frame_info reply;
	uint8_t frame[NET_MAX_FRAME_LEN];
	uint16_t port = 0;
	int held = hold_loopback_port(&port);
	int claim = held >= 0 ? loopback_claim_port(port) : -1;
	uint32_t id = 0, len = 0;

	if (claim < 0)
		harness_fail_setup("cannot claim a free loopback port");
	net_policy_init_default(&cfg.policy);
	CHECK_INT_EQ(fixture_init(&f, &cfg), 0);
	transmit_frame(&f, frame,
		       build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_SYN, 0));
	CHECK(wait_used(&f, TEST_RX_QUEUE, &id, &len));
	CHECK_INT_EQ(len, TEST_VIRTIO_HEADER_LEN + NET_RST_FRAME_LEN);
	net_frame_parse(fake_guest_host(&f.guest, TEST_RX_GPA + (uint64_t)id * TEST_RX_BUFFER_LEN) +
				TEST_VIRTIO_HEADER_LEN,
			NET_RST_FRAME_LEN, &reply);
	CHECK(reply.kind == NET_FRAME_TCP && (reply.tcp_flags & NET_TCP_RST));
	CHECK(reply.src_port == port);
	net_device_stats(f.dev, &stats);
	CHECK(stats.verdicts[NET_VERDICT_DENY_CLAIMED] == 1);
	CHECK(stats.tx_frames == 0);
	fixture_free(&f);
	close(claim);
	close(held);
}

/* A VM's published host port is claimed while the VM lives, and reached by its own guest. */
static void test_device_published_port_claimed(void)
{
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	uint8_t frame[NET_MAX_FRAME_LEN];
	uint32_t id = 0, len = 0;
	uint16_t port = 0;
	int probe = hold_loopback_port(&port); /* a free port, let go for slirp to listen on */
	int asker = loopback_claim_asker_open();

	if (probe >= 0)
		close(probe);
	if (probe < 0 || asker < 0)
		harness_fail_setup("no free loopback port or no claim asker");
	net_policy_init_default(&cfg.policy);
	cfg.publish[0] = (struct net_publish){ .host_port = port, .guest_port = 8080 };
	cfg.publish_count = 1;

	CHECK(!loopback_claim_held(asker, port));
	CHECK_INT_EQ(fixture_init(&f, &cfg), 0);
	CHECK(loopback_claim_held(asker, port));
	/* the device's own claim does not count against its guest: the SYN goes to slirp */
	transmit_frame(&f, frame,
		       build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_SYN, 0));
	CHECK(wait_used(&f, TEST_TX_QUEUE, &id, &len));
	wait_judged(&f, 1, &stats);
	CHECK(stats.verdicts[NET_VERDICT_PASS] == 1);
	CHECK(stats.verdicts[NET_VERDICT_DENY_CLAIMED] == 0);
	CHECK(stats.resets_injected == 0);
	fixture_free(&f);
	CHECK(!loopback_claim_held(asker, port));
	close(asker);
}

/* A connection accepted on listener within the wait bound; -1 when none came. */
static int accept_within_bound(int listener)
{
	struct pollfd pfd = { .fd = listener, .events = POLLIN };

	if (poll(&pfd, 1, TEST_WAIT_STEPS) <= 0)
		return -1;
	return accept4(listener, NULL, NULL, SOCK_CLOEXEC);
}

/* A device allowing one flow (idle after TEST_IDLE_MS) and a listening server of the test's. */
static void start_one_flow_device(struct net_fixture *f, struct net_config *cfg, int listener)
{
	if (listener < 0 || listen(listener, 4) < 0)
		harness_fail_setup("a loopback server");
	net_policy_init_default(&cfg->policy);
	cfg->policy.max_flows = 1;
	cfg->policy.tcp_idle_ms = TEST_IDLE_MS;
	CHECK_INT_EQ(fixture_init(f, cfg), 0);
}

/* Ends start_one_flow_device's test: the device, the server and its two connections. */
static void stop_one_flow_device(struct net_fixture *f, int listener, int first, int second)
{
	fixture_free(f);
	if (first >= 0)
		close(first);
	if (second >= 0)
		close(second);
	close(listener);
}

/* The server's side of a connection libslirp closed sees it end: EOF or a reset. */
static void check_server_side_ended(int conn)
{
	struct pollfd ended = { .fd = conn, .events = POLLIN };
	char byte;

	CHECK(conn >= 0 && poll(&ended, 1, TEST_WAIT_STEPS) == 1);
	CHECK(conn >= 0 && recv(conn, &byte, 1, MSG_DONTWAIT) <= 0);
}

static bool wait_guest_tcp(struct net_fixture *f, uint8_t flags, struct net_frame_info *info);

/*
 * With one flow allowed, a second connection takes the slot of the first once that has been
 * silent past the idle time: the device resets it in libslirp, which closes its host socket,
 * so the server sees it end, and in the guest, with the number the guest last acknowledged.
 * Two connections to a server of this test's own on loopback.
 */
static void test_device_idle_connection_reclaimed(void)
{
	struct net_frame_info told;
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	struct timespec idle = { .tv_sec = 0, .tv_nsec = 2 * TEST_IDLE_MS * 1000L * 1000L };
	uint8_t frame[NET_MAX_FRAME_LEN], ack[NET_MAX_FRAME_LEN];
	uint16_t port = 0;
	int listener = hold_loopback_port(&port), first = -1, second = -1;
	size_t len, ack_len;

	start_one_flow_device(&f, &cfg, listener);
	len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_SYN, 0);
	set_checksums(frame, len);
	transmit_frame(&f, frame, len);
	first = accept_within_bound(listener);
	CHECK(first >= 0);
	/*
	 * a segment libslirp drops (its checksum is wrong) with a number far from the connection's:
	 * the policy keeps it as the guest's latest, and the second of the two resets still lands
	 */
	ack_len = build_ip_frame(ack, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_ACK, 0);
	put32(ack + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN + 4, TEST_SYN_SEQ + TEST_FAR_SEQ);
	put32(ack + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN + 8, TEST_GUEST_ACK);
	transmit_frame(&f, ack, ack_len);
	wait_judged(&f, 2, &stats); /* the idle time counts from the segment's judging */
	nanosleep(&idle, NULL);
	put16(frame + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN, TEST_GUEST_PORT + 1);
	set_checksums(frame, len);
	transmit_frame(&f, frame, len);
	second = accept_within_bound(listener);
	CHECK(second >= 0);
	check_server_side_ended(first);
	wait_judged(&f, 3, &stats);
	CHECK(stats.verdicts[NET_VERDICT_PASS] == 3);
	CHECK(stats.flows_reclaimed == 1);
	CHECK(stats.resets_injected == 1);
	/* the guest hears its first connection reset, from the server's end, at its next number */
	CHECK(wait_guest_tcp(&f, NET_TCP_RST, &told));
	CHECK(told.src_addr == NET_GATEWAY_ADDR && told.src_port == port);
	CHECK(told.dst_addr == NET_GUEST_ADDR && told.dst_port == TEST_GUEST_PORT);
	CHECK_INT_EQ(told.tcp_seq, TEST_GUEST_ACK);
	CHECK(told.tcp_checksum_ok);
	stop_one_flow_device(&f, listener, first, second);
}

/* An ARP request for the gateway goes to slirp, which answers with the gateway's MAC. */
/* Waits for a TCP segment to the guest with all of flags, into *info; false when none came. */
static bool wait_guest_tcp(struct net_fixture *f, uint8_t flags, struct net_frame_info *info)
{
	uint32_t id = 0, len = 0;

	while (wait_used(f, TEST_RX_QUEUE, &id, &len)) {
		if (len <= TEST_VIRTIO_HEADER_LEN)
			continue;
		net_frame_parse(fake_guest_host(&f->guest, TEST_RX_GPA + (uint64_t)id *
								      TEST_RX_BUFFER_LEN) +
					TEST_VIRTIO_HEADER_LEN,
				len - TEST_VIRTIO_HEADER_LEN, info);
		if (info->kind == NET_FRAME_TCP && (info->tcp_flags & flags) == flags)
			return true;
	}
	return false;
}

static void transmit_arp_request(struct net_fixture *f);

/*
 * The guest's SYN to the test's server on port, after an ARP request so libslirp can answer
 * it: the server's side of the connection (-1 if none came), the SYN in frame/len for the
 * caller to send again from another port, libslirp's SYN|ACK in *synack.
 */
static int connect_answered(struct net_fixture *f, int listener, uint16_t port, uint8_t *frame,
			    size_t *len, struct net_frame_info *synack)
{
	int conn;

	transmit_arp_request(f);
	*len = build_ip_frame(frame, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_SYN, 0);
	set_checksums(frame, *len);
	transmit_frame(f, frame, *len);
	conn = accept_within_bound(listener);
	CHECK(conn >= 0);
	CHECK(wait_guest_tcp(f, NET_TCP_SYN | NET_TCP_ACK, synack));
	return conn;
}

/*
 * A reset the guest numbers outside libslirp's window is dropped by libslirp, which keeps the
 * connection. The policy stops counting it only once the device has reset it for certain, so
 * the server sees it end before another connection takes its slot (the cap is one).
 */
static void test_device_dropped_guest_reset_still_closes(void)
{
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	uint8_t frame[NET_MAX_FRAME_LEN], rst[NET_MAX_FRAME_LEN];
	struct net_frame_info synack;
	uint16_t port = 0;
	int listener = hold_loopback_port(&port), first = -1, second = -1;
	size_t len, rst_len;

	start_one_flow_device(&f, &cfg, listener);
	first = connect_answered(&f, listener, port, frame, &len, &synack);
	rst_len = build_ip_frame(rst, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_RST, 0);
	put32(rst + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN + 4, TEST_SYN_SEQ + TEST_FAR_SEQ);
	set_checksums(rst, rst_len);
	transmit_frame(&f, rst, rst_len);
	check_server_side_ended(first);
	wait_judged(&f, 3, &stats);
	CHECK(stats.flows_reclaimed == 1);
	put16(frame + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN, TEST_GUEST_PORT + 1);
	set_checksums(frame, len);
	transmit_frame(&f, frame, len);
	second = accept_within_bound(listener);
	CHECK(second >= 0);
	stop_one_flow_device(&f, listener, first, second);
}

/*
 * A FIN the guest numbers outside libslirp's window is dropped by libslirp, which keeps the
 * connection even after the server's side closed: the flow counts on (the cap is one, so the
 * next connection is refused) until libslirp acknowledges a FIN of the guest's.
 */
static void test_device_dropped_guest_fin_keeps_counting(void)
{
	struct net_config cfg = { 0 };
	struct net_fixture f;
	struct net_device_stats stats;
	struct net_frame_info synack, fin_info;
	uint8_t frame[NET_MAX_FRAME_LEN], seg[NET_MAX_FRAME_LEN];
	uint16_t port = 0;
	int listener = hold_loopback_port(&port), first = -1;
	uint8_t *tcp = seg + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN;
	size_t len, seg_len;

	if (listener < 0 || listen(listener, 4) < 0)
		harness_fail_setup("a loopback server");
	net_policy_init_default(&cfg.policy);
	cfg.policy.max_flows = 1; /* and the default idle time: nothing is reclaimed here */
	CHECK_INT_EQ(fixture_init(&f, &cfg), 0);
	first = connect_answered(&f, listener, port, frame, &len, &synack);
	/* the handshake's last step, then a FIN numbered far outside the window */
	seg_len = build_ip_frame(seg, NET_IP_PROTO_TCP, NET_GATEWAY_ADDR, port, NET_TCP_ACK, 0);
	put32(tcp + 4, TEST_SYN_SEQ);
	put32(tcp + 8, synack.tcp_seq + 1);
	set_checksums(seg, seg_len);
	transmit_frame(&f, seg, seg_len);
	put32(tcp + 4, TEST_SYN_SEQ + TEST_FAR_SEQ);
	tcp[13] = NET_TCP_FIN | NET_TCP_ACK;
	set_checksums(seg, seg_len);
	transmit_frame(&f, seg, seg_len);
	/* the server closes its side: libslirp passes the FIN on and keeps the connection */
	if (first >= 0)
		close(first);
	CHECK(wait_guest_tcp(&f, NET_TCP_FIN, &fin_info));
	put16(frame + NET_ETH_HEADER_LEN + NET_IPV4_MIN_HEADER_LEN, TEST_GUEST_PORT + 1);
	set_checksums(frame, len);
	transmit_frame(&f, frame, len);
	wait_judged(&f, 5, &stats); /* the ARP request, SYN, ACK, FIN and the second SYN */
	CHECK(stats.verdicts[NET_VERDICT_DENY_FLOWS] == 1);
	fixture_free(&f);
	close(listener);
}

/* The guest asks for the gateway's address (which also tells slirp the guest's). */
static void transmit_arp_request(struct net_fixture *f)
{
	uint8_t arp[TEST_ARP_LEN] = { 0 };

	memset(arp, 0xff, 6);
	memcpy(arp + 6, test_guest_mac, 6);
	put16(arp + 12, NET_ETHERTYPE_ARP);
	put16(arp + 14, 1);	 /* Ethernet */
	put16(arp + 16, 0x0800); /* IPv4 */
	arp[18] = 6;
	arp[19] = 4;
	put16(arp + 20, TEST_ARP_OP_REQUEST);
	memcpy(arp + 22, test_guest_mac, 6);
	put32(arp + 28, NET_GUEST_ADDR);
	put32(arp + 38, NET_GATEWAY_ADDR);
	transmit_frame(f, arp, sizeof(arp));
}

static void check_slirp_answers_arp(bool confine_worker)
{
	struct net_config cfg = { .confine_worker = confine_worker };
	struct net_fixture f;
	const uint8_t *rx;
	uint32_t id = 0, len = 0;

	net_policy_init_default(&cfg.policy);
	CHECK_INT_EQ(fixture_init(&f, &cfg), 0);
	transmit_arp_request(&f);
	CHECK(wait_used(&f, TEST_RX_QUEUE, &id, &len));
	CHECK(len >= TEST_VIRTIO_HEADER_LEN + TEST_ARP_LEN);
	rx = fake_guest_host(&f.guest, TEST_RX_GPA + (uint64_t)id * TEST_RX_BUFFER_LEN) +
	     TEST_VIRTIO_HEADER_LEN;
	CHECK_INT_EQ(get16(rx + 12), NET_ETHERTYPE_ARP);
	CHECK_INT_EQ(get16(rx + 20), TEST_ARP_OP_REPLY);
	CHECK(get32(rx + 28) == NET_GATEWAY_ADDR);
	CHECK(memcmp(rx, test_guest_mac, 6) == 0);
	fixture_free(&f);
}

static void test_device_slirp_answers_arp(void)
{
	check_slirp_answers_arp(false);
}

/*
 * The same with the worker under its seccomp filter and Landlock, as in a VM: slirp's loop
 * runs on (valgrind cannot run filtered threads; there it runs unfiltered).
 */
static void test_device_confined_worker_answers_arp(void)
{
	check_slirp_answers_arp(!HARNESS_UNDER_VALGRIND);
}

int main(void)
{
	RUN_TEST(test_cidr_parse);
	RUN_TEST(test_publish_and_dns_server_parse);
	RUN_TEST(test_malformed_frames_dropped);
	RUN_TEST(test_unsupported_frames_dropped);
	RUN_TEST(test_addresses_judged_by_what_they_reach);
	RUN_TEST(test_claimed_ports_refused_unless_granted);
	RUN_TEST(test_spoofed_source_dropped);
	RUN_TEST(test_rate_cap_refuses_and_recovers);
	RUN_TEST(test_flow_cap_refuses_and_recovers);
	RUN_TEST(test_idle_connections_reclaimed_at_the_cap);
	RUN_TEST(test_remote_resets_by_connection_state);
	RUN_TEST(test_udp_and_echo_flows);
	RUN_TEST(test_addresses_of_no_single_host_refused);
	RUN_TEST(test_reset_answers_the_syn);
	RUN_TEST(test_udp_rewrite);
	RUN_TEST(test_random_frames_never_crash);
	RUN_TEST(test_device_hostile_chains_counted);
	RUN_TEST(test_device_denied_connect_gets_reset);
	RUN_TEST(test_device_claimed_port_gets_reset);
	RUN_TEST(test_device_published_port_claimed);
	RUN_TEST(test_device_idle_connection_reclaimed);
	RUN_TEST(test_device_dropped_guest_reset_still_closes);
	RUN_TEST(test_device_dropped_guest_fin_keeps_counting);
	RUN_TEST(test_device_slirp_answers_arp);
	RUN_TEST(test_device_confined_worker_answers_arp);
	return harness_finish();
}
