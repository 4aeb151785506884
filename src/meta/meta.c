/* The backend-independent half of the metadata store: argument checks and limits, ids,
 * token hashing, transaction nesting, and dispatch to the backend's ops table. Out-params
 * are filled from temporaries so that a failing backend never touches them. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include "common/json.h"
#include "common/macros.h"
#include "meta/meta-internal.h"

static const char *const session_states[] = {
        [META_SESSION_CREATING] = "creating",     [META_SESSION_RUNNING] = "running",
        [META_SESSION_PAUSED] = "paused",         [META_SESSION_RECOVERING] = "recovering",
        [META_SESSION_TERMINATED] = "terminated",
};
static const char *const sandbox_states[] = {
        [META_SANDBOX_STARTING] = "starting",
        [META_SANDBOX_RUNNING] = "running",
        [META_SANDBOX_DEAD] = "dead",
        [META_SANDBOX_DESTROYED] = "destroyed",
};
static const char *const reasons[] = {
        [META_REASON_ROLLING] = "rolling", [META_REASON_PAUSE] = "pause",     [META_REASON_MANUAL] = "manual",
        [META_REASON_FORK] = "fork",       [META_REASON_RESTORE] = "restore",
};

static int name_lookup(const char *const *names, size_t n, const char *name) {
        if (!name)
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (strcmp(names[i], name) == 0)
                        return (int)i;
        return -EINVAL;
}

/* The _name and _from_name pair of one enum over its table of names. */
#define NAME_TABLE(type, prefix, names)                                                         \
        const char *prefix##_name(type v) {                                                     \
                return (unsigned)v < ELEMENTSOF(names) ? names[v] : NULL;                       \
        }                                                                                       \
        int prefix##_from_name(const char *name, type *ret) {                                   \
                int r = name_lookup(names, ELEMENTSOF(names), name);                            \
                if (r < 0)                                                                      \
                        return r;                                                               \
                *ret = (type)r;                                                                 \
                return 0;                                                                       \
        }
NAME_TABLE(enum meta_session_state, meta_session_state, session_states)
NAME_TABLE(enum meta_sandbox_state, meta_sandbox_state, sandbox_states)
NAME_TABLE(enum meta_snapshot_reason, meta_snapshot_reason, reasons)

int meta_error(struct meta *m, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->err, sizeof m->err, fmt, ap);
        va_end(ap);
        return r;
}

const char *meta_last_error(struct meta *m) {
        return m ? m->err : "";
}

int64_t meta_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- format checks ---- */

static bool is_lower_alnum(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool meta_id_valid(const char *prefix, const char *id) {
        if (!prefix || !id)
                return false;
        size_t pl = strlen(prefix);
        if (pl == 0 || pl > META_ID_PREFIX_MAX || strncmp(id, prefix, pl) != 0 || id[pl] != '_')
                return false;
        const char *p = id + pl + 1;
        size_t n = strnlen(p, META_ID_SIZE);
        if (n == 0 || pl + 1 + n >= META_ID_SIZE)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!is_lower_alnum(p[i]))
                        return false;
        return true;
}

int meta_new_id(const char *prefix, char buf[META_ID_SIZE]) {
        if (!prefix || !buf)
                return -EINVAL;
        size_t pl = strnlen(prefix, META_ID_PREFIX_MAX + 1);
        if (pl == 0 || pl > META_ID_PREFIX_MAX)
                return -EINVAL;
        for (size_t i = 0; i < pl; i++)
                if (prefix[i] < 'a' || prefix[i] > 'z')
                        return -EINVAL;
        uint8_t rnd[META_ID_RANDOM_HEX / 2];
        size_t got = 0;
        while (got < sizeof rnd) {
                ssize_t k = getrandom(rnd + got, sizeof rnd - got, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)k;
        }
        static const char hex[] = "0123456789abcdef";
        char tmp[META_ID_SIZE];
        memcpy(tmp, prefix, pl);
        tmp[pl] = '_';
        for (size_t i = 0; i < sizeof rnd; i++) {
                tmp[pl + 1 + 2 * i] = hex[rnd[i] >> 4];
                tmp[pl + 2 + 2 * i] = hex[rnd[i] & 15];
        }
        tmp[pl + 1 + META_ID_RANDOM_HEX] = 0;
        memcpy(buf, tmp, pl + 2 + META_ID_RANDOM_HEX);
        return 0;
}

