/*
 * Compiled routes (seed 000, "compile routes"): rules tried in order, a rule matches when any of
 * its matchers matches (and, katana's addition, the flow came from one of its inbounds when it
 * lists any); no match → the default. The table points at slots, not outbounds: each distinct
 * tag named by a rule or the default gets one slot, numbered by first appearance (the default's
 * tag last when no rule names it). The plane fills slots with targets. Pure: no I/O.
 */
#ifndef SV_ROUTER_H
#define SV_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "supervisor/proto/core.h"
#include "supervisor/supervisor.h"

typedef struct sv_routes sv_routes;

/** What the router matches a flow on (seed 000, route_target). Missing fields never match. */
typedef struct sv_route_query {
    const sv_dest *dest;           /**< requested destination (domain or IP) */
    const char *sniffed;           /**< sniffed host name or NULL: an extra domain candidate */
    const char *inbound;           /**< inbound tag */
    const struct sockaddr *source; /**< client address or NULL */
    enum sv_network network;       /**< always set */
} sv_route_query;

/**
 * The outcome: a slot, the index of the rule that matched (-1 = the default route), and whether
 * that rule named the requested destination itself (such a rule lets a flow reach an
 * internal address, see sv_dest_refused()): one of its domain, domain_suffix, domain_keyword or
 * regex matchers matched the destination's name, or one of its cidr matchers its IP. A rule
 * that matched only on port, network, inbound, source or the sniffed name does not name it.
 * dns_server is the matching rule's (a panel `dns` route): the server that resolves
 * the flow's name, owned by the routes; NULL = the workers' resolver. A rule with a dns_server
 * never names the destination: it changes how a name resolves, not what may be reached.
 */
typedef struct sv_decision {
    uint32_t slot;
    int rule;
    bool names_dest;
    const char *dns_server;
} sv_decision;

/**
 * Compile @p spec. Assumes it passed validation.
 * @return 0, -ENOMEM, or -EINVAL with err->msg ("building route failed: ...").
 */
int sv_routes_compile(const sv_route_spec *spec, sv_routes **out, sv_error *err);

/** A table with no rules whose default is @p tag (the empty plane uses it). NULL on OOM. */
sv_routes *sv_routes_single(const char *tag);

/** Free a compiled table. NULL-safe. */
void sv_routes_free(sv_routes *r);

/** Number of slots, and the tag each slot stands for (borrowed). */
size_t sv_routes_n_slots(const sv_routes *r);
const char *sv_routes_slot_tag(const sv_routes *r, size_t slot);

/**
 * Route one flow or datagram: the first rule (in order) that applies to q->inbound and has a
 * matching matcher, else the default (rule -1, names_dest false). Thread-safe (reads only); never allocates,
 * except one PCRE2 match-data block per thread on that thread's first regex match.
 * Matching: domain names ignore ASCII case and one trailing dot, and q->sniffed is tried as a
 * second name (regexes too, searched unanchored and caseless; regexes also in an IP
 * destination's literal, "1.2.3.4" or "::1", no port in any of them); a domain destination matches
 * CIDR rules only when its text is an IP literal; an IPv4-mapped IPv6 address matches as IPv4;
 * a missing field (dest, source, inbound) never matches.
 */
sv_decision sv_routes_decide(const sv_routes *r, const sv_route_query *q);

/**
 * Is rule @p rule (an sv_decision.rule; -1 = the default) an audit rule?
 * @param id  receives its audit_id when it is
 */
bool sv_routes_rule_audit(const sv_routes *r, int rule, int64_t *id);

/**
 * The source a flow is routed on (seed 000, route_target: `flow.source.or(ctx.source)`): the
 * flow's own client address when it has one, else the listener's peer address, else NULL (then
 * no source_cidr rule matches). Both borrowed; returns one of them.
 */
const struct sockaddr *sv_route_source(const struct sockaddr *flow_source,
                                       const struct sockaddr *listener_source);

#endif
