/*
 * libFuzzer target for the virtio-fs FUSE server as a hostile guest drives it: any sequence
 * of requests (opcodes, node ids, handles, lengths, names, sizes), with the server's snapshot
 * state saved and restored between them, and the fewest node fds allowed so nodes are closed
 * and reopened beneath their parents.
 *
 * Each run starts a fresh server on a share reset to the same few entries (a file, a
 * directory, a symlink to a sibling directory outside the share, a symlink to an absolute
 * path), answers INIT, then plays the input as records:
 *   u8 flags, u8 len_lo, u8 len_hi, then len request bytes.
 * FUZZ_FIX_LEN rewrites the header's len to the record's (so the fuzzer need not learn it),
 * FUZZ_SNAPSHOT saves the server and restores it into a new one before the request, and
 * FUZZ_SPLIT cuts the request and the reply room into segments of 1 to 32 bytes (the flags'
 * top bits; the last segment takes the rest), each allocated on its own, as a guest's chain
 * of buffers, so a WRITE's data and a READ's reply span several and a read or write past one
 * trips ASan; without it each is one segment. After
 * every run the directory outside the share must hold exactly what it held before: a guest
 * that created, changed or removed anything there escaped the share, and the target aborts.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "devices/fuse_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_FIX_LEN 0x01u
#define FUZZ_SNAPSHOT 0x02u
#define FUZZ_SPLIT 0x04u
#define FUZZ_SPLIT_SIZE_SHIFT 3u
#define FUZZ_SPLIT_SIZE_MASK 0x1fu
/* Segments of the fuzzer's size before the one that takes the rest. */
#define FUZZ_SEGMENTS_MAX 64u
#define FUZZ_RECORD_HEADER 3u
#define FUZZ_MAX_RECORDS 64u
#define FUZZ_SECRET_TEXT "outside the share"
#define FUZZ_CMD_MAX 4096
#define FUZZ_DIR_MAX 256
/* Node fds a server may hold: the fewest, so nodes the guest makes get closed and reopened. */
#define FUZZ_NODE_FDS 8u

static char fuzz_base[FUZZ_DIR_MAX / 2];
static char fuzz_share[FUZZ_DIR_MAX];
static char fuzz_outside[FUZZ_DIR_MAX];
static uint8_t *fuzz_request;
static uint8_t *fuzz_reply;

static void fuzz_shell(const char *cmd)
{
	if (system(cmd) != 0) {
		fprintf(stderr, "fuse_request_fuzz: '%s' failed\n", cmd);
		abort();
	}
}

static void fuzz_setup_once(void)
{
	char cmd[FUZZ_CMD_MAX];

	if (fuzz_request)
		return;
	snprintf(fuzz_base, sizeof(fuzz_base), "/tmp/voidbox-fuse-fuzz-%d", (int)getpid());
	snprintf(fuzz_share, sizeof(fuzz_share), "%.*s/share", FUZZ_DIR_MAX / 2, fuzz_base);
	snprintf(fuzz_outside, sizeof(fuzz_outside), "%.*s/outside", FUZZ_DIR_MAX / 2,
		 fuzz_base);
	snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s %s && printf '%s' > %s/secret && chmod 644 %s/secret",
		 fuzz_base, fuzz_share, fuzz_outside, FUZZ_SECRET_TEXT, fuzz_outside, fuzz_outside);
	fuzz_shell(cmd);
	fuzz_request = calloc(1, FUSE_SERVER_MAX_REQUEST);
	fuzz_reply = calloc(1, FUSE_SERVER_MAX_REPLY);
	if (!fuzz_request || !fuzz_reply)
		abort();
}

/* The share as every run starts: node ids 2.. come from the guest's lookups of these. */
static void fuzz_reset_share(void)
{
	char cmd[FUZZ_CMD_MAX];

	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s 2>/dev/null; rm -rf %s && mkdir -p %s/dir && "
		 "printf data > %s/file && ln -s ../outside %s/rel && ln -s %s %s/abs",
		 fuzz_share, fuzz_share, fuzz_share, fuzz_share, fuzz_share, fuzz_outside,
		 fuzz_share);
	fuzz_shell(cmd);
}

/* The oracle: outside the share holds one file, unchanged. */
static void fuzz_check_outside(void)
{
	char path[FUZZ_CMD_MAX], text[64] = "";
	struct stat st;
	FILE *file;
	size_t len;

	snprintf(path, sizeof(path), "%s/secret", fuzz_outside);
	if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    (st.st_mode & 07777) != 0644)
		abort(); /* linked, replaced or re-moded from inside the share */
	file = fopen(path, "r");
	if (!file)
		abort();
	len = fread(text, 1, sizeof(text) - 1, file);
	fclose(file);
	text[len] = '\0';
	if (strcmp(text, FUZZ_SECRET_TEXT) != 0 || stat(fuzz_outside, &st) < 0 || st.st_nlink != 2)
		abort();
	snprintf(path, sizeof(path), "ls -A %s | grep -qvx secret", fuzz_outside);
	if (system(path) == 0) /* some other name appeared */
		abort();
}

