/*
 * The supervisor actor's prepare (seed 001): everything of an apply that can fail, with nothing
 * running touched: the targets per outbound, the routes, each inbound's handler and sockets,
 * the plane, and the room and messages commit needs.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor/actor.h"
#include "supervisor/transport/tls.h"

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

const sv_step *sv__find_step(const sv_plan *plan, enum sv_resource res, enum sv_step_kind kind,
                             const char *tag)
{
    for (size_t i = 0; i < plan->n_steps; i++) {
        const sv_step *s = &plan->steps[i];
        if (s->resource == res && s->kind == kind && strcmp(s->tag, tag) == 0)
            return s;
    }
    return NULL;
}

ctl_listener *sv__running_listener(sv_supervisor *sv, const char *tag)
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

void sv__running_view(const sv_supervisor *sv, sv_running *r)
{
    r->spec = sv->has_running ? &sv->running : NULL;
    r->outbound_versions = sv->versions;
    r->versions = sv->tag_versions;
    r->n_versions = sv->n_tag_versions;
}

void sv__prepared_free(sv_supervisor *sv, prepared *p, size_t n_outbounds)
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
            sv__close_fds(&p->ls[i], sv->n_workers);
        sv_handler_unref(p->ls[i].l.handler);
        sv_replay_ref_unref(p->ls[i].l.replay);
    }
    free(p->ls);
    memset(p, 0, sizeof *p);
}

/* Targets per outbound: the running one when reused, else a new version; a new one's socket
 * policy is tried on the host first (refused at apply, not at the first flow). */
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
        const sv_step *st = sv__find_step(plan, SV_RES_OUTBOUND, SV_STEP_REUSE, o->tag);
        if (st != NULL && sv != NULL && sv->has_running) {
            for (size_t j = 0; j < sv->running.n_outbounds; j++)
                if (strcmp(sv->running.outbounds[j].tag, o->tag) == 0) {
                    p->targets[i] = sv->targets[j];
                    sv_target_ref(p->targets[i]);
                    p->versions[i] = sv->versions[j];
                }
        }
        if (p->targets[i] == NULL) {
            st = sv__find_step(plan, SV_RES_OUTBOUND, SV_STEP_BUILD, o->tag);
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
        if (sv__find_step(plan, SV_RES_OUTBOUND, SV_STEP_BUILD, o->tag) != NULL)
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
                   sv__find_step(plan, SV_RES_ROUTE, SV_STEP_BUILD, "") != NULL ||
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
 * The TLS context inbound @p in needs: NULL without TLS; else @p old when its
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
/* What listener @p run's handler was built from: the running spec's user set of its
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

int sv__prepare_inbound(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec,
                        const sv_inbound_spec *in, prepared *p, sv_error *err)
{
    const sv_user_set *set = sv_spec_user_set(spec, in->users);
    char where[80];
    sv_bind_format(&in->bind, where, sizeof where);
    bool swap = sv__find_step(plan, SV_RES_INBOUND, SV_STEP_SWAP_HANDLER, in->tag) != NULL;
    /* a swap keeps the listener that holds the bind, whatever its tag was (rename) */
    ctl_listener *run = sv == NULL ? NULL : swap ? listener_by_bind(sv, where) : sv__running_listener(sv, in->tag);
    bool bind = sv__find_step(plan, SV_RES_INBOUND, SV_STEP_BIND, in->tag) != NULL || run == NULL;
    bool users_changed = false;
    sv_tls_ctx *tls = NULL, *old_tls = run != NULL && !bind ? run->handler->tls : NULL;
    sv_error terr = {0};
    int rc = inbound_tls(in, old_tls, &tls, &terr);
    if (rc < 0 && old_tls != NULL && !p->certs_only) {
        /* a pair that does not load keeps the running one, and an edit of users or
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
        return sv__bind_all(sv, s, in, err);
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
    if (sv__msgs_reserve(sv, sv->n_workers * ((p->publish ? 1 : 0) + p->n_ls + stops)) != 0)
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

int sv__prepare(sv_supervisor *sv, const sv_plan *plan, const sv_spec *spec, bool adopt,
                prepared *p, sv_error *err)
{
    memset(p, 0, sizeof *p);
    p->adopt = adopt;
    int rc = prepare_outbounds(sv, plan, spec, p, err);
    if (rc == 0 && sv != NULL) {
        sv_running run;
        sv__running_view(sv, &run);
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
        rc = sv__prepare_inbound(sv, plan, spec, &spec->inbounds[i], p, err);
    if (rc == 0 && sv != NULL)
        rc = prepare_commit(sv, plan, spec, p);
    if (rc == -ENOMEM && (err == NULL || err->code != -ENOMEM))
        sv_error_set(err, rc, "out of memory");
    if (rc != 0)
        sv__prepared_free(sv, p, spec->n_outbounds);
    return rc;
}

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
