/*
 * Xboard machines (PANEL.md §1.1, agent/uplink.h): a machine's node list, pulled with a
 * machine/status report every pull interval or pushed as sync.nodes, starts the uplink's nodes
 * of the types katana serves and retires those it drops; a refused list keeps the last good
 * one. The machine's one channel (PROTOCOLS-2.md §6.2-6.5) routes node-scoped events by node id
 * to those nodes. ag_uplink_expand turns a machine entry of the config into its nodes' entries.
 * Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/node_types.h"
#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

/* ---------------------------------------------------------------------------------------- */
/* Xboard machines (PANEL.md §1.1): the machine's list makes and retires nodes                 */
/* ---------------------------------------------------------------------------------------- */

bool ag__up_is_machine(const ag_node_config *nc)
{
    return nc->panel.type == AG_PANEL_XBOARD && nc->panel.machine_id != NULL;
}

/* The machine no longer lists the node: stop offering it (the next load stops its listener)
 * and billing to it; what it holds goes out through its push timer. */
static void node_retire(up_node *nd)
{
    ag_uplink_flush(nd->u); /* its users' bytes so far, as they were billed */
    nd->retiring = true; /* its index stays, unused (owner()), should it be listed again */
    free(nd->remote);
    nd->remote = NULL;
    nd->n_remote = 0;
    (void)ag__up_remote_devices_apply(nd->u);
    uv_timer_stop(&nd->pull_timer);
    if (!nd->pushing) {
        nd->push_fails = 0;
        uv_timer_start(&nd->push_timer, ag__up_on_push_timer, 0, 0);
    }
    SV_LOG(SV_LOG_INFO, MOD, "node %s: no longer on its machine, stopping it", nd->tag);
}

bool ag_machine_type_served(const char *type)
{
    return ag_node_type(type) != NULL;
}

int ag_machine_node_config(const ag_node_config *entry, uint64_t id, const char *type,
                           ag_node_config *out, sv_error *err)
{
    char tag[SV_TAG_MAX + 32], num[24];
    int rc = ag_node_config_copy(out, entry);
    if (rc != 0) {
        memset(out, 0, sizeof *out);
        return sv_error_set(err, rc, "out of memory");
    }
    snprintf(tag, sizeof tag, "%s-%" PRIu64, entry->tag, id);
    snprintf(num, sizeof num, "%" PRIu64, id);
    free(out->tag);
    free(out->panel.node_id);
    free(out->panel.node_type);
    out->tag = strdup(tag);
    out->panel.node_id = strdup(num);
    out->panel.node_type = strdup(type);
    if (out->tag == NULL || out->panel.node_id == NULL || out->panel.node_type == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    if (strlen(tag) > SV_TAG_MAX)
        return sv_error_set(err, -EINVAL, "node tag %s: longer than %d bytes", tag, SV_TAG_MAX);
    return 0;
}

static int cmp_machine_id(const void *a, const void *b)
{
    uint64_t x = ((const pn_xb_machine_node *)a)->id, y = ((const pn_xb_machine_node *)b)->id;
    return x < y ? -1 : x > y;
}

/* A node of @p m for panel node @p mn: the machine entry's settings with its tag, id, type. */
static int machine_node_new(up_machine *m, const pn_xb_machine_node *mn, sv_error *err)
{
    ag_uplink *u = m->u;
    ag_node_config nc;
    int rc = ag_machine_node_config(&m->nc, mn->id, mn->type, &nc, err);
    up_node *nd = rc == 0 ? calloc(1, sizeof *nd) : NULL;
    if (rc == 0 && nd == NULL)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = ag__up_node_prepare(u, nd, &nc, err);
    ag_node_config_free(&nc);
    if (rc == 0 && ag__up_node_add(u, nd) != 0)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc != 0) {
        if (nd != NULL)
            ag__up_node_unprepare(nd);
        return rc;
    }
    nd->machine = m;
    nd->machine_node = mn->id;
    memcpy(nd->machine_type, mn->type, sizeof nd->machine_type);
    ag__up_node_start(u, nd);
    SV_LOG(SV_LOG_INFO, MOD, "node %s: %s node %" PRIu64 " of machine %s, starting", nd->tag,
           mn->type, mn->id, m->nc.panel.machine_id);
    return 0;
}

