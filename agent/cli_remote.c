/*
 * The REST API client of `katana status`, `katana top` and `katana kill` (cli_remote.h), and
 * the `status` and `kill` commands. Routes, answers and the token rule: docs/api.md.
 */
#include "config.h"

#include "agent/cli_remote.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/agent_config.h"
#include "api/api.h"
#include "supervisor/util/textbuf.h"

#define CALL_TIMEOUT_S 10L        /* one request of status or kill */
#define CONNECT_TIMEOUT_S 3L      /* every request: the API is on this host or near it */
#define ANSWER_MAX (256u << 20)   /* largest answer read (a /v1/connections of many flows) */
#define STATUS_USERS_MAX 20u      /* user rows `status` prints; the rest is counted */

/* ------------------------------------------------------------------------------------------ */
/* the API from the config                                                                      */
/* ------------------------------------------------------------------------------------------ */

const char *ag_cli_config_path(const char *given)
{
    return given != NULL ? given : AG_CLI_DEFAULT_CONFIG;
}

/* "http://HOST:PORT" for api.listen @p listen: a wildcard address is reached on loopback. */
static void base_url(const char *listen, char *out, size_t size)
{
    if (strncmp(listen, "0.0.0.0:", 8) == 0)
        snprintf(out, size, "http://127.0.0.1:%s", listen + 8);
    else if (strncmp(listen, "[::]:", 5) == 0)
        snprintf(out, size, "http://[::1]:%s", listen + 5);
    else
        snprintf(out, size, "http://%s", listen);
}

int ag_cli_api_open(const char *config_path, ag_cli_api *out)
{
    ag_config cfg;
    sv_error err = {0};
    memset(out, 0, sizeof *out);
    out->config_path = config_path;
    if (ag_config_load_file(config_path, &cfg, &err) != 0) {
        fprintf(stderr, "katana: cannot read the configuration: %s\n%s", err.msg,
                strcmp(config_path, AG_CLI_DEFAULT_CONFIG) == 0
                    ? "katana: the API's address and token come from the running katana's "
                      "configuration: give it with -c FILE\n"
                    : "");
        return 1;
    }
    base_url(cfg.api_listen != NULL ? cfg.api_listen : API_DEFAULT_LISTEN, out->base,
             sizeof out->base);
    int rc = 0;
    if (cfg.api_token != NULL) {
        size_t n = strlen(cfg.api_token) + sizeof "Authorization: Bearer ";
        out->auth = malloc(n);
        if (out->auth == NULL) {
            fprintf(stderr, "katana: out of memory\n");
            rc = 1;
        } else {
            snprintf(out->auth, n, "Authorization: Bearer %s", cfg.api_token);
        }
    }
    ag_config_free(&cfg);
    if (rc == 0)
        out->curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    return rc;
}

void ag_cli_api_free(ag_cli_api *api)
{
    if (api == NULL)
        return;
    free(api->auth);
    api->auth = NULL;
    if (api->curl_ready)
        curl_global_cleanup();
    api->curl_ready = false;
}

int ag_cli_api_setup(const ag_cli_api *api, CURL *easy, const char *method, const char *path,
                     long timeout_s, struct curl_slist **headers)
{
    char url[sizeof api->base + 512];
    snprintf(url, sizeof url, "%s%s", api->base, path);
    *headers = NULL;
    if (api->auth != NULL && (*headers = curl_slist_append(NULL, api->auth)) == NULL)
        return -ENOMEM;
    if (curl_easy_setopt(easy, CURLOPT_URL, url) != CURLE_OK)
        return -ENOMEM;
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, *headers);
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") == 0 ? NULL : method);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_NOPROXY, "*"); /* the API is ours: never through a proxy */
    return 0;
}

