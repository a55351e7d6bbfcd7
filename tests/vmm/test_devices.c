/*
 * The command line, the 16550 and the i8042 without a VM: registers are driven through the
 * same bus handlers the vCPU uses, the interrupt line is a recorder, and console output goes
 * to a pipe this test reads back. Also vm_create's refusals that need no /dev/kvm.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/i8042.h"
#include "devices/serial.h"
#include "harness.h"
#include "vmm/cmdline.h"
#include "vmm/vm.h"

#define UART_THR 0
#define UART_IER 1
#define UART_IIR 2
#define UART_LCR 3
#define UART_MCR 4
#define UART_LSR 5
#define UART_MSR 6
#define UART_SCR 7

struct irq_recorder {
	bool level;
	int rising_edges;
};

static void record_irq(void *opaque, uint32_t gsi, bool asserted)
{
	struct irq_recorder *rec = opaque;

	if (asserted && !rec->level)
		rec->rising_edges++;
	rec->level = asserted;
}

static uint8_t uart_in(struct serial *s, uint64_t reg)
{
	uint8_t v = 0;

	serial_port_access(s, reg, &v, 1, false);
	return v;
}

static void uart_out(struct serial *s, uint64_t reg, uint8_t v)
{
	serial_port_access(s, reg, &v, 1, true);
}

static void test_cmdline(void)
{
	uint8_t secret[CMDLINE_SECRET_LEN];
	char out[CMDLINE_MAX];
	char hex[CMDLINE_SECRET_HEX_LEN + 1];

	for (size_t i = 0; i < sizeof(secret); i++)
		secret[i] = (uint8_t)(i * 7 + 1);
	cmdline_secret_hex(secret, hex);
	CHECK_INT_EQ(strlen(hex), 64);
	CHECK(strncmp(hex, "01080f", 6) == 0);
	int n = cmdline_build(out, sizeof(out), secret, 1700000000, "init=/sbin/agent");

	CHECK(n > 0);
	CHECK_INT_EQ((size_t)n, strlen(out));
	CHECK(strncmp(out, "console=ttyS0 ", 14) == 0);
	CHECK(strstr(out, " panic=-1 ") != NULL);
	CHECK(strstr(out, " reboot=k ") != NULL);
	CHECK(strstr(out, "voidbox.clock=1700000000") != NULL);
	char *secret_arg = strstr(out, "voidbox.secret=");

	CHECK(secret_arg && strncmp(secret_arg + 15, hex, 64) == 0 && secret_arg[79] == ' ');
	size_t len = strlen(out);

	CHECK(len > 16 && strcmp(out + len - 16, "init=/sbin/agent") == 0);
	CHECK(cmdline_build(out, sizeof(out), secret, 1, NULL) > 0);
	CHECK(out[strlen(out) - 1] != ' ');
}

static void test_cmdline_too_long(void)
{
	uint8_t secret[CMDLINE_SECRET_LEN] = { 0 };
	char out[CMDLINE_MAX * 2];
	char extra[CMDLINE_MAX];

	memset(extra, 'x', sizeof(extra) - 1);
	extra[sizeof(extra) - 1] = '\0';
	CHECK_INT_EQ(cmdline_build(out, sizeof(out), secret, 1, extra), -E2BIG);
	CHECK_INT_EQ(cmdline_build(out, 64, secret, 1, NULL), -E2BIG);
}

static void test_serial_probe_registers(void)
{
	struct irq_recorder rec = { 0 };
	struct irq_line line = { .set_level = record_irq, .opaque = &rec, .gsi = 4 };
	struct serial *s = serial_create(-1, line);

	CHECK(s != NULL);
	if (!s)
		return;
	uart_out(s, UART_SCR, 0xa5);
	CHECK_INT_EQ(uart_in(s, UART_SCR), 0xa5);
	CHECK_INT_EQ(uart_in(s, UART_LSR) & 0x60, 0x60);
	/* Loopback: MSR mirrors MCR's RTS/DTR/OUT1/OUT2, the 8250 driver's detection test. */
	uart_out(s, UART_MCR, 0x10 | 0x0a);
	CHECK_INT_EQ(uart_in(s, UART_MSR) & 0xf0, 0x90);
	uart_out(s, UART_MCR, 0x10 | 0x05);
	CHECK_INT_EQ(uart_in(s, UART_MSR) & 0xf0, 0x60);
	uart_out(s, UART_MCR, 0x08);
	/* Divisor latch does not disturb IER. */
	uart_out(s, UART_LCR, 0x80);
	uart_out(s, UART_THR, 0x01);
	uart_out(s, UART_IER, 0x00);
	uart_out(s, UART_LCR, 0x03);
	CHECK_INT_EQ(uart_in(s, UART_IER), 0);
	CHECK_INT_EQ(uart_in(s, UART_IIR) & 0x0f, 0x01);
	CHECK_INT_EQ(rec.rising_edges, 0);
	serial_destroy(s);
}

