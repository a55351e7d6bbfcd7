/*
 * `voidbox shell`: an interactive terminal in a fresh VM. The host terminal goes to raw mode
 * and every byte typed goes to the guest PTY; the guest's output is written to stdout as it
 * arrives; SIGWINCH becomes a resize; stdin's end asks the guest to close the session; the
 * command exits with the guest program's exit code.
 *
 * The PTY owns the terminal, so nothing else may write to it: the guest console goes to a log
 * file and the logger is pointed at a file too for the whole session (its path is printed
 * only when something fails, after the terminal is restored). One thread reads guest output;
 * the main thread waits on stdin, a SIGWINCH self-pipe and the reader's "closed" pipe.
 *
 * SIGINT and SIGTERM (a terminal in raw mode sends no SIGINT: Ctrl-C goes to the guest) end
 * the session in order (stop_signals.h): the guest is asked to close it, the terminal is
 * restored, the VM is shut down and voidbox exits 130 or 143. A guest that does not close it
 * within the grace has the session's connection cut and its VM stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/stop_signals.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "sandbox/sandbox.h"
#include "store/guest_image.h"

#define SHELL_DEFAULT_PROGRAM "sh"
#define SHELL_DEFAULT_COLS 80
#define SHELL_DEFAULT_ROWS 24
#define SHELL_ERROR_MAX 1024
#define SHELL_INPUT_CHUNK 4096
#define SHELL_MAX_ENV 256
#define SHELL_LOG_TEMPLATE "/tmp/voidbox-shell-XXXXXX.log"
#define SHELL_LOG_SUFFIX_LEN 4

enum cli_shell_option {
	CLI_SHELL_OPT_PROGRAM = 1000,
	CLI_SHELL_OPT_MEMORY,
	CLI_SHELL_OPT_VCPUS,
	CLI_SHELL_OPT_ENV,
	CLI_SHELL_OPT_WORKDIR,
	CLI_SHELL_OPT_KERNEL,
	CLI_SHELL_OPT_INITRAMFS,
	CLI_SHELL_OPT_SNAPSHOT,
	CLI_SHELL_OPT_DISK,
	CLI_SHELL_OPT_MOUNT,
	CLI_SHELL_OPT_IMAGE,
	CLI_SHELL_OPT_HELP,
};

static const struct option cli_shell_options[] = {
	{ "program", required_argument, NULL, CLI_SHELL_OPT_PROGRAM },
	{ "memory", required_argument, NULL, CLI_SHELL_OPT_MEMORY },
	{ "vcpus", required_argument, NULL, CLI_SHELL_OPT_VCPUS },
	{ "env", required_argument, NULL, CLI_SHELL_OPT_ENV },
	{ "workdir", required_argument, NULL, CLI_SHELL_OPT_WORKDIR },
	{ "kernel", required_argument, NULL, CLI_SHELL_OPT_KERNEL },
	{ "initramfs", required_argument, NULL, CLI_SHELL_OPT_INITRAMFS },
	{ "snapshot", required_argument, NULL, CLI_SHELL_OPT_SNAPSHOT },
	{ "disk", required_argument, NULL, CLI_SHELL_OPT_DISK },
	CLI_NETWORK_LONG_OPTIONS
	{ "mount", required_argument, NULL, CLI_SHELL_OPT_MOUNT },
	{ "image", required_argument, NULL, CLI_SHELL_OPT_IMAGE },
	{ "help", no_argument, NULL, CLI_SHELL_OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

struct cli_shell_session {
	struct sandbox_config sandbox;
	struct proto_pty_open open;
	struct proto_env_var env[SHELL_MAX_ENV];
	struct control_channel_pty *pty;
	int closed_pipe[2];
	int32_t exit_code;
	int read_error;
	bool raw;
	struct termios saved;
	const char *snapshot; /* --snapshot; NULL: cold boot */
	struct vm_disk disks[VM_MAX_DISKS]; /* --disk */
	struct cli_network network;
	const char *image; /* --image */
	struct cli_image_root image_root;
	struct stop_signals *signals; /* what SIGINT and SIGTERM cancel while the session runs */
	struct sandbox *running; /* the session's sandbox, for the signals' target */
	bool piped;			/* stdin is no terminal: the program runs as exec runs it */
	struct proto_bytes piped_stdin; /* read whole before the watcher and the image lock */
};

