/*
 * vmm_cgroup.h: the root is found from /proc/self/mountinfo (the cgroup2 mount, wherever a
 * hybrid host put it) and /proc/self/cgroup (the "0::" line); limits are written as the
 * kernel's interface files take them, one value per write.
 */
#include "sandbox/vmm_cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VMM_CGROUP_LINE_MAX 4096
#define VMM_CGROUP_VALUE_MAX 64
#define VMM_CGROUP_FSTYPE " - cgroup2 "
#define VMM_CGROUP_UNIFIED_PREFIX "0::"
#define VMM_CGROUP_MIB (1024ull * 1024ull)
#define VMM_CGROUP_DIR_MODE 0755
#define VMM_CGROUP_FILE_MODE 0644
/* the controllers the caps need, each a word of cgroup.subtree_control */
static const char *const vmm_cgroup_needed[] = { "memory", "cpu" };

/* A line of a /proc or cgroup file that take() accepts; take copies what it needs into out. */
static int vmm_cgroup_scan(const char *path, bool (*take)(char *line, char *out, size_t len),
			   char *out, size_t len)
{
	char line[VMM_CGROUP_LINE_MAX];
	FILE *f = fopen(path, "re");
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (rc < 0 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (take(line, out, len))
			rc = 0;
	}
	fclose(f);
	return rc;
}

/* The cgroup2 mount's line of mountinfo: its mount point is the fifth field. */
static bool vmm_cgroup_take_mount(char *line, char *out, size_t len)
{
	char mount_point[PATH_MAX];

	if (!strstr(line, VMM_CGROUP_FSTYPE) ||
	    sscanf(line, "%*s %*s %*s %*s %4095s", mount_point) != 1 ||
	    strlen(mount_point) >= len)
		return false;
	snprintf(out, len, "%s", mount_point);
	return true;
}

/* The "0::/path" line of /proc/self/cgroup: this process's cgroup v2 path. */
static bool vmm_cgroup_take_own(char *line, char *out, size_t len)
{
	const char *path = line + strlen(VMM_CGROUP_UNIFIED_PREFIX);

	if (strncmp(line, VMM_CGROUP_UNIFIED_PREFIX, strlen(VMM_CGROUP_UNIFIED_PREFIX)) != 0 ||
	    strlen(path) >= len)
		return false;
	snprintf(out, len, "%s", path);
	return true;
}

/* Whether word is one of the space-separated words of dir/file. */
static bool vmm_cgroup_file_has_word(const char *dir, const char *file, const char *word)
{
	char path[PATH_MAX], line[VMM_CGROUP_LINE_MAX];
	bool found = false;
	FILE *f;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
		return false;
	f = fopen(path, "re");
	if (!f)
		return false;
	if (fgets(line, sizeof(line), f)) {
		for (char *save = NULL, *tok = strtok_r(line, " \n", &save); tok && !found;
		     tok = strtok_r(NULL, " \n", &save))
			found = strcmp(tok, word) == 0;
	}
	fclose(f);
	return found;
}

/* The first needed controller root does not hand to its children, or NULL. */
static const char *vmm_cgroup_missing_controller(const char *root)
{
	for (size_t i = 0; i < sizeof(vmm_cgroup_needed) / sizeof(vmm_cgroup_needed[0]); i++)
		if (!vmm_cgroup_file_has_word(root, "cgroup.subtree_control", vmm_cgroup_needed[i]))
			return vmm_cgroup_needed[i];
	return NULL;
}

/* The cgroup2 mount point and this process's cgroup v2 path beneath it. 0 or -EOPNOTSUPP. */
static int vmm_cgroup_locate_own(char *mount_point, size_t mount_len, char *own, size_t own_len,
				 char *why, size_t whylen)
{
	if (vmm_cgroup_scan("/proc/self/mountinfo", vmm_cgroup_take_mount, mount_point,
			    mount_len) < 0) {
		snprintf(why, whylen, "no cgroup v2 hierarchy is mounted");
		return -EOPNOTSUPP;
	}
	if (vmm_cgroup_scan("/proc/self/cgroup", vmm_cgroup_take_own, own, own_len) < 0) {
		snprintf(why, whylen, "/proc/self/cgroup names no cgroup v2 path");
		return -EOPNOTSUPP;
	}
	return 0;
}

int vmm_cgroup_own_dir(char *out, size_t len, char *why, size_t whylen)
{
	char mount_point[PATH_MAX], own[PATH_MAX];
	int rc = vmm_cgroup_locate_own(mount_point, sizeof(mount_point), own, sizeof(own), why,
				       whylen);

	if (rc < 0)
		return rc;
	if ((size_t)snprintf(out, len, "%s%s", mount_point, strcmp(own, "/") == 0 ? "" : own) >=
	    len) {
		snprintf(why, whylen, "the cgroup path is too long");
		return -ENAMETOOLONG;
	}
	return 0;
}

