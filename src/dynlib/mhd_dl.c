/*
 * The libmicrohttpd table (see mhd_dl.h): one entry per function, its name built from the
 * member name, so the list cannot drift from the struct.
 */
#include "dynlib/mhd_dl.h"

#include "dynlib/dynlib.h"

#define MHD_DL_SYMBOL(member) { "MHD_" #member, offsetof(struct mhd_dl, member) }

struct mhd_dl mhd_dl;

static const struct dynlib_symbol mhd_dl_symbols[] = {
	MHD_DL_SYMBOL(start_daemon),
	MHD_DL_SYMBOL(stop_daemon),
	MHD_DL_SYMBOL(lookup_connection_value),
	MHD_DL_SYMBOL(create_response_from_buffer),
	MHD_DL_SYMBOL(create_response_from_callback),
	MHD_DL_SYMBOL(add_response_header),
	MHD_DL_SYMBOL(queue_response),
	MHD_DL_SYMBOL(destroy_response),
};

DYNLIB_MODULE(mhd_dl, "libmicrohttpd", VOIDBOX_MHD_SONAME, VOIDBOX_MHD_PACKAGE, mhd_dl_symbols,
	      mhd_dl)
