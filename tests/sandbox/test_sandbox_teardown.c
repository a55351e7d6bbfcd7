/*
 * What a failed sandbox leaves on the host, for a process that opens many (the daemon's runs,
 * a pipeline's boxes). The VMM is the stand-in program (vmm_stand_in.c), which refuses every
 * cold boot, so sandbox_start fails after its runtime directory, its VMM process and its
 * control socket exist, with no KVM VM made; a restore of a snapshot that is gone fails
 * earlier, after the runtime directory only. Many of each, one after another, leave no
 * directory under the runtime base, no descriptor, thread or child process; a guest that wrote
 * to its console before it stopped keeps its runtime directory with that console, which the
 * failure's error sends the user to. A boot the stand-in accepts but whose guest never answers
 * is given up by its caller's cancel (sandbox_config.cancelled) long before its boot timeout.
 *
 * sandbox_start checks /dev/kvm before anything else (opening it, no VM): a host without one
 * skips, saying so; a host whose KVM emulates standard guests passes the check as
 * VOIDBOX_ALLOW_SLOW_KVM=1 would let it, since no VM boots here.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "dir_entries.h"
#include "harness.h"
#include "sandbox/sandbox.h"
#include "sandbox/vmm_process.h"
#include "vmm/kvm.h"

#define TEST_STAND_IN_ENV "VOIDBOX_TEST_VMM_STAND_IN"
#define TEST_ERR_MAX 4096
#define TEST_WHY_MAX 512
/* enough rounds that a per-start leak stands out from anything done once */
#define TEST_ROUNDS 40
#define TEST_RUNTIME_TEMPLATE "/tmp/voidbox-test-teardown-XXXXXX"
#define TEST_KERNEL_NAME "kernel"
#define TEST_MISSING_SNAPSHOT_NAME "no-such-snapshot"
#define TEST_SERIAL_NAME "serial.log"
#define TEST_FILE_MODE 0600
/* what the stand-in writes to the console of a boot whose command line holds it */
#define TEST_CONSOLE_WORD "voidbox.test_console=1"
#define TEST_GUEST_MEMORY_MB 64
/* what makes the stand-in accept a boot and play a guest that never answers */
#define TEST_SILENT_WORD "voidbox.test_silent_guest=1"
/* ... having written to its console, which a cancelled start does not keep */
#define TEST_SILENT_WITH_CONSOLE_WORDS TEST_SILENT_WORD " " TEST_CONSOLE_WORD
/* a boot timeout the cancelled boots must end well inside */
#define TEST_LONG_BOOT_TIMEOUT_MS 120000
#define TEST_CANCEL_AFTER_MS 300
/* a cancelled boot ends within an attempt or two (seconds): this bound only catches a wait */
#define TEST_CANCELLED_BOOT_MAX_MS 30000

static char test_base[] = TEST_RUNTIME_TEMPLATE; /* holds the kernel and the runtime base */
static char test_runtime[PATH_MAX];
static char test_kernel[PATH_MAX];

