/*
 * The host paths a sandbox was granted (see host_grants.h): a small list, compared by exact
 * name, since a VMM process's jail binds a path at the very name a section holds and a name
 * that only resolves to a granted one (a symlink the VMM made) could point elsewhere by the
 * time it is bound.
 */
#include "sandbox/host_grants.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool host_grants_has(const struct host_grants *grants, const char *path,
			    enum vm_host_path_access access)
{
	for (size_t i = 0; i < grants->count; i++)
		if (strcmp(grants->items[i].path, path) == 0 &&
		    (grants->items[i].access == VM_HOST_PATH_READ_WRITE ||
		     access == VM_HOST_PATH_READ_ONLY))
			return true;
	return false;
}

static int host_grants_push(struct host_grants *grants, const char *path,
			    enum vm_host_path_access access, char *err, size_t errlen)
{
	struct host_grant *grown;
	char *copy;

	if (host_grants_has(grants, path, access))
		return 0;
	copy = strdup(path);
	grown = copy ? realloc(grants->items, (grants->count + 1) * sizeof(*grown)) : NULL;
	if (!grown) {
		free(copy);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	grants->items = grown;
	grants->items[grants->count++] = (struct host_grant){ .path = copy, .access = access };
	return 0;
}

int host_grants_add(struct host_grants *grants, const char *path,
		    enum vm_host_path_access access, char *err, size_t errlen)
{
	char canonical[PATH_MAX];
	int rc = host_grants_push(grants, path, access, err, errlen);

	if (rc == 0 && realpath(path, canonical))
		rc = host_grants_push(grants, canonical, access, err, errlen);
	return rc;
}

struct host_grants_walk {
	struct host_grants *grants;
	const struct host_grants *checked;
	char *err;
	size_t errlen;
};

static int host_grants_add_one(const struct vm_host_path *path, void *opaque)
{
	struct host_grants_walk *walk = opaque;

	return host_grants_push(walk->grants, path->path, path->access, walk->err, walk->errlen);
}

int host_grants_add_snapshot(struct host_grants *grants, const struct vm_snapshot_state *state,
			     char *err, size_t errlen)
{
	struct host_grants_walk walk = { .grants = grants, .err = err, .errlen = errlen };

	return vm_snapshot_host_paths(state, host_grants_add_one, &walk, err, errlen);
}

static int host_grants_check_one(const struct vm_host_path *path, void *opaque)
{
	struct host_grants_walk *walk = opaque;

	if (host_grants_has(walk->checked, path->path, path->access))
		return 0;
	snprintf(walk->err, walk->errlen, "the snapshot names %s%s, which this sandbox was not "
		 "granted%s: it is not restored (its VMM process wrote what it was not given)",
		 path->path, path->access == VM_HOST_PATH_READ_WRITE ? " read-write" : "",
		 path->access == VM_HOST_PATH_READ_WRITE ? " that way" : "");
	return -EPERM;
}

int host_grants_check_snapshot(const struct host_grants *grants,
			       const struct vm_snapshot_state *state, char *err, size_t errlen)
{
	struct host_grants_walk walk = { .checked = grants, .err = err, .errlen = errlen };

	return vm_snapshot_host_paths(state, host_grants_check_one, &walk, err, errlen);
}

int host_grants_check_dir(const struct host_grants *grants, const char *dir, char *err,
			  size_t errlen)
{
	struct vm_snapshot_state *state = NULL;
	int rc = vm_snapshot_state_read(dir, &state, err, errlen);

	if (rc == 0)
		rc = host_grants_check_snapshot(grants, state, err, errlen);
	vm_snapshot_state_free(state);
	return rc;
}

int host_grants_copy(struct host_grants *to, const struct host_grants *from, char *err,
		     size_t errlen)
{
	int rc = 0;

	host_grants_free(to);
	for (size_t i = 0; rc == 0 && i < from->count; i++)
		rc = host_grants_push(to, from->items[i].path, from->items[i].access, err, errlen);
	return rc;
}

void host_grants_free(struct host_grants *grants)
{
	for (size_t i = 0; i < grants->count; i++)
		free(grants->items[i].path);
	free(grants->items);
	*grants = (struct host_grants){ 0 };
}
