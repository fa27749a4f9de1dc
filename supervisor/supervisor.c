/*
 * The supervisor actor (seed 001): runs on the control loop, one command at a time. apply =
 * validate → plan → prepare (everything that can fail; nothing running is touched) → commit
 * (cannot fail: publish the plane, start/swap/stop listeners, close sessions, keep state).
 * Prepare allocates everything commit needs: the plane, the copy of the spec, room in the
 * listener table and every worker message (the spare list), so commit only sends (issue 8).
 * sv_apply returns once every worker has adopted the new plane, so sv_epoch() is a fact.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "supervisor/bounds.h"
#include "supervisor/hints.h"
#include "supervisor/plan.h"
#include "supervisor/plane.h"
#include "supervisor/scan.h"
#include "supervisor/transport/tls.h"
#include "supervisor/util/holder.h"
#include "supervisor/util/log.h"
#include "supervisor/worker.h"

/** Identity of a certificate or key file as stat() sees it; all zero when it cannot be read. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    long long mtime_ns;
} file_id;

/** The last certificate reload refused for a listener: the same files failing the same way are
 *  reported once, not on every sync (issue 8). */
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
    uint32_t conns_peak;        /**< most TCP connections seen since the last trim (issue 33) */
    sv_addrset *own_addrs;      /**< the node's own addresses the workers have (issue 15) */
    uint64_t own_addrs_read_ns; /**< when they were last read (uv_hrtime) */
    bool own_addrs_failing;     /**< the last read failed (logged once per episode) */
    sv_list graces;             /**< pending CloseAfter timers (grace_timer), ended at shutdown */
    bool shut;
};

/** A pending CloseAfter (issue 12, seed 001 "policies") on the control loop: revoke a
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

static void wake_worker(void *ctx, unsigned worker)
{
    sv_supervisor *sv = ctx;
    sv_worker_wake(sv->workers[worker]);
}

/* ---- worker messages: allocated ahead, so that commit only sends --------------------------- */

static sv_msg *msg_alloc(void)
{
    if (sv__test_hooks.alloc_fails != NULL && sv__test_hooks.alloc_fails())
        return NULL;
    return calloc(1, sizeof(sv_msg));
}

/* Have @p n messages on the spare list. @return 0 or -ENOMEM (what was allocated stays). */
static int reserve_msgs(sv_supervisor *sv, size_t n)
{
    while (sv->n_spare < n) {
        sv_msg *m = msg_alloc();
        if (m == NULL)
            return -ENOMEM;
        sv_list_insert_tail(&sv->spare, &m->link);
        sv->n_spare++;
    }
    return 0;
}

/* A spare message, else a new one (only outside commit: shutdown). NULL when none. */
static sv_msg *take_msg(sv_supervisor *sv)
{
    if (sv->n_spare == 0)
        return msg_alloc();
    sv_list *first = sv->spare.next;
    sv_list_unlink(first);
    sv->n_spare--;
    sv_msg *m = sv_container_of(first, sv_msg, link);
    memset(m, 0, sizeof *m);
    return m;
}

static void post(sv_supervisor *sv, unsigned w, enum sv_msg_kind kind, uint32_t listener,
                 sv_handler *h, sv_plane *p, int tcp_fd, int udp_fd, bool revoke)
{
    sv_msg *m = take_msg(sv);
    if (m == NULL) {
        SV_LOG(SV_LOG_ERROR, "sv.actor", "out of memory posting to worker %u", w);
        return;
    }
    m->kind = kind;
    m->listener = listener;
    m->handler = h;
    m->plane = p;
    m->tcp_fd = tcp_fd;
    m->udp_fd = udp_fd;
    m->revoke = revoke;
    sv_worker_post(sv->workers[w], m);
}

static void publish_plane(sv_supervisor *sv, sv_plane *p)
{
    for (unsigned i = 0; i < sv->n_workers; i++) {
        sv_plane_ref(p);
        post(sv, i, SV_MSG_PUBLISH_PLANE, 0, NULL, p, -1, -1, false);
    }
    sv_plane_unref(sv->plane);
    sv->plane = p;
}

/* Re-read the node's own addresses (the host's interfaces and every inbound's listen address,
 * issue 15) and give the workers the new set when it changed. A failed read keeps the old set
 * and is logged once until a read succeeds again. */
static void refresh_own_addrs(sv_supervisor *sv)
{
    size_t n = sv->has_running ? sv->running.n_inbounds : 0;
    const char **binds = calloc(n ? n : 1, sizeof *binds);
    sv_addrset *set = NULL;
    int rc = binds != NULL ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++)
        binds[i] = sv->running.inbounds[i].bind.address;
    if (rc == 0)
        rc = sv_addrset_from_host(binds, n, &set);
    free(binds);
    sv->own_addrs_read_ns = uv_hrtime();
    if (rc != 0) {
        if (!sv->own_addrs_failing)
            SV_LOG(SV_LOG_WARN, "sv.actor", "reading the host's addresses failed: %s; keeping the "
                   "last known ones", strerror(-rc));
        sv->own_addrs_failing = true;
        return;
    }
    sv->own_addrs_failing = false;
    if (sv->own_addrs != NULL && sv_addrset_equal(set, sv->own_addrs)) {
        sv_addrset_unref(set);
        return;
    }
    if (reserve_msgs(sv, sv->n_workers) != 0) { /* every worker or none: the next read retries */
        SV_LOG(SV_LOG_ERROR, "sv.actor", "out of memory giving the workers the host's addresses");
        sv_addrset_unref(set);
        return;
    }
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_msg *m = take_msg(sv);
        m->kind = SV_MSG_SET_OWN_ADDRS;
        m->tcp_fd = m->udp_fd = -1;
        sv_addrset_ref(set);
        m->own_addrs = set;
        sv_worker_post(sv->workers[w], m);
    }
    sv_addrset_unref(sv->own_addrs);
    sv->own_addrs = set;
}

/* ---- sockets ------------------------------------------------------------------------------------ */

static int parse_bind(const sv_bind *b, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, b->address, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(b->port);
        *len = sizeof *a4;
        return 0;
    }
    if (inet_pton(AF_INET6, b->address, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(b->port);
        *len = sizeof *a6;
        return 0;
    }
    return -EINVAL;
}

/* One SO_REUSEPORT socket bound to @p b. @return the fd or a negative errno. */
static int bind_socket(const sv_bind *b, int type)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_bind(b, &ss, &len) != 0)
        return -EINVAL;
    int fd = socket(ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (ss.ss_family == AF_INET6) {
        /* "::" serves IPv4 too; a specific IPv6 address serves only itself */
        int v6only = !IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static void close_fds(staged_listener *s, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (s->tcp_fds[i] >= 0)
            close(s->tcp_fds[i]);
        if (s->udp_fds[i] >= 0)
            close(s->udp_fds[i]);
        s->tcp_fds[i] = s->udp_fds[i] = -1;
    }
}

static int bind_all(sv_supervisor *sv, staged_listener *s, const sv_inbound_spec *in, sv_error *err)
{
    unsigned n = sv->n_workers;
    for (unsigned i = 0; i < n; i++)
        s->tcp_fds[i] = s->udp_fds[i] = -1;
    /* SO_REUSEPORT would share the port with a stale second katana silently (issue 15) */
    struct sockaddr_storage ss;
    socklen_t len;
    char who[128];
    if (parse_bind(&in->bind, &ss, &len) == 0 &&
        (sv_addr_held_elsewhere((struct sockaddr *)&ss, SOCK_STREAM, who, sizeof who) != 0 ||
         (in->udp && sv_addr_held_elsewhere((struct sockaddr *)&ss, SOCK_DGRAM, who, sizeof who) != 0)))
        return sv_error_set(err, -EADDRINUSE, "inbound %s: binding %s failed: the port is held "
                            "by %s", in->tag, s->l.bind, who);
    for (unsigned i = 0; i < n; i++) {
        int fd = bind_socket(&in->bind, SOCK_STREAM);
        int ufd = fd >= 0 && in->udp ? bind_socket(&in->bind, SOCK_DGRAM) : -1;
        int rc = fd < 0 ? fd : (in->udp && ufd < 0 ? ufd : 0);
        if (fd >= 0)
            s->tcp_fds[i] = fd;
        if (ufd >= 0)
            s->udp_fds[i] = ufd;
        if (rc < 0) {
            close_fds(s, n);
            return sv_error_set(err, rc, "inbound %s: binding %s failed: %s", in->tag, s->l.bind,
                                strerror(-rc));
        }
    }
    return 0;
}

/* ---- prepare ------------------------------------------------------------------------------------ */

/*
 * Set @p err to seed 001's build error, "building {resource} failed: {source}" (ApplyError::Build,
 * e.g. "building outbound direct@v2 failed: interface nosuchif0: no such interface on this
 * host"). @p source is the builder's message; its own "{kind}{tag}: " prefix (@p kind
 * "outbound " or "inbound ") is dropped, since @p resource names the resource already, and a
 * message that is a build error already ("building ...") is kept as it is. @return @p rc.
 */
static int build_failed(sv_error *err, int rc, const char *resource, const char *tag,
                        const char *kind, const char *source)
{
    if (strncmp(source, "building ", 9) == 0)
        return sv_error_set(err, rc, "%s", source);
    size_t kl = strlen(kind), tl = strlen(tag);
    if (strncmp(source, kind, kl) == 0 && strncmp(source + kl, tag, tl) == 0 &&
        strncmp(source + kl + tl, ": ", 2) == 0)
        source += kl + tl + 2;
    return sv_error_set(err, rc, "building %s failed: %s", resource, source);
}

static const sv_step *find_step(const sv_plan *plan, enum sv_resource res, enum sv_step_kind kind,
                                const char *tag)
{
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *s = &plan->steps[i];
        if (s->resource == res && s->kind == kind && strcmp(s->tag, tag) == 0)
            return s;
    }
    return NULL;
}

