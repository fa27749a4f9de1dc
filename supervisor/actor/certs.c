/*
 * The supervisor actor's certificate reload: sv_reload_certs rebuilds the TLS contexts of the
 * listeners whose certificate or key files changed, and reports a refused pair once.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "supervisor/actor/actor.h"
#include "supervisor/transport/tls.h"
#include "supervisor/util/log.h"

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

bool sv_inbound_cert_expiry(sv_supervisor *sv, const char *tag, int64_t *not_after)
{
    ctl_listener *l = sv->has_running ? sv__running_listener(sv, tag) : NULL;
    if (l == NULL || l->handler == NULL || l->handler->tls == NULL)
        return false;
    *not_after = sv_tls_ctx_cert_info(l->handler->tls)->not_after;
    return true;
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
        ctl_listener *run = sv__running_listener(sv, in->tag);
        if (in->tls.cert == SV_CERT_NONE || run == NULL)
            continue;
        sv_error one = {0};
        int rc = sv__prepare_inbound(sv, &none, &sv->running, in, &p, &one);
        if (rc < 0) {
            cert_refusal_note(run, in, &one);
            if (first == 0)
                first = sv_error_set(err, rc, "%s", one.msg);
        } else {
            run->refused.set = false;
        }
    }
    if (sv__msgs_reserve(sv, p.n_ls * sv->n_workers) != 0) {
        sv__prepared_free(sv, &p, 0);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p.n_ls; i++) {
        if (p.ls[i].l.handler == NULL)
            continue;
        SV_LOG(SV_LOG_INFO, "sv.listener", "inbound %s: certificate reloaded", p.ls[i].l.tag);
        sv__listener_swap(sv, &p.ls[i], false);
    }
    sv__prepared_free(sv, &p, 0);
    return first;
}
