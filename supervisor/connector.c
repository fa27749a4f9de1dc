/*
 * The connector (connector.h; seed 002): route, audit, refuse, target, flow record, and the
 * link's setup and registration, for every kind of flow. Calls down only: the router, the
 * internal-address rule (netclass.h), the audit table, the resolvers, flow records (flow.h).
 * Every refusal is counted by reason (sv_refusal) and said at debug level.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/connector.h"
#include "supervisor/flow.h"
#include "supervisor/netclass.h"
#include "supervisor/router.h"
#include "supervisor/track/audit.h"
#include "supervisor/util/log.h"

#define MOD "sv.connector"

/* What lets a flow to an internal destination through, for the log line (the operator's
 * knob: packaging/man/katana.man.md `nodes[].allow_private`). */
#define ALLOW_HINT "set nodes[].allow_private to true to allow it"

sv_close_reason sv__connector_reason(sv_connect_verdict v)
{
    switch (v) {
    case SV_CONNECT_OK:
        return SV_CLOSE_END;
    case SV_CONNECT_DRAINED:
        return SV_CLOSE_KILL;
    default:
        return SV_CLOSE_ERROR;
    }
}

/* One more refusal @p why on worker @p w (its own row: a relaxed load and store). */
static void refusal_count(sv_worker *w, sv_refusal why)
{
    _Atomic uint64_t *n = &w->shared->refusals[w->index % SV_WORKERS_MAX].n[why];
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* The debug line of one refusal; @p what says why in the operator's words. */
static void refusal_say(uint64_t session, uint64_t user, const char *inbound,
                        enum sv_network net, const char *dest, const char *what)
{
    sv_log_write(SV_LOG_DEBUG, MOD, "session %llu user %llu (node %s): %s to %s refused: %s",
                 (unsigned long long)session, (unsigned long long)user, inbound,
                 net == SV_NET_UDP ? "udp" : "tcp", dest, what);
}

/* The internal class of @p ip in words; an address of no class is one of the node's own. */
static const char *internal_class(const sv_ip16 *ip)
{
    switch (sv_addr_classify(AF_INET6, ip->b)) {
    case SV_ADDR_UNSPECIFIED:
        return "unspecified address";
    case SV_ADDR_LOOPBACK:
        return "loopback";
    case SV_ADDR_PRIVATE:
        return "private network";
    case SV_ADDR_SHARED:
        return "shared address space";
    case SV_ADDR_LINK_LOCAL:
        return "link-local";
    case SV_ADDR_MULTICAST:
        return "multicast";
    case SV_ADDR_RESERVED:
        return "reserved";
    default:
        return "an address of this node";
    }
}

/* Count refusal @p why of @p rq (routed to @p dec) on @p w and, only at debug level (the hot
 * path formats nothing otherwise), say it; @p audit_id is the panel's id of an audit rule
 * that blocked it, else -1. */
static void refused(sv_worker *w, const sv_connector_req *rq, const sv_decision *dec,
                    sv_refusal why, int64_t audit_id)
{
    refusal_count(w, why);
    if (SV_LOG_DEBUG > sv_log_threshold)
        return;
    char dest[300], what[160];
    sv_dest_format(rq->dest, dest, sizeof dest);
    sv_ip16 ip;
    switch (why) {
    case SV_REFUSE_PRIVATE:
        sv_ip16_from(rq->dest->atyp == SV_ATYP_IPV4 ? AF_INET : AF_INET6, rq->dest->ip, &ip);
        snprintf(what, sizeof what, "private destination (%s); " ALLOW_HINT,
                 internal_class(&ip));
        break;
    case SV_REFUSE_BLOCKED:
        if (dec->rule < 0)
            snprintf(what, sizeof what, "blocked by the default route");
        else if (audit_id >= 0)
            snprintf(what, sizeof what, "blocked by route %lld (an audit rule: the hit is "
                     "reported to the panel)", (long long)audit_id);
        else
            snprintf(what, sizeof what, "blocked by route rule %d", dec->rule);
        break;
    default:
        snprintf(what, sizeof what, "no memory for its flow record");
        break;
    }
    refusal_say(rq->sess->info.id, rq->principal != NULL ? rq->principal->id : 0, rq->inbound,
                rq->network, dest, what);
}

/* A flow of @p rq that route decision @p dec (of @p r) refuses: blocked, by an audit rule
 * (a panel's block route) or another. */
static void refused_by_route(sv_worker *w, const sv_routes *r, const sv_connector_req *rq,
                             const sv_decision *dec)
{
    int64_t id = -1;
    if (dec->rule < 0 || !sv_routes_rule_audit(r, dec->rule, &id))
        id = -1;
    refused(w, rq, dec, SV_REFUSE_BLOCKED, id);
}

void sv__connector_refused_name(sv_worker *w, const sv_flow_rec *f)
{
    refusal_count(w, SV_REFUSE_PRIVATE);
    if (SV_LOG_DEBUG <= sv_log_threshold)
        refusal_say(f->info.session, f->info.user, f->info.inbound, f->info.network,
                    f->info.destination, "private destination (the name resolves to an "
                    "internal address); " ALLOW_HINT);
}

/* Connector step "audit" (seed 002 "forbidden"): when @p rule of @p r (a decision's
 * rule) is an audit rule, the hit of @p user on @p inbound goes to @p s->audit. The flow itself
 * is refused (or the datagram dropped) by the rule's outbound, as for any block route. */
static void audit_hit(sv_shared *s, const sv_routes *r, int rule, const char *inbound,
                      uint64_t user)
{
    int64_t id;
    if (rule >= 0 && s->audit != NULL && sv_routes_rule_audit(r, rule, &id))
        sv_audit_note(s->audit, inbound, user, id, sv__wall_ms());
}

/* The resolver for a flow routed with @p dns_server (sv_decision.dns_server: a
 * panel `dns` route): NULL → the worker's own; else @p w's resolver for that server (the workers'
 * timeout and strategy), made on first use and kept until the worker ends (worker.c closes
 * them). Past SV_ROUTE_RESOLVERS_MAX servers in the worker's life, or when c-ares refuses one:
 * the worker's own. */
static sv_resolver *route_resolver(sv_worker *w, const char *dns_server)
{
    if (dns_server == NULL)
        return w->resolver;
    struct sv_route_resolver *slot = NULL;
    for (size_t i = 0; i < SV_ROUTE_RESOLVERS_MAX; i++) {
        struct sv_route_resolver *e = &w->route_resolvers[i];
        if (e->r != NULL && strcmp(e->server, dns_server) == 0)
            return e->r;
        if (e->r == NULL && slot == NULL)
            slot = e;
    }
    sv_dns_options opts = w->shared->dns;
    opts.n_servers = 1;
    snprintf(opts.servers[0], sizeof opts.servers[0], "%s", dns_server);
    if (slot == NULL || sv_resolver_new(&w->loop, &opts, &slot->r) != 0) {
        if (slot != NULL)
            slot->r = NULL;
        return w->resolver; /* full (links hold the others), or c-ares refused it */
    }
    snprintf(slot->server, sizeof slot->server, "%s", dns_server);
    return slot->r;
}

/* is @p d an IP destination that may not be dialled (an internal address, or one of
 * the node's own @p own), unless @p allow_private or the route named it (@p names_dest)? */
static bool dest_refused(const sv_dest *d, bool allow_private, bool names_dest,
                         const sv_addrset *own)
{
    sv_ip16 ip;
    if (d->atyp == SV_ATYP_DOMAIN) /* a name is judged by what it resolves to, at the dial */
        return false;
    return sv_ip16_from(d->atyp == SV_ATYP_IPV4 ? AF_INET : AF_INET6, d->ip, &ip) &&
           sv_dest_refused(allow_private, names_dest, &ip, own);
}

sv_connect_verdict sv__connector_route(sv_worker *w, const sv_plane *plane,
                                       const sv_connector_req *rq, sv_connector_result *out)
{
    const sv_routes *routes = plane->routes->routes;
    sv_route_query q = {.dest = rq->dest, .sniffed = rq->sniffed, .inbound = rq->inbound,
                        .source = rq->source, .network = rq->network};
    memset(out, 0, sizeof *out);
    out->dec = sv_routes_decide(routes, &q);
    out->epoch = plane->epoch;
    if (rq->principal != NULL)
        audit_hit(w->shared, routes, out->dec.rule, rq->inbound, rq->principal->id);
    out->target = plane->targets[out->dec.slot];
    bool blocks = out->target->ops->refuses_all; /* a block route: counted as the route's */
    if (rq->network == SV_NET_UDP && out->target->ops->dgram_send == NULL) {
        refused_by_route(w, routes, rq, &out->dec);
        return SV_CONNECT_NO_DATAGRAMS;
    }
    if (dest_refused(rq->dest, rq->allow_private, out->dec.names_dest, w->own_addrs)) {
        if (blocks)
            refused_by_route(w, routes, rq, &out->dec);
        else
            refused(w, rq, &out->dec, SV_REFUSE_PRIVATE, -1);
        return SV_CONNECT_INTERNAL;
    }
    if (blocks) /* its outbound refuses the stream at the dial */
        refused_by_route(w, routes, rq, &out->dec);
    out->resolver = route_resolver(w, out->dec.dns_server);
    out->allow_internal = rq->allow_private || out->dec.names_dest;
    return SV_CONNECT_OK;
}

sv_connect_verdict sv__connector_record(sv_worker *w, const sv_connector_req *rq, void *owner,
                                        sv_connector_result *r)
{
    uint64_t user = rq->principal != NULL ? rq->principal->id : 0;
    r->flow = sv__flow_new(w->index, owner, rq->sess, user, rq->dest, rq->sniffed, rq->network,
                           r->target, r->dec.rule, r->epoch);
    if (r->flow == NULL)
        refused(w, rq, &r->dec, SV_REFUSE_NO_MEMORY, -1);
    return r->flow != NULL ? SV_CONNECT_OK : SV_CONNECT_NO_MEMORY;
}

sv_connect_verdict sv__connector_open(sv_worker *w, const sv_plane *plane,
                                      const sv_connector_req *rq, void *owner,
                                      sv_connector_result *out)
{
    sv_connect_verdict v = sv__connector_route(w, plane, rq, out);
    return v != SV_CONNECT_OK ? v : sv__connector_record(w, rq, owner, out);
}

/* The environment of a link of @p r's flow on worker @p w. */
static sv_ob_env link_env(sv_worker *w, const sv_connector_result *r)
{
    return (sv_ob_env){&w->loop, &w->own_addrs, r->resolver, &r->target->sock};
}

void sv__connector_stream(sv_worker *w, const sv_connector_result *r, sv_ob_stream *ob)
{
    ob->ops = r->target->ops;
    ob->env = link_env(w, r);
    ob->allow_internal = r->allow_internal;
}

void sv__connector_dgram(sv_worker *w, const sv_connector_result *r, sv_ob_dgram *g)
{
    g->ops = r->target->ops;
    g->env = link_env(w, r);
}

sv_connect_verdict sv__connector_opened(sv_worker *w, sv_flow_rec *f, const sv_target *t)
{
    return sv__flow_opened(w->shared->tracker, f, t) ? SV_CONNECT_OK : SV_CONNECT_DRAINED;
}
