/*
 * vmm_jail.h: the namespaces and the root of a VMM process. Three parts share two helpers:
 * the probe (a throwaway child that unshares and pivots into an empty tmpfs, so a host that
 * refuses any step is found out before a VM depends on it), the plan (canonical paths, each
 * with its access and whether it outlives the VM's creation), and entering (the same unshare
 * and pivot as the probe, with the plan's bind mounts made in between).
 *
 * Every source is opened (O_PATH) before the tmpfs that becomes the root is mounted over
 * VMM_JAIL_BASE, and bound from /proc/self/fd/N, so a source beneath that directory (a runtime
 * directory under /tmp) is still reachable. Entries are bound shortest path first: a path
 * beneath an earlier directory entry exists there already (it is the host's own tree), and
 * only paths beneath the tmpfs get mount points made for them. The probe child runs only
 * system calls on strings made before the fork, since its parent may have other threads.
 */
#include "sandbox/vmm_jail.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/kvm.h"
#include "vmm/snapshot.h"
#include "vmm/thread_filter.h"

#define VMM_JAIL_LOG "vmm-jail"
/* Where the new root is built before the pivot; hidden from this namespace only. */
#define VMM_JAIL_BASE "/tmp"
#define VMM_JAIL_ROOT_FS "tmpfs"
#define VMM_JAIL_ROOT_SOURCE "voidbox-vmm-root"
/* The root holds only directories and empty mount points. */
#define VMM_JAIL_ROOT_OPTIONS "mode=0755,size=64k,nr_inodes=256"
#define VMM_JAIL_DIR_MODE 0755
#define VMM_JAIL_MOUNT_POINT_MODE 0600
/* The serial device creates its log with this mode; the plan creates it first, the same. */
#define VMM_JAIL_SERIAL_LOG_MODE 0600
#define VMM_JAIL_PROC_SELF "/proc/self"
#define VMM_JAIL_RESOLV_CONF "/etc/resolv.conf"
/* GLib, under libslirp, seeds its generators from it. */
#define VMM_JAIL_URANDOM "/dev/urandom"
#define VMM_JAIL_ID_MAP_MAX 64
#define VMM_JAIL_FD_PATH_MAX 32
#define VMM_JAIL_REASON_MAX 512
#define VMM_JAIL_SETGROUPS_DENY "deny"
/* The device whose restore needs the host's network namespace (libslirp). */
#define VMM_JAIL_NET_DEVICE "net"
/* What a snapshot-writing thread reads of its own process (a restored VM's written pages). */
#define VMM_JAIL_PAGEMAP "/proc/self/pagemap"
/* pagemap, a restore's directory and its base; the snapshot areas after them */
#define VMM_JAIL_WRITER_OWN_PATHS 3
#define VMM_JAIL_WRITER_PATHS_MAX 8
/* Entries a plan has room for before it grows (a VM without disks or shares needs six). */
#define VMM_JAIL_FIRST_CAPACITY 8
/* What the snapshot store keeps in a snapshot's directory (store/snapshot_store.h). */
#define VMM_JAIL_STORE_MANIFEST_FILE "manifest.json"
#define VMM_JAIL_STORE_META_FILE "store.json"

/* The steps the probe and entering share, named in the probe's warning. */
enum vmm_jail_step {
	VMM_JAIL_STEP_NONE,
	VMM_JAIL_STEP_UNSHARE,
	VMM_JAIL_STEP_ID_MAP,
	VMM_JAIL_STEP_PRIVATE,
	VMM_JAIL_STEP_ROOT,
	VMM_JAIL_STEP_PIVOT,
};

static const char *const vmm_jail_step_names[] = {
	[VMM_JAIL_STEP_NONE] = "nothing",
	[VMM_JAIL_STEP_UNSHARE] = "unshare",
	[VMM_JAIL_STEP_ID_MAP] = "writing its uid and gid maps",
	[VMM_JAIL_STEP_PRIVATE] = "making its mounts private",
	[VMM_JAIL_STEP_ROOT] = "mounting its root",
	[VMM_JAIL_STEP_PIVOT] = "pivot_root",
};

/* What the probe child reports through its pipe. */
struct vmm_jail_failure {
	int step;
	int error;
};

/* The uid and gid map lines, formatted before any fork. */
struct vmm_jail_ids {
	char uid_map[VMM_JAIL_ID_MAP_MAX];
	char gid_map[VMM_JAIL_ID_MAP_MAX];
};

