/*
 * The FUSE protocol (<linux/fuse.h>, 7.x) served from one host directory, for virtio-fs.
 *
 * Shape: a request is parsed through a bounded cursor (fuse_req) that hands out fixed-size
 * argument structs by copy and names only when they are NUL-terminated inside the request,
 * one component long and neither "." nor ".."; the reply is built in a bounded buffer
 * (fuse_reply) whose overflow is an error, never a write past it. One function per opcode
 * (or per family of opcodes), dispatched by one switch, each returning 0 or -errno: the
 * dispatcher turns that into the reply header, so no path can forget to answer.
 *
 * Inodes: node id N is slot N - 1 of a growable table (node id 1, the root, is slot 0), each
 * found by one openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, O_NOFOLLOW) per name beneath
 * its parent, deduplicated by (st_dev, st_ino) through a hash so a hard link is one node. The
 * guest keeps every inode it looked up until memory pressure makes it forget, so a node holds
 * its O_PATH fd only while it is among the budget's most recently used; each keeps its parent
 * slot and name, and one whose fd was closed reopens from the nearest ancestor holding one and
 * must be the same inode again (else ESTALE). A node is freed when the guest forgets it as
 * often as it looked it up and no node is found through it. Opening for I/O goes through
 * /proc/self/fd/N of the O_PATH fd (the exact inode, no name to race), and only for regular
 * files and directories. Handles are slots of a fixed table; fh = slot + 1.
 *
 * Regular files are served without opens: OPEN answers ENOSYS, which tells the guest kernel
 * to stop sending OPEN and RELEASE (the latter synchronous on virtio-fs: one round trip per
 * close()), and CREATE answers handle 0. File I/O with handle 0 goes to the node's own cached
 * fds, one for reading and one for writing, opened on first use through /proc/self/fd and
 * closed when the node is forgotten, when the share's part of them is open (the least
 * recently used node's, from a list, as the O_PATH fds are), or when the process runs out of
 * fds (the cache is only a cache: a closed one reopens). FUSE_ATOMIC_O_TRUNC is not offered,
 * since no OPEN carries O_TRUNC: an open(O_TRUNC) reaches the server as a SETATTR of the
 * size. A write-only CREATE is written past the guest's page cache (FOPEN_DIRECT_IO), and
 * every guest write moves the modification time the guest is shown (node_shown_mtime): that
 * is how a reader's cached pages of the file learn they are stale.
 *
 * Snapshots save every node's path relative to the share, read back from the O_PATH fd's
 * /proc link (the kernel follows renames for us; a closed fd is reopened first); a node whose
 * inode was deleted or moved out of the share is saved as stale and answers ESTALE after a
 * restore. A restored node's name is that path, beneath the root.
 */
#include "devices/fuse_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#define FUSE_ROOT_NODE 1u
#define FUSE_PROTO_MAJOR 7u
/* The oldest minor whose request and reply layouts this server writes (Linux 4.20+). */
#define FUSE_PROTO_MINOR_MIN 28u
#define FUSE_PAGE_SIZE 4096u
/*
 * How long the guest may trust an entry, a missing name or attributes without asking: a
 * second on a read-write share, whose host side may change under it; longer on a read-only
 * one, which the guest cannot change and whose file data also stays cached across opens
 * (FOPEN_KEEP_CACHE), dropped when a refresh shows the host changed the file
 * (FUSE_AUTO_INVAL_DATA).
 */
#define FUSE_CACHE_TIMEOUT_SEC 1u
#define FUSE_CACHE_TIMEOUT_RO_SEC 30u
#define FUSE_INODE_HASH_BUCKETS 65536u
/*
 * The fds every share of a process holds together stay within parts of its open-file limit,
 * each live share taking an equal part, so that however many shares a VM has, its vsock,
 * network and disks keep the rest: O_PATH fds of nodes (besides the roots') a quarter, open
 * handles a quarter, cached I/O fds a sixteenth. Each share's part is recomputed as shares
 * come and go, within the bounds below. A node whose fd is closed reopens from its parent on
 * use.
 */
#define FUSE_NODE_FDS_MIN 8u
#define FUSE_NODE_FDS_MAX 16384u
#define FUSE_NODE_FDS_PART_OF_LIMIT 4u
#define FUSE_HANDLES_MIN 16u
#define FUSE_HANDLES_PART_OF_LIMIT 4u
#define FUSE_IO_FDS_MIN 4u
#define FUSE_IO_FDS_PART_OF_LIMIT 16u
/* Bytes of node names a share holds at most (beside its FUSE_SERVER_MAX_INODES slots). */
#define FUSE_NAME_BYTES_MAX (64u * 1024u * 1024u)
#define FUSE_INODE_TABLE_INITIAL 64u
/*
 * Cached per-node I/O fds a share holds at once, all its nodes together (besides each node's
 * O_PATH fd): a few files' worth of streaming. They also yield to nodes: an open that fails
 * for want of fds closes them all and tries again, so the cache never costs the guest a node.
 */
#define FUSE_IO_FDS_MAX 256u
#define FUSE_NO_SLOT UINT32_MAX
#define FUSE_GUEST_NOBODY 65534u
#define FUSE_XATTR_VALUE_MAX 65536u
_Static_assert(FUSE_SERVER_MAX_ARGS >= FUSE_XATTR_VALUE_MAX + FUSE_SERVER_HEADER_ROOM,
	       "a SETXATTR with its longest value and a GETXATTR's reply fit the copied part");
#define FUSE_DIRENTS_BUFFER 32768u
#define FUSE_PROC_FD_PATH_MAX 48u
#define FUSE_NSEC_PER_SEC 1000000000L
#define FUSE_STATE_MAGIC 0x46555345u /* "FUSE" */
#define FUSE_XATTR_USER_PREFIX "user."
#define FUSE_RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
#define FUSE_RENAME_FLAGS_KNOWN (RENAME_NOREPLACE | RENAME_EXCHANGE)
#define FUSE_OPEN_FLAGS_STRIPPED (O_CREAT | O_EXCL | O_NOCTTY)
#define FUSE_INIT_FLAGS_OFFERED                                                                \
	(FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_DO_READDIRPLUS |            \
	 FUSE_READDIRPLUS_AUTO | FUSE_PARALLEL_DIROPS | FUSE_AUTO_INVAL_DATA |                 \
	 FUSE_HANDLE_KILLPRIV_V2)
/* The open flags a created file's cached fd keeps: no O_APPEND or O_DIRECT for later writes. */
#define FUSE_CREATE_FLAGS_KEPT (O_ACCMODE | O_EXCL | O_TRUNC)

/* What a node's cached I/O fd serves (fuse_inode.io_fd). */
enum fuse_io_access { FUSE_IO_READ, FUSE_IO_WRITE, FUSE_IO_ACCESSES };

/*
 * The least-recently-used lists of slots whose fds the server may close to stay within a
 * bound: closing one is taking the tail, never a walk of the table.
 */
enum fuse_fd_list {
	FUSE_LIST_NODE_FD, /* nodes holding their O_PATH fd (never the root) */
	FUSE_LIST_IO_FD,   /* regular files holding a cached I/O fd */
	FUSE_LISTS,
};

struct fuse_list_link {
	uint32_t prev, next; /* FUSE_NO_SLOT at the ends and when not on the list */
};

struct fuse_list {
	uint32_t head, tail; /* most and least recently used, FUSE_NO_SLOT when empty */
};

struct fuse_inode {
	int fd;     /* O_PATH; -1 when closed to stay within the budget (reopens) or stale */
	bool used;
	bool stale; /* its inode is gone (a restore did not find it): answers ESTALE */
	uint32_t parent;   /* the slot it reopens beneath (FUSE_NO_SLOT for the root) */
	char *name;        /* its name there (a restored node: its path beneath the root) */
	uint32_t children; /* nodes whose parent it is: it is kept while any exists */
	/* FUSE_LIST_NODE_FD while fd >= 0, FUSE_LIST_IO_FD while an io_fd is open */
	struct fuse_list_link link[FUSE_LISTS];
	uint64_t nlookup;
	uint64_t generation;
	dev_t dev;
	ino_t ino;
	mode_t type; /* S_IFMT bits */
	uint32_t hash_next;
	int io_fd[FUSE_IO_ACCESSES]; /* regular files: O_RDONLY and O_WRONLY fds, or -1 */
	/* the modification time the guest is shown (node_shown_mtime); not in snapshots */
	struct timespec host_mtime;  /* the host's, at the last answer */
	struct timespec shown_mtime; /* what that answer showed */
	bool written;                /* the guest changed the data since */
};

/* No host modification time seen yet (tv_nsec is never negative in a real one). */
#define FUSE_MTIME_UNSEEN ((struct timespec){ .tv_sec = 0, .tv_nsec = -1 })
#define FUSE_LIST_LINK_NONE ((struct fuse_list_link){ .prev = FUSE_NO_SLOT, .next = FUSE_NO_SLOT })
#define FUSE_INODE_EMPTY                                                                     \
	((struct fuse_inode){ .fd = -1,                                                        \
			      .parent = FUSE_NO_SLOT,                                          \
			      .link = { [FUSE_LIST_NODE_FD] = { .prev = FUSE_NO_SLOT,          \
								.next = FUSE_NO_SLOT },        \
					[FUSE_LIST_IO_FD] = { .prev = FUSE_NO_SLOT,            \
							      .next = FUSE_NO_SLOT } },        \
			      .hash_next = FUSE_NO_SLOT,                                       \
			      .io_fd = { -1, -1 },                                             \
			      .host_mtime = FUSE_MTIME_UNSEEN })

enum fuse_handle_kind { FUSE_HANDLE_FREE, FUSE_HANDLE_FILE, FUSE_HANDLE_DIR };

/*
 * A directory handle's read position. Offsets of some file systems (tmpfs) are ordinals, so
 * seeking to one after entries before it were removed skips live entries: the stream keeps
 * the host fd where the guest left it, with the entries read from the host but not yet sent,
 * and seeks only when the guest asks for another offset than the one it was last given.
 */
struct fuse_dir_stream {
	uint8_t buf[FUSE_DIRENTS_BUFFER];
	size_t len;      /* bytes getdents64 filled */
	size_t pos;      /* the next entry not sent yet */
	uint64_t offset; /* the offset the guest continues from when it picks up here */
};

struct fuse_handle {
	enum fuse_handle_kind kind;
	int fd;
	uint64_t nodeid;
	int flags;
	struct fuse_dir_stream *dir; /* directories, once read */
};

struct fuse_server {
	int root_fd;
	enum fuse_server_access access;
	uid_t host_uid;
	gid_t host_gid;
	bool initialized;
	uint32_t proto_minor;
	uint64_t next_generation;
	struct fuse_inode *inodes;
	uint32_t inode_capacity;
	uint32_t inode_count;
	uint32_t hash[FUSE_INODE_HASH_BUCKETS];
	struct fuse_handle handles[FUSE_SERVER_MAX_HANDLES];
	uint32_t handle_count;
	uint32_t io_fd_count;     /* cached I/O fds open, at most io_fd_cap() */
	uint32_t free_hint;       /* no slot below it is free */
	size_t name_bytes;        /* held by node names, at most FUSE_NAME_BYTES_MAX */
	uint64_t fd_limit;        /* the process's open-file limit when the share was created */
	uint32_t node_fd_budget;  /* set by fuse_server_set_node_fd_budget; 0: node_fd_cap() */
	uint32_t node_fd_count;   /* O_PATH fds held besides the root's */
	struct fuse_list lists[FUSE_LISTS];
	uint8_t request[FUSE_SERVER_MAX_ARGS]; /* the request being served, but a WRITE's data */
	uint8_t reply[FUSE_SERVER_MAX_ARGS];   /* the reply being built, but a READ's data */
	struct iovec data_segments[FUSE_SERVER_MAX_SEGMENTS]; /* a WRITE's or READ's data */
};

/* ---- the process's fds, parted among its shares ---- */

/* Shares alive in this process: every part of the open-file limit is divided among them. */
static atomic_uint fuse_servers_live;

/* The share's part of limit / part_of_limit, within [min, max]. */
static uint32_t fd_part(const struct fuse_server *s, uint32_t part_of_limit, uint32_t min,
			uint32_t max)
{
	unsigned int live = atomic_load_explicit(&fuse_servers_live, memory_order_relaxed);
	uint64_t part = s->fd_limit / part_of_limit / (live ? live : 1u);

	if (part < min)
		return min;
	return part > max ? max : (uint32_t)part;
}

