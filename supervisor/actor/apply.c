/*
 * The supervisor actor's commit and the public apply (seed 001): it runs on the control loop,
 * one command at a time. apply = validate → plan → prepare (prepare.c: everything that can
 * fail; nothing running is touched) → commit (cannot fail: publish the plane, start/swap/stop
 * listeners, close sessions, keep state) → drains (drains.c). Prepare allocates everything
 * commit needs: the plane, the copy of the spec, room in the listener table and every worker
 * message (the spare list), so commit only sends. sv_apply returns once every worker
 * has adopted the new plane, so sv_epoch() is a fact. Also the apply report, the speed limits
 * and sv_check.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor/actor.h"
#include "supervisor/util/log.h"

static void commit_steps(sv_supervisor *sv, const sv_plan *plan)
{
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *st = &plan->steps[i];
        if (st->kind == SV_STEP_STOP_ACCEPTING) {
            for (size_t j = 0; j < sv->n_listeners; j++)
                if (strcmp(sv->listeners[j].bind, st->bind) == 0) {
                    sv__listener_remove_at(sv, j);
                    break;
                }
        } else if (st->kind == SV_STEP_CLOSE_SESSIONS) {
            sv_tracker_close_sessions(sv->shared.tracker, st->tag, false, 0, 0);
        }
    }
}

/* The targets and versions prepared become the running ones (the plane holds its own references
 * on the targets it routes to). */
static void commit_targets(sv_supervisor *sv, prepared *p)
{
    p->was = sv->targets; /* their references go with p, after the drains */
    p->n_was = sv->has_running ? sv->running.n_outbounds : 0;
    free(sv->versions);
    sv->targets = p->targets;
    sv->versions = p->versions;
    p->targets = NULL;
    p->versions = NULL;
    free(sv->tag_versions);
    sv->tag_versions = p->tag_versions;
    sv->n_tag_versions = p->n_tag_versions;
    p->tag_versions = NULL;
    p->n_tag_versions = 0;
}


/*
 * Commit in seed 001's order ("commit"; seed 000 "publish the plane"): speed limits → targets →
 * plane (epoch + 1, when the plan publishes) → start listeners → swap handlers (each with its
 * revoke) → stop accepting / close sessions; the drains follow in sv__apply() once every
 * worker has adopted the plane. katana has no user keys to adopt first (users are the
 * frontend's ids), and a revoke travels with its listener's handler swap (supervisor/README.md,
 * "Where katana differs from the seeds"). So no listener started here ever serves a connection
 * on the previous plane.
 * Cannot fail: prepare allocated the plane, the spec copy, the listener room and the messages.
 */
static void commit(sv_supervisor *sv, const sv_plan *plan, prepared *p)
{
    const sv_spec *spec = &p->spec; /* the spec that becomes the running one */
    sv__publish_speed_limits(sv, spec);
    commit_targets(sv, p);
    if (p->plane != NULL) {
        sv->epoch++;
        sv__publish_plane(sv, p->plane);
        p->plane = NULL;
    }
    for (size_t i = 0; i < p->n_ls; i++)
        if (p->ls[i].is_new)
            sv__listener_add(sv, &p->ls[i]);
    for (size_t i = 0; i < p->n_ls; i++)
        if (!p->ls[i].is_new)
            sv__swap_with_policy(sv, &p->ls[i], spec, p->ls[i].revoke);
    commit_steps(sv, plan);
    sv_routes_ref_unref(sv->routes);
    sv->routes = p->routes;
    p->routes = NULL;
    sv_spec_free(&sv->running);
    sv->running = p->spec;
    p->has_spec = false;
    sv->has_running = true;
    sv__own_addrs_refresh(sv); /* an inbound may listen on a new address */
}

/* ---- report ------------------------------------------------------------------------------------- */

static void report_add(char ***list, size_t *n, const char *text)
{
    char **grown = realloc(*list, (*n + 1) * sizeof *grown);
    if (grown == NULL)
        return;
    *list = grown;
    grown[*n] = strdup(text);
    if (grown[*n] != NULL)
        (*n)++;
}

/* The debug line each commit ends with (seed 001 "log lines"): "applied: {} built, {} reused,
 * {} swapped, {} drained", the lengths of those groups of the report. */
static void log_applied(const sv_plan *plan)
{
    size_t n[SV_STEP_DISRUPT + 1] = {0};
    for (size_t i = 0; i < plan->n_steps; i++)
        if (plan->steps[i].kind <= SV_STEP_DISRUPT)
            n[plan->steps[i].kind]++;
    SV_LOG(SV_LOG_DEBUG, "sv.actor", "applied: %zu built, %zu reused, %zu swapped, %zu drained",
           n[SV_STEP_BUILD], n[SV_STEP_REUSE], n[SV_STEP_SWAP_HANDLER], n[SV_STEP_DRAIN]);
}

/* Does @p plan build inbound @p tag (a new tag, as opposed to a rebind of a running one)? */
static bool builds_inbound(const sv_plan *plan, const char *tag)
{
    return sv__find_step(plan, SV_RES_INBOUND, SV_STEP_BUILD, tag) != NULL;
}

/* The report from the plan's steps (seed 001 ApplyReport): reused, built, swapped, drained,
 * rebound (a BIND of an inbound whose tag ran on another bind; a new tag's BIND is only its
 * BUILD), restarted (DISRUPT), removed (CLOSE_SESSIONS). */