static const pn_xb_machine_node *list_find(const pn_xb_machine *l, uint64_t id)
{
    pn_xb_machine_node key = {.id = id};
    return l->n > 0 ? bsearch(&key, l->nodes, l->n, sizeof key, cmp_machine_id) : NULL;
}

/* Make the uplink's nodes of @p m what @p l lists: retire the nodes it dropped (or whose type
 * changed), start the new ones (a retiring one listed again lives on). @return whether
 * anything changed. */
static bool machine_apply(up_machine *m, const pn_xb_machine *l)
{
    ag_uplink *u = m->u;
    bool changed = false;
    char skipped[160] = "";
    for (size_t i = 0; i < u->n; i++) {
        up_node *nd = u->nodes[i];
        const pn_xb_machine_node *mn = nd->machine == m ? list_find(l, nd->machine_node) : NULL;
        if (nd->machine != m || nd->retiring ||
            (mn != NULL && strcmp(mn->type, nd->machine_type) == 0))
            continue;
        node_retire(nd);
        changed = true;
    }
    for (size_t k = 0; k < l->n; k++) {
        const pn_xb_machine_node *mn = &l->nodes[k];
        up_node *have = NULL;
        for (size_t i = 0; i < u->n && have == NULL; i++)
            if (u->nodes[i]->machine == m && u->nodes[i]->machine_node == mn->id &&
                strcmp(u->nodes[i]->machine_type, mn->type) == 0)
                have = u->nodes[i];
        if (have != NULL && have->retiring) { /* listed again before it closed */
            have->retiring = false;
            /* its list was shed, and what it was shed for may have stopped: then the next pull
             * must bring full bodies, never a "not modified" with nothing to refill from */
            if (have->users.shed && sv_running_user_set(u->sv, have->tag) == NULL)
                ag__up_forget_state(have);
            uv_timer_start(&have->pull_timer, ag__up_on_pull_timer, 0, 0);
            changed = true;
        }
        if (have != NULL)
            continue;
        if (!ag_machine_type_served(mn->type)) {
            size_t len = strlen(skipped);
            snprintf(skipped + len, sizeof skipped - len, "%s%" PRIu64 " (%s)",
                     len > 0 ? ", " : "", mn->id, mn->type);
            continue;
        }
        sv_error err = {0};
        if (machine_node_new(m, mn, &err) != 0)
            SV_LOG(SV_LOG_ERROR, MOD, "machine %s: node %" PRIu64 " not started: %s",
                   m->nc.panel.machine_id, mn->id, err.msg);
        else
            changed = true;
    }
    if (strcmp(skipped, m->skipped) != 0 && skipped[0] != '\0')
        SV_LOG(SV_LOG_WARN, MOD, "machine %s: nodes of types katana does not serve skipped: %s",
               m->nc.panel.machine_id, skipped);
    memcpy(m->skipped, skipped, sizeof skipped);
    return changed;
}

static void on_machine_timer(uv_timer_t *t);

static void machine_schedule(up_machine *m, bool failed)
{
    uint64_t d = 1000u * (m->list.pull_interval > 0 ? m->list.pull_interval : INTERVAL_DEFAULT);
    if (failed)
        d = backoff_ms(++m->fails, m->has_list ? d : 60000u);
    else
        m->fails = 0;
    uv_timer_start(&m->timer, on_machine_timer, d, 0);
}

