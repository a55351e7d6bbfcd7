/*
 * Flavour preparation (see agent_flavour.h): a table of what each flavour takes from its
 * pinned tarball and from the host, and a straight pipeline over it (cache directory, fetch,
 * verify, unpack, libraries, generated /etc files). The external tools (curl, tar, ldd) run
 * through store_run_tool with no shell, their stdout captured only where it is parsed.
 *
 * A cached tarball is trusted only after it hashes to its pin again, so a corrupted or
 * replaced cache entry is fetched anew instead of being unpacked; a download that does not
 * match is deleted and the build stops with both digests in the error.
 */
#include "store/agent_flavour.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/path.h"
#include "store/agent_pins.h"
#include "store/store_fs.h"

#define LOG_MODULE "image"
#define FLAVOUR_INTEGRITY_PREFIX "sha512-"
#define FLAVOUR_SHA512_BYTES 64
/* base64 of 64 bytes: 88 characters and the NUL */
#define FLAVOUR_SHA512_BASE64_MAX 89
#define FLAVOUR_DIGEST_ALGORITHM "sha512"
#define FLAVOUR_CAPTURE_MAX (64 * 1024)
#define FLAVOUR_MEMBERS_MAX 3
/* tar -xzf TARBALL -C DIR: the arguments before the members */
#define FLAVOUR_TAR_FIXED_ARGS 5
#define FLAVOUR_HOST_PROGRAMS_MAX 1
#define FLAVOUR_DIR_MODE 0755
#define FLAVOUR_EXEC_MODE 0755
#define FLAVOUR_DATA_MODE 0644
#define FLAVOUR_CURL_RETRIES "3"
#define FLAVOUR_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define FLAVOUR_LDD_NOT_FOUND "not found"
#define FLAVOUR_LDD_STATIC "statically linked"
#define FLAVOUR_LDD_NOT_DYNAMIC "not a dynamic executable"
/* The guest agent runs programs as uid/gid 1000 with HOME /home/sandbox (guest/agent). */
#define FLAVOUR_PASSWD "root:x:0:0:root:/root:/bin/sh\n" \
	"sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n"
#define FLAVOUR_GROUP "root:x:0:\nsandbox:x:1000:\n"

struct flavour_member {
	const char *member;	/* path inside the tarball */
	const char *guest_path; /* where the image has it */
};

struct flavour_pin {
	const char *name;
	const char *package;
	const char *version;
	const char *tarball;
	const char *integrity;
	struct flavour_member members[FLAVOUR_MEMBERS_MAX];
	/* host programs the agent CLI runs (with their libraries), at the same guest path */
	const char *host_programs[FLAVOUR_HOST_PROGRAMS_MAX];
};

static const struct flavour_pin flavour_pins[] = {
	[AGENT_FLAVOUR_CLAUDE] = {
		.name = "claude",
		.package = AGENT_PIN_CLAUDE_PACKAGE,
		.version = AGENT_PIN_CLAUDE_VERSION,
		.tarball = AGENT_PIN_CLAUDE_TARBALL,
		.integrity = AGENT_PIN_CLAUDE_INTEGRITY,
		.members = { { AGENT_PIN_CLAUDE_MEMBER, "/usr/local/bin/claude-code" } },
		/* claude-code's Bash tool looks for bash before any other shell */
		.host_programs = { "/bin/bash" },
	},
	[AGENT_FLAVOUR_CODEX] = {
		.name = "codex",
		.package = AGENT_PIN_CODEX_PACKAGE,
		.version = AGENT_PIN_CODEX_VERSION,
		.tarball = AGENT_PIN_CODEX_TARBALL,
		.integrity = AGENT_PIN_CODEX_INTEGRITY,
		/* codex runs its code-mode host from beside its own executable */
		.members = { { AGENT_PIN_CODEX_MEMBER, "/usr/local/bin/codex" },
			     { AGENT_PIN_CODEX_HOST_MEMBER, "/usr/local/bin/codex-code-mode-host" },
			     { AGENT_PIN_CODEX_RG_MEMBER, "/usr/local/bin/rg" } },
	},
};

