/*
 * The frame parser and egress policy of the user-mode network (net_policy.h says what is
 * judged and why). Every multi-byte field is read through net_get16/net_get32 at an offset
 * that was first checked against the frame's length, so a hostile frame can only be dropped.
 * The flow table is a fixed array scanned linearly: it holds at most NET_FLOW_TABLE_SIZE
 * flows and the caps keep the real number far below that, so a hash would buy nothing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net_policy.h"

#define NET_IPV4_VERSION 4u
#define NET_IP_FLAG_MORE_FRAGMENTS 0x2000u
#define NET_IP_FLAG_DONT_FRAGMENT 0x4000u
#define NET_IP_FRAGMENT_OFFSET_MASK 0x1fffu
#define NET_IP_DEFAULT_TTL 64
#define NET_IP_CHECKSUM_OFFSET 10
#define NET_IP_SRC_OFFSET 12
#define NET_IP_DST_OFFSET 16
#define NET_UDP_CHECKSUM_OFFSET 6
#define NET_TCP_DATA_OFFSET_SHIFT 4
#define NET_TCP_FLAGS_OFFSET 13
#define NET_TCP_SEQ_OFFSET 4
#define NET_TCP_ACK_OFFSET 8
#define NET_TCP_CHECKSUM_OFFSET 16
#define NET_WORD_BYTES 4
#define NET_MAX_PREFIX 32
#define NET_LINK_LOCAL NET_ADDR(169, 254, 0, 0)
#define NET_LINK_LOCAL_PREFIX 16
/* Destinations that name no single remote host (see net_policy.h). */
#define NET_THIS_NETWORK NET_ADDR(0, 0, 0, 0)
#define NET_THIS_NETWORK_PREFIX 8
#define NET_MULTICAST_AND_RESERVED NET_ADDR(224, 0, 0, 0)
#define NET_MULTICAST_AND_RESERVED_PREFIX 3
/* The host's loopback network: the guest reaches the host's loopback through the gateway only. */
#define NET_LOOPBACK_NETWORK NET_ADDR(127, 0, 0, 0)
#define NET_LOOPBACK_PREFIX 8
#define NET_PSEUDO_HEADER_LEN 12
#define NET_CHECKSUM_VALID 0 /* the folded complement of a sum over a correct checksum */

static uint16_t net_get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t net_get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void net_put16(uint8_t *p, uint16_t value)
{
	p[0] = (uint8_t)(value >> 8);
	p[1] = (uint8_t)value;
}

static void net_put32(uint8_t *p, uint32_t value)
{
	net_put16(p, (uint16_t)(value >> 16));
	net_put16(p + 2, (uint16_t)value);
}

static uint32_t net_prefix_mask(uint8_t prefix)
{
	return prefix == 0 ? 0 : ~0u << (NET_MAX_PREFIX - prefix);
}

int net_cidr_parse(const char *text, struct net_cidr *out)
{
	char addr_text[INET_ADDRSTRLEN];
	const char *slash = strchr(text, '/');
	size_t addr_len = slash ? (size_t)(slash - text) : strlen(text);
	unsigned long prefix = NET_MAX_PREFIX;
	struct in_addr addr;

	if (addr_len == 0 || addr_len >= sizeof(addr_text))
		return -EINVAL;
	memcpy(addr_text, text, addr_len);
	addr_text[addr_len] = '\0';
	if (inet_pton(AF_INET, addr_text, &addr) != 1)
		return -EINVAL;
	if (slash) {
		char *end = NULL;

		if (slash[1] < '0' || slash[1] > '9')
			return -EINVAL;
		prefix = strtoul(slash + 1, &end, 10);
		if (*end != '\0' || prefix > NET_MAX_PREFIX)
			return -EINVAL;
	}
	out->prefix = (uint8_t)prefix;
	out->addr = ntohl(addr.s_addr) & net_prefix_mask(out->prefix);
	return 0;
}

bool net_cidr_contains(const struct net_cidr *cidr, uint32_t addr)
{
	return (addr & net_prefix_mask(cidr->prefix)) == cidr->addr;
}

void net_addr_format(uint32_t addr, char *out, size_t len)
{
	snprintf(out, len, "%u.%u.%u.%u", addr >> 24, (addr >> 16) & 0xffu, (addr >> 8) & 0xffu,
		 addr & 0xffu);
}