static ctl_listener *running_listener(sv_supervisor *sv, const char *tag)
{
    for (size_t i = 0; i < sv->n_listeners; i++)
        if (strcmp(sv->listeners[i].tag, tag) == 0)
            return &sv->listeners[i];
    return NULL;
}

static ctl_listener *listener_by_bind(sv_supervisor *sv, const char *bind)
{
    for (size_t i = 0; i < sv->n_listeners; i++)
        if (strcmp(sv->listeners[i].bind, bind) == 0)
            return &sv->listeners[i];
    return NULL;
}

static void running_view(const sv_supervisor *sv, sv_running *r)
{
    r->spec = sv->has_running ? &sv->running : NULL;
    r->outbound_versions = sv->versions;
    r->versions = sv->tag_versions;
    r->n_versions = sv->n_tag_versions;
}

static void prepared_free(sv_supervisor *sv, prepared *p, size_t n_outbounds)
{
    sv_plane_unref(p->plane);
    if (p->has_spec)
        sv_spec_free(&p->spec);
    for (size_t i = 0; p->targets != NULL && i < n_outbounds; i++)
        sv_target_unref(p->targets[i]);
    free(p->targets);
    for (size_t i = 0; i < p->n_was; i++)
        sv_target_unref(p->was[i]);
    free(p->was);
    free(p->versions);
    free(p->tag_versions);
    sv_routes_ref_unref(p->routes);
    for (size_t i = 0; i < p->n_ls; i++) {
        if (p->ls[i].is_new && sv != NULL)
            close_fds(&p->ls[i], sv->n_workers);
        sv_handler_unref(p->ls[i].l.handler);
        sv_replay_ref_unref(p->ls[i].l.replay);
    }
    free(p->ls);
    memset(p, 0, sizeof *p);
}

/* Targets per outbound: the running one when reused, else a new version; a new one's socket
 * policy is tried on the host first (issue 13: refused at apply, not at the first flow). */
static int prepare_outbounds(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec,
                             prepared *p, sv_error *err)
{
    static const sv_socket_policy no_policy;
    size_t n = spec->n_outbounds;
    p->targets = calloc(n ? n : 1, sizeof *p->targets);
    p->versions = calloc(n ? n : 1, sizeof *p->versions);
    if (p->targets == NULL || p->versions == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const sv_outbound_spec *o = &spec->outbounds[i];
        const sv_step *st = find_step(plan, SV_RES_OUTBOUND, SV_STEP_REUSE, o->tag);
        if (st != NULL && sv != NULL && sv->has_running) {
            for (size_t j = 0; j < sv->running.n_outbounds; j++)
                if (strcmp(sv->running.outbounds[j].tag, o->tag) == 0) {
                    p->targets[i] = sv->targets[j];
                    sv_target_ref(p->targets[i]);
                    p->versions[i] = sv->versions[j];
                }
        }
        if (p->targets[i] == NULL) {
            st = find_step(plan, SV_RES_OUTBOUND, SV_STEP_BUILD, o->tag);
            p->versions[i] = st != NULL ? st->version : 1;
            if (!sv_socket_policy_equal(&o->socket, &no_policy)) {
                sv_error perr = {0};
                int rc = sv_socket_policy_check(&o->socket, o->tag, &perr);
                if (rc != 0) {
                    char what[SV_TAG_MAX + 32];
                    snprintf(what, sizeof what, "outbound %s@v%" PRIu64, o->tag, p->versions[i]);
                    return build_failed(err, rc, what, o->tag, "outbound ", perr.msg);
                }
            }
            p->targets[i] = sv_target_new(o->kind, o->tag, p->versions[i]);
            if (p->targets[i] == NULL)
                return -ENOMEM;
            p->targets[i]->sock = o->socket;
        }
        if (find_step(plan, SV_RES_OUTBOUND, SV_STEP_BUILD, o->tag) != NULL)
            p->publish = true;
    }
    return 0;
}

static int prepare_routes(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec, prepared *p,
                          sv_error *err)
{
    for (size_t i = 0; i < plan->n_steps; i++)
        if (plan->steps[i].kind == SV_STEP_PUBLISH_PLANE || plan->steps[i].kind == SV_STEP_DRAIN)
            p->publish = true;
    bool rebuild = sv == NULL || sv->routes == NULL ||
                   find_step(plan, SV_RES_ROUTE, SV_STEP_BUILD, "") != NULL ||
                   !sv_route_spec_equal(&sv->running.route, &spec->route);
    if (!rebuild) {
        p->routes = sv->routes;
        atomic_fetch_add(&p->routes->refs, 1);
        return 0;
    }
    p->publish = true;
    p->routes = calloc(1, sizeof *p->routes);
    if (p->routes == NULL)
        return -ENOMEM;
    atomic_init(&p->routes->refs, 1);
    return sv_routes_compile(&spec->route, &p->routes->routes, err);
}

/*
 * The TLS context inbound @p in needs (issue 8 "TLS"): NULL without TLS; else @p old when its
 * certificate and settings are unchanged (files compared by content), or a new one. A new pair
 * that does not load is refused with the reason and the old context stays.
 * @return 0 (unchanged or no TLS: *out is a reference on @p old or NULL), 1 (*out is new), or a
 *         negative errno with @p err set.
 */
static int inbound_tls(const sv_inbound_spec *in, sv_tls_ctx *old, sv_tls_ctx **out, sv_error *err)
{
    static const char *const alpn[] = {"http/1.1"};
    static const char *const alpn_h2[] = {"h2", "http/1.1"}; /* gRPC (PROTOCOLS-2 §3.3) */
    *out = NULL;
    if (in->tls.cert == SV_CERT_NONE)
        return 0;
    sv_tls_config cfg = {
        .mode = in->tls.cert == SV_CERT_FILE ? SV_TLS_CERT_FILE : SV_TLS_CERT_SELF,
        .cert_file = in->tls.cert_file,
        .key_file = in->tls.key_file,
        .server_name = in->tls.server_name != NULL ? in->tls.server_name : "localhost",
        .alpn = in->grpc.service_name != NULL ? alpn_h2 : alpn,
        .alpn_count = in->grpc.service_name != NULL ? 2 : 1,
    };
    sv_error terr = {0};
    int rc = sv_tls_ctx_reload_if_changed(old, &cfg, out, &terr);
    if (rc < 0)
        return sv_error_set(err, rc, "inbound %s: certificate refused: %s", in->tag, terr.msg);
    if (rc == 0 && old != NULL)
        *out = sv_tls_ctx_ref(old);
    return rc;
}

/* Stage one inbound: a new listener (BIND), or a new handler for a running one when its
 * settings or its users changed. Unchanged inbounds stage nothing. */
/* What listener @p run's handler was built from (issue 13): the running spec's user set of its
 * inbound, the one with its tag. */
static sv_handler_was handler_was(sv_supervisor *sv, const ctl_listener *run)
{
    sv_handler_was was = {0};
    for (size_t i = 0; run != NULL && sv->has_running && i < sv->running.n_inbounds; i++)
        if (strcmp(sv->running.inbounds[i].tag, run->tag) == 0 &&
            sv->running.inbounds[i].users != NULL) {
            was.handler = run->handler;
            was.users = sv_spec_user_set(&sv->running, sv->running.inbounds[i].users);
        }
    return was;
}

