/*
 * The sampler tick and the stats snapshot (seed 003, "采样器", "一次 tick：Sampler::tick").
 *
 * A tick: (1) reconcile the ledger; (2) tick += 1, zero every group's per-tick bytes and live
 * counts; (3) scan live flows: the bytes since each flow's watermark go to the total, its
 * inbound, its outbound tag (without "@vN") and its user, and the flow counts as live; (4) drain
 * the closed queue the same way, not counting as live, release the slots and free the records;
 * (5) build and publish the snapshot: rates = tick bytes * 1e9 / interval_ns in 128 bits
 * (saturating, 0 for a zero interval); users kept only with live flows or bytes this tick,
 * sorted by id; inbounds and outbounds are every tag that ever carried a flow, sorted by tag.
 *
 * Exactness: a flow leaves the live list for the closed queue under its worker's lock, and each
 * slot's watermark is moved only here, so every byte is counted by exactly one tick.
 *
 * At scale (a tick over 100 000 flows and 50 000 users), step 3 walks each worker's dense slot
 * pool, not the records; each slot remembers its groups' indexes, and the users' sums are one
 * dense array indexed like the users table, so a flow costs no hash lookup after its first tick.
 */
#include "supervisor/track/tracker_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/util/log.h"

/** How many slots ahead a pool scan prefetches what a slot adds into. */
#define PREFETCH_AHEAD 16

static bool group_eq_tag(const void *entry, const void *key)
{
    return strcmp(((const sv__group *)entry)->s.tag, (const char *)key) == 0;
}

static bool user_eq(const void *entry, const void *key)
{
    return ((const sv__user *)entry)->user == *(const uint64_t *)key;
}

void sv__sampler_init(sv_tracker *t)
{
    sv_table_init(&t->inbounds, sizeof(sv__group));
    sv_table_init(&t->outbounds, sizeof(sv__group));
    sv_table_init(&t->users, sizeof(sv__user));
}

void sv__sampler_free(sv_tracker *t)
{
    free(t->user_order);
    t->user_order = NULL;
    t->n_user_order = 0;
    free(t->user_sums);
    t->user_sums = NULL;
    t->n_user_sums = 0;
    free(t->spare_users);
    t->spare_users = NULL;
    t->n_spare_users = t->n_published_users = 0;
    sv_table_free(&t->inbounds);
    sv_table_free(&t->outbounds);
    sv_table_free(&t->users);
    sv_stats_free(&t->stats);
}

static void group_add(sv__group *g, uint64_t up, uint64_t down, bool live)
{
    g->s.up += up;
    g->s.down += down;
    g->tick_up += up;
    g->tick_down += down;
    if (live)
        g->s.flows++;
}

/** The group of tag @p tag (the first @p n bytes), created on first use. NULL on OOM. */
static sv__group *group_of_tag(sv_table *tab, const char *tag, size_t n)
{
    char key[SV_TAG_MAX + 1];
    if (n > SV_TAG_MAX)
        n = SV_TAG_MAX;
    memcpy(key, tag, n);
    key[n] = '\0';
    bool added;
    sv__group *g = sv_table_get(tab, sv_hash_str(key), key, group_eq_tag, &added);
    if (g && added)
        memcpy(g->s.tag, key, n + 1);
    return g;
}

/** The index of user @p user's sums, created (zeroed) on first use. -1 when out of memory. */
static long user_of(sv_tracker *t, uint64_t user)
{
    if (t->n_user_sums == t->users.n) { /* room for one more first: the table cannot undo */
        size_t n = t->n_user_sums ? t->n_user_sums * 2 : 64;
        sv__user_sum *v = realloc(t->user_sums, n * sizeof *v);
        if (v == NULL)
            return -1;
        t->user_sums = v;
        t->n_user_sums = n;
    }
    bool added;
    sv__user *u = sv_table_get(&t->users, sv_hash_u64(user), &user, user_eq, &added);
    if (u == NULL)
        return -1;
    size_t at = (size_t)((char *)u - t->users.v) / t->users.elem;
    if (added) {
        u->user = user;
        snprintf(u->tag, sizeof u->tag, "%" PRIu64, user);
        memset(&t->user_sums[at], 0, sizeof t->user_sums[at]);
    }
    return (long)at;
}

