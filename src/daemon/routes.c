/* The route table and its matcher. Patterns are matched segment by segment; the table is
 * small, so a linear scan is fast enough and keeps the table the single truth. */
#include "daemon/routes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/e2b/e2b.h"
#include "daemon/lifetime.h"
#include "daemon/ports.h"
#include "daemon/server.h"

const struct api_route api_routes[] = {
        { "GET", "/v1/health", API_BODY_JSON, api_health },
        { "POST", "/v1/sessions", API_BODY_JSON, api_session_create },
        { "GET", "/v1/sessions", API_BODY_JSON, api_session_list },
        { "GET", "/v1/sessions/{id}", API_BODY_JSON, api_session_get },
        { "DELETE", "/v1/sessions/{id}", API_BODY_JSON, api_session_delete },
        { "POST", "/v1/sessions/{id}/snapshots", API_BODY_JSON, api_snapshot_create },
        { "GET", "/v1/sessions/{id}/snapshots", API_BODY_JSON, api_snapshot_list },
        { "POST", "/v1/sessions/{id}/pause", API_BODY_JSON, api_session_pause },
        { "POST", "/v1/sessions/{id}/resume", API_BODY_JSON, api_session_resume },
        { "POST", "/v1/sessions/{id}/restore", API_BODY_JSON, api_session_restore },
        { "POST", "/v1/sessions/{id}/fork", API_BODY_JSON, api_session_fork },
        { "GET", "/v1/sessions/{id}/events", API_BODY_JSON, api_events_list },
        { "POST", "/v1/sessions/{id}/events", API_BODY_JSON, api_events_append },
        { "POST", "/v1/sessions/{id}/connect", API_BODY_JSON, api_session_connect },
        { "POST", "/v1/sessions/{id}/exec", API_BODY_STREAM, api_exec },
        { "GET", "/v1/sessions/{id}/processes", API_BODY_JSON, api_process_list },
        { "GET", "/v1/sessions/{id}/processes/{pid}/output", API_BODY_JSON, api_process_output },
        { "POST", "/v1/sessions/{id}/processes/{pid}/signal", API_BODY_JSON, api_process_signal },
        { "GET", "/v1/sessions/{id}/network", API_BODY_JSON, api_network_get },
        { "PUT", "/v1/sessions/{id}/network", API_BODY_JSON, api_network_put },
        { "GET", "/v1/sessions/{id}/files", API_BODY_JSON, api_file_get },
        { "PUT", "/v1/sessions/{id}/files", API_BODY_STREAM, api_file_put },
        { "DELETE", "/v1/sessions/{id}/files", API_BODY_JSON, api_file_delete },
        { "GET", "/v1/sessions/{id}/files/list", API_BODY_JSON, api_file_list },
        { "GET", "/v1/sessions/{id}/files/stat", API_BODY_JSON, api_file_stat },
        { "POST", "/v1/sessions/{id}/files/mkdir", API_BODY_JSON, api_file_mkdir },
        { "GET", "/v1/sessions/{id}/files/watch", API_BODY_JSON, api_file_watch },
        { "POST", "/v1/sessions/{id}/ports", API_BODY_JSON, api_port_expose },
        { "GET", "/v1/sessions/{id}/ports", API_BODY_JSON, api_port_list },
        { "DELETE", "/v1/sessions/{id}/ports/{port}", API_BODY_JSON, api_port_unexpose },
        { "GET", "/v1/sessions/{id}/ports/{port}/forward", API_BODY_JSON, api_port_forward },
        /* #15 terminals (api_terminals.c) */
        { "POST", "/v1/sessions/{id}/terminals", API_BODY_JSON, api_terminal_create },
        { "GET", "/v1/sessions/{id}/terminals", API_BODY_JSON, api_terminal_list },
        { "GET", "/v1/sessions/{id}/terminals/{pid}", API_BODY_JSON, api_terminal_ws },
        { "GET", "/v1/templates", API_BODY_JSON, api_template_list },
        { "POST", "/v1/templates", API_BODY_JSON, api_template_build },
        { "DELETE", "/v1/templates/{name}", API_BODY_JSON, api_template_delete },
        { "POST", "/v1/gc", API_BODY_JSON, api_gc },
        { "GET", "/v1/pool", API_BODY_JSON, api_pool_get },
        { "PUT", "/v1/pool/{template}", API_BODY_JSON, api_pool_set },
        { "PUT", "/v1/sessions/{id}/timeouts", API_BODY_JSON, api_session_timeouts_put },
        /* usage metrics (issue #15, api_metrics.c) */
        { "GET", "/v1/sessions/{id}/metrics", API_BODY_JSON, api_session_metrics },
        { "GET", "/metrics", API_BODY_JSON, api_metrics },
};
const size_t api_n_routes = sizeof api_routes / sizeof api_routes[0];