void net_policy_init_default(struct net_policy *policy)
{
	const struct net_cidr link_local = { .addr = NET_LINK_LOCAL,
					     .prefix = NET_LINK_LOCAL_PREFIX };

	memset(policy, 0, sizeof(*policy));
	policy->dns = true;
	net_policy_add_deny(policy, &link_local);
}

int net_policy_add_deny(struct net_policy *policy, const struct net_cidr *cidr)
{
	if (policy->deny_count >= NET_MAX_CIDRS)
		return -ENOSPC;
	policy->deny[policy->deny_count++] = *cidr;
	return 0;
}

int net_policy_add_allow(struct net_policy *policy, const struct net_cidr *cidr)
{
	if (policy->allow_count >= NET_MAX_CIDRS)
		return -ENOSPC;
	policy->allow[policy->allow_count++] = *cidr;
	return 0;
}

int net_policy_grant_port(struct net_policy *policy, uint16_t port)
{
	if (policy->granted_count >= NET_MAX_GRANTED_PORTS)
		return -ENOSPC;
	policy->granted_ports[policy->granted_count++] = port;
	return 0;
}

/*
 * A TCP connection to the host's loopback that another voidbox process claimed and this VM
 * was not granted (net_policy.h): another sandbox's messaging listener or published port, or
 * the daemon's API.
 */
static bool net_claimed_elsewhere(const struct net_policy *policy,
				  const struct net_policy_state *state,
				  const struct net_frame_info *info)
{
	if (info->kind != NET_FRAME_TCP || info->dst_addr != NET_GATEWAY_ADDR ||
	    !state->port_claimed)
		return false;
	for (unsigned int i = 0; i < policy->granted_count && i < NET_MAX_GRANTED_PORTS; i++)
		if (policy->granted_ports[i] == info->dst_port)
			return false;
	return state->port_claimed(state->port_claimed_opaque, info->dst_port);
}

/* The Internet checksum of len bytes, continuing from sum. */
static uint32_t net_checksum_add(uint32_t sum, const uint8_t *data, size_t len)
{
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += net_get16(data + i);
	if (len & 1u)
		sum += (uint32_t)data[len - 1] << 8;
	return sum;
}

static uint16_t net_checksum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffffu) + (sum >> 16);
	return (uint16_t)~sum;
}

/* The sum over a TCP segment of tcp_len bytes and its pseudo-header (from the IPv4 header ip). */
static uint32_t net_tcp_sum(const uint8_t *ip, const uint8_t *tcp, size_t tcp_len)
{
	uint8_t pseudo[NET_PSEUDO_HEADER_LEN];

	memcpy(pseudo, ip + NET_IP_SRC_OFFSET, 2 * sizeof(uint32_t)); /* source, destination */
	pseudo[8] = 0;
	pseudo[9] = NET_IP_PROTO_TCP;
	net_put16(pseudo + 10, (uint16_t)tcp_len);
	return net_checksum_add(net_checksum_add(0, pseudo, sizeof(pseudo)), tcp, tcp_len);
}

/*
 * Whether a TCP segment's checksum is right (pseudo-header included). libslirp drops a segment
 * whose checksum is wrong, so only a FIN or RST that passes this can close a connection there,
 * and only such a one may end the flow that counts its host socket.
 */
static bool net_tcp_checksum_ok(const uint8_t *frame, const struct net_frame_info *info,
				size_t l4_len)
{
	return net_checksum_fold(net_tcp_sum(frame + info->ip_offset, frame + info->l4_offset,
					     l4_len)) == NET_CHECKSUM_VALID;
}

