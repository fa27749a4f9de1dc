/*
 * The agent's JSON configuration (`katana run -c FILE`):
 *
 *   { "log": {"level": "info"}, "workers": 0, "max_connections": 0, "shutdown_grace": 5,
 *     "nodes": [ { "tag": "demo", "listen": "127.0.0.1", "allow_private": false,
 *                  "panel": { "type": "local",
 *                             "node": {...} | "node_file": "path",
 *                             "users": {...} | "users_file": "path" } } ] }
 *
 * Strict: an unknown key or a wrong type is an error naming its JSON path
 * ("nodes[0].panel.tokn: unknown key", "workers: expected an integer"). The bodies under
 * panel.node / panel.users are panel data (PANEL.md §1.4–1.5) and are checked by the panel's
 * parser when fetched, not here.
 *
 * "api": {"listen": "127.0.0.1:9090", "token": "..."} configures the REST API:
 * listen is "ip:port" or "[ipv6]:port"; a listen address beyond loopback requires a token.
 *
 * "dns": {"servers": ["127.0.0.53", "[::1]:5353"], "timeout": 5, "strategy": "prefer_ipv4"}
 * configures the workers' resolver: servers are "ip", "ipv4:port" or "[ipv6]:port"
 * (none: /etc/resolv.conf); timeout is the seconds one server gets to answer; strategy is
 * prefer_ipv4, prefer_ipv6, ipv4_only or ipv6_only. Fixed at start (a reload warns).
 *
 * "policies": {"user_removal": P, "drain": P} and a node's "user_removal": P (seed 001
 * "policies"), P being "keep", "close" or {"close_after": SECONDS} (1..86400): what happens to
 * the live sessions of a user the panel removed (default close), and to flows on a replaced
 * outbound version (default keep).
 * "redis": {"url": "redis://127.0.0.1:6379/0", "expiry": 60, "timeout": 0.5,
 * "prefix": "katana:devices:"} turns on the fleet-wide device limit
 * (supervisor/fleet.h): url (required) is redis://[[user]:password@]host[:port][/db] with an IP
 * literal or localhost as host; expiry (seconds) how long an IP counts after its last session;
 * timeout (seconds) how long a new IP's connection waits for Redis before the node decides
 * alone; prefix the key prefix shared by the fleet. Fixed at start (a reload warns).
 *
 * "outbound": {"bind": ["192.0.2.7", "2001:db8::7"], "interface": "eth1", "mark": 7,
 * "tcp_keepalive": {"idle": 60, "interval": 10, "count": 5}, "tcp_nodelay": true} is the socket
 * policy of the shared direct outbound (seed 001); the same object as
 * a node's "outbound" gives that node a direct outbound of its own (its own egress address).
 */
#ifndef AG_CONFIG_H
#define AG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "supervisor/supervisor.h"
#include "supervisor/util/err.h"

#define AG_CONFIG_MAX_BYTES (16u << 20) /**< largest config file accepted */
#define AG_CONFIG_NODES_MAX 256u        /**< nodes in one config */
#define AG_CONFIG_WORKERS_MAX 64u       /**< largest `workers` value (SV_WORKERS_MAX) */
#define AG_CONFIG_SPEED_MAX 10000000u   /**< largest `speed_limit` / `node_speed_limit`, Mbps */
#define AG_CONFIG_GRACE_DEFAULT 5u      /**< `shutdown_grace` when absent, seconds */
#define AG_CONFIG_GRACE_MAX 3600u       /**< largest `shutdown_grace`, seconds */
#define AG_CONFIG_DNS_TIMEOUT_MAX 60u   /**< largest `dns.timeout`, seconds */
#define AG_CONFIG_REDIS_EXPIRY_DEFAULT 60u /**< `redis.expiry` when absent, seconds */
#define AG_CONFIG_REDIS_EXPIRY_MIN 3u      /**< smallest `redis.expiry` (refresh every expiry/3) */
#define AG_CONFIG_REDIS_EXPIRY_MAX 86400u  /**< largest `redis.expiry`, seconds */
#define AG_CONFIG_REDIS_TIMEOUT_MS_DEFAULT 500u /**< `redis.timeout` when absent, ms */
#define AG_CONFIG_REDIS_TIMEOUT_MAX 10u    /**< largest `redis.timeout`, seconds */
#define AG_CONFIG_REDIS_DB_MAX 65535u      /**< largest database number in `redis.url` */
#define AG_CONFIG_REDIS_PREFIX "katana:devices:" /**< `redis.prefix` when absent */
/** The packaged config's `api.token`, replaced by a random one at install; refused as a token. */
#define AG_API_TOKEN_PLACEHOLDER "@KATANA_API_TOKEN@"

enum ag_panel_type {
    AG_PANEL_LOCAL = 1,
    AG_PANEL_UNIPROXY = 2,
    AG_PANEL_SSPANEL = 3,
    AG_PANEL_XBOARD = 4, /**< Xboard API v2 with its node channel, uniproxy's keys */
};

