/*
 * Fuzz harness: the API's request-target parser (api/query.c), the listen-address parser and the
 * bearer compare, on arbitrary bytes.
 * Checks: a refusal is -EINVAL with a message; an accepted target has at most
 * API_PATH_SEGMENTS_MAX non-empty, NUL-free segments and at most API_QUERY_MAX distinct,
 * non-empty keys within their bounds; parsing is deterministic; a token always matches itself.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "tests/fuzz/fuzz.h"

static void check_uri(const api_uri *u)
{
    FUZZ_CHECK(u->n_segments <= API_PATH_SEGMENTS_MAX);
    FUZZ_CHECK(u->n_params <= API_QUERY_MAX);
    for (size_t i = 0; i < u->n_segments; i++) {
        size_t n = strnlen(u->segments[i], API_SEGMENT_MAX + 1);
        FUZZ_CHECK(n > 0 && n <= API_SEGMENT_MAX);
    }
    for (size_t i = 0; i < u->n_params; i++) {
        size_t kn = strnlen(u->params[i].key, API_QUERY_KEY_MAX + 1);
        FUZZ_CHECK(kn > 0 && kn <= API_QUERY_KEY_MAX);
        FUZZ_CHECK(strnlen(u->params[i].value, API_QUERY_VALUE_MAX + 1) <= API_QUERY_VALUE_MAX);
        FUZZ_CHECK(api_uri_param(u, u->params[i].key) == u->params[i].value);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static api_uri a, b;
    sv_error err = {0};
    int rc = api_uri_parse((const char *)data, size, &a, &err);
    FUZZ_CHECK(rc == 0 || (rc == -EINVAL && err.msg[0] != '\0'));
    int rc2 = api_uri_parse((const char *)data, size, &b, &err);
    FUZZ_CHECK(rc == rc2);
    if (rc == 0) {
        check_uri(&a);
        FUZZ_CHECK(memcmp(&a, &b, sizeof a) == 0);
    }
    char text[128];
    size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    bool loopback = false;
    rc = api_listen_parse(text, NULL, &loopback, &err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    char header[160];
    snprintf(header, sizeof header, "Bearer %s", text);
    FUZZ_CHECK(api_auth_ok(header, text) == (text[0] != '\0'));
    return 0;
}
