/*
 * bzImage payload extraction with liblzma. The setup header's payload_offset/payload_length
 * (protocol 2.08+) locate the compressed kernel inside the protected-mode part; Debian
 * compresses it with XZ (with the x86 BCJ filter, which liblzma's stream decoder handles).
 * Other compressions are refused with a message rather than guessed at.
 */
#include "vmm/vmlinux.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm/boot.h"

#define HDR_SETUP_SECTS 0x1f1
#define HDR_PAYLOAD_OFFSET 0x248
#define HDR_PAYLOAD_LENGTH 0x24c
#define SECTOR_SIZE 512
#define DEFAULT_SETUP_SECTS 4
#define XZ_MAGIC "\xfd" "7zXZ"
#define XZ_MAGIC_LEN 5
#define OUTPUT_INITIAL (64ULL * 1024 * 1024)
#define LZMA_MEMLIMIT UINT64_MAX
#define TMP_SUFFIX ".tmp"
#define FILE_MODE 0644
#define VMLINUX_CACHE_PREFIX "vmlinux-"
#define VMLINUX_CACHE_KEEP 4 /* kernels kept in the cache, most recently used first */

static uint32_t read32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static int vmlinux_payload(const uint8_t *bz, size_t size, const uint8_t **payload,
			   size_t *payload_len, char *err, size_t errlen)
{
	struct bzimage_info info;
	int rc = bzimage_parse(bz, size, &info, err, errlen);

	if (rc < 0)
		return rc;
	uint64_t offset = info.setup_size + (uint64_t)read32(bz + HDR_PAYLOAD_OFFSET);
	uint64_t length = read32(bz + HDR_PAYLOAD_LENGTH);

	if (!length || offset > size || length > size - offset) {
		snprintf(err, errlen, "bzImage payload lies outside the file: the file is damaged");
		return -EINVAL;
	}
	if (length < XZ_MAGIC_LEN || memcmp(bz + offset, XZ_MAGIC, XZ_MAGIC_LEN) != 0) {
		snprintf(err, errlen, "kernel payload is not XZ-compressed: boot the bzImage "
			 "itself, or extract its vmlinux with the kernel's scripts/extract-vmlinux");
		return -ENOEXEC;
	}
	*payload = bz + offset;
	*payload_len = length;
	return 0;
}

static int vmlinux_grow(uint8_t **buf, size_t *cap, lzma_stream *strm)
{
	size_t used = *cap - strm->avail_out;

	if (*cap >= VMLINUX_MAX_BYTES)
		return -EFBIG;
	size_t cap_new = *cap * 2;
	uint8_t *grown = realloc(*buf, cap_new);

	if (!grown)
		return -ENOMEM;
	*buf = grown;
	*cap = cap_new;
	strm->next_out = grown + used;
	strm->avail_out = cap_new - used;
	return 0;
}

int vmlinux_extract(const uint8_t *bzimage, size_t size, uint8_t **out, size_t *out_len,
		    char *err, size_t errlen)
{
	lzma_stream strm = LZMA_STREAM_INIT;
	const uint8_t *payload;
	size_t payload_len, cap = OUTPUT_INITIAL;
	uint8_t *buf = NULL;
	int rc = vmlinux_payload(bzimage, size, &payload, &payload_len, err, errlen);

	if (rc < 0)
		return rc;
	buf = malloc(cap);
	if (!buf || lzma_stream_decoder(&strm, LZMA_MEMLIMIT, 0) != LZMA_OK) {
		free(buf);
		snprintf(err, errlen, "out of memory decompressing the kernel");
		return -ENOMEM;
	}
	strm.next_in = payload;
	strm.avail_in = payload_len;
	strm.next_out = buf;
	strm.avail_out = cap;
	for (;;) {
		lzma_ret ret = lzma_code(&strm, LZMA_FINISH);

		if (ret == LZMA_STREAM_END)
			break;
		if (ret == LZMA_OK && strm.avail_out == 0) {
			rc = vmlinux_grow(&buf, &cap, &strm);
			if (rc == 0)
				continue;
		} else {
			rc = -EINVAL;
		}
		snprintf(err, errlen, "cannot decompress the kernel payload (%s): the file is "
			 "damaged or too large", rc == -EINVAL ? "corrupt XZ data" : strerror(-rc));
		free(buf);
		lzma_end(&strm);
		return rc;
	}
	*out_len = cap - strm.avail_out;
	*out = buf;
	lzma_end(&strm);
	if (!boot_is_elf(buf, *out_len)) {
		snprintf(err, errlen, "the decompressed kernel is not an ELF vmlinux");
		free(buf);
		*out = NULL;
		return -ENOEXEC;
	}
	return 0;
}

static int vmlinux_read(const char *path, uint8_t **data, size_t *size)
{
	struct stat st;
	int rc = 0, fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || (uint64_t)st.st_size > VMLINUX_MAX_BYTES) {
		close(fd);
		return -EINVAL;
	}
	*size = (size_t)st.st_size;
	*data = malloc(*size);
	if (!*data) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t done = 0; done < *size && rc == 0;) {
		ssize_t n = read(fd, *data + done, *size - done);

		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	close(fd);
	if (rc < 0) {
		free(*data);
		*data = NULL;
	}
	return rc;
}

