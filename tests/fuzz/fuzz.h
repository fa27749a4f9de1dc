/*
 * What every fuzz harness of tests/fuzz/ shares: the libFuzzer entry point, which
 * replay_main.c drives in `make check` and libFuzzer drives in `make fuzz`, and FUZZ_CHECK,
 * the harness's assertion (STYLE.md §11), which aborts with the failed expression and its line
 * so the fuzzer keeps the input.
 */
#ifndef KATANA_TESTS_FUZZ_H
#define KATANA_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/** Runs one input of @p size bytes at @p data (not owned, not NUL-terminated); returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(x)                                                                          \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #x);              \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#endif
