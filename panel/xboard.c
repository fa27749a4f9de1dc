/*
 * The Xboard API v2 client and its node channel (panel/xboard.h); the parsers of what the panel
 * sends are xboard_parse.c.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libwebsockets.h>

#include "panel/http.h"
#include "panel/jsonscan.h"
#include "panel/uniproxy.h"
#include "panel/xboard.h"
#include "supervisor/util/log.h"

#define MOD "pn.xboard"
#define RECONNECT_FIRST_MS 1000u   /* PROTOCOLS-2.md §6.6 */
#define RECONNECT_MAX_MS 60000u
#define RECONNECT_RESET_MS 120000u /* a connection up this long resets the backoff */
#define HANDSHAKE_FIRST_MS 5000u
#define HANDSHAKE_MAX_MS 300000u   /* also the re-handshake period when WS is off */
#define OUT_MAX (4u << 20)         /* bytes queued for the panel; more is dropped */

/* ---------------------------------------------------------------------------------------- */
/* the channel: libwebsockets on a thread of its own; messages cross over a uv_async_t       */
/* ---------------------------------------------------------------------------------------- */

enum { CH_MSG = 1, CH_DOWN, CH_TOO_BIG };

typedef struct ch_item {
    struct ch_item *next;
    int kind;
    size_t len;
    char data[]; /* CH_MSG: the message; CH_DOWN: the reason; outgoing: LWS_PRE + text */
} ch_item;

typedef struct xb_link xb_link;
typedef struct pn_xboard pn_xboard;

typedef struct xb_chan {
    xb_link *owner;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t lock;
    ch_item *in_head, *in_tail;   /* thread -> loop, under lock */
    ch_item *out_head, *out_tail; /* loop -> thread, under lock */
    size_t out_bytes;
    uv_async_t async;
    /* service thread only */
    struct lws_context *ctx;
    struct lws *wsi;
    lws_sorted_usec_list_t sul;
    char *url;              /* parsed in place by lws_parse_uri */
    const char *address;
    char *path;             /* "/" + path + query */
    int port;
    bool tls;
    char *rx;
    size_t rx_len, rx_cap;
    unsigned fails;
    uint64_t up_since_ms;
    unsigned seed;
} xb_chan;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void ch_queue(ch_item **head, ch_item **tail, ch_item *it)
{
    it->next = NULL;
    if (*tail != NULL)
        (*tail)->next = it;
    else
        *head = it;
    *tail = it;
}

/* Thread: hand one item to the control loop. */
static void ch_post(xb_chan *ch, int kind, const char *data, size_t len)
{
    ch_item *it = malloc(sizeof *it + len + 1);
    if (it == NULL)
        return; /* a lost message: the next REST pull repairs the state */
    it->kind = kind;
    it->len = len;
    memcpy(it->data, data, len);
    it->data[len] = '\0';
    pthread_mutex_lock(&ch->lock);
    ch_queue(&ch->in_head, &ch->in_tail, it);
    pthread_mutex_unlock(&ch->lock);
    uv_async_send(&ch->async);
}

static void ch_connect(lws_sorted_usec_list_t *sul);

/* Thread: the connection ended; try again after the backoff (PROTOCOLS-2.md §6.6). */
static void ch_retry(xb_chan *ch, const char *why)
{
    ch->wsi = NULL;
    ch->rx_len = 0;
    if (ch->up_since_ms != 0 && mono_ms() - ch->up_since_ms >= RECONNECT_RESET_MS)
        ch->fails = 0;
    ch->up_since_ms = 0;
    unsigned shift = ch->fails < 16 ? ch->fails : 16;
    uint64_t d = (uint64_t)RECONNECT_FIRST_MS << shift;
    if (d > RECONNECT_MAX_MS)
        d = RECONNECT_MAX_MS;
    d += (uint64_t)rand_r(&ch->seed) % (d / 5 + 1); /* up to 20 % jitter */
    ch->fails++;
    ch_post(ch, CH_DOWN, why, strlen(why));
    if (!atomic_load(&ch->stop))
        lws_sul_schedule(ch->ctx, 0, &ch->sul, ch_connect, (lws_usec_t)d * 1000);
}

static void ch_connect(lws_sorted_usec_list_t *sul)
{
    xb_chan *ch = lws_container_of(sul, xb_chan, sul);
    if (atomic_load(&ch->stop) || ch->wsi != NULL)
        return;
    /* a silent dead connection: WebSocket PING after 60 s without traffic, hang up after 150 s
     * (Xboard-Node sets no deadline, PROTOCOLS-2.md §6.6; the panel pings every 55 s) */
    static const lws_retry_bo_t idle = {.secs_since_valid_ping = 60,
                                        .secs_since_valid_hangup = 150};
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.retry_and_idle_policy = &idle;
    ci.context = ch->ctx;
    ci.address = ch->address;
    ci.port = ch->port;
    ci.path = ch->path;
    ci.host = ch->address;
    ci.origin = ch->address;
    ci.ssl_connection = ch->tls ? LCCSCF_USE_SSL : 0;
    ci.local_protocol_name = "katana-xboard";
    ci.pwsi = &ch->wsi;
    if (lws_client_connect_via_info(&ci) == NULL)
        ch_retry(ch, "cannot start the connection");
}

