/* Unit tests of spaced's route table: matching, 404 vs 405, captured parameters, and the
 * contract check: the routes the daemon serves and the paths+methods of api/openapi.yaml
 * must be the same set (the test prints both and every difference). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/routes.h"

#ifndef OPENAPI_PATH
#error "OPENAPI_PATH must name api/openapi.yaml"
#endif

static void test_match(void **state) {
        (void)state;
        const struct api_route *r;
        struct api_params p;
        printf("check: fixed and parameterised paths match the right handler\n");
        assert_int_equal(api_route_match("GET", "/v1/health", &r, &p), 0);
        assert_ptr_equal(r->handler, api_health);
        assert_int_equal(api_route_match("GET", "/v1/sessions", &r, &p), 0);
        assert_ptr_equal(r->handler, api_session_list);
        assert_int_equal(api_route_match("POST", "/v1/sessions", &r, &p), 0);
        assert_ptr_equal(r->handler, api_session_create);
        assert_int_equal(api_route_match("DELETE", "/v1/sessions/ses_0123456789abcdef", &r, &p), 0);
        assert_ptr_equal(r->handler, api_session_delete);
        assert_string_equal(api_param(&p, "id"), "ses_0123456789abcdef");
        assert_null(api_param(&p, "pid"));
        assert_int_equal(api_route_match("GET", "/v1/sessions/ses_1/processes/42/output", &r, &p), 0);
        assert_ptr_equal(r->handler, api_process_output);
        assert_string_equal(api_param(&p, "id"), "ses_1");
        assert_string_equal(api_param(&p, "pid"), "42");
        assert_int_equal(api_route_match("GET", "/v1/sessions/x/files/list", &r, &p), 0);
        assert_ptr_equal(r->handler, api_file_list);
        assert_int_equal(api_route_match("PUT", "/v1/sessions/x/files", &r, &p), 0);
        assert_int_equal(r->body, API_BODY_STREAM);
        assert_int_equal(api_route_match("DELETE", "/v1/templates/base", &r, &p), 0);
        assert_string_equal(api_param(&p, "name"), "base");

        printf("check: the routes that use a session's sandbox (lifetime_hold) and some that do not\n");
        static const char *const uses[][2] = {
                { "POST", "/v1/sessions/x/exec" }, { "GET", "/v1/sessions/x/processes" },
                { "GET", "/v1/sessions/x/processes/1/output" }, { "POST", "/v1/sessions/x/processes/1/signal" },
                { "GET", "/v1/sessions/x/files" }, { "PUT", "/v1/sessions/x/files" }, { "DELETE", "/v1/sessions/x/files" },
                { "GET", "/v1/sessions/x/files/list" }, { "GET", "/v1/sessions/x/files/stat" },
                { "POST", "/v1/sessions/x/files/mkdir" }, { "GET", "/v1/sessions/x/ports/80/forward" },
        };
        for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++) {
                assert_int_equal(api_route_match(uses[i][0], uses[i][1], &r, &p), 0);
                assert_true(api_route_uses_sandbox(r));
        }
        static const char *const not_uses[][2] = {
                { "GET", "/v1/sessions/x" }, { "POST", "/v1/sessions/x/pause" }, { "POST", "/v1/sessions/x/resume" },
                { "PUT", "/v1/sessions/x/timeouts" }, { "GET", "/v1/sessions/x/events" }, { "POST", "/v1/sessions/x/ports" },
                { "DELETE", "/v1/sessions/x" }, { "POST", "/v1/sessions/x/snapshots" },
        };
        for (size_t i = 0; i < sizeof not_uses / sizeof not_uses[0]; i++) {
                assert_int_equal(api_route_match(not_uses[i][0], not_uses[i][1], &r, &p), 0);
                assert_false(api_route_uses_sandbox(r));
        }
        assert_false(api_route_uses_sandbox(NULL));

        printf("check: unknown paths are 404, known paths with another method 405\n");
        assert_int_equal(api_route_match("GET", "/v1/nope", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("GET", "/v1/sessions/", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("GET", "/v1/sessions//exec", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("GET", "/v1/health/", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("GET", "/", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("GET", "", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("GET", "/v1/sessions/a/b/c/d/e", &r, &p), -ENOENT);
        assert_int_equal(api_route_match("DELETE", "/v1/health", &r, &p), -EOPNOTSUPP);
        assert_int_equal(api_route_match("PATCH", "/v1/sessions/x", &r, &p), -EOPNOTSUPP);
        assert_int_equal(api_route_match("get", "/v1/health", &r, &p), -EOPNOTSUPP);

        printf("check: a path segment over %d bytes does not match\n", API_MAX_PARAM_LEN - 1);
        char long_path[512];
        snprintf(long_path, sizeof long_path, "/v1/sessions/%0*d", API_MAX_PARAM_LEN, 7);
        assert_int_equal(api_route_match("GET", long_path, &r, &p), -ENOENT);

        char allow[128];
        api_allowed_methods("/v1/sessions/x/files", allow, sizeof allow);
        printf("check: Allow for /v1/sessions/x/files is \"%s\"\n", allow);
        assert_string_equal(allow, "GET, PUT, DELETE");
}

#define MAX_OPS 128

struct opset {
        char items[MAX_OPS][1100];
        size_t n;
};

static void opset_add(struct opset *s, const char *method, const char *path) {
        assert_true(s->n < MAX_OPS);
        char m[16];
        size_t i = 0;
        for (; method[i] && i < sizeof m - 1; i++)
                m[i] = (char)toupper((unsigned char)method[i]);
        m[i] = '\0';
        snprintf(s->items[s->n++], sizeof s->items[0], "%s %s", m, path);
}

static bool opset_has(const struct opset *s, const char *item) {
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->items[i], item) == 0)
                        return true;
        return false;
}

/* Line-based reading of our own openapi.yaml: under "paths:", a path is a line
 * '  /…:' and its operations are lines '    get:' etc. */
