/*
 * The panel uplink (agent/uplink.h): pulls, last good state, usage outbox, pushes.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/statvfs.h>

#include "agent/lower.h"
#include "agent/uplink.h"
#include "panel/xboard.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"
/* every body a panel may send can be stored as the last good state (issue 13: 1 000 000 users) */
_Static_assert(DB_BODY_MAX >= PN_BODY_MAX, "the store refuses bodies the panel clients take");

#define INTERVAL_DEFAULT 60u   /* s, PANEL.md §1.4 base_config defaults */
#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 300000u

/* ---------------------------------------------------------------------------------------- */
/* the snapshot the REST API reads (issue 4): published by the control loop under a mutex   */
/* ---------------------------------------------------------------------------------------- */

/* A node's user ids, sorted, for usage attribution: built when its list changes, shared by
 * reference with the API's snapshots (issue 13: no copy per user per publish). References are
 * taken and dropped on the control loop only. */
typedef struct uid_index {
    unsigned refs;
    size_t n;
    uint64_t ids[];
} uid_index;

static uid_index *uid_index_ref(uid_index *x)
{
    if (x != NULL)
        x->refs++;
    return x;
}

static void uid_index_unref(uid_index *x)
{
    if (x != NULL && --x->refs == 0)
        free(x);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool uid_index_has(const uid_index *x, uint64_t uid)
{
    return x != NULL && bsearch(&uid, x->ids, x->n, sizeof uid, cmp_u64) != NULL;
}

typedef struct snap_node {
    char tag[SV_TAG_MAX + 1];
    uint64_t last_pull_ms;
    int last_pull_status;
    char last_pull_error[160];
    uint64_t last_push_ms;
    int last_push_status;
    char last_push_error[160];
    uint64_t pending_bytes; /* outbox rows not yet acknowledged */
    int64_t oldest_ms;
    sv_usage *pending;      /* the same per uid, sorted */
    size_t n_pending;
    uid_index *uids;        /* the node's user ids (a reference), NULL while it retires */
    pn_request_count req[PN_REQUEST_COUNTS_MAX];
    size_t n_req;
    db_audit_row *audit;    /* audit hits of the current period (issue 12) */
    size_t n_audit;
    uint64_t audit_reported, audit_recorded;
    uint64_t dropped_users, dropped_bytes;
} snap_node;

typedef struct snap_state {
    snap_node *nodes;
    size_t n;
    sv_usage *taken, *carry; /* copies of the uplink's */
    size_t n_taken, n_carry;
} snap_state;


typedef struct up_machine up_machine;

typedef struct up_node {
    ag_uplink *u;
    char *tag;
    up_machine *machine; /* the Xboard machine this node came from (issue 14), or NULL */
    uint64_t machine_node; /* its id in the machine's list */
    char machine_type[PN_XB_TYPE_MAX + 1]; /* its type in that list */
    bool retiring;       /* the machine no longer lists it: not offered, not billed, pushing
                            what it still holds until its outbox is empty or moved */
    int handles;         /* timers still closing */
    pn_client *client;
    pn_node node;     /* the panel's latest node settings (what the node manager is offered) */
    pn_users users;   /* the panel's latest user list (its uuids shed once it runs: held_refill) */
    bool has_node, has_users;
    bool unstored[2]; /* per pn_body_kind: a body was pulled that the store does not hold yet */
    char *pushed[2];  /* per pn_body_kind: the body of a state pushed over the channel since the
                         last pull of that kind (stored as last good once it applied), or NULL */
    bool from_store;  /* node/users were loaded from the store and have not run in this process */
    uid_index *uids; /* its users' ids (usage attribution), NULL when it has none */
    uv_timer_t pull_timer, push_timer;
    unsigned pull_fails, push_fails;
    int pulls_pending;
    bool pull_changed, pull_failed;
    char pull_error[160]; /* the last pull error logged as a warning ("" after a good pull) */
    int pull_rc;           /* the first error of the pull in flight, or 0 */
    char pull_msg[160];    /* its text */
    uint64_t last_pull_ms; /* end of the last pull (REST API), 0 = never */
    int last_pull_status;  /* its first error, or 0 */
    char last_pull_err[160];
    bool pushing;
    int64_t batch; /* the batch in flight */
    int64_t held;  /* a batch the panel failed that waits for its settlement (issue 24), or 0 */
    uint64_t pulls_started;  /* pulls begun since start */
    uint64_t users_answered; /* the pull whose users answer last succeeded (1-based), or 0 */
    uint64_t held_after;     /* the settlement needs a users answer of a pull numbered this */
    uint64_t dropped_users, dropped_bytes; /* usage of users the panel no longer has */
    bool write_failing, audit_failing, claim_failing, audit_claim_failing; /* store_result's
                                                                              failure streaks */
    uint64_t last_push_ms; /* end of the last push (REST API), 0 = never */
    int last_push_status;
    char last_push_error[160];
    sv_device_count *remote; /* this node's alivelist answer, others' IPs per user (sorted) */
    size_t n_remote;
    bool audit_reporting;    /* a detect log report is in flight (issue 12) */
    int64_t audit_batch;     /* its batch */
    size_t audit_batch_n;    /* hits in it */
    uint64_t audit_reported; /* hits the panel took since start */
    uint64_t audit_recorded; /* hits written to the outbox since start */
} up_node;

/* An Xboard machine (issue 14, PANEL.md §1.1): its node list, pulled on the machine's
 * pull_interval, names the nodes this uplink runs for it. */
struct up_machine {
    ag_uplink *u;
    ag_node_config nc;     /* the config entry (copy): every node's settings but its id */
    pn_xb_machine_client *client;
    pn_xb_machine list;    /* the last good list */
    bool has_list;
    uv_timer_t timer;
    unsigned fails;
    char error[160];       /* the last list error logged as a warning */
    char skipped[160];     /* the last "type not served" warning */
    bool fetching;         /* a machine/nodes request is in flight */
};

struct ag_uplink {
    uv_loop_t *loop;
    sv_supervisor *sv;
    db_store *db;
    up_node **nodes; /* live and retiring nodes */
    size_t n, cap;
    up_machine **machines;
    size_t n_machines;
    bool freeing;
    uv_timer_t flush_timer;
    uv_timer_t trim_timer; /* trim_soon() */
    unsigned flush_s;
    sv_usage *carry; /* taken but not yet written (store error) */
    size_t n_carry;
    sv_usage *taken; /* everything taken from the supervisor since start, per uid, sorted */
    size_t n_taken;
    ag_uplink_change_cb on_change;
    void *arg;
    int closing;
    uint64_t cpu_busy, cpu_total; /* /proc/stat at the previous status report */
    pthread_mutex_t snap_lock; /* the REST API's snapshot (issue 4), per uplink (issue 14) */
    snap_state snap;           /* under snap_lock */
    bool hints_restored;       /* the stored client IP hints went to the supervisor (issue 13) */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Exponential backoff with jitter in [75%, 125%], capped by cap_ms. */
static uint64_t backoff_ms(unsigned fails, uint64_t cap_ms)
{
    unsigned shift = fails > 0 ? fails - 1 : 0;
    uint64_t d = shift >= 20 ? BACKOFF_MAX_MS : (uint64_t)BACKOFF_FIRST_MS << shift;
    if (d > cap_ms)
        d = cap_ms;
    if (d > BACKOFF_MAX_MS)
        d = BACKOFF_MAX_MS;
    return d * 3 / 4 + (uint64_t)rand() % (d / 2 + 1);
}

static uint64_t pull_ms(const up_node *nd)
{
    return 1000u * (nd->has_node && nd->node.pull_interval > 0 ? nd->node.pull_interval
                                                               : INTERVAL_DEFAULT);
}

static uint64_t push_ms(const up_node *nd)
{
    if (nd->retiring)
        return 1000u; /* what it still holds goes out soon */
    return 1000u * (nd->has_node && nd->node.push_interval > 0 ? nd->node.push_interval
                                                               : INTERVAL_DEFAULT);
}

static int cmp_machine_id(const void *a, const void *b)
{
    uint64_t x = ((const pn_xb_machine_node *)a)->id, y = ((const pn_xb_machine_node *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_usage_user(const void *a, const void *b)
{
    uint64_t x = ((const sv_usage *)a)->user, y = ((const sv_usage *)b)->user;
    return x < y ? -1 : x > y;
}

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

static void push_result(up_node *nd, int rc, const char *msg)
{
    nd->last_push_ms = (uint64_t)now_ms();
    nd->last_push_status = rc;
    snprintf(nd->last_push_error, sizeof nd->last_push_error, "%.159s", rc != 0 ? msg : "");
}

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
static void publish(ag_uplink *u)
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

static void unpublish(ag_uplink *u)
{
    pthread_mutex_lock(&u->snap_lock);
    snap_state old = u->snap;
    memset(&u->snap, 0, sizeof u->snap);
    pthread_mutex_unlock(&u->snap_lock);
    snap_clear(&old);
}

/* ---------------------------------------------------------------------------------------- */
/* usage: supervisor -> outbox                                                                */
/* ---------------------------------------------------------------------------------------- */

/* After the held list was replaced by a whole one (never a shed one). */
static void index_users(up_node *nd)
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

/* Log a failure of the store's @p what once per failure streak (issue 33: a full disk logged
 * one error per flush): the repeats at debug, the first success after them at info. */
static void store_result(const up_node *nd, bool *failing, int rc, const char *what,
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
    store_result(nd, &nd->write_failing, rc, "outbox write (the usage stays in memory)",
                 err.msg);
    free(items);
    return rc;
}

/* Audit hits (issue 12): taken from the supervisor with the usage and written to the outbox of
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
            store_result(nd, &nd->audit_failing, added < 0 ? added : 0,
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

/* Give freed heap pages back to the system (issue 13: a users answer or body of megabytes),
 * on the next loop turn: after the callback that freed them has returned, and so has the HTTP
 * request whose receive buffer held the answer. */
static void trim_soon(ag_uplink *u)
{
    if (!u->freeing && !uv_is_active((uv_handle_t *)&u->trim_timer))
        uv_timer_start(&u->trim_timer, on_trim_timer, 0, 0);
}

static void on_flush_timer(uv_timer_t *t)
{
    ag_uplink_flush(t->data);
    publish(t->data);
}

/* ---------------------------------------------------------------------------------------- */
/* push                                                                                       */
/* ---------------------------------------------------------------------------------------- */

static void on_push_timer(uv_timer_t *t);
static void pull_now(up_node *nd);
static void node_close(up_node *nd);
static bool retire_to_sibling(up_node *nd);

static void push_schedule(up_node *nd, bool failed)
{
    uint64_t d = push_ms(nd);
    if (failed)
        d = backoff_ms(++nd->push_fails, d);
    else
        nd->push_fails = 0;
    uv_timer_start(&nd->push_timer, on_push_timer, d, 0);
}

/* A panel that applies entries in order without a transaction failed the batch in flight
 * (PN_USAGE_ORDERED): hold it (stored) until a users answer pulled from now on settles it. */
static void hold_batch(up_node *nd, const sv_error *perr)
{
    sv_error err = {0};
    if (db_batch_hold(nd->u->db, nd->tag, nd->batch, now_ms(), &err) != 0) {
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: push failed (%s) and the batch could not be held "
               "for its settlement, kept for the next push: %s", nd->tag, perr->msg, err.msg);
        return;
    }
    nd->held = nd->batch;
    nd->held_after = nd->pulls_started + 1;
    SV_LOG(SV_LOG_WARN, MOD, "node %s: push failed (%s): the panel may have billed part of "
           "batch %" PRId64 "; nothing of it is sent again before a fresh user list settles it",
           nd->tag, perr->msg, nd->held);
    pull_now(nd);
}

/* Settle the held batch against the users answer just received (db_batch_settle): what the
 * panel billed leaves the outbox, users it no longer has are dropped (kept in the store), the
 * rest is pushed now. */
static void settle_held(up_node *nd)
{
    if (nd->held == 0 || nd->users_answered < nd->held_after)
        return;
    db_settled st;
    sv_error err = {0};
    const uint64_t *ids = nd->uids != NULL ? nd->uids->ids : NULL;
    size_t n = nd->uids != NULL ? nd->uids->n : 0;
    int rc = !nd->has_users || (n == 0 && nd->users.n > 0) /* no index: out of memory */
             ? sv_error_set(&err, -ENOMEM, "no index of the panel's user list")
             : db_batch_settle(nd->u->db, nd->tag, ids, n, now_ms(), &st, &err);
    if (rc != 0) {
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: held batch %" PRId64 " not settled (retried after "
               "the next pull): %s", nd->tag, nd->held, err.msg);
        nd->held_after = nd->pulls_started + 1;
        return;
    }
    for (size_t i = 0; i < st.n_dropped; i++) {
        const sv_usage *d = &st.dropped[i];
        SV_LOG(SV_LOG_WARN, MOD, "node %s: user %" PRIu64 " is no longer on the panel: its "
               "%" PRIu64 " bytes up and %" PRIu64 " down are dropped (kept in the store)",
               nd->tag, d->user, d->up, d->down);
        nd->dropped_users++;
        nd->dropped_bytes += d->up + d->down;
    }
    if (st.explained)
        SV_LOG(SV_LOG_INFO, MOD, "node %s: batch %" PRId64 " settled: %zu users billed before "
               "the failure (%" PRIu64 " bytes), %zu dropped, %zu sent again", nd->tag,
               st.batch, st.n_applied, st.applied_bytes, st.n_dropped, st.n_kept);
    else if (st.batch != 0)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: every user of batch %" PRId64 " is still on the "
               "panel, so none explains its failure: sent again whole", nd->tag, st.batch);
    db_settled_free(&st);
    nd->held = 0;
    if (!nd->pushing)
        uv_timer_start(&nd->push_timer, on_push_timer, 0, 0);
}

static void on_pushed(pn_client *c, int rc, const sv_error *perr, void *arg)
{
    (void)c;
    up_node *nd = arg;
    sv_error err = {0};
    nd->pushing = false;
    if (rc == 0) {
        if (db_batch_done(nd->u->db, nd->batch, &err) != 0)
            SV_LOG(SV_LOG_ERROR, MOD, "node %s: pushed batch %" PRId64 " not deleted (it "
                   "will be sent again): %s", nd->tag, nd->batch, err.msg);
        else
            SV_LOG(SV_LOG_DEBUG, MOD, "node %s: push of batch %" PRId64 " accepted", nd->tag,
                   nd->batch);
    } else if (rc == PN_ERR_PANEL_FAILED && nd->client->ops->usage_apply == PN_USAGE_ORDERED) {
        hold_batch(nd, perr);
    } else {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: push failed, kept for the next one: %s", nd->tag,
               perr->msg);
    }
    push_result(nd, rc, rc != 0 ? perr->msg : "");
    publish(nd->u);
    push_schedule(nd, rc != 0);
}

static int push_batch(up_node *nd, const db_batch *b)
{
    nd->batch = b->id;
    nd->pushing = true;
    int rc = nd->client->ops->report_usage(nd->client, b->items, b->n, on_pushed, nd);
    if (rc != 0)
        nd->pushing = false;
    return rc;
}

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
static void report_alive(up_node *nd)
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

/* The supervisor's one remote device table from every node's own alivelist answer (issue 14:
 * the alivelist is per node; a node's answer replaces only its own part). A user listed by two
 * nodes keeps the larger count (sv_set_remote_devices). 0 or -ENOMEM (the old table stays). */
static int remote_devices_apply(ag_uplink *u)
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

/* alivelist answered (issue 3, device limit): the panel counts this node's reported IPs too, so
 * each user's local distinct IPs are taken off (floor 0) before the table goes to the
 * supervisor, which adds the live local IPs back at admission. A failure keeps the old table. */
static void on_alivelist(pn_client *c, int rc, const pn_alive_count *items, size_t n,
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
        if (remote_devices_apply(nd->u) != 0)
            SV_LOG(SV_LOG_WARN, MOD, "node %s: alivelist: out of memory", nd->tag);
    }
    free(v);
    free(ss);
}

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
static void read_status(ag_uplink *u, pn_status *out)
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

static void report_status(up_node *nd)
{
    pn_status st;
    read_status(nd->u, &st);
    if (nd->client->ops->report_status != NULL)
        nd->client->ops->report_status(nd->client, &st, on_reported, nd);
}

/* ---------------------------------------------------------------------------------------- */
/* audit hits -> the panel's detect log (issue 12, PANEL.md §2), once per push interval       */
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
    publish(nd->u);
}

