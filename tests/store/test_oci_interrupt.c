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
 */
#include <archive.h>
#include <archive_entry.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http_request_head.h"
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
#define TEST_CONFIG "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\"}}"
#define TEST_MEDIA_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define TEST_MEDIA_CONFIG "application/vnd.oci.image.config.v1+json"
#define TEST_MEDIA_LAYER "application/vnd.oci.image.layer.v1.tar"

struct test_registry {
	int listen_fd;
	int port;
	bool stall_layer; /* send half the layer, then hold the connection until stopping */
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
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);

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
	registry->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (registry->listen_fd < 0 ||
	    bind(registry->listen_fd, (struct sockaddr *)&addr, len) < 0 ||
	    listen(registry->listen_fd, TEST_BACKLOG) < 0 ||
	    getsockname(registry->listen_fd, (struct sockaddr *)&addr, &len) < 0)
		harness_fail_setup("cannot listen on loopback");
	registry->port = ntohs(addr.sin_port);
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

static int pull(const struct test_registry *registry, const char *oci_dir, char *err)
{
	struct oci_pull_options options = { .oci_dir = oci_dir, .progress = OCI_PROGRESS_NONE,
					    .request_timeout_s = TEST_TIMEOUT_S };
	struct oci_image_info info;
	char ref[TEST_REF_MAX];

	snprintf(ref, sizeof(ref), "127.0.0.1:%d/voidbox/test:1", registry->port);
	return oci_image_pull(ref, &options, &info, err, TEST_ERR_MAX);
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
		appeared = dir_has(dir, prefix, NULL, 0);
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

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (access("/sbin/mkfs.ext4", X_OK) < 0 && access("/usr/sbin/mkfs.ext4", X_OK) < 0)
		harness_skip_all("mkfs.ext4 is not installed (apt-get install e2fsprogs)");
	RUN_TEST(test_pull_killed_mid_download_leaves_nothing);
	RUN_TEST(test_pull_sweeps_a_killed_rootfs_build);
	RUN_TEST(test_prune_sweeps_killed_pull_only);
	RUN_TEST(test_prune_removes_unreferenced_rootfs);
	return harness_finish();
}
