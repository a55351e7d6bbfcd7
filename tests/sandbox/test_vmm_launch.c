/*
 * The encoding of a VMM process's launch (src/sandbox/vmm_launch.h): a cold boot's and a
 * restore's configuration, every field set to something other than its default, come back
 * field for field and re-encode to the same bytes; every truncation, a trailing byte, and each
 * out-of-range value (enumerations, booleans, counts, CIDRs, host CPUs, sizes) is refused, and
 * no single garbled byte gets past the decoder as something that encodes differently.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sandbox/vmm_launch.h"
#include "vmm/placement.h"

#define TEST_ERR_MAX 512
#define TEST_SECRET_BYTE 0x3c
/* the offset of the cgroup's presence byte: magic, version, kind, role, jail mode, level */
#define TEST_CGROUP_PRESENCE_OFFSET 12

static const struct vm_disk test_disks[] = {
	{ .path = "/var/lib/voidbox/disk-a.img", .read_only = true },
	{ .path = "/var/lib/voidbox/disk-b.img", .read_only = false },
};
static const struct vm_share test_shares[] = {
	{ .host_dir = "/home/user/project", .tag = "workspace", .read_only = false },
	{ .host_dir = "/usr/share/doc", .tag = "docs", .read_only = true },
};
static const char *const test_areas[] = { "/home/user/.void-box/snapshots", "/tmp/forks", NULL };

static void fill_network(struct net_config *net)
{
	memset(net, 0, sizeof(*net));
	net_policy_init_default(&net->policy);
	net->policy.allow[0] = (struct net_cidr){ .addr = NET_ADDR(140, 82, 112, 0), .prefix = 20 };
	net->policy.allow[1] = (struct net_cidr){ .addr = NET_ADDR(1, 1, 1, 1), .prefix = 32 };
	net->policy.allow_count = 2;
	net->policy.max_flows = 17;
	net->policy.max_new_per_sec = 9;
	net->policy.dns = true;
	net->policy.resolver_addr = NET_ADDR(192, 168, 1, 1);
	net->dns_server_addr = NET_ADDR(127, 0, 0, 1);
	net->dns_server_port = 5353;
	net->publish[0] = (struct net_publish){ .host_port = 8080, .guest_port = 80 };
	net->publish[1] = (struct net_publish){ .host_port = 2222, .guest_port = 22 };
	net->publish_count = 2;
	net->confine_worker = true;
	net->policy.granted_ports[0] = 41234;
	net->policy.granted_count = 1;
}

static void fill_boot(struct vmm_launch *launch, struct net_config *net)
{
	fill_network(net);
	*launch = (struct vmm_launch){
		.kind = VMM_LAUNCH_BOOT,
		.cfg = {
			.kernel_path = "/home/user/.void-box/images/default/vmlinuz",
			.initramfs_path = "/home/user/.void-box/images/default/initramfs.cpio",
			.cmdline = "voidbox.mounts=workspace:/workspace:rw quiet",
			.memory_mb = 1536,
			.vcpus = 3,
			.serial_log_path = "/tmp/voidbox-abc/console.log",
			.serial_to_stdout = true,
			.has_secret = true,
			.vmlinux_cache_dir = "/home/user/.void-box/kernels",
			.vsock_socket_path = "/tmp/voidbox-abc/vsock.sock",
			.vsock_cid = 0x123456789ULL,
			.no_entropy_device = true,
			.no_doorbells = true,
			.has_placement_cpu = true,
			.placement_cpu = 5,
			.no_thread_filters = true,
			.disks = test_disks,
			.disk_count = 2,
			.network = net,
			.shares = test_shares,
			.share_count = 2,
		},
		.cgroup_dir = "/sys/fs/cgroup/voidbox-abc",
		.main_role = VMM_THREAD_VMM_MAIN_SNAPSHOTS,
		.jail_mode = VMM_JAIL_USER_NS,
		.snapshot_areas = test_areas,
		.log_level = LOG_LEVEL_DEBUG,
	};
	memset(launch->cfg.secret, TEST_SECRET_BYTE, sizeof(launch->cfg.secret));
	launch->cfg.secret[VM_SECRET_LEN - 1] = 0x01;
}

