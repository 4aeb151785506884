/* libspace: the C client of spaced's HTTP API (docs/api.md). Opaque handles, versioned
 * option structs, negative errno returns; the daemon's error code and message are kept on
 * the client and read with space_client_last_error(). The library never prints. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct space_client space_client;
typedef struct space_session space_session;

/* Limits the library enforces on what the daemon sends back. */
#define SPACE_MAX_RESPONSE (16u << 20)   /* a JSON answer (session list, ps, ...) */
#define SPACE_MAX_EVENT (8u << 20)       /* one NDJSON line of a stream */
#define SPACE_MAX_STDIN (512u << 10)     /* stdin_data sent with an exec (JSON body is 1 MiB);
                                          * stdin_stream has no limit */
#define SPACE_MAX_UPLOAD (256ull << 20)  /* one file upload, as the daemon allows */
#define SPACE_MAX_ARGV 4096              /* argv and env entries of one exec */
#define SPACE_MAX_TOKEN 256              /* a session token ([A-Za-z0-9_-]) */
#define SPACE_MAX_API_TOKEN 256          /* an API bearer token (printable ASCII, no blanks) */
#define SPACE_MAX_LABEL 256              /* a snapshot label, bytes */
#define SPACE_MAX_FORK 64                /* sessions one fork makes */
#define SPACE_MAX_EVENT_PAGE 1000        /* events one page may hold */
#define SPACE_MAX_EVENT_DATA (64u << 10) /* an appended event's data, JSON bytes */
#define SPACE_MAX_NETWORK_JSON (512u << 10) /* a network policy as JSON text (256 + 256 rules) */
#define SPACE_MAX_TIMEOUTS_JSON 4096u       /* a session's timeouts as JSON text */

/* ---- client ---------------------------------------------------------------------- */

#define SPACE_CLIENT_OPTS_VERSION 2 /* 2 added token; version 1 structs are still accepted */
struct space_client_opts {
        unsigned version; /* SPACE_CLIENT_OPTS_VERSION */
        /* "unix:/path/spaced.sock", "/path/spaced.sock", "tcp://host:port" or "host:port".
         * NULL: $SPACE_HOST, else unix:$SPACE_DATA/spaced.sock, SPACE_DATA defaulting to
         * /var/lib/space. */
        const char *host;
        /* Longest wait for an ordinary (non-streaming) answer, in ms; 0 = 300 s. Streams
         * (exec, attach, template build) wait as long as the command runs. */
        int timeout_ms;
        /* API bearer token ("spt_…", from `spaced token add`), sent as "Authorization:
         * Bearer" on every request. NULL: $SPACE_TOKEN, else none (fine on the daemon's
         * Unix socket; TCP needs one). space_client_new fails with -EKEYREJECTED for one
         * longer than SPACE_MAX_API_TOKEN or holding characters a header line can't carry. */
        const char *token;
};
#define SPACE_CLIENT_OPTS_INIT .version = SPACE_CLIENT_OPTS_VERSION

/* -EINVAL for an address that can't be parsed, -EKEYREJECTED for a malformed token
 * (option or $SPACE_TOKEN); no connection is made yet. */
int space_client_new(space_client **ret, const struct space_client_opts *opts);
space_client *space_client_free(space_client *c);
/* The address the client talks to, normalized ("unix:/..." or "tcp://host:port"). */
const char *space_client_host(const space_client *c);
/* Message of the last failure: the daemon's "message" for an API error, else a
 * description of the local failure. Empty string when there was none. */
const char *space_client_last_error(const space_client *c);
/* The daemon's error code ("not_found", "exec_failed", ...) or NULL for local failures. */
const char *space_client_last_error_code(const space_client *c);
/* HTTP status of the last answer (0 if none arrived). */
int space_client_last_status(const space_client *c);
/* The Server-Timing header of the last answer, "" if it had none. spaced sends one with a
 * create's answer: "session;dur=MS, sandbox;dur=MS;desc="pool"|"made", hello;dur=MS,
 * commit;dur=MS, total;dur=MS" (docs/api.md). */
const char *space_client_server_timing(const space_client *c);

