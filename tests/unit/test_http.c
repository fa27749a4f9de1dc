/*
 * Unit tests: the libcurl-on-libuv HTTP client (panel/http.c) against a real HTTP server on
 * loopback (libmicrohttpd in this process, its own thread): status and body, ETag and
 * If-None-Match verbatim, User-Agent, POST bodies, the body bound, timeouts, refused
 * connections, and freeing the client from inside a callback with a request in flight.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <microhttpd.h>
#include <uv.h>

#include "panel/http.h"

static struct {
    struct MHD_Daemon *d;
    uint16_t port;
    char ua[128];
    char inm[128];
    char ctype[128];
} srv;

typedef struct post_buf {
    char data[4096];
    size_t len;
} post_buf;

static void copy_header(struct MHD_Connection *c, const char *name, char *dst, size_t cap)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(dst, cap, "%s", v != NULL ? v : "");
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
                             size_t len, const char *etag)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
                                                             MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (etag != NULL)
        MHD_add_response_header(r, "ETag", etag);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    if (strcmp(method, "POST") == 0) {
        post_buf *pb = *con_cls;
        if (pb == NULL) {
            *con_cls = pb = calloc(1, sizeof *pb);
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
        copy_header(c, "Content-Type", srv.ctype, sizeof srv.ctype);
        return reply(c, 200, pb->data, pb->len, NULL);
    }
    copy_header(c, "User-Agent", srv.ua, sizeof srv.ua);
    copy_header(c, "If-None-Match", srv.inm, sizeof srv.inm);
    if (strcmp(url, "/json") == 0) {
        if (strcmp(srv.inm, "\"abc 1\"") == 0)
            return reply(c, 304, "", 0, "\"abc 1\"");
        return reply(c, 200, "{\"ok\":true}", 11, "\"abc 1\"");
    }
    if (strcmp(url, "/big") == 0) {
        size_t n = 2u << 20;
        char *b = malloc(n);
        memset(b, 'x', n);
        enum MHD_Result ret = reply(c, 200, b, n, NULL);
        free(b);
        return ret;
    }
    if (strcmp(url, "/slow") == 0) {
        usleep(1500 * 1000);
        return reply(c, 200, "{}", 2, NULL);
    }
    return reply(c, 404, "{\"message\":\"not found\"}", 23, NULL);
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

static int setup(void **state)
{
    (void)state;
    memset(&srv, 0, sizeof srv);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    srv.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD,
                             0, NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, &sin,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    assert_non_null(srv.d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv.d, MHD_DAEMON_INFO_BIND_PORT);
    srv.port = info->port;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    MHD_stop_daemon(srv.d);
    return 0;
}

typedef struct got {
    int calls;
    int rc;
    long status;
    char body[256];
    size_t len;
    char etag[128];
    char errmsg[512];
    pn_http *free_me; /* freed from inside the callback when set */
} got;

static void on_done(int rc, const pn_http_response *resp, const sv_error *err, void *arg)
{
    got *g = arg;
    g->calls++;
    g->rc = rc;
    if (rc == 0) {
        g->status = resp->status;
        g->len = resp->len;
        snprintf(g->body, sizeof g->body, "%s", resp->body);
        snprintf(g->etag, sizeof g->etag, "%s", resp->etag != NULL ? resp->etag : "");
    } else {
        snprintf(g->errmsg, sizeof g->errmsg, "%s", err->msg);
    }
    if (g->free_me != NULL)
        pn_http_free(g->free_me);
}

static void url(char *buf, size_t cap, const char *path)
{
    snprintf(buf, cap, "http://127.0.0.1:%u%s", srv.port, path);
}

/* Run one request to completion on a fresh loop, then free everything. */
static void run_one(const pn_http_request *req, got *g)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    pn_http *h = NULL;
    assert_int_equal(pn_http_new(&loop, &h), 0);
    sv_error err = {0};
    assert_int_equal(pn_http_start(h, req, on_done, g, NULL, &err), 0);
    assert_int_equal(pn_http_pending(h), 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g->calls, 1);
    assert_int_equal(pn_http_pending(h), 0);
    pn_http_free(h);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0); /* every handle closed */
}

static void http__get__gives_status_body_etag_and_sends_user_agent(void **state)
{
    (void)state;
    char u[128];
    url(u, sizeof u, "/json");
    got g = {0};
    run_one(&(pn_http_request){.method = "GET", .url = u}, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.status, 200);
    assert_string_equal(g.body, "{\"ok\":true}");
    assert_int_equal(g.len, 11);
    assert_string_equal(g.etag, "\"abc 1\"");
    assert_string_equal(srv.ua, "katana/" PACKAGE_VERSION);
    assert_string_equal(srv.inm, "");
}

