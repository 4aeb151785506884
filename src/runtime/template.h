/* Templates: read-only root trees unpacked once per host under DATA/templates/NAME/rootfs
 * and shared as the overlay lower layer of every sandbox made from them. Trees are
 * stored with ids shifted by RT_ID_BASE (see docs/runtime-ns.md). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define TEMPLATE_MAX_NAME 64
#define TEMPLATE_MAX_PACKAGES 256          /* --packages entries of one debootstrap */
#define TEMPLATE_MAX_PACKAGES_LEN 4096     /* their comma-separated text */
#define TEMPLATE_MAX_ENTRIES (4u << 20)    /* files, dirs and links of one template */
#define TEMPLATE_MAX_DEPTH 256             /* directory nesting */
#define TEMPLATE_MAX_COUNT 10000           /* templates template_list returns */
#define TEMPLATE_BASE "base"
#define TEMPLATE_BASE_SUITE "bookworm"
#define TEMPLATE_BASE_PACKAGES "python3"
#define TEMPLATE_DEFAULT_MIRROR "http://deb.debian.org/debian"
#define TEMPLATE_DEFAULT_CACHE "/var/cache/space"

enum template_source_kind {
        TEMPLATE_FROM_DIR,         /* copy a directory tree */
        TEMPLATE_FROM_TAR,         /* extract a tar file (any compression tar detects) */
        TEMPLATE_FROM_DEBOOTSTRAP, /* debootstrap --variant=minbase SUITE, cached */
};

struct template_source {
        enum template_source_kind kind;
        const char *path;     /* DIR and TAR */
        const char *suite;    /* DEBOOTSTRAP: "bookworm", ... */
        const char *packages; /* DEBOOTSTRAP: "python3,git" or NULL */
        const char *mirror;   /* DEBOOTSTRAP: NULL = $SPACE_DEBIAN_MIRROR or the default */
};

/* One human-readable progress line (subprocess output included). */
typedef void (*template_progress_fn)(const char *line, void *userdata);

/* [a-z0-9][a-z0-9._-]{0,63}: no '/', no "..", nothing hidden. */
bool template_name_valid(const char *name);
/* DATA/templates/NAME/rootfs (whether or not it exists). */
int template_rootfs_path(const char *data_dir, const char *name, char **ret);
bool template_exists(const char *data_dir, const char *name);

/* Builds into a temporary directory and renames it into place: a half-built template
 * never appears. -EEXIST if NAME exists. On failure runtime_last_error() says why. */
int template_build(const char *data_dir, const char *name, const struct template_source *src,
                   template_progress_fn cb, void *userdata);
/* Sorted, NULL-terminated; free with template_list_free. */
int template_list(const char *data_dir, char ***ret);
void template_list_free(char **list);
/* Removes NAME (renamed away first, then deleted). The daemon checks it is unused. */
int template_remove(const char *data_dir, const char *name);
/* A template's default runtime (what a session made from it runs on unless the create
 * names one): DATA/templates/NAME/runtime. get: -ENOENT when it has none. set: runtime
 * NULL or "" removes it; the name is not checked against the drivers here. */
int template_runtime_get(const char *data_dir, const char *name, char *buf, size_t size);
int template_runtime_set(const char *data_dir, const char *name, const char *runtime);

/* Builds "base" (debootstrap bookworm minbase + python3) unless it exists. */
int template_ensure_base(const char *data_dir, template_progress_fn cb, void *userdata);

/* Building blocks, exposed for tests. */
/* Copies src to a new directory dst with ids shifted into the sandbox range. */
int template_copy_tree(const char *src, const char *dst);
/* Shifts the ids of a tree in place (after tar or debootstrap ran as host root). */
int template_shift_tree(const char *dir);
/* Host id -> stored id: 0..RT_ID_COUNT-1 move up by RT_ID_BASE, ids already in the
 * shifted range stay, anything else becomes the shifted "nobody" (65534). */
unsigned template_shift_id(unsigned id);
/* The unprivileged user of debootstrap templates (base among them): appended to
 * etc/passwd, etc/group and (when present) etc/shadow and etc/gshadow with a locked
 * password, home /home/user (0755, owned by it, shifted) with etc/skel's top files, shell
 * /bin/bash when the tree has one, else /bin/sh. Nothing changes when etc/passwd already
 * has a uid 1000 or a "user", or is absent; a file over TEMPLATE_USER_FILE_MAX is -EFBIG. */
#define TEMPLATE_USER "user"
#define TEMPLATE_USER_UID 1000u
#define TEMPLATE_USER_HOME "/home/user"
#define TEMPLATE_USER_FILE_MAX (1 << 20)
int template_add_user(const char *rootfs);
/* Cache file name for a debootstrap (suite + sorted package set); -EINVAL on bad names. */
int template_cache_name(const char *suite, const char *packages, char *buf, size_t n);
