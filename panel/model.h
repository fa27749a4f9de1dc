/*
 * The panel model: what a panel says about one node and its users, in the UniProxy shapes
 * (PANEL.md §1.4 "GET config", §1.5 "GET user"), and the tolerant parsers of those bodies.
 * Every panel client (local, uniproxy, ...) produces these structures; agent/lower.c turns
 * them into a spec. Plain data: every string is heap-owned by its structure.
 */
#ifndef PN_MODEL_H
#define PN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "supervisor/util/err.h"

/** Bounds on outside bytes (DESIGN.md "every parser of outside bytes has a size bound"). */
#define PN_BODY_MAX (256u << 20) /**< bytes in one panel body (PN_USERS_MAX users, ~250 B each) */
#define PN_USERS_MAX 1000000u   /**< users in one list (= SV_USERS_MAX) */
#define PN_ROUTES_MAX 4096u     /**< routes of one node (= SV_RULES_MAX) */
#define PN_MATCH_MAX 65536u     /**< match entries of one route (= SV_MATCHERS_MAX) */
#define PN_UUID_MAX 256u        /**< bytes in a user's uuid (= SV_SECRET_MAX) */
#define PN_TEXT_MAX 4096u       /**< bytes in any other string field */

/** One `routes[]` entry (PANEL.md §1.4 "routes semantics"). */
typedef struct pn_route {
    int64_t id;          /**< the panel's route id (0 when absent) */
    char **match;        /**< match strings, in order; a comma string is split here */
    size_t n_match;
    char *action;        /**< "block", "dns", "direct", "proxy", ... (never NULL) */
    char *action_value;  /**< NULL when null or absent */
} pn_route;

/**
 * Body keys whose value changes what clients speak or where their traffic goes, recorded in
 * pn_node.set when their value is set — anything but absent, null, false, 0, "", "0", {} and []
 * (for `multiplex`: its `enabled` member) — so that lowering can refuse what katana does not
 * serve instead of ignoring it (PANEL.md §1.4).
 */
enum pn_node_set {
    PN_SET_NETWORK_SETTINGS = 1u << 0,     /**< `networkSettings` (transport options) */
    PN_SET_NETWORK_SETTINGS_ALT = 1u << 1, /**< `network_settings` (the same, §4.6) */
    PN_SET_TLS = 1u << 2,                  /**< `tls`: 1 TLS, 2 REALITY */
    PN_SET_MULTIPLEX = 1u << 3,            /**< `multiplex.enabled` */
    PN_SET_CUSTOM_OUTBOUNDS = 1u << 4,     /**< `custom_outbounds` (newer Xboard) */
    PN_SET_CUSTOM_ROUTES = 1u << 5,        /**< `custom_routes` (newer Xboard) */
    PN_SET_FLOW = 1u << 6,                 /**< `flow` (vless: "xtls-rprx-vision") */
    PN_SET_DECRYPTION = 1u << 7,           /**< `decryption` other than "none" (VLESS
                                                encryption) */
};

/** The REALITY object a node with `tls` 2 sends as `tls_settings` (PANEL.md §1.4),
 *  or SSPanel's custom_config `reality-opts` (§2.5): each member NULL / 0 when absent or null.
 *  `public_key` and `allow_insecure` are the clients' and not read. */
typedef struct pn_reality {
    char *server_name;    /**< the target site's name, also the SNI clients send */
    uint16_t server_port; /**< the target's port (a string or an int in the body); 0 = absent */
    char *private_key;    /**< X25519, base64url (never log it) */
    char *short_id;       /**< hex, at most 16 digits; "" = the all-zero id */
    uint64_t max_time_diff; /**< `max_time_diff` in ms when a panel sends one; 0 = none */
    char *target;         /**< SSPanel `dest` as "host:port" (a bare port N is 127.0.0.1:N,
                               Xray's localhost:N, PROTOCOLS-2.md §1.1); NULL = server_name:
                               server_port */
    char *server_names;   /**< SSPanel `server_names`, joined with ','; NULL = server_name */
    char *short_ids;      /**< SSPanel `short_ids`, joined with ',' (possibly ""); NULL =
                               short_id */
    uint32_t min_client_ver, max_client_ver; /**< SSPanel `min_client_ver` / `max_client_ver`
                               "x.y.z" as x << 16 | y << 8 | z; 0 = no bound */
    uint8_t xver;         /**< SSPanel `proxy_protocol_ver`: 0, 1 or 2 */
} pn_reality;

