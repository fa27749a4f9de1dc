/*
 * The supervisor actor's client IP hints across a restart: sv_hints_export gathers
 * every worker's Shadowsocks IP → user hints, sv_hints_import gives them back to the listeners.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor/actor.h"
#include "supervisor/util/log.h"

#define HINTS_WAIT_MS 1000 /**< sv_hints_export waits this long at most for the workers */

/* By inbound, then IP, the most recent first. */
static int hint_by_ip(const void *a, const void *b)
{
    const sv_ip_hint *x = a, *y = b;
    int c = strcmp(x->inbound, y->inbound);
    if (c == 0)
        c = memcmp(x->ip, y->ip, sizeof x->ip);
    return c != 0 ? c : (x->age_s > y->age_s) - (x->age_s < y->age_s);
}

/* By inbound, the most recent first. */
static int hint_by_age(const void *a, const void *b)
{
    const sv_ip_hint *x = a, *y = b;
    int c = strcmp(x->inbound, y->inbound);
    return c != 0 ? c : (x->age_s > y->age_s) - (x->age_s < y->age_s);
}

long sv_hints_export(sv_supervisor *sv, sv_ip_hint **out)
{
    *out = NULL;
    if (sv->shut)
        return -ESHUTDOWN;
    sv_hints_out *o = calloc(1, sizeof *o);
    if (o == NULL)
        return -ENOMEM;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->refs = 1;
    unsigned posted = 0;
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_msg *m = sv__msg_take(sv);
        if (m == NULL)
            break;
        m->kind = SV_MSG_HINTS_EXPORT;
        m->tcp_fd = m->udp_fd = -1;
        m->hints_out = o;
        pthread_mutex_lock(&o->mu);
        o->refs++;
        pthread_mutex_unlock(&o->mu);
        sv_worker_post(sv->workers[w], m);
        posted++;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HINTS_WAIT_MS / 1000;
    pthread_mutex_lock(&o->mu);
    int rc = 0;
    while (o->answered < posted && rc == 0)
        rc = pthread_cond_timedwait(&o->cv, &o->mu, &until);
    bool complete = posted == sv->n_workers && o->answered == posted && !o->short_of_memory;
    o->closed = true;
    sv_ip_hint *v = o->v;
    size_t n = o->n;
    o->v = NULL;
    pthread_mutex_unlock(&o->mu);
    sv__hints_release(o, NULL);
    if (!complete)
        SV_LOG(SV_LOG_WARN, "sv.actor", "client IP hints: not every worker gave its own");
    /* one row per (inbound, IP): the most recent; then at most SV_HINTS_MAX per inbound */
    if (n > 1)
        qsort(v, n, sizeof *v, hint_by_ip);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || strcmp(v[i].inbound, v[k - 1].inbound) != 0 ||
            memcmp(v[i].ip, v[k - 1].ip, sizeof v[i].ip) != 0)
            v[k++] = v[i];
    if (k > 1)
        qsort(v, k, sizeof *v, hint_by_age);
    n = k;
    k = 0;
    for (size_t i = 0, run = 0; i < n; i++) {
        run = i > 0 && strcmp(v[i].inbound, v[i - 1].inbound) == 0 ? run + 1 : 0;
        if (run < SV_HINTS_MAX)
            v[k++] = v[i];
    }
    if (k == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    return (long)k;
}

/* A hint of one listener being resolved: @p h its row of the caller's list, @p idx its user's
 * index in the listener's handler (-1: not admitted there). */
typedef struct hint_pick {
    const sv_ip_hint *h;
    int32_t idx;
} hint_pick;

static int pick_by_user(const void *a, const void *b)
{
    uint64_t x = ((const hint_pick *)a)->h->user, y = ((const hint_pick *)b)->h->user;
    return (x > y) - (x < y);
}

static int pick_by_age(const void *a, const void *b)
{
    uint32_t x = ((const hint_pick *)a)->h->age_s, y = ((const hint_pick *)b)->h->age_s;
    return (x > y) - (x < y);
}

/* Give @p l's workers the hints of @p v for it. @return how many, or -ENOMEM. */
static long import_listener(sv_supervisor *sv, const ctl_listener *l, const sv_ip_hint *v,
                            size_t n, hint_pick *picks)
{
    const sv_handler *h = l->handler;
    if (h == NULL || sv_proto_guide(h->ops) == NULL || h->n_users < 2)
        return 0; /* keeps no hints */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].age_s < SV_HINT_TTL_S && strcmp(v[i].inbound, l->tag) == 0)
            picks[k++] = (hint_pick){.h = &v[i], .idx = -1};
    if (k == 0)
        return 0;
    /* each user's index: one pass over the handler's users, a search among the picks */
    qsort(picks, k, sizeof *picks, pick_by_user);
    for (size_t u = 0; u < h->n_users; u++) {
        uint64_t id = h->principals[u]->id;
        size_t lo = 0, hi = k;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (picks[mid].h->user < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < k && picks[lo].h->user == id; lo++)
            picks[lo].idx = (int32_t)u;
    }
    size_t kept = 0;
    for (size_t i = 0; i < k; i++)
        if (picks[i].idx >= 0)
            picks[kept++] = picks[i];
    if (kept > 1)
        qsort(picks, kept, sizeof *picks, pick_by_age);
    if (kept > SV_HINTS_MAX)
        kept = SV_HINTS_MAX;
    if (kept == 0)
        return 0;
    sv_hints_in *in = malloc(sizeof *in + kept * sizeof in->rows[0]);
    if (in == NULL || sv__msgs_reserve(sv, sv->n_workers) != 0) {
        free(in);
        return -ENOMEM;
    }
    in->n = kept;
    in->matched = false; /* restored: hints only, the order stays as it is */
    atomic_init(&in->refs, sv->n_workers + 1);
    for (size_t i = 0; i < kept; i++) {
        memcpy(in->rows[i].ip, picks[i].h->ip, 16);
        in->rows[i].idx = picks[i].idx;
        in->rows[i].age_s = picks[i].h->age_s;
    }
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_msg *m = sv__msg_take(sv);
        m->kind = SV_MSG_HINTS_IMPORT;
        m->listener = l->id;
        m->tcp_fd = m->udp_fd = -1;
        sv_handler_ref(l->handler);
        m->handler = l->handler;
        m->hints_in = in;
        sv_worker_post(sv->workers[w], m);
    }
    sv__hints_release(NULL, in);
    return (long)kept;
}

long sv_hints_import(sv_supervisor *sv, const sv_ip_hint *v, size_t n)
{
    if (sv->shut)
        return -ESHUTDOWN;
    hint_pick *picks = n > 0 ? malloc(n * sizeof *picks) : NULL;
    if (n > 0 && picks == NULL)
        return -ENOMEM;
    long given = 0;
    for (size_t i = 0; i < sv->n_listeners && given >= 0; i++) {
        long rc = import_listener(sv, &sv->listeners[i], v, n, picks);
        given = rc < 0 ? rc : given + rc;
    }
    free(picks);
    return given;
}
