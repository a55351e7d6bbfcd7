/*
 * The i8042 as seen by a guest with no keyboard: status 0 (both buffers empty), data 0, and
 * the pulse-reset command forwarded to the VM as a reset request. Stateless, so no lock.
 */
#include "devices/i8042.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/device.h"

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

/* ---- the VM's reset line: no state of its own, so nothing in its snapshot section ---- */

#define I8042_STATE_VERSION 1u

static void i8042_device_reset(void *opaque)
{
	vm_guest_requested_reset(opaque);
}

static void i8042_device_destroy(void *dev)
{
	free(dev);
}

extern const struct vm_device_type i8042_device_type;

static const struct vm_device_ops i8042_device_ops = {
	.state_version = I8042_STATE_VERSION,
	.destroy = i8042_device_destroy,
};

static int i8042_device_create(struct vm *vm, const struct vm_config *cfg,
			       const struct vm_device_section *saved, char *err, size_t errlen)
{
	struct i8042 *dev = calloc(1, sizeof(*dev));
	int rc;

	(void)cfg;
	if (saved && saved->state_len != 0) {
		free(dev);
		snprintf(err, errlen, "the i8042 section of the snapshot is not empty: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	if (!dev) {
		snprintf(err, errlen, "out of memory creating the i8042");
		return -ENOMEM;
	}
	*dev = (struct i8042){ .on_reset = i8042_device_reset, .opaque = vm };
	rc = vm_pio_register(vm, I8042_DATA_PORT, 1, i8042_data_access, dev);
	if (rc == 0)
		rc = vm_pio_register(vm, I8042_COMMAND_PORT, 1, i8042_command_access, dev);
	if (rc == 0)
		rc = vm_device_attach(vm, &i8042_device_type, dev);
	if (rc < 0) {
		free(dev);
		snprintf(err, errlen, "cannot attach the i8042: %s", strerror(-rc));
	}
	return rc;
}

const struct vm_device_type i8042_device_type = {
	.name = "i8042",
	.ops = &i8042_device_ops,
	.create = i8042_device_create,
};
