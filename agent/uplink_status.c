/*
 * What a node reports besides its usage, once per push interval and best effort (PANEL.md
 * §1.7, §1.9): the distinct client IPs of its users' live sessions (REST `alive`, or
 * `report.devices` over its machine's channel); the panel's alivelist, turned into the
 * supervisor's one remote device table; the host's load (/proc/stat, /proc/meminfo,
 * /proc/uptime, /proc/loadavg, statvfs of /) for the status reports of nodes and machines.
 * A failure is logged and changes nothing. Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/statvfs.h>

#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

/* ---------------------------------------------------------------------------------------- */
/* alive IPs and node status (PANEL.md §1.7, §1.9), once per push interval, best effort       */
/* ---------------------------------------------------------------------------------------- */

static void on_reported(pn_client *c, int rc, const sv_error *err, void *arg)
{
    (void)c;
    if (rc != 0)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: %s", ((up_node *)arg)->tag, err->msg);
}

/* "1.2.3.4:5" -> "1.2.3.4", "[::1]:5" -> "::1", in place. */
static void strip_port(char *src)
{
    if (src[0] == '[') {
        char *end = strchr(src, ']');
        if (end != NULL)
            *end = '\0';
        memmove(src, src + 1, strlen(src + 1) + 1);
        return;
    }
    char *colon = strrchr(src, ':');
    if (colon != NULL)
        *colon = '\0';
}

static int cmp_session(const void *a, const void *b)
{
    const sv_session_info *x = a, *y = b;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    return strcmp(x->source, y->source);
}

/* The distinct client IPs of each user's live sessions on this node; nothing when none. */
void ag__up_report_alive(up_node *nd)
{
    sv_session_info *ss = NULL;
    long n = sv_sessions(nd->u->sv, &ss);
    size_t k = 0;
    for (long i = 0; i < n; i++)
        if (ss[i].has_user && strcmp(ss[i].inbound, nd->tag) == 0) {
            ss[k] = ss[i];
            strip_port(ss[k].source);
            k++;
        }
    if (k > 0)
        qsort(ss, k, sizeof *ss, cmp_session);
    pn_alive *items = k > 0 ? calloc(k, sizeof *items) : NULL;
    const char **ips = k > 0 ? calloc(k, sizeof *ips) : NULL;
    size_t n_items = 0, n_ips = 0;
    for (size_t i = 0; items != NULL && ips != NULL && i < k; i++) {
        if (i > 0 && ss[i].user == ss[i - 1].user && strcmp(ss[i].source, ss[i - 1].source) == 0)
            continue; /* same IP again */
        if (n_items == 0 || items[n_items - 1].user != ss[i].user)
            items[n_items++] = (pn_alive){.user = ss[i].user, .ips = &ips[n_ips], .n_ips = 0};
        ips[n_ips++] = ss[i].source;
        items[n_items - 1].n_ips++;
    }
    /* a machine's node: `report.devices` over the machine's channel while it is up
     * (PROTOCOLS-2.md §6.5), else REST `alive` like any node */
    bool sent = n_items > 0 && nd->machine != NULL &&
                pn_xb_machine_report_devices(nd->machine->client, nd->machine_node, items,
                                             n_items) == 0;
    if (n_items > 0 && !sent && nd->client->ops->report_alive != NULL)
        nd->client->ops->report_alive(nd->client, items, n_items, on_reported, nd);
    free(items);
    free(ips);
    free(ss);
}

/* Local distinct IPs of @p user (every inbound) in the sorted, port-stripped list @p ss. */
static uint32_t local_ips(const sv_session_info *ss, size_t k, uint64_t user)
{
    uint32_t n = 0;
    const char *last = NULL;
    for (size_t i = 0; i < k; i++) {
        if (!ss[i].has_user || ss[i].user != user)
            continue;
        if (last == NULL || strcmp(last, ss[i].source) != 0)
            n++;
        last = ss[i].source;
    }
    return n;
}

/* The supervisor's one remote device table from every node's own alivelist answer
 * (the alivelist is per node; a node's answer replaces only its own part). A user listed by two
 * nodes keeps the larger count (sv_set_remote_devices). 0 or -ENOMEM (the old table stays). */
int ag__up_remote_devices_apply(ag_uplink *u)
{
    size_t total = 0, k = 0;
    for (size_t i = 0; i < u->n; i++)
        total += u->nodes[i]->n_remote;
    sv_device_count *all = total > 0 ? malloc(total * sizeof *all) : NULL;
    if (total > 0 && all == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < u->n; i++)
        for (size_t j = 0; j < u->nodes[i]->n_remote; j++)
            all[k++] = u->nodes[i]->remote[j];
    int rc = sv_set_remote_devices(u->sv, all, k);
    free(all);
    return rc;
}

