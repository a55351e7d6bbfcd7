/*
 * Exec round trip on a warm VM: how long `true` takes from the host's request to the agent's
 * answer, over many calls, with the queue doorbells in the kernel (KVM_IOEVENTFD: a guest's
 * queue notify wakes the vsock worker without a vCPU exit to user space) and without them,
 * in the same run on the same kernel and initramfs. The two VMs are booted one after the
 * other and measured in alternating rounds, so machine drift hits both alike. Prints a table
 * and, with --json, every figure.
 *
 * Usage: exec_bench [--calls N] [--rounds R] [--json]   (needs a guest image: voidbox image build)
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/host_env.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define EB_DEFAULT_CALLS 50u
#define EB_DEFAULT_ROUNDS 4u
#define EB_MAX_CALLS 10000u
#define EB_MAX_ROUNDS 100u
#define EB_MEMORY_MB 256u
#define EB_ERROR_MAX 1024
#define EB_EXIT_USAGE 2
#define EB_EXIT_FAILED 1
#define EB_NSEC_PER_USEC 1000.0
#define EB_NSEC_PER_SEC 1000000000ULL
#define EB_PERCENTILE_90 0.9
#define EB_VARIANTS 2

struct eb_variant {
	const char *name;
	bool no_doorbells;
	struct sandbox *sandbox;
	double *samples_us;
	size_t count;
};

static uint64_t eb_now_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * EB_NSEC_PER_SEC + (uint64_t)now.tv_nsec;
}

static int eb_compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int eb_exec_true(struct sandbox *sandbox, double *us)
{
	static char program[] = "true";
	struct proto_exec_request req = { .program = program };
	struct proto_exec_response resp = { 0 };
	char err[EB_ERROR_MAX];
	uint64_t started = eb_now_ns();
	int rc = sandbox_exec(sandbox, &req, NULL, NULL, &resp, err, sizeof(err));

	*us = (double)(eb_now_ns() - started) / EB_NSEC_PER_USEC;
	if (rc == 0 && resp.exit_code != 0)
		rc = -ECANCELED;
	if (rc < 0)
		fprintf(stderr, "exec_bench: exec of true failed: %s\n", err);
	proto_exec_response_free(&resp);
	return rc;
}

static int eb_boot(struct eb_variant *variant, const struct guest_image_paths *image)
{
	struct sandbox_config cfg = {
		.kernel_path = image->kernel,
		.initramfs_path = image->initramfs[0] ? image->initramfs : NULL,
		.memory_mb = EB_MEMORY_MB,
		.no_doorbells = variant->no_doorbells,
	};
	char err[EB_ERROR_MAX];

	if (sandbox_start(&cfg, &variant->sandbox, err, sizeof(err)) < 0) {
		fprintf(stderr, "exec_bench: the %s VM did not start: %s\n", variant->name, err);
		return -1;
	}
	return 0;
}

static double eb_percentile(const struct eb_variant *v, double fraction)
{
	size_t index = (size_t)(fraction * (double)(v->count - 1));

	return v->samples_us[index];
}

static void eb_report(struct eb_variant variants[EB_VARIANTS], bool json)
{
	double median[EB_VARIANTS];

	for (int i = 0; i < EB_VARIANTS; i++) {
		qsort(variants[i].samples_us, variants[i].count, sizeof(double), eb_compare);
		median[i] = eb_percentile(&variants[i], 0.5);
	}
	if (json) {
		json_t *root = json_object();

		for (int i = 0; i < EB_VARIANTS; i++)
			json_object_set_new(root, variants[i].name,
					    json_pack("{s:I, s:f, s:f, s:f, s:f}", "calls",
						      (json_int_t)variants[i].count, "min_us",
						      variants[i].samples_us[0], "median_us",
						      median[i], "p90_us",
						      eb_percentile(&variants[i], EB_PERCENTILE_90),
						      "max_us",
						      variants[i].samples_us[variants[i].count - 1]));
		json_object_set_new(root, "median_ratio_without_over_with",
				    json_real(median[1] / median[0]));
		json_dumpf(root, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(root);
		return;
	}
	printf("%-22s %8s %10s %10s %10s\n", "exec round trip", "calls", "min us", "median us",
	       "p90 us");
	for (int i = 0; i < EB_VARIANTS; i++)
		printf("%-22s %8zu %10.0f %10.0f %10.0f\n", variants[i].name, variants[i].count,
		       variants[i].samples_us[0], median[i],
		       eb_percentile(&variants[i], EB_PERCENTILE_90));
	printf("median without / with doorbells: %.2f\n", median[1] / median[0]);
}

static int eb_parse(int argc, char **argv, unsigned int *calls, unsigned int *rounds, bool *json)
{
	static const struct option options[] = {
		{ "calls", required_argument, NULL, 'c' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	int option;

	while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
		unsigned long value;
		char *end;

		if (option == 'j') {
			*json = true;
			continue;
		}
		if (option != 'c' && option != 'r')
			return -1;
		errno = 0;
		value = strtoul(optarg, &end, 10);
		if (errno || *end || optarg[0] == '-' || value == 0 ||
		    value > (option == 'c' ? EB_MAX_CALLS : EB_MAX_ROUNDS))
			return -1;
		*(option == 'c' ? calls : rounds) = (unsigned int)value;
	}
	return optind == argc ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct eb_variant variants[EB_VARIANTS] = {
		{ .name = "with doorbells" },
		{ .name = "without doorbells", .no_doorbells = true },
	};
	unsigned int calls = EB_DEFAULT_CALLS, rounds = EB_DEFAULT_ROUNDS;
	struct guest_image_paths image;
	char err[EB_ERROR_MAX];
	bool json = false;
	int status = EB_EXIT_FAILED;

	if (eb_parse(argc, argv, &calls, &rounds, &json) < 0) {
		fprintf(stderr, "usage: exec_bench [--calls N] [--rounds R] [--json]\n");
		return EB_EXIT_USAGE;
	}
	host_env_apply();
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "exec_bench: %s\n", err);
		return EB_EXIT_FAILED;
	}
	for (int i = 0; i < EB_VARIANTS; i++) {
		variants[i].samples_us = calloc((size_t)calls * rounds, sizeof(double));
		if (!variants[i].samples_us || eb_boot(&variants[i], &image) < 0)
			goto out;
	}
	for (unsigned int round = 0; round < rounds; round++)
		for (int i = 0; i < EB_VARIANTS; i++)
			for (unsigned int call = 0; call < calls; call++) {
				struct eb_variant *v = &variants[i];

				if (eb_exec_true(v->sandbox, &v->samples_us[v->count]) < 0)
					goto out;
				v->count++;
			}
	eb_report(variants, json);
	status = 0;
out:
	for (int i = 0; i < EB_VARIANTS; i++) {
		sandbox_destroy(variants[i].sandbox, status != 0);
		free(variants[i].samples_us);
	}
	return status;
}
