/*
 * The switch follows switch_root's shape because an initramfs cannot be pivot_root'ed: build
 * the new tree under /mnt/newroot (ext4 lower, tmpfs upper, overlay), stage busybox and the
 * agent's helpers where the image lacks them, move the pseudo filesystems, then MS_MOVE the new
 * tree onto / and chroot into it. pivot_root is tried first for roots that allow it. Any
 * failure before the move unwinds the mounts so the VM keeps running on the initramfs.
 */
#include "oci_root.h"

#include "agent_log.h"
#include "disks.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OCI_LOWER "/mnt/oci-lower"
#define OCI_OVERLAY_TMP "/mnt/overlay-tmp"
#define OCI_NEWROOT "/mnt/newroot"
#define OCI_OLDROOT_REL "mnt/oldroot"
#define OCI_OVERLAY_OPTIONS "lowerdir=" OCI_LOWER ",upperdir=" OCI_OVERLAY_TMP "/upper,workdir=" \
	OCI_OVERLAY_TMP "/work"
#define OCI_DIR_MODE 0755
#define OCI_TMP_MODE 01777
#define OCI_EXEC_MODE 0755
#define OCI_COPY_CHUNK 65536
#define OCI_BUSYBOX "/bin/busybox"

static const char *const oci_newroot_dirs[] = {
	"proc", "sys", "dev", "tmp", "workspace", "home", "home/sandbox", "etc", "etc/voidbox",
	"usr", "usr/local", "usr/local/bin", "lib", "lib/modules", "mnt", OCI_OLDROOT_REL, "bin",
};

static const char *const oci_moved_mounts[] = { "/proc", "/sys", "/dev", "/tmp" };

/* Busybox applets linked into the new root's /bin when the image has no such program. */
static const char *const oci_busybox_applets[] = { "sh", "cat", "touch", "test", "ls", "mkdir",
						   "rm" };

/* Agent-side helpers copied into the image when present in the initramfs. */
static const char *const oci_staged_files[] = { "/usr/local/bin/claude-code",
						"/usr/local/bin/void-message",
						"/usr/local/bin/void-mcp" };

bool oci_root_requested(const char *cmdline, char *device, size_t size)
{
	const char *p = cmdline ? strstr(cmdline, OCI_ROOT_DEVICE_KEY) : NULL;
	size_t len = 0;

	while (p && p != cmdline && !isspace((unsigned char)p[-1]))
		p = strstr(p + 1, OCI_ROOT_DEVICE_KEY);
	if (!p)
		return false;
	p += strlen(OCI_ROOT_DEVICE_KEY);
	while (p[len] && !isspace((unsigned char)p[len]))
		len++;
	if (len == 0 || len >= size || p[0] != '/')
		return false;
	memcpy(device, p, len);
	device[len] = '\0';
	return true;
}

static int oci_mkdir(const char *path, mode_t mode)
{
	return mkdir(path, mode) == 0 || errno == EEXIST ? 0 : -errno;
}

static int oci_in_newroot(char *out, size_t size, const char *rel)
{
	return snprintf(out, size, "%s/%s", OCI_NEWROOT, rel) < (int)size ? 0 : -ENAMETOOLONG;
}

static int oci_copy_file(const char *from, const char *to)
{
	char buf[OCI_COPY_CHUNK];
	int in, out, err = 0;
	ssize_t n;

	in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, OCI_EXEC_MODE);
	if (out < 0) {
		err = -errno;
		close(in);
		return err;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			err = -EIO;
			break;
		}
	if (n < 0)
		err = -errno;
	close(in);
	close(out);
	return err;
}

/* Gives the image a shell and the agent's helpers when it lacks them. */
static void oci_stage_tools(void)
{
	char target[PATH_MAX], applet[PATH_MAX];
	struct stat st;

	for (size_t i = 0; i < sizeof(oci_staged_files) / sizeof(oci_staged_files[0]); i++) {
		if (stat(oci_staged_files[i], &st) < 0 ||
		    oci_in_newroot(target, sizeof(target), oci_staged_files[i] + 1) < 0)
			continue;
		if (oci_copy_file(oci_staged_files[i], target) < 0)
			agent_warn("cannot stage %s into the image", oci_staged_files[i]);
	}
	if (oci_in_newroot(target, sizeof(target), &OCI_BUSYBOX[1]) < 0 ||
	    lstat(target, &st) == 0 || oci_copy_file(OCI_BUSYBOX, target) < 0)
		return;
	for (size_t i = 0; i < sizeof(oci_busybox_applets) / sizeof(oci_busybox_applets[0]); i++) {
		if (snprintf(applet, sizeof(applet), "%s/bin/%s", OCI_NEWROOT,
			     oci_busybox_applets[i]) >= (int)sizeof(applet))
			continue;
		if (lstat(applet, &st) < 0 && symlink("busybox", applet) < 0)
			agent_debug("cannot link %s", applet);
	}
}