/** A node's settings from `GET config` (PANEL.md §1.4). Unknown keys are ignored. */
typedef struct pn_node {
    char *protocol;       /**< body `protocol`, else the node type the panel was asked for */
    char *listen_ip;      /**< body `listen_ip`; NULL when absent or null */
    uint16_t server_port; /**< 1..65535; an int or a numeric string in the body */
    char *network;        /**< `network` ("tcp", "ws", "grpc", ...); NULL when absent, null, "" */
    unsigned set;         /**< PN_SET_* bits */
    char *ws_path;        /**< `networkSettings.path` (or `network_settings.path`); NULL when
                               absent or null */
    char *ws_host;        /**< `networkSettings.headers.Host`; NULL when absent or null */
    char *grpc_service;   /**< `networkSettings.serviceName` (gRPC); NULL when absent
                               or null */
    char *flow;           /**< vless `flow` ("xtls-rprx-vision"); NULL when absent,
                               null or "" */
    char *cipher;         /**< shadowsocks method; NULL when absent */
    char *server_key;     /**< shadowsocks-2022 server key; NULL when absent or null */
    char *obfs;           /**< v1.7 `obfs` (e.g. "http"); NULL when absent or null */
    char *plugin;         /**< Xboard `plugin`; NULL when absent or null */
    char *plugin_opts;    /**< Xboard `plugin_opts` (SIP003 options, "k=v;flag;..."); NULL when
                               absent or null */
    char *server_name;    /**< `server_name` (trojan: the TLS name, SNI); NULL when absent or null */
    char *host;           /**< `host` (trojan: the address clients dial); NULL when absent or null */
    char *padding_scheme; /**< anytls `padding_scheme` (an array of lines, or one string), its
                               lines joined by "\n" with none at the end (PROTOCOLS-3.md §3.4);
                               NULL when absent, null or empty */
    unsigned tls;         /**< `tls` value: 0 absent/none, 1 TLS, 2 REALITY (int, numeric string or
                               bool; anything else counts as 1 when PN_SET_TLS is set) */
    pn_reality reality;   /**< `tls_settings` when `tls` is 2 */
    pn_route *routes;
    size_t n_routes;
    uint32_t push_interval; /**< seconds from base_config; 0 = not given */
    uint32_t pull_interval; /**< seconds from base_config; 0 = not given */
    /** Without PN_PARSE_STRICT: the keys the body has that katana does not know, one a line
     *  ("tls_settings.shortid (did you mean \"short_id\"?)\n"), at most PN_UNKNOWN_MAX of
     *  them; NULL when none. For one warning per key (panel/keys.h). Not compared by
     *  pn_node_equal(). */
    char *unknown;
} pn_node;

#define PN_UNKNOWN_MAX 16 /**< unknown keys pn_node.unknown lists, the first in body order */

/** One user from `GET user` (PANEL.md §1.5). */
typedef struct pn_user {
    uint64_t id;           /**< panel user id */
    char *uuid;            /**< the password (never log it) */
    uint64_t speed_limit;  /**< Mbps; 0 = unlimited (null, missing and 0 alike) */
    uint32_t device_limit; /**< distinct IPs; 0 = unlimited (null, missing and 0 alike) */
} pn_user;

#define PN_USERS_DIGEST 32 /**< bytes of a user list's digest (SHA-256) */

/** A user list. An empty list is valid: it revokes everyone (PANEL.md §4.2). */
typedef struct pn_users {
    pn_user *users;
    size_t n;
    /** pn_users_shed() dropped every uuid (NULL), or the whole array (users NULL, n kept), and
     *  kept the list's digest instead: such a list still compares (pn_users_equal) but cannot be
     *  lowered until pn_users_restore(). */
    bool shed;
    uint8_t digest[PN_USERS_DIGEST]; /**< when shed: pn_users_digest() of the full list */
} pn_users;

