/*
 * Measures the two wire forms of bulk bytes: base64 strings (what voidbox sends) and
 * upstream's JSON arrays of integers (what voidbox still accepts). Both go through the real
 * ExecResponse codec with 1 MiB of stdout; the int-array body is built with jansson the way
 * upstream's serde output looks, then decoded by the same decoder. Prints wire size and
 * encode/decode throughput of each form and the ratios, which docs/protocol.md quotes.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/protocol.h"

#define BENCH_BYTES (1024 * 1024)
#define BENCH_ROUNDS 5
#define BYTES_PER_MIB (1024.0 * 1024.0)

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint8_t *int_array_encode(const struct proto_exec_response *resp, size_t *len)
{
	json_t *root = json_object(), *stdout_array = json_array();
	char *text;

	for (size_t i = 0; i < resp->stdout_data.len; i++)
		json_array_append_new(stdout_array, json_integer(resp->stdout_data.data[i]));
	json_object_set_new(root, "stdout", stdout_array);
	json_object_set_new(root, "stderr", json_array());
	json_object_set_new(root, "exit_code", json_integer(resp->exit_code));
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		return NULL;
	*len = strlen(text);
	return (uint8_t *)text;
}

static uint8_t *base64_encode_body(const struct proto_exec_response *resp, size_t *len)
{
	uint8_t *body = NULL;

	return proto_exec_response_encode(resp, &body, len) == 0 ? body : NULL;
}

struct bench_result {
	size_t wire_bytes;
	double encode_mib_s;
	double decode_mib_s;
};

static int bench_form(const char *name, uint8_t *(*encode)(const struct proto_exec_response *,
							   size_t *),
		      const struct proto_exec_response *resp, struct bench_result *result)
{
	double encode_total = 0, decode_total = 0;

	for (int round = 0; round < BENCH_ROUNDS; round++) {
		struct proto_exec_response decoded;
		const char *why = NULL;
		double t0 = now_seconds(), t1, t2;
		size_t len = 0;
		uint8_t *body = encode(resp, &len);

		t1 = now_seconds();
		if (!body || proto_exec_response_decode(body, len, &decoded, &why) != 0 ||
		    decoded.stdout_data.len != BENCH_BYTES ||
		    memcmp(decoded.stdout_data.data, resp->stdout_data.data, BENCH_BYTES) != 0) {
			fprintf(stderr, "%s: round trip failed (%s)\n", name, why ? why : "encode");
			free(body);
			return -1;
		}
		t2 = now_seconds();
		encode_total += t1 - t0;
		decode_total += t2 - t1;
		result->wire_bytes = len;
		proto_exec_response_free(&decoded);
		free(body);
	}
	result->encode_mib_s = BENCH_ROUNDS * (BENCH_BYTES / BYTES_PER_MIB) / encode_total;
	result->decode_mib_s = BENCH_ROUNDS * (BENCH_BYTES / BYTES_PER_MIB) / decode_total;
	printf("%-10s wire %8zu bytes (%.2fx payload)  encode %8.1f MiB/s  decode %8.1f MiB/s\n",
	       name, result->wire_bytes, (double)result->wire_bytes / BENCH_BYTES,
	       result->encode_mib_s, result->decode_mib_s);
	return 0;
}

int main(void)
{
	struct proto_exec_response resp = { .exit_code = 0 };
	struct bench_result b64, ints;
	uint32_t state = 0x12345678u;

	resp.stdout_data.data = malloc(BENCH_BYTES);
	resp.stdout_data.len = BENCH_BYTES;
	if (!resp.stdout_data.data)
		return 1;
	/* xorshift bytes: the full 0..255 range, as binary output has */
	for (size_t i = 0; i < BENCH_BYTES; i++) {
		state ^= state << 13;
		state ^= state >> 17;
		state ^= state << 5;
		resp.stdout_data.data[i] = (uint8_t)state;
	}
	printf("1 MiB ExecResponse stdout, %d rounds each\n", BENCH_ROUNDS);
	if (bench_form("base64", base64_encode_body, &resp, &b64) < 0 ||
	    bench_form("int-array", int_array_encode, &resp, &ints) < 0) {
		free(resp.stdout_data.data);
		return 1;
	}
	printf("base64 vs int-array: %.2fx smaller on the wire, encode %.1fx faster, "
	       "decode %.1fx faster\n", (double)ints.wire_bytes / b64.wire_bytes,
	       b64.encode_mib_s / ints.encode_mib_s, b64.decode_mib_s / ints.decode_mib_s);
	free(resp.stdout_data.data);
	return 0;
}
