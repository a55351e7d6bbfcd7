/*
 * A 16550A UART at COM1, output only: what Linux's 8250 driver needs to find the port and
 * print a console (scratch, loopback, FIFO, LSR, and the THRE interrupt on IRQ 4). Output is
 * buffered per line and written to a file descriptor (the serial log, capped at 16 MiB so a
 * chatty guest cannot fill the host's disk). It also watches the
 * output for a kernel panic, so a guest reboot that follows a panic can be reported as such.
 */
#ifndef VOIDBOX_DEVICES_SERIAL_H
#define VOIDBOX_DEVICES_SERIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/irq.h"

#define SERIAL_COM1_BASE 0x3f8
#define SERIAL_COM1_IRQ 4
#define SERIAL_PORT_COUNT 8

struct serial;

/* out_fd is borrowed (not closed); -1 discards output. */
struct serial *serial_create(int out_fd, struct irq_line irq);
void serial_destroy(struct serial *serial);
/* bus_access_fn for the 8 ports at SERIAL_COM1_BASE. */
void serial_port_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			bool is_write);
/* Writes any partial line out. */
void serial_flush(struct serial *serial);
/* The guest-visible registers, for VM snapshots (the log position is not part of them). */
struct serial_state {
	uint8_t ier, lcr, mcr, scr, fcr, dll, dlm;
	bool thre_pending;
};

void serial_state_get(struct serial *serial, struct serial_state *state);
/* Restores the registers and the interrupt line they imply. */
void serial_state_set(struct serial *serial, const struct serial_state *state);
/* True once the guest printed "Kernel panic - not syncing". */
bool serial_saw_panic(struct serial *serial);
/* Nanoseconds (CLOCK_MONOTONIC) of the first byte written, 0 if none yet. */
uint64_t serial_first_output_ns(struct serial *serial);

#endif
