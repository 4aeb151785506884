/* File operations of space-init. Every path is resolved with openat2(RESOLVE_IN_ROOT) under
 * init's root, and the last component is handled with *at() calls on the resolved parent,
 * so neither ".." nor a symlink (absolute or relative) can reach outside the root. */
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "common/fdio.h"
#include "common/log.h"
#include "init/init.h"

#define RESOLVE_FLAGS (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

static int check_path(const char *path) {
        if (!path)
                return -EINVAL;
        size_t n = strnlen(path, PROTO_MAX_PATH + 1);
        if (n == 0)
                return -EINVAL;
        if (n > PROTO_MAX_PATH)
                return -ENAMETOOLONG;
        return 0;
}

int fs_resolve(const char *path, int flags, mode_t mode, int *ret) {
        int r = check_path(path);
        if (r < 0)
                return r;
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                .resolve = RESOLVE_FLAGS,
        };
        for (int tries = 0;; tries++) {
                int fd = (int)syscall(SYS_openat2, g.root_fd, path, &how, sizeof how);
                /* Kernels without openat2 (gVisor's of 2022 among them): when init's root
                 * is the process's own root, no path can climb above it anyway, and a
                 * magic link only leads to what the sandbox already holds. */
                if (fd < 0 && errno == ENOSYS && g.root_is_slash)
                        fd = openat(g.root_fd, path, (int)how.flags, (mode_t)how.mode);
                if (fd >= 0) {
                        *ret = fd;
                        return 0;
                }
                /* EAGAIN: a concurrent rename raced the lookup; it's safe to try again. */
                if ((errno != EAGAIN && errno != EINTR) || tries >= 16)
                        return -errno;
        }
}

/* Splits path into its resolved parent directory and last component. Returns 0, or 1 with
 * no fd when the path names the root itself or ends in "." or ".." (no name to act on). */
static int fs_parent(const char *path, int *ret_dirfd, char name[NAME_MAX + 1]) {
        int r = check_path(path);
        if (r < 0)
                return r;
        char buf[PROTO_MAX_PATH + 1];
        strcpy(buf, path);
        size_t n = strlen(buf);
        while (n > 1 && buf[n - 1] == '/')
                buf[--n] = '\0';
        char *slash = strrchr(buf, '/');
        const char *base = slash ? slash + 1 : buf;
        if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return 1;
        if (strlen(base) > NAME_MAX)
                return -ENAMETOOLONG;
        strcpy(name, base);
        const char *dir = ".";
        if (slash) {
                *slash = '\0';
                dir = buf[0] ? buf : "/";
        }
        int fd;
        r = fs_resolve(dir, O_PATH | O_DIRECTORY, 0, &fd);
        if (r < 0)
                return r;
        *ret_dirfd = fd;
        return 0;
}

