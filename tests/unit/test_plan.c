/*
 * Unit tests for the planner (supervisor/plan.c; seed 001 "plan", seed 000 "publish the plane",
 * "drain") and the spec helpers (supervisor/spec.c: clone, free, equality, bind text, lookup,
 * report free). Running state is simulated the way the actor keeps it: a clone of the applied
 * spec, the version of each outbound, and every tag's latest version.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <inttypes.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/plan.h"
#include "supervisor/supervisor.h"

/* ---- fixture: a valid spec from string literals (nothing to free) ------------------------ */

typedef struct fx {
    sv_spec spec;
    sv_inbound_spec in[3];
    sv_outbound_spec out[3];
    sv_user_set sets[2];
    sv_user users[2];
    sv_route_rule rules[1];
    sv_route_match m[2];
    char *r_inbounds[1];
} fx;

/*
 * inbounds ss1 127.0.0.1:8388 and ss2 [::1]:8389; outbounds direct, block, spare (no rule names
 * spare); user set u {1, 2}; rule 0 (suffix ads.example or 10.0.0.0/8, from ss1) → block;
 * default direct.
 */
static void fx_init(fx *f)
{
    memset(f, 0, sizeof *f);
    f->in[0] = (sv_inbound_spec){.tag = "ss1", .bind = {"127.0.0.1", 8388}, .udp = true,
                                 .protocol = SV_INBOUND_SHADOWSOCKS,
                                 .ss_cipher = SV_SS_AES_128_GCM, .users = "u"};
    f->in[1] = (sv_inbound_spec){.tag = "ss2", .bind = {"::1", 8389},
                                 .protocol = SV_INBOUND_SHADOWSOCKS,
                                 .ss_cipher = SV_SS_AES_256_GCM, .users = "u"};
    f->out[0] = (sv_outbound_spec){.tag = "direct", .kind = SV_OUTBOUND_DIRECT};
    f->out[1] = (sv_outbound_spec){.tag = "block", .kind = SV_OUTBOUND_BLACKHOLE};
    f->out[2] = (sv_outbound_spec){.tag = "spare", .kind = SV_OUTBOUND_DIRECT};
    f->users[0] = (sv_user){.id = 1, .label = "alice", .secret = "secret-1", .device_limit = 2};
    f->users[1] = (sv_user){.id = 2, .secret = "secret-2", .speed_limit = 1000};
    f->sets[0] = (sv_user_set){.tag = "u", .users = f->users, .n_users = 2};
    f->m[0] = (sv_route_match){.kind = SV_MATCH_DOMAIN_SUFFIX, .text = "ads.example"};
    f->m[1] = (sv_route_match){.kind = SV_MATCH_CIDR,
                               .cidr = {.family = AF_INET, .addr = {10}, .prefix = 8}};
    f->r_inbounds[0] = "ss1";
    f->rules[0] = (sv_route_rule){.matchers = f->m, .n_matchers = 2, .inbounds = f->r_inbounds,
                                  .n_inbounds = 1, .outbound = "block"};
    f->spec = (sv_spec){.inbounds = f->in, .n_inbounds = 2, .outbounds = f->out,
                        .n_outbounds = 3, .user_sets = f->sets, .n_user_sets = 1,
                        .route = {.rules = f->rules, .n_rules = 1, .default_outbound = "direct"}};
}

/* ---- simulated running state ------------------------------------------------------------- */

typedef struct run_state {
    sv_spec spec; /**< heap clone of the last committed spec */
    bool have;
    uint64_t *versions;
    sv_tag_version *tags; /**< sv_plan_versions() of the last commit */
    size_t n_tags;
} run_state;

static sv_running running_of(const run_state *rs)
{
    return (sv_running){.spec = rs->have ? &rs->spec : NULL, .outbound_versions = rs->versions,
                        .versions = rs->tags, .n_versions = rs->n_tags};
}

/** The latest version @p tag was built at in @p rs, 0 when never. */
static uint64_t last_of(const run_state *rs, const char *tag)
{
    for (size_t i = 0; i < rs->n_tags; i++)
        if (strcmp(rs->tags[i].tag, tag) == 0)
            return rs->tags[i].version;
    return 0;
}

static void run_free(run_state *rs)
{
    sv_spec_free(&rs->spec);
    free(rs->versions);
    free(rs->tags);
    memset(rs, 0, sizeof *rs);
}

