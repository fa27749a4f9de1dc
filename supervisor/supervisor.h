/*
 * katana supervisor: the embedded runtime. The only header agent/ and api/ include from
 * supervisor/ (besides supervisor/util/). It knows nothing of panels, config files or HTTP.
 *
 * Source of the rules: seed 001 (overview, public API, apply, shutdown), seed 000 (plane,
 * router, connector), seed 002 (connector, UDP fan-out), seed 003 (tracking, stats, usage).
 *
 * Threads: every sv_* function below runs on the control loop given to sv_supervisor_new(),
 * except those marked "any thread" (they read published snapshots or post a message).
 */
#ifndef SV_SUPERVISOR_H
#define SV_SUPERVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "supervisor/util/err.h"
#include "supervisor/util/usage.h"

/* ------------------------------------------------------------------------------------------ */
/* Spec: the desired state. Plain data; every string is heap-owned by the spec.                 */
/* ------------------------------------------------------------------------------------------ */

/** Limits (seed-derived or chosen, checked by validation). */
#define SV_TAG_MAX 64             /**< bytes in any tag */
#define SV_SECRET_MAX 256         /**< bytes in a user's secret */
#define SV_USERS_MAX 1000000      /**< users in one user set (large panels) */
#define SV_RULES_MAX 4096         /**< route rules */
#define SV_MATCHERS_MAX 65536     /**< matchers in one rule */

/**
 * What happens to live flows when what they stand on goes (seed 001 "policies"):
 *  - user removal: sessions of a principal an inbound no longer admits (removed from its user
 *    set, or its credentials changed); default Close;
 *  - drain: flows opened on an outbound version that an apply replaced or removed; default Keep.
 * Keep leaves them alone, Close ends them at once, CloseAfter ends them grace_ms later (unless
 * they ended first; a user admitted again by then keeps them). Grace timers end at shutdown
 * instead of delaying it.
 */
enum sv_policy_kind {
    SV_POLICY_DEFAULT = 0, /**< per inbound/outbound: the spec's; in the spec: the seed default */
    SV_POLICY_KEEP,
    SV_POLICY_CLOSE,
    SV_POLICY_CLOSE_AFTER, /**< close after grace_ms (1 .. SV_POLICY_GRACE_MAX_MS) */
};

#define SV_POLICY_GRACE_MAX_MS (24u * 3600u * 1000u) /**< longest CloseAfter grace: one day */

typedef struct sv_policy {
    enum sv_policy_kind kind;
    uint32_t grace_ms; /**< SV_POLICY_CLOSE_AFTER only; 0 otherwise */
} sv_policy;

/** A user of a user set. `id` is the frontend's key (katana: the panel's numeric user id). */
typedef struct sv_user {
    uint64_t id;           /**< frontend key, unique within its set */
    char *label;           /**< name for logs and the API (never a secret); may be NULL */
    char *secret;          /**< Shadowsocks password (the panel uuid); required */
    uint64_t speed_limit;  /**< bytes per second, both directions; 0 = unlimited */
    uint32_t device_limit; /**< distinct client IPs; 0 = unlimited */
} sv_user;

/** A named set of users that inbounds admit. */
typedef struct sv_user_set {
    char *tag;
    sv_user *users;
    size_t n_users;
    /** NULL (each label and secret is its own malloc block), or one block holding every user's
     *  label and secret, freed as a whole by sv_user_set_free (sv_user_set_clone and the agent
     *  pack them: a malloc block per secret was a tenth of the memory per user) */
    char *strings;
} sv_user_set;

enum sv_inbound_protocol {
    SV_INBOUND_SHADOWSOCKS = 1,
    SV_INBOUND_TROJAN,
    SV_INBOUND_VLESS, /**< VLESS, no flow (PROTOCOLS.md §5); TLS optional */
    SV_INBOUND_VMESS, /**< VMess AEAD, alterId 0 (PROTOCOLS.md §6); TLS optional */
    SV_INBOUND_SS2022, /**< Shadowsocks 2022 (PROTOCOLS.md §3), TCP; ss_cipher 2022 */
    SV_INBOUND_SOCKS,  /**< SOCKS5 (PROTOCOLS-3.md §4.1), user name = password = secret;
                            TLS optional */
    SV_INBOUND_HTTP,   /**< HTTP proxy, CONNECT and absolute-form (PROTOCOLS-3.md §4.3), Basic
                            auth with user name = password = secret; TLS optional */
    SV_INBOUND_MIXED,  /**< SOCKS5 and HTTP proxy on one port, told apart by the first byte */
    SV_INBOUND_ANYTLS, /**< AnyTLS (PROTOCOLS-3.md §3) over TLS, password = secret; fallback */
};

/** Where an inbound's TLS certificate comes from (agent config "cert"). */
enum sv_cert_source {
    SV_CERT_NONE = 0, /**< no TLS */
    SV_CERT_FILE,     /**< PEM chain and key read from cert_file / key_file */
    SV_CERT_SELF,     /**< a self-signed pair for server_name, made when the inbound starts */
};

/** TLS settings of an inbound. ALPN offered: "http/1.1". */
typedef struct sv_inbound_tls {
    enum sv_cert_source cert;
    char *cert_file;   /**< SV_CERT_FILE: path of the PEM certificate chain, leaf first */
    char *key_file;    /**< SV_CERT_FILE: path of the unencrypted PEM key */
    char *server_name; /**< SV_CERT_SELF: the certificate's name; may be NULL ("localhost") */
} sv_inbound_tls;

/** Longest WebSocket path or Host an inbound takes (as the WebSocket layer's SV_WS_PATH_MAX). */
#define SV_INBOUND_WS_TEXT_MAX 256

/** WebSocket transport of an inbound (PROTOCOLS.md §8), or HTTPUpgrade
 * (PROTOCOLS-2.md §4): on when path is set. */
typedef struct sv_inbound_ws {
    char *path; /**< the upgrade path, starting with '/' (a "?ed=N" query is ignored); NULL =
                     no WebSocket */
    char *host; /**< the Host header clients must send (port ignored), or NULL for any */
    bool httpupgrade; /**< the upgrade opens a raw byte stream (HTTPUpgrade), not WebSocket
                           frames; VLESS, VMess and Trojan only */
    bool mux;   /**< Shadowsocks only: the stream carries Mux.Cool, each sub-connection one
                     Shadowsocks stream (the SIP003 v2ray-plugin with mux, proto/ss_mux.h) */
} sv_inbound_ws;

