/*
 * The outbox side of the uplink's accounting guarantee (agent/uplink.h): usage and audit hits
 * taken from the supervisor and written to the store in one transaction per node, each user's
 * bytes under the node that bills them; what a store error left in memory (the carry) goes with
 * the next flush. The flush timer, the heap trim after large answers, and the audit outbox
 * reported as the panel's detect log (PANEL.md §2). Usage batches leave the outbox through the
 * push (uplink_cycle.c). Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

/* ---------------------------------------------------------------------------------------- */
/* usage: supervisor -> outbox                                                                */
/* ---------------------------------------------------------------------------------------- */

/* Add what one take returned to the per-uid running total of everything taken. */
static void taken_add(ag_uplink *u, const sv_usage *items, size_t n)
{
    sv_usage *p = realloc(u->taken, (u->n_taken + n) * sizeof *p);
    if (p == NULL)
        return; /* the API then shows more as not yet taken; accounting is unaffected */
    u->taken = p;
    size_t old = u->n_taken;
    for (size_t i = 0; i < n; i++) {
        sv_usage *hit = bsearch(&items[i], p, old, sizeof *p, cmp_usage_user);
        if (hit != NULL) {
            hit->up += items[i].up;
            hit->down += items[i].down;
        } else {
            p[u->n_taken++] = items[i];
        }
    }
    qsort(p, u->n_taken, sizeof *p, cmp_usage_user);
}

/* After the held list was replaced by a whole one (never a shed one). */
void ag__up_index_users(up_node *nd)
{
    uid_index_unref(nd->uids);
    nd->uids = NULL;
    size_t n = nd->users.n;
    if (n == 0 || nd->users.users == NULL ||
        (nd->uids = malloc(sizeof *nd->uids + n * sizeof *nd->uids->ids)) == NULL)
        return;
    nd->uids->refs = 1;
    nd->uids->n = n;
    for (size_t i = 0; i < n; i++)
        nd->uids->ids[i] = nd->users.users[i].id;
    qsort(nd->uids->ids, n, sizeof *nd->uids->ids, cmp_u64);
}

/* The node billing @p uid: the first node not retiring whose user list holds it, else the first
 * node that is not retiring, else the first. */
static size_t owner(const ag_uplink *u, uint64_t uid)
{
    size_t live = u->n;
    for (size_t i = 0; i < u->n; i++) {
        if (!u->nodes[i]->retiring && uid_index_has(u->nodes[i]->uids, uid))
            return i;
        if (live == u->n && !u->nodes[i]->retiring)
            live = i;
    }
    return live < u->n ? live : 0;
}

/* Merge @p n entries into the carry list (kept on a store error). */
static void carry_add(ag_uplink *u, const sv_usage *items, size_t n)
{
    sv_usage *p = realloc(u->carry, (u->n_carry + n) * sizeof *p);
    if (p == NULL) {
        SV_LOG(SV_LOG_ERROR, MOD, "out of memory: usage of %zu users lost", n);
        return;
    }
    memcpy(p + u->n_carry, items, n * sizeof *p);
    u->carry = p;
    u->n_carry += n;
}

/* Log a failure of the store's @p what once per failure streak (a full disk logged
 * one error per flush): the repeats at debug, the first success after them at info. */
void ag__up_store_result(const up_node *nd, bool *failing, int rc, const char *what,
                         const char *msg)
{
    if (rc != 0)
        SV_LOG(*failing ? SV_LOG_DEBUG : SV_LOG_ERROR, MOD, "node %s: %s failed: %s", nd->tag,
               what, msg);
    else if (*failing)
        SV_LOG(SV_LOG_INFO, MOD, "node %s: %s works again", nd->tag, what);
    *failing = rc != 0;
}