/** What the actor's commit keeps: the spec, each outbound's version, every tag's version. */
static void commit(run_state *rs, const sv_plan *p, const sv_spec *desired)
{
    uint64_t *v = calloc(desired->n_outbounds + 1, sizeof *v);
    assert_non_null(v);
    size_t k = 0;
    sv_running r = running_of(rs);
    sv_tag_version *tags;
    size_t n_tags;
    assert_int_equal(sv_plan_versions(&r, p, &tags, &n_tags), 0);
    for (size_t i = 0; i < p->n_steps; i++) {
        const sv_step *s = &p->steps[i];
        if (s->resource != SV_RES_OUTBOUND || s->kind == SV_STEP_DRAIN)
            continue;
        assert_true(s->kind == SV_STEP_REUSE || s->kind == SV_STEP_BUILD);
        assert_true(k < desired->n_outbounds);
        assert_string_equal(s->tag, desired->outbounds[k].tag);
        v[k++] = s->version;
    }
    assert_int_equal(k, desired->n_outbounds);
    free(rs->versions);
    rs->versions = v;
    free(rs->tags);
    rs->tags = tags;
    rs->n_tags = n_tags;
    sv_spec_free(&rs->spec);
    assert_int_equal(sv_spec_clone(&rs->spec, desired), 0);
    rs->have = true;
}

/** Plan @p desired against @p rs (must succeed), commit it, and return the plan. */
static sv_plan plan_and_commit(run_state *rs, const sv_spec *desired)
{
    sv_plan p;
    sv_error err = {0};
    sv_running r = running_of(rs);
    int rc = sv_plan_make(&r, desired, &p, &err);
    if (rc != 0)
        fail_msg("plan refused: %s", err.msg);
    commit(rs, &p, desired);
    return p;
}

/** Index of the first step of @p kind / @p res / @p tag, or -1. */
static long find_step(const sv_plan *p, enum sv_step_kind kind, enum sv_resource res,
                      const char *tag)
{
    for (size_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].kind == kind && p->steps[i].resource == res &&
            strcmp(p->steps[i].tag, tag) == 0)
            return (long)i;
    return -1;
}

static size_t count_kind(const sv_plan *p, enum sv_step_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        n += p->steps[i].kind == kind;
    return n;
}

/** An expected step; bind NULL = not checked. */
typedef struct want {
    enum sv_step_kind kind;
    enum sv_resource res;
    const char *tag;
    uint64_t version;
    const char *bind;
} want;

static void expect_steps(const sv_plan *p, const want *w, size_t n)
{
    for (size_t i = 0; i < n && i < p->n_steps; i++) {
        const sv_step *s = &p->steps[i];
        if (s->kind != w[i].kind || s->resource != w[i].res || strcmp(s->tag, w[i].tag) != 0 ||
            s->version != w[i].version || (w[i].bind && strcmp(s->bind, w[i].bind) != 0))
            fail_msg("step %zu: got kind %d res %d tag '%s' v%" PRIu64 " bind '%s'; want kind %d "
                     "res %d tag '%s' v%" PRIu64, i, s->kind, s->resource, s->tag, s->version, s->bind,
                     w[i].kind, w[i].res, w[i].tag, w[i].version);
    }
    assert_int_equal(p->n_steps, n);
}

#define EXPECT_STEPS(p, ...)                                                                   \
    do {                                                                                       \
        const want w_[] = {__VA_ARGS__};                                                       \
        expect_steps((p), w_, sizeof w_ / sizeof w_[0]);                                       \
    } while (0)

#define OUT SV_RES_OUTBOUND
#define IN SV_RES_INBOUND
#define ROUTE SV_RES_ROUTE

/* ---- first plan ---------------------------------------------------------------------------- */

static void the_first_plan_binds_and_builds_everything_then_publishes(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_BUILD, OUT, "direct", 1, NULL},
                 {SV_STEP_BUILD, OUT, "block", 1, NULL},
                 {SV_STEP_BUILD, OUT, "spare", 1, NULL},
                 {SV_STEP_BUILD, ROUTE, "", 0, NULL},
                 {SV_STEP_BUILD, IN, "ss1", 0, NULL},
                 {SV_STEP_BIND, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_BUILD, IN, "ss2", 0, NULL},
                 {SV_STEP_BIND, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_PUBLISH_PLANE, ROUTE, "", 0, NULL});
    assert_int_equal(count_kind(&p, SV_STEP_DISRUPT), 0);
    assert_int_equal(p.steps[p.n_steps - 1].kind, SV_STEP_PUBLISH_PLANE); /* seed 001: ends so */
    assert_int_equal(last_of(&rs, "direct"), 1); /* every tag starts at version 1 */
    assert_int_equal(last_of(&rs, "spare"), 1);
    sv_plan_free(&p);
    assert_null(p.steps);
    assert_int_equal(p.n_steps, 0);
    run_free(&rs);
}