/** Longest gRPC service name an inbound takes (as the gRPC core's SV_GRPC_SERVICE_MAX). */
#define SV_GRPC_SERVICE_NAME_MAX 256

/** gRPC transport of an inbound (PROTOCOLS-2.md §3): on when service_name is set. */
typedef struct sv_inbound_grpc {
    char *service_name; /**< the panel's networkSettings.serviceName: `/<name>/Tun` and
                             `/<name>/TunMulti` are served (a name starting with '/' is a
                             custom path, §3.1); NULL = no gRPC */
} sv_inbound_grpc;

/** REALITY under a VLESS or Trojan inbound (PROTOCOLS-2.md §1): on when private_key
 *  is set.
 *  The target site, which gets every client that is not a valid REALITY client byte for byte,
 *  is the inbound's fallback (required then). */
typedef struct sv_inbound_reality {
    char *private_key;  /**< the X25519 private key, base64url of 32 bytes (§1.1) */
    char *short_ids;    /**< comma-separated hex short ids, each at most 16 digits, even count;
                             NULL or "" = the all-zero id only */
    char *server_names; /**< comma-separated SNI values clients must send (exact match) */
    uint64_t max_time_diff_ms; /**< largest |now - client time|; 0 = 120 s
                                    (SV_REALITY_TIME_DIFF_DEFAULT_MS); a hello replayed within
                                    it goes to the target */
    uint32_t min_client_ver;   /**< lowest client version accepted, x.y.z as the 24-bit
                                    x << 16 | y << 8 | z (§1.1); 0 = no bound */
    uint32_t max_client_ver;   /**< highest client version accepted, the same; 0 = no bound */
    uint8_t xver;              /**< 1 or 2: a PROXY protocol header of that version goes to the
                                    target before a relayed client's bytes (§1.1 xver); 0 =
                                    none */
    bool vision;        /**< every user's flow is xtls-rprx-vision (PROTOCOLS-2.md §2; the
                             panel's node `flow`): the rules of §2.2 apply to each request.
                             Also without private_key, on a VLESS inbound with a certificate
                             (`tls`, OpenSSL's TLS 1.3) and no WebSocket or gRPC (§2.1) */
} sv_inbound_reality;

/** Shadowsocks AEAD methods (PROTOCOLS.md §2.1). */
enum sv_ss_cipher {
    SV_SS_AES_128_GCM = 1,
    SV_SS_AES_256_GCM,
    SV_SS_CHACHA20_POLY1305,
    SV_SS_2022_AES_128_GCM,        /**< 2022-blake3-aes-128-gcm (PROTOCOLS.md §3.1) */
    SV_SS_2022_AES_256_GCM,        /**< 2022-blake3-aes-256-gcm */
    SV_SS_2022_CHACHA20_POLY1305,  /**< 2022-blake3-chacha20-poly1305 (single user: no EIH) */
};

/** An IP prefix: family AF_INET/AF_INET6, address in network order, prefix length. */
typedef struct sv_cidr {
    int family;
    uint8_t addr[16];
    uint8_t prefix;
} sv_cidr;

struct sockaddr;

/**
 * Parse @p text, an IPv4 or IPv6 address with an optional "/prefix" (at most 32 or 128), into
 * *@p out, host bits cleared (nodes[].trusted_forwarders, route matches).
 * @return 0; -EINVAL when @p text is not an address (a route match tries its other forms),
 *         -ERANGE for an address with a bad prefix.
 */
int sv_cidr_parse(const char *text, sv_cidr *out);

/** Are @p a and @p b the same prefix (family, prefix length, address bytes of the family)? */
bool sv_cidr_equal(const sv_cidr *a, const sv_cidr *b);

/** Are the lists @p a (@p na entries) and @p b (@p nb) the same prefixes in the same order? */
bool sv_cidr_list_equal(const sv_cidr *a, size_t na, const sv_cidr *b, size_t nb);

/**
 * Does one of @p v[0 .. n) hold the address of @p sa (AF_INET or AF_INET6; an IPv4-mapped IPv6
 * address counts as its IPv4 address)? @return false for other families.
 */
bool sv_cidr_list_has(const sv_cidr *v, size_t n, const struct sockaddr *sa);

/** Most entries of sv_inbound_spec.trusted_forwarders (nodes[].trusted_forwarders). */
#define SV_TRUSTED_FORWARDERS_MAX 64

/** Where an inbound listens: an IP literal and a port, TCP and (when udp) UDP on the same port. */
typedef struct sv_bind {
    char *address; /**< "0.0.0.0", "127.0.0.1", "::", "::1" ... */
    uint16_t port; /**< 1..65535 */
} sv_bind;

typedef struct sv_inbound_spec {
    char *tag;
    sv_bind bind;
    bool udp;                          /**< also serve UDP on bind */
    enum sv_inbound_protocol protocol;
    enum sv_ss_cipher ss_cipher;       /**< SV_INBOUND_SHADOWSOCKS (AEAD methods) and
                                            SV_INBOUND_SS2022 (the 2022 methods) */
    char *ss_server_key;               /**< SV_INBOUND_SS2022: the server's identity key (iPSK),
                                            standard base64 of 16/32 bytes (PANEL.md §1.4
                                            server_key): users are told apart by their identity
                                            header (EIH, §3.7). NULL: single user, whose key is
                                            the PSK. A user's key is the first 16/32 bytes of
                                            its secret (Xboard's uuidToBase64) */
    char *users;                       /**< user set tag; required for Shadowsocks */
    bool allow_private;                /**< its users' flows may reach internal
                                            destinations (loopback, private, link-local ...
                                            and the node's own addresses); default false */
    bool accept_proxy_protocol;        /**< every TCP connection starts with a PROXY protocol
                                            header (v1 or v2, HAProxy's proxy-protocol.txt),
                                            whose client address stands for the socket's:
                                            the node sits behind a load balancer. A connection
                                            without a valid header is closed. Default false */
    sv_cidr trusted_forwarders[SV_TRUSTED_FORWARDERS_MAX]; /**< peers (after the PROXY header,
                                            when accepted) whose X-Forwarded-For / X-Real-IP
                                            in a WebSocket or HTTPUpgrade handshake names the
                                            client (Xray-core: trustedXForwardedFor); host bits
                                            clear */
    unsigned n_trusted_forwarders;     /**< entries of trusted_forwarders; 0 = headers ignored */
    sv_inbound_tls tls;                /**< TLS under the protocol; required for Trojan,
                                            optional for VLESS and VMess */
    char *fallback;                    /**< Trojan, VLESS: "HOST:PORT" that gets every client
                                            which is not a valid request; NULL =
                                            Trojan answers 404, VLESS drains */
    sv_inbound_ws ws;                  /**< WebSocket over TCP or TLS (Trojan) */
    sv_policy user_removal;            /**< overrides sv_spec.user_removal (DEFAULT: the
                                            spec's); not part of the inbound's equality */
    sv_inbound_grpc grpc;              /**< gRPC over TCP or TLS (Trojan, VLESS, VMess) */
    sv_inbound_reality reality;        /**< REALITY instead of TLS (VLESS or Trojan, on TCP or
                                            under gRPC) */
    bool proxy_no_auth;                /**< socks, http, mixed: a client offering no
                                            credentials is admitted as the user set's one user
                                            (sv_userpass_anonymous); default false */
    char *anytls_padding_scheme;       /**< anytls: the padding scheme's lines joined by "\n",
                                            none at the end (PROTOCOLS-3.md §3.4); NULL = the
                                            default scheme */
} sv_inbound_spec;