int meta_token_hash(const char *token, char out[META_HASH_HEX + 1]) {
        if (!token || !out)
                return -EINVAL;
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        if (EVP_Digest(token, strlen(token), md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen * 2 != META_HASH_HEX)
                return -EIO;
        static const char hex[] = "0123456789abcdef";
        for (unsigned i = 0; i < mdlen; i++) {
                out[2 * i] = hex[md[i] >> 4];
                out[2 * i + 1] = hex[md[i] & 15];
        }
        out[META_HASH_HEX] = 0;
        return 0;
}

static bool hash_valid(const char *h) {
        if (!h || strnlen(h, META_HASH_HEX + 1) != META_HASH_HEX)
                return false;
        for (size_t i = 0; i < META_HASH_HEX; i++)
                if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
                        return false;
        return true;
}

/* Tenant, template, host and token names: 1..max of [A-Za-z0-9._:@-]. */
static bool name_valid(const char *s, size_t max) {
        if (!s)
                return false;
        size_t n = strnlen(s, max + 1);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == ':' || c == '@' || c == '-'))
                        return false;
        }
        return true;
}

static bool kind_valid(const char *s) {
        if (!s)
                return false;
        size_t n = strnlen(s, META_KIND_MAX + 1);
        if (n == 0 || n > META_KIND_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!is_lower_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
                        return false;
        return true;
}

static bool empty(const char *s) {
        return !s || !s[0];
}

/* A fixed-size string field of a caller's struct must be terminated inside its array. */
#define FIELD_OK(f) (strnlen((f), sizeof(f)) < sizeof(f))

/* Backend calls whose results (one record, or a list and its length: the op's last
 * arguments) reach the caller only when the call succeeds. */
#define OUT_ONE(ret, op, ...)                                                                   \
        ({                                                                                      \
                __typeof__(*(ret)) one_;                                                        \
                int r_ = m->ops->op(m, __VA_ARGS__, &one_);                                     \
                if (r_ >= 0)                                                                    \
                        *(ret) = one_;                                                          \
                MIN(r_, 0);                                                                     \
        })
#define OUT_LIST(ret, ret_n, op, ...)                                                           \
        ({                                                                                      \
                __typeof__(*(ret)) v_ = NULL;                                                   \
                size_t n_ = 0;                                                                  \
                int r_ = m->ops->op(m, ##__VA_ARGS__, &v_, &n_);                                \
                if (r_ >= 0) {                                                                  \
                        *(ret) = v_;                                                            \
                        *(ret_n) = n_;                                                          \
                }                                                                               \
                MIN(r_, 0);                                                                     \
        })

/* JSON text of len bytes (≤ META_JSON_MAX); object_only for env. */
static int check_json(struct meta *m, const char *what, const char *text, size_t len, bool object_only) {
        if (len > META_JSON_MAX)
                return meta_error(m, -E2BIG, "%s is %zu bytes, limit %u", what, len, META_JSON_MAX);
        if (memchr(text, 0, len))
                return meta_error(m, -EINVAL, "%s contains a NUL byte", what);
        char e[128] = "";
        _cleanup_json_ struct json *j = NULL;
        int r = json_parse(text, len, &j, e, sizeof e);
        if (r < 0)
                return meta_error(m, r == -ENOMEM ? -ENOMEM : -EINVAL, "%s is not JSON: %s", what, e);
        if (object_only && json_type(j) != JSON_OBJECT)
                return meta_error(m, -EINVAL, "%s must be a JSON object", what);
        return 0;
}

/* Cuts free text (errors, death reasons) at META_TEXT_MAX on a UTF-8 character boundary:
 * it comes from the daemon, so a long one is shortened rather than refused. */
static const char *cut_text(const char *in, char out[META_TEXT_MAX + 1]) {
        if (!in)
                return NULL;
        size_t n = strnlen(in, META_TEXT_MAX + 1);
        if (n <= META_TEXT_MAX)
                return in;
        n = META_TEXT_MAX;
        while (n > 0 && ((unsigned char)in[n] & 0xC0) == 0x80)
                n--;
        memcpy(out, in, n);
        out[n] = 0;
        return out;
}

/* ---- handle ---- */

int meta_open(const char *uri, const struct meta_opts *o, struct meta **ret) {
        if (!uri || !ret)
                return -EINVAL;
        if (o && (o->version < 1 || o->version > META_OPTS_VERSION))
                return -EINVAL;
        char *why = o && o->version >= 2 && o->error_size ? o->error : NULL;
        if (why)
                why[0] = '\0';
        const struct meta_backend_ops *ops = &meta_sqlite_ops;
        const char *target = uri;
        if (strncmp(uri, "sqlite:", 7) == 0)
                target = uri + 7;
        else if (strncmp(uri, "postgresql:", 11) == 0 || strncmp(uri, "postgres:", 9) == 0)
                return -EPROTONOSUPPORT;
        if (!target[0])
                return -EINVAL;
        _cleanup_free_ struct meta *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->ops = ops;
        int r = ops->open(m, target, o);
        if (r < 0) {
                if (why)
                        snprintf(why, o->error_size, "%s", m->err[0] ? m->err : strerror(-r));
                return r;
        }
        *ret = TAKE_PTR(m);
        return 0;
}

struct meta *meta_free(struct meta *m) {
        if (!m)
                return NULL;
        if (m->tx_depth > 0)
                m->ops->rollback(m, 1);
        m->ops->close(m);
        free(m);
        return NULL;
}

const char *meta_backend_name(struct meta *m) {
        return m->ops->name;
}

int meta_schema_version(struct meta *m) {
        m->err[0] = 0;
        return m->ops->schema_version(m);
}

int meta_check(struct meta *m) {
        m->err[0] = 0;
        return m->ops->check(m);
}

int meta_begin(struct meta *m) {
        m->err[0] = 0;
        int r = m->ops->begin(m, m->tx_depth + 1);
        if (r < 0)
                return r;
        m->tx_depth++;
        return 0;
}

int meta_commit(struct meta *m) {
        m->err[0] = 0;
        if (m->tx_depth == 0)
                return meta_error(m, -EINVAL, "commit without a transaction");
        int r = m->ops->commit(m, m->tx_depth);
        /* A failed outermost commit has been rolled back by the backend: either way this
         * level is over, the caller must not commit it twice. */
        m->tx_depth--;
        return r;
}

int meta_set_relaxed(struct meta *m, bool relaxed) {
        m->err[0] = 0;
        return m->ops->set_relaxed ? m->ops->set_relaxed(m, relaxed) : 0;
}

int meta_rollback(struct meta *m) {
        m->err[0] = 0;
        if (m->tx_depth == 0)
                return meta_error(m, -EINVAL, "rollback without a transaction");
        int r = m->ops->rollback(m, m->tx_depth);
        m->tx_depth--;
        return r;
}

/* ---- sessions ---- */

void meta_session_clear(struct meta_session *s) {
        if (!s)
                return;
        free(s->env_json);
        free(s->error);
        free(s->network_json);
        free(s->ports_json);
        free(s->timeouts_json);
        free(s->metadata_json);
        s->env_json = s->error = s->network_json = s->ports_json = s->timeouts_json = s->metadata_json = NULL;
}

void meta_sessions_free(struct meta_session *v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                meta_session_clear(&v[i]);
        free(v);
}

static int check_opt_id(struct meta *m, const char *what, const char *prefix, const char *id) {
        if (empty(id))
                return 0;
        if (!meta_id_valid(prefix, id))
                return meta_error(m, -EINVAL, "%s is not a %s_ id", what, prefix);
        return 0;
}

int meta_session_create(struct meta *m, const struct meta_session *s) {
        m->err[0] = 0;
        if (!s)
                return -EINVAL;
        if (!FIELD_OK(s->id) || !meta_id_valid("ses", s->id))
                return meta_error(m, -EINVAL, "session id must look like ses_<hex>");
        if (!FIELD_OK(s->tenant) || !name_valid(s->tenant, META_NAME_MAX))
                return meta_error(m, -EINVAL, "bad tenant name");
        if ((unsigned)s->state >= _META_SESSION_STATE_MAX)
                return meta_error(m, -EINVAL, "bad session state %d", (int)s->state);
        if (!FIELD_OK(s->template_name) || (s->template_name[0] && !name_valid(s->template_name, META_NAME_MAX)))
                return meta_error(m, -EINVAL, "bad template name");
        if (!FIELD_OK(s->runtime) || !name_valid(s->runtime, META_RUNTIME_MAX))
                return meta_error(m, -EINVAL, "bad runtime name");
        if (s->snapshot_interval_ms < 0 || s->created_ms < 0)
                return meta_error(m, -EINVAL, "negative time");
        if (s->limits.memory_bytes > INT64_MAX)
                return meta_error(m, -EINVAL, "memory limit out of range");
        if (s->limits.disk_bytes > INT64_MAX)
                return meta_error(m, -EINVAL, "disk limit out of range");
        if (!FIELD_OK(s->parent_session) || !FIELD_OK(s->source_snapshot) || !FIELD_OK(s->token_hash))
                return meta_error(m, -EINVAL, "unterminated field");
        int r = check_opt_id(m, "parent_session", "ses", s->parent_session);
        if (r < 0)
                return r;
        r = check_opt_id(m, "source_snapshot", "snap", s->source_snapshot);
        if (r < 0)
                return r;
        if (s->token_hash[0] && !hash_valid(s->token_hash))
                return meta_error(m, -EINVAL, "token hash must be %u lowercase hex digits", META_HASH_HEX);
        if (s->env_json) {
                r = check_json(m, "env", s->env_json, strnlen(s->env_json, META_JSON_MAX + 1), true);
                if (r < 0)
                        return r;
        }
        if (s->metadata_json) {
                r = check_json(m, "metadata", s->metadata_json, strnlen(s->metadata_json, META_JSON_MAX + 1), true);
                if (r < 0)
                        return r;
        }
        char cut[META_TEXT_MAX + 1];
        struct meta_session c = *s;
        c.error = (char *)cut_text(s->error, cut);
        return m->ops->session_create(m, &c, meta_now_ms());
}

int meta_session_get(struct meta *m, const char *id, struct meta_session *ret) {
        m->err[0] = 0;
        if (!id || !ret)
                return -EINVAL;
        return OUT_ONE(ret, session_get, id);
}

int meta_session_list(struct meta *m, const struct meta_session_filter *f, struct meta_session **ret,
                      size_t *ret_n) {
        m->err[0] = 0;
        if (!ret || !ret_n)
                return -EINVAL;
        struct meta_session_filter ff = f ? *f : (struct meta_session_filter){ 0 };
        if (ff.limit > META_PAGE_MAX)
                ff.limit = META_PAGE_MAX;
        if (ff.state_mask >> _META_SESSION_STATE_MAX)
                return meta_error(m, -EINVAL, "bad state mask");
        return OUT_LIST(ret, ret_n, session_list, &ff);
}

int meta_session_list_recover(struct meta *m, struct meta_session **ret, size_t *ret_n) {
        return meta_session_list(m,
                                 &(struct meta_session_filter){
                                         .state_mask = META_STATE_BIT(META_SESSION_RUNNING) |
                                                       META_STATE_BIT(META_SESSION_RECOVERING) },
                                 ret, ret_n);
}

int meta_session_set_state(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                           const char *error) {
        m->err[0] = 0;
        if (!id || (unsigned)to >= _META_SESSION_STATE_MAX || (from_mask >> _META_SESSION_STATE_MAX))
                return meta_error(m, -EINVAL, "bad state or state mask");
        char cut[META_TEXT_MAX + 1];
        return m->ops->session_set_state(m, id, from_mask, to, cut_text(error, cut), meta_now_ms());
}

int meta_session_set_sandbox(struct meta *m, const char *id, const char *sandbox_id) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        if (!empty(sandbox_id) && !meta_id_valid("sbx", sandbox_id))
                return meta_error(m, -EINVAL, "sandbox id must look like sbx_<hex>");
        return m->ops->session_set_field(m, id, META_FIELD_SANDBOX, empty(sandbox_id) ? NULL : sandbox_id,
                                         meta_now_ms());
}

int meta_session_set_head(struct meta *m, const char *id, const char *snapshot_id) {
        m->err[0] = 0;
        if (!id || !snapshot_id)
                return -EINVAL;
        return m->ops->session_set_head(m, id, snapshot_id, meta_now_ms());
}

/* The room's texts are bounded by the API (docs/network.md); this bound only keeps a row small. */
#define META_NET_JSON_MAX (256u << 10)

static int set_json_field(struct meta *m, const char *id, enum meta_session_field f, const char *json) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        if (json && strlen(json) > META_NET_JSON_MAX)
                return meta_error(m, -E2BIG, "JSON text over %u bytes", META_NET_JSON_MAX);
        return m->ops->session_set_field(m, id, f, empty(json) ? NULL : json, meta_now_ms());
}