static void read_openapi(struct opset *out) {
        FILE *f = fopen(OPENAPI_PATH, "re");
        if (!f)
                fail_msg("cannot open %s", OPENAPI_PATH);
        char line[1024], path[1024] = "";
        bool in_paths = false;
        static const char *const methods[] = { "get", "put", "post", "delete", "patch", "head", "options", "trace" };
        while (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\r\n")] = '\0';
                if (line[0] == '#' || line[0] == '\0')
                        continue;
                if (!isspace((unsigned char)line[0])) {
                        in_paths = strcmp(line, "paths:") == 0;
                        continue;
                }
                if (!in_paths)
                        continue;
                if (strncmp(line, "  /", 3) == 0) {
                        char *colon = strrchr(line, ':');
                        assert_non_null(colon);
                        *colon = '\0';
                        snprintf(path, sizeof path, "%s", line + 2);
                        continue;
                }
                if (strncmp(line, "    ", 4) == 0 && line[4] != ' ') {
                        for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
                                size_t ml = strlen(methods[i]);
                                if (strncmp(line + 4, methods[i], ml) == 0 && line[4 + ml] == ':') {
                                        assert_true(path[0] == '/');
                                        opset_add(out, methods[i], path);
                                }
                        }
                }
        }
        fclose(f);
}

static void test_openapi_agrees(void **state) {
        (void)state;
        static struct opset served, documented;
        memset(&served, 0, sizeof served);
        memset(&documented, 0, sizeof documented);
        printf("the daemon's route table (%zu routes):\n", api_n_routes);
        for (size_t i = 0; i < api_n_routes; i++) {
                printf("  %-7s %s\n", api_routes[i].method, api_routes[i].pattern);
                opset_add(&served, api_routes[i].method, api_routes[i].pattern);
        }
        read_openapi(&documented);
        printf("check: %zu operations in %s agree with the route table\n", documented.n, OPENAPI_PATH);
        int diffs = 0;
        for (size_t i = 0; i < served.n; i++)
                if (!opset_has(&documented, served.items[i])) {
                        printf("  served but not in openapi.yaml: %s\n", served.items[i]);
                        diffs++;
                }
        for (size_t i = 0; i < documented.n; i++)
                if (!opset_has(&served, documented.items[i])) {
                        printf("  in openapi.yaml but not served: %s\n", documented.items[i]);
                        diffs++;
                }
        for (size_t i = 0; i < served.n; i++)
                for (size_t j = i + 1; j < served.n; j++)
                        if (strcmp(served.items[i], served.items[j]) == 0) {
                                printf("  served twice: %s\n", served.items[i]);
                                diffs++;
                        }
        assert_true(documented.n > 0);
        assert_int_equal(diffs, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_match),
                cmocka_unit_test(test_openapi_agrees),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
