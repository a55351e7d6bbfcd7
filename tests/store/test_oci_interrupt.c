/*
 * An image pull killed outright, as Ctrl-C or a CI timeout kills it: nothing of the pull's
 * own cleanup runs, so whatever it had half-written stays on disk until something else
 * removes it. A registry written here serves one small image on loopback; a child process
 * pulls it into a scratch cache and is sent SIGKILL the moment a temporary appears (the
 * layer half downloaded, or the rootfs being built). The next pull, and a prune, must leave
 * no temporary of the killed one behind and must publish a whole image, while a temporary
 * of a pull that still runs is left alone. An `image rm` killed after it forgot the
 * reference and before it deleted the rootfs leaves an image directory nothing names, which
 * prune must remove.
 *
 * Pulls, prunes and removals running at once, each in a process of its own as voidbox runs
 * them: a prune started while a pull waits for its layer (its manifest and config published,
 * named by no reference yet) waits for the pull, saying so, and deletes none of it; an
 * `image rm` waits for a command that has looked the image up and not yet opened its rootfs,
 * and the file that command then opened stays readable; two pulls of one reference let go at
 * the same moment both succeed.
 */
#include <archive.h>
#include <archive_entry.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "dir_entries.h"
#include "harness.h"
#include "http_request_head.h"
#include "loopback_port.h"
#include "store/oci_blobs.h"
#include "store/oci_image.h"
#include "store/oci_pull.h"
#include "store/oci_rootfs.h"
#include "store/store_fs.h"

#define TEST_ERR_MAX 1024
#define TEST_REF_MAX 128
#define TEST_DIR_MAX 256 /* the scratch cache; paths below it fit TEST_PATH_MAX */
#define TEST_PATH_MAX 512
#define TEST_NAME_MAX (NAME_MAX + 1)
#define TEST_REQUEST_MAX 8192
#define TEST_BODY_MAX 4096
#define TEST_LAYER_MAX (4u << 20)
#define TEST_LAYER_FILE_BYTES (1u << 20)
#define TEST_FILE_MODE 0644
#define TEST_DIR_MODE 0755
#define TEST_BACKLOG 8
#define TEST_POLL_NS 1000000L
#define TEST_WAIT_POLLS 20000 /* 20 s of 1 ms polls */
#define TEST_TIMEOUT_S 30u
/* Longer than wait_until's 20 s, so only the cancel can end a stalled request in time. */
#define TEST_CANCEL_REQUEST_TIMEOUT_S 120u
/* How long a process that should be waiting for the store lock is watched doing so. */
#define TEST_STILL_WAITING_NS 200000000L
/* Rounds of two pulls of one reference let go together (the first builds the rootfs). */
#define TEST_TWIN_PULL_ROUNDS 12
#define TEST_TWIN_PULLS 2
#define TEST_LOG_MAX 4096
#define TEST_EXT4_MAGIC_OFFSET 1080
#define TEST_EXT4_MAGIC 0xEF53
#define TEST_WAITING_FOR_PULL "waiting for a pull in progress"
#define TEST_CONFIG "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\"}}"
#define TEST_MEDIA_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define TEST_MEDIA_CONFIG "application/vnd.oci.image.config.v1+json"
#define TEST_MEDIA_LAYER "application/vnd.oci.image.layer.v1.tar"

struct test_registry {
	int listen_fd;
	uint16_t port;
	bool stall_layer; /* send half the layer, then hold the connection until stopping */
	volatile bool hold_layer; /* answer a layer request only once this is false again */
	volatile bool layer_requested;
	volatile bool stopping;
	pthread_t thread;
	unsigned char *layer;
	size_t layer_len;
	char layer_digest[OCI_DIGEST_LEN + 1];
	char config_digest[OCI_DIGEST_LEN + 1];
	char manifest[TEST_BODY_MAX];
	char manifest_digest[OCI_DIGEST_LEN + 1];
};

static bool send_all(int fd, const void *data, size_t len)
{
	return send(fd, data, len, MSG_NOSIGNAL) == (ssize_t)len;
}

static void send_answer(int fd, const char *type, const void *body, size_t len, size_t sent)
{
	char head[TEST_BODY_MAX];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n", type, len);

	if (send_all(fd, head, (size_t)n))
		send_all(fd, body, sent);
}

