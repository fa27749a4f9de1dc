/*
 * `katana import AGENT FILE` (issue 32): the command, the dispatch to one agent's mapper and
 * the shared pieces of the configuration being built (nodes, tags, warnings, key tables).
 * The settings mapped alike for every agent (certificates, Redis, DNS, fallbacks) are in
 * import_map.c. See import.h.
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

#define IMPORT_MAX_FILE (16u << 20) /* as katana.json(5): a config of at most 16 MiB */
#define IMPORT_DEFAULT_DB "/var/lib/katana/katana.db"

static const char import_usage[] =
    "usage: katana import [--db PATH] v2bx|xrayr|xboard-node FILE\n"
    "  Write the katana configuration for the nodes of a V2bX config.json, an XrayR\n"
    "  config.yml or an Xboard-Node config.yml to stdout; settings katana has no\n"
    "  equivalent for are named on stderr. --db sets db.path (default " IMPORT_DEFAULT_DB ").\n";

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
    static const char *const served[] = {"shadowsocks", "trojan", "vless", "vmess", NULL};
    if (type == NULL)
        return NULL;
    if (strcasecmp(type, "v2ray") == 0)
        return vless ? "vless" : "vmess";
    if (strcasecmp(type, "shadowsocks-plugin") == 0)
        return "shadowsocks"; /* the plugin comes from the panel's node body (plugin_opts) */
    for (size_t i = 0; served[i] != NULL; i++) {
        if (strcasecmp(type, served[i]) == 0)
            return served[i];
    }
    return NULL;
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

