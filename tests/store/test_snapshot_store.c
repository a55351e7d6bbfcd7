/*
 * The snapshot store without a VM: the state file a VMM would write is faked with plain bytes,
 * so these tests check only what the store owns: the config hash byte layout (recomputed here
 * independently), atomic commit (a writer killed mid-write leaves no snapshot, and its
 * temporary directory is swept), list/find/delete by prefix with ambiguity errors, diffs beside
 * their base, LRU eviction by state-file mtime under a byte budget, reference resolution
 * precedence and VOIDBOX_HOME.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "store/snapshot_store.h"
#include "store/store_settings.h"

/* test paths live under a short mkdtemp directory; truncation cannot happen here */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define ERR_MAX 512
#define TEST_PAGE 4096
#define HASH_A1 "aaaa111100000000000000000000000000000000000000000000000000000001"
#define HASH_A2 "aaaa222200000000000000000000000000000000000000000000000000000002"
#define HASH_B "bbbb000000000000000000000000000000000000000000000000000000000003"

#define TEST_SPARSE_MIB (1024 * 1024)
#define TEST_SPARSE_MIDDLE_AT (TEST_SPARSE_MIB + 17) /* data not on a page boundary */
#define TEST_SPARSE_TAIL_GAP 100 /* a hole after the last data, too */

static char root[PATH_MAX];
static char home[PATH_MAX];

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_INT_EQ(write(fd, data, len), (long long)len);
	close(fd);
}

static bool path_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static void reset_home(void)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	CHECK_INT_EQ(system(cmd), 0);
	CHECK_INT_EQ(mkdir(home, 0755), 0);
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){ .voidbox_home = home }), 0);
}

/* Commits a snapshot whose state file holds `pages` pages; returns its id in id_out. */
static int store_fake(const char *hash, const char *parent, size_t pages, char *id_out)
{
	struct snapshot_store_txn txn;
	char err[ERR_MAX], path[PATH_MAX];
	char *data = calloc(pages ? pages : 1, TEST_PAGE);
	int rc = snapshot_store_begin(hash, parent, &txn, err, sizeof(err));

	if (rc < 0) {
		free(data);
		return rc;
	}
	memset(data, 'x', pages * TEST_PAGE);
	snprintf(path, sizeof(path), "%s/%s", txn.tmp_path, SNAPSHOT_STORE_STATE_FILE);
	write_file(path, data, pages * TEST_PAGE);
	free(data);
	rc = snapshot_store_commit(&txn, NULL, err, sizeof(err));
	if (rc == 0 && id_out)
		strcpy(id_out, txn.id);
	return rc;
}

static void set_age(const char *id, time_t when)
{
	char path[PATH_MAX];
	struct timespec times[2] = { { .tv_sec = when }, { .tv_sec = when } };

	snprintf(path, sizeof(path), "%s/snapshots/%s/%s", home, id, SNAPSHOT_STORE_STATE_FILE);
	CHECK_INT_EQ(utimensat(AT_FDCWD, path, times, 0), 0);
}

static size_t store_count(void)
{
	struct snapshot_store_entry *list = NULL;
	size_t count = 0;
	char err[ERR_MAX];

	CHECK_INT_EQ(snapshot_store_list(&list, &count, err, sizeof(err)), 0);
	free(list);
	return count;
}

static void put_le(EVP_MD_CTX *ctx, uint64_t value, size_t width)
{
	unsigned char bytes[8];

	for (size_t i = 0; i < width; i++)
		bytes[i] = (unsigned char)(value >> (8 * i));
	EVP_DigestUpdate(ctx, bytes, width);
}

