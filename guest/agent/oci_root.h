/*
 * OCI image as the root filesystem. When the command line carries
 * voidbox.oci_rootfs_dev=<block device>, PID 1 mounts that ext4 image read-only, puts a tmpfs
 * overlay on top, moves /proc /sys /dev /tmp into it and makes it the root, before any share is
 * mounted or any connection is served, so every exec, PTY and file RPC sees the image.
 */
#ifndef VOIDBOX_AGENT_OCI_ROOT_H
#define VOIDBOX_AGENT_OCI_ROOT_H

#include <stdbool.h>
#include <stddef.h>

#define OCI_ROOT_DEVICE_KEY "voidbox.oci_rootfs_dev="

/* Copies the device path from the command line into device; false when not requested. */
bool oci_root_requested(const char *cmdline, char *device, size_t size);

/* Switches the root to device + overlay. Returns 0 or -errno (the old root is then kept). */
int oci_root_switch(const char *device);

#endif
