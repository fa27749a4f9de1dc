/*
 * `katana top` (cli_remote.h): the busiest users from the GET /v1/traffic stream (docs/api.md
 * "Server-Sent Events": one `traffic` event per sampler tick, with each user's rates over the
 * tick) and the busiest flows from GET /v1/connections sampled at every tick (their rates are
 * the byte counts' growth between two samples). One libcurl multi handle runs both transfers;
 * curl_multi_poll() also watches stdin for `q`.
 */
#include "config.h"

#include "agent/cli_remote.h"
#include "supervisor/util/textbuf.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define TOP_ROWS_DEFAULT 10u
#define TOP_ROWS_MAX 1000u
#define EVENT_MAX (16u << 20)   /* largest SSE event kept (a tick of very many users) */
#define ANSWER_MAX (256u << 20) /* largest /v1/connections answer */
#define POLL_MS 250             /* how often a signal is noticed at the latest */
#define ONCE_MIN_SPAN 0.5       /* --once: seconds two flow samples must be apart at least */
#define CONNS_TIMEOUT_S 10L

static const char top_usage[] =
    "usage: katana top [-c FILE] [-n N] [--once]\n"
    "  A live view of the busiest users and flows of the katana whose REST API FILE\n"
    "  configures (default " AG_CLI_DEFAULT_CONFIG "), redrawn every second; q quits.\n"
    "  -n N     rows per table (default 10)\n"
    "  --once   print one screen, after one traffic sample, and exit\n";

/* One flow of a /v1/connections sample. */
typedef struct flow_sample {
    uint64_t id, up, down;
    char user[24];       /* the user's label, "-" for none */
    char dest[96];       /* sniffed host when any, else the destination */
    char outbound[48];
    uint64_t up_rate, down_rate; /* bytes/s since the previous sample */
} flow_sample;

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

typedef struct top {
    const ag_cli_api *api;
    unsigned rows;
    bool once;
    CURLM *multi;
    CURL *stream, *conns;          /* conns: NULL while no sample is in flight */
    struct curl_slist *stream_hdr, *conns_hdr;
    buf line, data, err_body, answer;
    char event[32];
    json_t *traffic;               /* latest traffic event's data */
    bool fresh;                    /* a traffic event came since the last screen */
    flow_sample *flows;            /* latest sample, rates against the one before */
    size_t n_flows;
    double flows_at, prev_at;      /* CLOCK_MONOTONIC seconds of the last two samples */
    unsigned samples;
    int exit_code;                 /* -1 while running */
} top;

static volatile sig_atomic_t top_signal;
static struct termios saved_tty;
static bool tty_raw;

static void on_signal(int sig)
{
    top_signal = sig;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------------------------ */
/* terminal                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The terminal as it was, and the cursor shown again. Called on every exit path. */
static void tty_restore(void)
{
    if (!tty_raw)
        return;
    tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_raw = false;
    fputs("\033[?25h", stdout);
    fflush(stdout);
}

/* stdin without line buffering and echo, so `q` arrives at once; signals keep working (ISIG
 * stays: ^C is SIGINT). SIGINT and SIGTERM set top_signal; the loop restores and exits. */
static void tty_setup(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty) != 0)
        return;
    struct termios t = saved_tty;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) != 0)
        return;
    tty_raw = true;
    atexit(tty_restore);
    fputs("\033[?25l", stdout); /* no cursor blinking over the table */
}

/* ------------------------------------------------------------------------------------------ */
/* transfers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static bool buf_add(buf *b, const char *p, size_t n, size_t max)
{
    if (n > max - b->len)
        return false;
    return sv_textbuf_append(&b->p, &b->len, &b->cap, 4096, p, n) == 0;
}

/* One complete SSE line (RFC: "event:", "data:", a comment, or blank = dispatch). */
static void sse_line(top *t, const char *line, size_t n)
{
    if (n == 0) {
        if (strcmp(t->event, "traffic") == 0 && t->data.len > 0) {
            json_t *v = json_loadb(t->data.p, t->data.len, 0, NULL);
            if (v != NULL) {
                json_decref(t->traffic);
                t->traffic = v;
                t->fresh = true;
            }
        }
        t->event[0] = '\0';
        t->data.len = 0;
        return;
    }
    if (line[0] == ':')
        return;
    if (n >= 6 && memcmp(line, "event:", 6) == 0) {
        size_t skip = n > 6 && line[6] == ' ' ? 7 : 6;
        snprintf(t->event, sizeof t->event, "%.*s", (int)(n - skip), line + skip);
    } else if (n >= 5 && memcmp(line, "data:", 5) == 0) {
        size_t skip = n > 5 && line[5] == ' ' ? 6 : 5;
        if (t->data.len > 0)
            buf_add(&t->data, "\n", 1, EVENT_MAX);
        if (!buf_add(&t->data, line + skip, n - skip, EVENT_MAX))
            t->data.len = 0; /* an event too big: dropped, the next one is read */
    }
}

