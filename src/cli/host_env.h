/*
 * The environment variables the libraries below the CLI take as parameters, read in one
 * place for every program's entry point (the voidbox command, the benchmarks, the VM tests):
 * VOIDBOX_HOME, HOME, VOID_BOX_KERNEL, VOID_BOX_INITRAMFS and VOIDBOX_SNAPSHOT_CACHE_MAX go to
 * the stores (store_settings), VOIDBOX_LOG_LEVEL to the logger, VOIDBOX_VMM_BINARY to the
 * sandbox layer (the program VMM processes run, sandbox/vmm_process.h). The sandbox's own tunables
 * are the CLI's (cli_env.c), since only the CLI starts sandboxes from user settings.
 */
#ifndef VOIDBOX_CLI_HOST_ENV_H
#define VOIDBOX_CLI_HOST_ENV_H

#define HOST_ENV_HOME "HOME"

/* Hands the variables above to the libraries; 0, or -ENOMEM (a message is logged). */
int host_env_apply(void);

/*
 * The host's environment as the runtime's lookups take it (spec_env_lookup_fn: a spec's
 * copy-from-host env entries, an agent's provider keys and HOME).
 */
const char *host_env_lookup(const char *name, void *ctx);

#endif
