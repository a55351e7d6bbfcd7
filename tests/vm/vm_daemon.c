/*
 * The daemon stops a run's VM when the run is cancelled. `voidbox serve` (argv[1]) runs a
 * `mode: local` workflow whose second step prints a line and sleeps in the guest; the line
 * must reach the run's events while the step still runs (output streams as it is printed,
 * not when the stage ends). Then the run's process is checked to hold
 * the VMM (a voidbox process with more than one thread: the vCPU and device threads), the run
 * is cancelled (before that, /telemetry has guest samples labelled with the running step, not
 * the workflow's box), and afterwards nothing of it is left: the run's process is gone, no process
 * is in its process group, and the daemon has no child at all. /proc is read for all three.
 * The cancel is orderly, not a kill: the run's process ends on the daemon's SIGTERM with the
 * report of what ran (the first step's output, the cancel as its error), and the VM's runtime
 * directory, in a runtime base of the test's own (XDG_RUNTIME_DIR), is removed at once.
 *
 * Then a `mode: service` agent (the mock claude-code, argv[2], with MOCK_CLAUDE_SERVE=1, in
 * the default image plus the mock: vm_test_initramfs_with) publishes its output file while the run
 * is `running` (output_ready, the output-file route), is stopped with POST .../stop, and the
 * run ends `succeeded` with terminal_reason `stopped`, its VM gone the same way. While it
 * runs, /telemetry has guest samples of its box from the guest agent, and its stream-json
 * events reach the run's events parsed ([tool_use] ...) before the stop. Two boots.
 * Needs a /dev/kvm that runs standard guests and a built guest image (skips, or fails under
 * VOIDBOX_REQUIRE_VM=1, without them).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/host_env.h"
#include "harness.h"
#include "daemon/serve_harness.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"
#include "vm_test.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 1024
#define TEST_STAT_MAX 1024
#define TEST_GRACE_SECS 10
#define TEST_DECIMAL 10
#define TEST_READY_ROUNDS 5 /* x SERVE_WAIT_ROUNDS polls for a service's output */

/* The two fields of /proc/PID/stat (pid (comm) state ppid pgrp ...) the checks read. */
enum proc_field {
	PROC_FIELD_PPID,
	PROC_FIELD_PGRP,
};

static const char vm_spec[] =
	"api_version: v1\nkind: workflow\nname: vm-cancel\n"
	"sandbox:\n  mode: local\n  memory_mb: 512\n  vcpus: 1\n"
	"workflow:\n  steps:\n"
	"    - name: first\n      run:\n        program: echo\n        args: [\"booted\"]\n"
	"    - name: nap\n      depends_on: [first]\n      run:\n        program: sh\n"
	"        args: [\"-c\", \"echo early-output; sleep 600\"]\n";

static const char service_spec[] =
	"api_version: v1\nkind: agent\nname: vm-service\n"
	"sandbox:\n  mode: local\n  memory_mb: 512\n  vcpus: 1\n"
	"  env:\n    MOCK_CLAUDE_SERVE: \"1\"\n"
	"agent:\n  prompt: Serve the answer\n  skills: [\"agent:claude-code\"]\n"
	"  mode: service\n  output_file: /workspace/output.json\n";

static const char *voidbox_path;
static const char *mock_agent_path;
static char temp_dir[] = "/tmp/voidbox-vm-daemon-XXXXXX";
static char test_initramfs[] = "/tmp/voidbox-vm-daemon-initramfs-XXXXXX";
/* the runs' XDG_RUNTIME_DIR, where their VMs' runtime directories are made */
static char runtime_base[TEST_PATH_MAX];