/* The transport header of an IPv4 packet that starts at ip (ip_len bytes from there). */
static void net_parse_l4(const uint8_t *frame, size_t ip_len, struct net_frame_info *out)
{
	const uint8_t *l4 = frame + out->l4_offset;
	size_t l4_len = ip_len - (out->l4_offset - out->ip_offset);

	switch (out->kind) {
	case NET_FRAME_TCP: {
		size_t header_len;

		if (l4_len < NET_TCP_MIN_HEADER_LEN)
			goto malformed;
		header_len = (size_t)(l4[12] >> NET_TCP_DATA_OFFSET_SHIFT) * NET_WORD_BYTES;
		if (header_len < NET_TCP_MIN_HEADER_LEN || header_len > l4_len)
			goto malformed;
		out->src_port = net_get16(l4);
		out->dst_port = net_get16(l4 + 2);
		out->tcp_seq = net_get32(l4 + NET_TCP_SEQ_OFFSET);
		out->tcp_ack = net_get32(l4 + NET_TCP_ACK_OFFSET);
		out->tcp_flags = l4[NET_TCP_FLAGS_OFFSET];
		out->l4_payload_len = l4_len - header_len;
		if (out->tcp_flags & (NET_TCP_FIN | NET_TCP_RST))
			out->tcp_checksum_ok = net_tcp_checksum_ok(frame, out, l4_len);
		return;
	}
	case NET_FRAME_ICMP:
		if (l4_len < NET_ICMP_HEADER_LEN)
			goto malformed;
		out->icmp_type = l4[0];
		out->src_port = net_get16(l4 + 4); /* echo identifier */
		out->dst_port = net_get16(l4 + 6); /* echo sequence number */
		return;
	case NET_FRAME_UDP:
		if (l4_len < NET_UDP_HEADER_LEN || net_get16(l4 + 4) < NET_UDP_HEADER_LEN ||
		    net_get16(l4 + 4) > l4_len)
			goto malformed;
		out->src_port = net_get16(l4);
		out->dst_port = net_get16(l4 + 2);
		out->l4_payload_len = net_get16(l4 + 4) - NET_UDP_HEADER_LEN;
		return;
	default:
		return;
	}
malformed:
	out->kind = NET_FRAME_MALFORMED;
}

void net_frame_parse(const uint8_t *frame, size_t len, struct net_frame_info *out)
{
	const uint8_t *ip;
	size_t header_len, total_len;
	uint16_t fragment;

	memset(out, 0, sizeof(*out));
	out->kind = NET_FRAME_MALFORMED;
	if (!frame || len < NET_ETH_HEADER_LEN || len > NET_MAX_FRAME_LEN)
		return;
	switch (net_get16(frame + 2 * NET_ETH_ADDR_LEN)) {
	case NET_ETHERTYPE_ARP:
		out->kind = NET_FRAME_ARP;
		return;
	case NET_ETHERTYPE_IPV4:
		break;
	default:
		out->kind = NET_FRAME_UNSUPPORTED;
		return;
	}
	out->ip_offset = NET_ETH_HEADER_LEN;
	ip = frame + out->ip_offset;
	if (len - out->ip_offset < NET_IPV4_MIN_HEADER_LEN || (ip[0] >> 4) != NET_IPV4_VERSION)
		return;
	header_len = (size_t)(ip[0] & 0x0fu) * NET_WORD_BYTES;
	total_len = net_get16(ip + 2);
	if (header_len < NET_IPV4_MIN_HEADER_LEN || total_len < header_len ||
	    total_len > len - out->ip_offset)
		return;
	out->src_addr = net_get32(ip + NET_IP_SRC_OFFSET);
	out->dst_addr = net_get32(ip + NET_IP_DST_OFFSET);
	out->l4_offset = out->ip_offset + header_len;
	fragment = net_get16(ip + 6);
	if ((fragment & NET_IP_FLAG_MORE_FRAGMENTS) || (fragment & NET_IP_FRAGMENT_OFFSET_MASK)) {
		out->kind = NET_FRAME_UNSUPPORTED;
		return;
	}
	switch (ip[9]) {
	case NET_IP_PROTO_TCP:
		out->kind = NET_FRAME_TCP;
		break;
	case NET_IP_PROTO_UDP:
		out->kind = NET_FRAME_UDP;
		break;
	case NET_IP_PROTO_ICMP:
		out->kind = NET_FRAME_ICMP;
		break;
	default:
		out->kind = NET_FRAME_UNSUPPORTED;
		return;
	}
	net_parse_l4(frame, total_len, out);
}

static bool net_cidr_list_contains(const struct net_cidr *list, unsigned int count,
				   uint32_t addr)
{
	for (unsigned int i = 0; i < count && i < NET_MAX_CIDRS; i++) {
		if (net_cidr_contains(&list[i], addr))
			return true;
	}
	return false;
}

