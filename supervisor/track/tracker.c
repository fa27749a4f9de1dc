/*
 * Flow and session registry, kill, close requests and the event ring (seed 003, "Tracker",
 * "kill 与 kill_where", "生命周期事件"). The sampler is in sampler.c, the ledger in ledger.c.
 *
 * Registry: one mutex and two intrusive lists per worker. A flow id is (counter << 8) | worker,
 * with a per-worker counter from 1, so ids grow strictly per worker, are never reused, and
 * id % 256 names the worker a kill goes to. Session ids come from one global counter from 1
 * (seed 001: "会话 id 从 1 开始递增").
 *
 * Records are allocated by the worker with malloc/calloc and freed here with free() once counted.
 */
#include "supervisor/track/tracker_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Lifetime                                                                                   */
/* ---------------------------------------------------------------------------------------- */

sv_tracker *sv_tracker_new(unsigned n_workers, sv_tracker_wake_fn wake, void *wake_ctx)
{
    if (n_workers == 0 || n_workers > SV__TRACK_MAX_WORKERS)
        return NULL;
    sv_tracker *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->workers = calloc(n_workers, sizeof *t->workers);
    t->ring = calloc(SV_EVENT_RING, sizeof *t->ring);
    if (!t->workers || !t->ring) {
        free(t->workers);
        free(t->ring);
        free(t);
        return NULL;
    }
    t->n_workers = n_workers;
    t->wake = wake;
    t->wake_ctx = wake_ctx;
    atomic_init(&t->next_session, 1);
    for (unsigned i = 0; i < n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_init(&w->lock, NULL);
        sv_list_init(&w->flows);
        sv_list_init(&w->sessions);
        sv_list_init(&w->closed_flows);
        sv_list_init(&w->closed_sessions);
        w->flow_pool.elem = sizeof(sv_flow_slot);
        w->session_pool.elem = sizeof(sv_session_slot);
        w->next_flow = 1;
    }
    pthread_mutex_init(&t->ev_lock, NULL);
    pthread_mutex_init(&t->sample_lock, NULL);
    pthread_mutex_init(&t->stats_lock, NULL);
    pthread_mutex_init(&t->ledger_lock, NULL);
    pthread_mutex_init(&t->dev_lock, NULL);
    for (unsigned i = 0; i < SV__DEV_STRIPES; i++)
        pthread_mutex_init(&t->dev_admit[i], NULL);
    const char *delay = getenv("KATANA_TEST_ADMIT_DELAY_MS");
    if (delay != NULL)
        t->test_admit_delay_us = (unsigned)strtoul(delay, NULL, 10) % 1000 * 1000;
    sv__sampler_init(t);
    sv__ledger_init(t);
    return t;
}

static void pool_free(sv__pool *p)
{
    for (uint32_t i = 0; i < p->n_chunks; i++)
        free(p->chunks[i]);
    free(p->chunks);
    free(p->free);
    p->chunks = NULL;
    p->free = NULL;
    p->n_chunks = p->used = p->n_free = 0;
}

/* A free entry of @p p (a released one first, else a new one, adding a chunk when full), or
 * SV__SLOT_OWN when memory runs out. Under the worker's lock. */
static uint32_t pool_take(sv__pool *p)
{
    if (p->n_free > 0)
        return p->free[--p->n_free];
    if (p->used == p->n_chunks * SV__POOL_CHUNK) {
        if (p->n_chunks >= UINT32_MAX / SV__POOL_CHUNK - 1)
            return SV__SLOT_OWN;
        uint32_t n = p->n_chunks + 1;
        char **chunks = realloc(p->chunks, n * sizeof *chunks);
        if (chunks == NULL)
            return SV__SLOT_OWN;
        p->chunks = chunks;
        /* room for every entry in the free list now, so that a release never allocates */
        uint32_t *free_ids = realloc(p->free, (size_t)n * SV__POOL_CHUNK * sizeof *free_ids);
        if (free_ids == NULL)
            return SV__SLOT_OWN;
        p->free = free_ids;
        chunks[p->n_chunks] = calloc(SV__POOL_CHUNK, p->elem);
        if (chunks[p->n_chunks] == NULL)
            return SV__SLOT_OWN;
        p->n_chunks = n;
    }
    return p->used++;
}

static void free_flow_list(sv_list *head)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, head)
    {
        sv_list_unlink(pos);
        free(sv_container_of(pos, sv_flow_rec, link));
    }
}

static void free_session_list(sv_list *head)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, head)
    {
        sv_list_unlink(pos);
        free(sv_container_of(pos, sv_session_rec, link));
    }
}

