/*
 * libcurl multi on libuv (panel/http.h). Each curl socket gets a uv_poll_t (curl_multi_assign
 * keeps the pair); curl's one timer is a uv_timer_t. Completed transfers are collected after
 * every curl_multi_socket_action() and their callbacks run outside any curl callback.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "panel/http.h"
#include "supervisor/util/textbuf.h"

typedef struct poll_ctx {
    uv_poll_t poll;
    pn_http *h;
    curl_socket_t fd;
    struct poll_ctx *next, *prev;
} poll_ctx;

struct pn_http_req {
    pn_http *h;
    CURL *easy;
    struct curl_slist *headers;
    pn_http_cb cb;
    void *arg;
    char *body;
    size_t len, cap, max;
    bool too_big;
    char *etag, *content_type;
    char errbuf[CURL_ERROR_SIZE];
    pn_http_req *next, *prev;
};

struct pn_http {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    poll_ctx *polls;
    pn_http_req *reqs;
    size_t n_reqs;
    int depth;     /* > 0 while callbacks run */
    bool dying;    /* pn_http_free() was called */
    int closing;   /* uv handles whose close callback is due */
};

static bool curl_ready;

/* ---------------------------------------------------------------------------------------- */
/* teardown                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void closed(pn_http *h)
{
    if (--h->closing == 0 && h->multi == NULL)
        free(h);
}

static void poll_closed(uv_handle_t *handle)
{
    poll_ctx *p = handle->data;
    pn_http *h = p->h;
    free(p);
    closed(h);
}

static void timer_closed(uv_handle_t *handle)
{
    closed(handle->data);
}

static void req_free(pn_http_req *r)
{
    pn_http *h = r->h;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        h->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    h->n_reqs--;
    curl_multi_remove_handle(h->multi, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->body);
    free(r->etag);
    free(r->content_type);
    free(r);
}

static void poll_close(poll_ctx *p)
{
    pn_http *h = p->h;
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        h->polls = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    uv_poll_stop(&p->poll);
    h->closing++;
    uv_close((uv_handle_t *)&p->poll, poll_closed);
}

static void teardown(pn_http *h)
{
    while (h->reqs != NULL)
        req_free(h->reqs);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, NULL);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, NULL);
    curl_multi_cleanup(h->multi);
    h->multi = NULL;
    while (h->polls != NULL)
        poll_close(h->polls);
    h->closing++;
    uv_close((uv_handle_t *)&h->timer, timer_closed);
}

void pn_http_free(pn_http *h)
{
    if (h == NULL || h->dying)
        return;
    h->dying = true;
    while (h->reqs != NULL)
        req_free(h->reqs); /* no callbacks */
    if (h->depth == 0)
        teardown(h);
}

/* ---------------------------------------------------------------------------------------- */
/* curl callbacks                                                                             */
/* ---------------------------------------------------------------------------------------- */

static int map_curl(CURLcode c)
{
    switch (c) {
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_FILESIZE_EXCEEDED:
        return -EMSGSIZE;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        return -ECONNRESET;
    default:
        return -EIO;
    }
}

static void finish(pn_http_req *r, CURLcode code)
{
    pn_http *h = r->h;
    pn_http_cb cb = r->cb;
    void *arg = r->arg;
    sv_error err = {0};
    int rc = 0;
    pn_http_response resp = {.body = r->body != NULL ? r->body : "", .len = r->len,
                             .etag = r->etag, .content_type = r->content_type, .req = r};
    if (r->too_big || code == CURLE_FILESIZE_EXCEEDED) {
        rc = sv_error_set(&err, -EMSGSIZE, "response body larger than %zu bytes", r->max);
    } else if (code != CURLE_OK) {
        rc = sv_error_set(&err, map_curl(code), "curl: %s%s%s", curl_easy_strerror(code),
                          r->errbuf[0] != '\0' ? ": " : "", r->errbuf);
    } else {
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &resp.status);
    }
    cb(rc, rc == 0 ? &resp : NULL, rc != 0 ? &err : NULL, arg);
    if (!h->dying) /* pn_http_free() from the callback already freed it */
        req_free(r);
}

