/*
 * What a test reads from /proc about a VMM process (src/sandbox/vmm_process.h), shared by the
 * unit tests with a stand-in body (tests/sandbox/test_vmm_process.c, test_vmm_jail.c) and the
 * VM tests with a real VM (tests/vm/vm_conformance.c, vm_snapshot_cli.c). /proc/PID/environ
 * shows the environment a program was executed with, not what setenv changed later, so a test
 * that wants a secret in its own environment executes itself again with it
 * (probe_reexec_with_secret). Include after harness.h.
 */
#ifndef VOIDBOX_TESTS_VMM_PROCESS_PROBE_H
#define VOIDBOX_TESTS_VMM_PROCESS_PROBE_H

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define PROBE_SECRET_NAME "ANTHROPIC_API_KEY"
#define PROBE_SECRET_VALUE "sk-ant-probe-not-a-real-key"
#define PROBE_ENVIRON_MAX (256 * 1024)
#define PROBE_PATH_MAX 128
/* a /proc path with a directory entry's name (up to 255 bytes) in it */
#define PROBE_ENTRY_PATH_MAX 512

/* Makes sure this process was executed with PROBE_SECRET_NAME in its environment. */
static inline void probe_reexec_with_secret(char **argv)
{
	if (getenv(PROBE_SECRET_NAME))
		return;
	setenv(PROBE_SECRET_NAME, PROBE_SECRET_VALUE, 1);
	execv("/proc/self/exe", argv);
	perror("re-executing the test with " PROBE_SECRET_NAME " set");
	exit(2);
}

/* Whether /proc/PID/environ holds "name=" (false also when it cannot be read). */
static inline bool probe_environ_has(pid_t pid, const char *name)
{
	char path[PROBE_PATH_MAX];
	char *block = malloc(PROBE_ENVIRON_MAX);
	size_t used = 0, name_len = strlen(name);
	bool found = false;
	ssize_t got;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || !block) {
		if (fd >= 0)
			close(fd);
		free(block);
		return false;
	}
	while (used < PROBE_ENVIRON_MAX - 1 &&
	       (got = read(fd, block + used, PROBE_ENVIRON_MAX - 1 - used)) > 0)
		used += (size_t)got;
	close(fd);
	for (size_t at = 0; at < used && !found; at += strnlen(block + at, used - at) + 1)
		found = strncmp(block + at, name, name_len) == 0 && block[at + name_len] == '=';
	free(block);
	return found;
}

/* The value of "key:" in /proc/PID/task/TID/status, or -1. */
static inline long probe_task_status(pid_t pid, const char *tid, const char *key)
{
	char path[PROBE_ENTRY_PATH_MAX], line[256];
	size_t key_len = strlen(key);
	long value = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)pid, tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, key_len) == 0 && line[key_len] == ':')
			value = strtol(line + key_len + 1, NULL, 10);
	fclose(f);
	return value;
}

/* Checks NoNewPrivs 1 and Seccomp 2 (filtered) on every thread of pid; returns the count. */
static inline int probe_check_every_thread_confined(pid_t pid)
{
	char path[PROBE_PATH_MAX];
	struct dirent *entry;
	int threads = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	CHECK(dir != NULL);
	if (!dir)
		return 0;
	while ((entry = readdir(dir))) {
		if (entry->d_name[0] == '.')
			continue;
		threads++;
		if (probe_task_status(pid, entry->d_name, "NoNewPrivs") != 1 ||
		    probe_task_status(pid, entry->d_name, "Seccomp") != 2)
			fprintf(stderr, "thread %s of %d is not confined\n", entry->d_name, (int)pid);
		CHECK_INT_EQ(probe_task_status(pid, entry->d_name, "NoNewPrivs"), 1);
		CHECK_INT_EQ(probe_task_status(pid, entry->d_name, "Seccomp"), 2);
	}
	closedir(dir);
	return threads;
}

/* Whether pid's namespace of kind ("mnt", "net", ...) is this process's (/proc/PID/ns). */
static inline bool probe_same_namespace(pid_t pid, const char *kind)
{
	char path[PROBE_PATH_MAX], theirs[PROBE_PATH_MAX] = "", ours[PROBE_PATH_MAX] = "";

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, kind);
	CHECK(readlink(path, theirs, sizeof(theirs) - 1) > 0);
	snprintf(path, sizeof(path), "/proc/self/ns/%s", kind);
	CHECK(readlink(path, ours, sizeof(ours) - 1) > 0);
	return strcmp(theirs, ours) == 0;
}

/*
 * Whether pid runs in a jail of its own (src/sandbox/vmm_jail.h): a mount namespace that is
 * not this process's, and a root without /etc/passwd.
 */
