/*
 * The newc writer against the format: an archive written to memory is parsed back by an
 * independent reader and every header field, name, payload and alignment rule is checked;
 * GNU cpio must list such an archive too (a meson test of its own, store_gnu_cpio, which skips
 * where cpio is not installed).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "store/cpio_newc.h"
#include "store/cpio_reader.h"

#define TEST_MTIME 1700000000u
#define TEST_BUFFER_MAX (1 << 20)
#define TEST_SOURCE_BYTES 100000
#define TEST_SCRATCH_TEMPLATE "/tmp/voidbox-cpio-test-XXXXXX"
#define GNU_CPIO_PATH "/usr/bin/cpio"

struct memory_sink {
	unsigned char data[TEST_BUFFER_MAX];
	size_t len;
	int fail_after; /* writes left before failing with -ENOSPC; <0 never */
};

static struct memory_sink sink;

static int memory_sink_write(void *ctx, const void *data, size_t len)
{
	struct memory_sink *out = ctx;

	if (out->fail_after == 0)
		return -ENOSPC;
	if (out->fail_after > 0)
		out->fail_after--;
	if (out->len + len > sizeof(out->data))
		return -ENOSPC;
	memcpy(out->data + out->len, data, len);
	out->len += len;
	return 0;
}

static void sink_reset(void)
{
	sink.len = 0;
	sink.fail_after = -1;
}

static void test_cpio_round_trip(void)
{
	static const char payload[] = "hello initramfs\n";
	struct cpio_reader_archive *archive = malloc(sizeof(*archive));
	const struct cpio_reader_entry *entry;
	struct cpio_writer writer;
	const char *why = "";

	sink_reset();
	cpio_writer_init(&writer, memory_sink_write, &sink, TEST_MTIME);
	CHECK_INT_EQ(cpio_writer_add_directory(&writer, "bin", 0755), 0);
	CHECK_INT_EQ(cpio_writer_add_file(&writer, "bin/hello", 0755, payload, strlen(payload)), 0);
	CHECK_INT_EQ(cpio_writer_add_symlink(&writer, "bin/sh", "/bin/busybox"), 0);
	CHECK_INT_EQ(cpio_writer_add_char_device(&writer, "dev/console", 0600, 5, 1), 0);
	CHECK_INT_EQ(cpio_writer_add_file(&writer, "empty", 0644, NULL, 0), 0);
	CHECK_INT_EQ(cpio_writer_finish(&writer), 0);
	CHECK_INT_EQ(writer.entries, 5);
	CHECK_INT_EQ(sink.len % 512, 0);
	CHECK_INT_EQ(writer.offset, sink.len);

	CHECK_INT_EQ(cpio_reader_parse(sink.data, sink.len, archive, &why), 0);
	CHECK(archive->saw_trailer);
	CHECK_INT_EQ(archive->count, 5);
	for (size_t i = 0; i < archive->count; i++) {
		CHECK_INT_EQ(archive->entries[i].header_offset % 4, 0);
		CHECK_INT_EQ(archive->entries[i].field[CPIO_FIELD_UID], 0);
		CHECK_INT_EQ(archive->entries[i].field[CPIO_FIELD_GID], 0);
		CHECK_INT_EQ(archive->entries[i].field[CPIO_FIELD_MTIME], TEST_MTIME);
		CHECK_INT_EQ(archive->entries[i].field[CPIO_FIELD_INODE], i + 1);
	}
	/* every byte after the trailer is zero padding */
	for (size_t i = archive->end_offset; i < sink.len; i++)
		CHECK_INT_EQ(sink.data[i], 0);

	entry = cpio_reader_find(archive, "bin");
	CHECK(entry && entry->field[CPIO_FIELD_MODE] == (S_IFDIR | 0755));
	entry = cpio_reader_find(archive, "bin/hello");
	CHECK(entry && entry->field[CPIO_FIELD_MODE] == (S_IFREG | 0755));
	CHECK(entry && entry->data_len == strlen(payload) &&
	      memcmp(entry->data, payload, entry->data_len) == 0);
	entry = cpio_reader_find(archive, "bin/sh");
	CHECK(entry && entry->field[CPIO_FIELD_MODE] == (S_IFLNK | 0777));
	CHECK(entry && entry->data_len == strlen("/bin/busybox") &&
	      memcmp(entry->data, "/bin/busybox", entry->data_len) == 0);
	entry = cpio_reader_find(archive, "dev/console");
	CHECK(entry && entry->field[CPIO_FIELD_MODE] == (S_IFCHR | 0600));
	CHECK(entry && entry->field[CPIO_FIELD_RDEVMAJOR] == 5 &&
	      entry->field[CPIO_FIELD_RDEVMINOR] == 1 && entry->data_len == 0);
	entry = cpio_reader_find(archive, "empty");
	CHECK(entry && entry->data_len == 0);
	free(archive);
}

