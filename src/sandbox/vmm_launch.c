/*
 * vmm_launch.h: the encoding of a VMM process's launch. One writer and one reader walk the
 * fields in the same order (header, cgroup and areas, then a boot's vm_config or a restore's
 * options); both are sticky on failure (common/byte_buffer.h), so each side is straight-line
 * code checked once at the end. Booleans are one byte that must be 0 or 1 and an absent
 * string is a presence byte of 0, so every decoded launch has exactly one encoding.
 */
#include "sandbox/vmm_launch.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/byte_buffer.h"
#include "vmm/placement.h"

#define VMM_LAUNCH_NET_MAX_PREFIX 32u

/* ---- writing ---- */

/* The encoder refuses what the decoder would: too many items, too long a string. */
struct launch_writer {
	struct byte_writer w;
	bool invalid;
};

static void put_bool(struct launch_writer *lw, bool value)
{
	byte_writer_u8(&lw->w, value ? 1 : 0);
}

static void put_string(struct launch_writer *lw, const char *text)
{
	if (!text || strlen(text) > VMM_LAUNCH_STRING_MAX) {
		lw->invalid = true;
		return;
	}
	byte_writer_string(&lw->w, text);
}

static void put_optional(struct launch_writer *lw, const char *text)
{
	put_bool(lw, text != NULL);
	if (text)
		put_string(lw, text);
}

/* Writes count; returns how many items follow (none when count is over max). */
static unsigned int put_count(struct launch_writer *lw, unsigned int count, unsigned int max)
{
	if (count > max) {
		lw->invalid = true;
		count = 0;
	}
	byte_writer_u8(&lw->w, (uint8_t)count);
	return count;
}

static void put_cidrs(struct launch_writer *lw, const struct net_cidr *cidrs, unsigned int count)
{
	unsigned int items = put_count(lw, count, NET_MAX_CIDRS);

	for (unsigned int i = 0; i < items; i++) {
		byte_writer_u32(&lw->w, cidrs[i].addr);
		byte_writer_u8(&lw->w, cidrs[i].prefix);
	}
}

/* Claimed host ports a VM is granted (a boot's network, a restore's options). */
static void put_granted_ports(struct launch_writer *lw, const uint16_t *ports, unsigned int count)
{
	unsigned int items = put_count(lw, count, NET_MAX_GRANTED_PORTS);

	for (unsigned int i = 0; i < items; i++)
		byte_writer_u16(&lw->w, ports[i]);
}

static void put_network(struct launch_writer *lw, const struct net_config *net)
{
	put_cidrs(lw, net->policy.deny, net->policy.deny_count);
	put_cidrs(lw, net->policy.allow, net->policy.allow_count);
	byte_writer_u32(&lw->w, net->policy.max_flows);
	byte_writer_u32(&lw->w, net->policy.max_new_per_sec);
	put_bool(lw, net->policy.dns);
	byte_writer_u32(&lw->w, net->policy.resolver_addr);
	byte_writer_u32(&lw->w, net->dns_server_addr);
	byte_writer_u16(&lw->w, net->dns_server_port);
	unsigned int ports = put_count(lw, net->publish_count, NET_MAX_PUBLISH);

	for (unsigned int i = 0; i < ports; i++) {
		byte_writer_u16(&lw->w, net->publish[i].host_port);
		byte_writer_u16(&lw->w, net->publish[i].guest_port);
	}
	put_bool(lw, net->confine_worker);
	put_granted_ports(lw, net->policy.granted_ports, net->policy.granted_count);
}

static void put_placement(struct launch_writer *lw, bool has_cpu, int cpu)
{
	put_bool(lw, has_cpu);
	byte_writer_u32(&lw->w, (uint32_t)cpu);
}