bool api_path_matches(const char *pattern, const char *path, struct api_params *params) {
        struct api_params p = { 0 };
        const char *a = pattern, *b = path;
        while (*a && *b) {
                if (*a != '/' || *b != '/')
                        return false;
                a++, b++;
                const char *ae = strchrnul(a, '/'), *be = strchrnul(b, '/');
                size_t al = (size_t)(ae - a), bl = (size_t)(be - b);
                if (al >= 2 && a[0] == '{' && a[al - 1] == '}') {
                        if (bl == 0 || bl >= API_MAX_PARAM_LEN || p.n >= API_MAX_PARAMS)
                                return false;
                        p.names[p.n] = a + 1; /* ends at '}' — compared by length in api_param */
                        memcpy(p.values[p.n], b, bl);
                        p.values[p.n][bl] = '\0';
                        p.n++;
                } else if (al != bl || memcmp(a, b, al) != 0) {
                        return false;
                }
                a = ae, b = be;
        }
        if (*a || *b)
                return false;
        if (params)
                *params = p;
        return true;
}

int api_route_match(const char *method, const char *path, const struct api_route **ret, struct api_params *params) {
        bool path_seen = false;
        for (size_t i = 0; i < api_n_routes; i++) {
                if (!api_path_matches(api_routes[i].pattern, path, NULL))
                        continue;
                path_seen = true;
                if (strcmp(api_routes[i].method, method) != 0)
                        continue;
                api_path_matches(api_routes[i].pattern, path, params);
                *ret = &api_routes[i];
                return 0;
        }
        return path_seen ? -EOPNOTSUPP : -ENOENT;
}

const char *api_param(const struct api_params *p, const char *name) {
        size_t nl = strlen(name);
        for (size_t i = 0; i < p->n; i++)
                if (strncmp(p->names[i], name, nl) == 0 && p->names[i][nl] == '}')
                        return p->values[i];
        return NULL;
}

void api_allowed_methods(const char *path, char *out, size_t outsz) {
        size_t o = 0;
        if (outsz)
                out[0] = '\0';
        for (size_t i = 0; i < api_n_routes; i++) {
                if (!api_path_matches(api_routes[i].pattern, path, NULL))
                        continue;
                int n = snprintf(out + o, outsz - o, "%s%s", o ? ", " : "", api_routes[i].method);
                if (n < 0 || (size_t)n >= outsz - o)
                        return;
                o += (size_t)n;
        }
}

/* The routes that use a session's sandbox: each counts as activity for its idle_timeout,
 * and waits for the resume of a paused session with auto_resume (daemon/lifetime.h). A
 * route of that kind (a terminal's too) is listed here. */
static const api_handler_fn sandbox_handlers[] = {
        api_exec, api_process_list, api_process_output, api_process_signal,
        api_file_get, api_file_put, api_file_delete, api_file_list, api_file_stat, api_file_mkdir, api_file_watch,
        api_port_forward, api_terminal_create, api_terminal_list, api_terminal_ws,
};

bool api_route_uses_sandbox(const struct api_route *r) {
        if (e2b_route_uses_sandbox(r))
                return true;
        for (size_t i = 0; r && i < sizeof sandbox_handlers / sizeof sandbox_handlers[0]; i++)
                if (r->handler == sandbox_handlers[i])
                        return true;
        return false;
}

/* Before authentication: the E2B API's requests (by their headers), then exposed ports'
 * proxied ones (by path or Host). */
static bool api_intercept(struct conn *c) { return e2b_intercept(c) || ports_intercept(c); }

const struct srv_router api_router = {
        .match = api_route_match,
        .allowed = api_allowed_methods,
        .intercept = api_intercept,
        .hold = lifetime_hold,
        .answered = api_answered,
};
