/*
 * The rekey of a restored guest, end to end against the real agent binary on a unix socket
 * (no VM): a connection with the boot secret sends the rekey WriteFile, gets success and is
 * then closed by the agent; afterwards the boot secret is refused and the new one accepted;
 * a malformed document changes nothing; the reserved file is never written under the root.
 * The same rekey carried in the handshake's Ping: confirmed by the Pong, repeatable with the
 * old secret when it carries the same new one (a host retrying after a lost Pong), refused
 * when the old secret tries to install another.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "host/control_channel.h"

#define BOOT_SECRET_HEX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define NEW_SECRET_HEX "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define THIRD_SECRET_HEX "1111111111111111222222222222222233333333333333334444444444444444"
#define OTHER_SECRET_HEX "5555555555555555666666666666666677777777777777778888888888888888"
#define POLICY_MAX_OPEN_FILES 1024
#define POLICY_MAX_PROCESSES 512
#define POLICY_MAX_FILE_SIZE (100 * 1024 * 1024)
#define REKEY_JSON(secret_hex) \
	"{\"secret_hex\": \"" secret_hex "\", \"rng_seed_b64\": \"c2VlZA==\", " \
	"\"clock_ns\": 1700000000000000000}"
#define REKEY_PATH "/etc/voidbox/restore.json"
#define AGENT_START_WAIT_MS 5000
#define POLL_MS 20
#define CONNECT_DEADLINE_MS 2000

static char tree[] = "/tmp/voidbox-restore-test-XXXXXX";
static char socket_path[PATH_MAX];
static pid_t agent_pid;

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void start_agent(const char *agent)
{
	char listen_arg[PATH_MAX + 8];
	long deadline;
	struct stat st;

	snprintf(socket_path, sizeof(socket_path), "%s/agent.sock", tree);
	snprintf(listen_arg, sizeof(listen_arg), "unix:%s", socket_path);
	agent_pid = fork();
	if (agent_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(agent, agent, "--listen", listen_arg, "--secret-hex", BOOT_SECRET_HEX,
		      "--root-prefix", tree, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	deadline = now_ms() + AGENT_START_WAIT_MS;
	while (stat(socket_path, &st) != 0 && now_ms() < deadline)
		sleep_ms(POLL_MS);
}

static struct control_channel *channel_with(const char *secret_hex)
{
	struct control_channel_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.connect = control_channel_unix_connector;
	cfg.connect_opaque = socket_path;
	cfg.connect_deadline_ms = CONNECT_DEADLINE_MS;
	if (proto_secret_from_hex(secret_hex, cfg.secret) != 0)
		return NULL;
	return control_channel_create(&cfg);
}

static bool handshake_works(const char *secret_hex)
{
	struct control_channel *ch = channel_with(secret_hex);
	bool ok = ch && control_channel_connect(ch) == 0;

	control_channel_destroy(ch);
	return ok;
}

static int send_rekey(struct control_channel *ch, const char *json)
{
	return control_channel_write_file(ch, REKEY_PATH, json, strlen(json), false,
					  CONTROL_CHANNEL_TIMEOUT_DEFAULT);
}

static void test_malformed_rekey_changes_nothing(void)
{
	struct control_channel *ch = channel_with(BOOT_SECRET_HEX);

	CHECK(ch != NULL);
	CHECK_INT_EQ(control_channel_connect(ch), 0);
	CHECK(send_rekey(ch, "{\"secret_hex\": \"abc\", \"rng_seed_b64\": \"AAAA\", "
			     "\"clock_ns\": 1}") < 0);
	CHECK(strstr(control_channel_last_error(), "secret_hex") != NULL);
	CHECK(send_rekey(ch, "not json") < 0);
	control_channel_destroy(ch);
	CHECK(handshake_works(BOOT_SECRET_HEX));
}

static void test_rekey_switches_secret_and_closes_other_old_connections(void)
{
	struct control_channel *rekeyer = channel_with(BOOT_SECRET_HEX);
	struct control_channel *bystander = channel_with(BOOT_SECRET_HEX);
	char path[PATH_MAX + 32];
	struct stat st;
	struct proto_file_stat_response stat_out;

	CHECK(rekeyer && bystander);
	CHECK_INT_EQ(control_channel_connect(rekeyer), 0);
	CHECK_INT_EQ(control_channel_connect(bystander), 0);
	CHECK_INT_EQ(send_rekey(rekeyer, "{\"secret_hex\": \"" NEW_SECRET_HEX "\", "
					 "\"rng_seed_b64\": \"c2VlZCBieXRlcyBmb3IgdGhlIHRlc3Q=\", "
					 "\"clock_ns\": 1700000000000000000}"), 0);
	/*
	 * The bystander's connection predates the rekey, so the agent closed it: had it stayed
	 * open this RPC would succeed on it; its reconnect with the boot secret is refused.
	 */
	memset(&stat_out, 0, sizeof(stat_out));
	CHECK(control_channel_file_stat(bystander, REKEY_PATH, &stat_out,
					CONTROL_CHANNEL_TIMEOUT_DEFAULT) < 0);
	/*
	 * The rekeying connection itself stays: this RPC can only succeed on it, because a
	 * reconnect with the boot secret it still holds would be refused.
	 */
	memset(&stat_out, 0, sizeof(stat_out));
	CHECK_INT_EQ(control_channel_file_stat(rekeyer, REKEY_PATH, &stat_out,
					       CONTROL_CHANNEL_TIMEOUT_DEFAULT), 0);
	free(stat_out.error);
	control_channel_destroy(rekeyer);
	control_channel_destroy(bystander);
	CHECK(!handshake_works(BOOT_SECRET_HEX));
	CHECK(handshake_works(NEW_SECRET_HEX));
	snprintf(path, sizeof(path), "%s%s", tree, REKEY_PATH);
	CHECK(stat(path, &st) != 0);
	/* the new secret serves RPCs as before */
	struct control_channel *ch = channel_with(NEW_SECRET_HEX);

	memset(&stat_out, 0, sizeof(stat_out));
	CHECK_INT_EQ(control_channel_file_stat(ch, REKEY_PATH, &stat_out,
					       CONTROL_CHANNEL_TIMEOUT_DEFAULT), 0);
	CHECK(!stat_out.exists);
	free(stat_out.error);
	control_channel_destroy(ch);
}