static void a_first_plan_continues_each_tag_from_its_given_version(void **state)
{
    fx f;
    fx_init(&f);
    const sv_tag_version seen[] = {{"direct", 6}, {"gone", 9}};
    sv_running r = {.spec = NULL, .versions = seen, .n_versions = 2};
    sv_plan p;
    assert_int_equal(sv_plan_make(&r, &f.spec, &p, NULL), 0);
    assert_int_equal(p.steps[find_step(&p, SV_STEP_BUILD, OUT, "direct")].version, 7);
    assert_int_equal(p.steps[find_step(&p, SV_STEP_BUILD, OUT, "spare")].version, 1);
    sv_tag_version *next;
    size_t n;
    assert_int_equal(sv_plan_versions(&r, &p, &next, &n), 0);
    assert_int_equal(n, 4); /* direct and gone kept, block and spare added */
    assert_string_equal(next[0].tag, "direct");
    assert_int_equal(next[0].version, 7);
    assert_string_equal(next[1].tag, "gone");
    assert_int_equal(next[1].version, 9);
    assert_string_equal(next[3].tag, "spare");
    assert_int_equal(next[3].version, 1);
    free(next);
    sv_plan_free(&p);
    /* No running state at all is a first apply too. */
    assert_int_equal(sv_plan_make(NULL, &f.spec, &p, NULL), 0);
    assert_int_equal(p.steps[find_step(&p, SV_STEP_BUILD, OUT, "direct")].version, 1);
    assert_true(find_step(&p, SV_STEP_PUBLISH_PLANE, ROUTE, "") >= 0);
    sv_plan_free(&p);
}

/* ---- outbounds, route, plane ------------------------------------------------------------- */

static void an_unchanged_spec_reuses_everything_and_publishes_nothing(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    fx g; /* an equal spec in other memory */
    fx_init(&g);
    p = plan_and_commit(&rs, &g.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_REUSE, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_REUSE, IN, "ss2", 0, "[::1]:8389"});
    assert_int_equal(last_of(&rs, "block"), 1);
    sv_plan_free(&p);
    run_free(&rs);
}

static void a_changed_outbound_is_a_new_version_and_the_old_one_drains_after_the_publish(
    void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.out[1].kind = SV_OUTBOUND_DIRECT; /* block changes */
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_BUILD, OUT, "block", 2, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_REUSE, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_REUSE, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_PUBLISH_PLANE, ROUTE, "", 0, NULL},
                 {SV_STEP_DRAIN, OUT, "block", 1, NULL});
    assert_true(find_step(&p, SV_STEP_DRAIN, OUT, "block") >
                find_step(&p, SV_STEP_PUBLISH_PLANE, ROUTE, ""));
    sv_plan_free(&p);
    run_free(&rs);
}

/* issue 12, seed 001 "policies": a DRAIN step carries the version's drain policy: the desired
 * outbound's, else (a removed tag) the running one's, else the spec's, else Keep; a change of the
 * policy alone rebuilds nothing. */
static void a_drain_step_carries_the_resolved_drain_policy(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    f.out[2].drain = (sv_policy){.kind = SV_POLICY_CLOSE}; /* spare's own, while it runs */
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.out[1].kind = SV_OUTBOUND_DIRECT; /* block changes: default Keep */
    p = plan_and_commit(&rs, &f.spec);
    sv_step *d = &p.steps[find_step(&p, SV_STEP_DRAIN, OUT, "block")];
    assert_int_equal(d->policy.kind, SV_POLICY_KEEP);
    sv_plan_free(&p);
    f.spec.drain = (sv_policy){.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 700};
    f.out[1].drain = (sv_policy){.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 300};
    p = plan_and_commit(&rs, &f.spec); /* only policies changed: nothing built or drained */
    assert_int_equal(count_kind(&p, SV_STEP_DRAIN), 0);
    assert_int_equal(count_kind(&p, SV_STEP_BUILD), 0);
    sv_plan_free(&p);
    f.out[1].kind = SV_OUTBOUND_BLACKHOLE; /* block changes again: its own policy */
    f.spec.n_outbounds = 2;                /* spare goes: the running spare's policy */
    p = plan_and_commit(&rs, &f.spec);
    d = &p.steps[find_step(&p, SV_STEP_DRAIN, OUT, "block")];
    assert_int_equal(d->policy.kind, SV_POLICY_CLOSE_AFTER);
    assert_int_equal(d->policy.grace_ms, 300);
    assert_int_equal(p.steps[find_step(&p, SV_STEP_DRAIN, OUT, "spare")].policy.kind,
                     SV_POLICY_CLOSE);
    sv_plan_free(&p);
    f.out[1].drain = (sv_policy){0}; /* block's own unset: the spec's */
    f.out[1].kind = SV_OUTBOUND_DIRECT;
    p = plan_and_commit(&rs, &f.spec);
    d = &p.steps[find_step(&p, SV_STEP_DRAIN, OUT, "block")];
    assert_int_equal(d->policy.kind, SV_POLICY_CLOSE_AFTER);
    assert_int_equal(d->policy.grace_ms, 700);
    sv_plan_free(&p);
    run_free(&rs);
}

