/* Issue 4 end to end through libspace: "reconnect" (a client drops its connection, a new
 * one presents id + token, finds its background process still running and re-attaches to
 * its output exactly where it stopped) and "bad_input" (restore to another session's
 * snapshot, fork of a deleted session, resume of a running one, pause of a paused one, a
 * wrong token: each a clear 4xx, and nothing changes). Usage: test_e2e_durable STATE MODE */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/space.h"

static int fails, checks;
static const char *state_dir;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        checks++;
        printf(ok ? "ok: " : "FAIL: ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        fflush(stdout);
        if (!ok)
                fails++;
}

static int finish(void) {
        printf("== %d checks, %d failed\n", checks, fails);
        return fails ? 1 : 0;
}

/* Appends "session sandbox init_pid" to the fixture's list, so its cleanup proves that
 * nothing of the sandbox is left at the end. */
static void record(space_session *s) {
        struct space_session_info si;
        if (space_session_inspect(s, &si) < 0 || !si.sandbox_id[0])
                return;
        char p[4096];
        snprintf(p, sizeof p, "%s/created", state_dir);
        FILE *f = fopen(p, "ae");
        if (f) {
                fprintf(f, "%s %s %d\n", si.id, si.sandbox_id, si.init_pid);
                fclose(f);
        }
}

struct text {
        char buf[1 << 16];
        size_t len;
};

static int collect(void *ud, enum space_stream st, const void *data, size_t n) {
        struct text *t = ud;
        (void)st;
        size_t take = n < sizeof t->buf - 1 - t->len ? n : sizeof t->buf - 1 - t->len;
        memcpy(t->buf + t->len, data, take);
        t->len += take;
        t->buf[t->len] = '\0';
        return 0;
}

static int run(space_session *s, const char *cmd, struct text *out) {
        memset(out, 0, sizeof *out);
        struct space_exec_result res;
        int r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT,
                                                         .argv = (const char *const[]){ "sh", "-c", cmd, NULL },
                                                         .on_output = collect, .userdata = out },
                           &res);
        if (r == 0 && (!res.exited || res.exit_code != 0))
                r = -ECHILD;
        return r;
}

static const char *code(space_client *c) {
        const char *k = space_client_last_error_code(c);
        return k ? k : "(none)";
}

/* ---- reconnect ------------------------------------------------------------------ */

/* "line0\nline1\n..." must count up from 0 without a gap or a repeat. */
static long check_sequence(const char *text, long *ret_last) {
        long want = 0;
        const char *p = text;
        while (*p) {
                long got;
                int used = 0;
                if (sscanf(p, "line%ld\n%n", &got, &used) != 1 || used == 0 || got != want)
                        return -1;
                want++;
                p += used;
        }
        *ret_last = want - 1;
        return 0;
}