/* PROC_FIELD_PPID or PROC_FIELD_PGRP of /proc/PID/stat; -1 when the process is gone. */
static long proc_stat_field(pid_t pid, enum proc_field field)
{
	char path[TEST_PATH_MAX], text[TEST_STAT_MAX];
	long ppid, pgrp;
	char state;
	char *p;
	size_t len;
	FILE *file;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	file = fopen(path, "r");
	if (!file)
		return -1;
	len = fread(text, 1, sizeof(text) - 1, file);
	fclose(file);
	text[len] = '\0';
	p = strrchr(text, ')'); /* the command name may hold spaces and parentheses */
	if (!p || sscanf(p + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3)
		return -1;
	return field == PROC_FIELD_PPID ? ppid : pgrp;
}

/* Processes (not zombies) whose field equals value: the members of a group, or children. */
static int count_processes_with(enum proc_field field, long value)
{
	struct dirent *entry;
	DIR *proc = opendir("/proc");
	int count = 0;

	if (!proc)
		return -1;
	while ((entry = readdir(proc))) {
		pid_t pid = (pid_t)strtol(entry->d_name, NULL, TEST_DECIMAL);

		if (pid <= 0 || process_probe_gone(pid))
			continue;
		if (proc_stat_field(pid, field) == value) {
			fprintf(stderr, "  process %d is still there (%s %ld)\n", (int)pid,
				field == PROC_FIELD_PPID ? "child of" : "in group", value);
			count++;
		}
	}
	closedir(proc);
	return count;
}

static int count_threads(pid_t pid)
{
	char path[TEST_PATH_MAX];
	struct dirent *entry;
	DIR *tasks;
	int count = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	tasks = opendir(path);
	if (!tasks)
		return 0;
	while ((entry = readdir(tasks)))
		if (entry->d_name[0] != '.')
			count++;
	closedir(tasks);
	return count;
}

static struct served served_daemon;

/* True once the run has a log.chunk from stage with text while the run is not yet ended. */
static bool wait_live_line(const struct served *daemon, const char *run_id, const char *stage,
			   const char *text)
{
	char path[TEST_PATH_MAX];
	bool seen = false, ended = false;
	long status;

	snprintf(path, sizeof(path), "/v1/runs/%s/events", run_id);
	for (int i = 0; i < SERVE_WAIT_ROUNDS && !seen && !ended; i++) {
		json_t *events = call(daemon, "GET", path, NULL, &status);
		json_t *event;
		size_t index;

		json_array_foreach(events, index, event) {
			const char *type = json_string_value(json_object_get(event, "event_type"));
			const char *name = json_string_value(json_object_get(event, "stage_name"));
			const char *message = json_string_value(json_object_get(event, "message"));

			if (type && strcmp(type, "log.chunk") == 0 && name &&
			    strcmp(name, stage) == 0 && message && strcmp(message, text) == 0)
				seen = true;
			if (type && strcmp(type, "log.closed") == 0)
				ended = true;
		}
		json_decref(events);
		if (!seen && !ended)
			serve_pause();
	}
	return seen && !ended;
}

/*
 * True once the run's telemetry has a guest sample of stage with the guest's memory total;
 * false as soon as the run has ended without one.
 */
static bool wait_guest_sample(const struct served *daemon, const char *run_id, const char *stage)
{
	char path[TEST_PATH_MAX];
	bool seen = false;
	long status;

	snprintf(path, sizeof(path), "/v1/runs/%s/telemetry?stage_name=%s", run_id, stage);
	for (int i = 0; i < SERVE_WAIT_ROUNDS && !seen; i++) {
		json_t *answer = call(daemon, "GET", path, NULL, &status);
		json_t *run = get_run(daemon, run_id);
		bool ended = state_is_terminal(run);
		json_t *sample;
		size_t index;

		json_decref(run);
		json_array_foreach(json_object_get(answer, "samples"), index, sample) {
			json_t *guest = json_object_get(sample, "guest");

			if (json_integer_value(json_object_get(guest, "memory_total_bytes")) > 0 &&
			    json_is_number(json_object_get(guest, "cpu_percent")))
				seen = true;
		}
		json_decref(answer);
		if (seen || ended)
			break;
		serve_pause();
	}
	return seen;
}

static void test_cancel_stops_the_vm(void)
{
	struct served *daemon = &served_daemon;
	json_t *body = json_pack("{s:s, s:s, s:{s:i}}", "spec", vm_spec, "run_id", "vm-cancel-1",
				 "policy", "cancel_grace_period_secs", TEST_GRACE_SECS);
	char *text = json_dumps(body, JSON_COMPACT);
	json_t *answer, *run, *events, *report;
	long status;
	pid_t pid;

	answer = call(daemon, "POST", "/v1/runs", text, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_decref(answer);
	pid = wait_stage_running(daemon, "vm-cancel-1", "nap");
	CHECK(pid > 0);
	CHECK(wait_live_line(daemon, "vm-cancel-1", "nap", "early-output"));
	/* the workflow's box is named vm-cancel; its guest samples are labelled with the step */
	CHECK(wait_guest_sample(daemon, "vm-cancel-1", "nap"));
	CHECK_INT_EQ(vm_test_count_runtime_dirs(runtime_base), 1); /* the run's VM */
	if (pid > 0) {
		CHECK_INT_EQ(proc_stat_field(pid, PROC_FIELD_PPID), daemon->pid);
		CHECK_INT_EQ(proc_stat_field(pid, PROC_FIELD_PGRP), pid);
		CHECK(count_threads(pid) > 1); /* the VMM's vCPU and device threads */
	}
	answer = call(daemon, "POST", "/v1/runs/vm-cancel-1/cancel", "{\"reason\":\"vm test\"}",
		      &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(answer, "state")), "cancelled");
	json_decref(answer);
	if (pid > 0) {
		wait_gone(pid);
		CHECK_INT_EQ(count_processes_with(PROC_FIELD_PGRP, pid), 0);
	}
	CHECK_INT_EQ(count_processes_with(PROC_FIELD_PPID, daemon->pid), 0);
	run = get_run(daemon, "vm-cancel-1");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "status")), "cancelled");
	CHECK_STR_EQ(json_string_value(json_object_get(
			     json_object_get(json_object_get(run, "stage_states"), "first"), "status")),
		     "succeeded");
	/* ended in order by the SIGTERM: the report of what ran, and no runtime directory left */
	report = json_object_get(run, "report");
	CHECK(strstr(json_string_value(json_object_get(report, "error")) ?: "",
		     "the run was cancelled by SIGTERM") != NULL);
	CHECK_STR_EQ(json_string_value(json_object_get(
			     json_array_get(json_object_get(report, "stages"), 0), "output")),
		     "booted\n");
	CHECK_INT_EQ(json_integer_value(json_object_get(run, "exit_code")), 128 + SIGTERM);
	CHECK_INT_EQ(vm_test_count_runtime_dirs(runtime_base), 0);
	json_decref(run);
	events = call(daemon, "GET", "/v1/runs/vm-cancel-1/events", NULL, &status);
	CHECK(json_array_size(events) > 0);
	json_decref(events);
	if (harness_checks_failed_in_test)
		serve_show_run(daemon, "vm-cancel-1");
	json_decref(body);
	free(text);
}