static int prepare_inbound(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec,
                           const sv_inbound_spec *in, prepared *p, sv_error *err)
{
    const sv_user_set *set = sv_spec_user_set(spec, in->users);
    char where[80];
    sv_bind_format(&in->bind, where, sizeof where);
    bool swap = find_step(plan, SV_RES_INBOUND, SV_STEP_SWAP_HANDLER, in->tag) != NULL;
    /* a swap keeps the listener that holds the bind, whatever its tag was (rename) */
    ctl_listener *run = sv == NULL ? NULL : swap ? listener_by_bind(sv, where) : running_listener(sv, in->tag);
    bool bind = find_step(plan, SV_RES_INBOUND, SV_STEP_BIND, in->tag) != NULL || run == NULL;
    bool users_changed = false;
    sv_tls_ctx *tls = NULL, *old_tls = run != NULL && !bind ? run->handler->tls : NULL;
    sv_error terr = {0};
    int rc = inbound_tls(in, old_tls, &tls, &terr);
    if (rc < 0 && old_tls != NULL && !p->certs_only) {
        /* issue 8: a pair that does not load keeps the running one, and an edit of users or
         * settings still applies; sv_reload_certs reports the refusal */
        tls = sv_tls_ctx_ref(old_tls);
        rc = 0;
    }
    char what[SV_TAG_MAX + 16];
    snprintf(what, sizeof what, "inbound %s", in->tag);
    if (rc < 0 && p->certs_only) /* sv_reload_certs reports "inbound x: certificate refused" */
        return sv_error_set(err, rc, "%s", terr.msg);
    if (rc < 0)
        return build_failed(err, rc, what, in->tag, "inbound ", terr.msg);
    if (!bind && !swap) {
        const sv_user_set *old = sv_spec_user_set(&sv->running, in->users);
        users_changed = old == NULL || set == NULL || !sv_user_set_equal(old, set);
        if (!users_changed && rc == 0) {
            sv_tls_ctx_unref(tls);
            return 0;
        }
    }
    staged_listener *s = &p->ls[p->n_ls++];
    memset(s, 0, sizeof *s);
    for (unsigned i = 0; i < SV_WORKERS_MAX; i++)
        s->tcp_fds[i] = s->udp_fds[i] = -1;
    snprintf(s->l.tag, sizeof s->l.tag, "%s", in->tag);
    sv_bind_format(&in->bind, s->l.bind, sizeof s->l.bind);
    s->is_new = bind;
    s->revoke = !bind;
    s->l.replay = run != NULL && !bind ? run->replay : sv_replay_ref_new();
    if (s->l.replay == NULL) {
        sv_tls_ctx_unref(tls);
        return -ENOMEM;
    }
    if (run != NULL && !bind)
        atomic_fetch_add(&s->l.replay->refs, 1);
    s->l.id = run != NULL && !bind ? run->id : 0;
    sv_error herr = {0};
    sv_handler_was was = handler_was(sv, run);
    s->l.handler = sv_handler_new(in, set, &was, s->l.replay, tls, &herr);
    sv_tls_ctx_unref(tls);
    if (s->l.handler == NULL)
        return build_failed(err, herr.code, what, in->tag, "inbound ", herr.msg);
    if (bind && sv != NULL)
        return bind_all(sv, s, in, err);
    return 0;
}

static sv_plane *build_plane(sv_supervisor *sv, const sv_spec *spec, prepared *p);

/* What commit will need of the running supervisor: room for the new listeners and one message
 * per worker for the plane and for each listener it starts, swaps or stops. */
static int prepare_commit(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec, prepared *p)
{
    size_t stops = 0, added = 0;
    for (size_t i = 0; i < plan->n_steps; i++)
        stops += plan->steps[i].kind == SV_STEP_STOP_ACCEPTING;
    for (size_t i = 0; i < p->n_ls; i++)
        added += p->ls[i].is_new;
    if (sv->n_listeners + added > sv->cap_listeners) {
        ctl_listener *grown = realloc(sv->listeners, (sv->n_listeners + added) * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        sv->listeners = grown;
        sv->cap_listeners = sv->n_listeners + added;
    }
    if (reserve_msgs(sv, sv->n_workers * ((p->publish ? 1 : 0) + p->n_ls + stops)) != 0)
        return -ENOMEM;
    if (p->publish && (p->plane = build_plane(sv, spec, p)) == NULL)
        return -ENOMEM;
    if (p->adopt) { /* the last step that can fail is behind: the caller's spec is moved in */
        p->spec = *spec;
        p->has_spec = true;
        return 0;
    }
    if (sv_spec_clone(&p->spec, spec) != 0)
        return -ENOMEM;
    p->has_spec = true;
    return 0;
}

static int prepare(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec, bool adopt,
                   prepared *p, sv_error *err)
{
    memset(p, 0, sizeof *p);
    p->adopt = adopt;
    int rc = prepare_outbounds(sv, plan, spec, p, err);
    if (rc == 0 && sv != NULL) {
        sv_running run;
        running_view(sv, &run);
        rc = sv_plan_versions(&run, plan, &p->tag_versions, &p->n_tag_versions);
    }
    if (rc == 0)
        rc = prepare_routes(sv, plan, spec, p, err);
    if (rc == 0) {
        p->ls = calloc(spec->n_inbounds ? spec->n_inbounds : 1, sizeof *p->ls);
        if (p->ls == NULL)
            rc = -ENOMEM;
    }
    for (size_t i = 0; rc == 0 && i < spec->n_inbounds; i++)
        rc = prepare_inbound(sv, plan, spec, &spec->inbounds[i], p, err);
    if (rc == 0 && sv != NULL)
        rc = prepare_commit(sv, plan, spec, p);
    if (rc == -ENOMEM && (err == NULL || err->code != -ENOMEM))
        sv_error_set(err, rc, "out of memory");
    if (rc != 0)
        prepared_free(sv, p, spec->n_outbounds);
    return rc;
}

/* ---- commit ------------------------------------------------------------------------------------- */

static sv_plane *build_plane(sv_supervisor *sv, const sv_spec *spec, prepared *p)
{
    size_t n = sv_routes_n_slots(p->routes->routes);
    sv_target **slots = calloc(n ? n : 1, sizeof *slots);
    if (slots == NULL)
        return NULL;
    for (size_t s = 0; s < n; s++) {
        const char *tag = sv_routes_slot_tag(p->routes->routes, s);
        for (size_t i = 0; i < spec->n_outbounds; i++)
            if (strcmp(spec->outbounds[i].tag, tag) == 0)
                slots[s] = p->targets[i];
        if (slots[s] == NULL) { /* validation makes this unreachable; never route to NULL */
            free(slots);
            return NULL;
        }
    }
    sv_plane *plane = sv_plane_new(p->routes, slots, n, sv->epoch + 1);
    free(slots);
    return plane;
}

/* Start a listener bound in prepare (room for it was made there). */
static void add_listener(sv_supervisor *sv, staged_listener *s)
{
    s->l.id = ++sv->next_listener_id;
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_handler_ref(s->l.handler);
        post(sv, w, SV_MSG_START_LISTENER, s->l.id, s->l.handler, NULL, s->tcp_fds[w], s->udp_fds[w], false);
        s->tcp_fds[w] = s->udp_fds[w] = -1;
    }
    sv->listeners[sv->n_listeners++] = s->l;
    SV_LOG(SV_LOG_INFO, "sv.listener", "inbound %s listening on %s", s->l.tag, s->l.bind);
    memset(&s->l, 0, sizeof s->l);
}

static void remove_listener_at(sv_supervisor *sv, size_t i)
{
    ctl_listener *l = &sv->listeners[i];
    for (unsigned w = 0; w < sv->n_workers; w++)
        post(sv, w, SV_MSG_STOP_LISTENER, l->id, NULL, NULL, -1, -1, false);
    sv_handler_unref(l->handler);
    sv_replay_ref_unref(l->replay);
    sv->listeners[i] = sv->listeners[--sv->n_listeners];
}

static void swap_listener(sv_supervisor *sv, staged_listener *s, bool revoke)
{
    ctl_listener *run = NULL;
    for (size_t i = 0; i < sv->n_listeners; i++)
        if (sv->listeners[i].id == s->l.id)
            run = &sv->listeners[i];
    if (run == NULL)
        return;
    snprintf(run->tag, sizeof run->tag, "%s", s->l.tag);
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_handler_ref(s->l.handler);
        post(sv, w, SV_MSG_SWAP_HANDLER, run->id, s->l.handler, NULL, -1, -1, revoke);
    }
    sv_handler_unref(run->handler);
    run->handler = s->l.handler;
    s->l.handler = NULL;
}

/* ---- removal and drain policies (issue 12, seed 001 "policies") ------------------------------ */

/* Close, on every worker, the sessions of listener @p id whose principal its current handler no
 * longer admits (a handler swap onto the same handler, with revoke). */
static void revoke_listener(sv_supervisor *sv, uint32_t id)
{
    for (size_t i = 0; i < sv->n_listeners; i++) {
        if (sv->listeners[i].id != id)
            continue;
        for (unsigned w = 0; w < sv->n_workers; w++) {
            sv_handler_ref(sv->listeners[i].handler);
            post(sv, w, SV_MSG_SWAP_HANDLER, id, sv->listeners[i].handler, NULL, -1, -1, true);
        }
    }
}

/* Close outbound version @p id ("tag@vN"), @p t when the running targets held it: its closed
 * token first (seed 000 "Guarded": a dial on it still in flight fails when it completes), then
 * every live flow opened on it is killed. */
