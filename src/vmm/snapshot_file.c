/*
 * Encoding, decoding and checking of the state file. Decoding trusts nothing: the header,
 * the total length and the body's SHA-256 (which also gives the snapshot its id, so an id
 * names exactly one state) are checked before any section is read; every section's name,
 * version, instance, length and FNV-1a checksum (which names the damaged section) are
 * checked before its payload is used, a section seen twice is refused, and a diff's base is
 * read without following any parent of its own (a base never has one), so no chain of files
 * can recurse. Every refusal names what is wrong and what to do, because the usual remedy
 * (take the snapshot again, on this host) is the same for most of them but the user needs to
 * know which file is at fault.
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

#include "common/fd_io.h"
#include "common/sha256.h"

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
/* A diff of more pages than a 1 TiB guest has is not one of ours. */
#define SNAPSHOT_MAX_DIFF_PAGES (1ULL << 28)

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


/* ---- images ---- */

int snapshot_image_add_device(struct snapshot_image *image, const char *name, uint32_t version,
			      const uint8_t *state, size_t state_len)
{
	struct snapshot_device_state *device;

	if (image->device_count >= VM_MAX_DEVICES || strlen(name) >= VM_DEVICE_NAME_MAX)
		return -ENOSPC;
	device = &image->devices[image->device_count];
	device->state = malloc(state_len ? state_len : 1);
	if (!device->state)
		return -ENOMEM;
	if (state_len)
		memcpy(device->state, state, state_len);
	device->state_len = state_len;
	device->version = version;
	snprintf(device->name, sizeof(device->name), "%s", name);
	image->device_count++;
	return 0;
}

void snapshot_image_release(struct snapshot_image *image)
{
	for (size_t i = 0; i < image->device_count && i < VM_MAX_DEVICES; i++)
		free(image->devices[i].state);
	image->device_count = 0;
	memset(image->devices, 0, sizeof(image->devices));
	explicit_bzero(image->meta.secret, sizeof(image->meta.secret));
}

/* ---- encode ---- */

static void snapshot_encode_meta(struct byte_writer *w, const struct snapshot_meta *meta)
{
	byte_writer_u32(w, meta->type);
	byte_writer_u32(w, meta->memory_mb);
	byte_writer_u32(w, meta->vcpus);
	byte_writer_u64(w, meta->cid);
	byte_writer_u64(w, meta->created_unix_ns);
	byte_writer_u64(w, meta->parent_id);
	byte_writer_u64(w, meta->memory_bytes);
	byte_writer_u64(w, meta->diff_pages);
	byte_writer_string(w, meta->cpu_signature);
	byte_writer_string(w, meta->parent_dir);
	byte_writer_bytes(w, meta->secret, sizeof(meta->secret));
	byte_writer_string(w, meta->cmdline);
	/* Last and optional, so state files written before the field existed still read. */
	for (unsigned int i = 0; meta->has_cpu_features && i < CPU_FEATURE_REG_COUNT; i++)
		byte_writer_u32(w, meta->cpu_features.regs[i]);
}

/* One section: name, version, instance, payload length and checksum, payload. */
static void snapshot_put_section(struct byte_writer *w, const char *name, uint32_t version,
				 uint32_t instance, const void *payload, size_t len)
{
	size_t name_len = strlen(name);

	byte_writer_u8(w, (uint8_t)name_len);
	byte_writer_bytes(w, name, name_len);
	byte_writer_u32(w, version);
	byte_writer_u32(w, instance);
	byte_writer_u64(w, len);
	byte_writer_u64(w, snapshot_checksum(payload, len));
	byte_writer_bytes(w, payload, len);
}

static void snapshot_put_header(struct byte_writer *w, uint64_t body_len,
				const uint8_t body_sha256[SHA256_DIGEST_SIZE])
{
	byte_writer_bytes(w, SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_LEN);
	byte_writer_u32(w, VM_SNAPSHOT_FORMAT_VERSION);
	byte_writer_u32(w, SNAPSHOT_HEADER_SIZE);
	byte_writer_u64(w, body_len);
	byte_writer_bytes(w, body_sha256, SHA256_DIGEST_SIZE);
}

/* A snapshot's id: the first 8 bytes of its body's SHA-256, read little-endian. */
static uint64_t snapshot_id_of(const uint8_t body_sha256[SHA256_DIGEST_SIZE])
{
	struct byte_reader r;

	byte_reader_init(&r, body_sha256, sizeof(uint64_t));
	return byte_reader_u64(&r);
}

