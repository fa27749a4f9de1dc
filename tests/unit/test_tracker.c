/* Unit tests for the tracker, sampler and ledger (supervisor/track/; seed 003). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/track/tracker.h"

/* ---- helpers ----------------------------------------------------------------------------- */

/** Counts wake() calls per worker. */
typedef struct wakes {
    pthread_mutex_t lock;
    unsigned calls[4];
    unsigned total;
} wakes;

static void on_wake(void *ctx, unsigned worker)
{
    wakes *w = ctx;
    pthread_mutex_lock(&w->lock);
    assert_true(worker < 4);
    w->calls[worker]++;
    w->total++;
    pthread_mutex_unlock(&w->lock);
}

static wakes g_wakes;

static sv_tracker *new_tracker(unsigned n)
{
    memset(&g_wakes, 0, sizeof g_wakes);
    pthread_mutex_init(&g_wakes.lock, NULL);
    sv_tracker *t = sv_tracker_new(n, on_wake, &g_wakes);
    assert_non_null(t);
    return t;
}

/** A flow record as a worker would fill it. user 0 = anonymous. */
static sv_flow_rec *flow_rec(unsigned worker, const char *inbound, const char *outbound,
                             uint64_t user, uint64_t session)
{
    sv_flow_rec *r = sv_flow_rec_new(inbound, NULL, "example.com:443", NULL, outbound);
    assert_non_null(r);
    r->worker = worker;
    r->info.network = SV_NET_TCP;
    r->info.has_user = user != 0;
    r->info.user = user;
    r->info.session = session;
    r->info.rule = -1;
    return r;
}

static sv_flow_rec *open_flow(sv_tracker *t, unsigned worker, const char *inbound,
                              const char *outbound, uint64_t user, uint64_t session)
{
    sv_flow_rec *r = flow_rec(worker, inbound, outbound, user, session);
    sv_tracker_flow_open(t, r);
    return r;
}

static sv_session_rec *open_session(sv_tracker *t, unsigned worker, const char *inbound,
                                    const char *source)
{
    sv_session_rec *r = sv_session_rec_new(inbound, source);
    assert_non_null(r);
    r->worker = worker;
    sv_tracker_session_open(t, r);
    return r;
}

static const sv_tag_stats *find_tag(const sv_tag_stats *v, size_t n, const char *tag)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].tag, tag) == 0)
            return &v[i];
    return NULL;
}

static void expect_tag(const sv_tag_stats *s, uint64_t up, uint64_t down, uint64_t up_rate,
                       uint64_t down_rate, uint32_t flows)
{
    assert_non_null(s);
    assert_int_equal(s->up, up);
    assert_int_equal(s->down, down);
    assert_int_equal(s->up_rate, up_rate);
    assert_int_equal(s->down_rate, down_rate);
    assert_int_equal(s->flows, flows);
}

/* ---- sampler ----------------------------------------------------------------------------- */

static void the_sampler_counts_every_byte_once_by_inbound_outbound_and_user(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_stats s;
    assert_int_equal(sv_tracker_stats(t, &s), 0); /* before the first tick */
    assert_int_equal(s.tick, 0);
    assert_int_equal(s.n_inbounds + s.n_outbounds + s.n_users, 0);
    sv_stats_free(&s);

    sv_flow_rec *a = open_flow(t, 0, "in-a", "direct@v1", 1, 0);
    sv_flow_rec *b = open_flow(t, 1, "in-b", "direct@v2", 2, 0);
    sv_flow_rec *c = open_flow(t, 0, "in-a", "block@v1", 0, 0);
    sv_meter_add(&a->bytes->up, 10);
    sv_meter_add(&a->bytes->down, 20);
    sv_meter_add(&b->bytes->up, 5);
    sv_meter_add(&c->bytes->down, 40);

    /* tick 1: 0.5 s */
    sv_tracker_tick(t, 500000000);
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.tick, 1);
    assert_int_equal(s.interval_ns, 500000000);
    expect_tag(&s.total, 15, 60, 30, 120, 3);
    assert_int_equal(s.n_inbounds, 2);
    assert_string_equal(s.inbounds[0].tag, "in-a"); /* sorted by tag */
    expect_tag(&s.inbounds[0], 10, 60, 20, 120, 2);
    expect_tag(&s.inbounds[1], 5, 0, 10, 0, 1);
    assert_int_equal(s.n_outbounds, 2); /* versions merged under the tag */
    expect_tag(find_tag(s.outbounds, 2, "direct"), 15, 20, 30, 40, 2);
    expect_tag(find_tag(s.outbounds, 2, "block"), 0, 40, 0, 80, 1);
    assert_int_equal(s.n_users, 2); /* the anonymous flow has no user row */
    assert_string_equal(s.users[0].tag, "1");
    assert_string_equal(s.users[0].label, "1"); /* seed 003 UserStats::label: the flows' label */
    assert_string_equal(s.users[1].label, "2");
    assert_string_equal(s.inbounds[0].label, ""); /* only users have one */
    expect_tag(&s.users[0], 10, 20, 20, 40, 1);
    expect_tag(&s.users[1], 5, 0, 10, 0, 1);
    sv_stats_free(&s);

    /* between ticks: a moves 50 up; b moves 7 down, then closes */
    sv_meter_add(&a->bytes->up, 50);
    sv_meter_add(&b->bytes->down, 7);
    sv_tracker_flow_close(t, b);
    sv_tracker_tick(t, 500000000);
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.tick, 2);
    expect_tag(&s.total, 65, 67, 100, 14, 2); /* 50 bytes in 0.5 s = 100 B/s */
    expect_tag(find_tag(s.inbounds, s.n_inbounds, "in-b"), 5, 7, 0, 14, 0);
    expect_tag(find_tag(s.outbounds, s.n_outbounds, "direct"), 65, 27, 100, 14, 1);
    assert_int_equal(s.n_users, 2); /* user 2: no live flow but bytes this tick */
    expect_tag(find_tag(s.users, s.n_users, "2"), 5, 7, 0, 14, 0);
    sv_stats_free(&s);

    /* tick 3: nothing moved; the closed flow is not counted again; idle user 2 is dropped */
    sv_tracker_tick(t, 1000000000);
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.tick, 3);
    expect_tag(&s.total, 65, 67, 0, 0, 2);
    assert_int_equal(s.n_users, 1);
    expect_tag(&s.users[0], 60, 20, 0, 0, 1);
    assert_int_equal(s.n_inbounds, 2); /* idle tags stay listed */
    sv_stats_free(&s);

    /* a zero interval gives zero rates; bytes are still counted */
    sv_meter_add(&c->bytes->up, 3);
    sv_tracker_tick(t, 0);
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    expect_tag(&s.total, 68, 67, 0, 0, 2);
    sv_stats_free(&s);

    sv_tracker_flow_close(t, a);
    sv_tracker_flow_close(t, c);
    sv_tracker_free(t);
}