static void close_version(sv_supervisor *sv, const char *id, sv_target *t)
{
    if (t != NULL)
        sv_target_close(t);
    sv_flow_filter f = {.outbound = id};
    size_t n = sv_tracker_kill_where(sv->shared.tracker, &f);
    if (n > 0)
        SV_LOG(SV_LOG_INFO, "sv.actor", "drained outbound %s: %zu flow(s) closed", id, n);
}

static void on_grace_closed(uv_handle_t *h)
{
    grace_timer *g = h->data;
    sv_target_unref(g->target);
    free(g);
}

static void grace_end(grace_timer *g)
{
    sv_list_unlink(&g->link);
    uv_timer_stop(&g->timer);
    uv_close((uv_handle_t *)&g->timer, on_grace_closed);
}

static void on_grace(uv_timer_t *t)
{
    grace_timer *g = t->data;
    if (g->listener != 0)
        revoke_listener(g->sv, g->listener);
    else
        close_version(g->sv, g->outbound, g->target);
    grace_end(g);
}

/* Start a CloseAfter timer of @p ms for listener @p listener (non-zero) or outbound version
 * @p outbound (@p t: that target, which the timer holds a reference of, or NULL).
 * @return 0 or -ENOMEM. */
static int grace_start(sv_supervisor *sv, uint32_t ms, uint32_t listener, const char *outbound,
                       sv_target *t)
{
    grace_timer *g = calloc(1, sizeof *g);
    if (g == NULL)
        return -ENOMEM;
    g->sv = sv;
    g->listener = listener;
    g->target = t;
    if (t != NULL)
        sv_target_ref(t);
    snprintf(g->outbound, sizeof g->outbound, "%s", outbound != NULL ? outbound : "");
    uv_timer_init(sv->control, &g->timer);
    g->timer.data = g;
    sv_list_insert_tail(&sv->graces, &g->link);
    uv_timer_start(&g->timer, on_grace, ms, 0);
    return 0;
}

/* Apply the user removal policy of the inbound behind existing listener @p s after its handler
 * swap: Close revokes with the swap, CloseAfter revokes after the grace, Keep never. */
static void swap_with_policy(sv_supervisor *sv, staged_listener *s, const sv_spec *spec,
                             bool revoke)
{
    const sv_inbound_spec *in = NULL;
    for (size_t i = 0; i < spec->n_inbounds; i++)
        if (strcmp(spec->inbounds[i].tag, s->l.tag) == 0)
            in = &spec->inbounds[i];
    sv_policy pol = sv_removal_policy_of(spec, in);
    uint32_t id = s->l.id;
    swap_listener(sv, s, revoke && pol.kind == SV_POLICY_CLOSE);
    if (revoke && pol.kind == SV_POLICY_CLOSE_AFTER &&
        grace_start(sv, pol.grace_ms, id, NULL, NULL) != 0) {
        SV_LOG(SV_LOG_ERROR, "sv.actor", "inbound %s: out of memory for the user removal grace; "
               "closing removed users' sessions now", s->l.tag);
        revoke_listener(sv, id);
    }
}

/* After the publish (every worker adopted the plane): each DRAIN step's policy on its version,
 * found among the targets @p p's commit replaced. */
static void act_on_drains(sv_supervisor *sv, const sv_plan *plan, const prepared *p)
{
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *st = &plan->steps[i];
        if (st->kind != SV_STEP_DRAIN || st->policy.kind == SV_POLICY_KEEP)
            continue;
        char id[SV_TAG_MAX + 16];
        snprintf(id, sizeof id, "%s@v%" PRIu64, st->tag, st->version);
        sv_target *t = NULL;
        for (size_t j = 0; j < p->n_was; j++)
            if (strcmp(p->was[j]->id, id) == 0)
                t = p->was[j];
        if (st->policy.kind == SV_POLICY_CLOSE_AFTER &&
            grace_start(sv, st->policy.grace_ms, 0, id, t) == 0)
            continue;
        close_version(sv, id, t); /* Close, or no room for the timer */
    }
}

static void commit_steps(sv_supervisor *sv, const sv_plan *plan)
{
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *st = &plan->steps[i];
        if (st->kind == SV_STEP_STOP_ACCEPTING) {
            for (size_t j = 0; j < sv->n_listeners; j++)
                if (strcmp(sv->listeners[j].bind, st->bind) == 0) {
                    remove_listener_at(sv, j);
                    break;
                }
        } else if (st->kind == SV_STEP_CLOSE_SESSIONS) {
            sv_tracker_close_sessions(sv->shared.tracker, st->tag, false, 0, 0);
        }
    }
}

/* The targets and versions prepared become the running ones (the plane holds its own references
 * on the targets it routes to). */
static void commit_targets(sv_supervisor *sv, prepared *p)
{
    p->was = sv->targets; /* their references go with p, after the drains */
    p->n_was = sv->has_running ? sv->running.n_outbounds : 0;
    free(sv->versions);
    sv->targets = p->targets;
    sv->versions = p->versions;
    p->targets = NULL;
    p->versions = NULL;
    free(sv->tag_versions);
    sv->tag_versions = p->tag_versions;
    sv->n_tag_versions = p->n_tag_versions;
    p->tag_versions = NULL;
    p->n_tag_versions = 0;
}

static void publish_speed_limits(sv_supervisor *sv, const sv_spec *spec);

/*
 * Commit in seed 001's order ("commit"; seed 000 "publish the plane"): speed limits → targets →
 * plane (epoch + 1, when the plan publishes) → start listeners → swap handlers (each with its
 * revoke) → stop accepting / close sessions; the drains follow in apply() once every worker has
 * adopted the plane. katana has no user keys to adopt first (users are the frontend's ids), and a
 * revoke travels with its listener's handler swap (supervisor/README.md, "Where katana differs
 * from the seeds"). So no listener started here ever serves a connection on the previous plane.
 * Cannot fail: prepare allocated the plane, the spec copy, the listener room and the messages.
 */
static void commit(sv_supervisor *sv, const sv_plan *plan, prepared *p)
{
    const sv_spec *spec = &p->spec; /* the spec that becomes the running one */
    publish_speed_limits(sv, spec);
    commit_targets(sv, p);
    if (p->plane != NULL) {
        sv->epoch++;
        publish_plane(sv, p->plane);
        p->plane = NULL;
    }
    for (size_t i = 0; i < p->n_ls; i++)
        if (p->ls[i].is_new)
            add_listener(sv, &p->ls[i]);
    for (size_t i = 0; i < p->n_ls; i++)
        if (!p->ls[i].is_new)
            swap_with_policy(sv, &p->ls[i], spec, p->ls[i].revoke);
    commit_steps(sv, plan);
    sv_routes_ref_unref(sv->routes);
    sv->routes = p->routes;
    p->routes = NULL;
    sv_spec_free(&sv->running);
    sv->running = p->spec;
    p->has_spec = false;
    sv->has_running = true;
    refresh_own_addrs(sv); /* an inbound may listen on a new address */
}

/* ---- report ------------------------------------------------------------------------------------- */

static void report_add(char ***list, size_t *n, const char *text)
{
    char **grown = realloc(*list, (*n + 1) * sizeof *grown);
    if (grown == NULL)
        return;
    *list = grown;
    grown[*n] = strdup(text);
    if (grown[*n] != NULL)
        (*n)++;
}

/* The debug line each commit ends with (seed 001 "log lines"): "applied: {} built, {} reused,
 * {} swapped, {} drained", the lengths of those groups of the report. */
static void log_applied(const sv_plan *plan)
{
    size_t n[SV_STEP_DISRUPT + 1] = {0};
    for (size_t i = 0; i < plan->n_steps; i++)
        if (plan->steps[i].kind <= SV_STEP_DISRUPT)
            n[plan->steps[i].kind]++;
    SV_LOG(SV_LOG_DEBUG, "sv.actor", "applied: %zu built, %zu reused, %zu swapped, %zu drained",
           n[SV_STEP_BUILD], n[SV_STEP_REUSE], n[SV_STEP_SWAP_HANDLER], n[SV_STEP_DRAIN]);
}

/* Does @p plan build inbound @p tag (a new tag, as opposed to a rebind of a running one)? */
static bool builds_inbound(const sv_plan *plan, const char *tag)
{
    return find_step(plan, SV_RES_INBOUND, SV_STEP_BUILD, tag) != NULL;
}

/* The report from the plan's steps (seed 001 ApplyReport): reused, built, swapped, drained,
 * rebound (a BIND of an inbound whose tag ran on another bind; a new tag's BIND is only its
 * BUILD), restarted (DISRUPT), removed (CLOSE_SESSIONS). */
