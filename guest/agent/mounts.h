/*
 * Host directory shares. The host names each share on the kernel command line as
 * voidbox.mount<N>=<tag>:<guest_path>[:ro|rw] (mode defaults to ro); PID 1 mounts each one
 * (virtiofs if the device is one, else 9p over virtio) before serving the host, and makes rw
 * shares writable for the sandbox user. Parsing is separate so tests feed command lines.
 */
#ifndef VOIDBOX_AGENT_MOUNTS_H
#define VOIDBOX_AGENT_MOUNTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define MOUNTS_MAX 32
#define MOUNTS_TAG_MAX 64

struct mount_spec {
	unsigned int index;                 /* N in voidbox.mountN */
	char tag[MOUNTS_TAG_MAX];
	char guest_path[PATH_MAX];
	bool read_only;
};

/*
 * Collects the valid mount tokens of cmdline in order of appearance (at most max). A token with
 * an empty tag, a relative path or an unknown mode is skipped. Returns the number found.
 */
size_t mounts_parse(const char *cmdline, struct mount_spec *specs, size_t max);

/*
 * The read-ahead knob of the backing device whose file system has device number dev (a FUSE
 * mount's is named MAJOR:MINOR): /sys/class/bdi/MAJOR:MINOR/read_ahead_kb. 0, or -ENAMETOOLONG.
 */
int mounts_read_ahead_path(dev_t dev, char *out, size_t len);

/*
 * Creates, closes, opens, closes and removes one file in dir (a rw virtiofs share), so the
 * guest kernel meets the server's OPEN answer (ENOSYS) before the sandbox's own files: 0, or
 * -errno with nothing left behind but what unlink could not remove.
 */
int mounts_learn_no_open(const char *dir);

/* PID 1: mounts every share; failures are logged and do not stop the others. */
void mounts_setup(const struct mount_spec *specs, size_t count);

#endif