/* Issue 13: each flow's groups and each session's account are looked up once and remembered
 * by index; the tables grow meanwhile (new tags and users), and users that appear later are
 * still listed in id order. */
static void remembered_groups_survive_table_growth_and_users_stay_sorted(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    enum { N = 300 };
    static sv_flow_rec *f[N];
    static sv_session_rec *ses[N];
    char tag[32];
    for (unsigned i = 0; i < N; i++) { /* users N, N-1, ..., 1, a new inbound every 3 flows */
        snprintf(tag, sizeof tag, "in%u", i / 3);
        ses[i] = open_session(t, i % 2, tag, "1.1.1.1:1");
        sv_tracker_session_bind_user(t, ses[i], N - i);
        f[i] = open_flow(t, i % 2, tag, "out@v1", N - i, ses[i]->info.id);
        sv_meter_add(&f[i]->bytes->up, 1);
        sv_meter_add(&ses[i]->wire->up, 2);
        if (i % 50 == 49)
            sv_tracker_tick(t, 1000000000); /* groups made so far are remembered */
    }
    for (unsigned round = 0; round < 2; round++) {
        for (unsigned i = 0; i < N; i++) {
            sv_meter_add(&f[i]->bytes->up, 10);
            sv_meter_add(&ses[i]->wire->up, 20);
        }
        sv_tracker_tick(t, 1000000000);
    }
    sv_stats s;
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.n_users, N);
    for (unsigned i = 0; i < N; i++) {
        snprintf(tag, sizeof tag, "%u", i + 1);
        assert_string_equal(s.users[i].tag, tag); /* sorted by id, not by insertion */
        expect_tag(&s.users[i], 21, 0, 10, 0, 1);
    }
    assert_int_equal(s.n_inbounds, N / 3);
    expect_tag(find_tag(s.inbounds, s.n_inbounds, "in7"), 63, 0, 30, 0, 3);
    expect_tag(&s.outbounds[0], 21 * N, 0, 10 * N, 0, N);
    sv_stats_free(&s);

    sv_usage *u = NULL;
    assert_int_equal(sv_tracker_take_usage(t, &u), N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(u[i].user, i + 1);
        assert_int_equal(u[i].up, 42);
    }
    free(u);

    /* a user that comes later sorts first; the others keep their groups */
    sv_session_rec *late_s = open_session(t, 0, "in0", "1.1.1.2:1");
    sv_tracker_session_bind_user(t, late_s, 0);
    sv_flow_rec *late = open_flow(t, 0, "in0", "out@v1", 0, late_s->info.id);
    late->info.has_user = true; /* user id 0 is a user too */
    sv_meter_add(&late->bytes->up, 5);
    sv_meter_add(&f[0]->bytes->up, 1);
    sv_tracker_tick(t, 1000000000);
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.n_users, N + 1);
    assert_string_equal(s.users[0].tag, "0");
    expect_tag(&s.users[0], 5, 0, 5, 0, 1);
    expect_tag(find_tag(s.users, s.n_users, "300"), 22, 0, 1, 0, 1);
    sv_stats_free(&s);

    for (unsigned i = 0; i < N; i++) {
        sv_tracker_flow_close(t, f[i]);
        sv_tracker_session_close(t, ses[i]);
    }
    sv_tracker_flow_close(t, late);
    sv_tracker_session_close(t, late_s);
    sv_tracker_free(t);
}

/* Issue 13: counters live in per-worker slots that are reused once a closed flow's (session's)
 * last bytes are counted. A reused slot starts from the new record's own bytes (those moved before
 * it registered) and counts for the new flow's groups and user only; a slot is not reused before
 * the tick that counts its last bytes. */
