/* Template builds (copy, untar or debootstrap): they block for seconds to minutes, so
 * each runs on a thread of its own, which reports progress lines and its result as
 * fixed-size records on a pipe that the event loop reads and hands to the build's
 * watcher (the API streams them to its client). The thread never touches daemon state.
 * Which templates are being built is known here: a create must not use one half-made. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include "meta/meta.h"
#include "runtime/template.h"

#define TPL_MAX_JOBS 8   /* builds at once */

struct daemon;
struct tpl_job;

/* Who hears of a build: progress lines, then done once (err 0: built, size bytes). */
struct tpl_watch_ops {
        void (*progress)(void *ctx, struct tpl_job *j, const char *line);
        void (*done)(void *ctx, struct tpl_job *j, int err, const char *msg, uint64_t size);
};

struct tpl_build_req {
        const char *name;
        bool base;                 /* template_ensure_base: the default template */
        struct template_source src;
        const char *runtime;       /* its default runtime; NULL: none */
};

int tpl_init(struct daemon *d);
/* Starts a build; the watcher hears of it until tpl_unwatch. -EBUSY: one of that name
 * exists or is being built, or too many builds run (TPL_MAX_JOBS); *why says which. */
int tpl_build(struct daemon *d, const struct tpl_build_req *q, const struct tpl_watch_ops *ops, void *ctx,
              struct tpl_job **ret, const char **why);
/* The watcher went away: the build goes on, its result only reaches the log. */
void tpl_unwatch(struct tpl_job *j);
const char *tpl_job_name(const struct tpl_job *j);
bool tpl_building(struct daemon *d, const char *name);
/* A template's size (cached by its rootfs mtime: a walk of a large tree is not free) and
 * when it was made. */
int tpl_info(struct daemon *d, const char *name, uint64_t *size, time_t *created);
