/*
 * The guest side of host disks: count them from the command line, wait for their nodes
 * (devtmpfs creates them while virtio_blk probes, which may lag the module load by a moment;
 * the OCI root waits for its disk the same way) and give each to the sandbox user, so
 * `voidbox exec --disk` programs can use them without root. Nothing is mounted: what a disk
 * holds is the user's business.
 */
#include "disks.h"

#include "agent_log.h"
#include "sandbox_user.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DISKS_WAIT_ATTEMPTS 40
#define DISKS_WAIT_STEP_NS (100 * 1000 * 1000L)
#define DISKS_NODE_MODE 0660
#define DISKS_DECIMAL_BASE 10

unsigned int disks_requested(const char *cmdline)
{
	const char *p = cmdline ? cmdline : "";
	size_t len = strlen(DISKS_CMDLINE_KEY);

	while ((p = strstr(p, DISKS_CMDLINE_KEY))) {
		if (p == cmdline || isspace((unsigned char)p[-1])) {
			char *end;
			unsigned long count = strtoul(p + len, &end, DISKS_DECIMAL_BASE);

			if (end == p + len || !isdigit((unsigned char)p[len]) ||
			    (*end && !isspace((unsigned char)*end)))
				return 0;
			return count > DISKS_MAX ? DISKS_MAX : (unsigned int)count;
		}
		p += len;
	}
	return 0;
}

void disks_device_path(unsigned int index, char *out, size_t size)
{
	snprintf(out, size, "/dev/vd%c", 'a' + (int)(index % DISKS_MAX));
}

bool disks_wait_for_node(const char *path)
{
	struct timespec step = { .tv_sec = 0, .tv_nsec = DISKS_WAIT_STEP_NS };
	struct stat st;

	for (int attempt = 0; attempt < DISKS_WAIT_ATTEMPTS; attempt++) {
		if (stat(path, &st) == 0 && S_ISBLK(st.st_mode))
			return true;
		nanosleep(&step, NULL);
	}
	return false;
}

void disks_setup(unsigned int count)
{
	char path[sizeof("/dev/vda")];

	for (unsigned int i = 0; i < count && i < DISKS_MAX; i++) {
		disks_device_path(i, path, sizeof(path));
		if (!disks_wait_for_node(path)) {
			agent_error("disk %s did not appear (is virtio_blk in the image?)", path);
			continue;
		}
		if (chown(path, AGENT_SANDBOX_UID, AGENT_SANDBOX_GID) < 0 ||
		    chmod(path, DISKS_NODE_MODE) < 0)
			agent_error("cannot give %s to the sandbox user: %s", path,
				    strerror(errno));
	}
}