static void fill_report(const sv_plan *plan, sv_apply_report *r)
{
    static const char *const kinds[] = {"", "inbound", "outbound", "route", "user set"};
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *s = &plan->steps[i];
        char text[160];
        if (s->resource == SV_RES_OUTBOUND)
            snprintf(text, sizeof text, "outbound %s@v%" PRIu64, s->tag, s->version);
        else
            snprintf(text, sizeof text, "%s %s", kinds[s->resource <= 4 ? s->resource : 0], s->tag);
        switch (s->kind) {
        case SV_STEP_REUSE: report_add(&r->reused, &r->n_reused, text); break;
        case SV_STEP_BUILD: report_add(&r->built, &r->n_built, text); break;
        case SV_STEP_SWAP_HANDLER: report_add(&r->swapped, &r->n_swapped, text); break;
        case SV_STEP_DRAIN: report_add(&r->drained, &r->n_drained, text); break;
        case SV_STEP_CLOSE_SESSIONS: report_add(&r->removed, &r->n_removed, text); break;
        case SV_STEP_DISRUPT: report_add(&r->restarted, &r->n_restarted, text); break;
        case SV_STEP_BIND:
            if (!builds_inbound(plan, s->tag))
                report_add(&r->rebound, &r->n_rebound, text);
            break;
        default: break;
        }
    }
}

/* Issue 12 "Speed limits" (seed 003 publish_speed_limits; seed 001: at the start of every commit
 * and of every user edit's commit): every user of every set of @p spec, the spec being
 * committed, with a speed limit; a user in several sets gets the smallest. A refused apply or
 * user edit never gets here, so it cannot change the limits in force. */
static void publish_speed_limits(sv_supervisor *sv, const sv_spec *spec)
{
    size_t n = 0, at = 0;
    for (size_t i = 0; i < spec->n_user_sets; i++)
        n += spec->user_sets[i].n_users;
    sv_pace_limit *v = calloc(n ? n : 1, sizeof *v);
    if (v == NULL) {
        SV_LOG(SV_LOG_ERROR, "sv.actor", "speed limits: out of memory; the previous ones stay");
        return;
    }
    for (size_t i = 0; i < spec->n_user_sets; i++)
        for (size_t j = 0; j < spec->user_sets[i].n_users; j++) {
            const sv_user *u = &spec->user_sets[i].users[j];
            if (u->speed_limit != 0)
                v[at++] = (sv_pace_limit){u->id, u->speed_limit};
        }
    if (sv_pacers_publish(sv->shared.pacers, v, at, uv_hrtime()) != 0)
        SV_LOG(SV_LOG_ERROR, "sv.actor", "speed limits: out of memory for some users; they "
               "are paced from their next connection");
    free(v);
}

/* ---- public API --------------------------------------------------------------------------------- */

/* sv_apply(), and with @p adopt, sv_apply_take(): @p spec becomes the running spec. */
static int apply(sv_supervisor *sv, const sv_spec *spec, bool adopt, const sv_apply_options *opts,
                 sv_apply_report *report, sv_error *err)
{
    if (sv->shut)
        return sv_error_set(err, -ESHUTDOWN, "the supervisor has shut down");
    sv_running run;
    running_view(sv, &run);
    sv_plan plan = {0};
    int rc = sv_plan_make(&run, spec, &plan, err);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < plan.n_steps; i++)
        if (plan.steps[i].kind == SV_STEP_DISRUPT && (opts == NULL || !opts->allow_disruptive)) {
            rc = sv_error_set(err, -EPERM, "inbound %s: %s; this ends its live connections and needs allow_disruptive",
                              plan.steps[i].tag, plan.steps[i].reason);
            goto out;
        }
    prepared p;
    rc = prepare(sv, &plan, spec, adopt, &p, err);
    if (rc != 0)
        goto out;
    bool published = p.plane != NULL;
    commit(sv, &plan, &p);
    /* issue 8: sv_epoch() is the plane every worker serves new flows with; a drain waits for it,
     * so no worker opens a new flow on the drained version after it */
    if (published && !sv__epoch_wait(&sv->shared, sv->epoch, SV_ADOPT_WAIT_MS))
        SV_LOG(SV_LOG_WARN, "sv.actor", "epoch %" PRIu64 ": not every worker adopted the plane "
               "within %d ms", sv->epoch, SV_ADOPT_WAIT_MS);
    act_on_drains(sv, &plan, &p);
    prepared_free(sv, &p, spec->n_outbounds); /* the replaced targets, after their drains */
    log_applied(&plan);
    if (report != NULL)
        fill_report(&plan, report);
out:
    sv_plan_free(&plan);
    return rc;
}

int sv_apply(sv_supervisor *sv, const sv_spec *spec, const sv_apply_options *opts,
             sv_apply_report *report, sv_error *err)
{
    return apply(sv, spec, false, opts, report, err);
}

int sv_apply_take(sv_supervisor *sv, sv_spec *spec, const sv_apply_options *opts,
                  sv_apply_report *report, sv_error *err)
{
    int rc = apply(sv, spec, true, opts, report, err);
    if (rc == 0)
        memset(spec, 0, sizeof *spec); /* the running spec now */
    return rc;
}

int sv_check(const sv_spec *spec, sv_error *err)
{
    sv_running run = {0};
    sv_plan plan = {0};
    int rc = sv_plan_make(&run, spec, &plan, err);
    if (rc != 0)
        return rc;
    prepared p;
    rc = prepare(NULL, &plan, spec, false, &p, err);
    if (rc == 0)
        prepared_free(NULL, &p, spec->n_outbounds);
    sv_plan_free(&plan);
    return rc;
}

/* User edits (seed 001 "user edits"): no plan, no new plane; only the inbounds admitting the
 * set get a new user table, and sessions of users no longer admitted are revoked. */
/* Replace set @p set_tag by a copy of @p users, or by @p take itself (zeroed, owned here). */
static int edit_users(sv_supervisor *sv, const char *set_tag, const sv_user_set *users,
                      sv_user_set *take, sv_error *err)
{
    sv_user_set taken = {0};
    if (take != NULL) {
        taken = *take;
        memset(take, 0, sizeof *take);
    }
    if (sv->shut || !sv->has_running) {
        sv_user_set_free(&taken);
        return sv_error_set(err, -ESHUTDOWN, "the supervisor has shut down");
    }
    if (sv_spec_user_set(&sv->running, set_tag) == NULL) {
        sv_error_set(err, -ENOENT, "user set %s: no such user set", set_tag);
        sv_user_set_free(&taken);
        return -ENOENT;
    }
    /* the running spec without the edited set's users, which are replaced anyway (issue 13: a
     * copy of 50 000 users to be freed was a third of a reload that changes one) */
    sv_spec next;
    sv_user_set *edited = (sv_user_set *)sv_spec_user_set(&sv->running, set_tag);
    sv_user_set kept = *edited;
    edited->users = NULL;
    edited->n_users = 0;
    int rc = sv_spec_clone(&next, &sv->running);
    *edited = kept;
    if (rc != 0) {
        sv_user_set_free(&taken);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < next.n_user_sets; i++)
        if (strcmp(next.user_sets[i].tag, set_tag) == 0) {
            sv_user_set_free(&next.user_sets[i]);
            if (take != NULL) {
                next.user_sets[i] = taken; /* set tags are unique: taken once */
                memset(&taken, 0, sizeof taken);
            } else {
                rc = sv_user_set_clone(&next.user_sets[i], users);
            }
        }
    sv_user_set_free(&taken);
    if (rc != 0)
        sv_error_set(err, rc, "out of memory");
    if (rc == 0)
        rc = sv_validate(&next, err);
    prepared p = {0};
    sv_plan none = {0};
    if (rc == 0 && (p.ls = calloc(next.n_inbounds ? next.n_inbounds : 1, sizeof *p.ls)) == NULL)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < next.n_inbounds; i++)
        if (next.inbounds[i].users != NULL && strcmp(next.inbounds[i].users, set_tag) == 0 &&
            running_listener(sv, next.inbounds[i].tag) != NULL)
            rc = prepare_inbound(sv, &none, &next, &next.inbounds[i], &p, err);
    if (rc == 0 && reserve_msgs(sv, p.n_ls * sv->n_workers) != 0)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        publish_speed_limits(sv, &next); /* seed 001 "user edits": limits, then revoke and tables */
        for (size_t i = 0; i < p.n_ls; i++)
            swap_with_policy(sv, &p.ls[i], &next, true);
        sv_spec_free(&sv->running);
        sv->running = next;
        memset(&next, 0, sizeof next);
    }
    prepared_free(sv, &p, 0);
    sv_spec_free(&next);
    return rc;
}

static file_id file_id_of(const char *path)
{
    file_id id = {0};
    struct stat st;
    if (path != NULL && stat(path, &st) == 0) {
        id.dev = st.st_dev;
        id.ino = st.st_ino;
        id.size = st.st_size;
        id.mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    }
    return id;
}