/* API errors map to: 400 -EINVAL, 401 -EPERM, 403 -EACCES, 404 -ENOENT, 405 -EOPNOTSUPP, 409 -EEXIST,
 * 413/431 -E2BIG, 422 -ENOEXEC, 503 -EHOSTDOWN, 507 -ENOSPC, other -EPROTO. Connection failures keep their errno
 * (-ECONNREFUSED, -ENOENT for a missing socket ...); a malformed answer gives -EBADMSG,
 * an answer over a limit -E2BIG, a timeout -ETIMEDOUT. */

/* GET /v1/health: the raw JSON object (caller frees). */
int space_health(space_client *c, char **ret_json);

/* A raw JSON GET for callers that want the daemon's own document (the CLI's --json):
 * path like "/v1/sessions". The body is returned NUL-terminated (caller frees). */
int space_get_json(space_client *c, const char *path, char **ret_json);

/* ---- sessions -------------------------------------------------------------------- */

#define SPACE_SESSION_OPTS_VERSION 6
struct space_session_opts {
        unsigned version;     /* SPACE_SESSION_OPTS_VERSION (1 to 5 are still accepted: the
                               * fields up to 'network', 'retention', 'disk', 'runtime', 'network_json') */
        const char *template; /* NULL: the daemon's default ("base") */
        uint64_t memory;      /* bytes; 0 = daemon default */
        double cpus;          /* 0 = daemon default */
        int64_t pids;         /* 0 = daemon default */
        const char *const *env; /* "K=V" strings, NULL-terminated; may be NULL */
        bool network;         /* false: loopback only */
        /* version 2: durable sessions */
        const char *snapshot;          /* "snap_…": start from this snapshot, not a template */
        uint64_t snapshot_interval_ms; /* rolling snapshots; 0 = daemon default (30 s) */
        bool no_rolling_snapshots;     /* snapshot only on demand, pause and fork */
        unsigned retention;            /* rolling snapshots kept; 0 = daemon default (10) */
        /* version 3 */
        uint64_t disk;        /* writable layer limit in bytes; 0 = daemon default */
        /* version 4 */
        const char *runtime;           /* "ns", "gvisor", "microvm"; NULL: the daemon's default */
        /* version 5 */
        /* The network policy as JSON text (docs/api.md "Network"): true, false or
         * {"egress","allow","deny","bandwidth"}; sent as "network" instead of the bool
         * above. NULL: the bool (false: the daemon's default). -EINVAL if not JSON. */
        const char *network_json;
        /* version 6: lifecycle timeouts (docs/sessions.md "Timeouts"); the daemon checks them */
        int64_t timeout_s;      /* paused (or deleted) this many seconds from now; 0: never */
        bool timeout_delete;    /* ... deleted instead of paused */
        int64_t idle_timeout_s; /* paused (or deleted) after this many seconds without a request to
                                 * its sandbox (exec, files, processes, ports); 0: never */
        bool idle_delete;
        bool auto_resume;       /* such a request to it while paused resumes it first */
};
#define SPACE_SESSION_OPTS_INIT .version = SPACE_SESSION_OPTS_VERSION

/* What the daemon says about a session (GET /v1/sessions/{id}). Strings are owned by the
 * struct that holds them. */
struct space_session_info {
        char id[64];
        char sandbox_id[64];   /* empty while paused */
        char state[32];        /* "creating", "running", "paused", "recovering", "terminated" */
        char template_name[128];
        char runtime[32];
        char created_at[48];
        uint64_t memory_limit; /* bytes, 0 if unknown */
        double cpus;
        int64_t pids_limit;
        bool network;
        int init_pid;
        bool alive;
        bool oom_killed;
        uint64_t memory_bytes;
        int64_t pids;
        char error[256];       /* why it died, when state is "dead" */
        /* durable sessions */
        char head_snapshot[64];   /* what a resume or recovery starts from; empty if none */
        char parent_session[64];  /* forks: the session and snapshot they came from */
        char source_snapshot[64];
        char last_snapshot_at[48];
        uint64_t snapshot_interval_ms; /* 0: no rolling snapshots */
        unsigned retention;
        unsigned recoveries;      /* how often a lost sandbox was replaced */
        uint64_t disk_limit;      /* bytes the writable layer may hold; 0 = no limit */
};

/* POST /v1/sessions. */
int space_session_new(space_session **ret, space_client *c, const struct space_session_opts *opts);
/* A handle on an existing session: GET /v1/sessions/{id}; -ENOENT if unknown. */
int space_session_open(space_session **ret, space_client *c, const char *id);
/* Reconnect: POST /v1/sessions/{id}/connect with the session's token. -EPERM (401) for a
 * wrong token, -ENOENT for an unknown id. The handle sends the token with every request
 * it makes; the answer (space_session_json) lists the running background processes
 * under "processes", whose output space_attach picks up from any offset. */