static void fill_restore(struct vmm_launch *launch)
{
	*launch = (struct vmm_launch){
		.kind = VMM_LAUNCH_RESTORE,
		.snapshot_dir = "/home/user/.void-box/snapshots/ab/abcdef",
		.restore = {
			.vsock_socket_path = "/tmp/voidbox-def/vsock.sock",
			.serial_log_path = NULL,
			.serial_to_stdout = false,
			.track_dirty_pages = true,
			.has_placement_cpu = true,
			.placement_cpu = VM_PLACEMENT_NONE,
			.has_manifest_cpu_features = true,
			.manifest_cpu_features = { { 0xf6fa3203u, 0x0f8bfbffu, 0x009c07abu, 0x4u,
						     0xac000400u } },
			.granted_ports = { 45803, 8080 },
			.granted_port_count = 2,
		},
		.cgroup_dir = NULL,
		.main_role = VMM_THREAD_VMM_MAIN,
		.jail_mode = VMM_JAIL_PRIVILEGED,
		.snapshot_areas = NULL,
		.log_level = LOG_LEVEL_WARN,
	};
}

static bool same_string(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* Field by field: a CIDR's padding bytes are nobody's. */
static void check_same_cidrs(const struct net_cidr *a, const struct net_cidr *b, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		CHECK_INT_EQ(a[i].addr, b[i].addr);
		CHECK_INT_EQ(a[i].prefix, b[i].prefix);
	}
}

static void check_same_network(const struct net_config *a, const struct net_config *b)
{
	CHECK_INT_EQ(a->policy.deny_count, b->policy.deny_count);
	CHECK_INT_EQ(a->policy.allow_count, b->policy.allow_count);
	check_same_cidrs(a->policy.deny, b->policy.deny, a->policy.deny_count);
	check_same_cidrs(a->policy.allow, b->policy.allow, a->policy.allow_count);
	CHECK_INT_EQ(a->policy.max_flows, b->policy.max_flows);
	CHECK_INT_EQ(a->policy.max_new_per_sec, b->policy.max_new_per_sec);
	CHECK_INT_EQ(a->policy.dns, b->policy.dns);
	CHECK_INT_EQ(a->policy.resolver_addr, b->policy.resolver_addr);
	CHECK_INT_EQ(a->dns_server_addr, b->dns_server_addr);
	CHECK_INT_EQ(a->dns_server_port, b->dns_server_port);
	CHECK_INT_EQ(a->publish_count, b->publish_count);
	CHECK(memcmp(a->publish, b->publish, a->publish_count * sizeof(a->publish[0])) == 0);
	CHECK_INT_EQ(a->confine_worker, b->confine_worker);
	CHECK_INT_EQ(a->policy.granted_count, b->policy.granted_count);
	CHECK(memcmp(a->policy.granted_ports, b->policy.granted_ports,
		     a->policy.granted_count * sizeof(a->policy.granted_ports[0])) == 0);
}

