/*
 * Lowering: panel model (panel/model.h) → supervisor spec (supervisor/supervisor.h). Pure: no
 * I/O except warnings through SV_LOG ("ag.lower"); never logs a uuid.
 *
 * One node of type shadowsocks becomes an inbound and a user set, both tagged with the node tag,
 * plus one route rule per `block` route scoped to that inbound. All nodes share the outbounds
 * "direct" (freedom, under the config's `outbound` socket policy) and "block" (blackhole) and the
 * default route "direct"; a node with its own `outbound` has a direct outbound tagged
 * with its tag and a last rule of its inbound to it.
 */
#ifndef AG_LOWER_H
#define AG_LOWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "panel/model.h"
#include "supervisor/supervisor.h"

#define AG_OUTBOUND_DIRECT "direct"
#define AG_OUTBOUND_BLOCK "block"
#define AG_DEFAULT_LISTEN "0.0.0.0"

/** What the agent knows about one node: config (tag, listen) plus the panel's last good data. */
typedef struct ag_node_state {
    char *tag;      /**< node tag from the config */
    char *listen;   /**< config `listen` override, or NULL */
    bool allow_private; /**< config `allow_private` → sv_inbound_spec.allow_private */
    bool accept_proxy_protocol; /**< config `accept_proxy_protocol` → sv_inbound_spec */
    bool no_auth;   /**< config `no_auth` → sv_inbound_spec.proxy_no_auth */
    sv_cidr trusted_forwarders[SV_TRUSTED_FORWARDERS_MAX]; /**< config `trusted_forwarders` */
    unsigned n_trusted_forwarders; /**< → sv_inbound_spec.n_trusted_forwarders */
    uint64_t speed_limit; /**< config `speed_limit`, Mbps, 0 = none */
    enum sv_cert_source cert; /**< config `cert.mode` → sv_inbound_spec.tls */
    char *cert_file;          /**< config `cert.cert_file` (resolved), or NULL */
    char *key_file;           /**< config `cert.key_file` (resolved), or NULL */
    char *fallback;           /**< config `fallback` "HOST:PORT", or NULL */
    sv_policy user_removal;   /**< config `user_removal` → sv_inbound_spec */
    bool has_outbound;        /**< config `outbound`: the node's own direct outbound */
    sv_socket_policy outbound; /**< its socket policy */
    pn_node node;   /**< the panel's node settings */
    pn_users users; /**< the panel's user list */
} ag_node_state;

/** Every node of a config, in config order. */
typedef struct ag_fleet {
    ag_node_state *nodes;
    size_t n;
    sv_policy user_removal, drain; /**< config `policies` → sv_spec */
    sv_socket_policy outbound; /**< config `outbound`: the shared "direct"'s policy */
} ag_fleet;

/** Free what a fleet owns and zero it. NULL-safe. */
void ag_fleet_free(ag_fleet *fleet);

/** Free what one node state owns and zero it (not the struct). NULL-safe. */
void ag_node_state_free(ag_node_state *st);

/**
 * Compose the spec of every node of @p fleet: the shared outbounds and default route, then each
 * node's inbound, user set and rules (see ag_lower_node()). Duplicate node tags are not checked
 * here: sv_validate reports them ("duplicate inbound tag x").
 * @param out  overwritten; owned by the caller on success (sv_spec_free), zeroed on failure
 * @return 0, -EINVAL (err: "node demo: unsupported shadowsocks cipher \"x\"" ...), -ENOMEM.
 */
int ag_lower_fleet(const ag_fleet *fleet, sv_spec *out, sv_error *err);

/**
 * Append one node to @p spec: inbound {tag, bind = listen override / panel listen_ip /
 * "0.0.0.0" : server_port, udp, shadowsocks, cipher, users = tag, allow_private}, the user set (see
 * ag_lower_user_set()) and one rule per `block` route (see ag_lower_match()), then one per
 * `dns` route (same matchers, to the node's direct outbound, with the route's
 * action_value as the rule's dns_server; an unserved server is skipped with a warning). Other
 * route actions are ignored with a warning each. Settings katana does not serve are refused naming the
 * field. A node with its own `outbound` also gets a direct outbound tagged
 * with the node's tag under that socket policy, and a last rule of the inbound's sending every
 * flow (tcp and udp) there. Refused: a `network` other than "tcp", `networkSettings` / `network_settings`, `tls`,
 * `multiplex` enabled, `obfs`, `plugin`, `custom_outbounds`, `custom_routes` (see
 * enum pn_node_set for what counts as set).
 * @return 0, -EINVAL for an unsupported protocol or cipher or an unserved setting (err: "node
 *         demo: network \"grpc\": not served (...)"), -ENOMEM. On failure @p spec may hold part
 *         of the node; the caller frees the whole spec.
 */
int ag_lower_node(const ag_node_state *node, sv_spec *spec, sv_error *err);