int space_session_connect(space_session **ret, space_client *c, const char *id, const char *token);
/* Frees the handle only; the session lives on in the daemon. Accepts NULL. */
space_session *space_session_free(space_session *s);
/* Frees n handles and the array that holds them (as space_session_fork returns). */
void space_session_array_free(space_session **v, size_t n);
const char *space_session_id(const space_session *s);
/* The session's token: what the daemon returned when this handle created or forked
 * it, or what was given to space_session_connect / space_session_set_token; NULL if
 * the handle has none. Keep it: the daemon shows it only once. */
const char *space_session_token(const space_session *s);
/* Makes the handle send X-Space-Session-Token: token on its requests (NULL: stop).
 * -EINVAL unless it is 1..SPACE_MAX_TOKEN url-safe characters. */
int space_session_set_token(space_session *s, const char *token);
/* The session object as last fetched, raw JSON (owned by the handle). */
const char *space_session_json(const space_session *s);
/* A raw JSON GET of "/v1/sessions/{id}<suffix>" (suffix like "/snapshots"), sent with
 * the handle's token; the body NUL-terminated (caller frees). */
int space_session_get_json(space_session *s, const char *suffix, char **ret_json);
/* Fetches the session again and fills *ret. */
int space_session_inspect(space_session *s, struct space_session_info *ret);
/* GET .../network: the session's network policy, its complete JSON object (caller frees). */
int space_session_network_get(space_session *s, char **ret_json);
/* PUT .../network: replaces the whole policy with policy_json (an object with "egress";
 * at most SPACE_MAX_NETWORK_JSON bytes; -EINVAL if not a JSON object). The daemon checks
 * it: -EINVAL (400) with what was wrong, -EACCES (403) when egress is off on the host.
 * *ret_json (may be NULL): the policy now in force (caller frees). */
int space_session_network_set(space_session *s, const char *policy_json, char **ret_json);
/* PUT .../timeouts: sets, extends or clears the session's timeouts. timeouts_json is an
 * object of "timeout" (seconds from now or an RFC 3339 time; null: none), "timeout_action",
 * "idle_timeout" (seconds; null: none), "idle_action" ("pause" or "delete"), "auto_resume";
 * members left out keep their value (docs/api.md "Timeouts"). -EINVAL (400) with what was
 * wrong. *ret_json (may be NULL): the timeouts now (caller frees). The session object has
 * them too, as "timeouts". */
int space_session_timeouts_set(space_session *s, const char *timeouts_json, char **ret_json);
/* DELETE /v1/sessions/{id}; the handle must still be freed. */
int space_session_delete(space_session *s);
/* Delete by id without a handle. */
int space_session_delete_id(space_client *c, const char *id);

/* GET /v1/sessions; *ret is an array of *ret_n entries (free with free()). */
int space_session_list(space_client *c, struct space_session_info **ret, size_t *ret_n);

/* ---- durable sessions: snapshots, pause/resume, restore, fork, events ------------ */

struct space_snapshot_info {
        char id[64];           /* "snap_…" */
        char session[64];
        char parent[64];       /* empty for the first */
        char created_at[48];
        char reason[16];       /* "rolling", "pause", "manual", "fork", "restore" */
        char label[SPACE_MAX_LABEL + 1];
        uint64_t bytes_added;  /* stored bytes this snapshot added */
        uint64_t logical_size; /* bytes of the files it holds */
        char root[72];         /* hex hash of its root tree in the snapshot store */
        char store_snapshot[72]; /* hex id of its record in the store (space-store get) */
        double freeze_ms;      /* how long the sandbox was frozen; < 0 if not reported
                                * (only the answer of space_snapshot_create has it) */
        bool memory;           /* it holds the processes too (a memory image) */
};

/* POST .../snapshots; label may be NULL (at most SPACE_MAX_LABEL bytes). *ret may be NULL. */
int space_snapshot_create(space_session *s, const char *label, struct space_snapshot_info *ret);
/* The same; memory: checkpoint the processes too (runtimes with memory snapshots; the
 * sandbox is restarted from the image: requests get 503 for that moment). */
