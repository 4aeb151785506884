/* `space expose`, `space ports`, `space unexpose` and `space port-forward`: a session's
 * exposed ports (docs/api.md, "Ports"), and raw TCP from this machine to any port of a
 * session through spaced, one upgraded API connection per local connection. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"

#define FORWARD_BUF (64u << 10) /* bytes held per direction of one forwarded connection */

/* "8000" -> 8000; 0 if it is not a port. */
static unsigned port_arg(const char *s) {
        uint64_t v;
        if (cli_parse_uint(s, 1, 65535, &v) < 0)
                return 0;
        return (unsigned)v;
}

static void print_port(const struct space_port_info *p) {
        printf("%-6u %-7s %s%s%s\n", p->port, p->public ? "public" : "token", p->path, p->url[0] ? "  " : "", p->url);
}

int cli_expose_check(struct cli_call *call) {
        if (!port_arg(call->argv[1]))
                return cli_usage(call->cmd, "invalid port '%s' (1..65535)", call->argv[1]);
        return 0;
}

int cli_expose(struct cli_call *call) {
        struct space_port_info p;
        int e = space_port_expose(call->session, port_arg(call->argv[1]), cli_opt_set(call, "public"), &p);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json) {
                printf("{\"port\":%u,\"public\":%s,\"path\":\"%s\"", p.port, p.public ? "true" : "false", p.path);
                if (p.url[0])
                        printf(",\"url\":\"%s\"", p.url);
                if (p.token[0])
                        printf(",\"token\":\"%s\"", p.token);
                printf("}\n");
                return EXIT_SUCCESS;
        }
        print_port(&p);
        if (p.token[0])
                printf("token: %s\n(shown only now: send it as 'Authorization: Bearer', 'X-Space-Port-Token', or\n"
                       "?space_token= once in a browser)\n",
                       p.token);
        return EXIT_SUCCESS;
}

int cli_ports(struct cli_call *call) {
        if (call->json)
                return cli_get_json_and_print(call, "/ports");
        struct space_port_info *v = NULL;
        size_t n = 0;
        int e = space_port_list(call->session, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        printf("%-6s %-7s %s\n", "PORT", "ACCESS", "PATH  URL");
        for (size_t i = 0; i < n; i++)
                print_port(&v[i]);
        free(v);
        return EXIT_SUCCESS;
}

int cli_unexpose_check(struct cli_call *call) { return cli_expose_check(call); }

int cli_unexpose(struct cli_call *call) {
        int e = space_port_unexpose(call->session, port_arg(call->argv[1]));
        return e < 0 ? cli_api_fail(call, e) : EXIT_SUCCESS;
}

/* ---- port-forward ---- */

/* "PORT" or "PORT:LOCAL" -> the session's port and the local one (default: the same). */
static int forward_spec(const char *s, unsigned *port, unsigned *local) {
        char a[16];
        const char *colon = strchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n == 0 || n >= sizeof a)
                return -EINVAL;
        memcpy(a, s, n);
        a[n] = '\0';
        *port = port_arg(a);
        *local = colon ? port_arg(colon + 1) : *port;
        return *port && *local ? 0 : -EINVAL;
}

int cli_port_forward_check(struct cli_call *call) {
        unsigned p, l;
        if (forward_spec(call->argv[1], &p, &l) < 0)
                return cli_usage(call->cmd, "invalid PORT[:LOCAL] '%s' (ports are 1..65535)", call->argv[1]);
        return 0;
}

struct fwd {
        int fd[2]; /* 0: the local client, 1: the session's port through spaced */
};

/* Bytes both ways until both sides ended (each EOF passed on as a shutdown), or an error. */
static void *fwd_run(void *arg) {
        struct fwd *f = arg;
        char *buf[2] = { malloc(FORWARD_BUF), malloc(FORWARD_BUF) }; /* buf[i]: read from fd[i] */
        size_t len[2] = { 0, 0 }, off[2] = { 0, 0 };
        bool eof[2] = { false, false }, shut[2] = { false, false };
        while (buf[0] && buf[1] && !(shut[0] && shut[1])) {
                struct pollfd p[2];
                for (int i = 0; i < 2; i++) {
                        p[i] = (struct pollfd){ .fd = f->fd[i] };
                        if (!eof[i] && len[i] == 0)
                                p[i].events |= POLLIN;
                        if (len[1 - i] > off[1 - i])
                                p[i].events |= POLLOUT;
                }
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                bool broken = false;
                for (int i = 0; i < 2 && !broken; i++) {
                        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) && !eof[i] && len[i] == 0) {
                                ssize_t n = recv(f->fd[i], buf[i], FORWARD_BUF, 0);
                                if (n > 0) {
                                        len[i] = (size_t)n;
                                        off[i] = 0;
                                } else if (n == 0)
                                        eof[i] = true;
                                else if (errno != EAGAIN && errno != EINTR)
                                        broken = true;
                        }
                        int o = 1 - i;
                        if (len[i] > off[i]) {
                                ssize_t n = send(f->fd[o], buf[i] + off[i], len[i] - off[i], MSG_NOSIGNAL);
                                if (n > 0)
                                        off[i] += (size_t)n;
                                else if (n < 0 && errno != EAGAIN && errno != EINTR)
                                        broken = true;
                                if (off[i] == len[i])
                                        len[i] = off[i] = 0;
                        }
                        if (eof[i] && len[i] == 0 && !shut[i]) {
                                shut[i] = true;
                                (void)shutdown(f->fd[o], SHUT_WR);
                        }
                }
                if (broken)
                        break;
        }
        close(f->fd[0]);
        close(f->fd[1]);
        free(buf[0]);
        free(buf[1]);
        free(f);
        return NULL;
}

static int listen_local(unsigned port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        return fd;
}

int cli_port_forward(struct cli_call *call) {
        unsigned port, local;
        (void)forward_spec(call->argv[1], &port, &local); /* as the check found them */
        int lfd = listen_local(local);
        if (lfd < 0)
                return cli_error("listening on 127.0.0.1:%u: %s", local, strerror(-lfd));
        signal(SIGPIPE, SIG_IGN);
        fprintf(stderr, "Forwarding 127.0.0.1:%u -> %s:%u (Ctrl-C ends)\n", local, space_session_id(call->session), port);
        for (;;) {
                int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (cfd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        int e = errno;
                        close(lfd);
                        return cli_error("accept: %s", strerror(e));
                }
                int ufd;
                int e = space_port_forward(call->session, port, &ufd);
                if (e < 0) {
                        /* This connection fails; the next one may work (the server starts later). */
                        fprintf(stderr, "space: port-forward %s:%u: %s\n", space_session_id(call->session), port,
                                *space_client_last_error(call->client) ? space_client_last_error(call->client)
                                                                        : space_strerror(e));
                        close(cfd);
                        continue;
                }
                struct fwd *f = malloc(sizeof *f);
                pthread_t t;
                pthread_attr_t at;
                if (!f || pthread_attr_init(&at) != 0) {
                        free(f);
                        close(cfd);
                        close(ufd);
                        continue;
                }
                f->fd[0] = cfd;
                f->fd[1] = ufd;
                (void)pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&t, &at, fwd_run, f) != 0) {
                        close(cfd);
                        close(ufd);
                        free(f);
                }
                pthread_attr_destroy(&at);
        }
}
