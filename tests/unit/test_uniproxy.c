/*
 * Unit tests: the UniProxy client (panel/uniproxy.c) against a scripted UniProxy server on
 * loopback (libmicrohttpd, real HTTP): query parameters, ETag echoed verbatim and 304, the three
 * outcomes of a fetch (304 / 200 with an empty list / error), HTML 200 as an error, both error
 * envelopes, push / alive / status bodies and their acknowledgements, alivelist, field variants.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#include <uv.h>

#include "panel/uniproxy.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

/* What the server answers next, and what it saw. */
static struct {
    struct MHD_Daemon *d;
    uint16_t port;
    unsigned status;
    char body[65536];
    char etag[128];
    char ctype[64];
    int delay_ms;
    /* seen */
    int hits;
    char method[8], path[128], token[128], node_id[64], node_type[64], inm[128];
    char posted[4096];
    size_t posted_len;
} srv;

typedef struct post_buf {
    char data[4096];
    size_t len;
} post_buf;

static void copy_arg(struct MHD_Connection *c, enum MHD_ValueKind kind, const char *name,
                     char *dst, size_t cap)
{
    const char *v = MHD_lookup_connection_value(c, kind, name);
    snprintf(dst, cap, "%s", v != NULL ? v : "(none)");
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    post_buf *pb = *con_cls;
    if (pb == NULL) {
        *con_cls = calloc(1, sizeof(post_buf));
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size < sizeof pb->data - pb->len ? *upload_size
                                                             : sizeof pb->data - pb->len;
        memcpy(pb->data + pb->len, upload, n);
        pb->len += n;
        *upload_size = 0;
        return MHD_YES;
    }
    srv.hits++;
    snprintf(srv.method, sizeof srv.method, "%s", method);
    snprintf(srv.path, sizeof srv.path, "%s", url);
    copy_arg(c, MHD_GET_ARGUMENT_KIND, "token", srv.token, sizeof srv.token);
    copy_arg(c, MHD_GET_ARGUMENT_KIND, "node_id", srv.node_id, sizeof srv.node_id);
    copy_arg(c, MHD_GET_ARGUMENT_KIND, "node_type", srv.node_type, sizeof srv.node_type);
    copy_arg(c, MHD_HEADER_KIND, "If-None-Match", srv.inm, sizeof srv.inm);
    memcpy(srv.posted, pb->data, pb->len);
    srv.posted[pb->len] = '\0';
    srv.posted_len = pb->len;
    if (srv.delay_ms > 0)
        usleep((useconds_t)srv.delay_ms * 1000);
    size_t len = strlen(srv.body);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, srv.body,
                                                             MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", srv.ctype);
    if (srv.etag[0] != '\0')
        MHD_add_response_header(r, "ETag", srv.etag);
    enum MHD_Result ret = MHD_queue_response(c, srv.status, r);
    MHD_destroy_response(r);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

static void answer(unsigned status, const char *ctype, const char *etag, const char *body)
{
    srv.status = status;
    snprintf(srv.ctype, sizeof srv.ctype, "%s", ctype);
    snprintf(srv.etag, sizeof srv.etag, "%s", etag != NULL ? etag : "");
    snprintf(srv.body, sizeof srv.body, "%s", body);
}

static void answer_file(const char *etag, const char *fixture)
{
    char p[PATH_MAX];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(p, sizeof p, "%s/tests/unit/fixtures/panel/%s", top != NULL ? top : TOP_SRCDIR,
             fixture);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    size_t n = fread(srv.body, 1, sizeof srv.body - 1, f);
    fclose(f);
    srv.body[n] = '\0';
    srv.status = 200;
    snprintf(srv.ctype, sizeof srv.ctype, "application/json");
    snprintf(srv.etag, sizeof srv.etag, "%s", etag != NULL ? etag : "");
}

/* ---------------------------------------------------------------------------------------- */
/* client side                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct fixture {
    uv_loop_t loop;
    pn_client *c;
} fixture;

typedef struct got {
    int calls, rc;
    pn_node node;
    pn_users users;
    pn_alive_count alive[8];
    size_t n_alive;
    char err[512];
} got;

static int setup(void **state)
{
    memset(&srv, 0, sizeof srv);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    srv.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD,
                             0, NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, &sin,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    assert_non_null(srv.d);
    srv.port = MHD_get_daemon_info(srv.d, MHD_DAEMON_INFO_BIND_PORT)->port;
    fixture *f = calloc(1, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", srv.port);
    pn_uniproxy_options o = {.loop = &f->loop, .url = url, .token = "s3cret &=?+",
                             .node_id = "12", .node_type = "shadowsocks", .timeout_ms = 2000};
    sv_error err = {0};
    assert_int_equal(pn_uniproxy_new(&o, &f->c, &err), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    pn_client_free(f->c);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    MHD_stop_daemon(srv.d);
    return 0;
}

static void on_node(pn_client *c, int rc, pn_node *node, const sv_error *err, void *arg)
{
    (void)c;
    got *g = arg;
    g->calls++;
    g->rc = rc;
    if (rc == PN_OK) {
        g->node = *node;
        memset(node, 0, sizeof *node);
    }
    if (rc < 0)
        snprintf(g->err, sizeof g->err, "%s", err->msg);
}

static void on_users(pn_client *c, int rc, pn_users *users, const sv_error *err, void *arg)
{
    (void)c;
    got *g = arg;
    g->calls++;
    g->rc = rc;
    if (rc == PN_OK) {
        g->users = *users;
        memset(users, 0, sizeof *users);
    }
    if (rc < 0)
        snprintf(g->err, sizeof g->err, "%s", err->msg);
}

static void on_report(pn_client *c, int rc, const sv_error *err, void *arg)
{
    (void)c;
    got *g = arg;
    g->calls++;
    g->rc = rc;
    if (rc < 0)
        snprintf(g->err, sizeof g->err, "%s", err->msg);
}

static void on_alivelist(pn_client *c, int rc, const pn_alive_count *items, size_t n,
                         const sv_error *err, void *arg)
{
    (void)c;
    got *g = arg;
    g->calls++;
    g->rc = rc;
    for (size_t i = 0; i < n && i < 8; i++)
        g->alive[i] = items[i];
    g->n_alive = n;
    if (rc < 0)
        snprintf(g->err, sizeof g->err, "%s", err->msg);
}

static void fetch_node(fixture *f, got *g)
{
    memset(g, 0, sizeof *g);
    assert_int_equal(pn_fetch_node(f->c, on_node, g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g->calls, 1);
}

static void fetch_users(fixture *f, got *g)
{
    memset(g, 0, sizeof *g);
    assert_int_equal(pn_fetch_users(f->c, on_users, g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g->calls, 1);
}

static void push(fixture *f, const sv_usage *items, size_t n, got *g)
{
    memset(g, 0, sizeof *g);
    assert_int_equal(f->c->ops->report_usage(f->c, items, n, on_report, g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g->calls, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* tests                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static void uniproxy__config__sends_query_and_parses(void **state)
{
    fixture *f = *state;
    got g;
    answer_file("\"e1\"", "v2board-config-shadowsocks.json");
    fetch_node(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_true(g.node.server_port > 0);
    assert_string_equal(srv.method, "GET");
    assert_string_equal(srv.path, "/api/v1/server/UniProxy/config");
    assert_string_equal(srv.token, "s3cret &=?+"); /* escaped on the wire, decoded here */
    assert_string_equal(srv.node_id, "12");
    assert_string_equal(srv.node_type, "shadowsocks");
    assert_string_equal(srv.inm, "(none)");
    size_t len = 0;
    const char *etag = NULL;
    const char *body = pn_last_body(f->c, PN_BODY_CONFIG, &len, &etag);
    assert_non_null(body);
    assert_int_equal(len, strlen(srv.body));
    assert_string_equal(etag, "\"e1\"");
    pn_node_free(&g.node);
}

