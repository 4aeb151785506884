/* space shell and space exec -t: a command of the sandbox on a terminal of its own, ours
 * in raw mode carrying every key to it (Ctrl-C included) and its screen back, window
 * resizes following ours (SIGWINCH), and space's exit status the command's. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/fdio.h"

static struct termios saved_tio;
static bool tio_saved;
static volatile sig_atomic_t winch;

/* Our terminal as it was: on every way out (return, exit, a fatal signal). */
static void tty_restore(void) {
        if (tio_saved)
                (void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
        tio_saved = false;
}

static void on_fatal(int sig) {
        tty_restore();
        signal(sig, SIG_DFL);
        raise(sig);
}

static void on_winch(int sig) {
        (void)sig;
        winch = 1;
}

static int tty_raw(void) {
        if (!isatty(STDIN_FILENO))
                return 0;
        if (tcgetattr(STDIN_FILENO, &saved_tio) < 0)
                return -errno;
        struct termios raw = saved_tio;
        cfmakeraw(&raw);
        tio_saved = true;
        static bool hooked;
        if (!hooked) {
                atexit(tty_restore);
                hooked = true;
        }
        struct sigaction sa = { .sa_handler = on_fatal };
        sigemptyset(&sa.sa_mask);
        static const int fatal[] = { SIGTERM, SIGHUP, SIGQUIT, SIGINT, SIGPIPE };
        for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
                (void)sigaction(fatal[i], &sa, NULL);
        if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) < 0) {
                tio_saved = false;
                return -errno;
        }
        return 0;
}

/* Our window's size, 24 x 80 without a terminal. */
static void win_size(unsigned *rows, unsigned *cols) {
        struct winsize ws = { 0 };
        *rows = 24;
        *cols = 80;
        if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) && ws.ws_row &&
            ws.ws_col) {
                *rows = ws.ws_row > SPACE_TERMINAL_MAX_DIM ? SPACE_TERMINAL_MAX_DIM : ws.ws_row;
                *cols = ws.ws_col > SPACE_TERMINAL_MAX_DIM ? SPACE_TERMINAL_MAX_DIM : ws.ws_col;
        }
}

static int to_stdout(void *userdata, enum space_stream stream, const void *data, size_t len) {
        (void)userdata;
        (void)stream;
        return fdio_write_all(STDOUT_FILENO, data, len);
}

int cli_terminal_run(struct cli_call *call, const char *const *argv, const char *cwd) {
        unsigned rows, cols;
        win_size(&rows, &cols);
        struct space_terminal_opts o = { SPACE_TERMINAL_OPTS_INIT, .argv = argv,
                                         .env = call->n_env ? call->env : NULL, .cwd = cwd, .rows = rows, .cols = cols,
                                         .user = cli_opt_str(call, "user") };
        int pid;
        int r = space_terminal_start(call->session, &o, &pid);
        if (r < 0) {
                cli_api_fail(call, r);
                return r == -ENOEXEC ? CLI_EXIT_NOT_STARTED : EXIT_FAILURE;
        }
        space_terminal *t = NULL;
        r = space_terminal_connect(call->session, pid, &t);
        if (r < 0) {
                cli_api_fail(call, r);
                (void)space_signal(call->session, pid, SIGHUP); /* nobody will ever type into it */
                return EXIT_FAILURE;
        }
        struct sigaction sa = { .sa_handler = on_winch };
        sigemptyset(&sa.sa_mask);
        (void)sigaction(SIGWINCH, &sa, NULL);
        if ((r = tty_raw()) < 0) {
                space_terminal_close(t);
                return cli_error("cannot put the terminal in raw mode: %s", strerror(-r));
        }
        bool stdin_open = true;
        struct space_terminal_exit ex = { 0 };
        int status = EXIT_FAILURE;
        char buf[16384];
        for (;;) {
                if (winch) {
                        winch = 0;
                        win_size(&rows, &cols);
                        (void)space_terminal_resize(t, rows, cols);
                }
                struct pollfd p[2] = { { .fd = space_terminal_fd(t), .events = POLLIN },
                                       { .fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN } };
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        cli_error("poll: %s", strerror(errno));
                        break;
                }
                if (p[1].revents) {
                        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
                        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                                continue;
                        if (n <= 0) {
                                /* the terminal runs on until it exits; a stdin that is no
                                 * terminal ends with ^D, the end of input a terminal has */
                                stdin_open = false;
                                if (!isatty(STDIN_FILENO))
                                        (void)space_terminal_write(t, "\x04", 1);
                        }
                        else if ((r = space_terminal_write(t, buf, (size_t)n)) < 0) {
                                tty_restore();
                                cli_error("terminal %d: %s", pid, strerror(-r));
                                break;
                        }
                }
                if (p[0].revents) {
                        r = space_terminal_read(t, to_stdout, NULL, &ex);
                        if (r < 0) {
                                tty_restore();
                                cli_error("terminal %d: %s", pid, strerror(-r));
                                break;
                        }
                        if (r == 1) {
                                tty_restore();
                                if (!ex.exited)
                                        cli_error("the connection to terminal %d was lost (it may still run)", pid);
                                else
                                        status = ex.signal ? 128 + ex.signal : ex.exit_code;
                                break;
                        }
                }
        }
        tty_restore();
        space_terminal_close(t);
        return status;
}

static const char *const shell_argv[] = {
        "/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l", NULL,
};

int cli_shell(struct cli_call *call) { return cli_terminal_run(call, shell_argv, cli_opt_str(call, "cwd")); }
