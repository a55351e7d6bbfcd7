/*
 * What VM test programs share: the check that VMs can boot here at all, sh(), one shell
 * script in a sandbox, the way they look at the guest, and vm_test_initramfs_extend() (and
 * vm_test_initramfs_with(), its common case), a test image made of the built one plus a few
 * files. Header-only so each test program, a single
 * file, includes it without a library.
 */
#ifndef VOIDBOX_TESTS_VM_TEST_H
#define VOIDBOX_TESTS_VM_TEST_H

#include <errno.h>
#include <net/if.h>
#include <signal.h>
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/host_env.h"
#include "common/log.h"
#include "harness.h"
#include "sandbox/sandbox.h"
#include "store/cpio_newc.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"

#define VM_TEST_REASON_MAX 1024
#define VM_TEST_COPY_CHUNK 65536
#define VM_TEST_BIN_DIR_MODE 0755
#define VM_TEST_BIN_MODE 0755

/* One host file that vm_test_initramfs_with puts at /usr/local/bin/<name>. */
struct vm_test_bin {
	const char *name;
	const char *host_path;
};

static inline int vm_test_sink_write(void *ctx, const void *data, size_t len)
{
	return fwrite(data, 1, len, ctx) == len ? 0 : -EIO;
}

/* Adds the entries of the archive vm_test_initramfs_extend appends; 0 or -errno. */
typedef int (*vm_test_cpio_fill_fn)(struct cpio_writer *writer, const void *ctx);

/*
 * Writes a copy of the initramfs base followed by a second cpio archive that fill writes (the
 * kernel unpacks concatenated archives in order, later entries replacing earlier ones), so a
 * test changes the built image without building one. path is a mkstemp template, filled in.
 */
static inline int vm_test_initramfs_extend(const char *base, vm_test_cpio_fill_fn fill,
					   const void *ctx, char *path)
{
	char buf[VM_TEST_COPY_CHUNK];
	struct cpio_writer writer;
	FILE *in, *out;
	size_t got;
	int fd, rc = 0;

	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	out = fdopen(fd, "wb");
	in = fopen(base, "rb");
	if (!out || !in) {
		if (out)
			fclose(out);
		else
			close(fd);
		if (in)
			fclose(in);
		return -EIO;
	}
	while ((got = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, got, out) != got)
			rc = -EIO;
	fclose(in);
	/* archives start 4-byte aligned; a newc archive's length already is */
	cpio_writer_init(&writer, vm_test_sink_write, out, 0);
	if (rc == 0)
		rc = fill(&writer, ctx);
	if (rc == 0)
		rc = cpio_writer_finish(&writer);
	if (fclose(out) != 0 && rc == 0)
		rc = -EIO;
	return rc;
}

struct vm_test_bins {
	const struct vm_test_bin *bins;
	size_t count;
};

static inline int vm_test_add_bins(struct cpio_writer *writer, const void *ctx)
{
	static const char *const dirs[] = { "usr", "usr/local", "usr/local/bin" };
	const struct vm_test_bins *list = ctx;
	char guest[VM_TEST_REASON_MAX];
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof(dirs) / sizeof(dirs[0]); i++)
		rc = cpio_writer_add_directory(writer, dirs[i], VM_TEST_BIN_DIR_MODE);
	for (size_t i = 0; rc == 0 && i < list->count; i++) {
		snprintf(guest, sizeof(guest), "usr/local/bin/%s", list->bins[i].name);
		rc = cpio_writer_add_file_from_path(writer, guest, VM_TEST_BIN_MODE,
						    list->bins[i].host_path);
	}
	return rc;
}

/*
 * The built image plus bins under /usr/local/bin, so a test gets the mock agent or the guest
 * tools without building an image. path is a mkstemp template, filled in.
 */
static inline int vm_test_initramfs_with(const char *base, const struct vm_test_bin *bins,
					 size_t count, char *path)
{
	const struct vm_test_bins list = { .bins = bins, .count = count };

	return vm_test_initramfs_extend(base, vm_test_add_bins, &list, path);
}
#define VM_TEST_POLL_US (100 * 1000)

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
 * Brings the loopback interface up: L1 of the nested harness starts with it down, and a test
 * whose guests reach host servers at 10.0.2.2 (the host's 127.0.0.1) needs it. 0 or -errno.
 */
static inline int vm_test_loopback_up(void)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int rc = 0;

	if (fd < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		rc = -errno;
	} else if (!(ifr.ifr_flags & IFF_UP)) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
			rc = -errno;
	}
	close(fd);
	return rc;
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

		if (n) /* an empty output may have no buffer at all */
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

/* Seconds on the monotonic clock. */
static inline long vm_test_now_secs(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long)now.tv_sec;
}

/* Waits for a child up to timeout_secs, killing it after; returns its wait status or -1. */
static inline int vm_test_wait_bounded(pid_t pid, long timeout_secs)
{
	long deadline = vm_test_now_secs() + timeout_secs;
	int status;

	while (vm_test_now_secs() < deadline) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		usleep(VM_TEST_POLL_US);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
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

/*
 * How many sandbox runtime directories (voidbox-XXXXXX) the runtime base holds: a command
 * torn down in order leaves none of its own; a killed one leaves its directory to the next
 * sandbox's sweep. -1 when base cannot be read.
 */
static inline int vm_test_count_runtime_dirs(const char *base)
{
	DIR *dir = opendir(base);
	struct dirent *entry;
	int count = 0;

	if (!dir)
		return -1;
	while ((entry = readdir(dir)))
		if (strncmp(entry->d_name, "voidbox-", strlen("voidbox-")) == 0)
			count++;
	closedir(dir);
	return count;
}

#endif