/* Write one node's share of @p all in one transaction. */
static int write_node(ag_uplink *u, size_t idx, const sv_usage *all, size_t n, int64_t t)
{
    sv_usage *items = malloc((n > 0 ? n : 1) * sizeof *items);
    if (items == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (owner(u, all[i].user) == idx)
            items[k++] = all[i];
    sv_error err = {0};
    up_node *nd = u->nodes[idx];
    int rc = db_usage_add(u->db, nd->tag, items, k, t, &err);
    ag__up_store_result(nd, &nd->write_failing, rc, "outbox write (the usage stays in memory)",
                        err.msg);
    free(items);
    return rc;
}

/* Audit hits: taken from the supervisor with the usage and written to the outbox of
 * the node whose inbound they came in on (one row per (user, rule) and period). A node outside
 * this uplink (a local panel) keeps no hits: they are counted in /metrics only. */
static void audit_flush(ag_uplink *u)
{
    sv_audit_hit *hits = NULL, *mine = NULL;
    long n = sv_take_audit(u->sv, &hits);
    if (n <= 0)
        return;
    mine = malloc((size_t)n * sizeof *mine);
    for (size_t i = 0; mine != NULL && i < u->n; i++) {
        size_t k = 0;
        for (long j = 0; j < n; j++)
            if (strcmp(hits[j].inbound, u->nodes[i]->tag) == 0)
                mine[k++] = hits[j];
        sv_error err = {0};
        int added = k > 0 ? db_audit_add(u->db, u->nodes[i]->tag, mine, k, &err) : 0;
        up_node *nd = u->nodes[i];
        if (added > 0)
            nd->audit_recorded += (uint64_t)added;
        if (k > 0)
            ag__up_store_result(nd, &nd->audit_failing, added < 0 ? added : 0,
                                "audit outbox write (its hits are lost)", err.msg);
    }
    if (mine == NULL)
        SV_LOG(SV_LOG_ERROR, MOD, "out of memory: %ld audit hits lost", n);
    free(mine);
    free(hits);
}

int ag_uplink_flush(ag_uplink *u)
{
    if (u == NULL || u->n == 0)
        return 0;
    audit_flush(u);
    sv_usage *taken = NULL;
    long got = sv_take_usage(u->sv, &taken);
    if (got < 0) {
        SV_LOG(SV_LOG_ERROR, MOD, "usage take failed: %s", strerror((int)-got));
        return (int)got;
    }
    if (got > 0) {
        carry_add(u, taken, (size_t)got);
        taken_add(u, taken, (size_t)got);
    }
    free(taken);
    if (u->n_carry == 0)
        return 0;
    int rc = 0;
    size_t i;
    int64_t t = now_ms();
    for (i = 0; i < u->n && rc == 0; i++)
        rc = write_node(u, i, u->carry, u->n_carry, t);
    if (rc == 0) {
        free(u->carry);
        u->carry = NULL;
        u->n_carry = 0;
        return 0;
    }
    /* node i-1 failed: keep only what belongs to it and to the nodes after it */
    size_t k = 0;
    for (size_t j = 0; j < u->n_carry; j++)
        if (owner(u, u->carry[j].user) >= i - 1)
            u->carry[k++] = u->carry[j];
    u->n_carry = k;
    return rc;
}

static void on_trim_timer(uv_timer_t *t)
{
    (void)t;
    malloc_trim(0);
}

/* Give freed heap pages back to the system (a users answer or body of megabytes),
 * on the next loop turn: after the callback that freed them has returned, and so has the HTTP
 * request whose receive buffer held the answer. */
void ag__up_trim_soon(ag_uplink *u)
{
    if (!u->freeing && !uv_is_active((uv_handle_t *)&u->trim_timer))
        uv_timer_start(&u->trim_timer, on_trim_timer, 0, 0);
}

void ag__up_on_flush_timer(uv_timer_t *t)
{
    ag_uplink_flush(t->data);
    ag__up_publish(t->data);
}

/* ---------------------------------------------------------------------------------------- */
/* audit hits -> the panel's detect log (PANEL.md §2), once per push interval                 */
/* ---------------------------------------------------------------------------------------- */

static void on_audit_reported(pn_client *c, int rc, const sv_error *perr, void *arg)
{
    (void)c;
    up_node *nd = arg;
    sv_error err = {0};
    nd->audit_reporting = false;
    if (rc != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: detect log report failed, kept for the next one: %s",
               nd->tag, perr->msg);
        return;
    }
    nd->audit_reported += nd->audit_batch_n;
    if (db_audit_done(nd->u->db, nd->audit_batch, &err) != 0)
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: reported audit hits not deleted (they will be sent "
               "again): %s", nd->tag, err.msg);
    ag__up_publish(nd->u);
}

/* End the node's audit period: claim its pending hits and report them as the detect log; a
 * panel that takes none (UniProxy: no audit endpoint) ends the period at once. */
void ag__up_audit_report(up_node *nd)
{
    if (nd->audit_reporting)
        return;
    db_audit_batch b;
    sv_error err = {0};
    int claimed = db_audit_claim(nd->u->db, nd->tag, &b, &err);
    ag__up_store_result(nd, &nd->audit_claim_failing, claimed, "audit outbox read", err.msg);
    if (claimed != 0)
        return;
    if (b.n == 0)
        return;
    int rc = -ENOTSUP;
    pn_detect_hit *v = nd->client->ops->report_detect != NULL ? calloc(b.n, sizeof *v) : NULL;
    for (size_t i = 0; v != NULL && i < b.n; i++)
        v[i] = (pn_detect_hit){.user = b.rows[i].user, .rule = b.rows[i].rule};
    if (v != NULL) {
        nd->audit_batch = b.id;
        nd->audit_batch_n = b.n;
        nd->audit_reporting = true;
        rc = nd->client->ops->report_detect(nd->client, v, b.n, on_audit_reported, nd);
        if (rc != 0)
            nd->audit_reporting = false;
    }
    free(v);
    if (nd->client->ops->report_detect == NULL && db_audit_done(nd->u->db, b.id, &err) != 0)
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: audit period not ended: %s", nd->tag, err.msg);
    else if (rc != 0 && nd->client->ops->report_detect != NULL)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: detect log report could not start: %s", nd->tag,
               strerror(-rc));
    db_audit_batch_free(&b);
}
