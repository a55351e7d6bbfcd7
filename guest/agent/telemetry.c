/*
 * Each metric has its own small /proc reader so one missing file (no eth0, no file-nr) leaves
 * that field zero instead of failing the batch. CPU percent is the busy share of the jiffies
 * elapsed since the previous sample of the same subscription (0 for the first one).
 */
#include "telemetry.h"

#include "agent_log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TELEMETRY_FILE_MAX 8192
#define TELEMETRY_DECIMAL_BASE 10
#define TELEMETRY_INITIAL_PROCESSES 32
#define TELEMETRY_KIB 1024u
#define TELEMETRY_PERCENT 100.0
#define TELEMETRY_MS_PER_SEC 1000u
#define TELEMETRY_NS_PER_MS 1000000u
#define TELEMETRY_NET_IFACE "eth0:"
#define TELEMETRY_NET_TX_FIELD 8
/* /proc/PID/stat fields after "(comm) ": state is index 0, utime 11, stime 12. */
#define TELEMETRY_STAT_UTIME_INDEX 11
#define TELEMETRY_STAT_STIME_INDEX 12
#define TELEMETRY_CPU_FIELDS 7
#define TELEMETRY_CPU_IDLE 3
#define TELEMETRY_CPU_IOWAIT 4

struct telemetry_job {
	struct agent_conn *conn;
	uint32_t request_id;
	uint64_t interval_ms;
	struct telemetry_sampler sampler;
};

