/* Shared by every fuzz target (fuzzer and replay builds alike): how a broken property is
 * reported. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>

void fuzz_fail(const char *file, int line, const char *what) {
        fprintf(stderr, "%s:%d: property failed: %s\n", file, line, what);
        abort();
}