/* The address a destination reaches once slirp has mapped it; false: it reaches nothing. */
static bool net_effective_destination(const struct net_policy *policy,
				      const struct net_frame_info *info, uint32_t *addr)
{
	const struct net_cidr virtual_net = { .addr = NET_VIRTUAL_NETWORK,
					      .prefix = NET_VIRTUAL_PREFIX };
	const struct net_cidr this_network = { .addr = NET_THIS_NETWORK,
					       .prefix = NET_THIS_NETWORK_PREFIX };
	const struct net_cidr not_unicast = { .addr = NET_MULTICAST_AND_RESERVED,
					      .prefix = NET_MULTICAST_AND_RESERVED_PREFIX };
	const struct net_cidr loopback = { .addr = NET_LOOPBACK_NETWORK,
					   .prefix = NET_LOOPBACK_PREFIX };

	*addr = info->dst_addr;
	/*
	 * 127.0.0.0/8 as a destination is the host itself (libslirp connects to it as given),
	 * where 127.0.0.2 would reach what listens on 0.0.0.0 or 127.0.0.53 past a deny list of
	 * 127.0.0.1; a guest's own stack never sends it out, so only the gateway reaches it.
	 */
	if (net_cidr_contains(&this_network, info->dst_addr) ||
	    net_cidr_contains(&not_unicast, info->dst_addr) ||
	    net_cidr_contains(&loopback, info->dst_addr))
		return false;
	if (!net_cidr_contains(&virtual_net, info->dst_addr))
		return true;
	if (info->dst_addr == NET_GATEWAY_ADDR) {
		*addr = NET_HOST_LOOPBACK_ADDR;
		return true;
	}
	if (info->dst_addr == NET_DNS_ADDR && info->kind == NET_FRAME_UDP &&
	    info->dst_port == NET_DNS_PORT && policy->dns) {
		*addr = policy->resolver_addr;
		return true;
	}
	return false;
}

static uint64_t net_flow_idle_ms(const struct net_flow *flow)
{
	switch (flow->proto) {
	case NET_IP_PROTO_ICMP:
		return NET_ICMP_FLOW_IDLE_MS;
	default:
		return flow->dst_port == NET_DNS_PORT ? NET_DNS_FLOW_IDLE_MS : NET_UDP_FLOW_IDLE_MS;
	}
}

static struct net_flow *net_flow_find(struct net_policy_state *state, uint8_t proto,
				      const struct net_frame_info *info, uint64_t now_ms)
{
	struct net_flow *found = NULL;

	for (unsigned int i = 0; i < state->flow_slots_high && i < NET_FLOW_TABLE_SIZE; i++) {
		struct net_flow *flow = &state->flows[i];

		if (!flow->used)
			continue;
		/* libslirp has let an idle datagram's socket go; an idle TCP connection it keeps */
		if (flow->proto != NET_IP_PROTO_TCP &&
		    now_ms - flow->last_seen_ms > net_flow_idle_ms(flow)) {
			flow->used = false;
			state->active_flows--;
			continue;
		}
		if (flow->proto == proto && flow->guest_port == info->src_port &&
		    flow->dst_addr == info->dst_addr && flow->dst_port == info->dst_port)
			found = flow;
	}
	return found;
}

static void net_flow_forget(struct net_policy_state *state, struct net_flow *flow)
{
	if (flow && flow->used) {
		flow->used = false;
		state->active_flows--;
	}
}

/*
 * Stops counting a TCP connection and hands it to the device to reset in libslirp; false, and
 * the flow still counts, when the device has not reset the last ones yet.
 */
static bool net_flow_forget_and_reset(struct net_policy_state *state, struct net_flow *flow,
				      bool tell_guest)
{
	if (state->reclaimed_count >= NET_RECLAIMED_MAX)
		return false;
	state->reclaimed[state->reclaimed_count++] = (struct net_reclaimed_flow){
		.guest_port = flow->guest_port, .dst_addr = flow->dst_addr,
		.dst_port = flow->dst_port, .guest_seq = flow->guest_seq,
		.tell_guest = tell_guest && flow->guest_acked, .guest_ack = flow->guest_ack,
	};
	net_flow_forget(state, flow);
	return true;
}

/*
 * At the flow cap: the TCP connection the guest has left silent longest gives up its slot if
 * it has been silent over the idle time, and is handed to the device to reset in libslirp.
 * False when there is none (or the device has not reset the last ones yet).
 */
static bool net_flow_reclaim_idle(const struct net_policy *policy,
				  struct net_policy_state *state, uint64_t now_ms)
{
	uint64_t idle_ms = policy->tcp_idle_ms ? policy->tcp_idle_ms : NET_TCP_FLOW_IDLE_MS;
	struct net_flow *oldest = NULL;

