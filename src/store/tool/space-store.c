/* space-store: the admin tool over a snapshot store directory (put, get, diff, log, show,
 * fork, rm, verify, gc, stats). It is a thin shell over src/store/store.h; everything it
 * prints for machines is one hash per line or JSON. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/json.h"
#include "store/remote.h"
#include "store/store.h"
#ifdef SPACE_HAVE_S3
#include "store/remote-s3.h"
#endif

enum {
        EXIT_OK = 0,
        EXIT_FAIL = 1,      /* the operation failed (I/O, permissions, ...) */
        EXIT_USAGE = 2,     /* bad command line */
        EXIT_NOTFOUND = 3,  /* no such store, snapshot or directory */
        EXIT_CORRUPT = 4,   /* the store holds damaged or foreign data (verify found problems) */
};

static const char *store_dir;
static bool quiet;
/* the bucket of push, pull and remote-gc: options, else the environment */
static const char *s3_endpoint, *s3_bucket, *s3_access, *s3_secret, *s3_region;
static unsigned opt_threads;
static int opt_level;
static const char *cmd_name = "";

static const char *const main_usage =
        "usage: space-store [--store DIR] [--threads N] [--level N] [--quiet] COMMAND [ARGS]\n"
        "\n"
        "Content-addressed snapshot store: chunks, trees and snapshot records in DIR.\n"
        "The store is --store DIR, else $SPACE_STORE.\n"
        "\n"
        "commands:\n"
        "  init                     create an empty store\n"
        "  put DIR [--parent SNAP]  capture DIR as a new snapshot; prints its id\n"
        "  get SNAP DIR             materialize SNAP into DIR (empty or new)\n"
        "  diff A B                 paths that differ between snapshots A and B\n"
        "  log                      list snapshots, oldest first\n"
        "  show SNAP                one snapshot's record\n"
        "  fork SNAP                a new snapshot sharing SNAP's data (O(1))\n"
        "  rm SNAP...               stop listing snapshots; gc then frees their data\n"
        "  verify                   check every object and every listed snapshot\n"
        "  gc [--dry-run]           remove everything no listed snapshot reaches\n"
        "  stats                    objects, bytes stored and logical, dedup ratio\n"
        "  push SNAP                upload SNAP to the S3 bucket (what it lacks, then the record)\n"
        "  pull SNAP                fetch SNAP from the bucket (every object hash-checked)\n"
        "  remote-gc                delete what no live snapshot reaches from the bucket\n"
        "\n"
        "The bucket (push, pull, remote-gc): --s3-endpoint URL --s3-bucket NAME\n"
        "--s3-access-key KEY --s3-secret-key SECRET [--s3-region R], before or after the\n"
        "command, else $SPACE_S3_ENDPOINT, $SPACE_S3_BUCKET, $SPACE_S3_ACCESS_KEY,\n"
        "$SPACE_S3_SECRET_KEY, $SPACE_S3_REGION (default us-east-1).\n"
        "\n"
        "SNAP is a snapshot id or a unique prefix of at least 4 hex digits.\n"
        "'space-store COMMAND --help' describes each command.\n"
        "\n"
        "exit status: 0 success, 1 failure, 2 usage error, 3 not found,\n"
        "             4 damaged data (verify found problems, or get met a corrupt object)\n";

static _printf_(1, 0) void verr(const char *fmt, va_list ap) {
        fprintf(stderr, "space-store%s%s: ", *cmd_name ? " " : "", cmd_name);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
}

static _printf_(1, 2) void err(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        verr(fmt, ap);
        va_end(ap);
}

/* Maps a store error to a message and an exit status. */
static int fail(int r, const char *what) {
        const char *d = store_error_detail();
        err("%s: %s", what, *d ? d : strerror(-r));
        switch (r) {
        case -ENOENT:
                return EXIT_NOTFOUND;
        case -EBADMSG:
        case -ELOOP:
                return EXIT_CORRUPT;
        case -EINVAL:
        case -ENOTUNIQ:
                return EXIT_USAGE;
        default:
                return EXIT_FAIL;
        }
}

static int usage_error(const char *usage, const char *fmt, ...) _printf_(2, 3);
static int usage_error(const char *usage, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        verr(fmt, ap);
        va_end(ap);
        fputs(usage, stderr);
        return EXIT_USAGE;
}

/* ---- progress on a terminal ---- */

static bool progress_on;
static bool progress_drawn;

static void human(uint64_t b, char *out, size_t n) {
        if (b >= (1ull << 30))
                snprintf(out, n, "%.2f GiB", (double)b / (1 << 30));
        else if (b >= (1ull << 20))
                snprintf(out, n, "%.1f MiB", (double)b / (1 << 20));
        else if (b >= 1024)
                snprintf(out, n, "%.1f KiB", (double)b / 1024);
        else
                snprintf(out, n, "%" PRIu64 " B", b);
}

static void on_progress(void *ud, const struct store_progress *p) {
        if (!progress_on)
                return;
        char b[32];
        human(p->bytes, b, sizeof b);
        fprintf(stderr, "\r\033[K%s: %s: %" PRIu64 " %s, %s", cmd_name, p->phase, p->entries,
                !strcmp(p->phase, "verify") || !strcmp(p->phase, "mark") || !strcmp(p->phase, "sweep") ? "objects"
                                                                                                          : "entries",
                b);
        progress_drawn = true;
}

static void progress_end(void) {
        if (progress_drawn)
                fputs("\r\033[K", stderr);
        progress_drawn = false;
}

/* ---- helpers ---- */