static bool file_id_equal(const file_id *a, const file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* Log a refused certificate reload of listener @p l, unless it is the one already logged: the
 * same message for files with the same identity (rename, size and mtime unchanged). */
static void cert_refusal_note(ctl_listener *l, const sv_inbound_spec *in, const sv_error *why)
{
    file_id cert = file_id_of(in->tls.cert_file), key = file_id_of(in->tls.key_file);
    if (l->refused.set && file_id_equal(&cert, &l->refused.cert) &&
        file_id_equal(&key, &l->refused.key) && strcmp(why->msg, l->refused.msg) == 0)
        return;
    l->refused.set = true;
    l->refused.cert = cert;
    l->refused.key = key;
    snprintf(l->refused.msg, sizeof l->refused.msg, "%s", why->msg);
    SV_LOG(SV_LOG_ERROR, "sv.listener", "%s (the current certificate stays)", why->msg);
}

int sv_reload_certs(sv_supervisor *sv, sv_error *err)
{
    if (sv->shut || !sv->has_running)
        return sv_error_set(err, -ESHUTDOWN, "the supervisor has shut down");
    prepared p = {.certs_only = true};
    sv_plan none = {0};
    int first = 0;
    if ((p.ls = calloc(sv->running.n_inbounds ? sv->running.n_inbounds : 1, sizeof *p.ls)) == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < sv->running.n_inbounds; i++) {
        const sv_inbound_spec *in = &sv->running.inbounds[i];
        ctl_listener *run = running_listener(sv, in->tag);
        if (in->tls.cert == SV_CERT_NONE || run == NULL)
            continue;
        sv_error one = {0};
        int rc = prepare_inbound(sv, &none, &sv->running, in, &p, &one);
        if (rc < 0) {
            cert_refusal_note(run, in, &one);
            if (first == 0)
                first = sv_error_set(err, rc, "%s", one.msg);
        } else {
            run->refused.set = false;
        }
    }
    if (reserve_msgs(sv, p.n_ls * sv->n_workers) != 0) {
        prepared_free(sv, &p, 0);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p.n_ls; i++) {
        if (p.ls[i].l.handler == NULL)
            continue;
        SV_LOG(SV_LOG_INFO, "sv.listener", "inbound %s: certificate reloaded", p.ls[i].l.tag);
        swap_listener(sv, &p.ls[i], false);
    }
    prepared_free(sv, &p, 0);
    return first;
}

int sv_set_users(sv_supervisor *sv, const char *set_tag, const sv_user *users, size_t n_users,
                 sv_error *err)
{
    sv_user_set set = {.tag = (char *)set_tag, .users = (sv_user *)users, .n_users = n_users};
    return edit_users(sv, set_tag, &set, NULL, err);
}

int sv_set_users_take(sv_supervisor *sv, sv_user_set *set, sv_error *err)
{
    char *tag = set->tag != NULL ? strdup(set->tag) : NULL;
    if (tag == NULL) {
        sv_user_set_free(set);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    int rc = edit_users(sv, tag, NULL, set, err);
    free(tag);
    return rc;
}

const sv_user_set *sv_running_user_set(sv_supervisor *sv, const char *set_tag)
{
    return sv->has_running ? sv_spec_user_set(&sv->running, set_tag) : NULL;
}

int sv_upsert_user(sv_supervisor *sv, const char *set_tag, const sv_user *user, sv_error *err)
{
    const sv_user_set *cur = sv->has_running ? sv_spec_user_set(&sv->running, set_tag) : NULL;
    if (cur == NULL)
        return sv_error_set(err, -ENOENT, "user set %s: no such user set", set_tag);
    sv_user *list = calloc(cur->n_users + 1, sizeof *list);
    if (list == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t n = 0;
    bool replaced = false;
    for (size_t i = 0; i < cur->n_users; i++) {
        list[n++] = cur->users[i].id == user->id ? *user : cur->users[i];
        replaced |= cur->users[i].id == user->id;
    }
    if (!replaced)
        list[n++] = *user;
    int rc = sv_set_users(sv, set_tag, list, n, err);
    free(list);
    return rc;
}

int sv_remove_user(sv_supervisor *sv, const char *set_tag, uint64_t id, sv_error *err)
{
    const sv_user_set *cur = sv->has_running ? sv_spec_user_set(&sv->running, set_tag) : NULL;
    if (cur == NULL)
        return sv_error_set(err, -ENOENT, "user set %s: no such user set", set_tag);
    sv_user *list = calloc(cur->n_users ? cur->n_users : 1, sizeof *list);
    if (list == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t n = 0, before = cur->n_users;
    for (size_t i = 0; i < cur->n_users; i++)
        if (cur->users[i].id != id)
            list[n++] = cur->users[i];
    int rc = n == before ? 0 : sv_set_users(sv, set_tag, list, n, err);
    free(list);
    return rc != 0 ? rc : (n < before ? 1 : 0);
}

size_t sv_close(sv_supervisor *sv, const sv_selector *sel)
{
    switch (sel->kind) {
    case SV_SELECT_SESSION:
        return sel->session ? sv_tracker_close_sessions(sv->shared.tracker, NULL, false, 0, sel->session) : 0;
    case SV_SELECT_USER:
        return sv_tracker_close_sessions(sv->shared.tracker, NULL, true, sel->user, 0);
    case SV_SELECT_INBOUND:
        return sel->inbound ? sv_tracker_close_sessions(sv->shared.tracker, sel->inbound, false, 0, 0) : 0;
    case SV_SELECT_ALL:
        return sv_tracker_close_sessions(sv->shared.tracker, NULL, false, 0, 0);
    }
    return 0;
}

long sv_sessions(sv_supervisor *sv, sv_session_info **out) { return sv_tracker_sessions(sv->shared.tracker, out); }
long sv_flows(sv_supervisor *sv, sv_flow_info **out) { return sv_tracker_flows(sv->shared.tracker, out); }
uint64_t sv_epoch(sv_supervisor *sv) { return sv__epoch_now(&sv->shared); }
int sv_set_remote_devices(sv_supervisor *sv, const sv_device_count *v, size_t n)
{
    return sv_tracker_set_remote_devices(sv->shared.tracker, v, n);
}
sv_refused_counts sv_refused_clients(sv_supervisor *sv)
{
    _Atomic uint64_t *r = sv->shared.refused;
    return (sv_refused_counts){
        .drained = atomic_load_explicit(&r[SV_PROBE_DRAIN - 1], memory_order_relaxed),
        .closed = atomic_load_explicit(&r[SV_PROBE_CLOSE - 1], memory_order_relaxed),
        .fallback = atomic_load_explicit(&r[SV_PROBE_FALLBACK - 1], memory_order_relaxed),
    };
}
sv_ss_scan_counts sv_ss_scans(sv_supervisor *sv)
{
    return (sv_ss_scan_counts){
        .queued = atomic_load_explicit(&sv->shared.ss_scans_queued, memory_order_relaxed),
        .run = atomic_load_explicit(&sv->shared.ss_scans_run, memory_order_relaxed),
        .dropped = atomic_load_explicit(&sv->shared.ss_scans_dropped, memory_order_relaxed),
    };
}

/* ---- hints across a restart (issue 13) ------------------------------------------------------- */

#define HINTS_WAIT_MS 1000 /**< sv_hints_export waits this long at most for the workers */

/* By inbound, then IP, the most recent first. */
static int hint_by_ip(const void *a, const void *b)
{
    const sv_ip_hint *x = a, *y = b;
    int c = strcmp(x->inbound, y->inbound);
    if (c == 0)
        c = memcmp(x->ip, y->ip, sizeof x->ip);
    return c != 0 ? c : (x->age_s > y->age_s) - (x->age_s < y->age_s);
}

/* By inbound, the most recent first. */
static int hint_by_age(const void *a, const void *b)
{
    const sv_ip_hint *x = a, *y = b;
    int c = strcmp(x->inbound, y->inbound);
    return c != 0 ? c : (x->age_s > y->age_s) - (x->age_s < y->age_s);
}

long sv_hints_export(sv_supervisor *sv, sv_ip_hint **out)
{
    *out = NULL;
    if (sv->shut)
        return -ESHUTDOWN;
    sv_hints_out *o = calloc(1, sizeof *o);
    if (o == NULL)
        return -ENOMEM;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->refs = 1;
    unsigned posted = 0;
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_msg *m = take_msg(sv);
        if (m == NULL)
            break;
        m->kind = SV_MSG_HINTS_EXPORT;
        m->tcp_fd = m->udp_fd = -1;
        m->hints_out = o;
        pthread_mutex_lock(&o->mu);
        o->refs++;
        pthread_mutex_unlock(&o->mu);
        sv_worker_post(sv->workers[w], m);
        posted++;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HINTS_WAIT_MS / 1000;
    pthread_mutex_lock(&o->mu);
    int rc = 0;
    while (o->answered < posted && rc == 0)
        rc = pthread_cond_timedwait(&o->cv, &o->mu, &until);
    bool complete = posted == sv->n_workers && o->answered == posted && !o->short_of_memory;
    o->closed = true;
    sv_ip_hint *v = o->v;
    size_t n = o->n;
    o->v = NULL;
    pthread_mutex_unlock(&o->mu);
    sv__hints_release(o, NULL);
    if (!complete)
        SV_LOG(SV_LOG_WARN, "sv.actor", "client IP hints: not every worker gave its own");
    /* one row per (inbound, IP): the most recent; then at most SV_HINTS_MAX per inbound */
    if (n > 1)
        qsort(v, n, sizeof *v, hint_by_ip);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || strcmp(v[i].inbound, v[k - 1].inbound) != 0 ||
            memcmp(v[i].ip, v[k - 1].ip, sizeof v[i].ip) != 0)
            v[k++] = v[i];
    if (k > 1)
        qsort(v, k, sizeof *v, hint_by_age);
    n = k;
    k = 0;
    for (size_t i = 0, run = 0; i < n; i++) {
        run = i > 0 && strcmp(v[i].inbound, v[i - 1].inbound) == 0 ? run + 1 : 0;
        if (run < SV_HINTS_MAX)
            v[k++] = v[i];
    }
    if (k == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    return (long)k;
}

/* A hint of one listener being resolved: @p h its row of the caller's list, @p idx its user's
 * index in the listener's handler (-1: not admitted there). */
typedef struct hint_pick {
    const sv_ip_hint *h;
    int32_t idx;
} hint_pick;

static int pick_by_user(const void *a, const void *b)
{
    uint64_t x = ((const hint_pick *)a)->h->user, y = ((const hint_pick *)b)->h->user;
    return (x > y) - (x < y);
}

static int pick_by_age(const void *a, const void *b)
{
    uint32_t x = ((const hint_pick *)a)->h->age_s, y = ((const hint_pick *)b)->h->age_s;
    return (x > y) - (x < y);
}

/* Give @p l's workers the hints of @p v for it. @return how many, or -ENOMEM. */
static long import_listener(sv_supervisor *sv, const ctl_listener *l, const sv_ip_hint *v,
                            size_t n, hint_pick *picks)
{
    const sv_handler *h = l->handler;
    if (h == NULL || h->ops->set_guide == NULL || h->n_users < 2)
        return 0; /* keeps no hints */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].age_s < SV_HINT_TTL_S && strcmp(v[i].inbound, l->tag) == 0)
            picks[k++] = (hint_pick){.h = &v[i], .idx = -1};
    if (k == 0)
        return 0;
    /* each user's index: one pass over the handler's users, a search among the picks */
    qsort(picks, k, sizeof *picks, pick_by_user);
    for (size_t u = 0; u < h->n_users; u++) {
        uint64_t id = h->principals[u]->id;
        size_t lo = 0, hi = k;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (picks[mid].h->user < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < k && picks[lo].h->user == id; lo++)
            picks[lo].idx = (int32_t)u;
    }
    size_t kept = 0;
    for (size_t i = 0; i < k; i++)
        if (picks[i].idx >= 0)
            picks[kept++] = picks[i];
    if (kept > 1)
        qsort(picks, kept, sizeof *picks, pick_by_age);
    if (kept > SV_HINTS_MAX)
        kept = SV_HINTS_MAX;
    if (kept == 0)
        return 0;
    sv_hints_in *in = malloc(sizeof *in + kept * sizeof in->rows[0]);
    if (in == NULL || reserve_msgs(sv, sv->n_workers) != 0) {
        free(in);
        return -ENOMEM;
    }
    in->n = kept;
    in->matched = false; /* restored: hints only, the order stays as it is */
    atomic_init(&in->refs, sv->n_workers + 1);
    for (size_t i = 0; i < kept; i++) {
        memcpy(in->rows[i].ip, picks[i].h->ip, 16);
        in->rows[i].idx = picks[i].idx;
        in->rows[i].age_s = picks[i].h->age_s;
    }
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_msg *m = take_msg(sv);
        m->kind = SV_MSG_HINTS_IMPORT;
        m->listener = l->id;
        m->tcp_fd = m->udp_fd = -1;
        sv_handler_ref(l->handler);
        m->handler = l->handler;
        m->hints_in = in;
        sv_worker_post(sv->workers[w], m);
    }
    sv__hints_release(NULL, in);
    return (long)kept;
}

long sv_hints_import(sv_supervisor *sv, const sv_ip_hint *v, size_t n)
{
    if (sv->shut)
        return -ESHUTDOWN;
    hint_pick *picks = n > 0 ? malloc(n * sizeof *picks) : NULL;
    if (n > 0 && picks == NULL)
        return -ENOMEM;
    long given = 0;
    for (size_t i = 0; i < sv->n_listeners && given >= 0; i++) {
        long rc = import_listener(sv, &sv->listeners[i], v, n, picks);
        given = rc < 0 ? rc : given + rc;
    }
    free(picks);
    return given;
}

sv_vision_direct_counts sv_vision_direct(sv_supervisor *sv)
{
    return (sv_vision_direct_counts){
        .in = atomic_load_explicit(&sv->shared.direct[0], memory_order_relaxed),
        .out = atomic_load_explicit(&sv->shared.direct[1], memory_order_relaxed),
        .spliced = atomic_load_explicit(&sv->shared.splice_conns, memory_order_relaxed),
        .splice_bytes = atomic_load_explicit(&sv->shared.splice_bytes, memory_order_relaxed),
        .splice_no_pipe = atomic_load_explicit(&sv->shared.splice_no_pipe, memory_order_relaxed),
    };
}

sv_turn_counts sv_worker_turns(sv_supervisor *sv)
{
    sv_turn_counts c = {0};
    for (size_t w = 0; w < SV_WORKERS_MAX; w++) {
        const sv_turn_row *row = &sv->shared.turns[w];
        for (size_t i = 0; i <= SV_TURN_BUCKETS; i++)
            c.le[i] += atomic_load_explicit(&row->le[i], memory_order_relaxed);
        c.cpu_ns += atomic_load_explicit(&row->cpu_ns, memory_order_relaxed);
    }
    return c;
}

sv_close_counts sv_flow_closes(sv_supervisor *sv)
{
    sv_close_counts c = {{0}};
    for (size_t w = 0; w < SV_WORKERS_MAX; w++)
        for (size_t r = 0; r < SV_CLOSE_REASONS; r++)
            c.n[r] += atomic_load_explicit(&sv->shared.closes[w].n[r], memory_order_relaxed);
    return c;
}

sv_ss_trial_counts sv_ss_trials(sv_supervisor *sv)
{
    return (sv_ss_trial_counts){
        .lookups = atomic_load_explicit(&sv->shared.ss_lookups, memory_order_relaxed),
        .keys = atomic_load_explicit(&sv->shared.ss_keys, memory_order_relaxed),
    };
}
uint64_t sv_device_refusals(sv_supervisor *sv)
{
    return sv_tracker_device_refusals(sv->shared.tracker);
}
long sv_take_usage(sv_supervisor *sv, sv_usage **out) { return sv_tracker_take_usage(sv->shared.tracker, out); }
long sv_usage_snapshot(sv_supervisor *sv, sv_usage **out) { return sv_tracker_usage_snapshot(sv->shared.tracker, out); }
int sv_kill(sv_supervisor *sv, uint64_t id) { return sv_tracker_kill(sv->shared.tracker, id); }
size_t sv_kill_where(sv_supervisor *sv, const sv_flow_filter *f) { return sv_tracker_kill_where(sv->shared.tracker, f); }
int sv_stats_get(sv_supervisor *sv, sv_stats *out) { return sv_tracker_stats(sv->shared.tracker, out); }
int sv_events_next(sv_supervisor *sv, uint64_t *cursor, sv_event *ev) { return sv_tracker_events_next(sv->shared.tracker, cursor, ev); }
uint64_t sv_events_head(sv_supervisor *sv) { return sv_tracker_events_head(sv->shared.tracker); }

/* Issue 33: once the process's connections fell to half their peak since the last trim, and
 * by SV_TRIM_FALL at least, give the freed heap pages back to the kernel (glibc keeps them in
 * each worker thread's arena otherwise: after 5 000 TLS connections closed, RSS stayed at its
 * peak). On the control loop, at most once per sampler tick. */
static void trim_after_fall(sv_supervisor *sv)
{
    uint32_t n = atomic_load(&sv->shared.n_conns);
    if (n > sv->conns_peak) {
        sv->conns_peak = n;
        return;
    }
    if (sv->conns_peak - n < SV_TRIM_FALL || n > sv->conns_peak / 2)
        return;
    malloc_trim(0);
    sv->conns_peak = n;
}

static void on_sample(uv_timer_t *t)
{
    sv_supervisor *sv = t->data;
    uint64_t now = uv_hrtime();
    sv_tracker_tick(sv->shared.tracker, now - sv->last_tick_ns); /* frees closed sessions */
    trim_after_fall(sv);
    sv_pacers_rebalance(sv->shared.pacers, now);
    sv->last_tick_ns = now;
    if (now - sv->own_addrs_read_ns >= (uint64_t)SV_OWN_ADDRS_REFRESH_MS * 1000000u)
        refresh_own_addrs(sv);
}

static int empty_plane(sv_supervisor *sv)
{
    sv_routes_ref *r = calloc(1, sizeof *r);
    sv_target *t = sv_target_new(SV_OUTBOUND_BLACKHOLE, "", 0);
    if (r == NULL || t == NULL || (r->routes = sv_routes_single("")) == NULL ||
        reserve_msgs(sv, sv->n_workers) != 0) {
        free(r);
        sv_target_unref(t);
        return -ENOMEM;
    }
    atomic_init(&r->refs, 1);
    sv_plane *p = sv_plane_new(r, &t, 1, 0);
    sv_routes_ref_unref(r);
    sv_target_unref(t);
    if (p == NULL)
        return -ENOMEM;
    publish_plane(sv, p);
    return 0;
}

/* The soft RLIMIT_NOFILE, UINT64_MAX for none. */
static uint64_t fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        return (uint64_t)rl.rlim_cur;
    return UINT64_MAX;
}