static void expected_hash(char hex[65])
{
	unsigned char digest[32];
	unsigned int len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	EVP_DigestUpdate(ctx, "voidbox-snapshot-config-v1", 27); /* with its NUL */
	put_le(ctx, 6, 8);
	EVP_DigestUpdate(ctx, "KERNEL", 6);
	put_le(ctx, 4, 8);
	EVP_DigestUpdate(ctx, "INIT", 4);
	put_le(ctx, 256, 4);
	put_le(ctx, 2, 4);
	put_le(ctx, 2, 4);
	put_le(ctx, 6, 4);
	EVP_DigestUpdate(ctx, "serial", 6);
	put_le(ctx, 5, 4);
	EVP_DigestUpdate(ctx, "vsock", 5);
	EVP_DigestFinal_ex(ctx, digest, &len);
	EVP_MD_CTX_free(ctx);
	for (unsigned int i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

static void test_config_hash_layout(void)
{
	const char *devices[] = { "vsock", "serial" };
	const char *reordered[] = { "serial", "vsock" };
	struct snapshot_store_config cfg = { .memory_mb = 256, .vcpus = 2, .devices = devices,
					     .device_count = 2 };
	char kernel[PATH_MAX], initramfs[PATH_MAX], err[ERR_MAX];
	char hex[65], again[65], want[65];

	snprintf(kernel, sizeof(kernel), "%s/vmlinuz", root);
	snprintf(initramfs, sizeof(initramfs), "%s/initramfs", root);
	write_file(kernel, "KERNEL", 6);
	write_file(initramfs, "INIT", 4);
	cfg.kernel_path = kernel;
	cfg.initramfs_path = initramfs;
	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, hex, err, sizeof(err)), 0);
	expected_hash(want);
	CHECK_STR_EQ(hex, want);

	cfg.devices = reordered;
	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, again, err, sizeof(err)), 0);
	CHECK_STR_EQ(again, hex);

	cfg.memory_mb = 512;
	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, again, err, sizeof(err)), 0);
	CHECK(strcmp(again, hex) != 0);
	cfg.memory_mb = 256;
	cfg.device_count = 1;
	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, again, err, sizeof(err)), 0);
	CHECK(strcmp(again, hex) != 0);
	cfg.device_count = 2;
	cfg.initramfs_path = NULL;
	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, again, err, sizeof(err)), 0);
	CHECK(strcmp(again, hex) != 0);

	cfg.kernel_path = "/nonexistent/vmlinuz";
	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, again, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "/nonexistent/vmlinuz") != NULL);
}

static void test_commit_is_atomic(void)
{
	char store[PATH_MAX], tmp_seen[PATH_MAX] = "", err[ERR_MAX], id[SNAPSHOT_STORE_ID_MAX];
	struct snapshot_store_txn txn;
	int pipefd[2], status = 0;
	pid_t child;

	reset_home();
	CHECK_INT_EQ(pipe(pipefd), 0);
	child = fork();
	if (child == 0) {
		char path[PATH_MAX];

		close(pipefd[0]);
		if (snapshot_store_begin(HASH_B, NULL, &txn, err, sizeof(err)) < 0)
			_exit(2);
		snprintf(path, sizeof(path), "%s/%s", txn.tmp_path, SNAPSHOT_STORE_STATE_FILE);
		write_file(path, "half", 4);
		if (write(pipefd[1], txn.tmp_path, strlen(txn.tmp_path) + 1) < 0)
			_exit(3);
		raise(SIGKILL); /* the writer dies before commit */
		_exit(4);
	}
	close(pipefd[1]);
	CHECK(read(pipefd[0], tmp_seen, sizeof(tmp_seen)) > 0);
	close(pipefd[0]);
	CHECK_INT_EQ(waitpid(child, &status, 0), child);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	snprintf(store, sizeof(store), "%s/snapshots/bbbb000000000000", home);
	CHECK(!path_exists(store));
	CHECK(path_exists(tmp_seen));
	CHECK_INT_EQ(store_count(), 0);

	/* the next writer sweeps the dead one's directory and commits whole */
	CHECK_INT_EQ(store_fake(HASH_B, NULL, 1, id), 0);
	CHECK(!path_exists(tmp_seen));
	CHECK_STR_EQ(id, "bbbb000000000000");
	CHECK(path_exists(store));
	snprintf(store, sizeof(store), "%s/snapshots/%s/%s", home, id, SNAPSHOT_STORE_META_FILE);
	CHECK(path_exists(store));
	CHECK_INT_EQ(store_count(), 1);

	/* a base already stored is refused with the way out */
	CHECK_INT_EQ(snapshot_store_begin(HASH_B, NULL, &txn, err, sizeof(err)), -EEXIST);
	CHECK(strstr(err, "voidbox snapshot delete bbbb000000000000") != NULL);

	/* commit with nothing saved discards the temporary directory */
	CHECK_INT_EQ(snapshot_store_begin(HASH_A1, NULL, &txn, err, sizeof(err)), 0);
	snprintf(tmp_seen, sizeof(tmp_seen), "%s", txn.tmp_path);
	CHECK_INT_EQ(snapshot_store_commit(&txn, NULL, err, sizeof(err)), -ENOENT);
	CHECK(!path_exists(tmp_seen));
	CHECK_INT_EQ(store_count(), 1);

	/* abort removes it too */
	CHECK_INT_EQ(snapshot_store_begin(HASH_A1, NULL, &txn, err, sizeof(err)), 0);
	snprintf(tmp_seen, sizeof(tmp_seen), "%s", txn.tmp_path);
	snapshot_store_abort(&txn);
	CHECK(!path_exists(tmp_seen));
	snapshot_store_abort(&txn);
}