static int open_store(bool create, struct store **ret) {
        if (!store_dir || !*store_dir) {
                err("no store given: use --store DIR or set SPACE_STORE");
                return EXIT_USAGE;
        }
        struct store_opts o = { STORE_OPTS_INIT, .create = create, .threads = opt_threads,
                                .compression_level = opt_level };
        int r = store_open(store_dir, &o, ret);
        if (r < 0)
                return fail(r, "cannot open the store");
        return 0;
}

static int resolve(struct store *s, const char *arg, struct store_hash *ret) {
        int r = store_snapshot_resolve(s, arg, ret);
        if (r < 0)
                return fail(r, "bad snapshot");
        return 0;
}

/* Opens the store and resolves arg to one of its snapshots; on failure nothing stays open. */
static int open_snapshot(const char *arg, struct store **ret, struct store_hash *ret_h) {
        struct store *s;
        int r = open_store(false, &s);
        if (r)
                return r;
        if ((r = resolve(s, arg, ret_h))) {
                store_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* For the commands without options: true (usage printed) when an argument asks for help. */
static bool show_help(int argc, char **argv, const char *usage) {
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--"))
                        break;
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        fputs(usage, stdout);
                        return true;
                }
        }
        return false;
}

/* The flag-only commands (log, verify, gc, stats): every argument is --help or one of
 * flags[], which sets its bool. -1: go on; otherwise the exit code to return. */
struct flag {
        const char *name;
        bool *on;
};

static int parse_flags(int argc, char **argv, const char *usage, const struct flag *flags, size_t n) {
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        fputs(usage, stdout);
                        return 0;
                }
                size_t k = 0;
                while (k < n && strcmp(argv[i], flags[k].name))
                        k++;
                if (k == n)
                        return usage_error(usage, "unexpected argument \"%s\"", argv[i]);
                *flags[k].on = true;
        }
        return -1;
}

/* parse_flags, then open the store. s stays NULL when the command is over already (help
 * printed, or an error): then return what this returned. */
static int open_with_flags(int argc, char **argv, const char *usage, const struct flag *flags, size_t n,
                           struct store **ret) {
        *ret = NULL;
        int rc = parse_flags(argc, argv, usage, flags, n);
        return rc >= 0 ? rc : open_store(false, ret);
}

static void hex_of(const struct store_hash *h, char out[STORE_HEX_LEN + 1]) { store_hash_to_hex(h, out); }