	for (unsigned int i = 0; i < state->flow_slots_high && i < NET_FLOW_TABLE_SIZE; i++) {
		struct net_flow *flow = &state->flows[i];

		if (flow->used && flow->proto == NET_IP_PROTO_TCP &&
		    now_ms - flow->last_seen_ms > idle_ms &&
		    (!oldest || flow->last_seen_ms < oldest->last_seen_ms))
			oldest = flow;
	}
	return oldest && net_flow_forget_and_reset(state, oldest, true);
}

/* A new flow, if the caps allow one now. */
static enum net_verdict net_flow_open(const struct net_policy *policy,
				      struct net_policy_state *state, uint8_t proto,
				      const struct net_frame_info *info, uint64_t now_ms)
{
	uint32_t max_flows = policy->max_flows ? policy->max_flows : NET_DEFAULT_MAX_FLOWS;
	uint32_t max_new = policy->max_new_per_sec ? policy->max_new_per_sec
						   : NET_DEFAULT_MAX_NEW_PER_SEC;
	struct net_flow *slot = NULL;

	if (now_ms - state->window_start_ms >= NET_RATE_WINDOW_MS || now_ms < state->window_start_ms) {
		state->window_start_ms = now_ms;
		state->window_new = 0;
	}
	if (state->window_new >= max_new)
		return NET_VERDICT_DENY_RATE;
	if ((state->active_flows >= max_flows || state->active_flows >= NET_FLOW_TABLE_SIZE) &&
	    (!net_flow_reclaim_idle(policy, state, now_ms) || state->active_flows >= max_flows))
		return NET_VERDICT_DENY_FLOWS;
	for (unsigned int i = 0; i < NET_FLOW_TABLE_SIZE && !slot; i++) {
		if (!state->flows[i].used)
			slot = &state->flows[i];
	}
	if (!slot)
		return NET_VERDICT_DENY_FLOWS;
	if ((uint32_t)(slot - state->flows) >= state->flow_slots_high)
		state->flow_slots_high = (uint32_t)(slot - state->flows) + 1;
	*slot = (struct net_flow){ .used = true, .proto = proto, .guest_port = info->src_port,
				   .dst_addr = info->dst_addr, .dst_port = info->dst_port,
				   .last_seen_ms = now_ms, .guest_seq = info->tcp_seq + 1 };
	state->active_flows++;
	state->window_new++;
	return NET_VERDICT_PASS;
}

/*
 * A segment of a TCP connection from the guest keeps its flow alive. The flow ends when libslirp
 * lets the connection's host socket go: at a reset, or once both ends have sent a FIN (the
 * remote end's, and libslirp's acknowledgement of the guest's, are seen in
 * net_policy_observe_rx). Only a FIN or reset whose checksum is right counts, since libslirp
 * drops any other; a FIN alone leaves the connection half open, its socket still held.
 */
static void net_tcp_segment_seen(struct net_policy_state *state, const struct net_frame_info *info,
				 uint64_t now_ms)
{
	struct net_flow *flow = net_flow_find(state, NET_IP_PROTO_TCP, info, now_ms);

	if (!flow)
		return;
	flow->last_seen_ms = now_ms;
	/* any of the guest's numbers will do: the reclaim's two resets cover the whole space */
	flow->guest_seq = info->tcp_seq;
	if (info->tcp_flags & NET_TCP_ACK) {
		/* only ever used to end the guest's own connection: a wrong one harms no one else */
		flow->guest_ack = info->tcp_ack;
		flow->guest_acked = true;
	}
	if (!info->tcp_checksum_ok)
		return;
	/*
	 * libslirp drops a reset numbered outside its window, and every segment while it still
	 * connects: so the connection is reset for certain before it stops counting, and one
	 * libslirp has not answered yet counts on (it is reclaimed when idle).
	 */
	if (info->tcp_flags & NET_TCP_RST) {
		if (flow->synack_seen) /* the guest itself ended it: nothing to tell it */
			net_flow_forget_and_reset(state, flow, false);
		return;
	}
	/*
	 * A FIN closes the guest's side once libslirp acknowledges it (net_policy_observe_rx):
	 * libslirp drops one numbered outside its window, and the connection stays open.
	 */
	if (info->tcp_flags & NET_TCP_FIN) {
		flow->guest_fin_sent = true;
		flow->guest_fin_seq = info->tcp_seq + (uint32_t)info->l4_payload_len;
	}
}