static void test_list_find_delete_by_prefix(void)
{
	struct snapshot_store_entry entry, *list = NULL;
	char err[ERR_MAX], id[SNAPSHOT_STORE_ID_MAX];
	size_t count = 0, deleted = 0;

	reset_home();
	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 1, id), 0);
	CHECK_STR_EQ(id, "aaaa111100000000");
	CHECK_INT_EQ(store_fake(HASH_A2, NULL, 1, id), 0);
	CHECK_INT_EQ(store_fake(HASH_A1, "aaaa111100000000", 1, id), 0);
	CHECK_STR_EQ(id, "aaaa111100000000-diff-1");
	CHECK_INT_EQ(store_fake(HASH_A1, "aaaa111100000000", 1, id), 0);
	CHECK_STR_EQ(id, "aaaa111100000000-diff-2");
	/* a diff needs a stored base */
	CHECK_INT_EQ(store_fake(HASH_A1, "ffff", 1, id), -ENOENT);

	CHECK_INT_EQ(snapshot_store_list(&list, &count, err, sizeof(err)), 0);
	CHECK_INT_EQ(count, 4);
	if (count == 4) {
		CHECK_STR_EQ(list[0].id, "aaaa111100000000");
		CHECK_INT_EQ(list[0].kind, SNAPSHOT_STORE_KIND_BASE);
		CHECK_STR_EQ(list[0].config_hash, HASH_A1);
		CHECK_STR_EQ(list[1].id, "aaaa111100000000-diff-1");
		CHECK_INT_EQ(list[1].kind, SNAPSHOT_STORE_KIND_DIFF);
		CHECK_STR_EQ(list[1].parent_id, "aaaa111100000000");
		CHECK(list[1].size_bytes >= TEST_PAGE);
	}
	free(list);

	CHECK_INT_EQ(snapshot_store_find("aaaa", &entry, err, sizeof(err)), -ENOTUNIQ);
	CHECK(strstr(err, "give more characters") != NULL);
	CHECK(strstr(err, "aaaa222200000000") != NULL);
	CHECK_INT_EQ(snapshot_store_find("aaaa2", &entry, err, sizeof(err)), 0);
	CHECK_STR_EQ(entry.id, "aaaa222200000000");
	/* an exact id wins over the diffs that extend it */
	CHECK_INT_EQ(snapshot_store_find("aaaa111100000000", &entry, err, sizeof(err)), 0);
	CHECK_STR_EQ(entry.id, "aaaa111100000000");
	CHECK_INT_EQ(snapshot_store_find("cccc", &entry, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "voidbox snapshot list") != NULL);
	CHECK_INT_EQ(snapshot_store_find("../etc", &entry, err, sizeof(err)), -EINVAL);

	CHECK_INT_EQ(snapshot_store_delete("aaaa", &deleted, err, sizeof(err)), -ENOTUNIQ);
	CHECK_INT_EQ(store_count(), 4);
	CHECK_INT_EQ(snapshot_store_delete("aaaa111100000000-diff-2", &deleted, err, sizeof(err)), 0);
	CHECK_INT_EQ(deleted, 1);
	/* deleting a base takes its diffs */
	CHECK_INT_EQ(snapshot_store_delete("aaaa1111", &deleted, err, sizeof(err)), 0);
	CHECK_INT_EQ(deleted, 2);
	CHECK_INT_EQ(store_count(), 1);
	CHECK_INT_EQ(snapshot_store_find("aaaa", &entry, err, sizeof(err)), 0);
	CHECK_STR_EQ(entry.id, "aaaa222200000000");
}