/* SIGWINCH's self-pipe: the handler may only write(). */
static int shell_winch_pipe[2] = { -1, -1 };

static void cli_shell_usage(FILE *out)
{
	fprintf(out,
		"usage: voidbox shell [--program P] [--memory MB] [--vcpus N] [--env K=V]...\n"
		"                     [--workdir DIR (default: the sandbox user's home)] [--kernel PATH] [--initramfs PATH] [--snapshot ID]\n"
		"                     [--disk PATH[:ro]]... [--mount HOST:GUEST[:ro|:rw]]...\n"
		"                     [--network [--publish H:G] [--allow CIDR] [--deny CIDR]...]\n"
		"                     [-- ARGS...]\n\n"
		"Boots a micro-VM and opens an interactive terminal running P (default %s) in it;\n"
		"exits with P's exit code. The VM console and voidbox's own log go to files.\n"
		"--snapshot ID restores the VM from a snapshot (id prefix, else a snapshot directory)\n"
		"instead of booting it; one that is not found warns and cold-boots.\n"
		"--disk PATH[:ro] attaches a host file as /dev/vda, /dev/vdb... (repeatable).\n"
		"--image REF boots from a pulled OCI image's root filesystem (pulled when absent).\n"
		CLI_MOUNT_USAGE,
		SHELL_DEFAULT_PROGRAM);
	cli_network_usage(out);
}


static bool cli_shell_add_env(struct cli_shell_session *s, char *assignment)
{
	char *equals = strchr(assignment, '=');

	if (!equals || equals == assignment || s->open.env_count == SHELL_MAX_ENV) {
		fprintf(stderr, "voidbox shell: --env takes KEY=VALUE (at most %d), not '%s'\n",
			SHELL_MAX_ENV, assignment);
		return false;
	}
	*equals = '\0';
	s->env[s->open.env_count].key = assignment;
	s->env[s->open.env_count].value = equals + 1;
	s->open.env_count++;
	return true;
}