static uint32_t node_fd_cap(const struct fuse_server *s)
{
	if (s->node_fd_budget)
		return s->node_fd_budget;
	return fd_part(s, FUSE_NODE_FDS_PART_OF_LIMIT, FUSE_NODE_FDS_MIN, FUSE_NODE_FDS_MAX);
}

static uint32_t handle_cap(const struct fuse_server *s)
{
	return fd_part(s, FUSE_HANDLES_PART_OF_LIMIT, FUSE_HANDLES_MIN, FUSE_SERVER_MAX_HANDLES);
}

static uint32_t io_fd_cap(const struct fuse_server *s)
{
	return fd_part(s, FUSE_IO_FDS_PART_OF_LIMIT, FUSE_IO_FDS_MIN, FUSE_IO_FDS_MAX);
}

/* ---- request cursor and reply buffer ---- */

/*
 * A request's guest buffers: data/len is the part copied into the server (all of it but a
 * WRITE's data, which stays in the guest's segments from data_at on, data_len bytes).
 */
struct fuse_req {
	const uint8_t *data;
	size_t len;
	size_t off;
	const struct iovec *segments;
	unsigned int segment_count;
	size_t data_at;
	size_t data_len;
};

/*
 * A reply: built in data (the server's, after the reply header) and copied out, or, for a
 * READ, direct_len bytes written straight into the guest's segments after the header
 * (guest_cap bytes of room there).
 */
struct fuse_reply {
	uint8_t *data;
	size_t cap;
	size_t len;
	const struct iovec *segments;
	unsigned int segment_count;
	size_t guest_cap;
	size_t direct_len;
};

/* ---- guest buffers: an ordered list of segments ---- */

static size_t segments_total(const struct iovec *seg, unsigned int count)
{
	size_t total = 0;

	for (unsigned int i = 0; i < count; i++)
		total += seg[i].iov_len < SIZE_MAX - total ? seg[i].iov_len : SIZE_MAX - total;
	return total;
}

/*
 * The bytes [offset, offset + len) of the segments as at most FUSE_SERVER_MAX_SEGMENTS iovecs
 * in out; returns how many. Fewer bytes when the segments end first (callers check the total
 * beforehand).
 */
static unsigned int segments_slice(const struct iovec *seg, unsigned int count, size_t offset,
				   size_t len, struct iovec *out)
{
	unsigned int used = 0;

	for (unsigned int i = 0; i < count && len > 0; i++) {
		size_t take;

		if (offset >= seg[i].iov_len) {
			offset -= seg[i].iov_len;
			continue;
		}
		take = seg[i].iov_len - offset < len ? seg[i].iov_len - offset : len;
		out[used++] = (struct iovec){ .iov_base = (uint8_t *)seg[i].iov_base + offset,
					      .iov_len = take };
		len -= take;
		offset = 0;
	}
	return used;
}

/* Copies len bytes from (to_segments false) or to the segments at offset; returns the count. */
static size_t segments_copy(const struct iovec *seg, unsigned int count, size_t offset,
			    uint8_t *buf, size_t len, bool to_segments)
{
	struct iovec pieces[FUSE_SERVER_MAX_SEGMENTS];
	unsigned int used = segments_slice(seg, count, offset, len, pieces);
	size_t done = 0;

	for (unsigned int i = 0; i < used; i++) {
		if (to_segments)
			memcpy(pieces[i].iov_base, buf + done, pieces[i].iov_len);
		else
			memcpy(buf + done, pieces[i].iov_base, pieces[i].iov_len);
		done += pieces[i].iov_len;
	}
	return done;
}

static bool req_copy(struct fuse_req *req, void *dst, size_t size)
{
	if (req->len - req->off < size)
		return false;
	memcpy(dst, req->data + req->off, size);
	req->off += size;
	return true;
}

/* A NUL-terminated string inside the request, at most max_len bytes before the NUL. */
static const char *req_string(struct fuse_req *req, size_t max_len)
{
	const char *start = (const char *)req->data + req->off;
	size_t room = req->len - req->off;
	const char *nul = memchr(start, '\0', room);

	if (!nul || (size_t)(nul - start) > max_len)
		return NULL;
	req->off += (size_t)(nul - start) + 1;
	return start;
}

/* One path component the guest names: never empty, ".", "..", or containing '/'. */
static int req_name(struct fuse_req *req, const char **name)
{
	const char *text = req_string(req, NAME_MAX);

	if (!text)
		return -EINVAL;
	if (text[0] == '\0' || strchr(text, '/') || strcmp(text, ".") == 0 ||
	    strcmp(text, "..") == 0)
		return -EINVAL;
	*name = text;
	return 0;
}

static int reply_put(struct fuse_reply *rep, const void *data, size_t len)
{
	if (rep->cap - rep->len < len)
		return -ERANGE;
	memcpy(rep->data + rep->len, data, len);
	rep->len += len;
	return 0;
}

/* ---- host calls that cannot leave the share ---- */

static int fuse_openat_beneath(int dirfd, const char *path, int flags, mode_t mode,
			       uint64_t resolve)
{
	struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
				.mode = (flags & O_CREAT) ? mode : 0,
				.resolve = resolve };
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

static void fuse_proc_path(char *out, int fd)
{
	snprintf(out, FUSE_PROC_FD_PATH_MAX, "/proc/self/fd/%d", fd);
}