static const char *type_name(mode_t m) {
        return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static int get_mode(const struct json *req, const char *key, int64_t def, mode_t *ret) {
        int64_t m = def;
        if (json_get(req, key) && (json_get_int(req, key, &m) < 0 || m < 0 || m > 07777))
                return -EINVAL;
        *ret = (mode_t)m;
        return 0;
}

/* Like mkdir -p; the directories it makes go to u (NULL: stay init's). */
static int mkdir_p(const char *path, mode_t mode, const struct init_user *u) {
        char buf[PROTO_MAX_PATH + 1];
        int r = check_path(path);
        if (r < 0)
                return r;
        strcpy(buf, path);
        size_t len = strlen(buf);
        for (size_t i = 1; i <= len; i++) {
                if (i < len && buf[i] != '/')
                        continue;
                if (buf[i - 1] == '/')
                        continue; /* empty component */
                char saved = buf[i];
                buf[i] = '\0';
                int fd;
                r = fs_resolve(buf, O_PATH | O_DIRECTORY, 0, &fd);
                if (r == 0)
                        close(fd);
                else if (r == -ENOENT) {
                        _cleanup_close_ int dfd = -EBADF;
                        char name[NAME_MAX + 1];
                        r = fs_parent(buf, &dfd, name);
                        if (r == 1)
                                r = -ENOENT;
                        if (r < 0)
                                return r;
                        if (mkdirat(dfd, name, mode) < 0) {
                                if (errno != EEXIST)
                                        return -errno;
                        } else if ((r = user_chown(dfd, name, u)) < 0)
                                return r;
                } else
                        return r;
                buf[i] = saved;
        }
        return 0;
}

/* The "user" of write, mkdir and rename (§3.1.1), resolved into *user: *ret is user, or NULL
 * when the request has none. On failure (user_resolve's -errno) why says what. */
static int req_user(const struct json *req, struct init_user *user, struct init_user **ret, char *why, size_t whyn) {
        const struct json *juser = json_get(req, "user");
        if (!juser || json_type(juser) == JSON_NULL) {
                *ret = NULL;
                return 0;
        }
        int r = user_resolve(juser, user, why, whyn);
        if (r < 0)
                return r;
        *ret = user;
        return 0;
}

/* "parents" of write and rename: the directories above path (which check_path passed),
 * made as mkdir_p makes them, 0755. dir gets path's parent, for the error message. */
static int mkdir_parents(const char *path, const struct init_user *u, char dir[static PROTO_MAX_PATH + 1]) {
        strcpy(dir, path);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = '\0';
        return mkdir_p(dir, 0755, u);
}

/* ---- read ---- */

void op_read(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        int64_t offset = 0, length = -1;
        if (json_get(req, "offset") && (json_get_int(req, "offset", &offset) < 0 || offset < 0))
                return send_error(id, EINVAL, "\"offset\" must be an integer >= 0");
        if (json_get(req, "length") && (json_get_int(req, "length", &length) < 0 || length < -1))
                return send_error(id, EINVAL, "\"length\" must be an integer >= -1");
        uint32_t window = 0;
        if (req_window(req, &window) < 0)
                return send_error(id, EINVAL, "\"window\" must be an integer in 0..%u", PROTO_MAX_WINDOW);
        if (g.conn->n_streams >= INIT_MAX_STREAMS)
                return send_error(id, EAGAIN, "too many live requests (%d)", INIT_MAX_STREAMS);
        _cleanup_close_ int fd = -EBADF;
        int r = fs_resolve(path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, &fd);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path ? path : "(no path)", strerror(-r));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return send_error(id, errno, "%.512s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
                return send_error(id, EISDIR, "%.512s: is a directory", path);
        if (!S_ISREG(st.st_mode))
                return send_error(id, EINVAL, "%.512s: not a regular file", path);
        struct stream *s = stream_new(id, STREAM_READ);
        if (!s)
                return send_error(id, ENOMEM, "out of memory");
        s->fd = TAKE_FD(fd);
        s->written = (uint64_t)offset; /* the read position */
        s->remaining = length;
        stream_set_window(s, window);

        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kint(&w, "size", st.st_size);
        json_w_kint(&w, "mode", st.st_mode);
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}

void read_pump(struct stream *s) {
        static uint8_t chunk[INIT_CHUNK];
        while (conn_queued(g.conn) < INIT_OUT_HIGH) {
                size_t want = sizeof chunk;
                if (s->remaining >= 0 && (uint64_t)s->remaining < want)
                        want = (size_t)s->remaining;
                if (want > 0 && stream_room(s) == 0)
                        return; /* window shut: wait for a WINDOW */
                want = MIN(want, stream_room(s));
                ssize_t n = 0;
                if (want > 0)
                        n = pread(s->fd, chunk, want, (off_t)s->written);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int e = errno;
                        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
                        struct json_writer w = JSON_WRITER_INIT(&b);
                        json_w_obj_begin(&w);
                        json_w_error(&w, e, strerror(e));
                        json_w_obj_end(&w);
                        send_json(PROTO_EXIT, s->id, &b);
                        stream_free(s);
                        return;
                }
                if (n == 0) {
                        send_frame(PROTO_DATA, s->id, NULL, 0);
                        stream_free(s);
                        return;
                }
                stream_charge(s, (size_t)n);
                send_frame(PROTO_DATA, s->id, chunk, (size_t)n);
                s->written += (uint64_t)n;
                if (s->remaining > 0)
                        s->remaining -= n;
        }
}

