/*
 * Agent flavours: guest images that carry a real coding-agent CLI on top of the default
 * contents. A flavour's image is the named guest image of the same name ("claude", "codex"),
 * built by `voidbox image build --flavour NAME`, so it is listed, resolved and cleaned like any
 * other image.
 *
 * Preparing a flavour turns the pins in agent_pins.h into host files the image build adds:
 * the npm tarball is fetched once into $VOIDBOX_HOME/cache/npm (with curl, no npm and no
 * install scripts), checked against its pinned sha512 integrity before anything in it is
 * used, and the pinned members are unpacked; a dynamically linked program brings the host
 * libraries `ldd` names (the host is Debian, like the guest image's kernel); every flavour
 * also gets the host's CA bundle and an /etc/passwd naming the sandbox user, which the agent
 * CLIs look up.
 */
#ifndef VOIDBOX_STORE_AGENT_FLAVOUR_H
#define VOIDBOX_STORE_AGENT_FLAVOUR_H

#include <limits.h>
#include <stddef.h>

#include "store/guest_image.h"

enum agent_flavour {
	AGENT_FLAVOUR_CLAUDE,
	AGENT_FLAVOUR_CODEX,
};

/* Files a flavour adds; large (paths inline), so allocate it. */
#define AGENT_FLAVOUR_FILES_MAX 48
#define AGENT_FLAVOUR_CACHE_DIR "cache/npm"

struct agent_flavour_files {
	struct guest_image_extra_file files[AGENT_FLAVOUR_FILES_MAX];
	char host_paths[AGENT_FLAVOUR_FILES_MAX][PATH_MAX];
	char guest_paths[AGENT_FLAVOUR_FILES_MAX][PATH_MAX];
	size_t count;
};

/* "claude" or "codex"; -EINVAL for anything else. */
int agent_flavour_parse(const char *name, enum agent_flavour *out);
/* The flavour's name, which is also its image's name. */
const char *agent_flavour_name(enum agent_flavour flavour);
/* The pinned package and version, for messages and the image manifest. */
const char *agent_flavour_package(enum agent_flavour flavour);
const char *agent_flavour_version(enum agent_flavour flavour);

/*
 * Fetches (or finds in the cache), verifies and unpacks the flavour's pinned tarball and
 * fills *out with everything the image must add. -errno with a sentence in err.
 */
int agent_flavour_prepare(enum agent_flavour flavour, struct agent_flavour_files *out,
			  char *err, size_t errlen);

/*
 * 0 when the file's sha512 matches an npm integrity string ("sha512-<base64>"); -EBADMSG
 * with both digests in err when it does not; -EINVAL for an integrity that is not sha512.
 */
int agent_flavour_check_integrity(const char *path, const char *integrity, char *err,
				  size_t errlen);

/*
 * The absolute library paths in `ldd` output ("name => /path (addr)" and "/path (addr)"
 * lines; "not found" is an error naming the library). Up to max paths go to paths[].
 * 0 with *count, -ENOENT for a missing library (err names it), -E2BIG past max.
 */
int agent_flavour_ldd_paths(const char *ldd_output, char paths[][PATH_MAX], size_t max,
			    size_t *count, char *err, size_t errlen);

#endif
