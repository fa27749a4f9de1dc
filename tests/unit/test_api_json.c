/*
 * Unit tests of the direct JSON writer of flows and sessions (api/json.c api_jw_*, issue 13:
 * GET /v1/connections and the opened/closed events): every field parses back with jansson, with
 * the null forms, escaping, bytes that are not UTF-8, the INT64_MAX clamp and allocation growth.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/api_internal.h"

static json_t *parse(api_jw *w)
{
    size_t len;
    char *text = api_jw_take(w, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    json_error_t err;
    json_t *v = json_loadb(text, len, 0, &err);
    if (v == NULL)
        fail_msg("not JSON (%s): %s", err.text, text);
    free(text);
    return v;
}

static void a_flow_has_every_field(void **state)
{
    (void)state;
    sv_flow_info f = {.id = 513, .session = 7, .has_user = true, .user = 42,
                      .network = SV_NET_UDP, .rule = 3, .epoch = 9,
                      .started_ms = 1714564800123ull, .up = 1000, .down = UINT64_MAX,
                      .killed = true};
    strcpy(f.inbound, "node-a");
    strcpy(f.user_label, "alice");
    strcpy(f.source, "127.0.0.1:40000");
    strcpy(f.destination, "example.test:443");
    strcpy(f.sniffed, "sni.example.test");
    strcpy(f.outbound, "direct@v2");
    api_jw w = {0};
    api_jw_flow(&w, &f);
    json_t *v = parse(&w);
    json_int_t id, session, uid, rule, epoch, up, down;
    int killed = -1;
    const char *node, *inbound, *label, *source, *dest, *sniffed, *net, *ob, *start;
    assert_int_equal(json_unpack(v, "{s:I, s:I, s:s, s:s, s:{s:I, s:s}, s:s, s:s, s:s, s:s, s:s, "
                                    "s:I, s:I, s:b, s:s, s:I, s:I !}",
                                 "id", &id, "session", &session, "node", &node, "inbound", &inbound,
                                 "user", "uid", &uid, "label", &label, "source", &source,
                                 "destination", &dest, "sniffed_host", &sniffed, "network", &net,
                                 "outbound", &ob, "rule", &rule, "epoch", &epoch,
                                 "killed", &killed, "start", &start, "up", &up, "down", &down),
                     0);
    assert_int_equal(killed, 1); /* seed 003 FlowEntry::killed */
    assert_int_equal(id, 513);
    assert_int_equal(session, 7);
    assert_string_equal(node, "node-a");
    assert_string_equal(inbound, "node-a");
    assert_int_equal(uid, 42);
    assert_string_equal(label, "alice");
    assert_string_equal(source, "127.0.0.1:40000");
    assert_string_equal(dest, "example.test:443");
    assert_string_equal(sniffed, "sni.example.test");
    assert_string_equal(net, "udp");
    assert_string_equal(ob, "direct@v2");
    assert_int_equal(rule, 3);
    assert_int_equal(epoch, 9);
    assert_string_equal(start, "2024-05-01T12:00:00.123Z");
    assert_int_equal(up, 1000);
    assert_true(down == INT64_MAX); /* clamped like the jansson builders */
    json_decref(v);
}

static void absent_fields_are_null(void **state)
{
    (void)state;
    sv_flow_info f = {.id = 1, .rule = -1, .network = SV_NET_TCP};
    strcpy(f.inbound, "n");
    strcpy(f.outbound, "direct@v1");
    api_jw w = {0};
    api_jw_flow(&w, &f);
    json_t *v = parse(&w);
    assert_true(json_is_null(json_object_get(v, "user")));
    assert_true(json_is_null(json_object_get(v, "sniffed_host")));
    assert_true(json_is_null(json_object_get(v, "rule")));
    assert_true(json_is_null(json_object_get(v, "start")));
    assert_true(json_is_false(json_object_get(v, "killed")));
    assert_string_equal(json_string_value(json_object_get(v, "network")), "tcp");
    assert_string_equal(json_string_value(json_object_get(v, "destination")), "");
    json_decref(v);
}

