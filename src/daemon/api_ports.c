/* Exposed ports (docs/api.md, "Ports"): the API that exposes, lists and unexposes a
 * session's ports (kept in meta as ports_json), the proxy that takes requests for them
 * (by Host "PORT-ses_ID.DOMAIN" or by path /v1/sessions/ID/ports/PORT/...) before the API
 * sees them, and port-forward (raw TCP over an upgraded API connection). Bytes move
 * through net/ingress.c's pipes; this file decides who may pass and writes the first
 * bytes each way. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/http.h"
#include "daemon/net/ingress.h"
#include "daemon/port_relay.h"
#include "daemon/ports.h"
#include "daemon/routes.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "runtime/runtime.h"

#define PORT_TOKEN_PREFIX "spp_"
#define PORT_TOKEN_LEN (4 + DL_TOKEN_LEN)
#define PORT_TOKEN_HEADER "X-Space-Port-Token"
#define PORT_TOKEN_QUERY "space_token"
#define PORT_COOKIE "space_port_token"
#define PORT_FORWARD_PROTO "space-tcp"

/* ---- the ports of a session, and their record in meta ---- */

static struct ses_port *port_find(struct session *s, uint16_t port) {
        for (size_t i = 0; i < s->n_ports; i++)
                if (s->ports[i].port == port)
                        return &s->ports[i];
        return NULL;
}

/* [{"port":N,"public":bool,"token_hash":"…"}]: what meta keeps. */
static char *ports_array_text(const struct ses_port *v, size_t n) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_arr_begin(&w);
        for (size_t i = 0; i < n; i++) {
                json_w_obj_begin(&w);
                json_w_kint(&w, "port", v[i].port);
                json_w_kbool(&w, "public", v[i].public);
                if (!v[i].public)
                        json_w_kstr(&w, "token_hash", v[i].token_hash);
                json_w_obj_end(&w);
        }
        json_w_arr_end(&w);
        char *text = NULL;
        if (!w.err && buf_putc(&b, '\0') == 0)
                text = strdup(b.data);
        buf_free(&b);
        return text;
}

static int ports_save(struct session *s) {
        _cleanup_free_ char *text = s->n_ports ? ports_array_text(s->ports, s->n_ports) : NULL;
        if (s->n_ports && !text)
                return -ENOMEM;
        return meta_session_set_ports(s->d->meta, s->id, text);
}

int ports_load(struct session *s, const char *text) {
        s->n_ports = 0;
        if (!text || !*text)
                return 0;
        _cleanup_json_ struct json *j = NULL;
        char err[128];
        int r = json_parse(text, strlen(text), &j, err, sizeof err);
        if (r < 0)
                return r;
        if (json_type(j) != JSON_ARRAY)
                return -EBADMSG;
        for (size_t i = 0; i < json_len(j) && s->n_ports < SES_PORTS_MAX; i++) {
                const struct json *e = json_at(j, i);
                int64_t port;
                if (json_get_int(e, "port", &port) < 0 || port < 1 || port > 65535 || port_find(s, (uint16_t)port))
                        return -EBADMSG;
                struct ses_port *p = &s->ports[s->n_ports];
                *p = (struct ses_port){ .port = (uint16_t)port, .public = json_get_bool(e, "public", false) };
                const char *h = json_get_str(e, "token_hash");
                if (!p->public) {
                        if (!h || strlen(h) != META_HASH_HEX)
                                return -EBADMSG;
                        snprintf(p->token_hash, sizeof p->token_hash, "%s", h);
                }
                s->n_ports++;
        }
        return 0;
}

/* ---- answers ---- */

static void port_json(struct json_writer *w, struct daemon *d, const struct session *s, const struct ses_port *p,
                      const char *token) {
        char buf[512];
        json_w_obj_begin(w);
        json_w_kint(w, "port", p->port);
        json_w_kbool(w, "public", p->public);
        if (d->ports_domain) {
                snprintf(buf, sizeof buf, "http://%u-%s.%s/", p->port, s->id, d->ports_domain);
                json_w_kstr(w, "url", buf);
        }
        snprintf(buf, sizeof buf, "/v1/sessions/%s/ports/%u/", s->id, p->port);
        json_w_kstr(w, "path", buf);
        if (token)
                json_w_kstr(w, "token", token);
        json_w_obj_end(w);
}