/* End the node's audit period: claim its pending hits and report them as the detect log; a
 * panel that takes none (UniProxy: no audit endpoint) ends the period at once. */
static void audit_report(up_node *nd)
{
    if (nd->audit_reporting)
        return;
    db_audit_batch b;
    sv_error err = {0};
    int claimed = db_audit_claim(nd->u->db, nd->tag, &b, &err);
    store_result(nd, &nd->audit_claim_failing, claimed, "audit outbox read", err.msg);
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

static void on_push_timer(uv_timer_t *t)
{
    up_node *nd = t->data;
    if (nd->pushing)
        return;
    if (nd->retiring && retire_to_sibling(nd))
        return; /* closed */
    if (nd->push_fails == 0 && !nd->retiring) { /* once per push interval, not on retries */
        report_alive(nd);
        report_status(nd);
        if (nd->client->ops->fetch_alivelist != NULL)
            nd->client->ops->fetch_alivelist(nd->client, on_alivelist, nd);
    }
    ag_uplink_flush(nd->u);
    audit_report(nd);
    if (nd->held != 0) { /* settled by a users answer (settle_held), then pushed at once */
        pull_now(nd);
        push_schedule(nd, true);
        return;
    }
    db_batch b;
    sv_error err = {0};
    int rc = db_batch_claim(nd->u->db, nd->tag, &b, &err);
    store_result(nd, &nd->claim_failing, rc, "outbox read", err.msg);
    if (rc != 0) {
        push_result(nd, rc, err.msg);
        publish(nd->u);
        push_schedule(nd, true);
        return;
    }
    if (b.n == 0 && nd->retiring) { /* everything it held reached the panel */
        SV_LOG(SV_LOG_INFO, MOD, "node %s: removed from its machine, pending usage pushed",
               nd->tag);
        ag_uplink *u = nd->u;
        node_close(nd);
        publish(u);
        return;
    }
    if (b.n == 0) { /* an empty push does nothing on the panel (PANEL.md §1.3) */
        publish(nd->u);
        push_schedule(nd, false);
        return;
    }
    SV_LOG(SV_LOG_DEBUG, MOD, "node %s: pushing batch %" PRId64 " (%zu users)", nd->tag, b.id,
           b.n);
    rc = push_batch(nd, &b);
    db_batch_free(&b);
    if (rc != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: push could not start: %s", nd->tag, strerror(-rc));
        push_result(nd, rc, strerror(-rc));
        push_schedule(nd, true);
    }
    publish(nd->u);
}

/* ---------------------------------------------------------------------------------------- */
/* pull                                                                                       */
/* ---------------------------------------------------------------------------------------- */

static void on_pull_timer(uv_timer_t *t);

/* Record this pull's first error for the REST API (issue 4: each pull's outcome). */
static void pull_failed(up_node *nd, int rc, const char *msg)
{
    nd->pull_failed = true;
    if (nd->pull_rc != 0)
        return;
    nd->pull_rc = rc < 0 ? rc : -EIO;
    snprintf(nd->pull_msg, sizeof nd->pull_msg, "%.159s", msg);
}

static void pull_answered(up_node *nd)
{
    if (--nd->pulls_pending > 0 || nd->retiring)
        return;
    uint64_t d = pull_ms(nd);
    if (nd->pull_failed || !nd->has_node || !nd->has_users)
        d = backoff_ms(++nd->pull_fails, nd->has_node && nd->has_users ? d : 60000u);
    else
        nd->pull_fails = 0;
    if (nd->held != 0 && nd->held_after > nd->pulls_started && !nd->pull_failed)
        d = 0; /* this pull began before the failure: the settlement needs the next one */
    if (!nd->pull_failed)
        nd->pull_error[0] = '\0';
    if (nd->pull_failed && nd->pull_rc == 0) /* a fetch could not start */
        pull_failed(nd, -EIO, "panel request could not start");
    nd->last_pull_ms = (uint64_t)now_ms();
    nd->last_pull_status = nd->pull_rc;
    memcpy(nd->last_pull_err, nd->pull_msg, sizeof nd->last_pull_err);
    uv_timer_start(&nd->pull_timer, on_pull_timer, d, 0);
    publish(nd->u);
    if (nd->pull_changed && nd->has_node && nd->has_users && nd->u->on_change != NULL) {
        ag_uplink_flush(nd->u); /* usage of users about to be removed is queued first */
        nd->u->on_change(nd->u->arg);
    } else if (!nd->pull_failed && nd->has_node && nd->has_users) {
        /* issue 8: certificate files are re-read on every panel sync, also when the panel's
         * data did not change (a change reloads them through on_change); a refusal is logged
         * by the supervisor, once while the files stay the same */
        sv_error err = {0};
        (void)sv_reload_certs(nd->u->sv, &err);
    }
}

/* A refused pull answer: one warning while the panel keeps giving the same error (issue 14:
 * "one clear error"), the repeats at debug level; a good pull re-arms the warning. */
static void pull_error(up_node *nd, const sv_error *err)
{
    if (strncmp(nd->pull_error, err->msg, sizeof nd->pull_error - 1) == 0) {
        SV_LOG(SV_LOG_DEBUG, MOD, "node %s: %s (again)", nd->tag, err->msg);
        return;
    }
    snprintf(nd->pull_error, sizeof nd->pull_error, "%.159s", err->msg);
    SV_LOG(SV_LOG_WARN, MOD, "node %s: %s (keeping the running state)", nd->tag, err->msg);
}

static void on_node(pn_client *c, int rc, pn_node *node, const sv_error *err, void *arg)
{
    (void)c;
    up_node *nd = arg;
    if (rc == PN_OK) {
        bool same = nd->has_node && pn_node_equal(&nd->node, node);
        uint64_t old_pull = nd->has_node ? pull_ms(nd) : 0; /* the intervals in use */
        uint64_t old_push = nd->has_node ? push_ms(nd) : 0;
        pn_node_free(&nd->node);
        nd->node = *node;
        memset(node, 0, sizeof *node);
        nd->pull_changed |= !same || !nd->has_node;
        nd->has_node = true;
        nd->unstored[PN_BODY_CONFIG] = true; /* stored once it applied (ag_uplink_applied) */
        free(nd->pushed[PN_BODY_CONFIG]);
        nd->pushed[PN_BODY_CONFIG] = NULL;
        if (old_pull != pull_ms(nd) || old_push != push_ms(nd)) /* 0 from the panel: 60 s */
            SV_LOG(SV_LOG_INFO, MOD, "node %s: pull interval %" PRIu64 " s, push interval %"
                   PRIu64 " s", nd->tag, pull_ms(nd) / 1000u, push_ms(nd) / 1000u);
        /* a new push interval applies now, not after the old period (never stalls) */
        if (old_push != push_ms(nd) && !nd->pushing && nd->push_fails == 0)
            uv_timer_start(&nd->push_timer, on_push_timer, push_ms(nd), 0);
    } else if (rc < 0) {
        pull_failed(nd, rc, err != NULL ? err->msg : "pull failed");
        pull_error(nd, err);
    }
    pull_answered(nd);
}

static void on_users(pn_client *c, int rc, pn_users *users, const sv_error *err, void *arg)
{
    (void)c;
    up_node *nd = arg;
    if (rc == PN_OK && nd->has_users && nd->users.shed && pn_users_equal(&nd->users, users)) {
        /* the running list answered again in full (a panel without ETags): it stays shed, and
         * once stored (ag_uplink_applied) the new body need not be kept either (issue 13) */
        pn_users_free(users);
        if (!nd->unstored[PN_BODY_USERS])
            pn_forget_body(nd->client, PN_BODY_USERS);
        trim_soon(nd->u); /* the answer's pages back, as after a store */
    } else if (rc == PN_OK) {
        bool same = nd->has_users && pn_users_equal(&nd->users, users);
        pn_users_free(&nd->users);
        nd->users = *users;
        memset(users, 0, sizeof *users);
        nd->pull_changed |= !same || !nd->has_users;
        nd->has_users = true;
        index_users(nd);
        nd->unstored[PN_BODY_USERS] = true;
        free(nd->pushed[PN_BODY_USERS]);
        nd->pushed[PN_BODY_USERS] = NULL;
    } else if (rc < 0) {
        pull_failed(nd, rc, err != NULL ? err->msg : "pull failed");
        pull_error(nd, err);
    }
    if (rc >= 0) { /* PN_OK or PN_NOT_MODIFIED: nd->uids is the panel's list now */
        nd->users_answered = nd->pulls_started;
        settle_held(nd);
    }
    pull_answered(nd);
}

static void on_pull_timer(uv_timer_t *t)
{
    up_node *nd = t->data;
    if (nd->pulls_pending > 0)
        return;
    nd->pulls_pending = 3; /* +1 while issuing */
    nd->pulls_started++;
    nd->pull_changed = nd->pull_failed = false;
    nd->pull_rc = 0;
    nd->pull_msg[0] = '\0';
    if (pn_fetch_node(nd->client, on_node, nd) != 0) {
        nd->pull_failed = true;
        nd->pulls_pending--;
    }
    if (pn_fetch_users(nd->client, on_users, nd) != 0) {
        nd->pull_failed = true;
        nd->pulls_pending--;
    }
    pull_answered(nd);
}

/* ---------------------------------------------------------------------------------------- */
/* pushed changes (issue 14: Xboard's node channel, PROTOCOLS-2.md §6)                        */
/* ---------------------------------------------------------------------------------------- */

/* Offer a pushed change to the node manager now, with @p body (taken; NULL when it could not
 * be made) the REST body of that state. Once it applied, that body is stored as the last good
 * state with no ETag (ag_uplink_applied), so a restart with the panel down serves it; the REST
 * ETag is dropped, so the next pull fetches the panel's full body, which then replaces it. */
static void pushed_change(up_node *nd, enum pn_body_kind kind, char *body)
{
    pn_set_etag(nd->client, kind, NULL);
    free(nd->pushed[kind]);
    nd->pushed[kind] = body;
    nd->unstored[kind] = body != NULL;
    if (body == NULL)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: pushed state not stored (out of memory)", nd->tag);
    publish(nd->u);
    if (nd->has_node && nd->has_users && nd->u->on_change != NULL) {
        ag_uplink_flush(nd->u); /* usage of users about to be removed is queued first */
        nd->u->on_change(nd->u->arg);
    }
}

/* A pushed config body (no intervals) with the node's intervals as its `base_config`, so the
 * store reads back what runs. malloc'ed, or NULL. */
static char *config_body(const up_node *nd, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *j = body != NULL ? json_loadb(body, len, 0, &jerr) : NULL;
    char *text = NULL;
    if (json_is_object(j) &&
        json_object_set_new(j, "base_config",
                            json_pack("{s:I, s:I}", "push_interval",
                                      (json_int_t)nd->node.push_interval, "pull_interval",
                                      (json_int_t)nd->node.pull_interval)) == 0)
        text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

static void pull_now(up_node *nd)
{
    if (nd->pulls_pending == 0)
        uv_timer_start(&nd->pull_timer, on_pull_timer, 0, 0);
}

static void ev_node(void *arg, pn_node *node, const char *body, size_t len)
{
    up_node *nd = arg;
    node->pull_interval = nd->node.pull_interval; /* sync.config has no intervals: keep REST's */
    node->push_interval = nd->node.push_interval;
    if (nd->has_node && pn_node_equal(&nd->node, node))
        return;
    pn_node_free(&nd->node);
    nd->node = *node;
    memset(node, 0, sizeof *node);
    nd->has_node = true;
    SV_LOG(SV_LOG_INFO, MOD, "node %s: node settings pushed by the panel", nd->tag);
    pushed_change(nd, PN_BODY_CONFIG, config_body(nd, body, len));
}

static void ev_users(void *arg, pn_users *users)
{
    up_node *nd = arg;
    if (nd->has_users && pn_users_equal(&nd->users, users))
        return;
    pn_users_free(&nd->users);
    nd->users = *users;
    memset(users, 0, sizeof *users);
    nd->has_users = true;
    index_users(nd);
    SV_LOG(SV_LOG_INFO, MOD, "node %s: %zu users pushed by the panel", nd->tag, nd->users.n);
    pushed_change(nd, PN_BODY_USERS, pn_users_body(&nd->users));
}

static void ev_resync(void *arg, const sv_error *why)
{
    up_node *nd = arg;
    pull_error(nd, why);
    pn_set_etag(nd->client, PN_BODY_CONFIG, NULL);
    pn_set_etag(nd->client, PN_BODY_USERS, NULL);
    pull_now(nd);
}

/* Issue 13: once the list the uplink holds runs, it is shed (ag_uplink_applied): the
 * supervisor's running user set of the node, lowered from that very list, holds it. Refill it
 * from there before the list is edited (a pushed delta). -ESTALE when the running set is not
 * that list any more, -ENOMEM. */
static int held_refill(up_node *nd)
{
    return ag_users_refill(&nd->users, sv_running_user_set(nd->u->sv, nd->tag));
}

/* Apply a delta to a copy of the held list: add replaces a user with the same id or appends;
 * remove must name held users. -ENOENT (a removed id not held), -ENOMEM. */
static int delta_apply(const pn_users *held, const pn_users *add, const uint64_t *remove,
                       size_t n_remove, pn_users *out, uint64_t *bad)
{
    int rc = pn_users_clone(out, held);
    if (rc != 0)
        return rc;
    for (size_t r = 0; r < n_remove; r++) {
        size_t i = 0;
        while (i < out->n && out->users[i].id != remove[r])
            i++;
        if (i == out->n) {
            *bad = remove[r];
            pn_users_free(out);
            return -ENOENT;
        }
        free(out->users[i].uuid);
        memmove(&out->users[i], &out->users[i + 1], (out->n - i - 1) * sizeof *out->users);
        out->n--;
    }
    if (add->n > 0) {
        pn_user *p = realloc(out->users, (out->n + add->n) * sizeof *p);
        if (p == NULL) {
            pn_users_free(out);
            return -ENOMEM;
        }
        out->users = p;
    }
    for (size_t a = 0; a < add->n; a++) {
        char *uuid = strdup(add->users[a].uuid);
        if (uuid == NULL) {
            pn_users_free(out);
            return -ENOMEM;
        }
        size_t i = 0;
        while (i < out->n && out->users[i].id != add->users[a].id)
            i++;
        if (i < out->n)
            free(out->users[i].uuid);
        else
            out->n++;
        out->users[i] = add->users[a];
        out->users[i].uuid = uuid;
    }
    return 0;
}

/* sync.user.delta: a delta that does not apply cleanly triggers a full pull (issue 14). */
static void ev_delta(void *arg, const pn_users *add, const uint64_t *remove, size_t n_remove)
{
    up_node *nd = arg;
    pn_users next;
    uint64_t bad = 0;
    sv_error err = {0};
    int rc = !nd->has_users ? -EAGAIN : held_refill(nd);
    if (rc == 0)
        rc = delta_apply(&nd->users, add, remove, n_remove, &next, &bad);
    if (rc != 0) {
        if (rc == -ESTALE)
            sv_error_set(&err, rc, "node channel: user delta not applied (the running users "
                         "are not the list held): pulling everything");
        else if (rc == -ENOENT)
            sv_error_set(&err, rc, "node channel: user delta removes user %" PRIu64 ", not "
                         "held: pulling everything", bad);
        else
            sv_error_set(&err, rc, "node channel: user delta not applied (%s): pulling "
                         "everything", rc == -EAGAIN ? "no user list yet" : "out of memory");
        ev_resync(nd, &err);
        return;
    }
    pn_users_free(&nd->users);
    nd->users = next;
    index_users(nd);
    SV_LOG(SV_LOG_INFO, MOD, "node %s: user delta pushed by the panel: %zu added or changed, "
           "%zu removed", nd->tag, add->n, n_remove);
    pushed_change(nd, PN_BODY_USERS, pn_users_body(&nd->users));
}

/* The channel dropped: poll over REST at once (it reconnects on its own). */
static void ev_channel(void *arg, bool up, const sv_error *why)
{
    (void)why;
    if (!up)
        pull_now(arg);
}

static const pn_push_events push_events = {
    .node = ev_node,
    .users = ev_users,
    .delta = ev_delta,
    .resync = ev_resync,
    .channel = ev_channel,
};

/* ---------------------------------------------------------------------------------------- */
/* the node manager's view: a client answering from the last good state                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct snap_client {
    pn_client base;
    ag_uplink *u; /* borrowed: the node manager's clients live within one load */
    char *tag;
} snap_client;

/* The live node of @p tag (a retiring node is no longer offered). */
static up_node *find_node(ag_uplink *u, const char *tag)
{
    for (size_t i = 0; u != NULL && i < u->n; i++)
        if (!u->nodes[i]->retiring && strcmp(u->nodes[i]->tag, tag) == 0)
            return u->nodes[i];
    return NULL;
}

static const char *client_type(const up_node *nd)
{
    return nd->client != NULL ? nd->client->ops->type : "remote";
}

static int snap_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    snap_client *sc = (snap_client *)c;
    up_node *nd = find_node(sc->u, sc->tag);
    sv_error err = {0};
    pn_node copy;
    if (nd == NULL || !nd->has_node) {
        sv_error_set(&err, -EAGAIN, "%s panel: no node settings yet",
                     nd != NULL ? client_type(nd) : "remote");
        cb(c, -EAGAIN, NULL, &err, arg);
        return 0;
    }
    if (pn_node_clone(&copy, &nd->node) != 0)
        return -ENOMEM;
    cb(c, PN_OK, &copy, NULL, arg);
    pn_node_free(&copy);
    return 0;
}

