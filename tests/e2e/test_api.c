/* End to end through libspace (no CLI): create, exec with output callbacks and exit
 * codes, files written by the API read by a command and the other way, background
 * process + attach, process list, signal, stat/list/mkdir/remove, error codes, delete.
 * Talks to the daemon named by $SPACE_HOST (set from the e2e fixture's state). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/space.h"

static int fails, checks;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        checks++;
        printf(ok ? "ok: " : "FAIL: ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        if (!ok)
                fails++;
}

struct out {
        char text[4096];
        size_t len;
        char err[1024];
        size_t elen;
        int start_pid;
};

static int collect(void *ud, enum space_stream st, const void *data, size_t n) {
        struct out *o = ud;
        char *dst = st == SPACE_STDOUT ? o->text : o->err;
        size_t *len = st == SPACE_STDOUT ? &o->len : &o->elen;
        size_t cap = st == SPACE_STDOUT ? sizeof o->text : sizeof o->err;
        size_t take = n < cap - 1 - *len ? n : cap - 1 - *len;
        memcpy(dst + *len, data, take);
        *len += take;
        dst[*len] = '\0';
        return 0;
}

static void on_start(void *ud, int pid) { ((struct out *)ud)->start_pid = pid; }

static int run(space_session *s, struct out *o, struct space_exec_result *res, const char *const *argv,
               const char *in) {
        memset(o, 0, sizeof *o);
        return space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv, .stdin_data = in,
                                                         .stdin_len = in ? strlen(in) : 0, .on_output = collect,
                                                         .on_start = on_start, .userdata = o },
                          res);
}

int main(int argc, char **argv) {
        if (getuid() != 0) {
                printf("SKIP: end-to-end tests need root\n");
                return 77;
        }
        if (argc > 1) {
                /* the fixture's state dir: read the daemon's address from it */
                char p[4096], host[4096] = "";
                snprintf(p, sizeof p, "%s/host", argv[1]);
                FILE *f = fopen(p, "re");
                if (!f || !fgets(host, sizeof host, f)) {
                        printf("FAIL: no daemon state in %s\n", argv[1]);
                        return 1;
                }
                fclose(f);
                host[strcspn(host, "\n")] = '\0';
                setenv("SPACE_HOST", host, 1);
        }
        space_client *c = NULL;
        int r = space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT });
        check(r == 0, "client for %s", c ? space_client_host(c) : "?");
        if (r < 0)
                return 1;
        space_session *s = NULL;
        r = space_session_new(&s, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = "base",
                                                                   .memory = 256u << 20, .pids = 256 });
        check(r == 0, "space_session_new: %s", r == 0 ? space_session_id(s) : space_client_last_error(c));
        if (r < 0)
                return 1;

        struct out o;
        struct space_exec_result res;
        r = run(s, &o, &res, (const char *const[]){ "python3", "-c", "print(6*7)", NULL }, NULL);
        check(r == 0 && res.exited && res.exit_code == 0 && strcmp(o.text, "42\n") == 0,
              "python3 -c 'print(6*7)' -> '%.*s' exit %d", (int)strcspn(o.text, "\n"), o.text, res.exit_code);
        check(o.start_pid > 0 && o.start_pid == res.pid, "the start event gave pid %d", o.start_pid);
        r = run(s, &o, &res, (const char *const[]){ "sh", "-c", "echo err >&2; exit 3", NULL }, NULL);
        check(r == 0 && res.exit_code == 3 && strcmp(o.err, "err\n") == 0, "exit 3 with stderr 'err' (r=%d code=%d)", r,
              res.exit_code);
        r = run(s, &o, &res, (const char *const[]){ "tr", "a-z", "A-Z", NULL }, "stdin text");
        check(r == 0 && strcmp(o.text, "STDIN TEXT") == 0, "stdin reaches tr: '%s'", o.text);
        r = run(s, &o, &res, (const char *const[]){ "/nonexistent/cmd", NULL }, NULL);
        check(r == -ENOEXEC && space_client_last_error_code(c) && strcmp(space_client_last_error_code(c), "exec_failed") == 0,
              "a missing command -> -ENOEXEC, code %s: %s", space_client_last_error_code(c) ? space_client_last_error_code(c) : "(none)",
              space_client_last_error(c));

        /* files: API -> command */
        static const char content[] = "from the API\n\x01\x02binary\xff";
        r = space_file_write(s, "/root/api.bin", content, sizeof content - 1, 0600, false);
        check(r == 0, "space_file_write /root/api.bin");
        r = run(s, &o, &res, (const char *const[]){ "sh", "-c", "stat -c %a /root/api.bin; head -c 13 /root/api.bin", NULL }, NULL);
        check(r == 0 && strcmp(o.text, "600\nfrom the API\n") == 0, "a command reads it back with its mode: '%s'", o.text);
        /* command -> API */
        r = run(s, &o, &res, (const char *const[]){ "sh", "-c", "printf 'made by a command' > /root/cmd.txt", NULL }, NULL);
        char *data = NULL;
        size_t len = 0;
        r = space_file_read(s, "/root/cmd.txt", 1 << 20, &data, &len);
        check(r == 0 && len == 17 && memcmp(data, "made by a command", 17) == 0, "space_file_read gets what the command wrote");
        free(data);
        data = NULL;
        r = space_file_read(s, "/root/api.bin", 1 << 20, &data, &len);
        check(r == 0 && len == sizeof content - 1 && memcmp(data, content, len) == 0, "binary file round trip");
        free(data);
        struct space_stat st;
        r = space_file_stat(s, "/root/cmd.txt", &st);
        check(r == 0 && st.size == 17 && (st.mode & 0777) == 0644, "stat: type %s size %llu mode %o", st.type,
              (unsigned long long)st.size, st.mode & 07777);
        r = space_file_mkdir(s, "/root/d/e", true);
        check(r == 0, "mkdir -p /root/d/e");
        struct space_dirent *ents = NULL;
        size_t n = 0;
        r = space_file_list(s, "/root", &ents, &n);
        bool saw_d = false, saw_cmd = false;
        for (size_t i = 0; r == 0 && i < n; i++) {
                saw_d |= strcmp(ents[i].name, "d") == 0;
                saw_cmd |= strcmp(ents[i].name, "cmd.txt") == 0;
        }
        free(ents);
        check(r == 0 && saw_d && saw_cmd, "list /root shows d and cmd.txt (%zu entries)", n);
        r = space_file_remove(s, "/root/d", true);
        check(r == 0, "remove -r /root/d");
        r = space_file_stat(s, "/root/d", &st);
        check(r == -ENOENT, "stat of the removed dir -> -ENOENT (%d)", r);
        r = space_file_read(s, "/root/../../etc/../root/cmd.txt", 1 << 20, &data, &len);
        check(r == 0 || r == -EINVAL || r == -ENOENT, "a path with .. is confined or refused (%d)", r);
        if (r == 0)
                free(data);

        /* background + attach + signal */
        r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT,
                                                     .argv = (const char *const[]){ "sh", "-c", "echo one; sleep 1; echo two", NULL },
                                                     .background = true },
                       &res);
        int bg = res.pid;
        check(r == 0 && bg > 0, "background exec -> pid %d", bg);
        memset(&o, 0, sizeof o);
        r = space_attach(s, bg, &(struct space_attach_opts){ SPACE_ATTACH_OPTS_INIT, .follow = true, .on_output = collect,
                                                             .userdata = &o },
                         &res);
        check(r == 0 && res.exited && res.exit_code == 0 && strcmp(o.text, "one\ntwo\n") == 0,
              "attach --follow saw 'one two' and the exit");
        r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = (const char *const[]){ "sleep", "600", NULL },
                                                     .background = true },
                       &res);
        int sl = res.pid;
        r = space_signal(s, sl, 15);
        check(r == 0, "SIGTERM to sleep %d", sl);
        bool ended = false;
        for (int i = 0; i < 50 && !ended; i++) {
                struct space_process *ps = NULL;
                size_t np = 0;
                if (space_process_list(s, &ps, &np) == 0)
                        for (size_t k = 0; k < np; k++)
                                if (ps[k].pid == sl && !ps[k].running && ps[k].signal == 15)
                                        ended = true;
                space_process_list_free(ps, np);
                if (!ended)
                        usleep(100 * 1000);
        }
        check(ended, "the process list shows sleep ended by signal 15");
        r = space_signal(s, 99999, 9);
        check(r < 0, "signal to an unknown pid fails (%d: %s)", r, space_client_last_error(c));

        /* session info, list, errors */
        struct space_session_info si;
        r = space_session_inspect(s, &si);
        check(r == 0 && strcmp(si.state, "running") == 0 && si.memory_limit == 256u << 20 && si.pids_limit == 256 &&
                      si.alive,
              "inspect: %s, memory %llu, pids %lld, alive %d", si.state, (unsigned long long)si.memory_limit,
              (long long)si.pids_limit, si.alive);
        struct space_session_info *list = NULL;
        size_t nl = 0;
        r = space_session_list(c, &list, &nl);
        bool found = false;
        for (size_t i = 0; r == 0 && i < nl; i++)
                found |= strcmp(list[i].id, space_session_id(s)) == 0;
        free(list);
        check(found, "the session list has it (%zu sessions)", nl);
        space_session *bad = NULL;
        r = space_session_open(&bad, c, "ses_0000000000000000");
        check(r == -ENOENT && bad == NULL && space_client_last_error_code(c) &&
                      strcmp(space_client_last_error_code(c), "not_found") == 0,
              "an unknown session -> -ENOENT, not_found: %s", space_client_last_error(c));
        r = space_session_new(&bad, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = "no-such-template" });
        check(r < 0 && bad == NULL, "an unknown template is refused (%d: %s)", r, space_client_last_error(c));

        struct space_template_info *tl = NULL;
        size_t nt = 0;
        r = space_template_list(c, &tl, &nt);
        bool base = false;
        for (size_t i = 0; r == 0 && i < nt; i++)
                base |= strcmp(tl[i].name, "base") == 0 && tl[i].size_bytes > 0;
        free(tl);
        check(base, "the template list has base");

        char id[64];
        snprintf(id, sizeof id, "%s", space_session_id(s));
        r = space_session_delete(s);
        check(r == 0, "delete");
        space_session_free(s);
        r = space_session_open(&s, c, id);
        check(r == -ENOENT, "the deleted session is gone (%d)", r);
        space_client_free(c);
        printf("== %d checks, %d failed\n", checks, fails);
        return fails ? 1 : 0;
}
