/*
 * Workflows in a real VM: ONE local box serves every engine check (the shipped example, a
 * diamond whose middle steps must run at the same time, a failing step, a timeout), then one
 * `voidbox run --sandbox-mode local` runs the example end to end as a user would. Boots are
 * the expensive part under nested KVM, so the suite boots exactly two VMs.
 *
 * Parallelism is observed in the guest, not timed: each middle step of the diamond creates its
 * own marker and waits, in a bounded loop, for the other's; both can only succeed when they ran
 * concurrently. Needs a /dev/kvm that runs standard guests and a built guest image
 * (tests/vm/run-vm-suite arranges the first; without either it exits 77 and says why, or
 * fails under VOIDBOX_REQUIRE_VM=1).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/host_env.h"
#include "common/log.h"
#include "harness.h"
#include "runtime/box.h"
#include "runtime/run_report.h"
#include "runtime/spec.h"
#include "runtime/workflow.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"

#define TEST_VM_MEMORY_MB 512
#define TEST_VM_VCPUS 2
#define TEST_ERR_MAX 1024
#define TEST_PATH_MAX 512
#define TEST_CLI_OUTPUT_MAX 65536

static struct box *test_box;
static const char *voidbox_cli;
static const char *examples_dir;

static struct spec *load_text(const char *text)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	spec_diagnostics_init(&diag);
	spec = spec_parse_buffer(text, strlen(text), "vm-test.yaml", NULL, &diag);
	if (!spec)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	return spec;
}

static int run_in_box(const struct spec *spec, struct run_report *report)
{
	run_report_init(report, spec->name, spec->kind);
	return workflow_run_in_box(spec, test_box, NULL, report);
}

static void test_example_in_vm(void)
{
	char path[TEST_PATH_MAX];
	struct spec_diagnostics diag;
	struct run_report report;
	struct spec *spec;

	snprintf(path, sizeof(path), "%s/workflow.yaml", examples_dir);
	spec_diagnostics_init(&diag);
	spec = spec_load_file(path, &diag);
	spec_diagnostics_free(&diag);
	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_in_box(spec, &report), 0);
	CHECK(report.success);
	CHECK_STR_EQ(report.output, "HELLO FROM WORKFLOW\n");
	CHECK_STR_EQ(report.sandbox_mode, "local");
	run_report_free(&report);
	spec_free(spec);
}

/* b and c each leave a marker and wait (at most ~30 s) for the other's. */
static const char diamond_spec[] =
	"kind: workflow\nname: vm-diamond\nworkflow:\n  steps:\n"
	"    - name: a\n"
	"      run: {program: sh, args: ['-c', 'rm -f /tmp/wf-b /tmp/wf-c; echo start']}\n"
	"    - name: b\n      depends_on: [a]\n"
	"      run: {program: sh, args: ['-c', 'touch /tmp/wf-b; i=0; "
	"while [ ! -e /tmp/wf-c ]; do i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.1; done; "
	"echo b-saw-c']}\n"
	"    - name: c\n      depends_on: [a]\n"
	"      run: {program: sh, args: ['-c', 'touch /tmp/wf-c; i=0; "
	"while [ ! -e /tmp/wf-b ]; do i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.1; done; "
	"echo c-saw-b']}\n"
	"    - name: d\n      depends_on: [b, c]\n"
	"      run: {program: cat, stdin_from: b}\n";

static void test_diamond_parallel_in_vm(void)
{
	struct spec *spec = load_text(diamond_spec);
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_in_box(spec, &report), 0);
	CHECK(report.success);
	if (report.error)
		fprintf(stderr, "  error: %s\n", report.error);
	CHECK_STR_EQ(run_report_find_stage(&report, "b")->output, "b-saw-c\n");
	CHECK_STR_EQ(run_report_find_stage(&report, "c")->output, "c-saw-b\n");
	CHECK_STR_EQ(report.output, "b-saw-c\n");
	run_report_free(&report);
	spec_free(spec);
}

static void test_failing_step_in_vm(void)
{
	static const char text[] =
		"kind: workflow\nname: vm-fail\nworkflow:\n  steps:\n"
		"    - name: check\n"
		"      run: {program: sh, args: ['-c', 'echo checking; echo bad input >&2; exit 5']}\n"
		"    - name: after\n      depends_on: [check]\n      run: {program: echo}\n";
	struct spec *spec = load_text(text);
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_in_box(spec, &report), -ECANCELED);
	CHECK(!report.success);
	CHECK_STR_EQ(report.error, "step \"check\" failed with exit code 5: bad input");
	CHECK_STR_EQ(run_report_find_stage(&report, "check")->output, "checking\n");
	CHECK(!run_report_find_stage(&report, "after")->ran);
	run_report_free(&report);
	spec_free(spec);
}