static void check_same_boot(const struct vm_config *a, const struct vm_config *b)
{
	CHECK(same_string(a->kernel_path, b->kernel_path));
	CHECK(same_string(a->initramfs_path, b->initramfs_path));
	CHECK(same_string(a->cmdline, b->cmdline));
	CHECK_INT_EQ(a->memory_mb, b->memory_mb);
	CHECK_INT_EQ(a->vcpus, b->vcpus);
	CHECK(same_string(a->serial_log_path, b->serial_log_path));
	CHECK_INT_EQ(a->serial_to_stdout, b->serial_to_stdout);
	CHECK_INT_EQ(a->has_secret, b->has_secret);
	CHECK(memcmp(a->secret, b->secret, VM_SECRET_LEN) == 0);
	CHECK(same_string(a->vmlinux_cache_dir, b->vmlinux_cache_dir));
	CHECK(same_string(a->vsock_socket_path, b->vsock_socket_path));
	CHECK(a->vsock_cid == b->vsock_cid);
	CHECK_INT_EQ(a->no_entropy_device, b->no_entropy_device);
	CHECK_INT_EQ(a->no_doorbells, b->no_doorbells);
	CHECK_INT_EQ(a->has_placement_cpu, b->has_placement_cpu);
	CHECK_INT_EQ(a->placement_cpu, b->placement_cpu);
	CHECK_INT_EQ(a->no_thread_filters, b->no_thread_filters);
	CHECK_INT_EQ(a->disk_count, b->disk_count);
	for (unsigned int i = 0; i < a->disk_count && i < b->disk_count; i++) {
		CHECK(same_string(a->disks[i].path, b->disks[i].path));
		CHECK_INT_EQ(a->disks[i].read_only, b->disks[i].read_only);
	}
	CHECK_INT_EQ(a->network != NULL, b->network != NULL);
	if (a->network && b->network)
		check_same_network(a->network, b->network);
	CHECK_INT_EQ(a->share_count, b->share_count);
	for (unsigned int i = 0; i < a->share_count && i < b->share_count; i++) {
		CHECK(same_string(a->shares[i].host_dir, b->shares[i].host_dir));
		CHECK(same_string(a->shares[i].tag, b->shares[i].tag));
		CHECK_INT_EQ(a->shares[i].read_only, b->shares[i].read_only);
	}
}

static void check_same_launch(const struct vmm_launch *a, const struct vmm_launch *b)
{
	CHECK_INT_EQ(a->kind, b->kind);
	CHECK_INT_EQ(a->main_role, b->main_role);
	CHECK_INT_EQ(a->jail_mode, b->jail_mode);
	CHECK_INT_EQ(a->log_level, b->log_level);
	CHECK(same_string(a->cgroup_dir, b->cgroup_dir));
	CHECK_INT_EQ(a->snapshot_areas != NULL, b->snapshot_areas != NULL);
	for (size_t i = 0; a->snapshot_areas && b->snapshot_areas && a->snapshot_areas[i]; i++)
		CHECK(same_string(a->snapshot_areas[i], b->snapshot_areas[i]));
	if (a->kind == VMM_LAUNCH_BOOT) {
		check_same_boot(&a->cfg, &b->cfg);
		return;
	}
	CHECK(same_string(a->snapshot_dir, b->snapshot_dir));
	CHECK(same_string(a->restore.vsock_socket_path, b->restore.vsock_socket_path));
	CHECK(same_string(a->restore.serial_log_path, b->restore.serial_log_path));
	CHECK_INT_EQ(a->restore.serial_to_stdout, b->restore.serial_to_stdout);
	CHECK_INT_EQ(a->restore.track_dirty_pages, b->restore.track_dirty_pages);
	CHECK_INT_EQ(a->restore.has_placement_cpu, b->restore.has_placement_cpu);
	CHECK_INT_EQ(a->restore.placement_cpu, b->restore.placement_cpu);
	CHECK_INT_EQ(a->restore.has_manifest_cpu_features, b->restore.has_manifest_cpu_features);
	CHECK(memcmp(&a->restore.manifest_cpu_features, &b->restore.manifest_cpu_features,
		     sizeof(a->restore.manifest_cpu_features)) == 0);
	CHECK_INT_EQ(a->restore.granted_port_count, b->restore.granted_port_count);
	CHECK(memcmp(a->restore.granted_ports, b->restore.granted_ports,
		     a->restore.granted_port_count * sizeof(a->restore.granted_ports[0])) == 0);
}