static void uniproxy__etag__echoed_verbatim_and_304_is_not_modified(void **state)
{
    fixture *f = *state;
    got g;
    answer_file("W/\"Ab 1\"", "v2board-user-basic.json");
    fetch_users(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_true(g.users.n > 0);
    pn_users_free(&g.users);
    /* issue 13: the stored body is dropped, its ETag kept */
    size_t len = 1;
    const char *etag = NULL;
    assert_non_null(pn_last_body(f->c, PN_BODY_USERS, &len, &etag));
    pn_forget_body(f->c, PN_BODY_USERS);
    assert_null(pn_last_body(f->c, PN_BODY_USERS, &len, &etag));
    assert_int_equal(len, 0);
    assert_string_equal(etag, "W/\"Ab 1\"");
    answer(304, "text/plain", NULL, "");
    fetch_users(f, &g);
    assert_int_equal(g.rc, PN_NOT_MODIFIED);
    assert_string_equal(srv.inm, "W/\"Ab 1\"");
    assert_string_equal(srv.path, "/api/v1/server/UniProxy/user");
}

static void uniproxy__seeded_etag__is_sent(void **state)
{
    fixture *f = *state;
    got g;
    assert_int_equal(pn_set_etag(f->c, PN_BODY_CONFIG, "\"stored\""), 0);
    answer(304, "text/plain", NULL, "");
    fetch_node(f, &g);
    assert_int_equal(g.rc, PN_NOT_MODIFIED);
    assert_string_equal(srv.inm, "\"stored\"");
}

static void uniproxy__empty_list__is_ok_not_an_error(void **state)
{
    fixture *f = *state;
    got g;
    answer(200, "application/json", "\"x\"", "{\"users\":[]}");
    fetch_users(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_int_equal(g.users.n, 0);
}

static void uniproxy__html_200__is_an_error_and_keeps_the_etag(void **state)
{
    fixture *f = *state;
    got g;
    answer(200, "application/json", "\"good\"", "{\"users\":[]}");
    fetch_users(f, &g);
    answer(200, "text/html", "\"bad\"", "<html><body>Checking your browser</body></html>");
    fetch_users(f, &g);
    assert_true(g.rc < 0);
    assert_non_null(strstr(g.err, "panel user: HTTP 200 body is not JSON (text/html)"));
    const char *etag = NULL;
    pn_last_body(f->c, PN_BODY_USERS, NULL, &etag);
    assert_string_equal(etag, "\"good\"");
    answer(200, "application/json", NULL, "{\"users\":{}}"); /* JSON, wrong shape */
    fetch_users(f, &g);
    assert_true(g.rc < 0);
}

static void uniproxy__error_envelopes__give_the_panel_message(void **state)
{
    fixture *f = *state;
    got g;
    answer(500, "application/json", NULL, "{\"message\":\"token is error\"}");
    fetch_node(f, &g);
    assert_int_equal(g.rc, -EPROTO);
    assert_string_equal(g.err, "panel config: HTTP 500: token is error");
    answer(400, "application/json", NULL,
           "{\"status\":\"fail\",\"message\":\"Server does not exist\",\"data\":null,"
           "\"error\":null}");
    fetch_node(f, &g);
    assert_string_equal(g.err, "panel config: HTTP 400: Server does not exist");
    answer(422, "application/json", NULL,
           "{\"message\":\"Invalid token\",\"errors\":{\"token\":[\"Invalid token\"]}}");
    fetch_users(f, &g);
    assert_string_equal(g.err, "panel user: HTTP 422: Invalid token");
    answer(502, "text/html", NULL, "<html>Bad Gateway</html>");
    fetch_users(f, &g);
    assert_string_equal(g.err, "panel user: HTTP 502: <html>Bad Gateway</html>");
}

static void uniproxy__timeout__is_an_error(void **state)
{
    fixture *f = *state;
    got g;
    answer(200, "application/json", NULL, "{\"users\":[]}");
    srv.delay_ms = 2600; /* over the client's 2 s */
    fetch_users(f, &g);
    assert_int_equal(g.rc, -ETIMEDOUT);
    assert_non_null(strstr(g.err, "panel user: curl:"));
}

static void uniproxy__field_variants__are_accepted(void **state)
{
    fixture *f = *state;
    got g;
    answer_file(NULL, "v2board-config-edge-string-intervals.json");
    fetch_node(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_true(g.node.pull_interval > 0);
    pn_node_free(&g.node);
    answer_file(NULL, "v2board-user-nulls-omitted.json");
    fetch_users(f, &g);
    assert_int_equal(g.rc, PN_OK);
    pn_users_free(&g.users);
    /* keys a panel adds are not errors on the HTTP path (non-strict parsing) */
    answer(200, "application/json", NULL,
           "{\"users\":[{\"id\":1,\"uuid\":\"u\",\"speed_limit\":null,\"new_key\":1}],"
           "\"extra\":true}");
    fetch_users(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_int_equal(g.users.n, 1);
    assert_int_equal(g.users.users[0].speed_limit, 0);
    pn_users_free(&g.users);
}

/* Issue 15: what a panel says about the transport is recorded (not dropped as an unknown key)
 * so that lowering refuses what katana does not serve; Xboard's nulls record nothing. */
static void uniproxy__transport_settings__are_recorded(void **state)
{
    fixture *f = *state;
    got g;
    answer_file(NULL, "v2board-config-shadowsocks.json"); /* network, plugin ... all null */
    fetch_node(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_null(g.node.network);
    assert_null(g.node.plugin);
    assert_int_equal(g.node.set, 0);
    pn_node_free(&g.node);
    answer(200, "application/json", NULL,
           "{\"protocol\":\"shadowsocks\",\"server_port\":443,\"cipher\":\"aes-128-gcm\","
           "\"network\":\"grpc\",\"networkSettings\":{\"serviceName\":\"x\"},"
           "\"network_settings\":{\"serviceName\":\"x\"},\"tls\":1,"
           "\"multiplex\":{\"enabled\":true},\"plugin\":\"obfs\",\"obfs\":\"http\","
           "\"custom_outbounds\":[{}],\"custom_routes\":{\"a\":1}}");
    fetch_node(f, &g);
    assert_int_equal(g.rc, PN_OK);
    assert_string_equal(g.node.network, "grpc");
    assert_string_equal(g.node.plugin, "obfs");
    assert_string_equal(g.node.obfs, "http");
    assert_int_equal(g.node.set, PN_SET_NETWORK_SETTINGS | PN_SET_NETWORK_SETTINGS_ALT |
                                     PN_SET_TLS | PN_SET_MULTIPLEX | PN_SET_CUSTOM_OUTBOUNDS |
                                     PN_SET_CUSTOM_ROUTES);
    pn_node copy;
    assert_int_equal(pn_node_clone(&copy, &g.node), 0);
    assert_true(pn_node_equal(&copy, &g.node));
    pn_node_free(&copy);
    pn_node_free(&g.node);
    answer(200, "application/json", NULL, "{\"server_port\":1,\"network\":7}");
    fetch_node(f, &g);
    assert_true(g.rc < 0);
    assert_non_null(strstr(g.err, "network: expected a string"));
}

static void uniproxy__push__body_and_acks(void **state)
{
    fixture *f = *state;
    got g;
    sv_usage t[] = {{1, 10, 20}, {5000000000ull, 4294967296000ull, 1}};
    answer(200, "application/json", NULL,
           "{\"status\":\"success\",\"message\":\"\\u64cd\\u4f5c\\u6210\\u529f\",\"data\":true,"
           "\"error\":null}");
    push(f, t, 2, &g);
    assert_int_equal(g.rc, 0);
    assert_string_equal(srv.method, "POST");
    assert_string_equal(srv.path, "/api/v1/server/UniProxy/push");
    assert_string_equal(srv.token, "s3cret &=?+");
    json_t *j = json_loads(srv.posted, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_object_size(j), 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "1"), 1)), 20);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "5000000000"), 0)),
                     4294967296000ll);
    json_decref(j);
    answer(200, "application/json", NULL, "{\"data\":true}"); /* v1.7 shape */
    push(f, t, 1, &g);
    assert_int_equal(g.rc, 0);
    answer(200, "text/html", NULL, "<html>ok</html>");
    push(f, t, 1, &g);
    assert_int_equal(g.rc, -EPROTO);
    answer(200, "application/json", NULL, "{\"status\":\"fail\",\"message\":\"nope\"}");
    push(f, t, 1, &g);
    assert_int_equal(g.rc, -EPROTO);
    assert_non_null(strstr(g.err, "nope"));
    answer(500, "application/json", NULL, "{\"message\":\"Uh-oh\"}");
    push(f, t, 1, &g);
    assert_string_equal(g.err, "panel push: HTTP 500: Uh-oh");
}

