/*
 * libslirp, opened on first use (dynlib.h): the network device (src/devices/net.c) calls it
 * through slirp_dl, never directly, so neither the voidbox command nor voidbox-vmm links it
 * or the GLib and PCRE2 it pulls in. A VM without a network never maps them: its VMM process
 * starts sooner and holds less code while it serves a hostile guest. A VMM process that will
 * build a network loads the library before it enters its jail, where /lib is out of reach
 * (src/sandbox/vmm_serve.c). The table holds exactly the functions voidbox calls, named
 * without their "slirp_" prefix; libslirp.h still gives their types.
 */
#ifndef VOIDBOX_DYNLIB_SLIRP_DL_H
#define VOIDBOX_DYNLIB_SLIRP_DL_H

#include <stddef.h>

#include <libslirp.h>

struct slirp_dl {
	__typeof__(slirp_new) *new_stack;
	__typeof__(slirp_cleanup) *cleanup;
	__typeof__(slirp_add_hostfwd) *add_hostfwd;
	__typeof__(slirp_input) *input;
	__typeof__(slirp_pollfds_fill) *pollfds_fill;
	__typeof__(slirp_pollfds_poll) *pollfds_poll;
	__typeof__(slirp_handle_timer) *handle_timer;
	__typeof__(slirp_state_version) *state_version;
	__typeof__(slirp_state_save) *state_save;
	__typeof__(slirp_state_load) *state_load;
};

/* Filled by the first successful slirp_dl_load; all NULL until then. */
extern struct slirp_dl slirp_dl;

/*
 * Opens libslirp once per process. 0, after which slirp_dl may be called; or -errno with err
 * saying that purpose ("the guest's network") needs libslirp and which package to install.
 */
int slirp_dl_load(const char *purpose, char *err, size_t errlen);

#endif
