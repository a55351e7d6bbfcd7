/*
 * The host end of the hybrid vsock: open a stream to a guest port through the VM's AF_UNIX
 * socket ("CONNECT <port>\n" answered by "OK <host-port>\n", see docs/devices.md).
 *
 * The reply is read one byte at a time so nothing the guest sends right after the handshake
 * is swallowed; the returned fd is blocking and carries only the guest's stream from then on.
 */
#ifndef VOIDBOX_HOST_VSOCK_CONNECT_H
#define VOIDBOX_HOST_VSOCK_CONNECT_H

#include <stdint.h>

/*
 * Returns a connected blocking stream fd, or:
 *   -ENOENT / -ECONNREFUSED  no socket at uds_path or nobody listening: the VM is not running;
 *   -ECONNRESET              the guest refused the port (nothing listens on it);
 *   -ETIMEDOUT               no answer within timeout_ms: the guest is not listening yet;
 *   -EPROTO                  the device answered something that is not "OK <n>";
 *   -ENAMETOOLONG, other -errno for local failures.
 */
int vsock_host_connect(const char *uds_path, uint32_t port, int timeout_ms);

/* A user-facing sentence for a vsock_host_connect() error, saying what to do about it. */
const char *vsock_host_connect_describe(int err);

#endif
