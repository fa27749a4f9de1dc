/*
 * GET /metrics: the Prometheus text exposition format 0.0.4 (prometheus.io "Exposition
 * formats"): one HELP and TYPE line per family, label values escaped (\\, \", \n). Families:
 * flows, sessions, users, epoch, bytes by node/inbound/outbound/direction, users' bytes, applies
 * and apply errors, outbox pending bytes, panel requests by node, endpoint and status, flow
 * closes and refusals by reason.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

typedef struct page {
    char *buf;
    size_t len, cap;
    bool oom;
} page;

static void put(page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(page *p, const char *fmt, ...)
{
    for (;;) {
        if (p->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            p->oom = true;
            return;
        }
        if ((size_t)n < p->cap - p->len) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = (p->cap + (size_t)n + 1) * 2;
        char *b = realloc(p->buf, cap);
        if (b == NULL) {
            p->oom = true;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
}

/* A label value with \, " and newline escaped (tags are at most SV_TAG_MAX bytes). */
static const char *esc(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            buf[o++] = '\\';
            buf[o++] = *s;
        } else if (*s == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else {
            buf[o++] = *s;
        }
    }
    buf[o] = '\0';
    return buf;
}

static void family(page *p, const char *name, const char *type, const char *help)
{
    put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void tag_bytes(page *p, const char *name, const char *label, const sv_tag_stats *v,
                      size_t n, bool node_label)
{
    char e[2 * SV_TAG_MAX + 4];
    for (size_t i = 0; i < n; i++) {
        esc(v[i].tag, e, sizeof e);
        const char *dirs[2] = {"up", "down"};
        uint64_t vals[2] = {v[i].up, v[i].down};
        for (int d = 0; d < 2; d++) {
            if (node_label)
                put(p, "%s{node=\"%s\",%s=\"%s\",direction=\"%s\"} %" PRIu64 "\n", name, e,
                    label, e, dirs[d], vals[d]);
            else
                put(p, "%s{%s=\"%s\",direction=\"%s\"} %" PRIu64 "\n", name, label, e, dirs[d],
                    vals[d]);
        }
    }
}

/* One unlabelled counter: its family lines and its value. */
static void counter(page *p, const char *name, const char *help, uint64_t v)
{
    family(p, name, "counter", help);
    put(p, "%s %" PRIu64 "\n", name, v);
}

/* Shadowsocks trial decryption and its full scans. */
static void shadowsocks_counters(page *p, sv_supervisor *sv)
{
    sv_ss_trial_counts tc = sv_ss_trials(sv);
    counter(p, "katana_ss_lookups_total",
            "Shadowsocks trial decryptions: a new connection's first chunk or a UDP datagram.",
            tc.lookups);
    counter(p, "katana_ss_key_trials_total",
            "Keys those trial decryptions tried (a returning client costs one).", tc.keys);
    sv_ss_scan_counts scn = sv_ss_scans(sv);
    counter(p, "katana_ss_scans_queued_total",
            "Shadowsocks full scans (first guesses missed) queued off the worker loops.",
            scn.queued);
    counter(p, "katana_ss_scans_run_total",
            "Shadowsocks full scans run off the worker loops, within their CPU budget.", scn.run);
    counter(p, "katana_ss_scans_dropped_total",
            "Shadowsocks full scans refused over their CPU budget: the client was treated as "
            "unknown (drained, or the datagram dropped).", scn.dropped);
}

/* XTLS Vision's direct copy and its kernel relay. */
static void vision_counters(page *p, sv_supervisor *sv)
{
    sv_vision_direct_counts vd = sv_vision_direct(sv);
    family(p, "katana_vision_direct_total", "counter",
           "XTLS Vision connections whose outer TLS switched to raw copy, by direction (in: the "
           "client's bytes, out: ours).");
    put(p, "katana_vision_direct_total{direction=\"in\"} %" PRIu64 "\n", vd.in);
    put(p, "katana_vision_direct_total{direction=\"out\"} %" PRIu64 "\n", vd.out);
    counter(p, "katana_vision_splice_total",
            "Connections relayed in the kernel (splice): XTLS Vision once direct both ways, "
            "SOCKS5 and HTTP proxy tunnels in clear.",
            vd.spliced);
    counter(p, "katana_vision_splice_bytes_total",
            "Payload bytes those connections moved by splice, both directions (billed as any).",
            vd.splice_bytes);
    counter(p, "katana_vision_splice_no_pipe_total",
            "Connections that could be spliced relayed in user space because no pipe could be "
            "had (the descriptor budget was full, or pipe2 failed).", vd.splice_no_pipe);
}

/* Flow closes by reason (sv_close_reason), every reason listed, 0 or not. */
static void flow_closes(page *p, sv_supervisor *sv)
{
    sv_close_counts cc = sv_flow_closes(sv);
    family(p, "katana_flow_closes_total", "counter",
           "Flows (dialed connections, sub-flows of multiplexed connections, UDP sub-links) "
           "closed, by why: end (its ends finished it), error, kill, session, revoke, idle, "
           "limit (a bound on held bytes or sub-links), shutdown.");
    for (unsigned r = 0; r < SV_CLOSE_REASONS; r++)
        put(p, "katana_flow_closes_total{reason=\"%s\"} %" PRIu64 "\n",
            sv_close_reason_name((sv_close_reason)r), cc.n[r]);
}

/* Flows the connector refused by reason (sv_refusal), every reason listed, 0 or not. */
static void flow_refusals(page *p, sv_supervisor *sv)
{
    sv_refusal_counts rc = sv_flow_refusals(sv);
    family(p, "katana_flows_refused_total", "counter",
           "Flows (TCP flows, sub-flows, UDP datagrams) refused before any byte left, by why: "
           "private (an internal destination: loopback, private, link-local... or a name "
           "resolving to one; nodes[].allow_private allows them), blocked (a block route; a "
           "panel's is an audit rule too), no_memory. Each is logged at debug level.");
    for (unsigned r = 0; r < SV_REFUSALS; r++)
        put(p, "katana_flows_refused_total{reason=\"%s\"} %" PRIu64 "\n",
            sv_refusal_name((sv_refusal)r), rc.n[r]);
}

/* The worker loop turns as a Prometheus histogram of their CPU seconds (cumulative buckets). */
static void turns(page *p, sv_turn_counts t)
{
    static const unsigned bounds_us[SV_TURN_BUCKETS] = SV_TURN_BOUNDS_US;
    family(p, "katana_worker_turn_cpu_seconds", "histogram",
           "Worker loop turns by the CPU time their thread spent in them: while a turn runs, "
           "every other flow of that worker waits.");
    uint64_t n = 0;
    for (size_t i = 0; i < SV_TURN_BUCKETS; i++) {
        n += t.le[i];
        put(p, "katana_worker_turn_cpu_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
            bounds_us[i] / 1e6, n);
    }
    n += t.le[SV_TURN_BUCKETS];
    put(p, "katana_worker_turn_cpu_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", n);
    put(p, "katana_worker_turn_cpu_seconds_sum %.6f\n", (double)t.cpu_ns / 1e9);
    put(p, "katana_worker_turn_cpu_seconds_count %" PRIu64 "\n", n);
}

static void traffic(page *p, const sv_stats *st)
{
    family(p, "katana_inbound_bytes_total", "counter",
           "Payload bytes per node and inbound (a node is one inbound) and direction.");
    tag_bytes(p, "katana_inbound_bytes_total", "inbound", st->inbounds, st->n_inbounds, true);
    family(p, "katana_outbound_bytes_total", "counter",
           "Payload bytes per outbound and direction.");
    tag_bytes(p, "katana_outbound_bytes_total", "outbound", st->outbounds, st->n_outbounds,
              false);
    family(p, "katana_user_bytes_total", "counter", "Payload bytes per user id and direction.");
    tag_bytes(p, "katana_user_bytes_total", "user", st->users, st->n_users, false);
    family(p, "katana_sampler_ticks_total", "counter", "Sampler ticks since start.");
    put(p, "katana_sampler_ticks_total %" PRIu64 "\n", st->tick);
}

static void per_node(page *p, const char *name, const char *type, const char *help,
                     const api_node_status *n, long count, size_t field_off)
{
    char e[2 * SV_TAG_MAX + 4];
    family(p, name, type, help);
    for (long i = 0; i < count; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&n[i] + field_off, sizeof v);
        put(p, "%s{node=\"%s\"} %" PRIu64 "\n", name, esc(n[i].tag, e, sizeof e), v);
    }
}