int space_snapshot_create_memory(space_session *s, const char *label, bool memory, struct space_snapshot_info *ret);
/* GET .../snapshots: the timeline, oldest first. Free *ret with free(). */
int space_snapshot_list(space_session *s, struct space_snapshot_info **ret, size_t *ret_n);

/* The lifecycle calls below refresh the handle's session object (space_session_json)
 * from the answer. */
/* POST .../pause: a final snapshot, then the sandbox is destroyed. -EEXIST (409) if it
 * is paused already. */
int space_session_pause(space_session *s);
/* POST .../resume: a new sandbox from head_snapshot. -EEXIST (409) unless paused. */
int space_session_resume(space_session *s);
/* POST .../restore: the files go back to snapshot snap (of this session: -ENOENT for
 * another session's). Processes restart. */
int space_session_restore(space_session *s, const char *snap);

#define SPACE_FORK_OPTS_VERSION 1
struct space_fork_opts {
        unsigned version;     /* SPACE_FORK_OPTS_VERSION */
        const char *snapshot; /* NULL: a new snapshot of now */
        unsigned count;       /* 1..SPACE_MAX_FORK; 0 = 1 */
};
#define SPACE_FORK_OPTS_INIT .version = SPACE_FORK_OPTS_VERSION
/* POST .../fork: *ret is an array of *ret_n new handles, each holding its token; free
 * them with space_session_array_free(). */
int space_session_fork(space_session *s, const struct space_fork_opts *opts, space_session ***ret, size_t *ret_n);

struct space_event {
        uint64_t seq;
        char time[48];
        char kind[32];   /* "lifecycle", "exec", "snapshot", "recovery", "agent", ... */
        char *data;      /* the event's "data" as compact JSON text (owned) */
};
struct space_event_page {
        struct space_event *events;
        size_t n;
        uint64_t next;   /* give as 'after' for the next page */
        bool more;       /* more events after this page */
};
/* GET .../events?after=&limit= (limit 0: the daemon's default, 100; at most
 * SPACE_MAX_EVENT_PAGE). Free with space_event_page_free(). */
int space_event_list(space_session *s, uint64_t after, unsigned limit, struct space_event_page *ret);
void space_event_page_free(struct space_event_page *p);
/* POST .../events: kind "agent", "tool_call" or "note"; data_json a JSON object (at most
 * SPACE_MAX_EVENT_DATA bytes; -EINVAL if it does not parse). *ret_seq may be NULL. */
int space_event_append(space_session *s, const char *kind, const char *data_json, uint64_t *ret_seq);

/* ---- usage metrics (docs/api.md "Metrics") ---------------------------------------- */

#define SPACE_MAX_METRICS_SAMPLES 720   /* what spaced keeps per session, and a page holds */
struct space_metrics_sample {
        int64_t t_ms;                /* Unix ms */
        char t[48];                  /* the same, RFC 3339 */
        uint64_t cpu_ms;             /* CPU time of its current sandbox (0 again after a resume) */
        double cpu_pct;              /* of one CPU since the sample before */
        uint64_t memory_bytes;
        uint64_t memory_limit_bytes; /* 0: none */
        uint64_t disk_bytes;
        uint64_t net_rx_bytes;
        uint64_t net_tx_bytes;
};
struct space_metrics {
        int64_t interval_ms;         /* spaced's sampling interval */
        struct space_metrics_sample *samples; /* oldest first */
        size_t n;
};
/* GET .../metrics: the samples from start_ms to end_ms (Unix ms; 0: no bound), at most the
 * newest limit of them (0: all, at most SPACE_MAX_METRICS_SAMPLES). Free with
 * space_metrics_free(). */
int space_session_metrics(space_session *s, int64_t start_ms, int64_t end_ms, unsigned limit,
                          struct space_metrics *ret);
void space_metrics_free(struct space_metrics *m);

struct space_gc_result {
        uint64_t objects_removed;
        uint64_t bytes_freed;
};
/* POST /v1/gc. *ret may be NULL. */
int space_gc(space_client *c, struct space_gc_result *ret);

/* PUT /v1/pool/TEMPLATE: keep size sandboxes of template made ahead (0 = none). The
 * pool's JSON after the change goes to *ret_json (caller frees) unless ret_json is NULL.
 * GET /v1/pool is space_get_json(c, "/v1/pool", ...). */
int space_pool_set(space_client *c, const char *template_name, unsigned size, char **ret_json);

