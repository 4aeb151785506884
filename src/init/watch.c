/* File watching (op "watch", docs/protocol.md §3.17): inotify on a directory and, when
 * recursive, on every directory below it, the ones made later included. Events become
 * NDJSON lines in a bounded queue that drains into STDOUT frames as the stream's window and
 * the connection allow; a queue that would overflow is replaced by one "overflow" event,
 * so a slow reader learns that it lost events instead of losing them silently. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "common/log.h"
#include "init/init.h"

#define FSW_MASK                                                                                      \
        (IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | \
         IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
#define FSW_FRAME (64u << 10)  /* STDOUT payload per frame */
#define FSW_MOVES 64           /* directory moves waiting for their IN_MOVED_TO in one batch */
#define FSW_READS 16           /* inotify reads per wake-up, so one busy watch can't hog the loop */

struct fsw_dir {
        int wd;
        char *path; /* absolute, normalized; "/" for the root */
};

struct fsw_move {
        uint32_t cookie;
        char *path;
};

struct fswatch {
        struct watch w; /* the inotify fd */
        bool recursive;
        int root_wd;
        struct fsw_dir *dirs; /* sorted by wd */
        size_t n_dirs, cap_dirs;
        struct buf q;     /* NDJSON not sent yet */
        size_t q_events;  /* lines in q (the one partly sent included) */
        bool q_mid_line;  /* q starts in the middle of a line whose head went out */
        struct fsw_move moves[FSW_MOVES];
        size_t n_moves;
        /* "stat" (§3.17): each event of an entry that is there carries its stat, owner
         * and group named from the passwd and group read when the watch began. */
        bool stat;
        struct init_names names;
        const char *end_reason; /* the watched directory went: EXIT once q is sent */
        int end_err;            /* ... or reading inotify failed */
};

static unsigned n_fsw;

static void moves_clear(struct fswatch *f) {
        for (size_t i = 0; i < f->n_moves; i++)
                free(f->moves[i].path);
        f->n_moves = 0;
}

void fsw_free(struct fswatch *f) {
        if (!f)
                return;
        watch_close(&f->w);
        for (size_t i = 0; i < f->n_dirs; i++)
                free(f->dirs[i].path);
        free(f->dirs);
        moves_clear(f);
        buf_free(&f->q);
        user_names_free(&f->names);
        n_fsw--;
        free(f);
}

/* ---- the queue ---- */

/* Drops every whole line still queued: the rest of a line already half sent stays, so the
 * stream never carries a broken line. */
static void queue_drop(struct fswatch *f) {
        size_t keep = 0;
        if (f->q_mid_line) {
                const char *nl = memchr(f->q.data, '\n', f->q.len);
                keep = nl ? (size_t)(nl - f->q.data) + 1 : f->q.len;
        }
        f->q.len = keep;
        f->q_events = keep ? 1 : 0;
}

static bool queue_ends_with(const struct fswatch *f, const char *line, size_t n) {
        if (f->q.len < n || memcmp(f->q.data + f->q.len - n, line, n) != 0)
                return false;
        if (f->q.len == n)
                return !f->q_mid_line;
        return f->q.data[f->q.len - n - 1] == '\n';
}

static void queue_line(struct fswatch *f, const struct buf *line, bool coalesce) {
        if (coalesce && queue_ends_with(f, line->data, line->len))
                return;
        if (f->q_events + 1 > INIT_WATCH_QUEUE_EVENTS || f->q.len + line->len > INIT_WATCH_QUEUE_BYTES ||
            buf_append(&f->q, line->data, line->len) < 0) {
                queue_drop(f);
                static const char ov[] = "{\"type\":\"overflow\"}\n";
                if (buf_append(&f->q, ov, sizeof ov - 1) < 0)
                        return; /* the cap is far above a line and a half: cannot happen */
                f->q_events++;
                return;
        }
        f->q_events++;
}