/* ---- write ---- */

static void write_set_err(struct stream *s, int err, const char *fmt, ...) _printf_(3, 4);
static void write_set_err(struct stream *s, int err, const char *fmt, ...) {
        if (s->err)
                return;
        s->err = err;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
        va_end(ap);
}

static void write_open(struct stream *s, const struct json *req) {
        static unsigned counter;
        const char *path = json_get_str(req, "path");
        mode_t mode;
        if (check_path(path) < 0)
                return write_set_err(s, EINVAL, "\"path\" must be a non-empty string of at most %d bytes", PROTO_MAX_PATH);
        if (get_mode(req, "mode", 0644, &mode) < 0)
                return write_set_err(s, EINVAL, "\"mode\" must be an integer in 0..07777");
        bool append = json_get_bool(req, "append", false);
        /* "user" (§3.1.1): what this write creates belongs to it. */
        struct init_user user, *u = NULL;
        char why[256];
        int ur = req_user(req, &user, &u, why, sizeof why);
        if (ur < 0) {
                s->err_user = true;
                return write_set_err(s, -ur, "%s", why);
        }
        if (json_get_bool(req, "parents", false)) {
                char dir[PROTO_MAX_PATH + 1];
                int r = mkdir_parents(path, u, dir);
                if (r < 0)
                        return write_set_err(s, -r, "%.200s: %s", dir, strerror(-r));
        }
        char name[NAME_MAX + 1];
        int r = fs_parent(path, &s->dirfd, name);
        if (r == 1)
                r = -EISDIR;
        if (r < 0)
                return write_set_err(s, -r, "%.200s: %s", path, strerror(-r));
        if (append) {
                /* With a user, only a file this append creates changes hands. */
                bool created = false;
                if (u) {
                        r = fs_resolve(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NONBLOCK | O_NOCTTY, mode, &s->fd);
                        created = r == 0;
                }
                if (!u || r == -EEXIST)
                        r = fs_resolve(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_NOCTTY, mode, &s->fd);
                if (r < 0)
                        return write_set_err(s, -r, "%.200s: %s", path, strerror(-r));
                if (created && fchown(s->fd, user.uid, user.gid) < 0)
                        return write_set_err(s, errno, "%.200s: chown: %s", path, strerror(errno));
                struct stat st;
                if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode))
                        return write_set_err(s, EINVAL, "%.200s: not a regular file", path);
                return;
        }
        if (!(s->name = strdup(name)))
                return write_set_err(s, ENOMEM, "out of memory");
        char tmp[64];
        snprintf(tmp, sizeof tmp, PROTO_UPLOAD_TEMP_PREFIX "%d-%u", (int)getpid(), ++counter);
        if (!(s->tmp_name = strdup(tmp)))
                return write_set_err(s, ENOMEM, "out of memory");
        s->fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (s->fd < 0) {
                int e = errno;
                free(s->tmp_name);
                s->tmp_name = NULL;
                return write_set_err(s, e, "%.200s: %s", path, strerror(e));
        }
        if (u && fchown(s->fd, user.uid, user.gid) < 0)
                return write_set_err(s, errno, "%.200s: chown: %s", path, strerror(errno));
}

void op_write(uint32_t id, const struct json *req) {
        if (g.conn->n_streams >= INIT_MAX_STREAMS)
                return send_error(id, EAGAIN, "too many live requests (%d)", INIT_MAX_STREAMS);
        struct stream *s = stream_new(id, STREAM_WRITE);
        if (!s)
                return send_error(id, ENOMEM, "out of memory");
        write_open(s, req);
}

void write_abort(struct stream *s) {
        if (s->tmp_name && s->dirfd >= 0)
                (void)unlinkat(s->dirfd, s->tmp_name, 0);
        free(s->tmp_name);
        s->tmp_name = NULL;
}

