/* The table of runtime drivers and the per-thread "last error" text that lets spaced
 * show why a create failed, not just which errno it got. */
#include "runtime/runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct runtime_ops *const drivers[] = { &rt_ns_ops, &rt_gvisor_ops, &rt_microvm_ops };

const struct runtime_ops *runtime_nth(size_t i) {
        return i < sizeof drivers / sizeof drivers[0] ? drivers[i] : NULL;
}

const struct runtime_ops *runtime_find(const char *name) {
        if (!name)
                return NULL;
        for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++)
                if (!strcmp(drivers[i]->name, name))
                        return drivers[i];
        return NULL;
}

static _Thread_local char last_error[512];

const char *runtime_last_error(void) {
        return last_error;
}

void runtime_set_error(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(last_error, sizeof last_error, fmt, ap);
        va_end(ap);
}