static int oci_fail(const char *step, int err)
{
	agent_error("OCI rootfs: %s failed: %s", step, strerror(-err));
	return err;
}

/* Mounts lower, upper and overlay. Returns 0 or -errno with whatever was mounted undone. */
static int oci_build_tree(const char *device)
{
	int err;

	if ((err = oci_mkdir("/mnt", OCI_DIR_MODE)) || (err = oci_mkdir(OCI_LOWER, OCI_DIR_MODE)) ||
	    (err = oci_mkdir(OCI_OVERLAY_TMP, OCI_DIR_MODE)) ||
	    (err = oci_mkdir(OCI_NEWROOT, OCI_DIR_MODE)))
		return oci_fail("creating the mount points", err);
	if (mount(device, OCI_LOWER, "ext4", MS_RDONLY, NULL) < 0)
		return oci_fail("mounting the image read-only as ext4", -errno);
	if (mount("tmpfs", OCI_OVERLAY_TMP, "tmpfs", 0, "mode=0755") < 0) {
		err = oci_fail("mounting the overlay's tmpfs", -errno);
		goto out_lower;
	}
	if ((err = oci_mkdir(OCI_OVERLAY_TMP "/upper", OCI_DIR_MODE)) ||
	    (err = oci_mkdir(OCI_OVERLAY_TMP "/work", OCI_DIR_MODE))) {
		oci_fail("creating the overlay's directories", err);
		goto out_tmp;
	}
	if (mount("overlay", OCI_NEWROOT, "overlay", 0, OCI_OVERLAY_OPTIONS) < 0) {
		err = oci_fail("mounting the overlay (is the overlay module in the image?)",
			       -errno);
		goto out_tmp;
	}
	return 0;
out_tmp:
	umount2(OCI_OVERLAY_TMP, MNT_DETACH);
out_lower:
	umount2(OCI_LOWER, MNT_DETACH);
	return err;
}

static void oci_prepare_newroot(void)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(oci_newroot_dirs) / sizeof(oci_newroot_dirs[0]); i++)
		if (oci_in_newroot(path, sizeof(path), oci_newroot_dirs[i]) == 0)
			oci_mkdir(path, strcmp(oci_newroot_dirs[i], "tmp") == 0 ? OCI_TMP_MODE :
										 OCI_DIR_MODE);
	oci_stage_tools();
}

static int oci_move_pseudo_filesystems(void)
{
	char target[PATH_MAX];

	for (size_t i = 0; i < sizeof(oci_moved_mounts) / sizeof(oci_moved_mounts[0]); i++) {
		if (oci_in_newroot(target, sizeof(target), oci_moved_mounts[i] + 1) < 0)
			return -ENAMETOOLONG;
		if (mount(oci_moved_mounts[i], target, NULL, MS_MOVE, NULL) < 0) {
			agent_error("OCI rootfs: moving %s failed: %s", oci_moved_mounts[i],
				    strerror(errno));
			return -errno;
		}
	}
	return 0;
}

/* Makes the current directory (the new tree) the root. */
static int oci_enter_newroot(void)
{
	if (syscall(SYS_pivot_root, ".", OCI_OLDROOT_REL) == 0) {
		if (chroot(".") < 0 || chdir("/") < 0)
			return -errno;
		umount2("/" OCI_OLDROOT_REL, MNT_DETACH);
		return 0;
	}
	if (errno != EINVAL)
		return -errno;
	/* The initramfs cannot be pivoted: move the new tree over it, as switch_root does. */
	if (mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
		return -errno;
	return 0;
}

int oci_root_switch(const char *device)
{
	struct statfs root_fs;
	int err;

	if (!disks_wait_for_node(device)) {
		agent_error("OCI rootfs: %s did not appear (is virtio_blk in the image?); keeping "
			    "the initramfs root", device);
		return -ENODEV;
	}
	err = oci_build_tree(device);
	if (err)
		return err;
	oci_prepare_newroot();
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		agent_debug("OCI rootfs: making / private failed: %s", strerror(errno));
	err = oci_move_pseudo_filesystems();
	if (!err && chdir(OCI_NEWROOT) < 0)
		err = -errno;
	if (!err)
		err = oci_enter_newroot();
	if (err) {
		agent_error("OCI rootfs: switching the root failed: %s", strerror(-err));
		return err;
	}
	if (statfs("/", &root_fs) < 0 || root_fs.f_type != OVERLAYFS_SUPER_MAGIC) {
		agent_error("OCI rootfs: / is not the overlay after the switch");
		return -EIO;
	}
	agent_info("OCI rootfs: / is now the overlay over %s (writes kept in memory)", device);
	return 0;
}
