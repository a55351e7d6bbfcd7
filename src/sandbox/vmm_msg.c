/*
 * vmm_msg.h: one fixed-size record per message, so a short or long record is refused whole
 * and the strings are terminated by the reader whatever the sender wrote.
 */
#include "sandbox/vmm_msg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* The largest errno a status may carry; anything else reads as EIO. */
#define VMM_MSG_ERRNO_MAX 4095

static int vmm_msg_send_with(int fd, struct vmm_msg *msg, int flags)
{
	ssize_t sent = send(fd, msg, sizeof(*msg), MSG_NOSIGNAL | flags);

	explicit_bzero(msg->secret, sizeof(msg->secret));
	return sent == (ssize_t)sizeof(*msg) ? 0 : -EIO;
}

int vmm_msg_send_whole(int fd, struct vmm_msg *msg)
{
	return vmm_msg_send_with(fd, msg, 0);
}

int vmm_msg_send_nowait(int fd, struct vmm_msg *msg)
{
	return vmm_msg_send_with(fd, msg, MSG_DONTWAIT);
}

int vmm_msg_send(int fd, enum vmm_msg_kind kind, int status, uint32_t reason, const char *text)
{
	struct vmm_msg msg;

	memset(&msg, 0, sizeof(msg));
	msg.kind = kind;
	msg.status = status;
	msg.reason = reason;
	if (text)
		snprintf(msg.text, sizeof(msg.text), "%s", text);
	return vmm_msg_send_whole(fd, &msg);
}

int vmm_msg_status(int32_t status)
{
	return status > 0 || status < -VMM_MSG_ERRNO_MAX ? -EIO : status;
}

int vmm_msg_recv(int fd, struct vmm_msg *msg)
{
	ssize_t got;

	do
		got = recv(fd, msg, sizeof(*msg), MSG_TRUNC);
	while (got < 0 && errno == EINTR);
	if (got != (ssize_t)sizeof(*msg))
		return -EIO;
	msg->text[sizeof(msg->text) - 1] = '\0';
	msg->parent_dir[sizeof(msg->parent_dir) - 1] = '\0';
	if (msg->kind < VMM_MSG_STARTED || msg->kind > VMM_MSG_ANSWER ||
	    msg->reason > VM_EXIT_GUEST_TRIPLE_FAULT || msg->working_set_known > 1)
		return -EIO;
	return 0;
}
