/*
 * The node types katana serves: the one list the config parser, the importers, Xboard's
 * machine mode and lowering (agent/lower.c) agree on. A new node type is one entry here and
 * its lowering.
 */
#ifndef AG_NODE_TYPES_H
#define AG_NODE_TYPES_H

/** The node types katana serves (a node body's "protocol", a panel's node_type): a
 *  NULL-terminated list of static strings, in the order messages name them ("shadowsocks",
 *  "trojan", "vless", "vmess", "anytls", "socks", "http", "mixed"; mixed is a local-config type,
 *  which no panel sends). */
const char *const *ag_node_types(void);

/** The served type @p type names (case-insensitive), as the static string of ag_node_types();
 *  NULL when katana does not serve it (or @p type is NULL). */
const char *ag_node_type(const char *type);

#endif