static void put_boot(struct launch_writer *lw, const struct vm_config *cfg)
{
	put_string(lw, cfg->kernel_path);
	put_optional(lw, cfg->initramfs_path);
	put_optional(lw, cfg->cmdline);
	byte_writer_u32(&lw->w, cfg->memory_mb);
	byte_writer_u32(&lw->w, cfg->vcpus);
	put_optional(lw, cfg->serial_log_path);
	put_bool(lw, cfg->serial_to_stdout);
	put_bool(lw, cfg->has_secret);
	byte_writer_bytes(&lw->w, cfg->secret, sizeof(cfg->secret));
	put_optional(lw, cfg->vmlinux_cache_dir);
	put_optional(lw, cfg->vsock_socket_path);
	byte_writer_u64(&lw->w, cfg->vsock_cid);
	put_bool(lw, cfg->no_entropy_device);
	put_bool(lw, cfg->no_doorbells);
	put_placement(lw, cfg->has_placement_cpu, cfg->placement_cpu);
	put_bool(lw, cfg->no_thread_filters);
	unsigned int disks = put_count(lw, cfg->disk_count, VM_MAX_DISKS), shares;

	for (unsigned int i = 0; i < disks; i++) {
		put_string(lw, cfg->disks[i].path);
		put_bool(lw, cfg->disks[i].read_only);
	}
	put_bool(lw, cfg->network != NULL);
	if (cfg->network)
		put_network(lw, cfg->network);
	shares = put_count(lw, cfg->share_count, VMM_LAUNCH_MAX_SHARES);
	for (unsigned int i = 0; i < shares; i++) {
		put_string(lw, cfg->shares[i].host_dir);
		put_string(lw, cfg->shares[i].tag);
		put_bool(lw, cfg->shares[i].read_only);
	}
}

static void put_restore(struct launch_writer *lw, const char *dir,
			const struct vm_restore_options *opts)
{
	put_string(lw, dir);
	put_optional(lw, opts->vsock_socket_path);
	put_optional(lw, opts->serial_log_path);
	put_bool(lw, opts->serial_to_stdout);
	put_bool(lw, opts->track_dirty_pages);
	put_placement(lw, opts->has_placement_cpu, opts->placement_cpu);
	put_bool(lw, opts->has_manifest_cpu_features);
	for (unsigned int i = 0; i < CPU_FEATURE_REG_COUNT; i++)
		byte_writer_u32(&lw->w, opts->has_manifest_cpu_features ?
					       opts->manifest_cpu_features.regs[i] : 0);
	put_granted_ports(lw, opts->granted_ports, opts->granted_port_count);
}

int vmm_launch_encode(const struct vmm_launch *launch, uint8_t **out, size_t *out_len, char *err,
		      size_t errlen)
{
	struct launch_writer lw = { .invalid = false };
	unsigned int areas = 0;

	*out = NULL;
	*out_len = 0;
	byte_writer_init(&lw.w);
	byte_writer_u32(&lw.w, VMM_LAUNCH_MAGIC);
	byte_writer_u32(&lw.w, VMM_LAUNCH_VERSION);
	byte_writer_u8(&lw.w, (uint8_t)launch->kind);
	byte_writer_u8(&lw.w, (uint8_t)launch->main_role);
	byte_writer_u8(&lw.w, (uint8_t)launch->jail_mode);
	byte_writer_u8(&lw.w, (uint8_t)launch->log_level);
	put_optional(&lw, launch->cgroup_dir);
	while (launch->snapshot_areas && launch->snapshot_areas[areas])
		areas++;
	areas = put_count(&lw, areas, VMM_LAUNCH_MAX_AREAS);
	for (unsigned int i = 0; i < areas; i++)
		put_string(&lw, launch->snapshot_areas[i]);
	if (launch->kind == VMM_LAUNCH_BOOT)
		put_boot(&lw, &launch->cfg);
	else if (launch->kind == VMM_LAUNCH_RESTORE)
		put_restore(&lw, launch->snapshot_dir, &launch->restore);
	else
		lw.invalid = true;
	if (byte_writer_failed(&lw.w) || lw.invalid || lw.w.len > VMM_LAUNCH_MAX_BYTES) {
		int rc = byte_writer_failed(&lw.w) ? -ENOMEM : -EINVAL;

		explicit_bzero(lw.w.data, lw.w.len);
		byte_writer_free(&lw.w);
		snprintf(err, errlen, rc == -ENOMEM ? "out of memory encoding the VM's configuration"
			 : "the VM's configuration cannot be handed to its VMM process: a path "
			   "longer than %d bytes, a missing kernel or snapshot, or more disks, "
			   "shares, ports or addresses than a VM takes", VMM_LAUNCH_STRING_MAX);
		return rc;
	}
	*out = lw.w.data;
	*out_len = lw.w.len;
	return 0;
}