struct vmm_jail_entry {
	char *source; /* canonical host path */
	char *target; /* where the jail shows it (absolute, canonical) */
	enum vmm_jail_access access;
	enum vmm_jail_lifetime lifetime;
	int fd;	      /* O_PATH, while entering */
	bool is_dir;
};

struct vmm_jail {
	struct vmm_jail_entry *entries;
	size_t count, capacity;
	bool own_network;
	bool entered;
	/* what vmm_jail_plan_vm hands the VM */
	struct vm_disk *disks;
	struct vm_share *shares;
	char *socket_path;
	/* what vmm_jail_plan_restore read, for the restore (vmm_jail_snapshot_state) */
	struct vm_snapshot_state *snapshot;
	/* a restore's snapshot directory and a diff's base, canonical (entries' targets) */
	const char *restore_dir;
	const char *restore_base;
};

/* ---- the steps shared by the probe and entering ---- */

static void vmm_jail_format_ids(struct vmm_jail_ids *ids)
{
	snprintf(ids->uid_map, sizeof(ids->uid_map), "%u %u 1", (unsigned int)getuid(),
		 (unsigned int)getuid());
	snprintf(ids->gid_map, sizeof(ids->gid_map), "%u %u 1", (unsigned int)getgid(),
		 (unsigned int)getgid());
}

static int vmm_jail_write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(text);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * The namespaces; with a user namespace, the user's ids mapped to themselves. A process that
 * is not dumpable has its /proc files owned by root, its maps included: it is dumpable again
 * for the three writes, which happen before any guest code or secret of its own exists.
 */
static int vmm_jail_unshare(enum vmm_jail_mode mode, bool own_network,
			    const struct vmm_jail_ids *ids, struct vmm_jail_failure *failure)
{
	int flags = CLONE_NEWNS | CLONE_NEWIPC | (own_network ? 0 : CLONE_NEWNET);
	int dumpable, rc = 0;

	if (mode == VMM_JAIL_USER_NS)
		flags |= CLONE_NEWUSER;
	if (unshare(flags) < 0) {
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_UNSHARE, errno };
		return -errno;
	}
	if (mode != VMM_JAIL_USER_NS)
		return 0;
	dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (dumpable == 0)
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	rc = vmm_jail_write_file("/proc/self/setgroups", VMM_JAIL_SETGROUPS_DENY);
	if (rc == 0)
		rc = vmm_jail_write_file("/proc/self/uid_map", ids->uid_map);
	if (rc == 0)
		rc = vmm_jail_write_file("/proc/self/gid_map", ids->gid_map);
	if (dumpable == 0)
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (rc < 0)
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_ID_MAP, -rc };
	return rc;
}

/* Mounts made here stay here; the root's tmpfs goes over VMM_JAIL_BASE. */
static int vmm_jail_mount_root(struct vmm_jail_failure *failure)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_PRIVATE, errno };
		return -errno;
	}
	if (mount(VMM_JAIL_ROOT_SOURCE, VMM_JAIL_BASE, VMM_JAIL_ROOT_FS,
		  MS_NOSUID | MS_NODEV | MS_NOEXEC, VMM_JAIL_ROOT_OPTIONS) < 0) {
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_ROOT, errno };
		return -errno;
	}
	return 0;
}

/* The tmpfs becomes the root and the old root is detached from this namespace. */
static int vmm_jail_pivot(struct vmm_jail_failure *failure)
{
	if (chdir(VMM_JAIL_BASE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) {
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_PIVOT, errno };
		return -errno;
	}
	return 0;
}

/* ---- the probe ---- */

static pthread_once_t vmm_jail_probe_once = PTHREAD_ONCE_INIT;
static enum vmm_jail_mode vmm_jail_probed_mode = VMM_JAIL_OFF;
static char vmm_jail_probe_reason[VMM_JAIL_REASON_MAX];

