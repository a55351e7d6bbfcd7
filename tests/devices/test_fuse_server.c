/*
 * The virtio-fs FUSE server driven directly with request bytes, as a hostile guest would send
 * them: the operations a Linux client uses on a temporary share (host files checked after
 * each change), confinement (.., names with '/', symlinks out of the share, a directory
 * swapped for a symlink between requests), a read-only share answering EROFS with the host
 * file unchanged, malformed and oversized requests answered with errors, limits, and the
 * inode and handle tables surviving a save and restore into a new server (a vanished path
 * answering ESTALE). One test drives the device through its virtqueues with the fake driver.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <dirent.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "devices/fs.h"
#include "devices/fuse_server.h"
#include "fake_guest.h"
#include "harness.h"
#include "vmm/thread_filter.h"

#define TEST_REPLY_CAP FUSE_SERVER_MAX_REPLY
#define TEST_REQUEST_CAP FUSE_SERVER_MAX_REQUEST
#define TEST_ROOT 1u
#define TEST_MODE_FILE 0644u
#define TEST_MODE_DIR 0755u
/* writes in a row that must each move the shown mtime, and a time set on the host */
#define TEST_MTIME_WRITES 50
#define TEST_PAST_SECS 1000000000LL
#define TEST_HOST_TEXT "host bytes"
#define TEST_GUEST_TEXT "written by the guest"
#define TEST_READ_SIZE 4096u
#define TEST_DIR_MAX 256
#define TEST_LOW_FD_LIMIT 256u
#define TEST_NAME_MAX 64
#define TEST_WORKER_NAME "fs-worker"
/* More files than the server keeps cached I/O fds for (FUSE_IO_FDS_MAX, 256). */
#define TEST_IO_FILES 300u
#define TEST_IO_FDS_MAX 256u
/* Fds left to a server that must hold more files than half of them, each written once. */
#define TEST_FEW_FDS 48u
#define TEST_FEW_FILES 40u
/* A tree of many more nodes than the O_PATH fds a server is allowed, and a deeper chain. */
#define TEST_BUDGET_FDS 8u
/* An open-file limit whose parts are small: a quarter is 128 for one share, 64 for two. */
#define TEST_PARTED_FD_LIMIT 512u
#define TEST_PARTED_QUARTER (TEST_PARTED_FD_LIMIT / 4u)
#define TEST_PARTED_FILES 160u
#define TEST_BUDGET_DIRS 10u
#define TEST_BUDGET_FILES 30u
#define TEST_BUDGET_DEPTH 24u
/* Requests and replies cut into separately allocated segments, as a guest's chain is. */
#define TEST_SEGMENTS_MAX 8u
#define TEST_SEGMENT_DATA "0123456789abcdefghijklmnopqrstuvwxyz"
/* A full-size WRITE and READ as the guest lays them out: headers, then one segment a page. */
#define TEST_PAGE 4096u
#define TEST_FULL_PAGES (FUSE_SERVER_MAX_WRITE / TEST_PAGE)
#define TEST_FULL_SEGMENTS (TEST_FULL_PAGES + 2u)
/* The queue a 1 MiB request's pages and headers fit in. */
#define TEST_FS_QUEUE_SIZE 512u

struct fx {
	char dir[TEST_DIR_MAX];     /* the share */
	char outside[TEST_DIR_MAX]; /* a sibling directory the guest must never reach */
	struct fuse_server *s;
	uint8_t *req;
	uint8_t *out;
	uint64_t unique;
	int error;      /* of the last reply */
	size_t payload; /* bytes after the reply header */
};

static int run(const char *cmd)
{
	return system(cmd);
}

static void host_path(const struct fx *f, const char *rel, char *out)
{
	snprintf(out, PATH_MAX, "%.*s/%.*s", TEST_DIR_MAX, f->dir, TEST_NAME_MAX, rel);
}

static void host_write(const struct fx *f, const char *rel, const char *text)
{
	char path[PATH_MAX];
	FILE *file;

	host_path(f, rel, path);
	file = fopen(path, "w");
	if (file) {
		fputs(text, file);
		fclose(file);
	}
}

/* The host file's contents ("" when missing), in a static buffer. */
static const char *host_read(const struct fx *f, const char *rel)
{
	static char text[256];
	char path[PATH_MAX];
	FILE *file;
	size_t len = 0;

	host_path(f, rel, path);
	text[0] = '\0';
	file = fopen(path, "r");
	if (file) {
		len = fread(text, 1, sizeof(text) - 1, file);
		fclose(file);
	}
	text[len] = '\0';
	return text;
}

static bool host_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/*
 * Sends opcode on nodeid with up to three argument parts (NULL ends them early); returns the
 * reply length (0: no reply). f->error and f->payload describe the reply.
 */
static size_t call(struct fx *f, uint32_t opcode, uint64_t nodeid, const void *a, size_t a_len,
		   const void *b, size_t b_len, const void *c, size_t c_len)
{
	struct fuse_in_header hdr = { .opcode = opcode, .unique = ++f->unique, .nodeid = nodeid,
				      .uid = 1000, .gid = 1000 };
	struct fuse_out_header reply;
	size_t len = sizeof(hdr), got;

	if (a)
		memcpy(f->req + len, a, a_len), len += a_len;
	if (b)
		memcpy(f->req + len, b, b_len), len += b_len;
	if (c)
		memcpy(f->req + len, c, c_len), len += c_len;
	hdr.len = (uint32_t)len;
	memcpy(f->req, &hdr, sizeof(hdr));
	got = fuse_server_handle(f->s, f->req, len, f->out, TEST_REPLY_CAP);
	f->error = 0;
	f->payload = 0;
	if (got >= sizeof(reply)) {
		memcpy(&reply, f->out, sizeof(reply));
		f->error = reply.error;
		f->payload = got - sizeof(reply);
		CHECK(reply.unique == f->unique);
		CHECK(reply.len == got);
	}
	return got;
}

/*
 * Sends the request in f->req (its header's len says how long) cut into segments of the
 * given sizes (the last one takes the rest), each allocated on its own so a read or write
 * past one trips ASan, and collects the reply from segments of reply_sizes into f->out.
 * Returns the reply's length.
 */
static size_t call_segments(struct fx *f, const size_t *sizes, unsigned int count,
			    const size_t *reply_sizes, unsigned int reply_count)
{
	struct iovec in[TEST_SEGMENTS_MAX], out[TEST_SEGMENTS_MAX];
	struct fuse_in_header hdr;
	size_t at = 0, got, left;

	memcpy(&hdr, f->req, sizeof(hdr));
	for (unsigned int i = 0; i < count; i++) {
		size_t len = i + 1 == count ? hdr.len - at : sizes[i];

		in[i] = (struct iovec){ .iov_base = malloc(len ? len : 1), .iov_len = len };
		memcpy(in[i].iov_base, f->req + at, len);
		at += len;
	}
	for (unsigned int i = 0; i < reply_count; i++)
		out[i] = (struct iovec){ .iov_base = calloc(1, reply_sizes[i] ? reply_sizes[i] : 1),
					 .iov_len = reply_sizes[i] };
	got = fuse_server_handle_segments(f->s, in, count, out, reply_count);
	at = 0;
	left = got;
	for (unsigned int i = 0; i < reply_count; i++) {
		size_t take = left < out[i].iov_len ? left : out[i].iov_len;

		memcpy(f->out + at, out[i].iov_base, take);
		at += take;
		left -= take;
		free(out[i].iov_base);
	}
	for (unsigned int i = 0; i < count; i++)
		free(in[i].iov_base);
	f->error = 0;
	f->payload = 0;
	if (got >= sizeof(struct fuse_out_header)) {
		struct fuse_out_header reply;

		memcpy(&reply, f->out, sizeof(reply));
		f->error = reply.error;
		f->payload = got - sizeof(reply);
	}
	return got;
}

/* Lays out a WRITE of text at offset whose header says size bytes, in f->req. */
static void write_request(struct fx *f, uint64_t node, uint64_t offset, const char *text,
			  uint32_t size)
{
	struct fuse_in_header hdr = { .opcode = FUSE_WRITE, .unique = ++f->unique,
				      .nodeid = node };
	struct fuse_write_in in = { .offset = offset, .size = size };

	hdr.len = (uint32_t)(sizeof(hdr) + sizeof(in) + strlen(text));
	memcpy(f->req, &hdr, sizeof(hdr));
	memcpy(f->req + sizeof(hdr), &in, sizeof(in));
	memcpy(f->req + sizeof(hdr) + sizeof(in), text, strlen(text));
}

static void *payload(struct fx *f)
{
	return f->out + sizeof(struct fuse_out_header);
}

static void do_init(struct fx *f)
{
	struct fuse_init_in in = { .major = FUSE_KERNEL_VERSION, .minor = 36,
				   .max_readahead = 1u << 17,
				   .flags = FUSE_DO_READDIRPLUS | FUSE_MAX_PAGES | FUSE_BIG_WRITES };

	call(f, FUSE_INIT, 0, &in, sizeof(in), NULL, 0, NULL, 0);
}

/* A share on the file system of template (a mkdtemp pattern). */
static int fx_init_in(struct fx *f, enum fuse_server_access access, const char *template)
{
	char base[TEST_DIR_MAX / 2], err[256], cmd[PATH_MAX + 16];

	memset(f, 0, sizeof(*f));
	snprintf(base, sizeof(base), "%s", template);
	if (!mkdtemp(base))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/share", base);
	snprintf(f->outside, sizeof(f->outside), "%s/outside", base);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s %s", f->dir, f->outside);
	if (run(cmd) != 0)
		return -1;
	f->req = calloc(1, TEST_REQUEST_CAP);
	f->out = calloc(1, TEST_REPLY_CAP);
	f->s = fuse_server_create(f->dir, access, err, sizeof(err));
	if (!f->s || !f->req || !f->out) {
		fprintf(stderr, "  cannot create the server: %s\n", err);
		return -1;
	}
	do_init(f);
	return f->error;
}

static int fx_init(struct fx *f, enum fuse_server_access access)
{
	return fx_init_in(f, access, "/tmp/voidbox-fuse-XXXXXX");
}

static void fx_free(struct fx *f)
{
	char cmd[PATH_MAX + 32];
	char *slash;

	fuse_server_destroy(f->s);
	free(f->req);
	free(f->out);
	slash = strrchr(f->dir, '/');
	if (slash) {
		*slash = '\0';
		snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
		run(cmd);
	}
}

/* LOOKUP name under parent: the node id, 0 on error (f->error says which). */
static uint64_t lookup(struct fx *f, uint64_t parent, const char *name, struct fuse_entry_out *e)
{
	struct fuse_entry_out entry = { 0 };

	call(f, FUSE_LOOKUP, parent, name, strlen(name) + 1, NULL, 0, NULL, 0);
	if (f->error)
		return 0;
	memcpy(&entry, payload(f), sizeof(entry));
	if (e)
		*e = entry;
	return entry.nodeid;
}

/* A CREATE of name in parent with flags: the new node id (0 on an error) and its fuse_open_out. */
static uint64_t create_with_open(struct fx *f, uint64_t parent, const char *name, uint32_t flags,
				 struct fuse_open_out *open_out)
{
	struct fuse_create_in in = { .flags = flags, .mode = S_IFREG | TEST_MODE_FILE };
	struct fuse_entry_out entry = { 0 };

	*open_out = (struct fuse_open_out){ 0 };
	call(f, FUSE_CREATE, parent, &in, sizeof(in), name, strlen(name) + 1, NULL, 0);
	if (f->error)
		return 0;
	memcpy(&entry, payload(f), sizeof(entry));
	memcpy(open_out, (uint8_t *)payload(f) + sizeof(entry), sizeof(*open_out));
	return entry.nodeid;
}

