/*
 * OCI layers applied onto a temporary root, with archives this test writes with libarchive
 * (gzip and zstd): a base layer with files, a hard link and a symlink; an upper layer that
 * deletes a file (.wh.NAME), empties a directory (.wh..wh..opq) while adding to it, replaces
 * a file a hard link shares, and turns a file into a directory. Hostile layers: "..",
 * absolute names and hard-link targets that leave the root are refused as a whole; an entry
 * or a whiteout under a symlink that points out of the root touches nothing outside; an entry
 * the host cannot create is skipped and counted. An image's budget (declared bytes, entries,
 * name bytes) refuses the entry that would exceed it; two threads applying layers at once
 * each write only into their own root. Also the name normalization itself.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dir_entries.h"
#include "harness.h"
#include "store/oci_layer.h"
#include "store/store_fs.h"

#define TEST_PATH_MAX 512
#define TEST_SCRATCH_MAX 64
#define TEST_ERR_MAX 1024
#define TEST_READ_MAX 256
#define TEST_FILE_MODE 0644
#define TEST_DIR_MODE 0755
#define TEST_LINK_MODE 0777
/* Layers two threads apply at once: enough entries that their runs overlap. */
#define TEST_RACE_ENTRIES 2000
#define TEST_RACE_ROUNDS 4
#define TEST_RACE_THREADS 2
#define TEST_NAME_MAX 32

enum test_compression { TEST_GZIP, TEST_ZSTD };

enum test_kind { TEST_FILE, TEST_DIR, TEST_SYMLINK, TEST_HARDLINK };

struct test_entry {
	enum test_kind kind;
	const char *name;
	const char *content; /* file data, or the link target */
};

static char scratch[TEST_SCRATCH_MAX];

static int write_layer(const char *path, enum test_compression compression,
		       const struct test_entry *entries, size_t count)
{
	struct archive *a = archive_write_new();
	int rc = 0;

	archive_write_set_format_pax_restricted(a);
	if (compression == TEST_GZIP)
		archive_write_add_filter_gzip(a);
	else
		archive_write_add_filter_zstd(a);
	if (archive_write_open_filename(a, path) != ARCHIVE_OK) {
		archive_write_free(a);
		return -1;
	}
	for (size_t i = 0; i < count && rc == 0; i++) {
		struct archive_entry *e = archive_entry_new();
		const struct test_entry *t = &entries[i];

		archive_entry_set_pathname(e, t->name);
		switch (t->kind) {
		case TEST_FILE:
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_perm(e, TEST_FILE_MODE);
			archive_entry_set_size(e, (la_int64_t)strlen(t->content));
			break;
		case TEST_DIR:
			archive_entry_set_filetype(e, AE_IFDIR);
			archive_entry_set_perm(e, TEST_DIR_MODE);
			break;
		case TEST_SYMLINK:
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_perm(e, TEST_LINK_MODE);
			archive_entry_set_symlink(e, t->content);
			break;
		case TEST_HARDLINK:
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_perm(e, TEST_FILE_MODE);
			archive_entry_set_hardlink(e, t->content);
			break;
		}
		if (archive_write_header(a, e) != ARCHIVE_OK)
			rc = -1;
		else if (t->kind == TEST_FILE &&
			 archive_write_data(a, t->content, strlen(t->content)) !=
				 (la_ssize_t)strlen(t->content))
			rc = -1;
		archive_entry_free(e);
	}
	if (archive_write_close(a) != ARCHIVE_OK)
		rc = -1;
	archive_write_free(a);
	return rc;
}