/* Thread: add a received piece; a whole message goes to the loop. -1 (close) over the bound. */
static int ch_receive(xb_chan *ch, struct lws *wsi, const char *in, size_t len)
{
    if (ch->rx_len + len > PN_XB_MSG_MAX) {
        ch_post(ch, CH_TOO_BIG, "", 0); /* a lost message: the loop pulls everything */
        ch->rx_len = 0;
        return -1; /* (lws_close_reason here makes lws 4.1.6 write out of bounds mid-frame) */
    }
    if (ch->rx_len + len > ch->rx_cap) {
        size_t cap = ch->rx_cap > 0 ? ch->rx_cap : 4096;
        while (cap < ch->rx_len + len)
            cap *= 2;
        char *p = realloc(ch->rx, cap);
        if (p == NULL) {
            ch->rx_len = 0;
            return -1;
        }
        ch->rx = p;
        ch->rx_cap = cap;
    }
    memcpy(ch->rx + ch->rx_len, in, len);
    ch->rx_len += len;
    if (lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0) {
        ch_post(ch, CH_MSG, ch->rx, ch->rx_len);
        ch->rx_len = 0;
        if (ch->rx_cap > 65536) { /* an idle channel keeps no large buffer */
            free(ch->rx);
            ch->rx = NULL;
            ch->rx_cap = 0;
        }
    }
    return 0;
}

/* Thread: write the first queued message. */
static int ch_write(xb_chan *ch, struct lws *wsi)
{
    pthread_mutex_lock(&ch->lock);
    ch_item *it = ch->out_head;
    if (it != NULL) {
        ch->out_head = it->next;
        if (ch->out_head == NULL)
            ch->out_tail = NULL;
        ch->out_bytes -= it->len;
    }
    bool more = ch->out_head != NULL;
    pthread_mutex_unlock(&ch->lock);
    if (it == NULL)
        return 0;
    int n = lws_write(wsi, (unsigned char *)it->data + LWS_PRE, it->len, LWS_WRITE_TEXT);
    free(it);
    if (n < 0)
        return -1;
    if (more)
        lws_callback_on_writable(wsi);
    return 0;
}

