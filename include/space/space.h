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
#define SPACE_MAX_STDIN (512u << 10)     /* stdin sent with an exec (JSON body is 1 MiB) */
#define SPACE_MAX_UPLOAD (256ull << 20)  /* one file upload, as the daemon allows */
#define SPACE_MAX_ARGV 4096              /* argv and env entries of one exec */

/* ---- client ---------------------------------------------------------------------- */

#define SPACE_CLIENT_OPTS_VERSION 1
struct space_client_opts {
        unsigned version; /* SPACE_CLIENT_OPTS_VERSION */
        /* "unix:/path/spaced.sock", "/path/spaced.sock", "tcp://host:port" or "host:port".
         * NULL: $SPACE_HOST, else unix:$SPACE_DATA/spaced.sock, SPACE_DATA defaulting to
         * /var/lib/space. */
        const char *host;
        /* Longest wait for an ordinary (non-streaming) answer, in ms; 0 = 300 s. Streams
         * (exec, attach, template build) wait as long as the command runs. */
        int timeout_ms;
};
#define SPACE_CLIENT_OPTS_INIT .version = SPACE_CLIENT_OPTS_VERSION

/* -EINVAL for an address that can't be parsed; no connection is made yet. */
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

/* API errors map to: 400 -EINVAL, 403 -EACCES, 404 -ENOENT, 405 -EOPNOTSUPP, 409 -EEXIST,
 * 413/431 -E2BIG, 422 -ENOEXEC, 503 -EHOSTDOWN, 507 -ENOSPC, other -EPROTO. Connection failures keep their errno
 * (-ECONNREFUSED, -ENOENT for a missing socket ...); a malformed answer gives -EBADMSG,
 * an answer over a limit -E2BIG, a timeout -ETIMEDOUT. */

/* GET /v1/health: the raw JSON object (caller frees). */
int space_health(space_client *c, char **ret_json);

/* A raw JSON GET for callers that want the daemon's own document (the CLI's --json):
 * path like "/v1/sessions". The body is returned NUL-terminated (caller frees). */
int space_get_json(space_client *c, const char *path, char **ret_json);

/* ---- sessions -------------------------------------------------------------------- */

#define SPACE_SESSION_OPTS_VERSION 1
struct space_session_opts {
        unsigned version;     /* SPACE_SESSION_OPTS_VERSION */
        const char *template; /* NULL: the daemon's default ("base") */
        uint64_t memory;      /* bytes; 0 = daemon default */
        double cpus;          /* 0 = daemon default */
        int64_t pids;         /* 0 = daemon default */
        const char *const *env; /* "K=V" strings, NULL-terminated; may be NULL */
        bool network;         /* false: loopback only */
};
#define SPACE_SESSION_OPTS_INIT .version = SPACE_SESSION_OPTS_VERSION

/* What the daemon says about a session (GET /v1/sessions/{id}). Strings are owned by the
 * struct that holds them. */
struct space_session_info {
        char id[64];
        char sandbox_id[64];
        char state[32];        /* "running", "dead", ... */
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
};

/* POST /v1/sessions. */
int space_session_new(space_session **ret, space_client *c, const struct space_session_opts *opts);
/* A handle on an existing session: GET /v1/sessions/{id}; -ENOENT if unknown. */
int space_session_open(space_session **ret, space_client *c, const char *id);
/* Frees the handle only; the session lives on in the daemon. Accepts NULL. */
space_session *space_session_free(space_session *s);
const char *space_session_id(const space_session *s);
/* The session object as last fetched, raw JSON (owned by the handle). */
const char *space_session_json(const space_session *s);
/* Fetches the session again and fills *ret. */
int space_session_inspect(space_session *s, struct space_session_info *ret);
/* DELETE /v1/sessions/{id}; the handle must still be freed. */
int space_session_delete(space_session *s);
/* Delete by id without a handle. */
int space_session_delete_id(space_client *c, const char *id);

/* GET /v1/sessions; *ret is an array of *ret_n entries (free with free()). */
int space_session_list(space_client *c, struct space_session_info **ret, size_t *ret_n);

/* ---- exec and processes ---------------------------------------------------------- */

enum space_stream { SPACE_STDOUT = 1, SPACE_STDERR = 2 };

/* Called for each output event as it arrives; return a negative errno to stop reading
 * (the call then returns that value). */
typedef int (*space_output_fn)(void *userdata, enum space_stream stream, const void *data, size_t len);
/* Called once with the pid as soon as the daemon reports the start. */
typedef void (*space_start_fn)(void *userdata, int pid);

#define SPACE_EXEC_OPTS_VERSION 1
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

/* ---- templates ------------------------------------------------------------------- */

struct space_template_info {
        char name[128];
        uint64_t size_bytes;
        char created_at[48];
};
int space_template_list(space_client *c, struct space_template_info **ret, size_t *ret_n);

typedef void (*space_progress_fn)(void *userdata, const char *message);

#define SPACE_TEMPLATE_BUILD_OPTS_VERSION 1
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
};
#define SPACE_TEMPLATE_BUILD_OPTS_INIT .version = SPACE_TEMPLATE_BUILD_OPTS_VERSION

/* POST /v1/templates; streams progress, fills *ret (may be NULL) from the "done" event. */
int space_template_build(space_client *c, const struct space_template_build_opts *opts, struct space_template_info *ret);
int space_template_delete(space_client *c, const char *name);

/* strerror-like text for the library's return values. */
const char *space_strerror(int err);
