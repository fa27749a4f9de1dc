/*
 * The runtime's immutable, reference-counted objects (plane.c; seed 000 "plane"): an inbound's
 * handler (its core, credentials and principals), an outbound version (target), compiled routes
 * and the plane that binds them. Built by the control loop, read by every worker.
 */
#ifndef SV_PLANE_H
#define SV_PLANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "supervisor/crypto/replay.h"
#include "supervisor/outbound/outbound.h"
#include "supervisor/principal.h"
#include "supervisor/proto/dgram.h"
#include "supervisor/proto/proto.h"
#include "supervisor/router.h"
#include "supervisor/supervisor.h"
#include "supervisor/transport/layer.h"

/* The inbound's transport settings a handler holds (transport/tls.h, ws.h, reality.h): the
 * runtime passes them to the layers and never looks inside. */
typedef struct sv_tls_ctx sv_tls_ctx;
typedef struct sv_ws_conf sv_ws_conf;
typedef struct sv_reality_conf sv_reality_conf;

/** A salt replay filter shared by every handler of one inbound. */
typedef struct sv_replay_ref {
    _Atomic int refs;
    sv_replay *filter;
} sv_replay_ref;

/**
 * What serves new connections of one inbound: its protocol core, the core's credential table and
 * the principals of its users. Immutable and reference-counted; a listener swaps it without
 * touching live connections.
 */
typedef struct sv_handler {
    _Atomic int refs;
    char tag[SV_TAG_MAX + 1];
    const sv_proto_ops *ops;   /**< the inbound's protocol core */
    void *creds;               /**< ops->creds_new() of the user set (immutable, shared) */
    sv_inbound_spec in;        /**< the inbound's scalar settings (tag points at .tag; strings NULL) */
    sv_principal **principals; /**< one reference per user, indexed like the credential table */
    size_t n_users;
    sv_replay_ref *replay;
    bool allow_private; /**< sv_inbound_spec.allow_private */
    sv_tls_ctx *tls;    /**< the inbound's TLS context (a reference), or NULL: plain TCP */
    sv_ws_conf *ws;     /**< the inbound's WebSocket or HTTPUpgrade settings, or NULL: none */
    sv_reality_conf *reality; /**< the inbound's REALITY settings and certificate, or NULL */
    sv_layer_conf layers[SV_CHAIN_MAX]; /**< the inbound's transport layers above TCP, bottom
                                             first (their confs are owned by this handler) */
    unsigned n_layers;                  /**< 0 = plain TCP */
    bool has_fallback;  /**< sv_inbound_spec.fallback was given: fallback is where it points */
    sv_dest fallback;
} sv_handler;

/** One outbound version (seed 000 "targets"): what a plane slot points at. */
typedef struct sv_target {
    _Atomic int refs;
    const sv_outbound_ops *ops; /**< its implementation (outbound/): the connector opens through it */
    char id[SV_TAG_MAX + 16]; /**< "tag@vN" */
    char tag[SV_TAG_MAX + 1];
    uint64_t version; /**< per tag, from 1 (seed 001 OutboundId); 0 = the supervisor's own */
    sv_socket_policy sock; /**< its outbound's socket policy; zero = none */
    /** The version's closed token (seed 000 "Guarded"): set once by a Close drain
     *  (sv_target_close, control loop), read by every dial on it that completes
     *  (sv__flow_opened, workers) */
    _Atomic bool closed;
} sv_target;

typedef struct sv_routes_ref {
    _Atomic int refs;
    sv_routes *routes;
} sv_routes_ref;

/** The immutable plane: compiled routes, one target per slot, its epoch (RCU, seed 000). */
typedef struct sv_plane {
    _Atomic int refs;
    sv_routes_ref *routes;
    sv_target **targets; /**< n_slots entries */
    size_t n_slots;
    uint64_t epoch;
} sv_plane;

/** The protocol core serving inbound @p in (its protocol; Shadowsocks with ws.mux: Shadowsocks
 *  over Mux.Cool), or NULL when none does. */
const sv_proto_ops *sv_proto_ops_for(const sv_inbound_spec *in);
/** The datagram framing of inbound @p in's own UDP socket (dgram.h), or NULL: none. */
const sv_dgram_ops *sv_dgram_ops_for(const sv_inbound_spec *in);