struct fuzz_segments {
	struct iovec iov[FUZZ_SEGMENTS_MAX + 1];
	unsigned int count;
};

/*
 * Cuts len bytes (from data, or zeroed room when data is NULL) into pieces of piece bytes,
 * at most FUZZ_SEGMENTS_MAX of them, then one of the rest; each is its own allocation.
 */
static void fuzz_split(const uint8_t *data, size_t len, size_t piece, struct fuzz_segments *out)
{
	size_t at = 0;

	out->count = 0;
	while (at < len || out->count == 0) {
		size_t take = out->count < FUZZ_SEGMENTS_MAX && piece < len - at ? piece : len - at;
		uint8_t *buf = calloc(1, take ? take : 1);

		if (!buf)
			abort();
		if (data)
			memcpy(buf, data + at, take);
		out->iov[out->count++] = (struct iovec){ .iov_base = buf, .iov_len = take };
		at += take;
	}
}

static void fuzz_segments_free(struct fuzz_segments *segments)
{
	for (unsigned int i = 0; i < segments->count; i++)
		free(segments->iov[i].iov_base);
	segments->count = 0;
}

/* One request, whole or in segments; the reply may never be longer than its room. */
static void fuzz_serve(struct fuse_server *server, uint8_t flags, size_t len)
{
	static struct fuzz_segments request, reply;
	size_t piece = ((flags >> FUZZ_SPLIT_SIZE_SHIFT) & FUZZ_SPLIT_SIZE_MASK) + 1u;

	if (!(flags & FUZZ_SPLIT)) {
		if (fuse_server_handle(server, fuzz_request, len, fuzz_reply,
				       FUSE_SERVER_MAX_REPLY) > FUSE_SERVER_MAX_REPLY)
			abort();
		return;
	}
	fuzz_split(fuzz_request, len, piece, &request);
	fuzz_split(NULL, FUSE_SERVER_MAX_REPLY, piece, &reply);
	if (fuse_server_handle_segments(server, request.iov, request.count, reply.iov,
					reply.count) > FUSE_SERVER_MAX_REPLY)
		abort();
	fuzz_segments_free(&request);
	fuzz_segments_free(&reply);
}

static void fuzz_init(struct fuse_server *server)
{
	struct {
		struct fuse_in_header hdr;
		struct fuse_init_in init;
	} req = { .hdr = { .len = sizeof(req), .opcode = FUSE_INIT, .unique = 1 },
		  .init = { .major = FUSE_KERNEL_VERSION, .minor = 36,
			    .flags = FUSE_DO_READDIRPLUS | FUSE_MAX_PAGES } };

	fuse_server_handle(server, (const uint8_t *)&req, sizeof(req), fuzz_reply,
			   FUSE_SERVER_MAX_REPLY);
}

static struct fuse_server *fuzz_snapshot(struct fuse_server *server)
{
	struct fuse_server *restored;
	struct byte_writer out;
	struct byte_reader in;
	char err[256];

	byte_writer_init(&out);
	fuse_server_save(server, &out);
	restored = fuse_server_create(fuzz_share, FUSE_SERVER_READ_WRITE, err, sizeof(err));
	if (!restored || byte_writer_failed(&out))
		abort();
	fuse_server_set_node_fd_budget(restored, FUZZ_NODE_FDS);
	byte_reader_init(&in, out.data, out.len);
	if (fuse_server_restore(restored, &in) < 0)
		abort(); /* what the server saved, it must take back */
	byte_writer_free(&out);
	fuse_server_destroy(server);
	return restored;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuse_server *server;
	char err[256];
	size_t at = 0;

	fuzz_setup_once();
	fuzz_reset_share();
	server = fuse_server_create(fuzz_share, FUSE_SERVER_READ_WRITE, err, sizeof(err));
	if (!server)
		abort();
	fuse_server_set_node_fd_budget(server, FUZZ_NODE_FDS);
	fuzz_init(server);
	for (unsigned int records = 0;
	     records < FUZZ_MAX_RECORDS && size - at >= FUZZ_RECORD_HEADER; records++) {
		uint8_t flags = data[at];
		size_t len = (size_t)data[at + 1] | ((size_t)data[at + 2] << 8);

		at += FUZZ_RECORD_HEADER;
		if (len > size - at)
			len = size - at;
		memcpy(fuzz_request, data + at, len);
		at += len;
		if ((flags & FUZZ_FIX_LEN) && len >= sizeof(struct fuse_in_header)) {
			uint32_t claimed = (uint32_t)len;

			memcpy(fuzz_request + offsetof(struct fuse_in_header, len), &claimed,
			       sizeof(claimed));
		}
		if (flags & FUZZ_SNAPSHOT)
			server = fuzz_snapshot(server);
		fuzz_serve(server, flags, len);
	}
	fuse_server_destroy(server);
	fuzz_check_outside();
	return 0;
}
