/*
 * The generic loader behind the library tables (see dynlib.h). Symbols are looked up by
 * name and their addresses stored at the offsets the library module gave, so each module is
 * a list of names rather than code; a function pointer has the size and representation of
 * the void * dlsym returns (POSIX requires the conversion to work), checked at compile time.
 */
#include "dynlib/dynlib.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(void *) == sizeof(void (*)(void)),
	       "dynlib stores dlsym's void * into function pointer slots");

int dynlib_open(const struct dynlib_library *library, void *table, char *detail,
		size_t detail_len)
{
	unsigned char *slots = table;
	const char *why;
	void *handle;

	memset(table, 0, library->table_size);
	handle = dlopen(library->soname, RTLD_NOW | RTLD_LOCAL);
	if (!handle) {
		why = dlerror();
		snprintf(detail, detail_len, "%s", why ? why : "dlopen failed");
		return -ENOENT;
	}
	for (size_t i = 0; i < library->symbol_count; i++) {
		const struct dynlib_symbol *symbol = &library->symbols[i];
		void *address;

		dlerror(); /* a symbol's address may be NULL; only dlerror tells a failure */
		address = dlsym(handle, symbol->name);
		why = dlerror();
		if (why || !address || symbol->offset + sizeof(address) > library->table_size) {
			snprintf(detail, detail_len, "%s has no function %s, so it is older than "
				 "the version voidbox was built with", library->soname,
				 symbol->name);
			memset(table, 0, library->table_size);
			dlclose(handle);
			return -ENOSYS;
		}
		memcpy(slots + symbol->offset, &address, sizeof(address));
	}
	detail[0] = '\0';
	return 0;
}

void dynlib_open_once(const struct dynlib_library *library, void *table,
		      struct dynlib_state *state)
{
	state->rc = dynlib_open(library, table, state->detail, sizeof(state->detail));
}

int dynlib_result(const struct dynlib_library *library, const struct dynlib_state *state,
		  const char *purpose, char *err, size_t errlen)
{
	if (state->rc == 0)
		return 0;
	if (library->package[0])
		snprintf(err, errlen, "%s needs %s (%s), which cannot be loaded (%s); install "
			 "it: apt install %s", purpose, library->label, library->soname,
			 state->detail, library->package);
	else
		snprintf(err, errlen, "%s needs %s (%s), which cannot be loaded (%s); install "
			 "the package that provides %s", purpose, library->label,
			 library->soname, state->detail, library->soname);
	return state->rc;
}
