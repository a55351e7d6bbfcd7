/*
 * What VM test programs share: the check that VMs can boot here at all, and sh(), one shell
 * script in a sandbox, the way they look at the guest. Header-only so each test program, a
 * single file, includes it without a library.
 */
#ifndef VOIDBOX_TESTS_VM_TEST_H
#define VOIDBOX_TESTS_VM_TEST_H

#include <stdio.h>
#include <string.h>

#include "cli/host_env.h"
#include "common/log.h"
#include "harness.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"

#define VM_TEST_REASON_MAX 1024

/*
 * Line-buffers stdout, reads the environment (host_env_apply: VOIDBOX_LOG_LEVEL, VOIDBOX_HOME,
 * VOID_BOX_KERNEL, ...), and skips the whole program (harness_skip_vm:
 * a failure under VOIDBOX_REQUIRE_VM=1) unless /dev/kvm runs standard guests and a guest image
 * resolves into *image.
 */
static inline void vm_test_require_vm(struct guest_image_paths *image)
{
	char why[VM_TEST_REASON_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	host_env_apply();
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

#endif