static void each_rebuild_of_a_tag_takes_the_next_version(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    uint64_t prev = 1; /* block's first version */
    for (int round = 0; round < 4; round++) {
        f.out[1].kind = f.out[1].kind == SV_OUTBOUND_BLACKHOLE ? SV_OUTBOUND_DIRECT
                                                                : SV_OUTBOUND_BLACKHOLE;
        if (round % 2 == 1) /* another tag's rebuilds do not move block's count */
            f.out[2].kind = f.out[2].kind == SV_OUTBOUND_BLACKHOLE ? SV_OUTBOUND_DIRECT
                                                                    : SV_OUTBOUND_BLACKHOLE;
        uint64_t expected = prev + 1; /* the tag's own count, whatever the others did */
        p = plan_and_commit(&rs, &f.spec);
        long b = find_step(&p, SV_STEP_BUILD, OUT, "block");
        long d = find_step(&p, SV_STEP_DRAIN, OUT, "block");
        assert_true(b >= 0 && d >= 0);
        assert_int_equal(p.steps[b].version, expected);
        assert_true(p.steps[b].version > prev);
        assert_int_equal(p.steps[d].version, prev);
        assert_int_equal(rs.versions[1], p.steps[b].version);
        assert_int_equal(last_of(&rs, "spare"), 1 + (uint64_t)(round + 1) / 2);
        prev = p.steps[b].version;
        sv_plan_free(&p);
    }
    run_free(&rs);
}

static void a_tag_added_back_takes_a_version_it_never_had(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    /* Remove spare (v1), then add it back: it takes its next version, 2. */
    f.spec.n_outbounds = 2;
    p = plan_and_commit(&rs, &f.spec);
    assert_int_equal(p.steps[find_step(&p, SV_STEP_DRAIN, OUT, "spare")].version, 1);
    sv_plan_free(&p);
    f.spec.n_outbounds = 3;
    p = plan_and_commit(&rs, &f.spec);
    long b = find_step(&p, SV_STEP_BUILD, OUT, "spare");
    assert_true(b >= 0);
    assert_int_equal(p.steps[b].version, 2); /* never 1, never a version spare had before */
    assert_int_equal(count_kind(&p, SV_STEP_DRAIN), 0);
    sv_plan_free(&p);
    run_free(&rs);
}

static void removing_an_unreferenced_outbound_alone_republishes_the_plane(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.spec.n_outbounds = 2; /* spare goes; the route does not name it */
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_REUSE, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_REUSE, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_PUBLISH_PLANE, ROUTE, "", 0, NULL},
                 {SV_STEP_DRAIN, OUT, "spare", 1, NULL});
    sv_plan_free(&p);
    run_free(&rs);
}

static void a_route_change_alone_rebuilds_the_route_and_publishes(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.m[1].cidr.prefix = 16; /* one matcher field changes */
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_BUILD, ROUTE, "", 0, NULL},
                 {SV_STEP_REUSE, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_REUSE, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_PUBLISH_PLANE, ROUTE, "", 0, NULL});
    sv_plan_free(&p);
    f.spec.route.default_outbound = "spare"; /* the default alone changes */
    p = plan_and_commit(&rs, &f.spec);
    assert_true(find_step(&p, SV_STEP_BUILD, ROUTE, "") >= 0);
    assert_int_equal(count_kind(&p, SV_STEP_PUBLISH_PLANE), 1);
    assert_int_equal(count_kind(&p, SV_STEP_BUILD), 1);
    sv_plan_free(&p);
    run_free(&rs);
}

/* ---- inbounds ---------------------------------------------------------------------------- */

