/*
 * Kernel command line parsing for the agent: the session secret, the boot clock, and per-module
 * parameters. Pure functions over a string so unit tests feed synthetic command lines; only
 * cmdline_read_file touches /proc.
 */
#ifndef VOIDBOX_AGENT_CMDLINE_H
#define VOIDBOX_AGENT_CMDLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CMDLINE_SECRET_SIZE 32
#define CMDLINE_SECRET_KEY "voidbox.secret="
#define CMDLINE_CLOCK_KEY "voidbox.clock="

struct agent_cmdline {
	bool has_secret;
	uint8_t secret[CMDLINE_SECRET_SIZE];
	bool has_clock;
	int64_t clock_epoch_secs;
};

/*
 * Fills out from a whitespace-separated command line. A secret that is not exactly 64 hex digits
 * and a clock that is not a non-negative decimal integer are treated as absent (the last valid
 * occurrence wins). Returns 0.
 */
int cmdline_parse(const char *text, struct agent_cmdline *out);

/* Decodes exactly 2*out_len hex digits (either case). Returns 0 or -EINVAL. */
int cmdline_hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t out_len);

/*
 * Collects every "<module>.<param>=<value>" token for module (dashes and underscores are the
 * same, as the kernel treats them) into "param=value param2=value2", the form finit_module
 * takes. Returns the length written, or -ENOSPC when out is too small.
 */
int cmdline_module_params(const char *text, const char *module, char *out, size_t out_size);

/* Reads a whole (small) text file such as /proc/cmdline into a NUL-terminated heap string. */
int cmdline_read_file(const char *path, char **out);

#endif
