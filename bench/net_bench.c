/*
 * User-mode networking: voidbox's virtio-net over libslirp against QEMU's `-netdev user` (also
 * libslirp) on the same kernel and initramfs, in one run. Each guest runs the same shell
 * script: one busybox `wget` fetching a small page REQUESTS times (a new connection each, so
 * no process start is counted), then one upload of MIB MiB (an HTTP POST through busybox
 * `nc`), both to an HTTP server this program runs on the host's 127.0.0.1 (10.0.2.2 in
 * either guest). Everything is measured on the host, by that server, so neither
 * guest's clock matters:
 *   - round trip: the time between the first and the last small request, over REQUESTS - 1
 *     (connect, request, answer, close, through one wget process);
 *   - throughput: the upload's body bytes over the time from its first to its last byte.
 * QEMU's guest has no agent to talk to: its initramfs is the image's with a second cpio
 * appended holding a script (rdinit) that loads virtio_net, configures eth0 as the agent
 * would, runs the same commands and powers off. voidbox's guest runs them through exec, with
 * an allow list of 127.0.0.1/32 and a connection-rate cap high enough never to bite.
 *
 * Usage: net_bench [--runs N] [--requests R] [--mib M] [--qemu PATH] [--workdir DIR]
 *        (needs a guest image, /dev/kvm that runs stock kernels, qemu-system-x86_64, and the
 *        host's loopback up: the nested L1 starts with it down, so run it there as
 *        scripts/with-nested-kvm sh -c 'ip link set lo up && build/bench/net_bench')
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/host_env.h"
#include "devices/net.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define NB_DEFAULT_RUNS 3u
#define NB_DEFAULT_REQUESTS 50u
#define NB_DEFAULT_MIB 32u
#define NB_MAX_RUNS 50u
#define NB_MAX_REQUESTS 10000u
#define NB_MAX_MIB 128u
#define NB_MEMORY_MB 512u
#define NB_SMALL_LEN 256u
#define NB_REQUEST_MAX 4096
#define NB_CHUNK 65536u
#define NB_BYTES_PER_MIB (1024.0 * 1024.0)
#define NB_NS_PER_MS 1e6
#define NB_NS_PER_S 1e9
#define NB_ERROR_MAX 1024
#define NB_SCRIPT_MAX 2048
#define NB_CMD_MAX (5 * PATH_MAX)
#define NB_EXEC_TIMEOUT_S 600
#define NB_EXIT_FAILED 1
#define NB_EXIT_USAGE 2
#define NB_SIDES 2
#define NB_RATE_UNCAPPED 1000000u
#define NB_QEMU_MACHINE "microvm,acpi=on"
#define NB_QEMU_MODULES "virtio_ring virtio virtio_mmio failover net_failover virtio_net"

/* What the host's server saw during one guest's run. */
struct nb_observed {
	pthread_mutex_t lock;
	uint64_t first_small_ns, last_small_ns;
	unsigned int smalls;
	uint64_t upload_first_ns, upload_last_ns, upload_bytes;
};

struct nb_result {
	double rtt_ms;
	double mib_per_s;
};

static struct nb_observed observed = { .lock = PTHREAD_MUTEX_INITIALIZER };
static uint16_t server_port;

static uint64_t nb_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * (uint64_t)NB_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static bool nb_send_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t sent = send(fd, data, len, MSG_NOSIGNAL);

		if (sent <= 0)
			return false;
		data += sent;
		len -= (size_t)sent;
	}
	return true;
}

/* Reads an upload's body of length bytes, some of which (already) came with the headers. */
static void nb_read_upload(int fd, size_t already, uint64_t length)
{
	static char chunk[NB_CHUNK];
	uint64_t got_total = already;
	uint64_t first = nb_now_ns();

	while (got_total < length) {
		ssize_t got = recv(fd, chunk, sizeof(chunk), 0);

		if (got <= 0)
			break;
		got_total += (uint64_t)got;
	}
	pthread_mutex_lock(&observed.lock);
	observed.upload_first_ns = first;
	observed.upload_last_ns = nb_now_ns();
	observed.upload_bytes = got_total;
	pthread_mutex_unlock(&observed.lock);
}