/* One event line: {"type":T,"path":P,"dir":D} or {"type":"overflow","reason":R}. */
static void fsw_event(struct fswatch *f, const char *type, const char *path, bool dir) {
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "type", type);
        json_w_kstr(&w, "path", path);
        json_w_kbool(&w, "dir", dir);
        struct stat st;
        char target[PATH_MAX];
        ssize_t tlen;
        if (f->stat && strcmp(type, "remove") && strcmp(type, "rename_from") &&
            fs_lstat(path, &st, target, sizeof target, &tlen) == 0) {
                json_w_key(&w, "stat");
                json_w_obj_begin(&w);
                fs_write_stat(&w, &st, &f->names, target, tlen);
                json_w_obj_end(&w);
        }
        json_w_obj_end(&w);
        if (w.err || buf_putc(&b, '\n') < 0)
                return;
        /* A burst of writes to one file is one event while it waits in the queue. */
        queue_line(f, &b, strcmp(type, "write") == 0);
}

static void fsw_overflow(struct fswatch *f, const char *reason) {
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "type", "overflow");
        if (reason)
                json_w_kstr(&w, "reason", reason);
        json_w_obj_end(&w);
        if (w.err || buf_putc(&b, '\n') < 0)
                return;
        queue_line(f, &b, true);
}

/* ---- the directory table ---- */