static void fill_report(const sv_plan *plan, sv_apply_report *r)
{
    static const char *const kinds[] = {"", "inbound", "outbound", "route", "user set"};
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *s = &plan->steps[i];
        char text[160];
        if (s->resource == SV_RES_OUTBOUND)
            snprintf(text, sizeof text, "outbound %s@v%" PRIu64, s->tag, s->version);
        else
            snprintf(text, sizeof text, "%s %s", kinds[s->resource <= 4 ? s->resource : 0], s->tag);
        switch (s->kind) {
        case SV_STEP_REUSE: report_add(&r->reused, &r->n_reused, text); break;
        case SV_STEP_BUILD: report_add(&r->built, &r->n_built, text); break;
        case SV_STEP_SWAP_HANDLER: report_add(&r->swapped, &r->n_swapped, text); break;
        case SV_STEP_DRAIN: report_add(&r->drained, &r->n_drained, text); break;
        case SV_STEP_CLOSE_SESSIONS: report_add(&r->removed, &r->n_removed, text); break;
        case SV_STEP_DISRUPT: report_add(&r->restarted, &r->n_restarted, text); break;
        case SV_STEP_BIND:
            if (!builds_inbound(plan, s->tag))
                report_add(&r->rebound, &r->n_rebound, text);
            break;
        default: break;
        }
    }
}

/* Speed limits (seed 003 publish_speed_limits; seed 001: at the start of every commit
 * and of every user edit's commit): every user of every set of @p spec, the spec being
 * committed, with a speed limit; a user in several sets gets the smallest. A refused apply or
 * user edit never gets here, so it cannot change the limits in force. */
void sv__publish_speed_limits(sv_supervisor *sv, const sv_spec *spec)
{
    size_t n = 0, at = 0;
    for (size_t i = 0; i < spec->n_user_sets; i++)
        n += spec->user_sets[i].n_users;
    sv_pace_limit *v = calloc(n ? n : 1, sizeof *v);
    if (v == NULL) {
        SV_LOG(SV_LOG_ERROR, "sv.actor", "speed limits: out of memory; the previous ones stay");
        return;
    }
    for (size_t i = 0; i < spec->n_user_sets; i++)
        for (size_t j = 0; j < spec->user_sets[i].n_users; j++) {
            const sv_user *u = &spec->user_sets[i].users[j];
            if (u->speed_limit != 0)
                v[at++] = (sv_pace_limit){u->id, u->speed_limit};
        }
    if (sv_pacers_publish(sv->shared.pacers, v, at, uv_hrtime()) != 0)
        SV_LOG(SV_LOG_ERROR, "sv.actor", "speed limits: out of memory for some users; they "
               "are paced from their next connection");
    free(v);
}

/* sv_apply(), and with @p adopt, sv_apply_take(): @p spec becomes the running spec. */
int sv__apply(sv_supervisor *sv, const sv_spec *spec, bool adopt, const sv_apply_options *opts,
              sv_apply_report *report, sv_error *err)
{
    if (sv->shut)
        return sv_error_set(err, -ESHUTDOWN, "the supervisor has shut down");
    sv_running run;
    sv__running_view(sv, &run);
    sv_plan plan = {0};
    int rc = sv_plan_make(&run, spec, &plan, err);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < plan.n_steps; i++)
        if (plan.steps[i].kind == SV_STEP_DISRUPT && (opts == NULL || !opts->allow_disruptive)) {
            rc = sv_error_set(err, -EPERM, "inbound %s: %s; this ends its live connections and needs allow_disruptive",
                              plan.steps[i].tag, plan.steps[i].reason);
            goto out;
        }
    prepared p;
    rc = sv__prepare(sv, &plan, spec, adopt, &p, err);
    if (rc != 0)
        goto out;
    bool published = p.plane != NULL;
    commit(sv, &plan, &p);
    /* sv_epoch() is the plane every worker serves new flows with; a drain waits for it,
     * so no worker opens a new flow on the drained version after it */
    if (published && !sv__epoch_wait(&sv->shared, sv->epoch, SV_ADOPT_WAIT_MS))
        SV_LOG(SV_LOG_WARN, "sv.actor", "epoch %" PRIu64 ": not every worker adopted the plane "
               "within %d ms", sv->epoch, SV_ADOPT_WAIT_MS);
    sv__act_on_drains(sv, &plan, &p);
    sv__prepared_free(sv, &p, spec->n_outbounds); /* the replaced targets, after their drains */
    log_applied(&plan);
    if (report != NULL)
        fill_report(&plan, report);
out:
    sv_plan_free(&plan);
    return rc;
}

int sv_apply(sv_supervisor *sv, const sv_spec *spec, const sv_apply_options *opts,
             sv_apply_report *report, sv_error *err)
{
    return sv__apply(sv, spec, false, opts, report, err);
}

int sv_apply_take(sv_supervisor *sv, sv_spec *spec, const sv_apply_options *opts,
                  sv_apply_report *report, sv_error *err)
{
    int rc = sv__apply(sv, spec, true, opts, report, err);
    if (rc == 0)
        memset(spec, 0, sizeof *spec); /* the running spec now */
    return rc;
}

int sv_check(const sv_spec *spec, sv_error *err)
{
    sv_running run = {0};
    sv_plan plan = {0};
    int rc = sv_plan_make(&run, spec, &plan, err);
    if (rc != 0)
        return rc;
    prepared p;
    rc = sv__prepare(NULL, &plan, spec, false, &p, err);
    if (rc == 0)
        sv__prepared_free(NULL, &p, spec->n_outbounds);
    sv_plan_free(&plan);
    return rc;
}