#define AG_CONFIG_FLUSH_DEFAULT 5u    /**< `db.flush_interval` when absent, seconds */
#define AG_CONFIG_FLUSH_MAX 3600u     /**< largest `db.flush_interval`, seconds */
#define AG_CONFIG_TIMEOUT_DEFAULT 10u /**< uniproxy `timeout` when absent, seconds */
#define AG_CONFIG_TIMEOUT_MAX 300u    /**< largest uniproxy `timeout`, seconds */
#define AG_CONFIG_STATUS_INTERVAL_DEFAULT 10u /**< xboard `status_interval`, seconds */
#define AG_CONFIG_INTERVAL_MAX 86400u /**< largest sspanel pull/push interval, seconds */

/** A node's panel. Paths are already resolved against the config file's directory. */
typedef struct ag_panel_config {
    enum ag_panel_type type;
    json_t *node;     /**< inline body (own reference) or NULL */
    char *node_file;  /**< or a file */
    json_t *users;    /**< inline body (own reference) or NULL */
    char *users_file; /**< or a file */
    /* AG_PANEL_UNIPROXY (PANEL.md §1): {"type":"uniproxy","url","token","node_id","node_type",
     * "timeout"}; node_id is a string or an integer (kept as text, Xboard accepts codes). */
    char *url;          /**< base URL, http:// or https:// */
    char *token;        /**< server token (never logged) */
    char *node_id;      /**< numeric id or node code */
    char *node_type;    /**< "shadowsocks" */
    unsigned timeout_s; /**< per request, default AG_CONFIG_TIMEOUT_DEFAULT */
    /* AG_PANEL_SSPANEL (PANEL.md §2): url, token (sent as mod_mu's `key`), node_id
     * (a positive integer), timeout, and the intervals the panel does not give (node_type is
     * "sspanel"). */
    uint32_t pull_interval_s; /**< 0 = default (60 s) */
    uint32_t push_interval_s; /**< 0 = default (60 s) */
    /* AG_PANEL_XBOARD machine mode (PANEL.md §1.1): machine_id instead of node_id
     * (node_id NULL, node_type "machine"); the entry stands for every node the panel assigns
     * to the machine, expanded at run time (ag_uplink_expand) into one node per panel node,
     * tagged "<tag>-<node id>", each with a copy of this entry's other settings. */
    char *machine_id; /**< decimal text, or NULL */
    /** AG_PANEL_XBOARD: seconds between two `node.status` metrics messages over the channel
     *  (PROTOCOLS-2.md §6.5, Xboard-Node's `status_interval`); 0 = default
     *  (AG_CONFIG_STATUS_INTERVAL_DEFAULT). */
    uint32_t status_interval_s;
} ag_panel_config;

/** `cert` of a node: where its TLS certificate comes from. */
enum ag_cert_mode {
    AG_CERT_NONE = 0, /**< no `cert`: the node serves no TLS */
    AG_CERT_FILE,     /**< "mode": "file": cert_file and key_file (PEM), re-read when changed */
    AG_CERT_SELF,     /**< "mode": "self": a self-signed pair for the node's server_name */
};

typedef struct ag_cert_config {
    enum ag_cert_mode mode;
    char *cert_file; /**< AG_CERT_FILE: resolved against the config's directory */
    char *key_file;  /**< AG_CERT_FILE: resolved against the config's directory */
} ag_cert_config;

typedef struct ag_node_config {
    char *tag;    /**< non-empty, at most 64 bytes; unique tags are checked by sv_validate */
    char *listen; /**< IP literal overriding the panel's listen_ip, or NULL */
    bool allow_private; /**< `allow_private`: users may reach loopback, private and
                             link-local addresses and the node's own; default false */
    bool accept_proxy_protocol; /**< `accept_proxy_protocol`: every TCP connection starts with
                                     a PROXY protocol header naming the client; default false */
    bool no_auth; /**< `no_auth`: a socks, http or mixed node admits clients that offer no
                       credentials as its one user; default false */
    sv_cidr trusted_forwarders[SV_TRUSTED_FORWARDERS_MAX]; /**< `trusted_forwarders`: peers
                                     whose X-Forwarded-For / X-Real-IP names the client */
    unsigned n_trusted_forwarders; /**< entries of trusted_forwarders, 0 = none (default) */
    uint64_t speed_limit; /**< `speed_limit`, Mbps, 0 = none: each user's limit is the
                               smallest non-zero of this and the panel's */
    ag_cert_config cert; /**< `cert`: required by a trojan node */
    char *fallback;      /**< `fallback` "HOST:PORT" (trojan), or NULL */
    sv_policy user_removal; /**< `user_removal`: overrides policies.user_removal for
                                 this node's inbound; kind SV_POLICY_DEFAULT when absent */
    bool has_outbound;        /**< `outbound` given: the node has a direct outbound of its own */
    sv_socket_policy outbound; /**< `outbound`: that outbound's socket policy */
    ag_panel_config panel;
} ag_node_config;

