/*
 * Who sandboxed programs run as, shared by every module that creates processes or files for
 * them: one definition so exec, PTY, file RPCs, mounts and PID 1 setup always agree.
 */
#ifndef VOIDBOX_AGENT_SANDBOX_USER_H
#define VOIDBOX_AGENT_SANDBOX_USER_H

#define AGENT_SANDBOX_UID 1000
#define AGENT_SANDBOX_GID 1000
#define AGENT_SANDBOX_HOME "/home/sandbox"
#define AGENT_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin:/sbin:/usr/sbin"

#endif