int meta_session_set_network(struct meta *m, const char *id, const char *json) {
        return set_json_field(m, id, META_FIELD_NETWORK, json);
}

int meta_session_set_ports(struct meta *m, const char *id, const char *json) {
        return set_json_field(m, id, META_FIELD_PORTS, json);
}

int meta_session_set_timeouts(struct meta *m, const char *id, const char *json) {
        return set_json_field(m, id, META_FIELD_TIMEOUTS, json);
}

int meta_session_set_token_hash(struct meta *m, const char *id, const char *hash) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        if (!empty(hash) && !hash_valid(hash))
                return meta_error(m, -EINVAL, "token hash must be %u lowercase hex digits", META_HASH_HEX);
        return m->ops->session_set_field(m, id, META_FIELD_TOKEN_HASH, empty(hash) ? NULL : hash, meta_now_ms());
}

int meta_session_check_token(struct meta *m, const char *id, const char *token) {
        m->err[0] = 0;
        if (!id || !token)
                return -EINVAL;
        struct meta_session s;
        int r = m->ops->session_get(m, id, &s);
        if (r < 0)
                return r;
        char h[META_HASH_HEX + 1];
        r = meta_token_hash(token, h);
        if (r >= 0 && (!s.token_hash[0] || CRYPTO_memcmp(h, s.token_hash, META_HASH_HEX) != 0))
                r = meta_error(m, -EACCES, "wrong session token");
        meta_session_clear(&s);
        return r < 0 ? r : 0;
}