static void uniproxy__alive_status_alivelist(void **state)
{
    fixture *f = *state;
    got g = {0};
    const char *ips[] = {"1.2.3.4", "::1"};
    pn_alive a = {.user = 7, .ips = ips, .n_ips = 2};
    answer(200, "application/json", NULL, "{\"data\":true}");
    assert_int_equal(f->c->ops->report_alive(f->c, &a, 1, on_report, &g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g.rc, 0);
    assert_string_equal(srv.path, "/api/v1/server/UniProxy/alive");
    assert_string_equal(srv.posted, "{\"7\":[\"1.2.3.4\",\"::1\"]}");
    memset(&g, 0, sizeof g);
    pn_status st = {.cpu = 12.5, .mem_total = 100, .mem_used = 50, .swap_total = 0,
                    .swap_used = 0, .disk_total = 1000, .disk_used = 10};
    answer(200, "application/json", NULL, "{\"data\":true,\"code\":0,\"message\":\"success\"}");
    assert_int_equal(f->c->ops->report_status(f->c, &st, on_report, &g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g.rc, 0);
    json_t *j = json_loads(srv.posted, 0, NULL);
    assert_non_null(json_object_get(j, "cpu"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "disk"), "total")),
                     1000);
    json_decref(j);
    memset(&g, 0, sizeof g);
    answer(200, "application/json", NULL, "{\"alive\":{\"7\":2,\"9\":1}}");
    assert_int_equal(f->c->ops->fetch_alivelist(f->c, on_alivelist, &g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.n_alive, 2);
    assert_int_equal(g.alive[0].user + g.alive[1].user, 16);
    memset(&g, 0, sizeof g);
    answer(200, "application/json", NULL, "{\"alive\":[]}");
    assert_int_equal(f->c->ops->fetch_alivelist(f->c, on_alivelist, &g), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.n_alive, 0);
}

static void uniproxy__check_ack__without_a_server(void **state)
{
    (void)state;
    sv_error err = {0};
    assert_int_equal(pn_uniproxy_check_ack(200, "{\"data\":true}", 13, &err), 0);
    assert_int_equal(pn_uniproxy_check_ack(204, "", 0, &err), -EPROTO);
    assert_int_equal(pn_uniproxy_check_ack(200, "{}", 2, &err), -EPROTO);
    assert_int_equal(pn_uniproxy_check_ack(200, "{\"data\":false}", 14, &err), -EPROTO);
    assert_int_equal(pn_uniproxy_check_ack(200, "[true]", 6, &err), -EPROTO);
    assert_int_equal(pn_uniproxy_check_ack(200, "{\"data\":true", 12, &err), -EPROTO);
}

static void uniproxy__bad_options__are_refused(void **state)
{
    fixture *f = *state;
    pn_client *c = NULL;
    sv_error err = {0};
    pn_uniproxy_options o = {.loop = &f->loop, .url = "ftp://x", .token = "t", .node_id = "1",
                             .node_type = "shadowsocks"};
    assert_int_equal(pn_uniproxy_new(&o, &c, &err), -EINVAL);
    o.url = "https://x";
    o.token = "";
    assert_int_equal(pn_uniproxy_new(&o, &c, &err), -EINVAL);
    assert_string_equal(err.msg, "uniproxy panel: token is required");
    assert_null(c);
}

/* @p body through json_loadb + pn_users_parse (the reference) with @p flags. */
static int reference_users(const char *body, unsigned flags, pn_users *out)
{
    sv_error err = {0};
    json_t *j = json_loadb(body, strlen(body), JSON_REJECT_DUPLICATES, NULL);
    int rc = j != NULL ? pn_users_parse(j, flags, out, &err) : -EINVAL;
    json_decref(j);
    return rc;
}

/* Issue 13: the plain shape of a users body is read without a JSON tree, into the list the
 * reference parser gives in either mode. */
static void users_scan__plain_bodies__same_list_as_the_json_parser(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"users\":[]}",
        " \n{ \"users\" : [ ] }\r\n\t",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"9e8d-x\",\"speed_limit\":null,\"device_limit\":null},"
        "{\"device_limit\":4294967295,\"uuid\":\"b b\",\"id\":9223372036854775807,"
        "\"speed_limit\":147573952589676}]}",
        "{\"users\": [ {\"id\": 3, \"uuid\": \"~!@#$%^&*()\", \"speed_limit\": 0,\n"
        "  \"device_limit\": 3} ,{\"uuid\":\"z\",\"id\":2}\n]}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        pn_users scanned, ref;
        assert_int_equal(pn_users_scan(bodies[i], strlen(bodies[i]), &scanned), 0);
        for (unsigned flags = 0; flags <= PN_PARSE_STRICT; flags += PN_PARSE_STRICT) {
            assert_int_equal(reference_users(bodies[i], flags, &ref), 0);
            assert_true(pn_users_equal(&scanned, &ref));
            pn_users_free(&ref);
        }
        pn_users_free(&scanned);
    }
}