static void write_finish(struct stream *s) {
        if (!s->err && s->fd >= 0 && s->tmp_name) {
                if (close(s->fd) < 0)
                        write_set_err(s, errno, "close: %s", strerror(errno));
                s->fd = -EBADF;
                if (!s->err && renameat(s->dirfd, s->tmp_name, s->dirfd, s->name) < 0)
                        write_set_err(s, errno, "%.200s: %s", s->name, strerror(errno));
                if (!s->err) {
                        free(s->tmp_name);
                        s->tmp_name = NULL;
                }
        }
        if (s->err) {
                write_abort(s);
                if (s->err_user)
                        send_user_error(s->id, s->err, s->errmsg);
                else
                        send_error(s->id, s->err, "%s", s->errmsg);
        } else {
                _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_key(&w, "written");
                json_w_uint(&w, s->written);
                json_w_obj_end(&w);
                send_json(PROTO_RESP, s->id, &b);
        }
        stream_free(s);
}

void write_data(struct stream *s, const uint8_t *data, size_t n) {
        if (n == 0)
                return write_finish(s);
        while (n > 0 && !s->err) {
                ssize_t k = write(s->fd, data, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        write_set_err(s, errno, "write: %s", strerror(errno));
                        break;
                }
                data += k;
                n -= (size_t)k;
                s->written += (uint64_t)k;
        }
}

/* ---- list, stat, mkdir, remove ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void swap_str(char **a, char **b) {
        char *t = *a;
        *a = *b;
        *b = t;
}

/* Max-heap of names by strcmp. */
static void heap_up(char **h, size_t i) {
        while (i > 0 && strcmp(h[(i - 1) / 2], h[i]) < 0) {
                swap_str(&h[(i - 1) / 2], &h[i]);
                i = (i - 1) / 2;
        }
}

static void heap_down(char **h, size_t n, size_t i) {
        for (;;) {
                size_t l = 2 * i + 1, r = l + 1, m = i;
                if (l < n && strcmp(h[l], h[m]) > 0)
                        m = l;
                if (r < n && strcmp(h[r], h[m]) > 0)
                        m = r;
                if (m == i)
                        return;
                swap_str(&h[i], &h[m]);
                i = m;
        }
}

static void write_stat(struct json_writer *w, const struct stat *st) {
        json_w_kstr(w, "type", type_name(st->st_mode));
        json_w_kint(w, "size", st->st_size);
        json_w_kint(w, "mode", st->st_mode);
        json_w_kint(w, "mtime", st->st_mtim.tv_sec);
}

void op_list(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        const char *after = json_get(req, "after") ? json_get_str(req, "after") : "";
        int64_t limit = 0;
        if (!after)
                return send_error(id, EINVAL, "\"after\" must be a string");
        if (json_get(req, "limit") && (json_get_int(req, "limit", &limit) < 0 || limit < 0))
                return send_error(id, EINVAL, "\"limit\" must be an integer >= 0");
        int fd;
        int r = fs_resolve(path, O_RDONLY | O_DIRECTORY, 0, &fd);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path ? path : "(no path)", strerror(-r));
        _cleanup_closedir_ DIR *d = NULL;
        if ((r = fdio_fdopendir(fd, &d)) < 0)
                return send_error(id, -r, "%.512s: %s", path, strerror(-r));
        /* Keep the PROTO_MAX_LIST smallest names after "after" in a max-heap, so pages are
         * right however large the directory is, with bounded memory. */
        size_t n = 0, cap = 0;
        char **names = NULL;
        bool truncated = false;
        int err = 0;
        struct dirent *de;
        while ((errno = 0, de = readdir(d))) {
                const char *nm = de->d_name;
                if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 || strcmp(nm, after) <= 0)
                        continue;
                if (n == PROTO_MAX_LIST) {
                        truncated = true;
                        if (strcmp(nm, names[0]) >= 0)
                                continue;
                        char *dup = strdup(nm);
                        if (!dup) {
                                err = ENOMEM;
                                break;
                        }
                        free(names[0]);
                        names[0] = dup;
                        heap_down(names, n, 0);
                        continue;
                }
                if (n == cap) {
                        size_t ncap = cap ? MIN(cap * 2, (size_t)PROTO_MAX_LIST) : 64;
                        char **nn = realloc(names, ncap * sizeof *nn);
                        if (!nn) {
                                err = ENOMEM;
                                break;
                        }
                        names = nn;
                        cap = ncap;
                }
                if (!(names[n] = strdup(nm))) {
                        err = ENOMEM;
                        break;
                }
                heap_up(names, n++);
        }
        if (!de && errno)
                err = errno;
        if (!err)
                qsort(names, n, sizeof *names, cmp_str);

        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        _cleanup_buf_ struct buf one = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "entries");
        json_w_arr_begin(&w);
        int64_t emitted = 0;
        for (size_t i = 0; i < n && !err; i++) {
                struct stat st;
                if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* removed meanwhile */
                if (limit > 0 && emitted >= limit) {
                        truncated = true;
                        break;
                }
                buf_reset(&one);
                struct json_writer ow = JSON_WRITER_INIT(&one);
                json_w_obj_begin(&ow);
                json_w_kstr(&ow, "name", names[i]);
                write_stat(&ow, &st);
                json_w_obj_end(&ow);
                if (ow.err || b.len + one.len + 64 > PROTO_MAX_JSON) {
                        truncated = true;
                        break;
                }
                json_w_raw(&w, one.data, one.len);
                emitted++;
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        if (err)
                return send_error(id, err, "%.512s: %s", path, strerror(err));
        json_w_arr_end(&w);
        json_w_kbool(&w, "truncated", truncated);
        json_w_obj_end(&w);
        if (w.err)
                return send_error(id, EOVERFLOW, "listing too large");
        send_json(PROTO_RESP, id, &b);
}