static void an_inbound_settings_change_swaps_its_handler(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.sets[1] = (sv_user_set){.tag = "v"};
    f.spec.n_user_sets = 2;
    for (int change = 0; change < 4; change++) {
        if (change == 0)
            f.in[0].ss_cipher = SV_SS_CHACHA20_POLY1305;
        else if (change == 1)
            f.in[0].udp = false;
        else if (change == 2)
            f.in[0].users = "v";
        else
            f.in[0].allow_private = true; /* issue 15: new flows follow the new handler */
        p = plan_and_commit(&rs, &f.spec);
        EXPECT_STEPS(&p,
                     {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                     {SV_STEP_REUSE, OUT, "block", 1, NULL},
                     {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                     {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                     {SV_STEP_SWAP_HANDLER, IN, "ss1", 0, "127.0.0.1:8388"},
                     {SV_STEP_REUSE, IN, "ss2", 0, "[::1]:8389"});
        sv_plan_free(&p);
    }
    run_free(&rs);
}

static void a_user_change_is_not_part_of_the_plan(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.users[0].secret = "rotated";
    f.sets[0].n_users = 1;
    p = plan_and_commit(&rs, &f.spec);
    assert_int_equal(count_kind(&p, SV_STEP_REUSE), p.n_steps);
    assert_int_equal(p.n_steps, 6);
    sv_plan_free(&p);
    run_free(&rs);
}

static void a_bind_change_binds_anew_and_stops_the_old_listener(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.in[0].bind.port = 9000;
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_BIND, IN, "ss1", 0, "127.0.0.1:9000"},
                 {SV_STEP_REUSE, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_STOP_ACCEPTING, IN, "ss1", 0, "127.0.0.1:8388"});
    sv_plan_free(&p);
    run_free(&rs);
}

static void removing_an_inbound_stops_accepting_then_closes_its_sessions(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.spec.n_inbounds = 1; /* ss2 goes */
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_REUSE, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_STOP_ACCEPTING, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_CLOSE_SESSIONS, IN, "ss2", 0, NULL});
    sv_plan_free(&p);
    run_free(&rs);
}

/* seed 001 / 000: the plan lists the inbound steps, then PublishPlane, then the drains; commit
 * runs its own fixed order on them (plane before any listener starts, drains last). */
static void an_inbound_and_an_outbound_removed_together_publish_after_the_inbound_steps(
    void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.spec.n_inbounds = 1;  /* ss2 goes */
    f.spec.n_outbounds = 2; /* spare goes */
    f.in[0].bind.port = 9000; /* ss1 moves */
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_BIND, IN, "ss1", 0, "127.0.0.1:9000"},
                 {SV_STEP_STOP_ACCEPTING, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_STOP_ACCEPTING, IN, "ss2", 0, "[::1]:8389"},
                 {SV_STEP_CLOSE_SESSIONS, IN, "ss2", 0, NULL},
                 {SV_STEP_PUBLISH_PLANE, ROUTE, "", 0, NULL},
                 {SV_STEP_DRAIN, OUT, "spare", 1, NULL});
    sv_plan_free(&p);
    run_free(&rs);
}

static void a_renamed_inbound_keeps_the_listener_and_closes_the_old_sessions(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.in[1].tag = "ss3"; /* same bind, new tag */
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_REUSE, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_SWAP_HANDLER, IN, "ss3", 0, "[::1]:8389"},
                 {SV_STEP_CLOSE_SESSIONS, IN, "ss2", 0, NULL});
    sv_plan_free(&p);
    run_free(&rs);
}

static void inbounds_trading_binds_swap_handlers_and_bind_nothing(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    sv_bind b0 = f.in[0].bind;
    f.in[0].bind = f.in[1].bind;
    f.in[1].bind = b0;
    p = plan_and_commit(&rs, &f.spec);
    assert_int_equal(p.steps[find_step(&p, SV_STEP_SWAP_HANDLER, IN, "ss1")].bind[0], '[');
    assert_string_equal(p.steps[find_step(&p, SV_STEP_SWAP_HANDLER, IN, "ss2")].bind,
                        "127.0.0.1:8388");
    assert_int_equal(count_kind(&p, SV_STEP_BIND), 0);
    assert_int_equal(count_kind(&p, SV_STEP_STOP_ACCEPTING), 0);
    assert_int_equal(count_kind(&p, SV_STEP_CLOSE_SESSIONS), 0);
    sv_plan_free(&p);
    run_free(&rs);
}

static void an_inbound_taking_over_a_removed_ones_bind_frees_its_own(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.in[0].bind = f.in[1].bind; /* ss1 moves onto ss2's listener; ss2 goes */
    f.spec.n_inbounds = 1;
    p = plan_and_commit(&rs, &f.spec);
    EXPECT_STEPS(&p,
                 {SV_STEP_REUSE, OUT, "direct", 1, NULL},
                 {SV_STEP_REUSE, OUT, "block", 1, NULL},
                 {SV_STEP_REUSE, OUT, "spare", 1, NULL},
                 {SV_STEP_REUSE, ROUTE, "", 0, NULL},
                 {SV_STEP_SWAP_HANDLER, IN, "ss1", 0, "[::1]:8389"},
                 {SV_STEP_STOP_ACCEPTING, IN, "ss1", 0, "127.0.0.1:8388"},
                 {SV_STEP_CLOSE_SESSIONS, IN, "ss2", 0, NULL});
    sv_plan_free(&p);
    run_free(&rs);
}

