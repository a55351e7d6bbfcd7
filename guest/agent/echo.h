/*
 * A raw vsock echo for the round-trip benchmarks (bench/exec_bench.c): the agent binary run as
 * `voidbox-agent --vsock-echo PORT` inside a guest listens on PORT, returns once it listens
 * (so the exec that started it tells the host the port is ready) and keeps echoing in the
 * background. It carries no protocol, no authentication and no agent work, so a host that
 * times small echoes through it measures the transport alone: the VMM's vsock device, the
 * interrupt and notify path, and the guest's vsock stack.
 */
#ifndef VOIDBOX_AGENT_ECHO_H
#define VOIDBOX_AGENT_ECHO_H

/* The hidden command-line mode that runs echo_main instead of the agent. */
#define ECHO_MODE_FLAG "--vsock-echo"

/*
 * Serves connections on listen_fd one after another, writing back every byte each sends until
 * it closes; stops after max_connections (0: never) or when accept fails. Returns 0 or -errno.
 */
int echo_serve(int listen_fd, unsigned int max_connections);

/*
 * The --vsock-echo mode: port_text is the decimal port. Listens, forks a detached server and
 * returns the process's exit status (0 once the server listens, 2 on a bad port, 1 otherwise).
 */
int echo_main(const char *port_text);

#endif
