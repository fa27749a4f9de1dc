/*
 * The sampler tick and the stats snapshot (seed 003, "采样器", "一次 tick：Sampler::tick").
 *
 * A tick: (1) reconcile the ledger; (2) tick += 1, zero every group's per-tick bytes and live
 * counts; (3) scan live flows: the bytes since each flow's watermark go to the total, its
 * inbound, its outbound tag (without "@vN") and its user, and the flow counts as live; (4) drain
 * the closed queue the same way, not counting as live, and free the records; (5) build and
 * publish the snapshot: rates = tick bytes * 1e9 / interval_ns in 128 bits (saturating, 0 for a
 * zero interval); users kept only with live flows or bytes this tick, sorted by id; inbounds and
 * outbounds are every tag that ever carried a flow, sorted by tag.
 *
 * Exactness: a flow leaves the live list for the closed queue under its worker's lock, and each
 * record's watermark is moved only here, so every byte is counted by exactly one tick.
 */
#include "supervisor/track/tracker_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/util/log.h"

/** How many records ahead a scan prefetches (tracker_internal.h sv__ptrset). */
#define PREFETCH_AHEAD 16

static bool group_eq_tag(const void *entry, const void *key)
{
    return strcmp(((const sv__group *)entry)->s.tag, (const char *)key) == 0;
}

static bool group_eq_user(const void *entry, const void *key)
{
    return ((const sv__group *)entry)->user == *(const uint64_t *)key;
}

void sv__sampler_init(sv_tracker *t)
{
    sv_table_init(&t->inbounds, sizeof(sv__group));
    sv_table_init(&t->outbounds, sizeof(sv__group));
    sv_table_init(&t->users, sizeof(sv__group));
}

