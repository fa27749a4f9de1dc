/*
 * The uplink's insides, shared by its files (agent/uplink.h is its contract; only
 * agent/uplink*.c include this header): its state, and the functions one file calls in
 * another, named ag__up_* (internal, as libuv's uv__*). Control loop only, unless a function
 * says otherwise.
 *
 * The files, each calling only files listed before it (no circle):
 *   uplink_snap.c     the snapshot the REST API reads, and its readers (any thread)
 *   uplink_status.c   alive IPs, the alivelist, the host's load from /proc
 *   uplink_metrics.c  Xboard node metrics: node.status over the channel, REST `report`
 *   uplink_outbox.c   usage and audit hits: supervisor -> outbox; the detect log report
 *   uplink_node.c     a node made with its stored state, and closed; its held state stored once
 *                     it applied; the node manager's client answering from it, its whole user
 *                     list lent to it
 *   uplink_cycle.c    a node's pull and push timers, which start each other
 *   uplink_channel.c  changes pushed over a node's channel; a node's start
 *   uplink_machine.c  Xboard machines: their node list starts and retires nodes; their channel
 *   uplink.c          the uplink's start and stop; client IP hints
 */
#ifndef AG_UPLINK_INT_H
#define AG_UPLINK_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <uv.h>

#include "agent/uplink.h"
#include "panel/xboard.h"

#define INTERVAL_DEFAULT 60u   /* s, PANEL.md §1.4 base_config defaults */
#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 300000u

/* A node's user ids, sorted, for usage attribution: built when its list changes, shared by
 * reference with the API's snapshots (no copy per user per publish). References are
 * taken and dropped on the control loop only. */
typedef struct uid_index {
    unsigned refs;
    size_t n;
    uint64_t ids[];
} uid_index;

static inline uid_index *uid_index_ref(uid_index *x)
{
    if (x != NULL)
        x->refs++;
    return x;
}

static inline void uid_index_unref(uid_index *x)
{
    if (x != NULL && --x->refs == 0)
        free(x);
}

static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static inline bool uid_index_has(const uid_index *x, uint64_t uid)
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
    db_audit_row *audit;    /* audit hits of the current period */
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
    up_machine *machine; /* the Xboard machine this node came from, or NULL */
    uint64_t machine_node; /* its id in the machine's list */
    char machine_type[PN_XB_TYPE_MAX + 1]; /* its type in that list */
    bool retiring;       /* the machine no longer lists it: not offered, not billed, pushing
                            what it still holds until its outbox is empty or moved */
    int handles;         /* timers still closing */
    pn_client *client;
    pn_node node;     /* the panel's latest node settings (what the node manager is offered) */
    char *warned;     /* "\n"-led lines of pn_node.unknown already warned about, or NULL */
    pn_users users;   /* the panel's latest user list (its uuids shed once it runs: held_refill) */
    bool has_node, has_users;
    /* the whole list went to the node manager (ag__up_users_lend), which has not
     * applied it yet: users is shed, and made whole again from its held body when needed */
    bool lent;
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
    int64_t held;  /* a batch the panel failed that waits for its settlement, or 0 */
    uint64_t pulls_started;  /* pulls begun since start */
    uint64_t users_answered; /* the pull whose users answer last succeeded (1-based), or 0 */
    uint64_t held_after;     /* the settlement needs a users answer of a pull numbered this */
    uint64_t dropped_users, dropped_bytes; /* usage of users the panel no longer has */
    /* the failure streaks of ag__up_store_result */
    bool write_failing, audit_failing, claim_failing, audit_claim_failing;
    uint64_t last_push_ms; /* end of the last push (REST API), 0 = never */
    int last_push_status;
    char last_push_error[160];
    sv_device_count *remote; /* this node's alivelist answer, others' IPs per user (sorted) */
    size_t n_remote;
    bool audit_reporting;    /* a detect log report is in flight */
    int64_t audit_batch;     /* its batch */
    size_t audit_batch_n;    /* hits in it */
    uint64_t audit_reported; /* hits the panel took since start */
    uint64_t audit_recorded; /* hits written to the outbox since start */
    uint32_t status_s;       /* s between two node.status messages (Xboard) */
    uint64_t metrics_due_ms; /* monotonic: the next node.status is due */
} up_node;

