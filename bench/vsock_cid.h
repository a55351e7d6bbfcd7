/*
 * An AF_VSOCK client to a guest by CID, for benchmarks whose peer VMM (QEMU with vhost-vsock)
 * exposes its guest through the host kernel rather than voidbox's AF_UNIX socket.
 */
#ifndef VOIDBOX_BENCH_VSOCK_CID_H
#define VOIDBOX_BENCH_VSOCK_CID_H

/* A blocking AF_VSOCK stream to (cid, port), or -errno after about timeout_ms. */
int bench_vsock_connect_cid(unsigned int cid, unsigned int port, int timeout_ms);

#endif