static void test_evict_lru_by_mtime(void)
{
	char err[ERR_MAX], id[SNAPSHOT_STORE_ID_MAX];
	struct snapshot_store_entry entry;
	uint64_t remaining = 0, each;
	size_t evicted = 0;

	reset_home();
	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 2, id), 0);
	CHECK_INT_EQ(store_fake(HASH_A2, NULL, 2, id), 0);
	CHECK_INT_EQ(store_fake(HASH_B, NULL, 2, id), 0);
	set_age("aaaa111100000000", 1000);
	set_age("aaaa222200000000", 3000);
	set_age("bbbb000000000000", 2000);
	CHECK_INT_EQ(snapshot_store_find("bbbb", &entry, err, sizeof(err)), 0);
	each = entry.size_bytes;
	CHECK(each >= 2 * TEST_PAGE);

	/* a budget above the total evicts nothing */
	CHECK_INT_EQ(snapshot_store_evict_lru(3 * each, &evicted, &remaining, err, sizeof(err)), 0);
	CHECK_INT_EQ(evicted, 0);
	CHECK_INT_EQ(remaining, 3 * each);

	/* room for one and a half: the two least recently used go, oldest first */
	CHECK_INT_EQ(snapshot_store_evict_lru(each + each / 2, &evicted, &remaining, err,
					      sizeof(err)), 0);
	CHECK_INT_EQ(evicted, 2);
	CHECK_INT_EQ(remaining, each);
	CHECK_INT_EQ(snapshot_store_find("aaaa1", &entry, err, sizeof(err)), -ENOENT);
	CHECK_INT_EQ(snapshot_store_find("bbbb", &entry, err, sizeof(err)), -ENOENT);
	CHECK_INT_EQ(snapshot_store_find("aaaa2", &entry, err, sizeof(err)), 0);

	/*
	 * A base stays while it has a diff, even when it is the oldest: the newer bbbb goes,
	 * then the diff, and that is enough. Touching makes a snapshot the most recently used.
	 */
	CHECK_INT_EQ(store_fake(HASH_B, NULL, 2, id), 0);
	set_age("bbbb000000000000", 5000);
	set_age("aaaa222200000000", 4000);
	CHECK_INT_EQ(store_fake(HASH_A2, "aaaa222200000000", 1, id), 0);
	set_age("aaaa222200000000-diff-1", 6000);
	CHECK_INT_EQ(snapshot_store_evict_lru(each, &evicted, &remaining, err, sizeof(err)), 0);
	CHECK_INT_EQ(evicted, 2);
	CHECK_INT_EQ(store_count(), 1);
	CHECK_INT_EQ(snapshot_store_find("aaaa2", &entry, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_store_touch(entry.path), 0);
	CHECK_INT_EQ(snapshot_store_find("aaaa2", &entry, err, sizeof(err)), 0);
	CHECK(entry.last_used > 5000);

	CHECK_INT_EQ(snapshot_store_evict_lru(0, &evicted, &remaining, err, sizeof(err)), 0);
	CHECK_INT_EQ(evicted, 1);
	CHECK_INT_EQ(remaining, 0);
	CHECK_INT_EQ(store_count(), 0);
}

/*
 * Garbage collection under a cap: a snapshot a process holds (as every restore does) is never
 * evicted, nor is a base while its diff stays, nor the snapshot just written; the cap comes
 * from VOIDBOX_SNAPSHOT_CACHE_MAX; delete refuses a held snapshot.
 */