static void a_reused_slot_counts_only_for_its_new_flow(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(1);
    sv_session_rec *sa = open_session(t, 0, "in-a", "1.1.1.1:1");
    sv_tracker_session_bind_user(t, sa, 1);
    sv_flow_rec *a = open_flow(t, 0, "in-a", "out-a@v1", 1, sa->info.id);
    sv_meter_add(&a->bytes->up, 100);
    sv_meter_add(&a->bytes->down, 200);
    sv_meter_add(&sa->wire->up, 300);
    sv_tracker_tick(t, 1000000000);
    sv_meter_add(&a->bytes->up, 5);
    sv_meter_add(&sa->wire->up, 7);
    uintptr_t a_slot = (uintptr_t)a->bytes, sa_slot = (uintptr_t)sa->wire;
    sv_tracker_flow_close(t, a);
    sv_tracker_session_close(t, sa);

    /* before the tick that counts a's last bytes: a's slot is still a's */
    sv_flow_rec *b = open_flow(t, 0, "in-b", "out-b@v1", 2, 0);
    assert_true((uintptr_t)b->bytes != a_slot);
    sv_meter_add(&b->bytes->up, 1);
    sv_tracker_tick(t, 1000000000);
    sv_stats s;
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    expect_tag(find_tag(s.users, s.n_users, "1"), 105, 200, 5, 0, 0);
    expect_tag(find_tag(s.users, s.n_users, "2"), 1, 0, 1, 0, 1);
    sv_stats_free(&s);

    /* now a's slots are free: the next flow and session take them */
    sv_session_rec *sc = open_session(t, 0, "in-c", "1.1.1.3:1");
    sv_tracker_session_bind_user(t, sc, 3);
    sv_flow_rec *c = flow_rec(0, "in-c", "out-c@v1", 3, sc->info.id);
    sv_meter_add(&c->bytes->up, 4); /* before it registers: still its bytes */
    sv_tracker_flow_open(t, c);
    assert_true((uintptr_t)c->bytes == a_slot);
    assert_true((uintptr_t)sc->wire == sa_slot);
    sv_meter_add(&c->bytes->up, 2);
    sv_meter_add(&sc->wire->down, 9);
    sv_tracker_tick(t, 1000000000);
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.n_users, 2);
    assert_null(find_tag(s.users, s.n_users, "1")); /* nothing more for a's user */
    expect_tag(find_tag(s.users, s.n_users, "3"), 6, 0, 6, 0, 1);
    expect_tag(find_tag(s.inbounds, s.n_inbounds, "in-a"), 105, 200, 0, 0, 0);
    expect_tag(find_tag(s.inbounds, s.n_inbounds, "in-c"), 6, 0, 6, 0, 1);
    expect_tag(find_tag(s.outbounds, s.n_outbounds, "out-c"), 6, 0, 6, 0, 1);
    expect_tag(&s.total, 112, 200, 6, 0, 2);
    sv_stats_free(&s);

    sv_flow_info *fl = NULL;
    assert_int_equal(sv_tracker_flows(t, &fl), 2);
    assert_int_equal(fl[0].id, b->info.id);
    assert_int_equal(fl[0].up, 1);
    assert_int_equal(fl[1].id, c->info.id);
    assert_int_equal(fl[1].up, 6);
    assert_int_equal(fl[1].down, 0);
    free(fl);

    sv_usage *u = NULL;
    assert_int_equal(sv_tracker_take_usage(t, &u), 2);
    assert_int_equal(u[0].user, 1);
    assert_int_equal(u[0].up, 307);
    assert_int_equal(u[0].down, 0);
    assert_int_equal(u[1].user, 3);
    assert_int_equal(u[1].up, 0);
    assert_int_equal(u[1].down, 9);
    free(u);

    sv_tracker_flow_close(t, b);
    sv_tracker_flow_close(t, c);
    sv_tracker_session_close(t, sc);
    sv_tracker_free(t);
}

static void rates_saturate_instead_of_overflowing(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(1);
    sv_flow_rec *a = open_flow(t, 0, "in", "out@v1", 0, 0);
    sv_meter_add(&a->bytes->up, UINT64_MAX / 2);
    sv_meter_add(&a->bytes->down, 3);
    sv_tracker_tick(t, 1); /* 1 ns */
    sv_stats s;
    assert_int_equal(sv_tracker_stats(t, &s), 0);
    assert_int_equal(s.total.up, UINT64_MAX / 2);
    assert_int_equal(s.total.up_rate, UINT64_MAX);
    assert_int_equal(s.total.down_rate, 3000000000u);
    sv_stats_free(&s);
    sv_tracker_free(t); /* frees the still-live record too */
}

/* ---- events ------------------------------------------------------------------------------ */

static void events_report_opened_then_closed_with_final_counts(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_flow_rec *first = open_flow(t, 0, "in", "out@v1", 0, 0);
    uint64_t cursor = sv_tracker_events_head(t); /* from now: no history */
    sv_event ev;
    assert_int_equal(cursor, 1);
    assert_int_equal(sv_tracker_events_next(t, &cursor, &ev), 0);
    assert_int_equal(cursor, 1);

    sv_flow_rec *f = open_flow(t, 1, "in2", "out@v3", 9, 4);
    uint64_t id = f->info.id;
    sv_meter_add(&f->bytes->up, 7);
    sv_meter_add(&f->bytes->down, 11);
    sv_tracker_flow_close(t, f);

    assert_int_equal(sv_tracker_events_next(t, &cursor, &ev), 1);
    assert_int_equal(ev.kind, SV_EVENT_OPENED);
    assert_int_equal(ev.seq, 2);
    assert_int_equal(ev.flow.id, id);
    assert_string_equal(ev.flow.inbound, "in2");
    assert_int_equal(ev.flow.up, 0);
    assert_int_equal(sv_tracker_events_next(t, &cursor, &ev), 1);
    assert_int_equal(ev.kind, SV_EVENT_CLOSED);
    assert_int_equal(ev.seq, 3);
    assert_int_equal(ev.flow.id, id);
    assert_int_equal(ev.flow.up, 7);
    assert_int_equal(ev.flow.down, 11);
    assert_int_equal(ev.flow.session, 4);
    assert_int_equal(sv_tracker_events_next(t, &cursor, &ev), 0);
    assert_int_equal(cursor, 3);

    sv_tracker_flow_close(t, first);
    sv_tracker_free(t);
}

