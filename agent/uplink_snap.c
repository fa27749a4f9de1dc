/*
 * The uplink's published snapshot (agent/uplink.h): what the REST API shows of the remote nodes
 * (pull and push outcomes, outbox contents, panel request counters, audit hits, usage not yet
 * reported), copied by the control loop after every flush, push and pull and swapped in under
 * the uplink's snap_lock. The readers (ag_uplink_status_merge, _usage, _requests, _audit) run
 * on any thread and read only that copy, never the store.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

/* ---------------------------------------------------------------------------------------- */
/* the snapshot the REST API reads: published by the control loop under a mutex             */
/* ---------------------------------------------------------------------------------------- */

static void snap_clear(snap_state *st)
{
    for (size_t i = 0; i < st->n; i++) {
        free(st->nodes[i].pending);
        uid_index_unref(st->nodes[i].uids);
        free(st->nodes[i].audit);
    }
    free(st->nodes);
    free(st->taken);
    free(st->carry);
    memset(st, 0, sizeof *st);
}

static void *dup_array(const void *p, size_t n, size_t size)
{
    void *c = n > 0 ? malloc(n * size) : NULL;
    if (c != NULL)
        memcpy(c, p, n * size);
    return c;
}

/* One node's part; -1 when the store could not be read (the old snapshot then stays). */
static int snap_node_fill(ag_uplink *u, up_node *nd, snap_node *s)
{
    sv_error err = {0};
    snprintf(s->tag, sizeof s->tag, "%s", nd->tag);
    s->last_pull_ms = nd->last_pull_ms;
    s->last_pull_status = nd->last_pull_status;
    memcpy(s->last_pull_error, nd->last_pull_err, sizeof s->last_pull_error);
    s->last_push_ms = nd->last_push_ms;
    s->last_push_status = nd->last_push_status;
    memcpy(s->last_push_error, nd->last_push_error, sizeof s->last_push_error);
    s->audit_reported = nd->audit_reported;
    s->dropped_users = nd->dropped_users;
    s->dropped_bytes = nd->dropped_bytes;
    s->audit_recorded = nd->audit_recorded;
    if (db_usage_pending(u->db, nd->tag, &s->pending_bytes, &s->oldest_ms, &err) != 0 ||
        db_usage_pending_users(u->db, nd->tag, &s->pending, &s->n_pending, &err) != 0 ||
        db_audit_pending(u->db, nd->tag, &s->audit, &s->n_audit, &err) != 0) {
        SV_LOG(SV_LOG_DEBUG, MOD, "node %s: status not published: %s", nd->tag, err.msg);
        return -1;
    }
    s->uids = nd->retiring ? NULL : uid_index_ref(nd->uids);
    s->n_req = nd->client != NULL ? pn_requests(nd->client, s->req, PN_REQUEST_COUNTS_MAX) : 0;
    return 0;
}

/* Control loop: copy what the API shows and swap it in (after flushes, pushes and pulls). */
void ag__up_publish(ag_uplink *u)
{
    snap_state st = {0}, old;
    if (u->n == 0 || u->db == NULL || (st.nodes = calloc(u->n, sizeof *st.nodes)) == NULL)
        return;
    st.n = u->n;
    for (size_t i = 0; i < u->n; i++)
        if (snap_node_fill(u, u->nodes[i], &st.nodes[i]) != 0) {
            snap_clear(&st);
            return;
        }
    st.taken = dup_array(u->taken, u->n_taken, sizeof *u->taken);
    st.n_taken = st.taken != NULL ? u->n_taken : 0;
    st.carry = dup_array(u->carry, u->n_carry, sizeof *u->carry);
    st.n_carry = st.carry != NULL ? u->n_carry : 0;
    pthread_mutex_lock(&u->snap_lock);
    old = u->snap;
    u->snap = st;
    pthread_mutex_unlock(&u->snap_lock);
    snap_clear(&old);
}

void ag__up_unpublish(ag_uplink *u)
{
    pthread_mutex_lock(&u->snap_lock);
    snap_state old = u->snap;
    memset(&u->snap, 0, sizeof u->snap);
    pthread_mutex_unlock(&u->snap_lock);
    snap_clear(&old);
}