static size_t dir_pos(const struct fswatch *f, int wd) {
        size_t lo = 0, hi = f->n_dirs;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (f->dirs[mid].wd < wd)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static struct fsw_dir *dir_find(struct fswatch *f, int wd) {
        size_t i = dir_pos(f, wd);
        return i < f->n_dirs && f->dirs[i].wd == wd ? &f->dirs[i] : NULL;
}

static int dir_insert(struct fswatch *f, int wd, const char *path) {
        size_t i = dir_pos(f, wd);
        if (i < f->n_dirs && f->dirs[i].wd == wd)
                return 0; /* the same directory twice (a bind mount): one watch */
        if (f->n_dirs == f->cap_dirs) {
                size_t cap = f->cap_dirs ? f->cap_dirs * 2 : 16;
                struct fsw_dir *d = realloc(f->dirs, cap * sizeof *d);
                if (!d)
                        return -ENOMEM;
                f->dirs = d;
                f->cap_dirs = cap;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        memmove(&f->dirs[i + 1], &f->dirs[i], (f->n_dirs - i) * sizeof *f->dirs);
        f->dirs[i] = (struct fsw_dir){ .wd = wd, .path = p };
        f->n_dirs++;
        return 1;
}

static void dir_remove(struct fswatch *f, struct fsw_dir *d) {
        size_t i = (size_t)(d - f->dirs);
        free(d->path);
        memmove(&f->dirs[i], &f->dirs[i + 1], (f->n_dirs - i - 1) * sizeof *f->dirs);
        f->n_dirs--;
}

/* path is prefix itself or below it. */
static bool under(const char *path, const char *prefix) {
        size_t n = strlen(prefix);
        if (strncmp(path, prefix, n) != 0)
                return false;
        return path[n] == '\0' || path[n] == '/' || (n == 1 && prefix[0] == '/');
}

/* A directory moved out of the tree: its watches (and those below) go. */
static void dirs_forget(struct fswatch *f, const char *prefix) {
        size_t o = 0;
        for (size_t i = 0; i < f->n_dirs; i++) {
                if (f->dirs[i].wd != f->root_wd && under(f->dirs[i].path, prefix)) {
                        (void)inotify_rm_watch(f->w.fd, f->dirs[i].wd);
                        free(f->dirs[i].path);
                        continue;
                }
                f->dirs[o++] = f->dirs[i];
        }
        f->n_dirs = o;
}

/* A directory moved inside the tree: the watches stay, their paths change. */
static void dirs_rename(struct fswatch *f, const char *from, const char *to) {
        size_t fl = strlen(from), tl = strlen(to);
        for (size_t i = 0; i < f->n_dirs; i++) {
                struct fsw_dir *d = &f->dirs[i];
                if (d->wd == f->root_wd || !under(d->path, from))
                        continue;
                size_t rest = strlen(d->path) - fl;
                char *p = malloc(tl + rest + 1);
                if (!p)
                        continue; /* the old path stays: events below it name the old place */
                memcpy(p, to, tl);
                memcpy(p + tl, d->path + fl, rest + 1);
                free(d->path);
                d->path = p;
        }
}

/* ---- adding directories ---- */

static int join(const char *dir, const char *name, char *out, size_t outsz) {
        int n = snprintf(out, outsz, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name);
        return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

/* inotify takes a path, not an fd: "." after fchdir to the opened directory names exactly
 * what openat2 resolved inside the root (no second lookup to race). init's cwd matters to
 * nothing else (children change to their own, file ops use the root fd). */
static int add_watch_fd(struct fswatch *f, int fd) {
        if (fchdir(fd) < 0)
                return -errno;
        int wd = inotify_add_watch(f->w.fd, ".", FSW_MASK);
        int e = errno;
        (void)fchdir(g.root_fd);
        return wd < 0 ? -e : wd;
}

struct worklist {
        char **v;
        size_t n, cap;
};

static void worklist_free(struct worklist *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->v[i]);
        free(l->v);
}

static int worklist_push(struct worklist *l, const char *path) {
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 16;
                char **v = realloc(l->v, cap * sizeof *v);
                if (!v)
                        return -ENOMEM;
                l->v = v;
                l->cap = cap;
        }
        if (!(l->v[l->n] = strdup(path)))
                return -ENOMEM;
        l->n++;
        return 0;
}

/* Watches path and, when recursive, every directory below it. report: the tree is new (a
 * directory made or moved in after the watch began), so what it holds is reported as
 * created (what appeared before its own watch was added would otherwise go unseen).
 * at_start: the first scan, where the limit is an error (-ENOSPC) for the RESP; later, the
 * directories past it go unwatched and one overflow event says so. */
static int add_tree(struct fswatch *f, const char *path, bool report, bool at_start) {
        struct worklist l = {};
        int r = worklist_push(&l, path);
        bool full = false;
        while (r >= 0 && l.n > 0) {
                _cleanup_free_ char *dir = l.v[--l.n];
                bool top = at_start && strcmp(dir, path) == 0;
                _cleanup_close_ int fd = -EBADF;
                /* Below the top, a symlink is not followed: a loop must not make the tree endless. */
                int rr = fs_resolve(dir, O_RDONLY | O_DIRECTORY | (top ? 0 : O_NOFOLLOW), 0, &fd);
                if (rr < 0) {
                        if (top)
                                r = rr;
                        continue; /* gone again already, or not a directory after all */
                }
                if (f->n_dirs >= INIT_WATCH_DIRS) {
                        full = true;
                        break;
                }
                int wd = add_watch_fd(f, fd);
                if (wd < 0) {
                        if (top || (at_start && wd == -ENOSPC)) {
                                r = wd;
                                break;
                        }
                        if (wd == -ENOSPC)
                                full = true; /* the kernel's max_user_watches */
                        continue;
                }
                if (top)
                        f->root_wd = wd;
                rr = dir_insert(f, wd, dir);
                if (rr < 0) {
                        r = rr;
                        break;
                }
                if (rr == 0 || !f->recursive)
                        continue;
                int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
                if (!d) {
                        safe_close(dfd);
                        continue;
                }
                struct dirent *e;
                while ((e = readdir(d))) {
                        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                                continue;
                        bool isdir = e->d_type == DT_DIR;
                        if (e->d_type == DT_UNKNOWN) {
                                struct stat st;
                                isdir = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
                        }
                        char child[PROTO_MAX_PATH + NAME_MAX + 2];
                        if (join(dir, e->d_name, child, sizeof child) < 0)
                                continue;
                        if (report)
                                fsw_event(f, "create", child, isdir);
                        if (!isdir)
                                continue;
                        if (strlen(child) > PROTO_MAX_PATH || f->n_dirs + l.n >= INIT_WATCH_DIRS) {
                                full = true;
                                continue;
                        }
                        if ((r = worklist_push(&l, child)) < 0)
                                break;
                }
                closedir(d);
        }
        worklist_free(&l);
        if (r >= 0 && full) {
                if (at_start)
                        return -ENOSPC;
                fsw_overflow(f, "too many directories");
        }
        return r;
}

/* ---- inotify events ---- */

static void fsw_end(struct fswatch *f, const char *reason, int err) {
        if (f->end_reason || f->end_err)
                return;
        f->end_reason = reason;
        f->end_err = err;
        watch_close(&f->w);
}

static void handle_event(struct fswatch *f, const struct inotify_event *ev) {
        if (ev->mask & IN_Q_OVERFLOW) {
                fsw_overflow(f, NULL);
                return;
        }
        struct fsw_dir *d = dir_find(f, ev->wd);
        if (!d)
                return; /* a watch dropped already (moved out of the tree) */
        bool is_root = ev->wd == f->root_wd;
        if (ev->mask & IN_IGNORED) {
                if (is_root)
                        fsw_end(f, "removed", 0);
                else
                        dir_remove(f, d);
                return;
        }
        if (ev->len == 0 || !ev->name[0]) {
                /* About the watched directory itself: each directory below is reported by
                 * its parent's watch, only the top has nobody else to report it. */
                if (!is_root)
                        return;
                if (ev->mask & IN_ATTRIB)
                        fsw_event(f, "chmod", d->path, true);
                else if (ev->mask & IN_DELETE_SELF)
                        fsw_event(f, "remove", d->path, true);
                else if (ev->mask & IN_MOVE_SELF) {
                        fsw_event(f, "rename_from", d->path, true);
                        fsw_end(f, "moved", 0);
                } else if (ev->mask & IN_UNMOUNT)
                        fsw_end(f, "unmounted", 0);
                return;
        }
        char path[PROTO_MAX_PATH + NAME_MAX + 2];
        if (join(d->path, ev->name, path, sizeof path) < 0)
                return; /* cannot happen: the table holds paths of at most PROTO_MAX_PATH */
        bool isdir = ev->mask & IN_ISDIR;
        if (ev->mask & IN_CREATE) {
                fsw_event(f, "create", path, isdir);
                if (isdir && f->recursive)
                        (void)add_tree(f, path, true, false);
        } else if (ev->mask & IN_MODIFY)
                fsw_event(f, "write", path, isdir);
        else if (ev->mask & IN_ATTRIB)
                fsw_event(f, "chmod", path, isdir);
        else if (ev->mask & IN_DELETE)
                fsw_event(f, "remove", path, isdir);
        else if (ev->mask & IN_MOVED_FROM) {
                fsw_event(f, "rename_from", path, isdir);
                if (isdir && f->recursive) {
                        if (f->n_moves == FSW_MOVES) {
                                dirs_forget(f, f->moves[0].path);
                                free(f->moves[0].path);
                                memmove(&f->moves[0], &f->moves[1], (FSW_MOVES - 1) * sizeof f->moves[0]);
                                f->n_moves--;
                        }
                        char *p = strdup(path);
                        if (p)
                                f->moves[f->n_moves++] = (struct fsw_move){ .cookie = ev->cookie, .path = p };
                        else
                                dirs_forget(f, path);
                }
        } else if (ev->mask & IN_MOVED_TO) {
                fsw_event(f, "rename_to", path, isdir);
                if (isdir && f->recursive) {
                        for (size_t i = 0; i < f->n_moves; i++)
                                if (f->moves[i].cookie == ev->cookie) {
                                        if (strlen(path) <= PROTO_MAX_PATH)
                                                dirs_rename(f, f->moves[i].path, path);
                                        else
                                                dirs_forget(f, f->moves[i].path);
                                        free(f->moves[i].path);
                                        f->moves[i] = f->moves[--f->n_moves];
                                        return;
                                }
                        /* moved in from outside the tree: new to us */
                        (void)add_tree(f, path, false, false);
                }
        }
}

static void fsw_cb(struct watch *w, uint32_t revents) {
        struct fswatch *f = container_of(w, struct fswatch, w);
        static char buf[64 << 10] __attribute__((aligned(__alignof__(struct inotify_event))));
        (void)revents;
        for (int i = 0; i < FSW_READS && !f->end_reason && !f->end_err; i++) {
                ssize_t n = read(w->fd, buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        fsw_end(f, NULL, n < 0 ? errno : EIO);
                        break;
                }
                for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n && !f->end_reason && !f->end_err;) {
                        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
                        handle_event(f, ev);
                        off += (ssize_t)(sizeof *ev + ev->len);
                }
        }
        /* A directory moved away whose IN_MOVED_TO did not follow in the batch left the tree:
         * its watches must not report from where it went. If the IN_MOVED_TO comes in a
         * later read after all, the directory is watched again as moved in. */
        for (size_t i = 0; i < f->n_moves; i++)
                dirs_forget(f, f->moves[i].path);
        moves_clear(f);
}

