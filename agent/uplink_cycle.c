/*
 * A node's two timers over REST: the pull (node settings and users, every pull_interval, with
 * backoff while it fails) and the push (the outbox's next batch; alive IPs, status, alivelist
 * and the detect log once per push_interval). They start each other, so they share this file:
 * a batch an ordered panel failed part-way (PN_USAGE_ORDERED) is held and asks for a pull whose
 * users answer settles it and pushes again; a pull that changes the push interval restarts the
 * push timer. A node its machine no longer lists hands its outbox to a sibling from its push
 * timer. Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

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

/* ---------------------------------------------------------------------------------------- */
/* push                                                                                       */
/* ---------------------------------------------------------------------------------------- */

static void push_result(up_node *nd, int rc, const char *msg)
{
    nd->last_push_ms = (uint64_t)now_ms();
    nd->last_push_status = rc;
    snprintf(nd->last_push_error, sizeof nd->last_push_error, "%.159s", rc != 0 ? msg : "");
}

static void push_schedule(up_node *nd, bool failed)
{
    uint64_t d = push_ms(nd);
    if (failed)
        d = backoff_ms(++nd->push_fails, d);
    else
        nd->push_fails = 0;
    uv_timer_start(&nd->push_timer, ag__up_on_push_timer, d, 0);
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
    ag__up_pull_now(nd);
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
        uv_timer_start(&nd->push_timer, ag__up_on_push_timer, 0, 0);
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
    ag__up_publish(nd->u);
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
/* a node its machine dropped: its outbox goes to a sibling                                 */
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
    up_node *to = ag__up_find_node(nd->u, nd->tag);
    sv_error err = {0};
    ag_uplink *u = nd->u;
    if (to != NULL) { /* listed again with another type: the new node has the same tag and
                         so already pushes these rows */
        ag__up_node_close(nd);
        if (!to->pushing)
            uv_timer_start(&to->push_timer, ag__up_on_push_timer, 0, 0);
        ag__up_publish(u);
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
    ag__up_node_close(nd);
    if (!to->pushing) /* now, not a push interval later */
        uv_timer_start(&to->push_timer, ag__up_on_push_timer, 0, 0);
    ag__up_publish(u);
    return true;
}

/* ---------------------------------------------------------------------------------------- */
/* the push timer: outbox, alive IPs, status, alivelist, detect log                         */
/* ---------------------------------------------------------------------------------------- */

void ag__up_on_push_timer(uv_timer_t *t)
{
    up_node *nd = t->data;
    if (nd->pushing)
        return;
    if (nd->retiring && retire_to_sibling(nd))
        return; /* closed */
    if (nd->push_fails == 0 && !nd->retiring) { /* once per push interval, not on retries */
        ag__up_report_alive(nd);
        ag__up_report_status(nd);
        ag__up_metrics_rest(nd);
        if (nd->client->ops->fetch_alivelist != NULL)
            nd->client->ops->fetch_alivelist(nd->client, ag__up_on_alivelist, nd);
    }
    ag_uplink_flush(nd->u);
    ag__up_audit_report(nd);
    if (nd->held != 0) { /* settled by a users answer (settle_held), then pushed at once */
        ag__up_pull_now(nd);
        push_schedule(nd, true);
        return;
    }
    db_batch b;
    sv_error err = {0};
    int rc = db_batch_claim(nd->u->db, nd->tag, &b, &err);
    ag__up_store_result(nd, &nd->claim_failing, rc, "outbox read", err.msg);
    if (rc != 0) {
        push_result(nd, rc, err.msg);
        ag__up_publish(nd->u);
        push_schedule(nd, true);
        return;
    }
    if (b.n == 0 && nd->retiring) { /* everything it held reached the panel */
        SV_LOG(SV_LOG_INFO, MOD, "node %s: removed from its machine, pending usage pushed",
               nd->tag);
        ag_uplink *u = nd->u;
        ag__up_node_close(nd);
        ag__up_publish(u);
        return;
    }
    if (b.n == 0) { /* an empty push does nothing on the panel (PANEL.md §1.3) */
        ag__up_publish(nd->u);
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
    ag__up_publish(nd->u);
}

/* ---------------------------------------------------------------------------------------- */
/* pull                                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Record this pull's first error for the REST API (each pull's outcome). */
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
    uv_timer_start(&nd->pull_timer, ag__up_on_pull_timer, d, 0);
    ag__up_publish(nd->u);
    if (nd->pull_changed && nd->has_node && nd->has_users && nd->u->on_change != NULL) {
        ag_uplink_flush(nd->u); /* usage of users about to be removed is queued first */
        nd->u->on_change(nd->u->arg);
    } else if (!nd->pull_failed && nd->has_node && nd->has_users) {
        /* certificate files are re-read on every panel sync, also when the panel's
         * data did not change (a change reloads them through on_change); a refusal is logged
         * by the supervisor, once while the files stay the same */
        sv_error err = {0};
        (void)sv_reload_certs(nd->u->sv, &err);
    }
}

/* A refused pull answer: one warning while the panel keeps giving the same error
 * ("one clear error"), the repeats at debug level; a good pull re-arms the warning. */
void ag__up_pull_error(up_node *nd, const sv_error *err)
{
    if (strncmp(nd->pull_error, err->msg, sizeof nd->pull_error - 1) == 0) {
        SV_LOG(SV_LOG_DEBUG, MOD, "node %s: %s (again)", nd->tag, err->msg);
        return;
    }
    snprintf(nd->pull_error, sizeof nd->pull_error, "%.159s", err->msg);
    SV_LOG(SV_LOG_WARN, MOD, "node %s: %s (keeping the running state)", nd->tag, err->msg);
}

/* Bytes of up_node.warned at most: past them, further unknown keys are logged at debug. */
#define WARNED_MAX 4096

/* Unknown keys in a panel's node body are ignored, never refused (panels add keys all the
 * time), and each is warned about once per node, not on every pull (docs/configuration.md). */
void ag__up_warn_unknown(up_node *nd)
{
    const char *line = nd->node.unknown;
    while (line != NULL && *line != '\0') {
        const char *nl = strchr(line, '\n');
        int n = (int)(nl != NULL ? (size_t)(nl - line) : strlen(line));
        char key[320]; /* "\n<line>\n": a line is a key path and a known key (panel/keys.h) */
        snprintf(key, sizeof key, "\n%.*s\n", n, line);
        line = nl != NULL ? nl + 1 : line + n;
        if (nd->warned != NULL && strstr(nd->warned, key) != NULL)
            continue; /* warned is "\nA\nB\n": each line between two newlines */
        size_t old = nd->warned != NULL ? strlen(nd->warned) : 0;
        const char *add = old > 0 ? key + 1 : key;
        char *w = old + strlen(add) < WARNED_MAX ? realloc(nd->warned, old + strlen(add) + 1)
                                                  : NULL;
        if (w != NULL) {
            memcpy(w + old, add, strlen(add) + 1);
            nd->warned = w;
        }
        SV_LOG(w != NULL ? SV_LOG_WARN : SV_LOG_DEBUG, MOD,
               "node %s: node body: unknown key %.*s, ignored", nd->tag, n, key + 1);
    }
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
        ag__up_warn_unknown(nd);
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
            uv_timer_start(&nd->push_timer, ag__up_on_push_timer, push_ms(nd), 0);
    } else if (rc < 0) {
        pull_failed(nd, rc, err != NULL ? err->msg : "pull failed");
        ag__up_pull_error(nd, err);
    }
    pull_answered(nd);
}

