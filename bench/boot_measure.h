/*
 * The measuring half of the boot benchmark, kept apart from the process juggling so it can be
 * unit-tested on fixed input: VMM memory from /proc/PID/smaps (resident set minus the guest's
 * RAM mappings, which are recognised by their size) and nearest-rank percentiles.
 */
#ifndef VOIDBOX_BENCH_BOOT_MEASURE_H
#define VOIDBOX_BENCH_BOOT_MEASURE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct boot_memory_sample {
	uint64_t total_rss_kb;     /* every mapping's Rss */
	uint64_t guest_rss_kb;     /* Rss of the mappings taken to be guest RAM */
	uint64_t vmm_rss_kb;       /* total minus guest: what the VMM itself costs */
	uint64_t guest_huge_kb;    /* AnonHugePages of the guest RAM mappings (THP backing) */
	unsigned int guest_mappings; /* how many mappings matched the guest RAM size */
};

/*
 * Reads an smaps stream. A mapping counts as guest RAM when its size is exactly
 * guest_ram_bytes (one KVM memory slot backing all of the guest's RAM, the layout of both
 * VMMs measured while the guest fits below the 32-bit PCI hole). Returns 0, -ENOENT when no
 * mapping has that size (the sample would be meaningless), -EIO on unreadable input.
 */
int boot_memory_parse_smaps(FILE *smaps, uint64_t guest_ram_bytes,
			    struct boot_memory_sample *out);
/* The same for a running process: reads /proc/<pid>/smaps. */
int boot_memory_sample_pid(int pid, uint64_t guest_ram_bytes, struct boot_memory_sample *out);

/*
 * Nearest-rank percentile (1..100) of count values; sorts values in place. With 10 samples
 * p50 is the 5th smallest and p95 the largest. Returns 0 for count == 0.
 */
double boot_percentile(double *values, size_t count, unsigned int percent);

/* CLOCK_MONOTONIC in milliseconds, fractional. */
double boot_now_ms(void);

/* The median (nearest rank) of count values, which are left as they are; 0 for none. */
double boot_median(const double *values, size_t count);

/*
 * A benchmark's count option: a whole number in 1..max into *out, else false after a line on
 * stderr naming prog, the flag and what it takes.
 */
bool boot_parse_count(const char *prog, const char *flag, const char *text, unsigned long max,
		      unsigned int *out);

#endif
