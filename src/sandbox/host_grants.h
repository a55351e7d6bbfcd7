/*
 * The host paths a sandbox was granted (its disks and shared directories, each read-only or
 * read-write), kept by the side that launches VMM processes.
 *
 * A VMM process writes its VM's snapshots, and a guest that escapes into it could write one
 * whose device sections name other host paths: the next VMM process to restore it binds what
 * the sections name into its jail, so a forged fork snapshot would hand the children's guests
 * the user's home directory. What a VMM process wrote is therefore checked against what its
 * sandbox was granted before another process restores it: every host path it names must be
 * one granted, by the very same name, with no more access than granted.
 */
#ifndef VOIDBOX_SANDBOX_HOST_GRANTS_H
#define VOIDBOX_SANDBOX_HOST_GRANTS_H

#include <stddef.h>

#include "vmm/device.h"
#include "vmm/snapshot.h"

struct host_grant {
	char *path;
	enum vm_host_path_access access;
};

struct host_grants {
	struct host_grant *items;
	size_t count;
};

/*
 * Grants path with access, by the name given and by its canonical name where it resolves
 * (a VMM process names a path canonically when its jail made it so, as given otherwise).
 * 0 or -ENOMEM with err.
 */
int host_grants_add(struct host_grants *grants, const char *path,
		    enum vm_host_path_access access, char *err, size_t errlen);
/* Grants every host path the snapshot's device sections name, as they name them. */
int host_grants_add_snapshot(struct host_grants *grants, const struct vm_snapshot_state *state,
			     char *err, size_t errlen);
/*
 * 0 when every host path the snapshot's sections name is granted, by the same name, with at
 * least the access the section asks for; -EPERM with err naming the first that is not.
 */
int host_grants_check_snapshot(const struct host_grants *grants,
			       const struct vm_snapshot_state *state, char *err, size_t errlen);
/* host_grants_check_snapshot of the snapshot in dir (its state read and checked first). */
int host_grants_check_dir(const struct host_grants *grants, const char *dir, char *err,
			  size_t errlen);
/* A copy of from into to (emptied first). 0 or -ENOMEM with err. */
int host_grants_copy(struct host_grants *to, const struct host_grants *from, char *err,
		     size_t errlen);
void host_grants_free(struct host_grants *grants);

#endif