/* The defect this pins: a reader whose start was taken while no event existed (head 0) must
 * see the first event, and a reader polling before it must not skip past it. Cursor 0 reads
 * from the oldest retained event. */
static void a_reader_started_before_the_first_event_misses_nothing(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(1);
    uint64_t cursor = sv_tracker_events_head(t);
    sv_event ev;
    assert_int_equal(cursor, 0);
    assert_int_equal(sv_tracker_events_next(t, &cursor, &ev), 0); /* polled: nothing yet */
    assert_int_equal(cursor, 0);
    sv_flow_rec *f = open_flow(t, 0, "in", "out@v1", 0, 0);
    assert_int_equal(sv_tracker_events_next(t, &cursor, &ev), 1);
    assert_int_equal(ev.kind, SV_EVENT_OPENED);
    assert_int_equal(ev.seq, 1); /* sequence numbers start at 1 */
    assert_int_equal(ev.flow.id, f->info.id);
    assert_int_equal(cursor, 1);
    sv_tracker_flow_close(t, f);
    uint64_t late = 0; /* a reader from 0 later still gets the whole retained history */
    assert_int_equal(sv_tracker_events_next(t, &late, &ev), 1);
    assert_int_equal(ev.seq, 1);
    assert_int_equal(sv_tracker_events_next(t, &late, &ev), 1);
    assert_int_equal(ev.kind, SV_EVENT_CLOSED);
    assert_int_equal(ev.seq, 2);
    assert_int_equal(sv_tracker_events_next(t, &late, &ev), 0);
    sv_tracker_free(t);
}

static void a_lagging_reader_is_told_how_many_it_missed(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(1);
    sv_tracker_flow_close(t, open_flow(t, 0, "in", "out@v1", 0, 0)); /* seq 1, 2 */
    uint64_t cursor = sv_tracker_events_head(t);
    uint64_t slow = cursor, near = cursor;
    const unsigned extra = 10;
    sv_event ev;
    for (unsigned i = 0; i < (SV_EVENT_RING + extra) / 2; i++)
        sv_tracker_flow_close(t, open_flow(t, 0, "in", "out@v1", 0, 0));
    uint64_t head = sv_tracker_events_head(t);
    assert_int_equal(head, cursor + SV_EVENT_RING + extra);

    assert_int_equal(sv_tracker_events_next(t, &slow, &ev), 1);
    assert_int_equal(ev.kind, SV_EVENT_LAGGED);
    assert_int_equal(ev.missed, extra);
    size_t read = 0;
    uint64_t expect_seq = head - SV_EVENT_RING + 1; /* the oldest retained */
    while (sv_tracker_events_next(t, &slow, &ev) == 1) {
        assert_int_not_equal(ev.kind, SV_EVENT_LAGGED);
        assert_int_equal(ev.seq, expect_seq++);
        read++;
    }
    assert_int_equal(read, SV_EVENT_RING);

    /* a reader exactly one ring behind lost nothing */
    near = head - SV_EVENT_RING;
    assert_int_equal(sv_tracker_events_next(t, &near, &ev), 1);
    assert_int_equal(ev.kind, SV_EVENT_OPENED);
    assert_int_equal(ev.seq, head - SV_EVENT_RING + 1);
    sv_tracker_free(t);
}

/* ---- registry, kill ---------------------------------------------------------------------- */

static void flow_ids_name_their_worker_and_listing_is_sorted(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(3);
    sv_flow_rec *r[6];
    for (unsigned i = 0; i < 6; i++)
        r[i] = open_flow(t, (i * 2) % 3, "in", "out@v1", 0, 0);
    for (unsigned i = 0; i < 6; i++) {
        assert_int_equal(r[i]->info.id % 256, r[i]->worker);
        for (unsigned j = 0; j < i; j++)
            if (r[j]->worker == r[i]->worker)
                assert_true(r[j]->info.id < r[i]->info.id);
    }
    sv_meter_add(&r[4]->bytes->down, 99);
    sv_flow_info *v = NULL;
    assert_int_equal(sv_tracker_flows(t, &v), 6);
    for (unsigned i = 1; i < 6; i++)
        assert_true(v[i - 1].id < v[i].id);
    for (unsigned i = 0; i < 6; i++)
        if (v[i].id == r[4]->info.id)
            assert_int_equal(v[i].down, 99);
    free(v);
    uint64_t gone = r[0]->info.id;
    sv_tracker_flow_close(t, r[0]);
    sv_flow_rec *again = open_flow(t, 0, "in", "out@v1", 0, 0);
    assert_int_not_equal(again->info.id, gone); /* never reused */
    assert_true(again->info.id > r[3]->info.id);
    assert_int_equal(sv_tracker_flows(t, &v), 6);
    free(v);
    sv_tracker_free(t);
}

/* Issue 13: a record keeps its strings at their lengths; the listing gives them back in
 * sv_flow_info's arrays (a missing sniffed name as "", an over-long one truncated). */