/* ---------------------------------------------------------------------------------------- */
/* REST API readers (any thread): they only read the published snapshot                     */
/* ---------------------------------------------------------------------------------------- */

void ag_uplink_status_merge(ag_uplink *u, api_node_status *v, long n)
{
    if (u == NULL)
        return;
    const snap_state *snap = &u->snap;
    pthread_mutex_lock(&u->snap_lock);
    for (long i = 0; i < n; i++)
        for (size_t j = 0; j < snap->n; j++) {
            const snap_node *s = &snap->nodes[j];
            if (strcmp(s->tag, v[i].tag) != 0)
                continue;
            /* a remote node's pulls run here: each one's time, and its error when it failed;
             * a good pull keeps the outcome of the last load (a refused answer stays refused
             * while the panel gives the same) */
            if (s->last_pull_ms > v[i].last_pull_ms)
                v[i].last_pull_ms = s->last_pull_ms;
            if (s->last_pull_status != 0 && s->last_pull_ms >= v[i].last_pull_ms) {
                v[i].last_pull_status = s->last_pull_status;
                snprintf(v[i].last_pull_error, sizeof v[i].last_pull_error, "%s",
                         s->last_pull_error);
            }
            v[i].last_push_ms = s->last_push_ms;
            v[i].last_push_status = s->last_push_status;
            snprintf(v[i].last_push_error, sizeof v[i].last_push_error, "%s",
                     s->last_push_error);
            v[i].outbox_pending_bytes = s->pending_bytes;
            v[i].outbox_oldest_ms = s->oldest_ms > 0 ? (uint64_t)s->oldest_ms : 0;
            v[i].audit_pending = s->n_audit;
            v[i].audit_recorded = s->audit_recorded;
            v[i].audit_reported = s->audit_reported;
            v[i].usage_dropped_users = s->dropped_users;
            v[i].usage_dropped_bytes = s->dropped_bytes;
        }
    pthread_mutex_unlock(&u->snap_lock);
}

/* The node billing @p uid: the first whose user list holds it, else the first (as owner(),
 * uplink_outbox.c). */
static size_t snap_owner(const snap_state *snap, uint64_t uid)
{
    for (size_t i = 0; i < snap->n; i++)
        if (uid_index_has(snap->nodes[i].uids, uid))
            return i;
    return 0;
}

static int cmp_row(const void *a, const void *b)
{
    const api_usage_row *x = a, *y = b;
    int c = strcmp(x->node, y->node);
    return c != 0 ? c : x->user < y->user ? -1 : x->user > y->user;
}

/* Sort by (node, user) and add up rows of the same pair; @return the new count. */
static long rows_merge(api_usage_row *r, long n)
{
    long k = 0;
    qsort(r, (size_t)n, sizeof *r, cmp_row);
    for (long i = 0; i < n; i++) {
        if (k > 0 && cmp_row(&r[k - 1], &r[i]) == 0) {
            r[k - 1].up += r[i].up;
            r[k - 1].down += r[i].down;
            r[k - 1].unreported_up += r[i].unreported_up;
            r[k - 1].unreported_down += r[i].unreported_down;
        } else {
            r[k++] = r[i];
        }
    }
    return k;
}

/* One row per user the supervisor counted: totals, and what the uplink has not taken yet plus
 * what it took but could not write (the carry), under the user's billing node. */
static long rows_from_totals(const snap_state *snap, const sv_usage *tot, long nt,
                             api_usage_row *rows)
{
    for (long i = 0; i < nt; i++) {
        api_usage_row *r = &rows[i];
        snprintf(r->node, sizeof r->node, "%s", snap->nodes[snap_owner(snap, tot[i].user)].tag);
        r->user = tot[i].user;
        r->up = tot[i].up;
        r->down = tot[i].down;
        const sv_usage *t = bsearch(&tot[i], snap->taken, snap->n_taken, sizeof *t,
                                    cmp_usage_user);
        r->unreported_up = t == NULL ? tot[i].up : tot[i].up > t->up ? tot[i].up - t->up : 0;
        r->unreported_down = t == NULL ? tot[i].down
                             : tot[i].down > t->down ? tot[i].down - t->down : 0;
        for (size_t c = 0; c < snap->n_carry; c++)
            if (snap->carry[c].user == tot[i].user) {
                r->unreported_up += snap->carry[c].up;
                r->unreported_down += snap->carry[c].down;
            }
    }
    return nt;
}