/* ---- the stream ---- */

void fsw_pump(struct stream *s) {
        struct fswatch *f = s->fsw;
        while (f->q.len > 0 && conn_queued(g.conn) < INIT_OUT_HIGH && stream_room(s) > 0) {
                size_t n = MIN(MIN(f->q.len, (size_t)FSW_FRAME), stream_room(s));
                stream_charge(s, n);
                send_frame(PROTO_STDOUT, s->id, f->q.data, n);
                for (const char *p = f->q.data, *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))); p++)
                        f->q_events--;
                f->q_mid_line = f->q.data[n - 1] != '\n';
                buf_consume(&f->q, n);
        }
        if ((f->end_reason || f->end_err) && f->q.len == 0) {
                _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                if (f->end_err)
                        json_w_error(&w, f->end_err, strerror(f->end_err));
                else
                        json_w_kstr(&w, "reason", f->end_reason);
                json_w_obj_end(&w);
                send_json(PROTO_EXIT, s->id, &b);
                stream_free(s);
        }
}

/* Lexically normalized absolute path: "a//b/./c/" -> "/a/b/c", ".." drops a component
 * (never above "/", as RESOLVE_IN_ROOT does). The reported paths start with it. */
static int normalize(const char *in, char out[PROTO_MAX_PATH + 1]) {
        size_t o = 0;
        out[o++] = '/';
        for (const char *p = in; *p;) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                const char *e = strchrnul(p, '/');
                size_t n = (size_t)(e - p);
                bool dot = n == 1 && p[0] == '.', dotdot = n == 2 && p[0] == '.' && p[1] == '.';
                if (dotdot) {
                        while (o > 1 && out[o - 1] != '/')
                                o--;
                        if (o > 1)
                                o--;
                } else if (!dot) {
                        if (o > 1)
                                out[o++] = '/';
                        if (o + n > PROTO_MAX_PATH)
                                return -ENAMETOOLONG;
                        memcpy(out + o, p, n);
                        o += n;
                }
                p = e;
        }
        out[o] = '\0';
        return 0;
}