static void a_flow_record_keeps_its_strings_and_lists_them(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(1);
    char long_name[400];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    sv_flow_rec *a = sv_flow_rec_new("in", "127.0.0.1:5555", "example.com:443", "sni.example",
                                     "direct@v3");
    sv_flow_rec *b = sv_flow_rec_new("in", NULL, "10.0.0.1:80", long_name, "block@v1");
    assert_non_null(a);
    assert_non_null(b);
    a->info.has_user = true;
    a->info.user = 42;
    sv_tracker_flow_open(t, a);
    sv_tracker_flow_open(t, b);
    sv_flow_info *v = NULL;
    assert_int_equal(sv_tracker_flows(t, &v), 2);
    assert_string_equal(v[0].inbound, "in");
    assert_string_equal(v[0].source, "127.0.0.1:5555");
    assert_string_equal(v[0].destination, "example.com:443");
    assert_string_equal(v[0].sniffed, "sni.example");
    assert_string_equal(v[0].outbound, "direct@v3");
    assert_string_equal(v[0].user_label, "42");
    assert_string_equal(v[1].source, "");
    assert_int_equal(strlen(v[1].sniffed), sizeof v[1].sniffed - 1);
    assert_string_equal(v[1].user_label, "");
    free(v);
    sv_tracker_free(t);
}

static void kill_flags_one_flow_and_wakes_its_worker(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_flow_rec *a = open_flow(t, 0, "in", "out@v1", 0, 0);
    sv_flow_rec *b = open_flow(t, 1, "in", "out@v1", 0, 0);
    assert_int_equal(sv_tracker_kill(t, b->info.id), 0);
    assert_true(atomic_load(&b->kill));
    assert_false(atomic_load(&a->kill));
    assert_int_equal(g_wakes.calls[1], 1);
    assert_int_equal(g_wakes.calls[0], 0);
    /* the listing says which was killed (seed 003 FlowEntry::killed), and so does CLOSED */
    sv_flow_info *v = NULL;
    assert_int_equal(sv_tracker_flows(t, &v), 2);
    assert_int_equal(v[0].id == b->info.id ? v[0].killed : v[1].killed, true);
    assert_int_equal(v[0].id == a->info.id ? v[0].killed : v[1].killed, false);
    free(v);
    /* still registered: found again (seed 003) */
    assert_int_equal(sv_tracker_kill(t, b->info.id), 0);
    assert_int_equal(sv_tracker_kill(t, b->info.id + 256), -ENOENT); /* unknown, same worker */
    assert_int_equal(sv_tracker_kill(t, (b->info.id & ~0xffull) | 7), -ENOENT); /* no worker 7 */
    uint64_t id = b->info.id;
    sv_tracker_flow_close(t, b);
    assert_int_equal(sv_tracker_kill(t, id), -ENOENT);
    sv_tracker_flow_close(t, a);
    sv_tracker_free(t);
}

static void kill_where_counts_each_flow_once(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_flow_rec *f[5];
    f[0] = open_flow(t, 0, "in-a", "direct@v1", 1, 10);
    f[1] = open_flow(t, 1, "in-a", "direct@v2", 2, 11);
    f[2] = open_flow(t, 1, "in-b", "block@v1", 1, 12);
    f[3] = open_flow(t, 0, "in-b", "direct2@v1", 0, 13);
    f[4] = open_flow(t, 0, "in-a", "block@v1", 0, 10);
    sv_flow_filter by_tag = {.outbound = "direct"};
    assert_int_equal(sv_tracker_kill_where(t, &by_tag), 2); /* any version, not "direct2" */
    assert_true(atomic_load(&f[0]->kill) && atomic_load(&f[1]->kill));
    assert_false(atomic_load(&f[3]->kill));
    assert_int_equal(g_wakes.calls[0], 1);
    assert_int_equal(g_wakes.calls[1], 1);
    assert_int_equal(sv_tracker_kill_where(t, &by_tag), 0); /* second time: nothing new */
    assert_int_equal(g_wakes.total, 2);

    sv_flow_filter exact = {.outbound = "direct2@v2"};
    assert_int_equal(sv_tracker_kill_where(t, &exact), 0);
    exact.outbound = "direct2@v1";
    assert_int_equal(sv_tracker_kill_where(t, &exact), 1);
    sv_flow_filter user = {.has_user = true, .user = 1};
    assert_int_equal(sv_tracker_kill_where(t, &user), 1); /* f[0] already killed, f[2] new */
    assert_true(atomic_load(&f[2]->kill));
    sv_flow_filter session = {.has_session = true, .session = 10, .inbound = "in-a"};
    assert_int_equal(sv_tracker_kill_where(t, &session), 1); /* f[4] */
    sv_flow_filter all = {0};
    assert_int_equal(sv_tracker_kill_where(t, &all), 0);
    for (unsigned i = 0; i < 5; i++) {
        assert_true(atomic_load(&f[i]->kill));
        sv_tracker_flow_close(t, f[i]);
    }
    sv_tracker_free(t);
}

/* ---- sessions, ledger -------------------------------------------------------------------- */

