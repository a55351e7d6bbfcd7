/*
 * The snapshot state file as bytes: a fixed header and a list of tagged sections, each
 * written field by field in little-endian (layout in docs/snapshot-format.md). The VM's own
 * sections (meta, vCPUs, irqchip, PIT, clock) are decoded here; each device's section is
 * kept as bytes with its name and version and handed to that device on restore. Split from
 * snapshot.c so the parser, the part a corrupted or hostile file reaches, is unit-tested and
 * fuzzed without KVM.
 */
#ifndef VOIDBOX_VMM_SNAPSHOT_FILE_H
#define VOIDBOX_VMM_SNAPSHOT_FILE_H

#include <limits.h>
#include <linux/kvm.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/cmdline.h"
#include "vmm/cpu_features.h"
#include "vmm/device.h"
#include "vmm/snapshot.h"
#include "vmm/vcpu_state.h"
#include "vmm/vm.h"

#define SNAPSHOT_MAGIC "VBOXSNAP"
#define SNAPSHOT_MAGIC_LEN 8
/* magic, version, header size, body length, then the body's SHA-256 */
#define SNAPSHOT_HEADER_SIZE 56u
#define SNAPSHOT_BODY_HASH_OFFSET 24u
#define SNAPSHOT_DIFF_MAGIC 0x3146464944584f42ULL /* "BOXDIFF1" little-endian */
#define SNAPSHOT_IRQCHIP_COUNT 3
/* A state file is a few KiB per vCPU; anything far larger is not one of ours. */
#define SNAPSHOT_STATE_MAX_BYTES (64u * 1024u * 1024u)
/* The VM's own sections; a device's section carries the device's name. */
#define SNAPSHOT_SECTION_META "vm.meta"
#define SNAPSHOT_SECTION_VCPU "vm.vcpu"
#define SNAPSHOT_SECTION_IRQCHIP "vm.irqchip"
#define SNAPSHOT_SECTION_PIT "vm.pit"
#define SNAPSHOT_SECTION_CLOCK "vm.clock"
#define SNAPSHOT_VM_SECTION_VERSION 1u

struct snapshot_meta {
	uint32_t type;
	uint32_t memory_mb;
	uint32_t vcpus;
	uint64_t cid;
	uint64_t created_unix_ns;
	uint64_t parent_id;
	uint64_t memory_bytes;
	uint64_t diff_pages;
	char cpu_signature[VM_SNAPSHOT_CPU_SIGNATURE_LEN];
	char parent_dir[PATH_MAX];
	uint8_t secret[VM_SECRET_LEN];
	char cmdline[CMDLINE_MAX];
	/* The CPU features the guest was shown; absent in state files written before they were recorded. */
	bool has_cpu_features;
	struct cpu_features cpu_features;
};

/* One device's section: its bytes are the device's own (malloc'ed, freed with the image). */
struct snapshot_device_state {
	char name[VM_DEVICE_NAME_MAX];
	uint32_t version;
	uint8_t *state;
	size_t state_len;
};

struct snapshot_diff_header {
	uint64_t magic;
	uint64_t page_count;
};

struct guest_memory;
/*
 * Copies a diff file's pages (path) over mem's private mappings, a run of consecutive pages
 * per read. The header must list exactly expected_pages (from the verified state file) and
 * the file must hold them all. 0, -errno, or -EBADMSG for a malformed or truncated diff or a
 * page outside guest RAM (src/vmm/snapshot.c).
 */
int snapshot_overlay_diff(struct guest_memory *mem, const char *path, uint64_t expected_pages);

/* Everything a state file holds, decoded. Release with snapshot_image_release. */
struct snapshot_image {
	struct snapshot_meta meta;
	struct vcpu_state vcpus[VM_MAX_VCPUS];
	struct kvm_irqchip irqchips[SNAPSHOT_IRQCHIP_COUNT];
	struct kvm_pit_state2 pit;
	struct kvm_clock_data clock;
	size_t device_count;
	struct snapshot_device_state devices[VM_MAX_DEVICES];
};

/* How strictly snapshot_decode reads. */
enum snapshot_decode_mode {
	SNAPSHOT_DECODE_CHECKED,	  /* every checksum must match: all real reads */
	SNAPSHOT_DECODE_IGNORE_CHECKSUMS, /* fuzzing only: reach the section parser */
};

/* dir/name into out (PATH_MAX bytes); -ENAMETOOLONG when it does not fit. */
int snapshot_path(char *out, const char *dir, const char *name);
/* FNV-1a 64: each section's and the working-set list's check against accidents. */
uint64_t snapshot_checksum(const void *data, size_t len);
/* "vendor family-model-stepping" of this host's CPU. */
void snapshot_cpu_signature(char out[VM_SNAPSHOT_CPU_SIGNATURE_LEN]);

/* Appends a copy of a device's section to image. 0, -ENOSPC or -ENOMEM. */
int snapshot_image_add_device(struct snapshot_image *image, const char *name, uint32_t version,
			      const uint8_t *state, size_t state_len);
/* Frees the device sections and wipes the secret; the image can be reused. */
void snapshot_image_release(struct snapshot_image *image);

/* Encodes image into a malloc'ed buffer (header included). Returns 0, -EINVAL or -ENOMEM. */
int snapshot_encode(const struct snapshot_image *image, uint8_t **out, size_t *out_len);
/*
 * Decodes and checks a state file's bytes into image (released first). Returns 0, or
 * -EBADMSG/-EPROTO with a sentence in err; on failure image holds nothing to free.
 */
int snapshot_decode(const uint8_t *data, size_t len, enum snapshot_decode_mode mode,
		    struct snapshot_image *image, uint64_t *id, char *err, size_t errlen);
/*
 * Writes dir/state (temporary name, fsync, rename, directory fsync); *id is the snapshot's id
 * (the first 8 bytes of its body's SHA-256).
 */
int snapshot_file_write(const char *dir, const struct snapshot_image *image, uint64_t *id,
			char *err, size_t errlen);
/*
 * Reads dir/state and checks it and its surroundings (host CPU, devices, memory file size,
 * a diff's base, which must itself be a base). Fills image and info. Returns 0 or -errno
 * with err; release the image either way.
 */
int snapshot_file_read(const char *dir, struct snapshot_image *image,
		       struct vm_snapshot_info *info, char *err, size_t errlen);
/* The memory file's expected size for meta (a base's RAM, or a diff's header and pages). */
uint64_t snapshot_memory_file_size(const struct snapshot_meta *meta);

#endif
