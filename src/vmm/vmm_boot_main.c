/*
 * voidbox-vmm-boot: boots a kernel and initramfs on the VMM and streams the guest console,
 * for testing the VMM alone (the voidbox CLI uses vm.h the same way). It prints the exit
 * reason and timings on stderr, and exits 0 only when the guest powered off.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "vmm/kvm.h"
#include "vmm/vmlinux.h"
#include "vmm/vm.h"

#define DEFAULT_TIMEOUT_S 120
#define MSEC_PER_SEC 1000
#define NSEC_PER_MSEC 1000000L
#define ERR_LEN 512
#define EXIT_USAGE 2
#define EXIT_GUEST_FAILED 3

static void usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox-vmm-boot -k KERNEL [-i INITRAMFS] [-m MB] [-c VCPUS] [-a ARGS]\n"
		"                        [-l SERIAL_LOG] [-t TIMEOUT_S] [-v VSOCK_SOCKET]\n"
		"                        [-x VMLINUX_CACHE_DIR]\n"
		"       voidbox-vmm-boot --probe\n"
		"       voidbox-vmm-boot --extract-vmlinux BZIMAGE OUT\n"
		"Boots the kernel (bzImage or ELF vmlinux) on voidbox's VMM; the console goes to\n"
		"stdout unless -l. --extract-vmlinux writes the uncompressed vmlinux of an XZ\n"
		"bzImage, which boots without decompressing in the guest.\n"
		"Exit status: 0 guest powered off, 1 setup error, 2 usage, 3 other guest exit.\n");
}

static long elapsed_ms(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - start->tv_sec) * MSEC_PER_SEC +
	       (now.tv_nsec - start->tv_nsec) / NSEC_PER_MSEC;
}

static int run_probe(void)
{
	char why[ERR_LEN];
	bool usable = kvm_probe_usable(why, sizeof(why));

	printf("%s: %s\n", usable ? "usable" : "unusable", why);
	return usable ? 0 : 1;
}

static int run_extract(int argc, char **argv)
{
	char err[ERR_LEN];

	if (argc != 4) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (vmlinux_extract_file(argv[2], argv[3], err, sizeof(err)) < 0) {
		fprintf(stderr, "voidbox-vmm-boot: %s\n", err);
		return 1;
	}
	return 0;
}

static int boot(const struct vm_config *cfg, int timeout_s)
{
	char err[ERR_LEN];
	struct timespec start;
	struct vm *vm = NULL;
	enum vm_exit_reason reason = VM_EXIT_NONE;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &start);
	rc = vm_create(cfg, &vm, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "voidbox-vmm-boot: %s\n", err);
		return 1;
	}
	long create_ms = elapsed_ms(&start);

	if (vm_start(vm) < 0) {
		vm_destroy(vm);
		return 1;
	}
	if (vm_wait(vm, timeout_s * MSEC_PER_SEC, &reason) == -ETIMEDOUT) {
		fprintf(stderr, "voidbox-vmm-boot: no guest exit within %d s, stopping\n",
			timeout_s);
		vm_request_stop(vm);
		vm_wait(vm, -1, &reason);
	}
	long first_output = vm_first_output_ms(vm);

	vm_destroy(vm);
	fprintf(stderr, "voidbox-vmm-boot: exit=%s create_ms=%ld first_console_ms=%ld "
		"total_ms=%ld\n", vm_exit_reason_name(reason), create_ms, first_output,
		elapsed_ms(&start));
	return reason == VM_EXIT_GUEST_POWEROFF ? 0 : EXIT_GUEST_FAILED;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "probe", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct vm_config cfg = { .serial_to_stdout = true };
	int timeout_s = DEFAULT_TIMEOUT_S;
	int opt;

	log_set_level_name(getenv(LOG_LEVEL_ENV));
	if (argc > 1 && strcmp(argv[1], "--extract-vmlinux") == 0)
		return run_extract(argc, argv);
	while ((opt = getopt_long(argc, argv, "k:i:m:c:a:l:t:v:x:h", options, NULL)) != -1) {
		switch (opt) {
		case 'k': cfg.kernel_path = optarg; break;
		case 'i': cfg.initramfs_path = optarg; break;
		case 'm': cfg.memory_mb = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'c': cfg.vcpus = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'a': cfg.cmdline = optarg; break;
		case 'l':
			cfg.serial_log_path = optarg;
			cfg.serial_to_stdout = false;
			break;
		case 't': timeout_s = atoi(optarg); break;
		case 'v': cfg.vsock_socket_path = optarg; break;
		case 'x': cfg.vmlinux_cache_dir = optarg; break;
		case 'p': return run_probe();
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (!cfg.kernel_path || optind != argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	return boot(&cfg, timeout_s);
}