static void check_done(pn_http *h)
{
    CURLMsg *msg;
    int left;
    h->depth++;
    while (!h->dying && (msg = curl_multi_info_read(h->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        pn_http_req *r = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        CURLcode code = msg->data.result;
        finish(r, code); /* msg is invalid after this */
    }
    if (--h->depth == 0 && h->dying)
        teardown(h);
}

static void on_poll(uv_poll_t *handle, int status, int events)
{
    poll_ctx *p = handle->data;
    pn_http *h = p->h;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running = 0;
    curl_multi_socket_action(h->multi, p->fd, flags, &running);
    check_done(h);
}

static void on_timer(uv_timer_t *t)
{
    pn_http *h = t->data;
    int running = 0;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(h);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    pn_http *h = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&h->timer);
    else
        uv_timer_start(&h->timer, on_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *sockp)
{
    (void)easy;
    pn_http *h = userp;
    poll_ctx *p = sockp;
    if (what == CURL_POLL_REMOVE) {
        if (p != NULL) {
            curl_multi_assign(h->multi, fd, NULL);
            poll_close(p);
        }
        return 0;
    }
    if (p == NULL) {
        p = calloc(1, sizeof *p);
        if (p == NULL || uv_poll_init_socket(h->loop, &p->poll, fd) != 0) {
            free(p);
            return -1;
        }
        p->poll.data = p;
        p->h = h;
        p->fd = fd;
        p->next = h->polls;
        if (h->polls != NULL)
            h->polls->prev = p;
        h->polls = p;
        curl_multi_assign(h->multi, fd, p);
    }
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= UV_WRITABLE;
    uv_poll_start(&p->poll, events, on_poll);
    return 0;
}

/* The first buffer of a body: its announced length (then one allocation holds it all, none
 * copied by the doublings), within the bound; else 4 KiB. */
static size_t first_cap(pn_http_req *r)
{
    curl_off_t cl = -1;
    if (curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK ||
        cl <= 0 || (uint64_t)cl > r->max)
        return 4096;
    return (size_t)cl + 1 > 4096 ? (size_t)cl + 1 : 4096;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    pn_http_req *r = userdata;
    size_t n = size * nmemb;
    if (n > r->max - r->len) {
        r->too_big = true;
        return 0; /* CURLE_WRITE_ERROR ends the transfer */
    }
    if (sv_textbuf_append(&r->body, &r->len, &r->cap, first_cap(r), ptr, n) != 0)
        return 0;
    return n;
}

/* Keep a header value (trimmed) if its name matches. */
static void header_value(const char *line, size_t n, const char *name, char **dst)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return;
    const char *v = line + k + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    char *copy = strndup(v, (size_t)(end - v));
    if (copy != NULL) {
        free(*dst);
        *dst = copy;
    }
}

static size_t on_header(char *line, size_t size, size_t nitems, void *userdata)
{
    pn_http_req *r = userdata;
    size_t n = size * nitems;
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) { /* a new response (after 100, redirect) */
        free(r->etag);
        free(r->content_type);
        r->etag = r->content_type = NULL;
    }
    header_value(line, n, "ETag", &r->etag);
    header_value(line, n, "Content-Type", &r->content_type);
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* API                                                                                        */
/* ---------------------------------------------------------------------------------------- */

int pn_http_new(uv_loop_t *loop, pn_http **out)
{
    *out = NULL;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
            return -EIO;
        curl_ready = true;
    }
    pn_http *h = calloc(1, sizeof *h);
    if (h == NULL)
        return -ENOMEM;
    h->loop = loop;
    h->multi = curl_multi_init();
    if (h->multi == NULL) {
        free(h);
        return -EIO;
    }
    uv_timer_init(loop, &h->timer);
    h->timer.data = h;
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    *out = h;
    return 0;
}

size_t pn_http_pending(const pn_http *h)
{
    return h->n_reqs;
}

