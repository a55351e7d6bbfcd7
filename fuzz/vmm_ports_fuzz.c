/*
 * Fuzzes what a guest (or a user's file) feeds the VMM's own parsers: the input is a sequence
 * of two-byte port accesses to the 16550 and the i8042 (op byte: bits 0-2 register, bit 3
 * write, bit 4 i8042 instead of serial; then the value), and the whole input is also offered
 * to bzimage_parse. The serial's invariants are checked after every access: THR is always
 * empty, and the interrupt line is up exactly when IER.THRI is set with THRE pending.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "devices/i8042.h"
#include "devices/serial.h"
#include "vmm/boot.h"

#define OP_REGISTER_MASK 0x07
#define OP_WRITE 0x08
#define OP_I8042 0x10
#define UART_LSR 5
#define UART_LSR_EMPTY 0x60
#define ERR_LEN 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct irq_state {
	bool level;
};

static void fuzz_set_irq(void *opaque, uint32_t gsi, bool asserted)
{
	((struct irq_state *)opaque)->level = asserted;
}

static void fuzz_reset(void *opaque)
{
	(*(unsigned int *)opaque)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct irq_state irq = { false };
	struct irq_line line = { .set_level = fuzz_set_irq, .opaque = &irq, .gsi = 4 };
	unsigned int resets = 0;
	struct i8042 kbd = { .on_reset = fuzz_reset, .opaque = &resets };
	struct bzimage_info info;
	char err[ERR_LEN];
	struct serial *serial = serial_create(-1, line);

	if (!serial)
		return 0;
	bzimage_parse(data, size, &info, err, sizeof(err));
	for (size_t i = 0; i + 1 < size; i += 2) {
		uint8_t op = data[i], value = data[i + 1];
		bool is_write = op & OP_WRITE;
		uint64_t reg = op & OP_REGISTER_MASK;

		if (op & OP_I8042)
			(reg & 1 ? i8042_command_access : i8042_data_access)(&kbd, 0, &value, 1,
									    is_write);
		else
			serial_port_access(serial, reg, &value, 1, is_write);
		uint8_t lsr = 0;

		serial_port_access(serial, UART_LSR, &lsr, 1, false);
		if ((lsr & UART_LSR_EMPTY) != UART_LSR_EMPTY)
			abort();
	}
	serial_destroy(serial);
	return 0;
}