static void live(page *p, api_server *s, const api_node_status *nodes, long n)
{
    sv_flow_info *flows = NULL;
    sv_session_info *sessions = NULL;
    long nf = sv_flows(s->sv, &flows), ns = sv_sessions(s->sv, &sessions);
    char e[2 * SV_TAG_MAX + 4];
    family(p, "katana_flows", "gauge", "Live flows per node.");
    for (long i = 0; i < n; i++) {
        long c = 0;
        for (long k = 0; k < nf; k++)
            c += strcmp(flows[k].inbound, nodes[i].tag) == 0;
        put(p, "katana_flows{node=\"%s\"} %ld\n", esc(nodes[i].tag, e, sizeof e), c);
    }
    family(p, "katana_sessions", "gauge", "Live sessions per node.");
    for (long i = 0; i < n; i++) {
        long c = 0;
        for (long k = 0; k < ns; k++)
            c += strcmp(sessions[k].inbound, nodes[i].tag) == 0;
        put(p, "katana_sessions{node=\"%s\"} %ld\n", esc(nodes[i].tag, e, sizeof e), c);
    }
    free(flows);
    free(sessions);
    if (nf < 0 || ns < 0)
        p->oom = true;
}

/* Panel requests by node, endpoint and status ("none" when no HTTP answer arrived). */
static void panel_requests(page *p, api_server *s)
{
    api_panel_requests *v = NULL;
    long n = s->requests != NULL ? s->requests(s->arg, &v) : 0;
    char e[2 * SV_TAG_MAX + 4];
    family(p, "katana_panel_requests_total", "counter",
           "Finished panel requests by node, endpoint and HTTP status (none: no answer).");
    for (long i = 0; i < n; i++) {
        char st[24];
        if (v[i].status > 0)
            snprintf(st, sizeof st, "%ld", v[i].status);
        else
            snprintf(st, sizeof st, "none");
        put(p, "katana_panel_requests_total{node=\"%s\",endpoint=\"%s\",status=\"%s\"} %"
            PRIu64 "\n", esc(v[i].node, e, sizeof e), v[i].endpoint, st, v[i].count);
    }
    free(v);
    if (n < 0)
        p->oom = true;
}