int ag_cli_api_unreachable(const ag_cli_api *api, CURL *easy, CURLcode code)
{
    long os_errno = 0;
    char why[256];
    curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
    if (code == CURLE_COULDNT_CONNECT && os_errno != 0)
        snprintf(why, sizeof why, "%s", strerror((int)os_errno));
    else if (code == CURLE_OPERATION_TIMEDOUT)
        snprintf(why, sizeof why, "no answer in time");
    else
        snprintf(why, sizeof why, "%s", curl_easy_strerror(code));
    why[0] = (char)tolower((unsigned char)why[0]); /* "Connection refused" inside a sentence */
    fprintf(stderr, "katana: cannot reach the REST API at %s: %s\n", api->base, why);
    return 1;
}

int ag_cli_api_refused(const ag_cli_api *api, const char *path, long status, const json_t *body)
{
    if (status == 401) {
        fprintf(stderr, "katana: the REST API refused the token (401): check api.token in %s\n",
                api->config_path);
        return 1;
    }
    const char *msg = ag_cli_str(body, "error", NULL);
    fprintf(stderr, "katana: %s: the REST API answered %ld%s%s\n", path, status,
            msg != NULL ? ": " : "", msg != NULL ? msg : "");
    return 1;
}

typedef struct answer {
    char *buf;
    size_t len, cap;
    bool too_big;
} answer;

static size_t on_answer(char *data, size_t size, size_t n, void *arg)
{
    answer *a = arg;
    size_t add = size * n;
    if (add > ANSWER_MAX - a->len) {
        a->too_big = true;
        return 0; /* ends the transfer (CURLE_WRITE_ERROR) */
    }
    if (sv_textbuf_append(&a->buf, &a->len, &a->cap, 16384, data, add) != 0)
        return 0;
    return add;
}

static bool status_ok(long status, const long *ok)
{
    if (ok == NULL)
        return status >= 200 && status < 300;
    for (; *ok != 0; ok++)
        if (*ok == status)
            return true;
    return false;
}

/* The answer's JSON (NULL for an empty body); @p bad set when it is not JSON. */
static json_t *parse_answer(const answer *a, const char *path, bool *bad)
{
    json_error_t jerr;
    *bad = false;
    if (a->len == 0)
        return NULL;
    json_t *v = json_loadb(a->buf, a->len, 0, &jerr);
    if (v == NULL) {
        fprintf(stderr, "katana: %s: the REST API's answer is not JSON: %s\n", path, jerr.text);
        *bad = true;
    }
    return v;
}

int ag_cli_api_call(const ag_cli_api *api, const char *method, const char *path,
                    const long *ok_status, long *status, json_t **body)
{
    CURL *easy = curl_easy_init();
    struct curl_slist *headers = NULL;
    answer a = {0};
    long st = 0;
    int rc = 1;
    if (body != NULL)
        *body = NULL;
    if (easy == NULL || ag_cli_api_setup(api, easy, method, path, CALL_TIMEOUT_S, &headers) != 0) {
        fprintf(stderr, "katana: out of memory\n");
        goto out;
    }
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_answer);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &a);
    CURLcode code = curl_easy_perform(easy);
    if (code != CURLE_OK) {
        if (a.too_big)
            fprintf(stderr, "katana: %s: the REST API's answer is over %u MiB\n", path,
                    ANSWER_MAX >> 20);
        else
            ag_cli_api_unreachable(api, easy, code);
        goto out;
    }
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &st);
    bool bad;
    json_t *v = parse_answer(&a, path, &bad);
    if (!status_ok(st, ok_status)) {
        ag_cli_api_refused(api, path, st, v);
        json_decref(v);
        goto out;
    }
    if (bad)
        goto out;
    rc = 0;
    if (body != NULL)
        *body = v;
    else
        json_decref(v);
out:
    if (status != NULL)
        *status = st;
    curl_slist_free_all(headers);
    if (easy != NULL)
        curl_easy_cleanup(easy);
    free(a.buf);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                                */
/* ------------------------------------------------------------------------------------------ */

