/*
 * Fuzz harness: sniffing (supervisor/proto/sniff.c: sv_sniff). Input: the first bytes a client
 * sends. Checks (STYLE.md §11): the answer is one of the three; a FOUND name is 1..253
 * lower-case characters of [a-z0-9._-]; every prefix (each copied to its own buffer, so a read
 * past it is caught under ASan) answers NEED_MORE or what the whole answers, with the same name,
 * and once a prefix answers, every longer one answers the same.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/sniff.h"
#include "tests/fuzz/fuzz.h"

#define PREFIX_CHECK_MAX 4096 /* longer inputs: only the whole and this many prefixes */

static sv_sniff_result sniff_copy(const uint8_t *data, size_t n, char name[SV_SNIFF_NAME_CAP])
{
    uint8_t *copy = malloc(n ? n : 1);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data, n);
    sv_sniff_result r = sv_sniff(copy, n, name);
    free(copy);
    FUZZ_CHECK(r == SV_SNIFF_FOUND || r == SV_SNIFF_NEED_MORE || r == SV_SNIFF_NONE);
    if (r == SV_SNIFF_FOUND) {
        size_t len = strnlen(name, SV_SNIFF_NAME_CAP);
        FUZZ_CHECK(len >= 1 && len <= 253);
        for (size_t i = 0; i < len; i++)
            FUZZ_CHECK((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
                       name[i] == '-' || name[i] == '.' || name[i] == '_');
    }
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char all[SV_SNIFF_NAME_CAP] = "";
    sv_sniff_result want = sniff_copy(data, size, all);
    bool answered = false;
    size_t last = size < PREFIX_CHECK_MAX ? size : PREFIX_CHECK_MAX;
    for (size_t k = 0; k <= last; k++) {
        char part[SV_SNIFF_NAME_CAP] = "";
        sv_sniff_result r = sniff_copy(data, k, part);
        if (r == SV_SNIFF_NEED_MORE) {
            FUZZ_CHECK(!answered);
            continue;
        }
        FUZZ_CHECK(r == want);
        if (r == SV_SNIFF_FOUND)
            FUZZ_CHECK(strcmp(part, all) == 0);
        answered = true;
    }
    FUZZ_CHECK(answered || want == SV_SNIFF_NEED_MORE || last < size);
    return 0;
}
