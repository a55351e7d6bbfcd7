/*
 * Host disks for PID 1: the host lists how many virtio-blk disks it attached as
 * voidbox.disks=N on the kernel command line, so the agent loads virtio_blk only when there
 * are some and then hands /dev/vda, /dev/vdb... to the sandbox user (the disks are the
 * user's own files, attached on purpose; a read-only disk stays read-only in the kernel).
 */
#ifndef VOIDBOX_AGENT_DISKS_H
#define VOIDBOX_AGENT_DISKS_H

#include <stdbool.h>
#include <stddef.h>

#define DISKS_CMDLINE_KEY "voidbox.disks="
/* Names /dev/vda../dev/vdz; the host attaches far fewer. */
#define DISKS_MAX 26

/* The N of voidbox.disks=N (0 when absent or malformed), at most DISKS_MAX. */
unsigned int disks_requested(const char *cmdline);
/* Writes /dev/vdX for disk index into out (at least sizeof "/dev/vda"). */
void disks_device_path(unsigned int index, char *out, size_t size);
/*
 * Waits (a few seconds at most) for path to be a block device: devtmpfs creates a disk's node
 * while virtio_blk probes, which may lag the module load. True when it is one.
 */
bool disks_wait_for_node(const char *path);
/* Waits for each disk's node and gives it to the sandbox user. */
void disks_setup(unsigned int count);

#endif
