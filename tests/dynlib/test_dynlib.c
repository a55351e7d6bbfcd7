/*
 * The optional-library loader (src/dynlib): a missing library and a library missing a
 * function each give the sentence that names the purpose, the soname and the package to
 * install, with the table left empty; the real libcurl, libarchive, libmicrohttpd and libslirp
 * load with every function of their tables, only when asked (this program does not link them,
 * so they are not in the process before), and once however many threads ask at the same time. The
 * tests of the real libraries run in this order, as each checks what is loaded before it.
 * Through the real CLI (the built voidbox, passed as the argument), a library the loader finds
 * broken makes the command that needs it fail with that sentence and a status, not a crash.
 */
#include "dynlib/archive_dl.h"
#include "dynlib/curl_dl.h"
#include "dynlib/dynlib.h"
#include "dynlib/mhd_dl.h"
#include "dynlib/slirp_dl.h"
#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_ERR_MAX 1024
#define TEST_THREADS 8
#define TEST_PURPOSE "voidbox image pull"
#define TEST_MISSING_SONAME "libvoidbox-missing.so.0"
#define TEST_MISSING_PACKAGE "voidbox-missing-package"
#define TEST_PRESENT_SONAME "libc.so.6"
#define TEST_MISSING_FUNCTION "voidbox_no_such_function"
#define TEST_BROKEN_LIBRARY "not a shared object\n"
#define TEST_CLI_EXIT_FAILURE 1
#define TEST_FILE_MODE 0600

/* A table shaped like the real ones: two function pointers. */
struct test_table {
	void (*first)(void);
	void (*second)(void);
};

static const struct dynlib_symbol test_symbols[] = {
	{ "getpid", offsetof(struct test_table, first) },
	{ TEST_MISSING_FUNCTION, offsetof(struct test_table, second) },
};

static struct dynlib_library test_library(const char *soname, const char *package)
{
	return (struct dynlib_library){
		.label = "libvoidbox-test",
		.soname = soname,
		.package = package,
		.symbols = test_symbols,
		.symbol_count = DYNLIB_COUNT(test_symbols),
		.table_size = sizeof(struct test_table),
	};
}

/* Whether every slot of a table of n_bytes holding only function pointers is filled. */
static bool test_table_full(const void *table, size_t n_bytes)
{
	const unsigned char *bytes = table;

	for (size_t off = 0; off < n_bytes; off += sizeof(void (*)(void))) {
		void (*fn)(void);

		memcpy(&fn, bytes + off, sizeof(fn));
		if (!fn)
			return false;
	}
	return true;
}

static bool test_in_process(const char *soname)
{
	void *handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);

	if (handle)
		dlclose(handle);
	return handle != NULL;
}

/* name's address in the already loaded library soname (opened RTLD_LOCAL, so not global). */
static void *test_symbol(const char *soname, const char *name)
{
	void *handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
	void *address = handle ? dlsym(handle, name) : NULL;

	if (handle)
		dlclose(handle);
	return address;
}

static void test_missing_library_names_package(void)
{
	struct dynlib_library library = test_library(TEST_MISSING_SONAME, TEST_MISSING_PACKAGE);
	struct dynlib_state state = DYNLIB_STATE_INIT;
	struct test_table table = { .first = NULL, .second = NULL };
	char err[TEST_ERR_MAX] = "";

	dynlib_open_once(&library, &table, &state);
	CHECK_INT_EQ(dynlib_result(&library, &state, TEST_PURPOSE, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, TEST_PURPOSE " needs libvoidbox-test (" TEST_MISSING_SONAME ")") == err);
	CHECK(strstr(err, "apt install " TEST_MISSING_PACKAGE) != NULL);
	CHECK(!table.first && !table.second);
	fprintf(stderr, "  %s\n", err);
}

static void test_unknown_package_names_soname(void)
{
	struct dynlib_library library = test_library(TEST_MISSING_SONAME, "");
	struct dynlib_state state = DYNLIB_STATE_INIT;
	struct test_table table;
	char err[TEST_ERR_MAX] = "";

	dynlib_open_once(&library, &table, &state);
	CHECK_INT_EQ(dynlib_result(&library, &state, TEST_PURPOSE, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "install the package that provides " TEST_MISSING_SONAME) != NULL);
	CHECK(strstr(err, "apt install") == NULL);
}