/* Issue 33: the connections one of @p workers keeps before authentication, its share of half
 * of the budget @p total: at least 1. */
static uint32_t preauth_share(uint32_t total, unsigned workers)
{
    uint32_t n = total / 2 / workers;
    return n > 0 ? n : 1;
}

/* The process's connection budget from max_connections (issue 15; one for every worker, issue
 * 33); logs it once at start. */
static uint32_t connection_cap(uint32_t configured, unsigned workers)
{
    uint64_t limit = fd_limit();
    uint32_t total = configured ? configured : sv_max_connections_default(limit);
    uint64_t need = (uint64_t)total * SV_FDS_PER_CONN + SV_FD_RESERVE;
    if (configured && need > limit)
        SV_LOG(SV_LOG_WARN, "sv.supervisor", "max_connections %u needs about %" PRIu64 " file "
               "descriptors but the limit is %" PRIu64 ": when they run out, accepting pauses",
               total, need, limit);
    if (configured)
        SV_LOG(SV_LOG_INFO, "sv.supervisor", "up to %u TCP connections, shared by %u workers "
               "(max_connections); up to %u per worker before authentication", total, workers,
               preauth_share(total, workers));
    else
        SV_LOG(SV_LOG_INFO, "sv.supervisor", "up to %u TCP connections, shared by %u workers "
               "(max_connections, from the file descriptor limit %" PRIu64 "); up to %u per "
               "worker before authentication", total, workers, limit,
               preauth_share(total, workers));
    return total;
}