/* "owner", "group": the names of the entry's uid and gid, when the sandbox has them. */
static void write_names(struct json_writer *w, const struct init_names *nm, const struct stat *st) {
        const char *o = user_names_uid(nm, st->st_uid), *gr = user_names_gid(nm, st->st_gid);
        if (o)
                json_w_kstr(w, "owner", o);
        if (gr)
                json_w_kstr(w, "group", gr);
}

int fs_lstat(const char *path, struct stat *st, char *target, size_t tsz, ssize_t *tlen) {
        _cleanup_close_ int dfd = -EBADF;
        char name[NAME_MAX + 1];
        *tlen = -1;
        int r = fs_parent(path, &dfd, name);
        if (r < 0)
                return r;
        if (r == 1) {
                _cleanup_close_ int fd = -EBADF;
                r = fs_resolve(path, O_PATH, 0, &fd);
                if (r < 0)
                        return r;
                return fstat(fd, st) < 0 ? -errno : 0;
        }
        if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISLNK(st->st_mode) && (*tlen = readlinkat(dfd, name, target, tsz)) < 0)
                return -errno;
        return 0;
}

void fs_write_stat(struct json_writer *w, const struct stat *st, const struct init_names *nm, const char *target,
                   ssize_t tlen) {
        write_stat(w, st);
        json_w_kint(w, "uid", st->st_uid);
        json_w_kint(w, "gid", st->st_gid);
        if (nm)
                write_names(w, nm, st);
        if (tlen >= 0) {
                json_w_key(w, "target");
                json_w_strn(w, target, (size_t)tlen);
        }
}

void op_stat(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        _cleanup_close_ int dfd = -EBADF;
        char name[NAME_MAX + 1];
        struct stat st;
        char target[PATH_MAX];
        ssize_t tlen = -1;
        int r = fs_parent(path, &dfd, name);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path ? path : "(no path)", strerror(-r));
        if (r == 1) {
                _cleanup_close_ int fd = -EBADF;
                r = fs_resolve(path, O_PATH, 0, &fd);
                if (r < 0)
                        return send_error(id, -r, "%.512s: %s", path, strerror(-r));
                if (fstat(fd, &st) < 0)
                        return send_error(id, errno, "%.512s: %s", path, strerror(errno));
        } else {
                if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return send_error(id, errno, "%.512s: %s", path, strerror(errno));
                if (S_ISLNK(st.st_mode)) {
                        tlen = readlinkat(dfd, name, target, sizeof target);
                        if (tlen < 0)
                                return send_error(id, errno, "%.512s: %s", path, strerror(errno));
                }
        }
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        write_stat(&w, &st);
        json_w_kint(&w, "uid", st.st_uid);
        json_w_kint(&w, "gid", st.st_gid);
        if (json_get_bool(req, "names", false)) {
                struct init_names nm;
                if (user_names_load(&nm) == 0) {
                        write_names(&w, &nm, &st);
                        user_names_free(&nm);
                }
        }
        if (tlen >= 0) {
                json_w_key(&w, "target");
                json_w_strn(&w, target, (size_t)tlen);
        }
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}

