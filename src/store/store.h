/* The snapshot store: content-addressed chunks, trees, memory images and snapshot records
 * in one local directory (a Merkle DAG, ARCHITECTURE.md §3). spaced captures a sandbox's
 * writable layer with store_capture() and gets it back with store_materialize(). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_HASH_LEN 32
#define STORE_HEX_LEN (2 * STORE_HASH_LEN)

/* Limits every decoder and the capture enforce (on-disk format version 1). */
#define STORE_MAX_OBJECT (64u << 20)      /* plain bytes of one object */
#define STORE_MAX_DIR_ENTRIES (1u << 20)  /* entries in one directory */
#define STORE_MAX_NAME 255u               /* bytes of an entry name */
#define STORE_MAX_TARGET 4095u            /* bytes of a symlink target */
#define STORE_MAX_XATTRS 1024u            /* xattrs of one entry */
#define STORE_MAX_XATTR_NAME 255u
#define STORE_MAX_XATTR_VALUE (64u << 10)
/* Directory nesting below the root: as deep as a path of one-byte names can go within
 * PATH_MAX (every walk keeps one frame, and materialize one fd, per level). */
#define STORE_MAX_DEPTH 2048u
#define STORE_MAX_SESSION 128u            /* bytes of a session id */
#define STORE_MAX_LABEL 256u              /* bytes of a snapshot label */
#define STORE_MAX_FILE_SIZE (1ull << 42)  /* 4 TiB: longest regular file or memory image */
#define STORE_MAX_THREADS 64u

/* Content-defined chunking of file data (part of the format: changing these changes hashes). */
#define STORE_CHUNK_MIN (32u << 10)
#define STORE_CHUNK_AVG (128u << 10)
#define STORE_CHUNK_MAX (512u << 10)
/* Memory images are cut at fixed offsets of this size. */
#define STORE_MEMORY_CHUNK (256u << 10)
/* Fixed-size chunking of a capture (store_capture_opts.fixed_chunk): a power of two in
 * this range. Below 4 KiB the index (32 bytes a chunk) and per-chunk costs outgrow the
 * page a change dirties; above 64 KiB a scattered page costs too much again. */
#define STORE_FIXED_CHUNK_MIN (4u << 10)
#define STORE_FIXED_CHUNK_MAX (64u << 10)
/* What spaced uses for checkpoint directories (VM RAM and disk images rewritten in place
 * at scattered pages); chosen by measurement, docs/store.md: with delta chunks a dirty
 * page costs about as little in 64 KiB as in 16 KiB, and the chunk list is 4x shorter. */
#define STORE_FIXED_CHUNK_IMAGE (64u << 10)

struct store_hash {
        uint8_t b[STORE_HASH_LEN];
};

/* Lowercase hex, NUL-terminated. */
void store_hash_to_hex(const struct store_hash *h, char out[STORE_HEX_LEN + 1]);
/* -EINVAL unless s is exactly 64 hex digits. */
int store_hash_from_hex(const char *s, struct store_hash *ret);
bool store_hash_eq(const struct store_hash *a, const struct store_hash *b);

/* The message of the last error a store_* call returned in this thread: it names the
 * object, entry or path at fault. Empty string when there is none. */
const char *store_error_detail(void);

struct store;

#define STORE_OPTS_VERSION 1
struct store_opts {
        unsigned version;          /* STORE_OPTS_VERSION */
        bool create;               /* make the store (directory and layout) if missing */
        unsigned threads;          /* worker threads for hashing/compression; 0 = online CPUs */
        int compression_level;     /* zstd level; 0 = default (2: on 256 KiB blocks it beats a tar stream at -1) */
};
#define STORE_OPTS_INIT .version = STORE_OPTS_VERSION

/* Opens (or with o->create makes) the store at dir. -ENOENT if there is none,
 * -EBADMSG if dir holds something that is not a store of a format we read. */
