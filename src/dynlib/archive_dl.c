/*
 * The libarchive table (see archive_dl.h): one entry per function, its name built from the
 * member name, so the list cannot drift from the struct.
 */
#include "dynlib/archive_dl.h"

#include "dynlib/dynlib.h"

#define ARCHIVE_DL_SYMBOL(member) { "archive_" #member, offsetof(struct archive_dl, member) }

struct archive_dl archive_dl;

static const struct dynlib_symbol archive_dl_symbols[] = {
	ARCHIVE_DL_SYMBOL(error_string),
	{ "archive_errno", offsetof(struct archive_dl, errno_of) }, /* errno is a macro */
	ARCHIVE_DL_SYMBOL(read_new),
	ARCHIVE_DL_SYMBOL(read_support_filter_all),
	ARCHIVE_DL_SYMBOL(read_support_filter_zstd),
	ARCHIVE_DL_SYMBOL(read_support_format_tar),
	ARCHIVE_DL_SYMBOL(read_open_filename),
	ARCHIVE_DL_SYMBOL(read_open_fd),
	ARCHIVE_DL_SYMBOL(read_next_header),
	ARCHIVE_DL_SYMBOL(read_data),
	ARCHIVE_DL_SYMBOL(read_data_block),
	ARCHIVE_DL_SYMBOL(read_free),
	ARCHIVE_DL_SYMBOL(write_new),
	ARCHIVE_DL_SYMBOL(write_add_filter_zstd),
	ARCHIVE_DL_SYMBOL(write_set_format_pax_restricted),
	ARCHIVE_DL_SYMBOL(write_open_fd),
	ARCHIVE_DL_SYMBOL(write_header),
	ARCHIVE_DL_SYMBOL(write_data),
	ARCHIVE_DL_SYMBOL(write_close),
	ARCHIVE_DL_SYMBOL(write_free),
	ARCHIVE_DL_SYMBOL(write_disk_new),
	ARCHIVE_DL_SYMBOL(write_disk_set_options),
	ARCHIVE_DL_SYMBOL(write_data_block),
	ARCHIVE_DL_SYMBOL(write_finish_entry),
	ARCHIVE_DL_SYMBOL(entry_new),
	ARCHIVE_DL_SYMBOL(entry_free),
	ARCHIVE_DL_SYMBOL(entry_pathname),
	ARCHIVE_DL_SYMBOL(entry_filetype),
	ARCHIVE_DL_SYMBOL(entry_hardlink),
	ARCHIVE_DL_SYMBOL(entry_symlink),
	ARCHIVE_DL_SYMBOL(entry_size),
	ARCHIVE_DL_SYMBOL(entry_size_is_set),
	ARCHIVE_DL_SYMBOL(entry_set_pathname),
	ARCHIVE_DL_SYMBOL(entry_set_hardlink),
	ARCHIVE_DL_SYMBOL(entry_set_size),
	ARCHIVE_DL_SYMBOL(entry_set_filetype),
	ARCHIVE_DL_SYMBOL(entry_set_perm),
	ARCHIVE_DL_SYMBOL(entry_set_mtime),
};

DYNLIB_MODULE(archive_dl, "libarchive", VOIDBOX_ARCHIVE_SONAME, VOIDBOX_ARCHIVE_PACKAGE,
	      archive_dl_symbols, archive_dl)