/* Tries mode in a child that exits at once; 0, or the failure it reported. */
static int vmm_jail_try(enum vmm_jail_mode mode, struct vmm_jail_failure *failure)
{
	struct vmm_jail_ids ids;
	int report[2], status = 0;
	ssize_t got;
	pid_t child;

	*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_NONE, 0 };
	vmm_jail_format_ids(&ids);
	if (pipe2(report, O_CLOEXEC) < 0) {
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_UNSHARE, errno };
		return -1;
	}
	child = fork();
	if (child == 0) {
		struct vmm_jail_failure mine = { VMM_JAIL_STEP_NONE, 0 };

		close(report[0]);
		if (vmm_jail_unshare(mode, false, &ids, &mine) == 0 &&
		    vmm_jail_mount_root(&mine) == 0)
			vmm_jail_pivot(&mine);
		_exit(write(report[1], &mine, sizeof(mine)) == (ssize_t)sizeof(mine) ? 0 : 1);
	}
	close(report[1]);
	if (child < 0) {
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_UNSHARE, errno };
		close(report[0]);
		return -1;
	}
	do
		got = read(report[0], failure, sizeof(*failure));
	while (got < 0 && errno == EINTR);
	close(report[0]);
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	if (got != (ssize_t)sizeof(*failure) || failure->step < VMM_JAIL_STEP_NONE ||
	    failure->step > VMM_JAIL_STEP_PIVOT)
		*failure = (struct vmm_jail_failure){ VMM_JAIL_STEP_UNSHARE, ECHILD };
	return failure->step == VMM_JAIL_STEP_NONE ? 0 : -1;
}

static void vmm_jail_probe(void)
{
	struct vmm_jail_failure as_is, as_user;

	if (vmm_jail_try(VMM_JAIL_PRIVILEGED, &as_is) == 0) {
		vmm_jail_probed_mode = VMM_JAIL_PRIVILEGED;
		return;
	}
	if (vmm_jail_try(VMM_JAIL_USER_NS, &as_user) == 0) {
		vmm_jail_probed_mode = VMM_JAIL_USER_NS;
		return;
	}
	snprintf(vmm_jail_probe_reason, sizeof(vmm_jail_probe_reason),
		 "through a user namespace, %s failed (%s); without one, %s failed (%s)",
		 vmm_jail_step_names[as_user.step], strerror(as_user.error),
		 vmm_jail_step_names[as_is.step], strerror(as_is.error));
	log_warn(VMM_JAIL_LOG, "VMM processes run in the host's mount, IPC and network "
		 "namespaces, without a root of their own: %s; unprivileged user namespaces are "
		 "likely disabled on this host (sysctl user.max_user_namespaces, "
		 "kernel.unprivileged_userns_clone or AppArmor's restriction) or this runs in a "
		 "chroot", vmm_jail_probe_reason);
}

enum vmm_jail_mode vmm_jail_host_mode(void)
{
	pthread_once(&vmm_jail_probe_once, vmm_jail_probe);
	return vmm_jail_probed_mode;
}

const char *vmm_jail_off_reason(void)
{
	return vmm_jail_probe_reason;
}

/* ---- the plan ---- */

struct vmm_jail *vmm_jail_new(bool own_network)
{
	struct vmm_jail *jail = calloc(1, sizeof(*jail));

	if (jail)
		jail->own_network = own_network;
	return jail;
}

/* Adds an entry; *canonical (if asked for) points at its target. 0 or -errno. */
static int vmm_jail_push(struct vmm_jail *jail, const char *source, const char *target,
			 enum vmm_jail_access access, enum vmm_jail_lifetime lifetime,
			 const char **canonical)
{
	struct vmm_jail_entry entry = { .access = access, .lifetime = lifetime, .fd = -1 };

	if (jail->count == jail->capacity) {
		size_t grown = jail->capacity ? jail->capacity * 2 : VMM_JAIL_FIRST_CAPACITY;
		struct vmm_jail_entry *more = realloc(jail->entries, grown * sizeof(*more));

		if (!more)
			return -ENOMEM;
		jail->entries = more;
		jail->capacity = grown;
	}
	entry.source = realpath(source, NULL);
	if (!entry.source)
		return -errno;
	entry.target = strdup(target ? target : entry.source);
	if (!entry.target || entry.target[0] != '/') {
		free(entry.source);
		free(entry.target);
		return entry.target ? -EINVAL : -ENOMEM;
	}
	jail->entries[jail->count++] = entry;
	if (canonical)
		*canonical = entry.target;
	return 0;
}

int vmm_jail_add(struct vmm_jail *jail, const char *source, const char *target,
		 enum vmm_jail_access access, enum vmm_jail_lifetime lifetime, char *err,
		 size_t errlen)
{
	int rc = vmm_jail_push(jail, source, target, access, lifetime, NULL);

	if (rc < 0)
		snprintf(err, errlen, "cannot put %s in the VMM process's jail: %s", source,
			 strerror(-rc));
	return rc;
}

/*
 * A path of the VM's: in the plan and *path made canonical, or, where it cannot be resolved,
 * left as it is for vm_create to report. Only running out of memory is an error.
 */
static int vmm_jail_push_vm_path(struct vmm_jail *jail, const char **path,
				 enum vmm_jail_access access, enum vmm_jail_lifetime lifetime)
{
	int rc;

