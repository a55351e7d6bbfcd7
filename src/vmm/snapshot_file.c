/*
 * Encoding, decoding and checking of the state file. Decoding trusts nothing: the header,
 * the total length and the checksum are checked before any section is read, and every
 * section's tag, index and length are checked before it is copied. Every refusal names what
 * is wrong and what to do, because the usual remedy (take the snapshot again, on this host)
 * is the same for most of them but the user needs to know which file is at fault.
 */
#include "vmm/snapshot_file.h"

#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FNV_OFFSET_BASIS 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
#define SNAP_FILE_MODE 0600
#define SNAP_STATE_TMP "." VM_SNAPSHOT_STATE_FILE ".tmp"
#define CPUID_LEAF_VENDOR 0
#define CPUID_LEAF_SIGNATURE 1
#define CPUID_VENDOR_LEN 12
#define CPUID_STEPPING_MASK 0xfu
#define CPUID_MODEL_SHIFT 4
#define CPUID_FAMILY_SHIFT 8
#define CPUID_NIBBLE_MASK 0xfu
#define CPUID_EXT_MODEL_SHIFT 16
#define CPUID_EXT_FAMILY_SHIFT 20
#define CPUID_EXT_FAMILY_MASK 0xffu
#define CPUID_FAMILY_EXTENDED 0xfu
#define CPUID_FAMILY_INTEL_EXT_MODEL 0x6u
#define SNAP_PAGE_BYTES 4096u
#define MIB (1024ULL * 1024ULL)

static const char *const snapshot_known_devices[] = {
	SNAPSHOT_DEVICE_SERIAL, SNAPSHOT_DEVICE_I8042, SNAPSHOT_DEVICE_VSOCK,
};

int snapshot_path(char *out, const char *dir, const char *name)
{
	int written = snprintf(out, PATH_MAX, "%s/%s", dir, name);

	return written < 0 || written >= PATH_MAX ? -ENAMETOOLONG : 0;
}

uint64_t snapshot_checksum(const void *data, size_t len)
{
	const uint8_t *bytes = data;
	uint64_t hash = FNV_OFFSET_BASIS;

	for (size_t i = 0; i < len; i++) {
		hash ^= bytes[i];
		hash *= FNV_PRIME;
	}
	return hash;
}

void snapshot_cpu_signature(char out[VM_SNAPSHOT_CPU_SIGNATURE_LEN])
{
	unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
	char vendor[CPUID_VENDOR_LEN + 1] = { 0 };

	__get_cpuid(CPUID_LEAF_VENDOR, &eax, &ebx, &ecx, &edx);
	memcpy(vendor, &ebx, sizeof(ebx));
	memcpy(vendor + 4, &edx, sizeof(edx));
	memcpy(vendor + 8, &ecx, sizeof(ecx));
	__get_cpuid(CPUID_LEAF_SIGNATURE, &eax, &ebx, &ecx, &edx);
	unsigned int family = (eax >> CPUID_FAMILY_SHIFT) & CPUID_NIBBLE_MASK;
	unsigned int model = (eax >> CPUID_MODEL_SHIFT) & CPUID_NIBBLE_MASK;

	if (family == CPUID_FAMILY_EXTENDED)
		family += (eax >> CPUID_EXT_FAMILY_SHIFT) & CPUID_EXT_FAMILY_MASK;
	if (family == CPUID_FAMILY_EXTENDED || family >= CPUID_FAMILY_EXTENDED ||
	    family == CPUID_FAMILY_INTEL_EXT_MODEL)
		model |= ((eax >> CPUID_EXT_MODEL_SHIFT) & CPUID_NIBBLE_MASK) << CPUID_MODEL_SHIFT;
	snprintf(out, VM_SNAPSHOT_CPU_SIGNATURE_LEN, "%s %u-%u-%u", vendor, family, model,
		 eax & CPUID_STEPPING_MASK);
}