int meta_session_delete(struct meta *m, const char *id) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        return m->ops->session_delete(m, id);
}

/* ---- sandboxes ---- */

int meta_sandbox_create(struct meta *m, const struct meta_sandbox *b) {
        m->err[0] = 0;
        if (!b)
                return -EINVAL;
        if (!FIELD_OK(b->id) || !meta_id_valid("sbx", b->id))
                return meta_error(m, -EINVAL, "sandbox id must look like sbx_<hex>");
        if (!FIELD_OK(b->session_id) || !meta_id_valid("ses", b->session_id))
                return meta_error(m, -EINVAL, "session id must look like ses_<hex>");
        if (!FIELD_OK(b->host_id) || !name_valid(b->host_id, META_NAME_MAX))
                return meta_error(m, -EINVAL, "bad host id");
        if (!FIELD_OK(b->runtime) || !name_valid(b->runtime, META_RUNTIME_MAX))
                return meta_error(m, -EINVAL, "bad runtime name");
        if ((unsigned)b->state >= _META_SANDBOX_STATE_MAX || b->init_pid < 0 || b->created_ms < 0)
                return meta_error(m, -EINVAL, "bad sandbox state, pid or time");
        if (!FIELD_OK(b->death_reason))
                return meta_error(m, -EINVAL, "unterminated death reason");
        return m->ops->sandbox_create(m, b, meta_now_ms());
}