static void snapshot_encode_body(struct byte_writer *body, const struct snapshot_image *image)
{
	struct byte_writer meta;

	byte_writer_init(&meta);
	snapshot_encode_meta(&meta, &image->meta);
	if (byte_writer_failed(&meta))
		body->failed = true;
	else
		snapshot_put_section(body, SNAPSHOT_SECTION_META, SNAPSHOT_VM_SECTION_VERSION, 0,
				     meta.data, meta.len);
	explicit_bzero(meta.data, meta.len);
	byte_writer_free(&meta);
	for (uint32_t i = 0; i < image->meta.vcpus; i++)
		snapshot_put_section(body, SNAPSHOT_SECTION_VCPU, SNAPSHOT_VM_SECTION_VERSION, i,
				     &image->vcpus[i], sizeof(image->vcpus[i]));
	for (uint32_t i = 0; i < SNAPSHOT_IRQCHIP_COUNT; i++)
		snapshot_put_section(body, SNAPSHOT_SECTION_IRQCHIP, SNAPSHOT_VM_SECTION_VERSION, i,
				     &image->irqchips[i], sizeof(image->irqchips[i]));
	snapshot_put_section(body, SNAPSHOT_SECTION_PIT, SNAPSHOT_VM_SECTION_VERSION, 0,
			     &image->pit, sizeof(image->pit));
	snapshot_put_section(body, SNAPSHOT_SECTION_CLOCK, SNAPSHOT_VM_SECTION_VERSION, 0,
			     &image->clock, sizeof(image->clock));
	for (size_t i = 0; i < image->device_count; i++)
		snapshot_put_section(body, image->devices[i].name, image->devices[i].version,
				     (uint32_t)i, image->devices[i].state,
				     image->devices[i].state_len);
}

int snapshot_encode(const struct snapshot_image *image, uint8_t **out, size_t *out_len)
{
	struct byte_writer body, file;
	int rc = 0;

	if (image->meta.vcpus == 0 || image->meta.vcpus > VM_MAX_VCPUS ||
	    image->device_count > VM_MAX_DEVICES)
		return -EINVAL;
	byte_writer_init(&body);
	byte_writer_init(&file);
	snapshot_encode_body(&body, image);
	if (!byte_writer_failed(&body)) {
		uint8_t body_sha256[SHA256_DIGEST_SIZE];

		sha256_digest(body.data, body.len, body_sha256);
		snapshot_put_header(&file, body.len, body_sha256);
		byte_writer_bytes(&file, body.data, body.len);
	}
	if (byte_writer_failed(&body) || byte_writer_failed(&file)) {
		rc = -ENOMEM;
		byte_writer_free(&file);
	} else {
		*out = file.data;
		*out_len = file.len;
	}
	if (body.data)
		explicit_bzero(body.data, body.len);
	byte_writer_free(&body);
	return rc;
}

/* ---- decode ---- */

struct snapshot_header {
	char magic[SNAPSHOT_MAGIC_LEN];
	uint32_t version;
	uint32_t header_size;
	uint64_t body_len;
	uint8_t body_sha256[SHA256_DIGEST_SIZE]; /* its first 8 bytes are the snapshot's id */
};

static int snapshot_decode_header(const uint8_t *data, size_t len, enum snapshot_decode_mode mode,
				  struct snapshot_header *header, char *err, size_t errlen)
{
	struct byte_reader r;