static void registry_answer(struct test_registry *registry, int fd, const char *request)
{
	struct timespec poll = { .tv_nsec = TEST_POLL_NS };

	if (strstr(request, "/manifests/")) {
		send_answer(fd, TEST_MEDIA_MANIFEST, registry->manifest, strlen(registry->manifest),
			    strlen(registry->manifest));
	} else if (strstr(request, registry->config_digest)) {
		send_answer(fd, "application/octet-stream", TEST_CONFIG, strlen(TEST_CONFIG),
			    strlen(TEST_CONFIG));
	} else if (strstr(request, registry->layer_digest)) {
		registry->layer_requested = true;
		while (registry->hold_layer && !registry->stopping)
			nanosleep(&poll, NULL);
		send_answer(fd, "application/octet-stream", registry->layer, registry->layer_len,
			    registry->stall_layer ? registry->layer_len / 2 : registry->layer_len);
		while (registry->stall_layer && !registry->stopping)
			nanosleep(&poll, NULL);
	} else {
		send_all(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			 strlen("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
				"Connection: close\r\n\r\n"));
	}
}

static void *registry_run(void *opaque)
{
	struct test_registry *registry = opaque;

	while (!registry->stopping) {
		char request[TEST_REQUEST_MAX];
		int fd = accept(registry->listen_fd, NULL, NULL);

		if (fd < 0)
			break;
		http_request_head_read(fd, request, sizeof(request));
		registry_answer(registry, fd, request);
		close(fd);
	}
	return NULL;
}

/* An uncompressed layer: a directory and a file of TEST_LAYER_FILE_BYTES. */
static void make_layer(struct test_registry *registry)
{
	struct archive *a = archive_write_new();
	struct archive_entry *entry = archive_entry_new();
	char *data = calloc(1, TEST_LAYER_FILE_BYTES);
	size_t used = 0;

	registry->layer = malloc(TEST_LAYER_MAX);
	if (!a || !entry || !data || !registry->layer ||
	    archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_open_memory(a, registry->layer, TEST_LAYER_MAX, &used) != ARCHIVE_OK)
		harness_fail_setup("cannot start the test layer");
	memset(data, 'v', TEST_LAYER_FILE_BYTES);
	archive_entry_set_pathname(entry, "etc");
	archive_entry_set_filetype(entry, AE_IFDIR);
	archive_entry_set_perm(entry, TEST_DIR_MODE);
	archive_write_header(a, entry);
	archive_entry_clear(entry);
	archive_entry_set_pathname(entry, "etc/payload");
	archive_entry_set_filetype(entry, AE_IFREG);
	archive_entry_set_perm(entry, TEST_FILE_MODE);
	archive_entry_set_size(entry, TEST_LAYER_FILE_BYTES);
	if (archive_write_header(a, entry) != ARCHIVE_OK ||
	    archive_write_data(a, data, TEST_LAYER_FILE_BYTES) != TEST_LAYER_FILE_BYTES ||
	    archive_write_close(a) != ARCHIVE_OK)
		harness_fail_setup("cannot write the test layer");
	archive_entry_free(entry);
	archive_write_free(a);
	free(data);
	registry->layer_len = used;
}

static void registry_start(struct test_registry *registry)
{
	memset(registry, 0, sizeof(*registry));
	make_layer(registry);
	if (oci_digest_of(registry->layer, registry->layer_len, registry->layer_digest) < 0 ||
	    oci_digest_of(TEST_CONFIG, strlen(TEST_CONFIG), registry->config_digest) < 0)
		harness_fail_setup("cannot hash the test image");
	snprintf(registry->manifest, sizeof(registry->manifest),
		 "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"%s\","
		 "\"digest\":\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":\"%s\","
		 "\"digest\":\"%s\",\"size\":%zu}]}",
		 TEST_MEDIA_MANIFEST, TEST_MEDIA_CONFIG, registry->config_digest,
		 strlen(TEST_CONFIG), TEST_MEDIA_LAYER, registry->layer_digest,
		 registry->layer_len);
	if (oci_digest_of(registry->manifest, strlen(registry->manifest),
			  registry->manifest_digest) < 0)
		harness_fail_setup("cannot hash the test manifest");
	registry->listen_fd = loopback_port_bind(SOCK_STREAM, &registry->port);
	if (registry->listen_fd < 0 || listen(registry->listen_fd, TEST_BACKLOG) < 0)
		harness_fail_setup("cannot listen on loopback");
	if (pthread_create(&registry->thread, NULL, registry_run, registry) != 0)
		harness_fail_setup("cannot start the registry thread");
}

static void registry_stop(struct test_registry *registry)
{
	registry->stopping = true;
	shutdown(registry->listen_fd, SHUT_RDWR);
	pthread_join(registry->thread, NULL);
	close(registry->listen_fd);
	free(registry->layer);
}

/* The reference of the registry's one image. */
static void test_ref(const struct test_registry *registry, char ref[TEST_REF_MAX])
{
	snprintf(ref, TEST_REF_MAX, "127.0.0.1:%d/voidbox/test:1", registry->port);
}

