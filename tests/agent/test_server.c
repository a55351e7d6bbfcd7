/*
 * The real voidbox-agent binary, run on the host with --listen unix:PATH --root-prefix DIR,
 * driven by a raw protocol client. Raw frames (not the host control channel) so the test can
 * send what a correct host never sends: wrong secrets, frames before the Ping, unknown types,
 * over-cap lengths. Covers the connection registry's limit, the session policy (nothing runs
 * before SetPolicy, one per session, matched on the resolved path), no_new_privs, exec
 * concurrency, timeouts, signals, stdin, file RPCs, telemetry, PTY sessions and orphan
 * reaping. A test that narrows the policy rekeys to a new session to set it, and ends with
 * another that allows everything again.
 */
#include "proto/protocol.h"

#include "harness.h"
#include "process_probe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECRET_HEX "8f3c1e2d4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
#define READ_TIMEOUT_MS 10000
#define AGENT_START_WAIT_MS 5000
#define OVERALL_TIMEOUT_SECS 100
#define PTY_LIMIT 4
#define PTY_SLOT_WAIT_MS 8000
#define REGISTRY_SIZE 256 /* the agent's RESTORE_MAX_CONNS */
#define REGISTRY_PROBE_CONNS (REGISTRY_SIZE + 8)
#define REKEY_PATH "/etc/voidbox/restore.json"
#define REKEY_DOC_MAX 256
#define DEFAULT_MAX_OPEN_FILES 1024
#define DEFAULT_MAX_PROCESSES 512
#define DEFAULT_MAX_FILE_SIZE (100 * 1024 * 1024)
/* the shell and its background sleep, each writing its pid */
#define GROUP_MEMBERS 2
/* What a child of the agent reads from /proc/self/status, whitespace collapsed: the agent's
 * sandbox user (guest/agent/sandbox_user.h), with no other group. */
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000
/* The ids of a /proc/PID/status Uid: or Gid: line of root, and a bound for its lines. */
#define ROOT_IDS "\t0\t0\t0\t0\n"
#define PROC_STATUS_LINE_MAX 256
#define SANDBOX_CREDENTIALS "Uid: 1000 1000 1000 1000\nGid: 1000 1000 1000 1000\nGroups: 1000\n"
static const char *const credentials_script_args[] = {
	"-c", "grep -E '^(Uid|Gid|Groups):' /proc/self/status | while read -r line; do "
	      "echo $line; done"
};