static void on_users(pn_client *c, int rc, pn_users *users, const sv_error *err, void *arg)
{
    (void)c;
    up_node *nd = arg;
    if (rc == PN_OK && nd->has_users && nd->users.shed && pn_users_equal(&nd->users, users)) {
        /* the running list answered again in full (a panel without ETags): it stays shed, and
         * once stored (ag_uplink_applied) the new body need not be kept either */
        pn_users_free(users);
        if (!nd->unstored[PN_BODY_USERS])
            pn_forget_body(nd->client, PN_BODY_USERS);
        ag__up_trim_soon(nd->u); /* the answer's pages back, as after a store */
    } else if (rc == PN_OK) {
        bool same = nd->has_users && pn_users_equal(&nd->users, users);
        pn_users_free(&nd->users);
        nd->users = *users;
        memset(users, 0, sizeof *users);
        nd->pull_changed |= !same || !nd->has_users;
        nd->has_users = true;
        nd->lent = false;
        ag__up_index_users(nd);
        nd->unstored[PN_BODY_USERS] = true;
        free(nd->pushed[PN_BODY_USERS]);
        nd->pushed[PN_BODY_USERS] = NULL;
    } else if (rc < 0) {
        pull_failed(nd, rc, err != NULL ? err->msg : "pull failed");
        ag__up_pull_error(nd, err);
    }
    if (rc >= 0) { /* PN_OK or PN_NOT_MODIFIED: nd->uids is the panel's list now */
        nd->users_answered = nd->pulls_started;
        settle_held(nd);
    }
    pull_answered(nd);
}

void ag__up_on_pull_timer(uv_timer_t *t)
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

void ag__up_pull_now(up_node *nd)
{
    if (nd->pulls_pending == 0)
        uv_timer_start(&nd->pull_timer, ag__up_on_pull_timer, 0, 0);
}