/* Pulls the registry's image with options (err holds TEST_ERR_MAX bytes). */
static int pull_with(const struct test_registry *registry,
		     const struct oci_pull_options *options, char *err)
{
	struct oci_image_info info;
	char ref[TEST_REF_MAX];

	test_ref(registry, ref);
	return oci_image_pull(ref, options, &info, err, TEST_ERR_MAX);
}

static int pull(const struct test_registry *registry, const char *oci_dir, char *err)
{
	struct oci_pull_options options = { .oci_dir = oci_dir, .progress = OCI_PROGRESS_NONE,
					    .request_timeout_s = TEST_TIMEOUT_S };

	return pull_with(registry, &options, err);
}

/* Whether dir holds an entry whose name starts with prefix (into found, when given). */
static bool dir_has(const char *dir, const char *prefix, char *found, size_t found_len)
{
	DIR *handle = opendir(dir);
	struct dirent *entry;
	bool has = false;

	if (!handle)
		return false;
	while (!has && (entry = readdir(handle)) != NULL) {
		if (strncmp(entry->d_name, prefix, strlen(prefix)) != 0)
			continue;
		has = true;
		if (found)
			snprintf(found, found_len, "%s", entry->d_name);
	}
	closedir(handle);
	return has;
}

/* Runs a pull in a child and SIGKILLs it once dir holds an entry starting with prefix. */
static bool pull_killed_when(const struct test_registry *registry, const char *oci_dir,
			     const char *dir, const char *prefix)
{
	struct timespec poll = { .tv_nsec = TEST_POLL_NS };
	bool appeared = false;
	int status;
	pid_t pid = fork();

	if (pid < 0)
		harness_fail_setup("cannot fork the pull");
	if (pid == 0) {
		char err[TEST_ERR_MAX];

		_exit(pull(registry, oci_dir, err) == 0 ? 0 : 1);
	}
	for (int i = 0; i < TEST_WAIT_POLLS && !appeared; i++) {
		/*
		 * with the layer stalled, only once it was asked for: the manifest's and the
		 * config's partial blobs come and go before it, and one seen then may be gone
		 * (renamed whole) by the kill
		 */
		appeared = (!registry->stall_layer || registry->layer_requested) &&
			   dir_has(dir, prefix, NULL, 0);
		if (!appeared)
			nanosleep(&poll, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return appeared;
}

struct test_cache {
	char oci_dir[TEST_DIR_MAX];
	char blobs[TEST_PATH_MAX];
	char tmp[TEST_PATH_MAX];
	char image_dir[TEST_PATH_MAX];
	char rootfs_tmp_prefix[TEST_NAME_MAX];
};

static void cache_make(struct test_cache *cache, const struct test_registry *registry)
{
	char tmpl[] = "/tmp/voidbox-test-oci-interrupt-XXXXXX";

	if (!mkdtemp(tmpl))
		harness_fail_setup("cannot make a scratch cache");
	snprintf(cache->oci_dir, sizeof(cache->oci_dir), "%s/oci", tmpl);
	snprintf(cache->blobs, sizeof(cache->blobs), "%s/%s", cache->oci_dir, OCI_BLOBS_SUBDIR);
	snprintf(cache->tmp, sizeof(cache->tmp), "%s/tmp", cache->oci_dir);
	snprintf(cache->image_dir, sizeof(cache->image_dir), "%s/images/%s", cache->oci_dir,
		 registry->manifest_digest + strlen(OCI_DIGEST_ALGORITHM));
	snprintf(cache->rootfs_tmp_prefix, sizeof(cache->rootfs_tmp_prefix), "%s%s",
		 OCI_IMAGE_ROOTFS_FILE, OCI_ROOTFS_TMP_SUFFIX);
}

static void cache_remove(struct test_cache *cache)
{
	*strrchr(cache->oci_dir, '/') = '\0';
	store_remove_tree(cache->oci_dir);
}

/* Nothing a pull writes only for a while: no partial blob, scratch tree or unfinished rootfs. */
static void check_no_temporaries(const struct test_cache *cache)
{
	CHECK(!dir_has(cache->blobs, OCI_BLOBS_TMP_PREFIX, NULL, 0));
	CHECK(!dir_has(cache->tmp, "unpack-", NULL, 0));
	CHECK(!dir_has(cache->image_dir, cache->rootfs_tmp_prefix, NULL, 0));
}

static void check_whole_image(const struct test_cache *cache)
{
	struct oci_image_info *images = NULL;
	char err[TEST_ERR_MAX] = "", rootfs[PATH_MAX];
	size_t count = 0;
	struct stat st;

	snprintf(rootfs, sizeof(rootfs), "%s/%s", cache->image_dir, OCI_IMAGE_ROOTFS_FILE);
	CHECK(stat(rootfs, &st) == 0 && st.st_size > 0);
	CHECK_INT_EQ(oci_image_list(cache->oci_dir, &images, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ((int)count, 1);
	free(images);
}

static void test_pull_killed_mid_download_leaves_nothing(void)
{
	struct test_registry registry;
	struct test_cache cache;
	char err[TEST_ERR_MAX] = "";

	registry_start(&registry);
	cache_make(&cache, &registry);
	registry.stall_layer = true;
	CHECK(pull_killed_when(&registry, cache.oci_dir, cache.blobs, OCI_BLOBS_TMP_PREFIX));
	registry.stall_layer = false;
	CHECK(dir_has(cache.blobs, OCI_BLOBS_TMP_PREFIX, NULL, 0));

	CHECK_INT_EQ(pull(&registry, cache.oci_dir, err), 0);
	if (err[0])
		fprintf(stderr, "  the pull: %s\n", err);
	check_no_temporaries(&cache);
	check_whole_image(&cache);
	cache_remove(&cache);
	registry_stop(&registry);
}

/* A pid that no process has any more: a child's, once it has been reaped. */
static pid_t gone_pid(void)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		harness_fail_setup("cannot fork");
	if (pid == 0)
		_exit(0);
	waitpid(pid, &status, 0);
	return pid;
}

/* Creates path as an empty file (directory false) or a directory holding one (true). */
static void make_temporary(const char *path, bool directory)
{
	char inner[2 * TEST_PATH_MAX];
	FILE *file;

	if (directory) {
		CHECK_INT_EQ(mkdir(path, TEST_DIR_MODE), 0);
		snprintf(inner, sizeof(inner), "%s/etc", path);
	} else {
		snprintf(inner, sizeof(inner), "%s", path);
	}
	file = fopen(inner, "w");
	CHECK(file != NULL);
	if (file)
		fclose(file);
}

/*
 * What a pull killed while mkfs.ext4 built its rootfs leaves (the unfinished rootfs and the
 * scratch tree, each named with its pid) is removed by the next pull, and the same things of
 * a running pull (this process's pid) are left alone. The kill itself is the mid-download
 * test's; mkfs.ext4 on a small tree runs for a few milliseconds, too short a window to kill
 * it in reliably, so the leftovers are made here as that pull would have named them.
 */
static void test_pull_sweeps_a_killed_rootfs_build(void)
{
	struct test_registry registry;
	struct test_cache cache;
	char err[TEST_ERR_MAX] = "", path[2 * TEST_PATH_MAX], live[2 * TEST_PATH_MAX];
	pid_t gone = gone_pid();

	registry_start(&registry);
	cache_make(&cache, &registry);
	CHECK_INT_EQ(mkdir(cache.oci_dir, TEST_DIR_MODE), 0);
	CHECK_INT_EQ(mkdir(cache.tmp, TEST_DIR_MODE), 0);
	snprintf(path, sizeof(path), "%s/images", cache.oci_dir);
	CHECK_INT_EQ(mkdir(path, TEST_DIR_MODE), 0);
	CHECK_INT_EQ(mkdir(cache.image_dir, TEST_DIR_MODE), 0);
	snprintf(path, sizeof(path), "%s/%s%ld", cache.image_dir, cache.rootfs_tmp_prefix,
		 (long)gone);
	make_temporary(path, false);
	snprintf(path, sizeof(path), "%s/unpack-%ld-AbCdEf", cache.tmp, (long)gone);
	make_temporary(path, true);
	snprintf(live, sizeof(live), "%s/unpack-%ld-LiVeOn", cache.tmp, (long)getpid());
	make_temporary(live, true);

	CHECK_INT_EQ(pull(&registry, cache.oci_dir, err), 0);
	if (err[0])
		fprintf(stderr, "  the pull: %s\n", err);
	CHECK(access(live, F_OK) == 0);
	store_remove_tree(live);
	check_no_temporaries(&cache);
	check_whole_image(&cache);
	cache_remove(&cache);
	registry_stop(&registry);
}

/* Prune sweeps a killed pull's blob; a blob this process is still writing stays. */
static void test_prune_sweeps_killed_pull_only(void)
{
	struct test_registry registry;
	struct test_cache cache;
	struct oci_image_prune_result pruned;
	struct oci_blob_writer *live = NULL;
	char err[TEST_ERR_MAX] = "", live_name[TEST_NAME_MAX] = "";

	registry_start(&registry);
	cache_make(&cache, &registry);
	registry.stall_layer = true;
	CHECK(pull_killed_when(&registry, cache.oci_dir, cache.blobs, OCI_BLOBS_TMP_PREFIX));
	CHECK(dir_has(cache.blobs, OCI_BLOBS_TMP_PREFIX, live_name, sizeof(live_name)));
	CHECK_INT_EQ(oci_blob_writer_open(cache.oci_dir, registry.layer_digest, &live, err,
					  sizeof(err)), 0);

	CHECK_INT_EQ(oci_image_prune(cache.oci_dir, &pruned, err, sizeof(err)), 0);
	CHECK(!dir_has(cache.blobs, live_name, NULL, 0));
	CHECK(dir_has(cache.blobs, OCI_BLOBS_TMP_PREFIX, NULL, 0)); /* the live writer's */
	oci_blob_writer_abort(live);
	CHECK(!dir_has(cache.blobs, OCI_BLOBS_TMP_PREFIX, NULL, 0));
	cache_remove(&cache);
	registry_stop(&registry);
}

/* Removes every reference file in the cache, as `image rm` does first. */
static void forget_references(const struct test_cache *cache)
{
	char refs[TEST_PATH_MAX], path[TEST_PATH_MAX + TEST_NAME_MAX];
	struct dirent *entry;
	DIR *handle;
	int forgotten = 0;

	snprintf(refs, sizeof(refs), "%s/refs", cache->oci_dir);
	handle = opendir(refs);
	CHECK(handle != NULL);
	while (handle && (entry = readdir(handle)) != NULL) {
		if (entry->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", refs, entry->d_name);
		forgotten += unlink(path) == 0;
	}
	if (handle)
		closedir(handle);
	CHECK_INT_EQ(forgotten, 1);
}

/*
 * `image rm` killed between forgetting the reference and deleting images/<hex>/: prune
 * removes that directory, keeps one a reference names and one a running pull builds in.
 */
static void test_prune_removes_unreferenced_rootfs(void)
{
	struct test_registry registry;
	struct test_cache cache;
	struct oci_image_prune_result pruned;
	char err[TEST_ERR_MAX] = "", rootfs[TEST_PATH_MAX + TEST_NAME_MAX],
	     live_dir[TEST_PATH_MAX], live_tmp[2 * TEST_PATH_MAX];
	struct stat st;
	FILE *file;

	registry_start(&registry);
	cache_make(&cache, &registry);
	CHECK_INT_EQ(pull(&registry, cache.oci_dir, err), 0);
	snprintf(rootfs, sizeof(rootfs), "%s/%s", cache.image_dir, OCI_IMAGE_ROOTFS_FILE);
	CHECK_INT_EQ(stat(rootfs, &st), 0);
	/* another image's directory while a pull (this process) builds its rootfs there */
	snprintf(live_dir, sizeof(live_dir), "%s/images/%064d", cache.oci_dir, 0);
	CHECK_INT_EQ(mkdir(live_dir, TEST_DIR_MODE), 0);
	snprintf(live_tmp, sizeof(live_tmp), "%s/%s%ld", live_dir, cache.rootfs_tmp_prefix,
		 (long)getpid());
	file = fopen(live_tmp, "w");
	CHECK(file != NULL);
	if (file)
		fclose(file);

	/* with its reference, the image stays */
	CHECK_INT_EQ(oci_image_prune(cache.oci_dir, &pruned, err, sizeof(err)), 0);
	CHECK_INT_EQ(stat(rootfs, &st), 0);
	CHECK_INT_EQ((int)pruned.images_removed, 0);

	/* the reference forgotten, the kill came before the rootfs went */
	forget_references(&cache);
	CHECK_INT_EQ(oci_image_prune(cache.oci_dir, &pruned, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "  the prune: %s\n", err);
	CHECK(access(cache.image_dir, F_OK) != 0);
	CHECK_INT_EQ((int)pruned.images_removed, 1);
	CHECK(pruned.freed_bytes >= (uint64_t)st.st_size);
	CHECK_INT_EQ(access(live_tmp, F_OK), 0); /* the running pull's */
	cache_remove(&cache);
	registry_stop(&registry);
}

/* Polls until done(opaque) holds, up to TEST_WAIT_POLLS; whether it did. */
static bool wait_until(bool (*done)(const void *opaque), const void *opaque)
{
	struct timespec poll = { .tv_nsec = TEST_POLL_NS };

	for (int i = 0; i < TEST_WAIT_POLLS; i++) {
		if (done(opaque))
			return true;
		nanosleep(&poll, NULL);
	}
	return done(opaque);
}

static bool layer_was_requested(const void *opaque)
{
	return ((const struct test_registry *)opaque)->layer_requested;
}

/* What the cancelled callback of test_cancel_ends_a_stalled_pull's pulls reads. */
static atomic_bool test_pull_cancel;

static bool test_pull_cancelled(void)
{
	return atomic_load(&test_pull_cancel);
}

struct cancellable_pull {
	const struct test_registry *registry;
	const char *oci_dir;
	int rc;
	char err[TEST_ERR_MAX];
	atomic_bool done;
};

static void *cancellable_pull_run(void *opaque)
{
	struct cancellable_pull *run = opaque;
	struct oci_pull_options options = { .oci_dir = run->oci_dir,
					    .progress = OCI_PROGRESS_NONE,
					    .request_timeout_s = TEST_CANCEL_REQUEST_TIMEOUT_S,
					    .cancelled = test_pull_cancelled };

	run->rc = pull_with(run->registry, &options, run->err);
	atomic_store(&run->done, true);
	return NULL;
}

static bool cancellable_pull_done(const void *opaque)
{
	return atomic_load(&((const struct cancellable_pull *)opaque)->done);
}

/*
 * A cancel (a signal to `voidbox run`) ends a pull whose registry has stopped sending in the
 * middle of a layer, which otherwise only the low-speed cut, a minute later, would end: the
 * pull says it was cancelled, keeps no partial blob and names no image. A pull cancelled
 * before it starts ends the same way, with nothing cached.
 */
static void test_cancel_ends_a_stalled_pull(void)
{
	struct cancellable_pull run = { .rc = 1 };
	struct oci_image_info info;
	struct test_registry registry;
	struct test_cache cache;
	char err[TEST_ERR_MAX] = "", ref[TEST_REF_MAX];
	pthread_t thread;
	int blobs;

	registry_start(&registry);
	cache_make(&cache, &registry);
	test_ref(&registry, ref);
	registry.stall_layer = true;
	atomic_store(&test_pull_cancel, false);
	run.registry = &registry;
	run.oci_dir = cache.oci_dir;
	CHECK(pthread_create(&thread, NULL, cancellable_pull_run, &run) == 0);
	CHECK(wait_until(layer_was_requested, &registry));
	atomic_store(&test_pull_cancel, true);
	CHECK(wait_until(cancellable_pull_done, &run));
	registry.stall_layer = false; /* ends a pull the cancel did not */
	pthread_join(thread, NULL);
	fprintf(stderr, "  the cancelled pull: %s\n", run.err);
	CHECK_INT_EQ(run.rc, -ECANCELED);
	CHECK_STR_EQ(run.err, OCI_PULL_CANCELLED_ERROR);
	check_no_temporaries(&cache);
	CHECK_INT_EQ(oci_image_find(cache.oci_dir, ref, &info, err, sizeof(err)), -ENOENT);

	/* cancelled before it starts: nothing more is asked for, nothing more cached */
	blobs = dir_entry_count(cache.blobs);
	registry.layer_requested = false;
	memset(run.err, 0, sizeof(run.err));
	atomic_store(&run.done, false);
	cancellable_pull_run(&run);
	CHECK_INT_EQ(run.rc, -ECANCELED);
	CHECK_STR_EQ(run.err, OCI_PULL_CANCELLED_ERROR);
	CHECK(!registry.layer_requested);
	CHECK_INT_EQ(dir_entry_count(cache.blobs), blobs);
	atomic_store(&test_pull_cancel, false);
	cache_remove(&cache);
	registry_stop(&registry);
}

enum store_op { STORE_OP_PULL, STORE_OP_PRUNE, STORE_OP_REMOVE };

/*
 * A child that runs op on the test image, its log into log_path (NULL: ours), once start_fd
 * (-1: at once) reads end-of-file. It first closes drop_fd (-1: none): the start pipe's
 * other end, or the descriptor of a store lock this process holds, which a forked child would
 * otherwise hold too (flock belongs to the open file, which fork shares), as voidbox's own
 * children never do: they execute another program, and the descriptor is close-on-exec.
 */
static pid_t store_child(const struct test_registry *registry, const char *oci_dir,
			 enum store_op op, const char *log_path, int start_fd, int drop_fd)
{
	char err[TEST_ERR_MAX] = "", ref[TEST_REF_MAX], byte;
	struct oci_image_prune_result pruned;
	pid_t pid = fork();
	int rc = -1, fd;

	if (pid < 0)
		harness_fail_setup("cannot fork a store process");
	if (pid > 0)
		return pid;
	if (drop_fd >= 0)
		close(drop_fd);
	fd = log_path ? open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, TEST_FILE_MODE)
		      : -1;
	if (fd >= 0)
		dup2(fd, STDERR_FILENO);
	log_set_stream(stderr);
	if (start_fd >= 0 && read(start_fd, &byte, 1) < 0)
		_exit(2);
	test_ref(registry, ref);
	if (op == STORE_OP_PULL)
		rc = pull(registry, oci_dir, err);
	else if (op == STORE_OP_PRUNE)
		rc = oci_image_prune(oci_dir, &pruned, err, sizeof(err));
	else
		rc = oci_image_remove(oci_dir, ref, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "store operation %d: %s\n", (int)op, err);
	_exit(rc == 0 ? 0 : 1);
}

static int child_status(pid_t pid)
{
	int status = 0;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The child's log file, and the process that should be waiting for the lock. */
struct waiter {
	const char *log_path;
	pid_t pid;
};

/* How many times the log file holds text. */
static int log_count(const char *log_path, const char *text)
{
	char log[TEST_LOG_MAX] = "";
	FILE *file = fopen(log_path, "r");
	size_t got = file ? fread(log, 1, sizeof(log) - 1, file) : 0;
	int count = 0;

	if (file)
		fclose(file);
	log[got] = '\0';
	for (const char *at = strstr(log, text); at; at = strstr(at + 1, text))
		count++;
	return count;
}

/* Whether the waiter said it waits, or ended (without waiting: the check after fails). */
static bool waiter_spoke_or_ended(const void *opaque)
{
	const struct waiter *waiter = opaque;
	int status;

	return log_count(waiter->log_path, TEST_WAITING_FOR_PULL) > 0 ||
	       waitpid(waiter->pid, &status, WNOHANG) != 0;
}

/* Whether the waiter still runs after a while: it waits for the lock. */
static bool still_waiting(pid_t pid)
{
	struct timespec pause = { .tv_nsec = TEST_STILL_WAITING_NS };
	int status;

	nanosleep(&pause, NULL);
	return waitpid(pid, &status, WNOHANG) == 0;
}

static void cache_log_path(const struct test_cache *cache, const char *name, char *out,
			   size_t size)
{
	snprintf(out, size, "%.*s/%s", (int)(strrchr(cache->oci_dir, '/') - cache->oci_dir),
		 cache->oci_dir, name);
}

/*
 * A prune while a pull waits for its layer: the manifest and config it published are named
 * by no reference yet. The prune waits for the pull, says so once, and deletes neither; the
 * pull then succeeds and the prune keeps what its reference needs.
 */
static void test_prune_waits_for_a_pull_under_way(void)
{
	struct test_registry registry;
	struct test_cache cache;
	char manifest_blob[TEST_PATH_MAX + TEST_NAME_MAX], log_path[TEST_PATH_MAX];
	struct waiter prune;
	pid_t puller;

	registry_start(&registry);
	cache_make(&cache, &registry);
	cache_log_path(&cache, "prune.log", log_path, sizeof(log_path));
	snprintf(manifest_blob, sizeof(manifest_blob), "%s/%s", cache.blobs,
		 registry.manifest_digest + strlen(OCI_DIGEST_ALGORITHM));
	registry.hold_layer = true;
	puller = store_child(&registry, cache.oci_dir, STORE_OP_PULL, NULL, -1, -1);
	CHECK(wait_until(layer_was_requested, &registry));
	CHECK_INT_EQ(access(manifest_blob, F_OK), 0);

	prune = (struct waiter){ .log_path = log_path };
	prune.pid = store_child(&registry, cache.oci_dir, STORE_OP_PRUNE, log_path, -1, -1);
	CHECK(wait_until(waiter_spoke_or_ended, &prune));
	CHECK(still_waiting(prune.pid));
	CHECK_INT_EQ(access(manifest_blob, F_OK), 0);

	registry.hold_layer = false;
	CHECK_INT_EQ(child_status(puller), 0);
	CHECK_INT_EQ(child_status(prune.pid), 0);
	CHECK_INT_EQ(log_count(log_path, TEST_WAITING_FOR_PULL), 1);
	CHECK_INT_EQ(access(manifest_blob, F_OK), 0);
	check_no_temporaries(&cache);
	check_whole_image(&cache);
	cache_remove(&cache);
	registry_stop(&registry);
}

/* Whether bytes at fd are an ext4 superblock's: the file is still whole. */
static bool is_ext4(int fd)
{
	unsigned char magic[2];

	return pread(fd, magic, sizeof(magic), TEST_EXT4_MAGIC_OFFSET) == (ssize_t)sizeof(magic) &&
	       (magic[0] | magic[1] << 8) == TEST_EXT4_MAGIC;
}

/*
 * `image rm` while a command has looked the image up under the store lock, as --image and a
 * spec's sandbox.image do, and not yet opened the rootfs: rm waits. The command opens it (as
 * its VM does) and lets go; rm then removes the image, and the open file stays readable.
 */
static void test_rm_waits_for_an_image_being_attached(void)
{
	struct test_registry registry;
	struct test_cache cache;
	struct oci_image_lock lock;
	struct oci_image_info info;
	char err[TEST_ERR_MAX] = "", ref[TEST_REF_MAX], log_path[TEST_PATH_MAX];
	struct waiter rm;
	int fd;

	registry_start(&registry);
	cache_make(&cache, &registry);
	cache_log_path(&cache, "rm.log", log_path, sizeof(log_path));
	test_ref(&registry, ref);
	CHECK_INT_EQ(pull(&registry, cache.oci_dir, err), 0);
	CHECK_INT_EQ(oci_image_lock(cache.oci_dir, OCI_IMAGE_LOCK_SHARED, &lock, err,
				    sizeof(err)), 0);
	CHECK(lock.held);
	CHECK_INT_EQ(oci_image_find(cache.oci_dir, ref, &info, err, sizeof(err)), 0);

	rm = (struct waiter){ .log_path = log_path };
	rm.pid = store_child(&registry, cache.oci_dir, STORE_OP_REMOVE, log_path, -1, lock.fd);
	CHECK(wait_until(waiter_spoke_or_ended, &rm));
	CHECK(still_waiting(rm.pid));
	fd = open(info.rootfs_path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	oci_image_unlock(&lock);
	CHECK(!lock.held);

	CHECK_INT_EQ(child_status(rm.pid), 0);
	CHECK(access(info.rootfs_path, F_OK) != 0);
	CHECK_INT_EQ(oci_image_find(cache.oci_dir, ref, &info, err, sizeof(err)), -ENOENT);
	CHECK(fd >= 0 && is_ext4(fd));
	if (fd >= 0)
		close(fd);
	cache_remove(&cache);
	registry_stop(&registry);
}

/*
 * Two pulls of one reference let go at the same moment, round after round (the first builds
 * the rootfs in both, the later ones find it and rewrite the reference): both succeed every
 * time, and they leave one whole image and no temporary.
 */
static void test_two_pulls_of_one_reference(void)
{
	struct test_registry registry;
	struct test_cache cache;
	char refs[TEST_PATH_MAX];

	registry_start(&registry);
	cache_make(&cache, &registry);
	snprintf(refs, sizeof(refs), "%s/refs", cache.oci_dir);
	for (int round = 0; round < TEST_TWIN_PULL_ROUNDS; round++) {
		pid_t pullers[TEST_TWIN_PULLS];
		int start[2], failed = 0;

		if (pipe2(start, O_CLOEXEC) < 0)
			harness_fail_setup("cannot make a pipe");
		for (int i = 0; i < TEST_TWIN_PULLS; i++)
			pullers[i] = store_child(&registry, cache.oci_dir, STORE_OP_PULL, NULL,
						 start[0], start[1]);
		close(start[0]);
		close(start[1]); /* both read end-of-file at once */
		for (int i = 0; i < TEST_TWIN_PULLS; i++)
			failed += child_status(pullers[i]) != 0;
		CHECK_INT_EQ(failed, 0);
		if (failed)
			fprintf(stderr, "  round %d: %d of the pulls failed\n", round, failed);
	}
	CHECK(!dir_has(refs, ".tmp", NULL, 0));
	check_no_temporaries(&cache);
	check_whole_image(&cache);
	cache_remove(&cache);
	registry_stop(&registry);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (access("/sbin/mkfs.ext4", X_OK) < 0 && access("/usr/sbin/mkfs.ext4", X_OK) < 0)
		harness_skip_all("mkfs.ext4 is not installed (apt-get install e2fsprogs)");
	RUN_TEST(test_pull_killed_mid_download_leaves_nothing);
	RUN_TEST(test_cancel_ends_a_stalled_pull);
	RUN_TEST(test_pull_sweeps_a_killed_rootfs_build);
	RUN_TEST(test_prune_sweeps_killed_pull_only);
	RUN_TEST(test_prune_removes_unreferenced_rootfs);
	RUN_TEST(test_prune_waits_for_a_pull_under_way);
	RUN_TEST(test_rm_waits_for_an_image_being_attached);
	RUN_TEST(test_two_pulls_of_one_reference);
	return harness_finish();
}