/* The index + 1 of the group @p found (the lookup's result, NULL on OOM) in @p tab, 0 for
 * NULL: table entries never move or go (util/table.h) and a flow's inbound, outbound and user
 * never change, so each flow is looked up once (a tick over 100 000 flows). */
static uint32_t index_of(const sv_table *tab, const sv__group *found)
{
    return found ? (uint32_t)(((const char *)found - tab->v) / tab->elem) + 1 : 0;
}

/**
 * take_sample + count for one flow's slot: move the watermarks and add the bytes since them to
 * the total, its inbound, its outbound tag and its user. The slot remembers its groups.
 */
static void count_flow(sv_tracker *t, sv_flow_slot *s, bool live)
{
    uint64_t up = atomic_load_explicit(&s->bytes.up, memory_order_relaxed);
    uint64_t down = atomic_load_explicit(&s->bytes.down, memory_order_relaxed);
    uint64_t du = up - s->wm_up, dd = down - s->wm_down;
    s->wm_up = up;
    s->wm_down = down;
    uint32_t *c = s->groups;
    if (c[0] == 0 || c[1] == 0 || (c[2] == 0 && s->rec->info.has_user)) {
        const sv_flow_desc *info = &s->rec->info;
        if (c[0] == 0)
            c[0] = index_of(&t->inbounds, group_of_tag(&t->inbounds, info->inbound,
                                                       strlen(info->inbound)));
        if (c[1] == 0)
            c[1] = index_of(&t->outbounds,
                            group_of_tag(&t->outbounds, info->outbound,
                                         sv__outbound_tag_len(info->outbound)));
        if (c[2] == 0 && info->has_user)
            c[2] = (uint32_t)(user_of(t, info->user) + 1);
        if (c[0] == 0 || c[1] == 0 || (c[2] == 0 && info->has_user))
            /* out of memory: looked up again next tick */
            SV_LOG(SV_LOG_WARN, "sv.track", "sampler: out of memory, flow %" PRIu64 " not grouped",
                   info->id);
    }
    group_add(&t->total, du, dd, live);
    if (c[0] != 0)
        group_add(sv_table_at(&t->inbounds, c[0] - 1), du, dd, live);
    if (c[1] != 0)
        group_add(sv_table_at(&t->outbounds, c[1] - 1), du, dd, live);
    if (c[2] != 0) {
        sv__user_sum *u = &t->user_sums[c[2] - 1];
        u->up += du;
        u->down += dd;
        u->tick_up += du;
        u->tick_down += dd;
        u->flows += live;
    }
}

static void reset_tick(sv__group *g)
{
    g->tick_up = g->tick_down = 0;
    g->s.flows = 0;
}

static void reset_table(sv_table *tab)
{
    for (size_t i = 0; i < tab->n; i++)
        reset_tick(sv_table_at(tab, i));
}

/** Steps 3 and 4: live flows first (each worker's slots in order), then the closed queue. */
static void scan_flows(sv_tracker *t)
{
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        sv__pool *p = &w->flow_pool;
        pthread_mutex_lock(&w->lock);
        for (uint32_t c = 0; c < p->n_chunks; c++) {
            sv_flow_slot *v = (sv_flow_slot *)p->chunks[c];
            uint32_t n = p->used - c * SV__POOL_CHUNK;
            if (n > SV__POOL_CHUNK)
                n = SV__POOL_CHUNK;
            for (uint32_t k = 0; k < n; k++) {
                if (k + PREFETCH_AHEAD < n && v[k + PREFETCH_AHEAD].groups[2] != 0)
                    __builtin_prefetch(&t->user_sums[v[k + PREFETCH_AHEAD].groups[2] - 1]);
                if (v[k].live)
                    count_flow(t, &v[k], true);
            }
        }
        if (p->n_own > 0) { /* those the pool had no memory for */
            sv_list *pos, *tmp;
            sv_list_foreach_safe(pos, tmp, &w->flows)
            {
                sv_flow_rec *rec = sv_container_of(pos, sv_flow_rec, link);
                if (rec->slot_id == SV__SLOT_OWN)
                    count_flow(t, &rec->own, true);
            }
        }
        /* the closed queue: last counts, slots back to the pool, records freed once unlocked */
        sv_list closed;
        sv_list_init(&closed);
        if (!sv_list_is_empty(&w->closed_flows)) { /* splice the queue out */
            closed.next = w->closed_flows.next;
            closed.prev = w->closed_flows.prev;
            closed.next->prev = closed.prev->next = &closed;
            sv_list_init(&w->closed_flows);
        }
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &closed)
        {
            sv_flow_rec *rec = sv_container_of(pos, sv_flow_rec, link);
            count_flow(t, (sv_flow_slot *)rec->bytes, false);
            if (rec->slot_id != SV__SLOT_OWN)
                sv__pool_put(p, rec->slot_id);
        }
        pthread_mutex_unlock(&w->lock);
        sv_list_foreach_safe(pos, tmp, &closed)
        {
            sv_list_unlink(pos);
            free(sv_container_of(pos, sv_flow_rec, link));
        }
    }
}