	if (len < SNAPSHOT_HEADER_SIZE) {
		snprintf(err, errlen, "the state file is truncated (%zu bytes): take the snapshot "
			 "again", len);
		return -EBADMSG;
	}
	byte_reader_init(&r, data, SNAPSHOT_HEADER_SIZE);
	byte_reader_bytes(&r, header->magic, SNAPSHOT_MAGIC_LEN);
	header->version = byte_reader_u32(&r);
	header->header_size = byte_reader_u32(&r);
	header->body_len = byte_reader_u64(&r);
	byte_reader_bytes(&r, header->body_sha256, sizeof(header->body_sha256));
	if (memcmp(header->magic, SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_LEN) != 0) {
		snprintf(err, errlen, "the state file is not a voidbox snapshot (bad magic)");
		return -EBADMSG;
	}
	if (header->version != VM_SNAPSHOT_FORMAT_VERSION ||
	    header->header_size != SNAPSHOT_HEADER_SIZE) {
		snprintf(err, errlen, "the snapshot has format version %" PRIu32 ", this voidbox "
			 "reads version %u: re-create this snapshot with this voidbox",
			 header->version, VM_SNAPSHOT_FORMAT_VERSION);
		return -EPROTO;
	}
	if (header->body_len != len - SNAPSHOT_HEADER_SIZE) {
		snprintf(err, errlen, "the state file is %s (%zu of %" PRIu64 " body bytes): take "
			 "the snapshot again", header->body_len > len - SNAPSHOT_HEADER_SIZE ?
			 "truncated" : "longer than recorded", len - SNAPSHOT_HEADER_SIZE,
			 header->body_len);
		return -EBADMSG;
	}
	if (mode == SNAPSHOT_DECODE_CHECKED) {
		uint8_t body_sha256[SHA256_DIGEST_SIZE];

		sha256_digest(data + SNAPSHOT_HEADER_SIZE, header->body_len, body_sha256);
		if (memcmp(body_sha256, header->body_sha256, sizeof(body_sha256)) != 0) {
			snprintf(err, errlen, "the state file is corrupted (its SHA-256 does not "
				 "match the one in its header): take the snapshot again");
			return -EBADMSG;
		}
	}
	return 0;
}

struct snapshot_section {
	char name[VM_DEVICE_NAME_MAX];
	uint32_t version;
	uint32_t instance;
	const uint8_t *payload;
	size_t len;
};

/* Which of the VM's own sections were seen (each exactly once). */
struct snapshot_seen {
	bool meta, pit, clock;
	uint64_t vcpus;
	uint32_t irqchips;
};

static int snapshot_next_section(struct byte_reader *r, enum snapshot_decode_mode mode,
				 struct snapshot_section *section, char *err, size_t errlen)
{
	uint8_t name_len = byte_reader_u8(r);
	uint64_t len, checksum;

	if (name_len == 0 || name_len >= VM_DEVICE_NAME_MAX) {
		snprintf(err, errlen, "a state file section has a %u-byte name: take the snapshot "
			 "again", name_len);
		return -EBADMSG;
	}
	byte_reader_bytes(r, section->name, name_len);
	section->name[name_len] = '\0';
	section->version = byte_reader_u32(r);
	section->instance = byte_reader_u32(r);
	len = byte_reader_u64(r);
	checksum = byte_reader_u64(r);
	section->payload = len <= byte_reader_remaining(r) ? byte_reader_view(r, (size_t)len) : NULL;
	section->len = (size_t)len;
	if (!section->payload) {
		snprintf(err, errlen, "a state file section runs past the end of the file");
		return -EBADMSG;
	}
	if (strlen(section->name) != name_len) {
		snprintf(err, errlen, "a state file section's name holds a NUL byte");
		return -EBADMSG;
	}
	if (mode == SNAPSHOT_DECODE_CHECKED &&
	    snapshot_checksum(section->payload, section->len) != checksum) {
		snprintf(err, errlen, "snapshot section '%s' is corrupted (checksum mismatch): take "
			 "the snapshot again", section->name);
		return -EBADMSG;
	}
	return 0;
}

static int snapshot_decode_meta(const struct snapshot_section *section,
				struct snapshot_meta *meta)
{
	struct byte_reader r;

	byte_reader_init(&r, section->payload, section->len);
	meta->type = byte_reader_u32(&r);
	meta->memory_mb = byte_reader_u32(&r);
	meta->vcpus = byte_reader_u32(&r);
	meta->cid = byte_reader_u64(&r);
	meta->created_unix_ns = byte_reader_u64(&r);
	meta->parent_id = byte_reader_u64(&r);
	meta->memory_bytes = byte_reader_u64(&r);
	meta->diff_pages = byte_reader_u64(&r);
	byte_reader_string(&r, meta->cpu_signature, sizeof(meta->cpu_signature));
	byte_reader_string(&r, meta->parent_dir, sizeof(meta->parent_dir));
	byte_reader_bytes(&r, meta->secret, sizeof(meta->secret));
	byte_reader_string(&r, meta->cmdline, sizeof(meta->cmdline));
	meta->has_cpu_features = byte_reader_remaining(&r) > 0;
	for (unsigned int i = 0; meta->has_cpu_features && i < CPU_FEATURE_REG_COUNT; i++)
		meta->cpu_features.regs[i] = byte_reader_u32(&r);
	return byte_reader_finish(&r);
}

/*
 * One of the VM's own sections: its fixed-size payload goes to dest (KVM's own structures,
 * whose layout is the KVM ABI), once per instance.
 */
