/*
 * The worker's resolver: c-ares driven by uv_poll handles (one per socket
 * c-ares opens) and one timer, a cache of SV_DNS_CACHE_MAX names in least-recently-used order,
 * and per name one entry that is either a query in flight (with its waiters) or an answer until
 * its expiry (positive: the smallest TTL, at most SV_DNS_TTL_MAX_S; negative: fixed times).
 */
#include "config.h"

#include <ares.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/dns/resolver.h"
#include "supervisor/util/table.h"

#define BUCKETS 256u

typedef struct entry {
    sv_list hlink;     /**< in its bucket */
    sv_list lru;       /**< in r->lru once answered */
    sv_list waiters;   /**< sv_dns_req while pending */
    sv_resolver *r;
    bool pending;
    int status;        /**< 0 or a negative errno */
    uint64_t expires;  /**< uv_now() milliseconds */
    sv_dns_result res;
    char name[256];
} entry;

typedef struct poller {
    sv_list link;
    uv_poll_t poll;
    ares_socket_t fd;
    sv_resolver *r;
} poller;

struct sv_resolver {
    uv_loop_t *loop;
    ares_channel ch;
    enum sv_dns_strategy strategy;
    uv_timer_t timer;
    sv_list pollers;
    sv_list buckets[BUCKETS];
    sv_list lru;        /**< answered entries, least recently used first */
    size_t n_entries;
    uint64_t queries;
    int handles;        /**< open uv handles (timer, pollers) */
    bool closing;
    entry *starting;    /**< the entry whose query ares_getaddrinfo is starting */
};

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_init_rc;
static void ares_lib_init(void) { ares_init_rc = ares_library_init(ARES_LIB_INIT_ALL); }

/* ---- libuv glue ----------------------------------------------------------------------------- */

static void handle_closed(sv_resolver *r)
{
    if (--r->handles == 0 && r->closing)
        free(r);
}

static void on_timer_closed(uv_handle_t *h) { handle_closed(h->data); }

static void on_poller_closed(uv_handle_t *h)
{
    poller *p = h->data;
    sv_resolver *r = p->r;
    free(p);
    handle_closed(r);
}

static void on_timer(uv_timer_t *t);

static void rearm(sv_resolver *r)
{
    if (r->closing)
        return;
    struct timeval tv;
    if (ares_timeout(r->ch, NULL, &tv) == NULL) {
        uv_timer_stop(&r->timer);
        return;
    }
    uint64_t ms = (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u + 1u;
    uv_timer_start(&r->timer, on_timer, ms, 0);
}

static void on_timer(uv_timer_t *t)
{
    sv_resolver *r = t->data;
    ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm(r);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    poller *p = h->data;
    sv_resolver *r = p->r;
    ares_socket_t rfd = ARES_SOCKET_BAD, wfd = ARES_SOCKET_BAD;
    if (status < 0 || (events & UV_READABLE))
        rfd = p->fd;
    if (status < 0 || (events & UV_WRITABLE))
        wfd = p->fd;
    ares_process_fd(r->ch, rfd, wfd);
    rearm(r);
}

static void poller_close(poller *p)
{
    sv_list_unlink(&p->link);
    uv_poll_stop(&p->poll);
    uv_close((uv_handle_t *)&p->poll, on_poller_closed);
}

/* c-ares opens, watches and closes its sockets through this callback. */
static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
    sv_resolver *r = data;
    poller *p = NULL;
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &r->pollers) {
        poller *q = sv_container_of(pos, poller, link);
        if (q->fd == fd)
            p = q;
    }
    if (!readable && !writable) {
        if (p != NULL)
            poller_close(p);
        return;
    }
    if (p == NULL) {
        if (r->closing || (p = calloc(1, sizeof *p)) == NULL)
            return; /* the query times out */
        if (uv_poll_init_socket(r->loop, &p->poll, fd) != 0) {
            free(p);
            return;
        }
        p->fd = fd;
        p->r = r;
        p->poll.data = p;
        r->handles++;
        sv_list_insert_tail(&r->pollers, &p->link);
    }
    uv_poll_start(&p->poll, (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0), on_poll);
}

/* ---- cache ---------------------------------------------------------------------------------- */

static sv_list *bucket(sv_resolver *r, const char *name)
{
    return &r->buckets[sv_hash_str(name) % BUCKETS];
}

