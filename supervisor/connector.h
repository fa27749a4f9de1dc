/*
 * The connector (connector.c; seed 002, DESIGN.md "The connector"): the one path from a new
 * flow's destination to its outbound link, for every kind of flow: a TCP connection's flow, a
 * sub-flow of a multiplexed connection (Mux.Cool, gRPC stream), a UDP datagram's sub-link, and
 * any kind to come (a QUIC stream is a stream, a QUIC datagram a datagram). What differs between
 * the kinds is the request (sv_connector_req); the steps are the same:
 *
 *   route (the plane's routes, the sniffed name an extra candidate) → audit (a hit of an audit
 *   rule is noted) → refuse (a datagram routed to an outbound that carries none; an internal IP
 *   the route did not name) → target (its outbound version, the resolver of its dns route) →
 *   flow record → dial (the caller opens the link sv__connector_stream / sv__connector_dgram
 *   pointed at the target) → register (sv__connector_opened, once the dial completed, which
 *   fails a flow whose version was drained meanwhile).
 *
 * The connector opens no link itself and calls nothing of its callers: each owns its link (an
 * sv_ob_stream or sv_ob_dgram with its own events) and ends it for the reason the connector
 * gives (sv__connector_reason). Worker thread only.
 */
#ifndef SV_CONNECTOR_H
#define SV_CONNECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "supervisor/plane.h"
#include "supervisor/shared.h"

/** What the connector is asked to connect: the part of a new flow that differs by kind. */
typedef struct sv_connector_req {
    /** SV_NET_TCP: a stream (routed as TCP, dialled with an sv_ob_stream); SV_NET_UDP: a
     *  datagram sub-link (routed as UDP; its target must carry datagrams) */
    enum sv_network network;
    const sv_dest *dest;           /**< the requested destination (borrowed for the call) */
    const char *sniffed;           /**< the name sniffed from its first payload, or NULL */
    const char *inbound;           /**< the tag of the inbound it came in on */
    const struct sockaddr *source; /**< the client's address (route source rules) */
    /** who the flow acts for (borrowed), or NULL: nobody (no audit hit, user 0) */
    const sv_principal *principal;
    const sv_session_rec *sess;    /**< the session its flow record belongs to */
    /** the inbound's allow_private as the caller holds it: internal destinations
     *  may be dialled */
    bool allow_private;
} sv_connector_req;

/** What the connector decided for a request it did not refuse. */
typedef struct sv_connector_result {
    sv_decision dec;        /**< the route's decision (its rule: -1 = the default route) */
    /** the outbound version the flow is opened on, held by the plane: the flow takes its own
     *  reference (sv_target_ref) before the loop turns */
    sv_target *target;
    sv_resolver *resolver;  /**< where the link resolves names: the dns route's, else the
                                 worker's */
    bool allow_internal;    /**< a name that resolves to an internal address may be dialled
                                 (allow_private, or a route that named the destination) */
    uint64_t epoch;         /**< the plane's epoch */
    /** the flow record (sv__connector_record), owned by the caller: free() while unregistered,
     *  else the tracker's; NULL before it is made */
    sv_flow_rec *flow;
} sv_connector_result;

/** The connector's answer. Every refusal is silent to the client (no answer); the operator
 *  sees it counted by reason (sv_refusal, /metrics katana_flows_refused_total) and, at debug
 *  level, one log line per refusal ("... refused: <why>"). */
typedef enum sv_connect_verdict {
    SV_CONNECT_OK = 0,
    /** an internal IP the route did not name: refused like a blocked route */
    SV_CONNECT_INTERNAL,
    /** a datagram routed to an outbound without datagram ops (a blackhole): dropped, not
     *  billed (seed 002) */
    SV_CONNECT_NO_DATAGRAMS,
    /** its flow record could not be allocated */
    SV_CONNECT_NO_MEMORY,
    /** registered on an outbound version drained while it dialled (seed 000 "Guarded") */
    SV_CONNECT_DRAINED,
} sv_connect_verdict;

/**
 * The close reason of a flow the connector refused for @p v: SV_CLOSE_KILL for
 * SV_CONNECT_DRAINED (a drain ends its version's flows), SV_CLOSE_ERROR for every other
 * refusal; SV_CLOSE_END for SV_CONNECT_OK.
 */