static int vmlinux_write(const char *path, const uint8_t *data, size_t len)
{
	char tmp[4096];
	int rc = 0, fd;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s%s", path, TMP_SUFFIX) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, FILE_MODE);
	if (fd < 0)
		return -errno;
	for (size_t done = 0; done < len && rc == 0;) {
		ssize_t n = write(fd, data + done, len - done);

		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	return rc;
}

int vmlinux_extract_file(const char *bzimage_path, const char *out_path, char *err,
			 size_t errlen)
{
	uint8_t *bz = NULL, *elf = NULL;
	size_t bz_len = 0, elf_len = 0;
	int rc = vmlinux_read(bzimage_path, &bz, &bz_len);

	if (rc < 0) {
		snprintf(err, errlen, "cannot read kernel %s: %s", bzimage_path, strerror(-rc));
		return rc;
	}
	rc = vmlinux_extract(bz, bz_len, &elf, &elf_len, err, errlen);
	free(bz);
	if (rc < 0)
		return rc;
	rc = vmlinux_write(out_path, elf, elf_len);
	free(elf);
	if (rc < 0)
		snprintf(err, errlen, "cannot write %s: %s: check the directory is writable",
			 out_path, strerror(-rc));
	return rc;
}

/* mkdir -p: every missing directory of path, mode 0755. */
static int vmlinux_mkdir_parents(const char *path)
{
	char partial[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(partial))
		return -ENAMETOOLONG;
	memcpy(partial, path, len + 1);
	for (char *slash = strchr(partial + 1, '/');; slash = strchr(slash + 1, '/')) {
		if (slash)
			*slash = '\0';
		if (mkdir(partial, 0755) < 0 && errno != EEXIST)
			return -errno;
		if (!slash)
			return 0;
		*slash = '/';
	}
}

struct vmlinux_cache_entry {
	char name[NAME_MAX + 1];
	struct timespec used;
};

static int vmlinux_cache_newest_first(const void *a, const void *b)
{
	const struct timespec *x = &((const struct vmlinux_cache_entry *)a)->used;
	const struct timespec *y = &((const struct vmlinux_cache_entry *)b)->used;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? 1 : -1;
	if (x->tv_nsec != y->tv_nsec)
		return x->tv_nsec < y->tv_nsec ? 1 : -1;
	return 0;
}

/*
 * Keeps the keep most recently used kernels of the cache and removes the rest. Entries are
 * named after their bzImage's size and mtime, so every rebuilt image (same kernel, new mtime)
 * adds one of ~60 MB; without pruning they piled up forever. A cache hit refreshes an
 * entry's mtime, so the kernels in use are the ones kept.
 */
static void vmlinux_cache_prune(const char *cache_dir, size_t keep)
{
	struct vmlinux_cache_entry *entries = NULL;
	size_t count = 0, cap = 0;
	struct dirent *ent;
	DIR *dir = opendir(cache_dir);

	if (!dir)
		return;
	while ((ent = readdir(dir))) {
		struct stat st;

		if (strncmp(ent->d_name, VMLINUX_CACHE_PREFIX, strlen(VMLINUX_CACHE_PREFIX)) != 0 ||
		    strstr(ent->d_name, TMP_SUFFIX) ||
		    fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (count == cap) {
			size_t grown = cap ? cap * 2 : VMLINUX_CACHE_KEEP * 2;
			struct vmlinux_cache_entry *more = realloc(entries, grown * sizeof(*more));

			if (!more)
				break;
			entries = more;
			cap = grown;
		}
		snprintf(entries[count].name, sizeof(entries[count].name), "%s", ent->d_name);
		entries[count++].used = st.st_mtim;
	}
	if (count > keep) {
		qsort(entries, count, sizeof(*entries), vmlinux_cache_newest_first);
		for (size_t i = keep; i < count; i++)
			(void)unlinkat(dirfd(dir), entries[i].name, 0);
	}
	closedir(dir);
	free(entries);
}

int vmlinux_cache_path(const char *cache_dir, const char *kernel_path, char *out, size_t len)
{
	struct stat st;

	if (stat(kernel_path, &st) < 0)
		return -errno;
	if ((size_t)snprintf(out, len, "%s/" VMLINUX_CACHE_PREFIX "%jd-%jd.%09ld", cache_dir,
			     (intmax_t)st.st_size,
			     (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int vmlinux_cache_prepare(const char *cache_dir, const char *kernel_path, char *out, size_t len,
			  char *err, size_t errlen)
{
	int rc = vmlinux_cache_path(cache_dir, kernel_path, out, len);

	if (rc < 0) {
		snprintf(err, errlen, "cannot use kernel %s: %s", kernel_path, strerror(-rc));
		return rc;
	}
	if (access(out, R_OK) == 0) {
		/* the use time the pruning below goes by; a read-only cache just stays as it is */
		(void)utimensat(AT_FDCWD, out, NULL, 0);
		return 0;
	}
	rc = vmlinux_mkdir_parents(cache_dir);
	if (rc < 0) {
		snprintf(err, errlen, "cannot create the kernel cache %s: %s", cache_dir,
			 strerror(-rc));
		return rc;
	}
	rc = vmlinux_extract_file(kernel_path, out, err, errlen);
	if (rc == 0)
		vmlinux_cache_prune(cache_dir, VMLINUX_CACHE_KEEP);
	return rc;
}
