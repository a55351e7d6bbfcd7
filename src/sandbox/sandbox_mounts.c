/*
 * Host directories a sandbox shares with its guest: `--mount HOST:GUEST[:ro|:rw]` and a spec's
 * sandbox.mounts become one virtio-fs device each (tag voidboxN) and one
 * voidbox.mountN=voidboxN:GUEST:MODE word on the kernel command line, which the guest agent
 * reads to mount them (guest/agent/mounts.c). Everything the guest would only discover as a
 * missing mount is checked here first: the host path must be a directory (a missing rw one is
 * created, as the spec format promises), the guest path absolute and free of spaces and
 * colons (it travels on the command line).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

#define SANDBOX_MOUNT_TAG_FORMAT "voidbox%u"
#define SANDBOX_MOUNT_WORD_FORMAT " voidbox.mount%u=" SANDBOX_MOUNT_TAG_FORMAT ":%s:%s"
#define SANDBOX_MOUNT_MODE_RO "ro"
#define SANDBOX_MOUNT_MODE_RW "rw"
#define SANDBOX_MOUNT_DIR_MODE 0755

int sandbox_mount_parse(char *text, struct sandbox_mount *out, char *err, size_t errlen)
{
	char *guest = strchr(text, ':');
	char *mode;

	if (!guest || guest == text || guest[1] == '\0') {
		snprintf(err, errlen, "--mount takes HOST_DIR:GUEST_DIR[:ro|:rw], not '%s'", text);
		return -EINVAL;
	}
	*guest++ = '\0';
	mode = strchr(guest, ':');
	out->read_only = false;
	if (mode) {
		*mode++ = '\0';
		if (strcmp(mode, SANDBOX_MOUNT_MODE_RO) != 0 &&
		    strcmp(mode, SANDBOX_MOUNT_MODE_RW) != 0) {
			snprintf(err, errlen, "--mount mode must be ro or rw, not '%s'", mode);
			return -EINVAL;
		}
		out->read_only = strcmp(mode, SANDBOX_MOUNT_MODE_RO) == 0;
	}
	out->host_dir = text;
	out->guest_dir = guest;
	return 0;
}

static bool sandbox_mount_guest_path_ok(const char *path)
{
	if (path[0] != '/' || strlen(path) >= PATH_MAX)
		return false;
	for (const char *p = path; *p; p++) {
		if (*p == ':' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '"')
			return false;
	}
	return strcmp(path, "/") != 0;
}

/* mkdir -p host_dir with mode 0755; errors surface in the realpath that follows. */
static void sandbox_mount_create_dir(const char *host_dir)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s", host_dir) >= (int)sizeof(path))
		return;
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(path, SANDBOX_MOUNT_DIR_MODE);
		*p = '/';
	}
	mkdir(path, SANDBOX_MOUNT_DIR_MODE);
}

static int sandbox_mount_check(const struct sandbox_mount *mount, char *resolved, char *err,
			       size_t errlen)
{
	struct stat st;

	if (!sandbox_mount_guest_path_ok(mount->guest_dir)) {
		snprintf(err, errlen, "guest mount path '%s' must be absolute, not /, and free of "
			 "spaces, quotes and colons", mount->guest_dir);
		return -EINVAL;
	}
	if (!mount->read_only && access(mount->host_dir, F_OK) < 0 && errno == ENOENT)
		sandbox_mount_create_dir(mount->host_dir);
	if (!realpath(mount->host_dir, resolved) || stat(resolved, &st) < 0) {
		snprintf(err, errlen, "cannot share %s: %s", mount->host_dir, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "cannot share %s: it is not a directory", mount->host_dir);
		return -ENOTDIR;
	}
	return 0;
}

void sandbox_mounts_plan_free(struct sandbox_mounts_plan *plan)
{
	free(plan);
}

int sandbox_mounts_plan(const struct sandbox_config *cfg, struct sandbox_mounts_plan **out,
			char *err, size_t errlen)
{
	const char *extra = cfg->extra_cmdline ? cfg->extra_cmdline : "";
	struct sandbox_mounts_plan *plan;
	size_t used;
	int rc;

	*out = NULL;
	if (cfg->mount_count > SANDBOX_MAX_MOUNTS) {
		snprintf(err, errlen, "%u mounts asked for, at most %d fit: share a parent "
			 "directory instead", cfg->mount_count, SANDBOX_MAX_MOUNTS);
		return -E2BIG;
	}
	plan = calloc(1, sizeof(*plan));
	if (!plan) {
		snprintf(err, errlen, "out of memory planning the mounts");
		return -ENOMEM;
	}
	used = (size_t)snprintf(plan->cmdline, sizeof(plan->cmdline), "%s", extra);
	for (unsigned int i = 0; i < cfg->mount_count; i++) {
		const struct sandbox_mount *mount = &cfg->mounts[i];

		rc = sandbox_mount_check(mount, plan->host_dirs[i], err, errlen);
		if (rc < 0)
			goto fail;
		snprintf(plan->tags[i], sizeof(plan->tags[i]), SANDBOX_MOUNT_TAG_FORMAT, i);
		plan->shares[i] = (struct vm_share){ .host_dir = plan->host_dirs[i],
						     .tag = plan->tags[i],
						     .read_only = mount->read_only };
		if (used < sizeof(plan->cmdline))
			used += (size_t)snprintf(plan->cmdline + used, sizeof(plan->cmdline) - used,
						 SANDBOX_MOUNT_WORD_FORMAT, i, i, mount->guest_dir,
						 mount->read_only ? SANDBOX_MOUNT_MODE_RO
								  : SANDBOX_MOUNT_MODE_RW);
		if (used >= sizeof(plan->cmdline)) {
			snprintf(err, errlen, "the mounts' guest paths do not fit on the kernel "
				 "command line: use shorter paths");
			rc = -E2BIG;
			goto fail;
		}
	}
	plan->share_count = cfg->mount_count;
	*out = plan;
	return 0;
fail:
	free(plan);
	return rc;
}