static void test_serial_thre_interrupt(void)
{
	struct irq_recorder rec = { 0 };
	struct irq_line line = { .set_level = record_irq, .opaque = &rec, .gsi = 4 };
	struct serial *s = serial_create(-1, line);

	if (!s)
		return;
	uart_out(s, UART_IER, 0x02); /* enabling THRI with an empty THR interrupts at once */
	CHECK(rec.level);
	CHECK_INT_EQ(rec.rising_edges, 1);
	CHECK_INT_EQ(uart_in(s, UART_IIR) & 0x0f, 0x02); /* reading IIR clears it */
	CHECK(!rec.level);
	CHECK_INT_EQ(uart_in(s, UART_IIR) & 0x0f, 0x01);
	uart_out(s, UART_THR, 'x'); /* transmitted at once: THRE again */
	CHECK(rec.level);
	CHECK_INT_EQ(rec.rising_edges, 2);
	uart_out(s, UART_IER, 0x00);
	CHECK(!rec.level);
	serial_destroy(s);
}

static void test_serial_output_and_panic(void)
{
	int fds[2];
	char buf[256] = { 0 };
	const char *text = "hello\r\nKernel panic - not syncing: test\n";

	CHECK_INT_EQ(pipe(fds), 0);
	struct serial *s = serial_create(fds[1], (struct irq_line){ 0 });

	if (!s)
		return;
	for (const char *p = "partial"; *p; p++)
		uart_out(s, UART_THR, (uint8_t)*p);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	CHECK(read(fds[0], buf, sizeof(buf)) < 0); /* a line is only written when complete */
	serial_flush(s);
	CHECK_INT_EQ(read(fds[0], buf, sizeof(buf)), 7);
	CHECK(!serial_saw_panic(s));
	for (const char *p = text; *p; p++)
		uart_out(s, UART_THR, (uint8_t)*p);
	memset(buf, 0, sizeof(buf));
	CHECK_INT_EQ(read(fds[0], buf, sizeof(buf) - 1), (ssize_t)strlen(text));
	CHECK_STR_EQ(buf, text);
	CHECK(serial_saw_panic(s));
	CHECK(serial_first_output_ns(s) > 0);
	/* Loopback mode swallows output instead of printing it. */
	uart_out(s, UART_MCR, 0x10);
	uart_out(s, UART_THR, 'z');
	uart_out(s, UART_THR, '\n');
	CHECK(read(fds[0], buf, sizeof(buf)) < 0);
	serial_destroy(s);
	close(fds[0]);
	close(fds[1]);
}

static void test_serial_log_cap(void)
{
	char path[] = "/tmp/voidbox-serial-XXXXXX";
	int fd = mkstemp(path);
	struct stat st;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	struct serial *s = serial_create(fd, (struct irq_line){ 0 });

	/* 20 MiB of 64-byte lines: the log stops at 16 MiB plus one note. */
	for (int line = 0; line < 20 * 16384; line++) {
		for (int i = 0; i < 63; i++)
			uart_out(s, UART_THR, 'a');
		uart_out(s, UART_THR, '\n');
	}
	serial_destroy(s);
	CHECK_INT_EQ(fstat(fd, &st), 0);
	CHECK(st.st_size > 16 * 1024 * 1024 && st.st_size < 16 * 1024 * 1024 + 128);
	close(fd);
	unlink(path);
}

static void count_reset(void *opaque)
{
	(*(int *)opaque)++;
}

static void test_i8042(void)
{
	int resets = 0;
	struct i8042 dev = { .on_reset = count_reset, .opaque = &resets };
	uint8_t v = 0xaa;

	i8042_command_access(&dev, 0, &v, 1, false);
	CHECK_INT_EQ(v, 0); /* both buffers empty */
	v = 0xaa;
	i8042_data_access(&dev, 0, &v, 1, false);
	CHECK_INT_EQ(v, 0);
	v = 0xd1;
	i8042_command_access(&dev, 0, &v, 1, true);
	CHECK_INT_EQ(resets, 0);
	v = 0xfe;
	i8042_command_access(&dev, 0, &v, 1, true);
	CHECK_INT_EQ(resets, 1);
}

static void test_vm_create_refusals(void)
{
	struct vm *vm = NULL;
	char err[256] = "";
	struct vm_config cfg = { .kernel_path = "/nonexistent/vmlinuz", .memory_mb = 16 };

	CHECK_INT_EQ(vm_create(&cfg, &vm, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "at least 64 MiB") != NULL);
	CHECK(vm == NULL);
	cfg.memory_mb = 128;
	cfg.vcpus = VM_MAX_VCPUS + 1;
	CHECK_INT_EQ(vm_create(&cfg, &vm, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "vCPUs") != NULL);
	cfg.vcpus = 1;
	cfg.kernel_path = NULL;
	CHECK_INT_EQ(vm_create(&cfg, &vm, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "kernel") != NULL);
	CHECK_STR_EQ(vm_exit_reason_name(VM_EXIT_GUEST_POWEROFF), "guest poweroff");
	CHECK_STR_EQ(vm_exit_reason_name((enum vm_exit_reason)99), "unknown");
}

int main(void)
{
	RUN_TEST(test_cmdline);
	RUN_TEST(test_cmdline_too_long);
	RUN_TEST(test_serial_probe_registers);
	RUN_TEST(test_serial_thre_interrupt);
	RUN_TEST(test_serial_output_and_panic);
	RUN_TEST(test_serial_log_cap);
	RUN_TEST(test_i8042);
	RUN_TEST(test_vm_create_refusals);
	return harness_finish();
}