/**
 * A worker's most recently matched order of a credential table's @p n users (proto_ext.h's
 * struct sv_order, whose layout is the guided core's), made here so the runtime names no core:
 * *@p o is allocated at the first call (owned by the caller, freed by sv__order_free()) and
 * reset to index order.
 * @return 0, or -ENOMEM or -EINVAL (too many users; *@p o then holds no order, or is NULL).
 */
int sv__order_reset(struct sv_order **o, size_t n);
/** Free an order made by sv__order_reset() (NULL: nothing). */
void sv__order_free(struct sv_order *o);
/** User @p i of order @p o matched: it goes first. */
void sv__order_touch(struct sv_order *o, size_t i);

/** What a new handler replaces: the listener's running handler and the running
 *  spec's user set it was built from (both borrowed). */
typedef struct sv_handler_was {
    const sv_handler *handler;
    const sv_user_set *users;
} sv_handler_was;

/**
 * Build the handler of inbound @p in for @p users (may be NULL: no user is admitted): the core's
 * credential table (e.g. one master key per user, PROTOCOLS.md §2.2), one principal per user from
 * the registry (principal.h), and a reference on @p replay, shared with the table.
 * @param was  NULL, or the handler this one replaces: a user of @p users with the same id and
 *             secret in @p was's set (same set tag) keeps its principal there, and the core
 *             copies what it derived for it (creds_new_from), so a reload that changes one user
 *             of 50 000 derives one
 * @return a handler with one reference, or NULL with @p err set (out of memory, or a user set
 *         the protocol refuses, e.g. two Trojan users with one password).
 */
sv_handler *sv_handler_new(const sv_inbound_spec *in, const sv_user_set *users,
                           const sv_handler_was *was, sv_replay_ref *replay, sv_tls_ctx *tls,
                           sv_error *err);
/** Take / drop a reference (any thread); the last unref frees the keys. NULL-safe unref. */
void sv_handler_ref(sv_handler *h);
void sv_handler_unref(sv_handler *h);
/**
 * Does @p now still admit a session that @p was admitted as principal @p p? Yes when @p now has
 * the same protocol settings as @p was (a changed cipher changes every key) and lists @p p (the
 * same user with the same secret). @return the principal's index in @p now, or -1.
 */
int sv_handler_find(const sv_handler *now, const sv_handler *was, const sv_principal *p);

/** A new salt filter with one reference, or NULL on allocation failure. */
sv_replay_ref *sv_replay_ref_new(void);
/** Drop a reference; the last frees the filter. NULL-safe. */
void sv_replay_ref_unref(sv_replay_ref *r);

/** A target "tag@vN" of @p kind with one reference, or NULL on allocation failure (or a kind
 *  sv_outbound_ops_for() does not know). */
sv_target *sv_target_new(enum sv_outbound_kind kind, const char *tag, uint64_t version);
/** Take / drop a reference (any thread). NULL-safe unref. */
void sv_target_ref(sv_target *t);
void sv_target_unref(sv_target *t);

/** What a flow whose outbound version was drained while it dialled fails with (seed 000
 *  "Guarded", the text of its io::ErrorKind::ConnectionAborted). */
#define SV_DRAINED_TEXT "the outbound this flow was opened on was drained"

/**
 * Cancel outbound version @p t's closed token (seed 000 "Guarded", Target::close_flows): from
 * now on every dial on @p t that completes fails (sv__flow_opened). The caller then kills the
 * flows already registered on it (sv_tracker_kill_where on t->id): a flow is either registered
 * before that kill sees the registry, or its check sees the token. Once set, it stays. Any
 * thread (the control loop's drain).
 */
void sv_target_close(sv_target *t);

/** Drop a reference on compiled routes; the last frees them. NULL-safe. */
void sv_routes_ref_unref(sv_routes_ref *r);

/** Build a plane; takes a reference on @p routes and on every target. NULL on OOM. */
sv_plane *sv_plane_new(sv_routes_ref *routes, sv_target *const *targets, size_t n, uint64_t epoch);
/** Take / drop a reference (any thread); a plane is freed when its last flow and worker let go. */
void sv_plane_ref(sv_plane *p);
void sv_plane_unref(sv_plane *p);

#endif