static void close_sessions_selects_and_never_counts_twice(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_session_rec *s[4];
    s[0] = open_session(t, 0, "in-a", "1.1.1.1:1");
    s[1] = open_session(t, 1, "in-a", "1.1.1.2:1");
    s[2] = open_session(t, 1, "in-b", "1.1.1.3:1");
    s[3] = open_session(t, 0, "in-b", "1.1.1.4:1");
    for (unsigned i = 1; i < 4; i++)
        assert_true(s[i]->info.id > s[i - 1]->info.id);
    sv_tracker_session_bind_user(t, s[1], 5);
    sv_tracker_session_bind_user(t, s[2], 5);
    sv_tracker_session_bind_user(t, s[2], 6); /* bound once: stays 5 */

    assert_int_equal(sv_tracker_close_sessions(t, NULL, true, 5, 0), 2);
    assert_int_equal(g_wakes.calls[1], 1);
    assert_int_equal(g_wakes.calls[0], 0);
    assert_int_equal(sv_tracker_close_sessions(t, NULL, true, 6, 0), 0);
    assert_int_equal(sv_tracker_close_sessions(t, "in-a", false, 0, 0), 1); /* s[0]; s[1] already */
    assert_int_equal(sv_tracker_close_sessions(t, NULL, false, 0, s[1]->info.id), 0);
    assert_int_equal(sv_tracker_close_sessions(t, NULL, false, 0, 999), 0);
    assert_int_equal(sv_tracker_close_sessions(t, NULL, false, 0, 0), 1); /* all: only s[3] left */
    assert_int_equal(sv_tracker_close_sessions(t, NULL, false, 0, 0), 0);
    for (unsigned i = 0; i < 4; i++)
        assert_true(atomic_load(&s[i]->close_requested));

    sv_session_info *v = NULL;
    assert_int_equal(sv_tracker_sessions(t, &v), 4);
    assert_true(v[2].has_user);
    assert_int_equal(v[2].user, 5);
    assert_false(v[3].has_user);
    free(v);
    for (unsigned i = 0; i < 4; i++)
        sv_tracker_session_close(t, s[i]);
    assert_int_equal(sv_tracker_sessions(t, &v), 0);
    free(v);
    sv_tracker_free(t);
}

static const sv_usage *find_usage(const sv_usage *v, long n, uint64_t user)
{
    for (long i = 0; i < n; i++)
        if (v[i].user == user)
            return &v[i];
    return NULL;
}

static void take_usage_returns_deltas_then_nothing(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_session_rec *a = open_session(t, 0, "in", "1.1.1.1:1");
    sv_session_rec *b = open_session(t, 1, "in", "1.1.1.2:1");
    sv_session_rec *anon = open_session(t, 1, "in", "1.1.1.3:1");
    sv_meter_add(&a->wire->up, 100); /* before the bind: charged to the user once bound */
    sv_tracker_session_bind_user(t, a, 7);
    sv_meter_add(&a->wire->down, 30);
    sv_tracker_session_bind_user(t, b, 8);
    sv_meter_add(&b->wire->up, 1);
    sv_meter_add(&anon->wire->up, 500); /* never bound: nobody's */

    sv_usage *u = NULL;
    long n = sv_tracker_take_usage(t, &u);
    assert_int_equal(n, 2);
    assert_int_equal(u[0].user, 7); /* sorted */
    assert_int_equal(u[0].up, 100);
    assert_int_equal(u[0].down, 30);
    assert_int_equal(u[1].up, 1);
    free(u);
    assert_int_equal(sv_tracker_take_usage(t, &u), 0);
    free(u);

    /* more bytes, a tick in between (it reconciles), then a close with a last remainder */
    sv_meter_add(&a->wire->up, 5);
    sv_tracker_tick(t, 1000000000);
    sv_meter_add(&a->wire->up, 6);
    sv_tracker_session_close(t, a);
    sv_tracker_session_close(t, anon);
    n = sv_tracker_take_usage(t, &u);
    assert_int_equal(n, 1);
    assert_int_equal(u[0].user, 7);
    assert_int_equal(u[0].up, 11);
    assert_int_equal(u[0].down, 0);
    free(u);

    n = sv_tracker_usage_snapshot(t, &u);
    assert_int_equal(n, 2);
    assert_int_equal(find_usage(u, n, 7)->up, 111);
    assert_int_equal(find_usage(u, n, 7)->down, 30);
    assert_int_equal(find_usage(u, n, 8)->up, 1);
    free(u);
    assert_int_equal(sv_tracker_take_usage(t, &u), 0);
    free(u);
    sv_tracker_session_close(t, b);
    sv_tracker_free(t);
}

static void user_presence_counts_sessions_and_distinct_ips(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    const char *src[] = {"10.0.0.1:1000", "10.0.0.1:1001", "[2001:db8::1]:443", "10.0.0.2:5", "10.0.0.3:5"};
    sv_session_rec *s[5];
    for (unsigned i = 0; i < 5; i++) {
        s[i] = open_session(t, i % 2, "in", src[i]);
        sv_tracker_session_bind_user(t, s[i], i < 3 ? 42 : 43);
    }
    size_t sessions = 0, ips = 0;
    sv_tracker_user_presence(t, 42, &sessions, &ips);
    assert_int_equal(sessions, 3);
    assert_int_equal(ips, 2);
    sv_tracker_session_close(t, s[2]);
    sv_tracker_user_presence(t, 42, &sessions, &ips);
    assert_int_equal(sessions, 2);
    assert_int_equal(ips, 1);
    sv_tracker_user_presence(t, 44, &sessions, &ips);
    assert_int_equal(sessions, 0);
    assert_int_equal(ips, 0);
    for (unsigned i = 0; i < 5; i++)
        if (i != 2)
            sv_tracker_session_close(t, s[i]);
    sv_tracker_free(t);
}

static void device_decision_follows_the_issue_rule(void **state)
{
    (void)state;
    assert_true(sv_device_decide(0, 100, false, 100)); /* 0 = unlimited */
    assert_true(sv_device_decide(1, 0, false, 0));     /* the first IP */
    assert_false(sv_device_decide(1, 1, false, 0));    /* a second IP */
    assert_true(sv_device_decide(1, 1, true, 0));      /* an IP already counted */
    assert_true(sv_device_decide(1, 5, true, 9));      /* ... whatever the totals */
    assert_false(sv_device_decide(1, 0, false, 1));    /* the panel's count alone reaches it */
    assert_true(sv_device_decide(3, 1, false, 1));
    assert_false(sv_device_decide(3, 2, false, 1));
    assert_false(sv_device_decide(2, 0, false, UINT32_MAX)); /* no overflow */
}