static void print_time(int64_t ns, char *out, size_t n) {
        time_t t = (time_t)(ns / 1000000000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void stats_json(struct json_writer *w, const struct store_op_stats *st) {
        const struct {
                const char *key;
                uint64_t v;
        } f[] = {
                { "entries", st->entries },           { "files", st->files },
                { "files_read", st->files_read },     { "bytes_read", st->bytes_read },
                { "bytes_logical", st->bytes_logical }, { "objects_written", st->objects_written },
                { "bytes_written", st->bytes_written }, { "objects_reused", st->objects_reused },
                { "trees_written", st->trees_written }, { "deltas_written", st->deltas_written },
        };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
                json_w_kuint(w, f[i].key, f[i].v);
}

/* rc, unless what went to stdout could not be written. */
static int flushed(int rc) { return fflush(stdout) == 0 ? rc : EXIT_FAIL; }

static int print_buf(struct buf *b) {
        buf_putc(b, '\n');
        fwrite(b->data, 1, b->len, stdout);
        return flushed(0);
}

static int print_hash(const struct store_hash *h) {
        char hex[STORE_HEX_LEN + 1];
        hex_of(h, hex);
        printf("%s\n", hex);
        return flushed(0);
}

/* ---- commands ---- */

static int cmd_init(int argc, char **argv) {
        static const char usage[] = "usage: space-store init\n  Creates an empty store at --store DIR (or $SPACE_STORE).\n";
        if (show_help(argc, argv, usage))
                return 0;
        if (argc != 1)
                return usage_error(usage, "init takes no arguments");
        struct store *s;
        int r = open_store(true, &s);
        if (r)
                return r;
        store_free(s);
        return 0;
}

static int cmd_put(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store put DIR [--parent SNAP] [--session ID] [--label TEXT]\n"
                "                       [--reason manual|rolling|pause|fork] [--no-stat-cache] [--json]\n"
                "                       [--fixed-chunk BYTES [--no-delta]]\n"
                "  Captures DIR (files, directories, symlinks, hard links, devices, whiteouts,\n"
                "  xattrs, owners, modes, mtimes) as a new snapshot and prints its id.\n"
                "  With --parent, files unchanged since SNAP (size, mtime, ctime, inode) are not\n"
                "  read again. --json prints the id with what the capture read and wrote.\n"
                "  --fixed-chunk cuts files every BYTES (a power of two, 4096..65536) instead of\n"
                "  by content, for images rewritten in place; then, with --parent, a changed\n"
                "  chunk is stored as its difference to the parent's chunk at the same offset\n"
                "  when that is at most half its size (--no-delta: never).\n"
                "  Creates the store if it does not exist.\n";
        static const struct option opts[] = {
                { "parent", required_argument, NULL, 'p' }, { "session", required_argument, NULL, 's' },
                { "label", required_argument, NULL, 'l' },  { "reason", required_argument, NULL, 'r' },
                { "no-stat-cache", no_argument, NULL, 'n' }, { "json", no_argument, NULL, 'j' },
                { "fixed-chunk", required_argument, NULL, 'c' }, { "no-delta", no_argument, NULL, 'D' },
                { "help", no_argument, NULL, 'h' },         { 0 },
        };
        const char *parent = NULL;
        char *end;
        unsigned long v;
        bool json = false;
        struct store_capture_opts co = { 0 };
        int c;
        while ((c = getopt_long(argc, argv, "p:s:l:r:njc:Dh", opts, NULL)) != -1) {
                switch (c) {
                case 'p': parent = optarg; break;
                case 's': co.session = optarg; break;
                case 'l': co.label = optarg; break;
                case 'r':
                        if (store_reason_from_name(optarg, &co.reason) < 0)
                                return usage_error(usage, "unknown reason \"%s\"", optarg);
                        break;
                case 'n': co.no_stat_cache = true; break;
                case 'j': json = true; break;
                case 'c':
                        v = strtoul(optarg, &end, 10);
                        if (*end || v < STORE_FIXED_CHUNK_MIN || v > STORE_FIXED_CHUNK_MAX || (v & (v - 1)))
                                return usage_error(usage, "--fixed-chunk: a power of two from %u to %u, not \"%s\"",
                                                   STORE_FIXED_CHUNK_MIN, STORE_FIXED_CHUNK_MAX, optarg);
                        co.fixed_chunk = (uint32_t)v;
                        break;
                case 'D': co.no_delta = true; break;
                case 'h': fputs(usage, stdout); return 0;
                default: return usage_error(usage, "bad option");
                }
        }
        if (argc - optind != 1)
                return usage_error(usage, "put needs exactly one directory");
        const char *dir = argv[optind];
        struct store *s;
        int r = open_store(true, &s);
        if (r)
                return r;
        struct store_hash ph, h;
        if (parent && (r = resolve(s, parent, &ph))) {
                store_free(s);
                return r;
        }
        struct store_op_stats st = { 0 };
        co.progress = on_progress;
        co.stats = &st;
        /* A concurrent gc may take away an object we reused: capture again. */
        for (int tries = 0;; tries++) {
                st = (struct store_op_stats){ 0 };
                r = store_capture(s, dir, parent ? &ph : NULL, &co, &h);
                if (r != -EAGAIN || tries >= 3)
                        break;
        }
        progress_end();
        store_free(s);
        if (r < 0)
                return fail(r, "capture failed");
        if (!json)
                return print_hash(&h);
        char hex[STORE_HEX_LEN + 1];
        hex_of(&h, hex);
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "snapshot", hex);
        stats_json(&w, &st);
        json_w_obj_end(&w);
        return print_buf(&b);
}

static int cmd_get(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store get SNAP DIR [--no-owner] [--json]\n"
                "  Materializes snapshot SNAP into DIR, which must be empty or not exist.\n"
                "  Every object is checked against its hash; a damaged one stops the restore\n"
                "  (exit 4). --no-owner keeps files owned by the caller.\n";
        static const struct option opts[] = {
                { "no-owner", no_argument, NULL, 'o' }, { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },     { 0 },
        };
        struct store_materialize_opts mo = { 0 };
        bool json = false;
        int c;
        while ((c = getopt_long(argc, argv, "ojh", opts, NULL)) != -1) {
                switch (c) {
                case 'o': mo.no_owner = true; break;
                case 'j': json = true; break;
                case 'h': fputs(usage, stdout); return 0;
                default: return usage_error(usage, "bad option");
                }
        }
        if (argc - optind != 2)
                return usage_error(usage, "get needs a snapshot and a directory");
        struct store *s;
        struct store_hash h;
        int r = open_snapshot(argv[optind], &s, &h);
        if (r)
                return r;
        struct store_op_stats st = { 0 };
        mo.progress = on_progress;
        mo.stats = &st;
        r = store_materialize(s, &h, argv[optind + 1], &mo);
        progress_end();
        store_free(s);
        if (r < 0)
                return fail(r, "restore failed");
        if (json) {
                _cleanup_buf_ struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                stats_json(&w, &st);
                json_w_obj_end(&w);
                return print_buf(&b);
        }
        return 0;
}

static int diff_line(void *ud, enum store_change c, const char *path) {
        (*(uint64_t *)ud)++;
        printf("%c %s\n", (char)c, path);
        return 0;
}

static int cmd_diff(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store diff A B\n"
                "  Lists the paths that differ from snapshot A to snapshot B, in path order:\n"
                "  'A path' added, 'D path' removed, 'M path' modified (content, type, mode,\n"
                "  owner, mtime or xattrs). Unchanged directories are skipped unread.\n";
        if (show_help(argc, argv, usage))
                return 0;
        if (argc != 3)
                return usage_error(usage, "diff needs two snapshots");
        struct store *s;
        struct store_hash a, b;
        int r = open_snapshot(argv[1], &s, &a);
        if (r)
                return r;
        if ((r = resolve(s, argv[2], &b))) {
                store_free(s);
                return r;
        }
        uint64_t n = 0;
        r = store_diff(s, &a, &b, diff_line, &n);
        store_free(s);
        if (r < 0)
                return fail(r, "diff failed");
        return flushed(0);
}

static void info_json(struct json_writer *w, const struct store_snapshot_info *i) {
        char hex[STORE_HEX_LEN + 1], t[40];
        json_w_obj_begin(w);
        hex_of(&i->hash, hex);
        json_w_kstr(w, "snapshot", hex);
        print_time(i->time_ns, t, sizeof t);
        json_w_kstr(w, "time", t);
        json_w_kint(w, "time_ns", i->time_ns);
        json_w_kstr(w, "reason", store_reason_name(i->reason));
        json_w_kstr(w, "session", i->session);
        json_w_kstr(w, "label", i->label);
        hex_of(&i->parent, hex);
        json_w_kstr(w, "parent", i->has_parent ? hex : NULL);
        hex_of(&i->root, hex);
        json_w_kstr(w, "root", hex);
        hex_of(&i->memory, hex);
        json_w_kstr(w, "memory", i->has_memory ? hex : NULL);
        json_w_kuint(w, "files", i->files);
        json_w_kuint(w, "bytes_logical", i->bytes_logical);
        json_w_obj_end(w);
}

static int cmd_log(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store log [--json]\n"
                "  Lists the snapshots of the store, oldest first: id, time (UTC), reason,\n"
                "  files, bytes, session and label. --json prints one object per line.\n";
        bool json = false;
        struct store *s;
        int r = open_with_flags(argc, argv, usage, (const struct flag[]){ { "--json", &json } }, 1, &s);
        if (!s)
                return r;
        struct store_hash *v = NULL;
        size_t n = 0;
        r = store_snapshot_list(s, &v, &n);
        if (r < 0) {
                store_free(s);
                return fail(r, "cannot list snapshots");
        }
        int rc = 0;
        for (size_t i = 0; i < n; i++) {
                struct store_snapshot_info info;
                char hex[STORE_HEX_LEN + 1];
                hex_of(&v[i], hex);
                r = store_snapshot_get(s, &v[i], &info);
                if (r < 0) {
                        err("snapshot %s: %s", hex, store_error_detail());
                        rc = EXIT_CORRUPT;
                        continue;
                }
                if (json) {
                        _cleanup_buf_ struct buf b = BUF_INIT(0);
                        struct json_writer w = JSON_WRITER_INIT(&b);
                        info_json(&w, &info);
                        print_buf(&b);
                } else {
                        char t[40], sz[32];
                        print_time(info.time_ns, t, sizeof t);
                        human(info.bytes_logical, sz, sizeof sz);
                        printf("%s %s %-7s %8" PRIu64 " files %10s  %s%s%s\n", hex, t, store_reason_name(info.reason),
                               info.files, sz, info.session, *info.label ? " " : "", info.label);
                }
        }
        free(v);
        store_free(s);
        return flushed(rc);
}

static int cmd_show(int argc, char **argv) {
        static const char usage[] = "usage: space-store show SNAP\n  Prints one snapshot record as JSON.\n";
        if (show_help(argc, argv, usage))
                return 0;
        if (argc != 2)
                return usage_error(usage, "show needs one snapshot");
        struct store *s;
        struct store_hash h;
        struct store_snapshot_info info;
        int r = open_snapshot(argv[1], &s, &h);
        if (r)
                return r;
        r = store_snapshot_get(s, &h, &info);
        store_free(s);
        if (r < 0)
                return fail(r, "cannot read the snapshot");
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        info_json(&w, &info);
        return print_buf(&b);
}

static int cmd_fork(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store fork SNAP [--session ID] [--label TEXT]\n"
                "  Makes a new snapshot record that shares SNAP's root tree (nothing is\n"
                "  copied) with SNAP as its parent, and prints its id.\n";
        static const struct option opts[] = {
                { "session", required_argument, NULL, 's' },
                { "label", required_argument, NULL, 'l' },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        const char *session = NULL, *label = NULL;
        int c;
        while ((c = getopt_long(argc, argv, "s:l:h", opts, NULL)) != -1) {
                switch (c) {
                case 's': session = optarg; break;
                case 'l': label = optarg; break;
                case 'h': fputs(usage, stdout); return 0;
                default: return usage_error(usage, "bad option");
                }
        }
        if (argc - optind != 1)
                return usage_error(usage, "fork needs one snapshot");
        struct store *s;
        struct store_hash h, n;
        int r = open_snapshot(argv[optind], &s, &h);
        if (r)
                return r;
        r = store_fork(s, &h, session, label, &n);
        store_free(s);
        if (r < 0)
                return fail(r, "fork failed");
        return print_hash(&n);
}

static int cmd_rm(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store rm SNAP...\n"
                "  Stops listing the snapshots. Their data stays until 'gc' finds that no\n"
                "  listed snapshot reaches it.\n";
        if (show_help(argc, argv, usage))
                return 0;
        if (argc < 2)
                return usage_error(usage, "rm needs at least one snapshot");
        struct store *s;
        int r = open_store(false, &s);
        if (r)
                return r;
        int rc = 0;
        for (int i = 1; i < argc; i++) {
                struct store_hash h;
                if ((r = resolve(s, argv[i], &h))) {
                        rc = r;
                        continue;
                }
                r = store_snapshot_forget(s, &h);
                if (r < 0)
                        rc = fail(r, "rm failed");
        }
        store_free(s);
        return rc;
}

static void on_problem(void *ud, const struct store_problem *p) {
        static const char *const kinds[] = { "missing", "corrupt", "foreign" };
        printf("%s: %s\n", kinds[p->kind], p->message);
}

static int cmd_verify(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store verify [--json]\n"
                "  Reads every object and checks it against its hash, reports files that are\n"
                "  not store objects, and checks that every listed snapshot's trees, chunks\n"
                "  and memory image are present. One line per problem on stdout; exit 4 if\n"
                "  any was found.\n";
        bool json = false;
        struct store *s;
        int r = open_with_flags(argc, argv, usage, (const struct flag[]){ { "--json", &json } }, 1, &s);
        if (!s)
                return r;
        struct store_verify_result res = { 0 };
        r = store_verify(s, on_problem, NULL, on_progress, NULL, &res);
        progress_end();
        store_free(s);
        if (r < 0)
                return fail(r, "verify could not run");
        if (json) {
                printf("{\"snapshots\":%" PRIu64 ",\"objects\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"problems\":%" PRIu64
                       ",\"unreachable\":%" PRIu64 "}\n",
                       res.snapshots, res.objects_checked, res.bytes_checked, res.problems, res.unreachable);
        } else if (!quiet) {
                char b[32];
                human(res.bytes_checked, b, sizeof b);
                fprintf(stderr, "%" PRIu64 " snapshots, %" PRIu64 " objects (%s) checked, %" PRIu64
                                " unreachable, %" PRIu64 " problems\n",
                        res.snapshots, res.objects_checked, b, res.unreachable, res.problems);
        }
        fflush(stdout);
        return res.problems ? EXIT_CORRUPT : 0;
}

static int cmd_gc(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store gc [--dry-run] [--json]\n"
                "  Every listed snapshot is live (remove one with 'rm'). Removes every object\n"
                "  no live snapshot reaches, and leftovers of interrupted captures. Safe while\n"
                "  captures run. --dry-run only counts.\n";
        struct store_gc_opts go = { 0 };
        bool json = false;
        struct store *s;
        int r = open_with_flags(argc, argv, usage,
                                (const struct flag[]){ { "--dry-run", &go.dry_run }, { "--json", &json } }, 2, &s);
        if (!s)
                return r;
        struct store_hash *live = NULL;
        size_t n = 0;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        go.keep_since_ns = now.tv_sec * 1000000000LL + now.tv_nsec; /* a put committing after the listing stays */
        r = store_snapshot_list(s, &live, &n);
        if (r < 0) {
                store_free(s);
                return fail(r, "cannot list snapshots");
        }
        struct store_gc_result res = { 0 };
        go.progress = on_progress;
        r = store_gc(s, live, n, &go, &res);
        progress_end();
        free(live);
        store_free(s);
        if (r < 0)
                return fail(r, "gc failed");
        if (json)
                printf("{\"live_snapshots\":%" PRIu64 ",\"objects_kept\":%" PRIu64 ",\"objects_removed\":%" PRIu64
                       ",\"bytes_removed\":%" PRIu64 ",\"snapshots_removed\":%" PRIu64 ",\"temp_removed\":%" PRIu64
                       ",\"dry_run\":%s}\n",
                       res.live_snapshots, res.objects_kept, res.objects_removed, res.bytes_removed,
                       res.snapshots_removed, res.temp_removed, go.dry_run ? "true" : "false");
        else if (!quiet) {
                char b[32];
                human(res.bytes_removed, b, sizeof b);
                printf("%s%" PRIu64 " objects (%s) removed, %" PRIu64 " kept, %" PRIu64 " live snapshots\n",
                       go.dry_run ? "would be: " : "", res.objects_removed, b, res.objects_kept, res.live_snapshots);
        }
        return flushed(0);
}

static int cmd_stats(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store stats [--json]\n"
                "  Objects (by kind), bytes stored on disk, bytes before compression, the\n"
                "  logical bytes of all listed snapshots and the dedup ratio (logical/stored).\n";
        bool json = false;
        struct store *s;
        int r = open_with_flags(argc, argv, usage, (const struct flag[]){ { "--json", &json } }, 1, &s);
        if (!s)
                return r;
        struct store_stats st;
        r = store_stats(s, &st);
        store_free(s);
        if (r < 0)
                return fail(r, "stats failed");
        if (json) {
                printf("{\"objects\":%" PRIu64 ",\"chunks\":%" PRIu64 ",\"trees\":%" PRIu64 ",\"snapshot_records\":%" PRIu64
                       ",\"memory_images\":%" PRIu64 ",\"bytes_stored\":%" PRIu64 ",\"bytes_plain\":%" PRIu64
                       ",\"snapshots\":%" PRIu64 ",\"bytes_logical\":%" PRIu64 ",\"dedup_ratio\":%.3f}\n",
                       st.objects, st.by_kind[0], st.by_kind[1], st.by_kind[2], st.by_kind[3], st.bytes_stored,
                       st.bytes_plain, st.snapshots, st.bytes_logical, st.dedup_ratio);
        } else {
                char a[32], b[32], c[32];
                human(st.bytes_stored, a, sizeof a);
                human(st.bytes_plain, b, sizeof b);
                human(st.bytes_logical, c, sizeof c);
                printf("objects        %" PRIu64 " (%" PRIu64 " chunks, %" PRIu64 " trees, %" PRIu64
                       " snapshot records, %" PRIu64 " memory images)\n",
                       st.objects, st.by_kind[0], st.by_kind[1], st.by_kind[2], st.by_kind[3]);
                printf("bytes stored   %s (%" PRIu64 ")\n", a, st.bytes_stored);
                printf("bytes plain    %s (%" PRIu64 ")\n", b, st.bytes_plain);
                printf("snapshots      %" PRIu64 "\n", st.snapshots);
                printf("bytes logical  %s (%" PRIu64 ")\n", c, st.bytes_logical);
                printf("dedup ratio    %.2f\n", st.dedup_ratio);
        }
        return flushed(0);
}


/* ---- the remote tier: push, pull, remote-gc ---- */

enum { OPT_S3_ENDPOINT = 1000, OPT_S3_BUCKET, OPT_S3_ACCESS, OPT_S3_SECRET, OPT_S3_REGION };
#define S3_OPTIONS                                                                                     \
        { "s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT },                                   \
        { "s3-bucket", required_argument, NULL, OPT_S3_BUCKET },                                       \
        { "s3-access-key", required_argument, NULL, OPT_S3_ACCESS },                                   \
        { "s3-secret-key", required_argument, NULL, OPT_S3_SECRET },                                   \
        { "s3-region", required_argument, NULL, OPT_S3_REGION }

static bool s3_option(int c, const char *arg) {
        switch (c) {
        case OPT_S3_ENDPOINT: s3_endpoint = arg; return true;
        case OPT_S3_BUCKET: s3_bucket = arg; return true;
        case OPT_S3_ACCESS: s3_access = arg; return true;
        case OPT_S3_SECRET: s3_secret = arg; return true;
        case OPT_S3_REGION: s3_region = arg; return true;
        default: return false;
        }
}

static int open_remote(struct store_remote **ret) {
#ifdef SPACE_HAVE_S3
        const struct { const char *v, *opt, *env; } need[] = {
                { s3_endpoint, "--s3-endpoint", "SPACE_S3_ENDPOINT" },
                { s3_bucket, "--s3-bucket", "SPACE_S3_BUCKET" },
                { s3_access, "--s3-access-key", "SPACE_S3_ACCESS_KEY" },
                { s3_secret, "--s3-secret-key", "SPACE_S3_SECRET_KEY" },
        };
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
                if (!need[i].v || !*need[i].v) {
                        err("no bucket given: %s or $%s is missing", need[i].opt, need[i].env);
                        return EXIT_USAGE;
                }
        struct s3_config c = { .endpoint = s3_endpoint, .bucket = s3_bucket, .access_key = s3_access,
                               .secret_key = s3_secret, .region = s3_region && *s3_region ? s3_region : "us-east-1",
                               .retries = -1 };
        int r = store_remote_s3_new(&c, ret);
        if (r < 0) {
                err("bad bucket configuration (endpoint http(s)://HOST[:PORT], bucket of 3..63 [a-z0-9.-], "
                    "region of [a-z0-9-]): %s", strerror(-r));
                return EXIT_USAGE;
        }
        return 0;
#else
        (void)ret;
        err("this space-store was built without libcurl: no S3 remote tier");
        return EXIT_FAIL;
#endif
}

/* Progress of push and pull on stderr unless --quiet: redrawn on a terminal, else a
 * line a second. */
static int64_t remote_progress_last;

static void on_remote_progress(void *ud, const struct store_progress *p) {
        if (quiet)
                return;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t now = ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (!progress_on && now - remote_progress_last < 1000)
                return;
        remote_progress_last = now;
        char a[32], b[32];
        human(p->bytes, a, sizeof a);
        human(p->bytes_total, b, sizeof b);
        fprintf(stderr, "%s%s: %" PRIu64 " of %" PRIu64 " objects, %s of %s%s", progress_on ? "\r\033[K" : "",
                cmd_name, p->entries, p->entries_total, a, b, progress_on ? "" : "\n");
        progress_drawn = progress_on;
}

static void remote_stats_json(const char *snap_hex, const struct store_remote_stats *st) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "snapshot", snap_hex);
        json_w_kuint(&w, "objects", st->objects);
        json_w_kuint(&w, "bytes", st->bytes);
        json_w_kuint(&w, "objects_sent", st->objects_sent);
        json_w_kuint(&w, "bytes_sent", st->bytes_sent);
        json_w_kuint(&w, "objects_known", st->objects_known);
        json_w_kuint(&w, "objects_found", st->objects_found);
        json_w_kuint(&w, "objects_fetched", st->objects_fetched);
        json_w_kuint(&w, "bytes_fetched", st->bytes_fetched);
        json_w_kuint(&w, "objects_local", st->objects_local);
        json_w_obj_end(&w);
        print_buf(&b);
}

static int parse_uint(const char *arg, unsigned lo, unsigned hi, unsigned *ret) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(arg, &end, 10);
        if (errno || *end || !*arg || v < lo || v > hi)
                return -EINVAL;
        *ret = (unsigned)v;
        return 0;
}