static int snap_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    snap_client *sc = (snap_client *)c;
    up_node *nd = find_node(sc->u, sc->tag);
    sv_error err = {0};
    pn_users copy;
    if (nd == NULL || !nd->has_users) {
        sv_error_set(&err, -EAGAIN, "%s panel: no user list yet",
                     nd != NULL ? client_type(nd) : "remote");
        cb(c, -EAGAIN, NULL, &err, arg);
        return 0;
    }
    if (pn_users_clone(&copy, &nd->users) != 0)
        return -ENOMEM;
    cb(c, PN_OK, &copy, NULL, arg);
    pn_users_free(&copy);
    return 0;
}

static void snap_free(pn_client *c)
{
    snap_client *s = (snap_client *)c;
    free(s->tag);
    free(s);
}

static const pn_client_ops snap_ops = {
    .type = "uplink",
    .fetch_node = snap_fetch_node,
    .fetch_users = snap_fetch_users,
    .free = snap_free,
};

int ag_uplink_client(void *uplink, const ag_node_config *nc, pn_client **out, sv_error *err)
{
    ag_uplink *u = uplink;
    *out = NULL;
    if (find_node(u, nc->tag) == NULL)
        return sv_error_set(err, -ENOENT, "node %s: %s panel not started (its settings "
                            "changed: restart katana)", nc->tag,
                            ag_panel_type_name(nc->panel.type));
    snap_client *s = calloc(1, sizeof *s);
    if (s == NULL || (s->tag = strdup(nc->tag)) == NULL) {
        free(s);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    s->u = u;
    s->base.ops = &snap_ops;
    *out = &s->base;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* life cycle                                                                                 */
/* ---------------------------------------------------------------------------------------- */

bool ag_uplink_ready(const ag_uplink *u)
{
    for (size_t i = 0; u != NULL && i < u->n_machines; i++)
        if (!u->machines[i]->has_list)
            return false;
    for (size_t i = 0; u != NULL && i < u->n; i++)
        if (!u->nodes[i]->retiring && (!u->nodes[i]->has_node || !u->nodes[i]->has_users))
            return false;
    return true;
}

/* Forget the held state and its ETags: the next pull fetches full bodies (never a 304 for a
 * state the uplink no longer holds) and counts as a change. */
static void forget_state(up_node *nd)
{
    pn_node_free(&nd->node);
    pn_users_free(&nd->users);
    nd->has_node = nd->has_users = false;
    nd->unstored[PN_BODY_CONFIG] = nd->unstored[PN_BODY_USERS] = false;
    for (int k = 0; k < 2; k++) {
        free(nd->pushed[k]);
        nd->pushed[k] = NULL;
    }
    nd->from_store = false;
    pn_set_etag(nd->client, PN_BODY_CONFIG, NULL);
    pn_set_etag(nd->client, PN_BODY_USERS, NULL);
    index_users(nd);
}

/* Dry run of a stored pair on its own (lowering and sv_check, as `katana check`): what the
 * rules of this version refuse is found before it can fail the first apply. */
static int check_stored(const up_node *nd, const ag_node_config *nc, sv_error *err)
{
    ag_node_state st = {.tag = nd->tag, .listen = nc->listen, .node = nd->node,
                        .users = nd->users}; /* borrowed: never freed here */
    ag_fleet fleet = {.nodes = &st, .n = 1};
    sv_spec spec;
    int rc = ag_lower_fleet(&fleet, &spec, err);
    if (rc == 0) {
        rc = sv_check(&spec, err);
        sv_spec_free(&spec);
    }
    return rc;
}

/* Serve from the stored last good state until the panel answers. A stored pair this version
 * refuses (issue 15: stored by an older version, or under other rules) is skipped with one
 * warning: the node waits for the panel instead of failing the start. */
static void seed(up_node *nd, const ag_node_config *nc)
{
    char *etags[2] = {NULL, NULL};
    for (int kind = 0; kind < 2; kind++) {
        char *body = NULL;
        size_t len = 0;
        sv_error err = {0};
        if (db_state_get(nd->u->db, nd->tag, kind == 0 ? DB_STATE_CONFIG : DB_STATE_USERS,
                         &etags[kind], &body, &len, &err) != 0)
            continue;
        int rc = nd->client->ops->parse_body == NULL ? -ENOTSUP
                 : nd->client->ops->parse_body(nd->client, (enum pn_body_kind)kind, body, len,
                                               &nd->node, &nd->users, &err);
        if (rc == 0)
            *(kind == 0 ? &nd->has_node : &nd->has_users) = true;
        else
            SV_LOG(SV_LOG_WARN, MOD, "node %s: stored state unusable, ignored", nd->tag);
        free(body);
    }
    sv_error err = {0};
    if (nd->has_node && nd->has_users && check_stored(nd, nc, &err) != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: stored panel state skipped, waiting for the panel: "
               "%s", nd->tag, err.msg);
        forget_state(nd);
    }
    if (nd->has_node)
        pn_set_etag(nd->client, PN_BODY_CONFIG, etags[0]);
    if (nd->has_users)
        pn_set_etag(nd->client, PN_BODY_USERS, etags[1]);
    free(etags[0]);
    free(etags[1]);
    nd->from_store = nd->has_node || nd->has_users;
    if (nd->has_users)
        index_users(nd);
    if (nd->has_node && nd->has_users)
        SV_LOG(SV_LOG_INFO, MOD, "node %s: serving the stored state (%zu users) until the "
               "panel answers", nd->tag, nd->users.n);
}

static bool is_machine(const ag_node_config *nc)
{
    return nc->panel.type == AG_PANEL_XBOARD && nc->panel.machine_id != NULL;
}

static bool is_remote(const ag_node_config *nc)
{
    return (nc->panel.type == AG_PANEL_UNIPROXY || nc->panel.type == AG_PANEL_SSPANEL ||
            nc->panel.type == AG_PANEL_XBOARD) && !is_machine(nc);
}

/* The node's client and its stored state; no libuv handle yet (nothing to close on failure). */
static int node_prepare(ag_uplink *u, up_node *nd, const ag_node_config *nc, sv_error *err)
{
    nd->u = u;
    nd->tag = strdup(nc->tag);
    if (nd->tag == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    pn_remote_options o = {.loop = u->loop,
                           .type = ag_panel_type_name(nc->panel.type),
                           .url = nc->panel.url, .token = nc->panel.token,
                           .node_id = nc->panel.node_id, .node_type = nc->panel.node_type,
                           .timeout_ms = 1000L * nc->panel.timeout_s,
                           .pull_interval = nc->panel.pull_interval_s,
                           .push_interval = nc->panel.push_interval_s,
                           .machine_id = nc->panel.machine_id};
    int rc = pn_remote_new(&o, &nd->client, err);
    if (rc != 0)
        return rc;
    seed(nd, nc);
    return 0;
}

/* Free what node_prepare made (before any timer exists) and the node itself. */
static void node_unprepare(up_node *nd)
{
    pn_client_free(nd->client);
    pn_node_free(&nd->node);
    pn_users_free(&nd->users);
    uid_index_unref(nd->uids);
    free(nd->tag);
    free(nd->remote);
    free(nd->pushed[0]);
    free(nd->pushed[1]);
    free(nd);
}

static void node_start(ag_uplink *u, up_node *nd)
{
    sv_error err = {0};
    if (db_batch_held(u->db, nd->tag, &nd->held, &err) != 0)
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: outbox read failed: %s", nd->tag, err.msg);
    else if (nd->held != 0)
        SV_LOG(SV_LOG_INFO, MOD, "node %s: batch %" PRId64 ", which the panel failed, waits for "
               "a fresh user list to settle it", nd->tag, nd->held);
    nd->held_after = 1; /* the first pull of this run */
    uv_timer_init(u->loop, &nd->pull_timer);
    uv_timer_init(u->loop, &nd->push_timer);
    nd->pull_timer.data = nd->push_timer.data = nd;
    uv_timer_start(&nd->pull_timer, on_pull_timer, 0, 0);
    uv_timer_start(&nd->push_timer, on_push_timer, 0, 0); /* resend what is pending */
    int rc = nd->client->ops->watch != NULL ? nd->client->ops->watch(nd->client, &push_events,
                                                                     nd) : 0;
    if (rc != 0 && rc != -ENOTSUP) /* -ENOTSUP: a machine's node, polled over REST */
        SV_LOG(SV_LOG_WARN, MOD, "node %s: panel push channel not started, polling only",
               nd->tag);
}

/* Append a prepared node to the uplink. 0 or -ENOMEM. */
static int node_add(ag_uplink *u, up_node *nd)
{
    if (u->n == u->cap) {
        size_t cap = u->cap > 0 ? 2 * u->cap : 8;
        up_node **p = realloc(u->nodes, cap * sizeof *p);
        if (p == NULL)
            return -ENOMEM;
        u->nodes = p;
        u->cap = cap;
    }
    u->nodes[u->n++] = nd;
    return 0;
}

static void closed(ag_uplink *u)
{
    if (--u->closing > 0 || !u->freeing)
        return;
    for (size_t i = 0; i < u->n_machines; i++) {
        ag_node_config_free(&u->machines[i]->nc);
        pn_xb_machine_free(&u->machines[i]->list);
        free(u->machines[i]);
    }
    free(u->machines);
    free(u->nodes);
    free(u->carry);
    free(u->taken);
    pthread_mutex_destroy(&u->snap_lock);
    free(u);
}

static void node_timer_closed(uv_handle_t *h)
{
    up_node *nd = h->data;
    ag_uplink *u = nd->u;
    if (--nd->handles == 0) {
        nd->client = NULL; /* freed by node_close */
        node_unprepare(nd);
    }
    closed(u);
}

/* Stop a started node and take it out of the uplink; its memory goes when its timers closed.
 * Its outbox rows stay in the store. Safe from inside its own callbacks. */
static void node_close(up_node *nd)
{
    ag_uplink *u = nd->u;
    for (size_t i = 0; i < u->n; i++)
        if (u->nodes[i] == nd) {
            memmove(&u->nodes[i], &u->nodes[i + 1], (u->n - i - 1) * sizeof *u->nodes);
            u->n--;
            break;
        }
    pn_client_free(nd->client); /* requests in flight end without callbacks */
    nd->client = NULL;
    nd->handles = 2;
    u->closing += 2;
    uv_close((uv_handle_t *)&nd->pull_timer, node_timer_closed);
    uv_close((uv_handle_t *)&nd->push_timer, node_timer_closed);
}

/* ---------------------------------------------------------------------------------------- */
/* Xboard machines (issue 14, PANEL.md §1.1): the machine's list makes and retires nodes       */
/* ---------------------------------------------------------------------------------------- */

/* A live node of @p m other than @p nd, or NULL. */
static up_node *sibling(const up_node *nd)
{
    for (size_t i = 0; i < nd->u->n; i++) {
        up_node *o = nd->u->nodes[i];
        if (o != nd && o->machine == nd->machine && !o->retiring)
            return o;
    }
    return NULL;
}

/* A retiring node hands what its outbox holds to a live node of its machine (the panel takes
 * no push for a node the machine no longer has; usage is billed per user id), then closes.
 * @return whether it closed. Without a live sibling it pushes its rows itself. */
static bool retire_to_sibling(up_node *nd)
{
    up_node *to = find_node(nd->u, nd->tag);
    sv_error err = {0};
    ag_uplink *u = nd->u;
    if (to != NULL) { /* listed again with another type: the new node has the same tag and
                         so already pushes these rows */
        node_close(nd);
        if (!to->pushing)
            uv_timer_start(&to->push_timer, on_push_timer, 0, 0);
        publish(u);
        return true;
    }
    if ((to = sibling(nd)) == NULL)
        return false;
    ag_uplink_flush(nd->u);
    if (db_usage_move(nd->u->db, nd->tag, to->tag, &err) != 0) {
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: pending usage not handed to node %s (tried again "
               "at the next push): %s", nd->tag, to->tag, err.msg);
        return false;
    }
    SV_LOG(SV_LOG_INFO, MOD, "node %s: removed from its machine; its pending usage is pushed "
           "through node %s", nd->tag, to->tag);
    node_close(nd);
    if (!to->pushing) /* now, not a push interval later */
        uv_timer_start(&to->push_timer, on_push_timer, 0, 0);
    publish(u);
    return true;
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
    (void)remote_devices_apply(nd->u);
    uv_timer_stop(&nd->pull_timer);
    if (!nd->pushing) {
        nd->push_fails = 0;
        uv_timer_start(&nd->push_timer, on_push_timer, 0, 0);
    }
    SV_LOG(SV_LOG_INFO, MOD, "node %s: no longer on its machine, stopping it", nd->tag);
}

bool ag_machine_type_served(const char *type)
{
    return strcmp(type, "shadowsocks") == 0 || strcmp(type, "vmess") == 0 ||
           strcmp(type, "vless") == 0 || strcmp(type, "trojan") == 0;
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
        rc = node_prepare(u, nd, &nc, err);
    ag_node_config_free(&nc);
    if (rc == 0 && node_add(u, nd) != 0)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc != 0) {
        if (nd != NULL)
            node_unprepare(nd);
        return rc;
    }
    nd->machine = m;
    nd->machine_node = mn->id;
    memcpy(nd->machine_type, mn->type, sizeof nd->machine_type);
    node_start(u, nd);
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
                forget_state(have);
            uv_timer_start(&have->pull_timer, on_pull_timer, 0, 0);
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
    publish(u);
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
    read_status(m->u, &st);
    (void)pn_xb_machine_status(m->client, &st, on_machine_reported, m);
    m->fetching = pn_xb_machine_fetch(m->client, on_machine_list, m) == 0;
    if (!m->fetching)
        machine_schedule(m, true);
}

/* ---------------------------------------------------------------------------------------- */
/* the machine's channel (issue 14, PROTOCOLS-2.md §6.2-6.5): node-scoped events go to that  */
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
        ev_node(nd, node, body, len);
}

