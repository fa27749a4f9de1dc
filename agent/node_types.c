/* The node types katana serves (node_types.h). */
#include "config.h"

#include "agent/node_types.h"

#include <stddef.h>
#include <strings.h>

static const char *const served_types[] = {"shadowsocks", "trojan", "vless", "vmess", "anytls",
                                           "socks",       "http",   "mixed", NULL};

const char *const *ag_node_types(void)
{
    return served_types;
}

const char *ag_node_type(const char *type)
{
    for (size_t i = 0; type != NULL && served_types[i] != NULL; i++)
        if (strcasecmp(type, served_types[i]) == 0)
            return served_types[i];
    return NULL;
}