void op_mkdir(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        mode_t mode;
        if (get_mode(req, "mode", 0755, &mode) < 0)
                return send_error(id, EINVAL, "\"mode\" must be an integer in 0..07777");
        /* "user" (§3.1.1): the directories made belong to it. */
        struct init_user user, *u = NULL;
        char why[256];
        int ur = req_user(req, &user, &u, why, sizeof why);
        if (ur < 0)
                return send_user_error(id, -ur, why);
        int r;
        if (json_get_bool(req, "parents", false))
                r = mkdir_p(path, mode, u);
        else {
                _cleanup_close_ int dfd = -EBADF;
                char name[NAME_MAX + 1];
                r = fs_parent(path, &dfd, name);
                if (r == 1)
                        r = -EEXIST;
                if (r == 0 && mkdirat(dfd, name, mode) < 0)
                        r = -errno;
                else if (r == 0)
                        r = user_chown(dfd, name, u);
        }
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path ? path : "(no path)", strerror(-r));
        send_frame(PROTO_RESP, id, "{}", 2);
}

static int rm_tree(int dfd, const char *name, dev_t dev, int depth) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        if (st.st_dev != dev)
                return -EXDEV; /* never descend into another mount (a sandbox's /proc, say) */
        if (depth >= INIT_RM_MAX_DEPTH)
                return -ELOOP;
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        struct dirent *de;
        int r = 0;
        while (r == 0 && (de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        r = rm_tree(dirfd(d), de->d_name, dev, depth + 1);
        closedir(d);
        if (r < 0)
                return r;
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

void op_remove(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        _cleanup_close_ int dfd = -EBADF;
        char name[NAME_MAX + 1];
        int r = fs_parent(path, &dfd, name);
        if (r == 1)
                return send_error(id, EBUSY, "%.512s: refusing to remove the root or a \".\"/\"..\" path", path);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path ? path : "(no path)", strerror(-r));
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return send_error(id, errno, "%.512s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode) && json_get_bool(req, "recursive", false))
                r = rm_tree(dfd, name, st.st_dev, 0);
        else if (S_ISDIR(st.st_mode))
                r = unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
        else
                r = unlinkat(dfd, name, 0) < 0 ? -errno : 0;
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path, strerror(-r));
        send_frame(PROTO_RESP, id, "{}", 2);
}

/* ---- rename ---- */

void op_rename(uint32_t id, const struct json *req) {
        const char *from = json_get_str(req, "from"), *to = json_get_str(req, "to");
        if (check_path(from) < 0 || check_path(to) < 0)
                return send_error(id, EINVAL, "\"from\" and \"to\" must be non-empty strings of at most %d bytes",
                                  PROTO_MAX_PATH);
        bool replace = json_get_bool(req, "replace", true);
        struct init_user user, *u = NULL;
        char why[256];
        int ur = req_user(req, &user, &u, why, sizeof why);
        if (ur < 0)
                return send_user_error(id, -ur, why);
        if (json_get_bool(req, "parents", false)) {
                char dir[PROTO_MAX_PATH + 1];
                int r = mkdir_parents(to, u, dir);
                if (r < 0)
                        return send_error(id, -r, "%.512s: %s", dir, strerror(-r));
        }
        _cleanup_close_ int ffd = -EBADF, tfd = -EBADF;
        char fname[NAME_MAX + 1], tname[NAME_MAX + 1];
        int r = fs_parent(from, &ffd, fname);
        if (r == 1)
                return send_error(id, EBUSY, "%.512s: refusing to move the root or a \".\"/\"..\" path", from);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", from, strerror(-r));
        r = fs_parent(to, &tfd, tname);
        if (r == 1)
                return send_error(id, EBUSY, "%.512s: refusing to move onto the root or a \".\"/\"..\" path", to);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", to, strerror(-r));
        /* Both names are taken on their resolved parents: a symlink as the last component is
         * moved (or replaced) itself, never followed out of the root. */
        if (replace)
                r = renameat(ffd, fname, tfd, tname) < 0 ? -errno : 0;
        else
                r = (int)syscall(SYS_renameat2, ffd, fname, tfd, tname, RENAME_NOREPLACE) < 0 ? -errno : 0;
        if (r < 0) {
                /* Which side: the source missing is the common case. */
                struct stat st;
                const char *which = r == -ENOENT && fstatat(ffd, fname, &st, AT_SYMLINK_NOFOLLOW) < 0 ? from : to;
                return send_error(id, -r, "%.512s: %s", which, strerror(-r));
        }
        send_frame(PROTO_RESP, id, "{}", 2);
}

/* ---- tree: the entries below a directory, a few levels down, in pages ---- */

struct tree {
        struct json_writer *w;
        struct buf *b, one;       /* the RESP, and one entry before it goes in */
        struct init_names *names; /* NULL: no names asked for */
        size_t n;                 /* entries written */
        bool truncated;
        char rel[PROTO_MAX_PATH + 1];
};

/* The names of the directory fd after the name from ("": all), sorted; more than
 * PROTO_MAX_LIST of them is -E2BIG. */
static int tree_names(int fd, const char *from, size_t from_len, char ***ret, size_t *ret_n) {
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dfd < 0)
                return -errno;
        _cleanup_closedir_ DIR *d = NULL;
        int r = fdio_fdopendir(dfd, &d);
        if (r < 0)
                return r;
        char **v = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        r = 0;
        while ((errno = 0, de = readdir(d))) {
                const char *nm = de->d_name;
                if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
                        continue;
                /* Before the cursor's name at this level: on an earlier page. */
                if (from_len) {
                        size_t l = strlen(nm);
                        int c = memcmp(nm, from, MIN(l, from_len));
                        if (c < 0 || (c == 0 && l < from_len))
                                continue;
                }
                if (n >= PROTO_MAX_LIST) {
                        r = -E2BIG;
                        break;
                }
                if (n == cap) {
                        size_t ncap = cap ? cap * 2 : 32;
                        char **nv = realloc(v, ncap * sizeof *nv);
                        if (!nv) {
                                r = -ENOMEM;
                                break;
                        }
                        v = nv;
                        cap = ncap;
                }
                if (!(v[n] = strdup(nm))) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        if (r == 0 && !de && errno)
                r = -errno;
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(v[i]);
                free(v);
                return r;
        }
        if (n)
                qsort(v, n, sizeof *v, cmp_str);
        *ret = v;
        *ret_n = n;
        return 0;
}

