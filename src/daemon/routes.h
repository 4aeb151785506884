/* spaced's route table: every (method, path pattern, handler) the daemon serves, in one
 * array so that a test can compare it with api/openapi.yaml. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define API_MAX_PARAMS 4
#define API_MAX_PARAM_LEN 128 /* one path segment captured by {name} */

struct api_params {
        size_t n;
        const char *names[API_MAX_PARAMS];
        char values[API_MAX_PARAMS][API_MAX_PARAM_LEN];
};

enum api_body {
        API_BODY_JSON,   /* the body (at most HTTP_MAX_JSON_BODY) is collected, then the handler runs */
        API_BODY_STREAM, /* the handler runs at the head and takes the body as it arrives */
};

struct conn;
struct srv_router;
typedef void (*api_handler_fn)(struct conn *c);

struct api_route {
        const char *method;
        const char *pattern; /* "/v1/sessions/{id}": {name} matches one non-empty segment */
        enum api_body body;
        api_handler_fn handler;
};

extern const struct api_route api_routes[];
extern const size_t api_n_routes;
/* The table as server.c takes it (server.h). */
extern const struct srv_router api_router;

/* Finds the route for method + path (decoded, without query). 0 and *ret on a match;
 * -ENOENT if no pattern matches the path (404); -EOPNOTSUPP if one does but not for this
 * method (405). *params gets the captured segments. */
int api_route_match(const char *method, const char *path, const struct api_route **ret, struct api_params *params);
/* Whether path matches pattern ({name}: one non-empty segment, captured into *params when
 * not NULL). */
bool api_path_matches(const char *pattern, const char *path, struct api_params *params);
/* A captured segment by name, NULL if the route has none. */
const char *api_param(const struct api_params *p, const char *name);
/* "GET, DELETE": the methods that serve path, for the Allow header. */
void api_allowed_methods(const char *path, char *out, size_t outsz);
/* Whether r uses a session's sandbox (exec, processes, files, port-forward): such a
 * request is activity, and resumes a paused session with auto_resume (daemon/lifetime.h). */
bool api_route_uses_sandbox(const struct api_route *r);

/* Handlers (api.c, api_sessions.c, api_files.c, api_templates.c). */
void api_health(struct conn *c);
void api_session_create(struct conn *c);
void api_session_list(struct conn *c);
void api_session_get(struct conn *c);
void api_session_delete(struct conn *c);
void api_snapshot_create(struct conn *c);
void api_snapshot_list(struct conn *c);
void api_session_pause(struct conn *c);
void api_session_resume(struct conn *c);
void api_session_restore(struct conn *c);
void api_session_fork(struct conn *c);
void api_events_list(struct conn *c);
void api_events_append(struct conn *c);
void api_session_connect(struct conn *c);
/* #15 terminals (api_terminals.c) */
void api_terminal_create(struct conn *c);
void api_terminal_list(struct conn *c);
void api_terminal_ws(struct conn *c);
void api_gc(struct conn *c);
void api_exec(struct conn *c);
void api_process_list(struct conn *c);
void api_process_output(struct conn *c);
void api_process_signal(struct conn *c);
void api_file_get(struct conn *c);
void api_file_put(struct conn *c);
void api_file_delete(struct conn *c);
void api_file_list(struct conn *c);
void api_file_stat(struct conn *c);
void api_file_mkdir(struct conn *c);
void api_file_watch(struct conn *c);
void api_template_list(struct conn *c);
void api_template_build(struct conn *c);
void api_template_delete(struct conn *c);
void api_pool_get(struct conn *c);
void api_pool_set(struct conn *c);
void api_port_expose(struct conn *c);
void api_port_list(struct conn *c);
void api_port_unexpose(struct conn *c);
void api_port_forward(struct conn *c);
void api_network_get(struct conn *c);
void api_network_put(struct conn *c);
/* lifetime.c */
void api_session_timeouts_put(struct conn *c);
/* Usage metrics (api_metrics.c): a session's samples, the daemon's Prometheus text, and
 * the router's count of every answer. */
void api_session_metrics(struct conn *c);
void api_metrics(struct conn *c);
void api_answered(struct conn *c, int status);