static int set_options(pn_http_req *r, const pn_http_request *req)
{
    CURL *e = r->easy;
    long timeout = req->timeout_ms > 0 ? req->timeout_ms : PN_HTTP_TIMEOUT_MS;
    CURLcode c = CURLE_OK;
#define SET(opt, val) \
    if (c == CURLE_OK) \
        c = curl_easy_setopt(e, opt, val)
    SET(CURLOPT_URL, req->url);
    SET(CURLOPT_PRIVATE, (void *)r);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_SSL_VERIFYPEER, 1L);
    SET(CURLOPT_SSL_VERIFYHOST, 2L);
    SET(CURLOPT_TIMEOUT_MS, timeout);
    SET(CURLOPT_CONNECTTIMEOUT_MS, timeout);
    SET(CURLOPT_USERAGENT, "katana/" PACKAGE_VERSION);
    SET(CURLOPT_ACCEPT_ENCODING, "");
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->max);
    SET(CURLOPT_WRITEFUNCTION, on_data);
    SET(CURLOPT_WRITEDATA, (void *)r);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, (void *)r);
    SET(CURLOPT_ERRORBUFFER, r->errbuf);
    if (strcmp(req->method, "POST") == 0) {
        /* curl silently re-sends a request whose reused connection died before an answer: for
         * a push that is a second, hidden retry layer that bills twice (PANEL.md §4.1). A POST
         * gets its own connection, so a lost answer reaches the caller as an error. */
        SET(CURLOPT_FRESH_CONNECT, 1L);
        SET(CURLOPT_FORBID_REUSE, 1L);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        SET(CURLOPT_COPYPOSTFIELDS, req->body != NULL ? req->body : "");
    }
    SET(CURLOPT_HTTPHEADER, r->headers);
#undef SET
    return c == CURLE_OK ? 0 : -EIO;
}

static int add_headers(pn_http_req *r, const pn_http_request *req)
{
    char line[512];
    const char *fixed[] = {"Accept: application/json", "Expect:",
                           req->body != NULL ? "Content-Type: application/json" : NULL};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (fixed[i] == NULL)
            continue;
        struct curl_slist *l = curl_slist_append(r->headers, fixed[i]);
        if (l == NULL)
            return -ENOMEM;
        r->headers = l;
    }
    if (req->if_none_match != NULL) {
        if (snprintf(line, sizeof line, "If-None-Match: %s", req->if_none_match) >=
            (int)sizeof line)
            return -EINVAL;
        struct curl_slist *l = curl_slist_append(r->headers, line);
        if (l == NULL)
            return -ENOMEM;
        r->headers = l;
    }
    return 0;
}

int pn_http_start(pn_http *h, const pn_http_request *req, pn_http_cb cb, void *arg,
                  pn_http_req **out, sv_error *err)
{
    if (out != NULL)
        *out = NULL;
    if (h->dying)
        return sv_error_set(err, -ESHUTDOWN, "http client is closing");
    if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "POST") != 0)
        return sv_error_set(err, -EINVAL, "unsupported method %s", req->method);
    pn_http_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    r->h = h;
    r->cb = cb;
    r->arg = arg;
    r->max = req->max_body > 0 ? req->max_body : PN_HTTP_BODY_MAX;
    r->easy = curl_easy_init();
    int rc = r->easy != NULL ? add_headers(r, req) : -ENOMEM;
    if (rc == 0)
        rc = set_options(r, req);
    if (rc == 0 && curl_multi_add_handle(h->multi, r->easy) != CURLM_OK)
        rc = -EIO;
    if (rc != 0) {
        curl_easy_cleanup(r->easy);
        curl_slist_free_all(r->headers);
        free(r);
        return sv_error_set(err, rc, "http request could not start");
    }
    r->next = h->reqs;
    if (h->reqs != NULL)
        h->reqs->prev = r;
    h->reqs = r;
    h->n_reqs++;
    if (out != NULL)
        *out = r;
    return 0;
}

char *pn_http_take_body(const pn_http_response *resp)
{
    pn_http_req *r = resp->req;
    if (r == NULL || r->body == NULL || r->body != resp->body)
        return NULL;
    char *b = r->body;
    r->body = NULL; /* resp->body stays valid: the caller owns it now */
    r->len = r->cap = 0;
    return b;
}

void pn_http_cancel(pn_http_req *r)
{
    if (r != NULL)
        req_free(r);
}
