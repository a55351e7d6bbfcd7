/*
 * User-mode networking on real VMs. Traffic goes only to servers this program starts on the
 * host's 127.0.0.1 (an HTTP server and a DNS server, each a thread here), and every VM runs
 * with an allow list holding only 127.0.0.1/32 (or nothing this program serves), so a policy
 * mistake is refused rather than sent anywhere else. DNS is answered by the local server
 * (--dns-server), never by the host's resolvers.
 *
 * Four cold boots in this process. The first VM (allow 127.0.0.1/32, a published port, the
 * local DNS server, a cap of TEST_CONN_RATE new connections per second) fetches a small page
 * and a 10 MiB body byte for byte, is refused fast at a deny-listed address, trips the rate
 * cap and recovers, serves busybox httpd to the host through --publish, resolves a name
 * through 10.0.2.3, and is refused a second HTTP server whose port this program claims as
 * voidbox's own services claim theirs (common/loopback_claim.h) while it still reaches its
 * own published port; then it is snapshotted and a restored copy fetches again but is
 * refused the first VM's published port, which a second restore granted that port reaches,
 * and two fork children fetch at once.
 * The second VM allows only 127.0.0.2/32, where nothing is reachable, so its fetch from the
 * HTTP server is refused by the allow list (and would reach only that server if it were not).
 *
 * Then, through the voidbox command (argv[1]): `exec --network --allow 127.0.0.1/32` fetches,
 * a network flag without --network is a usage error, a workflow spec with sandbox.network,
 * network_allow and dns_server fetches by name through the DNS server, and a base made by
 * an `exec` in a jailed VMM process is refused the claimed server and fetches from the other, and
 * `snapshot create --network --allow 127.0.0.1/32` in a store of the test's own fetches when
 * `exec --snapshot` restores it: the restore runs in a jailed VMM process, which must have
 * loaded libslirp before it entered its jail.
 *
 * L1 of the nested harness starts with its loopback down; this program brings it up. busybox
 * wget runs without -T: Debian's static busybox 1.35 crashes with it; the exec's own timeout
 * bounds a hung fetch instead.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loopback_claim.h"
#include "devices/net.h"
#include "harness.h"
#include "http_request_head.h"
#include "loopback_port.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"
#include "vmm/snapshot.h"
#include "vm_test.h"

#define TEST_VM_MEMORY_MB 256
#define TEST_VM_VCPUS 1
#define TEST_SMALL_LEN 1500u
#define TEST_BIG_LEN (10u << 20)
#define TEST_CONN_RATE 2u
#define TEST_BURST 30
#define TEST_GUEST_HTTP_PORT 8080
#define TEST_OUTPUT_MAX 4096
#define TEST_EXEC_TIMEOUT_S 300
#define TEST_SCRIPT_MAX 1024
#define TEST_REQUEST_MAX 4096
#define TEST_SEND_CHUNK 65536u
#define TEST_DNS_MAX 512
#define TEST_DNS_HEADER_LEN 12
#define TEST_DNS_TYPE_A 1
#define TEST_DNS_CLASS_IN 1
#define TEST_DNS_TTL 60
#define TEST_DNS_NAME "test.voidbox.invalid"
#define TEST_FORK_CHILDREN 2
#define TEST_SNAPSHOT_ID_LEN 16 /* a store id: hex digits */
#define TEST_WORK_TEMPLATE "voidbox-nettest-XXXXXX"
#define TEST_SNAP_TEMPLATE "/tmp/voidbox-netsnap-XXXXXX"
#define TEST_CLI_OUTPUT_MAX 65536
#define TEST_GUEST_PAGE "<html>voidbox network test</html>\n"

static struct guest_image_paths image;
static const char *voidbox_cli;
static char work_dir[sizeof(TEST_WORK_TEMPLATE)];
static struct sandbox *main_vm;
static uint16_t http_port, dns_port, publish_port;
/* a second HTTP server whose port this program claims: no guest may reach it */
static uint16_t claimed_port;
static char big_md5[64];

/* ---- host-side servers on 127.0.0.1 ---- */

static uint8_t test_body_byte(size_t offset)
{
	return (uint8_t)((offset * 2654435761u) >> 13);
}

