/*
 * Plain SIOCSIF* / SIOCADDRT ioctls on a datagram socket: enough for one interface with a
 * static address and a default route, and nothing to install in the guest. eth0 appears once
 * virtio_net has probed (synchronously during module loading), so the wait is short and
 * bounded; a missing eth0 is logged and boot continues without network.
 */
#include "netcfg.h"

#include "agent_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NETCFG_LOOPBACK "lo"
#define NETCFG_ETH "eth0"
#define NETCFG_ETH_SYSFS "/sys/class/net/eth0"
#define NETCFG_GUEST_ADDR "10.0.2.15"
#define NETCFG_NETMASK "255.255.255.0"
#define NETCFG_GATEWAY "10.0.2.2"
#define NETCFG_NAMESERVER "10.0.2.3"
#define NETCFG_RESOLV_CONF "/etc/resolv.conf"
#define NETCFG_PING_RANGE_PATH "/proc/sys/net/ipv4/ping_group_range"
#define NETCFG_PING_RANGE "0\t2147483647"
#define NETCFG_WAIT_ATTEMPTS 25
#define NETCFG_WAIT_STEP_NS (200 * 1000 * 1000L)
#define NETCFG_FILE_MODE 0644

bool netcfg_requested(const char *cmdline)
{
	const char *p = cmdline ? cmdline : "";
	size_t len = strlen(NETCFG_ENABLE_TOKEN);

	while ((p = strstr(p, NETCFG_ENABLE_TOKEN))) {
		bool starts = p == cmdline || p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n';
		bool ends = p[len] == '\0' || p[len] == ' ' || p[len] == '\t' || p[len] == '\n';

		if (starts && ends)
			return true;
		p += len;
	}
	return false;
}

static int netcfg_ioctl(unsigned long request, void *arg)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err = 0;

	if (fd < 0)
		return -errno;
	if (ioctl(fd, request, arg) < 0)
		err = -errno;
	close(fd);
	return err;
}

int netcfg_link_up(const char *ifname)
{
	struct ifreq ifr;
	int err;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	err = netcfg_ioctl(SIOCGIFFLAGS, &ifr);
	if (err)
		return err;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	return netcfg_ioctl(SIOCSIFFLAGS, &ifr);
}

static void netcfg_sockaddr(struct sockaddr *sa, const char *addr)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, addr, &sin->sin_addr);
}

static int netcfg_set_address(const char *ifname, const char *addr, const char *mask)
{
	struct ifreq ifr;
	int err;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	netcfg_sockaddr(&ifr.ifr_addr, addr);
	err = netcfg_ioctl(SIOCSIFADDR, &ifr);
	if (err)
		return err;
	netcfg_sockaddr(&ifr.ifr_netmask, mask);
	return netcfg_ioctl(SIOCSIFNETMASK, &ifr);
}

static int netcfg_default_route(const char *ifname, const char *gateway)
{
	struct rtentry route;
	char dev[IFNAMSIZ];
	int err;

	memset(&route, 0, sizeof(route));
	snprintf(dev, sizeof(dev), "%s", ifname);
	netcfg_sockaddr(&route.rt_dst, "0.0.0.0");
	netcfg_sockaddr(&route.rt_genmask, "0.0.0.0");
	netcfg_sockaddr(&route.rt_gateway, gateway);
	route.rt_flags = RTF_UP | RTF_GATEWAY;
	route.rt_dev = dev;
	err = netcfg_ioctl(SIOCADDRT, &route);
	return err == -EEXIST ? 0 : err;
}

/* replace: unlink first, so a symlink planted at path is replaced rather than followed. */
static void netcfg_write_file(const char *path, const char *text, bool replace)
{
	size_t len = strlen(text);
	int fd;

	if (replace)
		unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, NETCFG_FILE_MODE);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len)
		agent_warn("cannot write %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static bool netcfg_wait_for_eth(void)
{
	struct timespec step = { .tv_sec = 0, .tv_nsec = NETCFG_WAIT_STEP_NS };
	struct stat st;

	for (int attempt = 0; attempt < NETCFG_WAIT_ATTEMPTS; attempt++) {
		if (stat(NETCFG_ETH_SYSFS, &st) == 0)
			return true;
		nanosleep(&step, NULL);
	}
	return false;
}

static void netcfg_setup_eth(void)
{
	int err;

	if (!netcfg_wait_for_eth()) {
		agent_error("voidbox.network=1 but no eth0 appeared (is virtio_net in the image?); "
			    "continuing without network");
		return;
	}
	err = netcfg_link_up(NETCFG_ETH);
	if (!err)
		err = netcfg_set_address(NETCFG_ETH, NETCFG_GUEST_ADDR, NETCFG_NETMASK);
	if (!err)
		err = netcfg_default_route(NETCFG_ETH, NETCFG_GATEWAY);
	if (err) {
		agent_error("configuring eth0 failed: %s; the sandbox has no network",
			    strerror(-err));
		return;
	}
	netcfg_write_file(NETCFG_RESOLV_CONF, "nameserver " NETCFG_NAMESERVER "\n", true);
	netcfg_write_file(NETCFG_PING_RANGE_PATH, NETCFG_PING_RANGE, false);
	agent_info("eth0 up: %s/24 via %s, DNS %s", NETCFG_GUEST_ADDR, NETCFG_GATEWAY,
		   NETCFG_NAMESERVER);
}

void netcfg_setup(bool network_requested)
{
	int err = netcfg_link_up(NETCFG_LOOPBACK);

	if (err)
		agent_warn("cannot bring lo up: %s", strerror(-err));
	if (network_requested)
		netcfg_setup_eth();
}