static enum net_verdict net_policy_decide(const struct net_policy *policy,
					  struct net_policy_state *state,
					  const struct net_frame_info *info, uint64_t now_ms,
					  uint32_t *judged_addr)
{
	uint8_t proto = info->kind == NET_FRAME_TCP ? NET_IP_PROTO_TCP
			: info->kind == NET_FRAME_UDP ? NET_IP_PROTO_UDP
						       : NET_IP_PROTO_ICMP;
	bool opens_tcp = info->kind == NET_FRAME_TCP &&
			 (info->tcp_flags & (NET_TCP_SYN | NET_TCP_ACK)) == NET_TCP_SYN;
	struct net_flow *flow;

	switch (info->kind) {
	case NET_FRAME_MALFORMED:
		return NET_VERDICT_DROP_MALFORMED;
	case NET_FRAME_UNSUPPORTED:
		return NET_VERDICT_DROP_UNSUPPORTED;
	case NET_FRAME_ARP:
		return NET_VERDICT_PASS;
	default:
		break;
	}
	if (info->src_addr != NET_GUEST_ADDR)
		return NET_VERDICT_DROP_SPOOFED;
	/* Segments of a connection slirp already has (or will reset): no new host socket. */
	if (info->kind == NET_FRAME_TCP && !opens_tcp) {
		net_tcp_segment_seen(state, info, now_ms);
		return NET_VERDICT_PASS;
	}
	if (!net_effective_destination(policy, info, judged_addr))
		return NET_VERDICT_DENY_ADDRESS;
	if (net_cidr_list_contains(policy->deny, policy->deny_count, *judged_addr))
		return NET_VERDICT_DENY_ADDRESS;
	if (policy->allow_count &&
	    !net_cidr_list_contains(policy->allow, policy->allow_count, *judged_addr))
		return NET_VERDICT_DENY_ADDRESS;
	if (net_claimed_elsewhere(policy, state, info))
		return NET_VERDICT_DENY_CLAIMED;
	if (info->kind == NET_FRAME_ICMP && info->icmp_type != NET_ICMP_ECHO_REQUEST)
		return NET_VERDICT_PASS; /* libslirp relays echo requests only: no socket for these */
	/* a known flow (for TCP: a retransmitted SYN) is no new connection */
	flow = net_flow_find(state, proto, info, now_ms);
	if (flow) {
		flow->last_seen_ms = now_ms;
		return NET_VERDICT_PASS;
	}
	return net_flow_open(policy, state, proto, info, now_ms);
}

void net_policy_observe_rx(struct net_policy_state *state, const struct net_frame_info *info,
			   uint64_t now_ms)
{
	struct net_frame_info outbound;
	struct net_flow *flow;

	if (info->kind == NET_FRAME_ICMP && info->icmp_type == NET_ICMP_ECHO_REPLY) {
		/* the request's flow: same identifier and sequence number, to the replying host */
		outbound = *info;
		outbound.dst_addr = info->src_addr;
		net_flow_forget(state, net_flow_find(state, NET_IP_PROTO_ICMP, &outbound, now_ms));
		return;
	}
	if (info->kind != NET_FRAME_TCP ||
	    !(info->tcp_flags & (NET_TCP_RST | NET_TCP_FIN | NET_TCP_SYN | NET_TCP_ACK)))
		return;
	/* the flow as the guest's frames name it: guest port, then the remote end */
	outbound = *info;
	outbound.src_port = info->dst_port;
	outbound.dst_addr = info->src_addr;
	outbound.dst_port = info->src_port;
	flow = net_flow_find(state, NET_IP_PROTO_TCP, &outbound, now_ms);
	if (!flow)
		return;
	if ((info->tcp_flags & (NET_TCP_SYN | NET_TCP_ACK)) == (NET_TCP_SYN | NET_TCP_ACK))
		flow->synack_seen = true;
	/*
	 * A reset before libslirp answered the SYN is a connect that failed: libslirp has closed
	 * it. One after may answer a segment it refused on a connection it keeps (an ACK of
	 * nothing it sent), so that connection is reset for certain before it stops counting.
	 */
	if (info->tcp_flags & NET_TCP_RST) {
		if (!flow->synack_seen)
			net_flow_forget(state, flow);
		else /* on its way to the guest, which is so told already */
			net_flow_forget_and_reset(state, flow, false);
		return;
	}
	/* libslirp acknowledges the guest's FIN: the next number it expects is past it */
	if (flow->guest_fin_sent && (info->tcp_flags & NET_TCP_ACK) &&
	    (int32_t)(info->tcp_ack - (flow->guest_fin_seq + 1u)) >= 0)
		flow->guest_fin = true;
	flow->remote_fin = flow->remote_fin || (info->tcp_flags & NET_TCP_FIN);
	if (flow->guest_fin && flow->remote_fin)
		net_flow_forget(state, flow);
}