sv_close_reason sv__connector_reason(sv_connect_verdict v);

/**
 * Connector steps route → audit → refuse → target for @p rq, on @p plane (the worker's current
 * plane: seed 000, each new flow and each datagram reads it once) of worker @p w. Routes the
 * destination (the sniffed name as an extra domain candidate, sv_routes_decide); notes the hit
 * of an audit rule for rq->principal (the rule's outbound refuses the flow at its
 * dial, as any block route); refuses a datagram kind whose target carries no datagrams, then an
 * IP destination that sv_dest_refused() refuses; picks the resolver of the route's
 * dns_server (made on first use, kept until the worker ends; past SV_ROUTE_RESOLVERS_MAX
 * servers, or one c-ares refuses: the worker's own). Fills @p out but its flow (NULL).
 * Counts (sv_refusal) and at debug level says every refusal: a datagram without datagram
 * ops and any flow routed to an outbound that refuses all (refuses_all: a block route,
 * "blocked"; the stream is refused at its dial), an internal IP ("private").
 * @return SV_CONNECT_OK, SV_CONNECT_NO_DATAGRAMS or SV_CONNECT_INTERNAL (then @p out holds the
 *         decision and target only).
 */
sv_connect_verdict sv__connector_route(sv_worker *w, const sv_plane *plane,
                                       const sv_connector_req *rq, sv_connector_result *out);

/**
 * A stream of flow @p f (worker @p w's, unregistered) whose outbound refused it at the dial
 * because its name resolved to an internal address (sv_ob_stream.refused_internal): counted
 * as an SV_REFUSE_PRIVATE refusal and, at debug level only, said ("session S user U (node N):
 * tcp to localhost:80 refused: private destination (the name resolves to an internal
 * address); set nodes[].allow_private to true to allow it"). Worker thread.
 */
void sv__connector_refused_name(sv_worker *w, const sv_flow_rec *f);

/**
 * Connector step "flow record" for @p rq, routed into @p r by sv__connector_route: a record of
 * worker @p w, owned by @p owner (the object a kill reaches), with the session, user,
 * destination, sniffed name, network, target "tag@vN", rule and epoch, started now
 * (sv__flow_new). Sets r->flow.
 * @return SV_CONNECT_OK, or SV_CONNECT_NO_MEMORY (r->flow NULL).
 */
sv_connect_verdict sv__connector_record(sv_worker *w, const sv_connector_req *rq, void *owner,
                                        sv_connector_result *r);

/**
 * sv__connector_route, then sv__connector_record: for a kind whose every flow has its own
 * record (a TCP flow, a sub-flow, a QUIC stream).
 * @return the first refusal, else SV_CONNECT_OK.
 */
sv_connect_verdict sv__connector_open(sv_worker *w, const sv_plane *plane,
                                      const sv_connector_req *rq, void *owner,
                                      sv_connector_result *out);

/**
 * Point outbound stream @p ob at @p r's target: its ops, the link's environment (@p w's loop
 * and own addresses, r's resolver, the target's socket policy, which the flow's target
 * reference keeps) and allow_internal. The owner sets ev and owner; it then dials with
 * ob->ops->open (a blackhole refuses there; direct refuses a name that resolves internal).
 */
void sv__connector_stream(sv_worker *w, const sv_connector_result *r, sv_ob_stream *ob);

/** The same for datagram link @p g (then g->ops->dgram_open; each send passes
 *  r->allow_internal). */
void sv__connector_dgram(sv_worker *w, const sv_connector_result *r, sv_ob_dgram *g);

/**
 * Connector step "register" (seed 000 "Guarded", seed 002), once flow @p f's dial on @p t
 * completed: the flow goes to @p w's tracker (which owns it from now), then @p t's closed token
 * is checked, in that order (sv__flow_opened).
 * @return SV_CONNECT_OK: the flow relays; SV_CONNECT_DRAINED: @p t was drained while it
 *         dialled (logged at debug level with SV_DRAINED_TEXT): the caller ends it at once,
 *         for sv__connector_reason (a sub-flow with its End, a sub-link drops its datagram).
 */
sv_connect_verdict sv__connector_opened(sv_worker *w, sv_flow_rec *f, const sv_target *t);

#endif