/** per_second (seed 003): bytes * 1e9 / interval_ns in 128 bits, saturating; 0 for interval 0. */
static uint64_t per_second(uint64_t bytes, uint64_t interval_ns)
{
    if (interval_ns == 0)
        return 0;
    if (bytes <= UINT64_MAX / 1000000000u) /* the same quotient without a 128-bit division */
        return bytes * 1000000000u / interval_ns;
    unsigned __int128 r = (unsigned __int128)bytes * 1000000000u / interval_ns;
    return r > UINT64_MAX ? UINT64_MAX : (uint64_t)r;
}

static sv_tag_stats group_stats(const sv__group *g, uint64_t interval_ns)
{
    sv_tag_stats s = g->s;
    s.up_rate = per_second(g->tick_up, interval_ns);
    s.down_rate = per_second(g->tick_down, interval_ns);
    return s;
}

static int cmp_tag(const void *a, const void *b)
{
    return strcmp(((const sv_tag_stats *)a)->tag, ((const sv_tag_stats *)b)->tag);
}

typedef struct user_index {
    uint64_t user;
    uint32_t at;
} user_index;

static int cmp_user_index(const void *a, const void *b)
{
    uint64_t x = ((const user_index *)a)->user, y = ((const user_index *)b)->user;
    return x < y ? -1 : x > y;
}

/* Keep t->user_order the user groups sorted by id: sorted again only when groups were added
 * since (users come and go rarely; sorting 50 000 every tick was most of a tick). */
static int order_users(sv_tracker *t)
{
    size_t n = t->users.n;
    if (t->n_user_order == n)
        return 0;
    uint32_t *v = realloc(t->user_order, n * sizeof *v);
    user_index *tmp = malloc(n * sizeof *tmp);
    if (v)
        t->user_order = v;
    if (!v || !tmp) {
        free(tmp);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        tmp[i] = (user_index){((const sv__user *)sv_table_at(&t->users, i))->user, (uint32_t)i};
    qsort(tmp, n, sizeof *tmp, cmp_user_index);
    for (size_t i = 0; i < n; i++)
        v[i] = tmp[i].at;
    free(tmp);
    t->n_user_order = n;
    return 0;
}

/** Copy a group table into an array sorted by tag (inbounds, outbounds). */
static int export_groups(const sv_table *tab, uint64_t interval_ns, sv_tag_stats **out,
                         size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (tab->n == 0)
        return 0;
    sv_tag_stats *v = calloc(tab->n, sizeof *v);
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < tab->n; i++)
        v[i] = group_stats(sv_table_at(tab, i), interval_ns);
    qsort(v, tab->n, sizeof *v, cmp_tag);
    *out = v;
    *n_out = tab->n;
    return 0;
}