static void *nb_connection(void *opaque)
{
	int fd = (int)(intptr_t)opaque;
	char request[NB_REQUEST_MAX + 1], reply[256], body[NB_SMALL_LEN];
	const char *end = NULL, *length_field;
	size_t used = 0;

	while (used < NB_REQUEST_MAX && !end) {
		ssize_t got = recv(fd, request + used, NB_REQUEST_MAX - used, 0);

		if (got <= 0)
			break;
		used += (size_t)got;
		request[used] = '\0';
		end = strstr(request, "\r\n\r\n");
	}
	if (!end)
		goto out;
	if (strncmp(request, "POST /sink ", 11) == 0) {
		length_field = strcasestr(request, "Content-Length:");
		if (length_field)
			nb_read_upload(fd, used - (size_t)(end + 4 - request),
				       strtoull(length_field + 15, NULL, 10));
		snprintf(reply, sizeof(reply), "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
		nb_send_all(fd, reply, strlen(reply));
	} else {
		uint64_t now = nb_now_ns();

		pthread_mutex_lock(&observed.lock);
		if (!observed.smalls)
			observed.first_small_ns = now;
		observed.last_small_ns = now;
		observed.smalls++;
		pthread_mutex_unlock(&observed.lock);
		memset(body, 'v', sizeof(body));
		snprintf(reply, sizeof(reply), "HTTP/1.0 200 OK\r\nContent-Length: %u\r\n\r\n",
			 NB_SMALL_LEN);
		if (nb_send_all(fd, reply, strlen(reply)))
			nb_send_all(fd, body, sizeof(body));
	}
out:
	close(fd);
	return NULL;
}

/* One connection at a time: each guest fetches and uploads one after another. */
static void *nb_server(void *opaque)
{
	int listen_fd = (int)(intptr_t)opaque;

	for (;;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd >= 0)
			nb_connection((void *)(intptr_t)fd);
	}
	return NULL;
}

static int nb_start_server(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	pthread_t thread;

	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&addr, &len) < 0 || listen(fd, 64) < 0 ||
	    pthread_create(&thread, NULL, nb_server, (void *)(intptr_t)fd) != 0)
		return -1;
	pthread_detach(thread);
	server_port = ntohs(addr.sin_port);
	return 0;
}

static void nb_reset_observed(void)
{
	pthread_mutex_lock(&observed.lock);
	observed.smalls = 0;
	observed.upload_bytes = 0;
	pthread_mutex_unlock(&observed.lock);
}

static int nb_collect(unsigned int requests, unsigned int mib, struct nb_result *out)
{
	int rc = 0;

	pthread_mutex_lock(&observed.lock);
	if (observed.smalls != requests || observed.upload_bytes != (uint64_t)mib << 20 ||
	    observed.upload_last_ns <= observed.upload_first_ns || requests < 2) {
		fprintf(stderr, "net_bench: the server saw %u of %u requests and %llu of %u MiB\n",
			observed.smalls, requests, (unsigned long long)observed.upload_bytes, mib);
		rc = -EIO;
	} else {
		out->rtt_ms = (double)(observed.last_small_ns - observed.first_small_ns) /
			      (requests - 1) / NB_NS_PER_MS;
		out->mib_per_s = (double)observed.upload_bytes / NB_BYTES_PER_MIB /
				 ((double)(observed.upload_last_ns - observed.upload_first_ns) /
				  NB_NS_PER_S);
	}
	pthread_mutex_unlock(&observed.lock);
	return rc;
}

/*
 * The commands both guests run: the small fetches (one wget, many URLs), then the upload (an
 * HTTP request written by hand into busybox nc: Debian's busybox 1.35 wget --post-file sends
 * no body).
 */
static void nb_guest_commands(char *out, size_t len, unsigned int requests, unsigned int mib)
{
	snprintf(out, len,
		 "u=; i=0; while [ $i -lt %u ]; do u=\"$u http://10.0.2.2:%u/small\"; "
		 "i=$((i+1)); done; wget -q -O /dev/null $u || exit 1; "
		 "{ printf 'POST /sink HTTP/1.0\\r\\nContent-Length: %llu\\r\\n\\r\\n'; "
		 "dd if=/dev/zero bs=1048576 count=%u 2>/dev/null; } | nc 10.0.2.2 %u | "
		 "grep -q '200 OK'",
		 requests, server_port, (unsigned long long)mib << 20, mib, server_port);
}

/* ---- voidbox ---- */