/* The admission of a probe session of @p user from @p source, which then closes again (so that
 * it never counts for the next probe). */
static bool probe_admit(sv_tracker *t, uint64_t user, uint32_t limit, const char *source)
{
    sv_session_rec *p = open_session(t, 0, "in", source);
    sv_device_verdict v = sv_tracker_session_admit(t, p, user, limit, false);
    assert_true(v != SV_DEVICE_ASK_FLEET);
    sv_tracker_session_close(t, p);
    return v == SV_DEVICE_ADMITTED;
}

static void device_admit_counts_live_ips_and_the_remote_table(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_session_rec *a = open_session(t, 0, "in", "10.0.0.1:1000");
    sv_session_rec *b = open_session(t, 1, "in", "[2001:db8::1]:443");
    sv_session_rec *other = open_session(t, 1, "in", "10.9.9.9:1");
    sv_session_rec *anon = open_session(t, 0, "in", "10.8.8.8:1"); /* not bound: not counted */
    sv_tracker_session_bind_user(t, a, 7);
    sv_tracker_session_bind_user(t, b, 7);
    sv_tracker_session_bind_user(t, other, 8);
    assert_true(probe_admit(t, 7, 0, "10.0.0.5:1"));
    assert_true(probe_admit(t, 7, 2, "10.0.0.1:2000"));    /* known IP, other port */
    assert_true(probe_admit(t, 7, 1, "[2001:db8::1]:9"));  /* known even at limit 1 */
    assert_false(probe_admit(t, 7, 2, "10.0.0.5:1"));      /* 2 IPs live */
    assert_true(probe_admit(t, 7, 3, "10.0.0.5:1"));
    assert_true(probe_admit(t, 9, 1, "10.8.8.8:2"));       /* anon is nobody's */
    assert_true(probe_admit(t, 7, 40, "10.0.0.5:1"));      /* heap-sized scan */
    assert_int_equal(sv_tracker_device_refusals(t), 1);

    sv_device_count remote[] = {
        {.user = 8, .count = 1}, {.user = 7, .count = 1}, {.user = 7, .count = 0}};
    assert_int_equal(sv_tracker_set_remote_devices(t, remote, 3), 0);
    assert_false(probe_admit(t, 7, 3, "10.0.0.5:1")); /* 2 local + 1 remote */
    assert_true(probe_admit(t, 7, 3, "10.0.0.1:3"));  /* known IP still admitted */
    assert_true(probe_admit(t, 7, 4, "10.0.0.5:1"));
    assert_false(probe_admit(t, 8, 2, "10.0.0.5:1")); /* 1 local + 1 remote */
    assert_int_equal(sv_tracker_set_remote_devices(t, NULL, 0), 0); /* cleared */
    assert_true(probe_admit(t, 7, 3, "10.0.0.5:1"));
    assert_int_equal(sv_tracker_device_refusals(t), 3);

    sv_tracker_session_close(t, a); /* closed sessions stop counting */
    assert_true(probe_admit(t, 7, 2, "10.0.0.5:1"));
    sv_tracker_session_close(t, b);
    sv_tracker_session_close(t, other);
    sv_tracker_session_close(t, anon);
    sv_tracker_free(t);
}

static void device_admit_binds_and_asks_the_fleet_for_new_ips_only(void **state)
{
    (void)state;
    sv_tracker *t = new_tracker(2);
    sv_session_rec *a = open_session(t, 0, "in", "10.0.0.1:1000");
    assert_int_equal(sv_tracker_session_admit(t, a, 7, 1, true), SV_DEVICE_ASK_FLEET);
    assert_false(atomic_load(&a->has_user)); /* not bound before the fleet answers */
    sv_tracker_session_admit_fleet(t, a, 7, true);
    assert_true(atomic_load(&a->has_user));
    sv_session_rec *b = open_session(t, 1, "in", "10.0.0.1:2000"); /* known IP: no question */
    assert_int_equal(sv_tracker_session_admit(t, b, 7, 1, true), SV_DEVICE_ADMITTED);
    assert_true(atomic_load(&b->has_user));
    sv_session_rec *c = open_session(t, 1, "in", "10.0.0.2:1");
    assert_int_equal(sv_tracker_session_admit(t, c, 7, 1, false), SV_DEVICE_REFUSED);
    assert_false(atomic_load(&c->has_user));
    sv_tracker_session_admit_fleet(t, c, 7, false);
    assert_false(atomic_load(&c->has_user));
    assert_int_equal(sv_tracker_device_refusals(t), 2);
    sv_session_rec *d = open_session(t, 1, "in", "10.0.0.3:1"); /* unlimited: bound at once */
    assert_int_equal(sv_tracker_session_admit(t, d, 9, 0, true), SV_DEVICE_ADMITTED);
    assert_true(atomic_load(&d->has_user));
    sv_tracker_session_close(t, a);
    sv_tracker_session_close(t, b);
    sv_tracker_session_close(t, c);
    sv_tracker_session_close(t, d);
    sv_tracker_free(t);
}

typedef struct racer {
    sv_tracker *t;
    sv_session_rec *rec;
    pthread_barrier_t *go;
    sv_device_verdict v;
} racer;

static void *race_admit(void *arg)
{
    racer *r = arg;
    pthread_barrier_wait(r->go);
    r->v = sv_tracker_session_admit(r->t, r->rec, 7, 2, false);
    return NULL;
}

/* Issue 12: four new IPs of one user on four workers at the same instant, limit 2: exactly two
 * are admitted. The test hook widens the window between check and insertion to 20 ms, so a check
 * and an insertion that are not one step let all four through. */