static void mev_users(void *arg, uint64_t id, pn_users *users)
{
    up_node *nd = machine_node_find(arg, id);
    if (nd != NULL)
        ev_users(nd, users);
}

static void mev_delta(void *arg, uint64_t id, const pn_users *add, const uint64_t *remove,
                      size_t n_remove)
{
    up_node *nd = machine_node_find(arg, id);
    if (nd != NULL)
        ev_delta(nd, add, remove, n_remove);
}

/* Every live node of @p m pulls over REST now, and so does the list. */
static void machine_pull_all(up_machine *m)
{
    for (size_t i = 0; i < m->u->n; i++)
        if (m->u->nodes[i]->machine == m && !m->u->nodes[i]->retiring)
            pull_now(m->u->nodes[i]);
    machine_pull_now(m);
}

static void mev_resync(void *arg, uint64_t id, const sv_error *why)
{
    up_machine *m = arg;
    up_node *nd = id != 0 ? machine_node_find(m, id) : NULL;
    if (nd != NULL) {
        ev_resync(nd, why);
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

/* The machine's client and its stored list (its nodes start with the stored list, before the
 * panel answers). No libuv handle yet. */
static int machine_prepare(ag_uplink *u, const ag_node_config *nc, sv_error *err)
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

static void machine_start(up_machine *m)
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

static void machine_timer_closed(uv_handle_t *h)
{
    closed(((up_machine *)h->data)->u);
}

int ag_uplink_expand(ag_uplink *u, ag_config *cfg, sv_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        if (!is_machine(&cfg->nodes[i])) {
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
        if (!is_machine(&cfg->nodes[i])) {
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

int ag_uplink_new(uv_loop_t *loop, sv_supervisor *sv, const ag_config *cfg,
                  ag_uplink_change_cb on_change, void *arg, ag_uplink **out, sv_error *err)
{
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_nodes; i++)
        n += is_remote(&cfg->nodes[i]) || is_machine(&cfg->nodes[i]);
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
        if (is_machine(&cfg->nodes[i])) {
            rc = machine_prepare(u, &cfg->nodes[i], err);
            continue;
        }
        if (!is_remote(&cfg->nodes[i]))
            continue;
        up_node *nd = calloc(1, sizeof *nd);
        rc = nd == NULL ? sv_error_set(err, -ENOMEM, "out of memory")
                        : node_prepare(u, nd, &cfg->nodes[i], err);
        if (rc == 0 && node_add(u, nd) != 0)
            rc = sv_error_set(err, -ENOMEM, "out of memory");
        if (rc != 0 && nd != NULL)
            node_unprepare(nd);
    }
    if (rc != 0) { /* nothing is left for the caller to undo (issue 14) */
        for (size_t i = 0; i < u->n; i++)
            node_unprepare(u->nodes[i]);
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
    *out = u;
    if (n == 0)
        return 0;
    srand((unsigned)now_ms());
    for (size_t i = 0; i < u->n; i++)
        node_start(u, u->nodes[i]);
    for (size_t i = 0; i < u->n_machines; i++)
        machine_start(u->machines[i]);
    uv_timer_start(&u->flush_timer, on_flush_timer, 1000u * u->flush_s, 1000u * u->flush_s);
    publish(u); /* what an earlier run left pending */
    return 0;
}

/* The bodies of @p nd pulled since the last store, in one transaction. */
static void store_pair(up_node *nd)
{
    db_state_body b[2] = {{0}};
    for (int k = 0; k < 2; k++) {
        if (nd->unstored[k] && nd->pushed[k] != NULL) { /* a pushed state: no ETag */
            b[k].body = nd->pushed[k];
            b[k].len = strlen(nd->pushed[k]);
        } else if (nd->unstored[k]) {
            b[k].body = pn_last_body(nd->client, (enum pn_body_kind)k, &b[k].len,
                                     &b[k].etag);
        }
    }
    sv_error err = {0};
    if (db_state_put_pair(nd->u->db, nd->tag, &b[0], &b[1], now_ms(), &err) != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: last good state not stored: %s", nd->tag, err.msg);
        return; /* tried again after the next apply */
    }
    for (int k = 0; k < 2; k++) { /* stored: the held state is what runs */
        if (nd->unstored[k] && nd->pushed[k] == NULL)
            pn_forget_body(nd->client, (enum pn_body_kind)k); /* the store has it (issue 13) */
        free(nd->pushed[k]);
        nd->pushed[k] = NULL;
    }
    nd->unstored[PN_BODY_CONFIG] = nd->unstored[PN_BODY_USERS] = false;
    /* the body, the store's page cache and the shed uuids were freed after the apply's trim
     * (agent/node.c on_loaded): give their pages back too (issue 13) */
    trim_soon(nd->u);
}

void ag_uplink_applied(ag_uplink *u, const ag_fleet *running)
{
    for (size_t i = 0; u != NULL && i < u->n; i++) {
        up_node *nd = u->nodes[i];
        const ag_node_state *st = NULL;
        for (size_t k = 0; running != NULL && k < running->n && st == NULL; k++)
            if (strcmp(running->nodes[k].tag, nd->tag) == 0)
                st = &running->nodes[k];
        /* what runs must be what the uplink holds: not a refused answer still held */
        if (st == NULL || nd->retiring || !nd->has_node || !nd->has_users ||
            !pn_node_equal(&st->node, &nd->node) || !pn_users_equal(&st->users, &nd->users))
            continue;
        nd->from_store = false;
        /* it runs: the supervisor holds the list (held_refill gets it back; issue 13). Shed it
         * whole, or all but the ids and the panel's speed limits when the node caps them; before
         * the store, whose trim gives the pages back */
        (void)pn_users_shed(&nd->users, st->speed_limit != 0);
        if (nd->unstored[PN_BODY_CONFIG] || nd->unstored[PN_BODY_USERS])
            store_pair(nd);
    }
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
        forget_state(nd);
        if (nd->pulls_pending == 0) /* ask now rather than after a backoff */
            uv_timer_start(&nd->pull_timer, on_pull_timer, 0, 0);
        n++;
    }
    if (n > 0)
        publish(u);
    return n;
}

static void timer_closed(uv_handle_t *h)
{
    closed(h->data);
}

void ag_uplink_free(ag_uplink *u)
{
    if (u == NULL)
        return;
    unpublish(u);
    if (u->n_carry > 0)
        SV_LOG(SV_LOG_ERROR, MOD, "usage of %zu users could not be written to the outbox",
               u->n_carry);
    u->freeing = true;
    u->closing += 2;
    uv_close((uv_handle_t *)&u->flush_timer, timer_closed);
    uv_close((uv_handle_t *)&u->trim_timer, timer_closed);
    for (size_t i = 0; i < u->n_machines; i++) {
        up_machine *m = u->machines[i];
        pn_xb_machine_client_free(m->client); /* requests in flight end without callbacks */
        m->client = NULL;
        u->closing++;
        uv_close((uv_handle_t *)&m->timer, machine_timer_closed);
    }
    while (u->n > 0)
        node_close(u->nodes[u->n - 1]);
    db_close(u->db);
    u->db = NULL;
}

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

/* The node billing @p uid: the first whose user list holds it, else the first (as owner()). */
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
