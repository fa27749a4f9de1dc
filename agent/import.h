/*
 * `katana import AGENT FILE`: read the configuration of the agent a
 * node runs today (V2bX's config.json, XrayR's config.yml, Xboard-Node's config.yml) and write
 * the katana configuration that serves the same panel nodes (JSON, the format of
 * katana.json(5)) to stdout. Every source setting katana has no equivalent for gives one
 * warning line on stderr that names it and says what katana does instead.
 *
 * Layout: import.c is the command and the shared builder (nodes, certificates, Redis, DNS,
 * warnings); import_v2bx.c, import_xrayr.c and import_xbnode.c map one agent each;
 * import_yaml.c turns YAML into a jansson tree, so that every mapper reads the same kind of
 * tree. Nothing here opens a socket; only the source file and the DNS file it names are read.
 */
#ifndef AG_IMPORT_H
#define AG_IMPORT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "supervisor/util/err.h"

/** Receives each warning line (without a newline); @p arg is the caller's. */
typedef void (*ag_import_warn_fn)(void *arg, const char *line);

/** The configuration being built and the state the mappers share. Fields are the builder's. */
typedef struct ag_import {
    json_t *out;            /**< the katana configuration (owned) */
    json_t *nodes;          /**< out's "nodes" array (borrowed from out) */
    const char *base_dir;   /**< directory of the source file; NULL: read no other file */
    const char *db_path;    /**< db.path written when a panel needs the outbox */
    ag_import_warn_fn warn; /**< where warnings go */
    void *warn_arg;
    unsigned n_warnings;    /**< warnings given so far */
    bool redis_set;         /**< a Redis device limit was written (the process has one) */
    bool strategy_set;      /**< dns.strategy was written */
    bool dns_set;           /**< a DNS file was read into dns.servers */
} ag_import;

/** How a source key is treated by ag_import_keys(). */
typedef struct ag_import_key {
    const char *name;    /**< the source key, compared without regard to case */
    const char *instead; /**< NULL: the mapper reads it; else the warning given when it is set */
} ag_import_key;

/** A certificate setting as the agents describe it (all strings may be NULL). */
typedef struct ag_import_cert {
    const char *mode;      /**< none, file, self, http, dns, tls, content, or NULL */
    const char *cert_file; /**< PEM chain path, for mode file */
    const char *key_file;  /**< PEM key path, for mode file */
    const char *domain;    /**< the certificate's name (for ACME modes, named in the warning) */
    const char *provider;  /**< the ACME DNS provider, named in the warning */
} ag_import_cert;

/**
 * Translate the configuration text of @p agent ("v2bx", "xrayr" or "xboard-node").
 * @param text, len  the source file's bytes (no NUL needed)
 * @param base_dir   the source file's directory, against which the files it names (a DNS
 *                   config) are read; NULL reads none (the fuzz harness)
 * @param db_path    db.path for panels that need the outbox (NULL: /var/lib/katana/katana.db)
 * @param warn       receives each warning line; @p arg is passed to it
 * @param out        on 0, the new katana configuration (the caller decrefs it)
 * @param err        on failure, the reason naming the setting or the byte where parsing stopped
 * @return 0; -EINVAL (unknown agent: err says so), -EBADMSG (the text is not valid JSON or
 *         YAML, lacks what the agent requires, or holds a value katana's config parser,
 *         ag_config_parse(), refuses in the result: err names its JSON path), -ENOENT (no
 *         node katana can serve), -ENOMEM. A configuration given back always parses.
 */
int ag_import_text(const char *agent, const char *text, size_t len, const char *base_dir,
                   const char *db_path, ag_import_warn_fn warn, void *arg, json_t **out,
                   sv_error *err);

/**
 * The `katana import` command: @p argv[0] is "import", then [--db PATH] AGENT FILE.
 * Writes the configuration to stdout and the warnings to stderr.
 * @return the exit status: 0 written, 1 the file is unreadable or malformed or holds no node
 *         katana serves, 2 a usage error (named on stderr).
 */
int ag_import_main(int argc, char **argv);

/* ---- for the mappers ------------------------------------------------------------------- */

/**
 * Give one warning: "WHERE: TEXT". printf-style; control characters (from the source's keys and
 * values) become '?', so a warning is one line. Counts it in im->n_warnings.
 */