long ag_uplink_usage(ag_uplink *u, api_usage_row **out)
{
    if (u == NULL) {
        *out = NULL;
        return 0;
    }
    const snap_state *snap = &u->snap;
    sv_usage *tot = NULL;
    api_usage_row *rows = NULL;
    long k = 0;
    *out = NULL;
    pthread_mutex_lock(&u->snap_lock); /* held across the totals: no publish in between */
    if (snap->n == 0)
        goto out;
    long nt = sv_usage_snapshot(u->sv, &tot);
    size_t cap = nt > 0 ? (size_t)nt : 0;
    for (size_t j = 0; j < snap->n; j++)
        cap += snap->nodes[j].n_pending;
    if (nt < 0 || (rows = calloc(cap > 0 ? cap : 1, sizeof *rows)) == NULL) {
        k = nt < 0 ? nt : -ENOMEM;
        goto out;
    }
    k = rows_from_totals(snap, tot, nt, rows);
    for (size_t j = 0; j < snap->n; j++)
        for (size_t p = 0; p < snap->nodes[j].n_pending; p++, k++) {
            snprintf(rows[k].node, sizeof rows[k].node, "%s", snap->nodes[j].tag);
            rows[k].user = snap->nodes[j].pending[p].user;
            rows[k].unreported_up = snap->nodes[j].pending[p].up;
            rows[k].unreported_down = snap->nodes[j].pending[p].down;
        }
    k = rows_merge(rows, k);
out:
    pthread_mutex_unlock(&u->snap_lock);
    free(tot);
    if (k > 0)
        *out = rows;
    else
        free(rows);
    return k;
}

long ag_uplink_requests(ag_uplink *u, api_panel_requests **out)
{
    if (u == NULL) {
        *out = NULL;
        return 0;
    }
    const snap_state *snap = &u->snap;
    long k = 0;
    *out = NULL;
    pthread_mutex_lock(&u->snap_lock);
    size_t n = 0;
    for (size_t j = 0; j < snap->n; j++)
        n += snap->nodes[j].n_req;
    api_panel_requests *v = n > 0 ? calloc(n, sizeof *v) : NULL;
    if (n > 0 && v == NULL)
        k = -ENOMEM;
    for (size_t j = 0; v != NULL && j < snap->n; j++)
        for (size_t i = 0; i < snap->nodes[j].n_req; i++, k++) {
            const pn_request_count *c = &snap->nodes[j].req[i];
            snprintf(v[k].node, sizeof v[k].node, "%s", snap->nodes[j].tag);
            snprintf(v[k].endpoint, sizeof v[k].endpoint, "%s", c->endpoint);
            v[k].status = c->status;
            v[k].count = c->n;
        }
    pthread_mutex_unlock(&u->snap_lock);
    *out = v;
    return k;
}

long ag_uplink_audit(ag_uplink *u, api_audit_row **out)
{
    *out = NULL;
    if (u == NULL)
        return 0;
    const snap_state *snap = &u->snap;
    long k = 0;
    pthread_mutex_lock(&u->snap_lock);
    size_t cap = 0;
    for (size_t j = 0; j < snap->n; j++)
        cap += snap->nodes[j].n_audit;
    api_audit_row *rows = cap > 0 ? calloc(cap, sizeof *rows) : NULL;
    if (cap > 0 && rows == NULL)
        k = -ENOMEM;
    for (size_t j = 0; rows != NULL && j < snap->n; j++)
        for (size_t i = 0; i < snap->nodes[j].n_audit; i++, k++) {
            const db_audit_row *a = &snap->nodes[j].audit[i];
            snprintf(rows[k].node, sizeof rows[k].node, "%s", snap->nodes[j].tag);
            rows[k].user = a->user;
            rows[k].rule = a->rule;
            rows[k].first_ms = a->first_ms > 0 ? (uint64_t)a->first_ms : 0;
            rows[k].reporting = a->claimed;
        }
    pthread_mutex_unlock(&u->snap_lock);
    *out = rows;
    return k;
}
