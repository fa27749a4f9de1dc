/*
 * The supervisor actor's removal and drain policies (seed 001 "policies"): Keep,
 * Close and CloseAfter for the sessions of users an inbound no longer admits and for the flows
 * of a drained outbound version; CloseAfter's grace timers.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor/actor.h"
#include "supervisor/util/log.h"

/* Close outbound version @p id ("tag@vN"), @p t when the running targets held it: its closed
 * token first (seed 000 "Guarded": a dial on it still in flight fails when it completes), then
 * every live flow opened on it is killed. */
static void close_version(sv_supervisor *sv, const char *id, sv_target *t)
{
    if (t != NULL)
        sv_target_close(t);
    sv_flow_filter f = {.outbound = id};
    size_t n = sv_tracker_kill_where(sv->shared.tracker, &f);
    if (n > 0)
        SV_LOG(SV_LOG_INFO, "sv.actor", "drained outbound %s: %zu flow(s) closed", id, n);
}

static void on_grace_closed(uv_handle_t *h)
{
    grace_timer *g = h->data;
    sv_target_unref(g->target);
    free(g);
}

void sv__grace_end(grace_timer *g)
{
    sv_list_unlink(&g->link);
    uv_timer_stop(&g->timer);
    uv_close((uv_handle_t *)&g->timer, on_grace_closed);
}

static void on_grace(uv_timer_t *t)
{
    grace_timer *g = t->data;
    if (g->listener != 0)
        sv__listener_revoke(g->sv, g->listener);
    else
        close_version(g->sv, g->outbound, g->target);
    sv__grace_end(g);
}

/* Start a CloseAfter timer of @p ms for listener @p listener (non-zero) or outbound version
 * @p outbound (@p t: that target, which the timer holds a reference of, or NULL).
 * @return 0 or -ENOMEM. */
static int grace_start(sv_supervisor *sv, uint32_t ms, uint32_t listener, const char *outbound,
                       sv_target *t)
{
    grace_timer *g = calloc(1, sizeof *g);
    if (g == NULL)
        return -ENOMEM;
    g->sv = sv;
    g->listener = listener;
    g->target = t;
    if (t != NULL)
        sv_target_ref(t);
    snprintf(g->outbound, sizeof g->outbound, "%s", outbound != NULL ? outbound : "");
    uv_timer_init(sv->control, &g->timer);
    g->timer.data = g;
    sv_list_insert_tail(&sv->graces, &g->link);
    uv_timer_start(&g->timer, on_grace, ms, 0);
    return 0;
}

/* Apply the user removal policy of the inbound behind existing listener @p s after its handler
 * swap: Close revokes with the swap, CloseAfter revokes after the grace, Keep never. */
void sv__swap_with_policy(sv_supervisor *sv, staged_listener *s, const sv_spec *spec,
                          bool revoke)
{
    const sv_inbound_spec *in = NULL;
    for (size_t i = 0; i < spec->n_inbounds; i++)
        if (strcmp(spec->inbounds[i].tag, s->l.tag) == 0)
            in = &spec->inbounds[i];
    sv_policy pol = sv_removal_policy_of(spec, in);
    uint32_t id = s->l.id;
    sv__listener_swap(sv, s, revoke && pol.kind == SV_POLICY_CLOSE);
    if (revoke && pol.kind == SV_POLICY_CLOSE_AFTER &&
        grace_start(sv, pol.grace_ms, id, NULL, NULL) != 0) {
        SV_LOG(SV_LOG_ERROR, "sv.actor", "inbound %s: out of memory for the user removal grace; "
               "closing removed users' sessions now", s->l.tag);
        sv__listener_revoke(sv, id);
    }
}

/* After the publish (every worker adopted the plane): each DRAIN step's policy on its version,
 * found among the targets @p p's commit replaced. */
void sv__act_on_drains(sv_supervisor *sv, const sv_plan *plan, const prepared *p)
{
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *st = &plan->steps[i];
        if (st->kind != SV_STEP_DRAIN || st->policy.kind == SV_POLICY_KEEP)
            continue;
        char id[SV_TAG_MAX + 16];
        snprintf(id, sizeof id, "%s@v%" PRIu64, st->tag, st->version);
        sv_target *t = NULL;
        for (size_t j = 0; j < p->n_was; j++)
            if (strcmp(p->was[j]->id, id) == 0)
                t = p->was[j];
        if (st->policy.kind == SV_POLICY_CLOSE_AFTER &&
            grace_start(sv, st->policy.grace_ms, 0, id, t) == 0)
            continue;
        close_version(sv, id, t); /* Close, or no room for the timer */
    }
}
