/* The shared fixture of the space-init integration tests; see harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *fx_init_path;
static const char *fx_name = "test";

void fx_use(const char *init_path, const char *name) {
        fx_init_path = init_path;
        fx_name = name;
}

int fx_setup(void **state) {
        struct fx *f = calloc(1, sizeof *f);
        char tmpl[64];
        snprintf(tmpl, sizeof tmpl, "/tmp/space-init-%s-XXXXXX", fx_name);
        if (!f || !mkdtemp(tmpl) || !realpath(tmpl, f->root)) {
                free(f);
                return -1;
        }
        const char *extra[] = { "--root", f->root, NULL };
        int r = initc_spawn(&f->c, fx_init_path, extra);
        if (r < 0) {
                fprintf(stderr, "cannot start %s: %s\n", fx_init_path, strerror(-r));
                initc_close(&f->c, 0);
                return -1;
        }
        *state = f;
        return 0;
}

int fx_teardown(void **state) {
        struct fx *f = *state;
        /* No listener: closing the connection makes init kill its processes and exit 0. */
        int st = initc_close(&f->c, 5000);
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
        int rc = system(cmd);
        free(f);
        if (rc != 0) {
                fprintf(stderr, "cannot remove the test's root (rm -rf: %d)\n", rc);
                return -1;
        }
        if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "space-init did not exit cleanly after the connection closed (%d)\n", st);
                return -1;
        }
        return 0;
}

const char *fx_host(struct fx *f, const char *fmt, ...) {
        static char bufs[4][PATH_MAX + 256];
        static int next;
        char *b = bufs[next++ % 4];
        int n = snprintf(b, sizeof bufs[0], "%s", f->root);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b + n, sizeof bufs[0] - (size_t)n, fmt, ap);
        va_end(ap);
        return b;
}