	if (!*path)
		return 0;
	rc = vmm_jail_push(jail, *path, NULL, access, lifetime, path);
	return rc == -ENOMEM ? rc : 0;
}

/* mkdir -p of path; errors show in what uses it. */
static void vmm_jail_make_dirs(const char *path)
{
	char partial[PATH_MAX];

	if (snprintf(partial, sizeof(partial), "%s", path) >= (int)sizeof(partial))
		return;
	for (char *slash = strchr(partial + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(partial, VMM_JAIL_DIR_MODE);
		*slash = '/';
	}
	mkdir(partial, VMM_JAIL_DIR_MODE);
}

/* The vsock socket does not exist yet: its directory goes in, and the path is rebuilt on it. */
static int vmm_jail_push_socket(struct vmm_jail *jail, const char **socket_path)
{
	char dir[PATH_MAX], name[PATH_MAX];
	const char *canonical = NULL;
	int rc;

	if (!*socket_path || snprintf(dir, sizeof(dir), "%s", *socket_path) >= (int)sizeof(dir))
		return 0;
	snprintf(name, sizeof(name), "%s", basename(dir));
	dirname(dir);
	rc = vmm_jail_push(jail, dir, NULL, VMM_JAIL_READ_WRITE, VMM_JAIL_WHILE_RUNNING,
			   &canonical);
	if (rc < 0)
		return rc == -ENOMEM ? rc : 0;
	if (asprintf(&jail->socket_path, "%s/%s", canonical, name) < 0) {
		jail->socket_path = NULL;
		return -ENOMEM;
	}
	*socket_path = jail->socket_path;
	return 0;
}

/*
 * What a cold boot and a restore both reach by path: /dev/kvm, the console's log (created
 * here as the serial device would) and the runtime directory with the vsock socket.
 */
static int vmm_jail_push_runtime(struct vmm_jail *jail, const char **serial_log_path,
				 bool serial_to_stdout, const char **socket_path)
{
	const char *kvm = KVM_DEVICE_PATH;
	int rc = vmm_jail_push_vm_path(jail, &kvm, VMM_JAIL_READ_WRITE, VMM_JAIL_FOR_CREATION);

	if (rc == 0 && *serial_log_path && !serial_to_stdout) {
		int fd = open(*serial_log_path, O_WRONLY | O_CREAT | O_CLOEXEC,
			      VMM_JAIL_SERIAL_LOG_MODE);

		if (fd >= 0)
			close(fd);
		rc = vmm_jail_push_vm_path(jail, serial_log_path, VMM_JAIL_READ_WRITE,
					   VMM_JAIL_FOR_CREATION);
	}
	if (rc == 0)
		rc = vmm_jail_push_socket(jail, socket_path);
	return rc;
}

/* libslirp reads the host's resolvers whenever the guest asks for a name; GLib, urandom. */
static int vmm_jail_push_network(struct vmm_jail *jail)
{
	int rc = 0;

	if (access(VMM_JAIL_RESOLV_CONF, R_OK) == 0)
		rc = vmm_jail_push(jail, VMM_JAIL_RESOLV_CONF, VMM_JAIL_RESOLV_CONF,
				   VMM_JAIL_READ_ONLY, VMM_JAIL_WHILE_RUNNING, NULL);
	if (rc == 0 && access(VMM_JAIL_URANDOM, R_OK) == 0)
		rc = vmm_jail_push(jail, VMM_JAIL_URANDOM, NULL, VMM_JAIL_READ_ONLY,
				   VMM_JAIL_WHILE_RUNNING, NULL);
	return rc;
}

static enum vmm_jail_access vmm_jail_access_of(bool read_only)
{
	return read_only ? VMM_JAIL_READ_ONLY : VMM_JAIL_READ_WRITE;
}

/* A copy of count items of size bytes the jail owns; NULL for none, or out of memory. */
static void *vmm_jail_copy(const void *items, size_t count, size_t size)
{
	void *copy = count ? malloc(count * size) : NULL;

	if (copy)
		memcpy(copy, items, count * size);
	return copy;
}

static int vmm_jail_push_devices(struct vmm_jail *jail, const struct vm_config *cfg,
				 struct vm_config *jailed)
{
	int rc = 0;

	jail->disks = vmm_jail_copy(cfg->disks, cfg->disk_count, sizeof(*jail->disks));
	jail->shares = vmm_jail_copy(cfg->shares, cfg->share_count, sizeof(*jail->shares));
	if ((cfg->disk_count && !jail->disks) || (cfg->share_count && !jail->shares))
		return -ENOMEM;
	if (jail->disks)
		jailed->disks = jail->disks;
	if (jail->shares)
		jailed->shares = jail->shares;
	for (unsigned int i = 0; i < cfg->disk_count && rc == 0; i++)
		rc = vmm_jail_push_vm_path(jail, &jail->disks[i].path,
					   vmm_jail_access_of(jail->disks[i].read_only),
					   VMM_JAIL_FOR_CREATION);
	/* a share's worker works beneath it by path for the VM's whole life */
	for (unsigned int i = 0; i < cfg->share_count && rc == 0; i++)
		rc = vmm_jail_push_vm_path(jail, &jail->shares[i].host_dir,
					   vmm_jail_access_of(jail->shares[i].read_only),
					   VMM_JAIL_WHILE_RUNNING);
	if (rc == 0 && cfg->network)
		rc = vmm_jail_push_network(jail);
	return rc == -ENOMEM ? rc : 0;
}

int vmm_jail_plan_vm(const struct vm_config *cfg, struct vmm_jail **out,
		     struct vm_config *jailed, char *err, size_t errlen)
{
	struct vmm_jail *jail = vmm_jail_new(cfg->network != NULL);
	int rc;

	*out = NULL;
	*jailed = *cfg;
	if (!jail) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = vmm_jail_push_vm_path(jail, &jailed->kernel_path, VMM_JAIL_READ_ONLY,
				   VMM_JAIL_FOR_CREATION);
	if (rc == 0)
		rc = vmm_jail_push_vm_path(jail, &jailed->initramfs_path, VMM_JAIL_READ_ONLY,
					   VMM_JAIL_FOR_CREATION);
	/* created here as vm_create would (the kernel's extraction) */
	if (rc == 0 && jailed->vmlinux_cache_dir) {
		vmm_jail_make_dirs(jailed->vmlinux_cache_dir);
		rc = vmm_jail_push_vm_path(jail, &jailed->vmlinux_cache_dir, VMM_JAIL_READ_WRITE,
					   VMM_JAIL_FOR_CREATION);
	}
	if (rc == 0)
		rc = vmm_jail_push_runtime(jail, &jailed->serial_log_path, jailed->serial_to_stdout,
					   &jailed->vsock_socket_path);
	if (rc == 0)
		rc = vmm_jail_push_devices(jail, cfg, jailed);
	if (rc < 0) {
		vmm_jail_free(jail);
		*jailed = *cfg;
		snprintf(err, errlen, "out of memory planning the VMM process's jail");
		return rc;
	}
	*out = jail;
	return 0;
}

static bool vmm_jail_snapshot_has(const struct vm_snapshot_info *info, const char *device)
{
	for (unsigned int i = 0; i < info->device_count && i < VM_SNAPSHOT_MAX_DEVICES; i++)
		if (strcmp(info->devices[i], device) == 0)
			return true;
	return false;
}

/* What vmm_jail_push_saved_path needs besides the path. */
struct vmm_jail_saved_ctx {
	struct vmm_jail *jail;
	char *err;
	size_t errlen;
};

/*
 * A host path a device section names (vm_snapshot_host_paths): bound at that very name, since
 * the restore opens it by that name; one that cannot be resolved stays out for the restore to
 * report. A relative name could not be found in the jail's root: refused with a sentence.
 */
static int vmm_jail_push_saved_path(const struct vm_host_path *path, void *opaque)
{
	struct vmm_jail_saved_ctx *ctx = opaque;
	int rc;

	if (path->path[0] != '/') {
		snprintf(ctx->err, ctx->errlen, "the snapshot names %s by a relative path, which the "
			 "VMM process's jail cannot hold: take the snapshot again with the path "
			 "absolute", path->path);
		return -EINVAL;
	}
	rc = vmm_jail_push(ctx->jail, path->path, path->path,
			   vmm_jail_access_of(path->access == VM_HOST_PATH_READ_ONLY),
			   path->use == VM_HOST_PATH_AT_CREATION ? VMM_JAIL_FOR_CREATION
								 : VMM_JAIL_WHILE_RUNNING,
			   NULL);
	if (rc == -ENOMEM)
		snprintf(ctx->err, ctx->errlen, "out of memory planning the VMM process's jail");
	return rc == -ENOMEM ? rc : 0;
}

/*
 * The files of a restored snapshot's directory that the working set does not replace: its
 * state, both memory files (one is there) and the store's manifest and record. Bound
 * read-only over the read-write directory, so a subverted VMM can add its working-set list
 * there but cannot rewrite, replace or remove what the next restore of the same snapshot
 * trusts (a state naming other host paths, say).
 */
static const char *const vmm_jail_snapshot_files[] = {
	VM_SNAPSHOT_STATE_FILE, VM_SNAPSHOT_MEMORY_FILE, VM_SNAPSHOT_DIFF_FILE,
	VMM_JAIL_STORE_MANIFEST_FILE, VMM_JAIL_STORE_META_FILE,
};

/* Each of vmm_jail_snapshot_files that dir (canonical) holds, read-only for the VM's life. */
static int vmm_jail_push_snapshot_files(struct vmm_jail *jail, const char *dir)
{
	size_t count = sizeof(vmm_jail_snapshot_files) / sizeof(vmm_jail_snapshot_files[0]);
	char path[PATH_MAX];
	struct stat st;
	int rc = 0;

	for (size_t i = 0; i < count && rc == 0; i++) {
		if (snprintf(path, sizeof(path), "%s/%s", dir, vmm_jail_snapshot_files[i]) >=
			    (int)sizeof(path) ||
		    lstat(path, &st) < 0)
			continue;
		rc = vmm_jail_push(jail, path, path, VMM_JAIL_READ_ONLY, VMM_JAIL_WHILE_RUNNING,
				   NULL);
	}
	return rc == -ENOMEM ? rc : 0;
}

/* The snapshot chain, what its device sections name, and what the options name. */
static int vmm_jail_push_restore(struct vmm_jail *jail, const struct vm_snapshot_info *info,
				 const char **jailed_dir, struct vm_restore_options *jailed,
				 char *err, size_t errlen)
{
	struct vmm_jail_saved_ctx saved = { .jail = jail, .err = err, .errlen = errlen };
	/* the working set is recorded beside the snapshot, at any time of the VM's life */
	int rc = vmm_jail_push_vm_path(jail, jailed_dir, VMM_JAIL_READ_WRITE,
				       VMM_JAIL_WHILE_RUNNING);

	jail->restore_dir = *jailed_dir;
	if (rc == 0 && jail->restore_dir[0] == '/')
		rc = vmm_jail_push_snapshot_files(jail, jail->restore_dir);
	/* a diff's base, where its state file names it; a diff request against it reads it */
	if (rc == 0 && info->type == VM_SNAPSHOT_DIFF) {
		rc = vmm_jail_push(jail, info->parent_dir, info->parent_dir, VMM_JAIL_READ_ONLY,
				   VMM_JAIL_WHILE_RUNNING, &jail->restore_base);
		rc = rc == -ENOMEM ? rc : 0;
	}
	if (rc == 0)
		rc = vmm_jail_push_runtime(jail, &jailed->serial_log_path, jailed->serial_to_stdout,
					   &jailed->vsock_socket_path);
	if (rc == 0 && jail->own_network)
		rc = vmm_jail_push_network(jail);
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory planning the VMM process's jail");
	/* the disks and shares: only the device sections name them */
	if (rc == 0)
		rc = vm_snapshot_host_paths(jail->snapshot, vmm_jail_push_saved_path, &saved, err,
					    errlen);
	return rc;
}

int vmm_jail_plan_restore(const char *snapshot_dir, const struct vm_restore_options *opts,
			  struct vmm_jail **out, const char **jailed_dir,
			  struct vm_restore_options *jailed, char *err, size_t errlen)
{
	struct vm_snapshot_state *state = NULL;
	const struct vm_snapshot_info *info;
	struct vmm_jail *jail;
	int rc;

	*out = NULL;
	*jailed_dir = snapshot_dir;
	*jailed = *opts;
	rc = vm_snapshot_state_read(snapshot_dir, &state, err, errlen);
	if (rc < 0)
		return rc;
	info = vm_snapshot_state_info(state);
	jail = vmm_jail_new(vmm_jail_snapshot_has(info, VMM_JAIL_NET_DEVICE));
	if (!jail) {
		vm_snapshot_state_free(state);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	jail->snapshot = state;
	rc = vmm_jail_push_restore(jail, info, jailed_dir, jailed, err, errlen);
	if (rc < 0) {
		vmm_jail_free(jail);
		*jailed_dir = snapshot_dir;
		*jailed = *opts;
		return rc;
	}
	*out = jail;
	return 0;
}

const struct vm_snapshot_state *vmm_jail_snapshot_state(const struct vmm_jail *jail)
{
	return jail ? jail->snapshot : NULL;
}

/* ---- the snapshot-writing thread ---- */

int vmm_jail_hold_snapshot_writer(const struct vmm_jail *jail, const char *const *areas,
				  char *err, size_t errlen)
{
	struct vmm_thread_path paths[VMM_JAIL_WRITER_PATHS_MAX];
	size_t count = 0;
	int rc;

	paths[count++] = (struct vmm_thread_path){ .path = VMM_JAIL_PAGEMAP, .read_only = true };
	if (jail && jail->restore_dir)
		paths[count++] = (struct vmm_thread_path){ .path = jail->restore_dir };
	if (jail && jail->restore_base)
		paths[count++] = (struct vmm_thread_path){ .path = jail->restore_base,
							   .read_only = true };
	for (size_t i = 0; areas && areas[i]; i++) {
		if (count == VMM_JAIL_WRITER_PATHS_MAX) {
			snprintf(err, errlen, "too many snapshot directories for the VMM process: at "
				 "most %d", VMM_JAIL_WRITER_PATHS_MAX - VMM_JAIL_WRITER_OWN_PATHS);
			return -E2BIG;
		}
		paths[count++] = (struct vmm_thread_path){ .path = areas[i] };
	}
	rc = vmm_thread_restrict_to(paths, count);
	if (rc == -EOPNOTSUPP) {
		log_info(VMM_JAIL_LOG, "this kernel has no Landlock (version 2 or later): the VMM "
			 "process's snapshot-writing thread reaches every file its jail holds, not "
			 "only its snapshot directories");
		return 0;
	}
	if (rc < 0)
		snprintf(err, errlen, "cannot hold the VMM process's snapshot-writing thread "
			 "beneath its snapshot directories (Landlock): %s", strerror(-rc));
	return rc;
}

/* ---- entering ---- */

static int vmm_jail_by_length(const void *a, const void *b)
{
	size_t la = strlen(((const struct vmm_jail_entry *)a)->target);
	size_t lb = strlen(((const struct vmm_jail_entry *)b)->target);

	return la < lb ? -1 : la > lb;
}

/* The mount flags a read-only remount must keep (a user namespace may not drop them). */
static unsigned long vmm_jail_kept_flags(const char *path)
{
	static const struct {
		unsigned long st, ms;
	} kept[] = {
		{ ST_NOSUID, MS_NOSUID },     { ST_NODEV, MS_NODEV },
		{ ST_NOEXEC, MS_NOEXEC },     { ST_NOATIME, MS_NOATIME },
		{ ST_NODIRATIME, MS_NODIRATIME }, { ST_RELATIME, MS_RELATIME },
	};
	unsigned long flags = 0;
	struct statvfs fs;

	if (statvfs(path, &fs) < 0)
		return 0;
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		if (fs.f_flag & kept[i].st)
			flags |= kept[i].ms;
	return flags;
}

/* The mount point of entry beneath the tmpfs (directories on the way), then the bind. */
static int vmm_jail_bind(const struct vmm_jail_entry *entry, char *err, size_t errlen)
{
	char target[PATH_MAX], source[VMM_JAIL_FD_PATH_MAX];
	struct stat st;
	const char *what = "making its mount point";
	int rc = 0;

	if (snprintf(target, sizeof(target), "%s%s", VMM_JAIL_BASE, entry->target) >=
	    (int)sizeof(target)) {
		snprintf(err, errlen, "cannot put %s in the VMM process's jail: the path is too "
			 "long", entry->target);
		return -ENAMETOOLONG;
	}
	for (char *slash = strchr(target + strlen(VMM_JAIL_BASE) + 1, '/'); slash;
	     slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (lstat(target, &st) < 0 && mkdir(target, VMM_JAIL_DIR_MODE) < 0)
			rc = -errno;
		*slash = '/';
	}
	if (rc == 0 && lstat(target, &st) < 0) {
		int fd = -1;

		if (entry->is_dir)
			rc = mkdir(target, VMM_JAIL_DIR_MODE) < 0 ? -errno : 0;
		else if ((fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
				    VMM_JAIL_MOUNT_POINT_MODE)) < 0)
			rc = -errno;
		if (fd >= 0)
			close(fd);
	}
	snprintf(source, sizeof(source), "/proc/self/fd/%d", entry->fd);
	if (rc == 0) {
		what = "binding it";
		if (mount(source, target, NULL, MS_BIND | (entry->is_dir ? MS_REC : 0), NULL) < 0)
			rc = -errno;
	}
	if (rc == 0 && entry->access == VMM_JAIL_READ_ONLY) {
		what = "making it read-only";
		if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
			  vmm_jail_kept_flags(target), NULL) < 0)
			rc = -errno;
	}
	if (rc < 0)
		snprintf(err, errlen, "cannot put %s in the VMM process's jail: %s: %s",
			 entry->source, what, strerror(-rc));
	return rc;
}

