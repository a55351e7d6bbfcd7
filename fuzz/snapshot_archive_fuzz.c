/*
 * Fuzz target for what an imported snapshot archive reaches: the archive's manifest parser
 * and the archive reader around it. An input that starts with '{' is a manifest: an accepted
 * one is written out and parsed again, and both writings must be the very same text (nothing
 * the parser takes is lost or invented). Any other input is an archive file, imported into a
 * private store: whatever the import says, a refused archive must leave that store empty
 * (no snapshot directory, no temporary one), and an accepted one is removed again.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "portable/snapshot_archive.h"
#include "store/snapshot_store.h"
#include "store/store_fs.h"
#include "store/store_settings.h"

#define FUZZ_ERR_MAX 1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_home[] = "/tmp/voidbox-archive-fuzz-XXXXXX";
static char fuzz_archive[PATH_MAX];
static char fuzz_store[PATH_MAX];
static struct snapshot_archive_manifest parsed, reparsed;

static void fuzz_cleanup(void)
{
	store_remove_tree(fuzz_home);
}

static void fuzz_check_manifest(const uint8_t *data, size_t size)
{
	char err[FUZZ_ERR_MAX];
	char *text, *again;

	if (snapshot_archive_manifest_parse((const char *)data, size, &parsed, err,
					    sizeof(err)) != 0)
		return;
	text = snapshot_archive_manifest_dump(&parsed);
	if (!text || snapshot_archive_manifest_parse(text, strlen(text), &reparsed, err,
						     sizeof(err)) != 0)
		abort();
	again = snapshot_archive_manifest_dump(&reparsed);
	if (!again || strcmp(text, again) != 0)
		abort();
	free(text);
	free(again);
}

static bool fuzz_store_empty(void)
{
	DIR *dir = opendir(fuzz_store);
	struct dirent *ent;
	bool empty = true;

	if (!dir)
		return true;
	while ((ent = readdir(dir)))
		if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, ".."))
			empty = false;
	closedir(dir);
	return empty;
}

static void fuzz_check_archive(const uint8_t *data, size_t size)
{
	struct snapshot_archive_import_result result;
	char err[FUZZ_ERR_MAX];
	FILE *f;
	int rc;

	if (!fuzz_archive[0]) {
		if (!mkdtemp(fuzz_home))
			abort();
		atexit(fuzz_cleanup);
		if (store_settings_set(&(struct store_settings){ .voidbox_home = fuzz_home }) < 0)
			abort();
		snprintf(fuzz_archive, sizeof(fuzz_archive), "%s/input.vbsnap", fuzz_home);
		snprintf(fuzz_store, sizeof(fuzz_store), "%s/%s", fuzz_home, SNAPSHOT_STORE_DIR_NAME);
	}
	f = fopen(fuzz_archive, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
		abort();
	rc = snapshot_archive_import(fuzz_archive, &result, err, sizeof(err));
	if (rc != 0 && !fuzz_store_empty())
		abort();
	store_remove_tree(fuzz_store);
	unlink(fuzz_archive);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 0 && data[0] == '{')
		fuzz_check_manifest(data, size);
	else
		fuzz_check_archive(data, size);
	return 0;
}