static void a_bind_spelled_differently_keeps_its_listener(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.in[1].bind.address = "0:0::1";
    p = plan_and_commit(&rs, &f.spec);
    assert_string_equal(p.steps[find_step(&p, SV_STEP_SWAP_HANDLER, IN, "ss2")].bind,
                        "[0:0::1]:8389");
    assert_int_equal(count_kind(&p, SV_STEP_BIND), 0);
    assert_int_equal(count_kind(&p, SV_STEP_STOP_ACCEPTING), 0);
    sv_plan_free(&p);
    run_free(&rs);
}

static void a_new_inbound_is_built_and_bound_without_a_publish(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    f.spec.n_inbounds = 1;
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    f.spec.n_inbounds = 2;
    p = plan_and_commit(&rs, &f.spec);
    long b = find_step(&p, SV_STEP_BUILD, IN, "ss2");
    assert_true(b >= 0);
    assert_int_equal(p.steps[b + 1].kind, SV_STEP_BIND);
    assert_string_equal(p.steps[b + 1].bind, "[::1]:8389");
    assert_int_equal(count_kind(&p, SV_STEP_PUBLISH_PLANE), 0);
    sv_plan_free(&p);
    run_free(&rs);
}

/* ---- refusal ----------------------------------------------------------------------------- */

static void an_invalid_spec_gives_an_error_and_no_plan(void **state)
{
    fx f;
    fx_init(&f);
    run_state rs = {0};
    sv_plan p = plan_and_commit(&rs, &f.spec);
    sv_plan_free(&p);
    fx g;
    fx_init(&g);
    g.spec.route.default_outbound = "nope";
    sv_error err = {0};
    sv_running r = running_of(&rs);
    p = (sv_plan){.steps = (sv_step *)&err, .n_steps = 99}; /* garbage in */
    assert_int_equal(sv_plan_make(&r, &g.spec, &p, &err), -EINVAL);
    assert_string_equal(err.msg, "route references unknown outbound nope");
    assert_null(p.steps);
    assert_int_equal(p.n_steps, 0);
    run_free(&rs);
}

/* ---- spec helpers ------------------------------------------------------------------------ */

static void a_cloned_spec_equals_the_original_and_shares_no_memory(void **state)
{
    fx f;
    fx_init(&f);
    sv_spec a, b;
    assert_int_equal(sv_spec_clone(&a, &f.spec), 0);
    assert_int_equal(sv_spec_clone(&b, &a), 0);
    sv_spec_free(&a); /* b must not depend on a */
    assert_int_equal(b.n_inbounds, 2);
    assert_int_equal(b.n_outbounds, 3);
    assert_int_equal(b.n_user_sets, 1);
    for (size_t i = 0; i < 2; i++) {
        assert_true(sv_inbound_spec_equal(&b.inbounds[i], &f.in[i]));
        assert_ptr_not_equal(b.inbounds[i].tag, f.in[i].tag);
    }
    for (size_t i = 0; i < 3; i++)
        assert_true(sv_outbound_spec_equal(&b.outbounds[i], &f.out[i]));
    assert_true(sv_user_set_equal(&b.user_sets[0], &f.sets[0]));
    assert_ptr_not_equal(b.user_sets[0].users[0].secret, f.users[0].secret);
    assert_null(b.user_sets[0].users[1].label); /* NULL stays NULL */
    assert_true(sv_route_spec_equal(&b.route, &f.spec.route));
    assert_string_equal(b.route.rules[0].inbounds[0], "ss1");
    assert_int_equal(b.user_removal.kind, f.spec.user_removal.kind);
    assert_int_equal(b.drain.kind, f.spec.drain.kind);
    sv_spec_free(&b);
    assert_null(b.inbounds);
    assert_int_equal(b.n_inbounds, 0);
    sv_spec_free(&b); /* freeing a zeroed spec is a no-op */
    sv_spec_free(NULL);
}

static void an_empty_spec_clones_to_an_empty_spec(void **state)
{
    sv_spec empty = {.user_removal = {.kind = SV_POLICY_KEEP},
                     .drain = {.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 5}}, c;
    assert_int_equal(sv_spec_clone(&c, &empty), 0);
    assert_null(c.inbounds);
    assert_null(c.route.rules);
    assert_null(c.route.default_outbound);
    assert_int_equal(c.user_removal.kind, SV_POLICY_KEEP);
    assert_int_equal(c.drain.kind, SV_POLICY_CLOSE_AFTER);
    assert_int_equal(c.drain.grace_ms, 5);
    sv_spec_free(&c);
}

static void a_user_set_clone_round_trips(void **state)
{
    fx f;
    fx_init(&f);
    sv_user_set c;
    assert_int_equal(sv_user_set_clone(&c, &f.sets[0]), 0);
    assert_true(sv_user_set_equal(&c, &f.sets[0]));
    c.users[1].device_limit = 9;
    assert_false(sv_user_set_equal(&c, &f.sets[0]));
    sv_user_set_free(&c);
    assert_null(c.users);
    assert_null(c.tag);
    sv_user_set_free(NULL);
}