/* Opens every source, mounts the tmpfs, binds each entry, then makes the tmpfs read-only. */
static int vmm_jail_build(struct vmm_jail *jail, struct vmm_jail_failure *failure, char *err,
			  size_t errlen)
{
	int rc = 0;

	qsort(jail->entries, jail->count, sizeof(*jail->entries), vmm_jail_by_length);
	for (size_t i = 0; i < jail->count && rc == 0; i++) {
		struct vmm_jail_entry *entry = &jail->entries[i];
		struct stat st;

		entry->fd = open(entry->source, O_PATH | O_CLOEXEC);
		if (entry->fd < 0 || fstat(entry->fd, &st) < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot put %s in the VMM process's jail: %s",
				 entry->source, strerror(errno));
			break;
		}
		entry->is_dir = S_ISDIR(st.st_mode);
	}
	if (rc == 0 && (rc = vmm_jail_mount_root(failure)) < 0)
		snprintf(err, errlen, "cannot build the VMM process's root: %s failed: %s",
			 vmm_jail_step_names[failure->step], strerror(-rc));
	for (size_t i = 0; i < jail->count && rc == 0; i++)
		rc = vmm_jail_bind(&jail->entries[i], err, errlen);
	if (rc == 0 && mount(NULL, VMM_JAIL_BASE, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY |
			     MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot make the VMM process's root read-only: %s",
			 strerror(errno));
	}
	for (size_t i = 0; i < jail->count; i++) {
		if (jail->entries[i].fd >= 0)
			close(jail->entries[i].fd);
		jail->entries[i].fd = -1;
	}
	return rc;
}