int vmm_cgroup_root(char *out, size_t len, char *why, size_t whylen)
{
	char mount_point[PATH_MAX], own[PATH_MAX];
	const char *missing;
	char *slash;
	int rc = vmm_cgroup_locate_own(mount_point, sizeof(mount_point), own, sizeof(own), why,
				       whylen);

	if (rc < 0)
		return rc;
	slash = strrchr(own, '/');
	if (slash && slash != own)
		*slash = '\0'; /* the parent of our own cgroup */
	else
		own[0] = '\0'; /* the hierarchy's root, which may hold processes */
	if ((size_t)snprintf(out, len, "%s%s", mount_point, own) >= len) {
		snprintf(why, whylen, "the cgroup path is too long");
		return -ENAMETOOLONG;
	}
	missing = vmm_cgroup_missing_controller(out);
	if (missing) {
		snprintf(why, whylen, "the cgroup v2 controller '%s' is not enabled in "
			 "%s/cgroup.subtree_control (it may be on a v1 hierarchy)", missing, out);
		return -EOPNOTSUPP;
	}
	if (access(out, W_OK) != 0) {
		snprintf(why, whylen, "%s is not writable; run under a systemd user scope with "
			 "Delegate=yes", out);
		return -EACCES;
	}
	return 0;
}

/* Writes value to dir/file (which the kernel makes with the directory). */
static int vmm_cgroup_write(const char *dir, const char *file, const char *value)
{
	char path[PATH_MAX];
	ssize_t written;
	int fd, rc = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, VMM_CGROUP_FILE_MODE);
	if (fd < 0)
		return -errno;
	written = write(fd, value, strlen(value));
	if (written != (ssize_t)strlen(value))
		rc = written < 0 ? -errno : -EIO;
	close(fd);
	return rc;
}

int vmm_cgroup_create(const char *root, const char *name, const struct vmm_cgroup_limits *limits,
		      char *dir, size_t dirlen, char *err, size_t errlen)
{
	char memory[VMM_CGROUP_VALUE_MAX], cpu[VMM_CGROUP_VALUE_MAX];
	const char *missing = vmm_cgroup_missing_controller(root);
	int rc;

	dir[0] = '\0';
	if (missing) {
		snprintf(err, errlen, "the cgroup v2 controller '%s' is not enabled in "
			 "%s/cgroup.subtree_control", missing, root);
		return -EOPNOTSUPP;
	}
	if ((size_t)snprintf(dir, dirlen, "%s/%s", root, name) >= dirlen) {
		dir[0] = '\0';
		snprintf(err, errlen, "the cgroup path %s/%s is too long", root, name);
		return -ENAMETOOLONG;
	}
	if (mkdir(dir, VMM_CGROUP_DIR_MODE) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot make the cgroup %s: %s", dir, strerror(errno));
		dir[0] = '\0';
		return rc;
	}
	snprintf(memory, sizeof(memory), "%llu",
		 vmm_cgroup_memory_max_bytes(limits->memory_mb, false));
	snprintf(cpu, sizeof(cpu), "%llu %u",
		 (unsigned long long)limits->vcpus * VMM_CGROUP_CPU_PERIOD_US,
		 VMM_CGROUP_CPU_PERIOD_US);
	rc = vmm_cgroup_write(dir, "memory.max", memory);
	if (rc == 0)
		rc = vmm_cgroup_write(dir, "cpu.max", cpu);
	/* without swap accounting the file is missing, and memory.max alone still caps */
	if (rc == 0)
		(void)vmm_cgroup_write(dir, "memory.swap.max", "0");
	if (rc < 0) {
		snprintf(err, errlen, "cannot write the limits of the cgroup %s: %s", dir,
			 strerror(-rc));
		vmm_cgroup_remove(dir);
		dir[0] = '\0';
	}
	return rc;
}

unsigned long long vmm_cgroup_memory_max_bytes(unsigned int memory_mb, bool with_memory_copy)
{
	unsigned long long mb = (unsigned long long)memory_mb + VMM_CGROUP_OVERHEAD_MB;

	if (with_memory_copy)
		mb += memory_mb;
	return mb * VMM_CGROUP_MIB;
}

int vmm_cgroup_allow_memory_copy(const char *dir, unsigned int memory_mb)
{
	char memory[VMM_CGROUP_VALUE_MAX];

	snprintf(memory, sizeof(memory), "%llu", vmm_cgroup_memory_max_bytes(memory_mb, true));
	return vmm_cgroup_write(dir, "memory.max", memory);
}

/* A line of cgroup.procs that is the calling process's pid; nothing is copied. */
static bool vmm_cgroup_take_self(char *line, char *out, size_t len)
{
	(void)out;
	(void)len;
	return strtol(line, NULL, 10) == (long)getpid();
}

/* Whether dir's cgroup.procs lists the calling process (reading it takes no lock of note). */
static bool vmm_cgroup_holds_self(const char *dir)
{
	char path[PATH_MAX];

	if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
		return false;
	return vmm_cgroup_scan(path, vmm_cgroup_take_self, NULL, 0) == 0;
}

int vmm_cgroup_enter(const char *dir, pid_t pid)
{
	char value[VMM_CGROUP_VALUE_MAX];

	if (pid == 0 && vmm_cgroup_holds_self(dir))
		return 0;

	snprintf(value, sizeof(value), "%ld", (long)pid);
	return vmm_cgroup_write(dir, "cgroup.procs", value);
}

void vmm_cgroup_remove(const char *dir)
{
	if (dir && dir[0])
		rmdir(dir);
}
