/*
 * libmicrohttpd, opened on first use (dynlib.h): the daemon's HTTP API (src/daemon/http.c)
 * and the messaging sidecar (src/messaging/sidecar.c) call it through mhd_dl, never
 * directly, so the voidbox binary does not link it. The table holds exactly the functions
 * voidbox calls, named without their "MHD_" prefix; microhttpd.h still gives their types.
 */
#ifndef VOIDBOX_DYNLIB_MHD_DL_H
#define VOIDBOX_DYNLIB_MHD_DL_H

#include <stddef.h>

#include <microhttpd.h>

struct mhd_dl {
	__typeof__(MHD_start_daemon) *start_daemon;
	__typeof__(MHD_stop_daemon) *stop_daemon;
	__typeof__(MHD_lookup_connection_value) *lookup_connection_value;
	__typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
	__typeof__(MHD_create_response_from_callback) *create_response_from_callback;
	__typeof__(MHD_add_response_header) *add_response_header;
	__typeof__(MHD_queue_response) *queue_response;
	__typeof__(MHD_destroy_response) *destroy_response;
};

/* Filled by the first successful mhd_dl_load; all NULL until then. */
extern struct mhd_dl mhd_dl;

/*
 * Opens libmicrohttpd once per process. 0, after which mhd_dl may be called; or -errno with
 * err saying that purpose ("serving the daemon's HTTP API") needs libmicrohttpd and which
 * package to install.
 */
int mhd_dl_load(const char *purpose, char *err, size_t errlen);

#endif
