/*
 * 16550A register model reduced to transmit: bytes written to THR leave at once, so THR is
 * always empty and LSR always says THRE|TEMT. The THRE interrupt follows the datasheet
 * (pending after a THR write or when IER.ETBEI is enabled, cleared by reading IIR while it is
 * the reported cause or by writing THR) so the 8250 driver's interrupt-driven transmit works.
 * One mutex serializes vCPUs writing at once.
 *
 * As a VM device ("serial") it is the console: it owns the log file it writes, its section of
 * a snapshot holds the guest-visible registers (not the log position), and it tells the VM
 * when the guest printed a kernel panic so a reset after it is reported as a panic.
 */
#include "devices/serial.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmm/device.h"
#include "common/clock.h"
#include "common/fd_io.h"

/* Register offsets. */
#define UART_RX_TX 0 /* RBR/THR, or DLL when LCR.DLAB */
#define UART_IER 1   /* or DLM when LCR.DLAB */
#define UART_IIR_FCR 2
#define UART_LCR 3
#define UART_MCR 4
#define UART_LSR 5
#define UART_MSR 6
#define UART_SCR 7

#define UART_LCR_DLAB 0x80
#define UART_IER_THRI 0x02
#define UART_IER_MASK 0x0f
#define UART_IIR_NO_INT 0x01
#define UART_IIR_THRI 0x02
#define UART_IIR_FIFO_ENABLED 0xc0
#define UART_FCR_ENABLE_FIFO 0x01
#define UART_LSR_THRE 0x20
#define UART_LSR_TEMT 0x40
#define UART_MCR_DTR 0x01
#define UART_MCR_RTS 0x02
#define UART_MCR_OUT1 0x04
#define UART_MCR_OUT2 0x08
#define UART_MCR_LOOP 0x10
#define UART_MCR_MASK 0x1f
#define UART_MSR_CTS 0x10
#define UART_MSR_DSR 0x20
#define UART_MSR_RI 0x40
#define UART_MSR_DCD 0x80
#define UART_UNDEFINED_READ 0xff

#define SERIAL_LINE_MAX 512
/* A guest that prints without end must not fill the host's disk through the serial log. */
#define SERIAL_LOG_MAX_BYTES (16ULL * 1024 * 1024)
#define SERIAL_TRUNCATED_NOTE "\n[voidbox: serial log truncated at 16 MiB]\n"
#define SERIAL_PANIC_MARKER "Kernel panic - not syncing"
#define SERIAL_LOG_MODE 0600
#define SERIAL_STATE_VERSION 1u

struct serial {
	pthread_mutex_t lock;
	int out_fd;
	int owned_fd; /* the log file a VM's console opened; closed with it, -1: none */
	struct irq_line irq;
	bool irq_level;
	uint8_t ier, lcr, mcr, scr, fcr, dll, dlm;
	bool thre_pending;
	bool saw_panic;
	uint64_t first_output_ns;
	char line[SERIAL_LINE_MAX];
	size_t line_len;
	uint64_t bytes_logged;
};

struct serial *serial_create(int out_fd, struct irq_line irq)
{
	struct serial *serial = calloc(1, sizeof(*serial));

	if (!serial)
		return NULL;
	pthread_mutex_init(&serial->lock, NULL);
	serial->out_fd = out_fd;
	serial->owned_fd = -1;
	serial->irq = irq;
	serial->mcr = UART_MCR_OUT2;
	return serial;
}

static void serial_write_out(struct serial *serial)
{
	size_t len = serial->line_len;

	serial->line_len = 0;
	if (serial->out_fd < 0 || serial->bytes_logged >= SERIAL_LOG_MAX_BYTES)
		return;
	if (serial->bytes_logged + len >= SERIAL_LOG_MAX_BYTES) {
		len = (size_t)(SERIAL_LOG_MAX_BYTES - serial->bytes_logged);
		(void)fd_write_full(serial->out_fd, serial->line, len);
		(void)fd_write_full(serial->out_fd, SERIAL_TRUNCATED_NOTE,
				    strlen(SERIAL_TRUNCATED_NOTE));
		serial->bytes_logged = SERIAL_LOG_MAX_BYTES;
		return;
	}
	(void)fd_write_full(serial->out_fd, serial->line, len);
	serial->bytes_logged += len;
}

void serial_flush(struct serial *serial)
{
	pthread_mutex_lock(&serial->lock);
	serial_write_out(serial);
	pthread_mutex_unlock(&serial->lock);
}

void serial_destroy(struct serial *serial)
{
	if (!serial)
		return;
	serial_flush(serial);
	if (serial->owned_fd >= 0)
		close(serial->owned_fd);
	pthread_mutex_destroy(&serial->lock);
	free(serial);
}