static char tree[] = "/tmp/voidbox-agent-test-XXXXXX";
static char socket_path[PATH_MAX];
static uint8_t secret[PROTO_SECRET_SIZE];
static pid_t agent_pid;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int client_connect(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (strlen(socket_path) >= sizeof(addr.sun_path))
		return -1;
	memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void client_timeout(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Reads the Challenge the agent opens every connection with. 0, or -1. */
static int client_read_challenge(int fd, uint8_t nonce[PROTO_NONCE_SIZE])
{
	struct proto_frame frame = { 0 };
	int rc = -1;

	client_timeout(fd, READ_TIMEOUT_MS);
	if (proto_frame_read(fd, false, &frame) == 0 && frame.type == PROTO_MSG_CHALLENGE &&
	    frame.body_len == PROTO_NONCE_SIZE) {
		memcpy(nonce, frame.body, PROTO_NONCE_SIZE);
		rc = 0;
	}
	proto_frame_free(&frame);
	return rc;
}

/* The Ping a host with key sends in answer to nonce. */
static void client_ping_body(const uint8_t *key, const uint8_t nonce[PROTO_NONCE_SIZE],
			     uint8_t flags, uint8_t body[PROTO_PING_SIZE])
{
	struct proto_ping ping = { .version = PROTO_VERSION, .flags = flags };

	proto_handshake_proof(key, nonce, ping.proof);
	proto_ping_encode(&ping, body);
}

/* Sends a Ping body and reads the Pong: 0 when the agent accepted it. */
static int client_ping(int fd, const uint8_t body[PROTO_PING_SIZE])
{
	struct proto_frame frame = { 0 };
	struct proto_pong pong;
	int rc = -1;

	if (proto_frame_write(fd, PROTO_MSG_PING, false, 0, body, PROTO_PING_SIZE) == 0 &&
	    proto_frame_read(fd, false, &frame) == 0 && frame.type == PROTO_MSG_PONG &&
	    proto_pong_decode(frame.body, frame.body_len, &pong) == 0 &&
	    pong.version == PROTO_VERSION && pong.flags == PROTO_FLAG_SUPPORTS_MULTIPLEX)
		rc = 0;
	proto_frame_free(&frame);
	return rc;
}

/* Returns the connected fd after a successful handshake, or -1. */
static int client_open_with(const uint8_t *key, uint8_t flags)
{
	uint8_t nonce[PROTO_NONCE_SIZE], body[PROTO_PING_SIZE];
	int fd = client_connect();

	if (fd < 0)
		return -1;
	if (client_read_challenge(fd, nonce) < 0) {
		close(fd);
		return -1;
	}
	client_ping_body(key, nonce, flags, body);
	if (client_ping(fd, body) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int client_open(void)
{
	return client_open_with(secret, PROTO_FLAG_SUPPORTS_MULTIPLEX);
}

/* True when the agent closed the connection (EOF) instead of answering. */
static bool client_sees_close(int fd)
{
	uint8_t byte;
	ssize_t n;

	client_timeout(fd, READ_TIMEOUT_MS);
	n = read(fd, &byte, 1);
	return n == 0 || (n < 0 && errno == ECONNRESET);
}

static int client_read(int fd, struct proto_frame *frame)
{
	memset(frame, 0, sizeof(*frame));
	return proto_frame_read(fd, true, frame);
}

static void start_agent(const char *agent)
{
	char prefix_arg[PATH_MAX], listen_arg[PATH_MAX + 8];
	uint64_t deadline;
	struct stat st;

	snprintf(socket_path, sizeof(socket_path), "%s/agent.sock", tree);
	snprintf(listen_arg, sizeof(listen_arg), "unix:%s", socket_path);
	snprintf(prefix_arg, sizeof(prefix_arg), "%s", tree);
	agent_pid = fork();
	if (agent_pid == 0) {
		/* Never outlive the test, even when it is killed. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(agent, agent, "--listen", listen_arg, "--secret-hex", SECRET_HEX,
		      "--root-prefix", prefix_arg, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	deadline = now_ms() + AGENT_START_WAIT_MS;
	while (stat(socket_path, &st) != 0 && now_ms() < deadline)
		sleep_ms(20);
}

static int write_text_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int err = 0;

	if (!f)
		return -errno;
	if (fputs(text, f) < 0)
		err = -EIO;
	if (fclose(f) != 0 && !err)
		err = -EIO;
	return err;
}

static void make_tree(void)
{
	static const char *const dirs[] = { "/workspace", "/home", "/home/sandbox", "/etc",
					    "/etc/voidbox" };
	char path[PATH_MAX];

	if (!mkdtemp(tree))
		harness_fail_setup("cannot create a temporary directory (mkdtemp)");
	/* Children run as uid 1000 when the test runs as root; they must reach the tree. */
	chmod(tree, 0755);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", tree, dirs[i]);
		mkdir(path, 0755);
	}
	/* ... and write in /workspace, as in the guest, where it belongs to the sandbox user */
	snprintf(path, sizeof(path), "%s/workspace", tree);
	if (geteuid() == 0 && chown(path, SANDBOX_UID, SANDBOX_GID) < 0)
		harness_fail_setup("cannot give the test tree's /workspace to the sandbox user");
}

struct exec_result {
	struct proto_exec_response response;
	size_t stdout_chunks;
	size_t stdout_chunk_bytes;
	uint64_t last_seq;
	bool seq_ok;
};

static int send_exec(int fd, uint32_t id, const char *program, char **args, size_t nargs,
		     const char *stdin_text, size_t stdin_len, uint64_t timeout_secs)
{
	struct proto_exec_request request = {
		.program = (char *)program, .args = args, .args_count = nargs,
		.stdin_data = { .data = (uint8_t *)stdin_text, .len = stdin_len },
		.has_timeout = timeout_secs > 0, .timeout_secs = timeout_secs,
	};
	uint8_t *body;
	size_t len;
	int err = proto_exec_request_encode(&request, &body, &len);

	if (err)
		return err;
	err = proto_frame_write(fd, PROTO_MSG_EXEC_REQUEST, true, id, body, len);
	free(body);
	return err;
}

/* Reads frames until the ExecResponse for id; other frames are ignored. */
static int wait_exec(int fd, uint32_t id, struct exec_result *result)
{
	memset(result, 0, sizeof(*result));
	result->seq_ok = true;
	for (;;) {
		struct proto_frame frame;
		int err = client_read(fd, &frame);

		if (err)
			return err;
		if (frame.request_id == id && frame.type == PROTO_MSG_EXEC_OUTPUT_CHUNK) {
			struct proto_exec_output_chunk chunk = { 0 };

			if (proto_exec_output_chunk_decode(frame.body, frame.body_len, &chunk,
							   NULL) == 0 &&
			    chunk.stream == PROTO_STREAM_STDOUT) {
				if (chunk.seq != result->stdout_chunks)
					result->seq_ok = false;
				result->stdout_chunks++;
				result->stdout_chunk_bytes += chunk.data.len;
			}
			proto_exec_output_chunk_free(&chunk);
		} else if (frame.request_id == id && frame.type == PROTO_MSG_EXEC_RESPONSE) {
			err = proto_exec_response_decode(frame.body, frame.body_len,
							 &result->response, NULL);
			proto_frame_free(&frame);
			return err;
		}
		proto_frame_free(&frame);
	}
}

static int run_exec(int fd, uint32_t id, const char *program, char **args, size_t nargs,
		    uint64_t timeout_secs, struct exec_result *result)
{
	int err = send_exec(fd, id, program, args, nargs, NULL, 0, timeout_secs);

	return err ? err : wait_exec(fd, id, result);
}

static bool output_is(const struct proto_bytes *bytes, const char *text)
{
	return bytes->len == strlen(text) && memcmp(bytes->data, text, bytes->len) == 0;
}

static void test_handshake_rejections(void)
{
	uint8_t wrong[PROTO_SECRET_SIZE], nonce[PROTO_NONCE_SIZE];
	struct proto_ping ping = { .version = PROTO_VERSION,
				   .flags = PROTO_FLAG_SUPPORTS_MULTIPLEX };
	uint8_t body[PROTO_PING_SIZE];
	int fd;

	memcpy(wrong, secret, sizeof(wrong));
	wrong[7] ^= 1;
	CHECK(client_open_with(wrong, PROTO_FLAG_SUPPORTS_MULTIPLEX) < 0);
	CHECK(client_open_with(secret, 0) < 0);

	/* A request before the Ping closes the connection. */
	fd = client_connect();
	CHECK(fd >= 0);
	CHECK_INT_EQ(client_read_challenge(fd, nonce), 0);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_SNAPSHOT_READY, false, 0, NULL, 0), 0);
	CHECK(client_sees_close(fd));
	close(fd);

	/* A Ping carrying the secret itself (the old protocol's) is no proof: just a close. */
	fd = client_connect();
	CHECK_INT_EQ(client_read_challenge(fd, nonce), 0);
	memcpy(ping.proof, secret, sizeof(ping.proof));
	proto_ping_encode(&ping, body);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_PING, false, 0, body, sizeof(body)), 0);
	CHECK(client_sees_close(fd));
	close(fd);

	fd = client_open();
	CHECK(fd >= 0);
	close(fd);
}