static size_t on_stream(char *data, size_t size, size_t n, void *arg)
{
    top *t = arg;
    size_t len = size * n;
    long st = 0;
    curl_easy_getinfo(t->stream, CURLINFO_RESPONSE_CODE, &st);
    if (st != 200) /* an error answer: kept for the message */
        return buf_add(&t->err_body, data, len, 65536) ? len : 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            size_t l = t->line.len;
            if (l > 0 && t->line.p[l - 1] == '\r')
                l--;
            sse_line(t, t->line.p != NULL ? t->line.p : "", l);
            t->line.len = 0;
        } else if (!buf_add(&t->line, data + i, 1, EVENT_MAX)) {
            return 0;
        }
    }
    return len;
}

static size_t on_conns(char *data, size_t size, size_t n, void *arg)
{
    top *t = arg;
    return buf_add(&t->answer, data, size * n, ANSWER_MAX) ? size * n : 0;
}

static int start_stream(top *t)
{
    t->stream = curl_easy_init();
    if (t->stream == NULL ||
        ag_cli_api_setup(t->api, t->stream, "GET", "/v1/traffic", 0, &t->stream_hdr) != 0)
        return -ENOMEM;
    curl_easy_setopt(t->stream, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(t->stream, CURLOPT_WRITEDATA, t);
    return curl_multi_add_handle(t->multi, t->stream) == CURLM_OK ? 0 : -ENOMEM;
}

/* A /v1/connections sample, unless one is in flight. */
static int start_conns(top *t)
{
    if (t->conns != NULL)
        return 0;
    t->conns = curl_easy_init();
    t->answer.len = 0;
    if (t->conns == NULL ||
        ag_cli_api_setup(t->api, t->conns, "GET", "/v1/connections", CONNS_TIMEOUT_S,
                         &t->conns_hdr) != 0)
        return -ENOMEM;
    curl_easy_setopt(t->conns, CURLOPT_WRITEFUNCTION, on_conns);
    curl_easy_setopt(t->conns, CURLOPT_WRITEDATA, t);
    return curl_multi_add_handle(t->multi, t->conns) == CURLM_OK ? 0 : -ENOMEM;
}

static void end_transfer(top *t, CURL **easy, struct curl_slist **hdr)
{
    if (*easy != NULL) {
        curl_multi_remove_handle(t->multi, *easy);
        curl_easy_cleanup(*easy);
    }
    curl_slist_free_all(*hdr);
    *easy = NULL;
    *hdr = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* flow samples                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static const flow_sample *prev_flow(const flow_sample *v, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++) /* both sorted by id (the API sorts flows by id) */
        if (v[i].id == id)
            return &v[i];
    return NULL;
}

/* Bytes per second of growth @p now - @p before over @p span seconds. */
static uint64_t rate(uint64_t now, uint64_t before, double span)
{
    return now > before && span > 0 ? (uint64_t)((double)(now - before) / span + 0.5) : 0;
}

/* The flows of a /v1/connections answer, rated against the previous sample. */
static int take_sample(top *t, const json_t *flows, double at)
{
    size_t n = json_array_size(flows), i;
    flow_sample *v = calloc(n > 0 ? n : 1, sizeof *v);
    const json_t *f;
    if (v == NULL)
        return -ENOMEM;
    double span = t->samples > 0 ? at - t->flows_at : 0;
    json_array_foreach(flows, i, f) {
        flow_sample *s = &v[i];
        const json_t *user = json_object_get(f, "user");
        const char *host = ag_cli_str(f, "sniffed_host", NULL);
        s->id = ag_cli_u64(f, "id");
        s->up = ag_cli_u64(f, "up");
        s->down = ag_cli_u64(f, "down");
        snprintf(s->user, sizeof s->user, "%s", ag_cli_str(user, "label", "-"));
        snprintf(s->dest, sizeof s->dest, "%s", host != NULL ? host
                                              : ag_cli_str(f, "destination", "?"));
        snprintf(s->outbound, sizeof s->outbound, "%s", ag_cli_str(f, "outbound", "?"));
        const flow_sample *p = t->samples > 0 ? prev_flow(t->flows, t->n_flows, s->id) : NULL;
        s->up_rate = rate(s->up, p != NULL ? p->up : 0, span);
        s->down_rate = rate(s->down, p != NULL ? p->down : 0, span);
    }
    free(t->flows);
    t->flows = v;
    t->n_flows = n;
    t->prev_at = t->flows_at;
    t->flows_at = at;
    t->samples++;
    return 0;
}

/* A finished transfer: the stream (always the end: an error, or katana went away) or a sample. */
static void on_done(top *t, CURL *easy, CURLcode code)
{
    long st = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &st);
    if (easy == t->stream) {
        json_t *body = t->err_body.len > 0 ? json_loadb(t->err_body.p, t->err_body.len, 0, NULL)
                                           : NULL;
        tty_restore();
        if (code != CURLE_OK && st == 0)
            t->exit_code = ag_cli_api_unreachable(t->api, easy, code);
        else if (st != 200)
            t->exit_code = ag_cli_api_refused(t->api, "/v1/traffic", st, body);
        else {
            fprintf(stderr, "katana: the REST API ended the traffic stream\n");
            t->exit_code = 1;
        }
        json_decref(body);
        return;
    }
    json_t *body = code == CURLE_OK ? json_loadb(t->answer.p, t->answer.len, 0, NULL) : NULL;
    if (code != CURLE_OK || st != 200) {
        tty_restore();
        t->exit_code = code != CURLE_OK ? ag_cli_api_unreachable(t->api, easy, code)
                                        : ag_cli_api_refused(t->api, "/v1/connections", st, body);
    } else if (take_sample(t, json_object_get(body, "flows"), now_s()) != 0) {
        tty_restore();
        fprintf(stderr, "katana: out of memory\n");
        t->exit_code = 1;
    }
    json_decref(body);
    end_transfer(t, &t->conns, &t->conns_hdr);
}

