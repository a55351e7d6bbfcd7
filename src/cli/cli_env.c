/*
 * The host environment variables of the CLI's commands, read in this one place: the layers
 * below the CLI take what they need as sandbox_host_settings, daemon_env, the image build's
 * archive_mtime and spec load options, and never call getenv (host_env.c hands the store and
 * the logger theirs). A value that does not parse is ignored with a warning that names it, so
 * a typo never silently changes a timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/host_env.h"
#include "common/log.h"
#include "common/parse_number.h"
#include "daemon/daemon.h"
#include "runtime/spec.h"
#include "sandbox/sandbox.h"

#define CLI_ENV_BOOT_TIMEOUT "VOIDBOX_BOOT_TIMEOUT_SECS"
#define CLI_ENV_RUNTIME_DIR "XDG_RUNTIME_DIR"
#define CLI_ENV_ALLOW_SLOW_KVM "VOIDBOX_ALLOW_SLOW_KVM"
#define CLI_ENV_CONNECT_DEADLINE "VOID_BOX_CONNECT_DEADLINE_SECS"
#define CLI_ENV_LIVENESS "VOID_BOX_LIVENESS_SECS"
#define CLI_ENV_BOOT_TIMEOUT_MAX_SECS (24u * 3600u)
#define CLI_ENV_CONNECT_MIN_SECS 30u
#define CLI_ENV_CONNECT_MAX_SECS 3600u
#define CLI_ENV_LIVENESS_MAX_SECS 3600u
#define CLI_ENV_MS_PER_SEC 1000
#define CLI_ENV_MAX_PARALLEL_VMS "VOIDBOX_MAX_PARALLEL_VMS"
#define CLI_ENV_MAX_PARALLEL_LIMIT 64u
#define CLI_ENV_SOURCE_DATE_EPOCH "SOURCE_DATE_EPOCH"
#define CLI_ENV_CONFIG_HOME "XDG_CONFIG_HOME"
#define CLI_ENV_HOME "HOME"
#define CLI_ENV_STATE_DIR "VOIDBOX_STATE_DIR"
#define CLI_ENV_DECIMAL 10

/* Seconds from name within [min, max] as milliseconds; 0 when unset or ignored. */
static int cli_env_seconds_ms(const char *name, uint64_t min, uint64_t max, bool *set)
{
	const char *text = getenv(name);
	uint64_t secs = 0;

	*set = false;
	if (!text || !*text)
		return 0;
	if (parse_decimal_u64(text, min, max, &secs) < 0) {
		log_warn("cli", "ignoring %s='%s': expected a whole number of seconds from %llu to "
			 "%llu", name, text, (unsigned long long)min, (unsigned long long)max);
		return 0;
	}
	*set = true;
	return (int)(secs * CLI_ENV_MS_PER_SEC);
}

const struct sandbox_host_settings *cli_host_settings(void)
{
	static struct sandbox_host_settings settings;
	static bool read;
	const char *allow_slow;
	bool set;

	if (read)
		return &settings;
	read = true;
	settings.boot_timeout_ms = cli_env_seconds_ms(CLI_ENV_BOOT_TIMEOUT, 1,
						      CLI_ENV_BOOT_TIMEOUT_MAX_SECS, &set);
	settings.runtime_base = getenv(CLI_ENV_RUNTIME_DIR);
	allow_slow = getenv(CLI_ENV_ALLOW_SLOW_KVM);
	settings.allow_slow_kvm = allow_slow && strcmp(allow_slow, "1") == 0;
	settings.connect_deadline_ms = cli_env_seconds_ms(CLI_ENV_CONNECT_DEADLINE,
							  CLI_ENV_CONNECT_MIN_SECS,
							  CLI_ENV_CONNECT_MAX_SECS, &set);
	settings.liveness_timeout_ms = cli_env_seconds_ms(CLI_ENV_LIVENESS, 0,
							  CLI_ENV_LIVENESS_MAX_SECS, &set);
	if (set && settings.liveness_timeout_ms == 0)
		settings.liveness_timeout_ms = -1; /* 0 seconds turns the check off */
	return &settings;
}

unsigned cli_max_parallel_vms(void)
{
	const char *text = getenv(CLI_ENV_MAX_PARALLEL_VMS);
	uint64_t value = 0;

	if (!text || !*text)
		return 0;
	if (parse_decimal_u64(text, 1, CLI_ENV_MAX_PARALLEL_LIMIT, &value) < 0) {
		log_warn("cli", "ignoring %s='%s': expected a number from 1 to %u",
			 CLI_ENV_MAX_PARALLEL_VMS, text, CLI_ENV_MAX_PARALLEL_LIMIT);
		return 0;
	}
	return (unsigned)value;
}

uint32_t cli_source_date_epoch(void)
{
	const char *epoch = getenv(CLI_ENV_SOURCE_DATE_EPOCH);

	return epoch ? (uint32_t)strtoul(epoch, NULL, CLI_ENV_DECIMAL) : 0;
}

const struct daemon_env *cli_daemon_env(void)
{
	static struct daemon_env env;

	env.runtime_dir = getenv(CLI_ENV_RUNTIME_DIR);
	env.config_home = getenv(CLI_ENV_CONFIG_HOME);
	env.home = getenv(CLI_ENV_HOME);
	env.state_dir = getenv(CLI_ENV_STATE_DIR);
	return &env;
}

struct spec *cli_spec_load(const char *path, struct spec_diagnostics *diag)
{
	static const struct spec_load_options options = { .env_lookup = host_env_lookup };

	return spec_load_file_with(path, &options, diag);
}
