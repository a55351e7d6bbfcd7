/*
 * The libslirp table (see slirp_dl.h): one entry per function, each paired with its exported
 * name here, since slirp_new's member cannot be called "new" in every compiler's eyes.
 */
#include "dynlib/slirp_dl.h"

#include "dynlib/dynlib.h"

#define SLIRP_DL_SYMBOL(name, member) { "slirp_" #name, offsetof(struct slirp_dl, member) }

struct slirp_dl slirp_dl;

static const struct dynlib_symbol slirp_dl_symbols[] = {
	SLIRP_DL_SYMBOL(new, new_stack),
	SLIRP_DL_SYMBOL(cleanup, cleanup),
	SLIRP_DL_SYMBOL(add_hostfwd, add_hostfwd),
	SLIRP_DL_SYMBOL(input, input),
	SLIRP_DL_SYMBOL(pollfds_fill, pollfds_fill),
	SLIRP_DL_SYMBOL(pollfds_poll, pollfds_poll),
	SLIRP_DL_SYMBOL(handle_timer, handle_timer),
	SLIRP_DL_SYMBOL(state_version, state_version),
	SLIRP_DL_SYMBOL(state_save, state_save),
	SLIRP_DL_SYMBOL(state_load, state_load),
};

DYNLIB_MODULE(slirp_dl, "libslirp", VOIDBOX_SLIRP_SONAME, VOIDBOX_SLIRP_PACKAGE,
	      slirp_dl_symbols, slirp_dl)