enum sv_outbound_kind {
    SV_OUTBOUND_DIRECT = 1, /**< freedom: dial the requested destination */
    SV_OUTBOUND_BLACKHOLE,  /**< refuse every flow, drop every datagram */
};

#define SV_IFNAME_MAX 16               /**< an interface name with its NUL (IFNAMSIZ) */
#define SV_KEEPALIVE_IDLE_MAX 32767u    /**< largest keepalive idle / interval, seconds (Linux) */
#define SV_KEEPALIVE_COUNT_MAX 127u     /**< largest keepalive probe count (Linux) */

/**
 * The socket policy of a direct outbound (seed 001 "socket 策略"):
 * applied to every socket it opens, after creation and before bind/connect. A plain value;
 * all zero = no policy (today's sockets: TCP_NODELAY on, no bind, no keepalive).
 */
typedef struct sv_socket_policy {
    bool has_addr4, has_addr6; /**< a source address of that family is set */
    uint8_t addr4[4];          /**< IPv4 source (network order): bound, port 0, on IPv4
                                    sockets only (seed 001: only sockets of its family) */
    uint8_t addr6[16];         /**< IPv6 source, likewise on IPv6 sockets only */
    char interface[SV_IFNAME_MAX]; /**< SO_BINDTODEVICE; "" = none */
    uint32_t mark;             /**< SO_MARK; 0 = none */
    uint32_t keepalive_idle_s; /**< TCP keepalive after this idle time; 0 = off */
    uint32_t keepalive_interval_s; /**< between probes; 0 = the kernel's (needs idle) */
    uint32_t keepalive_count;  /**< unanswered probes before the end; 0 = the kernel's */
    bool nagle;                /**< true: TCP_NODELAY off (config tcp_nodelay false) */
} sv_socket_policy;

/** Do two socket policies ask for the same sockets? */
bool sv_socket_policy_equal(const sv_socket_policy *a, const sv_socket_policy *b);

typedef struct sv_outbound_spec {
    char *tag;
    enum sv_outbound_kind kind;
    sv_socket_policy socket; /**< direct only; a change rebuilds the outbound */
    sv_policy drain; /**< overrides sv_spec.drain for this tag's replaced versions (DEFAULT: the
                          spec's); not part of the outbound's equality (no rebuild) */
} sv_outbound_spec;

enum sv_network { SV_NET_TCP = 1, SV_NET_UDP = 2 };

enum sv_match_kind {
    SV_MATCH_DOMAIN = 1,     /**< text: the whole name, case-insensitive */
    SV_MATCH_DOMAIN_SUFFIX,  /**< text: "example.com" matches it and every subdomain */
    SV_MATCH_DOMAIN_KEYWORD, /**< text: a substring of the name */
    SV_MATCH_CIDR,           /**< cidr: destination IP */
    SV_MATCH_PORT,           /**< port_lo..port_hi inclusive */
    SV_MATCH_NETWORK,        /**< network: tcp or udp */
    SV_MATCH_INBOUND,        /**< text: the inbound tag the flow came in on */
    SV_MATCH_SOURCE_CIDR,    /**< cidr: client source IP */
    SV_MATCH_REGEX,          /**< text: a PCRE2 pattern searched (unanchored, caseless) in the
                                  destination name, the sniffed name and an IP destination's
                                  literal, never the port (PANEL.md §1.4) */
};

typedef struct sv_route_match {
    enum sv_match_kind kind;
    char *text;
    sv_cidr cidr;
    uint16_t port_lo, port_hi;
    enum sv_network network;
} sv_route_match;

/**
 * A route rule: it matches when any of its matchers matches (seed 000, "compile routes"), and,
 * katana's addition for several nodes in one supervisor, only for flows from one of `inbounds`
 * when that list is not empty.
 */
typedef struct sv_route_rule {
    sv_route_match *matchers;
    size_t n_matchers;
    char **inbounds;
    size_t n_inbounds;
    char *outbound; /**< outbound tag */
    bool audit;       /**< an audit rule (a panel `block` route or SSPanel detect
                           rule): a flow or datagram of a user it matches is recorded once per
                           (inbound, user, audit_id) until sv_take_audit() takes it */
    int64_t audit_id; /**< the panel's rule id, reported with the hit */
    /** A panel `dns` route (PANEL.md §1.4): names of flows this rule routes are
     *  resolved by this server, "ip", "ipv4:port" or "[ipv6]:port" (port 53 when absent);
     *  NULL = the workers' resolver. */
    char *dns_server;
} sv_route_rule;

typedef struct sv_route_spec {
    sv_route_rule *rules;
    size_t n_rules;
    char *default_outbound; /**< tag used when no rule matches */
} sv_route_spec;


typedef struct sv_spec {
    sv_inbound_spec *inbounds;
    size_t n_inbounds;
    sv_outbound_spec *outbounds;
    size_t n_outbounds;
    sv_user_set *user_sets;
    size_t n_user_sets;
    sv_route_spec route;
    sv_policy user_removal; /**< supervisor-wide user removal policy (default Close) */
    sv_policy drain;        /**< supervisor-wide drain policy (default Keep) */
} sv_spec;

/**
 * The user removal policy of inbound @p in of @p spec: its own, else the spec's, else Close
 * (seed 001 "policies": removal_policy falls back to spec.policies.user_removal).
 * @return a policy whose kind is never SV_POLICY_DEFAULT.
 */
sv_policy sv_removal_policy_of(const sv_spec *spec, const sv_inbound_spec *in);

