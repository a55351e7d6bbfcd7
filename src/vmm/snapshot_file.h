/*
 * The snapshot state file as bytes: a fixed header and tagged sections (layout in
 * docs/snapshot-format.md). Split from snapshot.c so the parser, the part a corrupted or
 * hostile file reaches, is unit-tested and fuzzed without KVM.
 */
#ifndef VOIDBOX_VMM_SNAPSHOT_FILE_H
#define VOIDBOX_VMM_SNAPSHOT_FILE_H

#include <limits.h>
#include <linux/kvm.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/serial.h"
#include "devices/virtio_mmio.h"
#include "vmm/cmdline.h"
#include "vmm/snapshot.h"
#include "vmm/vcpu_state.h"
#include "vmm/vm.h"

#define SNAPSHOT_MAGIC "VBOXSNAP"
#define SNAPSHOT_MAGIC_LEN 8
#define SNAPSHOT_DIFF_MAGIC 0x3146464944584f42ULL /* "BOXDIFF1" little-endian */
#define SNAPSHOT_IRQCHIP_COUNT 3
#define SNAPSHOT_DEVICE_NAME_LEN VM_SNAPSHOT_DEVICE_NAME_LEN
#define SNAPSHOT_DEVICE_SERIAL "serial"
#define SNAPSHOT_DEVICE_I8042 "i8042"
#define SNAPSHOT_DEVICE_VSOCK "vsock"
/* A state file is a few KiB per vCPU; anything far larger is not one of ours. */
#define SNAPSHOT_STATE_MAX_BYTES (64u * 1024u * 1024u)

enum snapshot_section_tag {
	SNAPSHOT_SECTION_META = 1,
	SNAPSHOT_SECTION_VCPU = 2,
	SNAPSHOT_SECTION_IRQCHIP = 3,
	SNAPSHOT_SECTION_PIT = 4,
	SNAPSHOT_SECTION_CLOCK = 5,
	SNAPSHOT_SECTION_VSOCK = 6,
	SNAPSHOT_SECTION_SERIAL = 7,
};

struct snapshot_header {
	char magic[SNAPSHOT_MAGIC_LEN];
	uint32_t version;
	uint32_t header_size;
	uint64_t body_len;
	uint64_t body_checksum; /* FNV-1a 64 of the body; also the snapshot's id */
};

struct snapshot_section {
	uint32_t tag;
	uint32_t index;
	uint64_t len;
};

struct snapshot_meta {
	uint32_t type;
	uint32_t memory_mb;
	uint32_t vcpus;
	uint32_t device_count;
	uint64_t cid;
	uint64_t created_unix_ns;
	uint64_t parent_id;
	uint64_t memory_bytes;
	uint64_t diff_pages;
	char cpu_signature[VM_SNAPSHOT_CPU_SIGNATURE_LEN];
	char parent_dir[PATH_MAX];
	uint8_t secret[VM_SECRET_LEN];
	char cmdline[CMDLINE_MAX];
	char devices[VM_SNAPSHOT_MAX_DEVICES][SNAPSHOT_DEVICE_NAME_LEN];
};

struct snapshot_diff_header {
	uint64_t magic;
	uint64_t page_count;
};

/* Everything a state file holds, decoded. */
struct snapshot_image {
	struct snapshot_meta meta;
	struct vcpu_state vcpus[VM_MAX_VCPUS];
	struct kvm_irqchip irqchips[SNAPSHOT_IRQCHIP_COUNT];
	struct kvm_pit_state2 pit;
	struct kvm_clock_data clock;
	struct virtio_mmio_state vsock;
	struct serial_state serial;
};

/* dir/name into out (PATH_MAX bytes); -ENAMETOOLONG when it does not fit. */
int snapshot_path(char *out, const char *dir, const char *name);
uint64_t snapshot_checksum(const void *data, size_t len);
/* "vendor family-model-stepping" of this host's CPU. */
void snapshot_cpu_signature(char out[VM_SNAPSHOT_CPU_SIGNATURE_LEN]);
int snapshot_pwrite_all(int fd, const void *data, size_t len, uint64_t offset);
int snapshot_pread_all(int fd, void *data, size_t len, uint64_t offset);

/* Encodes image into a malloc'ed buffer (header included). Returns 0 or -ENOMEM. */
int snapshot_encode(const struct snapshot_image *image, uint8_t **out, size_t *out_len);
/* Decodes and checks a state file's bytes. Returns 0 or -EBADMSG/-EPROTO with err. */
int snapshot_decode(const uint8_t *data, size_t len, struct snapshot_image *image,
		    uint64_t *id, char *err, size_t errlen);
/* Writes dir/state (temporary name, fsync, rename, directory fsync); *id is its checksum. */
int snapshot_file_write(const char *dir, const struct snapshot_image *image, uint64_t *id,
			char *err, size_t errlen);
/*
 * Reads dir/state and checks it and its surroundings (host CPU, devices, memory file size,
 * a diff's base). Fills image and info. Returns 0 or -errno with err.
 */
int snapshot_file_read(const char *dir, struct snapshot_image *image,
		       struct vm_snapshot_info *info, char *err, size_t errlen);

#endif
