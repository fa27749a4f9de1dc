/*
 * Changes pushed over a node's channel (Xboard, PROTOCOLS-2.md §6): node settings, user lists
 * and user deltas, applied at once, offered to the node manager and stored once they applied;
 * a delta that does not apply cleanly, or a resync, asks for a full pull; a channel that drops
 * asks for a pull at once. And a node's start: its pull and push timers and its channel.
 * Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/lower.h"
#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

/* ---------------------------------------------------------------------------------------- */
/* pushed changes (Xboard's node channel, PROTOCOLS-2.md §6)                                  */
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
    ag__up_publish(nd->u);
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

void ag__up_ev_node(void *arg, pn_node *node, const char *body, size_t len)
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
    ag__up_warn_unknown(nd);
    pushed_change(nd, PN_BODY_CONFIG, config_body(nd, body, len));
}

void ag__up_ev_users(void *arg, pn_users *users)
{
    up_node *nd = arg;
    if (nd->has_users && pn_users_equal(&nd->users, users))
        return;
    pn_users_free(&nd->users);
    nd->users = *users;
    memset(users, 0, sizeof *users);
    nd->has_users = true;
    nd->lent = false;
    ag__up_index_users(nd);
    SV_LOG(SV_LOG_INFO, MOD, "node %s: %zu users pushed by the panel", nd->tag, nd->users.n);
    pushed_change(nd, PN_BODY_USERS, pn_users_body(&nd->users));
}

void ag__up_ev_resync(void *arg, const sv_error *why)
{
    up_node *nd = arg;
    ag__up_pull_error(nd, why);
    pn_set_etag(nd->client, PN_BODY_CONFIG, NULL);
    pn_set_etag(nd->client, PN_BODY_USERS, NULL);
    ag__up_pull_now(nd);
}

/* once the list the uplink holds runs, it is shed (ag_uplink_applied): the
 * supervisor's running user set of the node, lowered from that very list, holds it. Refill it
 * from there before the list is edited (a pushed delta); a list lent to the node manager and
 * not applied is read again from its body. -ESTALE when the running set is not
 * that list any more, -ENOMEM. */
static int held_refill(up_node *nd)
{
    sv_error err = {0};
    if (nd->lent)
        return ag__up_users_unlend(nd, &err);
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

/* sync.user.delta: a delta that does not apply cleanly triggers a full pull. */
void ag__up_ev_delta(void *arg, const pn_users *add, const uint64_t *remove, size_t n_remove)
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
        ag__up_ev_resync(nd, &err);
        return;
    }
    pn_users_free(&nd->users);
    nd->users = next;
    nd->lent = false; /* a whole list again */
    ag__up_index_users(nd);
    SV_LOG(SV_LOG_INFO, MOD, "node %s: user delta pushed by the panel: %zu added or changed, "
           "%zu removed", nd->tag, add->n, n_remove);
    pushed_change(nd, PN_BODY_USERS, pn_users_body(&nd->users));
}

/* The channel dropped: poll over REST at once (it reconnects on its own). */
static void ev_channel(void *arg, bool up, const sv_error *why)
{
    (void)why;
    if (!up)
        ag__up_pull_now(arg);
}

static const pn_push_events push_events = {
    .node = ag__up_ev_node,
    .users = ag__up_ev_users,
    .delta = ag__up_ev_delta,
    .resync = ag__up_ev_resync,
    .channel = ev_channel,
};

/* ---------------------------------------------------------------------------------------- */
/* a node's start: its timers and its channel                                               */
/* ---------------------------------------------------------------------------------------- */

void ag__up_node_start(ag_uplink *u, up_node *nd)
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
    uv_timer_start(&nd->pull_timer, ag__up_on_pull_timer, 0, 0);
    uv_timer_start(&nd->push_timer, ag__up_on_push_timer, 0, 0); /* resend what is pending */
    int rc = nd->client->ops->watch != NULL ? nd->client->ops->watch(nd->client, &push_events,
                                                                     nd) : 0;
    if (rc != 0 && rc != -ENOTSUP) /* -ENOTSUP: a machine's node, polled over REST */
        SV_LOG(SV_LOG_WARN, MOD, "node %s: panel push channel not started, polling only",
               nd->tag);
}
