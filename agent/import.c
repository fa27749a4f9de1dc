/*
 * `katana import AGENT FILE`: the shared pieces of the configuration being built (nodes, tags,
 * warnings, key tables) that every agent's mapper uses. The command and the dispatch to one
 * agent's mapper are import_cmd.c; the settings mapped alike for every agent (certificates,
 * Redis, DNS, fallbacks) are import_map.c. See import.h.
 */
#include "agent/import.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "agent/agent_config.h"
#include "agent/node_types.h"

/* ------------------------------------------------------------------------------------------ */
/* small readers of the source tree                                                            */
/* ------------------------------------------------------------------------------------------ */

json_t *ag_import_get(const json_t *obj, const char *key)
{
    const char *k;
    json_t *v;
    if (!json_is_object(obj))
        return NULL;
    json_object_foreach((json_t *)obj, k, v) {
        if (strcasecmp(k, key) == 0)
            return v;
    }
    return NULL;
}

const char *ag_import_str(const json_t *obj, const char *key)
{
    const json_t *v = ag_import_get(obj, key);
    if (!json_is_string(v) || json_string_length(v) == 0)
        return NULL;
    return json_string_value(v);
}

bool ag_import_int(const json_t *obj, const char *key, json_int_t *v)
{
    const json_t *j = ag_import_get(obj, key);
    if (json_is_integer(j)) {
        *v = json_integer_value(j);
        return true;
    }
    if (!json_is_string(j) || json_string_length(j) == 0 || json_string_length(j) > 18)
        return false;
    const char *s = json_string_value(j);
    json_int_t n = 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        n = n * 10 + (s[i] - '0');
    }
    *v = n;
    return true;
}

bool ag_import_true(const json_t *obj, const char *key)
{
    const json_t *v = ag_import_get(obj, key);
    return json_is_true(v) || (json_is_string(v) && strcasecmp(json_string_value(v), "true") == 0);
}

bool ag_import_is_set(const json_t *v)
{
    if (v == NULL || json_is_null(v) || json_is_false(v))
        return false;
    if (json_is_integer(v))
        return json_integer_value(v) != 0;
    if (json_is_real(v))
        return json_real_value(v) != 0.0;
    if (json_is_string(v))
        return json_string_length(v) != 0;
    if (json_is_array(v))
        return json_array_size(v) != 0;
    if (json_is_object(v))
        return json_object_size(v) != 0;
    return true;
}

void ag_import_warnf(ag_import *im, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p != '\0'; p++) { /* source keys and values are quoted: one line */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    }
    im->n_warnings++;
    if (im->warn != NULL)
        im->warn(im->warn_arg, line);
}

void ag_import_keys(ag_import *im, const char *where, const json_t *obj,
                    const ag_import_key *keys)
{
    const char *k;
    json_t *v;
    if (!json_is_object(obj))
        return;
    json_object_foreach((json_t *)obj, k, v) {
        const ag_import_key *e = keys;
        while (e->name != NULL && strcasecmp(e->name, k) != 0)
            e++;
        if (e->name == NULL)
            ag_import_warnf(im, "%s.%.64s: not a setting katana import knows; ignored", where, k);
        else if (e->instead != NULL && ag_import_is_set(v))
            ag_import_warnf(im, "%s.%s: %s", where, e->name, e->instead);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* nodes                                                                                        */
/* ------------------------------------------------------------------------------------------ */

const char *ag_import_node_type(const char *type, bool vless)
{
    if (type == NULL)
        return NULL;
    if (strcasecmp(type, "v2ray") == 0)
        return vless ? "vless" : "vmess";
    if (strcasecmp(type, "shadowsocks-plugin") == 0)
        return "shadowsocks"; /* the plugin comes from the panel's node body (plugin_opts) */
    return ag_node_type(type);
}

static bool tag_taken(const ag_import *im, const char *tag)
{
    size_t i;
    json_t *n;
    json_array_foreach(im->nodes, i, n) {
        const char *t = json_string_value(json_object_get(n, "tag"));
        if (t != NULL && strcmp(t, tag) == 0)
            return true;
    }
    return false;
}

/* A tag katana accepts (at most 64 bytes; no control character, quote or backslash) and not
 * used yet: the hint with such bytes replaced by '-', else TYPE-ID; "-N" added on a clash. */
static void make_tag(const ag_import *im, const char *hint, const char *type, json_int_t id,
                     char *tag, size_t cap)
{
    char base[48];
    if (hint != NULL) {
        snprintf(base, sizeof base, "%s", hint);
        for (char *p = base; *p != '\0'; p++) {
            if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\')
                *p = '-';
        }
    } else {
        snprintf(base, sizeof base, "%s-%lld", type, (long long)id);
    }
    snprintf(tag, cap, "%s", base);
    for (unsigned n = 2; tag_taken(im, tag) && n < 100000; n++)
        snprintf(tag, cap, "%s-%u", base, n);
}

json_t *ag_import_node(ag_import *im, const char *tag_hint, const char *ptype, const char *url,
                       const char *token, json_int_t node_id, const char *node_type)
{
    char tag[64];
    bool machine = strcmp(node_type, "machine") == 0;
    make_tag(im, tag_hint, strcmp(ptype, "sspanel") == 0 ? "sspanel" : node_type, node_id, tag,
             sizeof tag);
    json_t *panel = json_pack("{s:s, s:s, s:s}", "type", ptype, "url", url, "token", token);
    json_t *node = json_pack("{s:s}", "tag", tag);
    if (panel == NULL || node == NULL) {
        json_decref(panel);
        json_decref(node);
        return NULL;
    }
    json_object_set_new(panel, machine ? "machine_id" : "node_id", json_integer(node_id));
    if (!machine && strcmp(ptype, "sspanel") != 0)
        json_object_set_new(panel, "node_type", json_string(node_type));
    json_object_set_new(node, "panel", panel);
    if (json_array_append_new(im->nodes, node) != 0)
        return NULL;
    if (json_object_get(im->out, "db") == NULL)
        json_object_set_new(im->out, "db", json_pack("{s:s}", "path", im->db_path));
    return node;
}
