/*
 * The planner (plan.h; seed 001 "plan, prepare, commit", seed 000 "publish the plane", "drain").
 * Pure: compares the running spec with the desired one and lists steps; touches nothing, reads
 * no clock. Step order and the inbound decisions are documented on sv_plan_make() in plan.h.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/plan.h"
#include "supervisor/supervisor.h"

/** The plan being written; capacity is computed up front, so pushes never reallocate. */
typedef struct builder {
    sv_step *steps;
    size_t n, cap;
} builder;

static sv_step *push(builder *b, enum sv_step_kind kind, enum sv_resource res, const char *tag)
{
    if (b->n == b->cap) /* cannot happen: plan_capacity() is an upper bound */
        abort();
    sv_step *s = &b->steps[b->n++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->resource = res;
    if (tag != NULL)
        snprintf(s->tag, sizeof s->tag, "%s", tag); /* validated: at most SV_TAG_MAX bytes */
    return s;
}

static void push_bind(builder *b, enum sv_step_kind kind, const char *tag, const sv_bind *bind)
{
    sv_step *s = push(b, kind, SV_RES_INBOUND, tag);
    sv_bind_format(bind, s->bind, sizeof s->bind);
}

/* ----------------------------------------------------------------------------------------- */
/* Lookups (validated specs: tags unique and non-empty, addresses parse)                     */
/* ----------------------------------------------------------------------------------------- */

static long find_outbound(const sv_spec *spec, const char *tag)
{
    for (size_t i = 0; spec != NULL && i < spec->n_outbounds; i++)
        if (strcmp(spec->outbounds[i].tag, tag) == 0)
            return (long)i;
    return -1;
}

static long find_inbound(const sv_spec *spec, const char *tag)
{
    for (size_t i = 0; spec != NULL && i < spec->n_inbounds; i++)
        if (strcmp(spec->inbounds[i].tag, tag) == 0)
            return (long)i;
    return -1;
}

/** The same socket address: same port and the same IP once parsed ("::1" == "0::1"). */
static bool bind_same(const sv_bind *a, const sv_bind *b)
{
    if (a->port != b->port)
        return false;
    uint8_t x[16] = {0}, y[16] = {0};
    if (inet_pton(AF_INET, a->address, x) == 1)
        return inet_pton(AF_INET, b->address, y) == 1 && memcmp(x, y, 4) == 0;
    if (inet_pton(AF_INET6, a->address, x) == 1)
        return inet_pton(AF_INET6, b->address, y) == 1 && memcmp(x, y, 16) == 0;
    return strcmp(a->address, b->address) == 0;
}

/** Index of the inbound of @p spec listening on @p bind, or -1. */
static long find_bind_holder(const sv_spec *spec, const sv_bind *bind)
{
    for (size_t i = 0; spec != NULL && i < spec->n_inbounds; i++)
        if (bind_same(&spec->inbounds[i].bind, bind))
            return (long)i;
    return -1;
}

/* ----------------------------------------------------------------------------------------- */
/* Outbounds, route, plane                                                                   */
/* ----------------------------------------------------------------------------------------- */

/** Was running outbound @p i replaced or removed by @p desired? */
static bool outbound_goes(const sv_spec *run, size_t i, const sv_spec *desired)
{
    long d = find_outbound(desired, run->outbounds[i].tag);
    return d < 0 || !sv_outbound_spec_equal(&desired->outbounds[d], &run->outbounds[i]);
}

/** The latest version @p tag was built at in @p running, 0 when never. */
static uint64_t last_version(const sv_running *running, const char *tag)
{
    for (size_t i = 0; running->versions != NULL && i < running->n_versions; i++)
        if (strcmp(running->versions[i].tag, tag) == 0)
            return running->versions[i].version;
    return 0;
}

/** REUSE/BUILD per desired outbound; a BUILD takes the tag's next version (seed 001: per tag,
 *  from 1). @return true when anything was built. */
static bool plan_outbounds(builder *b, const sv_running *running, const sv_spec *desired)
{
    bool built = false;
    for (size_t i = 0; i < desired->n_outbounds; i++) {
        const sv_outbound_spec *o = &desired->outbounds[i];
        long r = find_outbound(running->spec, o->tag);
        if (r >= 0 && sv_outbound_spec_equal(&running->spec->outbounds[r], o)) {
            push(b, SV_STEP_REUSE, SV_RES_OUTBOUND, o->tag)->version =
                running->outbound_versions[r];
        } else {
            push(b, SV_STEP_BUILD, SV_RES_OUTBOUND, o->tag)->version =
                last_version(running, o->tag) + 1;
            built = true;
        }
    }
    return built;
}

/** DRAIN of every replaced or removed running version, in running order. */
static void plan_drains(builder *b, const sv_running *running, const sv_spec *desired)
{
    const sv_spec *run = running->spec;
    for (size_t i = 0; run != NULL && i < run->n_outbounds; i++) {
        if (!outbound_goes(run, i, desired))
            continue;
        sv_step *s = push(b, SV_STEP_DRAIN, SV_RES_OUTBOUND, run->outbounds[i].tag);
        s->version = running->outbound_versions[i];
        long d = find_outbound(desired, run->outbounds[i].tag);
        s->policy = sv_drain_policy_of(desired, d >= 0 ? &desired->outbounds[d] : &run->outbounds[i]);
    }
}

static bool any_drain(const sv_running *running, const sv_spec *desired)
{
    const sv_spec *run = running->spec;
    for (size_t i = 0; run != NULL && i < run->n_outbounds; i++)
        if (outbound_goes(run, i, desired))
            return true;
    return false;
}

/* ----------------------------------------------------------------------------------------- */
/* Inbounds                                                                                  */
/* ----------------------------------------------------------------------------------------- */

/** Steps of one desired inbound @p d (see plan.h for the cases). */
static void plan_inbound(builder *b, const sv_spec *run, const sv_inbound_spec *d)
{
    long holder = find_bind_holder(run, &d->bind);
    long same = find_inbound(run, d->tag);
    if (holder >= 0) {
        bool keep = holder == same && sv_inbound_spec_equal(&run->inbounds[holder], d);
        push_bind(b, keep ? SV_STEP_REUSE : SV_STEP_SWAP_HANDLER, d->tag, &d->bind);
        return;
    }
    if (same < 0)
        push(b, SV_STEP_BUILD, SV_RES_INBOUND, d->tag);
    push_bind(b, SV_STEP_BIND, d->tag, &d->bind); /* same >= 0: rebound */
}

static void plan_inbounds(builder *b, const sv_spec *run, const sv_spec *desired)
{
    for (size_t i = 0; i < desired->n_inbounds; i++)
        plan_inbound(b, run, &desired->inbounds[i]);
    /* Running listeners no desired inbound holds stop; sessions of gone tags close. */
    for (size_t i = 0; run != NULL && i < run->n_inbounds; i++) {
        const sv_inbound_spec *r = &run->inbounds[i];
        if (find_bind_holder(desired, &r->bind) < 0)
            push_bind(b, SV_STEP_STOP_ACCEPTING, r->tag, &r->bind);
        if (find_inbound(desired, r->tag) < 0)
            push(b, SV_STEP_CLOSE_SESSIONS, SV_RES_INBOUND, r->tag);
    }
}

/* ----------------------------------------------------------------------------------------- */

/** An upper bound on the number of steps. */
static size_t plan_capacity(const sv_spec *run, const sv_spec *desired)
{
    size_t n = desired->n_outbounds + 2 * desired->n_inbounds + 2; /* + route + publish */
    if (run != NULL)
        n += run->n_outbounds + 2 * run->n_inbounds;
    return n;
}

int sv_plan_make(const sv_running *running, const sv_spec *desired, sv_plan *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = sv_validate(desired, err);
    if (rc < 0)
        return rc;
    const sv_spec *run = running != NULL ? running->spec : NULL;
    sv_running none = {0};
    if (running == NULL)
        running = &none;

    builder b = {.cap = plan_capacity(run, desired)};
    b.steps = calloc(b.cap, sizeof *b.steps);
    if (b.steps == NULL)
        return sv_error_set(err, -ENOMEM, "planning: out of memory");

    bool publish = plan_outbounds(&b, running, desired);
    bool route_same = run != NULL && sv_route_spec_equal(&run->route, &desired->route);
    push(&b, route_same ? SV_STEP_REUSE : SV_STEP_BUILD, SV_RES_ROUTE, "");
    publish = publish || !route_same || any_drain(running, desired);
    plan_inbounds(&b, run, desired);
    if (publish)
        push(&b, SV_STEP_PUBLISH_PLANE, SV_RES_ROUTE, "");
    plan_drains(&b, running, desired);

    out->steps = b.steps;
    out->n_steps = b.n;
    return 0;
}

int sv_plan_versions(const sv_running *running, const sv_plan *plan, sv_tag_version **out,
                     size_t *n)
{
    size_t have = running != NULL && running->versions != NULL ? running->n_versions : 0;
    size_t cap = have;
    for (size_t i = 0; i < plan->n_steps; i++)
        cap += plan->steps[i].kind == SV_STEP_BUILD && plan->steps[i].resource == SV_RES_OUTBOUND;
    *out = NULL;
    *n = 0;
    if (cap == 0)
        return 0;
    sv_tag_version *v = malloc(cap * sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    if (have > 0)
        memcpy(v, running->versions, have * sizeof *v);
    size_t len = have;
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *s = &plan->steps[i];
        if (s->kind != SV_STEP_BUILD || s->resource != SV_RES_OUTBOUND)
            continue;
        size_t j = 0;
        while (j < len && strcmp(v[j].tag, s->tag) != 0)
            j++;
        if (j == len)
            snprintf(v[len++].tag, sizeof v->tag, "%s", s->tag);
        v[j].version = s->version;
    }
    *out = v;
    *n = len;
    return 0;
}

void sv_plan_free(sv_plan *plan)
{
    if (plan == NULL)
        return;
    free(plan->steps);
    plan->steps = NULL;
    plan->n_steps = 0;
}
