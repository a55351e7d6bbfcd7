/*
 * Guest networking for PID 1: loopback is always brought up (programs expect localhost); when
 * the command line carries voidbox.network=1 the agent also configures eth0 with the fixed
 * user-mode-networking (slirp) addresses: 10.0.2.15/24, gateway 10.0.2.2, DNS 10.0.2.3.
 * Done with ioctls so the initramfs needs no `ip` binary.
 */
#ifndef VOIDBOX_AGENT_NETCFG_H
#define VOIDBOX_AGENT_NETCFG_H

#include <stdbool.h>

#define NETCFG_ENABLE_TOKEN "voidbox.network=1"

/* True when the command line asks for networking. */
bool netcfg_requested(const char *cmdline);
/* Sets an interface up. Returns 0 or -errno. */
int netcfg_link_up(const char *ifname);
/* Brings lo up, and eth0 with the slirp addresses when requested. */
void netcfg_setup(bool network_requested);

#endif