/* Encodes, decodes, compares every field and the bytes of a second encoding. */
static void check_round_trip(const struct vmm_launch *launch)
{
	struct vmm_launch_decoded decoded;
	uint8_t *bytes = NULL, *again = NULL;
	size_t len = 0, again_len = 0;
	char err[TEST_ERR_MAX] = "";

	CHECK_INT_EQ(vmm_launch_encode(launch, &bytes, &len, err, sizeof(err)), 0);
	CHECK_INT_EQ(vmm_launch_decode(bytes, len, &decoded, err, sizeof(err)), 0);
	check_same_launch(launch, &decoded.launch);
	CHECK_INT_EQ(vmm_launch_encode(&decoded.launch, &again, &again_len, err, sizeof(err)), 0);
	CHECK(again_len == len && again && memcmp(again, bytes, len) == 0);
	vmm_launch_release(&decoded);
	free(bytes);
	free(again);
}

static void test_boot_round_trips(void)
{
	struct vmm_launch launch;
	struct net_config net;

	fill_boot(&launch, &net);
	check_round_trip(&launch);
	/* and the smallest: no network, disks, shares, areas or optional strings */
	launch.cfg = (struct vm_config){ .kernel_path = "/k", .placement_cpu = VM_PLACEMENT_NONE };
	launch.snapshot_areas = NULL;
	launch.cgroup_dir = NULL;
	check_round_trip(&launch);
}

static void test_restore_round_trips(void)
{
	struct vmm_launch launch;

	fill_restore(&launch);
	check_round_trip(&launch);
}

static int decode_only(const uint8_t *bytes, size_t len)
{
	struct vmm_launch_decoded decoded;
	char err[TEST_ERR_MAX] = "";
	int rc = vmm_launch_decode(bytes, len, &decoded, err, sizeof(err));

	if (rc == 0)
		vmm_launch_release(&decoded);
	else
		CHECK(err[0] != '\0');
	return rc;
}

/* Every prefix of a good encoding, and the encoding with one byte more, are refused. */
static void test_truncated_and_trailing_refused(void)
{
	struct vmm_launch launch;
	struct net_config net;
	uint8_t *bytes = NULL, *longer;
	size_t len = 0;
	char err[TEST_ERR_MAX];

	fill_boot(&launch, &net);
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), 0);
	for (size_t cut = 0; cut < len; cut++)
		CHECK_INT_EQ(decode_only(bytes, cut), -EBADMSG);
	longer = calloc(1, len + 1);
	CHECK(longer != NULL);
	if (longer) {
		memcpy(longer, bytes, len);
		CHECK_INT_EQ(decode_only(longer, len + 1), -EBADMSG);
	}
	free(longer);
	free(bytes);
}

/* A launch the encoder writes but whose decode must fail. */
static void check_encoded_refused(const struct vmm_launch *launch)
{
	uint8_t *bytes = NULL;
	size_t len = 0;
	char err[TEST_ERR_MAX];

	CHECK_INT_EQ(vmm_launch_encode(launch, &bytes, &len, err, sizeof(err)), 0);
	CHECK_INT_EQ(decode_only(bytes, len), -EBADMSG);
	free(bytes);
}