/* ---- reading ---- */

struct launch_reader {
	struct byte_reader r;
	struct vmm_launch_decoded *out;
	char *scratch; /* VMM_LAUNCH_STRING_MAX + 1 bytes */
	bool no_memory;
};

static bool get_bool(struct launch_reader *lr)
{
	uint8_t value = byte_reader_u8(&lr->r);

	if (value > 1)
		byte_reader_fail(&lr->r);
	return value == 1;
}

/* An owned copy of the next string; NULL (the reader failed) when it is not one. */
static const char *get_string(struct launch_reader *lr)
{
	struct vmm_launch_decoded *out = lr->out;
	char *copy;

	byte_reader_string(&lr->r, lr->scratch, VMM_LAUNCH_STRING_MAX + 1);
	if (lr->r.failed)
		return NULL;
	if (out->string_count >= VMM_LAUNCH_STRING_FIELDS_MAX) {
		byte_reader_fail(&lr->r);
		return NULL;
	}
	copy = strdup(lr->scratch);
	if (!copy) {
		lr->no_memory = true;
		byte_reader_fail(&lr->r);
		return NULL;
	}
	out->strings[out->string_count++] = copy;
	return copy;
}

static const char *get_optional(struct launch_reader *lr)
{
	return get_bool(lr) ? get_string(lr) : NULL;
}

static unsigned int get_count(struct launch_reader *lr, unsigned int max)
{
	uint8_t count = byte_reader_u8(&lr->r);

	if (count > max) {
		byte_reader_fail(&lr->r);
		return 0;
	}
	return count;
}

/* An enumeration's value in [first, last]; anything else fails the reader. */
static unsigned int get_enum(struct launch_reader *lr, unsigned int first, unsigned int last)
{
	uint8_t value = byte_reader_u8(&lr->r);

	if (value < first || value > last)
		byte_reader_fail(&lr->r);
	return value;
}

static unsigned int get_cidrs(struct launch_reader *lr, struct net_cidr *cidrs)
{
	unsigned int count = get_count(lr, NET_MAX_CIDRS);

	for (unsigned int i = 0; i < count; i++) {
		cidrs[i].addr = byte_reader_u32(&lr->r);
		cidrs[i].prefix = byte_reader_u8(&lr->r);
		/* as net_cidr_parse leaves one: a prefix in range, the host bits clear */
		if (cidrs[i].prefix > VMM_LAUNCH_NET_MAX_PREFIX ||
		    (cidrs[i].prefix < VMM_LAUNCH_NET_MAX_PREFIX &&
		     (cidrs[i].addr & (UINT32_MAX >> cidrs[i].prefix)) != 0))
			byte_reader_fail(&lr->r);
	}
	return count;
}

/* put_granted_ports' list into ports (NET_MAX_GRANTED_PORTS long); returns the count. */
static unsigned int get_granted_ports(struct launch_reader *lr, uint16_t *ports)
{
	unsigned int count = get_count(lr, NET_MAX_GRANTED_PORTS);

	for (unsigned int i = 0; i < count; i++)
		ports[i] = byte_reader_u16(&lr->r);
	return count;
}