int snapshot_pwrite_all(int fd, const void *data, size_t len, uint64_t offset)
{
	const uint8_t *bytes = data;

	while (len > 0) {
		ssize_t n = pwrite(fd, bytes, len, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		bytes += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

int snapshot_pread_all(int fd, void *data, size_t len, uint64_t offset)
{
	uint8_t *bytes = data;

	while (len > 0) {
		ssize_t n = pread(fd, bytes, len, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EBADMSG; /* EOF: the file is truncated */
		bytes += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

/* ---- encode ---- */

struct snapshot_writer {
	uint8_t *buf;
	size_t len;
	size_t cap;
};

static void snapshot_put(struct snapshot_writer *w, const void *data, size_t len)
{
	memcpy(w->buf + w->len, data, len);
	w->len += len;
}

static void snapshot_put_section(struct snapshot_writer *w, uint32_t tag, uint32_t index,
				 const void *data, size_t len)
{
	struct snapshot_section section = { .tag = tag, .index = index, .len = len };

	snapshot_put(w, &section, sizeof(section));
	snapshot_put(w, data, len);
}

int snapshot_encode(const struct snapshot_image *image, uint8_t **out, size_t *out_len)
{
	uint32_t vcpus = image->meta.vcpus;
	struct snapshot_writer w = { .cap = sizeof(struct snapshot_header) +
					    (vcpus + SNAPSHOT_SECTION_SERIAL + 1) *
						    sizeof(struct snapshot_section) +
					    sizeof(*image) };
	struct snapshot_header header = { .version = VM_SNAPSHOT_FORMAT_VERSION,
					  .header_size = sizeof(header) };
	bool has_vsock = image->meta.cid != 0;

	if (vcpus == 0 || vcpus > VM_MAX_VCPUS)
		return -EINVAL;
	w.buf = calloc(1, w.cap);
	if (!w.buf)
		return -ENOMEM;
	w.len = sizeof(header);
	snapshot_put_section(&w, SNAPSHOT_SECTION_META, 0, &image->meta, sizeof(image->meta));
	for (uint32_t i = 0; i < vcpus; i++)
		snapshot_put_section(&w, SNAPSHOT_SECTION_VCPU, i, &image->vcpus[i],
				     sizeof(image->vcpus[i]));
	for (uint32_t i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++)
		snapshot_put_section(&w, SNAPSHOT_SECTION_IRQCHIP, i, &image->irqchips[i],
				     sizeof(image->irqchips[i]));
	snapshot_put_section(&w, SNAPSHOT_SECTION_PIT, 0, &image->pit, sizeof(image->pit));
	snapshot_put_section(&w, SNAPSHOT_SECTION_CLOCK, 0, &image->clock, sizeof(image->clock));
	snapshot_put_section(&w, SNAPSHOT_SECTION_SERIAL, 0, &image->serial, sizeof(image->serial));
	if (has_vsock)
		snapshot_put_section(&w, SNAPSHOT_SECTION_VSOCK, 0, &image->vsock,
				     sizeof(image->vsock));
	memcpy(header.magic, SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_LEN);
	header.body_len = w.len - sizeof(header);
	header.body_checksum = snapshot_checksum(w.buf + sizeof(header), header.body_len);
	memcpy(w.buf, &header, sizeof(header));
	*out = w.buf;
	*out_len = w.len;
	return 0;
}

/* ---- decode ---- */

static size_t snapshot_section_size(uint32_t tag, const struct snapshot_image *image)
{
	switch (tag) {
	case SNAPSHOT_SECTION_META:
		return sizeof(image->meta);
	case SNAPSHOT_SECTION_VCPU:
		return sizeof(image->vcpus[0]);
	case SNAPSHOT_SECTION_IRQCHIP:
		return sizeof(image->irqchips[0]);
	case SNAPSHOT_SECTION_PIT:
		return sizeof(image->pit);
	case SNAPSHOT_SECTION_CLOCK:
		return sizeof(image->clock);
	case SNAPSHOT_SECTION_VSOCK:
		return sizeof(image->vsock);
	case SNAPSHOT_SECTION_SERIAL:
		return sizeof(image->serial);
	default:
		return 0;
	}
}

static void *snapshot_section_dest(uint32_t tag, uint32_t index, struct snapshot_image *image)
{
	switch (tag) {
	case SNAPSHOT_SECTION_META:
		return index == 0 ? &image->meta : NULL;
	case SNAPSHOT_SECTION_VCPU:
		return index < VM_MAX_VCPUS ? &image->vcpus[index] : NULL;
	case SNAPSHOT_SECTION_IRQCHIP:
		return index < SNAPSHOT_IRQCHIP_COUNT ? &image->irqchips[index] : NULL;
	case SNAPSHOT_SECTION_PIT:
		return index == 0 ? &image->pit : NULL;
	case SNAPSHOT_SECTION_CLOCK:
		return index == 0 ? &image->clock : NULL;
	case SNAPSHOT_SECTION_VSOCK:
		return index == 0 ? &image->vsock : NULL;
	case SNAPSHOT_SECTION_SERIAL:
		return index == 0 ? &image->serial : NULL;
	default:
		return NULL;
	}
}

static int snapshot_decode_header(const uint8_t *data, size_t len, struct snapshot_header *header,
				  char *err, size_t errlen)
{
	if (len < sizeof(*header)) {
		snprintf(err, errlen, "the state file is truncated (%zu bytes): take the snapshot "
			 "again", len);
		return -EBADMSG;
	}
	memcpy(header, data, sizeof(*header));
	if (memcmp(header->magic, SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_LEN) != 0) {
		snprintf(err, errlen, "the state file is not a voidbox snapshot (bad magic)");
		return -EBADMSG;
	}
	if (header->version != VM_SNAPSHOT_FORMAT_VERSION ||
	    header->header_size != sizeof(*header)) {
		snprintf(err, errlen, "the snapshot has format version %" PRIu32 ", this voidbox "
			 "reads version %u: take the snapshot again with this voidbox",
			 header->version, VM_SNAPSHOT_FORMAT_VERSION);
		return -EPROTO;
	}
	if (header->body_len != len - sizeof(*header)) {
		snprintf(err, errlen, "the state file is %s (%zu of %" PRIu64 " body bytes): take "
			 "the snapshot again", header->body_len > len - sizeof(*header) ?
			 "truncated" : "longer than recorded", len - sizeof(*header),
			 header->body_len);
		return -EBADMSG;
	}
	if (snapshot_checksum(data + sizeof(*header), header->body_len) != header->body_checksum) {
		snprintf(err, errlen, "the state file is corrupted (checksum mismatch): take the "
			 "snapshot again");
		return -EBADMSG;
	}
	return 0;
}

/* Which sections must appear exactly once (bit per tag / vCPU index). */
struct snapshot_seen {
	uint32_t tags;
	uint64_t vcpus;
	uint32_t irqchips;
};

static int snapshot_decode_section(const struct snapshot_section *section, const uint8_t *payload,
				   struct snapshot_image *image, struct snapshot_seen *seen,
				   char *err, size_t errlen)
{
	void *dest = snapshot_section_dest(section->tag, section->index, image);

	if (!dest) {
		snprintf(err, errlen, "the snapshot has a section this voidbox cannot restore "
			 "(tag %" PRIu32 ", index %" PRIu32 "): restore it with the voidbox that "
			 "took it", section->tag, section->index);
		return -EPROTO;
	}
	if (section->len != snapshot_section_size(section->tag, image)) {
		snprintf(err, errlen, "snapshot section %" PRIu32 " has %" PRIu64 " bytes, "
			 "expected %zu: take the snapshot again with this voidbox", section->tag,
			 section->len, snapshot_section_size(section->tag, image));
		return -EPROTO;
	}
	memcpy(dest, payload, section->len);
	if (section->tag == SNAPSHOT_SECTION_IRQCHIP &&
	    image->irqchips[section->index].chip_id != section->index) {
		snprintf(err, errlen, "irqchip section %" PRIu32 " describes chip %" PRIu32
			 ": take the snapshot again", section->index,
			 image->irqchips[section->index].chip_id);
		return -EBADMSG;
	}
	seen->tags |= 1u << section->tag;
	if (section->tag == SNAPSHOT_SECTION_VCPU)
		seen->vcpus |= 1ULL << section->index;
	if (section->tag == SNAPSHOT_SECTION_IRQCHIP)
		seen->irqchips |= 1u << section->index;
	return 0;
}

static int snapshot_check_complete(const struct snapshot_image *image,
				   const struct snapshot_seen *seen, char *err, size_t errlen)
{
	const struct snapshot_meta *meta = &image->meta;
	uint32_t needed = (1u << SNAPSHOT_SECTION_META) | (1u << SNAPSHOT_SECTION_PIT) |
			  (1u << SNAPSHOT_SECTION_CLOCK) | (1u << SNAPSHOT_SECTION_SERIAL);
	uint64_t vcpu_bits;

	if ((seen->tags & needed) != needed || meta->vcpus == 0 || meta->vcpus > VM_MAX_VCPUS ||
	    seen->irqchips != (1u << SNAPSHOT_IRQCHIP_COUNT) - 1u) {
		snprintf(err, errlen, "the state file lacks required sections: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	vcpu_bits = meta->vcpus == 64 ? UINT64_MAX : (1ULL << meta->vcpus) - 1;
	if (seen->vcpus != vcpu_bits || (meta->cid != 0) !=
	    ((seen->tags & (1u << SNAPSHOT_SECTION_VSOCK)) != 0)) {
		snprintf(err, errlen, "the state file's vCPU or device sections do not match its "
			 "header: take the snapshot again");
		return -EBADMSG;
	}
	if (meta->type != VM_SNAPSHOT_BASE && meta->type != VM_SNAPSHOT_DIFF) {
		snprintf(err, errlen, "unknown snapshot type %" PRIu32 ": take the snapshot again",
			 meta->type);
		return -EBADMSG;
	}
	return 0;
}

int snapshot_decode(const uint8_t *data, size_t len, struct snapshot_image *image,
		    uint64_t *id, char *err, size_t errlen)
{
	struct snapshot_header header;
	struct snapshot_seen seen = { 0 };
	int rc = snapshot_decode_header(data, len, &header, err, errlen);

	if (rc < 0)
		return rc;
	memset(image, 0, sizeof(*image));
	for (size_t pos = sizeof(header); pos < len;) {
		struct snapshot_section section;

		if (len - pos < sizeof(section)) {
			snprintf(err, errlen, "the state file ends inside a section header");
			return -EBADMSG;
		}
		memcpy(&section, data + pos, sizeof(section));
		pos += sizeof(section);
		if (section.len > len - pos) {
			snprintf(err, errlen, "a state file section runs past the end of the file");
			return -EBADMSG;
		}
		rc = snapshot_decode_section(&section, data + pos, image, &seen, err, errlen);
		if (rc < 0)
			return rc;
		pos += section.len;
	}
	image->meta.cpu_signature[sizeof(image->meta.cpu_signature) - 1] = '\0';
	image->meta.parent_dir[sizeof(image->meta.parent_dir) - 1] = '\0';
	image->meta.cmdline[sizeof(image->meta.cmdline) - 1] = '\0';
	for (size_t i = 0; i < VM_SNAPSHOT_MAX_DEVICES; i++)
		image->meta.devices[i][SNAPSHOT_DEVICE_NAME_LEN - 1] = '\0';
	*id = header.body_checksum;
	return snapshot_check_complete(image, &seen, err, errlen);
}

/* ---- files ---- */

static int snapshot_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int snapshot_file_write(const char *dir, const struct snapshot_image *image, uint64_t *id,
			char *err, size_t errlen)
{
	char tmp[PATH_MAX], final[PATH_MAX];
	uint8_t *data = NULL;
	size_t len = 0;
	int rc = snapshot_encode(image, &data, &len);
	int fd = -1;

	if (rc < 0) {
		snprintf(err, errlen, "cannot encode the snapshot state: %s", strerror(-rc));
		return rc;
	}
	rc = snapshot_path(final, dir, VM_SNAPSHOT_STATE_FILE);
	if (rc == 0)
		rc = snapshot_path(tmp, dir, SNAP_STATE_TMP);
	if (rc == 0) {
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, SNAP_FILE_MODE);
		rc = fd < 0 ? -errno : snapshot_pwrite_all(fd, data, len, 0);
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (rc == 0 && rename(tmp, final) < 0)
		rc = -errno;
	if (rc == 0)
		rc = snapshot_fsync_dir(dir);
	if (rc < 0) {
		unlink(tmp);
		snprintf(err, errlen, "cannot write %s: %s: check the directory is writable and "
			 "has space", final, strerror(-rc));
	} else {
		memcpy(id, data + offsetof(struct snapshot_header, body_checksum), sizeof(*id));
	}
	explicit_bzero(data, len);
	free(data);
	return rc;
}

static int snapshot_read_state(const char *dir, uint8_t **data, size_t *len, char *err,
			       size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	int rc = 0;

	if (snapshot_path(path, dir, VM_SNAPSHOT_STATE_FILE) < 0) {
		snprintf(err, errlen, "snapshot directory path %s is too long", dir);
		return -ENAMETOOLONG;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "no snapshot in %s (%s: %s): check the path", dir, path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SNAPSHOT_STATE_MAX_BYTES) {
		snprintf(err, errlen, "%s is not a snapshot state file (empty, too large or not a "
			 "regular file): take the snapshot again", path);
		close(fd);
		return -EBADMSG;
	}
	*len = (size_t)st.st_size;
	*data = malloc(*len);
	rc = *data ? snapshot_pread_all(fd, *data, *len, 0) : -ENOMEM;
	close(fd);
	if (rc < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
		free(*data);
		*data = NULL;
	}
	return rc;
}

static int snapshot_check_host(const struct snapshot_meta *meta, char *err, size_t errlen)
{
	char here[VM_SNAPSHOT_CPU_SIGNATURE_LEN];

	snapshot_cpu_signature(here);
	if (strcmp(here, meta->cpu_signature) != 0) {
		snprintf(err, errlen, "the snapshot was taken on a %s CPU, this host is %s: "
			 "restore it on a host with the same CPU or take it again here",
			 meta->cpu_signature, here);
		return -EXDEV;
	}
	for (uint32_t i = 0; i < meta->device_count && i < VM_SNAPSHOT_MAX_DEVICES; i++) {
		bool known = false;

		for (size_t k = 0; k < sizeof(snapshot_known_devices) / sizeof(char *); k++)
			known |= strcmp(meta->devices[i], snapshot_known_devices[k]) == 0;
		if (!known) {
			snprintf(err, errlen, "the snapshot has a '%s' device, which this VMM cannot "
				 "restore yet: boot the VM instead of restoring it", meta->devices[i]);
			return -EOPNOTSUPP;
		}
	}
	if (meta->device_count > VM_SNAPSHOT_MAX_DEVICES) {
		snprintf(err, errlen, "the snapshot lists %" PRIu32 " devices: take it again",
			 meta->device_count);
		return -EBADMSG;
	}
	return 0;
}

static int snapshot_check_memory_file(const char *dir, const struct snapshot_meta *meta,
				      char *err, size_t errlen)
{
	bool base = meta->type == VM_SNAPSHOT_BASE;
	char path[PATH_MAX];
	struct stat st;
	uint64_t expected = base ? (uint64_t)meta->memory_mb * MIB
				 : sizeof(struct snapshot_diff_header) +
					   meta->diff_pages * (sizeof(uint64_t) + SNAP_PAGE_BYTES);

	if (snapshot_path(path, dir, base ? VM_SNAPSHOT_MEMORY_FILE : VM_SNAPSHOT_DIFF_FILE) < 0) {
		snprintf(err, errlen, "snapshot directory path %s is too long", dir);
		return -ENAMETOOLONG;
	}
	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "the snapshot's memory file %s is missing: take the "
			 "snapshot again", path);
		return -ENOENT;
	}
	if ((uint64_t)st.st_size != expected || meta->memory_bytes != expected) {
		snprintf(err, errlen, "the memory file %s has %jd bytes, the state says %" PRIu64
			 ": it is truncated or belongs to another snapshot; take the snapshot again",
			 path, (intmax_t)st.st_size, expected);
		return -EBADMSG;
	}
	return 0;
}

static void snapshot_fill_info(const struct snapshot_image *image, uint64_t id, size_t len,
			       struct vm_snapshot_info *info)
{
	const struct snapshot_meta *meta = &image->meta;

	memset(info, 0, sizeof(*info));
	info->version = VM_SNAPSHOT_FORMAT_VERSION;
	info->type = (enum vm_snapshot_type)meta->type;
	info->id = id;
	snprintf(info->parent_dir, sizeof(info->parent_dir), "%s", meta->parent_dir);
	info->parent_id = meta->parent_id;
	info->memory_mb = meta->memory_mb;
	info->vcpus = meta->vcpus;
	info->cid = meta->cid;
	info->state_bytes = len;
	info->memory_bytes = meta->memory_bytes;
	info->diff_pages = meta->diff_pages;
	info->created_unix_ns = meta->created_unix_ns;
	snprintf(info->cpu_signature, sizeof(info->cpu_signature), "%s", meta->cpu_signature);
	info->device_count = meta->device_count;
	memcpy(info->devices, meta->devices, sizeof(info->devices));
}

static int snapshot_check_parent(const struct snapshot_meta *meta, char *err, size_t errlen)
{
	struct snapshot_image *parent = calloc(1, sizeof(*parent));
	struct vm_snapshot_info info;
	char parent_err[512];
	int rc;

	if (!parent)
		return -ENOMEM;
	rc = snapshot_file_read(meta->parent_dir, parent, &info, parent_err, sizeof(parent_err));
	explicit_bzero(parent->meta.secret, sizeof(parent->meta.secret));
	free(parent);
	if (rc < 0) {
		snprintf(err, errlen, "the diff's base snapshot %s is unusable (%s): restore the "
			 "base there or take a new base and diff", meta->parent_dir, parent_err);
		return rc == -ENOENT ? -ENOENT : rc;
	}
	if (info.type != VM_SNAPSHOT_BASE || info.id != meta->parent_id ||
	    info.memory_mb != meta->memory_mb) {
		snprintf(err, errlen, "the snapshot in %s is not the base this diff was taken "
			 "against (it was replaced): take a new base and diff", meta->parent_dir);
		return -ESTALE;
	}
	return 0;
}

int snapshot_file_read(const char *dir, struct snapshot_image *image,
		       struct vm_snapshot_info *info, char *err, size_t errlen)
{
	uint8_t *data = NULL;
	size_t len = 0;
	uint64_t id = 0;
	int rc = snapshot_read_state(dir, &data, &len, err, errlen);

	if (rc < 0)
		return rc;
	rc = snapshot_decode(data, len, image, &id, err, errlen);
	if (rc == 0)
		rc = snapshot_check_host(&image->meta, err, errlen);
	if (rc == 0)
		rc = snapshot_check_memory_file(dir, &image->meta, err, errlen);
	if (rc == 0 && image->meta.type == VM_SNAPSHOT_DIFF)
		rc = snapshot_check_parent(&image->meta, err, errlen);
	if (rc == 0)
		snapshot_fill_info(image, id, len, info);
	explicit_bzero(data, len);
	free(data);
	return rc;
}
