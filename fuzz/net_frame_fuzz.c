/*
 * libFuzzer target for the network device's frame parser and egress policy: the input is a
 * sequence of frames exactly as a hostile guest transmits them (each prefixed by a 2-byte
 * little-endian length, clamped to what is left), judged in order against one policy with an
 * allow list, a small flow cap and a small rate cap, on a clock that advances by the first
 * byte of each frame, so the flow table and rate window go through refusals, expiries and
 * reuse; each frame is also observed as if sent to the guest (a reset frees its flow). Every
 * TCP frame also gets its reset built and every UDP frame both rewrites, on a copy sized to
 * the frame so ASan catches any access past it. Odd host ports count as claimed by another
 * voidbox service and one of them is granted, so the claim check's paths are walked too. TCP
 * flows go idle after a second, so the cap reclaims them, and each reclaimed one gets its
 * two resets built as the device builds them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net_policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_LENGTH_BYTES 2u
#define FUZZ_MAX_FLOWS 4u
#define FUZZ_MAX_NEW_PER_SEC 3u
#define FUZZ_CLOCK_STEP_MS 37u
#define FUZZ_GRANTED_PORT 8081u
#define FUZZ_TCP_IDLE_MS 1000u
#define FUZZ_SEQ_HALF 0x80000000u

static struct net_policy_state fuzz_state;

/* Stands in for loopback_claim_held: odd ports are some other service's. */
static bool fuzz_port_claimed(void *opaque, uint16_t port)
{
	(void)opaque;
	return (port & 1u) != 0;
}

static void fuzz_policy(struct net_policy *policy)
{
	struct net_cidr loopback = { .addr = NET_HOST_LOOPBACK_ADDR, .prefix = 32 };
	struct net_cidr denied = { .addr = NET_ADDR(192, 0, 2, 0), .prefix = 24 };

	net_policy_init_default(policy);
	net_policy_add_allow(policy, &loopback);
	net_policy_add_deny(policy, &denied);
	policy->max_flows = FUZZ_MAX_FLOWS;
	policy->max_new_per_sec = FUZZ_MAX_NEW_PER_SEC;
	policy->resolver_addr = NET_HOST_LOOPBACK_ADDR;
	net_policy_grant_port(policy, FUZZ_GRANTED_PORT);
	policy->tcp_idle_ms = FUZZ_TCP_IDLE_MS;
}

/* What the device does with reclaimed connections: two resets each, then none is pending. */
static void fuzz_reset_reclaimed(void)
{
	static const uint8_t mac[NET_ETH_ADDR_LEN] = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 };
	uint8_t rst[NET_RST_FRAME_LEN];
	struct net_frame_info info;

	if (fuzz_state.reclaimed_count > NET_RECLAIMED_MAX)
		abort();
	for (unsigned int i = 0; i < fuzz_state.reclaimed_count; i++) {
		const struct net_reclaimed_flow *flow = &fuzz_state.reclaimed[i];

		if (net_build_reclaim_rst(flow, flow->guest_seq + FUZZ_SEQ_HALF, mac, mac, rst,
					  sizeof(rst)) != sizeof(rst))
			abort();
		/* what it built parses back as the guest's reset of that connection */
		net_frame_parse(rst, sizeof(rst), &info);
		if (info.kind != NET_FRAME_TCP || !(info.tcp_flags & NET_TCP_RST) ||
		    info.src_port != flow->guest_port || info.dst_addr != flow->dst_addr ||
		    info.dst_port != flow->dst_port)
			abort();
	}
	fuzz_state.reclaimed_count = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct net_policy policy;
	uint64_t now_ms = 0;

	fuzz_policy(&policy);
	memset(&fuzz_state, 0, sizeof(fuzz_state));
	fuzz_state.port_claimed = fuzz_port_claimed;
	while (size >= FUZZ_LENGTH_BYTES) {
		size_t len = (size_t)data[0] | ((size_t)data[1] << 8);
		struct net_frame_info info;
		uint8_t rst[NET_RST_FRAME_LEN];
		uint8_t *frame;

		data += FUZZ_LENGTH_BYTES;
		size -= FUZZ_LENGTH_BYTES;
		if (len > size)
			len = size;
		frame = malloc(len ? len : 1);
		if (!frame)
			return 0;
		memcpy(frame, data, len);
		net_frame_parse(frame, len, &info);
		now_ms += len ? (uint64_t)frame[0] * FUZZ_CLOCK_STEP_MS : 0;
		if ((unsigned int)net_policy_judge(&policy, &fuzz_state, &info, now_ms, NULL) >=
		    NET_VERDICT_COUNT)
			abort();
		fuzz_reset_reclaimed();
		/* the same bytes as a frame to the guest: a reset closes the flow it answers */
		net_policy_observe_rx(&fuzz_state, &info, now_ms);
		if (fuzz_state.active_flows > FUZZ_MAX_FLOWS)
			abort();
		if (info.kind == NET_FRAME_TCP &&
		    net_build_tcp_rst(frame, &info, rst, sizeof(rst)) != sizeof(rst))
			abort();
		if (info.kind == NET_FRAME_UDP) {
			net_frame_set_udp_dst(frame, &info, NET_GATEWAY_ADDR, NET_DNS_PORT);
			net_frame_set_udp_src(frame, &info, NET_DNS_ADDR, NET_DNS_PORT);
		}
		free(frame);
		data += len;
		size -= len;
	}
	return 0;
}
