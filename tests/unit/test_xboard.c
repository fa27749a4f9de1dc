/*
 * Unit tests of the Xboard node channel parsers (panel/xboard.c, issue 14; PROTOCOLS-2.md §6):
 * every event shape katana uses, the ignored ones, the error paths with their texts, and the
 * handshake answer.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "panel/xboard.h"

static int parse(const char *msg, pn_xb_event *ev, sv_error *err)
{
    return pn_xb_event_parse(msg, strlen(msg), "shadowsocks", ev, err);
}

static void xboard__events_katana_uses__parse(void **state)
{
    (void)state;
    pn_xb_event ev;
    sv_error err = {0};
    assert_int_equal(parse("{\"event\":\"ping\"}", &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_PING);
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"auth.success\",\"data\":{\"node_id\":7}}", &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_AUTH_OK);
    assert_true(ev.has_node_id);
    assert_int_equal(ev.node_id, 7);
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"sync.config\",\"data\":{\"config\":{\"server_port\":"
                           "8388,\"cipher\":\"aes-128-gcm\"},\"node_id\":\"3\"}}", &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_CONFIG);
    assert_string_equal(ev.node.protocol, "shadowsocks"); /* the node type given */
    assert_int_equal(ev.node.server_port, 8388);
    assert_int_equal(ev.node_id, 3);
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"sync.users\",\"data\":{\"users\":[{\"id\":1,\"uuid\":"
                           "\"a\",\"speed_limit\":null,\"device_limit\":2}]}}", &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_USERS);
    assert_int_equal(ev.users.n, 1);
    assert_int_equal(ev.users.users[0].device_limit, 2);
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"sync.user.delta\",\"data\":{\"action\":\"remove\","
                           "\"users\":[{\"id\":9},{\"id\":\"4\"}]}}", &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_DELTA);
    assert_int_equal(ev.n_ids, 2);
    assert_int_equal(ev.ids[0], 4); /* sorted */
    assert_int_equal(ev.ids[1], 9);
    assert_int_equal(ev.users.n, 0);
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"sync.user.delta\",\"data\":{\"action\":\"add\","
                           "\"users\":[{\"id\":5,\"uuid\":\"u\"}]}}", &ev, &err), 0);
    assert_int_equal(ev.users.n, 1);
    assert_null(ev.ids);
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"error\",\"data\":{\"message\":\"invalid\\ntoken\"}}",
                           &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_ERROR);
    assert_string_equal(ev.message, "invalid.token");
    pn_xb_event_free(&ev);
    assert_int_equal(parse("{\"event\":\"sync.devices\",\"data\":{\"users\":[]}}", &ev, &err), 0);
    assert_int_equal(ev.kind, PN_XB_IGNORED);
    pn_xb_event_free(&ev);
}

static void expect_bad(const char *msg, int code, const char *text)
{
    pn_xb_event ev;
    sv_error err = {0};
    assert_int_equal(parse(msg, &ev, &err), code);
    assert_string_equal(err.msg, text);
    assert_null(ev.users.users);
    assert_null(ev.ids);
    assert_null(ev.node.protocol);
    pn_xb_event_free(&ev);
}

static void xboard__bad_messages__are_refused_with_their_reason(void **state)
{
    (void)state;
    expect_bad("{\"event\":\"sync.users\",\"data\":{\"users\":[{\"id\":1", -EINVAL,
               "message is not a JSON object");
    expect_bad("<html></html>", -EINVAL, "message is not a JSON object");
    expect_bad("{\"data\":{}}", -EINVAL, "event: expected a name");
    expect_bad("{\"event\":\"sync.users\",\"data\":{\"users\":[{\"id\":1,\"uuid\":\"a\"},"
               "{\"id\":1,\"uuid\":\"b\"}]}}", -EINVAL,
               "sync.users: users: user id 1 listed twice");
    expect_bad("{\"event\":\"sync.user.delta\",\"data\":{\"action\":\"remove\",\"users\":"
               "[{\"id\":2},{\"id\":2}]}}", -EINVAL,
               "sync.user.delta: users: user id 2 listed twice");
    expect_bad("{\"event\":\"sync.user.delta\",\"data\":{\"action\":\"remove\",\"users\":"
               "[{\"id\":-2}]}}", -EINVAL,
               "sync.user.delta: users[0].id: expected a positive integer");
    expect_bad("{\"event\":\"sync.user.delta\",\"data\":{\"action\":\"rename\",\"users\":[]}}",
               -EINVAL, "sync.user.delta: action: expected \"add\" or \"remove\"");
    expect_bad("{\"event\":\"sync.config\",\"data\":{}}", -EINVAL,
               "sync.config: config: expected an object");
    expect_bad("{\"event\":\"sync.users\",\"data\":{\"node_id\":\"x\",\"users\":[]}}", -EINVAL,
               "sync.users: data.node_id: expected a positive integer");
    pn_xb_event ev;
    sv_error err = {0};
    assert_int_equal(pn_xb_event_parse("{}", (size_t)PN_XB_MSG_MAX + 1, NULL, &ev, &err),
                     -EMSGSIZE);
    pn_xb_event_free(&ev);
}

static void xboard__handshake__gives_the_channel_url(void **state)
{
    (void)state;
    char *url = NULL;
    sv_error err = {0};
    const char *on = "{\"websocket\":{\"enabled\":true,\"ws_url\":\"wss://p.example/ws\"}}";
    assert_int_equal(pn_xb_parse_handshake(on, strlen(on), &url, &err), 0);
    assert_string_equal(url, "wss://p.example/ws");
    free(url);
    const char *off = "{\"websocket\":{\"enabled\":false}}";
    assert_int_equal(pn_xb_parse_handshake(off, strlen(off), &url, &err), 0);
    assert_null(url);
    const char *http = "{\"websocket\":{\"enabled\":true,\"ws_url\":\"http://p/ws\"}}";
    assert_int_equal(pn_xb_parse_handshake(http, strlen(http), &url, &err), -EINVAL);
    assert_string_equal(err.msg, "handshake: websocket.ws_url: expected a ws:// or wss:// URL");
    assert_null(url);
    assert_int_equal(pn_xb_parse_handshake("<html>", 6, &url, &err), -EINVAL);
    assert_string_equal(err.msg, "handshake: body is not JSON");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xboard__events_katana_uses__parse),
        cmocka_unit_test(xboard__bad_messages__are_refused_with_their_reason),
        cmocka_unit_test(xboard__handshake__gives_the_channel_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