/* alivelist answered (device limit): the panel counts this node's reported IPs too, so
 * each user's local distinct IPs are taken off (floor 0) before the table goes to the
 * supervisor, which adds the live local IPs back at admission. A failure keeps the old table. */
void ag__up_on_alivelist(pn_client *c, int rc, const pn_alive_count *items, size_t n,
                         const sv_error *err, void *arg)
{
    up_node *nd = arg;
    (void)c;
    if (rc != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: %s", nd->tag, err->msg);
        return;
    }
    sv_session_info *ss = NULL;
    long got = sv_sessions(nd->u->sv, &ss);
    size_t k = got > 0 ? (size_t)got : 0;
    for (size_t i = 0; i < k; i++)
        strip_port(ss[i].source);
    if (k > 0)
        qsort(ss, k, sizeof *ss, cmp_session);
    sv_device_count *v = n > 0 ? calloc(n, sizeof *v) : NULL;
    if (n == 0 || v != NULL) {
        for (size_t i = 0; i < n; i++) {
            uint32_t mine = local_ips(ss, k, items[i].user);
            uint32_t others = items[i].count > mine ? items[i].count - mine : 0;
            v[i] = (sv_device_count){.user = items[i].user, .count = others};
        }
        free(nd->remote);
        nd->remote = v;
        nd->n_remote = n;
        v = NULL;
        if (ag__up_remote_devices_apply(nd->u) != 0)
            SV_LOG(SV_LOG_WARN, MOD, "node %s: alivelist: out of memory", nd->tag);
    }
    free(v);
    free(ss);
}

/* ---------------------------------------------------------------------------------------- */
/* the host's load from /proc, for the status reports of nodes and machines                 */
/* ---------------------------------------------------------------------------------------- */

/* Busy and total jiffies from the first line of /proc/stat. */
static int read_cpu(uint64_t *busy, uint64_t *total)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    int n = f != NULL ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                               &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) : 0;
    if (f != NULL)
        fclose(f);
    if (n < 4)
        return -EIO;
    *total = 0;
    for (int i = 0; i < 8; i++)
        *total += v[i];
    *busy = *total - v[3] - v[4]; /* minus idle and iowait */
    return 0;
}

/* MemTotal, MemAvailable, SwapTotal, SwapFree from /proc/meminfo, in bytes. */
static void read_mem(pn_status *st)
{
    char line[256];
    unsigned long long kb, avail = 0, swap_free = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "MemTotal: %llu", &kb) == 1)
            st->mem_total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu", &kb) == 1)
            avail = kb * 1024;
        else if (sscanf(line, "SwapTotal: %llu", &kb) == 1)
            st->swap_total = kb * 1024;
        else if (sscanf(line, "SwapFree: %llu", &kb) == 1)
            swap_free = kb * 1024;
    }
    if (f != NULL)
        fclose(f);
    st->mem_used = st->mem_total > avail ? st->mem_total - avail : 0;
    st->swap_used = st->swap_total > swap_free ? st->swap_total - swap_free : 0;
}

/* Uptime from /proc/uptime and load averages from /proc/loadavg (0 when unreadable). */
static void read_load(pn_status *st)
{
    double up = 0;
    FILE *f = fopen("/proc/uptime", "r");
    if (f != NULL && fscanf(f, "%lf", &up) == 1 && up > 0)
        st->uptime_s = (uint64_t)up;
    if (f != NULL)
        fclose(f);
    f = fopen("/proc/loadavg", "r");
    if (f != NULL && fscanf(f, "%lf %lf %lf", &st->load[0], &st->load[1], &st->load[2]) != 3)
        st->load[0] = st->load[1] = st->load[2] = 0;
    if (f != NULL)
        fclose(f);
}

/* The host's load for a status report (PANEL.md §1.9): CPU since the previous reading. */
void ag__up_read_status(ag_uplink *u, pn_status *out)
{
    pn_status st = {0};
    uint64_t busy = 0, total = 0;
    if (read_cpu(&busy, &total) == 0) {
        if (total > u->cpu_total && busy >= u->cpu_busy)
            st.cpu = 100.0 * (double)(busy - u->cpu_busy) / (double)(total - u->cpu_total);
        u->cpu_busy = busy;
        u->cpu_total = total;
    }
    read_mem(&st);
    read_load(&st);
    struct statvfs vfs;
    if (statvfs("/", &vfs) == 0) {
        st.disk_total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        st.disk_used = (uint64_t)(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
    }
    *out = st;
}

void ag__up_report_status(up_node *nd)
{
    pn_status st;
    ag__up_read_status(nd->u, &st);
    if (nd->client->ops->report_status != NULL)
        nd->client->ops->report_status(nd->client, &st, on_reported, nd);
}
