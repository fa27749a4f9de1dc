/*
 * Unit tests of the API's pure parts (api/query.c): request targets, query keys, ids, listen
 * addresses (loopback or not), the bearer compare and RFC 3339 times.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "api/api.h"

static int parse(const char *t, api_uri *u, sv_error *err)
{
    return api_uri_parse(t, strlen(t), u, err);
}

static void a_selector_target_is_split_and_decoded(void **state)
{
    (void)state;
    api_uri u;
    sv_error err = {0};
    assert_int_equal(parse("//v1/connections/?outbound=direct&user=a+b%21&&node=", &u, &err), 0);
    assert_int_equal(u.n_segments, 2);
    assert_string_equal(u.segments[0], "v1");
    assert_string_equal(u.segments[1], "connections");
    assert_int_equal(u.n_params, 3);
    assert_string_equal(api_uri_param(&u, "outbound"), "direct");
    assert_string_equal(api_uri_param(&u, "user"), "a b!");
    assert_string_equal(api_uri_param(&u, "node"), "");
    assert_null(api_uri_param(&u, "inbound"));
    assert_int_equal(parse("/v1/nodes/a%20b%2Fc/sync", &u, &err), 0);
    assert_int_equal(u.n_segments, 4);
    assert_string_equal(u.segments[2], "a b/c");
}

static void bad_targets_are_refused_with_a_reason(void **state)
{
    (void)state;
    static const struct { const char *t, *msg; } cases[] = {
        {"/v1/x?a=%00", "query: bad percent escape"},
        {"/v1/x?a=%4", "query: bad percent escape"},
        {"/v1/%zz", "path: bad percent escape"},
        {"/v1/x?user=1&user=2", "query: key \"user\" repeated"},
        {"/v1/x?=1", "query: empty key"},
        {"v1/x", "path: must start with '/'"},
        {"/a/b/c/d/e/f/g/h/i", "path: more than 8 segments"},
        {"/x#y", "request target: fragment not allowed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_uri u;
        sv_error err = {0};
        assert_int_equal(parse(cases[i].t, &u, &err), -EINVAL);
        assert_string_equal(err.msg, cases[i].msg);
    }
}

static void limits_are_enforced(void **state)
{
    (void)state;
    char big[API_URI_MAX + 2];
    api_uri u;
    sv_error err = {0};
    memset(big, 'a', sizeof big);
    big[0] = '/';
    assert_int_equal(api_uri_parse(big, API_URI_MAX + 1, &u, &err), -EINVAL);
    assert_int_equal(api_uri_parse(big, 200, &u, &err), -EINVAL); /* segment > 128 */
    assert_string_equal(err.msg, "path: a segment is longer than 128 bytes");
    char q[512] = "/v1?";
    for (int i = 0; i < API_QUERY_MAX + 1; i++)
        snprintf(q + strlen(q), sizeof q - strlen(q), "k%d=1&", i);
    assert_int_equal(parse(q, &u, &err), -EINVAL);
    assert_string_equal(err.msg, "query: more than 16 parameters");
}

static void unknown_keys_are_named(void **state)
{
    (void)state;
    static const char *const keys[] = {"user", "node", NULL};
    api_uri u;
    sv_error err = {0};
    assert_int_equal(parse("/v1/sessions?user=1&node=a", &u, &err), 0);
    assert_int_equal(api_uri_check_keys(&u, keys, &err), 0);
    assert_int_equal(parse("/v1/sessions?user=1&bogus=2", &u, &err), 0);
    assert_int_equal(api_uri_check_keys(&u, keys, &err), -EINVAL);
    assert_string_equal(err.msg, "unknown query key \"bogus\"");
}