int store_open(const char *dir, const struct store_opts *o, struct store **ret);
/* Whether dir holds a store this code reads, without opening it or changing anything:
 * 0 yes, -ENOENT no store there (yet), -EBADMSG a foreign or newer format (the detail,
 * with the format found, in store_error_detail). */
int store_probe(const char *dir);
struct store *store_free(struct store *s);
static inline void store_freep(struct store **s) { *s = store_free(*s); }
#define _cleanup_store_ __attribute__((cleanup(store_freep)))

/* Progress reports, from the calling thread only, at most every ~100 ms. */
struct store_progress {
        const char *phase;   /* "scan", "read", "write", "commit", "verify", "mark", "sweep" */
        uint64_t entries;    /* entries seen so far */
        uint64_t bytes;      /* data bytes processed so far */
        uint64_t bytes_total;/* data bytes to process, when known (else 0) */
        uint64_t entries_total; /* entries to process, when known (else 0): push and pull's objects */
};
typedef void (*store_progress_fn)(void *userdata, const struct store_progress *p);

/* What one operation did; counts are of this operation only. */
struct store_op_stats {
        uint64_t entries;          /* entries walked */
        uint64_t files;            /* regular files in the snapshot */
        uint64_t files_read;       /* regular files whose data was read */
        uint64_t bytes_read;       /* file or object bytes read from disk */
        uint64_t bytes_logical;    /* sum of regular file sizes */
        uint64_t objects_written;  /* new objects stored */
        uint64_t bytes_written;    /* bytes of new object files (headers included) */
        uint64_t objects_reused;   /* objects found already present */
        uint64_t trees_written;    /* of objects_written, how many were trees */
        uint64_t link_groups;      /* hard-link groups: captured (seen with 2+ names), materialized (made) */
        uint64_t deltas_written;   /* of objects_written, chunks stored as deltas (capture) */
};

enum store_reason {
        STORE_REASON_MANUAL = 0,
        STORE_REASON_ROLLING = 1,
        STORE_REASON_PAUSE = 2,
        STORE_REASON_FORK = 3,
        _STORE_REASON_MAX,
};
const char *store_reason_name(enum store_reason r);
/* -EINVAL for an unknown name. */
int store_reason_from_name(const char *name, enum store_reason *ret);

struct store_capture_opts {
        const char *session;              /* may be NULL; ≤ STORE_MAX_SESSION bytes */
        const char *label;                /* may be NULL; ≤ STORE_MAX_LABEL bytes */
        enum store_reason reason;
        const struct store_hash *memory;  /* memory image to attach, or NULL */
        bool no_stat_cache;               /* read every file even if the parent's cache says unchanged */
        /* 0: content-defined chunking (cuts follow content, so inserts shift little). Else
         * files are cut at every multiple of this many bytes of file offset (a power of
         * two, STORE_FIXED_CHUNK_MIN..MAX, else -EINVAL): for images changed in place at
         * scattered pages, where a dirty 4 KiB page then costs one such chunk instead of a
         * ~128 KiB content-defined one. The format is the same; only boundaries differ, so
         * the same content captured both ways has different chunk lists (store_diff calls
         * such a file modified). The parent's stat cache is used only if it was written by
         * a capture with the same chunking. */
        uint32_t fixed_chunk;
        /* With fixed_chunk, a changed chunk at the same offset and of the same length as
         * the parent's chunk there is stored as the difference to it (XOR, compressed)
         * when that is at most half its compressed size (docs/store.md, "Delta chunks").
         * true: never (to measure what deltas save). */
        bool no_delta;
        /* dir is an overlayfs upper layer over the files of this snapshot (mounted as the
         * lower layer just below it, with redirect_dir, metacopy and index off): the
         * capture is of the merged view, what the two layers show together. Only dir is
         * walked; whiteouts (char 0/0) and opaque directories (trusted.overlay.opaque "y")
         * take away what base has, and whiteouts are kept (they still hide what lies
         * below base). Hard-link groups of dir are named apart from base's. NULL: plain. */
        const struct store_hash *base;
        /* dir is a frozen copy of another directory (a btrfs snapshot: the same inode
         * numbers, ctimes and mtimes, another device) made at copy_ns (CLOCK_REALTIME):
         * the parent's stat cache is looked up, and this capture's saved, under the
         * original's device and inode (cache_dev, cache_ino), and an entry changed within
         * the timestamp granularity before copy_ns is not cached, as if the capture had
         * started then. 0: dir is captured as itself. */
        int64_t copy_ns;
        uint64_t cache_dev, cache_ino;
        store_progress_fn progress;
        void *userdata;
        struct store_op_stats *stats;     /* filled on success and on failure, if not NULL */
};

