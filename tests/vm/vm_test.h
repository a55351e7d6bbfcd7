/*
 * What VM test programs share: the check that VMs can boot here at all, and sh(), one shell
 * script in a sandbox, the way they look at the guest. Header-only so each test program, a
 * single file, includes it without a library.
 */
#ifndef VOIDBOX_TESTS_VM_TEST_H
#define VOIDBOX_TESTS_VM_TEST_H

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "harness.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"

#define VM_TEST_REASON_MAX 1024

/*
 * Line-buffers stdout, reads VOIDBOX_LOG_LEVEL, and skips the whole program (harness_skip_vm:
 * a failure under VOIDBOX_REQUIRE_VM=1) unless /dev/kvm runs standard guests and a guest image
 * resolves into *image.
 */
static inline void vm_test_require_vm(struct guest_image_paths *image)
{
	char why[VM_TEST_REASON_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	log_init_from_env();
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	if (guest_image_resolve(NULL, NULL, image, why, sizeof(why)) < 0)
		harness_skip_vm(why);
}

/*
 * Runs `sh -c script` as the sandbox user; returns its exit code (or -1 when the RPC failed)
 * and its stdout without trailing newlines in out (may be NULL). A failing script's stderr
 * goes to the test's stderr.
 */
static inline int sh(struct sandbox *box, const char *script, char *out, size_t out_len)
{
	struct proto_exec_request req;
	struct proto_exec_response resp;
	char *args[] = { "-c", (char *)script };
	char err[VM_TEST_REASON_MAX];
	int code;

	memset(&req, 0, sizeof(req));
	memset(&resp, 0, sizeof(resp));
	req.program = "sh";
	req.args = args;
	req.args_count = 2;
	if (sandbox_exec(box, &req, NULL, NULL, &resp, err, sizeof(err)) < 0) {
		fprintf(stderr, "  exec '%s' failed: %s\n", script, err);
		return -1;
	}
	code = resp.exit_code;
	if (out && out_len) {
		size_t n = resp.stdout_data.len < out_len - 1 ? resp.stdout_data.len : out_len - 1;

		memcpy(out, resp.stdout_data.data, n);
		while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
			n--;
		out[n] = '\0';
	}
	if (code != 0 && resp.stderr_data.len)
		fprintf(stderr, "  '%s' said: %.*s\n", script, (int)resp.stderr_data.len,
			(const char *)resp.stderr_data.data);
	proto_exec_response_free(&resp);
	return code;
}

/* The names the VMM gives the threads it confines (src/vmm/thread_filter.h, one per role). */
static const char *const vm_test_vmm_thread_names[] = {
	"vcpu", "vsock-worker", "blk-worker", "fs-worker", "net-worker", "channel-reader",
};

#define VM_TEST_STATUS_MAX 4096
#define VM_TEST_COMM_MAX 32

/*
 * Reads /proc/self/task/TID/FILE into out (NUL-terminated, trailing newline kept); false when
 * the thread is gone.
 */
static inline bool vm_test_task_file(const char *tid, const char *file, char *out, size_t len)
{
	char path[PATH_MAX];
	FILE *stream;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%s/%s", tid, file);
	stream = fopen(path, "r");
	if (!stream)
		return false;
	n = fread(out, 1, len - 1, stream);
	fclose(stream);
	out[n] = '\0';
	return n > 0;
}

/*
 * Walks every thread of this process (the VMM and its host side run in it): each thread that
 * has one of vm_test_vmm_thread_names must show Seccomp: 2 in its status; each one that does
 * not is named on stderr and counted in the result. *named (may be NULL) is how many threads'
 * names start with `name`, so a caller also proves the role it cares about was there.
 */
static inline int vm_test_unconfined_vmm_threads(const char *name, int *named)
{
	DIR *tasks = opendir("/proc/self/task");
	struct dirent *task;
	int unconfined = 0;

	if (named)
		*named = 0;
	if (!tasks)
		return -1;
	while ((task = readdir(tasks))) {
		char comm[VM_TEST_COMM_MAX], status[VM_TEST_STATUS_MAX];
		bool vmm = false;

		if (task->d_name[0] == '.' ||
		    !vm_test_task_file(task->d_name, "comm", comm, sizeof(comm)))
			continue;
		comm[strcspn(comm, "\n")] = '\0';
		for (size_t i = 0; i < sizeof(vm_test_vmm_thread_names) /
					       sizeof(vm_test_vmm_thread_names[0]); i++)
			vmm |= strncmp(comm, vm_test_vmm_thread_names[i],
				       strlen(vm_test_vmm_thread_names[i])) == 0;
		if (!vmm)
			continue;
		if (named && strncmp(comm, name, strlen(name)) == 0)
			(*named)++;
		if (!vm_test_task_file(task->d_name, "status", status, sizeof(status)) ||
		    !strstr(status, "\nSeccomp:\t2\n")) {
			fprintf(stderr, "  thread %s (%s) is not filtered\n", task->d_name, comm);
			unconfined++;
		}
	}
	closedir(tasks);
	return unconfined;
}

/* Checks every confined VMM thread of this process, and that at least one is `name`. */
static inline void vm_test_check_threads_confined(const char *name)
{
	int named = 0;

	CHECK_INT_EQ(vm_test_unconfined_vmm_threads(name, &named), 0);
	CHECK(named >= 1);
	fprintf(stderr, "  %d %s thread(s), every VMM thread filtered\n", named, name);
}

#endif
