/*
 * What the built programs load at start: the voidbox command and voidbox-vmm must not list
 * libcurl, libarchive, libmicrohttpd or libslirp (nor GLib, which only libslirp brought) among
 * their DT_NEEDED libraries (src/dynlib opens them on first use), while a control program that links libcurl must list it, so a reader that
 * found nothing cannot pass. The dynamic section is read from the ELF file itself.
 *
 * usage: test_needed CONTROL PROGRAM...
 *   CONTROL links libcurl (VOIDBOX_CURL_SONAME); every PROGRAM links none of them.
 */
#include "harness.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_NEEDED_MAX 128
#define TEST_LIBC_SONAME "libc.so.6"

/* Every library name that is one of them, whatever soname or flavour it has. */
static const char *const test_forbidden_prefixes[] = { "libcurl", "libarchive", "libmicrohttpd",
						       "libslirp", "libglib" };
#define TEST_FORBIDDEN_COUNT (sizeof(test_forbidden_prefixes) / sizeof(test_forbidden_prefixes[0]))

struct test_needed {
	const char *names[TEST_NEEDED_MAX];
	size_t count;
};

static bool test_within(size_t size, uint64_t offset, uint64_t len)
{
	return offset <= size && len <= size - offset;
}

/* The DT_NEEDED names of the ELF64 image, pointing into it. False if it is malformed. */
static bool test_read_needed(const unsigned char *image, size_t size, struct test_needed *out)
{
	const Elf64_Ehdr *eh = (const void *)image;
	const Elf64_Shdr *sections;

	out->count = 0;
	if (size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
	    !test_within(size, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
		return false;
	sections = (const void *)(image + eh->e_shoff);
	for (size_t i = 0; i < eh->e_shnum; i++) {
		const Elf64_Shdr *dynamic = &sections[i], *strtab;
		const Elf64_Dyn *entries;

		if (dynamic->sh_type != SHT_DYNAMIC)
			continue;
		if (dynamic->sh_link >= eh->e_shnum ||
		    !test_within(size, dynamic->sh_offset, dynamic->sh_size))
			return false;
		strtab = &sections[dynamic->sh_link];
		if (!test_within(size, strtab->sh_offset, strtab->sh_size) || strtab->sh_size == 0 ||
		    image[strtab->sh_offset + strtab->sh_size - 1] != '\0')
			return false;
		entries = (const void *)(image + dynamic->sh_offset);
		for (size_t j = 0; j < dynamic->sh_size / sizeof(Elf64_Dyn); j++) {
			if (entries[j].d_tag == DT_NULL)
				break;
			if (entries[j].d_tag != DT_NEEDED)
				continue;
			if (entries[j].d_un.d_val >= strtab->sh_size || out->count == TEST_NEEDED_MAX)
				return false;
			out->names[out->count++] =
				(const char *)image + strtab->sh_offset + entries[j].d_un.d_val;
		}
		return true;
	}
	return false; /* no dynamic section: not a dynamically linked program */
}

static bool test_lists(const struct test_needed *needed, const char *name)
{
	for (size_t i = 0; i < needed->count; i++)
		if (strcmp(needed->names[i], name) == 0)
			return true;
	return false;
}

static bool test_lists_forbidden(const struct test_needed *needed)
{
	bool found = false;

	for (size_t i = 0; i < needed->count; i++)
		for (size_t j = 0; j < TEST_FORBIDDEN_COUNT; j++)
			if (strncmp(needed->names[i], test_forbidden_prefixes[j],
				    strlen(test_forbidden_prefixes[j])) == 0) {
				fprintf(stderr, "  NEEDED %s\n", needed->names[i]);
				found = true;
			}
	return found;
}

/* Checks path's NEEDED list: libc always, libcurl exactly when control. */
static void test_program(const char *path, bool control)
{
	struct test_needed needed;
	struct stat st;
	void *image;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	fprintf(stderr, "  %s %s\n", control ? "control" : "program", path);
	if (fd < 0 || fstat(fd, &st) < 0)
		harness_fail_setup("cannot open a program to read");
	image = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (image == MAP_FAILED)
		harness_fail_setup("cannot map a program to read");
	CHECK(test_read_needed(image, (size_t)st.st_size, &needed));
	CHECK(test_lists(&needed, TEST_LIBC_SONAME));
	if (control) {
		CHECK(test_lists(&needed, VOIDBOX_CURL_SONAME));
	} else {
		CHECK(!test_lists_forbidden(&needed));
		CHECK(!test_lists(&needed, VOIDBOX_CURL_SONAME));
		CHECK(!test_lists(&needed, VOIDBOX_ARCHIVE_SONAME));
		CHECK(!test_lists(&needed, VOIDBOX_MHD_SONAME));
		CHECK(!test_lists(&needed, VOIDBOX_SLIRP_SONAME));
	}
	munmap(image, (size_t)st.st_size);
}

static int test_argc;
static char **test_argv;

static void test_programs_do_not_need_optional_libraries(void)
{
	for (int i = 2; i < test_argc; i++)
		test_program(test_argv[i], false);
}

static void test_control_needs_libcurl(void)
{
	test_program(test_argv[1], true);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		harness_fail_setup("usage: test_needed CONTROL PROGRAM...");
	test_argc = argc;
	test_argv = argv;
	harness_select(argc, argv);
	RUN_TEST(test_control_needs_libcurl);
	RUN_TEST(test_programs_do_not_need_optional_libraries);
	return harness_finish();
}