/* Captures the directory dir into a new snapshot record and returns its hash. With a
 * parent, files whose size, mtime, ctime and inode match the parent's stat cache are not
 * read again. The record is durable (and listed by store_snapshot_list) when this returns.
 * -EAGAIN: a concurrent garbage collection removed an object this capture wanted to
 * reuse; call again. */
int store_capture(struct store *s, const char *dir, const struct store_hash *parent,
                  const struct store_capture_opts *o, struct store_hash *ret_snapshot);

/* A new record that shares snap's root tree and memory image (O(1), nothing copied). */
int store_fork(struct store *s, const struct store_hash *snap, const char *session, const char *label,
               struct store_hash *ret_snapshot);

struct store_materialize_opts {
        bool no_owner;        /* leave files owned by the caller (for unprivileged use) */
        bool no_stat_cache;   /* don't record a stat cache for the next capture of dir */
        /* Write only what differs from this snapshot, as an overlayfs upper layer over its
         * files (whiteouts for what snap lacks), so that the two layers together show
         * snap: O(difference). -EXDEV when overlayfs cannot express the difference (a
         * whiteout or opaque directory of base that snap lacks, a non-opaque directory of
         * snap over a non-directory of base): then use a full one. -EMLINK for a hard link
         * that differs (overlayfs without its index breaks lower hard links on copy-up, so
         * a tree with hard links belongs in a writable layer whole). */
        const struct store_hash *base;
        /* dir is a frozen copy of another directory (a btrfs snapshot: the same inode
         * numbers, ctimes and mtimes, another device) made at copy_ns (CLOCK_REALTIME):
         * the parent's stat cache is looked up, and this capture's saved, under the
         * original's device and inode (cache_dev, cache_ino), and an entry changed within
         * the timestamp granularity before copy_ns is not cached, as if the capture had
         * started then. 0: dir is captured as itself. */
        int64_t copy_ns;
        uint64_t cache_dev, cache_ino;
        store_progress_fn progress;
        void *userdata;
        struct store_op_stats *stats;
};

/* Recreates snapshot snap in dir, which must be empty or not exist (it is then created).
 * Nothing is written outside dir. On failure dir holds a partial tree. */
int store_materialize(struct store *s, const struct store_hash *snap, const char *dir,
                      const struct store_materialize_opts *o);

enum store_change { STORE_ADDED = 'A', STORE_REMOVED = 'D', STORE_MODIFIED = 'M' };
/* Returning a negative errno stops the diff and store_diff returns it. */
typedef int (*store_diff_fn)(void *userdata, enum store_change c, const char *path);
/* Calls fn for each path that differs between snapshots a and b, in path order. A path
 * is modified when its type, content or any attribute (mode, owner, mtime, xattrs) differs. */
int store_diff(struct store *s, const struct store_hash *a, const struct store_hash *b,
               store_diff_fn fn, void *userdata);