/** Parser flags. */
enum pn_parse_flags {
    /** Refuse the first key that no UniProxy body has (PANEL.md §1.4–1.5), naming its path and
     *  the nearest known key ("tls_settings.shortid: unknown key (did you mean
     *  \"short_id\"?)", panel/keys.h). For operator-written bodies (the local panel); a
     *  panel's HTTP answers are parsed without it, as panels add keys: their unknown keys are
     *  listed in pn_node.unknown instead, for a warning. */
    PN_PARSE_STRICT = 1u << 0,
};

/**
 * Parse a `GET config` body (PANEL.md §1.4). Accepts the variants of §4.6: `server_port` as an
 * int or a numeric string, intervals as int or string, `match` as an array, an object (a sparse
 * PHP array) or a comma-separated string, missing `protocol` (v1.7) filled from @p node_type.
 * @param body       a JSON object (borrowed)
 * @param node_type  protocol to assume when the body has none (e.g. "shadowsocks"); may be NULL
 * @param flags      PN_PARSE_* bits
 * @param out        overwritten; on success owned by the caller (pn_node_free)
 * @param err        on failure, "<field>: <reason>", e.g. "server_port: expected a port number"
 * @return 0, -EINVAL (malformed), -EMSGSIZE (over a bound), -ENOMEM. On failure *out is zeroed.
 */
int pn_node_parse(const json_t *body, const char *node_type, unsigned flags, pn_node *out,
                  sv_error *err);

/**
 * Parse a `GET user` body `{"users":[{"id","uuid","speed_limit","device_limit"}...]}`
 * (PANEL.md §1.5). Null or missing limits mean 0; negative values are errors.
 * @p flags: PN_PARSE_* bits.
 * @return 0, -EINVAL, -EMSGSIZE or -ENOMEM, with err set as for pn_node_parse(); *out zeroed on
 *         failure and owned by the caller (pn_users_free) on success.
 */
int pn_users_parse(const json_t *body, unsigned flags, pn_users *out, sv_error *err);

/**
 * Parse a `GET user` body given as text (@p len bytes, borrowed, bounded by the caller:
 * PN_BODY_MAX) as json_loadb(JSON_REJECT_DUPLICATES) + pn_users_parse() would, without a tree
 * of the whole body (a tree costs about 26 times the body): a body that is not JSON
 * is refused before any user is built (pn_json_check()), the plain shape is read by
 * pn_users_scan(), anything else with each user loaded and parsed alone (panel/jsonscan.h).
 * A body with several faults may name another of them than the tree's parse would.
 * @param err  on -EBADMSG: why the body is not JSON (no bytes of it quoted); else as for
 *             pn_users_parse()
 * @return 0, -EBADMSG (not JSON), -EINVAL, -EMSGSIZE or -ENOMEM; *out zeroed on failure.
 */
int pn_users_parse_text(const char *text, size_t len, unsigned flags, pn_users *out,
                        sv_error *err);

/**
 * Parse a `GET user` body given as text, straight into @p out without a JSON tree
 * (json_loadb() and the tree's frees were two thirds of an apply of 50 000 users). It takes
 * only the plain shape panels send, `{"users":[{"id":N,"uuid":"...","speed_limit":N|null,
 * "device_limit":N|null},...]}` in any key order and white space, with uuids of printable
 * ASCII without escapes; anything else (other keys, escapes, duplicates, a malformed or
 * refused value, more than PN_USERS_MAX users) it leaves to json_loadb() (duplicate keys
 * rejected) + pn_users_parse(), the reference, which says what is wrong. A body it takes,
 * that path reads as the same list in either mode (PN_PARSE_STRICT or not): tests/fuzz/
 * fuzz_uniproxy.c checks so.
 * @param body  @p len bytes (borrowed), bounded by the caller (PN_BODY_MAX)
 * @param out   on 0 the list, owned by the caller (pn_users_free); else zeroed
 * @return 0, 1 when the body is left to the reference path, -ENOMEM.
 */
