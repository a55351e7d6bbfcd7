/*
 * The guest kernel command line: fixed arguments that make a PCI-less micro-VM boot fast and
 * end cleanly, the per-boot session secret and clock, then the caller's extra arguments last
 * so they can override anything before them.
 */
#ifndef VOIDBOX_VMM_CMDLINE_H
#define VOIDBOX_VMM_CMDLINE_H

#include <stddef.h>
#include <stdint.h>

#define CMDLINE_SECRET_LEN 32
#define CMDLINE_SECRET_HEX_LEN (2 * CMDLINE_SECRET_LEN)
#define CMDLINE_MAX 2048 /* x86 COMMAND_LINE_SIZE, including the NUL */

/*
 * console=ttyS0: the serial log; reboot=k: reset through the i8042 (the FADT also offers an
 * ACPI reset register); panic=-1: reboot at once on panic, which ends the VM; pci=off: there
 * is no PCI; quiet: only warnings reach the (slow, trapping) serial port; tsc=reliable and
 * no_timer_check: skip watchdog and timer checks that are noise under virtualization;
 * initcall_blacklist: i8042_init (the i8042 here only resets, and probing it costs seconds),
 * crypto_kdf108_init and blake2s_mod_init (they only run self-tests), init_blk_tracer (a
 * tracing facility a sandbox does not use); each costs tenths of a second when nested.
 */
#define CMDLINE_BASE                                                                        \
	"console=ttyS0 reboot=k panic=-1 pci=off quiet i8042.noaux i8042.nokbd i8042.nopnp " \
	"tsc=reliable no_timer_check cryptomgr.notests initcall_blacklist=i8042_init,crypto_kdf108_init,blake2s_mod_init,init_blk_tracer"

/* Returns the length written, or -E2BIG when it does not fit in outlen or CMDLINE_MAX. */
int cmdline_build(char *out, size_t outlen, const uint8_t secret[CMDLINE_SECRET_LEN],
		  uint64_t clock_secs, const char *extra);
/* out must hold CMDLINE_SECRET_HEX_LEN + 1 bytes. */
void cmdline_secret_hex(const uint8_t secret[CMDLINE_SECRET_LEN], char *out);

#endif