/* ---- exec and processes ---------------------------------------------------------- */

enum space_stream { SPACE_STDOUT = 1, SPACE_STDERR = 2 };

/* Called for each output event as it arrives; return a negative errno to stop reading
 * (the call then returns that value). */
typedef int (*space_output_fn)(void *userdata, enum space_stream stream, const void *data, size_t len);
/* Called once with the pid as soon as the daemon reports the start. */
typedef void (*space_start_fn)(void *userdata, int pid);

#define SPACE_EXEC_OPTS_VERSION 3 /* 2 added stdin_stream, stdin_fd; 3 user; older structs are still accepted */
struct space_exec_opts {
        unsigned version;       /* SPACE_EXEC_OPTS_VERSION */
        const char *const *argv; /* NULL-terminated, at least one entry */
        const char *const *env; /* "K=V", NULL-terminated; may be NULL */
        const char *cwd;        /* NULL: the daemon's default */
        uint64_t timeout_ms;    /* 0: none */
        const void *stdin_data; /* sent whole, at most SPACE_MAX_STDIN bytes; NULL: none */
        size_t stdin_len;
        bool background;        /* return at once with the pid; re-attach with space_attach */
        space_output_fn on_output;
        space_start_fn on_start;
        void *userdata;
        /* Version 2: stream stdin_fd to the command's stdin until its end-of-file, any
         * length, while the output arrives (a thread of the library reads the fd; the
         * daemon holds it back while the command does not read). Not with stdin_data or
         * background. Reading the fd stops once the command has exited. */
        bool stdin_stream;
        int stdin_fd;
        /* Version 3: run as this user of the sandbox's /etc/passwd: a name or a uid in
         * decimal ("user", "1000"); NULL: root. An unknown user fails with -EINVAL. */
        const char *user;
};
#define SPACE_EXEC_OPTS_INIT .version = SPACE_EXEC_OPTS_VERSION

struct space_exec_result {
        int pid;
        bool exited;    /* an exit event arrived (false for background or an unfinished attach) */
        int exit_code;  /* valid when exited and signal == 0 */
        int signal;     /* the signal that killed it, 0 if none */
        bool timed_out;
        bool running;   /* attach only: the daemon said it is still running */
        uint64_t offset; /* attach only: output offset the daemon started from */
        uint64_t next_offset; /* attach only: where a later attach goes on from */
};

/* Runs a command. Foreground: streams output to on_output and fills *ret from the exit
 * event. A command that can't be started gives -ENOEXEC with the daemon's message.
 * Background: *ret gets the pid only. */
int space_exec(space_session *s, const struct space_exec_opts *opts, struct space_exec_result *ret);

#define SPACE_ATTACH_OPTS_VERSION 1
struct space_attach_opts {
        unsigned version;   /* SPACE_ATTACH_OPTS_VERSION */
        uint64_t offset;    /* skip this many bytes of the recorded output */
        bool follow;        /* keep streaming until the process ends */
        space_output_fn on_output;
        void *userdata;
};
#define SPACE_ATTACH_OPTS_INIT .version = SPACE_ATTACH_OPTS_VERSION

/* GET .../processes/{pid}/output: replays the recorded output, then (follow) the live
 * output; *ret says whether it ended and how, and where to go on from. */
int space_attach(space_session *s, int pid, const struct space_attach_opts *opts, struct space_exec_result *ret);

/* POST .../processes/{pid}/signal. */
int space_signal(space_session *s, int pid, int sig);

struct space_process {
        int pid;
        char **argv;        /* NULL-terminated */
        bool running;
        bool has_exit_code; /* exit_code is valid */
        int exit_code;
        int signal;
        bool timed_out;
        int64_t started_ms;
        uint64_t output_bytes;
};
/* GET .../processes. Free the array with space_process_list_free(). */
int space_process_list(space_session *s, struct space_process **ret, size_t *ret_n);
void space_process_list_free(struct space_process *p, size_t n);

/* ---- files ----------------------------------------------------------------------- */

/* PUT .../files from memory; mode 0 = 0644. parents: create missing directories. */
int space_file_write(space_session *s, const char *path, const void *data, size_t len, unsigned mode, bool parents);
/* PUT .../files from an fd (regular file: streamed with its size; anything else is read
 * into memory first), at most SPACE_MAX_UPLOAD bytes. *ret_written may be NULL. */