int api_metrics_render(api_server *s, const api_node_status *nodes, long n, char **out,
                       size_t *len)
{
    page p = {0};
    sv_stats st;
    live(&p, s, nodes, n);
    per_node(&p, "katana_users", "gauge", "Users in the node's running user list.", nodes, n,
             offsetof(api_node_status, users));
    per_node(&p, "katana_applies_total", "counter", "Successful applies that held the node.",
             nodes, n, offsetof(api_node_status, applies));
    per_node(&p, "katana_apply_errors_total", "counter", "Refused loads that held the node.",
             nodes, n, offsetof(api_node_status, apply_errors));
    per_node(&p, "katana_outbox_pending_bytes", "gauge", "Usage bytes not yet reported.",
             nodes, n, offsetof(api_node_status, outbox_pending_bytes));
    per_node(&p, "katana_usage_dropped_users_total", "counter",
             "Users whose pending usage was dropped: the panel failed a push and no longer had "
             "them (the rows stay in the store's usage_dropped table).", nodes, n,
             offsetof(api_node_status, usage_dropped_users));
    per_node(&p, "katana_usage_dropped_bytes_total", "counter",
             "Usage bytes (up+down) of those users.", nodes, n,
             offsetof(api_node_status, usage_dropped_bytes));
    per_node(&p, "katana_audit_hits_total", "counter",
             "Audit hits recorded: each (user, rule) once per report period.", nodes, n,
             offsetof(api_node_status, audit_recorded));
    per_node(&p, "katana_audit_pending", "gauge",
             "Audit hits (user, rule) of the current report period in the outbox.", nodes, n,
             offsetof(api_node_status, audit_pending));
    per_node(&p, "katana_audit_reported_total", "counter",
             "Audit hits the panel took as its detect log.", nodes, n,
             offsetof(api_node_status, audit_reported));
    uint64_t noted, dropped;
    sv_audit_counts(s->sv, &noted, &dropped);
    family(&p, "katana_audit_hits_dropped_total", "counter",
           "Audit hits dropped because too many were held between flushes.");
    put(&p, "katana_audit_hits_dropped_total %" PRIu64 "\n", dropped);
    panel_requests(&p, s);
    sv_refused_counts rc = sv_refused_clients(s->sv);
    family(&p, "katana_refused_clients_total", "counter",
           "Clients refused before authentication (wrong key, replayed or stale auth, malformed "
           "request), by what was done with them.");
    put(&p, "katana_refused_clients_total{action=\"drain\"} %" PRIu64 "\n", rc.drained);
    put(&p, "katana_refused_clients_total{action=\"close\"} %" PRIu64 "\n", rc.closed);
    put(&p, "katana_refused_clients_total{action=\"fallback\"} %" PRIu64 "\n", rc.fallback);
    shadowsocks_counters(&p, s->sv);
    vision_counters(&p, s->sv);
    turns(&p, sv_worker_turns(s->sv));
    flow_closes(&p, s->sv);
    flow_refusals(&p, s->sv);
    family(&p, "katana_epoch", "gauge", "Planes published so far.");
    put(&p, "katana_epoch %" PRIu64 "\n", sv_epoch(s->sv));
    if (sv_stats_get(s->sv, &st) == 0) {
        traffic(&p, &st);
        sv_stats_free(&st);
    } else {
        p.oom = true;
    }
    if (p.oom) {
        free(p.buf);
        return -ENOMEM;
    }
    *out = p.buf;
    *len = p.len;
    return 0;
}