/* One entry (t->rel) into the RESP; false when the page is full (the entry is not in it). */
static bool tree_emit(struct tree *t, int fd, const char *name, const struct stat *st) {
        if (t->n >= INIT_TREE_MAX_ENTRIES)
                return false;
        buf_reset(&t->one);
        struct json_writer ow = JSON_WRITER_INIT(&t->one);
        json_w_obj_begin(&ow);
        json_w_kstr(&ow, "path", t->rel);
        write_stat(&ow, st);
        json_w_kint(&ow, "uid", st->st_uid);
        json_w_kint(&ow, "gid", st->st_gid);
        if (t->names)
                write_names(&ow, t->names, st);
        if (S_ISLNK(st->st_mode)) {
                char target[PATH_MAX];
                ssize_t tl = readlinkat(fd, name, target, sizeof target);
                if (tl >= 0) {
                        json_w_key(&ow, "target");
                        json_w_strn(&ow, target, (size_t)tl);
                }
        }
        json_w_obj_end(&ow);
        /* Room for the entry, its comma and the RESP's closing members. */
        if (ow.err || t->b->len + t->one.len + 64 > PROTO_MAX_JSON)
                return false;
        json_w_raw(t->w, t->one.data, t->one.len);
        t->n++;
        return true;
}

/* Writes the entries of directory fd (named t->rel, "" at the top) and, depth > 1, of its
 * subdirectories, depth-first in name order (like envd's walk), after the cursor after
 * (a path relative to fd, "" for none: its entry and everything before it were on an
 * earlier page). Symlinks are entries, never followed. Returns 1 once the page is full. */