/* A new token for p (its hash into p). */
static int port_token_new(struct ses_port *p, char token[PORT_TOKEN_LEN + 1]) {
        memcpy(token, PORT_TOKEN_PREFIX, 4);
        int r = dl_token_new(token + 4);
        if (r == 0)
                r = meta_token_hash(token, p->token_hash);
        return r;
}

/* The port of a request's path or body: 1..65535, else a 400 answer and -EINVAL. */
static int port_parse(struct conn *c, const char *text, const struct json *v, uint16_t *ret) {
        int64_t n = -1;
        if (text) {
                char *end;
                errno = 0;
                long long l = strtoll(text, &end, 10);
                if (!errno && *text != '\0' && *end == '\0')
                        n = l;
        } else if (v && json_int(v, &n) < 0)
                n = -1;
        if (n < 1 || n > 65535) {
                conn_reply_error(c, 400, "port must be an integer between 1 and 65535");
                return -EINVAL;
        }
        *ret = (uint16_t)n;
        return 0;
}

/* The session of the request; NULL after an answer. */
static struct session *ports_session(struct conn *c, bool running) {
        return api_session(c, running);
}

void api_port_expose(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_body_json(c, &body) < 0 ? NULL : ports_session(c, false);
        if (!s)
                return;
        uint16_t port;
        const struct json *pub = json_get(body, "public");
        if (port_parse(c, NULL, json_get(body, "port"), &port) < 0)
                return;
        if (pub && json_type(pub) != JSON_BOOL && json_type(pub) != JSON_NULL) {
                conn_reply_error(c, 400, "public must be true or false");
                return;
        }
        struct ses_port np = { .port = port, .public = pub && json_is_true(pub) };
        char token[PORT_TOKEN_LEN + 1] = "";
        if (!np.public && port_token_new(&np, token) < 0) {
                conn_reply_error(c, 500, "making the port's token failed");
                return;
        }
        struct ses_port *p = port_find(s, port), old = { 0 };
        bool added = !p;
        if (added) {
                if (s->n_ports >= SES_PORTS_MAX) {
                        conn_reply_error(c, 409, "session %s has %u exposed ports already (the most it may have)", s->id,
                                         SES_PORTS_MAX);
                        return;
                }
                p = &s->ports[s->n_ports++];
        } else
                old = *p;
        *p = np;
        int r = ports_save(s);
        if (r < 0) {
                if (added)
                        s->n_ports--;
                else
                        *p = old;
                conn_reply_error(c, 500, "recording the port: %s", meta_last_error(c->d->meta));
                return;
        }
        /* Exposed again: its old token no longer opens it, and what it let in goes. */
        if (!added && c->d->ingress)
                ingress_close(c->d->ingress, s->id, port);
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        port_json(&w, c->d, s, p, token[0] ? token : NULL);
        explicit_bzero(token, sizeof token);
        conn_reply_json(c, 201, &b);
        explicit_bzero(b.data, b.len);
        buf_free(&b);
}

