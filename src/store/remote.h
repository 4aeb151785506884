/* The snapshot store's remote tier (issue #17): snapshots pushed to an object-storage
 * bucket and pulled back on another host, and the bucket's garbage collection. The store
 * sees the bucket only through struct store_remote_ops (remote-s3.c fills it on the S3
 * client); the layout of the bucket and the rules that keep it safe are in docs/store.md,
 * "Remote tier". */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define STORE_REMOTE_JOBS_DEFAULT 4u   /* objects moved at once by push and pull */
#define STORE_REMOTE_JOBS_MAX 32u
#define STORE_REMOTE_GRACE_DEFAULT (24u * 3600u) /* seconds: see store_remote_gc */
#define STORE_REMOTE_GRACE_MIN 2u
#define STORE_REMOTE_NAME_MAX 512u     /* bytes of store_remote.name */
/* One encoded object in the bucket: header + at most a raw copy of the largest object. */
#define STORE_REMOTE_HEADER 12u
#define STORE_REMOTE_OBJECT_MAX (STORE_MAX_OBJECT + STORE_REMOTE_HEADER)
/* Objects one snapshot may reach in a push, pull or the bucket GC's walk (a bucket
 * anyone can write to could hold a DAG of any size: each object is checked, not the sum). */
#define STORE_REMOTE_MAX_OBJECTS (1u << 26)
/* Entries of a known list that are read, 48 bytes of memory each during a push (the rest
 * only cost a HEAD or a listing: 4 Mi objects is ~512 GB of 128 KiB chunks). */
#define STORE_REMOTE_KNOWN_MAX (1u << 22)

struct store_remote;

/* What a bucket backend offers: keys ("objects/<hex>", "snapshots/<hex>") to bytes. Each
 * call returns 0 or a negative errno (-ENOENT no such key, -EACCES refused, -EFBIG past
 * max, -ECONNREFUSED/-ETIMEDOUT server unreachable after the backend's own retries,
 * -EIO other) and leaves a message for last_error. A handle is used by one thread at a
 * time; clone makes another to the same bucket for another thread. */
struct store_remote_ops {
        int (*put)(struct store_remote *r, const char *key, const void *data, size_t n);
        /* The whole object into a malloc'ed buffer; -EFBIG past max bytes. */
        int (*get)(struct store_remote *r, const char *key, size_t max, void **ret_data, size_t *ret_n);
        /* Size and last modification (seconds since the epoch, by the server's clock). */
        int (*head)(struct store_remote *r, const char *key, uint64_t *ret_size, int64_t *ret_mtime);
        /* Every key under prefix, with size and mtime; fn returning non-zero stops the walk
         * and is returned. */
        int (*list)(struct store_remote *r, const char *prefix,
                    int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime), void *ud);
        /* Deleting a key that is not there is not an error. */
        int (*del)(struct store_remote *r, const char *key);
        int (*clone)(struct store_remote *r, struct store_remote **ret);
        void (*free)(struct store_remote *r);
        const char *(*last_error)(const struct store_remote *r);
};

/* Backends embed this first. name identifies the bucket (e.g. "ENDPOINT/BUCKET"): the
 * local list of objects known to be there is kept per name. */
struct store_remote {
        const struct store_remote_ops *ops;
        char name[STORE_REMOTE_NAME_MAX];
};

static inline struct store_remote *store_remote_free(struct store_remote *r) {
        if (r)
                r->ops->free(r);
        return NULL;
}
static inline void store_remote_freep(struct store_remote **r) { *r = store_remote_free(*r); }
#define _cleanup_store_remote_ __attribute__((cleanup(store_remote_freep)))

struct store_remote_opts {
        unsigned jobs;      /* objects in flight, one backend handle each; 0 = default, ≤ JOBS_MAX */
        /* The bucket's GC grace in seconds (the same value store_remote_gc uses; 0 =
         * STORE_REMOTE_GRACE_DEFAULT). A push re-uploads an object it would reuse whose
         * last upload is older than half of it, and gives up (-ETIMEDOUT, before writing
         * the record) when it has run longer than half of it. */
        unsigned grace_s;
        store_progress_fn progress; /* phase "push"/"pull": entries = objects done, bytes of bytes_total */
        void *userdata;
};