/**
 * Lower a user list into a user set tagged @p tag: id = panel id, secret = uuid, label = the id
 * in decimal (never the uuid: it is the password), speed_limit = Mbps × 1 000 000 / 8 bytes/s,
 * device_limit as given (PANEL.md §1.5; 0 = unlimited).
 * @param out  overwritten; on success owned by the caller (sv_user_set_free)
 * @return 0 or -ENOMEM.
 */
int ag_lower_user_set(const char *tag, const pn_users *users, sv_user_set *out, sv_error *err);

/**
 * Make a shed user list whole again (memory per user): rebuild it from @p set, the
 * supervisor's running user set lowered from that very list by ag_lower_user_set() (same users,
 * same order): ids, uuids (the secrets) and device limits from @p set; speed limits from @p list
 * when pn_users_shed() kept them, else from @p set in Mbps (÷ 125 000, the inverse of
 * ag_lower_speed(), exact for every speed a panel parser accepts; so a list may drop its limits
 * only when the node has no speed limit of its own, which caps the set's). pn_users_restore()
 * checks the result against the list's digest. A list that is not shed is left alone.
 * @return 0, -ESTALE when @p set is NULL or is not the list shed, -ENOMEM.
 */
int ag_users_refill(pn_users *list, const sv_user_set *set);

/** Mbps → bytes per second (× 125 000), saturating at UINT64_MAX. */
uint64_t ag_lower_speed(uint64_t mbps);

/**
 * Apply the node's own `speed_limit` (@p node_mbps, Mbps, 0 = none) to a lowered user set: each
 * user's limit becomes the smallest non-zero of the node's and the panel's (the panels'
 * conversion, ag_lower_speed()).
 */
void ag_lower_node_speed(sv_user_set *set, uint64_t node_mbps);

/**
 * Map a Shadowsocks method name: aes-128-gcm, aes-256-gcm, chacha20-ietf-poly1305 (also
 * "chacha20-poly1305") (PROTOCOLS.md §2.1), and the Shadowsocks 2022 methods
 * 2022-blake3-aes-128-gcm, 2022-blake3-aes-256-gcm, 2022-blake3-chacha20-poly1305 (§3.1).
 * @return 0, or -EINVAL for any other name.
 */
int ag_lower_cipher(const char *name, enum sv_ss_cipher *out);

/** Result of ag_lower_match() for entries that produce no matcher. */
enum ag_match_result {
    AG_MATCH_OK = 0,      /**< *out filled (its text, if any, is heap-owned) */
    AG_MATCH_SKIPPED = 1,   /**< protocol:<name> — sniffed protocols are not supported */
    AG_MATCH_BAD_REGEX = 2, /**< a regex that does not compile or can match "" (skipped) */
};

/**
 * Pre-check a block-route regex before it goes into a spec (PANEL.md §1.4, §5 item 5):
 * it must compile with PCRE2 (caseless, as the router compiles it) and its minimum match length
 * must not be 0 — a pattern that can match an empty string (`a||b`, `x*`, `\b`) would block
 * every destination. @p why (cap bytes, may be NULL) receives the reason on refusal.
 * @return 0 usable, -EINVAL refused.
 */
int ag_regex_check(const char *pattern, char *why, size_t cap);

/**
 * Lower one `match` entry of a block route (every entry is a regex, PANEL.md §1.4).
 * Explicit prefixes keep their meaning: "domain:x" → domain_suffix, "full:x" → domain,
 * "keyword:x" → domain_keyword, "port:N" / "port:N-M" → port range, an IPv4/IPv6 address or
 * CIDR → cidr (host bits cleared). "regexp:X" (prefix stripped, as V2bX does) and any other
 * non-empty string → SV_MATCH_REGEX over the destination and sniffed names, after
 * ag_regex_check(); "protocol:..." → AG_MATCH_SKIPPED.
 * @return AG_MATCH_OK, AG_MATCH_SKIPPED, AG_MATCH_BAD_REGEX, -EINVAL (malformed: empty, bad
 *         port or prefix), -ENOMEM.
 */
int ag_lower_match(const char *entry, sv_route_match *out);

/** The address a node binds: its config override, else the panel's listen_ip, else 0.0.0.0. */
const char *ag_node_listen(const ag_node_state *node);

/**
 * Whether two node states lower to the same inbound and rules, i.e. differ at most in users
 * (then a user edit, sv_set_users, is enough). Compares tag, effective listen, allow_private and
 * the panel node.
 */
bool ag_node_settings_equal(const ag_node_state *a, const ag_node_state *b);

/**
 * Whether the transport/protocol settings match (seed 001 "NodeInfo::transport_eq /
 * protocol_eq": port, listen, protocol, network, the PN_SET_* settings, cipher, server key,
 * obfs, plugin). When they differ, the
 * node's live sessions are closed after the apply.
 */
bool ag_node_transport_equal(const ag_node_state *a, const ag_node_state *b);

#endif
