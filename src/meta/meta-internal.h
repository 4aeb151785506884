/* The backend interface of the metadata store. meta.c checks every argument (formats,
 * limits) once; a backend (sqlite.c now, a PostgreSQL one later) only stores and reads,
 * and fills out-params only on success. */
#pragma once
#include <stdarg.h>
#include "meta/meta.h"

#define META_ERR_SIZE 512

struct meta_backend_ops;

struct meta {
        const struct meta_backend_ops *ops;
        void *be;          /* backend state */
        unsigned tx_depth; /* meta_begin nesting; 0 = none */
        struct meta_event_bounds ev_bounds;
        char err[META_ERR_SIZE];
};

/* Session row updates that meta.c turns the public setters into. */
enum meta_session_field {
        META_FIELD_SANDBOX,
        META_FIELD_TOKEN_HASH,
        META_FIELD_NETWORK,
        META_FIELD_PORTS,
        META_FIELD_TIMEOUTS,
};

struct meta_backend_ops {
        const char *name;
        int (*open)(struct meta *m, const char *target, const struct meta_opts *o);
        void (*close)(struct meta *m);
        int (*schema_version)(struct meta *m);
        int (*check)(struct meta *m);

        /* depth is the nesting level being entered or left (1 = outermost). */
        int (*begin)(struct meta *m, unsigned depth);
        int (*commit)(struct meta *m, unsigned depth);
        int (*rollback)(struct meta *m, unsigned depth);
        int (*set_relaxed)(struct meta *m, bool relaxed); /* NULL: always durable */

        int (*session_create)(struct meta *m, const struct meta_session *s, int64_t now);
        int (*session_get)(struct meta *m, const char *id, struct meta_session *ret);
        int (*session_list)(struct meta *m, const struct meta_session_filter *f, struct meta_session **ret,
                            size_t *ret_n);
        int (*session_set_state)(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                                 const char *error, int64_t now);
        int (*session_set_field)(struct meta *m, const char *id, enum meta_session_field f, const char *value,
                                 int64_t now);
        int (*session_set_head)(struct meta *m, const char *id, const char *snapshot_id, int64_t now);
        int (*session_delete)(struct meta *m, const char *id);

        int (*sandbox_create)(struct meta *m, const struct meta_sandbox *b, int64_t now);
        int (*sandbox_get)(struct meta *m, const char *id, struct meta_sandbox *ret);
        int (*sandbox_set_state)(struct meta *m, const char *id, enum meta_sandbox_state st, const char *reason,
                                 int64_t now);
        int (*sandbox_set_pid)(struct meta *m, const char *id, int32_t pid);
        /* session_id or host_id (live ones only) selects. */
        int (*sandbox_list)(struct meta *m, const char *session_id, const char *host_id,
                            struct meta_sandbox **ret, size_t *ret_n);

        int (*snapshot_add)(struct meta *m, const struct meta_snapshot *s, int64_t now);
        int (*snapshot_get)(struct meta *m, const char *id, struct meta_snapshot *ret);
        int (*snapshot_list)(struct meta *m, const char *session_id, struct meta_snapshot **ret, size_t *ret_n);
        int (*snapshot_set_pinned)(struct meta *m, const char *id, bool pinned);
        int (*snapshot_delete)(struct meta *m, const char *id);
        int (*snapshot_expired)(struct meta *m, const char *session_id, struct meta_id **ret, size_t *ret_n);
        int (*snapshot_live_hashes)(struct meta *m, struct meta_hash **ret, size_t *ret_n);
        int (*snapshot_set_replicated)(struct meta *m, const char *id, bool replicated);
        int (*snapshot_unreplicated)(struct meta *m, unsigned limit, struct meta_snapshot **ret, size_t *ret_n);
        int (*snapshot_count_unreplicated)(struct meta *m, uint64_t *ret);

        /* agent: a posted event; both kinds within m->ev_bounds. */
        int (*event_append)(struct meta *m, const char *session_id, const char *kind, const char *payload,
                            size_t len, bool agent, int64_t now, int64_t *ret_seq);
        int (*event_list)(struct meta *m, const char *session_id, int64_t after_seq, unsigned limit,
                          size_t max_bytes, struct meta_event **ret, size_t *ret_n);
        int (*event_last_seq)(struct meta *m, const char *session_id, int64_t *ret);

        int (*host_renew)(struct meta *m, const char *host_id, const char *address, int64_t expires_ms,
                          int64_t now);
        int (*host_get)(struct meta *m, const char *host_id, struct meta_host *ret);
        int (*host_list_expired)(struct meta *m, int64_t now_ms, struct meta_host **ret, size_t *ret_n);
        int (*host_delete)(struct meta *m, const char *host_id);

        int (*token_create)(struct meta *m, const char *hash, const char *tenant, const char *name, int64_t now);
        int (*token_get)(struct meta *m, const char *hash, struct meta_token *ret);
        int (*token_revoke)(struct meta *m, const char *hash, int64_t now);
        int (*token_list)(struct meta *m, struct meta_token **ret, size_t *ret_n);
};

extern const struct meta_backend_ops meta_sqlite_ops;

/* Records the message meta_last_error returns; returns r so that `return meta_error(m, -EIO, …)` works. */
int meta_error(struct meta *m, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
