/*
 * Node manager (agent/node.h): fetch every node through its panel client, then reconcile the
 * supervisor with the result. Control loop only.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/node.h"
#include "supervisor/util/log.h"

#define MOD "ag.node"

int ag_panel_new(const ag_node_config *nc, const ag_remote_source *remote, pn_client **out,
                 sv_error *err)
{
    *out = NULL;
    switch (nc->panel.type) {
    case AG_PANEL_UNIPROXY:
    case AG_PANEL_SSPANEL:
    case AG_PANEL_XBOARD:
        if (remote != NULL && remote->client != NULL)
            return remote->client(remote->arg, nc, out, err);
        return sv_error_set(err, -ENOTSUP, "node %s: %s panel not running (katana check "
                            "--offline does not contact the panel)", nc->tag,
                            ag_panel_type_name(nc->panel.type));
    case AG_PANEL_LOCAL: {
        pn_local_options o = {
            .node = nc->panel.node,
            .node_file = nc->panel.node_file,
            .users = nc->panel.users,
            .users_file = nc->panel.users_file,
            .node_type = nc->panel.node_type,
        };
        int rc = pn_local_new(&o, out, err);
        if (rc != 0) {
            sv_error inner = *err;
            sv_error_set(err, rc, "node %s: %s", nc->tag, inner.msg);
        }
        return rc;
    }
    }
    return sv_error_set(err, -EINVAL, "node %s: unsupported panel type", nc->tag);
}

/* ------------------------------------------------------------------------------------------ */
/* Fetch job                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct fetch_job fetch_job;

typedef struct fetch_slot {
    fetch_job *job;
    size_t idx;
} fetch_slot;

struct fetch_job {
    pn_client **clients;
    size_t n_clients;        /* the fleet may be taken by the callback: count them apart */
    fetch_slot *slots;
    ag_fleet fleet;          /* being filled; tags and listen copied from the config */
    const ag_fleet *running; /* for PN_NOT_MODIFIED */
    size_t pending;          /* answers still due, +1 while issuing */
    int status;              /* first error */
    sv_error err;
    ag_fetch_cb cb;
    void *arg;
};

static void job_free(fetch_job *j)
{
    for (size_t i = 0; i < j->n_clients; i++)
        pn_client_free(j->clients[i]);
    free(j->clients);
    free(j->slots);
    ag_fleet_free(&j->fleet);
    free(j);
}

static void job_fail(fetch_job *j, size_t idx, int code, const char *msg)
{
    if (j->status != 0)
        return;
    j->status = code < 0 ? code : -EIO;
    sv_error_set(&j->err, j->status, "node %s: %s", j->fleet.nodes[idx].tag, msg);
}

static void job_answered(fetch_job *j)
{
    if (--j->pending > 0)
        return;
    if (j->status != 0)
        j->cb(j->arg, j->status, NULL, &j->err);
    else
        j->cb(j->arg, 0, &j->fleet, NULL);
    job_free(j);
}

static const ag_node_state *running_node(const fetch_job *j, const char *tag)
{
    for (size_t i = 0; j->running != NULL && i < j->running->n; i++)
        if (strcmp(j->running->nodes[i].tag, tag) == 0)
            return &j->running->nodes[i];
    return NULL;
}

static void on_node(pn_client *c, int result, pn_node *node, const sv_error *err, void *arg)
{
    fetch_slot *s = arg;
    fetch_job *j = s->job;
    ag_node_state *st = &j->fleet.nodes[s->idx];
    if (result == PN_OK) {
        st->node = *node;
        memset(node, 0, sizeof *node);
    } else if (result == PN_NOT_MODIFIED) {
        const ag_node_state *old = running_node(j, st->tag);
        if (old == NULL)
            job_fail(j, s->idx, -EPROTO, "panel: node not modified, but none is known");
        else if (pn_node_clone(&st->node, &old->node) != 0)
            job_fail(j, s->idx, -ENOMEM, "out of memory");
    } else {
        job_fail(j, s->idx, result, err != NULL ? err->msg : "node fetch failed");
    }
    job_answered(j);
}

