/* The "user" member of exec, write and mkdir (protocol.md §3.1.1): a name or a numeric uid,
 * looked up in the sandbox's own /etc/passwd and /etc/group (opened under init's root,
 * never the host's, and never through libc's NSS: init is static). Both files are read
 * whole up to INIT_USER_FILE_MAX; a line longer than INIT_USER_LINE_MAX is skipped. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "init/init.h"

/* Reads at most INIT_USER_FILE_MAX bytes of the sandbox's file path into a NUL-terminated
 * heap buffer; -ENOENT when it is absent, -EFBIG when it is larger. */
static int read_small(const char *path, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = -EBADF;
        int r = fs_resolve(path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, &fd);
        if (r < 0)
                return r;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if (st.st_size > INIT_USER_FILE_MAX)
                return -EFBIG;
        size_t want = (size_t)st.st_size; /* one that grows meanwhile is read this far */
        char *b = malloc(want + 1);
        if (!b)
                return -ENOMEM;
        size_t n = 0;
        while (n < want) {
                ssize_t k = read(fd, b + n, want - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = -errno;
                        free(b);
                        return r;
                }
                if (k == 0)
                        break;
                n += (size_t)k;
        }
        b[n] = '\0';
        *ret = b;
        *ret_len = n;
        return 0;
}

/* Splits line (NUL-terminated, modified) at ':' into at most max fields; returns how many. */
static size_t split_fields(char *line, char **f, size_t max) {
        size_t n = 0;
        for (char *p = line; n < max;) {
                f[n++] = p;
                char *c = strchr(p, ':');
                if (!c)
                        break;
                *c = '\0';
                p = c + 1;
        }
        return n;
}

static bool parse_id(const char *s, uint32_t *ret) {
        if (!*s || strlen(s) > 10)
                return false;
        uint64_t v = 0;
        for (const char *p = s; *p; p++) {
                if (*p < '0' || *p > '9')
                        return false;
                v = v * 10 + (uint64_t)(*p - '0');
        }
        if (v > UINT32_MAX - 1)
                return false;
        *ret = (uint32_t)v;
        return true;
}

/* Calls fn on every line of buf (modified) that fits INIT_USER_LINE_MAX; stops when fn
 * returns true. */
static void for_lines(char *buf, size_t len, bool (*fn)(char *line, void *ud), void *ud) {
        char *p = buf, *end = buf + len;
        while (p < end) {
                char *nl = memchr(p, '\n', (size_t)(end - p));
                char *le = nl ? nl : end;
                size_t l = (size_t)(le - p);
                *le = '\0';
                if (l > 0 && l <= INIT_USER_LINE_MAX && p[0] != '#' && !memchr(p, '\0', l) && fn(p, ud))
                        return;
                p = le + 1;
        }
}

struct pw_match {
        const char *name; /* or NULL: by uid */
        uint32_t uid;
        struct init_user *u;
        bool found;
};

static bool pw_line(char *line, void *ud) {
        struct pw_match *m = ud;
        char *f[7];
        uint32_t uid, gid;
        if (split_fields(line, f, 7) != 7 || !parse_id(f[2], &uid) || !parse_id(f[3], &gid))
                return false;
        if (m->name ? strcmp(f[0], m->name) != 0 : uid != m->uid)
                return false;
        if (strlen(f[0]) >= sizeof m->u->name || strlen(f[5]) >= sizeof m->u->home ||
            strlen(f[6]) >= sizeof m->u->shell)
                return false;
        strcpy(m->u->name, f[0]);
        strcpy(m->u->home, f[5]);
        strcpy(m->u->shell, f[6]);
        m->u->uid = uid;
        m->u->gid = gid;
        m->found = true;
        return true;
}

static bool gr_line(char *line, void *ud) {
        struct init_user *u = ud;
        char *f[4];
        uint32_t gid;
        if (split_fields(line, f, 4) != 4 || !parse_id(f[2], &gid) || gid == u->gid)
                return false;
        for (char *mem = f[3], *save = NULL; (mem = strtok_r(mem, ",", &save)); mem = NULL)
                if (strcmp(mem, u->name) == 0) {
                        u->groups[u->n_groups++] = gid;
                        break;
                }
        return u->n_groups >= INIT_USER_MAX_GROUPS;
}

