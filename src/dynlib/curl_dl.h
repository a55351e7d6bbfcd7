/*
 * libcurl, opened on first use (dynlib.h): the daemon client, the daemon's messaging relay
 * and OCI pulls call it through curl_dl, never directly, so the voidbox binary does not link
 * it. The table holds exactly the functions voidbox calls; curl.h still gives their types.
 * Calls through the table skip curl.h's compile-time checks of curl_easy_setopt's argument
 * types, so options take the types curl documents (long for numbers, as the call sites cast).
 */
#ifndef VOIDBOX_DYNLIB_CURL_DL_H
#define VOIDBOX_DYNLIB_CURL_DL_H

#include <stddef.h>

#include <curl/curl.h>

struct curl_dl {
	__typeof__(curl_easy_init) *easy_init;
	__typeof__(curl_easy_setopt) *easy_setopt;
	__typeof__(curl_easy_perform) *easy_perform;
	__typeof__(curl_easy_getinfo) *easy_getinfo;
	__typeof__(curl_easy_strerror) *easy_strerror;
	__typeof__(curl_easy_escape) *easy_escape;
	__typeof__(curl_easy_cleanup) *easy_cleanup;
	__typeof__(curl_free) *free;
	__typeof__(curl_slist_append) *slist_append;
	__typeof__(curl_slist_free_all) *slist_free_all;
};

/* Filled by the first successful curl_dl_load; all NULL until then. */
extern struct curl_dl curl_dl;

/*
 * Opens libcurl once per process. 0, after which curl_dl may be called; or -errno with err
 * saying that purpose ("pulling an OCI image") needs libcurl and which package to install.
 */
int curl_dl_load(const char *purpose, char *err, size_t errlen);

#endif