/* The machine's list as a machine/nodes body, for the store (restart with the panel down). */
static char *machine_body(const pn_xb_machine *l)
{
    json_t *nodes = json_array(), *b = json_object();
    for (size_t i = 0; nodes != NULL && i < l->n; i++)
        json_array_append_new(nodes, json_pack("{s:I, s:s}", "id", (json_int_t)l->nodes[i].id,
                                               "type", l->nodes[i].type));
    json_object_set_new(b, "nodes", nodes);
    json_object_set_new(b, "base_config", json_pack("{s:I, s:I}", "push_interval",
                                                    (json_int_t)l->push_interval,
                                                    "pull_interval",
                                                    (json_int_t)l->pull_interval));
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

/* Make @p l (taken: zeroed) the machine's last good list: start and retire its nodes, store
 * it when it changed, and offer the change to the node manager. */
static void machine_take(up_machine *m, pn_xb_machine *l)
{
    ag_uplink *u = m->u;
    bool changed = machine_apply(m, l) || !m->has_list;
    bool same = m->has_list && m->list.n == l->n &&
                (l->n == 0 || memcmp(m->list.nodes, l->nodes, l->n * sizeof *l->nodes) == 0) &&
                m->list.push_interval == l->push_interval &&
                m->list.pull_interval == l->pull_interval;
    pn_xb_machine_free(&m->list);
    m->list = *l;
    memset(l, 0, sizeof *l);
    m->has_list = true;
    char *body = same ? NULL : machine_body(&m->list);
    sv_error serr = {0};
    if (body != NULL && db_state_put(u->db, m->nc.tag, DB_STATE_CONFIG, NULL, body, strlen(body),
                                     now_ms(), &serr) != 0)
        SV_LOG(SV_LOG_WARN, MOD, "machine %s: node list not stored: %s",
               m->nc.panel.machine_id, serr.msg);
    free(body);
    ag__up_publish(u);
    if (changed && ag_uplink_ready(u) && u->on_change != NULL)
        u->on_change(u->arg);
}

static void on_machine_list(int rc, pn_xb_machine *l, const sv_error *err, void *arg)
{
    up_machine *m = arg;
    m->fetching = false;
    if (rc != 0) { /* the last good list stays; one warning while the error stays the same */
        if (strncmp(m->error, err->msg, sizeof m->error - 1) != 0)
            SV_LOG(SV_LOG_WARN, MOD, "machine %s: %s (keeping its %zu nodes)",
                   m->nc.panel.machine_id, err->msg, m->list.n);
        snprintf(m->error, sizeof m->error, "%.159s", err->msg);
        machine_schedule(m, true);
        return;
    }
    m->error[0] = '\0';
    machine_take(m, l);
    machine_schedule(m, false); /* on the new list's pull interval */
}

static void on_machine_reported(int rc, const sv_error *err, void *arg)
{
    if (rc != 0)
        SV_LOG(SV_LOG_WARN, MOD, "machine %s: status report: %s",
               ((up_machine *)arg)->nc.panel.machine_id, err->msg);
}

/* Every pull interval: the node list, and the machine's load (machine/status). */
static void on_machine_timer(uv_timer_t *t)
{
    up_machine *m = t->data;
    pn_status st;
    ag__up_read_status(m->u, &st);
    (void)pn_xb_machine_status(m->client, &st, on_machine_reported, m);
    m->fetching = pn_xb_machine_fetch(m->client, on_machine_list, m) == 0;
    if (!m->fetching)
        machine_schedule(m, true);
}

/* ---------------------------------------------------------------------------------------- */
/* the machine's channel (PROTOCOLS-2.md §6.2-6.5): node-scoped events go to that            */
/* node's push handlers, as a node's own channel would give them                             */
/* ---------------------------------------------------------------------------------------- */

/* The live node of @p m serving panel node @p id, or NULL (not one of ours). */
static up_node *machine_node_find(up_machine *m, uint64_t id)
{
    for (size_t i = 0; i < m->u->n; i++) {
        up_node *nd = m->u->nodes[i];
        if (nd->machine == m && nd->machine_node == id && !nd->retiring)
            return nd;
    }
    return NULL;
}

/* The machine's list over REST now (not when one is in flight). */
static void machine_pull_now(up_machine *m)
{
    if (!m->fetching)
        uv_timer_start(&m->timer, on_machine_timer, 0, 0);
}

static void mev_node(void *arg, uint64_t id, pn_node *node, const char *body, size_t len)
{
    up_node *nd = machine_node_find(arg, id);
    if (nd != NULL)
        ag__up_ev_node(nd, node, body, len);
}

static void mev_users(void *arg, uint64_t id, pn_users *users)
{
    up_node *nd = machine_node_find(arg, id);
    if (nd != NULL)
        ag__up_ev_users(nd, users);
}

static void mev_delta(void *arg, uint64_t id, const pn_users *add, const uint64_t *remove,
                      size_t n_remove)
{
    up_node *nd = machine_node_find(arg, id);
    if (nd != NULL)
        ag__up_ev_delta(nd, add, remove, n_remove);
}

/* Every live node of @p m pulls over REST now, and so does the list. */
static void machine_pull_all(up_machine *m)
{
    for (size_t i = 0; i < m->u->n; i++)
        if (m->u->nodes[i]->machine == m && !m->u->nodes[i]->retiring)
            ag__up_pull_now(m->u->nodes[i]);
    machine_pull_now(m);
}

static void mev_resync(void *arg, uint64_t id, const sv_error *why)
{
    up_machine *m = arg;
    up_node *nd = id != 0 ? machine_node_find(m, id) : NULL;
    if (nd != NULL) {
        ag__up_ev_resync(nd, why);
        return;
    }
    SV_LOG(SV_LOG_WARN, MOD, "machine %s: %s (pulling everything)", m->nc.panel.machine_id,
           why->msg);
    for (size_t i = 0; i < m->u->n; i++) {
        up_node *o = m->u->nodes[i];
        if (o->machine == m && !o->retiring) {
            pn_set_etag(o->client, PN_BODY_CONFIG, NULL);
            pn_set_etag(o->client, PN_BODY_USERS, NULL);
        }
    }
    machine_pull_all(m);
}

/* sync.nodes: the machine's node set changes now, as a pulled list would change it (the
 * intervals stay those of the last REST list). */
static void mev_nodes(void *arg, pn_xb_machine *l)
{
    up_machine *m = arg;
    l->push_interval = m->list.push_interval;
    l->pull_interval = m->list.pull_interval;
    SV_LOG(SV_LOG_INFO, MOD, "machine %s: node set pushed by the panel (%zu nodes)",
           m->nc.panel.machine_id, l->n);
    machine_take(m, l);
}

/* Down: every node of the machine polls over REST at once (the client reconnects by itself);
 * up: the list is pulled again (a sync.nodes may have been missed). */
static void mev_channel(void *arg, bool up, const sv_error *why)
{
    (void)why;
    if (up)
        machine_pull_now(arg);
    else
        machine_pull_all(arg);
}

static const pn_xb_machine_events machine_events = {
    .node = mev_node,
    .users = mev_users,
    .delta = mev_delta,
    .resync = mev_resync,
    .nodes = mev_nodes,
    .channel = mev_channel,
};

/* ---------------------------------------------------------------------------------------- */
/* a machine's start and stop; its entry expanded to its nodes                              */
/* ---------------------------------------------------------------------------------------- */

/* The machine's client and its stored list (its nodes start with the stored list, before the
 * panel answers). No libuv handle yet. */
int ag__up_machine_prepare(ag_uplink *u, const ag_node_config *nc, sv_error *err)
{
    up_machine *m = calloc(1, sizeof *m);
    up_machine **p = realloc(u->machines, (u->n_machines + 1) * sizeof *p);
    if (p != NULL)
        u->machines = p;
    if (m == NULL || p == NULL || ag_node_config_copy(&m->nc, nc) != 0) {
        free(m);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    m->u = u;
    pn_xb_machine_options o = {.loop = u->loop, .url = nc->panel.url,
                               .token = nc->panel.token, .machine_id = nc->panel.machine_id,
                               .timeout_ms = 1000L * nc->panel.timeout_s};
    int rc = pn_xb_machine_new(&o, &m->client, err);
    if (rc != 0) {
        ag_node_config_free(&m->nc);
        free(m);
        return rc;
    }
    u->machines[u->n_machines++] = m;
    char *etag = NULL, *body = NULL;
    size_t len = 0;
    sv_error serr = {0};
    pn_xb_machine l = {0};
    if (db_state_get(u->db, nc->tag, DB_STATE_CONFIG, &etag, &body, &len, &serr) == 0 &&
        pn_xb_parse_machine(body, len, &l, &serr) == 0) {
        m->list = l;
        m->has_list = true;
        SV_LOG(SV_LOG_INFO, MOD, "machine %s: %zu nodes from the store until the panel answers",
               nc->panel.machine_id, l.n);
    }
    free(etag);
    free(body);
    return 0;
}

void ag__up_machine_start(up_machine *m)
{
    uv_timer_init(m->u->loop, &m->timer);
    m->timer.data = m;
    if (m->has_list) { /* the stored list's nodes start now (from their stored state) */
        pn_xb_machine stored = m->list;
        memset(&m->list, 0, sizeof m->list);
        (void)machine_apply(m, &stored);
        m->list = stored;
    }
    uv_timer_start(&m->timer, on_machine_timer, 0, 0);
    if (pn_xb_machine_watch(m->client, &machine_events, m) != 0)
        SV_LOG(SV_LOG_WARN, MOD, "machine %s: panel push channel not started, polling only",
               m->nc.panel.machine_id);
}

void ag__up_machine_timer_closed(uv_handle_t *h)
{
    ag__up_closed(((up_machine *)h->data)->u);
}

int ag_uplink_expand(ag_uplink *u, ag_config *cfg, sv_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        if (!ag__up_is_machine(&cfg->nodes[i])) {
            n++;
            continue;
        }
        up_machine *m = NULL;
        for (size_t k = 0; u != NULL && k < u->n_machines && m == NULL; k++)
            if (strcmp(u->machines[k]->nc.tag, cfg->nodes[i].tag) == 0)
                m = u->machines[k];
        if (m == NULL)
            return sv_error_set(err, -ENOENT, "node %s: xboard machine not started (its "
                                "settings changed: restart katana)", cfg->nodes[i].tag);
        for (size_t k = 0; k < u->n; k++)
            n += u->nodes[k]->machine == m && !u->nodes[k]->retiring;
    }
    ag_node_config *v = calloc(n > 0 ? n : 1, sizeof *v);
    if (v == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t k = 0;
    int rc = 0;
    for (size_t i = 0; i < cfg->n_nodes && rc == 0; i++) {
        if (!ag__up_is_machine(&cfg->nodes[i])) {
            v[k++] = cfg->nodes[i];
            memset(&cfg->nodes[i], 0, sizeof cfg->nodes[i]);
            continue;
        }
        for (size_t j = 0; j < u->n && rc == 0; j++) {
            up_node *nd = u->nodes[j];
            if (nd->machine == NULL || nd->retiring ||
                strcmp(nd->machine->nc.tag, cfg->nodes[i].tag) != 0)
                continue;
            rc = ag_machine_node_config(&cfg->nodes[i], nd->machine_node, nd->machine_type,
                                        &v[k++], err);
        }
    }
    for (size_t i = 0; i < cfg->n_nodes; i++)
        ag_node_config_free(&cfg->nodes[i]);
    free(cfg->nodes);
    cfg->nodes = v;
    cfg->n_nodes = k;
    return rc;
}