void api_port_list(struct conn *c) {
        struct session *s = ports_session(c, false);
        if (!s)
                return;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "ports");
        json_w_arr_begin(&w);
        for (size_t i = 0; i < s->n_ports; i++)
                port_json(&w, c->d, s, &s->ports[i], NULL);
        json_w_arr_end(&w);
        json_w_obj_end(&w);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_port_unexpose(struct conn *c) {
        struct session *s = ports_session(c, false);
        uint16_t port;
        if (!s || port_parse(c, api_param(&c->params, "port"), NULL, &port) < 0)
                return;
        struct ses_port *p = port_find(s, port);
        if (!p) {
                conn_reply_error(c, 404, "port %u of session %s is not exposed", port, s->id);
                return;
        }
        struct ses_port old = *p;
        size_t i = (size_t)(p - s->ports);
        memmove(&s->ports[i], &s->ports[i + 1], (s->n_ports - i - 1) * sizeof *p);
        s->n_ports--;
        if (ports_save(s) < 0) {
                memmove(&s->ports[i + 1], &s->ports[i], (s->n_ports - i) * sizeof *p);
                s->ports[i] = old;
                s->n_ports++;
                conn_reply_error(c, 500, "recording the port: %s", meta_last_error(c->d->meta));
                return;
        }
        if (c->d->ingress)
                ingress_close(c->d->ingress, s->id, port);
        conn_reply_empty(c, 204);
}

/* ---- "ports" of a create ---- */

struct ports_req {
        size_t n;
        struct ses_port ports[SES_PORTS_MAX];
        char tokens[SES_PORTS_MAX][PORT_TOKEN_LEN + 1];
};

struct ports_req *ports_req_free(struct ports_req *q) {
        if (q) {
                explicit_bzero(q->tokens, sizeof q->tokens);
                free(q);
        }
        return NULL;
}

int ports_parse(struct conn *c, const struct json *v, struct ports_req **ret) {
        *ret = NULL;
        if (!v || json_type(v) == JSON_NULL)
                return 0;
        if (json_type(v) != JSON_ARRAY || json_len(v) > SES_PORTS_MAX) {
                conn_reply_error(c, 400, "ports must be a list of at most %u ports (N or {\"port\":N,\"public\":bool})",
                                 SES_PORTS_MAX);
                return -EINVAL;
        }
        struct ports_req *q = calloc(1, sizeof *q);
        if (!q) {
                conn_reply_error(c, 500, "out of memory");
                return -ENOMEM;
        }
        for (size_t i = 0; i < json_len(v); i++) {
                const struct json *e = json_at(v, i), *pub = NULL;
                uint16_t port;
                if (json_type(e) == JSON_OBJECT) {
                        pub = json_get(e, "public");
                        e = json_get(e, "port");
                }
                if (port_parse(c, NULL, e, &port) < 0) {
                        ports_req_free(q);
                        return -EINVAL;
                }
                if (pub && json_type(pub) != JSON_BOOL && json_type(pub) != JSON_NULL) {
                        conn_reply_error(c, 400, "public must be true or false");
                        ports_req_free(q);
                        return -EINVAL;
                }
                for (size_t k = 0; k < q->n; k++)
                        if (q->ports[k].port == port) {
                                conn_reply_error(c, 400, "port %u is listed twice", port);
                                ports_req_free(q);
                                return -EINVAL;
                        }
                struct ses_port *p = &q->ports[q->n];
                *p = (struct ses_port){ .port = port, .public = pub && json_is_true(pub) };
                if (!p->public && port_token_new(p, q->tokens[q->n]) < 0) {
                        conn_reply_error(c, 500, "making a port's token failed");
                        ports_req_free(q);
                        return -EIO;
                }
                q->n++;
        }
        *ret = q;
        return 0;
}

char *ports_req_meta_json(const struct ports_req *q) { return ports_array_text(q->ports, q->n); }

char *ports_req_answer(const struct ports_req *q, struct session *s) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_key(&w, "ports");
        json_w_arr_begin(&w);
        for (size_t i = 0; i < q->n; i++)
                port_json(&w, s->d, s, &q->ports[i], q->tokens[i][0] ? q->tokens[i] : NULL);
        json_w_arr_end(&w);
        char *text = NULL;
        if (!w.err && buf_putc(&b, '\0') == 0)
                text = strdup(b.data);
        explicit_bzero(b.data, b.len);
        buf_free(&b);
        return text;
}

/* ---- a connection to a sandbox port ---- */