static void http__if_none_match__is_sent_verbatim_and_304_has_no_body(void **state)
{
    (void)state;
    char u[128];
    url(u, sizeof u, "/json");
    got g = {0};
    run_one(&(pn_http_request){.method = "GET", .url = u, .if_none_match = "\"abc 1\""}, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.status, 304);
    assert_int_equal(g.len, 0);
    assert_string_equal(srv.inm, "\"abc 1\"");
}

static void http__post__sends_json_body(void **state)
{
    (void)state;
    char u[128];
    url(u, sizeof u, "/push");
    const char *body = "{\"1\":[10,20]}";
    got g = {0};
    run_one(&(pn_http_request){.method = "POST", .url = u, .body = body,
                               .body_len = strlen(body)}, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.status, 200);
    assert_string_equal(g.body, body);
    assert_string_equal(srv.ctype, "application/json");
}

static void http__error_status__is_an_answer(void **state)
{
    (void)state;
    char u[128];
    url(u, sizeof u, "/missing");
    got g = {0};
    run_one(&(pn_http_request){.method = "GET", .url = u}, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.status, 404);
}

static void http__body_over_bound__is_an_error(void **state)
{
    (void)state;
    char u[128];
    url(u, sizeof u, "/big");
    got g = {0};
    run_one(&(pn_http_request){.method = "GET", .url = u, .max_body = 1u << 20}, &g);
    assert_int_equal(g.rc, -EMSGSIZE);
    assert_non_null(strstr(g.errmsg, "larger than 1048576 bytes"));
}

static void http__slow_answer__times_out(void **state)
{
    (void)state;
    char u[128];
    url(u, sizeof u, "/slow");
    got g = {0};
    run_one(&(pn_http_request){.method = "GET", .url = u, .timeout_ms = 200}, &g);
    assert_int_equal(g.rc, -ETIMEDOUT);
    assert_non_null(strstr(g.errmsg, "curl:"));
}

static void http__closed_port__is_refused(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sin;
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    close(fd); /* nobody listens there now */
    char u[128];
    snprintf(u, sizeof u, "http://127.0.0.1:%u/json", ntohs(sin.sin_port));
    got g = {0};
    run_one(&(pn_http_request){.method = "GET", .url = u}, &g);
    assert_int_equal(g.rc, -ECONNREFUSED);
}

static void http__bad_method_and_scheme__are_refused(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    pn_http *h = NULL;
    assert_int_equal(pn_http_new(&loop, &h), 0);
    sv_error err = {0};
    got g = {0};
    assert_int_equal(pn_http_start(h, &(pn_http_request){.method = "PUT", .url = "http://x/"},
                                   on_done, &g, NULL, &err), -EINVAL);
    assert_int_equal(pn_http_start(h, &(pn_http_request){.method = "GET",
                                   .url = "file:///etc/passwd"}, on_done, &g, NULL, &err), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.calls, 1);
    assert_true(g.rc < 0); /* scheme not allowed: no local file is ever read */
    pn_http_free(h);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void http__free_inside_callback__drops_the_other_request(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    pn_http *h = NULL;
    assert_int_equal(pn_http_new(&loop, &h), 0);
    char fast[128], slow[128];
    url(fast, sizeof fast, "/json");
    url(slow, sizeof slow, "/slow");
    got gf = {.free_me = h}, gs = {0};
    sv_error err = {0};
    assert_int_equal(pn_http_start(h, &(pn_http_request){.method = "GET", .url = slow}, on_done,
                                   &gs, NULL, &err), 0);
    assert_int_equal(pn_http_start(h, &(pn_http_request){.method = "GET", .url = fast}, on_done,
                                   &gf, NULL, &err), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(gf.calls, 1);
    assert_int_equal(gs.calls, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void http__cancel__runs_no_callback(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    pn_http *h = NULL;
    assert_int_equal(pn_http_new(&loop, &h), 0);
    char slow[128];
    url(slow, sizeof slow, "/slow");
    got g = {0};
    pn_http_req *r = NULL;
    sv_error err = {0};
    assert_int_equal(pn_http_start(h, &(pn_http_request){.method = "GET", .url = slow}, on_done,
                                   &g, &r, &err), 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    pn_http_cancel(r);
    assert_int_equal(pn_http_pending(h), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.calls, 0);
    pn_http_free(h);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(http__get__gives_status_body_etag_and_sends_user_agent),
        cmocka_unit_test(http__if_none_match__is_sent_verbatim_and_304_has_no_body),
        cmocka_unit_test(http__post__sends_json_body),
        cmocka_unit_test(http__error_status__is_an_answer),
        cmocka_unit_test(http__body_over_bound__is_an_error),
        cmocka_unit_test(http__slow_answer__times_out),
        cmocka_unit_test(http__closed_port__is_refused),
        cmocka_unit_test(http__bad_method_and_scheme__are_refused),
        cmocka_unit_test(http__free_inside_callback__drops_the_other_request),
        cmocka_unit_test(http__cancel__runs_no_callback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