/**
 * The drain policy of outbound @p out (may be NULL) under @p spec: its own, else the spec's,
 * else Keep (seed 001 "policies"). @return a policy whose kind is never SV_POLICY_DEFAULT.
 */
sv_policy sv_drain_policy_of(const sv_spec *spec, const sv_outbound_spec *out);

/** Free everything a spec owns (not the struct itself); leaves it zeroed. NULL-safe. */
void sv_spec_free(sv_spec *spec);

/**
 * Deep-copy @p src into @p dst (which is overwritten, not freed).
 * @return 0, or -ENOMEM (dst is then zeroed).
 */
int sv_spec_clone(sv_spec *dst, const sv_spec *src);

/** Free one route rule's contents (matcher texts, inbound tags, outbound) and zero it. */
void sv_route_rule_free(sv_route_rule *r);

/** Free one user set's contents and zero it. */
void sv_user_set_free(sv_user_set *set);

/** Deep-copy a user set, the labels and secrets packed into dst->strings (the copy must not have
 *  a label or secret replaced: sv_user_set_free frees the block, not each string).
 *  @return 0 or -ENOMEM (@p dst then holds nothing to free). */
int sv_user_set_clone(sv_user_set *dst, const sv_user_set *src);

/** Look up a user set by tag. @return a borrowed pointer or NULL. */
const sv_user_set *sv_spec_user_set(const sv_spec *spec, const char *tag);

/**
 * The first byte of the tag @p tag that no tag may hold, or NULL: a control character (below
 * 0x20, or 0x7f), '"' or '\\'. Tags are written raw into log lines (some between quotes) and
 * name nodes in API paths and queries, where such a byte would split or garble the line or need
 * escaping; any other byte (UTF-8 included) is allowed. Used by sv_validate() and by the agent's
 * config parser, which names the field.
 */