int vmm_jail_enter(struct vmm_jail *jail, enum vmm_jail_mode mode, char *err, size_t errlen)
{
	struct vmm_jail_failure failure = { VMM_JAIL_STEP_NONE, 0 };
	struct vmm_jail_ids ids;
	int rc;

	if (mode == VMM_JAIL_OFF)
		return 0;
	/* the share's server reopens its descriptors by /proc/self/fd; the rest of /proc stays out */
	rc = vmm_jail_push(jail, VMM_JAIL_PROC_SELF, VMM_JAIL_PROC_SELF, VMM_JAIL_READ_WRITE,
			   VMM_JAIL_WHILE_RUNNING, NULL);
	if (rc < 0) {
		snprintf(err, errlen, "cannot find this process in /proc: %s", strerror(-rc));
		return rc;
	}
	vmm_jail_format_ids(&ids);
	rc = vmm_jail_unshare(mode, jail->own_network, &ids, &failure);
	if (rc < 0) {
		snprintf(err, errlen, "cannot give the VMM process namespaces of its own: %s "
			 "failed: %s", vmm_jail_step_names[failure.step], strerror(-rc));
		return rc;
	}
	rc = vmm_jail_build(jail, &failure, err, errlen);
	if (rc == 0 && (rc = vmm_jail_pivot(&failure)) < 0)
		snprintf(err, errlen, "cannot move the VMM process into its root: pivot_root "
			 "failed: %s", strerror(-rc));
	jail->entered = rc == 0;
	return rc;
}

void vmm_jail_seal(struct vmm_jail *jail)
{
	if (!jail)
		return;
	/* the restore is done with the state it read */
	vm_snapshot_state_free(jail->snapshot);
	jail->snapshot = NULL;
	if (!jail->entered)
		return;
	for (size_t i = jail->count; i-- > 0;) {
		const struct vmm_jail_entry *entry = &jail->entries[i];

		if (entry->lifetime == VMM_JAIL_FOR_CREATION &&
		    umount2(entry->target, MNT_DETACH) < 0)
			log_warn(VMM_JAIL_LOG, "cannot take %s out of the VMM process's jail: %s; it "
				 "stays reachable there", entry->target, strerror(errno));
	}
}

void vmm_jail_free(struct vmm_jail *jail)
{
	if (!jail)
		return;
	for (size_t i = 0; i < jail->count; i++) {
		free(jail->entries[i].source);
		free(jail->entries[i].target);
	}
	free(jail->entries);
	free(jail->disks);
	free(jail->shares);
	free(jail->socket_path);
	vm_snapshot_state_free(jail->snapshot);
	free(jail);
}
