/*
 * smaps is read line by line with sscanf because its two line shapes are easy to tell apart:
 * a mapping header starts with "start-end " in hex, a field line with a name and a colon.
 * Only Rss (and AnonHugePages of guest RAM, to show whether THP backs it) matters here;
 * every other field is skipped.
 */
#include "boot_measure.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SMAPS_LINE_MAX 4096
#define SMAPS_PATH_MAX 64
#define PERCENT_MAX 100u
#define MS_PER_SEC 1000.0
#define NS_PER_MS 1e6

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double boot_percentile(double *values, size_t count, unsigned int percent)
{
	size_t rank;

	if (count == 0)
		return 0;
	if (percent > PERCENT_MAX)
		percent = PERCENT_MAX;
	qsort(values, count, sizeof(*values), compare_doubles);
	/* nearest rank: ceil(percent / 100 * count), at least 1 */
	rank = (percent * count + PERCENT_MAX - 1) / PERCENT_MAX;
	if (rank == 0)
		rank = 1;
	return values[rank - 1];
}

double boot_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * MS_PER_SEC + (double)ts.tv_nsec / NS_PER_MS;
}

/* True for a mapping header line; stores the mapping's size. */
static bool smaps_header_size(const char *line, uint64_t *size)
{
	uint64_t start, end;
	int consumed = 0;

	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %n", &start, &end, &consumed) != 2 ||
	    consumed == 0 || end < start)
		return false;
	*size = end - start;
	return true;
}

int boot_memory_parse_smaps(FILE *smaps, uint64_t guest_ram_bytes,
			    struct boot_memory_sample *out)
{
	char line[SMAPS_LINE_MAX];
	bool in_guest_mapping = false;
	uint64_t mapping_size, rss_kb, huge_kb;

	memset(out, 0, sizeof(*out));
	while (fgets(line, sizeof(line), smaps)) {
		if (smaps_header_size(line, &mapping_size)) {
			in_guest_mapping = mapping_size == guest_ram_bytes;
			if (in_guest_mapping)
				out->guest_mappings++;
			continue;
		}
		if (in_guest_mapping &&
		    sscanf(line, "AnonHugePages: %" SCNu64 " kB", &huge_kb) == 1) {
			out->guest_huge_kb += huge_kb;
			continue;
		}
		if (sscanf(line, "Rss: %" SCNu64 " kB", &rss_kb) != 1)
			continue;
		out->total_rss_kb += rss_kb;
		if (in_guest_mapping)
			out->guest_rss_kb += rss_kb;
	}
	if (ferror(smaps))
		return -EIO;
	if (out->guest_mappings == 0)
		return -ENOENT;
	out->vmm_rss_kb = out->total_rss_kb - out->guest_rss_kb;
	return 0;
}

int boot_memory_sample_pid(int pid, uint64_t guest_ram_bytes, struct boot_memory_sample *out)
{
	char path[SMAPS_PATH_MAX];
	FILE *smaps;
	int rc;

	snprintf(path, sizeof(path), "/proc/%d/smaps", pid);
	smaps = fopen(path, "re");
	if (!smaps)
		return -errno;
	rc = boot_memory_parse_smaps(smaps, guest_ram_bytes, out);
	fclose(smaps);
	return rc;
}

double boot_median(const double *values, size_t count)
{
	double *copy = count ? malloc(count * sizeof(*copy)) : NULL;
	double median;

	if (!copy)
		return 0;
	memcpy(copy, values, count * sizeof(*copy));
	median = boot_percentile(copy, count, PERCENT_MAX / 2);
	free(copy);
	return median;
}

bool boot_parse_count(const char *prog, const char *flag, const char *text, unsigned long max,
		      unsigned int *out)
{
	char *end;
	unsigned long value;

	errno = 0;
	value = strtoul(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || value == 0 || value > max) {
		fprintf(stderr, "%s: %s takes 1..%lu, not '%s'\n", prog, flag, max, text);
		return false;
	}
	*out = (unsigned int)value;
	return true;
}