void sv_tracker_free(sv_tracker *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pool_free(&w->flow_pool);
        pool_free(&w->session_pool);
        free_flow_list(&w->flows);
        free_flow_list(&w->closed_flows);
        free_session_list(&w->sessions);
        free_session_list(&w->closed_sessions);
        pthread_mutex_destroy(&w->lock);
    }
    sv__sampler_free(t);
    sv__ledger_free(t);
    pthread_mutex_destroy(&t->ev_lock);
    pthread_mutex_destroy(&t->sample_lock);
    pthread_mutex_destroy(&t->stats_lock);
    pthread_mutex_destroy(&t->ledger_lock);
    pthread_mutex_destroy(&t->dev_lock);
    for (unsigned i = 0; i < SV__DEV_STRIPES; i++)
        pthread_mutex_destroy(&t->dev_admit[i]);
    free(t->remote);
    free(t->workers);
    free(t->ring);
    free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* Events                                                                                     */
/* ---------------------------------------------------------------------------------------- */

static void emit(sv_tracker *t, enum sv_event_kind kind, const sv_flow_info *flow)
{
    pthread_mutex_lock(&t->ev_lock);
    uint64_t seq = ++t->ev_head;
    sv_event *ev = &t->ring[(seq - 1) % SV_EVENT_RING];
    ev->kind = kind;
    ev->seq = seq;
    ev->missed = 0;
    ev->flow = *flow;
    pthread_mutex_unlock(&t->ev_lock);
}

/*
 * Cursor = seq of the last event read; sequence numbers start at 1, so 0 = nothing read yet (the
 * reader starts at the oldest retained event) and sv_tracker_events_head() = "from now". There is
 * no moving "from now" sentinel: a reader whose start cursor was taken before the first event
 * still sees that event. A LAGGED event has seq 0; it moves the cursor to just before the oldest
 * retained event.
 */
int sv_tracker_events_next(sv_tracker *t, uint64_t *cursor, sv_event *ev)
{
    int rc = 0;
    pthread_mutex_lock(&t->ev_lock);
    uint64_t head = t->ev_head;
    if (*cursor >= head)
        goto out;
    uint64_t before_oldest = head > SV_EVENT_RING ? head - SV_EVENT_RING : 0;
    if (*cursor < before_oldest) {
        memset(ev, 0, sizeof *ev);
        ev->kind = SV_EVENT_LAGGED;
        ev->missed = before_oldest - *cursor;
        *cursor = before_oldest;
    } else {
        *ev = t->ring[*cursor % SV_EVENT_RING]; /* seq *cursor + 1 */
        *cursor += 1;
    }
    rc = 1;
out:
    pthread_mutex_unlock(&t->ev_lock);
    return rc;
}

uint64_t sv_tracker_events_head(sv_tracker *t)
{
    pthread_mutex_lock(&t->ev_lock);
    uint64_t head = t->ev_head;
    pthread_mutex_unlock(&t->ev_lock);
    return head;
}

/* ---------------------------------------------------------------------------------------- */
/* Registration                                                                               */
/* ---------------------------------------------------------------------------------------- */

sv_flow_rec *sv_flow_rec_new(const char *inbound, const char *source, const char *destination,
                             const char *sniffed, const char *outbound)
{
    const char *s[5] = {inbound, source, destination, sniffed, outbound};
    size_t len[5], total = 0;
    for (size_t i = 0; i < 5; i++) {
        len[i] = s[i] != NULL ? strlen(s[i]) : 0;
        total += len[i] + 1;
    }
    sv_flow_rec *rec = calloc(1, sizeof *rec + total);
    if (rec == NULL)
        return NULL;
    rec->bytes = &rec->own.bytes;
    rec->slot_id = SV__SLOT_OWN;
    rec->own.rec = rec;
    const char **field[5] = {&rec->info.inbound, &rec->info.source, &rec->info.destination,
                             &rec->info.sniffed, &rec->info.outbound};
    char *at = rec->text;
    for (size_t i = 0; i < 5; i++) {
        if (len[i] > 0)
            memcpy(at, s[i], len[i]);
        at[len[i]] = '\0';
        *field[i] = at;
        at += len[i] + 1;
    }
    return rec;
}