static uint64_t create(struct fx *f, uint64_t parent, const char *name, uint32_t flags,
		       uint64_t *fh)
{
	struct fuse_open_out open_out;
	uint64_t node = create_with_open(f, parent, name, flags, &open_out);

	*fh = open_out.fh;
	return node;
}

/* The open_flags a CREATE of name with flags answers (the reply's fuse_open_out). */
static uint32_t created_open_flags(struct fx *f, const char *name, uint32_t flags)
{
	struct fuse_open_out open_out;

	create_with_open(f, TEST_ROOT, name, flags, &open_out);
	CHECK_INT_EQ(f->error, 0);
	return f->error ? UINT32_MAX : open_out.open_flags;
}

static uint64_t open_node(struct fx *f, uint64_t node, uint32_t flags)
{
	struct fuse_open_in in = { .flags = flags };
	struct fuse_open_out out = { 0 };

	call(f, FUSE_OPEN, node, &in, sizeof(in), NULL, 0, NULL, 0);
	if (f->error)
		return 0;
	memcpy(&out, payload(f), sizeof(out));
	return out.fh;
}

static void write_fh(struct fx *f, uint64_t node, uint64_t fh, uint64_t offset, const char *text)
{
	struct fuse_write_in in = { .fh = fh, .offset = offset, .size = (uint32_t)strlen(text) };

	call(f, FUSE_WRITE, node, &in, sizeof(in), text, strlen(text), NULL, 0);
}

/* READ into a static NUL-terminated buffer ("" on error). */
static const char *read_fh(struct fx *f, uint64_t node, uint64_t fh)
{
	static char text[TEST_READ_SIZE + 1];
	struct fuse_read_in in = { .fh = fh, .size = TEST_READ_SIZE };

	call(f, FUSE_READ, node, &in, sizeof(in), NULL, 0, NULL, 0);
	text[0] = '\0';
	if (!f->error) {
		memcpy(text, payload(f), f->payload);
		text[f->payload] = '\0';
	}
	return text;
}

static void release(struct fx *f, uint64_t node, uint64_t fh)
{
	struct fuse_release_in in = { .fh = fh };

	call(f, FUSE_RELEASE, node, &in, sizeof(in), NULL, 0, NULL, 0);
}

static uint64_t mkdir_node(struct fx *f, uint64_t parent, const char *name)
{
	struct fuse_mkdir_in in = { .mode = TEST_MODE_DIR };

	call(f, FUSE_MKDIR, parent, &in, sizeof(in), name, strlen(name) + 1, NULL, 0);
	return f->error ? 0 : ((struct fuse_entry_out *)payload(f))->nodeid;
}

/* ---- tests ---- */