static int nb_voidbox_run(const struct guest_image_paths *image, const char *workdir,
			  const char *commands)
{
	char serial[PATH_MAX];
	struct net_config net;
	struct net_cidr loopback;
	struct sandbox_config cfg = { 0 };
	struct sandbox *box = NULL;
	char *args[] = { "-c", (char *)commands };
	struct proto_exec_request req = { .program = "sh", .args = args, .args_count = 2,
					  .has_timeout = true, .timeout_secs = NB_EXEC_TIMEOUT_S };
	struct proto_exec_response resp = { 0 };
	char err[NB_ERROR_MAX];
	int rc;

	memset(&net, 0, sizeof(net));
	net_policy_init_default(&net.policy);
	net_cidr_parse("127.0.0.1/32", &loopback);
	net_policy_add_allow(&net.policy, &loopback);
	net.policy.max_new_per_sec = NB_RATE_UNCAPPED;
	cfg.kernel_path = image->kernel;
	cfg.initramfs_path = image->initramfs[0] ? image->initramfs : NULL;
	cfg.memory_mb = NB_MEMORY_MB;
	cfg.network = &net;
	snprintf(serial, sizeof(serial), "%s/voidbox-serial.log", workdir);
	cfg.serial_log_path = serial;
	rc = sandbox_start(&cfg, &box, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "net_bench: voidbox: %s\n", err);
		return rc;
	}
	rc = sandbox_exec(box, &req, NULL, NULL, &resp, err, sizeof(err));
	if (rc == 0 && resp.exit_code != 0) {
		fprintf(stderr, "net_bench: voidbox guest commands exited %d: %.*s\n",
			resp.exit_code, (int)resp.stderr_data.len,
			(const char *)resp.stderr_data.data);
		rc = -EIO;
	} else if (rc < 0) {
		fprintf(stderr, "net_bench: voidbox: %s\n", err);
	}
	proto_exec_response_free(&resp);
	sandbox_destroy(box, rc < 0);
	return rc;
}

/* ---- QEMU -netdev user ---- */

/* The image's initramfs with a cpio holding /netbench.sh appended (the kernel reads both). */
static int nb_qemu_initramfs(const char *workdir, const char *initramfs, const char *commands,
			     char *out, size_t len)
{
	char dir[PATH_MAX], script_path[PATH_MAX + 16], cmd[NB_CMD_MAX];
	FILE *script;

	snprintf(dir, sizeof(dir), "%s/qemu-extra", workdir);
	snprintf(script_path, sizeof(script_path), "%s/netbench.sh", dir);
	snprintf(out, len, "%s/qemu-initramfs.cpio", workdir);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	script = fopen(script_path, "we");
	if (!script)
		return -errno;
	fprintf(script,
		"#!/bin/sh\n"
		"mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev\n"
		"mount -t tmpfs tmp /tmp\n"
		"for m in %s; do insmod /lib/modules/$m.ko; done\n"
		"ifconfig lo up; ifconfig eth0 10.0.2.15 netmask 255.255.255.0 up\n"
		"route add default gw 10.0.2.2\n"
		"( %s ) && echo NETBENCH-OK || echo NETBENCH-FAILED\n"
		"poweroff -f\n",
		NB_QEMU_MODULES, commands);
	fclose(script);
	chmod(script_path, 0755);
	snprintf(cmd, sizeof(cmd),
		 "cp '%s' '%s' && cd '%s' && echo netbench.sh | cpio -o -H newc 2>/dev/null >> '%s'",
		 initramfs, out, dir, out);
	return system(cmd) == 0 ? 0 : -EIO;
}

static int nb_qemu_run(const char *qemu, const struct guest_image_paths *image,
		       const char *workdir, const char *commands)
{
	char initramfs[PATH_MAX], serial[PATH_MAX + 8], memory[16], cmd[NB_CMD_MAX];
	const char *argv[] = {
		qemu, "-M", NB_QEMU_MACHINE, "-enable-kvm", "-cpu", "host", "-m", memory, "-smp",
		"1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial",
		serial, "-kernel", image->kernel, "-initrd", initramfs, "-append",
		"console=ttyS0 rdinit=/netbench.sh panic=-1 quiet", "-netdev", "user,id=n0",
		"-device", "virtio-net-device,netdev=n0", NULL,
	};
	int status, rc;
	pid_t pid;

	rc = nb_qemu_initramfs(workdir, image->initramfs, commands, initramfs, sizeof(initramfs));
	if (rc < 0) {
		fprintf(stderr, "net_bench: cannot build QEMU's initramfs in %s\n", workdir);
		return rc;
	}
	snprintf(memory, sizeof(memory), "%u", NB_MEMORY_MB);
	snprintf(serial, sizeof(serial), "file:%s/qemu-serial.log", workdir);
	pid = fork();
	if (pid == 0) {
		execvp(qemu, (char *const *)argv);
		_exit(NB_EXIT_FAILED);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "net_bench: QEMU failed (console in %s/qemu-serial.log)\n", workdir);
		return -EIO;
	}
	snprintf(cmd, sizeof(cmd), "grep -q NETBENCH-OK '%s/qemu-serial.log'", workdir);
	if (system(cmd) != 0) {
		fprintf(stderr, "net_bench: the QEMU guest's commands failed (console in "
			"%s/qemu-serial.log)\n", workdir);
		return -EIO;
	}
	return 0;
}