static void test_missing_function_names_it(void)
{
	struct dynlib_library library = test_library(TEST_PRESENT_SONAME, TEST_MISSING_PACKAGE);
	struct test_table table;
	char detail[DYNLIB_DETAIL_MAX] = "";

	CHECK_INT_EQ(dynlib_open(&library, &table, detail, sizeof(detail)), -ENOSYS);
	CHECK(strstr(detail, TEST_MISSING_FUNCTION) != NULL);
	CHECK(strstr(detail, TEST_PRESENT_SONAME) != NULL);
	CHECK(!table.first && !table.second); /* getpid was found, and cleared again */
}

static void test_present_library_fills_table(void)
{
	static const struct dynlib_symbol one[] = { { "getpid", 0 } };
	struct dynlib_library library = test_library(TEST_PRESENT_SONAME, "");
	void (*fn)(void) = NULL;
	char detail[DYNLIB_DETAIL_MAX] = "unchanged";

	library.symbols = one;
	library.symbol_count = DYNLIB_COUNT(one);
	library.table_size = sizeof(fn);
	CHECK_INT_EQ(dynlib_open(&library, &fn, detail, sizeof(detail)), 0);
	CHECK(fn == (void (*)(void))dlsym(RTLD_DEFAULT, "getpid"));
	CHECK_STR_EQ(detail, "");
}

static void test_libraries_load_on_first_use(void)
{
	char err[TEST_ERR_MAX] = "";

	CHECK(!test_in_process(VOIDBOX_CURL_SONAME));
	CHECK(!test_in_process(VOIDBOX_ARCHIVE_SONAME));
	CHECK(!test_in_process(VOIDBOX_MHD_SONAME));
	CHECK(curl_dl.easy_init == NULL);
	CHECK_INT_EQ(curl_dl_load(TEST_PURPOSE, err, sizeof(err)), 0);
	CHECK_INT_EQ(archive_dl_load(TEST_PURPOSE, err, sizeof(err)), 0);
	CHECK_INT_EQ(curl_dl_load(TEST_PURPOSE, err, sizeof(err)), 0); /* again: the same answer */
	CHECK_STR_EQ(err, "");
	CHECK(test_in_process(VOIDBOX_CURL_SONAME));
	CHECK(test_in_process(VOIDBOX_ARCHIVE_SONAME));
	CHECK(!test_in_process(VOIDBOX_MHD_SONAME)); /* one library does not bring the others */
	CHECK(test_table_full(&curl_dl, sizeof(curl_dl)));
	CHECK(test_table_full(&archive_dl, sizeof(archive_dl)));
	CHECK(curl_dl.easy_init == (__typeof__(curl_dl.easy_init))test_symbol(VOIDBOX_CURL_SONAME,
										  "curl_easy_init"));
	/* a call through the table reaches the library */
	CHECK_STR_EQ(curl_dl.easy_strerror(CURLE_OK), "No error");
}

/* libslirp: not in the process until asked; then every function, and a call reaches it. */
static void test_slirp_loads_on_first_use(void)
{
	char err[TEST_ERR_MAX] = "";

	CHECK(!test_in_process(VOIDBOX_SLIRP_SONAME));
	CHECK(slirp_dl.new_stack == NULL);
	CHECK_INT_EQ(slirp_dl_load(TEST_PURPOSE, err, sizeof(err)), 0);
	CHECK_STR_EQ(err, "");
	CHECK(test_in_process(VOIDBOX_SLIRP_SONAME));
	CHECK(test_table_full(&slirp_dl, sizeof(slirp_dl)));
	CHECK(slirp_dl.new_stack ==
	      (__typeof__(slirp_dl.new_stack))test_symbol(VOIDBOX_SLIRP_SONAME, "slirp_new"));
	CHECK(slirp_dl.state_version() > 0);
}

static void *test_load_thread(void *opaque)
{
	char err[TEST_ERR_MAX];
	int *rc = opaque;

	*rc = mhd_dl_load(TEST_PURPOSE, err, sizeof(err));
	return NULL;
}

