/*
 * The i8042 as seen by a guest with no keyboard: status 0 (both buffers empty), data 0, and
 * the pulse-reset command forwarded to the VM as a reset request. Stateless, so no lock.
 */
#include "devices/i8042.h"

#include <string.h>

#define I8042_CMD_PULSE_RESET 0xfe

void i8042_data_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
		       bool is_write)
{
	if (!is_write)
		memset(data, 0, len);
}

void i8042_command_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			  bool is_write)
{
	struct i8042 *dev = opaque;

	if (!is_write) {
		memset(data, 0, len);
		return;
	}
	if (data[0] == I8042_CMD_PULSE_RESET && dev->on_reset)
		dev->on_reset(dev->opaque);
}