static int stat_fd(int fd, struct stat *st)
{
	return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* ---- inode table ---- */

static uint32_t inode_hash(dev_t dev, ino_t ino)
{
	uint64_t key = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev;

	return (uint32_t)(key >> 32) % FUSE_INODE_HASH_BUCKETS;
}

static void inode_hash_remove(struct fuse_server *s, uint32_t slot)
{
	uint32_t *link = &s->hash[inode_hash(s->inodes[slot].dev, s->inodes[slot].ino)];

	while (*link != FUSE_NO_SLOT) {
		if (*link == slot) {
			*link = s->inodes[slot].hash_next;
			return;
		}
		link = &s->inodes[*link].hash_next;
	}
}

static void inode_hash_insert(struct fuse_server *s, uint32_t slot)
{
	uint32_t *head = &s->hash[inode_hash(s->inodes[slot].dev, s->inodes[slot].ino)];

	s->inodes[slot].hash_next = *head;
	*head = slot;
}

static uint32_t inode_find(const struct fuse_server *s, dev_t dev, ino_t ino)
{
	uint32_t slot = s->hash[inode_hash(dev, ino)];

	while (slot != FUSE_NO_SLOT) {
		const struct fuse_inode *node = &s->inodes[slot];

		if (!node->stale && node->dev == dev && node->ino == ino)
			return slot;
		slot = node->hash_next;
	}
	return FUSE_NO_SLOT;
}

static int inode_table_grow(struct fuse_server *s, uint32_t needed)
{
	uint32_t capacity = s->inode_capacity ? s->inode_capacity : FUSE_INODE_TABLE_INITIAL;
	struct fuse_inode *grown;

	if (needed > FUSE_SERVER_MAX_INODES)
		return -ENFILE;
	while (capacity < needed)
		capacity *= 2;
	if (capacity > FUSE_SERVER_MAX_INODES)
		capacity = FUSE_SERVER_MAX_INODES;
	if (capacity <= s->inode_capacity)
		return 0;
	grown = realloc(s->inodes, capacity * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	for (uint32_t i = s->inode_capacity; i < capacity; i++)
		grown[i] = FUSE_INODE_EMPTY;
	s->inodes = grown;
	s->inode_capacity = capacity;
	return 0;
}

/* ---- least-recently-used lists of slots holding fds ---- */

static void list_unlink(struct fuse_server *s, enum fuse_fd_list which, uint32_t slot)
{
	struct fuse_list_link *link = &s->inodes[slot].link[which];
	struct fuse_list *list = &s->lists[which];

	if (link->prev != FUSE_NO_SLOT)
		s->inodes[link->prev].link[which].next = link->next;
	else
		list->head = link->next;
	if (link->next != FUSE_NO_SLOT)
		s->inodes[link->next].link[which].prev = link->prev;
	else
		list->tail = link->prev;
	*link = FUSE_LIST_LINK_NONE;
}

static void list_push_front(struct fuse_server *s, enum fuse_fd_list which, uint32_t slot)
{
	struct fuse_list_link *link = &s->inodes[slot].link[which];
	struct fuse_list *list = &s->lists[which];

	link->prev = FUSE_NO_SLOT;
	link->next = list->head;
	if (list->head != FUSE_NO_SLOT)
		s->inodes[list->head].link[which].prev = slot;
	list->head = slot;
	if (list->tail == FUSE_NO_SLOT)
		list->tail = slot;
}

/* Moves a slot that is on the list to its front. */
static void list_touch(struct fuse_server *s, enum fuse_fd_list which, uint32_t slot)
{
	if (s->lists[which].head == slot)
		return;
	list_unlink(s, which, slot);
	list_push_front(s, which, slot);
}

/* ---- cached I/O fds ---- */

static bool node_holds_io(const struct fuse_inode *node)
{
	return node->io_fd[FUSE_IO_READ] >= 0 || node->io_fd[FUSE_IO_WRITE] >= 0;
}

static void inode_close_io(struct fuse_server *s, uint32_t slot)
{
	struct fuse_inode *node = &s->inodes[slot];

	if (!node_holds_io(node))
		return;
	list_unlink(s, FUSE_LIST_IO_FD, slot);
	for (unsigned int access = 0; access < FUSE_IO_ACCESSES; access++) {
		if (node->io_fd[access] < 0)
			continue;
		close(node->io_fd[access]);
		node->io_fd[access] = -1;
		s->io_fd_count--;
	}
}

/* After an open failed with rc: when it was for want of fds, closes every cached I/O fd and
 * says whether that freed any (the caller then tries once more). */
static bool io_cache_shed(struct fuse_server *s, int rc)
{
	if ((rc != -EMFILE && rc != -ENFILE) || s->io_fd_count == 0)
		return false;
	while (s->lists[FUSE_LIST_IO_FD].tail != FUSE_NO_SLOT)
		inode_close_io(s, s->lists[FUSE_LIST_IO_FD].tail);
	return true;
}

/* ---- the O_PATH fds held (FUSE_LIST_NODE_FD) ---- */

/* Closes the node's O_PATH fd; the node stays, and reopens from its parent and name. */
static void node_fd_drop(struct fuse_server *s, uint32_t slot)
{
	struct fuse_inode *node = &s->inodes[slot];

	if (slot == 0 || node->fd < 0)
		return;
	list_unlink(s, FUSE_LIST_NODE_FD, slot);
	close(node->fd);
	node->fd = -1;
	s->node_fd_count--;
}

/*
 * Gives the node fd and closes the least recently used others while more than the budget are
 * held. The budget is at least FUSE_NODE_FDS_MIN, far above the two or three nodes one
 * request uses, and each use moves its node to the front: an fd a request still holds is
 * never the one closed.
 */
static void node_fd_adopt(struct fuse_server *s, uint32_t slot, int fd)
{
	s->inodes[slot].fd = fd;
	if (slot == 0)
		return;
	list_push_front(s, FUSE_LIST_NODE_FD, slot);
	s->node_fd_count++;
	while (s->node_fd_count > node_fd_cap(s) && s->lists[FUSE_LIST_NODE_FD].tail != slot)
		node_fd_drop(s, s->lists[FUSE_LIST_NODE_FD].tail);
}

static void node_fd_touch(struct fuse_server *s, uint32_t slot)
{
	if (slot != 0)
		list_touch(s, FUSE_LIST_NODE_FD, slot);
}

/* Records where the node is found again: name (copied) beneath the parent slot. */
static int node_set_path(struct fuse_server *s, uint32_t slot, uint32_t parent, const char *name)
{
	struct fuse_inode *node = &s->inodes[slot];
	size_t len = strlen(name) + 1;
	char *copy;

	if (node->parent == parent && node->name && strcmp(node->name, name) == 0)
		return 0;
	if (s->name_bytes + len > FUSE_NAME_BYTES_MAX)
		return -ENFILE;
	copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, name, len);
	if (node->name) {
		s->name_bytes -= strlen(node->name) + 1;
		free(node->name);
	}
	node->name = copy;
	s->name_bytes += len;
	if (node->parent != FUSE_NO_SLOT)
		s->inodes[node->parent].children--;
	node->parent = parent;
	s->inodes[parent].children++;
	return 0;
}

/* Frees one slot; returns its parent (FUSE_NO_SLOT for none), which lost a child. */
static uint32_t inode_free_slot(struct fuse_server *s, uint32_t slot)
{
	struct fuse_inode *node = &s->inodes[slot];
	uint32_t parent = node->parent;

	inode_close_io(s, slot);
	if (!node->stale)
		inode_hash_remove(s, slot);
	if (slot == 0 && node->fd >= 0)
		close(node->fd); /* the root's, held outside the budget */
	node_fd_drop(s, slot);
	if (node->name)
		s->name_bytes -= strlen(node->name) + 1;
	free(node->name);
	*node = FUSE_INODE_EMPTY;
	s->inode_count--;
	if (slot < s->free_hint)
		s->free_hint = slot;
	if (parent == FUSE_NO_SLOT || !s->inodes[parent].used)
		return FUSE_NO_SLOT; /* dropping every node frees parents before their children */
	s->inodes[parent].children--;
	return parent;
}

/* A node no longer looked up is freed once no node is found through it. */
static bool inode_unused(const struct fuse_server *s, uint32_t slot)
{
	return slot != 0 && slot != FUSE_NO_SLOT && s->inodes[slot].used &&
	       s->inodes[slot].nlookup == 0 && s->inodes[slot].children == 0;
}

/* Frees the slot, then each ancestor kept only for it (a loop: chains may be deep). */
static void inode_release(struct fuse_server *s, uint32_t slot)
{
	if (!s->inodes[slot].used)
		return;
	slot = inode_free_slot(s, slot);
	while (inode_unused(s, slot))
		slot = inode_free_slot(s, slot);
}

static void inode_release_if_unused(struct fuse_server *s, uint32_t slot)
{
	if (inode_unused(s, slot))
		inode_release(s, slot);
}

/*
 * Takes fd (an O_PATH fd with st, or -1 for a stale node) into a free slot, whose path may be
 * set already; the lookup count starts at zero.
 */
static void inode_install(struct fuse_server *s, uint32_t slot, int fd, const struct stat *st)
{
	struct fuse_inode *node = &s->inodes[slot];

	node->used = true;
	node->stale = fd < 0;
	node->generation = ++s->next_generation;
	node->dev = st->st_dev;
	node->ino = st->st_ino;
	node->type = st->st_mode & S_IFMT;
	if (!node->stale) {
		inode_hash_insert(s, slot);
		node_fd_adopt(s, slot, fd);
	}
	s->inode_count++;
}

/* A new node for fd, found as name beneath parent; fd is the node's on success. */
static int inode_new(struct fuse_server *s, int fd, const struct stat *st, uint32_t parent,
		     const char *name, uint32_t *out)
{
	uint32_t slot = s->free_hint;
	int rc;

	if (s->inode_count >= FUSE_SERVER_MAX_INODES)
		return -ENFILE;
	while (slot < s->inode_capacity && s->inodes[slot].used)
		slot++;
	s->free_hint = slot;
	if (slot == s->inode_capacity) {
		rc = inode_table_grow(s, slot + 1);
		if (rc < 0)
			return rc;
	}
	s->inodes[slot] = FUSE_INODE_EMPTY;
	rc = node_set_path(s, slot, parent, name);
	if (rc < 0) {
		s->inodes[slot] = FUSE_INODE_EMPTY;
		return rc;
	}
	inode_install(s, slot, fd, st);
	*out = slot;
	return 0;
}

/* The slot of a node id the guest names; -ESTALE when it is unknown or its inode is gone. */
static int node_slot(const struct fuse_server *s, uint64_t nodeid, uint32_t *slot)
{
	if (nodeid == 0 || nodeid > s->inode_capacity || !s->inodes[nodeid - 1].used)
		return -ESTALE;
	if (s->inodes[nodeid - 1].stale)
		return -ESTALE;
	*slot = (uint32_t)(nodeid - 1);
	return 0;
}

/*
 * Opens the node's recorded name beneath dirfd again, never following a symlink; -ESTALE when
 * the name is gone or now names another inode.
 */
static int node_reopen_child(struct fuse_server *s, int dirfd, uint32_t slot)
{
	const struct fuse_inode *node = &s->inodes[slot];
	struct stat st;
	int fd = fuse_openat_beneath(dirfd, node->name, O_PATH, 0,
				     FUSE_RESOLVE_FLAGS | RESOLVE_NO_SYMLINKS);

	if (io_cache_shed(s, fd))
		fd = fuse_openat_beneath(dirfd, node->name, O_PATH, 0,
					 FUSE_RESOLVE_FLAGS | RESOLVE_NO_SYMLINKS);
	if (fd == -ENOENT || fd == -ENOTDIR || fd == -ELOOP || fd == -EXDEV)
		return -ESTALE;
	if (fd < 0)
		return fd;
	if (stat_fd(fd, &st) < 0 || st.st_dev != node->dev || st.st_ino != node->ino) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

/*
 * The node's O_PATH fd, reopened when it was closed to stay within the budget: from the
 * nearest ancestor that holds one, each name beneath the one before. Ancestors opened on the
 * way are closed again; only the node keeps its fd. Walks at most inode_count links, so a
 * cycle left by host renames ends in ESTALE.
 */
static int node_open_fd(struct fuse_server *s, uint32_t slot)
{
	uint32_t *chain, depth = 0, top;
	int dirfd, fd = -ESTALE;

	if (s->inodes[slot].stale)
		return -ESTALE;
	if (s->inodes[slot].fd >= 0) {
		node_fd_touch(s, slot);
		return s->inodes[slot].fd;
	}
	for (top = slot; top != FUSE_NO_SLOT && s->inodes[top].fd < 0; top = s->inodes[top].parent) {
		if (s->inodes[top].stale || ++depth > s->inode_count)
			return -ESTALE;
	}
	if (top == FUSE_NO_SLOT)
		return -ESTALE;
	chain = malloc(depth * sizeof(*chain));
	if (!chain)
		return -ENOMEM;
	depth = 0;
	for (uint32_t at = slot; at != top; at = s->inodes[at].parent)
		chain[depth++] = at;
	node_fd_touch(s, top);
	dirfd = s->inodes[top].fd;
	for (uint32_t i = depth; i-- > 0;) {
		fd = node_reopen_child(s, dirfd, chain[i]);
		if (dirfd != s->inodes[top].fd)
			close(dirfd); /* an ancestor opened on the way */
		if (fd < 0)
			break;
		dirfd = fd;
	}
	free(chain);
	if (fd >= 0)
		node_fd_adopt(s, slot, fd);
	return fd;
}

static int node_fd(struct fuse_server *s, uint64_t nodeid)
{
	uint32_t slot;
	int rc = node_slot(s, nodeid, &slot);

	return rc < 0 ? rc : node_open_fd(s, slot);
}

static int node_dir_fd(struct fuse_server *s, uint64_t nodeid)
{
	uint32_t slot;
	int rc = node_slot(s, nodeid, &slot);

	if (rc < 0)
		return rc;
	return s->inodes[slot].type == S_IFDIR ? node_open_fd(s, slot) : -ENOTDIR;
}

/* Opens the node's inode itself for I/O: only regular files and directories. */
static int node_reopen(struct fuse_server *s, uint64_t nodeid, int flags)
{
	char path[FUSE_PROC_FD_PATH_MAX];
	uint32_t slot;
	int rc = node_slot(s, nodeid, &slot), fd;

	if (rc < 0)
		return rc;
	if (s->inodes[slot].type != S_IFREG && s->inodes[slot].type != S_IFDIR)
		return -EACCES;
	fd = node_open_fd(s, slot);
	if (fd < 0)
		return fd;
	fuse_proc_path(path, fd);
	fd = open(path, (flags & ~FUSE_OPEN_FLAGS_STRIPPED) | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/*
 * Keeps fd as the slot's cached fd for access, closing the least recently used other node's
 * when the cache is full (the slot itself is off the list meanwhile, so never its own).
 */
static void node_cache_io_fd(struct fuse_server *s, uint32_t slot, enum fuse_io_access access,
			     int fd)
{
	struct fuse_inode *node = &s->inodes[slot];

	if (node_holds_io(node))
		list_unlink(s, FUSE_LIST_IO_FD, slot);
	while (s->io_fd_count >= io_fd_cap(s) && s->lists[FUSE_LIST_IO_FD].tail != FUSE_NO_SLOT)
		inode_close_io(s, s->lists[FUSE_LIST_IO_FD].tail);
	node->io_fd[access] = fd;
	s->io_fd_count++;
	list_push_front(s, FUSE_LIST_IO_FD, slot);
}

/* The regular file's cached fd for access, opened now if it is not open. */
static int node_io_fd(struct fuse_server *s, uint64_t nodeid, enum fuse_io_access access)
{
	uint32_t slot;
	int rc = node_slot(s, nodeid, &slot), fd;

	if (rc < 0)
		return rc;
	if (s->inodes[slot].type != S_IFREG)
		return -EBADF;
	if (s->inodes[slot].io_fd[access] >= 0) {
		list_touch(s, FUSE_LIST_IO_FD, slot);
		return s->inodes[slot].io_fd[access];
	}
	fd = node_reopen(s, nodeid, access == FUSE_IO_WRITE ? O_WRONLY : O_RDONLY);
	if (io_cache_shed(s, fd))
		fd = node_reopen(s, nodeid, access == FUSE_IO_WRITE ? O_WRONLY : O_RDONLY);
	if (fd < 0)
		return fd;
	node_cache_io_fd(s, slot, access, fd);
	return fd;
}

/* ---- attributes ---- */

static uint32_t guest_uid(const struct fuse_server *s, uid_t uid)
{
	return uid == s->host_uid ? FUSE_SERVER_GUEST_ID : FUSE_GUEST_NOBODY;
}

static uint32_t guest_gid(const struct fuse_server *s, gid_t gid)
{
	return gid == s->host_gid ? FUSE_SERVER_GUEST_ID : FUSE_GUEST_NOBODY;
}

static void attr_from_stat(const struct fuse_server *s, const struct stat *st, struct fuse_attr *a)
{
	*a = (struct fuse_attr){
		.ino = st->st_ino,
		.size = (uint64_t)st->st_size,
		.blocks = (uint64_t)st->st_blocks,
		.atime = (uint64_t)st->st_atim.tv_sec,
		.mtime = (uint64_t)st->st_mtim.tv_sec,
		.ctime = (uint64_t)st->st_ctim.tv_sec,
		.atimensec = (uint32_t)st->st_atim.tv_nsec,
		.mtimensec = (uint32_t)st->st_mtim.tv_nsec,
		.ctimensec = (uint32_t)st->st_ctim.tv_nsec,
		.mode = st->st_mode,
		.nlink = (uint32_t)st->st_nlink,
		.uid = guest_uid(s, st->st_uid),
		.gid = guest_gid(s, st->st_gid),
		.rdev = (uint32_t)st->st_rdev,
		.blksize = (uint32_t)st->st_blksize,
	};
}

static uint64_t cache_timeout(const struct fuse_server *s)
{
	return s->access == FUSE_SERVER_READ_ONLY ? FUSE_CACHE_TIMEOUT_RO_SEC
						  : FUSE_CACHE_TIMEOUT_SEC;
}

/*
 * The modification time the guest is shown for slot's file, in place of st's. The guest keeps
 * a file's cached pages until a refresh of its attributes shows another size or modification
 * time than it knows. Its own writes have told it the new size already, so a guest write that
 * left the host's mtime where the last answer put it (both in one tick of the host's clock)
 * would leave another reader's cached pages of the file stale for good: after such a write
 * the next answer shows the mtime one nanosecond past the last one shown. Any other change of
 * the host's mtime (a later tick, a `touch` into the past) is shown as it is.
 */
static void node_shown_mtime(struct fuse_server *s, uint32_t slot, struct stat *st)
{
	struct fuse_inode *node = &s->inodes[slot];
	bool host_same = st->st_mtim.tv_sec == node->host_mtime.tv_sec &&
			 st->st_mtim.tv_nsec == node->host_mtime.tv_nsec;

	if (!host_same) {
		node->shown_mtime = st->st_mtim;
	} else if (node->written) {
		node->shown_mtime.tv_nsec++;
		if (node->shown_mtime.tv_nsec >= FUSE_NSEC_PER_SEC) {
			node->shown_mtime.tv_sec++;
			node->shown_mtime.tv_nsec = 0;
		}
	}
	node->host_mtime = st->st_mtim;
	node->written = false;
	st->st_mtim = node->shown_mtime;
}

static void entry_fill(struct fuse_server *s, uint32_t slot, struct stat *st,
		       struct fuse_entry_out *entry)
{
	*entry = (struct fuse_entry_out){ .nodeid = slot + 1ull,
					  .generation = s->inodes[slot].generation,
					  .entry_valid = cache_timeout(s),
					  .attr_valid = cache_timeout(s) };
	node_shown_mtime(s, slot, st);
	attr_from_stat(s, st, &entry->attr);
}

/* Whether slot is ancestor itself or one of its ancestors (bounded: a cycle answers true). */
static bool node_is_ancestor(const struct fuse_server *s, uint32_t ancestor, uint32_t slot)
{
	for (uint32_t steps = 0; slot != FUSE_NO_SLOT; steps++) {
		if (slot == ancestor || steps > s->inode_count)
			return true;
		slot = s->inodes[slot].parent;
	}
	return false;
}

/*
 * The node of the inode fd (with st) found as name beneath parent: a known one takes that as
 * its path from now on (the host may have moved it), a new one is made. An inode number the
 * host reused for a file of another type is a new node: the old one is left stale, since the
 * guest must never see one node id change its type. Takes fd on success.
 */
static int node_found(struct fuse_server *s, uint32_t parent, const char *name, int fd,
		      const struct stat *st, uint32_t *out)
{
	uint32_t slot = inode_find(s, st->st_dev, st->st_ino);
	struct fuse_inode *node;

	if (slot != FUSE_NO_SLOT && s->inodes[slot].type != (st->st_mode & S_IFMT)) {
		inode_hash_remove(s, slot);
		s->inodes[slot].stale = true;
		node_fd_drop(s, slot);
		slot = FUSE_NO_SLOT;
	}
	if (slot == FUSE_NO_SLOT) {
		int rc = inode_new(s, fd, st, parent, name, out);

		if (rc < 0)
			close(fd);
		return rc;
	}
	node = &s->inodes[slot];
	if (slot != 0 && !node_is_ancestor(s, slot, parent)) {
		uint32_t old_parent = node->parent;

		if (node_set_path(s, slot, parent, name) == 0)
			inode_release_if_unused(s, old_parent);
	}
	if (node->fd < 0)
		node_fd_adopt(s, slot, fd);
	else
		close(fd);
	*out = slot;
	return 0;
}

/* Looks name up beneath the parent; counts one lookup of the node it fills entry with. */
static int lookup_child(struct fuse_server *s, uint64_t parent, const char *name,
			struct fuse_entry_out *entry)
{
	int dirfd = node_dir_fd(s, parent), fd, rc;
	uint32_t slot, parent_slot = (uint32_t)(parent - 1);
	struct stat st;

	if (dirfd < 0)
		return dirfd;
	fd = fuse_openat_beneath(dirfd, name, O_PATH, 0, FUSE_RESOLVE_FLAGS);
	if (io_cache_shed(s, fd))
		fd = fuse_openat_beneath(dirfd, name, O_PATH, 0, FUSE_RESOLVE_FLAGS);
	if (fd < 0)
		return fd;
	rc = stat_fd(fd, &st);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	rc = node_found(s, parent_slot, name, fd, &st, &slot);
	if (rc < 0)
		return rc;
	s->inodes[slot].nlookup++;
	entry_fill(s, slot, &st, entry);
	return 0;
}

static int reply_entry_of(struct fuse_server *s, uint64_t parent, const char *name,
			  struct fuse_reply *rep)
{
	struct fuse_entry_out entry;
	int rc = lookup_child(s, parent, name, &entry);

	return rc < 0 ? rc : reply_put(rep, &entry, sizeof(entry));
}

static void forget_node(struct fuse_server *s, uint64_t nodeid, uint64_t count)
{
	struct fuse_inode *node;

	if (nodeid <= FUSE_ROOT_NODE || nodeid > s->inode_capacity)
		return;
	node = &s->inodes[nodeid - 1];
	if (!node->used)
		return;
	node->nlookup = count >= node->nlookup ? 0 : node->nlookup - count;
	inode_release_if_unused(s, (uint32_t)(nodeid - 1));
}

/* ---- handles ---- */

static int handle_new(struct fuse_server *s, enum fuse_handle_kind kind, int fd, uint64_t nodeid,
		      int flags, uint64_t *fh)
{
	if (s->handle_count >= handle_cap(s))
		return -ENFILE;
	for (uint32_t i = 0; i < FUSE_SERVER_MAX_HANDLES; i++) {
		if (s->handles[i].kind != FUSE_HANDLE_FREE)
			continue;
		s->handles[i] = (struct fuse_handle){ .kind = kind, .fd = fd, .nodeid = nodeid,
						      .flags = flags };
		s->handle_count++;
		*fh = i + 1ull;
		return 0;
	}
	return -ENFILE;
}

static int handle_fd(const struct fuse_server *s, uint64_t fh, enum fuse_handle_kind kind)
{
	const struct fuse_handle *handle;

	if (fh == 0 || fh > FUSE_SERVER_MAX_HANDLES)
		return -EBADF;
	handle = &s->handles[fh - 1];
	if (handle->kind != kind)
		return -EBADF;
	return handle->fd < 0 ? -ESTALE : handle->fd;
}

static int handle_release(struct fuse_server *s, uint64_t fh, enum fuse_handle_kind kind)
{
	struct fuse_handle *handle;

	if (fh == 0 || fh > FUSE_SERVER_MAX_HANDLES || s->handles[fh - 1].kind != kind)
		return -EBADF;
	handle = &s->handles[fh - 1];
	if (handle->fd >= 0)
		close(handle->fd);
	free(handle->dir);
	*handle = (struct fuse_handle){ .kind = FUSE_HANDLE_FREE, .fd = -1 };
	s->handle_count--;
	return 0;
}

/* ---- operations ---- */

struct fuse_op_ctx {
	struct fuse_server *s;
	const struct fuse_in_header *hdr;
	struct fuse_req *req;
	struct fuse_reply *rep;
};

static bool read_only(const struct fuse_op_ctx *ctx)
{
	return ctx->s->access == FUSE_SERVER_READ_ONLY;
}

static int op_init(struct fuse_op_ctx *ctx)
{
	struct fuse_init_in in = { 0 };
	struct fuse_init_out out = { 0 };
	const size_t base_len = offsetof(struct fuse_init_in, flags2);

	if (!req_copy(ctx->req, &in, base_len))
		return -EINVAL;
	if (in.major != FUSE_PROTO_MAJOR || in.minor < FUSE_PROTO_MINOR_MIN)
		return -EPROTO;
	ctx->s->proto_minor = in.minor < FUSE_KERNEL_MINOR_VERSION ? in.minor
								    : FUSE_KERNEL_MINOR_VERSION;
	out.major = FUSE_PROTO_MAJOR;
	out.minor = ctx->s->proto_minor;
	out.max_readahead = in.max_readahead;
	out.flags = in.flags & FUSE_INIT_FLAGS_OFFERED;
	out.max_background = 64;
	out.congestion_threshold = 48;
	out.max_write = FUSE_SERVER_MAX_WRITE;
	out.time_gran = 1;
	out.max_pages = FUSE_SERVER_MAX_WRITE / FUSE_PAGE_SIZE;
	ctx->s->initialized = true;
	return reply_put(ctx->rep, &out, sizeof(out));
}

static void server_drop_all(struct fuse_server *s);

static int op_destroy(struct fuse_op_ctx *ctx)
{
	server_drop_all(ctx->s);
	ctx->s->initialized = false;
	return 0;
}

/*
 * A name that does not exist is answered as node 0 with a timeout, which the guest caches as
 * a negative entry: a build's or a shell's repeated probes of missing files (PATH, includes)
 * then stay in the guest.
 */
static int op_lookup(struct fuse_op_ctx *ctx)
{
	struct fuse_entry_out missing = { .entry_valid = cache_timeout(ctx->s) };
	const char *name;
	int rc = req_name(ctx->req, &name);

	if (rc == 0)
		rc = reply_entry_of(ctx->s, ctx->hdr->nodeid, name, ctx->rep);
	return rc == -ENOENT ? reply_put(ctx->rep, &missing, sizeof(missing)) : rc;
}

static int op_forget(struct fuse_op_ctx *ctx)
{
	struct fuse_forget_in in;

	if (req_copy(ctx->req, &in, sizeof(in)))
		forget_node(ctx->s, ctx->hdr->nodeid, in.nlookup);
	return 0;
}

static int op_batch_forget(struct fuse_op_ctx *ctx)
{
	struct fuse_batch_forget_in in;
	struct fuse_forget_one one;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return 0;
	for (uint32_t i = 0; i < in.count && req_copy(ctx->req, &one, sizeof(one)); i++)
		forget_node(ctx->s, one.nodeid, one.nlookup);
	return 0;
}

/* The attributes of the node in slot, whose fd is fd. */
static int reply_attr_of_node(struct fuse_op_ctx *ctx, uint32_t slot, int fd)
{
	struct fuse_attr_out out = { .attr_valid = cache_timeout(ctx->s) };
	struct stat st;
	int rc = stat_fd(fd, &st);

	if (rc < 0)
		return rc;
	node_shown_mtime(ctx->s, slot, &st);
	attr_from_stat(ctx->s, &st, &out.attr);
	return reply_put(ctx->rep, &out, sizeof(out));
}

static int op_getattr(struct fuse_op_ctx *ctx)
{
	struct fuse_getattr_in in;
	uint32_t slot;
	int rc;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	rc = node_slot(ctx->s, ctx->hdr->nodeid, &slot);
	if (rc == 0)
		rc = node_open_fd(ctx->s, slot);
	return rc < 0 ? rc : reply_attr_of_node(ctx, slot, rc);
}

static int setattr_owner(struct fuse_op_ctx *ctx, const struct fuse_setattr_in *in)
{
	if ((in->valid & FATTR_UID) && in->uid != FUSE_SERVER_GUEST_ID)
		return -EPERM;
	if ((in->valid & FATTR_GID) && in->gid != FUSE_SERVER_GUEST_ID)
		return -EPERM;
	(void)ctx;
	return 0; /* the host user owns what it can change: nothing to do */
}

static int setattr_size(struct fuse_op_ctx *ctx, const struct fuse_setattr_in *in)
{
	int fd;

	if (in->size > (uint64_t)INT64_MAX)
		return -EFBIG;
	if ((in->valid & FATTR_FH) && in->fh != 0)
		fd = handle_fd(ctx->s, in->fh, FUSE_HANDLE_FILE);
	else
		fd = node_io_fd(ctx->s, ctx->hdr->nodeid, FUSE_IO_WRITE);
	if (fd < 0)
		return fd;
	return ftruncate(fd, (off_t)in->size) < 0 ? -errno : 0;
}

static int setattr_times(struct fuse_op_ctx *ctx, const struct fuse_setattr_in *in, int node)
{
	struct timespec times[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };
	char path[FUSE_PROC_FD_PATH_MAX];

	if (in->atimensec >= FUSE_NSEC_PER_SEC || in->mtimensec >= FUSE_NSEC_PER_SEC)
		return -EINVAL;

	if (in->valid & FATTR_ATIME_NOW)
		times[0].tv_nsec = UTIME_NOW;
	else if (in->valid & FATTR_ATIME)
		times[0] = (struct timespec){ .tv_sec = (time_t)in->atime,
					      .tv_nsec = in->atimensec };
	if (in->valid & FATTR_MTIME_NOW)
		times[1].tv_nsec = UTIME_NOW;
	else if (in->valid & FATTR_MTIME)
		times[1] = (struct timespec){ .tv_sec = (time_t)in->mtime,
					      .tv_nsec = in->mtimensec };
	fuse_proc_path(path, node);
	return utimensat(AT_FDCWD, path, times, 0) < 0 ? -errno : 0;
}

/*
 * The permission bits a guest may give a host inode: never set-user-ID, and set-group-ID only on
 * a directory (where it means "new entries take this group"). The share's files belong to the
 * host user that runs the VM, root as often as not: a guest that could mark one would leave an
 * executable in the user's directory that runs as that user for whoever on the host starts it.
 * The bits are dropped, not refused, as a nosuid mount drops them, so `cp -a` or `tar x` of a
 * tree that has such files still works.
 */
static mode_t guest_mode(uint32_t mode, bool directory)
{
	mode_t kept = (mode_t)mode & ALLPERMS & ~(mode_t)S_ISUID;

	return directory ? kept : kept & ~(mode_t)S_ISGID;
}

/*
 * FUSE_HANDLE_KILLPRIV_V2: the server, not the guest kernel, drops set-user-ID, and
 * set-group-ID where the group may execute, when a guest process without CAP_FSETID writes,
 * truncates or chowns a regular file (the kernel marks those requests), as the host's VFS
 * would; the kernel then skips its GETXATTR of security.capability before every write, a
 * round trip each. File capabilities need nothing more: only user.* xattrs are the guest's.
 * fd is any fd of the inode, O_PATH included.
 */
static int kill_suidgid(int fd)
{
	char path[FUSE_PROC_FD_PATH_MAX];
	struct stat st;
	mode_t kill;
	int rc = stat_fd(fd, &st);

	if (rc < 0)
		return rc;
	kill = S_ISUID | ((st.st_mode & S_IXGRP) ? S_ISGID : 0);
	if (!S_ISREG(st.st_mode) || !(st.st_mode & kill))
		return 0;
	fuse_proc_path(path, fd);
	return chmod(path, st.st_mode & ALLPERMS & ~kill) < 0 ? -errno : 0;
}

static int op_setattr(struct fuse_op_ctx *ctx)
{
	struct fuse_setattr_in in;
	char path[FUSE_PROC_FD_PATH_MAX];
	uint32_t slot;
	int rc, node;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	rc = node_slot(ctx->s, ctx->hdr->nodeid, &slot);
	if (rc < 0)
		return rc;
	if (read_only(ctx))
		return -EROFS;
	if (ctx->s->inodes[slot].type == S_IFLNK)
		return -EPERM; /* a symlink's own mode, owner and times are not the guest's to set */
	node = node_open_fd(ctx->s, slot);
	if (node < 0)
		return node;
	rc = setattr_owner(ctx, &in);
	if (rc == 0 && (in.valid & FATTR_MODE)) {
		fuse_proc_path(path, node);
		if (chmod(path, guest_mode(in.mode, ctx->s->inodes[slot].type == S_IFDIR)) < 0)
			rc = -errno;
	}
	if (rc == 0 && (in.valid & FATTR_SIZE)) {
		rc = setattr_size(ctx, &in);
		if (rc == 0)
			ctx->s->inodes[slot].written = true;
	}
	if (rc == 0 && (in.valid & (FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW)))
		rc = setattr_times(ctx, &in, node);
	if (rc == 0 && (in.valid & FATTR_MTIME)) /* a time the guest chose is shown as it is */
		ctx->s->inodes[slot].host_mtime = FUSE_MTIME_UNSEEN;
	if (rc == 0 && (in.valid & FATTR_KILL_SUIDGID) && !(in.valid & FATTR_MODE))
		rc = kill_suidgid(node);
	return rc < 0 ? rc : reply_attr_of_node(ctx, slot, node);
}

static int op_readlink(struct fuse_op_ctx *ctx)
{
	char target[PATH_MAX];
	int fd = node_fd(ctx->s, ctx->hdr->nodeid);
	ssize_t len;

	if (fd < 0)
		return fd;
	len = readlinkat(fd, "", target, sizeof(target));
	if (len < 0)
		return -errno;
	return reply_put(ctx->rep, target, (size_t)len);
}

/* The parent directory of a change, refused on a read-only share. */
static int change_dir_fd(struct fuse_op_ctx *ctx, uint64_t nodeid)
{
	int fd = node_dir_fd(ctx->s, nodeid);

	if (fd >= 0 && read_only(ctx))
		return -EROFS;
	return fd;
}

/*
 * The start of every op that changes an entry of the request's directory: its fixed-size
 * argument (none when in is NULL), the entry's name, and the directory's fd (EROFS on a
 * read-only share). The fd, or -errno.
 */
static int change_args(struct fuse_op_ctx *ctx, void *in, size_t in_size, const char **name)
{
	int rc;

	if (in && !req_copy(ctx->req, in, in_size))
		return -EINVAL;
	rc = req_name(ctx->req, name);
	if (rc < 0)
		return rc;
	return change_dir_fd(ctx, ctx->hdr->nodeid);
}

static int op_symlink(struct fuse_op_ctx *ctx)
{
	const char *name, *target;
	int dirfd = change_args(ctx, NULL, 0, &name);

	if (dirfd < 0)
		return dirfd;
	target = req_string(ctx->req, PATH_MAX - 1);
	if (!target || target[0] == '\0')
		return -EINVAL;
	if (symlinkat(target, dirfd, name) < 0)
		return -errno;
	return reply_entry_of(ctx->s, ctx->hdr->nodeid, name, ctx->rep);
}

static int op_mknod(struct fuse_op_ctx *ctx)
{
	struct fuse_mknod_in in;
	const char *name;
	int dirfd = change_args(ctx, &in, sizeof(in), &name), fd;

	if (dirfd < 0)
		return dirfd;
	if ((in.mode & S_IFMT) != S_IFREG)
		return -EPERM; /* devices, fifos and sockets stay out of the user's directory */
	fd = fuse_openat_beneath(dirfd, name, O_CREAT | O_EXCL | O_WRONLY, guest_mode(in.mode, false),
				 FUSE_RESOLVE_FLAGS);
	if (fd < 0)
		return fd;
	close(fd);
	return reply_entry_of(ctx->s, ctx->hdr->nodeid, name, ctx->rep);
}

static int op_mkdir(struct fuse_op_ctx *ctx)
{
	struct fuse_mkdir_in in;
	const char *name;
	int dirfd = change_args(ctx, &in, sizeof(in), &name);

	if (dirfd < 0)
		return dirfd;
	if (mkdirat(dirfd, name, guest_mode(in.mode, true)) < 0)
		return -errno;
	return reply_entry_of(ctx->s, ctx->hdr->nodeid, name, ctx->rep);
}

static int remove_entry(struct fuse_op_ctx *ctx, int flags)
{
	const char *name;
	int dirfd = change_args(ctx, NULL, 0, &name);

	if (dirfd < 0)
		return dirfd;
	return unlinkat(dirfd, name, flags) < 0 ? -errno : 0;
}

/*
 * After the guest renamed an inode to name beneath dir_slot (open as dirfd): its node, if it
 * has one, reopens from there from now on. Returns the parent it had, which the caller frees
 * if nothing keeps it once it no longer uses dirfd (FUSE_NO_SLOT when nothing moved).
 */
static uint32_t node_moved(struct fuse_server *s, int dirfd, uint32_t dir_slot, const char *name)
{
	struct stat st;
	uint32_t slot, old_parent;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return FUSE_NO_SLOT;
	slot = inode_find(s, st.st_dev, st.st_ino);
	if (slot == FUSE_NO_SLOT || slot == 0 || node_is_ancestor(s, slot, dir_slot))
		return FUSE_NO_SLOT;
	old_parent = s->inodes[slot].parent;
	return node_set_path(s, slot, dir_slot, name) == 0 ? old_parent : FUSE_NO_SLOT;
}

static int rename_names(struct fuse_op_ctx *ctx, uint64_t newdir, unsigned int flags)
{
	const char *old_name, *new_name;
	uint32_t left[2] = { FUSE_NO_SLOT, FUSE_NO_SLOT }; /* parents the moved nodes had */
	int old_dir, new_dir, rc;

	if (flags & ~(unsigned int)FUSE_RENAME_FLAGS_KNOWN)
		return -EINVAL;
	rc = req_name(ctx->req, &old_name);
	if (rc == 0)
		rc = req_name(ctx->req, &new_name);
	if (rc < 0)
		return rc;
	old_dir = change_dir_fd(ctx, ctx->hdr->nodeid);
	if (old_dir < 0)
		return old_dir;
	new_dir = change_dir_fd(ctx, newdir);
	if (new_dir < 0)
		return new_dir;
	if (renameat2(old_dir, old_name, new_dir, new_name, flags) < 0)
		return -errno;
	left[0] = node_moved(ctx->s, new_dir, (uint32_t)(newdir - 1), new_name);
	if (flags & RENAME_EXCHANGE)
		left[1] = node_moved(ctx->s, old_dir, (uint32_t)(ctx->hdr->nodeid - 1), old_name);
	inode_release_if_unused(ctx->s, left[0]);
	inode_release_if_unused(ctx->s, left[1]);
	return 0;
}

static int op_rename(struct fuse_op_ctx *ctx)
{
	struct fuse_rename_in in;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	return rename_names(ctx, in.newdir, 0);
}

static int op_rename2(struct fuse_op_ctx *ctx)
{
	struct fuse_rename2_in in;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	return rename_names(ctx, in.newdir, in.flags);
}

static int op_link(struct fuse_op_ctx *ctx)
{
	struct fuse_link_in in;
	char path[FUSE_PROC_FD_PATH_MAX];
	const char *name;
	uint32_t slot;
	int dirfd = change_args(ctx, &in, sizeof(in), &name), rc;

	if (dirfd < 0)
		return dirfd;
	rc = node_slot(ctx->s, in.oldnodeid, &slot);
	if (rc < 0)
		return rc;
	/* /proc/self/fd of a symlink could resolve to its target: only files are linked */
	if (ctx->s->inodes[slot].type != S_IFREG)
		return -EPERM;
	rc = node_open_fd(ctx->s, slot);
	if (rc < 0)
		return rc;
	fuse_proc_path(path, rc);
	if (linkat(AT_FDCWD, path, dirfd, name, AT_SYMLINK_FOLLOW) < 0)
		return -errno;
	return reply_entry_of(ctx->s, ctx->hdr->nodeid, name, ctx->rep);
}

static int reply_open(struct fuse_op_ctx *ctx, enum fuse_handle_kind kind, int fd, int flags)
{
	struct fuse_open_out out = { .open_flags = read_only(ctx) ? FOPEN_KEEP_CACHE : 0 };
	int rc = handle_new(ctx->s, kind, fd, ctx->hdr->nodeid, flags, &out.fh);

	if (rc < 0) {
		close(fd);
		return rc;
	}
	return reply_put(ctx->rep, &out, sizeof(out));
}

static bool open_flags_write(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

/*
 * ENOSYS, the no-open answer: the guest kernel then opens regular files without asking and
 * sends no RELEASE at their close (see the header comment); their I/O carries handle 0.
 */
static int op_open(struct fuse_op_ctx *ctx)
{
	struct fuse_open_in in;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	return -ENOSYS;
}

/*
 * A new file opened write-only is written past the guest's page cache (FOPEN_DIRECT_IO): the
 * guest kernel then hands the writer's own pages to the WRITE instead of allocating cache pages
 * and copying into them first (dd, cp, tar x, a shell's `>`, a compiler's output). It is still
 * one synchronous WRITE per write(2), as a cached write is without a writeback cache; a
 * write-only fd cannot be mmapped; a new file has no cached pages of its own. A reader that
 * caches the file's pages while it is written (`tail -f` of a log) is told to drop them by
 * the modification time its next refresh shows, which a write always moves
 * (node_shown_mtime): Linux does not drop them on a direct write. Opens that can read (and
 * so mmap) keep the page cache.
 */
static uint32_t create_open_flags(uint32_t guest_flags)
{
	return (guest_flags & O_ACCMODE) == O_WRONLY ? FOPEN_DIRECT_IO : 0;
}

/*
 * CREATE's open of name. Without O_EXCL it opens an entry that exists, and the share opens only
 * regular files for I/O: a FIFO would hold the share's worker until a peer came (forever, with
 * every other request of the guest waiting behind it) and a device would run its driver's
 * open. The guest cannot make either (MKNOD refuses them) but the host directory may hold them.
 * So an existing entry of another kind is refused before the open, the open itself cannot
 * block (O_NONBLOCK, cleared once the fd is known to be a regular file; it also answers a
 * conflicting lease at once instead of waiting out its break) and its result is checked again,
 * for an entry swapped in between. A directory or symlink gets the open's own error (EISDIR,
 * ELOOP). The fd, or -errno.
 */
static int create_open(struct fuse_server *s, int dirfd, const char *name, int flags, mode_t mode)
{
	struct stat st;
	int fd, status, rc;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
		return -EPERM;
	fd = fuse_openat_beneath(dirfd, name, flags | O_NONBLOCK, mode, FUSE_RESOLVE_FLAGS);
	if (io_cache_shed(s, fd))
		fd = fuse_openat_beneath(dirfd, name, flags | O_NONBLOCK, mode, FUSE_RESOLVE_FLAGS);
	if (fd < 0)
		return fd;
	rc = stat_fd(fd, &st);
	if (rc == 0 && !S_ISREG(st.st_mode))
		rc = -EPERM;
	status = rc == 0 ? fcntl(fd, F_GETFL) : 0;
	if (rc == 0 && (status < 0 || fcntl(fd, F_SETFL, status & ~O_NONBLOCK) < 0))
		rc = -errno;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Handle 0: the new file's fd becomes its node's cached fd for the access it was opened for. */
static int op_create(struct fuse_op_ctx *ctx)
{
	struct fuse_create_in in;
	struct {
		struct fuse_entry_out entry;
		struct fuse_open_out open;
	} out = { 0 };
	const char *name;
	enum fuse_io_access access;
	int dirfd = change_args(ctx, &in, sizeof(in), &name), fd, flags, rc;
	uint32_t slot;

	if (dirfd < 0)
		return dirfd;
	flags = ((int)in.flags & FUSE_CREATE_FLAGS_KEPT) | O_CREAT;
	access = (flags & O_ACCMODE) == O_RDONLY ? FUSE_IO_READ : FUSE_IO_WRITE;
	fd = create_open(ctx->s, dirfd, name, flags, guest_mode(in.mode, false));
	if (fd < 0)
		return fd;
	rc = (flags & O_TRUNC) && (in.open_flags & FUSE_OPEN_KILL_SUIDGID) ? kill_suidgid(fd) : 0;
	if (rc == 0)
		rc = lookup_child(ctx->s, ctx->hdr->nodeid, name, &out.entry);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	slot = (uint32_t)(out.entry.nodeid - 1);
	if (ctx->s->inodes[slot].type == S_IFREG && ctx->s->inodes[slot].io_fd[access] < 0)
		node_cache_io_fd(ctx->s, slot, access, fd);
	else
		close(fd);
	out.open.open_flags = create_open_flags(in.flags);
	return reply_put(ctx->rep, &out, sizeof(out));
}

/*
 * The start of every op on an open handle: its argument, whose first field is the handle
 * (fh) in every such fuse_*_in, and the handle's fd if it is of kind. The fd, or -errno.
 */
static int handle_args(struct fuse_op_ctx *ctx, void *in, size_t in_size,
		       enum fuse_handle_kind kind)
{
	uint64_t fh;

	if (in_size < sizeof(fh) || !req_copy(ctx->req, in, in_size))
		return -EINVAL;
	memcpy(&fh, in, sizeof(fh));
	return handle_fd(ctx->s, fh, kind);
}

/*
 * The same for a regular file's op: handle 0, which every file opened without an OPEN carries,
 * names the node's own cached fd for access.
 */
static int file_args(struct fuse_op_ctx *ctx, void *in, size_t in_size,
		     enum fuse_io_access access)
{
	int fd = handle_args(ctx, in, in_size, FUSE_HANDLE_FILE);
	uint64_t fh;

	if (fd != -EBADF)
		return fd;
	memcpy(&fh, in, sizeof(fh)); /* copied: only a handle that names nothing is EBADF */
	return fh == 0 ? node_io_fd(ctx->s, ctx->hdr->nodeid, access) : fd;
}

/* The guest changed the request's file: its next answer shows a new mtime (node_shown_mtime). */
static void node_mark_written(struct fuse_op_ctx *ctx)
{
	uint32_t slot;

	if (node_slot(ctx->s, ctx->hdr->nodeid, &slot) == 0)
		ctx->s->inodes[slot].written = true;
}

_Static_assert(offsetof(struct fuse_read_in, fh) == 0, "handle_args reads fh first");
_Static_assert(offsetof(struct fuse_write_in, fh) == 0, "handle_args reads fh first");
_Static_assert(offsetof(struct fuse_fsync_in, fh) == 0, "handle_args reads fh first");
_Static_assert(offsetof(struct fuse_fallocate_in, fh) == 0, "handle_args reads fh first");
_Static_assert(offsetof(struct fuse_lseek_in, fh) == 0, "handle_args reads fh first");

/* The data goes from the host file straight into the guest's reply segments. */
static int op_read(struct fuse_op_ctx *ctx)
{
	struct fuse_read_in in;
	struct fuse_reply *rep = ctx->rep;
	struct iovec *data = ctx->s->data_segments;
	unsigned int count;
	size_t size;
	ssize_t got;
	int fd = file_args(ctx, &in, sizeof(in), FUSE_IO_READ);

	if (fd < 0)
		return fd;
	if (in.offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	size = in.size < FUSE_SERVER_MAX_WRITE ? in.size : FUSE_SERVER_MAX_WRITE;
	if (size > rep->guest_cap)
		size = rep->guest_cap;
	count = segments_slice(rep->segments, rep->segment_count, sizeof(struct fuse_out_header),
			       size, data);
	got = count ? preadv(fd, data, (int)count, (off_t)in.offset) : 0;
	if (got < 0)
		return -errno;
	rep->direct_len = (size_t)got;
	return 0;
}

/*
 * The data goes from the guest's request segments straight to the host file. Its size must be
 * exactly what the request carries after write_in: a header that claims more or less than the
 * guest's buffers hold is refused, not served in part.
 */
static int op_write(struct fuse_op_ctx *ctx)
{
	struct fuse_write_in in;
	struct fuse_write_out out = { 0 };
	struct iovec *data = ctx->s->data_segments;
	unsigned int count;
	ssize_t done;
	int fd;

	if (read_only(ctx)) /* before file_args, which would open the file for writing */
		return -EROFS;
	fd = file_args(ctx, &in, sizeof(in), FUSE_IO_WRITE);
	if (fd < 0)
		return fd;
	if (in.size > FUSE_SERVER_MAX_WRITE || in.size != ctx->req->data_len ||
	    in.offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (in.write_flags & FUSE_WRITE_KILL_SUIDGID) {
		int rc = kill_suidgid(fd);

		if (rc < 0)
			return rc;
	}
	count = segments_slice(ctx->req->segments, ctx->req->segment_count, ctx->req->data_at,
			       in.size, data);
	done = count ? pwritev(fd, data, (int)count, (off_t)in.offset) : 0;
	if (done < 0)
		return -errno;
	if (done > 0)
		node_mark_written(ctx);
	out.size = (uint32_t)done;
	return reply_put(ctx->rep, &out, sizeof(out));
}

static int op_statfs(struct fuse_op_ctx *ctx)
{
	struct fuse_statfs_out out = { 0 };
	struct statfs st;

	if (fstatfs(ctx->s->root_fd, &st) < 0)
		return -errno;
	out.st = (struct fuse_kstatfs){ .blocks = st.f_blocks, .bfree = st.f_bfree,
					.bavail = st.f_bavail, .files = st.f_files,
					.ffree = st.f_ffree, .bsize = (uint32_t)st.f_bsize,
					.namelen = (uint32_t)st.f_namelen,
					.frsize = (uint32_t)st.f_frsize };
	return reply_put(ctx->rep, &out, sizeof(out));
}

/* Handle 0 is a file opened without an OPEN (a CREATE before the guest saw OPEN's ENOSYS). */
static int op_release(struct fuse_op_ctx *ctx, enum fuse_handle_kind kind)
{
	struct fuse_release_in in;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	if (in.fh == 0 && kind == FUSE_HANDLE_FILE)
		return 0;
	return handle_release(ctx->s, in.fh, kind);
}

static int sync_handle(struct fuse_op_ctx *ctx, enum fuse_handle_kind kind)
{
	struct fuse_fsync_in in;
	int fd = kind == FUSE_HANDLE_FILE ? file_args(ctx, &in, sizeof(in), FUSE_IO_READ)
					   : handle_args(ctx, &in, sizeof(in), kind);

	if (fd < 0)
		return fd;
	if ((in.fsync_flags & FUSE_FSYNC_FDATASYNC) ? fdatasync(fd) : fsync(fd))
		return -errno;
	return 0;
}

/* xattrs: only the user namespace, so the guest cannot change ACLs or security labels. */
static int xattr_node_path(struct fuse_op_ctx *ctx, char *path)
{
	uint32_t slot;
	int rc = node_slot(ctx->s, ctx->hdr->nodeid, &slot);

	if (rc < 0)
		return rc;
	if (ctx->s->inodes[slot].type != S_IFREG && ctx->s->inodes[slot].type != S_IFDIR)
		return -EPERM;
	rc = node_open_fd(ctx->s, slot);
	if (rc < 0)
		return rc;
	fuse_proc_path(path, rc);
	return 0;
}

static int xattr_name(struct fuse_op_ctx *ctx, const char **name)
{
	const char *text = req_string(ctx->req, XATTR_NAME_MAX);

	if (!text || text[0] == '\0')
		return -EINVAL;
	if (strncmp(text, FUSE_XATTR_USER_PREFIX, strlen(FUSE_XATTR_USER_PREFIX)) != 0)
		return -EOPNOTSUPP;
	*name = text;
	return 0;
}

static int op_setxattr(struct fuse_op_ctx *ctx)
{
	struct fuse_setxattr_in in;
	char path[FUSE_PROC_FD_PATH_MAX];
	const char *name;
	int rc;

	if (!req_copy(ctx->req, &in, FUSE_COMPAT_SETXATTR_IN_SIZE))
		return -EINVAL;
	rc = xattr_name(ctx, &name);
	if (rc < 0)
		return rc;
	if (in.size > FUSE_XATTR_VALUE_MAX || in.size > ctx->req->len - ctx->req->off)
		return -EINVAL;
	if (read_only(ctx))
		return -EROFS;
	rc = xattr_node_path(ctx, path);
	if (rc < 0)
		return rc;
	return setxattr(path, name, ctx->req->data + ctx->req->off, in.size, (int)in.flags) < 0
		       ? -errno
		       : 0;
}

/* GETXATTR and LISTXATTR: size 0 asks for the length, else the value (ERANGE if larger). */
static int reply_xattr(struct fuse_op_ctx *ctx, uint32_t size, ssize_t got)
{
	struct fuse_getxattr_out out = { 0 };

	if (got < 0)
		return -errno;
	if (size == 0) {
		out.size = (uint32_t)got;
		ctx->rep->len = 0;
		return reply_put(ctx->rep, &out, sizeof(out));
	}
	ctx->rep->len += (size_t)got;
	return 0;
}

static size_t xattr_room(struct fuse_op_ctx *ctx, uint32_t size)
{
	size_t room = ctx->rep->cap - ctx->rep->len;

	if (size == 0) /* the length only: ask the host for as much as fits */
		return room < FUSE_XATTR_VALUE_MAX ? room : FUSE_XATTR_VALUE_MAX;
	return size < room ? size : room;
}

static int op_getxattr(struct fuse_op_ctx *ctx)
{
	struct fuse_getxattr_in in;
	char path[FUSE_PROC_FD_PATH_MAX];
	const char *name;
	size_t room;
	int rc;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	rc = xattr_name(ctx, &name);
	if (rc == -EOPNOTSUPP)
		return -ENODATA; /* other namespaces read as empty */
	if (rc == 0)
		rc = xattr_node_path(ctx, path);
	if (rc < 0)
		return rc;
	room = xattr_room(ctx, in.size);
	if (in.size != 0 && room == 0)
		return -ERANGE; /* getxattr with no room would answer the length, not the value */
	return reply_xattr(ctx, in.size, getxattr(path, name, ctx->rep->data + ctx->rep->len, room));
}

/* Keeps only user.* names in a NUL-separated list; returns the new length. */
static size_t xattr_filter_user(char *list, size_t len)
{
	size_t kept = 0, prefix = strlen(FUSE_XATTR_USER_PREFIX);

	for (size_t at = 0; at < len;) {
		size_t one = strnlen(list + at, len - at) + 1;

		if (at + one > len)
			break;
		if (strncmp(list + at, FUSE_XATTR_USER_PREFIX, prefix) == 0) {
			memmove(list + kept, list + at, one);
			kept += one;
		}
		at += one;
	}
	return kept;
}

static int op_listxattr(struct fuse_op_ctx *ctx)
{
	struct fuse_getxattr_in in;
	struct fuse_getxattr_out out = { 0 };
	char path[FUSE_PROC_FD_PATH_MAX];
	char *list;
	ssize_t got;
	size_t kept;
	int rc;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	rc = xattr_node_path(ctx, path);
	if (rc < 0)
		return rc;
	list = malloc(FUSE_XATTR_VALUE_MAX);
	if (!list)
		return -ENOMEM;
	got = listxattr(path, list, FUSE_XATTR_VALUE_MAX);
	if (got < 0) {
		rc = -errno;
		goto out;
	}
	kept = xattr_filter_user(list, (size_t)got);
	if (in.size == 0) {
		out.size = (uint32_t)kept;
		rc = reply_put(ctx->rep, &out, sizeof(out));
	} else {
		rc = kept > in.size ? -ERANGE : reply_put(ctx->rep, list, kept);
	}
out:
	free(list);
	return rc;
}

static int op_removexattr(struct fuse_op_ctx *ctx)
{
	char path[FUSE_PROC_FD_PATH_MAX];
	const char *name;
	int rc = xattr_name(ctx, &name);

	if (rc < 0)
		return rc;
	if (read_only(ctx))
		return -EROFS;
	rc = xattr_node_path(ctx, path);
	if (rc < 0)
		return rc;
	return removexattr(path, name) < 0 ? -errno : 0;
}

static int op_opendir(struct fuse_op_ctx *ctx)
{
	struct fuse_open_in in;
	int fd;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	if (node_dir_fd(ctx->s, ctx->hdr->nodeid) < 0)
		return node_dir_fd(ctx->s, ctx->hdr->nodeid);
	fd = node_reopen(ctx->s, ctx->hdr->nodeid, O_RDONLY | O_DIRECTORY);
	return fd < 0 ? fd : reply_open(ctx, FUSE_HANDLE_DIR, fd, O_RDONLY | O_DIRECTORY);
}

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static bool dirent_is_dot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Appends one entry; false when it does not fit (nothing written then). */
static bool readdir_put(struct fuse_op_ctx *ctx, size_t limit, bool plus,
			const struct linux_dirent64 *d)
{
	size_t name_len = strlen(d->d_name);
	size_t entry_len = (plus ? FUSE_NAME_OFFSET_DIRENTPLUS : FUSE_NAME_OFFSET) + name_len;
	size_t padded = FUSE_DIRENT_ALIGN(entry_len);
	uint8_t *at = ctx->rep->data + ctx->rep->len;
	struct fuse_dirent dirent = { .ino = d->d_ino, .off = (uint64_t)d->d_off,
				      .namelen = (uint32_t)name_len, .type = d->d_type };
	struct fuse_entry_out entry = { 0 };

	if (ctx->rep->len + padded > limit)
		return false;
	if (plus && !dirent_is_dot(d->d_name) &&
	    lookup_child(ctx->s, ctx->hdr->nodeid, d->d_name, &entry) < 0)
		memset(&entry, 0, sizeof(entry)); /* vanished meanwhile: node id 0, not linked */
	memset(at, 0, padded);
	if (plus) {
		memcpy(at, &entry, sizeof(entry));
		at += sizeof(entry);
	}
	memcpy(at, &dirent, FUSE_NAME_OFFSET);
	memcpy(at + FUSE_NAME_OFFSET, d->d_name, name_len);
	ctx->rep->len += padded;
	return true;
}

/* Positions the stream at offset: nothing to do when the guest continues where it left. */
static int dir_stream_seek(struct fuse_handle *handle, uint64_t offset)
{
	struct fuse_dir_stream *dir = handle->dir;

	if (!dir) {
		dir = calloc(1, sizeof(*dir));
		if (!dir)
			return -ENOMEM;
		handle->dir = dir;
		if (lseek(handle->fd, 0, SEEK_SET) < 0)
			return -errno;
	}
	if (offset == dir->offset)
		return 0;
	if (lseek(handle->fd, (off_t)offset, SEEK_SET) < 0)
		return -errno;
	dir->len = dir->pos = 0;
	dir->offset = offset;
	return 0;
}

static int readdir_common(struct fuse_op_ctx *ctx, bool plus)
{
	struct fuse_read_in in;
	struct fuse_handle *handle;
	struct fuse_dir_stream *dir;
	size_t limit;
	int fd = handle_args(ctx, &in, sizeof(in), FUSE_HANDLE_DIR), rc;

	if (fd < 0)
		return fd;
	if (in.offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	handle = &ctx->s->handles[in.fh - 1];
	rc = dir_stream_seek(handle, in.offset);
	if (rc < 0)
		return rc;
	dir = handle->dir;
	limit = in.size < ctx->rep->cap ? in.size : ctx->rep->cap;
	for (;;) {
		const struct linux_dirent64 *d;

		if (dir->pos >= dir->len) {
			long got = syscall(SYS_getdents64, fd, dir->buf, sizeof(dir->buf));

			if (got < 0)
				return -errno;
			dir->len = (size_t)got;
			dir->pos = 0;
			if (got == 0)
				return 0;
		}
		d = (const struct linux_dirent64 *)(dir->buf + dir->pos);
		if (d->d_reclen == 0 || d->d_reclen > dir->len - dir->pos)
			return -EIO; /* the host kernel's own buffer: never, but never loop on it */
		if (!readdir_put(ctx, limit, plus, d))
			return 0; /* stays pending for the next READDIR */
		dir->pos += d->d_reclen;
		dir->offset = (uint64_t)d->d_off;
	}
}

static int op_access(struct fuse_op_ctx *ctx)
{
	struct fuse_access_in in;
	char path[FUSE_PROC_FD_PATH_MAX];
	uint32_t slot;
	int rc;

	if (!req_copy(ctx->req, &in, sizeof(in)))
		return -EINVAL;
	rc = node_slot(ctx->s, ctx->hdr->nodeid, &slot);
	if (rc < 0)
		return rc;
	if ((in.mask & W_OK) && read_only(ctx))
		return -EROFS;
	if (ctx->s->inodes[slot].type == S_IFLNK)
		return 0; /* /proc/self/fd would check the target, perhaps outside the share */
	rc = node_open_fd(ctx->s, slot);
	if (rc < 0)
		return rc;
	fuse_proc_path(path, rc);
	return faccessat(AT_FDCWD, path, (int)(in.mask & (R_OK | W_OK | X_OK)), 0) < 0 ? -errno
										       : 0;
}

static int op_fallocate(struct fuse_op_ctx *ctx)
{
	struct fuse_fallocate_in in;
	int fd;

	if (read_only(ctx)) /* before file_args, which would open the file for writing */
		return -EROFS;
	fd = file_args(ctx, &in, sizeof(in), FUSE_IO_WRITE);
	if (fd < 0)
		return fd;
	if (in.offset > (uint64_t)INT64_MAX || in.length > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (fallocate(fd, (int)in.mode, (off_t)in.offset, (off_t)in.length) < 0)
		return -errno;
	node_mark_written(ctx);
	return 0;
}

static int op_lseek(struct fuse_op_ctx *ctx)
{
	struct fuse_lseek_in in;
	struct fuse_lseek_out out = { 0 };
	off_t at;
	int fd = file_args(ctx, &in, sizeof(in), FUSE_IO_READ);

	if (fd < 0)
		return fd;
	if (in.whence != SEEK_DATA && in.whence != SEEK_HOLE)
		return -EINVAL;
	if (in.offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	at = lseek(fd, (off_t)in.offset, (int)in.whence);
	if (at < 0)
		return -errno;
	out.offset = (uint64_t)at;
	return reply_put(ctx->rep, &out, sizeof(out));
}

/*
 * One case per opcode the server answers. POSIX locks (GETLK, SETLK, SETLKW) and everything
 * else answer ENOSYS: the guest kernel then keeps locks local to its VM. So does FLUSH: writes
 * reach the host file at once (no server-side cache), so a flush has nothing to do, and its
 * ENOSYS tells the kernel to stop sending one at every close() -- two round trips of the
 * four or six a small file's create costs.
 */
static int fuse_dispatch(struct fuse_op_ctx *ctx, uint32_t opcode)
{
	switch (opcode) {
	case FUSE_INIT: return op_init(ctx);
	case FUSE_DESTROY: return op_destroy(ctx);
	case FUSE_LOOKUP: return op_lookup(ctx);
	case FUSE_FORGET: return op_forget(ctx);
	case FUSE_BATCH_FORGET: return op_batch_forget(ctx);
	case FUSE_GETATTR: return op_getattr(ctx);
	case FUSE_SETATTR: return op_setattr(ctx);
	case FUSE_READLINK: return op_readlink(ctx);
	case FUSE_SYMLINK: return op_symlink(ctx);
	case FUSE_MKNOD: return op_mknod(ctx);
	case FUSE_MKDIR: return op_mkdir(ctx);
	case FUSE_UNLINK: return remove_entry(ctx, 0);
	case FUSE_RMDIR: return remove_entry(ctx, AT_REMOVEDIR);
	case FUSE_RENAME: return op_rename(ctx);
	case FUSE_RENAME2: return op_rename2(ctx);
	case FUSE_LINK: return op_link(ctx);
	case FUSE_OPEN: return op_open(ctx);
	case FUSE_CREATE: return op_create(ctx);
	case FUSE_READ: return op_read(ctx);
	case FUSE_WRITE: return op_write(ctx);
	case FUSE_STATFS: return op_statfs(ctx);
	case FUSE_RELEASE: return op_release(ctx, FUSE_HANDLE_FILE);
	case FUSE_RELEASEDIR: return op_release(ctx, FUSE_HANDLE_DIR);
	case FUSE_FSYNC: return sync_handle(ctx, FUSE_HANDLE_FILE);
	case FUSE_FSYNCDIR: return sync_handle(ctx, FUSE_HANDLE_DIR);
	case FUSE_SETXATTR: return op_setxattr(ctx);
	case FUSE_GETXATTR: return op_getxattr(ctx);
	case FUSE_LISTXATTR: return op_listxattr(ctx);
	case FUSE_REMOVEXATTR: return op_removexattr(ctx);
	case FUSE_OPENDIR: return op_opendir(ctx);
	case FUSE_READDIR: return readdir_common(ctx, false);
	case FUSE_READDIRPLUS: return readdir_common(ctx, true);
	case FUSE_ACCESS: return op_access(ctx);
	case FUSE_FALLOCATE: return op_fallocate(ctx);
	case FUSE_LSEEK: return op_lseek(ctx);
	default: return -ENOSYS;
	}
}

/*
 * How many of a request's first bytes are copied into the server: the whole request, but only
 * the headers of a WRITE, whose data stays in the guest's segments.
 */
static size_t request_copied_len(const struct fuse_in_header *hdr)
{
	const size_t write_args = sizeof(*hdr) + sizeof(struct fuse_write_in);

	if (hdr->opcode == FUSE_WRITE && hdr->len > write_args)
		return write_args;
	return hdr->len;
}

size_t fuse_server_handle_segments(struct fuse_server *server, const struct iovec *in,
				   unsigned int in_count, const struct iovec *out,
				   unsigned int out_count)
{
	struct fuse_in_header hdr;
	struct fuse_out_header reply_hdr = { 0 };
	struct fuse_req req = { .data = server->request, .segments = in };
	struct fuse_reply rep = { .data = server->reply + sizeof(reply_hdr), .segments = out };
	struct fuse_op_ctx ctx = { .s = server, .hdr = &hdr, .req = &req, .rep = &rep };
	size_t in_len, out_cap;
	int rc;

	req.segment_count = in_count < FUSE_SERVER_MAX_SEGMENTS ? in_count
								: FUSE_SERVER_MAX_SEGMENTS;
	rep.segment_count = out_count < FUSE_SERVER_MAX_SEGMENTS ? out_count
								  : FUSE_SERVER_MAX_SEGMENTS;
	in_len = segments_total(in, req.segment_count);
	out_cap = segments_total(out, rep.segment_count);
	if (out_cap < sizeof(reply_hdr) ||
	    segments_copy(in, req.segment_count, 0, (uint8_t *)&hdr, sizeof(hdr), false) <
		    sizeof(hdr))
		return 0;
	rep.guest_cap = out_cap - sizeof(reply_hdr);
	rep.cap = rep.guest_cap < sizeof(server->reply) - sizeof(reply_hdr)
			  ? rep.guest_cap
			  : sizeof(server->reply) - sizeof(reply_hdr);
	/* what the header claims, never more than arrived nor than the server copies */
	req.len = request_copied_len(&hdr);
	if (hdr.len < sizeof(hdr) || hdr.len > in_len || req.len > sizeof(server->request)) {
		rc = -EINVAL;
		goto reply;
	}
	segments_copy(in, req.segment_count, 0, server->request, req.len, false);
	req.off = sizeof(hdr);
	req.data_at = req.len;
	req.data_len = hdr.len - req.len;
	if (hdr.opcode == FUSE_FORGET || hdr.opcode == FUSE_BATCH_FORGET) {
		fuse_dispatch(&ctx, hdr.opcode);
		return 0;
	}
	if (!server->initialized && hdr.opcode != FUSE_INIT)
		rc = -EIO;
	else
		rc = fuse_dispatch(&ctx, hdr.opcode);
reply:
	reply_hdr.unique = hdr.unique;
	reply_hdr.error = rc < 0 ? rc : 0;
	if (rc < 0)
		rep.len = rep.direct_len = 0;
	reply_hdr.len = (uint32_t)(sizeof(reply_hdr) + rep.len + rep.direct_len);
	memcpy(server->reply, &reply_hdr, sizeof(reply_hdr));
	/* a READ's data is in place already: only its header is copied */
	segments_copy(out, rep.segment_count, 0, server->reply, sizeof(reply_hdr) + rep.len, true);
	return reply_hdr.len;
}

size_t fuse_server_handle(struct fuse_server *server, const uint8_t *in, size_t in_len,
			  uint8_t *out, size_t out_cap)
{
	const struct iovec request = { .iov_base = (void *)in, .iov_len = in_len };
	const struct iovec reply = { .iov_base = out, .iov_len = out_cap };

	return fuse_server_handle_segments(server, &request, 1, &reply, 1);
}

/* ---- lifetime ---- */

static void server_drop_all(struct fuse_server *s)
{
	for (uint32_t i = 0; i < FUSE_SERVER_MAX_HANDLES; i++) {
		if (s->handles[i].kind != FUSE_HANDLE_FREE)
			handle_release(s, i + 1ull, s->handles[i].kind);
	}
	for (uint32_t i = 1; i < s->inode_capacity; i++)
		inode_release(s, i);
}

/* The open-file limit the shares' parts come from (the device raised it to the hard limit). */
static uint64_t process_fd_limit(void)
{
	struct rlimit limit;

	if (getrlimit(RLIMIT_NOFILE, &limit) < 0 || limit.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return limit.rlim_cur;
}

struct fuse_server *fuse_server_create(const char *host_dir, enum fuse_server_access access,
				       char *err, size_t errlen)
{
	struct fuse_server *s = calloc(1, sizeof(*s));
	struct stat st;
	int fd;

	if (!s) {
		snprintf(err, errlen, "out of memory for the share %s", host_dir);
		return NULL;
	}
	fd = open(host_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot open the host directory %s to share it: %s", host_dir,
			 strerror(errno));
		goto fail;
	}
	for (uint32_t i = 0; i < FUSE_INODE_HASH_BUCKETS; i++)
		s->hash[i] = FUSE_NO_SLOT;
	for (uint32_t i = 0; i < FUSE_SERVER_MAX_HANDLES; i++)
		s->handles[i].fd = -1;
	s->root_fd = fd;
	s->access = access;
	for (unsigned int list = 0; list < FUSE_LISTS; list++)
		s->lists[list] = (struct fuse_list){ .head = FUSE_NO_SLOT, .tail = FUSE_NO_SLOT };
	s->fd_limit = process_fd_limit();
	s->host_uid = geteuid();
	s->host_gid = getegid();
	if (inode_table_grow(s, 1) < 0) {
		snprintf(err, errlen, "out of memory for the share %s", host_dir);
		goto fail;
	}
	s->root_fd = fd;
	inode_install(s, 0, fd, &st);
	s->inodes[0].nlookup = 1;
	atomic_fetch_add_explicit(&fuse_servers_live, 1u, memory_order_relaxed);
	return s;
fail:
	if (fd >= 0)
		close(fd);
	free(s->inodes);
	free(s);
	return NULL;
}

void fuse_server_destroy(struct fuse_server *server)
{
	if (!server)
		return;
	server_drop_all(server);
	inode_release(server, 0); /* closes root_fd */
	free(server->inodes);
	free(server);
	atomic_fetch_sub_explicit(&fuse_servers_live, 1u, memory_order_relaxed);
}

size_t fuse_server_inode_count(const struct fuse_server *server)
{
	return server->inode_count;
}

size_t fuse_server_handle_count(const struct fuse_server *server)
{
	return server->handle_count;
}

size_t fuse_server_node_fd_count(const struct fuse_server *server)
{
	return server->node_fd_count;
}

void fuse_server_set_node_fd_budget(struct fuse_server *server, uint32_t budget)
{
	server->node_fd_budget = budget < FUSE_NODE_FDS_MIN ? FUSE_NODE_FDS_MIN : budget;
	while (server->node_fd_count > node_fd_cap(server))
		node_fd_drop(server, server->lists[FUSE_LIST_NODE_FD].tail);
}

/* ---- snapshots ---- */

/* The node's path relative to the share ("" for the root); false when it left the share. */
static bool node_relative_path(const struct fuse_server *s, const char *root, int fd, char *out,
			       size_t cap)
{
	char path[FUSE_PROC_FD_PATH_MAX], target[PATH_MAX];
	size_t root_len = strlen(root);
	struct stat st;
	ssize_t len;

	(void)s;
	fuse_proc_path(path, fd);
	len = readlink(path, target, sizeof(target) - 1);
	if (len < 0 || stat_fd(fd, &st) < 0 || st.st_nlink == 0)
		return false;
	target[len] = '\0';
	if (strcmp(target, root) == 0) {
		out[0] = '\0';
		return true;
	}
	if (root_len == 1) /* the share is "/": every path is beneath it */
		root_len = 0;
	if (strncmp(target, root, root_len) != 0 || target[root_len] != '/')
		return false;
	snprintf(out, cap, "%s", target + root_len + 1);
	return true;
}

void fuse_server_save(struct fuse_server *server, struct byte_writer *out)
{
	char proc[FUSE_PROC_FD_PATH_MAX], root[PATH_MAX], rel[PATH_MAX];
	ssize_t len;

	fuse_proc_path(proc, server->root_fd);
	len = readlink(proc, root, sizeof(root) - 1);
	root[len < 0 ? 0 : len] = '\0';
	byte_writer_u32(out, FUSE_STATE_MAGIC);
	byte_writer_u8(out, server->initialized);
	byte_writer_u32(out, server->proto_minor);
	byte_writer_u64(out, server->next_generation);
	byte_writer_u32(out, server->inode_count);
	for (uint32_t i = 0; i < server->inode_capacity; i++) {
		const struct fuse_inode *node = &server->inodes[i];
		int fd = node->used ? node_open_fd(server, i) : -1;
		bool live = fd >= 0 && node_relative_path(server, root, fd, rel, sizeof(rel));

		if (!node->used)
			continue;
		byte_writer_u64(out, i + 1ull);
		byte_writer_u64(out, node->nlookup);
		byte_writer_u64(out, node->generation);
		byte_writer_u8(out, live);
		byte_writer_string(out, live ? rel : "");
	}
	byte_writer_u32(out, server->handle_count);
	for (uint32_t i = 0; i < FUSE_SERVER_MAX_HANDLES; i++) {
		const struct fuse_handle *handle = &server->handles[i];

		if (handle->kind == FUSE_HANDLE_FREE)
			continue;
		byte_writer_u64(out, i + 1ull);
		byte_writer_u8(out, (uint8_t)handle->kind);
		byte_writer_u64(out, handle->nodeid);
		byte_writer_u32(out, (uint32_t)handle->flags);
	}
}

struct fuse_saved_node {
	uint64_t nodeid;
	uint64_t nlookup;
	uint64_t generation;
	bool live;
	char path[PATH_MAX];
};

/* One saved node from in; false when malformed. */
static bool restore_read_node(struct byte_reader *in, struct fuse_saved_node *node)
{
	node->nodeid = byte_reader_u64(in);
	node->nlookup = byte_reader_u64(in);
	node->generation = byte_reader_u64(in);
	node->live = byte_reader_u8(in) != 0;
	byte_reader_string(in, node->path, sizeof(node->path));
	return !in->failed && node->nodeid >= FUSE_ROOT_NODE &&
	       node->nodeid <= FUSE_SERVER_MAX_INODES &&
	       (node->nodeid != FUSE_ROOT_NODE || (node->live && node->path[0] == '\0'));
}

/* Opens a saved path beneath the root without following any symlink; -1 when it is gone. */
static int restore_open_path(const struct fuse_server *s, const struct fuse_saved_node *node,
			     struct stat *st)
{
	int fd;

	if (!node->live)
		return -1;
	fd = fuse_openat_beneath(s->root_fd, node->path, O_PATH, 0,
				 FUSE_RESOLVE_FLAGS | RESOLVE_NO_SYMLINKS);
	if (fd >= 0 && stat_fd(fd, st) < 0) {
		close(fd);
		fd = -1;
	}
	return fd < 0 ? -1 : fd;
}

static int restore_nodes(struct fuse_server *s, struct byte_reader *in, uint32_t count)
{
	struct fuse_saved_node *node = malloc(sizeof(*node));
	struct stat st = { 0 };
	int rc = 0;

	if (!node)
		return -ENOMEM;
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		uint32_t slot;
		int fd;

		if (!restore_read_node(in, node)) {
			rc = -EBADMSG;
			break;
		}
		slot = (uint32_t)(node->nodeid - 1);
		rc = inode_table_grow(s, slot + 1);
		if (rc < 0)
			break;
		if (s->inodes[slot].used && slot != 0) {
			rc = -EBADMSG;
			break;
		}
		if (slot == 0) {
			s->inodes[0].nlookup = node->nlookup;
			s->inodes[0].generation = node->generation;
			continue;
		}
		if (node->nlookup == 0)
			continue; /* kept only for nodes beneath it, which reopen from the root now */
		s->inodes[slot] = FUSE_INODE_EMPTY;
		fd = restore_open_path(s, node, &st);
		if (fd >= 0) {
			rc = node_set_path(s, slot, 0, node->path);
			if (rc < 0) {
				close(fd);
				break;
			}
		}
		inode_install(s, slot, fd, &st);
		s->inodes[slot].nlookup = node->nlookup;
		s->inodes[slot].generation = node->generation;
		if (fd < 0)
			s->inodes[slot].type = 0;
	}
	free(node);
	return rc;
}

static int restore_handles(struct fuse_server *s, struct byte_reader *in, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		uint64_t fh = byte_reader_u64(in);
		uint8_t kind = byte_reader_u8(in);
		uint64_t nodeid = byte_reader_u64(in);
		int flags = (int)byte_reader_u32(in);
		struct fuse_handle *handle;

		if (in->failed || fh == 0 || fh > FUSE_SERVER_MAX_HANDLES ||
		    (kind != FUSE_HANDLE_FILE && kind != FUSE_HANDLE_DIR) ||
		    s->handles[fh - 1].kind != FUSE_HANDLE_FREE)
			return -EBADMSG;
		handle = &s->handles[fh - 1];
		*handle = (struct fuse_handle){ .kind = (enum fuse_handle_kind)kind,
						.nodeid = nodeid,
						.flags = flags & ~(FUSE_OPEN_FLAGS_STRIPPED | O_TRUNC),
						.fd = -1 };
		if (s->access == FUSE_SERVER_READ_ONLY && open_flags_write(handle->flags))
			handle->flags = (handle->flags & ~O_ACCMODE) | O_RDONLY;
		handle->fd = node_reopen(s, nodeid, handle->flags);
		if (handle->fd < 0)
			handle->fd = -1; /* answers ESTALE */
		s->handle_count++;
	}
	return 0;
}

int fuse_server_restore(struct fuse_server *server, struct byte_reader *in)
{
	uint32_t inode_count, handle_count;
	int rc;

	if (byte_reader_u32(in) != FUSE_STATE_MAGIC)
		return -EBADMSG;
	server_drop_all(server);
	server->initialized = byte_reader_u8(in) != 0;
	server->proto_minor = byte_reader_u32(in);
	server->next_generation = byte_reader_u64(in);
	inode_count = byte_reader_u32(in);
	if (in->failed || inode_count == 0 || inode_count > FUSE_SERVER_MAX_INODES)
		rc = -EBADMSG;
	else
		rc = restore_nodes(server, in, inode_count);
	handle_count = rc == 0 ? byte_reader_u32(in) : 0;
	if (rc == 0 && (in->failed || handle_count > FUSE_SERVER_MAX_HANDLES))
		rc = -EBADMSG;
	if (rc == 0)
		rc = restore_handles(server, in, handle_count);
	if (rc < 0) {
		server_drop_all(server);
		server->initialized = false;
	}
	return rc;
}