static void serial_emit(struct serial *serial, uint8_t byte)
{
	if (!serial->first_output_ns)
		serial->first_output_ns = clock_monotonic_ns();
	serial->line[serial->line_len++] = (char)byte;
	if (byte != '\n' && serial->line_len < SERIAL_LINE_MAX)
		return;
	if (!serial->saw_panic && memmem(serial->line, serial->line_len, SERIAL_PANIC_MARKER,
					 strlen(SERIAL_PANIC_MARKER)))
		serial->saw_panic = true;
	serial_write_out(serial);
}

static void serial_update_irq(struct serial *serial)
{
	bool level = (serial->ier & UART_IER_THRI) && serial->thre_pending;

	if (level == serial->irq_level)
		return;
	serial->irq_level = level;
	irq_line_set(&serial->irq, level);
}

static uint8_t serial_msr(const struct serial *serial)
{
	if (!(serial->mcr & UART_MCR_LOOP))
		return UART_MSR_DCD | UART_MSR_DSR | UART_MSR_CTS;
	uint8_t msr = 0;

	if (serial->mcr & UART_MCR_RTS)
		msr |= UART_MSR_CTS;
	if (serial->mcr & UART_MCR_DTR)
		msr |= UART_MSR_DSR;
	if (serial->mcr & UART_MCR_OUT1)
		msr |= UART_MSR_RI;
	if (serial->mcr & UART_MCR_OUT2)
		msr |= UART_MSR_DCD;
	return msr;
}

static uint8_t serial_read_iir(struct serial *serial)
{
	uint8_t fifo = (serial->fcr & UART_FCR_ENABLE_FIFO) ? UART_IIR_FIFO_ENABLED : 0;

	if ((serial->ier & UART_IER_THRI) && serial->thre_pending) {
		serial->thre_pending = false;
		return fifo | UART_IIR_THRI;
	}
	return fifo | UART_IIR_NO_INT;
}

static uint8_t serial_read(struct serial *serial, uint64_t offset)
{
	bool dlab = serial->lcr & UART_LCR_DLAB;

	switch (offset) {
	case UART_RX_TX:
		return dlab ? serial->dll : 0;
	case UART_IER:
		return dlab ? serial->dlm : serial->ier;
	case UART_IIR_FCR:
		return serial_read_iir(serial);
	case UART_LCR:
		return serial->lcr;
	case UART_MCR:
		return serial->mcr;
	case UART_LSR:
		return UART_LSR_THRE | UART_LSR_TEMT;
	case UART_MSR:
		return serial_msr(serial);
	case UART_SCR:
		return serial->scr;
	default:
		return UART_UNDEFINED_READ;
	}
}

static void serial_write(struct serial *serial, uint64_t offset, uint8_t value)
{
	bool dlab = serial->lcr & UART_LCR_DLAB;

	switch (offset) {
	case UART_RX_TX:
		if (dlab) {
			serial->dll = value;
			break;
		}
		if (!(serial->mcr & UART_MCR_LOOP))
			serial_emit(serial, value);
		serial->thre_pending = true;
		break;
	case UART_IER:
		if (dlab) {
			serial->dlm = value;
			break;
		}
		if (!(serial->ier & UART_IER_THRI) && (value & UART_IER_THRI))
			serial->thre_pending = true;
		serial->ier = value & UART_IER_MASK;
		break;
	case UART_IIR_FCR:
		serial->fcr = value;
		break;
	case UART_LCR:
		serial->lcr = value;
		break;
	case UART_MCR:
		serial->mcr = value & UART_MCR_MASK;
		break;
	case UART_SCR:
		serial->scr = value;
		break;
	default:
		break;
	}
}

void serial_port_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			bool is_write)
{
	struct serial *serial = opaque;

	pthread_mutex_lock(&serial->lock);
	if (is_write)
		serial_write(serial, offset, data[0]);
	else
		data[0] = serial_read(serial, offset);
	for (uint32_t i = 1; !is_write && i < len; i++)
		data[i] = 0;
	serial_update_irq(serial);
	pthread_mutex_unlock(&serial->lock);
}

bool serial_saw_panic(struct serial *serial)
{
	pthread_mutex_lock(&serial->lock);
	bool saw = serial->saw_panic;

	pthread_mutex_unlock(&serial->lock);
	return saw;
}

uint64_t serial_first_output_ns(struct serial *serial)
{
	pthread_mutex_lock(&serial->lock);
	uint64_t ns = serial->first_output_ns;

	pthread_mutex_unlock(&serial->lock);
	return ns;
}

void serial_state_get(struct serial *serial, struct serial_state *state)
{
	pthread_mutex_lock(&serial->lock);
	*state = (struct serial_state){
		.ier = serial->ier, .lcr = serial->lcr, .mcr = serial->mcr, .scr = serial->scr,
		.fcr = serial->fcr, .dll = serial->dll, .dlm = serial->dlm,
		.thre_pending = serial->thre_pending,
	};
	pthread_mutex_unlock(&serial->lock);
}