static int nb_compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double nb_median(double *values, unsigned int count)
{
	qsort(values, count, sizeof(*values), nb_compare);
	return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

static bool nb_parse_uint(const char *text, unsigned int max, unsigned int *out)
{
	char *end = NULL;
	unsigned long value = strtoul(text, &end, 10);

	if (text[0] < '0' || text[0] > '9' || *end || value == 0 || value > max)
		return false;
	*out = (unsigned int)value;
	return true;
}

int main(int argc, char **argv)
{
	static const char *const side_names[NB_SIDES] = { "voidbox (virtio-net + libslirp)",
							   "QEMU -netdev user" };
	static const struct option options[] = {
		{ "runs", required_argument, NULL, 'n' }, { "requests", required_argument, NULL, 'r' },
		{ "mib", required_argument, NULL, 'm' },  { "qemu", required_argument, NULL, 'q' },
		{ "workdir", required_argument, NULL, 'w' }, { NULL, 0, NULL, 0 },
	};
	unsigned int runs = NB_DEFAULT_RUNS, requests = NB_DEFAULT_REQUESTS, mib = NB_DEFAULT_MIB;
	const char *qemu = "qemu-system-x86_64", *workdir = "/tmp";
	double rtt[NB_SIDES][NB_MAX_RUNS], rate[NB_SIDES][NB_MAX_RUNS];
	struct guest_image_paths image;
	char commands[NB_SCRIPT_MAX], err[NB_ERROR_MAX];
	int option;

	while ((option = getopt_long(argc, argv, "", options, NULL)) != -1) {
		bool ok = true;

		switch (option) {
		case 'n': ok = nb_parse_uint(optarg, NB_MAX_RUNS, &runs); break;
		case 'r': ok = nb_parse_uint(optarg, NB_MAX_REQUESTS, &requests) && requests > 1; break;
		case 'm': ok = nb_parse_uint(optarg, NB_MAX_MIB, &mib); break;
		case 'q': qemu = optarg; break;
		case 'w': workdir = optarg; break;
		default: ok = false; break;
		}
		if (!ok) {
			fprintf(stderr, "usage: net_bench [--runs 1..%u] [--requests 2..%u] "
				"[--mib 1..%u] [--qemu PATH] [--workdir DIR]\n", NB_MAX_RUNS,
				NB_MAX_REQUESTS, NB_MAX_MIB);
			return NB_EXIT_USAGE;
		}
	}
	host_env_apply();
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0) {
		fprintf(stderr, "net_bench: %s\n", err);
		return NB_EXIT_FAILED;
	}
	if (nb_start_server() < 0) {
		perror("net_bench: cannot start the server on 127.0.0.1");
		return NB_EXIT_FAILED;
	}
	nb_guest_commands(commands, sizeof(commands), requests, mib);
	/* alternating, so drift of a shared machine hits both sides alike */
	for (unsigned int run = 0; run < runs; run++) {
		for (int side = 0; side < NB_SIDES; side++) {
			struct nb_result result;
			int rc;

			nb_reset_observed();
			rc = side == 0 ? nb_voidbox_run(&image, workdir, commands)
				       : nb_qemu_run(qemu, &image, workdir, commands);
			if (rc < 0 || nb_collect(requests, mib, &result) < 0)
				return NB_EXIT_FAILED;
			rtt[side][run] = result.rtt_ms;
			rate[side][run] = result.mib_per_s;
			fprintf(stderr, "run %u %-32s round trip %7.2f ms  upload %7.1f MiB/s\n",
				run + 1, side_names[side], result.rtt_ms, result.mib_per_s);
		}
	}
	printf("%u runs, %u small fetches and a %u MiB upload each (medians)\n", runs, requests,
	       mib);
	printf("%-32s %16s %16s\n", "", "round trip (ms)", "upload (MiB/s)");
	for (int side = 0; side < NB_SIDES; side++)
		printf("%-32s %16.2f %16.1f\n", side_names[side], nb_median(rtt[side], runs),
		       nb_median(rate[side], runs));
	return 0;
}
