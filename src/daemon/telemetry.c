/*
 * Telemetry of a run: host samples of its process and its direct children, which together are
 * the VMM (a cold-booted box's VM runs in a VMM process the run forks, src/sandbox/
 * vmm_process.h; a restored one in the run's own process), and the guest samples its
 * `voidbox run` relays from the guest agent. Both become rows of the run's telemetry table;
 * GET /v1/runs/{id}/telemetry reads them. A host sample is RSS (statm's resident pages), CPU
 * (utime + stime since the previous sample over the wall time between them) and the bytes the
 * processes made the block layer read and write (/proc/PID/io, readable for our own
 * descendants), each summed over the run's process and its children (a VM may run in a VMM
 * process of its own). A guest sample carries the name of the box it came from; the daemon
 * records it under the stage it belongs to (daemon_telemetry_labels), since a workflow's steps
 * share one box named after the spec.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon_internal.h"

#define TELEMETRY_PROC_PATH_MAX 64
#define TELEMETRY_STAT_MAX 1024
#define TELEMETRY_PERCENT 100.0
#define TELEMETRY_MS_PER_SEC 1000.0
/* the run's process and at most this many children (its VMM processes) */
#define TELEMETRY_FAMILY_MAX 64
#define TELEMETRY_CHILDREN_MAX 4096
/* fields of /proc/PID/stat after "(comm) ": state is 1, utime 12, stime 13 */
#define TELEMETRY_STAT_UTIME_FIELD 12
#define TELEMETRY_STAT_STIME_FIELD 13
#define TELEMETRY_MS_PER_SECOND 1000u
#define TELEMETRY_RFC3339_SECONDS "%Y-%m-%dT%H:%M:%S"

static int telemetry_read(pid_t pid, const char *name, char *text, size_t size)
{
	char path[TELEMETRY_PROC_PATH_MAX];
	size_t len;
	FILE *file;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	file = fopen(path, "re");
	if (!file)
		return -errno;
	len = fread(text, 1, size - 1, file);
	fclose(file);
	text[len] = '\0';
	return 0;
}

/* utime + stime in clock ticks, from after the command name (which may hold spaces). */
static int telemetry_cpu_ticks(pid_t pid, uint64_t *ticks)
{
	char text[TELEMETRY_STAT_MAX];
	unsigned long long utime = 0, stime = 0;
	char *p;
	int field = 1;

	if (telemetry_read(pid, "stat", text, sizeof(text)) < 0 || !(p = strrchr(text, ')')))
		return -ENOENT;
	for (p = strtok(p + 1, " "); p; p = strtok(NULL, " "), field++) {
		if (field == TELEMETRY_STAT_UTIME_FIELD)
			utime = strtoull(p, NULL, 10);
		else if (field == TELEMETRY_STAT_STIME_FIELD)
			stime = strtoull(p, NULL, 10);
	}
	if (field <= TELEMETRY_STAT_STIME_FIELD)
		return -EPROTO;
	*ticks = utime + stime;
	return 0;
}