int pn_users_scan(const char *body, size_t len, pn_users *out);

/**
 * The `GET user` body of @p u, `{"users":[{"id","uuid","speed_limit","device_limit"}...]}`
 * (PANEL.md §1.5), that pn_users_parse() reads back as @p u: the last good state of a user list
 * that came as a push. @return malloc'ed compact JSON, or NULL (out of memory).
 */
char *pn_users_body(const pn_users *u);

/** Free everything a node owns and zero it. NULL-safe. */
void pn_node_free(pn_node *node);

/** Free everything a user list owns and zero it. NULL-safe. */
void pn_users_free(pn_users *users);

/** Deep-copy a node. @return 0 or -ENOMEM (dst zeroed). */
int pn_node_clone(pn_node *dst, const pn_node *src);

/** Deep-copy a user list (a shed one stays shed). @return 0 or -ENOMEM (dst zeroed). */
int pn_users_clone(pn_users *dst, const pn_users *src);

/** Field-by-field equality of two nodes (routes and intervals included). */
bool pn_node_equal(const pn_node *a, const pn_node *b);

/** Equality of two user lists: same users with the same fields in the same order; through
 *  the digests when either is shed (false when a digest cannot be computed). */
bool pn_users_equal(const pn_users *a, const pn_users *b);

/**
 * SHA-256 of everything a user list says (each user's id, uuid and limits, in order).
 * @p users must not be shed. @return 0, or -ENOMEM / -EIO from the digest.
 */
int pn_users_digest(const pn_users *users, uint8_t out[PN_USERS_DIGEST]);

/**
 * Keep only the digest of @p users (the agent keeps what runs only to tell a changed
 * list from the same one; the supervisor keeps the secrets): every uuid is freed, and the user
 * array too unless @p keep_limits (then ids and limits stay). A list already shed is left as
 * it is.
 * @return 0, or -ENOMEM / -EIO (the list is then unchanged).
 */
int pn_users_shed(pn_users *users, bool keep_limits);

/**
 * Make @p shed whole again from @p candidate, a full list rebuilt by the caller (e.g. from the
 * supervisor's running user set): when @p candidate has the digest @p shed was shed with, it is
 * moved into @p shed (@p candidate zeroed).
 * @return 0; -ESTALE when the digests differ, -ENOMEM / -EIO (both lists unchanged then).
 */
int pn_users_restore(pn_users *shed, pn_users *candidate);

/**
 * Read a JSON file of at most @p max_bytes bytes and parse it (duplicate keys rejected). Only a
 * regular file is read: a FIFO, directory, device or socket is refused without blocking (the
 * open never waits for a FIFO's writer). Used for the config file and the local
 * panel's node_file / users_file.
 * @param out  receives a new reference on success
 * @param err  "<path>: <reason>" or "<path>: line L, column C: <jansson text>"; for a
 *             non-regular file "<path>: a FIFO, not a regular file"
 * @return 0, -ENOENT/-EACCES/... from open/read, -EMSGSIZE when the file is larger than
 *         @p max_bytes, -EINVAL when it is not a regular file or not valid JSON, -ENOMEM.
 */
int pn_json_load_file(const char *path, size_t max_bytes, json_t **out, sv_error *err);

/**
 * The reading half of pn_json_load_file(): the whole regular file @p path, at most
 * @p max_bytes bytes, with its errors.
 * @param buf  receives a malloc'ed copy of its @p len bytes on 0 (not NUL-terminated)
 * @return 0 or pn_json_load_file()'s errors but -EINVAL for JSON.
 */
int pn_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, sv_error *err);

/**
 * The parsing half of pn_json_load_file(): @p len bytes of @p buf read from @p path.
 * @return 0 (*out a new reference) or -EINVAL, "<path>: line L, column C: <jansson text>".
 */
int pn_json_parse_text(const char *path, const char *buf, size_t len, json_t **out,
                       sv_error *err);

#endif
