/*
 * The worker's asynchronous resolver: c-ares on the worker's libuv loop, with a
 * bounded cache that honours TTLs, negative caching, and one query in flight per name however
 * many flows wait for it. The servers are the configured ones (sv_dns_options) or, when none is
 * configured, those of /etc/resolv.conf. One resolver per worker, used by the direct outbound
 * for streams and datagrams. Include direction: util/ and netclass only (below outbound/).
 */
#ifndef SV_DNS_RESOLVER_H
#define SV_DNS_RESOLVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "supervisor/supervisor.h"
#include "supervisor/util/list.h"

#define SV_DNS_ADDRS_MAX 16        /**< addresses kept per name (the first ones answered) */
#define SV_DNS_CACHE_MAX 1024      /**< names cached per worker (least recently used goes) */
#define SV_DNS_TTL_MAX_S 3600u     /**< a longer TTL is cut to this */
#define SV_DNS_NEGATIVE_TTL_S 30u  /**< a name that does not exist / has no address */
#define SV_DNS_FAILURE_TTL_S 5u    /**< a timeout or a server failure */

/** One address of an answer: AF_INET (4 bytes of ip) or AF_INET6 (16). */
typedef struct sv_dns_addr {
    int family;
    uint8_t ip[16];
} sv_dns_addr;

/** A name's answer, in the order the server gave it. */
typedef struct sv_dns_result {
    size_t n;
    sv_dns_addr addrs[SV_DNS_ADDRS_MAX];
} sv_dns_result;

typedef struct sv_resolver sv_resolver;
typedef struct sv_dns_req sv_dns_req;

/**
 * A pending lookup finished: @p status 0 with @p res (borrowed for the call, n ≥ 1), or < 0:
 * -ENOENT (no such name or no address of the allowed families), -ETIMEDOUT, -EIO (server
 * failure), -ECANCELED (the resolver is being freed).
 */
typedef void (*sv_dns_cb)(sv_dns_req *req, int status, const sv_dns_result *res);

/** A waiting lookup, embedded in its owner (zeroed before use); private fields. */
struct sv_dns_req {
    sv_list link;   /**< in its entry's waiters while pending */
    sv_dns_cb cb;
    void *data;     /**< the owner's */
};

/**
 * Create a resolver on @p loop with @p opts (copied; NULL = resolv.conf defaults).
 * @return 0 and *out (freed by sv_resolver_close), -EINVAL for a server c-ares refuses, -ENOMEM,
 *         or -EIO when c-ares does not start.
 */
int sv_resolver_new(uv_loop_t *loop, const sv_dns_options *opts, sv_resolver **out);

/**
 * Close: every pending request's callback runs with -ECANCELED, then the handles close and the
 * resolver frees itself once they are closed (run the loop). NULL-safe.
 */
void sv_resolver_close(sv_resolver *r);

/** The resolver's strategy (address families it asks for, and the preferred one). */
enum sv_dns_strategy sv_resolver_strategy(const sv_resolver *r);

/**
 * Resolve @p host (a name, not an IP literal). A fresh cached answer is returned at once; else
 * @p req joins the name's query (started if none is in flight) and its callback follows once,
 * unless sv_dns_cancel() is called first.
 * @param out  filled on a fresh positive answer (return 0)
 * @return 0 (answered now, *out filled), 1 (pending: req->cb follows), or < 0: a cached negative
 *         answer (as in sv_dns_cb) or -ENOBUFS / -ENOMEM when no query can be started.
 */
int sv_dns_resolve(sv_resolver *r, sv_dns_req *req, const char *host, sv_dns_cb cb,
                   sv_dns_result *out);

/** Stop waiting: no callback follows for @p req. Does nothing when @p req is not pending. */
void sv_dns_cancel(sv_dns_req *req);

/**
 * Happy Eyeballs v2 order (RFC 8305 §4, "First Address Family Count" 1): drop the addresses of a
 * family @p strategy excludes, then alternate families starting with the preferred one (IPv4 for
 * prefer_ipv4 / ipv4_only, IPv6 otherwise), each family keeping the server's order. In place.
 */
void sv_dns_order(sv_dns_result *res, enum sv_dns_strategy strategy);

/** Cache introspection for tests: the number of names held, and queries started so far. */
size_t sv_resolver_cached(const sv_resolver *r);
uint64_t sv_resolver_queries(const sv_resolver *r);

#endif