static void test_init_negotiates(void)
{
	struct fx f;
	struct fuse_init_out out;
	struct fuse_init_in old = { .major = FUSE_KERNEL_VERSION, .minor = 9 };

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	memcpy(&out, payload(&f), sizeof(out));
	CHECK_INT_EQ(out.major, FUSE_KERNEL_VERSION);
	CHECK_INT_EQ(out.minor, 36);
	CHECK_INT_EQ(out.max_write, FUSE_SERVER_MAX_WRITE);
	CHECK((out.flags & FUSE_DO_READDIRPLUS) != 0);
	call(&f, FUSE_INIT, 0, &old, sizeof(old), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EPROTO);
	call(&f, FUSE_INIT, 0, &old, 4, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	fx_free(&f);
}

static void test_create_write_read(void)
{
	struct fx f;
	struct fuse_entry_out entry;
	uint64_t fh = 0, node, again;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	/* files are served without opens: CREATE answers handle 0, I/O goes by node */
	node = create(&f, TEST_ROOT, "new.txt", O_RDWR | O_CREAT, &fh);
	CHECK(node > TEST_ROOT && fh == 0);
	write_fh(&f, node, fh, 0, TEST_GUEST_TEXT);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(((struct fuse_write_out *)payload(&f))->size, strlen(TEST_GUEST_TEXT));
	CHECK_STR_EQ(host_read(&f, "new.txt"), TEST_GUEST_TEXT);
	CHECK_STR_EQ(read_fh(&f, node, fh), TEST_GUEST_TEXT);
	release(&f, node, fh);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(fuse_server_handle_count(f.s), 0);
	/* the host writes, the guest reads; the owner shows as the sandbox user */
	host_write(&f, "host.txt", TEST_HOST_TEXT);
	again = lookup(&f, TEST_ROOT, "host.txt", &entry);
	CHECK(again != 0);
	CHECK_INT_EQ(entry.attr.uid, FUSE_SERVER_GUEST_ID);
	CHECK_INT_EQ(entry.attr.gid, FUSE_SERVER_GUEST_ID);
	CHECK_INT_EQ(entry.attr.size, strlen(TEST_HOST_TEXT));
	/* OPEN answers ENOSYS, so the guest kernel stops sending OPEN and RELEASE */
	CHECK(open_node(&f, again, O_RDONLY) == 0);
	CHECK_INT_EQ(f.error, -ENOSYS);
	CHECK_STR_EQ(read_fh(&f, again, 0), TEST_HOST_TEXT);
	CHECK_INT_EQ(fuse_server_handle_count(f.s), 0);
	/* the same name twice is one node */
	CHECK(lookup(&f, TEST_ROOT, "host.txt", NULL) == again);
	fx_free(&f);
}

/* Directories, attributes, renames across directories, links, symlinks and removals. */
static void check_directory_operations(struct fx *fp)
{
	struct fx f = *fp; /* a copy: the calls below advance its request ids and results */
	struct fuse_setattr_in set = { 0 };
	struct fuse_rename2_in rename = { 0 };
	struct fuse_link_in link = { 0 };
	struct fuse_attr_out attr;
	char path[PATH_MAX];
	struct stat st;
	uint64_t a, b, fh = 0, file;

	a = mkdir_node(&f, TEST_ROOT, "a");
	b = a ? mkdir_node(&f, a, "b") : 0;
	CHECK(a && b);
	host_path(&f, "a/b", path);
	CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
	file = create(&f, b, "f", O_WRONLY | O_CREAT, &fh);
	write_fh(&f, file, fh, 0, "0123456789");
	/* chmod, truncate, utimens */
	set.valid = FATTR_MODE | FATTR_SIZE | FATTR_MTIME;
	set.mode = 0600;
	set.size = 4;
	set.mtime = 1000000;
	call(&f, FUSE_SETATTR, file, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	memcpy(&attr, payload(&f), sizeof(attr));
	CHECK_INT_EQ(attr.attr.size, 4);
	CHECK_INT_EQ(attr.attr.mode & 07777, 0600);
	CHECK_STR_EQ(host_read(&f, "a/b/f"), "0123");
	CHECK_STR_EQ(read_fh(&f, file, fh), "0123");
	host_path(&f, "a/b/f", path);
	CHECK(stat(path, &st) == 0 && st.st_mtime == 1000000 && (st.st_mode & 07777) == 0600);
	/* chown to anyone but the sandbox user is refused */
	set = (struct fuse_setattr_in){ .valid = FATTR_UID, .uid = 0 };
	call(&f, FUSE_SETATTR, file, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EPERM);
	/* rename across directories, then NOREPLACE onto an existing name */
	rename.newdir = TEST_ROOT;
	call(&f, FUSE_RENAME2, b, &rename, sizeof(rename), "f", 2, "moved", 6);
	CHECK_INT_EQ(f.error, 0);
	CHECK_STR_EQ(host_read(&f, "moved"), "0123");
	host_write(&f, "other", "x");
	rename = (struct fuse_rename2_in){ .newdir = TEST_ROOT, .flags = RENAME_NOREPLACE };
	call(&f, FUSE_RENAME2, TEST_ROOT, &rename, sizeof(rename), "moved", 6, "other", 6);
	CHECK_INT_EQ(f.error, -EEXIST);
	rename.flags = RENAME_WHITEOUT;
	call(&f, FUSE_RENAME2, TEST_ROOT, &rename, sizeof(rename), "moved", 6, "x", 2);
	CHECK_INT_EQ(f.error, -EINVAL);
	/* a hard link is the same node */
	link.oldnodeid = file;
	call(&f, FUSE_LINK, TEST_ROOT, &link, sizeof(link), "hard", 5, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK(((struct fuse_entry_out *)payload(&f))->nodeid == file);
	CHECK_INT_EQ(((struct fuse_entry_out *)payload(&f))->attr.nlink, 2);
	/* symlink and readlink */
	call(&f, FUSE_SYMLINK, TEST_ROOT, "ln", 3, "moved", 6, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	host_path(&f, "ln", path);
	{
		char target[64] = "";

		CHECK(readlink(path, target, sizeof(target) - 1) == 5);
		call(&f, FUSE_READLINK, ((struct fuse_entry_out *)payload(&f))->nodeid, NULL, 0,
		     NULL, 0, NULL, 0);
		CHECK_INT_EQ(f.error, 0);
		CHECK(f.payload == 5 && memcmp(payload(&f), "moved", 5) == 0);
	}
	/* rmdir, unlink */
	call(&f, FUSE_RMDIR, a, "b", 2, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	call(&f, FUSE_RMDIR, TEST_ROOT, "a", 2, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	call(&f, FUSE_UNLINK, TEST_ROOT, "moved", 6, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	host_path(&f, "a", path);
	CHECK(!host_exists(path));
	host_path(&f, "moved", path);
	CHECK(!host_exists(path));
	*fp = f;
}

/*
 * A WRITE whose headers and data are spread over several segments, as the guest's chain has
 * them (header and write_in apart, then the data page by page): the host file gets the data
 * in order, with no byte of the headers in it, whether a segment boundary falls inside a
 * header, exactly after write_in, or inside the data.
 */
static void test_write_across_segments(void)
{
	const size_t guest_layout[] = { sizeof(struct fuse_in_header),
					sizeof(struct fuse_write_in), 5, 1, 20, 0 };
	const size_t odd_cuts[] = { 7, 50, 25, 1, 0 };
	const size_t one_reply[] = { 64 };
	const char *text = TEST_SEGMENT_DATA;
	struct fuse_write_out out;
	uint64_t fh = 0, node;
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	node = create(&f, TEST_ROOT, "spread", O_WRONLY | O_CREAT, &fh);
	CHECK(node != 0);
	write_request(&f, node, 0, text, (uint32_t)strlen(text));
	call_segments(&f, guest_layout, 6, one_reply, 1);
	CHECK_INT_EQ(f.error, 0);
	memcpy(&out, payload(&f), sizeof(out));
	CHECK_INT_EQ(out.size, strlen(text));
	CHECK_STR_EQ(host_read(&f, "spread"), text);
	/* cut elsewhere (inside the in-header and write_in), at an offset */
	write_request(&f, node, 4, "WXYZ", 4);
	call_segments(&f, odd_cuts, 5, one_reply, 1);
	CHECK_INT_EQ(f.error, 0);
	CHECK_STR_EQ(host_read(&f, "spread"), "0123WXYZ89abcdefghijklmnopqrstuvwxyz");
	fx_free(&f);
}

/*
 * A WRITE whose header's size disagrees with the data the request carries is refused and
 * writes nothing: more than carried, less than carried, and a request longer than its
 * segments hold.
 */
static void test_write_size_mismatch(void)
{
	const size_t layout[] = { sizeof(struct fuse_in_header), sizeof(struct fuse_write_in), 0 };
	const size_t one_reply[] = { 64 };
	const char *text = TEST_SEGMENT_DATA;
	uint64_t fh = 0, node;
	struct fuse_in_header hdr;
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	node = create(&f, TEST_ROOT, "mismatch", O_WRONLY | O_CREAT, &fh);
	CHECK(node != 0);
	write_request(&f, node, 0, text, (uint32_t)strlen(text) + 1);
	call_segments(&f, layout, 3, one_reply, 1);
	CHECK_INT_EQ(f.error, -EINVAL);
	write_request(&f, node, 0, text, (uint32_t)strlen(text) - 1);
	call_segments(&f, layout, 3, one_reply, 1);
	CHECK_INT_EQ(f.error, -EINVAL);
	write_request(&f, node, 0, text, 0);
	call_segments(&f, layout, 3, one_reply, 1);
	CHECK_INT_EQ(f.error, -EINVAL);
	/* the header claims one byte more than the segments hold (size agrees with the claim) */
	write_request(&f, node, 0, text, (uint32_t)strlen(text) + 1);
	memcpy(&hdr, f.req, sizeof(hdr));
	hdr.len++;
	memcpy(f.req, &hdr, sizeof(hdr));
	CHECK_INT_EQ(fuse_server_handle(f.s, f.req, hdr.len - 1, f.out, TEST_REPLY_CAP),
		     sizeof(struct fuse_out_header));
	CHECK_INT_EQ(((struct fuse_out_header *)f.out)->error, -EINVAL);
	CHECK_STR_EQ(host_read(&f, "mismatch"), "");
	fx_free(&f);
}

/*
 * A READ's data lands across the reply's segments after the reply header, which may itself
 * be cut: every byte in order, and no more than the segments hold when the guest asks for
 * more than it gave room for.
 */
static void test_read_into_segments(void)
{
	const size_t request[] = { sizeof(struct fuse_in_header), 0 };
	const size_t cut_header[] = { 10, 6, 3, 1, 12, 4096 };
	const size_t short_room[] = { sizeof(struct fuse_out_header), 4, 6 };
	const char *text = TEST_SEGMENT_DATA;
	struct fuse_in_header hdr = { .opcode = FUSE_READ, .len = sizeof(hdr) +
								   sizeof(struct fuse_read_in) };
	struct fuse_read_in in = { .size = TEST_READ_SIZE };
	struct fuse_out_header reply;
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	host_write(&f, "source", text);
	hdr.nodeid = lookup(&f, TEST_ROOT, "source", NULL);
	CHECK(hdr.nodeid != 0);
	hdr.unique = ++f.unique;
	memcpy(f.req, &hdr, sizeof(hdr));
	memcpy(f.req + sizeof(hdr), &in, sizeof(in));
	CHECK_INT_EQ(call_segments(&f, request, 2, cut_header, 6),
		     sizeof(reply) + strlen(text));
	memcpy(&reply, f.out, sizeof(reply));
	CHECK_INT_EQ(reply.error, 0);
	CHECK(reply.unique == hdr.unique);
	CHECK_INT_EQ(reply.len, sizeof(reply) + strlen(text));
	CHECK(f.payload == strlen(text) && memcmp(payload(&f), text, strlen(text)) == 0);
	/* room for ten bytes of data: ten are read, from the offset asked */
	in.offset = 2;
	memcpy(f.req + sizeof(hdr), &in, sizeof(in));
	CHECK_INT_EQ(call_segments(&f, request, 2, short_room, 3), sizeof(reply) + 10);
	CHECK_INT_EQ(f.error, 0);
	CHECK(memcmp(payload(&f), text + 2, 10) == 0);
	fx_free(&f);
}

static void fill_pages(struct iovec *pages, unsigned int count, bool pattern)
{
	for (unsigned int i = 0; i < count; i++) {
		uint8_t *page = malloc(TEST_PAGE);

		for (unsigned int b = 0; page && b < TEST_PAGE; b++)
			page[b] = pattern ? (uint8_t)(i * 7u + b) : 0;
		pages[i] = (struct iovec){ .iov_base = page, .iov_len = page ? TEST_PAGE : 0 };
	}
}

/*
 * The largest WRITE offered (1 MiB, max_pages 256) arrives as a Linux guest sends it, a
 * segment per header and per page, and lands whole; a READ of it fills 256 page segments
 * after the reply header's own, every byte in place.
 */
static void test_full_size_write_and_read(void)
{
	static struct iovec in[TEST_FULL_SEGMENTS], out[TEST_FULL_SEGMENTS - 1];
	struct fuse_in_header hdr = { .opcode = FUSE_WRITE,
				      .len = sizeof(hdr) + sizeof(struct fuse_write_in) +
					     FUSE_SERVER_MAX_WRITE };
	struct fuse_write_in write_in = { .size = FUSE_SERVER_MAX_WRITE };
	struct fuse_read_in read_in = { .size = FUSE_SERVER_MAX_WRITE };
	struct fuse_out_header reply = { 0 };
	struct fuse_write_out written = { 0 };
	uint8_t reply_head[sizeof(reply) + sizeof(written)];
	unsigned int mismatched = 0;
	uint64_t fh = 0;
	struct fx f;

	CHECK_INT_EQ(FUSE_SERVER_MAX_WRITE, 1024u * 1024u);
	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	hdr.nodeid = create(&f, TEST_ROOT, "full", O_WRONLY | O_CREAT, &fh);
	CHECK(hdr.nodeid != 0);
	in[0] = (struct iovec){ .iov_base = &hdr, .iov_len = sizeof(hdr) };
	in[1] = (struct iovec){ .iov_base = &write_in, .iov_len = sizeof(write_in) };
	fill_pages(in + 2, TEST_FULL_PAGES, true);
	out[0] = (struct iovec){ .iov_base = reply_head, .iov_len = sizeof(reply_head) };
	CHECK_INT_EQ(fuse_server_handle_segments(f.s, in, TEST_FULL_SEGMENTS, out, 1),
		     sizeof(reply_head));
	memcpy(&reply, reply_head, sizeof(reply));
	memcpy(&written, reply_head + sizeof(reply), sizeof(written));
	CHECK_INT_EQ(reply.error, 0);
	CHECK_INT_EQ(written.size, FUSE_SERVER_MAX_WRITE);
	/* read it back: the reply header in a segment of its own, then the pages */
	hdr.opcode = FUSE_READ;
	hdr.len = sizeof(hdr) + sizeof(read_in);
	in[1] = (struct iovec){ .iov_base = &read_in, .iov_len = sizeof(read_in) };
	out[0] = (struct iovec){ .iov_base = &reply, .iov_len = sizeof(reply) };
	fill_pages(out + 1, TEST_FULL_PAGES, false);
	CHECK_INT_EQ(fuse_server_handle_segments(f.s, in, 2, out, TEST_FULL_PAGES + 1),
		     sizeof(reply) + FUSE_SERVER_MAX_WRITE);
	CHECK_INT_EQ(reply.error, 0);
	for (unsigned int i = 0; i < TEST_FULL_PAGES; i++)
		mismatched += memcmp(in[i + 2].iov_base, out[i + 1].iov_base, TEST_PAGE) != 0;
	CHECK_INT_EQ(mismatched, 0);
	for (unsigned int i = 0; i < TEST_FULL_PAGES; i++) {
		free(in[i + 2].iov_base);
		free(out[i + 1].iov_base);
	}
	fx_free(&f);
}

static void test_directory_operations(void)
{
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	check_directory_operations(&f);
	fx_free(&f);
}

/* MKNOD (regular files only), user.* xattrs, STATFS. */
/*
 * A GETXATTR of name whose reply may only hold its header (the guest's writable buffers are
 * that small): the reply's error, after checking the reply claims no more than it was given.
 */
static int getxattr_in_room(struct fx *f, uint64_t node, const struct fuse_getxattr_in *get,
			    const char *name)
{
	struct fuse_in_header hdr = { .opcode = FUSE_GETXATTR, .unique = ++f->unique,
				      .nodeid = node };
	struct fuse_out_header reply = { 0 };
	size_t len = sizeof(hdr) + sizeof(*get) + strlen(name) + 1, got;

	hdr.len = (uint32_t)len;
	memcpy(f->req, &hdr, sizeof(hdr));
	memcpy(f->req + sizeof(hdr), get, sizeof(*get));
	memcpy(f->req + sizeof(hdr) + sizeof(*get), name, strlen(name) + 1);
	got = fuse_server_handle(f->s, f->req, len, f->out, sizeof(reply));
	CHECK_INT_EQ(got, sizeof(reply));
	memcpy(&reply, f->out, sizeof(reply));
	CHECK_INT_EQ(reply.len, sizeof(reply));
	return reply.error;
}

static void check_mknod_xattr_statfs(struct fx *fp)
{
	struct fx f = *fp; /* a copy: the calls below advance its request ids and results */
	struct fuse_mknod_in mknod = { .mode = S_IFREG | TEST_MODE_FILE };
	struct fuse_setxattr_in set = { .size = 3 };
	struct fuse_getxattr_in get = { .size = 64 };
	uint64_t node;

	call(&f, FUSE_MKNOD, TEST_ROOT, &mknod, sizeof(mknod), "plain", 6, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	node = ((struct fuse_entry_out *)payload(&f))->nodeid;
	mknod.mode = S_IFCHR | 0600;
	mknod.rdev = makedev(1, 3);
	call(&f, FUSE_MKNOD, TEST_ROOT, &mknod, sizeof(mknod), "null", 5, NULL, 0);
	CHECK_INT_EQ(f.error, -EPERM);
	mknod.mode = S_IFIFO | 0600;
	call(&f, FUSE_MKNOD, TEST_ROOT, &mknod, sizeof(mknod), "fifo", 5, NULL, 0);
	CHECK_INT_EQ(f.error, -EPERM);
	/* only user.* xattrs */
	call(&f, FUSE_SETXATTR, node, &set, FUSE_COMPAT_SETXATTR_IN_SIZE, "trusted.x", 10, "abc",
	     3);
	CHECK_INT_EQ(f.error, -EOPNOTSUPP);
	call(&f, FUSE_SETXATTR, node, &set, FUSE_COMPAT_SETXATTR_IN_SIZE, "user.k", 7, "abc", 3);
	if (f.error != -EOPNOTSUPP) { /* tmpfs before 6.6 has no user xattrs */
		CHECK_INT_EQ(f.error, 0);
		call(&f, FUSE_GETXATTR, node, &get, sizeof(get), "user.k", 7, NULL, 0);
		CHECK_INT_EQ(f.error, 0);
		CHECK(f.payload == 3 && memcmp(payload(&f), "abc", 3) == 0);
		get.size = 0;
		call(&f, FUSE_GETXATTR, node, &get, sizeof(get), "user.k", 7, NULL, 0);
		CHECK_INT_EQ(((struct fuse_getxattr_out *)payload(&f))->size, 3);
		get.size = 64;
		/* a sized GETXATTR whose reply buffers hold only the header: ERANGE, not a length */
		CHECK_INT_EQ(getxattr_in_room(&f, node, &get, "user.k"), -ERANGE);
		call(&f, FUSE_LISTXATTR, node, &get, sizeof(get), NULL, 0, NULL, 0);
		CHECK(f.error == 0 && f.payload == 7);
		call(&f, FUSE_REMOVEXATTR, node, "user.k", 7, NULL, 0, NULL, 0);
		CHECK_INT_EQ(f.error, 0);
	}
	/* a 70 KiB value is refused, not copied */
	set.size = 70000;
	call(&f, FUSE_SETXATTR, node, &set, FUSE_COMPAT_SETXATTR_IN_SIZE, "user.k", 7, "abc", 3);
	CHECK_INT_EQ(f.error, -EINVAL);
	call(&f, FUSE_STATFS, TEST_ROOT, NULL, 0, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK(((struct fuse_statfs_out *)payload(&f))->st.bsize > 0);
	*fp = f;
}

static void test_mknod_xattr_statfs(void)
{
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	check_mknod_xattr_statfs(&f);
	fx_free(&f);
}

struct confined_run {
	struct fx *f;
	bool landlock;
	int restrict_rc;
	int outside_errno; /* open() of a file outside the share, once confined */
};

/* The share's worker as the device runs it: Landlock (when asked), then the seccomp filter. */
static void *confined_thread(void *arg)
{
	struct confined_run *run = arg;
	char outside[PATH_MAX];
	int fd;

	const char *const share[] = { run->f->dir };

	run->restrict_rc = run->landlock ? vmm_thread_restrict_to_dirs(share, 1, false) : 0;
	vmm_thread_enter(VMM_THREAD_SHARE_WORKER, TEST_WORKER_NAME, true);
	check_directory_operations(run->f);
	check_mknod_xattr_statfs(run->f);
	snprintf(outside, sizeof(outside), "%s/secret", run->f->outside);
	fd = open(outside, O_RDONLY | O_CLOEXEC);
	run->outside_errno = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void run_confined(bool landlock)
{
	struct confined_run confined = { .landlock = landlock };
	char cmd[PATH_MAX + 32];
	struct fx f;
	pthread_t thread;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	snprintf(cmd, sizeof(cmd), "printf x > %s/secret", f.outside);
	CHECK_INT_EQ(run(cmd), 0);
	confined.f = &f;
	CHECK_INT_EQ(pthread_create(&thread, NULL, confined_thread, &confined), 0);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(confined.restrict_rc, 0);
	/* beside the share: readable to the share role's seccomp filter, not to Landlock */
	CHECK_INT_EQ(confined.outside_errno, landlock ? EACCES : 0);
	fx_free(&f);
}

/*
 * Every operation above works in a thread under the share role's seccomp filter: its allow
 * list holds what the server calls (valgrind cannot run filtered threads; the plain and ASan
 * builds run this).
 */
static void test_operations_under_share_filter(void)
{
	if (HARNESS_UNDER_VALGRIND)
		return;
	run_confined(false);
}

struct read_only_probe {
	const char *dir;
	int restrict_rc;
	int read_errno;	  /* open(dir/file, O_RDONLY) */
	int create_errno; /* open(dir/new, O_WRONLY | O_CREAT) */
};

/* A read-only share's worker: held beneath its directory, and only reading there. */
static void *read_only_thread(void *arg)
{
	struct read_only_probe *probe = arg;
	char path[PATH_MAX];
	int fd;

	const char *const share[] = { probe->dir };

	probe->restrict_rc = vmm_thread_restrict_to_dirs(share, 1, true);
	snprintf(path, sizeof(path), "%s/file", probe->dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	probe->read_errno = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	snprintf(path, sizeof(path), "%s/new", probe->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, TEST_MODE_FILE);
	probe->create_errno = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* The same under Landlock too: the share is all the worker reaches (its own meson test). */
static void test_operations_under_landlock(void)
{
	struct read_only_probe probe = { 0 };
	struct fx f;
	pthread_t thread;

	if (HARNESS_UNDER_VALGRIND)
		harness_skip_all("valgrind cannot run threads that installed seccomp filters");
	if (!vmm_thread_restrict_usable())
		harness_skip_all("this kernel has no Landlock (version 2 or later)");
	run_confined(true);

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_ONLY), 0);
	host_write(&f, "file", TEST_HOST_TEXT);
	probe.dir = f.dir;
	CHECK_INT_EQ(pthread_create(&thread, NULL, read_only_thread, &probe), 0);
	pthread_join(thread, NULL);
	CHECK_INT_EQ(probe.restrict_rc, 0);
	CHECK_INT_EQ(probe.read_errno, 0);
	CHECK_INT_EQ(probe.create_errno, EACCES);
	fx_free(&f);
}

static void test_readdir_and_forget(void)
{
	struct fx f;
	struct fuse_open_in open_in = { 0 };
	struct fuse_read_in read_in = { .size = 4096 };
	struct fuse_release_in release_in = { 0 };
	struct fuse_forget_in forget = { .nlookup = 1 };
	struct {
		struct fuse_batch_forget_in head;
		struct fuse_forget_one one[2];
	} batch = { .head = { .count = 1000000 } };
	size_t before;
	bool saw_one = false, saw_two = false;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	host_write(&f, "one", "1");
	host_write(&f, "two", "2");
	call(&f, FUSE_OPENDIR, TEST_ROOT, &open_in, sizeof(open_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	read_in.fh = ((struct fuse_open_out *)payload(&f))->fh;
	before = fuse_server_inode_count(f.s);
	call(&f, FUSE_READDIRPLUS, TEST_ROOT, &read_in, sizeof(read_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	for (size_t at = 0; at + FUSE_NAME_OFFSET_DIRENTPLUS <= f.payload;) {
		struct fuse_direntplus *d = (struct fuse_direntplus *)((uint8_t *)payload(&f) + at);

		saw_one |= d->dirent.namelen == 3 && memcmp(d->dirent.name, "one", 3) == 0;
		saw_two |= d->dirent.namelen == 3 && memcmp(d->dirent.name, "two", 3) == 0;
		at += FUSE_DIRENTPLUS_SIZE(d);
	}
	CHECK(saw_one && saw_two);
	CHECK_INT_EQ(fuse_server_inode_count(f.s), before + 2);
	/* a tiny buffer gets no entry rather than half of one */
	read_in.size = 8;
	call(&f, FUSE_READDIR, TEST_ROOT, &read_in, sizeof(read_in), NULL, 0, NULL, 0);
	CHECK(f.error == 0 && f.payload == 0);
	release_in.fh = read_in.fh;
	call(&f, FUSE_RELEASEDIR, TEST_ROOT, &release_in, sizeof(release_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	/* FORGET gets no reply and frees the node; a count past the request is bounded */
	CHECK_INT_EQ(call(&f, FUSE_FORGET, lookup(&f, TEST_ROOT, "one", NULL), &forget,
			  sizeof(forget), NULL, 0, NULL, 0), 0);
	CHECK_INT_EQ(fuse_server_inode_count(f.s), before + 2);
	forget.nlookup = 2; /* readdirplus's and this lookup's */
	call(&f, FUSE_FORGET, lookup(&f, TEST_ROOT, "one", NULL), &forget, sizeof(forget), NULL, 0,
	     NULL, 0);
	batch.one[0] = (struct fuse_forget_one){ .nodeid = lookup(&f, TEST_ROOT, "two", NULL),
						 .nlookup = UINT64_MAX };
	batch.one[1] = (struct fuse_forget_one){ .nodeid = TEST_ROOT, .nlookup = UINT64_MAX };
	CHECK_INT_EQ(call(&f, FUSE_BATCH_FORGET, 0, &batch, sizeof(batch), NULL, 0, NULL, 0), 0);
	CHECK_INT_EQ(fuse_server_inode_count(f.s), before);
	/* the root survives any forget */
	CHECK(lookup(&f, TEST_ROOT, "one", NULL) != 0);
	fx_free(&f);
}

/*
 * rm -r as the guest does it: read a few entries, remove them, read on from the offset last
 * given; every file must be seen. Where directory offsets are ordinals (tmpfs before Linux
 * 6.6) a server that seeks to that offset afresh skips one live entry per entry removed; a
 * host with stable tmpfs offsets cannot show that, so vm_mounts repeats it in the nested L1.
 */
static void test_readdir_while_removing(void)
{
	enum { FILES = 120, SMALL_READ = 256 };
	struct fx f;
	struct fuse_open_in open_in = { 0 };
	struct fuse_read_in read_in = { .size = SMALL_READ };
	char name[TEST_NAME_MAX];
	unsigned int removed = 0;

	CHECK_INT_EQ(fx_init_in(&f, FUSE_SERVER_READ_WRITE, "/dev/shm/voidbox-fuse-XXXXXX"), 0);
	for (unsigned int i = 0; i < FILES; i++) {
		snprintf(name, sizeof(name), "file-%03u", i);
		host_write(&f, name, "x");
	}
	call(&f, FUSE_OPENDIR, TEST_ROOT, &open_in, sizeof(open_in), NULL, 0, NULL, 0);
	read_in.fh = ((struct fuse_open_out *)payload(&f))->fh;
	for (unsigned int rounds = 0; rounds < 2 * FILES; rounds++) {
		uint8_t page[SMALL_READ];
		size_t len;
		uint64_t next = read_in.offset;

		call(&f, FUSE_READDIR, TEST_ROOT, &read_in, sizeof(read_in), NULL, 0, NULL, 0);
		CHECK_INT_EQ(f.error, 0);
		len = f.payload;
		if (len == 0)
			break;
		memcpy(page, payload(&f), len);
		for (size_t at = 0; at + FUSE_NAME_OFFSET <= len;) {
			struct fuse_dirent *d = (struct fuse_dirent *)(page + at);

			snprintf(name, sizeof(name), "%.*s", (int)d->namelen, d->name);
			if (strncmp(name, "file-", 5) == 0) {
				call(&f, FUSE_UNLINK, TEST_ROOT, name, strlen(name) + 1, NULL, 0,
				     NULL, 0);
				removed += f.error == 0;
			}
			next = d->off;
			at += FUSE_DIRENT_SIZE(d);
		}
		read_in.offset = next;
	}
	CHECK_INT_EQ(removed, FILES);
	fx_free(&f);
}

static void test_confinement(void)
{
	struct fx f;
	char path[PATH_MAX], cmd[3 * PATH_MAX];
	uint64_t fh = 0, link, dir, node;
	struct fuse_create_in create_in = { .flags = O_WRONLY | O_CREAT, .mode = 0644 };

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	snprintf(path, sizeof(path), "%s/secret", f.outside);
	{
		FILE *file = fopen(path, "w");

		if (file) {
			fputs("secret", file);
			fclose(file);
		}
	}
	/* names that are not one component */
	CHECK(lookup(&f, TEST_ROOT, "..", NULL) == 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	CHECK(lookup(&f, TEST_ROOT, ".", NULL) == 0);
	CHECK(lookup(&f, TEST_ROOT, "../outside", NULL) == 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	CHECK(lookup(&f, TEST_ROOT, "", NULL) == 0);
	call(&f, FUSE_CREATE, TEST_ROOT, &create_in, sizeof(create_in), "../escape", 10, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	/* symlinks out of the share: the link is a node, never followed by the server */
	snprintf(cmd, sizeof(cmd), "ln -s %s %s/abs && ln -s ../outside %s/rel && "
		 "ln -s %s/secret %s/file", f.outside, f.dir, f.dir, f.outside, f.dir);
	CHECK_INT_EQ(run(cmd), 0);
	link = lookup(&f, TEST_ROOT, "abs", NULL);
	CHECK(link != 0);
	CHECK(lookup(&f, link, "secret", NULL) == 0);
	CHECK_INT_EQ(f.error, -ENOTDIR);
	CHECK(lookup(&f, lookup(&f, TEST_ROOT, "rel", NULL), "secret", NULL) == 0);
	CHECK(create(&f, link, "planted", O_WRONLY | O_CREAT, &fh) == 0);
	node = lookup(&f, TEST_ROOT, "file", NULL);
	CHECK(strcmp(read_fh(&f, node, 0), "") == 0); /* a symlink node has no I/O fd */
	CHECK_INT_EQ(f.error, -EBADF);
	/* creating over a symlink does not follow it */
	CHECK(create(&f, TEST_ROOT, "file", O_WRONLY | O_CREAT | O_TRUNC, &fh) == 0);
	snprintf(path, sizeof(path), "%s/secret", f.outside);
	{
		struct stat st;

		CHECK(stat(path, &st) == 0 && st.st_size == 6);
	}
	/* a directory swapped for a symlink between requests: the node keeps the old inode */
	dir = mkdir_node(&f, TEST_ROOT, "d");
	CHECK(dir != 0);
	snprintf(cmd, sizeof(cmd), "mv %s/d %s/d-old && ln -s %s %s/d", f.dir, f.dir, f.outside,
		 f.dir);
	CHECK_INT_EQ(run(cmd), 0);
	node = create(&f, dir, "planted", O_WRONLY | O_CREAT, &fh);
	CHECK(node != 0);
	snprintf(path, sizeof(path), "%s/planted", f.outside);
	CHECK(!host_exists(path));
	host_path(&f, "d-old/planted", path);
	CHECK(host_exists(path));
	/* a fresh lookup of d now sees the symlink, and cannot go through it */
	CHECK(lookup(&f, lookup(&f, TEST_ROOT, "d", NULL), "secret", NULL) == 0);
	fx_free(&f);
}

/*
 * The guest caches what the share lets it: a missing name as a negative entry, entries and
 * attributes for a second on a read-write share and longer on a read-only one. Files are
 * opened without an OPEN (ENOSYS), so they keep their page cache across opens on both; a
 * host change seen at a refresh drops it (AUTO_INVAL_DATA). O_TRUNC then arrives as a
 * SETATTR, so ATOMIC_O_TRUNC is not offered.
 */
static void test_cache_hints(void)
{
	struct fuse_init_in in = { .major = FUSE_KERNEL_VERSION, .minor = 36,
				   .flags = FUSE_AUTO_INVAL_DATA | FUSE_ATOMIC_O_TRUNC };
	struct fuse_entry_out entry, ro_entry;
	struct fuse_open_in open_in = { .flags = O_RDONLY };
	struct fuse_init_out init;
	struct fx f, ro;
	uint64_t node;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	call(&f, FUSE_INIT, 0, &in, sizeof(in), NULL, 0, NULL, 0);
	memcpy(&init, payload(&f), sizeof(init));
	CHECK((init.flags & FUSE_AUTO_INVAL_DATA) != 0);
	CHECK((init.flags & FUSE_ATOMIC_O_TRUNC) == 0);
	memset(&entry, 0xff, sizeof(entry));
	CHECK(lookup(&f, TEST_ROOT, "missing", &entry) == 0);
	CHECK_INT_EQ(f.error, 0); /* an answer, not an error: the guest keeps it */
	CHECK_INT_EQ(entry.entry_valid, 1);
	host_write(&f, "file", TEST_HOST_TEXT);
	CHECK(lookup(&f, TEST_ROOT, "file", &entry) != 0);
	CHECK_INT_EQ(entry.attr_valid, 1);
	CHECK(open_node(&f, entry.nodeid, O_RDONLY) == 0);
	CHECK_INT_EQ(f.error, -ENOSYS);
	/* the node's cached fd is the inode's: the host's rewrite in place reads back */
	CHECK_STR_EQ(read_fh(&f, entry.nodeid, 0), TEST_HOST_TEXT);
	host_write(&f, "file", TEST_GUEST_TEXT);
	CHECK_STR_EQ(read_fh(&f, entry.nodeid, 0), TEST_GUEST_TEXT);

	CHECK_INT_EQ(fx_init(&ro, FUSE_SERVER_READ_ONLY), 0);
	host_write(&ro, "file", TEST_HOST_TEXT);
	node = lookup(&ro, TEST_ROOT, "file", &ro_entry);
	CHECK(node != 0);
	CHECK(ro_entry.entry_valid > entry.entry_valid && ro_entry.attr_valid > 1);
	call(&ro, FUSE_OPEN, node, &open_in, sizeof(open_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(ro.error, -ENOSYS);
	fx_free(&ro);
	fx_free(&f);
}

/*
 * A new file opened write-only is written past the guest's page cache (FOPEN_DIRECT_IO); one
 * opened for reading too keeps the cache (it may be mmapped). The data lands either way.
 */
static void test_create_write_only_direct(void)
{
	struct fx f;
	uint64_t fh = 0, node;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	CHECK_INT_EQ(created_open_flags(&f, "out.o", O_WRONLY | O_CREAT | O_TRUNC),
		     FOPEN_DIRECT_IO);
	CHECK_INT_EQ(created_open_flags(&f, "db", O_RDWR | O_CREAT) & FOPEN_DIRECT_IO, 0);
	CHECK_INT_EQ(created_open_flags(&f, "lock", O_RDONLY | O_CREAT) & FOPEN_DIRECT_IO, 0);
	node = lookup(&f, TEST_ROOT, "out.o", NULL);
	CHECK(node != 0);
	write_fh(&f, node, fh, 0, TEST_GUEST_TEXT);
	CHECK_INT_EQ(f.error, 0);
	CHECK_STR_EQ(host_read(&f, "out.o"), TEST_GUEST_TEXT);
	fx_free(&f);
}

/* The modification time a GETATTR of node shows, in nanoseconds. */
static long long shown_mtime_ns(struct fx *f, uint64_t node)
{
	struct fuse_getattr_in in = { 0 };
	struct fuse_attr_out out = { 0 };

	call(f, FUSE_GETATTR, node, &in, sizeof(in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f->error, 0);
	memcpy(&out, payload(f), sizeof(out));
	return (long long)out.attr.mtime * 1000000000LL + out.attr.mtimensec;
}

/*
 * Every guest write moves the modification time the next answer shows, even one within the
 * host clock's tick (the guest drops a reader's stale cached pages only on a changed mtime or
 * size); without a write it stays put, and a time set on the host is shown as it is.
 */
static void test_writes_always_move_mtime(void)
{
	struct fx f;
	uint64_t fh = 0, node;
	long long before, after;
	char path[TEST_DIR_MAX + NAME_MAX + 2];
	const struct timespec past[2] = { { .tv_sec = TEST_PAST_SECS }, { .tv_sec = TEST_PAST_SECS } };

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	node = create(&f, TEST_ROOT, "log", O_WRONLY | O_CREAT | O_TRUNC, &fh);
	CHECK(node != 0);
	for (int i = 0; i < TEST_MTIME_WRITES; i++) {
		before = shown_mtime_ns(&f, node);
		write_fh(&f, node, fh, (uint64_t)i, "x");
		CHECK_INT_EQ(f.error, 0);
		after = shown_mtime_ns(&f, node);
		CHECK(after > before);
		CHECK_INT_EQ(shown_mtime_ns(&f, node), after); /* no write: unchanged */
	}
	snprintf(path, sizeof(path), "%s/log", f.dir);
	CHECK_INT_EQ(utimensat(AT_FDCWD, path, past, 0), 0);
	CHECK_INT_EQ(shown_mtime_ns(&f, node), TEST_PAST_SECS * 1000000000LL);
	fx_free(&f);
}

/* The host file's permission bits, or 0 when it cannot be read. */
static mode_t host_mode(struct fx *f, const char *name)
{
	char path[TEST_DIR_MAX + NAME_MAX + 2];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	return stat(path, &st) == 0 ? st.st_mode & 07777 : 0;
}

static void host_chmod(struct fx *f, const char *name, mode_t mode)
{
	char path[TEST_DIR_MAX + NAME_MAX + 2];

	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	CHECK_INT_EQ(chmod(path, mode), 0);
}

/*
 * HANDLE_KILLPRIV_V2: a write, truncate or open with O_TRUNC that the guest kernel marks drops
 * set-user-ID (and set-group-ID with group execute) on the host file; one it does not mark
 * (a caller with CAP_FSETID) keeps them.
 */
static void test_kill_suidgid(void)
{
	struct fuse_init_in init_in = { .major = FUSE_KERNEL_VERSION, .minor = 36,
					.flags = FUSE_HANDLE_KILLPRIV_V2 };
	struct fuse_setattr_in set = { .valid = FATTR_SIZE | FATTR_KILL_SUIDGID, .size = 1 };
	struct fuse_create_in trunc = { .flags = O_WRONLY | O_CREAT | O_TRUNC,
					.mode = S_IFREG | TEST_MODE_FILE,
					.open_flags = FUSE_OPEN_KILL_SUIDGID };
	struct fuse_write_in in = { .size = 1, .write_flags = FUSE_WRITE_KILL_SUIDGID };
	struct fuse_init_out init_out;
	struct fx f;
	uint64_t node, fh = 0;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	call(&f, FUSE_INIT, 0, &init_in, sizeof(init_in), NULL, 0, NULL, 0);
	memcpy(&init_out, payload(&f), sizeof(init_out));
	CHECK((init_out.flags & FUSE_HANDLE_KILLPRIV_V2) != 0);
	host_write(&f, "tool", TEST_HOST_TEXT);
	host_chmod(&f, "tool", 06755);
	node = lookup(&f, TEST_ROOT, "tool", NULL);
	write_fh(&f, node, fh, 0, "x"); /* unmarked: the writer may keep them */
	CHECK_INT_EQ(host_mode(&f, "tool"), 06755);
	in.fh = fh;
	call(&f, FUSE_WRITE, node, &in, sizeof(in), "y", 1, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(host_mode(&f, "tool"), 0755);
	release(&f, node, fh);

	host_chmod(&f, "tool", 04745); /* no group execute: set-group-ID means locking, kept */
	call(&f, FUSE_SETATTR, node, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(host_mode(&f, "tool"), 0745);

	host_chmod(&f, "tool", 04755); /* open(O_CREAT | O_TRUNC) of the existing file */
	call(&f, FUSE_CREATE, TEST_ROOT, &trunc, sizeof(trunc), "tool", 5, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(host_mode(&f, "tool"), 0755);
	fx_free(&f);
}

/*
 * How many of this process's fds other than O_PATH ones are open on the host file at path;
 * with for_writing, only those that can write.
 */
static unsigned int fds_on(const char *path, bool for_writing)
{
	char real[PATH_MAX], link[PATH_MAX], proc[PATH_MAX], line[128];
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *entry;
	unsigned int count = 0;

	if (!dir || !realpath(path, real)) {
		if (dir)
			closedir(dir);
		return 0;
	}
	while ((entry = readdir(dir))) {
		ssize_t len;
		unsigned int flags = 0;
		FILE *info;

		snprintf(proc, sizeof(proc), "/proc/self/fd/%s", entry->d_name);
		len = readlink(proc, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = '\0';
		if (strcmp(link, real) != 0)
			continue;
		snprintf(proc, sizeof(proc), "/proc/self/fdinfo/%s", entry->d_name);
		info = fopen(proc, "r");
		while (info && fgets(line, sizeof(line), info))
			sscanf(line, "flags: %o", &flags);
		if (info)
			fclose(info);
		count += !(flags & O_PATH) && (!for_writing || (flags & O_ACCMODE) != O_RDONLY);
	}
	closedir(dir);
	return count;
}

static unsigned int io_fds_on(const char *path)
{
	return fds_on(path, false);
}

static unsigned int write_fds_on(const char *path)
{
	return fds_on(path, true);
}

/*
 * The guest cannot give a host file set-user-ID or set-group-ID: CREATE, MKNOD and SETATTR
 * each drop those bits and keep the rest, so nothing the guest writes into the user's
 * directory runs as the host user for whoever starts it.
 */
static void test_guest_modes_never_setuid(void)
{
	struct fuse_create_in create_in = { .flags = O_WRONLY | O_CREAT, .mode = S_IFREG | 04755 };
	struct fuse_mknod_in mknod = { .mode = S_IFREG | 06755 };
	struct fuse_setattr_in set = { .valid = FATTR_MODE, .mode = S_IFREG | 06711 };
	struct fx f;
	uint64_t node;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	call(&f, FUSE_CREATE, TEST_ROOT, &create_in, sizeof(create_in), "created", 8, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(host_mode(&f, "created") & 07000, 0);
	CHECK_INT_EQ(host_mode(&f, "created") & 0700, 0700);
	call(&f, FUSE_MKNOD, TEST_ROOT, &mknod, sizeof(mknod), "made", 5, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(host_mode(&f, "made") & 07000, 0);
	host_write(&f, "tool", TEST_HOST_TEXT);
	node = lookup(&f, TEST_ROOT, "tool", NULL);
	call(&f, FUSE_SETATTR, node, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(host_mode(&f, "tool"), 0711);
	/* the reply shows the mode the host file has */
	CHECK_INT_EQ(((struct fuse_attr_out *)payload(&f))->attr.mode & 07777, 0711);
	set.mode = S_IFREG | 01644; /* the sticky bit is harmless and kept */
	call(&f, FUSE_SETATTR, node, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(host_mode(&f, "tool"), 01644);
	fx_free(&f);
}

static void alarm_fails(int sig)
{
	(void)sig;
	static const char message[] = "a CREATE of an existing FIFO blocked the share\n";

	if (write(STDERR_FILENO, message, sizeof(message) - 1) < 0)
		_exit(3);
	_exit(2);
}

/*
 * CREATE without O_EXCL of an entry that exists but is no regular file (a FIFO or a device the
 * host directory holds) is refused at once, for reading and for writing: the open would block
 * the share's worker for good, or run a driver's open. An existing directory keeps its EISDIR.
 */
static void test_create_refuses_special_files(void)
{
	static const uint32_t accesses[] = { O_RDONLY, O_WRONLY, O_RDWR };
	char path[PATH_MAX];
	uint64_t fh = 0;
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	host_path(&f, "pipe", path);
	CHECK_INT_EQ(mkfifo(path, 0666), 0);
	signal(SIGALRM, alarm_fails);
	alarm(10);
	for (size_t i = 0; i < sizeof(accesses) / sizeof(accesses[0]); i++) {
		CHECK(create(&f, TEST_ROOT, "pipe", accesses[i] | O_CREAT, &fh) == 0);
		CHECK_INT_EQ(f.error, -EPERM);
	}
	alarm(0);
	signal(SIGALRM, SIG_DFL);
	CHECK(mkdir_node(&f, TEST_ROOT, "dir") != 0);
	CHECK(create(&f, TEST_ROOT, "dir", O_RDONLY | O_CREAT, &fh) == 0);
	CHECK_INT_EQ(f.error, -EISDIR);
	/* a regular file that exists opens as before */
	host_write(&f, "plain", TEST_HOST_TEXT);
	CHECK(create(&f, TEST_ROOT, "plain", O_RDWR | O_CREAT, &fh) != 0);
	CHECK_INT_EQ(f.error, 0);
	fx_free(&f);
}

static void test_read_only_share(void)
{
	struct fx f;
	struct fuse_setattr_in set = { .valid = FATTR_SIZE, .size = 0 };
	struct fuse_mkdir_in mkdir_in = { .mode = 0755 };
	struct fuse_access_in access_in = { .mask = W_OK };
	struct fuse_fallocate_in fallocate_in = { .length = 4096 };
	char path[PATH_MAX];
	uint64_t fh = 0, node;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_ONLY), 0);
	host_write(&f, "keep.txt", TEST_HOST_TEXT);
	node = lookup(&f, TEST_ROOT, "keep.txt", NULL);
	CHECK(node != 0);
	CHECK(create(&f, TEST_ROOT, "new", O_WRONLY | O_CREAT, &fh) == 0);
	CHECK_INT_EQ(f.error, -EROFS);
	call(&f, FUSE_SETATTR, node, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EROFS);
	call(&f, FUSE_MKDIR, TEST_ROOT, &mkdir_in, sizeof(mkdir_in), "dir", 4, NULL, 0);
	CHECK_INT_EQ(f.error, -EROFS);
	call(&f, FUSE_UNLINK, TEST_ROOT, "keep.txt", 9, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EROFS);
	call(&f, FUSE_ACCESS, node, &access_in, sizeof(access_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EROFS);
	/* files open without an OPEN: their writes and truncations are what is refused */
	CHECK(open_node(&f, node, O_WRONLY | O_TRUNC) == 0);
	CHECK_INT_EQ(f.error, -ENOSYS);
	write_fh(&f, node, 0, 0, "overwritten");
	CHECK_INT_EQ(f.error, -EROFS);
	set.valid = FATTR_SIZE | FATTR_FH;
	call(&f, FUSE_SETATTR, node, &set, sizeof(set), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EROFS);
	CHECK_STR_EQ(read_fh(&f, node, 0), TEST_HOST_TEXT);
	CHECK_STR_EQ(host_read(&f, "keep.txt"), TEST_HOST_TEXT);
	/* the refused WRITE and FALLOCATE opened nothing for writing on the host file */
	fallocate_in.fh = 0;
	call(&f, FUSE_FALLOCATE, node, &fallocate_in, sizeof(fallocate_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EROFS);
	host_path(&f, "keep.txt", path);
	CHECK_INT_EQ(write_fds_on(path), 0);
	fx_free(&f);
}

static void test_malformed_requests(void)
{
	struct fx f;
	struct fuse_in_header hdr = { .len = 1000, .opcode = FUSE_GETATTR, .unique = 7,
				      .nodeid = TEST_ROOT };
	struct fuse_getattr_in getattr = { 0 };
	struct fuse_write_in write_in = { .size = FUSE_SERVER_MAX_WRITE + 1 };
	struct fuse_read_in read_in = { .fh = 1, .size = UINT32_MAX };
	struct fuse_out_header reply;
	char noterm[8] = { 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h' };
	char longname[NAME_MAX + 2];
	uint64_t fh = 0, node;
	size_t got;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	/* shorter than a header: no reply at all */
	CHECK_INT_EQ(fuse_server_handle(f.s, (const uint8_t *)&hdr, 10, f.out, TEST_REPLY_CAP), 0);
	/* a header that claims more than arrived */
	memcpy(f.req, &hdr, sizeof(hdr));
	got = fuse_server_handle(f.s, f.req, sizeof(hdr), f.out, TEST_REPLY_CAP);
	CHECK_INT_EQ(got, sizeof(reply));
	memcpy(&reply, f.out, sizeof(reply));
	CHECK_INT_EQ(reply.error, -EINVAL);
	CHECK(reply.unique == 7);
	/* a reply buffer smaller than a header gets nothing */
	CHECK_INT_EQ(fuse_server_handle(f.s, f.req, sizeof(hdr), f.out, 4), 0);
	/* names without their NUL, too long, empty */
	call(&f, FUSE_LOOKUP, TEST_ROOT, noterm, sizeof(noterm), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	call(&f, FUSE_LOOKUP, TEST_ROOT, longname, sizeof(longname), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	/* unknown nodes, handles and opcodes */
	call(&f, FUSE_GETATTR, 999999, &getattr, sizeof(getattr), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ESTALE);
	call(&f, FUSE_GETATTR, 0, &getattr, sizeof(getattr), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ESTALE);
	call(&f, FUSE_GETATTR, UINT64_MAX, &getattr, sizeof(getattr), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ESTALE);
	call(&f, FUSE_READ, TEST_ROOT, &read_in, sizeof(read_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EBADF);
	call(&f, 4242, TEST_ROOT, NULL, 0, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ENOSYS);
	call(&f, FUSE_SETLKW, TEST_ROOT, NULL, 0, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ENOSYS);
	call(&f, FUSE_FLUSH, TEST_ROOT, NULL, 0, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ENOSYS); /* the kernel stops sending FLUSH */
	/* arguments cut short */
	call(&f, FUSE_GETATTR, TEST_ROOT, &getattr, 3, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	/* writes larger than max_write, or than the bytes that came */
	node = create(&f, TEST_ROOT, "w", O_RDWR | O_CREAT, &fh);
	write_in.fh = fh;
	call(&f, FUSE_WRITE, node, &write_in, sizeof(write_in), "x", 1, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	write_in.size = 100;
	call(&f, FUSE_WRITE, node, &write_in, sizeof(write_in), "x", 1, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	write_in.offset = UINT64_MAX;
	write_in.size = 1;
	call(&f, FUSE_WRITE, node, &write_in, sizeof(write_in), "x", 1, NULL, 0);
	CHECK_INT_EQ(f.error, -EINVAL);
	/* a huge read is capped at max_write */
	read_in.fh = fh;
	call(&f, FUSE_READ, node, &read_in, sizeof(read_in), NULL, 0, NULL, 0);
	CHECK(f.error == 0 && f.payload <= FUSE_SERVER_MAX_WRITE);
	/* a file handle is not a directory handle */
	read_in.size = 4096;
	call(&f, FUSE_READDIR, TEST_ROOT, &read_in, sizeof(read_in), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -EBADF);
	/* a file node is not a parent */
	CHECK(lookup(&f, node, "x", NULL) == 0);
	CHECK_INT_EQ(f.error, -ENOTDIR);
	/* after DESTROY, only INIT is answered */
	call(&f, FUSE_DESTROY, 0, NULL, 0, NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, 0);
	CHECK_INT_EQ(fuse_server_handle_count(f.s), 0);
	CHECK(lookup(&f, TEST_ROOT, "w", NULL) == 0);
	CHECK_INT_EQ(f.error, -EIO);
	fx_free(&f);
}

static void test_handle_limit(void)
{
	struct fx f;
	uint64_t node, fh = 0;
	unsigned int opened = 0;
	struct rlimit limit;

	/* the table's limit, not the process's, must be what stops it */
	if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
		limit.rlim_cur = limit.rlim_max;
		setrlimit(RLIMIT_NOFILE, &limit);
	}
	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	node = mkdir_node(&f, TEST_ROOT, "many");
	for (unsigned int i = 0; i < FUSE_SERVER_MAX_HANDLES + 2; i++) {
		struct fuse_open_in in = { .flags = O_RDONLY | O_DIRECTORY };

		call(&f, FUSE_OPENDIR, node, &in, sizeof(in), NULL, 0, NULL, 0);
		fh = f.error ? 0 : ((struct fuse_open_out *)payload(&f))->fh;
		if (!fh)
			break;
		opened++;
	}
	CHECK_INT_EQ(opened, FUSE_SERVER_MAX_HANDLES);
	CHECK_INT_EQ(f.error, -ENFILE);
	fx_free(&f);
}

/* Open fds of this process. */
static unsigned int open_fd_count(void)
{
	DIR *dir = opendir("/proc/self/fd");
	unsigned int count = 0;

	while (dir && readdir(dir))
		count++;
	if (dir)
		closedir(dir);
	return count;
}

/*
 * Files opened without an OPEN are read through their node's cached fd: more files than the
 * cache holds all read back (an evicted fd reopens), the cache stays bounded, and forgetting
 * the nodes closes every fd they held.
 */
static void test_io_fd_cache(void)
{
	struct fx f;
	struct rlimit limit;
	uint64_t nodes[TEST_IO_FILES];
	char name[TEST_NAME_MAX];
	unsigned int before, bad = 0;

	if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
		limit.rlim_cur = limit.rlim_max;
		setrlimit(RLIMIT_NOFILE, &limit);
	}
	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	before = open_fd_count();
	for (unsigned int i = 0; i < TEST_IO_FILES; i++) {
		uint64_t fh = 0;

		snprintf(name, sizeof(name), "f%u", i);
		nodes[i] = create(&f, TEST_ROOT, name, O_WRONLY | O_CREAT, &fh);
		write_fh(&f, nodes[i], fh, 0, name);
		bad += f.error != 0 || fh != 0;
	}
	for (unsigned int i = 0; i < TEST_IO_FILES; i++) {
		snprintf(name, sizeof(name), "f%u", i);
		bad += strcmp(read_fh(&f, nodes[i], 0), name) != 0;
	}
	CHECK_INT_EQ(bad, 0);
	/* one O_PATH fd per node, at most the cache's I/O fds besides */
	CHECK(open_fd_count() <= before + TEST_IO_FILES + TEST_IO_FDS_MAX);
	CHECK(open_fd_count() > before + TEST_IO_FILES);
	for (unsigned int i = 0; i < TEST_IO_FILES; i++) {
		struct fuse_forget_in forget = { .nlookup = 1 };

		call(&f, FUSE_FORGET, nodes[i], &forget, sizeof(forget), NULL, 0, NULL, 0);
	}
	CHECK_INT_EQ(open_fd_count(), before);
	fx_free(&f);
}

/*
 * A full cache of I/O fds closes the least recently used node's: a file written again just
 * before the cache overflows keeps its fd, and the file used least recently loses its.
 */
static void test_io_fd_cache_evicts_least_recent(void)
{
	char name[TEST_NAME_MAX], path[PATH_MAX];
	uint64_t first = 0, fh = 0;
	struct rlimit limit;
	unsigned int bad = 0;
	struct fx f;

	if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
		limit.rlim_cur = limit.rlim_max;
		setrlimit(RLIMIT_NOFILE, &limit);
	}
	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	for (unsigned int i = 0; i < TEST_IO_FDS_MAX; i++) {
		uint64_t node;

		snprintf(name, sizeof(name), "lru%u", i);
		node = create(&f, TEST_ROOT, name, O_WRONLY | O_CREAT, &fh);
		bad += node == 0;
		if (i == 0)
			first = node;
	}
	CHECK_INT_EQ(bad, 0);
	write_fh(&f, first, 0, 0, "again"); /* lru0 is now the most recently used */
	CHECK_INT_EQ(f.error, 0);
	CHECK(create(&f, TEST_ROOT, "overflow", O_WRONLY | O_CREAT, &fh) != 0);
	host_path(&f, "lru0", path);
	CHECK_INT_EQ(io_fds_on(path), 1);
	host_path(&f, "lru1", path);
	CHECK_INT_EQ(io_fds_on(path), 0);
	host_path(&f, "overflow", path);
	CHECK_INT_EQ(io_fds_on(path), 1);
	fx_free(&f);
}

/*
 * With few fds left, the cached I/O fds give way to nodes: every file is created, written and
 * read back although a node and its write fd each would not fit.
 */
static void test_io_fds_yield_to_nodes(void)
{
	struct rlimit saved, low;
	uint64_t nodes[TEST_FEW_FILES];
	char name[TEST_NAME_MAX];
	unsigned int bad = 0;
	struct fx f;

	CHECK_INT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	low = saved;
	low.rlim_cur = open_fd_count() + TEST_FEW_FDS;
	CHECK_INT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
	for (unsigned int i = 0; i < TEST_FEW_FILES; i++) {
		uint64_t fh = 0;

		snprintf(name, sizeof(name), "few%u", i);
		nodes[i] = create(&f, TEST_ROOT, name, O_WRONLY | O_CREAT, &fh);
		bad += f.error != 0;
		write_fh(&f, nodes[i], fh, 0, name);
		bad += f.error != 0;
	}
	for (unsigned int i = 0; i < TEST_FEW_FILES; i++) {
		snprintf(name, sizeof(name), "few%u", i);
		bad += strcmp(read_fh(&f, nodes[i], 0), name) != 0;
	}
	CHECK_INT_EQ(bad, 0);
	CHECK_INT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
	fx_free(&f);
}

/* OPENDIRs of node on f until one is refused: how many were opened (the handles stay open). */
static unsigned int open_dirs_until_refused(struct fx *f, uint64_t node)
{
	unsigned int opened = 0;

	for (unsigned int i = 0; i < FUSE_SERVER_MAX_HANDLES + 1; i++) {
		struct fuse_open_in in = { .flags = O_RDONLY | O_DIRECTORY };

		call(f, FUSE_OPENDIR, node, &in, sizeof(in), NULL, 0, NULL, 0);
		if (f->error)
			break;
		opened++;
	}
	return opened;
}

/* LOOKUPs of the files parted0..parted(TEST_PARTED_FILES - 1) in f's root: how many failed. */
static unsigned int lookup_parted_files(struct fx *f)
{
	char name[TEST_NAME_MAX];
	unsigned int bad = 0;

	for (unsigned int i = 0; i < TEST_PARTED_FILES; i++) {
		snprintf(name, sizeof(name), "parted%u", i);
		bad += lookup(f, TEST_ROOT, name, NULL) == 0;
	}
	return bad;
}

/*
 * The shares of a process part its open-file limit between them: with two alive, each holds
 * at most half of what one alone may (nodes' fds and open handles a quarter of the limit in
 * all), and when one goes the other may hold the whole part again. However many shares a VM
 * has, they leave the rest of its fds to its other devices.
 */
static void test_shares_part_the_fd_limit(void)
{
	char name[TEST_NAME_MAX];
	struct rlimit saved, parted;
	struct fx one, two;
	uint64_t dir;

	CHECK_INT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
	parted = saved;
	parted.rlim_cur = TEST_PARTED_FD_LIMIT;
	CHECK_INT_EQ(setrlimit(RLIMIT_NOFILE, &parted), 0);
	CHECK_INT_EQ(fx_init(&one, FUSE_SERVER_READ_WRITE), 0);
	CHECK_INT_EQ(fx_init(&two, FUSE_SERVER_READ_WRITE), 0);
	for (unsigned int i = 0; i < TEST_PARTED_FILES; i++) {
		snprintf(name, sizeof(name), "parted%u", i);
		host_write(&one, name, name);
	}
	dir = mkdir_node(&one, TEST_ROOT, "dirs");
	CHECK(dir != 0);

	CHECK_INT_EQ(lookup_parted_files(&one), 0);
	CHECK_INT_EQ(fuse_server_node_fd_count(one.s), TEST_PARTED_QUARTER / 2u);
	CHECK_INT_EQ(open_dirs_until_refused(&one, dir), TEST_PARTED_QUARTER / 2u);
	CHECK_INT_EQ(one.error, -ENFILE);

	fx_free(&two);
	CHECK_INT_EQ(lookup_parted_files(&one), 0);
	CHECK(fuse_server_node_fd_count(one.s) > TEST_PARTED_QUARTER / 2u);
	CHECK(fuse_server_node_fd_count(one.s) <= TEST_PARTED_QUARTER);
	CHECK_INT_EQ(open_dirs_until_refused(&one, dir), TEST_PARTED_QUARTER / 2u);
	CHECK_INT_EQ(one.error, -ENFILE);
	CHECK_INT_EQ(fuse_server_handle_count(one.s), TEST_PARTED_QUARTER);
	fx_free(&one);
	CHECK_INT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

static void getattr_node(struct fx *f, uint64_t node)
{
	struct fuse_getattr_in in = { 0 };

	call(f, FUSE_GETATTR, node, &in, sizeof(in), NULL, 0, NULL, 0);
}

/*
 * More nodes than the server may hold fds for: every file still reads its own bytes through
 * a node whose fd was closed (reopened from its parent, a deep chain too), a node the guest
 * renamed keeps working, one the host renamed or deleted answers ESTALE until the guest looks
 * the new name up (the same node id), and the fds held never pass the budget.
 */
static void test_nodes_beyond_fd_budget(void)
{
	static uint64_t files[TEST_BUDGET_DIRS][TEST_BUDGET_FILES];
	uint64_t dirs[TEST_BUDGET_DIRS], chain = TEST_ROOT, moved, deep;
	char name[TEST_NAME_MAX], text[TEST_NAME_MAX], path[PATH_MAX], to[PATH_MAX];
	unsigned int bad = 0;
	struct fx f;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	fuse_server_set_node_fd_budget(f.s, TEST_BUDGET_FDS);
	for (unsigned int d = 0; d < TEST_BUDGET_DIRS; d++) {
		snprintf(name, sizeof(name), "d%u", d);
		host_path(&f, name, path);
		CHECK_INT_EQ(mkdir(path, TEST_MODE_DIR), 0);
		for (unsigned int i = 0; i < TEST_BUDGET_FILES; i++) {
			snprintf(name, sizeof(name), "d%u/f%u", d, i);
			host_write(&f, name, name);
		}
	}
	for (unsigned int d = 0; d < TEST_BUDGET_DIRS; d++) {
		snprintf(name, sizeof(name), "d%u", d);
		dirs[d] = lookup(&f, TEST_ROOT, name, NULL);
		bad += dirs[d] == 0;
		for (unsigned int i = 0; i < TEST_BUDGET_FILES; i++) {
			snprintf(name, sizeof(name), "f%u", i);
			files[d][i] = lookup(&f, dirs[d], name, NULL);
			bad += files[d][i] == 0;
		}
	}
	CHECK_INT_EQ(bad, 0);
	CHECK(fuse_server_inode_count(f.s) > TEST_BUDGET_DIRS * TEST_BUDGET_FILES);
	CHECK(fuse_server_node_fd_count(f.s) <= TEST_BUDGET_FDS);
	for (unsigned int d = 0; d < TEST_BUDGET_DIRS; d++) {
		for (unsigned int i = 0; i < TEST_BUDGET_FILES; i++) {
			snprintf(text, sizeof(text), "d%u/f%u", d, i);
			bad += strcmp(read_fh(&f, files[d][i], 0), text) != 0;
			getattr_node(&f, files[d][i]);
			bad += f.error != 0;
		}
	}
	CHECK_INT_EQ(bad, 0);
	CHECK(fuse_server_node_fd_count(f.s) <= TEST_BUDGET_FDS);

	/* the guest renames a file into another directory: its node follows after eviction */
	{
		struct fuse_rename_in in = { .newdir = dirs[1] };

		call(&f, FUSE_RENAME, dirs[0], &in, sizeof(in), "f0", 3, "guest-moved", 12);
		CHECK_INT_EQ(f.error, 0);
	}
	for (unsigned int i = 1; i < TEST_BUDGET_FILES; i++)
		getattr_node(&f, files[2][i]); /* pushes every other fd out */
	getattr_node(&f, files[0][0]);
	CHECK_INT_EQ(f.error, 0);
	CHECK(lookup(&f, dirs[1], "guest-moved", NULL) == files[0][0]);

	/* the host renames and deletes files behind the server's back */
	host_path(&f, "d3/f5", path);
	host_path(&f, "d3/host-moved", to);
	CHECK_INT_EQ(rename(path, to), 0);
	host_path(&f, "d4/f6", path);
	CHECK_INT_EQ(unlink(path), 0);
	for (unsigned int i = 1; i < TEST_BUDGET_FILES; i++)
		getattr_node(&f, files[2][i]);
	getattr_node(&f, files[3][5]);
	CHECK_INT_EQ(f.error, -ESTALE);
	getattr_node(&f, files[4][6]);
	CHECK_INT_EQ(f.error, -ESTALE);
	CHECK(lookup(&f, dirs[3], "host-moved", NULL) == files[3][5]);
	getattr_node(&f, files[3][5]);
	CHECK_INT_EQ(f.error, 0);
	CHECK_STR_EQ(read_fh(&f, files[3][7], 0), "d3/f7");

	/* a chain deeper than the budget reopens from the root */
	for (unsigned int level = 0; level < TEST_BUDGET_DEPTH; level++)
		chain = mkdir_node(&f, chain, "deep");
	CHECK(chain != 0);
	deep = create(&f, chain, "leaf", O_WRONLY | O_CREAT, &(uint64_t){ 0 });
	write_fh(&f, deep, 0, 0, "deep bytes");
	CHECK_INT_EQ(f.error, 0);
	for (unsigned int i = 1; i < TEST_BUDGET_FILES; i++)
		getattr_node(&f, files[2][i]);
	getattr_node(&f, deep);
	CHECK_INT_EQ(f.error, 0);
	moved = lookup(&f, chain, "leaf", NULL);
	CHECK(moved == deep);
	CHECK(fuse_server_node_fd_count(f.s) <= TEST_BUDGET_FDS);

	/* a parent forgotten before its child stays while the child is reached through it */
	{
		struct fuse_forget_in forget = { .nlookup = 1 };
		size_t before = fuse_server_inode_count(f.s);

		call(&f, FUSE_FORGET, dirs[9], &forget, sizeof(forget), NULL, 0, NULL, 0);
		CHECK_INT_EQ(fuse_server_inode_count(f.s), before);
		for (unsigned int i = 1; i < TEST_BUDGET_FILES; i++)
			getattr_node(&f, files[2][i]);
		CHECK_STR_EQ(read_fh(&f, files[9][0], 0), "d9/f0");
		for (unsigned int i = 0; i < TEST_BUDGET_FILES; i++)
			call(&f, FUSE_FORGET, files[9][i], &forget, sizeof(forget), NULL, 0, NULL, 0);
		CHECK_INT_EQ(fuse_server_inode_count(f.s), before - TEST_BUDGET_FILES - 1);
		dirs[9] = lookup(&f, TEST_ROOT, "d9", NULL); /* again, for the checks that follow */
		CHECK(dirs[9] != 0);
		for (unsigned int i = 0; i < TEST_BUDGET_FILES; i++) {
			snprintf(name, sizeof(name), "f%u", i);
			files[9][i] = lookup(&f, dirs[9], name, NULL);
		}
	}

	/* saved while most fds are closed, restored into a server with the same small budget */
	{
		struct fuse_server *restored;
		struct byte_writer w;
		struct byte_reader r;
		char err[256];

		byte_writer_init(&w);
		fuse_server_save(f.s, &w);
		CHECK(!byte_writer_failed(&w));
		restored = fuse_server_create(f.dir, FUSE_SERVER_READ_WRITE, err, sizeof(err));
		fuse_server_set_node_fd_budget(restored, TEST_BUDGET_FDS);
		byte_reader_init(&r, w.data, w.len);
		CHECK_INT_EQ(fuse_server_restore(restored, &r), 0);
		CHECK(fuse_server_node_fd_count(restored) <= TEST_BUDGET_FDS);
		fuse_server_destroy(f.s);
		f.s = restored;
		byte_writer_free(&w);
	}
	for (unsigned int d = 5; d < TEST_BUDGET_DIRS; d++) {
		for (unsigned int i = 0; i < TEST_BUDGET_FILES; i++) {
			snprintf(text, sizeof(text), "d%u/f%u", d, i);
			bad += strcmp(read_fh(&f, files[d][i], 0), text) != 0;
		}
	}
	CHECK_INT_EQ(bad, 0);
	CHECK_STR_EQ(read_fh(&f, deep, 0), "deep bytes");
	getattr_node(&f, files[4][6]);
	CHECK_INT_EQ(f.error, -ESTALE);
	fx_free(&f);
}

static void test_snapshot_round_trip(void)
{
	struct fx f;
	struct byte_writer w;
	struct byte_reader r;
	struct fuse_server *restored;
	struct fuse_getattr_in getattr = { 0 };
	char err[256], path[PATH_MAX];
	uint64_t dir, file, gone, fh = 0, gone_fh = 0;

	CHECK_INT_EQ(fx_init(&f, FUSE_SERVER_READ_WRITE), 0);
	dir = mkdir_node(&f, TEST_ROOT, "work");
	file = create(&f, dir, "notes", O_RDWR | O_CREAT, &fh);
	write_fh(&f, file, fh, 0, "kept");
	gone = create(&f, TEST_ROOT, "gone", O_RDWR | O_CREAT, &gone_fh);
	byte_writer_init(&w);
	fuse_server_save(f.s, &w);
	CHECK(!byte_writer_failed(&w));
	host_path(&f, "gone", path);
	unlink(path);

	restored = fuse_server_create(f.dir, FUSE_SERVER_READ_WRITE, err, sizeof(err));
	byte_reader_init(&r, w.data, w.len);
	CHECK_INT_EQ(fuse_server_restore(restored, &r), 0);
	CHECK_INT_EQ(byte_reader_finish(&r), 0);
	CHECK_INT_EQ(fuse_server_inode_count(restored), fuse_server_inode_count(f.s));
	CHECK_INT_EQ(fuse_server_handle_count(restored), 0); /* files carry handle 0 */
	fuse_server_destroy(f.s);
	f.s = restored;
	/* the same node ids work for I/O, the directory's children too */
	CHECK_STR_EQ(read_fh(&f, file, fh), "kept");
	write_fh(&f, file, fh, 4, "+more");
	CHECK_INT_EQ(f.error, 0);
	CHECK_STR_EQ(host_read(&f, "work/notes"), "kept+more");
	CHECK(lookup(&f, dir, "notes", NULL) == file);
	/* the vanished file answers ESTALE, by node and for I/O */
	call(&f, FUSE_GETATTR, gone, &getattr, sizeof(getattr), NULL, 0, NULL, 0);
	CHECK_INT_EQ(f.error, -ESTALE);
	read_fh(&f, gone, gone_fh);
	CHECK_INT_EQ(f.error, -ESTALE);
	/* new nodes do not take a restored node's id */
	{
		uint64_t fresh = create(&f, TEST_ROOT, "fresh", O_RDWR | O_CREAT, &fh);

		CHECK(fresh != 0 && fresh != gone && fresh != file && fresh != dir);
	}
	/* malformed state: every truncation is refused, never a crash */
	for (size_t cut = 0; cut < w.len; cut += 7) {
		struct fuse_server *s = fuse_server_create(f.dir, FUSE_SERVER_READ_WRITE, err,
							   sizeof(err));

		byte_reader_init(&r, w.data, cut);
		CHECK(fuse_server_restore(s, &r) < 0 || byte_reader_finish(&r) < 0);
		fuse_server_destroy(s);
	}
	byte_writer_free(&w);
	fx_free(&f);
}

/* The device: the tag in config space, and a request served through the queues. */
static void test_device_queues(void)
{
	struct fake_guest guest;
	struct fs_device *dev;
	struct fs_device_config cfg = { .tag = "voidbox0", .access = FUSE_SERVER_READ_WRITE,
					.worker_mode = FS_WORKER_CALLER };
	struct fuse_in_header hdr = { .opcode = FUSE_INIT, .unique = 1 };
	struct fuse_init_in init = { .major = FUSE_KERNEL_VERSION, .minor = 36 };
	struct fuse_out_header reply;
	char dir[] = "/tmp/voidbox-fs-dev-XXXXXX", err[256], tag[FS_TAG_LEN + 1] = "";
	const uint64_t in_gpa = 0x100000, out_gpa = 0x110000;
	uint32_t id = 0, used = 0, queues = 0;
	struct rlimit limit;

	CHECK(mkdtemp(dir) != NULL);
	CHECK_INT_EQ(fake_guest_init(&guest), 0);
	/* a share raises the soft open-file limit to the hard one (each inode is an fd) */
	CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0);
	limit.rlim_cur = TEST_LOW_FD_LIMIT < limit.rlim_max ? TEST_LOW_FD_LIMIT : limit.rlim_max;
	CHECK(setrlimit(RLIMIT_NOFILE, &limit) == 0);
	cfg.host_dir = dir;
	cfg.mem = &guest.mem;
	cfg.irq = fake_guest_irq(&guest);
	dev = fs_device_create(&cfg, err, sizeof(err));
	CHECK(dev != NULL);
	if (!dev)
		return;
	CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur == limit.rlim_max);
	CHECK_INT_EQ(virtio_mmio_read32(fs_device_transport(dev), VIRTIO_MMIO_DEVICE_ID),
		     VIRTIO_ID_FS);
	for (unsigned int i = 0; i < FS_TAG_LEN; i += 4) {
		uint32_t word = virtio_mmio_read32(fs_device_transport(dev), VIRTIO_MMIO_CONFIG + i);

		memcpy(tag + i, &word, 4);
	}
	queues = virtio_mmio_read32(fs_device_transport(dev), VIRTIO_MMIO_CONFIG + FS_TAG_LEN);
	CHECK_STR_EQ(tag, "voidbox0");
	CHECK_INT_EQ(queues, 1);
	/* room for a 1 MiB request's pages and headers in one chain */
	virtio_mmio_write32(fs_device_transport(dev), VIRTIO_MMIO_QUEUE_SEL, FS_QUEUE_REQUEST);
	CHECK_INT_EQ(virtio_mmio_read32(fs_device_transport(dev), VIRTIO_MMIO_QUEUE_NUM_MAX),
		     TEST_FS_QUEUE_SIZE);
	/* no shared memory region (DAX): the guest driver must see length -1, not 0 */
	virtio_mmio_write32(fs_device_transport(dev), VIRTIO_MMIO_SHM_SEL, 0);
	CHECK(virtio_mmio_read32(fs_device_transport(dev), VIRTIO_MMIO_SHM_LEN_LOW) == UINT32_MAX);
	CHECK(virtio_mmio_read32(fs_device_transport(dev), VIRTIO_MMIO_SHM_LEN_HIGH) ==
	      UINT32_MAX);
	CHECK(fake_guest_setup(&guest, fs_device_transport(dev), FS_QUEUE_COUNT, ~0ull) &
	      VIRTIO_STATUS_DRIVER_OK);
	hdr.len = sizeof(hdr) + sizeof(init);
	memcpy(fake_guest_host(&guest, in_gpa), &hdr, sizeof(hdr));
	memcpy(fake_guest_host(&guest, in_gpa + sizeof(hdr)), &init, sizeof(init));
	fake_guest_set_desc(&guest, FS_QUEUE_REQUEST, 0, in_gpa, hdr.len, VIRTQ_DESC_F_NEXT, 1);
	fake_guest_set_desc(&guest, FS_QUEUE_REQUEST, 1, out_gpa, 4096, VIRTQ_DESC_F_WRITE, 0);
	fake_guest_publish(&guest, FS_QUEUE_REQUEST, 0);
	fake_guest_notify(&guest, FS_QUEUE_REQUEST);
	CHECK_INT_EQ(fs_device_poll(dev), 1);
	CHECK(fake_guest_pop_used(&guest, FS_QUEUE_REQUEST, &id, &used));
	CHECK_INT_EQ(used, sizeof(reply) + sizeof(struct fuse_init_out));
	memcpy(&reply, fake_guest_host(&guest, out_gpa), sizeof(reply));
	CHECK_INT_EQ(reply.error, 0);
	/* a chain with no room for a reply is completed with nothing written */
	fake_guest_set_desc(&guest, FS_QUEUE_REQUEST, 2, in_gpa, hdr.len, 0, 0);
	fake_guest_publish(&guest, FS_QUEUE_REQUEST, 2);
	CHECK_INT_EQ(fs_device_poll(dev), 1);
	CHECK(fake_guest_pop_used(&guest, FS_QUEUE_REQUEST, &id, &used));
	CHECK_INT_EQ(used, 0);
	CHECK(!virtio_mmio_is_broken(fs_device_transport(dev)));
	fs_device_destroy(dev);
	fake_guest_free(&guest);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_init_negotiates);
	RUN_TEST(test_create_write_read);
	RUN_TEST(test_write_across_segments);
	RUN_TEST(test_write_size_mismatch);
	RUN_TEST(test_read_into_segments);
	RUN_TEST(test_full_size_write_and_read);
	RUN_TEST(test_directory_operations);
	RUN_TEST(test_operations_under_share_filter);
	RUN_SEPARATE_TEST(test_operations_under_landlock);
	RUN_TEST(test_mknod_xattr_statfs);
	RUN_TEST(test_readdir_and_forget);
	RUN_TEST(test_readdir_while_removing);
	RUN_TEST(test_confinement);
	RUN_TEST(test_read_only_share);
	RUN_TEST(test_cache_hints);
	RUN_TEST(test_create_write_only_direct);
	RUN_TEST(test_writes_always_move_mtime);
	RUN_TEST(test_kill_suidgid);
	RUN_TEST(test_guest_modes_never_setuid);
	RUN_TEST(test_create_refuses_special_files);
	RUN_TEST(test_malformed_requests);
	RUN_TEST(test_handle_limit);
	RUN_TEST(test_io_fd_cache);
	RUN_TEST(test_io_fd_cache_evicts_least_recent);
	RUN_TEST(test_io_fds_yield_to_nodes);
	RUN_TEST(test_nodes_beyond_fd_budget);
	RUN_TEST(test_shares_part_the_fd_limit);
	RUN_TEST(test_snapshot_round_trip);
	RUN_TEST(test_device_queues);
	return harness_finish();
}
