/*
 * What a sandbox keeps on the host while it lives (its runtime directory, its fork area on
 * /dev/shm and that area's checked copies, its VMM process's cgroup) goes with its own
 * teardown. A process that dies without one (SIGKILL, or the default action of a SIGTERM, as
 * a daemon's cancel sends) leaves them behind for good, and a fork area on tmpfs holds guest
 * memory. So each such directory holds an owner lock that its creating process keeps locked
 * (flock) for as long as it lives, and a sweep removes every directory of ours whose lock
 * nobody holds: the lock is released by the kernel however the owner ended, and a directory
 * without one (being made, or a serial log kept on purpose) is left alone.
 */
#ifndef VOIDBOX_SANDBOX_LEFTOVERS_H
#define VOIDBOX_SANDBOX_LEFTOVERS_H

#include <stddef.h>

/* The owner lock's name inside a claimed directory. */
#define LEFTOVERS_OWNER_LOCK ".voidbox-owner"
/* The most directories one sweep removes, so a start never spends long on a backlog. */
#define LEFTOVERS_SWEEP_MAX 32u

/*
 * Makes dir's owner lock and holds it: its descriptor (close-on-exec), or -errno (the
 * directory then simply cannot be swept if its owner dies).
 */
int leftovers_claim(const char *dir);
/* Removes dir's owner lock and closes lock_fd (ignored when negative); before dir goes. */
void leftovers_release(const char *dir, int lock_fd);

/*
 * Removes the directories in base whose names start with prefix, that this user owns, and
 * whose owner lock nobody holds, with, for each, the cgroup of the same name beneath
 * cgroup_root (NULL: none) and its siblings named "<name>-checked-..." (a fork area's checked
 * copies); also such checked copies whose fork area is gone. At most LEFTOVERS_SWEEP_MAX
 * directories. Returns how many were removed.
 */
unsigned int leftovers_sweep(const char *base, const char *prefix, const char *cgroup_root);

#endif