static int tree_walk(struct tree *t, int fd, int depth, const char *after) {
        size_t head_len = strcspn(after, "/");
        const char *rest = after[head_len] ? after + head_len + 1 : "";
        char **names = NULL;
        size_t n = 0;
        int r = tree_names(fd, after, head_len, &names, &n);
        if (r < 0)
                return r;
        size_t rel_len = strlen(t->rel);
        for (size_t i = 0; i < n && r == 0; i++) {
                /* The cursor's own entry at this level: sent before; what is below it may
                 * not have been. */
                bool cursor = head_len && strlen(names[i]) == head_len && !memcmp(names[i], after, head_len);
                struct stat st;
                if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* removed meanwhile */
                int k = snprintf(t->rel + rel_len, sizeof t->rel - rel_len, "%s%s", rel_len ? "/" : "", names[i]);
                if (k < 0 || (size_t)k >= sizeof t->rel - rel_len) {
                        r = -ENAMETOOLONG;
                        break;
                }
                if (!cursor && !tree_emit(t, fd, names[i], &st)) {
                        t->truncated = true;
                        r = 1;
                        break;
                }
                if (S_ISDIR(st.st_mode) && depth > 1) {
                        int sub = openat(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0) {
                                r = tree_walk(t, sub, depth - 1, cursor ? rest : "");
                                close(sub);
                        } /* unreadable (EACCES) or gone: listed, not entered */
                }
                t->rel[rel_len] = '\0';
        }
        t->rel[rel_len] = '\0';
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        return r;
}

void op_tree(uint32_t id, const struct json *req) {
        const char *path = json_get_str(req, "path");
        const char *after = json_get(req, "after") ? json_get_str(req, "after") : "";
        int64_t depth = 1;
        if (json_get(req, "depth") &&
            (json_get_int(req, "depth", &depth) < 0 || depth < 1 || depth > INIT_TREE_MAX_DEPTH))
                return send_error(id, EINVAL, "\"depth\" must be an integer in 1..%d", INIT_TREE_MAX_DEPTH);
        if (!after || strlen(after) > PROTO_MAX_PATH)
                return send_error(id, EINVAL, "\"after\" must be a path of at most %d bytes", PROTO_MAX_PATH);
        _cleanup_close_ int fd = -EBADF;
        int r = fs_resolve(path, O_RDONLY | O_DIRECTORY, 0, &fd);
        if (r < 0)
                return send_error(id, -r, "%.512s: %s", path ? path : "(no path)", strerror(-r));
        struct init_names nm, *names = NULL;
        if (json_get_bool(req, "names", false)) {
                r = user_names_load(&nm);
                if (r < 0)
                        return send_error(id, -r, "reading /etc/passwd or /etc/group: %s", strerror(-r));
                names = &nm;
        }
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        static struct tree t; /* PROTO_MAX_PATH of scratch: not on the stack */
        t = (struct tree){ .w = &w, .b = &b, .one = BUF_INIT(PROTO_MAX_JSON), .names = names };
        json_w_obj_begin(&w);
        json_w_key(&w, "entries");
        json_w_arr_begin(&w);
        r = tree_walk(&t, fd, (int)depth, after);
        json_w_arr_end(&w);
        json_w_kbool(&w, "truncated", t.truncated);
        json_w_obj_end(&w);
        buf_free(&t.one);
        if (names)
                user_names_free(names);
        if (r == -E2BIG)
                return send_error(id, E2BIG, "%.512s: a directory below holds more than %d entries", path, PROTO_MAX_LIST);
        if (r < 0 || w.err)
                return send_error(id, r < 0 ? -r : EOVERFLOW, "%.512s: %s", path, strerror(r < 0 ? -r : EOVERFLOW));
        send_json(PROTO_RESP, id, &b);
}