/* Anything but the plain shape is left to the reference parser (which refuses it or reads it):
 * escapes, other keys, duplicates, refused or unusual values, trailing bytes. */
static void users_scan__other_bodies__left_to_the_json_parser(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "", "[]", "{}", "{\"users\":null}", "{\"users\":{}}", "{\"users\":[]} x",
        "{\"users\":[],\"extra\":1}", "{\"users\":[1]}", "{\"users\":[{}]}",
        "{\"users\":[{\"id\":1}]}", "{\"users\":[{\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\"},]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\\u0062\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"\xc3\xa9\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\",\"email\":\"x\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\",\"id\":2}]}",
        "{\"users\":[{\"id\":-1,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":0,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":1.0,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":1e3,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":01,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":\"1\",\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":null,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":9223372036854775808,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":12345678901234567890,\"uuid\":\"a\"}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\",\"device_limit\":4294967296}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\",\"speed_limit\":147573952589677}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\",\"speed_limit\":nul}]}",
        "{\"users\":[{\"id\":1,\"uuid\":\"a\"}]",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        pn_users scanned;
        assert_int_equal(pn_users_scan(bodies[i], strlen(bodies[i]), &scanned), 1);
        assert_null(scanned.users);
        assert_int_equal(scanned.n, 0);
    }
    /* a NUL byte after a number, and a uuid one byte over PN_UUID_MAX */
    static const char nul[] = "{\"users\":[{\"id\":1\0,\"uuid\":\"a\"}]}";
    pn_users scanned;
    assert_int_equal(pn_users_scan(nul, sizeof nul - 1, &scanned), 1);
    char body[PN_UUID_MAX + 64];
    snprintf(body, sizeof body, "{\"users\":[{\"id\":1,\"uuid\":\"%0*d\"}]}", PN_UUID_MAX, 7);
    assert_int_equal(pn_users_scan(body, strlen(body), &scanned), 0);
    assert_int_equal(strlen(scanned.users[0].uuid), PN_UUID_MAX);
    pn_users_free(&scanned);
    snprintf(body, sizeof body, "{\"users\":[{\"id\":1,\"uuid\":\"%0*d\"}]}", PN_UUID_MAX + 1, 7);
    assert_int_equal(pn_users_scan(body, strlen(body), &scanned), 1);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