/* ------------------------------------------------------------------------------------------ */
/* the translation                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* @p cfg's members in the order of katana.json(5) (log, db, dns, redis, nodes); consumes it. */
static json_t *in_order(json_t *cfg)
{
    static const char *const order[] = {"log", "db", "dns", "redis", "nodes", NULL};
    json_t *o = json_object();
    for (size_t i = 0; o != NULL && order[i] != NULL; i++) {
        json_t *v = json_object_get(cfg, order[i]);
        if (v != NULL && json_object_set(o, order[i], v) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    json_decref(cfg);
    return o;
}

/* The output must be a file katana reads: parsed as `katana check` parses it (nothing on the
 * host is looked at), so a source value katana refuses is named here, not at the first run. */
static int self_check(const json_t *cfg, sv_error *err)
{
    ag_config c;
    sv_error e = {0};
    char *text = json_dumps(cfg, JSON_PRESERVE_ORDER | JSON_COMPACT);
    if (text == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    int rc = ag_config_parse(text, strlen(text), NULL, &c, &e);
    free(text);
    if (rc == -ENOMEM)
        return sv_error_set(err, -ENOMEM, "out of memory");
    if (rc != 0)
        return sv_error_set(err, -EBADMSG, "the source holds a value katana refuses: %s", e.msg);
    ag_config_free(&c);
    return 0;
}

static int load_tree(const char *agent, const char *text, size_t len, json_t **root,
                     sv_error *err)
{
    if (strcmp(agent, "v2bx") == 0)
        return ag_import_json5_load(text, len, root, err);
    return ag_import_yaml_load(text, len, root, err);
}

int ag_import_text(const char *agent, const char *text, size_t len, const char *base_dir,
                   const char *db_path, ag_import_warn_fn warn, void *arg, json_t **out,
                   sv_error *err)
{
    int (*map)(ag_import *, const json_t *, sv_error *) =
        strcmp(agent, "v2bx") == 0          ? ag_import_v2bx
        : strcmp(agent, "xrayr") == 0       ? ag_import_xrayr
        : strcmp(agent, "xboard-node") == 0 ? ag_import_xbnode
                                            : NULL;
    *out = NULL;
    if (map == NULL)
        return sv_error_set(err, -EINVAL, "unknown agent \"%.32s\": expected v2bx, xrayr or "
                            "xboard-node", agent);
    json_t *root = NULL;
    int rc = load_tree(agent, text, len, &root, err);
    if (rc != 0)
        return rc;
    ag_import im = {.out = json_object(), .nodes = json_array(), .base_dir = base_dir,
                    .db_path = db_path != NULL ? db_path : IMPORT_DEFAULT_DB, .warn = warn,
                    .warn_arg = arg};
    if (im.out == NULL || im.nodes == NULL || json_object_set(im.out, "nodes", im.nodes) != 0)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = json_is_object(root) ? map(&im, root, err)
                                  : sv_error_set(err, -EBADMSG, "the file is not a mapping of "
                                                 "settings (an object at the top)");
    if (rc == 0 && json_array_size(im.nodes) == 0)
        rc = sv_error_set(err, -ENOENT, "no node katana can serve in the file (see the "
                          "warnings)");
    json_decref(root);
    json_decref(im.nodes);
    if (rc != 0) {
        json_decref(im.out);
        return rc;
    }
    *out = in_order(im.out);
    rc = *out != NULL ? self_check(*out, err) : sv_error_set(err, -ENOMEM, "out of memory");
    if (rc != 0) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* the command                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static void warn_stderr(void *arg, const char *line)
{
    (void)arg;
    fprintf(stderr, "katana import: warning: %s\n", line);
}

/* The whole regular file @p path (at most IMPORT_MAX_FILE bytes), NUL-terminated. */
static char *read_file(const char *path, size_t *len, sv_error *err)
{
    struct stat st;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        sv_error_set(err, -errno, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        sv_error_set(err, -EINVAL, "%s: not a regular file", path);
    else if ((size_t)st.st_size > IMPORT_MAX_FILE)
        sv_error_set(err, -EFBIG, "%s: larger than 16 MiB", path);
    else if ((buf = malloc((size_t)st.st_size + 1)) == NULL)
        sv_error_set(err, -ENOMEM, "out of memory");
    else if ((*len = fread(buf, 1, (size_t)st.st_size, f)) != (size_t)st.st_size || ferror(f)) {
        sv_error_set(err, -EIO, "%s: read error", path);
        free(buf);
        buf = NULL;
    } else {
        buf[*len] = '\0';
    }
    fclose(f);
    return buf;
}

/* The directory part of @p path ("." when none), in @p dir. */
static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static int usage_error(const char *what)
{
    fprintf(stderr, "katana import: %s\n%s", what, import_usage);
    return 2;
}

int ag_import_main(int argc, char **argv)
{
    static const struct option longs[] = {{"db", required_argument, NULL, 'd'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *db = NULL;
    int ch;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+:h", longs, NULL)) != -1) {
        if (ch == 'h') {
            fputs(import_usage, stdout);
            return 0;
        }
        if (ch == ':' || (ch == 'd' && optarg[0] == '\0'))
            return usage_error("--db needs a path");
        if (ch != 'd')
            return usage_error("unknown option");
        db = optarg;
    }
    if (argc - optind != 2)
        return usage_error(argc - optind < 2 ? "expected an agent name and a FILE"
                                             : "too many arguments");
    const char *agent = argv[optind], *path = argv[optind + 1];
    if (strcmp(agent, "v2bx") != 0 && strcmp(agent, "xrayr") != 0 &&
        strcmp(agent, "xboard-node") != 0) {
        char what[96];
        snprintf(what, sizeof what, "unknown agent \"%.32s\": expected v2bx, xrayr or "
                 "xboard-node", agent);
        return usage_error(what);
    }
    sv_error err = {0};
    size_t len = 0;
    char *text = read_file(path, &len, &err), dir[4096];
    json_t *cfg = NULL;
    dir_of(path, dir, sizeof dir);
    int rc = text == NULL ? err.code
                          : ag_import_text(agent, text, len, dir, db, warn_stderr, NULL, &cfg,
                                           &err);
    free(text);
    if (rc != 0) {
        fprintf(stderr, "katana import: %s\n", err.msg);
        return 1;
    }
    rc = json_dumpf(cfg, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : 1;
    json_decref(cfg);
    if (rc == 0 && (fputc('\n', stdout) == EOF || fflush(stdout) != 0))
        rc = 1;
    return rc;
}