static void test_service_agent_stops_on_request(void)
{
	struct served *daemon = &served_daemon;
	json_t *body = json_pack("{s:s, s:s, s:{s:i}}", "spec", service_spec, "run_id",
				 "vm-service-1", "policy", "cancel_grace_period_secs",
				 TEST_GRACE_SECS);
	char *text = json_dumps(body, JSON_COMPACT);
	struct daemon_response response;
	char err[TEST_ERR_MAX];
	json_t *answer, *run;
	json_int_t ready_id, stop_id, tool_id;
	bool ready = false;
	long status;
	pid_t pid;

	answer = call(daemon, "POST", "/v1/runs", text, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	json_decref(answer);
	pid = wait_stage_running(daemon, "vm-service-1", "vm-service");
	CHECK(pid > 0);
	/* provisioning the agent takes several execs; a nested guest may need more than one bound */
	for (int round = 0; round < TEST_READY_ROUNDS && !ready; round++) {
		ready = wait_output_ready_running(daemon, "vm-service-1");
		run = get_run(daemon, "vm-service-1");
		if (state_is_terminal(run))
			round = TEST_READY_ROUNDS;
		json_decref(run);
	}
	CHECK(ready);
	CHECK_INT_EQ(daemon_client_request(&daemon->client, "GET",
					   "/v1/runs/vm-service-1/stages/vm-service/output-file",
					   NULL, &response, err, sizeof(err)),
		     0);
	CHECK_INT_EQ(response.status, SERVE_HTTP_OK);
	CHECK(response.body && strstr(response.body, "voidbox-mock-claude"));
	daemon_response_free(&response);
	if (pid > 0)
		CHECK(count_threads(pid) > 1); /* still running its VM */
	/* the guest agent's telemetry reaches the daemon while the service runs */
	CHECK(wait_guest_sample(daemon, "vm-service-1", "vm-service"));
	answer = call(daemon, "POST", "/v1/runs/vm-service-1/stop", NULL, &status);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	CHECK_STR_EQ(json_string_value(json_object_get(answer, "state")), "succeeded");
	json_decref(answer);
	if (pid > 0) {
		wait_gone(pid);
		CHECK_INT_EQ(count_processes_with(PROC_FIELD_PGRP, pid), 0);
	}
	CHECK_INT_EQ(count_processes_with(PROC_FIELD_PPID, daemon->pid), 0);
	run = get_run(daemon, "vm-service-1");
	CHECK_STR_EQ(json_string_value(json_object_get(run, "terminal_reason")), "stopped");
	CHECK_STR_EQ(json_string_value(json_object_get(
			     json_object_get(json_object_get(run, "stage_states"), "vm-service"),
			     "status")),
		     "succeeded");
	json_decref(run);
	ready_id = first_event_id(daemon, "vm-service-1", "stage.output_ready", NULL, NULL);
	stop_id = first_event_id(daemon, "vm-service-1", "run.stop_requested", NULL, NULL);
	CHECK(ready_id > 0 && stop_id > ready_id);
	/* the agent's stream-json arrived parsed while it still ran (before the stop) */
	tool_id = first_event_id(daemon, "vm-service-1", "log.chunk", "vm-service", "[tool_use] ");
	CHECK(tool_id > 0 && tool_id < stop_id);
	if (harness_checks_failed_in_test)
		serve_show_run(daemon, "vm-service-1");
	json_decref(body);
	free(text);
}

int main(int argc, char **argv)
{
	char why[TEST_ERR_MAX], err[TEST_ERR_MAX], state_dir[TEST_PATH_MAX];
	char socket_url[TEST_PATH_MAX];
	struct guest_image_paths image;
	char command[TEST_PATH_MAX + 16];

	if (argc < 3) {
		fprintf(stderr, "usage: %s PATH-TO-voidbox PATH-TO-voidbox-mock-claude\n", argv[0]);
		return 2;
	}
	voidbox_path = argv[1];
	mock_agent_path = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	host_env_apply();
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0)
		harness_skip_vm(err);
	if (!mkdtemp(temp_dir))
		harness_fail_setup("cannot create a temporary directory");
	if (vm_test_initramfs_with(image.initramfs, &(struct vm_test_bin){ "claude-code", mock_agent_path }, 1, test_initramfs) < 0)
		harness_fail_setup("cannot build the initramfs with the mock agent");
	/* the daemon's runs inherit these: every run boots the default image plus the mock */
	setenv(GUEST_IMAGE_ENV_INITRAMFS, test_initramfs, 1);
	setenv(GUEST_IMAGE_ENV_KERNEL, image.kernel, 1);
	snprintf(runtime_base, sizeof(runtime_base), "%s/run", temp_dir);
	if (mkdir(runtime_base, 0700) < 0 || setenv("XDG_RUNTIME_DIR", runtime_base, 1) < 0)
		harness_fail_setup("cannot make the runs' runtime base");
	snprintf(state_dir, sizeof(state_dir), "%s/state", temp_dir);
	snprintf(socket_url, sizeof(socket_url), "unix://%s/d.sock", temp_dir);
	if (!serve_start(&served_daemon, voidbox_path, state_dir, socket_url, NULL))
		harness_fail_setup("voidbox serve did not start");
	RUN_TEST(test_cancel_stops_the_vm);
	RUN_TEST(test_service_agent_stops_on_request);
	CHECK_INT_EQ(serve_stop(&served_daemon, SIGTERM), 0);
	unlink(test_initramfs);
	snprintf(command, sizeof(command), "rm -rf '%s'", temp_dir);
	if (system(command) != 0)
		fprintf(stderr, "cannot remove %s\n", temp_dir);
	return harness_finish();
}
