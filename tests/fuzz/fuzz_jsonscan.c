/*
 * Fuzz harness: panel/jsonscan.c against jansson, its reference (issue 33).
 * The first byte picks the key of the array set apart ("users", "data" or "x"); the rest is the
 * text. Checks:
 *  - pn_json_check() never refuses a text json_loadb() reads, and what it passes that jansson
 *    refuses is refused for what only decoded values show (a duplicate key, a number too
 *    large);
 *  - pn_json_body_load() with every pn_json_body_next() accepts exactly what
 *    json_loadb(JSON_REJECT_DUPLICATES) accepts, and the tree with the elements put back is
 *    jansson's tree; errors carry a message.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "panel/jsonscan.h"
#include "tests/fuzz/fuzz.h"

/* The split load with its elements put back: what json_loadb() would give, or NULL. */
static json_t *split_load(const char *text, size_t len, const char *key, size_t *n_out)
{
    pn_json_body b;
    sv_error err = {0};
    int rc = pn_json_body_load(&b, text, len, key, &err);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ENOMEM);
    if (rc != 0) {
        FUZZ_CHECK(err.msg[0] != '\0');
        return NULL;
    }
    json_t *list = b.open != 0 ? json_object_get(b.root, key) : NULL;
    FUZZ_CHECK(b.open == 0 || (json_is_array(list) && json_array_size(list) == 0));
    json_t *e;
    size_t n = 0;
    while ((rc = pn_json_body_next(&b, &e, &err)) == 0) {
        FUZZ_CHECK(e != NULL && list != NULL);
        FUZZ_CHECK(json_array_append_new(list, e) == 0);
        n++;
    }
    FUZZ_CHECK(rc == 1 || rc == -EBADMSG || rc == -ENOMEM);
    FUZZ_CHECK(rc == 1 || err.msg[0] != '\0');
    FUZZ_CHECK(rc != 1 || n == b.n);
    json_t *root = rc == 1 ? json_incref(b.root) : NULL;
    pn_json_body_free(&b);
    *n_out = n;
    return root;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    static const char *const keys[] = {"users", "data", "x"};
    const char *key = keys[data[0] % 3];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    sv_error err = {0};
    json_error_t jerr;
    json_t *any = json_loadb(text, len, 0, &jerr);
    int rc = pn_json_check(text, len, &err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    FUZZ_CHECK(any == NULL || rc == 0);
    FUZZ_CHECK(rc == 0 || err.msg[0] != '\0');
    if (any == NULL && rc == 0)
        FUZZ_CHECK(json_error_code(&jerr) == json_error_numeric_overflow ||
                   json_error_code(&jerr) == json_error_out_of_memory);
    json_decref(any);
    json_t *ref = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (ref == NULL && rc == 0)
        FUZZ_CHECK(json_error_code(&jerr) == json_error_numeric_overflow ||
                   json_error_code(&jerr) == json_error_duplicate_key ||
                   json_error_code(&jerr) == json_error_out_of_memory);
    size_t n = 0;
    json_t *split = split_load(text, len, key, &n);
    FUZZ_CHECK((ref == NULL) == (split == NULL));
    if (ref != NULL)
        FUZZ_CHECK(json_equal(ref, split));
    json_decref(ref);
    json_decref(split);
    return 0;
}