static int ch_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    (void)user;
    struct lws_context *cx = lws_get_context(wsi);
    xb_chan *ch = cx != NULL ? lws_context_user(cx) : NULL;
    if (ch == NULL)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        ch->wsi = wsi;
        ch->rx_len = 0;
        ch->up_since_ms = mono_ms();
        lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        return ch_receive(ch, wsi, in, len);
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return ch_write(ch, wsi);
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        char why[160];
        snprintf(why, sizeof why, "connection failed: %.120s",
                 in != NULL ? (const char *)in : "no reason");
        ch_retry(ch, why);
        break;
    }
    case LWS_CALLBACK_CLIENT_CLOSED:
        ch_retry(ch, "closed");
        break;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (ch->wsi != NULL)
            lws_callback_on_writable(ch->wsi);
        break;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols ch_protocols[] = {
    {"katana-xboard", ch_callback, 0, 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *ch_main(void *arg)
{
    xb_chan *ch = arg;
    lws_sul_schedule(ch->ctx, 0, &ch->sul, ch_connect, 1);
    while (!atomic_load(&ch->stop))
        if (lws_service(ch->ctx, 0) < 0)
            break;
    lws_context_destroy(ch->ctx);
    ch->ctx = NULL;
    return NULL;
}

static void lws_log_to_ours(int level, const char *line)
{
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    SV_LOG(SV_LOG_DEBUG, MOD, "libwebsockets (%d): %.*s", level, (int)n, line);
}

static void lws_log_setup(void)
{
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_to_ours);
}

/* Control loop: queue a text message for the panel (dropped when the queue is full). */
static void ch_send(xb_chan *ch, const char *text, size_t len)
{
    pthread_mutex_lock(&ch->lock);
    bool full = ch->out_bytes + len > OUT_MAX;
    pthread_mutex_unlock(&ch->lock);
    ch_item *it = full ? NULL : malloc(sizeof *it + LWS_PRE + len);
    if (it == NULL)
        return;
    it->kind = 0;
    it->len = len;
    memcpy(it->data + LWS_PRE, text, len);
    pthread_mutex_lock(&ch->lock);
    ch_queue(&ch->out_head, &ch->out_tail, it);
    ch->out_bytes += len;
    pthread_mutex_unlock(&ch->lock);
    lws_cancel_service(ch->ctx);
}

static void ch_free_items(ch_item *it)
{
    while (it != NULL) {
        ch_item *next = it->next;
        free(it);
        it = next;
    }
}
/* ---------------------------------------------------------------------------------------- */
/* the link: handshake, then the channel (one per node in node mode, one per machine)        */
/* ---------------------------------------------------------------------------------------- */

struct xb_link {
    uv_loop_t *loop;
    pn_http *http;        /* the handshake */
    char *base_url;
    char *auth_body;      /* the handshake's JSON body */
    char *ws_query;       /* "token=..&node_id=.." or "token=..&machine_id=.." */
    char label[80];       /* "node_id 3", "machine 7": for log lines */
    long timeout_ms;
    uv_timer_t hs_timer;
    bool hs_timer_on;
    unsigned hs_fails;
    xb_chan *ch;
    bool up;              /* authenticated channel */
    bool freeing;
    int closing;          /* handles still closing */
    void *owner;
    /* the owner's: a whole message (or one over the bound), the channel went down, and the
     * owner's release once the link closed everything */
    void (*on_message)(void *owner, const char *msg, size_t len, bool too_big);
    void (*on_down)(void *owner, const sv_error *why);
    void (*release)(void *owner);
};

/* "token=..&<key>=.." percent-encoded (RFC 3986 unreserved characters kept). */
static char *ws_query(const char *token, const char *key, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    char sep[40];
    snprintf(sep, sizeof sep, "&%.30s=", key);
    const char *parts[] = {"token=", token, sep, value};
    size_t cap = 48 + 3 * (strlen(token) + strlen(value)), pos = 0;
    char *q = malloc(cap);
    for (int i = 0; q != NULL && i < 4; i++)
        for (const char *s = parts[i]; *s != '\0'; s++) {
            unsigned char ch = (unsigned char)*s;
            if (i % 2 == 0 || isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
                q[pos++] = (char)ch;
            } else {
                q[pos++] = '%';
                q[pos++] = hex[ch >> 4];
                q[pos++] = hex[ch & 15];
            }
        }
    if (q != NULL)
        q[pos] = '\0';
    return q;
}

/* Fill a link (no handle yet). base_url is trimmed of trailing slashes. 0 or -ENOMEM. */
static int link_init(xb_link *l, uv_loop_t *loop, const char *url, long timeout_ms,
                     const char *token, const char *key, const char *value, char *auth_body,
                     void *owner)
{
    l->loop = loop;
    l->timeout_ms = timeout_ms;
    l->owner = owner;
    l->auth_body = auth_body; /* taken */
    l->base_url = strdup(url);
    l->ws_query = ws_query(token, key, value);
    snprintf(l->label, sizeof l->label, "%s %.64s", key, value);
    if (l->base_url == NULL || l->ws_query == NULL || l->auth_body == NULL ||
        pn_http_new(loop, &l->http) != 0)
        return -ENOMEM;
    size_t n = strlen(l->base_url);
    while (n > 0 && l->base_url[n - 1] == '/')
        l->base_url[--n] = '\0';
    return 0;
}

static void link_free_strings(xb_link *l)
{
    free(l->base_url);
    free(l->auth_body);
    free(l->ws_query);
}

static void link_maybe_release(xb_link *l)
{
    if (l->freeing && l->closing == 0)
        l->release(l->owner);
}

static void handle_closed(uv_handle_t *h)
{
    xb_link *l = h->data;
    l->closing--;
    link_maybe_release(l);
}

static void async_closed(uv_handle_t *h)
{
    xb_chan *ch = (xb_chan *)((char *)h - offsetof(xb_chan, async));
    xb_link *l = ch->owner;
    ch_free_items(ch->in_head);
    ch_free_items(ch->out_head);
    pthread_mutex_destroy(&ch->lock);
    free(ch->rx);
    free(ch->url);
    free(ch->path);
    free(ch);
    l->closing--;
    link_maybe_release(l);
}

static void ch_stop(xb_link *l)
{
    xb_chan *ch = l->ch;
    atomic_store(&ch->stop, true);
    lws_cancel_service(ch->ctx);
    pthread_join(ch->thread, NULL);
    l->ch = NULL;
    l->closing++;
    uv_close((uv_handle_t *)&ch->async, async_closed);
}

/* Stop everything; the owner's release runs once every handle closed (maybe now). */
static void link_close(xb_link *l)
{
    l->freeing = true;
    pn_http_free(l->http);
    l->http = NULL;
    if (l->hs_timer_on) {
        l->closing++;
        l->hs_timer_on = false;
        uv_close((uv_handle_t *)&l->hs_timer, handle_closed);
    }
    if (l->ch != NULL)
        ch_stop(l);
    link_maybe_release(l);
}

static void link_down(xb_link *l, const char *why)
{
    if (!l->up)
        return;
    l->up = false;
    sv_error err;
    sv_error_set(&err, -ECONNRESET, "node channel down: %s", why);
    SV_LOG(SV_LOG_WARN, MOD, "%s: %s; polling over REST, reconnecting", l->label, err.msg);
    l->on_down(l->owner, &err);
}

/* `auth.success`: @return whether the channel just came up. */
static bool link_auth_ok(xb_link *l)
{
    if (l->up)
        return false;
    l->up = true;
    SV_LOG(SV_LOG_INFO, MOD, "%s: node channel up", l->label);
    return true;
}

static void link_pong(xb_link *l)
{
    static const char pong[] = "{\"event\":\"pong\"}";
    ch_send(l->ch, pong, sizeof pong - 1);
}

static void on_async(uv_async_t *a)
{
    xb_link *l = a->data;
    xb_chan *ch = l->ch;
    pthread_mutex_lock(&ch->lock);
    ch_item *it = ch->in_head;
    ch->in_head = ch->in_tail = NULL;
    pthread_mutex_unlock(&ch->lock);
    while (it != NULL && !l->freeing) {
        ch_item *next = it->next;
        if (it->kind == CH_MSG || it->kind == CH_TOO_BIG)
            l->on_message(l->owner, it->data, it->len, it->kind == CH_TOO_BIG);
        else
            link_down(l, it->data);
        free(it);
        it = next;
    }
    ch_free_items(it);
}

/* Start the channel to @p url (ws:// or wss://, already checked). */
static int ch_start(xb_link *l, const char *url, sv_error *err)
{
    xb_chan *ch = calloc(1, sizeof *ch);
    if (ch == NULL || (ch->url = strdup(url)) == NULL) {
        free(ch);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    ch->owner = l;
    ch->seed = (unsigned)mono_ms() ^ (unsigned)(uintptr_t)ch;
    const char *prot = NULL, *path = NULL;
    if (lws_parse_uri(ch->url, &prot, &ch->address, &ch->port, &path) != 0 ||
        ch->address[0] == '\0') {
        free(ch->url);
        free(ch);
        return sv_error_set(err, -EINVAL, "node channel: bad ws_url");
    }
    ch->tls = strcmp(prot, "wss") == 0;
    size_t n = strlen(path) + strlen(l->ws_query) + 3;
    ch->path = malloc(n);
    if (ch->path == NULL) {
        free(ch->url);
        free(ch);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    snprintf(ch->path, n, "/%s%c%s", path, strchr(path, '?') != NULL ? '&' : '?', l->ws_query);
    static pthread_once_t log_once = PTHREAD_ONCE_INIT; /* lws's log setting is the library's */
    pthread_once(&log_once, lws_log_setup);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = ch_protocols;
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.user = ch;
    info.gid = -1;
    info.uid = -1;
    pthread_mutex_init(&ch->lock, NULL);
    ch->ctx = lws_create_context(&info);
    int rc = 0;
    if (ch->ctx == NULL)
        rc = sv_error_set(err, -EIO, "node channel: libwebsockets could not start");
    else if (uv_async_init(l->loop, &ch->async, on_async) != 0)
        rc = sv_error_set(err, -EIO, "node channel: no async handle");
    if (rc == 0) {
        ch->async.data = l;
        l->ch = ch;
        if (pthread_create(&ch->thread, NULL, ch_main, ch) != 0) {
            lws_context_destroy(ch->ctx);
            l->ch = NULL;
            l->closing++;
            uv_close((uv_handle_t *)&ch->async, async_closed);
            return sv_error_set(err, -EAGAIN, "node channel: no thread");
        }
        return 0;
    }
    if (ch->ctx != NULL)
        lws_context_destroy(ch->ctx);
    pthread_mutex_destroy(&ch->lock);
    free(ch->path);
    free(ch->url);
    free(ch);
    return rc;
}

static void handshake_start(xb_link *l);

static void on_hs_timer(uv_timer_t *t)
{
    handshake_start(t->data);
}

static void handshake_again(xb_link *l, uint64_t ms)
{
    uv_timer_start(&l->hs_timer, on_hs_timer, ms, 0);
}

static void on_handshake(int rc, const pn_http_response *r, const sv_error *herr, void *arg)
{
    xb_link *l = arg;
    sv_error err = {0};
    char *url = NULL;
    if (rc != 0)
        sv_error_set(&err, rc, "%s", herr->msg);
    else if (r->status < 200 || r->status > 299)
        rc = pn_uniproxy_error(r->status, r->body, r->len, &err);
    else
        rc = pn_xb_parse_handshake(r->body, r->len, &url, &err);
    if (rc == 0 && url != NULL)
        rc = ch_start(l, url, &err);
    free(url);
    if (rc != 0) {
        unsigned shift = l->hs_fails < 10 ? l->hs_fails : 10;
        uint64_t d = (uint64_t)HANDSHAKE_FIRST_MS << shift;
        d = d > HANDSHAKE_MAX_MS ? HANDSHAKE_MAX_MS : d;
        l->hs_fails++;
        SV_LOG(SV_LOG_WARN, MOD, "%s: panel handshake: %s (REST polling only; again in "
               "%" PRIu64 " s)", l->label, err.msg, d / 1000);
        handshake_again(l, d);
        return;
    }
    l->hs_fails = 0;
    if (l->ch == NULL) { /* WebSocket off on the panel: ask again later (§6.6 discovery) */
        SV_LOG(SV_LOG_INFO, MOD, "%s: panel handshake: no node channel offered, REST "
               "polling only", l->label);
        handshake_again(l, HANDSHAKE_MAX_MS);
    }
}

static void handshake_start(xb_link *l)
{
    char url[PN_XB_URL_MAX];
    snprintf(url, sizeof url, "%s" PN_XB_API_PATH "handshake", l->base_url);
    pn_http_request req = {.method = "POST", .url = url, .body = l->auth_body,
                           .body_len = strlen(l->auth_body), .timeout_ms = l->timeout_ms,
                           .max_body = 65536};
    sv_error err = {0};
    if (pn_http_start(l->http, &req, on_handshake, l, NULL, &err) != 0)
        handshake_again(l, HANDSHAKE_FIRST_MS);
}

/* Handshake now, then keep the channel up. 0 or -ENOMEM. */
static int link_watch(xb_link *l)
{
    if (uv_timer_init(l->loop, &l->hs_timer) != 0)
        return -ENOMEM;
    l->hs_timer.data = l;
    l->hs_timer_on = true;
    handshake_start(l);
    return 0;
}

/* A parse failure of a channel message as the resync reason. */
static void channel_error(sv_error *e, int rc, const char *what)
{
    sv_error_set(e, rc, "node channel: %s", what);
}

/* ---------------------------------------------------------------------------------------- */
/* the client                                                                                 */
/* ---------------------------------------------------------------------------------------- */

struct pn_xboard {
    pn_client base; /* first */
    pn_client *rest;  /* the UniProxy client on PN_XB_API_PATH */
    xb_link link;     /* node mode's channel (unused in machine mode) */
    char *node_type;
    bool node_numeric;
    uint64_t node_num;
    bool machine;     /* machine mode: the machine's channel serves this node */
    const pn_push_events *ev;
    void *ev_arg;
};

static void xb_release(void *owner)
{
    pn_xboard *x = owner;
    link_free_strings(&x->link);
    free(x->node_type);
    free(x);
}

static void xb_down(void *owner, const sv_error *why)
{
    pn_xboard *x = owner;
    x->ev->channel(x->ev_arg, false, why);
}

static void xb_message(void *owner, const char *msg, size_t len, bool too_big)
{
    pn_xboard *x = owner;
    pn_xb_event ev;
    sv_error err = {0};
    int rc = too_big ? sv_error_set(&err, -EMSGSIZE, "message over the size bound (%u bytes)",
                                    PN_XB_MSG_MAX)
                     : pn_xb_event_parse(msg, len, x->node_type, &ev, &err);
    if (too_big)
        memset(&ev, 0, sizeof ev);
    if (rc != 0) {
        sv_error e;
        channel_error(&e, rc, err.msg);
        x->ev->resync(x->ev_arg, &e);
        pn_xb_event_free(&ev);
        return;
    }
    if (ev.has_node_id && x->node_numeric && ev.node_id != x->node_num) {
        pn_xb_event_free(&ev); /* another node's event */
        return;
    }
    switch (ev.kind) {
    case PN_XB_PING:
        link_pong(&x->link);
        break;
    case PN_XB_AUTH_OK:
        if (link_auth_ok(&x->link))
            x->ev->channel(x->ev_arg, true, NULL);
        break;
    case PN_XB_ERROR:
        SV_LOG(SV_LOG_WARN, MOD, "%s: node channel: the panel says: %s", x->link.label,
               ev.message);
        break;
    case PN_XB_CONFIG:
        x->ev->node(x->ev_arg, &ev.node, ev.config_body, ev.config_len);
        break;
    case PN_XB_USERS:
        x->ev->users(x->ev_arg, &ev.users);
        break;
    case PN_XB_DELTA:
        x->ev->delta(x->ev_arg, &ev.users, ev.ids, ev.n_ids);
        break;
    case PN_XB_NODES: /* a machine's event */
    case PN_XB_IGNORED:
        break;
    }
    pn_xb_event_free(&ev);
}

static int xb_watch(pn_client *c, const pn_push_events *ev, void *arg)
{
    pn_xboard *x = (pn_xboard *)c;
    if (x->machine)
        return -ENOTSUP; /* the machine's one channel serves it (pn_xb_machine_watch) */
    if (x->ev != NULL)
        return -EALREADY;
    x->ev = ev;
    x->ev_arg = arg;
    return link_watch(&x->link);
}

/* REST: the UniProxy calls on the v2 path (callbacks get the inner client as their c). */
static int xb_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    return pn_fetch_node(((pn_xboard *)c)->rest, cb, arg);
}

static int xb_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    return pn_fetch_users(((pn_xboard *)c)->rest, cb, arg);
}

static int xb_report_usage(pn_client *c, const sv_usage *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    pn_client *r = ((pn_xboard *)c)->rest;
    return r->ops->report_usage(r, items, n, cb, arg);
}

/* A `report.devices` message (PROTOCOLS-2.md §6.5): data `{"<uid>":["ip",...]}`, or in machine
 * mode `{"node_id":N,"devices":{...}}`. malloc'ed text or NULL (out of memory). */
static char *devices_message(const pn_alive *items, size_t n, bool machine, uint64_t node_id)
{
    json_t *devices = json_object(), *msg = json_object();
    for (size_t i = 0; devices != NULL && i < n; i++) {
        char key[24];
        snprintf(key, sizeof key, "%" PRIu64, items[i].user);
        json_t *ips = json_array();
        for (size_t k = 0; ips != NULL && k < items[i].n_ips; k++)
            json_array_append_new(ips, json_string(items[i].ips[k]));
        json_object_set_new(devices, key, ips);
    }
    json_t *data = devices;
    if (machine)
        data = json_pack("{s:I, s:o}", "node_id", (json_int_t)node_id, "devices", devices);
    json_object_set_new(msg, "event", json_string("report.devices"));
    json_object_set_new(msg, "data", data);
    json_object_set_new(msg, "timestamp", json_integer((json_int_t)time(NULL)));
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    return text;
}

/* A report sent as the channel message @p text (owned, NULL: out of memory): queued on the
 * channel, which needs no answer, so @p cb is told at once. */
static int channel_report(pn_client *c, char *text, pn_report_cb cb, void *arg)
{
    pn_xboard *x = (pn_xboard *)c;
    if (text == NULL)
        return -ENOMEM;
    ch_send(x->link.ch, text, strlen(text));
    free(text);
    cb(c, 0, NULL, arg);
    return 0;
}

/* Online IPs: `report.devices` over the channel while it is up (PROTOCOLS-2.md §6.5), else
 * REST `alive`. */
static int xb_report_alive(pn_client *c, const pn_alive *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    pn_xboard *x = (pn_xboard *)c;
    if (!x->link.up || x->link.ch == NULL)
        return x->rest->ops->report_alive(x->rest, items, n, cb, arg);
    return channel_report(c, devices_message(items, n, false, 0), cb, arg);
}

static int xb_report_status(pn_client *c, const pn_status *s, pn_report_cb cb, void *arg)
{
    pn_client *r = ((pn_xboard *)c)->rest;
    return r->ops->report_status(r, s, cb, arg);
}

/* Metrics: `node.status` over the channel, or REST `report` {"metrics"} (PANEL.md §1.1). */
static int xb_report_metrics(pn_client *c, const pn_metrics *m, enum pn_metrics_via via,
                             pn_report_cb cb, void *arg)
{
    pn_xboard *x = (pn_xboard *)c;
    bool up = x->link.up && x->link.ch != NULL;
    pn_metrics mine = *m;
    if (!x->machine) { /* a machine's node: its channel's state comes with m */
        mine.ws_enabled = x->link.ch != NULL;
        mine.ws_connected = up;
    }
    if (via == PN_METRICS_CHANNEL && !up)
        return -ENOTCONN;
    if (via == PN_METRICS_REST && up)
        return -EISCONN;
    if (via == PN_METRICS_REST)
        return pn_uniproxy_post(x->rest, "report", json_pack("{s:o}", "metrics",
                                                             pn_xb_metrics_json(&mine)), cb, arg);
    return channel_report(c, pn_xb_status_message(&mine, false, 0), cb, arg);
}

static int xb_fetch_alivelist(pn_client *c, pn_alivelist_cb cb, void *arg)
{
    pn_client *r = ((pn_xboard *)c)->rest;
    return r->ops->fetch_alivelist(r, cb, arg);
}

static int xb_set_etag(pn_client *c, enum pn_body_kind kind, const char *etag)
{
    return pn_set_etag(((pn_xboard *)c)->rest, kind, etag);
}

static const char *xb_last_body(pn_client *c, enum pn_body_kind kind, size_t *len,
                                const char **etag)
{
    return pn_last_body(((pn_xboard *)c)->rest, kind, len, etag);
}

static void xb_forget_body(pn_client *c, enum pn_body_kind kind)
{
    pn_forget_body(((pn_xboard *)c)->rest, kind);
}

static int xb_parse_body(pn_client *c, enum pn_body_kind kind, const char *body, size_t len,
                         pn_node *node, pn_users *users, sv_error *err)
{
    pn_client *r = ((pn_xboard *)c)->rest;
    return r->ops->parse_body(r, kind, body, len, node, users, err);
}

static size_t xb_requests(pn_client *c, pn_request_count *out, size_t cap)
{
    return pn_requests(((pn_xboard *)c)->rest, out, cap);
}

static void xb_free(pn_client *c)
{
    pn_xboard *x = (pn_xboard *)c;
    pn_client_free(x->rest);
    x->rest = NULL;
    link_close(&x->link); /* x goes once its handles closed */
}

static const pn_client_ops xboard_ops = {
    .type = "xboard",
    .usage_apply = PN_USAGE_ATOMIC,
    .fetch_node = xb_fetch_node,
    .fetch_users = xb_fetch_users,
    .report_usage = xb_report_usage,
    .report_alive = xb_report_alive,
    .report_status = xb_report_status,
    .fetch_alivelist = xb_fetch_alivelist,
    .report_metrics = xb_report_metrics,
    .set_etag = xb_set_etag,
    .last_body = xb_last_body,
    .forget_body = xb_forget_body,
    .parse_body = xb_parse_body,
    .requests = xb_requests,
    .watch = xb_watch,
    .free = xb_free,
};

int pn_xboard_new(const pn_xboard_options *o, pn_client **out, sv_error *err)
{
    *out = NULL;
    pn_uniproxy_options u = {.loop = o->loop, .url = o->url, .token = o->token,
                             .node_id = o->node_id, .node_type = o->node_type,
                             .timeout_ms = o->timeout_ms, .api_path = PN_XB_API_PATH,
                             .machine_id = o->machine_id};
    pn_client *rest = NULL;
    int rc = pn_uniproxy_new(&u, &rest, err);
    if (rc != 0)
        return rc;
    pn_xboard *x = calloc(1, sizeof *x);
    if (x == NULL) {
        pn_client_free(rest);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    x->base.ops = &xboard_ops;
    x->rest = rest;
    x->machine = o->machine_id != NULL;
    x->node_type = strdup(o->node_type);
    json_t *b = json_pack("{s:s, s:s}", "token", o->token, "node_id", o->node_id);
    char *end = NULL;
    unsigned long long id = strtoull(o->node_id, &end, 10);
    if (end != NULL && *end == '\0' && id > 0) {
        x->node_numeric = true;
        x->node_num = id;
        json_object_set_new(b, "node_id", json_integer((json_int_t)id));
    }
    char *auth = b != NULL ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    x->link.on_message = xb_message;
    x->link.on_down = xb_down;
    x->link.release = xb_release;
    if (link_init(&x->link, o->loop, o->url, o->timeout_ms, o->token, "node_id", o->node_id,
                  auth, x) != 0 || x->node_type == NULL) {
        xb_free(&x->base);
        return sv_error_set(err, -ENOMEM, "xboard panel: cannot initialise");
    }
    *out = &x->base;
    return 0;
}

/* One request of each kind at a time, held in the client (nothing to free when the client
 * goes with a request in flight). */
typedef struct machine_req {
    bool busy;
    pn_xb_machine_cb fetch_cb;
    pn_xb_machine_report_cb report_cb;
    void *arg;
} machine_req;

struct pn_xb_machine_client {
    pn_http *http;
    char *base_url;
    char *auth;      /* {"machine_id":N,"token":T} without the closing brace */
    long timeout_ms;
    machine_req fetch, status;
    xb_link link;    /* the machine's channel (PROTOCOLS-2.md §6.2) */
    const pn_xb_machine_events *ev;
    void *ev_arg;
};

static void machine_release(void *owner)
{
    pn_xb_machine_client *c = owner;
    link_free_strings(&c->link);
    free(c->base_url);
    free(c->auth);
    free(c);
}

static void machine_down(void *owner, const sv_error *why)
{
    pn_xb_machine_client *c = owner;
    c->ev->channel(c->ev_arg, false, why);
}

/* One machine channel message: machine-wide events here, node-scoped ones routed by their
 * `data.node_id` (PROTOCOLS-2.md §6.3). */
static void machine_message(void *owner, const char *msg, size_t len, bool too_big)
{
    pn_xb_machine_client *c = owner;
    pn_xb_event ev;
    sv_error err = {0};
    int rc = too_big ? sv_error_set(&err, -EMSGSIZE, "message over the size bound (%u bytes)",
                                    PN_XB_MSG_MAX)
                     : pn_xb_event_parse(msg, len, NULL, &ev, &err);
    if (too_big)
        memset(&ev, 0, sizeof ev);
    if (rc != 0) {
        sv_error e;
        channel_error(&e, rc, err.msg);
        c->ev->resync(c->ev_arg, ev.has_node_id ? ev.node_id : 0, &e);
        pn_xb_event_free(&ev);
        return;
    }
    if ((ev.kind == PN_XB_CONFIG || ev.kind == PN_XB_USERS || ev.kind == PN_XB_DELTA) &&
        !ev.has_node_id) { /* node-scoped, but no node named (PROTOCOLS-2.md §6.3) */
        SV_LOG(SV_LOG_DEBUG, MOD, "%s: node channel: an event without data.node_id dropped",
               c->link.label);
        ev.kind = PN_XB_IGNORED;
    }
    switch (ev.kind) {
    case PN_XB_PING:
        link_pong(&c->link);
        break;
    case PN_XB_AUTH_OK:
        if (link_auth_ok(&c->link))
            c->ev->channel(c->ev_arg, true, NULL);
        break;
    case PN_XB_ERROR:
        SV_LOG(SV_LOG_WARN, MOD, "%s: node channel: the panel says: %s", c->link.label,
               ev.message);
        break;
    case PN_XB_CONFIG:
        c->ev->node(c->ev_arg, ev.node_id, &ev.node, ev.config_body, ev.config_len);
        break;
    case PN_XB_USERS:
        c->ev->users(c->ev_arg, ev.node_id, &ev.users);
        break;
    case PN_XB_DELTA:
        c->ev->delta(c->ev_arg, ev.node_id, &ev.users, ev.ids, ev.n_ids);
        break;
    case PN_XB_NODES:
        c->ev->nodes(c->ev_arg, &ev.nodes);
        break;
    case PN_XB_IGNORED:
        break;
    }
    pn_xb_event_free(&ev);
}

int pn_xb_machine_watch(pn_xb_machine_client *c, const pn_xb_machine_events *ev, void *arg)
{
    if (c->ev != NULL)
        return -EALREADY;
    c->ev = ev;
    c->ev_arg = arg;
    return link_watch(&c->link);
}

int pn_xb_machine_report_devices(pn_xb_machine_client *c, uint64_t node_id,
                                 const pn_alive *items, size_t n)
{
    if (!c->link.up || c->link.ch == NULL)
        return -ENOTCONN;
    char *text = devices_message(items, n, true, node_id);
    if (text == NULL)
        return -ENOMEM;
    ch_send(c->link.ch, text, strlen(text));
    free(text);
    return 0;
}

int pn_xb_machine_report_metrics(pn_xb_machine_client *c, uint64_t node_id,
                                 const pn_metrics *m)
{
    if (!c->link.up || c->link.ch == NULL)
        return -ENOTCONN;
    pn_metrics mine = *m;
    mine.ws_enabled = mine.ws_connected = true;
    char *text = pn_xb_status_message(&mine, true, node_id);
    if (text == NULL)
        return -ENOMEM;
    ch_send(c->link.ch, text, strlen(text));
    free(text);
    return 0;
}

void pn_xb_machine_channel_state(const pn_xb_machine_client *c, bool *enabled, bool *connected)
{
    if (enabled != NULL)
        *enabled = c->link.ch != NULL;
    if (connected != NULL)
        *connected = c->link.up && c->link.ch != NULL;
}

int pn_xb_machine_new(const pn_xb_machine_options *o, pn_xb_machine_client **out,
                      sv_error *err)
{
    *out = NULL;
    char *end = NULL;
    unsigned long long id = o->machine_id != NULL ? strtoull(o->machine_id, &end, 10) : 0;
    if (o->url == NULL || o->token == NULL || o->token[0] == '\0' || id == 0 || *end != '\0')
        return sv_error_set(err, -EINVAL, "xboard machine: url, token and a numeric machine_id "
                            "are required");
    pn_xb_machine_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    json_t *b = json_pack("{s:I, s:s}", "machine_id", (json_int_t)id, "token", o->token);
    char *text = b != NULL ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    c->link.on_message = machine_message;
    c->link.on_down = machine_down;
    c->link.release = machine_release;
    int rc = link_init(&c->link, o->loop, o->url, o->timeout_ms, o->token, "machine_id",
                       o->machine_id, text != NULL ? strdup(text) : NULL, c);
    c->auth = text;
    c->timeout_ms = o->timeout_ms;
    if (rc != 0 || text == NULL || (c->base_url = strdup(c->link.base_url)) == NULL ||
        pn_http_new(o->loop, &c->http) != 0) {
        pn_xb_machine_client_free(c);
        return sv_error_set(err, -ENOMEM, "xboard machine: cannot initialise");
    }
    text[strlen(text) - 1] = '\0'; /* drop '}': a status body is appended */
    *out = c;
    return 0;
}

void pn_xb_machine_client_free(pn_xb_machine_client *c)
{
    if (c == NULL)
        return;
    pn_http_free(c->http); /* requests in flight end without their callbacks */
    c->http = NULL;
    link_close(&c->link); /* c goes once the channel's handles closed */
}

/* A 2xx answer, else the panel's error text. */
static int machine_answer(int rc, const pn_http_response *r, const sv_error *herr,
                          sv_error *err)
{
    if (rc != 0)
        return sv_error_set(err, rc, "%s", herr->msg);
    if (r->status < 200 || r->status > 299)
        return pn_uniproxy_error(r->status, r->body, r->len, err);
    return 0;
}

static void on_machine_nodes(int rc, const pn_http_response *r, const sv_error *herr, void *arg)
{
    machine_req *q = arg;
    sv_error err = {0};
    pn_xb_machine m = {0};
    rc = machine_answer(rc, r, herr, &err);
    if (rc == 0)
        rc = pn_xb_parse_machine(r->body, r->len, &m, &err);
    q->busy = false;
    q->fetch_cb(rc, rc == 0 ? &m : NULL, rc == 0 ? NULL : &err, q->arg);
    pn_xb_machine_free(&m);
}

static void on_machine_status(int rc, const pn_http_response *r, const sv_error *herr,
                              void *arg)
{
    machine_req *q = arg;
    sv_error err = {0};
    rc = machine_answer(rc, r, herr, &err);
    if (rc == 0)
        rc = pn_uniproxy_check_ack(r->status, r->body, r->len, &err);
    q->busy = false;
    q->report_cb(rc, rc == 0 ? NULL : &err, q->arg);
}

static int machine_post(pn_xb_machine_client *c, const char *what, const char *extra,
                        pn_http_cb done, machine_req *q)
{
    char url[PN_XB_URL_MAX];
    snprintf(url, sizeof url, "%s" PN_XB_API_PATH "machine/%s", c->base_url, what);
    size_t n = strlen(c->auth) + strlen(extra) + 2;
    char *body = malloc(n);
    if (body == NULL)
        return -ENOMEM;
    snprintf(body, n, "%s%s}", c->auth, extra);
    pn_http_request req = {.method = "POST", .url = url, .body = body, .body_len = strlen(body),
                           .timeout_ms = c->timeout_ms};
    sv_error err = {0};
    int rc = pn_http_start(c->http, &req, done, q, NULL, &err);
    free(body);
    q->busy = rc == 0;
    return rc;
}

int pn_xb_machine_fetch(pn_xb_machine_client *c, pn_xb_machine_cb cb, void *arg)
{
    if (c->fetch.busy)
        return -EBUSY;
    c->fetch = (machine_req){.fetch_cb = cb, .arg = arg};
    return machine_post(c, "nodes", "", on_machine_nodes, &c->fetch);
}

int pn_xb_machine_status(pn_xb_machine_client *c, const pn_status *st,
                         pn_xb_machine_report_cb cb, void *arg)
{
    char extra[512];
    if (c->status.busy)
        return -EBUSY;
    c->status = (machine_req){.report_cb = cb, .arg = arg};
    snprintf(extra, sizeof extra, ",\"cpu\":%.1f,\"mem\":{\"total\":%" PRIu64 ",\"used\":%"
             PRIu64 "},\"swap\":{\"total\":%" PRIu64 ",\"used\":%" PRIu64 "},\"disk\":{"
             "\"total\":%" PRIu64 ",\"used\":%" PRIu64 "}", st->cpu, st->mem_total,
             st->mem_used, st->swap_total, st->swap_used, st->disk_total, st->disk_used);
    return machine_post(c, "status", extra, on_machine_status, &c->status);
}