enum net_verdict net_policy_judge(const struct net_policy *policy, struct net_policy_state *state,
				  const struct net_frame_info *info, uint64_t now_ms,
				  uint32_t *judged_addr)
{
	uint32_t unused;
	enum net_verdict verdict;

	if (!judged_addr)
		judged_addr = &unused;
	*judged_addr = info->dst_addr;
	verdict = net_policy_decide(policy, state, info, now_ms, judged_addr);
	state->verdicts[verdict]++;
	return verdict;
}

const char *net_verdict_name(enum net_verdict verdict)
{
	static const char *const names[NET_VERDICT_COUNT] = {
		[NET_VERDICT_PASS] = "passed",
		[NET_VERDICT_DROP_MALFORMED] = "malformed",
		[NET_VERDICT_DROP_UNSUPPORTED] = "unsupported",
		[NET_VERDICT_DENY_ADDRESS] = "denied by address",
		[NET_VERDICT_DENY_FLOWS] = "denied: too many flows",
		[NET_VERDICT_DENY_RATE] = "denied: too many new connections per second",
		[NET_VERDICT_DENY_CLAIMED] = "denied: a voidbox service of another sandbox or of the host",
		[NET_VERDICT_DROP_SPOOFED] = "spoofed source address",
	};

	return (unsigned int)verdict < NET_VERDICT_COUNT ? names[verdict] : "unknown";
}

static void net_ipv4_fix_checksum(uint8_t *ip, size_t header_len)
{
	net_put16(ip + NET_IP_CHECKSUM_OFFSET, 0);
	net_put16(ip + NET_IP_CHECKSUM_OFFSET,
		  net_checksum_fold(net_checksum_add(0, ip, header_len)));
}

/* The endpoints of a reset: Ethernet, IPv4 and TCP, in the order the headers name them. */
struct net_rst_ends {
	const uint8_t *dst_mac;
	const uint8_t *src_mac;
	uint32_t src_addr;
	uint32_t dst_addr;
	uint16_t src_port;
	uint16_t dst_port;
};

/* A reset with no options and no data, its checksums filled in: NET_RST_FRAME_LEN bytes. */
static void net_write_rst(uint8_t *out, const struct net_rst_ends *ends, uint32_t seq,
			  uint32_t ack, uint8_t flags)
{
	uint8_t *ip = out + NET_ETH_HEADER_LEN;
	uint8_t *tcp = ip + NET_IPV4_MIN_HEADER_LEN;

	memset(out, 0, NET_RST_FRAME_LEN);
	memcpy(out, ends->dst_mac, NET_ETH_ADDR_LEN);
	memcpy(out + NET_ETH_ADDR_LEN, ends->src_mac, NET_ETH_ADDR_LEN);
	net_put16(out + 2 * NET_ETH_ADDR_LEN, NET_ETHERTYPE_IPV4);
	ip[0] = (uint8_t)((NET_IPV4_VERSION << 4) | (NET_IPV4_MIN_HEADER_LEN / NET_WORD_BYTES));
	net_put16(ip + 2, NET_IPV4_MIN_HEADER_LEN + NET_TCP_MIN_HEADER_LEN);
	net_put16(ip + 6, NET_IP_FLAG_DONT_FRAGMENT);
	ip[8] = NET_IP_DEFAULT_TTL;
	ip[9] = NET_IP_PROTO_TCP;
	net_put32(ip + NET_IP_SRC_OFFSET, ends->src_addr);
	net_put32(ip + NET_IP_DST_OFFSET, ends->dst_addr);
	net_ipv4_fix_checksum(ip, NET_IPV4_MIN_HEADER_LEN);
	net_put16(tcp, ends->src_port);
	net_put16(tcp + 2, ends->dst_port);
	net_put32(tcp + NET_TCP_SEQ_OFFSET, seq);
	net_put32(tcp + NET_TCP_ACK_OFFSET, ack);
	tcp[12] = (uint8_t)((NET_TCP_MIN_HEADER_LEN / NET_WORD_BYTES) << NET_TCP_DATA_OFFSET_SHIFT);
	tcp[NET_TCP_FLAGS_OFFSET] = flags;
	net_put16(tcp + NET_TCP_CHECKSUM_OFFSET,
		  net_checksum_fold(net_tcp_sum(ip, tcp, NET_TCP_MIN_HEADER_LEN)));
}

