/*
 * --mount parsing and the mount plan: modes, malformed flags, guest paths that could not
 * travel on the kernel command line, host paths that are not directories, a missing rw
 * directory created, and the virtio-fs shares and voidbox.mountN words the guest agent reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "sandbox/sandbox.h"

#define TEST_TEXT_MAX 256

static void test_parse(void)
{
	struct sandbox_mount mount;
	char err[256], text[TEST_TEXT_MAX];

	snprintf(text, sizeof(text), "/src:/work");
	CHECK_INT_EQ(sandbox_mount_parse(text, &mount, err, sizeof(err)), 0);
	CHECK_STR_EQ(mount.host_dir, "/src");
	CHECK_STR_EQ(mount.guest_dir, "/work");
	CHECK(!mount.read_only);
	snprintf(text, sizeof(text), "./data:/data:ro");
	CHECK_INT_EQ(sandbox_mount_parse(text, &mount, err, sizeof(err)), 0);
	CHECK(mount.read_only);
	CHECK_STR_EQ(mount.guest_dir, "/data");
	snprintf(text, sizeof(text), "/a:/b:rw");
	CHECK_INT_EQ(sandbox_mount_parse(text, &mount, err, sizeof(err)), 0);
	CHECK(!mount.read_only);
	static const char *const bad[] = { "/only-host", ":/guest", "/host:", "/a:/b:rx",
					   "/a:/b:ro:x" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "%s", bad[i]);
		CHECK(sandbox_mount_parse(text, &mount, err, sizeof(err)) < 0);
		CHECK(strstr(err, "--mount") != NULL);
	}
}

static void test_plan(void)
{
	char base[] = "/tmp/voidbox-mounts-XXXXXX", file[TEST_TEXT_MAX], missing[TEST_TEXT_MAX];
	char err[512], expected[1024];
	struct sandbox_config cfg = { .extra_cmdline = "quiet" };
	struct sandbox_mounts_plan *plan = NULL;
	struct stat st;

	CHECK(mkdtemp(base) != NULL);
	snprintf(file, sizeof(file), "%s/file", base);
	snprintf(missing, sizeof(missing), "%s/new/deeper", base);
	fclose(fopen(file, "w"));
	cfg.mounts[0] = (struct sandbox_mount){ .host_dir = base, .guest_dir = "/work" };
	cfg.mounts[1] = (struct sandbox_mount){ .host_dir = base, .guest_dir = "/ro",
						.read_only = true };
	cfg.mounts[2] = (struct sandbox_mount){ .host_dir = missing, .guest_dir = "/new" };
	cfg.mount_count = 3;
	CHECK_INT_EQ(sandbox_mounts_plan(&cfg, &plan, err, sizeof(err)), 0);
	if (plan) {
		CHECK_INT_EQ(plan->share_count, 3);
		CHECK_STR_EQ(plan->shares[1].tag, "voidbox1");
		CHECK(plan->shares[1].read_only && !plan->shares[0].read_only);
		snprintf(expected, sizeof(expected),
			 "quiet voidbox.mount0=voidbox0:/work:rw voidbox.mount1=voidbox1:/ro:ro "
			 "voidbox.mount2=voidbox2:/new:rw");
		CHECK_STR_EQ(plan->cmdline, expected);
		CHECK(stat(missing, &st) == 0 && S_ISDIR(st.st_mode));
	}
	sandbox_mounts_plan_free(plan);
	/* refused before a VM boots */
	cfg.mount_count = 1;
	cfg.mounts[0] = (struct sandbox_mount){ .host_dir = file, .guest_dir = "/x" };
	CHECK(sandbox_mounts_plan(&cfg, &plan, err, sizeof(err)) < 0);
	CHECK(strstr(err, "not a directory") != NULL);
	cfg.mounts[0] = (struct sandbox_mount){ .host_dir = missing, .guest_dir = "/x",
						.read_only = true };
	rmdir(missing);
	CHECK(sandbox_mounts_plan(&cfg, &plan, err, sizeof(err)) < 0);
	static const char *const guest_bad[] = { "relative", "/", "/with space", "/a:b" };

	for (size_t i = 0; i < sizeof(guest_bad) / sizeof(guest_bad[0]); i++) {
		cfg.mounts[0] = (struct sandbox_mount){ .host_dir = base, .guest_dir = guest_bad[i] };
		CHECK(sandbox_mounts_plan(&cfg, &plan, err, sizeof(err)) < 0);
	}
	cfg.mount_count = SANDBOX_MAX_MOUNTS + 1;
	CHECK(sandbox_mounts_plan(&cfg, &plan, err, sizeof(err)) < 0);
	snprintf(expected, sizeof(expected), "rm -rf %s", base);
	CHECK_INT_EQ(system(expected), 0);
}

int main(void)
{
	RUN_TEST(test_parse);
	RUN_TEST(test_plan);
	return harness_finish();
}