static void test_out_of_range_refused(void)
{
	struct vmm_launch launch, good;
	struct net_config net, bad_net;

	fill_boot(&good, &net);
	launch = good;
	launch.main_role = VMM_THREAD_VCPU;
	check_encoded_refused(&launch);
	launch = good;
	launch.jail_mode = (enum vmm_jail_mode)(VMM_JAIL_USER_NS + 1);
	check_encoded_refused(&launch);
	launch = good;
	launch.log_level = (enum log_level)(LOG_LEVEL_OFF + 1);
	check_encoded_refused(&launch);
	launch = good;
	launch.cfg.memory_mb = VM_MAX_MEMORY_MB + 1;
	check_encoded_refused(&launch);
	launch = good;
	launch.cfg.vcpus = VM_MAX_VCPUS + 1;
	check_encoded_refused(&launch);
	launch = good;
	launch.cfg.placement_cpu = VM_PLACEMENT_NONE - 1;
	check_encoded_refused(&launch);
	launch = good;
	launch.cfg.placement_cpu = CPU_SETSIZE;
	check_encoded_refused(&launch);
	/* a CIDR net_cidr_parse could not have made */
	bad_net = net;
	bad_net.policy.allow[0] = (struct net_cidr){ .addr = NET_ADDR(10, 0, 0, 1), .prefix = 8 };
	launch = good;
	launch.cfg.network = &bad_net;
	check_encoded_refused(&launch);
	bad_net.policy.allow[0] = (struct net_cidr){ .addr = 0, .prefix = 33 };
	check_encoded_refused(&launch);
}

/* What the encoder itself refuses: no kernel, too many disks, an unknown kind. */
static void test_encoder_refuses(void)
{
	struct vmm_launch launch, good;
	struct net_config net;
	uint8_t *bytes = (uint8_t *)&launch;
	size_t len = 1;
	char err[TEST_ERR_MAX] = "";

	fill_boot(&good, &net);
	launch = good;
	launch.cfg.kernel_path = NULL;
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), -EINVAL);
	CHECK(bytes == NULL && len == 0 && err[0] != '\0');
	launch = good;
	launch.cfg.disk_count = VM_MAX_DISKS + 1;
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), -EINVAL);
	launch = good;
	launch.kind = (enum vmm_launch_kind)(VMM_LAUNCH_RESTORE + 1);
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), -EINVAL);
	/* more granted ports than a policy holds, on a boot's network and on a restore */
	launch = good;
	net.policy.granted_count = NET_MAX_GRANTED_PORTS + 1;
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), -EINVAL);
	fill_restore(&launch);
	launch.restore.granted_port_count = NET_MAX_GRANTED_PORTS + 1;
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), -EINVAL);
}

/*
 * Every byte of a good encoding flipped in turn: the magic, version and a boolean set to 2 are
 * refused, and whatever else decodes re-encodes to exactly the garbled bytes (no field is
 * read loosely).
 */
static void test_garbled_bytes(void)
{
	struct vmm_launch launch;
	struct net_config net;
	uint8_t *bytes = NULL, *again = NULL;
	size_t len = 0, again_len = 0;
	char err[TEST_ERR_MAX];

	fill_boot(&launch, &net);
	CHECK_INT_EQ(vmm_launch_encode(&launch, &bytes, &len, err, sizeof(err)), 0);
	for (size_t at = 0; bytes && at < len; at++) {
		struct vmm_launch_decoded decoded;

		bytes[at] ^= 0xff;
		if (vmm_launch_decode(bytes, len, &decoded, err, sizeof(err)) == 0) {
			CHECK(at >= 2 * sizeof(uint32_t)); /* never with a garbled magic or version */
			CHECK_INT_EQ(vmm_launch_encode(&decoded.launch, &again, &again_len, err,
						       sizeof(err)), 0);
			CHECK(again_len == len && again && memcmp(again, bytes, len) == 0);
			free(again);
			again = NULL;
			vmm_launch_release(&decoded);
		}
		bytes[at] ^= 0xff;
	}
	if (bytes) {
		bytes[TEST_CGROUP_PRESENCE_OFFSET] = 2;
		CHECK_INT_EQ(decode_only(bytes, len), -EBADMSG);
	}
	free(bytes);
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	RUN_TEST(test_boot_round_trips);
	RUN_TEST(test_restore_round_trips);
	RUN_TEST(test_truncated_and_trailing_refused);
	RUN_TEST(test_out_of_range_refused);
	RUN_TEST(test_encoder_refuses);
	RUN_TEST(test_garbled_bytes);
	return harness_finish();
}