/*
 * The secret never crosses the wire and a recorded handshake cannot be replayed: every
 * connection gets a fresh Challenge, the Ping answers it with an HMAC (the secret's bytes are
 * not in it), and a Ping recorded on one connection is refused on the next.
 */
static void test_handshake_not_replayable(void)
{
	uint8_t first_nonce[PROTO_NONCE_SIZE], second_nonce[PROTO_NONCE_SIZE];
	uint8_t recorded[PROTO_PING_SIZE];
	int fd = client_connect();

	CHECK(fd >= 0);
	CHECK_INT_EQ(client_read_challenge(fd, first_nonce), 0);
	client_ping_body(secret, first_nonce, PROTO_FLAG_SUPPORTS_MULTIPLEX, recorded);
	CHECK(memmem(recorded, sizeof(recorded), secret, sizeof(secret)) == NULL);
	CHECK_INT_EQ(client_ping(fd, recorded), 0);
	close(fd);

	fd = client_connect();
	CHECK(fd >= 0);
	CHECK_INT_EQ(client_read_challenge(fd, second_nonce), 0);
	CHECK(memcmp(first_nonce, second_nonce, PROTO_NONCE_SIZE) != 0);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_PING, false, 0, recorded, sizeof(recorded)), 0);
	CHECK(client_sees_close(fd));
	close(fd);
}

/*
 * The agent counts authenticated connections so a rekey can close every old one; a
 * connection it could not count would outlive the rekey, so past the registry's size it
 * refuses the handshake. Closing one makes room again.
 */
static void test_connection_registry_full_refuses(void)
{
	static int fds[REGISTRY_PROBE_CONNS];
	size_t opened = 0;
	uint64_t deadline;
	int fd = -1;

	while (opened < REGISTRY_PROBE_CONNS && (fds[opened] = client_open()) >= 0)
		opened++;
	CHECK(opened > 0);
	CHECK(opened <= REGISTRY_SIZE);
	CHECK(opened < REGISTRY_PROBE_CONNS);
	if (opened > 0)
		close(fds[--opened]);
	deadline = now_ms() + READ_TIMEOUT_MS;
	while (fd < 0 && now_ms() < deadline) {
		fd = client_open();
		if (fd < 0)
			sleep_ms(20);
	}
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	while (opened > 0)
		close(fds[--opened]);
}