/* The first load of libmicrohttpd, asked for by several threads at once. */
static void test_concurrent_first_loads_agree(void)
{
	pthread_t threads[TEST_THREADS];
	int rcs[TEST_THREADS];

	CHECK(!test_in_process(VOIDBOX_MHD_SONAME));
	for (size_t i = 0; i < TEST_THREADS; i++) {
		rcs[i] = -1;
		if (pthread_create(&threads[i], NULL, test_load_thread, &rcs[i]) != 0)
			harness_fail_setup("pthread_create");
	}
	for (size_t i = 0; i < TEST_THREADS; i++) {
		pthread_join(threads[i], NULL);
		CHECK_INT_EQ(rcs[i], 0);
	}
	CHECK(test_in_process(VOIDBOX_MHD_SONAME));
	CHECK(test_table_full(&mhd_dl, sizeof(mhd_dl)));
}

static const char *test_voidbox;

/* Runs voidbox ARGS with LD_LIBRARY_PATH=lib_dir; its stderr into out. The wait status. */
static int test_run_cli(const char *lib_dir, char *const args[], char *out, size_t out_len)
{
	int pipe_fds[2], status = -1;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	if (pipe2(pipe_fds, O_CLOEXEC) < 0)
		harness_fail_setup("pipe2");
	pid = fork();
	if (pid < 0)
		harness_fail_setup("fork");
	if (pid == 0) {
		dup2(pipe_fds[1], STDERR_FILENO);
		setenv("LD_LIBRARY_PATH", lib_dir, 1);
		setenv("VOIDBOX_HOME", lib_dir, 1);
		execv(test_voidbox, args);
		_exit(127);
	}
	close(pipe_fds[1]);
	while (len + 1 < out_len && (n = read(pipe_fds[0], out + len, out_len - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(pipe_fds[0]);
	waitpid(pid, &status, 0);
	return status;
}

static void test_cli_with_broken_library_fails_cleanly(void)
{
	char dir[] = "/tmp/voidbox-dynlib-XXXXXX", lib[PATH_MAX], archive[PATH_MAX];
	char out[TEST_ERR_MAX];
	char *args[] = { "voidbox", "snapshot", "import", archive, NULL };
	int fd, status;

	if (!mkdtemp(dir))
		harness_fail_setup("mkdtemp");
	snprintf(lib, sizeof(lib), "%s/%s", dir, VOIDBOX_ARCHIVE_SONAME);
	snprintf(archive, sizeof(archive), "%s/none.tar.zst", dir);
	fd = open(lib, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, TEST_FILE_MODE);
	if (fd < 0 || write(fd, TEST_BROKEN_LIBRARY, strlen(TEST_BROKEN_LIBRARY)) < 0)
		harness_fail_setup("cannot write the broken library");
	close(fd);
	status = test_run_cli(dir, args, out, sizeof(out));
	fprintf(stderr, "  %s", out);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == TEST_CLI_EXIT_FAILURE);
	CHECK(strstr(out, "importing a snapshot needs libarchive (" VOIDBOX_ARCHIVE_SONAME
			  "), which cannot be loaded") != NULL);
	CHECK(strstr(out, lib) != NULL); /* the loader's own reason names the file it tried */
	CHECK(strstr(out, "install") != NULL);
	unlink(lib);
	CHECK_INT_EQ(rmdir(dir), 0); /* the command left nothing behind */
}

int main(int argc, char **argv)
{
	harness_select(argc, argv);
	if (argc < 2)
		harness_fail_setup("usage: test_dynlib VOIDBOX");
	test_voidbox = argv[1];
	RUN_TEST(test_missing_library_names_package);
	RUN_TEST(test_unknown_package_names_soname);
	RUN_TEST(test_missing_function_names_it);
	RUN_TEST(test_present_library_fills_table);
	RUN_TEST(test_cli_with_broken_library_fails_cleanly);
	RUN_TEST(test_libraries_load_on_first_use);
	RUN_TEST(test_concurrent_first_loads_agree);
	RUN_TEST(test_slirp_loads_on_first_use);
	return harness_finish();
}