#define FLAVOUR_COUNT (sizeof(flavour_pins) / sizeof(flavour_pins[0]))

struct flavour_work {
	const struct flavour_pin *pin;
	struct agent_flavour_files *out;
	char cache_dir[PATH_MAX];
	char tarball[PATH_MAX];
	char unpack_dir[PATH_MAX];
	char *err;
	size_t errlen;
};

int agent_flavour_parse(const char *name, enum agent_flavour *out)
{
	for (size_t i = 0; name && i < FLAVOUR_COUNT; i++) {
		if (strcmp(name, flavour_pins[i].name) == 0) {
			*out = (enum agent_flavour)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *agent_flavour_name(enum agent_flavour flavour)
{
	return (size_t)flavour < FLAVOUR_COUNT ? flavour_pins[flavour].name : "unknown";
}

const char *agent_flavour_package(enum agent_flavour flavour)
{
	return (size_t)flavour < FLAVOUR_COUNT ? flavour_pins[flavour].package : "unknown";
}

const char *agent_flavour_version(enum agent_flavour flavour)
{
	return (size_t)flavour < FLAVOUR_COUNT ? flavour_pins[flavour].version : "unknown";
}

/* ---- integrity ------------------------------------------------------------------------ */

static int flavour_sha512_base64(const char *path, char out[FLAVOUR_SHA512_BASE64_MAX])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int digest_len = 0;
	int rc = store_file_digest(path, FLAVOUR_DIGEST_ALGORITHM, digest, &digest_len);

	if (rc == 0)
		EVP_EncodeBlock((unsigned char *)out, digest, (int)digest_len);
	return rc;
}

int agent_flavour_check_integrity(const char *path, const char *integrity, char *err,
				  size_t errlen)
{
	char actual[FLAVOUR_SHA512_BASE64_MAX] = "";
	const char *expected;
	int rc;

	if (!integrity || strncmp(integrity, FLAVOUR_INTEGRITY_PREFIX,
				  strlen(FLAVOUR_INTEGRITY_PREFIX)) != 0) {
		store_error(err, errlen, "integrity '%s' is not an npm sha512 integrity "
			    "(sha512-<base64>): take it from `npm view PACKAGE dist.integrity`",
			    integrity ? integrity : "(none)");
		return -EINVAL;
	}
	expected = integrity + strlen(FLAVOUR_INTEGRITY_PREFIX);
	rc = flavour_sha512_base64(path, actual);
	if (rc < 0) {
		store_error(err, errlen, "cannot hash %s: %s", path, strerror(-rc));
		return rc;
	}
	if (strcmp(actual, expected) != 0) {
		store_error(err, errlen, "%s does not match its pinned integrity: expected "
			    "sha512-%s, got sha512-%s", path, expected, actual);
		return -EBADMSG;
	}
	return 0;
}

/* ---- ldd output ----------------------------------------------------------------------- */

static int flavour_add_unique_path(char paths[][PATH_MAX], size_t max, size_t *count,
				   const char *path, size_t len)
{
	if (len == 0 || len >= PATH_MAX)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < *count; i++)
		if (strlen(paths[i]) == len && strncmp(paths[i], path, len) == 0)
			return 0;
	if (*count >= max)
		return -E2BIG;
	memcpy(paths[*count], path, len);
	paths[*count][len] = '\0';
	(*count)++;
	return 0;
}

int agent_flavour_ldd_paths(const char *ldd_output, char paths[][PATH_MAX], size_t max,
			    size_t *count, char *err, size_t errlen)
{
	const char *line = ldd_output ? ldd_output : "";

	*count = 0;
	while (*line) {
		size_t line_len = strcspn(line, "\n");
		const char *arrow = NULL, *start = line, *end = line + line_len;
		int rc;

		for (const char *p = line; p + 1 < end; p++)
			if (p[0] == '=' && p[1] == '>') {
				arrow = p;
				break;
			}
		if (arrow) {
			start = arrow + 2;
			if ((size_t)(end - start) >= strlen(FLAVOUR_LDD_NOT_FOUND) &&
			    strstr(start, FLAVOUR_LDD_NOT_FOUND) &&
			    strstr(start, FLAVOUR_LDD_NOT_FOUND) < end) {
				store_error(err, errlen, "a library the agent needs is not on this "
					    "host: %.*s", (int)line_len, line);
				return -ENOENT;
			}
		}
		while (start < end && (*start == ' ' || *start == '\t'))
			start++;
		if (start < end && *start == '/') {
			size_t path_len = strcspn(start, " \t\n");

			rc = flavour_add_unique_path(paths, max, count, start, path_len);
			if (rc < 0) {
				store_error(err, errlen, "too many libraries in the ldd output "
					    "(at most %zu)", max);
				return rc;
			}
		}
		line = *end ? end + 1 : end;
	}
	return 0;
}

/* ---- pipeline ------------------------------------------------------------------------- */

static int flavour_prepare_dirs(struct flavour_work *work)
{
	char home[PATH_MAX];
	const char *base = strrchr(work->pin->tarball, '/');
	int rc = guest_image_home(home, sizeof(home));

	if (rc < 0) {
		store_error(work->err, work->errlen, "cannot find the voidbox home: set %s or HOME",
			    GUEST_IMAGE_ENV_HOME);
		return rc;
	}
	if (snprintf(work->cache_dir, sizeof(work->cache_dir), "%s/%s", home,
		     AGENT_FLAVOUR_CACHE_DIR) >= (int)sizeof(work->cache_dir) ||
	    snprintf(work->tarball, sizeof(work->tarball), "%s/%s", work->cache_dir,
		     base ? base + 1 : work->pin->tarball) >= (int)sizeof(work->tarball) ||
	    snprintf(work->unpack_dir, sizeof(work->unpack_dir), "%s/%s-%s", work->cache_dir,
		     work->pin->name, work->pin->version) >= (int)sizeof(work->unpack_dir)) {
		store_error(work->err, work->errlen, "the voidbox home path %s is too long", home);
		return -ENAMETOOLONG;
	}
	rc = path_mkdirs(work->unpack_dir, FLAVOUR_DIR_MODE);
	if (rc < 0)
		store_error(work->err, work->errlen, "cannot create %s: %s", work->unpack_dir,
			    strerror(-rc));
	return rc;
}

/* A cached tarball that hashes to its pin, else a fresh download that must. */
static int flavour_fetch(struct flavour_work *work)
{
	char partial[PATH_MAX + 8];
	const char *curl[] = { "curl", "--fail", "--silent", "--show-error", "--location",
			       "--retry", FLAVOUR_CURL_RETRIES, "--output", partial,
			       work->pin->tarball, NULL };
	char cached_err[256];
	int rc;

	if (access(work->tarball, R_OK) == 0) {
		if (agent_flavour_check_integrity(work->tarball, work->pin->integrity, cached_err,
						  sizeof(cached_err)) == 0) {
			log_info(LOG_MODULE, "using cached %s (integrity checked)", work->tarball);
			return 0;
		}
		log_warn(LOG_MODULE, "cached %s fails its check; fetching it again", work->tarball);
		unlink(work->tarball);
	}
	snprintf(partial, sizeof(partial), "%s.part", work->tarball);
	log_info(LOG_MODULE, "downloading %s@%s (%s)", work->pin->package, work->pin->version,
		 work->pin->tarball);
	rc = store_run_tool(curl, NULL, NULL, 0, work->err, work->errlen);
	if (rc < 0) {
		unlink(partial);
		store_error(work->err, work->errlen, "cannot download %s", work->pin->tarball);
		if (!store_explain_low_space(work->cache_dir, work->err, work->errlen))
			store_error(work->err, work->errlen, "cannot download %s: check the network "
				    "reaches registry.npmjs.org (curl said so on stderr)",
				    work->pin->tarball);
		return rc;
	}
	rc = agent_flavour_check_integrity(partial, work->pin->integrity, work->err,
					   work->errlen);
	if (rc < 0) {
		unlink(partial);
		return rc;
	}
	if (rename(partial, work->tarball) < 0) {
		rc = -errno;
		unlink(partial);
		store_error(work->err, work->errlen, "cannot store %s: %s", work->tarball,
			    strerror(-rc));
		return rc;
	}
	log_info(LOG_MODULE, "%s matches its pinned sha512", work->tarball);
	return 0;
}

static int flavour_add_file(struct flavour_work *work, const char *host_path,
			    const char *guest_path, mode_t mode)
{
	struct agent_flavour_files *out = work->out;
	size_t i = out->count;

	for (size_t seen = 0; seen < out->count; seen++)
		if (strcmp(out->guest_paths[seen], guest_path) == 0)
			return 0;
	if (i >= AGENT_FLAVOUR_FILES_MAX) {
		store_error(work->err, work->errlen, "flavour %s adds more than %d files",
			    work->pin->name, AGENT_FLAVOUR_FILES_MAX);
		return -E2BIG;
	}
	if (snprintf(out->host_paths[i], PATH_MAX, "%s", host_path) >= PATH_MAX ||
	    snprintf(out->guest_paths[i], PATH_MAX, "%s", guest_path) >= PATH_MAX) {
		store_error(work->err, work->errlen, "path too long: %s", host_path);
		return -ENAMETOOLONG;
	}
	out->files[i] = (struct guest_image_extra_file){ .host_path = out->host_paths[i],
							 .guest_path = out->guest_paths[i],
							 .mode = mode };
	out->count++;
	return 0;
}

/* The host libraries a dynamic program needs, each at its host path in the guest. */
static int flavour_add_libraries(struct flavour_work *work, const char *program)
{
	const char *ldd[] = { "ldd", program, NULL };
	char (*paths)[PATH_MAX] = calloc(AGENT_FLAVOUR_FILES_MAX, PATH_MAX);
	char *output = malloc(FLAVOUR_CAPTURE_MAX);
	size_t count = 0;
	int rc = paths && output ? 0 : -ENOMEM;

	if (rc == 0)
		rc = store_run_tool(ldd, NULL, output, FLAVOUR_CAPTURE_MAX, work->err, work->errlen);
	/* ldd fails on static programs on some hosts; its text says so either way */
	if (rc == -EIO && output && (strstr(output, FLAVOUR_LDD_STATIC) ||
				     strstr(output, FLAVOUR_LDD_NOT_DYNAMIC)))
		rc = 0;
	if (rc == 0)
		rc = agent_flavour_ldd_paths(output, paths, AGENT_FLAVOUR_FILES_MAX, &count,
					     work->err, work->errlen);
	for (size_t i = 0; rc == 0 && i < count; i++)
		rc = flavour_add_file(work, paths[i], paths[i], FLAVOUR_EXEC_MODE);
	if (rc == 0 && count)
		log_info(LOG_MODULE, "%s needs %zu host libraries", program, count);
	free(output);
	free(paths);
	return rc;
}

static int flavour_unpack(struct flavour_work *work)
{
	const char *tar[FLAVOUR_TAR_FIXED_ARGS + FLAVOUR_MEMBERS_MAX + 1] = {
		"tar", "-xzf", work->tarball, "-C", work->unpack_dir
	};
	size_t argc = FLAVOUR_TAR_FIXED_ARGS;
	int rc;

	for (size_t i = 0; i < FLAVOUR_MEMBERS_MAX && work->pin->members[i].member; i++)
		tar[argc++] = work->pin->members[i].member;
	tar[argc] = NULL;
	rc = store_run_tool(tar, NULL, NULL, 0, work->err, work->errlen);
	if (rc < 0) {
		store_error(work->err, work->errlen, "cannot unpack %s into %s", work->tarball,
			    work->unpack_dir);
		if (!store_explain_low_space(work->unpack_dir, work->err, work->errlen))
			store_error(work->err, work->errlen, "cannot unpack %s into %s: is it the "
				    "pinned package?", work->tarball, work->unpack_dir);
	}
	return rc;
}

static int flavour_add_members(struct flavour_work *work)
{
	char host_path[PATH_MAX];
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < FLAVOUR_MEMBERS_MAX && work->pin->members[i].member;
	     i++) {
		const struct flavour_member *member = &work->pin->members[i];

		if (snprintf(host_path, sizeof(host_path), "%s/%s", work->unpack_dir,
			     member->member) >= (int)sizeof(host_path))
			return -ENAMETOOLONG;
		rc = flavour_add_file(work, host_path, member->guest_path, FLAVOUR_EXEC_MODE);
		if (rc == 0)
			rc = flavour_add_libraries(work, host_path);
	}
	for (size_t i = 0; rc == 0 && i < FLAVOUR_HOST_PROGRAMS_MAX && work->pin->host_programs[i];
	     i++) {
		const char *program = work->pin->host_programs[i];

		if (access(program, X_OK) < 0) {
			store_error(work->err, work->errlen, "flavour %s needs %s from the host: "
				    "install it", work->pin->name, program);
			return -ENOENT;
		}
		rc = flavour_add_file(work, program, program, FLAVOUR_EXEC_MODE);
		if (rc == 0)
			rc = flavour_add_libraries(work, program);
	}
	return rc;
}