int meta_sandbox_get(struct meta *m, const char *id, struct meta_sandbox *ret) {
        m->err[0] = 0;
        if (!id || !ret)
                return -EINVAL;
        return OUT_ONE(ret, sandbox_get, id);
}

int meta_sandbox_set_state(struct meta *m, const char *id, enum meta_sandbox_state st, const char *reason) {
        m->err[0] = 0;
        if (!id || (unsigned)st >= _META_SANDBOX_STATE_MAX)
                return meta_error(m, -EINVAL, "bad sandbox state");
        char cut[META_TEXT_MAX + 1];
        return m->ops->sandbox_set_state(m, id, st, cut_text(reason, cut), meta_now_ms());
}

int meta_sandbox_set_pid(struct meta *m, const char *id, int32_t pid) {
        m->err[0] = 0;
        if (!id || pid < 0)
                return meta_error(m, -EINVAL, "bad pid");
        return m->ops->sandbox_set_pid(m, id, pid);
}

int meta_sandbox_list_session(struct meta *m, const char *session_id, struct meta_sandbox **ret,
                              size_t *ret_n) {
        m->err[0] = 0;
        if (!session_id || !ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, sandbox_list, session_id, NULL);
}

int meta_sandbox_list_live(struct meta *m, const char *host_id, struct meta_sandbox **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!host_id || !ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, sandbox_list, NULL, host_id);
}

/* ---- snapshots ---- */