/** The users active this tick (live flows or bytes), sorted by id, into the spare array. */
static int export_users(sv_tracker *t, uint64_t interval_ns, sv_tag_stats **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (t->users.n == 0)
        return 0;
    if (order_users(t) < 0)
        return -ENOMEM;
    if (t->n_spare_users < t->users.n) { /* reused from tick to tick: no page faults each time */
        free(t->spare_users);
        t->n_spare_users = 0;
        t->spare_users = calloc(t->users.n, sizeof *t->spare_users); /* tags zero-padded */
        if (t->spare_users == NULL)
            return -ENOMEM;
        t->n_spare_users = t->users.n;
    }
    sv_tag_stats *v = t->spare_users;
    size_t n = 0;
    for (size_t i = 0; i < t->users.n; i++) {
        uint32_t at = t->user_order[i];
        const sv__user_sum *u = &t->user_sums[at];
        if (u->flows == 0 && u->tick_up == 0 && u->tick_down == 0)
            continue;
        sv_tag_stats *o = &v[n++];
        const sv__user *e = sv_table_at(&t->users, at);
        _Static_assert(sizeof e->tag <= sizeof o->tag, "a user's tag fits a snapshot tag");
        memcpy(o->tag, e->tag, sizeof e->tag);
        sv__user_label(e->user, o->label, sizeof o->label);
        o->up = u->up;
        o->down = u->down;
        o->up_rate = per_second(u->tick_up, interval_ns);
        o->down_rate = per_second(u->tick_down, interval_ns);
        o->flows = u->flows;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static int build_snapshot(sv_tracker *t, uint64_t interval_ns, sv_stats *s)
{
    memset(s, 0, sizeof *s);
    s->tick = t->tick;
    s->interval_ns = interval_ns;
    s->total = group_stats(&t->total, interval_ns);
    if (export_groups(&t->inbounds, interval_ns, &s->inbounds, &s->n_inbounds) < 0 ||
        export_groups(&t->outbounds, interval_ns, &s->outbounds, &s->n_outbounds) < 0 ||
        export_users(t, interval_ns, &s->users, &s->n_users) < 0) {
        if (s->users == t->spare_users)
            s->users = NULL; /* the tracker's */
        sv_stats_free(s);
        return -ENOMEM;
    }
    return 0;
}

void sv_tracker_tick(sv_tracker *t, uint64_t interval_ns)
{
    sv__ledger_reconcile(t);
    pthread_mutex_lock(&t->sample_lock);
    t->tick++;
    reset_tick(&t->total);
    reset_table(&t->inbounds);
    reset_table(&t->outbounds);
    for (size_t i = 0; i < t->users.n; i++) {
        t->user_sums[i].tick_up = t->user_sums[i].tick_down = 0;
        t->user_sums[i].flows = 0;
    }
    scan_flows(t);
    sv_stats next;
    int rc = build_snapshot(t, interval_ns, &next);
    sv_stats old = {0};
    if (rc == 0) {
        pthread_mutex_lock(&t->stats_lock);
        old = t->stats;
        t->stats = next;
        pthread_mutex_unlock(&t->stats_lock);
        /* the users array just published came from the spare; the one it replaces is next */
        size_t published = next.users != NULL ? t->n_spare_users : 0;
        if (next.users != NULL) {
            t->spare_users = old.users;
            t->n_spare_users = old.users != NULL ? t->n_published_users : 0;
            old.users = NULL;
        }
        t->n_published_users = published;
    }
    pthread_mutex_unlock(&t->sample_lock);
    if (rc < 0)
        SV_LOG(SV_LOG_WARN, "sv.track", "sampler: out of memory, snapshot not published");
    sv_stats_free(&old);
}

static int dup_tags(const sv_tag_stats *src, size_t n, sv_tag_stats **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    *out = malloc(n * sizeof **out);
    if (!*out)
        return -ENOMEM;
    memcpy(*out, src, n * sizeof **out);
    return 0;
}

int sv_tracker_stats(sv_tracker *t, sv_stats *out)
{
    pthread_mutex_lock(&t->stats_lock);
    sv_stats copy = t->stats;
    int r1 = dup_tags(t->stats.inbounds, t->stats.n_inbounds, &copy.inbounds);
    int r2 = dup_tags(t->stats.outbounds, t->stats.n_outbounds, &copy.outbounds);
    int r3 = dup_tags(t->stats.users, t->stats.n_users, &copy.users);
    pthread_mutex_unlock(&t->stats_lock);
    *out = copy;
    if (r1 < 0 || r2 < 0 || r3 < 0) {
        sv_stats_free(out);
        return -ENOMEM;
    }
    return 0;
}

void sv_stats_free(sv_stats *stats)
{
    if (!stats)
        return;
    free(stats->inbounds);
    free(stats->outbounds);
    free(stats->users);
    memset(stats, 0, sizeof *stats);
}
