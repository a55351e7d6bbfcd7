/*
 * Telemetry sampling against a fake /proc tree: CPU percent from the delta of two samples,
 * memory as MemTotal - MemAvailable, eth0 counters, file-nr, process fields (a comm with a
 * space), and kernel threads (empty cmdline) skipped unless asked for.
 */
#include "telemetry.h"

#include "harness.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char tree[] = "/tmp/voidbox-telemetry-XXXXXX";

static void put(const char *rel, const char *text, size_t len)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tree, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, text, len) == (ssize_t)len);
	close(fd);
}

#define PUT(rel, text) put(rel, text, sizeof(text) - 1)

static void make_dir(const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", tree, rel);
	mkdir(path, 0755);
}

static void build_proc(void)
{
	CHECK(mkdtemp(tree) != NULL);
	make_dir("net");
	make_dir("sys");
	make_dir("sys/fs");
	make_dir("42");
	make_dir("2");
	make_dir("self");
	PUT("stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 100 0 100 700 100 0 0 0 0 0\n"
		    "procs_running 3\nprocs_blocked 0\n");
	PUT("meminfo", "MemTotal:        1000 kB\nMemFree:          100 kB\n"
		       "MemAvailable:     400 kB\n");
	PUT("net/dev", "Inter-|   Receive\n face |bytes packets\n"
		       "    lo: 99 1 0 0 0 0 0 0 99 1 0 0 0 0 0 0\n"
		       "  eth0: 1234 5 0 0 0 0 0 0 5678 6 0 0 0 0 0 0\n");
	PUT("sys/fs/file-nr", "321\t0\t9223372036854775807\n");
	PUT("42/cmdline", "sleep\0" "10\0");
	PUT("42/stat", "42 (my proc) S 1 42 42 0 -1 4194304 100 0 0 0 7 5 0 0 20 0 1 0 100 "
		       "4096 25\n");
	PUT("42/statm", "100 25 10 1 0 20 0\n");
	PUT("2/cmdline", "");
	PUT("2/stat", "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 1 0 0\n");
	PUT("2/statm", "0 0 0 0 0 0 0\n");
}

static void test_sample(void)
{
	struct telemetry_sampler sampler = { .proc_root = tree };
	struct proto_telemetry_batch batch;
	const struct proto_process_metrics *proc;

	CHECK_INT_EQ(telemetry_sample(&sampler, &batch), 0);
	CHECK_INT_EQ(batch.seq, 0);
	CHECK(batch.timestamp_ms > 0);
	CHECK(batch.has_system);
	CHECK(batch.system.cpu_percent == 0.0);
	CHECK_INT_EQ(batch.system.memory_total_bytes, 1000 * 1024);
	CHECK_INT_EQ(batch.system.memory_used_bytes, 600 * 1024);
	CHECK_INT_EQ(batch.system.net_rx_bytes, 1234);
	CHECK_INT_EQ(batch.system.net_tx_bytes, 5678);
	CHECK_INT_EQ(batch.system.procs_running, 3);
	CHECK_INT_EQ(batch.system.open_fds, 321);
	CHECK_INT_EQ(batch.processes_count, 1);
	if (batch.processes_count == 1) {
		proc = &batch.processes[0];
		CHECK_INT_EQ(proc->pid, 42);
		CHECK_STR_EQ(proc->comm, "my proc");
		CHECK_INT_EQ(proc->state, 'S');
		CHECK_INT_EQ(proc->cpu_jiffies, 12);
		CHECK_INT_EQ(proc->rss_bytes, 25 * (uint64_t)sysconf(_SC_PAGESIZE));
	}
	CHECK(batch.trace_context == NULL);
	proto_telemetry_batch_free(&batch);

	PUT("stat", "cpu  200 0 200 800 100 0 0 0 0 0\nprocs_running 1\n");
	CHECK_INT_EQ(telemetry_sample(&sampler, &batch), 0);
	CHECK_INT_EQ(batch.seq, 1);
	CHECK(batch.system.cpu_percent > 66.6 && batch.system.cpu_percent < 66.7);
	CHECK_INT_EQ(batch.system.procs_running, 1);
	proto_telemetry_batch_free(&batch);
}

static void test_kernel_threads_on_request(void)
{
	struct telemetry_sampler sampler = { .proc_root = tree, .include_kernel_threads = true };
	struct proto_telemetry_batch batch;
	bool saw_kthread = false;

	CHECK_INT_EQ(telemetry_sample(&sampler, &batch), 0);
	CHECK_INT_EQ(batch.processes_count, 2);
	for (size_t i = 0; i < batch.processes_count; i++)
		if (batch.processes[i].pid == 2 && strcmp(batch.processes[i].comm, "kthreadd") == 0)
			saw_kthread = true;
	CHECK(saw_kthread);
	proto_telemetry_batch_free(&batch);
}

static void test_missing_sources_leave_zeroes(void)
{
	struct telemetry_sampler sampler = { .proc_root = "/nonexistent/voidbox-proc" };
	struct proto_telemetry_batch batch;

	CHECK(telemetry_sample(&sampler, &batch) < 0);
	CHECK_INT_EQ(batch.system.memory_total_bytes, 0);
	CHECK_INT_EQ(batch.processes_count, 0);
	proto_telemetry_batch_free(&batch);
}

int main(void)
{
	char cmd[PATH_MAX + 16];

	build_proc();
	RUN_TEST(test_sample);
	RUN_TEST(test_kernel_threads_on_request);
	RUN_TEST(test_missing_sources_leave_zeroes);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tree);
	return harness_finish();
}