/* Connects with secret_hex and json in the Ping; returns the result, *applied the Pong's word. */
static int connect_with_rekey(const char *secret_hex, const char *new_hex, const char *json,
			      bool *applied)
{
	struct control_channel *ch = channel_with(secret_hex);
	uint8_t new_secret[PROTO_SECRET_SIZE];
	int rc = -ENOMEM;

	*applied = false;
	if (ch && proto_secret_from_hex(new_hex, new_secret) == 0)
		rc = control_channel_connect_rekey(ch, json, strlen(json), new_secret, applied);
	control_channel_destroy(ch);
	return rc;
}

/*
 * Runs after the WriteFile rekey above: the session secret is NEW_SECRET_HEX. A session's
 * policy is set once; the handshake rekey starts a new session, which may set its own.
 */
static void test_rekey_in_handshake_survives_a_lost_pong(void)
{
	struct proto_set_policy policy = {
		.allow_all_commands = true, .max_open_files = POLICY_MAX_OPEN_FILES,
		.max_processes = POLICY_MAX_PROCESSES, .max_file_size = POLICY_MAX_FILE_SIZE,
	};
	uint8_t third[PROTO_SECRET_SIZE];
	struct control_channel *ch = channel_with(NEW_SECRET_HEX);
	bool applied = false;

	CHECK(ch != NULL);
	CHECK_INT_EQ(control_channel_set_policy(ch, &policy, CONTROL_CHANNEL_TIMEOUT_DEFAULT), 0);
	CHECK(control_channel_set_policy(ch, &policy, CONTROL_CHANNEL_TIMEOUT_DEFAULT) < 0);
	control_channel_destroy(ch);
	ch = channel_with(NEW_SECRET_HEX);
	CHECK(ch && proto_secret_from_hex(THIRD_SECRET_HEX, third) == 0);
	CHECK_INT_EQ(control_channel_connect_rekey(ch, REKEY_JSON(THIRD_SECRET_HEX),
						   strlen(REKEY_JSON(THIRD_SECRET_HEX)), third,
						   &applied), 0);
	CHECK(applied);
	CHECK_INT_EQ(control_channel_set_policy(ch, &policy, CONTROL_CHANNEL_TIMEOUT_DEFAULT), 0);
	control_channel_destroy(ch);
	/* the host whose Pong was lost tries again with the old secret and the same document */
	CHECK_INT_EQ(connect_with_rekey(NEW_SECRET_HEX, THIRD_SECRET_HEX,
					REKEY_JSON(THIRD_SECRET_HEX), &applied), 0);
	CHECK(applied);
	/* the old secret cannot install any other secret, nor open a plain session */
	CHECK(connect_with_rekey(NEW_SECRET_HEX, OTHER_SECRET_HEX, REKEY_JSON(OTHER_SECRET_HEX),
				 &applied) < 0);
	CHECK(!applied);
	CHECK(!handshake_works(NEW_SECRET_HEX));
	CHECK(handshake_works(THIRD_SECRET_HEX));
	/* a malformed document in the Ping ends that connection and changes nothing */
	CHECK(connect_with_rekey(THIRD_SECRET_HEX, OTHER_SECRET_HEX, "not json", &applied) < 0);
	CHECK(handshake_works(THIRD_SECRET_HEX));
	CHECK(!handshake_works(OTHER_SECRET_HEX));
}

int main(int argc, char **argv)
{
	char cmd[sizeof(tree) + 16];

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH-TO-voidbox-agent\n", argv[0]);
		return 2;
	}
	if (!mkdtemp(tree)) {
		perror("mkdtemp");
		return 1;
	}
	start_agent(argv[1]);
	RUN_TEST(test_malformed_rekey_changes_nothing);
	RUN_TEST(test_rekey_switches_secret_and_closes_other_old_connections);
	RUN_TEST(test_rekey_in_handshake_survives_a_lost_pong);
	kill(agent_pid, SIGTERM);
	waitpid(agent_pid, NULL, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tree);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tree);
	return harness_finish();
}