/* ------------------------------------------------------------------------------------------ */
/* the screen                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int user_cmp(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    uint64_t rx = ag_cli_u64(x, "up_rate") + ag_cli_u64(x, "down_rate");
    uint64_t ry = ag_cli_u64(y, "up_rate") + ag_cli_u64(y, "down_rate");
    uint64_t tx = ag_cli_u64(x, "up") + ag_cli_u64(x, "down");
    uint64_t ty = ag_cli_u64(y, "up") + ag_cli_u64(y, "down");
    if (rx != ry)
        return rx > ry ? -1 : 1;
    return tx > ty ? -1 : tx < ty;
}

static int flow_cmp(const void *a, const void *b)
{
    const flow_sample *x = a, *y = b;
    uint64_t rx = x->up_rate + x->down_rate, ry = y->up_rate + y->down_rate;
    if (rx != ry)
        return rx > ry ? -1 : 1;
    uint64_t tx = x->up + x->down, ty = y->up + y->down;
    return tx > ty ? -1 : tx < ty;
}

/* "12.0 KB/s" */
static const char *per_s(uint64_t v, char *b, size_t size)
{
    char n[24];
    snprintf(b, size, "%s/s", ag_cli_bytes(v, n, sizeof n));
    return b;
}

static void print_users(const top *t, FILE *f)
{
    const json_t *users = json_object_get(t->traffic, "users");
    size_t n = json_array_size(users), i;
    const json_t **v = calloc(n > 0 ? n : 1, sizeof *v);
    if (v == NULL)
        return;
    for (i = 0; i < n; i++)
        v[i] = json_array_get(users, i);
    qsort(v, n, sizeof *v, user_cmp);
    ag_cli_table tb = {.ncols = 5};
    const char *head[] = {"USER", "UP/s", "DOWN/s", "TOTAL", "FLOWS"};
    ag_cli_table_row(&tb, head);
    for (i = 0; i < n && i < t->rows; i++) {
        char id[24], up[32], down[32], total[24], flows[24];
        const char *label = ag_cli_str(v[i], "label", NULL);
        if (label == NULL)
            snprintf(id, sizeof id, "%" PRIu64, ag_cli_u64(v[i], "user"));
        snprintf(flows, sizeof flows, "%" PRIu64, ag_cli_u64(v[i], "flows"));
        const char *row[] = {label != NULL ? label : id,
                             per_s(ag_cli_u64(v[i], "up_rate"), up, sizeof up),
                             per_s(ag_cli_u64(v[i], "down_rate"), down, sizeof down),
                             ag_cli_bytes(ag_cli_u64(v[i], "up") + ag_cli_u64(v[i], "down"),
                                          total, sizeof total), flows};
        ag_cli_table_row(&tb, row);
    }
    if (n == 0)
        fputs("no user moved bytes in the last tick\n", f);
    else
        ag_cli_table_print(&tb, f, "rrrrr");
    if (n > t->rows)
        fprintf(f, "... and %zu more users\n", n - t->rows);
    ag_cli_table_free(&tb);
    free(v);
}