static void test_timeout_in_vm(void)
{
	static const char text[] =
		"kind: workflow\nname: vm-timeout\nworkflow:\n  steps:\n"
		"    - name: stuck\n      timeout_secs: 2\n      run: {program: sleep, args: ['60']}\n";
	struct spec *spec = load_text(text);
	struct run_report report;
	const struct run_stage *stuck;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_in_box(spec, &report), -ECANCELED);
	stuck = run_report_find_stage(&report, "stuck");
	CHECK(stuck->ran && !stuck->success);
	CHECK_STR_EQ(stuck->error, "timed out after 2s");
	CHECK(report.error && strstr(report.error, "step \"stuck\" timed out after 2s"));
	run_report_free(&report);
	spec_free(spec);
}

static void read_file_into(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	size_t used = 0;
	ssize_t n;

	buf[0] = '\0';
	if (fd < 0)
		return;
	while (used + 1 < size && (n = read(fd, buf + used, size - 1 - used)) > 0)
		used += (size_t)n;
	buf[used] = '\0';
	close(fd);
}

/* `voidbox --output json run --file examples/workflow.yaml --sandbox-mode local`. */
static void test_cli_run_local(void)
{
	static char out[TEST_CLI_OUTPUT_MAX], err[TEST_CLI_OUTPUT_MAX];
	char out_path[] = "/tmp/vm-workflow-out-XXXXXX", err_path[] = "/tmp/vm-workflow-err-XXXXXX";
	char spec_path[TEST_PATH_MAX];
	int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path), status = -1;
	json_t *json;
	pid_t pid;

	snprintf(spec_path, sizeof(spec_path), "%s/workflow.yaml", examples_dir);
	CHECK(out_fd >= 0 && err_fd >= 0);
	pid = fork();
	if (pid == 0) {
		dup2(out_fd, STDOUT_FILENO);
		dup2(err_fd, STDERR_FILENO);
		execl(voidbox_cli, voidbox_cli, "--output", "json", "--log-level", "info", "run",
		      "--file", spec_path, "--sandbox-mode", "local", (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	close(out_fd);
	close(err_fd);
	read_file_into(out_path, out, sizeof(out));
	read_file_into(err_path, err, sizeof(err));
	unlink(out_path);
	unlink(err_path);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(strstr(err, "step 2/2: \"transform\" running...") != NULL);
	json = json_loads(out, 0, NULL);
	CHECK(json != NULL);
	if (!json) {
		fprintf(stderr, "  stdout: %s\n  stderr: %s\n", out, err);
		return;
	}
	CHECK(json_is_true(json_object_get(json, "success")));
	CHECK_STR_EQ(json_string_value(json_object_get(json, "output")), "HELLO FROM WORKFLOW\n");
	CHECK_STR_EQ(json_string_value(json_object_get(json, "sandbox_mode")), "local");
	json_decref(json);
}

int main(int argc, char **argv)
{
	struct box_config cfg = {
		.mode = BOX_MODE_LOCAL,
		.name = "vm-workflow",
		.memory_mb = TEST_VM_MEMORY_MB,
		.vcpus = TEST_VM_VCPUS,
	};
	struct guest_image_paths image;
	char why[TEST_ERR_MAX], err[TEST_ERR_MAX];

	host_env_apply();
	if (argc < 3) {
		fprintf(stderr, "usage: %s PATH-TO-voidbox EXAMPLES-DIR\n", argv[0]);
		return 2;
	}
	voidbox_cli = argv[1];
	examples_dir = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	log_set_level(LOG_LEVEL_INFO);
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0)
		harness_skip_vm(err);

	if (box_open(&cfg, &test_box, err, sizeof(err)) < 0) {
		fprintf(stderr, "FAIL: the test VM did not start: %s\n", err);
		printf("0 passed, 1 failed\n");
		return 1;
	}
	RUN_TEST(test_example_in_vm);
	RUN_TEST(test_diamond_parallel_in_vm);
	RUN_TEST(test_failing_step_in_vm);
	RUN_TEST(test_timeout_in_vm);
	box_close(test_box, harness_tests_failed > 0);

	RUN_TEST(test_cli_run_local);
	return harness_finish();
}