/* push and pull: the same options. */
static int cmd_push_pull(int argc, char **argv, bool push) {
        static const char push_usage[] =
                "usage: space-store push SNAP [--jobs N] [--grace SECONDS] [--json] [S3 OPTIONS]\n"
                "  Uploads what snapshot SNAP reaches (record, trees, chunks, memory image) and the\n"
                "  bucket lacks as objects/HEX, then its record as snapshots/HEX. Objects this\n"
                "  store put in the bucket before (remote/ID.known) are not sent again unless\n"
                "  their upload is older than half the grace (then they are renewed). --jobs:\n"
                "  uploads at once (default 4, at most 32); --grace: the bucket's GC grace\n"
                "  (default 86400). A push that fails leaves no record in the bucket; push\n"
                "  again to finish. Progress on stderr unless --quiet; --json: counts.\n"
                "  S3 OPTIONS: --s3-endpoint URL --s3-bucket NAME --s3-access-key KEY\n"
                "  --s3-secret-key SECRET [--s3-region R], else $SPACE_S3_ENDPOINT, ...\n";
        static const char pull_usage[] =
                "usage: space-store pull SNAP [--jobs N] [--json] [S3 OPTIONS]\n"
                "  Fetches snapshot SNAP (an id, or a unique prefix of one in the bucket) and every\n"
                "  object it reaches that this store lacks, checks each against its hash, and\n"
                "  commits them and lists the snapshot; 'get' restores it then. A corrupt\n"
                "  object fails the pull (exit 4) and nothing is kept. Creates the store.\n"
                "  S3 OPTIONS: --s3-endpoint URL --s3-bucket NAME --s3-access-key KEY\n"
                "  --s3-secret-key SECRET [--s3-region R], else $SPACE_S3_ENDPOINT, ...\n";
        const char *usage = push ? push_usage : pull_usage;
        static const struct option opts[] = {
                { "jobs", required_argument, NULL, 'j' }, { "grace", required_argument, NULL, 'g' },
                { "json", no_argument, NULL, 'J' },       { "help", no_argument, NULL, 'h' },
                S3_OPTIONS,                               { 0 },
        };
        struct store_remote_opts ro = { 0 };
        bool json = false;
        int c;
        while ((c = getopt_long(argc, argv, "j:g:h", opts, NULL)) != -1) {
                if (s3_option(c, optarg))
                        continue;
                switch (c) {
                case 'j':
                        if (parse_uint(optarg, 1, STORE_REMOTE_JOBS_MAX, &ro.jobs) < 0)
                                return usage_error(usage, "--jobs: 1..%u", STORE_REMOTE_JOBS_MAX);
                        break;
                case 'g':
                        if (!push || parse_uint(optarg, STORE_REMOTE_GRACE_MIN, 100u * 365 * 86400, &ro.grace_s) < 0)
                                return usage_error(usage, "--grace: seconds, at least %u", STORE_REMOTE_GRACE_MIN);
                        break;
                case 'J': json = true; break;
                case 'h': fputs(usage, stdout); return 0;
                default: return usage_error(usage, "bad option");
                }
        }
        if (argc - optind != 1)
                return usage_error(usage, "%s needs one snapshot", push ? "push" : "pull");
        const char *arg = argv[optind];
        size_t al = strlen(arg);
        if (!push && (al < 4 || al > STORE_HEX_LEN || strspn(arg, "0123456789abcdef") != al))
                return usage_error(usage, "\"%s\" is not a snapshot id (4 to 64 lowercase hex digits)", arg);
        /* the bucket first: a pull with a bad configuration creates no store */
        _cleanup_store_remote_ struct store_remote *rem = NULL;
        int r = open_remote(&rem);
        if (r)
                return r;
        struct store *s;
        struct store_hash h;
        r = push ? open_snapshot(arg, &s, &h) : open_store(true, &s);
        if (r)
                return r;
        if (!push) {
                /* a full id, or a prefix the bucket's records resolve */
                size_t pl = strlen(arg);
                struct store_hash *v = NULL;
                size_t n = 0;
                if (pl == STORE_HEX_LEN)
                        r = store_hash_from_hex(arg, &h);
                else if ((r = store_remote_snapshots(rem, arg, &v, &n)) >= 0 && n != 1) {
                        err("%s snapshot in the bucket starts with %s", n ? "more than one" : "no", arg);
                        r = n ? -ENOTUNIQ : -ENOENT;
                        free(v);
                        store_free(s);
                        return n ? EXIT_USAGE : EXIT_NOTFOUND;
                } else if (r >= 0)
                        h = v[0];
                free(v);
                if (r < 0) {
                        store_free(s);
                        return fail(r, "cannot list the bucket");
                }
        }
        struct store_remote_stats st = { 0 };
        ro.progress = on_remote_progress;
        char hex[STORE_HEX_LEN + 1];
        hex_of(&h, hex);
        if (push) {
                r = store_push(s, rem, &h, &ro, &st);
        } else {
                /* a local gc that took an object the pull found here fails its commit: again */
                for (int tries = 0;; tries++) {
                        st = (struct store_remote_stats){ 0 };
                        r = store_pull(s, rem, &h, &ro, &st);
                        if (r != -EAGAIN || tries >= 3)
                                break;
                }
        }
        progress_end();
        store_free(s);
        if (r < 0)
                return fail(r, push ? "push failed" : "pull failed");
        if (json)
                remote_stats_json(hex, &st);
        if (!quiet) {
                char a[32], b[32];
                if (push) {
                        human(st.bytes, a, sizeof a);
                        human(st.bytes_sent, b, sizeof b);
                        fprintf(stderr,
                                "pushed %.12s: %" PRIu64 " objects (%s), %" PRIu64 " sent (%s), %" PRIu64
                                " already in the bucket\n",
                                hex, st.objects, a, st.objects_sent, b, st.objects_known + st.objects_found);
                } else {
                        human(st.bytes_fetched, b, sizeof b);
                        fprintf(stderr, "pulled %.12s: %" PRIu64 " objects, %" PRIu64 " fetched (%s), %" PRIu64
                                        " already here\n",
                                hex, st.objects, st.objects_fetched, b, st.objects_local);
                }
        }
        return flushed(0);
}

