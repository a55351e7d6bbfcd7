/*
 * Optional shared libraries opened on first use (dlopen) instead of at process start.
 *
 * Most voidbox commands (exec, shell, run, snapshot create, version) never touch libcurl,
 * libarchive or libmicrohttpd, yet linking them made every start map and relocate some forty
 * shared objects they pull in; libslirp (with GLib) serves only VMs with a network. So those
 * four are not linked: each has a table of function pointers for exactly the functions voidbox
 * calls (curl_dl.h, archive_dl.h, mhd_dl.h, slirp_dl.h),
 * described by a list of symbol names and offsets that this generic loader fills from one
 * dlopen of the library's soname with RTLD_NOW, checking every symbol. Each library module
 * opens its library at most once per process (pthread_once) and keeps the outcome, so every
 * caller after the first gets the same answer for the price of a branch.
 *
 * A library that is missing or lacks a symbol is not a crash but a sentence: the caller says
 * what it was doing and gets "<purpose> needs libcurl (libcurl.so.4), which cannot be loaded
 * (...); install it: apt install libcurl4". The sonames and package names are found when
 * voidbox is configured (src/dynlib/meson.build), from the very libraries it compiled
 * against.
 */
#ifndef VOIDBOX_DYNLIB_DYNLIB_H
#define VOIDBOX_DYNLIB_DYNLIB_H

#include <pthread.h>
#include <stddef.h>

/* The longest reason a library could not be opened that a library module keeps. */
#define DYNLIB_DETAIL_MAX 512

/* One function a table holds: its exported name and where its pointer sits in the table. */
struct dynlib_symbol {
	const char *name;
	size_t offset;
};

/* A library and the table of function pointers a dynlib_open fills for it. */
struct dynlib_library {
	const char *label;   /* what users call it: "libcurl" */
	const char *soname;  /* what is opened: "libcurl.so.4" */
	const char *package; /* the distribution package that ships it; "" when unknown */
	const struct dynlib_symbol *symbols;
	size_t symbol_count;
	size_t table_size; /* sizeof the table the offsets are into */
};

/* The outcome of a library's one attempt to open, kept for every later caller. */
struct dynlib_state {
	pthread_once_t once;
	int rc;
	char detail[DYNLIB_DETAIL_MAX];
};

#define DYNLIB_STATE_INIT { .once = PTHREAD_ONCE_INIT, .rc = 0, .detail = "" }

#define DYNLIB_COUNT(list) (sizeof(list) / sizeof((list)[0]))

/*
 * Defines a library module's loader: `int PREFIX_load(const char *purpose, char *err,
 * size_t errlen)` opens SONAME into TABLE (a struct of function pointers, the symbols being
 * SYMBOLS) once per process and answers as dynlib_result does. LABEL names the library for
 * users, PACKAGE the package that ships it.
 */
#define DYNLIB_MODULE(prefix, label_text, soname_text, package_text, symbol_list, table)      \
	static const struct dynlib_library prefix##_library = {                                \
		.label = (label_text),                                                         \
		.soname = (soname_text),                                                       \
		.package = (package_text),                                                     \
		.symbols = (symbol_list),                                                      \
		.symbol_count = DYNLIB_COUNT(symbol_list),                                     \
		.table_size = sizeof(table),                                                   \
	};                                                                                     \
	static struct dynlib_state prefix##_state = DYNLIB_STATE_INIT;                         \
	static void prefix##_open(void)                                                        \
	{                                                                                      \
		dynlib_open_once(&prefix##_library, &(table), &prefix##_state);                \
	}                                                                                      \
	int prefix##_load(const char *purpose, char *err, size_t errlen)                       \
	{                                                                                      \
		pthread_once(&prefix##_state.once, prefix##_open);                             \
		return dynlib_result(&prefix##_library, &prefix##_state, purpose, err, errlen); \
	}

/*
 * Opens library->soname (RTLD_NOW) and fills table with every symbol. 0, or -ENOENT when the
 * library cannot be opened or -ENOSYS when it lacks a symbol, with why in detail; the table
 * is then all zero and the library closed again. A library opened stays open for the
 * process's life: its functions are in the table.
 */
int dynlib_open(const struct dynlib_library *library, void *table, char *detail,
		size_t detail_len);

/* dynlib_open into state, for a library module's pthread_once routine. */
void dynlib_open_once(const struct dynlib_library *library, void *table,
		      struct dynlib_state *state);

/*
 * The caller's answer once state is settled: 0, or state's -errno with err saying that
 * purpose (what the caller was doing, "pulling an OCI image") needs the library, why it could
 * not be loaded and which package to install.
 */
int dynlib_result(const struct dynlib_library *library, const struct dynlib_state *state,
		  const char *purpose, char *err, size_t errlen);

#endif
