/*
 * One remote node of the uplink: made with its panel client and its stored last good state
 * (a stored pair this version refuses is skipped: the node waits for the panel), added to the
 * uplink, closed (its memory goes once its timers closed, its outbox rows stay in the store).
 * Its held state becomes the stored last good state only once it applied (ag_uplink_applied).
 * The node manager reads the held state through ag_uplink_client, which answers at once; a
 * whole user list is lent to it, not copied, and read again from its body if it did not apply.
 * Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/lower.h"
#include "agent/uplink_internal.h"
#include "supervisor/util/log.h"

#define MOD "ag.uplink"

/* every body a panel may send can be stored as the last good state (1 000 000 users) */
_Static_assert(DB_BODY_MAX >= PN_BODY_MAX, "the store refuses bodies the panel clients take");

/* ---------------------------------------------------------------------------------------- */
/* a node's making and unmaking                                                             */
/* ---------------------------------------------------------------------------------------- */

/* Forget the held state and its ETags: the next pull fetches full bodies (never a 304 for a
 * state the uplink no longer holds) and counts as a change. */
void ag__up_forget_state(up_node *nd)
{
    pn_node_free(&nd->node);
    pn_users_free(&nd->users);
    nd->has_node = nd->has_users = nd->lent = false;
    nd->unstored[PN_BODY_CONFIG] = nd->unstored[PN_BODY_USERS] = false;
    for (int k = 0; k < 2; k++) {
        free(nd->pushed[k]);
        nd->pushed[k] = NULL;
    }
    nd->from_store = false;
    pn_set_etag(nd->client, PN_BODY_CONFIG, NULL);
    pn_set_etag(nd->client, PN_BODY_USERS, NULL);
    ag__up_index_users(nd);
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
 * refuses (stored by an older version, or under other rules) is skipped with one
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
        ag__up_forget_state(nd);
    }
    if (nd->has_node)
        pn_set_etag(nd->client, PN_BODY_CONFIG, etags[0]);
    if (nd->has_users)
        pn_set_etag(nd->client, PN_BODY_USERS, etags[1]);
    free(etags[0]);
    free(etags[1]);
    nd->from_store = nd->has_node || nd->has_users;
    if (nd->has_users)
        ag__up_index_users(nd);
    if (nd->has_node && nd->has_users)
        SV_LOG(SV_LOG_INFO, MOD, "node %s: serving the stored state (%zu users) until the "
               "panel answers", nd->tag, nd->users.n);
}

/* The node's client and its stored state; no libuv handle yet (nothing to close on failure). */
int ag__up_node_prepare(ag_uplink *u, up_node *nd, const ag_node_config *nc, sv_error *err)
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
    ag__up_metrics_node(nd, nc->panel.status_interval_s);
    return 0;
}

/* Free what ag__up_node_prepare made (before any timer exists) and the node itself. */
void ag__up_node_unprepare(up_node *nd)
{
    pn_client_free(nd->client);
    pn_node_free(&nd->node);
    pn_users_free(&nd->users);
    uid_index_unref(nd->uids);
    free(nd->tag);
    free(nd->warned);
    free(nd->remote);
    free(nd->pushed[0]);
    free(nd->pushed[1]);
    free(nd);
}

/* Append a prepared node to the uplink. 0 or -ENOMEM. */
int ag__up_node_add(ag_uplink *u, up_node *nd)
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

void ag__up_closed(ag_uplink *u)
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
        nd->client = NULL; /* freed by ag__up_node_close */
        ag__up_node_unprepare(nd);
    }
    ag__up_closed(u);
}

/* Stop a started node and take it out of the uplink; its memory goes when its timers closed.
 * Its outbox rows stay in the store. Safe from inside its own callbacks. */