static int cmd_push(int argc, char **argv) { return cmd_push_pull(argc, argv, true); }
static int cmd_pull(int argc, char **argv) { return cmd_push_pull(argc, argv, false); }

static int cmd_remote_gc(int argc, char **argv) {
        static const char usage[] =
                "usage: space-store remote-gc [--grace SECONDS] [--live SNAP]... [--dry-run] [--json]\n"
                "                             [S3 OPTIONS]\n"
                "  Live snapshots: every one this store lists, and each --live id (a full id:\n"
                "  snapshots of other hosts sharing the bucket). Deletes from the bucket every\n"
                "  objects/HEX no live snapshot reaches and every snapshots/HEX not live, when\n"
                "  older than the grace (default 86400 s: more than twice the longest push,\n"
                "  and the --grace every push to the bucket is given). A live snapshot in\n"
                "  neither this store nor the bucket stops it before it deletes anything.\n"
                "  --dry-run only counts. S3 OPTIONS as for push.\n";
        static const struct option opts[] = {
                { "grace", required_argument, NULL, 'g' }, { "live", required_argument, NULL, 'L' },
                { "dry-run", no_argument, NULL, 'n' },     { "json", no_argument, NULL, 'J' },
                { "help", no_argument, NULL, 'h' },        S3_OPTIONS,
                { 0 },
        };
        struct store_remote_gc_opts go = { STORE_REMOTE_GC_OPTS_INIT };
        bool json = false;
        _cleanup_free_ struct store_hash *extra = NULL;
        size_t n_extra = 0;
        int c;
        while ((c = getopt_long(argc, argv, "g:L:nh", opts, NULL)) != -1) {
                if (s3_option(c, optarg))
                        continue;
                switch (c) {
                case 'g':
                        if (parse_uint(optarg, STORE_REMOTE_GRACE_MIN, 100u * 365 * 86400, &go.grace_s) < 0)
                                return usage_error(usage, "--grace: seconds, at least %u", STORE_REMOTE_GRACE_MIN);
                        break;
                case 'L': {
                        struct store_hash *v = realloc(extra, (n_extra + 1) * sizeof *extra);
                        if (!v)
                                return EXIT_FAIL;
                        extra = v;
                        if (store_hash_from_hex(optarg, &extra[n_extra]) < 0)
                                return usage_error(usage, "--live: a full snapshot id (64 hex digits), not \"%s\"",
                                                   optarg);
                        n_extra++;
                        break;
                }
                case 'n': go.dry_run = true; break;
                case 'J': json = true; break;
                case 'h': fputs(usage, stdout); return 0;
                default: return usage_error(usage, "bad option");
                }
        }
        if (argc != optind)
                return usage_error(usage, "unexpected argument \"%s\"", argv[optind]);
        _cleanup_store_remote_ struct store_remote *rem = NULL;
        int r = open_remote(&rem);
        if (r)
                return r;
        struct store *s;
        if ((r = open_store(false, &s)))
                return r;
        go.live_since_ns = (int64_t)time(NULL) * 1000000000LL; /* before the live set is read */
        struct store_hash *live = NULL;
        size_t n = 0;
        r = store_snapshot_list(s, &live, &n);
        if (r < 0) {
                store_free(s);
                return fail(r, "cannot list snapshots");
        }
        struct store_hash *all = realloc(live, (n + n_extra + 1) * sizeof *live);
        if (!all) {
                free(live);
                store_free(s);
                return EXIT_FAIL;
        }
        memcpy(all + n, extra, n_extra * sizeof *extra);
        go.progress = on_progress;
        struct store_remote_gc_result res = { 0 };
        r = store_remote_gc(s, rem, all, n + n_extra, &go, &res);
        progress_end();
        free(all);
        store_free(s);
        if (r < 0)
                return fail(r, "remote gc failed");
        if (json)
                printf("{\"live_snapshots\":%" PRIu64 ",\"objects_marked\":%" PRIu64 ",\"objects_kept\":%" PRIu64
                       ",\"objects_young\":%" PRIu64 ",\"objects_deleted\":%" PRIu64 ",\"bytes_deleted\":%" PRIu64
                       ",\"snapshots_deleted\":%" PRIu64 ",\"snapshots_young\":%" PRIu64 ",\"foreign\":%" PRIu64
                       ",\"dry_run\":%s}\n",
                       res.live_snapshots, res.objects_marked, res.objects_kept, res.objects_young,
                       res.objects_deleted, res.bytes_deleted, res.snapshots_deleted, res.snapshots_young, res.foreign,
                       go.dry_run ? "true" : "false");
        else if (!quiet) {
                char b[32];
                human(res.bytes_deleted, b, sizeof b);
                printf("%s%" PRIu64 " objects (%s) and %" PRIu64 " snapshot records deleted, %" PRIu64 " kept, %" PRIu64
                       " younger than the grace, %" PRIu64 " live snapshots\n",
                       go.dry_run ? "would be: " : "", res.objects_deleted, b, res.snapshots_deleted, res.objects_kept,
                       res.objects_young + res.snapshots_young, res.live_snapshots);
        }
        return flushed(0);
}

