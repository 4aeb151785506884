/* The fixture the space-init integration tests share: each test gets its own space-init,
 * started on a socketpair (initc) with --root on a fresh temp dir, and a check at the end
 * that init exited 0 once the connection closed. */
#pragma once
#include <limits.h>

#include "common/macros.h"
#include "initc.h"

struct fx {
        struct initc c;
        char root[PATH_MAX]; /* init's --root, on the host */
};

/* Which space-init the fixtures start, and the name their temp dirs carry
 * (/tmp/space-init-NAME-XXXXXX); main calls it before the tests run. */
void fx_use(const char *init_path, const char *name);
/* cmocka setup/teardown: *state is a struct fx. */
int fx_setup(void **state);
int fx_teardown(void **state);
/* A path under the root, on the host; the last four results stay valid. */
const char *fx_host(struct fx *f, const char *fmt, ...) _printf_(2, 3);
