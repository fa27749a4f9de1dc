/*
 * The panel uplink (agent/uplink.h): its start (the store, the remote nodes and Xboard machines
 * of the config, the flush timer) and its stop, the stored state dropped when its first load
 * was refused, and the client IP hints kept across a graceful restart. The other parts are
 * listed in agent/uplink_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

static bool is_remote(const ag_node_config *nc)
{
    return (nc->panel.type == AG_PANEL_UNIPROXY || nc->panel.type == AG_PANEL_SSPANEL ||
            nc->panel.type == AG_PANEL_XBOARD) && !ag__up_is_machine(nc);
}

int ag_uplink_new(uv_loop_t *loop, sv_supervisor *sv, const ag_config *cfg,
                  ag_uplink_change_cb on_change, void *arg, ag_uplink **out, sv_error *err)
{
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_nodes; i++)
        n += is_remote(&cfg->nodes[i]) || ag__up_is_machine(&cfg->nodes[i]);
    ag_uplink *u = calloc(1, sizeof *u);
    if (u == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    u->loop = loop;
    u->sv = sv;
    u->on_change = on_change;
    u->arg = arg;
    u->flush_s = cfg->db_flush_s > 0 ? cfg->db_flush_s : AG_CONFIG_FLUSH_DEFAULT;
    /* with db.path the store opens even for local panels: it keeps the client IP hints */
    int rc = cfg->db_path != NULL ? db_open(cfg->db_path, &u->db, err) : 0;
    if (rc != 0) { /* name the setting: "db.path: /x/katana.db.lock: No such file ..." */
        sv_error inner = *err;
        sv_error_set(err, rc, "db.path: %s", inner.msg);
    }
    for (size_t i = 0; rc == 0 && i < cfg->n_nodes; i++) {
        if (ag__up_is_machine(&cfg->nodes[i])) {
            rc = ag__up_machine_prepare(u, &cfg->nodes[i], err);
            continue;
        }
        if (!is_remote(&cfg->nodes[i]))
            continue;
        up_node *nd = calloc(1, sizeof *nd);
        rc = nd == NULL ? sv_error_set(err, -ENOMEM, "out of memory")
                        : ag__up_node_prepare(u, nd, &cfg->nodes[i], err);
        if (rc == 0 && ag__up_node_add(u, nd) != 0)
            rc = sv_error_set(err, -ENOMEM, "out of memory");
        if (rc != 0 && nd != NULL)
            ag__up_node_unprepare(nd);
    }
    if (rc != 0) { /* nothing is left for the caller to undo */
        for (size_t i = 0; i < u->n; i++)
            ag__up_node_unprepare(u->nodes[i]);
        for (size_t i = 0; i < u->n_machines; i++) {
            pn_xb_machine_client_free(u->machines[i]->client);
            pn_xb_machine_free(&u->machines[i]->list);
            ag_node_config_free(&u->machines[i]->nc);
            free(u->machines[i]);
        }
        free(u->machines);
        db_close(u->db);
        free(u->nodes);
        free(u);
        return rc;
    }
    pthread_mutex_init(&u->snap_lock, NULL);
    uv_timer_init(loop, &u->flush_timer);
    u->flush_timer.data = u;
    uv_timer_init(loop, &u->trim_timer);
    u->trim_timer.data = u;
    ag__up_metrics_init(u);
    *out = u;
    if (n == 0)
        return 0;
    srand((unsigned)now_ms());
    for (size_t i = 0; i < u->n; i++)
        ag__up_node_start(u, u->nodes[i]);
    for (size_t i = 0; i < u->n_machines; i++)
        ag__up_machine_start(u->machines[i]);
    uv_timer_start(&u->flush_timer, ag__up_on_flush_timer, 1000u * u->flush_s, 1000u * u->flush_s);
    ag__up_metrics_start(u);
    ag__up_publish(u); /* what an earlier run left pending */
    return 0;
}

size_t ag_uplink_drop_stored(ag_uplink *u, const sv_error *why)
{
    size_t n = 0;
    for (size_t i = 0; u != NULL && i < u->n; i++) {
        up_node *nd = u->nodes[i];
        if (!nd->from_store || nd->retiring)
            continue;
        SV_LOG(SV_LOG_WARN, MOD, "node %s: stored panel state did not apply, waiting for the "
               "panel: %s", nd->tag, why != NULL ? why->msg : "");
        ag__up_forget_state(nd);
        if (nd->pulls_pending == 0) /* ask now rather than after a backoff */
            uv_timer_start(&nd->pull_timer, ag__up_on_pull_timer, 0, 0);
        n++;
    }
    if (n > 0)
        ag__up_publish(u);
    return n;
}

static void timer_closed(uv_handle_t *h)
{
    ag__up_closed(h->data);
}

void ag_uplink_free(ag_uplink *u)
{
    if (u == NULL)
        return;
    ag__up_unpublish(u);
    if (u->n_carry > 0)
        SV_LOG(SV_LOG_ERROR, MOD, "usage of %zu users could not be written to the outbox",
               u->n_carry);
    u->freeing = true;
    u->closing += 3;
    uv_close((uv_handle_t *)&u->flush_timer, timer_closed);
    uv_close((uv_handle_t *)&u->trim_timer, timer_closed);
    uv_close((uv_handle_t *)&u->metrics_timer, timer_closed);
    for (size_t i = 0; i < u->n_machines; i++) {
        up_machine *m = u->machines[i];
        pn_xb_machine_client_free(m->client); /* requests in flight end without callbacks */
        m->client = NULL;
        u->closing++;
        uv_close((uv_handle_t *)&m->timer, ag__up_machine_timer_closed);
    }
    while (u->n > 0)
        ag__up_node_close(u->nodes[u->n - 1]);
    db_close(u->db);
    u->db = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* client IP hints kept across a graceful restart                                           */
/* ---------------------------------------------------------------------------------------- */

void ag_uplink_save_hints(ag_uplink *u)
{
    if (u == NULL || u->db == NULL || !u->hints_restored)
        return; /* before the restore: the stored hints are still the ones to keep */
    sv_ip_hint *v = NULL;
    long n = sv_hints_export(u->sv, &v);
    sv_error err = {0};
    if (n < 0)
        SV_LOG(SV_LOG_WARN, MOD, "client IP hints not saved: %s", strerror((int)-n));
    else if (db_hints_save(u->db, v, (size_t)n, now_ms(), &err) != 0)
        SV_LOG(SV_LOG_WARN, MOD, "client IP hints not saved: %s", err.msg);
    else
        SV_LOG(SV_LOG_INFO, MOD, "saved %ld client IP hints for the next start", n);
    free(v);
}

void ag_uplink_restore_hints(ag_uplink *u)
{
    if (u == NULL || u->hints_restored)
        return;
    u->hints_restored = true;
    if (u->db == NULL)
        return;
    sv_ip_hint *v = NULL;
    size_t n = 0;
    sv_error err = {0};
    if (db_hints_take(u->db, now_ms(), &v, &n, &err) != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "client IP hints not restored: %s", err.msg);
        return;
    }
    long given = n > 0 ? sv_hints_import(u->sv, v, n) : 0;
    if (given < 0)
        SV_LOG(SV_LOG_WARN, MOD, "client IP hints not restored: %s", strerror((int)-given));
    else if (n > 0)
        SV_LOG(SV_LOG_INFO, MOD, "restored %ld of %zu client IP hints saved at the last stop",
               given, n);
    free(v);
}
