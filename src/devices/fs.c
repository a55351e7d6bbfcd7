/*
 * virtio-fs (VIRTIO 1.2 §5.11): the transport side of a shared host directory. Config space is
 * the tag (36 bytes, NUL-padded) and num_request_queues (1); queue 0 is hiprio (FORGET and
 * BATCH_FORGET, no reply), queue 1 carries every other request.
 *
 * A vCPU's queue notify only writes an eventfd -- in KVM itself, through an ioeventfd on the
 * QUEUE_NOTIFY register, when the VM has one; the device's worker thread then pops chains and
 * hands fuse_server each one's buffers as two iovec lists, the readable part (the request) and
 * the writable part (room for the reply), every buffer already checked to lie inside guest
 * RAM by the virtqueue. The server copies headers and arguments in and replies out, and moves
 * file data with one pwritev or preadv on those buffers, so a WRITE's or READ's data is
 * copied once, by the host kernel, as QEMU's 9p does. Guest RAM stays the VMM's private
 * mapping (no vhost-user shared memory). The worker holds the
 * device lock for a whole request, from pop to push: a snapshot (which takes the same lock
 * until resume) therefore never sees a request half-served, and the ring indices it saves
 * agree with the memory file.
 *
 * The snapshot section is the tag, the host directory, the access mode, the transport's
 * registers and ring indices, and the server's inode and handle tables (by path relative to
 * the share). A restore re-opens the host directory it names; a restored or forked VM shares
 * that directory with whoever else uses it.
 */
#include "devices/fs.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "devices/virtio_attach.h"
#include "vmm/device.h"
#include "vmm/placement.h"
#include "vmm/thread_filter.h"

/* The worker's name in /proc/PID/task (at most 15 bytes). */
#define FS_WORKER_THREAD_NAME "fs-worker"
#define FS_STATE_VERSION 1u
/* Room for a 1 MiB request's 256 pages and its headers in one chain (FUSE_SERVER_MAX_WRITE). */
#define FS_QUEUE_NUM_MAX 512
#define FS_CONFIG_SIZE (FS_TAG_LEN + sizeof(uint32_t))
#define FS_REQUEST_QUEUES 1u

static const char *const log_module = "virtio-fs";
static pthread_once_t fs_fd_limit_once = PTHREAD_ONCE_INIT;

struct fs_device {
	pthread_mutex_t lock;
	struct virtio_mmio *transport;
	struct virtqueue *queues; /* the transport's, while the driver has the device running */
	struct fuse_server *server;
	char tag[FS_TAG_LEN + 1];
	char host_dir[PATH_MAX];
	enum fuse_server_access access;
	enum fs_worker_mode mode;
	bool confine_worker;
	cpu_set_t worker_cpus; /* valid when worker_floats */
	bool worker_floats;
	int kick_fd;
	pthread_t worker;
	bool worker_started;
	atomic_bool stopping;
	struct virtqueue_chain chain; /* the chain being served (large: not on a stack) */
	struct iovec request[VIRTQUEUE_MAX_SIZE]; /* its readable buffers */
	struct iovec reply[VIRTQUEUE_MAX_SIZE];   /* its writable buffers */
};

_Static_assert(VIRTQUEUE_MAX_SIZE <= FUSE_SERVER_MAX_SEGMENTS,
	       "the server takes every buffer a chain may have");

static void fs_kick(struct fs_device *dev)
{
	uint64_t one = 1;

	if (dev->kick_fd >= 0 && write(dev->kick_fd, &one, sizeof(one)) < 0)
		log_debug(log_module, "kick failed: %s", strerror(errno));
}

/*
 * One chain: request in, reply out, served on the chain's own buffers. Returns the bytes
 * written into the writable ones (at most FUSE_SERVER_MAX_REPLY). Called with the device lock
 * held.
 */