const char *ag_cli_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char units[][3] = {"KB", "MB", "GB", "TB", "PB", "EB"};
    if (bytes < 1000) {
        snprintf(buf, size, "%" PRIu64 " B", bytes);
        return buf;
    }
    double v = (double)bytes / 1000.0;
    size_t u = 0;
    while (v >= 999.95 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

uint64_t ag_cli_u64(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

const char *ag_cli_str(const json_t *o, const char *key, const char *dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

void ag_cli_table_row(ag_cli_table *t, const char *const *cells)
{
    if (t->oom)
        return;
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        char **p = realloc(t->cells, cap * t->ncols * sizeof *p);
        if (p == NULL) {
            t->oom = true;
            return;
        }
        t->cells = p;
        t->cap = cap;
    }
    char **row = t->cells + t->nrows * t->ncols;
    for (size_t i = 0; i < t->ncols; i++) {
        row[i] = strdup(cells[i] != NULL ? cells[i] : "-");
        if (row[i] == NULL) {
            while (i-- > 0)
                free(row[i]);
            t->oom = true;
            return;
        }
    }
    t->nrows++;
}

void ag_cli_table_print(const ag_cli_table *t, FILE *f, const char *align)
{
    size_t width[16] = {0};
    size_t ncols = t->ncols < 16 ? t->ncols : 16;
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < ncols; c++) {
            size_t n = strlen(t->cells[r * t->ncols + c]);
            if (n > width[c])
                width[c] = n;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        char line[1024];
        size_t len = 0;
        for (size_t c = 0; c < ncols && len < sizeof line; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            bool right = align != NULL && align[c] == 'r';
            int n = snprintf(line + len, sizeof line - len, right ? "%s%*s" : "%s%-*s",
                             c > 0 ? "  " : "", (int)width[c], cell);
            len = n < 0 ? sizeof line : len + (size_t)n;
        }
        if (len >= sizeof line)
            len = sizeof line - 1;
        while (len > 0 && line[len - 1] == ' ')
            len--;
        fprintf(f, "%.*s\n", (int)len, line);
    }
}

void ag_cli_table_free(ag_cli_table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    size_t ncols = t->ncols;
    memset(t, 0, sizeof *t);
    t->ncols = ncols;
}

/* The API's RFC 3339 UTC time @p text ("2026-12-07T00:42:03.782Z") in Unix seconds; -1 when
 * it does not parse. */
static time_t api_time(const char *text)
{
    struct tm tm = {0};
    if (text == NULL || sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon,
                               &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return (time_t)-1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return timegm(&tm);
}

/* Seconds since the time @p text; 0 when it is still ahead, -1 when unparsable. */
static long seconds_since(const char *text)
{
    time_t then = api_time(text), now = time(NULL);
    return then == (time_t)-1 ? -1 : now >= then ? (long)(now - then) : 0;
}

/* Seconds until the time @p text; 0 when it has passed or does not parse. */
static long seconds_until(const char *text)
{
    time_t then = api_time(text), now = time(NULL);
    return then == (time_t)-1 || then <= now ? 0 : (long)(then - now);
}

/* "12s ago", "5m ago", "3h ago", "2d ago" into @p buf. */
static const char *ago(const char *text, char *buf, size_t size)
{
    long s = seconds_since(text);
    if (s < 0)
        snprintf(buf, size, "%s", text != NULL ? text : "?");
    else if (s < 120)
        snprintf(buf, size, "%lds ago", s);
    else if (s < 7200)
        snprintf(buf, size, "%ldm ago", s / 60);
    else if (s < 172800)
        snprintf(buf, size, "%ldh ago", s / 3600);
    else
        snprintf(buf, size, "%ldd ago", s / 86400);
    return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* status                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static const char status_usage[] =
    "usage: katana status [-c FILE]\n"
    "  Show the nodes, their panel's last pull and push, and the users with live sessions or\n"
    "  traffic of the katana whose REST API FILE configures (default " AG_CLI_DEFAULT_CONFIG
    ").\n";

/* "ok 12s ago", "FAILED 3s ago" or "never" for a last_pull / last_push object. */
static const char *result_cell(const json_t *r, char *buf, size_t size)
{
    char when[32];
    if (!json_is_object(r)) {
        snprintf(buf, size, "never");
        return buf;
    }
    bool ok = json_is_true(json_object_get(r, "ok"));
    snprintf(buf, size, "%s %s", ok ? "ok" : "FAILED",
             ago(ag_cli_str(r, "time", NULL), when, sizeof when));
    return buf;
}

/* The node table, then one line per failed pull or push with its error. */
static void print_nodes(const json_t *nodes)
{
    ag_cli_table t = {.ncols = 9};
    const char *head[] = {"NODE", "PANEL", "STATE", "USERS", "SESSIONS", "FLOWS",
                          "LAST PULL", "LAST PUSH", "OUTBOX"};
    ag_cli_table_row(&t, head);
    size_t i;
    const json_t *n;
    json_array_foreach(nodes, i, n) {
        char users[24], sessions[24], flows[24], pull[48], push[48], outbox[24];
        const json_t *panel = json_object_get(n, "panel");
        snprintf(users, sizeof users, "%" PRIu64, ag_cli_u64(n, "users"));
        snprintf(sessions, sizeof sessions, "%" PRIu64, ag_cli_u64(n, "sessions"));
        snprintf(flows, sizeof flows, "%" PRIu64, ag_cli_u64(n, "flows"));
        ag_cli_bytes(ag_cli_u64(json_object_get(n, "outbox"), "pending_bytes"), outbox,
                     sizeof outbox);
        const char *row[] = {ag_cli_str(n, "tag", "?"), ag_cli_str(panel, "type", "?"),
                             json_is_true(json_object_get(n, "applied")) ? "applied" : "waiting",
                             users, sessions, flows,
                             result_cell(json_object_get(n, "last_pull"), pull, sizeof pull),
                             result_cell(json_object_get(n, "last_push"), push, sizeof push),
                             outbox};
        ag_cli_table_row(&t, row);
    }
    ag_cli_table_print(&t, stdout, "lllrrrllr");
    ag_cli_table_free(&t);
    json_array_foreach(nodes, i, n) {
        static const char *const which[] = {"last_pull", "last_push"};
        for (size_t k = 0; k < 2; k++) {
            const json_t *r = json_object_get(n, which[k]);
            if (json_is_object(r) && !json_is_true(json_object_get(r, "ok")))
                printf("node %s: %s failed: %s\n", ag_cli_str(n, "tag", "?"),
                       k == 0 ? "pull" : "push", ag_cli_str(r, "error", "(no reason given)"));
        }
        const char *ends = ag_cli_str(json_object_get(n, "certificate"), "not_after", NULL);
        long past = seconds_since(ends);
        if (ends != NULL && past > 0) /* seconds_since() gives 0 for a time still ahead */
            printf("node %s: certificate EXPIRED at %s, %ld days ago\n", ag_cli_str(n, "tag", "?"),
                   ends, past / 86400);
        else if (ends != NULL)
            printf("node %s: certificate valid until %s (%ld days left)\n",
                   ag_cli_str(n, "tag", "?"), ends, seconds_until(ends) / 86400);
    }
}

typedef struct user_row {
    uint64_t uid, sessions, flows, up, down;
} user_row;

/* The row of @p uid in @p v (*n rows, room for @p cap), appended when new; NULL when full. */
static user_row *user_find(user_row *v, size_t *n, size_t cap, uint64_t uid)
{
    for (size_t i = 0; i < *n; i++)
        if (v[i].uid == uid)
            return &v[i];
    if (*n == cap)
        return NULL;
    v[*n] = (user_row){.uid = uid};
    return &v[(*n)++];
}

static int user_cmp(const void *a, const void *b)
{
    const user_row *x = a, *y = b;
    uint64_t tx = x->up + x->down, ty = y->up + y->down;
    if (tx != ty)
        return tx > ty ? -1 : 1;
    return x->uid < y->uid ? -1 : x->uid > y->uid;
}

/* Users of /v1/connections (sessions, flows) and /v1/usage (bytes since start), busiest first. */
static void print_users(const json_t *conns, const json_t *usage)
{
    const json_t *sessions = json_object_get(conns, "sessions"),
                 *flows = json_object_get(conns, "flows"), *totals = json_object_get(usage, "users");
    size_t cap = json_array_size(sessions) + json_array_size(flows) + json_array_size(totals);
    size_t n = 0, i;
    const json_t *x;
    user_row *v = calloc(cap > 0 ? cap : 1, sizeof *v), *u;
    if (v == NULL) {
        fprintf(stderr, "katana: out of memory\n");
        return;
    }
    json_array_foreach(sessions, i, x)
        if (json_is_integer(json_object_get(x, "user")) &&
            (u = user_find(v, &n, cap, ag_cli_u64(x, "user"))) != NULL)
            u->sessions++;
    json_array_foreach(flows, i, x)
        if (json_is_object(json_object_get(x, "user")) &&
            (u = user_find(v, &n, cap, ag_cli_u64(json_object_get(x, "user"), "uid"))) != NULL)
            u->flows++;
    json_array_foreach(totals, i, x)
        if ((u = user_find(v, &n, cap, ag_cli_u64(x, "user"))) != NULL) {
            u->up = ag_cli_u64(x, "up");
            u->down = ag_cli_u64(x, "down");
        }
    qsort(v, n, sizeof *v, user_cmp);
    ag_cli_table t = {.ncols = 5};
    const char *head[] = {"USER", "SESSIONS", "FLOWS", "UP", "DOWN"};
    ag_cli_table_row(&t, head);
    for (i = 0; i < n && i < STATUS_USERS_MAX; i++) {
        char id[24], s[24], f[24], up[24], down[24];
        snprintf(id, sizeof id, "%" PRIu64, v[i].uid);
        snprintf(s, sizeof s, "%" PRIu64, v[i].sessions);
        snprintf(f, sizeof f, "%" PRIu64, v[i].flows);
        const char *row[] = {id, s, f, ag_cli_bytes(v[i].up, up, sizeof up),
                             ag_cli_bytes(v[i].down, down, sizeof down)};
        ag_cli_table_row(&t, row);
    }
    putchar('\n');
    if (n == 0)
        puts("no user has a live session or traffic since start");
    else
        ag_cli_table_print(&t, stdout, "rrrrr");
    if (n > STATUS_USERS_MAX)
        printf("... and %zu more users\n", n - STATUS_USERS_MAX);
    printf("%zu sessions, %zu flows\n", json_array_size(sessions), json_array_size(flows));
    ag_cli_table_free(&t);
    free(v);
}

/* The first line: where the API is and what /healthz says. */
static void print_health(const ag_cli_api *api, long st, const json_t *h)
{
    const char *s = ag_cli_str(h, "status", "?");
    if (st == 200)
        printf("katana at %s: %s\n", api->base, s);
    else
        printf("katana at %s: %s, %" PRIu64 " nodes waiting for a first applied state\n",
               api->base, s, ag_cli_u64(h, "nodes_not_applied"));
}

/* -c FILE and --help of status: -1 to go on, else the exit status (usage printed). */
static int status_args(int argc, char **argv, const char **config)
{
    static const struct option longs[] = {{"config", required_argument, NULL, 'c'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int ch;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+:c:h", longs, NULL)) != -1) {
        if (ch == 'h') {
            fputs(status_usage, stdout);
            return 0;
        }
        if (ch == 'c' && optarg[0] != '\0') {
            *config = optarg;
            continue;
        }
        fprintf(stderr, "katana status: %s\n%s",
                ch == 'c' || ch == ':' ? "-c needs a FILE" : "unknown option", status_usage);
        return 2;
    }
    if (optind != argc) {
        fprintf(stderr, "katana status: unexpected argument \"%.64s\"\n%s", argv[optind],
                status_usage);
        return 2;
    }
    return -1;
}

int ag_cli_status_main(int argc, char **argv)
{
    const char *config = NULL;
    int rc = status_args(argc, argv, &config);
    if (rc >= 0)
        return rc;
    ag_cli_api api;
    if (ag_cli_api_open(ag_cli_config_path(config), &api) != 0)
        return 1;
    json_t *nodes = NULL, *conns = NULL, *usage = NULL, *health = NULL;
    static const long health_ok[] = {200, 503, 0};
    long hst = 0;
    /* a token route first: a wrong token is named before anything is printed */
    rc = ag_cli_api_call(&api, "GET", "/v1/nodes", NULL, NULL, &nodes);
    if (rc == 0)
        rc = ag_cli_api_call(&api, "GET", "/healthz", health_ok, &hst, &health);
    if (rc == 0)
        rc = ag_cli_api_call(&api, "GET", "/v1/connections", NULL, NULL, &conns);
    if (rc == 0)
        rc = ag_cli_api_call(&api, "GET", "/v1/usage", NULL, NULL, &usage);
    if (rc == 0) {
        print_health(&api, hst, health);
        print_nodes(json_object_get(nodes, "nodes"));
        print_users(conns, usage);
        rc = fflush(stdout) == 0 ? 0 : 1;
    }
    json_decref(nodes);
    json_decref(conns);
    json_decref(usage);
    json_decref(health);
    ag_cli_api_free(&api);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* kill                                                                                         */
/* ------------------------------------------------------------------------------------------ */

static const char kill_usage[] =
    "usage: katana kill [-c FILE] FLOW_ID...\n"
    "       katana kill [-c FILE] [--user UID] [--session ID] [--node TAG] [--inbound TAG]\n"
    "                   [--outbound TAG] | --all\n"
    "  End live flows through the REST API: the flows given by id (see katana status or\n"
    "  GET /v1/connections), or every flow matching all the selectors given, or --all flows.\n";

static int kill_usage_error(const char *fmt, const char *arg)
{
    fputs("katana kill: ", stderr);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", kill_usage);
    return 2;
}

/* A decimal id (what the API's ids and user ids are), no sign, no blanks. */
static bool is_id(const char *s)
{
    if (s[0] == '\0' || strlen(s) > 20)
        return false;
    for (const char *p = s; *p != '\0'; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    errno = 0;
    (void)strtoull(s, NULL, 10);
    return errno == 0;
}

/* Append "&key=VALUE" (or "?key=...") to @p q, VALUE percent-encoded (RFC 3986 unreserved
 * bytes as they are). */
static void query_add(char *q, size_t size, const char *key, const char *value)
{
    size_t len = strlen(q);
    len += (size_t)snprintf(q + len, len < size ? size - len : 0, "%c%s=",
                            strchr(q, '?') != NULL ? '&' : '?', key);
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0' && len + 4 < size;
         p++) {
        if (isalnum(*p) || strchr("-._~", *p) != NULL)
            q[len++] = (char)*p;
        else
            len += (size_t)snprintf(q + len, size - len, "%%%02X", *p);
    }
    q[len < size ? len : size - 1] = '\0';
}

/* DELETE /v1/connections/{id} for each id: how many were live. 1 when one was not, or on an
 * API failure (stops there). */
static int kill_ids(const ag_cli_api *api, char **ids, int n, uint64_t *killed)
{
    static const long ok[] = {204, 404, 0};
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[64];
        long st = 0;
        json_t *body = NULL;
        snprintf(path, sizeof path, "/v1/connections/%s", ids[i]);
        if (ag_cli_api_call(api, "DELETE", path, ok, &st, &body) != 0)
            return 1;
        if (st == 204) {
            (*killed)++;
        } else {
            fprintf(stderr, "katana: %s\n", ag_cli_str(body, "error", "no live flow"));
            rc = 1;
        }
        json_decref(body);
    }
    return rc;
}

/* DELETE /v1/connections?QUERY: {"closed": n}. */
static int kill_where(const ag_cli_api *api, const char *path, uint64_t *killed)
{
    json_t *body = NULL;
    if (ag_cli_api_call(api, "DELETE", path, NULL, NULL, &body) != 0)
        return 1;
    if (!json_is_integer(json_object_get(body, "closed"))) {
        fprintf(stderr, "katana: %s: the REST API's answer has no \"closed\" count\n", path);
        json_decref(body);
        return 1;
    }
    *killed = ag_cli_u64(body, "closed");
    json_decref(body);
    return 0;
}

/* The options of kill into @p path ("/v1/connections?..."); -1 to go on, else the exit. */
static int kill_args(int argc, char **argv, const char **config, char *path, size_t size,
                     bool *all)
{
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'},  {"help", no_argument, NULL, 'h'},
        {"user", required_argument, NULL, 'u'},    {"session", required_argument, NULL, 's'},
        {"node", required_argument, NULL, 'N'},    {"inbound", required_argument, NULL, 'i'},
        {"outbound", required_argument, NULL, 'o'}, {"all", no_argument, NULL, 'a'},
        {NULL, 0, NULL, 0}};
    int ch, idx = 0;
    unsigned seen = 0; /* bit per selector option, by its index in longs */
    opterr = 0;
    optind = 1;
    snprintf(path, size, "/v1/connections");
    while ((ch = getopt_long(argc, argv, ":c:h", longs, &idx)) != -1) {
        const char *name = ch == 'c' ? "-c" : ch == ':' || ch == '?' ? NULL : longs[idx].name;
        if (ch == 'h') {
            fputs(kill_usage, stdout);
            return 0;
        }
        if (ch == ':')
            return kill_usage_error("%s needs a value", argv[optind - 1]);
        if (ch == '?')
            return kill_usage_error("unknown option %s", argv[optind - 1]);
        if (ch == 'a') {
            *all = true;
            continue;
        }
        if (optarg[0] == '\0')
            return kill_usage_error("%s needs a value", name);
        if (ch == 'c') {
            *config = optarg;
            continue;
        }
        if ((ch == 'u' || ch == 's') && !is_id(optarg))
            return kill_usage_error(ch == 'u' ? "--user: expected a user id (a number), not "
                                                "\"%.64s\""
                                              : "--session: expected a session id, not "
                                                "\"%.64s\"", optarg);
        if (seen & (1u << idx))
            return kill_usage_error("--%s given twice", name);
        seen |= 1u << idx;
        query_add(path, size, name, optarg);
    }
    return -1;
}

int ag_cli_kill_main(int argc, char **argv)
{
    const char *config = NULL;
    char path[2048];
    bool all = false;
    int rc = kill_args(argc, argv, &config, path, sizeof path, &all);
    if (rc >= 0)
        return rc;
    bool selectors = strchr(path, '?') != NULL;
    int n_ids = argc - optind;
    char **ids = argv + optind;
    if (n_ids > 0 && (selectors || all))
        return kill_usage_error("%s", "give flow ids or selectors (or --all), not both");
    if (all && selectors)
        return kill_usage_error("%s", "--all selects every flow: give no selector with it");
    if (n_ids == 0 && !selectors && !all)
        return kill_usage_error("%s", "nothing to kill: give FLOW_IDs, selectors (--user, "
                                "--session, --node, --inbound, --outbound) or --all");
    for (int i = 0; i < n_ids; i++)
        if (!is_id(ids[i]))
            return kill_usage_error("not a flow id: \"%.64s\"", ids[i]);
    ag_cli_api api;
    if (ag_cli_api_open(ag_cli_config_path(config), &api) != 0)
        return 1;
    uint64_t killed = 0;
    rc = n_ids > 0 ? kill_ids(&api, ids, n_ids, &killed) : kill_where(&api, path, &killed);
    if (n_ids > 0 || rc == 0)
        printf("killed %" PRIu64 " flow%s\n", killed, killed == 1 ? "" : "s");
    ag_cli_api_free(&api);
    return rc;
}