static int snapshot_take_fixed(const struct snapshot_section *section, void *dest,
			       size_t size, char *err, size_t errlen)
{
	if (section->len != size) {
		snprintf(err, errlen, "snapshot section '%s' has %zu bytes, expected %zu: "
			 "re-create this snapshot with this voidbox", section->name, section->len,
			 size);
		return -EPROTO;
	}
	memcpy(dest, section->payload, size);
	return 0;
}

static int snapshot_refuse_duplicate(const struct snapshot_section *section, char *err,
				     size_t errlen)
{
	snprintf(err, errlen, "snapshot section '%s' (instance %" PRIu32 ") appears twice or out "
		 "of range: take the snapshot again", section->name, section->instance);
	return -EBADMSG;
}

static int snapshot_decode_vm_section(const struct snapshot_section *section,
				      struct snapshot_image *image, struct snapshot_seen *seen,
				      char *err, size_t errlen)
{
	const char *name = section->name;
	uint32_t index = section->instance;
	int rc;

	if (strcmp(name, SNAPSHOT_SECTION_META) == 0) {
		if (seen->meta || index != 0)
			return snapshot_refuse_duplicate(section, err, errlen);
		seen->meta = true;
		if (snapshot_decode_meta(section, &image->meta) < 0) {
			snprintf(err, errlen, "the snapshot's metadata is malformed: take the "
				 "snapshot again");
			return -EBADMSG;
		}
		return 0;
	}
	if (strcmp(name, SNAPSHOT_SECTION_VCPU) == 0) {
		if (index >= VM_MAX_VCPUS || (seen->vcpus & (1ULL << index)))
			return snapshot_refuse_duplicate(section, err, errlen);
		seen->vcpus |= 1ULL << index;
		rc = snapshot_take_fixed(section, &image->vcpus[index], sizeof(image->vcpus[0]),
					 err, errlen);
		if (rc == 0 && image->vcpus[index].msr_count > VCPU_STATE_MAX_MSRS) {
			snprintf(err, errlen, "vCPU %" PRIu32 " lists %" PRIu32 " MSRs, at most %d "
				 "fit: take the snapshot again", index,
				 image->vcpus[index].msr_count, VCPU_STATE_MAX_MSRS);
			rc = -EBADMSG;
		}
		return rc;
	}
	if (strcmp(name, SNAPSHOT_SECTION_IRQCHIP) == 0) {
		if (index >= SNAPSHOT_IRQCHIP_COUNT || (seen->irqchips & (1u << index)))
			return snapshot_refuse_duplicate(section, err, errlen);
		seen->irqchips |= 1u << index;
		rc = snapshot_take_fixed(section, &image->irqchips[index],
					 sizeof(image->irqchips[0]), err, errlen);
		if (rc == 0 && image->irqchips[index].chip_id != index) {
			snprintf(err, errlen, "irqchip section %" PRIu32 " describes chip %" PRIu32
				 ": take the snapshot again", index,
				 image->irqchips[index].chip_id);
			rc = -EBADMSG;
		}
		return rc;
	}
	bool pit = strcmp(name, SNAPSHOT_SECTION_PIT) == 0;
	bool *seen_flag = pit ? &seen->pit : &seen->clock;

	if (*seen_flag || index != 0)
		return snapshot_refuse_duplicate(section, err, errlen);
	*seen_flag = true;
	return pit ? snapshot_take_fixed(section, &image->pit, sizeof(image->pit), err, errlen)
		   : snapshot_take_fixed(section, &image->clock, sizeof(image->clock), err,
					 errlen);
}

static bool snapshot_is_vm_section(const char *name)
{
	return strcmp(name, SNAPSHOT_SECTION_META) == 0 ||
	       strcmp(name, SNAPSHOT_SECTION_VCPU) == 0 ||
	       strcmp(name, SNAPSHOT_SECTION_IRQCHIP) == 0 ||
	       strcmp(name, SNAPSHOT_SECTION_PIT) == 0 || strcmp(name, SNAPSHOT_SECTION_CLOCK) == 0;
}