/* 0 to go on, a positive exit status, or -1 after --help. */
static int cli_shell_parse(int argc, char **argv, struct cli_shell_session *s)
{
	int option;

	s->open.program = SHELL_DEFAULT_PROGRAM;
	s->open.env = s->env;
	s->open.interactive = true;
	optind = 1;
	while ((option = getopt_long(argc, argv, "+", cli_shell_options, NULL)) != -1) {
		int network_rc = cli_network_option(&s->network, "shell", option, optarg);

		if (network_rc < 0)
			return CLI_EXIT_USAGE;
		if (network_rc > 0)
			continue;
		switch (option) {
		case CLI_SHELL_OPT_PROGRAM:
			s->open.program = optarg;
			break;
		case CLI_SHELL_OPT_MEMORY:
			if (!cli_parse_uint("shell", "--memory", optarg, 1, VM_MAX_MEMORY_MB,
					    &s->sandbox.memory_mb))
				return CLI_EXIT_USAGE;
			break;
		case CLI_SHELL_OPT_VCPUS:
			if (!cli_parse_uint("shell", "--vcpus", optarg, 1, VM_MAX_VCPUS, &s->sandbox.vcpus))
				return CLI_EXIT_USAGE;
			break;
		case CLI_SHELL_OPT_ENV:
			if (!cli_shell_add_env(s, optarg))
				return CLI_EXIT_USAGE;
			break;
		case CLI_SHELL_OPT_WORKDIR:
			s->open.working_dir = optarg;
			break;
		case CLI_SHELL_OPT_KERNEL:
			s->sandbox.kernel_path = optarg;
			break;
		case CLI_SHELL_OPT_INITRAMFS:
			s->sandbox.initramfs_path = optarg;
			break;
		case CLI_SHELL_OPT_SNAPSHOT:
			s->snapshot = optarg;
			break;
		case CLI_SHELL_OPT_DISK:
			if (cli_add_disk("shell", optarg, s->disks, &s->sandbox) < 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_SHELL_OPT_MOUNT:
			if (cli_mount_add("shell", &s->sandbox, optarg) != 0)
				return CLI_EXIT_USAGE;
			break;
		case CLI_SHELL_OPT_IMAGE:
			s->image = optarg;
			break;
		case CLI_SHELL_OPT_HELP:
			cli_shell_usage(stdout);
			return -1;
		default:
			fprintf(stderr, "(see voidbox shell --help)\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (cli_check_disks_fit_snapshot("shell", s->snapshot, &s->sandbox) < 0 ||
	    cli_network_finish(&s->network, "shell", &s->sandbox) < 0)
		return CLI_EXIT_USAGE;
	s->open.args = argv + optind;
	s->open.args_count = (size_t)(argc - optind);
	return 0;
}

static void cli_shell_on_winch(int signo)
{
	int saved = errno;
	char byte = (char)signo;

	if (write(shell_winch_pipe[1], &byte, 1) < 0) {
		/* a full pipe already holds a pending resize */
	}
	errno = saved;
}

static void cli_shell_window(uint16_t *cols, uint16_t *rows)
{
	struct winsize size;

	*cols = SHELL_DEFAULT_COLS;
	*rows = SHELL_DEFAULT_ROWS;
	if (ioctl(STDIN_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col && size.ws_row) {
		*cols = size.ws_col;
		*rows = size.ws_row;
	}
}

static void cli_shell_raw_on(struct cli_shell_session *s)
{
	struct termios raw;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &s->saved) < 0)
		return;
	raw = s->saved;
	cfmakeraw(&raw);
	if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
		s->raw = true;
}

/* A second signal's restore hook: the terminal as it was, before the process ends. */
static void cli_shell_restore_terminal(void *opaque)
{
	struct cli_shell_session *s = opaque;

	tcsetattr(STDIN_FILENO, TCSANOW, &s->saved);
}

static void cli_shell_raw_off(struct cli_shell_session *s)
{
	if (s->raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &s->saved);
	s->raw = false;
}

/* The reader thread: guest output to stdout until the session closes. */
static void *cli_shell_reader(void *opaque)
{
	struct cli_shell_session *s = opaque;
	struct control_channel_pty_event event;
	char byte = 1;

	for (;;) {
		int rc = control_channel_pty_read(s->pty, &event, CONTROL_CHANNEL_TIMEOUT_INFINITE);

		if (rc < 0) {
			s->read_error = rc;
			break;
		}
		if (event.kind == CONTROL_CHANNEL_PTY_CLOSED) {
			s->exit_code = event.exit_code;
			control_channel_pty_event_free(&event);
			break;
		}
		(void)fd_write_full(STDOUT_FILENO, event.data, event.len);
		control_channel_pty_event_free(&event);
	}
	if (write(s->closed_pipe[1], &byte, 1) < 0) {
		/* the main loop also stops when the pipe's writer is gone */
	}
	return NULL;
}

/* Forwards stdin and resizes until the reader reports the end. */
static void cli_shell_pump(struct cli_shell_session *s)
{
	struct pollfd fds[3] = {
		{ .fd = s->closed_pipe[0], .events = POLLIN },
		{ .fd = shell_winch_pipe[0], .events = POLLIN },
		{ .fd = STDIN_FILENO, .events = POLLIN },
	};
	uint8_t buf[SHELL_INPUT_CHUNK];
	nfds_t count = 3;

	for (;;) {
		if (poll(fds, count, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (fds[0].revents)
			return;
		if (fds[1].revents & POLLIN) {
			uint16_t cols, rows;

			if (read(shell_winch_pipe[0], buf, sizeof(buf)) > 0) {
				cli_shell_window(&cols, &rows);
				control_channel_pty_resize(s->pty, cols, rows);
			}
		}
		if (count == 3 && fds[2].revents) {
			ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));

			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				/* stdin ended: ask the guest to end the session, keep showing output */
				control_channel_pty_close(s->pty);
				count = 2;
				continue;
			}
			if (control_channel_pty_write(s->pty, buf, (size_t)got) < 0)
				return;
		}
	}
}

/* The signals' target during a session: asks the guest to close it, or cuts it and the VM. */
static void cli_shell_interrupt_session(void *opaque, bool force)
{
	struct cli_shell_session *s = opaque;

	if (!force) {
		if (control_channel_pty_close(s->pty) < 0)
			control_channel_pty_cut(s->pty);
		return;
	}
	control_channel_pty_cut(s->pty);
	sandbox_interrupt(s->running, true);
}

static int cli_shell_session_run(struct cli_shell_session *s, struct sandbox *sandbox)
{
	struct sigaction action = { .sa_handler = cli_shell_on_winch };
	pthread_t reader;
	char err[SHELL_ERROR_MAX];

	cli_shell_window(&s->open.cols, &s->open.rows);
	s->pty = sandbox_pty_open(sandbox, &s->open, err, sizeof(err));
	if (!s->pty) {
		fprintf(stderr, "voidbox shell: cannot open a terminal for %s: %s\n",
			s->open.program, err);
		return CLI_EXIT_SANDBOX_FAILURE;
	}
	sigemptyset(&action.sa_mask);
	action.sa_flags = SA_RESTART;
	sigaction(SIGWINCH, &action, NULL);
	cli_shell_raw_on(s);
	if (s->raw)
		stop_signals_set_restore(s->signals, cli_shell_restore_terminal, s);
	if (pthread_create(&reader, NULL, cli_shell_reader, s) != 0) {
		stop_signals_set_restore(s->signals, NULL, NULL);
		cli_shell_raw_off(s);
		return CLI_EXIT_SANDBOX_FAILURE;
	}
	s->running = sandbox;
	stop_signals_set_target(s->signals, cli_shell_interrupt_session, s);
	cli_shell_pump(s);
	pthread_join(reader, NULL);
	stop_signals_set_restore(s->signals, NULL, NULL);
	cli_shell_raw_off(s);
	signal(SIGWINCH, SIG_DFL);
	cli_stop_signals_watch_sandbox(s->signals, sandbox);
	control_channel_pty_free(s->pty);
	s->pty = NULL;
	if (stop_signals_received(s->signals))
		return CLI_EXIT_SANDBOX_FAILURE; /* said by the caller */
	if (s->read_error) {
		fprintf(stderr, "voidbox shell: the terminal connection failed: %s\n",
			strerror(-s->read_error));
		return CLI_EXIT_SANDBOX_FAILURE;
	}
	return s->exit_code >= 0 && s->exit_code < 256 ? s->exit_code : CLI_EXIT_FAILURE;
}

/* Points the logger at a file for the session; returns the stream (NULL: logging stays). */
static FILE *cli_shell_quiet_log(char *path, size_t path_len)
{
	int fd;
	FILE *stream;

	snprintf(path, path_len, "%s", SHELL_LOG_TEMPLATE);
	fd = mkstemps(path, SHELL_LOG_SUFFIX_LEN);
	if (fd < 0)
		return NULL;
	stream = fdopen(fd, "w");
	if (!stream) {
		close(fd);
		return NULL;
	}
	setvbuf(stream, NULL, _IOLBF, 0);
	log_set_stream(stream);
	return stream;
}

/*
 * Without a terminal (a pipe, a file, /dev/null) there is nothing to give a PTY: the program
 * runs as `voidbox exec` would, with stdin (read whole before the boot) handed to it, the way
 * `docker run -i` does, and voidbox exits with its status.
 */
static int cli_shell_run_piped(struct cli_shell_session *s, struct sandbox *sandbox)
{
	struct proto_exec_request req = {
		.program = s->open.program, .args = s->open.args, .args_count = s->open.args_count,
		.env = s->open.env, .env_count = s->open.env_count,
		.working_dir = s->open.working_dir, .stdin_data = s->piped_stdin,
	};

	return cli_exec_in_sandbox("shell", sandbox, &req, s->signals);
}

int cli_shell_run(const struct cli_globals *globals, int argc, char **argv)
{
	struct cli_shell_session s;
	struct guest_image_paths image;
	struct sandbox *sandbox = NULL;
	struct stop_signals signals;
	char err[SHELL_ERROR_MAX], log_path[SHELL_ERROR_MAX] = "";
	FILE *log_stream = NULL;
	int status = CLI_EXIT_SANDBOX_FAILURE;
	bool watching = false;
	int rc;

	(void)globals;
	memset(&s, 0, sizeof(s));
	s.closed_pipe[0] = s.closed_pipe[1] = -1;
	rc = cli_shell_parse(argc, argv, &s);
	if (rc != 0)
		return rc < 0 ? CLI_EXIT_OK : rc;
	if (cli_sandbox_resolve_image("shell", s.snapshot, &s.sandbox, &image) < 0)
		return CLI_EXIT_SANDBOX_FAILURE;
	if (pipe2(s.closed_pipe, O_CLOEXEC) < 0 ||
	    pipe2(shell_winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		fprintf(stderr, "voidbox shell: cannot create pipes: %s\n", strerror(errno));
		goto out;
	}
	/*
	 * Piped stdin is read before the watcher starts, so a Ctrl-C while it is read ends the
	 * command as before, and before the image store's lock is taken, so a slow writer does
	 * not hold `image rm` and `prune` up.
	 */
	s.piped = !isatty(STDIN_FILENO);
	if (s.piped) {
		rc = cli_exec_read_stdin(&s.piped_stdin);
		if (rc < 0) {
			if (rc != -EFBIG)
				fprintf(stderr, "voidbox shell: cannot read stdin: %s\n", strerror(-rc));
			goto out;
		}
	}
	if (cli_image_attach("shell", s.image, s.snapshot, s.disks, &s.sandbox,
			     &s.image_root) < 0) {
		status = CLI_EXIT_FAILURE;
		goto out;
	}
	log_stream = cli_shell_quiet_log(log_path, sizeof(log_path));
	if (cli_stop_signals_start("shell", &signals) < 0)
		goto out;
	watching = true;
	s.signals = &signals;
	s.sandbox.vmm_placement = SANDBOX_VMM_OWN_PROCESS; /* a shell takes no snapshot */
	cli_stop_signals_cancel_start(&signals, &s.sandbox);
	rc = cli_sandbox_start("shell", s.snapshot, &s.sandbox, false, &sandbox, err, sizeof(err));
	cli_image_release(&s.image_root); /* the VM has its rootfs open, or never will */
	if (rc < 0) {
		if (rc != -ECANCELED) /* a cancel is said by cli_stop_signals_status */
			fprintf(stderr, "voidbox shell: %s\n", err);
		goto out;
	}
	/* a signal just after the boot cancels now: the session or the program fails at once */
	cli_stop_signals_watch_sandbox(&signals, sandbox);
	status = s.piped ? cli_shell_run_piped(&s, sandbox) : cli_shell_session_run(&s, sandbox);
out:
	cli_image_release(&s.image_root); /* a start that failed before the boot */
	if (watching)
		status = cli_stop_signals_status("shell", &signals, status);
	sandbox_destroy(sandbox, status == CLI_EXIT_SANDBOX_FAILURE);
	if (watching)
		stop_signals_stop(&signals);
	free(s.piped_stdin.data);
	if (log_stream) {
		log_set_stream(stderr);
		fclose(log_stream);
		if (status == CLI_EXIT_SANDBOX_FAILURE)
			fprintf(stderr, "voidbox shell: voidbox's log is in %s\n", log_path);
		else
			unlink(log_path);
	}
	for (int i = 0; i < 2; i++) {
		if (s.closed_pipe[i] >= 0)
			close(s.closed_pipe[i]);
		if (shell_winch_pipe[i] >= 0)
			close(shell_winch_pipe[i]);
		shell_winch_pipe[i] = -1;
	}
	return status;
}
