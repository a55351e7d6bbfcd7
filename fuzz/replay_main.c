/*
 * Corpus replayer: runs a libFuzzer target's LLVMFuzzerTestOneInput over files, so every fuzz
 * target's seed corpus runs as an ordinary unit test in builds without libFuzzer. Arguments
 * are files or directories (one level deep). Finding no input at all is a failure, so a
 * misplaced corpus cannot make the test pass vacuously.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data = NULL;
	long size;
	int rc = -1;

	if (!f) {
		fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		goto out;
	data = malloc(size ? (size_t)size : 1);
	if (!data || fread(data, 1, (size_t)size, f) != (size_t)size)
		goto out;
	LLVMFuzzerTestOneInput(data, (size_t)size);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "replay: cannot read %s\n", path);
	free(data);
	fclose(f);
	return rc;
}

static int replay_dir(const char *dir, int *count)
{
	struct dirent **entries;
	int n = scandir(dir, &entries, NULL, alphasort);
	int failed = 0;

	if (n < 0) {
		fprintf(stderr, "replay: cannot list %s: %s\n", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, entries[i]->d_name);
		if (entries[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			failed |= replay_file(path) < 0;
			(*count)++;
		}
		free(entries[i]);
	}
	free(entries);
	return failed ? -1 : 0;
}

int main(int argc, char **argv)
{
	int count = 0, failed = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			failed = 1;
		} else if (S_ISDIR(st.st_mode)) {
			failed |= replay_dir(argv[i], &count) < 0;
		} else {
			failed |= replay_file(argv[i]) < 0;
			count++;
		}
	}
	printf("replayed %d input(s)\n", count);
	if (count == 0) {
		fprintf(stderr, "replay: no inputs found: pass a corpus directory or files\n");
		return 1;
	}
	return failed;
}