static void test_gc_spares_in_use_and_bases(void)
{
	struct snapshot_store_gc_result result;
	struct snapshot_store_entry held, entry;
	struct snapshot_store_hold hold;
	char err[ERR_MAX], id[SNAPSHOT_STORE_ID_MAX];
	uint64_t each;

	reset_home();
	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 2, id), 0);
	CHECK_INT_EQ(store_fake(HASH_A2, NULL, 2, id), 0);
	CHECK_INT_EQ(store_fake(HASH_A2, "aaaa222200000000", 2, id), 0);
	CHECK_INT_EQ(store_fake(HASH_B, NULL, 2, id), 0);
	set_age("aaaa111100000000", 1000);
	set_age("aaaa222200000000", 2000);
	set_age("aaaa222200000000-diff-1", 3000);
	set_age("bbbb000000000000", 4000);
	CHECK_INT_EQ(snapshot_store_find("bbbb", &entry, err, sizeof(err)), 0);
	each = entry.size_bytes;

	/* the oldest is held by a "running VM": it is spared, and so is the diff's base */
	CHECK_INT_EQ(snapshot_store_find("aaaa1", &held, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_store_hold(held.path, &hold, err, sizeof(err)), 0);
	CHECK_INT_EQ(hold.count, 1);
	CHECK(snapshot_store_in_use(held.path));
	CHECK_INT_EQ(snapshot_store_delete("aaaa1", NULL, err, sizeof(err)), -EBUSY);
	CHECK(strstr(err, "in use by a running VM") != NULL);
	CHECK_INT_EQ(snapshot_store_gc(0, "bbbb000000000000", &result, err, sizeof(err)), 0);
	/* the diff, then its base once it has none; the held one and bbbb (kept) stay */
	CHECK_INT_EQ(result.evicted, 2);
	CHECK_INT_EQ(result.spared_in_use, 1);
	CHECK_INT_EQ(store_count(), 2);
	CHECK_INT_EQ(snapshot_store_find("aaaa1", &entry, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_store_find("bbbb", &entry, err, sizeof(err)), 0);
	CHECK(result.remaining_bytes >= 2 * each);

	/* a held diff holds its base too, and the base is spared as a base of a diff */
	CHECK_INT_EQ(store_fake(HASH_A2, NULL, 2, id), 0);
	CHECK_INT_EQ(store_fake(HASH_A2, "aaaa222200000000", 2, id), 0);
	set_age("aaaa222200000000", 500);
	snapshot_store_release(&hold);
	CHECK(!snapshot_store_in_use(held.path));
	CHECK_INT_EQ(snapshot_store_find("aaaa222200000000-diff-1", &held, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_store_hold(held.path, &hold, err, sizeof(err)), 0);
	CHECK_INT_EQ(hold.count, 2);
	CHECK_INT_EQ(snapshot_store_gc(0, NULL, &result, err, sizeof(err)), 0);
	CHECK_INT_EQ(result.spared_in_use, 1);
	CHECK_INT_EQ(result.spared_bases, 1);
	CHECK_INT_EQ(store_count(), 2);
	CHECK_INT_EQ(snapshot_store_find("aaaa222200000000-diff-1", &entry, err, sizeof(err)), 0);
	snapshot_store_release(&hold);

	/* the configured cap: a malformed one is refused, a real one applied */
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){
				     .voidbox_home = home, .snapshot_cache_max = "lots" }), 0);
	CHECK_INT_EQ(snapshot_store_enforce_cap(NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, SNAPSHOT_STORE_CACHE_MAX_ENV) != NULL);
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){
				     .voidbox_home = home, .snapshot_cache_max = "0" }), 0);
	CHECK_INT_EQ(snapshot_store_enforce_cap(NULL, err, sizeof(err)), 0);
	CHECK_INT_EQ(store_count(), 0);
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){ .voidbox_home = home }), 0);
}

