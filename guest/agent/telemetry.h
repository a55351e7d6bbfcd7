/*
 * SubscribeTelemetry: a thread per subscription samples /proc and sends TelemetryData batches
 * (digest §2.6) on the subscription's request id until a write fails. Sampling is split from
 * sending and takes the /proc root as a parameter so tests can point it at a fake tree.
 */
#ifndef VOIDBOX_AGENT_TELEMETRY_H
#define VOIDBOX_AGENT_TELEMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "proto/protocol.h"

#define TELEMETRY_MIN_INTERVAL_MS 100

struct telemetry_sampler {
	const char *proc_root;        /* "/proc" */
	bool include_kernel_threads;
	bool has_previous;
	uint64_t previous_total;
	uint64_t previous_idle;
	uint64_t seq;
};

/* Fills batch (heap members; release with proto_telemetry_batch_free). Returns 0 or -errno. */
int telemetry_sample(struct telemetry_sampler *sampler, struct proto_telemetry_batch *batch);

/* Decodes the subscription and starts its thread. Returns 0 or -EPROTO / -errno. */
int telemetry_start(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
		    size_t len);

#endif
