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
    uint64_t version;  /**< outbound version for REUSE/BUILD/DRAIN of an outbound (per tag, from 1) */
    char bind[80];     /**< "address:port" for BIND / STOP_ACCEPTING */
    char reason[128];  /**< SV_STEP_DISRUPT */
    sv_policy policy;  /**< DRAIN: the version's drain policy (never SV_POLICY_DEFAULT): the
                            desired outbound's of that tag, else the running one's (a removed
                            tag), falling back to the desired spec's, else Keep (seed 001) */
} sv_step;

typedef struct sv_plan {
    sv_step *steps;
    size_t n_steps;
} sv_plan;

/** The latest version a tag was built at (seed 001 RunningState::versions). */
typedef struct sv_tag_version {
    char tag[SV_TAG_MAX + 1];
    uint64_t version; /**< 1 for its first build */
} sv_tag_version;

/** The running state the planner compares against. */
typedef struct sv_running {
    const sv_spec *spec;                /**< NULL before the first apply */
    const uint64_t *outbound_versions;  /**< parallel to spec->outbounds */
    /** every outbound tag ever built, removed ones too, with its latest version (seed 001:
     *  "versions never go back"; a tag added back continues from its old builds); NULL/0 =
     *  none built yet */
    const sv_tag_version *versions;
    size_t n_versions;
} sv_running;

/**
 * Plan the reconciliation of @p running to @p desired (seed 001 "plan"; seed 000 "publish the
 * plane", "drain"). Validates @p desired first (sv_validate); pure: touches nothing.
 *
 * Order of steps:
 *  1. outbounds, in desired order: REUSE (equal spec; `version` = its running version) or BUILD
 *     (new or changed tag; `version` = the tag's latest version in running->versions plus 1, or
 *     1 for a tag never built: seed 001 "outbound versions: u64, from 1 per tag");
 *  2. ROUTE: REUSE (equal route spec) or BUILD (changed, or first apply); `tag` is "";
 *  3. inbounds, in desired order: REUSE, SWAP_HANDLER, BUILD + BIND or BIND (below);
 *  4. for each running inbound, in running order: STOP_ACCEPTING (tag = the running inbound)
 *     when no desired inbound holds its bind, then CLOSE_SESSIONS when its tag is gone
 *     (removing an inbound: STOP_ACCEPTING then CLOSE_SESSIONS, seed 001);
 *  5. PUBLISH_PLANE (resource SV_RES_ROUTE, tag "") when an outbound was built or will be
 *     drained, or the route was built (always on the first apply, whose plan ends with it:
 *     seed 001 the_first_plan_binds_and_builds_everything_then_publishes); inbounds never
 *     cause it;
 *  6. DRAIN of every replaced or removed outbound version, in running order, last: after the
 *     publish, as seed 000 requires (a_changed_outbound_is_a_new_version_and_the_old_one_drains_
 *     after_the_publish).
 * The plan is a list of what to do, not the order commit does it in: commit runs its fixed
 * order (actor/apply.c commit(), seed 001 "commit"), in which the plane is published before any
 * listener starts and drains come after the publish.
 *
 * Inbounds: listeners are keyed by their bind (seed 001: "listeners are keyed by BindSpec"),
 * compared as socket addresses ("::1" equals "0::1"). `bind` is filled on every inbound step
 * except BUILD and CLOSE_SESSIONS. For a desired inbound with tag T on bind B:
 *  - B is held by running inbound T with an equal spec (sv_inbound_spec_equal) → REUSE;
 *  - B is held by a running inbound (T itself with other settings, or another tag that is
 *    removed or moves away: a rename or a swap of binds) → SWAP_HANDLER: the listener on B
 *    stays and new connections get T's handler. When `udp` changed, the runtime opens or closes
 *    the UDP socket of that listener as part of the swap;
 *  - B is held by no running inbound and T is new → BUILD + BIND (report: built);
 *  - B is held by no running inbound and T ran on another bind → BIND (report: rebound); T's
 *    old bind gets STOP_ACCEPTING in part 5 unless a desired inbound takes it over.
 * A running inbound whose tag is gone gets CLOSE_SESSIONS even when its bind is taken over.
 * User *contents* are not part of the plan (prepare rebuilds user tables when admissions
 * differ). No Shadowsocks change is disruptive: katana plans no DISRUPT step yet.
 * Limit: two binds that overlap without being equal across applies (0.0.0.0:p → 127.0.0.1:p)
 * are planned as BIND of the new one before STOP_ACCEPTING of the old one; prepare may then fail
 * with -EADDRINUSE.
 *
 * Versions count per tag (seed 001 "entity ids": OutboundId is (tag, version), {tag}@v{version}),
 * so a tag's version never repeats, even for a tag that is removed and added back; after
 * committing, the caller keeps sv_plan_versions()' table as its running->versions.
 *
 * @param running  NULL or running->spec == NULL means the first apply; otherwise
 *                 running->outbound_versions has running->spec->n_outbounds entries and
 *                 running->spec is a validated spec. running->versions may be given before
 *                 the first apply too (a tag then continues from it).
 * @param out      receives the plan (zeroed on error)
 * @return 0 (free with sv_plan_free()), -EINVAL with err set (validation), -ENOMEM.
 */
int sv_plan_make(const sv_running *running, const sv_spec *desired, sv_plan *out, sv_error *err);

/**
 * The version table to keep once @p plan is committed: @p running's (running->versions), with
 * each outbound BUILD step's tag set to the step's version (a tag never built before is
 * appended). Pure: the caller calls it in prepare, so that commit cannot fail.
 * @param out  receives a malloc'ed table the caller frees with free() (NULL when empty)
 * @param n    receives its number of entries
 * @return 0 or -ENOMEM (nothing is returned then).
 */
int sv_plan_versions(const sv_running *running, const sv_plan *plan, sv_tag_version **out,
                     size_t *n);

/** Free the steps of @p plan and zero it. NULL-safe. */
void sv_plan_free(sv_plan *plan);

/**
 * Equality of typed resource specs, the reuse criterion (seed 001: "compare typed specs with
 * =="): deep, field by field; NULL and "" optional strings are equal; route matchers compare the
 * fields their kind uses; user sets compare tag, then users in order by (id, secret,
 * speed_limit, device_limit, label).
 */
bool sv_inbound_spec_equal(const sv_inbound_spec *a, const sv_inbound_spec *b);
bool sv_outbound_spec_equal(const sv_outbound_spec *a, const sv_outbound_spec *b);
bool sv_route_spec_equal(const sv_route_spec *a, const sv_route_spec *b);
bool sv_user_set_equal(const sv_user_set *a, const sv_user_set *b);

/**
 * Write "address:port" ("[v6]:port" when the address has a ':') of @p b into @p buf, truncated
 * to @p cap bytes (80 always fits a validated bind). Example: "127.0.0.1:8388", "[::1]:8388".
 */
void sv_bind_format(const sv_bind *b, char *buf, size_t cap);

#endif
