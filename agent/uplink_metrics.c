/*
 * The runtime metrics of Xboard nodes (PROTOCOLS-2.md §6.5 `node.status`; PANEL.md §1.1 the
 * `metrics` key of `report`): a snapshot per node from what the supervisor and the uplink know,
 * sent over the node's channel (or its machine's) every status interval while it is up, and
 * with the push cycle over REST while it is down. Best effort: a snapshot that cannot be sent
 * is dropped (the next one replaces it). Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"
#define METRICS_TICK_MS 1000u /* the timer's period: each node's own interval is checked on it */
#define METRICS_SLACK_MS (METRICS_TICK_MS / 2) /* due this soon counts as due: a tick that fires
                                                  a little early does not add a whole period */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Whether the node reports metrics: an Xboard node (its own channel, or its machine's). */
static bool has_metrics(const up_node *nd)
{
    return !nd->retiring && nd->client != NULL && nd->client->ops->report_metrics != NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* the host: CPU per core (/proc/stat) and load averages (/proc/loadavg)                     */
/* ---------------------------------------------------------------------------------------- */

/* Read every "cpuN" line; a core's busy share since the previous reading goes to core_pct.
 * Called at most once per METRICS_TICK_MS (a sooner call keeps the last result). */
static void cores_read(ag_uplink *u)
{
    uint64_t now = mono_ms();
    if (u->cores_read_ms != 0 && now - u->cores_read_ms < METRICS_TICK_MS)
        return;
    u->cores_read_ms = now;
    FILE *f = fopen("/proc/stat", "r");
    char line[512];
    size_t n = 0;
    bool had = u->cores_primed;
    while (f != NULL && fgets(line, sizeof line, f) != NULL && n < PN_METRICS_CORES_MAX) {
        unsigned long long v[8] = {0};
        unsigned idx;
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9')
            continue;
        if (sscanf(line, "cpu%u %llu %llu %llu %llu %llu %llu %llu %llu", &idx, &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 5)
            continue;
        uint64_t total = 0;
        for (int i = 0; i < 8; i++)
            total += v[i];
        uint64_t busy = total - v[3] - v[4]; /* minus idle and iowait, as the status report */
        double pct = 0;
        if (had && total > u->core_total[n] && busy >= u->core_busy[n])
            pct = 100.0 * (double)(busy - u->core_busy[n]) /
                  (double)(total - u->core_total[n]);
        u->core_pct[n] = pct;
        u->core_busy[n] = busy;
        u->core_total[n] = total;
        n++;
    }
    if (f != NULL)
        fclose(f);
    u->n_cores = had ? n : 0; /* the first reading has nothing to compare with */
    u->cores_primed = true;
}

static void load_read(double load[3])
{
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL || fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
        load[0] = load[1] = load[2] = 0;
    if (f != NULL)
        fclose(f);
}

/* ---------------------------------------------------------------------------------------- */
/* a node's snapshot                                                                        */
/* ---------------------------------------------------------------------------------------- */

/* What the supervisor says of every node at one moment (one read per tick, for all nodes). */
typedef struct sv_view {
    sv_session_info *ss;
    size_t n_ss;
    sv_stats st;
    bool has_st;
} sv_view;

static void view_read(ag_uplink *u, sv_view *v)
{
    memset(v, 0, sizeof *v);
    long n = sv_sessions(u->sv, &v->ss);
    v->n_ss = n > 0 ? (size_t)n : 0;
    v->has_st = sv_stats_get(u->sv, &v->st) == 0;
}

static void view_free(sv_view *v)
{
    free(v->ss);
    if (v->has_st)
        sv_stats_free(&v->st);
}

/* Live sessions, distinct users and distinct speed-limited users of node @p tag. The
 * limited ids are @p lim (sorted). */
static void sessions_count(const sv_view *v, const char *tag, const uint64_t *lim, size_t n_lim,
                           pn_metrics *m)
{
    uint64_t *ids = v->n_ss > 0 ? malloc(v->n_ss * sizeof *ids) : NULL;
    size_t k = 0;
    for (size_t i = 0; i < v->n_ss; i++) {
        if (strcmp(v->ss[i].inbound, tag) != 0)
            continue;
        m->active_connections++;
        if (v->ss[i].has_user && ids != NULL)
            ids[k++] = v->ss[i].user;
    }
    if (k > 0)
        qsort(ids, k, sizeof *ids, cmp_u64);
    for (size_t i = 0; i < k; i++) {
        if (i > 0 && ids[i] == ids[i - 1])
            continue;
        m->active_users++;
        if (n_lim > 0 && bsearch(&ids[i], lim, n_lim, sizeof *lim, cmp_u64) != NULL)
            m->speed_limited_users++;
    }
    free(ids);
}

/* The node's users with a speed limit (malloc'ed, sorted; NULL when none) from its running set. */
static uint64_t *limited_ids(ag_uplink *u, const char *tag, size_t *n)
{
    const sv_user_set *set = sv_running_user_set(u->sv, tag);
    *n = 0;
    uint64_t *v = set != NULL && set->n_users > 0 ? malloc(set->n_users * sizeof *v) : NULL;
    for (size_t i = 0; v != NULL && i < set->n_users; i++)
        if (set->users[i].speed_limit > 0)
            v[(*n)++] = set->users[i].id;
    if (*n > 0)
        qsort(v, *n, sizeof *v, cmp_u64);
    return v;
}

/* The node's panel requests: answered 2xx or 3xx (304 included), and the others. */
static void api_count(up_node *nd, pn_metrics *m)
{
    pn_request_count req[PN_REQUEST_COUNTS_MAX];
    size_t n = pn_requests(nd->client, req, PN_REQUEST_COUNTS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (req[i].status >= 200 && req[i].status <= 399)
            m->api_success += req[i].n;
        else
            m->api_failure += req[i].n;
    }
}

/* Node @p nd's snapshot from @p v and the host's readings. */
static void metrics_build(up_node *nd, const sv_view *v, pn_metrics *m)
{
    ag_uplink *u = nd->u;
    memset(m, 0, sizeof *m);
    m->uptime_s = (mono_ms() - u->started_ms) / 1000u;
    size_t n_lim = 0;
    uint64_t *lim = limited_ids(u, nd->tag, &n_lim);
    sessions_count(v, nd->tag, lim, n_lim, m);
    free(lim);
    m->limited_users = n_lim;
    m->has_limits = n_lim > 0;
    m->total_users = nd->uids != NULL ? nd->uids->n : 0;
    for (size_t i = 0; v->has_st && i < v->st.n_inbounds; i++)
        if (strcmp(v->st.inbounds[i].tag, nd->tag) == 0) {
            m->total_connections = v->st.inbounds[i].flows;
            m->inbound_speed = v->st.inbounds[i].up_rate;
            m->outbound_speed = v->st.inbounds[i].down_rate;
        }
    cores_read(u);
    m->n_cores = u->n_cores;
    memcpy(m->cpu_per_core, u->core_pct, u->n_cores * sizeof *u->core_pct);
    load_read(m->load);
    m->device_limit_events = sv_device_refusals(u->sv);
    api_count(nd, m);
    if (nd->machine != NULL)
        pn_xb_machine_channel_state(nd->machine->client, &m->ws_enabled, &m->ws_connected);
    m->kernel_status = true; /* the uplink runs while the supervisor serves */
}

/* ---------------------------------------------------------------------------------------- */
/* sending: the channel every status interval, REST with the push cycle                     */
/* ---------------------------------------------------------------------------------------- */

static void on_metrics_reported(pn_client *c, int rc, const sv_error *err, void *arg)
{
    (void)c;
    if (rc != 0)
        SV_LOG(SV_LOG_DEBUG, MOD, "node %s: metrics report: %s", ((up_node *)arg)->tag,
               err->msg);
}

/* Over the node's channel, or its machine's: 0, or -ENOTCONN when it is down. */
static int metrics_send(up_node *nd, const pn_metrics *m)
{
    if (nd->machine != NULL)
        return pn_xb_machine_report_metrics(nd->machine->client, nd->machine_node, m);
    return nd->client->ops->report_metrics(nd->client, m, PN_METRICS_CHANNEL,
                                           on_metrics_reported, nd);
}

static void on_metrics_timer(uv_timer_t *t)
{
    ag_uplink *u = t->data;
    uint64_t now = mono_ms();
    sv_view v;
    bool read = false;
    for (size_t i = 0; i < u->n; i++) {
        up_node *nd = u->nodes[i];
        if (!has_metrics(nd) || now + METRICS_SLACK_MS < nd->metrics_due_ms)
            continue;
        nd->metrics_due_ms = now + 1000u * nd->status_s;
        if (!read)
            view_read(u, &v);
        read = true;
        pn_metrics m;
        metrics_build(nd, &v, &m);
        int rc = metrics_send(nd, &m);
        if (rc != 0 && rc != -ENOTCONN)
            SV_LOG(SV_LOG_DEBUG, MOD, "node %s: node.status not sent: %s", nd->tag,
                   strerror(-rc));
    }
    if (read)
        view_free(&v);
}

void ag__up_metrics_rest(up_node *nd)
{
    if (!has_metrics(nd))
        return;
    bool up = false;
    if (nd->machine != NULL)
        pn_xb_machine_channel_state(nd->machine->client, NULL, &up);
    if (up)
        return; /* node.status goes over the machine's channel */
    sv_view v;
    view_read(nd->u, &v);
    pn_metrics m;
    metrics_build(nd, &v, &m);
    view_free(&v);
    int rc = nd->client->ops->report_metrics(nd->client, &m, PN_METRICS_REST,
                                             on_metrics_reported, nd);
    if (rc != 0 && rc != -EISCONN) /* -EISCONN: node.status goes over the node's channel */
        SV_LOG(SV_LOG_DEBUG, MOD, "node %s: metrics report not sent: %s", nd->tag,
               strerror(-rc));
}

void ag__up_metrics_node(up_node *nd, uint32_t status_s)
{
    nd->status_s = status_s > 0 ? status_s : AG_CONFIG_STATUS_INTERVAL_DEFAULT;
    nd->metrics_due_ms = mono_ms() + 1000u * nd->status_s;
}

void ag__up_metrics_init(ag_uplink *u)
{
    u->started_ms = mono_ms();
    uv_timer_init(u->loop, &u->metrics_timer);
    u->metrics_timer.data = u;
}

void ag__up_metrics_start(ag_uplink *u)
{
    cores_read(u); /* the first reading, so the first snapshot has per-core shares */
    uv_timer_start(&u->metrics_timer, on_metrics_timer, METRICS_TICK_MS, METRICS_TICK_MS);
}