static int reconnect(void) {
        space_client *c1 = NULL;
        int r = space_client_new(&c1, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT });
        check(r == 0, "first client for %s", c1 ? space_client_host(c1) : "?");
        if (r < 0)
                return finish();
        space_session *s = NULL;
        r = space_session_new(&s, c1, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = "base" });
        check(r == 0, "create: %s", r == 0 ? space_session_id(s) : space_client_last_error(c1));
        if (r < 0)
                return finish();
        record(s);
        char id[64], token[SPACE_MAX_TOKEN + 1];
        snprintf(id, sizeof id, "%s", space_session_id(s));
        const char *t = space_session_token(s);
        check(t && strlen(t) >= 43, "create returned a token of %zu characters (43+ wanted)", t ? strlen(t) : 0);
        if (!t)
                return finish();
        snprintf(token, sizeof token, "%s", t);

        /* a background process that keeps printing numbered lines */
        struct space_exec_result res;
        r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT,
                                                     .argv = (const char *const[]){ "sh", "-c",
                                                                                    "i=0; while [ $i -lt 100000 ]; do echo line$i; i=$((i+1)); sleep 0.05; done",
                                                                                    NULL },
                                                     .background = true },
                       &res);
        int pid = res.pid;
        check(r == 0 && pid > 0, "background counter started as pid %d", pid);
        usleep(600 * 1000);
        struct text first = { 0 };
        r = space_attach(s, pid, &(struct space_attach_opts){ SPACE_ATTACH_OPTS_INIT, .on_output = collect, .userdata = &first },
                         &res);
        long last1 = -1;
        check(r == 0 && res.running && check_sequence(first.buf, &last1) == 0 && last1 >= 3,
              "the first client read lines 0..%ld, up to offset %llu (process running: %d)", last1,
              (unsigned long long)res.next_offset, res.running);
        uint64_t offset = res.next_offset;
        check(offset == first.len, "the offset it got (%llu) is the bytes it read (%zu)", (unsigned long long)offset, first.len);

        printf("--- the first client drops: its handle and connection are gone\n");
        space_session_free(s);
        space_client_free(c1);
        sleep(1);

        space_client *c2 = NULL;
        r = space_client_new(&c2, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT });
        check(r == 0, "a new client");
        if (r < 0)
                return finish();
        space_session *bad = NULL;
        r = space_session_connect(&bad, c2, id, "wrong-token-0123456789abcdefghijklmnopqrstuvwxyz");
        check(r == -EPERM && !bad && space_client_last_status(c2) == 401 && strcmp(code(c2), "unauthorized") == 0,
              "connect with a wrong token -> %d, HTTP %d %s: %s", r, space_client_last_status(c2), code(c2),
              space_client_last_error(c2));
        r = space_session_connect(&bad, c2, "ses_00000000deadbeef", token);
        check(r == -ENOENT && !bad && space_client_last_status(c2) == 404, "connect to an unknown id -> 404 (%d)",
              space_client_last_status(c2));
        space_session *s2 = NULL;
        r = space_session_connect(&s2, c2, id, token);
        check(r == 0, "connect with id + token: %s", r == 0 ? "ok" : space_client_last_error(c2));
        if (r < 0)
                return finish();
        const char *js = space_session_json(s2);
        char needle[64];
        snprintf(needle, sizeof needle, "\"pid\":%d", pid);
        check(strstr(js, "\"processes\"") && strstr(js, needle), "the connect answer lists the background process %d", pid);
        struct space_process *ps = NULL;
        size_t np = 0;
        bool running = false;
        if (space_process_list(s2, &ps, &np) == 0)
                for (size_t i = 0; i < np; i++)
                        running |= ps[i].pid == pid && ps[i].running;
        space_process_list_free(ps, np);
        check(running, "the process still runs");

        struct text second = { 0 };
        r = space_attach(s2, pid, &(struct space_attach_opts){ SPACE_ATTACH_OPTS_INIT, .offset = offset, .on_output = collect,
                                                               .userdata = &second },
                         &res);
        check(r == 0 && res.offset == offset, "re-attached from offset %llu (daemon started at %llu)",
              (unsigned long long)offset, (unsigned long long)res.offset);
        long want_next = last1 + 1, got_first = -1;
        sscanf(second.buf, "line%ld", &got_first);
        check(got_first == want_next, "the output goes on at line%ld, the line after the last one read (got line%ld)",
              want_next, got_first);
        struct text joined = { 0 };
        collect(&joined, SPACE_STDOUT, first.buf, first.len);
        collect(&joined, SPACE_STDOUT, second.buf, second.len);
        long last2 = -1;
        check(check_sequence(joined.buf, &last2) == 0 && last2 > last1,
              "old + new output count 0..%ld with no gap and no repeat", last2);

        /* the token is sent with the new handle's requests: a command runs */
        struct text o;
        r = run(s2, "echo still-here", &o);
        check(r == 0 && strcmp(o.buf, "still-here\n") == 0, "exec through the reconnected handle");
        space_session_set_token(s2, "not-the-token-0123456789abcdefghijklmnopqrstuvw");
        r = run(s2, "true", &o);
        check(r == -EPERM && space_client_last_status(c2) == 401, "the same handle with a wrong token -> 401 (%d)",
              space_client_last_status(c2));
        space_session_set_token(s2, token);
        r = space_signal(s2, pid, 9);
        check(r == 0, "kill the counter");
        r = space_session_delete(s2);
        check(r == 0, "delete %s", id);
        space_session_free(s2);
        space_client_free(c2);
        return finish();
}

/* ---- bad input ------------------------------------------------------------------ */

struct look {
        char state[32], sandbox[64], head[64];
        size_t nsnaps;
        char file[256];
};

static void look_at(space_session *s, struct look *l) {
        memset(l, 0, sizeof *l);
        struct space_session_info si;
        if (space_session_inspect(s, &si) == 0) {
                snprintf(l->state, sizeof l->state, "%s", si.state);
                snprintf(l->sandbox, sizeof l->sandbox, "%s", si.sandbox_id);
                snprintf(l->head, sizeof l->head, "%s", si.head_snapshot);
        }
        struct space_snapshot_info *v = NULL;
        if (space_snapshot_list(s, &v, &l->nsnaps) == 0)
                free(v);
        if (strcmp(l->state, "running") == 0) {
                struct text o;
                if (run(s, "cat /root/mark.txt", &o) == 0)
                        snprintf(l->file, sizeof l->file, "%.*s", (int)(sizeof l->file - 1), o.buf);
        }
}