/* Commit records every file's SHA-256; verify finds a flipped byte and names the file. */
static void test_manifest_and_verify(void)
{
	struct snapshot_store_entry entry;
	char err[ERR_MAX], id[SNAPSHOT_STORE_ID_MAX], path[PATH_MAX];
	char hex[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1];
	uint64_t size = 0;
	int fd;

	reset_home();
	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 3, id), 0);
	if (snapshot_store_verify("aaaa1", &entry, err, sizeof(err)) != 0)
		fprintf(stderr, "  verify: %s\n", err);
	CHECK_INT_EQ(snapshot_store_verify("aaaa1", &entry, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/%s", entry.path, SNAPSHOT_MANIFEST_FILE);
	CHECK(path_exists(path));
	snprintf(path, sizeof(path), "%s/%s", entry.path, SNAPSHOT_STORE_STATE_FILE);
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_INT_EQ(pwrite(fd, "y", 1, TEST_PAGE + 7), 1);
	close(fd);
	CHECK_INT_EQ(snapshot_store_verify("aaaa1", &entry, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, path) != NULL);
	CHECK(strstr(err, "SHA-256") != NULL);
	CHECK_INT_EQ(truncate(path, TEST_PAGE), 0);
	CHECK_INT_EQ(snapshot_store_verify("aaaa1", &entry, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "truncated") != NULL);
	CHECK_INT_EQ(unlink(path), 0);
	CHECK(snapshot_store_verify("aaaa1", &entry, err, sizeof(err)) < 0);
	CHECK(snapshot_sha256_file(path, hex, &size, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, path) != NULL);
}

/*
 * manifest.json records the CPU features a create hands the commit, reads them back, says
 * nothing of them for a snapshot committed without, and refuses a malformed list.
 */
static void test_manifest_cpu_features(void)
{
	static const uint32_t shown[SNAPSHOT_MANIFEST_CPU_REGS] = { 0xf6fa3203u, 0x0f8bfbffu,
								    0x009c07abu, 0x4u, 0xac000400u };
	struct snapshot_store_txn txn;
	struct snapshot_manifest manifest;
	struct snapshot_store_entry entry;
	char err[ERR_MAX], path[PATH_MAX], id[SNAPSHOT_STORE_ID_MAX];
	bool has = false;
	uint32_t merged[SNAPSHOT_MANIFEST_CPU_REGS] = { 0 };
	static const uint32_t more[SNAPSHOT_MANIFEST_CPU_REGS] = { 0, 0, 1u << 16, 0, 0 };
	FILE *f;

	reset_home();
	CHECK_INT_EQ(snapshot_store_begin(HASH_A1, NULL, &txn, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/%s", txn.tmp_path, SNAPSHOT_STORE_STATE_FILE);
	write_file(path, "state", 5);
	txn.has_cpu_features = true;
	memcpy(txn.cpu_features, shown, sizeof(shown));
	CHECK_INT_EQ(snapshot_store_commit(&txn, NULL, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_store_find(txn.id, &entry, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_manifest_read(entry.path, &manifest, err, sizeof(err)), 0);
	CHECK(manifest.has_cpu_features);
	CHECK(memcmp(manifest.cpu_features, shown, sizeof(shown)) == 0);
	CHECK_INT_EQ(snapshot_store_verify(txn.id, &entry, err, sizeof(err)), 0);

	CHECK_INT_EQ(store_fake(HASH_B, NULL, 1, id), 0);
	CHECK_INT_EQ(snapshot_store_find(id, &entry, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_manifest_read(entry.path, &manifest, err, sizeof(err)), 0);
	CHECK(!manifest.has_cpu_features);

	/* a feature list that is not five registers of 0x and 8 hex digits is refused */
	snprintf(path, sizeof(path), "%s/%s", entry.path, SNAPSHOT_MANIFEST_FILE);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fprintf(f, "{\"id\": \"%s\", \"kind\": \"base\", \"parent\": null, \"files\": [], "
			"\"cpu_features\": {\"leaf1_ecx\": \"0x-0000001\", \"leaf1_edx\": "
			"\"0x00000000\", \"leaf7_ebx\": \"0x00000000\", \"leaf7_ecx\": "
			"\"0x00000000\", \"leaf7_edx\": \"0x00000000\"}}", id);
		fclose(f);
	}
	CHECK_INT_EQ(snapshot_manifest_read(entry.path, &manifest, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "cpu_features") != NULL);

	/* adding features is a union, and from nothing it is the features added */
	snapshot_manifest_add_cpu_features(&has, merged, false, more);
	CHECK(!has);
	snapshot_manifest_add_cpu_features(&has, merged, true, shown);
	CHECK(has && memcmp(merged, shown, sizeof(shown)) == 0);
	snapshot_manifest_add_cpu_features(&has, merged, true, more);
	CHECK(merged[2] == (shown[2] | (1u << 16)) && merged[0] == shown[0]);
}

/*
 * A sparse file (holes before, between and after data, as a memory file has) hashes to what
 * the same bytes written out densely do, whether the holes are fed as zeros or read.
 */
static void test_sha256_of_sparse_file(void)
{
	static const char middle[] = "data in the middle";
	static const char tail[] = "and at the end";
	const off_t size = 3 * TEST_SPARSE_MIB + TEST_PAGE;
	char sparse[PATH_MAX], dense[PATH_MAX], err[512];
	char hex_sparse[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1] = "";
	char hex_dense[SNAPSHOT_MANIFEST_SHA256_HEX_LEN + 1] = "";
	uint64_t size_sparse = 0, size_dense = 0;
	char *bytes = calloc(1, (size_t)size);
	int fd;

	CHECK(bytes != NULL);
	if (!bytes)
		return;
	memcpy(bytes + TEST_SPARSE_MIDDLE_AT, middle, strlen(middle));
	memcpy(bytes + size - (off_t)strlen(tail) - TEST_SPARSE_TAIL_GAP, tail, strlen(tail));
	snprintf(sparse, sizeof(sparse), "%s/sparse", root);
	snprintf(dense, sizeof(dense), "%s/dense", root);
	fd = open(sparse, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK_INT_EQ(pwrite(fd, middle, strlen(middle), TEST_SPARSE_MIDDLE_AT), (ssize_t)strlen(middle));
	CHECK_INT_EQ(pwrite(fd, tail, strlen(tail), size - (off_t)strlen(tail) - TEST_SPARSE_TAIL_GAP),
		     (ssize_t)strlen(tail));
	CHECK_INT_EQ(ftruncate(fd, size), 0);
	close(fd);
	fd = open(dense, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK_INT_EQ(write(fd, bytes, (size_t)size), (ssize_t)size);
	close(fd);
	CHECK_INT_EQ(snapshot_sha256_file(sparse, hex_sparse, &size_sparse, err, sizeof(err)), 0);
	CHECK_INT_EQ(snapshot_sha256_file(dense, hex_dense, &size_dense, err, sizeof(err)), 0);
	CHECK_STR_EQ(hex_sparse, hex_dense);
	CHECK(size_sparse == (uint64_t)size && size_dense == (uint64_t)size);
	unlink(sparse);
	unlink(dense);
	free(bytes);
}

static void test_parse_size(void)
{
	uint64_t value = 0;

	CHECK(snapshot_store_parse_size("512", &value) && value == 512);
	CHECK(snapshot_store_parse_size("64K", &value) && value == 64ULL << 10);
	CHECK(snapshot_store_parse_size("3m", &value) && value == 3ULL << 20);
	CHECK(snapshot_store_parse_size("2G", &value) && value == 2ULL << 30);
	CHECK(snapshot_store_parse_size("1T", &value) && value == 1ULL << 40);
	CHECK(!snapshot_store_parse_size("-1G", &value));
	CHECK(!snapshot_store_parse_size("1GB", &value));
	CHECK(!snapshot_store_parse_size("G", &value));
	CHECK(!snapshot_store_parse_size("99999999999999999999", &value));
	CHECK(!snapshot_store_parse_size("17179869184G", &value));
}

static void test_resolution_precedence(void)
{
	char err[ERR_MAX], dir[PATH_MAX], id[SNAPSHOT_STORE_ID_MAX], local[PATH_MAX];
	char cwd[PATH_MAX], state[PATH_MAX], expected[PATH_MAX];
	enum snapshot_store_source source = SNAPSHOT_STORE_SOURCE_PATH;

	reset_home();
	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	CHECK_INT_EQ(store_fake(HASH_B, NULL, 1, id), 0);
	/* a directory in the working directory whose name is also an id prefix */
	snprintf(local, sizeof(local), "%s/bbbb", root);
	CHECK_INT_EQ(mkdir(local, 0755), 0);
	snprintf(state, sizeof(state), "%s/%s", local, SNAPSHOT_STORE_STATE_FILE);
	write_file(state, "s", 1);
	CHECK_INT_EQ(chdir(root), 0);

	CHECK_INT_EQ(snapshot_store_resolve("bbbb", dir, sizeof(dir), &source, err, sizeof(err)), 0);
	CHECK_INT_EQ(source, SNAPSHOT_STORE_SOURCE_ID);
	snprintf(expected, sizeof(expected), "%s/snapshots/bbbb000000000000", home);
	CHECK_STR_EQ(dir, expected);

	CHECK_INT_EQ(snapshot_store_resolve("./bbbb", dir, sizeof(dir), &source, err, sizeof(err)), 0);
	CHECK_INT_EQ(source, SNAPSHOT_STORE_SOURCE_PATH);
	CHECK(realpath(local, expected) != NULL);
	CHECK_STR_EQ(dir, expected);

	CHECK_INT_EQ(snapshot_store_resolve(local, dir, sizeof(dir), &source, err, sizeof(err)), 0);
	CHECK_INT_EQ(source, SNAPSHOT_STORE_SOURCE_PATH);

	CHECK_INT_EQ(snapshot_store_resolve("cafe", dir, sizeof(dir), &source, err, sizeof(err)),
		     -ENOENT);
	CHECK(strstr(err, "neither") != NULL);
	CHECK_INT_EQ(snapshot_store_resolve(root, dir, sizeof(dir), &source, err, sizeof(err)),
		     -ENOENT);
	CHECK_INT_EQ(snapshot_store_resolve("", dir, sizeof(dir), &source, err, sizeof(err)),
		     -EINVAL);

	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 1, id), 0);
	CHECK_INT_EQ(store_fake(HASH_A2, NULL, 1, id), 0);
	CHECK_INT_EQ(snapshot_store_resolve("aaaa", dir, sizeof(dir), &source, err, sizeof(err)),
		     -ENOTUNIQ);
	CHECK_INT_EQ(chdir(cwd), 0);
}

/*
 * store.json may come from another machine (an import keeps the archive's): the family is
 * read from directory names, so a parent it names is never locked, joined into a path or
 * spared, and a kernel it names that is a device is refused instead of hashed forever.
 */
static void test_store_json_not_trusted(void)
{
	static const char forged[] = "{\"kind\": \"diff\", \"parent\": \"../../outside\", "
				     "\"kernel\": \"/dev/null\"}";
	struct snapshot_store_config cfg = { .kernel_path = "/dev/null", .memory_mb = 256,
					     .vcpus = 1 };
	char base[SNAPSHOT_STORE_ID_MAX], diff[SNAPSHOT_STORE_ID_MAX];
	char path[PATH_MAX], outside[PATH_MAX], err[ERR_MAX], hex[65];
	struct snapshot_store_entry entry;
	struct snapshot_store_hold hold;

	reset_home();
	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 1, base), 0);
	CHECK_INT_EQ(store_fake(HASH_A1, base, 1, diff), 0);
	snprintf(outside, sizeof(outside), "%s/outside", root);
	CHECK_INT_EQ(mkdir(outside, 0755), 0);
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s", home, diff, SNAPSHOT_STORE_META_FILE);
	write_file(path, forged, strlen(forged));
	snprintf(path, sizeof(path), "%s/snapshots/%s/%s", home, base, SNAPSHOT_STORE_META_FILE);
	write_file(path, forged, strlen(forged));

	CHECK_INT_EQ(snapshot_store_find(diff, &entry, err, sizeof(err)), 0);
	CHECK_STR_EQ(entry.parent_id, base);
	CHECK_INT_EQ(snapshot_store_hold(entry.path, &hold, err, sizeof(err)), 0);
	CHECK_INT_EQ(hold.count, 2);
	snapshot_store_release(&hold);
	snprintf(path, sizeof(path), "%s/%s", outside, SNAPSHOT_STORE_LOCK_FILE);
	CHECK(!path_exists(path));
	CHECK_INT_EQ(snapshot_store_find(base, &entry, err, sizeof(err)), 0);
	CHECK_INT_EQ(entry.kind, SNAPSHOT_STORE_KIND_BASE);
	CHECK_STR_EQ(entry.parent_id, "");

	CHECK_INT_EQ(snapshot_store_config_hash(&cfg, hex, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "/dev/null is not a regular file") != NULL);
}

static void test_voidbox_home(void)
{
	char dir[PATH_MAX], expected[PATH_MAX], user_home[PATH_MAX], err[ERR_MAX];
	size_t evicted = 1;

	CHECK_INT_EQ(store_settings_set(&(struct store_settings){
				     .voidbox_home = "/relocated/home" }), 0);
	CHECK_INT_EQ(snapshot_store_dir(dir, sizeof(dir)), 0);
	CHECK_STR_EQ(dir, "/relocated/home/snapshots");

	snprintf(user_home, sizeof(user_home), "%s/user", root);
	CHECK_INT_EQ(mkdir(user_home, 0755), 0);
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){ .user_home = user_home }), 0);
	CHECK_INT_EQ(snapshot_store_dir(dir, sizeof(dir)), 0);
	snprintf(expected, sizeof(expected), "%s/.void-box/snapshots", user_home);
	CHECK_STR_EQ(dir, expected);
	CHECK_INT_EQ(store_fake(HASH_B, NULL, 1, NULL), 0);
	CHECK(path_exists(expected));

	/* eviction works on the relocated store only: the one under HOME stays */
	reset_home();
	CHECK_INT_EQ(store_fake(HASH_A1, NULL, 1, NULL), 0);
	CHECK_INT_EQ(snapshot_store_evict_lru(0, &evicted, NULL, err, sizeof(err)), 0);
	CHECK_INT_EQ(evicted, 1);
	snprintf(expected, sizeof(expected), "%s/.void-box/snapshots/bbbb000000000000", user_home);
	CHECK(path_exists(expected));
}

int main(void)
{
	char cmd[PATH_MAX + 16];
	const char *tmpdir = getenv("TMPDIR");

	log_set_level(LOG_LEVEL_WARN);
	snprintf(root, sizeof(root), "%s/vbsnapXXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(root))
		harness_fail_setup("cannot create a temporary directory");
	snprintf(home, sizeof(home), "%s/home", root);

	RUN_TEST(test_config_hash_layout);
	RUN_TEST(test_commit_is_atomic);
	RUN_TEST(test_list_find_delete_by_prefix);
	RUN_TEST(test_evict_lru_by_mtime);
	RUN_TEST(test_gc_spares_in_use_and_bases);
	RUN_TEST(test_manifest_and_verify);
	RUN_TEST(test_manifest_cpu_features);
	RUN_TEST(test_sha256_of_sparse_file);
	RUN_TEST(test_parse_size);
	RUN_TEST(test_resolution_precedence);
	RUN_TEST(test_voidbox_home);
	RUN_TEST(test_store_json_not_trusted);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return harness_finish();
}
