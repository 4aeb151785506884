/* Snapshot layers (docs/sessions.md, "Snapshot layers"): a snapshot's files materialized
 * once per host and boot, read-only, under DATA/layers/<root tree>, and shared as an
 * overlayfs lower layer by every sandbox started from that snapshot or from one close to
 * it; the sandbox's writable layer then holds only the difference. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "store/store.h"

#define LAYERS_REF_MAX 512  /* bytes of a reference file */
#define LAYERS_ID_MAX 63    /* a session or snapshot id in a source layer's record */

struct layer_ref {
        bool set;
        struct store_hash root;  /* the layer holds this tree */
        struct store_hash rec;   /* the store record that keeps its objects (a fork; GC live) */
};

enum layer_how {
        LAYER_SAME,   /* the layer of the snapshot's own tree was there */
        LAYER_DELTA,  /* the candidate layer, with the difference in the writable layer */
        LAYER_MADE,   /* a new layer was materialized (O(workspace), once per tree and boot) */
        LAYER_PLAIN,  /* no layer: the tree has hard links, materialized whole in the writable
                       * layer (overlayfs without its index breaks lower hard links on copy-up) */
};

/* A source layer: made at a snapshot from a read-only btrfs snapshot of the session's
 * sandbox directory, kept for the forks of that snapshot (docs/sessions.md). */
struct layer_source {
        struct store_hash root;
        char session[LAYERS_ID_MAX + 1];
        char snap[LAYERS_ID_MAX + 1];
};

/* DATA/layers/<root>/files: the overlay lower directory (for a source layer, a symlink
 * to the upper/ of its btrfs snapshot). */
int layers_files_dir(const char *data_dir, const struct layer_ref *l, char **ret);

/* Makes the writable layer `upper` (absent or empty) such that, over the returned layer
 * and the template, it shows snapshot snap: over the layer of snap's own tree if there is
 * one; else over cand with only the difference written (if overlayfs can express it);
 * else over a layer made now. A worker's job: it can take as long as a materialization. */
int layers_start(const char *data_dir, struct store *st, const struct store_hash *snap, const struct layer_ref *cand,
                 const char *upper, struct store_op_stats *stats, struct layer_ref *ret, enum layer_how *ret_how);

/* Publishes snap_dir, a read-only btrfs snapshot of a sandbox directory whose upper/
 * holds exactly snapshot snap (tree root) relative to the template, as the layer of
 * root, owned by session's snapshot snap_id; its records are fsynced, so it stays valid
 * across boots. -EEXIST: a layer of root is there already (snap_dir is the caller's to
 * remove, as on any error). */
int layers_adopt(const char *data_dir, struct store *st, const struct store_hash *snap,
                 const struct store_hash *root, const char *snap_dir, const char *session, const char *snap_id,
                 struct layer_ref *ret);
/* Every source layer on disk. Free *ret. */
int layers_sources(const char *data_dir, struct layer_source **ret, size_t *ret_n);
/* Entries of vol_layers (where source layers' btrfs snapshots are made) that no layer
 * names any more go to drop; those named ".*" (a capture's own, removed by it) only
 * with leftovers (at start). Call only while no snapshot for a source layer is being
 * made or adopted. */
void layers_vol_sweep(const char *data_dir, const char *vol_layers, bool leftovers,
                      void (*drop)(void *userdata, const char *dir), void *userdata);

/* Which layer a writable layer lies on: a small file beside it (tmp + rename). A ref that
 * is not set removes the file. */
int layers_ref_write(const char *path, const struct layer_ref *l);
/* -ENOENT: none (a plain writable layer); -EBADMSG: unreadable, so unknown. */
int layers_ref_read(const char *path, struct layer_ref *ret);

/* The store records of every layer on disk, for the GC's live set. Free *ret. */
int layers_live(const char *data_dir, struct store_hash **ret, size_t *ret_n);

/* Every layer whose root is not in keep (and leftovers of unfinished ones) goes to drop.
 * Call only while no layers_start runs. */
void layers_sweep(const char *data_dir, const struct store_hash *keep, size_t n_keep,
                  void (*drop)(void *userdata, const char *dir), void *userdata);
