/*
 * Just enough of the i8042 keyboard controller for a guest to reset the machine: a write of
 * 0xFE to port 0x64 pulses the CPU reset line, which voidbox treats as the guest asking to
 * end (reboot = stop). Reads report an empty controller so drivers that peek find nothing.
 */
#ifndef VOIDBOX_DEVICES_I8042_H
#define VOIDBOX_DEVICES_I8042_H

#include <stdbool.h>
#include <stdint.h>

#define I8042_DATA_PORT 0x60
#define I8042_COMMAND_PORT 0x64

struct i8042 {
	void (*on_reset)(void *opaque);
	void *opaque;
};

/* bus_access_fn for one port; opaque is struct i8042, offset 0 at the registered port. */
void i8042_data_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
		       bool is_write);
void i8042_command_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			  bool is_write);

#endif