/* A device section: a device kind this build knows, no newer than it writes, in order. */
static int snapshot_decode_device_section(const struct snapshot_section *section,
					  struct snapshot_image *image, char *err,
					  size_t errlen)
{
	const struct vm_device_type *type = vm_device_type_find(section->name);

	if (!type) {
		snprintf(err, errlen, "the snapshot has a '%s' device, which this voidbox does not "
			 "know: restore it with the voidbox that took it, or re-create it",
			 section->name);
		return -EOPNOTSUPP;
	}
	if (section->version > type->ops->state_version || section->version == 0) {
		snprintf(err, errlen, "the snapshot's '%s' device state has version %" PRIu32
			 ", this voidbox reads up to %" PRIu32 ": restore it with the voidbox that "
			 "took it", section->name, section->version, type->ops->state_version);
		return -EPROTO;
	}
	if (section->instance != image->device_count)
		return snapshot_refuse_duplicate(section, err, errlen);
	if (snapshot_image_add_device(image, section->name, section->version, section->payload,
				      section->len) < 0) {
		snprintf(err, errlen, "the snapshot has more than %d devices: take it again",
			 VM_MAX_DEVICES);
		return -EBADMSG;
	}
	return 0;
}

static int snapshot_check_complete(const struct snapshot_image *image,
				   const struct snapshot_seen *seen, char *err, size_t errlen)
{
	const struct snapshot_meta *meta = &image->meta;
	uint64_t vcpu_bits;

	if (!seen->meta || !seen->pit || !seen->clock || meta->vcpus == 0 ||
	    meta->vcpus > VM_MAX_VCPUS || seen->irqchips != (1u << SNAPSHOT_IRQCHIP_COUNT) - 1u) {
		snprintf(err, errlen, "the state file lacks required sections: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	vcpu_bits = meta->vcpus == 64 ? UINT64_MAX : (1ULL << meta->vcpus) - 1;
	if (seen->vcpus != vcpu_bits) {
		snprintf(err, errlen, "the state file's vCPU sections do not match its header: "
			 "take the snapshot again");
		return -EBADMSG;
	}
	if (meta->type != VM_SNAPSHOT_BASE && meta->type != VM_SNAPSHOT_DIFF) {
		snprintf(err, errlen, "unknown snapshot type %" PRIu32 ": take the snapshot again",
			 meta->type);
		return -EBADMSG;
	}
	return 0;
}

static int snapshot_decode_sections(const uint8_t *data, size_t len,
				    enum snapshot_decode_mode mode, struct snapshot_image *image,
				    char *err, size_t errlen)
{
	struct snapshot_seen seen = { 0 };
	struct byte_reader r;
	int rc = 0;

	byte_reader_init(&r, data, len);
	while (rc == 0 && byte_reader_remaining(&r) > 0) {
		struct snapshot_section section;

		rc = snapshot_next_section(&r, mode, &section, err, errlen);
		if (rc == 0 && snapshot_is_vm_section(section.name)) {
			if (section.version != SNAPSHOT_VM_SECTION_VERSION) {
				snprintf(err, errlen, "snapshot section '%s' has version %" PRIu32
					 ": re-create this snapshot with this voidbox",
					 section.name, section.version);
				rc = -EPROTO;
			} else {
				rc = snapshot_decode_vm_section(&section, image, &seen, err,
								errlen);
			}
		} else if (rc == 0) {
			rc = snapshot_decode_device_section(&section, image, err, errlen);
		}
	}
	return rc == 0 ? snapshot_check_complete(image, &seen, err, errlen) : rc;
}

int snapshot_decode(const uint8_t *data, size_t len, enum snapshot_decode_mode mode,
		    struct snapshot_image *image, uint64_t *id, char *err, size_t errlen)
{
	struct snapshot_header header;
	int rc;

	snapshot_image_release(image);
	memset(image, 0, sizeof(*image));
	rc = snapshot_decode_header(data, len, mode, &header, err, errlen);
	if (rc == 0)
		rc = snapshot_decode_sections(data + SNAPSHOT_HEADER_SIZE, header.body_len, mode,
					      image, err, errlen);
	if (rc < 0) {
		snapshot_image_release(image);
		return rc;
	}
	*id = snapshot_id_of(header.body_sha256);
	return 0;
}

/* ---- files ---- */

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
		rc = fd < 0 ? -errno : fd_pwrite_full(fd, data, len, 0);
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (rc == 0 && rename(tmp, final) < 0)
		rc = -errno;
	if (rc == 0)
		rc = fsync_dir(dir);
	if (rc < 0) {
		unlink(tmp);
		snprintf(err, errlen, "cannot write %s: %s: check the directory is writable and "
			 "has space", final, strerror(-rc));
	} else {
		*id = snapshot_id_of(data + SNAPSHOT_BODY_HASH_OFFSET);
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
	rc = *data ? fd_pread_full(fd, *data, *len, 0) : -ENOMEM;
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
		snprintf(err, errlen, "the snapshot was taken on CPU %s, this host's is %s: "
			 "restore it on a host with the same CPU or take it again here",
			 meta->cpu_signature, here);
		return -EXDEV;
	}
	return 0;
}

uint64_t snapshot_memory_file_size(const struct snapshot_meta *meta)
{
	if (meta->type == VM_SNAPSHOT_BASE)
		return (uint64_t)meta->memory_mb * MIB;
	if (meta->diff_pages > SNAPSHOT_MAX_DIFF_PAGES)
		return 0;
	return sizeof(struct snapshot_diff_header) +
	       meta->diff_pages * (sizeof(uint64_t) + SNAP_PAGE_BYTES);
}

static int snapshot_check_memory_file(const char *dir, const struct snapshot_meta *meta,
				      char *err, size_t errlen)
{
	bool base = meta->type == VM_SNAPSHOT_BASE;
	char path[PATH_MAX];
	struct stat st;
	uint64_t expected = snapshot_memory_file_size(meta);

	if (snapshot_path(path, dir, base ? VM_SNAPSHOT_MEMORY_FILE : VM_SNAPSHOT_DIFF_FILE) < 0) {
		snprintf(err, errlen, "snapshot directory path %s is too long", dir);
		return -ENAMETOOLONG;
	}
	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "the snapshot's memory file %s is missing: take the "
			 "snapshot again", path);
		return -ENOENT;
	}
	if (expected == 0 || (uint64_t)st.st_size != expected || meta->memory_bytes != expected) {
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
	info->has_cpu_features = meta->has_cpu_features;
	info->cpu_features = meta->cpu_features;
	info->device_count = (unsigned int)image->device_count;
	for (size_t i = 0; i < image->device_count && i < VM_SNAPSHOT_MAX_DEVICES; i++)
		snprintf(info->devices[i], sizeof(info->devices[i]), "%s", image->devices[i].name);
}