/* @p src into the array @p dst of @p cap bytes, truncated, NUL-terminated. */
static void copy_text(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/** The record's static info with its current counters. */
static void flow_snapshot(const sv_flow_rec *rec, sv_flow_info *out)
{
    const sv_flow_desc *d = &rec->info;
    out->id = d->id;
    out->session = d->session;
    out->has_user = d->has_user;
    out->user = d->user;
    out->user_label[0] = '\0';
    if (d->has_user)
        sv__user_label(d->user, out->user_label, sizeof out->user_label);
    copy_text(out->inbound, sizeof out->inbound, d->inbound);
    copy_text(out->source, sizeof out->source, d->source);
    copy_text(out->destination, sizeof out->destination, d->destination);
    copy_text(out->sniffed, sizeof out->sniffed, d->sniffed);
    copy_text(out->outbound, sizeof out->outbound, d->outbound);
    out->network = d->network;
    out->rule = d->rule;
    out->epoch = d->epoch;
    out->started_ms = d->started_ms;
    out->up = atomic_load_explicit(&rec->bytes->up, memory_order_relaxed);
    out->down = atomic_load_explicit(&rec->bytes->down, memory_order_relaxed);
    out->killed = atomic_load_explicit(&rec->kill, memory_order_acquire);
}

static void session_snapshot(const sv_session_rec *rec, sv_session_info *out)
{
    const sv_session_desc *d = &rec->info;
    out->id = d->id;
    copy_text(out->inbound, sizeof out->inbound, d->inbound);
    copy_text(out->source, sizeof out->source, d->source);
    out->started_ms = d->started_ms;
    out->udp = d->udp;
    out->up = atomic_load_explicit(&rec->wire->up, memory_order_relaxed);
    out->down = atomic_load_explicit(&rec->wire->down, memory_order_relaxed);
    out->has_user = atomic_load_explicit(&rec->has_user, memory_order_acquire);
    out->user = out->has_user ? atomic_load_explicit(&rec->user, memory_order_relaxed) : 0;
}

/* Move the counters of a record being registered from its own slot into an entry of @p p
 * (the bytes it moved before registering stay its bytes), or keep them in @p own when the pool
 * has no memory. The caller is the record's worker (the counters' writer), under its lock.
 * @return the slot the record now counts in. */
static void *slot_take(sv__pool *p, sv_meter *own, uint32_t *slot_id)
{
    uint32_t id = pool_take(p);
    *slot_id = id;
    if (id == SV__SLOT_OWN) {
        p->n_own++;
        return own;
    }
    sv_meter *m = sv__pool_at(p, id); /* the slot's first member */
    atomic_store_explicit(&m->up, atomic_load_explicit(&own->up, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&m->down, atomic_load_explicit(&own->down, memory_order_relaxed),
                          memory_order_relaxed);
    return m;
}

void sv_tracker_flow_open(sv_tracker *t, sv_flow_rec *rec)
{
    assert(rec->worker < t->n_workers);
    sv__worker *w = &t->workers[rec->worker];
    sv_flow_info info;
    atomic_store_explicit(&rec->kill, false, memory_order_relaxed);
    pthread_mutex_lock(&w->lock);
    sv_flow_slot *slot = slot_take(&w->flow_pool, &rec->own.bytes, &rec->slot_id);
    slot->wm_up = slot->wm_down = 0;
    memset(slot->groups, 0, sizeof slot->groups);
    slot->rec = rec;
    slot->live = true;
    rec->bytes = &slot->bytes;
    rec->info.id = (w->next_flow++ << 8) | rec->worker;
    sv_list_insert_tail(&w->flows, &rec->link);
    flow_snapshot(rec, &info);
    pthread_mutex_unlock(&w->lock);
    emit(t, SV_EVENT_OPENED, &info); /* after the insert: a reader can find the flow */
}

void sv_tracker_flow_close(sv_tracker *t, sv_flow_rec *rec)
{
    sv__worker *w = &t->workers[rec->worker];
    sv_flow_info info;
    pthread_mutex_lock(&w->lock);
    sv_list_unlink(&rec->link);
    ((sv_flow_slot *)rec->bytes)->live = false; /* the closed queue counts it from now */
    if (rec->slot_id == SV__SLOT_OWN)
        w->flow_pool.n_own--;
    sv_list_insert_tail(&w->closed_flows, &rec->link);
    flow_snapshot(rec, &info); /* final counts; the sampler may free rec once unlocked */
    pthread_mutex_unlock(&w->lock);
    emit(t, SV_EVENT_CLOSED, &info);
}

sv_session_rec *sv_session_rec_new(const char *inbound, const char *source)
{
    size_t il = inbound != NULL ? strlen(inbound) : 0, sl = source != NULL ? strlen(source) : 0;
    size_t room = sl + 1 > SV_SESSION_SOURCE_MAX ? sl + 1 : SV_SESSION_SOURCE_MAX;
    sv_session_rec *rec = calloc(1, sizeof *rec + il + 1 + room);
    if (rec == NULL)
        return NULL;
    rec->wire = &rec->own.wire;
    rec->slot_id = SV__SLOT_OWN;
    rec->own.rec = rec;
    char *at = rec->text;
    if (il > 0)
        memcpy(at, inbound, il);
    at[il] = '\0';
    rec->info.inbound = at;
    at += il + 1;
    if (sl > 0)
        memcpy(at, source, sl);
    at[sl] = '\0';
    rec->info.source = at;
    return rec;
}

void sv_tracker_session_set_source(sv_tracker *t, sv_session_rec *rec, const char *source)
{
    sv__worker *w = &t->workers[rec->worker];
    size_t n = strnlen(source, SV_SESSION_SOURCE_MAX - 1);
    pthread_mutex_lock(&w->lock);
    char *at = (char *)rec->info.source; /* the record's own text, SOURCE_MAX bytes of room */
    memcpy(at, source, n);
    at[n] = '\0';
    pthread_mutex_unlock(&w->lock);
}

void sv_tracker_session_open(sv_tracker *t, sv_session_rec *rec)
{
    assert(rec->worker < t->n_workers);
    sv__worker *w = &t->workers[rec->worker];
    atomic_store_explicit(&rec->close_requested, false, memory_order_relaxed);
    pthread_mutex_lock(&w->lock);
    sv_session_slot *slot = slot_take(&w->session_pool, &rec->own.wire, &rec->slot_id);
    slot->wm_up = slot->wm_down = 0;
    slot->account = 0;
    slot->rec = rec;
    slot->live = true;
    rec->wire = &slot->wire;
    rec->info.id = atomic_fetch_add_explicit(&t->next_session, 1, memory_order_relaxed);
    sv_list_insert_tail(&w->sessions, &rec->link);
    pthread_mutex_unlock(&w->lock);
}

void sv_tracker_session_close(sv_tracker *t, sv_session_rec *rec)
{
    sv__worker *w = &t->workers[rec->worker];
    pthread_mutex_lock(&w->lock);
    sv_list_unlink(&rec->link);
    ((sv_session_slot *)rec->wire)->live = false; /* the closed queue counts it from now */
    if (rec->slot_id == SV__SLOT_OWN)
        w->session_pool.n_own--;
    sv_list_insert_tail(&w->closed_sessions, &rec->link);
    pthread_mutex_unlock(&w->lock);
}

void sv_tracker_session_bind_user(sv_tracker *t, sv_session_rec *rec, uint64_t user)
{
    (void)t;
    if (atomic_load_explicit(&rec->has_user, memory_order_relaxed))
        return; /* bound once, by the first authenticated flow */
    atomic_store_explicit(&rec->user, user, memory_order_relaxed);
    atomic_store_explicit(&rec->has_user, true, memory_order_release);
}

/* ---------------------------------------------------------------------------------------- */
/* Listing                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static int cmp_flow_id(const void *a, const void *b)
{
    uint64_t x = ((const sv_flow_info *)a)->id, y = ((const sv_flow_info *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_session_id(const void *a, const void *b)
{
    uint64_t x = ((const sv_session_info *)a)->id, y = ((const sv_session_info *)b)->id;
    return x < y ? -1 : x > y;
}

/** Grow @p *v (of @p elem bytes each) to hold at least @p need entries. */
static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*v, n * elem);
    if (!p)
        return -ENOMEM;
    *v = p;
    *cap = n;
    return 0;
}

