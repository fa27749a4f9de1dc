/*
 * Device limit (tracker.h): a new session from a new client IP is refused when the
 * user's distinct IPs (live local sessions plus the panel's alivelist count) reach its
 * device_limit. The check runs once per new session on the worker that admits it: one pass over
 * every worker's session list under that worker's lock, no allocation for limits up to
 * DEV_STACK_IPS. Sessions already running are never looked at again.
 *
 * Check and insertion are one step: the scan and the binding of the new session to
 * its user happen under the user's admission lock (one of SV__DEV_STRIPES, by user id), so two
 * new IPs of one user arriving at the same instant on two workers are decided one after the
 * other and the second sees the first. Users of other stripes are never held up.
 */
#include "config.h"

#include "supervisor/track/tracker_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEV_STACK_IPS 16

bool sv_device_decide(uint32_t limit, size_t local_ips, bool ip_known, uint32_t remote)
{
    if (limit == 0 || ip_known)
        return true;
    return (uint64_t)local_ips + remote < limit;
}

static int cmp_count(const void *a, const void *b)
{
    const sv_device_count *x = a, *y = b;
    return x->user < y->user ? -1 : x->user > y->user;
}

static uint32_t remote_count(sv_tracker *t, uint64_t user)
{
    sv_device_count key = {.user = user}, *hit;
    uint32_t n = 0;
    pthread_mutex_lock(&t->dev_lock);
    hit = t->n_remote ? bsearch(&key, t->remote, t->n_remote, sizeof key, cmp_count) : NULL;
    if (hit)
        n = hit->count;
    pthread_mutex_unlock(&t->dev_lock);
    return n;
}

/** Scan state: distinct IPs seen so far (at most cap of them are kept: enough to decide). */
typedef struct dev_scan {
    char (*ips)[64];
    size_t n, cap;
    bool known;
    const char *ip;
} dev_scan;

static void scan_one(dev_scan *s, const char *source)
{
    char ip[64];
    sv__source_ip(source, ip);
    if (strcmp(ip, s->ip) == 0) {
        s->known = true;
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->ips[i], ip) == 0)
            return;
    if (s->n < s->cap)
        memcpy(s->ips[s->n++], ip, sizeof ip);
}

static void scan_user(sv_tracker *t, uint64_t user, dev_scan *s)
{
    for (unsigned i = 0; i < t->n_workers && !s->known; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &w->sessions)
        {
            sv_session_rec *rec = sv_container_of(pos, sv_session_rec, link);
            if (atomic_load_explicit(&rec->has_user, memory_order_acquire) &&
                atomic_load_explicit(&rec->user, memory_order_relaxed) == user)
                scan_one(s, rec->info.source);
            if (s->known)
                break;
        }
        pthread_mutex_unlock(&w->lock);
    }
}

static pthread_mutex_t *admit_lock(sv_tracker *t, uint64_t user)
{
    return &t->dev_admit[(user * 0x9E3779B97F4A7C15ull) >> 60 & (SV__DEV_STRIPES - 1)];
}

/* The decision of sv_tracker_session_admit, with the user's admission lock held. */
static sv_device_verdict decide_locked(sv_tracker *t, uint64_t user, uint32_t limit,
                                       const char *source, bool ask_fleet)
{
    char stack[DEV_STACK_IPS][64], ip[64];
    sv__source_ip(source, ip);
    dev_scan s = {.ips = stack, .cap = limit, .ip = ip};
    if (limit > DEV_STACK_IPS) {
        s.ips = malloc((size_t)limit * sizeof *s.ips);
        if (!s.ips) /* out of memory: fail open, never cut or refuse on our own fault */
            return SV_DEVICE_ADMITTED;
    }
    scan_user(t, user, &s);
    sv_device_verdict v;
    if (s.known)
        v = SV_DEVICE_ADMITTED;
    else if (ask_fleet)
        v = SV_DEVICE_ASK_FLEET;
    else
        v = sv_device_decide(limit, s.n, false, remote_count(t, user)) ? SV_DEVICE_ADMITTED
                                                                        : SV_DEVICE_REFUSED;
    if (s.ips != stack)
        free(s.ips);
    return v;
}

sv_device_verdict sv_tracker_session_admit(sv_tracker *t, sv_session_rec *rec, uint64_t user,
                                           uint32_t limit, bool ask_fleet)
{
    if (limit == 0) {
        sv_tracker_session_bind_user(t, rec, user);
        return SV_DEVICE_ADMITTED;
    }
    pthread_mutex_t *mu = admit_lock(t, user);
    pthread_mutex_lock(mu);
    sv_device_verdict v = decide_locked(t, user, limit, rec->info.source, ask_fleet);
    if (v == SV_DEVICE_ADMITTED) {
        if (t->test_admit_delay_us > 0) /* test hook: widen the check-to-insert window */
            usleep(t->test_admit_delay_us);
        sv_tracker_session_bind_user(t, rec, user);
    }
    pthread_mutex_unlock(mu);
    if (v == SV_DEVICE_REFUSED)
        atomic_fetch_add_explicit(&t->dev_refused, 1, memory_order_relaxed);
    return v;
}

void sv_tracker_session_admit_fleet(sv_tracker *t, sv_session_rec *rec, uint64_t user, bool ok)
{
    if (ok)
        sv_tracker_session_bind_user(t, rec, user);
    else
        atomic_fetch_add_explicit(&t->dev_refused, 1, memory_order_relaxed);
}

int sv_tracker_set_remote_devices(sv_tracker *t, const sv_device_count *v, size_t n)
{
    sv_device_count *copy = NULL;
    if (n > 0) {
        copy = malloc(n * sizeof *copy);
        if (!copy)
            return -ENOMEM;
        memcpy(copy, v, n * sizeof *copy);
        qsort(copy, n, sizeof *copy, cmp_count);
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) { /* drop duplicate users, keeping the largest count */
        if (w > 0 && copy[w - 1].user == copy[i].user) {
            if (copy[i].count > copy[w - 1].count)
                copy[w - 1].count = copy[i].count;
        } else {
            copy[w++] = copy[i];
        }
    }
    pthread_mutex_lock(&t->dev_lock);
    sv_device_count *old = t->remote;
    t->remote = copy;
    t->n_remote = w;
    pthread_mutex_unlock(&t->dev_lock);
    free(old);
    return 0;
}

uint64_t sv_tracker_device_refusals(sv_tracker *t)
{
    return atomic_load_explicit(&t->dev_refused, memory_order_relaxed);
}

void sv_source_ip(const char *source, char out[64]) { sv__source_ip(source, out); }
