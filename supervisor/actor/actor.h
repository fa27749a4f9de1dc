/*
 * The supervisor actor's internals (seed 001), shared by the files of supervisor/actor/ and by
 * nothing else: its state (struct sv_supervisor, opaque in supervisor.h), the staged work of one
 * apply, and the sv__ functions one file gives the others. Everything here runs on the control
 * loop, one command at a time.
 *
 * Calls go one way (tests/unit/t-no-cycles.sh): users.c → apply.c → prepare.c → sockets.c;
 * certs.c → prepare.c; apply.c, users.c, life.c → drains.c; every file but sockets.c and
 * counters.c → workers.c (messages, the listener table). counters.c (the read side) and
 * sockets.c call no other file of the actor.
 */
#ifndef SV_ACTOR_ACTOR_H
#define SV_ACTOR_ACTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/plan.h"
#include "supervisor/runtime.h"

/** Identity of a certificate or key file as stat() sees it; all zero when it cannot be read. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    long long mtime_ns;
} file_id;

/** The last certificate reload refused for a listener: the same files failing the same way are
 *  reported once, not on every sync. */
typedef struct cert_refusal {
    bool set;
    file_id cert, key;
    char msg[sizeof ((sv_error *)0)->msg];
} cert_refusal;

/** A listener as the control loop knows it: one socket per worker lives on the workers. */
typedef struct ctl_listener {
    uint32_t id;
    char tag[SV_TAG_MAX + 1];
    char bind[80];
    sv_handler *handler; /**< the control loop's reference to the current handler */
    sv_replay_ref *replay;
    cert_refusal refused; /**< sv_reload_certs' last refusal (control loop only) */
} ctl_listener;

struct sv_supervisor {
    uv_loop_t *control;
    unsigned n_workers;
    sv_worker *workers[SV_WORKERS_MAX];
    sv_shared shared;
    sv_spec running;
    bool has_running;
    sv_target **targets; /**< parallel to running.outbounds */
    uint64_t *versions;  /**< parallel to running.outbounds */
    sv_tag_version *tag_versions; /**< every outbound tag built so far, its latest version */
    size_t n_tag_versions;
    sv_routes_ref *routes;
    sv_plane *plane;
    uint64_t epoch;
    ctl_listener *listeners;
    size_t n_listeners, cap_listeners;
    sv_list spare;  /**< worker messages allocated ahead (sv_msg), so that commit cannot fail */
    size_t n_spare;
    uint32_t next_listener_id;
    uv_timer_t *sampler;
    uint64_t last_tick_ns;
    /** uv_hrtime() of the sampler's last tick, for other threads (sv_control_silence_ms) */
    _Atomic uint64_t beat_ns;
    uint32_t sample_every_ms; /**< the sampler's interval */
    uint32_t conns_peak;        /**< most TCP connections seen since the last trim */
    sv_addrset *own_addrs;      /**< the node's own addresses the workers have */
    uint64_t own_addrs_read_ns; /**< when they were last read (uv_hrtime) */
    bool own_addrs_failing;     /**< the last read failed (logged once per episode) */
    sv_list graces;             /**< pending CloseAfter timers (grace_timer), ended at shutdown */
    bool shut;
};

/** A pending CloseAfter (seed 001 "policies") on the control loop: revoke a
 *  listener's sessions of users its current handler no longer admits, or kill the flows of a
 *  drained outbound version. Ended, not waited for, at shutdown. */
typedef struct grace_timer {
    uv_timer_t timer;
    sv_list link;
    sv_supervisor *sv;
    uint32_t listener;             /**< revoke: the listener's id; 0 = a drain */
    char outbound[SV_TAG_MAX + 16]; /**< drain: "tag@vN" */
    sv_target *target;              /**< drain: that version (a reference), or NULL */
} grace_timer;

/* ---- staged work of one apply ---------------------------------------------------------------- */

typedef struct staged_listener {
    ctl_listener l;
    int tcp_fds[SV_WORKERS_MAX], udp_fds[SV_WORKERS_MAX];
    bool is_new;   /**< bound in prepare; else an existing listener getting a new handler */
    bool revoke;
} staged_listener;

typedef struct prepared {
    sv_target **targets; /**< parallel to spec->outbounds */
    uint64_t *versions;
    sv_tag_version *tag_versions; /**< the table to keep (sv_plan_versions) */
    size_t n_tag_versions;
    sv_routes_ref *routes;
    bool publish;
    sv_plane *plane;     /**< the plane to publish (when publish), built in prepare */
    sv_spec spec;        /**< the copy of the spec that becomes the running one */
    bool has_spec;
    bool adopt;          /**< sv_apply_take: spec is the caller's, moved in, not a copy */
    staged_listener *ls;
    size_t n_ls;
    sv_target **was;     /**< commit: the running targets it replaced, kept for the drains */
    size_t n_was;
    bool certs_only; /**< sv_reload_certs: a pair that does not load is an error to report */
} prepared;

/* ---- workers.c: messages to the workers, the listener table ------------------------------- */

/** Have @p n worker messages on the spare list. @return 0 or -ENOMEM (what was allocated
 *  stays on the list). */
int sv__msgs_reserve(sv_supervisor *sv, size_t n);