/* A request waiting for its port to answer; then the connection becomes a pipe. */
struct proxy {
        struct conn *c;
        struct daemon *d;
        struct ingress_dial *dial;
        struct port_relay *relay; /* a runtime without netns_fd: through its init */
        char owner[SES_ID_LEN + 1];
        uint16_t port;
        enum ingress_pipe_mode mode;
        bool forward;     /* port-forward: "101 Switching Protocols" goes first */
        struct buf head;  /* what goes to the port first (the rewritten request head) */
};

static void proxy_free(struct proxy *px) {
        if (!px)
                return;
        ingress_dial_cancel(px->dial);
        port_relay_cancel(px->relay);
        buf_free(&px->head);
        free(px);
}

static void proxy_gone(struct conn *c, void *ctx) {
        (void)c;
        proxy_free(ctx);
}

static const struct conn_hook_ops proxy_hook = { .gone = proxy_gone };

static void proxy_dialled(void *ctx, int fd) {
        struct proxy *px = ctx;
        struct conn *c = px->c;
        px->dial = NULL;
        px->relay = NULL;
        conn_clear_hook(c, px);
        if (fd < 0) {
                if (fd == -ECONNREFUSED)
                        conn_reply_error(c, 502, "nothing listens on port %u of session %s (connection refused)",
                                         px->port, px->owner);
                else
                        conn_reply_error(c, 502, "port %u of session %s did not answer: %s", px->port, px->owner,
                                         strerror(-fd));
                proxy_free(px);
                return;
        }
        struct buf out, in;
        int cfd = conn_detach(c, &out, &in);
        if (cfd < 0) {
                safe_close(fd);
                proxy_free(px);
                return;
        }
        static const char up[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: " PORT_FORWARD_PROTO
                                 "\r\nConnection: Upgrade\r\n\r\n";
        int r = 0;
        if (px->forward)
                r = buf_append(&out, up, sizeof up - 1);
        if (r == 0)
                r = buf_append(&px->head, in.data ? in.data : "", in.len);
        buf_free(&in);
        if (r < 0) {
                safe_close(fd);
                safe_close(cfd);
        } else if ((r = ingress_pipe_new(px->d->ingress, px->mode, px->owner, px->port, cfd, &out, fd, &px->head)) < 0)
                log_warn("ingress: %s port %u: %s", px->owner, px->port, strerror(-r));
        buf_free(&out);
        proxy_free(px);
}

/* Dials port of s for c (which waits); px is taken. Answers itself on failure. */
static void proxy_start(struct conn *c, struct session *s, struct proxy *px) {
        px->c = c;
        px->d = c->d;
        snprintf(px->owner, sizeof px->owner, "%s", s->id);
        int r;
        if (!c->d->ingress)
                r = -ENODEV;
        else if (s->rt->netns_fd)
                r = ingress_dial(c->d->ingress, s->rt->netns_fd(s->sb), px->port, s->id, proxy_dialled, px, &px->dial);
        else if (ingress_count(c->d->ingress, s->id) >= INGRESS_PIPES_PER_OWNER)
                r = -EAGAIN;
        else /* a network spaced cannot enter: through the sandbox's init */
                r = port_relay_dial(s, px->port, proxy_dialled, px, &px->relay);
        if (r < 0) {
                proxy_free(px);
                if (r == -EAGAIN)
                        conn_reply_retry(c, 503, 1, "too many connections to the ports of session %s or of this host",
                                         s->id);
                else if (r == -EOPNOTSUPP)
                        conn_reply_error(c, 501,
                                         "the space-init of session %s is too old to reach its ports (pause and "
                                         "resume the session to give it a current one)",
                                         s->id);
                else
                        conn_reply_error(c, 502, "port %u of session %s: %s", px->port, s->id, strerror(-r));
                return;
        }
        c->state = CONN_WAIT;
        conn_set_hook(c, &proxy_hook, px);
}

/* ---- the proxy: who may pass ---- */


static bool is_upgrade(const struct http_request *r) {
        return http_request_header(r, "Upgrade") && http_header_has_token(r, "Connection", "upgrade");
}

/* The space_port_token cookie's value, into out. */
static bool cookie_token(const char *cookie, char *out, size_t outsz) {
        size_t nl = strlen(PORT_COOKIE);
        for (const char *p = cookie; p && *p;) {
                while (*p == ' ' || *p == ';')
                        p++;
                const char *e = strchrnul(p, ';');
                if ((size_t)(e - p) > nl && strncmp(p, PORT_COOKIE "=", nl + 1) == 0 && (size_t)(e - p) - nl - 1 < outsz) {
                        memcpy(out, p + nl + 1, (size_t)(e - p) - nl - 1);
                        out[(size_t)(e - p) - nl - 1] = '\0';
                        return true;
                }
                p = e;
        }
        return false;
}

static bool port_token_ok(const struct ses_port *p, const char *token) {
        char h[META_HASH_HEX + 1];
        if (p->public || strncmp(token, PORT_TOKEN_PREFIX, 4) != 0 || !dl_token_well_formed(token + 4) ||
            meta_token_hash(token, h) < 0)
                return false;
        return auth_hash_equal(h, p->token_hash);
}

enum pass { PASS_OK, PASS_NONE, PASS_WRONG, PASS_FAIL };

/* May c's request reach p of s? *via_query: it passed by ?space_token= (a browser's first
 * visit, which gets the cookie). */
static enum pass port_pass(struct conn *c, struct session *s, const struct ses_port *p, bool *via_query) {
        const struct http_request *r = c->req;
        *via_query = false;
        if (p->public)
                return PASS_OK;
        bool given = false;
        char tok[AUTH_HEADER_MAX + 1];
        const char *h = http_request_header(r, PORT_TOKEN_HEADER);
        if (h) {
                given = true;
                if (port_token_ok(p, h))
                        return PASS_OK;
        }
        if ((h = http_request_header(r, "Authorization"))) {
                given = true;
                const char *v = h;
                if (strncasecmp(v, "Bearer", 6) == 0 && (v[6] == ' ' || v[6] == '\t')) {
                        v += 7;
                        while (*v == ' ' || *v == '\t')
                                v++;
                        if (port_token_ok(p, v))
                                return PASS_OK;
                        struct meta_token t;
                        if (auth_token_well_formed(v)) {
                                int rr = auth_verify(c->d->meta, v, &t);
                                if (rr == 0 && auth_tenant_sees(t.tenant, s->tenant))
                                        return PASS_OK;
                                if (rr < 0 && rr != -EACCES)
                                        return PASS_FAIL;
                        }
                }
        }
        if (cookie_token(http_request_header(r, "Cookie"), tok, sizeof tok)) {
                given = true;
                if (port_token_ok(p, tok))
                        return PASS_OK;
        }
        if (http_query_get(r->query, PORT_TOKEN_QUERY, tok, sizeof tok) == 0) {
                given = true;
                if (port_token_ok(p, tok)) {
                        *via_query = true;
                        return PASS_OK;
                }
        }
        explicit_bzero(tok, sizeof tok);
        /* The local operator (the Unix socket, no credentials) may open everything. */
        if (!given && !c->tcp)
                return PASS_OK;
        return given ? PASS_WRONG : PASS_NONE;
}

/* A Bearer value that is one of ours (an API or port token): not for the sandbox. */
static bool bearer_is_ours(const char *v) {
        if (strncasecmp(v, "Bearer", 6) != 0)
                return false;
        v += 6;
        while (*v == ' ' || *v == '\t')
                v++;
        return strncmp(v, AUTH_TOKEN_PREFIX, AUTH_TOKEN_PREFIX_LEN) == 0 || strncmp(v, PORT_TOKEN_PREFIX, 4) == 0;
}

/* The query without space_token=…: appended to out with its '?' when anything is left. */
static int query_append(struct buf *out, const char *q) {
        bool first = true;
        size_t kl = strlen(PORT_TOKEN_QUERY);
        for (const char *p = q; p && *p;) {
                const char *e = strchrnul(p, '&');
                size_t n = (size_t)(e - p);
                bool ours = n >= kl && strncmp(p, PORT_TOKEN_QUERY, kl) == 0 && (n == kl || p[kl] == '=');
                if (n && !ours) {
                        if (buf_putc(out, first ? '?' : '&') < 0 || buf_append(out, p, n) < 0)
                                return -ENOMEM;
                        first = false;
                }
                p = *e ? e + 1 : e;
        }
        return 0;
}

/* The request head as the port gets it: target (its path; the query without our token),
 * the client's headers without our credentials, and, unless it upgrades, "Connection:
 * close" (each proxied request has its own connection to the port: the answer's end is
 * its close). */
static int upstream_head(const struct http_request *r, const char *path, size_t path_len, const char *query,
                         const char *prefix, bool upgrade, struct buf *out) {
        int e = buf_printf(out, "%s ", r->method);
        if (!e)
                e = buf_append(out, path, path_len);
        if (!e)
                e = query_append(out, query);
        if (!e)
                e = buf_printf(out, " HTTP/1.%d\r\n", r->version_minor);
        for (size_t i = 0; i < r->n_headers && !e; i++) {
                const char *n = r->headers[i].name, *v = r->headers[i].value;
                if (strcasecmp(n, PORT_TOKEN_HEADER) == 0 || strcasecmp(n, "X-Forwarded-Prefix") == 0 ||
                    (strcasecmp(n, "Authorization") == 0 && bearer_is_ours(v)))
                        continue;
                if (!upgrade && (strcasecmp(n, "Connection") == 0 || strcasecmp(n, "Keep-Alive") == 0 ||
                                 strcasecmp(n, "Proxy-Connection") == 0 || strcasecmp(n, "Upgrade") == 0))
                        continue;
                if (strcasecmp(n, "Cookie") == 0) {
                        /* Every cookie but ours. */
                        struct buf ck = BUF_INIT(0);
                        size_t nl = strlen(PORT_COOKIE);
                        for (const char *p = v; *p && !e;) {
                                while (*p == ' ' || *p == ';')
                                        p++;
                                const char *x = strchrnul(p, ';');
                                size_t l = (size_t)(x - p);
                                if (l && !(l > nl && strncmp(p, PORT_COOKIE "=", nl + 1) == 0))
                                        e = (ck.len ? buf_puts(&ck, "; ") : 0) || buf_append(&ck, p, l);
                                p = x;
                        }
                        if (!e && ck.len)
                                e = buf_printf(out, "Cookie: %.*s\r\n", (int)ck.len, ck.data);
                        buf_free(&ck);
                        continue;
                }
                e = buf_printf(out, "%s: %s\r\n", n, v);
        }
        if (!e && !upgrade)
                e = buf_puts(out, "Connection: close\r\n");
        if (!e && prefix)
                e = buf_printf(out, "X-Forwarded-Prefix: %s\r\n", prefix);
        if (!e)
                e = buf_puts(out, "\r\n");
        return e ? -ENOMEM : 0;
}

/* "8000-ses_0123456789abcdef.DOMAIN[:port]" -> port and session id, when d has a domain. */
static bool host_route(struct daemon *d, const char *host, uint16_t *port, char id[SES_ID_LEN + 1]) {
        if (!d->ports_domain || !host)
                return false;
        char h[256];
        size_t n = strcspn(host, ":");
        if (n >= sizeof h)
                return false;
        for (size_t i = 0; i < n; i++)
                h[i] = (char)tolower((unsigned char)host[i]);
        h[n] = '\0';
        if (n && h[n - 1] == '.')
                h[--n] = '\0';
        size_t dl = strlen(d->ports_domain);
        if (n <= dl + 1 || h[n - dl - 1] != '.' || strcmp(h + n - dl, d->ports_domain) != 0)
                return false;
        h[n - dl - 1] = '\0';
        char *dash = strchr(h, '-');
        if (!dash || dash == h || dash - h > 5 || strlen(dash + 1) != SES_ID_LEN)
                return false;
        *dash = '\0';
        char *end;
        long p = strtol(h, &end, 10);
        if (*end || p < 1 || p > 65535 || !isdigit((unsigned char)h[0]))
                return false;
        if (strncmp(dash + 1, "ses_", 4) != 0 || strspn(dash + 5, "0123456789abcdef") != 16)
                return false;
        *port = (uint16_t)p;
        memcpy(id, dash + 1, SES_ID_LEN + 1);
        return true;
}

/* "/v1/sessions/ID/ports/PORT" in the raw target: its length, port and id; *rest points
 * after it ("/…", "?…" or ""). */
static bool path_route(const char *target, uint16_t *port, char id[SES_ID_LEN + 1], const char **rest) {
        static const char pre[] = "/v1/sessions/";
        if (strncmp(target, pre, sizeof pre - 1) != 0)
                return false;
        const char *p = target + sizeof pre - 1;
        size_t il = strcspn(p, "/?");
        if (il != SES_ID_LEN || strncmp(p + il, "/ports/", 7) != 0)
                return false;
        const char *num = p + il + 7;
        size_t nl = strspn(num, "0123456789");
        if (nl == 0 || nl > 5 || (num[nl] != '\0' && num[nl] != '/' && num[nl] != '?'))
                return false;
        long v = strtol(num, NULL, 10);
        if (v < 1 || v > 65535)
                return false;
        memcpy(id, p, SES_ID_LEN);
        id[SES_ID_LEN] = '\0';
        *port = (uint16_t)v;
        *rest = num + nl;
        return true;
}

/* An answer to a proxied request, its body (if any) dropped. */
#define PROXY_ERROR(c, status, ...)                             \
        do {                                                    \
                (c)->state = CONN_BODY_DISCARD;                 \
                conn_reply_error((c), (status), __VA_ARGS__);   \
        } while (0)

/* The same request again, its session resumed (lifetime_wake). */
static void ports_intercept_again(struct conn *c) { (void)ports_intercept(c); }

bool ports_intercept(struct conn *c) {
        const struct http_request *r = c->req;
        uint16_t port;
        char id[SES_ID_LEN + 1];
        const char *rest = NULL;
        bool by_host = host_route(c->d, http_request_header(r, "Host"), &port, id);
        if (!by_host) {
                if (!path_route(r->target, &port, id, &rest))
                        return false;
                /* The API's own: DELETE …/ports/PORT, and port-forward's upgrade. */
                if (*rest != '/' && strcmp(r->method, "DELETE") == 0)
                        return false;
                if (strncmp(rest, "/forward", 8) == 0 && (rest[8] == '\0' || rest[8] == '?'))
                        return false;
        }
        struct session *s = ses_find(c->d, id);
        struct ses_port *p = s && !s->freed && s->state != META_SESSION_TERMINATED ? port_find(s, port) : NULL;
        if (!p) {
                /* The same answer whether the session exists or not. */
                PROXY_ERROR(c, 404, "no exposed port %u on session %s", port, id);
                return true;
        }
        bool via_query;
        switch (port_pass(c, s, p, &via_query)) {
        case PASS_OK:
                break;
        case PASS_NONE:
                PROXY_ERROR(c, 401,
                            "port %u of session %s needs its token (Authorization: Bearer, " PORT_TOKEN_HEADER
                            ", or ?" PORT_TOKEN_QUERY "=)",
                            port, id);
                return true;
        case PASS_WRONG:
                PROXY_ERROR(c, 403, "that token does not open port %u of session %s", port, id);
                return true;
        case PASS_FAIL:
                PROXY_ERROR(c, 500, "checking the token failed");
                return true;
        }
        char prefix[64];
        snprintf(prefix, sizeof prefix, "/v1/sessions/%s/ports/%u", id, port);
        const char *path = by_host ? r->target : rest;
        size_t path_len = strcspn(path, "?");
        const char *query = strchr(path, '?') ? strchr(path, '?') + 1 : "";
        bool reads = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
        if (!by_host && path_len == 0 && reads) {
                /* …/ports/8000 -> …/ports/8000/: relative links then resolve below it. */
                struct buf loc = BUF_INIT(0);
                if (buf_printf(&loc, "Location: %s/", prefix) == 0 && query_append(&loc, query) == 0 &&
                    buf_puts(&loc, "\r\n") == 0 && buf_cstr(&loc)) {
                        c->state = CONN_BODY_DISCARD;
                        conn_reply_headers(c, 308, loc.data);
                } else
                        PROXY_ERROR(c, 500, "out of memory");
                buf_free(&loc);
                return true;
        }
        if (via_query && reads) {
                /* A browser's first visit: the token becomes a cookie of this host (and, by
                 * path, of this port) and leaves the address bar. */
                char tok[PORT_TOKEN_LEN + 1];
                struct buf h = BUF_INIT(0);
                if (http_query_get(r->query, PORT_TOKEN_QUERY, tok, sizeof tok) == 0 &&
                    buf_printf(&h, "Set-Cookie: " PORT_COOKIE "=%s; Path=%s/; HttpOnly; SameSite=Lax\r\nLocation: ", tok,
                               by_host ? "" : prefix) == 0 &&
                    (by_host ? 0 : buf_puts(&h, prefix)) == 0 && buf_append(&h, path, path_len ? path_len : 1) == 0 &&
                    query_append(&h, query) == 0 && buf_puts(&h, "\r\nCache-Control: no-store\r\n") == 0 && buf_cstr(&h)) {
                        c->state = CONN_BODY_DISCARD;
                        conn_reply_headers(c, 307, h.data);
                } else
                        PROXY_ERROR(c, 500, "out of memory");
                explicit_bzero(tok, sizeof tok);
                explicit_bzero(h.data, h.len);
                buf_free(&h);
                return true;
        }
        /* A request to a port is activity; a paused session with auto_resume runs it once
         * resumed (daemon/lifetime.h). */
        lifetime_touch(s);
        if (!ses_usable(s) && lifetime_wake(c, s, ports_intercept_again))
                return true;
        if (!ses_usable(s)) {
                PROXY_ERROR(c, 503, "session %s is not running (%s)", id, meta_session_state_name(s->state));
                return true;
        }
        struct proxy *px = calloc(1, sizeof *px);
        if (!px) {
                PROXY_ERROR(c, 500, "out of memory");
                return true;
        }
        px->port = port;
        px->head = BUF_INIT(0);
        bool upgrade = is_upgrade(r);
        px->mode = upgrade ? INGRESS_PIPE_RAW : INGRESS_PIPE_HTTP;
        if (upstream_head(r, path_len ? path : "/", path_len ? path_len : 1, query, by_host ? NULL : prefix, upgrade,
                          &px->head) < 0) {
                proxy_free(px);
                PROXY_ERROR(c, 500, "out of memory");
                return true;
        }
        proxy_start(c, s, px);
        return true;
}

/* GET /v1/sessions/{id}/ports/{port}/forward, Upgrade: space-tcp: raw TCP to the port
 * (exposed or not) for the session's owner. */
void api_port_forward(struct conn *c) {
        struct session *s = ports_session(c, true);
        uint16_t port;
        if (!s || port_parse(c, api_param(&c->params, "port"), NULL, &port) < 0)
                return;
        const char *up = http_request_header(c->req, "Upgrade");
        if (!up || strcasecmp(up, PORT_FORWARD_PROTO) != 0 ||
            !http_header_has_token(c->req, "Connection", "upgrade")) {
                conn_reply_error(c, 426, "port-forward needs \"Connection: Upgrade\" and \"Upgrade: " PORT_FORWARD_PROTO
                                         "\"");
                return;
        }
        struct proxy *px = calloc(1, sizeof *px);
        if (!px) {
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        px->port = port;
        px->head = BUF_INIT(0);
        px->mode = INGRESS_PIPE_RAW;
        px->forward = true;
        proxy_start(c, s, px);
}