/* A socket bound to 127.0.0.1 on a port the kernel picks, listening if a stream; *port set. */
static int bind_loopback(int type, uint16_t *port)
{
	int fd = loopback_port_bind(type, port);

	if (fd >= 0 && type == SOCK_STREAM && listen(fd, 64) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		ssize_t sent = send(fd, p, len, MSG_NOSIGNAL);

		if (sent <= 0)
			return false;
		p += sent;
		len -= (size_t)sent;
	}
	return true;
}

/* One HTTP/1.0 exchange: GET /small or /big; anything else is a 404. */
static void *http_connection(void *opaque)
{
	int fd = (int)(intptr_t)opaque;
	char request[TEST_REQUEST_MAX + 1], header[256];
	uint8_t chunk[TEST_SEND_CHUNK];
	size_t body_len = 0;
	bool big;

	http_request_head_read(fd, request, sizeof(request));
	big = strncmp(request, "GET /big ", 9) == 0;
	if (big)
		body_len = TEST_BIG_LEN;
	else if (strncmp(request, "GET /small ", 11) == 0)
		body_len = TEST_SMALL_LEN;
	if (!body_len) {
		snprintf(header, sizeof(header), "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n");
		send_all(fd, header, strlen(header));
		close(fd);
		return NULL;
	}
	snprintf(header, sizeof(header), "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n",
		 body_len);
	if (send_all(fd, header, strlen(header))) {
		for (size_t offset = 0; offset < body_len;) {
			size_t len = body_len - offset < sizeof(chunk) ? body_len - offset
								       : sizeof(chunk);

			for (size_t i = 0; i < len; i++)
				chunk[i] = test_body_byte(offset + i);
			if (!send_all(fd, chunk, len))
				break;
			offset += len;
		}
	}
	close(fd);
	return NULL;
}

static void *http_server(void *opaque)
{
	int listen_fd = (int)(intptr_t)opaque;

	for (;;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t thread;

		if (fd < 0)
			continue;
		if (pthread_create(&thread, NULL, http_connection, (void *)(intptr_t)fd) != 0)
			close(fd);
		else
			pthread_detach(thread);
	}
	return NULL;
}

/* Answers every A query for TEST_DNS_NAME with 10.0.2.2, anything else with no answers. */
static void *dns_server(void *opaque)
{
	int fd = (int)(intptr_t)opaque;
	uint8_t packet[TEST_DNS_MAX];

	for (;;) {
		struct sockaddr_in peer;
		socklen_t peer_len = sizeof(peer);
		ssize_t got = recvfrom(fd, packet, sizeof(packet), 0, (struct sockaddr *)&peer,
				       &peer_len);
		size_t pos = TEST_DNS_HEADER_LEN, qtype_pos;
		char name[TEST_DNS_MAX];
		size_t name_len = 0;
		bool answer;

		if (got < TEST_DNS_HEADER_LEN)
			continue;
		while (pos < (size_t)got && packet[pos] && name_len + packet[pos] + 1 < sizeof(name)) {
			size_t label = packet[pos];

			if (pos + 1 + label > (size_t)got)
				break;
			if (name_len)
				name[name_len++] = '.';
			memcpy(name + name_len, packet + pos + 1, label);
			name_len += label;
			pos += 1 + label;
		}
		name[name_len] = '\0';
		qtype_pos = pos + 1;
		if (qtype_pos + 4 > (size_t)got)
			continue;
		answer = strcmp(name, TEST_DNS_NAME) == 0 &&
			 ((packet[qtype_pos] << 8) | packet[qtype_pos + 1]) == TEST_DNS_TYPE_A;
		packet[2] = 0x81; /* response, recursion desired */
		packet[3] = 0x80; /* recursion available, no error */
		packet[6] = 0;
		packet[7] = answer ? 1 : 0;
		memset(packet + 8, 0, 4);
		pos = qtype_pos + 4;
		if (answer && pos + 16 <= sizeof(packet)) {
			const uint8_t record[16] = { 0xc0, TEST_DNS_HEADER_LEN, 0, TEST_DNS_TYPE_A, 0,
						     TEST_DNS_CLASS_IN, 0, 0, 0, TEST_DNS_TTL, 0, 4,
						     10, 0, 2, 2 };

			memcpy(packet + pos, record, sizeof(record));
			pos += sizeof(record);
		}
		sendto(fd, packet, pos, 0, (struct sockaddr *)&peer, peer_len);
	}
	return NULL;
}