void ag_import_warnf(ag_import *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Member @p key of object @p obj, found without regard to case; NULL when absent. */
json_t *ag_import_get(const json_t *obj, const char *key);

/** The non-empty string at @p key, or NULL (absent, null, empty or not a string). */
const char *ag_import_str(const json_t *obj, const char *key);

/**
 * The integer at @p key (an integer, or a string of decimal digits) in @p v.
 * @return true when present and valid; false otherwise (*v untouched).
 */
bool ag_import_int(const json_t *obj, const char *key, json_int_t *v);

/** Whether @p key holds true (a boolean true, or the string "true"). */
bool ag_import_true(const json_t *obj, const char *key);

/** Whether @p v is "set": not NULL, null, false, 0, "", [] or {}. */
bool ag_import_is_set(const json_t *v);

/**
 * Walk the members of object @p obj at @p where: a member named in @p keys (NULL-terminated
 * by name) with an `instead` text gives "WHERE.KEY: INSTEAD" when it is set; a member not in
 * @p keys gives "WHERE.KEY: not a setting katana import knows; ignored". Members the table
 * marks as read (instead NULL) are left to the mapper. @p obj not an object: nothing.
 */
void ag_import_keys(ag_import *im, const char *where, const json_t *obj,
                    const ag_import_key *keys);

/**
 * Add a node of a remote panel and return it (borrowed from im->out), or NULL on ENOMEM.
 * @param tag_hint  the source's node name, or NULL: the tag is then TYPE-ID; a tag already
 *                  used gets "-2", "-3", ... appended
 * @param ptype     "uniproxy", "xboard" or "sspanel" (sspanel takes no node_type)
 * @param node_id   the panel's node id, > 0 (or the machine id with @p node_type "machine")
 * @param node_type shadowsocks, trojan, vless or vmess; "machine" writes an xboard machine
 *                  entry (machine_id instead of node_id and node_type)
 * Also writes db.path (every remote panel needs the outbox).
 */
json_t *ag_import_node(ag_import *im, const char *tag_hint, const char *ptype, const char *url,
                       const char *token, json_int_t node_id, const char *node_type);

/**
 * The katana node type for an agent's @p type (lower-cased; "v2ray" is vmess, or vless when
 * @p vless); NULL when katana does not serve it.
 */
const char *ag_import_node_type(const char *type, bool vless);

/** Set "listen" of @p node from @p ip unless it is empty, 0.0.0.0 or :: (every address). */
void ag_import_listen(ag_import *im, json_t *node, const char *where, const char *ip);

/** Set "outbound": {"bind": [ip]} of @p node unless @p ip is empty, 0.0.0.0 or ::. */
void ag_import_send(ag_import *im, json_t *node, const char *where, const char *ip);

/**
 * Map a certificate setting onto @p node's "cert" (katana.json(5) nodes[].cert: modes file and
 * self). file → file; self → self; http, dns, tls (ACME) and content → self with a warning
 * that names the mode and what to do; none or NULL → no cert. A shadowsocks node takes none
 * (warned when the source sets one).
 */
void ag_import_set_cert(ag_import *im, json_t *node, const char *where, const char *node_type,
                        const ag_import_cert *c);

/**
 * Write the process-wide Redis device limit (katana.json(5) redis.*) from an agent's setting.
 * @param addr      "host:port" (host an IP literal or localhost; a name is warned and skipped)
 * @param timeout_s the agent's Redis timeout in seconds (0: katana's default), capped at 10
 * @param expiry_s  seconds an IP counts (0: katana's default), 3 to 86400
 * A second call writes nothing and warns that the process has one Redis.
 */
void ag_import_redis(ag_import *im, const char *where, const char *addr, const char *password,
                     json_int_t db, json_int_t timeout_s, json_int_t expiry_s);

/**
 * Write dns.strategy from an Xray DNSType / sing-box DomainStrategy value (AsIs, UseIP,
 * UseIPv4, UseIPv6, prefer_ipv4, prefer_ipv6, ipv4_only, ipv6_only); unknown values warn.
 */
void ag_import_strategy(ag_import *im, const char *where, const char *value);

/**
 * Read the Xray or sing-box DNS file @p path (relative to im->base_dir) into dns.servers:
 * its plain servers (an IP, IP:port or udp://IP) in order, at most 8; servers for some domains
 * only, DoH/DoT/TCP servers, names, rules and hosts are warned about. Nothing is read when
 * im->base_dir is NULL; an unreadable or malformed file is warned about.
 */
void ag_import_dns_file(ag_import *im, const char *where, const char *path);

/**
 * Write log.level from an agent's level: info, debug and trace as they are; none, error and
 * warning/warn leave log.level out (katana's info) with a warning, since katana's info level
 * has no line per connection; an unknown level is warned about and left out.
 */
void ag_import_log_level(ag_import *im, const char *where, const char *level);

/**
 * Map a fallback list (objects with SNI, Alpn, Path, Dest, ProxyProtocolVer; an object alone
 * counts as a list of one) onto @p node's "fallback": the first entry without SNI, Alpn and
 * Path whose Dest is a port or HOST:PORT; every other entry, and a PROXY protocol version,
 * warn. Only trojan and vless nodes take one.
 */
void ag_import_fallback(ag_import *im, json_t *node, const char *where, const char *node_type,
                        const json_t *list);

/* the mappers: each reads the tree @p root of its agent's file */
int ag_import_v2bx(ag_import *im, const json_t *root, sv_error *err);
int ag_import_xrayr(ag_import *im, const json_t *root, sv_error *err);
int ag_import_xbnode(ag_import *im, const json_t *root, sv_error *err);

/**
 * Parse the YAML text (one document; YAML 1.1 as libyaml reads it) into a jansson tree:
 * mappings become objects (keys as their scalar text), sequences arrays, plain scalars
 * null/true/false/integers/reals when they spell one (YAML 1.2 core schema, plus yes/no/on/off
 * as booleans), every other scalar a string. Anchors and aliases are refused.
 * @param err  on -EBADMSG, libyaml's problem with its line and column
 * @return 0 (*out a new reference), -EBADMSG or -ENOMEM.
 */
int ag_import_yaml_load(const char *text, size_t len, json_t **out, sv_error *err);

/**
 * Parse V2bX's JSON: JSON with // and block comments and trailing commas (as V2bX's json5
 * reader accepts them), duplicate keys refused.
 * @return 0 (*out a new reference), -EBADMSG (err names the line and column) or -ENOMEM.
 */
int ag_import_json5_load(const char *text, size_t len, json_t **out, sv_error *err);

#endif