/* Reads a small /proc file into buf (NUL-terminated). Returns length or -errno. */
static ssize_t telemetry_read(const char *root, const char *name, char *buf, size_t size)
{
	char path[PATH_MAX];
	ssize_t n, used = 0;
	int fd;

	if (snprintf(path, sizeof(path), "%s/%s", root, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((size_t)used < size - 1) {
		n = read(fd, buf + used, size - 1 - (size_t)used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += n;
	}
	close(fd);
	buf[used] = '\0';
	return used;
}

static void telemetry_cpu(struct telemetry_sampler *sampler, const char *stat,
			  struct proto_system_metrics *system)
{
	uint64_t fields[TELEMETRY_CPU_FIELDS] = { 0 }, total = 0, idle;
	const char *line = strstr(stat, "cpu ");
	const char *running = strstr(stat, "procs_running ");

	if (running)
		system->procs_running = (uint32_t)strtoul(running + strlen("procs_running "),
							   NULL, TELEMETRY_DECIMAL_BASE);
	if (!line)
		return;
	line += strlen("cpu ");
	for (int i = 0; i < TELEMETRY_CPU_FIELDS; i++) {
		char *end;

		fields[i] = strtoull(line, &end, TELEMETRY_DECIMAL_BASE);
		line = end;
		total += fields[i];
	}
	idle = fields[TELEMETRY_CPU_IDLE] + fields[TELEMETRY_CPU_IOWAIT];
	if (sampler->has_previous && total > sampler->previous_total) {
		uint64_t dt = total - sampler->previous_total;
		uint64_t di = idle >= sampler->previous_idle ? idle - sampler->previous_idle : 0;

		system->cpu_percent = di >= dt ? 0.0 : TELEMETRY_PERCENT * (double)(dt - di) / (double)dt;
	}
	sampler->previous_total = total;
	sampler->previous_idle = idle;
	sampler->has_previous = true;
}

static uint64_t meminfo_value(const char *meminfo, const char *key)
{
	const char *p = strstr(meminfo, key);

	return p ? strtoull(p + strlen(key), NULL, TELEMETRY_DECIMAL_BASE) * TELEMETRY_KIB : 0;
}

static void telemetry_net(const char *netdev, struct proto_system_metrics *system)
{
	const char *line = strstr(netdev, TELEMETRY_NET_IFACE);
	char *end;

	if (!line)
		return;
	line += strlen(TELEMETRY_NET_IFACE);
	for (int i = 0; i <= TELEMETRY_NET_TX_FIELD; i++) {
		uint64_t value = strtoull(line, &end, TELEMETRY_DECIMAL_BASE);

		if (end == line)
			return;
		if (i == 0)
			system->net_rx_bytes = value;
		if (i == TELEMETRY_NET_TX_FIELD)
			system->net_tx_bytes = value;
		line = end;
	}
}

static void telemetry_system(struct telemetry_sampler *sampler,
			     struct proto_system_metrics *system)
{
	char buf[TELEMETRY_FILE_MAX];

	memset(system, 0, sizeof(*system));
	if (telemetry_read(sampler->proc_root, "stat", buf, sizeof(buf)) > 0)
		telemetry_cpu(sampler, buf, system);
	if (telemetry_read(sampler->proc_root, "meminfo", buf, sizeof(buf)) > 0) {
		uint64_t total = meminfo_value(buf, "MemTotal:");
		uint64_t available = meminfo_value(buf, "MemAvailable:");

		system->memory_total_bytes = total;
		system->memory_used_bytes = total > available ? total - available : 0;
	}
	if (telemetry_read(sampler->proc_root, "net/dev", buf, sizeof(buf)) > 0)
		telemetry_net(buf, system);
	if (telemetry_read(sampler->proc_root, "sys/fs/file-nr", buf, sizeof(buf)) > 0)
		system->open_fds = (uint32_t)strtoul(buf, NULL, TELEMETRY_DECIMAL_BASE);
}

static bool telemetry_is_pid(const char *name)
{
	if (!*name)
		return false;
	for (; *name; name++)
		if (!isdigit((unsigned char)*name))
			return false;
	return true;
}

/* Parses /proc/PID/stat: "pid (comm) S ..." where comm may contain spaces and parens. */
static int telemetry_parse_pid_stat(const char *stat, struct proto_process_metrics *proc)
{
	const char *open = strchr(stat, '('), *close = strrchr(stat, ')');
	const char *p;
	uint64_t utime = 0, stime = 0;

	if (!open || !close || close < open || close[1] != ' ' || !close[2])
		return -EINVAL;
	proc->comm = strndup(open + 1, (size_t)(close - open - 1));
	if (!proc->comm)
		return -ENOMEM;
	proc->state = close[2];
	p = close + 2;
	for (int i = 0; i <= TELEMETRY_STAT_STIME_INDEX && p; i++) {
		if (i == TELEMETRY_STAT_UTIME_INDEX)
			utime = strtoull(p, NULL, TELEMETRY_DECIMAL_BASE);
		if (i == TELEMETRY_STAT_STIME_INDEX)
			stime = strtoull(p, NULL, TELEMETRY_DECIMAL_BASE);
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	proc->cpu_jiffies = utime + stime;
	return 0;
}

static int telemetry_process(struct telemetry_sampler *sampler, const char *pid,
			     struct proto_process_metrics *proc)
{
	char name[PATH_MAX], buf[TELEMETRY_FILE_MAX];
	unsigned long long size_pages = 0, resident_pages = 0;

	memset(proc, 0, sizeof(*proc));
	snprintf(name, sizeof(name), "%s/cmdline", pid);
	if (!sampler->include_kernel_threads &&
	    telemetry_read(sampler->proc_root, name, buf, sizeof(buf)) <= 0)
		return -ENOENT;
	snprintf(name, sizeof(name), "%s/stat", pid);
	if (telemetry_read(sampler->proc_root, name, buf, sizeof(buf)) <= 0)
		return -ENOENT;
	if (telemetry_parse_pid_stat(buf, proc) < 0)
		return -EINVAL;
	proc->pid = (uint32_t)strtoul(pid, NULL, TELEMETRY_DECIMAL_BASE);
	snprintf(name, sizeof(name), "%s/statm", pid);
	if (telemetry_read(sampler->proc_root, name, buf, sizeof(buf)) > 0 &&
	    sscanf(buf, "%llu %llu", &size_pages, &resident_pages) == 2)
		proc->rss_bytes = resident_pages * (uint64_t)sysconf(_SC_PAGESIZE);
	return 0;
}

static int telemetry_processes(struct telemetry_sampler *sampler,
			       struct proto_telemetry_batch *batch)
{
	size_t capacity = 0;
	struct dirent *de;
	DIR *dir = opendir(sampler->proc_root);

	if (!dir)
		return -errno;
	while ((de = readdir(dir))) {
		struct proto_process_metrics proc;

		if (!telemetry_is_pid(de->d_name) || telemetry_process(sampler, de->d_name, &proc))
			continue;
		if (batch->processes_count == capacity) {
			size_t grown_capacity = capacity ? 2 * capacity : TELEMETRY_INITIAL_PROCESSES;
			struct proto_process_metrics *grown =
				realloc(batch->processes, grown_capacity * sizeof(*grown));

			if (!grown) {
				free(proc.comm);
				closedir(dir);
				return -ENOMEM;
			}
			batch->processes = grown;
			capacity = grown_capacity;
		}
		batch->processes[batch->processes_count++] = proc;
	}
	closedir(dir);
	return 0;
}

int telemetry_sample(struct telemetry_sampler *sampler, struct proto_telemetry_batch *batch)
{
	struct timespec now;

	memset(batch, 0, sizeof(*batch));
	clock_gettime(CLOCK_REALTIME, &now);
	batch->seq = sampler->seq++;
	batch->timestamp_ms = (uint64_t)now.tv_sec * TELEMETRY_MS_PER_SEC +
			      (uint64_t)now.tv_nsec / TELEMETRY_NS_PER_MS;
	batch->has_system = true;
	telemetry_system(sampler, &batch->system);
	return telemetry_processes(sampler, batch);
}

static void telemetry_sleep_ms(uint64_t ms)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ms / TELEMETRY_MS_PER_SEC),
		.tv_nsec = (long)(ms % TELEMETRY_MS_PER_SEC) * (long)TELEMETRY_NS_PER_MS,
	};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void *telemetry_thread_main(void *arg)
{
	struct telemetry_job *job = arg;

	for (;;) {
		struct proto_telemetry_batch batch;
		uint8_t *body = NULL;
		size_t len;
		int err;

		/* A partial sample (unreadable /proc entries) is still worth sending. */
		if (telemetry_sample(&job->sampler, &batch) < 0)
			agent_debug("telemetry %u: partial sample", job->request_id);
		err = proto_telemetry_batch_encode(&batch, &body, &len);
		proto_telemetry_batch_free(&batch);
		if (!err)
			err = conn_send(job->conn, PROTO_MSG_TELEMETRY_DATA, job->request_id, body,
					len);
		free(body);
		if (err || atomic_load(&job->conn->closed))
			break;
		telemetry_sleep_ms(job->interval_ms);
	}
	agent_debug("telemetry %u: stopped", job->request_id);
	conn_put(job->conn);
	free(job);
	return NULL;
}

int telemetry_start(struct agent_conn *conn, uint32_t request_id, const uint8_t *body,
		    size_t len)
{
	struct proto_subscribe_telemetry subscription = { .interval_ms = 1000 };
	struct telemetry_job *job;
	const char *why = NULL;
	pthread_t thread;
	int err;

	if (len > 0 && proto_subscribe_telemetry_decode(body, len, &subscription, &why) != 0) {
		agent_warn("telemetry %u: malformed SubscribeTelemetry: %s", request_id,
			   why ? why : "?");
		return -EPROTO;
	}
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->conn = conn;
	job->request_id = request_id;
	job->interval_ms = subscription.interval_ms < TELEMETRY_MIN_INTERVAL_MS ?
				   TELEMETRY_MIN_INTERVAL_MS : subscription.interval_ms;
	job->sampler.proc_root = "/proc";
	job->sampler.include_kernel_threads = subscription.include_kernel_threads;
	proto_subscribe_telemetry_free(&subscription);
	conn_get(conn);
	err = pthread_create(&thread, NULL, telemetry_thread_main, job);
	if (err) {
		conn_put(conn);
		free(job);
		return -err;
	}
	pthread_detach(thread);
	return 0;
}