static void device_admit_is_atomic_across_workers(void **state)
{
    (void)state;
    setenv("KATANA_TEST_ADMIT_DELAY_MS", "20", 1);
    sv_tracker *t = new_tracker(4);
    unsetenv("KATANA_TEST_ADMIT_DELAY_MS");
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 4);
    racer r[4];
    pthread_t th[4];
    for (unsigned i = 0; i < 4; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%u:4000", i + 2);
        r[i] = (racer){.t = t, .rec = open_session(t, i, "in", src), .go = &go};
        assert_int_equal(pthread_create(&th[i], NULL, race_admit, &r[i]), 0);
    }
    unsigned admitted = 0;
    for (unsigned i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        admitted += r[i].v == SV_DEVICE_ADMITTED;
    }
    assert_int_equal(admitted, 2);
    assert_int_equal(sv_tracker_device_refusals(t), 2);
    for (unsigned i = 0; i < 4; i++)
        sv_tracker_session_close(t, r[i].rec);
    pthread_barrier_destroy(&go);
    sv_tracker_free(t);
}

/* ---- two threads ------------------------------------------------------------------------- */

typedef struct smoke {
    sv_tracker *t;
    _Atomic bool done;
    _Atomic unsigned ticks; /* the worker starts after the first tick, so the two overlap */
    uint64_t flow_bytes, wire_bytes; /* what the worker added */
} smoke;

static void *smoke_worker(void *arg)
{
    smoke *sm = arg;
    while (atomic_load(&sm->ticks) == 0)
        sched_yield();
    sv_session_rec *sess = open_session(sm->t, 1, "in", "10.0.0.1:9");
    sv_tracker_session_bind_user(sm->t, sess, 3);
    for (unsigned i = 0; i < 2000; i++) {
        sv_flow_rec *f = open_flow(sm->t, i % 2, "in", "out@v1", 3, sess->info.id);
        for (unsigned k = 0; k < 20; k++) {
            sv_meter_add(&f->bytes->up, k + 1);
            sv_meter_add(&f->bytes->down, 2);
            sv_meter_add(&sess->wire->up, 3);
            sm->flow_bytes += k + 3;
            sm->wire_bytes += 3;
        }
        sv_tracker_flow_close(sm->t, f);
    }
    sv_tracker_session_close(sm->t, sess);
    atomic_store(&sm->done, true);
    return NULL;
}

static void concurrent_counting_loses_and_doubles_nothing(void **state)
{
    (void)state;
    smoke sm = {.t = new_tracker(2)};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, smoke_worker, &sm), 0);
    uint64_t taken = 0;
    while (!atomic_load(&sm.done)) {
        sv_tracker_tick(sm.t, 1000000);
        sv_usage *u = NULL;
        long n = sv_tracker_take_usage(sm.t, &u);
        for (long i = 0; i < n; i++)
            taken += u[i].up + u[i].down;
        free(u);
        atomic_fetch_add(&sm.ticks, 1);
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    sv_tracker_tick(sm.t, 1000000); /* the last bytes */
    sv_tracker_tick(sm.t, 1000000); /* an idle tick */
    sv_usage *u = NULL;
    long n = sv_tracker_take_usage(sm.t, &u);
    for (long i = 0; i < n; i++)
        taken += u[i].up + u[i].down;
    free(u);
    sv_stats s;
    assert_int_equal(sv_tracker_stats(sm.t, &s), 0);
    assert_int_equal(s.total.up + s.total.down, sm.flow_bytes);
    assert_int_equal(s.total.flows, 0);
    assert_int_equal(s.n_users, 0); /* nothing moved in the last tick */
    assert_int_equal(s.total.up_rate + s.total.down_rate, 0);
    sv_flow_info *left = NULL;
    assert_int_equal(sv_tracker_flows(sm.t, &left), 0);
    free(left);
    assert_int_equal(s.inbounds[0].up + s.inbounds[0].down, sm.flow_bytes);
    assert_int_equal(taken, sm.wire_bytes);
    sv_stats_free(&s);
    sv_tracker_free(sm.t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_sampler_counts_every_byte_once_by_inbound_outbound_and_user),
        cmocka_unit_test(rates_saturate_instead_of_overflowing),
        cmocka_unit_test(a_flow_record_keeps_its_strings_and_lists_them),
        cmocka_unit_test(events_report_opened_then_closed_with_final_counts),
        cmocka_unit_test(a_reader_started_before_the_first_event_misses_nothing),
        cmocka_unit_test(a_lagging_reader_is_told_how_many_it_missed),
        cmocka_unit_test(flow_ids_name_their_worker_and_listing_is_sorted),
        cmocka_unit_test(kill_flags_one_flow_and_wakes_its_worker),
        cmocka_unit_test(kill_where_counts_each_flow_once),
        cmocka_unit_test(close_sessions_selects_and_never_counts_twice),
        cmocka_unit_test(take_usage_returns_deltas_then_nothing),
        cmocka_unit_test(user_presence_counts_sessions_and_distinct_ips),
        cmocka_unit_test(device_decision_follows_the_issue_rule),
        cmocka_unit_test(device_admit_counts_live_ips_and_the_remote_table),
        cmocka_unit_test(device_admit_binds_and_asks_the_fleet_for_new_ips_only),
        cmocka_unit_test(device_admit_is_atomic_across_workers),
        cmocka_unit_test(concurrent_counting_loses_and_doubles_nothing),
        cmocka_unit_test(remembered_groups_survive_table_growth_and_users_stay_sorted),
        cmocka_unit_test(a_reused_slot_counts_only_for_its_new_flow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