static int flavour_write_text(struct flavour_work *work, const char *name, const char *text,
			      const char *guest_path)
{
	char path[PATH_MAX];
	FILE *file;

	if (snprintf(path, sizeof(path), "%s/%s", work->unpack_dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	file = fopen(path, "we");
	if (!file || fputs(text, file) == EOF || fclose(file) != 0) {
		store_error(work->err, work->errlen, "cannot write %s", path);
		return -EIO;
	}
	return flavour_add_file(work, path, guest_path, FLAVOUR_DATA_MODE);
}

static int flavour_add_system_files(struct flavour_work *work)
{
	int rc = flavour_write_text(work, "passwd", FLAVOUR_PASSWD, "/etc/passwd");

	if (rc == 0)
		rc = flavour_write_text(work, "group", FLAVOUR_GROUP, "/etc/group");
	if (rc < 0)
		return rc;
	if (access(FLAVOUR_CA_BUNDLE, R_OK) < 0) {
		log_warn(LOG_MODULE, "%s is missing (install ca-certificates): the agent will not "
			 "trust any HTTPS endpoint", FLAVOUR_CA_BUNDLE);
		return 0;
	}
	return flavour_add_file(work, FLAVOUR_CA_BUNDLE, FLAVOUR_CA_BUNDLE, FLAVOUR_DATA_MODE);
}

int agent_flavour_prepare(enum agent_flavour flavour, struct agent_flavour_files *out,
			  char *err, size_t errlen)
{
	struct flavour_work work = { .out = out, .err = err, .errlen = errlen };
	int rc;

	if ((size_t)flavour >= FLAVOUR_COUNT) {
		store_error(err, errlen, "unknown agent flavour (claude or codex)");
		return -EINVAL;
	}
	work.pin = &flavour_pins[flavour];
	out->count = 0;
	rc = flavour_prepare_dirs(&work);
	if (rc == 0)
		rc = flavour_fetch(&work);
	if (rc == 0)
		rc = flavour_unpack(&work);
	if (rc == 0)
		rc = flavour_add_members(&work);
	if (rc == 0)
		rc = flavour_add_system_files(&work);
	return rc;
}