struct store_remote_stats {
        uint64_t objects;        /* objects the snapshot reaches, its record included */
        uint64_t bytes;          /* their plain bytes (push; pull: of those fetched) */
        uint64_t objects_sent;   /* push: uploaded (the record included) */
        uint64_t bytes_sent;     /* push: bytes uploaded (encoded) */
        uint64_t objects_known;  /* push: skipped, the local known list vouches for them */
        uint64_t objects_found;  /* push: skipped, HEAD found a recent copy in the bucket */
        uint64_t objects_fetched;/* pull: downloaded and checked (the record included) */
        uint64_t bytes_fetched;  /* pull: bytes downloaded (encoded) */
        uint64_t objects_local;  /* pull: present in the local store already */
};

/* Uploads what snap reaches (its record, trees, chunks, memory image: plain bytes, so a
 * delta's base is not needed) that the bucket lacks, as objects/<hex>, then the record as
 * snapshots/<hex>. snap must be in the store. An object counts as in the bucket when this
 * store uploaded it or saw it there recently (remote/ID.known) or HEAD finds it. On
 * failure part of the objects may be in the bucket, never the record; calling again
 * finishes the job. stats (may be NULL) is filled on success and on failure. */
int store_push(struct store *s, struct store_remote *r, const struct store_hash *snap,
               const struct store_remote_opts *o, struct store_remote_stats *stats);

/* Fetches snapshots/<snap> and every object it reaches that the store lacks, checks
 * each against its name (-EBADMSG naming the object when one does not match or does not
 * decode), and commits them all with the record, which is then listed like a capture's;
 * on any failure nothing is committed. 0 at once when snap is listed already. -ENOENT
 * when the bucket has no such snapshot (or lacks an object it reaches). */
int store_pull(struct store *s, struct store_remote *r, const struct store_hash *snap,
               const struct store_remote_opts *o, struct store_remote_stats *stats);

/* Hashes of the snapshot records in the bucket whose hex id starts with prefix ("" for
 * all). Free *ret. */
int store_remote_snapshots(struct store_remote *r, const char *prefix, struct store_hash **ret, size_t *ret_n);

#define STORE_REMOTE_GC_OPTS_VERSION 1
struct store_remote_gc_opts {
        unsigned version;   /* STORE_REMOTE_GC_OPTS_VERSION */
        unsigned grace_s;   /* 0 = STORE_REMOTE_GRACE_DEFAULT; at least GRACE_MIN */
        /* CLOCK_REALTIME taken before the live set was computed (0: now). Deletions stop
         * (-ETIMEDOUT) once half the grace has passed since. */
        int64_t live_since_ns;
        bool dry_run;       /* count only */
        store_progress_fn progress; /* phase "mark" then "sweep" */
        void *userdata;
};
#define STORE_REMOTE_GC_OPTS_INIT .version = STORE_REMOTE_GC_OPTS_VERSION

struct store_remote_gc_result {
        uint64_t live_snapshots;
        uint64_t objects_marked;     /* objects the live snapshots reach */
        uint64_t objects_kept;       /* keys under objects/ kept because marked */
        uint64_t objects_young;      /* not marked, but younger than the grace: kept */
        uint64_t objects_deleted;
        uint64_t bytes_deleted;
        uint64_t snapshots_deleted;  /* snapshots/<hex> of snapshots not live, past the grace */
        uint64_t snapshots_young;    /* not live, younger than the grace: kept */
        uint64_t foreign;            /* keys that are not ours: left alone */
};

/* Marks what the live snapshots reach (each read from this store if it has it, else from
 * the bucket's record and trees), then deletes every objects/<hex> not marked and
 * snapshots/<hex> not live whose last modification is older than grace_s. A live
 * snapshot found neither here nor in the bucket (a push still running elsewhere) stops
 * it before anything is deleted: -EAGAIN. The live set must name every snapshot of every
 * host sharing the bucket that may still be pushed or pulled; docs/store.md says why
 * this is safe beside pushes on other hosts. *ret is filled on failure too (what was
 * deleted before the error), like the stats of push and pull. */
int store_remote_gc(struct store *s, struct store_remote *r, const struct store_hash *live, size_t n_live,
                    const struct store_remote_gc_opts *o, struct store_remote_gc_result *ret);