static void get_network(struct launch_reader *lr, struct net_config *net)
{
	net->policy.deny_count = get_cidrs(lr, net->policy.deny);
	net->policy.allow_count = get_cidrs(lr, net->policy.allow);
	net->policy.max_flows = byte_reader_u32(&lr->r);
	net->policy.max_new_per_sec = byte_reader_u32(&lr->r);
	net->policy.dns = get_bool(lr);
	net->policy.resolver_addr = byte_reader_u32(&lr->r);
	net->dns_server_addr = byte_reader_u32(&lr->r);
	net->dns_server_port = byte_reader_u16(&lr->r);
	net->publish_count = get_count(lr, NET_MAX_PUBLISH);
	for (unsigned int i = 0; i < net->publish_count; i++) {
		net->publish[i].host_port = byte_reader_u16(&lr->r);
		net->publish[i].guest_port = byte_reader_u16(&lr->r);
	}
	net->confine_worker = get_bool(lr);
	net->policy.granted_count = get_granted_ports(lr, net->policy.granted_ports);
}

/* A host CPU: VM_PLACEMENT_NONE or one a cpu_set_t can name. */
static void get_placement(struct launch_reader *lr, bool *has_cpu, int *cpu)
{
	int32_t value;

	*has_cpu = get_bool(lr);
	value = (int32_t)byte_reader_u32(&lr->r);
	if (value < VM_PLACEMENT_NONE || value >= CPU_SETSIZE)
		byte_reader_fail(&lr->r);
	*cpu = value;
}

static void get_boot(struct launch_reader *lr, struct vm_config *cfg)
{
	struct vmm_launch_decoded *out = lr->out;

	cfg->kernel_path = get_string(lr);
	cfg->initramfs_path = get_optional(lr);
	cfg->cmdline = get_optional(lr);
	cfg->memory_mb = byte_reader_u32(&lr->r);
	cfg->vcpus = byte_reader_u32(&lr->r);
	if (cfg->memory_mb > VM_MAX_MEMORY_MB || cfg->vcpus > VM_MAX_VCPUS)
		byte_reader_fail(&lr->r);
	cfg->serial_log_path = get_optional(lr);
	cfg->serial_to_stdout = get_bool(lr);
	cfg->has_secret = get_bool(lr);
	byte_reader_bytes(&lr->r, cfg->secret, sizeof(cfg->secret));
	cfg->vmlinux_cache_dir = get_optional(lr);
	cfg->vsock_socket_path = get_optional(lr);
	cfg->vsock_cid = byte_reader_u64(&lr->r);
	cfg->no_entropy_device = get_bool(lr);
	cfg->no_doorbells = get_bool(lr);
	get_placement(lr, &cfg->has_placement_cpu, &cfg->placement_cpu);
	cfg->no_thread_filters = get_bool(lr);
	cfg->disk_count = get_count(lr, VM_MAX_DISKS);
	for (unsigned int i = 0; i < cfg->disk_count; i++) {
		out->disks[i].path = get_string(lr);
		out->disks[i].read_only = get_bool(lr);
	}
	cfg->disks = cfg->disk_count ? out->disks : NULL;
	if (get_bool(lr)) {
		get_network(lr, &out->network);
		cfg->network = &out->network;
	}
	cfg->share_count = get_count(lr, VMM_LAUNCH_MAX_SHARES);
	for (unsigned int i = 0; i < cfg->share_count; i++) {
		out->shares[i].host_dir = get_string(lr);
		out->shares[i].tag = get_string(lr);
		out->shares[i].read_only = get_bool(lr);
	}
	cfg->shares = cfg->share_count ? out->shares : NULL;
}