static void every_inbound_field_takes_part_in_equality(void **state)
{
    for (int field = 0; field < 8; field++) {
        fx f, g;
        fx_init(&f);
        fx_init(&g);
        sv_inbound_spec *x = &g.in[0];
        switch (field) {
        case 0: x->tag = "other"; break;
        case 1: x->bind.address = "127.0.0.2"; break;
        case 2: x->bind.port = 1; break;
        case 3: x->udp = !x->udp; break;
        case 4: x->protocol = 0; break;
        case 5: x->ss_cipher = SV_SS_AES_256_GCM; break;
        case 6: x->users = "v"; break;
        default: x->allow_private = true; break;
        }
        assert_true(sv_inbound_spec_equal(&f.in[0], &f.in[0]));
        if (sv_inbound_spec_equal(&f.in[0], x))
            fail_msg("inbound field %d ignored", field);
    }
    fx f;
    fx_init(&f);
    sv_outbound_spec o = f.out[0];
    assert_true(sv_outbound_spec_equal(&o, &f.out[0]));
    o.kind = SV_OUTBOUND_BLACKHOLE;
    assert_false(sv_outbound_spec_equal(&o, &f.out[0]));
    o = f.out[0];
    o.tag = "direct2";
    assert_false(sv_outbound_spec_equal(&o, &f.out[0]));
}

static void every_user_field_takes_part_in_equality(void **state)
{
    for (int field = 0; field < 6; field++) {
        fx f, g;
        fx_init(&f);
        fx_init(&g);
        sv_user *u = &g.users[0];
        switch (field) {
        case 0: u->id = 99; break;
        case 1: u->secret = "secret-x"; break;
        case 2: u->speed_limit = 5; break;
        case 3: u->device_limit = 5; break;
        case 4: u->label = "bob"; break;
        default: g.sets[0].tag = "w"; break;
        }
        if (sv_user_set_equal(&f.sets[0], &g.sets[0]))
            fail_msg("user field %d ignored", field);
    }
    fx f, g;
    fx_init(&f);
    fx_init(&g);
    g.users[0] = f.users[1]; /* same users, other order */
    g.users[1] = f.users[0];
    assert_false(sv_user_set_equal(&f.sets[0], &g.sets[0]));
    g.sets[0].n_users = 1;
    assert_false(sv_user_set_equal(&f.sets[0], &g.sets[0]));
}

static void every_route_field_takes_part_in_equality(void **state)
{
    for (int field = 0; field < 10; field++) {
        fx f, g;
        fx_init(&f);
        fx_init(&g);
        sv_route_spec *r = &g.spec.route;
        switch (field) {
        case 0: r->default_outbound = "block"; break;
        case 1: r->n_rules = 0; break;
        case 2: g.rules[0].outbound = "direct"; break;
        case 3: g.rules[0].n_inbounds = 0; break;
        case 4: g.r_inbounds[0] = "ss2"; break;
        case 5: g.rules[0].n_matchers = 1; break;
        case 6: g.m[0].text = "ads.example.org"; break;
        case 7: g.m[0].kind = SV_MATCH_DOMAIN; break;
        case 8: g.m[1].cidr.addr[1] = 1; break;
        default: g.m[1].cidr.family = AF_INET6; break;
        }
        if (sv_route_spec_equal(&f.spec.route, r))
            fail_msg("route field %d ignored", field);
    }
    fx f, g;
    fx_init(&f);
    fx_init(&g);
    g.m[0] = (sv_route_match){.kind = SV_MATCH_PORT, .port_lo = 1, .port_hi = 2};
    f.m[0] = g.m[0];
    assert_true(sv_route_spec_equal(&f.spec.route, &g.spec.route));
    g.m[0].port_hi = 3;
    assert_false(sv_route_spec_equal(&f.spec.route, &g.spec.route));
    g.m[0] = (sv_route_match){.kind = SV_MATCH_NETWORK, .network = SV_NET_TCP};
    f.m[0] = g.m[0];
    assert_true(sv_route_spec_equal(&f.spec.route, &g.spec.route));
    g.m[0].network = SV_NET_UDP;
    assert_false(sv_route_spec_equal(&f.spec.route, &g.spec.route));
}

static void absent_and_empty_optional_strings_are_equal(void **state)
{
    fx f, g;
    fx_init(&f);
    fx_init(&g);
    f.users[1].label = NULL;
    g.users[1].label = "";
    assert_true(sv_user_set_equal(&f.sets[0], &g.sets[0]));
    /* Fields a matcher's kind does not use are not compared. */
    g.m[0].port_hi = 77;
    assert_true(sv_route_spec_equal(&f.spec.route, &g.spec.route));
}