static inline bool probe_is_jailed(pid_t pid)
{
	char path[PROBE_PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/root/etc/passwd", (int)pid);
	return !probe_same_namespace(pid, "mnt") && stat(path, &st) < 0 && errno == ENOENT;
}

/* Whether any descriptor of pid is a link to target (a path, or "socket:[inode]"). */
static inline bool probe_has_fd_to(pid_t pid, const char *target)
{
	char path[PROBE_PATH_MAX], link_path[PROBE_ENTRY_PATH_MAX], link[PROBE_ENTRY_PATH_MAX];
	struct dirent *entry;
	bool found = false;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return false;
	while (!found && (entry = readdir(dir))) {
		ssize_t len;

		snprintf(link_path, sizeof(link_path), "%s/%s", path, entry->d_name);
		len = readlink(link_path, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = '\0';
		found = strcmp(link, target) == 0;
	}
	closedir(dir);
	return found;
}

/* What descriptor fd of pid links to ("" when it cannot be read). */
static inline void probe_fd_target(pid_t pid, int fd, char *out, size_t len)
{
	char path[PROBE_PATH_MAX];
	ssize_t got;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	got = readlink(path, out, len - 1);
	out[got > 0 ? got : 0] = '\0';
}

/* What /proc/PID/exe names into out ("" when it cannot be read). */
static inline void probe_exe(pid_t pid, char *out, size_t len)
{
	char path[PROBE_PATH_MAX];
	ssize_t got;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	got = readlink(path, out, len - 1);
	out[got > 0 ? got : 0] = '\0';
}

/* pid's cgroup v2 path (the "0::" line of /proc/PID/cgroup without its prefix) into out. */
static inline bool probe_cgroup_path(pid_t pid, char *out, size_t len)
{
	char path[PROBE_PATH_MAX], line[PATH_MAX] = "";
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strncmp(line, "0::", 3) == 0;
	fclose(f);
	line[strcspn(line, "\n")] = '\0';
	return found && snprintf(out, len, "%s", line + 3) < (int)len;
}

/*
 * Whether pid is in the cgroup directory dir: its cgroup v2 path, a cgroup beneath the
 * hierarchy's root, is the end of dir (the cgroup2 mount point joined with that path).
 */
static inline bool probe_in_cgroup(pid_t pid, const char *dir)
{
	char path[PATH_MAX];

	return probe_cgroup_path(pid, path, sizeof(path)) && strlen(path) > 1 &&
	       strlen(dir) >= strlen(path) && strcmp(dir + strlen(dir) - strlen(path), path) == 0;
}

/*
 * Whether marker is anywhere in the readable memory of pid (through /proc/PID/maps and
 * /proc/PID/mem): 1 found, 0 not found with at least one region read, -1 nothing readable.
 * Regions are read in chunks that overlap by the marker's length, so a marker across a chunk
 * boundary is found too. Regions larger than PROBE_MEMORY_REGION_MAX are reservations, not a
 * heap (ASan's shadow is terabytes of zero pages), and are skipped.
 */
#define PROBE_MEMORY_CHUNK (1024 * 1024)
#define PROBE_MEMORY_REGION_MAX (1024UL * 1024 * 1024)
#define PROBE_MAPS_LINE_MAX 1024
static inline int probe_memory_has(pid_t pid, const char *marker)
{
	size_t marker_len = strlen(marker);
	char path[PROBE_PATH_MAX], line[PROBE_MAPS_LINE_MAX];
	char *chunk = malloc(PROBE_MEMORY_CHUNK);
	int found = 0, read_any = 0, mem;
	FILE *maps;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	maps = fopen(path, "r");
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	mem = open(path, O_RDONLY | O_CLOEXEC);
	while (chunk && maps && mem >= 0 && !found && fgets(line, sizeof(line), maps)) {
		unsigned long start, end;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3 || perms[0] != 'r' ||
		    end - start > PROBE_MEMORY_REGION_MAX)
			continue;
		for (unsigned long at = start; at < end && !found;) {
			size_t want = end - at < PROBE_MEMORY_CHUNK ? end - at : PROBE_MEMORY_CHUNK;
			ssize_t got = pread(mem, chunk, want, (off_t)at);

			if (got <= 0)
				break; /* [vvar] and guard pages read as errors */
			read_any = 1;
			found = memmem(chunk, (size_t)got, marker, marker_len) != NULL;
			if ((size_t)got < want || at + (size_t)got >= end)
				break;
			at += (size_t)got > marker_len ? (size_t)got - marker_len : (size_t)got;
		}
	}
	if (maps)
		fclose(maps);
	if (mem >= 0)
		close(mem);
	free(chunk);
	return found ? 1 : read_any ? 0 : -1;
}

/* What fd (a file, read from its start) holds so far, NUL-terminated into buf. */
static inline void probe_read_so_far(int fd, char *buf, size_t len)
{
	ssize_t got = pread(fd, buf, len - 1, 0);

	buf[got > 0 ? got : 0] = '\0';
}

/* The children of pid whose /proc/PID/comm is name, up to max of them into out; how many. */
static inline int probe_children_named(pid_t pid, const char *name, pid_t *out, int max)
{
	char path[PROBE_PATH_MAX], children[PROBE_ENVIRON_MAX / 64] = "", comm[PROBE_PATH_MAX];
	char *cursor = children, *end;
	int found = 0;
	FILE *file;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	file = fopen(path, "re");
	if (!file)
		return 0;
	if (!fgets(children, sizeof(children), file))
		children[0] = '\0';
	fclose(file);
	for (long child = strtol(cursor, &end, 10); end != cursor && found < max;
	     cursor = end, child = strtol(cursor, &end, 10)) {
		snprintf(path, sizeof(path), "/proc/%ld/comm", child);
		file = fopen(path, "re");
		if (!file)
			continue;
		if (fgets(comm, sizeof(comm), file) && strcspn(comm, "\n") == strlen(name) &&
		    strncmp(comm, name, strlen(name)) == 0)
			out[found++] = (pid_t)child;
		fclose(file);
	}
	return found;
}

#endif
