/*
 * `katana import AGENT FILE`: the command (arguments, the file, stdout and stderr) and the
 * translation: the agent's file read into a tree, given to that agent's mapper, the result
 * parsed as `katana check` parses it before it is written. See import.h.
 */
#include "agent/import.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "agent/agent_config.h"

#define IMPORT_MAX_FILE (16u << 20) /* as katana.json(5): a config of at most 16 MiB */
#define IMPORT_DEFAULT_DB "/var/lib/katana/katana.db"
#define IMPORT_API_LISTEN "127.0.0.1:9090" /* katana.json(5): api.listen's default */

static const char import_usage[] =
    "usage: katana import [--db PATH] v2bx|xrayr|xboard-node FILE\n"
    "  Write the katana configuration for the nodes of a V2bX config.json, an XrayR\n"
    "  config.yml or an Xboard-Node config.yml to stdout; settings katana has no\n"
    "  equivalent for are named on stderr. --db sets db.path (default " IMPORT_DEFAULT_DB ").\n";

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

/* @p cfg with an "api" object before its nodes: the REST API on its default address with a
 * new random token, so that the README's curl lines work on the imported node (the packages'
 * config carries one the same way). 0, or -errno (getrandom) / -ENOMEM. */
static int add_api(json_t **cfg)
{
    uint8_t raw[32];
    char token[2 * sizeof raw + 1];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return -errno;
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(token + 2 * i, 3, "%02x", raw[i]);
    json_t *o = json_object(), *v;
    const char *k;
    int rc = o != NULL ? 0 : -ENOMEM;
    json_object_foreach(*cfg, k, v) {
        if (rc == 0 && strcmp(k, "nodes") == 0 &&
            json_object_set_new(o, "api", json_pack("{s:s,s:s}", "listen", IMPORT_API_LISTEN,
                                                    "token", token)) != 0)
            rc = -ENOMEM;
        if (rc == 0 && json_object_set(o, k, v) != 0)
            rc = -ENOMEM;
    }
    json_decref(*cfg);
    if (rc != 0)
        json_decref(o);
    *cfg = rc == 0 ? o : NULL;
    return rc;
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
        if (ch != 'd') { /* glibc: optopt 0 for a long option, whose word is argv[optind-1] */
            char what[80];
            if (optopt != 0)
                snprintf(what, sizeof what, "unknown option '-%c'", optopt);
            else
                snprintf(what, sizeof what, "unknown option '%.40s'", argv[optind - 1]);
            return usage_error(what);
        }
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
    if ((rc = add_api(&cfg)) != 0) {
        fprintf(stderr, "katana import: %s\n", strerror(-rc));
        return 1;
    }
    fprintf(stderr, "katana import: note: api: the REST API on " IMPORT_API_LISTEN " with a new "
            "random token (api.token): curl -H \"Authorization: Bearer TOKEN\" "
            "http://" IMPORT_API_LISTEN "/v1/nodes\n");
    rc = json_dumpf(cfg, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : 1;
    json_decref(cfg);
    if (rc == 0 && (fputc('\n', stdout) == EOF || fflush(stdout) != 0))
        rc = 1;
    return rc;
}