long sv_tracker_flows(sv_tracker *t, sv_flow_info **out)
{
    sv_flow_info *v = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &w->flows)
        {
            if (grow((void **)&v, &cap, n + 1, sizeof *v) < 0) {
                pthread_mutex_unlock(&w->lock);
                free(v);
                return -ENOMEM;
            }
            flow_snapshot(sv_container_of(pos, sv_flow_rec, link), &v[n++]);
        }
        pthread_mutex_unlock(&w->lock);
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_flow_id);
    *out = v;
    return (long)n;
}

long sv_tracker_sessions(sv_tracker *t, sv_session_info **out)
{
    sv_session_info *v = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &w->sessions)
        {
            if (grow((void **)&v, &cap, n + 1, sizeof *v) < 0) {
                pthread_mutex_unlock(&w->lock);
                free(v);
                return -ENOMEM;
            }
            session_snapshot(sv_container_of(pos, sv_session_rec, link), &v[n++]);
        }
        pthread_mutex_unlock(&w->lock);
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_session_id);
    *out = v;
    return (long)n;
}

/* ---------------------------------------------------------------------------------------- */
/* Kill and close requests                                                                    */
/* ---------------------------------------------------------------------------------------- */

int sv_tracker_kill(sv_tracker *t, uint64_t id)
{
    unsigned worker = (unsigned)(id % SV__TRACK_MAX_WORKERS);
    if (worker >= t->n_workers)
        return -ENOENT;
    sv__worker *w = &t->workers[worker];
    int rc = -ENOENT;
    pthread_mutex_lock(&w->lock);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->flows)
    {
        sv_flow_rec *rec = sv_container_of(pos, sv_flow_rec, link);
        if (rec->info.id != id)
            continue;
        /* seed 003: a flow still registered is found again even when already killed */
        atomic_store_explicit(&rec->kill, true, memory_order_release);
        if (t->wake)
            t->wake(t->wake_ctx, worker);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

/** sv_kill_where()'s predicate: every given field must match. */
static bool flow_matches(const sv_flow_desc *info, const sv_flow_filter *f)
{
    if (f->inbound && strcmp(info->inbound, f->inbound) != 0)
        return false;
    if (f->outbound && strcmp(info->outbound, f->outbound) != 0) {
        size_t n = sv__outbound_tag_len(info->outbound);
        if (strlen(f->outbound) != n || strncmp(info->outbound, f->outbound, n) != 0)
            return false;
    }
    if (f->has_user && (!info->has_user || info->user != f->user))
        return false;
    if (f->has_session && info->session != f->session)
        return false;
    return true;
}

size_t sv_tracker_kill_where(sv_tracker *t, const sv_flow_filter *f)
{
    static const sv_flow_filter everything = {0};
    size_t total = 0;
    if (!f)
        f = &everything;
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        size_t here = 0;
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &w->flows)
        {
            sv_flow_rec *rec = sv_container_of(pos, sv_flow_rec, link);
            /* already-killed flows are skipped and not counted again (seed 003) */
            if (flow_matches(&rec->info, f) &&
                !atomic_exchange_explicit(&rec->kill, true, memory_order_acq_rel))
                here++;
        }
        if (here > 0 && t->wake)
            t->wake(t->wake_ctx, i); /* one wake per worker that has new flags */
        pthread_mutex_unlock(&w->lock);
        total += here;
    }
    return total;
}