static void print_flows(const top *t, FILE *f)
{
    flow_sample *v = malloc((t->n_flows > 0 ? t->n_flows : 1) * sizeof *v);
    if (v == NULL)
        return;
    memcpy(v, t->flows, t->n_flows * sizeof *v);
    qsort(v, t->n_flows, sizeof *v, flow_cmp);
    ag_cli_table tb = {.ncols = 7};
    const char *head[] = {"FLOW", "USER", "DESTINATION", "OUTBOUND", "UP/s", "DOWN/s", "TOTAL"};
    ag_cli_table_row(&tb, head);
    for (size_t i = 0; i < t->n_flows && i < t->rows; i++) {
        char id[24], up[32], down[32], total[24];
        snprintf(id, sizeof id, "%" PRIu64, v[i].id);
        const char *row[] = {id, v[i].user, v[i].dest, v[i].outbound,
                             per_s(v[i].up_rate, up, sizeof up),
                             per_s(v[i].down_rate, down, sizeof down),
                             ag_cli_bytes(v[i].up + v[i].down, total, sizeof total)};
        ag_cli_table_row(&tb, row);
    }
    if (t->n_flows == 0)
        fputs("no live flow\n", f);
    else
        ag_cli_table_print(&tb, f, "rrllrrr");
    if (t->n_flows > t->rows)
        fprintf(f, "... and %zu more flows\n", t->n_flows - t->rows);
    ag_cli_table_free(&tb);
    free(v);
}

/* One screen, written at once (cleared first when live). */
static void render(top *t)
{
    char *text = NULL, up[32], down[32], tu[24], td[24], clock[16];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return;
    const json_t *total = json_object_get(t->traffic, "total");
    time_t now = time(NULL);
    struct tm tm;
    strftime(clock, sizeof clock, "%H:%M:%S", gmtime_r(&now, &tm));
    if (!t->once)
        fputs("\033[H\033[2J", f);
    fprintf(f, "katana top: %s, tick %" PRIu64 ", %s UTC%s\n", t->api->base,
            ag_cli_u64(t->traffic, "tick"), clock, t->once ? "" : " (q quits)");
    fprintf(f, "total: up %s, down %s, %" PRIu64 " flows; since start up %s, down %s\n\n",
            per_s(ag_cli_u64(total, "up_rate"), up, sizeof up),
            per_s(ag_cli_u64(total, "down_rate"), down, sizeof down), ag_cli_u64(total, "flows"),
            ag_cli_bytes(ag_cli_u64(total, "up"), tu, sizeof tu),
            ag_cli_bytes(ag_cli_u64(total, "down"), td, sizeof td));
    print_users(t, f);
    fputc('\n', f);
    print_flows(t, f);
    fclose(f);
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    free(text);
}

/* ------------------------------------------------------------------------------------------ */
/* the loop                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* What came since the last turn: finished transfers, a traffic event (a screen and the next
 * flow sample), a key. */
static void turn(top *t, bool key_q)
{
    CURLMsg *m;
    int left;
    while (t->exit_code < 0 && (m = curl_multi_info_read(t->multi, &left)) != NULL)
        if (m->msg == CURLMSG_DONE)
            on_done(t, m->easy_handle, m->data.result);
    if (t->exit_code >= 0)
        return;
    if (key_q) {
        t->exit_code = 0;
        return;
    }
    if (top_signal != 0) {
        t->exit_code = 128 + top_signal;
        return;
    }
    if (!t->fresh)
        return;
    if (!t->once || (t->samples >= 2 && t->flows_at - t->prev_at >= ONCE_MIN_SPAN)) {
        t->fresh = false;
        render(t);
        if (t->once) {
            t->exit_code = 0;
            return;
        }
    }
    /* the next sample: once per tick live; --once waits until it is far enough from the last */
    if (t->samples > 0 && now_s() - t->flows_at < ONCE_MIN_SPAN)
        return;
    if (start_conns(t) != 0) {
        fprintf(stderr, "katana: out of memory\n");
        t->exit_code = 1;
    }
}

