/* The one entry point every fuzz target defines. libFuzzer calls it in the SPACE_FUZZ
 * build; replay.c calls it for each corpus file in the normal build, so the corpus runs
 * as an ordinary test. A target must not keep state between calls. */
#pragma once
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken property of the code under test: abort so libFuzzer (and replay) report it. */
#define FUZZ_CHECK(cond)                                                                 \
        do {                                                                             \
                if (!(cond))                                                             \
                        fuzz_fail(__FILE__, __LINE__, #cond);                            \
        } while (0)

__attribute__((noreturn)) void fuzz_fail(const char *file, int line, const char *what);
