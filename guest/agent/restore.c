/*
 * The rekey of a restored guest (see restore.h). The registry of authenticated connections
 * is a small fixed table under one lock: a rekey shuts down (SHUT_RDWR) every entry older
 * than the new secret but the one that carried it, which makes each connection's reader see
 * EOF and end the way a host close would; unregistering happens under the same lock before
 * the fd can be closed, so a reused fd number is never shut down by mistake.
 */
#include "restore.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent_log.h"
#include "proto/protocol.h"

#define RESTORE_URANDOM "/dev/urandom"
#define RESTORE_HWRNG "/dev/hwrng"
/* More than the hwrng core and the virtio-rng driver hold between them (64 bytes each). */
#define RESTORE_HWRNG_DRAIN_MAX 1024
#define RESTORE_NSEC_PER_SEC 1000000000ULL
#define RESTORE_BITS_PER_BYTE 8

struct restore_conn_entry {
	int fd;
	uint64_t generation;
};

static pthread_mutex_t restore_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t restore_generation;
static bool restore_rekeyed;
static uint8_t restore_secret[PROTO_SECRET_SIZE];
/* The secret a handshake rekey replaced: proves a retry of that same rekey (restore.h). */
static bool restore_has_previous;
static uint8_t restore_previous[PROTO_SECRET_SIZE];
static struct restore_conn_entry restore_conns[RESTORE_MAX_CONNS];
static size_t restore_conn_count;

/* The secret handshakes are proven with now, or NULL when there is none. Caller locks. */
static const uint8_t *restore_current_secret_locked(const struct agent_context *ctx)
{
	if (restore_rekeyed)
		return restore_secret;
	return ctx->has_secret ? ctx->secret : NULL;
}

/* Whether proof answers nonce under secret (NULL: no). */
static bool restore_proof_matches(const uint8_t *secret, const uint8_t proof[PROTO_PROOF_SIZE],
				  const uint8_t nonce[PROTO_NONCE_SIZE])
{
	uint8_t expected[PROTO_PROOF_SIZE];
	bool matches;

	if (!secret)
		return false;
	proto_handshake_proof(secret, nonce, expected);
	matches = proto_secret_equal(proof, expected);
	explicit_bzero(expected, sizeof(expected));
	return matches;
}

/* Registers fd at the current generation unless the registry is full. Caller locks. */
static int restore_register_locked(int fd)
{
	if (restore_conn_count >= RESTORE_MAX_CONNS)
		return -EMFILE;
	restore_conns[restore_conn_count++] = (struct restore_conn_entry){
		.fd = fd, .generation = restore_generation,
	};
	return 0;
}

int restore_authenticate(const struct agent_context *ctx, const uint8_t proof[PROTO_PROOF_SIZE],
			 const uint8_t nonce[PROTO_NONCE_SIZE], int fd)
{
	int verdict;

	pthread_mutex_lock(&restore_lock);
	if (!restore_proof_matches(restore_current_secret_locked(ctx), proof, nonce))
		verdict = -EACCES;
	else
		verdict = restore_register_locked(fd);
	pthread_mutex_unlock(&restore_lock);
	return verdict;
}

/* fd's registry entry, or NULL. Caller holds restore_lock. */
static struct restore_conn_entry *restore_conn_find_locked(int fd)
{
	for (size_t i = 0; i < restore_conn_count; i++)
		if (restore_conns[i].fd == fd)
			return &restore_conns[i];
	return NULL;
}

void restore_conn_unregister(int fd)
{
	pthread_mutex_lock(&restore_lock);
	struct restore_conn_entry *entry = restore_conn_find_locked(fd);

	if (entry)
		*entry = restore_conns[--restore_conn_count];
	pthread_mutex_unlock(&restore_lock);
}

bool restore_is_rekey_path(const char *path)
{
	return path && strcmp(path, RESTORE_REKEY_PATH) == 0;
}

/*
 * RNDADDENTROPY credits the seed; a plain write (no credit) is the fallback. Neither changes
 * what the CRNG hands out next: it keeps the key it had when the snapshot was taken until its
 * next scheduled reseed, so every clone of one snapshot would draw the same bytes until then.
 * RNDRESEEDCRNG forces the reseed from the pool that now holds the seed.
 */
static void restore_add_entropy(const uint8_t *seed, size_t len)
{
	/* rand_pool_info ends in a flexible array: the seed follows it in the same buffer. */
	union {
		struct rand_pool_info info;
		uint8_t bytes[sizeof(struct rand_pool_info) + PROTO_REKEY_SEED_MAX];
	} pool;
	int fd = open(RESTORE_URANDOM, O_WRONLY | O_CLOEXEC);

	if (fd < 0) {
		agent_warn("restore: cannot open %s: %s", RESTORE_URANDOM, strerror(errno));
		return;
	}
	pool.info.entropy_count = (int)(len * RESTORE_BITS_PER_BYTE);
	pool.info.buf_size = (int)len;
	memcpy(pool.bytes + sizeof(struct rand_pool_info), seed, len);
	if (ioctl(fd, RNDADDENTROPY, &pool) < 0 && write(fd, seed, len) < 0)
		agent_warn("restore: cannot add the seed to the RNG: %s", strerror(errno));
	if (ioctl(fd, RNDRESEEDCRNG) < 0)
		agent_warn("restore: cannot force an RNG reseed (RNDRESEEDCRNG): %s; clones of "
			   "this snapshot may share random output until the kernel reseeds",
			   strerror(errno));
	explicit_bzero(&pool, sizeof(pool));
	close(fd);
}