static void on_users(pn_client *c, int result, pn_users *users, const sv_error *err, void *arg)
{
    fetch_slot *s = arg;
    fetch_job *j = s->job;
    ag_node_state *st = &j->fleet.nodes[s->idx];
    if (result == PN_OK) {
        st->users = *users;
        memset(users, 0, sizeof *users);
    } else if (result == PN_NOT_MODIFIED) {
        const ag_node_state *old = running_node(j, st->tag);
        if (old == NULL)
            job_fail(j, s->idx, -EPROTO, "panel: users not modified, but none are known");
        else if (pn_users_clone(&st->users, &old->users) != 0)
            job_fail(j, s->idx, -ENOMEM, "out of memory");
    } else {
        job_fail(j, s->idx, result, err != NULL ? err->msg : "users fetch failed");
    }
    job_answered(j);
}

/* Allocate the job and one client per node; nothing is asked yet. */
static int job_new(const ag_config *cfg, const ag_remote_source *remote, fetch_job **out,
                   sv_error *err)
{
    size_t n = cfg->n_nodes;
    fetch_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    j->clients = calloc(n, sizeof *j->clients);
    j->slots = calloc(n, sizeof *j->slots);
    j->fleet.nodes = calloc(n, sizeof *j->fleet.nodes);
    if (j->clients == NULL || j->slots == NULL || j->fleet.nodes == NULL) {
        job_free(j);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    j->fleet.n = n;
    j->fleet.user_removal = cfg->user_removal;
    j->fleet.drain = cfg->drain;
    j->fleet.outbound = cfg->outbound;
    j->n_clients = n;
    for (size_t i = 0; i < n; i++) {
        const ag_node_config *nc = &cfg->nodes[i];
        ag_node_state *st = &j->fleet.nodes[i];
        j->slots[i] = (fetch_slot){.job = j, .idx = i};
        st->tag = strdup(nc->tag);
        st->listen = nc->listen != NULL ? strdup(nc->listen) : NULL;
        st->allow_private = nc->allow_private;
        st->accept_proxy_protocol = nc->accept_proxy_protocol;
        st->no_auth = nc->no_auth;
        memcpy(st->trusted_forwarders, nc->trusted_forwarders, sizeof st->trusted_forwarders);
        st->n_trusted_forwarders = nc->n_trusted_forwarders;
        st->user_removal = nc->user_removal;
        st->has_outbound = nc->has_outbound;
        st->outbound = nc->outbound;
        st->speed_limit = nc->speed_limit;
        st->cert = nc->cert.mode == AG_CERT_FILE   ? SV_CERT_FILE
                   : nc->cert.mode == AG_CERT_SELF ? SV_CERT_SELF
                                                   : SV_CERT_NONE;
        st->cert_file = nc->cert.cert_file != NULL ? strdup(nc->cert.cert_file) : NULL;
        st->key_file = nc->cert.key_file != NULL ? strdup(nc->cert.key_file) : NULL;
        st->fallback = nc->fallback != NULL ? strdup(nc->fallback) : NULL;
        if (st->tag == NULL || (nc->listen != NULL && st->listen == NULL) ||
            (nc->cert.cert_file != NULL && st->cert_file == NULL) ||
            (nc->cert.key_file != NULL && st->key_file == NULL) ||
            (nc->fallback != NULL && st->fallback == NULL)) {
            job_free(j);
            return sv_error_set(err, -ENOMEM, "out of memory");
        }
        int rc = ag_panel_new(nc, remote, &j->clients[i], err);
        if (rc != 0) {
            job_free(j);
            return rc;
        }
    }
    *out = j;
    return 0;
}

static int fetch_start(const ag_config *cfg, const ag_fleet *running,
                       const ag_remote_source *remote, ag_fetch_cb cb, void *arg,
                       fetch_job **job_out, sv_error *err)
{
    fetch_job *j = NULL;
    int rc = job_new(cfg, remote, &j, err);
    if (rc != 0)
        return rc;
    j->running = running;
    j->cb = cb;
    j->arg = arg;
    j->pending = 2 * j->fleet.n + 1; /* the +1 keeps synchronous answers from finishing early */
    if (job_out != NULL)
        *job_out = j;
    for (size_t i = 0; i < j->n_clients; i++) {
        rc = pn_fetch_node(j->clients[i], on_node, &j->slots[i]);
        if (rc != 0) {
            job_fail(j, i, rc, "node fetch could not start");
            j->pending--;
        }
        rc = pn_fetch_users(j->clients[i], on_users, &j->slots[i]);
        if (rc != 0) {
            job_fail(j, i, rc, "users fetch could not start");
            j->pending--;
        }
    }
    job_answered(j);
    return 0;
}

int ag_fetch(uv_loop_t *loop, const ag_config *cfg, const ag_fleet *running,
             const ag_remote_source *remote, ag_fetch_cb cb, void *arg, sv_error *err)
{
    (void)loop; /* remote clients come from @p remote, already on their loop */
    return fetch_start(cfg, running, remote, cb, arg, NULL, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Manager                                                                                      */
/* ------------------------------------------------------------------------------------------ */

#define SYNC_QUEUE_MAX 16

/** A node's API status and whether the load in flight holds it. */
typedef struct node_entry {
    api_node_status st;
    bool in_load;
} node_entry;

/* One node's change refused while the rest of its load applied. */
typedef struct refusal {
    char tag[SV_TAG_MAX + 1];
    sv_error err; /* "node T: why" */
    sv_error why; /* as the supervisor or the lowering gave it */
} refusal;

struct ag_manager {
    uv_loop_t *loop;
    sv_supervisor *sv;
    ag_remote_source remote; /* remote panel clients (the uplink's); zero: refused */
    ag_fleet running;
    fetch_job *job; /* the load in flight, or NULL */
    bool loading;
    ag_load_cb cb;
    void *arg;
    /* REST API side: node status and sync requests, under lock */
    pthread_mutex_t lock;
    node_entry *entries;
    size_t n_entries;
    uv_async_t *sync_async; /* NULL until ag_manager_enable_sync() */
    ag_sync_cb sync_cb;
    void *sync_arg;
    char sync_queue[SYNC_QUEUE_MAX][SV_TAG_MAX + 1];
    size_t n_sync;
    /* nodes of the load in flight whose change was refused alone (the others
     * applied); reset when a load starts, read by status_end */
    refusal *refused;
    size_t n_refused;
};

int ag_manager_new(uv_loop_t *loop, sv_supervisor *sv, const ag_remote_source *remote,
                   ag_manager **out)
{
    ag_manager *m = calloc(1, sizeof *m);
    if (m == NULL)
        return -ENOMEM;
    m->loop = loop;
    m->sv = sv;
    if (remote != NULL)
        m->remote = *remote;
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Node status and sync requests for the REST API                                              */
/* ------------------------------------------------------------------------------------------ */

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* @p url without user info ("user:pass@"), query and fragment, which may hold secrets. */
static void url_public(const char *url, char *out, size_t cap)
{
    const char *host = strstr(url, "://");
    host = host != NULL ? host + 3 : url;
    size_t scheme = (size_t)(host - url);
    size_t auth = strcspn(host, "/?#");
    const char *at = memchr(host, '@', auth);
    if (at != NULL)
        host = at + 1;
    snprintf(out, cap, "%.*s%.*s", (int)scheme, url, (int)strcspn(host, "?#"), host);
}

/* Where the panel is, without secrets (a remote panel's URL without its token). */
static void panel_describe(const ag_node_config *nc, api_node_status *st)
{
    switch (nc->panel.type) {
    case AG_PANEL_LOCAL:
        snprintf(st->panel_type, sizeof st->panel_type, "local");
        snprintf(st->panel_url, sizeof st->panel_url, "%s",
                 nc->panel.node_file != NULL ? nc->panel.node_file : "");
        return;
    case AG_PANEL_UNIPROXY: /* the token is a separate key; drop user info and any query too */
    case AG_PANEL_SSPANEL:
    case AG_PANEL_XBOARD:
        snprintf(st->panel_type, sizeof st->panel_type, "%s",
                 ag_panel_type_name(nc->panel.type));
        url_public(nc->panel.url != NULL ? nc->panel.url : "", st->panel_url,
                   sizeof st->panel_url);
        return;
    default:
        snprintf(st->panel_type, sizeof st->panel_type, "unknown");
        st->panel_url[0] = '\0';
        return;
    }
}

static node_entry *entry_find(ag_manager *m, const char *tag)
{
    for (size_t i = 0; i < m->n_entries; i++)
        if (strcmp(m->entries[i].st.tag, tag) == 0)
            return &m->entries[i];
    return NULL;
}

/* A load of cfg starts: every node of it gets an entry (kept on failure), marked in_load.
 * declare: no load starts (ag_manager_declare): entries only, an unexpanded machine entry
 * skipped. */
static void status_begin(ag_manager *m, const ag_config *cfg, bool declare)
{
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_entries && !declare; i++)
        m->entries[i].in_load = false;
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        if (declare && cfg->nodes[i].panel.machine_id != NULL &&
            cfg->nodes[i].panel.node_id == NULL)
            continue; /* its nodes come from the panel's machine list */
        node_entry *e = entry_find(m, cfg->nodes[i].tag);
        if (e == NULL) {
            node_entry *v = realloc(m->entries, (m->n_entries + 1) * sizeof *v);
            if (v == NULL)
                continue; /* status only: the load goes on */
            m->entries = v;
            e = &m->entries[m->n_entries++];
            memset(e, 0, sizeof *e);
            snprintf(e->st.tag, sizeof e->st.tag, "%s", cfg->nodes[i].tag);
        }
        e->in_load = !declare;
        panel_describe(&cfg->nodes[i], &e->st);
    }
    pthread_mutex_unlock(&m->lock);
}

static const refusal *refusal_find(const ag_manager *m, const char *tag)
{
    for (size_t i = 0; i < m->n_refused; i++)
        if (strcmp(m->refused[i].tag, tag) == 0)
            return &m->refused[i];
    return NULL;
}

/* The load ended with status/err, its overall result: a pull refused after it was fetched is
 * a failed pull too (the served state stays the last good one). When only some nodes were
 * refused (m->refused), each of those has its own error and the others applied. */
static void status_end(ag_manager *m, int status, const sv_error *err)
{
    uint64_t now = wall_ms(), epoch = sv_epoch(m->sv);
    const char *msg = status != 0 && err != NULL ? err->msg : "";
    pthread_mutex_lock(&m->lock);
    size_t kept = 0;
    for (size_t i = 0; i < m->n_entries; i++) {
        node_entry *e = &m->entries[i];
        if (!e->in_load && (status == 0 || m->n_refused > 0))
            continue; /* the node left the config (the load applied) */
        const refusal *own = refusal_find(m, e->st.tag);
        int st = own != NULL ? own->err.code : m->n_refused > 0 ? 0 : status;
        const char *why = own != NULL ? own->err.msg : m->n_refused > 0 ? "" : msg;
        if (e->in_load) {
            e->st.last_pull_ms = now;
            e->st.last_pull_status = st; /* fetched but refused: not ok either */
            snprintf(e->st.last_pull_error, sizeof e->st.last_pull_error, "%.159s", why);
            snprintf(e->st.last_apply_error, sizeof e->st.last_apply_error, "%.159s", why);
            if (st != 0)
                e->st.apply_errors++;
        }
        if (e->in_load && st == 0) {
            const ag_node_state *ns = NULL;
            for (size_t k = 0; k < m->running.n && ns == NULL; k++)
                if (strcmp(m->running.nodes[k].tag, e->st.tag) == 0)
                    ns = &m->running.nodes[k];
            e->st.applied = true;
            e->st.applied_ms = now;
            e->st.epoch = epoch;
            e->st.users = ns != NULL ? ns->users.n : 0;
            if (!sv_inbound_cert_expiry(m->sv, e->st.tag, &e->st.cert_not_after))
                e->st.cert_not_after = 0;
            e->st.applies++;
        }
        m->entries[kept++] = *e;
    }
    m->n_entries = kept;
    pthread_mutex_unlock(&m->lock);
}

void ag_manager_declare(ag_manager *m, const ag_config *cfg)
{
    status_begin(m, cfg, true);
}

long ag_manager_status(ag_manager *m, api_node_status **out)
{
    pthread_mutex_lock(&m->lock);
    size_t n = m->n_entries;
    *out = malloc((n > 0 ? n : 1) * sizeof **out);
    for (size_t i = 0; *out != NULL && i < n; i++)
        (*out)[i] = m->entries[i].st;
    pthread_mutex_unlock(&m->lock);
    return *out != NULL ? (long)n : -ENOMEM;
}

static void on_sync_async(uv_async_t *h)
{
    ag_manager *m = h->data;
    char tags[SYNC_QUEUE_MAX][SV_TAG_MAX + 1];
    pthread_mutex_lock(&m->lock);
    size_t n = m->n_sync;
    memcpy(tags, m->sync_queue, n * sizeof tags[0]);
    m->n_sync = 0;
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < n; i++)
        m->sync_cb(m->sync_arg, tags[i]);
}

int ag_manager_enable_sync(ag_manager *m, ag_sync_cb cb, void *arg)
{
    if (m->sync_async != NULL)
        return -EALREADY;
    uv_async_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return -ENOMEM;
    int rc = uv_async_init(m->loop, a, on_sync_async);
    if (rc != 0) {
        free(a);
        return rc;
    }
    a->data = m;
    m->sync_cb = cb;
    m->sync_arg = arg;
    pthread_mutex_lock(&m->lock);
    m->sync_async = a;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int ag_manager_request_sync(ag_manager *m, const char *tag)
{
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    bool queued = false;
    for (size_t i = 0; i < m->n_sync; i++)
        queued |= strcmp(m->sync_queue[i], tag) == 0;
    if (m->sync_async == NULL)
        rc = -ENOTSUP;
    else if (entry_find(m, tag) == NULL)
        rc = -ENOENT;
    else if (!queued && m->n_sync == SYNC_QUEUE_MAX)
        rc = -EAGAIN;
    else if (!queued)
        snprintf(m->sync_queue[m->n_sync++], sizeof m->sync_queue[0], "%s", tag);
    if (rc == 0)
        uv_async_send(m->sync_async);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static void free_on_close(uv_handle_t *h)
{
    free(h);
}

bool ag_manager_busy(const ag_manager *m)
{
    return m->loading;
}

const ag_fleet *ag_manager_running(const ag_manager *m)
{
    return &m->running;
}

void ag_manager_free(ag_manager *m)
{
    if (m == NULL)
        return;
    if (m->job != NULL)
        job_free(m->job); /* clients end their requests without callbacks */
    ag_fleet_free(&m->running);
    if (m->sync_async != NULL) /* freed when the loop runs the close */
        uv_close((uv_handle_t *)m->sync_async, free_on_close);
    pthread_mutex_destroy(&m->lock);
    free(m->entries);
    free(m->refused);
    free(m);
}

static bool policy_same(sv_policy a, sv_policy b)
{
    return a.kind == b.kind && a.grace_ms == b.grace_ms;
}

static bool same_settings(const ag_fleet *a, const ag_fleet *b)
{
    if (a->n != b->n || !policy_same(a->user_removal, b->user_removal) ||
        !policy_same(a->drain, b->drain) ||
        !sv_socket_policy_equal(&a->outbound, &b->outbound))
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (!ag_node_settings_equal(&a->nodes[i], &b->nodes[i]))
            return false;
    return true;
}

/* Record that @p tag's change was refused (@p code, @p why) while its load goes on: the node
 * keeps what it runs (logged by refused_result once the others applied). 0 or -ENOMEM. */
static int refuse_node(ag_manager *m, const char *tag, int code, const sv_error *why)
{
    refusal *v = realloc(m->refused, (m->n_refused + 1) * sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    m->refused = v;
    refusal *r = &v[m->n_refused++];
    snprintf(r->tag, sizeof r->tag, "%s", tag);
    sv_error_set(&r->err, code < 0 ? code : -EINVAL, "node %s: %s", tag, why->msg);
    r->why = *why;
    r->why.code = r->err.code;
    return 0;
}

/* The result of a load whose refused nodes were set aside: 0 when none was, else the first
 * refusal (the other nodes applied). */
static int refused_result(const ag_manager *m, sv_error *err)
{
    if (m->n_refused == 0)
        return 0;
    for (size_t i = 0; i < m->n_refused; i++)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: change refused, the node keeps its running state: "
               "%s", m->refused[i].tag, m->refused[i].why.msg);
    return sv_error_set(err, m->refused[0].err.code, "%s (every other node applied)",
                        m->refused[0].err.msg);
}

/* Nothing but refused nodes changed: the load is refused as a whole, with the first
 * refusal's own text (as before nodes were set aside). */
static int refused_whole(ag_manager *m, sv_error *err)
{
    *err = m->refused[0].why;
    m->n_refused = 0;
    return err->code;
}

/* Whether node @p st of a load differs from what runs (new, other settings or users). */
static bool node_changed(const ag_manager *m, const ag_node_state *st)
{
    for (size_t k = 0; k < m->running.n; k++)
        if (strcmp(m->running.nodes[k].tag, st->tag) == 0)
            return !ag_node_settings_equal(&m->running.nodes[k], st) ||
                   !pn_users_equal(&m->running.nodes[k].users, &st->users);
    return true;
}

/* Settings unchanged: edit the user sets that differ; a node whose new set is refused keeps its
 * running one and the others are still edited (nodes are independent). */
static int reconcile_users(ag_manager *m, ag_fleet *next, sv_error *err)
{
    size_t edited = 0;
    for (size_t i = 0; i < next->n; i++) {
        ag_node_state *cur = &m->running.nodes[i], *nxt = &next->nodes[i];
        if (pn_users_equal(&cur->users, &nxt->users))
            continue;
        sv_user_set set;
        sv_error nerr = {0};
        int rc = ag_lower_user_set(nxt->tag, &nxt->users, &set, &nerr);
        if (rc == 0)
            ag_lower_node_speed(&set, nxt->speed_limit);
        if (rc == 0) /* lowered: only its digest is needed now (the secrets are in
                        the set; a list that cannot be shed stays whole) */
            (void)pn_users_shed(&nxt->users, nxt->speed_limit != 0);
        if (rc == 0)
            rc = sv_set_users_take(m->sv, &set, &nerr); /* zeroes set */
        sv_user_set_free(&set);
        if (rc != 0) { /* this node keeps its running users; the others go on */
            if ((rc = refuse_node(m, nxt->tag, rc, &nerr)) != 0)
                return sv_error_set(err, rc, "out of memory");
            continue;
        }
        pn_users tmp = cur->users; /* the old list goes with next and is freed with it */
        cur->users = nxt->users;
        nxt->users = tmp;
        edited++;
        SV_LOG(SV_LOG_INFO, MOD, "node %s: users updated, %zu users", cur->tag, cur->users.n);
    }
    if (edited == 0 && m->n_refused > 0)
        return refused_whole(m, err); /* next stays the caller's, as on any refusal */
    if (edited == 0)
        SV_LOG(SV_LOG_INFO, MOD, "nothing changed");
    ag_fleet_free(next);
    return 0;
}

/* Close the live sessions of nodes whose transport/protocol settings changed. */
static void close_changed(ag_manager *m, const ag_fleet *next)
{
    for (size_t i = 0; i < next->n; i++) {
        const ag_node_state *nxt = &next->nodes[i];
        for (size_t k = 0; k < m->running.n; k++) {
            const ag_node_state *cur = &m->running.nodes[k];
            if (strcmp(cur->tag, nxt->tag) != 0 || ag_node_transport_equal(cur, nxt))
                continue;
            sv_selector sel = {.kind = SV_SELECT_INBOUND, .inbound = nxt->tag};
            size_t closed = sv_close(m->sv, &sel);
            SV_LOG(SV_LOG_INFO, MOD, "node %s: transport or protocol changed, closed %zu "
                   "sessions", nxt->tag, closed);
        }
    }
}

/* the running fleet's user lists are shed (pn_users_shed) once applied, and a list the
 * panel answered "not modified" is a copy of one. Before such a fleet is lowered again, each
 * shed list is rebuilt from the supervisor's running user set of the node (ag_users_refill). */
static int refill_users(ag_manager *m, ag_fleet *next, sv_error *err)
{
    for (size_t i = 0; i < next->n; i++) {
        ag_node_state *nd = &next->nodes[i];
        int rc = ag_users_refill(&nd->users, sv_running_user_set(m->sv, nd->tag));
        if (rc != 0)
            return sv_error_set(err, rc, "node %s: %s", nd->tag, rc == -ENOMEM
                                ? "out of memory" : "the running users do not match the list held");
    }
    return 0;
}

/* Shed the running fleet's user lists (the supervisor holds the secrets). A node with a speed
 * limit of its own keeps its users' ids and limits: the running set holds their speeds capped
 * by it, from which the panel's figures cannot be told. A list that cannot be shed stays whole. */
static void shed_running(ag_manager *m)
{
    for (size_t i = 0; i < m->running.n; i++)
        (void)pn_users_shed(&m->running.nodes[i].users, m->running.nodes[i].speed_limit != 0);
}

/* once @p next is lowered into @p spec, which holds the secrets, its lists are needed
 * only as digests (shed_running's shed): shed them before the apply builds the supervisor's
 * tables. */
static void shed_lowered(ag_fleet *next)
{
    for (size_t i = 0; i < next->n; i++)
        (void)pn_users_shed(&next->nodes[i].users, next->nodes[i].speed_limit != 0);
}

/* The apply of @p spec failed: make @p next's lists whole again from the user sets lowered from
 * them (reconcile_set_aside lowers nodes again). 0, or -ENOMEM / -ESTALE (err set). */
static int unshed_lowered(ag_fleet *next, const sv_spec *spec, sv_error *err)
{
    for (size_t i = 0; i < next->n; i++) {
        ag_node_state *nd = &next->nodes[i];
        int rc = ag_users_refill(&nd->users, sv_spec_user_set(spec, nd->tag));
        if (rc != 0)
            return sv_error_set(err, rc, "node %s: %s", nd->tag, rc == -ENOMEM
                                ? "out of memory" : "the lowered users do not match the list");
    }
    return 0;
}

static int reconcile_apply(ag_manager *m, ag_fleet *next, sv_error *err)
{
    sv_spec spec;
    sv_apply_report report = {0};
    sv_apply_options opts = {.allow_disruptive = true};
    int rc = refill_users(m, next, err);
    if (rc != 0)
        return rc;
    rc = ag_lower_fleet(next, &spec, err);
    if (rc != 0)
        return rc;
    shed_lowered(next);
    rc = sv_apply_take(m->sv, &spec, &opts, &report, err);
    if (rc != 0) { /* the spec is left as it was */
        sv_error uerr = {0};
        if (unshed_lowered(next, &spec, &uerr) != 0) {
            SV_LOG(SV_LOG_ERROR, MOD, "%s: the refused load is not set aside by node", uerr.msg);
            rc = rc == -EINVAL ? -EIO : rc; /* no node is lowered alone from a shed list */
        }
    }
    sv_spec_free(&spec); /* zeroed when taken */
    if (rc != 0)
        return rc;
    SV_LOG(SV_LOG_DEBUG, MOD, "apply: %zu reused, %zu built, %zu swapped, %zu drained, "
           "%zu rebound, %zu restarted, %zu removed", report.n_reused, report.n_built,
           report.n_swapped, report.n_drained, report.n_rebound, report.n_restarted,
           report.n_removed);
    for (size_t i = 0; i < report.n_rebound; i++)
        SV_LOG(SV_LOG_DEBUG, MOD, "apply: rebound %s", report.rebound[i]);
    sv_apply_report_free(&report);
    close_changed(m, next);
    uint64_t epoch = sv_epoch(m->sv);
    for (size_t i = 0; i < next->n; i++)
        SV_LOG(SV_LOG_INFO, MOD, "node %s: applied epoch %" PRIu64 ", %zu users",
               next->nodes[i].tag, epoch, next->nodes[i].users.n);
    ag_fleet_free(&m->running);
    m->running = *next;
    memset(next, 0, sizeof *next);
    return 0;
}

bool ag_manager_partly_applied(const ag_manager *m)
{
    return m->n_refused > 0;
}

static size_t fleet_find(const ag_fleet *f, const char *tag)
{
    size_t i = 0;
    while (i < f->n && strcmp(f->nodes[i].tag, tag) != 0)
        i++;
    return i;
}

/* Lower node @p st alone (with @p next's fleet-wide settings) and validate it. */
static int node_alone_valid(const ag_fleet *next, const ag_node_state *st, sv_error *why)
{
    ag_fleet one = {.nodes = (ag_node_state *)st, .n = 1, .user_removal = next->user_removal,
                    .drain = next->drain, .outbound = next->outbound};
    sv_spec spec;
    int rc = ag_lower_fleet(&one, &spec, why);
    if (rc == 0) {
        rc = sv_validate(&spec, why);
        sv_spec_free(&spec);
    }
    return rc;
}

/* Swap each refused node of @p next with its running state in m->running (a second call swaps
 * them back). */
static void swap_refused(ag_manager *m, ag_fleet *next)
{
    for (size_t r = 0; r < m->n_refused; r++) {
        size_t i = fleet_find(next, m->refused[r].tag), k = fleet_find(&m->running,
                                                                        m->refused[r].tag);
        if (i == next->n || k == m->running.n)
            continue;
        ag_node_state tmp = next->nodes[i];
        next->nodes[i] = m->running.nodes[k];
        m->running.nodes[k] = tmp;
    }
}

/* The supervisor refused @p next as a whole (@p err): set aside every node refused on its own
 * (nodes are independent). A running node keeps its running state, a new one leaves
 * the load; then the rest applies. When no node alone is refused (a conflict between nodes,
 * such as one port twice), the load is refused as before. */
static int reconcile_set_aside(ag_manager *m, ag_fleet *next, sv_error *err)
{
    for (size_t i = 0; i < next->n;) {
        sv_error why = {0};
        int rc = node_alone_valid(next, &next->nodes[i], &why);
        if (rc == -ENOMEM || (rc != 0 && refuse_node(m, next->nodes[i].tag, rc, &why) != 0))
            return sv_error_set(err, -ENOMEM, "out of memory");
        if (rc == 0 || fleet_find(&m->running, next->nodes[i].tag) < m->running.n) {
            i++;
            continue;
        }
        ag_node_state_free(&next->nodes[i]); /* new and refused: not part of this load */
        memmove(&next->nodes[i], &next->nodes[i + 1], (next->n - i - 1) * sizeof *next->nodes);
        next->n--;
    }
    size_t changed = 0;
    for (size_t i = 0; i < next->n; i++)
        changed += refusal_find(m, next->nodes[i].tag) == NULL &&
                   node_changed(m, &next->nodes[i]);
    if (m->n_refused == 0) /* err still says why the whole was refused */
        return -EINVAL;
    if (changed == 0)
        return refused_whole(m, err);
    swap_refused(m, next);
    int rc = reconcile_apply(m, next, err);
    if (rc != 0) {
        swap_refused(m, next); /* what runs is unchanged */
        m->n_refused = 0;
    }
    return rc;
}

int ag_manager_reconcile(ag_manager *m, ag_fleet *next, sv_error *err)
{
    m->n_refused = 0;
    int rc;
    if (m->running.n > 0 && same_settings(&m->running, next)) {
        rc = reconcile_users(m, next, err);
        sv_error cerr = {0};
        /* certificates are re-read on every sync; a bad new pair keeps the old one
         * (the supervisor logs a refusal, once while the files stay the same) */
        if (rc == 0)
            (void)sv_reload_certs(m->sv, &cerr);
    } else {
        rc = reconcile_apply(m, next, err);
        if (rc == -EINVAL && next->n > 1)
            rc = reconcile_set_aside(m, next, err);
    }
    if (rc == 0)
        shed_running(m);
    return rc == 0 ? refused_result(m, err) : rc;
}

static void on_loaded(void *arg, int status, ag_fleet *fleet, const sv_error *ferr)
{
    ag_manager *m = arg;
    sv_error err = {0};
    m->job = NULL; /* the job frees itself after this callback */
    m->loading = false;
    if (status == 0) {
        ag_fleet next = *fleet;
        memset(fleet, 0, sizeof *fleet);
        status = ag_manager_reconcile(m, &next, &err);
        ag_fleet_free(&next);
        /* the parsed bodies were freed: give their pages back (a list of 1 000 000 users
         * parses into ~450 MB of small JSON nodes that glibc would otherwise keep) */
        malloc_trim(0);
    } else {
        err = *ferr;
    }
    status_end(m, status, &err);
    m->cb(m->arg, status, status != 0 ? &err : NULL);
}

int ag_manager_load(ag_manager *m, const ag_config *cfg, ag_load_cb cb, void *arg,
                    sv_error *err)
{
    if (m->loading)
        return sv_error_set(err, -EBUSY, "a load is already running");
    m->loading = true;
    m->cb = cb;
    m->arg = arg;
    m->n_refused = 0;
    status_begin(m, cfg, false);
    int rc = fetch_start(cfg, &m->running, &m->remote, on_loaded, m, &m->job, err);
    if (rc != 0)
        m->loading = false;
    return rc;
}
