/*
 * What box.c shares with its two backends (box_mock.c, box_local.c): a table of operations
 * per backend, so box.c owns everything common (mode resolution, environment merging, the
 * per-thread error sentence) and each backend only knows how to run a program and move files.
 */
#ifndef VOIDBOX_RUNTIME_BOX_INTERNAL_H
#define VOIDBOX_RUNTIME_BOX_INTERNAL_H

#include <limits.h>

#include "runtime/box.h"

struct box_ops {
	/* env is the merged environment (box env, then request env); req->env is ignored */
	int (*exec)(struct box *box, const struct box_exec_request *req,
		    const struct box_env_var *env, size_t env_count,
		    struct box_exec_result *out);
	int (*write_file)(struct box *box, const char *path, const void *data, size_t len);
	int (*read_file)(struct box *box, const char *path, char **data, size_t *len);
	int (*mkdir_p)(struct box *box, const char *path);
	int (*stop_service)(struct box *box, const char *name);
	/*
	 * Ends what runs in the box without freeing anything, from another thread while execs
	 * may be under way (box_cancel_all): politely first (force false: the guest may sync),
	 * then, force true, at once. Must not block for long.
	 */
	void (*interrupt)(struct box *box, bool force);
	void (*close)(struct box *box, bool keep_logs);
};

struct box {
	const struct box_ops *ops;
	enum box_mode mode;
	char *name;
	struct box_env_var *env; /* owned copies: the box's env after merging */
	size_t env_count;
	char kernel[PATH_MAX];
	char initramfs[PATH_MAX];
	void *backend;
	struct box *open_prev, *open_next; /* in box.c's list of open boxes */
};

/* Backends: fill box->ops and box->backend; -errno with a sentence in err. */
int box_mock_open(struct box *box, const struct box_config *cfg, char *err, size_t errlen);
int box_local_open(struct box *box, const struct box_config *cfg, char *err, size_t errlen);

/* Records the sentence box_last_error() returns on this thread. */
void box_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Copies len bytes into a malloc'd NUL-terminated buffer; NULL on -ENOMEM. */
char *box_copy_bytes(const void *data, size_t len);


#endif