static inline const char *sv_tag_bad_byte(const char *tag)
{
    for (const char *p = tag; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\')
            return p;
    return NULL;
}

/**
 * Check every semantic rule of @p spec without touching anything (the only owner of these rules,
 * supervisor/validate.c; texts from seed 001 "ApplyError").
 * @return 0, or -EINVAL with err->msg set to the first violation.
 */
int sv_validate(const sv_spec *spec, sv_error *err);

/* ------------------------------------------------------------------------------------------ */
/* The supervisor                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct sv_supervisor sv_supervisor;

#define SV_FD_RESERVE 128u    /**< descriptors kept for API, DB, panel, DNS, UDP, listeners */
#define SV_FDS_PER_CONN 2u    /**< a relayed TCP connection: its client and its remote socket */
#define SV_FDS_PER_SPLICE 4u  /**< a kernel-relayed connection's two pipes, more */
#define SV_MAX_CONNECTIONS_MAX (1u << 24) /**< largest max_connections */

/** Address families a name is resolved to and dialled in (the `dns` strategy). */
enum sv_dns_strategy {
    SV_DNS_PREFER_IPV4 = 0, /**< both families, IPv4 first (the default) */
    SV_DNS_PREFER_IPV6,
    SV_DNS_IPV4_ONLY,
    SV_DNS_IPV6_ONLY,
};

#define SV_DNS_SERVERS_MAX 8    /**< configured DNS servers */
#define SV_DNS_SERVER_LEN 64    /**< "IP", "IPv4:port" or "[IPv6]:port", with its NUL */

/**
 * Is @p s a DNS server as the config and panel `dns` routes give it: "ip", "ipv4:port" or
 * "[ipv6]:port", port 1..65535, shorter than SV_DNS_SERVER_LEN?
 */
bool sv_dns_server_valid(const char *s);

/** The workers' resolver: fixed at start; a plain value (copyable). */
typedef struct sv_dns_options {
    char servers[SV_DNS_SERVERS_MAX][SV_DNS_SERVER_LEN]; /**< none: /etc/resolv.conf's */
    unsigned n_servers;
    uint32_t timeout_ms;        /**< one server's answer; 0 = 5000 */
    enum sv_dns_strategy strategy;
} sv_dns_options;

#define SV_REDIS_HOST_LEN 64     /**< room for an IP literal */
#define SV_REDIS_SECRET_LEN 128  /**< room for a Redis ACL user name or password */
#define SV_REDIS_PREFIX_LEN 64

/**
 * The fleet-wide device limit on Redis (XrayR GlobalDeviceLimitConfig, soga
 * redis_enable): fixed at start; a plain value (copyable). Key layout (fleet.h): one sorted set
 * per user, key = prefix + the panel's user id in decimal, member = client IP, score = the Unix
 * time (Redis's clock) until which the IP counts.
 */
typedef struct sv_redis_options {
    bool enabled;                       /**< false: device limits are decided per node */
    char host[SV_REDIS_HOST_LEN];       /**< IPv4 or IPv6 literal */
    uint16_t port;
    unsigned db;                        /**< SELECT'ed after connecting when not 0 */
    char user[SV_REDIS_SECRET_LEN];     /**< AUTH user (Redis 6 ACL), "" = none */
    char password[SV_REDIS_SECRET_LEN]; /**< AUTH password, "" = no AUTH */
    uint32_t expiry_s;                  /**< an IP counts this long after its last refresh */
    uint32_t timeout_ms;                /**< an admission waits this long for Redis at most */
    char prefix[SV_REDIS_PREFIX_LEN];   /**< key prefix */
} sv_redis_options;

typedef struct sv_options {
    unsigned workers;            /**< worker threads; 0 = number of CPUs */
    uint32_t sample_interval_ms; /**< sampler tick; 0 = 1000 */
    /** TCP connections the process serves at once, one budget for every worker: a
     * worker accepts while the process is under it; at it, a new connection takes the place
     * of the oldest one not yet authenticated, and with every one authenticated accepting
     * stops until one ends (admission.c). 0 = the default from the descriptor limit,
     * sv_max_connections_default(). */
    uint32_t max_connections;
    sv_dns_options dns; /**< the workers' resolver (zero = resolv.conf, 5 s, prefer_ipv4) */
    /** Node-wide aggregate speed cap, payload bytes/s, shared fairly by the users moving bytes
     *  (`node_speed_limit`); 0 = none. Fixed at start. */
    uint64_t node_speed_limit;
    sv_redis_options redis; /**< fleet-wide device limit; zero = off */
} sv_options;

/**
 * The default max_connections of a process allowed @p fd_limit open descriptors (the soft
 * RLIMIT_NOFILE; UINT64_MAX for none): (fd_limit - SV_FD_RESERVE) / SV_FDS_PER_CONN, at least 1
 * and at most SV_MAX_CONNECTIONS_MAX, so that connections alone never exhaust the descriptors.
 *
 */
static inline uint32_t sv_max_connections_default(uint64_t fd_limit)
{
    if (fd_limit <= SV_FD_RESERVE + SV_FDS_PER_CONN)
        return 1;
    uint64_t n = (fd_limit - SV_FD_RESERVE) / SV_FDS_PER_CONN;
    return n > SV_MAX_CONNECTIONS_MAX ? SV_MAX_CONNECTIONS_MAX : (uint32_t)n;
}

/**
 * Whether @p conns TCP connections (SV_FDS_PER_CONN descriptors each) and @p pipes kernel relays
 * (SV_FDS_PER_SPLICE more each: Vision's splice(2) pipes) fit in @p fd_cap connections'
 * worth of descriptors, sv_max_connections_default() for the process's descriptor limit (the
 * process's counts). A connection gets its pipes only when they fit with it counted,
 * and while pipes are held accepting stops when one more connection would not fit: pipes never
 * take the descriptors of a connection the budget was sized for. Pure.
 */
static inline bool sv_fds_fit(uint64_t conns, uint64_t pipes, uint32_t fd_cap)
{
    return conns * SV_FDS_PER_CONN + pipes * SV_FDS_PER_SPLICE <=
           (uint64_t)fd_cap * SV_FDS_PER_CONN;
}

typedef struct sv_apply_options {
    bool allow_disruptive;
} sv_apply_options;

/**
 * What an apply did (seed 001 ApplyReport); each entry is "kind tag" or "outbound tag@vN", the
 * version counted per tag from 1. Every resource of the spec is in reused or built; swapped: a
 * listener kept with a new handler; drained: a replaced or removed outbound version; rebound: a
 * running inbound moved to another bind (a new inbound is only built); restarted: a disruptive
 * change applied (none planned by katana yet); removed: an inbound whose sessions were closed.
 * Owned by the report.
 */
typedef struct sv_apply_report {
    char **reused, **built, **swapped, **drained, **rebound, **restarted, **removed;
    size_t n_reused, n_built, n_swapped, n_drained, n_rebound, n_restarted, n_removed;
} sv_apply_report;

/** Free the strings of a report and zero it. NULL-safe. */
void sv_apply_report_free(sv_apply_report *report);

/**
 * Create a supervisor on @p control (the control loop) and start its workers. Nothing listens
 * until the first apply; the plane before it is the empty plane (drops everything, epoch 0).
 * The process's connection budget is fixed here from opts->max_connections and the descriptor
 * limit, and logged once.
 * @param out  receives the supervisor, owned by the caller until sv_supervisor_free()
 * @return 0, -ENOMEM, or a libuv error from thread start.
 */
int sv_supervisor_new(uv_loop_t *control, const sv_options *opts, sv_supervisor **out);

/**
 * Reconcile the running state to @p spec: validate → plan → prepare → commit (seed 001 "apply").
 * A refused spec changes nothing: everything that can fail (also running out of memory) happens
 * in prepare. When the spec publishes a new plane, returns once every worker has adopted it
 * (at most about 2 s), so a kill_where(epoch < sv_epoch()) that follows reaches every flow of
 * an older plane that is registered by then. @p spec is copied; the caller keeps it.
 * @param report  optional; filled on success
 * @param err     optional; on failure holds the seed's text ("duplicate inbound tag x",
 *                "route references unknown outbound y", "inbound x: binding 127.0.0.1:1 failed: ...")
 * @return 0, -EINVAL (validation), -EADDRINUSE / other bind errors, -ENOMEM, -ESHUTDOWN.
 */
int sv_apply(sv_supervisor *sv, const sv_spec *spec, const sv_apply_options *opts,
             sv_apply_report *report, sv_error *err);

/**
 * sv_apply(), without a copy of @p spec (a spec of 1 000 000 users is not held twice):
 * on success the supervisor keeps @p spec's contents as its running spec and zeroes @p spec
 * (freeing it then is a no-op); on failure @p spec is untouched and still the caller's.
 * @return as sv_apply().
 */
int sv_apply_take(sv_supervisor *sv, sv_spec *spec, const sv_apply_options *opts,
                  sv_apply_report *report, sv_error *err);

/**
 * Dry run of a first start (seed 001 "check"): validate, plan from nothing, build everything
 * except listeners. Needs no supervisor.
 * @return 0 or the error apply would give, with err->msg set.
 */
int sv_check(const sv_spec *spec, sv_error *err);

/**
 * Re-read the certificates of every running TLS inbound (on SIGHUP and on every panel
 * sync) and swap in a new context where their content changed. Live connections keep the
 * context they started with; no session is closed. A pair that does not load is refused and the
 * inbound keeps its current certificate. Logs each reload and each refusal itself, a refusal once
 * while the files and the reason stay the same (not on every sync): callers need not log.
 * (sv_apply and the user edits also keep a running inbound's certificate when its files do not
 * load, so that they still apply; only a new listener needs a pair that loads.)
 * @return 0; or the first error, e.g. -EINVAL "inbound n1: certificate refused: key_file does
 *         not match cert_file" (the other inbounds were still reloaded), also when it was already
 *         logged; -ESHUTDOWN.
 */
int sv_reload_certs(sv_supervisor *sv, sv_error *err);

/**
 * When the certificate running inbound @p tag serves ends: its TLS context's leaf notAfter, in
 * Unix seconds. Control loop only (as sv_apply).
 * @return true with *@p not_after set; false for an unknown tag or an inbound without a
 *         certificate of its own (plain TCP, REALITY).
 */
bool sv_inbound_cert_expiry(sv_supervisor *sv, const char *tag, int64_t *not_after);

/**
 * Replace every user of set @p set_tag (seed 001 "user edits"): no re-plan, the epoch is
 * unchanged; removed users' sessions are closed under the removal policy; unchanged users'
 * sessions are untouched. @p users is copied.
 * @return 0; -ENOENT with "user set {tag}: no such user set"; -EINVAL for an invalid user;
 *         -ESHUTDOWN.
 */
int sv_set_users(sv_supervisor *sv, const char *set_tag, const sv_user *users, size_t n_users,
                 sv_error *err);

/**
 * sv_set_users() of the set @p set->tag that takes @p set instead of copying it (the
 * agent's lowered list of 50 000 users need not be copied once more): @p set is owned by the
 * supervisor on return, whatever the result, and zeroed. Same results.
 */
int sv_set_users_take(sv_supervisor *sv, sv_user_set *set, sv_error *err);

/**
 * The running user set @p set_tag, in the order it was given (borrowed: valid until the next
 * apply or user edit), or NULL when none runs. The agent lowers a list it shed from it.
 *
 */
const sv_user_set *sv_running_user_set(sv_supervisor *sv, const char *set_tag);

/** Add or replace one user of @p set_tag. Same errors as sv_set_users(). */
int sv_upsert_user(sv_supervisor *sv, const char *set_tag, const sv_user *user, sv_error *err);

/**
 * Remove user @p id from @p set_tag and close its sessions (policy permitting).
 * @return 1 when the user was in the set, 0 when not (nothing changes), or a negative error.
 */
int sv_remove_user(sv_supervisor *sv, const char *set_tag, uint64_t id, sv_error *err);

enum sv_selector_kind { SV_SELECT_SESSION = 1, SV_SELECT_USER, SV_SELECT_INBOUND, SV_SELECT_ALL };

typedef struct sv_selector {
    enum sv_selector_kind kind;
    uint64_t session; /**< SV_SELECT_SESSION */
    uint64_t user;    /**< SV_SELECT_USER: frontend user id */
    const char *inbound; /**< SV_SELECT_INBOUND */
} sv_selector;

/**
 * Close the selected live sessions now (seed 001 "Selector").
 * @return how many sessions this call closed (already closing ones are not counted).
 */
size_t sv_close(sv_supervisor *sv, const sv_selector *sel);

/** One live session (a client connection or a UDP association). */
typedef struct sv_session_info {
    uint64_t id;
    char inbound[SV_TAG_MAX + 1];
    char source[64];   /**< client "ip:port" */
    bool has_user;
    uint64_t user;     /**< frontend id when has_user */
    uint64_t up, down; /**< wire bytes from / to the client */
    uint64_t started_ms; /**< wall clock, ms since the Unix epoch */
    bool udp;
} sv_session_info;

/**
 * Every live session, sorted by id. Any thread.
 * @param out  receives a malloc'ed array the caller frees with free()
 * @return the count, or -ENOMEM.
 */
long sv_sessions(sv_supervisor *sv, sv_session_info **out);

/**
 * The epoch of the newest plane that every worker has adopted: each flow opened from
 * now on carries at least this epoch. 0 before the first apply. Any thread.
 */
uint64_t sv_epoch(sv_supervisor *sv);


/**
 * Per-user wire bytes moved since the previous take (at most one entry per user, none for users
 * that moved nothing). Reconciles live sessions first, so the result is exact up to this moment.
 * Control loop only.
 * @param out  malloc'ed array for the caller to free()
 * @return the count, or -ENOMEM.
 */
long sv_take_usage(sv_supervisor *sv, sv_usage **out);

/** One audit hit: a user's flow or datagram matched an audit rule. */
typedef struct sv_audit_hit {
    char inbound[SV_TAG_MAX + 1]; /**< the inbound the flow came in on */
    uint64_t user;                /**< frontend user id */
    int64_t rule;                 /**< the rule's audit_id (the panel's rule id) */
    uint64_t first_ms;            /**< wall clock, ms: the first hit since the previous take */
} sv_audit_hit;

#define SV_AUDIT_PENDING_MAX 65536u /**< distinct hits held between takes; more are dropped
                                         (counted in sv_audit_counts) */

/**
 * Take the audit hits recorded since the previous take: each (inbound, user, rule) once,
 * however often it was hit (seed 002: the detect set is drained by the report loop). Any thread.
 * @param out  malloc'ed array (sorted by inbound, user, rule) for the caller to free()
 * @return the count, or -ENOMEM (the hits stay for the next take).
 */
long sv_take_audit(sv_supervisor *sv, sv_audit_hit **out);

/** Hits noted since start (each (inbound, user, rule) at most once between two takes) and
 *  dropped (the set was full). Any thread. */
void sv_audit_counts(sv_supervisor *sv, uint64_t *recorded, uint64_t *dropped);

/** Distinct client IPs the panel counts for one user (its `alivelist`, PANEL.md §1). */
typedef struct sv_device_count {
    uint64_t user;  /**< frontend id */
    uint32_t count; /**< distinct IPs online elsewhere */
} sv_device_count;

/**
 * Replace the table of remote device counts used by the device limit (a new session
 * from a new IP is refused when the user's distinct local IPs plus this count reach
 * device_limit). @p v (n entries, copied; a user listed twice keeps the larger count) replaces
 * the whole table; n = 0 clears it. Any thread; readers see the old or the new table, never a mix.
 * @return 0 or -ENOMEM (the old table stays).
 */
int sv_set_remote_devices(sv_supervisor *sv, const sv_device_count *v, size_t n);

/** Sessions refused by the device limit since start (refusals are silent: no log line). */
uint64_t sv_device_refusals(sv_supervisor *sv);

/** Clients refused before authentication since start (a wrong key, a replayed or
 *  stale VMess auth ID, a malformed request; no log line each), by what was done with them. */
typedef struct sv_refused_counts {
    uint64_t drained;  /**< read and dropped for a random time, then closed (Shadowsocks, VMess) */
    uint64_t closed;   /**< closed at once */
    uint64_t fallback; /**< relayed to the inbound's fallback, or answered 404 (Trojan) */
} sv_refused_counts;

/** The counts of sv_refused_counts since start. Any thread. */
sv_refused_counts sv_refused_clients(sv_supervisor *sv);

/** Shadowsocks AEAD trial decryption since start: how many ran (one per new TCP
 *  connection's first chunk, one per UDP datagram, matched or not) and the keys they tried. */
typedef struct sv_ss_trial_counts {
    uint64_t lookups;
    uint64_t keys;
} sv_ss_trial_counts;

/** The counts of sv_ss_trial_counts since start. Any thread. */
sv_ss_trial_counts sv_ss_trials(sv_supervisor *sv);

/** Full Shadowsocks AEAD scans since start: the trial decryptions whose first
 *  guesses missed, scanned off the worker loops within a CPU budget of half a core. */
typedef struct sv_ss_scan_counts {
    uint64_t queued;  /**< admitted: they wait for the budget, then run (or their client left) */
    uint64_t run;     /**< scanned off the loop */
    uint64_t dropped; /**< refused over the budget or the queue bound: the client was treated
                           as unknown (a TCP client drained, a datagram dropped) */
} sv_ss_scan_counts;

/** The counts of sv_ss_scan_counts since start. Any thread. */
sv_ss_scan_counts sv_ss_scans(sv_supervisor *sv);

/**
 * A remembered client IP: the user who last
 * authenticated from it on an inbound, whose key a trial decryption tries first. What
 * sv_hints_export() gives and sv_hints_import() takes, so that a graceful restart keeps
 * returning clients identified in one trial instead of a full scan each.
 */
typedef struct sv_ip_hint {
    char inbound[SV_TAG_MAX + 1]; /**< the inbound's tag */
    uint8_t ip[16];               /**< IPv6, or IPv4-mapped IPv6 (::ffff:a.b.c.d) */
    uint64_t user;                /**< frontend user id (sv_user.id), stable across restarts */
    uint32_t age_s;               /**< seconds since that user last authenticated from ip */
} sv_ip_hint;

#define SV_IP_HINTS_PER_INBOUND 4096u /**< at most this many per inbound, both ways (the size of
                                           a worker's table of one listener) */
#define SV_IP_HINT_TTL_S 3600u        /**< a hint this old is expired (the tables' expiry) */

/**
 * The hints every worker holds now for every inbound (control loop only; asks each worker by
 * message and waits up to a second for the answers; a worker that has not answered by then is
 * left out). An IP several workers know appears once, with its most recent user; each inbound
 * gives at most SV_IP_HINTS_PER_INBOUND, the most recent. Only hints whose user the inbound
 * still admits are given.
 * @param out  receives a malloc'ed array (NULL when empty) the caller frees with free()
 * @return the count, -ENOMEM, or -ESHUTDOWN (after sv_shutdown).
 */
long sv_hints_export(sv_supervisor *sv, sv_ip_hint **out);

/**
 * Give every worker's table of each named inbound the hints of @p v (control loop only), as if
 * each user had authenticated from its IP @p age_s seconds ago; the workers take them by message
 * (no lock on their tables). Hints of an inbound that is not running or keeps no hints (fewer
 * than two users, or a protocol that does not guess), of a user the inbound does not admit now
 * (removed since the export), or as old as SV_IP_HINT_TTL_S are skipped; at most
 * SV_IP_HINTS_PER_INBOUND per inbound are taken (the most recent). A hint never names a wrong
 * user: it is a first guess, checked like any other.
 * @return how many were given to the workers, -ENOMEM (none was), or -ESHUTDOWN.
 */
long sv_hints_import(sv_supervisor *sv, const sv_ip_hint *v, size_t n);

/** XTLS Vision connections whose transport chain switched to raw copy since start
 *  (PROTOCOLS-2.md §2.6), each direction counted once per connection. */
typedef struct sv_vision_direct_counts {
    uint64_t in;  /**< the client's bytes arrive raw under the outer TLS */
    uint64_t out; /**< our bytes go out raw */
    uint64_t spliced; /**< connections then relayed in the kernel (splice(2)) */
    uint64_t splice_bytes; /**< the payload bytes they moved so, both ways (billed as any) */
    /** connections direct both ways relayed in user space because no pipe could be had: their
     *  worker's descriptor share was full (sv_fds_fit) or pipe2(2) failed */
    uint64_t splice_no_pipe;
} sv_vision_direct_counts;

/** The counts of sv_vision_direct_counts since start. Any thread. */
sv_vision_direct_counts sv_vision_direct(sv_supervisor *sv);

/** Upper bounds (µs) of the buckets of sv_turn_counts; one more bucket holds the rest. */
#define SV_TURN_BUCKETS 7
#define SV_TURN_BOUNDS_US {100, 500, 1000, 2000, 5000, 20000, 100000}

/** Worker loop turns since start, all workers together, by the CPU time the worker's thread
 *  spent in the turn (an established flow waits as long as its worker's turn runs;
 *  CPU time, so the host's scheduling of other processes does not count). */
typedef struct sv_turn_counts {
    uint64_t le[SV_TURN_BUCKETS + 1]; /**< turns of at most SV_TURN_BOUNDS_US[i]; [last]: the
                                           rest (not cumulative) */
    uint64_t cpu_ns;                  /**< CPU time of all of them */
} sv_turn_counts;

/** The counts of sv_turn_counts since start. Any thread. */
sv_turn_counts sv_worker_turns(sv_supervisor *sv);

/** Why a flow (a dialed connection, a sub-flow of a multiplexed connection, a UDP sub-link)
 *  ended: its close says so at debug level and /metrics counts closes by reason
 *  (katana_flow_closes_total{reason=sv_close_reason_name()}). */
typedef enum sv_close_reason {
    SV_CLOSE_END,      /**< "end": its ends finished it in order (both EOFs, the client's End
                            frame or stream end, the outbound's EOF, its association's owner) */
    SV_CLOSE_ERROR,    /**< "error": a socket or protocol error on either side, a dial that
                            failed, no memory */
    SV_CLOSE_KILL,     /**< "kill": its kill flag (DELETE /v1/connections, sv_kill_where, a
                            drain of its outbound version) */
    SV_CLOSE_SESSION,  /**< "session": its session was asked to close (sv_close_sessions) */
    SV_CLOSE_REVOKE,   /**< "revoke": its user left the reloaded node (sv__conn_revoke) */
    SV_CLOSE_IDLE,     /**< "idle": nothing moved for the idle timeout */
    SV_CLOSE_LIMIT,    /**< "limit": a bound passed: bytes held for a side that does not take
                            them, UDP sub-links per association */
    SV_CLOSE_SHUTDOWN, /**< "shutdown": its worker stopped */
    SV_CLOSE_REASONS
} sv_close_reason;

/** The label of @p r in /metrics ("end", "error", ...); "unknown" out of range. Pure. */
const char *sv_close_reason_name(sv_close_reason r);

/** Flow closes since start by reason, all workers together. */
typedef struct sv_close_counts {
    uint64_t n[SV_CLOSE_REASONS];
} sv_close_counts;

/** The counts of sv_close_counts since start. Any thread. */
sv_close_counts sv_flow_closes(sv_supervisor *sv);

/** Why the connector refused a flow (a TCP flow, a sub-flow, a UDP datagram) before any byte
 *  of it left: /metrics counts them (katana_flows_refused_total{reason=sv_refusal_name()}) and
 *  each is said at debug level ("refused: ..."). Seed 002 "forbidden" keeps the client's
 *  view silent (no answer); these are the operator's view. */
typedef enum sv_refusal {
    SV_REFUSE_PRIVATE,   /**< "private": an internal destination (netclass.h: loopback, private,
                              link-local, ... or the node's own address), or a name that
                              resolves to one, the inbound not allowing it (allow_private) and
                              no route naming it */
    SV_REFUSE_BLOCKED,   /**< "blocked": routed to an outbound that refuses every flow (a block
                              route, or a default route to block). A panel's block route is
                              also an audit rule (agent/lower.c): its hit is counted apart, in
                              katana_audit_hits_total, and reported to the panel */
    SV_REFUSE_NO_MEMORY, /**< "no_memory": its flow record could not be allocated */
    SV_REFUSALS
} sv_refusal;

/** The label of @p r in /metrics ("private", "blocked", ...); "unknown" out of range. Pure. */
const char *sv_refusal_name(sv_refusal r);

/** Refusals since start by reason, all workers together. */
typedef struct sv_refusal_counts {
    uint64_t n[SV_REFUSALS];
} sv_refusal_counts;

/** The counts of sv_refusal_counts since start. Any thread. */
sv_refusal_counts sv_flow_refusals(sv_supervisor *sv);

/**
 * How long the control loop has been silent: milliseconds since its sampler last ticked (the
 * sampler runs every sv_options.sample_interval_ms on the control loop, so a loop that turns
 * keeps this under about one interval), and that interval into @p interval_ms. Any thread.
 */
uint64_t sv_control_silence_ms(sv_supervisor *sv, uint64_t *interval_ms);

/** Per-user wire bytes since start, taken or not. Same conventions as sv_take_usage(). */
long sv_usage_snapshot(sv_supervisor *sv, sv_usage **out);

/** One live flow (a dialed TCP connection or a UDP sub-link). */
typedef struct sv_flow_info {
    uint64_t id;       /**< names its worker: id % 256 == worker index */
    uint64_t session;
    char inbound[SV_TAG_MAX + 1];
    bool has_user;
    uint64_t user;
    char user_label[SV_TAG_MAX + 1];
    char source[64];      /**< client "ip:port" */
    char destination[300]; /**< requested "host:port" */
    char sniffed[256];    /**< host name sniffed from the first client bytes (TLS SNI, HTTP
                               Host), routed on but not dialled; "" when none */
    enum sv_network network;
    char outbound[SV_TAG_MAX + 16]; /**< "tag@vN" */
    int rule;             /**< index of the matching rule, -1 = default route */
    uint64_t epoch;       /**< plane that routed it */
    uint64_t started_ms;  /**< wall clock */
    uint64_t up, down;    /**< payload bytes client→remote, remote→client */
    bool killed;          /**< sv_kill / sv_kill_where (a drain too) told it to close (seed 003
                               FlowEntry::killed): set once, never cleared; on a CLOSED event,
                               whether it ended killed */
} sv_flow_info;

/** Every live flow sorted by id. Any thread. Same conventions as sv_sessions(). */
long sv_flows(sv_supervisor *sv, sv_flow_info **out);

/**
 * Kill one flow. Any thread: the kill is posted to the flow's worker.
 * @return 0, or -ENOENT when no live flow has that id.
 */
int sv_kill(sv_supervisor *sv, uint64_t flow_id);

/** A flow predicate for sv_kill_where(); NULL/0 fields match anything. */
typedef struct sv_flow_filter {
    const char *inbound;
    const char *outbound; /**< tag (any version) or "tag@vN" */
    bool has_user;
    uint64_t user;
    bool has_session;
    uint64_t session;
} sv_flow_filter;

/** Kill every live flow matching @p f. Any thread. @return how many were told to close. */
size_t sv_kill_where(sv_supervisor *sv, const sv_flow_filter *f);

/** Per-tag traffic in one sampler tick (seed 003, StatsSnapshot). */
typedef struct sv_tag_stats {
    char tag[SV_TAG_MAX + 1]; /**< inbound/outbound tag, or the user id in decimal */
    char label[SV_TAG_MAX + 1]; /**< users: the user's label (seed 003 UserStats::label), the
                                     flows' user_label; "" for inbounds, outbounds, the total */
    uint64_t up, down;        /**< bytes since start */
    uint64_t up_rate, down_rate; /**< bytes/s over the measured interval */
    uint32_t flows;           /**< live flows at the tick */
} sv_tag_stats;

typedef struct sv_stats {
    uint64_t tick;
    uint64_t interval_ns;
    sv_tag_stats total;
    sv_tag_stats *inbounds, *outbounds, *users;
    size_t n_inbounds, n_outbounds, n_users;
} sv_stats;

/**
 * A copy of the latest stats snapshot. Any thread.
 * @return 0 or -ENOMEM; free with sv_stats_free().
 */
int sv_stats_get(sv_supervisor *sv, sv_stats *out);
/** Free the arrays of a snapshot copy and zero it. NULL-safe. */
void sv_stats_free(sv_stats *stats);

/** A flow event from the bounded ring (1024 entries, seed 003). */
enum sv_event_kind { SV_EVENT_OPENED = 1, SV_EVENT_CLOSED, SV_EVENT_LAGGED };
typedef struct sv_event {
    enum sv_event_kind kind;
    uint64_t seq;
    uint64_t missed;  /**< SV_EVENT_LAGGED: events this reader lost */
    sv_flow_info flow; /**< OPENED / CLOSED (final counts on CLOSED) */
} sv_event;

#define SV_EVENT_RING 1024

/**
 * Read the next event after @p *cursor, the seq of the last event read. Sequence numbers start
 * at 1: start with sv_events_head() to read only events emitted from then on (none is missed,
 * even when no event existed yet), or with 0 to read from the oldest retained one. Any thread,
 * never blocks.
 * @return 1 with *ev filled and *cursor advanced; 0 when nothing is new. A reader that fell more
 *         than SV_EVENT_RING behind gets one SV_EVENT_LAGGED with the number it missed.
 */
int sv_events_next(sv_supervisor *sv, uint64_t *cursor, sv_event *ev);

/** The seq of the newest event, 0 before the first (the start cursor for "from now"). Any thread. */
uint64_t sv_events_head(sv_supervisor *sv);

/**
 * Shut down in the seed's order (seed 001 "shutdown"): stop accepting, give live connections up
 * to @p grace_ms, close the rest, run a last sampler tick so every byte is in the ledger.
 * Blocks the control loop while waiting (at most grace_ms plus a short close). Idempotent.
 * After it, sv_take_usage() still returns what is left; other commands fail with -ESHUTDOWN.
 */
void sv_shutdown(sv_supervisor *sv, uint32_t grace_ms);

/** Free a supervisor after sv_shutdown(). */
void sv_supervisor_free(sv_supervisor *sv);

#endif