/* An Xboard machine (PANEL.md §1.1): its node list, pulled on the machine's
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
    uv_timer_t trim_timer; /* ag__up_trim_soon() */
    unsigned flush_s;
    sv_usage *carry; /* taken but not yet written (store error) */
    size_t n_carry;
    sv_usage *taken; /* everything taken from the supervisor since start, per uid, sorted */
    size_t n_taken;
    ag_uplink_change_cb on_change;
    void *arg;
    int closing;
    uint64_t cpu_busy, cpu_total; /* /proc/stat at the previous status report */
    pthread_mutex_t snap_lock; /* the REST API's snapshot, per uplink */
    snap_state snap;           /* under snap_lock */
    bool hints_restored;       /* the stored client IP hints went to the supervisor */
    uv_timer_t metrics_timer;  /* node.status of the Xboard nodes (uplink_metrics.c) */
    uint64_t started_ms;       /* monotonic, the uplink's start: the metrics' uptime */
    uint64_t cores_read_ms;    /* monotonic, the last /proc/stat reading per core */
    bool cores_primed;         /* a first reading was taken */
    size_t n_cores;            /* cores in core_pct (0 before the second reading) */
    uint64_t core_busy[PN_METRICS_CORES_MAX], core_total[PN_METRICS_CORES_MAX];
    double core_pct[PN_METRICS_CORES_MAX]; /* busy share per core between the last two */
};

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Exponential backoff with jitter in [75%, 125%], capped by cap_ms. */
static inline uint64_t backoff_ms(unsigned fails, uint64_t cap_ms)
{
    unsigned shift = fails > 0 ? fails - 1 : 0;
    uint64_t d = shift >= 20 ? BACKOFF_MAX_MS : (uint64_t)BACKOFF_FIRST_MS << shift;
    if (d > cap_ms)
        d = cap_ms;
    if (d > BACKOFF_MAX_MS)
        d = BACKOFF_MAX_MS;
    return d * 3 / 4 + (uint64_t)rand() % (d / 2 + 1);
}

static inline int cmp_usage_user(const void *a, const void *b)
{
    uint64_t x = ((const sv_usage *)a)->user, y = ((const sv_usage *)b)->user;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------------------------------- */
/* functions shared between the uplink's files (their contracts: at the definitions)          */
/* ---------------------------------------------------------------------------------------- */

/* uplink_snap.c */
void ag__up_publish(ag_uplink *u);   /* copy what the API shows and swap it in */
void ag__up_unpublish(ag_uplink *u); /* drop the published snapshot (at the uplink's stop) */

/* uplink_status.c */
void ag__up_report_alive(up_node *nd);  /* its users' live client IPs to the panel */
void ag__up_on_alivelist(pn_client *c, int rc, const pn_alive_count *items, size_t n,
                         const sv_error *err, void *arg); /* pn fetch_alivelist's callback */
int ag__up_remote_devices_apply(ag_uplink *u); /* every node's alivelist to the supervisor */
void ag__up_read_status(ag_uplink *u, pn_status *out); /* the host's load, from /proc */
void ag__up_report_status(up_node *nd); /* that load to the node's panel */

/* uplink_metrics.c */
void ag__up_metrics_init(ag_uplink *u);  /* the timer (closed by ag_uplink_free) */
void ag__up_metrics_start(ag_uplink *u); /* start it: every node's interval is checked each s */
void ag__up_metrics_node(up_node *nd, uint32_t status_s); /* its interval (0 = default) */
void ag__up_metrics_rest(up_node *nd);   /* its metrics over REST while its channel is down */

/* uplink_outbox.c */
void ag__up_index_users(up_node *nd); /* rebuild nd->uids from its (whole) user list */
void ag__up_store_result(const up_node *nd, bool *failing, int rc, const char *what,
                         const char *msg); /* log a store failure once per streak */
void ag__up_trim_soon(ag_uplink *u); /* malloc_trim on the next loop turn */
void ag__up_on_flush_timer(uv_timer_t *t);
void ag__up_audit_report(up_node *nd); /* the node's audit outbox to the panel's detect log */

/* uplink_node.c */
void ag__up_forget_state(up_node *nd); /* drop the held state and its ETags */
int ag__up_node_prepare(ag_uplink *u, up_node *nd, const ag_node_config *nc, sv_error *err);
void ag__up_node_unprepare(up_node *nd); /* undo ag__up_node_prepare, free the node */
int ag__up_node_add(ag_uplink *u, up_node *nd);
void ag__up_closed(ag_uplink *u); /* one handle of the uplink closed (frees it after the last) */
void ag__up_node_close(up_node *nd);
up_node *ag__up_find_node(ag_uplink *u, const char *tag); /* the live node of tag, or NULL */
/* hand the whole held list to the node manager, or make a lent one whole again */
int ag__up_users_lend(up_node *nd, bool keep_limits, pn_users *out);
int ag__up_users_unlend(up_node *nd, sv_error *err);

/* uplink_cycle.c */
void ag__up_on_push_timer(uv_timer_t *t);
void ag__up_on_pull_timer(uv_timer_t *t);
void ag__up_pull_now(up_node *nd); /* pull now, unless a pull is in flight */
void ag__up_pull_error(up_node *nd, const sv_error *err); /* a refused answer, logged once */
/* one warning per unknown key of a panel's node body (nd->node.unknown) for the node's life */
void ag__up_warn_unknown(up_node *nd);

/* uplink_channel.c: a node's channel events (pn_push_events), also routed by its machine's */
void ag__up_ev_node(void *arg, pn_node *node, const char *body, size_t len);
void ag__up_ev_users(void *arg, pn_users *users);
void ag__up_ev_delta(void *arg, const pn_users *add, const uint64_t *remove, size_t n_remove);
void ag__up_ev_resync(void *arg, const sv_error *why);
void ag__up_node_start(ag_uplink *u, up_node *nd); /* its timers and its channel */

/* uplink_machine.c */
bool ag__up_is_machine(const ag_node_config *nc); /* an Xboard machine entry */
int ag__up_machine_prepare(ag_uplink *u, const ag_node_config *nc, sv_error *err);
void ag__up_machine_start(up_machine *m);
void ag__up_machine_timer_closed(uv_handle_t *h);

#endif
