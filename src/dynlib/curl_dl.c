/*
 * The libcurl table (see curl_dl.h): one entry per function, its name built from the member
 * name, so the list cannot drift from the struct.
 */
#include "dynlib/curl_dl.h"

#include "dynlib/dynlib.h"

#define CURL_DL_SYMBOL(member) { "curl_" #member, offsetof(struct curl_dl, member) }

struct curl_dl curl_dl;

static const struct dynlib_symbol curl_dl_symbols[] = {
	CURL_DL_SYMBOL(easy_init),     CURL_DL_SYMBOL(easy_setopt),
	CURL_DL_SYMBOL(easy_perform),  CURL_DL_SYMBOL(easy_getinfo),
	CURL_DL_SYMBOL(easy_strerror), CURL_DL_SYMBOL(easy_escape),
	CURL_DL_SYMBOL(easy_cleanup),  CURL_DL_SYMBOL(free),
	CURL_DL_SYMBOL(slist_append),  CURL_DL_SYMBOL(slist_free_all),
};

DYNLIB_MODULE(curl_dl, "libcurl", VOIDBOX_CURL_SONAME, VOIDBOX_CURL_PACKAGE, curl_dl_symbols,
	      curl_dl)