static void a_bind_formats_as_address_colon_port(void **state)
{
    char buf[80];
    sv_bind_format(&(sv_bind){"127.0.0.1", 8388}, buf, sizeof buf);
    assert_string_equal(buf, "127.0.0.1:8388");
    sv_bind_format(&(sv_bind){"::1", 8388}, buf, sizeof buf);
    assert_string_equal(buf, "[::1]:8388");
    sv_bind_format(&(sv_bind){"0.0.0.0", 65535}, buf, sizeof buf);
    assert_string_equal(buf, "0.0.0.0:65535");
    char small[6];
    sv_bind_format(&(sv_bind){"10.0.0.1", 80}, small, sizeof small);
    assert_string_equal(small, "10.0."); /* truncated, still terminated */
}

static void a_user_set_is_found_by_tag(void **state)
{
    fx f;
    fx_init(&f);
    f.sets[1] = (sv_user_set){.tag = "v"};
    f.spec.n_user_sets = 2;
    assert_ptr_equal(sv_spec_user_set(&f.spec, "v"), &f.sets[1]);
    assert_ptr_equal(sv_spec_user_set(&f.spec, "u"), &f.sets[0]);
    assert_null(sv_spec_user_set(&f.spec, "w"));
    assert_null(sv_spec_user_set(&f.spec, NULL));
}

static char **strv(size_t n, const char *prefix)
{
    char **v = calloc(n, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(32);
        assert_non_null(v[i]);
        snprintf(v[i], 32, "%s %zu", prefix, i);
    }
    return v;
}

static void a_report_frees_every_group(void **state)
{
    sv_apply_report r = {0};
    r.reused = strv(2, "inbound");
    r.n_reused = 2;
    r.built = strv(1, "outbound");
    r.n_built = 1;
    r.drained = strv(3, "outbound x@v");
    r.n_drained = 3;
    r.removed = strv(1, "inbound");
    r.n_removed = 1;
    sv_apply_report_free(&r); /* leaks would show under LSan */
    assert_null(r.reused);
    assert_null(r.drained);
    assert_int_equal(r.n_built, 0);
    sv_apply_report_free(&r);
    sv_apply_report_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_first_plan_binds_and_builds_everything_then_publishes),
        cmocka_unit_test(a_first_plan_continues_each_tag_from_its_given_version),
        cmocka_unit_test(an_unchanged_spec_reuses_everything_and_publishes_nothing),
        cmocka_unit_test(
            a_changed_outbound_is_a_new_version_and_the_old_one_drains_after_the_publish),
        cmocka_unit_test(a_drain_step_carries_the_resolved_drain_policy),
        cmocka_unit_test(each_rebuild_of_a_tag_takes_the_next_version),
        cmocka_unit_test(a_tag_added_back_takes_a_version_it_never_had),
        cmocka_unit_test(removing_an_unreferenced_outbound_alone_republishes_the_plane),
        cmocka_unit_test(a_route_change_alone_rebuilds_the_route_and_publishes),
        cmocka_unit_test(an_inbound_settings_change_swaps_its_handler),
        cmocka_unit_test(a_user_change_is_not_part_of_the_plan),
        cmocka_unit_test(a_bind_change_binds_anew_and_stops_the_old_listener),
        cmocka_unit_test(removing_an_inbound_stops_accepting_then_closes_its_sessions),
        cmocka_unit_test(an_inbound_and_an_outbound_removed_together_publish_after_the_inbound_steps),
        cmocka_unit_test(a_renamed_inbound_keeps_the_listener_and_closes_the_old_sessions),
        cmocka_unit_test(inbounds_trading_binds_swap_handlers_and_bind_nothing),
        cmocka_unit_test(an_inbound_taking_over_a_removed_ones_bind_frees_its_own),
        cmocka_unit_test(a_bind_spelled_differently_keeps_its_listener),
        cmocka_unit_test(a_new_inbound_is_built_and_bound_without_a_publish),
        cmocka_unit_test(an_invalid_spec_gives_an_error_and_no_plan),
        cmocka_unit_test(a_cloned_spec_equals_the_original_and_shares_no_memory),
        cmocka_unit_test(an_empty_spec_clones_to_an_empty_spec),
        cmocka_unit_test(a_user_set_clone_round_trips),
        cmocka_unit_test(every_inbound_field_takes_part_in_equality),
        cmocka_unit_test(every_user_field_takes_part_in_equality),
        cmocka_unit_test(every_route_field_takes_part_in_equality),
        cmocka_unit_test(absent_and_empty_optional_strings_are_equal),
        cmocka_unit_test(a_bind_formats_as_address_colon_port),
        cmocka_unit_test(a_user_set_is_found_by_tag),
        cmocka_unit_test(a_report_frees_every_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