void sv__sampler_free(sv_tracker *t)
{
    free(t->user_order);
    t->user_order = NULL;
    t->n_user_order = 0;
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

static sv__group *group_of_user(sv_table *tab, uint64_t user)
{
    bool added;
    sv__group *g = sv_table_get(tab, sv_hash_u64(user), &user, group_eq_user, &added);
    if (g && added) {
        g->user = user;
        snprintf(g->s.tag, sizeof g->s.tag, "%" PRIu64, user);
    }
    return g;
}

/* The group whose index + 1 is @p *cached, else @p found (the lookup's result, NULL on OOM),
 * whose index is then remembered: table entries never move or go (util/table.h) and a flow's
 * inbound, outbound and user never change, so each flow is looked up once (issue 13: a tick
 * over 100 000 flows). */
static sv__group *cached(sv_table *tab, uint32_t *cache, sv__group *found)
{
    if (found != NULL)
        *cache = (uint32_t)(((char *)found - tab->v) / tab->elem) + 1;
    return found;
}

/** take_sample + count: move the watermarks and add the bytes since them to every group. */
static void count_flow(sv_tracker *t, sv_flow_rec *rec, bool live)
{
    uint64_t up = atomic_load_explicit(&rec->bytes.up, memory_order_relaxed);
    uint64_t down = atomic_load_explicit(&rec->bytes.down, memory_order_relaxed);
    uint64_t du = up - rec->wm_up, dd = down - rec->wm_down;
    rec->wm_up = up;
    rec->wm_down = down;
    const sv_flow_info *info = &rec->info;
    uint32_t *c = rec->groups;
    /* three different tables: one lookup never moves another's entries */
    sv__group *groups[3] = {
        c[0] ? sv_table_at(&t->inbounds, c[0] - 1)
             : cached(&t->inbounds, &c[0],
                      group_of_tag(&t->inbounds, info->inbound, strlen(info->inbound))),
        c[1] ? sv_table_at(&t->outbounds, c[1] - 1)
             : cached(&t->outbounds, &c[1],
                      group_of_tag(&t->outbounds, info->outbound,
                                   sv__outbound_tag_len(info->outbound))),
        c[2]            ? sv_table_at(&t->users, c[2] - 1)
        : info->has_user ? cached(&t->users, &c[2], group_of_user(&t->users, info->user))
                         : NULL,
    };
    group_add(&t->total, du, dd, live);
    for (size_t i = 0; i < 3; i++) {
        if (groups[i])
            group_add(groups[i], du, dd, live);
        else if (i < 2 || info->has_user) /* out of memory: looked up again next tick */
            SV_LOG(SV_LOG_WARN, "sv.track", "sampler: out of memory, flow %" PRIu64 " not grouped",
                   info->id);
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

/** Steps 3 and 4: live flows first, then the closed queue. */
static void scan_flows(sv_tracker *t)
{
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_lock(&w->lock);
        if (w->flow_set.broken) {
            sv_list *pos, *tmp;
            sv_list_foreach_safe(pos, tmp, &w->flows)
                count_flow(t, sv_container_of(pos, sv_flow_rec, link), true);
        } else {
            sv_flow_rec **v = (sv_flow_rec **)w->flow_set.v;
            size_t n = w->flow_set.n;
            for (size_t k = 0; k < n; k++) {
                /* records PREFETCH_AHEAD ahead, the user group of one half as far */
                if (k + PREFETCH_AHEAD < n) {
                    __builtin_prefetch(&v[k + PREFETCH_AHEAD]->bytes);
                    __builtin_prefetch(&v[k + PREFETCH_AHEAD]->groups);
                }
                if (k + PREFETCH_AHEAD / 2 < n && v[k + PREFETCH_AHEAD / 2]->groups[2] != 0)
                    __builtin_prefetch(
                        sv_table_at(&t->users, v[k + PREFETCH_AHEAD / 2]->groups[2] - 1));
                count_flow(t, v[k], true);
            }
        }
        pthread_mutex_unlock(&w->lock);
    }
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        sv_list closed;
        sv_list_init(&closed);
        pthread_mutex_lock(&w->lock);
        if (!sv_list_is_empty(&w->closed_flows)) { /* splice the queue out */
            closed.next = w->closed_flows.next;
            closed.prev = w->closed_flows.prev;
            closed.next->prev = closed.prev->next = &closed;
            sv_list_init(&w->closed_flows);
        }
        pthread_mutex_unlock(&w->lock);
        sv_list *pos, *tmp;
        sv_list_foreach_safe(pos, tmp, &closed)
        {
            sv_flow_rec *rec = sv_container_of(pos, sv_flow_rec, link);
            sv_list_unlink(pos);
            count_flow(t, rec, false);
            free(rec);
        }
    }
}

/** per_second (seed 003): bytes * 1e9 / interval_ns in 128 bits, saturating; 0 for interval 0. */
static uint64_t per_second(uint64_t bytes, uint64_t interval_ns)
{
    if (interval_ns == 0)
        return 0;
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
 * since (users come and go rarely; sorting 50 000 every tick was most of a tick, issue 13). */
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
        tmp[i] = (user_index){((const sv__group *)sv_table_at(&t->users, i))->user, (uint32_t)i};
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

/** The user groups active this tick (live flows or bytes), sorted by id. */
static int export_users(sv_tracker *t, uint64_t interval_ns, sv_tag_stats **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (t->users.n == 0)
        return 0;
    if (order_users(t) < 0)
        return -ENOMEM;
    sv_tag_stats *v = malloc(t->users.n * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < t->users.n; i++) {
        const sv__group *g = sv_table_at(&t->users, t->user_order[i]);
        if (g->s.flows != 0 || g->tick_up != 0 || g->tick_down != 0)
            v[n++] = group_stats(g, interval_ns);
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
    reset_table(&t->users);
    scan_flows(t);
    sv_stats next;
    int rc = build_snapshot(t, interval_ns, &next);
    pthread_mutex_unlock(&t->sample_lock);
    if (rc < 0) {
        SV_LOG(SV_LOG_WARN, "sv.track", "sampler: out of memory, snapshot not published");
        return;
    }
    pthread_mutex_lock(&t->stats_lock);
    sv_stats old = t->stats;
    t->stats = next;
    pthread_mutex_unlock(&t->stats_lock);
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