static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
} commands[] = {
        { "init", cmd_init }, { "put", cmd_put },   { "get", cmd_get },       { "diff", cmd_diff },
        { "log", cmd_log },   { "show", cmd_show }, { "fork", cmd_fork },     { "rm", cmd_rm },
        { "verify", cmd_verify }, { "gc", cmd_gc }, { "stats", cmd_stats },
        { "push", cmd_push },     { "pull", cmd_pull }, { "remote-gc", cmd_remote_gc },
};

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "store", required_argument, NULL, 's' }, { "threads", required_argument, NULL, 't' },
                { "level", required_argument, NULL, 'l' }, { "quiet", no_argument, NULL, 'q' },
                { "help", no_argument, NULL, 'h' },        S3_OPTIONS,
                { 0 },
        };
        store_dir = getenv("SPACE_STORE");
        s3_endpoint = getenv("SPACE_S3_ENDPOINT");
        s3_bucket = getenv("SPACE_S3_BUCKET");
        s3_access = getenv("SPACE_S3_ACCESS_KEY");
        s3_secret = getenv("SPACE_S3_SECRET_KEY");
        s3_region = getenv("SPACE_S3_REGION");
        int c;
        while ((c = getopt_long(argc, argv, "+s:t:l:qh", opts, NULL)) != -1) {
                char *end;
                if (s3_option(c, optarg))
                        continue;
                switch (c) {
                case 's': store_dir = optarg; break;
                case 't':
                        errno = 0;
                        opt_threads = (unsigned)strtoul(optarg, &end, 10);
                        if (errno || *end || opt_threads < 1 || opt_threads > STORE_MAX_THREADS)
                                return usage_error(main_usage, "--threads must be 1..%u", STORE_MAX_THREADS);
                        break;
                case 'l':
                        errno = 0;
                        opt_level = (int)strtol(optarg, &end, 10);
                        if (errno || *end || opt_level < 1 || opt_level > 19)
                                return usage_error(main_usage, "--level must be 1..19");
                        break;
                case 'q': quiet = true; break;
                case 'h': fputs(main_usage, stdout); return 0;
                default: return usage_error(main_usage, "bad option");
                }
        }
        if (optind >= argc)
                return usage_error(main_usage, "no command given");
        const char *name = argv[optind];
        if (!strcmp(name, "help")) {
                fputs(main_usage, stdout);
                return 0;
        }
        progress_on = !quiet && isatty(STDERR_FILENO);
        /* Deep trees hold one directory fd per level. */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (!strcmp(name, commands[i].name)) {
                        cmd_name = name;
                        int sub_argc = argc - optind;
                        char **sub_argv = argv + optind;
                        optind = 0; /* GNU getopt: start over for the command's own options */
                        return commands[i].fn(sub_argc, sub_argv);
                }
        return usage_error(main_usage, "unknown command \"%s\"", name);
}