size_t net_build_tcp_rst(const uint8_t *frame, const struct net_frame_info *info, uint8_t *out,
			 size_t cap)
{
	/* back to the sender, from the address it asked for */
	const struct net_rst_ends ends = {
		.dst_mac = frame + NET_ETH_ADDR_LEN, .src_mac = frame,
		.src_addr = info->dst_addr, .dst_addr = info->src_addr,
		.src_port = info->dst_port, .dst_port = info->src_port,
	};
	uint32_t ack = info->tcp_seq + (uint32_t)info->l4_payload_len +
		       ((info->tcp_flags & NET_TCP_SYN) ? 1u : 0u) +
		       ((info->tcp_flags & NET_TCP_FIN) ? 1u : 0u);

	if (info->kind != NET_FRAME_TCP || cap < NET_RST_FRAME_LEN)
		return 0;
	net_write_rst(out, &ends, 0, ack, NET_TCP_RST | NET_TCP_ACK);
	return NET_RST_FRAME_LEN;
}

size_t net_build_reclaim_rst(const struct net_reclaimed_flow *flow, uint32_t seq,
			     const uint8_t src_mac[NET_ETH_ADDR_LEN],
			     const uint8_t dst_mac[NET_ETH_ADDR_LEN], uint8_t *out, size_t cap)
{
	const struct net_rst_ends ends = {
		.dst_mac = dst_mac, .src_mac = src_mac,
		.src_addr = NET_GUEST_ADDR, .dst_addr = flow->dst_addr,
		.src_port = flow->guest_port, .dst_port = flow->dst_port,
	};

	if (cap < NET_RST_FRAME_LEN)
		return 0;
	net_write_rst(out, &ends, seq, 0, NET_TCP_RST);
	return NET_RST_FRAME_LEN;
}

size_t net_build_guest_rst(const struct net_reclaimed_flow *flow,
			   const uint8_t src_mac[NET_ETH_ADDR_LEN],
			   const uint8_t dst_mac[NET_ETH_ADDR_LEN], uint8_t *out, size_t cap)
{
	const struct net_rst_ends ends = {
		.dst_mac = dst_mac, .src_mac = src_mac,
		.src_addr = flow->dst_addr, .dst_addr = NET_GUEST_ADDR,
		.src_port = flow->dst_port, .dst_port = flow->guest_port,
	};

	if (cap < NET_RST_FRAME_LEN)
		return 0;
	net_write_rst(out, &ends, flow->guest_ack, 0, NET_TCP_RST);
	return NET_RST_FRAME_LEN;
}

static void net_frame_set_udp_endpoint(uint8_t *frame, const struct net_frame_info *info,
				       size_t addr_offset, size_t port_offset, uint32_t addr,
				       uint16_t port)
{
	uint8_t *ip = frame + info->ip_offset;

	if (info->kind != NET_FRAME_UDP)
		return;
	net_put32(ip + addr_offset, addr);
	net_put16(frame + info->l4_offset + port_offset, port);
	net_put16(frame + info->l4_offset + NET_UDP_CHECKSUM_OFFSET, 0);
	net_ipv4_fix_checksum(ip, info->l4_offset - info->ip_offset);
}

void net_frame_set_udp_dst(uint8_t *frame, const struct net_frame_info *info, uint32_t addr,
			   uint16_t port)
{
	net_frame_set_udp_endpoint(frame, info, NET_IP_DST_OFFSET, 2, addr, port);
}

void net_frame_set_udp_src(uint8_t *frame, const struct net_frame_info *info, uint32_t addr,
			   uint16_t port)
{
	net_frame_set_udp_endpoint(frame, info, NET_IP_SRC_OFFSET, 0, addr, port);
}