/* Reads and checks one snapshot directory without looking at any parent it names. */
static int snapshot_read_one(const char *dir, struct snapshot_image *image, uint64_t *id,
			     size_t *state_len, char *err, size_t errlen)
{
	uint8_t *data = NULL;
	size_t len = 0;
	int rc = snapshot_read_state(dir, &data, &len, err, errlen);

	if (rc < 0)
		return rc;
	rc = snapshot_decode(data, len, SNAPSHOT_DECODE_CHECKED, image, id, err, errlen);
	if (rc == 0)
		rc = snapshot_check_host(&image->meta, err, errlen);
	if (rc == 0)
		rc = snapshot_check_memory_file(dir, &image->meta, err, errlen);
	*state_len = len;
	explicit_bzero(data, len);
	free(data);
	return rc;
}

/* A diff's parent must be the very base it was taken against: a base, never another diff. */
static int snapshot_check_parent(const struct snapshot_meta *meta, char *err, size_t errlen)
{
	struct snapshot_image *parent = calloc(1, sizeof(*parent));
	char parent_err[512];
	uint64_t id = 0;
	size_t len = 0;
	int rc;

	if (!parent)
		return -ENOMEM;
	rc = snapshot_read_one(meta->parent_dir, parent, &id, &len, parent_err,
			       sizeof(parent_err));
	if (rc < 0) {
		snprintf(err, errlen, "the diff's base snapshot %s is unusable (%s): restore the "
			 "base there or take a new base and diff", meta->parent_dir, parent_err);
	} else if (parent->meta.type != VM_SNAPSHOT_BASE || id != meta->parent_id ||
		   parent->meta.memory_mb != meta->memory_mb) {
		snprintf(err, errlen, "the snapshot in %s is not the base this diff was taken "
			 "against (it was replaced, or is itself a diff): take a new base and diff",
			 meta->parent_dir);
		rc = -ESTALE;
	}
	snapshot_image_release(parent);
	free(parent);
	return rc;
}

int snapshot_file_read(const char *dir, struct snapshot_image *image,
		       struct vm_snapshot_info *info, char *err, size_t errlen)
{
	uint64_t id = 0;
	size_t len = 0;
	int rc = snapshot_read_one(dir, image, &id, &len, err, errlen);

	if (rc == 0 && image->meta.type == VM_SNAPSHOT_DIFF)
		rc = snapshot_check_parent(&image->meta, err, errlen);
	if (rc == 0)
		snapshot_fill_info(image, id, len, info);
	return rc;
}