static uint32_t fs_serve_chain(struct fs_device *dev)
{
	unsigned int readable = 0, writable = 0;

	for (unsigned int i = 0; i < dev->chain.buffer_count; i++) {
		const struct virtqueue_buffer *buf = &dev->chain.buffers[i];
		struct iovec segment = { .iov_base = buf->host, .iov_len = buf->len };

		if (buf->writable)
			dev->reply[writable++] = segment;
		else
			dev->request[readable++] = segment;
	}
	return (uint32_t)fuse_server_handle_segments(dev->server, dev->request, readable,
						     dev->reply, writable);
}

static unsigned int fs_serve_queue(struct fs_device *dev, struct virtqueue *vq)
{
	unsigned int served = 0;
	int rc;

	if (!vq->configured || vq->broken)
		return 0;
	while ((rc = virtqueue_pop(vq, &dev->chain)) == 1) {
		uint32_t written = fs_serve_chain(dev);

		if (virtqueue_push(vq, dev->chain.head, written) < 0) {
			rc = -EIO;
			break;
		}
		served++;
	}
	if (rc < 0)
		virtio_mmio_mark_broken(dev->transport);
	if (served && virtqueue_should_signal(vq))
		virtio_mmio_signal_used(dev->transport);
	return served;
}

static unsigned int fs_serve_locked(struct fs_device *dev)
{
	unsigned int served = 0;

	for (unsigned int i = 0; dev->queues && i < FS_QUEUE_COUNT; i++)
		served += fs_serve_queue(dev, &dev->queues[i]);
	return served;
}

unsigned int fs_device_poll(struct fs_device *dev)
{
	unsigned int served;

	pthread_mutex_lock(&dev->lock);
	served = fs_serve_locked(dev);
	pthread_mutex_unlock(&dev->lock);
	return served;
}

/*
 * The worker reaches no file outside its share (Landlock; read-only shares only read), on top
 * of the FUSE server's own openat2(RESOLVE_BENEATH). A kernel without Landlock leaves that to
 * the server alone, which is worth a debug line, not a warning on every boot.
 */
static void fs_worker_restrict_files(const struct fs_device *dev)
{
	const char *const share[] = { dev->host_dir };
	int rc = vmm_thread_restrict_to_dirs(share, 1, dev->access == FUSE_SERVER_READ_ONLY);

	if (rc == -EOPNOTSUPP)
		log_debug(log_module, "%s: no Landlock in this kernel; the share's worker is "
			  "confined by its seccomp filter only", dev->tag);
	else if (rc < 0)
		log_error(log_module, "%s: cannot limit the share's worker to %s: %s", dev->tag,
			  dev->host_dir, strerror(-rc));
}

static void *fs_worker_main(void *arg)
{
	struct fs_device *dev = arg;
	uint64_t kicks;

	/* before the filter: setting affinity is not among the share role's calls */
	vm_placement_float_thread(dev->worker_floats ? &dev->worker_cpus : NULL);
	if (dev->confine_worker)
		fs_worker_restrict_files(dev);
	vmm_thread_enter(VMM_THREAD_SHARE_WORKER, FS_WORKER_THREAD_NAME, dev->confine_worker);
	while (!atomic_load(&dev->stopping)) {
		if (read(dev->kick_fd, &kicks, sizeof(kicks)) < 0 && errno != EINTR) {
			log_error(log_module, "%s: worker stopped: %s; the guest's share hangs",
				  dev->tag, strerror(errno));
			break;
		}
		if (!atomic_load(&dev->stopping))
			fs_device_poll(dev);
	}
	return NULL;
}

/* ---- virtio device ops ---- */

static void fs_config_read(void *opaque, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct fs_device *dev = opaque;
	uint8_t config[FS_CONFIG_SIZE] = { 0 };
	uint32_t queues = FS_REQUEST_QUEUES;

	memcpy(config, dev->tag, strlen(dev->tag));
	for (unsigned int i = 0; i < sizeof(queues); i++)
		config[FS_TAG_LEN + i] = (uint8_t)(queues >> (8 * i));
	memcpy(data, config + offset, len); /* the transport checked offset + len */
}

static void fs_queue_notify(void *opaque, unsigned int queue_index)
{
	struct fs_device *dev = opaque;

	(void)queue_index;
	if (dev->mode == FS_WORKER_THREAD)
		fs_kick(dev);
}