static int start_thread(void *(*fn)(void *), int fd)
{
	pthread_t thread;

	if (pthread_create(&thread, NULL, fn, (void *)(intptr_t)fd) != 0)
		return -1;
	pthread_detach(thread);
	return 0;
}

static void md5_of_big_body(char *out)
{
	char path[PATH_MAX], cmd[PATH_MAX + 32];
	uint8_t chunk[TEST_SEND_CHUNK];
	FILE *file;

	snprintf(path, sizeof(path), "%s/big.bin", work_dir);
	file = fopen(path, "we");
	for (size_t offset = 0; file && offset < TEST_BIG_LEN; offset += sizeof(chunk)) {
		for (size_t i = 0; i < sizeof(chunk); i++)
			chunk[i] = test_body_byte(offset + i);
		fwrite(chunk, 1, sizeof(chunk), file);
	}
	if (file)
		fclose(file);
	snprintf(cmd, sizeof(cmd), "md5sum %s", path);
	out[0] = '\0';
	file = popen(cmd, "r");
	if (file) {
		if (fscanf(file, "%32s", out) != 1)
			out[0] = '\0';
		pclose(file);
	}
	unlink(path);
}

/* ---- in the guest ---- */

/* Runs `sh -c script` in box; returns its exit code (-1: the RPC failed) and its stdout+stderr. */
static int guest_sh(struct sandbox *box, const char *script, char *out, size_t out_len)
{
	struct proto_exec_request req = { 0 };
	struct proto_exec_response resp = { 0 };
	char *args[] = { "-c", (char *)script };
	char err[512];
	int code;

	req.program = "sh";
	req.args = args;
	req.args_count = 2;
	req.has_timeout = true; /* a hung connection fails the check instead of the run */
	req.timeout_secs = TEST_EXEC_TIMEOUT_S;
	if (sandbox_exec(box, &req, NULL, NULL, &resp, err, sizeof(err)) < 0) {
		fprintf(stderr, "  exec '%s' failed: %s\n", script, err);
		return -1;
	}
	code = resp.exit_code;
	snprintf(out, out_len, "%.*s%.*s", (int)resp.stdout_data.len,
		 (const char *)resp.stdout_data.data, (int)resp.stderr_data.len,
		 (const char *)resp.stderr_data.data);
	proto_exec_response_free(&resp);
	return code;
}

/*
 * Waits out the current second in the guest: the main VM's cap is TEST_CONN_RATE new
 * connections a second, and the earlier tests' may still fill this second's window.
 */