static void test_exec_basic(void)
{
	char *args[] = { "-c", "echo hello; echo err >&2; exit 3" };
	struct exec_result result;
	int fd = client_open();

	CHECK_INT_EQ(run_exec(fd, 5, "sh", args, 2, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 3);
	CHECK(output_is(&result.response.stdout_data, "hello\n"));
	CHECK(output_is(&result.response.stderr_data, "err\n"));
	CHECK(result.response.error == NULL);
	CHECK(result.response.has_duration);
	CHECK(result.stdout_chunks >= 1);
	CHECK_INT_EQ(result.stdout_chunk_bytes, 6);
	proto_exec_response_free(&result.response);
	close(fd);
}

static void test_exec_stdin_large(void)
{
	size_t len = 2 * 1024 * 1024;
	char *input = malloc(len);
	struct exec_result result;
	int fd = client_open();

	for (size_t i = 0; i < len; i++)
		input[i] = (char)('a' + i % 26);
	CHECK_INT_EQ(send_exec(fd, 6, "cat", NULL, 0, input, len, 30), 0);
	CHECK_INT_EQ(wait_exec(fd, 6, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	CHECK_INT_EQ(result.response.stdout_data.len, len);
	CHECK(result.response.stdout_data.len == len &&
	      memcmp(result.response.stdout_data.data, input, len) == 0);
	CHECK(result.seq_ok);
	CHECK_INT_EQ(result.stdout_chunk_bytes, len);
	proto_exec_response_free(&result.response);
	free(input);
	close(fd);
}

static void test_exec_does_not_block_other_rpcs(void)
{
	char *sleep_args[] = { "3" };
	struct proto_path_request stat_request = { .path = "/workspace" };
	uint8_t *body;
	size_t len;
	struct exec_result result;
	bool stat_seen = false;
	int fd = client_open();

	CHECK_INT_EQ(send_exec(fd, 10, "sleep", sleep_args, 1, NULL, 0, 0), 0);
	CHECK_INT_EQ(proto_path_request_encode(&stat_request, &body, &len), 0);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_FILE_STAT, true, 11, body, len), 0);
	free(body);
	while (!stat_seen) {
		struct proto_frame frame;

		if (client_read(fd, &frame) != 0)
			break;
		if (frame.type == PROTO_MSG_FILE_STAT_RESPONSE && frame.request_id == 11)
			stat_seen = true;
		CHECK(frame.type != PROTO_MSG_EXEC_RESPONSE);
		proto_frame_free(&frame);
	}
	/* the stat's answer came before the exec's: the running exec did not hold it back */
	CHECK(stat_seen);
	CHECK_INT_EQ(wait_exec(fd, 10, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	proto_exec_response_free(&result.response);
	close(fd);
}

/*
 * The timeout kills the whole process group: the shell and the sleep it put in the
 * background, whose pid it wrote to a file first, are both gone once the exec has answered
 * (the wait for them to be reaped is bounded, not timed).
 */
static void test_exec_timeout_kills_group(void)
{
	char pidfile[PATH_MAX], script[3 * PATH_MAX];
	char *args[] = { "-c", script };
	struct exec_result result;
	int fd = client_open();

	snprintf(pidfile, sizeof(pidfile), "%s/workspace/group.pids", tree);
	snprintf(script, sizeof(script),
		 "sleep 30 & echo $! > %s; echo $$ >> %s; sleep 30; echo never", pidfile, pidfile);
	CHECK_INT_EQ(run_exec(fd, 12, "sh", args, 2, 1, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, PROTO_EXIT_CODE_SIGNALED);
	CHECK_STR_EQ(result.response.error, "Process killed after 1s timeout");
	CHECK(result.response.stdout_data.len == 0);
	proto_exec_response_free(&result.response);
	close(fd);
	process_probe_check_pidfile_gone(pidfile, GROUP_MEMBERS);
}

/*
 * Whether every thread of the agent still has uid and gid 0 (real, effective, saved and
 * filesystem). The child shares the agent's memory until it execs, so its drop must reach
 * nothing but its own credentials.
 */
static bool agent_threads_are_root(void)
{
	char dir_path[PATH_MAX];
	struct dirent *entry;
	bool all_root = true;
	unsigned threads = 0;
	DIR *dir;

	snprintf(dir_path, sizeof(dir_path), "/proc/%d/task", (int)agent_pid);
	dir = opendir(dir_path);
	if (!dir)
		return false;
	while ((entry = readdir(dir)) != NULL) {
		char status_path[2 * PATH_MAX], line[PROC_STATUS_LINE_MAX];
		FILE *status;

		if (entry->d_name[0] == '.')
			continue;
		snprintf(status_path, sizeof(status_path), "%s/%s/status", dir_path, entry->d_name);
		status = fopen(status_path, "r");
		if (!status)
			continue; /* a thread that ended meanwhile */
		threads++;
		while (fgets(line, sizeof(line), status))
			if ((strncmp(line, "Uid:", strlen("Uid:")) == 0 ||
			     strncmp(line, "Gid:", strlen("Gid:")) == 0) &&
			    strcmp(line + strlen("Uid:"), ROOT_IDS) != 0)
				all_root = false;
		fclose(status);
	}
	closedir(dir);
	return all_root && threads > 0;
}

/*
 * As root the agent runs children as uid/gid 1000 (real, effective, saved and filesystem) with
 * only group 1000, and keeps root in every one of its own threads. Separate
 * (agent_server_privilege_drop): only root can drop privileges, so a test run by anyone else
 * skips it.
 */
static void test_exec_drops_privileges(void)
{
	struct exec_result result;
	int fd;

	if (geteuid() != 0)
		harness_skip_all("not root: the agent drops privileges only when run as root");
	fd = client_open();
	CHECK_INT_EQ(run_exec(fd, 16, "sh", (char **)credentials_script_args, 2, 0, &result), 0);
	CHECK(output_is(&result.response.stdout_data, SANDBOX_CREDENTIALS));
	if (result.response.stdout_data.len)
		fprintf(stderr, "  ids: %.*s", (int)result.response.stdout_data.len,
			(const char *)result.response.stdout_data.data);
	proto_exec_response_free(&result.response);
	CHECK(agent_threads_are_root());
	close(fd);
}

/*
 * Every child runs with no_new_privs, so a setuid binary cannot undo the uid drop; a root
 * agent also empties the capability bounding set.
 */
static void test_exec_no_new_privs_and_no_bounding_caps(void)
{
	char *args[] = { "-c", "grep -E '^(NoNewPrivs|CapBnd):' /proc/self/status" };
	struct exec_result result;
	int fd = client_open();

	CHECK_INT_EQ(run_exec(fd, 17, "sh", args, 2, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	CHECK(memmem(result.response.stdout_data.data, result.response.stdout_data.len,
		     "NoNewPrivs:\t1", strlen("NoNewPrivs:\t1")) != NULL);
	if (geteuid() == 0)
		CHECK(memmem(result.response.stdout_data.data, result.response.stdout_data.len,
			     "CapBnd:\t0000000000000000",
			     strlen("CapBnd:\t0000000000000000")) != NULL);
	else
		fprintf(stderr, "  (not root: bounding set drop not exercised)\n");
	proto_exec_response_free(&result.response);
	close(fd);
}

static void test_exec_signal_and_spawn_failure(void)
{
	char *args[] = { "-c", "kill -TERM $$" };
	struct exec_result result;
	int fd = client_open();

	CHECK_INT_EQ(run_exec(fd, 13, "sh", args, 2, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, PROTO_EXIT_CODE_SIGNALED);
	CHECK(result.response.error && strstr(result.response.error, "signal 15") != NULL);
	proto_exec_response_free(&result.response);
	CHECK_INT_EQ(run_exec(fd, 14, "no-such-program-voidbox", NULL, 0, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, PROTO_EXIT_CODE_SIGNALED);
	CHECK(result.response.error && strstr(result.response.error, "Failed to spawn") != NULL);
	proto_exec_response_free(&result.response);
	close(fd);
}

static void test_exec_env_and_working_dir(void)
{
	char *args[] = { "-c", "echo \"$FOO:$HOME\"; pwd" };
	struct proto_env_var env[] = { { .key = "FOO", .value = "bar" } };
	char workdir[PATH_MAX], expected[PATH_MAX + 64];
	struct proto_exec_request request = {
		.program = "sh", .args = args, .args_count = 2, .env = env, .env_count = 1,
		.working_dir = workdir,
	};
	struct exec_result result;
	uint8_t *body;
	size_t len;
	int fd = client_open();

	snprintf(workdir, sizeof(workdir), "%s/workspace", tree);
	snprintf(expected, sizeof(expected), "bar:/home/sandbox\n%s\n", workdir);
	CHECK_INT_EQ(proto_exec_request_encode(&request, &body, &len), 0);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_EXEC_REQUEST, true, 15, body, len), 0);
	free(body);
	CHECK_INT_EQ(wait_exec(fd, 15, &result), 0);
	CHECK(output_is(&result.response.stdout_data, expected));
	proto_exec_response_free(&result.response);
	close(fd);
}

/* Sends one request body and decodes the status reply of reply_type on the same id. */
static int status_rpc(int fd, uint32_t id, uint8_t type, uint8_t reply_type, uint8_t *body,
		      size_t len, struct proto_status_response *status)
{
	struct proto_frame frame;
	int err = proto_frame_write(fd, type, true, id, body, len);

	free(body);
	if (err || (err = client_read(fd, &frame)) != 0)
		return err;
	if (frame.type != reply_type || frame.request_id != id)
		err = -EPROTO;
	else
		err = proto_status_response_decode(frame.body, frame.body_len, status, NULL);
	proto_frame_free(&frame);
	return err;
}

static int write_file_rpc(int fd, uint32_t id, const char *path, const char *text,
			  struct proto_status_response *status)
{
	struct proto_write_file request = {
		.path = (char *)path,
		.content = { .data = (uint8_t *)text, .len = strlen(text) },
		.create_parents = true,
	};
	uint8_t *body;
	size_t len;
	int err = proto_write_file_encode(&request, &body, &len);

	if (err)
		return err;
	return status_rpc(fd, id, PROTO_MSG_WRITE_FILE, PROTO_MSG_WRITE_FILE_RESPONSE, body, len,
			  status);
}

/* SetPolicy with the default limits but max_open_files; returns the agent's verdict. */
static bool set_policy_rpc(int fd, uint32_t id, bool allow_all, char **commands, size_t count,
			   uint64_t max_open_files, char **error)
{
	struct proto_set_policy policy = {
		.allow_all_commands = allow_all, .commands = commands, .commands_count = count,
		.max_open_files = max_open_files, .max_processes = DEFAULT_MAX_PROCESSES,
		.max_file_size = DEFAULT_MAX_FILE_SIZE,
	};
	struct proto_status_response status = { 0 };
	uint8_t *body;
	size_t len;
	bool ok;

	if (proto_set_policy_encode(&policy, &body, &len) != 0 ||
	    status_rpc(fd, id, PROTO_MSG_SET_POLICY, PROTO_MSG_SET_POLICY_RESPONSE, body, len,
		       &status) != 0)
		return false;
	ok = status.success;
	if (error) {
		*error = status.error;
		status.error = NULL;
	}
	proto_status_response_free(&status);
	return ok;
}

/*
 * Starts a new session on fd the way the host does after a restore (a rekey to a fresh
 * secret), which is the only way a policy can be set again; fd stays usable.
 */
static void new_session(int fd, uint32_t id)
{
	struct proto_status_response status = { 0 };
	char hex[2 * PROTO_SECRET_SIZE + 1], doc[REKEY_DOC_MAX];

	secret[0]++;
	proto_secret_to_hex(secret, hex);
	snprintf(doc, sizeof(doc), "{\"secret_hex\": \"%s\", \"rng_seed_b64\": \"c2VlZA==\", "
		 "\"clock_ns\": 1}", hex);
	CHECK_INT_EQ(write_file_rpc(fd, id, REKEY_PATH, doc, &status), 0);
	CHECK(status.success);
	proto_status_response_free(&status);
}

/* Ends a test that narrowed the policy: a new session that allows everything again. */
static void reopen_everything(int fd, uint32_t id)
{
	new_session(fd, id);
	CHECK(set_policy_rpc(fd, id + 1, true, NULL, 0, DEFAULT_MAX_OPEN_FILES, NULL));
}

/*
 * A separate test (--only) runs without the tests before it, one of which sets the session's
 * policy: it sets "allow everything" itself, as the host does when no allowlist is given.
 */
static void allow_everything_for_separate_test(void)
{
	int fd = client_open();

	if (!set_policy_rpc(fd, 1, true, NULL, 0, DEFAULT_MAX_OPEN_FILES, NULL))
		harness_fail_setup("the agent refused SetPolicy for a separate test");
	close(fd);
}

/*
 * Nothing runs before the host's SetPolicy; the first one is taken and a second one in the
 * same session is refused, so nothing connected later can widen (or narrow) it.
 */
static void test_policy_required_and_set_once(void)
{
	char *args[] = { "-c", "true" };
	char *echo_only[] = { "echo" };
	struct exec_result result;
	char *error = NULL;
	int fd = client_open();

	CHECK_INT_EQ(run_exec(fd, 2, "sh", args, 2, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, -1);
	CHECK_STR_EQ(result.response.error, "Command 'sh' is not allowed");
	proto_exec_response_free(&result.response);
	CHECK(set_policy_rpc(fd, 3, true, NULL, 0, DEFAULT_MAX_OPEN_FILES, NULL));
	CHECK(!set_policy_rpc(fd, 4, false, echo_only, 1, DEFAULT_MAX_OPEN_FILES, &error));
	CHECK(error && strstr(error, "set already") != NULL);
	free(error);
	close(fd);
	fd = client_open();
	CHECK(!set_policy_rpc(fd, 5, false, echo_only, 1, DEFAULT_MAX_OPEN_FILES, NULL));
	CHECK_INT_EQ(run_exec(fd, 6, "sh", args, 2, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	proto_exec_response_free(&result.response);
	close(fd);
}

static int exec_with(int fd, uint32_t id, const char *program, char **args, size_t nargs,
		     struct proto_env_var *env, size_t nenv, const char *working_dir,
		     struct exec_result *result)
{
	struct proto_exec_request request = {
		.program = (char *)program, .args = args, .args_count = nargs, .env = env,
		.env_count = nenv, .working_dir = (char *)working_dir,
	};
	uint8_t *body;
	size_t len;
	int err = proto_exec_request_encode(&request, &body, &len);

	if (err)
		return err;
	err = proto_frame_write(fd, PROTO_MSG_EXEC_REQUEST, true, id, body, len);
	free(body);
	return err ? err : wait_exec(fd, id, result);
}

/*
 * The allowlist decides on the program the agent execs: a bare entry matches only in a
 * root-owned system directory, so a planted "sh" under /workspace is refused by path, by
 * relative path, and cannot be reached through the request's PATH either (the lookup PATH is
 * fixed). Removing /etc/voidbox changes nothing: the policy is not a file.
 */
static void test_allowlist_on_resolved_path(void)
{
	char *allowed[] = { "echo", "sh" };
	char *args[] = { "-c", "echo real" };
	char *echo_args[] = { "ok" };
	char workspace[PATH_MAX], dir[PATH_MAX + 8], planted[2 * PATH_MAX], path_env[2 * PATH_MAX];
	char cmd[2 * PATH_MAX];
	struct proto_env_var env[] = { { .key = "PATH", .value = path_env } };
	struct exec_result result;
	int fd = client_open();

	snprintf(workspace, sizeof(workspace), "%s/workspace", tree);
	snprintf(dir, sizeof(dir), "%s/x", workspace);
	snprintf(planted, sizeof(planted), "%s/sh", dir);
	snprintf(path_env, sizeof(path_env), "%s", dir);
	mkdir(dir, 0755);
	CHECK(write_text_file(planted, "#!/bin/sh\necho planted\n") == 0);
	chmod(planted, 0755);
	new_session(fd, 20);
	CHECK(set_policy_rpc(fd, 21, false, allowed, 2, DEFAULT_MAX_OPEN_FILES, NULL));

	CHECK_INT_EQ(run_exec(fd, 22, "cat", NULL, 0, 0, &result), 0);
	CHECK_STR_EQ(result.response.error, "Command 'cat' is not allowed");
	CHECK(output_is(&result.response.stderr_data,
			"Command 'cat' is not in the allowed commands list"));
	proto_exec_response_free(&result.response);
	CHECK_INT_EQ(run_exec(fd, 23, "/bin/echo", echo_args, 1, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	proto_exec_response_free(&result.response);

	CHECK_INT_EQ(run_exec(fd, 24, planted, NULL, 0, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, -1);
	CHECK(!output_is(&result.response.stdout_data, "planted\n"));
	CHECK(result.response.error && strstr(result.response.error, "is not allowed") != NULL);
	proto_exec_response_free(&result.response);
	CHECK_INT_EQ(exec_with(fd, 25, "./x/sh", NULL, 0, NULL, 0, workspace, &result), 0);
	CHECK_STR_EQ(result.response.error, "Command './x/sh' is not allowed");
	proto_exec_response_free(&result.response);
	CHECK_INT_EQ(exec_with(fd, 26, "x/../x/sh", NULL, 0, NULL, 0, workspace, &result), 0);
	CHECK_STR_EQ(result.response.error, "Command 'x/../x/sh' is not allowed");
	proto_exec_response_free(&result.response);

	/* the request's PATH reaches the child, not the agent's lookup */
	CHECK_INT_EQ(exec_with(fd, 27, "sh", args, 2, env, 1, NULL, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	CHECK(output_is(&result.response.stdout_data, "real\n"));
	proto_exec_response_free(&result.response);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s/etc/voidbox'", tree);
	CHECK_INT_EQ(system(cmd), 0);
	CHECK_INT_EQ(run_exec(fd, 28, "cat", NULL, 0, 0, &result), 0);
	CHECK_STR_EQ(result.response.error, "Command 'cat' is not allowed");
	proto_exec_response_free(&result.response);
	snprintf(cmd, sizeof(cmd), "%s/etc/voidbox", tree);
	mkdir(cmd, 0755);

	reopen_everything(fd, 29);
	close(fd);
}

static void test_limits_applied(void)
{
	char *args[] = { "-c", "ulimit -n" };
	struct exec_result result;
	int fd = client_open();

	new_session(fd, 35);
	CHECK(set_policy_rpc(fd, 36, true, NULL, 0, 77, NULL));
	CHECK_INT_EQ(run_exec(fd, 37, "sh", args, 2, 0, &result), 0);
	CHECK(output_is(&result.response.stdout_data, "77\n"));
	proto_exec_response_free(&result.response);
	reopen_everything(fd, 38);
	close(fd);
}

static void test_file_rpcs(void)
{
	struct proto_path_request path = { .path = "/workspace/dir/note.txt" };
	struct proto_read_file_response read_response = { 0 };
	struct proto_status_response status = { 0 };
	struct proto_frame frame;
	uint8_t *body;
	size_t len;
	int fd = client_open();

	CHECK_INT_EQ(write_file_rpc(fd, 30, "/workspace/dir/note.txt", "note", &status), 0);
	CHECK(status.success);
	proto_status_response_free(&status);
	CHECK_INT_EQ(proto_path_request_encode(&path, &body, &len), 0);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_READ_FILE, true, 31, body, len), 0);
	free(body);
	CHECK_INT_EQ(client_read(fd, &frame), 0);
	CHECK_INT_EQ(frame.type, PROTO_MSG_READ_FILE_RESPONSE);
	CHECK_INT_EQ(proto_read_file_response_decode(frame.body, frame.body_len, &read_response,
						     NULL), 0);
	CHECK(read_response.success && output_is(&read_response.content, "note"));
	proto_read_file_response_free(&read_response);
	proto_frame_free(&frame);

	CHECK_INT_EQ(write_file_rpc(fd, 32, "/workspace/../etc/passwd", "x", &status), 0);
	CHECK(!status.success);
	CHECK(status.error && strstr(status.error, "Refusing write outside allowed roots"));
	proto_status_response_free(&status);
	close(fd);
}

static void test_unknown_type_dropped_and_oversize_closes(void)
{
	uint8_t header[PROTO_HEADER_SIZE] = { 4, 0, 0, 0, 99 };
	uint8_t junk[4] = { 1, 2, 3, 4 };
	struct proto_frame frame;
	int fd = client_open();

	CHECK(write(fd, header, sizeof(header)) == sizeof(header));
	CHECK(write(fd, junk, sizeof(junk)) == sizeof(junk));
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_SNAPSHOT_READY, true, 40, NULL, 0), 0);
	CHECK_INT_EQ(client_read(fd, &frame), 0);
	CHECK_INT_EQ(frame.type, PROTO_MSG_SNAPSHOT_READY);
	CHECK_INT_EQ(frame.request_id, 40);
	proto_frame_free(&frame);

	proto_header_build(header, PROTO_MAX_PAYLOAD + 1, PROTO_MSG_WRITE_FILE);
	CHECK(write(fd, header, sizeof(header)) == sizeof(header));
	CHECK(client_sees_close(fd));
	close(fd);

	/* A multiplexed payload shorter than the request id is malformed. */
	fd = client_open();
	proto_header_build(header, 2, PROTO_MSG_FILE_STAT);
	CHECK(write(fd, header, sizeof(header)) == sizeof(header));
	CHECK(write(fd, junk, 2) == 2);
	CHECK(client_sees_close(fd));
	close(fd);

	/* The agent still serves new connections. */
	fd = client_open();
	CHECK(fd >= 0);
	close(fd);
}

static void test_telemetry(void)
{
	struct proto_subscribe_telemetry subscribe = { .interval_ms = 100 };
	size_t batches = 0;
	uint64_t last_seq = 0;
	uint8_t *body;
	size_t len;
	int fd = client_open();

	CHECK_INT_EQ(proto_subscribe_telemetry_encode(&subscribe, &body, &len), 0);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_SUBSCRIBE_TELEMETRY, true, 50, body, len), 0);
	free(body);
	while (batches < 2) {
		struct proto_telemetry_batch batch = { 0 };
		struct proto_frame frame;

		if (client_read(fd, &frame) != 0)
			break;
		CHECK_INT_EQ(frame.type, PROTO_MSG_TELEMETRY_DATA);
		CHECK_INT_EQ(frame.request_id, 50);
		CHECK_INT_EQ(proto_telemetry_batch_decode(frame.body, frame.body_len, &batch, NULL),
			     0);
		CHECK(batch.has_system);
		CHECK(batch.system.memory_total_bytes > 0);
		CHECK(batch.processes_count > 0);
		if (batches > 0)
			CHECK_INT_EQ(batch.seq, last_seq + 1);
		last_seq = batch.seq;
		batches++;
		proto_telemetry_batch_free(&batch);
		proto_frame_free(&frame);
	}
	CHECK_INT_EQ(batches, 2);
	close(fd);
}

/* Reads PTY frames until PtyClosed; collects the output. Returns the exit code or -1000. */
static int pty_collect(int fd, char *out, size_t out_size)
{
	size_t used = 0;

	out[0] = '\0';
	for (;;) {
		struct proto_frame frame;
		struct proto_pty_closed closed;
		int code;

		if (client_read(fd, &frame) != 0)
			return -1000;
		if (frame.type == PROTO_MSG_PTY_DATA && used + frame.body_len < out_size) {
			memcpy(out + used, frame.body, frame.body_len);
			used += frame.body_len;
			out[used] = '\0';
		}
		if (frame.type == PROTO_MSG_PTY_CLOSED) {
			code = proto_pty_closed_decode(frame.body, frame.body_len, &closed, NULL) == 0 ?
				       closed.exit_code : -1000;
			proto_frame_free(&frame);
			return code;
		}
		proto_frame_free(&frame);
	}
}

static int pty_open_rpc(int fd, const char *program, char **args, size_t nargs, bool interactive,
			struct proto_status_response *opened)
{
	struct proto_pty_open request = {
		.cols = 80, .rows = 24, .program = (char *)program, .args = args,
		.args_count = nargs, .interactive = interactive,
	};
	struct proto_frame frame;
	uint8_t *body;
	size_t len;
	int err = proto_pty_open_encode(&request, &body, &len);

	if (err)
		return err;
	err = proto_frame_write(fd, PROTO_MSG_PTY_OPEN, true, 1, body, len);
	free(body);
	if (err || (err = client_read(fd, &frame)) != 0)
		return err;
	err = frame.type == PROTO_MSG_PTY_OPENED ?
		      proto_status_response_decode(frame.body, frame.body_len, opened, NULL) : -EPROTO;
	proto_frame_free(&frame);
	return err;
}

static void test_pty_sessions(void)
{
	char *args[] = { "-c", "stty size; echo from-pty; exit 5" };
	struct proto_status_response opened = { 0 };
	char output[4096];
	int fd = client_open();

	CHECK_INT_EQ(pty_open_rpc(fd, "sh", args, 2, false, &opened), 0);
	CHECK(opened.success);
	proto_status_response_free(&opened);
	CHECK_INT_EQ(pty_collect(fd, output, sizeof(output)), 5);
	CHECK(strstr(output, "from-pty") != NULL);
	CHECK(strstr(output, "24 80") != NULL);
	close(fd);

	/* Input through PtyData reaches the program; PtyClose on an interactive session ends it. */
	fd = client_open();
	CHECK_INT_EQ(pty_open_rpc(fd, "cat", NULL, 0, true, &opened), 0);
	CHECK(opened.success);
	proto_status_response_free(&opened);
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_PTY_DATA, true, 1, "ping-pty\n", 9), 0);
	sleep_ms(300);
	/* cat never ends by itself: only the PtyClose's SIGHUP can end it */
	CHECK_INT_EQ(proto_frame_write(fd, PROTO_MSG_PTY_CLOSE, true, 1, NULL, 0), 0);
	CHECK_INT_EQ(pty_collect(fd, output, sizeof(output)), 128 + SIGHUP);
	CHECK(strstr(output, "ping-pty") != NULL);
	close(fd);
}

static void test_pty_allowlist(void)
{
	char *echo_only[] = { "echo" };
	struct proto_status_response opened = { 0 };
	int fd = client_open();

	new_session(fd, 60);
	CHECK(set_policy_rpc(fd, 61, false, echo_only, 1, DEFAULT_MAX_OPEN_FILES, NULL));
	CHECK_INT_EQ(pty_open_rpc(fd, "sh", NULL, 0, false, &opened), 0);
	CHECK(!opened.success);
	CHECK(opened.error && strstr(opened.error, "not in the allowed commands list"));
	proto_status_response_free(&opened);
	reopen_everything(fd, 62);
	close(fd);
}

/* Four sessions at once is the limit; dropping their connections ends them after the grace. */
static void test_pty_session_limit(void)
{
	char *args[] = { "30" };
	struct proto_status_response opened = { 0 };
	int fds[PTY_LIMIT + 1];
	bool reopened = false;
	uint64_t start;

	for (int i = 0; i < PTY_LIMIT; i++) {
		fds[i] = client_open();
		CHECK_INT_EQ(pty_open_rpc(fds[i], "sleep", args, 1, false, &opened), 0);
		CHECK(opened.success);
		proto_status_response_free(&opened);
	}
	fds[PTY_LIMIT] = client_open();
	CHECK_INT_EQ(pty_open_rpc(fds[PTY_LIMIT], "sleep", args, 1, false, &opened), 0);
	CHECK(!opened.success);
	CHECK_STR_EQ(opened.error, "max PTY sessions (4) reached");
	proto_status_response_free(&opened);
	for (int i = 0; i <= PTY_LIMIT; i++)
		close(fds[i]);

	/* After the grace and SIGHUP a slot frees up again (how long the grace lasts is not
	 * asserted: the wait only bounds a slot that never frees). */
	start = now_ms();
	fds[0] = client_open();
	while (!reopened && now_ms() - start < PTY_SLOT_WAIT_MS) {
		sleep_ms(250);
		CHECK_INT_EQ(pty_open_rpc(fds[0], "sleep", args, 1, true, &opened), 0);
		reopened = opened.success;
		proto_status_response_free(&opened);
	}
	CHECK(reopened);
	close(fds[0]);
}

/* Counts zombie children of the agent (orphans re-parented to it must be reaped). */
static int agent_zombie_children(void)
{
	DIR *proc = opendir("/proc");
	struct dirent *de;
	int zombies = 0;

	while (proc && (de = readdir(proc))) {
		char path[300], buf[512], state;
		int ppid;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f)) {
			char *close_paren = strrchr(buf, ')');

			if (close_paren && sscanf(close_paren + 2, "%c %d", &state, &ppid) == 2 &&
			    ppid == agent_pid && state == 'Z')
				zombies++;
		}
		fclose(f);
	}
	if (proc)
		closedir(proc);
	return zombies;
}

static void test_orphans_reaped(void)
{
	char *args[] = { "-c", "(sleep 0.3 &) ; (true &) ; exit 0" };
	struct exec_result result;
	int fd = client_open();

	CHECK_INT_EQ(run_exec(fd, 70, "sh", args, 2, 0, &result), 0);
	CHECK_INT_EQ(result.response.exit_code, 0);
	proto_exec_response_free(&result.response);
	sleep_ms(800);
	CHECK_INT_EQ(agent_zombie_children(), 0);
	close(fd);
}

static void on_test_timeout(int signo)
{
	static const char message[] = "test_agent_server: overall timeout; a call hung\n";
	ssize_t rc = write(STDERR_FILENO, message, sizeof(message) - 1);

	(void)signo;
	(void)rc;
	kill(agent_pid, SIGKILL);
	_exit(1);
}

/* Everything above, hostile frames included, must have left the agent running. */
static void test_agent_survived_everything(void)
{
	int status;

	CHECK_INT_EQ(waitpid(agent_pid, &status, WNOHANG), 0);
}

int main(int argc, char **argv)
{
	char cmd[PATH_MAX + 16];
	int status;

	if (argc < 2)
		harness_fail_setup("usage: test_agent_server PATH-TO-voidbox-agent [--only=TEST]");
	harness_select(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_test_timeout);
	alarm(OVERALL_TIMEOUT_SECS);
	proto_secret_from_hex(SECRET_HEX, secret);
	make_tree();
	start_agent(argv[1]);
	if (harness_only_test)
		allow_everything_for_separate_test();
	RUN_TEST(test_handshake_rejections);
	RUN_TEST(test_handshake_not_replayable);
	RUN_TEST(test_connection_registry_full_refuses);
	RUN_TEST(test_policy_required_and_set_once);
	RUN_TEST(test_exec_basic);
	RUN_TEST(test_exec_stdin_large);
	RUN_TEST(test_exec_does_not_block_other_rpcs);
	RUN_TEST(test_exec_timeout_kills_group);
	RUN_SEPARATE_TEST(test_exec_drops_privileges);
	RUN_TEST(test_exec_no_new_privs_and_no_bounding_caps);
	RUN_TEST(test_exec_signal_and_spawn_failure);
	RUN_TEST(test_exec_env_and_working_dir);
	RUN_TEST(test_allowlist_on_resolved_path);
	RUN_TEST(test_limits_applied);
	RUN_TEST(test_file_rpcs);
	RUN_TEST(test_unknown_type_dropped_and_oversize_closes);
	RUN_TEST(test_telemetry);
	RUN_TEST(test_pty_sessions);
	RUN_TEST(test_pty_allowlist);
	RUN_TEST(test_pty_session_limit);
	RUN_TEST(test_orphans_reaped);
	RUN_TEST(test_agent_survived_everything);
	kill(agent_pid, SIGTERM);
	waitpid(agent_pid, &status, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tree);
	return harness_finish();
}