int space_file_upload_fd(space_session *s, const char *path, int fd, unsigned mode, bool parents, uint64_t *ret_written);
/* GET .../files into memory, at most max bytes (-E2BIG beyond). *ret is NUL-terminated. */
int space_file_read(space_session *s, const char *path, size_t max, char **ret, size_t *ret_len);
/* GET .../files written to an fd as it arrives. */
int space_file_download_fd(space_session *s, const char *path, int fd, uint64_t *ret_bytes);
/* DELETE .../files. */
int space_file_remove(space_session *s, const char *path, bool recursive);
/* POST .../files/mkdir. */
int space_file_mkdir(space_session *s, const char *path, bool parents);
/* The same as a user of the sandbox (a name or a decimal uid; NULL: root, as above): what
 * they create belongs to it (?user=, docs/api.md). An unknown user is -EINVAL. */
int space_file_write_as(space_session *s, const char *path, const void *data, size_t len, unsigned mode, bool parents,
                        const char *user);
int space_file_upload_fd_as(space_session *s, const char *path, int fd, unsigned mode, bool parents, const char *user,
                            uint64_t *ret_written);
int space_file_mkdir_as(space_session *s, const char *path, bool parents, const char *user);

struct space_stat {
        char type[16]; /* "file", "dir", "symlink", ... as the daemon says */
        uint64_t size;
        unsigned mode;
        unsigned uid, gid;
        int64_t mtime;
};
int space_file_stat(space_session *s, const char *path, struct space_stat *ret);

struct space_dirent {
        char name[256];
        struct space_stat st; /* uid/gid are 0: the listing doesn't carry them */
};
#define SPACE_MAX_LIST 100000 /* entries space_file_list returns (-E2BIG beyond) */
/* GET .../files/list, every page of it; free the array with free(). */
int space_file_list(space_session *s, const char *path, struct space_dirent **ret, size_t *ret_n);

/* One event of a file watch (docs/api.md "Watching files"). type is "create", "write",
 * "chmod", "remove", "rename_from", "rename_to", or "overflow" (events were lost: the
 * reader was slower than the changes; path is then "" and reason may say more). */
struct space_watch_event {
        const char *type;
        const char *path;   /* absolute, inside the sandbox */
        bool dir;           /* the path is a directory */
        const char *reason; /* overflow's, or NULL */
};
/* Called per event; the strings live until it returns. A value > 0 stops the watch (the
 * call returns 0), < 0 stops it with that error. */
typedef int (*space_watch_fn)(void *userdata, const struct space_watch_event *ev);
/* GET .../files/watch: streams the changes below directory path (only path itself unless
 * recursive) until fn stops it (0), the directory goes away (0; *ret_reason, when given,
 * gets why, e.g. "removed"), or the session stops (an error). Each session has at most
 * 16 watches at once (spaced answers 409, -EEXIST, beyond). */
int space_file_watch(space_session *s, const char *path, bool recursive, space_watch_fn fn, void *userdata,
                     char *ret_reason, size_t reason_len);

/* ---- templates ------------------------------------------------------------------- */

struct space_template_info {
        char name[128];
        uint64_t size_bytes;
        char created_at[48];
};
int space_template_list(space_client *c, struct space_template_info **ret, size_t *ret_n);

typedef void (*space_progress_fn)(void *userdata, const char *message);

#define SPACE_TEMPLATE_BUILD_OPTS_VERSION 2 /* 1 (no runtime) is still accepted */
struct space_template_build_opts {
        unsigned version;      /* SPACE_TEMPLATE_BUILD_OPTS_VERSION */
        const char *name;
        /* at most one of (none: the daemon's default for the name; "base" has one): */
        const char *from_dir;  /* a directory on the daemon's host */
        const char *from_tar;  /* a tar file on the daemon's host */
        const char *debootstrap_suite;
        const char *const *packages; /* with debootstrap: NULL-terminated; may be NULL */
        const char *mirror;    /* with debootstrap: Debian mirror URL; NULL: the daemon's */
        space_progress_fn on_progress;
        void *userdata;
        /* version 2: the template's default runtime ("ns", "gvisor", "microvm"): sessions
         * made from it run on it unless their create names one. NULL: spaced's default. */
        const char *runtime;
};
#define SPACE_TEMPLATE_BUILD_OPTS_INIT .version = SPACE_TEMPLATE_BUILD_OPTS_VERSION