static void wait_rate_window(struct sandbox *box)
{
	char out[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(guest_sh(box, "sleep 1", out, sizeof(out)), 0);
}

/*
 * Fetches /name from the HTTP server into the guest and checks what summary (a command run on
 * the file) prints against expected, which it must start with.
 */
static bool fetch(struct sandbox *box, const char *name, const char *summary,
		  const char *expected)
{
	char script[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX];
	int code;

	snprintf(script, sizeof(script),
		 "f=/tmp/fetch.$$; wget -q -O $f http://10.0.2.2:%u/%s && %s $f; r=$?; rm -f $f; "
		 "exit $r", http_port, name, summary);
	code = guest_sh(box, script, out, sizeof(out));
	if (code != 0 || !expected[0] || strncmp(out, expected, strlen(expected)) != 0) {
		fprintf(stderr, "  fetch of /%s: exit %d, output: %s (want %s)\n", name, code, out,
			expected);
		return false;
	}
	return true;
}

static bool fetch_small(struct sandbox *box)
{
	char expected[32];

	snprintf(expected, sizeof(expected), "%u ", TEST_SMALL_LEN);
	return fetch(box, "small", "wc -c", expected);
}

static bool fetch_big(struct sandbox *box)
{
	return fetch(box, "big", "md5sum", big_md5);
}

static void test_fetch_small_and_big(void)
{
	CHECK(fetch_small(main_vm));
	CHECK(big_md5[0] != '\0');
	CHECK(fetch_big(main_vm));
}

static void test_deny_list_refuses_fast(void)
{
	char out[TEST_OUTPUT_MAX];
	int code = guest_sh(main_vm, "wget -q -O /dev/null http://169.254.169.254/", out,
			    sizeof(out));

	CHECK(code != 0);
	/* a reset, not a timeout: wget reports the refusal */
	CHECK(strstr(out, "refused") != NULL);
	if (!strstr(out, "refused"))
		fprintf(stderr, "  output: %s\n", out);
}

static void test_rate_cap_triggers_and_recovers(void)
{
	char script[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX];
	int refused = 0, passed = 0;

	wait_rate_window(main_vm);
	snprintf(script, sizeof(script),
		 "i=0; while [ $i -lt %d ]; do i=$((i+1)); "
		 "(wget -q -O /dev/null http://10.0.2.2:%u/small && echo PASS || echo REFUSED) & "
		 "done; wait",
		 TEST_BURST, http_port);
	CHECK_INT_EQ(guest_sh(main_vm, script, out, sizeof(out)), 0);
	for (const char *p = out; (p = strstr(p, "REFUSED")); p++)
		refused++;
	for (const char *p = out; (p = strstr(p, "PASS")); p++)
		passed++;
	fprintf(stderr, "  burst of %d: %d passed, %d refused (cap %u/s)\n", TEST_BURST, passed,
		refused, TEST_CONN_RATE);
	CHECK(refused > 0);
	CHECK(passed > 0);
	CHECK_INT_EQ(passed + refused, TEST_BURST);
	/* a second later the window has passed: connections go through again */
	CHECK_INT_EQ(guest_sh(main_vm, "sleep 2", out, sizeof(out)), 0);
	CHECK(fetch_small(main_vm));
}

static void test_publish_reaches_guest_httpd(void)
{
	char script[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX], reply[TEST_OUTPUT_MAX];
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(publish_port),
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	const char *request = "GET /index.html HTTP/1.0\r\n\r\n";
	size_t used = 0;
	int fd;

	snprintf(script, sizeof(script),
		 "mkdir -p /tmp/www && printf '%s' > /tmp/www/index.html && "
		 "httpd -p %d -h /tmp/www && echo started",
		 TEST_GUEST_PAGE, TEST_GUEST_HTTP_PORT);
	CHECK_INT_EQ(guest_sh(main_vm, script, out, sizeof(out)), 0);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_INT_EQ(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	CHECK(send_all(fd, request, strlen(request)));
	for (;;) {
		ssize_t got = recv(fd, reply + used, sizeof(reply) - 1 - used, 0);

		if (got <= 0)
			break;
		used += (size_t)got;
	}
	reply[used] = '\0';
	close(fd);
	CHECK(strstr(reply, "200 OK") != NULL);
	CHECK(strstr(reply, TEST_GUEST_PAGE) != NULL);
}

/* A guest's wget of url: its exit status, with the output in out. */
static int guest_wget(struct sandbox *box, const char *url, char *out, size_t out_len)
{
	char script[TEST_SCRIPT_MAX];

	snprintf(script, sizeof(script), "wget -q -O - %s", url);
	return guest_sh(box, script, out, out_len);
}

/*
 * The claimed server is refused with a reset (as another sandbox's messaging listener would
 * be), the unclaimed one still answers, and this VM's own published port, which its network
 * device claims, is granted to its own guest (run after the guest's httpd has started).
 */
static void test_claimed_port_refused(void)
{
	char url[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX];
	int code;

	wait_rate_window(main_vm);
	snprintf(url, sizeof(url), "http://10.0.2.2:%u/small", claimed_port);
	code = guest_wget(main_vm, url, out, sizeof(out));
	CHECK(code != 0);
	CHECK(strstr(out, "refused") != NULL);
	if (code == 0 || !strstr(out, "refused"))
		fprintf(stderr, "  claimed port: exit %d, output: %s\n", code, out);
	CHECK(fetch_small(main_vm));
	wait_rate_window(main_vm);
	snprintf(url, sizeof(url), "http://10.0.2.2:%u/index.html", publish_port);
	code = guest_wget(main_vm, url, out, sizeof(out));
	CHECK_INT_EQ(code, 0);
	CHECK(strstr(out, TEST_GUEST_PAGE) != NULL);
	if (code != 0)
		fprintf(stderr, "  own published port: output: %s\n", out);
}

static void test_dns_through_10_0_2_3(void)
{
	char out[TEST_OUTPUT_MAX];
	int code = guest_sh(main_vm, "cat /etc/resolv.conf; nslookup " TEST_DNS_NAME, out,
			    sizeof(out));

	CHECK_INT_EQ(code, 0);
	CHECK(strstr(out, "nameserver 10.0.2.3") != NULL);
	CHECK(strstr(out, "10.0.2.2") != NULL);
	if (code != 0 || !strstr(out, "10.0.2.2"))
		fprintf(stderr, "  output: %s\n", out);
}

static void test_snapshot_restore_fetches(void)
{
	char snap_parent[] = TEST_SNAP_TEMPLATE, dir[PATH_MAX], log_path[PATH_MAX], err[1024];
	struct vm_snapshot_options opts = { .type = VM_SNAPSHOT_BASE, .after = VM_SNAPSHOT_RESUME };
	struct sandbox_restore_config restore = { 0 };
	struct sandbox *restored = NULL;
	char cmd[PATH_MAX + 16];

	CHECK(mkdtemp(snap_parent) != NULL);
	snprintf(dir, sizeof(dir), "%s/base", snap_parent);
	CHECK_INT_EQ(sandbox_snapshot(main_vm, dir, &opts, err, sizeof(err)), 0);
	snprintf(log_path, sizeof(log_path), "%s/restored.log", work_dir);
	restore.snapshot_dir = dir;
	restore.serial_log_path = log_path;
	if (sandbox_start_from_snapshot(&restore, &restored, err, sizeof(err)) < 0) {
		fprintf(stderr, "  restore failed: %s\n", err);
		CHECK(false);
	} else {
		char url[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX];

		CHECK(fetch_small(restored));
		/* the first VM's published port is its guest's alone: another VM's is refused */
		snprintf(url, sizeof(url), "http://10.0.2.2:%u/index.html", publish_port);
		CHECK(guest_wget(restored, url, out, sizeof(out)) != 0);
		CHECK(strstr(out, "refused") != NULL);
		CHECK(strstr(out, TEST_GUEST_PAGE) == NULL);
		sandbox_destroy(restored, harness_checks_failed_in_test > 0);
	}
	/* a restore its caller grants the port (as a messaging agent's own listener) reaches it */
	struct net_policy grants = { .granted_count = 0 };
	char url[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX];

	CHECK_INT_EQ(net_policy_grant_port(&grants, publish_port), 0);
	restore.grants = &grants;
	snprintf(log_path, sizeof(log_path), "%s/restored-granted.log", work_dir);
	if (sandbox_start_from_snapshot(&restore, &restored, err, sizeof(err)) < 0) {
		fprintf(stderr, "  granted restore failed: %s\n", err);
		CHECK(false);
	} else {
		snprintf(url, sizeof(url), "http://10.0.2.2:%u/index.html", publish_port);
		CHECK_INT_EQ(guest_wget(restored, url, out, sizeof(out)), 0);
		CHECK(strstr(out, TEST_GUEST_PAGE) != NULL);
		sandbox_destroy(restored, harness_checks_failed_in_test > 0);
	}
	/* the VM that was snapshotted still has its network */
	CHECK(fetch_small(main_vm));
	snprintf(cmd, sizeof(cmd), "rm -rf %s", snap_parent);
	CHECK_INT_EQ(system(cmd), 0);
}

struct fork_fetch {
	struct sandbox *box;
	bool ok;
};

static void *fork_fetch_thread(void *opaque)
{
	struct fork_fetch *job = opaque;

	job->ok = fetch_big(job->box);
	return NULL;
}

static void test_fork_children_fetch_at_once(void)
{
	struct sandbox *children[TEST_FORK_CHILDREN] = { NULL };
	struct fork_fetch jobs[TEST_FORK_CHILDREN];
	pthread_t threads[TEST_FORK_CHILDREN];
	char err[1024];

	if (sandbox_fork(main_vm, TEST_FORK_CHILDREN, children, err, sizeof(err)) < 0) {
		fprintf(stderr, "  fork failed: %s\n", err);
		CHECK(false);
		return;
	}
	for (int i = 0; i < TEST_FORK_CHILDREN; i++) {
		jobs[i] = (struct fork_fetch){ .box = children[i] };
		CHECK_INT_EQ(pthread_create(&threads[i], NULL, fork_fetch_thread, &jobs[i]), 0);
	}
	for (int i = 0; i < TEST_FORK_CHILDREN; i++) {
		pthread_join(threads[i], NULL);
		CHECK(jobs[i].ok);
		sandbox_destroy(children[i], !jobs[i].ok);
	}
}

/* After real traffic and DNS: the network worker (libslirp) ran them under its filter. */
static void test_net_worker_confined(void)
{
	vm_test_check_threads_confined("net-worker");
}

static int start_vm(const struct net_config *net, const char *log_name, struct sandbox **out)
{
	struct sandbox_config cfg = { 0 };
	char log_path[PATH_MAX], err[1024];

	snprintf(log_path, sizeof(log_path), "%s/%s", work_dir, log_name);
	cfg.kernel_path = image.kernel;
	cfg.initramfs_path = image.initramfs;
	cfg.memory_mb = TEST_VM_MEMORY_MB;
	cfg.vcpus = TEST_VM_VCPUS;
	cfg.serial_log_path = log_path;
	cfg.network = net;
	if (sandbox_start(&cfg, out, err, sizeof(err)) < 0) {
		fprintf(stderr, "FAIL: the test VM did not start: %s\n", err);
		return -1;
	}
	return 0;
}

static void test_allow_list_refuses_the_rest(void)
{
	struct net_config net;
	struct net_cidr elsewhere;
	struct sandbox *box = NULL;
	char script[TEST_SCRIPT_MAX], out[TEST_OUTPUT_MAX];
	int code;

	memset(&net, 0, sizeof(net));
	net_policy_init_default(&net.policy);
	CHECK_INT_EQ(net_cidr_parse("127.0.0.2/32", &elsewhere), 0);
	CHECK_INT_EQ(net_policy_add_allow(&net.policy, &elsewhere), 0);
	net.policy.dns = false;
	if (start_vm(&net, "allow.log", &box) < 0) {
		CHECK(false);
		return;
	}
	snprintf(script, sizeof(script), "wget -q -O /dev/null http://10.0.2.2:%u/small",
		 http_port);
	code = guest_sh(box, script, out, sizeof(out));
	CHECK(code != 0);
	CHECK(strstr(out, "refused") != NULL);
	if (!strstr(out, "refused"))
		fprintf(stderr, "  output: %s\n", out);
	sandbox_destroy(box, harness_checks_failed_in_test > 0);
}

/* Runs a shell command line on the host; returns its exit status and its output (both streams). */
static int host_run(const char *cmdline, char *out, size_t out_len)
{
	FILE *pipe = popen(cmdline, "r");
	size_t used = 0;
	int status;

	out[0] = '\0';
	if (!pipe)
		return -1;
	while (used + 1 < out_len) {
		size_t got = fread(out + used, 1, out_len - 1 - used, pipe);

		if (got == 0)
			break;
		used += got;
	}
	out[used] = '\0';
	status = pclose(pipe);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_cli_exec_network(void)
{
	static char out[TEST_CLI_OUTPUT_MAX];
	char cmd[TEST_SCRIPT_MAX];
	int code;

	snprintf(cmd, sizeof(cmd),
		 "'%s' exec --memory %d --network --allow 127.0.0.1/32 -- sh -c "
		 "'wget -q -O /tmp/s http://10.0.2.2:%u/small && wc -c < /tmp/s' 2>&1",
		 voidbox_cli, TEST_VM_MEMORY_MB, http_port);
	code = host_run(cmd, out, sizeof(out));
	CHECK_INT_EQ(code, 0);
	CHECK((unsigned int)atoi(out) == TEST_SMALL_LEN);
	if (code != 0)
		fprintf(stderr, "  output: %s\n", out);
	/* a jailed VMM's confined network worker asks about claims too */
	snprintf(cmd, sizeof(cmd),
		 "'%s' exec --memory %d --network --allow 127.0.0.1/32 -- sh -c "
		 "'wget -q -O /dev/null http://10.0.2.2:%u/small || echo CLAIMED-REFUSED; "
		 "wget -q -O /tmp/s http://10.0.2.2:%u/small && wc -c < /tmp/s' 2>&1",
		 voidbox_cli, TEST_VM_MEMORY_MB, claimed_port, http_port);
	code = host_run(cmd, out, sizeof(out));
	CHECK_INT_EQ(code, 0);
	CHECK(strstr(out, "refused") != NULL);
	CHECK(strstr(out, "CLAIMED-REFUSED") != NULL);
	CHECK(strstr(out, "1500") != NULL);
	if (code != 0 || !strstr(out, "CLAIMED-REFUSED"))
		fprintf(stderr, "  output: %s\n", out);
	snprintf(cmd, sizeof(cmd), "'%s' exec --allow 127.0.0.1/32 -- true 2>&1", voidbox_cli);
	CHECK_INT_EQ(host_run(cmd, out, sizeof(out)), 2);
	CHECK(strstr(out, "need --network") != NULL);
}

/* A networked base, then a restore of it fetching: both in jailed VMM processes. */
static void test_cli_snapshot_network(void)
{
	static char out[TEST_CLI_OUTPUT_MAX];
	char cmd[3 * PATH_MAX + TEST_SCRIPT_MAX], id[TEST_SNAPSHOT_ID_LEN + 1] = "";
	char home[PATH_MAX];
	const char *found;
	int code;

	if (!realpath(work_dir, home))
		harness_fail_setup("realpath of the work directory");
	snprintf(cmd, sizeof(cmd),
		 "VOIDBOX_HOME='%s/home' '%s' --output json snapshot create --kernel '%s' "
		 "--initramfs '%s' --memory %d --network --allow 127.0.0.1/32 2>&1",
		 home, voidbox_cli, image.kernel, image.initramfs, TEST_VM_MEMORY_MB);
	code = host_run(cmd, out, sizeof(out));
	CHECK_INT_EQ(code, 0);
	found = strstr(out, "\"id\"");
	found = found ? strchr(found + strlen("\"id\""), '"') : NULL;
	if (found)
		snprintf(id, sizeof(id), "%.*s", TEST_SNAPSHOT_ID_LEN, found + 1);
	CHECK_INT_EQ(strlen(id), TEST_SNAPSHOT_ID_LEN);
	if (code != 0 || strlen(id) != TEST_SNAPSHOT_ID_LEN) {
		fprintf(stderr, "  output: %s\n", out);
		return;
	}
	snprintf(cmd, sizeof(cmd),
		 "VOIDBOX_HOME='%s/home' '%s' exec --snapshot %s -- sh -c "
		 "'wget -q -O /tmp/s http://10.0.2.2:%u/small && wc -c < /tmp/s' 2>&1",
		 home, voidbox_cli, id, http_port);
	code = host_run(cmd, out, sizeof(out));
	CHECK_INT_EQ(code, 0);
	CHECK((unsigned int)atoi(out) == TEST_SMALL_LEN);
	if (code != 0)
		fprintf(stderr, "  output: %s\n", out);
}

static void test_spec_network(void)
{
	static char out[TEST_CLI_OUTPUT_MAX];
	char spec_path[PATH_MAX], cmd[PATH_MAX + TEST_SCRIPT_MAX];
	FILE *spec;
	int code;

	snprintf(spec_path, sizeof(spec_path), "%s/net.yaml", work_dir);
	spec = fopen(spec_path, "we");
	CHECK(spec != NULL);
	if (!spec)
		return;
	fprintf(spec,
		"kind: workflow\nname: net\n"
		"sandbox:\n  mode: local\n  memory_mb: %d\n  network: true\n"
		"  network_allow: [127.0.0.1/32]\n  dns_server: \"127.0.0.1:%u\"\n"
		"workflow:\n  steps:\n    - name: fetch\n"
		"      run: {program: sh, args: [\"-c\", \"nslookup %s >/dev/null && "
		"wget -q -O /tmp/s http://%s:%u/small && wc -c < /tmp/s\"]}\n",
		TEST_VM_MEMORY_MB, dns_port, TEST_DNS_NAME, TEST_DNS_NAME, http_port);
	fclose(spec);
	snprintf(cmd, sizeof(cmd), "'%s' run --file '%s' 2>&1", voidbox_cli, spec_path);
	code = host_run(cmd, out, sizeof(out));
	CHECK_INT_EQ(code, 0);
	CHECK(strstr(out, "1500") != NULL);
	if (code != 0 || !strstr(out, "1500"))
		fprintf(stderr, "  output: %s\n", out);
}

/* A failed run keeps the guest consoles; a passing one leaves nothing behind. */
static void finish_work_dir(void)
{
	char cmd[sizeof(work_dir) + 16];

	if (harness_tests_failed) {
		fprintf(stderr, "guest consoles kept in %s\n", work_dir);
		return;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", work_dir);
}

int main(int argc, char **argv)
{
	struct net_config net;
	struct net_cidr loopback;
	int http_fd, claimed_fd, claim, dns_fd, probe_fd;

	if (argc != 2)
		harness_fail_setup("usage: vm_network VOIDBOX_CLI");
	voidbox_cli = argv[1];
	vm_test_require_vm(&image);
	snprintf(work_dir, sizeof(work_dir), "%s", TEST_WORK_TEMPLATE);
	if (!mkdtemp(work_dir) || vm_test_loopback_up() < 0) {
		perror("setting up (work directory, loopback)");
		return 1;
	}
	http_fd = bind_loopback(SOCK_STREAM, &http_port);
	claimed_fd = bind_loopback(SOCK_STREAM, &claimed_port);
	claim = claimed_fd >= 0 ? loopback_claim_port(claimed_port) : -1;
	dns_fd = bind_loopback(SOCK_DGRAM, &dns_port);
	probe_fd = bind_loopback(SOCK_STREAM, &publish_port); /* a free port to publish */
	if (http_fd < 0 || claimed_fd < 0 || claim < 0 || dns_fd < 0 || probe_fd < 0 ||
	    start_thread(http_server, http_fd) < 0 || start_thread(http_server, claimed_fd) < 0 ||
	    start_thread(dns_server, dns_fd) < 0) {
		perror("starting the loopback servers");
		return 1;
	}
	close(probe_fd);
	md5_of_big_body(big_md5);

	memset(&net, 0, sizeof(net));
	net_policy_init_default(&net.policy);
	net_cidr_parse("127.0.0.1/32", &loopback);
	net_policy_add_allow(&net.policy, &loopback);
	net.policy.max_new_per_sec = TEST_CONN_RATE;
	net.dns_server_addr = NET_HOST_LOOPBACK_ADDR;
	net.dns_server_port = dns_port;
	net.publish[0] = (struct net_publish){ .host_port = publish_port,
					       .guest_port = TEST_GUEST_HTTP_PORT };
	net.publish_count = 1;
	if (start_vm(&net, "main.log", &main_vm) < 0) {
		printf("0 passed, 1 failed\n");
		return 1;
	}
	fprintf(stderr, "networked VM up in %ld ms; HTTP on 127.0.0.1:%u, DNS on 127.0.0.1:%u, "
		"publishing 127.0.0.1:%u\n", sandbox_boot_ms(main_vm), http_port, dns_port,
		publish_port);
	RUN_TEST(test_fetch_small_and_big);
	RUN_TEST(test_deny_list_refuses_fast);
	RUN_TEST(test_publish_reaches_guest_httpd);
	RUN_TEST(test_claimed_port_refused);
	RUN_TEST(test_dns_through_10_0_2_3);
	RUN_TEST(test_net_worker_confined);
	RUN_TEST(test_rate_cap_triggers_and_recovers);
	RUN_TEST(test_snapshot_restore_fetches);
	RUN_TEST(test_fork_children_fetch_at_once);
	sandbox_destroy(main_vm, harness_tests_failed > 0);
	RUN_TEST(test_allow_list_refuses_the_rest);
	RUN_TEST(test_cli_exec_network);
	RUN_TEST(test_spec_network);
	RUN_TEST(test_cli_snapshot_network);
	finish_work_dir();
	return harness_finish();
}