/*
 * The hw_random core and the virtio-rng driver keep bytes they fetched from the host before
 * the snapshot; every clone of it would hand the same ones to its first reader of
 * /dev/hwrng. A non-blocking read returns exactly those cached bytes (then EAGAIN until the
 * host answers a new request), so reading until it stops throws them away.
 */
static void restore_drain_hwrng(void)
{
	uint8_t stale[RESTORE_HWRNG_DRAIN_MAX];
	size_t drained = 0;
	int fd = open(RESTORE_HWRNG, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return; /* no entropy device: nothing cached */
	while (drained < sizeof(stale)) {
		ssize_t n = read(fd, stale, sizeof(stale) - drained);

		if (n <= 0)
			break;
		drained += (size_t)n;
	}
	explicit_bzero(stale, sizeof(stale));
	close(fd);
}

static void restore_set_clock(uint64_t clock_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(clock_ns / RESTORE_NSEC_PER_SEC),
			       .tv_nsec = (long)(clock_ns % RESTORE_NSEC_PER_SEC) };

	if (clock_settime(CLOCK_REALTIME, &ts) < 0)
		agent_warn("restore: cannot set the clock: %s", strerror(errno));
}

/*
 * Reseeds, sets the clock and switches to rekey's secret. previous (NULL: none) is the secret
 * it replaces, kept to recognise a retry of a handshake rekey.
 */
static void restore_apply_decoded(const struct proto_rekey *rekey, bool in_vm,
				  const uint8_t *previous)
{
	if (in_vm) {
		restore_drain_hwrng();
		restore_add_entropy(rekey->seed, rekey->seed_len);
		restore_set_clock(rekey->clock_ns);
	}
	pthread_mutex_lock(&restore_lock);
	restore_has_previous = previous != NULL;
	if (previous)
		memcpy(restore_previous, previous, sizeof(restore_previous));
	else
		explicit_bzero(restore_previous, sizeof(restore_previous));
	memcpy(restore_secret, rekey->secret, sizeof(restore_secret));
	restore_rekeyed = true;
	restore_generation++;
	pthread_mutex_unlock(&restore_lock);
	agent_info("restore: rekeyed%s", in_vm ? ", RNG reseeded, clock set" : " (not PID 1: RNG and "
		   "clock left alone)");
}

int restore_apply(const uint8_t *json, size_t len, bool in_vm, char **error)
{
	struct proto_rekey rekey;
	const char *why = "?";

	if (proto_rekey_decode(json, len, &rekey, &why) < 0) {
		*error = strdup(why);
		return -EINVAL;
	}
	restore_apply_decoded(&rekey, in_vm, NULL);
	explicit_bzero(&rekey, sizeof(rekey));
	return 0;
}

/*
 * Whether proof, which failed under the current secret, is a retry of the handshake rekey
 * that installed it: proven with the secret that rekey replaced and carrying the very secret
 * it installed. Caller holds restore_lock.
 */
static bool restore_is_rekey_retry_locked(const struct proto_rekey *rekey,
					  const uint8_t proof[PROTO_PROOF_SIZE],
					  const uint8_t nonce[PROTO_NONCE_SIZE])
{
	return restore_rekeyed && restore_has_previous &&
	       proto_secret_equal(rekey->secret, restore_secret) &&
	       restore_proof_matches(restore_previous, proof, nonce);
}

int restore_authenticate_rekey(const struct agent_context *ctx,
			       const uint8_t proof[PROTO_PROOF_SIZE],
			       const uint8_t nonce[PROTO_NONCE_SIZE], int fd, const uint8_t *json,
			       size_t len)
{
	uint8_t previous[PROTO_SECRET_SIZE];
	struct proto_rekey rekey;
	const char *why = "?";
	const uint8_t *current;
	bool accepted = true, retry = false;
	int verdict;

	if (proto_rekey_decode(json, len, &rekey, &why) < 0) {
		agent_warn("handshake: closing: malformed rekey document in Ping: %s", why);
		return -EINVAL;
	}
	pthread_mutex_lock(&restore_lock);
	current = restore_current_secret_locked(ctx);
	if (restore_proof_matches(current, proof, nonce)) {
		memcpy(previous, current, sizeof(previous));
	} else if (restore_is_rekey_retry_locked(&rekey, proof, nonce)) {
		/* a retry keeps the secret the first attempt replaced */
		memcpy(previous, restore_previous, sizeof(previous));
		retry = true;
	} else {
		accepted = false;
	}
	verdict = accepted ? restore_register_locked(fd) : -EACCES;
	pthread_mutex_unlock(&restore_lock);
	if (verdict == 0) {
		if (retry)
			agent_info("restore: the host repeated its rekey (its Pong was lost)");
		restore_apply_decoded(&rekey, ctx->is_pid1, previous);
		restore_retire_stale_connections(fd);
	}
	explicit_bzero(previous, sizeof(previous));
	explicit_bzero(&rekey, sizeof(rekey));
	return verdict;
}

void restore_retire_stale_connections(int rekeying_fd)
{
	pthread_mutex_lock(&restore_lock);
	struct restore_conn_entry *rekeying = restore_conn_find_locked(rekeying_fd);

	if (rekeying)
		rekeying->generation = restore_generation;
	for (size_t i = 0; i < restore_conn_count; i++)
		if (restore_conns[i].generation < restore_generation)
			shutdown(restore_conns[i].fd, SHUT_RDWR);
	pthread_mutex_unlock(&restore_lock);
}

bool restore_conn_is_stale(int fd)
{
	pthread_mutex_lock(&restore_lock);
	const struct restore_conn_entry *entry = restore_conn_find_locked(fd);
	bool stale = entry && entry->generation < restore_generation;

	pthread_mutex_unlock(&restore_lock);
	return stale;
}