/** A spare message, else a new one (outside commit only: shutdown). @return the zeroed message
 *  (the worker frees it) or NULL when none can be had. */
sv_msg *sv__msg_take(sv_supervisor *sv);

/** Post message @p kind to worker @p w with its fields (a handler or plane reference moves with
 *  it; -1 for no descriptor). Logged, and dropped, when no message can be had. */
void sv__post(sv_supervisor *sv, unsigned w, enum sv_msg_kind kind, uint32_t listener,
              sv_handler *h, sv_plane *p, int tcp_fd, int udp_fd, bool revoke);

/** Give every worker a reference to plane @p p and make it the actor's (the actor's reference to
 *  the previous plane is dropped). Needs one message per worker reserved. */
void sv__publish_plane(sv_supervisor *sv, sv_plane *p);

/** Re-read the node's own addresses (the host's interfaces and every inbound's listen
 *  address) and give the workers the new set when it changed; a failed read keeps the old set,
 *  logged once until a read succeeds again. */
void sv__own_addrs_refresh(sv_supervisor *sv);

/** Start listener @p s bound in prepare on every worker (its room and messages reserved there);
 *  its handler and sockets move to the listener table. */
void sv__listener_add(sv_supervisor *sv, staged_listener *s);

/** Stop listener @p i of the table on every worker and drop it from the table. */
void sv__listener_remove_at(sv_supervisor *sv, size_t i);

/** Give running listener @p s's new handler to every worker (with @p revoke: the sessions of
 *  users it no longer admits are closed); the handler reference moves to the table. */
void sv__listener_swap(sv_supervisor *sv, staged_listener *s, bool revoke);

/** Close, on every worker, the sessions of listener @p id whose principal its current handler no
 *  longer admits. */
void sv__listener_revoke(sv_supervisor *sv, uint32_t id);

/* ---- sockets.c -------------------------------------------------------------------------- */

/** Bind @p in's sockets for @p s: one TCP (and, when the inbound takes UDP, one UDP) SO_REUSEPORT
 *  socket per worker. @return 0, or a negative errno with @p err set and nothing left open. */
int sv__bind_all(sv_supervisor *sv, staged_listener *s, const sv_inbound_spec *in, sv_error *err);

/** Close the first @p n workers' sockets of @p s and mark them -1. */
void sv__close_fds(staged_listener *s, unsigned n);

/* ---- prepare.c -------------------------------------------------------------------------- */

/** The step of @p plan for resource @p res, @p kind and @p tag, or NULL. */
const sv_step *sv__find_step(const sv_plan *plan, enum sv_resource res, enum sv_step_kind kind,
                             const char *tag);

/** The running listener of inbound @p tag, or NULL. */
ctl_listener *sv__running_listener(sv_supervisor *sv, const char *tag);

/** What the planner needs of the running state (spec, targets, versions) in @p r; borrowed. */
void sv__running_view(const sv_supervisor *sv, sv_running *r);

/** Release what @p p holds (its first @p n_outbounds targets, listeners and their sockets, plane,
 *  spec copy); @p sv may be NULL (sv_check). */
void sv__prepared_free(sv_supervisor *sv, prepared *p, size_t n_outbounds);

/** Stage inbound @p in of @p spec in @p p: a new listener (bound here), or a new handler for a
 *  running one. @return 0 or a negative errno with @p err set (seed 001's build error). */
int sv__prepare_inbound(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec,
                        const sv_inbound_spec *in, prepared *p, sv_error *err);

/** Prepare @p plan for @p spec (moved in with @p adopt) in @p p: everything that can fail, with
 *  nothing running touched; @p sv NULL checks only. @return 0, or a negative errno with @p err
 *  set and @p p freed. */
int sv__prepare(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec, bool adopt,
                prepared *p, sv_error *err);

/* ---- drains.c --------------------------------------------------------------------------- */

/** End CloseAfter timer @p g now, without acting on it (shutdown). */
void sv__grace_end(grace_timer *g);

/** Swap existing listener @p s's handler under its inbound's user removal policy in @p spec
 *  (with @p revoke): Close revokes with the swap, CloseAfter after the grace, Keep never. */
void sv__swap_with_policy(sv_supervisor *sv, staged_listener *s, const sv_spec *spec,
                          bool revoke);

/** After the publish (every worker adopted the plane): each DRAIN step's policy of @p plan on
 *  its version, found among the targets @p p's commit replaced. */
void sv__act_on_drains(sv_supervisor *sv, const sv_plan *plan, const prepared *p);

/* ---- apply.c ---------------------------------------------------------------------------- */

/** Speed limits (seed 003 publish_speed_limits): every user of every set of @p spec
 *  with a speed limit, the smallest of a user in several sets; on out of memory the previous
 *  limits stay (logged). */
void sv__publish_speed_limits(sv_supervisor *sv, const sv_spec *spec);

/** sv_apply(), and with @p adopt sv_apply_take(): @p spec becomes the running spec. Same
 *  returns as sv_apply(). */
int sv__apply(sv_supervisor *sv, const sv_spec *spec, bool adopt, const sv_apply_options *opts,
              sv_apply_report *report, sv_error *err);

#endif