void serial_state_set(struct serial *serial, const struct serial_state *state)
{
	pthread_mutex_lock(&serial->lock);
	serial->ier = state->ier & UART_IER_MASK;
	serial->lcr = state->lcr;
	serial->mcr = state->mcr & UART_MCR_MASK;
	serial->scr = state->scr;
	serial->fcr = state->fcr;
	serial->dll = state->dll;
	serial->dlm = state->dlm;
	serial->thre_pending = state->thre_pending;
	serial_update_irq(serial);
	pthread_mutex_unlock(&serial->lock);
}

/* ---- the VM's console device ---- */

static int serial_device_save(void *dev, struct byte_writer *out)
{
	struct serial_state state;

	serial_state_get(dev, &state);
	byte_writer_u8(out, state.ier);
	byte_writer_u8(out, state.lcr);
	byte_writer_u8(out, state.mcr);
	byte_writer_u8(out, state.scr);
	byte_writer_u8(out, state.fcr);
	byte_writer_u8(out, state.dll);
	byte_writer_u8(out, state.dlm);
	byte_writer_u8(out, state.thre_pending);
	return 0;
}

static int serial_device_restore(void *dev, struct byte_reader *in, uint32_t version, char *err,
				 size_t errlen)
{
	struct serial_state state = {
		.ier = byte_reader_u8(in), .lcr = byte_reader_u8(in), .mcr = byte_reader_u8(in),
		.scr = byte_reader_u8(in), .fcr = byte_reader_u8(in), .dll = byte_reader_u8(in),
		.dlm = byte_reader_u8(in),
	};
	uint8_t thre_pending = byte_reader_u8(in);

	(void)version;
	if (thre_pending > 1)
		byte_reader_fail(in);
	if (byte_reader_finish(in) < 0) {
		snprintf(err, errlen, "the serial port's saved state is malformed: take the "
			 "snapshot again");
		return -EBADMSG;
	}
	state.thre_pending = thre_pending;
	serial_state_set(dev, &state);
	return 0;
}

static bool serial_device_saw_panic(void *dev)
{
	return serial_saw_panic(dev);
}

static uint64_t serial_device_first_output_ns(void *dev)
{
	return serial_first_output_ns(dev);
}

static void serial_device_destroy(void *dev)
{
	serial_destroy(dev);
}

extern const struct vm_device_type serial_device_type;

static const struct vm_device_ops serial_device_ops = {
	.state_version = SERIAL_STATE_VERSION,
	.save = serial_device_save,
	.restore = serial_device_restore,
	.saw_guest_panic = serial_device_saw_panic,
	.first_output_ns = serial_device_first_output_ns,
	.destroy = serial_device_destroy,
};

static int serial_device_open_log(const struct vm_config *cfg, int *fd, char *err, size_t errlen)
{
	*fd = -1;
	if (cfg->serial_to_stdout)
		*fd = dup(STDOUT_FILENO);
	else if (cfg->serial_log_path)
		*fd = open(cfg->serial_log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			   SERIAL_LOG_MODE);
	else
		return 0;
	if (*fd < 0) {
		int rc = -errno;

		snprintf(err, errlen, "cannot create serial log %s: %s: check the directory "
			 "exists and is writable", cfg->serial_to_stdout ? "(stdout)" :
			 cfg->serial_log_path, strerror(-rc));
		return rc;
	}
	return 0;
}

/* Every VM has the console, cold-booted or restored. */
static int serial_device_create(struct vm *vm, const struct vm_config *cfg,
				const struct vm_device_section *saved, char *err, size_t errlen)
{
	struct serial *serial;
	int fd, rc = serial_device_open_log(cfg, &fd, err, errlen);

	(void)saved;
	if (rc < 0)
		return rc;
	serial = serial_create(fd, vm_irq_line(vm, SERIAL_COM1_IRQ));
	if (!serial) {
		if (fd >= 0)
			close(fd);
		snprintf(err, errlen, "out of memory creating the serial port");
		return -ENOMEM;
	}
	serial->owned_fd = fd;
	rc = vm_pio_register(vm, SERIAL_COM1_BASE, SERIAL_PORT_COUNT, serial_port_access, serial);
	if (rc == 0)
		rc = vm_device_attach(vm, &serial_device_type, serial);
	if (rc < 0) {
		serial_destroy(serial);
		snprintf(err, errlen, "cannot attach the serial port: %s", strerror(-rc));
	}
	return rc;
}

const struct vm_device_type serial_device_type = {
	.name = "serial",
	.ops = &serial_device_ops,
	.create = serial_device_create,
};
