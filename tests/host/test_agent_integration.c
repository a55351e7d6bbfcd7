/*
 * The control channel against the real guest agent binary, run on the host with
 * `--listen unix:PATH --root-prefix DIR`, so every protocol path (exec, streaming, files,
 * policy, PTY, hostile peers) is exercised end to end without booting a VM. One agent serves
 * the whole file; the tests run in order, and a test that narrows the policy ends with a new
 * session (rekey + SetPolicy) that allows everything again.
 * Hostile peers use raw sockets next to the channel and then prove the agent still serves it.
 *
 * The agent path comes from VOIDBOX_AGENT_BIN (set by meson); without it the test fails.
 */
#include "host/control_channel.h"
#include "harness.h"
#include "process_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AGENT_BIN_ENV "VOIDBOX_AGENT_BIN"
#define SEQUENTIAL_EXECS 100
#define CONCURRENT_EXECS 16
#define STDIN_BYTES (64 * 1024)
#define RAW_READ_TIMEOUT_MS 3000
/* how long a Shutdown waits for an agent that (not being PID 1) keeps its connection */
#define TEST_SHUTDOWN_WAIT_MS 300
/* the shell and its background sleep, each writing its pid */
#define GROUP_MEMBERS 2
/* bounds an exec that waits for the test; reaching it means the test never released it */
#define WAITING_EXEC_TIMEOUT_SECS 60
#define NFTW_FDS 16
#define ROOT_DIR_MAX 128
#define LARGE_FILE_BYTES (8 * 1024 * 1024)
#define REKEY_PATH "/etc/voidbox/restore.json"
#define REKEY_DOC_MAX 256
#define POLICY_MAX_OPEN_FILES 1024
#define POLICY_MAX_PROCESSES 512
#define POLICY_MAX_FILE_SIZE (100 * 1024 * 1024)

static char root_dir[ROOT_DIR_MAX];
static char socket_path[PATH_MAX];
static char log_path[PATH_MAX];
static uint8_t secret[PROTO_SECRET_SIZE];
static pid_t agent_pid = -1;
static struct control_channel *channel;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void path_in_root(char *out, size_t size, const char *guest_path)
{
	snprintf(out, size, "%s%s", root_dir, guest_path);
}

/* ---- agent process ------------------------------------------------------------------------ */

static void make_root_dirs(void)
{
	static const char *const dirs[] = { "/workspace", "/home", "/etc", "/etc/voidbox" };
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		path_in_root(path, sizeof(path), dirs[i]);
		mkdir(path, 0755);
		/* the agent runs commands as uid 1000 when it is root */
		if (chown(path, 1000, 1000) < 0 && errno != EPERM)
			perror("chown");
	}
}

