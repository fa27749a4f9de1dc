/*
 * The planner: a pure function from (running state, desired spec) to the steps that reconcile
 * them (seed 001, "plan, prepare, commit"). It validates first, touches nothing, reads no clock.
 */
#ifndef SV_PLAN_H
#define SV_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "supervisor/supervisor.h"

enum sv_step_kind {
    SV_STEP_REUSE = 1,      /**< keep the running resource as it is */
    SV_STEP_BUILD,          /**< build a new resource (outbound: at `version`) */
    SV_STEP_SWAP_HANDLER,   /**< inbound keeps its listener; new connections get a new handler */
    SV_STEP_BIND,           /**< inbound needs a listener on its (new) bind */
    SV_STEP_STOP_ACCEPTING, /**< close the listener on `bind` (address:port text) */
    SV_STEP_CLOSE_SESSIONS, /**< close every session of inbound `tag` (removed inbound) */
    SV_STEP_DRAIN,          /**< outbound `tag@version` was replaced or removed */
    SV_STEP_PUBLISH_PLANE,  /**< routes or targets changed: publish a new plane (epoch + 1) */
    SV_STEP_DISRUPT,        /**< a change that ends live connections; needs allow_disruptive */
};

enum sv_resource { SV_RES_INBOUND = 1, SV_RES_OUTBOUND, SV_RES_ROUTE, SV_RES_USER_SET };

typedef struct sv_step {
    enum sv_step_kind kind;
    enum sv_resource resource;
    char tag[SV_TAG_MAX + 1];
    uint32_t version;  /**< outbound version for REUSE/BUILD/DRAIN of an outbound */
    char bind[80];     /**< "address:port" for BIND / STOP_ACCEPTING */
    char reason[128];  /**< SV_STEP_DISRUPT */
} sv_step;

typedef struct sv_plan {
    sv_step *steps;
    size_t n_steps;
} sv_plan;

/** The running state the planner compares against. */
typedef struct sv_running {
    const sv_spec *spec;                /**< NULL before the first apply */
    const uint32_t *outbound_versions;  /**< parallel to spec->outbounds */
    uint32_t next_version;              /**< first version never used yet (versions start at 1) */
} sv_running;

/**
 * Plan the reconciliation of @p running to @p desired. Validates @p desired first.
 * Order of steps: outbounds (REUSE/BUILD, then DRAIN of replaced/removed versions), ROUTE
 * (REUSE/BUILD), PUBLISH_PLANE (when any outbound was built or drained or the route changed),
 * inbounds (REUSE / SWAP_HANDLER / BUILD+BIND / BIND on a changed bind + STOP_ACCEPTING of the
 * old one), removed inbounds (STOP_ACCEPTING + CLOSE_SESSIONS).
 * An inbound is REUSEd when its spec is equal (user *contents* are not part of the plan: user
 * tables are rebuilt by prepare when admissions differ). Same bind, other protocol settings or
 * user set tag → SWAP_HANDLER.
 * @return 0 (free with sv_plan_free()), -EINVAL with err set (validation), -ENOMEM.
 */
int sv_plan_make(const sv_running *running, const sv_spec *desired, sv_plan *out, sv_error *err);

void sv_plan_free(sv_plan *plan);

/** Equality of typed resource specs, the reuse criterion. */
bool sv_inbound_spec_equal(const sv_inbound_spec *a, const sv_inbound_spec *b);
bool sv_outbound_spec_equal(const sv_outbound_spec *a, const sv_outbound_spec *b);
bool sv_route_spec_equal(const sv_route_spec *a, const sv_route_spec *b);
bool sv_user_set_equal(const sv_user_set *a, const sv_user_set *b);

/** "address:port" ("[v6]:port") of a bind into @p buf. */
void sv_bind_format(const sv_bind *b, char *buf, size_t cap);

#endif