static int fs_activate(void *opaque, struct virtqueue *queues, unsigned int queue_count,
		       uint64_t driver_features)
{
	struct fs_device *dev = opaque;

	(void)driver_features;
	if (queue_count != FS_QUEUE_COUNT || !queues[FS_QUEUE_REQUEST].configured)
		return -EINVAL;
	dev->queues = queues;
	return 0;
}

static void fs_reset(void *opaque)
{
	struct fs_device *dev = opaque;

	dev->queues = NULL;
}

static const struct virtio_device_ops fs_virtio_ops = {
	.device_id = VIRTIO_ID_FS,
	.features = (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_EVENT_IDX) |
		    (1ull << VIRTIO_RING_F_INDIRECT_DESC),
	.queue_count = FS_QUEUE_COUNT,
	.queue_num_max = FS_QUEUE_NUM_MAX,
	.config_size = FS_CONFIG_SIZE,
	.config_read = fs_config_read,
	.queue_notify = fs_queue_notify,
	.activate = fs_activate,
	.reset = fs_reset,
};

/* ---- lifetime ---- */

/*
 * Every inode the guest holds is an O_PATH fd, and the guest forgets inodes only when its
 * cache lets them go, so a share needs far more fds than the usual soft limit of 1024 (a
 * `tar x` of a few thousand files would fail with EMFILE). The soft limit is raised to the
 * hard one, once per process.
 */
static void fs_raise_fd_limit(void)
{
	struct rlimit limit;

	if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
		limit.rlim_cur = limit.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &limit) < 0)
			log_debug(log_module, "cannot raise the open file limit: %s",
				  strerror(errno));
	}
}

static void fs_device_free(struct fs_device *dev)
{
	fuse_server_destroy(dev->server);
	if (dev->kick_fd >= 0)
		close(dev->kick_fd);
	virtio_mmio_destroy(dev->transport);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

static int fs_check_config(const struct fs_device_config *cfg, char *err, size_t errlen)
{
	if (!cfg->tag || !cfg->tag[0] || strlen(cfg->tag) > FS_TAG_LEN) {
		snprintf(err, errlen, "a virtio-fs tag must be 1 to %d bytes", FS_TAG_LEN);
		return -EINVAL;
	}
	if (!cfg->host_dir || strlen(cfg->host_dir) >= PATH_MAX || !cfg->mem) {
		snprintf(err, errlen, "a shared directory needs a host path and guest memory");
		return -EINVAL;
	}
	return 0;
}

struct fs_device *fs_device_create(const struct fs_device_config *cfg, char *err, size_t errlen)
{
	struct fs_device *dev;

	if (fs_check_config(cfg, err, errlen) < 0)
		return NULL;
	pthread_once(&fs_fd_limit_once, fs_raise_fd_limit);
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		snprintf(err, errlen, "out of memory creating the share %s", cfg->host_dir);
		return NULL;
	}
	pthread_mutex_init(&dev->lock, NULL);
	dev->kick_fd = -1;
	dev->mode = cfg->worker_mode;
	dev->confine_worker = cfg->confine_worker;
	if (cfg->worker_cpus) {
		dev->worker_cpus = *cfg->worker_cpus;
		dev->worker_floats = true;
	}
	dev->access = cfg->access;
	atomic_init(&dev->stopping, false);
	snprintf(dev->tag, sizeof(dev->tag), "%s", cfg->tag);
	snprintf(dev->host_dir, sizeof(dev->host_dir), "%s", cfg->host_dir);
	dev->kick_fd = eventfd(0, EFD_CLOEXEC);
	if (dev->kick_fd < 0) {
		snprintf(err, errlen, "cannot set up the share %s: %s", cfg->host_dir,
			 strerror(errno ? errno : ENOMEM));
		goto fail;
	}
	dev->server = fuse_server_create(cfg->host_dir, cfg->access, err, errlen);
	if (!dev->server)
		goto fail;
	struct virtio_mmio_config transport_cfg = {
		.ops = &fs_virtio_ops, .opaque = dev, .mem = cfg->mem, .irq = cfg->irq,
		.device_lock = &dev->lock,
	};
	dev->transport = virtio_mmio_create(&transport_cfg);
	if (!dev->transport) {
		snprintf(err, errlen, "out of memory creating the share's transport");
		goto fail;
	}
	if (dev->mode == FS_WORKER_THREAD) {
		int rc = pthread_create(&dev->worker, NULL, fs_worker_main, dev);

		if (rc) {
			snprintf(err, errlen, "cannot start the share's worker thread: %s",
				 strerror(rc));
			goto fail;
		}
		dev->worker_started = true;
	}
	return dev;
fail:
	fs_device_free(dev);
	return NULL;
}