static void get_restore(struct launch_reader *lr, struct vmm_launch *launch)
{
	struct vm_restore_options *opts = &launch->restore;

	launch->snapshot_dir = get_string(lr);
	opts->vsock_socket_path = get_optional(lr);
	opts->serial_log_path = get_optional(lr);
	opts->serial_to_stdout = get_bool(lr);
	opts->track_dirty_pages = get_bool(lr);
	get_placement(lr, &opts->has_placement_cpu, &opts->placement_cpu);
	opts->has_manifest_cpu_features = get_bool(lr);
	for (unsigned int i = 0; i < CPU_FEATURE_REG_COUNT; i++) {
		opts->manifest_cpu_features.regs[i] = byte_reader_u32(&lr->r);
		/* without a list the registers are written as zeros: one encoding per launch */
		if (!opts->has_manifest_cpu_features && opts->manifest_cpu_features.regs[i])
			byte_reader_fail(&lr->r);
	}
	opts->granted_port_count = get_granted_ports(lr, opts->granted_ports);
}

int vmm_launch_decode(const void *data, size_t len, struct vmm_launch_decoded *out, char *err,
		      size_t errlen)
{
	struct launch_reader lr = { .out = out, .no_memory = false };
	struct vmm_launch *launch = &out->launch;
	unsigned int areas;
	int rc;

	memset(out, 0, sizeof(*out));
	if (len > VMM_LAUNCH_MAX_BYTES) {
		snprintf(err, errlen, "the VM's configuration is %zu bytes, more than the %u a "
			 "VMM process reads", len, VMM_LAUNCH_MAX_BYTES);
		return -EBADMSG;
	}
	lr.scratch = malloc(VMM_LAUNCH_STRING_MAX + 1);
	if (!lr.scratch) {
		snprintf(err, errlen, "out of memory reading the VM's configuration");
		return -ENOMEM;
	}
	byte_reader_init(&lr.r, data, len);
	if (byte_reader_u32(&lr.r) != VMM_LAUNCH_MAGIC ||
	    byte_reader_u32(&lr.r) != VMM_LAUNCH_VERSION)
		byte_reader_fail(&lr.r);
	launch->kind = get_enum(&lr, VMM_LAUNCH_BOOT, VMM_LAUNCH_RESTORE);
	launch->main_role = get_enum(&lr, VMM_THREAD_VMM_MAIN, VMM_THREAD_VMM_MAIN_SNAPSHOTS);
	launch->jail_mode = get_enum(&lr, VMM_JAIL_OFF, VMM_JAIL_USER_NS);
	launch->log_level = get_enum(&lr, LOG_LEVEL_TRACE, LOG_LEVEL_OFF);
	launch->cgroup_dir = get_optional(&lr);
	areas = get_count(&lr, VMM_LAUNCH_MAX_AREAS);
	for (unsigned int i = 0; i < areas; i++)
		out->areas[i] = get_string(&lr);
	launch->snapshot_areas = areas ? out->areas : NULL;
	if (!lr.r.failed && launch->kind == VMM_LAUNCH_BOOT)
		get_boot(&lr, &launch->cfg);
	else if (!lr.r.failed)
		get_restore(&lr, launch);
	rc = byte_reader_finish(&lr.r);
	explicit_bzero(lr.scratch, VMM_LAUNCH_STRING_MAX + 1);
	free(lr.scratch);
	if (rc < 0) {
		vmm_launch_release(out);
		rc = lr.no_memory ? -ENOMEM : -EBADMSG;
		snprintf(err, errlen, rc == -ENOMEM ? "out of memory reading the VM's configuration"
			 : "the VM's configuration is malformed (truncated, another version, or a "
			   "field out of range): the voidbox and voidbox-vmm executables must come "
			   "from the same build");
	}
	return rc;
}

void vmm_launch_release(struct vmm_launch_decoded *decoded)
{
	for (size_t i = 0; i < decoded->string_count && i < VMM_LAUNCH_STRING_FIELDS_MAX; i++)
		free(decoded->strings[i]);
	explicit_bzero(decoded, sizeof(*decoded));
}