static uint64_t telemetry_rss_bytes(pid_t pid)
{
	char text[TELEMETRY_STAT_MAX];
	unsigned long long size = 0, resident = 0;

	if (telemetry_read(pid, "statm", text, sizeof(text)) < 0 ||
	    sscanf(text, "%llu %llu", &size, &resident) != 2)
		return 0;
	return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* read_bytes and write_bytes of /proc/PID/io; 0 when it cannot be read. */
static void telemetry_io_bytes(pid_t pid, uint64_t *read_bytes, uint64_t *write_bytes)
{
	char text[TELEMETRY_STAT_MAX];
	const char *line;
	unsigned long long value;

	*read_bytes = *write_bytes = 0;
	if (telemetry_read(pid, "io", text, sizeof(text)) < 0)
		return;
	if ((line = strstr(text, "\nread_bytes:")) && sscanf(line, "\nread_bytes: %llu", &value) == 1)
		*read_bytes = value;
	if ((line = strstr(text, "\nwrite_bytes:")) &&
	    sscanf(line, "\nwrite_bytes: %llu", &value) == 1)
		*write_bytes = value;
}

/* pid, then the children of each of its threads (/proc/PID/task/TID/children); the count. */
static size_t telemetry_family(pid_t pid, pid_t family[TELEMETRY_FAMILY_MAX])
{
	char path[TELEMETRY_PROC_PATH_MAX], children[TELEMETRY_CHILDREN_MAX];
	struct dirent *task;
	size_t count = 0;
	DIR *tasks;

	family[count++] = pid;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	tasks = opendir(path);
	if (!tasks)
		return count;
	while ((task = readdir(tasks)) && count < TELEMETRY_FAMILY_MAX) {
		char name[TELEMETRY_PROC_PATH_MAX], *cursor, *end;

		if (task->d_name[0] == '.' ||
		    (size_t)snprintf(name, sizeof(name), "task/%s/children", task->d_name) >=
			    sizeof(name) ||
		    telemetry_read(pid, name, children, sizeof(children)) < 0)
			continue;
		for (cursor = children; count < TELEMETRY_FAMILY_MAX; cursor = end) {
			long child = strtol(cursor, &end, 10);

			if (end == cursor)
				break;
			if (child > 0)
				family[count++] = (pid_t)child;
		}
	}
	closedir(tasks);
	return count;
}

json_t *daemon_host_sample(struct daemon_host_sampler *sampler, pid_t pid, uint64_t now_ms)
{
	uint64_t ticks, read_bytes, write_bytes, rss_bytes;
	double cpu_percent = 0.0;
	long ticks_per_sec = sysconf(_SC_CLK_TCK);
	pid_t family[TELEMETRY_FAMILY_MAX];
	size_t members;

	if (telemetry_cpu_ticks(pid, &ticks) < 0)
		return NULL;
	members = telemetry_family(pid, family);
	rss_bytes = telemetry_rss_bytes(pid);
	telemetry_io_bytes(pid, &read_bytes, &write_bytes);
	for (size_t i = 1; i < members; i++) {
		uint64_t member_ticks = 0, member_read = 0, member_write = 0;

		if (telemetry_cpu_ticks(family[i], &member_ticks) == 0)
			ticks += member_ticks;
		rss_bytes += telemetry_rss_bytes(family[i]);
		telemetry_io_bytes(family[i], &member_read, &member_write);
		read_bytes += member_read;
		write_bytes += member_write;
	}
	if (sampler->has_previous && now_ms > sampler->previous_ms && ticks >= sampler->previous_ticks &&
	    ticks_per_sec > 0)
		cpu_percent = (double)(ticks - sampler->previous_ticks) / (double)ticks_per_sec /
			      ((double)(now_ms - sampler->previous_ms) / TELEMETRY_MS_PER_SEC) *
			      TELEMETRY_PERCENT;
	sampler->has_previous = true;
	sampler->previous_ticks = ticks;
	sampler->previous_ms = now_ms;
	return json_pack("{s:I, s:f, s:I, s:I}", "rss_bytes", (json_int_t)rss_bytes,
			 "cpu_percent", cpu_percent, "io_read_bytes", (json_int_t)read_bytes,
			 "io_write_bytes", (json_int_t)write_bytes);
}

void daemon_rfc3339_ms(uint64_t ms, char out[DAEMON_RFC3339_MAX])
{
	time_t seconds = (time_t)(ms / TELEMETRY_MS_PER_SECOND);
	struct tm tm;
	size_t len = 0;

	if (gmtime_r(&seconds, &tm))
		len = strftime(out, DAEMON_RFC3339_MAX, TELEMETRY_RFC3339_SECONDS, &tm);
	if (len == 0)
		len = (size_t)snprintf(out, DAEMON_RFC3339_MAX, "1970-01-01T00:00:00");
	snprintf(out + len, DAEMON_RFC3339_MAX - len, ".%03uZ",
		 (unsigned)(ms % TELEMETRY_MS_PER_SECOND));
}

size_t daemon_telemetry_labels(const char *box, const json_t *running, const char **labels,
			       size_t max)
{
	const json_t *stage;
	size_t index, count = 0;

	if (max == 0)
		return 0;
	json_array_foreach(running, index, stage)
		if (box && json_is_string(stage) && strcmp(json_string_value(stage), box) == 0) {
			labels[0] = box;
			return 1;
		}
	json_array_foreach(running, index, stage)
		if (json_is_string(stage) && count < max)
			labels[count++] = json_string_value(stage);
	if (count == 0)
		labels[count++] = box;
	return count;
}