void fs_device_destroy(struct fs_device *dev)
{
	if (!dev)
		return;
	if (dev->worker_started) {
		atomic_store(&dev->stopping, true);
		fs_kick(dev);
		pthread_join(dev->worker, NULL);
	}
	fs_device_free(dev);
}

struct virtio_mmio *fs_device_transport(struct fs_device *dev)
{
	return dev->transport;
}

struct fuse_server *fs_device_server(struct fs_device *dev)
{
	return dev->server;
}

/* ---- as a VM device ---- */

static int fs_vm_save(void *opaque, struct byte_writer *out)
{
	struct fs_device *dev = opaque;
	struct virtio_mmio_state state;

	virtio_mmio_state_get_held(dev->transport, &state); /* dev->lock, until fs_vm_resume */
	byte_writer_string(out, dev->tag);
	byte_writer_string(out, dev->host_dir);
	byte_writer_u8(out, (uint8_t)dev->access);
	virtio_mmio_state_write(out, &state);
	fuse_server_save(dev->server, out);
	return 0;
}

static void fs_vm_resume(void *opaque)
{
	struct fs_device *dev = opaque;

	pthread_mutex_unlock(&dev->lock);
}

struct fs_saved_identity {
	char tag[FS_TAG_LEN + 1];
	char host_dir[PATH_MAX];
	enum fuse_server_access access;
};

static bool fs_read_identity(struct byte_reader *in, struct fs_saved_identity *id)
{
	uint8_t access;

	byte_reader_string(in, id->tag, sizeof(id->tag));
	byte_reader_string(in, id->host_dir, sizeof(id->host_dir));
	access = byte_reader_u8(in);
	id->access = access == FUSE_SERVER_READ_ONLY ? FUSE_SERVER_READ_ONLY
						     : FUSE_SERVER_READ_WRITE;
	return !in->failed && id->tag[0] && id->host_dir[0] && access <= FUSE_SERVER_READ_ONLY;
}

static int fs_vm_restore(void *opaque, struct byte_reader *in, uint32_t version, char *err,
			 size_t errlen)
{
	struct fs_device *dev = opaque;
	struct fs_saved_identity id;
	struct virtio_mmio_state state;
	int rc;

	(void)version;
	if (!fs_read_identity(in, &id) || strcmp(id.tag, dev->tag) != 0) {
		snprintf(err, errlen, "the share's saved state is malformed: take the snapshot "
			 "again");
		return -EBADMSG;
	}
	virtio_mmio_state_read(in, &state);
	pthread_mutex_lock(&dev->lock);
	rc = in->failed ? -EBADMSG : fuse_server_restore(dev->server, in);
	pthread_mutex_unlock(&dev->lock);
	if (rc < 0 || byte_reader_finish(in) < 0) {
		snprintf(err, errlen, "the share %s has a malformed saved state: take the "
			 "snapshot again", dev->host_dir);
		return -EBADMSG;
	}
	rc = virtio_mmio_state_set(dev->transport, &state);
	if (rc < 0) {
		snprintf(err, errlen, "the share %s refused its saved state: %s", dev->host_dir,
			 strerror(-rc));
		return rc;
	}
	fs_kick(dev); /* requests the guest queued before the snapshot */
	return 0;
}

static void fs_vm_destroy(void *opaque)
{
	fs_device_destroy(opaque);
}

extern const struct vm_device_type fs_device_type;