static bool same(const struct look *a, const struct look *b) {
        return strcmp(a->state, b->state) == 0 && strcmp(a->sandbox, b->sandbox) == 0 && strcmp(a->head, b->head) == 0 &&
               a->nsnaps == b->nsnaps && strcmp(a->file, b->file) == 0;
}

static void show(const char *what, const struct look *l) {
        printf("    %s: state %s, sandbox %s, head %s, %zu snapshots, mark.txt '%.*s'\n", what, l->state, l->sandbox,
               l->head[0] ? l->head : "-", l->nsnaps, (int)strcspn(l->file, "\n"), l->file);
}

static bool is_4xx(space_client *c, int status, const char *want_code) {
        const char *msg = space_client_last_error(c);
        return space_client_last_status(c) == status && strcmp(code(c), want_code) == 0 && msg && strlen(msg) > 5;
}

static int bad_input(void) {
        space_client *c = NULL;
        int r = space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT });
        check(r == 0, "client for %s", c ? space_client_host(c) : "?");
        if (r < 0)
                return finish();
        space_session *a = NULL, *b = NULL, *d = NULL;
        struct space_session_opts so = { SPACE_SESSION_OPTS_INIT, .template = "base", .no_rolling_snapshots = true };
        r = space_session_new(&a, c, &so);
        check(r == 0, "session A: %s", r == 0 ? space_session_id(a) : space_client_last_error(c));
        if (r == 0)
                r = space_session_new(&b, c, &so);
        check(r == 0, "session B: %s", r == 0 ? space_session_id(b) : space_client_last_error(c));
        if (r < 0)
                return finish();
        record(a);
        record(b);
        struct text o;
        run(a, "echo A >/root/mark.txt", &o);
        run(b, "echo B >/root/mark.txt", &o);
        struct space_snapshot_info sa, sb;
        r = space_snapshot_create(a, "a1", &sa);
        check(r == 0, "snapshot of A: %s", sa.id);
        r = space_snapshot_create(b, "b1", &sb);
        check(r == 0, "snapshot of B: %s", sb.id);
        run(a, "echo A2 >/root/mark.txt", &o);
        struct look before, after;

        printf("--- restore A to a snapshot of B\n");
        look_at(a, &before);
        r = space_session_restore(a, sb.id);
        check(r == -ENOENT && is_4xx(c, 404, "not_found"), "-> %d, HTTP %d %s: %s", r, space_client_last_status(c), code(c),
              space_client_last_error(c));
        look_at(a, &after);
        show("before", &before);
        show("after ", &after);
        check(same(&before, &after) && strcmp(after.file, "A2\n") == 0, "A is unchanged");
        r = space_session_restore(a, "snap_00000000deadbeef");
        check(r == -ENOENT && is_4xx(c, 404, "not_found"), "restore A to an unknown snapshot -> HTTP %d %s: %s",
              space_client_last_status(c), code(c), space_client_last_error(c));

        printf("--- fork a deleted session\n");
        r = space_session_new(&d, c, &so);
        check(r == 0, "session D: %s", r == 0 ? space_session_id(d) : space_client_last_error(c));
        if (r < 0)
                return finish();
        record(d);
        struct space_session_info *list = NULL;
        size_t n_before = 0, n_after = 0;
        r = space_session_delete(d);
        check(r == 0, "delete D");
        space_session_list(c, &list, &n_before);
        free(list);
        space_session **forks = NULL;
        size_t nf = 0;
        r = space_session_fork(d, &(struct space_fork_opts){ SPACE_FORK_OPTS_INIT, .count = 2 }, &forks, &nf);
        check(r == -ENOENT && is_4xx(c, 404, "not_found"), "-> %d, HTTP %d %s: %s", r, space_client_last_status(c), code(c),
              space_client_last_error(c));
        if (r == 0)
                space_session_array_free(forks, nf);
        space_session_list(c, &list, &n_after);
        free(list);
        check(n_after == n_before, "no session was made (%zu listed before, %zu after)", n_before, n_after);
        r = space_session_fork(d, &(struct space_fork_opts){ SPACE_FORK_OPTS_INIT, .snapshot = sa.id }, &forks, &nf);
        check(r == -ENOENT, "fork of the deleted D from A's snapshot -> HTTP %d %s", space_client_last_status(c), code(c));
        if (r == 0)
                space_session_array_free(forks, nf);

        printf("--- resume a running session, pause a paused one\n");
        look_at(b, &before);
        r = space_session_resume(b);
        check(r == -EEXIST && is_4xx(c, 409, "conflict"), "resume of running B -> %d, HTTP %d %s: %s", r,
              space_client_last_status(c), code(c), space_client_last_error(c));
        look_at(b, &after);
        check(same(&before, &after) && strcmp(after.file, "B\n") == 0, "B is unchanged (same sandbox %s)", after.sandbox);
        r = space_session_pause(b);
        check(r == 0, "pause B");
        look_at(b, &before);
        r = space_session_pause(b);
        check(r == -EEXIST && is_4xx(c, 409, "conflict"), "pause of paused B -> %d, HTTP %d %s: %s", r,
              space_client_last_status(c), code(c), space_client_last_error(c));
        look_at(b, &after);
        check(same(&before, &after) && strcmp(after.state, "paused") == 0, "B is still paused with %zu snapshots",
              after.nsnaps);
        r = space_session_resume(b);
        check(r == 0, "resume B");
        record(b);

        printf("--- a wrong token\n");
        space_session *wrong = NULL;
        r = space_session_open(&wrong, c, space_session_id(a));
        check(r == 0, "a second handle on A");
        if (r < 0)
                return finish();
        space_session_set_token(wrong, space_session_token(b)); /* B's token: real, but not A's */
        look_at(a, &before);
        r = space_session_pause(wrong);
        check(r == -EPERM && is_4xx(c, 401, "unauthorized"), "pause A with B's token -> %d, HTTP %d %s: %s", r,
              space_client_last_status(c), code(c), space_client_last_error(c));
        r = space_snapshot_create(wrong, "sneaky", NULL);
        check(r == -EPERM && is_4xx(c, 401, "unauthorized"), "snapshot A with B's token -> HTTP %d",
              space_client_last_status(c));
        r = space_session_restore(wrong, sa.id);
        check(r == -EPERM && is_4xx(c, 401, "unauthorized"), "restore A with B's token -> HTTP %d",
              space_client_last_status(c));
        r = run(wrong, "echo hacked >/root/mark.txt", &o);
        check(r == -EPERM && is_4xx(c, 401, "unauthorized"), "exec in A with B's token -> HTTP %d",
              space_client_last_status(c));
        r = space_event_append(wrong, "note", "{\"x\":1}", NULL);
        check(r == -EPERM, "append an event to A with B's token -> HTTP %d", space_client_last_status(c));
        r = space_session_delete(wrong);
        check(r == -EPERM && is_4xx(c, 401, "unauthorized"), "delete A with B's token -> HTTP %d",
              space_client_last_status(c));
        look_at(a, &after);
        show("before", &before);
        show("after ", &after);
        check(same(&before, &after) && strcmp(after.file, "A2\n") == 0, "A is unchanged");
        space_session_set_token(wrong, space_session_token(a));
        r = run(wrong, "true", &o);
        check(r == 0, "the same handle with A's own token works");
        space_session_free(wrong);

        r = space_session_delete(a);
        check(r == 0, "delete A");
        r = space_session_delete(b);
        check(r == 0, "delete B");
        space_session_free(a);
        space_session_free(b);
        space_session_free(d);
        space_client_free(c);
        return finish();
}

int main(int argc, char **argv) {
        if (getuid() != 0) {
                printf("SKIP: end-to-end tests need root\n");
                return 77;
        }
        if (argc != 3) {
                fprintf(stderr, "usage: %s STATE_DIR reconnect|bad_input\n", argv[0]);
                return 2;
        }
        state_dir = argv[1];
        char p[4096], host[4096] = "";
        snprintf(p, sizeof p, "%s/host", state_dir);
        FILE *f = fopen(p, "re");
        if (!f || !fgets(host, sizeof host, f)) {
                printf("FAIL: no daemon state in %s\n", state_dir);
                return 1;
        }
        fclose(f);
        host[strcspn(host, "\n")] = '\0';
        setenv("SPACE_HOST", host, 1);
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (strcmp(argv[2], "reconnect") == 0)
                return reconnect();
        if (strcmp(argv[2], "bad_input") == 0)
                return bad_input();
        fprintf(stderr, "unknown mode %s\n", argv[2]);
        return 2;
}