int sv_supervisor_new(uv_loop_t *control, const sv_options *opts, sv_supervisor **out)
{
    sv_supervisor *sv = calloc(1, sizeof *sv);
    if (sv == NULL)
        return -ENOMEM;
    unsigned n = opts != NULL && opts->workers ? opts->workers : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
    sv->n_workers = n < 1 ? 1 : (n > SV_WORKERS_MAX ? SV_WORKERS_MAX : n);
    sv->control = control;
    sv_list_init(&sv->spare);
    sv_list_init(&sv->graces);
    pthread_mutex_init(&sv->shared.adopt_mu, NULL);
    pthread_rwlock_init(&sv->shared.peers_lock, NULL);
    sv__scan_shared_init(&sv->shared);
    pthread_cond_init(&sv->shared.adopt_cv, NULL);
    if (opts != NULL) {
        sv->shared.dns = opts->dns;
        sv->shared.redis = opts->redis;
    }
    sv->shared.conn_cap = connection_cap(opts != NULL ? opts->max_connections : 0, sv->n_workers);
    sv->shared.preauth_cap = preauth_share(sv->shared.conn_cap, sv->n_workers);
    sv->shared.fd_cap = sv_max_connections_default(fd_limit());
    sv->shared.tracker = sv_tracker_new(sv->n_workers, wake_worker, sv);
    sv->shared.audit = sv_audit_new();
    sv->shared.pacers = sv_pacers_new(opts != NULL ? opts->node_speed_limit : 0);
    if (sv->shared.tracker == NULL || sv->shared.audit == NULL || sv->shared.pacers == NULL) {
        sv_tracker_free(sv->shared.tracker);
        sv_audit_free(sv->shared.audit);
        sv_pacers_free(sv->shared.pacers);
        pthread_cond_destroy(&sv->shared.adopt_cv);
        pthread_mutex_destroy(&sv->shared.adopt_mu);
        pthread_rwlock_destroy(&sv->shared.peers_lock);
        sv__scan_shared_deinit(&sv->shared);
        free(sv);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < sv->n_workers; i++) {
        int rc = sv_worker_start(&sv->workers[i], i, &sv->shared);
        if (rc != 0) {
            sv->n_workers = i;
            sv_supervisor_free(sv);
            return rc;
        }
        sv->shared.n_workers = i + 1;
    }
    pthread_rwlock_wrlock(&sv->shared.peers_lock); /* all run: they may tell each other hints */
    sv->shared.peers = sv->workers;
    sv->shared.n_peers = sv->n_workers;
    sv->shared.post = sv_worker_post;
    pthread_rwlock_unlock(&sv->shared.peers_lock);
    if (empty_plane(sv) != 0) {
        sv_shutdown(sv, 0);
        sv_supervisor_free(sv);
        return -ENOMEM;
    }
    refresh_own_addrs(sv);
    uint32_t every = opts != NULL && opts->sample_interval_ms ? opts->sample_interval_ms : 1000;
    sv->sampler = calloc(1, sizeof *sv->sampler);
    if (sv->sampler != NULL) {
        uv_timer_init(control, sv->sampler);
        sv->sampler->data = sv;
        sv->last_tick_ns = uv_hrtime();
        uv_timer_start(sv->sampler, on_sample, every, every);
    }
    *out = sv;
    return 0;
}

static size_t live_sessions(sv_supervisor *sv)
{
    sv_session_info *list = NULL;
    long n = sv_tracker_sessions(sv->shared.tracker, &list);
    free(list);
    return n > 0 ? (size_t)n : 0;
}

static void wait_sessions(sv_supervisor *sv, uint32_t ms)
{
    for (uint32_t waited = 0; live_sessions(sv) > 0 && waited < ms; waited += 20)
        usleep(20 * 1000);
}

static void on_sampler_closed(uv_handle_t *h) { free(h); }

void sv_shutdown(sv_supervisor *sv, uint32_t grace_ms)
{
    if (sv->shut)
        return;
    sv->shut = true;
    while (!sv_list_is_empty(&sv->graces)) /* grace timers end instead of delaying shutdown */
        grace_end(sv_container_of(sv->graces.next, grace_timer, link));
    while (sv->n_listeners > 0) /* 1. stop accepting */
        remove_listener_at(sv, sv->n_listeners - 1);
    wait_sessions(sv, grace_ms); /* 2. grace for live connections */
    sv_tracker_close_sessions(sv->shared.tracker, NULL, false, 0, 0); /* 3. close the rest */
    wait_sessions(sv, 2000);
    pthread_rwlock_wrlock(&sv->shared.peers_lock); /* no worker posts to another once one may end */
    sv->shared.peers = NULL;
    sv->shared.n_peers = 0;
    pthread_rwlock_unlock(&sv->shared.peers_lock);
    for (unsigned i = 0; i < sv->n_workers; i++) { /* 4. workers end */
        sv_worker_join(sv->workers[i]);
        sv->workers[i] = NULL;
    }
    if (sv->sampler != NULL) {
        uv_timer_stop(sv->sampler);
        uv_close((uv_handle_t *)sv->sampler, on_sampler_closed);
        sv->sampler = NULL;
    }
    uint64_t now = uv_hrtime(); /* 5. a last tick: every byte is in the ledger */
    sv_tracker_tick(sv->shared.tracker, now - sv->last_tick_ns);
    sv->last_tick_ns = now;
}

void sv_supervisor_free(sv_supervisor *sv)
{
    if (sv == NULL)
        return;
    sv_shutdown(sv, 0);
    for (size_t i = 0; sv->has_running && i < sv->running.n_outbounds; i++)
        sv_target_unref(sv->targets[i]);
    free(sv->targets);
    free(sv->versions);
    free(sv->tag_versions);
    sv_routes_ref_unref(sv->routes);
    sv_plane_unref(sv->plane);
    sv_addrset_unref(sv->own_addrs);
    while (sv->n_listeners > 0)
        remove_listener_at(sv, sv->n_listeners - 1);
    free(sv->listeners);
    while (sv->n_spare > 0)
        free(take_msg(sv));
    sv_spec_free(&sv->running);
    sv_tracker_free(sv->shared.tracker);
    sv_audit_free(sv->shared.audit);
    sv_pacers_free(sv->shared.pacers);
    pthread_cond_destroy(&sv->shared.adopt_cv);
    pthread_mutex_destroy(&sv->shared.adopt_mu);
    pthread_rwlock_destroy(&sv->shared.peers_lock);
    sv__scan_shared_deinit(&sv->shared);
    free(sv);
}

long sv_take_audit(sv_supervisor *sv, sv_audit_hit **out)
{
    return sv_audit_take(sv->shared.audit, out);
}

void sv_audit_counts(sv_supervisor *sv, uint64_t *recorded, uint64_t *dropped)
{
    sv_audit_stats(sv->shared.audit, recorded, dropped);
}