int meta_snapshot_add(struct meta *m, const struct meta_snapshot *s) {
        m->err[0] = 0;
        if (!s)
                return -EINVAL;
        if (!FIELD_OK(s->id) || !meta_id_valid("snap", s->id))
                return meta_error(m, -EINVAL, "snapshot id must look like snap_<hex>");
        if (!FIELD_OK(s->session_id) || !meta_id_valid("ses", s->session_id))
                return meta_error(m, -EINVAL, "session id must look like ses_<hex>");
        if (!FIELD_OK(s->parent_id))
                return meta_error(m, -EINVAL, "unterminated parent id");
        int r = check_opt_id(m, "parent_id", "snap", s->parent_id);
        if (r < 0)
                return r;
        if (!FIELD_OK(s->store_hash) || !hash_valid(s->store_hash) || !FIELD_OK(s->root_hash) ||
            !hash_valid(s->root_hash) || !FIELD_OK(s->memory_hash) ||
            (s->memory_hash[0] && !hash_valid(s->memory_hash)))
                return meta_error(m, -EINVAL, "hashes must be %u lowercase hex digits", META_HASH_HEX);
        if ((unsigned)s->reason >= _META_REASON_MAX || s->time_ms < 0)
                return meta_error(m, -EINVAL, "bad snapshot reason or time");
        if (strnlen(s->label, sizeof s->label) >= sizeof s->label)
                return meta_error(m, -E2BIG, "label over %u bytes", META_LABEL_MAX);
        if (s->bytes_added > INT64_MAX || s->logical_size > INT64_MAX)
                return meta_error(m, -EINVAL, "size out of range");
        return m->ops->snapshot_add(m, s, meta_now_ms());
}

int meta_snapshot_get(struct meta *m, const char *id, struct meta_snapshot *ret) {
        m->err[0] = 0;
        if (!id || !ret)
                return -EINVAL;
        return OUT_ONE(ret, snapshot_get, id);
}

int meta_snapshot_list(struct meta *m, const char *session_id, struct meta_snapshot **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!session_id || !ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, snapshot_list, session_id);
}

int meta_snapshot_set_pinned(struct meta *m, const char *id, bool pinned) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        return m->ops->snapshot_set_pinned(m, id, pinned);
}

int meta_snapshot_delete(struct meta *m, const char *id) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        return m->ops->snapshot_delete(m, id);
}

int meta_snapshot_expired(struct meta *m, const char *session_id, struct meta_id **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!session_id || !ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, snapshot_expired, session_id);
}

int meta_snapshot_live_hashes(struct meta *m, struct meta_hash **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, snapshot_live_hashes);
}

int meta_snapshot_set_replicated(struct meta *m, const char *id, bool replicated) {
        m->err[0] = 0;
        if (!id)
                return -EINVAL;
        return m->ops->snapshot_set_replicated(m, id, replicated);
}

int meta_snapshot_unreplicated(struct meta *m, unsigned limit, struct meta_snapshot **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!ret || !ret_n || limit == 0 || limit > META_UNREPLICATED_MAX)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, snapshot_unreplicated, limit);
}

int meta_snapshot_count_unreplicated(struct meta *m, uint64_t *ret) {
        m->err[0] = 0;
        if (!ret)
                return -EINVAL;
        uint64_t n = 0;
        int r = m->ops->snapshot_count_unreplicated(m, &n);
        if (r >= 0)
                *ret = n;
        return MIN(r, 0);
}

/* ---- events ---- */

void meta_events_free(struct meta_event *v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                free(v[i].payload);
        free(v);
}

void meta_set_event_bounds(struct meta *m, const struct meta_event_bounds *b) {
        m->ev_bounds = b ? *b : (struct meta_event_bounds){ 0 };
}

static int event_add(struct meta *m, const char *session_id, const char *kind, const char *payload, size_t len,
                     bool agent, int64_t *ret_seq) {
        m->err[0] = 0;
        if (!session_id || !payload)
                return -EINVAL;
        if (!kind_valid(kind))
                return meta_error(m, -EINVAL, "event kind must be 1-%u of [a-z0-9_.-]", META_KIND_MAX);
        int r = check_json(m, "event payload", payload, len, false);
        if (r < 0)
                return r;
        if (agent && m->ev_bounds.agent_bytes && len > m->ev_bounds.agent_bytes)
                return meta_error(m, -E2BIG, "event payload over the session's %llu bytes of events",
                                  (unsigned long long)m->ev_bounds.agent_bytes);
        int64_t seq = 0;
        r = m->ops->event_append(m, session_id, kind, payload, len, agent, meta_now_ms(), &seq);
        if (r < 0)
                return r;
        if (ret_seq)
                *ret_seq = seq;
        return 0;
}