struct store_snapshot_info {
        struct store_hash hash;
        struct store_hash root;           /* root tree */
        bool has_parent;
        struct store_hash parent;
        bool has_memory;
        struct store_hash memory;
        int64_t time_ns;                  /* CLOCK_REALTIME at capture */
        enum store_reason reason;
        char session[STORE_MAX_SESSION + 1];
        char label[STORE_MAX_LABEL + 1];
        uint64_t files;
        uint64_t bytes_logical;
};
int store_snapshot_get(struct store *s, const struct store_hash *snap, struct store_snapshot_info *ret);
/* Hashes of every snapshot record the store lists (refs), oldest first. Free *ret. */
int store_snapshot_list(struct store *s, struct store_hash **ret, size_t *ret_n);
/* Resolves a unique hex prefix (≥ 4 digits) of a listed snapshot. -ENOENT none, -ENOTUNIQ several. */
int store_snapshot_resolve(struct store *s, const char *prefix, struct store_hash *ret);
/* Drops snap from the list; the next store_gc that does not name it live removes it. */
int store_snapshot_forget(struct store *s, const struct store_hash *snap);

/* Memory images: data cut at fixed STORE_MEMORY_CHUNK offsets, all-zero pieces and holes
 * stored as nothing. Reads size bytes of fd from offset 0. */
int store_memory_put(struct store *s, int fd, uint64_t size, struct store_op_stats *stats,
                     struct store_hash *ret_image);
/* Writes the image into fd (truncated to the image size first; zero pieces become holes). */
int store_memory_get(struct store *s, const struct store_hash *image, int fd);

enum store_problem_kind {
        STORE_PROBLEM_MISSING,   /* referenced object absent */
        STORE_PROBLEM_CORRUPT,   /* object fails its hash, header or decoding */
        STORE_PROBLEM_FOREIGN,   /* a file in the store that is not one of ours */
};
struct store_problem {
        enum store_problem_kind kind;
        struct store_hash object;  /* zero for FOREIGN */
        const char *path;          /* store-relative file, or the snapshot path referencing it */
        const char *message;
};
typedef void (*store_problem_fn)(void *userdata, const struct store_problem *p);

struct store_verify_result {
        uint64_t snapshots;
        uint64_t objects_checked;
        uint64_t bytes_checked;
        uint64_t problems;
        uint64_t unreachable;   /* valid objects no listed snapshot reaches */
};
/* Checks every listed snapshot, everything it reaches and every file in the store.
 * Returns 0 when it could run (result->problems says whether it found anything). */
int store_verify(struct store *s, store_problem_fn fn, void *userdata, store_progress_fn progress,
                 void *progress_userdata, struct store_verify_result *ret);

struct store_gc_opts {
        bool dry_run;
        /* Records committed at or after this CLOCK_REALTIME time are kept as if live, so the
         * live set only has to name what existed when it was computed: take the time, then
         * compute the live set, then call store_gc. 0 = the time store_gc is called. */
        int64_t keep_since_ns;
        store_progress_fn progress;
        void *userdata;
};
struct store_gc_result {
        uint64_t live_snapshots;
        uint64_t objects_kept;
        uint64_t objects_removed;
        uint64_t bytes_removed;
        uint64_t snapshots_removed;
        uint64_t temp_removed;   /* leftovers of crashed captures */
};
/* Mark-and-sweep: keeps the live snapshot records (not their parents), everything they
 * reach, records committed while the collection runs and whatever running captures and
 * materializations use; removes every other object and record. Captures may run meanwhile. */
int store_gc(struct store *s, const struct store_hash *live, size_t n_live, const struct store_gc_opts *o,
             struct store_gc_result *ret);

struct store_stats {
        uint64_t objects;
        uint64_t bytes_stored;    /* object file sizes */
        uint64_t bytes_plain;     /* uncompressed object sizes */
        uint64_t snapshots;       /* listed records */
        uint64_t bytes_logical;   /* sum over listed snapshots of their file bytes */
        double dedup_ratio;       /* bytes_logical / bytes_stored (0 if nothing stored) */
        uint64_t by_kind[4];      /* objects: chunks, trees, snapshot records, memory images */
};
int store_stats(struct store *s, struct store_stats *ret);