typedef struct ag_config {
    int log_level;    /**< an sv_log_level; default SV_LOG_INFO */
    unsigned workers; /**< 0 = number of CPUs */
    uint32_t max_connections; /**< TCP connections of the process; 0 = from the fd limit */
    uint64_t node_speed_limit; /**< `node_speed_limit`, Mbps shared fairly by the
                                    active users; 0 = none; fixed at start */
    unsigned shutdown_grace; /**< seconds live connections get on SIGTERM/SIGINT */
    sv_dns_options dns; /**< `dns`; zero = resolv.conf, 5 s, prefer_ipv4 */
    sv_redis_options redis; /**< `redis`; zero (enabled false) = none */
    char *api_listen; /**< REST API address, "ip:port"; NULL = API_DEFAULT_LISTEN */
    char *api_token;  /**< REST API bearer token, or NULL (then listen must be loopback) */
    char *db_path;    /**< `db.path`: the SQLite store; required with a uniproxy panel */
    unsigned db_flush_s; /**< `db.flush_interval`, seconds (default AG_CONFIG_FLUSH_DEFAULT) */
    sv_policy user_removal; /**< `policies.user_removal`; DEFAULT = Close */
    sv_policy drain;        /**< `policies.drain`; DEFAULT = Keep */
    sv_socket_policy outbound; /**< `outbound`: the shared direct outbound's socket
                                    policy; zero = none */
    ag_node_config *nodes;
    size_t n_nodes;   /**< at least 1 */
} ag_config;

/**
 * Parse a `redis.url`: redis://[[user]:password@]host[:port][/db], host an IPv4
 * literal, [IPv6] literal or localhost (127.0.0.1; no name is resolved), port 6379 and db 0 by
 * default, user and password %XX-unescaped (an empty user: password-only AUTH). Fills host,
 * port, db, user, password of @p out; leaves its other fields alone.
 * @return 0, or -EINVAL with @p err naming what is wrong (never quoting the password).
 */
int ag_redis_url_parse(const char *url, sv_redis_options *out, sv_error *err);

/**
 * Parse a socket policy object at JSON path @p path: "bind" (one or
 * two IP literals, at most one per family), "interface" (at most 15 bytes), "mark" (0..2^32-1,
 * 0 = none), "tcp_keepalive" {"idle" 1..32767 s (required), "interval" 1..32767 s, "count"
 * 1..127}, "tcp_nodelay" (default true). Strict: unknown keys and wrong types are errors naming
 * the path. Whether the host has the address, the interface and the capabilities is checked at
 * apply (sv_socket_policy_check), not here.
 * @param out  overwritten
 * @return 0 or -EINVAL with @p err set.
 */
int ag_socket_policy_parse(const json_t *o, const char *path, sv_socket_policy *out,
                           sv_error *err);

/**
 * Parse a config text.
 * @param text      JSON bytes (need not be NUL-terminated), at most AG_CONFIG_MAX_BYTES
 * @param base_dir  directory relative *_file paths resolve against; NULL = leave them as given
 * @param out       overwritten; owned by the caller on success (ag_config_free), zeroed on error
 * @param err       the JSON path and the reason, or "line L, column C: <jansson text>"
 * @return 0, -EINVAL (invalid), -EMSGSIZE (too big), -ENOMEM.
 */
int ag_config_parse(const char *text, size_t len, const char *base_dir, ag_config *out,
                    sv_error *err);

/**
 * Read and parse a config file (at most AG_CONFIG_MAX_BYTES); relative file paths in it resolve
 * against the file's directory. Errors are as for ag_config_parse(), prefixed with the file
 * name, plus open/read errors (-ENOENT ...).
 */
int ag_config_load_file(const char *path, ag_config *out, sv_error *err);

/** The config spelling of a panel type ("local", "uniproxy", "sspanel", "xboard";
 *  "unknown"). */
const char *ag_panel_type_name(enum ag_panel_type type);

/**
 * Deep copy of one node's settings (a machine entry is copied once per panel node).
 * @param dst  overwritten; free with ag_node_config_free()
 * @return 0 or -ENOMEM (dst zeroed).
 */
int ag_node_config_copy(ag_node_config *dst, const ag_node_config *src);

/** Free what one node's settings own and zero them. NULL-safe. */
void ag_node_config_free(ag_node_config *n);

/** Free what a config owns and zero it. NULL-safe. */
void ag_config_free(ag_config *cfg);

/** Called once per restart-only setting that changed, with its JSON path ("api.token"). */
typedef void (*ag_restart_key_cb)(void *arg, const char *path);

/**
 * The settings a reload (SIGHUP, an API sync, a panel change) does not apply, because they are
 * fixed when katana starts: workers, max_connections, node_speed_limit, dns, redis, api.*,
 * db.*, and the panel settings of a remote panel node (url, token, node_id, node_type, timeout,
 * intervals, machine_id; its pulls run on clients made at start). Calls @p cb for each one that
 * differs between @p running (the config katana started with) and @p next, nodes matched by
 * tag. Values are not passed (tokens are secrets).
 * @return how many differ.
 */
size_t ag_config_restart_keys(const ag_config *running, const ag_config *next,
                              ag_restart_key_cb cb, void *arg);

#endif