void op_watch(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        if (!path || !*path || strnlen(path, PROTO_MAX_PATH + 1) > PROTO_MAX_PATH)
                return send_error(id, EINVAL, "\"path\" must be a non-empty string of at most %d bytes", PROTO_MAX_PATH);
        const struct json *rec = json_get(req, "recursive");
        if (rec && json_type(rec) != JSON_BOOL)
                return send_error(id, EINVAL, "\"recursive\" must be a boolean");
        uint32_t window = 0;
        if (req_window(req, &window) < 0)
                return send_error(id, EINVAL, "\"window\" must be an integer in 0..%u", PROTO_MAX_WINDOW);
        if (g.conn->n_streams >= INIT_MAX_STREAMS)
                return send_error(id, EAGAIN, "too many live requests (%d)", INIT_MAX_STREAMS);
        if (n_fsw >= INIT_MAX_WATCHES)
                return send_error(id, EMFILE, "%d watches are active already", INIT_MAX_WATCHES);
        char norm[PROTO_MAX_PATH + 1];
        int r = normalize(path, norm);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path, strerror(-r));

        struct fswatch *f = calloc(1, sizeof *f);
        if (!f)
                return send_error(id, ENOMEM, "out of memory");
        n_fsw++;
        f->recursive = !rec || json_is_true(rec);
        f->stat = json_get_bool(req, "stat", false);
        if (f->stat)
                (void)user_names_load(&f->names); /* unreadable: the ids stay numbers */
        f->root_wd = -1;
        f->q = BUF_INIT(INIT_WATCH_QUEUE_BYTES + PROTO_MAX_JSON);
        f->w = (struct watch){ .fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), .cb = fsw_cb };
        if (f->w.fd < 0) {
                int e = errno;
                fsw_free(f);
                return send_error(id, e, "inotify: %s", strerror(e));
        }
        r = add_tree(f, norm, false, true);
        if (r < 0) {
                fsw_free(f);
                if (r == -ENOSPC)
                        return send_error(id, ENOSPC, "%.512s: more than %d directories to watch", norm, INIT_WATCH_DIRS);
                return send_error(id, -r, "%.512s: %s", norm, strerror(-r));
        }
        if ((r = watch_set(&f->w, EPOLLIN)) < 0) {
                fsw_free(f);
                return send_error(id, -r, "epoll: %s", strerror(-r));
        }
        struct stream *s = stream_new(id, STREAM_WATCH);
        if (!s) {
                fsw_free(f);
                return send_error(id, ENOMEM, "out of memory");
        }
        s->fsw = f;
        stream_set_window(s, window);

        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "path", norm);
        json_w_kuint(&w, "dirs", f->n_dirs);
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}