/* POST /v1/templates; streams progress, fills *ret (may be NULL) from the "done" event. */
int space_template_build(space_client *c, const struct space_template_build_opts *opts, struct space_template_info *ret);
int space_template_delete(space_client *c, const char *name);

/* ---- exposed ports (docs/api.md, "Ports") ------------------------------------------ */

#define SPACE_MAX_PORTS 32 /* exposed ports of one session, as the daemon allows */

struct space_port_info {
        unsigned port;
        bool public;     /* false: a request needs the port's token (or the owner's API token) */
        char url[512];   /* "http://PORT-ses_ID.DOMAIN/" when spaced has --ports-domain, else "" */
        char path[128];  /* "/v1/sessions/ID/ports/PORT/" on spaced's own address */
        char token[64];  /* the port's token, from space_port_expose only ("" if public) */
};

/* POST /v1/sessions/{id}/ports: exposes port (1..65535), public or behind a token of its
 * own, shown only in *ret (may be NULL). Exposing a port again replaces its token. */
int space_port_expose(space_session *s, unsigned port, bool public, struct space_port_info *ret);
/* GET .../ports (no tokens). Free the array with free(). */
int space_port_list(space_session *s, struct space_port_info **ret, size_t *ret_n);
/* DELETE .../ports/{port}: -ENOENT if it is not exposed. */
int space_port_unexpose(space_session *s, unsigned port);
/* Raw TCP to port (exposed or not) of the session, through spaced (GET
 * .../ports/{port}/forward upgraded to "space-tcp"): a new connection each call, *ret_fd a
 * non-blocking, close-on-exec socket carrying the port's bytes both ways; the caller
 * closes it. Errors as for any call; 502 (nothing listens on the port) is -EPROTO with
 * the daemon's message. */
int space_port_forward(space_session *s, unsigned port, int *ret_fd);

/* ---- terminals (docs/api.md, "Terminals") ----------------------------------------- */

#define SPACE_TERMINAL_MAX_DIM 1000 /* rows and cols: 1..this */
#define SPACE_TERMINAL_OPTS_VERSION 1
struct space_terminal_opts {
        unsigned version;         /* SPACE_TERMINAL_OPTS_VERSION */
        const char *const *argv;  /* NULL-terminated, at least one entry */
        const char *const *env;   /* "K=V", NULL-terminated; may be NULL */
        const char *cwd;          /* NULL: the daemon's default */
        unsigned rows, cols;      /* 0: 24 x 80 */
        const char *user;         /* a user of the sandbox's /etc/passwd (name or uid); NULL: root */
};
#define SPACE_TERMINAL_OPTS_INIT .version = SPACE_TERMINAL_OPTS_VERSION

/* POST /v1/sessions/{id}/terminals: a process on a pseudo-terminal of the sandbox, running
 * in the background until it exits; *ret_pid for space_terminal_connect. At most 16 run
 * per session (-EAGAIN past it). */
int space_terminal_start(space_session *s, const struct space_terminal_opts *opts, int *ret_pid);

/* A WebSocket to a terminal (GET .../terminals/{pid}): its recent output is replayed,
 * then its output follows; what is sent is typed into it. The terminal outlives it. */
typedef struct space_terminal space_terminal;
int space_terminal_connect(space_session *s, int pid, space_terminal **ret);
/* The socket, to poll for input (POLLIN: call space_terminal_read). */
int space_terminal_fd(const space_terminal *t);
/* Types data (blocks until it is sent). */
int space_terminal_write(space_terminal *t, const void *data, size_t n);
/* Resizes the terminal (rows, cols: 1..SPACE_TERMINAL_MAX_DIM); its foreground process
 * gets SIGWINCH. */
int space_terminal_resize(space_terminal *t, unsigned rows, unsigned cols);
struct space_terminal_exit {
        bool exited;   /* the terminal's process ended (else the connection was closed) */
        int exit_code; /* when exited and signal == 0 */
        int signal;
};
/* Reads what the socket has (never blocks): output goes to on_output (its stream is
 * SPACE_STDOUT). 0 while the terminal runs; 1 once the connection ended, with *ret. */
int space_terminal_read(space_terminal *t, space_output_fn on_output, void *userdata, struct space_terminal_exit *ret);
/* Closes the WebSocket (the terminal goes on). Accepts NULL. */
void space_terminal_close(space_terminal *t);

/* strerror-like text for the library's return values. */
const char *space_strerror(int err);