void ag__up_node_close(up_node *nd)
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
/* the held state becomes the last good state once it applied                               */
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
            pn_forget_body(nd->client, (enum pn_body_kind)k); /* the store has it */
        free(nd->pushed[k]);
        nd->pushed[k] = NULL;
    }
    nd->unstored[PN_BODY_CONFIG] = nd->unstored[PN_BODY_USERS] = false;
    /* the body, the store's page cache and the shed uuids were freed after the apply's trim
     * (agent/node.c on_loaded): give their pages back too */
    ag__up_trim_soon(nd->u);
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
        nd->lent = false; /* what was lent runs: the supervisor holds it */
        /* it runs: the supervisor holds the list (held_refill gets it back). Shed it
         * whole, or all but the ids and the panel's speed limits when the node caps them; before
         * the store, whose trim gives the pages back */
        (void)pn_users_shed(&nd->users, st->speed_limit != 0);
        if (nd->unstored[PN_BODY_CONFIG] || nd->unstored[PN_BODY_USERS])
            store_pair(nd);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* a whole list lent to the node manager (one copy of it at the apply's peak)                 */
/* ---------------------------------------------------------------------------------------- */

/* The text the held users state was read from, not yet stored: the pushed body, else the
 * client's last pulled one (store_pair's choice); NULL when there is none. */
static const char *held_users_text(up_node *nd, size_t *len)
{
    if (!nd->unstored[PN_BODY_USERS])
        return NULL;
    if (nd->pushed[PN_BODY_USERS] != NULL) {
        *len = strlen(nd->pushed[PN_BODY_USERS]);
        return nd->pushed[PN_BODY_USERS];
    }
    return pn_last_body(nd->client, PN_BODY_USERS, len, NULL);
}

/* Whether the whole held list can be read again: from its held body, or from the store when
 * it is the stored list (seeded, not run yet: a list replaced since is unstored). */
static bool rereadable(up_node *nd)
{
    size_t len = 0;
    if (nd->client == NULL || nd->client->ops->parse_body == NULL)
        return false;
    return nd->unstored[PN_BODY_USERS] ? held_users_text(nd, &len) != NULL : nd->from_store;
}

/* the node manager lowers the list once and sheds it; a copy of it held here beside
 * the body and the lowered set was a third of the peak. When the held list is whole and can be
 * read again (rereadable), move it to @p out and keep what pn_users_shed() with @p keep_limits
 * keeps (the digest; the ids and limits too when @p keep_limits): what runs is told from it as
 * before (pn_users_equal), and if the manager does not apply it, ag__up_users_unlend() reads
 * it again. Else @p out is a copy (pn_users_clone).
 * @return 0 (*out the caller's), or -ENOMEM / -EIO (nothing moved). */
int ag__up_users_lend(up_node *nd, bool keep_limits, pn_users *out)
{
    if (nd->users.shed || !rereadable(nd))
        return pn_users_clone(out, &nd->users);
    pn_users kept = {.n = nd->users.n, .shed = true};
    int rc = pn_users_digest(&nd->users, kept.digest);
    if (rc == 0 && keep_limits && kept.n > 0 &&
        (kept.users = malloc(kept.n * sizeof *kept.users)) == NULL)
        rc = -ENOMEM;
    if (rc != 0)
        return rc;
    for (size_t i = 0; kept.users != NULL && i < kept.n; i++) {
        kept.users[i] = nd->users.users[i];
        kept.users[i].uuid = NULL;
    }
    *out = nd->users;
    nd->users = kept;
    nd->lent = true;
    return 0;
}

/* Make a list lent to the node manager and not applied whole again, from its held body or the
 * store's (parsed as the pull or the start did; pn_users_restore() checks it is that list). A
 * list not lent is left alone.
 * @return 0, or an error with @p err set (the list stays shed). */
int ag__up_users_unlend(up_node *nd, sv_error *err)
{
    if (!nd->lent)
        return 0;
    size_t len = 0;
    char *stored = NULL, *etag = NULL;
    const char *text = held_users_text(nd, &len);
    if (text == NULL && !nd->unstored[PN_BODY_USERS] &&
        db_state_get(nd->u->db, nd->tag, DB_STATE_USERS, &etag, &stored, &len, err) == 0)
        text = stored;
    free(etag);
    if (text == NULL || nd->client == NULL || nd->client->ops->parse_body == NULL) {
        free(stored);
        return sv_error_set(err, -ESTALE, "the held user list has no body to be read from");
    }
    pn_node none = {0};
    pn_users whole = {0};
    int rc = nd->client->ops->parse_body(nd->client, PN_BODY_USERS, text, len, &none, &whole,
                                         err);
    free(stored);
    pn_node_free(&none);
    if (rc == 0 && (rc = pn_users_restore(&nd->users, &whole)) != 0)
        sv_error_set(err, rc, "the held user list does not read back from its body");
    pn_users_free(&whole);
    if (rc == 0)
        nd->lent = false;
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* the node manager's view: a client answering from the last good state                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct snap_client {
    pn_client base;
    ag_uplink *u; /* borrowed: the node manager's clients live within one load */
    char *tag;
    bool keep_limits; /* the node has a speed limit of its own (ag_uplink_applied's shed) */
} snap_client;

/* The live node of @p tag (a retiring node is no longer offered). */
up_node *ag__up_find_node(ag_uplink *u, const char *tag)
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
    up_node *nd = ag__up_find_node(sc->u, sc->tag);
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

/* The held list: lent (moved) when it can be read again from its body, else a copy; a list
 * lent before and not applied is first made whole again. */
static int snap_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    snap_client *sc = (snap_client *)c;
    up_node *nd = ag__up_find_node(sc->u, sc->tag);
    sv_error err = {0};
    pn_users out;
    if (nd == NULL || !nd->has_users) {
        sv_error_set(&err, -EAGAIN, "%s panel: no user list yet",
                     nd != NULL ? client_type(nd) : "remote");
        cb(c, -EAGAIN, NULL, &err, arg);
        return 0;
    }
    int rc = ag__up_users_unlend(nd, &err);
    if (rc != 0) {
        SV_LOG(SV_LOG_ERROR, MOD, "node %s: %s: forgotten until the next pull", nd->tag,
               err.msg);
        ag__up_forget_state(nd); /* the next pull brings it whole */
        cb(c, rc, NULL, &err, arg);
        return 0;
    }
    if (ag__up_users_lend(nd, sc->keep_limits, &out) != 0)
        return -ENOMEM;
    cb(c, PN_OK, &out, NULL, arg);
    pn_users_free(&out);
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
    if (ag__up_find_node(u, nc->tag) == NULL)
        return sv_error_set(err, -ENOENT, "node %s: %s panel not started (its settings "
                            "changed: restart katana)", nc->tag,
                            ag_panel_type_name(nc->panel.type));
    snap_client *s = calloc(1, sizeof *s);
    if (s == NULL || (s->tag = strdup(nc->tag)) == NULL) {
        free(s);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    s->u = u;
    s->keep_limits = nc->speed_limit != 0;
    s->base.ops = &snap_ops;
    *out = &s->base;
    return 0;
}
