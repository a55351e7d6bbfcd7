/*
 * An in-process FUSE server for one host directory: the file-system half of virtio-fs. It
 * takes one whole request (the guest buffers of a chain's readable part, as iovecs) and writes
 * one whole reply (into the writable part's), so it knows nothing of virtqueues and tests and
 * fuzzers call it directly. File data moves between those buffers and the host file with one
 * pwritev or preadv, never through a copy in the server.
 *
 * Every inode the guest knows is found through an O_PATH fd opened beneath the share's root
 * one name at a time, never following a symlink (openat2 with RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS and O_NOFOLLOW), and every later call is relative to such an fd, so
 * `..`, absolute symlinks and a symlink swapped in between two requests never reach outside
 * the share. Only a bounded set of nodes holds its fd; the others keep their parent and name
 * and reopen the same way when used, so a share serves far more nodes than the process has
 * fds. Host files belong
 * to the user running voidbox; the guest sees that user as uid/gid 1000 (the sandbox user),
 * and every other owner as nobody.
 *
 * Not thread-safe: one device worker calls it.
 */
#ifndef VOIDBOX_DEVICES_FUSE_SERVER_H
#define VOIDBOX_DEVICES_FUSE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "common/byte_buffer.h"

/*
 * The largest WRITE payload and READ reply offered: 256 pages, the most a Linux 6.1 guest
 * sends (FUSE_MAX_MAX_PAGES), which with their headers needs a 512-entry queue (one page
 * each, and the guest takes at most queue size - 4 pages).
 */
#define FUSE_SERVER_MAX_WRITE (256u * 4096u)
/* Headers and fixed arguments a request or reply carries beside its payload, at most. */
#define FUSE_SERVER_HEADER_ROOM 4096u
/* The largest request and reply buffers the server reads or writes. */
#define FUSE_SERVER_MAX_REQUEST (FUSE_SERVER_MAX_WRITE + FUSE_SERVER_HEADER_ROOM)
#define FUSE_SERVER_MAX_REPLY (FUSE_SERVER_MAX_WRITE + FUSE_SERVER_HEADER_ROOM)
/*
 * The largest part of a request the server copies (all of it but a WRITE's data: a SETXATTR's
 * value of up to 64 KiB is the longest) and of a reply it builds (all of it but a READ's data).
 */
#define FUSE_SERVER_MAX_ARGS (65536u + FUSE_SERVER_HEADER_ROOM)
/* Guest buffers (segments) one request or reply may span; more are ignored. IOV_MAX. */
#define FUSE_SERVER_MAX_SEGMENTS 1024u
/*
 * Inodes the guest may hold (ENFILE past that; a slot and a name each, not an fd) and files it
 * may keep open (a host fd each), per share.
 */
#define FUSE_SERVER_MAX_INODES (1u << 20)
#define FUSE_SERVER_MAX_HANDLES 1024u
/* The uid and gid the guest sees for the host user (the guest agent's sandbox user). */
#define FUSE_SERVER_GUEST_ID 1000u

enum fuse_server_access {
	FUSE_SERVER_READ_WRITE,
	FUSE_SERVER_READ_ONLY, /* every change answers EROFS, whatever the guest's mount says */
};

struct fuse_server;

/*
 * Opens host_dir (which must be a directory) as the share's root. NULL with a sentence in err.
 * The server answers as the calling process's effective uid/gid.
 */
struct fuse_server *fuse_server_create(const char *host_dir, enum fuse_server_access access,
				       char *err, size_t errlen);
void fuse_server_destroy(struct fuse_server *server);

/*
 * Serves one request that spans in_count readable segments (a virtqueue chain's guest
 * buffers, in order) and writes its reply across out_count writable ones; returns the reply's
 * length, or 0 when the request gets no reply (FORGET, BATCH_FORGET, a request too short to
 * carry a header, no room for a reply header). A WRITE's data goes to the host file straight
 * from its segments (pwritev) and a READ's straight into the reply's (preadv); every other
 * part of a request is copied into the server before it is parsed, and every other reply is
 * built in the server and copied out. A malformed request gets an error reply; nothing the
 * guest sends makes it fail otherwise.
 */
size_t fuse_server_handle_segments(struct fuse_server *server, const struct iovec *in,
				   unsigned int in_count, const struct iovec *out,
				   unsigned int out_count);
/* The same for a request in one buffer and a reply into one (tests, fuzzers). */
size_t fuse_server_handle(struct fuse_server *server, const uint8_t *in, size_t in_len,
			  uint8_t *out, size_t out_cap);

/* Inodes and open handles held now (for tests and limits). */
size_t fuse_server_inode_count(const struct fuse_server *server);
/* O_PATH fds held for nodes besides the root's now, and at most (tests set a small budget in
 * place of the share's part of the process's open-file limit; it is never below a handful, so
 * one request's nodes keep theirs). */
size_t fuse_server_node_fd_count(const struct fuse_server *server);
void fuse_server_set_node_fd_budget(struct fuse_server *server, uint32_t budget);
size_t fuse_server_handle_count(const struct fuse_server *server);

/*
 * Snapshot support: the inode table (node id, lookup count, path relative to the share) and
 * the open handles (node, open flags). Restore re-opens each path beneath the share's root;
 * one that vanished answers ESTALE from then on. restore refuses malformed input (-EBADMSG)
 * and then leaves the server holding only its root, uninitialized.
 */
void fuse_server_save(struct fuse_server *server, struct byte_writer *out);
int fuse_server_restore(struct fuse_server *server, struct byte_reader *in);

#endif