/* Whether this process has any child, running or a zombie. */
static bool has_children(void)
{
	return !(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

static struct sandbox_host_settings test_host(void)
{
	return (struct sandbox_host_settings){ .runtime_base = test_runtime,
					       .allow_slow_kvm = true };
}

/* A cold boot's config for the stand-in, which refuses it. */
static struct sandbox_config test_boot(const struct sandbox_host_settings *host,
				       enum sandbox_vmm_placement placement, const char *extra)
{
	return (struct sandbox_config){ .kernel_path = test_kernel,
					.memory_mb = TEST_GUEST_MEMORY_MB,
					.extra_cmdline = extra,
					.host = host,
					.vmm_placement = placement };
}

static void test_failed_starts_leave_nothing(void)
{
	struct sandbox_host_settings host = test_host();
	const enum sandbox_vmm_placement placements[] = { SANDBOX_VMM_OWN_PROCESS,
							  SANDBOX_VMM_OWN_PROCESS_SNAPSHOTS };
	int fds = dir_entry_count("/proc/self/fd"), threads = dir_entry_count("/proc/self/task");
	char err[TEST_ERR_MAX];

	for (size_t p = 0; p < sizeof(placements) / sizeof(placements[0]); p++) {
		struct sandbox_config cfg = test_boot(&host, placements[p], NULL);

		for (int i = 0; i < TEST_ROUNDS; i++) {
			struct sandbox *sandbox = NULL;

			err[0] = '\0';
			CHECK(sandbox_start(&cfg, &sandbox, err, sizeof(err)) < 0);
			CHECK(sandbox == NULL);
			CHECK(strstr(err, "not a restore") != NULL);
		}
	}
	CHECK_INT_EQ(dir_entry_count(test_runtime), 0);
	CHECK_INT_EQ(dir_entry_count("/proc/self/fd"), fds);
	CHECK_INT_EQ(dir_entry_count("/proc/self/task"), threads);
	CHECK(!has_children());
}

static void test_failed_restores_leave_nothing(void)
{
	struct sandbox_host_settings host = test_host();
	struct sandbox_restore_config cfg = { .host = &host,
					      .vmm_placement = SANDBOX_VMM_OWN_PROCESS };
	int fds = dir_entry_count("/proc/self/fd");
	char missing[PATH_MAX], err[TEST_ERR_MAX];

	snprintf(missing, sizeof(missing), "%s/%s", test_base, TEST_MISSING_SNAPSHOT_NAME);
	cfg.snapshot_dir = missing;
	for (int i = 0; i < TEST_ROUNDS; i++) {
		struct sandbox *sandbox = NULL;

		CHECK(sandbox_start_from_snapshot(&cfg, &sandbox, err, sizeof(err)) < 0);
		CHECK(sandbox == NULL);
	}
	CHECK_INT_EQ(dir_entry_count(test_runtime), 0);
	CHECK_INT_EQ(dir_entry_count("/proc/self/fd"), fds);
	CHECK(!has_children());
}

/* The one runtime directory under the base, removed with its console once checked. */
static void check_and_remove_kept_console(void)
{
	DIR *d = opendir(test_runtime);
	struct dirent *entry;
	char dir[PATH_MAX], console[PATH_MAX];
	struct stat st;
	int kept = 0;

	CHECK(d != NULL);
	if (!d)
		return;
	while ((entry = readdir(d))) {
		if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
			continue;
		kept++;
		if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", test_runtime, entry->d_name) >=
			    sizeof(dir) ||
		    (size_t)snprintf(console, sizeof(console), "%s/%s", dir, TEST_SERIAL_NAME) >=
			    sizeof(console)) {
			CHECK(!"a runtime directory's path fits PATH_MAX");
			continue;
		}
		CHECK(stat(console, &st) == 0 && st.st_size > 0);
		CHECK_INT_EQ(dir_entry_count(dir), 1); /* the console, not the socket */
		unlink(console);
		rmdir(dir);
	}
	closedir(d);
	CHECK_INT_EQ(kept, 1);
}

static void test_failed_start_keeps_a_console_with_output(void)
{
	struct sandbox_host_settings host = test_host();
	struct sandbox_config cfg = test_boot(&host, SANDBOX_VMM_OWN_PROCESS, TEST_CONSOLE_WORD);
	struct sandbox *sandbox = NULL;
	char err[TEST_ERR_MAX];

	CHECK(sandbox_start(&cfg, &sandbox, err, sizeof(err)) < 0);
	check_and_remove_kept_console();
	CHECK(!has_children());
}

/* sandbox_config.cancelled: the caller gives the start up once after_ms have passed. */
struct test_give_up {
	long long first_asked_ms; /* 0 until asked */
	int after_ms;
	int asked;
};

static bool test_give_up_after(void *opaque)
{
	struct test_give_up *give_up = opaque;
	long long now = (long long)clock_monotonic_ms();

	if (!give_up->asked++)
		give_up->first_asked_ms = now;
	return now - give_up->first_asked_ms >= give_up->after_ms;
}

/*
 * A signal while a guest boots and never answers: the start ends with -ECANCELED soon after,
 * not at the boot timeout, and leaves nothing behind, not even the console the guest wrote
 * to (the cancel explains the failure). A cancel that came before the start starts no VMM at
 * all (the hook is asked once, before the VMM would start).
 */
static void test_cancel_ends_a_boot_that_never_answers(void)
{
	struct sandbox_host_settings host = test_host();
	int fds = dir_entry_count("/proc/self/fd"), threads = dir_entry_count("/proc/self/task");
	const int waits_ms[] = { TEST_CANCEL_AFTER_MS, 0 };
	char err[TEST_ERR_MAX];

	for (size_t i = 0; i < sizeof(waits_ms) / sizeof(waits_ms[0]); i++) {
		struct sandbox_config cfg = test_boot(&host, SANDBOX_VMM_OWN_PROCESS,
						      TEST_SILENT_WITH_CONSOLE_WORDS);
		struct test_give_up give_up = { .after_ms = waits_ms[i] };
		struct sandbox *sandbox = NULL;
		long long started = (long long)clock_monotonic_ms();
		long long took;

		cfg.boot_timeout_ms = TEST_LONG_BOOT_TIMEOUT_MS;
		cfg.cancelled = test_give_up_after;
		cfg.cancelled_opaque = &give_up;
		err[0] = '\0';
		CHECK_INT_EQ(sandbox_start(&cfg, &sandbox, err, sizeof(err)), -ECANCELED);
		took = (long long)clock_monotonic_ms() - started;
		CHECK(sandbox == NULL);
		CHECK(strstr(err, "cancelled") != NULL);
		CHECK(took < TEST_CANCELLED_BOOT_MAX_MS);
		if (waits_ms[i])
			CHECK(give_up.asked > 1); /* asked again while it waited for the agent */
		else
			CHECK_INT_EQ(give_up.asked, 1);
		CHECK(!has_children());
	}
	CHECK_INT_EQ(dir_entry_count(test_runtime), 0);
	CHECK_INT_EQ(dir_entry_count("/proc/self/fd"), fds);
	CHECK_INT_EQ(dir_entry_count("/proc/self/task"), threads);
}

/* A restore given up before it starts launches nothing, whatever its snapshot. */
static void test_cancel_before_a_restore_launches_nothing(void)
{
	struct sandbox_host_settings host = test_host();
	struct test_give_up give_up = { .after_ms = 0 };
	struct sandbox_restore_config cfg = { .host = &host,
					      .vmm_placement = SANDBOX_VMM_OWN_PROCESS,
					      .cancelled = test_give_up_after,
					      .cancelled_opaque = &give_up };
	struct sandbox *sandbox = NULL;
	char missing[PATH_MAX], err[TEST_ERR_MAX];

	snprintf(missing, sizeof(missing), "%s/%s", test_base, TEST_MISSING_SNAPSHOT_NAME);
	cfg.snapshot_dir = missing;
	CHECK_INT_EQ(sandbox_start_from_snapshot(&cfg, &sandbox, err, sizeof(err)), -ECANCELED);
	CHECK(sandbox == NULL);
	CHECK(strstr(err, "cancelled") != NULL); /* not the missing snapshot: nothing looked */
	CHECK_INT_EQ(give_up.asked, 1);
	CHECK_INT_EQ(dir_entry_count(test_runtime), 0);
	CHECK(!has_children());
}

/* The base directory with an empty file for a kernel (the stand-in never reads it). */
static void setup(void)
{
	FILE *kernel;

	if (!mkdtemp(test_base))
		harness_fail_setup("cannot create a temporary directory");
	snprintf(test_runtime, sizeof(test_runtime), "%s/runtime", test_base);
	snprintf(test_kernel, sizeof(test_kernel), "%s/%s", test_base, TEST_KERNEL_NAME);
	if (mkdir(test_runtime, S_IRWXU) < 0 || !(kernel = fopen(test_kernel, "w")))
		harness_fail_setup("cannot create the runtime base and kernel file");
	fclose(kernel);
}

static void cleanup(void)
{
	unlink(test_kernel);
	rmdir(test_runtime);
	rmdir(test_base);
}

int main(int argc, char **argv)
{
	const char *stand_in = getenv(TEST_STAND_IN_ENV);
	char why[TEST_WHY_MAX];

	harness_select(argc, argv);
	if (HARNESS_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot run the VMM process (seccomp-filtered threads); "
				 "the plain and ASan builds run this");
	if (!stand_in || vmm_process_use_binary(stand_in) < 0)
		harness_fail_setup(TEST_STAND_IN_ENV " must name the stand-in VMM program");
	if (!kvm_probe_usable(why, sizeof(why)) && !strstr(why, "emulates")) {
		snprintf(why + strlen(why), sizeof(why) - strlen(why),
			 ": sandbox_start refuses to start before it makes anything to tear down");
		harness_skip_all(why);
	}
	log_set_level(LOG_LEVEL_ERROR);
	setup();
	RUN_TEST(test_failed_starts_leave_nothing);
	RUN_TEST(test_failed_restores_leave_nothing);
	RUN_TEST(test_failed_start_keeps_a_console_with_output);
	RUN_TEST(test_cancel_ends_a_boot_that_never_answers);
	RUN_TEST(test_cancel_before_a_restore_launches_nothing);
	cleanup();
	return harness_finish();
}