int user_resolve(const struct json *v, struct init_user *u, char *err, size_t errn) {
        memset(u, 0, sizeof *u);
        struct pw_match m = { .u = u };
        int64_t n;
        const char *s = json_str(v);
        if (json_type(v) == JSON_NUMBER) {
                if (json_int(v, &n) < 0 || n < 0 || n > UINT32_MAX - 1) {
                        snprintf(err, errn, "\"user\" must be a name or a uid >= 0");
                        return -EINVAL;
                }
                m.uid = (uint32_t)n;
        } else if (s && parse_id(s, &m.uid)) {
                /* a string of digits is a uid too */
        } else if (s && *s && strlen(s) < sizeof u->name && !strchr(s, ':') && !strchr(s, '\n')) {
                m.name = s;
        } else {
                snprintf(err, errn, "\"user\" must be a name (at most %zu bytes) or a uid", sizeof u->name - 1);
                return -EINVAL;
        }

        _cleanup_free_ char *pw = NULL;
        size_t len = 0;
        int r = read_small("/etc/passwd", &pw, &len);
        if (r < 0 && r != -ENOENT) {
                snprintf(err, errn, "/etc/passwd: %s", strerror(-r));
                return r;
        }
        if (r == 0)
                for_lines(pw, len, pw_line, &m);
        if (!m.found) {
                if (m.name) {
                        snprintf(err, errn, "no user %s in /etc/passwd", m.name);
                        return -ENOENT;
                }
                /* A uid the sandbox does not name: its own group, home "/". */
                u->uid = m.uid;
                u->gid = m.uid;
                strcpy(u->home, "/");
                return 0;
        }
        u->known = true;
        _cleanup_free_ char *gr = NULL;
        r = read_small("/etc/group", &gr, &len);
        if (r < 0 && r != -ENOENT) {
                snprintf(err, errn, "/etc/group: %s", strerror(-r));
                return r;
        }
        if (r == 0)
                for_lines(gr, len, gr_line, u);
        return 0;
}

void send_user_error(uint32_t id, int err, const char *msg) {
        if (err != ENOENT && err != EINVAL) /* the sandbox's files, not the request */
                return send_error(id, err, "%s", msg);
        /* spaced answers 400 for a bad "user", not the errno's usual status. */
        send_error_flag(id, err, "user", msg);
}

int user_chown(int dirfd, const char *name, const struct init_user *u) {
        if (!u)
                return 0;
        return fchownat(dirfd, name, u->uid, u->gid, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* ---- owner and group names (op stat and op tree with "names") ---- */

struct names_fill {
        struct init_idname *v;
        size_t n, cap;
        size_t id_field; /* passwd and group both have the id third */
};

static bool names_line(char *line, void *ud) {
        struct names_fill *f = ud;
        char *fld[3];
        uint32_t id;
        if (split_fields(line, fld, 3) != 3 || !parse_id(fld[2], &id) || !*fld[0])
                return false;
        if (f->n == f->cap) {
                size_t ncap = f->cap ? f->cap * 2 : 32;
                struct init_idname *nv = realloc(f->v, ncap * sizeof *nv);
                if (!nv)
                        return true; /* the names found so far; the rest show as numbers */
                f->v = nv;
                f->cap = ncap;
        }
        f->v[f->n++] = (struct init_idname){ .id = id, .name = fld[0] };
        return false;
}

static int names_read(const char *path, char **buf, struct init_idname **v, size_t *n) {
        size_t len = 0;
        int r = read_small(path, buf, &len);
        if (r == -ENOENT)
                return 0; /* a sandbox without it: every owner is a number */
        if (r < 0)
                return r;
        struct names_fill f = { 0 };
        for_lines(*buf, len, names_line, &f);
        *v = f.v;
        *n = f.n;
        return 0;
}

int user_names_load(struct init_names *n) {
        *n = (struct init_names){ 0 };
        int r = names_read("/etc/passwd", &n->pw_buf, &n->users, &n->n_users);
        if (r == 0)
                r = names_read("/etc/group", &n->gr_buf, &n->groups, &n->n_groups);
        if (r < 0)
                user_names_free(n);
        return r;
}

static const char *names_find(const struct init_idname *v, size_t n, uint32_t id) {
        for (size_t i = 0; i < n; i++) /* the first line wins, as getpwuid's does */
                if (v[i].id == id)
                        return v[i].name;
        return NULL;
}

const char *user_names_uid(const struct init_names *n, uint32_t uid) { return names_find(n->users, n->n_users, uid); }
const char *user_names_gid(const struct init_names *n, uint32_t gid) { return names_find(n->groups, n->n_groups, gid); }

void user_names_free(struct init_names *n) {
        free(n->pw_buf);
        free(n->gr_buf);
        free(n->users);
        free(n->groups);
        *n = (struct init_names){ 0 };
}