/** Every given criterion must hold; none given selects every session. */
static bool session_matches(const sv_session_rec *rec, const char *inbound, bool has_user,
                            uint64_t user, uint64_t session)
{
    if (session != 0 && rec->info.id != session)
        return false;
    if (inbound && strcmp(rec->info.inbound, inbound) != 0)
        return false;
    if (has_user && (!atomic_load_explicit(&rec->has_user, memory_order_acquire) ||
                     atomic_load_explicit(&rec->user, memory_order_relaxed) != user))
        return false;
    return true;
}

size_t sv_tracker_close_sessions(sv_tracker *t, const char *inbound, bool has_user, uint64_t user,
                                 uint64_t session)
{
    size_t total = 0;
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        size_t here = 0;
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &w->sessions)
        {
            sv_session_rec *rec = sv_container_of(pos, sv_session_rec, link);
            if (session_matches(rec, inbound, has_user, user, session) &&
                !atomic_exchange_explicit(&rec->close_requested, true, memory_order_acq_rel))
                here++;
        }
        if (here > 0 && t->wake)
            t->wake(t->wake_ctx, i);
        pthread_mutex_unlock(&w->lock);
        total += here;
    }
    return total;
}

/* ---------------------------------------------------------------------------------------- */
/* Presence                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static int cmp_ip(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

void sv_tracker_user_presence(sv_tracker *t, uint64_t user, size_t *sessions, size_t *ips)
{
    char(*v)[64] = NULL;
    size_t n = 0, cap = 0;
    bool oom = false;
    *sessions = 0;
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &w->sessions)
        {
            sv_session_rec *rec = sv_container_of(pos, sv_session_rec, link);
            if (!session_matches(rec, NULL, true, user, 0))
                continue;
            ++*sessions;
            if (!oom && grow((void **)&v, &cap, n + 1, sizeof *v) == 0)
                sv__source_ip(rec->info.source, v[n++]);
            else
                oom = true;
        }
        pthread_mutex_unlock(&w->lock);
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_ip);
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(v[i], v[i - 1]) != 0)
            distinct++;
    *ips = oom ? *sessions : distinct; /* out of memory: an upper bound, never an undercount */
    free(v);
}