static void ids_are_plain_decimal(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(api_parse_u64("18446744073709551615", &v), 0);
    assert_true(v == UINT64_MAX);
    assert_int_equal(api_parse_u64("18446744073709551616", &v), -EINVAL);
    assert_int_equal(api_parse_u64("", &v), -EINVAL);
    assert_int_equal(api_parse_u64("+1", &v), -EINVAL);
    assert_int_equal(api_parse_u64("1 ", &v), -EINVAL);
    assert_int_equal(api_parse_u64("257", &v), 0);
    assert_int_equal(v, 257);
}

static void listen_addresses_and_loopback(void **state)
{
    (void)state;
    static const struct { const char *text; bool ok, loopback; } cases[] = {
        {"127.0.0.1:9090", true, true},  {"127.5.6.7:1", true, true},
        {"[::1]:9090", true, true},      {"0.0.0.0:9090", true, false},
        {"[::]:9090", true, false},      {"192.0.2.1:80", true, false},
        {"localhost:9090", false, false}, {"127.0.0.1", false, false},
        {"127.0.0.1:0", false, false},   {"127.0.0.1:65536", false, false},
        {"::1:9090", false, false},      {"[127.0.0.1]:9090", false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sockaddr_storage sa;
        bool lo = !cases[i].loopback;
        sv_error err = {0};
        int rc = api_listen_parse(cases[i].text, &sa, &lo, &err);
        assert_int_equal(rc == 0, cases[i].ok);
        if (rc == 0)
            assert_int_equal(lo, cases[i].loopback);
        else
            assert_true(strncmp(err.msg, "api.listen: ", 12) == 0);
    }
}

static void bearer_tokens_match_exactly(void **state)
{
    (void)state;
    assert_true(api_auth_ok("Bearer s3cret", "s3cret"));
    assert_false(api_auth_ok("Bearer s3cre", "s3cret"));
    assert_false(api_auth_ok("Bearer s3cretX", "s3cret"));
    assert_false(api_auth_ok("Bearer s3creT", "s3cret"));
    assert_false(api_auth_ok("Bearer s3crets3cret", "s3cret")); /* cycled, but longer */
    assert_false(api_auth_ok("Basic s3cret", "s3cret"));
    assert_false(api_auth_ok("bearer s3cret", "s3cret"));
    assert_false(api_auth_ok(NULL, "s3cret"));
    assert_false(api_auth_ok("Bearer ", ""));
}

static void times_are_rfc3339_utc(void **state)
{
    (void)state;
    char buf[40];
    api_time_rfc3339(1714564800123ull, buf, sizeof buf);
    assert_string_equal(buf, "2024-05-01T12:00:00.123Z");
    api_time_rfc3339(0, buf, sizeof buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    api_time_rfc3339(951782400000ull, buf, sizeof buf); /* a leap day of a 400-year */
    assert_string_equal(buf, "2000-02-29T00:00:00.000Z");
    api_time_rfc3339(4107542399999ull, buf, sizeof buf); /* 2100 is no leap year */
    assert_string_equal(buf, "2100-02-28T23:59:59.999Z");
    api_time_rfc3339(UINT64_MAX, buf, sizeof buf);
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
    /* the arithmetic agrees with gmtime_r over 1970..2400, a sample every 40 days 1:01:01.001 */
    for (uint64_t ms = 7; ms < 13569465600000ull; ms += 3459661001ull) {
        time_t secs = (time_t)(ms / 1000);
        struct tm tm;
        char want[80];
        assert_non_null(gmtime_r(&secs, &tm));
        snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (unsigned)(ms % 1000));
        api_time_rfc3339(ms, buf, sizeof buf);
        assert_string_equal(buf, want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_selector_target_is_split_and_decoded),
        cmocka_unit_test(bad_targets_are_refused_with_a_reason),
        cmocka_unit_test(limits_are_enforced),
        cmocka_unit_test(unknown_keys_are_named),
        cmocka_unit_test(ids_are_plain_decimal),
        cmocka_unit_test(listen_addresses_and_loopback),
        cmocka_unit_test(bearer_tokens_match_exactly),
        cmocka_unit_test(times_are_rfc3339_utc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