static void strings_are_escaped_and_bad_bytes_replaced(void **state)
{
    (void)state;
    sv_flow_info f = {.id = 1, .rule = -1};
    strcpy(f.inbound, "a\"b\\c");
    strcpy(f.user_label, "tab\there\nnl\x01\x1f");
    f.has_user = true;
    /* é (2 bytes), € (3), 😀 (4) are kept; a lone continuation byte, an overlong '/' (c0 af),
     * a surrogate (ed a0 80) and a cut sequence at the end are not UTF-8 */
    strcpy(f.destination, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\x80|\xc0\xaf|\xed\xa0\x80|\xe2\x82");
    strcpy(f.outbound, "o");
    api_jw w = {0};
    api_jw_flow(&w, &f);
    json_t *v = parse(&w);
    assert_string_equal(json_string_value(json_object_get(v, "inbound")), "a\"b\\c");
    assert_string_equal(json_string_value(json_object_get(json_object_get(v, "user"), "label")),
                        "tab\there\nnl\x01\x1f");
    assert_string_equal(json_string_value(json_object_get(v, "destination")),
                        "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|"
                        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(v);
}

/* seed 003 UserStats::label: a user row of the stats snapshot names its user by id and label;
 * inbound and outbound rows carry no label. */
static void a_stats_user_row_carries_its_label(void **state)
{
    (void)state;
    sv_tag_stats in = {.up = 1, .flows = 1}, user = {.up = 5, .down = 6, .flows = 2};
    strcpy(in.tag, "n1");
    strcpy(user.tag, "42");
    strcpy(user.label, "42");
    sv_stats st = {.tick = 3, .interval_ns = 1000000000ull, .inbounds = &in, .n_inbounds = 1,
                   .users = &user, .n_users = 1};
    json_t *v = api_json_stats(&st);
    assert_non_null(v);
    json_int_t id, up, down, flows;
    const char *label;
    assert_int_equal(json_unpack(json_array_get(json_object_get(v, "users"), 0),
                                 "{s:I, s:s, s:I, s:I, s:I}", "user", &id, "label", &label,
                                 "up", &up, "down", &down, "flows", &flows),
                     0);
    assert_int_equal(id, 42);
    assert_string_equal(label, "42");
    assert_int_equal(up, 5);
    assert_int_equal(flows, 2);
    json_t *row = json_array_get(json_object_get(v, "inbounds"), 0);
    assert_string_equal(json_string_value(json_object_get(row, "tag")), "n1");
    assert_null(json_object_get(row, "label"));
    json_decref(v);
}

static void a_session_and_a_long_list(void **state)
{
    (void)state;
    sv_session_info s = {.id = 5, .udp = false, .started_ms = 1000, .up = 3, .down = 4};
    strcpy(s.inbound, "n");
    strcpy(s.source, "[::1]:5");
    api_jw w = {0};
    api_jw_raw(&w, "[", 1);
    for (int i = 0; i < 3000; i++) { /* grows past the first buffer many times */
        if (i > 0)
            api_jw_raw(&w, ",", 1);
        s.has_user = i % 2 == 1;
        s.user = (uint64_t)i;
        api_jw_session(&w, &s);
    }
    api_jw_raw(&w, "]", 1);
    json_t *v = parse(&w);
    assert_int_equal(json_array_size(v), 3000);
    json_t *first = json_array_get(v, 0), *second = json_array_get(v, 1);
    assert_true(json_is_null(json_object_get(first, "user")));
    assert_int_equal(json_integer_value(json_object_get(second, "user")), 1);
    assert_string_equal(json_string_value(json_object_get(second, "source")), "[::1]:5");
    assert_string_equal(json_string_value(json_object_get(second, "network")), "tcp");
    assert_string_equal(json_string_value(json_object_get(second, "start")),
                        "1970-01-01T00:00:01.000Z");
    assert_int_equal(json_integer_value(json_object_get(second, "down")), 4);
    json_decref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_flow_has_every_field),
        cmocka_unit_test(absent_fields_are_null),
        cmocka_unit_test(strings_are_escaped_and_bad_bytes_replaced),
        cmocka_unit_test(a_stats_user_row_carries_its_label),
        cmocka_unit_test(a_session_and_a_long_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