/* Issue 33: pn_users_parse_text() refuses a list that never closes before building any user,
 * and what the tree's parser refuses with the same reasons (bounds included). */
static void users_text__refused_as_the_tree_is(void **state)
{
    (void)state;
    pn_users users;
    sv_error err = {0};
    const char *open = "{\"users\":[{\"id\":1,\"uuid\":\"x\"},{\"id\":2,\"uuid\":\"y\"},";
    assert_int_equal(pn_users_parse_text(open, strlen(open), 0, &users, &err), -EBADMSG);
    assert_string_equal(err.msg, "premature end of input at byte 50");
    const char *esc = "{\"users\":[{\"id\":1,\"uuid\":\"\\u0061\"},{\"id\":2}]}";
    assert_int_equal(pn_users_parse_text(esc, strlen(esc), 0, &users, &err), -EINVAL);
    assert_string_equal(err.msg, "users[1].uuid: missing");
    const char *dupkey = "{\"users\":[{\"id\":1,\"uuid\":\"a\\u0062\",\"id\":2}]}";
    assert_int_equal(pn_users_parse_text(dupkey, strlen(dupkey), 0, &users, &err), -EBADMSG);
    size_t n = PN_USERS_MAX + 1, len = 10 + 2 * n + 1;
    char *many = malloc(len);
    assert_non_null(many);
    memcpy(many, "{\"users\":[", 10);
    for (size_t i = 0; i < n; i++)
        memcpy(many + 10 + 2 * i, i + 1 < n ? "0," : "0]", 2);
    many[len - 1] = '}';
    assert_int_equal(pn_users_parse_text(many, len, 0, &users, &err), -EMSGSIZE);
    assert_string_equal(err.msg, "users: more than 1000000 users");
    free(many);
    const char *esc_ok = "{\"users\":[{\"id\":7,\"uuid\":\"\\u0061b\",\"speed_limit\":null}]}";
    assert_int_equal(pn_users_parse_text(esc_ok, strlen(esc_ok), PN_PARSE_STRICT, &users, &err),
                     0);
    assert_int_equal(users.n, 1);
    assert_int_equal(users.users[0].id, 7);
    assert_string_equal(users.users[0].uuid, "ab");
    pn_users_free(&users);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(uniproxy__config__sends_query_and_parses),
        T(uniproxy__etag__echoed_verbatim_and_304_is_not_modified),
        T(uniproxy__seeded_etag__is_sent),
        T(uniproxy__empty_list__is_ok_not_an_error),
        T(uniproxy__html_200__is_an_error_and_keeps_the_etag),
        T(uniproxy__error_envelopes__give_the_panel_message),
        T(uniproxy__timeout__is_an_error),
        T(uniproxy__field_variants__are_accepted),
        T(uniproxy__transport_settings__are_recorded),
        T(uniproxy__push__body_and_acks),
        T(uniproxy__alive_status_alivelist),
        cmocka_unit_test(uniproxy__check_ack__without_a_server),
        T(uniproxy__bad_options__are_refused),
        cmocka_unit_test(users_scan__plain_bodies__same_list_as_the_json_parser),
        cmocka_unit_test(users_scan__other_bodies__left_to_the_json_parser),
        cmocka_unit_test(users_text__refused_as_the_tree_is),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
