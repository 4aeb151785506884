/* space cp: files and directory trees between the host and a sandbox (its row is in
 * commands.c). A download goes into a temporary beside its target, renamed on success. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/json.h"

#define MAX_CP_DEPTH 64

static const char *base_name(const char *p) {
        size_t n = strlen(p);
        while (n > 1 && p[n - 1] == '/')
                n--;
        const char *s = p + n;
        while (s > p && s[-1] != '/')
                s--;
        return s;
}

/* dir + "/" + name without doubled slashes; trailing slashes of name dropped. */
static int join_path(char *out, size_t n, const char *dir, const char *name) {
        size_t nl = strlen(name);
        while (nl > 1 && name[nl - 1] == '/')
                nl--;
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/')
                dl--;
        int w = snprintf(out, n, "%.*s%s%.*s", (int)dl, dir, dl == 1 && dir[0] == '/' ? "" : "/", (int)nl, name);
        return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

/* Both sides of one entry of a directory being copied: 0, or EXIT_FAILURE after saying
 * the path is too long. */
static int join_both(char lp[static PATH_MAX], const char *local, char rp[static PATH_MAX], const char *remote,
                     const char *name, const char *shown_dir) {
        if (join_path(lp, PATH_MAX, local, name) < 0 || join_path(rp, PATH_MAX, remote, name) < 0)
                return cli_error("%s/%s: path too long", shown_dir, name);
        return 0;
}

static bool is_dir_type(const char *type) { return strcmp(type, "dir") == 0 || strcmp(type, "directory") == 0; }

static int upload_file(const struct cli_call *call, const char *local, const char *remote, bool parents) {
        _cleanup_close_ int fd = strcmp(local, "-") == 0 ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3)
                                                       : open(local, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return cli_error("%s: %s", local, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return cli_error("%s: %s", local, strerror(errno));
        unsigned mode = S_ISREG(st.st_mode) ? (st.st_mode & 07777) : 0644;
        int r = space_file_upload_fd_as(call->session, remote, fd, mode, parents, cli_opt_str(call, "user"), NULL);
        if (r < 0)
                return cli_api_fail(call, r);
        return 0;
}

static int upload_tree(const struct cli_call *call, const char *local, const char *remote, bool parents, int depth) {
        if (depth > MAX_CP_DEPTH)
                return cli_error("%s: directories nested deeper than %d", local, MAX_CP_DEPTH);
        if (strcmp(local, "-") == 0)
                return upload_file(call, local, remote, parents);
        struct stat st;
        if (stat(local, &st) < 0)
                return cli_error("%s: %s", local, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return upload_file(call, local, remote, parents);
        int r = space_file_mkdir_as(call->session, remote, parents, cli_opt_str(call, "user"));
        if (r < 0 && r != -EEXIST)
                return cli_api_fail(call, r);
        _cleanup_closedir_ DIR *d = opendir(local);
        if (!d)
                return cli_error("%s: %s", local, strerror(errno));
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                char lp[PATH_MAX], rp[PATH_MAX];
                if ((r = join_both(lp, local, rp, remote, de->d_name, local)))
                        return r;
                struct stat est;
                if (lstat(lp, &est) < 0)
                        return cli_error("%s: %s", lp, strerror(errno));
                if (!S_ISDIR(est.st_mode) && !S_ISREG(est.st_mode)) {
                        fprintf(stderr, "space: skipping %s: not a regular file or directory\n", lp);
                        continue;
                }
                r = upload_tree(call, lp, rp, false, depth + 1);
                if (r)
                        return r;
        }
        return 0;
}

static int download_file(const struct cli_call *call, const char *remote, const char *local, unsigned mode) {
        if (strcmp(local, "-") == 0) {
                int r = space_file_download_fd(call->session, remote, STDOUT_FILENO, NULL);
                return r < 0 ? cli_api_fail(call, r) : 0;
        }
        /* into a temporary beside the target, renamed on success: a failed copy leaves
         * no half-written file behind */
        char tmp[PATH_MAX];
        if (snprintf(tmp, sizeof tmp, "%s.space-cp-%d", local, (int)getpid()) >= (int)sizeof tmp)
                return cli_error("%s: path too long", local);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode ? mode & 0777 : 0644);
        if (fd < 0)
                return cli_error("%s: %s", local, strerror(errno));
        int r = space_file_download_fd(call->session, remote, fd, NULL);
        if (r < 0) {
                unlink(tmp);
                return cli_api_fail(call, r);
        }
        if (close(TAKE_FD(fd)) < 0 || rename(tmp, local) < 0) {
                int e = errno;
                unlink(tmp);
                return cli_error("%s: %s", local, strerror(e));
        }
        return 0;
}

static int download_tree(const struct cli_call *call, const char *remote, const struct space_stat *rst,
                         const char *local, int depth) {
        if (depth > MAX_CP_DEPTH)
                return cli_error("%s: directories nested deeper than %d", remote, MAX_CP_DEPTH);
        if (!is_dir_type(rst->type))
                return download_file(call, remote, local, rst->mode);
        if (strcmp(local, "-") == 0)
                return cli_error("%s is a directory; it can't go to stdout", remote);
        if (mkdir(local, 0755) < 0 && errno != EEXIST)
                return cli_error("%s: %s", local, strerror(errno));
        struct space_dirent *ents = NULL;
        size_t n = 0;
        int r = space_file_list(call->session, remote, &ents, &n);
        if (r < 0)
                return cli_api_fail(call, r);
        int status = 0;
        for (size_t i = 0; i < n && !status; i++) {
                char lp[PATH_MAX], rp[PATH_MAX];
                if (strcmp(ents[i].name, ".") == 0 || strcmp(ents[i].name, "..") == 0 || strchr(ents[i].name, '/'))
                        continue;
                if ((status = join_both(lp, local, rp, remote, ents[i].name, remote)))
                        break;
                const char *t = ents[i].st.type;
                if (strcmp(t, "file") != 0 && !is_dir_type(t) && strcmp(t, "regular") != 0) {
                        fprintf(stderr, "space: skipping %s: not a regular file or directory\n", rp);
                        continue;
                }
                status = download_tree(call, rp, &ents[i].st, lp, depth + 1);
        }
        free(ents);
        return status;
}

/* What cp's check leaves for its run. */
struct cp_args {
        struct cli_cp_arg src, dst;
        char target[PATH_MAX]; /* DST with SRC's name, when DST is a directory */
};

int cli_cp_check(struct cli_call *call) {
        struct cp_args *a = calloc(1, sizeof *a);
        if (!a)
                return cli_error("out of memory");
        call->args = a;
        for (int i = 0; i < 2; i++)
                if (cli_parse_cp_arg(call->argv[i], i ? &a->dst : &a->src) < 0)
                        return cli_usage(call->cmd, "'%s': a sandbox path must be ID:/absolute/path", call->argv[i]);
        if (a->src.remote == a->dst.remote)
                return cli_usage(call->cmd, a->src.remote ? "copying between sandboxes is not supported"
                                                          : "one side must be a sandbox path (ID:/path)");
        if (a->src.remote && cli_opt_set(call, "user"))
                return cli_usage(call->cmd, "--user applies to copies into a sandbox");
        call->session_id = a->src.remote ? a->src.id : a->dst.id;
        return 0;
}

static int cp_download(struct cli_call *call) {
        struct cp_args *a = call->args;
        struct space_stat rst;
        int e = space_file_stat(call->session, a->src.path, &rst);
        if (e < 0)
                return cli_api_fail(call, e);
        struct stat lst;
        const char *local = a->dst.path;
        size_t dl = strlen(local);
        if (strcmp(local, "-") != 0 && ((stat(local, &lst) == 0 && S_ISDIR(lst.st_mode)) || local[dl - 1] == '/')) {
                if (join_path(a->target, sizeof a->target, local, base_name(a->src.path)) < 0)
                        return cli_error("%s: path too long", local);
                local = a->target;
        }
        return download_tree(call, a->src.path, &rst, local, 0);
}

static int cp_upload(struct cli_call *call) {
        struct cp_args *a = call->args;
        const char *remote = a->dst.path, *local = a->src.path;
        bool stdin_src = strcmp(local, "-") == 0;
        bool into = remote[strlen(remote) - 1] == '/';
        if (!into && !stdin_src) {
                struct space_stat rst;
                if (space_file_stat(call->session, remote, &rst) == 0 && is_dir_type(rst.type))
                        into = true;
        }
        if (into) {
                if (stdin_src)
                        return cli_usage(call->cmd, "copying stdin needs a file name, not a directory");
                if (join_path(a->target, sizeof a->target, remote, base_name(local)) < 0)
                        return cli_error("%s: path too long", remote);
                remote = a->target;
        }
        struct stat lst;
        if (!stdin_src && stat(local, &lst) < 0)
                return cli_error("%s: %s", local, strerror(errno));
        return upload_tree(call, local, remote, cli_opt_set(call, "parents"), 0);
}

int cli_cp(struct cli_call *call) {
        struct cp_args *a = call->args;
        return a->src.remote ? cp_download(call) : cp_upload(call);
}

/* ---- space watch ------------------------------------------------------------------ */

struct watch_print {
        bool json;
        uint64_t count, printed; /* --count: stop after that many events (0: never) */
        int err;
};

static int watch_line(void *ud, const struct space_watch_event *ev) {
        struct watch_print *p = ud;
        int r;
        if (p->json) {
                _cleanup_buf_ struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_kstr(&w, "type", ev->type);
                if (strcmp(ev->type, "overflow") != 0) {
                        json_w_kstr(&w, "path", ev->path);
                        json_w_kbool(&w, "dir", ev->dir);
                } else if (ev->reason)
                        json_w_kstr(&w, "reason", ev->reason);
                json_w_obj_end(&w);
                if (w.err || !buf_cstr(&b))
                        return w.err ? w.err : -ENOMEM;
                r = printf("%s\n", b.data);
        } else if (!strcmp(ev->type, "overflow"))
                r = printf("overflow     (events were lost: %s)\n", ev->reason ? ev->reason : "changes came faster than they were read");
        else
                r = printf("%-12s %s%s\n", ev->type, ev->path, ev->dir && strcmp(ev->path, "/") != 0 ? "/" : "");
        if (r < 0 || fflush(stdout) != 0) {
                p->err = -EIO;
                return -EIO;
        }
        return p->count && ++p->printed >= p->count ? 1 : 0;
}

int cli_watch(struct cli_call *call) {
        struct watch_print p = { .json = call->json, .count = cli_opt_u64(call, "count") };
        char reason[64];
        int e = space_file_watch(call->session, call->argv[1], !cli_opt_set(call, "no-recursive"), watch_line, &p,
                                 reason, sizeof reason);
        if (p.err)
                return cli_error("writing the events: %s", strerror(-p.err));
        if (e < 0)
                return cli_api_fail(call, e);
        if (reason[0])
                fprintf(stderr, "space: the watch ended: %s\n", reason);
        return EXIT_SUCCESS;
}