static void agent_start(const char *agent_bin)
{
	char hex[2 * PROTO_SECRET_SIZE + 1];
	char listen_arg[PATH_MAX + 8];
	int log_fd;

	snprintf(root_dir, sizeof(root_dir), "/tmp/voidbox-agent-test-XXXXXX");
	if (!mkdtemp(root_dir))
		harness_fail_setup("cannot create a temporary directory");
	chmod(root_dir, 0755);
	make_root_dirs();
	snprintf(socket_path, sizeof(socket_path), "%s/agent.sock", root_dir);
	snprintf(log_path, sizeof(log_path), "%s/agent.log", root_dir);
	for (int i = 0; i < PROTO_SECRET_SIZE; i++)
		secret[i] = (uint8_t)(rand() & 0xff);
	proto_secret_to_hex(secret, hex);
	snprintf(listen_arg, sizeof(listen_arg), "unix:%s", socket_path);

	log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	agent_pid = fork();
	if (agent_pid == 0) {
		dup2(log_fd, STDERR_FILENO);
		execl(agent_bin, agent_bin, "--listen", listen_arg, "--secret-hex", hex,
		      "--root-prefix", root_dir, "--log-level", "debug", (char *)NULL);
		_exit(127);
	}
	close(log_fd);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static void agent_stop(void)
{
	if (agent_pid > 0) {
		kill(agent_pid, SIGTERM);
		waitpid(agent_pid, NULL, 0);
	}
	if (root_dir[0])
		nftw(root_dir, remove_entry, NFTW_FDS, FTW_DEPTH | FTW_PHYS);
}

static void agent_dump_log(void)
{
	char buf[4096];
	int fd = open(log_path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return;
	fprintf(stderr, "---- agent log ----\n");
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stderr);
	close(fd);
}

/* ---- helpers ------------------------------------------------------------------------------ */

struct exec_spec {
	const char *program;
	const char *args[8];
	const void *stdin_data;
	size_t stdin_len;
	const char *env_key, *env_value;
	const char *working_dir;
	long timeout_secs;  /* <0: absent */
};

static int run_exec(const struct exec_spec *spec, struct proto_exec_response *resp)
{
	struct proto_env_var env = { (char *)spec->env_key, (char *)spec->env_value };
	struct proto_exec_request req = {
		.program = (char *)spec->program,
		.args = (char **)spec->args,
		.stdin_data = { .data = (uint8_t *)spec->stdin_data, .len = spec->stdin_len },
		.working_dir = (char *)spec->working_dir,
		.has_timeout = spec->timeout_secs >= 0,
		.timeout_secs = spec->timeout_secs >= 0 ? (uint64_t)spec->timeout_secs : 0,
	};
	int rc;

	while (req.args_count < 8 && spec->args[req.args_count])
		req.args_count++;
	if (spec->env_key) {
		req.env = &env;
		req.env_count = 1;
	}
	rc = control_channel_exec(channel, &req, NULL, NULL, resp);
	if (rc < 0)
		fprintf(stderr, "  exec %s: %s\n", spec->program, control_channel_last_error());
	return rc;
}

static void check_agent_still_serves(void)
{
	CHECK_INT_EQ(control_channel_snapshot_ready(channel, 5000), 0);
}

static bool stdout_is(const struct proto_exec_response *resp, const char *text)
{
	return resp->stdout_data.len == strlen(text) &&
	       memcmp(resp->stdout_data.data, text, resp->stdout_data.len) == 0;
}

static void print_response(const struct proto_exec_response *resp)
{
	fprintf(stderr, "  exit=%d error=%s stdout=%.*s stderr=%.*s\n", resp->exit_code,
		resp->error ? resp->error : "(none)", (int)resp->stdout_data.len,
		(const char *)resp->stdout_data.data, (int)resp->stderr_data.len,
		(const char *)resp->stderr_data.data);
}

/* ---- exec --------------------------------------------------------------------------------- */

static void test_echo(void)
{
	struct exec_spec spec = { .program = "echo", .args = { "hello", "world" },
				  .timeout_secs = -1 };
	struct proto_exec_response resp;

	CHECK_INT_EQ(run_exec(&spec, &resp), 0);
	CHECK_INT_EQ(resp.exit_code, 0);
	CHECK(stdout_is(&resp, "hello world\n"));
	if (!stdout_is(&resp, "hello world\n"))
		print_response(&resp);
	proto_exec_response_free(&resp);
}

static void test_exit_code(void)
{
	struct exec_spec spec = { .program = "sh", .args = { "-c", "exit 42" }, .timeout_secs = -1 };
	struct proto_exec_response resp;

	CHECK_INT_EQ(run_exec(&spec, &resp), 0);
	CHECK_INT_EQ(resp.exit_code, 42);
	proto_exec_response_free(&resp);
}

static void test_stdin_byte_exact(void)
{
	uint8_t *input = malloc(STDIN_BYTES);
	struct exec_spec spec = { .program = "cat", .timeout_secs = 30 };
	struct proto_exec_response resp;

	for (size_t i = 0; i < STDIN_BYTES; i++)
		input[i] = (uint8_t)(i % 256);
	spec.stdin_data = input;
	spec.stdin_len = STDIN_BYTES;
	CHECK_INT_EQ(run_exec(&spec, &resp), 0);
	CHECK_INT_EQ(resp.exit_code, 0);
	CHECK_INT_EQ(resp.stdout_data.len, STDIN_BYTES);
	CHECK(resp.stdout_data.len == STDIN_BYTES &&
	      memcmp(resp.stdout_data.data, input, STDIN_BYTES) == 0);
	proto_exec_response_free(&resp);
	free(input);
}

static void test_env_and_working_dir(void)
{
	char dir[PATH_MAX], expected[PATH_MAX + 32];
	struct exec_spec spec = { .program = "sh", .args = { "-c", "echo \"$VB_TEST\"; pwd" },
				  .env_key = "VB_TEST", .env_value = "value with spaces",
				  .timeout_secs = 30 };
	struct proto_exec_response resp;

	path_in_root(dir, sizeof(dir), "/workspace");
	spec.working_dir = dir;
	snprintf(expected, sizeof(expected), "value with spaces\n%s\n", dir);
	CHECK_INT_EQ(run_exec(&spec, &resp), 0);
	CHECK(stdout_is(&resp, expected));
	if (!stdout_is(&resp, expected))
		print_response(&resp);
	proto_exec_response_free(&resp);
}

static void test_timeout_kills_process_group(void)
{
	char pidfile[PATH_MAX], script[3 * PATH_MAX];
	struct exec_spec spec = { .program = "sh", .timeout_secs = 2 };
	struct proto_exec_response resp;

	path_in_root(pidfile, sizeof(pidfile), "/workspace/pids");
	snprintf(script, sizeof(script),
		 "sleep 60 & echo $! > %s; echo $$ >> %s; sleep 60", pidfile, pidfile);
	spec.args[0] = "-c";
	spec.args[1] = script;
	CHECK_INT_EQ(run_exec(&spec, &resp), 0);
	CHECK_INT_EQ(resp.exit_code, PROTO_EXIT_CODE_SIGNALED);
	CHECK_STR_EQ(resp.error, "Process killed after 2s timeout");
	CHECK_INT_EQ(resp.code, PROTO_ERROR_TIMED_OUT);
	proto_exec_response_free(&resp);
	process_probe_check_pidfile_gone(pidfile, GROUP_MEMBERS);
}

static void test_sequential_execs(void)
{
	char arg[32], expected[40];
	int wrong = 0;

	for (int i = 0; i < SEQUENTIAL_EXECS; i++) {
		struct exec_spec spec = { .program = "echo", .args = { arg }, .timeout_secs = 30 };
		struct proto_exec_response resp;

		snprintf(arg, sizeof(arg), "seq-%d", i);
		snprintf(expected, sizeof(expected), "seq-%d\n", i);
		if (run_exec(&spec, &resp) < 0 || !stdout_is(&resp, expected))
			wrong++;
		proto_exec_response_free(&resp);
	}
	CHECK_INT_EQ(wrong, 0);
}

struct concurrent_exec {
	pthread_t thread;
	int index;
	bool ok;
};

static void *concurrent_exec_run(void *arg)
{
	struct concurrent_exec *job = arg;
	char text[32], expected[40];
	struct exec_spec spec = { .program = "echo", .args = { text }, .timeout_secs = 60 };
	struct proto_exec_response resp;

	snprintf(text, sizeof(text), "concurrent-%d", job->index);
	snprintf(expected, sizeof(expected), "concurrent-%d\n", job->index);
	job->ok = run_exec(&spec, &resp) == 0 && resp.exit_code == 0 && stdout_is(&resp, expected);
	proto_exec_response_free(&resp);
	return NULL;
}

static void test_concurrent_execs(void)
{
	struct concurrent_exec jobs[CONCURRENT_EXECS];

	for (int i = 0; i < CONCURRENT_EXECS; i++) {
		jobs[i].index = i;
		pthread_create(&jobs[i].thread, NULL, concurrent_exec_run, &jobs[i]);
	}
	for (int i = 0; i < CONCURRENT_EXECS; i++) {
		pthread_join(jobs[i].thread, NULL);
		CHECK(jobs[i].ok);
	}
}

struct streaming_count {
	int chunks;
	uint64_t next_seq;
	bool in_order;
};

static void count_chunk(const struct proto_exec_output_chunk *chunk, void *opaque)
{
	struct streaming_count *count = opaque;

	if (chunk->stream == PROTO_STREAM_STDOUT) {
		if (chunk->seq != count->next_seq)
			count->in_order = false;
		count->next_seq = chunk->seq + 1;
	}
	count->chunks++;
}

static void test_streaming_chunks(void)
{
	char *args[] = { "-c", "echo one; sleep 0.2; echo two" };
	struct proto_exec_request req = { .program = "sh", .args = args, .args_count = 2,
					  .has_timeout = true, .timeout_secs = 30 };
	struct streaming_count count = { .in_order = true };
	struct proto_exec_response resp;

	CHECK_INT_EQ(control_channel_exec(channel, &req, count_chunk, &count, &resp), 0);
	CHECK(count.chunks >= 1);
	CHECK(count.in_order);
	CHECK(stdout_is(&resp, "one\ntwo\n"));
	proto_exec_response_free(&resp);
}

struct background_exec {
	pthread_t thread;
	int rc;
	struct proto_exec_response resp;
	char release_path[PATH_MAX];
	atomic_bool finished;
};

/* An exec that ends only once the test creates release_path (or its timeout passes). */
static void *background_waiting_run(void *arg)
{
	struct background_exec *job = arg;
	char script[2 * PATH_MAX];
	struct exec_spec spec = { .program = "sh", .args = { "-c", script },
				  .timeout_secs = WAITING_EXEC_TIMEOUT_SECS };

	snprintf(script, sizeof(script), "while [ ! -e %s ]; do sleep 0.05; done",
		 job->release_path);
	job->rc = run_exec(&spec, &job->resp);
	atomic_store(&job->finished, true);
	return NULL;
}

/*
 * File RPCs are answered while an exec runs: the exec waits for a file the test creates only
 * after the RPCs have come back, so had they waited for the exec they would never have.
 */
static void test_files_answer_during_exec(void)
{
	struct background_exec job = { .finished = false };
	struct proto_file_stat_response stat;
	struct proto_bytes content;
	FILE *release;

	path_in_root(job.release_path, sizeof(job.release_path), "/workspace/release-during");
	CHECK_INT_EQ(control_channel_write_file(channel, "/workspace/during.txt", "12345", 5, true,
						0), 0);
	pthread_create(&job.thread, NULL, background_waiting_run, &job);
	CHECK_INT_EQ(control_channel_file_stat(channel, "/workspace/during.txt", &stat, 0), 0);
	CHECK(stat.exists);
	CHECK_INT_EQ(stat.size, 5);
	proto_file_stat_response_free(&stat);
	CHECK_INT_EQ(control_channel_read_file(channel, "/workspace/during.txt", &content, 0), 0);
	CHECK_INT_EQ(content.len, 5);
	free(content.data);
	CHECK_INT_EQ(control_channel_file_stat(channel, "/workspace/absent", &stat, 0), 0);
	CHECK(!stat.exists);
	CHECK(stat.error == NULL);
	proto_file_stat_response_free(&stat);
	/* nothing has released the exec yet, so it is still running */
	CHECK(!atomic_load(&job.finished));
	release = fopen(job.release_path, "w");
	CHECK(release != NULL);
	if (release)
		fclose(release);
	pthread_join(job.thread, NULL);
	CHECK_INT_EQ(job.rc, 0);
	CHECK_INT_EQ(job.resp.exit_code, 0);
	proto_exec_response_free(&job.resp);
}

/* ---- files -------------------------------------------------------------------------------- */

static void test_file_round_trip(void)
{
	uint8_t content[300];
	struct proto_bytes got;
	struct proto_file_stat_response file_stat;
	char host_path[PATH_MAX];
	struct stat st;

	for (size_t i = 0; i < sizeof(content); i++)
		content[i] = (uint8_t)(255 - i % 256);
	CHECK_INT_EQ(control_channel_write_file(channel, "/workspace/a/b/data.bin", content,
						sizeof(content), true, 0), 0);
	CHECK_INT_EQ(control_channel_read_file(channel, "/workspace/a/b/data.bin", &got, 0), 0);
	CHECK(got.len == sizeof(content) && memcmp(got.data, content, got.len) == 0);
	free(got.data);
	CHECK_INT_EQ(control_channel_file_stat(channel, "/workspace/a/b/data.bin", &file_stat, 0),
		     0);
	CHECK(file_stat.exists && file_stat.has_size && file_stat.size == sizeof(content));
	proto_file_stat_response_free(&file_stat);

	CHECK_INT_EQ(control_channel_mkdir_p(channel, "/workspace/m/n/o", 0), 0);
	path_in_root(host_path, sizeof(host_path), "/workspace/m/n/o");
	CHECK(stat(host_path, &st) == 0 && S_ISDIR(st.st_mode));

	/* without create_parents a missing parent is an error, and nothing is created */
	CHECK(control_channel_write_file(channel, "/workspace/none/x", "x", 1, false, 0) < 0);
	path_in_root(host_path, sizeof(host_path), "/workspace/none");
	CHECK(access(host_path, F_OK) != 0);
	CHECK_INT_EQ(control_channel_read_file(channel, "/workspace/missing.txt", &got, 0) < 0, 1);
}

/* Large enough for many socket-buffer refills on both sides of a single frame. */
static void test_large_file_round_trip(void)
{
	uint8_t *content = malloc(LARGE_FILE_BYTES);
	struct proto_bytes got = { 0 };
	uint32_t state = 0x9e3779b9u;
	long long start = now_ms();

	for (size_t i = 0; i < LARGE_FILE_BYTES; i++) {
		state = state * 1103515245u + 12345u;
		content[i] = (uint8_t)(state >> 24);
	}
	CHECK_INT_EQ(control_channel_write_file(channel, "/workspace/large.bin", content,
						LARGE_FILE_BYTES, true, 0), 0);
	CHECK_INT_EQ(control_channel_read_file(channel, "/workspace/large.bin", &got, 0), 0);
	CHECK_INT_EQ(got.len, LARGE_FILE_BYTES);
	CHECK(got.len == LARGE_FILE_BYTES && memcmp(got.data, content, got.len) == 0);
	fprintf(stderr, "  %d MiB written and read back in %lld ms\n",
		LARGE_FILE_BYTES / (1024 * 1024), now_ms() - start);
	free(got.data);
	free(content);
}

static void test_path_escapes_refused(void)
{
	char link_path[PATH_MAX];
	struct proto_bytes got;

	CHECK_INT_EQ(control_channel_write_file(channel, "/workspace/../escape.txt", "x", 1, true,
						0), -EPERM);
	CHECK(strstr(control_channel_last_error(), "Refusing") != NULL);
	CHECK_INT_EQ(control_channel_write_file(channel, "/tmp/x", "x", 1, true, 0), -EPERM);
	CHECK_INT_EQ(control_channel_read_file(channel, "/workspace/../../etc/hostname", &got, 0) <
		     0, 1);

	path_in_root(link_path, sizeof(link_path), "/workspace/link");
	CHECK(symlink("/etc", link_path) == 0);
	CHECK(control_channel_write_file(channel, "/workspace/link/voidbox-test", "x", 1, true, 0) <
	      0);
	CHECK(access("/etc/voidbox-test", F_OK) != 0);
	CHECK(control_channel_read_file(channel, "/workspace/link/hostname", &got, 0) < 0);
	CHECK(control_channel_mkdir_p(channel, "/workspace/link/voidbox-dir", 0) < 0);
	CHECK(access("/etc/voidbox-dir", F_OK) != 0);
}

/* ---- policy ------------------------------------------------------------------------------- */

static int set_policy(bool allow_all, char **commands, size_t count)
{
	struct proto_set_policy policy = {
		.allow_all_commands = allow_all, .commands = commands, .commands_count = count,
		.max_open_files = POLICY_MAX_OPEN_FILES, .max_processes = POLICY_MAX_PROCESSES,
		.max_file_size = POLICY_MAX_FILE_SIZE,
	};

	return control_channel_set_policy(channel, &policy, 0);
}

/*
 * A policy is set once per session, so changing it takes a new session: the rekey the host
 * gives a restored guest, then SetPolicy, as sandbox_start_from_snapshot does.
 */
static void policy_session(bool allow_all, char **commands, size_t count)
{
	char hex[2 * PROTO_SECRET_SIZE + 1], doc[REKEY_DOC_MAX];

	for (int i = 0; i < PROTO_SECRET_SIZE; i++)
		secret[i] = (uint8_t)(rand() & 0xff);
	proto_secret_to_hex(secret, hex);
	snprintf(doc, sizeof(doc), "{\"secret_hex\": \"%s\", \"rng_seed_b64\": \"c2VlZA==\", "
		 "\"clock_ns\": 1}", hex);
	CHECK_INT_EQ(control_channel_write_file(channel, REKEY_PATH, doc, strlen(doc), false, 0),
		     0);
	control_channel_set_secret(channel, secret);
	CHECK_INT_EQ(set_policy(allow_all, commands, count), 0);
}

static void test_allowlist(void)
{
	char *listed[] = { "echo", "sh" };
	struct exec_spec allowed = { .program = "echo", .args = { "ok" }, .timeout_secs = 30 };
	struct exec_spec refused = { .program = "cat", .timeout_secs = 30 };
	struct proto_exec_response resp;

	/* the session's policy (allow everything) is set: a second one is refused (code busy) */
	CHECK_INT_EQ(set_policy(false, listed, 2), -EBUSY);
	CHECK(strstr(control_channel_last_error(), "set already") != NULL);
	/* policy files are not a way around it */
	CHECK_INT_EQ(control_channel_write_file(channel, "/etc/voidbox/allowed_commands.json",
						"[]", 2, true, 0), -EPERM);

	policy_session(false, listed, 2);
	CHECK_INT_EQ(run_exec(&refused, &resp), 0);
	CHECK(resp.exit_code != 0);
	CHECK(resp.error && strstr(resp.error, "not allowed"));
	CHECK_INT_EQ(resp.code, PROTO_ERROR_DENIED);
	if (!resp.error || !strstr(resp.error, "not allowed"))
		print_response(&resp);
	proto_exec_response_free(&resp);
	CHECK_INT_EQ(run_exec(&allowed, &resp), 0);
	CHECK(stdout_is(&resp, "ok\n"));
	proto_exec_response_free(&resp);

	policy_session(true, NULL, 0);
	CHECK_INT_EQ(run_exec(&refused, &resp), 0);
	CHECK_INT_EQ(resp.exit_code, 0);
	proto_exec_response_free(&resp);
}

/* ---- telemetry and lifecycle -------------------------------------------------------------- */

struct telemetry_seen {
	int batches;
	uint64_t last_seq;
	bool seq_increasing;
	bool has_system;
};

static int count_batch(const struct proto_telemetry_batch *batch, void *opaque)
{
	struct telemetry_seen *seen = opaque;

	if (seen->batches > 0 && batch->seq <= seen->last_seq)
		seen->seq_increasing = false;
	seen->last_seq = batch->seq;
	seen->has_system |= batch->has_system && batch->system.memory_total_bytes > 0;
	return ++seen->batches >= 2;
}

static void test_telemetry_subscription(void)
{
	struct proto_subscribe_telemetry req = { .interval_ms = 100 };
	struct telemetry_seen seen = { .seq_increasing = true };

	CHECK_INT_EQ(control_channel_subscribe_telemetry(channel, &req, count_batch, &seen), 0);
	CHECK_INT_EQ(seen.batches, 2);
	CHECK(seen.seq_increasing);
	CHECK(seen.has_system);
	/* the cancelled subscription's later batches are dropped; calls keep working */
	usleep(250 * 1000);
	check_agent_still_serves();
}

static void test_shutdown_outside_vm(void)
{
	/* not PID 1: the agent logs the request, keeps the connection and keeps serving */
	CHECK_INT_EQ(control_channel_shutdown(channel, TEST_SHUTDOWN_WAIT_MS), -ETIMEDOUT);
	check_agent_still_serves();
}

/* ---- PTY ---------------------------------------------------------------------------------- */

struct pty_output {
	char text[4096];
	size_t len;
};

static void collect_pty(const uint8_t *data, size_t len, void *opaque)
{
	struct pty_output *out = opaque;
	size_t room = sizeof(out->text) - 1 - out->len;

	if (len > room)
		len = room;
	memcpy(out->text + out->len, data, len);
	out->len += len;
	out->text[out->len] = '\0';
}

static void test_pty_session(void)
{
	char *args[] = { "-c", "read line; echo \"got:$line\"; exit 7" };
	struct proto_pty_open req = { .cols = 80, .rows = 24, .program = "sh", .args = args,
				      .args_count = 2 };
	struct pty_output out = { .len = 0 };
	struct control_channel_pty *pty;
	int32_t exit_code = -100;
	int err = 0;

	pty = control_channel_pty_open(channel, &req, &err);
	CHECK(pty != NULL);
	if (!pty) {
		fprintf(stderr, "  pty open: %s\n", control_channel_last_error());
		return;
	}
	CHECK_INT_EQ(control_channel_pty_resize(pty, 100, 30), 0);
	CHECK_INT_EQ(control_channel_pty_write(pty, "hello-pty\n", 10), 0);
	CHECK_INT_EQ(control_channel_pty_wait(pty, collect_pty, &out, &exit_code, 10000), 0);
	CHECK(strstr(out.text, "got:hello-pty") != NULL);
	CHECK_INT_EQ(exit_code, 7);
	control_channel_pty_free(pty);
}

static void test_pty_refused_command(void)
{
	char *listed[] = { "sh" };
	struct proto_pty_open req = { .cols = 80, .rows = 24, .program = "cat" };
	struct control_channel_pty *pty;
	int err = 0;

	policy_session(false, listed, 1);
	pty = control_channel_pty_open(channel, &req, &err);
	CHECK(pty == NULL);
	CHECK_INT_EQ(err, -EPERM);
	CHECK(strstr(control_channel_last_error(), "not") != NULL);
	control_channel_pty_free(pty);
	policy_session(true, NULL, 0);
}

/* ---- hostile peers ------------------------------------------------------------------------ */

static int raw_connect(void)
{
	int fd = control_channel_connect_unix(socket_path);

	CHECK(fd >= 0);
	return fd;
}

/* Reads the agent's Challenge and answers it with a Ping proving key. */
static void raw_ping(int fd, const uint8_t *key, uint8_t flags)
{
	struct proto_ping ping = { .version = PROTO_VERSION, .flags = flags };
	uint8_t body[PROTO_PING_SIZE];
	struct proto_frame challenge;

	CHECK_INT_EQ(proto_frame_read(fd, false, &challenge), 0);
	CHECK_INT_EQ(challenge.type, PROTO_MSG_CHALLENGE);
	CHECK_INT_EQ(challenge.body_len, PROTO_NONCE_SIZE);
	if (challenge.body_len == PROTO_NONCE_SIZE)
		proto_handshake_proof(key, challenge.body, ping.proof);
	proto_frame_free(&challenge);
	proto_ping_encode(&ping, body);
	proto_frame_write(fd, PROTO_MSG_PING, false, 0, body, sizeof(body));
}

/* True when the agent closes the connection (EOF or reset) within the read timeout. */
static bool raw_closed_by_agent(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t buf[256];
	long long until = now_ms() + RAW_READ_TIMEOUT_MS;

	while (now_ms() < until) {
		ssize_t n;

		if (poll(&pfd, 1, (int)(until - now_ms())) <= 0)
			return false;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return true;
	}
	return false;
}

static bool raw_handshake(int fd)
{
	struct proto_frame frame;
	bool ok;

	raw_ping(fd, secret, PROTO_FLAG_SUPPORTS_MULTIPLEX);
	if (proto_frame_read(fd, false, &frame) < 0)
		return false;
	ok = frame.type == PROTO_MSG_PONG;
	proto_frame_free(&frame);
	return ok;
}

static void test_hostile_handshakes(void)
{
	uint8_t wrong[PROTO_SECRET_SIZE];
	uint8_t frame[PROTO_HEADER_SIZE + PROTO_REQUEST_ID_SIZE + 2];
	int fd;

	memcpy(wrong, secret, sizeof(wrong));
	wrong[7] ^= 0x20;
	fd = raw_connect();
	raw_ping(fd, wrong, PROTO_FLAG_SUPPORTS_MULTIPLEX);
	CHECK(raw_closed_by_agent(fd));
	close(fd);

	fd = raw_connect();
	raw_ping(fd, secret, 0);
	CHECK(raw_closed_by_agent(fd));
	close(fd);

	/* a request before any Ping */
	fd = raw_connect();
	proto_header_build(frame, PROTO_REQUEST_ID_SIZE + 2, PROTO_MSG_SNAPSHOT_READY);
	memset(frame + PROTO_HEADER_SIZE, 0, sizeof(frame) - PROTO_HEADER_SIZE);
	CHECK(write(fd, frame, sizeof(frame)) == (ssize_t)sizeof(frame));
	CHECK(raw_closed_by_agent(fd));
	close(fd);
	check_agent_still_serves();
}

static void test_hostile_frames(void)
{
	uint8_t header[PROTO_HEADER_SIZE];
	uint8_t junk[16] = { 0 };
	struct proto_frame frame;
	int fd, rc;

	/* over-cap length: the agent must refuse without trying to read 64 MiB */
	fd = raw_connect();
	CHECK(raw_handshake(fd));
	proto_header_build(header, PROTO_MAX_PAYLOAD + 1, PROTO_MSG_EXEC_REQUEST);
	CHECK(write(fd, header, sizeof(header)) == (ssize_t)sizeof(header));
	CHECK(raw_closed_by_agent(fd));
	close(fd);

	/* truncated frame, then the peer goes away */
	fd = raw_connect();
	CHECK(raw_handshake(fd));
	proto_header_build(header, 100, PROTO_MSG_EXEC_REQUEST);
	CHECK(write(fd, header, sizeof(header)) == (ssize_t)sizeof(header));
	CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	close(fd);

	/* payload shorter than the request id */
	fd = raw_connect();
	CHECK(raw_handshake(fd));
	proto_header_build(header, 2, PROTO_MSG_FILE_STAT);
	CHECK(write(fd, header, sizeof(header)) == (ssize_t)sizeof(header));
	CHECK(write(fd, junk, 2) == 2);
	CHECK(raw_closed_by_agent(fd));
	close(fd);

	/* unknown type, then a reply for an id never issued: dropped or closed, never a crash */
	fd = raw_connect();
	CHECK(raw_handshake(fd));
	proto_header_build(header, sizeof(junk), 200);
	CHECK(write(fd, header, sizeof(header)) == (ssize_t)sizeof(header));
	CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	proto_frame_write(fd, PROTO_MSG_EXEC_RESPONSE, true, 0x7fffffff, "{}", 2);
	proto_frame_write(fd, PROTO_MSG_SNAPSHOT_READY, true, 4242, NULL, 0);
	rc = proto_frame_read(fd, true, &frame);
	if (rc == 0) {
		CHECK_INT_EQ(frame.type, PROTO_MSG_SNAPSHOT_READY);
		CHECK_INT_EQ(frame.request_id, 4242);
		proto_frame_free(&frame);
	} else {
		CHECK(rc == -ECONNRESET || rc == -EPIPE);
	}
	close(fd);
	check_agent_still_serves();
}

/* ---- main --------------------------------------------------------------------------------- */

int main(void)
{
	const char *agent_bin = getenv(AGENT_BIN_ENV);
	struct control_channel_config cfg = { .connect = control_channel_unix_connector,
					      .connect_deadline_ms = 10000 };
	int failed;

	if (!agent_bin || access(agent_bin, X_OK) != 0)
		harness_fail_setup("VOIDBOX_AGENT_BIN is not set to an executable voidbox-agent (meson sets it)");
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	agent_start(agent_bin);
	cfg.connect_opaque = socket_path;
	memcpy(cfg.secret, secret, sizeof(secret));
	channel = control_channel_create(&cfg);
	if (control_channel_connect(channel) < 0) {
		fprintf(stderr, "cannot reach the agent: %s\n", control_channel_last_error());
		agent_dump_log();
		control_channel_destroy(channel);
		agent_stop();
		return 1;
	}
	if (set_policy(true, NULL, 0) < 0) {
		fprintf(stderr, "the agent refused the session's policy: %s\n",
			control_channel_last_error());
		agent_dump_log();
		control_channel_destroy(channel);
		agent_stop();
		return 1;
	}

	RUN_TEST(test_echo);
	RUN_TEST(test_exit_code);
	RUN_TEST(test_stdin_byte_exact);
	RUN_TEST(test_env_and_working_dir);
	RUN_TEST(test_streaming_chunks);
	RUN_TEST(test_timeout_kills_process_group);
	RUN_TEST(test_sequential_execs);
	RUN_TEST(test_concurrent_execs);
	RUN_TEST(test_files_answer_during_exec);
	RUN_TEST(test_file_round_trip);
	RUN_TEST(test_large_file_round_trip);
	RUN_TEST(test_path_escapes_refused);
	RUN_TEST(test_allowlist);
	RUN_TEST(test_telemetry_subscription);
	RUN_TEST(test_shutdown_outside_vm);
	RUN_TEST(test_pty_session);
	RUN_TEST(test_pty_refused_command);
	RUN_TEST(test_hostile_handshakes);
	RUN_TEST(test_hostile_frames);

	control_channel_destroy(channel);
	failed = harness_finish();
	if (failed)
		agent_dump_log();
	agent_stop();
	return failed;
}