/* Whether stdin has a `q` (or ^D / end of input, which also quits). */
static bool read_keys(void)
{
    char k[64];
    ssize_t n = read(STDIN_FILENO, k, sizeof k);
    if (n <= 0)
        return n == 0;
    return memchr(k, 'q', (size_t)n) != NULL || memchr(k, 'Q', (size_t)n) != NULL ||
           memchr(k, 4, (size_t)n) != NULL;
}

static int run(top *t)
{
    struct curl_waitfd in = {.fd = STDIN_FILENO, .events = CURL_WAIT_POLLIN};
    int running = 0;
    if (start_stream(t) != 0 || start_conns(t) != 0) {
        fprintf(stderr, "katana: out of memory\n");
        return 1;
    }
    while (t->exit_code < 0) {
        in.revents = 0;
        if (curl_multi_perform(t->multi, &running) != CURLM_OK) {
            fprintf(stderr, "katana: libcurl failed\n");
            return 1;
        }
        turn(t, false);
        if (t->exit_code >= 0)
            break;
        curl_multi_poll(t->multi, tty_raw ? &in : NULL, tty_raw ? 1 : 0, POLL_MS, NULL);
        turn(t, (in.revents & CURL_WAIT_POLLIN) != 0 && read_keys());
    }
    return t->exit_code;
}

static void top_free(top *t)
{
    end_transfer(t, &t->stream, &t->stream_hdr);
    end_transfer(t, &t->conns, &t->conns_hdr);
    if (t->multi != NULL)
        curl_multi_cleanup(t->multi);
    json_decref(t->traffic);
    free(t->flows);
    free(t->line.p);
    free(t->data.p);
    free(t->err_body.p);
    free(t->answer.p);
}

/* Options of top: -1 to go on, else the exit status (usage printed). */
static int top_args(int argc, char **argv, const char **config, unsigned *rows, bool *once)
{
    static const struct option longs[] = {{"config", required_argument, NULL, 'c'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"once", no_argument, NULL, '1'},
                                          {NULL, 0, NULL, 0}};
    const char *what = NULL;
    int ch;
    opterr = 0;
    optind = 1;
    while (what == NULL && (ch = getopt_long(argc, argv, "+:c:hn:", longs, NULL)) != -1) {
        char *end;
        unsigned long v;
        switch (ch) {
        case 'h':
            fputs(top_usage, stdout);
            return 0;
        case '1':
            *once = true;
            break;
        case 'c':
            if (optarg[0] == '\0')
                what = "-c needs a FILE";
            *config = optarg;
            break;
        case 'n':
            errno = 0;
            v = strtoul(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || v < 1 || v > TOP_ROWS_MAX)
                what = "-n: expected a number of rows, 1 to 1000";
            *rows = (unsigned)v;
            break;
        case ':':
            what = optopt == 'n' ? "-n needs a number" : "-c needs a FILE";
            break;
        default:
            what = "unknown option";
            break;
        }
    }
    if (what == NULL && optind != argc)
        what = "unexpected argument";
    if (what == NULL)
        return -1;
    fprintf(stderr, "katana top: %s\n%s", what, top_usage);
    return 2;
}

int ag_cli_top_main(int argc, char **argv)
{
    const char *config = NULL;
    unsigned rows = TOP_ROWS_DEFAULT;
    bool once = false;
    int rc = top_args(argc, argv, &config, &rows, &once);
    if (rc >= 0)
        return rc;
    ag_cli_api api;
    if (ag_cli_api_open(ag_cli_config_path(config), &api) != 0)
        return 1;
    top t = {.api = &api, .rows = rows, .once = once, .exit_code = -1};
    t.multi = curl_multi_init();
    if (t.multi == NULL) {
        fprintf(stderr, "katana: out of memory\n");
        rc = 1;
    } else {
        if (!once)
            tty_setup();
        rc = run(&t);
        tty_restore();
    }
    top_free(&t);
    ag_cli_api_free(&api);
    return rc;
}