static const struct vm_device_ops fs_vm_ops = {
	.state_version = FS_STATE_VERSION,
	.save = fs_vm_save,
	.resume = fs_vm_resume,
	.restore = fs_vm_restore,
	.destroy = fs_vm_destroy,
};

/*
 * A notify only wakes the worker: bound in KVM (kick_fd) it does so without an exit to a vCPU
 * thread (each request waits for one notify, so this is most of a small request's cost under
 * nested virtualization).
 */
static int fs_attach_create(void *ctx, const struct guest_memory *mem, struct irq_line irq,
			    struct virtio_attached *out, char *err, size_t errlen)
{
	struct fs_device_config *cfg = ctx;
	struct fs_device *dev;

	cfg->mem = mem;
	cfg->irq = irq;
	dev = fs_device_create(cfg, err, errlen);
	if (!dev)
		return -EIO;
	*out = (struct virtio_attached){ .dev = dev, .transport = dev->transport,
					 .kick_fd = dev->kick_fd };
	return 0;
}

static int fs_vm_attach(struct vm *vm, const char *tag, const char *host_dir,
			enum fuse_server_access access, char *err, size_t errlen)
{
	struct fs_device_config cfg = { .tag = tag, .host_dir = host_dir, .access = access,
					.worker_mode = FS_WORKER_THREAD,
					.confine_worker = vm_thread_filters_on(vm),
					.worker_cpus = vm_stream_worker_cpus(vm) };
	char what[PATH_MAX + sizeof("the share ")];
	const struct virtio_attach spec = {
		.type = &fs_device_type, .what = what, .create = fs_attach_create, .ctx = &cfg,
	};

	snprintf(what, sizeof(what), "the share %s", host_dir);
	return virtio_attach(vm, &spec, err, errlen);
}

/* The identity at the head of a restore's section: 0, or -EBADMSG with err set. */
static int fs_read_section(const struct vm_device_section *saved, struct fs_saved_identity *id,
			   char *err, size_t errlen)
{
	struct byte_reader in;

	byte_reader_init(&in, saved->state, saved->state_len);
	if (fs_read_identity(&in, id))
		return 0;
	snprintf(err, errlen, "the share section of the snapshot is malformed: take the "
		 "snapshot again");
	return -EBADMSG;
}

/* A cold boot makes one device per share the config names; a restore, the one saved. */
static int fs_vm_create(struct vm *vm, const struct vm_config *cfg,
			const struct vm_device_section *saved, char *err, size_t errlen)
{
	struct fs_saved_identity id;
	int rc = 0;

	if (saved) {
		rc = fs_read_section(saved, &id, err, errlen);
		return rc < 0 ? rc : fs_vm_attach(vm, id.tag, id.host_dir, id.access, err, errlen);
	}
	for (unsigned int i = 0; rc == 0 && i < cfg->share_count; i++) {
		rc = fs_vm_attach(vm, cfg->shares[i].tag, cfg->shares[i].host_dir,
				  cfg->shares[i].read_only ? FUSE_SERVER_READ_ONLY
							   : FUSE_SERVER_READ_WRITE,
				  err, errlen);
	}
	return rc;
}

/* A restored share's worker works beneath its directory by path for the VM's whole life. */
static int fs_vm_host_paths(const struct vm_device_section *saved, vm_host_path_fn each,
			    void *opaque, char *err, size_t errlen)
{
	struct fs_saved_identity id;
	int rc = fs_read_section(saved, &id, err, errlen);

	if (rc < 0)
		return rc;
	return each(&(const struct vm_host_path){
			    .path = id.host_dir,
			    .access = id.access == FUSE_SERVER_READ_ONLY ? VM_HOST_PATH_READ_ONLY
									: VM_HOST_PATH_READ_WRITE,
			    .use = VM_HOST_PATH_WHILE_RUNNING,
		    },
		    opaque);
}

const struct vm_device_type fs_device_type = {
	.name = "fs",
	.ops = &fs_vm_ops,
	.create = fs_vm_create,
	.host_paths = fs_vm_host_paths,
};