/* Makes a scratch DIR holding source.bin (TEST_SOURCE_BYTES counting up) and names it in SRC. */
static bool make_source_file(char *dir, char *src, size_t src_len)
{
	FILE *file;

	if (!mkdtemp(dir))
		return false;
	snprintf(src, src_len, "%s/source.bin", dir);
	file = fopen(src, "wb");
	if (!file)
		return false;
	for (int i = 0; i < TEST_SOURCE_BYTES; i++)
		fputc(i & 0xff, file);
	return fclose(file) == 0;
}

static void remove_scratch_dir(const char *dir)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT_EQ(system(cmd), 0);
}

static void test_cpio_file_from_path(void)
{
	char dir[] = TEST_SCRATCH_TEMPLATE, src[PATH_MAX];
	struct cpio_reader_archive *archive = malloc(sizeof(*archive));
	const struct cpio_reader_entry *entry;
	struct cpio_writer writer;
	const char *why = "";

	CHECK(archive != NULL);
	CHECK(make_source_file(dir, src, sizeof(src)));
	sink_reset();
	cpio_writer_init(&writer, memory_sink_write, &sink, 0);
	CHECK_INT_EQ(cpio_writer_add_file_from_path(&writer, "data/source.bin", 0644, src), 0);
	CHECK_INT_EQ(cpio_writer_add_file_from_path(&writer, "missing", 0644, "/nonexistent/x"),
		     -ENOENT);
	CHECK_INT_EQ(cpio_writer_add_file_from_path(&writer, "dir", 0644, dir), -EINVAL);
	CHECK_INT_EQ(cpio_writer_finish(&writer), 0);
	if (archive)
		CHECK_INT_EQ(cpio_reader_parse(sink.data, sink.len, archive, &why), 0);
	entry = archive ? cpio_reader_find(archive, "data/source.bin") : NULL;
	CHECK(entry && entry->data_len == TEST_SOURCE_BYTES);
	for (size_t i = 0; entry && i < entry->data_len; i++)
		if (entry->data[i] != (i & 0xff)) {
			CHECK(!"payload byte differs");
			break;
		}
	remove_scratch_dir(dir);
	free(archive);
}

/* GNU cpio, an implementation that is not ours, lists what the writer wrote. Separate: a
 * machine without cpio skips it (CI installs cpio through scripts/install-deps). */
static void test_gnu_cpio_lists_archive(void)
{
	char dir[] = TEST_SCRATCH_TEMPLATE, src[PATH_MAX], out[PATH_MAX], cmd[2 * PATH_MAX],
	     listing[256] = "";
	struct cpio_writer writer;
	FILE *file;

	if (access(GNU_CPIO_PATH, X_OK) != 0)
		harness_skip_all(GNU_CPIO_PATH " is not installed (apt-get install cpio)");
	CHECK(make_source_file(dir, src, sizeof(src)));
	snprintf(out, sizeof(out), "%s/out.cpio", dir);
	sink_reset();
	cpio_writer_init(&writer, memory_sink_write, &sink, 0);
	CHECK_INT_EQ(cpio_writer_add_file_from_path(&writer, "data/source.bin", 0644, src), 0);
	CHECK_INT_EQ(cpio_writer_finish(&writer), 0);
	file = fopen(out, "wb");
	CHECK(file && fwrite(sink.data, 1, sink.len, file) == sink.len);
	if (file)
		CHECK_INT_EQ(fclose(file), 0);
	snprintf(cmd, sizeof(cmd), "%s -t --quiet < %s 2>&1", GNU_CPIO_PATH, out);
	file = popen(cmd, "r");
	CHECK(file != NULL);
	if (file) {
		size_t got = fread(listing, 1, sizeof(listing) - 1, file);

		listing[got] = '\0';
		CHECK_INT_EQ(pclose(file), 0);
	}
	CHECK_STR_EQ(listing, "data/source.bin\n");
	remove_scratch_dir(dir);
}

static void test_cpio_rejects_bad_input(void)
{
	struct cpio_writer writer;

	sink_reset();
	cpio_writer_init(&writer, memory_sink_write, &sink, 0);
	CHECK_INT_EQ(cpio_writer_add_directory(&writer, "/abs", 0755), -EINVAL);
	CHECK_INT_EQ(cpio_writer_add_directory(&writer, "", 0755), -EINVAL);
	CHECK_INT_EQ(cpio_writer_add_symlink(&writer, "link", ""), -EINVAL);
	CHECK_INT_EQ(writer.entries, 0);
	CHECK_INT_EQ(sink.len, 0);

	sink.fail_after = 1; /* the header goes out, the name does not */
	CHECK_INT_EQ(cpio_writer_add_file(&writer, "x", 0644, "y", 1), -ENOSPC);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_cpio_round_trip);
	RUN_TEST(test_cpio_file_from_path);
	RUN_TEST(test_cpio_rejects_bad_input);
	RUN_SEPARATE_TEST(test_gnu_cpio_lists_archive);
	return harness_finish();
}