static entry *find(sv_resolver *r, const char *name)
{
    sv_list *b = bucket(r, name), *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, b) {
        entry *e = sv_container_of(pos, entry, hlink);
        if (strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

static void entry_free(entry *e)
{
    sv_list_unlink(&e->hlink);
    if (sv_list_is_linked(&e->lru))
        sv_list_unlink(&e->lru);
    e->r->n_entries--;
    free(e);
}

static int status_of(int ares_status)
{
    switch (ares_status) {
    case ARES_SUCCESS: return 0;
    case ARES_ENOTFOUND: case ARES_ENODATA: case ARES_ENONAME: return -ENOENT;
    case ARES_ETIMEOUT: return -ETIMEDOUT;
    case ARES_ENOMEM: return -ENOMEM;
    case ARES_ECANCELLED: case ARES_EDESTRUCTION: return -ECANCELED;
    default: return -EIO;
    }
}

/* Record an answer in @p e (no waiter is told here). */
static void entry_answer(entry *e, int status, struct ares_addrinfo *ai)
{
    sv_resolver *r = e->r;
    e->pending = false;
    e->status = status_of(status);
    e->res.n = 0;
    uint32_t ttl = SV_DNS_TTL_MAX_S;
    if (e->status == 0 && ai != NULL) {
        for (struct ares_addrinfo_node *n = ai->nodes; n != NULL && e->res.n < SV_DNS_ADDRS_MAX;
             n = n->ai_next) {
            sv_dns_addr *a = &e->res.addrs[e->res.n];
            if (n->ai_family == AF_INET && r->strategy != SV_DNS_IPV6_ONLY) {
                a->family = AF_INET;
                memcpy(a->ip, &((struct sockaddr_in *)n->ai_addr)->sin_addr, 4);
            } else if (n->ai_family == AF_INET6 && r->strategy != SV_DNS_IPV4_ONLY) {
                a->family = AF_INET6;
                memcpy(a->ip, &((struct sockaddr_in6 *)n->ai_addr)->sin6_addr, 16);
            } else {
                continue;
            }
            e->res.n++;
            uint32_t t = n->ai_ttl < 0 ? 0 : (uint32_t)n->ai_ttl;
            if (t < ttl)
                ttl = t;
        }
        if (e->res.n == 0)
            e->status = -ENOENT;
    }
    if (e->status == -ENOENT)
        ttl = SV_DNS_NEGATIVE_TTL_S;
    else if (e->status != 0)
        ttl = e->status == -ECANCELED ? 0 : SV_DNS_FAILURE_TTL_S;
    e->expires = uv_now(r->loop) + (uint64_t)ttl * 1000u;
    sv_list_insert_tail(&r->lru, &e->lru);
}

/* Tell every waiter of @p e (each callback may resolve, cancel or evict anything). */
static void entry_notify(entry *e)
{
    sv_list local;
    sv_list_init(&local);
    while (!sv_list_is_empty(&e->waiters)) {
        sv_list *n = e->waiters.next;
        sv_list_unlink(n);
        sv_list_insert_tail(&local, n);
    }
    sv_dns_result res = e->res;
    int status = e->status;
    while (!sv_list_is_empty(&local)) {
        sv_dns_req *q = sv_container_of(local.next, sv_dns_req, link);
        sv_list_unlink(&q->link);
        q->cb(q, status, status == 0 ? &res : NULL);
    }
}

static void on_answer(void *arg, int status, int timeouts, struct ares_addrinfo *ai)
{
    entry *e = arg;
    (void)timeouts;
    entry_answer(e, status, ai);
    if (ai != NULL)
        ares_freeaddrinfo(ai);
    if (e->r->starting != e)
        entry_notify(e);
}

/* A new entry for @p name: reuses the least recently used answer when the cache is full. */
static entry *entry_new(sv_resolver *r, const char *name)
{
    entry *e;
    if (r->n_entries >= SV_DNS_CACHE_MAX) {
        if (sv_list_is_empty(&r->lru))
            return NULL; /* every entry is a query in flight */
        entry_free(sv_container_of(r->lru.next, entry, lru));
    }
    if ((e = calloc(1, sizeof *e)) == NULL)
        return NULL;
    e->r = r;
    sv_list_init(&e->waiters);
    snprintf(e->name, sizeof e->name, "%s", name);
    sv_list_insert_tail(bucket(r, name), &e->hlink);
    r->n_entries++;
    return e;
}

/* ---- public --------------------------------------------------------------------------------- */

int sv_resolver_new(uv_loop_t *loop, const sv_dns_options *opts, sv_resolver **out)
{
    pthread_once(&ares_once, ares_lib_init);
    if (ares_init_rc != ARES_SUCCESS)
        return -EIO;
    sv_resolver *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->loop = loop;
    r->strategy = opts != NULL ? opts->strategy : SV_DNS_PREFER_IPV4;
    sv_list_init(&r->pollers);
    sv_list_init(&r->lru);
    for (unsigned i = 0; i < BUCKETS; i++)
        sv_list_init(&r->buckets[i]);
    struct ares_options ao;
    memset(&ao, 0, sizeof ao);
    ao.sock_state_cb = on_sock_state;
    ao.sock_state_cb_data = r;
    ao.timeout = opts != NULL && opts->timeout_ms ? (int)opts->timeout_ms : 5000;
    ao.tries = 1;
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
    int rc = ares_init_options(&r->ch, &ao, mask);
    if (rc != ARES_SUCCESS) {
        free(r);
        return rc == ARES_ENOMEM ? -ENOMEM : -EIO;
    }
    if (opts != NULL && opts->n_servers > 0) {
        char csv[SV_DNS_SERVERS_MAX * SV_DNS_SERVER_LEN];
        size_t len = 0;
        for (unsigned i = 0; i < opts->n_servers && i < SV_DNS_SERVERS_MAX; i++)
            len += (size_t)snprintf(csv + len, sizeof csv - len, "%s%s", i ? "," : "",
                                    opts->servers[i]);
        if (ares_set_servers_ports_csv(r->ch, csv) != ARES_SUCCESS) {
            ares_destroy(r->ch);
            free(r);
            return -EINVAL;
        }
    }
    uv_timer_init(loop, &r->timer);
    r->timer.data = r;
    r->handles = 1;
    *out = r;
    return 0;
}

void sv_resolver_close(sv_resolver *r)
{
    if (r == NULL || r->closing)
        return;
    r->closing = true;
    ares_destroy(r->ch); /* pending queries answer ARES_EDESTRUCTION: their waiters are told */
    while (!sv_list_is_empty(&r->pollers))
        poller_close(sv_container_of(r->pollers.next, poller, link));
    for (unsigned i = 0; i < BUCKETS; i++)
        while (!sv_list_is_empty(&r->buckets[i]))
            entry_free(sv_container_of(r->buckets[i].next, entry, hlink));
    uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

enum sv_dns_strategy sv_resolver_strategy(const sv_resolver *r) { return r->strategy; }

int sv_dns_resolve(sv_resolver *r, sv_dns_req *req, const char *host, sv_dns_cb cb,
                   sv_dns_result *out)
{
    if (r->closing)
        return -ECANCELED;
    entry *e = find(r, host);
    if (e != NULL && !e->pending && uv_now(r->loop) >= e->expires) {
        entry_free(e);
        e = NULL;
    }
    if (e != NULL && !e->pending) {
        sv_list_unlink(&e->lru); /* most recently used */
        sv_list_insert_tail(&r->lru, &e->lru);
        if (e->status == 0)
            *out = e->res;
        return e->status;
    }
    req->cb = cb;
    if (e != NULL) {
        sv_list_insert_tail(&e->waiters, &req->link);
        return 1;
    }
    if ((e = entry_new(r, host)) == NULL)
        return -ENOBUFS;
    e->pending = true;
    r->queries++;
    struct ares_addrinfo_hints hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = ARES_AI_NOSORT;
    hints.ai_family = r->strategy == SV_DNS_IPV4_ONLY ? AF_INET
                    : r->strategy == SV_DNS_IPV6_ONLY ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    r->starting = e;
    ares_getaddrinfo(r->ch, host, NULL, &hints, on_answer, e);
    r->starting = NULL;
    if (!e->pending) { /* answered from inside (hosts file, bad name) */
        if (e->status == 0)
            *out = e->res;
        return e->status;
    }
    sv_list_insert_tail(&e->waiters, &req->link);
    rearm(r);
    return 1;
}

void sv_dns_cancel(sv_dns_req *req)
{
    if (sv_list_is_linked(&req->link))
        sv_list_unlink(&req->link);
}

void sv_dns_order(sv_dns_result *res, enum sv_dns_strategy strategy)
{
    int first = strategy == SV_DNS_PREFER_IPV6 || strategy == SV_DNS_IPV6_ONLY ? AF_INET6 : AF_INET;
    int second = first == AF_INET ? AF_INET6 : AF_INET;
    sv_dns_addr a[SV_DNS_ADDRS_MAX], b[SV_DNS_ADDRS_MAX];
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < res->n; i++) {
        if (res->addrs[i].family == first)
            a[na++] = res->addrs[i];
        else if (res->addrs[i].family == second && strategy != SV_DNS_IPV4_ONLY &&
                 strategy != SV_DNS_IPV6_ONLY)
            b[nb++] = res->addrs[i];
    }
    size_t n = 0;
    for (size_t i = 0; i < na || i < nb; i++) {
        if (i < na)
            res->addrs[n++] = a[i];
        if (i < nb)
            res->addrs[n++] = b[i];
    }
    res->n = n;
}

size_t sv_resolver_cached(const sv_resolver *r) { return r->n_entries; }
uint64_t sv_resolver_queries(const sv_resolver *r) { return r->queries; }