static const char *path_in(const char *rel)
{
	static char path[TEST_PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", scratch, rel);
	return path;
}

static bool exists(const char *rel)
{
	struct stat st;

	return lstat(path_in(rel), &st) == 0;
}

static bool file_is(const char *rel, const char *content)
{
	char buf[TEST_READ_MAX] = { 0 };
	int fd = open(path_in(rel), O_RDONLY);
	ssize_t got;

	if (fd < 0)
		return false;
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return got == (ssize_t)strlen(content) && memcmp(buf, content, (size_t)got) == 0;
}

/* Writes entries as a layer in the scratch dir and applies it onto root, spending budget. */
static int apply_within(const char *root, enum test_compression compression,
			const struct test_entry *entries, size_t count,
			struct oci_layer_budget *budget, struct oci_layer_stats *stats, char *err)
{
	char layer[TEST_PATH_MAX];

	snprintf(layer, sizeof(layer), "%s/layer.tar", scratch);
	if (write_layer(layer, compression, entries, count) < 0)
		return -100;
	return oci_layer_apply(layer, root, budget, stats, err, TEST_ERR_MAX);
}

/* The same with a full image budget. */
static int apply(const char *root, enum test_compression compression,
		 const struct test_entry *entries, size_t count, struct oci_layer_stats *stats,
		 char *err)
{
	struct oci_layer_budget budget;

	oci_layer_budget_init(&budget);
	return apply_within(root, compression, entries, count, &budget, stats, err);
}

static void make_scratch(void)
{
	snprintf(scratch, sizeof(scratch), "/tmp/voidbox-test-oci-XXXXXX");
	if (!mkdtemp(scratch))
		abort();
	mkdir(path_in("root"), TEST_DIR_MODE);
	mkdir(path_in("outside"), TEST_DIR_MODE);
}

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

static void test_normalize(void)
{
	char out[TEST_PATH_MAX];

	CHECK_INT_EQ(oci_layer_normalize_path("./etc//os-release", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "etc/os-release");
	CHECK_INT_EQ(oci_layer_normalize_path("usr/lib/./x/", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "usr/lib/x");
	CHECK_INT_EQ(oci_layer_normalize_path("./", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "");
	CHECK_INT_EQ(oci_layer_normalize_path("a/..b/c..", out, sizeof(out)), 0);
	CHECK_STR_EQ(out, "a/..b/c..");
	CHECK_INT_EQ(oci_layer_normalize_path("/etc/passwd", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(oci_layer_normalize_path("a/../../etc", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(oci_layer_normalize_path("..", out, sizeof(out)), -EINVAL);
	CHECK_INT_EQ(oci_layer_normalize_path("abcdef", out, 4), -EINVAL);
}

static void test_layers_stack(void)
{
	static const struct test_entry base[] = {
		{ TEST_DIR, "./", NULL },
		{ TEST_DIR, "./etc/", NULL },
		{ TEST_FILE, "./etc/os-release", "ID=base\n" },
		{ TEST_HARDLINK, "./etc/os-release.link", "./etc/os-release" },
		{ TEST_SYMLINK, "./etc/abs-link", "/etc/os-release" },
		{ TEST_FILE, "./gone", "delete me" },
		{ TEST_DIR, "./opaque/", NULL },
		{ TEST_FILE, "./opaque/old", "old" },
		{ TEST_DIR, "./opaque/sub/", NULL },
		{ TEST_FILE, "./opaque/sub/deep", "deep" },
		{ TEST_FILE, "./becomes-dir", "a file first" },
		{ TEST_DIR, "./becomes-file/", NULL },
		{ TEST_FILE, "./becomes-file/inner", "inner" },
	};
	/* the new file comes before the marker: the marker must spare it */
	static const struct test_entry upper[] = {
		{ TEST_FILE, "./.wh.gone", "" },
		{ TEST_DIR, "./opaque/", NULL },
		{ TEST_FILE, "./opaque/new", "new" },
		{ TEST_FILE, "./opaque/.wh..wh..opq", "" },
		{ TEST_FILE, "./etc/os-release", "ID=upper\n" },
		{ TEST_DIR, "./becomes-dir/", NULL },
		{ TEST_FILE, "./becomes-dir/child", "child" },
		{ TEST_FILE, "./becomes-file", "now a file" },
		{ TEST_FILE, "./.wh.never-existed", "" },
	};
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX] = "", link_target[TEST_PATH_MAX] = { 0 };
	struct stat a, b;

	make_scratch();
	CHECK_INT_EQ(apply(path_in("root"), TEST_GZIP, base, COUNT(base), &stats, err), 0);
	CHECK_INT_EQ((int)stats.skipped, 0);
	CHECK(file_is("root/etc/os-release", "ID=base\n"));
	CHECK(lstat(path_in("root/etc/os-release"), &a) == 0);
	CHECK(lstat(path_in("root/etc/os-release.link"), &b) == 0);
	CHECK(a.st_ino == b.st_ino);
	CHECK(readlink(path_in("root/etc/abs-link"), link_target, sizeof(link_target) - 1) > 0);
	CHECK_STR_EQ(link_target, "/etc/os-release");

	CHECK_INT_EQ(apply(path_in("root"), TEST_ZSTD, upper, COUNT(upper), &stats, err), 0);
	if (err[0])
		fprintf(stderr, "  %s\n", err);
	CHECK(!exists("root/gone"));
	CHECK(!exists("root/.wh.gone"));
	CHECK(file_is("root/opaque/new", "new"));
	CHECK(!exists("root/opaque/old"));
	CHECK(!exists("root/opaque/sub"));
	CHECK(!exists("root/opaque/.wh..wh..opq"));
	CHECK(file_is("root/etc/os-release", "ID=upper\n"));
	/* the lower layer's hard link keeps the lower bytes */
	CHECK(file_is("root/etc/os-release.link", "ID=base\n"));
	CHECK(file_is("root/becomes-dir/child", "child"));
	CHECK(file_is("root/becomes-file", "now a file"));
	CHECK((int)stats.whiteouts >= 2);
	store_remove_tree(scratch);
}

static void check_refused(const struct test_entry *entries, size_t count, const char *name)
{
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX] = "";

	CHECK_INT_EQ(apply(path_in("root"), TEST_GZIP, entries, count, &stats, err), -EINVAL);
	CHECK(strstr(err, name) != NULL);
	CHECK(strstr(err, "refused") != NULL);
}

static void test_escapes_refused(void)
{
	static const struct test_entry dotdot[] = {
		{ TEST_FILE, "ok", "fine" },
		{ TEST_FILE, "../outside/escaped", "escaped" },
	};
	static const struct test_entry nested_dotdot[] = {
		{ TEST_FILE, "a/../../outside/escaped", "escaped" },
	};
	static const struct test_entry absolute[] = {
		{ TEST_FILE, "/tmp/voidbox-test-oci-absolute", "escaped" },
	};
	static const struct test_entry hardlink[] = {
		{ TEST_HARDLINK, "stolen", "../outside/secret" },
	};

	make_scratch();
	CHECK(file_is("root", "") == false);
	{
		int fd = open(path_in("outside/secret"), O_WRONLY | O_CREAT, TEST_FILE_MODE);

		CHECK(fd >= 0 && write(fd, "secret", 6) == 6);
		close(fd);
	}
	check_refused(dotdot, COUNT(dotdot), "../outside/escaped");
	check_refused(nested_dotdot, COUNT(nested_dotdot), "a/../../outside/escaped");
	check_refused(absolute, COUNT(absolute), "/tmp/voidbox-test-oci-absolute");
	check_refused(hardlink, COUNT(hardlink), "stolen");
	CHECK(!exists("outside/escaped"));
	CHECK(access("/tmp/voidbox-test-oci-absolute", F_OK) != 0);
	CHECK(!exists("root/stolen"));
	CHECK(file_is("outside/secret", "secret"));
	store_remove_tree(scratch);
}

/* A symlink out of the root, then entries and whiteouts through it: nothing outside changes. */
static void test_symlink_parents_do_not_escape(void)
{
	char target[TEST_PATH_MAX];
	struct test_entry plant[] = {
		{ TEST_SYMLINK, "evil", target },
	};
	static const struct test_entry through[] = {
		{ TEST_FILE, "evil/pwned", "pwned" },
		{ TEST_FILE, "evil/.wh.victim", "" },
		{ TEST_FILE, "evil/sub/.wh..wh..opq", "" },
		{ TEST_FILE, "after", "still applied" },
	};
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX] = "";
	int fd;

	make_scratch();
	snprintf(target, sizeof(target), "%s", path_in("outside"));
	fd = open(path_in("outside/victim"), O_WRONLY | O_CREAT, TEST_FILE_MODE);
	CHECK(fd >= 0);
	close(fd);
	mkdir(path_in("outside/sub"), TEST_DIR_MODE);
	fd = open(path_in("outside/sub/kept"), O_WRONLY | O_CREAT, TEST_FILE_MODE);
	close(fd);
	CHECK_INT_EQ(apply(path_in("root"), TEST_GZIP, plant, COUNT(plant), &stats, err), 0);
	CHECK_INT_EQ(apply(path_in("root"), TEST_ZSTD, through, COUNT(through), &stats, err), 0);
	if (err[0])
		fprintf(stderr, "  %s\n", err);
	CHECK(!exists("outside/pwned"));
	CHECK(exists("outside/victim"));
	CHECK(exists("outside/sub/kept"));
	CHECK(file_is("root/after", "still applied"));
	CHECK((int)stats.skipped >= 2);
	store_remove_tree(scratch);
}

/* An entry under a plain file cannot be created: skipped, counted, the rest applied. */
static void test_uncreatable_entry_skipped(void)
{
	static const struct test_entry entries[] = {
		{ TEST_FILE, "plain", "a file" },
		{ TEST_FILE, "plain/child", "cannot be" },
		{ TEST_FILE, "next", "applied" },
	};
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX] = "";

	make_scratch();
	CHECK_INT_EQ(apply(path_in("root"), TEST_GZIP, entries, COUNT(entries), &stats, err), 0);
	CHECK_INT_EQ((int)stats.skipped, 1);
	CHECK_INT_EQ((int)stats.entries, 2);
	CHECK(file_is("root/plain", "a file"));
	CHECK(file_is("root/next", "applied"));
	store_remove_tree(scratch);
}

static void test_not_an_archive(void)
{
	struct oci_layer_budget budget;
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX] = "", layer[TEST_PATH_MAX];
	int fd;

	make_scratch();
	oci_layer_budget_init(&budget);
	snprintf(layer, sizeof(layer), "%s/garbage.tar", scratch);
	fd = open(layer, O_WRONLY | O_CREAT, TEST_FILE_MODE);
	CHECK(fd >= 0 && write(fd, "this is not a tar archive at all, not even close", 48) == 48);
	close(fd);
	CHECK(oci_layer_apply(layer, path_in("root"), &budget, &stats, err, sizeof(err)) < 0);
	CHECK(strstr(err, layer) != NULL);
	store_remove_tree(scratch);
}

/*
 * An image's budget is spent across its layers: the entry that would exceed it refuses the
 * layer before it is written (-EFBIG, naming the entry), whether the bytes its entries
 * declare, their number, or their names' bytes run out.
 */
static void test_budget_bounds_the_image(void)
{
	static const struct test_entry lower[] = {
		{ TEST_FILE, "first", "0123456789" },
	};
	static const struct test_entry upper[] = {
		{ TEST_FILE, "small", "01234" },
		{ TEST_FILE, "bomb", "0123456789" },
	};
	static const struct test_entry many[] = {
		{ TEST_FILE, "a", "" }, { TEST_FILE, "b", "" }, { TEST_FILE, "c", "" },
	};
	static const struct test_entry long_names[] = {
		{ TEST_FILE, "short", "" }, { TEST_FILE, "a-much-longer-name", "" },
	};
	struct oci_layer_budget budget;
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX] = "";

	make_scratch();
	oci_layer_budget_init(&budget);
	budget.data_bytes = 20;
	CHECK_INT_EQ(apply_within(path_in("root"), TEST_GZIP, lower, COUNT(lower), &budget, &stats,
				  err), 0);
	CHECK_INT_EQ((long long)budget.data_bytes, 10);
	CHECK_INT_EQ(apply_within(path_in("root"), TEST_ZSTD, upper, COUNT(upper), &budget, &stats,
				  err), -EFBIG);
	CHECK(strstr(err, "'bomb'") != NULL);
	CHECK(file_is("root/small", "01234"));
	CHECK(!exists("root/bomb"));

	oci_layer_budget_init(&budget);
	budget.entries = 2;
	CHECK_INT_EQ(apply_within(path_in("root"), TEST_GZIP, many, COUNT(many), &budget, &stats,
				  err), -EFBIG);
	CHECK(strstr(err, "'c'") != NULL);
	CHECK(!exists("root/c"));

	oci_layer_budget_init(&budget);
	budget.name_bytes = sizeof("short") + 1;
	CHECK_INT_EQ(apply_within(path_in("root"), TEST_GZIP, long_names, COUNT(long_names),
				  &budget, &stats, err), -EFBIG);
	CHECK(strstr(err, "'a-much-longer-name'") != NULL);
	CHECK(!exists("root/a-much-longer-name"));
	store_remove_tree(scratch);
}

struct race_apply {
	char layer[TEST_PATH_MAX];
	char root[TEST_PATH_MAX];
	int failures;
};

static void *race_apply_run(void *opaque)
{
	struct race_apply *run = opaque;
	struct oci_layer_budget budget;
	struct oci_layer_stats stats;
	char err[TEST_ERR_MAX];

	oci_layer_budget_init(&budget);
	for (int round = 0; round < TEST_RACE_ROUNDS; round++)
		if (oci_layer_apply(run->layer, run->root, &budget, &stats, err, sizeof(err)) < 0 ||
		    stats.entries != TEST_RACE_ENTRIES)
			run->failures++;
	return NULL;
}

/*
 * Two threads apply layers at once (a pipeline's boxes pulling one image) while the process
 * works in another directory: every entry lands in its own root, none in that directory.
 */
static void test_concurrent_layers_stay_in_their_roots(void)
{
	static struct test_entry entries[TEST_RACE_ENTRIES];
	static char names[TEST_RACE_ENTRIES][TEST_NAME_MAX];
	struct race_apply runs[TEST_RACE_THREADS];
	pthread_t threads[TEST_RACE_THREADS];
	int cwd_fd = open(".", O_PATH | O_DIRECTORY);

	make_scratch();
	mkdir(path_in("cwd"), TEST_DIR_MODE);
	for (size_t i = 0; i < TEST_RACE_ENTRIES; i++) {
		snprintf(names[i], sizeof(names[i]), "f%04zu", i);
		entries[i] = (struct test_entry){ TEST_FILE, names[i], "x" };
	}
	for (int t = 0; t < TEST_RACE_THREADS; t++) {
		runs[t].failures = 0;
		snprintf(runs[t].layer, sizeof(runs[t].layer), "%s/race%d.tar", scratch, t);
		snprintf(runs[t].root, sizeof(runs[t].root), "%s/root%d", scratch, t);
		mkdir(runs[t].root, TEST_DIR_MODE);
		CHECK(write_layer(runs[t].layer, TEST_GZIP, entries, COUNT(entries)) == 0);
	}
	CHECK(cwd_fd >= 0 && chdir(path_in("cwd")) == 0);
	for (int t = 0; t < TEST_RACE_THREADS; t++)
		CHECK(pthread_create(&threads[t], NULL, race_apply_run, &runs[t]) == 0);
	for (int t = 0; t < TEST_RACE_THREADS; t++)
		pthread_join(threads[t], NULL);
	CHECK(fchdir(cwd_fd) == 0);
	close(cwd_fd);
	CHECK_INT_EQ(dir_entry_count(path_in("cwd")), 0);
	for (int t = 0; t < TEST_RACE_THREADS; t++) {
		CHECK_INT_EQ(runs[t].failures, 0);
		CHECK_INT_EQ(dir_entry_count(runs[t].root), TEST_RACE_ENTRIES);
	}
	store_remove_tree(scratch);
}

int main(void)
{
	RUN_TEST(test_normalize);
	RUN_TEST(test_layers_stack);
	RUN_TEST(test_escapes_refused);
	RUN_TEST(test_symlink_parents_do_not_escape);
	RUN_TEST(test_uncreatable_entry_skipped);
	RUN_TEST(test_not_an_archive);
	RUN_TEST(test_budget_bounds_the_image);
	RUN_TEST(test_concurrent_layers_stay_in_their_roots);
	return harness_finish();
}