int meta_event_append(struct meta *m, const char *session_id, const char *kind, const char *payload,
                      size_t len, int64_t *ret_seq) {
        return event_add(m, session_id, kind, payload, len, false, ret_seq);
}

int meta_event_post(struct meta *m, const char *session_id, const char *kind, const char *payload,
                    size_t len, int64_t *ret_seq) {
        return event_add(m, session_id, kind, payload, len, true, ret_seq);
}

int meta_event_list(struct meta *m, const char *session_id, int64_t after_seq, unsigned limit,
                    struct meta_event **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!session_id || !ret || !ret_n)
                return -EINVAL;
        if (limit == 0 || limit > META_PAGE_MAX)
                limit = META_PAGE_MAX;
        if (after_seq < 0)
                after_seq = 0;
        return OUT_LIST(ret, ret_n, event_list, session_id, after_seq, limit, META_PAGE_MAX_BYTES);
}

int meta_event_last_seq(struct meta *m, const char *session_id, int64_t *ret) {
        m->err[0] = 0;
        if (!session_id || !ret)
                return -EINVAL;
        int64_t seq = 0;
        int r = m->ops->event_last_seq(m, session_id, &seq);
        if (r < 0)
                return r;
        *ret = seq;
        return 0;
}

/* ---- hosts ---- */

int meta_host_renew(struct meta *m, const char *host_id, const char *address, int64_t expires_ms) {
        m->err[0] = 0;
        if (!name_valid(host_id, META_NAME_MAX))
                return meta_error(m, -EINVAL, "bad host id");
        if (address && strnlen(address, META_ADDRESS_MAX + 1) > META_ADDRESS_MAX)
                return meta_error(m, -E2BIG, "host address over %u bytes", META_ADDRESS_MAX);
        if (expires_ms < 0)
                return meta_error(m, -EINVAL, "negative lease expiry");
        return m->ops->host_renew(m, host_id, empty(address) ? NULL : address, expires_ms, meta_now_ms());
}

int meta_host_get(struct meta *m, const char *host_id, struct meta_host *ret) {
        m->err[0] = 0;
        if (!host_id || !ret)
                return -EINVAL;
        return OUT_ONE(ret, host_get, host_id);
}

int meta_host_list_expired(struct meta *m, int64_t now_ms, struct meta_host **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, host_list_expired, now_ms);
}

int meta_host_delete(struct meta *m, const char *host_id) {
        m->err[0] = 0;
        if (!host_id)
                return -EINVAL;
        return m->ops->host_delete(m, host_id);
}

/* ---- tokens ---- */

int meta_token_create(struct meta *m, const char *hash, const char *tenant, const char *name) {
        m->err[0] = 0;
        if (!hash_valid(hash))
                return meta_error(m, -EINVAL, "token hash must be %u lowercase hex digits", META_HASH_HEX);
        if (!name_valid(tenant, META_NAME_MAX))
                return meta_error(m, -EINVAL, "bad tenant name");
        if (!empty(name) && !name_valid(name, META_NAME_MAX))
                return meta_error(m, -EINVAL, "bad token name");
        return m->ops->token_create(m, hash, tenant, empty(name) ? NULL : name, meta_now_ms());
}

int meta_token_lookup(struct meta *m, const char *hash, struct meta_token *ret) {
        m->err[0] = 0;
        if (!hash || !ret)
                return -EINVAL;
        struct meta_token tmp;
        int r = m->ops->token_get(m, hash, &tmp);
        if (r < 0)
                return r;
        if (tmp.revoked_ms != 0)
                return meta_error(m, -EKEYREVOKED, "token revoked");
        *ret = tmp;
        return 0;
}

int meta_token_revoke(struct meta *m, const char *hash) {
        m->err[0] = 0;
        if (!hash)
                return -EINVAL;
        return m->ops->token_revoke(m, hash, meta_now_ms());
}

int meta_token_list(struct meta *m, struct meta_token **ret, size_t *ret_n) {
        m->err[0] = 0;
        if (!ret || !ret_n)
                return -EINVAL;
        return OUT_LIST(ret, ret_n, token_list);
}
