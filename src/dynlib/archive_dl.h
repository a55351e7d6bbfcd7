/*
 * libarchive, opened on first use (dynlib.h): OCI layers (src/store/oci_layer.c) and
 * snapshot export and import (src/portable/snapshot_archive.c) call it through archive_dl,
 * never directly, so the voidbox binary does not link it. The table holds exactly the
 * functions voidbox calls, named without their "archive_" prefix (archive_errno is errno_of,
 * errno being a macro); archive.h and archive_entry.h still give their types.
 */
#ifndef VOIDBOX_DYNLIB_ARCHIVE_DL_H
#define VOIDBOX_DYNLIB_ARCHIVE_DL_H

#include <stddef.h>

#include <archive.h>
#include <archive_entry.h>

struct archive_dl {
	__typeof__(archive_error_string) *error_string;
	__typeof__(archive_errno) *errno_of;
	/* reading */
	__typeof__(archive_read_new) *read_new;
	__typeof__(archive_read_support_filter_all) *read_support_filter_all;
	__typeof__(archive_read_support_filter_zstd) *read_support_filter_zstd;
	__typeof__(archive_read_support_format_tar) *read_support_format_tar;
	__typeof__(archive_read_open_filename) *read_open_filename;
	__typeof__(archive_read_open_fd) *read_open_fd;
	__typeof__(archive_read_next_header) *read_next_header;
	__typeof__(archive_read_data) *read_data;
	__typeof__(archive_read_data_block) *read_data_block;
	__typeof__(archive_read_free) *read_free;
	/* writing an archive file */
	__typeof__(archive_write_new) *write_new;
	__typeof__(archive_write_add_filter_zstd) *write_add_filter_zstd;
	__typeof__(archive_write_set_format_pax_restricted) *write_set_format_pax_restricted;
	__typeof__(archive_write_open_fd) *write_open_fd;
	__typeof__(archive_write_header) *write_header;
	__typeof__(archive_write_data) *write_data;
	__typeof__(archive_write_close) *write_close;
	__typeof__(archive_write_free) *write_free;
	/* writing entries onto a directory */
	__typeof__(archive_write_disk_new) *write_disk_new;
	__typeof__(archive_write_disk_set_options) *write_disk_set_options;
	__typeof__(archive_write_data_block) *write_data_block;
	__typeof__(archive_write_finish_entry) *write_finish_entry;
	/* entries */
	__typeof__(archive_entry_new) *entry_new;
	__typeof__(archive_entry_free) *entry_free;
	__typeof__(archive_entry_pathname) *entry_pathname;
	__typeof__(archive_entry_filetype) *entry_filetype;
	__typeof__(archive_entry_hardlink) *entry_hardlink;
	__typeof__(archive_entry_symlink) *entry_symlink;
	__typeof__(archive_entry_size) *entry_size;
	__typeof__(archive_entry_size_is_set) *entry_size_is_set;
	__typeof__(archive_entry_set_pathname) *entry_set_pathname;
	__typeof__(archive_entry_set_hardlink) *entry_set_hardlink;
	__typeof__(archive_entry_set_size) *entry_set_size;
	__typeof__(archive_entry_set_filetype) *entry_set_filetype;
	__typeof__(archive_entry_set_perm) *entry_set_perm;
	__typeof__(archive_entry_set_mtime) *entry_set_mtime;
};

/* Filled by the first successful archive_dl_load; all NULL until then. */
extern struct archive_dl archive_dl;

/*
 * Opens libarchive once per process. 0, after which archive_dl may be called; or -errno with
 * err saying that purpose ("exporting a snapshot") needs libarchive and which package to
 * install.
 */
int archive_dl_load(const char *purpose, char *err, size_t errlen);

#endif
